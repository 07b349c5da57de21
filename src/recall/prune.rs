//! Pruning: cut the recalled sessions down to what the question needs before they reach the answering model.
//!
//! - [`PruneMode::None`]: the top-k sessions as they are.
//! - [`PruneMode::Extractive`] ([`extractive`], no LLM): keep the best-scoring units and their neighbouring turns
//!   within a token budget (a share of the unpruned context, and/or an absolute cap).
//! - [`PruneMode::Llm`]: Nano-Memory's Query-Driven Pruning (QDP). The top-k sessions under their date headers, the
//!   question's date and the question go to the user's LLM, which keeps only the relevant lines; the kept lines, in
//!   their original wording, replace the raw sessions as context. (The model names line ids rather than re-typing
//!   text; see `llm::prompts`.) The call itself lives beside `answer` (`memory::answer::qdp`), so that it runs
//!   without the memory's lock; here are its pure parts: [`qdp_sessions`], [`kept_from_reply`], [`render`].
//!
//! Pure functions over [`PruneSession`]s: no storage, no embedding, no LLM, no JavaScript. Rendering matches
//! `Memory::render_session` (header `### Session {id} ({date})`, lines `Speaker: text`), with `…` where turns were
//! left out.

use crate::text::single_line;
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::llm::prompts::{QdpReply, QdpSession};
use crate::sort;
use crate::types::TimeMs;

/// How recalled sessions are pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PruneMode {
    #[default]
    None,
    Extractive,
    Llm,
    /// QDP asking for word-for-word quotes instead of line ids (an alternative shape, measured against `Llm`).
    #[serde(rename = "llm-spans")]
    LlmSpans,
}

impl PruneMode {
    /// Whether this mode calls the LLM.
    pub fn uses_llm(self) -> bool {
        matches!(self, PruneMode::Llm | PruneMode::LlmSpans)
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(PruneMode::None),
            "extractive" => Ok(PruneMode::Extractive),
            "llm" => Ok(PruneMode::Llm),
            "llm-spans" => Ok(PruneMode::LlmSpans),
            other => Err(Error::invalid(format!(
                "`prune` must be \"none\", \"extractive\", \"llm\" or \"llm-spans\", not {other:?}"
            ))),
        }
    }
}

/// One turn of a recalled session.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneTurn {
    pub id: u64,
    pub speaker: String,
    pub text: String,
    pub caption: Option<String>,
}

impl PruneTurn {
    /// The line shown to a model: `Speaker: text [shared an image: caption]`, on one line (see
    /// [`single_line`]).
    pub fn line(&self) -> String {
        let text = single_line(&self.text);
        match &self.caption {
            Some(c) => format!("{}: {text} [shared an image: {}]", single_line(&self.speaker), single_line(c)),
            None => format!("{}: {text}", single_line(&self.speaker)),
        }
    }
}

/// A scored unit: indices into its session's `turns`, and its retrieval score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredUnit {
    pub turns: Vec<usize>,
    pub score: f32,
}

/// One recalled session, ready to prune.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneSession {
    pub id: String,
    /// 1 = best.
    pub rank: usize,
    /// For chronological order.
    pub time: TimeMs,
    /// The date header text.
    pub date: String,
    pub turns: Vec<PruneTurn>,
    /// Every unit of the session with its score (any order).
    pub units: Vec<ScoredUnit>,
}

/// Budget of [`extractive`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtractiveOptions {
    /// Share of the unpruned context's tokens to keep at most.
    pub budget_ratio: f32,
    /// An absolute cap on the pruned context's tokens, if any.
    pub max_tokens: Option<usize>,
    /// Turns kept on each side of a chosen unit, when the budget allows (context: who asked what).
    pub neighbours: usize,
}

impl Default for ExtractiveOptions {
    fn default() -> Self {
        // 0.5: the benchmark's target point (≥ 90% of evidence kept at ≤ 50% of the tokens, docs/BENCHMARKS.md).
        ExtractiveOptions { budget_ratio: 0.5, max_tokens: None, neighbours: 1 }
    }
}

/// What survived pruning in one session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptSession {
    pub id: String,
    pub rank: usize,
    /// Indices into the session's turns, ascending.
    #[serde(skip)]
    pub kept: Vec<usize>,
    pub turn_ids: Vec<u64>,
}

/// The pruned context.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    pub mode: PruneMode,
    /// Sessions with at least one kept turn, in context order.
    pub sessions: Vec<KeptSession>,
    pub context: String,
    pub tokens: usize,
    /// Tokens of the same sessions unpruned.
    pub unpruned_tokens: usize,
}

