//! Bench only (cargo feature `bench`, never in the published package): fills a memory's IndexedDB with synthetic
//! sessions, turns and units with random unit vectors, written through [`IdbStore`] exactly as `addMessages` would
//! write them, but without running the model. `npm run bench` uses it to measure open and recall at 10^3–10^5
//! units. Not part of the API: hidden from the docs and from the default build.

use wasm_bindgen::prelude::*;

use super::idb::IdbStore;
use super::{Rows, Store};
use crate::embed::DIM;

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

/// A random unit vector.
fn direction(rng: &mut Rng) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM).map(|_| rng.normalish()).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// How far a unit strays from its session's direction: cosine ≈ 0.82 with it, ≈ 0.67 between two units of one
/// session, ≈ 0 across sessions.
const SPREAD: f32 = 0.7;

/// One synthetic unit: its session number, its two turns' texts, and its vector.
struct SyntheticUnit {
    session: u32,
    texts: [String; 2],
    vector: Vec<f32>,
}

/// The synthetic units of a memory, in id order (unit `i` has id `i + 1`), `per` to a session. A session is about
/// one topic: its units' vectors lie near one random direction, so that a query near that direction has a clear
/// top 10 (what the peers' agreement with an exact ranking is checked on). Every turn is a random sentence.
/// Deterministic for a seed.
struct Synthetic {
    rng: Rng,
    per: u32,
    next: u32,
    centroid: Vec<f32>,
}

impl Synthetic {
    fn new(per: u32, seed: u32) -> Self {
        Synthetic { rng: Rng(0x9e37_79b9_7f4a_7c15 ^ seed as u64), per: per.max(1), next: 0, centroid: Vec::new() }
    }
}

impl Iterator for Synthetic {
    type Item = SyntheticUnit;
    fn next(&mut self) -> Option<SyntheticUnit> {
        let u = self.next;
        self.next += 1;
        if u % self.per == 0 {
            self.centroid = direction(&mut self.rng);
        }
        let texts = [sentence(&mut self.rng), sentence(&mut self.rng)];
        let noise = direction(&mut self.rng);
        let mut v: Vec<f32> = self.centroid.iter().zip(&noise).map(|(c, n)| c + SPREAD * n).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        Some(SyntheticUnit { session: u / self.per, texts, vector: v })
    }
}

/// The synthetic units `benchPopulate` writes for the same arguments, for the peers of `npm run bench` to store
/// the same data: `{ vectors: Float32Array (units × 384), texts: string[] (a unit's two turns), sessions:
/// Uint32Array }`; and `queries` query vectors, each near a random session's direction (as a unit of it would be).
#[doc(hidden)]
#[wasm_bindgen(js_name = benchSyntheticUnits)]
pub fn bench_synthetic_units(units: u32, units_per_session: u32, seed: u32, queries: u32) -> Result<JsValue, JsValue> {
    let mut vectors = Vec::with_capacity(units as usize * DIM);
    let texts = js_sys::Array::new();
    let mut sessions = Vec::with_capacity(units as usize);
    let mut centroids = Vec::new();
    let mut synthetic = Synthetic::new(units_per_session, seed);
    for _ in 0..units {
        let unit = synthetic.next().expect("endless");
        if sessions.last() != Some(&unit.session) {
            centroids.push(synthetic.centroid.clone());
        }
        vectors.extend_from_slice(&unit.vector);
        texts.push(&format!("{} {}", unit.texts[0], unit.texts[1]).into());
        sessions.push(unit.session);
    }
    let mut rng = Rng(0x5851_f42d_4c95_7f2d ^ seed as u64);
    let mut query_vectors = Vec::with_capacity(queries as usize * DIM);
    for _ in 0..queries {
        let centroid = &centroids[rng.below(centroids.len().max(1))];
        let noise = direction(&mut rng);
        let mut v: Vec<f32> = centroid.iter().zip(&noise).map(|(c, n)| c + SPREAD * n).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        query_vectors.extend(v);
    }
    let out = js_sys::Object::new();
    let set = |k: &str, v: &JsValue| js_sys::Reflect::set(&out, &k.into(), v).map(|_| ());
    set("vectors", &js_sys::Float32Array::from(vectors.as_slice()).into())?;
    set("texts", &texts.into())?;
    set("sessions", &js_sys::Uint32Array::from(sessions.as_slice()).into())?;
    set("queries", &js_sys::Float32Array::from(query_vectors.as_slice()).into())?;
    Ok(out.into())
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
    let per = units_per_session.max(1);
    let mut synthetic = Synthetic::new(per, seed);
    let mut done = 0u32;
    while done < units {
        let end = (done + 2000).min(units);
        let batch = super::synthetic_batch(done, end, units, per, |_| {
            let unit = synthetic.next().expect("endless");
            (unit.texts, Rows::F32(unit.vector))
        });
        store.write(batch).await.map_err(err)?;
        done = end;
    }
    store.close();
    Ok(())
}
