//! The OpenAI-compatible chat-completions client, shared by every target. It builds requests, parses responses and
//! applies the retry policy; moving bytes, sleeping and reading the clock belong to an [`HttpTransport`]
//! (`native::UreqTransport`, `fetch::FetchTransport`), so the policy is tested natively against a real server and
//! runs unchanged in the page.
//!
//! Policy:
//! - network errors (refused, reset, dropped), 429 and 5xx are retried up to [`OpenAiConfig::max_retries`] times
//!   with exponential backoff and full jitter; a 429's `Retry-After` (seconds or an HTTP date) is honoured.
//! - other 4xx are not retried ([`Error::LlmRejected`]); a timeout is not retried either ([`Error::Timeout`]):
//!   `timeout_ms` bounds what the caller waits for a hung server. Every request is streamed (unless the server
//!   refused a stream), so it bounds each wait for the reply to start or go on: a slow model that keeps writing is
//!   not cut, and one that stops is detected. For a server that does not stream it bounds the whole reply.
//! - JSON requests send `response_format`; a 400 whose body mentions `response_format` (or `json_schema` /
//!   `json_object`) switches it off for this client and the request is resent at once (not counted as a retry).
//! - usage comes from the response; when absent it is estimated with our tokenizer (`Usage::estimated`).
//! - at most `max_concurrency` requests are in flight per client; the others wait their turn.
//!
//! It must never log, persist or echo the API key: `Debug` redacts it and errors carry no request headers.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{estimate_tokens, visible_text, AbortSignal, Llm, LlmReply, LlmRequest, Usage};
use crate::error::{Error, Result};
use crate::text::WordPiece;

/// An HTTP response, body as text.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Why a request got no HTTP response.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportError {
    /// No response within the time limit.
    Timeout,
    /// Connection refused, reset, dropped mid-response, DNS… (retryable).
    Network(String),
    /// The abort signal fired.
    Aborted,
}

/// Moves one request; sleeps; reads a clock. The only target-specific part of the client.
#[async_trait(?Send)]
pub trait HttpTransport {
    /// One POST. With `on_chunk` (a streamed reply) a 2xx body's text is handed to it piece by piece as it arrives,
    /// and `timeout_ms` bounds each wait for the server rather than the whole reply; the response holds the whole
    /// body either way. One method for both, so that a transport wrapping another cannot forget to pass a stream on.
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&AbortSignal>,
        on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
    ) -> std::result::Result<HttpResponse, TransportError>;
    async fn sleep(&self, ms: u64);
    /// Milliseconds on a monotonic clock.
    fn now_ms(&self) -> f64;
}

/// Connection settings. `Debug` shows the API key as `[redacted]`.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; kept in memory only.
    pub api_key: Option<String>,
    pub model: String,
    /// Extra headers (e.g. an organisation id). Values of headers that look secret are redacted in `Debug`.
    pub headers: Vec<(String, String)>,
    /// Per attempt; for a streamed reply, per wait for it to start or go on.
    pub timeout_ms: u64,
    pub max_concurrency: usize,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubles per retry, full jitter in [½, 1] of it, capped at `backoff_max_ms`.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// A `Retry-After` longer than this fails at once with `LLM_RATE_LIMITED` instead of waiting.
    pub max_retry_after_ms: u64,
    /// The model's context window in tokens; prompts are sized against it ([`super::fit`]).
    pub context_tokens: usize,
    /// Fields added to every request body (a server's own parameters: `reasoning_effort`, `seed`, …). The fields
    /// the client sets itself are not replaced.
    pub extra_body: serde_json::Map<String, Value>,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            headers: Vec::new(),
            timeout_ms: 60_000,
            max_concurrency: 4,
            max_retries: 4,
            backoff_base_ms: 500,
            backoff_max_ms: 20_000,
            max_retry_after_ms: 60_000,
            context_tokens: super::fit::DEFAULT_CONTEXT_TOKENS,
            extra_body: serde_json::Map::new(),
        }
    }

    /// Checks the settings a caller gives.
    pub fn validate(&self) -> Result<()> {
        let url = self.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::invalid("`llm.baseUrl` must be an http(s) URL"));
        }
        if self.model.trim().is_empty() {
            return Err(Error::invalid("`llm.model` is required"));
        }
        if self.context_tokens < 512 {
            return Err(Error::invalid("`llm.contextTokens` must be at least 512"));
        }
        if self.timeout_ms == 0 || self.max_concurrency == 0 {
            return Err(Error::invalid("`llm.timeoutMs` and `llm.maxConcurrency` must be positive"));
        }
        if self
            .headers
            .iter()
            .any(|(k, v)| k.trim().is_empty() || k.contains(['\r', '\n', ':']) || v.contains(['\r', '\n']))
        {
            return Err(Error::invalid("`llm.headers` has an invalid header name or value"));
        }
        Ok(())
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim().trim_end_matches('/'))
    }
}

fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["authorization", "key", "token", "secret", "cookie"].iter().any(|s| n.contains(s))
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret_header(k) { "[redacted]" } else { v.as_str() }))
            .collect();
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("headers", &headers)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// The client. Generic over the transport; one per endpoint (the JSON-mode fallback is remembered per client).
pub struct OpenAiClient<T: HttpTransport> {
    config: OpenAiConfig,
    transport: T,
    tokenizer: Option<Rc<WordPiece>>,
    slots: Semaphore,
    /// Cleared once the server rejected `response_format`.
    response_format_ok: Cell<bool>,
    /// Cleared once the server rejected a streamed request.
    stream_ok: Cell<bool>,
    /// The optional parameters the server refused by name ([`REFUSABLE`]), left out from then on (`max_tokens`
    /// sent as `max_completion_tokens` instead).
    refused: RefCell<Vec<&'static str>>,
    /// Set once a reply showed that the model reasons before it answers: output caps get room for the reasoning.
    reasons: Cell<bool>,
    rng: Cell<u64>,
}

/// The optional parameters a server may refuse by name. OpenAI's reasoning models (o-series, gpt-5 and later) refuse
/// `max_tokens` ("Use 'max_completion_tokens' instead"), any `temperature` but 1 and `frequency_penalty`; each is
/// found by a 400 naming it ([`refused_param`]), and the request is sent again at once without it.
const REFUSABLE: [&str; 4] = ["max_tokens", "max_completion_tokens", "temperature", "frequency_penalty"];

/// Output tokens added to each cap for a model that reasons (at most what the window leaves): loci's caps are sized
/// for the answer alone (a JSON object, a short reply), and a reasoning model spends its cap on thinking first. Its
/// hidden reasoning for such a step is typically a few hundred tokens.
pub const REASONING_ALLOWANCE_TOKENS: u32 = 2048;

impl<T: HttpTransport> std::fmt::Debug for OpenAiClient<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("config", &self.config)
            .field("response_format_ok", &self.response_format_ok.get())
            .finish_non_exhaustive()
    }
}

impl<T: HttpTransport> OpenAiClient<T> {
    pub fn new(config: OpenAiConfig, transport: T) -> Result<Self> {
        config.validate()?;
        let seed = (transport.now_ms().to_bits() ^ 0x9E37_79B9_7F4A_7C15) | 1;
        Ok(OpenAiClient {
            slots: Semaphore::new(config.max_concurrency),
            config,
            transport,
            tokenizer: None,
            response_format_ok: Cell::new(true),
            stream_ok: Cell::new(true),
            refused: RefCell::new(Vec::new()),
            reasons: Cell::new(false),
            rng: Cell::new(seed),
        })
    }

    /// Estimate missing usage with this tokenizer (the embedding model's) instead of characters / 4.
    pub fn with_tokenizer(mut self, tokenizer: Rc<WordPiece>) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The transport the client sends through (e.g. to read a replay cache's counts when a run is done).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Whether `response_format` is still being sent (false after the server rejected it).
    pub fn response_format_supported(&self) -> bool {
        self.response_format_ok.get()
    }

    /// The optional parameters the server refused so far, in the order it did.
    pub fn refused(&self) -> Vec<&'static str> {
        self.refused.borrow().clone()
    }

    /// Whether a reply showed that the model reasons before answering (its caps then get
    /// [`REASONING_ALLOWANCE_TOKENS`] more).
    pub fn reasons(&self) -> bool {
        self.reasons.get()
    }

    /// The output cap sent for `request`: its own, plus room for reasoning once the model is known to reason, as far
    /// as the window leaves room after the prompt (a prompt sized to fill the window gets none).
    fn cap(&self, request: &LlmRequest) -> Option<u32> {
        let cap = request.max_tokens?;
        if !self.reasons.get() {
            return Some(cap);
        }
        // A tenth of the window stays free: the prompt's size is an estimate.
        let prompt = self.estimate(request, "").input_tokens;
        let room = (self.config.context_tokens as u64 * 9 / 10).saturating_sub(prompt + cap as u64);
        Some(cap + REASONING_ALLOWANCE_TOKENS.min(room.min(u32::MAX as u64) as u32))
    }

