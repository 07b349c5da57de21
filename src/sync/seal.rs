//! Sealing what goes to the server: a segment becomes JSON, padded (Padmé), then sealed with AES-256-GCM under the
//! sync key, bound to its name. The cipher is a trait: WebCrypto in the browser (as at rest, `store::seal`), any
//! AES-GCM natively; the format is the same: IV ‖ ciphertext ‖ tag.

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::sync::log::Segment;

/// Authenticated encryption under the sync key.
#[async_trait(?Send)]
pub trait Cipher {
    /// `plain` sealed with `aad` bound: IV ‖ ciphertext ‖ tag, under a fresh random IV.
    async fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>>;
    /// What was sealed, or `None` when `sealed` does not authenticate with this key and `aad`.
    async fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Option<Vec<u8>>>;
}

const CHECK_AAD: &[u8] = b"loci-sync-check/1";
const CHECK_TEXT: &[u8] = b"loci sync key check";
/// A segment's plaintext: this format (u32, little-endian), the JSON's length (u32), the JSON, the padding. The
/// format stays outside the JSON so that a loci that meets a newer one says so rather than "does not decode".
const SEGMENT_FORMAT: u32 = 1;
const HEADER_BYTES: usize = 8;

fn segment_aad(device: &str, n: u64) -> Vec<u8> {
    format!("loci-sync-segment/1\u{0}{device}\u{0}{n}").into_bytes()
}

/// The length Padmé pads `len` to (Nikitin et al., "Reducing Metadata Leakage from Encrypted Files and
/// Communication with PURBs", PETS 2019): at most 12 % more, and a size then says O(log log len) bits.
pub fn padme(len: usize) -> usize {
    if len < 2 {
        return len;
    }
    let e = usize::BITS - 1 - len.leading_zeros(); // floor(log2 len)
    let s = u32::BITS - e.leading_zeros(); // floor(log2 e) + 1
    let mask = (1usize << (e - s)) - 1;
    (len + mask) & !mask
}

/// The blob that tells the right key from a wrong one: a known text sealed with the sync key.
pub async fn seal_key_check(cipher: &dyn Cipher) -> Result<Vec<u8>> {
    cipher.seal(CHECK_AAD, CHECK_TEXT).await
}

/// `BAD_KEY` when `blob` (the server's key check) was sealed under another key.
pub async fn verify_key_check(cipher: &dyn Cipher, blob: &[u8]) -> Result<()> {
    match cipher.open(CHECK_AAD, blob).await? {
        Some(text) if text == CHECK_TEXT => Ok(()),
        _ => Err(Error::BadKey("the sync key does not open this server's memory".into())),
    }
}

/// `segment` as the server will hold it.
pub async fn seal_segment(cipher: &dyn Cipher, segment: &Segment) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(segment).map_err(|e| Error::SyncFailed(format!("encoding a segment: {e}")))?;
    let len = u32::try_from(json.len()).map_err(|_| Error::SyncFailed("a segment over 4 GB".into()))?;
    let mut plain = Vec::with_capacity(padme(HEADER_BYTES + json.len()));
    plain.extend_from_slice(&SEGMENT_FORMAT.to_le_bytes());
    plain.extend_from_slice(&len.to_le_bytes());
    plain.extend_from_slice(&json);
    plain.resize(padme(plain.len()), 0);
    cipher.seal(&segment_aad(&segment.device, segment.n), &plain).await
}

/// Segment `n` of `device` from the server's bytes: `SYNC_FAILED` when it does not open (altered, truncated,
/// moved from another name) or is not what its name says.
pub async fn open_segment(cipher: &dyn Cipher, device: &str, n: u64, sealed: &[u8]) -> Result<Segment> {
    let damaged = |why: &str| Error::SyncFailed(format!("segment {n} of device {device} {why}"));
    let plain = cipher.open(&segment_aad(device, n), sealed).await?.ok_or_else(|| damaged("does not open"))?;
    let word = |at: usize| plain.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    match word(0) {
        Some(SEGMENT_FORMAT) => {}
        Some(format) => return Err(damaged(&format!("has format {format}, from a newer loci: update this one"))),
        None => return Err(damaged("is cut")),
    }
    let json =
        word(4).and_then(|l| plain.get(HEADER_BYTES..HEADER_BYTES + l as usize)).ok_or_else(|| damaged("is cut"))?;
    let segment: Segment = serde_json::from_slice(json).map_err(|e| damaged(&format!("does not decode: {e}")))?;
    if segment.device != device || segment.n != n {
        return Err(damaged("holds another segment"));
    }
    Ok(segment)
}

#[cfg(test)]
mod tests {
    use pollster::block_on;

    use super::*;
    use crate::sync::log::{Op, VersionVector};

    /// No encryption: what is left to check is the framing.
    struct Clear;

    #[async_trait(?Send)]
    impl Cipher for Clear {
        async fn seal(&self, _: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
            Ok(plain.to_vec())
        }

        async fn open(&self, _: &[u8], sealed: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(Some(sealed.to_vec()))
        }
    }

    #[test]
    fn a_segment_from_a_newer_loci_or_cut_short_is_refused_with_why() {
        let segment =
            Segment { device: "aaaa".into(), n: 1, clock: 1, seen: VersionVector::default(), ops: vec![Op::ForgetAll] };
        let framed = block_on(seal_segment(&Clear, &segment)).unwrap_or_default();
        assert_eq!(framed.len(), padme(framed.len()), "not padded");
        assert_eq!(block_on(open_segment(&Clear, "aaaa", 1, &framed)).ok(), Some(segment));
        let mut newer = framed.clone();
        newer[0] = 2;
        let why = block_on(open_segment(&Clear, "aaaa", 1, &newer)).err();
        assert!(
            why.as_ref().is_some_and(|e| e.code() == "SYNC_FAILED" && e.to_string().contains("newer loci")),
            "{why:?}"
        );
        let why = block_on(open_segment(&Clear, "aaaa", 1, &framed[..12])).err();
        assert!(why.is_some_and(|e| e.to_string().contains("is cut")));
        let why = block_on(open_segment(&Clear, "bbbb", 1, &framed)).err();
        assert!(why.is_some_and(|e| e.to_string().contains("holds another segment")));
    }
}
