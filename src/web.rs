//! Web bindings: the JavaScript API (`Memory.open`, `addMessages`, `recall`, `stats`, `close`). A thin layer:
//! it parses JS values into typed Rust (a wrong type is a typed error, never a panic), fetches assets, and hands
//! everything to [`crate::memory::Memory`]. Errors reach JS as `Error`s with a stable `code`.

use std::rc::Rc;

use futures::lock::Mutex;
use js_sys::{Function, Promise, Reflect};
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use std::cell::RefCell;

use crate::embed::{self, Device, EmbedConfig, Embedder, OnnxRuntime, OrtDist, WebBuild};
use crate::error::Error;
use crate::llm::callback::CallbackLlm;
use crate::llm::fetch::FetchTransport;
use crate::llm::openai::{OpenAiClient, OpenAiConfig};
use crate::llm::{AbortSignal, Llm};
use crate::memory::{AnswerOptions, PruneOptions};
use crate::memory::{self, MemoryConfig, RecallOptions};
use crate::recall::prune::PruneMode;
use crate::recall::RecallMethod;
use crate::store::idb::IdbStore;
use crate::text::WordPiece;
use crate::types::{parse_time, InputLimits, MessageInput, TimeInput, UnitMode};

type Core = memory::Memory<IdbStore, OnnxRuntime>;

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
}

const RECALL_KEYS: [&str; 9] =
    ["k", "unitsPerSession", "order", "method", "prune", "budget", "questionTime", "maxTokens", "signal"];

impl JsRecallOptions {
    fn parse(options: &JsValue, what: &str) -> Result<Self, Error> {
        check_keys(options, &RECALL_KEYS, what)?;
        if options.is_undefined() || options.is_null() {
            return Ok(Self::default());
        }
        let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
        let _ = Reflect::delete_property(&data, &"signal".into());
        from_js(data.into(), what)
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
    check_keys(v, &["baseUrl", "apiKey", "model", "headers", "timeoutMs", "maxConcurrency", "maxRetries"], "llm options")?;
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
    let client = OpenAiClient::new(config, FetchTransport::new())?.with_tokenizer(tokenizer.clone());
    Ok(Some(Rc::new(client)))
}

fn absolute_url(url: &str) -> Result<String, Error> {
    let base = web_sys::window()
        .and_then(|w| w.location().href().ok())
        .ok_or_else(|| Error::Asset("no page location to resolve asset URLs against".into()))?;
    web_sys::Url::new_with_base(url, &base)
        .map(|u| u.href())
        .map_err(|_| Error::invalid(format!("{url:?} is not a valid URL")))
}

async fn fetch_bytes(url: &str) -> Result<Vec<u8>, Error> {
    let window = web_sys::window().ok_or_else(|| Error::Asset("no window".into()))?;
    let resp = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|e| Error::Asset(format!("fetching {url}: {e:?}")))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| Error::Asset(format!("fetching {url}")))?;
    if !resp.ok() {
        return Err(Error::Asset(format!("fetching {url}: HTTP {}", resp.status())));
    }
    let buf = JsFuture::from(resp.array_buffer().map_err(|e| Error::Asset(format!("{url}: {e:?}")))?)
        .await
        .map_err(|e| Error::Asset(format!("reading {url}: {e:?}")))?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
}

fn progress(callback: &Option<Function>, phase: &str, detail: Option<&str>) {
    if let Some(f) = callback {
        let event = js_sys::Object::new();
        let _ = Reflect::set(&event, &"phase".into(), &phase.into());
        if let Some(d) = detail {
            let _ = Reflect::set(&event, &"detail".into(), &d.into());
        }
        // A throwing progress callback is the app's bug, not a reason to fail the open.
        let _ = f.call1(&JsValue::NULL, &event);
    }
}

