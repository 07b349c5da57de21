//! Web bindings: the JavaScript API (`Memory.open`, `addMessages`, `recall`, `stats`, `close`, and distillation:
//! `flush`, `episodes`, `facts`, `history`, `retryParked`, `forget`). A thin layer: it parses JS values into typed
//! Rust (a wrong type is a typed error, never a panic), fetches assets, and hands everything to
//! [`crate::memory::Memory`]. Errors reach JS as `Error`s with a stable `code`.
//!
//! Which recall `recall()` and `answer()` run: the distilled one (sessions + episodes + facts, no pruning) when
//! `sources` is given, or when the memory was opened with `distill` and no `prune` is asked; otherwise the sessions
//! recall (pruned when asked; `answer` prunes with the LLM by default). `sources` and `prune` together are refused.

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use std::cell::RefCell;

use crate::assets;
use crate::distill::DistillConfig;
use crate::embed::{self, Device, EmbedConfig, Embedder, OnnxRuntime, OrtDist, WebBuild};
use crate::error::Error;
use crate::llm::callback::CallbackLlm;
use crate::llm::fetch::FetchTransport;
use crate::llm::openai::{OpenAiClient, OpenAiConfig};
use crate::llm::{AbortSignal, Llm};
use crate::memory::{self, JobOutcome, JobStep, MemoryConfig, RecallOptions};
use crate::memory::{AnswerOptions, DistillProgress, DistilledRecallOptions, FlushReport, PruneOptions};
use crate::recall::prune::PruneMode;
use crate::recall::RecallMethod;
use crate::store::idb::IdbStore;
use crate::text::WordPiece;
use crate::types::{parse_time, InputLimits, MessageInput, TimeInput, UnitMode};

type Core = memory::Memory<IdbStore, OnnxRuntime>;
type Shared = memory::Shared<IdbStore, OnnxRuntime>;

// The TypeScript types of the whole public API (options, results, errors), appended to the generated `loci.d.ts`.
#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = include_str!("web_types.ts");

/// Converts a loci error into a JS `Error` with `name = "LociError"` and a stable `code`.
pub fn js_error(e: Error) -> JsValue {
    let err = js_sys::Error::new(&e.to_string());
    err.set_name("LociError");
    let _ = Reflect::set(&err, &"code".into(), &e.code().into());
    err.into()
}

fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| js_error(Error::invalid(format!("encoding a result: {e}"))))
}

fn from_js<T: serde::de::DeserializeOwned>(v: JsValue, what: &str) -> Result<T, Error> {
    serde_wasm_bindgen::from_value(v).map_err(|e| Error::invalid(format!("{what}: {e}")))
}

/// Refuses option names loci does not know, so a typo (`modelURL`) is an error rather than a silently ignored
/// setting. (serde-wasm-bindgen reads only the fields it expects, so `deny_unknown_fields` cannot catch these.)
fn check_keys(v: &JsValue, allowed: &[&str], what: &str) -> Result<(), Error> {
    if v.is_undefined() || v.is_null() {
        return Ok(());
    }
    if !v.is_object() || js_sys::Array::is_array(v) {
        return Err(Error::invalid(format!("{what} must be an object")));
    }
    let object: &js_sys::Object = v.unchecked_ref();
    for key in js_sys::Object::keys(object).iter() {
        let key = key.as_string().unwrap_or_default();
        if !allowed.contains(&key.as_str()) {
            return Err(Error::invalid(format!("{what}: unknown option {key:?} (known: {})", allowed.join(", "))));
        }
    }
    Ok(())
}

/// Options of `Memory.open`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OpenOptions {
    name: String,
    #[serde(default)]
    embedder: EmbedderOptions,
    #[serde(default)]
    unit_mode: Option<UnitMode>,
    #[serde(default)]
    max_message_chars: Option<usize>,
    #[serde(default)]
    session_gap_minutes: Option<f64>,
}

/// `distill` of `Memory.open` (`true` takes every default).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DistillOptions {
    window: Option<usize>,
    merge_candidates: Option<usize>,
    predict_facts: Option<usize>,
    consolidate_candidates: Option<usize>,
    max_attempts: Option<u32>,
    backoff_ms: Option<f64>,
    max_backoff_ms: Option<f64>,
    max_tokens: Option<u32>,
    auto_run: Option<bool>,
}

const DISTILL_KEYS: [&str; 9] = [
    "window",
    "mergeCandidates",
    "predictFacts",
    "consolidateCandidates",
    "maxAttempts",
    "backoffMs",
    "maxBackoffMs",
    "maxTokens",
    "autoRun",
];

/// Distillation as opened: the pipeline's configuration, and whether jobs run in the background.
#[derive(Clone, Copy)]
struct DistillSetup {
    config: DistillConfig,
    /// Run queued jobs in the background as soon as they are due (default); else only `flush()` runs them.
    auto_run: bool,
}

/// `undefined`, `null` or `false`: off; `true`: the defaults; an object: the defaults with these changes.
fn parse_distill(v: &JsValue) -> Result<Option<DistillSetup>, Error> {
    if v.is_undefined() || v.is_null() || v.as_bool() == Some(false) {
        return Ok(None);
    }
    if v.as_bool() == Some(true) {
        return Ok(Some(DistillSetup { config: DistillConfig::default(), auto_run: true }));
    }
    check_keys(v, &DISTILL_KEYS, "distill options")?;
    let o: DistillOptions = from_js(v.clone(), "distill options")?;
    let mut c = DistillConfig::default();
    if let Some(w) = o.window {
        if !(2..=200).contains(&w) {
            return Err(Error::invalid("`distill.window` must be between 2 and 200 turns"));
        }
        c.window = w;
    }
    if let Some(n) = o.merge_candidates {
        c.merge_candidates = n;
    }
    if let Some(n) = o.predict_facts {
        c.predict_facts = n;
    }
    if let Some(n) = o.consolidate_candidates {
        c.consolidate_candidates = n;
    }
    if let Some(n) = o.max_attempts {
        if n == 0 {
            return Err(Error::invalid("`distill.maxAttempts` must be at least 1"));
        }
        c.max_attempts = n;
    }
    for (value, field, name) in
        [(o.backoff_ms, &mut c.backoff_ms, "backoffMs"), (o.max_backoff_ms, &mut c.max_backoff_ms, "maxBackoffMs")]
    {
        if let Some(ms) = value {
            if !(ms.is_finite() && ms >= 0.0) {
                return Err(Error::invalid(format!("`distill.{name}` must be a non-negative number")));
            }
            *field = ms;
        }
    }
    if o.max_tokens.is_some() {
        c.max_tokens = o.max_tokens;
    }
    Ok(Some(DistillSetup { config: c, auto_run: o.auto_run.unwrap_or(true) }))
}

