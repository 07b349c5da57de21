//! The OpenAI-compatible client natively (ureq transport) against the scripted Node server in
//! `tests/llm-server/server.mjs`, through every injected fault: each test asserts the outcome (retried and
//! succeeded, or a typed error) and, from the server's log, what was actually sent.
#![cfg(not(target_arch = "wasm32"))]

mod llm_server;

use std::time::Instant;

use llm_server::LlmServer;
use loci::llm::native::UreqTransport;
use loci::llm::openai::{OpenAiClient, OpenAiConfig};
use loci::llm::prompts::QdpReply;
use loci::llm::structured::chat_json;
use loci::llm::{ChatMessage, Llm, LlmRequest, TextSink};
use pollster::block_on;
use serde_json::json;

const KEY: &str = "sk-test-very-secret";

fn client(server: &LlmServer) -> OpenAiClient<UreqTransport> {
    let mut config = OpenAiConfig::new(server.base_url(), "test-model");
    config.api_key = Some(KEY.into());
    config.timeout_ms = 1000;
    config.backoff_base_ms = 50;
    config.max_retries = 3;
    OpenAiClient::new(config, UreqTransport::new()).unwrap()
}

fn ask(json: bool) -> LlmRequest {
    LlmRequest { json, ..LlmRequest::new(vec![ChatMessage::system("Reply with JSON."), ChatMessage::user("hello")]) }
}

#[test]
fn a_429_with_retry_after_is_waited_out_and_retried() {
    let server = LlmServer::start();
    server.script(json!([{"status": 429, "retryAfter": 1}, {"reply": "hi there"}]));
    let c = client(&server);
    let start = Instant::now();
    let reply = block_on(c.chat(&ask(false))).unwrap();
    assert_eq!(reply.text, "hi there");
    assert!(start.elapsed().as_millis() >= 1000, "Retry-After: 1 honoured, waited {:?}", start.elapsed());
    assert_eq!(server.log().len(), 2);
    assert!(!reply.usage.estimated && reply.usage.input_tokens > 0);
}

#[test]
fn server_errors_and_garbled_bodies_are_retried() {
    let server = LlmServer::start();
    server.script(json!([{"status": 500}, {"status": 503}, {"body": "<html>bad gateway"}, {"reply": "ok"}]));
    let reply = block_on(client(&server).chat(&ask(false))).unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(server.log().len(), 4);
}

#[test]
fn a_dropped_connection_is_retried() {
    let server = LlmServer::start();
    server.script(json!([{"drop": true}, {"drop": true}, {"reply": "back"}]));
    assert_eq!(block_on(client(&server).chat(&ask(false))).unwrap().text, "back");
    assert_eq!(server.log().len(), 3);
}

#[test]
fn a_hung_server_gives_a_timeout_error_without_retrying() {
    let server = LlmServer::start();
    server.script(json!([{"hang": true}, {"reply": "never used"}]));
    let start = Instant::now();
    let err = block_on(client(&server).chat(&ask(false))).unwrap_err();
    assert_eq!(err.code(), "TIMEOUT", "{err}");
    let waited = start.elapsed().as_millis();
    assert!((900..3000).contains(&waited), "timed out after {waited} ms with timeout 1000 ms");
    assert_eq!(server.log().len(), 1);
}

#[test]
fn persistent_failures_end_in_typed_errors_after_the_retries() {
    let server = LlmServer::start();
    server.script(json!([{"status": 502, "times": 4}]));
    assert_eq!(block_on(client(&server).chat(&ask(false))).unwrap_err().code(), "LLM_UNAVAILABLE");
    assert_eq!(server.log().len(), 4, "one try + max_retries = 3");

    server.reset();
    server.script(json!([{"status": 429, "retryAfter": 0, "times": 4}]));
    assert_eq!(block_on(client(&server).chat(&ask(false))).unwrap_err().code(), "LLM_RATE_LIMITED");
    assert_eq!(server.log().len(), 4);
}

