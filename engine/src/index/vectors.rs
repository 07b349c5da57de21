//! Unit vectors in one contiguous buffer, each row owned by a unit (a long unit owns several window rows).
//!
//! Rows are kept as int8 by default: symmetric quantisation with one f32 scale per row (`x ≈ code × scale`,
//! `scale = max|x| / 127`), 388 bytes per 384-dimensional row instead of 1,536. The query stays nearly exact: it is
//! quantised to i16 (`scale = max|q| / 32767`), and a row's score is an integer dot product (i8 × i16 → i32) times
//! both scales. On wasm32 with `simd128` the dot product runs on 128-bit lanes (`i32x4.dot_i16x8_s`); elsewhere a
//! plain loop the compiler vectorises. [`Precision::F32`] keeps full floats (for the quantisation check).
//!
//! This module does arithmetic only: it never knows about storage or JavaScript.

/// How rows are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// 4 bytes per dimension.
    F32,
    /// 1 byte per dimension plus one f32 scale per row (the default).
    #[default]
    Int8,
}

/// The rows of one unit as they travel to and from a store: full floats (fresh from the embedder) or int8 codes
/// with one scale per row (as stored). Either converts into an index of either precision.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    /// `rows × dim` floats back to back.
    F32(Vec<f32>),
    /// `rows × dim` codes back to back and one scale per row.
    Int8 { codes: Vec<i8>, scales: Vec<f32> },
}

impl Default for Rows {
    fn default() -> Self {
        Rows::F32(Vec::new())
    }
}

impl From<Vec<f32>> for Rows {
    fn from(v: Vec<f32>) -> Self {
        Rows::F32(v)
    }
}

impl Rows {
    /// Appends float rows. To an int8 value `v` is one row, quantised (the embedder hands rows one at a time).
    pub fn extend_from_slice(&mut self, v: &[f32]) {
        match self {
            Rows::F32(data) => data.extend_from_slice(v),
            Rows::Int8 { codes, scales } => scales.push(quantize_into(v, codes)),
        }
    }

    /// Number of rows of `dim`, or `None` when the value is damaged (not whole rows, or scales that do not match).
    pub fn rows(&self, dim: usize) -> Option<usize> {
        if dim == 0 {
            return None;
        }
        match self {
            Rows::F32(d) if d.len() % dim == 0 => Some(d.len() / dim),
            Rows::Int8 { codes, scales } if codes.len() % dim == 0 && codes.len() / dim == scales.len() => {
                Some(scales.len())
            }
            _ => None,
        }
    }

    /// Whether the value holds whole rows of `dim`.
    pub fn is_whole(&self, dim: usize) -> bool {
        self.rows(dim).is_some()
    }

    /// The int8 form: codes and one scale per row (quantising float rows).
    pub fn to_int8(&self, dim: usize) -> (Vec<i8>, Vec<f32>) {
        match self {
            Rows::F32(d) => {
                let mut codes = Vec::with_capacity(d.len());
                let scales = d.chunks_exact(dim).map(|row| quantize_into(row, &mut codes)).collect();
                (codes, scales)
            }
            Rows::Int8 { codes, scales } => (codes.clone(), scales.clone()),
        }
    }

    /// The float form (dequantising int8 rows).
    pub fn to_f32(&self, dim: usize) -> Vec<f32> {
        match self {
            Rows::F32(d) => d.clone(),
            Rows::Int8 { codes, scales } => {
                codes.chunks_exact(dim).zip(scales).flat_map(|(r, &s)| r.iter().map(move |&c| c as f32 * s)).collect()
            }
        }
    }
}

/// Quantises one row symmetrically to int8, appending the codes; returns the row's scale (0 for a zero row).
pub fn quantize_into(row: &[f32], codes: &mut Vec<i8>) -> f32 {
    let max = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        codes.extend(std::iter::repeat_n(0, row.len()));
        return 0.0;
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    codes.extend(row.iter().map(|x| (x * inv).round().clamp(-127.0, 127.0) as i8));
    scale
}

