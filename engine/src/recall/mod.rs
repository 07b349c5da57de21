//! Recall: rank sessions for a query. Every method scores units (dense cosine from the vector index, BM25 from the
//! lexical index, or a fusion of both), then aggregates unit scores into a session score. Turn Isolation Retrieval
//! (Nano-Memory) is the dense max: one relevant exchange is not diluted by a long session.
//!
//! This module only does arithmetic over score buffers: it never embeds, tokenizes or touches storage. The caller
//! owns a [`Scratch`] so that ranking allocates nothing per unit.

pub mod when;

use serde::{Deserialize, Serialize};

use crate::index::{Bm25Index, Stamp};
use crate::Session;

/// How sessions are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum RecallMethod {
    /// Nano-Memory's TIR: session = its best unit's cosine. Paper parity.
    Tir,
    /// Session = sum of its `n` best unit cosines.
    TirSum(u8),
    /// Session = mean unit cosine ("turn-mean").
    TurnMean,
    /// Lexical only: session = its best unit's BM25.
    Bm25,
    /// Dense and lexical evidence fused (see [`hybrid`]); the default.
    #[default]
    Hybrid,
}

impl RecallMethod {
    /// Every method, for the benchmark.
    pub const ALL: [RecallMethod; 6] = [
        RecallMethod::Tir,
        RecallMethod::TirSum(2),
        RecallMethod::TurnMean,
        RecallMethod::Bm25,
        RecallMethod::Hybrid,
        RecallMethod::TirSum(3),
    ];

    /// The method's name: `tir`, `tir-sum-2`, `turn-mean`, `bm25`, `hybrid`.
    pub fn name(self) -> String {
        match self {
            RecallMethod::Tir => "tir".into(),
            RecallMethod::TirSum(n) => format!("tir-sum-{n}"),
            RecallMethod::TurnMean => "turn-mean".into(),
            RecallMethod::Bm25 => "bm25".into(),
            RecallMethod::Hybrid => "hybrid".into(),
        }
    }

    /// Whether the method reads the lexical index.
    pub fn uses_lexical(self) -> bool {
        matches!(self, RecallMethod::Bm25 | RecallMethod::Hybrid)
    }
}

impl std::str::FromStr for RecallMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "tir" => RecallMethod::Tir,
            "turn-mean" => RecallMethod::TurnMean,
            "bm25" => RecallMethod::Bm25,
            "hybrid" | "default" => RecallMethod::Hybrid,
            _ => match s.strip_prefix("tir-sum-").and_then(|n| n.parse::<u8>().ok()) {
                Some(n) if n >= 1 => RecallMethod::TirSum(n),
                _ => return Err(format!("unknown recall method {s:?}: tir, tir-sum-N, turn-mean, bm25, hybrid")),
            },
        })
    }
}

impl TryFrom<String> for RecallMethod {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<RecallMethod> for String {
    fn from(m: RecallMethod) -> String {
        m.name()
    }
}

/// One ranked session: its score and its best rows (row index into the vector index, score), best first.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionScore {
    pub session: u32,
    pub score: f32,
    pub best_rows: Vec<(usize, f32)>,
}

/// What a ranking reads: the dense score of every vector row and the lexical index with its document scores.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Cosine of the query with each vector row.
    pub dense: &'a [f32],
    /// Session number of each vector row.
    pub row_session: &'a [u32],
    /// Unit of each vector row.
    pub row_unit: &'a [u32],
    /// The lexical index and the BM25 score of each of its documents (empty when the method is dense only).
    pub lexical: &'a Bm25Index,
    pub lexical_scores: &'a [f32],
    /// Sessions are numbered `0..sessions`.
    pub sessions: usize,
    /// The query's text (for the dates it names) and each session's record by number (for its times); either
    /// may be empty.
    pub query: &'a str,
    pub session_info: &'a [Session],
    /// The (term, count) pairs of a unit's text, when the caller has the text: feedback reads its best unit's terms
    /// from it instead of scanning every posting list ([`Bm25Index::terms_of_parts`]).
    pub unit_terms: Option<UnitTerms<'a>>,
    /// The stamps of the vector rows and of the lexical documents (`VectorIndex::stamp`, [`Bm25Index::stamp`]),
    /// when the caller has them: the map from rows to documents is then kept in the [`Scratch`] and made again only
    /// when either changes (at 100,000 rows a lookup per row was ~0.5 ms of every query in the page).
    pub stamps: Option<[Stamp; 2]>,
}

/// A unit's indexed terms from its text (see [`Evidence::unit_terms`]).
#[derive(Clone, Copy)]
pub struct UnitTerms<'a>(pub &'a dyn Fn(u32) -> Vec<(u32, u16)>);

impl std::fmt::Debug for UnitTerms<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnitTerms")
    }
}

