//! The pipeline over scripted replies and a deterministic bag-of-words embedder: carry-over across windows,
//! merges, supersede chains and forget cascades, each asserted on the resulting state.

use rustc_hash::FxHashMap;
use std::collections::HashSet;

use async_trait::async_trait;
use pollster::block_on;

use super::*;
use crate::error::Result;
use crate::llm::ScriptedLlm;
use crate::types::Turn;

/// Hashed bag of words, unit length: texts sharing words are similar.
struct Bow;

#[async_trait(?Send)]
impl TextEmbed for Bow {
    async fn embed_texts(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 64];
                for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
                    let h = w.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
                    v[(h % 64) as usize] += 1.0;
                }
                crate::embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

/// A queued job that has not run yet.
fn job(id: u64, work: JobKind) -> Job {
    Job { id, work, attempts: 0, rate_limited: 0, next_try: 0.0, parked: false, last_error: None, created: 0.0 }
}
fn turns(session: &str, first: u64, n: u64) -> Vec<Turn> {
    (0..n)
        .map(|i| Turn {
            id: first + i,
            session: session.into(),
            seq: i as u32,
            speaker: if i % 2 == 0 { "Ana" } else { "Ben" }.into(),
            text: format!("line {} of {session}", first + i),
            caption: None,
            time: 1_683_554_160_000.0 + (first + i) as f64 * 60_000.0,
            ingested: 0.0,
        })
        .collect()
}

struct Rig {
    state: DistillState,
    turns: FxHashMap<u64, Turn>,
    config: DistillConfig,
}

impl Rig {
    fn new(window: usize) -> Self {
        Rig {
            state: DistillState::default(),
            turns: FxHashMap::default(),
            config: DistillConfig { window, ..Default::default() },
        }
    }

    fn add(&mut self, ts: Vec<Turn>) {
        for t in ts {
            self.state.meta.pending.push(t.id);
            self.turns.insert(t.id, t);
        }
    }

    fn queue(&mut self, work: JobKind) {
        let id = self.state.meta.next_job;
        self.state.meta.next_job += 1;
        self.state.jobs.insert(id, job(id, work));
    }

    /// Runs the head job with `llm`; applies its write.
    fn step(&mut self, llm: &ScriptedLlm) -> Result<&'static str> {
        let job = self.state.next_job().cloned().expect("a queued job");
        let input = JobInput {
            state: &self.state,
            turns: &self.turns,
            llm,
            config: &self.config,
            now: 5.0,
            abort: None,
            count: &|s: &str| s.len() / 4,
            attempts: job.attempts,
            screen_memory: true,
        };
        let w = block_on(run_job(&job, &input, &mut Bow, &mut Spend::default()))?;
        self.state.apply(&w);
        Ok(job.work.name())
    }
}

fn ok(v: serde_json::Value) -> Result<String> {
    Ok(v.to_string())
}

