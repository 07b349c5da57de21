//! Distill: Nemori's episodic and semantic memory, built in the background from stored turns.
//!
//! segment (window of w turns → episodes) → narrate (title + third-person narrative, absolute dates) → merge (the
//! K_e nearest episodes; same ongoing event or none) → predict (episode + the K_s facts it evokes above τ) →
//! distill (raw turns vs prediction → only what was missed) → consolidate (each new fact vs its K_m nearest → NEW /
//! MERGE / CONFLICT; old facts are superseded, never erased).
//!
//! Plain Rust over [`Llm`](crate::llm::Llm) and [`TextEmbed`]: no JavaScript, no storage. The work runs as
//! [`Job`]s whose results are one [`DistillWrite`] each, so the caller persists a job's whole effect atomically or
//! nothing; a failed job changes nothing and is retried. Holes of the reference code closed here: turns the model
//! leaves out are carried over, never dropped; invalid partitions are repaired; jobs run one at a time in order
//! (the reference runs them concurrently on stale data); every LLM reply is schema-checked.
//!
//! Batching: each step is one call per window (all its episodes, all its new facts), and merge, predict and
//! consolidate are skipped when nothing is similar enough to offer — so a window of w = 20 turns costs 2–6 calls.

pub mod model;
pub(crate) mod pipeline;
pub mod segment;

use async_trait::async_trait;
use serde::Serialize;

pub use model::{
    DistillItem, DistillMeta, DistillRecords, DistillState, DistillWrite, Episode, Fact, FactStatus, Job, JobKind,
};
pub use pipeline::{run_job, JobInput, Phase, Spend};

use crate::embed::{normalize, Embedder, Runtime, DIM};
use crate::error::Result;

/// Distillation settings; defaults are the Nemori paper's where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DistillConfig {
    /// w: buffered turns of a session that trigger segmentation (paper: 20).
    pub window: usize,
    /// K_e: episodes offered as merge candidates (paper: 5).
    pub merge_candidates: usize,
    /// Cosine below which an episode is not offered for a merge (ours: saves a call when nothing is close).
    pub merge_floor: f32,
    /// K_s: facts a new episode may evoke for prediction (paper: 10).
    pub predict_facts: usize,
    /// τ: cosine a fact needs to be evoked. The paper's 0.70 (Chroma's `1 − squared L2` = 2·cos − 1, i.e. cosine
    /// 0.85) was set for text-embedding-3-small; under MiniLM an episode and the facts distilled from it — a topic the
    /// memory knows, by construction — sit at cosine 0.6–0.85 (docs/BENCHMARKS.md, "evocation calibration"), and
    /// 0.85 evoked nothing on LoCoMo, so prediction never ran. Ours: 0.6.
    pub predict_threshold: f32,
    /// K_m: nearest facts a new fact is consolidated against (paper: 5).
    pub consolidate_candidates: usize,
    /// Cosine below which an existing fact is not offered for consolidation (ours: saves a call).
    pub consolidate_floor: f32,
    /// A job that failed this many times is parked (kept, visible in stats, retried on request).
    pub max_attempts: u32,
    /// First retry delay after a failure; doubles per attempt up to `max_backoff_ms`.
    pub backoff_ms: f64,
    pub max_backoff_ms: f64,
    /// Output cap per call, over the one each step sets for what it asks (`None`: the step's own).
    pub max_tokens: Option<u32>,
}

impl Default for DistillConfig {
    fn default() -> Self {
        DistillConfig {
            window: 20,
            merge_candidates: 5,
            merge_floor: 0.5,
            predict_facts: 10,
            predict_threshold: 0.6,
            consolidate_candidates: 5,
            consolidate_floor: 0.6,
            max_attempts: 5,
            backoff_ms: 2_000.0,
            max_backoff_ms: 300_000.0,
            max_tokens: None,
        }
    }
}

impl DistillConfig {
    /// The longest window a session's last segmentation takes at once (so a session of 22 turns is one window,
    /// not 20 + 2).
    pub fn last_window(&self) -> usize {
        self.window + self.window / 2
    }

    /// Delay before attempt `attempts + 1`.
    pub fn backoff(&self, attempts: u32) -> f64 {
        (self.backoff_ms * 2f64.powi(attempts.saturating_sub(1).min(30) as i32)).min(self.max_backoff_ms)
    }
}

/// Texts → unit vectors, one per text. The memory's [`Embedder`] in the product; anything deterministic in tests.
#[async_trait(?Send)]
pub trait TextEmbed {
    async fn embed_texts(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

#[async_trait(?Send)]
impl<R: Runtime> TextEmbed for Embedder<R> {
    /// The mean of a text's window vectors, renormalised (most texts are one window).
    async fn embed_texts(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut out = vec![vec![0.0f32; DIM]; texts.len()];
        for w in self.embed(&refs).await? {
            out[w.text].iter_mut().zip(&w.vector).for_each(|(a, b)| *a += b);
        }
        out.iter_mut().for_each(|v| normalize(v));
        Ok(out)
    }
}

/// Dot product of unit vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests;
