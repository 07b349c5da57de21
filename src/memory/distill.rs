//! Distillation on the facade: `add_messages` only queues work (in the same write as the turns), `flush` runs the
//! queued jobs one at a time in order, each committing its whole result in one write; inspection (episodes, facts,
//! history), forgetting (fact, episode, session) and recall/answer over sessions + episodes + facts. A child of
//! `memory` so it reads the facade's state directly; the [`Llm`] is passed in, as for `answer`.

use std::collections::HashSet;

use serde::Serialize;

use super::{Memory, PhaseCounters, RecallOptions, RecalledSession};
use rustc_hash::FxHashMap;

use crate::distill::{
    cosine, run_job, DistillConfig, DistillState, DistillWrite, Episode, Fact, FactStatus, Job, JobInput, JobKind,
    Phase, Spend, TextEmbed,
};
use crate::embed::Runtime;
use crate::error::{Error, Result};
use crate::llm::{AbortSignal, Llm};
use crate::sort;
use crate::store::{Store, StoredUnit, WriteBatch};
use crate::text::single_line;
use crate::types::{format_time, TimeMs, Turn};

/// A job that failed too often, as `stats()` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParkedJob {
    pub id: u64,
    pub kind: &'static str,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// Distillation's part of `stats()`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistillStats {
    pub enabled: bool,
    /// Turns waiting for segmentation (new or carried over).
    pub pending_turns: usize,
    /// Jobs queued (parked ones included).
    pub jobs: usize,
    pub parked: Vec<ParkedJob>,
    pub episodes: usize,
    pub facts_active: usize,
    pub facts_superseded: usize,
}

/// Reported after each job.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistillProgress {
    pub job: &'static str,
    /// Whether it succeeded (else it will be retried, or was parked).
    pub ok: bool,
    pub jobs_left: usize,
    pub pending_turns: usize,
    pub episodes: usize,
    pub facts: usize,
}

/// What one `flush` did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlushReport {
    pub jobs_run: usize,
    pub failures: usize,
    /// Jobs parked by this flush.
    pub parked: usize,
    /// Unparked jobs still queued (waiting for their backoff).
    pub jobs_left: usize,
    /// When the next queued job may run; `None` when the queue holds only parked jobs or nothing.
    pub next_try: Option<TimeMs>,
}

impl FlushReport {
    pub fn add(&mut self, outcome: &JobOutcome) {
        match outcome {
            JobOutcome::Done => self.jobs_run += 1,
            JobOutcome::Failed => self.failures += 1,
            JobOutcome::Parked => {
                self.failures += 1;
                self.parked += 1;
            }
            JobOutcome::Discarded => {}
        }
    }
}

/// A queued job taken out to run without the memory's lock: the job and a copy of what it reads (the distilled
/// state, the turns it names). Made by [`Memory::begin_job`], committed by [`Memory::finish_job`].
pub struct JobTicket {
    pub job: Job,
    state: DistillState,
    turns: FxHashMap<u64, Turn>,
    config: DistillConfig,
    /// The memory's forget count when the ticket was taken: a forget meanwhile discards the result.
    epoch: u64,
    now: TimeMs,
    tokenizer: std::rc::Rc<crate::text::WordPiece>,
    screen_memory: bool,
}

impl JobTicket {
    /// The job's LLM calls and embeddings; changes nothing. `embed` is the memory's embedder (the page lends it
    /// for each batch of texts, briefly, under the lock).
    pub async fn run(
        &self,
        llm: &dyn Llm,
        embed: &mut dyn TextEmbed,
        abort: Option<AbortSignal>,
    ) -> (Result<DistillWrite>, Spend) {
        let mut spend = Spend::default();
        let count = |s: &str| self.tokenizer.encode(s).len();
        let (state, turns, config, now) = (&self.state, &self.turns, &self.config, self.now);
        let input = JobInput {
            state,
            turns,
            llm,
            config,
            now,
            abort,
            count: &count,
            attempts: self.job.attempts,
            screen_memory: self.screen_memory,
        };
        let result = run_job(&self.job, &input, embed, &mut spend).await;
        (result, spend)
    }
}

