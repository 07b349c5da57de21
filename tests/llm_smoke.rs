//! Smoke test against a REAL small model (llama.cpp's OpenAI-compatible server from ../shared/tools/local-llm, all
//! from PyPI): the QDP, answer and judge prompts go through it with JSON-schema-constrained output and the replies
//! must parse into our types; two short sessions go through distillation (segment → narrate → merge? → distill →
//! consolidate?) and what comes out must have the right shape and provenance. Ignored by default; `scripts/test.mjs` starts the endpoint and runs it with
//! `--ignored`, or prints loudly that it was skipped and why.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::msg;

use loci::distill::DistillConfig;
use loci::llm::native::UreqTransport;
use loci::llm::openai::{HttpResponse, HttpTransport, OpenAiClient, OpenAiConfig, TransportError};
use loci::llm::{prompts, structured, LlmRequest};
use loci::memory::{AnswerOptions, Memory, MemoryConfig};
use loci::store::MemStore;
use pollster::block_on;

/// The real model's endpoint (`LOCI_SMOKE_LLM_URL`), each call given `timeout_ms`.
fn real_model(timeout_ms: u64) -> OpenAiClient<UreqTransport> {
    real_model_through(timeout_ms, UreqTransport::new())
}

/// Held by each test for its calls: the endpoint serves one request at a time, and a request queued behind another
/// test's hears nothing until that one is done.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ENDPOINT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ENDPOINT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn real_model_through<T: HttpTransport>(timeout_ms: u64, transport: T) -> OpenAiClient<T> {
    let url = std::env::var("LOCI_SMOKE_LLM_URL").expect("LOCI_SMOKE_LLM_URL");
    let mut config = OpenAiConfig::new(url, "local");
    config.timeout_ms = timeout_ms;
    OpenAiClient::new(config, transport).unwrap()
}

#[test]
#[ignore = "needs a real model endpoint in LOCI_SMOKE_LLM_URL (scripts/test.mjs starts one)"]
fn real_model_replies_parse_into_our_types() {
    let _alone = one_at_a_time();
    let llm = real_model(120_000);

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

    // Streamed: the answer is heard as the model writes it, and ends as the answer returned.
    let heard = std::rc::Rc::new(std::cell::RefCell::new(Vec::<(std::time::Duration, String)>::new()));
    let (h, started) = (heard.clone(), std::time::Instant::now());
    let options = AnswerOptions {
        on_text: Some(loci::llm::TextSink::new(move |t| h.borrow_mut().push((started.elapsed(), t.to_string())))),
        ..Default::default()
    };
    let streamed = block_on(m.answer("Who is Maya's physiotherapist?", &options, &llm, 0.0)).expect("streamed answer");
    let heard = heard.borrow();
    println!(
        "real model streamed answer: {:?}; first text heard after {:?}, {} updates, the answer after {:?}",
        streamed.answer,
        heard.first().map(|h| h.0),
        heard.len(),
        started.elapsed()
    );
    assert!(heard.len() >= 2, "heard in pieces: {heard:?}");
    assert_eq!(heard.last().map(|h| h.1.trim()), Some(streamed.answer.as_str()));
    assert!(!streamed.spent.usage.estimated, "the stream's last chunk carries the usage");

    // The judge prompt parses too.
    let request = LlmRequest {
        json_schema: Some(prompts::judge_schema()),
        json: true,
        ..LlmRequest::new(prompts::judge("Who is Maya's physiotherapist?", "Dr. Okafor", &a.answer))
    };
    let verdict = block_on(structured::chat_json::<prompts::JudgeReply>(&llm, &request)).expect("judge reply parses");
    println!("real model judge: {:?}", verdict.value);
}

