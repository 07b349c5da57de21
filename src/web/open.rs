//! Opening a memory from JS: the tab lock, the assets (tokenizer, model) with progress, the runtime and device
//! choice (WebGPU only when a hardware adapter passes a parity self-test), the store, then the lexical index built
//! in slices after `open` resolved.

use super::*;

pub(super) fn progress(callback: &Option<Function>, phase: &str, detail: Option<&str>) {
    progress_with(callback, phase, detail, &[]);
}

/// Calls `onProgress({ phase, detail?, ...fields })`.
pub(super) fn progress_with(
    callback: &Option<Function>,
    phase: &str,
    detail: Option<&str>,
    fields: &[(&str, JsValue)],
) {
    if let Some(f) = callback {
        let event = js_sys::Object::new();
        let _ = Reflect::set(&event, &"phase".into(), &phase.into());
        if let Some(d) = detail {
            let _ = Reflect::set(&event, &"detail".into(), &d.into());
        }
        for (k, v) in fields {
            let _ = Reflect::set(&event, &(*k).into(), v);
        }
        // A throwing progress callback is the app's bug, not a reason to fail the open.
        let _ = f.call1(&JsValue::NULL, &event);
    }
}

pub(super) fn report_asset(
    on_progress: &Option<Function>,
    phase: &str,
    url: &str,
    loaded: f64,
    total: Option<f64>,
    cached: bool,
) {
    let mut fields = vec![("loaded", JsValue::from_f64(loaded))];
    if let Some(t) = total {
        fields.push(("total", JsValue::from_f64(t)));
    }
    if cached {
        fields.push(("cached", JsValue::TRUE));
    }
    progress_with(on_progress, phase, Some(url), &fields);
}

/// Whether a WebGPU adapter exists that is not a software fallback.
pub(super) async fn hardware_webgpu_adapter() -> bool {
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

/// onnxruntime-web's CPU threads when the app does not say: in a cross-origin isolated page, one per core (at most
/// 4). onnxruntime-web's own default is one per two cores; on an idle 2-core machine two threads ingested 2.0× and
/// embedded a query 1.6× faster than one (`npm run bench`, docs/BENCHMARKS.md). Elsewhere threads are unavailable:
/// onnxruntime-web's default (one).
fn default_threads() -> Option<u32> {
    let global = js_sys::global();
    let isolated = Reflect::get(&global, &"crossOriginIsolated".into()).ok().and_then(|v| v.as_bool()).unwrap_or(false);
    if !isolated {
        return None;
    }
    let cores = Reflect::get(&global, &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"hardwareConcurrency".into()))
        .ok()
        .and_then(|c| c.as_f64())
        .unwrap_or(1.0);
    Some((cores as u32).clamp(1, 4))
}