#[test]
fn windows_carry_left_out_turns_over_until_the_session_ends() {
    let mut rig = Rig::new(4);
    rig.add(turns("a", 1, 6));
    rig.queue(JobKind::Segment { session: "a".into(), last: false });
    // Window = turns 1..=4. The model leaves out index 1 (turn 2) and repeats index 0; its last group [2, 3]
    // ends the window, so it is held back.
    let llm = ScriptedLlm::new([
        ok(serde_json::json!({"groups": [[0, 0], [2, 3]]})),
        ok(
            serde_json::json!({"episodes": [{"group": 1, "title": "Start", "narrative": "Ana starts.", "date": "2023-05-08"}]}),
        ),
    ]);
    assert_eq!(rig.step(&llm).unwrap(), "segment");
    assert_eq!(rig.state.meta.pending, vec![2, 3, 4, 5, 6], "nothing dropped: 2 left out, 3-4 held back");
    assert_eq!(rig.step(&llm).unwrap(), "narrate");
    assert_eq!(rig.state.episodes.values().map(|e| e.turn_ids.clone()).collect::<Vec<_>>(), vec![vec![1]]);

    // The session ends: its last window takes all five buffered turns; the model forgets index 4 and names
    // an index out of range; every turn still ends in an episode.
    rig.state.jobs.clear();
    rig.queue(JobKind::Segment { session: "a".into(), last: true });
    let llm = ScriptedLlm::new([
        ok(serde_json::json!({"groups": [[0, 1, 2], [3, 9]]})),
        ok(serde_json::json!({"episodes": [
            {"group": 1, "title": "Middle", "narrative": "Ben answers.", "date": "2023-05-10"},
            {"group": 2, "title": "End", "narrative": "They part.", "date": "2023-05-01"}]})),
    ]);
    rig.step(&llm).unwrap();
    assert!(rig.state.meta.pending.is_empty());
    rig.step(&llm).unwrap();
    let covered = rig.state.covered_turns();
    assert_eq!(covered, (1..=6).collect::<HashSet<u64>>(), "every turn belongs to an episode");
    let end = rig.state.episodes.values().find(|e| e.title == "End").unwrap();
    assert_eq!(end.turn_ids, vec![5, 6]);
    assert_eq!(end.time, 1_682_899_200_000.0, "the narrator's date: a story of the week before");
    let middle = rig.state.episodes.values().find(|e| e.title == "Middle").unwrap();
    assert_eq!(
        (middle.turn_ids.clone(), middle.time),
        (vec![2, 3, 4], middle.start),
        "a date after the day the lines were said is a guess: the episode is dated by its first line"
    );
    assert_eq!(middle.start, 1_683_554_280_000.0);
    assert!(matches!(rig.state.next_job().map(|j| &j.work), Some(JobKind::Distill { .. })));
}

#[test]
fn groups_beyond_what_one_reply_holds_are_narrated_in_further_calls() {
    let mut rig = Rig::new(20);
    for t in turns("a", 1, 12) {
        rig.turns.insert(t.id, t);
    }
    rig.queue(JobKind::Narrate { groups: (1..=12).map(|id| vec![id]).collect() });
    let told = |n: usize| {
        let episodes: Vec<serde_json::Value> = (1..=n)
            .map(|g| serde_json::json!({"group": g, "title": format!("T{g}"), "narrative": "Told.", "date": ""}))
            .collect();
        ok(serde_json::json!({ "episodes": episodes }))
    };
    // The default window (4,096 tokens) leaves a reply 1,024: 4 groups at 200 tokens each, then 4, then 4.
    let llm = ScriptedLlm::new([told(4), told(4), told(4)]);
    assert_eq!(rig.step(&llm).unwrap(), "narrate");
    let requests = llm.requests.borrow();
    assert_eq!(requests.len(), 3);
    let first = &requests[0].messages[1].content;
    assert!(first.contains("## Group 4\n") && !first.contains("## Group 5"), "{first}");
    assert!(requests.iter().all(|r| r.max_tokens == Some(900)));
    assert_eq!(rig.state.episodes.len(), 12, "every group narrated");
    let last = rig.state.episodes.values().find(|e| e.turn_ids == [12]).unwrap();
    assert_eq!(last.title, "T4", "the third call's group 4 is the job's group 12");
}

#[test]
fn a_partition_naming_no_turn_fails_the_job_without_changing_anything() {
    let mut rig = Rig::new(4);
    rig.add(turns("a", 1, 4));
    rig.queue(JobKind::Segment { session: "a".into(), last: true });
    let before = rig.state.meta.clone();
    let llm = ScriptedLlm::new([ok(serde_json::json!({"groups": [[7], []]}))]);
    assert_eq!(rig.step(&llm).unwrap_err().code(), "LLM_BAD_REPLY");
    assert_eq!(rig.state.meta, before);
    assert_eq!(rig.state.jobs.len(), 1, "the job stays queued for a retry");
}

