//! LongMemEval loader (`longmemeval_s.json`, `longmemeval_m.json`, `longmemeval_oracle.json`): one
//! [`EvalCorpus`] per question, holding that question's haystack.
//!
//! The file is a JSON list of `{question_id, question_type, question, answer, question_date,
//! haystack_session_ids, haystack_dates, haystack_sessions, answer_session_ids, …}` where each haystack session is
//! a list of turns `{role, content, has_answer?}`.
//!
//! As in the reference preprocessing (MemGAS / Nano-Memory `dataprocess.py`):
//! - gold sessions = the haystack sessions holding a turn with `has_answer == true`, deduplicated;
//! - session ids lose their `answer_` marker (`id.replace('answer_', '')`), in the corpus and in the gold alike;
//! - questions whose id contains `_abs` (abstention) are excluded — the reference leaves them out of the averages;
//!   here they are not loaded at all.
//!
//! Turn speaker = `role`, text = `content`; a turn's `dia_id` is `{session_id}:{n}` with `n` counted from 1.
//! [`EvalQuestion::evidence`] lists the `has_answer` turns. With [`GroundTruth::Paper`] a question whose gold set
//! is empty is kept (it scores `recall_all` = 1, as in the reference); [`GroundTruth::Clean`] drops it.

use std::io::BufReader;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{dedup_keep_order, EvalCorpus, EvalQuestion, EvalSession, EvalTurn, GroundTruth};

#[derive(Deserialize)]
struct RawEntry {
    question_id: String,
    #[serde(default)]
    question_type: String,
    question: String,
    #[serde(default)]
    question_date: Option<String>,
    haystack_session_ids: Vec<String>,
    haystack_dates: Vec<String>,
    haystack_sessions: Vec<Vec<RawTurn>>,
}

#[derive(Deserialize)]
struct RawTurn {
    role: String,
    content: String,
    #[serde(default)]
    has_answer: Option<Value>,
}

impl RawTurn {
    /// Python's `turn['has_answer'] == True` (which also holds for the number 1).
    fn has_answer(&self) -> bool {
        match &self.has_answer {
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => n.as_f64() == Some(1.0),
            _ => false,
        }
    }
}

/// Whether a question id marks an abstention question.
pub fn is_abstention(question_id: &str) -> bool {
    question_id.contains("_abs")
}

/// The corpus id of a haystack session id: `answer_` removed, as the reference does.
pub fn normalize_session_id(id: &str) -> String {
    id.replace("answer_", "")
}

/// Loads a LongMemEval file: one corpus (with one question) per non-abstention question, in file order.
pub fn load(path: &Path, gt: GroundTruth) -> Result<Vec<EvalCorpus>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read LongMemEval file {}: {e}", path.display()))?;
    let entries: Vec<RawEntry> = serde_json::from_reader(BufReader::new(file))
        .map_err(|e| format!("{}: invalid LongMemEval JSON: {e}", path.display()))?;
    convert(entries, gt).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses LongMemEval JSON text (see [`load`]).
pub fn parse(json: &str, gt: GroundTruth) -> Result<Vec<EvalCorpus>, String> {
    let entries: Vec<RawEntry> = serde_json::from_str(json).map_err(|e| format!("invalid LongMemEval JSON: {e}"))?;
    convert(entries, gt)
}

fn convert(entries: Vec<RawEntry>, gt: GroundTruth) -> Result<Vec<EvalCorpus>, String> {
    let mut out = Vec::new();
    for entry in entries {
        if is_abstention(&entry.question_id) {
            continue;
        }
        if let Some(c) = build_corpus(entry, gt)? {
            out.push(c);
        }
    }
    Ok(out)
}

fn build_corpus(entry: RawEntry, gt: GroundTruth) -> Result<Option<EvalCorpus>, String> {
    let n = entry.haystack_sessions.len();
    if entry.haystack_session_ids.len() != n || entry.haystack_dates.len() != n {
        return Err(format!(
            "question {}: {} haystack sessions, {} session ids, {} dates",
            entry.question_id,
            n,
            entry.haystack_session_ids.len(),
            entry.haystack_dates.len()
        ));
    }

    let mut sessions = Vec::with_capacity(n);
    let mut gold = Vec::new();
    let mut evidence = Vec::new();
    let parts = entry.haystack_session_ids.into_iter().zip(entry.haystack_dates).zip(entry.haystack_sessions);
    for ((raw_id, date), raw_turns) in parts {
        let id = normalize_session_id(&raw_id);
        let turns: Vec<EvalTurn> = raw_turns
            .into_iter()
            .enumerate()
            .map(|(i, t)| EvalTurn {
                dia_id: format!("{id}:{}", i + 1),
                has_answer: t.has_answer(),
                speaker: t.role,
                text: t.content,
                caption: None,
            })
            .collect();
        for t in turns.iter().filter(|t| t.has_answer) {
            gold.push(id.clone());
            evidence.push(t.dia_id.clone());
        }
        sessions.push(EvalSession { id, date, turns });
    }

    let gold_sessions = dedup_keep_order(gold);
    if gt == GroundTruth::Clean && gold_sessions.is_empty() {
        return Ok(None);
    }
    let question = EvalQuestion {
        id: entry.question_id.clone(),
        question: entry.question,
        category: entry.question_type,
        date: entry.question_date,
        gold_sessions,
        evidence: dedup_keep_order(evidence),
    };
    Ok(Some(EvalCorpus { id: entry.question_id, sessions, questions: vec![question] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstention_ids() {
        assert!(is_abstention("gpt4_2655b836_abs"));
        assert!(!is_abstention("gpt4_2655b836"));
        assert_eq!(normalize_session_id("answer_4be1b6b4_2"), "4be1b6b4_2");
        assert_eq!(normalize_session_id("sharegpt_yywfHz_0"), "sharegpt_yywfHz_0");
    }

    #[test]
    fn mismatched_lengths_are_an_error() {
        let json = r#"[{"question_id": "q", "question_type": "t", "question": "?", "question_date": "d",
            "haystack_session_ids": ["a", "b"], "haystack_dates": ["d1"],
            "haystack_sessions": [[], []]}]"#;
        assert!(parse(json, GroundTruth::Paper).is_err());
    }

    #[test]
    fn empty_gold_kept_in_paper_dropped_in_clean() {
        let json = r#"[{"question_id": "q", "question_type": "t", "question": "?", "question_date": "d",
            "answer": 3, "haystack_session_ids": ["a"], "haystack_dates": ["d1"],
            "haystack_sessions": [[{"role": "user", "content": "x", "has_answer": false}]]}]"#;
        let paper = parse(json, GroundTruth::Paper).unwrap();
        assert_eq!(paper.len(), 1);
        assert!(paper[0].questions[0].gold_sessions.is_empty());
        assert!(parse(json, GroundTruth::Clean).unwrap().is_empty());
    }
}
