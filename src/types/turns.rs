//! [`Turns`]: many turns held compactly, as a store loads them and a memory keeps them. Texts live back to back in
//! pages of [`PAGE`] bytes (no single buffer to double and copy), session ids and speakers once each, and per turn only fixed-size fields: about 40 bytes and the text,
//! where a [`Turn`] takes 128 and three allocations of its own (at 100,000 units, 200,000 turns: ~29 MB instead
//! of ~48 MB of the wasm heap, which never shrinks).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{unit_text_of, TimeMs, Turn};

/// Bytes of text a page is made for (a longer text gets a page of its own size).
const PAGE: usize = 64 * 1024;

/// The fixed-size fields of one turn; `session` and `speaker` index [`Turns::names`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    session: u32,
    speaker: u32,
    seq: u32,
    /// Its text: page, and where it ends there (it starts where the previous turn's ends on the same page, or at 0).
    page: u32,
    end: u32,
    time: TimeMs,
    ingested: TimeMs,
}

/// A turn of [`Turns`], borrowed: the fields of [`Turn`] as slices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnRef<'a> {
    pub id: u64,
    pub session: &'a str,
    pub seq: u32,
    pub speaker: &'a str,
    pub text: &'a str,
    pub caption: Option<&'a str>,
    pub time: TimeMs,
    pub ingested: TimeMs,
}

impl TurnRef<'_> {
    pub fn to_turn(&self) -> Turn {
        Turn {
            id: self.id,
            session: self.session.into(),
            seq: self.seq,
            speaker: self.speaker.into(),
            text: self.text.into(),
            caption: self.caption.map(str::to_string),
            time: self.time,
            ingested: self.ingested,
        }
    }

    /// [`Turn::unit_text`].
    pub fn unit_text(&self) -> String {
        unit_text_of(self.speaker, self.text, self.caption)
    }
}

/// Turns by id. Appending in id order (how stores read them and a memory adds them) keeps them sorted; otherwise
/// [`sort`](Self::sort) must run before lookups by id.
#[derive(Debug, Clone)]
pub struct Turns {
    ids: Vec<u64>,
    rows: Vec<Row>,
    pages: Vec<String>,
    /// Captions are rare: by turn id.
    captions: BTreeMap<u64, String>,
    /// Session ids and speakers, each once.
    names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    sorted: bool,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            ids: Vec::new(),
            rows: Vec::new(),
            pages: Vec::new(),
            captions: BTreeMap::new(),
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            sorted: true,
        }
    }
}

impl Turns {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `turns` turns.
    pub fn with_capacity(turns: usize) -> Self {
        let mut t = Turns::new();
        t.reserve(turns);
        t
    }

    /// Room for `turns` more turns, exactly (their texts take pages as they come).
    pub fn reserve(&mut self, turns: usize) {
        self.ids.reserve_exact(turns);
        self.rows.reserve_exact(turns);
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn name(&mut self, s: &str) -> u32 {
        if let Some(&n) = self.name_ids.get(s) {
            return n;
        }
        let n = self.names.len() as u32;
        self.names.push(s.to_string());
        self.name_ids.insert(s.to_string(), n);
        n
    }

    /// Appends a turn (see the type's note on order).
    pub fn push(&mut self, t: Turn) {
        self.push_ref(&TurnRef {
            id: t.id,
            session: &t.session,
            seq: t.seq,
            speaker: &t.speaker,
            text: &t.text,
            caption: t.caption.as_deref(),
            time: t.time,
            ingested: t.ingested,
        });
    }

    fn push_ref(&mut self, t: &TurnRef) {
        if self.ids.last().is_some_and(|&last| last >= t.id) {
            self.sorted = false;
        }
        let (session, speaker) = (self.name(t.session), self.name(t.speaker));
        let fits = self.pages.last().is_some_and(|p| p.capacity() - p.len() >= t.text.len());
        if !fits {
            self.pages.push(String::with_capacity(PAGE.max(t.text.len())));
        }
        let page = self.pages.len() - 1;
        self.pages[page].push_str(t.text);
        let end = self.pages[page].len() as u32;
        self.ids.push(t.id);
        self.rows.push(Row {
            session,
            speaker,
            seq: t.seq,
            page: page as u32,
            end,
            time: t.time,
            ingested: t.ingested,
        });
        match t.caption {
            Some(c) => drop(self.captions.insert(t.id, c.to_string())),
            None => drop(self.captions.remove(&t.id)),
        }
    }

    fn at(&self, i: usize) -> TurnRef<'_> {
        let row = &self.rows[i];
        let start = match i.checked_sub(1).map(|p| &self.rows[p]) {
            Some(prev) if prev.page == row.page => prev.end as usize,
            _ => 0,
        };
        let id = self.ids[i];
        TurnRef {
            id,
            session: &self.names[row.session as usize],
            seq: row.seq,
            speaker: &self.names[row.speaker as usize],
            text: &self.pages[row.page as usize][start..row.end as usize],
            caption: self.captions.get(&id).map(String::as_str),
            time: row.time,
            ingested: row.ingested,
        }
    }