#[test]
fn a_401_is_not_retried_and_the_error_does_not_leak_the_key() {
    let server = LlmServer::start();
    server.script(json!([{"status": 401, "message": "invalid api key"}, {"reply": "never used"}]));
    let err = block_on(client(&server).chat(&ask(false))).unwrap_err();
    assert_eq!(err.code(), "LLM_REJECTED");
    assert!(err.to_string().contains("401") && err.to_string().contains("invalid api key"), "{err}");
    assert!(!err.to_string().contains(KEY) && !format!("{err:?}").contains(KEY));
    assert_eq!(server.log().len(), 1);
    // An endpoint that echoes the key in its error: the key is taken out of loci's error (a job would store it).
    let echo = format!("invalid api key {KEY}, check it");
    server.script(json!([{"status": 401, "message": echo}]));
    let err = block_on(client(&server).chat(&ask(false))).unwrap_err();
    assert!(err.to_string().contains("invalid api key [redacted], check it"), "{err}");
}

#[test]
fn the_key_goes_only_in_the_authorization_header() {
    let server = LlmServer::start();
    let mut config = client(&server).config().clone();
    config.headers.push(("X-Test-Header".into(), "yes".into()));
    let c = OpenAiClient::new(config, UreqTransport::new()).unwrap();
    block_on(c.chat(&ask(false))).unwrap();
    let log = server.log();
    let entry = &log[0];
    assert_eq!(entry["headers"]["authorization"], format!("Bearer {KEY}"));
    assert_eq!(entry["headers"]["x-test-header"], "yes");
    assert_eq!(entry["headers"]["content-type"], "application/json");
    assert_eq!(entry["body"]["model"], "test-model");
    assert!(!entry["body"].to_string().contains(KEY), "the key is not in the body");
    assert!(!format!("{c:?}").contains(KEY), "Debug redacts the key");
}

#[test]
fn non_json_then_valid_json_succeeds_after_one_corrective_retry() {
    let server = LlmServer::start();
    server.script(json!([{"raw": "Sure, the lines are 1.1 and 1.2"}, {"reply": "{\"keep\": [\"1.1\", \"1.2\"]}"}]));
    let r = block_on(chat_json::<QdpReply>(&client(&server), &ask(true))).unwrap();
    assert_eq!(r.value.keep, vec!["1.1", "1.2"]);
    assert_eq!(r.calls, 2);
    let log = server.log();
    let second = log[1]["body"]["messages"].as_array().unwrap().clone();
    assert_eq!(second.len(), 4, "original two + the bad reply + the correction");
    assert!(second[3]["content"].as_str().unwrap().contains("no JSON object"));
    assert_eq!(log[1]["body"]["response_format"], json!({"type": "json_object"}));
}

#[test]
fn non_json_then_truncated_json_is_a_typed_error() {
    let server = LlmServer::start();
    server.script(json!([{"raw": "not json"}, {"raw": "{\"keep\": [\"1.1\", \"tru"}, {"reply": "{\"keep\": []}"}]));
    let err = block_on(chat_json::<QdpReply>(&client(&server), &ask(true))).unwrap_err();
    assert_eq!(err.code(), "LLM_BAD_REPLY");
    assert!(err.to_string().contains("incomplete"), "{err}");
    assert_eq!(server.log().len(), 2, "one corrective retry, no more");
}

#[test]
fn json_in_code_fences_is_parsed() {
    let server = LlmServer::start();
    server.script(json!([{"fenced": {"keep": ["2.3"]}}]));
    let r = block_on(chat_json::<QdpReply>(&client(&server), &ask(true))).unwrap();
    assert_eq!((r.value.keep, r.calls), (vec!["2.3".to_string()], 1));
}

#[test]
fn a_rejected_response_format_falls_back_to_plain_requests() {
    let server = LlmServer::start();
    server.script(
        json!([{"rejectResponseFormat": true}, {"reply": "{\"keep\": [\"1.1\"]}"}, {"reply": "{\"keep\": []}"}]),
    );
    let c = client(&server);
    let r = block_on(chat_json::<QdpReply>(&c, &ask(true))).unwrap();
    assert_eq!((r.value.keep.len(), r.calls), (1, 1));
    block_on(chat_json::<QdpReply>(&c, &ask(true))).unwrap();
    let log = server.log();
    assert_eq!(log.len(), 3);
    assert!(log[0]["body"].get("response_format").is_some());
    assert!(log[1]["body"].get("response_format").is_none(), "resent without it");
    assert!(log[2]["body"].get("response_format").is_none(), "and remembered");
}

