//! Lexical index: Okapi BM25 over the same units the vector index holds, kept in step with them (insert and remove
//! by unit id, exact document-length statistics at every moment). It never embeds and never ranks sessions; it only
//! scores units, into a buffer the caller owns.
//!
//! Hand-written rather than the `bm25` crate: that crate fixes `avgdl` when its embedder is fitted ("upserting
//! changes avgdl … the more it drifts, the less accurate") and returns freshly allocated, sorted match lists; a
//! memory that grows one message at a time needs exact statistics after every insert/remove and a score for every
//! unit written into a reused buffer. It also brings language detection and per-language stemmers the wasm build
//! would pay for. What we need is ~200 lines: an inverted index, English stopwords and a light suffix stemmer.

use rustc_hash::FxHashMap;

use crate::bytes::{u32s, ByteReader};

/// FxHash (rustc's multiply-rotate hash) for the maps: SipHash's DoS resistance buys nothing for one's own messages
/// in one's own tab, and building the index at open hashes every token of every unit.
type Vocab = FxHashMap<String, u32>;

/// BM25 k1 (term-frequency saturation); 1.2 is the usual default (Robertson & Zaragoza, 2009).
pub const K1: f32 = 1.2;
/// BM25 b (length normalisation). Lower than the usual 0.75: units are one or two utterances, so a long unit is
/// mostly a richer one, not a padded one (0.4 measured 79.4 against 79.2 recall_all@3 on LoCoMo with 0.75; a small
/// effect, chosen from 0.4/0.75/0.9).
pub const B: f32 = 0.4;

/// One indexed unit. Its terms are found in the postings only: a second, per-document copy of every (term,
/// frequency) pair doubled the index (~18 MB of the wasm heap at 100,000 units), and only removal and feedback
/// expansion read it, which a scan of the postings serves (see [`Bm25Index::remove`], [`Bm25Index::expansion_into`]).
#[derive(Debug, Clone)]
struct Doc {
    unit: u32,
    session: u32,
    len: u32,
}

/// The documents holding one term, ascending, as a byte stream: per posting the gap from the previous document
/// and the frequency, each a LEB128 varint. Most gaps and frequencies are under 128, so a posting takes ~2 bytes
/// where `(u32, u16)` arrays take 6 (at 100,000 units: ~4 MB of wasm heap instead of ~12).
///
/// LEB128 by hand rather than a crate: the `leb128` and `integer-encoding` crates read through `io::Read` or
/// return `Option`s per value, and this loop is BM25 scoring's inner loop; the format is 10 lines.
///
/// An index adopted from persisted bytes keeps each list's stream where it lies in those bytes (`base`, a range of
/// [`Bm25Index::arena`]): copying them out would hold every posting twice at that moment, and the wasm heap keeps
/// its high-water mark. Postings added later go to `bytes`, continuing the stream.
#[derive(Debug, Clone, Default)]
struct Postings {
    base: (u32, u32),
    bytes: Vec<u8>,
    count: u32,
    last: u32,
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `*at` (advancing it). The stream is written by [`put_varint`] only, so it is well formed.
#[inline(always)]
fn get_varint(bytes: &[u8], at: &mut usize) -> u32 {
    let b = bytes[*at];
    *at += 1;
    if b < 0x80 {
        return b as u32;
    }
    let (mut v, mut shift) = ((b & 0x7f) as u32, 7);
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= ((b & 0x7f) as u32) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// (document, frequency) pairs of a [`Postings`], ascending: its stream in the arena, then its own bytes.
struct PostingIter<'a> {
    bytes: &'a [u8],
    then: &'a [u8],
    at: usize,
    doc: u32,
}

impl Iterator for PostingIter<'_> {
    type Item = (u32, u16);

    #[inline(always)]
    fn next(&mut self) -> Option<(u32, u16)> {
        if self.at >= self.bytes.len() {
            if self.then.is_empty() {
                return None;
            }
            (self.bytes, self.then, self.at) = (self.then, &[], 0);
        }
        // Most postings are a one-byte gap and a one-byte frequency: both read at once.
        if let Some(&[gap, tf]) = self.bytes.get(self.at..self.at + 2) {
            if (gap | tf) < 0x80 {
                self.at += 2;
                self.doc += gap as u32;
                return Some((self.doc, tf as u16));
            }
        }
        self.doc += get_varint(self.bytes, &mut self.at);
        let tf = get_varint(self.bytes, &mut self.at);
        Some((self.doc, tf as u16))
    }
}

impl Postings {
    fn len(&self) -> usize {
        self.count as usize
    }

    /// Appends a document numbered above every one held (an insert takes the next number).
    fn push(&mut self, doc: u32, tf: u16) {
        debug_assert!(self.count == 0 || doc > self.last, "postings stay ascending");
        let gap = if self.count == 0 { doc } else { doc - self.last };
        put_varint(&mut self.bytes, gap);
        put_varint(&mut self.bytes, tf as u32);
        self.last = doc;
        self.count += 1;
    }

    /// Its stream in `arena` (empty unless adopted from persisted bytes).
    fn base<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        &arena[self.base.0 as usize..(self.base.0 + self.base.1) as usize]
    }

    /// (document, frequency) pairs, ascending.
    fn iter<'a>(&'a self, arena: &'a [u8]) -> PostingIter<'a> {
        PostingIter { bytes: self.base(arena), then: &self.bytes, at: 0, doc: 0 }
    }

    /// Drops document `gone` and renames document `moved` (the highest number) to `gone`: a swap-remove. Lists
    /// holding neither are left as they are.
    fn swap_remove_doc(&mut self, arena: &[u8], gone: u32, moved: u32) {
        if !self.iter(arena).any(|(d, _)| d == gone || d == moved) {
            return;
        }
        let mut kept: Vec<(u32, u16)> = self
            .iter(arena)
            .filter(|&(d, _)| d != gone)
            .map(|(d, tf)| (if d == moved { gone } else { d }, tf))
            .collect();
        kept.sort_unstable_by_key(|&(d, _)| d);
        *self = Postings::default();
        for (d, tf) in kept {
            self.push(d, tf);
        }
        self.bytes.shrink_to_fit();
    }

    fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
    }
}