/// What became of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Its result is committed and it left the queue.
    Done,
    /// It failed and waits for its backoff.
    Failed,
    /// It failed too often (or was refused) and is parked.
    Parked,
    /// The memory changed under it (a forget, or the job was changed meanwhile): nothing was committed; a job
    /// still queued runs again.
    Discarded,
}

/// Which distilled records [`Memory::sessions_through_distilled`] ranks sessions through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DistilledSources {
    #[default]
    Both,
    Episodes,
    Facts,
}

/// Which distilled sources a recall combines, and how many of each.
#[derive(Debug, Clone, Copy)]
pub struct DistilledRecallOptions {
    /// Include the TIR sessions (ranked by `recall`).
    pub sessions: bool,
    pub recall: RecallOptions,
    /// Top episodes (Nemori: k = 10).
    pub episodes: usize,
    /// Top facts (Nemori: m = 20); superseded facts are never shown.
    pub facts: usize,
    /// Episodes among the top ones shown with their raw turns (2).
    pub raw_episodes: usize,
}

impl Default for DistilledRecallOptions {
    fn default() -> Self {
        DistilledRecallOptions {
            sessions: true,
            recall: RecallOptions::default(),
            episodes: 10,
            facts: 20,
            raw_episodes: 2,
        }
    }
}

/// An episode or fact with its similarity to the query.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Scored<T> {
    pub score: f32,
    #[serde(flatten)]
    pub item: T,
}

/// The result of `recall_distilled`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistilledRecall {
    pub query: String,
    pub sessions: Vec<RecalledSession>,
    pub episodes: Vec<Scored<Episode>>,
    pub facts: Vec<Scored<Fact>>,
    /// Facts, then episodes (the top ones with their raw turns), then sessions, each with its time.
    pub context: String,
    pub context_tokens: usize,
}

fn without_vector<T: Clone>(x: &T, clear: impl Fn(&mut T)) -> T {
    let mut x = x.clone();
    clear(&mut x);
    x
}

impl<S: Store, R: Runtime> Memory<S, R> {
    fn distill_config(&self) -> Option<DistillConfig> {
        self.config.distill
    }

    fn phase(&mut self, phase: Phase) -> &mut PhaseCounters {
        let c = &mut self.llm_counters;
        match phase {
            Phase::Segment => &mut c.segment,
            Phase::Narrate => &mut c.narrate,
            Phase::Merge => &mut c.merge,
            Phase::Predict => &mut c.predict,
            Phase::Distill => &mut c.distill,
            Phase::Consolidate => &mut c.consolidate,
        }
    }

    /// Segment jobs not yet queued for `session` (`last` or not).
    fn segment_queued(&self, session: &str, last: bool) -> bool {
        self.distill
            .jobs
            .values()
            .any(|j| matches!(&j.work, JobKind::Segment { session: s, last: l } if s == session && (*l || !last)))
    }

    /// The distillation part of an `add_messages` write: the new turns join the buffer; a session that another
    /// session's turns follow has ended (its buffer is segmented without holding anything back); w buffered turns
    /// of this session trigger a window.
    pub(super) fn distill_on_add(&self, session: &str, new_turns: &[Turn], now: TimeMs) -> DistillWrite {
        let Some(config) = self.distill_config() else { return DistillWrite::default() };
        let mut meta = self.distill.meta.clone();
        let mut w = DistillWrite::default();
        let mut ended: Vec<String> = meta
            .pending
            .iter()
            .filter_map(|id| self.turns.get(id).map(|t| t.session.to_string()))
            .filter(|s| s != session)
            .collect();
        ended.sort_unstable();
        ended.dedup();
        let mut queue = |work: JobKind, meta: &mut crate::distill::DistillMeta| {
            w.jobs.push(crate::distill::pipeline::new_job(&mut meta.next_job, work, now));
        };
        for s in ended {
            if !self.segment_queued(&s, true) {
                queue(JobKind::Segment { session: s, last: true }, &mut meta);
            }
        }
        meta.pending.extend(new_turns.iter().map(|t| t.id));
        let mine = meta.pending.iter().filter(|id| self.turns.get(id).is_some_and(|t| t.session == session)).count()
            + new_turns.len();
        if mine >= config.window && !self.segment_queued(session, false) {
            queue(JobKind::Segment { session: session.into(), last: false }, &mut meta);
        }
        w.meta = Some(meta);
        w
    }

