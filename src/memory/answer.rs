//! Pruned recall and answers: recall → prune (none / extractive / QDP) → generate with the user's LLM, and the
//! per-phase LLM counters that `stats()` reports. A child of `memory` so it reads the facade's state directly; the
//! [`Llm`] is passed in by the caller, so the core never learns where the model lives.

use serde::Serialize;

use std::cell::RefCell;
use std::rc::Rc;

use super::{DistilledRecallOptions, Memory, RecallOptions, RecallResult, RecalledSession};
use crate::embed::Runtime;
use crate::error::{Error, Result};
use crate::llm::fit::{cap_ends, cap_text, chat_json_fitted, chat_json_fitted_first};
use crate::llm::prompts::{self, AnswerReply, ExpandReply, QdpQuotesReply, QdpReply, QdpSession};
use crate::llm::structured::{partial_string_field, Structured};
use crate::llm::{AbortSignal, ChatMessage, JsonSchema, Llm, LlmRequest, PhaseCounters, TextSink, Usage};
use crate::recall::excerpt::{question_terms, Excerpt};
use crate::recall::prune::{
    self, ExtractiveOptions, KeptSession, PruneMode, PruneSession, PruneTurn, Pruned, ScoredUnit,
};
use crate::store::Store;
use crate::text::WordPiece;
use crate::types::{format_time, TimeMs};

