//! The browser [`Store`]: IndexedDB through the `idb` crate. One database per memory (`loci:<name>`), eight object
//! stores; every write is one readwrite transaction (turns, units, vectors, deletions and distillation together).
//!
//! Vectors do not live in unit records: they are packed as int8 into chunk records of [`VECTOR_CHUNK`] units
//! (`vectors` store, key = `unit id / VECTOR_CHUNK`), each `{ ids: Uint32Array, rows: Uint32Array, scales:
//! Float32Array, codes: Int8Array }` (binary, never JSON). Open reads everything with five `get`/`getAll` requests,
//! however many units there are, and the vectors arrive as a few hundred typed arrays rather than one object per
//! unit. A write reads and rewrites, inside its own transaction, only the chunks whose units it adds or deletes.
//!
//! Distillation (schema 3) adds three stores keyed by `id` — `episodes`, `facts`, `jobs` (episode and fact vectors
//! as packed f32 `Uint8Array`s) — and a `distill` record beside `meta` in the `meta` store (id counters and the
//! segmentation buffer). Open reads them with four more requests.
//!
//! Migrations, on open: schema 1 (vectors as a `Float32Array` inside each unit record) is moved into chunks; the
//! IndexedDB upgrade from version 1 or 2 creates the stores a database lacks, and schema 2's meta is marked 3 (its
//! records are unchanged).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use idb::{Database, KeyPath, ObjectStore, Query, TransactionMode};
use js_sys::{Float32Array, Int8Array, Object, Reflect, Uint32Array};
use wasm_bindgen::{JsCast, JsValue};

use super::{Meta, Rows, Snapshot, Store, StoredUnit, WriteBatch, SCHEMA_VERSION, VECTOR_CHUNK};
use crate::distill::{DistillMeta, DistillRecords, DistillWrite, Episode, Fact, Job};
use crate::embed::DIM;
use crate::error::{Error, Result};
use crate::types::{Session, Turn, Unit};

/// IndexedDB version: 1 had four stores, 2 added `vectors`, 3 the distillation stores.
const DB_VERSION: u32 = 3;
const META: &str = "meta";
const SESSIONS: &str = "sessions";
const TURNS: &str = "turns";
const UNITS: &str = "units";
const VECTORS: &str = "vectors";
const EPISODES: &str = "episodes";
const FACTS: &str = "facts";
const JOBS: &str = "jobs";
const ALL: [&str; 8] = [META, SESSIONS, TURNS, UNITS, VECTORS, EPISODES, FACTS, JOBS];
/// Keys in the `meta` store.
const META_KEY: &str = "meta";
const DISTILL_KEY: &str = "distill";

/// Maps an IndexedDB failure to loci's error, recognising the quota case.
fn idb_err(context: &str, e: impl std::fmt::Display) -> Error {
    let msg = format!("{context}: {e}");
    if msg.contains("QuotaExceeded") || msg.to_lowercase().contains("quota") {
        Error::QuotaExceeded(msg)
    } else {
        Error::Storage(msg)
    }
}

fn ser<T: serde::Serialize>(v: &T) -> Result<JsValue> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| Error::Storage(format!("encoding a record: {e}")))
}

fn de<T: serde::de::DeserializeOwned>(v: JsValue, what: &str) -> Result<T> {
    serde_wasm_bindgen::from_value(v).map_err(|e| Error::Storage(format!("a stored {what} is damaged: {e}")))
}

/// An IndexedDB-backed memory.
pub struct IdbStore {
    db: Database,
    name: String,
    /// Vector dimension: the model's, or the stored meta's once seen (tests store tiny vectors).
    dim: Cell<usize>,
}

impl IdbStore {
    /// The IndexedDB database name for a memory name.
    pub fn database_name(name: &str) -> String {
        format!("loci:{name}")
    }

