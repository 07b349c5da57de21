//! [`Turns`]: many turns held compactly, as a store loads them and a memory keeps them. Texts live back to back in
//! pages of [`PAGE`] bytes (no single buffer to double and copy), each page LZ4-compressed once full; session ids
//! and speakers once each; and per turn only fixed-size fields: about 40 bytes and its share of a compressed page,
//! where a [`Turn`] takes 128 bytes, three allocations of its own and its text as it is.
//!
//! Why compress: the wasm heap never shrinks, and at 100,000 units (200,000 turns) the texts were the largest
//! thing in it after the vectors (~22 MB). Recall reads the text of the few sessions it returns, and the lexical
//! index reads every text once at open, in order; both run through a one-page cache. This is what Lucene does with
//! its stored fields (LZ4 blocks of 16–60 KB). Chat text compresses 1.7× in 64 KB pages (LoCoMo's turns: 727 KB
//! → 426 KB); decompression runs at GB/s, so a recall's few pages cost microseconds.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;

use rustc_hash::FxHashMap;

use super::{unit_text_of, TimeMs, Turn};

/// Bytes of text a page is made for (a longer text gets a page of its own size).
const PAGE: usize = 64 * 1024;

/// A full page of texts, compressed: an LZ4 block of `len` bytes of UTF-8.
#[derive(Debug, Clone)]
struct Packed {
    lz4: Box<[u8]>,
    len: u32,
}

impl Packed {
    fn of(text: &str) -> Packed {
        Packed { lz4: lz4_flex::block::compress(text.as_bytes()).into_boxed_slice(), len: text.len() as u32 }
    }

    /// Its text's bytes. The blocks are made by [`of`](Self::of) from strings, or checked when adopted
    /// ([`Turns::push_packed`]), so they decode to UTF-8; were one damaged in RAM, its turns would read empty
    /// rather than abort the page. Each read checks only its own turn's bytes as UTF-8, not the page's 64 KB.
    fn unpack(&self) -> Vec<u8> {
        lz4_flex::block::decompress(&self.lz4, self.len as usize).unwrap_or_default()
    }
}

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

/// A turn of [`Turns::push_packed`]: its fields, and its text's length in the block.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedTurn<'a> {
    pub id: u64,
    pub session: &'a str,
    pub seq: u32,
    pub speaker: &'a str,
    pub caption: Option<&'a str>,
    pub time: TimeMs,
    pub ingested: TimeMs,
    pub text_len: u32,
}

/// A turn of [`Turns`], borrowed: the fields of [`Turn`] as slices (the text is a copy when its page is
/// compressed).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRef<'a> {
    pub id: u64,
    pub session: &'a str,
    pub seq: u32,
    pub speaker: &'a str,
    pub text: Cow<'a, str>,
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
            text: self.text.to_string(),
            caption: self.caption.map(str::to_string),
            time: self.time,
            ingested: self.ingested,
        }
    }

    /// [`Turn::unit_text`].
    pub fn unit_text(&self) -> String {
        unit_text_of(self.speaker, &self.text, self.caption)
    }
}

/// Turns by id. Appending in id order (how stores read them and a memory adds them) keeps them sorted; otherwise
/// [`sort`](Self::sort) must run before lookups by id.
#[derive(Debug)]
pub struct Turns {
    ids: Vec<u64>,
    rows: Vec<Row>,
    /// Full pages, compressed; page `packed.len()` is `open`.
    packed: Vec<Packed>,
    /// The page being filled.
    open: String,
    /// The last packed page read, unpacked: reads in order (the lexical index at open, a session's turns) unpack
    /// each page once. A mutex rather than a `RefCell` keeps `Turns` shareable across threads natively.
    unpacked: Mutex<Option<(u32, Vec<u8>)>>,
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
            packed: Vec::new(),
            open: String::new(),
            unpacked: Mutex::new(None),
            captions: BTreeMap::new(),
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            sorted: true,
        }
    }
}

