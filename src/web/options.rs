//! Reading JS option objects into typed Rust: unknown keys are refused (a typo is an error, not a silently ignored
//! setting), wrong types are `INVALID_INPUT`, never a panic.

use super::*;

pub(super) fn from_js<T: serde::de::DeserializeOwned>(v: JsValue, what: &str) -> Result<T, Error> {
    serde_wasm_bindgen::from_value(v).map_err(|e| Error::invalid(format!("{what}: {e}")))
}

/// Refuses option names loci does not know, so a typo (`modelURL`) is an error rather than a silently ignored
/// setting. (serde-wasm-bindgen reads only the fields it expects, so `deny_unknown_fields` cannot catch these.)
pub(super) fn check_keys(v: &JsValue, allowed: &[&str], what: &str) -> Result<(), Error> {
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
pub(super) struct OpenOptions {
    pub(super) name: String,
    #[serde(default)]
    pub(super) embedder: EmbedderOptions,
    #[serde(default)]
    pub(super) unit_mode: Option<UnitMode>,
    #[serde(default)]
    pub(super) max_message_chars: Option<usize>,
    #[serde(default)]
    pub(super) session_gap_minutes: Option<f64>,
    /// `"strict"` (default) or `"relaxed"`: how IndexedDB commits each write.
    #[serde(default)]
    pub(super) durability: crate::store::idb::Durability,
    #[serde(default)]
    pub(super) screen_memory: Option<bool>,
}

/// `distill` of `Memory.open` (`true` takes every default).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct DistillOptions {
    pub(super) window: Option<usize>,
    pub(super) merge_candidates: Option<usize>,
    pub(super) predict_facts: Option<usize>,
    pub(super) consolidate_candidates: Option<usize>,
    pub(super) max_attempts: Option<u32>,
    pub(super) backoff_ms: Option<f64>,
    pub(super) max_backoff_ms: Option<f64>,
    pub(super) max_tokens: Option<u32>,
    pub(super) auto_run: Option<bool>,
}

