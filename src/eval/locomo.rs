//! LoCoMo loader (`locomo10.json`): one [`EvalCorpus`] per conversation.
//!
//! The file is a JSON list of samples `{sample_id, conversation, qa, …}`. `conversation` holds `speaker_a`,
//! `speaker_b`, and for each session N a key `session_N` (a list of `{speaker, dia_id, text, blip_caption?, …}`)
//! and `session_N_date_time` (e.g. `1:56 pm on 8 May, 2023`). Sessions are the `session_N` keys that hold a list
//! (conv-26 has date keys without a dialog), ordered by N. `qa` is a list of
//! `{question, answer?, adversarial_answer?, evidence: [string], category: int}`.
//!
//! # Ground truth
//!
//! **Paper parity** ([`GroundTruth::Paper`]) is the rule of the reference preprocessing (MemGAS and Nano-Memory
//! `dataprocess.py`, `process_locomo10`), whose result `retrieval.py` deduplicates with `set(...)`:
//!
//! ```python
//! for item in qaitem['evidence']:
//!     try:
//!         turn_id = int(item.split(':')[1])
//!     except:
//!         continue
//!     answer_session_ids.append(f"{item.replace('D', 'session_').split(':')[0]}")
//! ```
//!
//! That is: an evidence string is kept iff it has a second `:`-separated field that Python's `int()` accepts;
//! its session id is then the string with every `D` replaced by `session_`, cut at the first `:`. So
//! `"D8:6; D9:17"` (`int("6; D9")` fails), `"D"` (no second field) and the space-separated lists
//! `"D9:1 D4:4 D4:6"` (`int("1 D4")` fails) are dropped, while `"D:11:26"` passes (`int("11")`) and maps to
//! `session_`, a session that does not exist (that question keeps 6 real gold sessions, so its `recall_all` is
//! always 0). Questions whose gold ends up empty are **kept** (`recall_all` = 1, `recall_any` = `ndcg` = 0).
//! On `locomo10.json` this gives 1,986 questions, 8 of them with empty gold: 4 with no evidence at all
//! (conv-26 ×2, conv-50 ×2, all category 3) and 4 whose only evidence string is malformed (`"D8:6; D9:17"` in
//! conv-26 and the three space-separated lists of conv-49).
//!
//! **Clean** ([`GroundTruth::Clean`]): every match of the regex `D\d+:\d+` in every evidence string is an
//! evidence id (so the malformed lists above yield all their ids); a match is valid when its session
//! `session_{s}` exists in the conversation (numbers compared as integers); gold = the sessions of the valid
//! matches; questions with no valid match are dropped. On `locomo10.json`: 1,982 questions (the 4 without any
//! evidence are dropped), none with a gold session outside the corpus.
//!
//! In both variants [`EvalQuestion::evidence`] holds the clean matches, normalised to `D{s}:{u}` without leading
//! zeros (`D30:05` → `D30:5`), that name an existing turn (2 of them do not: `D10:19` in conv-42, `D4:36` in
//! conv-47; their sessions still count as gold).

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{dedup_keep_order, EvalCorpus, EvalQuestion, EvalSession, EvalTurn, GroundTruth};

#[derive(Deserialize)]
struct RawSample {
    sample_id: String,
    conversation: Map<String, Value>,
    #[serde(default)]
    qa: Vec<RawQa>,
}

#[derive(Deserialize)]
struct RawQa {
    question: String,
    /// Kept as raw values: a non-string is dropped, as the reference's bare `except:` drops it.
    #[serde(default)]
    evidence: Vec<Value>,
    #[serde(default)]
    category: Value,
}

#[derive(Deserialize)]
struct RawTurn {
    speaker: String,
    dia_id: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

/// The LoCoMo category names, by the numbers used in the data.
pub fn category_name(category: &str) -> Option<&'static str> {
    match category {
        "1" => Some("multi-hop"),
        "2" => Some("temporal"),
        "3" => Some("open-domain"),
        "4" => Some("single-hop"),
        "5" => Some("adversarial"),
        _ => None,
    }
}

/// Loads `locomo10.json` (or a file of the same format): one corpus per sample, in file order.
pub fn load(path: &Path, gt: GroundTruth) -> Result<Vec<EvalCorpus>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read LoCoMo file {}: {e}", path.display()))?;
    parse(&text, gt).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses LoCoMo JSON text (see [`load`]).
