//! One memory shared by concurrent callers — the page's calls, the background distillation runner, `flush` — behind
//! one async lock that is never held across an LLM call. Work that needs the LLM reads what it needs under the
//! lock (a [`JobTicket`], an [`AnswerPlan`]), releases it, lets the model think, then commits under the lock
//! against the memory as it is by then (see [`Memory::finish_job`]). So `addMessages`, `recall` and `stats` wait at
//! most for an embedding or a write, never for a model that takes minutes. Plain Rust: the web bindings wrap it,
//! native tests drive it with a model that hangs.

use std::rc::Rc;

use async_trait::async_trait;
use futures::lock::{MappedMutexGuard, Mutex, MutexGuard};

use super::answer::{expand_query, needs_llm, AnswerPlan, Expansion, PlanOutcome, Spent};
use super::{
    AnswerOptions, AnswerResult, DistillProgress, DistilledRecallOptions, JobOutcome, Memory, PrunedRecall,
    RecallOptions, RecallResult,
};
use super::{PruneOptions, PrunedRecallPlan};
use crate::distill::TextEmbed;
use crate::embed::Runtime;
use crate::error::{Error, Result};
use crate::llm::{AbortSignal, Llm, Usage};
use crate::store::Store;
use crate::types::{format_time, TimeMs};

/// A memory behind its lock. Cloning shares it.
pub struct Shared<S: Store, R: Runtime> {
    core: Rc<Mutex<Option<Memory<S, R>>>>,
    /// Held across one job's read → think → commit, so that jobs run one at a time and in order whoever runs them.
    job_turn: Rc<Mutex<()>>,
    /// Fired by [`Shared::close`]: LLM calls in flight are cancelled; a result that arrives anyway is dropped.
    closing: AbortSignal,
}

impl<S: Store, R: Runtime> Clone for Shared<S, R> {
    fn clone(&self) -> Self {
        Shared { core: self.core.clone(), job_turn: self.job_turn.clone(), closing: self.closing.clone() }
    }
}

/// What one background step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobStep {
    /// A job ran (whatever its outcome); there may be more.
    Ran(JobOutcome),
    /// Nothing is due now; the head of the queue may run at this time.
    WaitUntil(TimeMs),
    /// Nothing queued (or only parked jobs), or distillation is off.
    Idle,
}

impl<S: Store, R: Runtime> Shared<S, R> {
    pub fn new(memory: Memory<S, R>) -> Self {
        Shared { core: Rc::new(Mutex::new(Some(memory))), job_turn: Rc::default(), closing: AbortSignal::new() }
    }