/// An inverted index over units. Document numbers are dense (`0..len()`) and change on removal (swap-remove).
#[derive(Debug, Clone, Default)]
pub struct Bm25Index {
    vocab: Vocab,
    /// Per term: (document, frequency).
    postings: Vec<Postings>,
    /// The persisted bytes an index was adopted from, which its postings' streams are ranges of (see [`Postings`]).
    arena: Vec<u8>,
    docs: Vec<Doc>,
    doc_of_unit: DocOfUnit,
    total_len: u64,
    /// Lower-cased word → its term ([`STOP`] for a stopword): the stopword test and the stemmer run once per
    /// distinct word, not once per occurrence (building the index at open tokenises every unit).
    words: Vocab,
    /// A unit's term ids while it is indexed (reused: no allocation per unit).
    scratch_ids: Vec<u32>,
    /// What scoring derives from the documents alone, computed at the first query after a change (see
    /// [`Scoring`]); any insert, removal or session renumbering empties it.
    scoring: std::cell::OnceCell<Scoring>,
    /// Renewed whenever a document is added or removed, or documents are renumbered ([`Bm25Index::stamp`]).
    stamp: super::Stamp,
}

/// Per-document and per-session figures every query's scoring would otherwise recompute: at 100,000 units a
/// query reads each document's length once per posting (hundreds of thousands of postings when its terms are
/// common) and sums every session's length. Computed by the same expressions as before, so scores are unchanged
/// to the bit.
#[derive(Debug, Clone, Default)]
struct Scoring {
    /// Per document: BM25's length normalisation `k1 · (1 − b + b · len / avgdl)`.
    norms: Vec<f32>,
    /// Per session number (up to the highest held): the summed length of its documents, in document order.
    session_len: Vec<f32>,
}

/// Each unit's document number, by unit id: ids are issued one after another, so an array indexed by id is a
/// quarter of a hash map's size and recall reads it once per row (a hash lookup per row was ~1 ms of a 100k-unit
/// query in the page).
#[derive(Debug, Clone, Default)]
struct DocOfUnit(Vec<u32>);

impl DocOfUnit {
    const NONE: u32 = u32::MAX;

    fn get(&self, unit: u32) -> Option<u32> {
        self.0.get(unit as usize).copied().filter(|&d| d != Self::NONE)
    }

    /// Sets `unit`'s document; returns the one it replaced.
    fn insert(&mut self, unit: u32, doc: u32) -> Option<u32> {
        let i = unit as usize;
        if i >= self.0.len() {
            self.0.resize(i + 1, Self::NONE);
        }
        Some(std::mem::replace(&mut self.0[i], doc)).filter(|&d| d != Self::NONE)
    }

    fn remove(&mut self, unit: u32) -> Option<u32> {
        let slot = self.0.get_mut(unit as usize)?;
        Some(std::mem::replace(slot, Self::NONE)).filter(|&d| d != Self::NONE)
    }
}

/// In [`Bm25Index::words`]: the word is a stopword.
const STOP: u32 = u32::MAX;

/// A tokenized query: term ids known to the index, with their frequency in the query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    terms: Vec<(u32, u16)>,
}

impl Query {
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

impl Bm25Index {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of indexed units.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Unit of each document number.
    pub fn unit(&self, doc: usize) -> u32 {
        self.docs[doc].unit
    }

    /// Session number of each document number.
    pub fn session(&self, doc: usize) -> u32 {
        self.docs[doc].session
    }

    /// Changes whenever a document is added, removed or renumbered: what [`doc_of`](Self::doc_of) answers for any
    /// unit stands while the stamp does.
    pub fn stamp(&self) -> super::Stamp {
        self.stamp
    }

    /// The document number of a unit, if indexed.
    pub fn doc_of(&self, unit: u32) -> Option<usize> {
        self.doc_of_unit.get(unit).map(|d| d as usize)
    }

    /// Makes room for `units` more documents (at open the count is known).
    pub fn reserve(&mut self, units: usize) {
        self.docs.reserve_exact(units);
    }

    /// Indexes `text` as `unit` of `session` (replacing an earlier version of the unit). Allocates only for terms
    /// new to the vocabulary and the document's term list.
    pub fn insert(&mut self, unit: u32, session: u32, text: &str) {
        self.insert_parts(unit, session, [text]);
    }

