//! One job's work: LLM calls and embeddings in, one [`DistillWrite`] out. Nothing here mutates state, so a job
//! that fails half-way (an outage, a bad reply) leaves nothing behind and can simply run again; given the same
//! state and the same replies it produces the same write, which is what makes retries and reopen invisible.

use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, HashMap};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::model::{DistillItem, DistillState, DistillWrite, Episode, Fact, FactStatus, Job, JobKind};
use super::{cosine, segment, DistillConfig, TextEmbed};
use crate::error::{Error, Result};
use crate::llm::fit::{cap_text, chat_json_fitted, input_budget, prompt_tokens, reply_limit, Count};
use crate::llm::prompts::distill as p;
use crate::llm::structured::Structured;
use crate::llm::{AbortSignal, ChatMessage, JsonSchema, Llm, LlmRequest, PhaseCounters};
use crate::sort;
use crate::types::{format_time, parse_time, TimeInput, TimeMs, Turn};

/// The LLM steps, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Segment,
    Narrate,
    Merge,
    Predict,
    Distill,
    Consolidate,
}

/// LLM use of one job, per phase, including calls of a job that then failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spend {
    pub calls: Vec<(Phase, PhaseCounters)>,
    /// The phase whose call failed, if one did.
    pub failed: Option<Phase>,
}

impl Spend {
    fn add<T>(&mut self, phase: Phase, s: &Structured<T>) {
        self.calls.push((phase, PhaseCounters::of(s)));
    }
}

/// What a job needs to read.
pub struct JobInput<'a> {
    pub state: &'a DistillState,
    pub turns: &'a FxHashMap<u64, Turn>,
    pub llm: &'a dyn Llm,
    pub config: &'a DistillConfig,
    pub now: TimeMs,
    /// Cancels the job's LLM calls (closing the memory, or the caller's signal).
    pub abort: Option<AbortSignal>,
    /// Counts tokens, to fit prompts to the LLM's window.
    pub count: Count<'a>,
    /// How often the job failed before: a retry asks for a warmer reply (see [`retry_temperature`]).
    pub attempts: u32,
    /// Whether turns that instruct an AI are withheld from the prompts (`MemoryConfig::screen_memory`).
    pub screen_memory: bool,
}

/// The temperature of a job's calls after `attempts` failures. At temperature 0 a model (a local one serving its
/// prompt cache) gives the same reply to the same prompt, so a job whose reply did not parse would fail the same way
/// on every retry until it is parked (qwen2.5-1.5b did so 5 times over). A retry samples instead: 0.3, 0.6, then 0.9.
pub fn retry_temperature(attempts: u32) -> f32 {
    (0.3 * attempts.min(3) as f32).min(0.9)
}

/// Runs `job` and returns its whole effect: the job deleted, follow-up jobs queued, records written.
pub async fn run_job(
    job: &Job,
    input: &JobInput<'_>,
    embed: &mut dyn TextEmbed,
    spend: &mut Spend,
) -> Result<DistillWrite> {
    let mut w = match &job.work {
        JobKind::Segment { session, last } => segment_job(session, *last, input, spend).await?,
        JobKind::Narrate { groups } => narrate_job(groups, input, embed, spend).await?,
        JobKind::Distill { items } => distill_job(items, input, embed, spend).await?,
    };
    w.delete_jobs.push(job.id);
    Ok(w)
}

/// One step's call: the prompt `build(cap)` (quoted texts cut to `cap` characters) sized to the LLM's window,
/// with an output cap fit for what the step asks (`max_output`, or the user's lower `maxTokens`).
async fn call<T: DeserializeOwned>(
    phase: Phase,
    build: &dyn Fn(usize) -> Vec<ChatMessage>,
    schema: JsonSchema,
    max_output: u32,
    input: &JobInput<'_>,
    spend: &mut Spend,
) -> Result<T> {
    let max_output = input.config.max_tokens.map_or(max_output, |m| m.min(max_output));
    // Free text (narratives, predictions, statements): a small model at temperature 0 can loop on one sentence
    // until its cap.
    let free_text = matches!(phase, Phase::Narrate | Phase::Merge | Phase::Predict | Phase::Distill);
    let request = LlmRequest {
        json_schema: Some(schema),
        max_tokens: Some(max_output),
        frequency_penalty: free_text.then_some(0.3),
        temperature: Some(retry_temperature(input.attempts)),
        abort: input.abort.clone(),
        ..LlmRequest::new(Vec::new())
    };
    match chat_json_fitted::<T>(input.llm, &request, build, input.count).await {
        Ok(s) => {
            spend.add(phase, &s);
            Ok(s.value)
        }
        Err(e) => {
            spend.failed = Some(phase);
            Err(e)
        }
    }
}