/// LLM use per phase since the memory was opened (kept in RAM; not persisted).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LlmCounters {
    /// QDP calls.
    pub prune: PhaseCounters,
    /// Answer generation calls.
    pub answer: PhaseCounters,
    /// Query expansion calls (`recall` with `expand`).
    pub expand: PhaseCounters,
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
    /// Hears the answer as the model writes it (see [`AnswerPlan::run`]).
    pub on_text: Option<TextSink>,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        AnswerOptions {
            recall: RecallOptions::default(),
            prune: PruneOptions { mode: PruneMode::Llm, ..Default::default() },
            max_tokens: Some(256),
            on_text: None,
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

/// Query expansion: the sub-queries a recall merged, what the LLM call cost, and why it failed when it did (the
/// recall then ran on the question alone).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Expansion {
    pub queries: Vec<String>,
    pub spent: Spent,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The user's LLM splits `question` into up to [`prompts::MAX_EXPANSIONS`] search queries, one per part of it. No
/// memory is read: the call needs none, and the caller holds none while it thinks. The queries are cleaned: blank
/// ones, repeats and the question itself are dropped, each is cut to 200 characters.
pub async fn expand_query(
    question: &str,
    question_date: &str,
    llm: &dyn Llm,
    abort: Option<AbortSignal>,
) -> PlanOutcome<Expansion> {
    let mut counters = LlmCounters::default();
    let request = LlmRequest {
        json_schema: Some(prompts::expand_schema()),
        // Three short queries, with room for the JSON around them.
        max_tokens: Some(160),
        abort,
        ..LlmRequest::new(vec![])
    };
    // A pasted document asked about keeps its opening and its end.
    let build = |cap| prompts::expand(&cap_ends(question, cap), question_date);
    // No tokenizer here (no memory is read): ~4 characters a token, which over-counts English WordPiece.
    let count = |s: &str| crate::llm::estimate_tokens(s, None) as usize;
    let reply: Structured<ExpandReply> = match chat_json_fitted(llm, &request, &build, &count).await {
        Ok(r) => r,
        Err(e) => {
            counters.expand.errors += 1;
            return PlanOutcome { result: Err(e), counters };
        }
    };
    counters.expand.record(&reply);
    let mut queries: Vec<String> = Vec::new();
    for q in &reply.value.queries {
        let q: String = q.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(200).collect();
        let seen = |other: &str| other.eq_ignore_ascii_case(&q);
        if q.is_empty() || seen(question.trim()) || queries.iter().any(|o| seen(o)) {
            continue;
        }
        queries.push(q);
    }
    queries.truncate(prompts::MAX_EXPANSIONS);
    let mut spent = Spent::default();
    spent.add(&reply);
    PlanOutcome { result: Ok(Expansion { queries, spent, error: None }), counters }
}

/// Units shown per session when all of them are needed for pruning.
const ALL_UNITS: usize = 100_000;

/// `llm` pruning without an LLM is refused before any work.
pub(super) fn needs_llm(prune: &PruneOptions, llm: Option<&dyn Llm>) -> Result<()> {
    if prune.mode.uses_llm() && llm.is_none() {
        return Err(no_llm());
    }
    Ok(())
}

fn no_llm() -> Error {
    Error::LlmUnavailable("prune \"llm\" needs an LLM: open the memory with `llm`".into())
}

/// What an LLM step produced, and what it spent (counted also when it failed).
pub struct PlanOutcome<T> {
    pub result: Result<T>,
    pub counters: LlmCounters,
}

/// A pruned recall as read from the memory (under its lock): the recall with every unit of its sessions, and
/// those sessions as pruning sees them. Owned, so the LLM is called without the memory.
pub struct PrunedRecallPlan {
    query: String,
    recall: RecallResult,
    sessions: Vec<PruneSession>,
    options: RecallOptions,
    mode: PruneMode,
    extractive: ExtractiveOptions,
    question_date: String,
    max_tokens: Option<u32>,
    tokenizer: Rc<WordPiece>,
}

impl PrunedRecallPlan {
    fn count(&self, s: &str) -> usize {
        self.tokenizer.encode(s).len()
    }

    /// Prunes (`llm` mode: one QDP call) and returns the recall with the pruned context.
    pub async fn run(self, llm: Option<&dyn Llm>, abort: Option<AbortSignal>) -> PlanOutcome<PrunedRecall> {
        let mut counters = LlmCounters::default();
        let count = |s: &str| self.count(s);
        let chronological = self.options.chronological;
        let mut spent = Spent::default();
        let pruned = match (self.mode, llm) {
            (PruneMode::None, _) => prune::none(&self.sessions, chronological, &count),
            (PruneMode::Extractive, _) => prune::extractive(&self.sessions, &self.extractive, chronological, &count),
            (mode @ (PruneMode::Llm | PruneMode::LlmSpans), Some(llm)) => {
                let ask = QdpAsk {
                    mode,
                    sessions: &self.sessions,
                    question: &self.query,
                    question_date: &self.question_date,
                    chronological,
                    max_tokens: self.max_tokens,
                    abort,
                };
                let outcome = qdp(&ask, llm, &count).await.map(|(pruned, reply)| {
                    counters.prune.record(&reply);
                    spent.add(&reply);
                    pruned
                });
                match outcome {
                    Ok(pruned) => {
                        if pruned.sessions.is_empty() && !self.sessions.is_empty() {
                            // A small model that keeps nothing (or only ids that do not exist) would leave the
                            // answer without evidence: keep the best-scoring turns instead, and count it.
                            counters.prune.fallbacks += 1;
                            prune::extractive(&self.sessions, &self.extractive, chronological, &count)
                        } else {
                            // What it kept, and always each session's best unit.
                            let kept = prune::with_best_units(&self.sessions, &pruned.sessions);
                            let (context, sessions) = prune::render(&self.sessions, &kept, chronological);
                            let tokens = count(&context);
                            Pruned { sessions, context, tokens, ..pruned }
                        }
                    }
                    Err(e) => {
                        counters.prune.errors += 1;
                        return PlanOutcome { result: Err(e), counters };
                    }
                }
            }
            (PruneMode::Llm | PruneMode::LlmSpans, None) => return PlanOutcome { result: Err(no_llm()), counters },
        };
        let mut recall = self.recall;
        for s in &mut recall.sessions {
            s.units.truncate(self.options.units_per_session);
        }
        recall.context = pruned.context;
        recall.context_tokens = pruned.tokens;
        let result = PrunedRecall {
            recall,
            prune: pruned.mode,
            unpruned_tokens: pruned.unpruned_tokens,
            kept: pruned.sessions,
            spent,
        };
        PlanOutcome { result: Ok(result), counters }
    }
}

/// What a QDP call is asked: `mode` [`PruneMode::Llm`] (the model lists the ids of the lines to keep) or
/// [`PruneMode::LlmSpans`] (it copies them word for word), about `sessions`, for `question` asked on
/// `question_date` (shown as given, e.g. `2023-07-01 10:00 UTC`).
pub struct QdpAsk<'a> {
    pub mode: PruneMode,
    pub sessions: &'a [PruneSession],
    pub question: &'a str,
    pub question_date: &'a str,
    pub chronological: bool,
    /// The reply's output cap (default: one fit for the shape and the number of lines).
    pub max_tokens: Option<u32>,
    pub abort: Option<AbortSignal>,
}