    /// [`insert`](Self::insert) of the text made of `parts` joined by non-alphanumeric separators (e.g. the turns
    /// of a unit, without building the joined string).
    pub fn insert_parts<'a>(&mut self, unit: u32, session: u32, parts: impl IntoIterator<Item = &'a str>) {
        self.remove(unit);
        let mut ids = std::mem::take(&mut self.scratch_ids);
        ids.clear();
        let (mut lower, mut stemmed) = (String::new(), String::new());
        for part in parts {
            for_each_word(part, |w| {
                // Most words are lower-case ASCII already: look them up as they are.
                let key = if w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
                    w
                } else {
                    lowercase_into(w, &mut lower);
                    lower.as_str()
                };
                let id = match self.words.get(key) {
                    Some(&id) => id,
                    None => {
                        let id = if is_stopword(key) {
                            STOP
                        } else {
                            stem_into(key, &mut stemmed);
                            match self.vocab.get(stemmed.as_str()) {
                                Some(&id) => id,
                                None => {
                                    let id = self.vocab.len() as u32;
                                    self.vocab.insert(stemmed.clone(), id);
                                    self.postings.push(Postings::default());
                                    id
                                }
                            }
                        };
                        self.words.insert(key.to_string(), id);
                        id
                    }
                };
                if id != STOP {
                    ids.push(id);
                }
            });
        }
        let len = ids.len() as u32;
        ids.sort_unstable();
        let d = self.docs.len() as u32;
        // Each distinct term of the sorted list once, with its count.
        let mut i = 0;
        while i < ids.len() {
            let t = ids[i];
            let run = ids[i..].iter().take_while(|&&x| x == t).count();
            self.postings[t as usize].push(d, run.min(u16::MAX as usize) as u16);
            i += run;
        }
        self.scratch_ids = ids;
        self.scoring.take();
        self.stamp = super::Stamp::fresh();
        self.total_len += len as u64;
        self.doc_of_unit.insert(unit, d);
        self.docs.push(Doc { unit, session, len });
    }

    /// Removes a unit (no-op when absent). Swap-remove: the last document takes its number.
    pub fn remove(&mut self, unit: u32) {
        let Some(d) = self.doc_of_unit.remove(unit) else {
            return;
        };
        let doc = self.docs.swap_remove(d as usize);
        self.scoring.take();
        self.stamp = super::Stamp::fresh();
        self.total_len -= doc.len as u64;
        let moved = self.docs.len() as u32; // the old number of the document now at `d`
                                            // Every posting list is scanned (documents keep no term list of their own): one pass over the postings,
                                            // a few milliseconds at 100,000 units, once per removed unit.
        for p in &mut self.postings {
            p.swap_remove_doc(&self.arena, d, moved);
        }
        if d != moved {
            self.doc_of_unit.insert(self.docs[d as usize].unit, d);
        }
    }

    /// Returns the room the posting lists grew into beyond what they hold (a build grows each list by doubling).
    pub fn shrink_to_fit(&mut self) {
        self.postings.iter_mut().for_each(Postings::shrink_to_fit);
    }

    /// Empties the index.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Terms of each of `docs` (document numbers, in that order, distinct): (term, frequency) in term order, as
    /// indexed. One scan of the postings.
    fn terms_of(&self, docs: &[usize]) -> Vec<Vec<(u32, u16)>> {
        let mut slot = vec![u32::MAX; self.docs.len()];
        for (i, &d) in docs.iter().enumerate() {
            slot[d] = i as u32;
        }
        let mut out = vec![Vec::new(); docs.len()];
        for (t, p) in self.postings.iter().enumerate() {
            for (d, tf) in p.iter(&self.arena) {
                if let Some(&i) = slot.get(d as usize).filter(|&&i| i != u32::MAX) {
                    out[i as usize].push((t as u32, tf));
                }
            }
        }
        out
    }

    /// Length of a document in tokens (after stopwords).
    pub fn doc_len(&self, doc: usize) -> u32 {
        self.docs[doc].len
    }

    /// Number of documents holding `term`.
    pub fn df(&self, term: u32) -> usize {
        self.postings[term as usize].len()
    }

    /// Tokenizes a query against the vocabulary (terms the index has never seen cannot score and are dropped).
    pub fn query(&self, text: &str) -> Query {
        let mut terms: Vec<(u32, u16)> = Vec::new();
        let (mut lower, mut stemmed) = (String::new(), String::new());
        for_each_token(text, &mut lower, &mut stemmed, |token| {
            if let Some(&id) = self.vocab.get(token) {
                match terms.iter_mut().find(|(t, _)| *t == id) {
                    Some(e) => e.1 = e.1.saturating_add(1),
                    None => terms.push((id, 1)),
                }
            }
        });
        Query { terms }
    }

    /// The (term, count) pairs a document made of `parts` was indexed with ([`insert_parts`](Self::insert_parts)
    /// tokenizes the same way), in term order; words the index has never seen are dropped. What feedback reads
    /// of its best unit, from the unit's text, since documents keep no term list of their own.
    pub fn terms_of_parts<'a>(&self, parts: impl IntoIterator<Item = &'a str>) -> Vec<(u32, u16)> {
        let mut ids: Vec<u32> = Vec::new();
        let (mut lower, mut stemmed) = (String::new(), String::new());
        for part in parts {
            for_each_token(part, &mut lower, &mut stemmed, |token| {
                if let Some(&id) = self.vocab.get(token) {
                    ids.push(id);
                }
            });
        }
        ids.sort_unstable();
        let mut out: Vec<(u32, u16)> = Vec::new();
        for id in ids {
            match out.last_mut() {
                Some(e) if e.0 == id => e.1 = e.1.saturating_add(1),
                _ => out.push((id, 1)),
            }
        }
        out
    }

    /// The BM25 idf of a term: ln(1 + (N − df + 0.5) / (df + 0.5)), always positive (the Lucene form).
    pub fn idf(&self, term: u32) -> f32 {
        let n = self.docs.len() as f32;
        let df = self.postings[term as usize].len() as f32;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The figures scoring reads ([`Scoring`]), computed once after a change.
    fn scoring(&self) -> &Scoring {
        self.scoring.get_or_init(|| {
            let avgdl = (self.total_len as f32 / self.docs.len().max(1) as f32).max(1.0);
            let norms = self.docs.iter().map(|d| K1 * (1.0 - B + B * d.len as f32 / avgdl)).collect();
            let sessions = self.docs.iter().map(|d| d.session as usize + 1).max().unwrap_or(0);
            let mut session_len = vec![0.0f32; sessions];
            for d in &self.docs {
                session_len[d.session as usize] += d.len as f32;
            }
            Scoring { norms, session_len }
        })
    }

    /// Adds `weight` × the BM25 of `term` to every document holding it (`out` by document number).
    fn add_term_scores(&self, term: u32, weight: f32, norms: &[f32], out: &mut [f32]) {
        for (d, tf) in self.postings[term as usize].iter(&self.arena) {
            let tf = tf as f32;
            out[d as usize] += weight * tf * (K1 + 1.0) / (tf + norms[d as usize]);
        }
    }

    /// BM25 score of every document into `out` (cleared first; indexed by document number). A query term counts
    /// once per occurrence in the query. Allocates nothing once `out` has grown to the index size.
    pub fn scores_into(&self, query: &Query, out: &mut Vec<f32>) {
        out.clear();
        out.resize(self.docs.len(), 0.0);
        if self.docs.is_empty() {
            return;
        }
        let norms = &self.scoring().norms;
        for &(t, qtf) in &query.terms {
            self.add_term_scores(t, self.idf(t) * qtf as f32, norms, out);
        }
    }
}

impl Query {
    /// (term, frequency in the query).
    pub fn terms(&self) -> &[(u32, u16)] {
        &self.terms
    }
}

/// BM25 b when whole sessions are the documents: sessions differ in length by tens of units, and a long session
/// matching a term once is weaker evidence than a short one, so length counts as much as usual (0.75).
pub const B_SESSION: f32 = 0.75;

impl Bm25Index {
    /// Adds the BM25 score of weighted terms (term, weight in place of the query frequency) to `out`, indexed by
    /// document number (`out` holds one entry per document).
    pub fn add_weighted_scores(&self, terms: &[(u32, f32)], out: &mut [f32]) {
        if self.docs.is_empty() || out.len() < self.docs.len() {
            return;
        }
        let norms = &self.scoring().norms;
        for &(t, qw) in terms {
            self.add_term_scores(t, self.idf(t) * qw, norms, out);
        }
    }

