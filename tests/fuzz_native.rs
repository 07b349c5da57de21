//! Model-based fuzzing: random sequences of add (with empty messages), failing writes, forget, forget-all, import,
//! export and reopen, run against the memory over `MemStore` and against a plain oracle (sessions → turns); after
//! every operation the memory's export, turn and unit counts must equal the oracle's. Seeded, so a divergence is
//! reproduced by its sequence number.
//!
//! Ignored in `cargo test` (the real embedder makes it take a minute): `npm test` runs it through
//! `tests/reliability/run.mjs`; `LOCI_FUZZ_SEQUENCES=10000` runs the long version; `LOCI_FUZZ_JSON` writes the counts.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::BTreeMap;

use loci::memory::{Export, ExportSession, ExportTurn, Memory, MemoryConfig, EXPORT_FORMAT, EXPORT_VERSION};
use loci::store::MemStore;
use loci::types::{MessageInput, TimeInput};
use pollster::block_on;

type Oracle = BTreeMap<String, Vec<(String, String, f64)>>;
type Mem = Memory<MemStore, loci::embed::OnnxRuntime>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

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
                let messages: Vec<MessageInput> = (0..1 + rng.below(3))
                    .map(|i| {
                        clock += 60_000.0;
                        MessageInput {
                            speaker: Some(if i % 2 == 0 { "user" } else { "assistant" }.into()),
                            content: text(&mut rng),
                            time: Some(TimeInput::Millis(clock)),
                            ..Default::default()
                        }
                    })
                    .collect();
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
                    if !oracle.contains_key(&id) {
                        oracle.insert(id, turns);
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

#[test]
#[ignore = "a minute with the real embedder: run by tests/reliability/run.mjs (npm test)"]
fn the_memory_agrees_with_an_oracle_over_random_sequences() {
    let sequences: u64 = std::env::var("LOCI_FUZZ_SEQUENCES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let ops = 25;
    let config = MemoryConfig::default();
    let mut memory = Some(block_on(Memory::open(MemStore::new(), common::embedder(config.embed), config)).unwrap());
    let (mut divergences, mut operations) = (Vec::new(), 0);
    for seed in 0..sequences {
        if let Err(e) = sequence(seed, ops, &mut memory, &mut operations) {
            divergences.push(format!("sequence {seed}: {e}"));
        }
    }
    eprintln!("fuzz: {sequences} sequences, {operations} operations, {} divergences", divergences.len());
    if let Ok(path) = std::env::var("LOCI_FUZZ_JSON") {
        let counts = serde_json::json!({
            "fuzz_sequences": sequences, "fuzz_operations": operations, "fuzz_divergences": divergences.len()
        });
        std::fs::write(path, counts.to_string()).unwrap();
    }
    assert!(divergences.is_empty(), "{}", divergences.iter().take(3).cloned().collect::<Vec<_>>().join("\n"));
}