#[test]
fn missing_usage_is_estimated() {
    let server = LlmServer::start();
    server.script(json!([{"reply": "twelve chars", "usage": null}]));
    let reply = block_on(client(&server).chat(&ask(false))).unwrap();
    assert!(reply.usage.estimated);
    assert_eq!(reply.usage.output_tokens, 3);
    assert!(reply.usage.input_tokens > 8, "two messages with overhead: {:?}", reply.usage);
}

#[test]
fn an_unreachable_endpoint_is_llm_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    config.backoff_base_ms = 10;
    config.max_retries = 2;
    let err = block_on(OpenAiClient::new(config, UreqTransport::new()).unwrap().chat(&ask(false))).unwrap_err();
    assert_eq!(err.code(), "LLM_UNAVAILABLE", "{err}");
}

/// A request that listens to the reply's text, and what it heard.
fn streamed(json: bool) -> (LlmRequest, std::rc::Rc<std::cell::RefCell<Vec<String>>>) {
    let heard = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let h = heard.clone();
    let request = LlmRequest { on_text: Some(TextSink::new(move |t| h.borrow_mut().push(t.to_string()))), ..ask(json) };
    (request, heard)
}

#[test]
fn a_streamed_reply_is_heard_as_it_grows_and_ends_as_the_whole_reply() {
    let server = LlmServer::start();
    let text = "The glacier lake, in May — with Maya (“ok”).";
    server.config(json!({"pieceMs": 20})); // pieces apart, so that they arrive apart
    server.script(json!([{"reply": text, "usage": {"prompt_tokens": 21, "completion_tokens": 13}}]));
    let (request, heard) = streamed(false);
    let reply = block_on(client(&server).chat(&request)).unwrap();
    assert_eq!(reply.text, text);
    assert_eq!((reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.estimated), (21, 13, false));
    let heard = heard.borrow();
    assert!(heard.len() >= 2, "heard in pieces: {heard:?}");
    assert!(heard.windows(2).all(|w| w[1].starts_with(&w[0]) && w[1].len() > w[0].len()), "{heard:?}");
    assert_eq!(heard.last().map(String::as_str), Some(text));
    let log = server.log();
    assert_eq!(log[0]["body"]["stream"], json!(true));
    assert_eq!(log[0]["body"]["stream_options"], json!({"include_usage": true}));
    // Without a listener the request is streamed too (see the next tests), and its reply is the same.
    server.script(json!([{"reply": text, "usage": {"prompt_tokens": 21, "completion_tokens": 13}}]));
    let unheard = block_on(client(&server).chat(&ask(false))).unwrap();
    assert_eq!((unheard.text.as_str(), unheard.usage.output_tokens), (text, 13));
    assert_eq!(server.log()[1]["body"]["stream"], json!(true));
}

#[test]
fn a_stream_may_outlast_the_time_limit_while_it_goes_on_but_not_stall_past_it() {
    let server = LlmServer::start();
    // 70 characters in pieces of 5, 150 ms apart: ~2.1 s in all against the client's 1,000 ms limit.
    let text = "a reply written slowly, as a small model writes, longer than the limit";
    server.config(json!({"pieceMs": 150}));
    server.script(json!([{"reply": text}]));
    let (request, _) = streamed(false);
    let started = Instant::now();
    let reply = block_on(client(&server).chat(&request)).expect("a stream that goes on is waited for");
    assert_eq!(reply.text, text);
    assert!(started.elapsed().as_millis() > 1000, "the stream outlasted the limit: {:?}", started.elapsed());
    // A stream that stops going on (a piece 1,500 ms after the last) is a timeout, not retried.
    server.config(json!({"pieceMs": 1500}));
    server.script(json!([{"reply": text}]));
    let (request, _) = streamed(false);
    let err = block_on(client(&server).chat(&request)).unwrap_err();
    assert!(matches!(err, loci::Error::Timeout(_)), "{err:?}");
    assert_eq!(server.log().len(), 2);
}