/// Distills one episode made of `turn` with the given fact reply and consolidation reply (if asked).
fn distill_once(rig: &mut Rig, episode: u64, turn: u64, facts: serde_json::Value, decide: Option<serde_json::Value>) {
    let mut replies = vec![ok(facts)];
    replies.extend(decide.map(ok));
    let llm = ScriptedLlm::new(replies);
    rig.queue(JobKind::Distill { items: vec![DistillItem { episode, turn_ids: vec![turn] }] });
    rig.step(&llm).unwrap();
    assert_eq!(llm.remaining(), 0, "every scripted reply used");
}

fn rig_with_episodes() -> Rig {
    let mut rig = Rig::new(20);
    for t in turns("a", 1, 4) {
        rig.turns.insert(t.id, t);
    }
    for id in 1..=3u64 {
        let v = block_on(Bow.embed_texts(&[format!("unrelated topic {id} zzz{id}")])).unwrap().remove(0);
        rig.state.episodes.insert(
            id,
            Episode {
                id,
                title: format!("E{id}"),
                narrative: "n".into(),
                time: id as f64,
                start: 0.0,
                end: 0.0,
                turn_ids: vec![id],
                merged_from: vec![],
                ingested: 0.0,
                vector: v,
            },
        );
    }
    rig.state.meta.next_episode = 4;
    rig
}

#[test]
fn conflicts_and_merges_supersede_old_facts_into_a_history_chain() {
    let mut rig = rig_with_episodes();
    distill_once(
        &mut rig,
        1,
        1,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "Ana lives in Bern city"}]}),
        None,
    );
    // A near fact: consolidation is asked, and says CONFLICT with F1.
    distill_once(
        &mut rig,
        2,
        2,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "Ana lives in Basel city"}]}),
        Some(
            serde_json::json!({"decisions": [{"fact": 1, "action": "CONFLICT", "targets": ["F1", "F99"], "statement": ""}]}),
        ),
    );
    // Then a MERGE with F2 that combines both statements.
    distill_once(
        &mut rig,
        3,
        3,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "Ana lives in Basel city centre"}]}),
        Some(
            serde_json::json!({"decisions": [{"fact": 1, "action": "MERGE", "targets": ["F2"], "statement": "Ana lives in Basel city centre since May"}]}),
        ),
    );
    let f = &rig.state.facts;
    assert_eq!(f.len(), 3, "nothing erased");
    assert_eq!((f[&1].status, f[&1].superseded_by), (FactStatus::Superseded, Some(2)));
    assert_eq!(
        (f[&2].status, f[&2].superseded_by, f[&2].supersedes.clone()),
        (FactStatus::Superseded, Some(3), vec![1])
    );
    assert_eq!(f[&3].status, FactStatus::Active);
    assert_eq!(f[&3].statement, "Ana lives in Basel city centre since May");
    assert_eq!((f[&3].origin.as_str(), f[&2].origin.as_str()), ("merge", "conflict"));
    assert_eq!(f[&3].episode_ids, vec![2, 3], "a merge unions provenance");
    assert_eq!(f[&3].turn_ids, vec![2, 3], "a merge unions the cited lines");
    assert_eq!(f[&2].time, 2.0, "event time from the episode");
    for id in [1, 2, 3] {
        assert_eq!(rig.state.history(id).iter().map(|x| x.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
    assert!(rig.state.history(42).is_empty());
}

#[test]
fn a_fact_per_line_cites_its_own_line_and_empty_lines_state_nothing() {
    let mut rig = rig_with_episodes();
    let llm = ScriptedLlm::new([ok(serde_json::json!({"facts": [
        {"line": "1.1", "statement": ""},
        {"line": "1.2", "statement": "Ben keeps bees"},
        {"line": "2.1", "statement": "Ana rows on Sundays"},
        {"line": "2.2", "statement": "  "},
        {"line": "7.1", "statement": "a line no episode has"},
    ]}))]);
    rig.queue(JobKind::Distill {
        items: vec![DistillItem { episode: 1, turn_ids: vec![1, 2] }, DistillItem { episode: 2, turn_ids: vec![3, 4] }],
    });
    rig.step(&llm).unwrap();
    assert_eq!(llm.remaining(), 0, "no consolidation: the two facts share no words");
    let requests = llm.requests.borrow();
    let schema = &requests[0].json_schema.as_ref().expect("a schema").schema;
    let lines: Vec<&str> = schema["properties"]["facts"]["prefixItems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["properties"]["line"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(lines, ["1.1", "1.2", "2.1", "2.2"], "one entry per line, in the prompt's order");
    let mut facts: Vec<(&str, &[u64], &[u64])> = rig
        .state
        .facts
        .values()
        .map(|f| (f.statement.as_str(), f.episode_ids.as_slice(), f.turn_ids.as_slice()))
        .collect();
    facts.sort();
    assert_eq!(facts, [("Ana rows on Sundays", &[2][..], &[3][..]), ("Ben keeps bees", &[1][..], &[2][..])]);
}

#[test]
fn prediction_runs_when_facts_are_evoked_and_sees_them() {
    let mut rig = rig_with_episodes();
    distill_once(
        &mut rig,
        1,
        1,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "unrelated topic 2 zzz2"}]}),
        None,
    );
    // Episode 2's vector equals that fact's (same words): it is evoked, so predict runs before distill.
    let llm = ScriptedLlm::new([
        ok(serde_json::json!({"predictions": [{"episode": 1, "prediction": "They talk about topic 2."}]})),
        ok(serde_json::json!({"facts": []})),
    ]);
    rig.queue(JobKind::Distill { items: vec![DistillItem { episode: 2, turn_ids: vec![2] }] });
    rig.step(&llm).unwrap();
    let requests = llm.requests.borrow();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].messages[1].content.contains("- unrelated topic 2 zzz2"));
    assert!(requests[1].messages[1].content.contains("Prediction: They talk about topic 2."));
    assert_eq!(rig.state.facts.len(), 1);
}

