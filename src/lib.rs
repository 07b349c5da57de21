//! loci: long-term memory for chatbots that runs entirely in the browser.
//!
//! The modules read as the pipeline: types → text → embed → index → recall → memory → sync → web bindings.

#[cfg(target_arch = "wasm32")]
pub mod assets;
pub mod distill;
pub mod embed;
pub mod error;
#[cfg(not(target_arch = "wasm32"))]
pub mod eval;
// The vector and BM25 indexes: the engine's (a crate of its own, see engine/src/lib.rs).
pub use loci_engine::index;
pub mod llm;
pub mod memory;
pub mod recall;
mod sort;
pub mod store;
pub mod sync;
pub mod text;
pub mod types;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, Result};