    /// `text` without the words whose term is held by at least `share` of the documents (in a conversation, the
    /// names of the two people, tagged on nearly every unit); `None` when no word is dropped. Stopwords stay.
    pub fn without_common_words(&self, text: &str, share: f32) -> Option<String> {
        if self.docs.is_empty() {
            return None;
        }
        let min_df = (share * self.docs.len() as f32).ceil().max(1.0) as usize;
        let (mut lower, mut stemmed) = (String::new(), String::new());
        let mut out = String::new();
        let mut kept_to = 0;
        for_each_word(text, |w| {
            lowercase_into(w, &mut lower);
            if is_stopword(&lower) {
                return;
            }
            stem_into(&lower, &mut stemmed);
            if self.vocab.get(stemmed.as_str()).is_some_and(|&t| self.postings[t as usize].len() >= min_df) {
                // `w` is a slice of `text`: its offset says what to copy before it.
                let start = w.as_ptr() as usize - text.as_ptr() as usize;
                out.push_str(&text[kept_to..start]);
                kept_to = start + w.len();
            }
        });
        if kept_to == 0 {
            return None;
        }
        out.push_str(&text[kept_to..]);
        Some(out)
    }

    /// Pseudo-relevance feedback: the `n_terms` terms that best characterise `docs` ((document, weight) pairs),
    /// scored Σ weight · tf / len · idf, into `out` best first with weights scaled to sum to `total`. Terms held
    /// by a single document in the index are skipped (names and typos of one exchange do not generalise).
    /// `acc` is a scratch buffer (one entry per vocabulary term, left zeroed).
    pub fn expansion_into(
        &self,
        docs: &[(usize, f32)],
        doc_terms: Option<&dyn Fn(usize) -> Vec<(u32, u16)>>,
        n_terms: usize,
        total: f32,
        acc: &mut Vec<f32>,
        out: &mut Vec<(u32, f32)>,
    ) {
        out.clear();
        acc.resize(self.postings.len(), 0.0);
        let mut wanted: Vec<usize> = Vec::with_capacity(docs.len());
        for &(d, w) in docs {
            if w > 0.0 && self.docs.get(d).is_some_and(|doc| doc.len > 0) && !wanted.contains(&d) {
                wanted.push(d);
            }
        }
        // The caller can tokenize a document's text again (microseconds); else one scan of all postings.
        let terms = match doc_terms {
            Some(f) => wanted.iter().map(|&d| f(d)).collect(),
            None => self.terms_of(&wanted),
        };
        for &(d, w) in docs {
            let Some(doc) = self.docs.get(d) else { continue };
            if w <= 0.0 || doc.len == 0 {
                continue;
            }
            let Some(i) = wanted.iter().position(|&x| x == d) else { continue };
            for &(t, tf) in &terms[i] {
                if self.postings[t as usize].len() < 2 {
                    continue;
                }
                if acc[t as usize] == 0.0 {
                    out.push((t, 0.0));
                }
                acc[t as usize] += w * tf as f32 / doc.len as f32 * self.idf(t);
            }
        }
        for e in out.iter_mut() {
            e.1 = std::mem::take(&mut acc[e.0 as usize]);
        }
        out.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(n_terms);
        let sum: f32 = out.iter().map(|e| e.1).sum();
        if sum > 0.0 {
            out.iter_mut().for_each(|e| e.1 *= total / sum);
        }
    }

    /// BM25 of `query` with whole sessions as the documents (a session = the concatenation of its units; idf over
    /// sessions; b = [`B_SESSION`]) into `out`, indexed by session number `0..sessions`. `scratch` is reused.
    pub fn session_scores_into(&self, query: &Query, sessions: usize, scratch: &mut Vec<f32>, out: &mut Vec<f32>) {
        out.clear();
        out.resize(sessions, 0.0);
        scratch.clear();
        scratch.resize(sessions, 0.0);
        let tf = &mut scratch[..];
        // Sessions past the highest one held have no length (and no postings).
        let len = &self.scoring().session_len;
        let len = &len[..sessions.min(len.len())];
        let present = len.iter().filter(|&&l| l > 0.0).count();
        if present == 0 {
            return;
        }
        let n = present as f32;
        let avg = (len.iter().sum::<f32>() / n).max(1.0);
        for &(t, qtf) in &query.terms {
            tf.iter_mut().for_each(|x| *x = 0.0);
            for (d, f) in self.postings[t as usize].iter(&self.arena) {
                let s = self.docs[d as usize].session as usize;
                if s < sessions {
                    tf[s] += f as f32;
                }
            }
            let df = tf.iter().filter(|&&x| x > 0.0).count() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * qtf as f32;
            for ((o, &f), &l) in out.iter_mut().zip(tf.iter()).zip(len.iter()) {
                if f > 0.0 {
                    *o += idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B_SESSION + B_SESSION * l / avg));
                }
            }
        }
    }
}

/// English stopwords (a short list: function words, auxiliaries, pronouns). Question words are stopwords too:
/// they say what kind of answer is wanted, not where it is.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being",
    "but", "by", "can", "could", "d", "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having",
    "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "ll", "m",
    "me", "my", "no", "not", "of", "on", "or", "our", "ours", "re", "s", "she", "so", "some", "such", "t", "than",
    "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too", "up",
    "us", "ve", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will",
    "with", "would", "you", "your", "yours",
];

fn is_stopword(w: &str) -> bool {
    STOPWORDS.binary_search(&w).is_ok()
}

/// Lower-cased alphanumeric runs, stopwords removed, each reduced by [`stem`].
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !is_stopword(w))
        .map(|w| stem(&w))
}

/// Calls `f` with each token of `text`, exactly as [`tokens`] yields them, built in the reused buffers `lower` and
/// `stemmed` rather than allocated one by one.
fn for_each_token(text: &str, lower: &mut String, stemmed: &mut String, mut f: impl FnMut(&str)) {
    for_each_word(text, |w| {
        lowercase_into(w, lower);
        if !is_stopword(lower) {
            stem_into(lower, stemmed);
            f(stemmed);
        }
    });
}

/// The maximal alphanumeric runs of `text` (Unicode `is_alphanumeric`), with a byte-level path for ASCII text.
fn for_each_word<'t>(text: &'t str, mut f: impl FnMut(&'t str)) {
    if !text.is_ascii() {
        text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).for_each(f);
        return;
    }
    let mut start = None;
    for (i, b) in text.bytes().enumerate() {
        match (b.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                f(&text[s..i]);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        f(&text[s..]);
    }
}

/// `w` lower-cased (as `str::to_lowercase`) into `lower`, cleared first.
fn lowercase_into(w: &str, lower: &mut String) {
    lower.clear();
    if w.is_ascii() {
        lower.push_str(w);
        lower.make_ascii_lowercase();
    } else {
        lower.push_str(&w.to_lowercase());
    }
}