fn fact(id: u64, episodes: Vec<u64>, turns: Vec<u64>) -> Fact {
    Fact {
        id,
        statement: format!("fact {id}"),
        kind: "fact".into(),
        time: 0.0,
        ingested: id as f64,
        episode_ids: episodes,
        turn_ids: turns,
        status: FactStatus::Active,
        supersedes: vec![],
        superseded_by: None,
        origin: "new".into(),
        vector: vec![],
    }
}

fn forget_rig() -> DistillState {
    let mut s = DistillState::default();
    let ep = |id: u64, turns: Vec<u64>| Episode {
        id,
        title: String::new(),
        narrative: String::new(),
        time: 0.0,
        start: 0.0,
        end: 0.0,
        turn_ids: turns,
        merged_from: vec![],
        ingested: 0.0,
        vector: vec![],
    };
    // Session a = turns 1, 2; session b = turns 3, 4, 5. E3 was merged across both.
    s.episodes.insert(1, ep(1, vec![1]));
    s.episodes.insert(2, ep(2, vec![3, 4]));
    s.episodes.insert(3, ep(3, vec![2, 5]));
    s.facts.insert(1, fact(1, vec![1], vec![1]));
    s.facts.insert(2, fact(2, vec![2], vec![3]));
    s.facts.insert(3, fact(3, vec![3], vec![2, 5]));
    let mut f4 = fact(4, vec![2], vec![4]);
    f4.supersedes = vec![1];
    s.facts.get_mut(&1).unwrap().status = FactStatus::Superseded;
    s.facts.get_mut(&1).unwrap().superseded_by = Some(4);
    s.facts.insert(4, f4);
    let items = vec![DistillItem { episode: 1, turn_ids: vec![1] }, DistillItem { episode: 2, turn_ids: vec![3] }];
    s.jobs.insert(9, job(9, JobKind::Distill { items }));
    s
}