    async fn commit_distill(&mut self, w: DistillWrite) -> Result<()> {
        if w.is_empty() {
            return Ok(());
        }
        self.store.write(WriteBatch { distill: w.clone(), ..Default::default() }).await?;
        self.distill.apply(&w);
        Ok(())
    }

    /// Runs all queued distillation now: [`queue_last_windows`](Self::queue_last_windows), then every due job in
    /// order. A job whose LLM call fails is retried with backoff (`next_try`); the flush returns when the queue is
    /// empty or its head is waiting — call again at `next_try` (the page does, with a timer). A job that keeps
    /// failing is parked: kept, visible in `stats()`, skipped until `retry_parked`.
    pub async fn flush(
        &mut self,
        llm: &dyn Llm,
        now: TimeMs,
        abort: Option<&AbortSignal>,
        progress: &mut dyn FnMut(&DistillProgress),
    ) -> Result<FlushReport> {
        self.queue_last_windows(now).await?;
        self.run_jobs(llm, now, abort, progress).await
    }

    /// What a flush asks first: every session's buffer is segmented without holding anything back.
    pub async fn queue_last_windows(&mut self, now: TimeMs) -> Result<()> {
        if self.distill_config().is_none() {
            return Err(Error::invalid("distillation is off: open the memory with a `distill` option"));
        }
        let mut sessions: Vec<String> = self
            .distill
            .meta
            .pending
            .iter()
            .filter_map(|id| self.turns.get(id).map(|t| t.session.to_string()))
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        let mut w = DistillWrite::default();
        let mut meta = self.distill.meta.clone();
        for s in sessions {
            if !self.segment_queued(&s, true) {
                w.jobs.push(crate::distill::pipeline::new_job(
                    &mut meta.next_job,
                    JobKind::Segment { session: s, last: true },
                    now,
                ));
            }
        }
        if !w.jobs.is_empty() {
            w.meta = Some(meta);
        }
        self.commit_distill(w).await
    }

    /// Runs the queued jobs that are due at `now`, in order, without queueing new segmentation: each one as
    /// [`begin_job`](Self::begin_job) → [`JobTicket::run`] → [`finish_job`](Self::finish_job), holding `&mut self`
    /// throughout (native tools; the page goes through [`super::Shared`], which releases the memory while the LLM
    /// thinks). An `abort` cancels the running job's LLM call (`Err(Aborted)`; the job stays queued as it was).
    pub async fn run_jobs(
        &mut self,
        llm: &dyn Llm,
        now: TimeMs,
        abort: Option<&AbortSignal>,
        progress: &mut dyn FnMut(&DistillProgress),
    ) -> Result<FlushReport> {
        let mut report = FlushReport::default();
        while let Some(ticket) = self.begin_job(now) {
            abort.map(AbortSignal::check).transpose()?;
            let (result, spend) = ticket.run(llm, &mut self.embedder, abort.cloned()).await;
            let outcome = self.finish_job(&ticket, result, &spend).await?;
            report.add(&outcome);
            progress(&self.distill_progress(&ticket, &outcome));
        }
        report.jobs_left = self.distill.jobs.values().filter(|j| !j.parked).count();
        report.next_try = self.distill.next_job().map(|j| j.next_try);
        Ok(report)
    }