    /// The request body; `response_format` only when asked and not known to be rejected. Every request is a
    /// streamed completion unless the server refused one: then `timeout_ms` bounds each wait for the reply to start
    /// or go on, not the whole reply. A small local model writes ~10–20 tokens a second, so a step's reply at its
    /// cap takes minutes, and a whole-reply limit would fail every such call of a model that is working.
    pub fn body(&self, request: &LlmRequest) -> Value {
        let stream = self.stream_ok.get();
        let mut body = json!({
            "model": self.config.model,
            "messages": request.messages,
            "stream": stream,
        });
        if stream {
            // The usage comes in a last chunk only when asked for (OpenAI, llama.cpp, vLLM).
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = self.cap(request) {
            body["max_tokens"] = json!(m);
        }
        if let Some(p) = request.frequency_penalty {
            body["frequency_penalty"] = json!(p);
        }
        if self.response_format_ok.get() {
            if let Some(s) = &request.json_schema {
                body["response_format"] =
                    json!({"type": "json_schema", "json_schema": {"name": s.name, "schema": s.schema, "strict": true}});
            } else if request.json {
                body["response_format"] = json!({"type": "json_object"});
            }
        }
        if let Value::Object(fields) = &mut body {
            for (k, v) in &self.config.extra_body {
                fields.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let refused = self.refused.borrow();
            for &k in refused.iter() {
                let value = fields.remove(k);
                if let Some(v) = value.filter(|_| k == "max_tokens" && !refused.contains(&"max_completion_tokens")) {
                    fields.insert("max_completion_tokens".into(), v);
                }
            }
        }
        body
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("Content-Type".to_string(), "application/json".to_string())];
        if let Some(k) = &self.config.api_key {
            h.push(("Authorization".into(), format!("Bearer {k}")));
        }
        h.extend(self.config.headers.iter().cloned());
        h
    }

    /// An error answer as text for loci's error, with the key and the header values taken out: an endpoint (or a
    /// proxy) that echoes the request would otherwise put them in an error message, which a job keeps in its
    /// `lastError` in IndexedDB.
    fn describe(&self, resp: &HttpResponse) -> String {
        let mut text = describe(resp);
        let secrets = self.config.api_key.iter().chain(self.config.headers.iter().map(|(_, v)| v));
        for secret in secrets.filter(|s| s.len() >= 8) {
            text = text.replace(secret.as_str(), "[redacted]");
        }
        text
    }

    fn backoff_ms(&self, retry: u32) -> u64 {
        // xorshift64*: jitter only, no need for a crypto source.
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        let cap = self.config.backoff_base_ms.saturating_mul(1 << retry.min(20)).min(self.config.backoff_max_ms);
        (cap as f64 * (0.5 + 0.5 * unit)) as u64
    }

    async fn sleep(&self, ms: u64, abort: Option<&AbortSignal>) -> Result<()> {
        // Sleep in slices so an abort is noticed within ~100 ms even on transports that cannot cancel a timer.
        let end = self.transport.now_ms() + ms as f64;
        loop {
            if let Some(a) = abort {
                a.check()?;
            }
            let left = end - self.transport.now_ms();
            if left <= 0.0 {
                return Ok(());
            }
            self.transport.sleep((left as u64).clamp(1, 100)).await;
        }
    }

    async fn call(&self, request: &LlmRequest) -> Result<LlmReply> {
        let start = self.transport.now_ms();
        let abort = request.abort.as_ref();
        let url = self.config.url();
        let headers = self.headers();
        let mut retries = 0u32;
        // The listener hears the reply without the model's reasoning: nothing while it thinks.
        let listener = request.on_text.as_ref().map(super::TextSink::without_reasoning);
        loop {
            if let Some(a) = abort {
                a.check()?;
            }
            let body = self.body(request);
            let sent_format = body.get("response_format").is_some();
            let streamed = body["stream"] == json!(true);
            let events = RefCell::new(StreamedReply::default());
            let on_chunk = |chunk: &str| {
                let mut events = events.borrow_mut();
                let grew = events.feed(chunk);
                if let Some(sink) = listener.as_ref().filter(|_| grew) {
                    sink.send(&events.text);
                }
            };
            let on_chunk = streamed.then_some(&on_chunk as &dyn Fn(&str));
            let text = body.to_string();
            let outcome = self.transport.post(&url, &headers, &text, self.config.timeout_ms, abort, on_chunk).await;
            // What to do: Ok(reply), Err((error, Some(wait))) to retry, Err((error, None)) to fail.
            let (error, wait): (Error, Option<u64>) = match outcome {
                Err(TransportError::Aborted) => return Err(Error::Aborted),
                Err(TransportError::Timeout) if streamed => {
                    let ms = self.config.timeout_ms;
                    // The first wait includes the server reading the prompt: minutes for a long one on a CPU.
                    return Err(Error::Timeout(format!(
                        "the LLM's streamed reply did not start or go on within {ms} ms (a slow model reading a \
                         long prompt needs a larger `timeoutMs`)"
                    )));
                }
                Err(TransportError::Timeout) => {
                    return Err(Error::Timeout(format!("no reply from the LLM within {} ms", self.config.timeout_ms)))
                }
                Err(TransportError::Network(e)) => (Error::LlmUnavailable(e), Some(self.backoff_ms(retries))),
                Ok(resp) if (200..300).contains(&resp.status) => match parse_any_reply(&resp.body) {
                    Ok(Parsed { text, usage, truncated, reasoned }) => {
                        if reasoned && !self.reasons.replace(true) {
                            // First sign that the model reasons: a reply whose cap went on thinking is asked again
                            // at once with room for it (not a retry), where the window leaves any.
                            let before = request.max_tokens;
                            if truncated && text.trim().is_empty() && self.cap(request) != before {
                                continue;
                            }
                        }
                        let usage = usage.unwrap_or_else(|| self.estimate(request, &text));
                        let latency_ms = self.transport.now_ms() - start;
                        return Ok(LlmReply { text, usage, latency_ms, truncated });
                    }
                    // A garbled 200 (a proxy cut the body) is transient as far as we can tell.
                    Err(e) => (e, Some(self.backoff_ms(retries))),
                },
                Ok(resp) if resp.status == 400 && sent_format && mentions_response_format(&resp.body) => {
                    self.response_format_ok.set(false);
                    continue;
                }
                Ok(resp) if resp.status == 400 && streamed && mentions_stream(&resp.body) => {
                    self.stream_ok.set(false);
                    continue;
                }
                // The prompt is too long for this model: not retried as is (the caller sends it smaller).
                Ok(resp) if (resp.status == 400 || resp.status == 413) && mentions_context_size(&resp.body) => {
                    (Error::LlmContextExceeded(self.describe(&resp)), None)
                }
                Ok(resp) if self.refuse(refused_param(&resp, &body)) => continue,
                Ok(resp) if resp.status == 429 => {
                    let hint = resp.header("retry-after").and_then(|v| parse_retry_after(v, self.transport.now_ms()));
                    let err = Error::LlmRateLimited { message: self.describe(&resp), retry_after_ms: hint };
                    match hint {
                        Some(ms) if ms > self.config.max_retry_after_ms => (err, None),
                        Some(ms) => (err, Some(ms)),
                        None => (err, Some(self.backoff_ms(retries))),
                    }
                }
                Ok(resp) if resp.status >= 500 => {
                    (Error::LlmUnavailable(self.describe(&resp)), Some(self.backoff_ms(retries)))
                }
                Ok(resp) => (Error::LlmRejected(self.describe(&resp)), None),
            };
            match wait {
                Some(ms) if retries < self.config.max_retries => {
                    retries += 1;
                    self.sleep(ms, abort).await?;
                }
                _ => return Err(error),
            }
        }
    }

    /// Leaves out (or renames) the parameter a server refused; false when there is none, or it was already left
    /// out (then the refusal stands).
    fn refuse(&self, param: Option<&'static str>) -> bool {
        let mut refused = self.refused.borrow_mut();
        match param {
            Some(p) if !refused.contains(&p) => {
                refused.push(p);
                true
            }
            _ => false,
        }
    }

    fn estimate(&self, request: &LlmRequest, text: &str) -> Usage {
        let tok = self.tokenizer.as_deref();
        // ~4 tokens of chat-format overhead per message, as OpenAI documents.
        let input = request.messages.iter().map(|m| estimate_tokens(&m.content, tok) + 4).sum();
        Usage { input_tokens: input, output_tokens: estimate_tokens(text, tok), estimated: true }
    }
}

#[async_trait(?Send)]
impl<T: HttpTransport> Llm for OpenAiClient<T> {
    fn context_tokens(&self) -> usize {
        self.config.context_tokens
    }

