//! Store: where a memory persists. A small async trait with an IndexedDB implementation in the browser and an
//! in-memory one for native tests and the CLI. Every write is one batch, applied atomically (one transaction).
//! Vectors travel as [`Rows`]: float rows from the embedder, int8 rows (codes + one scale per row) from storage,
//! so that a large memory is never materialised as floats at open.

#[cfg(all(target_arch = "wasm32", feature = "bench"))]
pub mod bench;
#[cfg(target_arch = "wasm32")]
pub mod idb;
pub mod mem;
#[cfg(target_arch = "wasm32")]
pub mod seal;
pub mod turn_chunk;

use async_trait::async_trait;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

pub use crate::index::vectors::Rows;
pub use mem::MemStore;

use crate::error::Result;
use crate::types::distilled::{DistillRecords, DistillWrite};
pub use crate::types::{pack_f32, unpack_f32};
use crate::types::{Session, Turn, Turns, Unit, UnitMode};

/// Bumped when the stored layout changes; an unknown schema is refused rather than misread.
/// 2: vectors as int8 in chunk records of [`VECTOR_CHUNK`] units (IndexedDB), no longer inside unit records.
/// 3: distillation persisted (IndexedDB stores `episodes`, `facts`, `jobs`, and a `distill` record in `meta`).
/// 4: turns packed into chunk records of [`TURN_CHUNK`] turns (one JSON string each), units inside the vector chunks
/// (IndexedDB), no longer one record per turn and per unit.
/// 5: turn chunks in binary columns with their texts as one LZ4 block ([`turn_chunk`]), kept as they are in RAM.
pub const SCHEMA_VERSION: u32 = 5;

/// Units per vector chunk record: unit `id` lives in chunk `id / VECTOR_CHUNK`, so open reads about
/// `units / VECTOR_CHUNK` records of vectors, and a write rewrites only the chunks it touches.
pub const VECTOR_CHUNK: u32 = 512;

/// Turns per turn chunk record: turn `id` lives in chunk `id / TURN_CHUNK` (IndexedDB, schema 4).
pub const TURN_CHUNK: u64 = 512;

/// What a database was built with, and its id counters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub schema: u32,
    pub model: String,
    pub dim: u32,
    pub unit_mode: UnitMode,
    pub next_turn: u64,
    pub next_unit: u32,
    /// Units stored with only some of their windows embedded, oldest first: `addMessages` embeds a few windows of
    /// a long text at once and the rest in the background ([`crate::memory::Memory::embed_pending_step`]), so a
    /// reload in the middle resumes. Ids of units removed since are dropped when their turn comes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embed_pending: Vec<u32>,
}

/// A unit with its vectors: one row of `dim` per window, as floats or int8.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredUnit {
    pub unit: Unit,
    pub vectors: Rows,
}

/// Everything a memory holds, as loaded at open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub meta: Option<Meta>,
    pub sessions: Vec<Session>,
    /// Held compactly (one string per page of texts), as decoded chunk by chunk: a memory keeps them so.
    pub turns: Turns,
    /// Units with rows of their own (float rows, or any a store does not hand over in a block).
    pub units: Vec<StoredUnit>,
    /// When present, more units with their int8 rows in one buffer, which becomes the vector index as it is, and the
    /// units themselves in columns. One small buffer per unit, copied into the index, held every vector twice at
    /// the peak of an open (~45 MB at 100,000 units); a [`StoredUnit`] per unit (~140 bytes with its session
    /// string and turn list) held ~13 MB more.
    pub block: Option<RowBlock>,
    /// Episodes, facts, jobs and the segmentation buffer (empty when distillation never ran).
    pub distill: DistillRecords,
    /// Records that did not decode, set aside (left where they are, or copied aside before their slot was
    /// rewritten), never deleted: the rest of the memory opens without them.
    pub quarantined: Vec<Quarantined>,
}

impl Snapshot {
    /// The same content with each unit carrying its own rows (no [`block`](Self::block)), in id order: the form to
    /// compare two loads by, whichever way their stores hand vectors over.
    pub fn unblocked(mut self) -> Snapshot {
        if let Some(block) = self.block.take() {
            let dim = if block.scales.is_empty() { 0 } else { block.codes.len() / block.scales.len() };
            self.units.extend(block.into_units(dim));
            self.units.sort_by_key(|u| u.unit.id);
        }
        self
    }
}

