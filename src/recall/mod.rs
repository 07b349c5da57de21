//! Recall: rank sessions for a query. Every method scores units (dense cosine from the vector index, BM25 from the
//! lexical index, or a fusion of both), then aggregates unit scores into a session score. Turn Isolation Retrieval
//! (Nano-Memory) is the dense max: one relevant exchange is not diluted by a long session.
//!
//! The ranking is the engine's arithmetic over score buffers (`loci_engine::recall`, re-exported here: a crate of
//! its own, see engine/src/lib.rs); this module adds what is done with its result: excerpts of long turns and
//! query-driven pruning.

pub mod excerpt;
pub mod prune;

// The ranking arithmetic is the engine's (a crate of its own: see engine/src/lib.rs).
pub use loci_engine::recall::*;
