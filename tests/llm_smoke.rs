//! Smoke test against a REAL small model (llama.cpp's OpenAI-compatible server from ../shared/tools/local-llm, all
//! from PyPI): the QDP, answer and judge prompts go through it with JSON-schema-constrained output and the replies
//! must parse into our types. Ignored by default; `scripts/test.mjs` starts the endpoint and runs it with
//! `--ignored`, or prints loudly that it was skipped and why.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::msg;

use loci::llm::native::UreqTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use loci::llm::{prompts, structured, LlmRequest};
use loci::memory::{AnswerOptions, Memory, MemoryConfig};
use loci::store::MemStore;
use pollster::block_on;

#[test]
#[ignore = "needs a real model endpoint in LOCI_SMOKE_LLM_URL (scripts/test.mjs starts one)"]
fn real_model_replies_parse_into_our_types() {
    let url = std::env::var("LOCI_SMOKE_LLM_URL").expect("LOCI_SMOKE_LLM_URL");
    let mut config = OpenAiConfig::new(url, "local");
    config.timeout_ms = 120_000;
    let llm = OpenAiClient::new(config, UreqTransport::new()).unwrap();

    let mc = MemoryConfig::default();
    let mut m = block_on(Memory::open(MemStore::new(), common::embedder(mc.embed), mc)).unwrap();
    let garden = [
        msg("Maya", "I planted tomatoes and basil in the raised bed.", "2024-03-02T10:00:00Z"),
        msg("Bot", "Water the basil in the morning.", "2024-03-02T10:01:00Z"),
    ];
    let physio = [
        msg("Maya", "My physiotherapist, Dr. Okafor, wants strength work twice a week.", "2024-04-14T18:30:00Z"),
        msg("Bot", "Squats and step-ups are classics.", "2024-04-14T18:31:00Z"),
    ];
    block_on(m.add_messages(&garden, Some("garden"), 0.0)).unwrap();
    block_on(m.add_messages(&physio, Some("physio"), 0.0)).unwrap();

    // QDP + answer: both calls schema-constrained; `answer` fails with LLM_BAD_REPLY if a reply does not parse.
    let started = std::time::Instant::now();
    let a = block_on(m.answer("Who is Maya's physiotherapist?", &AnswerOptions::default(), &llm, 0.0))
        .expect("QDP and answer replies parse");
    println!("real model answer: {:?} ({} calls, {:?})", a.answer, a.spent.calls, started.elapsed());
    assert_eq!(a.spent.calls, 2);
    assert!(!a.answer.trim().is_empty());
    assert!(a.spent.usage.input_tokens > 0 && !a.spent.usage.estimated, "llama.cpp reports usage");

    // The judge prompt parses too.
    let request = LlmRequest {
        json_schema: Some(prompts::judge_schema()),
        json: true,
        ..LlmRequest::new(prompts::judge("Who is Maya's physiotherapist?", "Dr. Okafor", &a.answer))
    };
    let verdict = block_on(structured::chat_json::<prompts::JudgeReply>(&llm, &request)).expect("judge reply parses");
    println!("real model judge: {:?}", verdict.value);
}
