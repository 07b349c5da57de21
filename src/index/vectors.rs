//! Unit vectors in one contiguous buffer, each row owned by a unit (a long unit owns several window rows).

/// Row-major `[rows, dim]` unit-length vectors and, per row, the unit and the session it belongs to (kept beside
/// the rows so that scoring a session never looks anything up).
#[derive(Debug, Clone, Default)]
pub struct VectorIndex {
    dim: usize,
    data: Vec<f32>,
    owners: Vec<u32>,
    sessions: Vec<u32>,
}

impl VectorIndex {
    pub fn new(dim: usize) -> Self {
        VectorIndex { dim, data: Vec::new(), owners: Vec::new(), sessions: Vec::new() }
    }

    pub fn dim(&self) -> usize {
        self.dim
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

    /// Session number of each row.
    pub fn sessions(&self) -> &[u32] {
        &self.sessions
    }

    /// Appends the rows of `unit` of `session` (`vectors` holds whole rows back to back).
    pub fn push(&mut self, unit: u32, session: u32, vectors: &[f32]) {
        debug_assert_eq!(vectors.len() % self.dim, 0);
        let rows = vectors.len() / self.dim;
        self.data.extend_from_slice(vectors);
        self.owners.extend(std::iter::repeat(unit).take(rows));
        self.sessions.extend(std::iter::repeat(session).take(rows));
    }

    /// Removes every row of `unit`. Swap-remove: O(rows of the unit × dim), row order is not meaningful.
    pub fn remove(&mut self, unit: u32) {
        let mut r = 0;
        while r < self.owners.len() {
            if self.owners[r] != unit {
                r += 1;
                continue;
            }
            let last = self.owners.len() - 1;
            if r != last {
                let (head, tail) = self.data.split_at_mut(last * self.dim);
                head[r * self.dim..(r + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
                self.owners[r] = self.owners[last];
                self.sessions[r] = self.sessions[last];
            }
            self.owners.pop();
            self.sessions.pop();
            self.data.truncate(last * self.dim);
        }
    }

    /// Dot product of `query` with every row into `out` (cleared first; the caller keeps it to avoid allocating).
    pub fn scores_into(&self, query: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(self.data.chunks_exact(self.dim).map(|row| dot(row, query)));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_keeps_other_rows_intact() {
        let mut ix = VectorIndex::new(2);
        ix.push(1, 10, &[1.0, 0.0]);
        ix.push(2, 20, &[0.0, 1.0, 0.6, 0.8]);
        ix.push(3, 30, &[0.8, 0.6]);
        ix.remove(2);
        assert_eq!(ix.len(), 2);
        let mut s = Vec::new();
        ix.scores_into(&[1.0, 0.0], &mut s);
        let mut pairs: Vec<(u32, f32)> = ix.owners().iter().copied().zip(s).collect();
        pairs.sort_by_key(|p| p.0);
        assert_eq!(pairs, vec![(1, 1.0), (3, 0.8)]);
        let mut owned: Vec<(u32, u32)> = ix.owners().iter().copied().zip(ix.sessions().iter().copied()).collect();
        owned.sort();
        assert_eq!(owned, vec![(1, 10), (3, 30)]);
    }

    #[test]
    fn dot_handles_remainders() {
        let a: Vec<f32> = (0..7).map(|x| x as f32).collect();
        assert_eq!(dot(&a, &a), (0..7).map(|x| (x * x) as f32).sum::<f32>());
    }
}