/// `sources` of `recall` and `answer`: which distilled memory to combine, and how many of each.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SourcesOptions {
    sessions: Option<bool>,
    episodes: Option<usize>,
    facts: Option<usize>,
    raw_episodes: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EmbedderOptions {
    model_url: Option<String>,
    tokenizer_url: Option<String>,
    /// Base URL of onnxruntime-web's `dist/` files.
    ort_url: Option<String>,
    /// `"mjs"` (default) or `"js"`, for servers that send `.mjs` with a wrong MIME type.
    ort_wrapper_ext: Option<String>,
    device: Option<DeviceChoice>,
    max_tokens: Option<usize>,
    batch_size: Option<usize>,
    /// Expected SHA-256 of the model (default: the int8 all-MiniLM-L6-v2); `null` skips the check.
    #[serde(default, deserialize_with = "nullable")]
    model_sha256: Option<Option<String>>,
    /// Keep the model and tokenizer in Cache Storage (default true).
    cache: Option<bool>,
}

/// Distinguishes an absent option (`None`) from an explicit `null` (`Some(None)`).
fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "lowercase")]
enum DeviceChoice {
    #[default]
    Auto,
    Wasm,
    Webgpu,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddOptions {
    session: Option<String>,
}

/// Options of `recall` and `answer` (`signal` is read separately: it is an object, not data).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsRecallOptions {
    k: Option<usize>,
    units_per_session: Option<usize>,
    order: Option<String>,
    method: Option<RecallMethod>,
    prune: Option<String>,
    /// Extractive pruning: share of the unpruned context's tokens to keep.
    budget: Option<f32>,
    question_time: Option<TimeInput>,
    max_tokens: Option<u32>,
    sources: Option<serde_json::Value>,
}

const RECALL_KEYS: [&str; 10] =
    ["k", "unitsPerSession", "order", "method", "prune", "budget", "questionTime", "maxTokens", "signal", "sources"];

impl JsRecallOptions {
    fn parse(options: &JsValue, what: &str) -> Result<Self, Error> {
        check_keys(options, &RECALL_KEYS, what)?;
        if options.is_undefined() || options.is_null() {
            return Ok(Self::default());
        }
        let sources = Reflect::get(options, &"sources".into()).unwrap_or(JsValue::UNDEFINED);
        check_keys(&sources, &["sessions", "episodes", "facts", "rawEpisodes"], "sources")?;
        let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
        let _ = Reflect::delete_property(&data, &"signal".into());
        from_js(data.into(), what)
    }

    /// The distilled recall's options when it is the one to run (see the module docs), else `None`.
    fn distilled(&self, distill_on: bool) -> Result<Option<DistilledRecallOptions>, Error> {
        let sources = match &self.sources {
            Some(serde_json::Value::Null) | None => {
                if !distill_on || self.prune.is_some() {
                    return Ok(None);
                }
                SourcesOptions::default()
            }
            Some(v) => {
                if self.prune.is_some() {
                    return Err(Error::invalid(
                        "`prune` applies to the sessions recall; distilled `sources` are not pruned (pass one or the other)",
                    ));
                }
                serde_json::from_value(v.clone()).map_err(|e| Error::invalid(format!("sources: {e}")))?
            }
        };
        let mut d = DistilledRecallOptions { recall: self.recall_options()?, ..Default::default() };
        if let Some(s) = sources.sessions {
            d.sessions = s;
        }
        if let Some(n) = sources.episodes {
            d.episodes = n;
        }
        if let Some(n) = sources.facts {
            d.facts = n;
        }
        if let Some(n) = sources.raw_episodes {
            d.raw_episodes = n;
        }
        Ok(Some(d))
    }

    fn recall_options(&self) -> Result<RecallOptions, Error> {
        let mut ro = RecallOptions::default();
        if let Some(k) = self.k {
            ro.k = k;
        }
        if let Some(u) = self.units_per_session {
            ro.units_per_session = u.max(1);
        }
        if let Some(m) = self.method {
            ro.method = m;
        }
        ro.chronological = match self.order.as_deref() {
            None | Some("chronological") => true,
            Some("rank") => false,
            Some(o) => return Err(Error::invalid(format!("`order` must be \"chronological\" or \"rank\", not {o:?}"))),
        };
        Ok(ro)
    }

    fn prune_options(&self, default_mode: PruneMode, signal: Option<AbortSignal>) -> Result<PruneOptions, Error> {
        let mut po = PruneOptions { mode: default_mode, abort: signal, max_tokens: None, ..Default::default() };
        if let Some(p) = &self.prune {
            po.mode = PruneMode::parse(p)?;
        }
        if let Some(b) = self.budget {
            if !(b > 0.0 && b <= 1.0) {
                return Err(Error::invalid("`budget` must be in (0, 1]"));
            }
            po.extractive.budget_ratio = b;
        }
        if let Some(t) = &self.question_time {
            po.question_time = Some(parse_time(t)?);
        }
        Ok(po)
    }
}

/// Links a JS `AbortSignal` (if given) to ours.
fn abort_signal(options: &JsValue) -> Result<Option<AbortSignal>, Error> {
    let js = Reflect::get(options, &"signal".into()).unwrap_or(JsValue::UNDEFINED);
    if js.is_undefined() || js.is_null() || options.is_undefined() {
        return Ok(None);
    }
    let js: web_sys::AbortSignal = js.dyn_into().map_err(|_| Error::invalid("`signal` must be an AbortSignal"))?;
    let ours = AbortSignal::new();
    if js.aborted() {
        ours.abort();
    } else {
        let linked = ours.clone();
        let on_abort = Closure::once_into_js(move || linked.abort());
        js.add_event_listener_with_callback("abort", on_abort.unchecked_ref())
            .map_err(|_| Error::invalid("`signal` could not be observed"))?;
    }
    Ok(Some(ours))
}