pub(super) const DISTILL_KEYS: [&str; 9] = [
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
pub(super) struct DistillSetup {
    pub(super) config: DistillConfig,
    /// Run queued jobs in the background as soon as they are due (default); else only `flush()` runs them.
    pub(super) auto_run: bool,
}

/// `undefined`, `null` or `false`: off; `true`: the defaults; an object: the defaults with these changes.
pub(super) fn parse_distill(v: &JsValue) -> Result<Option<DistillSetup>, Error> {
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
pub(super) struct SourcesOptions {
    pub(super) sessions: Option<bool>,
    pub(super) episodes: Option<usize>,
    pub(super) facts: Option<usize>,
    pub(super) raw_episodes: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct EmbedderOptions {
    pub(super) model_url: Option<String>,
    pub(super) tokenizer_url: Option<String>,
    /// Base URL of onnxruntime-web's `dist/` files.
    pub(super) ort_url: Option<String>,
    /// `"mjs"` (default) or `"js"`, for servers that send `.mjs` with a wrong MIME type.
    pub(super) ort_wrapper_ext: Option<String>,
    pub(super) device: Option<DeviceChoice>,
    pub(super) max_tokens: Option<usize>,
    pub(super) batch_size: Option<usize>,
    pub(super) max_windows: Option<usize>,
    /// Expected SHA-256 of the model (default: the int8 all-MiniLM-L6-v2); `null` skips the check.
    #[serde(default, deserialize_with = "nullable")]
    pub(super) model_sha256: Option<Option<String>>,
    /// Expected SHA-256 of the tokenizer (default: the model's own `tokenizer.json`); `null` skips the check.
    #[serde(default, deserialize_with = "nullable")]
    pub(super) tokenizer_sha256: Option<Option<String>>,
    /// Keep the model and tokenizer in Cache Storage (default true).
    pub(super) cache: Option<bool>,
    /// onnxruntime-web's CPU threads (default: one per core, at most 4, in a cross-origin isolated page; else one).
    pub(super) threads: Option<u32>,
    /// Compute the model in onnxruntime-web's own Web Worker, off the page's thread (default true).
    pub(super) worker: Option<bool>,
}

/// Distinguishes an absent option (`None`) from an explicit `null` (`Some(None)`).
pub(super) fn nullable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug, Default)]
#[serde(rename_all = "lowercase")]
pub(super) enum DeviceChoice {
    #[default]
    Auto,
    Wasm,
    Webgpu,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AddOptions {
    pub(super) session: Option<String>,
}

/// Options of `recall` and `answer` (`signal` is read separately: it is an object, not data).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct JsRecallOptions {
    pub(super) k: Option<usize>,
    pub(super) units_per_session: Option<usize>,
    pub(super) order: Option<String>,
    pub(super) method: Option<RecallMethod>,
    pub(super) prune: Option<String>,
    /// Extractive pruning: share of the unpruned context's tokens to keep.
    pub(super) budget: Option<f32>,
    pub(super) question_time: Option<TimeInput>,
    pub(super) max_tokens: Option<u32>,
    pub(super) sources: Option<serde_json::Value>,
    /// Query expansion with the memory's LLM (`recall` only).
    pub(super) expand: Option<bool>,
}

pub(super) const RECALL_KEYS: [&str; 12] = [
    "k",
    "unitsPerSession",
    "order",
    "method",
    "prune",
    "budget",
    "questionTime",
    "maxTokens",
    "signal",
    "sources",
    "expand",
    "onText",
];

impl JsRecallOptions {
    pub(super) fn parse(options: &JsValue, what: &str) -> Result<Self, Error> {
        check_keys(options, &RECALL_KEYS, what)?;
        if options.is_undefined() || options.is_null() {
            return Ok(Self::default());
        }
        let sources = Reflect::get(options, &"sources".into()).unwrap_or(JsValue::UNDEFINED);
        check_keys(&sources, &["sessions", "episodes", "facts", "rawEpisodes"], "sources")?;
        let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
        let _ = Reflect::delete_property(&data, &"signal".into());
        let _ = Reflect::delete_property(&data, &"onText".into());
        from_js(data.into(), what)
    }

    /// Whether query expansion is asked for; it runs on the sessions recall alone, so `prune` and `sources` with it
    /// are refused.
    pub(super) fn expand(&self) -> Result<bool, Error> {
        let expand = self.expand.unwrap_or(false);
        if expand && (self.prune.is_some() || self.sources.as_ref().is_some_and(|s| !s.is_null())) {
            return Err(Error::invalid(
                "`expand` works on the sessions recall: it cannot be combined with `prune` or `sources`",
            ));
        }
        Ok(expand)
    }

    /// The distilled recall's options when it is the one to run (see the module docs), else `None`.
    pub(super) fn distilled(&self, distill_on: bool) -> Result<Option<DistilledRecallOptions>, Error> {
        if self.expand == Some(true) {
            return Ok(None);
        }
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

    pub(super) fn recall_options(&self) -> Result<RecallOptions, Error> {
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

    pub(super) fn prune_options(
        &self,
        default_mode: PruneMode,
        signal: Option<AbortSignal>,
    ) -> Result<PruneOptions, Error> {
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

/// `options.onText` (`answer` only): a function that hears the answer as the model writes it, each time with the
/// text so far. What it throws is ignored: a listener's bug must not cost the answer.
pub(super) fn text_sink(options: &JsValue) -> Result<Option<TextSink>, Error> {
    let js = Reflect::get(options, &"onText".into()).unwrap_or(JsValue::UNDEFINED);
    if js.is_undefined() || js.is_null() || options.is_undefined() {
        return Ok(None);
    }
    let f: Function = js.dyn_into().map_err(|_| Error::invalid("`onText` must be a function"))?;
    Ok(Some(TextSink::new(move |text| {
        let _ = f.call1(&JsValue::NULL, &JsValue::from_str(text));
    })))
}

/// Links a JS `AbortSignal` (if given) to ours.
pub(super) fn abort_signal(options: &JsValue) -> Result<Option<AbortSignal>, Error> {
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

/// The user's LLM: `{ baseUrl, apiKey?, model, headers?, timeoutMs?, maxConcurrency?, maxRetries?, contextTokens?,
/// extraBody? }` for an
/// OpenAI-compatible endpoint, or an async function `({ messages, json, maxTokens, temperature }) => ({ text, usage? })`.
/// The API key lives in this object only: never stored, never logged.
/// The LLM of `llm` options; `tokenizer` counts its tokens when the endpoint does not (`None`: a follower tab only
/// checking the options it keeps for when it leads).
pub(super) fn parse_llm(v: &JsValue, tokenizer: Option<&Rc<WordPiece>>) -> Result<Option<Rc<dyn Llm>>, Error> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    if let Some(f) = v.dyn_ref::<Function>() {
        let llm = CallbackLlm::new(f.clone());
        return Ok(Some(Rc::new(match tokenizer {
            Some(t) => llm.with_tokenizer(t.clone()),
            None => llm,
        })));
    }
    check_keys(
        v,
        &[
            "baseUrl",
            "apiKey",
            "model",
            "headers",
            "timeoutMs",
            "maxConcurrency",
            "maxRetries",
            "contextTokens",
            "extraBody",
        ],
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
        extra_body: Option<serde_json::Map<String, serde_json::Value>>,
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
    config.extra_body = o.extra_body.unwrap_or_default();
    let mut client = OpenAiClient::new(config, FetchTransport::new())?;
    if let Some(t) = tokenizer {
        client = client.with_tokenizer(t.clone());
    }
    Ok(Some(Rc::new(client)))
}

/// Resolves `url` against the page's (or worker's) location: `globalThis.location`, not `window`, so loci also runs
/// in a Web Worker.
pub(super) fn absolute_url(url: &str) -> Result<String, Error> {
    let base = Reflect::get(&js_sys::global(), &"location".into())
        .ok()
        .and_then(|l| Reflect::get(&l, &"href".into()).ok())
        .and_then(|h| h.as_string())
        .ok_or_else(|| Error::Asset("no location to resolve asset URLs against".into()))?;
    web_sys::Url::new_with_base(url, &base)
        .map(|u| u.href())
        .map_err(|_| Error::invalid(format!("{url:?} is not a valid URL")))
}

/// A non-negative integer id from JS (fact and episode ids are numbers).
pub(super) fn id_from_js(v: &JsValue, what: &str) -> Result<u64, Error> {
    match v.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x <= 9_007_199_254_740_991.0 => Ok(x as u64),
        _ => Err(Error::invalid(format!("`{what}` must be a non-negative integer id"))),
    }
}
