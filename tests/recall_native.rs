//! Recall end to end, natively: the default method (hybrid) through `Memory::recall` on a small hand-written
//! multi-session memory, TIR one option away, the lexical index kept in step across reopen and forget, and the
//! `loci-eval` tool run on the LongMemEval fixture.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use loci::memory::{Memory, MemoryConfig, RecallOptions};
use loci::recall::RecallMethod;
use loci::store::MemStore;
use loci::types::{MessageInput, TimeInput};
use pollster::block_on;

fn msg(speaker: &str, content: &str, day: u32) -> MessageInput {
    MessageInput {
        speaker: Some(speaker.into()),
        content: content.into(),
        time: Some(TimeInput::Text(format!("2023-05-{day:02}T10:00:00Z"))),
        ..Default::default()
    }
}

/// Five sittings of two friends; each holds the answer to some of the questions below.
fn sessions() -> Vec<(&'static str, u32, Vec<MessageInput>)> {
    vec![
        (
            "s1-pottery",
            1,
            vec![
                msg("Ana", "I signed up for a pottery class on Thursdays, my first bowl came out lopsided.", 1),
                msg("Ben", "Ha, lopsided bowls have character. Is the studio far?", 1),
                msg("Ana", "Ten minutes by bike, next to the old train station.", 1),
                msg("Ben", "Nice. I spent the weekend fixing my car's brakes instead.", 1),
            ],
        ),
        (
            "s2-adoption",
            3,
            vec![
                msg("Ben", "We finally adopted a dog from the shelter! A three-year-old beagle named Pickle.", 3),
                msg("Ana", "Pickle! That's adorable. How is he settling in?", 3),
                msg("Ben", "He chewed one of my shoes, but he sleeps most of the day.", 3),
                msg("Ana", "Typical beagle. Send photos.", 3),
            ],
        ),
        (
            "s3-trip",
            8,
            vec![
                msg("Ana", "Booked flights to Lisbon for June, my sister's wedding is there.", 8),
                msg("Ben", "Lisbon in June is lovely. Are you staying long?", 8),
                msg("Ana", "Two weeks; after the wedding we drive down to the Algarve coast.", 8),
                msg("Ben", "Try the grilled sardines, and bring sunscreen.", 8),
            ],
        ),
        (
            "s4-work",
            15,
            vec![
                msg("Ben", "Big news: I'm leaving the bank. I start as a data analyst at a hospital next month.", 15),
                msg("Ana", "Congratulations! Why the switch?", 15),
                msg("Ben", "I wanted work that helps people, and the hours are saner.", 15),
                msg("Ana", "That sounds like a great fit for you.", 15),
            ],
        ),
        (
            "s5-pottery-again",
            22,
            vec![
                msg("Ana", "My pottery teacher says my glazing improved; I made a blue vase for my mum.", 22),
                msg("Ben", "From lopsided bowls to vases, well done.", 22),
                msg("Ana", "Pickle would knock it over in a second though!", 22),
                msg("Ben", "He knocks everything over, yesterday it was a lamp.", 22),
            ],
        ),
    ]
}

/// (question, gold sessions)
fn questions() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("What is the name of Ben's dog?", vec!["s2-adoption"]),
        ("Where is Ana's sister getting married?", vec!["s3-trip"]),
        ("What new job did Ben get?", vec!["s4-work"]),
        ("What did Ana make in her pottery class?", vec!["s1-pottery", "s5-pottery-again"]),
        ("Which breed is the dog Ben adopted?", vec!["s2-adoption"]),
        ("Why did Ben leave the bank?", vec!["s4-work"]),
        ("What food did Ben recommend for the trip?", vec!["s3-trip"]),
    ]
}

fn filled(store: MemStore) -> Memory<MemStore, loci::embed::OnnxRuntime> {
    let config = MemoryConfig::default();
    let mut m = block_on(Memory::open(store, common::embedder(config.embed), config)).expect("open");
    for (id, _, messages) in sessions() {
        block_on(m.add_messages(&messages, Some(id), 0.0)).expect("add");
    }
    m
}

fn top(
    m: &mut Memory<MemStore, loci::embed::OnnxRuntime>,
    q: &str,
    k: usize,
    method: RecallMethod,
) -> Vec<(String, f32)> {
    let r = block_on(m.recall(q, RecallOptions { k, method, ..Default::default() })).expect("recall");
    r.sessions.into_iter().map(|s| (s.id, s.score)).collect()
}

