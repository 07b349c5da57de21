//! The browser [`Store`]: IndexedDB through the `idb` crate. One database per memory (`loci:<name>`), four object
//! stores; every write is one readwrite transaction; open reads everything with four requests (vectors in bulk,
//! as `Float32Array`s: binary, never JSON).

use async_trait::async_trait;
use idb::{Database, KeyPath, ObjectStore, Query, TransactionMode};
use js_sys::{Float32Array, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use super::{Meta, Snapshot, Store, StoredUnit, WriteBatch};
use crate::error::{Error, Result};
use crate::types::{Session, Turn, Unit};

const DB_VERSION: u32 = 1;
const META: &str = "meta";
const SESSIONS: &str = "sessions";
const TURNS: &str = "turns";
const UNITS: &str = "units";
const ALL: [&str; 4] = [META, SESSIONS, TURNS, UNITS];

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
}

impl IdbStore {
    /// The IndexedDB database name for a memory name.
    pub fn database_name(name: &str) -> String {
        format!("loci:{name}")
    }

    /// Opens (creating on first use) the database of memory `name`.
    pub async fn open(name: &str) -> Result<Self> {
        let db = Database::builder(&Self::database_name(name))
            .version(DB_VERSION)
            .add_object_store(idb::builder::ObjectStoreBuilder::new(META))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(SESSIONS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(TURNS).key_path(Some(KeyPath::new_single("id"))))
            .add_object_store(idb::builder::ObjectStoreBuilder::new(UNITS).key_path(Some(KeyPath::new_single("id"))))
            .build()
            .await
            .map_err(|e| match e {
                idb::Error::DomException(ref d) if d.name() == "VersionError" => Error::SchemaMismatch(format!(
                    "database {} was written by a newer loci",
                    Self::database_name(name)
                )),
                e => idb_err("opening IndexedDB", e),
            })?;
        Ok(IdbStore { db, name: name.to_string() })
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
}

fn unit_to_js(u: &StoredUnit) -> Result<JsValue> {
    let o = ser(&u.unit)?;
    let vectors = Float32Array::from(u.vectors.as_slice());
    Reflect::set(&o, &"vectors".into(), &vectors).map_err(|_| Error::Storage("encoding a unit".into()))?;
    Ok(o)
}

fn unit_from_js(v: JsValue) -> Result<StoredUnit> {
    let vectors = Reflect::get(&v, &"vectors".into())
        .ok()
        .and_then(|x| x.dyn_into::<Float32Array>().ok())
        .ok_or_else(|| Error::Storage("a stored unit has no vectors".into()))?
        .to_vec();
    let _ = Reflect::delete_property(v.unchecked_ref::<Object>(), &"vectors".into());
    let unit: Unit = de(v, "unit")?;
    Ok(StoredUnit { unit, vectors })
}

#[async_trait(?Send)]
impl Store for IdbStore {
    async fn load(&self) -> Result<Snapshot> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadOnly).map_err(|e| idb_err("reading", e))?;
        let meta_req = Self::store(&tx, META)?.get(JsValue::from_str("meta")).map_err(|e| idb_err("reading meta", e))?;
        let sessions_req = Self::store(&tx, SESSIONS)?.get_all(None, None).map_err(|e| idb_err("reading sessions", e))?;
        let turns_req = Self::store(&tx, TURNS)?.get_all(None, None).map_err(|e| idb_err("reading turns", e))?;
        let units_req = Self::store(&tx, UNITS)?.get_all(None, None).map_err(|e| idb_err("reading units", e))?;
        let meta = meta_req.await.map_err(|e| idb_err("reading meta", e))?;
        let sessions = sessions_req.await.map_err(|e| idb_err("reading sessions", e))?;
        let turns = turns_req.await.map_err(|e| idb_err("reading turns", e))?;
        let units = units_req.await.map_err(|e| idb_err("reading units", e))?;
        Ok(Snapshot {
            meta: match meta {
                Some(m) if !m.is_undefined() => Some(de::<Meta>(m, "meta")?),
                _ => None,
            },
            sessions: sessions.into_iter().map(|s| de::<Session>(s, "session")).collect::<Result<_>>()?,
            turns: turns.into_iter().map(|t| de::<Turn>(t, "turn")).collect::<Result<_>>()?,
            units: units.into_iter().map(unit_from_js).collect::<Result<_>>()?,
        })
    }

    async fn write(&self, batch: WriteBatch) -> Result<()> {
        let tx = self.db.transaction(&ALL, TransactionMode::ReadWrite).map_err(|e| idb_err("writing", e))?;
        // Requests are queued without awaiting each one: the transaction commits them together or not at all.
        if let Some(meta) = &batch.meta {
            Self::store(&tx, META)?.put(&ser(meta)?, Some(&JsValue::from_str("meta"))).map_err(|e| idb_err("writing meta", e))?;
        }
        let units = Self::store(&tx, UNITS)?;
        for id in &batch.delete_units {
            units.delete(Query::Key(JsValue::from(*id))).map_err(|e| idb_err("deleting a unit", e))?;
        }
        let sessions = Self::store(&tx, SESSIONS)?;
        for s in &batch.sessions {
            sessions.put(&ser(s)?, None).map_err(|e| idb_err("writing a session", e))?;
        }
        let turns = Self::store(&tx, TURNS)?;
        for t in &batch.turns {
            turns.put(&ser(t)?, None).map_err(|e| idb_err("writing a turn", e))?;
        }
        for u in &batch.units {
            units.put(&unit_to_js(u)?, None).map_err(|e| idb_err("writing a unit", e))?;
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
