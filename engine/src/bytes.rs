//! A bounds-checked reader over a stored byte record: every read says `None` rather than panicking when the record
//! is shorter than its own lengths claim (records come back from storage, where anything may have happened to
//! them). Little-endian, as every record loci writes. The `bytes` crate's `Buf` panics on a short read instead.

/// Reads a byte record front to back.
#[derive(Debug, Clone)]
pub struct ByteReader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> ByteReader<'b> {
    pub fn new(bytes: &'b [u8]) -> Self {
        ByteReader { bytes, at: 0 }
    }

    /// The next `n` bytes; `None` when fewer are left.
    pub fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let end = self.at.checked_add(n)?;
        let part = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(part)
    }

    /// The next `n` items of `size` bytes each, together.
    pub fn take_items(&mut self, n: usize, size: usize) -> Option<&'b [u8]> {
        self.take(n.checked_mul(size)?)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// Everything not read yet.
    pub fn rest(&self) -> &'b [u8] {
        &self.bytes[self.at..]
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }
}

/// Little-endian `u32`s of `bytes` (whose length is a multiple of 4; a shorter tail is ignored).
pub fn u32s(bytes: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_say_none_and_consume_nothing() {
        let bytes = [1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.u32(), Some(1));
        assert_eq!(r.u64(), Some(2));
        assert_eq!(r.u32(), None);
        assert_eq!(r.take_items(usize::MAX, 2), None);
        assert_eq!(r.take(usize::MAX), None);
        assert_eq!(r.rest(), &[9]);
        assert_eq!(r.remaining(), 1);
        assert_eq!(u32s(&bytes[..8]).collect::<Vec<_>>(), vec![1, 2]);
    }
}
