//! Heap of a large open, natively: a counting allocator measures the bytes `Memory::open` of 100,000 synthetic pair
//! units (the shape of `npm run bench`'s memory: 10 units a session, two random sentences a unit) holds at its
//! peak and keeps once the lexical index is built. In the page the wasm memory only grows, so the peak is what
//! `wasm_heap_mb_100k` sees. `LOCI_HEAP_UNITS` changes the size; the bound is checked at the default size only.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use common::synthetic::{embedder_over, populate, NoModel};
use loci::memory::{Memory, MemoryConfig};
use loci::store::MemStore;
use pollster::block_on;

/// The system allocator, counting live bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(live, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // Counted as a fresh allocation before the old one is freed: what a realloc that moves costs at its peak.
        grew(new);
        LIVE.fetch_sub(l.size(), Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MB: f64 = 1024.0 * 1024.0;

#[test]
fn open_of_a_large_memory_stays_within_its_heap_budget() {
    let default_units = 100_000;
    let units: u32 = std::env::var("LOCI_HEAP_UNITS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_units);
    let embedder = embedder_over(NoModel);
    let store = MemStore::new();
    populate(&store, units);

    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let mut memory = block_on(Memory::open(store.clone(), embedder, MemoryConfig::default())).expect("open");
    let (open_peak, open_kept) = (PEAK.load(Relaxed) - base, LIVE.load(Relaxed) - base);
    let before_lexical = LIVE.load(Relaxed);
    memory.index_lexical(usize::MAX);
    let (peak, kept) = (PEAK.load(Relaxed) - base, LIVE.load(Relaxed) - base);
    let stats = memory.stats();
    assert_eq!(stats.units, units as usize);
    eprintln!(
        "{units} units: open peak {:.1} MB, kept after open {:.1} MB; lexical index +{:.1} MB; \
         peak {:.1} MB, kept {:.1} MB (vectors {:.1} MB)",
        open_peak as f64 / MB,
        open_kept as f64 / MB,
        (LIVE.load(Relaxed) - before_lexical) as f64 / MB,
        peak as f64 / MB,
        kept as f64 / MB,
        stats.vector_bytes as f64 / MB,
    );
    // The next open adopts the index this one keeps (`Store::put_lexical`): the kept bytes and the index made of
    // them are both held for a moment, after the open's own records are freed.
    assert!(block_on(memory.save_lexical()).expect("keep the lexical index"));
    let embedder = memory.into_parts().1;
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let mut memory = block_on(Memory::open(store.clone(), embedder, MemoryConfig::default())).expect("reopen");
    assert_eq!(memory.index_lexical(0), 0, "the kept index was adopted");
    let (adopted_peak, adopted_kept) = (PEAK.load(Relaxed) - base, LIVE.load(Relaxed) - base);
    eprintln!(
        "reopened with the kept lexical index: peak {:.1} MB, kept {:.1} MB",
        adopted_peak as f64 / MB,
        adopted_kept as f64 / MB
    );
    drop(memory);
    if units == default_units {
        assert!(adopted_peak as f64 / MB <= 96.0, "peak {:.1} MB with the kept index", adopted_peak as f64 / MB);
        // A guard against regressions, not yet issue #15's target (the page's wasm memory after open at 100k units
        // ≤ 80 MB, which `npm run bench` measures): these structures peaked at 169 MB, then ~97 MB, and ~92 MB
        // since the postings are varint-coded (the lexical index takes ~4 MB where it took ~17).
        assert!(peak as f64 / MB <= 96.0, "peak {:.1} MB", peak as f64 / MB);
        assert!(
            (kept - open_kept) as f64 / MB <= 6.0,
            "the lexical index takes {:.1} MB",
            (kept - open_kept) as f64 / MB
        );
    }
}
