//! Llm: the user's language model, behind one small trait. Chat messages in; text, token usage and latency out.
//!
//! The core (pruning, answering, distillation) only ever sees [`Llm`]. Implementations:
//! - [`openai::OpenAiClient`]: an OpenAI-compatible `POST {baseUrl}/chat/completions` client whose logic (request
//!   building, retries, fallbacks, usage) is target-independent and runs over a tiny [`openai::HttpTransport`]:
//!   [`native::UreqTransport`] natively (for `loci-eval`), [`fetch::FetchTransport`] in the page.
//! - [`callback::CallbackLlm`] (wasm only): any JS async function, so WebLLM, Chrome's built-in model or an SDK can
//!   serve.
//! - [`ScriptedLlm`]: canned replies, for tests of the code above the trait.
//!
//! [`structured`] turns replies into typed values (tolerating code fences and prose, one corrective retry);
//! [`prompts`] holds every prompt loci sends. Nothing here logs or persists an API key.

#[cfg(target_arch = "wasm32")]
pub mod callback;
#[cfg(target_arch = "wasm32")]
pub mod fetch;
pub mod fit;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
pub mod openai;
pub mod prompts;
pub mod structured;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Who says a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message, as in the chat-completions protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage { role: Role::System, content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage { role: Role::User, content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        ChatMessage { role: Role::Assistant, content: content.into() }
    }
}

/// Token counts of one call (or a sum of calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// True when any part was estimated with our tokenizer because the server did not report usage.
    pub estimated: bool,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.estimated |= other.estimated;
    }
}

/// LLM use of one phase (or one step): calls, tokens, latency, and how often replies had to be mended.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhaseCounters {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Sum of call latencies (retries and backoff included).
    pub latency_ms: f64,
    /// Operations of this phase that failed with an LLM error.
    pub errors: u64,
    /// Whether any count was estimated because the server reported no usage.
    pub estimated: bool,
    /// Replies cut at the output cap (`finish_reason: "length"`), each answered with a corrective retry.
    pub truncated: u64,
    /// Prompts sent again smaller because the endpoint said its context was exceeded.
    pub shrunk: u64,
    /// Prompts whose quoted texts were cut to fit the model's window.
    pub cut: u64,
    /// Replies cut at the output cap that were repaired (closed after their last complete item, repeated sentences
    /// dropped) rather than asked again.
    pub repaired: u64,
    /// Replies that could not be used as they were and were replaced (LLM pruning that kept nothing of a
    /// non-empty context falls back to extractive pruning).
    pub fallbacks: u64,
}

impl PhaseCounters {
    /// What one structured call spent.
    pub fn of<T>(s: &structured::Structured<T>) -> Self {
        PhaseCounters {
            calls: s.calls as u64,
            input_tokens: s.usage.input_tokens,
            output_tokens: s.usage.output_tokens,
            latency_ms: s.latency_ms,
            errors: 0,
            estimated: s.usage.estimated,
            truncated: s.truncated as u64,
            shrunk: s.shrunk as u64,
            cut: s.cut as u64,
            repaired: s.repaired as u64,
            fallbacks: 0,
        }
    }

    pub fn record<T>(&mut self, s: &structured::Structured<T>) {
        self.add(&Self::of(s));
    }

    pub fn add(&mut self, o: &PhaseCounters) {
        self.calls += o.calls;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.latency_ms += o.latency_ms;
        self.errors += o.errors;
        self.estimated |= o.estimated;
        self.truncated += o.truncated;
        self.shrunk += o.shrunk;
        self.cut += o.cut;
        self.repaired += o.repaired;
        self.fallbacks += o.fallbacks;
    }
}

/// What one call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmReply {
    pub text: String,
    pub usage: Usage,
    /// Wall time of the call, retries and backoff included, in milliseconds.
    pub latency_ms: f64,
    /// The model stopped at the output cap (`finish_reason: "length"`): the text is cut short.
    pub truncated: bool,
}

