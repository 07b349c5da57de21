//! Index: what recall searches. Exact brute-force scoring over a contiguous vector buffer: at personal scale
//! (≤ 10^5–10^6 units) it is faster and more predictable in a browser than an approximate index. Beside it, a BM25
//! inverted index over the same units for lexical evidence.

pub mod bm25;
pub mod vectors;

pub use bm25::Bm25Index;
pub use vectors::VectorIndex;

/// Changes whenever an index's rows or documents change, so that what a caller derives from them (recall's map from
/// vector rows to lexical documents) can be kept between queries while the stamps it was made from stand. Drawn
/// from one counter for the process: two indexes share a stamp only when one is an unchanged clone of the other, or
/// both are empty ([`Stamp::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stamp(u64);

impl Stamp {
    /// A stamp no index has had before.
    pub fn fresh() -> Stamp {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Stamp(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}
