//! Every prompt fits the model: a memory whose chat holds a pasted 40,000-character document is distilled and
//! answered through the scripted server set to a 2,048-token context (it answers 400 "exceeds the available context
//! size", as llama.cpp does, to anything longer). With the window told to loci, nothing is ever refused; with a
//! larger window claimed than the server has, the refusals are recognised and the prompts re-sent smaller — never
//! parked as bad jobs. A reply cut at the output cap (`finish_reason: "length"`) is retried and counted. And an
//! endpoint that rate-limits for longer than a call waits is waited for as long as it asks, never parked for.
#![cfg(not(target_arch = "wasm32"))]

mod common;
mod llm_server;

use llm_server::LlmServer;
use loci::distill::DistillConfig;
use loci::embed::OnnxRuntime;
use loci::llm::native::UreqTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use loci::memory::{AnswerOptions, Memory, MemoryConfig};
use loci::recall::prune::PruneMode;
use loci::store::MemStore;
use loci::types::{MessageInput, TimeInput};
use pollster::block_on;
use serde_json::{json, Value};

const CONTEXT: usize = 2048;
const T0: f64 = 1_683_554_160_000.0;

fn client(server: &LlmServer, context_tokens: usize) -> OpenAiClient<UreqTransport> {
    let mut config = OpenAiConfig::new(server.base_url(), "test-model");
    config.timeout_ms = 10_000;
    config.backoff_base_ms = 5;
    config.context_tokens = context_tokens;
    OpenAiClient::new(config, UreqTransport::new()).unwrap()
}

/// A chat about a trip, with a pasted document of 40,000 characters in the middle.
fn chat() -> Vec<MessageInput> {
    let document = "The itinerary: day one, the ferry to the island and a walk to the lighthouse. ".repeat(520);
    assert!(document.len() >= 40_000);
    let texts = [
        "We are planning a trip to the island in June.".to_string(),
        "Nice! Do you have an itinerary yet?".to_string(),
        format!("Here it is, pasted from the travel agency: {document}"),
        "That is a long plan. The lighthouse walk sounds great.".to_string(),
        "Yes, my sister Maria booked the ferry tickets yesterday.".to_string(),
        "Remember to pack a rain jacket for the island.".to_string(),
    ];
    turns(&texts)
}

/// Ana and Ben taking turns, a minute apart.
fn turns(texts: &[String]) -> Vec<MessageInput> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| MessageInput {
            speaker: Some(if i % 2 == 0 { "Ana" } else { "Ben" }.into()),
            content: t.clone(),
            time: Some(TimeInput::Millis(T0 + i as f64 * 60_000.0)),
            ..Default::default()
        })
        .collect()
}

/// Answer options pruning by `mode`, the server emptied and set to the small window first.
fn fresh_answer(server: &LlmServer, mode: PruneMode) -> AnswerOptions {
    server.reset();
    server.config(json!({ "contextTokens": CONTEXT }));
    AnswerOptions { prune: loci::memory::PruneOptions { mode, ..Default::default() }, ..AnswerOptions::default() }
}

fn open(distill: bool) -> Memory<MemStore, OnnxRuntime> {
    let config = MemoryConfig { distill: distill.then(DistillConfig::default), ..Default::default() };
    block_on(Memory::open(MemStore::new(), common::embedder(config.embed), config)).expect("open")
}

