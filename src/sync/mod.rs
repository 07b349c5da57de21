//! Sync: one memory on every device, through a server the user picks that sees only sealed blobs
//! (docs/SYNC.md). Each device logs the operations it makes (`log`), sends them as sealed segments (`seal`) to a
//! [`Remote`], and merges every device's segments into one state (`merge`) by rules that give the same memory on
//! every device. Plain Rust: it never learns about fetch, IndexedDB or WebCrypto (the server is a [`Remote`], the
//! key a [`Cipher`]), and it never sends anything unsealed.

mod apply;
mod device;
mod log;
mod merge;
mod seal;
#[cfg(test)]
mod tests;
pub mod webdav;

pub use apply::{plan, Held, Plan, SessionChange};
pub use device::{
    check_key, connect, fetch_segments, send_segments, DeviceLog, Remote, SyncReport, Unlock, SEGMENT_BYTES,
    SEGMENT_OPS,
};
pub use log::{DerivedOp, DeviceId, Op, OpId, Segment, TurnOp, VersionVector};
pub use merge::{merge, Merged, MergedDerived, MergedSession, MergedTurn};
pub use seal::{open_segment, padme, seal_key_check, seal_segment, verify_key_check, Cipher};
