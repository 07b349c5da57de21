//! Headless Chromium: the OpenAI-compatible fetch client through every fault of the scripted test server, the JS
//! callback LLM, and `answer()` end to end. The server's URL is compiled in from `LOCI_TEST_LLM_URL`
//! (scripts/test.mjs starts tests/llm-server/server.mjs and sets it).
#![cfg(target_arch = "wasm32")]

mod browser_common;

use browser_common::*;
use js_sys::{Function, Reflect};
use loci::llm::fetch::FetchTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use loci::llm::{structured, ChatMessage, Llm, LlmRequest};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// Compiled in, so a run without the server fails with this message rather than a missing-env compile error.
#[allow(clippy::option_env_unwrap)]
fn server() -> &'static str {
    option_env!("LOCI_TEST_LLM_URL").expect("LOCI_TEST_LLM_URL: start tests/llm-server/server.mjs (npm test does)")
}

fn control(path: &str) -> String {
    format!("{}/{path}", server().trim_end_matches("/v1"))
}

async fn post(url: &str, body: &str) -> JsValue {
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(body));
    let resp = JsFuture::from(web_sys::window().unwrap().fetch_with_str_and_init(url, &init)).await.unwrap();
    let resp: web_sys::Response = resp.unchecked_into();
    JsFuture::from(resp.text().unwrap()).await.unwrap()
}

async fn script(steps: &str) {
    post(&control("__reset"), "").await;
    post(&control("__script"), steps).await;
}

async fn requests_logged() -> u32 {
    let text = fetch_text(&control("__log")).await.unwrap();
    js_sys::JSON::parse(&text).unwrap().unchecked_into::<js_sys::Array>().length()
}

fn client(timeout_ms: u64) -> OpenAiClient<FetchTransport> {
    let mut config = OpenAiConfig::new(server(), "test-model");
    config.api_key = Some("sk-test-secret".into());
    config.timeout_ms = timeout_ms;
    config.backoff_base_ms = 50;
    config.backoff_max_ms = 200;
    OpenAiClient::new(config, FetchTransport::new()).unwrap()
}

fn hello() -> LlmRequest {
    LlmRequest::new(vec![ChatMessage::user("Say hi")])
}

#[derive(serde::Deserialize, Debug)]
struct Answer {
    answer: String,
}

fn json_request() -> LlmRequest {
    LlmRequest { json: true, ..LlmRequest::new(vec![ChatMessage::user("Reply with {\"answer\": …}")]) }
}

