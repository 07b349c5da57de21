//! The browser [`Store`]: IndexedDB through the `idb` crate. One database per memory (`loci:<name>`); every write is
//! one readwrite transaction (turns, units, vectors, deletions and distillation together).
//!
//! Open must not read one record per turn or per unit: structured-cloning 300k small records alone takes seconds.
//! So (schema 4) turns and units live in chunk records, as the vectors do:
//! - `vectors` (key = `unit id / VECTOR_CHUNK`): the units of up to [`VECTOR_CHUNK`] ids, each `{ dim, ids:
//!   Uint32Array, rows: Uint32Array, scales: Float32Array, codes: Int8Array, units: string }`, the vectors packed as
//!   int8 (binary, never JSON) and `units` one JSON array of `[session, turnIds]`, aligned with `ids`;
//! - `turnChunks` (key = `turn id / TURN_CHUNK`): up to [`TURN_CHUNK`] turns in id order, their fields in binary
//!   columns and their texts as one LZ4 block ([`turn_chunk`], schema 5; schema 4 stored a JSON array, still read).
//!
//! Open reads everything with eight `get`/`getAll` requests, however many units there are, and decodes a chunk with
//! one `serde_json` parse. A write reads and rewrites, inside its own transaction, only the chunks whose turns or
//! units it adds or deletes. Sessions stay one record each (one per conversation, not per turn).
//!
//! Distillation (schema 3) adds three stores keyed by `id` — `episodes`, `facts`, `jobs` (episode and fact vectors
//! as packed f32 `Uint8Array`s) — and a `distill` record beside `meta` in the `meta` store (id counters and the
//! segmentation buffer).
//!
//! Migrations, on open: the IndexedDB upgrade creates the stores a database lacks; a database of schema 1–3 (one
//! record per turn in `turns`, per unit in `units`; in schema 1 each unit record also carries its vectors as a
//! `Float32Array`) is rewritten into chunks, and the old stores emptied, in one transaction.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use async_trait::async_trait;
use futures::future::join_all;
use idb::request::GetStoreRequest;
use idb::{Database, KeyPath, ObjectStore, Query, TransactionMode};
use js_sys::{Float32Array, Int8Array, Object, Reflect, Uint32Array, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use super::seal::{KeySource, Sealer};
use super::{
    to_json, turn_chunk, Meta, Quarantined, RowBlock, Rows, Snapshot, Store, StoredUnit, WriteBatch, WritePieces,
    SCHEMA_VERSION, TURN_CHUNK, VECTOR_CHUNK,
};
use crate::embed::DIM;
use crate::error::{Error, Result};
use crate::sort;
use crate::types::bytes::{u32s, ByteReader};
use crate::types::distilled::{DistillMeta, DistillRecords, DistillWrite, Episode, Fact, Job};
use crate::types::{Session, Turn, Turns, Unit};

/// IndexedDB version: 1 had four stores, 2 added `vectors`, 3 the distillation stores, 4 `turnChunks`.
const DB_VERSION: u32 = 5;
/// Schema 4 differs from 5 only in how turn chunks are written, and both forms read: a schema 4 memory opens as it
/// is, reported as schema 5, and its meta record says so from its next write. (Nothing is written at load: a
/// follower tab's load must not race the leader's meta.) An older loci meets `DB_VERSION` 5 and refuses the
/// database rather than misreading the chunks it holds.
const SCHEMA_4: u32 = 4;
/// Sealed chunks opened together at load: WebCrypto decrypts them concurrently, and a group's plaintexts are decoded
/// and dropped before the next group is opened (all ~200 vector chunks of a 100k-unit memory opened at once held
/// about 40 MB more at the open's peak).
const OPEN_GROUP: usize = 16;
const META: &str = "meta";
const SESSIONS: &str = "sessions";
/// Schema 1–3: one record per turn / per unit (read only to migrate; empty afterwards).
const TURNS: &str = "turns";
const UNITS: &str = "units";
const TURN_CHUNKS: &str = "turnChunks";
const VECTORS: &str = "vectors";
const EPISODES: &str = "episodes";
const FACTS: &str = "facts";
const JOBS: &str = "jobs";
const ALL: [&str; 9] = [META, SESSIONS, TURNS, UNITS, TURN_CHUNKS, VECTORS, EPISODES, FACTS, JOBS];
/// Keys in the `meta` store.
const META_KEY: &str = "meta";
const DISTILL_KEY: &str = "distill";
/// The lexical index as the last open built it (see `Store::put_lexical`), in `meta`.
const LEXICAL_KEY: &str = "lexical";
/// The memory's sync record (feature `sync`: its log and turn map, see `memory/sync.rs`), in `meta`.
#[cfg(feature = "sync")]
const SYNC_KEY: &str = "sync";
/// The key record of an encrypted memory (plaintext: how to unlock it; see [`super::seal`]).
const KEY_KEY: &str = "key";
/// A damaged chunk that a write has to rewrite is first copied aside under this key prefix (see `set_aside`), so
/// that nothing is deleted without the user asking.
const QUARANTINE_PREFIX: &str = "quarantine:";

/// A record's key for a report: its `id` field, or the key it is stored under.
fn key_text(v: &JsValue) -> String {
    v.as_string().or_else(|| v.as_f64().map(|n| n.to_string())).unwrap_or_else(|| format!("{v:?}"))
}

/// Decodes each record of a store, setting aside (into `quarantined`) those that do not decode.
fn decode_each<T: serde::de::DeserializeOwned>(
    records: Vec<JsValue>,
    store: &str,
    what: &str,
    quarantined: &mut Vec<Quarantined>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        match de::<T>(r.clone(), what) {
            Ok(v) => out.push(v),
            Err(e) => quarantined.push(Quarantined {
                store: store.into(),
                key: Reflect::get(&r, &"id".into()).map(|k| key_text(&k)).unwrap_or_default(),
                reason: e.to_string(),
            }),
        }
    }
    out
}

/// How long `delete` waits on a connection that blocks it before it says so.
pub const DELETE_BLOCKED_MS: i32 = 3_000;

/// Resolves after `ms` milliseconds (`setTimeout`: pages and workers; at once where there is none). Also the
/// embedder's yield to the page between two model calls.
pub(crate) async fn timeout(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let set_timeout = Reflect::get(&js_sys::global(), &"setTimeout".into()).ok();
        match set_timeout.as_ref().and_then(|f| f.dyn_ref::<js_sys::Function>()) {
            Some(f) => {
                let _ = f.call2(&JsValue::NULL, &resolve, &JsValue::from(ms));
            }
            None => {
                let _ = resolve.call0(&JsValue::NULL);
            }
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// Maps an IndexedDB failure to loci's error, recognising the quota case (the `idb` crate's errors carry the
/// DOMException's name in their text).
fn idb_err(context: &str, e: impl std::fmt::Display) -> Error {
    let msg = format!("{context}: {e}");
    if msg.contains("QuotaExceeded") || msg.to_lowercase().contains("quota") {
        Error::QuotaExceeded(msg)
    } else {
        Error::Storage(msg)
    }
}

/// The `name` of a DOMException (or any error object).
fn dom_name(e: &JsValue) -> Option<String> {
    Reflect::get(e, &"name".into()).ok()?.as_string()
}

/// Maps a DOMException to loci's error by its name.
fn dom_error(context: &str, e: &JsValue) -> Error {
    let name = dom_name(e).unwrap_or_default();
    let message = Reflect::get(e, &"message".into()).ok().and_then(|m| m.as_string()).unwrap_or_default();
    let msg = format!("{context}: {name}: {message}");
    match name.as_str() {
        "QuotaExceededError" => Error::QuotaExceeded(msg),
        _ => Error::Storage(msg),
    }
}

fn ser<T: serde::Serialize>(v: &T) -> Result<JsValue> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| Error::Storage(format!("encoding a record: {e}")))
}

fn de<T: serde::de::DeserializeOwned>(v: JsValue, what: &str) -> Result<T> {
    serde_wasm_bindgen::from_value(v).map_err(|e| Error::Storage(format!("a stored {what} is damaged: {e}")))
}

/// Why a connection was lost, as [`ConnectionWatch`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Another tab opened a newer schema of this database, or is deleting it: this connection closed itself so
    /// that the other can go ahead (otherwise both would wait: the upgrade or delete is `blocked` until we close).
    VersionChange,
    /// The browser closed it (the user cleared site data, or the storage failed).
    ClosedByBrowser,
}

impl Lost {
    pub fn as_str(self) -> &'static str {
        match self {
            Lost::VersionChange => "versionchange",
            Lost::ClosedByBrowser => "closed-by-browser",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Lost::VersionChange => "another tab is upgrading or deleting this memory's database; open it again",
            Lost::ClosedByBrowser => {
                "the browser closed this memory's database (site data cleared or a storage failure)"
            }
        }
    }
}

/// The owner's listener, called once.
type LostHook = Box<dyn FnOnce(Lost)>;

/// Tells the memory's owner that its connection is gone, once. The events arrive on the database connection at any
/// time; the owner (the web layer) subscribes after open, and learns of a loss that came first at once.
#[derive(Clone, Default)]
pub struct ConnectionWatch {
    lost: Rc<Cell<Option<Lost>>>,
    hook: Rc<RefCell<Option<LostHook>>>,
}