    /// Takes the next due job (in queue order) out to run without the memory: a copy of what it reads. The job
    /// stays queued until [`finish_job`](Self::finish_job) commits its result, so a crash or a close in between
    /// loses nothing. `None` when no job is due at `now` (or distillation is off).
    pub fn begin_job(&self, now: TimeMs) -> Option<JobTicket> {
        let config = self.distill_config()?;
        let job = self.distill.next_job().filter(|j| j.next_try <= now)?.clone();
        let turn_ids: Vec<u64> = match &job.work {
            JobKind::Segment { session, .. } => self
                .distill
                .meta
                .pending
                .iter()
                .copied()
                .filter(|id| self.turns.get(id).is_some_and(|t| t.session == session))
                .collect(),
            JobKind::Narrate { groups } => groups.iter().flatten().copied().collect(),
            JobKind::Distill { items } => items.iter().flat_map(|i| i.turn_ids.iter().copied()).collect(),
        };
        let turns = turn_ids.iter().filter_map(|id| Some((*id, self.turns.get(id)?.to_turn()))).collect();
        let tokenizer = self.embedder.shared_tokenizer();
        let (state, epoch, screen_memory) = (self.distill.clone(), self.distill_epoch, self.config.screen_memory);
        Some(JobTicket { job, state, turns, config, epoch, now, tokenizer, screen_memory })
    }

    /// Commits what a job produced, against the memory as it is now: LLM use is counted; a job that is no longer
    /// queued as it was (forgotten, or retried by someone else), or whose world was forgotten meanwhile
    /// (`forget`, `forgetAll`), is discarded — a forgotten session wins, and a job still queued runs again on what
    /// is left. Otherwise the result is rebased over what happened meanwhile (new turns buffered, jobs queued)
    /// and written in one batch with the job's deletion; a failure is recorded with backoff, or parks the job.
    pub async fn finish_job(
        &mut self,
        ticket: &JobTicket,
        result: Result<DistillWrite>,
        spend: &Spend,
    ) -> Result<JobOutcome> {
        for (phase, spent) in &spend.calls {
            self.phase(*phase).add(spent);
        }
        let current = self.distill.jobs.get(&ticket.job.id);
        if ticket.epoch != self.distill_epoch || current != Some(&ticket.job) {
            return Ok(JobOutcome::Discarded);
        }
        match result {
            Ok(w) => match self.rebase(ticket, w) {
                Some(w) => {
                    self.commit_distill(w).await?;
                    Ok(JobOutcome::Done)
                }
                None => Ok(JobOutcome::Discarded),
            },
            Err(e @ (Error::Aborted | Error::Storage(_) | Error::QuotaExceeded(_) | Error::Closed)) => Err(e),
            Err(e) => {
                if let Some(p) = spend.failed {
                    self.phase(p).errors += 1;
                }
                let mut j = ticket.job.clone();
                j.last_error = Some(format!("{}: {e}", e.code()));
                if let Error::LlmRateLimited { retry_after_ms, .. } = &e {
                    // The endpoint asks for time: wait at least what it says, back off, and never park for it
                    // (the queue waits on the endpoint either way).
                    j.rate_limited += 1;
                    let asked = retry_after_ms.map_or(0.0, |ms| ms as f64);
                    j.next_try = ticket.now + ticket.config.backoff(j.rate_limited).max(asked);
                } else {
                    j.attempts += 1;
                    // A refused request (bad key, unknown model) will not fix itself: park at once.
                    j.parked = j.attempts >= ticket.config.max_attempts || matches!(e, Error::LlmRejected(_));
                    j.next_try = ticket.now + ticket.config.backoff(j.attempts);
                }
                let parked = j.parked;
                self.commit_distill(DistillWrite { jobs: vec![j], ..Default::default() }).await?;
                Ok(if parked { JobOutcome::Parked } else { JobOutcome::Failed })
            }
        }
    }