    async fn chat(&self, request: &LlmRequest) -> Result<LlmReply> {
        if request.messages.is_empty() {
            return Err(Error::invalid("an LLM request needs at least one message"));
        }
        if let Some(a) = &request.abort {
            a.check()?;
        }
        let _slot = self.slots.acquire().await;
        self.call(request).await
    }
}

/// What a chat-completions response body says.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The content without the model's reasoning ([`visible_text`]).
    pub text: String,
    pub usage: Option<Usage>,
    /// `finish_reason: "length"`: the model stopped at the output cap.
    pub truncated: bool,
    /// The model reasoned before answering: reasoning tokens in the usage (OpenAI's reasoning models), a
    /// `reasoning_content` / `reasoning` field (DeepSeek, llama.cpp, Ollama, OpenRouter) or a `<think>` block in the
    /// content. Its reasoning counts against the output cap.
    pub reasoned: bool,
}

impl Parsed {
    fn new(raw: &str, usage: Option<Usage>, truncated: bool, reasoned: bool) -> Self {
        let (text, thought) = visible_text(raw);
        Parsed { text: text.to_string(), usage, truncated, reasoned: reasoned || thought }
    }
}

/// The content, usage and finish reason of a chat-completions response body.
pub fn parse_reply(body: &str) -> Result<Parsed> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| Error::LlmBadReply(format!("the response is not JSON ({e}): {}", snippet(body))))?;
    let content = &v["choices"][0]["message"]["content"];
    let text = match content {
        Value::String(s) => s.clone(),
        // Some servers return content parts.
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => return Err(Error::LlmBadReply(format!("the response has no message content: {}", snippet(body)))),
    };
    let usage = usage_of(&v);
    let truncated = v["choices"][0]["finish_reason"].as_str() == Some("length");
    let reasoned = reasoned_in(&v["choices"][0]["message"]) || reasoning_tokens(&v) > 0;
    Ok(Parsed::new(&text, usage, truncated, reasoned))
}