fn header(s: &PruneSession) -> String {
    format!("### Session {} ({})", s.id, s.date)
}

fn order(sessions: &[PruneSession], chronological: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sessions.len()).collect();
    if chronological {
        sort::sort_by(&mut order, |&a, &b| {
            sessions[a].time.total_cmp(&sessions[b].time).then(sessions[a].rank.cmp(&sessions[b].rank))
        });
    } else {
        sort::sort_by_key(&mut order, |&i| sessions[i].rank);
    }
    order
}

/// Renders the kept turns of each session (`kept[i]` for `sessions[i]`, ascending), `…` marking left-out turns;
/// sessions with nothing kept are left out.
pub fn render(sessions: &[PruneSession], kept: &[Vec<usize>], chronological: bool) -> (String, Vec<KeptSession>) {
    let mut parts = Vec::new();
    let mut out = Vec::new();
    for i in order(sessions, chronological) {
        let (s, k) = (&sessions[i], &kept[i]);
        if k.is_empty() {
            continue;
        }
        let mut text = header(s);
        let mut next = 0;
        for &t in k {
            if t > next {
                text.push_str("\n…");
            }
            text.push('\n');
            text.push_str(&s.turns[t].line());
            next = t + 1;
        }
        if next < s.turns.len() {
            text.push_str("\n…");
        }
        parts.push(text);
        out.push(KeptSession {
            id: s.id.clone(),
            rank: s.rank,
            kept: k.clone(),
            turn_ids: k.iter().map(|&t| s.turns[t].id).collect(),
        });
    }
    (parts.join("\n\n"), out)
}

pub fn all_turns(sessions: &[PruneSession]) -> Vec<Vec<usize>> {
    sessions.iter().map(|s| (0..s.turns.len()).collect()).collect()
}

/// No pruning: every turn of every session.
pub fn none(sessions: &[PruneSession], chronological: bool, count: &dyn Fn(&str) -> usize) -> Pruned {
    let (context, kept) = render(sessions, &all_turns(sessions), chronological);
    let tokens = count(&context);
    Pruned { mode: PruneMode::None, sessions: kept, context, tokens, unpruned_tokens: tokens }
}

/// Extractive pruning: units in descending score order, each with `neighbours` turns around it when that fits the
/// budget, else alone when that fits, else skipped; the best unit is always kept. `count` gives tokens of a text.
pub fn extractive(
    sessions: &[PruneSession],
    options: &ExtractiveOptions,
    chronological: bool,
    count: &dyn Fn(&str) -> usize,
) -> Pruned {
    let (full, _) = render(sessions, &all_turns(sessions), chronological);
    let unpruned_tokens = count(&full);
    let mut budget = (unpruned_tokens as f64 * options.budget_ratio.clamp(0.0, 1.0) as f64) as usize;
    if let Some(cap) = options.max_tokens {
        budget = budget.min(cap);
    }
    // Per-line costs, headers counted once per session used. The `…` gap markers are not budgeted (a token each).
    let line_cost: Vec<Vec<usize>> =
        sessions.iter().map(|s| s.turns.iter().map(|t| count(&t.line())).collect()).collect();
    let header_cost: Vec<usize> = sessions.iter().map(|s| count(&header(s))).collect();

    let mut units: Vec<(usize, &ScoredUnit)> =
        sessions.iter().enumerate().flat_map(|(i, s)| s.units.iter().map(move |u| (i, u))).collect();
    sort::sort_by(&mut units, |a, b| b.1.score.total_cmp(&a.1.score).then(sessions[a.0].rank.cmp(&sessions[b.0].rank)));

    let mut kept: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); sessions.len()];
    let mut used = 0usize;
    for (n, (i, unit)) in units.iter().enumerate() {
        let s = &sessions[*i];
        let core: Vec<usize> = unit.turns.iter().copied().filter(|&t| t < s.turns.len()).collect();
        let (Some(&lo), Some(&hi)) = (core.iter().min(), core.iter().max()) else { continue };
        let wide: Vec<usize> =
            (lo.saturating_sub(options.neighbours)..=(hi + options.neighbours).min(s.turns.len() - 1)).collect();
        let cost = |turns: &[usize]| -> usize {
            let new: usize = turns.iter().filter(|t| !kept[*i].contains(t)).map(|&t| line_cost[*i][t]).sum();
            if new > 0 && kept[*i].is_empty() {
                new + header_cost[*i]
            } else {
                new
            }
        };
        let choice = if used + cost(&wide) <= budget {
            Some(wide)
        } else if used + cost(&core) <= budget || n == 0 {
            Some(core)
        } else {
            None
        };
        if let Some(turns) = choice {
            used += cost(&turns);
            kept[*i].extend(turns);
        }
    }
    let kept: Vec<Vec<usize>> = kept.into_iter().map(|k| k.into_iter().collect()).collect();
    let (context, sessions_kept) = render(sessions, &kept, chronological);
    let tokens = count(&context);
    Pruned { mode: PruneMode::Extractive, sessions: sessions_kept, context, tokens, unpruned_tokens }
}