impl Clone for Turns {
    fn clone(&self) -> Self {
        Turns {
            ids: self.ids.clone(),
            rows: self.rows.clone(),
            packed: self.packed.clone(),
            open: self.open.clone(),
            unpacked: Mutex::new(None),
            captions: self.captions.clone(),
            names: self.names.clone(),
            name_ids: self.name_ids.clone(),
            sorted: self.sorted,
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
            text: Cow::Borrowed(&t.text),
            caption: t.caption.as_deref(),
            time: t.time,
            ingested: t.ingested,
        });
    }

    fn push_ref(&mut self, t: &TurnRef) {
        if self.open.capacity() - self.open.len() < t.text.len() {
            self.pack_open();
            self.open = String::with_capacity(PAGE.max(t.text.len()));
        }
        self.open.push_str(&t.text);
        let (page, end) = (self.packed.len() as u32, self.open.len() as u32);
        self.push_row(
            t.id,
            t.session,
            t.speaker,
            t.caption,
            Row { session: 0, speaker: 0, seq: t.seq, page, end, time: t.time, ingested: t.ingested },
        );
    }

    /// Compresses the page being filled, if any turn is on it (a new one starts empty).
    fn pack_open(&mut self) {
        let on_it = self.rows.last().is_some_and(|r| r.page as usize == self.packed.len());
        if on_it || !self.open.is_empty() {
            self.packed.push(Packed::of(&self.open));
        }
        self.open = String::new();
    }

    /// Appends a turn's row (`row`'s names filled in here) and notes its caption.
    fn push_row(&mut self, id: u64, session: &str, speaker: &str, caption: Option<&str>, mut row: Row) {
        if self.ids.last().is_some_and(|&last| last >= id) {
            self.sorted = false;
        }
        (row.session, row.speaker) = (self.name(session), self.name(speaker));
        self.ids.push(id);
        self.rows.push(row);
        match caption {
            Some(c) => drop(self.captions.insert(id, c.to_string())),
            None => drop(self.captions.remove(&id)),
        }
    }

    fn at(&self, i: usize) -> TurnRef<'_> {
        let row = &self.rows[i];
        let start = match i.checked_sub(1).map(|p| &self.rows[p]) {
            Some(prev) if prev.page == row.page => prev.end as usize,
            _ => 0,
        };
        let id = self.ids[i];
        let end = row.end as usize;
        let text = match self.packed.get(row.page as usize) {
            None => Cow::Borrowed(self.open.get(start..end).unwrap_or_default()),
            Some(packed) => {
                let mut unpacked = self.unpacked.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if unpacked.as_ref().is_none_or(|(page, _)| *page != row.page) {
                    *unpacked = Some((row.page, packed.unpack()));
                }
                let page = unpacked.as_ref().map_or(&[][..], |(_, bytes)| bytes.as_slice());
                let text = page.get(start..end).and_then(|b| std::str::from_utf8(b).ok());
                Cow::Owned(text.unwrap_or_default().to_string())
            }
        };
        TurnRef {
            id,
            session: &self.names[row.session as usize],
            seq: row.seq,
            speaker: &self.names[row.speaker as usize],
            text,
            caption: self.captions.get(&id).map(String::as_str),
            time: row.time,
            ingested: row.ingested,
        }
    }

    /// Appends turns whose texts, back to back in their order (`text_len` bytes each), are the LZ4 block `lz4`
    /// of `len` bytes: a store that keeps turn texts compressed hands the block over as a page, with nothing to
    /// parse or compress. The block is checked first (it decodes to UTF-8 of `len` bytes, cut by the turns at
    /// character boundaries); on an error nothing is added.
    pub fn push_packed(&mut self, turns: &[PackedTurn], lz4: Box<[u8]>, len: u32) -> Result<(), &'static str> {
        let text = lz4_flex::block::decompress(&lz4, len as usize).map_err(|_| "its texts do not decompress")?;
        let text = std::str::from_utf8(&text).map_err(|_| "its texts are not UTF-8")?;
        let mut end = 0usize;
        for t in turns {
            end = end.checked_add(t.text_len as usize).ok_or("its text lengths overflow")?;
            if end > text.len() || !text.is_char_boundary(end) {
                return Err("its text lengths do not fit its texts");
            }
        }
        if end != text.len() || text.len() != len as usize {
            return Err("its text lengths do not add up to its texts");
        }
        self.pack_open();
        self.packed.push(Packed { lz4, len });
        let page = (self.packed.len() - 1) as u32;
        // The next turn pushed one by one starts a page of its own.
        self.open = String::new();
        self.reserve(turns.len());
        let mut end = 0u32;
        for t in turns {
            end += t.text_len;
            let row = Row { session: 0, speaker: 0, seq: t.seq, page, end, time: t.time, ingested: t.ingested };
            self.push_row(t.id, t.session, t.speaker, t.caption, row);
        }
        Ok(())
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
        assert_eq!(t.get(&4).map(|r| r.text.into_owned()).as_deref(), Some("héllo ✓"));
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
        assert_eq!(
            t.get(&2).map(|r| r.text.into_owned()).as_deref(),
            Some("two again"),
            "unsorted lookups find the latest"
        );
        t.sort();
        let ids: Vec<u64> = t.iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 5, 9]);
        assert_eq!(
            t.get(&2).map(|r| (r.text.into_owned(), r.caption.is_none())),
            Some(("two again".to_string(), true))
        );
        t.retain(|r| r.session == "a");
        assert_eq!(t.to_vec(), vec![turn(5, "a", "five", None), turn(9, "a", "nine", None)]);
        t.push(turn(12, "a", "twelve", None));
        assert_eq!(t.get(&12).map(|r| r.text.into_owned()).as_deref(), Some("twelve"));
        assert_eq!(t.get(&9).map(|r| r.text.into_owned()).as_deref(), Some("nine"));
        t.clear();
        assert!(t.is_empty());
    }

    /// Bytes the texts take in RAM: the open page as it is, packed ones compressed.
    fn held_text_bytes(t: &Turns) -> usize {
        t.open.len() + t.packed.iter().map(|p| p.lz4.len()).sum::<usize>()
    }

    #[test]
    fn texts_over_many_packed_pages_read_back_exactly_in_any_order() {
        // Chat-like lines (some non-ASCII), a 40,000-character paste, and enough of them to fill many pages.
        let text = |i: u64| match i {
            777 => "a pasted document, ".repeat(2_000) + "the end",
            _ if i % 5 == 0 => format!("Día {i}: fuimos al mercado y compramos {} naranjas ✓", i % 13),
            _ => format!("turn {i}: we talked about the garden, the {} tomatoes and the trip to Lisbon", i % 17),
        };
        let given: Vec<Turn> = (1..=3_000).map(|i| turn(i, &format!("s{}", i / 100), &text(i), None)).collect();
        let raw: usize = given.iter().map(|t| t.text.len()).sum();
        let t = Turns::from(given.clone());
        assert!(t.packed.len() >= 3, "several pages packed");
        assert!(held_text_bytes(&t) * 2 < raw, "{} bytes held for {raw}", held_text_bytes(&t));
        assert_eq!(t.to_vec(), given, "in order");
        for i in [2_999u64, 1, 1_500, 777, 2, 2_998, 778, 3_000] {
            assert_eq!(t.get(&i).map(|r| r.to_turn()).as_ref(), Some(&given[i as usize - 1]), "turn {i}");
        }
        // A clone, a retain and a sort rebuild from packed pages.
        let mut kept = t.clone();
        kept.retain(|r| r.id % 2 == 0);
        assert_eq!(kept.to_vec(), given.iter().filter(|g| g.id % 2 == 0).cloned().collect::<Vec<_>>());
        let mut shuffled = Turns::new();
        for g in given.iter().rev() {
            shuffled.push(g.clone());
        }
        shuffled.sort();
        assert_eq!(shuffled, t);
    }
}