/// A 2xx body: a streamed completion (server-sent events) when it is one, else a JSON completion (a server that
/// does not stream answers in one piece).
pub fn parse_any_reply(body: &str) -> Result<Parsed> {
    let mut events = StreamedReply::default();
    events.feed(body);
    events.feed("\n");
    if !events.seen {
        return parse_reply(body);
    }
    if let Some(message) = events.error {
        return Err(Error::LlmUnavailable(format!("the stream reported an error: {message}")));
    }
    if !events.done && !events.finished {
        // Cut off before its end (a proxy, a dropped connection): transient as far as we can tell.
        return Err(Error::LlmBadReply(format!("the stream ended early: {}", snippet(&events.text))));
    }
    Ok(Parsed::new(&events.text, events.usage, events.truncated, events.reasoned))
}

/// A streamed chat completion read as it arrives: `data: {…}` lines whose `choices[0].delta.content` pieces make the
/// text, the finish reason in the last of them, the usage in a chunk after it (when asked for), then `data: [DONE]`.
#[derive(Debug, Default)]
struct StreamedReply {
    /// A line not yet complete.
    pending: String,
    text: String,
    usage: Option<Usage>,
    truncated: bool,
    /// A completion event was read (the body is a stream).
    seen: bool,
    /// A finish reason was read.
    finished: bool,
    /// `[DONE]` was read.
    done: bool,
    error: Option<String>,
    /// Reasoning was streamed beside the content, or counted in the usage.
    reasoned: bool,
}

impl StreamedReply {
    /// Reads the complete lines of `chunk` (with what was pending); whether the text grew.
    fn feed(&mut self, chunk: &str) -> bool {
        self.pending.push_str(chunk);
        let mut grew = false;
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            let Some(data) = line.trim_end().strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
            if let Some(e) = v.get("error") {
                self.seen = true;
                self.error = Some(e["message"].as_str().map_or_else(|| e.to_string(), String::from));
                continue;
            }
            if v.get("choices").is_none() {
                continue;
            }
            self.seen = true;
            let choice = &v["choices"][0];
            if let Some(piece) = choice["delta"]["content"].as_str() {
                self.text.push_str(piece);
                grew |= !piece.is_empty();
            }
            self.reasoned |= reasoned_in(&choice["delta"]) || reasoning_tokens(&v) > 0;
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finished = true;
                self.truncated = reason == "length";
            }
            if let Some(u) = usage_of(&v) {
                self.usage = Some(u);
            }
        }
        grew
    }
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    Some(Usage {
        input_tokens: u.get("prompt_tokens")?.as_u64()?,
        output_tokens: u.get("completion_tokens")?.as_u64()?,
        estimated: false,
    })
}

/// Reasoning tokens in a response's usage (`completion_tokens_details.reasoning_tokens`, OpenAI's reasoning models).
fn reasoning_tokens(v: &Value) -> u64 {
    v["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0)
}

/// Whether a message (or a streamed delta) carries reasoning beside its content: `reasoning_content` (DeepSeek,
/// llama.cpp, vLLM) or `reasoning` (Ollama, OpenRouter).
fn reasoned_in(message: &Value) -> bool {
    ["reasoning_content", "reasoning"].iter().any(|k| message[k].as_str().is_some_and(|r| !r.trim().is_empty()))
}

/// A 400 that says the server does not stream (or not with `stream_options`).
fn mentions_stream(body: &str) -> bool {
    body.to_ascii_lowercase().contains("stream")
}

/// An endpoint's "prompt too long" in its many wordings: llama.cpp ("exceeds the available context size",
/// `exceed_context_size_error`), OpenAI (`context_length_exceeded`, "maximum context length"), vLLM and others
/// ("context length", "too many tokens", "prompt is too long").
fn mentions_context_size(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context size",
        "context_size",
        "context length",
        "context_length",
        "context window",
        "too many tokens",
        "prompt is too long",
        "input is too long",
    ]
    .iter()
    .any(|p| b.contains(p))
}