/// Chooses and creates the runtime. `auto` takes WebGPU only with a hardware adapter and when a parity self-test
/// against the WASM provider passes (int8 models are wrong or slow on some WebGPU stacks); else WASM.
pub(super) async fn create_runtime(
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

/// One memory per name per browser profile is open at a time: the tab that holds the Web Lock named after its
/// database (another opener would work on a stale index and allocate the same ids). `granted` is the lock's release
/// function when the caller already holds it (a follower whose turn came); otherwise the lock is taken if free, and
/// `BLOCKED_BY_OTHER_TAB` says it is not (the caller then follows the holder, see [`super::tabs`]). Without Web Locks
/// (an insecure origin, an old browser) nothing would keep two tabs apart: `UNSUPPORTED`, never unlocked.
pub(super) async fn lock_memory(name: &str, granted: Option<Function>) -> Result<Function, Error> {
    if let Some(release) = granted {
        return Ok(release);
    }
    let release = JsFuture::from(tabs::try_tab_lock(&IdbStore::database_name(name)))
        .await
        .map_err(|e| Error::Storage(format!("Web Locks: {e:?}")))?;
    if release.as_string().as_deref() == Some("unsupported") {
        return Err(Error::Unsupported(
            "Web Locks (navigator.locks) are missing: without them two tabs could write one memory at once; \
             serve the page from a secure context (https:// or localhost)"
                .into(),
        ));
    }
    release
        .dyn_into::<Function>()
        .map_err(|_| Error::BlockedByOtherTab(format!("memory {name:?} is open in another tab")))
}

/// Opens the memory as the leading tab: validates `options`, takes the tab lock (or uses `granted`), starts the
/// [`tabs::TabServer`] at once (so that other tabs wait for this one rather than give up), then loads the assets, the
/// runtime and the store. On failure the lock is released and the server closed with the error.
pub(super) async fn open_inner(
    options: &JsValue,
    granted: Option<Function>,
) -> Result<(Leader, tabs::TabServer), Error> {
    if !options.is_object() {
        return Err(Error::invalid("Memory.open needs an options object: { name, embedder?, … }"));
    }
    let on_progress = Reflect::get(options, &"onProgress".into())
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
        .map(|v| v.dyn_into::<Function>().map_err(|_| Error::invalid("`onProgress` must be a function")))
        .transpose()?;
    // `onProgress` is a function, not data: read above, removed from a copy before the typed parse.
    check_keys(
        options,
        &[
            "name",
            "embedder",
            "unitMode",
            "maxMessageChars",
            "sessionGapMinutes",
            "durability",
            "screenMemory",
            "onProgress",
            "llm",
            "distill",
            "encryption",
            "sync",
        ],
        "Memory.open options",
    )?;
    let sync_option = Reflect::get(options, &"sync".into()).unwrap_or(JsValue::UNDEFINED);
    #[cfg(feature = "sync")]
    let background_sync = super::sync::SyncRunner::parse(&sync_option)?;
    #[cfg(not(feature = "sync"))]
    if !sync_option.is_undefined() {
        return Err(Error::Unsupported(
            "this build of loci has no sync: build it with the cargo feature `sync`".into(),
        ));
    }
    let encryption = parse_encryption(options)?;
    let llm_option = Reflect::get(options, &"llm".into()).unwrap_or(JsValue::UNDEFINED);
    let distill = parse_distill(&Reflect::get(options, &"distill".into()).unwrap_or(JsValue::UNDEFINED))?;
    let embedder = Reflect::get(options, &"embedder".into()).unwrap_or(JsValue::UNDEFINED);
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
            "maxWindows",
            "modelSha256",
            "tokenizerSha256",
            "cache",
            "threads",
            "worker",
        ],
        "embedder options",
    )?;
    let data = js_sys::Object::assign(&js_sys::Object::new(), options.unchecked_ref());
    let _ = Reflect::delete_property(&data, &"onProgress".into());
    let _ = Reflect::delete_property(&data, &"llm".into());
    let _ = Reflect::delete_property(&data, &"distill".into());
    let _ = Reflect::delete_property(&data, &"encryption".into());
    let _ = Reflect::delete_property(&data, &"sync".into());
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
    if let Some(w) = e.max_windows {
        embed_config.max_windows = w;
    }
    embed_config.validate()?;
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
    if let Some(s) = opts.screen_memory {
        config.screen_memory = s;
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
    if e.threads.is_some_and(|t| t == 0 || t > 16) {
        return Err(Error::invalid("`threads` must be between 1 and 16"));
    }
    let dist = OrtDist {
        base_url: ort_url,
        wrapper_ext,
        threads: e.threads.or_else(default_threads),
        worker: e.worker.unwrap_or(true),
    };

    let release_lock = lock_memory(&opts.name, granted).await?;
    let server = tabs::TabServer::new(&tabs::channel_name(&opts.name));
    // What the leader's background work reports reaches the followers' onProgress too (the relay picks the phases).
    let progress_callback = Some(server.progress_relay(&on_progress.clone().map_or(JsValue::NULL, JsValue::from)));
    let fail = |e: Error, release_lock: &Function| {
        server.close(e.code(), &e.to_string());
        let _ = release_lock.call0(&JsValue::NULL);
        Err(e)
    };
    match load_memory(&opts, encryption.as_ref(), config, dist, &model_url, &tokenizer_url, &on_progress).await {
        Ok((core, device_reason)) => {
            let tokenizer = Rc::new(core.tokenizer().clone());
            let llm = match parse_llm(&llm_option, Some(&tokenizer)) {
                Ok(l) => l,
                Err(e) => {
                    core.into_store().close();
                    return fail(e, &release_lock);
                }
            };
            let watch = core.store().watch();
            let shared = Shared::new(core);
            close_when_lost(&watch, &shared, &release_lock, &progress_callback);
            let llm = Rc::new(RefCell::new(llm));
            let auto_run = distill.is_some_and(|d| d.auto_run);
            let jobs = JobRunner::new(shared.clone(), llm.clone(), progress_callback.clone(), auto_run);
            jobs.start(); // work queued before a reload resumes
            wasm_bindgen_futures::spawn_local(index_in_slices(shared.clone(), progress_callback.clone()));
            let embeds = EmbedRunner::new(shared.clone(), progress_callback.clone());
            embeds.start(); // long texts a reload interrupted
            #[cfg(feature = "sync")]
            let sync =
                super::sync::SyncRunner::new(shared.clone(), jobs.clone(), progress_callback.clone(), background_sync);
            #[cfg(feature = "sync")]
            sync.start();
            let leader = Leader {
                shared,
                name: opts.name,
                device_reason,
                release_lock,
                llm,
                tokenizer,
                on_progress: progress_callback,
                distill: distill.is_some(),
                jobs,
                embeds,
                #[cfg(feature = "sync")]
                sync,
            };
            Ok((leader, server))
        }
        Err(e) => fail(e, &release_lock),
    }
}