/// The user's LLM: `{ baseUrl, apiKey?, model, headers?, timeoutMs?, maxConcurrency?, maxRetries? }` for an
/// OpenAI-compatible endpoint, or an async function `({ messages, json, maxTokens, temperature }) => ({ text, usage? })`.
/// The API key lives in this object only: never stored, never logged.
fn parse_llm(v: &JsValue, tokenizer: &Rc<WordPiece>) -> Result<Option<Rc<dyn Llm>>, Error> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    if let Some(f) = v.dyn_ref::<Function>() {
        return Ok(Some(Rc::new(CallbackLlm::new(f.clone()).with_tokenizer(tokenizer.clone()))));
    }
    check_keys(
        v,
        &["baseUrl", "apiKey", "model", "headers", "timeoutMs", "maxConcurrency", "maxRetries", "contextTokens"],
        "llm options",
    )?;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct LlmOptions {
        base_url: String,
        api_key: Option<String>,
        model: String,
        headers: Option<std::collections::BTreeMap<String, String>>,
        timeout_ms: Option<u64>,
        max_concurrency: Option<usize>,
        max_retries: Option<u32>,
        context_tokens: Option<usize>,
    }
    let o: LlmOptions = from_js(v.clone(), "llm options")?;
    let mut config = OpenAiConfig::new(o.base_url, o.model);
    config.api_key = o.api_key.filter(|k| !k.is_empty());
    config.headers = o.headers.unwrap_or_default().into_iter().collect();
    if let Some(t) = o.timeout_ms {
        config.timeout_ms = t;
    }
    if let Some(c) = o.max_concurrency {
        config.max_concurrency = c;
    }
    if let Some(r) = o.max_retries {
        config.max_retries = r;
    }
    if let Some(c) = o.context_tokens {
        config.context_tokens = c;
    }
    let client = OpenAiClient::new(config, FetchTransport::new())?.with_tokenizer(tokenizer.clone());
    Ok(Some(Rc::new(client)))
}

/// Resolves `url` against the page's (or worker's) location: `globalThis.location`, not `window`, so loci also runs
/// in a Web Worker.
fn absolute_url(url: &str) -> Result<String, Error> {
    let base = Reflect::get(&js_sys::global(), &"location".into())
        .ok()
        .and_then(|l| Reflect::get(&l, &"href".into()).ok())
        .and_then(|h| h.as_string())
        .ok_or_else(|| Error::Asset("no location to resolve asset URLs against".into()))?;
    web_sys::Url::new_with_base(url, &base)
        .map(|u| u.href())
        .map_err(|_| Error::invalid(format!("{url:?} is not a valid URL")))
}

fn progress(callback: &Option<Function>, phase: &str, detail: Option<&str>) {
    progress_with(callback, phase, detail, &[]);
}

/// Calls `onProgress({ phase, detail?, ...numbers })`.
fn progress_with(callback: &Option<Function>, phase: &str, detail: Option<&str>, numbers: &[(&str, f64)]) {
    if let Some(f) = callback {
        let event = js_sys::Object::new();
        let _ = Reflect::set(&event, &"phase".into(), &phase.into());
        if let Some(d) = detail {
            let _ = Reflect::set(&event, &"detail".into(), &d.into());
        }
        for (k, v) in numbers {
            let _ = Reflect::set(&event, &(*k).into(), &JsValue::from_f64(*v));
        }
        // A throwing progress callback is the app's bug, not a reason to fail the open.
        let _ = f.call1(&JsValue::NULL, &event);
    }
}

fn report_asset(on_progress: &Option<Function>, phase: &str, url: &str, loaded: f64, total: Option<f64>, cached: bool) {
    let mut numbers = vec![("loaded", loaded)];
    if let Some(t) = total {
        numbers.push(("total", t));
    }
    if cached {
        numbers.push(("cached", 1.0));
    }
    progress_with(on_progress, phase, Some(url), &numbers);
}

/// Whether a WebGPU adapter exists that is not a software fallback.
async fn hardware_webgpu_adapter() -> bool {
    let Ok(navigator) = Reflect::get(&js_sys::global(), &"navigator".into()) else { return false };
    let Ok(gpu) = Reflect::get(&navigator, &"gpu".into()) else { return false };
    if gpu.is_undefined() || gpu.is_null() {
        return false;
    }
    let Ok(request) = Reflect::get(&gpu, &"requestAdapter".into()).and_then(|f| f.dyn_into::<Function>()) else {
        return false;
    };
    let Ok(promise) = request.call0(&gpu).and_then(|p| p.dyn_into::<Promise>()) else { return false };
    let Ok(adapter) = JsFuture::from(promise).await else { return false };
    if adapter.is_null() || adapter.is_undefined() {
        return false;
    }
    // Software adapters (SwiftShader) are correct but far slower than WASM: never pick them automatically.
    let fallback = Reflect::get(&adapter, &"isFallbackAdapter".into()).ok().and_then(|v| v.as_bool()).unwrap_or(false);
    let info_fallback = Reflect::get(&adapter, &"info".into())
        .ok()
        .and_then(|i| Reflect::get(&i, &"isFallbackAdapter".into()).ok())
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    !(fallback || info_fallback)
}

/// Chooses and creates the runtime. `auto` takes WebGPU only with a hardware adapter and when a parity self-test
/// against the WASM provider passes (int8 models are wrong or slow on some WebGPU stacks); else WASM.
async fn create_runtime(
    dist: &OrtDist,
    model: &[u8],
    choice: DeviceChoice,
    probe: &embed::Batch,
) -> Result<(OnnxRuntime, String), Error> {
    match choice {
        DeviceChoice::Wasm => {
            let (_, env) = embed::web_environment(dist, WebBuild::Wasm).await?;
            Ok((OnnxRuntime::web(&env, model, Device::Wasm).await?, "requested".into()))
        }
        DeviceChoice::Webgpu => {
            let (_, env) = embed::web_environment(dist, WebBuild::Webgpu).await?;
            Ok((OnnxRuntime::web(&env, model, Device::Webgpu).await?, "requested".into()))
        }
        DeviceChoice::Auto => {
            if !hardware_webgpu_adapter().await {
                let (_, env) = embed::web_environment(dist, WebBuild::Wasm).await?;
                return Ok((OnnxRuntime::web(&env, model, Device::Wasm).await?, "no hardware WebGPU adapter".into()));
            }
            let (build, env) = embed::web_environment(dist, WebBuild::Webgpu).await?;
            let mut wasm = OnnxRuntime::web(&env, model, Device::Wasm).await?;
            if build != WebBuild::Webgpu {
                return Ok((wasm, "onnxruntime-web was loaded without WebGPU".into()));
            }
            let mut gpu = match OnnxRuntime::web(&env, model, Device::Webgpu).await {
                Ok(g) => g,
                Err(e) => return Ok((wasm, format!("WebGPU session failed: {e}"))),
            };
            use embed::Runtime;
            let a = wasm.last_hidden_state(probe).await?;
            let b = match gpu.last_hidden_state(probe).await {
                Ok(b) => b,
                Err(e) => return Ok((wasm, format!("WebGPU inference failed: {e}"))),
            };
            let va = embed::mean_pool_normalize(&a, &probe.attention_mask, probe.rows, probe.seq, embed::DIM)?;
            let vb = embed::mean_pool_normalize(&b, &probe.attention_mask, probe.rows, probe.seq, embed::DIM)?;
            let worst = va
                .iter()
                .zip(&vb)
                .map(|(x, y)| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>())
                .fold(1.0f32, f32::min);
            if worst >= 0.999 {
                Ok((gpu, format!("WebGPU parity self-test passed (cosine {worst:.5})")))
            } else {
                Ok((wasm, format!("WebGPU parity self-test failed (cosine {worst:.5})")))
            }
        }
    }
}

