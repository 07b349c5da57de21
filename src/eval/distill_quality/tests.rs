use super::*;
use crate::distill::FactStatus;
use crate::eval::locomo::Observation;
use crate::llm::ScriptedLlm;

/// 2023-05-08 13:56 UTC, a Monday.
const MAY_8: TimeMs = 1_683_554_160_000.0;
const DAY: TimeMs = 86_400_000.0;

fn turn(id: u64, dia_id: &str, session: &str, speaker: &str, text: &str, time: TimeMs) -> SourceTurn {
    SourceTurn {
        id,
        dia_id: dia_id.into(),
        session: session.into(),
        speaker: speaker.into(),
        text: text.into(),
        caption: None,
        time,
    }
}

fn episode(id: u64, narrative: &str, turn_ids: &[u64], start: TimeMs) -> Episode {
    Episode {
        id,
        title: format!("Episode {id}"),
        narrative: narrative.into(),
        time: start,
        start,
        end: start,
        turn_ids: turn_ids.to_vec(),
        merged_from: Vec::new(),
        ingested: start,
        vector: Vec::new(),
    }
}

fn fact(id: u64, statement: &str, episode: u64, turn_ids: &[u64], vector: [f32; 3]) -> Fact {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    Fact {
        id,
        statement: statement.into(),
        kind: "event".into(),
        time: MAY_8,
        ingested: MAY_8,
        episode_ids: vec![episode],
        turn_ids: turn_ids.to_vec(),
        status: FactStatus::Active,
        supersedes: Vec::new(),
        superseded_by: None,
        origin: "new".into(),
        vector: vector.iter().map(|x| x / norm).collect(),
    }
}

fn observation(statement: &str, evidence: &[&str]) -> Observation {
    Observation {
        speaker: "Caroline".into(),
        statement: statement.into(),
        evidence: evidence.iter().map(|e| e.to_string()).collect(),
    }
}

/// Two sessions: the first told as two episodes, the second as one; five facts, one of them invented, two the same
/// text, three near-identical vectors, one citing its whole episode.
struct Fixture {
    turns: Vec<SourceTurn>,
    episodes: Vec<Episode>,
    facts: Vec<Fact>,
    notes: Vec<SessionNotes>,
    observation_vectors: Vec<Vec<f32>>,
    qa_evidence: Vec<String>,
}

