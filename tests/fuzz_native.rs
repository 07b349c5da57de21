//! Model-based fuzzing: random sequences of add (with empty messages), failing writes, forget, forget-all, import,
//! export and reopen, run against the memory over `MemStore` and against a plain oracle (sessions → turns); after
//! every operation the memory's export, turn and unit counts must equal the oracle's. Seeded, so a divergence is
//! reproduced by its sequence number.
//!
//! The distilled variant adds `flush` (distillation through the scripted LLM server, with injected LLM faults —
//! 5xx, malformed and cut JSON — and failing writes) and checks what distillation must keep, whatever the order:
//! episodes and facts only cite turns that exist, no turn is told by two episodes, a reopen changes nothing, and a
//! last clean flush tells every added turn in exactly one episode.
//!
//! Ignored in `cargo test` (the real embedder makes it take a minute): `npm test` runs it through
//! `tests/reliability/run.mjs`; `LOCI_FUZZ_SEQUENCES=10000` runs the long version (the distilled one runs a tenth as
//! many: each flush talks to the server); `LOCI_FUZZ_SHARD=i/n` runs one shard of the seeds (a process per core);
//! `LOCI_FUZZ_JSON` writes the counts.
#![cfg(not(target_arch = "wasm32"))]

mod common;
mod llm_server;

use std::collections::{BTreeMap, BTreeSet};

use common::Rng;
use llm_server::LlmServer;
use loci::distill::DistillConfig;
use loci::llm::native::UreqTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use serde_json::json;

use loci::memory::{Export, ExportSession, ExportTurn, Memory, MemoryConfig, EXPORT_FORMAT, EXPORT_VERSION};
use loci::store::MemStore;
use loci::types::{MessageInput, TimeInput};
use pollster::block_on;

type Oracle = BTreeMap<String, Vec<(String, String, f64)>>;
type Mem = Memory<MemStore, loci::embed::OnnxRuntime>;

const WORDS: &[&str] = &[
    "glacier",
    "sourdough",
    "physio",
    "Lisbon",
    "marathon",
    "pottery",
    "tax",
    "guitar",
    "kids",
    "budget",
    "ramen",
    "interview",
    "seedlings",
    "wedding",
    "knee",
    "library",
    "coast",
    "starter",
    "lasagna",
    "spreadsheet",
];