#[wasm_bindgen(inline_js = r#"
export function acquireTabLock(name) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (!locks) return Promise.resolve(() => {});
  return new Promise((resolve, reject) => {
    locks.request(name, { ifAvailable: true }, (lock) => {
      if (!lock) { resolve(null); return undefined; }
      return new Promise((release) => resolve(release));
    }).catch(reject);
  });
}
"#)]
extern "C" {
    /// Takes the Web Lock `name` if no other tab or memory holds it: resolves to a release function, or `null`.
    #[wasm_bindgen(js_name = acquireTabLock)]
    fn acquire_tab_lock(name: &str) -> Promise;
}

/// One open memory per name per browser profile: a second tab would work on a stale index and allocate the same
/// ids, so it is refused with `BLOCKED_BY_OTHER_TAB` until the first closes (or its tab goes away).
async fn lock_memory(name: &str) -> Result<Function, Error> {
    let release = JsFuture::from(acquire_tab_lock(&IdbStore::database_name(name)))
        .await
        .map_err(|e| Error::Storage(format!("Web Locks: {e:?}")))?;
    release.dyn_into::<Function>().map_err(|_| {
        Error::BlockedByOtherTab(format!(
            "memory {name:?} is open in another tab or window; close it there (or call close()) first"
        ))
    })
}

/// A long-term memory stored in this browser.
#[wasm_bindgen]
pub struct Memory {
    shared: Shared,
    name: String,
    device_reason: String,
    release_lock: Function,
    llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
    tokenizer: Rc<WordPiece>,
    /// The open's `onProgress`, also told about distillation jobs (`phase: "distill"`).
    on_progress: Option<Function>,
    /// Whether the memory was opened with `distill` (routes recall and answer, see the module docs).
    distill: bool,
    jobs: JobRunner,
}

/// Runs queued distillation jobs in the background, one at a time and in queue order, each as read → think →
/// commit ([`memory::Shared::run_next_job`]): the memory's lock is never held while the LLM thinks, so
/// `addMessages`, `recall` and `stats` go on meanwhile. Retry backoffs are waited out on a timer. Started after
/// `addMessages`, at open (work queued before a reload resumes), and when an LLM is set or parked jobs are retried;
/// it stops when nothing is due, the memory closes, or the LLM is removed. Only one runs per memory.
#[derive(Clone)]
struct JobRunner {
    shared: Shared,
    llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
    on_progress: Option<Function>,
    /// Opened with `distill` and `autoRun` (the default).
    enabled: bool,
    running: Rc<std::cell::Cell<bool>>,
}

impl JobRunner {
    fn start(&self) {
        if !self.enabled || self.running.get() || self.llm.borrow().is_none() {
            return;
        }
        self.running.set(true);
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let quiet = |e: &Error| matches!(e, Error::Aborted | Error::Closed);
            if let Err(e) = me.drain().await.or_else(|e| if quiet(&e) { Ok(()) } else { Err(e) }) {
                // Nothing awaits a background run: tell the page through onProgress; the job stays queued.
                if let Some(f) = &me.on_progress {
                    let event = js_sys::Object::new();
                    let _ = Reflect::set(&event, &"phase".into(), &"distill".into());
                    let _ = Reflect::set(&event, &"error".into(), &js_error(e));
                    let _ = f.call1(&JsValue::NULL, &event);
                }
            }
            me.running.set(false);
        });
    }

    async fn drain(&self) -> Result<(), Error> {
        loop {
            let Some(llm) = self.llm.borrow().clone() else { return Ok(()) };
            let mut tell = |p: &DistillProgress| distill_progress(&self.on_progress, p);
            match self.shared.run_next_job(&*llm, js_sys::Date::now(), None, &mut tell).await? {
                JobStep::Ran(_) => {}
                JobStep::WaitUntil(t) => sleep((t - js_sys::Date::now()).max(0.0), self.shared.closing()).await?,
                JobStep::Idle => return Ok(()),
            }
        }
    }
}

