//! The QA harness end to end against the scripted test server: known replies in, known F1 / BLEU-1 / judge
//! scores and spend out.
#![cfg(not(target_arch = "wasm32"))]

mod common;
mod llm_server;

use llm_server::LlmServer;
use loci::eval::qa::{answer_question, report, QaMode};
use loci::eval::EvalQuestion;
use loci::llm::native::UreqTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use loci::memory::{AnswerOptions, Memory, MemoryConfig};
use loci::store::MemStore;
use loci::types::{MessageInput, TimeInput};
use pollster::block_on;
use serde_json::json;

fn question(id: &str, category: &str, text: &str) -> EvalQuestion {
    EvalQuestion {
        id: id.into(),
        question: text.into(),
        category: category.into(),
        date: None,
        gold_sessions: vec![],
        evidence: vec![],
    }
}

#[test]
fn qa_harness_scores_scripted_answers_exactly() {
    let server = LlmServer::start();
    let mut config = OpenAiConfig::new(server.base_url(), "m");
    config.timeout_ms = 2000;
    let llm = OpenAiClient::new(config, UreqTransport::new()).unwrap();
    let mc = MemoryConfig::default();
    let mut m = block_on(Memory::open(MemStore::new(), common::embedder(mc.embed), mc)).unwrap();
    let say = |s: &str, c: &str| MessageInput {
        speaker: Some(s.into()),
        content: c.into(),
        time: Some(TimeInput::Text("2023-05-08T13:56:00Z".into())),
        ..Default::default()
    };
    block_on(m.add_messages(
        &[say("Ana", "I moved to Paris in 2021."), say("Ben", "I paint and do pottery.")],
        Some("s1"),
        0.0,
    ))
    .unwrap();

    // Per question: QDP reply, answer reply, judge reply; usage fixed so spend is known.
    let usage = json!({"prompt_tokens": 100, "completion_tokens": 5});
    let step = |reply: &str| json!({"reply": reply, "usage": usage});
    server.script(json!([
        step("{\"keep\": [\"1.1\"]}"),
        step("{\"answer\": \"Paris\"}"),
        step("{\"label\": \"CORRECT\"}"),
        step("{\"keep\": [\"1.2\"]}"),
        step("{\"answer\": \"pottery, swimming\"}"),
        step("{\"label\": \"WRONG\"}"),
        step("{\"keep\": []}"),
        step("{\"answer\": \"Not mentioned.\"}"),
        step("{\"label\": \"CORRECT\"}"),
    ]));
    let options = AnswerOptions::default();
    let now = 1_688_205_600_000.0;
    let records = vec![
        block_on(answer_question(
            &mut m,
            &question("q0", "4", "Where did Ana move?"),
            "Paris",
            QaMode::Recall(&options),
            &llm,
            Some(&llm),
            now,
        )),
        block_on(answer_question(
            &mut m,
            &question("q1", "1", "What does Ben do?"),
            "painting, pottery",
            QaMode::Recall(&options),
            &llm,
            Some(&llm),
            now,
        )),
        block_on(answer_question(
            &mut m,
            &question("q2", "5", "What is Ana's dog called?"),
            "Rex",
            QaMode::Recall(&options),
            &llm,
            Some(&llm),
            now,
        )),
    ];
    assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
    assert_eq!(records[0].f1, 1.0);
    assert_eq!(records[0].bleu1, 1.0);
    // Multi-hop: gold {painting, pottery} vs predicted {pottery, swimming}: (0 + 1) / 2.
    assert_eq!(records[1].f1, 0.5);
    // BLEU-1: tokens [pottery , swimming] vs [painting , pottery]: 2 of 3 match, same length → 2/3.
    assert!((records[1].bleu1 - 2.0 / 3.0).abs() < 1e-12, "{}", records[1].bleu1);
    assert_eq!(records[2].f1, 1.0, "adversarial: 'not mentioned' is right");
    assert_eq!(records.iter().map(|r| r.judge).collect::<Vec<_>>(), vec![Some(true), Some(false), Some(true)]);

    let r = report(&records);
    assert_eq!(r.overall.n, 3);
    assert!((r.overall.f1 - 250.0 / 3.0).abs() < 1e-9);
    assert!((r.overall.judge.unwrap() - 200.0 / 3.0).abs() < 1e-9);
    assert_eq!(r.overall.calls_per_question, 2.0, "QDP + answer; the judge is not counted");
    assert_eq!((r.overall.input_tokens_per_question, r.overall.output_tokens_per_question), (200.0, 10.0));
    assert_eq!(r.per_category["1"].f1, 50.0);
    // q2's pruner kept nothing of a non-empty context: extractive pruning stood in, so the answer had evidence.
    assert_eq!(records.iter().map(|r| r.fallback).collect::<Vec<_>>(), vec![false, false, true]);
    assert_eq!(r.overall.fallbacks, 1);
    assert!(records[2].context_tokens > 0);
    assert_eq!(server.log().len(), 9);
}