    pub fn get(&self, id: &u64) -> Option<TurnRef<'_>> {
        let i = match self.sorted {
            true => self.ids.binary_search(id).ok()?,
            false => self.ids.iter().rposition(|x| x == id)?,
        };
        Some(self.at(i))
    }

    /// In storage order (id order once sorted).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = TurnRef<'_>> + ExactSizeIterator + '_ {
        (0..self.ids.len()).map(|i| self.at(i))
    }

    pub fn to_vec(&self) -> Vec<Turn> {
        self.iter().map(|t| t.to_turn()).collect()
    }

    /// Keeps the turns `keep` says yes to, in order (rebuilt compactly when any goes).
    pub fn retain(&mut self, mut keep: impl FnMut(&TurnRef) -> bool) {
        let kept: Vec<bool> = self.iter().map(|t| keep(&t)).collect();
        if kept.iter().all(|&k| k) {
            return;
        }
        self.rebuild((0..self.len()).filter(|&i| kept[i]).collect());
    }

    /// Orders the turns by id; of two turns with one id the later one is kept (as inserting them one by one would).
    pub fn sort(&mut self) {
        if self.sorted {
            return;
        }
        let mut order: Vec<usize> = (0..self.len()).rev().collect();
        order.sort_by_key(|&i| self.ids[i]); // stable: the later of equal ids comes first, which dedup keeps
        order.dedup_by_key(|i| self.ids[*i]);
        self.rebuild(order);
    }

    /// The table of the turns at `order` (positions), in that order.
    fn rebuild(&mut self, order: Vec<usize>) {
        let mut out = Turns::with_capacity(order.len());
        for i in order {
            // The caption of an id is the last one pushed, whichever copy is kept.
            out.push_ref(&self.at(i));
        }
        out.sorted = out.ids.windows(2).all(|w| w[0] < w[1]);
        *self = out;
    }

    pub fn clear(&mut self) {
        *self = Turns::new();
    }
}

impl PartialEq for Turns {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl FromIterator<Turn> for Turns {
    fn from_iter<I: IntoIterator<Item = Turn>>(iter: I) -> Self {
        let mut t = Turns::new();
        for turn in iter {
            t.push(turn);
        }
        t.sort();
        t
    }
}

impl From<Vec<Turn>> for Turns {
    fn from(turns: Vec<Turn>) -> Self {
        let mut t = Turns::with_capacity(turns.len());
        for turn in turns {
            t.push(turn);
        }
        t.sort();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: u64, session: &str, text: &str, caption: Option<&str>) -> Turn {
        Turn {
            id,
            session: session.into(),
            seq: id as u32,
            speaker: if id % 2 == 0 { "Ana".into() } else { "Ben".into() },
            text: text.into(),
            caption: caption.map(str::to_string),
            time: id as f64 * 1000.0,
            ingested: 5.0,
        }
    }

    #[test]
    fn holds_turns_as_they_were_given() {
        let given =
            vec![turn(1, "s1", "hello", None), turn(2, "s1", "", Some("a dog")), turn(4, "s2", "héllo ✓", None)];
        let t = Turns::from(given.clone());
        assert_eq!(t.to_vec(), given);
        assert_eq!(t.get(&2).map(|r| r.to_turn()), Some(given[1].clone()));
        assert_eq!(t.get(&4).map(|r| r.text), Some("héllo ✓"));
        assert_eq!(t.get(&3), None);
        assert_eq!(t.get(&2).map(|r| r.unit_text()), Some(given[1].unit_text()));
    }

    #[test]
    fn sorts_dedups_and_retains_like_a_map() {
        let mut t = Turns::new();
        for x in [turn(5, "a", "five", None), turn(2, "b", "two", Some("c2")), turn(9, "a", "nine", None)] {
            t.push(x);
        }
        t.push(turn(2, "b", "two again", None));
        assert_eq!(t.get(&2).map(|r| r.text), Some("two again"), "unsorted lookups find the latest");
        t.sort();
        let ids: Vec<u64> = t.iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 5, 9]);
        assert_eq!(t.get(&2).map(|r| (r.text, r.caption)), Some(("two again", None)));
        t.retain(|r| r.session == "a");
        assert_eq!(t.to_vec(), vec![turn(5, "a", "five", None), turn(9, "a", "nine", None)]);
        t.push(turn(12, "a", "twelve", None));
        assert_eq!(t.get(&12).map(|r| r.text), Some("twelve"));
        assert_eq!(t.get(&9).map(|r| r.text), Some("nine"));
        t.clear();
        assert!(t.is_empty());
    }
}