async fn open_inner(options: JsValue) -> Result<Memory, Error> {
    if !options.is_object() {
        return Err(Error::invalid("Memory.open needs an options object: { name, embedder?, … }"));
    }
    let on_progress = Reflect::get(&options, &"onProgress".into())
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
        .map(|v| v.dyn_into::<Function>().map_err(|_| Error::invalid("`onProgress` must be a function")))
        .transpose()?;
    // `onProgress` is a function, not data: read above, removed from a copy before the typed parse.
    check_keys(
        &options,
        &["name", "embedder", "unitMode", "maxMessageChars", "sessionGapMinutes", "onProgress", "llm", "distill"],
        "Memory.open options",
    )?;
    let llm_option = Reflect::get(&options, &"llm".into()).unwrap_or(JsValue::UNDEFINED);
    let distill = parse_distill(&Reflect::get(&options, &"distill".into()).unwrap_or(JsValue::UNDEFINED))?;
    let embedder = Reflect::get(&options, &"embedder".into()).unwrap_or(JsValue::UNDEFINED);
    check_keys(
        &embedder,
        &[
            "modelUrl",
            "tokenizerUrl",
            "ortUrl",
            "ortWrapperExt",
            "device",
            "maxTokens",
            "batchSize",
            "modelSha256",
            "cache",
        ],
        "embedder options",
    )?;
    let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
    let _ = Reflect::delete_property(&data, &"onProgress".into());
    let _ = Reflect::delete_property(&data, &"llm".into());
    let _ = Reflect::delete_property(&data, &"distill".into());
    let opts: OpenOptions = from_js(data.into(), "Memory.open options")?;
    if opts.name.trim().is_empty() || opts.name.len() > 200 {
        return Err(Error::invalid("`name` must be a non-empty string of at most 200 characters"));
    }
    let e = &opts.embedder;
    let mut embed_config = EmbedConfig::default();
    if let Some(t) = e.max_tokens {
        embed_config.max_tokens = t;
    }
    if let Some(b) = e.batch_size {
        embed_config.batch_size = b;
    }
    let mut config = MemoryConfig { embed: embed_config, distill: distill.map(|d| d.config), ..Default::default() };
    if let Some(m) = opts.unit_mode {
        config.unit_mode = m;
    }
    if let Some(c) = opts.max_message_chars {
        if c == 0 {
            return Err(Error::invalid("`maxMessageChars` must be positive"));
        }
        config.limits = InputLimits { max_message_chars: c, ..config.limits };
    }
    if let Some(g) = opts.session_gap_minutes {
        if !(g.is_finite() && g >= 0.0) {
            return Err(Error::invalid("`sessionGapMinutes` must be a non-negative number"));
        }
        config.session_gap_ms = g * 60_000.0;
    }
    let model_url = absolute_url(e.model_url.as_deref().unwrap_or("assets/model/model.onnx"))?;
    let tokenizer_url = absolute_url(e.tokenizer_url.as_deref().unwrap_or("assets/model/tokenizer.json"))?;
    let mut ort_url = absolute_url(e.ort_url.as_deref().unwrap_or("assets/ort/"))?;
    if !ort_url.ends_with('/') {
        ort_url.push('/');
    }
    let wrapper_ext = e.ort_wrapper_ext.clone().unwrap_or_else(|| "mjs".into());
    if wrapper_ext != "mjs" && wrapper_ext != "js" {
        return Err(Error::invalid("`ortWrapperExt` must be \"mjs\" or \"js\""));
    }
    let dist = OrtDist { base_url: ort_url, wrapper_ext };

    let release_lock = lock_memory(&opts.name).await?;
    let progress_callback = on_progress.clone();
    match load_memory(&opts, config, dist, &model_url, &tokenizer_url, &on_progress).await {
        Ok((core, device_reason)) => {
            let tokenizer = Rc::new(core.tokenizer().clone());
            let llm = match parse_llm(&llm_option, &tokenizer) {
                Ok(l) => l,
                Err(e) => {
                    core.into_store().close();
                    let _ = release_lock.call0(&JsValue::NULL);
                    return Err(e);
                }
            };
            let shared = Shared::new(core);
            let llm = Rc::new(RefCell::new(llm));
            let jobs = JobRunner {
                shared: shared.clone(),
                llm: llm.clone(),
                on_progress: progress_callback.clone(),
                enabled: distill.is_some_and(|d| d.auto_run),
                running: Default::default(),
            };
            jobs.start(); // work queued before a reload resumes
            wasm_bindgen_futures::spawn_local(index_in_slices(shared.clone(), progress_callback.clone()));
            Ok(Memory {
                shared,
                name: opts.name,
                device_reason,
                release_lock,
                llm,
                tokenizer,
                on_progress: progress_callback,
                distill: distill.is_some(),
                jobs,
            })
        }
        Err(e) => {
            let _ = release_lock.call0(&JsValue::NULL);
            Err(e)
        }
    }
}

async fn load_memory(
    opts: &OpenOptions,
    config: MemoryConfig,
    dist: OrtDist,
    model_url: &str,
    tokenizer_url: &str,
    on_progress: &Option<Function>,
) -> Result<(Core, String), Error> {
    let e = &opts.embedder;
    progress(on_progress, "tokenizer", Some(tokenizer_url));
    let use_cache = e.cache.unwrap_or(true);
    let tokenizer_bytes = assets::load(
        &assets::AssetRequest { url: tokenizer_url, sha256: None, cache: use_cache },
        &|loaded, total, cached| report_asset(on_progress, "tokenizer", tokenizer_url, loaded, total, cached),
    )
    .await?;
    let tokenizer_json =
        String::from_utf8(tokenizer_bytes).map_err(|_| Error::Asset("tokenizer.json is not UTF-8".into()))?;
    let tokenizer = WordPiece::from_tokenizer_json(&tokenizer_json)?;
    progress(on_progress, "model", Some(model_url));
    let model_sha = match &e.model_sha256 {
        None => Some(embed::MODEL_SHA256.to_string()),
        Some(None) => None,
        Some(Some(h)) => Some(h.to_lowercase()),
    };
    let model = assets::load(
        &assets::AssetRequest { url: model_url, sha256: model_sha.as_deref(), cache: use_cache },
        &|loaded, total, cached| report_asset(on_progress, "model", model_url, loaded, total, cached),
    )
    .await?;
    progress(on_progress, "runtime", None);
    let probe_ids: Vec<Vec<u32>> = ["The quick brown fox jumps over the lazy dog.", "Where did we go hiking in May?"]
        .iter()
        .map(|t| {
            let mut ids = vec![tokenizer.cls_id()];
            ids.extend(tokenizer.encode(t));
            ids.push(tokenizer.sep_id());
            ids
        })
        .collect();
    let probe = embed::pad_batch(probe_ids.iter().map(Vec::as_slice), tokenizer.pad_id());
    let (runtime, device_reason) = create_runtime(&dist, &model, e.device.unwrap_or_default(), &probe).await?;
    drop(model);
    let embedder = Embedder::new(tokenizer, runtime, config.embed)?;
    progress(on_progress, "storage", None);
    let store = IdbStore::open(&opts.name).await?;
    let core = memory::Memory::open(store, embedder, config).await?;
    progress(on_progress, "ready", Some(core.device().as_str()));
    Ok((core, device_reason))
}

/// Builds the lexical (BM25) index of an opened memory in slices, yielding to the page between them, then tells
/// `onProgress` `{ phase: "indexed" }`. A recall meanwhile takes the lock and finishes what is left itself.
async fn index_in_slices(shared: Shared, on_progress: Option<Function>) {
    const SLICE: usize = 5_000; // units: ~20 ms of work on a slow machine
    loop {
        let left = match shared.lock().await {
            Ok(mut core) => core.index_lexical(SLICE),
            Err(_) => return, // closed
        };
        if left == 0 {
            progress(&on_progress, "indexed", None);
            return;
        }
        if sleep(0.0, shared.closing()).await.is_err() {
            return;
        }
    }
}

