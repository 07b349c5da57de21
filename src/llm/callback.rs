//! An [`Llm`] over a JS async function, so WebLLM, Chrome's built-in model or any SDK can serve:
//! `async ({ messages, json, maxTokens, temperature, schema, signal, onText? }) => ({ text, usage? })` where `usage` is
//! `{ inputTokens, outputTokens }` (OpenAI's `prompt_tokens` / `completion_tokens` are accepted too); a plain
//! string return is taken as the text. Missing usage is estimated. A thrown error becomes `LLM_UNAVAILABLE`
//! (or `ABORTED` when the caller's signal fired); one with `code: "LLM_CONTEXT_EXCEEDED"` (the prompt does not fit
//! the model, as `loci/llm`'s helpers report it) is loci's context error, so the prompt is sent again smaller, as
//! for an endpoint that says so. The model's window is the function's `contextTokens` property
//! when it has one (`fn.contextTokens = 2048`), else [`DEFAULT_CONTEXT_TOKENS`]. `onText` is there when loci
//! listens to the reply as it is written (a streamed answer): a function that streams may call it with the text so
//! far; one that does not can ignore it.

use std::rc::Rc;

use async_trait::async_trait;
use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::fit::DEFAULT_CONTEXT_TOKENS;
use super::{estimate_tokens, visible_text, Llm, LlmReply, LlmRequest, Role, TextSink, Usage};
use crate::error::{Error, Result};
use crate::text::WordPiece;

/// A JS function serving as the LLM.
pub struct CallbackLlm {
    f: Function,
    tokenizer: Option<Rc<WordPiece>>,
    context_tokens: usize,
}

impl std::fmt::Debug for CallbackLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackLlm").finish_non_exhaustive()
    }
}

impl CallbackLlm {
    pub fn new(f: Function) -> Self {
        let context_tokens = Reflect::get(&f, &"contextTokens".into())
            .ok()
            .and_then(|v| v.as_f64())
            .filter(|n| n.is_finite() && *n >= 512.0)
            .map_or(DEFAULT_CONTEXT_TOKENS, |n| n as usize);
        CallbackLlm { f, tokenizer: None, context_tokens }
    }

    /// Estimate missing usage with this tokenizer instead of characters / 4.
    pub fn with_tokenizer(mut self, tokenizer: Rc<WordPiece>) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }
}

fn set(obj: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(obj, &key.into(), value);
}

fn js_message(e: &JsValue) -> String {
    Reflect::get(e, &"message".into())
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "the llm callback failed".into())
}

/// A thrown error's `code`, when it is a string.
fn js_code(e: &JsValue) -> Option<String> {
    if !e.is_object() {
        return None;
    }
    Reflect::get(e, &"code".into()).ok().and_then(|c| c.as_string())
}

fn number(obj: &JsValue, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| Reflect::get(obj, &(*k).into()).ok()?.as_f64()).filter(|n| *n >= 0.0).map(|n| n as u64)
}

#[async_trait(?Send)]
impl Llm for CallbackLlm {
    fn context_tokens(&self) -> usize {
        self.context_tokens
    }

    async fn chat(&self, request: &LlmRequest) -> Result<LlmReply> {
        if let Some(a) = &request.abort {
            a.check()?;
        }
        let start = js_sys::Date::now();
        let arg = Object::new();
        let messages = Array::new();
        for m in &request.messages {
            let o = Object::new();
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            set(&o, "role", &role.into());
            set(&o, "content", &m.content.as_str().into());
            messages.push(&o);
        }
        set(&arg, "messages", &messages);
        set(&arg, "json", &JsValue::from_bool(request.json || request.json_schema.is_some()));
        if let Some(t) = request.max_tokens {
            set(&arg, "maxTokens", &JsValue::from_f64(t as f64));
        }
        if let Some(p) = request.frequency_penalty {
            set(&arg, "frequencyPenalty", &JsValue::from_f64(p as f64));
        }
        if let Some(t) = request.temperature {
            set(&arg, "temperature", &JsValue::from_f64(t as f64));
        }
        if let Some(s) = &request.json_schema {
            if let Ok(v) = js_sys::JSON::parse(&s.schema.to_string()) {
                set(&arg, "schema", &v);
            }
        }
        if let Some(a) = &request.abort {
            if let Ok(controller) = web_sys::AbortController::new() {
                set(&arg, "signal", &controller.signal());
                a.on_abort(move || controller.abort());
            }
        }
        // `onText(textSoFar)`: a callback that streams (WebLLM, an SDK) may call it as the reply grows. It stays
        // callable until the call returns.
        // A reasoning model's thoughts are not heard: only the text after them.
        let on_text = request.on_text.as_ref().map(TextSink::without_reasoning).map(|sink| {
            Closure::<dyn Fn(JsValue)>::new(move |text: JsValue| {
                if let Some(text) = text.as_string() {
                    sink.send(&text);
                }
            })
        });
        if let Some(f) = &on_text {
            set(&arg, "onText", f.as_ref());
        }
        let failed = |e: JsValue| match &request.abort {
            Some(a) if a.is_aborted() => Error::Aborted,
            // Answered by the caller with the prompt cut smaller (llm::fit), never retried as it is.
            _ if js_code(&e).as_deref() == Some("LLM_CONTEXT_EXCEEDED") => {
                Error::LlmContextExceeded(format!("the llm callback: {}", js_message(&e)))
            }
            _ => Error::LlmUnavailable(format!("the llm callback failed: {}", js_message(&e))),
        };
        let mut ret = self.f.call1(&JsValue::NULL, &arg).map_err(failed)?;
        if let Some(p) = ret.dyn_ref::<Promise>() {
            ret = JsFuture::from(p.clone()).await.map_err(failed)?;
        }
        drop(on_text); // a late call from the callback now throws in its own code, not here
        if let Some(a) = &request.abort {
            a.check()?;
        }
        let text = match ret.as_string() {
            Some(s) => s,
            None => Reflect::get(&ret, &"text".into())
                .ok()
                .and_then(|t| t.as_string())
                .ok_or_else(|| Error::LlmBadReply("the llm callback must return { text: string, usage? }".into()))?,
        };
        let text = visible_text(&text).0.to_string();
        let usage_js = Reflect::get(&ret, &"usage".into()).unwrap_or(JsValue::UNDEFINED);
        let reported = (!usage_js.is_undefined() && !usage_js.is_null())
            .then(|| {
                Some(Usage {
                    input_tokens: number(&usage_js, &["inputTokens", "prompt_tokens", "promptTokens"])?,
                    output_tokens: number(&usage_js, &["outputTokens", "completion_tokens", "completionTokens"])?,
                    estimated: false,
                })
            })
            .flatten();
        let usage = reported.unwrap_or_else(|| {
            let tok = self.tokenizer.as_deref();
            Usage {
                input_tokens: request.messages.iter().map(|m| estimate_tokens(&m.content, tok) + 4).sum(),
                output_tokens: estimate_tokens(&text, tok),
                estimated: true,
            }
        });
        // `finishReason: "length"` (the OpenAI field's value) tells that the model stopped at its output cap.
        let truncated =
            Reflect::get(&ret, &"finishReason".into()).ok().and_then(|v| v.as_string()).as_deref() == Some("length");
        Ok(LlmReply { text, usage, latency_ms: js_sys::Date::now() - start, truncated })
    }
}
