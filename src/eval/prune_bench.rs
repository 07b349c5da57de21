//! The extractive pruning benchmark (no LLM): how much gold evidence survives extractive pruning of the top-k
//! sessions, against how many context tokens it keeps.
//!
//! Per corpus (a LoCoMo conversation), every session's paired units are embedded; per question, sessions are
//! ranked by TIR (max unit cosine) and the top k become the unpruned context, which [`prune::extractive`] cuts
//! down. A question counts when at least one of its evidence turns lies in a retrieved session ("its gold session
//! was retrieved"); it keeps its evidence when **every** evidence turn that lies in a retrieved session survives.
//! `evidence_kept` is the share of counted questions that keep their evidence; `token_ratio` the mean over counted
//! questions of pruned / unpruned context tokens (WordPiece tokens of the embedding model); both fractions.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::EvalCorpus;
use crate::embed::{Embedder, Runtime};
use crate::error::Result;
use crate::recall::prune::{self, ExtractiveOptions, PruneSession, PruneTurn, ScoredUnit};

/// Settings of one run.
#[derive(Debug, Clone, Copy)]
pub struct PruneBenchOptions {
    /// Sessions retrieved (the papers' k = 3).
    pub k: usize,
    pub extractive: ExtractiveOptions,
    pub chronological: bool,
}

impl Default for PruneBenchOptions {
    fn default() -> Self {
        PruneBenchOptions { k: 3, extractive: ExtractiveOptions::default(), chronological: true }
    }
}

/// Outcome over a group of questions.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PruneScore {
    /// Questions counted (evidence in a retrieved session).
    pub n: usize,
    pub evidence_kept: f64,
    pub token_ratio: f64,
}

/// The benchmark's result (JSON keys as the issue asks: `evidence_kept`, `token_ratio`, fractions).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PruneBenchReport {
    pub k: usize,
    pub budget_ratio: f32,
    pub neighbours: usize,
    /// Questions with evidence at all.
    pub questions: usize,
    /// Questions whose evidence lay outside the top k (not counted).
    pub not_retrieved: usize,
    pub n: usize,
    pub evidence_kept: f64,
    pub token_ratio: f64,
    /// Sum of pruned tokens / sum of unpruned tokens over counted questions.
    pub token_ratio_total: f64,
    pub per_category: BTreeMap<String, PruneScore>,
}

/// One question's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PruneOutcome {
    pub kept: bool,
    pub tokens: usize,
    pub unpruned_tokens: usize,
}

/// Aggregates per-question outcomes `(category, outcome)`.
pub fn aggregate(outcomes: &[(String, PruneOutcome)]) -> (PruneScore, BTreeMap<String, PruneScore>) {
    fn score<'a>(it: impl Iterator<Item = &'a PruneOutcome>) -> PruneScore {
        let (mut n, mut kept, mut ratio) = (0usize, 0usize, 0.0f64);
        for o in it {
            n += 1;
            kept += o.kept as usize;
            ratio += o.tokens as f64 / o.unpruned_tokens.max(1) as f64;
        }
        let d = n.max(1) as f64;
        PruneScore { n, evidence_kept: kept as f64 / d, token_ratio: ratio / d }
    }
    let mut cats: BTreeMap<String, Vec<PruneOutcome>> = BTreeMap::new();
    for (c, o) in outcomes {
        cats.entry(c.clone()).or_default().push(*o);
    }
    let per = cats.iter().map(|(c, v)| (c.clone(), score(v.iter()))).collect();
    (score(outcomes.iter().map(|(_, o)| o)), per)
}