pub(super) async fn load_memory(
    opts: &OpenOptions,
    encryption: Option<&KeySource>,
    config: MemoryConfig,
    dist: OrtDist,
    model_url: &str,
    tokenizer_url: &str,
    on_progress: &Option<Function>,
) -> Result<(Core, String), Error> {
    let e = &opts.embedder;
    progress(on_progress, "tokenizer", Some(tokenizer_url));
    let use_cache = e.cache.unwrap_or(true);
    let expected = |option: &Option<Option<String>>, default: &str| match option {
        None => Some(default.to_string()),
        Some(None) => None,
        Some(Some(h)) => Some(h.to_lowercase()),
    };
    let tokenizer_sha = expected(&e.tokenizer_sha256, embed::TOKENIZER_SHA256);
    let tokenizer_bytes = assets::load(
        &assets::AssetRequest { url: tokenizer_url, sha256: tokenizer_sha.as_deref(), cache: use_cache },
        &|loaded, total, cached| report_asset(on_progress, "tokenizer", tokenizer_url, loaded, total, cached),
    )
    .await?;
    let tokenizer_json =
        String::from_utf8(tokenizer_bytes).map_err(|_| Error::Asset("tokenizer.json is not UTF-8".into()))?;
    let tokenizer = WordPiece::from_tokenizer_json(&tokenizer_json)?;
    progress(on_progress, "model", Some(model_url));
    let model_sha = expected(&e.model_sha256, embed::MODEL_SHA256);
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
    let store = IdbStore::open_with(&opts.name, opts.durability, encryption).await?;
    let core = memory::Memory::open(store, embedder, config).await?;
    let quarantined = core.stats().quarantined;
    if !quarantined.is_empty() {
        let detail = quarantined.iter().map(|q| format!("{}/{}: {}", q.store, q.key, q.reason)).collect::<Vec<_>>();
        progress_with(
            on_progress,
            "quarantined",
            Some(&detail.join("; ")),
            &[("count", JsValue::from_f64(quarantined.len() as f64))],
        );
    }
    progress(on_progress, "ready", Some(core.device().as_str()));
    Ok((core, device_reason))
}

/// The `encryption` option: `{ passphrase }` or `{ key: CryptoKey }`, or none.
pub(super) fn parse_encryption(options: &JsValue) -> Result<Option<KeySource>, Error> {
    match Reflect::get(options, &"encryption".into()) {
        Ok(v) if !v.is_undefined() && !v.is_null() => KeySource::from_js(&v, "`encryption`").map(Some),
        _ => Ok(None),
    }
}

/// When the connection is lost (another tab upgrades or deletes the database, or the browser closes it), the memory
/// closes as `close()` would — later calls get `CLOSED` — and tells `onProgress` `{ phase: "closed", reason,
/// detail }`.
fn close_when_lost(watch: &ConnectionWatch, shared: &Shared, release_lock: &Function, on_progress: &Option<Function>) {
    let (shared, release_lock, on_progress) = (shared.clone(), release_lock.clone(), on_progress.clone());
    watch.on_lost(move |reason| {
        let closing = shared.close();
        if let Some(f) = &on_progress {
            let event = js_sys::Object::new();
            let _ = Reflect::set(&event, &"phase".into(), &"closed".into());
            let _ = Reflect::set(&event, &"reason".into(), &reason.as_str().into());
            let _ = Reflect::set(&event, &"detail".into(), &reason.message().into());
            let _ = f.call1(&JsValue::NULL, &event);
        }
        wasm_bindgen_futures::spawn_local(async move {
            if let Some(store) = closing.await {
                store.close();
                let _ = release_lock.call0(&JsValue::NULL);
            }
        });
    });
}

/// Builds the lexical (BM25) index of an opened memory in slices, yielding to the page between them, then tells
/// `onProgress` `{ phase: "indexed" }` and keeps the index in the store when the open built most of it. A recall
/// meanwhile takes the lock and finishes what is left itself.
pub(super) async fn index_in_slices(shared: Shared, on_progress: Option<Function>) {
    const SLICE: usize = 5_000; // units: ~20 ms of work on a slow machine
    loop {
        let left = match shared.lock().await {
            Ok(mut core) => core.index_lexical(SLICE),
            Err(_) => return, // closed
        };
        if left == 0 {
            progress(&on_progress, "indexed", None);
            // Kept for the next open (a cache: if the write fails, that open builds the index again).
            if let Ok(mut core) = shared.lock().await {
                let _ = core.save_lexical().await;
            }
            return;
        }
        if sleep(0.0, shared.closing()).await.is_err() {
            return;
        }
    }
}
