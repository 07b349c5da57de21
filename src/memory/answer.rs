//! Pruned recall and answers: recall → prune (none / extractive / QDP) → generate with the user's LLM, and the
//! per-phase LLM counters that `stats()` reports. A child of `memory` so it reads the facade's state directly; the
//! [`Llm`] is passed in by the caller, so the core never learns where the model lives.

use serde::Serialize;

use super::{Memory, RecallOptions, RecallResult, RecalledSession};
use crate::embed::Runtime;
use crate::error::{Error, Result};
use crate::llm::prompts::{self, AnswerReply};
use crate::llm::structured::{chat_json, Structured};
use crate::llm::{AbortSignal, Llm, LlmRequest, Usage};
use crate::recall::prune::{
    self, ExtractiveOptions, KeptSession, PruneMode, PruneSession, PruneTurn, Pruned, ScoredUnit,
};
use crate::store::Store;
use crate::types::{format_time, TimeMs};

/// LLM use of one phase.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhaseCounters {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Sum of call latencies (retries and backoff included).
    pub latency_ms: f64,
    /// Operations of this phase that failed with an LLM error.
    pub errors: u64,
    /// Whether any count was estimated because the server reported no usage.
    pub estimated: bool,
}

impl PhaseCounters {
    fn record<T>(&mut self, s: &Structured<T>) {
        self.calls += s.calls as u64;
        self.input_tokens += s.usage.input_tokens;
        self.output_tokens += s.usage.output_tokens;
        self.latency_ms += s.latency_ms;
        self.estimated |= s.usage.estimated;
    }
}

/// LLM use per phase since the memory was opened (kept in RAM; not persisted).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LlmCounters {
    /// QDP calls.
    pub prune: PhaseCounters,
    /// Answer generation calls.
    pub answer: PhaseCounters,
    /// Distillation (Nemori) calls per step.
    pub segment: PhaseCounters,
    pub narrate: PhaseCounters,
    pub merge: PhaseCounters,
    pub predict: PhaseCounters,
    pub distill: PhaseCounters,
    pub consolidate: PhaseCounters,
}

/// How a recall is pruned.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    pub mode: PruneMode,
    pub extractive: ExtractiveOptions,
    /// The date the question is asked, shown to the LLM (default: now).
    pub question_time: Option<TimeMs>,
    /// Output cap of the QDP call.
    pub max_tokens: Option<u32>,
    pub abort: Option<AbortSignal>,
}

/// LLM calls and tokens one operation spent.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Spent {
    pub calls: u32,
    pub usage: Usage,
    pub latency_ms: f64,
}

impl Spent {
    fn add<T>(&mut self, s: &Structured<T>) {
        self.calls += s.calls;
        self.usage.add(s.usage);
        self.latency_ms += s.latency_ms;
    }
}

/// A recall whose context was pruned.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrunedRecall {
    /// `context` and `contextTokens` are the pruned ones.
    #[serde(flatten)]
    pub recall: RecallResult,
    pub prune: PruneMode,
    /// Tokens of the same sessions unpruned.
    pub unpruned_tokens: usize,
    /// Turns kept, per session, in context order.
    pub kept: Vec<KeptSession>,
    pub spent: Spent,
}

/// Options of `answer`.
#[derive(Debug, Clone)]
pub struct AnswerOptions {
    pub recall: RecallOptions,
    /// Default: QDP (`llm`), the paper's pipeline.
    pub prune: PruneOptions,
    /// Output cap of the answer call.
    pub max_tokens: Option<u32>,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        AnswerOptions {
            recall: RecallOptions::default(),
            prune: PruneOptions { mode: PruneMode::Llm, ..Default::default() },
            max_tokens: Some(256),
        }
    }
}

/// What `answer` returns.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnswerResult {
    pub question: String,
    pub answer: String,
    /// Recalled sessions with their units and scores (best first within a session).
    pub sessions: Vec<RecalledSession>,
    /// The turns that reached the answering model, per session.
    pub kept: Vec<KeptSession>,
    /// The context the answering model saw.
    pub context: String,
    pub context_tokens: usize,
    pub unpruned_tokens: usize,
    pub prune: PruneMode,
    /// Everything the answer cost: pruning and generation.
    pub spent: Spent,
}

/// Units shown per session when all of them are needed for pruning.
const ALL_UNITS: usize = 100_000;

impl<S: Store, R: Runtime> Memory<S, R> {
    /// LLM counters since open.
    pub fn llm_counters(&self) -> LlmCounters {
        self.llm_counters
    }