/// One call's request.
#[derive(Debug, Clone, Default)]
pub struct LlmRequest {
    pub messages: Vec<ChatMessage>,
    /// Ask for a JSON object (`response_format: {type: "json_object"}` where the server supports it).
    pub json: bool,
    /// A JSON schema the reply must follow, where the server supports it (`response_format: {type:
    /// "json_schema"}`); implies `json`. Servers that do not get the plain JSON mode or nothing.
    pub json_schema: Option<JsonSchema>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// OpenAI's `frequency_penalty`: set for steps that write free text, where a small model at temperature 0 can
    /// loop on one sentence until its output cap.
    pub frequency_penalty: Option<f32>,
    /// Cancels the call (and its retries) when aborted.
    pub abort: Option<AbortSignal>,
    /// Asks for the reply as it is written (a streamed completion, where the endpoint streams): called with the
    /// reply's text so far, after each piece. A retry starts again from its first piece.
    pub on_text: Option<TextSink>,
}

/// A reply's text without the model's reasoning, and whether there was any. Reasoning models served as chat
/// models (DeepSeek-R1 and its distills, QwQ, Qwen3 in WebLLM, LM Studio or an older llama.cpp) write their thoughts
/// into the content, inside `<think>…</think>` before the answer; some chat templates open the block themselves, so
/// that the reply holds only its end. The thoughts are not the answer: shown, they would be the chat's reply;
/// parsed, they often quote the JSON asked for. While the block is open (a reply still being written, or cut at its
/// cap) nothing is visible yet.
pub fn visible_text(raw: &str) -> (&str, bool) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    fn after_close(from: &str) -> &str {
        from.find(CLOSE).map_or("", |i| from[i + CLOSE.len()..].trim_start())
    }
    if let Some(inside) = raw.trim_start().strip_prefix(OPEN) {
        return (after_close(inside), true);
    }
    match raw.find(CLOSE) {
        // Opened by the template: the reply starts inside the block.
        Some(i) if !raw[..i].contains(OPEN) => (after_close(raw), true),
        _ => (raw, false),
    }
}

/// A listener for a reply's text so far ([`LlmRequest::on_text`]).
#[derive(Clone)]
pub struct TextSink(pub Rc<dyn Fn(&str)>);

impl TextSink {
    pub fn new(f: impl Fn(&str) + 'static) -> Self {
        TextSink(Rc::new(f))
    }

    pub fn send(&self, text: &str) {
        (self.0)(text)
    }

    /// This listener, fed raw replies so far: it hears them without the model's reasoning ([`visible_text`]), so
    /// nothing while the model thinks, and only when what it would hear changed.
    pub fn without_reasoning(&self) -> TextSink {
        let (inner, heard) = (self.clone(), RefCell::new(String::new()));
        TextSink::new(move |raw| {
            // A reply that so far is the start of `<think>` may be one.
            let opening = !raw.trim().is_empty() && "<think>".starts_with(raw.trim_start());
            let visible = if opening { "" } else { visible_text(raw).0 };
            let mut heard = heard.borrow_mut();
            if visible != heard.as_str() && !(visible.is_empty() && heard.is_empty()) {
                inner.send(visible);
                visible.clone_into(&mut heard);
            }
        })
    }
}

impl std::fmt::Debug for TextSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextSink")
    }
}

impl LlmRequest {
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        LlmRequest { messages, temperature: Some(0.0), ..Default::default() }
    }
}

/// A named JSON schema (OpenAI's `json_schema` response format).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSchema {
    pub name: &'static str,
    pub schema: serde_json::Value,
}

/// The user's language model.
#[async_trait(?Send)]
pub trait Llm {
    async fn chat(&self, request: &LlmRequest) -> Result<LlmReply>;

    /// The model's context window in tokens (prompt and reply); every prompt is sized against it (see [`fit`]).
    fn context_tokens(&self) -> usize {
        fit::DEFAULT_CONTEXT_TOKENS
    }
}

/// Cancels LLM calls. Cloned handles share one state; [`AbortSignal::abort`] wakes listeners (the fetch transport
/// aborts its `AbortController`, backoff sleeps stop at their next check).
#[derive(Clone, Default)]
pub struct AbortSignal(Rc<AbortInner>);

#[derive(Default)]
struct AbortInner {
    aborted: Cell<bool>,
    listeners: RefCell<Vec<Box<dyn FnOnce()>>>,
}

impl AbortSignal {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn abort(&self) {
        if !self.0.aborted.replace(true) {
            let listeners = std::mem::take(&mut *self.0.listeners.borrow_mut());
            listeners.into_iter().for_each(|f| f());
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.0.aborted.get()
    }

