//! Headless Chromium, model-based fuzzing over IndexedDB (the browser counterpart of `fuzz_native.rs`, smaller):
//! random sequences of add (with empty messages), forget, forget-all, import, reopen, and calls made through a
//! second opener that follows the first (the multi-tab path), through the JS API, against a plain oracle (sessions →
//! turns). After every operation the memory's export and counts must equal the oracle's. Seeded: a divergence is
//! reproduced by its sequence number.
#![cfg(target_arch = "wasm32")]

mod browser_common;

use std::collections::BTreeMap;

use browser_common::*;
use loci::web::Memory;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const SEQUENCES: u64 = 12;
const OPS: usize = 12;
const NAME: &str = "t-fuzz";

type Oracle = BTreeMap<String, Vec<(String, String)>>;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const WORDS: &[&str] =
    &["glacier", "sourdough", "physio", "Lisbon", "marathon", "pottery", "guitar", "wedding", "knee"];

fn text(rng: &mut Rng) -> String {
    if rng.below(8) == 0 {
        return String::new(); // skipped and reported, not refused
    }
    (0..3 + rng.below(6)).map(|_| WORDS[rng.below(WORDS.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
}

/// The memory as the oracle sees it, from its export.
async fn observed(m: &Memory) -> Oracle {
    let doc = wait(m.export()).await.expect("export");
    let mut out = Oracle::new();
    for i in 0..len(&doc, "sessions") {
        let s = get(&doc, &format!("sessions.{i}"));
        let turns = (0..len(&s, "turns"))
            .map(|t| (string(&s, &format!("turns.{t}.speaker")), string(&s, &format!("turns.{t}.text"))))
            .collect();
        out.insert(string(&s, "id"), turns);
    }
    out
}

fn export_doc(sessions: &Oracle, clock: &mut f64) -> JsValue {
    let sessions: Vec<_> = sessions
        .iter()
        .map(|(id, turns)| {
            let turns: Vec<_> = turns
                .iter()
                .map(|(speaker, text)| {
                    *clock += 60_000.0;
                    serde_json::json!({"speaker": speaker, "text": text, "time": *clock})
                })
                .collect();
            serde_json::json!({"id": id, "turns": turns})
        })
        .collect();
    let doc = serde_json::json!({"format": "loci-memory-export", "version": 1, "exportedAt": 0,
        "model": loci::embed::MODEL_ID, "sessions": sessions});
    doc.to_string().into()
}

async fn sequence(seed: u64, memory: &mut Memory, follower: &mut Option<Memory>) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut oracle = Oracle::new();
    let mut clock = 1_700_000_000_000.0;
    wait(memory.forget_all()).await.map_err(|e| format!("forget_all: {}", code(&e)))?;
    for step in 0..OPS {
        // A third of the calls go through the follower, when there is one.
        let via_follower = follower.is_some() && rng.below(3) == 0;
        let m: &Memory = if via_follower { follower.as_ref().unwrap() } else { memory };
        let what = match rng.below(100) {
            0..=49 => {
                let session = format!("s{}", rng.below(4));
                let messages: Vec<_> = (0..1 + rng.below(3))
                    .map(|i| {
                        clock += 60_000.0;
                        let speaker = if i % 2 == 0 { "user" } else { "assistant" };
                        serde_json::json!({"speaker": speaker, "content": text(&mut rng), "time": clock})
                    })
                    .collect();
                let kept: Vec<(String, String)> = messages
                    .iter()
                    .filter(|m| !m["content"].as_str().unwrap().is_empty())
                    .map(|m| (m["speaker"].as_str().unwrap().into(), m["content"].as_str().unwrap().into()))
                    .collect();
                let options = js(&serde_json::json!({"session": session}).to_string());
                let report = wait(m.add_messages(js(&serde_json::Value::from(messages).to_string()), options))
                    .await
                    .map_err(|e| format!("step {step}: add: {}", code(&e)))?;
                if len(&report, "turnIds") as usize != kept.len() {
                    return Err(format!(
                        "step {step}: {} turns stored, {} expected",
                        len(&report, "turnIds"),
                        kept.len()
                    ));
                }
                if !kept.is_empty() {
                    oracle.entry(session).or_default().extend(kept);
                }
                "add"
            }
            50..=61 => {
                let session = format!("s{}", rng.below(5));
                let result = wait(m.forget(js(&serde_json::json!({"session": session}).to_string()))).await;
                match (oracle.remove(&session).is_some(), result) {
                    (true, Ok(_)) => {}
                    (false, Err(e)) if code(&e) == "NOT_FOUND" => {}
                    (existed, r) => {
                        return Err(format!(
                            "step {step}: forget {session} (existed: {existed}): {:?}",
                            r.map_err(|e| code(&e))
                        ))
                    }
                }
                "forget"
            }
            62..=64 => {
                wait(m.forget_all()).await.map_err(|e| format!("step {step}: forget_all: {}", code(&e)))?;
                oracle.clear();
                "forget_all"
            }
            65..=79 => {
                let mut doc = Oracle::new();
                let id = format!("s{}", rng.below(6));
                let turns = (0..1 + rng.below(3))
                    .map(|i| {
                        let t = text(&mut rng);
                        let t = if t.is_empty() { "imported".to_string() } else { t };
                        ((if i % 2 == 0 { "user" } else { "assistant" }).to_string(), t)
                    })
                    .collect();
                doc.insert(id.clone(), turns);
                let report = wait(m.import(export_doc(&doc, &mut clock)))
                    .await
                    .map_err(|e| format!("step {step}: import: {}", code(&e)))?;
                let new = !oracle.contains_key(&id);
                if new {
                    oracle.extend(doc);
                }
                if num(&report, "sessionsImported") != if new { 1.0 } else { 0.0 } {
                    return Err(format!("step {step}: import of {id} (new: {new}) reported {report:?}"));
                }
                "import"
            }
            80..=89 => {
                // Reopen: the follower (if any) goes, the leader closes, and a new leader opens the same database.
                if let Some(f) = follower.take() {
                    wait(f.close()).await.map_err(|e| format!("step {step}: close the follower: {}", code(&e)))?;
                }
                wait(memory.close()).await.map_err(|e| format!("step {step}: close: {}", code(&e)))?;
                *memory = open(NAME).await;
                "reopen"
            }
            _ => {
                // A second opener: it follows the one that holds the memory.
                if follower.is_none() {
                    let f = open(NAME).await;
                    if f.is_leader() {
                        return Err(format!("step {step}: a second opener leads"));
                    }
                    *follower = Some(f);
                }
                "follow"
            }
        };
        for (who, m) in std::iter::once(("leader", &*memory)).chain(follower.iter().map(|f| ("follower", f))) {
            let seen = observed(m).await;
            if seen != oracle {
                return Err(format!("step {step} ({what}): the {who} sees {seen:?} != oracle {oracle:?}"));
            }
        }
        let stats = wait(memory.stats()).await.map_err(|e| code(&e))?;
        let turns: usize = oracle.values().map(Vec::len).sum();
        if (num(&stats, "turns") as usize, num(&stats, "sessions") as usize) != (turns, oracle.len()) {
            return Err(format!("step {step} ({what}): stats {stats:?} != oracle {turns}/{}", oracle.len()));
        }
    }
    Ok(())
}

#[wasm_bindgen_test]
async fn the_memory_over_indexeddb_agrees_with_an_oracle() {
    delete(NAME).await;
    let mut memory = open(NAME).await;
    let mut follower = None;
    let mut divergences = Vec::new();
    for seed in 0..SEQUENCES {
        if let Err(e) = sequence(seed, &mut memory, &mut follower).await {
            divergences.push(format!("sequence {seed}: {e}"));
        }
    }
    web_sys::console::log_1(
        &format!("browser fuzz: {SEQUENCES} sequences of {OPS} operations, {} divergences", divergences.len()).into(),
    );
    if let Some(f) = follower {
        wait(f.close()).await.unwrap();
    }
    wait(memory.close()).await.unwrap();
    assert!(divergences.is_empty(), "{}", divergences.join("\n"));
}
