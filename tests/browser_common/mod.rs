//! Shared helpers for the headless-Chromium tests (wasm-bindgen-test serves the crate root, so assets are fetched
//! from `/www/assets/…`; its server sends `.mjs` as octet-stream, hence the `.js` wrapper twins).
#![allow(dead_code)]

use js_sys::{Reflect, JSON};
use loci::web::Memory;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// Parses JSON text into a JS value (test inputs read best as JSON).
pub fn js(json: &str) -> JsValue {
    JSON::parse(json).expect("test JSON")
}

/// Open options for memory `name` with the self-hosted test assets; `extra` is more JSON members (", …").
pub fn open_options(name: &str, device: &str, extra: &str) -> JsValue {
    js(&format!(
        r#"{{"name": "{name}", "embedder": {{"modelUrl": "/www/assets/model/model.onnx",
            "tokenizerUrl": "/www/assets/model/tokenizer.json", "ortUrl": "/www/assets/ort/",
            "ortWrapperExt": "js", "device": "{device}"}} {extra} }}"#
    ))
}

/// Awaits a promise, returning its value or its rejection.
pub async fn wait(p: js_sys::Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(p).await
}

/// Deletes memory `name` so the test starts from nothing.
pub async fn delete(name: &str) {
    wait(Memory::delete_database(name.into())).await.expect("delete database");
}

/// Opens memory `name` on the WASM device.
pub async fn open(name: &str) -> Memory {
    open_with(open_options(name, "wasm", "")).await.unwrap_or_else(|e| panic!("open failed: {e:?}"))
}

pub async fn open_with(options: JsValue) -> Result<Memory, JsValue> {
    let v = wait(Memory::open(options)).await?;
    Ok(v.unchecked_into::<JsMemory>().into_memory())
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// The JS wrapper of an exported `Memory`, as `Memory.open` resolves it.
    pub type JsMemory;
}

impl JsMemory {
    pub fn into_memory(self) -> Memory {
        use wasm_bindgen::convert::TryFromJsValue;
        Memory::try_from_js_value(self.into()).expect("a Memory")
    }
}

/// The `code` of a rejected call.
pub fn code(err: &JsValue) -> String {
    Reflect::get(err, &"code".into()).ok().and_then(|c| c.as_string()).unwrap_or_else(|| format!("no code: {err:?}"))
}

pub fn get(v: &JsValue, path: &str) -> JsValue {
    path.split('.').fold(v.clone(), |o, k| match k.parse::<u32>() {
        Ok(i) => Reflect::get_u32(&o, i).unwrap_or(JsValue::UNDEFINED),
        Err(_) => Reflect::get(&o, &k.into()).unwrap_or(JsValue::UNDEFINED),
    })
}

pub fn num(v: &JsValue, path: &str) -> f64 {
    get(v, path).as_f64().unwrap_or_else(|| panic!("{path} is not a number in {:?}", JSON::stringify(v)))
}

pub fn string(v: &JsValue, path: &str) -> String {
    get(v, path).as_string().unwrap_or_else(|| panic!("{path} is not a string in {:?}", JSON::stringify(v)))
}

pub fn len(v: &JsValue, path: &str) -> u32 {
    get(v, path).unchecked_into::<js_sys::Array>().length()
}

pub async fn fetch_text(url: &str) -> Result<String, String> {
    let window = web_sys::window().ok_or("no window")?;
    let resp: web_sys::Response =
        JsFuture::from(window.fetch_with_str(url)).await.map_err(|e| format!("{e:?}"))?.unchecked_into();
    if !resp.ok() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let text = JsFuture::from(resp.text().map_err(|e| format!("{e:?}"))?).await.map_err(|e| format!("{e:?}"))?;
    text.as_string().ok_or_else(|| "not text".into())
}

/// `path` resolved against the test page.
pub fn absolute(path: &str) -> String {
    let href = web_sys::window().unwrap().location().href().unwrap();
    web_sys::Url::new_with_base(path, &href).unwrap().href()
}

/// The bytes at `url`.
pub async fn fetch_bytes(url: &str) -> Vec<u8> {
    use wasm_bindgen::JsCast;
    let resp: web_sys::Response = wait(web_sys::window().unwrap().fetch_with_str(url)).await.unwrap().unchecked_into();
    let buf = wait(resp.array_buffer().unwrap()).await.unwrap();
    js_sys::Uint8Array::new(&buf).to_vec()
}

/// One text of tests/fixtures/reference_vectors.json and its Python onnxruntime vector.
#[derive(serde::Deserialize)]
pub struct Item {
    pub text: String,
    pub vector: Vec<f32>,
}

#[derive(serde::Deserialize)]
pub struct Reference {
    pub items: Vec<Item>,
}

/// Resolves after `ms` milliseconds (a timer: the page's other tasks run meanwhile).
pub async fn sleep_ms(ms: i32) {
    let tick = js_sys::Promise::new(&mut |ok, _| {
        web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&ok, ms).unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(tick).await.unwrap();
}
