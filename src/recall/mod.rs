//! Recall: rank sessions for a query. Every method scores units (dense cosine from the vector index, BM25 from the
//! lexical index, or a fusion of both), then aggregates unit scores into a session score. Turn Isolation Retrieval
//! (Nano-Memory) is the dense max: one relevant exchange is not diluted by a long session.
//!
//! This module only does arithmetic over score buffers: it never embeds, tokenizes or touches storage. The caller
//! owns a [`Scratch`] so that ranking allocates nothing per unit.

pub mod prune;

use serde::{Deserialize, Serialize};

use crate::index::Bm25Index;

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
        RecallMethod::Hybrid => hybrid(ev, &mut sc.row),
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
    out.clear();
    let (dmin, dmax) = min_max(ev.dense.iter().copied());
    let (_, lmax) = min_max(ev.lexical_scores.iter().copied());
    let w = HYBRID_DENSE_WEIGHT;
    out.extend(ev.dense.iter().zip(ev.row_unit).map(|(&d, &u)| {
        w * scale(d, dmin, dmax) + (1.0 - w) * scale(lexical_of(ev, u), 0.0, lmax)
    }));
}

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
    for (r, (&s, &score)) in ev.row_session.iter().zip(&sc.row).enumerate() {
        if let Some(o) = out.iter_mut().find(|o| o.session == s) {
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
    };
    rank(RecallMethod::Tir, &ev, k, rows_per_session, &mut Scratch::default())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        Evidence { dense, row_session: sessions, row_unit: units, lexical: lex, lexical_scores: ls, sessions: 3 }
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
