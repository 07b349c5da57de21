//! The ONNX runtime behind [`Runtime`]: the same `ort` calls on both targets; natively against the onnxruntime
//! shared library (`load-dynamic`), in the page against onnxruntime-web through `ort-web`.

use async_trait::async_trait;
#[cfg(target_arch = "wasm32")]
use ort::session::builder::SessionBuilder;
use ort::session::Session;
use ort::value::Tensor;

use super::{Batch, Device, Runtime};
use crate::error::{Error, Result};

fn embedder_err(e: impl std::fmt::Display) -> Error {
    Error::Embedder(e.to_string())
}

/// A loaded model session on one device.
pub struct OnnxRuntime {
    session: Session,
    device: Device,
}

impl OnnxRuntime {
    fn inputs(
        batch: &Batch,
    ) -> Result<Vec<(std::borrow::Cow<'static, str>, ort::session::SessionInputValue<'static>)>> {
        let shape = [batch.rows, batch.seq];
        let ids = Tensor::from_array((shape, batch.input_ids.clone())).map_err(embedder_err)?;
        let mask = Tensor::from_array((shape, batch.attention_mask.clone())).map_err(embedder_err)?;
        let types = Tensor::from_array((shape, vec![0i64; batch.rows * batch.seq])).map_err(embedder_err)?;
        Ok(ort::inputs! { "input_ids" => ids, "attention_mask" => mask, "token_type_ids" => types })
    }

    fn read_output(outputs: &ort::session::SessionOutputs<'_>) -> Result<Vec<f32>> {
        let value = outputs
            .get("last_hidden_state")
            .ok_or_else(|| Error::Embedder("the model has no `last_hidden_state` output".into()))?;
        let (_, data) = value.try_extract_tensor::<f32>().map_err(embedder_err)?;
        Ok(data.to_vec())
    }
}