#[test]
fn default_recall_finds_every_gold_session_in_the_top_k() {
    let store = MemStore::new();
    let mut m = filled(store.clone());
    assert_eq!(RecallOptions::default().method, RecallMethod::Hybrid, "the hybrid is the library default");
    let mut all_at_gold = 0;
    for (q, gold) in questions() {
        let ranked: Vec<String> =
            top(&mut m, q, gold.len(), RecallMethod::default()).into_iter().map(|s| s.0).collect();
        if gold.iter().all(|g| ranked.iter().any(|r| r == g)) {
            all_at_gold += 1;
        } else {
            eprintln!("{q}: got {ranked:?}, gold {gold:?}");
        }
    }
    // recall_all@|gold| on this fixture: every question.
    assert_eq!(all_at_gold, questions().len());

    // The result carries the evidence: units with their text, rendered context under date headers.
    let r = block_on(m.recall("What is the name of Ben's dog?", RecallOptions::default())).unwrap();
    assert_eq!(r.sessions.len(), 3);
    assert!(r.sessions[0].units[0].text.contains("Pickle"), "{:?}", r.sessions[0].units);
    assert!(r.sessions.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(r.context.contains("### Session s2-adoption"));
}

#[test]
fn tir_is_one_option_away_and_ranks_by_the_best_unit_cosine() {
    let mut m = filled(MemStore::new());
    let q = "Where is Ana's sister getting married?";
    let tir = top(&mut m, q, 5, RecallMethod::Tir);
    assert_eq!(tir[0].0, "s3-trip");
    // TIR scores are cosines; the hybrid's are mixed evidence on another scale.
    assert!(tir.iter().all(|(_, s)| (-1.0..=1.0).contains(s)));
    let bm25 = top(&mut m, q, 5, RecallMethod::Bm25);
    assert_eq!(bm25[0].0, "s3-trip");
    assert!(bm25[0].1 > 0.0);
    for method in RecallMethod::ALL {
        assert_eq!(top(&mut m, q, 1, method)[0].0, "s3-trip", "{}", method.name());
    }
}

#[test]
fn lexical_index_follows_reopen_and_forget() {
    let store = MemStore::new();
    let mut m = filled(store.clone());
    let q = "beagle named Pickle";
    let before = top(&mut m, q, 5, RecallMethod::Bm25);
    drop(m);
    // Reopening rebuilds the lexical index from the stored turns: same scores.
    let config = MemoryConfig::default();
    let mut m = block_on(Memory::open(store, common::embedder(config.embed), config)).expect("reopen");
    assert_eq!(top(&mut m, q, 5, RecallMethod::Bm25), before);
    // A message that completes a trailing pair re-indexes that unit: its new words are found.
    block_on(m.add_messages(&[msg("Ana", "Pickle ate my sandwich, the little thief.", 23)], Some("s6-sandwich"), 0.0))
        .unwrap();
    assert_eq!(top(&mut m, "who ate the sandwich", 1, RecallMethod::Bm25)[0].0, "s6-sandwich");
    block_on(m.add_messages(
        &[msg("Ben", "Beagles and sandwiches, name a more iconic duo.", 23)],
        Some("s6-sandwich"),
        0.0,
    ))
    .unwrap();
    assert_eq!(m.stats().units, 11);
    let r = block_on(m.recall("iconic duo", RecallOptions { k: 1, method: RecallMethod::Bm25, ..Default::default() }))
        .unwrap();
    assert_eq!(r.sessions[0].id, "s6-sandwich");
    assert!(r.sessions[0].units[0].text.contains("sandwich") && r.sessions[0].units[0].text.contains("iconic"));
    block_on(m.forget_all()).unwrap();
    block_on(m.add_messages(&[msg("Ana", "A fresh start.", 24)], Some("new"), 0.0)).unwrap();
    let after = top(&mut m, q, 5, RecallMethod::Bm25);
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].1, 0.0, "nothing of the forgotten sessions is left in the lexical index");
}

