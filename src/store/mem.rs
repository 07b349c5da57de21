//! An in-memory [`Store`] for native tests and the CLI. Clones share the same data, so "closing and reopening" a
//! memory over a clone behaves like a reload.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;

use super::{Meta, Snapshot, Store, StoredUnit, WriteBatch};
use crate::error::{Error, Result};
use crate::types::distilled::{DistillRecords, DistillState};
use crate::types::{Session, Turn};

#[derive(Default, Debug)]
struct Data {
    meta: Option<Meta>,
    sessions: BTreeMap<String, Session>,
    turns: BTreeMap<u64, Turn>,
    units: BTreeMap<u32, StoredUnit>,
    distill: DistillState,
}

/// Shared in-memory storage; `fail_writes` simulates a backend that refuses writes (e.g. quota).
#[derive(Clone, Default, Debug)]
pub struct MemStore {
    data: Rc<RefCell<Data>>,
    fail_writes: Rc<RefCell<bool>>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes subsequent writes fail with a quota error (for tests of "nothing is lost or half-written").
    pub fn set_fail_writes(&self, fail: bool) {
        *self.fail_writes.borrow_mut() = fail;
    }
}

#[async_trait(?Send)]
impl Store for MemStore {
    async fn load(&self) -> Result<Snapshot> {
        let d = self.data.borrow();
        Ok(Snapshot {
            meta: d.meta.clone(),
            sessions: d.sessions.values().cloned().collect(),
            turns: d.turns.values().cloned().collect(),
            units: d.units.values().cloned().collect(),
            distill: DistillRecords {
                meta: Some(d.distill.meta.clone()).filter(|m| *m != Default::default()),
                episodes: d.distill.episodes.values().cloned().collect(),
                facts: d.distill.facts.values().cloned().collect(),
                jobs: d.distill.jobs.values().cloned().collect(),
            },
            quarantined: Vec::new(), // nothing here is ever encoded
        })
    }

    async fn write(&self, batch: WriteBatch) -> Result<()> {
        if *self.fail_writes.borrow() {
            return Err(Error::QuotaExceeded("simulated quota error".into()));
        }
        let mut d = self.data.borrow_mut();
        if let Some(m) = batch.meta {
            d.meta = Some(m);
        }
        for id in batch.delete_units {
            d.units.remove(&id);
        }
        for s in batch.sessions {
            d.sessions.insert(s.id.clone(), s);
        }
        for t in batch.turns {
            d.turns.insert(t.id, t);
        }
        for u in batch.units {
            d.units.insert(u.unit.id, u);
        }
        for id in batch.delete_turns {
            d.turns.remove(&id);
        }
        for id in batch.delete_sessions {
            d.sessions.remove(&id);
        }
        d.distill.apply(&batch.distill);
        Ok(())
    }

    async fn clear(&self) -> Result<()> {
        *self.data.borrow_mut() = Data::default();
        Ok(())
    }
}