/// Buffers a ranking reuses; keep one per memory.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    /// Per row: the method's unit score.
    row: Vec<f32>,
    /// Per session: aggregate and count.
    session: Vec<f32>,
    count: Vec<u32>,
    /// Per session × n: the n best unit scores, best first.
    top: Vec<f32>,
    order: Vec<u32>,
    /// Hybrid: lexical scores with feedback terms added (by document), the best units (row, score) the feedback
    /// reads, their documents, the expansion terms and the per-term accumulator, per-session lexical scratch.
    lexical: Vec<f32>,
    best: Vec<(u32, f32)>,
    feedback_docs: Vec<(usize, f32)>,
    terms: Vec<(u32, f32)>,
    term_acc: Vec<f32>,
    session_lexical: Vec<f32>,
    session_scratch: Vec<f32>,
    /// Per row: its lexical document number (`u32::MAX` when none), and the stamps it was made for
    /// ([`Evidence::stamps`]; `None`: made for this ranking only).
    row_doc: Vec<u32>,
    row_doc_stamps: Option<[Stamp; 2]>,
    /// Hybrid: per row, its dense part of the mix; per document, its lexical part.
    dense_part: Vec<f32>,
    lexical_part: Vec<f32>,
    /// Per session: its place among the ranked sessions (`u32::MAX` when not ranked), for collecting their rows.
    slot: Vec<u32>,
}

/// Ranks sessions by `method`; returns the top `k`, each with up to `rows_per_session` best rows. Sessions without
/// any row are not ranked. Ties break by session number, so the ranking is stable.
pub fn rank(
    method: RecallMethod,
    ev: &Evidence,
    k: usize,
    rows_per_session: usize,
    sc: &mut Scratch,
) -> Vec<SessionScore> {
    let n = ev.sessions;
    sc.row.clear();
    match method {
        RecallMethod::Tir | RecallMethod::TirSum(_) | RecallMethod::TurnMean => sc.row.extend_from_slice(ev.dense),
        RecallMethod::Bm25 => sc.row.extend(ev.row_unit.iter().map(|&u| lexical_of(ev, u))),
        RecallMethod::Hybrid => feedback(ev, sc),
    }
    let top_n = match method {
        RecallMethod::TirSum(t) => t.max(1) as usize,
        RecallMethod::Hybrid => 3,
        _ => 1,
    };
    // Top-n sum weighs every unit alike; the hybrid lets the 2nd and 3rd best units count geometrically less.
    let decay = if method == RecallMethod::Hybrid { HYBRID_DECAY } else { 1.0 };
    sc.count.clear();
    sc.count.resize(n, 0);
    sc.top.clear();
    sc.top.resize(n * top_n, f32::NEG_INFINITY);
    for (&s, &score) in ev.row_session.iter().zip(&sc.row) {
        let s = s as usize;
        sc.count[s] += 1;
        insert_top(&mut sc.top[s * top_n..(s + 1) * top_n], score);
    }
    sc.session.clear();
    sc.session.resize(n, f32::NEG_INFINITY);
    match method {
        RecallMethod::TurnMean => {
            sc.session.iter_mut().for_each(|x| *x = 0.0);
            for (&s, &score) in ev.row_session.iter().zip(&sc.row) {
                sc.session[s as usize] += score;
            }
            for (x, &c) in sc.session.iter_mut().zip(&sc.count) {
                *x = if c == 0 { f32::NEG_INFINITY } else { *x / c as f32 };
            }
        }
        _ => {
            for (s, x) in sc.session.iter_mut().enumerate() {
                if sc.count[s] > 0 {
                    *x = decayed_sum(&sc.top[s * top_n..(s + 1) * top_n], decay);
                }
            }
        }
    }
    if method == RecallMethod::Hybrid {
        session_evidence(ev, sc);
    }
    top_sessions(sc, ev, k, rows_per_session)
}

/// The BM25 score of a unit (0 when it is not in the lexical index).
fn lexical_of(ev: &Evidence, unit: u32) -> f32 {
    ev.lexical.doc_of(unit).and_then(|d| ev.lexical_scores.get(d)).copied().unwrap_or(0.0)
}

/// Keeps `top` (best first) as the best scores seen; `score` enters if it beats the last.
fn insert_top(top: &mut [f32], score: f32) {
    let Some(last) = top.last() else { return };
    if score <= *last {
        return;
    }
    let mut i = top.len() - 1;
    top[i] = score;
    while i > 0 && top[i] > top[i - 1] {
        top.swap(i, i - 1);
        i -= 1;
    }
}

/// Σ decay^i · top[i] over the finite entries (a session with fewer units than n sums what it has); `decay` = 1
/// is the plain top-n sum.
fn decayed_sum(top: &[f32], decay: f32) -> f32 {
    let mut weight = 1.0;
    let mut sum = 0.0;
    for &x in top.iter().filter(|x| x.is_finite()) {
        sum += weight * x;
        weight *= decay;
    }
    sum
}

/// Hybrid unit score: the dense and the lexical evidence of each row, each min-max scaled to [0, 1] over the
/// query's rows (lexical from 0: a unit without a query term scores 0), then mixed with weight
/// [`HYBRID_DENSE_WEIGHT`] on the dense side. Scaling per query is what makes the two comparable: cosines of this
/// model crowd into a narrow band whose position varies by query, BM25 is unbounded and grows with rare terms.
pub fn hybrid(ev: &Evidence, out: &mut Vec<f32>) {
    let mut sc = Scratch::default();
    dense_parts(ev, &mut sc.dense_part);
    row_docs(ev, &mut sc);
    mix(&sc.dense_part, &sc.row_doc, ev.lexical_scores, &mut sc.lexical_part, out, None);
}