fn text(rng: &mut Rng) -> String {
    if rng.below(8) == 0 {
        return if rng.below(2) == 0 { String::new() } else { "   ".into() }; // skipped, not refused
    }
    let n = 3 + rng.below(12) as usize;
    (0..n).map(|_| WORDS[rng.below(WORDS.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
}

/// 1 to `most` messages, user and assistant in turn, a minute apart.
fn messages(rng: &mut Rng, most: u64, clock: &mut f64) -> Vec<MessageInput> {
    (0..1 + rng.below(most))
        .map(|i| {
            *clock += 60_000.0;
            MessageInput {
                speaker: Some(if i % 2 == 0 { "user" } else { "assistant" }.into()),
                content: text(rng),
                time: Some(TimeInput::Millis(*clock)),
                ..Default::default()
            }
        })
        .collect()
}

/// The memory as the oracle sees it: sessions → (speaker, text, time), from its export.
fn observed(m: &Mem) -> Oracle {
    m.export(0.0)
        .sessions
        .into_iter()
        .map(|s| (s.id, s.turns.into_iter().map(|t| (t.speaker, t.text, t.time)).collect()))
        .collect()
}

fn units(oracle: &Oracle) -> usize {
    oracle.values().map(|t| t.len().div_ceil(2)).sum()
}

fn as_export(sessions: &Oracle) -> Export {
    let mut doc = Export {
        format: EXPORT_FORMAT.into(),
        version: EXPORT_VERSION,
        exported_at: 0.0,
        model: loci::embed::MODEL_ID.into(),
        encrypted: false,
        sessions: Vec::new(),
    };
    for (id, turns) in sessions {
        doc.sessions.push(ExportSession {
            id: id.clone(),
            title: None,
            turns: turns
                .iter()
                .map(|(speaker, text, time)| ExportTurn {
                    speaker: speaker.clone(),
                    text: text.clone(),
                    caption: None,
                    time: *time,
                })
                .collect(),
        });
    }
    doc
}

/// One sequence; `Err` describes the first divergence.
fn sequence(seed: u64, ops: usize, memory: &mut Option<Mem>, operations: &mut usize) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut oracle = Oracle::new();
    let mut clock = 1_700_000_000_000.0;
    block_on(memory.as_mut().unwrap().forget_all()).map_err(|e| format!("forget_all: {e}"))?;
    for step in 0..ops {
        *operations += 1;
        let m = memory.as_mut().unwrap();
        let op = rng.below(100);
        let what = match op {
            0..=49 => {
                // Add 1–3 messages to one of six sessions; a failing store refuses the whole call.
                let session = format!("s{}", rng.below(6));
                let fail = rng.below(10) == 0;
                let messages = messages(&mut rng, 3, &mut clock);
                m.store().set_fail_writes(fail);
                let result = block_on(m.add_messages(&messages, Some(&session), clock));
                m.store().set_fail_writes(false);
                let kept: Vec<_> = messages
                    .iter()
                    .filter(|x| !x.content.trim().is_empty())
                    .map(|x| {
                        (
                            x.speaker.clone().unwrap(),
                            x.content.clone(),
                            match x.time {
                                Some(TimeInput::Millis(t)) => t,
                                _ => 0.0,
                            },
                        )
                    })
                    .collect();
                match (fail && !kept.is_empty(), result) {
                    (true, Err(e)) if e.code() == "QUOTA_EXCEEDED" => {}
                    (true, r) => return Err(format!("step {step}: a failing write gave {r:?}")),
                    (false, Ok(report)) => {
                        if report.turn_ids.len() != kept.len() {
                            return Err(format!(
                                "step {step}: {} turns stored, {} expected",
                                report.turn_ids.len(),
                                kept.len()
                            ));
                        }
                        if !kept.is_empty() {
                            oracle.entry(session).or_default().extend(kept);
                        }
                    }
                    (false, Err(e)) => return Err(format!("step {step}: add failed: {e}")),
                }
                "add"
            }
            50..=61 => {
                let session = format!("s{}", rng.below(7));
                let result = block_on(m.forget_session(&session));
                match (oracle.remove(&session).is_some(), result) {
                    (true, Ok(())) => {}
                    (false, Err(e)) if e.code() == "NOT_FOUND" => {}
                    (existed, r) => {
                        return Err(format!("step {step}: forget {session} (existed: {existed}) gave {r:?}"))
                    }
                }
                "forget"
            }
            62..=64 => {
                block_on(m.forget_all()).map_err(|e| format!("step {step}: forget_all: {e}"))?;
                oracle.clear();
                "forget_all"
            }
            65..=79 => {
                // Import sessions that may already exist (skipped) beside new ones.
                let mut doc = Oracle::new();
                for _ in 0..1 + rng.below(2) {
                    let id = format!("s{}", rng.below(8));
                    let turns = (0..1 + rng.below(4))
                        .map(|i| {
                            clock += 60_000.0;
                            let mut t = text(&mut rng);
                            if t.trim().is_empty() {
                                t = "imported".into();
                            }
                            (if i % 2 == 0 { "user" } else { "assistant" }.to_string(), t, clock)
                        })
                        .collect();
                    doc.insert(id, turns);
                }
                let report = block_on(m.import(&as_export(&doc), clock, |_, _| {}))
                    .map_err(|e| format!("step {step}: import: {e}"))?;
                let mut imported = 0;
                for (id, turns) in doc {
                    if let std::collections::btree_map::Entry::Vacant(slot) = oracle.entry(id) {
                        slot.insert(turns);
                        imported += 1;
                    }
                }
                if report.sessions_imported != imported {
                    return Err(format!(
                        "step {step}: imported {} sessions, {imported} expected",
                        report.sessions_imported
                    ));
                }
                "import"
            }
            _ => {
                // Reopen over the same store: what was acknowledged is what loads.
                let (store, embedder) = memory.take().unwrap().into_parts();
                *memory = Some(
                    block_on(Memory::open(store, embedder, MemoryConfig::default()))
                        .map_err(|e| format!("step {step}: reopen: {e}"))?,
                );
                "reopen"
            }
        };
        let m = memory.as_ref().unwrap();
        let seen = observed(m);
        if seen != oracle {
            return Err(format!("step {step} ({what}): memory {seen:?} != oracle {oracle:?}"));
        }
        let stats = m.stats();
        let turns: usize = oracle.values().map(Vec::len).sum();
        if (stats.turns, stats.units, stats.sessions) != (turns, units(&oracle), oracle.len()) {
            return Err(format!(
                "step {step} ({what}): stats {}/{}/{} != oracle {turns}/{}/{}",
                stats.turns,
                stats.units,
                stats.sessions,
                units(&oracle),
                oracle.len()
            ));
        }
    }
    Ok(())
}

/// What distillation must keep after any operation (see the module docs); `Err` names the broken invariant.
fn distill_invariants(m: &Mem) -> Result<(), String> {
    let turns: BTreeSet<u64> = m.sessions().iter().flat_map(|s| m.session_turns(&s.id)).map(|t| t.id).collect();
    let episodes = m.episodes();
    let mut told = BTreeSet::new();
    for e in &episodes {
        for t in &e.turn_ids {
            if !turns.contains(t) {
                return Err(format!("episode {} tells turn {t}, which does not exist", e.id));
            }
            if !told.insert(*t) {
                return Err(format!("turn {t} is told by two episodes"));
            }
        }
    }
    let known: BTreeSet<u64> =
        episodes.iter().flat_map(|e| std::iter::once(e.id).chain(e.merged_from.iter().copied())).collect();
    for f in m.facts(false) {
        if let Some(t) = f.turn_ids.iter().find(|t| !turns.contains(t)) {
            return Err(format!("fact {} cites turn {t}, which does not exist", f.id));
        }
        if let Some(e) = f.episode_ids.iter().find(|e| !known.contains(e)) {
            return Err(format!("fact {} cites episode {e}, which does not exist", f.id));
        }
    }
    Ok(())
}

/// Episodes and facts as a reopen must find them.
fn distilled(m: &Mem) -> String {
    let s = m.distill_stats();
    let episodes: Vec<_> = m.episodes().iter().map(|e| (e.id, e.turn_ids.clone(), e.narrative.clone())).collect();
    let facts: Vec<_> = m.facts(true).iter().map(|f| (f.id, f.statement.clone(), f.superseded_by)).collect();
    format!("{} jobs, {} pending, {} parked; {episodes:?}; {facts:?}", s.jobs, s.pending_turns, s.parked.len())
}

/// One distilled sequence against the scripted server; `added` collects the turns added through `add_messages`.
fn distilled_sequence(
    seed: u64,
    ops: usize,
    memory: &mut Option<Mem>,
    server: &LlmServer,
    llm: &OpenAiClient<UreqTransport>,
    counts: &mut BTreeMap<&'static str, usize>,
) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let mut clock = 1_700_000_000_000.0;
    server.reset();
    block_on(memory.as_mut().unwrap().forget_all()).map_err(|e| format!("forget_all: {e}"))?;
    let mut added: BTreeSet<u64> = BTreeSet::new();
    for step in 0..ops {
        *counts.entry("operations").or_default() += 1;
        let m = memory.as_mut().unwrap();
        let what = match rng.below(100) {
            0..=44 => {
                let session = format!("s{}", rng.below(4));
                let fail = rng.below(10) == 0;
                let messages = messages(&mut rng, 4, &mut clock);
                m.store().set_fail_writes(fail);
                let result = block_on(m.add_messages(&messages, Some(&session), clock));
                m.store().set_fail_writes(false);
                if let Ok(report) = result {
                    added.extend(report.turn_ids);
                }
                "add"
            }
            45..=52 => {
                let session = format!("s{}", rng.below(5));
                let _ = block_on(m.forget_session(&session));
                "forget"
            }
            53..=55 => {
                let all: Vec<u64> = m.sessions().iter().flat_map(|s| m.session_turns(&s.id)).map(|t| t.id).collect();
                if !all.is_empty() {
                    let turn = all[rng.below(all.len() as u64) as usize];
                    block_on(m.forget_turn(turn)).map_err(|e| format!("step {step}: forget turn {turn}: {e}"))?;
                }
                "forget_turn"
            }
            56..=57 => {
                block_on(m.forget_all()).map_err(|e| format!("step {step}: forget_all: {e}"))?;
                added.clear();
                "forget_all"
            }
            58..=69 => {
                let before = distilled(m);
                let (store, embedder) = memory.take().unwrap().into_parts();
                let reopened = block_on(Memory::open(store, embedder, distilled_config()))
                    .map_err(|e| format!("step {step}: reopen: {e}"))?;
                let after = distilled(&reopened);
                *memory = Some(reopened);
                if before != after {
                    return Err(format!("step {step}: a reopen changed the distilled state:\n{before}\n{after}"));
                }
                "reopen"
            }
            _ => {
                // Flush, sometimes against a failing endpoint, a broken reply, or a store that refuses writes.
                match rng.below(6) {
                    0 => server.script(json!([{"status": 500, "times": 1 + rng.below(3)}])),
                    1 => server.script(json!([{"raw": "not json"}])),
                    2 => server.script(json!([{"raw": "{\"groups\": [[0, 1"}])),
                    _ => {}
                }
                let fail = rng.below(8) == 0;
                m.store().set_fail_writes(fail);
                clock += 3_600_000.0;
                let result = block_on(m.flush(llm, clock, None, &mut |_| {}));
                m.store().set_fail_writes(false);
                match result {
                    Ok(r) => *counts.entry("llm_failures").or_default() += r.failures,
                    Err(e) if fail && e.code() == "QUOTA_EXCEEDED" => *counts.entry("write_faults").or_default() += 1,
                    Err(e) => return Err(format!("step {step}: flush: {e}")),
                }
                server.reset();
                "flush"
            }
        };
        *counts.entry(what).or_default() += 1;
        let m = memory.as_ref().unwrap();
        distill_invariants(m).map_err(|e| format!("step {step} ({what}): {e}"))?;
    }
    // A last clean flush: every added turn that still exists is told by exactly one episode.
    let m = memory.as_mut().unwrap();
    server.reset();
    clock += 3_600_000.0;
    block_on(m.retry_parked(clock)).map_err(|e| format!("retry parked: {e}"))?;
    loop {
        let report = block_on(m.flush(llm, clock, None, &mut |_| {})).map_err(|e| format!("last flush: {e}"))?;
        match report.next_try {
            Some(t) => clock = clock.max(t),
            None => break,
        }
    }
    distill_invariants(m)?;
    let stats = m.distill_stats();
    if stats.jobs != 0 || stats.pending_turns != 0 || !stats.parked.is_empty() {
        return Err(format!(
            "after a clean flush: {} jobs, {} pending, {} parked",
            stats.jobs,
            stats.pending_turns,
            stats.parked.len()
        ));
    }
    let exists: BTreeSet<u64> = m.sessions().iter().flat_map(|s| m.session_turns(&s.id)).map(|t| t.id).collect();
    let told: BTreeSet<u64> = m.episodes().iter().flat_map(|e| e.turn_ids.clone()).collect();
    let untold: Vec<u64> = added.intersection(&exists).filter(|t| !told.contains(t)).copied().collect();
    if !untold.is_empty() {
        return Err(format!("after a clean flush, added turns {untold:?} are in no episode"));
    }
    Ok(())
}

fn distilled_config() -> MemoryConfig {
    MemoryConfig { distill: Some(DistillConfig { window: 4, ..DistillConfig::default() }), ..Default::default() }
}

#[test]
#[ignore = "a minute with the real embedder: run by tests/reliability/run.mjs (npm test)"]
fn the_memory_agrees_with_an_oracle_over_random_sequences() {
    let all: u64 = std::env::var("LOCI_FUZZ_SEQUENCES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    // `LOCI_FUZZ_SHARD=i/n`: only the seeds ≡ i (mod n), so that a long run can use every core (one process each).
    let (shard, shards) = std::env::var("LOCI_FUZZ_SHARD")
        .ok()
        .and_then(|v| v.split_once('/').and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?))))
        .filter(|&(i, n): &(u64, u64)| i < n)
        .unwrap_or((0, 1));
    let mine = move |seed: &u64| seed % shards == shard;
    let sequences = (0..all).filter(mine).count() as u64;
    let ops = 25;
    let config = MemoryConfig::default();
    let mut memory = Some(block_on(Memory::open(MemStore::new(), common::embedder(config.embed), config)).unwrap());
    let (mut divergences, mut operations) = (Vec::new(), 0);
    for seed in (0..all).filter(mine) {
        if let Err(e) = sequence(seed, ops, &mut memory, &mut operations) {
            divergences.push(format!("sequence {seed}: {e}"));
        }
    }
    eprintln!("fuzz: {sequences} sequences, {operations} operations, {} divergences", divergences.len());

    // Distilled: a tenth as many sequences, each ending in a clean flush.
    let server = LlmServer::start();
    let mut config = OpenAiConfig::new(server.base_url(), "scripted");
    config.timeout_ms = 10_000;
    config.backoff_base_ms = 1;
    config.max_retries = 0; // injected faults reach the job queue
    let llm = OpenAiClient::new(config, UreqTransport::new()).unwrap();
    let distilled_all = (all / 10).max(1);
    let distilled_sequences = (0..distilled_all).filter(mine).count() as u64;
    let config = distilled_config();
    let mut memory = Some(block_on(Memory::open(MemStore::new(), common::embedder(config.embed), config)).unwrap());
    let mut counts = BTreeMap::new();
    let mut distilled_divergences = Vec::new();
    for seed in (0..distilled_all).filter(mine) {
        if let Err(e) = distilled_sequence(seed, 30, &mut memory, &server, &llm, &mut counts) {
            distilled_divergences.push(format!("distilled sequence {seed}: {e}"));
        }
    }
    eprintln!(
        "fuzz (distilled): {distilled_sequences} sequences, {counts:?}, {} divergences",
        distilled_divergences.len()
    );
    divergences.extend(distilled_divergences.iter().cloned());
    if let Ok(path) = std::env::var("LOCI_FUZZ_JSON") {
        let counts = serde_json::json!({
            "fuzz_sequences": sequences + distilled_sequences, "fuzz_operations": operations + counts.get("operations").copied().unwrap_or(0),
            "fuzz_divergences": divergences.len(), "fuzz_distilled_sequences": distilled_sequences,
            "fuzz_distilled_flushes": counts.get("flush").copied().unwrap_or(0),
            "fuzz_distilled_llm_failures": counts.get("llm_failures").copied().unwrap_or(0),
            "fuzz_distilled_write_faults": counts.get("write_faults").copied().unwrap_or(0),
            "fuzz_distilled_divergences": distilled_divergences.len(),
        });
        std::fs::write(path, counts.to_string()).unwrap();
    }
    assert!(divergences.is_empty(), "{}", divergences.iter().take(3).cloned().collect::<Vec<_>>().join("\n"));
}
