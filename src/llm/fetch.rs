//! Browser HTTP transport for the OpenAI-compatible client: the global `fetch` (window or worker), an
//! `AbortController` per request for both the timeout and the caller's [`AbortSignal`], `setTimeout` for backoff.
//! Cross-origin endpoints must allow the `Authorization` and `Content-Type` headers (CORS) and expose `Retry-After`
//! for it to be honoured; without it the client falls back to its own backoff.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::openai::{HttpResponse, HttpTransport, TransportError};
use super::AbortSignal;

/// `fetch` behind [`HttpTransport`].
#[derive(Debug, Clone, Default)]
pub struct FetchTransport;

impl FetchTransport {
    pub fn new() -> Self {
        FetchTransport
    }
}

fn global_fn(name: &str) -> Result<Function, TransportError> {
    Reflect::get(&js_sys::global(), &name.into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .ok_or_else(|| TransportError::Network(format!("no global `{name}` in this context")))
}

/// A promise resolved after `ms` milliseconds, and the timer id.
fn timeout_promise(ms: u64) -> Promise {
    Promise::new(&mut |resolve, _| {
        if let Ok(set_timeout) = global_fn("setTimeout") {
            let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from_f64(ms as f64));
        }
    })
}

fn js_message(e: &JsValue) -> String {
    Reflect::get(e, &"message".into())
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "network error".into())
}

#[async_trait(?Send)]
impl HttpTransport for FetchTransport {
    /// One request; a 2xx body is handed to `on_chunk` as it arrives when given.
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &str,
        timeout_ms: u64,
        abort: Option<&AbortSignal>,
        on_chunk: Option<&(dyn for<'s> Fn(&'s str) + '_)>,
    ) -> Result<HttpResponse, TransportError> {
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Err(TransportError::Aborted);
        }
        let net = |e: JsValue| TransportError::Network(js_message(&e));
        let controller = web_sys::AbortController::new().map_err(net)?;
        let h = web_sys::Headers::new().map_err(net)?;
        for (k, v) in headers {
            h.append(k, v).map_err(net)?;
        }
        let init = web_sys::RequestInit::new();
        init.set_method("POST");
        init.set_headers(&h);
        init.set_body(&JsValue::from_str(body));
        init.set_signal(Some(&controller.signal()));

        let deadline = Deadline::start(timeout_ms, controller.clone())?;
        if let Some(a) = abort {
            let ctl = controller.clone();
            a.on_abort(move || ctl.abort());
        }
        let outcome = async {
            let promise: Promise = global_fn("fetch")?
                .call2(&js_sys::global(), &JsValue::from_str(url), &init)
                .map_err(net)?
                .dyn_into()
                .map_err(net)?;
            let resp: web_sys::Response = JsFuture::from(promise).await.map_err(net)?.dyn_into().map_err(net)?;
            let text = match on_chunk.filter(|_| (200..300).contains(&resp.status())) {
                Some(on_chunk) => read_in_pieces(&resp, &|| deadline.put_off(), on_chunk).await.map_err(net)?,
                None => JsFuture::from(resp.text().map_err(net)?).await.map_err(net)?.as_string().unwrap_or_default(),
            };
            let mut out_headers = Vec::new();
            if let Ok(Some(v)) = resp.headers().get("retry-after") {
                out_headers.push(("retry-after".to_string(), v));
            }
            Ok(HttpResponse { status: resp.status(), headers: out_headers, body: text })
        }
        .await;
        let timed_out = deadline.passed();
        drop(deadline);
        match outcome {
            Err(_) if abort.is_some_and(AbortSignal::is_aborted) => Err(TransportError::Aborted),
            Err(_) if timed_out => Err(TransportError::Timeout),
            other => other,
        }
    }

    async fn sleep(&self, ms: u64) {
        let _ = JsFuture::from(timeout_promise(ms)).await;
    }

    fn now_ms(&self) -> f64 {
        Reflect::get(&js_sys::global(), &"performance".into())
            .ok()
            .and_then(|p| p.dyn_into::<web_sys::Performance>().ok())
            .map(|p| p.now())
            .unwrap_or_else(js_sys::Date::now)
    }
}

/// A request's time limit: a `setTimeout` that aborts the request. A stream puts it off at each piece it reads, so
/// that `timeout_ms` bounds the wait for the reply to start or to go on, not a long answer that keeps coming.
struct Deadline {
    ms: u64,
    timer: RefCell<JsValue>,
    passed: Rc<Cell<bool>>,
    /// Called by the timer; kept alive until the timer is cleared (on drop).
    fire: Closure<dyn Fn()>,
}

impl Deadline {
    fn start(ms: u64, controller: web_sys::AbortController) -> Result<Self, TransportError> {
        let passed = Rc::new(Cell::new(false));
        let flag = passed.clone();
        let fire = Closure::<dyn Fn()>::new(move || {
            flag.set(true);
            controller.abort();
        });
        let deadline = Deadline { ms, timer: RefCell::new(JsValue::UNDEFINED), passed, fire };
        deadline.arm()?;
        Ok(deadline)
    }

    fn arm(&self) -> Result<(), TransportError> {
        let timer = global_fn("setTimeout")?
            .call2(&JsValue::NULL, self.fire.as_ref(), &JsValue::from_f64(self.ms as f64))
            .map_err(|e| TransportError::Network(js_message(&e)))?;
        *self.timer.borrow_mut() = timer;
        Ok(())
    }

    fn clear(&self) {
        if let Ok(clear) = global_fn("clearTimeout") {
            let _ = clear.call1(&JsValue::NULL, &self.timer.borrow());
        }
    }

    /// The server was heard from: the limit starts again (unless it has passed already).
    fn put_off(&self) {
        if !self.passed.get() {
            self.clear();
            let _ = self.arm();
        }
    }

    fn passed(&self) -> bool {
        self.passed.get()
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.clear(); // before `fire` goes: a timer must never call a dropped closure
    }
}

/// A 2xx body read as it arrives, each piece of text handed to `on_chunk` (a UTF-8 sequence cut between two reads
/// is held by the decoder until its end comes) and every read told to `on_read`; the whole text at its end.
async fn read_in_pieces(
    resp: &web_sys::Response,
    on_read: &dyn Fn(),
    on_chunk: &dyn Fn(&str),
) -> Result<String, JsValue> {
    let Some(body) = resp.body() else {
        let text = JsFuture::from(resp.text()?).await?.as_string().unwrap_or_default();
        on_chunk(&text);
        return Ok(text);
    };
    let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().dyn_into()?;
    let decoder = web_sys::TextDecoder::new()?;
    let streaming = web_sys::TextDecodeOptions::new();
    streaming.set_stream(true);
    let mut text = String::new();
    loop {
        let read: web_sys::ReadableStreamReadResult = JsFuture::from(reader.read()).await?.unchecked_into();
        on_read();
        let piece = if read.get_done().unwrap_or(true) {
            decoder.decode()?
        } else {
            let bytes: js_sys::Uint8Array = read.get_value().dyn_into()?;
            decoder.decode_with_js_u8_array_and_options(&bytes, &streaming)?
        };
        if !piece.is_empty() {
            on_chunk(&piece);
            text.push_str(&piece);
        }
        if read.get_done().unwrap_or(true) {
            return Ok(text);
        }
    }
}