fn prompt_tokens(request: &Value) -> usize {
    request["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().len().div_ceil(4) + 4)
        .sum::<usize>()
        + request["body"]["max_tokens"].as_u64().unwrap_or(0) as usize
}

fn distill_everything(server: &LlmServer, claimed_context: usize) -> Memory<MemStore, OnnxRuntime> {
    let llm = client(server, claimed_context);
    let mut m = open(true);
    block_on(m.add_messages(&chat(), Some("trip"), T0)).expect("a 40,000-character message is a normal message");
    let report = block_on(m.flush(&llm, T0 + 1e6, None, &mut |_| {})).expect("flush");
    let errors: Vec<_> = m.distilled().jobs.values().filter_map(|j| j.last_error.clone()).collect();
    assert_eq!((report.failures, report.parked, report.jobs_left), (0, 0, 0), "{report:?} {errors:?}");
    m
}

#[test]
fn distillation_fits_a_small_window_told_or_not() {
    let server = LlmServer::start();
    server.config(json!({ "contextTokens": CONTEXT }));

    let m = distill_everything(&server, CONTEXT);
    let log = server.log();
    let biggest = log.iter().map(prompt_tokens).max().unwrap();
    assert!(biggest <= CONTEXT, "a request of {biggest} tokens was sent to a {CONTEXT}-token model");
    let stats = m.stats();
    assert!(stats.llm.segment.cut + stats.llm.narrate.cut + stats.llm.distill.cut >= 1, "the document was cut to fit");
    assert_eq!(stats.llm.narrate.shrunk + stats.llm.segment.shrunk + stats.llm.distill.shrunk, 0, "nothing refused");
    let covered: usize = m.episodes().iter().map(|e| e.turn_ids.len()).sum();
    assert_eq!(covered, chat().len(), "every turn, the document's too, is in an episode");
    assert!(!m.facts(false).is_empty());

    // A window claimed larger than the model has: the refusals come back as context errors and are re-sent smaller.
    server.reset();
    server.config(json!({ "contextTokens": CONTEXT }));
    let m = distill_everything(&server, 4 * CONTEXT);
    let log = server.log();
    let refused = log.iter().filter(|r| prompt_tokens(r) > CONTEXT).count();
    assert!(refused >= 1, "the test must exercise a refusal");
    let l = m.stats().llm;
    assert_eq!(
        l.segment.shrunk + l.narrate.shrunk + l.distill.shrunk + l.merge.shrunk + l.consolidate.shrunk,
        refused as u64
    );
    assert_eq!(l.segment.errors + l.narrate.errors + l.distill.errors, 0, "no job failed for the size of its prompt");
}

#[test]
fn answers_fit_and_a_reply_cut_at_the_cap_is_retried_and_counted() {
    let server = LlmServer::start();
    server.config(json!({ "contextTokens": CONTEXT }));
    let llm = client(&server, CONTEXT);
    let mut m = open(false);
    block_on(m.add_messages(&chat(), Some("trip"), T0)).unwrap();
    // The first call (pruning) rambles to its cap; the retry answers.
    server.script(json!([{ "cut": 8 }]));
    let a =
        block_on(m.answer("Who booked the ferry tickets?", &AnswerOptions::default(), &llm, T0 + 1e6)).expect("answer");
    assert!(server.log().iter().all(|r| prompt_tokens(r) <= CONTEXT));
    assert!(a.context.contains("Maria booked the ferry"), "context: {}", &a.context[..a.context.len().min(600)]);
    // The pasted document comes first in the context; in the answer's prompt it is what gets cut, not the line after
    // it that answers the question.
    let answer_prompt = server.log().last().unwrap()["body"]["messages"].to_string();
    assert!(a.context.find("itinerary") < a.context.find("Maria booked"), "the document is the earlier line");
    assert!(answer_prompt.contains("Maria booked the ferry") && answer_prompt.contains("[…]"), "{answer_prompt:.600}");
    let l = m.stats().llm;
    assert_eq!((l.prune.truncated, l.prune.calls, l.answer.calls), (1, 2, 1), "{l:?}");
    assert!(l.prune.cut >= 1, "the pruning prompt quoted the document cut");
}

#[test]
fn a_rate_limited_endpoint_is_waited_for_as_long_as_it_asks_and_never_parks_a_job() {
    let server = LlmServer::start();
    let llm = client(&server, CONTEXT);
    let mut m = open(true);
    block_on(m.add_messages(&chat()[..2], Some("trip"), T0)).unwrap();
    // More 429s than a job's failures allowed (5), each asking for an hour: longer than a call waits (60 s).
    let limits = 2 * loci::distill::DistillConfig::default().max_attempts as usize;
    server.script(json!([{ "status": 429, "retryAfter": 3600, "times": limits }]));
    let mut now = T0 + 1e6;
    let mut report = block_on(m.flush(&llm, now, None, &mut |_| {})).expect("flush");
    for limited in 1..=limits {
        assert_eq!((report.failures, report.parked), (1, 0), "429 #{limited}: failed, not parked: {report:?}");
        assert_eq!(server.log().len(), limited, "one request per 429: none retried sooner");
        let next = report.next_try.expect("the job waits");
        assert!(
            next >= now + 3_600_000.0,
            "429 #{limited}: retried after {} s, not the hour asked",
            (next - now) / 1e3
        );
        // Not before the time asked.
        let early = block_on(m.run_jobs(&llm, next - 1.0, None, &mut |_| {})).unwrap();
        assert_eq!((early.jobs_run, early.failures), (0, 0));
        now = next;
        report = block_on(m.run_jobs(&llm, now, None, &mut |_| {})).expect("run jobs");
    }
    // The endpoint answers again: the job runs, nothing was parked on the way.
    loop {
        assert_eq!((report.failures, report.parked), (0, 0), "{report:?}");
        match report.next_try {
            Some(t) => report = block_on(m.run_jobs(&llm, now.max(t), None, &mut |_| {})).unwrap(),
            None => break,
        }
    }
    assert!(m.distill_stats().parked.is_empty());
    assert_eq!(m.episodes().iter().map(|e| e.turn_ids.len()).sum::<usize>(), 2, "both turns distilled");
}

/// A pasted document of ~40,000 characters whose one line that answers the question sits past its middle, among
/// lines that share none of the question's rarer words.
fn report_with_a_buried_fact() -> (String, &'static str) {
    let rooms = ["kitchen", "hallway", "attic", "garage", "porch", "cellar", "study", "bathroom"];
    let tasks = ["repainted", "inspected", "cleaned", "measured", "photographed", "rewired", "sealed", "sanded"];
    let fact = "The spare key for the cabin is hidden under the blue flowerpot beside the woodshed.";
    let mut lines = Vec::new();
    for i in 0..420 {
        if i == 260 {
            lines.push(fact.to_string());
        }
        lines.push(format!(
            "Item {i}: the {} was {} on day {} by the crew, and the notes say it took {} hours.",
            rooms[i % rooms.len()],
            tasks[(i / 3) % tasks.len()],
            1 + i % 28,
            2 + i % 5
        ));
    }
    let document = lines.join("\n");
    assert!(document.len() >= 38_000 && document.len() <= 45_000, "{}", document.len());
    (document, fact)
}

#[test]
fn a_question_about_the_middle_of_a_pasted_document_reads_that_part_of_it() {
    let server = LlmServer::start();
    server.config(json!({ "contextTokens": CONTEXT }));
    let llm = client(&server, CONTEXT);
    let mut m = open(false);
    let (document, fact) = report_with_a_buried_fact();
    let texts = [
        "Here is the renovation report from the contractor:".to_string(),
        document,
        "Thanks, I will read it tonight.".to_string(),
    ];
    let messages = turns(&texts);
    block_on(m.add_messages(&messages, Some("report"), T0)).unwrap();
    for mode in [PruneMode::None, PruneMode::Llm] {
        let options = fresh_answer(&server, mode);
        block_on(m.answer("Where is the spare key for the cabin hidden?", &options, &llm, T0 + 1e6)).expect("answer");
        let log = server.log();
        assert!(log.iter().all(|r| prompt_tokens(r) <= CONTEXT));
        for request in &log {
            let prompt = request["body"]["messages"].to_string();
            assert!(prompt.contains("[…]"), "{mode:?}: the document was cut to fit");
            assert!(
                prompt.contains(fact),
                "{mode:?}: a prompt of {} characters left out the line that answers",
                prompt.len()
            );
        }
    }
}

/// A pasted document is often the question itself ("Here is the report: …"): the answer's prompt and pruning's keep
/// its opening and its end (where a paste says what is wanted of it) within the window, on a plain memory and on a
/// distilled one.
#[test]
fn a_pasted_document_sent_as_the_question_is_answered_within_the_window() {
    let server = LlmServer::start();
    server.config(json!({ "contextTokens": CONTEXT }));
    let llm = client(&server, CONTEXT);
    let (document, _) = report_with_a_buried_fact();
    let question =
        format!("Here is the renovation report from the contractor:\n{document}\nWhat should I check first?");
    let mut plain = open(false);
    block_on(plain.add_messages(&chat(), Some("trip"), T0)).unwrap();
    let mut distilled = distill_everything(&server, CONTEXT);
    for (name, m) in [("plain", &mut plain), ("distilled", &mut distilled)] {
        for mode in [PruneMode::None, PruneMode::Llm] {
            let options = fresh_answer(&server, mode);
            let started = std::time::Instant::now();
            let answered = if name == "plain" {
                block_on(m.answer(&question, &options, &llm, T0 + 1e6))
            } else {
                block_on(m.answer_distilled(&question, Default::default(), &options, &llm, T0 + 1e6))
            };
            answered.unwrap_or_else(|e| panic!("{name}, {mode:?}: {e}"));
            eprintln!("{name}, {mode:?}: answered in {:?}", started.elapsed());
            let log = server.log();
            assert!(!log.is_empty());
            for request in &log {
                assert!(prompt_tokens(request) <= CONTEXT, "{name}, {mode:?}: {} tokens", prompt_tokens(request));
                let prompt = request["body"]["messages"].to_string();
                assert!(prompt.contains("Here is the renovation report"), "{name}, {mode:?}: the opening is kept");
                assert!(prompt.contains("What should I check first?"), "{name}, {mode:?}: the end is kept");
            }
        }
    }
    // The question split into search queries (recall's `expand`) fits too.
    server.reset();
    server.config(json!({ "contextTokens": CONTEXT }));
    let expanded = block_on(loci::memory::expand_query(&question, "2023-05-08 14:00 UTC", &llm, None));
    expanded.result.expect("expansion");
    let log = server.log();
    assert_eq!(log.len(), 1);
    assert!(prompt_tokens(&log[0]) <= CONTEXT, "{} tokens", prompt_tokens(&log[0]));
}