    /// The memory, for work that needs no LLM; `Err(Closed)` once closed.
    pub async fn lock(&self) -> Result<MappedMutexGuard<'_, Option<Memory<S, R>>, Memory<S, R>>> {
        let guard = self.core.lock().await;
        if guard.is_none() {
            return Err(Error::Closed);
        }
        Ok(MutexGuard::map(guard, |m| m.as_mut().expect("checked above")))
    }

    /// Fired when the memory closes.
    pub fn closing(&self) -> &AbortSignal {
        &self.closing
    }

    pub fn is_closed(&self) -> bool {
        self.closing.is_aborted()
    }

    /// Cancels LLM calls in flight (their jobs stay queued), waits for the call holding the lock (an embedding or a
    /// write, never a model), and gives the store back to be closed. `None` when already closed.
    /// The cancelling happens at the call, before the returned future is first polled.
    pub fn close(&self) -> impl std::future::Future<Output = Option<S>> + 'static
    where
        S: 'static,
        R: 'static,
    {
        self.closing.abort();
        let core = self.core.clone();
        async move { core.lock().await.take().map(Memory::into_store) }
    }

    /// `abort` (if any) and the memory's closing, as one signal (for an LLM call, or a wait).
    pub fn signal(&self, abort: Option<&AbortSignal>) -> AbortSignal {
        let both = AbortSignal::new();
        for cause in abort.into_iter().chain([&self.closing]) {
            let b = both.clone();
            cause.on_abort(move || b.abort());
        }
        both
    }

    /// An error of a call cancelled by closing is `Closed`, whatever the transport made of it.
    fn closed_wins(&self, e: Error) -> Error {
        if self.is_closed() {
            Error::Closed
        } else {
            e
        }
    }

    /// Runs the next due distillation job, if any: read (a [`JobTicket`]) → think (its LLM calls, the memory
    /// unlocked; embeddings borrow it briefly) → commit. Jobs run one at a time, in order, exactly once.
    pub async fn run_next_job(
        &self,
        llm: &dyn Llm,
        now: TimeMs,
        abort: Option<&AbortSignal>,
        progress: &mut dyn FnMut(&DistillProgress),
    ) -> Result<JobStep> {
        abort.map(AbortSignal::check).transpose()?;
        let _turn = self.job_turn.lock().await;
        let ticket = {
            let memory = self.lock().await?;
            match memory.begin_job(now) {
                Some(t) => t,
                None => {
                    return Ok(match memory.distilled().next_job() {
                        Some(j) => JobStep::WaitUntil(j.next_try),
                        None => JobStep::Idle,
                    })
                }
            }
        };
        let signal = self.signal(abort);
        let (result, spend) = ticket.run(llm, &mut LockedEmbed(self), Some(signal)).await;
        let mut memory = self.lock().await?; // closed meanwhile: the result is dropped, the job stays queued
        let outcome = memory.finish_job(&ticket, result, &spend).await.map_err(|e| self.closed_wins(e))?;
        progress(&memory.distill_progress(&ticket, &outcome));
        Ok(JobStep::Ran(outcome))
    }

    /// One model call of the background embedding of long texts ([`Memory::embed_pending_step`]), under the
    /// lock; returns the units still pending.
    pub async fn embed_pending_step(&self) -> Result<usize> {
        self.lock().await?.embed_pending_step().await
    }

    /// `flush()`'s first step (segment every buffer to the end), under the lock.
    pub async fn queue_last_windows(&self, now: TimeMs) -> Result<()> {
        self.lock().await?.queue_last_windows(now).await
    }

    /// Recall, then prune (with the LLM for `llm` mode) — the LLM called without the memory.
    pub async fn recall_pruned(
        &self,
        query: &str,
        options: RecallOptions,
        prune: &PruneOptions,
        llm: Option<&dyn Llm>,
        now: TimeMs,
    ) -> Result<PrunedRecall> {
        needs_llm(prune, llm)?;
        let plan: PrunedRecallPlan = self.lock().await?.plan_pruned_recall(query, options, prune, now).await?;
        let signal = self.signal(prune.abort.as_ref());
        let outcome = plan.run(llm, Some(signal)).await;
        self.finish(outcome).await
    }

    /// Recall with query expansion: the LLM splits the query into sub-queries without the memory, then the memory
    /// recalls them all ([`Memory::recall_expanded`]). When the LLM fails, the recall runs on the query alone and
    /// says why in `expansion.error`: expansion is an aid, and a dead endpoint must not take recall down with it.
    /// An abort (the caller's or `close()`) is an error.
    pub async fn recall_expanded(
        &self,
        query: &str,
        options: RecallOptions,
        llm: &dyn Llm,
        now: TimeMs,
        abort: Option<AbortSignal>,
    ) -> Result<RecallResult> {
        if query.trim().is_empty() {
            return Err(Error::invalid("the query is empty"));
        }
        let signal = self.signal(abort.as_ref());
        let outcome = expand_query(query, &format_time(now), llm, Some(signal)).await;
        let mut memory = self.lock().await.map_err(|e| self.closed_wins(e))?;
        memory.count_llm(&outcome.counters);
        let (queries, failed) = match outcome.result {
            Ok(e) => (e.queries.clone(), Ok(e)),
            Err(Error::Aborted) => return Err(self.closed_wins(Error::Aborted)),
            Err(e) => (Vec::new(), Err(e)),
        };
        let mut result = memory.recall_expanded(query, &queries, options).await?;
        let used = result.expansion.take().map(|e| e.queries).unwrap_or_default();
        result.expansion = Some(match failed {
            Ok(e) => Expansion { queries: used, ..e },
            Err(e) => {
                let c = outcome.counters.expand;
                let usage =
                    Usage { input_tokens: c.input_tokens, output_tokens: c.output_tokens, estimated: c.estimated };
                Expansion {
                    queries: Vec::new(),
                    spent: Spent { calls: c.calls as u32, usage, latency_ms: c.latency_ms },
                    error: Some(format!("{}: {e}", e.code())),
                }
            }
        });
        Ok(result)
    }

    /// `answer`: recall → prune → generate, the LLM called without the memory.
    pub async fn answer(
        &self,
        question: &str,
        options: &AnswerOptions,
        llm: &dyn Llm,
        now: TimeMs,
    ) -> Result<AnswerResult> {
        let plan: AnswerPlan = self.lock().await?.plan_answer(question, options, now).await?;
        let signal = self.signal(options.prune.abort.as_ref());
        let outcome = plan.run(llm, Some(signal)).await;
        self.finish(outcome).await
    }

    /// `answer` over sessions, episodes and facts.
    pub async fn answer_distilled(
        &self,
        question: &str,
        sources: DistilledRecallOptions,
        options: &AnswerOptions,
        llm: &dyn Llm,
        now: TimeMs,
    ) -> Result<AnswerResult> {
        let plan = self.lock().await?.plan_answer_distilled(question, sources, options, now).await?;
        let signal = self.signal(options.prune.abort.as_ref());
        let outcome = plan.run(llm, Some(signal)).await;
        self.finish(outcome).await
    }

    /// Counts what the LLM spent (also when it failed) and hands the result over.
    async fn finish<T>(&self, outcome: PlanOutcome<T>) -> Result<T> {
        if let Ok(mut memory) = self.lock().await {
            memory.count_llm(&outcome.counters);
        }
        outcome.result.map_err(|e| self.closed_wins(e))
    }
}

/// The memory's embedder, lent to a job for one batch of texts at a time.
struct LockedEmbed<'a, S: Store, R: Runtime>(&'a Shared<S, R>);

#[async_trait(?Send)]
impl<S: Store, R: Runtime> TextEmbed for LockedEmbed<'_, S, R> {
    async fn embed_texts(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut memory = self.0.lock().await?;
        memory.embedder.embed_texts(texts).await
    }
}