/// Row-major `[rows, dim]` unit-length vectors and, per row, the unit and the session it belongs to (kept beside
/// the rows so that scoring a session never looks anything up).
#[derive(Debug, Clone, Default)]
pub struct VectorIndex {
    dim: usize,
    precision: Precision,
    /// Float rows ([`Precision::F32`]).
    data: Vec<f32>,
    /// Int8 rows and their scales ([`Precision::Int8`]).
    codes: Vec<i8>,
    scales: Vec<f32>,
    owners: Vec<u32>,
    sessions: Vec<u32>,
    /// The query as i16 codes, kept to avoid allocating per recall.
    query: Vec<i16>,
    /// Renewed whenever rows are added or removed ([`VectorIndex::stamp`]).
    stamp: super::Stamp,
}

impl VectorIndex {
    /// An empty index of the default precision (int8).
    pub fn new(dim: usize) -> Self {
        Self::with_precision(dim, Precision::default())
    }

    pub fn with_precision(dim: usize, precision: Precision) -> Self {
        VectorIndex { dim, precision, ..Default::default() }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Number of rows (window vectors).
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Unit that owns each row.
    pub fn owners(&self) -> &[u32] {
        &self.owners
    }

    /// Changes whenever rows are added or removed: [`owners`](Self::owners) and [`sessions`](Self::sessions)
    /// stand while the stamp does.
    pub fn stamp(&self) -> super::Stamp {
        self.stamp
    }

    /// Session number of each row.
    pub fn sessions(&self) -> &[u32] {
        &self.sessions
    }

    /// Bytes the rows occupy in memory: vectors, scales, owners and sessions (the live lengths, not capacity).
    pub fn bytes(&self) -> usize {
        self.data.len() * 4 + self.codes.len() + self.scales.len() * 4 + self.owners.len() * 8
    }

    /// Makes room for `rows` more rows, exactly: at open the count is known, and growing by doubling would leave up
    /// to half of the largest buffer of a memory unused (the wasm memory never shrinks).
    pub fn reserve(&mut self, rows: usize) {
        match self.precision {
            Precision::F32 => self.data.reserve_exact(rows * self.dim),
            Precision::Int8 => {
                self.codes.reserve_exact(rows * self.dim);
                self.scales.reserve_exact(rows);
            }
        }
        self.owners.reserve_exact(rows);
        self.sessions.reserve_exact(rows);
    }

    /// Appends int8 rows given back to back with their owners and sessions (one each per row). An empty int8 index
    /// takes the buffers as they are: at open, the store's buffer becomes the index without a second copy.
    pub fn extend_int8(&mut self, codes: Vec<i8>, scales: Vec<f32>, owners: Vec<u32>, sessions: Vec<u32>) {
        let n = scales.len();
        if codes.len() != n * self.dim || owners.len() != n || sessions.len() != n {
            debug_assert!(false, "damaged rows");
            return;
        }
        self.stamp = super::Stamp::fresh();
        match self.precision {
            Precision::Int8 if self.owners.is_empty() => {
                (self.codes, self.scales, self.owners, self.sessions) = (codes, scales, owners, sessions);
            }
            Precision::Int8 => {
                self.codes.extend_from_slice(&codes);
                self.scales.extend_from_slice(&scales);
                self.owners.extend_from_slice(&owners);
                self.sessions.extend_from_slice(&sessions);
            }
            Precision::F32 => {
                self.data.extend(Rows::Int8 { codes, scales }.to_f32(self.dim));
                self.owners.extend_from_slice(&owners);
                self.sessions.extend_from_slice(&sessions);
            }
        }
    }

    /// Appends the rows of `unit` of `session`, converting them to this index's precision. Rows that are not
    /// whole rows of `dim` are ignored (the caller validates first).
    pub fn push(&mut self, unit: u32, session: u32, rows: &Rows) {
        let Some(n) = rows.rows(self.dim) else {
            debug_assert!(false, "damaged rows");
            return;
        };
        self.stamp = super::Stamp::fresh();
        match (self.precision, rows) {
            (Precision::F32, Rows::F32(d)) => self.data.extend_from_slice(d),
            (Precision::F32, r) => self.data.extend(r.to_f32(self.dim)),
            (Precision::Int8, Rows::Int8 { codes, scales }) => {
                self.codes.extend_from_slice(codes);
                self.scales.extend_from_slice(scales);
            }
            (Precision::Int8, Rows::F32(d)) => {
                for row in d.chunks_exact(self.dim) {
                    let s = quantize_into(row, &mut self.codes);
                    self.scales.push(s);
                }
            }
        }
        self.owners.extend(std::iter::repeat_n(unit, n));
        self.sessions.extend(std::iter::repeat_n(session, n));
    }

    /// Removes every row of `unit`. Swap-remove: O(rows of the unit × dim), row order is not meaningful.
    pub fn remove(&mut self, unit: u32) {
        self.stamp = super::Stamp::fresh();
        let dim = self.dim;
        let mut r = 0;
        while r < self.owners.len() {
            if self.owners[r] != unit {
                r += 1;
                continue;
            }
            let last = self.owners.len() - 1;
            if r != last {
                match self.precision {
                    Precision::F32 => self.data.copy_within(last * dim..(last + 1) * dim, r * dim),
                    Precision::Int8 => {
                        self.codes.copy_within(last * dim..(last + 1) * dim, r * dim);
                        self.scales[r] = self.scales[last];
                    }
                }
                self.owners[r] = self.owners[last];
                self.sessions[r] = self.sessions[last];
            }
            self.owners.pop();
            self.sessions.pop();
            match self.precision {
                Precision::F32 => self.data.truncate(last * dim),
                Precision::Int8 => {
                    self.codes.truncate(last * dim);
                    self.scales.truncate(last);
                }
            }
        }
    }

    /// Dot product of `query` with every row into `out` (cleared first; the caller keeps it to avoid allocating).
    pub fn scores_into(&mut self, query: &[f32], out: &mut Vec<f32>) {
        out.clear();
        match self.precision {
            Precision::F32 => out.extend(self.data.chunks_exact(self.dim).map(|row| dot(row, query))),
            Precision::Int8 => {
                let q_scale = quantize_query(query, &mut self.query);
                let (q, dim) = (&self.query, self.dim);
                if dim == 0 {
                    out.resize(self.scales.len(), 0.0);
                    return;
                }
                // Two rows a pass over the query (see [`dot2_i8_i16`]), then the odd one out.
                let pairs = self.codes.chunks_exact(2 * dim);
                let last = pairs.remainder();
                for (rows, s) in pairs.zip(self.scales.chunks_exact(2)) {
                    let (x, y) = dot2_i8_i16(&rows[..dim], &rows[dim..], q);
                    out.push(x as f32 * s[0] * q_scale);
                    out.push(y as f32 * s[1] * q_scale);
                }
                if let (false, Some(&s)) = (last.is_empty(), self.scales.last()) {
                    out.push(dot_i8_i16(last, q) as f32 * s * q_scale);
                }
            }
        }
    }
}

/// Quantises a query to i16 codes (`scale = max|q| / 32767`) into `out`; returns the scale.
fn quantize_query(q: &[f32], out: &mut Vec<i16>) -> f32 {
    out.clear();
    let max = q.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.resize(q.len(), 0);
        return 0.0;
    }
    let inv = 32767.0 / max;
    out.extend(q.iter().map(|x| (x * inv).round().clamp(-32767.0, 32767.0) as i16));
    max / 32767.0
}