/// Tells `onProgress` about one distillation job: `{ phase: "distill", job, ok, jobsLeft, pendingTurns, episodes,
/// facts }`.
fn distill_progress(callback: &Option<Function>, p: &DistillProgress) {
    let Some(f) = callback else { return };
    let Ok(event) = to_js(p) else { return };
    let _ = Reflect::set(&event, &"phase".into(), &"distill".into());
    let _ = f.call1(&JsValue::NULL, &event);
}

/// Resolves after `ms` milliseconds (the global `setTimeout`: works in pages and workers), or with `Err(Aborted)`
/// as soon as `abort` fires.
async fn sleep(ms: f64, abort: &AbortSignal) -> Result<(), Error> {
    let set_timeout = Reflect::get(&js_sys::global(), &"setTimeout".into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .ok_or_else(|| Error::invalid("no setTimeout in this context"))?;
    let ms = ms.clamp(0.0, 2_147_483_647.0);
    let promise = Promise::new(&mut |resolve, _reject| {
        let _ = set_timeout.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
        abort.on_abort(move || {
            let _ = resolve.call0(&JsValue::NULL);
        });
    });
    let _ = JsFuture::from(promise).await;
    abort.check()
}

/// Encodes items that carry a `vector` (episodes, facts, scored ones) without it: vectors stay inside loci.
fn to_js_without_vectors<T: serde::Serialize>(v: &T, what: &str) -> Result<JsValue, Error> {
    let out = to_js(v).map_err(|_| Error::invalid(format!("encoding {what}")))?;
    strip_vectors(&out);
    Ok(out)
}

fn strip_vectors(v: &JsValue) {
    if let Some(a) = v.dyn_ref::<js_sys::Array>() {
        a.for_each(&mut |x, _, _| strip_vectors(&x));
    } else if v.is_object() {
        let _ = Reflect::delete_property(v.unchecked_ref::<js_sys::Object>(), &"vector".into());
        for field in ["episodes", "facts"] {
            if let Ok(inner) = Reflect::get(v, &field.into()) {
                if js_sys::Array::is_array(&inner) {
                    strip_vectors(&inner);
                }
            }
        }
    }
}

/// A non-negative integer id from JS (fact and episode ids are numbers).
fn id_from_js(v: &JsValue, what: &str) -> Result<u64, Error> {
    match v.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x <= 9_007_199_254_740_991.0 => Ok(x as u64),
        _ => Err(Error::invalid(format!("`{what}` must be a non-negative integer id"))),
    }
}

/// What `flush()` resolves to: the totals of every round it ran.
#[derive(serde::Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct JsFlushReport {
    jobs_run: usize,
    failures: usize,
    parked: usize,
    /// Unparked jobs left (0 unless the memory was closed, or jobs were queued during the last round).
    jobs_left: usize,
    /// Jobs parked in the queue after this flush (all of them, also from earlier flushes).
    parked_total: usize,
    /// Time spent waiting out retry backoffs.
    waited_ms: f64,
}

impl JsFlushReport {
    fn add(&mut self, outcome: &JobOutcome) {
        let mut r = FlushReport::default();
        r.add(outcome);
        self.jobs_run += r.jobs_run;
        self.failures += r.failures;
        self.parked += r.parked;
    }
}

fn spawn<F>(fut: F) -> Promise
where
    F: std::future::Future<Output = Result<JsValue, Error>> + 'static,
{
    future_to_promise(async move { fut.await.map_err(js_error) })
}

#[wasm_bindgen]
impl Memory {
    /// Opens (or creates) the memory `options.name`: loads the tokenizer and model, chooses the device, and reads
    /// the stored memory from IndexedDB.
    #[wasm_bindgen(js_name = open, unchecked_return_type = "Promise<Memory>")]
    pub fn open(#[wasm_bindgen(unchecked_param_type = "OpenOptions")] options: JsValue) -> Promise {
        future_to_promise(async move { open_inner(options).await.map(JsValue::from).map_err(js_error) })
    }

    /// Deletes the IndexedDB database of memory `name` (close it first).
    #[wasm_bindgen(js_name = deleteDatabase, unchecked_return_type = "Promise<void>")]
    pub fn delete_database(name: String) -> Promise {
        spawn(async move { IdbStore::delete(&name).await.map(|_| JsValue::UNDEFINED) })
    }

    /// The memory's name.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// Why this device was chosen (e.g. "no hardware WebGPU adapter").
    #[wasm_bindgen(getter, js_name = deviceReason)]
    pub fn device_reason(&self) -> String {
        self.device_reason.clone()
    }