/// Units in columns: ids, session ids (each name once), and their turn ids back to back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnitColumns {
    ids: Vec<u32>,
    sessions: Vec<u32>,
    names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    turn_ids: Vec<u64>,
    /// Where each unit's turn ids end in `turn_ids`.
    turn_ends: Vec<u32>,
}

impl UnitColumns {
    pub fn with_capacity(units: usize) -> Self {
        UnitColumns {
            ids: Vec::with_capacity(units),
            sessions: Vec::with_capacity(units),
            turn_ends: Vec::with_capacity(units),
            // Pair units, the default: two turns each.
            turn_ids: Vec::with_capacity(units * 2),
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn push(&mut self, id: u32, session: &str, turn_ids: &[u64]) {
        let s = match self.name_ids.get(session) {
            Some(&s) => s,
            None => {
                let s = self.names.len() as u32;
                self.names.push(session.to_string());
                self.name_ids.insert(session.to_string(), s);
                s
            }
        };
        self.ids.push(id);
        self.sessions.push(s);
        self.turn_ids.extend_from_slice(turn_ids);
        self.turn_ends.push(self.turn_ids.len() as u32);
    }

    /// Turn ids of all the units together.
    pub fn turn_id_count(&self) -> usize {
        self.turn_ids.len()
    }

    /// The session ids the units name, each once ([`iter`](Self::iter) gives their positions here).
    pub fn session_names(&self) -> &[String] {
        &self.names
    }

    /// (unit id, position of its session in [`session_names`](Self::session_names), turn ids), in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u32, usize, &[u64])> + '_ {
        (0..self.ids.len()).map(|i| {
            let start = i.checked_sub(1).map_or(0, |p| self.turn_ends[p] as usize);
            (self.ids[i], self.sessions[i] as usize, &self.turn_ids[start..self.turn_ends[i] as usize])
        })
    }

    /// Each unit as a [`Unit`].
    pub fn to_units(&self) -> impl Iterator<Item = Unit> + '_ {
        self.iter().map(|(id, s, turns)| Unit { id, session: self.names[s].clone(), turn_ids: turns.to_vec() })
    }
}

/// Int8 rows of several units back to back: `rows[i]` rows (of `dim` codes and one scale each) for the i-th of
/// `units`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowBlock {
    pub codes: Vec<i8>,
    pub scales: Vec<f32>,
    pub rows: Vec<u32>,
    pub units: UnitColumns,
}

impl RowBlock {
    /// An empty block with room for `rows` rows of `dim` and `units` units.
    pub fn with_capacity(rows: usize, dim: usize, units: usize) -> Self {
        RowBlock {
            codes: Vec::with_capacity(rows * dim),
            scales: Vec::with_capacity(rows),
            rows: Vec::with_capacity(units),
            units: UnitColumns::with_capacity(units),
        }
    }

    /// Appends one unit with its rows.
    pub fn push(&mut self, unit: &Unit, codes: &[i8], scales: &[f32]) {
        self.codes.extend_from_slice(codes);
        self.scales.extend_from_slice(scales);
        self.rows.push(scales.len() as u32);
        self.units.push(unit.id, &unit.session, &unit.turn_ids);
    }

    /// Each unit with its own rows.
    pub fn into_units(self, dim: usize) -> Vec<StoredUnit> {
        let (mut row, mut code) = (0usize, 0usize);
        let mut out = Vec::with_capacity(self.units.len());
        for (unit, &n) in self.units.to_units().zip(&self.rows) {
            let n = n as usize;
            // A block shorter than its counts (never written so) leaves rows that do not match, set aside at open.
            let vectors = Rows::Int8 {
                codes: self.codes.get(code..code + n * dim).map(<[i8]>::to_vec).unwrap_or_default(),
                scales: self.scales.get(row..row + n).map(<[f32]>::to_vec).unwrap_or_default(),
            };
            out.push(StoredUnit { unit, vectors });
            row += n;
            code += n * dim;
        }
        out
    }
}

/// A stored record that did not decode.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Quarantined {
    /// Its object store (`turnChunks`, `vectors`, `sessions`, `episodes`, `facts`, `jobs`).
    pub store: String,
    pub key: String,
    pub reason: String,
}

/// One atomic write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteBatch {
    pub meta: Option<Meta>,
    pub sessions: Vec<Session>,
    pub turns: Vec<Turn>,
    pub units: Vec<StoredUnit>,
    pub delete_units: Vec<u32>,
    /// Turns and sessions to erase (forgetting a session).
    pub delete_turns: Vec<u64>,
    pub delete_sessions: Vec<String>,
    /// Distillation's changes, committed with the rest (e.g. new turns and the jobs they trigger).
    pub distill: DistillWrite,
    /// The memory's sync record (its log, the turn map), replacing the one kept: in the same transaction as the
    /// turns it maps.
    #[cfg(feature = "sync")]
    pub sync: Option<Vec<u8>>,
}