/// The lexical document of each row (`u32::MAX` when the unit is not indexed) into `sc.row_doc`, unless it holds
/// the map for the same stamps already.
fn row_docs(ev: &Evidence, sc: &mut Scratch) {
    if ev.stamps.is_some() && sc.row_doc_stamps == ev.stamps && sc.row_doc.len() == ev.row_unit.len() {
        return;
    }
    sc.row_doc.clear();
    sc.row_doc.extend(ev.row_unit.iter().map(|&u| ev.lexical.doc_of(u).map_or(u32::MAX, |d| d as u32)));
    sc.row_doc_stamps = ev.stamps;
}

/// Each row's dense part of the hybrid mix, `w · scale(cosine)`, into `out`: the same in both of feedback's passes.
fn dense_parts(ev: &Evidence, out: &mut Vec<f32>) {
    let (dmin, dmax) = min_max(ev.dense.iter().copied());
    let w = HYBRID_DENSE_WEIGHT;
    out.clear();
    out.extend(ev.dense.iter().map(|&d| w * scale(d, dmin, dmax)));
}

/// [`hybrid`]'s mix of each row's dense part (`dense_part`) with the lexical scores given (by document number),
/// into `out`; `lexical_part` is scratch. With `best`, also keeps the best rows seen (as [`insert_best`]) in the
/// same pass over the rows. Each document's lexical part is computed once, then each row adds its document's:
/// the same arithmetic as mixing row by row, to the bit.
fn mix(
    dense_part: &[f32],
    row_doc: &[u32],
    lexical: &[f32],
    lexical_part: &mut Vec<f32>,
    out: &mut Vec<f32>,
    best: Option<&mut [(u32, f32)]>,
) {
    let (_, lmax) = min_max(lexical.iter().copied());
    let w = HYBRID_DENSE_WEIGHT;
    lexical_part.clear();
    lexical_part.extend(lexical.iter().map(|&l| (1.0 - w) * scale(l, 0.0, lmax)));
    let unindexed = (1.0 - w) * scale(0.0, 0.0, lmax);
    out.clear();
    out.extend(
        dense_part
            .iter()
            .zip(row_doc)
            .map(|(&d, &doc)| d + lexical_part.get(doc as usize).copied().unwrap_or(unindexed)),
    );
    if let Some(best) = best {
        for (r, &x) in out.iter().enumerate() {
            insert_best(best, r as u32, x);
        }
    }
}

/// Hybrid unit scores with lexical pseudo-relevance feedback, into `sc.row`: a first [`hybrid`] pass, then the
/// [`FEEDBACK_TERMS`] terms that best characterise its [`FEEDBACK_UNITS`] best units (none in a memory of under
/// [`FEEDBACK_SHARE`] units; each weighted by its score relative to the best) are added to the query with
/// [`FEEDBACK_WEIGHT`] × the query's own weight in all, and the units are mixed again. It reaches evidence
/// phrased in the conversation's words rather than the question's ("activities" → "pottery", "camping"), which
/// is what multi-session questions need. One more BM25 pass over the postings of the added terms; nothing
/// allocated once the scratch buffers have grown.
fn feedback(ev: &Evidence, sc: &mut Scratch) {
    row_docs(ev, sc);
    dense_parts(ev, &mut sc.dense_part);
    // In a small memory the best units are a large, unfocused share of it: feedback reads at most 1 unit in
    // [`FEEDBACK_SHARE`], so a memory of fewer units has none.
    let units = if ev.lexical.is_empty() || ev.lexical_scores.len() != ev.lexical.len() {
        0
    } else {
        FEEDBACK_UNITS.min(ev.lexical.len() / FEEDBACK_SHARE)
    };
    sc.best.clear();
    sc.best.resize(units, (u32::MAX, f32::NEG_INFINITY));
    let best = (units > 0).then_some(&mut sc.best[..]);
    mix(&sc.dense_part, &sc.row_doc, ev.lexical_scores, &mut sc.lexical_part, &mut sc.row, best);
    if units == 0 {
        return;
    }
    let top = sc.best[0].1;
    if top.is_nan() || top <= 0.0 {
        return;
    }
    sc.feedback_docs.clear();
    for &(r, x) in sc.best.iter().filter(|b| b.0 != u32::MAX) {
        let d = sc.row_doc[r as usize] as usize;
        if sc.row_doc[r as usize] != u32::MAX && !sc.feedback_docs.iter().any(|f| f.0 == d) {
            sc.feedback_docs.push((d, x / top));
        }
    }
    let query_weight = ev.lexical.query(ev.query).terms().iter().map(|t| t.1 as f32).sum::<f32>().max(1.0);
    let from_text = ev.unit_terms.map(|UnitTerms(f)| move |d: usize| f(ev.lexical.unit(d)));
    ev.lexical.expansion_into(
        &sc.feedback_docs,
        from_text.as_ref().map(|f| f as &dyn Fn(usize) -> Vec<(u32, u16)>),
        FEEDBACK_TERMS,
        FEEDBACK_WEIGHT * query_weight,
        &mut sc.term_acc,
        &mut sc.terms,
    );
    sc.lexical.clear();
    sc.lexical.extend_from_slice(ev.lexical_scores);
    ev.lexical.add_weighted_scores(&sc.terms, &mut sc.lexical);
    mix(&sc.dense_part, &sc.row_doc, &sc.lexical, &mut sc.lexical_part, &mut sc.row, None);
}