    fn prune_sessions(&self, recalled: &[RecalledSession]) -> Vec<PruneSession> {
        recalled
            .iter()
            .map(|s| {
                let turns = self.session_turns(&s.id);
                let index = |id: &u64| turns.iter().position(|t| t.id == *id);
                let units = s
                    .units
                    .iter()
                    .map(|u| ScoredUnit { turns: u.turn_ids.iter().filter_map(index).collect(), score: u.score })
                    .collect();
                PruneSession {
                    id: s.id.clone(),
                    rank: s.rank,
                    time: s.first_time,
                    date: format_time(s.first_time),
                    turns: turns
                        .iter()
                        .map(|t| PruneTurn {
                            id: t.id,
                            speaker: t.speaker.clone(),
                            text: t.text.clone(),
                            caption: t.caption.clone(),
                        })
                        .collect(),
                    units,
                }
            })
            .collect()
    }

    /// Recall, then prune the context: `none`, `extractive` (no LLM) or `llm` (QDP, needs `llm`). `now` dates the
    /// question when `prune.question_time` is not given. LLM failures leave the memory unchanged and are counted.
    pub async fn recall_pruned(
        &mut self,
        query: &str,
        options: RecallOptions,
        prune: &PruneOptions,
        llm: Option<&dyn Llm>,
        now: TimeMs,
    ) -> Result<PrunedRecall> {
        if prune.mode == PruneMode::Llm && llm.is_none() {
            return Err(Error::LlmUnavailable("prune \"llm\" needs an LLM: open the memory with `llm`".into()));
        }
        let mut recall = self.recall(query, RecallOptions { units_per_session: ALL_UNITS, ..options }).await?;
        let sessions = self.prune_sessions(&recall.sessions);
        let count = |s: &str| self.embedder.tokenizer().encode(s).len();
        let mut spent = Spent::default();
        let pruned: Pruned = match (prune.mode, llm) {
            (PruneMode::None, _) => prune::none(&sessions, options.chronological, &count),
            (PruneMode::Extractive, _) => {
                prune::extractive(&sessions, &prune.extractive, options.chronological, &count)
            }
            (PruneMode::Llm, Some(llm)) => {
                let date = format_time(prune.question_time.unwrap_or(now));
                let result = prune::llm(
                    &sessions,
                    query,
                    &date,
                    llm,
                    options.chronological,
                    prune.max_tokens,
                    prune.abort.clone(),
                    &count,
                )
                .await;
                match result {
                    Ok((pruned, reply)) => {
                        self.llm_counters.prune.record(&reply);
                        spent.add(&reply);
                        pruned
                    }
                    Err(e) => {
                        self.llm_counters.prune.errors += 1;
                        return Err(e);
                    }
                }
            }
            (PruneMode::Llm, None) => unreachable!("checked above"),
        };
        for s in &mut recall.sessions {
            s.units.truncate(options.units_per_session);
        }
        recall.context = pruned.context;
        recall.context_tokens = pruned.tokens;
        Ok(PrunedRecall {
            recall,
            prune: prune.mode,
            unpruned_tokens: pruned.unpruned_tokens,
            kept: pruned.sessions,
            spent,
        })
    }

    /// Recall + prune + generate: the answer to `question` from this memory, with the evidence it used and what it
    /// cost. `now` dates the question unless `options.prune.question_time` is set.
    pub async fn answer(
        &mut self,
        question: &str,
        options: &AnswerOptions,
        llm: &dyn Llm,
        now: TimeMs,
    ) -> Result<AnswerResult> {
        let pruned = self.recall_pruned(question, options.recall, &options.prune, Some(llm), now).await?;
        let date = format_time(options.prune.question_time.unwrap_or(now));
        let request = LlmRequest {
            json_schema: Some(prompts::answer_schema()),
            max_tokens: options.max_tokens,
            abort: options.prune.abort.clone(),
            ..LlmRequest::new(prompts::answer(&pruned.recall.context, question, &date))
        };
        let reply: Structured<AnswerReply> = match chat_json(llm, &request).await {
            Ok(r) => r,
            Err(e) => {
                self.llm_counters.answer.errors += 1;
                return Err(e);
            }
        };
        self.llm_counters.answer.record(&reply);
        let mut spent = pruned.spent;
        spent.add(&reply);
        Ok(AnswerResult {
            question: question.into(),
            answer: reply.value.answer.trim().to_string(),
            sessions: pruned.recall.sessions,
            kept: pruned.kept,
            context: pruned.recall.context,
            context_tokens: pruned.recall.context_tokens,
            unpruned_tokens: pruned.unpruned_tokens,
            prune: pruned.prune,
            spent,
        })
    }
}
