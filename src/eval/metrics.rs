//! Per-question retrieval metrics, as in LongMemEval's `src/retrieval/eval_utils.py`.
//!
//! `ranking` is the list of session ids, best first (ids are expected to be unique; a repeated id only counts
//! at its first rank). `gold` is the set of relevant session ids (duplicates are ignored). A `k` larger than the
//! ranking just takes the whole ranking.
//!
//! - `recall_any@k` = 1 if any gold id is in the top k, else 0 (0 for an empty gold set).
//! - `recall_all@k` = 1 if every gold id is in the top k, else 0 (1, vacuously, for an empty gold set). This is
//!   what the papers call Recall@k.
//! - `ndcg_any@k`: binary relevance, DCG@k = rel_1 + Σ_{i=2..k} rel_i / log2(i) (log2(i), not log2(i+1): ranks 1
//!   and 2 weigh the same), IDCG@k = the same sum over min(|gold|, k) ones, 0 when IDCG is 0.
//!
//! One fine point: the reference computes IDCG from the relevances of the *corpus* (`1 if id in gold` for each
//! corpus id), so a gold id that is not in the corpus does not raise IDCG, whereas [`ndcg_any`] counts |gold| as
//! the protocol states. They differ only when the gold set names a session that does not exist — in LoCoMo's
//! paper ground truth, a single question (evidence `"D:11:26"`, gold id `session_`), and then only at k ≥ 7
//! (≈0.004 points on the mean at k = 10). [`ndcg_any_in_corpus`] is the reference's exact formula.

use std::collections::HashSet;

/// The DCG weight of (1-based) rank `i`: 1 for rank 1, 1/log2(i) after.
fn weight(i: usize) -> f64 {
    if i <= 1 {
        1.0
    } else {
        1.0 / (i as f64).log2()
    }
}

/// DCG of `n` relevant items at the first `n` ranks.
fn ideal_dcg(n: usize) -> f64 {
    (1..=n).map(weight).sum()
}

fn gold_set<G: AsRef<str>>(gold: &[G]) -> HashSet<&str> {
    gold.iter().map(|g| g.as_ref()).collect()
}

/// The distinct ids among the first `k` ranks.
fn top_k<S: AsRef<str>>(ranking: &[S], k: usize) -> HashSet<&str> {
    ranking.iter().take(k).map(|s| s.as_ref()).collect()
}

/// 1.0 if any gold id is among the first `k` ranks, else 0.0 (0.0 for an empty gold set).
pub fn recall_any<S: AsRef<str>, G: AsRef<str>>(ranking: &[S], gold: &[G], k: usize) -> f64 {
    let top = top_k(ranking, k);
    if gold.iter().any(|g| top.contains(g.as_ref())) {
        1.0
    } else {
        0.0
    }
}

/// 1.0 if every gold id is among the first `k` ranks, else 0.0 (1.0 for an empty gold set).
pub fn recall_all<S: AsRef<str>, G: AsRef<str>>(ranking: &[S], gold: &[G], k: usize) -> f64 {
    let top = top_k(ranking, k);
    if gold.iter().all(|g| top.contains(g.as_ref())) {
        1.0
    } else {
        0.0
    }
}

/// DCG@k of the ranking against a gold set (each relevant id counted once, at its first rank).
fn dcg<S: AsRef<str>>(ranking: &[S], gold: &HashSet<&str>, k: usize) -> f64 {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut total = 0.0;
    for (i, id) in ranking.iter().take(k).enumerate() {
        let id = id.as_ref();
        if gold.contains(id) && seen.insert(id) {
            total += weight(i + 1);
        }
    }
    total
}

/// Binary-relevance NDCG@k with the log2(i) discount; IDCG over min(|gold|, k) relevant items; 0.0 when the
/// gold set is empty.
pub fn ndcg_any<S: AsRef<str>, G: AsRef<str>>(ranking: &[S], gold: &[G], k: usize) -> f64 {
    let gold = gold_set(gold);
    let idcg = ideal_dcg(gold.len().min(k));
    if idcg == 0.0 {
        return 0.0;
    }
    dcg(ranking, &gold, k) / idcg
}

