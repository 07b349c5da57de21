//! Loaders of the retrieval benchmark, on a hand-written LongMemEval fixture.
#![cfg(not(target_arch = "wasm32"))]

use std::path::Path;

use loci::eval::longmemeval;
use loci::eval::report::{aggregate, QuestionResult};
use loci::eval::{EvalCorpus, GroundTruth};

fn fixture() -> Vec<EvalCorpus> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/longmemeval_small.json");
    longmemeval::load(&path, GroundTruth::Paper).expect("fixture loads")
}

#[test]
fn abstention_questions_are_excluded() {
    let corpora = fixture();
    let ids: Vec<&str> = corpora.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec!["e47becba", "gpt4_59c863d7", "8a2466db"]);
    assert!(corpora.iter().all(|c| c.questions.len() == 1 && c.questions[0].id == c.id));
}

#[test]
fn answer_prefix_is_stripped_in_corpus_and_gold() {
    let corpora = fixture();
    let c = &corpora[0];
    assert_eq!(c.session_ids(), vec!["sharegpt_yywfHz_0", "280352e9", "ultrachat_463321"]);
    let q = &c.questions[0];
    assert_eq!(q.gold_sessions, vec!["280352e9"]);
    assert_eq!(q.evidence, vec!["280352e9:1"]);
    assert_eq!(q.category, "single-session-user");
    assert_eq!(q.date.as_deref(), Some("2023/05/30 (Tue) 23:40"));
    assert_eq!(q.question, "What degree did I graduate with?");

    let s = &c.sessions[1];
    assert_eq!(s.date, "2023/05/21 (Sun) 10:02");
    assert_eq!(s.turns.len(), 3);
    assert_eq!(s.turns[0].speaker, "user");
    assert!(s.turns[0].has_answer);
    assert!(!s.turns[1].has_answer && !s.turns[2].has_answer);
    assert_eq!(s.turns[1].speaker, "assistant");
    assert_eq!(s.turns[2].dia_id, "280352e9:3");
    assert_eq!(
        s.paired_texts(),
        vec![
            "[user]: I graduated with a degree in Business Administration, what jobs fit?\n[assistant]: Consulting, management, marketing...",
            "[user]: Thanks!"
        ]
    );
}

#[test]
fn two_gold_sessions_deduplicated() {
    let corpora = fixture();
    let q = &corpora[1].questions[0];
    assert_eq!(q.category, "multi-session");
    assert_eq!(q.gold_sessions, vec!["4be1b6b4_1", "4be1b6b4_2"]);
    assert_eq!(q.evidence, vec!["4be1b6b4_1:1", "4be1b6b4_1:3", "4be1b6b4_2:1"]);
    assert_eq!(corpora[1].sessions.len(), 4);
    assert_eq!(corpora[1].sessions[3].turns.len(), 1);
}

#[test]
fn clean_ground_truth_keeps_questions_with_gold() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/longmemeval_small.json");
    let clean = longmemeval::load(&path, GroundTruth::Clean).unwrap();
    assert_eq!(clean.len(), 3);
}

#[test]
fn fixture_scores_through_the_report() {
    let corpora = fixture();
    // An oracle ranking: gold sessions first.
    let mut results = Vec::new();
    for c in &corpora {
        let q = &c.questions[0];
        let mut ranking: Vec<String> = q.gold_sessions.clone();
        ranking.extend(
            c.session_ids().into_iter().filter(|id| !q.gold_sessions.iter().any(|g| g == id)).map(String::from),
        );
        results.push(QuestionResult::new(q, ranking));
    }
    let report = aggregate(&results);
    assert_eq!(report.overall.n, 3);
    for key in ["recall_all@3", "recall_any@3", "ndcg_any@3", "ndcg_any@10"] {
        assert_eq!(report.overall.get(key), Some(100.0), "{key}");
    }
    assert_eq!(report.per_category.len(), 3);
}

#[test]
fn missing_file_is_an_error() {
    let err = longmemeval::load(Path::new("/nonexistent/lme.json"), GroundTruth::Paper).unwrap_err();
    assert!(err.contains("/nonexistent/lme.json"));
}