/// Runs the benchmark over `corpora` with `embedder`; `progress` is called after each corpus with (done, total).
pub async fn run<R: Runtime>(
    corpora: &[EvalCorpus],
    embedder: &mut Embedder<R>,
    options: &PruneBenchOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<PruneBenchReport> {
    let mut outcomes: Vec<(String, PruneOutcome)> = Vec::new();
    let (mut questions, mut not_retrieved) = (0usize, 0usize);
    for (ci, corpus) in corpora.iter().enumerate() {
        // Units: (session, first turn index, turn count) and their texts, pairs (0,1), (2,3), … as the protocol.
        let mut units: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for (si, s) in corpus.sessions.iter().enumerate() {
            for (pi, text) in s.paired_texts().into_iter().enumerate() {
                let turns = (2 * pi..(2 * pi + 2).min(s.turns.len())).collect();
                units.push((si, turns));
                texts.push(text);
            }
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let windows = embedder.embed(&refs).await?;
        let mut vectors: Vec<Vec<Vec<f32>>> = vec![Vec::new(); units.len()];
        for w in windows {
            vectors[w.text].push(w.vector);
        }
        let where_is: HashMap<&str, (usize, usize)> = corpus
            .sessions
            .iter()
            .enumerate()
            .flat_map(|(si, s)| s.turns.iter().enumerate().map(move |(ti, t)| (t.dia_id.as_str(), (si, ti))))
            .collect();

        for q in &corpus.questions {
            let evidence: Vec<(usize, usize)> =
                q.evidence.iter().filter_map(|e| where_is.get(e.as_str()).copied()).collect();
            if evidence.is_empty() {
                continue;
            }
            questions += 1;
            let qv = embedder.embed_query(&q.question).await?;
            let unit_scores: Vec<f32> =
                vectors.iter().map(|ws| ws.iter().map(|v| dot(v, &qv)).fold(f32::NEG_INFINITY, f32::max)).collect();
            let mut session_scores = vec![f32::NEG_INFINITY; corpus.sessions.len()];
            for ((si, _), &s) in units.iter().zip(&unit_scores) {
                session_scores[*si] = session_scores[*si].max(s);
            }
            let mut ranked: Vec<usize> =
                (0..corpus.sessions.len()).filter(|&s| session_scores[s].is_finite()).collect();
            ranked.sort_by(|&a, &b| session_scores[b].total_cmp(&session_scores[a]).then(a.cmp(&b)));
            ranked.truncate(options.k);
            let in_top: Vec<(usize, usize)> = evidence.iter().copied().filter(|(s, _)| ranked.contains(s)).collect();
            if in_top.is_empty() {
                not_retrieved += 1;
                continue;
            }
            let sessions: Vec<PruneSession> = ranked
                .iter()
                .enumerate()
                .map(|(rank, &si)| {
                    let s = &corpus.sessions[si];
                    PruneSession {
                        id: s.id.clone(),
                        rank: rank + 1,
                        time: session_order_time(si),
                        date: s.date.clone(),
                        turns: s
                            .turns
                            .iter()
                            .enumerate()
                            .map(|(ti, t)| PruneTurn {
                                id: ti as u64,
                                speaker: t.speaker.clone(),
                                text: t.text.clone(),
                                caption: t.caption.clone(),
                            })
                            .collect(),
                        units: units
                            .iter()
                            .zip(&unit_scores)
                            .filter(|((u_si, _), _)| *u_si == si)
                            .map(|((_, turns), &score)| ScoredUnit { turns: turns.clone(), score })
                            .collect(),
                    }
                })
                .collect();
            let count = |s: &str| embedder.tokenizer().encode(s).len();
            let pruned = prune::extractive(&sessions, &options.extractive, options.chronological, &count);
            let kept = in_top
                .iter()
                .all(|(si, ti)| pruned.sessions.iter().any(|k| k.id == corpus.sessions[*si].id && k.kept.contains(ti)));
            outcomes.push((
                q.category.clone(),
                PruneOutcome { kept, tokens: pruned.tokens, unpruned_tokens: pruned.unpruned_tokens },
            ));
        }
        progress(ci + 1, corpora.len());
    }
    let (overall, per_category) = aggregate(&outcomes);
    let (pruned_sum, full_sum) =
        outcomes.iter().fold((0usize, 0usize), |(p, f), (_, o)| (p + o.tokens, f + o.unpruned_tokens));
    Ok(PruneBenchReport {
        k: options.k,
        budget_ratio: options.extractive.budget_ratio,
        neighbours: options.extractive.neighbours,
        questions,
        not_retrieved,
        n: overall.n,
        evidence_kept: overall.evidence_kept,
        token_ratio: overall.token_ratio,
        token_ratio_total: pruned_sum as f64 / full_sum.max(1) as f64,
        per_category,
    })
}

/// Sessions of a conversation are in data order, which is chronological in LoCoMo: their index orders them.
fn session_order_time(session_index: usize) -> f64 {
    session_index as f64
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_shares_and_mean_ratios_per_category() {
        let o = |kept, tokens| PruneOutcome { kept, tokens, unpruned_tokens: 100 };
        let outcomes = vec![("1".to_string(), o(true, 40)), ("1".into(), o(false, 60)), ("2".into(), o(true, 50))];
        let (all, per) = aggregate(&outcomes);
        assert_eq!(all.n, 3);
        assert!((all.evidence_kept - 2.0 / 3.0).abs() < 1e-12);
        assert!((all.token_ratio - 0.5).abs() < 1e-12);
        assert_eq!(per["1"], PruneScore { n: 2, evidence_kept: 0.5, token_ratio: 0.5 });
        assert_eq!(per["2"].evidence_kept, 1.0);
    }
}