/// The QDP prompt's sessions (labelled 1.. in context order) and, per label, the index into `sessions`.
pub fn qdp_sessions(sessions: &[PruneSession], chronological: bool) -> (Vec<QdpSession>, Vec<usize>) {
    let order = order(sessions, chronological);
    let qs = order
        .iter()
        .enumerate()
        .map(|(n, &i)| QdpSession {
            label: n + 1,
            date: sessions[i].date.clone(),
            lines: sessions[i].turns.iter().map(PruneTurn::line).collect(),
        })
        .collect();
    (qs, order)
}

/// The turns a pruner kept, with each session's best-scoring unit added: the evidence recall ranked the session by
/// survives a small model's pruning (qwen2.5-1.5b, left alone, kept 131 tokens of 2,330 and lost the answer).
pub fn with_best_units(sessions: &[PruneSession], kept: &[KeptSession]) -> Vec<Vec<usize>> {
    sessions
        .iter()
        .map(|s| {
            let mut k: BTreeSet<usize> =
                kept.iter().find(|x| x.id == s.id).map(|x| x.kept.iter().copied().collect()).unwrap_or_default();
            if let Some(best) = s.units.iter().max_by(|a, b| a.score.total_cmp(&b.score)) {
                k.extend(best.turns.iter().copied().filter(|&t| t < s.turns.len()));
            }
            k.into_iter().collect()
        })
        .collect()
}

/// The kept turns named by a QDP reply (ids `{label}.{line}`); unknown or malformed ids are ignored.
pub fn kept_from_reply(sessions: &[PruneSession], order: &[usize], reply: &QdpReply) -> Vec<Vec<usize>> {
    let mut kept: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); sessions.len()];
    for id in &reply.keep {
        let id = id.trim().trim_start_matches('[').trim_end_matches(']');
        let Some((label, line)) = id.split_once('.') else { continue };
        let (Ok(label), Ok(line)) = (label.parse::<usize>(), line.parse::<usize>()) else { continue };
        let Some(&i) = label.checked_sub(1).and_then(|l| order.get(l)) else { continue };
        if line >= 1 && line <= sessions[i].turns.len() {
            kept[i].insert(line - 1);
        }
    }
    kept.into_iter().map(|k| k.into_iter().collect()).collect()
}

