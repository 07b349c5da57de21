//! Dataset and metric layer of the retrieval benchmark (native only).
//!
//! This module reproduces the protocol in `shared/docs/BENCHMARK_PROTOCOL.md`, i.e. the way LongMemEval's
//! `eval_utils.py` (reused unchanged by MemGAS and Nano-Memory) scores **session** retrieval:
//!
//! - [`locomo`] loads LoCoMo (`locomo10.json`): one [`EvalCorpus`] per conversation, its questions scored against
//!   the sessions of that conversation. Two ground truths: [`GroundTruth::Paper`] reproduces the reference code's
//!   parsing quirks (for numbers that compare with the papers), [`GroundTruth::Clean`] parses evidence properly.
//! - [`longmemeval`] loads LongMemEval (`longmemeval_s.json` / `_m` / `_oracle`): one [`EvalCorpus`] per
//!   question (its haystack).
//! - [`metrics`] holds the per-question metrics `recall_any@k`, `recall_all@k` and `ndcg_any@k`.
//! - [`report`] averages them (×100) overall and per category, and prints a table.
//!
//! Embedding and retrieval are not here: a retriever ranks the [`EvalSession`]s of a corpus for each
//! [`EvalQuestion`] and hands `(category, ranking, gold)` to [`report::aggregate`].

pub mod distill_quality;
pub mod locomo;
pub mod longmemeval;
pub mod metrics;
pub mod prune_bench;
pub mod qa;
pub mod redteam;
pub mod report;

use serde::Serialize;

/// One utterance of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalTurn {
    /// Utterance id. LoCoMo: the data's `D{session}:{utterance}`; LongMemEval: `{session_id}:{n}` with `n`
    /// counted from 1 inside the session.
    pub dia_id: String,
    /// LoCoMo: the speaker's name; LongMemEval: the role (`user` / `assistant`).
    pub speaker: String,
    pub text: String,
    /// LoCoMo `blip_caption` of a shared image, if any.
    pub caption: Option<String>,
    /// LongMemEval's `has_answer` flag. Always `false` for LoCoMo, whose corpus is shared by many questions (use
    /// [`EvalQuestion::evidence`] there).
    pub has_answer: bool,
}

impl EvalTurn {
    /// The utterance as the reference code embeds it: `[{speaker}]: {text}`, followed by
    /// `\n The image Caption: {caption}` (sic, with the leading space) when the utterance has a caption.
    pub fn utterance(&self) -> String {
        match &self.caption {
            Some(c) => format!("[{}]: {}\n The image Caption: {}", self.speaker, self.text, c),
            None => format!("[{}]: {}", self.speaker, self.text),
        }
    }
}

/// One session of a conversation (the ranked unit of the benchmark).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSession {
    /// LoCoMo: `session_{N}`; LongMemEval: the haystack session id without its `answer_` marker.
    pub id: String,
    /// The session's date as written in the data (never embedded by the reference protocol).
    pub date: String,
    pub turns: Vec<EvalTurn>,
}

impl EvalSession {
    /// The reference embedding units: consecutive utterances paired by position, (0,1), (2,3), …, joined by
    /// `"\n"`; an odd last utterance stands alone. Pairing ignores speakers.
    pub fn paired_texts(&self) -> Vec<String> {
        self.turns.chunks(2).map(|pair| pair.iter().map(EvalTurn::utterance).collect::<Vec<_>>().join("\n")).collect()
    }
}

/// One benchmark question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalQuestion {
    /// LoCoMo: `{sample_id}_q{index in the qa list}`; LongMemEval: `question_id`.
    pub id: String,
    pub question: String,
    /// LoCoMo: the category number as text (`"1"`…`"5"`, see [`locomo::category_name`]); LongMemEval:
    /// `question_type`.
    pub category: String,
    /// The date the question is asked (LongMemEval `question_date`; `None` for LoCoMo).
    pub date: Option<String>,
    /// Ids of the sessions that hold the answer (deduplicated, in order of first mention). In LoCoMo's paper
    /// ground truth it may be empty, or name a session that does not exist (see [`locomo`]).
    pub gold_sessions: Vec<String>,
    /// `dia_id`s of the evidence turns, parsed cleanly whatever the ground truth (for pruning benchmarks); only
    /// ids of turns that exist in the corpus.
    pub evidence: Vec<String>,
}

/// A set of sessions and the questions asked over them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalCorpus {
    /// LoCoMo: `sample_id`; LongMemEval: `question_id`.
    pub id: String,
    /// Sessions in the data's order (LoCoMo: by session number).
    pub sessions: Vec<EvalSession>,
    pub questions: Vec<EvalQuestion>,
}

impl EvalCorpus {
    /// The session ids, in corpus order.
    pub fn session_ids(&self) -> Vec<&str> {
        self.sessions.iter().map(|s| s.id.as_str()).collect()
    }
}

/// Which ground truth a loader builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroundTruth {
    /// Reproduce the reference code, quirks included, so numbers compare with the papers.
    Paper,
    /// Parse evidence properly and drop questions without valid evidence.
    Clean,
}

impl GroundTruth {
    /// `"paper"` or `"clean"`.
    pub fn name(self) -> &'static str {
        match self {
            GroundTruth::Paper => "paper",
            GroundTruth::Clean => "clean",
        }
    }
}

/// Deduplicate, keeping the first occurrence of each item in order.
pub(crate) fn dedup_keep_order(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(speaker: &str, text: &str, caption: Option<&str>) -> EvalTurn {
        EvalTurn {
            dia_id: String::new(),
            speaker: speaker.into(),
            text: text.into(),
            caption: caption.map(Into::into),
            has_answer: false,
        }
    }

    #[test]
    fn utterance_and_pairs_follow_the_reference_format() {
        let s = EvalSession {
            id: "session_1".into(),
            date: String::new(),
            turns: vec![turn("Ann", "hi", None), turn("Bob", "look", Some("a dog")), turn("Ann", "nice", None)],
        };
        assert_eq!(
            s.paired_texts(),
            vec!["[Ann]: hi\n[Bob]: look\n The image Caption: a dog".to_string(), "[Ann]: nice".to_string()]
        );
    }

    #[test]
    fn dedup_keeps_first_order() {
        let v = dedup_keep_order(["b", "a", "b", "c", "a"].map(String::from));
        assert_eq!(v, vec!["b", "a", "c"]);
    }
}