/// The benchmark tool runs end to end on the LongMemEval fixture (one memory per question, `_abs` left out) and
/// writes the JSON the issue specifies.
#[test]
fn loci_eval_runs_on_the_longmemeval_fixture() {
    let out = std::env::temp_dir().join(format!("loci-eval-{}.json", std::process::id()));
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/longmemeval_small.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_loci-eval"))
        .args(["longmemeval", "--data", fixture, "--method", "all", "--no-cache", "--json"])
        .arg(&out)
        .output()
        .expect("run loci-eval");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).ok();
    for variant in ["paper", "clean"] {
        let d = &json[variant]["default"];
        assert_eq!(d["method"], "hybrid");
        assert_eq!(d["questions"], 3, "the abstention question is excluded");
        assert_eq!(d["corpora"], 3);
        for key in ["recall_all@3", "recall_any@5", "ndcg_any@10", "embed_seconds", "ms_per_query", "units", "sessions"]
        {
            assert!(d[key].is_number(), "{variant} default {key}: {d}");
        }
        assert!(d["per_category"].as_object().is_some_and(|c| !c.is_empty()));
        for m in ["tir", "bm25", "turn-mean", "tir-sum-2", "session"] {
            assert!(json[variant][m]["recall_all@3"].is_number(), "{variant} {m}");
        }
        // Each haystack is tiny (≤ 4 sessions): every gold session is in the top 10 whatever the method.
        assert_eq!(d["recall_all@10"], 100.0);
    }
}

/// Real LongMemEval files hold pasted documents (a 41,855-character user message) and assistant turns with empty
/// content; `loci-eval` stopped on both. It must finish on them.
#[test]
fn loci_eval_finishes_on_long_and_empty_messages() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/longmemeval_small.json");
    let mut data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let paste: String = "Section 4.2 of the lease: the tenant repaints the flat every five years. ".repeat(700);
    assert!(paste.len() >= 50_000);
    let session = data[0]["haystack_sessions"][0].as_array_mut().unwrap();
    session.push(serde_json::json!({"role": "user", "content": paste}));
    session.push(serde_json::json!({"role": "assistant", "content": ""}));
    let dir = std::env::temp_dir();
    let input = dir.join(format!("loci-eval-messy-{}.json", std::process::id()));
    let out = dir.join(format!("loci-eval-messy-{}.out.json", std::process::id()));
    std::fs::write(&input, data.to_string()).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_loci-eval"))
        .args(["longmemeval", "--method", "default", "--no-cache", "--data"])
        .arg(&input)
        .arg("--json")
        .arg(&out)
        .output()
        .expect("run loci-eval");
    std::fs::remove_file(&input).ok();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).ok();
    assert_eq!(json["paper"]["default"]["questions"], 3);
    assert_eq!(json["paper"]["default"]["recall_all@10"], 100.0);
}

/// A date named in the question lifts the sessions of that day (the sessions' times come from the messages).
#[test]
fn a_named_date_reaches_the_session_of_that_day() {
    let mut m = filled(MemStore::new());
    for (q, gold) in [
        ("What did Ana and Ben talk about on 8 May, 2023?", "s3-trip"),
        ("What news did Ben share on May 15, 2023?", "s4-work"),
    ] {
        assert_eq!(top(&mut m, q, 1, RecallMethod::default())[0].0, gold, "{q}");
    }
    // A month with no year matches that month; dates the memory does not span change nothing.
    let plain = top(&mut m, "What did Ben say about his dog?", 5, RecallMethod::default());
    let dated = top(&mut m, "What did Ben say about his dog in March 2021?", 5, RecallMethod::default());
    assert_eq!(plain.iter().map(|s| &s.0).collect::<Vec<_>>(), dated.iter().map(|s| &s.0).collect::<Vec<_>>());
}

