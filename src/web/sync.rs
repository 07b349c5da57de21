//! `memory.sync()` (feature `sync`): one sync of the memory with a WebDAV folder, in the leading tab. The memory is
//! held only for the steps that read or change it (record and cut, mark sent, merge and apply), never across the
//! network, so that the chat goes on while a sync is in flight.

use js_sys::Reflect;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::options::{abort_signal, check_keys};
use super::{to_js, Leader};
use crate::error::Error;
use crate::store::seal::{random_bytes, KeySource, SyncUnlock};
use crate::sync::webdav::{Fetch, WebDav};
use crate::sync::{self, Cipher};

/// Where to sync: the folder's URL, and the credentials the server asks for (sent as HTTP Basic, only to it).
struct RemoteOptions {
    url: String,
    authorization: Option<String>,
}

fn remote_options(v: &JsValue) -> Result<RemoteOptions, Error> {
    if let Some(url) = v.as_string() {
        return Ok(RemoteOptions { url, authorization: None });
    }
    if !v.is_object() {
        return Err(Error::invalid("`remote` must be a folder URL or { url, username?, password? }"));
    }
    check_keys(v, &["url", "username", "password"], "sync `remote`")?;
    let field = |k: &str| Reflect::get(v, &k.into()).ok().filter(|x| !x.is_undefined() && !x.is_null());
    let text = |k: &str| match field(k) {
        None => Ok(None),
        Some(x) => x.as_string().map(Some).ok_or_else(|| Error::invalid(format!("sync `remote.{k}` must be a string"))),
    };
    let url = text("url")?.ok_or_else(|| Error::invalid("sync `remote.url` is missing"))?;
    let authorization = match (text("username")?, text("password")?) {
        (None, None) => None,
        (user, password) => {
            let pair = format!("{}:{}", user.unwrap_or_default(), password.unwrap_or_default());
            Some(format!("Basic {}", base64(pair.as_bytes())))
        }
    };
    Ok(RemoteOptions { url, authorization })
}

/// Standard base64 (RFC 4648), for one Basic credential: `btoa` takes only Latin-1, a password may be any text.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

fn device_id() -> Result<String, Error> {
    Ok(random_bytes(16)?.iter().map(|b| format!("{b:02x}")).collect())
}

impl Leader {
    pub fn sync(&self, options: JsValue) -> js_sys::Promise {
        let shared = self.shared.clone();
        let jobs = self.jobs.clone();
        super::spawn(async move {
            check_keys(&options, &["remote", "passphrase", "key", "signal"], "sync options")?;
            if !options.is_object() {
                return Err(Error::invalid("sync takes { remote, passphrase | key, signal? }"));
            }
            let field = |k: &str| Reflect::get(&options, &k.into()).unwrap_or(JsValue::UNDEFINED);
            let remote = remote_options(&field("remote"))?;
            let source = match (field("passphrase"), field("key")) {
                (p, k) if k.is_undefined() && !p.is_undefined() => KeySource::from_js(&p, "the sync passphrase")?,
                (p, k) if p.is_undefined() && k.dyn_ref::<web_sys::CryptoKey>().is_some() => {
                    KeySource::from_js(&k, "the sync key")?
                }
                _ => return Err(Error::invalid("sync needs exactly one of `passphrase` and `key` (a CryptoKey)")),
            };
            let signal = abort_signal(&options)?;
            let check = || signal.as_ref().map_or(Ok(()), |s| s.check());
            let server = WebDav::new(&remote.url, remote.authorization, Fetch);
            let key = sync::connect(&server, &SyncUnlock(source)).await?;
            let cipher: &dyn Cipher = &key;
            sync::check_key(&server, cipher).await?;
            check()?;
            let outgoing = shared.lock().await?.sync_outgoing(|| device_id().unwrap_or_default()).await?;
            if outgoing.device.is_empty() {
                return Err(Error::Unsupported("WebCrypto is missing: sync needs it".into()));
            }
            let ops_sent = outgoing.segments.iter().map(|s| s.ops.len()).sum();
            let last = sync::send_segments(&server, cipher, &outgoing.segments).await?;
            shared.lock().await?.sync_sent(last).await?;
            check()?;
            let fetched = sync::fetch_segments(&server, cipher, &outgoing.merged, &outgoing.device).await?;
            check()?;
            let mut applied = shared.lock().await?.sync_merge(fetched).await?;
            applied.ops_sent = ops_sent;
            jobs.start(); // distillation of what came in goes on after this call resolves
            to_js(&applied).map_err(|_| Error::invalid("encoding the sync report"))
        })
    }
}