fn bad(msg: String) -> Error {
    Error::LlmBadReply(msg)
}

/// A fresh job with the next id.
pub(crate) fn new_job(meta_next: &mut u64, work: JobKind, now: TimeMs) -> Job {
    let id = *meta_next;
    *meta_next += 1;
    Job { id, work, attempts: 0, rate_limited: 0, next_try: now, parked: false, last_error: None, created: now }
}

/// The most any step's reply may take, in tokens.
const MAX_OUTPUT: u32 = 2_048;

/// A narrated group's reply at most: its title and narrative at the schema's caps (~4 characters a token) and its
/// keys and date (~25 tokens): 200.
const NARRATE_GROUP_TOKENS: u32 = ((p::NARRATE_TITLE_CHARS + p::NARRATE_NARRATIVE_CHARS) / 4 + 25) as u32;

/// A distilled line's entry at most: its statement at the schema's cap and its keys and label (~14 tokens): 64.
const DISTILL_LINE_TOKENS: u32 = (p::FACT_CHARS / 4 + 14) as u32;

/// Output caps per step, in tokens: what the reply's JSON needs with room to spare (a small model that rambles
/// stops here rather than at 4,000 tokens, minutes later).
fn output_cap(per_item: u32, items: usize) -> u32 {
    (100 + per_item * items as u32).min(MAX_OUTPUT)
}

/// Lines with their texts cut to `cap` characters (see [`crate::llm::fit`]).
fn capped(lines: &[p::Line], cap: usize) -> Vec<p::Line> {
    lines
        .iter()
        .map(|l| p::Line {
            text: cap_text(&l.text, cap).into_owned(),
            caption: l.caption.as_deref().map(|c| cap_text(c, cap).into_owned()),
            ..l.clone()
        })
        .collect()
}

/// A turn as a prompt line; its relative time expressions carry their dates (what narration must write).
fn line(label: String, t: &Turn, screen_memory: bool) -> p::Line {
    p::Line {
        label,
        date: format_time(t.time),
        speaker: t.speaker.clone(),
        text: crate::text::prompt_text(&t.text, t.time, screen_memory),
        caption: t.caption.clone(),
    }
}

fn turns_of<'a>(ids: &[u64], turns: &'a FxHashMap<u64, Turn>) -> Vec<&'a Turn> {
    ids.iter().filter_map(|id| turns.get(id)).collect()
}

async fn segment_job(session: &str, last: bool, input: &JobInput<'_>, spend: &mut Spend) -> Result<DistillWrite> {
    let config = input.config;
    let mut meta = input.state.meta.clone();
    let mine: Vec<u64> =
        meta.pending.iter().copied().filter(|id| input.turns.get(id).is_some_and(|t| t.session == session)).collect();
    // A flush or the session's end already asked for its last window: take it now rather than 20 turns first.
    let last = last
        || input
            .state
            .jobs
            .values()
            .any(|j| matches!(&j.work, JobKind::Segment { session: s, last: true } if s == session));
    let mut w = DistillWrite::default();
    if mine.is_empty() || (!last && mine.len() < config.window) {
        return Ok(w); // nothing (left) to do: an earlier window took it
    }
    let (mut take, mut final_window) =
        if last && mine.len() <= config.last_window() { (mine.len(), true) } else { (config.window, false) };
    let lines: Vec<p::Line> = turns_of(&mine[..take], input.turns)
        .into_iter()
        .enumerate()
        .map(|(i, t)| line(i.to_string(), t, input.screen_memory))
        .collect();
    // Fewer turns when the window does not fit the model whole (long messages): at least two; a single turn that
    // is still too long is cut in the prompt.
    let segment_cap = |n: usize| output_cap(8, n);
    let budget = input_budget(input.llm.context_tokens(), segment_cap(take));
    while take > 2 && prompt_tokens(&p::segment(&lines[..take]), input.count) > budget {
        take = (take * 3 / 4).max(2);
        final_window = false;
    }
    let (window, lines) = (&mine[..take], &lines[..take]);
    let build = |cap| p::segment(&capped(lines, cap));
    let reply: p::SegmentReply =
        call(Phase::Segment, &build, p::segment_schema(), segment_cap(take), input, spend).await?;
    let plan = segment::plan(&reply.groups, window.len(), final_window).map_err(bad)?;
    let consumed: BTreeSet<u64> = crate::sort::set_from(plan.groups.iter().flatten().map(|&i| window[i]));
    meta.pending.retain(|id| !consumed.contains(id));
    let groups: Vec<Vec<u64>> = plan.groups.iter().map(|g| g.iter().map(|&i| window[i]).collect()).collect();
    let mut jobs = vec![new_job(&mut meta.next_job, JobKind::Narrate { groups }, input.now)];
    let left = mine.len() - consumed.len();
    if left > 0 && (last || left >= config.window) {
        jobs.push(new_job(&mut meta.next_job, JobKind::Segment { session: session.into(), last }, input.now));
    }
    w.jobs = jobs;
    w.meta = Some(meta);
    Ok(w)
}