/// Appends an execution provider by the short name onnxruntime-web knows (`"WASM"`, `"WebGPU"`).
///
/// `unsafe` because it calls the C API directly: ort rc.15 registers EPs under canonical names
/// (`WebGpuExecutionProvider`) that ort-web 0.5.0 rejects, so its safe `with_execution_providers` cannot be used
/// there (TOOLCHAIN.md, "EP-name trap").
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
fn append_provider(builder: &mut SessionBuilder, name: &std::ffi::CStr) -> Result<()> {
    use ort::AsPointer;
    let api = ort::api();
    // SAFETY: the builder's options pointer is valid for the builder's lifetime; no key/value pairs are passed.
    let status = unsafe {
        (api.SessionOptionsAppendExecutionProvider)(
            builder.ptr_mut(),
            name.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            0,
        )
    };
    // SAFETY: `status` was just returned by the C API and is consumed once.
    unsafe { ort::Error::result_from_status(status) }.map_err(embedder_err)
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use super::*;

    static ENVIRONMENT: OnceLock<std::result::Result<ort::environment::Environment, String>> = OnceLock::new();

    /// Where the onnxruntime shared library is: `ORT_DYLIB_PATH`, else the path `npm run setup` recorded.
    pub fn default_dylib_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
            return Some(PathBuf::from(p));
        }
        let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache").join("ort-dylib-path");
        std::fs::read_to_string(recorded).ok().map(|s| PathBuf::from(s.trim()))
    }

    /// Where setup put the model assets (`www/assets/model`).
    pub fn default_model_dir() -> PathBuf {
        model_dir(&crate::embed::ModelSpec::MINILM)
    }

    /// Where setup put a model's assets (`www/assets/<asset_dir>`).
    pub fn model_dir(spec: &crate::embed::ModelSpec) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("www").join("assets").join(spec.asset_dir)
    }

    fn environment(dylib: &Path) -> Result<ort::environment::Environment> {
        ENVIRONMENT
            .get_or_init(|| {
                let builder = ort::init_from(dylib).map_err(|e| format!("loading {}: {e}", dylib.display()))?;
                builder.with_name("loci").with_telemetry(false).build().map_err(|e| e.to_string())
            })
            .clone()
            .map_err(Error::Embedder)
    }

    impl OnnxRuntime {
        /// Loads the model natively. `threads`: intra-op threads (1 keeps benchmarks comparable).
        pub fn native(model: &[u8], dylib: &Path, threads: usize) -> Result<Self> {
            let env = environment(dylib)?;
            let session = Session::builder(&env)
                .map_err(embedder_err)?
                .with_intra_threads(threads.max(1))
                .map_err(embedder_err)?
                .commit_from_memory(model)
                .map_err(embedder_err)?;
            Ok(OnnxRuntime { session, device: Device::Cpu })
        }
    }

    #[async_trait(?Send)]
    impl Runtime for OnnxRuntime {
        async fn last_hidden_state(&mut self, batch: &Batch) -> Result<Vec<f32>> {
            let inputs = Self::inputs(batch)?;
            let outputs = self.session.run(inputs).map_err(embedder_err)?;
            Self::read_output(&outputs)
        }

        fn device(&self) -> Device {
            self.device
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::{default_dylib_path, default_model_dir, model_dir};

#[cfg(target_arch = "wasm32")]
mod web {
    use std::cell::RefCell;

    use wasm_bindgen::JsValue;

    use super::*;

    /// Which onnxruntime-web build the page loaded. ort-web injects it once per page, so the first memory opened
    /// decides; the WebGPU build also runs the WASM provider.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Build {
        Wasm,
        Webgpu,
    }

    thread_local! {
        static LOADED: RefCell<Option<(Build, ort::environment::Environment)>> = const { RefCell::new(None) };
        /// Whether onnxruntime-web computes in its own worker ([`OrtDist::worker`]), for the error a failed start gives.
        static IN_ORT_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[wasm_bindgen::prelude::wasm_bindgen(inline_js = r#"
// ort-web's loader injects onnxruntime-web with a <script> tag and checks `'ort' in window`: neither exists in a
// Web Worker. There, a minimal stand-in loads it for the duration of the load only, then is removed so nothing else
// mistakes the worker for a page. It imports the ES module build beside the classic script (`ort.wasm.min.mjs`):
// no eval, so a worker runs under a CSP without 'unsafe-eval'. Only where that file is missing or refused (a server
// that sends .mjs with a wrong type) does it evaluate the classic script, which such a CSP forbids. The module's
// exports are copied into a plain object: ort-web marks the `ort` global, and a module namespace cannot be marked.
export function installWorkerLoader() {
  if (typeof document !== "undefined") return false;
  const load = async (src) => {
    try {
      globalThis.ort = Object.assign({}, await import(src.replace(/\.js$/, ".mjs")));
      return;
    } catch (_) { /* no module build here: the classic script below */ }
    const response = await fetch(src);
    if (!response.ok) throw new Error(`HTTP ${response.status} for ${src}`);
    (0, eval)(`${await response.text()}\n;globalThis.ort = ort;`);
  };
  globalThis.window = globalThis;
  globalThis.document = {
    head: { appendChild(el) {
      if (!el.src) return; // ort-web's <link rel=preload> hints: nothing to load in a worker
      load(el.src).then(() => el.fire("load", {}), (error) => el.fire("error", { error }));
    } },
    createElement() {
      const listeners = {};
      return { src: "", setAttribute() {}, addEventListener(type, f) { (listeners[type] ||= []).push(f); },
               fire(type, event) { (listeners[type] || []).forEach((f) => f(event)); } };
    },
  };
  return true;
}
export function removeWorkerLoader() {
  delete globalThis.document;
  delete globalThis.window;
}
// In a page, onnxruntime-web's proxy mode computes the model in its own Web Worker (a classic worker of the same
// ort.wasm.min.js, so a CSP needs `worker-src 'self'`, as its threads already do), and the page's thread stays free
// while a pasted document is embedded. The proxy posts each input's buffer to that worker as a transfer, and
// ort-web's inputs (and the model bytes) are views on loci's own wasm memory, which cannot be transferred: so each
// is copied first (3 KB for a query, the model once). Tensors already elsewhere than the CPU are left alone.
export function computeInOrtWorker() {
  const ort = globalThis.ort;
  if (typeof document === "undefined" || !ort || ort.env.wasm.proxy) return false;
  ort.env.wasm.proxy = true;
  const session = ort.InferenceSession;
  const create = session.create;
  session.create = function (model, ...rest) {
    return create.call(this, ArrayBuffer.isView(model) ? model.slice() : model, ...rest);
  };
  const run = session.prototype.run;
  session.prototype.run = function (feeds, ...rest) {
    const copied = {};
    for (const [name, t] of Object.entries(feeds)) {
      copied[name] = t.location && t.location !== "cpu" ? t : new ort.Tensor(t.type, t.data.slice(), t.dims);
    }
    return run.call(this, copied, ...rest);
  };
  return true;
}
"#)]
    extern "C" {
        #[wasm_bindgen(js_name = installWorkerLoader)]
        fn install_worker_loader() -> bool;
        #[wasm_bindgen(js_name = removeWorkerLoader)]
        fn remove_worker_loader();
        #[wasm_bindgen(js_name = computeInOrtWorker)]
        fn compute_in_ort_worker() -> bool;
    }

    /// Padded tokens per call on the WASM backend (see [`Runtime::tokens_per_call`]).
    const WASM_TOKENS_PER_CALL: usize = 512;

    /// Where onnxruntime-web's files are served from (self-hosted: ort-web must never fetch from its CDN).
    #[derive(Clone, Debug)]
    pub struct OrtDist {
        /// Absolute base URL of the `dist/` files.
        pub base_url: String,
        /// Extension of the Emscripten wrapper (`mjs`; `js` where a server sends `.mjs` with the wrong type).
        pub wrapper_ext: String,
        /// onnxruntime-web's CPU threads (`env.wasm.numThreads`); `None` keeps its default (one thread per two
        /// cores, at most 4, and only where the page is cross-origin isolated). Fixed for the page at first load.
        pub threads: Option<u32>,
        /// In a page, compute the model in onnxruntime-web's own Web Worker (its proxy mode) rather than on the
        /// page's thread (WASM build only). Fixed for the page at first load.
        pub worker: bool,
    }

    fn set_wasm_paths(dist: &OrtDist, build: Build) -> Result<()> {
        let stem = match build {
            Build::Wasm => "ort-wasm-simd-threaded",
            Build::Webgpu => "ort-wasm-simd-threaded.asyncify",
        };
        let get = |o: &JsValue, k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k));
        let fail = |_| Error::Embedder("onnxruntime-web loaded but `ort.env.wasm` is missing".into());
        let ort = get(&js_sys::global(), "ort").map_err(fail)?;
        let wasm = get(&get(&ort, "env").map_err(fail)?, "wasm").map_err(fail)?;
        let paths = js_sys::Object::new();
        let set = |o: &JsValue, k: &str, v: &JsValue| js_sys::Reflect::set(o, &JsValue::from_str(k), v);
        let url = |f: String| JsValue::from_str(&format!("{}{}", dist.base_url, f));
        set(&paths, "mjs", &url(format!("{stem}.{}", dist.wrapper_ext))).map_err(fail)?;
        set(&paths, "wasm", &url(format!("{stem}.wasm"))).map_err(fail)?;
        set(&wasm, "wasmPaths", &paths).map_err(fail)?;
        if let Some(n) = dist.threads {
            set(&wasm, "numThreads", &JsValue::from(n)).map_err(fail)?;
        }
        Ok(())
    }

    /// Loads onnxruntime-web (once per page) and returns the environment; telemetry off.
    pub async fn environment(dist: &OrtDist, want: Build) -> Result<(Build, ort::environment::Environment)> {
        if let Some((build, env)) = LOADED.with(|l| l.borrow().clone()) {
            if want == Build::Webgpu && build == Build::Wasm {
                return Err(Error::Embedder(
                    "this page already loaded onnxruntime-web without WebGPU; reload the page to use WebGPU".into(),
                ));
            }
            return Ok((build, env));
        }
        let script = match want {
            Build::Wasm => "ort.wasm.min.js",
            Build::Webgpu => "ort.webgpu.min.js",
        };
        let in_worker = install_worker_loader();
        let api = ort_web::api(ort_web::Dist::new(dist.base_url.clone()).with_script_name(script)).await;
        if in_worker {
            remove_worker_loader();
        }
        let api = api.map_err(|e| Error::Asset(format!("loading onnxruntime-web from {}: {e}", dist.base_url)))?;
        ort::set_api(api);
        set_wasm_paths(dist, want)?;
        // The WebGPU build has no proxy mode; in a Web Worker there is no page to free.
        if want == Build::Wasm && dist.worker && compute_in_ort_worker() {
            IN_ORT_WORKER.with(|w| w.set(true));
        }
        let env = ort::init().with_name("loci").with_telemetry(false).build().map_err(embedder_err)?;
        LOADED.with(|l| *l.borrow_mut() = Some((want, env.clone())));
        Ok((want, env))
    }

    impl OnnxRuntime {
        /// Creates a session on exactly one provider, so the device that runs is known.
        pub async fn web(env: &ort::environment::Environment, model: &[u8], device: Device) -> Result<Self> {
            let name: &std::ffi::CStr = match device {
                Device::Webgpu => c"WebGPU",
                _ => c"WASM",
            };
            let mut builder = Session::builder(env).map_err(embedder_err)?;
            append_provider(&mut builder, name)?;
            let session = builder.commit_from_memory(model).await.map_err(|e| {
                // onnxruntime-web's worker starts with the first session; where the page refuses it (a CSP without
                // `worker-src 'self'`), the rejection says nothing of why.
                if IN_ORT_WORKER.with(|w| w.get()) {
                    Error::Embedder(format!(
                        "{e} (onnxruntime-web computes in its own Web Worker: a Content-Security-Policy must allow \
                         `worker-src` for its script, or open with `embedder.worker: false`)"
                    ))
                } else {
                    embedder_err(e)
                }
            })?;
            Ok(OnnxRuntime { session, device })
        }
    }

    #[async_trait(?Send)]
    impl Runtime for OnnxRuntime {
        async fn last_hidden_state(&mut self, batch: &Batch) -> Result<Vec<f32>> {
            let inputs = Self::inputs(batch)?;
            let options = ort::session::RunOptions::new().map_err(embedder_err)?;
            let mut outputs = self.session.run_async(inputs, &options).await.map_err(embedder_err)?;
            ort_web::sync_outputs(&mut outputs).await.map_err(embedder_err)?;
            Self::read_output(&outputs)
        }

        fn device(&self) -> Device {
            self.device
        }

        /// The WASM backend computes a call in one task of the thread that runs it: the page's own when loci runs
        /// in a Web Worker or `worker` is off, onnxruntime-web's worker otherwise, where a call queued behind a long
        /// one (a query behind a paste's windows) waits for it all the same. 512 padded tokens take ~0.6 s on a
        /// 2-core machine, and cost no throughput, since short texts (≤ 32 tokens) still go 16 to a call. WebGPU
        /// waits for the GPU without holding the thread.
        fn tokens_per_call(&self) -> Option<usize> {
            (self.device == Device::Wasm).then_some(WASM_TOKENS_PER_CALL)
        }

        /// A macrotask (`setTimeout`, in pages and workers): the page handles input and paints between two calls,
        /// where awaiting the calls alone would chain them in microtasks, one long task for a whole paste.
        async fn between_calls(&mut self) {
            crate::store::idb::timeout(0).await;
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use web::{environment as web_environment, Build as WebBuild, OrtDist};
