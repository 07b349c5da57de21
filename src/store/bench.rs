//! Bench only (cargo feature `bench`, never in the published package): fills a memory's IndexedDB with synthetic
//! sessions, turns and units with random unit vectors, written through [`IdbStore`] exactly as `addMessages` would
//! write them, but without running the model. `npm run bench` uses it to measure open and recall at 10^3–10^5
//! units. Not part of the API: hidden from the docs and from the default build.

use wasm_bindgen::prelude::*;

use super::idb::IdbStore;
use super::{Meta, Rows, Store, StoredUnit, WriteBatch, SCHEMA_VERSION};
use crate::embed::{DIM, MODEL_ID};
use crate::types::{Session, Turn, Unit, UnitMode};

const WORDS: &[&str] = &[
    "I",
    "we",
    "you",
    "my",
    "sister",
    "brother",
    "mom",
    "dad",
    "friend",
    "boss",
    "dog",
    "cat",
    "kids",
    "went",
    "tried",
    "bought",
    "cooked",
    "visited",
    "finished",
    "started",
    "planned",
    "booked",
    "missed",
    "loved",
    "hated",
    "found",
    "the",
    "a",
    "new",
    "old",
    "little",
    "big",
    "weekend",
    "trip",
    "hike",
    "concert",
    "recipe",
    "bread",
    "pasta",
    "garden",
    "tomatoes",
    "marathon",
    "knee",
    "physio",
    "doctor",
    "exam",
    "project",
    "deadline",
    "meeting",
    "flight",
    "Lisbon",
    "Berlin",
    "Tokyo",
    "lake",
    "beach",
    "museum",
    "bookshop",
    "novel",
    "guitar",
    "lesson",
    "painting",
    "yesterday",
    "today",
    "tomorrow",
    "last",
    "next",
    "week",
    "month",
    "summer",
    "winter",
    "morning",
    "evening",
    "with",
    "for",
    "about",
    "after",
    "before",
    "because",
    "and",
    "but",
    "so",
    "really",
    "finally",
    "again",
    "happy",
    "tired",
    "nervous",
    "excited",
    "proud",
    "sore",
    "late",
    "early",
    "cheap",
    "expensive",
    "quiet",
    "noisy",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Roughly normal (sum of four uniforms), enough for random directions.
    fn normalish(&mut self) -> f32 {
        (0..4).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32).sum::<f32>() - 2.0
    }
}

fn sentence(rng: &mut Rng) -> String {
    let n = 6 + rng.below(20);
    let mut s: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
    s.push(".");
    s.join(" ")
}

/// Writes `units` synthetic pair units (two turns each, `units_per_session` per session, one random unit vector
/// each) into the memory `name`, which must be empty or absent, in transactions of 2,000 units. Deterministic
/// for a `seed`. With a `passphrase`, the memory is created encrypted (as `Memory.open` with `encryption` would).
#[doc(hidden)]
#[wasm_bindgen(js_name = benchPopulate)]
pub async fn bench_populate(
    name: String,
    units: u32,
    units_per_session: u32,
    seed: u32,
    passphrase: Option<String>,
) -> Result<(), JsValue> {
    let err = |e: crate::Error| JsValue::from_str(&e.to_string());
    let key = passphrase.map(super::seal::KeySource::Passphrase);
    let store = IdbStore::open_with(&name, Default::default(), key.as_ref()).await.map_err(err)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed as u64);
    let per = units_per_session.max(1);
    let t0 = 1.6e12;
    let mut done = 0u32;
    while done < units {
        let end = (done + 2000).min(units);
        let mut batch = WriteBatch::default();
        for u in done..end {
            let s = u / per;
            let session = format!("bench-{s}");
            let time = t0 + s as f64 * 86_400_000.0;
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
            let mut v: Vec<f32> = (0..DIM).map(|_| rng.normalish()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            batch
                .units
                .push(StoredUnit { unit: Unit { id: u + 1, session, turn_ids: ids.to_vec() }, vectors: Rows::F32(v) });
        }
        batch.meta = Some(Meta {
            schema: SCHEMA_VERSION,
            model: MODEL_ID.into(),
            dim: DIM as u32,
            unit_mode: UnitMode::Pair,
            next_turn: end as u64 * 2 + 1,
            next_unit: end + 1,
        });
        store.write(batch).await.map_err(err)?;
        done = end;
    }
    store.close();
    Ok(())
}