/// Keeps `best` (best first, fixed length) as the best (row, score) pairs seen; ties keep the earlier row.
fn insert_best(best: &mut [(u32, f32)], row: u32, score: f32) {
    let Some(last) = best.last() else { return };
    if score.is_nan() || score <= last.1 {
        return;
    }
    let mut i = best.len() - 1;
    best[i] = (row, score);
    while i > 0 && best[i].1 > best[i - 1].1 {
        best.swap(i, i - 1);
        i -= 1;
    }
}

/// Session-level evidence the units cannot see, added to the hybrid session scores: the BM25 of the whole
/// session as one document (scaled by the best session's, weight [`SESSION_LEXICAL_WEIGHT`]): a question whose
/// words are spread over a sitting rather than one exchange; and, when the query names a date, how close the
/// session's time is to it ([`when::closeness`], weight [`DATE_WEIGHT`]).
fn session_evidence(ev: &Evidence, sc: &mut Scratch) {
    let n = ev.sessions;
    if !ev.lexical.is_empty() && !ev.query.is_empty() {
        let query = ev.lexical.query(ev.query);
        ev.lexical.session_scores_into(&query, n, &mut sc.session_scratch, &mut sc.session_lexical);
        let (_, max) = min_max(sc.session_lexical.iter().copied());
        for ((x, &c), &l) in sc.session.iter_mut().zip(&sc.count).zip(&sc.session_lexical) {
            if c > 0 {
                *x += SESSION_LEXICAL_WEIGHT * scale(l, 0.0, max);
            }
        }
    }
    if let Some(period) = when::query_period(ev.query) {
        for ((x, &c), info) in sc.session.iter_mut().zip(&sc.count).zip(ev.session_info) {
            if c > 0 {
                *x += DATE_WEIGHT * when::closeness(period, info.first_time, info.last_time, DATE_SCALE_DAYS);
            }
        }
    }
}

/// Pseudo-relevance feedback in [`RecallMethod::Hybrid`]: units read, terms added, and their total weight
/// relative to the query's. One unit, weighted like the query: a hop from the best exchange to the other sessions
/// that share its words ("my new Prius broke down" → the session about the old Prius), which is what questions
/// whose evidence spans sessions need (issue 16; LoCoMo multi-hop recall_all@3 25.5 with 10 units, 20 terms and
/// 0.3; 29.4 with these; 31.6 with [`COMMON_WORD_SHARE`] too; docs/BENCHMARKS.md).
pub const FEEDBACK_UNITS: usize = 1;
pub const FEEDBACK_TERMS: usize = 10;
pub const FEEDBACK_SHARE: usize = 20;
pub const FEEDBACK_WEIGHT: f32 = 1.0;

/// The query the dense side embeds drops the words held by at least this share of the units, once the memory has
/// [`COMMON_WORD_MIN_UNITS`] units: in a conversation the two people's names are tagged on nearly every unit, so
/// they say nothing about where the answer is, yet in the query's vector they pull towards every short exchange
/// that names them ("Hey John! Long time no talk"). BM25 already weighs such words near zero; the lexical query and
/// the dates keep the full text.
pub const COMMON_WORD_SHARE: f32 = 0.5;
pub const COMMON_WORD_MIN_UNITS: usize = 20;

/// The text to embed for `query` (see [`COMMON_WORD_SHARE`]): the query itself unless it names words common to
/// the memory and something is left without them.
pub fn dense_query<'q>(query: &'q str, lexical: &Bm25Index) -> std::borrow::Cow<'q, str> {
    if lexical.len() < COMMON_WORD_MIN_UNITS {
        return query.into();
    }
    match lexical.without_common_words(query, COMMON_WORD_SHARE) {
        Some(rest) if rest.chars().any(char::is_alphanumeric) => rest.into(),
        _ => query.into(),
    }
}

/// Weight of the session-as-one-document BM25 (scaled to [0, 1]) in a hybrid session score, whose unit part
/// lies in [0, 1.24].
pub const SESSION_LEXICAL_WEIGHT: f32 = 0.3;

/// Weight of the date match in a hybrid session score, and the distance in days over which it falls to 1/e
/// outside the named period. A named date is strong evidence (LoCoMo: for 82% of the 239 questions that name
/// one, every gold session lies inside the named period), but not a filter: the words still decide within it.
/// 0.6 since the feedback reads one unit at the query's weight (issue 16): that feedback pulls towards the best
/// unit's words, and at 0.4 the date lost temporal questions (LoCoMo temporal recall_all@3 84.1 at 0.4, 86.3 at
/// 0.6; 0.5–0.8 are within 0.2 overall).
pub const DATE_WEIGHT: f32 = 0.6;
pub const DATE_SCALE_DAYS: f64 = 7.0;

/// Weight of the dense side in [`hybrid`]: an even mix. On LoCoMo 0.4–0.6 are within 0.7 points of each other
/// (recall_all@3); an even mix assumes least about data we have not seen.
pub const HYBRID_DENSE_WEIGHT: f32 = 0.5;

/// In [`RecallMethod::Hybrid`], a session scores its best unit + 0.2 × its second + 0.04 × its third: several
/// matching exchanges beat one, without letting a long session win on volume (LoCoMo: +0.7 recall_all@3 and
/// +0.3 recall_all@10 over the max; 0.4 trades @3 for @10).
pub const HYBRID_DECAY: f32 = 0.2;

