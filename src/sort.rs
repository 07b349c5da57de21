//! Stable sorting for the cold paths (distillation, rendering, export), through one shared copy of the standard
//! library's sort. Every `slice::sort_by` with its own closure or element type is a new copy of driftsort, about
//! 5 KB of wasm apiece: 36 of them were 13% of the shipped wasm's code. Here the positions are sorted with the
//! comparator behind `dyn`, so that every caller shares one copy. Hot paths (recall, the indexes, open) keep
//! `slice::sort*`, inlined with their comparators.

use std::cmp::Ordering;

/// Sorts `v` stably by `cmp`, as `v.sort_by(cmp)` would.
pub fn sort_by<T>(v: &mut Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let order = stable_order(v.len(), &|a, b| cmp(&v[a], &v[b]));
    let mut slots: Vec<Option<T>> = v.drain(..).map(Some).collect();
    // `order` is a permutation of the positions, so each slot is taken exactly once.
    v.extend(order.into_iter().filter_map(|i| slots[i].take()));
}

/// Sorts `v` stably by `key`, as `v.sort_by_key(key)` would.
pub fn sort_by_key<T, K: Ord>(v: &mut Vec<T>, key: impl Fn(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// The positions `0..len` in the stable order of `cmp`: the one instantiation of the standard sort.
#[inline(never)]
fn stable_order(len: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded random vectors with many equal keys: the same order as the standard stable sort, ties included.
    #[test]
    fn sorts_as_the_standard_stable_sort() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for len in [0, 1, 2, 3, 17, 100, 1000] {
            let v: Vec<(u32, usize)> = (0..len).map(|i| (next() % 7, i)).collect();
            let mut expected = v.clone();
            expected.sort_by_key(|p| p.0);
            let mut got = v.clone();
            sort_by_key(&mut got, |p| p.0);
            assert_eq!(got, expected, "len {len}");
            let mut reversed = v.clone();
            sort_by(&mut reversed, |a, b| b.0.cmp(&a.0));
            expected.sort_by_key(|p| std::cmp::Reverse(p.0));
            assert_eq!(reversed, expected, "len {len}, descending");
        }
    }
}
