//! An in-memory [`Store`] for native tests and the CLI. Clones share the same data, so "closing and reopening" a
//! memory over a clone behaves like a reload.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;

use super::{Meta, RowBlock, Rows, Snapshot, Store, StoredUnit, WriteBatch, WritePieces};
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
    lexical: Option<Vec<u8>>,
    #[cfg(feature = "sync")]
    sync: Option<Vec<u8>>,
}

/// Shared in-memory storage; `fail_writes` simulates a backend that refuses writes (e.g. quota).
#[derive(Clone, Default, Debug)]
pub struct MemStore {
    data: Rc<RefCell<Data>>,
    fail_writes: Rc<RefCell<bool>>,
    /// Writes left before they fail (see [`MemStore::fail_writes_after`]).
    writes_left: Rc<RefCell<Option<usize>>>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes subsequent writes fail with a quota error (for tests of "nothing is lost or half-written").
    pub fn set_fail_writes(&self, fail: bool) {
        *self.fail_writes.borrow_mut() = fail;
        *self.writes_left.borrow_mut() = None;
    }

    /// Lets `n` more writes commit, then fails every later one (a crash after the `n`th commit, for tests of what a
    /// cut between writes leaves); `set_fail_writes(false)` ends it.
    pub fn fail_writes_after(&self, n: usize) {
        *self.writes_left.borrow_mut() = Some(n);
    }

    /// Whether this write fails, counting it against [`MemStore::fail_writes_after`].
    fn refuses_write(&self) -> bool {
        if let Some(left) = self.writes_left.borrow_mut().as_mut() {
            if *left == 0 {
                *self.fail_writes.borrow_mut() = true;
            } else {
                *left -= 1;
            }
        }
        *self.fail_writes.borrow()
    }
}

#[async_trait(?Send)]
impl Store for MemStore {
    async fn load(&self) -> Result<Snapshot> {
        let d = self.data.borrow();
        // Int8 rows (as a store that quantises keeps them) travel in one block, as IndexedDB's do; float rows (fresh
        // from the embedder) stay with their units.
        // (Only whole rows: a damaged unit stays with its rows, for open to set it aside.)
        let dim = d.meta.as_ref().map_or(0, |m| m.dim as usize);
        let int8 = !d.units.is_empty()
            && d.units.values().all(|u| matches!(u.vectors, Rows::Int8 { .. }) && u.vectors.is_whole(dim));
        let (units, block) = if int8 {
            let (mut codes, mut rows) = (0, 0);
            for u in d.units.values() {
                if let Rows::Int8 { codes: c, scales } = &u.vectors {
                    (codes, rows) = (codes + c.len(), rows + scales.len());
                }
            }
            let mut block = RowBlock::with_capacity(rows, 0, d.units.len());
            block.codes.reserve_exact(codes);
            for u in d.units.values() {
                if let Rows::Int8 { codes, scales } = &u.vectors {
                    block.push(&u.unit, codes, scales);
                }
            }
            (Vec::new(), Some(block))
        } else {
            (d.units.values().cloned().collect(), None)
        };
        Ok(Snapshot {
            meta: d.meta.clone(),
            sessions: d.sessions.values().cloned().collect(),
            turns: d.turns.values().cloned().collect(),
            units,
            block,
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
        if self.refuses_write() {
            return Err(Error::QuotaExceeded("simulated quota error".into()));
        }
        let mut d = self.data.borrow_mut();
        if !(batch.delete_units.is_empty() && batch.delete_turns.is_empty() && batch.delete_sessions.is_empty()) {
            d.lexical = None; // see `Store::put_lexical`
        }
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
        #[cfg(feature = "sync")]
        if let Some(sync) = batch.sync {
            d.sync = Some(sync);
        }
        Ok(())
    }

    async fn clear(&self) -> Result<()> {
        let mut d = self.data.borrow_mut();
        #[cfg(feature = "sync")]
        let sync = d.sync.take();
        *d = Data::default();
        #[cfg(feature = "sync")]
        {
            d.sync = sync;
        }
        Ok(())
    }

    #[cfg(feature = "sync")]
    async fn load_sync(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.data.borrow().sync.clone())
    }

    async fn put_lexical(&self, len: usize, write: &WritePieces<'_>) -> Result<()> {
        if *self.fail_writes.borrow() {
            return Err(Error::QuotaExceeded("simulated quota error".into()));
        }
        let mut bytes = Vec::with_capacity(len);
        write(&mut |piece| bytes.extend_from_slice(piece));
        if bytes.len() != len {
            return Err(Error::Storage(format!("a lexical index of {} bytes, announced as {len}", bytes.len())));
        }
        self.data.borrow_mut().lexical = Some(bytes);
        Ok(())
    }

    async fn load_lexical(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.data.borrow().lexical.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Unit, UnitMode};

    fn unit(id: u32, rows: Rows) -> StoredUnit {
        StoredUnit { unit: Unit { id, session: "s".into(), turn_ids: vec![id as u64] }, vectors: rows }
    }

    #[test]
    fn int8_rows_load_in_one_block_that_splits_back() {
        let store = MemStore::new();
        let meta = Meta {
            schema: 4,
            model: "m".into(),
            dim: 2,
            unit_mode: UnitMode::Pair,
            next_turn: 1,
            next_unit: 4,
            embed_pending: Vec::new(),
        };
        let units = vec![
            unit(1, Rows::Int8 { codes: vec![1, 2], scales: vec![0.5] }),
            unit(2, Rows::Int8 { codes: vec![3, 4, 5, 6], scales: vec![0.25, 0.75] }),
            unit(3, Rows::Int8 { codes: vec![], scales: vec![] }),
        ];
        let batch = WriteBatch { meta: Some(meta), units: units.clone(), ..Default::default() };
        pollster::block_on(store.write(batch)).unwrap();
        let loaded = pollster::block_on(store.load()).unwrap();
        let block = loaded.block.clone().expect("int8 rows travel in a block");
        assert_eq!(
            (block.codes, block.scales, block.rows),
            (vec![1, 2, 3, 4, 5, 6], vec![0.5, 0.25, 0.75], vec![1, 2, 0])
        );
        // The units travel in the block's columns, none on their own.
        assert!(loaded.units.is_empty());
        assert_eq!(
            block.units.to_units().collect::<Vec<_>>(),
            units.iter().map(|u| u.unit.clone()).collect::<Vec<_>>()
        );
        assert_eq!(block.units.session_names(), ["s"]);
        assert_eq!(loaded.unblocked().units, units);
        // Float rows (and damaged ones) stay with their units.
        let floats = unit(4, Rows::F32(vec![0.6, 0.8]));
        pollster::block_on(store.write(WriteBatch { units: vec![floats], ..Default::default() })).unwrap();
        assert_eq!(pollster::block_on(store.load()).unwrap().block, None);
    }
}