    /// A job's write, made against its snapshot, moved onto the current state. Only jobs create episodes and
    /// facts (one at a time), so their counters carry over; meanwhile `addMessages` and `flush` may have buffered
    /// turns and queued jobs: the turns the job consumed leave the current buffer, and the jobs it queued get ids
    /// after those (so the queue keeps its order). Sessions left with a full window and no segmentation queued
    /// (their turns arrived while this job held the window) get one. `None`: the snapshot is too stale to rebase.
    fn rebase(&self, ticket: &JobTicket, mut w: DistillWrite) -> Option<DistillWrite> {
        let snap = &ticket.state.meta;
        let current = &self.distill.meta;
        if current.next_episode != snap.next_episode || current.next_fact != snap.next_fact {
            return None;
        }
        let mut meta = current.clone();
        if let Some(out) = w.meta.take() {
            let left: HashSet<u64> = out.pending.iter().copied().collect();
            let consumed: HashSet<u64> = snap.pending.iter().copied().filter(|t| !left.contains(t)).collect();
            meta.pending.retain(|t| !consumed.contains(t));
            meta.next_episode = out.next_episode;
            meta.next_fact = out.next_fact;
            let shift = current.next_job - snap.next_job;
            for j in w.jobs.iter_mut().filter(|j| j.id >= snap.next_job) {
                j.id += shift;
            }
            meta.next_job = out.next_job + shift;
        }
        if let Some(config) = self.distill_config() {
            let queued = |session: &str| {
                w.jobs
                    .iter()
                    .chain(self.distill.jobs.values().filter(|j| !w.delete_jobs.contains(&j.id)))
                    .any(|j| matches!(&j.work, JobKind::Segment { session: s, .. } if s == session))
            };
            let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
            for t in meta.pending.iter().filter_map(|id| self.turns.get(id)) {
                *counts.entry(t.session).or_default() += 1;
            }
            let due: Vec<String> = counts
                .into_iter()
                .filter(|&(s, n)| n >= config.window && !queued(s))
                .map(|(s, _)| s.to_string())
                .collect();
            for session in due {
                let work = JobKind::Segment { session, last: false };
                w.jobs.push(crate::distill::pipeline::new_job(&mut meta.next_job, work, ticket.now));
            }
        }
        w.meta = Some(meta);
        Some(w)
    }

    pub(super) fn distill_progress(&self, ticket: &JobTicket, outcome: &JobOutcome) -> DistillProgress {
        DistillProgress {
            job: ticket.job.work.name(),
            ok: *outcome == JobOutcome::Done,
            jobs_left: self.distill.jobs.values().filter(|j| !j.parked).count(),
            pending_turns: self.distill.meta.pending.len(),
            episodes: self.distill.episodes.len(),
            facts: self.distill.active_facts().count(),
        }
    }

    /// Gives parked jobs another chance (e.g. after the user fixed the endpoint).
    pub async fn retry_parked(&mut self, now: TimeMs) -> Result<usize> {
        let jobs: Vec<Job> = self
            .distill
            .jobs
            .values()
            .filter(|j| j.parked)
            .map(|j| Job { parked: false, attempts: 0, rate_limited: 0, next_try: now, ..j.clone() })
            .collect();
        let n = jobs.len();
        self.commit_distill(DistillWrite { jobs, ..Default::default() }).await?;
        Ok(n)
    }

    pub fn distill_stats(&self) -> DistillStats {
        let d = &self.distill;
        DistillStats {
            enabled: self.config.distill.is_some(),
            pending_turns: d.meta.pending.len(),
            jobs: d.jobs.len(),
            parked: d
                .jobs
                .values()
                .filter(|j| j.parked)
                .map(|j| ParkedJob {
                    id: j.id,
                    kind: j.work.name(),
                    attempts: j.attempts,
                    last_error: j.last_error.clone(),
                })
                .collect(),
            episodes: d.episodes.len(),
            facts_active: d.active_facts().count(),
            facts_superseded: d.facts.values().filter(|f| f.status == FactStatus::Superseded).count(),
        }
    }