/// Units `start + 1 ..= end` of a synthetic memory of `units` pair units, `per` to a session (session `bench-N`, a
/// day apart; turns `2u - 1`, `2u`), as one write: the shape `npm run bench` and the native heap and lexical tests
/// store. `unit(u)` gives the u-th unit's two turn texts and its vectors. Not part of the API.
#[doc(hidden)]
pub fn synthetic_batch(
    start: u32,
    end: u32,
    units: u32,
    per: u32,
    mut unit: impl FnMut(u32) -> ([String; 2], Rows),
) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for u in start..end {
        let s = u / per;
        let session = format!("bench-{s}");
        let time = 1.6e12 + s as f64 * 86_400_000.0;
        if u % per == 0 || u == start {
            let turn_count = ((s + 1) * per).min(units) - s * per;
            batch.sessions.push(Session {
                id: session.clone(),
                first_time: time,
                last_time: time + turn_count as f64 * 2000.0,
                turn_count: turn_count * 2,
                title: None,
            });
        }
        let seq = (u % per) * 2;
        let ids = [u as u64 * 2 + 1, u as u64 * 2 + 2];
        let (texts, vectors) = unit(u);
        for (i, (&id, text)) in ids.iter().zip(texts).enumerate() {
            batch.turns.push(Turn {
                id,
                session: session.clone(),
                seq: seq + i as u32,
                speaker: if i == 0 { "user".into() } else { "assistant".into() },
                text,
                caption: None,
                time: time + (seq + i as u32) as f64 * 1000.0,
                ingested: time,
            });
        }
        batch.units.push(StoredUnit { unit: Unit { id: u + 1, session, turn_ids: ids.to_vec() }, vectors });
    }
    batch.meta = Some(Meta {
        schema: SCHEMA_VERSION,
        model: crate::embed::MODEL_ID.into(),
        dim: crate::embed::DIM as u32,
        unit_mode: UnitMode::Pair,
        next_turn: end as u64 * 2 + 1,
        next_unit: end + 1,
        embed_pending: Vec::new(),
    });
    batch
}

/// A record's JSON bytes (a store's records, before sealing or packing).
pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| crate::error::Error::Storage(format!("encoding a record: {e}")))
}

/// Hands bytes to the sink it is given, in pieces (see [`Store::put_lexical`]).
pub type WritePieces<'a> = dyn for<'s> Fn(&'s mut (dyn FnMut(&[u8]) + 's)) + 'a;

/// Persistence for one memory.
#[async_trait(?Send)]
pub trait Store {
    /// Reads everything (vectors in bulk).
    async fn load(&self) -> Result<Snapshot>;
    /// Applies the batch atomically: all of it or none of it.
    async fn write(&self, batch: WriteBatch) -> Result<()>;
    /// Erases everything of this memory (with the feature `sync`, all but its sync record).
    async fn clear(&self) -> Result<()>;
    /// The sync record the last write with one kept ([`WriteBatch::sync`]).
    #[cfg(feature = "sync")]
    async fn load_sync(&self) -> Result<Option<Vec<u8>>>;
    /// Keeps the lexical index as bytes ([`crate::index::Bm25Index::to_bytes`]), for the next open to adopt rather
    /// than rebuild. A cache, not content: a store drops it with any write that deletes turns, units or sessions
    /// (the open that follows builds the index again), and the memory checks it against its units before use.
    ///
    /// `write` hands the `len` bytes to the sink it is given, in pieces
    /// ([`crate::index::Bm25Index::write_persisted`]): a store copies them out of the wasm heap as they come.
    async fn put_lexical(&self, len: usize, write: &WritePieces<'_>) -> Result<()>;
    /// The lexical index as [`put_lexical`](Self::put_lexical) last kept it, if the store still has it. Read apart
    /// from [`load`](Self::load), once the open's other records are freed: the wasm heap keeps its high-water mark.
    async fn load_lexical(&self) -> Result<Option<Vec<u8>>>;
    /// Approximate bytes used, when the backend can tell.
    async fn bytes_used(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let v = [0.5f32, -1.25, 3.0e-7];
        assert_eq!(unpack_f32(&pack_f32(&v)).unwrap(), v);
        assert!(unpack_f32(&[1, 2, 3]).is_none());
    }
}
