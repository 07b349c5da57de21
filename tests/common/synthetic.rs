//! A synthetic memory shaped like `npm run bench`'s (10 pair units a session, two random sentences a unit, random
//! int8 vectors), written straight into a store: for tests of opening large memories, which never embed.

use async_trait::async_trait;
use loci::embed::{default_model_dir, Batch, Device, EmbedConfig, Embedder, Runtime, DIM};
use loci::store::{synthetic_batch, MemStore, Rows, Store};
use loci::text::WordPiece;
use pollster::block_on;

use super::Rng;

/// Open never embeds: a runtime that is never called.
pub struct NoModel;

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
pub fn populate(store: &MemStore, units: u32) {
    populate_range(store, 0, units, 0x9e37_79b9_7f4a_7c15);
}

/// Writes units `start + 1 ..= end` (turns `2 * start + 1 ..= 2 * end`), their words drawn from `seed`.
pub fn populate_range(store: &MemStore, start: u32, end: u32, seed: u64) {
    let units = end;
    let words: Vec<&str> = WORDS.split(' ').collect();
    let mut rng = Rng(seed);
    let per = 10;
    let sentence = |rng: &mut Rng| {
        let n = 6 + rng.below(20) as usize;
        let mut s: Vec<&str> = (0..n).map(|_| words[rng.below(words.len() as u64) as usize]).collect();
        s.push(".");
        s.join(" ")
    };
    let mut done = start;
    while done < units {
        let end = (done + 2000).min(units);
        let batch = synthetic_batch(done, end, units, per, |_| {
            let codes: Vec<i8> = (0..DIM).map(|_| (rng.below(255) as i32 - 127) as i8).collect();
            ([sentence(&mut rng), sentence(&mut rng)], Rows::Int8 { codes, scales: vec![0.01] })
        });
        block_on(store.write(batch)).expect("write");
        done = end;
    }
}

/// A stand-in for the model where only the cost of what follows the embedding is measured: hidden states drawn
/// from the token ids (the same text always gets the same vector), in microseconds.
pub struct HashModel;

#[async_trait(?Send)]
impl Runtime for HashModel {
    async fn last_hidden_state(&mut self, batch: &Batch) -> loci::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(batch.rows * batch.seq * DIM);
        for (i, &id) in batch.input_ids.iter().enumerate() {
            let mut rng = Rng(((id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i % batch.seq) as u64) | 1);
            out.extend((0..DIM).map(|_| rng.below(2001) as f32 / 1000.0 - 1.0));
        }
        Ok(out)
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
}

/// The real tokenizer over `runtime` (a stand-in for the model: [`NoModel`], [`HashModel`]).
pub fn embedder_over<R: Runtime>(runtime: R) -> Embedder<R> {
    let tokenizer =
        std::fs::read_to_string(default_model_dir().join("tokenizer.json")).expect("tokenizer.json (npm run setup)");
    Embedder::new(WordPiece::from_tokenizer_json(&tokenizer).expect("tokenizer"), runtime, EmbedConfig::default())
        .expect("embedder")
}