    /// Sessions ranked through the distilled memory (issue 16's "bridge"): each of `sources`' records (episodes,
    /// active facts, or both) is scored by its cosine with the query, and a session takes the best score of the
    /// records whose turns it holds (TIR's max, one level up). Best first, ties by id; sessions no such record points
    /// to are left out.
    pub async fn sessions_through_distilled(
        &mut self,
        query: &str,
        sources: DistilledSources,
    ) -> Result<Vec<(String, f32)>> {
        self.check_query(query)?;
        let q = self.embedder.embed_query(query).await?;
        Ok(self.sessions_through_distilled_vector(&q, sources))
    }

    /// [`sessions_through_distilled`](Self::sessions_through_distilled) of a query embedded already
    /// ([`embed_query`](Self::embed_query)), for a caller that ranks one query through several `sources`.
    pub fn sessions_through_distilled_vector(&self, q: &[f32], sources: DistilledSources) -> Vec<(String, f32)> {
        let mut best: FxHashMap<&str, f32> = FxHashMap::default();
        let use_episodes = matches!(sources, DistilledSources::Both | DistilledSources::Episodes);
        let use_facts = matches!(sources, DistilledSources::Both | DistilledSources::Facts);
        let episodes = self.distill.episodes.values().filter(|_| use_episodes).map(|e| (&e.vector, &e.turn_ids));
        let facts = self.distill.active_facts().filter(|_| use_facts).map(|f| (&f.vector, &f.turn_ids));
        for (vector, turn_ids) in episodes.chain(facts) {
            let score = cosine(q, vector);
            for session in turn_ids.iter().filter_map(|id| self.turns.get(id)).map(|t| t.session) {
                let b = best.entry(session).or_insert(f32::NEG_INFINITY);
                *b = b.max(score);
            }
        }
        let mut ranked: Vec<(String, f32)> = best.into_iter().map(|(s, score)| (s.to_string(), score)).collect();
        sort::sort_by(&mut ranked, |a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked
    }

    /// Episodes, oldest first (without vectors).
    pub fn episodes(&self) -> Vec<Episode> {
        let mut out: Vec<Episode> =
            self.distill.episodes.values().map(|e| without_vector(e, |e| e.vector.clear())).collect();
        sort::sort_by(&mut out, |a, b| a.time.total_cmp(&b.time).then(a.id.cmp(&b.id)));
        out
    }

    /// Facts in id order (without vectors); superseded ones only when asked.
    pub fn facts(&self, include_superseded: bool) -> Vec<Fact> {
        self.distill
            .facts
            .values()
            .filter(|f| include_superseded || f.status == FactStatus::Active)
            .map(|f| without_vector(f, |f| f.vector.clear()))
            .collect()
    }

    /// A fact's chain of versions, oldest first (see [`DistillState::history`]).
    pub fn history(&self, fact_id: u64) -> Vec<Fact> {
        self.distill.history(fact_id).into_iter().map(|f| without_vector(&f, |f| f.vector.clear())).collect()
    }

    /// The distilled state (for tests and tools).
    pub fn distilled(&self) -> &DistillState {
        &self.distill
    }

    /// Erases one fact; links to it are cut.
    pub async fn forget_fact(&mut self, id: u64) -> Result<()> {
        if !self.distill.facts.contains_key(&id) {
            return Err(Error::NotFound(format!("fact {id}")));
        }
        self.distill_epoch += 1;
        self.commit_distill(self.distill.forget_fact(id)).await
    }

    /// Erases one episode and the facts distilled only from it; its turns stay and are not distilled again.
    pub async fn forget_episode(&mut self, id: u64) -> Result<()> {
        if !self.distill.episodes.contains_key(&id) {
            return Err(Error::NotFound(format!("episode {id}")));
        }
        self.distill_epoch += 1;
        self.commit_distill(self.distill.forget_episode(id)).await
    }

    /// Erases one turn (e.g. a poisoned one) and what depends on it: every fact that cites it (it may restate the
    /// turn; stricter than forgetting a session), the episodes that tell it (their other turns are distilled again),
    /// and its unit, whose other turn is embedded again alone. The facts go first, each in its own write, then the
    /// turn in one: a crash in between leaves a state that a second `forget_turn` completes.
    pub async fn forget_turn(&mut self, id: u64) -> Result<()> {
        let Some(turn) = self.turns.get(&id).map(|t| t.to_turn()) else {
            return Err(Error::NotFound(format!("turn {id}")));
        };
        let citing: Vec<u64> = self.distill.facts.values().filter(|f| f.turn_ids.contains(&id)).map(|f| f.id).collect();
        for fact in citing {
            if self.distill.facts.contains_key(&fact) {
                self.forget_fact(fact).await?;
            }
        }
        let Some(&n) = self.session_index.get(&turn.session) else {
            return Err(Error::NotFound(format!("session {}", turn.session)));
        };
        let mut meta = self.meta.clone();
        let unit = self.unit_containing(id);
        let rest: Vec<crate::types::TurnRef> = unit
            .iter()
            .flat_map(|u| u.turn_ids.iter())
            .filter(|&&t| t != id)
            .filter_map(|t| self.turns.get(t))
            .collect();
        let mut units = Vec::new();
        if !rest.is_empty() {
            let text = super::unit_text(rest.iter().map(|t| t.unit_text()));
            let mut stored = StoredUnit {
                unit: crate::types::Unit {
                    id: meta.next_unit,
                    session: turn.session.clone(),
                    turn_ids: rest.iter().map(|t| t.id).collect(),
                },
                vectors: Default::default(),
            };
            for w in self.embedder.embed(&[text.as_str()]).await? {
                stored.vectors.extend_from_slice(&w.vector);
            }
            meta.next_unit += 1;
            units.push(stored);
        }
        let mut session = self.sessions[n as usize].clone();
        session.turn_count = session.turn_count.saturating_sub(1);
        let last = self.session_turns[n as usize].len() == 1;
        let batch = WriteBatch {
            meta: Some(meta),
            sessions: if last { Vec::new() } else { vec![session] },
            delete_sessions: if last { vec![turn.session.clone()] } else { Vec::new() },
            delete_turns: vec![id],
            delete_units: unit.iter().map(|u| u.id).collect(),
            units,
            distill: self.distill.forget_turns(&HashSet::from([id])),
            ..Default::default()
        };
        self.distill_epoch += 1;
        self.store.write(batch).await?;
        self.reload().await
    }

    /// Erases a session: its turns and units, and what was distilled only from it (see
    /// [`DistillState::forget_turns`]), in one write.
    pub async fn forget_session(&mut self, id: &str) -> Result<()> {
        let Some(&n) = self.session_index.get(id) else { return Err(Error::NotFound(format!("session {id}"))) };
        let turns: HashSet<u64> = self.session_turns[n as usize].iter().copied().collect();
        let units: Vec<u32> = self.units.iter().filter(|u| u.session == n).map(|u| u.id).collect();
        #[cfg(feature = "sync")]
        let sync = self.forget_session_intent(id)?;
        let batch = WriteBatch {
            delete_units: units,
            delete_turns: turns.iter().copied().collect(),
            delete_sessions: vec![id.to_string()],
            distill: self.distill.forget_turns(&turns),
            #[cfg(feature = "sync")]
            sync: sync.as_ref().map(|(_, bytes)| bytes.clone()),
            ..Default::default()
        };
        self.distill_epoch += 1;
        self.store.write(batch).await?;
        #[cfg(feature = "sync")]
        self.adopt_sync_record(sync.map(|(record, _)| record));
        self.reload().await
    }

    /// Rebuilds the in-RAM state from the store (session numbers are positions, so removing one renumbers).
    pub(super) async fn reload(&mut self) -> Result<()> {
        let snapshot = self.store.load().await?;
        self.quarantined = snapshot.quarantined;
        if let Some(meta) = snapshot.meta {
            self.meta = meta; // id counters a forget may have moved (a unit embedded again)
        }
        self.sessions.clear();
        self.session_index.clear();
        self.session_turns.clear();
        self.turns.clear();
        self.prompt_lines.get_mut().clear();
        self.units.clear();
        self.vectors = crate::index::VectorIndex::with_precision(crate::embed::DIM, self.config.vectors);
        self.lexical.clear();
        self.lexical_pending.clear();
        self.fill(snapshot.sessions, snapshot.turns, snapshot.units, snapshot.block);
        // Indexed now, in unit order, as inserting them one by one did.
        self.index_lexical(usize::MAX);
        self.distill = DistillState::from_records(snapshot.distill);
        // The forget's write dropped the kept lexical index; this one is what the next open would build, so it is
        // kept in its place (a cache: if that write fails, the next open builds it).
        self.lexical_save_due = self.quarantined.is_empty() && self.units.len() >= super::LEXICAL_SAVE_MIN;
        let _ = self.save_lexical().await;
        Ok(())
    }

    /// Recall over sessions (TIR), episodes and facts: the top `episodes` and `facts` by cosine to the query, raw
    /// turns for the best `raw_episodes` episodes, every item with its time.
    pub async fn recall_distilled(&mut self, query: &str, options: DistilledRecallOptions) -> Result<DistilledRecall> {
        self.check_query(query)?;
        let recall = if options.sessions { Some(self.recall(query, options.recall).await?) } else { None };
        let q = self.embedder.embed_query(query).await?;
        let mut episodes: Vec<Scored<Episode>> = self
            .distill
            .episodes
            .values()
            .map(|e| Scored { score: cosine(&q, &e.vector), item: without_vector(e, |e| e.vector.clear()) })
            .collect();
        sort::sort_by(&mut episodes, |a, b| b.score.total_cmp(&a.score).then(a.item.id.cmp(&b.item.id)));
        episodes.truncate(options.episodes);
        let mut facts: Vec<Scored<Fact>> = self
            .distill
            .active_facts()
            .map(|f| Scored { score: cosine(&q, &f.vector), item: without_vector(f, |f| f.vector.clear()) })
            .collect();
        sort::sort_by(&mut facts, |a, b| b.score.total_cmp(&a.score).then(a.item.id.cmp(&b.item.id)));
        facts.truncate(options.facts);
        let mut parts = Vec::new();
        if !facts.is_empty() {
            // Memory text stays on its line (`single_line`), as in the sessions' context: a stored newline must not
            // start a line of its own ("### Facts", "- (…) …") that reads as loci's.
            let lines: Vec<String> = facts
                .iter()
                .map(|f| format!("- ({}) {}", format_time(f.item.time), single_line(&f.item.statement)))
                .collect();
            parts.push(format!("### Facts\n{}", lines.join("\n")));
        }
        for (rank, e) in episodes.iter().enumerate() {
            let (title, narrative) = (single_line(&e.item.title), single_line(&e.item.narrative));
            let mut s = format!("### Episode: {title} ({})\n{narrative}", format_time(e.item.time));
            if rank < options.raw_episodes {
                for t in e.item.turn_ids.iter().filter_map(|id| self.turns.get(id)) {
                    // Screened like every turn a model reads (`text::prompt_text`); dated by the line's own header.
                    let screened = match self.config.screen_memory {
                        true => crate::text::screen::screen(&t.text),
                        false => std::borrow::Cow::Borrowed(&t.text[..]),
                    };
                    let (speaker, text) = (single_line(t.speaker), single_line(&screened));
                    s.push_str(&format!("\n[{}] {speaker}: {text}", format_time(t.time)));
                }
            }
            parts.push(s);
        }
        let sessions = match recall {
            Some(r) => {
                if !r.context.is_empty() {
                    parts.push(r.context);
                }
                r.sessions
            }
            None => Vec::new(),
        };
        let context = parts.join("\n\n");
        let context_tokens = self.embedder.tokenizer().encode(&context).len();
        Ok(DistilledRecall { query: query.into(), sessions, episodes, facts, context, context_tokens })
    }
}