#[wasm_bindgen_test]
async fn fetch_client_survives_every_fault() {
    let llm = client(1500);

    script(r#"[{"status": 429, "retryAfter": 1}, {"reply": "after 429"}]"#).await;
    assert_eq!(llm.chat(&hello()).await.expect("429 then success").text, "after 429");
    assert_eq!(requests_logged().await, 2, "retried once after Retry-After");

    script(r#"[{"status": 500}, {"status": 503}, {"reply": "after 5xx"}]"#).await;
    assert_eq!(llm.chat(&hello()).await.expect("5xx retried").text, "after 5xx");
    assert_eq!(requests_logged().await, 3);

    script(r#"[{"drop": true}, {"reply": "after drop"}]"#).await;
    assert_eq!(llm.chat(&hello()).await.expect("dropped connection retried").text, "after drop");

    script(r#"[{"hang": true}]"#).await;
    let err = llm.chat(&hello()).await.expect_err("hang");
    assert_eq!(err.code(), "TIMEOUT", "{err}");

    script(r#"[{"status": 401, "message": "bad key"}]"#).await;
    let err = llm.chat(&hello()).await.expect_err("401");
    assert_eq!(err.code(), "LLM_REJECTED");
    assert_eq!(requests_logged().await, 1, "no retry on 401");
    assert!(!err.to_string().contains("sk-test-secret"), "the key never appears in errors");

    script(r#"[{"fenced": {"answer": "fenced works"}}]"#).await;
    let parsed = structured::chat_json::<Answer>(&llm, &json_request()).await.expect("fenced JSON");
    assert_eq!(parsed.value.answer, "fenced works");

    script(r#"[{"raw": "not json at all"}, {"raw": "{\"answer\": \"trunc"}]"#).await;
    let err = structured::chat_json::<Answer>(&llm, &json_request()).await.expect_err("garbage twice");
    assert_eq!(err.code(), "LLM_BAD_REPLY");
    assert_eq!(requests_logged().await, 2, "one corrective retry, then a typed error");

    script(r#"[{"rejectResponseFormat": true}, {"reply": "{\"answer\": \"fallback\"}"}]"#).await;
    let parsed = structured::chat_json::<Answer>(&llm, &json_request()).await.expect("response_format fallback");
    assert_eq!(parsed.value.answer, "fallback");

    let log = fetch_text(&control("__log")).await.unwrap();
    assert!(log.contains("Bearer sk-test-secret"), "the key goes in the Authorization header");
}

async fn open_with_llm(name: &str, llm: &JsValue) -> loci::web::Memory {
    delete(name).await;
    let options = open_options(name, "wasm", "");
    Reflect::set(&options, &"llm".into(), llm).unwrap();
    open_with(options).await.unwrap_or_else(|e| panic!("open: {e:?}"))
}

const SESSIONS: [(&str, &str); 2] = [
    (
        "garden",
        r#"[{"speaker": "Maya", "content": "I planted tomatoes and basil in the raised bed.", "time": "2024-03-02T10:00:00Z"},
                  {"speaker": "Bot", "content": "Water the basil in the morning.", "time": "2024-03-02T10:01:00Z"}]"#,
    ),
    (
        "physio",
        r#"[{"speaker": "Maya", "content": "My physiotherapist Okafor wants strength work twice a week.", "time": "2024-04-14T18:30:00Z"},
                  {"speaker": "Bot", "content": "Squats and step-ups are classics.", "time": "2024-04-14T18:31:00Z"}]"#,
    ),
];

#[wasm_bindgen_test]
async fn answer_end_to_end_through_the_test_server() {
    script("[]").await; // default mode: answers deterministically from the prompt
    let llm = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "apiKey": "sk-e2e", "timeoutMs": 5000}}"#, server()));
    let m = open_with_llm("t-answer", &llm).await;
    assert!(m.has_llm());
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a = wait(m.answer("Who is the physiotherapist?".into(), js(r#"{"k": 2}"#))).await.expect("answer");
    assert!(string(&a, "context").contains("Okafor"), "the pruned context holds the evidence");
    // QDP kept the physio line; each recalled session's best exchange stays too (the garden session's only one).
    assert_eq!(len(&a, "kept"), 2, "both recalled sessions keep their best exchange");
    assert!(string(&a, "context").contains("tomatoes"));
    assert!(string(&a, "answer").contains("Okafor"));
    assert_eq!(num(&a, "spent.calls"), 2.0, "one pruning call, one answer call");
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(num(&stats, "llm.prune.calls"), 1.0);
    assert_eq!(num(&stats, "llm.answer.calls"), 1.0);
    assert!(num(&stats, "llm.answer.inputTokens") > 0.0);

    // Recall with each pruning mode; extractive needs no LLM.
    let r =
        wait(m.recall("Who is the physiotherapist?".into(), js(r#"{"k": 2, "prune": "extractive", "budget": 0.5}"#)))
            .await
            .unwrap();
    assert!(num(&r, "contextTokens") <= num(&r, "unprunedTokens"));
    let err = wait(m.recall("x".into(), js(r#"{"prune": "magic"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");

    // A dead endpoint: a typed error, nothing stored or lost.
    m.set_llm(js(r#"{"baseUrl": "http://127.0.0.1:9/v1", "model": "x", "timeoutMs": 500, "maxRetries": 1}"#)).unwrap();
    let err = wait(m.answer("Who is the physiotherapist?".into(), JsValue::UNDEFINED)).await.unwrap_err();
    assert_eq!(code(&err), "LLM_UNAVAILABLE", "{err:?}");
    assert_eq!(num(&wait(m.stats()).await.unwrap(), "turns"), 4.0);

    m.set_llm(JsValue::NULL).unwrap();
    let err = wait(m.answer("Who?".into(), JsValue::UNDEFINED)).await.unwrap_err();
    assert_eq!(code(&err), "LLM_UNAVAILABLE");
    let err = m.set_llm(js(r#"{"baseUrl": "http://x", "model": "m", "apiKeys": "typo"}"#)).unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn recall_expands_a_two_part_question_through_the_llm() {
    script("[]").await; // default mode: the question cut at commas and "and"
    let llm = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 5000}}"#, server()));
    let m = open_with_llm("t-expand", &llm).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let before = requests_logged().await;
    let question = "Who is the physiotherapist, and what did Maya plant?";
    let r = wait(m.recall(question.into(), js(r#"{"k": 2, "expand": true}"#))).await.expect("expanded recall");
    assert_eq!(requests_logged().await, before + 1, "one expansion call");
    assert_eq!(len(&r, "expansion.queries"), 2);
    assert_eq!(string(&r, "expansion.queries.1"), "what did Maya plant");
    assert_eq!(num(&r, "expansion.spent.calls"), 1.0);
    assert!(string(&r, "context").contains("Okafor") && string(&r, "context").contains("tomatoes"));
    assert_eq!(num(&wait(m.stats()).await.unwrap(), "llm.expand.calls"), 1.0);
    // The question's date, when given, is the one the LLM is told (for "last week" and the like).
    let dated = r#"{"k": 2, "expand": true, "questionTime": "2023-05-08T13:56:00Z"}"#;
    wait(m.recall(question.into(), js(dated))).await.expect("expanded recall with a date");
    let log = js_sys::JSON::parse(&fetch_text(&control("__log")).await.unwrap()).unwrap();
    let last = js_sys::Array::from(&log).pop();
    let body = js_sys::JSON::stringify(&Reflect::get(&last, &"body".into()).unwrap()).unwrap().as_string().unwrap();
    assert!(body.contains("Question date: 2023-05-08 13:56 UTC"), "{body}");
    let before = requests_logged().await;
    let err = wait(m.recall(question.into(), js(r#"{"expand": true, "questionTime": "soon"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");
    // Without `expand`, no call and no report.
    let plain = wait(m.recall(question.into(), js(r#"{"k": 2}"#))).await.unwrap();
    assert!(Reflect::get(&plain, &"expansion".into()).unwrap().is_undefined());
    assert_eq!(requests_logged().await, before, "neither a refused date nor a plain recall calls the LLM");
    // Refused: with `prune`, in answer(), as a non-boolean, and without an LLM.
    for (options, what) in [(r#"{"expand": true, "prune": "extractive"}"#, "prune"), (r#"{"expand": "yes"}"#, "type")] {
        let err = wait(m.recall(question.into(), js(options))).await.unwrap_err();
        assert_eq!(code(&err), "INVALID_INPUT", "{what}");
    }
    let err = wait(m.answer(question.into(), js(r#"{"expand": true}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");
    // A dead endpoint: the recall still answers, on the question alone, and says why.
    m.set_llm(js(r#"{"baseUrl": "http://127.0.0.1:9/v1", "model": "x", "timeoutMs": 500, "maxRetries": 1}"#)).unwrap();
    let r = wait(m.recall(question.into(), js(r#"{"k": 2, "expand": true}"#))).await.expect("a fallback recall");
    assert_eq!(len(&r, "expansion.queries"), 0);
    assert!(string(&r, "expansion.error").starts_with("LLM_UNAVAILABLE"), "{}", string(&r, "expansion.error"));
    assert_eq!(len(&r, "sessions"), 2);
    m.set_llm(JsValue::NULL).unwrap();
    let err = wait(m.recall(question.into(), js(r#"{"expand": true}"#))).await.unwrap_err();
    assert_eq!(code(&err), "LLM_UNAVAILABLE");
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_js_callback_can_be_the_llm() {
    // What WebLLM or Chrome's built-in model would plug in: an async function returning { text }.
    let f = Function::new_with_args(
        "req",
        r#"globalThis.__calls = (globalThis.__calls || 0) + 1;
           const last = req.messages.map((m) => m.content).join("\n");
           if (last.includes('"keep"')) {
             const ids = [...last.matchAll(/\[([0-9]+\.[0-9]+)\][^\n]*Okafor/g)].map((m) => m[1]);
             return Promise.resolve({ text: JSON.stringify({ keep: ids }) });
           }
           return Promise.resolve({ text: JSON.stringify({ answer: "Okafor" }), usage: { inputTokens: 10, outputTokens: 3 } });"#,
    );
    let m = open_with_llm("t-callback", &f.into()).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a =
        wait(m.answer("Who is the physiotherapist?".into(), JsValue::UNDEFINED)).await.expect("answer via callback");
    assert_eq!(string(&a, "answer"), "Okafor");
    let calls = Reflect::get(&js_sys::global(), &"__calls".into()).unwrap().as_f64().unwrap();
    assert_eq!(calls, 2.0);
    wait(m.close()).await.unwrap();
}

/// Answer options with `onText` recording what it hears into `globalThis[heard]`.
fn listening(options: &str, heard: &str) -> JsValue {
    let o = js(options);
    let f = Function::new_with_args("t", &format!("(globalThis.{heard} ||= []).push(t)"));
    Reflect::set(&o, &"onText".into(), &f).unwrap();
    o
}

fn heard(name: &str) -> Vec<String> {
    let v = Reflect::get(&js_sys::global(), &name.into()).unwrap();
    if v.is_undefined() {
        return Vec::new();
    }
    js_sys::Array::from(&v).iter().map(|t| t.as_string().unwrap()).collect()
}

#[wasm_bindgen_test]
async fn an_answer_is_heard_as_the_model_writes_it_in_this_tab_and_in_a_follower() {
    let answer = "Okafor, the physiotherapist, wants strength work twice a week.";
    let reply = serde_json::json!({ "answer": answer }).to_string();
    let steps = serde_json::json!([{ "reply": reply }, { "reply": reply }, { "reply": reply }]).to_string();
    script(&steps).await;
    post(&control("__config"), r#"{"pieceMs": 15}"#).await; // pieces apart, so that they arrive apart
    let llm = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 10000}}"#, server()));
    let m = open_with_llm("t-stream", &llm).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a = wait(m.answer("Who is the physiotherapist?".into(), listening(r#"{"prune": "none"}"#, "__heardHere")))
        .await
        .expect("a streamed answer");
    assert_eq!(string(&a, "answer"), answer);
    let here = heard("__heardHere");
    assert!(here.len() >= 3, "heard in pieces: {here:?}");
    assert!(here.iter().all(|t| answer.starts_with(t.as_str())), "the answer's text only, never its JSON: {here:?}");
    assert_eq!(here.last().map(String::as_str), Some(answer));
    let log = js_sys::JSON::parse(&fetch_text(&control("__log")).await.unwrap()).unwrap();
    let body = Reflect::get(&js_sys::Array::from(&log).pop(), &"body".into()).unwrap();
    assert_eq!(Reflect::get(&body, &"stream".into()).unwrap(), JsValue::TRUE);

    // A second tab follows: its listener hears the leader's stream.
    let second = open("t-stream").await;
    assert!(!second.is_leader());
    let a =
        wait(second.answer("Who is the physiotherapist?".into(), listening(r#"{"prune": "none"}"#, "__heardThere")))
            .await
            .expect("a follower's streamed answer");
    assert_eq!(string(&a, "answer"), answer);
    let there = heard("__heardThere");
    assert!(there.len() >= 3, "heard in pieces in the follower: {there:?}");
    assert_eq!(there.last().map(String::as_str), Some(answer));

    // A listener that throws costs nothing; one that is not a function is refused before any call.
    let throwing = js(r#"{"prune": "none"}"#);
    Reflect::set(&throwing, &"onText".into(), &Function::new_with_args("t", "throw new Error('listener bug')"))
        .unwrap();
    let a = wait(m.answer("Who is the physiotherapist?".into(), throwing)).await.expect("a listener's bug is ignored");
    assert_eq!(string(&a, "answer"), answer);
    let before = requests_logged().await;
    let err = wait(m.answer("Who?".into(), js(r#"{"onText": "yes"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "INVALID_INPUT");
    assert_eq!(requests_logged().await, before);
    wait(second.close()).await.unwrap();
    wait(m.close()).await.unwrap();
}

/// Answer options whose `onText` fires `globalThis[controller]` (an `AbortController` it makes) at the first text
/// heard: a user pressing stop while the answer is being written.
fn stopped_at_first_text(controller: &str) -> JsValue {
    let make = Function::new_no_args(&format!("return (globalThis.{controller} = new AbortController()).signal"));
    let o = js(r#"{"prune": "none"}"#);
    Reflect::set(&o, &"signal".into(), &make.call0(&JsValue::NULL).unwrap()).unwrap();
    let stop = Function::new_with_args("t", &format!("globalThis.{controller}.abort()"));
    Reflect::set(&o, &"onText".into(), &stop).unwrap();
    o
}

#[wasm_bindgen_test]
async fn an_answer_stopped_while_it_is_written_is_aborted_and_the_next_one_is_whole() {
    let answer = "Okafor, the physiotherapist, wants strength work twice a week, and a walk every day.";
    let reply = serde_json::json!({ "answer": answer }).to_string();
    let steps = serde_json::json!([{ "reply": reply }, { "reply": reply }, { "reply": reply }, { "reply": reply }]);
    script(&steps.to_string()).await;
    post(&control("__config"), r#"{"pieceMs": 40}"#).await; // ~1.5 s of pieces: the stop comes long before the end
    let llm = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 10000}}"#, server()));
    let m = open_with_llm("t-stream-stop", &llm).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let before = requests_logged().await;
    let err = wait(m.answer("Who is the physiotherapist?".into(), stopped_at_first_text("__stopHere"))).await;
    assert_eq!(code(&err.expect_err("stopped")), "ABORTED");
    assert_eq!(requests_logged().await, before + 1, "one call, not retried after the stop");
    let a = wait(m.answer("Who is the physiotherapist?".into(), listening(r#"{"prune": "none"}"#, "__afterStop")))
        .await
        .expect("the next answer, whole");
    assert_eq!(string(&a, "answer"), answer);
    assert_eq!(heard("__afterStop").last().map(String::as_str), Some(answer));

    // The same from a follower tab: its stop travels to the leader, which aborts the call.
    let second = open("t-stream-stop").await;
    assert!(!second.is_leader());
    let err = wait(second.answer("Who is the physiotherapist?".into(), stopped_at_first_text("__stopThere"))).await;
    assert_eq!(code(&err.expect_err("stopped in the follower")), "ABORTED");
    let a = wait(second.answer("Who is the physiotherapist?".into(), js(r#"{"prune": "none"}"#)))
        .await
        .expect("the follower's next answer");
    assert_eq!(string(&a, "answer"), answer);
    wait(second.close()).await.unwrap();
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_streamed_answer_may_outlast_the_time_limit_while_it_goes_on_but_not_stall_past_it() {
    // 80 characters of answer (+ its JSON) in pieces of 5, 150 ms apart: ~2.7 s against a 1,000 ms limit.
    let answer = "Okafor, the physiotherapist, wrote it slowly, as a small model writes on a laptop.";
    let reply = serde_json::json!({ "answer": answer }).to_string();
    script(&serde_json::json!([{ "reply": reply }]).to_string()).await;
    post(&control("__config"), r#"{"pieceMs": 150}"#).await;
    let llm = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 1000}}"#, server()));
    let m = open_with_llm("t-stream-slow", &llm).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let started = js_sys::Date::now();
    let a = wait(m.answer("Who is the physiotherapist?".into(), listening(r#"{"prune": "none"}"#, "__slow")))
        .await
        .expect("a stream that goes on is waited for");
    assert_eq!(string(&a, "answer"), answer);
    assert!(js_sys::Date::now() - started > 1000.0, "the stream outlasted the limit");
    assert!(heard("__slow").len() >= 10);
    // A stream that stops going on is a timeout.
    script(&serde_json::json!([{ "reply": reply }]).to_string()).await;
    post(&control("__config"), r#"{"pieceMs": 1500}"#).await;
    let err = wait(m.answer("Who is the physiotherapist?".into(), listening(r#"{"prune": "none"}"#, "__stalled")))
        .await
        .expect_err("stalled");
    assert_eq!(code(&err), "TIMEOUT");
    post(&control("__config"), r#"{"pieceMs": 0}"#).await;
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_js_callback_that_streams_is_heard() {
    // A callback that streams (WebLLM's `stream: true`) hands loci the raw reply so far; loci hears its answer.
    let f = Function::new_with_args(
        "req",
        r#"const reply = JSON.stringify({ answer: "In the raised bed" });
           globalThis.__gotOnText = typeof req.onText;
           if (req.onText) for (let i = 4; i < reply.length; i += 4) req.onText(reply.slice(0, i));
           return Promise.resolve({ text: reply });"#,
    );
    let m = open_with_llm("t-callback-stream", &f.into()).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a = wait(m.answer("Where are the tomatoes?".into(), listening(r#"{"prune": "none"}"#, "__heardCallback")))
        .await
        .expect("answer via a streaming callback");
    assert_eq!(string(&a, "answer"), "In the raised bed");
    let got = heard("__heardCallback");
    assert!(got.len() >= 3 && got.iter().all(|t| "In the raised bed".starts_with(t.as_str())), "{got:?}");
    assert_eq!(
        Reflect::get(&js_sys::global(), &"__gotOnText".into()).unwrap().as_string().as_deref(),
        Some("function")
    );
    // Without a listener the callback gets no `onText`.
    wait(m.answer("Where are the tomatoes?".into(), js(r#"{"prune": "none"}"#))).await.unwrap();
    assert_eq!(
        Reflect::get(&js_sys::global(), &"__gotOnText".into()).unwrap().as_string().as_deref(),
        Some("undefined")
    );
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_js_callback_that_says_context_exceeded_gets_a_smaller_prompt() {
    // What `loci/llm`'s helpers throw when a prompt does not fit the runtime's context (llama.cpp in wllama,
    // WebLLM, Chrome's quota): an error with `code: "LLM_CONTEXT_EXCEEDED"`. loci sends the prompt again, smaller.
    let f = Function::new_with_args(
        "req",
        r#"const sent = req.messages.map((m) => m.content).join("\n");
           (globalThis.__sentLengths ||= []).push(sent.length);
           if (globalThis.__sentLengths.length === 1) {
             const e = new Error("the request exceeds the available context size");
             e.code = "LLM_CONTEXT_EXCEEDED";
             return Promise.reject(e);
           }
           return Promise.resolve({ text: JSON.stringify({ answer: "In the raised bed" }) });"#,
    );
    let m = open_with_llm("t-callback-overflow", &f.into()).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    // A pasted document in the memory, so that the first prompt is long and can be cut.
    let paste = "the tomatoes need staking and water at dawn in the raised bed ".repeat(200);
    let pasted =
        format!(r#"[{{"speaker": "Maya", "content": "Garden notes: {paste}", "time": "2024-03-04T10:00:00Z"}}]"#);
    wait(m.add_messages(js(&pasted), js(r#"{"session": "notes"}"#))).await.unwrap();
    let a = wait(m.answer("Where are the tomatoes?".into(), js(r#"{"prune": "none"}"#)))
        .await
        .expect("answered after the smaller prompt");
    assert_eq!(string(&a, "answer"), "In the raised bed");
    let lengths = Reflect::get(&js_sys::global(), &"__sentLengths".into()).unwrap();
    let lengths: Vec<f64> = lengths.unchecked_into::<js_sys::Array>().iter().map(|n| n.as_f64().unwrap()).collect();
    assert_eq!(lengths.len(), 2, "one more call, not a failure: {lengths:?}");
    assert!(lengths[1] < lengths[0] * 0.7, "the second prompt is smaller: {lengths:?}");
    let stats = wait(m.stats()).await.unwrap();
    assert_eq!(num(&stats, "llm.answer.shrunk"), 1.0);

    // A callback that always says so: after the shrinking retries, the answer fails with loci's context error.
    let always = Function::new_with_args(
        "req",
        r#"globalThis.__overflowCalls = (globalThis.__overflowCalls || 0) + 1;
           const e = new Error("prompt too long"); e.code = "LLM_CONTEXT_EXCEEDED"; return Promise.reject(e);"#,
    );
    m.set_llm(always.into()).unwrap();
    let err = wait(m.answer("Where are the tomatoes?".into(), js(r#"{"prune": "none"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "LLM_CONTEXT_EXCEEDED");
    let calls = Reflect::get(&js_sys::global(), &"__overflowCalls".into()).unwrap().as_f64().unwrap();
    assert!((2.0..=5.0).contains(&calls), "retried smaller a bounded number of times: {calls}");
    // Any other thrown error stays LLM_UNAVAILABLE.
    let other = Function::new_with_args(
        "req",
        r#"const e = new Error("GPU lost"); e.code = "E_GPU"; return Promise.reject(e);"#,
    );
    m.set_llm(other.into()).unwrap();
    let err = wait(m.answer("Where are the tomatoes?".into(), js(r#"{"prune": "none"}"#))).await.unwrap_err();
    assert_eq!(code(&err), "LLM_UNAVAILABLE");
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_reasoning_model_answers_in_the_page_without_its_thoughts() {
    // An OpenAI reasoning model's refusals (max_tokens, temperature, frequency_penalty), then its thoughts written
    // into the content, quoting JSON, before the answer.
    let answer = "In the raised bed by the shed.";
    let reply = serde_json::json!({ "answer": answer }).to_string();
    script(&serde_json::json!([{ "reply": reply, "times": 2 }]).to_string()).await;
    let config = r#"{"refuse": ["max_tokens", "temperature", "frequency_penalty"],
                     "reasoning": {"tokens": 40, "style": "think"}, "pieceMs": 2}"#;
    post(&control("__config"), config).await;
    let llm = js(&format!(
        r#"{{"baseUrl": "{}", "model": "test", "timeoutMs": 10000, "extraBody": {{"reasoning_effort": "low"}}}}"#,
        server()
    ));
    let m = open_with_llm("t-reasoning", &llm).await;
    let bad = js(&format!(r#"{{"baseUrl": "{}", "model": "test", "extraBody": "low"}}"#, server()));
    assert_eq!(code(&m.set_llm(bad).unwrap_err()), "INVALID_INPUT", "extraBody must be an object");
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a = wait(m.answer("Where are the tomatoes?".into(), listening(r#"{"prune": "none"}"#, "__heardReasoning")))
        .await
        .expect("an answer from a reasoning model");
    assert_eq!(string(&a, "answer"), answer);
    let got = heard("__heardReasoning");
    assert!(!got.is_empty() && got.iter().all(|t| answer.starts_with(t.as_str())), "no thoughts heard: {got:?}");
    let log = js_sys::JSON::parse(&fetch_text(&control("__log")).await.unwrap()).unwrap();
    let last = Reflect::get(&js_sys::Array::from(&log).pop(), &"body".into()).unwrap();
    let has = |k: &str| !Reflect::get(&last, &k.into()).unwrap().is_undefined();
    assert!(has("max_completion_tokens") && !has("max_tokens") && !has("temperature"), "{last:?}");
    let effort = Reflect::get(&last, &"reasoning_effort".into()).unwrap();
    assert_eq!(effort.as_string().as_deref(), Some("low"), "extraBody sent");
    post(&control("__reset"), "").await;
    wait(m.close()).await.unwrap();
}

#[wasm_bindgen_test]
async fn a_js_callback_whose_model_reasons_is_heard_and_read_without_its_thoughts() {
    // WebLLM with a reasoning model (Qwen3): the content opens with <think>…</think>, which quotes JSON.
    let f = Function::new_with_args(
        "req",
        r#"const reply = '<think>They want {"answer": "a guess"}. Let me look.</think>\n\n' +
             JSON.stringify({ answer: "In the raised bed" });
           if (req.onText) for (let i = 3; i < reply.length; i += 3) req.onText(reply.slice(0, i));
           return Promise.resolve({ text: reply });"#,
    );
    let m = open_with_llm("t-callback-reasoning", &f.into()).await;
    for (session, msgs) in SESSIONS {
        wait(m.add_messages(js(msgs), js(&format!(r#"{{"session": "{session}"}}"#)))).await.unwrap();
    }
    let a = wait(m.answer("Where are the tomatoes?".into(), listening(r#"{"prune": "none"}"#, "__heardThinking")))
        .await
        .expect("an answer via a reasoning callback");
    assert_eq!(string(&a, "answer"), "In the raised bed");
    let got = heard("__heardThinking");
    assert!(!got.is_empty() && got.iter().all(|t| "In the raised bed".starts_with(t.as_str())), "{got:?}");
    wait(m.close()).await.unwrap();
}