#[test]
#[ignore = "needs a real model endpoint in LOCI_SMOKE_LLM_URL (scripts/test.mjs starts one)"]
fn a_real_model_distills_two_short_sessions_with_provenance() {
    let _alone = one_at_a_time();
    let llm = real_model(300_000);
    let mc = MemoryConfig { distill: Some(DistillConfig::default()), ..Default::default() };
    let mut m = block_on(Memory::open(MemStore::new(), common::embedder(mc.embed), mc)).unwrap();
    let first = [
        msg(
            "Maya",
            "My physiotherapist, Dr. Okafor, wants me to do strength work twice a week.",
            "2024-04-14T18:30:00Z",
        ),
        msg("Bot", "Squats and step-ups are classics. Which days suit you?", "2024-04-14T18:31:00Z"),
        msg("Maya", "Tuesdays and Fridays, before work. My left knee still hurts on stairs.", "2024-04-14T18:32:00Z"),
        msg("Bot", "Then start with low step-ups and tell Dr. Okafor about the stairs.", "2024-04-14T18:33:00Z"),
    ];
    let second = [
        msg("Maya", "Dr. Okafor moved my strength sessions to Mondays and Thursdays.", "2024-05-02T08:00:00Z"),
        msg("Bot", "Good to know. How is the left knee now?", "2024-05-02T08:01:00Z"),
        msg("Maya", "Much better, stairs no longer hurt.", "2024-05-02T08:02:00Z"),
    ];
    block_on(m.add_messages(&first, Some("physio-1"), 0.0)).unwrap();
    block_on(m.add_messages(&second, Some("physio-2"), 0.0)).unwrap();
    let started = std::time::Instant::now();
    let report = block_on(m.flush(&llm, 1e13, None, &mut |p| println!("real model distill: {} ok={}", p.job, p.ok)))
        .expect("flush");
    let l = m.stats().llm;
    println!(
        "real model distillation: {:?}; calls segment {} narrate {} merge {} predict {} distill {} consolidate {} \
         (truncated {}, cut {}); {:?}",
        report,
        l.segment.calls,
        l.narrate.calls,
        l.merge.calls,
        l.predict.calls,
        l.distill.calls,
        l.consolidate.calls,
        l.segment.truncated + l.narrate.truncated + l.distill.truncated,
        l.segment.cut + l.narrate.cut + l.distill.cut,
        started.elapsed()
    );
    for e in m.episodes() {
        println!("  episode {} ({}): {} — {}", e.id, e.turn_ids.len(), e.title, e.narrative);
    }
    for f in m.facts(true) {
        println!(
            "  fact {} [{}] {:?} from episodes {:?} turns {:?}",
            f.id, f.origin, f.statement, f.episode_ids, f.turn_ids
        );
    }
    assert_eq!((report.parked, report.jobs_left), (0, 0), "every job ran: {report:?} {:?}", m.stats().distill.parked);
    assert!(l.segment.calls >= 2 && l.narrate.calls >= 1 && l.distill.calls >= 1, "{l:?}");
    // Shape: every turn in exactly one episode; every episode titled and narrated.
    let episodes = m.episodes();
    let mut covered: Vec<u64> = episodes.iter().flat_map(|e| e.turn_ids.clone()).collect();
    covered.sort_unstable();
    let turns: Vec<u64> = ["physio-1", "physio-2"].iter().flat_map(|s| m.session_turns(s)).map(|t| t.id).collect();
    assert_eq!(covered, turns, "every turn in exactly one episode");
    assert!(episodes.iter().all(|e| !e.title.trim().is_empty() && !e.narrative.trim().is_empty()));
    // Provenance: each fact names existing episodes and turns of those episodes.
    let facts = m.facts(true);
    assert!(!facts.is_empty(), "a real model distils at least one fact from this");
    for f in &facts {
        assert!(!f.episode_ids.is_empty() && !f.turn_ids.is_empty(), "{f:?}");
        for id in &f.turn_ids {
            assert!(turns.contains(id), "fact {} cites turn {id}, which does not exist", f.id);
        }
        for id in &f.episode_ids {
            assert!(
                episodes.iter().any(|e| e.id == *id || e.merged_from.contains(id)),
                "fact {} cites episode {id}",
                f.id
            );
        }
    }
}

/// A real model writing a reply that takes far longer than the time limit is waited for, as long as it keeps
/// writing: the limit bounds a silence, not the reply (every call is streamed). Without streaming this is `TIMEOUT`.
#[test]
#[ignore = "needs a real model endpoint in LOCI_SMOKE_LLM_URL (scripts/test.mjs starts one)"]
fn a_real_model_that_writes_past_the_time_limit_is_waited_for() {
    let _alone = one_at_a_time(); // the first token must not wait behind another test's request
    let limit_ms = 3_000;
    let llm = real_model(limit_ms);
    // The cap sets how long the reply lasts. 150 tokens took 4.1 s in a fresh clone's npm test here (36 tokens/s),
    // too quick to outlast twice the limit; 500 took 12.1-12.6 s with the machine idle (40 tokens/s), twice the
    // 6 s needed, and a slow machine (15 tokens/s) takes 33 s.
    let request = LlmRequest {
        max_tokens: Some(500),
        ..LlmRequest::new(vec![loci::llm::ChatMessage::user(
            "Write the numbers from 1 to 200 in words, one per line (one, two, three, ...).",
        )])
    };
    let started = std::time::Instant::now();
    let reply = block_on(loci::llm::Llm::chat(&llm, &request)).expect("a reply that keeps coming is waited for");
    let took = started.elapsed();
    println!(
        "real model past its time limit: {} output tokens in {took:?} against a {limit_ms} ms limit",
        reply.usage.output_tokens
    );
    assert!(took.as_millis() > limit_ms as u128 * 2, "the reply must outlast the limit to show anything: {took:?}");
    assert!(reply.usage.output_tokens > 400 && reply.truncated, "written to its cap: {reply:?}");
}

