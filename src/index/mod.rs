//! Index: what recall searches. Exact brute-force scoring over a contiguous vector buffer: at personal scale
//! (≤ 10^5–10^6 units) it is faster and more predictable in a browser than an approximate index.

pub mod vectors;

pub use vectors::VectorIndex;