/// The optional parameter of `sent` that a 400 (or 422) refuses by name: OpenAI's `error.param` (`"param":
/// "max_tokens"`, code `unsupported_parameter` or `unsupported_value`), else an error message that names it and says
/// it is not supported ("Unsupported parameter: 'frequency_penalty' is not supported with this model.",
/// "Extra inputs are not permitted").
fn refused_param(resp: &HttpResponse, sent: &Value) -> Option<&'static str> {
    if resp.status != 400 && resp.status != 422 {
        return None;
    }
    let sent: Vec<&'static str> = REFUSABLE.into_iter().filter(|k| sent.get(*k).is_some()).collect();
    let v: Value = serde_json::from_str(&resp.body).unwrap_or(Value::Null);
    let message =
        v["error"]["message"].as_str().map_or_else(|| resp.body.to_ascii_lowercase(), str::to_ascii_lowercase);
    // A refusal, not a bad value: "max_tokens is too large" (`param: "max_tokens"` too) keeps its parameter.
    let refusal = ["unsupported", "not supported", "does not support", "not allowed", "not permitted", "unrecognized"];
    let code = v["error"]["code"].as_str().unwrap_or("");
    if !code.starts_with("unsupported") && !refusal.iter().any(|r| message.contains(r)) {
        return None;
    }
    if let Some(param) = v["error"]["param"].as_str() {
        if let Some(&k) = sent.iter().find(|k| **k == param) {
            return Some(k);
        }
    }
    // The first named: "'max_tokens' is not supported … Use 'max_completion_tokens' instead" names both.
    sent.into_iter().filter_map(|k| message.find(k).map(|at| (at, k))).min().map(|(_, k)| k)
}

fn mentions_response_format(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("response_format") || b.contains("json_schema") || b.contains("json_object")
}

/// `Retry-After` as milliseconds: delta-seconds (fractions accepted) or an HTTP date.
pub fn parse_retry_after(value: &str, _now_ms: f64) -> Option<u64> {
    let v = value.trim();
    if let Some(ms) = delta_seconds_ms(v) {
        return Some(ms);
    }
    // IMF-fixdate, RFC 850 or asctime, the three forms HTTP allows.
    let date = httpdate::parse_http_date(v).ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    // The transport's clock is monotonic, not wall time: compare the date with the wall clock.
    let now = wall_clock_ms()?;
    Some((date.as_millis() as f64 - now).max(0.0) as u64)
}

/// Delta-seconds as milliseconds: digits, optionally a fraction (`1.5`: some servers send one). Read by hand, not
/// with `str::parse::<f64>`, whose tables are ~15 KB of the wasm for this one header (issue 41).
fn delta_seconds_ms(v: &str) -> Option<u64> {
    let (whole, fraction) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (v.contains('.') && fraction.is_empty()) {
        return None;
    }
    // Digits too many for a u64 saturate: any such wait is "very long".
    let secs: u64 = whole.parse().unwrap_or(u64::MAX / 1000);
    let ms: u64 = fraction.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0, |n, b| n * 10 + u64::from(b - b'0'));
    Some(secs.saturating_mul(1000).saturating_add(ms))
}

#[cfg(not(target_arch = "wasm32"))]
fn wall_clock_ms() -> Option<f64> {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(d.as_millis() as f64)
}

#[cfg(target_arch = "wasm32")]
fn wall_clock_ms() -> Option<f64> {
    Some(js_sys::Date::now())
}

fn describe(resp: &HttpResponse) -> String {
    let msg = serde_json::from_str::<Value>(&resp.body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| snippet(&resp.body));
    format!("HTTP {}: {msg}", resp.status)
}

fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// A counting semaphore for one thread (the page's event loop, or a native single-threaded executor).
struct Semaphore(Rc<RefCell<SemState>>);

struct SemState {
    free: usize,
    waiters: VecDeque<Waker>,
}

struct Permit(Rc<RefCell<SemState>>);

impl Semaphore {
    fn new(n: usize) -> Self {
        Semaphore(Rc::new(RefCell::new(SemState { free: n.max(1), waiters: VecDeque::new() })))
    }

    fn acquire(&self) -> Acquire {
        Acquire(self.0.clone())
    }
}

struct Acquire(Rc<RefCell<SemState>>);