#[test]
fn forgetting_a_session_removes_what_was_distilled_only_from_it() {
    let mut s = forget_rig();
    let w = s.forget_turns(&HashSet::from([1, 2]));
    s.apply(&w);
    assert_eq!(s.episodes.keys().copied().collect::<Vec<_>>(), vec![2], "E1 (only a) and E3 (tells a's text) go");
    assert_eq!(s.meta.pending, vec![5], "E3's other turn is distilled again");
    assert!(!s.facts.contains_key(&1), "evidence only in a");
    assert_eq!(s.facts[&3].turn_ids, vec![5], "also supported by b: kept, trimmed");
    assert!(s.facts[&3].episode_ids.is_empty());
    assert!(s.facts[&4].supersedes.is_empty(), "no dangling link to the erased fact");
    match &s.jobs[&9].work {
        JobKind::Distill { items } => assert_eq!(items, &vec![DistillItem { episode: 2, turn_ids: vec![3] }]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn forgetting_an_episode_or_a_fact_cuts_links_and_keeps_the_rest() {
    let mut s = forget_rig();
    let w = s.forget_episode(2);
    s.apply(&w);
    assert!(!s.episodes.contains_key(&2));
    assert!(!s.facts.contains_key(&2) && !s.facts.contains_key(&4), "facts only from E2 go");
    assert_eq!(s.facts[&1].superseded_by, None, "link to the erased F4 cut");
    assert_eq!(s.facts.len(), 2);

    let mut s = forget_rig();
    let w = s.forget_fact(1);
    s.apply(&w);
    assert!(!s.facts.contains_key(&1));
    assert!(s.facts[&4].supersedes.is_empty());
    assert_eq!(s.history(4).len(), 1);
    assert!(s.forget_fact(77).is_empty());
}

#[test]
fn a_reply_that_restates_one_fact_is_consolidated_within_its_batch() {
    let mut rig = rig_with_episodes();
    // One distillation reply with the same fact twice (as a small model writes it): the second is offered the first
    // as a candidate, and the MERGE leaves one active fact, the first superseded by it, nothing erased.
    distill_once(
        &mut rig,
        1,
        1,
        serde_json::json!({"facts": [
            {"line": "1.1", "statement": "Ana lives in Bern city"},
            {"line": "1.1", "statement": "Ana lives in Bern city now"},
        ]}),
        Some(
            serde_json::json!({"decisions": [{"fact": 1, "action": "MERGE", "targets": ["F1"], "statement": "Ana lives in Bern city"}]}),
        ),
    );
    let f = &rig.state.facts;
    assert_eq!(f.len(), 2, "nothing erased");
    let (first, second) = (&f[&1], &f[&2]);
    assert_eq!((first.status, first.superseded_by), (FactStatus::Superseded, Some(2)));
    assert_eq!(
        (second.status, second.supersedes.clone(), second.origin.as_str()),
        (FactStatus::Active, vec![1], "merge")
    );
    assert_eq!(rig.state.active_facts().count(), 1);
}

#[test]
fn groups_a_reply_left_out_are_narrated_on_their_own() {
    let mut rig = Rig::new(4);
    rig.add(turns("a", 1, 4));
    rig.queue(JobKind::Narrate { groups: vec![vec![1, 2], vec![3, 4]] });
    // A reply cut at the cap after the first group (the repaired reply has one entry), then the second group
    // asked for alone, as group 1 of that call.
    let llm = ScriptedLlm::new([
        ok(serde_json::json!({"episodes": [{"group": 1, "title": "Start", "narrative": "Ana starts.", "date": ""}]})),
        ok(serde_json::json!({"episodes": [{"group": 1, "title": "End", "narrative": "Ben ends.", "date": ""}]})),
    ]);
    assert_eq!(rig.step(&llm).unwrap(), "narrate");
    assert_eq!(llm.remaining(), 0);
    let mut episodes: Vec<(String, Vec<u64>)> =
        rig.state.episodes.values().map(|e| (e.title.clone(), e.turn_ids.clone())).collect();
    episodes.sort();
    assert_eq!(episodes, vec![("End".into(), vec![3, 4]), ("Start".into(), vec![1, 2])]);
    let asked = llm.requests.borrow();
    let second: String = asked[1].messages.iter().map(|m| m.content.as_str()).collect();
    assert!(second.contains("line 3 of a") && second.contains("[1.1]") && !second.contains("line 1 of a"), "{second}");
    assert!(!second.contains("Group 2"), "only the group left is asked for: {second}");
    assert!(asked[1].max_tokens < asked[0].max_tokens, "its cap is for its own lines");
    drop(asked);

    // A second call that narrates nothing either fails the job, which changes nothing.
    let mut rig = Rig::new(4);
    rig.add(turns("a", 1, 4));
    rig.queue(JobKind::Narrate { groups: vec![vec![1, 2], vec![3, 4]] });
    let before = rig.state.meta.clone();
    let llm = ScriptedLlm::new([
        ok(serde_json::json!({"episodes": [{"group": 1, "title": "Start", "narrative": "Ana starts.", "date": ""}]})),
        ok(serde_json::json!({"episodes": [{"group": 1, "title": "End", "narrative": " ", "date": ""}]})),
    ]);
    let e = rig.step(&llm).unwrap_err();
    assert_eq!((e.code(), e.to_string().contains("no narrative for group 2 of 2")), ("LLM_BAD_REPLY", true), "{e}");
    assert_eq!((&rig.state.meta, rig.state.episodes.len(), rig.state.jobs.len()), (&before, 0, 1));
}

#[test]
fn a_retried_job_asks_for_a_warmer_reply() {
    let mut temperatures = Vec::new();
    for attempts in [0, 1, 2, 5] {
        let mut rig = Rig::new(4);
        rig.add(turns("a", 1, 2));
        rig.queue(JobKind::Narrate { groups: vec![vec![1, 2]] });
        rig.state.jobs.values_mut().for_each(|j| j.attempts = attempts);
        let llm = ScriptedLlm::new([ok(
            serde_json::json!({"episodes": [{"group": 1, "title": "T", "narrative": "Ana starts.", "date": ""}]}),
        )]);
        rig.step(&llm).unwrap();
        temperatures.push(llm.requests.borrow()[0].temperature);
    }
    assert_eq!(temperatures, [Some(0.0), Some(0.3), Some(0.6), Some(0.9)]);
}

#[test]
fn a_merge_far_longer_than_what_it_merges_leaves_the_fact_new() {
    let mut rig = rig_with_episodes();
    let first = serde_json::json!({"facts": [{"line": "1.1", "statement": "Maya runs with a club on Sundays"}]});
    distill_once(&mut rig, 1, 1, first, None);
    // What qwen2.5-0.5b wrote as a merged statement: its reasoning, not a combination of the two facts.
    let rambling = "Maya runs with a club on Sundays, the Riverside Runners. This is a direct and accurate update to the existing \
                    information. The new fact provides additional context and detail about the club. The targets \
                    are the ids of the existing facts, which are 1.";
    distill_once(
        &mut rig,
        2,
        2,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "Maya runs with a club on Sundays, the Riverside Runners"}]}),
        Some(
            serde_json::json!({"decisions": [{"fact": 1, "action": "MERGE", "targets": ["F1"], "statement": rambling}]}),
        ),
    );
    let f = &rig.state.facts;
    assert_eq!((f[&1].status, f[&2].status), (FactStatus::Active, FactStatus::Active), "nothing superseded");
    assert_eq!(
        (f[&2].statement.as_str(), f[&2].supersedes.len()),
        ("Maya runs with a club on Sundays, the Riverside Runners", 0)
    );
    // A combination as long as its parts (and some joining words) is a merge.
    distill_once(
        &mut rig,
        3,
        3,
        serde_json::json!({"facts": [{"line": "1.1", "statement": "Maya runs with a club on Sundays at 8 am"}]}),
        Some(serde_json::json!({"decisions": [{"fact": 1, "action": "MERGE", "targets": ["F2"],
            "statement": "Maya runs with a club on Sundays at 8 am, the Riverside Runners"}]})),
    );
    let f = &rig.state.facts;
    assert_eq!((f[&2].status, f[&3].supersedes.clone()), (FactStatus::Superseded, vec![2]));
}