#[test]
fn a_listener_that_stops_the_stream_ends_the_call_at_once() {
    let server = LlmServer::start();
    server.config(json!({"pieceMs": 30}));
    let text = "a long reply that the user stops as soon as it starts to be written, long before its end";
    server.script(json!([{"reply": text}, {"reply": "next"}]));
    let stop = loci::llm::AbortSignal::new();
    let (heard, s) = (std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new())), stop.clone());
    let h = heard.clone();
    let on_text = TextSink::new(move |t| {
        h.borrow_mut().push(t.to_string());
        s.abort();
    });
    let request = LlmRequest { on_text: Some(on_text), abort: Some(stop), ..ask(false) };
    let err = block_on(client(&server).chat(&request)).unwrap_err();
    assert!(matches!(err, loci::Error::Aborted), "{err:?}");
    // Read on to its end, the stream would have been heard ~18 times (a piece of 5 characters each time).
    assert_eq!(heard.borrow().len(), 1, "nothing read after the stop: {:?}", heard.borrow());
    assert!(text.starts_with(heard.borrow()[0].as_str()) && heard.borrow()[0].len() < text.len());
    assert_eq!(server.log().len(), 1, "not retried");
    assert_eq!(block_on(client(&server).chat(&ask(false))).unwrap().text, "next");
}

#[test]
fn a_streamed_reply_cut_at_its_cap_says_so_and_a_structured_retry_starts_the_text_again() {
    let server = LlmServer::start();
    server.script(json!([{"raw": "Sure: the lines are 1.1"}, {"reply": "{\"keep\": [\"1.1\"]}"}]));
    let (request, heard) = streamed(true);
    let r = block_on(chat_json::<QdpReply>(&client(&server), &request)).unwrap();
    assert_eq!((r.value.keep, r.calls), (vec!["1.1".to_string()], 2));
    let heard = heard.borrow();
    assert_eq!(heard.iter().filter(|t| t.as_str() == "Sure: the lines are 1.1").count(), 1, "{heard:?}");
    assert_eq!(heard.last().map(String::as_str), Some("{\"keep\": [\"1.1\"]}"), "the retry heard from its start");

    server.script(json!([{"cut": 7}]));
    let (request, _) = streamed(false);
    assert!(block_on(client(&server).chat(&request)).unwrap().truncated, "finish_reason length in the stream");
}