pub fn parse(json: &str, gt: GroundTruth) -> Result<Vec<EvalCorpus>, String> {
    let samples: Vec<RawSample> = serde_json::from_str(json).map_err(|e| format!("invalid LoCoMo JSON: {e}"))?;
    samples.into_iter().map(|s| build_corpus(s, gt)).collect()
}

fn build_corpus(sample: RawSample, gt: GroundTruth) -> Result<EvalCorpus, String> {
    let sessions = build_sessions(&sample.sample_id, &sample.conversation)?;
    let session_ids: HashSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    let dia_ids: HashSet<&str> = sessions.iter().flat_map(|s| s.turns.iter().map(|t| t.dia_id.as_str())).collect();

    let mut questions = Vec::with_capacity(sample.qa.len());
    for (index, qa) in sample.qa.iter().enumerate() {
        let strings: Vec<&str> = qa.evidence.iter().filter_map(Value::as_str).collect();
        let clean: Vec<(String, String)> = strings.iter().flat_map(|e| clean_matches(e)).collect();
        let clean_valid: Vec<&(String, String)> =
            clean.iter().filter(|(s, _)| session_ids.contains(format!("session_{s}").as_str())).collect();

        let gold_sessions = match gt {
            GroundTruth::Paper => dedup_keep_order(strings.iter().filter_map(|e| paper_session(e))),
            GroundTruth::Clean => dedup_keep_order(clean_valid.iter().map(|(s, _)| format!("session_{s}"))),
        };
        if gt == GroundTruth::Clean && gold_sessions.is_empty() {
            continue;
        }
        let evidence = dedup_keep_order(
            clean_valid.iter().map(|(s, u)| format!("D{s}:{u}")).filter(|d| dia_ids.contains(d.as_str())),
        );
        let category = match &qa.category {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        questions.push(EvalQuestion {
            id: format!("{}_q{index}", sample.sample_id),
            question: qa.question.clone(),
            category,
            date: None,
            gold_sessions,
            evidence,
        });
    }

    Ok(EvalCorpus { id: sample.sample_id, sessions, questions })
}

/// The sessions of a conversation: keys `session_N` (N written without leading zeros, as the reference looks
/// them up) holding a list, ordered by N.
fn build_sessions(sample_id: &str, conv: &Map<String, Value>) -> Result<Vec<EvalSession>, String> {
    let mut numbered: Vec<(u64, &str, &Vec<Value>)> = Vec::new();
    for (key, value) in conv {
        let Some(digits) = key.strip_prefix("session_") else {
            continue;
        };
        let Ok(n) = digits.parse::<u64>() else {
            continue;
        };
        if n.to_string() != digits {
            continue;
        }
        if let Value::Array(turns) = value {
            numbered.push((n, key.as_str(), turns));
        }
    }
    numbered.sort_by_key(|(n, _, _)| *n);

    numbered
        .into_iter()
        .map(|(_, key, raw_turns)| {
            let date = conv.get(&format!("{key}_date_time")).and_then(Value::as_str).unwrap_or_default().to_string();
            let turns = raw_turns
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let t: RawTurn =
                        serde_json::from_value(t.clone()).map_err(|e| format!("{sample_id} {key} turn {i}: {e}"))?;
                    Ok(EvalTurn {
                        dia_id: t.dia_id,
                        speaker: t.speaker,
                        text: t.text,
                        caption: t.blip_caption,
                        has_answer: false,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(EvalSession { id: key.to_string(), date, turns })
        })
        .collect()
}

/// LoCoMo's own notes on one session, written by the data's authors: what each speaker revealed (`observation`,
/// each with its evidence turns) and the life events it records (`event_summary`). The distillation-quality report
/// compares loci's episodes and facts with them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionNotes {
    /// `session_{N}`, as [`EvalSession::id`].
    pub session: String,
    pub observations: Vec<Observation>,
    /// Event summaries of both speakers.
    pub events: Vec<String>,
}

/// One observation: a statement about a speaker and the turns it rests on.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub speaker: String,
    pub statement: String,
    /// `dia_id`s, normalised as [`EvalQuestion::evidence`] (`D{s}:{u}`).
    pub evidence: Vec<String>,
}

/// The notes of every conversation of a LoCoMo file, by `sample_id`, sessions in order (see [`SessionNotes`]).
pub fn load_notes(path: &Path) -> Result<Vec<(String, Vec<SessionNotes>)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read LoCoMo file {}: {e}", path.display()))?;
    parse_notes(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses the notes of LoCoMo JSON text (see [`load_notes`]). Keys: `observation.session_{N}_observation` =
/// `{speaker: [[statement, evidence], …]}` (evidence one id or a list of ids) and `event_summary.events_session_{N}`
/// = `{speaker: [event, …], date}`.
pub fn parse_notes(json: &str) -> Result<Vec<(String, Vec<SessionNotes>)>, String> {
    #[derive(Deserialize)]
    struct RawNotes {
        sample_id: String,
        #[serde(default)]
        observation: Map<String, Value>,
        #[serde(default)]
        event_summary: Map<String, Value>,
    }
    let samples: Vec<RawNotes> = serde_json::from_str(json).map_err(|e| format!("invalid LoCoMo JSON: {e}"))?;
    let mut out = Vec::with_capacity(samples.len());
    for sample in samples {
        let mut by_session: std::collections::BTreeMap<u64, SessionNotes> = std::collections::BTreeMap::new();
        fn notes_of(by_session: &mut std::collections::BTreeMap<u64, SessionNotes>, n: u64) -> &mut SessionNotes {
            by_session
                .entry(n)
                .or_insert_with(|| SessionNotes { session: format!("session_{n}"), ..Default::default() })
        }
        for (key, value) in &sample.observation {
            let Some(n) = key.strip_prefix("session_").and_then(|k| k.strip_suffix("_observation")) else { continue };
            let n: u64 = n.parse().map_err(|_| format!("{}: observation key {key}", sample.sample_id))?;
            let notes = notes_of(&mut by_session, n);
            for (speaker, items) in value.as_object().into_iter().flatten() {
                for item in items.as_array().into_iter().flatten() {
                    let (Some(statement), evidence) = (item.get(0).and_then(Value::as_str), item.get(1)) else {
                        return Err(format!("{} {key}: an observation without a statement", sample.sample_id));
                    };
                    let ids: Vec<&str> = match evidence {
                        Some(Value::String(e)) => vec![e.as_str()],
                        Some(Value::Array(es)) => es.iter().filter_map(Value::as_str).collect(),
                        _ => Vec::new(),
                    };
                    let evidence =
                        dedup_keep_order(ids.iter().flat_map(|e| clean_matches(e)).map(|(s, u)| format!("D{s}:{u}")));
                    notes.observations.push(Observation {
                        speaker: speaker.clone(),
                        statement: statement.to_string(),
                        evidence,
                    });
                }
            }
        }
        for (key, value) in &sample.event_summary {
            let Some(n) = key.strip_prefix("events_session_") else { continue };
            let n: u64 = n.parse().map_err(|_| format!("{}: event key {key}", sample.sample_id))?;
            let notes = notes_of(&mut by_session, n);
            let speakers = value.as_object().into_iter().flatten().filter(|(k, _)| *k != "date").map(|(_, v)| v);
            for events in speakers {
                notes
                    .events
                    .extend(events.as_array().into_iter().flatten().filter_map(Value::as_str).map(String::from));
            }
        }
        out.push((sample.sample_id, by_session.into_values().collect()));
    }
    Ok(out)
}

/// The reference's session id for one evidence string, or `None` when the reference drops it (see the module
/// docs): `int(e.split(':')[1])` must succeed, then `e.replace('D', 'session_').split(':')[0]`.
fn paper_session(e: &str) -> Option<String> {
    let second = e.split(':').nth(1)?;
    if !python_int_accepts(second) {
        return None;
    }
    let replaced = e.replace('D', "session_");
    Some(replaced.split(':').next().unwrap_or_default().to_string())
}

/// Whether Python's `int(s)` accepts `s`: surrounding whitespace, an optional sign, then decimal digits with
/// single underscores allowed between digits. (Python also accepts non-ASCII decimal digits; LoCoMo has none.)
fn python_int_accepts(s: &str) -> bool {
    let s = s.trim();
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    !s.is_empty() && s.split('_').all(|group| !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()))
}

/// All non-overlapping matches of the regex `D\d+:\d+` (ASCII digits), leftmost first, as normalised
/// (session, utterance) numbers without leading zeros.
fn clean_matches(e: &str) -> Vec<(String, String)> {
    let b = e.as_bytes();
    let digits_end = |from: usize| {
        let mut j = from;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'D' {
            let s_end = digits_end(i + 1);
            if s_end > i + 1 && s_end < b.len() && b[s_end] == b':' {
                let u_end = digits_end(s_end + 1);
                if u_end > s_end + 1 {
                    out.push((strip_zeros(&e[i + 1..s_end]), strip_zeros(&e[s_end + 1..u_end])));
                    i = u_end;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

fn strip_zeros(digits: &str) -> String {
    let t = digits.trim_start_matches('0');
    if t.is_empty() {
        "0".to_string()
    } else {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_read_observations_with_their_evidence_and_both_speakers_events() {
        let json = r#"[{"sample_id": "c1", "conversation": {}, "qa": [],
            "observation": {
                "session_2_observation": {"Ann": [["Ann hikes.", "D2:3"], ["Ann moved.", ["D2:5", "D2:07"]]]},
                "session_1_observation": {"Bob": [["Bob bakes.", "D1:1; D1:2"]]}},
            "event_summary": {"events_session_1": {"Ann": ["Ann starts a job."], "Bob": [], "date": "8 May, 2023"},
                              "events_session_2": {"Ann": [], "Bob": ["Bob adopts a dog.", "Bob sells a car."]}}}]"#;
        let notes = parse_notes(json).unwrap();
        assert_eq!(notes.len(), 1);
        let (id, sessions) = &notes[0];
        assert_eq!(id, "c1");
        assert_eq!(sessions.iter().map(|s| s.session.as_str()).collect::<Vec<_>>(), ["session_1", "session_2"]);
        assert_eq!(sessions[0].observations[0].evidence, ["D1:1", "D1:2"]);
        assert_eq!(sessions[0].events, ["Ann starts a job."]);
        let ann: Vec<(&str, &[String])> =
            sessions[1].observations.iter().map(|o| (o.statement.as_str(), o.evidence.as_slice())).collect();
        assert_eq!(
            ann,
            [("Ann hikes.", &["D2:3".to_string()][..]), ("Ann moved.", &["D2:5".into(), "D2:7".into()][..])]
        );
        assert_eq!(sessions[1].events, ["Bob adopts a dog.", "Bob sells a car."]);
    }

    #[test]
    fn paper_rule_matches_the_reference_on_each_quirk() {
        assert_eq!(paper_session("D1:3").as_deref(), Some("session_1"));
        assert_eq!(paper_session("D12:30").as_deref(), Some("session_12"));
        assert_eq!(paper_session("D8:6; D9:17"), None);
        assert_eq!(paper_session("D"), None);
        assert_eq!(paper_session("D9:1 D4:4 D4:6"), None);
        assert_eq!(paper_session("D:11:26").as_deref(), Some("session_"));
        assert_eq!(paper_session("D30:05").as_deref(), Some("session_30"));
        assert_eq!(paper_session("D2: 7 ").as_deref(), Some("session_2")); // int(" 7 ") == 7
        assert_eq!(paper_session("D2:1_0").as_deref(), Some("session_2")); // int("1_0") == 10
        assert_eq!(paper_session("D2:1__0"), None);
        assert_eq!(paper_session("D2:"), None);
    }

    #[test]
    fn clean_matches_find_every_id() {
        let m = |e: &str| -> Vec<String> { clean_matches(e).into_iter().map(|(s, u)| format!("D{s}:{u}")).collect() };
        assert_eq!(m("D8:6; D9:17"), vec!["D8:6", "D9:17"]);
        assert_eq!(m("D9:1 D4:4 D4:6"), vec!["D9:1", "D4:4", "D4:6"]);
        assert_eq!(m("D:11:26"), Vec::<String>::new());
        assert_eq!(m("D"), Vec::<String>::new());
        assert_eq!(m("D30:05"), vec!["D30:5"]);
        assert_eq!(m("DD1:2:3"), vec!["D1:2"]);
    }

    const TINY: &str = r#"[{
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_10_date_time": "1:00 pm on 3 May, 2023",
            "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "late"}],
            "session_2_date_time": "1:00 pm on 2 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "hi", "blip_caption": "a cat"},
                          {"speaker": "Bob", "dia_id": "D2:2", "text": "yo"}],
            "session_1_date_time": "1:00 pm on 1 May, 2023",
            "session_1": [{"speaker": "Bob", "dia_id": "D1:1", "text": "first"}],
            "session_3_date_time": "1:00 pm on 4 May, 2023"
        },
        "qa": [
            {"question": "a", "answer": "x", "evidence": ["D1:1", "D2:2", "D1:1"], "category": 1},
            {"question": "b", "answer": 3, "evidence": ["D2:1; D10:1"], "category": 2},
            {"question": "c", "evidence": [], "category": 3, "adversarial_answer": "no"},
            {"question": "d", "answer": "x", "evidence": ["D:10:1", "D2:1"], "category": 4},
            {"question": "e", "answer": "x", "evidence": ["D7:1"], "category": 5}
        ]
    }]"#;

    #[test]
    fn tiny_sample_paper() {
        let c = parse(TINY, GroundTruth::Paper).unwrap();
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!(c.id, "conv-x");
        assert_eq!(c.session_ids(), vec!["session_1", "session_2", "session_10"]);
        assert_eq!(c.sessions[1].date, "1:00 pm on 2 May, 2023");
        assert_eq!(c.sessions[1].turns[0].caption.as_deref(), Some("a cat"));
        assert_eq!(c.sessions[1].turns[1].speaker, "Bob");
        let gold: Vec<Vec<String>> = c.questions.iter().map(|q| q.gold_sessions.clone()).collect();
        assert_eq!(
            gold,
            vec![
                vec!["session_1".to_string(), "session_2".to_string()],
                vec![],
                vec![],
                vec!["session_".to_string(), "session_2".to_string()],
                vec!["session_7".to_string()], // the reference does not check that the session exists
            ]
        );
        assert_eq!(c.questions[0].id, "conv-x_q0");
        assert_eq!(c.questions[0].category, "1");
        assert_eq!(c.questions[0].evidence, vec!["D1:1", "D2:2"]);
        assert_eq!(c.questions[1].evidence, vec!["D2:1", "D10:1"]);
        assert_eq!(c.questions[4].evidence, Vec::<String>::new());
    }

    #[test]
    fn tiny_sample_clean() {
        let c = &parse(TINY, GroundTruth::Clean).unwrap()[0];
        let ids: Vec<&str> = c.questions.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, vec!["conv-x_q0", "conv-x_q1", "conv-x_q3"]);
        assert_eq!(c.questions[1].gold_sessions, vec!["session_2", "session_10"]);
        assert_eq!(c.questions[2].gold_sessions, vec!["session_2"]);
    }

    /// The real file, `../shared/data/locomo/locomo10.json` relative to the crate; skipped when absent.
    fn real_file() -> Option<std::path::PathBuf> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo10.json");
        if p.exists() {
            Some(p)
        } else {
            eprintln!("skipped: {} not found", p.display());
            None
        }
    }

    #[test]
    fn locomo10_paper_counts() {
        let Some(path) = real_file() else { return };
        let corpora = load(&path, GroundTruth::Paper).unwrap();
        assert_eq!(corpora.len(), 10);
        let qs: Vec<&EvalQuestion> = corpora.iter().flat_map(|c| &c.questions).collect();
        assert_eq!(qs.len(), 1986);
        assert_eq!(qs.iter().filter(|q| q.gold_sessions.is_empty()).count(), 8);
        // Exactly one gold id outside its corpus: "session_" from "D:11:26" (conv-43).
        let outside: Vec<(&str, &str)> = corpora
            .iter()
            .flat_map(|c| {
                let ids: HashSet<&str> = c.sessions.iter().map(|s| s.id.as_str()).collect();
                c.questions.iter().flat_map(move |q| {
                    q.gold_sessions
                        .iter()
                        .filter(|g| !ids.contains(g.as_str()))
                        .map(move |g| (c.id.as_str(), g.as_str()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        assert_eq!(outside, vec![("conv-43", "session_")]);
        // Per-category counts as in the data.
        let count = |cat: &str| qs.iter().filter(|q| q.category == cat).count();
        assert_eq!([count("1"), count("2"), count("3"), count("4"), count("5")], [282, 321, 96, 841, 446]);
        // conv-26 has 35 session date keys but only 19 dialog sessions.
        assert_eq!(corpora[0].id, "conv-26");
        assert_eq!(corpora[0].sessions.len(), 19);
        assert_eq!(corpora[0].sessions[18].id, "session_19");
        assert!(corpora.iter().flat_map(|c| &c.sessions).all(|s| !s.turns.is_empty() && !s.date.is_empty()));
    }

    #[test]
    fn locomo10_clean_counts() {
        let Some(path) = real_file() else { return };
        let corpora = load(&path, GroundTruth::Clean).unwrap();
        let qs: Vec<&EvalQuestion> = corpora.iter().flat_map(|c| &c.questions).collect();
        assert_eq!(qs.len(), 1982);
        assert!(qs.iter().all(|q| !q.gold_sessions.is_empty()));
        assert!(corpora.iter().all(|c| {
            let ids: HashSet<&str> = c.sessions.iter().map(|s| s.id.as_str()).collect();
            c.questions.iter().all(|q| q.gold_sessions.iter().all(|g| ids.contains(g.as_str())))
        }));
        // Every kept question has at least one evidence turn that exists.
        assert!(qs.iter().all(|q| !q.evidence.is_empty()));
    }
}
