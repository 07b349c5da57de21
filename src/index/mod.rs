//! Index: what recall searches. Exact brute-force scoring over a contiguous vector buffer: at personal scale
//! (≤ 10^5–10^6 units) it is faster and more predictable in a browser than an approximate index. Beside it, a BM25
//! inverted index over the same units for lexical evidence.

pub mod bm25;
pub mod vectors;

pub use bm25::Bm25Index;
pub use vectors::VectorIndex;