#[test]
fn a_server_that_does_not_stream_is_read_either_way() {
    let server = LlmServer::start();
    // Answers in one JSON body although asked to stream; then a server that refuses streamed requests.
    server.script(json!([
        {"body": {"choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}]}},
        {"status": 400, "message": "stream is not supported"},
        {"reply": "plain"},
        {"reply": "still plain"},
    ]));
    let c = client(&server);
    let (request, heard) = streamed(false);
    assert_eq!(block_on(c.chat(&request)).unwrap().text, "whole");
    assert_eq!(heard.borrow().last().map(String::as_str), None, "a JSON body is no stream to hear");
    assert_eq!(block_on(c.chat(&request)).unwrap().text, "plain");
    assert_eq!(block_on(c.chat(&request)).unwrap().text, "still plain");
    let log = server.log();
    assert_eq!(log.len(), 4);
    assert_eq!(log[1]["body"]["stream"], json!(true));
    assert_eq!((log[2]["body"]["stream"].clone(), log[3]["body"]["stream"].clone()), (json!(false), json!(false)));
}

#[test]
fn a_stream_cut_before_its_end_is_retried() {
    let server = LlmServer::start();
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half a rep\"},\"finish_reason\":null}]}\n\n";
    server.script(json!([{"body": cut}, {"reply": "the whole reply"}]));
    let (request, heard) = streamed(false);
    assert_eq!(block_on(client(&server).chat(&request)).unwrap().text, "the whole reply");
    assert_eq!(server.log().len(), 2);
    assert_eq!(heard.borrow().first().map(String::as_str), Some("half a rep"));
}

/// A request with every optional parameter loci sends.
fn capped() -> LlmRequest {
    LlmRequest { max_tokens: Some(100), frequency_penalty: Some(0.3), ..ask(false) }
}

#[test]
fn parameters_a_model_refuses_are_renamed_or_left_out_once_and_for_all() {
    // OpenAI's reasoning models (gpt-5, o-series) refuse `max_tokens`, a temperature other than 1 and
    // `frequency_penalty`, one 400 at a time.
    let server = LlmServer::start();
    server.config(json!({"refuse": ["max_tokens", "temperature", "frequency_penalty"]}));
    server.script(json!([{"reply": "first"}, {"reply": "second"}]));
    let c = client(&server);
    assert_eq!(block_on(c.chat(&capped())).unwrap().text, "first");
    let sent: Vec<serde_json::Value> = server.log().iter().map(|r| r["body"].clone()).collect();
    assert_eq!(sent.len(), 4, "each refusal answered by one resend: {sent:?}");
    let has = |i: usize, k: &str| sent[i].get(k).is_some();
    assert!(has(0, "max_tokens") && has(0, "temperature") && has(0, "frequency_penalty"));
    assert!(!has(1, "max_tokens") && sent[1]["max_completion_tokens"] == json!(100) && has(1, "temperature"));
    assert!(!has(2, "temperature") && has(2, "frequency_penalty"));
    assert!(!has(3, "frequency_penalty") && !has(3, "temperature") && sent[3]["max_completion_tokens"] == json!(100));
    assert_eq!(c.refused(), ["max_tokens", "temperature", "frequency_penalty"]);
    // Remembered: the next call is sent right the first time.
    assert_eq!(block_on(c.chat(&capped())).unwrap().text, "second");
    assert_eq!(server.log().len(), 5);
    // A refusal of something loci did not send, or sent as the server asked, stands.
    server.reset();
    server.script(
        json!([{"status": 400, "message": "Unsupported parameter: 'top_p' is not supported with this model."}]),
    );
    assert_eq!(block_on(c.chat(&capped())).unwrap_err().code(), "LLM_REJECTED");
    assert_eq!(server.log().len(), 1);
}

#[test]
fn extra_body_fields_go_with_every_request_without_replacing_the_clients_own() {
    let server = LlmServer::start();
    let mut config = OpenAiConfig::new(server.base_url(), "test-model");
    config.extra_body = json!({"reasoning_effort": "low", "seed": 7, "temperature": 0.9, "model": "other"})
        .as_object()
        .cloned()
        .unwrap();
    let c = OpenAiClient::new(config, UreqTransport::new()).unwrap();
    block_on(c.chat(&capped())).unwrap();
    let body = &server.log()[0]["body"];
    assert_eq!((body["reasoning_effort"].clone(), body["seed"].clone()), (json!("low"), json!(7)));
    assert_eq!((body["model"].clone(), body["temperature"].as_f64()), (json!("test-model"), Some(0.0)));
}

#[test]
fn a_server_that_takes_every_parameter_gets_them_as_before() {
    let server = LlmServer::start();
    // A 400 that names a parameter without refusing it is not a refusal, even with OpenAI's `param` field.
    let too_large = json!({"error": {"message": "max_tokens is too large: 20000. This model supports at most 16384 \
        completion tokens, whereas you provided 20000.", "type": "invalid_request_error", "param": "max_tokens",
        "code": "invalid_value"}});
    server.script(json!([{"status": 400, "message": "max_tokens must be at least 1"}, {"body400": too_large}]));
    let c = client(&server);
    assert_eq!(block_on(c.chat(&capped())).unwrap_err().code(), "LLM_REJECTED");
    assert_eq!(block_on(c.chat(&capped())).unwrap_err().code(), "LLM_REJECTED");
    assert!(c.refused().is_empty());
    block_on(c.chat(&capped())).unwrap();
    let body = &server.log()[2]["body"];
    assert_eq!((body["max_tokens"].as_u64(), body["temperature"].as_f64()), (Some(100), Some(0.0)));
    assert!(body.get("max_completion_tokens").is_none());
}

#[test]
fn a_reasoning_models_thoughts_are_neither_its_reply_nor_heard() {
    let server = LlmServer::start();
    // Thoughts in the content that quote a JSON object, as a small reasoning model's do.
    server.config(json!({"reasoning": {"tokens": 60, "style": "think"}, "pieceMs": 2}));
    server.script(json!([{"reply": "Paris, in May."}, {"reply": "{\"keep\": [\"1.2\"]}"}]));
    let c = client(&server);
    let (request, heard) = streamed(false);
    let reply = block_on(c.chat(&request)).unwrap();
    assert_eq!(reply.text, "Paris, in May.");
    let heard = heard.borrow();
    assert!(!heard.is_empty() && heard.iter().all(|t| "Paris, in May.".starts_with(t.as_str())), "{heard:?}");
    assert_eq!(heard.last().map(String::as_str), Some("Paris, in May."));
    assert!(server.log()[0]["body"]["stream"] == json!(true));
    assert!(c.reasons());
    // A structured step reads the object after the thoughts, not the one they quote.
    let parsed = block_on(chat_json::<QdpReply>(&c, &ask(true))).unwrap();
    assert_eq!(parsed.value.keep, vec!["1.2"]);
    assert_eq!(parsed.calls, 1);
}

#[test]
fn a_slow_model_is_streamed_so_that_the_time_limit_cuts_a_silence_not_a_long_reply() {
    let server = LlmServer::start();
    // A small local model: ~1.6 s of thoughts and answer in pieces 40 ms apart, against the client's 1 s limit (a
    // reply not streamed comes when its last piece would have). Nobody listens to the text.
    let slow = json!({"reasoning": {"tokens": 40, "style": "think"}, "pieceMs": 40, "wholeAfterPieces": true});
    server.config(slow.clone());
    server.script(json!([{"reply": "the answer"}]));
    let c = client(&server);
    let reply = block_on(c.chat(&ask(false))).expect("a reply that keeps coming is waited for");
    assert_eq!(reply.text, "the answer");
    assert!(c.reasons());
    assert_eq!(server.log()[0]["body"]["stream"], json!(true));
    // A server that refuses streams is awaited whole, and the same reply is cut by the limit.
    let server = LlmServer::start();
    server.config(slow);
    server.script(json!([{"status": 400, "message": "stream is not supported"}, {"reply": "the answer"}]));
    assert_eq!(block_on(client(&server).chat(&ask(false))).unwrap_err().code(), "TIMEOUT");
    let log = server.log();
    assert_eq!((log[0]["body"]["stream"].clone(), log[1]["body"]["stream"].clone()), (json!(true), json!(false)));
}

#[test]
fn a_reasoning_model_gets_room_to_think_within_its_window() {
    let server = LlmServer::start();
    // Its hidden reasoning (300 tokens) does not fit the step's cap (100): the first reply is empty, cut at the cap.
    server.config(json!({"reasoning": {"tokens": 300, "style": "hidden"}}));
    server.script(json!([{"reply": "the answer", "times": 3}]));
    let c = client(&server);
    assert!(!c.reasons());
    let reply = block_on(c.chat(&LlmRequest { max_tokens: Some(100), ..ask(false) })).unwrap();
    assert_eq!((reply.text.as_str(), reply.truncated), ("the answer", false));
    let caps: Vec<serde_json::Value> = server.log().iter().map(|r| r["body"]["max_tokens"].clone()).collect();
    assert_eq!(caps, vec![json!(100), json!(100 + loci::llm::openai::REASONING_ALLOWANCE_TOKENS)]);
    // From then on every cap has the room at once.
    block_on(c.chat(&LlmRequest { max_tokens: Some(100), ..ask(false) })).unwrap();
    assert_eq!(server.log()[2]["body"]["max_tokens"], json!(100 + loci::llm::openai::REASONING_ALLOWANCE_TOKENS));

    // In a small window the room is what the prompt leaves; the server's window check passes.
    let server = LlmServer::start();
    server.config(json!({"reasoning": {"tokens": 300, "style": "hidden"}, "contextTokens": 1024}));
    let mut config = OpenAiConfig::new(server.base_url(), "test-model");
    config.context_tokens = 1024;
    let c = OpenAiClient::new(config, UreqTransport::new()).unwrap();
    let reply = block_on(c.chat(&LlmRequest { max_tokens: Some(100), ..ask(false) })).unwrap();
    assert!(!reply.truncated && !reply.text.is_empty(), "{reply:?}");
    let cap = server.log()[1]["body"]["max_tokens"].as_u64().unwrap();
    assert!((400..1024).contains(&cap), "{cap}");
}
