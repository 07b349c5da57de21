//! The lexical index a memory keeps in its store (`Store::put_lexical`): the next open adopts it instead of
//! building it again, and gets the very index a build would give (document numbers, term ids and statistics all
//! equal, compared as persisted bytes); anything it no longer matches is rebuilt, never used.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::synthetic::{embedder_over, populate, populate_range, NoModel};
use loci::index::Bm25Index;
use loci::memory::{Memory, MemoryConfig};
use loci::store::{MemStore, Store, WriteBatch};
use loci::types::Unit;
use pollster::block_on;

fn open(store: &MemStore) -> Memory<MemStore, NoModel> {
    let embedder = embedder_over(NoModel);
    block_on(Memory::open(store.clone(), embedder, MemoryConfig::default())).expect("open")
}

/// The index of a memory opened over `store`, built from scratch (whatever the store keeps is refused first).
fn built(store: &MemStore) -> Vec<u8> {
    let kept = block_on(store.load_lexical()).unwrap();
    block_on(store.put_lexical(12, &|sink| sink(b"not an index"))).unwrap();
    let mut memory = open(store);
    memory.index_lexical(usize::MAX);
    let bytes = memory.lexical_index().to_bytes(0);
    if let Some(k) = kept {
        block_on(store.put_lexical(k.len(), &|sink| sink(&k))).unwrap();
    }
    bytes
}

/// Opens, says how many units were left to index after open, finishes the index, keeps it if due.
fn open_and_index(store: &MemStore) -> (usize, Vec<u8>, bool) {
    let mut memory = open(store);
    let left = memory.index_lexical(0);
    memory.index_lexical(usize::MAX);
    let saved = block_on(memory.save_lexical()).unwrap();
    (left, memory.lexical_index().to_bytes(0), saved)
}

#[test]
fn a_kept_lexical_index_is_adopted_only_while_it_matches_the_memory() {
    let store = MemStore::new();
    populate(&store, 3_000);

    // First open: nothing kept, the whole index built, then kept.
    let (left, first, saved) = open_and_index(&store);
    assert_eq!((left, saved), (3_000, true));
    assert!(block_on(store.load_lexical()).unwrap().is_some());
    assert_eq!(first, built(&store));

    // Second open: adopted whole, nothing left to index, nothing written again.
    let (left, second, saved) = open_and_index(&store);
    assert_eq!((left, saved), (0, false));
    assert_eq!(second, first);

    // Units added since: only they are indexed, after the kept ones, as a build in open order numbers them.
    populate_range(&store, 3_000, 3_200, 7);
    let (left, grown, saved) = open_and_index(&store);
    assert_eq!((left, saved), (200, false), "200 new units are too few to keep the index again");
    assert_eq!(grown, built(&store));
    // Many more: the kept index covers under 90% of the units, so the open keeps its own.
    populate_range(&store, 3_200, 4_000, 8);
    let (left, grown, saved) = open_and_index(&store);
    assert_eq!((left, saved), (1_000, true));
    assert_eq!(grown, built(&store));
    assert_eq!(open_and_index(&store).0, 0);

    // A unit whose turns changed under the same id (no store writes that, but a kept index must not trust it):
    // the fingerprint differs, and the index is built again.
    let mut unit = block_on(store.load()).unwrap().unblocked().units.remove(5);
    unit.unit = Unit { turn_ids: vec![unit.unit.turn_ids[0]], ..unit.unit };
    block_on(store.write(WriteBatch { units: vec![unit], ..Default::default() })).unwrap();
    let (left, rebuilt, saved) = open_and_index(&store);
    assert_eq!((left, saved), (4_000, true));
    assert_eq!(rebuilt, built(&store));
    assert_ne!(rebuilt, grown, "unit 6 lost a turn's words");

    // A write that deletes drops what the store kept; the next open builds and keeps the index again.
    block_on(store.write(WriteBatch { delete_units: vec![10], ..Default::default() })).unwrap();
    assert!(block_on(store.load_lexical()).unwrap().is_none());
    let (left, after_delete, saved) = open_and_index(&store);
    assert_eq!((left, saved), (3_999, true));
    assert_eq!(after_delete, built(&store));
    assert_eq!(open_and_index(&store).0, 0);

    // Damaged bytes are refused, and the index built again.
    let mut damaged = block_on(store.load_lexical()).unwrap().unwrap();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x5a;
    damaged.truncate(damaged.len() - 1);
    block_on(store.put_lexical(damaged.len(), &|sink| sink(&damaged))).unwrap();
    let (left, _, saved) = open_and_index(&store);
    assert_eq!((left, saved), (3_999, true));
}

#[test]
fn a_forget_keeps_the_index_of_what_is_left() {
    let store = MemStore::new();
    populate(&store, 2_000);
    let mut memory = open(&store);
    memory.index_lexical(500); // a forget while the index is being built, as well
    block_on(memory.forget_session("bench-3")).unwrap();
    // The forget's write dropped the kept index, and the rebuilt one took its place.
    let kept = block_on(store.load_lexical()).unwrap().expect("kept after the forget");
    assert_eq!(memory.index_lexical(0), 0);
    assert!(!block_on(memory.save_lexical()).unwrap(), "nothing more to keep");
    let index = memory.lexical_index().to_bytes(0);
    drop(memory);
    assert_eq!(index, built(&store));
    let (kept, _) = Bm25Index::from_bytes(kept).expect("a well-formed index");
    assert_eq!(kept.to_bytes(0), index, "the forget kept the index of what is left");
    let (left, adopted, _) = open_and_index(&store);
    assert_eq!((left, &adopted), (0, &index));
}
