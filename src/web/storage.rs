//! The origin's storage as the browser manages it (`navigator.storage`, pages and workers): whether it is
//! persistent (else the browser may evict the whole memory under storage pressure), and its usage and quota.

use js_sys::{Function, Promise, Reflect};
use serde::Serialize;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::error::Error;

/// `stats().storage`; `None` where the browser lacks the API.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct StorageState {
    pub persisted: Option<bool>,
    pub usage: Option<f64>,
    pub quota: Option<f64>,
}

fn storage_manager() -> Option<JsValue> {
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    Reflect::get(&navigator, &"storage".into()).ok().filter(|s| !s.is_undefined() && !s.is_null())
}

/// Calls `navigator.storage[method]()` and awaits it; `None` when it does not exist or fails.
async fn call(method: &str) -> Option<JsValue> {
    let storage = storage_manager()?;
    let f = Reflect::get(&storage, &method.into()).ok()?.dyn_into::<Function>().ok()?;
    let promise = f.call0(&storage).ok()?.dyn_into::<Promise>().ok()?;
    JsFuture::from(promise).await.ok()
}

pub(super) async fn state() -> StorageState {
    let persisted = call("persisted").await.and_then(|v| v.as_bool());
    let estimate = call("estimate").await;
    let number = |key: &str| estimate.as_ref().and_then(|e| Reflect::get(e, &key.into()).ok()).and_then(|v| v.as_f64());
    StorageState { persisted, usage: number("usage"), quota: number("quota") }
}

/// Asks for persistent storage (`navigator.storage.persist()`); resolves to whether the storage is persistent now.
/// Workers have no `persist()`: there it reports the current state (ask from the page).
pub(super) async fn persist() -> Result<bool, Error> {
    if storage_manager().is_none() {
        return Err(Error::Storage("navigator.storage is not available here".into()));
    }
    if let Some(granted) = call("persist").await.and_then(|v| v.as_bool()) {
        return Ok(granted);
    }
    Ok(call("persisted").await.and_then(|v| v.as_bool()).unwrap_or(false))
}