/// The cost of the default at browser scale: 100k units in 1,000 sessions, ranked by the hybrid (two mixes, BM25
/// feedback from the best unit, session BM25, date) against the plain BM25 ranking over the same evidence.
/// Feedback reads its unit's terms from the unit's text, as `Memory::recall` does. Run with
/// `cargo test --release --test recall_native -- --ignored --nocapture`.
#[test]
#[ignore]
fn hybrid_cost_at_100k_units() {
    use loci::index::Bm25Index;
    use loci::recall::{rank, Evidence, Scratch};
    let (units, sessions) = (100_000u32, 1_000u32);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut lex = Bm25Index::new();
    let mut row_session = Vec::new();
    let mut row_unit = Vec::new();
    let mut dense = Vec::new();
    let mut texts = Vec::with_capacity(units as usize);
    for u in 0..units {
        let mut text = String::new();
        for _ in 0..30 {
            // Zipf-like vocabulary of 20k words.
            let r = (next() % 1_000_000) as f64 / 1_000_000.0;
            let w = (20_000f64.powf(r)) as u32;
            text.push_str(&format!("w{w}x "));
        }
        let s = u / (units / sessions);
        lex.insert(u, s, &text);
        texts.push(text);
        row_session.push(s);
        row_unit.push(u);
        dense.push((next() % 1000) as f32 / 1000.0);
    }
    let info: Vec<loci::types::Session> = (0..sessions)
        .map(|s| loci::types::Session {
            id: format!("s{s}"),
            first_time: 1.6e12 + s as f64 * 8.64e7,
            last_time: 1.6e12 + s as f64 * 8.64e7 + 3.6e6,
            turn_count: 200,
            title: None,
        })
        .collect();
    let query = "what did w3x and w40x say about w700x in July 2020?";
    let mut ls = Vec::new();
    let mut sc = Scratch::default();
    let unit_terms = |u: u32| lex.terms_of_parts([texts[u as usize].as_str()]);
    for method in [RecallMethod::Bm25, RecallMethod::Hybrid] {
        let started = std::time::Instant::now();
        let n = 20;
        for _ in 0..n {
            lex.scores_into(&lex.query(query), &mut ls);
            let ev = Evidence {
                dense: &dense,
                row_session: &row_session,
                row_unit: &row_unit,
                lexical: &lex,
                lexical_scores: &ls,
                sessions: sessions as usize,
                query,
                session_info: &info,
                unit_terms: Some(loci::recall::UnitTerms(&unit_terms)),
                stamps: None,
            };
            std::hint::black_box(rank(method, &ev, 10, 1, &mut sc));
        }
        eprintln!(
            "{}: {:.1} ms per query (lexical scoring + rank)",
            method.name(),
            started.elapsed().as_secs_f64() * 1e3 / n as f64
        );
    }
}

/// What a recall costs after its query embedding, over the bench's synthetic memory (`LOCI_RECALL_UNITS` pair units,
/// default 100,000; the questions of `bench/profile-recall.mjs`): a model stand-in embeds in microseconds, so the
/// time is loci's own (lexical scoring, dense scan, ranking, rendering). Prints ms per recall and a digest of the
/// rankings, so that a change meant to be faster can be checked to rank the same. Deterministic enough to compare
/// under `valgrind --tool=callgrind` (instructions, not seconds):
/// `cargo test --release --test recall_native -- --ignored --nocapture recall_cost`.
#[test]
#[ignore]
fn recall_cost_over_the_bench_memory() {
    use common::synthetic::{embedder_over, populate, HashModel};
    let units: u32 = std::env::var("LOCI_RECALL_UNITS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let embedder = embedder_over(HashModel);
    let store = MemStore::new();
    populate(&store, units);
    let mut memory = block_on(Memory::open(store, embedder, MemoryConfig::default())).expect("open");
    memory.index_lexical(usize::MAX);
    let words = "my sister brother went bought cooked visited finished marathon knee physio doctor exam project \
                 deadline Lisbon Berlin Tokyo lake beach museum guitar lesson painting yesterday summer winter";
    let words: Vec<&str> = words.split_whitespace().collect();
    let at = |i: usize| words[i % words.len()];
    let questions: Vec<String> =
        (0..60).map(|i| format!("Did {} {} the {} {}?", at(i), at(i * 7), at(i * 13), at(i * 5))).collect();
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    let mut times = Vec::new();
    for round in 0..2 {
        for q in &questions {
            let started = std::time::Instant::now();
            let r = block_on(memory.recall(q, RecallOptions::default())).unwrap();
            times.push(started.elapsed().as_secs_f64() * 1e3);
            if round == 1 {
                use std::hash::Hash;
                for s in &r.sessions {
                    s.id.hash(&mut digest);
                    s.score.to_bits().hash(&mut digest);
                    s.units.iter().for_each(|u| (u.id, u.score.to_bits()).hash(&mut digest));
                }
                r.context.hash(&mut digest);
            }
        }
    }
    let mut measured = times.split_off(questions.len());
    measured.sort_by(f64::total_cmp);
    use std::hash::Hasher;
    eprintln!(
        "{units} units: recall after the embedding p50 {:.2} ms (p10 {:.2}, p90 {:.2}); rankings digest {:016x}",
        measured[measured.len() / 2],
        measured[measured.len() / 10],
        measured[measured.len() * 9 / 10],
        digest.finish()
    );
}