fn min_max(xs: impl Iterator<Item = f32>) -> (f32, f32) {
    xs.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// `x` scaled so that `lo` → 0 and `hi` → 1 (0 when the range is empty).
fn scale(x: f32, lo: f32, hi: f32) -> f32 {
    if hi > lo {
        (x - lo) / (hi - lo)
    } else {
        0.0
    }
}

/// The `k` best sessions by `sc.session`, with their best rows by `sc.row`.
fn top_sessions(sc: &mut Scratch, ev: &Evidence, k: usize, rows_per_session: usize) -> Vec<SessionScore> {
    sc.order.clear();
    sc.order.extend((0..ev.sessions as u32).filter(|&s| sc.count[s as usize] > 0));
    let session = &sc.session;
    let by_score = |a: &u32, b: &u32| session[*b as usize].total_cmp(&session[*a as usize]).then(a.cmp(b));
    let k = k.min(sc.order.len());
    if k == 0 {
        return Vec::new();
    }
    if k < sc.order.len() {
        sc.order.select_nth_unstable_by(k - 1, by_score);
        sc.order.truncate(k);
    }
    sc.order.sort_unstable_by(by_score);
    let mut out: Vec<SessionScore> = sc
        .order
        .iter()
        .map(|&s| SessionScore { session: s, score: sc.session[s as usize], best_rows: Vec::new() })
        .collect();
    let per = rows_per_session.max(1);
    sc.slot.clear();
    sc.slot.resize(ev.sessions, u32::MAX);
    for (i, o) in out.iter().enumerate() {
        sc.slot[o.session as usize] = i as u32;
    }
    for (r, (&s, &score)) in ev.row_session.iter().zip(&sc.row).enumerate() {
        if let Some(o) = sc.slot.get(s as usize).and_then(|&i| out.get_mut(i as usize)) {
            if o.best_rows.len() < per {
                o.best_rows.push((r, score));
            } else if score > o.best_rows[per - 1].1 {
                o.best_rows[per - 1] = (r, score);
            } else {
                continue;
            }
            o.best_rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        }
    }
    out
}

/// Paper-parity TIR over dense scores alone: session score = max over its rows. Kept as the reference the other
/// methods are measured against.
pub fn tir(row_scores: &[f32], row_session: &[u32], k: usize, rows_per_session: usize) -> Vec<SessionScore> {
    let sessions = row_session.iter().map(|&s| s as usize + 1).max().unwrap_or(0);
    let lexical = Bm25Index::new();
    let ev = Evidence {
        dense: row_scores,
        row_session,
        row_unit: row_session,
        lexical: &lexical,
        lexical_scores: &[],
        sessions,
        query: "",
        session_info: &[],
        unit_terms: None,
        stamps: None,
    };
    rank(RecallMethod::Tir, &ev, k, rows_per_session, &mut Scratch::default())
}

/// Merges the rankings of a question's sub-queries (query expansion) and of the question itself by taking turns: at
/// each rank, each list's entry in turn, in the order the lists are given, skipping entries whose `key` is already
/// taken, until `k`. Turns rather than summed or reciprocal-rank scores, because the point of sub-queries is
/// coverage: the best session for each part of the question should reach the top k even when another part's
/// sessions outscore it on every list. An entry keeps the score and rows of the list that placed it.
pub fn interleave<T: Clone, K: PartialEq>(lists: &[Vec<T>], k: usize, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(k);
    let depth = lists.iter().map(Vec::len).max().unwrap_or(0);
    for rank in 0..depth {
        for list in lists {
            if out.len() == k {
                return out;
            }
            if let Some(s) = list.get(rank) {
                if !out.iter().any(|o| key(o) == key(s)) {
                    out.push(s.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(sessions: &[u32]) -> Vec<SessionScore> {
        sessions
            .iter()
            .map(|&session| SessionScore { session, score: 1.0 / (session + 1) as f32, best_rows: vec![] })
            .collect()
    }

    #[test]
    fn interleaving_takes_each_lists_best_in_turn() {
        let question = ranked(&[0, 1, 2, 3]);
        let part_a = ranked(&[1, 0, 4]);
        let part_b = ranked(&[5, 0, 1]);
        let key = |s: &SessionScore| s.session;
        let sessions = |v: Vec<SessionScore>| v.into_iter().map(|s| s.session).collect::<Vec<_>>();
        // Rank 1 of each list (1 is taken by part a before the question's rank 2 reaches it), then rank 2's new ones.
        assert_eq!(sessions(interleave(&[question.clone(), part_a.clone(), part_b.clone()], 3, key)), vec![0, 1, 5]);
        assert_eq!(
            sessions(interleave(&[question.clone(), part_a.clone(), part_b.clone()], 10, key)),
            vec![0, 1, 5, 2, 4, 3]
        );
        // The order of the lists decides who places first.
        assert_eq!(sessions(interleave(&[part_a, part_b, question.clone()], 3, key)), vec![1, 5, 0]);
        // One list is itself.
        assert_eq!(interleave(std::slice::from_ref(&question), 3, key), question[..3].to_vec());
        assert!(interleave(&[] as &[Vec<SessionScore>], 3, key).is_empty());
    }

    #[test]
    fn tir_scores_a_session_by_its_best_row_not_its_mean() {
        // Session 0: one strong row among weak ones; session 1: uniformly decent rows.
        let scores = [0.9, 0.1, 0.1, 0.1, 0.6, 0.6, 0.6];
        let sessions = [0, 0, 0, 0, 1, 1, 1];
        let ranked = tir(&scores, &sessions, 2, 2);
        assert_eq!(ranked[0].session, 0);
        assert_eq!(ranked[0].best_rows, vec![(0, 0.9), (1, 0.1)]);
        assert_eq!(ranked[1].session, 1);
        assert_eq!(tir(&scores, &sessions, 1, 1).len(), 1);
    }

    fn evidence<'a>(
        dense: &'a [f32],
        sessions: &'a [u32],
        units: &'a [u32],
        lex: &'a Bm25Index,
        ls: &'a [f32],
    ) -> Evidence<'a> {
        Evidence {
            dense,
            row_session: sessions,
            row_unit: units,
            lexical: lex,
            lexical_scores: ls,
            sessions: 3,
            query: "",
            session_info: &[],
            unit_terms: None,
            stamps: None,
        }
    }

    #[test]
    fn top_n_sum_and_mean_aggregate_as_named() {
        let dense = [0.9, 0.05, 0.5, 0.5, 0.45, 0.2];
        let sessions = [0, 0, 1, 1, 1, 2];
        let units = [1, 2, 3, 4, 5, 6];
        let lex = Bm25Index::new();
        let ev = evidence(&dense, &sessions, &units, &lex, &[]);
        let mut sc = Scratch::default();
        let r = rank(RecallMethod::TirSum(2), &ev, 3, 1, &mut sc);
        assert_eq!(r.iter().map(|s| s.session).collect::<Vec<_>>(), vec![1, 0, 2]);
        assert!((r[0].score - 1.0).abs() < 1e-6 && (r[1].score - 0.95).abs() < 1e-6 && (r[2].score - 0.2).abs() < 1e-6);
        let r = rank(RecallMethod::TurnMean, &ev, 3, 1, &mut sc);
        assert_eq!(r.iter().map(|s| s.session).collect::<Vec<_>>(), vec![1, 0, 2]);
        assert!((r[1].score - 0.475).abs() < 1e-6);
        assert!((r[0].score - 1.45 / 3.0).abs() < 1e-6);
        let r = rank(RecallMethod::Tir, &ev, 2, 2, &mut sc);
        assert_eq!(r[0].best_rows, vec![(0, 0.9), (1, 0.05)]);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn top_keeps_the_n_best_in_order() {
        let mut top = [f32::NEG_INFINITY; 3];
        for x in [0.2, 0.9, 0.1, 0.5, 0.7] {
            insert_top(&mut top, x);
        }
        assert_eq!(top, [0.9, 0.7, 0.5]);
        let mut two = [f32::NEG_INFINITY; 3];
        insert_top(&mut two, 0.4);
        assert_eq!(decayed_sum(&two, 1.0), 0.4);
        assert!((decayed_sum(&top, 0.2) - (0.9 + 0.2 * 0.7 + 0.04 * 0.5)).abs() < 1e-6);
    }

    #[test]
    fn hybrid_scales_each_side_then_weighs_them() {
        let mut lex = Bm25Index::new();
        lex.insert(1, 0, "sourdough bread starter");
        lex.insert(2, 1, "glacier lake hike");
        lex.insert(3, 2, "mill trail");
        let mut ls = Vec::new();
        lex.scores_into(&lex.query("bread"), &mut ls);
        // Dense prefers session 1 slightly; lexical evidence is only in session 0.
        let dense = [0.50, 0.55, 0.10];
        let ev = evidence(&dense, &[0, 1, 2], &[1, 2, 3], &lex, &ls);
        let mut row = Vec::new();
        hybrid(&ev, &mut row);
        let w = HYBRID_DENSE_WEIGHT;
        assert!((row[0] - (w * 0.4 / 0.45 + (1.0 - w))).abs() < 1e-6);
        assert!((row[1] - w).abs() < 1e-6);
        assert_eq!(row[2], 0.0);
        let r = rank(RecallMethod::Hybrid, &ev, 3, 1, &mut Scratch::default());
        assert_eq!(r[0].session, 0);
        let r = rank(RecallMethod::Bm25, &ev, 1, 1, &mut Scratch::default());
        assert_eq!((r[0].session, r[0].best_rows[0].0), (0, 0));
    }

    #[test]
    fn best_keeps_the_n_best_rows_first_seen_on_ties() {
        let mut best = [(u32::MAX, f32::NEG_INFINITY); 3];
        for (r, x) in [0.2, 0.9, 0.5, 0.9, 0.1, 0.7].into_iter().enumerate() {
            insert_best(&mut best, r as u32, x);
        }
        assert_eq!(best, [(1, 0.9), (3, 0.9), (5, 0.7)]);
        let mut few = [(u32::MAX, f32::NEG_INFINITY); 3];
        insert_best(&mut few, 4, 0.3);
        insert_best(&mut few, 5, f32::NAN);
        assert_eq!(few[0], (4, 0.3));
        assert_eq!(few[1].0, u32::MAX);
    }

    fn session(first_day: f64) -> Session {
        let t = first_day * when::DAY_MS;
        Session { id: String::new(), first_time: t, last_time: t + 3_600_000.0, turn_count: 2, title: None }
    }

    #[test]
    fn feedback_reaches_units_phrased_in_the_conversations_words() {
        // The query names "hobbies"; one unit says it, the others only name hobbies ("pottery", "camping") that
        // the first unit also mentions. Feedback from the best unit lifts the pottery unit over an unrelated one.
        let mut lex = Bm25Index::new();
        lex.insert(1, 0, "my hobbies are pottery and camping these days");
        lex.insert(2, 1, "pottery class went well, glazed a bowl");
        lex.insert(3, 2, "the bank called about my mortgage");
        lex.insert(4, 2, "pottery");
        lex.insert(5, 1, "weather was grey");
        lex.insert(6, 0, "groceries again");
        // Filler, so that the memory is large enough for feedback (FEEDBACK_SHARE units per feedback unit).
        let (mut dense, mut sessions, mut units) =
            (vec![0.30, 0.20, 0.20, 0.10, 0.10, 0.10], vec![0, 1, 2, 2, 1, 0], vec![1, 2, 3, 4, 5, 6]);
        for u in 7..7 + FEEDBACK_SHARE as u32 {
            lex.insert(u, 2, &format!("filler{u} words{u}"));
            dense.push(0.0);
            sessions.push(2);
            units.push(u);
        }
        let mut ls = Vec::new();
        lex.scores_into(&lex.query("What hobbies does she have?"), &mut ls);
        let mut ev = evidence(&dense, &sessions, &units, &lex, &ls);
        ev.query = "What hobbies does she have?";
        let mut sc = Scratch::default();
        let mut plain = Vec::new();
        hybrid(&ev, &mut plain);
        assert_eq!(plain[1], plain[2], "without feedback the two units tie");
        feedback(&ev, &mut sc);
        assert!(sc.row[1] > sc.row[2], "{:?}", sc.row);
        assert!(sc.terms.iter().any(|&(t, _)| lex.query("pottery").terms()[0].0 == t));
        let total: f32 = sc.terms.iter().map(|t| t.1).sum();
        assert!((total - FEEDBACK_WEIGHT).abs() < 1e-5, "one query term: the terms weigh {FEEDBACK_WEIGHT} in all");
        // The buffers are reused: a second ranking gives the same scores.
        let first = sc.row.clone();
        feedback(&ev, &mut sc);
        assert_eq!(first, sc.row);
        // A memory too small for feedback is mixed once.
        for u in 7..7 + FEEDBACK_SHARE as u32 {
            lex.remove(u);
        }
        lex.scores_into(&lex.query("What hobbies does she have?"), &mut ls);
        let ev = evidence(&dense[..6], &sessions[..6], &units[..6], &lex, &ls);
        hybrid(&ev, &mut plain);
        feedback(&ev, &mut sc);
        assert_eq!(sc.row, plain);
    }

    #[test]
    fn a_named_date_lifts_the_sessions_of_that_period() {
        let lex = Bm25Index::new();
        // Three sessions, equal on the words; session 1 is on 2023-07-14 (day 19552).
        let dense = [0.5, 0.5, 0.5];
        let info = [session(19_500.0), session(19_552.0), session(19_600.0)];
        let mut ev = evidence(&dense, &[0, 1, 2], &[1, 2, 3], &lex, &[]);
        ev.session_info = &info;
        ev.query = "What did she cook in July 2023?";
        let r = rank(RecallMethod::Hybrid, &ev, 3, 1, &mut Scratch::default());
        assert_eq!(r[0].session, 1);
        assert!((r[0].score - r[1].score - DATE_WEIGHT).abs() < 0.01, "{r:?}"); // the others lie weeks away
                                                                                // No date named, or a dense-only method: no change.
        ev.query = "What did she cook?";
        let r = rank(RecallMethod::Hybrid, &ev, 3, 1, &mut Scratch::default());
        assert_eq!(r[0].score, r[2].score);
        ev.query = "What did she cook in July 2023?";
        let r = rank(RecallMethod::Tir, &ev, 3, 1, &mut Scratch::default());
        assert_eq!(r[0].score, r[2].score);
    }

    #[test]
    fn a_session_matching_the_words_across_units_gains() {
        // Session 0 holds "pottery" and "kiln" in two units, session 1 holds both in one unit, equally dense.
        let mut lex = Bm25Index::new();
        lex.insert(1, 0, "pottery class tonight");
        lex.insert(2, 0, "the kiln cracked my bowl");
        lex.insert(3, 1, "pottery kiln");
        lex.insert(4, 1, "rain all day");
        lex.insert(5, 2, "bank holiday");
        let mut ls = Vec::new();
        lex.scores_into(&lex.query("pottery kiln"), &mut ls);
        let mut sc = Scratch::default();
        let mut ev = evidence(&[0.4, 0.4, 0.4, 0.4, 0.1], &[0, 0, 1, 1, 2], &[1, 2, 3, 4, 5], &lex, &ls);
        ev.query = "pottery kiln";
        let r = rank(RecallMethod::Hybrid, &ev, 3, 1, &mut sc);
        assert_eq!(r[0].session, 1, "the unit holding both words still wins");
        assert_eq!(r[2].session, 2);
        let mut whole = Vec::new();
        lex.session_scores_into(&lex.query("pottery kiln"), 3, &mut Vec::new(), &mut whole);
        assert!(whole[0] > 0.0 && whole[1] > 0.0 && whole[2] == 0.0);
    }

    #[test]
    fn the_dense_query_drops_the_memorys_common_words_once_it_is_large_enough() {
        let mut lex = Bm25Index::new();
        let q = "What pottery did Ana make?";
        for u in 0..COMMON_WORD_MIN_UNITS as u32 - 1 {
            lex.insert(u, u, &format!("[Ana]: topic{u} words"));
        }
        assert_eq!(dense_query(q, &lex), q, "a small memory keeps the query");
        lex.insert(99, 99, "[Ana]: pottery class");
        assert_eq!(dense_query(q, &lex), "What pottery did  make?");
        assert_eq!(dense_query("Ana?", &lex), "Ana?", "nothing left: the query as it is");
        assert_eq!(dense_query("pottery class", &lex), "pottery class");
    }

    #[test]
    fn the_row_to_document_map_kept_between_rankings_follows_every_change() {
        use crate::index::vectors::{Precision, Rows};
        use crate::index::VectorIndex;
        const WORDS: [&str; 12] = [
            "pottery", "lake", "bread", "trail", "guitar", "exam", "knee", "museum", "beach", "starter", "bowl", "hike",
        ];
        let text = |u: u32| {
            format!("{} {} {}", WORDS[u as usize % 12], WORDS[(u as usize * 5) % 12], WORDS[(u as usize * 7) % 11])
        };
        let row = |u: u32| Rows::F32((0..4).map(|i| ((u * 3 + i) % 7) as f32 / 7.0 - 0.4).collect());
        let (mut vectors, mut lex) = (VectorIndex::with_precision(4, Precision::F32), Bm25Index::new());
        for u in 1..=40 {
            vectors.push(u, u % 8, &row(u));
            lex.insert(u, u % 8, &text(u));
        }
        let query = "pottery lake hike guitar";
        // Ranks with the scratch `kept` (which keeps its map while the stamps given stand) and with a fresh one.
        let rank_both = |vectors: &mut VectorIndex, lex: &Bm25Index, kept: &mut Scratch, stamps: [Stamp; 2]| {
            let (mut dense, mut ls) = (Vec::new(), Vec::new());
            vectors.scores_into(&[0.5, -0.5, 0.5, 0.5], &mut dense);
            lex.scores_into(&lex.query(query), &mut ls);
            let mut ev = Evidence {
                dense: &dense,
                row_session: vectors.sessions(),
                row_unit: vectors.owners(),
                lexical: lex,
                lexical_scores: &ls,
                sessions: 8,
                query,
                session_info: &[],
                unit_terms: None,
                stamps: Some(stamps),
            };
            let with_kept = rank(RecallMethod::Hybrid, &ev, 8, 3, kept);
            ev.stamps = None;
            (with_kept, rank(RecallMethod::Hybrid, &ev, 8, 3, &mut Scratch::default()))
        };
        let mut kept = Scratch::default();
        let stamps = |v: &VectorIndex, l: &Bm25Index| [v.stamp(), l.stamp()];
        let first = stamps(&vectors, &lex);
        let (a, b) = rank_both(&mut vectors, &lex, &mut kept, first);
        assert_eq!(a, b);
        type Change<'c> = &'c dyn Fn(&mut VectorIndex, &mut Bm25Index);
        let changes: [Change; 4] = [
            // The last document takes number 2.
            &|_, l| l.remove(3),
            // The last row takes the removed one's place, and a new unit's row comes last: as many rows as before.
            &|v, _| {
                v.remove(9);
                v.push(42, 2, &row(42));
            },
            // A unit indexed again: its document moves to the end.
            &|_, l| l.insert(12, 4, "pottery lake"),
            &|v, l| {
                v.push(41, 1, &row(41));
                l.insert(41, 1, "pottery lake hike pottery");
            },
        ];
        for (i, change) in changes.iter().enumerate() {
            let before = stamps(&vectors, &lex);
            let made_before = kept.clone();
            change(&mut vectors, &mut lex);
            let after = stamps(&vectors, &lex);
            assert_ne!(before, after, "change {i} left the stamps as they were");
            let (a, b) = rank_both(&mut vectors, &lex, &mut kept, after);
            assert_eq!(a, b, "change {i}");
            // Had the stamps stood, the map made before the change would have been read: the check above can fail.
            if i < 3 {
                let (stale, _) = rank_both(&mut vectors, &lex, &mut made_before.clone(), before);
                assert_ne!(stale, b, "change {i}: the map made before it ranks the same");
            }
        }
    }

    #[test]
    fn method_names_round_trip() {
        for m in RecallMethod::ALL {
            assert_eq!(m.name().parse::<RecallMethod>().unwrap(), m);
        }
        assert_eq!("default".parse::<RecallMethod>().unwrap(), RecallMethod::default());
        assert!("tir-sum-0".parse::<RecallMethod>().is_err());
        assert_eq!(serde_json::to_string(&RecallMethod::TirSum(3)).unwrap(), "\"tir-sum-3\"");
        assert_eq!(serde_json::from_str::<RecallMethod>("\"tir\"").unwrap(), RecallMethod::Tir);
    }
}