/// QDP with the user's LLM: the sessions under their dates, the question, and the reply's kept lines rendered in
/// their original wording; what the call cost.
pub async fn qdp(ask: &QdpAsk<'_>, llm: &dyn Llm, count: &dyn Fn(&str) -> usize) -> Result<(Pruned, Structured<()>)> {
    let sessions = ask.sessions;
    match ask.mode {
        PruneMode::LlmSpans => {
            let shape = QdpShape {
                schema: prompts::qdp_quotes_schema(),
                prompt: prompts::qdp_quotes,
                // The reply copies whole lines.
                tokens_per_line: 40,
            };
            let kept = |_: &[usize], reply: &QdpQuotesReply| prune::kept_from_quotes(sessions, &reply.quotes);
            let (pruned, reply) = qdp_shaped(ask, &shape, llm, count, kept).await?;
            Ok((pruned, reply.map(drop)))
        }
        _ => {
            let shape = QdpShape {
                schema: prompts::qdp_schema(),
                prompt: prompts::qdp,
                // The reply lists line ids (~6 tokens each).
                tokens_per_line: 8,
            };
            let kept = |order: &[usize], reply: &QdpReply| prune::kept_from_reply(sessions, order, reply);
            let (pruned, reply) = qdp_shaped(ask, &shape, llm, count, kept).await?;
            Ok((pruned, reply.map(drop)))
        }
    }
}

/// The shape of a QDP reply: its schema, its prompt, and the output it needs per line of memory.
struct QdpShape {
    schema: JsonSchema,
    prompt: fn(&[QdpSession], &str, &str) -> Vec<ChatMessage>,
    tokens_per_line: u32,
}

async fn qdp_shaped<T: serde::de::DeserializeOwned>(
    ask: &QdpAsk<'_>,
    shape: &QdpShape,
    llm: &dyn Llm,
    count: &dyn Fn(&str) -> usize,
    kept_of: impl Fn(&[usize], &T) -> Vec<Vec<usize>>,
) -> Result<(Pruned, Structured<T>)> {
    let sessions = ask.sessions;
    let (full, _) = prune::render(sessions, &prune::all_turns(sessions), ask.chronological);
    let unpruned_tokens = count(&full);
    let (qs, order) = prune::qdp_sessions(sessions, ask.chronological);
    let lines: usize = qs.iter().map(|s| s.lines.len()).sum();
    // An output cap fit for the reply, unless the caller set one.
    let max_tokens = ask.max_tokens.unwrap_or((64 + shape.tokens_per_line * lines as u32).min(1_024));
    let request = LlmRequest {
        json_schema: Some(shape.schema.clone()),
        max_tokens: Some(max_tokens),
        abort: ask.abort.clone(),
        ..LlmRequest::new(vec![])
    };
    // A line too long for the window (a pasted document) keeps the sentences the question asks about.
    let terms = question_terms(ask.question);
    let excerpts: Vec<Vec<Option<Excerpt>>> =
        qs.iter().map(|s| s.lines.iter().map(|l| Excerpt::new(l, &terms)).collect()).collect();
    let build = |cap| {
        let capped: Vec<QdpSession> = qs
            .iter()
            .zip(&excerpts)
            .map(|(s, ex)| QdpSession {
                lines: s.lines.iter().zip(ex).map(|(l, e)| cut_line(l, e.as_ref(), cap)).collect(),
                ..s.clone()
            })
            .collect();
        (shape.prompt)(&capped, &cap_ends(ask.question, cap), ask.question_date)
    };
    let reply: Structured<T> = chat_json_fitted(llm, &request, &build, count).await?;
    let kept = kept_of(&order, &reply.value);
    let (context, sessions_kept) = prune::render(sessions, &kept, ask.chronological);
    let tokens = count(&context);
    Ok((Pruned { mode: ask.mode, sessions: sessions_kept, context, tokens, unpruned_tokens }, reply))
}

/// What the answer reads from the memory: a pruned-recall plan, or a fixed context (distilled recall).
enum AnswerContext {
    Pruned(Box<PrunedRecallPlan>),
    Fixed { sessions: Vec<RecalledSession>, context: String, tokens: usize },
}