impl Future for Acquire {
    type Output = Permit;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let mut s = self.0.borrow_mut();
        if s.free > 0 {
            s.free -= 1;
            Poll::Ready(Permit(self.0.clone()))
        } else {
            s.waiters.push_back(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.0.borrow_mut();
        s.free += 1;
        // Wake every waiter: they re-check; stale wakers are harmless.
        let waiters = std::mem::take(&mut s.waiters);
        drop(s);
        waiters.into_iter().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, JsonSchema};

    /// Headers and body of one request.
    type Sent = (Vec<(String, String)>, Value);

    /// A transport that answers from a queue and records what it was sent; its clock advances only by sleeping.
    struct Fake {
        replies: RefCell<VecDeque<std::result::Result<HttpResponse, TransportError>>>,
        sent: RefCell<Vec<Sent>>,
        slept: RefCell<Vec<u64>>,
        clock: Cell<f64>,
    }

    fn ok(status: u16, body: &str) -> std::result::Result<HttpResponse, TransportError> {
        Ok(HttpResponse { status, headers: vec![], body: body.into() })
    }

    fn completion(text: &str) -> String {
        json!({"choices": [{"message": {"role": "assistant", "content": text}}],
               "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
        .to_string()
    }

    #[async_trait(?Send)]
    impl HttpTransport for Fake {
        async fn post(
            &self,
            _url: &str,
            headers: &[(String, String)],
            body: &str,
            _timeout_ms: u64,
            _abort: Option<&AbortSignal>,
            _on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
        ) -> std::result::Result<HttpResponse, TransportError> {
            self.sent.borrow_mut().push((headers.to_vec(), serde_json::from_str(body).unwrap()));
            self.replies.borrow_mut().pop_front().expect("a scripted reply")
        }
        async fn sleep(&self, ms: u64) {
            self.slept.borrow_mut().push(ms);
            self.clock.set(self.clock.get() + ms as f64);
        }
        fn now_ms(&self) -> f64 {
            self.clock.get()
        }
    }

    fn client(replies: Vec<std::result::Result<HttpResponse, TransportError>>) -> OpenAiClient<Fake> {
        let mut config = OpenAiConfig::new("http://x/v1/", "m");
        config.api_key = Some("sk-secret".into());
        config.backoff_base_ms = 100;
        let fake = Fake {
            replies: RefCell::new(replies.into()),
            sent: RefCell::default(),
            slept: RefCell::default(),
            clock: Cell::new(0.0),
        };
        OpenAiClient::new(config, fake).unwrap()
    }

    fn request(json: bool) -> LlmRequest {
        LlmRequest { json, ..LlmRequest::new(vec![ChatMessage::user("hi")]) }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let mut c = client(vec![]);
        c.config.headers.push(("X-Api-Key".into(), "other-secret".into()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret") && !shown.contains("other-secret"), "{shown}");
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn body_has_model_messages_and_json_mode() {
        let c = client(vec![]);
        let b = c.body(&request(true));
        assert_eq!(b["model"], "m");
        assert_eq!(b["messages"][0], json!({"role": "user", "content": "hi"}));
        assert_eq!(b["response_format"], json!({"type": "json_object"}));
        assert_eq!(b["temperature"], json!(0.0));
        assert!(c.body(&request(false)).get("response_format").is_none());
        let schema = JsonSchema { name: "x", schema: json!({"type": "object"}) };
        let b = c.body(&LlmRequest { json_schema: Some(schema), ..request(true) });
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(b["response_format"]["json_schema"]["name"], "x");
    }

    #[test]
    fn backoff_doubles_with_jitter_and_a_cap() {
        let c = client(vec![]);
        for retry in 0..8 {
            let cap = (100u64 << retry).min(20_000);
            let d = c.backoff_ms(retry);
            assert!(d >= cap / 2 && d <= cap, "retry {retry}: {d} not in [{}, {cap}]", cap / 2);
        }
    }

    #[test]
    fn server_errors_are_retried_then_reported() {
        let c =
            client(vec![ok(503, "busy"), Err(TransportError::Network("reset".into())), ok(200, &completion("yes"))]);
        let r = pollster::block_on(c.chat(&request(false))).unwrap();
        assert_eq!(r.text, "yes");
        assert_eq!(r.usage, Usage { input_tokens: 11, output_tokens: 3, estimated: false });
        assert_eq!(c.transport.sent.borrow().len(), 3);

        let c = client((0..5).map(|_| ok(500, r#"{"error":{"message":"boom"}}"#)).collect());
        let e = pollster::block_on(c.chat(&request(false))).unwrap_err();
        assert_eq!(e.code(), "LLM_UNAVAILABLE");
        assert!(e.to_string().contains("boom"), "{e}");
        assert_eq!(c.transport.sent.borrow().len(), 5, "one try and four retries");
    }

    #[test]
    fn retry_after_is_honoured_and_too_long_fails_at_once() {
        let mut limited =
            HttpResponse { status: 429, headers: vec![("retry-after".into(), "2".into())], body: "".into() };
        let c = client(vec![Ok(limited.clone()), ok(200, &completion("ok"))]);
        pollster::block_on(c.chat(&request(false))).unwrap();
        assert_eq!(c.transport.slept.borrow().iter().sum::<u64>(), 2000);

        limited.headers[0].1 = "3600".into();
        let c = client(vec![Ok(limited)]);
        let e = pollster::block_on(c.chat(&request(false))).unwrap_err();
        assert_eq!(e.code(), "LLM_RATE_LIMITED");
        assert!(matches!(e, Error::LlmRateLimited { retry_after_ms: Some(3_600_000), .. }), "the wait asked: {e:?}");
        assert!(c.transport.slept.borrow().is_empty());
    }

    #[test]
    fn client_errors_and_timeouts_are_not_retried() {
        let c = client(vec![ok(401, r#"{"error":{"message":"bad key"}}"#)]);
        let e = pollster::block_on(c.chat(&request(false))).unwrap_err();
        assert_eq!(e.code(), "LLM_REJECTED");
        assert!(!e.to_string().contains("sk-secret"));
        let c = client(vec![Err(TransportError::Timeout)]);
        assert_eq!(pollster::block_on(c.chat(&request(false))).unwrap_err().code(), "TIMEOUT");
    }

    #[test]
    fn a_rejected_response_format_is_dropped_and_remembered() {
        let c = client(vec![
            ok(400, r#"{"error":{"message":"response_format is not supported"}}"#),
            ok(200, &completion("{}")),
            ok(200, &completion("{}")),
        ]);
        pollster::block_on(c.chat(&request(true))).unwrap();
        pollster::block_on(c.chat(&request(true))).unwrap();
        let sent = c.transport.sent.borrow();
        assert!(sent[0].1.get("response_format").is_some());
        assert!(sent[1].1.get("response_format").is_none() && sent[2].1.get("response_format").is_none());
        assert!(!c.response_format_supported());
    }

    #[test]
    fn missing_usage_is_estimated_and_flagged() {
        let body = json!({"choices": [{"message": {"content": "abcdefgh"}}]}).to_string();
        let c = client(vec![ok(200, &body)]);
        let r = pollster::block_on(c.chat(&request(false))).unwrap();
        assert_eq!(r.usage, Usage { input_tokens: 1 + 4, output_tokens: 2, estimated: true });
    }

    #[test]
    fn an_aborted_request_sends_nothing() {
        let c = client(vec![]);
        let abort = AbortSignal::new();
        abort.abort();
        let e = pollster::block_on(c.chat(&LlmRequest { abort: Some(abort), ..request(false) })).unwrap_err();
        assert_eq!(e, Error::Aborted);
        assert!(c.transport.sent.borrow().is_empty());
    }

    #[test]
    fn retry_after_parses_seconds_and_dates() {
        assert_eq!(parse_retry_after("1", 0.0), Some(1000));
        assert_eq!(parse_retry_after("0.5", 0.0), Some(500));
        assert_eq!(parse_retry_after(" 2.25 ", 0.0), Some(2250));
        assert_eq!(parse_retry_after("0.0019", 0.0), Some(1), "beyond milliseconds is cut off");
        assert_eq!(parse_retry_after("120", 0.0), Some(120_000));
        for bad in ["-1", "1.", ".5", "1.2.3", "1e3", "", "+3", "inf", "NaN"] {
            assert_eq!(parse_retry_after(bad, 0.0), None, "{bad:?}");
        }
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), Some(0), "a past date means now");
        assert_eq!(parse_retry_after("soon", 0.0), None);
    }

    #[test]
    fn the_semaphore_caps_concurrency() {
        /// Pending once (waking itself), then ready: a task switch while holding the permit.
        struct YieldOnce(bool);
        impl Future for YieldOnce {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                if self.0 {
                    return Poll::Ready(());
                }
                self.0 = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
        let sem = Semaphore::new(2);
        let (peak, now, done) = (Cell::new(0usize), Cell::new(0usize), Cell::new(0usize));
        let tasks = (0..5).map(|_| async {
            let _p = sem.acquire().await;
            now.set(now.get() + 1);
            peak.set(peak.get().max(now.get()));
            YieldOnce(false).await;
            now.set(now.get() - 1);
            done.set(done.get() + 1);
        });
        pollster::block_on(futures::future::join_all(tasks));
        assert_eq!((peak.get(), done.get()), (2, 5));
    }
}
