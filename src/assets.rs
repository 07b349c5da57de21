//! Asset loading in the browser: the model and tokenizer are fetched once, with download progress, checked against
//! a SHA-256 (a wrong or damaged file is a clear `ASSET_FAILED`, never a model silently giving other vectors), and
//! kept in Cache Storage so a reload does not download 23 MB again. Works where `fetch`, `caches` and
//! `crypto.subtle` exist (pages and workers); without Cache Storage it just fetches.

use js_sys::{Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::error::{Error, Result};

/// The Cache Storage bucket; bump the suffix if the cached layout ever changes.
pub const CACHE_NAME: &str = "loci-assets-v1";

/// One asset to load.
pub struct AssetRequest<'a> {
    pub url: &'a str,
    /// Lower-case hex SHA-256 the bytes must have, if known.
    pub sha256: Option<&'a str>,
    /// Keep it in (and read it from) Cache Storage.
    pub cache: bool,
}

fn get(o: &JsValue, key: &str) -> JsValue {
    Reflect::get(o, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn call(o: &JsValue, method: &str, args: &[&JsValue]) -> Result<JsValue> {
    let f: Function = get(o, method).dyn_into().map_err(|_| Error::Asset(format!("`{method}` is not available")))?;
    let array: js_sys::Array = args.iter().copied().collect();
    f.apply(o, &array).map_err(|e| Error::Asset(format!("{method}: {e:?}")))
}

async fn wait(v: JsValue) -> Result<JsValue> {
    JsFuture::from(Promise::resolve(&v)).await.map_err(|e| Error::Asset(format!("{e:?}")))
}

async fn open_cache() -> Option<JsValue> {
    let caches = get(&js_sys::global(), "caches");
    if caches.is_undefined() || caches.is_null() {
        return None;
    }
    // Cache Storage can be refused (opaque origins, some private modes): then load without it.
    let promise = call(&caches, "open", &[&JsValue::from_str(CACHE_NAME)]).ok()?;
    wait(promise).await.ok()
}

/// SHA-256 of `bytes` as lower-case hex, by the browser's own `crypto.subtle`.
pub async fn sha256_hex(bytes: &[u8]) -> Result<String> {
    let subtle = get(&get(&js_sys::global(), "crypto"), "subtle");
    if subtle.is_undefined() {
        return Err(Error::Asset("crypto.subtle is unavailable (a secure context is needed to verify assets)".into()));
    }
    let data = Uint8Array::from(bytes);
    let digest = wait(call(&subtle, "digest", &[&JsValue::from_str("SHA-256"), &data])?).await?;
    Ok(Uint8Array::new(&digest).to_vec().iter().map(|b| format!("{b:02x}")).collect())
}

/// The largest asset loci reads (the model is 23 MB): a `Content-Length` or a body beyond it is refused rather than
/// allocated.
pub const MAX_ASSET_BYTES: usize = 1 << 30;
/// Bytes reserved up front from a `Content-Length`, whatever it claims (the rest grows as chunks arrive).
const MAX_PREALLOCATION: usize = 64 << 20;

/// Reads a `Response` body, reporting `(loaded, total)` as chunks arrive.
pub async fn read_body(resp: &JsValue, url: &str, progress: &dyn Fn(f64, Option<f64>)) -> Result<Vec<u8>> {
    let total = get(&get(resp, "headers"), "get")
        .dyn_into::<Function>()
        .ok()
        .and_then(|f| f.call1(&get(resp, "headers"), &"content-length".into()).ok())
        .and_then(|v| v.as_string())
        // An integer by HTTP's grammar; read as one, which keeps `str::parse::<f64>` (~15 KB of tables) out of the wasm.
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|n| n as f64);
    let too_big = || Error::Asset(format!("{url} is over {MAX_ASSET_BYTES} bytes"));
    if total.is_some_and(|t| t > MAX_ASSET_BYTES as f64) {
        return Err(too_big());
    }
    let body = get(resp, "body");
    if body.is_null() || body.is_undefined() {
        let buf = wait(call(resp, "arrayBuffer", &[])?).await?;
        return Ok(Uint8Array::new(&buf).to_vec());
    }
    let reader = call(&body, "getReader", &[])?;
    let mut out = Vec::with_capacity((total.unwrap_or(0.0) as usize).min(MAX_PREALLOCATION));
    loop {
        let chunk = wait(call(&reader, "read", &[])?).await.map_err(|e| Error::Asset(format!("reading {url}: {e}")))?;
        if get(&chunk, "done").as_bool().unwrap_or(true) {
            break;
        }
        let value: Uint8Array = get(&chunk, "value").dyn_into().map_err(|_| Error::Asset(format!("reading {url}")))?;
        let start = out.len();
        if start + value.length() as usize > MAX_ASSET_BYTES {
            let _ = call(&reader, "cancel", &[]);
            return Err(too_big());
        }
        out.resize(start + value.length() as usize, 0);
        value.copy_to(&mut out[start..]);
        progress(out.len() as f64, total);
    }
    Ok(out)
}

async fn download(url: &str, progress: &dyn Fn(f64, Option<f64>)) -> Result<Vec<u8>> {
    let resp = wait(call(&js_sys::global(), "fetch", &[&JsValue::from_str(url)])?)
        .await
        .map_err(|e| Error::Asset(format!("fetching {url}: {e}")))?;
    if !get(&resp, "ok").as_bool().unwrap_or(false) {
        return Err(Error::Asset(format!("fetching {url}: HTTP {}", get(&resp, "status").as_f64().unwrap_or(0.0))));
    }
    read_body(&resp, url, progress).await
}

/// Loads an asset: from Cache Storage when present and intact, else from the network (then cached).
/// `progress(loaded, total, from_cache)`.
pub async fn load(request: &AssetRequest<'_>, progress: &dyn Fn(f64, Option<f64>, bool)) -> Result<Vec<u8>> {
    let cache = if request.cache { open_cache().await } else { None };
    let key = JsValue::from_str(request.url);
    if let Some(cache) = &cache {
        if let Ok(hit) = wait(call(cache, "match", &[&key])?).await {
            if !hit.is_undefined() && !hit.is_null() {
                let bytes = read_body(&hit, request.url, &|_, _| {}).await?;
                let intact = match request.sha256 {
                    Some(want) => sha256_hex(&bytes).await? == want,
                    None => true,
                };
                if intact {
                    progress(bytes.len() as f64, Some(bytes.len() as f64), true);
                    return Ok(bytes);
                }
                // A damaged cache entry is dropped and fetched again.
                let _ = wait(call(cache, "delete", &[&key])?).await;
            }
        }
    }
    let bytes = download(request.url, &|loaded, total| progress(loaded, total, false)).await?;
    if let Some(want) = request.sha256 {
        let got = sha256_hex(&bytes).await?;
        if got != want {
            return Err(Error::Asset(format!(
                "checksum mismatch for {}: expected sha256 {want}, got {got} (a different or damaged file)",
                request.url
            )));
        }
    }
    if let Some(cache) = &cache {
        let body = Uint8Array::from(bytes.as_slice());
        let init = Object::new();
        let headers = Object::new();
        let _ = Reflect::set(&headers, &"content-length".into(), &JsValue::from_str(&bytes.len().to_string()));
        let _ = Reflect::set(&init, &"headers".into(), &headers);
        let response_ctor: Function =
            get(&js_sys::global(), "Response").dyn_into().map_err(|_| Error::Asset("no Response".into()))?;
        let args: js_sys::Array = [JsValue::from(body), JsValue::from(init)].into_iter().collect();
        if let Ok(response) = Reflect::construct(&response_ctor, &args) {
            // Caching is an optimisation: a quota error here must not fail the open.
            if let Ok(p) = call(cache, "put", &[&key, &response]) {
                let _ = wait(p).await;
            }
        }
    }
    Ok(bytes)
}