/// An answer as read from the memory; [`AnswerPlan::run`] prunes and generates without it.
pub struct AnswerPlan {
    question: String,
    date: String,
    context: AnswerContext,
    max_tokens: Option<u32>,
    on_text: Option<TextSink>,
    tokenizer: Rc<WordPiece>,
}

/// The answer call's listener, for the caller's `sink`: the `answer` field of the reply being written, each time it
/// changes (a retry starts it again).
/// A quoted line at most `cap` characters long: its excerpt for the question when it has one, else its head.
fn cut_line(line: &str, excerpt: Option<&Excerpt>, cap: usize) -> String {
    match excerpt {
        Some(e) => e.cut(cap).into_owned(),
        None => cap_text(line, cap).into_owned(),
    }
}

fn answer_sink(sink: Option<TextSink>) -> Option<TextSink> {
    let sink = sink?;
    let heard = RefCell::new(String::new());
    Some(TextSink::new(move |raw| {
        let Some(answer) = partial_string_field(raw, "answer") else { return };
        let answer = answer.trim_start();
        if *heard.borrow() != answer {
            answer.clone_into(&mut heard.borrow_mut());
            sink.send(answer);
        }
    }))
}

impl AnswerPlan {
    /// Prunes (when planned) and asks the model. `on_text` hears the answer as it is written (a streamed call);
    /// the result's answer is the whole reply, trimmed.
    pub async fn run(self, llm: &dyn Llm, abort: Option<AbortSignal>) -> PlanOutcome<AnswerResult> {
        let on_text = answer_sink(self.on_text.clone());
        let mut counters = LlmCounters::default();
        let (sessions, kept, context, context_tokens, unpruned_tokens, prune, mut spent) = match self.context {
            AnswerContext::Pruned(plan) => {
                let outcome = plan.run(Some(llm), abort.clone()).await;
                counters = outcome.counters;
                match outcome.result {
                    Ok(p) => (
                        p.recall.sessions,
                        p.kept,
                        p.recall.context,
                        p.recall.context_tokens,
                        p.unpruned_tokens,
                        p.prune,
                        p.spent,
                    ),
                    Err(e) => return PlanOutcome { result: Err(e), counters },
                }
            }
            AnswerContext::Fixed { sessions, context, tokens } => {
                (sessions, Vec::new(), context, tokens, tokens, PruneMode::None, Spent::default())
            }
        };
        let request = LlmRequest {
            json_schema: Some(prompts::answer_schema()),
            max_tokens: self.max_tokens,
            on_text,
            abort,
            ..LlmRequest::new(vec![])
        };
        // A context longer than the model's window: its lines are cut to a common length (a pasted document gives
        // way, the sessions after it stay; it keeps the sentences the question asks about), or when there are too
        // many lines for that, the whole is cut at its end.
        let terms = question_terms(&self.question);
        let lines: Vec<(&str, Option<Excerpt>)> = context.lines().map(|l| (l, Excerpt::new(l, &terms))).collect();
        let per_line = |cap| {
            let cut = if cap == usize::MAX {
                context.clone()
            } else {
                lines.iter().map(|(l, e)| cut_line(l, e.as_ref(), cap)).collect::<Vec<_>>().join("\n")
            };
            prompts::answer(&cut, &cap_ends(&self.question, cap), &self.date)
        };
        let at_end = |cap| prompts::answer(&cap_text(&context, cap), &cap_ends(&self.question, cap), &self.date);
        let count = |s: &str| self.tokenizer.encode(s).len();
        let builds: [&dyn Fn(usize) -> Vec<ChatMessage>; 2] = [&per_line, &at_end];
        let fitted = chat_json_fitted_first(llm, &request, &builds, &count).await;
        let reply: Structured<AnswerReply> = match fitted {
            Ok(r) => r,
            Err(e) => {
                counters.answer.errors += 1;
                return PlanOutcome { result: Err(e), counters };
            }
        };
        counters.answer.record(&reply);
        spent.add(&reply);
        let result = AnswerResult {
            question: self.question,
            answer: reply.value.answer.trim().to_string(),
            sessions,
            kept,
            context,
            context_tokens,
            unpruned_tokens,
            prune,
            spent,
        };
        PlanOutcome { result: Ok(result), counters }
    }
}

impl LlmCounters {
    fn add(&mut self, o: &LlmCounters) {
        for (a, b) in self.phases_mut().into_iter().zip(o.phases()) {
            a.add(b);
        }
    }