/// The real model's reply opened with thoughts, as a reasoning model's is on a plain server. A small model neither
/// reasons on its own nor keeps to JSON without a grammar (which llama.cpp cannot apply after a prefix), so the server
/// continues an assistant prefix that holds the thoughts and the start of the JSON asked for, and hands back that
/// prefix with the model's own continuation. Only a reply not streamed does (a stream carries the continuation
/// alone), so the client goes through [`NoStreams`].
struct Reasoning<'a>(&'a OpenAiClient<NoStreams>);

/// The real endpoint as a server that does not stream: a streamed request is refused as such servers refuse it,
/// and the client sends it again as a plain one.
struct NoStreams(UreqTransport);

#[async_trait::async_trait(?Send)]
impl HttpTransport for NoStreams {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&loci::llm::AbortSignal>,
        on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
    ) -> Result<HttpResponse, TransportError> {
        let streamed = serde_json::from_str::<serde_json::Value>(body).is_ok_and(|b| b["stream"] == true);
        if streamed {
            let body = r#"{"error": {"message": "stream is not supported"}}"#.to_string();
            return Ok(HttpResponse { status: 400, headers: Vec::new(), body });
        }
        self.0.post(url, headers, body, timeout_ms, abort, on_chunk).await
    }

    async fn sleep(&self, ms: u64) {
        self.0.sleep(ms).await
    }

    fn now_ms(&self) -> f64 {
        self.0.now_ms()
    }
}

/// The thoughts quote an answer: read as the reply, it would be "unknown".
const THOUGHTS: &str = "<think>\nIf the memory did not say, I would reply {\"answer\": \"unknown\"}. It does say.\n\
                        </think>\n\n{\"answer\": \"";

#[async_trait::async_trait(?Send)]
impl loci::llm::Llm for Reasoning<'_> {
    async fn chat(&self, request: &LlmRequest) -> loci::error::Result<loci::llm::LlmReply> {
        let mut request = LlmRequest { json: false, json_schema: None, on_text: None, ..request.clone() };
        request.messages.push(loci::llm::ChatMessage::assistant(THOUGHTS));
        self.0.chat(&request).await
    }

    fn context_tokens(&self) -> usize {
        loci::llm::Llm::context_tokens(self.0)
    }
}

#[test]
#[ignore = "needs a real model endpoint in LOCI_SMOKE_LLM_URL (scripts/test.mjs starts one)"]
fn a_real_model_that_reasons_first_answers_without_its_thoughts() {
    let _alone = one_at_a_time();
    let client = real_model_through(120_000, NoStreams(UreqTransport::new()));
    let mc = MemoryConfig::default();
    let mut m = block_on(Memory::open(MemStore::new(), common::embedder(mc.embed), mc)).unwrap();
    let physio = [
        msg("Maya", "My physiotherapist, Dr. Okafor, wants strength work twice a week.", "2024-04-14T18:30:00Z"),
        msg("Bot", "Squats and step-ups are classics.", "2024-04-14T18:31:00Z"),
    ];
    block_on(m.add_messages(&physio, Some("physio"), 0.0)).unwrap();
    let options = AnswerOptions {
        prune: loci::memory::PruneOptions { mode: loci::recall::prune::PruneMode::None, ..Default::default() },
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let a = block_on(m.answer("Who is Maya's physiotherapist?", &options, &Reasoning(&client), 0.0))
        .expect("the answer after the thoughts parses");
    println!("real model after its thoughts: answer {:?} in {:?}", a.answer, started.elapsed());
    assert!(client.reasons(), "the reply opened with <think>");
    assert!(!a.answer.trim().is_empty() && !a.answer.contains("think>") && a.answer != "unknown", "{:?}", a.answer);
}
