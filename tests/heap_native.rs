//! Heap of a large open, natively: a counting allocator measures the bytes `Memory::open` of 100,000 synthetic pair
//! units (the shape of `npm run bench`'s memory: 10 units a session, two random sentences a unit) holds at its
//! peak and keeps once the lexical index is built. In the page the wasm memory only grows, so the peak is what
//! `wasm_heap_mb_100k` sees. `LOCI_HEAP_UNITS` changes the size; the bound is checked at the default size only.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use async_trait::async_trait;
use common::Rng;
use loci::embed::{default_model_dir, Batch, Device, EmbedConfig, Embedder, Runtime, DIM, MODEL_ID};
use loci::memory::{Memory, MemoryConfig};
use loci::store::{MemStore, Meta, Rows, Store, StoredUnit, WriteBatch, SCHEMA_VERSION};
use loci::text::WordPiece;
use loci::types::{Session, Turn, Unit, UnitMode};
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

/// Open never embeds: a runtime that is never called.
struct NoModel;

#[async_trait(?Send)]
impl Runtime for NoModel {
    async fn last_hidden_state(&mut self, _: &Batch) -> loci::Result<Vec<f32>> {
        unreachable!("open does not embed")
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
}

/// The words of the bench's synthetic sentences (src/store/bench.rs).
const WORDS: &str = "I we you my sister brother mom dad friend boss dog cat kids went tried bought cooked visited \
finished started planned booked missed loved hated found the a new old little big weekend trip hike concert recipe \
bread pasta garden tomatoes marathon knee physio doctor exam project deadline meeting flight Lisbon Berlin Tokyo lake \
beach museum bookshop novel guitar lesson painting yesterday today tomorrow last next week month summer winter \
morning evening with for about after before because and but so really finally again happy tired nervous excited \
proud sore late early cheap expensive quiet noisy";

/// Writes `units` pair units, 10 to a session, in batches as the bench does.
fn populate(store: &MemStore, units: u32) {
    let words: Vec<&str> = WORDS.split(' ').collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let per = 10;
    let sentence = |rng: &mut Rng| {
        let n = 6 + rng.below(20) as usize;
        let mut s: Vec<&str> = (0..n).map(|_| words[rng.below(words.len() as u64) as usize]).collect();
        s.push(".");
        s.join(" ")
    };
    let mut done = 0;
    while done < units {
        let end = (done + 2000).min(units);
        let mut batch = WriteBatch::default();
        for u in done..end {
            let s = u / per;
            let session = format!("bench-{s}");
            let time = 1.6e12 + s as f64 * 86_400_000.0;
            if u % per == 0 || u == done {
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
            for (i, &id) in ids.iter().enumerate() {
                batch.turns.push(Turn {
                    id,
                    session: session.clone(),
                    seq: seq + i as u32,
                    speaker: if i == 0 { "user".into() } else { "assistant".into() },
                    text: sentence(&mut rng),
                    caption: None,
                    time: time + (seq + i as u32) as f64 * 1000.0,
                    ingested: time,
                });
            }
            let codes: Vec<i8> = (0..DIM).map(|_| (rng.below(255) as i32 - 127) as i8).collect();
            batch.units.push(StoredUnit {
                unit: Unit { id: u + 1, session, turn_ids: ids.to_vec() },
                vectors: Rows::Int8 { codes, scales: vec![0.01] },
            });
        }
        batch.meta = Some(Meta {
            schema: SCHEMA_VERSION,
            model: MODEL_ID.into(),
            dim: DIM as u32,
            unit_mode: UnitMode::Pair,
            next_turn: end as u64 * 2 + 1,
            next_unit: end + 1,
        });
        block_on(store.write(batch)).expect("write");
        done = end;
    }
}

const MB: f64 = 1024.0 * 1024.0;

#[test]
fn open_of_a_large_memory_stays_within_its_heap_budget() {
    let default_units = 100_000;
    let units: u32 = std::env::var("LOCI_HEAP_UNITS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_units);
    let tokenizer =
        std::fs::read_to_string(default_model_dir().join("tokenizer.json")).expect("tokenizer.json (npm run setup)");
    let embedder =
        Embedder::new(WordPiece::from_tokenizer_json(&tokenizer).expect("tokenizer"), NoModel, EmbedConfig::default())
            .expect("embedder");
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
    if units == default_units {
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