/// `YYYY-MM-DD` from the model → epoch ms, else `start`. A date after the day the episode's last line was said
/// (`end`) is a guess, not an event told of: qwen2.5-coder-0.5b dated the groups of one conversation a day apart,
/// each after the last (2023-06-10, -11, -12, … for lines of 2023-06-09).
fn event_time(date: &str, start: TimeMs, end: TimeMs) -> TimeMs {
    const DAY_MS: f64 = 86_400_000.0;
    let d = date.trim();
    let d = d.get(..10).filter(|_| d.len() >= 10).unwrap_or(d);
    let last_day = (end / DAY_MS).floor() * DAY_MS;
    parse_time(&TimeInput::Text(d.into())).ok().filter(|&t| t < last_day + DAY_MS).unwrap_or(start)
}

fn nearest<'a, T>(v: &[f32], items: impl Iterator<Item = (&'a [f32], T)>, k: usize, floor: f32) -> Vec<(f32, T)> {
    let mut scored: Vec<(f32, T)> = items.map(|(x, t)| (cosine(v, x), t)).filter(|(s, _)| *s >= floor).collect();
    sort::sort_by(&mut scored, |a, b| b.0.total_cmp(&a.0));
    scored.truncate(k);
    scored
}

async fn narrate_job(
    groups: &[Vec<u64>],
    input: &JobInput<'_>,
    embed: &mut dyn TextEmbed,
    spend: &mut Spend,
) -> Result<DistillWrite> {
    let (config, state, now) = (input.config, input.state, input.now);
    let groups: Vec<Vec<&Turn>> = groups.iter().map(|g| turns_of(g, input.turns)).filter(|g| !g.is_empty()).collect();
    let mut meta = state.meta.clone();
    let mut w = DistillWrite::default();
    if groups.is_empty() {
        return Ok(w);
    }
    // A reply may narrate only the first groups: a small model that writes at length spends the output cap on
    // them, and the repaired reply ends there (qwen2.5-1.5b on the demo's sample: the same cut reply on every
    // retry, at temperature 0, until the job was parked). The groups left are asked for again, on their own, so
    // each call has its whole cap for fewer lines; a call that narrates none of them fails the job as before.
    let mut narrated: Vec<Option<p::Narrated>> = vec![None; groups.len()];
    loop {
        let missing: Vec<usize> = (0..groups.len()).filter(|&g| narrated[g].is_none()).collect();
        if missing.is_empty() {
            break;
        }
        // Numbered as asked (1, 2, … of this call), so that the labels and the reply's groups agree.
        let mut prompt_groups: Vec<Vec<p::Line>> = missing
            .iter()
            .enumerate()
            .map(|(k, &g)| {
                groups[g]
                    .iter()
                    .enumerate()
                    .map(|(n, t)| line(format!("{}.{}", k + 1, n + 1), t, input.screen_memory))
                    .collect()
            })
            .collect();
        // Room for each group's title and narrative at their schema caps, so that a reply the grammar bounds always
        // ends: as many groups as the reply limit holds, the rest in the next call (one call for a session's 11
        // groups got 1,024 tokens, a 4,096-token window's reply limit, and was cut every time). A prompt too long for
        // the window is cut by `call`, as before.
        let reply = reply_limit(input.llm.context_tokens()).min(MAX_OUTPUT);
        let take = prompt_groups.len().min((reply.saturating_sub(100) / NARRATE_GROUP_TOKENS).max(1) as usize);
        prompt_groups.truncate(take);
        let missing = &missing[..take];
        let build = |cap| p::narrate(&prompt_groups.iter().map(|g| capped(g, cap)).collect::<Vec<_>>());
        let max_output = output_cap(NARRATE_GROUP_TOKENS, prompt_groups.len());
        let reply: p::NarrateReply =
            call(Phase::Narrate, &build, p::narrate_schema(prompt_groups.len()), max_output, input, spend).await?;
        let mut progress = false;
        for (k, &g) in missing.iter().enumerate() {
            if let Some(n) = reply.episodes.iter().find(|e| e.group == k + 1 && !e.narrative.trim().is_empty()) {
                narrated[g] = Some(n.clone());
                progress = true;
            }
        }
        if !progress {
            return Err(bad(format!("no narrative for group {} of {}", missing[0] + 1, groups.len())));
        }
    }
    let mut episodes = Vec::with_capacity(groups.len());
    for (ts, n) in groups.iter().zip(narrated.iter().flatten()) {
        let start = ts.iter().map(|t| t.time).fold(f64::INFINITY, f64::min);
        let end = ts.iter().map(|t| t.time).fold(f64::NEG_INFINITY, f64::max);
        let title = if n.title.trim().is_empty() {
            format!("Conversation of {}", format_time(start))
        } else {
            n.title.trim().into()
        };
        let mut turn_ids: Vec<u64> = ts.iter().map(|t| t.id).collect();
        turn_ids.sort_unstable();
        episodes.push(Episode {
            id: meta.next_episode,
            title,
            // What the model left relative ("yesterday") gets its date, counted from when the episode was said.
            narrative: crate::text::relative::anchor_relative_dates(n.narrative.trim(), start),
            time: event_time(&n.date, start, end),
            start,
            end,
            turn_ids,
            merged_from: Vec::new(),
            ingested: now,
            vector: Vec::new(),
        });
        meta.next_episode += 1;
    }
    let vectors = embed.embed_texts(&episodes.iter().map(Episode::embed_text).collect::<Vec<_>>()).await?;
    for (e, v) in episodes.iter_mut().zip(vectors) {
        e.vector = v;
    }

    // Integration: the K_e nearest existing episodes above the floor; one call for the window.
    let offered: Vec<Vec<u64>> = episodes
        .iter()
        .map(|e| {
            let cands = state.episodes.values().map(|x| (x.vector.as_slice(), x.id));
            nearest(&e.vector, cands, config.merge_candidates, config.merge_floor)
                .into_iter()
                .map(|(_, id)| id)
                .collect()
        })
        .collect();
    let asking: Vec<usize> = (0..episodes.len()).filter(|&i| !offered[i].is_empty()).collect();
    let mut merged: HashMap<u64, Episode> = HashMap::new();
    let mut items: Vec<DistillItem> = Vec::new();
    let mut standalone: Vec<Episode> = Vec::new();
    let mut decisions: HashMap<usize, p::MergeDecision> = HashMap::new();
    if !asking.is_empty() {
        let prompt: Vec<p::MergeItem> = asking
            .iter()
            .map(|&i| p::MergeItem {
                date: format_time(episodes[i].time),
                title: episodes[i].title.clone(),
                narrative: episodes[i].narrative.clone(),
                candidates: offered[i]
                    .iter()
                    .map(|id| {
                        let x = &state.episodes[id];
                        p::Candidate { label: format!("E{id}"), date: format_time(x.time), text: x.embed_text() }
                    })
                    .collect(),
            })
            .collect();
        let build = |cap| {
            let items: Vec<p::MergeItem> = prompt
                .iter()
                .map(|m| p::MergeItem {
                    narrative: cap_text(&m.narrative, cap).into_owned(),
                    candidates: m
                        .candidates
                        .iter()
                        .map(|c| p::Candidate { text: cap_text(&c.text, cap).into_owned(), ..c.clone() })
                        .collect(),
                    ..m.clone()
                })
                .collect();
            p::merge(&items)
        };
        // A merge rewrites both narratives as one.
        let max_output = output_cap(600, prompt.len());
        let reply: p::MergeReply = call(Phase::Merge, &build, p::merge_schema(), max_output, input, spend).await?;
        for d in reply.merges {
            if let Some(&i) = d.episode.checked_sub(1).and_then(|k| asking.get(k)) {
                decisions.entry(i).or_insert(d);
            }
        }
    }
    for (i, e) in episodes.into_iter().enumerate() {
        let target = decisions.get(&i).and_then(|d| {
            let label = d.merge_with.as_deref()?.trim().trim_start_matches(['E', 'e']);
            let id: u64 = label.parse().ok()?;
            (offered[i].contains(&id) && !merged.contains_key(&id)).then_some((id, d))
        });
        match target {
            Some((id, d)) => {
                let old = &state.episodes[&id];
                let mut m = old.clone();
                let mut turns: Vec<u64> = old.turn_ids.iter().chain(&e.turn_ids).copied().collect();
                turns.sort_unstable();
                turns.dedup();
                m.turn_ids = turns;
                if d.narrative.trim().is_empty() {
                    m.narrative = format!("{}\n{}", old.narrative, e.narrative);
                } else {
                    m.narrative = d.narrative.trim().into();
                }
                if !d.title.trim().is_empty() {
                    m.title = d.title.trim().into();
                }
                m.start = old.start.min(e.start);
                m.end = old.end.max(e.end);
                m.merged_from.push(e.id);
                m.ingested = now;
                items.push(DistillItem { episode: id, turn_ids: e.turn_ids.clone() });
                merged.insert(id, m);
            }
            None => {
                items.push(DistillItem { episode: e.id, turn_ids: e.turn_ids.clone() });
                standalone.push(e);
            }
        }
    }
    let mut merged: Vec<Episode> = merged.into_values().collect();
    sort::sort_by_key(&mut merged, |e| e.id);
    if !merged.is_empty() {
        let vectors = embed.embed_texts(&merged.iter().map(Episode::embed_text).collect::<Vec<_>>()).await?;
        for (e, v) in merged.iter_mut().zip(vectors) {
            e.vector = v;
        }
    }
    w.jobs.push(new_job(&mut meta.next_job, JobKind::Distill { items }, now));
    w.episodes = standalone.into_iter().chain(merged).collect();
    w.meta = Some(meta);
    Ok(w)
}

