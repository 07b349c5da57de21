//! The turns a memory holds in RAM: one vector sorted by id. Turn ids only grow (a new turn takes the next id, and a
//! forget reloads the whole state), so lookups are a binary search, appends are pushes, and at open the vector the
//! store decoded becomes the table as it is: no hash table of 136-byte slots beside it, no second copy while
//! moving (at 100,000 units that table alone was ~36 MB of the wasm heap).

use crate::types::Turn;

#[derive(Debug, Default)]
pub(super) struct TurnTable {
    /// Sorted by id, ids unique.
    turns: Vec<Turn>,
}

impl TurnTable {
    /// The table of `turns` in any order; of two turns with one id the later one is kept (as inserting them one by
    /// one would).
    pub(super) fn from_vec(mut turns: Vec<Turn>) -> Self {
        if !turns.windows(2).all(|w| w[0].id < w[1].id) {
            turns.reverse(); // the stable sort then puts the later of equal ids first, which dedup keeps
            turns.sort_by_key(|t| t.id);
            turns.dedup_by_key(|t| t.id);
        }
        TurnTable { turns }
    }

    pub(super) fn get(&self, id: &u64) -> Option<&Turn> {
        self.turns.binary_search_by_key(id, |t| t.id).ok().map(|i| &self.turns[i])
    }

    /// Adds `turn`, replacing the turn of its id if there is one.
    pub(super) fn insert(&mut self, turn: Turn) {
        match self.turns.last() {
            Some(last) if last.id >= turn.id => match self.turns.binary_search_by_key(&turn.id, |t| t.id) {
                Ok(i) => self.turns[i] = turn,
                Err(i) => self.turns.insert(i, turn),
            },
            _ => self.turns.push(turn),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.turns.len()
    }

    pub(super) fn clear(&mut self) {
        self.turns = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: u64, text: &str) -> Turn {
        Turn {
            id,
            session: "s".into(),
            seq: 0,
            speaker: "u".into(),
            text: text.into(),
            caption: None,
            time: 0.0,
            ingested: 0.0,
        }
    }

    #[test]
    fn looks_up_inserts_and_replaces_like_a_map() {
        let mut t = TurnTable::from_vec(vec![turn(5, "a"), turn(2, "b"), turn(9, "c"), turn(2, "d")]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&2).map(|t| t.text.as_str()), Some("d"), "the later of two turns with one id");
        assert!(t.get(&3).is_none());
        t.insert(turn(12, "e"));
        t.insert(turn(7, "f"));
        t.insert(turn(5, "g"));
        let ids: Vec<u64> = t.turns.iter().map(|t| t.id).collect();
        assert_eq!(ids, [2, 5, 7, 9, 12]);
        assert_eq!(t.get(&5).map(|t| t.text.as_str()), Some("g"));
        assert_eq!(t.get(&7).map(|t| t.text.as_str()), Some("f"));
        t.clear();
        assert_eq!(t.len(), 0);
    }
}