    /// Stores messages as turns of one session and embeds them: `messages` is an array of
    /// `{ role | speaker, content, time?, caption? }`; `options.session` names the session.
    #[wasm_bindgen(js_name = addMessages, unchecked_return_type = "Promise<AddReport>")]
    pub fn add_messages(
        &self,
        #[wasm_bindgen(unchecked_param_type = "MessageInput[]")] messages: JsValue,
        #[wasm_bindgen(unchecked_param_type = "AddOptions | undefined")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        let jobs = self.jobs.clone();
        spawn(async move {
            if !js_sys::Array::is_array(&messages) {
                return Err(Error::invalid(
                    "`messages` must be an array of { role | speaker, content, time?, caption? }",
                ));
            }
            let messages: Vec<MessageInput> = from_js(messages, "messages")?;
            check_keys(&options, &["session"], "addMessages options")?;
            let opts: AddOptions = if options.is_undefined() || options.is_null() {
                AddOptions::default()
            } else {
                from_js(options, "addMessages options")?
            };
            let mut core = shared.lock().await?;
            let report = core.add_messages(&messages, opts.session.as_deref(), js_sys::Date::now()).await?;
            drop(core);
            jobs.start(); // distillation of a full window goes on after this call resolves
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    /// Ranks past sessions for `query` (default method: hybrid dense + lexical; `method: "tir"` is the papers'
    /// Turn Isolation Retrieval) and returns the top `k` with their evidence and a rendered context, optionally
    /// pruned: `prune: "extractive"` (no LLM) or `"llm"` (query-driven pruning by the configured LLM).
    /// With `sources`, or on a memory opened with `distill` and no `prune`: sessions, episodes and facts together
    /// (a `DistilledRecallResult`: a `RecallResult` with `episodes` and `facts`).
    #[wasm_bindgen(unchecked_return_type = "Promise<RecallResult>")]
    pub fn recall(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] query: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let distill_on = self.distill;
        spawn(async move {
            let query = query.as_string().ok_or_else(|| Error::invalid("the query must be a string"))?;
            let opts = JsRecallOptions::parse(&options, "recall options")?;
            let ro = opts.recall_options()?;
            let distilled = opts.distilled(distill_on)?;
            let signal = abort_signal(&options)?;
            if opts.prune.is_some() {
                // Pruning may call the LLM: read, then prune without the memory's lock.
                let po = opts.prune_options(PruneMode::None, signal)?;
                let result = shared.recall_pruned(&query, ro, &po, llm.as_deref(), js_sys::Date::now()).await?;
                return to_js(&result).map_err(|_| Error::invalid("encoding the result"));
            }
            let mut core = shared.lock().await?;
            if let Some(sources) = distilled {
                let result = core.recall_distilled(&query, sources).await?;
                let out = to_js_without_vectors(&result, "the result")?;
                let device = to_js(&core.device()).map_err(|_| Error::invalid("encoding the result"))?;
                let _ = Reflect::set(&out, &"device".into(), &device);
                return Ok(out);
            }
            let result = core.recall(&query, ro).await?;
            to_js(&result).map_err(|_| Error::invalid("encoding the result"))
        })
    }

    /// Answers `question` from memory with the configured LLM: recall, prune (default: the LLM keeps only the
    /// evidence), generate. Returns the answer, the evidence it used and the calls and tokens spent. With
    /// `sources`, or on a memory opened with `distill` and no `prune`: over sessions, episodes and facts, unpruned.
    #[wasm_bindgen(unchecked_return_type = "Promise<AnswerResult>")]
    pub fn answer(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] question: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let distill_on = self.distill;
        spawn(async move {
            let question = question.as_string().ok_or_else(|| Error::invalid("the question must be a string"))?;
            let llm = llm.ok_or_else(|| {
                Error::LlmUnavailable("answer() needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
            })?;
            let opts = JsRecallOptions::parse(&options, "answer options")?;
            let distilled = opts.distilled(distill_on)?;
            let defaults = AnswerOptions::default();
            let answer_options = AnswerOptions {
                recall: opts.recall_options()?,
                prune: opts.prune_options(defaults.prune.mode, abort_signal(&options)?)?,
                max_tokens: opts.max_tokens.or(defaults.max_tokens),
            };
            let now = js_sys::Date::now();
            let result = match distilled {
                Some(sources) => shared.answer_distilled(&question, sources, &answer_options, &*llm, now).await?,
                None => shared.answer(&question, &answer_options, &*llm, now).await?,
            };
            to_js(&result).map_err(|_| Error::invalid("encoding the answer"))
        })
    }

    /// Sets (or, with `null`, removes) the LLM: an OpenAI-compatible endpoint `{ baseUrl, apiKey?, model, … }` or an
    /// async function. The key is kept in memory only.
    #[wasm_bindgen(js_name = setLlm)]
    pub fn set_llm(
        &self,
        #[wasm_bindgen(unchecked_param_type = "LlmOptions | LlmCallback | null")] llm: JsValue,
    ) -> Result<(), JsValue> {
        let parsed = parse_llm(&llm, &self.tokenizer).map_err(js_error)?;
        *self.llm.borrow_mut() = parsed;
        self.jobs.start();
        Ok(())
    }

    /// Whether an LLM is configured.
    #[wasm_bindgen(getter, js_name = hasLlm)]
    pub fn has_llm(&self) -> bool {
        self.llm.borrow().is_some()
    }

    /// Counts and configuration: sessions, turns, units, vectors, model, device.
    #[wasm_bindgen(unchecked_return_type = "Promise<Stats>")]
    pub fn stats(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.stats()).map_err(|_| Error::invalid("encoding stats"))
        })
    }

    /// All sessions, oldest first.
    #[wasm_bindgen(unchecked_return_type = "Promise<Session[]>")]
    pub fn sessions(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.sessions()).map_err(|_| Error::invalid("encoding sessions"))
        })
    }

    /// The turns of one session, in order.
    #[wasm_bindgen(js_name = sessionTurns, unchecked_return_type = "Promise<Turn[]>")]
    pub fn session_turns(&self, session: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.session_turns(&session)).map_err(|_| Error::invalid("encoding turns"))
        })
    }

    /// The whole memory as a portable JSON-compatible document (`JSON.stringify` it to save a file).
    #[wasm_bindgen(unchecked_return_type = "Promise<MemoryExport>")]
    pub fn export(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js(&core.export(js_sys::Date::now())).map_err(|_| Error::invalid("encoding the export"))
        })
    }

    /// Adds the sessions of an exported document (an object or its JSON text). The document is validated first
    /// (a bad one stores nothing); sessions that already exist are skipped, so an interrupted import can be re-run.
    #[wasm_bindgen(js_name = import, unchecked_return_type = "Promise<ImportReport>")]
    pub fn import(&self, #[wasm_bindgen(unchecked_param_type = "MemoryExport | string")] document: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let doc: memory::Export = match document.as_string() {
                Some(text) => serde_json::from_str(&text).map_err(|e| Error::invalid(format!("import: {e}")))?,
                None => from_js(document, "import")?,
            };
            let mut core = shared.lock().await?;
            let report = core.import(&doc, js_sys::Date::now(), |_, _| {}).await?;
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    /// Runs the pending distillation with the configured LLM until the queue is empty or holds only parked jobs:
    /// every session's buffered turns are segmented, then jobs run one at a time; after a failure it waits out the
    /// job's backoff (a timer; other calls proceed meanwhile) and goes on. Each job is reported to the open's
    /// `onProgress` as `{ phase: "distill", … }`. Needs `distill` at open and an LLM (else `LLM_UNAVAILABLE`).
    /// `options.signal` cancels it (`ABORTED`; the running job's LLM call is cancelled and the job stays queued);
    /// `close()` does too (`CLOSED`).
    #[wasm_bindgen(unchecked_return_type = "Promise<FlushReport>")]
    pub fn flush(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FlushOptions | undefined")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        let llm = self.llm.borrow().clone();
        let on_progress = self.on_progress.clone();
        let distill_on = self.distill;
        spawn(async move {
            check_keys(&options, &["signal"], "flush options")?;
            let user_signal = abort_signal(&options)?;
            if !distill_on {
                return Err(Error::invalid("distillation is off: open the memory with `distill: true` (or options)"));
            }
            let llm = llm.ok_or_else(|| {
                Error::LlmUnavailable("flush() needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
            })?;
            // One signal for both causes: the caller's and close().
            let abort = shared.signal(user_signal.as_ref());
            let closed = |e: Error| if shared.is_closed() { Error::Closed } else { e };
            let mut total = JsFlushReport::default();
            let mut tell = |p: &DistillProgress| distill_progress(&on_progress, p);
            shared.queue_last_windows(js_sys::Date::now()).await?;
            loop {
                match shared.run_next_job(&*llm, js_sys::Date::now(), Some(&abort), &mut tell).await.map_err(closed)? {
                    JobStep::Ran(outcome) => total.add(&outcome),
                    // Nothing holds the memory while waiting: recall, addMessages and close go on meanwhile.
                    JobStep::WaitUntil(t) => {
                        let wait = (t - js_sys::Date::now()).max(0.0);
                        total.waited_ms += wait;
                        sleep(wait, &abort).await.map_err(closed)?;
                    }
                    JobStep::Idle => break,
                }
            }
            let stats = shared.lock().await?.distill_stats();
            total.parked_total = stats.parked.len();
            total.jobs_left = stats.jobs - stats.parked.len();
            to_js(&total).map_err(|_| Error::invalid("encoding the flush report"))
        })
    }

    /// Episodes, oldest first, with the ids of their turns (and of the episodes merged into them).
    #[wasm_bindgen(unchecked_return_type = "Promise<Episode[]>")]
    pub fn episodes(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            to_js_without_vectors(&core.episodes(), "episodes")
        })
    }

    /// Facts in id order with their provenance; superseded ones too with `{ includeSuperseded: true }`.
    #[wasm_bindgen(unchecked_return_type = "Promise<Fact[]>")]
    pub fn facts(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FactsOptions | undefined")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            check_keys(&options, &["includeSuperseded"], "facts options")?;
            let all = if options.is_undefined() || options.is_null() {
                JsValue::UNDEFINED
            } else {
                Reflect::get(&options, &"includeSuperseded".into()).unwrap_or(JsValue::UNDEFINED)
            };
            let include_superseded = match all.as_bool() {
                Some(b) => b,
                None if all.is_undefined() => false,
                None => return Err(Error::invalid("`includeSuperseded` must be a boolean")),
            };
            let core = shared.lock().await?;
            to_js_without_vectors(&core.facts(include_superseded), "facts")
        })
    }

    /// A fact's chain of versions, oldest first: the facts it superseded and those that superseded it.
    #[wasm_bindgen(unchecked_return_type = "Promise<Fact[]>")]
    pub fn history(&self, #[wasm_bindgen(unchecked_param_type = "number")] fact_id: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let id = id_from_js(&fact_id, "factId")?;
            let core = shared.lock().await?;
            let chain = core.history(id);
            if chain.is_empty() {
                return Err(Error::NotFound(format!("fact {id}")));
            }
            to_js_without_vectors(&chain, "the history")
        })
    }

    /// Gives parked jobs another chance (e.g. after fixing the endpoint); resolves to how many. They run in the
    /// background (with `autoRun`) or at the next `flush()`.
    #[wasm_bindgen(js_name = retryParked, unchecked_return_type = "Promise<number>")]
    pub fn retry_parked(&self) -> Promise {
        let shared = self.shared.clone();
        let jobs = self.jobs.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            let n = core.retry_parked(js_sys::Date::now()).await?;
            drop(core);
            jobs.start();
            Ok(JsValue::from(n as u32))
        })
    }

    /// Forgets one thing, durably: `{ fact: id }`, `{ episode: id }` (and the facts distilled only from it; its
    /// turns stay), `{ session: id }` (its turns and what was distilled only from them) or `{ all: true }`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn forget(&self, #[wasm_bindgen(unchecked_param_type = "ForgetTarget")] target: JsValue) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            check_keys(&target, &["fact", "episode", "session", "all"], "forget")?;
            let keys = if target.is_object() {
                js_sys::Object::keys(target.unchecked_ref::<js_sys::Object>()).length()
            } else {
                0
            };
            if keys != 1 {
                return Err(Error::invalid(
                    "forget takes exactly one of { fact }, { episode }, { session }, { all: true }",
                ));
            }
            let field = |k: &str| Reflect::get(&target, &k.into()).unwrap_or(JsValue::UNDEFINED);
            let mut core = shared.lock().await?;
            let (fact, episode, session, all) = (field("fact"), field("episode"), field("session"), field("all"));
            if !fact.is_undefined() {
                core.forget_fact(id_from_js(&fact, "fact")?).await?;
            } else if !episode.is_undefined() {
                core.forget_episode(id_from_js(&episode, "episode")?).await?;
            } else if !session.is_undefined() {
                let id = session.as_string().ok_or_else(|| Error::invalid("`session` must be a string"))?;
                core.forget_session(&id).await?;
            } else if all.as_bool() == Some(true) {
                core.forget_all().await?;
            } else {
                return Err(Error::invalid("`all` must be true"));
            }
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Erases everything this memory holds.
    #[wasm_bindgen(js_name = forgetAll, unchecked_return_type = "Promise<void>")]
    pub fn forget_all(&self) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            core.forget_all().await.map(|_| JsValue::UNDEFINED)
        })
    }

    /// Closes the memory after pending calls finish; later calls fail with code `CLOSED`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn close(&self) -> Promise {
        let shared = self.shared.clone();
        let release = self.release_lock.clone();
        // LLM calls in flight (background jobs, flush, answer) are cancelled at once; their jobs stay queued for the
        // next open, and a result that arrives anyway (a callback that ignores its signal) is dropped.
        let closing = shared.close();
        spawn(async move {
            if let Some(store) = closing.await {
                store.close();
                let _ = release.call0(&JsValue::NULL);
            }
            Ok(JsValue::UNDEFINED)
        })
    }
}

/// Bench only (cargo feature `bench`, never in the published package): splits recall's latency.
#[cfg(feature = "bench")]
#[wasm_bindgen]
impl Memory {
    /// Embeds `query` as `recall` does; resolves to the vector's length.
    #[wasm_bindgen(js_name = benchEmbedQuery)]
    pub fn bench_embed_query(&self, query: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let mut core = shared.lock().await?;
            Ok(JsValue::from(core.embed_query(&query).await?.len() as u32))
        })
    }

    /// The token ids of `query`'s first window, as `benchEmbedQuery` feeds them to the model.
    #[wasm_bindgen(js_name = benchQueryTokens)]
    pub fn bench_query_tokens(&self, query: String) -> Promise {
        let shared = self.shared.clone();
        spawn(async move {
            let core = shared.lock().await?;
            let first = core.query_windows(&query).into_iter().next().unwrap_or_default();
            Ok(js_sys::Uint32Array::from(first.as_slice()).into())
        })
    }
}
