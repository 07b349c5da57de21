//! Ranks the sessions of LoCoMo conversation 1 (conv-26) natively with the library defaults and writes the rankings
//! for `tests/browser_locomo.rs`, which must reproduce them in headless Chromium (same code, same model).
#![cfg(not(target_arch = "wasm32"))]

mod common;
mod locomo_fixture;

use loci::memory::{Memory, MemoryConfig, RecallOptions};
use loci::store::MemStore;
use locomo_fixture::{Ranked, NATIVE_RANKINGS};
use pollster::block_on;

#[test]
fn rank_locomo_conversation_natively() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo10.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (LoCoMo lives in ../shared)", path.display()));
    let data: serde_json::Value = serde_json::from_str(&text).unwrap();
    let sample = &data[0];
    let config = MemoryConfig::default();
    let mut m = block_on(Memory::open(MemStore::new(), common::embedder(config.embed), config)).unwrap();
    let sessions = locomo_fixture::sessions(&sample["conversation"]);
    assert_eq!(sessions.len(), 19, "conv-26 has 19 sessions with dialogue");
    for (id, messages) in &sessions {
        block_on(m.add_messages(messages, Some(id), 0.0)).unwrap();
    }
    let questions: Vec<String> =
        sample["qa"].as_array().unwrap().iter().map(|q| q["question"].as_str().unwrap().to_string()).collect();
    let rank = |m: &mut Memory<_, _>, q: &str| {
        let r = block_on(m.recall(q, RecallOptions { k: 3, ..Default::default() })).unwrap();
        Ranked {
            question: q.to_string(),
            sessions: r.sessions.iter().map(|s| s.id.clone()).collect(),
            scores: r.sessions.iter().map(|s| s.score).collect(),
        }
    };
    let rankings: Vec<Ranked> = questions.iter().map(|q| rank(&mut m, q)).collect();
    assert!(rankings.iter().all(|r| r.sessions.len() == 3));
    // Recall is a pure function of the memory: asking again gives the same ranking and scores.
    for r in rankings.iter().step_by(17) {
        assert_eq!(&rank(&mut m, &r.question), r);
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(NATIVE_RANKINGS);
    std::fs::write(&out, serde_json::to_string(&rankings).unwrap()).unwrap();
    println!("ranked {} questions over {} sessions → {}", rankings.len(), sessions.len(), out.display());
}