impl ConnectionWatch {
    pub fn lost(&self) -> Option<Lost> {
        self.lost.get()
    }

    /// Runs `f` when the connection is lost (now, if it already is).
    pub fn on_lost(&self, f: impl FnOnce(Lost) + 'static) {
        match self.lost.get() {
            Some(reason) => f(reason),
            None => *self.hook.borrow_mut() = Some(Box::new(f)),
        }
    }

    fn fire(&self, reason: Lost) {
        if self.lost.get().is_some() {
            return;
        }
        self.lost.set(Some(reason));
        let hook = self.hook.borrow_mut().take();
        if let Some(f) = hook {
            f(reason);
        }
    }
}

/// How a write transaction commits (IndexedDB's `durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Committed means flushed to disk: an acknowledged write survives a power loss or an OS crash. The default.
    #[default]
    Strict,
    /// Committed means handed to the OS (Chrome's default since 121): survives a tab or browser crash, not a power
    /// loss or an OS crash in the seconds after.
    Relaxed,
}

impl Durability {
    fn as_str(self) -> &'static str {
        match self {
            Durability::Strict => "strict",
            Durability::Relaxed => "relaxed",
        }
    }
}

/// One connection to the database.
struct Connection {
    db: Database,
    /// The same connection as web-sys sees it: the `idb` crate's `transaction` takes no durability option.
    raw: web_sys::IdbDatabase,
}

/// An IndexedDB-backed memory.
pub struct IdbStore {
    /// Replaced when the connection was closed under the memory (by other code): see [`IdbStore::write`].
    conn: RefCell<Connection>,
    durability: Durability,
    name: String,
    /// Vector dimension: the model's, or the stored meta's once seen (tests store tiny vectors).
    dim: Cell<usize>,
    watch: ConnectionWatch,
    /// Set when the memory is encrypted: every record is sealed (see [`super::seal`]).
    sealer: Option<Sealer>,
    /// The key record of an encrypted memory, put back after a `clear` (it is not content).
    key_record: RefCell<Option<JsValue>>,
    /// Encrypted writes read their chunks in one transaction and write them in another (WebCrypto's promises would
    /// let a single transaction commit half-way): one write at a time keeps that read-modify-write atomic.
    write_gate: futures::lock::Mutex<()>,
}

impl IdbStore {
    /// The IndexedDB database name for a memory name.
    pub fn database_name(name: &str) -> String {
        format!("loci:{name}")
    }

    /// Opens (creating on first use, adding the object stores an older database lacks) the database of memory `name`.
    pub async fn open(name: &str) -> Result<Self> {
        Self::open_with(name, Durability::default(), None).await
    }

    /// [`open`](Self::open) with the durability of its writes, and the key of an encrypted memory: a new memory
    /// opened with a key is created encrypted; an encrypted one needs its key (`BAD_KEY` otherwise, and for a
    /// wrong one); a memory stored in plaintext is not encrypted by opening it with a key (`INVALID_INPUT`: export
    /// it and import it into a new, encrypted memory).
    pub async fn open_with(name: &str, durability: Durability, encryption: Option<&KeySource>) -> Result<Self> {
        let watch = ConnectionWatch::default();
        let conn = Self::connect(name, &watch).await?;
        let unlocked = Self::unlock(&conn, name, encryption, true).await;
        let (sealer, key_record) = match unlocked {
            Ok(Some((sealer, record))) => (Some(sealer), Some(record)),
            Ok(None) => (None, None),
            Err(e) => {
                conn.db.close();
                return Err(e);
            }
        };
        Ok(IdbStore {
            conn: RefCell::new(conn),
            durability,
            name: name.to_string(),
            dim: Cell::new(DIM),
            watch,
            sealer,
            key_record: RefCell::new(key_record),
            write_gate: Default::default(),
        })
    }

    /// Checks, without keeping the database open, that `encryption` is what memory `name` needs (a tab that
    /// follows another opens nothing itself, but a wrong key must still be refused there).
    pub async fn check_key(name: &str, encryption: Option<&KeySource>) -> Result<()> {
        let conn = Self::connect(name, &ConnectionWatch::default()).await?;
        let checked = Self::unlock(&conn, name, encryption, false).await;
        conn.db.close();
        checked.map(|_| ())
    }

    /// Reads the key record and whether the memory holds anything: the sealer (and key record) of an encrypted
    /// memory, created for a new one when `create`.
    async fn unlock(
        conn: &Connection,
        name: &str,
        encryption: Option<&KeySource>,
        create: bool,
    ) -> Result<Option<(Sealer, JsValue)>> {
        let database = Self::database_name(name);
        let tx = conn.db.transaction(&[META], TransactionMode::ReadOnly).map_err(|e| idb_err("reading", e))?;
        let meta = Self::store(&tx, META)?;
        let key_req = meta.get(JsValue::from_str(KEY_KEY)).map_err(|e| idb_err("reading the key", e))?;
        let meta_req = meta.get(JsValue::from_str(META_KEY)).map_err(|e| idb_err("reading meta", e))?;
        let key = key_req.await.map_err(|e| idb_err("reading the key", e))?.filter(|k| !k.is_undefined());
        let has_meta = meta_req.await.map_err(|e| idb_err("reading meta", e))?.is_some_and(|m| !m.is_undefined());
        match (key, encryption) {
            (Some(record), Some(source)) => Ok(Some((Sealer::unlock(source, &database, &record).await?, record))),
            (Some(_), None) => Err(Error::BadKey(format!(
                "memory {name:?} is encrypted: open it with `encryption: {{ passphrase }}` or `{{ key }}`"
            ))),
            (None, Some(_)) if has_meta => Err(Error::invalid(format!(
                "memory {name:?} is stored unencrypted, and opening it with a key does not encrypt it: export it \
                 and import the export into a new memory opened with `encryption`"
            ))),
            (None, Some(source)) if create => {
                let (sealer, record) = Sealer::create(source, &database).await?;
                let tx = conn.db.transaction(&[META], TransactionMode::ReadWrite).map_err(|e| idb_err("writing", e))?;
                Self::store(&tx, META)?
                    .put(&record, Some(&JsValue::from_str(KEY_KEY)))
                    .map_err(|e| idb_err("writing the key", e))?;
                let done = tx.await.map_err(|e| idb_err("writing the key", e))?;
                if !done.is_committed() {
                    return Err(Error::Storage("writing the key: the transaction was aborted".into()));
                }
                Ok(Some((sealer, record)))
            }
            (None, _) => Ok(None),
        }
    }

    /// Whether the memory is encrypted.
    pub fn is_encrypted(&self) -> bool {
        self.sealer.is_some()
    }

    /// Re-wraps an encrypted memory's key for `next` once `current` opens it (`BAD_KEY` otherwise): one record in
    /// one transaction, so an interruption leaves the memory opening with `current`, and a commit with `next`.
    pub async fn change_key(&self, current: &KeySource, next: &KeySource) -> Result<()> {
        let Some(record) = self.key_record.borrow().clone() else {
            return Err(Error::invalid(format!("memory {:?} is not encrypted", self.name)));
        };
        let _gate = self.write_gate.lock().await;
        let rewrapped = Sealer::rewrap(&record, current, next, &Self::database_name(&self.name)).await?;
        let (tx, raw) = self.write_transaction("changing the key").await?;
        Self::store(&tx, META)?
            .put(&rewrapped, Some(&JsValue::from_str(KEY_KEY)))
            .map_err(|e| idb_err("writing the key", e))?;
        Self::commit(tx, &raw, "changing the key").await?;
        *self.key_record.borrow_mut() = Some(rewrapped);
        Ok(())
    }