/// A light English suffix stemmer (plurals, -ing, -ed, -ly, a few derivational endings), in the spirit of the
/// "S-stemmer" and Porter's step 1: conservative, so that distinct words rarely merge. Non-ASCII words are kept.
pub fn stem(w: &str) -> String {
    let mut s = String::with_capacity(w.len());
    stem_into(w, &mut s);
    s
}

/// [`stem`] into `s` (cleared first).
fn stem_into(w: &str, s: &mut String) {
    s.clear();
    s.push_str(w);
    if !w.is_ascii() || w.len() <= 3 || w.bytes().any(|b| b.is_ascii_digit()) {
        return;
    }
    let has_vowel = |s: &str| s.bytes().any(|b| b"aeiouy".contains(&b));
    // Plurals and third person.
    if s.ends_with("sses") {
        s.truncate(s.len() - 2);
    } else if s.ends_with("ies") && s.len() > 4 {
        s.truncate(s.len() - 3);
        s.push('i');
    } else if s.ends_with('s') && !s.ends_with("ss") && !s.ends_with("us") && !s.ends_with("is") {
        s.pop();
    }
    // -ing, -ed: only when a vowel stays in the stem ("sing", "bed" stay).
    for suffix in ["ing", "ed"] {
        if s.len() > suffix.len() + 2 && s.ends_with(suffix) && has_vowel(&s[..s.len() - suffix.len()]) {
            s.truncate(s.len() - suffix.len());
            let b = s.as_bytes();
            let n = b.len();
            if n >= 2 && b[n - 1] == b[n - 2] && !b"lsz".contains(&b[n - 1]) {
                s.pop(); // running → run, stopped → stop
            } else if s.ends_with("at") || s.ends_with("bl") || s.ends_with("iz") {
                s.push('e'); // created → create
            }
            break;
        }
    }
    if s.len() > 5 && s.ends_with("ly") {
        s.truncate(s.len() - 2);
    }
    // A final -e varies with the suffixes above ("create"/"creat-ing"): drop it; a final -y after a consonant
    // becomes -i as in "parti-es" and "happi-ly" (Porter's step 1c).
    if s.len() > 3 && s.ends_with('e') {
        s.pop();
    } else if s.len() > 2 && s.ends_with('y') && !b"aeiou".contains(&s.as_bytes()[s.len() - 2]) {
        s.pop();
        s.push('i');
    }
}

/// The persisted form's first bytes, with its version: bumped whenever the tokenizer, the stopwords, the stemmer or
/// the layout change, so that an index persisted by another loci is rebuilt, never misread.
const PERSISTED_MAGIC: &[u8; 8] = b"loci-bm1";

