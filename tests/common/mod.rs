//! Shared set-up for native tests: the real int8 model through the onnxruntime shared library.
#![allow(dead_code)]

pub mod sync;
pub mod synthetic;

use loci::embed::{default_dylib_path, default_model_dir, EmbedConfig, Embedder, OnnxRuntime};
use loci::text::WordPiece;
use loci::types::{MessageInput, TimeInput};

/// The real embedder; panics with the command to run when setup has not been done.
pub fn embedder(config: EmbedConfig) -> Embedder<OnnxRuntime> {
    embedder_around(config, |runtime| runtime)
}

/// The real embedder, its runtime wrapped by `wrap` (to watch or restrict its calls).
pub fn embedder_around<R: loci::embed::Runtime>(
    config: EmbedConfig,
    wrap: impl FnOnce(OnnxRuntime) -> R,
) -> Embedder<R> {
    let dir = default_model_dir();
    let model = std::fs::read(dir.join("model.onnx"))
        .unwrap_or_else(|e| panic!("{}: {e}; run `node scripts/setup.mjs native`", dir.display()));
    let tokenizer = std::fs::read_to_string(dir.join("tokenizer.json")).expect("tokenizer.json");
    let dylib = default_dylib_path().expect("onnxruntime library path; run `node scripts/setup.mjs native`");
    let runtime = OnnxRuntime::native(&model, &dylib, 1).expect("onnxruntime session");
    Embedder::new(WordPiece::from_tokenizer_json(&tokenizer).expect("tokenizer"), wrap(runtime), config)
        .expect("embedder")
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// A message from `speaker` at an ISO `time`.
pub fn msg(speaker: &str, content: &str, time: &str) -> MessageInput {
    MessageInput {
        speaker: Some(speaker.into()),
        content: content.into(),
        time: Some(TimeInput::Text(time.into())),
        ..Default::default()
    }
}

/// A seeded xorshift64 generator: the same stream on every machine, with no dependency (the seed must not be 0).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
