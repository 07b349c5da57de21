//! Stable sorting for the cold paths (distillation, rendering, export), through one shared copy of the standard
//! library's sort. Every `slice::sort_by` with its own closure or element type is a new copy of driftsort, about
//! 5 KB of wasm apiece: 36 of them were 13% of the shipped wasm's code. Here the positions are sorted with the
//! comparator behind `dyn`, so that every caller shares one copy. Hot paths (recall, the indexes, open) keep
//! `slice::sort*`, inlined with their comparators. `BTreeMap`s and `BTreeSet`s are built here too, by inserting:
//! their `collect()` sorts first, one more copy per element type.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

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

/// A map built by inserting, as `collect()` would build it (a later duplicate key wins). `BTreeMap`'s `FromIterator`
/// first sorts a `Vec` of the pairs: a copy of the standard stable sort per pair type (issue 41).
pub fn map_from<K: Ord, V>(pairs: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        map.insert(k, v);
    }
    map
}

/// A set built by inserting, as `collect()` would build it (see [`map_from`]).
pub fn set_from<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    let mut set = BTreeSet::new();
    for t in items {
        set.insert(t);
    }
    set
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

    /// Maps and sets built by inserting hold what `collect()` holds, a later duplicate key's value included.
    #[test]
    fn maps_and_sets_are_built_as_collect_builds_them() {
        let pairs: Vec<(u32, usize)> = (0..200).map(|i| ((i * 37 % 23) as u32, i)).collect();
        let expected: BTreeMap<u32, usize> = pairs.iter().copied().collect();
        assert_eq!(map_from(pairs.iter().copied()), expected);
        let expected: BTreeSet<u32> = pairs.iter().map(|p| p.0).collect();
        assert_eq!(set_from(pairs.iter().map(|p| p.0)), expected);
    }
}