/// [`ndcg_any`] with the reference's exact IDCG: over min(n, k) relevant items where n is the number of
/// `corpus` entries that are gold. Equal to [`ndcg_any`] whenever every gold id is in the corpus.
pub fn ndcg_any_in_corpus<S: AsRef<str>, G: AsRef<str>, C: AsRef<str>>(
    ranking: &[S],
    gold: &[G],
    corpus: &[C],
    k: usize,
) -> f64 {
    let gold = gold_set(gold);
    let n = corpus.iter().filter(|c| gold.contains(c.as_ref())).count();
    let idcg = ideal_dcg(n.min(k));
    if idcg == 0.0 {
        return 0.0;
    }
    dcg(ranking, &gold, k) / idcg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r4(x: f64) -> f64 {
        (x * 10_000.0).round() / 10_000.0
    }

    /// Asserts (any, all, ndcg) at k = 1, 3, 5, to 4 decimals.
    fn check(ranking: &[&str], gold: &[&str], expected: [(f64, f64, f64); 3]) {
        let gold: Vec<String> = gold.iter().map(|s| s.to_string()).collect();
        for (k, exp) in [1, 3, 5].into_iter().zip(expected) {
            let got = (recall_any(ranking, &gold, k), recall_all(ranking, &gold, k), r4(ndcg_any(ranking, &gold, k)));
            assert_eq!(got, exp, "ranking {ranking:?} gold {gold:?} k={k}");
            // The reference formula agrees when all gold ids are in the corpus.
            let corpus = ["s1", "s2", "s3", "s4", "s5"];
            assert_eq!(r4(ndcg_any_in_corpus(ranking, &gold, &corpus, k)), exp.2, "reference ndcg, k={k}");
        }
    }

    #[test]
    fn golden_single_gold_ranked_first() {
        check(&["s3", "s1", "s2", "s4", "s5"], &["s3"], [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0), (1.0, 1.0, 1.0)]);
    }

    #[test]
    fn golden_single_gold_ranked_second() {
        check(&["s1", "s3", "s2", "s4", "s5"], &["s3"], [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (1.0, 1.0, 1.0)]);
    }

    #[test]
    fn golden_single_gold_ranked_third() {
        check(&["s1", "s2", "s3", "s4", "s5"], &["s3"], [(0.0, 0.0, 0.0), (1.0, 1.0, 0.6309), (1.0, 1.0, 0.6309)]);
    }

    #[test]
    fn golden_single_gold_ranked_fifth() {
        check(&["s1", "s2", "s4", "s5", "s3"], &["s3"], [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (1.0, 1.0, 0.4307)]);
    }

    #[test]
    fn golden_two_gold_first_and_fifth() {
        check(&["s3", "s1", "s2", "s4", "s5"], &["s3", "s5"], [(1.0, 0.0, 1.0), (1.0, 0.0, 0.5), (1.0, 1.0, 0.7153)]);
    }

    #[test]
    fn golden_two_gold_second_and_third() {
        check(
            &["s1", "s3", "s5", "s2", "s4"],
            &["s3", "s5"],
            [(0.0, 0.0, 0.0), (1.0, 1.0, 0.8155), (1.0, 1.0, 0.8155)],
        );
    }

    #[test]
    fn empty_gold() {
        let ranking = ["s1", "s2"];
        let gold: [&str; 0] = [];
        for k in [1, 3, 10] {
            assert_eq!(recall_all(&ranking, &gold, k), 1.0);
            assert_eq!(recall_any(&ranking, &gold, k), 0.0);
            assert_eq!(ndcg_any(&ranking, &gold, k), 0.0);
            assert_eq!(ndcg_any_in_corpus(&ranking, &gold, &ranking, k), 0.0);
        }
    }

    #[test]
    fn accepts_string_slices_and_ignores_duplicates() {
        let ranking: Vec<String> = ["s2", "s1", "s3"].map(String::from).to_vec();
        let gold: Vec<String> = ["s1", "s1"].map(String::from).to_vec();
        assert_eq!(recall_all(&ranking, &gold, 2), 1.0);
        assert_eq!(ndcg_any(&ranking, &gold, 3), 1.0); // IDCG over one distinct gold id
        let dup_ranking = ["s1", "s1", "s2"];
        assert_eq!(r4(ndcg_any(&dup_ranking, &["s1", "s2"], 3)), r4(ndcg_any(&["s1", "s3", "s2"], &["s1", "s2"], 3)));
        // k beyond the ranking takes the whole ranking
        assert_eq!(recall_all(&ranking, &["s3"], 50), 1.0);
    }

    #[test]
    fn gold_outside_corpus_differs_only_in_reference_idcg() {
        // gold names a session that does not exist ("session_"), as LoCoMo's paper ground truth does once.
        let ranking = ["a", "b", "c"];
        let gold = ["a", "session_"];
        assert_eq!(recall_all(&ranking, &gold, 3), 0.0);
        assert_eq!(recall_any(&ranking, &gold, 3), 1.0);
        assert_eq!(ndcg_any(&ranking, &gold, 3), 0.5); // IDCG counts 2 gold ids
        assert_eq!(ndcg_any_in_corpus(&ranking, &gold, &ranking, 3), 1.0); // reference: 1 gold in corpus
    }
}