/// Dot product; written as four independent accumulators so the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..4 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Integer dot product of int8 codes with i16 codes. No overflow for any row of up to 2^17 dimensions
/// (|127 × 32767| × 2^17 < 2^31 … per lane a quarter of that).
pub fn dot_i8_i16(a: &[i8], b: &[i16]) -> i32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        simd::dot_i8_i16(a, b)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        dot_i8_i16_scalar(a, b)
    }
}

/// [`dot_i8_i16`] of two rows with the same query: one pass over the query's codes for both, which in the page
/// scans 100,000 rows 10–37% faster than one row at a time (`bench/scan-kernel`, headless Chromium, 2 cores;
/// docs/BENCHMARKS.md). Integer sums, so each result is exactly [`dot_i8_i16`]'s.
pub fn dot2_i8_i16(a0: &[i8], a1: &[i8], b: &[i16]) -> (i32, i32) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        simd::dot2_i8_i16(a0, a1, b)
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        (dot_i8_i16_scalar(a0, b), dot_i8_i16_scalar(a1, b))
    }
}

/// The portable form of [`dot_i8_i16`] (also the reference the SIMD form is tested against).
pub fn dot_i8_i16_scalar(a: &[i8], b: &[i16]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd;

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift, so fixtures are reproducible without a dependency.
    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn next_f32(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    fn unit_vector(rng: &mut Rng, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim).map(|_| rng.next_f32()).collect();
        let n = dot(&v, &v).sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn remove_keeps_other_rows_intact() {
        for precision in [Precision::F32, Precision::Int8] {
            let mut ix = VectorIndex::with_precision(2, precision);
            ix.push(1, 10, &vec![1.0, 0.0].into());
            ix.push(2, 20, &vec![0.0, 1.0, 0.6, 0.8].into());
            ix.push(3, 30, &vec![0.8, 0.6].into());
            ix.remove(2);
            assert_eq!(ix.len(), 2);
            let mut s = Vec::new();
            ix.scores_into(&[1.0, 0.0], &mut s);
            let mut pairs: Vec<(u32, f32)> = ix.owners().iter().copied().zip(s).collect();
            pairs.sort_by_key(|p| p.0);
            assert_eq!(pairs[0].0, 1);
            assert_eq!(pairs[1].0, 3);
            assert!((pairs[0].1 - 1.0).abs() < 0.01 && (pairs[1].1 - 0.8).abs() < 0.01, "{precision:?}: {pairs:?}");
            let mut owned: Vec<(u32, u32)> = ix.owners().iter().copied().zip(ix.sessions().iter().copied()).collect();
            owned.sort();
            assert_eq!(owned, vec![(1, 10), (3, 30)]);
        }
    }

    #[test]
    fn int8_rows_taken_whole_score_as_pushed_ones() {
        let rows: Vec<Vec<f32>> = vec![vec![1.0, 0.0], vec![0.6, 0.8], vec![0.0, -1.0]];
        let mut pushed = VectorIndex::new(2);
        let (mut codes, mut scales) = (Vec::new(), Vec::new());
        for (i, r) in rows.iter().enumerate() {
            pushed.push(i as u32 + 1, 7, &Rows::F32(r.clone()));
            scales.push(quantize_into(r, &mut codes));
        }
        for precision in [Precision::Int8, Precision::F32] {
            let mut taken = VectorIndex::with_precision(2, precision);
            taken.extend_int8(codes.clone(), scales.clone(), vec![1, 2, 3], vec![7; 3]);
            // Appending to a non-empty index keeps what was there.
            taken.extend_int8(codes[..2].to_vec(), scales[..1].to_vec(), vec![4], vec![8]);
            assert_eq!(taken.owners(), [1, 2, 3, 4]);
            assert_eq!(taken.sessions(), [7, 7, 7, 8]);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            pushed.scores_into(&[0.6, 0.8], &mut a);
            taken.scores_into(&[0.6, 0.8], &mut b);
            if precision == Precision::Int8 {
                assert_eq!(&b[..3], &a[..], "the same codes give the same scores");
            } else {
                assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 0.01), "{a:?} {b:?}");
            }
            assert_eq!(b[3], b[0]);
        }
    }

    #[test]
    fn dot_handles_remainders() {
        let a: Vec<f32> = (0..7).map(|x| x as f32).collect();
        assert_eq!(dot(&a, &a), (0..7).map(|x| (x * x) as f32).sum::<f32>());
        let a: Vec<i8> = (0..37).map(|x| (x * 7 % 255 - 127) as i8).collect();
        let b: Vec<i16> = (0..37).map(|x| (x * 1000 % 65000 - 32500) as i16).collect();
        assert_eq!(dot_i8_i16(&a, &b), dot_i8_i16_scalar(&a, &b));
        let big_a = vec![-127i8; 384];
        let big_b = vec![-32767i16; 384];
        assert_eq!(dot_i8_i16(&big_a, &big_b), 127 * 32767 * 384);
    }

    #[test]
    fn rows_scored_two_at_a_time_score_as_one_at_a_time() {
        let mut rng = Rng(11);
        let dim = 24; // one 16-code step and a tail
        for rows in [0, 1, 2, 5, 6] {
            let mut index = VectorIndex::with_precision(dim, Precision::Int8);
            for u in 0..rows {
                index.push(u, 0, &Rows::F32(unit_vector(&mut rng, dim)));
            }
            let q = unit_vector(&mut rng, dim);
            let mut scores = Vec::new();
            index.scores_into(&q, &mut scores);
            let q_scale = quantize_query(&q, &mut index.query);
            let one_by_one: Vec<f32> = (0..rows as usize)
                .map(|r| {
                    dot_i8_i16(&index.codes[r * dim..(r + 1) * dim], &index.query) as f32 * index.scales[r] * q_scale
                })
                .collect();
            assert_eq!(scores, one_by_one, "{rows} rows");
        }
    }

    #[test]
    fn quantisation_round_trips_through_storage_form() {
        let mut rng = Rng(7);
        let v = unit_vector(&mut rng, 384);
        let rows = Rows::F32(v.clone());
        let (codes, scales) = rows.to_int8(384);
        let back = Rows::Int8 { codes: codes.clone(), scales: scales.clone() }.to_f32(384);
        let err = v.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(err <= scales[0] / 2.0 + 1e-7, "error {err} over half a step");
        // Re-quantising the dequantised row gives the same codes (storage in int8 is stable).
        assert_eq!(Rows::F32(back).to_int8(384).0, codes);
        assert_eq!(Rows::Int8 { codes, scales: vec![1.0, 2.0] }.rows(384), None, "scales must match rows");
    }

    /// Int8 and f32 rankings agree on a seeded fixture: 2,000 random unit rows, 50 queries each built near a
    /// target row (so there is a clear best match, as with a real recall), plus 50 unrelated queries where all
    /// scores are close. The best row must be the same; the top-10 sets must overlap almost entirely; and no int8
    /// score may be off by more than 0.01 cosine.
    #[test]
    fn int8_and_f32_rankings_agree_on_a_fixture() {
        let dim = 384;
        let mut rng = Rng(0x5eed_1234);
        let rows: Vec<Vec<f32>> = (0..2000).map(|_| unit_vector(&mut rng, dim)).collect();
        let mut f = VectorIndex::with_precision(dim, Precision::F32);
        let mut q8 = VectorIndex::with_precision(dim, Precision::Int8);
        for (i, r) in rows.iter().enumerate() {
            f.push(i as u32, (i / 10) as u32, &Rows::F32(r.clone()));
            q8.push(i as u32, (i / 10) as u32, &Rows::F32(r.clone()));
        }
        let top = |s: &[f32], k: usize| {
            let mut o: Vec<usize> = (0..s.len()).collect();
            o.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
            o.truncate(k);
            o
        };
        let (mut sf, mut sq) = (Vec::new(), Vec::new());
        let (mut overlap, mut total, mut worst) = (0, 0, 0.0f32);
        for qi in 0..100 {
            let noise = unit_vector(&mut rng, dim);
            let q: Vec<f32> = if qi < 50 {
                let t = &rows[(qi * 37) % rows.len()];
                let v: Vec<f32> = t.iter().zip(&noise).map(|(a, b)| 0.5 * a + b).collect();
                let n = dot(&v, &v).sqrt();
                v.into_iter().map(|x| x / n).collect()
            } else {
                noise
            };
            f.scores_into(&q, &mut sf);
            q8.scores_into(&q, &mut sq);
            worst = sf.iter().zip(&sq).map(|(a, b)| (a - b).abs()).fold(worst, f32::max);
            let (tf, tq) = (top(&sf, 10), top(&sq, 10));
            if qi < 50 {
                assert_eq!(tf[0], tq[0], "query {qi}: best row differs");
                assert_eq!(tf[0], (qi * 37) % rows.len());
            }
            overlap += tf.iter().filter(|r| tq.contains(r)).count();
            total += 10;
        }
        assert!(worst < 0.01, "an int8 score is off by {worst}");
        let agreement = overlap as f32 / total as f32;
        assert!(agreement >= 0.95, "top-10 agreement {agreement}");
        assert_eq!(q8.bytes() / q8.len(), 384 + 4 + 8, "bytes per row in memory");
    }
}
