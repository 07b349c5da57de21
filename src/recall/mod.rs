//! Recall: rank sessions for a query. Turn Isolation Retrieval (Nano-Memory): each session is scored by its single
//! best-matching unit — the max, not the mean, so one relevant exchange is not diluted by a long session.

pub mod prune;

use std::collections::HashMap;

/// One ranked session: its score and its best rows (row index into the vector index, score), best first.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionScore {
    pub session: u32,
    pub score: f32,
    pub best_rows: Vec<(usize, f32)>,
}

/// TIR: session score = max over its rows. `row_session[r]` is the session of row `r`. Returns the top `k`
/// sessions, each with up to `rows_per_session` best rows. Ties break by session number, so ranking is stable.
pub fn tir(row_scores: &[f32], row_session: &[u32], k: usize, rows_per_session: usize) -> Vec<SessionScore> {
    let mut best: HashMap<u32, Vec<(usize, f32)>> = HashMap::new();
    for (r, (&score, &session)) in row_scores.iter().zip(row_session).enumerate() {
        let rows = best.entry(session).or_default();
        if rows.len() < rows_per_session.max(1) {
            rows.push((r, score));
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        } else if let Some(last) = rows.last_mut() {
            if score > last.1 {
                *last = (r, score);
                rows.sort_by(|a, b| b.1.total_cmp(&a.1));
            }
        }
    }
    let mut ranked: Vec<SessionScore> = best
        .into_iter()
        .map(|(session, best_rows)| SessionScore { session, score: best_rows[0].1, best_rows })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.session.cmp(&b.session)));
    ranked.truncate(k);
    ranked
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
}