/// The varint at `*at` of a stream read from storage: `None` if it runs past the end or past 32 bits.
fn get_varint_checked(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut v = 0u32;
    for shift in (0..35).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u32::try_from(((b & 0x7f) as u64) << shift).ok()?;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

impl Postings {
    /// Whether a stream read from storage is one [`push`](Self::push) would have written: well-formed varints,
    /// `count` postings, documents ascending below `docs`, frequencies from 1 to `u16::MAX`, the last one `last`.
    fn checked(bytes: &[u8], count: u32, last: u32, docs: u32) -> Option<()> {
        let (mut at, mut n, mut doc) = (0usize, 0u32, 0u32);
        while at < bytes.len() {
            let gap = get_varint_checked(bytes, &mut at)?;
            let tf = get_varint_checked(bytes, &mut at)?;
            if (n > 0 && gap == 0) || tf == 0 || tf > u16::MAX as u32 {
                return None;
            }
            doc = doc.checked_add(gap)?;
            n += 1;
        }
        let ends_right = if n == 0 { last == 0 } else { doc == last && doc < docs };
        (n == count && ends_right).then_some(())
    }
}

impl Bm25Index {
    /// Units in document order.
    pub fn units(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        self.docs.iter().map(|d| d.unit)
    }

    /// The index as bytes to persist, with the caller's `fingerprint` of what it indexed (checked by whoever
    /// adopts it): the postings as they are (varint streams), the vocabulary, and each document's unit and length.
    /// Sessions are left out: they are numbered at open, and a later open may number them otherwise.
    pub fn to_bytes(&self, fingerprint: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.persisted_len());
        self.write_persisted(fingerprint, &mut |piece| out.extend_from_slice(piece));
        out
    }

    /// The length of [`to_bytes`](Self::to_bytes).
    pub fn persisted_len(&self) -> usize {
        let terms = self.vocab.keys().map(String::len).sum::<usize>();
        let postings = self.postings.iter().map(|p| 16 + p.base.1 as usize + p.bytes.len()).sum::<usize>();
        PERSISTED_MAGIC.len() + 16 + self.docs.len() * 8 + terms + postings
    }

    /// [`to_bytes`](Self::to_bytes) handed to `sink` in pieces (none over 64 KB but a posting list), so that a
    /// store can copy them out of the wasm heap without the whole in it at once.
    pub fn write_persisted(&self, fingerprint: u64, sink: &mut dyn FnMut(&[u8])) {
        const PIECE: usize = 64 * 1024;
        let mut terms: Vec<&str> = vec![""; self.postings.len()];
        for (term, &id) in &self.vocab {
            terms[id as usize] = term;
        }
        let mut buf: Vec<u8> = Vec::with_capacity(PIECE);
        let mut put = |bytes: &[u8], buf: &mut Vec<u8>| {
            if buf.len() + bytes.len() > PIECE {
                sink(buf);
                buf.clear();
            }
            match bytes.len() > PIECE {
                true => sink(bytes),
                false => buf.extend_from_slice(bytes),
            }
        };
        put(PERSISTED_MAGIC, &mut buf);
        put(&fingerprint.to_le_bytes(), &mut buf);
        put(&(self.docs.len() as u32).to_le_bytes(), &mut buf);
        put(&(terms.len() as u32).to_le_bytes(), &mut buf);
        self.docs.iter().for_each(|d| put(&d.unit.to_le_bytes(), &mut buf));
        self.docs.iter().for_each(|d| put(&d.len.to_le_bytes(), &mut buf));
        for (term, p) in terms.iter().zip(&self.postings) {
            let base = p.base(&self.arena);
            for n in [term.len() as u32, p.count, p.last, (base.len() + p.bytes.len()) as u32] {
                put(&n.to_le_bytes(), &mut buf);
            }
            put(term.as_bytes(), &mut buf);
            put(base, &mut buf);
            put(&p.bytes, &mut buf);
        }
        if !buf.is_empty() {
            sink(&buf);
        }
    }

    /// An index persisted by [`to_bytes`](Self::to_bytes), and its fingerprint; `None` for anything it did not
    /// write (another version, truncated or altered bytes: every list is checked, so a damaged one cannot make
    /// scoring read out of bounds). The postings stay in `bytes`, which the index keeps. Every document is in
    /// session 0 until [`set_sessions`](Self::set_sessions).
    pub fn from_bytes(bytes: Vec<u8>) -> Option<(Bm25Index, u64)> {
        let mut r = ByteReader::new(&bytes);
        if r.take(PERSISTED_MAGIC.len())? != PERSISTED_MAGIC {
            return None;
        }
        let fingerprint = r.u64()?;
        let (n_docs, n_terms) = (r.u32()?, r.u32()? as usize);
        let units = r.take_items(n_docs as usize, 4)?;
        let lens = r.take_items(n_docs as usize, 4)?;
        let mut index = Bm25Index::new();
        index.reserve(n_docs as usize);
        // Unit ids are issued one after another, so the highest is near the count (unless most units were
        // forgotten); far above it, the bytes are damaged, and would have `DocOfUnit` allocate for nothing.
        if u32s(units).any(|u| u as usize > 64 * n_docs as usize + 4096) {
            return None;
        }
        for (d, (unit, len)) in u32s(units).zip(u32s(lens)).enumerate() {
            if index.doc_of_unit.insert(unit, d as u32).is_some() {
                return None; // a unit twice
            }
            index.total_len += len as u64;
            index.docs.push(Doc { unit, session: 0, len });
        }
        // Each term takes 16 bytes at least: a count read from damaged bytes cannot reserve more than they hold.
        if n_terms > r.remaining() / 16 {
            return None;
        }
        index.postings.reserve_exact(n_terms);
        index.vocab.reserve(n_terms);
        for id in 0..n_terms as u32 {
            let (term_len, count, last, len) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            let term = std::str::from_utf8(r.take(term_len as usize)?).ok()?;
            let start = r.position() as u32;
            Postings::checked(r.take(len as usize)?, count, last, n_docs)?;
            if index.vocab.insert(term.to_string(), id).is_some() {
                return None; // a term twice
            }
            index.postings.push(Postings { base: (start, len), bytes: Vec::new(), count, last });
        }
        if r.remaining() != 0 {
            return None;
        }
        index.arena = bytes;
        index.stamp = super::Stamp::fresh();
        Some((index, fingerprint))
    }

    /// Numbers each document's session: `session_of(unit)`.
    pub fn set_sessions(&mut self, mut session_of: impl FnMut(u32) -> u32) {
        self.docs.iter_mut().for_each(|d| d.session = session_of(d.unit));
        self.scoring.take();
        self.stamp = super::Stamp::fresh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]), "STOPWORDS must stay sorted");
    }

    #[test]
    fn common_words_leave_the_query() {
        let mut lex = Bm25Index::new();
        for (u, text) in ["[Ana]: pottery class", "[Ben]: [Ana]: car brakes", "[Ana]: hello", "[Ana]: [Ben]: bye"]
            .into_iter()
            .enumerate()
        {
            lex.insert(u as u32, 0, text);
        }
        // "Ana" is in every unit, "Ben" in half of them, "pottery" in one.
        assert_eq!(
            lex.without_common_words("What did Ana's pottery look like?", 0.75).as_deref(),
            Some("What did 's pottery look like?")
        );
        assert_eq!(lex.without_common_words("Ben and Ana", 0.5).as_deref(), Some(" and "));
        assert_eq!(lex.without_common_words("pottery and brakes", 0.5), None);
        assert_eq!(Bm25Index::new().without_common_words("Ana", 0.5), None);
    }

    #[test]
    fn stemming_merges_inflections_only() {
        for (a, b) in [
            ("painting", "paints"),
            ("painted", "paint"),
            ("hiking", "hikes"),
            ("parties", "party"),
            ("running", "runs"),
            ("created", "creates"),
            ("happily", "happy"),
            ("adopted", "adoption"),
        ] {
            if a == "adopted" {
                assert_ne!(stem(a), stem(b), "{a} {b}");
            } else {
                assert_eq!(stem(a), stem(b), "{a} {b}");
            }
        }
        assert_ne!(stem("sing"), stem("sign"));
        assert_ne!(stem("party"), stem("part"));
        assert_eq!(stem("bus"), "bus");
        assert_eq!(stem("2023"), "2023");
    }

    #[test]
    fn tokens_drop_stopwords_and_punctuation() {
        let t: Vec<String> = tokens("[Caroline]: What's the LGBTQ support group she went to?").collect();
        assert_eq!(t, vec!["carolin", "lgbtq", "support", "group", "went"]);
    }

    #[test]
    fn a_persisted_index_scores_and_grows_as_the_one_it_was_taken_from() {
        let mut ix = tiny();
        ix.insert(13, 1, "markets rallied, the dog slept");
        ix.remove(11); // a swap-remove: documents out of unit order
        let bytes = ix.to_bytes(0xfeed);
        assert_eq!(bytes.len(), ix.persisted_len());
        let (mut back, fingerprint) = Bm25Index::from_bytes(bytes.clone()).unwrap();
        assert_eq!(fingerprint, 0xfeed);
        assert_eq!(back.units().collect::<Vec<_>>(), ix.units().collect::<Vec<_>>());
        back.set_sessions(|unit| if unit >= 12 { 1 } else { 0 });
        for q in ["cat", "markets dog", "stock rallied sharply", "nothing here"] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            ix.scores_into(&ix.query(q), &mut a);
            back.scores_into(&back.query(q), &mut b);
            assert_eq!(a, b, "{q}");
            let (mut sa, mut sb, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
            ix.session_scores_into(&ix.query(q), 2, &mut scratch, &mut sa);
            back.session_scores_into(&back.query(q), 2, &mut scratch, &mut sb);
            assert_eq!(sa, sb, "{q}");
        }
        // It takes inserts and removals as the original does.
        for i in [&mut ix, &mut back] {
            i.insert(14, 0, "the cat chased markets");
            i.remove(10);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        ix.scores_into(&ix.query("cat markets"), &mut a);
        back.scores_into(&back.query("cat markets"), &mut b);
        assert_eq!(a, b);
        assert_eq!(back.to_bytes(1), ix.to_bytes(1));
    }

    #[test]
    fn damaged_persisted_bytes_are_refused_never_read() {
        let bytes = tiny().to_bytes(7);
        assert!(Bm25Index::from_bytes(bytes.clone()).is_some());
        assert!(Bm25Index::from_bytes(Vec::new()).is_none());
        // Every truncation, and a byte too many.
        for n in 0..bytes.len() {
            assert!(Bm25Index::from_bytes(bytes[..n].to_vec()).is_none(), "cut at {n}");
        }
        assert!(Bm25Index::from_bytes([bytes.as_slice(), &[0]].concat()).is_none());
        // Another version.
        let mut other = bytes.clone();
        other[7] = b'2';
        assert!(Bm25Index::from_bytes(other).is_none());
        // Every single-byte change either is refused or reads back as a well-formed index (a changed unit id,
        // length or letter of a term): scoring it must not panic.
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                if let Some((ix, _)) = Bm25Index::from_bytes(b) {
                    let mut out = Vec::new();
                    ix.scores_into(&ix.query("cat dog stock markets mat"), &mut out);
                    assert_eq!(out.len(), ix.len());
                }
            }
        }
        // Postings claiming a document past the last, or out of order.
        assert!(Postings::checked(&[3, 1], 1, 3, 3).is_none());
        assert!(Postings::checked(&[1, 1, 0, 1], 2, 1, 3).is_none());
        assert!(Postings::checked(&[1, 1, 1, 1], 2, 2, 3).is_some());
        assert!(Postings::checked(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], 1, 0, 3).is_none());
    }

    fn tiny() -> Bm25Index {
        let mut ix = Bm25Index::new();
        ix.insert(10, 0, "the cat sat on the mat");
        ix.insert(11, 0, "a dog chased the cat and the cat ran");
        ix.insert(12, 1, "stock markets fell sharply");
        ix
    }

    /// BM25 by the textbook formula, for one term.
    fn reference(tf: f32, df: f32, n: f32, len: f32, avgdl: f32) -> f32 {
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avgdl))
    }

    #[test]
    fn scores_match_the_formula_on_a_tiny_corpus() {
        let ix = tiny();
        // Lengths after stopwords: [cat sat mat] = 3, [dog chas cat cat ran] = 5, [stock market fell sharp] = 4.
        let avgdl = 12.0 / 3.0;
        let mut out = Vec::new();
        ix.scores_into(&ix.query("cat"), &mut out);
        assert!((out[0] - reference(1.0, 2.0, 3.0, 3.0, avgdl)).abs() < 1e-6);
        assert!((out[1] - reference(2.0, 2.0, 3.0, 5.0, avgdl)).abs() < 1e-6);
        assert_eq!(out[2], 0.0);
        ix.scores_into(&ix.query("Markets falling? cats!"), &mut out);
        assert!(out[2] > out[0] && out[0] > 0.0);
        ix.scores_into(&ix.query("unknown words only"), &mut out);
        assert!(out.iter().all(|&s| s == 0.0));
    }

    #[test]
    fn weighted_terms_score_as_repeated_query_terms() {
        let ix = tiny();
        let mut plain = Vec::new();
        ix.scores_into(&ix.query("cat cat market"), &mut plain);
        let terms: Vec<(u32, f32)> = ix.query("cat market").terms().iter().map(|&(t, _)| (t, 1.0)).collect();
        let cat = terms[0].0;
        let weighted = [(cat, 2.0), terms[1]];
        let mut out = vec![0.0; ix.len()];
        ix.add_weighted_scores(&weighted, &mut out);
        for (a, b) in plain.iter().zip(&out) {
            assert!((a - b).abs() < 1e-6);
        }
        ix.add_weighted_scores(&weighted, &mut out[..1]); // too short: ignored
    }

    #[test]
    fn expansion_picks_shared_terms_of_the_feedback_documents() {
        let mut ix = Bm25Index::new();
        ix.insert(1, 0, "pottery class and a kiln");
        ix.insert(2, 0, "kiln firing pottery glaze");
        ix.insert(3, 1, "glaze recipe");
        ix.insert(4, 1, "zebra");
        let (mut acc, mut out) = (Vec::new(), Vec::new());
        ix.expansion_into(&[(0, 1.0), (1, 0.5)], None, 3, 2.0, &mut acc, &mut out);
        let id = |w: &str| ix.query(w).terms()[0].0;
        // "class" and "firing" are in one document of the index only: skipped. Kiln and pottery (in both feedback
        // documents) lead; glaze follows.
        let got: Vec<u32> = out.iter().map(|e| e.0).collect();
        assert_eq!(got.len(), 3);
        assert!(got[..2].contains(&id("kiln")) && got[..2].contains(&id("pottery")) && got[2] == id("glaze"));
        assert!((out.iter().map(|e| e.1).sum::<f32>() - 2.0).abs() < 1e-5);
        assert!(acc.iter().all(|&x| x == 0.0), "the accumulator is left zeroed");
        ix.expansion_into(&[(0, 0.0), (9, 1.0)], None, 3, 2.0, &mut acc, &mut out);
        assert!(out.is_empty(), "zero weights and unknown documents add nothing");
    }

    #[test]
    fn a_documents_text_gives_back_the_terms_it_was_indexed_with() {
        let mut ix = tiny();
        let parts = ["Ana", "Cats! The CAT café, and cats again", "The image Caption", "a café sign"];
        ix.insert_parts(13, 2, parts);
        for (doc, text) in [(0usize, vec!["the cat sat on the mat"]), (3, parts.to_vec())] {
            assert_eq!(ix.terms_of_parts(text.iter().copied()), ix.terms_of(&[doc])[0], "document {doc}");
        }
        // Feedback reads the same expansion either way.
        let (mut acc, mut by_scan, mut by_text) = (Vec::new(), Vec::new(), Vec::new());
        let docs = [(3, 1.0), (1, 0.5)];
        ix.expansion_into(&docs, None, 5, 2.0, &mut acc, &mut by_scan);
        let from_text = |d: usize| match d {
            3 => ix.terms_of_parts(parts),
            _ => ix.terms_of_parts(["a dog chased the cat and the cat ran"]),
        };
        ix.expansion_into(&docs, Some(&from_text), 5, 2.0, &mut acc, &mut by_text);
        assert!(!by_scan.is_empty());
        assert_eq!(by_scan, by_text);
    }

    #[test]
    fn session_documents_sum_their_units() {
        let ix = tiny();
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        ix.session_scores_into(&ix.query("cat"), 2, &mut scratch, &mut out);
        // Session 0 = [cat sat mat] + [dog chas cat cat ran]: tf 3, length 8; session 1 length 4; cat in 1 of 2.
        let idf = (1.0f32 + (2.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
        let avg = 12.0 / 2.0;
        let want = idf * 3.0 * (K1 + 1.0) / (3.0 + K1 * (1.0 - B_SESSION + B_SESSION * 8.0 / avg));
        assert!((out[0] - want).abs() < 1e-6, "{} {want}", out[0]);
        assert_eq!(out[1], 0.0);
        ix.session_scores_into(&ix.query("cat"), 1, &mut scratch, &mut out);
        assert_eq!(out.len(), 1, "sessions beyond the count are left out");
        Bm25Index::new().session_scores_into(&ix.query("cat"), 3, &mut scratch, &mut out);
        assert_eq!(out, vec![0.0; 3]);
    }

    /// Scoring reads lengths computed at the first query after a change ([`Scoring`]); every later insert,
    /// removal and session renumbering must be seen by the next query, exactly as a fresh index scores.
    #[test]
    fn the_scoring_cache_follows_every_change() {
        let texts = ["cat sat on the mat", "a dog chased the cat and the cat ran", "stock markets fell", "cat"];
        let fresh = |units: &[(u32, u32, &str)]| {
            let mut f = Bm25Index::new();
            units.iter().for_each(|&(u, s, t)| f.insert(u, s, t));
            f
        };
        let same = |ix: &Bm25Index, f: &Bm25Index, q: &str| {
            let (mut a, mut b, mut sa, mut sb, mut scratch) = (vec![], vec![], vec![], vec![], vec![]);
            ix.scores_into(&ix.query(q), &mut a);
            f.scores_into(&f.query(q), &mut b);
            for d in 0..f.len() {
                assert_eq!(a[ix.doc_of(f.unit(d)).unwrap()].to_bits(), b[d].to_bits(), "{q:?}, unit {}", f.unit(d));
            }
            ix.session_scores_into(&ix.query(q), 3, &mut scratch, &mut sa);
            f.session_scores_into(&f.query(q), 3, &mut scratch, &mut sb);
            assert_eq!(
                sa.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                sb.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        };
        let mut ix = Bm25Index::new();
        let mut held = Vec::new();
        for (u, t) in texts.iter().enumerate() {
            ix.insert(u as u32, u as u32 % 2, t);
            held.push((u as u32, u as u32 % 2, *t));
            same(&ix, &fresh(&held), "cat market");
        }
        ix.remove(1);
        held.retain(|h| h.0 != 1);
        same(&ix, &fresh(&held), "cat market");
        ix.set_sessions(|u| if u == 3 { 2 } else { 0 });
        held.iter_mut().for_each(|h| h.1 = if h.0 == 3 { 2 } else { 0 });
        same(&ix, &fresh(&held), "cat");
        ix.insert(0, 0, "markets");
        held[0].2 = "markets";
        same(&ix, &fresh(&held), "cat market");
    }

    #[test]
    fn remove_and_reinsert_keep_statistics_exact() {
        let mut ix = tiny();
        ix.remove(10);
        assert_eq!(ix.len(), 2);
        assert_eq!(ix.doc_of(10), None);
        // The last document (unit 12) moved to number 0.
        assert_eq!((ix.unit(0), ix.session(0)), (12, 1));
        let mut out = Vec::new();
        ix.scores_into(&ix.query("cat market"), &mut out);
        let fresh = {
            let mut f = Bm25Index::new();
            f.insert(11, 0, "a dog chased the cat and the cat ran");
            f.insert(12, 1, "stock markets fell sharply");
            let mut o = Vec::new();
            f.scores_into(&f.query("cat market"), &mut o);
            o
        };
        assert_eq!(out[ix.doc_of(11).unwrap()], fresh[0]);
        assert_eq!(out[ix.doc_of(12).unwrap()], fresh[1]);
        ix.insert(12, 1, "cat");
        assert_eq!(ix.len(), 2);
        ix.scores_into(&ix.query("market"), &mut out);
        assert!(out.iter().all(|&s| s == 0.0), "the replaced text no longer matches");
        ix.clear();
        assert!(ix.is_empty());
    }

    #[test]
    fn postings_round_trip_wide_gaps_and_counts_and_stay_ascending_through_removals() {
        let mut p = Postings::default();
        let given: Vec<(u32, u16)> =
            vec![(0, 1), (1, 127), (128, 128), (20_000, 3), (3_000_000, u16::MAX), (u32::MAX - 1, 2)];
        for &(d, tf) in &given {
            p.push(d, tf);
        }
        assert_eq!(p.iter(&[]).collect::<Vec<_>>(), given);
        assert_eq!(p.len(), given.len());
        // Two-byte postings for the common case: 1 byte of gap, 1 of count.
        let mut small = Postings::default();
        (0..100).for_each(|d| small.push(d * 3, 2));
        assert_eq!(small.bytes.len(), 200);
        // Swap-remove: 20,000 goes, the highest (u32::MAX - 1) takes its number, and the list stays ascending.
        p.swap_remove_doc(&[], 20_000, u32::MAX - 1);
        assert_eq!(
            p.iter(&[]).collect::<Vec<_>>(),
            vec![(0, 1), (1, 127), (128, 128), (20_000, 2), (3_000_000, u16::MAX)]
        );
        p.push(3_000_001, 9);
        assert_eq!(p.iter(&[]).last(), Some((3_000_001, 9)));
        // Through the index: many removals in any order leave every score as a fresh index of what is left.
        let mut ix = Bm25Index::new();
        let text = |u: u32| format!("w{} w{} shared w{}", u % 7, u % 13, u % 300);
        for u in 0..1_000 {
            ix.insert(u, u / 10, &text(u));
        }
        let mut fresh = Bm25Index::new();
        for u in (0..1_000).filter(|u| u % 3 != 0) {
            fresh.insert(u, u / 10, &text(u));
        }
        for u in (0..1_000).rev().filter(|u| u % 3 == 0) {
            ix.remove(u);
        }
        for q in ["w1 shared", "w5 w12", "w299 w3"] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            ix.scores_into(&ix.query(q), &mut a);
            fresh.scores_into(&fresh.query(q), &mut b);
            for u in (0..1_000).filter(|u| u % 3 != 0) {
                assert_eq!(a[ix.doc_of(u).unwrap()], b[fresh.doc_of(u).unwrap()], "unit {u}, query {q}");
            }
        }
    }
}
