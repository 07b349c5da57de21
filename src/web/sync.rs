//! `memory.sync()` (feature `sync`): one sync of the memory with a WebDAV folder, in the leading tab. The memory is
//! held only for the steps that read or change it (record and cut, mark sent, merge and apply), never across the
//! network, so that the chat goes on while a sync is in flight.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::jobs::{sleep, JobRunner};
use super::open::progress_with;
use super::options::{abort_signal, check_keys};
use super::Shared;
use super::{js_error, to_js, Leader};
use crate::error::Error;
use crate::llm::AbortSignal;
use crate::memory;
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

/// The open's `sync` option: where and how to sync in the background (and by `memory.sync()` without options).
struct BackgroundSync {
    options: JsValue,
    every_ms: f64,
}

/// Runs syncs, one at a time: on `memory.sync()`, and with the open's `sync` option at open and then every
/// `everyMinutes` (default 5) in the leading tab (a tab that takes over starts its own). Tells `onProgress`
/// `{ phase: "sync", detail: "sending" | "receiving" | "done", … }`, and `{ phase: "sync", error }` when a background
/// sync fails (the next one tries again).
#[derive(Clone)]
pub(super) struct SyncRunner {
    shared: Shared,
    jobs: JobRunner,
    on_progress: Option<Function>,
    background: Option<Rc<BackgroundSync>>,
    in_flight: Rc<Cell<bool>>,
}

/// How often the background syncs run without `everyMinutes`.
const DEFAULT_EVERY_MINUTES: f64 = 5.0;

impl SyncRunner {
    /// Checks the open's `sync` option (a bad one fails the open, before anything is loaded).
    pub(super) fn parse(option: &JsValue) -> Result<Option<(JsValue, f64)>, Error> {
        if option.is_undefined() || option.is_null() {
            return Ok(None);
        }
        check_keys(option, &["remote", "passphrase", "key", "everyMinutes"], "the `sync` option")?;
        let every = Reflect::get(option, &"everyMinutes".into()).unwrap_or(JsValue::UNDEFINED);
        let minutes = match every.as_f64() {
            None if every.is_undefined() => DEFAULT_EVERY_MINUTES,
            Some(m) if m.is_finite() && m > 0.0 => m,
            _ => return Err(Error::invalid("`sync.everyMinutes` must be a positive number")),
        };
        let options = js_sys::Object::assign(&js_sys::Object::new(), option.unchecked_ref());
        let _ = Reflect::delete_property(&options, &"everyMinutes".into());
        let options: JsValue = options.into();
        parse_sync_options(&options)?;
        Ok(Some((options, minutes * 60_000.0)))
    }

    pub(super) fn new(
        shared: Shared,
        jobs: JobRunner,
        on_progress: Option<Function>,
        background: Option<(JsValue, f64)>,
    ) -> Self {
        let background = background.map(|(options, every_ms)| Rc::new(BackgroundSync { options, every_ms }));
        SyncRunner { shared, jobs, on_progress, background, in_flight: Default::default() }
    }

    /// Starts the background syncs, when the open asked for them.
    pub(super) fn start(&self) {
        let Some(background) = self.background.clone() else { return };
        let me = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            loop {
                match me.run(&background.options, None).await {
                    Ok(_) => {}
                    Err(Error::Closed) => break,
                    Err(e) => progress_with(&me.on_progress, "sync", None, &[("error", js_error(e))]),
                }
                if sleep(background.every_ms, me.shared.closing()).await.is_err() {
                    break;
                }
            }
        });
    }

    /// One sync with `options` (`undefined`: the open's `sync` option), after the one in flight.
    pub(super) async fn run(
        &self,
        options: &JsValue,
        signal: Option<AbortSignal>,
    ) -> Result<memory::SyncApplied, Error> {
        let options = match (options.is_undefined() || options.is_null(), &self.background) {
            (false, _) => options.clone(),
            (true, Some(b)) => b.options.clone(),
            (true, None) => {
                return Err(Error::invalid("sync needs { remote, passphrase | key } (or a `sync` option at open)"))
            }
        };
        let (remote, source) = parse_sync_options(&options)?;
        while self.in_flight.get() {
            sleep(50.0, self.shared.closing()).await?;
        }
        self.in_flight.set(true);
        let result = self.run_one(remote, source, signal).await;
        self.in_flight.set(false);
        result
    }

    async fn run_one(
        &self,
        remote: RemoteOptions,
        source: KeySource,
        signal: Option<AbortSignal>,
    ) -> Result<memory::SyncApplied, Error> {
        let check = || signal.as_ref().map_or(Ok(()), |s| s.check());
        let shared = &self.shared;
        let server = WebDav::new(&remote.url, remote.authorization, Fetch);
        let key = sync::connect(&server, &SyncUnlock(source)).await?;
        let cipher: &dyn Cipher = &key;
        sync::check_key(&server, cipher).await?;
        check()?;
        let outgoing = shared.lock().await?.sync_outgoing(|| device_id().unwrap_or_default()).await?;
        if outgoing.device.is_empty() {
            return Err(Error::Unsupported("WebCrypto is missing: sync needs it".into()));
        }
        let ops_sent: usize = outgoing.segments.iter().map(|s| s.ops.len()).sum();
        progress_with(&self.on_progress, "sync", Some("sending"), &[("ops", (ops_sent as u32).into())]);
        let last = sync::send_segments(&server, cipher, &outgoing.segments).await?;
        shared.lock().await?.sync_sent(last).await?;
        check()?;
        progress_with(&self.on_progress, "sync", Some("receiving"), &[]);
        let fetched = sync::fetch_segments(&server, cipher, &outgoing.merged, &outgoing.device).await?;
        check()?;
        let mut applied = shared.lock().await?.sync_merge(fetched).await?;
        applied.ops_sent = ops_sent;
        self.jobs.start(); // distillation of what came in goes on after this resolves
        let report = to_js(&applied).map_err(|_| Error::invalid("encoding the sync report"))?;
        progress_with(&self.on_progress, "sync", Some("done"), &[("report", report)]);
        Ok(applied)
    }
}

/// The folder and the key of a sync's options.
fn parse_sync_options(options: &JsValue) -> Result<(RemoteOptions, KeySource), Error> {
    if !options.is_object() {
        return Err(Error::invalid("sync takes { remote, passphrase | key, signal? }"));
    }
    let field = |k: &str| Reflect::get(options, &k.into()).unwrap_or(JsValue::UNDEFINED);
    let remote = remote_options(&field("remote"))?;
    let source = match (field("passphrase"), field("key")) {
        (p, k) if k.is_undefined() && p.is_string() => KeySource::from_js(&p, "the sync passphrase")?,
        (p, k) if p.is_undefined() && k.dyn_ref::<web_sys::CryptoKey>().is_some() => {
            KeySource::from_js(&k, "the sync key")?
        }
        _ => return Err(Error::invalid("sync needs exactly one of `passphrase` (a string) and `key` (a CryptoKey)")),
    };
    Ok((remote, source))
}

impl Leader {
    pub fn sync(&self, options: JsValue) -> js_sys::Promise {
        let runner = self.sync.clone();
        super::spawn(async move {
            if !(options.is_undefined() || options.is_null()) {
                check_keys(&options, &["remote", "passphrase", "key", "signal"], "sync options")?;
            }
            let signal = if options.is_object() { abort_signal(&options)? } else { None };
            let applied = runner.run(&options, signal).await?;
            to_js(&applied).map_err(|_| Error::invalid("encoding the sync report"))
        })
    }
}