fn fixture() -> Fixture {
    let may_20 = MAY_8 + 12.0 * DAY;
    let turns = vec![
        turn(1, "D1:1", "session_1", "Caroline", "I went to the support group yesterday.", MAY_8),
        turn(2, "D1:2", "session_1", "Melanie", "Nice! We moved last year.", MAY_8),
        turn(3, "D1:3", "session_1", "Melanie", "My dog is called Rex.", MAY_8),
        turn(4, "D1:4", "session_1", "Caroline", "Cool.", MAY_8),
        turn(5, "D2:1", "session_2", "Caroline", "I adopted a cat two days ago.", may_20),
        turn(6, "D2:2", "session_2", "Melanie", "Great!", may_20),
    ];
    let episodes = vec![
        // "yesterday" resolved as 7 May 2023; "last year" (2022) not.
        episode(1, "Caroline went to a support group on May 7th, 2023. Melanie had moved.", &[1, 2], MAY_8),
        episode(2, "Melanie's dog is Rex.", &[3, 4], MAY_8),
        // Left relative.
        episode(3, "Caroline adopted a cat two days ago.", &[5, 6], may_20),
    ];
    let facts = vec![
        fact(1, "Caroline went to a support group.", 1, &[1], [1.0, 0.0, 0.0]),
        // The fallback: every turn of episode 1.
        fact(2, "Caroline attended a support group.", 1, &[1, 2], [1.0, 0.1, 0.0]),
        fact(3, "Melanie has a dog called Rex.", 2, &[3], [0.0, 1.0, 0.0]),
        fact(4, "Caroline flies rockets as an astronaut.", 3, &[5], [0.0, 0.0, 1.0]),
        fact(5, "caroline went to the support group!", 1, &[1], [1.0, 0.0, 0.05]),
    ];
    let unit = |v: [f32; 3]| {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    let notes = vec![
        SessionNotes {
            session: "session_1".into(),
            observations: vec![
                observation("Caroline attended a support group.", &["D1:1"]),
                observation("Melanie has a dog named Rex.", &["D1:3", "D1:4"]),
            ],
            events: vec!["Caroline goes to a support group.".into()],
        },
        SessionNotes {
            session: "session_2".into(),
            observations: vec![observation("Caroline adopted a cat.", &["D2:1"])],
            events: Vec::new(),
        },
    ];
    // The astronaut fact (0, 0, 1) is at cosine 0.58 of the cat observation: below the match threshold.
    let observation_vectors = vec![unit([1.0, 0.0, 0.0]), unit([0.0, 1.0, 0.0]), unit([1.0, 1.0, 1.0])];
    let qa_evidence = ["D1:1", "D1:2", "D1:4"].map(String::from).to_vec();
    Fixture { turns, episodes, facts, notes, observation_vectors, qa_evidence }
}

fn measured(f: &Fixture, verdicts: &[Option<bool>]) -> Quality {
    let d = Distilled {
        turns: &f.turns,
        episodes: &f.episodes,
        facts: &f.facts,
        notes: &f.notes,
        observation_vectors: &f.observation_vectors,
        qa_evidence: &f.qa_evidence,
    };
    measure(&d, verdicts)
}

#[test]
fn episodes_are_counted_per_session_beside_the_notes() {
    let q = measured(&fixture(), &[]);
    let seen: Vec<(&str, usize, usize, usize, usize)> =
        q.sessions.iter().map(|s| (s.session.as_str(), s.turns, s.episodes, s.observations, s.events)).collect();
    assert_eq!(seen, [("session_1", 4, 2, 2, 1), ("session_2", 2, 1, 1, 0)]);
    let row = |name: &str| q.rows().into_iter().find(|r| r.0 == name).map(|r| r.1).unwrap();
    assert_eq!(row("episodes per session"), "1.50");
    assert_eq!(row("sessions told as one episode"), "50% (1/2)");
    assert_eq!(row("turns in an episode"), "100% (6/6)");
    let mut f = fixture();
    f.episodes.pop(); // session 2's job parked
    let q = measured(&f, &[]);
    assert_eq!(q.turns_in_episodes, 4);
    assert!(q.dates.iter().any(|c| c.expression == "two days ago" && !c.in_an_episode && !c.resolved));
}

#[test]
fn a_relative_date_counts_as_resolved_only_when_its_episode_names_the_day() {
    let q = measured(&fixture(), &[]);
    let cases: Vec<(&str, &str, bool)> =
        q.dates.iter().map(|c| (c.expression.as_str(), c.means.as_str(), c.resolved)).collect();
    assert_eq!(
        cases,
        [("yesterday", "7 May 2023", true), ("last year", "2022", false), ("two days ago", "18 May 2023", false)]
    );
    assert!(q.dates.iter().all(|c| c.in_an_episode));
    assert_eq!(q.undated_in_narratives, 1, "episode 3 keeps 'two days ago' without a date");
}

#[test]
fn evidence_counts_whole_episode_citations_observations_contained_and_qa_turns_cited() {
    let q = measured(&fixture(), &[]);
    assert_eq!(q.facts, 5);
    assert_eq!(q.facts_citing_whole_episode, 1, "fact 2 cites both turns of episode 1");
    assert_eq!(q.facts_matched, 4, "the astronaut matches no observation");
    assert_eq!(q.facts_containing_evidence, 3, "fact 3 cites D1:3 but not D1:4");
    assert_eq!(q.facts_containing_evidence_specific, 2, "fact 2 contains it only by citing everything");
    assert_eq!((q.qa_evidence_turns, q.qa_evidence_cited, q.qa_evidence_cited_specific), (3, 2, 1));
}

#[test]
fn duplicates_by_cosine_and_by_normalised_text() {
    let q = measured(&fixture(), &[]);
    assert_eq!((q.facts_near_duplicate, q.near_duplicate_pairs), (3, 3), "facts 1, 2, 5");
    assert_eq!((q.facts_same_text, q.same_text_pairs), (2, 1), "facts 1 and 5");
}

#[test]
fn an_invented_fact_is_unsupported_by_overlap_and_the_verdicts_are_counted() {
    let q = measured(&fixture(), &[Some(true), Some(true), None, Some(false), Some(true)]);
    assert_eq!(q.unsupported_by_overlap, 1, "only the astronaut");
    assert_eq!((q.judged, q.unsupported_by_judge, q.judge_errors), (5, 1, 1));
    let row = |name: &str| q.rows().into_iter().find(|r| r.0 == name).map(|r| r.1).unwrap();
    assert_eq!(row("facts the judge calls unsupported"), "25% (1/4)");
}

#[test]
fn conversations_add_up() {
    let f = fixture();
    let one = measured(&f, &[Some(false)]);
    let mut both = one.clone();
    both.add(&one);
    assert_eq!(both.sessions.len(), 4);
    assert_eq!(both.dates.len(), 6);
    assert_eq!((both.facts, both.facts_matched, both.unsupported_by_judge), (10, 8, 2));
}

#[test]
fn overlap_is_the_share_of_content_words_the_lines_hold() {
    let lines = ["Caroline (8 May 2023): I went to the support group yesterday (7 May 2023).".to_string()];
    assert_eq!(overlap_support("Caroline went to a support group on 7 May 2023.", &lines), 1.0);
    // caroline, support, group of caroline, attend, support, group, weekly.
    assert!((overlap_support("Caroline attends a weekly support group", &lines) - 0.6).abs() < 1e-9);
    assert_eq!(overlap_support("Melanie paints lakes", &lines), 0.0);
    assert_eq!(overlap_support("It is.", &lines), 1.0, "nothing claimed");
}

#[test]
fn dates_are_read_in_the_ways_they_are_written() {
    let day = |y, m, d| DateMention::Day(days_from_civil(y, m, d));
    assert_eq!(date_mentions("on 7 May 2023"), [day(2023, 5, 7), DateMention::Year(2023)]);
    assert_eq!(date_mentions("the 7th of May, 2023"), [day(2023, 5, 7), DateMention::Year(2023)]);
    assert_eq!(date_mentions("May 7, 2023"), [day(2023, 5, 7), DateMention::Year(2023)]);
    assert_eq!(date_mentions("2023-05-07"), [DateMention::Year(2023), day(2023, 5, 7)]);
    assert_eq!(date_mentions("on Sept 3"), [DateMention::DayOfYear(9, 3)]);
    assert_eq!(date_mentions("in April 2023"), [DateMention::Month(2023, 4), DateMention::Year(2023)]);
    assert_eq!(date_mentions("she may go, 31 February 2023"), [DateMention::DayOfYear(2, 31), DateMention::Year(2023)]);
    assert!(date_mentions("she has 3 cats and 12 dogs").is_empty());
}

#[test]
fn a_period_is_named_by_a_date_inside_it_only() {
    let yesterday = Period::Day(days_from_civil(2023, 5, 7));
    assert!(names_period("Caroline went on 7 May 2023.", yesterday));
    assert!(names_period("She went on May 7.", yesterday));
    assert!(!names_period("She went on 8 May 2023.", yesterday));
    assert!(!names_period("She went in May 2023.", yesterday), "a month is not the day");
    let last_week = Period::Week(days_from_civil(2023, 5, 1));
    assert!(names_period("in the week of 1 May 2023", last_week));
    assert!(names_period("on 2023-05-04", last_week));
    assert!(!names_period("on 30 April 2023", last_week));
    let last_month = Period::Month(2023, 4);
    assert!(names_period("in April 2023", last_month));
    assert!(names_period("on 30 April 2023", last_month));
    assert!(!names_period("in April 2022", last_month));
    let last_year = Period::Year(2022);
    assert!(names_period("back in 2022", last_year));
    assert!(!names_period("in 2023", last_year));
}

#[test]
fn the_judge_is_shown_the_cited_lines_only_and_its_answer_is_read() {
    let f = fixture();
    let llm = ScriptedLlm::new([Ok(r#"{"supported": "NO"}"#.to_string()), Ok(r#"{"supported": "yes"}"#.into())]);
    let astronaut = &f.facts[3];
    assert!(!pollster::block_on(judge_support(&llm, astronaut, &f.turns)).unwrap());
    assert!(pollster::block_on(judge_support(&llm, &f.facts[0], &f.turns)).unwrap());
    let asked = &llm.requests.borrow()[0].messages[1].content;
    assert!(asked.contains("I adopted a cat two days ago (18 May 2023)."), "{asked}");
    assert!(asked.contains("Statement: Caroline flies rockets as an astronaut."), "{asked}");
    assert!(!asked.contains("support group"), "only the cited turn: {asked}");
}