    fn phases(&self) -> [&PhaseCounters; 9] {
        [
            &self.prune,
            &self.answer,
            &self.expand,
            &self.segment,
            &self.narrate,
            &self.merge,
            &self.predict,
            &self.distill,
            &self.consolidate,
        ]
    }

    fn phases_mut(&mut self) -> [&mut PhaseCounters; 9] {
        [
            &mut self.prune,
            &mut self.answer,
            &mut self.expand,
            &mut self.segment,
            &mut self.narrate,
            &mut self.merge,
            &mut self.predict,
            &mut self.distill,
            &mut self.consolidate,
        ]
    }
}

impl<S: Store, R: Runtime> Memory<S, R> {
    /// LLM counters since open.
    pub fn llm_counters(&self) -> LlmCounters {
        self.llm_counters
    }

    /// Adds what an LLM step spent to the counters `stats()` reports.
    pub fn count_llm(&mut self, spent: &LlmCounters) {
        self.llm_counters.add(spent);
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
                            // As `render_session` shows it: screened, relative times dated.
                            text: crate::text::prompt_text(&t.text, t.time, self.config.screen_memory),
                            caption: t.caption.clone(),
                        })
                        .collect(),
                    units,
                }
            })
            .collect()
    }

    /// Reads what a pruned recall needs (the recall itself, with every unit).
    pub async fn plan_pruned_recall(
        &mut self,
        query: &str,
        options: RecallOptions,
        prune: &PruneOptions,
        now: TimeMs,
    ) -> Result<PrunedRecallPlan> {
        let recall = self.recall(query, RecallOptions { units_per_session: ALL_UNITS, ..options }).await?;
        let sessions = self.prune_sessions(&recall.sessions);
        Ok(PrunedRecallPlan {
            query: query.into(),
            recall,
            sessions,
            options,
            mode: prune.mode,
            extractive: prune.extractive,
            question_date: format_time(prune.question_time.unwrap_or(now)),
            max_tokens: prune.max_tokens,
            tokenizer: self.embedder.shared_tokenizer(),
        })
    }

    /// Reads what an answer needs: the pruned-recall plan, and the question's date.
    pub async fn plan_answer(&mut self, question: &str, options: &AnswerOptions, now: TimeMs) -> Result<AnswerPlan> {
        let plan = self.plan_pruned_recall(question, options.recall, &options.prune, now).await?;
        Ok(AnswerPlan {
            question: question.into(),
            date: format_time(options.prune.question_time.unwrap_or(now)),
            context: AnswerContext::Pruned(Box::new(plan)),
            max_tokens: options.max_tokens,
            on_text: options.on_text.clone(),
            tokenizer: self.embedder.shared_tokenizer(),
        })
    }

    /// Reads what an answer over sessions, episodes and facts needs (its context is not pruned).
    pub async fn plan_answer_distilled(
        &mut self,
        question: &str,
        sources: DistilledRecallOptions,
        options: &AnswerOptions,
        now: TimeMs,
    ) -> Result<AnswerPlan> {
        let r = self.recall_distilled(question, sources).await?;
        Ok(AnswerPlan {
            question: question.into(),
            date: format_time(options.prune.question_time.unwrap_or(now)),
            context: AnswerContext::Fixed { sessions: r.sessions, context: r.context, tokens: r.context_tokens },
            max_tokens: options.max_tokens,
            on_text: options.on_text.clone(),
            tokenizer: self.embedder.shared_tokenizer(),
        })
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
        needs_llm(prune, llm)?;
        let plan = self.plan_pruned_recall(query, options, prune, now).await?;
        let outcome = plan.run(llm, prune.abort.clone()).await;
        self.count_llm(&outcome.counters);
        outcome.result
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
        let plan = self.plan_answer(question, options, now).await?;
        let outcome = plan.run(llm, options.prune.abort.clone()).await;
        self.count_llm(&outcome.counters);
        outcome.result
    }

    /// `answer` over [`recall_distilled`](Self::recall_distilled)'s context (no pruning).
    pub async fn answer_distilled(
        &mut self,
        question: &str,
        sources: DistilledRecallOptions,
        options: &AnswerOptions,
        llm: &dyn Llm,
        now: TimeMs,
    ) -> Result<AnswerResult> {
        let plan = self.plan_answer_distilled(question, sources, options, now).await?;
        let outcome = plan.run(llm, options.prune.abort.clone()).await;
        self.count_llm(&outcome.counters);
        outcome.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ScriptedLlm;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    fn session(id: &str, rank: usize, time: f64, lines: &[&str]) -> PruneSession {
        let turns = lines
            .iter()
            .enumerate()
            .map(|(n, l)| PruneTurn {
                id: (rank * 100 + n) as u64,
                speaker: "A".into(),
                text: l.to_string(),
                caption: None,
            })
            .collect::<Vec<_>>();
        let units = vec![ScoredUnit { turns: vec![0], score: 0.5 }];
        PruneSession { id: id.into(), rank, time, date: format!("day {time}"), turns, units }
    }

    /// A chronological QDP request with the default output cap.
    fn ask<'a>(mode: PruneMode, sessions: &'a [PruneSession], question: &'a str, date: &'a str) -> QdpAsk<'a> {
        QdpAsk { mode, sessions, question, question_date: date, chronological: true, max_tokens: None, abort: None }
    }

    fn two() -> Vec<PruneSession> {
        vec![
            session("late", 1, 2.0, &["one two", "three four", "five six", "seven eight", "nine ten", "x y"]),
            session("early", 2, 1.0, &["a b", "c d", "e f", "g h"]),
        ]
    }

    #[test]
    fn qdp_keeps_the_named_lines_in_their_original_wording() {
        let sessions = two();
        let llm =
            ScriptedLlm::new([
                Ok("```json\n{\"keep\": [\"1.2\", \"2.5\", \"9.1\", \"x\", \"2.99\"]}\n```".to_string()),
            ]);
        let (p, reply) =
            pollster::block_on(qdp(&ask(PruneMode::Llm, &sessions, "what?", "2023-07-01"), &llm, &words)).unwrap();
        assert_eq!(reply.calls, 1);
        // Chronological: label 1 = "early", label 2 = "late".
        assert_eq!(p.sessions.len(), 2);
        assert_eq!((p.sessions[0].id.as_str(), p.sessions[0].kept.clone()), ("early", vec![1]));
        assert_eq!((p.sessions[1].id.as_str(), p.sessions[1].kept.clone()), ("late", vec![4]));
        assert!(p.context.contains("A: c d") && p.context.contains("A: nine ten"), "{}", p.context);
        assert!(p.tokens < p.unpruned_tokens);
        let sent = &llm.requests.borrow()[0];
        assert!(sent.json_schema.is_some());
        assert!(sent.messages[1].content.contains("[2.5] A: nine ten"));
    }

    #[test]
    fn quoting_qdp_keeps_the_lines_its_quotes_come_from() {
        let sessions = two();
        // An exact line, a line with a word changed (3 of 4 words shared), and quotes that match nothing or are
        // too short to say anything.
        let llm = ScriptedLlm::new([Ok(
            "{\"quotes\": [\"A: c d\", \"A: nine TEN\", \"A: seven eights\", \"zebra crossing today\", \"x\"]}"
                .to_string(),
        )]);
        let (p, reply) =
            pollster::block_on(qdp(&ask(PruneMode::LlmSpans, &sessions, "what?", "2023-07-01"), &llm, &words)).unwrap();
        assert_eq!(reply.calls, 1);
        assert_eq!(p.mode, PruneMode::LlmSpans);
        let kept: Vec<(&str, Vec<usize>)> = p.sessions.iter().map(|s| (s.id.as_str(), s.kept.clone())).collect();
        assert_eq!(kept, vec![("early", vec![1]), ("late", vec![3, 4])]);
        let sent = &llm.requests.borrow()[0];
        assert_eq!(sent.json_schema.as_ref().map(|s| s.name), Some("qdp_quotes"));
        assert!(sent.messages[1].content.contains("\nA: nine ten") && !sent.messages[1].content.contains("[2.5]"));
    }

    #[test]
    fn a_qdp_that_keeps_nothing_gives_an_empty_context() {
        let llm = ScriptedLlm::new([Ok("{\"keep\": []}".to_string())]);
        let sessions = two();
        let (p, _) = pollster::block_on(qdp(&ask(PruneMode::Llm, &sessions, "q", "d"), &llm, &words)).unwrap();
        assert!(p.sessions.is_empty() && p.context.is_empty());
    }
}