    /// Runs `f` on abort (at once when already aborted).
    pub fn on_abort(&self, f: impl FnOnce() + 'static) {
        if self.is_aborted() {
            f()
        } else {
            self.0.listeners.borrow_mut().push(Box::new(f));
        }
    }

    /// `Err(Aborted)` once aborted.
    pub fn check(&self) -> Result<()> {
        if self.is_aborted() {
            Err(Error::Aborted)
        } else {
            Ok(())
        }
    }
}

impl std::fmt::Debug for AbortSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortSignal").field("aborted", &self.is_aborted()).finish()
    }
}

/// Token estimate for text when a server reports no usage: WordPiece tokens of the embedding model when given
/// one, else ~4 characters per token (close enough for English on GPT-style BPE).
pub fn estimate_tokens(text: &str, tokenizer: Option<&crate::text::WordPiece>) -> u64 {
    match tokenizer {
        Some(t) => t.encode(text).len() as u64,
        None => text.chars().count().div_ceil(4) as u64,
    }
}

/// Canned replies in order, for tests of code above the trait. Records every request it got.
#[derive(Debug, Default)]
pub struct ScriptedLlm {
    replies: RefCell<VecDeque<Result<String>>>,
    pub requests: RefCell<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    pub fn new(replies: impl IntoIterator<Item = Result<String>>) -> Self {
        ScriptedLlm { replies: RefCell::new(replies.into_iter().collect()), requests: RefCell::default() }
    }

    /// Replies not used yet.
    pub fn remaining(&self) -> usize {
        self.replies.borrow().len()
    }
}

#[async_trait(?Send)]
impl Llm for ScriptedLlm {
    async fn chat(&self, request: &LlmRequest) -> Result<LlmReply> {
        self.requests.borrow_mut().push(request.clone());
        let text = self
            .replies
            .borrow_mut()
            .pop_front()
            .unwrap_or_else(|| Err(Error::LlmUnavailable("the script has no more replies".into())))?;
        let input: u64 = request.messages.iter().map(|m| estimate_tokens(&m.content, None)).sum();
        let usage = Usage { input_tokens: input, output_tokens: estimate_tokens(&text, None), estimated: true };
        Ok(LlmReply { text, usage, latency_ms: 1.0, truncated: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_runs_listeners_once_and_late_listeners_at_once() {
        let signal = AbortSignal::new();
        let hits = Rc::new(Cell::new(0));
        let h = hits.clone();
        signal.on_abort(move || h.set(h.get() + 1));
        assert!(signal.check().is_ok());
        signal.clone().abort();
        signal.abort();
        assert_eq!(hits.get(), 1);
        let h = hits.clone();
        signal.on_abort(move || h.set(h.get() + 10));
        assert_eq!(hits.get(), 11);
        assert_eq!(signal.check().unwrap_err().code(), "ABORTED");
    }

    #[test]
    fn a_models_reasoning_is_not_part_of_its_reply() {
        let cases = [
            ("<think>They want JSON like {\"a\": 1}.</think>\n\n{\"a\": 2}", "{\"a\": 2}", true),
            ("  \n<think>\nhmm\n</think>Paris.", "Paris.", true),
            // The template opened the block: only its end is in the reply.
            ("The user asks where. They said Paris.\n</think>\n\nParis.", "Paris.", true),
            // Still thinking (being written, or cut at the cap): nothing to show yet.
            ("<think>The user asks", "", true),
            ("<think>", "", true),
            ("Paris.", "Paris.", false),
            ("", "", false),
            // A block that does not open the reply is the reply's own text.
            ("Write <think> then </think> around it.", "Write <think> then </think> around it.", false),
        ];
        for (raw, visible, reasoned) in cases {
            assert_eq!(visible_text(raw), (visible, reasoned), "{raw:?}");
        }
    }

    #[test]
    fn estimates_about_four_characters_per_token_without_a_tokenizer() {
        assert_eq!(estimate_tokens("", None), 0);
        assert_eq!(estimate_tokens("abcdefgh", None), 2);
        assert_eq!(estimate_tokens("abcdefghi", None), 3);
    }
}