async fn distill_job(
    items: &[DistillItem],
    input: &JobInput<'_>,
    embed: &mut dyn TextEmbed,
    spend: &mut Spend,
) -> Result<DistillWrite> {
    let (config, state, now) = (input.config, input.state, input.now);
    let mut meta = state.meta.clone();
    let mut w = DistillWrite::default();
    // Episodes forgotten since the job was queued are skipped.
    let items: Vec<(&Episode, Vec<&Turn>)> = items
        .iter()
        .filter_map(|i| Some((state.episodes.get(&i.episode)?, turns_of(&i.turn_ids, input.turns))))
        .filter(|(_, ts)| !ts.is_empty())
        .collect();
    if items.is_empty() {
        return Ok(w);
    }

    // Prediction: the episode evokes up to K_s active facts above τ; with none evoked, extraction is direct.
    let evoked: Vec<Vec<u64>> = items
        .iter()
        .map(|(e, _)| {
            let facts = state.active_facts().map(|f| (f.vector.as_slice(), f.id));
            nearest(&e.vector, facts, config.predict_facts, config.predict_threshold)
                .into_iter()
                .map(|(_, id)| id)
                .collect()
        })
        .collect();
    let predicting: Vec<usize> = (0..items.len()).filter(|&i| !evoked[i].is_empty()).collect();
    let mut predictions: HashMap<usize, String> = HashMap::new();
    if !predicting.is_empty() {
        let prompt: Vec<p::PredictItem> = predicting
            .iter()
            .map(|&i| p::PredictItem {
                title: items[i].0.title.clone(),
                facts: evoked[i].iter().map(|id| state.facts[id].statement.clone()).collect(),
            })
            .collect();
        let build = |cap| {
            let items: Vec<p::PredictItem> = prompt
                .iter()
                .map(|i| p::PredictItem {
                    facts: i.facts.iter().map(|f| cap_text(f, cap).into_owned()).collect(),
                    ..i.clone()
                })
                .collect();
            p::predict(&items)
        };
        let max_output = output_cap(200, prompt.len());
        let reply: p::PredictReply =
            call(Phase::Predict, &build, p::predict_schema(), max_output, input, spend).await?;
        for pr in reply.predictions {
            if let Some(&i) = pr.episode.checked_sub(1).and_then(|k| predicting.get(k)) {
                if !pr.prediction.trim().is_empty() {
                    predictions.entry(i).or_insert(pr.prediction);
                }
            }
        }
    }

    // Distillation: raw turns vs prediction, one call for all episodes.
    let prompt: Vec<p::DistillItem> = items
        .iter()
        .enumerate()
        .map(|(i, (e, ts))| p::DistillItem {
            title: e.title.clone(),
            lines: ts
                .iter()
                .enumerate()
                .map(|(n, t)| line(format!("{}.{}", i + 1, n + 1), t, input.screen_memory))
                .collect(),
            prediction: predictions.get(&i).cloned(),
        })
        .collect();
    let build = |cap| {
        let items: Vec<p::DistillItem> = prompt
            .iter()
            .map(|i| p::DistillItem {
                lines: capped(&i.lines, cap),
                prediction: i.prediction.as_deref().map(|x| cap_text(x, cap).into_owned()),
                ..i.clone()
            })
            .collect();
        p::distill(&items)
    };
    let max_output = output_cap(DISTILL_LINE_TOKENS, prompt.iter().map(|i| i.lines.len()).sum());
    let labels: Vec<String> = prompt.iter().flat_map(|i| i.lines.iter().map(|l| l.label.clone())).collect();
    let reply: p::DistillReply =
        call(Phase::Distill, &build, p::distill_schema(&labels), max_output, input, spend).await?;
    let mut fresh: Vec<Fact> = Vec::new();
    for f in reply.facts {
        // `e.n`: episode e's line n (1-based), the fact's episode and evidence.
        let label = f.line.trim().trim_matches(['[', ']']).split_once('.');
        let Some((episode, n)) = label.and_then(|(e, n)| Some((e.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        else {
            continue;
        };
        let Some((e, ts)) = episode.checked_sub(1).and_then(|k| items.get(k)) else { continue };
        let Some(turn) = n.checked_sub(1).and_then(|n| ts.get(n)) else { continue };
        let statement = f.statement.split_whitespace().collect::<Vec<_>>().join(" ");
        if statement.is_empty() || fresh.iter().any(|x| x.statement.eq_ignore_ascii_case(&statement)) {
            continue;
        }
        fresh.push(Fact {
            id: meta.next_fact,
            statement,
            kind: "fact".into(),
            time: e.time,
            ingested: now,
            episode_ids: vec![e.id],
            turn_ids: vec![turn.id],
            status: FactStatus::Active,
            supersedes: Vec::new(),
            superseded_by: None,
            origin: "new".into(),
            vector: Vec::new(),
        });
        meta.next_fact += 1;
    }
    w.meta = Some(meta);
    if fresh.is_empty() {
        return Ok(w);
    }
    let vectors = embed.embed_texts(&fresh.iter().map(|f| f.statement.clone()).collect::<Vec<_>>()).await?;
    for (f, v) in fresh.iter_mut().zip(vectors) {
        f.vector = v;
    }

    // Consolidation: each new fact vs its K_m nearest above the floor among the active facts and the new facts before
    // it in this batch (a small model restates one fact several times in one reply: 4 of 6 in a real run), one call
    // for all.
    let offered: Vec<Vec<u64>> = (0..fresh.len())
        .map(|i| {
            let stored = state.active_facts().map(|x| (x.vector.as_slice(), x.id));
            let earlier = fresh[..i].iter().map(|x| (x.vector.as_slice(), x.id));
            nearest(&fresh[i].vector, stored.chain(earlier), config.consolidate_candidates, config.consolidate_floor)
                .into_iter()
                .map(|(_, id)| id)
                .collect()
        })
        .collect();
    let statement_of = |id: &u64| match state.facts.get(id) {
        Some(f) => f.statement.clone(),
        None => fresh.iter().find(|f| f.id == *id).map(|f| f.statement.clone()).unwrap_or_default(),
    };
    let asking: Vec<usize> = (0..fresh.len()).filter(|&i| !offered[i].is_empty()).collect();
    let mut decisions: HashMap<usize, p::Decision> = HashMap::new();
    if !asking.is_empty() {
        let prompt: Vec<p::ConsolidateItem> = asking
            .iter()
            .map(|&i| p::ConsolidateItem {
                statement: fresh[i].statement.clone(),
                candidates: offered[i].iter().map(|id| (format!("F{id}"), statement_of(id))).collect(),
            })
            .collect();
        let build = |cap| {
            let items: Vec<p::ConsolidateItem> = prompt
                .iter()
                .map(|i| p::ConsolidateItem {
                    statement: cap_text(&i.statement, cap).into_owned(),
                    candidates: i.candidates.iter().map(|(l, t)| (l.clone(), cap_text(t, cap).into_owned())).collect(),
                })
                .collect();
            p::consolidate(&items)
        };
        let max_output = output_cap(120, prompt.len());
        let reply: p::ConsolidateReply =
            call(Phase::Consolidate, &build, p::consolidate_schema(), max_output, input, spend).await?;
        for d in reply.decisions {
            if let Some(&i) = d.fact.checked_sub(1).and_then(|k| asking.get(k)) {
                decisions.entry(i).or_insert(d);
            }
        }
    }
    let mut old: HashMap<u64, Fact> = HashMap::new();
    let mut reembed: Vec<usize> = Vec::new();
    #[allow(clippy::needless_range_loop)] // `split_at_mut(i)`: the fact and the ones before it, both mutable
    for i in 0..fresh.len() {
        let Some(d) = decisions.get(&i) else { continue };
        let (earlier, rest) = fresh.split_at_mut(i);
        let f = &mut rest[0];
        let action = d.action.trim().to_ascii_uppercase();
        if action != "MERGE" && action != "CONFLICT" {
            continue;
        }
        let targets: Vec<u64> = crate::sort::set_from(
            d.targets
                .iter()
                .filter_map(|t| t.trim().trim_matches(['[', ']']).trim_start_matches(['F', 'f']).parse().ok())
                .filter(|id| offered[i].contains(id) && !old.contains_key(id))
                .filter(|id| earlier.iter().all(|e| e.id != *id || e.status == FactStatus::Active)),
        )
        .into_iter()
        .collect();
        if targets.is_empty() {
            continue; // nothing valid to supersede: the fact stays NEW
        }
        // A merge combines statements, so it is about as long as they are together. One much longer says something
        // else: qwen2.5-0.5b wrote its reasoning into it ("… This is a direct and accurate update to the existing
        // information …"). Then the fact stays NEW and nothing is superseded.
        if action == "MERGE" {
            let chars = |t: &str| t.split_whitespace().map(|w| w.chars().count() + 1).sum::<usize>();
            let parts = chars(&f.statement)
                + targets
                    .iter()
                    .map(|id| match earlier.iter().find(|e| e.id == *id) {
                        Some(e) => chars(&e.statement),
                        None => state.facts.get(id).map_or(0, |x| chars(&x.statement)),
                    })
                    .sum::<usize>();
            if chars(&d.statement) > parts + parts / 5 + 20 {
                continue;
            }
        }
        for id in &targets {
            // A stored fact is superseded by a copy written back; a new fact of this batch, in place.
            let t: &mut Fact = match earlier.iter_mut().find(|e| e.id == *id) {
                Some(e) => e,
                None => old.entry(*id).or_insert_with(|| state.facts[id].clone()),
            };
            t.status = FactStatus::Superseded;
            t.superseded_by = Some(f.id);
            if action == "MERGE" {
                f.episode_ids.extend(&t.episode_ids);
                f.turn_ids.extend(&t.turn_ids);
            }
        }
        f.episode_ids.sort_unstable();
        f.episode_ids.dedup();
        f.turn_ids.sort_unstable();
        f.turn_ids.dedup();
        f.supersedes = targets;
        f.origin = action.to_lowercase();
        let merged = d.statement.split_whitespace().collect::<Vec<_>>().join(" ");
        if action == "MERGE" && !merged.is_empty() && merged != f.statement {
            f.statement = merged;
            reembed.push(i);
        }
    }
    if !reembed.is_empty() {
        let texts: Vec<String> = reembed.iter().map(|&i| fresh[i].statement.clone()).collect();
        for (&i, v) in reembed.iter().zip(embed.embed_texts(&texts).await?) {
            fresh[i].vector = v;
        }
    }
    let mut old: Vec<Fact> = old.into_values().collect();
    sort::sort_by_key(&mut old, |f| f.id);
    w.facts = old.into_iter().chain(fresh).collect();
    Ok(w)
}