    /// Opens a connection whose `versionchange` and `close` events go to `watch`.
    async fn connect(name: &str, watch: &ConnectionWatch) -> Result<Connection> {
        let db = Database::builder(&Self::database_name(name))
            .version(DB_VERSION)
            .add_object_store(idb::builder::ObjectStoreBuilder::new(META))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(SESSIONS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(TURNS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(UNITS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(VECTORS))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(TURN_CHUNKS))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(EPISODES).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(FACTS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(JOBS).key_path(Some(KeyPath::new_single("id"))))
            .build()
            .await
            .map_err(|e| match e {
                idb::Error::DomException(ref d) if d.name() == "VersionError" => {
                    Error::SchemaMismatch(format!("database {} was written by a newer loci", Self::database_name(name)))
                }
                e => idb_err("opening IndexedDB", e),
            })?;
        let raw: web_sys::IdbDatabase = db.into();
        let mut db = Database::from(raw.clone());
        let on_change = watch.clone();
        db.on_version_change(move |event| {
            // Close at once: the other tab's upgrade or delete waits (`blocked`) until every connection closes.
            if let Ok(close) =
                Reflect::get(&Reflect::get(&event, &"target".into()).unwrap_or_default(), &"close".into())
            {
                if let Some(close) = close.dyn_ref::<js_sys::Function>() {
                    let _ = close.call0(&Reflect::get(&event, &"target".into()).unwrap_or_default());
                }
            }
            on_change.fire(Lost::VersionChange);
        });
        let on_close = watch.clone();
        db.on_close(move |_| on_close.fire(Lost::ClosedByBrowser));
        Ok(Connection { db, raw })
    }

    /// A readwrite transaction over every store, committing with this store's [`Durability`], and the same
    /// transaction as a plain JS object (for its `error` after an abort). A connection closed under the memory —
    /// by other code on the page, with no `close` event — is opened again once, unless it was lost for good
    /// ([`ConnectionWatch`]: then the memory is closing).
    async fn write_transaction(&self, context: &str) -> Result<(idb::Transaction, JsValue)> {
        match self.begin_write() {
            Err(e) if dom_name(&e).as_deref() == Some("InvalidStateError") && self.watch.lost().is_none() => {
                let fresh = Self::connect(&self.name, &self.watch).await?;
                *self.conn.borrow_mut() = fresh;
                self.begin_write().map_err(|e| dom_error(context, &e))
            }
            r => r.map_err(|e| dom_error(context, &e)),
        }
    }

    fn begin_write(&self) -> std::result::Result<(idb::Transaction, JsValue), JsValue> {
        let names: js_sys::Array = ALL.iter().map(|s| JsValue::from(*s)).collect();
        let options = Object::new();
        let _ = Reflect::set(&options, &"durability".into(), &self.durability.as_str().into());
        let raw = self.conn.borrow().raw.clone();
        let transaction = Reflect::get(&raw, &"transaction".into())?.dyn_into::<js_sys::Function>()?;
        let tx = transaction.call3(&raw, &names, &"readwrite".into(), &options)?;
        Ok((idb::Transaction::from(tx.clone().unchecked_into::<web_sys::IdbTransaction>()), tx))
    }

    /// Awaits a write transaction: `Ok` once committed; an abort is an error typed by the transaction's own
    /// `error` (`QuotaExceededError` → `QUOTA_EXCEEDED`), so a quota never hides behind a generic failure.
    async fn commit(tx: idb::Transaction, raw: &JsValue, context: &str) -> Result<()> {
        let result = tx.await.map_err(|e| idb_err(context, e))?;
        if result.is_committed() {
            return Ok(());
        }
        match Reflect::get(raw, &"error".into()).ok().filter(|e| !e.is_null() && !e.is_undefined()) {
            Some(error) => Err(dom_error(&format!("{context}: the transaction was aborted"), &error)),
            None => Err(Error::Storage(format!("{context}: the transaction was aborted"))),
        }
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Names the chunks that did not decode at load (store, position in `getAll` order, reason) by their keys: one
    /// more read, only when something is damaged.
    async fn name_damaged(&self, damaged: Vec<(&str, usize, String)>) -> Result<Vec<Quarantined>> {
        if damaged.is_empty() {
            return Ok(Vec::new());
        }
        let tx = self
            .conn
            .borrow()
            .db
            .transaction(&[TURN_CHUNKS, VECTORS], TransactionMode::ReadOnly)
            .map_err(|e| idb_err("reading", e))?;
        let keys_of = |name: &str| {
            Self::store(&tx, name)?.get_all_keys(None, None).map_err(|e| idb_err(&format!("reading {name}"), e))
        };
        let (turn_keys, vector_keys) = (keys_of(TURN_CHUNKS)?, keys_of(VECTORS)?);
        let turn_keys = turn_keys.await.map_err(|e| idb_err("reading turns", e))?;
        let vector_keys = vector_keys.await.map_err(|e| idb_err("reading vectors", e))?;
        Ok(damaged
            .into_iter()
            .map(|(store, i, reason)| {
                let keys = if store == TURN_CHUNKS { &turn_keys } else { &vector_keys };
                let key = keys.get(i).map(key_text).unwrap_or_default();
                let reason = match key.starts_with(QUARANTINE_PREFIX) {
                    true => format!("copied aside before its slot was rewritten: {reason}"),
                    false => reason,
                };
                Quarantined { store: store.into(), key, reason }
            })
            .collect())
    }

    /// What tells the owner that this connection was lost.
    pub fn watch(&self) -> ConnectionWatch {
        self.watch.clone()
    }

    /// Deletes the whole database of memory `name`. A memory open on it (in this tab or another) closes itself on
    /// the request's `versionchange`; a connection that does not (an older loci, other code) blocks the deletion:
    /// after [`DELETE_BLOCKED_MS`] of that, a `BLOCKED_BY_OTHER_TAB` error says so rather than wait for ever
    /// (IndexedDB keeps the deletion queued: it happens when that connection closes).
    pub async fn delete(name: &str) -> Result<()> {
        let factory = idb::Factory::new().map_err(|e| idb_err("IndexedDB unavailable", e))?;
        let mut request =
            factory.delete(&Self::database_name(name)).map_err(|e| idb_err("deleting the database", e))?;
        let (blocked_tx, blocked_rx) = futures::channel::oneshot::channel::<()>();
        let blocked_tx = RefCell::new(Some(blocked_tx));
        request.on_blocked(move |_| {
            if let Some(tx) = blocked_tx.borrow_mut().take() {
                let _ = tx.send(());
            }
        });
        let gave_up = async move {
            if blocked_rx.await.is_err() {
                return futures::future::pending().await; // never blocked: the deletion decides
            }
            timeout(DELETE_BLOCKED_MS).await
        };
        futures::pin_mut!(gave_up);
        let done = std::future::IntoFuture::into_future(request);
        futures::pin_mut!(done);
        match futures::future::select(done, gave_up).await {
            futures::future::Either::Left((done, _)) => done.map_err(|e| idb_err("deleting the database", e)),
            futures::future::Either::Right(_) => Err(Error::BlockedByOtherTab(format!(
                "memory {name:?} is held open elsewhere by a connection that does not close for a deletion; close \
                 that tab (the deletion stays queued and happens then)"
            ))),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the connection (pending transactions finish first).
    pub fn close(&self) {
        self.conn.borrow().db.close();
    }

    fn store(tx: &idb::Transaction, name: &str) -> Result<ObjectStore> {
        tx.object_store(name).map_err(|e| idb_err("opening an object store", e))
    }

    /// Queues all of `batch` into `tx` (reading the turn and vector chunks it touches); the caller commits or aborts.
    async fn queue_write(&self, tx: &idb::Transaction, batch: &WriteBatch) -> Result<()> {
        // Refuse a damaged batch before anything is queued.
        let dim = self.batch_dim(batch)?;
        // The chunks this batch touches are read first, inside this transaction; every request is queued before the
        // first is awaited.
        let (turn_chunks, unit_chunks) = touched_chunks(batch);
        let turn_store = Self::store(tx, TURN_CHUNKS)?;
        let vectors = Self::store(tx, VECTORS)?;
        let mut turn_reads = Vec::with_capacity(turn_chunks.len());
        for &c in &turn_chunks {
            let req = turn_store.get(Query::Key(JsValue::from(c as f64))).map_err(|e| idb_err("reading turns", e))?;
            turn_reads.push((c, req));
        }
        let mut unit_reads = Vec::with_capacity(unit_chunks.len());
        for &c in &unit_chunks {
            unit_reads.push((c, vectors.get(Query::Key(JsValue::from(c))).map_err(|e| idb_err("reading vectors", e))?));
        }

        if let Some(meta) = &batch.meta {
            Self::store(tx, META)?
                .put(&ser(meta)?, Some(&JsValue::from_str(META_KEY)))
                .map_err(|e| idb_err("writing meta", e))?;
        }
        #[cfg(feature = "sync")]
        if let Some(sync) = &batch.sync {
            Self::store(tx, META)?
                .put(&Uint8Array::from(sync.as_slice()), Some(&JsValue::from_str(SYNC_KEY)))
                .map_err(|e| idb_err("writing the sync record", e))?;
        }
        if deletes(batch) {
            Self::store(tx, META)?
                .delete(Query::Key(JsValue::from_str(LEXICAL_KEY)))
                .map_err(|e| idb_err("writing meta", e))?;
        }
        let sessions = Self::store(tx, SESSIONS)?;
        for s in &batch.sessions {
            sessions.put(&ser(s)?, None).map_err(|e| idb_err("writing a session", e))?;
        }
        // Deletions after the puts, as MemStore applies them.
        for id in &batch.delete_sessions {
            sessions.delete(Query::Key(JsValue::from_str(id))).map_err(|e| idb_err("deleting a session", e))?;
        }
        write_distill(tx, &batch.distill)?;

        // Turns: puts, then deletions, into the touched chunks.
        let mut turns: BTreeMap<u64, BTreeMap<u64, Turn>> = BTreeMap::new();
        for (c, req) in turn_reads {
            let record = req.await.map_err(|e| idb_err("reading turns", e))?;
            let chunk = match turns_from_js(record.clone()) {
                Ok(chunk) => chunk,
                Err(_) => {
                    set_aside(tx, TURN_CHUNKS, &(c as f64).to_string(), record)?;
                    BTreeMap::new()
                }
            };
            turns.insert(c, chunk);
        }
        merge_turns(&mut turns, batch);
        for (n, chunk) in &turns {
            let key = JsValue::from(*n as f64);
            if chunk.is_empty() {
                turn_store.delete(Query::Key(key)).map_err(|e| idb_err("writing turns", e))?;
            } else {
                let bytes = Uint8Array::from(turn_chunk::encode(chunk.values())?.as_slice());
                turn_store.put(&bytes, Some(&key)).map_err(|e| idb_err("writing turns", e))?;
            }
        }

        // Units and their vectors: deletions, then puts, into the touched chunks.
        let mut chunks: BTreeMap<u32, Chunk> = BTreeMap::new();
        for (c, req) in unit_reads {
            let record = req.await.map_err(|e| idb_err("reading vectors", e))?;
            let chunk = match record {
                Some(r) if !r.is_undefined() => match Chunk::from_js(&r) {
                    Ok(chunk) if chunk.dim == dim => chunk,
                    _ => {
                        set_aside(tx, VECTORS, &c.to_string(), Some(r))?;
                        Chunk::new(dim)
                    }
                },
                _ => Chunk::new(dim),
            };
            chunks.insert(c, chunk);
        }
        merge_units(&mut chunks, batch, dim);
        for (n, chunk) in &chunks {
            let key = JsValue::from(*n);
            if chunk.units.is_empty() {
                vectors.delete(Query::Key(key)).map_err(|e| idb_err("writing vectors", e))?;
            } else {
                vectors.put(&chunk.to_js()?, Some(&key)).map_err(|e| idb_err("writing vectors", e))?;
            }
        }
        Ok(())
    }

    /// Checks a batch's vectors against the dimension (before anything is queued), and returns that dimension.
    fn batch_dim(&self, batch: &WriteBatch) -> Result<usize> {
        let dim = batch.meta.as_ref().map(|m| m.dim as usize).unwrap_or(self.dim.get());
        for u in &batch.units {
            if !u.vectors.is_whole(dim) {
                return Err(Error::Storage(format!("unit {} has a damaged vector", u.unit.id)));
            }
        }
        self.dim.set(dim);
        Ok(dim)
    }

    /// An encrypted write. WebCrypto is asynchronous, and an IndexedDB transaction commits as soon as it waits on
    /// anything else, so: the chunks the batch touches are read in one transaction, opened, merged, and everything
    /// is sealed; then one readwrite transaction queues every put and delete at once (all of it or none of it, as
    /// for a plaintext write). `write_gate` keeps another write from slipping in between.
    async fn write_sealed(&self, sealer: &Sealer, batch: &WriteBatch) -> Result<()> {
        let _gate = self.write_gate.lock().await;
        let dim = self.batch_dim(batch)?;
        let (turn_chunks, unit_chunks) = touched_chunks(batch);
        let (turn_records, unit_records) = {
            let tx = self
                .conn
                .borrow()
                .db
                .transaction(&[TURN_CHUNKS, VECTORS], TransactionMode::ReadOnly)
                .map_err(|e| idb_err("reading", e))?;
            let (turn_store, vectors) = (Self::store(&tx, TURN_CHUNKS)?, Self::store(&tx, VECTORS)?);
            let mut turn_reads = Vec::new();
            for &c in &turn_chunks {
                let req = turn_store.get(JsValue::from(c as f64)).map_err(|e| idb_err("reading turns", e))?;
                turn_reads.push((c, req));
            }
            let mut unit_reads = Vec::new();
            for &c in &unit_chunks {
                unit_reads.push((c, vectors.get(JsValue::from(c)).map_err(|e| idb_err("reading vectors", e))?));
            }
            let mut turn_records = Vec::new();
            for (c, req) in turn_reads {
                turn_records
                    .push((c, req.await.map_err(|e| idb_err("reading turns", e))?.filter(|r| !r.is_undefined())));
            }
            let mut unit_records = Vec::new();
            for (c, req) in unit_reads {
                unit_records
                    .push((c, req.await.map_err(|e| idb_err("reading vectors", e))?.filter(|r| !r.is_undefined())));
            }
            (turn_records, unit_records)
        };

        let mut ops: Vec<Op> = Vec::new();
        let put = |store: &'static str, key: Option<JsValue>, value: JsValue| Op::Put { store, key, value };
        if let Some(meta) = &batch.meta {
            let sealed = sealer.seal(META, META_KEY, &to_json(meta)?).await?;
            ops.push(put(META, Some(META_KEY.into()), sealed.into()));
        }
        #[cfg(feature = "sync")]
        if let Some(sync) = &batch.sync {
            ops.push(put(META, Some(SYNC_KEY.into()), sealer.seal(META, SYNC_KEY, sync).await?.into()));
        }
        if deletes(batch) {
            ops.push(Op::Delete { store: META, key: LEXICAL_KEY.into() });
        }
        for s in &batch.sessions {
            let id = sealer.hash_id(&s.id).await?;
            ops.push(put(SESSIONS, None, keyed(&id.clone().into(), sealer.seal(SESSIONS, &id, &to_json(s)?).await?)));
        }
        for id in &batch.delete_sessions {
            ops.push(Op::Delete { store: SESSIONS, key: sealer.hash_id(id).await?.into() });
        }
        let d = &batch.distill;
        if let Some(m) = &d.meta {
            ops.push(put(META, Some(DISTILL_KEY.into()), sealer.seal(META, DISTILL_KEY, &to_json(m)?).await?.into()));
        }
        for (store, ids) in [(EPISODES, &d.delete_episodes), (FACTS, &d.delete_facts), (JOBS, &d.delete_jobs)] {
            ops.extend(ids.iter().map(|&id| Op::Delete { store, key: JsValue::from(id as f64) }));
        }
        let numbered = d.episodes.iter().map(|e| (EPISODES, e.id, to_json(e)));
        let numbered = numbered.chain(d.facts.iter().map(|f| (FACTS, f.id, to_json(f))));
        let numbered: Vec<_> = numbered.chain(d.jobs.iter().map(|j| (JOBS, j.id, to_json(j)))).collect();
        for (store, id, plain) in numbered {
            let sealed = sealer.seal(store, &id.to_string(), &plain?).await?;
            ops.push(put(store, None, keyed(&JsValue::from(id as f64), sealed)));
        }

        let mut turns: BTreeMap<u64, BTreeMap<u64, Turn>> = BTreeMap::new();
        for (c, record) in turn_records {
            let key = c.to_string();
            let chunk = match &record {
                None => BTreeMap::new(),
                Some(r) => match sealer.open(TURN_CHUNKS, &key, r).await.and_then(|b| turn_chunk::decode(&b)) {
                    Ok(turns) => crate::sort::map_from(turns.into_iter().map(|t| (t.id, t))),
                    Err(_) => {
                        ops.push(aside(TURN_CHUNKS, &key, r));
                        BTreeMap::new()
                    }
                },
            };
            turns.insert(c, chunk);
        }
        merge_turns(&mut turns, batch);
        for (n, chunk) in &turns {
            let key = JsValue::from(*n as f64);
            match chunk.is_empty() {
                true => ops.push(Op::Delete { store: TURN_CHUNKS, key }),
                false => {
                    let sealed = sealer.seal(TURN_CHUNKS, &n.to_string(), &turn_chunk::encode(chunk.values())?).await?;
                    ops.push(put(TURN_CHUNKS, Some(key), sealed.into()));
                }
            }
        }
        let mut chunks: BTreeMap<u32, Chunk> = BTreeMap::new();
        for (c, record) in unit_records {
            let key = c.to_string();
            let chunk = match &record {
                None => Chunk::new(dim),
                Some(r) => match sealer.open(VECTORS, &key, r).await.and_then(|b| Chunk::from_bytes(&b)) {
                    Ok(chunk) if chunk.dim == dim => chunk,
                    _ => {
                        ops.push(aside(VECTORS, &key, r));
                        Chunk::new(dim)
                    }
                },
            };
            chunks.insert(c, chunk);
        }
        merge_units(&mut chunks, batch, dim);
        for (n, chunk) in &chunks {
            let key = JsValue::from(*n);
            match chunk.units.is_empty() {
                true => ops.push(Op::Delete { store: VECTORS, key }),
                false => {
                    let sealed = sealer.seal(VECTORS, &n.to_string(), &chunk.to_bytes()?).await?;
                    ops.push(put(VECTORS, Some(key), sealed.into()));
                }
            }
        }

        let (tx, raw) = self.write_transaction("writing").await?;
        if let Err(e) = apply(&tx, ops) {
            let _ = tx.abort();
            return Err(e);
        }
        Self::commit(tx, &raw, "writing").await
    }

    /// Schema 1–3 → 4: the turn and unit records move into chunks and the old stores are emptied, in one
    /// transaction.
    async fn migrate(&self, meta: &mut Meta, turns: &[Turn], units: &[StoredUnit]) -> Result<()> {
        meta.schema = SCHEMA_VERSION;
        let batch =
            WriteBatch { meta: Some(meta.clone()), turns: turns.to_vec(), units: units.to_vec(), ..Default::default() };
        let (tx, raw) = self.write_transaction("migrating").await?;
        let queued = async {
            for name in [TURNS, UNITS] {
                Self::store(&tx, name)?.clear().map_err(|e| idb_err("migrating", e))?;
            }
            self.queue_write(&tx, &batch).await
        };
        if let Err(e) = queued.await {
            let _ = tx.abort();
            return Err(e);
        }
        Self::commit(tx, &raw, "migrating").await
    }

    /// The read-only transaction of a load, with the reads of the memory's and distillation's meta records queued.
    fn begin_load(&self) -> Result<(idb::Transaction, MetaReads)> {
        let reading = [META, SESSIONS, TURN_CHUNKS, VECTORS, EPISODES, FACTS, JOBS];
        let tx = self
            .conn
            .borrow()
            .db
            .transaction(&reading, TransactionMode::ReadOnly)
            .map_err(|e| idb_err("reading", e))?;
        let meta_store = Self::store(&tx, META)?;
        let get = |key: &str| meta_store.get(JsValue::from_str(key)).map_err(|e| idb_err(&format!("reading {key}"), e));
        let reads = MetaReads { meta: get(META_KEY)?, distill: get(DISTILL_KEY)? };
        Ok((tx, reads))
    }

    /// An encrypted memory's load: the same reads as a plaintext one (plus the chunk keys, which each record is
    /// bound to), then every record opened. A record that does not open (altered, moved, or damaged) is set aside
    /// as a damaged plaintext one is, and the rest of the memory opens without it; the meta records must open.
    async fn load_sealed(&self, sealer: &Sealer) -> Result<Snapshot> {
        let (tx, MetaReads { meta: meta_req, distill: distill_meta_req }) = self.begin_load()?;
        let get_all = |name: &str| {
            Self::store(&tx, name)?.get_all(None, None).map_err(|e| idb_err(&format!("reading {name}"), e))
        };
        let keys_of = |name: &str| {
            Self::store(&tx, name)?.get_all_keys(None, None).map_err(|e| idb_err(&format!("reading {name}"), e))
        };
        let (sessions_req, episodes_req, facts_req, jobs_req) =
            (get_all(SESSIONS)?, get_all(EPISODES)?, get_all(FACTS)?, get_all(JOBS)?);
        let (turn_keys_req, turns_req) = (keys_of(TURN_CHUNKS)?, get_all(TURN_CHUNKS)?);
        let (vector_keys_req, vectors_req) = (keys_of(VECTORS)?, get_all(VECTORS)?);
        let read = |what: &str, e| idb_err(&format!("reading {what}"), e);
        let meta = meta_req.await.map_err(|e| read("meta", e))?.filter(|m| !m.is_undefined());
        let distill_meta = distill_meta_req.await.map_err(|e| read("distill meta", e))?.filter(|m| !m.is_undefined());
        let sessions = sessions_req.await.map_err(|e| read("sessions", e))?;
        let episodes = episodes_req.await.map_err(|e| read("episodes", e))?;
        let facts = facts_req.await.map_err(|e| read("facts", e))?;
        let jobs = jobs_req.await.map_err(|e| read("jobs", e))?;
        let turn_keys = turn_keys_req.await.map_err(|e| read("turns", e))?;
        let turn_chunks = turns_req.await.map_err(|e| read("turns", e))?;
        let vector_keys = vector_keys_req.await.map_err(|e| read("vectors", e))?;
        let vector_chunks = vectors_req.await.map_err(|e| read("vectors", e))?;

        let mut meta = match meta {
            Some(m) => Some(from_json::<Meta>(&sealer.open(META, META_KEY, &m).await?, "meta")?),
            None => None,
        };
        if let Some(m) = &mut meta {
            if m.schema == SCHEMA_4 {
                m.schema = SCHEMA_VERSION; // see SCHEMA_4
            }
            if m.schema != SCHEMA_VERSION {
                return Err(Error::SchemaMismatch(format!("an encrypted memory of schema {}", m.schema)));
            }
            self.dim.set(m.dim as usize);
        }
        let distill_meta = match distill_meta {
            Some(m) => Some(from_json::<DistillMeta>(&sealer.open(META, DISTILL_KEY, &m).await?, "distillation meta")?),
            None => None,
        };
        let mut quarantined = Vec::new();
        let keys: Vec<String> = turn_keys.iter().map(key_text).collect();
        // Each chunk's turns go into the compact table and are dropped before the next group is opened.
        let mut turns = Turns::with_capacity(keys.len() * TURN_CHUNK as usize);
        for (keys, records) in keys.chunks(OPEN_GROUP).zip(turn_chunks.chunks(OPEN_GROUP)) {
            let opened = join_all(keys.iter().zip(records).map(|(k, r)| sealer.open(TURN_CHUNKS, k, r))).await;
            for (key, plain) in keys.iter().zip(opened) {
                if let Err(e) = plain.and_then(|b| turn_chunk::load_into(&mut turns, &b)) {
                    quarantined.push(unopened(TURN_CHUNKS, key.clone(), e));
                }
            }
        }
        drop(turn_chunks);
        let keys: Vec<String> = vector_keys.iter().map(key_text).collect();
        // The rows go into one block (see `Snapshot::block`), grown chunk by chunk: sealed records tell their sizes
        // only once opened, so it is reserved from the first chunk's size times their number.
        let mut block: Option<RowBlock> = None;
        let units = Vec::new();
        let count = keys.len();
        for (keys, records) in keys.chunks(OPEN_GROUP).zip(vector_chunks.chunks(OPEN_GROUP)) {
            let opened = join_all(keys.iter().zip(records).map(|(k, r)| sealer.open(VECTORS, k, r))).await;
            for (key, plain) in keys.iter().zip(opened) {
                let chunk = plain.and_then(|b| Chunk::from_bytes(&b)).and_then(|c| match c.dim == self.dim.get() {
                    true => Ok(c),
                    false => Err(Error::Storage("a stored vector chunk has another dimension".into())),
                });
                match chunk {
                    Ok(chunk) => {
                        let block = block.get_or_insert_with(|| {
                            let rows: usize = chunk.units.values().map(|u| u.scales.len()).sum();
                            RowBlock::with_capacity(rows * count, chunk.dim, chunk.units.len() * count)
                        });
                        for u in chunk.units.into_values() {
                            let Some(unit) = u.unit else { continue };
                            block.push(&unit, &u.codes, &u.scales);
                        }
                    }
                    Err(e) => quarantined.push(unopened(VECTORS, key.clone(), e)),
                }
            }
        }
        drop(vector_chunks);
        let distill = DistillRecords {
            meta: distill_meta,
            episodes: open_each(sealer, EPISODES, "episode", episodes, &mut quarantined).await,
            facts: open_each(sealer, FACTS, "fact", facts, &mut quarantined).await,
            jobs: open_each(sealer, JOBS, "job", jobs, &mut quarantined).await,
        };
        let mut sessions: Vec<Session> = open_each(sealer, SESSIONS, "session", sessions, &mut quarantined).await;
        // Keyed by their ids' hashes: back in id order, as a plaintext memory reads them.
        sort::sort_by(&mut sessions, |a, b| a.id.cmp(&b.id));
        let block = Some(block.unwrap_or_default());
        turns.sort(); // sealed chunks are keyed by hashes, and migrated turns join the rest
        Ok(Snapshot { meta, sessions, turns, units, block, distill, quarantined })
    }

    /// Reads the schema 1–3 records: turns, and units (with their vectors when schema 1 kept them inline).
    async fn load_legacy(&self) -> Result<(Vec<Turn>, Vec<(Unit, Option<Rows>)>)> {
        let tx = self
            .conn
            .borrow()
            .db
            .transaction(&[TURNS, UNITS], TransactionMode::ReadOnly)
            .map_err(|e| idb_err("reading", e))?;
        let turns_req = Self::store(&tx, TURNS)?.get_all(None, None).map_err(|e| idb_err("reading turns", e))?;
        let units_req = Self::store(&tx, UNITS)?.get_all(None, None).map_err(|e| idb_err("reading units", e))?;
        let turns = turns_req.await.map_err(|e| idb_err("reading turns", e))?;
        let units = units_req.await.map_err(|e| idb_err("reading units", e))?;
        let turns = turns.into_iter().map(|t| de::<Turn>(t, "turn")).collect::<Result<_>>()?;
        let units = units.into_iter().map(unit_from_js).collect::<Result<_>>()?;
        Ok((turns, units))
    }
}

/// A schema 1–3 unit record; a schema-1 record still carries its vectors as a `Float32Array`.
fn unit_from_js(v: JsValue) -> Result<(Unit, Option<Rows>)> {
    let legacy = Reflect::get(&v, &"vectors".into()).ok().and_then(|x| x.dyn_into::<Float32Array>().ok());
    if legacy.is_some() {
        let _ = Reflect::delete_property(v.unchecked_ref::<Object>(), &"vectors".into());
    }
    let unit: Unit = de(v, "unit")?;
    Ok((unit, legacy.map(|a| Rows::F32(a.to_vec()))))
}

/// A turn chunk record as its turns by id; none when absent.
fn turns_from_js(record: Option<JsValue>) -> Result<BTreeMap<u64, Turn>> {
    let Some(json) = record.filter(|r| !r.is_undefined()) else { return Ok(BTreeMap::new()) };
    let turns = parse_turns(&json)?;
    Ok(crate::sort::map_from(turns.into_iter().map(|t| (t.id, t))))
}

/// A turn chunk record's bytes: the stored chunk (binary, or schema 4's UTF-8 JSON), or (as earlier builds wrote
/// it) the JSON as a string.
fn turn_record_bytes(record: &JsValue) -> Result<Vec<u8>> {
    if let Some(bytes) = record.dyn_ref::<Uint8Array>() {
        return Ok(bytes.to_vec());
    }
    let json = record.as_string().ok_or_else(|| Error::Storage("a stored turn chunk is not bytes or JSON".into()))?;
    Ok(json.into_bytes())
}

/// A turn chunk record's turns, each whole.
fn parse_turns(record: &JsValue) -> Result<Vec<Turn>> {
    turn_chunk::decode(&turn_record_bytes(record)?)
}

/// One unit of a chunk: its int8 rows and, from schema 4, the unit itself (`None`: a schema 2–3 chunk, whose unit
/// lives in a unit record).
struct ChunkUnit {
    codes: Vec<i8>,
    scales: Vec<f32>,
    unit: Option<Unit>,
}

/// The units of up to [`VECTOR_CHUNK`] ids, in id order, with their vectors as int8 rows of `dim`.
struct Chunk {
    dim: usize,
    units: BTreeMap<u32, ChunkUnit>,
}

fn typed<T: JsCast>(record: &JsValue, field: &str) -> Result<T> {
    Reflect::get(record, &field.into())
        .ok()
        .and_then(|x| x.dyn_into::<T>().ok())
        .ok_or_else(|| Error::Storage(format!("a stored vector chunk has no `{field}`")))
}

impl Chunk {
    fn new(dim: usize) -> Chunk {
        Chunk { dim, units: BTreeMap::new() }
    }

    /// Decodes a chunk record, checking that its arrays agree.
    fn from_js(record: &JsValue) -> Result<Chunk> {
        let dim = Reflect::get(record, &"dim".into()).ok().and_then(|d| d.as_f64()).unwrap_or(0.0) as usize;
        if dim == 0 {
            return Err(Error::Storage("a stored vector chunk has no dimension".into()));
        }
        let ids = typed::<Uint32Array>(record, "ids")?.to_vec();
        let rows = typed::<Uint32Array>(record, "rows")?.to_vec();
        let scales = typed::<Float32Array>(record, "scales")?.to_vec();
        let codes = typed::<Int8Array>(record, "codes")?.to_vec();
        let packed = Reflect::get(record, &"units".into()).ok().and_then(|u| u.as_string());
        Self::from_parts(dim, ids, rows, scales, codes, packed.as_deref().map(str::as_bytes))
    }

    /// A chunk from its arrays, checking that they agree; `units` is the JSON of the units' `[session, turnIds]`
    /// (absent in schema 2–3 chunks).
    fn from_parts(
        dim: usize,
        ids: Vec<u32>,
        rows: Vec<u32>,
        scales: Vec<f32>,
        codes: Vec<i8>,
        units: Option<&[u8]>,
    ) -> Result<Chunk> {
        let total: usize = rows.iter().map(|&r| r as usize).sum();
        if ids.len() != rows.len() || scales.len() != total || codes.len() != total * dim {
            return Err(Error::Storage("a stored vector chunk is damaged".into()));
        }
        let mut metas: Vec<Option<Unit>> = match units {
            Some(json) => {
                let list: Vec<(String, Vec<u64>)> = serde_json::from_slice(json)
                    .map_err(|e| Error::Storage(format!("a stored vector chunk is damaged: {e}")))?;
                if list.len() != ids.len() {
                    return Err(Error::Storage("a stored vector chunk is damaged".into()));
                }
                list.into_iter()
                    .zip(&ids)
                    .map(|((session, turn_ids), &id)| Some(Unit { id, session, turn_ids }))
                    .collect()
            }
            None => ids.iter().map(|_| None).collect(),
        };
        let mut chunk = Chunk::new(dim);
        let (mut row, mut code) = (0, 0);
        for (i, (&id, &n)) in ids.iter().zip(&rows).enumerate() {
            let n = n as usize;
            let unit = ChunkUnit {
                codes: codes[code..code + n * dim].to_vec(),
                scales: scales[row..row + n].to_vec(),
                unit: metas[i].take(),
            };
            chunk.units.insert(id, unit);
            row += n;
            code += n * dim;
        }
        Ok(chunk)
    }

    /// The chunk as one byte string (what an encrypted memory seals): `dim` and the unit count, then ids, rows,
    /// scales and codes (little-endian), then the units' JSON.
    fn to_bytes(&self) -> Result<Vec<u8>> {
        let kept: Vec<(&u32, &ChunkUnit)> = self.units.iter().filter(|(_, u)| u.unit.is_some()).collect();
        let metas: Vec<(&str, &[u64])> = kept
            .iter()
            .filter_map(|(_, u)| u.unit.as_ref())
            .map(|u| (u.session.as_str(), u.turn_ids.as_slice()))
            .collect();
        let units = serde_json::to_vec(&metas).map_err(|e| Error::Storage(format!("encoding units: {e}")))?;
        let rows: usize = kept.iter().map(|(_, u)| u.scales.len()).sum();
        let mut out = Vec::with_capacity(8 + kept.len() * 8 + rows * (4 + self.dim) + units.len());
        out.extend((self.dim as u32).to_le_bytes());
        out.extend((kept.len() as u32).to_le_bytes());
        out.extend(kept.iter().flat_map(|(&id, _)| id.to_le_bytes()));
        out.extend(kept.iter().flat_map(|(_, u)| (u.scales.len() as u32).to_le_bytes()));
        out.extend(kept.iter().flat_map(|(_, u)| u.scales.iter().flat_map(|s| s.to_le_bytes())));
        out.extend(kept.iter().flat_map(|(_, u)| u.codes.iter().map(|&c| c as u8)));
        out.extend(units);
        Ok(out)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Chunk> {
        let damaged = || Error::Storage("a stored vector chunk is damaged".into());
        let mut r = ByteReader::new(bytes);
        let dim = r.u32().ok_or_else(damaged)? as usize;
        let n = r.u32().ok_or_else(damaged)? as usize;
        if dim == 0 {
            return Err(damaged());
        }
        let ids: Vec<u32> = u32s(r.take_items(n, 4).ok_or_else(damaged)?).collect();
        let rows: Vec<u32> = u32s(r.take_items(n, 4).ok_or_else(damaged)?).collect();
        let total: usize = rows.iter().map(|&r| r as usize).sum();
        let scales = u32s(r.take_items(total, 4).ok_or_else(damaged)?).map(f32::from_bits).collect();
        let codes = r.take_items(total, dim).ok_or_else(damaged)?.iter().map(|&c| c as i8).collect();
        let units = r.rest();
        Self::from_parts(dim, ids, rows, scales, codes, Some(units))
    }

    /// The record; units whose unit record was never seen (orphan vectors of schema 2–3) are dropped.
    fn to_js(&self) -> Result<JsValue> {
        let kept = || self.units.iter().filter(|(_, u)| u.unit.is_some());
        let ids: Vec<u32> = kept().map(|(&id, _)| id).collect();
        let rows: Vec<u32> = kept().map(|(_, u)| u.scales.len() as u32).collect();
        let scales: Vec<f32> = kept().flat_map(|(_, u)| u.scales.iter().copied()).collect();
        let codes: Vec<i8> = kept().flat_map(|(_, u)| u.codes.iter().copied()).collect();
        let metas: Vec<(&str, &[u64])> =
            kept().filter_map(|(_, u)| u.unit.as_ref()).map(|u| (u.session.as_str(), u.turn_ids.as_slice())).collect();
        let units = serde_json::to_string(&metas).map_err(|e| Error::Storage(format!("encoding units: {e}")))?;
        let o = Object::new();
        let set = |k: &str, v: &JsValue| {
            Reflect::set(&o, &k.into(), v).map_err(|_| Error::Storage("encoding a vector chunk".into()))
        };
        set("dim", &JsValue::from(self.dim as u32))?;
        set("ids", &Uint32Array::from(ids.as_slice()))?;
        set("rows", &Uint32Array::from(rows.as_slice()))?;
        set("scales", &Float32Array::from(scales.as_slice()))?;
        set("codes", &Int8Array::from(codes.as_slice()))?;
        set("units", &JsValue::from_str(&units))?;
        Ok(o.into())
    }
}

/// Queues a [`DistillWrite`] into `tx`: deletions first, then puts, as [`DistillState::apply`] does.
///
/// [`DistillState::apply`]: crate::types::distilled::DistillState::apply
fn write_distill(tx: &idb::Transaction, w: &DistillWrite) -> Result<()> {
    if w.is_empty() {
        return Ok(());
    }
    if let Some(m) = &w.meta {
        IdbStore::store(tx, META)?
            .put(&ser(m)?, Some(&JsValue::from_str(DISTILL_KEY)))
            .map_err(|e| idb_err("writing distill meta", e))?;
    }
    let key = |id: u64| Query::Key(JsValue::from(id as f64));
    let episodes = IdbStore::store(tx, EPISODES)?;
    let facts = IdbStore::store(tx, FACTS)?;
    let jobs = IdbStore::store(tx, JOBS)?;
    for &id in &w.delete_episodes {
        episodes.delete(key(id)).map_err(|e| idb_err("deleting an episode", e))?;
    }
    for &id in &w.delete_facts {
        facts.delete(key(id)).map_err(|e| idb_err("deleting a fact", e))?;
    }
    for &id in &w.delete_jobs {
        jobs.delete(key(id)).map_err(|e| idb_err("deleting a job", e))?;
    }
    for e in &w.episodes {
        episodes.put(&ser(e)?, None).map_err(|e| idb_err("writing an episode", e))?;
    }
    for f in &w.facts {
        facts.put(&ser(f)?, None).map_err(|e| idb_err("writing a fact", e))?;
    }
    for j in &w.jobs {
        jobs.put(&ser(j)?, None).map_err(|e| idb_err("writing a job", e))?;
    }
    Ok(())
}

/// Copies a damaged chunk, before its slot is rewritten, into the same store under `quarantine:<key>@<time>` (a
/// string key: chunk keys are numbers). It never decodes, so every open reports it, until the user forgets it.
fn set_aside(tx: &idb::Transaction, store: &str, key: &str, record: Option<JsValue>) -> Result<()> {
    let Some(record) = record.filter(|r| !r.is_undefined()) else { return Ok(()) };
    let aside = JsValue::from_str(&format!("{QUARANTINE_PREFIX}{key}@{}", js_sys::Date::now()));
    IdbStore::store(tx, store)?.put(&record, Some(&aside)).map_err(|e| idb_err("setting a damaged record aside", e))?;
    Ok(())
}

/// One change of an encrypted write, queued once everything is sealed.
enum Op {
    Put { store: &'static str, key: Option<JsValue>, value: JsValue },
    Delete { store: &'static str, key: JsValue },
}

/// Queues `ops` into `tx`, in order, without awaiting anything.
fn apply(tx: &idb::Transaction, ops: Vec<Op>) -> Result<()> {
    for op in ops {
        match op {
            Op::Put { store, key, value } => {
                IdbStore::store(tx, store)?.put(&value, key.as_ref()).map_err(|e| idb_err("writing", e))?;
            }
            Op::Delete { store, key } => {
                IdbStore::store(tx, store)?.delete(Query::Key(key)).map_err(|e| idb_err("writing", e))?;
            }
        }
    }
    Ok(())
}

/// An encrypted record of a store keyed by `id`: the key IndexedDB needs, and the sealed content.
fn keyed(id: &JsValue, sealed: Uint8Array) -> JsValue {
    let o = Object::new();
    let _ = Reflect::set(&o, &"id".into(), id);
    let _ = Reflect::set(&o, &"c".into(), &sealed);
    o.into()
}

/// [`set_aside`] as an [`Op`].
fn aside(store: &'static str, key: &str, record: &JsValue) -> Op {
    let aside = JsValue::from_str(&format!("{QUARANTINE_PREFIX}{key}@{}", js_sys::Date::now()));
    Op::Put { store, key: Some(aside), value: record.clone() }
}

fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Storage(format!("a stored {what} is damaged: {e}")))
}

/// The turn chunks and unit (vector) chunks a batch adds to or deletes from.
fn touched_chunks(batch: &WriteBatch) -> (BTreeSet<u64>, BTreeSet<u32>) {
    let turns = batch.turns.iter().map(|t| t.id).chain(batch.delete_turns.iter().copied()).map(turn_chunk_of).collect();
    let units = batch.delete_units.iter().copied().chain(batch.units.iter().map(|u| u.unit.id)).map(chunk_of).collect();
    (turns, units)
}

/// The batch's turns put into, then its deleted turns removed from, the chunks read for it.
fn merge_turns(chunks: &mut BTreeMap<u64, BTreeMap<u64, Turn>>, batch: &WriteBatch) {
    for t in &batch.turns {
        if let Some(c) = chunks.get_mut(&turn_chunk_of(t.id)) {
            c.insert(t.id, t.clone());
        }
    }
    for id in &batch.delete_turns {
        if let Some(c) = chunks.get_mut(&turn_chunk_of(*id)) {
            c.remove(id);
        }
    }
}

/// The batch's deleted units removed from, then its units (as int8 rows) put into, the chunks read for it.
fn merge_units(chunks: &mut BTreeMap<u32, Chunk>, batch: &WriteBatch, dim: usize) {
    for id in &batch.delete_units {
        if let Some(c) = chunks.get_mut(&chunk_of(*id)) {
            c.units.remove(id);
        }
    }
    for u in &batch.units {
        if let Some(c) = chunks.get_mut(&chunk_of(u.unit.id)) {
            let (codes, scales) = u.vectors.to_int8(dim);
            c.units.insert(u.unit.id, ChunkUnit { codes, scales, unit: Some(u.unit.clone()) });
        }
    }
}

/// A sealed record that did not open or decode, as a [`Quarantined`] entry.
fn unopened(store: &str, key: String, e: Error) -> Quarantined {
    let reason = match key.starts_with(QUARANTINE_PREFIX) {
        true => format!("copied aside before its slot was rewritten: {e}"),
        false => e.to_string(),
    };
    Quarantined { store: store.into(), key, reason }
}

/// Opens and decodes the sealed records of a store keyed by `id`; those that fail go to `quarantined`.
async fn open_each<T: serde::de::DeserializeOwned>(
    sealer: &Sealer,
    store: &str,
    what: &str,
    records: Vec<JsValue>,
    quarantined: &mut Vec<Quarantined>,
) -> Vec<T> {
    let keys: Vec<String> =
        records.iter().map(|r| Reflect::get(r, &"id".into()).map(|k| key_text(&k)).unwrap_or_default()).collect();
    let opened = join_all(keys.iter().zip(&records).map(|(k, r)| sealer.open(store, k, r))).await;
    let mut out = Vec::with_capacity(records.len());
    for (key, plain) in keys.into_iter().zip(opened) {
        match plain.and_then(|bytes| from_json::<T>(&bytes, what)) {
            Ok(v) => out.push(v),
            Err(e) => quarantined.push(unopened(store, key, e)),
        }
    }
    out
}

fn chunk_of(unit: u32) -> u32 {
    unit / VECTOR_CHUNK
}

fn turn_chunk_of(turn: u64) -> u64 {
    turn / TURN_CHUNK
}

#[async_trait(?Send)]
impl Store for IdbStore {
    async fn load(&self) -> Result<Snapshot> {
        if let Some(sealer) = &self.sealer {
            return self.load_sealed(sealer).await;
        }
        // Every request is queued before the first is awaited: one round of eight requests, whatever the size.
        let (tx, MetaReads { meta: meta_req, distill: distill_meta_req }) = self.begin_load()?;
        let get_all = |name: &str| {
            Self::store(&tx, name)?.get_all(None, None).map_err(|e| idb_err(&format!("reading {name}"), e))
        };
        let sessions_req = get_all(SESSIONS)?;
        let turns_req = get_all(TURN_CHUNKS)?;
        let vectors_req = get_all(VECTORS)?;
        let episodes_req = get_all(EPISODES)?;
        let facts_req = get_all(FACTS)?;
        let jobs_req = get_all(JOBS)?;
        let meta = meta_req.await.map_err(|e| idb_err("reading meta", e))?;
        let distill_meta = distill_meta_req.await.map_err(|e| idb_err("reading distill meta", e))?;
        let sessions = sessions_req.await.map_err(|e| idb_err("reading sessions", e))?;
        let turn_chunks = turns_req.await.map_err(|e| idb_err("reading turns", e))?;
        // Parsed now, while IndexedDB is still reading the vector chunks. A chunk that does not decode is set aside
        // (its position now, its key below: keys are read only when something is damaged).
        let mut damaged_chunks: Vec<(&str, usize, String)> = Vec::new();
        // At most TURN_CHUNK turns a chunk, reserved once. Each chunk's turns go into the compact table (which a
        // memory keeps as it is) and are dropped before the next chunk is decoded.
        let mut turns = Turns::with_capacity(turn_chunks.len() * TURN_CHUNK as usize);
        for (i, c) in turn_chunks.iter().enumerate() {
            if let Err(e) = turn_record_bytes(c).and_then(|b| turn_chunk::load_into(&mut turns, &b)) {
                damaged_chunks.push((TURN_CHUNKS, i, e.to_string()));
            }
        }
        drop(turn_chunks);
        let chunks = vectors_req.await.map_err(|e| idb_err("reading vectors", e))?;
        let episodes = episodes_req.await.map_err(|e| idb_err("reading episodes", e))?;
        let facts = facts_req.await.map_err(|e| idb_err("reading facts", e))?;
        let jobs = jobs_req.await.map_err(|e| idb_err("reading jobs", e))?;
        let mut meta = match meta {
            Some(m) if !m.is_undefined() => Some(de::<Meta>(m, "meta")?),
            _ => None,
        };
        if let Some(m) = &meta {
            self.dim.set(m.dim as usize);
        }
        // The rows go into one block sized exactly from the records (see `Snapshot::block`).
        let length = |c: &JsValue, field: &str| {
            Reflect::get(c, &field.into()).ok().map_or(0, |a| {
                a.dyn_ref::<Int8Array>()
                    .map(|a| a.length())
                    .or_else(|| a.dyn_ref::<Float32Array>().map(|a| a.length()))
                    .or_else(|| a.dyn_ref::<Uint32Array>().map(|a| a.length()))
                    .unwrap_or(0) as usize
            })
        };
        let mut block = RowBlock::with_capacity(chunks.iter().map(|c| length(c, "scales")).sum(), 0, 0);
        block.codes.reserve_exact(chunks.iter().map(|c| length(c, "codes")).sum());
        block.rows.reserve_exact(chunks.iter().map(|c| length(c, "ids")).sum());
        block.units = crate::store::UnitColumns::with_capacity(block.rows.capacity());
        let mut units = Vec::new();
        // Schema 2–3 chunks: vectors whose unit lives in a unit record.
        let mut orphans: HashMap<u32, Rows> = HashMap::new();
        for (i, c) in chunks.iter().enumerate() {
            let chunk = Chunk::from_js(c).and_then(|chunk| match chunk.dim == self.dim.get() {
                true => Ok(chunk),
                false => Err(Error::Storage("a stored vector chunk has another dimension".into())),
            });
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    damaged_chunks.push((VECTORS, i, e.to_string()));
                    continue;
                }
            };
            for (id, u) in chunk.units {
                match u.unit {
                    Some(unit) => block.push(&unit, &u.codes, &u.scales),
                    None => drop(orphans.insert(id, Rows::Int8 { codes: u.codes, scales: u.scales })),
                }
            }
        }
        drop(chunks);
        let mut block = Some(block);
        if let Some(m) = meta.as_mut().filter(|m| m.schema == SCHEMA_4) {
            m.schema = SCHEMA_VERSION; // see SCHEMA_4
        }
        if let Some(m) = meta.as_mut().filter(|m| m.schema < SCHEMA_4) {
            // Migrating: units read from schema 2–3 records join these, so every unit keeps its own rows.
            if let Some(b) = block.take() {
                units.extend(b.into_units(self.dim.get()));
            }
            let (legacy_turns, legacy_units) = self.load_legacy().await?;
            let mut moved = Vec::with_capacity(legacy_units.len());
            for (unit, inline) in legacy_units {
                let vectors = inline
                    .or_else(|| orphans.remove(&unit.id))
                    .ok_or_else(|| Error::Storage(format!("unit {} has no stored vectors", unit.id)))?;
                moved.push(StoredUnit { unit, vectors });
            }
            self.migrate(m, &legacy_turns, &moved).await?;
            legacy_turns.into_iter().for_each(|t| turns.push(t));
            units.extend(moved);
            units.sort_by_key(|u| u.unit.id);
        }
        let mut quarantined = self.name_damaged(damaged_chunks).await?;
        let distill = DistillRecords {
            meta: match distill_meta {
                Some(m) if !m.is_undefined() => Some(de::<DistillMeta>(m, "distillation meta")?),
                _ => None,
            },
            episodes: decode_each::<Episode>(episodes, EPISODES, "episode", &mut quarantined),
            facts: decode_each::<Fact>(facts, FACTS, "fact", &mut quarantined),
            jobs: decode_each::<Job>(jobs, JOBS, "job", &mut quarantined),
        };
        let sessions = decode_each::<Session>(sessions, SESSIONS, "session", &mut quarantined);
        turns.sort(); // sealed chunks are keyed by hashes, and migrated turns join the rest
        Ok(Snapshot { meta, sessions, turns, units, block, distill, quarantined })
    }

    async fn write(&self, batch: WriteBatch) -> Result<()> {
        if let Some(sealer) = &self.sealer {
            return self.write_sealed(sealer, &batch).await;
        }
        let (tx, raw) = self.write_transaction("writing").await?;
        if let Err(e) = self.queue_write(&tx, &batch).await {
            // Requests already queued must not commit: a refused batch leaves nothing half-written.
            let _ = tx.abort();
            return Err(e);
        }
        Self::commit(tx, &raw, "writing").await
    }

    async fn clear(&self) -> Result<()> {
        // The sync record is kept (a `forgetAll` in its log, still to be sent): read before the clear, put back in it.
        #[cfg(feature = "sync")]
        let sync = self.load_sync_raw().await?;
        let (tx, raw) = self.write_transaction("clearing").await?;
        for name in ALL {
            Self::store(&tx, name)?.clear().map_err(|e| idb_err("clearing", e))?;
        }
        // The key record is not content: an encrypted memory stays encrypted, under the same key, once emptied.
        if let Some(record) = self.key_record.borrow().as_ref() {
            Self::store(&tx, META)?
                .put(record, Some(&JsValue::from_str(KEY_KEY)))
                .map_err(|e| idb_err("clearing", e))?;
        }
        #[cfg(feature = "sync")]
        if let Some(record) = sync {
            Self::store(&tx, META)?
                .put(&record, Some(&JsValue::from_str(SYNC_KEY)))
                .map_err(|e| idb_err("clearing", e))?;
        }
        Self::commit(tx, &raw, "clearing").await
    }

    #[cfg(feature = "sync")]
    async fn load_sync(&self) -> Result<Option<Vec<u8>>> {
        let Some(record) = self.load_sync_raw().await? else { return Ok(None) };
        match &self.sealer {
            Some(sealer) => sealer.open(META, SYNC_KEY, &record).await.map(Some),
            None => record
                .dyn_into::<Uint8Array>()
                .map(|a| Some(a.to_vec()))
                .map_err(|_| Error::Storage("the sync record is not bytes".into())),
        }
    }

    async fn put_lexical(&self, len: usize, write: &WritePieces<'_>) -> Result<()> {
        // Copied into a JS array piece by piece, and sealed from there: never whole in the wasm heap.
        let plain = Uint8Array::new_with_length(len as u32);
        let mut at = 0usize;
        write(&mut |piece| {
            if at + piece.len() <= len {
                plain.subarray(at as u32, (at + piece.len()) as u32).copy_from(piece);
            }
            at += piece.len();
        });
        if at != len {
            return Err(Error::Storage(format!("a lexical index of {at} bytes, announced as {len}")));
        }
        let value: JsValue = match &self.sealer {
            Some(sealer) => sealer.seal_js(META, LEXICAL_KEY, &plain).await?.into(),
            None => plain.into(),
        };
        let (tx, raw) = self.write_transaction("keeping the lexical index").await?;
        if let Err(e) = Self::store(&tx, META)?.put(&value, Some(&JsValue::from_str(LEXICAL_KEY))) {
            let _ = tx.abort();
            return Err(idb_err("keeping the lexical index", e));
        }
        Self::commit(tx, &raw, "keeping the lexical index").await
    }

    async fn load_lexical(&self) -> Result<Option<Vec<u8>>> {
        let tx = self
            .conn
            .borrow()
            .db
            .transaction(&[META], TransactionMode::ReadOnly)
            .map_err(|e| idb_err("reading the lexical index", e))?;
        let request = Self::store(&tx, META)?.get(JsValue::from_str(LEXICAL_KEY));
        let record = request.map_err(|e| idb_err("reading the lexical index", e))?.await;
        let record = record.map_err(|e| idb_err("reading the lexical index", e))?.filter(|r| !r.is_undefined());
        Ok(match (record, &self.sealer) {
            (None, _) => None,
            // A cache: one that does not open is built again, not set aside.
            (Some(r), Some(sealer)) => sealer.open(META, LEXICAL_KEY, &r).await.ok(),
            (Some(r), None) => r.dyn_into::<Uint8Array>().ok().map(|a| a.to_vec()),
        })
    }
}

#[cfg(feature = "sync")]
impl IdbStore {
    /// The sync record as stored (sealed in an encrypted memory).
    async fn load_sync_raw(&self) -> Result<Option<JsValue>> {
        let tx = self
            .conn
            .borrow()
            .db
            .transaction(&[META], TransactionMode::ReadOnly)
            .map_err(|e| idb_err("reading the sync record", e))?;
        let request = Self::store(&tx, META)?.get(JsValue::from_str(SYNC_KEY));
        let record = request.map_err(|e| idb_err("reading the sync record", e))?.await;
        Ok(record.map_err(|e| idb_err("reading the sync record", e))?.filter(|r| !r.is_undefined()))
    }
}

/// The `meta` store's reads of a load.
struct MetaReads {
    meta: GetStoreRequest,
    distill: GetStoreRequest,
}

/// Whether a batch deletes anything: such a write drops the kept lexical index (see `Store::put_lexical`).
fn deletes(batch: &WriteBatch) -> bool {
    !(batch.delete_units.is_empty() && batch.delete_turns.is_empty() && batch.delete_sessions.is_empty())
}