/// Lower-case words of `s` (letters and digits), for matching a quote to the lines it was copied from.
fn words_of(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// The kept turns named by a quoting QDP reply: a quote keeps every line that contains its words in order; one
/// that no line contains keeps the line that shares most of its words, if that is at least 60% of them (small
/// models drop or change a word when they copy). Quotes of fewer than 2 words are ignored.
pub fn kept_from_quotes(sessions: &[PruneSession], quotes: &[String]) -> Vec<Vec<usize>> {
    let lines: Vec<Vec<Vec<String>>> =
        sessions.iter().map(|s| s.turns.iter().map(|t| words_of(&t.line())).collect()).collect();
    let mut kept: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); sessions.len()];
    for quote in quotes {
        let q = words_of(quote);
        if q.len() < 2 {
            continue;
        }
        let mut found = false;
        for (i, session) in lines.iter().enumerate() {
            for (n, line) in session.iter().enumerate() {
                if line.windows(q.len()).any(|w| w == q.as_slice()) {
                    kept[i].insert(n);
                    found = true;
                }
            }
        }
        if found {
            continue;
        }
        let overlap = |line: &Vec<String>| q.iter().filter(|w| line.contains(w)).count();
        let best = lines
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().enumerate().map(move |(n, l)| (i, n, l)))
            .max_by_key(|&(_, _, l)| overlap(l));
        if let Some((i, n, l)) = best {
            if overlap(l) * 10 >= q.len() * 6 {
                kept[i].insert(n);
            }
        }
    }
    kept.into_iter().map(|k| k.into_iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    fn session(id: &str, rank: usize, time: f64, lines: &[&str], scores: &[f32]) -> PruneSession {
        let turns = lines
            .iter()
            .enumerate()
            .map(|(n, l)| PruneTurn {
                id: (rank * 100 + n) as u64,
                speaker: "A".into(),
                text: l.to_string(),
                caption: None,
            })
            .collect::<Vec<_>>();
        let units = scores
            .iter()
            .enumerate()
            .map(|(n, &score)| ScoredUnit { turns: (2 * n..(2 * n + 2).min(lines.len())).collect(), score })
            .collect();
        PruneSession { id: id.into(), rank, time, date: format!("day {time}"), turns, units }
    }

    fn two() -> Vec<PruneSession> {
        vec![
            session(
                "late",
                1,
                2.0,
                &["one two", "three four", "five six", "seven eight", "nine ten", "x y"],
                &[0.1, 0.9, 0.2],
            ),
            session("early", 2, 1.0, &["a b", "c d", "e f", "g h"], &[0.5, 0.05]),
        ]
    }

    #[test]
    fn none_renders_every_turn_in_the_chosen_order() {
        let p = none(&two(), true, &words);
        assert!(p.context.starts_with("### Session early (day 1)\nA: a b"), "{}", p.context);
        assert_eq!(p.tokens, p.unpruned_tokens);
        let p = none(&two(), false, &words);
        assert!(p.context.starts_with("### Session late"), "by rank");
    }

    #[test]
    fn extractive_keeps_the_best_units_within_the_budget() {
        let sessions = two();
        let p = extractive(
            &sessions,
            &ExtractiveOptions { budget_ratio: 0.45, max_tokens: None, neighbours: 1 },
            false,
            &words,
        );
        assert!(p.tokens as f32 <= p.unpruned_tokens as f32 * 0.45 + 2.0, "{} of {}", p.tokens, p.unpruned_tokens);
        // The best unit (turns 2,3 of "late") is kept first, with its neighbours 1 and 4.
        assert_eq!(p.sessions[0].id, "late");
        assert_eq!(p.sessions[0].kept, vec![1, 2, 3, 4]);
        let half = extractive(
            &sessions,
            &ExtractiveOptions { budget_ratio: 0.3, max_tokens: None, neighbours: 1 },
            false,
            &words,
        );
        assert_eq!(half.sessions[0].kept, vec![2, 3], "no room for the neighbours: the unit alone");
        assert!(p.context.contains("…\nA: three four"), "left-out turns are marked: {}", p.context);

        let tight = extractive(
            &sessions,
            &ExtractiveOptions { budget_ratio: 0.0, max_tokens: None, neighbours: 1 },
            false,
            &words,
        );
        assert_eq!(tight.sessions.len(), 1, "the best unit survives even a zero budget");
        assert_eq!(tight.sessions[0].kept, vec![2, 3]);

        let all = extractive(
            &sessions,
            &ExtractiveOptions { budget_ratio: 1.0, max_tokens: None, neighbours: 1 },
            false,
            &words,
        );
        assert_eq!(all.sessions.iter().map(|s| s.kept.len()).sum::<usize>(), 10);
        let capped = extractive(
            &sessions,
            &ExtractiveOptions { budget_ratio: 1.0, max_tokens: Some(12), neighbours: 0 },
            false,
            &words,
        );
        assert!(capped.tokens <= 14, "{}", capped.tokens);
    }

    #[test]
    fn the_best_unit_of_each_session_survives_pruning() {
        let sessions = two();
        let chose = vec![KeptSession { id: "early".into(), rank: 2, kept: vec![3], turn_ids: vec![203] }];
        // late's best unit is turns 2,3 (0.9); early's is 0,1 (0.5), added to what the pruner chose.
        assert_eq!(with_best_units(&sessions, &chose), vec![vec![2, 3], vec![0, 1, 3]]);
    }

    #[test]
    fn prune_modes_parse() {
        assert_eq!(PruneMode::parse("llm").unwrap(), PruneMode::Llm);
        assert_eq!(PruneMode::parse("llm-spans").unwrap(), PruneMode::LlmSpans);
        assert_eq!(serde_json::to_string(&PruneMode::LlmSpans).unwrap(), "\"llm-spans\"");
        assert_eq!(PruneMode::parse("LLM").unwrap_err().code(), "INVALID_INPUT");
    }
}
