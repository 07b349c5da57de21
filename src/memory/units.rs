//! The units a memory holds in RAM, compactly: per unit its id, its session's number and where its turn ids lie in
//! one shared list (16 bytes and its turn ids), where a hash table of [`Unit`]s took ~64 bytes a slot and two
//! allocations a unit (~12 MB of the wasm heap at 100,000 units, against ~3 MB).

use crate::types::Unit;

#[derive(Debug, Clone, Copy)]
struct Row {
    id: u32,
    session: u32,
    start: u32,
    len: u32,
}

/// A unit of the table: its session as the memory's session number.
#[derive(Debug, Clone, Copy)]
pub(super) struct UnitRef<'a> {
    pub id: u32,
    pub session: u32,
    pub turn_ids: &'a [u64],
}

impl UnitRef<'_> {
    /// The unit, given its session's id.
    pub fn to_unit(self, session: &str) -> Unit {
        Unit { id: self.id, session: session.into(), turn_ids: self.turn_ids.to_vec() }
    }
}

/// Units by id. Inserting in id order (how stores read them and a memory adds them) appends; otherwise
/// [`sort`](Self::sort) must run before lookups by id.
#[derive(Debug)]
pub(super) struct UnitTable {
    rows: Vec<Row>,
    turn_ids: Vec<u64>,
    /// Turn ids of removed units still in `turn_ids`.
    garbage: usize,
    sorted: bool,
}

impl Default for UnitTable {
    fn default() -> Self {
        UnitTable { rows: Vec::new(), turn_ids: Vec::new(), garbage: 0, sorted: true }
    }
}

impl UnitTable {
    /// Room for `units` more units of `turns` turn ids in all, exactly.
    pub fn reserve(&mut self, units: usize, turns: usize) {
        self.rows.reserve_exact(units);
        self.turn_ids.reserve_exact(turns);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }

    fn at(&self, i: usize) -> UnitRef<'_> {
        let r = self.rows[i];
        UnitRef { id: r.id, session: r.session, turn_ids: &self.turn_ids[r.start as usize..(r.start + r.len) as usize] }
    }

    fn position(&self, id: u32) -> Option<usize> {
        match self.sorted {
            true => self.rows.binary_search_by_key(&id, |r| r.id).ok(),
            false => self.rows.iter().rposition(|r| r.id == id),
        }
    }

    pub fn get(&self, id: &u32) -> Option<UnitRef<'_>> {
        self.position(*id).map(|i| self.at(i))
    }

    /// Adds a unit, replacing the unit of its id if there is one (when the table is sorted).
    pub fn insert(&mut self, id: u32, session: u32, turn_ids: &[u64]) {
        let row = Row { id, session, start: self.turn_ids.len() as u32, len: turn_ids.len() as u32 };
        self.turn_ids.extend_from_slice(turn_ids);
        match self.rows.last() {
            Some(last) if last.id >= id && self.sorted => match self.rows.binary_search_by_key(&id, |r| r.id) {
                Ok(i) => {
                    self.garbage += self.rows[i].len as usize;
                    self.rows[i] = row;
                }
                Err(i) => self.rows.insert(i, row),
            },
            _ => self.rows.push(row),
        }
    }

    /// Appends a unit whatever its id; [`sort`](Self::sort) restores the order (bulk loading).
    pub fn push(&mut self, id: u32, session: u32, turn_ids: &[u64]) {
        if self.rows.last().is_some_and(|r| r.id >= id) {
            self.sorted = false;
        }
        self.rows.push(Row { id, session, start: self.turn_ids.len() as u32, len: turn_ids.len() as u32 });
        self.turn_ids.extend_from_slice(turn_ids);
    }

    /// Orders the units by id; of two with one id the later one is kept (as inserting them one by one would).
    pub fn sort(&mut self) {
        if self.sorted {
            return;
        }
        self.rows.reverse(); // the stable sort then puts the later of equal ids first, which dedup keeps
        self.rows.sort_by_key(|r| r.id);
        let before = self.rows.iter().map(|r| r.len as usize).sum::<usize>();
        self.rows.dedup_by_key(|r| r.id);
        self.garbage += before - self.rows.iter().map(|r| r.len as usize).sum::<usize>();
        self.sorted = true;
    }

    pub fn remove(&mut self, id: &u32) -> bool {
        let Some(i) = self.position(*id) else { return false };
        let row = self.rows.remove(i);
        self.garbage += row.len as usize;
        if self.garbage > 1024 && self.garbage * 2 > self.turn_ids.len() {
            self.compact();
        }
        true
    }

    /// Drops the turn ids of removed units.
    fn compact(&mut self) {
        let mut ids = Vec::with_capacity(self.turn_ids.len() - self.garbage);
        for r in &mut self.rows {
            let start = ids.len() as u32;
            ids.extend_from_slice(&self.turn_ids[r.start as usize..(r.start + r.len) as usize]);
            r.start = start;
        }
        self.turn_ids = ids;
        self.garbage = 0;
    }

    /// In id order (when sorted).
    pub fn iter(&self) -> impl Iterator<Item = UnitRef<'_>> + '_ {
        (0..self.rows.len()).map(|i| self.at(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map_of_units() {
        let mut t = UnitTable::default();
        t.push(3, 0, &[5, 6]);
        t.push(1, 0, &[1, 2]);
        t.push(3, 1, &[7]);
        t.push(2, 0, &[3, 4]);
        t.sort();
        let ids: Vec<u32> = t.iter().map(|u| u.id).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(t.get(&3).map(|u| (u.session, u.turn_ids.to_vec())), Some((1, vec![7])), "the later of one id");
        t.insert(4, 2, &[8, 9]);
        t.insert(2, 2, &[10]);
        assert_eq!(t.get(&2).map(|u| u.turn_ids.to_vec()), Some(vec![10]));
        assert!(t.remove(&1) && !t.remove(&1));
        assert_eq!(t.len(), 3);
        assert!(t.get(&1).is_none());
        for n in 10..3000u32 {
            t.insert(n, 0, &[n as u64]);
            assert!(t.remove(&n));
        }
        assert!(t.turn_ids.len() < 2100, "removed units' turn ids are dropped now and then: {}", t.turn_ids.len());
        assert_eq!(t.get(&4).map(|u| u.turn_ids.to_vec()), Some(vec![8, 9]));
        assert_eq!(t.get(&4).map(|u| u.to_unit("s")), Some(Unit { id: 4, session: "s".into(), turn_ids: vec![8, 9] }));
        t.clear();
        assert_eq!(t.len(), 0);
    }
}