    /// Opens (creating on first use, adding the object stores an older database lacks) the database of memory `name`.
    pub async fn open(name: &str) -> Result<Self> {
        let db = Database::builder(&Self::database_name(name))
            .version(DB_VERSION)
            .add_object_store(idb::builder::ObjectStoreBuilder::new(META))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(SESSIONS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(TURNS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(UNITS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(VECTORS))
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
        Ok(IdbStore { db, name: name.to_string(), dim: Cell::new(DIM) })
    }

    /// Deletes the whole database of memory `name` (it must not be open).
    pub async fn delete(name: &str) -> Result<()> {
        let factory = idb::Factory::new().map_err(|e| idb_err("IndexedDB unavailable", e))?;
        factory
            .delete(&Self::database_name(name))
            .map_err(|e| idb_err("deleting the database", e))?
            .await
            .map_err(|e| idb_err("deleting the database", e))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the connection (pending transactions finish first).
    pub fn close(&self) {
        self.db.close();
    }

    fn store(tx: &idb::Transaction, name: &str) -> Result<ObjectStore> {
        tx.object_store(name).map_err(|e| idb_err("opening an object store", e))
    }

    /// Queues all of `batch` into `tx` (reading the vector chunks it touches); the caller commits or aborts.
    async fn queue_write(&self, tx: &idb::Transaction, batch: &WriteBatch) -> Result<()> {
        // Requests are queued without awaiting each one: the transaction commits them together or not at all.
        if let Some(meta) = &batch.meta {
            self.dim.set(meta.dim as usize);
            Self::store(tx, META)?
                .put(&ser(meta)?, Some(&JsValue::from_str(META_KEY)))
                .map_err(|e| idb_err("writing meta", e))?;
        }
        let units = Self::store(tx, UNITS)?;
        for id in &batch.delete_units {
            units.delete(Query::Key(JsValue::from(*id))).map_err(|e| idb_err("deleting a unit", e))?;
        }
        let sessions = Self::store(tx, SESSIONS)?;
        for s in &batch.sessions {
            sessions.put(&ser(s)?, None).map_err(|e| idb_err("writing a session", e))?;
        }
        let turns = Self::store(tx, TURNS)?;
        for t in &batch.turns {
            turns.put(&ser(t)?, None).map_err(|e| idb_err("writing a turn", e))?;
        }
        for u in &batch.units {
            if !u.vectors.is_whole(self.dim.get()) {
                return Err(Error::Storage(format!("unit {} has a damaged vector", u.unit.id)));
            }
            units.put(&unit_to_js(&u.unit)?, None).map_err(|e| idb_err("writing a unit", e))?;
        }
        // Deletions after the puts, as MemStore applies them.
        for id in &batch.delete_turns {
            turns.delete(Query::Key(JsValue::from(*id as f64))).map_err(|e| idb_err("deleting a turn", e))?;
        }
        for id in &batch.delete_sessions {
            sessions.delete(Query::Key(JsValue::from_str(id))).map_err(|e| idb_err("deleting a session", e))?;
        }
        write_distill(tx, &batch.distill)?;

        // Vector chunks: read the touched ones inside this transaction, then rewrite them.
        let touched: BTreeSet<u32> =
            batch.delete_units.iter().copied().chain(batch.units.iter().map(|u| u.unit.id)).map(chunk_of).collect();
        if !touched.is_empty() {
            let vectors = Self::store(tx, VECTORS)?;
            let mut reads = Vec::with_capacity(touched.len());
            for &c in &touched {
                reads.push((c, vectors.get(Query::Key(JsValue::from(c))).map_err(|e| idb_err("reading vectors", e))?));
            }
            let mut chunks: BTreeMap<u32, Chunk> = BTreeMap::new();
            for (c, req) in reads {
                let record = req.await.map_err(|e| idb_err("reading vectors", e))?;
                let chunk = match record {
                    Some(r) if !r.is_undefined() => Chunk::from_js(&r)?,
                    _ => Chunk::new(self.dim.get()),
                };
                if chunk.dim != self.dim.get() {
                    return Err(Error::Storage("a stored vector chunk has another dimension".into()));
                }
                chunks.insert(c, chunk);
            }
            for id in &batch.delete_units {
                if let Some(c) = chunks.get_mut(&chunk_of(*id)) {
                    c.units.remove(id);
                }
            }
            for u in &batch.units {
                if let Some(c) = chunks.get_mut(&chunk_of(u.unit.id)) {
                    c.units.insert(u.unit.id, u.vectors.to_int8(self.dim.get()));
                }
            }
            for (n, chunk) in &chunks {
                let key = JsValue::from(*n);
                if chunk.units.is_empty() {
                    vectors.delete(Query::Key(key)).map_err(|e| idb_err("writing vectors", e))?;
                } else {
                    vectors.put(&chunk.to_js()?, Some(&key)).map_err(|e| idb_err("writing vectors", e))?;
                }
            }
        }
        Ok(())
    }

    /// Schema 1 → current: moves the vectors of every unit record into chunk records, in one transaction.
    async fn migrate_from_1(&self, meta: &mut Meta, units: &[StoredUnit]) -> Result<()> {
        meta.schema = SCHEMA_VERSION;
        let batch = WriteBatch { meta: Some(meta.clone()), units: units.to_vec(), ..Default::default() };
        self.write(batch).await
    }

    /// Schema 2 → 3: the distillation stores were created by the IndexedDB upgrade; only the meta changes.
    async fn migrate_from_2(&self, meta: &mut Meta) -> Result<()> {
        meta.schema = SCHEMA_VERSION;
        self.write(WriteBatch { meta: Some(meta.clone()), ..Default::default() }).await
    }
}

/// The unit record: the unit alone (its vectors live in a chunk).
fn unit_to_js(u: &Unit) -> Result<JsValue> {
    ser(u)
}

/// A unit record; a schema-1 record still carries its vectors as a `Float32Array`.
fn unit_from_js(v: JsValue) -> Result<(Unit, Option<Rows>)> {
    let legacy = Reflect::get(&v, &"vectors".into()).ok().and_then(|x| x.dyn_into::<Float32Array>().ok());
    if legacy.is_some() {
        let _ = Reflect::delete_property(v.unchecked_ref::<Object>(), &"vectors".into());
    }
    let unit: Unit = de(v, "unit")?;
    Ok((unit, legacy.map(|a| Rows::F32(a.to_vec()))))
}

/// The vectors of up to [`VECTOR_CHUNK`] units, in id order, as int8 rows of `dim`.
struct Chunk {
    dim: usize,
    units: BTreeMap<u32, (Vec<i8>, Vec<f32>)>,
}

fn typed<T: JsCast>(record: &JsValue, field: &str) -> Result<T> {
    Reflect::get(record, &field.into())
        .ok()
        .and_then(|x| x.dyn_into::<T>().ok())
        .ok_or_else(|| Error::Storage(format!("a stored vector chunk has no `{field}`")))
}

impl Chunk {
    /// Decodes a chunk record, checking that its arrays agree.
    fn new(dim: usize) -> Chunk {
        Chunk { dim, units: BTreeMap::new() }
    }

    fn from_js(record: &JsValue) -> Result<Chunk> {
        let dim = Reflect::get(record, &"dim".into()).ok().and_then(|d| d.as_f64()).unwrap_or(0.0) as usize;
        if dim == 0 {
            return Err(Error::Storage("a stored vector chunk has no dimension".into()));
        }
        let ids = typed::<Uint32Array>(record, "ids")?.to_vec();
        let rows = typed::<Uint32Array>(record, "rows")?.to_vec();
        let scales = typed::<Float32Array>(record, "scales")?.to_vec();
        let codes = typed::<Int8Array>(record, "codes")?.to_vec();
        let total: usize = rows.iter().map(|&r| r as usize).sum();
        if ids.len() != rows.len() || scales.len() != total || codes.len() != total * dim {
            return Err(Error::Storage("a stored vector chunk is damaged".into()));
        }
        let mut chunk = Chunk::new(dim);
        let (mut row, mut code) = (0, 0);
        for (&id, &n) in ids.iter().zip(&rows) {
            let n = n as usize;
            chunk.units.insert(id, (codes[code..code + n * dim].to_vec(), scales[row..row + n].to_vec()));
            row += n;
            code += n * dim;
        }
        Ok(chunk)
    }

    fn to_js(&self) -> Result<JsValue> {
        let ids: Vec<u32> = self.units.keys().copied().collect();
        let rows: Vec<u32> = self.units.values().map(|(_, s)| s.len() as u32).collect();
        let scales: Vec<f32> = self.units.values().flat_map(|(_, s)| s.iter().copied()).collect();
        let codes: Vec<i8> = self.units.values().flat_map(|(c, _)| c.iter().copied()).collect();
        let o = Object::new();
        let set = |k: &str, v: &JsValue| {
            Reflect::set(&o, &k.into(), v).map_err(|_| Error::Storage("encoding a vector chunk".into()))
        };
        set("dim", &JsValue::from(self.dim as u32))?;
        set("ids", &Uint32Array::from(ids.as_slice()))?;
        set("rows", &Uint32Array::from(rows.as_slice()))?;
        set("scales", &Float32Array::from(scales.as_slice()))?;
        set("codes", &Int8Array::from(codes.as_slice()))?;
        Ok(o.into())
    }
}

/// Queues a [`DistillWrite`] into `tx`: deletions first, then puts, as [`DistillState::apply`] does.
///
/// [`DistillState::apply`]: crate::distill::DistillState::apply
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

fn chunk_of(unit: u32) -> u32 {
    unit / VECTOR_CHUNK
}

#[async_trait(?Send)]
impl Store for IdbStore {
    async fn load(&self) -> Result<Snapshot> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadOnly).map_err(|e| idb_err("reading", e))?;
        // Every request is queued before the first is awaited: one round of nine requests, whatever the size.
        let meta_store = Self::store(&tx, META)?;
        let meta_req = meta_store.get(JsValue::from_str(META_KEY)).map_err(|e| idb_err("reading meta", e))?;
        let distill_meta_req =
            meta_store.get(JsValue::from_str(DISTILL_KEY)).map_err(|e| idb_err("reading distill meta", e))?;
        let get_all = |name: &str| {
            Self::store(&tx, name)?.get_all(None, None).map_err(|e| idb_err(&format!("reading {name}"), e))
        };
        let sessions_req = get_all(SESSIONS)?;
        let turns_req = get_all(TURNS)?;
        let units_req = get_all(UNITS)?;
        let vectors_req = get_all(VECTORS)?;
        let episodes_req = get_all(EPISODES)?;
        let facts_req = get_all(FACTS)?;
        let jobs_req = get_all(JOBS)?;
        let meta = meta_req.await.map_err(|e| idb_err("reading meta", e))?;
        let distill_meta = distill_meta_req.await.map_err(|e| idb_err("reading distill meta", e))?;
        let sessions = sessions_req.await.map_err(|e| idb_err("reading sessions", e))?;
        let turns = turns_req.await.map_err(|e| idb_err("reading turns", e))?;
        let units = units_req.await.map_err(|e| idb_err("reading units", e))?;
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
        let mut vectors: HashMap<u32, Rows> = HashMap::with_capacity(units.len());
        for c in &chunks {
            for (id, (codes, scales)) in Chunk::from_js(c)?.units {
                vectors.insert(id, Rows::Int8 { codes, scales });
            }
        }
        let mut legacy = false;
        let units = units
            .into_iter()
            .map(|u| {
                let (unit, inline) = unit_from_js(u)?;
                legacy |= inline.is_some();
                let vectors = inline
                    .or_else(|| vectors.remove(&unit.id))
                    .ok_or_else(|| Error::Storage(format!("unit {} has no stored vectors", unit.id)))?;
                Ok(StoredUnit { unit, vectors })
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some(m) = meta.as_mut() {
            if m.schema == 1 && legacy {
                self.migrate_from_1(m, &units).await?;
            } else if m.schema == 1 || m.schema == 2 {
                self.migrate_from_2(m).await?;
            }
        }
        let distill = DistillRecords {
            meta: match distill_meta {
                Some(m) if !m.is_undefined() => Some(de::<DistillMeta>(m, "distillation meta")?),
                _ => None,
            },
            episodes: episodes.into_iter().map(|e| de::<Episode>(e, "episode")).collect::<Result<_>>()?,
            facts: facts.into_iter().map(|f| de::<Fact>(f, "fact")).collect::<Result<_>>()?,
            jobs: jobs.into_iter().map(|j| de::<Job>(j, "job")).collect::<Result<_>>()?,
        };
        Ok(Snapshot {
            meta,
            sessions: sessions.into_iter().map(|s| de::<Session>(s, "session")).collect::<Result<_>>()?,
            turns: turns.into_iter().map(|t| de::<Turn>(t, "turn")).collect::<Result<_>>()?,
            units,
            distill,
        })
    }

    async fn write(&self, batch: WriteBatch) -> Result<()> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadWrite).map_err(|e| idb_err("writing", e))?;
        if let Err(e) = self.queue_write(&tx, &batch).await {
            // Requests already queued must not commit: a refused batch leaves nothing half-written.
            let _ = tx.abort();
            return Err(e);
        }
        let result = tx.await.map_err(|e| idb_err("committing", e))?;
        if result.is_committed() {
            Ok(())
        } else {
            Err(Error::Storage("the write transaction was aborted".into()))
        }
    }

    async fn clear(&self) -> Result<()> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadWrite).map_err(|e| idb_err("clearing", e))?;
        for name in ALL {
            Self::store(&tx, name)?.clear().map_err(|e| idb_err("clearing", e))?;
        }
        let result = tx.await.map_err(|e| idb_err("clearing", e))?;
        if result.is_committed() {
            Ok(())
        } else {
            Err(Error::Storage("the clear transaction was aborted".into()))
        }
    }
}