/// Whether a WebGPU adapter exists that is not a software fallback.
async fn hardware_webgpu_adapter() -> bool {
    let Some(window) = web_sys::window() else { return false };
    let Ok(gpu) = Reflect::get(&window.navigator(), &"gpu".into()) else { return false };
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
    inner: Rc<Mutex<Option<Core>>>,
    name: String,
    device_reason: String,
    release_lock: Function,
    llm: Rc<RefCell<Option<Rc<dyn Llm>>>>,
    tokenizer: Rc<WordPiece>,
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
        &["name", "embedder", "unitMode", "maxMessageChars", "sessionGapMinutes", "onProgress", "llm"],
        "Memory.open options",
    )?;
    let llm_option = Reflect::get(&options, &"llm".into()).unwrap_or(JsValue::UNDEFINED);
    let embedder = Reflect::get(&options, &"embedder".into()).unwrap_or(JsValue::UNDEFINED);
    check_keys(
        &embedder,
        &["modelUrl", "tokenizerUrl", "ortUrl", "ortWrapperExt", "device", "maxTokens", "batchSize"],
        "embedder options",
    )?;
    let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
    let _ = Reflect::delete_property(&data, &"onProgress".into());
    let _ = Reflect::delete_property(&data, &"llm".into());
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
    let mut config = MemoryConfig { embed: embed_config, ..Default::default() };
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
            Ok(Memory {
                inner: Rc::new(Mutex::new(Some(core))),
                name: opts.name,
                device_reason,
                release_lock,
                llm: Rc::new(RefCell::new(llm)),
                tokenizer,
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
    let tokenizer_bytes = fetch_bytes(tokenizer_url).await?;
    let tokenizer_json =
        String::from_utf8(tokenizer_bytes).map_err(|_| Error::Asset("tokenizer.json is not UTF-8".into()))?;
    let tokenizer = WordPiece::from_tokenizer_json(&tokenizer_json)?;
    progress(on_progress, "model", Some(model_url));
    let model = fetch_bytes(model_url).await?;
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
        let inner = self.inner.clone();
        spawn(async move {
            if !js_sys::Array::is_array(&messages) {
                return Err(Error::invalid("`messages` must be an array of { role | speaker, content, time?, caption? }"));
            }
            let messages: Vec<MessageInput> = from_js(messages, "messages")?;
            check_keys(&options, &["session"], "addMessages options")?;
            let opts: AddOptions = if options.is_undefined() || options.is_null() {
                AddOptions::default()
            } else {
                from_js(options, "addMessages options")?
            };
            let mut guard = inner.lock().await;
            let core = guard.as_mut().ok_or(Error::Closed)?;
            let report = core.add_messages(&messages, opts.session.as_deref(), js_sys::Date::now()).await?;
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    /// Ranks past sessions for `query` (default method: hybrid dense + lexical; `method: "tir"` is the papers'
    /// Turn Isolation Retrieval) and returns the top `k` with their evidence and a rendered context, optionally
    /// pruned: `prune: "extractive"` (no LLM) or `"llm"` (query-driven pruning by the configured LLM).
    #[wasm_bindgen(unchecked_return_type = "Promise<RecallResult>")]
    pub fn recall(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] query: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let inner = self.inner.clone();
        let llm = self.llm.borrow().clone();
        spawn(async move {
            let query = query.as_string().ok_or_else(|| Error::invalid("the query must be a string"))?;
            let opts = JsRecallOptions::parse(&options, "recall options")?;
            let ro = opts.recall_options()?;
            let signal = abort_signal(&options)?;
            let mut guard = inner.lock().await;
            let core = guard.as_mut().ok_or(Error::Closed)?;
            if opts.prune.is_none() {
                let result = core.recall(&query, ro).await?;
                return to_js(&result).map_err(|_| Error::invalid("encoding the result"));
            }
            let po = opts.prune_options(PruneMode::None, signal)?;
            let result = core.recall_pruned(&query, ro, &po, llm.as_deref(), js_sys::Date::now()).await?;
            to_js(&result).map_err(|_| Error::invalid("encoding the result"))
        })
    }

    /// Answers `question` from memory with the configured LLM: recall, prune (default: the LLM keeps only the
    /// evidence), generate. Returns the answer, the evidence it used and the calls and tokens spent.
    #[wasm_bindgen(unchecked_return_type = "Promise<AnswerResult>")]
    pub fn answer(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] question: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RecallOptions | undefined")] options: JsValue,
    ) -> Promise {
        let inner = self.inner.clone();
        let llm = self.llm.borrow().clone();
        spawn(async move {
            let question = question.as_string().ok_or_else(|| Error::invalid("the question must be a string"))?;
            let llm = llm.ok_or_else(|| {
                Error::LlmUnavailable("answer() needs an LLM: pass `llm` to Memory.open or call setLlm()".into())
            })?;
            let opts = JsRecallOptions::parse(&options, "answer options")?;
            let defaults = AnswerOptions::default();
            let answer_options = AnswerOptions {
                recall: opts.recall_options()?,
                prune: opts.prune_options(defaults.prune.mode, abort_signal(&options)?)?,
                max_tokens: opts.max_tokens.or(defaults.max_tokens),
            };
            let mut guard = inner.lock().await;
            let core = guard.as_mut().ok_or(Error::Closed)?;
            let result = core.answer(&question, &answer_options, &*llm, js_sys::Date::now()).await?;
            to_js(&result).map_err(|_| Error::invalid("encoding the answer"))
        })
    }

    /// Sets (or, with `null`, removes) the LLM: an OpenAI-compatible endpoint `{ baseUrl, apiKey?, model, … }` or an
    /// async function. The key is kept in memory only.
    #[wasm_bindgen(js_name = setLlm)]
    pub fn set_llm(&self, #[wasm_bindgen(unchecked_param_type = "LlmOptions | LlmCallback | null")] llm: JsValue) -> Result<(), JsValue> {
        let parsed = parse_llm(&llm, &self.tokenizer).map_err(js_error)?;
        *self.llm.borrow_mut() = parsed;
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
        let inner = self.inner.clone();
        spawn(async move {
            let guard = inner.lock().await;
            let core = guard.as_ref().ok_or(Error::Closed)?;
            to_js(&core.stats()).map_err(|_| Error::invalid("encoding stats"))
        })
    }

    /// All sessions, oldest first.
    #[wasm_bindgen(unchecked_return_type = "Promise<Session[]>")]
    pub fn sessions(&self) -> Promise {
        let inner = self.inner.clone();
        spawn(async move {
            let guard = inner.lock().await;
            let core = guard.as_ref().ok_or(Error::Closed)?;
            to_js(&core.sessions()).map_err(|_| Error::invalid("encoding sessions"))
        })
    }

    /// The turns of one session, in order.
    #[wasm_bindgen(js_name = sessionTurns, unchecked_return_type = "Promise<Turn[]>")]
    pub fn session_turns(&self, session: String) -> Promise {
        let inner = self.inner.clone();
        spawn(async move {
            let guard = inner.lock().await;
            let core = guard.as_ref().ok_or(Error::Closed)?;
            to_js(&core.session_turns(&session)).map_err(|_| Error::invalid("encoding turns"))
        })
    }

    /// The whole memory as a portable JSON-compatible document (`JSON.stringify` it to save a file).
    #[wasm_bindgen(unchecked_return_type = "Promise<MemoryExport>")]
    pub fn export(&self) -> Promise {
        let inner = self.inner.clone();
        spawn(async move {
            let guard = inner.lock().await;
            let core = guard.as_ref().ok_or(Error::Closed)?;
            to_js(&core.export(js_sys::Date::now())).map_err(|_| Error::invalid("encoding the export"))
        })
    }

    /// Adds the sessions of an exported document (an object or its JSON text). The document is validated first
    /// (a bad one stores nothing); sessions that already exist are skipped, so an interrupted import can be re-run.
    #[wasm_bindgen(js_name = import, unchecked_return_type = "Promise<ImportReport>")]
    pub fn import(&self, #[wasm_bindgen(unchecked_param_type = "MemoryExport | string")] document: JsValue) -> Promise {
        let inner = self.inner.clone();
        spawn(async move {
            let doc: memory::Export = match document.as_string() {
                Some(text) => serde_json::from_str(&text).map_err(|e| Error::invalid(format!("import: {e}")))?,
                None => from_js(document, "import")?,
            };
            let mut guard = inner.lock().await;
            let core = guard.as_mut().ok_or(Error::Closed)?;
            let report = core.import(&doc, js_sys::Date::now(), |_, _| {}).await?;
            to_js(&report).map_err(|_| Error::invalid("encoding the report"))
        })
    }

    /// Erases everything this memory holds.
    #[wasm_bindgen(js_name = forgetAll, unchecked_return_type = "Promise<void>")]
    pub fn forget_all(&self) -> Promise {
        let inner = self.inner.clone();
        spawn(async move {
            let mut guard = inner.lock().await;
            let core = guard.as_mut().ok_or(Error::Closed)?;
            core.forget_all().await.map(|_| JsValue::UNDEFINED)
        })
    }

    /// Closes the memory after pending calls finish; later calls fail with code `CLOSED`.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn close(&self) -> Promise {
        let inner = self.inner.clone();
        let release = self.release_lock.clone();
        spawn(async move {
            let mut guard = inner.lock().await;
            if let Some(core) = guard.take() {
                core.into_store().close();
                let _ = release.call0(&JsValue::NULL);
            }
            Ok(JsValue::UNDEFINED)
        })
    }
}
