//! loci's engine: the work done per vector row, per posting and per session when a memory is searched or indexed
//! (the int8 and f32 vector index, the BM25 index, the ranking arithmetic of recall, the calendar recall's dates use)
//! and the plain data it reads. No storage, no embedding, no LLM, no JS: those are the `loci` crate's, which
//! re-exports this one (`loci::index`, `loci::recall`, `loci::types::{bytes, calendar, Session}`).
//!
//! A crate of its own because on stable Rust the optimisation level is set per crate: the shipped wasm is built
//! for size (`opt-level = "z"`, issue 41), which stops the inliner on the standard library's iterator and indexing
//! helpers, and recall's per-row loops over 100,000 units lose 20–25% under it (docs/BENCHMARKS.md). This crate
//! keeps `"s"` (see the root Cargo.toml's `[profile.wasm-release.package.loci-engine]`). Nothing here is generic
//! over the caller's types, so its code is compiled here, at this crate's level.

pub mod bytes;
pub mod calendar;
pub mod index;
pub mod recall;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC). f64 because that is what JavaScript dates are, and it is exact to 2^53.
pub type TimeMs = f64;

/// A conversation sitting. TIR ranks sessions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    pub first_time: TimeMs,
    pub last_time: TimeMs,
    pub turn_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}
