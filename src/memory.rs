//! Memory: the facade. Holds one memory's state in RAM (sessions, turns, unit vectors), keeps it in step with the
//! [`Store`], and answers recall. Plain Rust over two traits ([`Store`], [`Runtime`]), so it runs natively in tests
//! and in the page unchanged. It never knows about JavaScript.

use rustc_hash::FxHashMap;

use serde::Serialize;

mod answer;
mod distill;
mod shared;
#[cfg(feature = "sync")]
mod sync;
mod transfer;
mod units;

pub use crate::llm::PhaseCounters;
pub use answer::{
    expand_query, qdp, AnswerOptions, AnswerPlan, AnswerResult, Expansion, LlmCounters, PlanOutcome, PruneOptions,
    PrunedRecall, PrunedRecallPlan, Spent,
};
pub use distill::{
    DistillProgress, DistillStats, DistilledRecall, DistilledRecallOptions, DistilledSources, FlushReport, JobOutcome,
    JobTicket, ParkedJob, Scored,
};
pub use shared::{JobStep, Shared};
#[cfg(feature = "sync")]
pub use sync::{SyncApplied, SyncOutgoing};
pub use transfer::{Export, ExportSession, ExportTurn, ImportReport, EXPORT_FORMAT, EXPORT_VERSION};

use crate::embed::{Device, EmbedConfig, Embedder, Runtime, DIM, MODEL_ID};
use crate::error::{Error, Result};
use crate::index::vectors::Precision;
use crate::index::{Bm25Index, VectorIndex};
use crate::recall::{self, RecallMethod};
use crate::sort;
use crate::store::{Meta, Store, StoredUnit, WriteBatch, SCHEMA_VERSION};
use crate::types::{format_time, validate_message, InputLimits, MessageInput, Session, TimeMs, Turn, Unit, UnitMode};

/// Below this many units left to index at open, the build is too short (~5 ms) to be worth keeping its result:
/// [`Memory::save_lexical`] writes only after building at least this many, and at least a tenth of all.
const LEXICAL_SAVE_MIN: usize = 1_000;
/// At most this many bytes of prompt lines are kept between recalls ([`PromptLines`]); past it they start again.
const PROMPT_LINES_BYTES: usize = 2 << 20;

/// Windows of a unit's text `addMessages` embeds before it resolves; a longer text (over ~900 tokens, ~3,500
/// characters: a pasted document) gets this many spread over it at once, stored and recallable, and the rest in the
/// background ([`Memory::embed_pending_step`]). A 40,000-character paste is ~45 windows, ~11 s of model calls in
/// the page: the chat would wait on all of them, where these take one or two calls. The background embeds every
/// window again, these included (~9% more model time for that paste), so that the vectors it ends with are those of
/// embedding the whole text at once: which of a unit's rows came from where is not kept.
pub const EMBED_NOW_WINDOWS: usize = 4;

/// Options fixed when a memory is opened.
#[derive(Debug, Clone, Copy)]
pub struct MemoryConfig {
    pub unit_mode: UnitMode,
    pub limits: InputLimits,
    pub embed: EmbedConfig,
    /// Without an explicit session, a message more than this long after the previous one starts a new session.
    pub session_gap_ms: f64,
    /// How vectors are held in RAM: int8 (default) or f32 (for measuring what quantisation costs).
    pub vectors: Precision,
    /// Nemori distillation (episodes and facts) in background jobs; `None`: off.
    pub distill: Option<crate::distill::DistillConfig>,
    /// Withhold stored messages that instruct an AI from every prompt loci writes (default on: `text::screen`).
    /// Off for an app whose users store prompts as content (a prompt-engineering chat).
    pub screen_memory: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            unit_mode: UnitMode::Pair,
            limits: InputLimits::default(),
            embed: EmbedConfig::default(),
            session_gap_ms: 30.0 * 60.0 * 1000.0,
            vectors: Precision::default(),
            distill: None,
            screen_memory: true,
        }
    }
}

/// What `addMessages` did.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AddReport {
    pub session: String,
    pub turn_ids: Vec<u64>,
    pub units_embedded: usize,
    /// Messages not stored because they hold nothing (blank content, no caption), by position in the call.
    pub skipped: Vec<SkippedMessage>,
}

/// A message `addMessages` left out, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SkippedMessage {
    pub index: usize,
    pub reason: String,
}

/// Options of one recall.
#[derive(Debug, Clone, Copy)]
pub struct RecallOptions {
    /// Sessions to return (the papers' k = 3).
    pub k: usize,
    /// Best units shown per session.
    pub units_per_session: usize,
    /// Render sessions in time order (true) or by rank.
    pub chronological: bool,
    /// How sessions are scored; [`RecallMethod::Tir`] is the papers' Turn Isolation Retrieval.
    pub method: RecallMethod,
}

impl Default for RecallOptions {
    fn default() -> Self {
        RecallOptions { k: 3, units_per_session: 3, chronological: true, method: RecallMethod::default() }
    }
}

/// A unit behind a recalled session.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecalledUnit {
    pub id: u32,
    pub score: f32,
    pub turn_ids: Vec<u64>,
    pub text: String,
}

/// One recalled session with its evidence.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecalledSession {
    pub id: String,
    pub rank: usize,
    pub score: f32,
    pub first_time: TimeMs,
    pub last_time: TimeMs,
    pub units: Vec<RecalledUnit>,
}

/// The result of `recall`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecallResult {
    pub query: String,
    /// Query expansion, when it was asked for: the sub-queries whose rankings were merged with the query's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expansion: Option<Expansion>,
    pub sessions: Vec<RecalledSession>,
    /// The sessions as clean text under date headers, ready to put (fenced) into a prompt.
    pub context: String,
    /// Rough token count of `context` (WordPiece tokens of the embedding model).
    pub context_tokens: usize,
    pub device: Device,
}

/// Counts for `stats()`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub sessions: usize,
    pub turns: usize,
    pub units: usize,
    pub vectors: usize,
    pub dim: usize,
    pub model: String,
    pub device: Device,
    pub unit_mode: UnitMode,
    /// LLM calls, tokens and latency per phase since open.
    pub llm: LlmCounters,
    /// Bytes the vector index holds in RAM (rows, scales, row owners).
    pub vector_bytes: usize,
    /// Distillation: buffer, jobs (parked ones listed), episodes and facts.
    pub distill: DistillStats,
    /// Stored records that did not decode and were set aside at open (kept, never deleted).
    pub quarantined: Vec<crate::store::Quarantined>,
    /// Units whose long text has windows still to embed in the background (see [`EMBED_NOW_WINDOWS`]).
    pub pending_embeddings: usize,
}

/// One memory.
pub struct Memory<S: Store, R: Runtime> {
    store: S,
    llm_counters: LlmCounters,
    embedder: Embedder<R>,
    config: MemoryConfig,
    meta: Meta,
    sessions: Vec<Session>,
    session_index: FxHashMap<String, u32>,
    /// Turn ids of each session (by session number), in sequence order.
    session_turns: Vec<Vec<u64>>,
    turns: crate::types::Turns,
    units: units::UnitTable,
    vectors: VectorIndex,
    /// Episodes, facts, jobs and the segmentation buffer (see `memory/distill.rs`).
    distill: crate::distill::DistillState,
    /// Counts forgets: a distillation job that started before one is discarded at commit (see `finish_job`).
    distill_epoch: u64,
    /// BM25 over the same units, for lexical evidence.
    lexical: Bm25Index,
    /// Units opened but not yet in `lexical`: open leaves the BM25 build (most of a large open's CPU time) to
    /// [`Memory::index_lexical`] slices, and the first recall finishes whatever is left.
    lexical_pending: Vec<u32>,
    /// This open built most of the lexical index itself (the store kept none it could adopt, or one that covers too
    /// few units): once built, [`Memory::save_lexical`] keeps it for the next open. Cleared by a change to the index
    /// during the build or after it (that index may no longer be the one a build in open order gives).
    lexical_save_due: bool,
    scratch: Vec<f32>,
    lexical_scratch: Vec<f32>,
    rank_scratch: recall::Scratch,
    /// Records that did not decode at the last load.
    quarantined: Vec<crate::store::Quarantined>,
    /// The background embedding of the first unit of `meta.embed_pending` under way (see
    /// [`Memory::embed_pending_step`]).
    backfill: Option<Backfill>,
    /// The prompt lines of the turns recalled contexts showed lately, kept between recalls.
    prompt_lines: std::cell::RefCell<PromptLines>,
    /// The sync log and turn map, once this memory has synced (see `memory/sync.rs`).
    #[cfg(feature = "sync")]
    sync: Option<sync::SyncRecord>,
}

/// Each shown turn's text as a prompt gets it ([`crate::text::prompt_text`] on one line), by turn id. Screening and
/// dating the turns of the recalled sessions took ~4% of a recall at 100,000 units (bench/profile-recall.mjs), for
/// the same turns at every recall; a turn's line never changes while its id stands. Emptied wherever turns leave
/// (a forget reloads; `forget_all` starts the ids again), and once it holds [`PROMPT_LINES_BYTES`].
#[derive(Default)]
struct PromptLines {
    // A BTreeMap<u64, String> as `Turns` keeps captions in: the same code in the wasm, not a map type of its own.
    by_turn: std::collections::BTreeMap<u64, String>,
    bytes: usize,
}

impl PromptLines {
    fn clear(&mut self) {
        *self = PromptLines::default();
    }
}

/// A unit's windows and the vectors of those embedded so far.
struct Backfill {
    unit: u32,
    windows: Vec<Vec<u32>>,
    vectors: Vec<Vec<f32>>,
}

/// What BM25 indexes of a unit, and what feedback tokenizes again: the words of `unit_text` without building it
/// (its separators are not alphanumeric): each turn's speaker and text, and an image's caption.
fn lexical_parts<'t>(turns: &'t crate::types::Turns, turn_ids: &[u64]) -> Vec<std::borrow::Cow<'t, str>> {
    let mut parts = Vec::with_capacity(turn_ids.len() * 2);
    for t in turn_ids.iter().filter_map(|id| turns.get(id)) {
        parts.push(t.speaker.into());
        parts.push(t.text);
        if let Some(caption) = t.caption {
            parts.extend(["The image Caption".into(), caption.into()]);
        }
    }
    parts
}

/// A unit's text, as embedded: its turns' [`Turn::unit_text`], one per line.
fn unit_text(turn_texts: impl Iterator<Item = String>) -> String {
    turn_texts.collect::<Vec<_>>().join("\n")
}

impl<S: Store, R: Runtime> Memory<S, R> {
    /// Opens a memory over `store`, refusing a database built with another model, dimension or unit mode.
    pub async fn open(store: S, embedder: Embedder<R>, config: MemoryConfig) -> Result<Self> {
        let snapshot = store.load().await?;
        #[cfg(feature = "sync")]
        let sync_record = match store.load_sync().await? {
            Some(bytes) => Some(sync::decode(&bytes)?),
            None => None,
        };
        let meta = match snapshot.meta {
            Some(m) => {
                if m.schema != SCHEMA_VERSION {
                    return Err(Error::SchemaMismatch(format!(
                        "database schema {} but this loci reads schema {SCHEMA_VERSION}",
                        m.schema
                    )));
                }
                if m.model != MODEL_ID || m.dim as usize != DIM {
                    return Err(Error::ModelMismatch(format!(
                        "database was built with {} (dimension {}), this memory embeds with {MODEL_ID} (dimension {DIM}); \
                         vectors of different models are never mixed: open another name or forget this one",
                        m.model, m.dim
                    )));
                }
                if m.unit_mode != config.unit_mode {
                    return Err(Error::invalid(format!(
                        "database groups turns as {:?} units, the options ask for {:?}",
                        m.unit_mode, config.unit_mode
                    )));
                }
                m
            }
            None => Meta {
                schema: SCHEMA_VERSION,
                model: MODEL_ID.into(),
                dim: DIM as u32,
                unit_mode: config.unit_mode,
                next_turn: 1,
                next_unit: 1,
                embed_pending: Vec::new(),
            },
        };
        let mut memory = Memory {
            store,
            llm_counters: LlmCounters::default(),
            embedder,
            config,
            meta,
            sessions: Vec::new(),
            session_index: FxHashMap::default(),
            session_turns: Vec::new(),
            turns: Default::default(),
            units: Default::default(),
            vectors: VectorIndex::with_precision(DIM, config.vectors),
            lexical: Bm25Index::new(),
            lexical_pending: Vec::new(),
            lexical_save_due: false,
            scratch: Vec::new(),
            lexical_scratch: Vec::new(),
            rank_scratch: recall::Scratch::default(),
            distill: Default::default(),
            distill_epoch: 0,
            quarantined: snapshot.quarantined,
            backfill: None,
            prompt_lines: Default::default(),
            #[cfg(feature = "sync")]
            sync: sync_record,
        };
        memory.fill(snapshot.sessions, snapshot.turns, snapshot.units, snapshot.block);
        memory.distill = crate::distill::DistillState::from_records(snapshot.distill);
        #[cfg(feature = "sync")]
        if memory.resume_sync_clear().await? {
            return Box::pin(Memory::open(memory.store, memory.embedder, config)).await;
        }
        // With records set aside, units may miss turns the kept index saw: it is neither used nor kept again.
        if memory.quarantined.is_empty() && memory.lexical_pending.len() >= LEXICAL_SAVE_MIN {
            // A cache: if it cannot be read, the index is built.
            if let Ok(Some(bytes)) = memory.store.load_lexical().await {
                memory.adopt_lexical(bytes);
            }
            let left = memory.lexical_pending.len();
            memory.lexical_save_due = left >= LEXICAL_SAVE_MIN.max(memory.units.len() / 10);
        }
        Ok(memory)
    }

    /// Takes the lexical index the store kept ([`Store::put_lexical`]) when it indexed exactly the first units of
    /// this open, in open order and with the same turns: it is then the index the build would give, document
    /// numbers included, and only the units after them are left to index. Returns whether it was taken.
    fn adopt_lexical(&mut self, bytes: Vec<u8>) -> bool {
        // The room `fill` reserved for building the index, freed first (the heap keeps its high-water mark).
        self.lexical = Bm25Index::new();
        let adopted = self.adopt_lexical_bytes(bytes);
        if !adopted {
            self.lexical.reserve(self.lexical_pending.len());
        }
        adopted
    }

    fn adopt_lexical_bytes(&mut self, bytes: Vec<u8>) -> bool {
        let Some((mut index, fingerprint)) = Bm25Index::from_bytes(bytes) else {
            return false;
        };
        let n = index.len();
        let opened = &self.lexical_pending;
        if n > opened.len() || !index.units().eq(opened[..n].iter().copied()) {
            return false;
        }
        if self.lexical_fingerprint(opened[..n].iter().copied()) != Some(fingerprint) {
            return false;
        }
        let units = &self.units;
        index.set_sessions(|id| units.get(&id).map_or(0, |u| u.session));
        index.reserve(opened.len() - n);
        self.lexical = index;
        self.lexical_pending.drain(..n);
        true
    }

    /// What the lexical index was built from, besides the units' order: each unit's turns (ids are never reused,
    /// and a turn's text never changes under its id). SipHash (std's `DefaultHasher`, fixed keys) rather than
    /// FxHash, whose state is 32 bits in wasm; if a Rust release changed it, a kept index would be rebuilt once.
    fn lexical_fingerprint(&self, units: impl Iterator<Item = u32>) -> Option<u64> {
        use std::hash::Hasher;
        let mut h = std::hash::DefaultHasher::new();
        for id in units {
            let unit = self.units.get(&id)?;
            h.write_u32(id);
            h.write_u64(unit.turn_ids.len() as u64);
            unit.turn_ids.iter().for_each(|&t| h.write_u64(t));
        }
        Some(h.finish())
    }

    /// Keeps the lexical index in the store once this open has built it (see `lexical_save_due`), for the next
    /// open to adopt; otherwise does nothing. Returns whether it wrote. The browser calls it after the build's last
    /// slice.
    pub async fn save_lexical(&mut self) -> Result<bool> {
        if !self.lexical_save_due || !self.lexical_pending.is_empty() {
            return Ok(false);
        }
        self.lexical_save_due = false;
        let Some(fingerprint) = self.lexical_fingerprint(self.lexical.units()) else {
            return Ok(false);
        };
        let index = &self.lexical;
        self.store.put_lexical(index.persisted_len(), &|sink| index.write_persisted(fingerprint, sink)).await?;
        Ok(true)
    }

    /// Takes in what a store loaded, into an empty state: sessions, turns (of known sessions), units and their
    /// vectors; the units wait in `lexical_pending` for the BM25 index. Sized exactly, and the decoded turns become
    /// the turn table without a copy: the wasm memory only grows, so every transient peak here stays.
    fn fill(
        &mut self,
        mut sessions: Vec<Session>,
        mut turns: crate::types::Turns,
        mut units: Vec<StoredUnit>,
        block: Option<crate::store::RowBlock>,
    ) {
        sort::sort_by(&mut sessions, |a, b| a.first_time.total_cmp(&b.first_time).then(a.id.cmp(&b.id)));
        for s in sessions {
            self.upsert_session(s);
        }
        turns.sort();
        turns.retain(|t| self.session_index.contains_key(t.session));
        // Turns into their sessions, ordered by position: sort small (session, seq, id) keys, not the turns.
        let mut placed: Vec<(u32, u32, u64)> = Vec::with_capacity(turns.len());
        placed.extend(turns.iter().filter_map(|t| Some((*self.session_index.get(t.session)?, t.seq, t.id))));
        placed.sort_unstable();
        // Each session's list sized exactly (pushing one by one leaves up to half of each unused).
        let mut counts = vec![0usize; self.session_turns.len()];
        placed.iter().for_each(|&(n, _, _)| counts[n as usize] += 1);
        self.session_turns.iter_mut().zip(counts).for_each(|(list, c)| list.reserve_exact(c));
        for (n, _, id) in placed {
            self.session_turns[n as usize].push(id);
        }
        self.turns = turns;
        let (in_block, block_turns) = block.as_ref().map_or((0, 0), |b| (b.units.len(), b.units.turn_id_count()));
        let turn_ids = units.iter().map(|su| su.unit.turn_ids.len()).sum::<usize>() + block_turns;
        self.units.reserve(units.len() + in_block, turn_ids);
        self.lexical_pending.reserve(units.len() + in_block);
        self.lexical.reserve(units.len() + in_block);
        if let Some(block) = block {
            let total: usize = block.rows.iter().map(|&n| n as usize).sum();
            let whole = block.rows.len() == block.units.len()
                && block.scales.len() == total
                && block.codes.len() == total * DIM;
            if whole && self.vectors.is_empty() {
                self.fill_block(block, total);
            } else {
                units.extend(block.into_units(DIM)); // each unit checked below
            }
        }
        let rows: usize = units.iter().filter_map(|su| su.vectors.rows(DIM)).sum();
        self.vectors.reserve(rows);
        for su in units {
            if !su.vectors.is_whole(DIM) {
                // Set aside like a record that does not decode: the rest opens.
                self.quarantined.push(crate::store::Quarantined {
                    store: "vectors".into(),
                    key: format!("unit {}", su.unit.id),
                    reason: "a vector of the wrong length".into(),
                });
                continue;
            }
            if let Some(id) = self.place_unit(su) {
                self.lexical_pending.push(id);
            }
        }
    }

    /// The units of a block of `total` int8 rows: the block becomes the vector index in place, the rows of units of
    /// unknown sessions squeezed out (as [`place_unit`](Self::place_unit) skips them).
    fn fill_block(&mut self, block: crate::store::RowBlock, total: usize) {
        let crate::store::RowBlock { mut codes, mut scales, rows, units } = block;
        let session_of: Vec<Option<u32>> =
            units.session_names().iter().map(|name| self.session_index.get(name).copied()).collect();
        let (mut owners, mut sessions) = (Vec::with_capacity(total), Vec::with_capacity(total));
        let (mut read, mut write) = (0usize, 0usize);
        for ((id, name, turn_ids), n) in units.iter().zip(rows) {
            let n = n as usize;
            if let Some(s) = session_of[name] {
                if read != write {
                    codes.copy_within(read * DIM..(read + n) * DIM, write * DIM);
                    scales.copy_within(read..read + n, write);
                }
                owners.extend(std::iter::repeat_n(id, n));
                sessions.extend(std::iter::repeat_n(s, n));
                write += n;
                self.lexical_pending.push(id);
                self.units.push(id, s, turn_ids);
            }
            read += n;
        }
        self.units.sort();
        codes.truncate(write * DIM);
        scales.truncate(write);
        self.vectors.extend_int8(codes, scales, owners, sessions);
    }

    pub fn device(&self) -> Device {
        self.embedder.device()
    }

    /// The embedding model's tokenizer (also used to estimate LLM tokens).
    pub fn tokenizer(&self) -> &crate::text::WordPiece {
        self.embedder.tokenizer()
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    fn upsert_session(&mut self, s: Session) -> u32 {
        match self.session_index.get(&s.id) {
            Some(&n) => {
                self.sessions[n as usize] = s;
                n
            }
            None => {
                let n = self.sessions.len() as u32;
                self.session_index.insert(s.id.clone(), n);
                self.sessions.push(s);
                self.session_turns.push(Vec::new());
                n
            }
        }
    }

    fn insert_unit(&mut self, su: StoredUnit) {
        if !self.lexical_pending.is_empty() {
            self.lexical_save_due = false; // numbered before units opened earlier: not the order an open builds
        }
        if let Some(id) = self.place_unit(su) {
            self.index_unit_lexically(id);
        }
    }

    /// Adds a unit and its vectors (not yet its words); `None` if its session is unknown.
    fn place_unit(&mut self, su: StoredUnit) -> Option<u32> {
        let &n = self.session_index.get(&su.unit.session)?;
        self.vectors.push(su.unit.id, n, &su.vectors);
        let id = su.unit.id;
        self.units.insert(id, n, &su.unit.turn_ids);
        Some(id)
    }

    /// Adds a stored unit to the BM25 index (no-op if it was removed meanwhile).
    fn index_unit_lexically(&mut self, id: u32) {
        let Some(unit) = self.units.get(&id) else { return };
        let n = unit.session;
        self.lexical.insert_parts(id, n, lexical_parts(&self.turns, unit.turn_ids).iter().map(|p| p.as_ref()));
    }

    /// The lexical index as it stands (units opened but not yet indexed are missing from it; see
    /// [`index_lexical`](Self::index_lexical)).
    pub fn lexical_index(&self) -> &Bm25Index {
        &self.lexical
    }

    /// Indexes up to `max_units` of the units opened but not yet in the BM25 index; returns how many are left.
    /// The browser calls it in slices after open (the page stays responsive); recall finishes it first.
    pub fn index_lexical(&mut self, max_units: usize) -> usize {
        // In open order, so document numbers (and rank ties) match an index built all at once.
        let take = max_units.min(self.lexical_pending.len());
        let slice: Vec<u32> = self.lexical_pending.drain(..take).collect();
        for id in slice {
            self.index_unit_lexically(id);
        }
        if take > 0 && self.lexical_pending.is_empty() {
            self.lexical_pending = Vec::new();
            self.lexical.shrink_to_fit();
        }
        self.lexical_pending.len()
    }

    fn remove_unit(&mut self, id: u32) {
        self.lexical_save_due = false;
        if self.units.remove(&id) {
            self.vectors.remove(id);
            self.lexical.remove(id);
        }
    }

    /// Chooses the session for messages without an explicit one: continue the latest session unless the gap since
    /// its last turn is longer than `session_gap_ms`.
    fn auto_session(&self, first_time: TimeMs) -> String {
        let latest = self.sessions.iter().max_by(|a, b| a.last_time.total_cmp(&b.last_time));
        match latest {
            Some(s) if first_time - s.last_time <= self.config.session_gap_ms && first_time >= s.first_time => {
                s.id.clone()
            }
            #[cfg(feature = "sync")]
            // Another device numbers its turns too: its automatic ids would name the same sessions.
            _ if self.sync.is_some() => {
                format!("s{}-{}", self.meta.next_turn, self.sync_device().unwrap_or_default().get(..8).unwrap_or(""))
            }
            _ => format!("s{}", self.meta.next_turn),
        }
    }

    /// Stores messages as turns of one session and embeds the units they complete. All messages are validated
    /// first: on any error nothing is stored. On a storage error the memory in RAM is unchanged too.
    pub async fn add_messages(
        &mut self,
        messages: &[MessageInput],
        session: Option<&str>,
        now: TimeMs,
    ) -> Result<AddReport> {
        if messages.is_empty() {
            return Err(Error::invalid("no messages given"));
        }
        if messages.len() > self.config.limits.max_batch {
            return Err(Error::invalid(format!(
                "{} messages in one call, over the limit of {}",
                messages.len(),
                self.config.limits.max_batch
            )));
        }
        let chars: usize = messages.iter().map(MessageInput::chars).sum();
        if chars > self.config.limits.max_call_chars {
            return Err(Error::invalid(format!(
                "{chars} characters in one call, over the limit of {}: add them in several calls",
                self.config.limits.max_call_chars
            )));
        }
        let mut valid = Vec::with_capacity(messages.len());
        let mut skipped = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            match validate_message(m, i, &self.config.limits)? {
                Some(v) => valid.push(v),
                None => skipped.push(SkippedMessage { index: i, reason: "empty: no content and no caption".into() }),
            }
        }
        if let Some(s) = session {
            if s.trim().is_empty() || s.chars().count() > 200 {
                return Err(Error::invalid("`session` must be a non-empty id of at most 200 characters"));
            }
        }
        if valid.is_empty() {
            let session = session.map(str::to_string).unwrap_or_else(|| self.auto_session(now));
            return Ok(AddReport { session, turn_ids: Vec::new(), units_embedded: 0, skipped });
        }
        let first_time = valid[0].time.unwrap_or(now);
        let session_id = session.map(str::to_string).unwrap_or_else(|| self.auto_session(first_time));

        // Build the new state aside; it replaces the current one only after the store accepted it.
        let existing = self.session_index.get(&session_id).map(|&n| n as usize);
        let mut meta = self.meta.clone();
        let mut sess = match existing {
            Some(n) => self.sessions[n].clone(),
            None => Session { id: session_id.clone(), first_time, last_time: first_time, turn_count: 0, title: None },
        };
        let mut new_turns = Vec::with_capacity(valid.len());
        for v in valid {
            let time = v.time.unwrap_or(now);
            let turn = Turn {
                id: meta.next_turn,
                session: session_id.clone(),
                seq: sess.turn_count,
                speaker: v.speaker,
                text: v.text,
                caption: v.caption,
                time,
                ingested: now,
            };
            meta.next_turn += 1;
            sess.turn_count += 1;
            sess.first_time = sess.first_time.min(time);
            sess.last_time = sess.last_time.max(time);
            new_turns.push(turn);
        }

        // Units: by position within the session. A trailing unit left incomplete by an earlier call is reopened
        // so that (0,1), (2,3), … pairing holds however the messages arrive.
        let size = self.config.unit_mode.size();
        let old_ids: Vec<u64> = existing.map(|n| self.session_turns[n].clone()).unwrap_or_default();
        let open_unit =
            if old_ids.len() % size != 0 { self.unit_containing(*old_ids.last().unwrap_or(&0)) } else { None };
        let reopened: Vec<Turn> = open_unit
            .iter()
            .flat_map(|u| u.turn_ids.iter().filter_map(|id| self.turns.get(id)).map(|t| t.to_turn()))
            .collect();
        let mut pending: Vec<&Turn> = reopened.iter().collect();
        pending.extend(new_turns.iter());
        let groups: Vec<Vec<&Turn>> = pending.chunks(size).map(|c| c.to_vec()).collect();
        let texts: Vec<String> = groups.iter().map(|g| unit_text(g.iter().map(|t| t.unit_text()))).collect();
        let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (windows, window_counts) = self.embedder.embed_some(&text_refs, EMBED_NOW_WINDOWS).await?;
        let mut stored: Vec<StoredUnit> = groups
            .iter()
            .map(|g| {
                let unit = Unit {
                    id: meta.next_unit,
                    session: session_id.clone(),
                    turn_ids: g.iter().map(|t| t.id).collect(),
                };
                meta.next_unit += 1;
                StoredUnit { unit, vectors: Default::default() }
            })
            .collect();
        for w in windows {
            stored[w.text].vectors.extend_from_slice(&w.vector);
        }
        // The reopened unit is replaced: its windows, if still pending, are the new unit's now.
        meta.embed_pending.retain(|id| open_unit.as_ref().is_none_or(|u| u.id != *id));
        let deferred = stored.iter().zip(&window_counts).filter(|(_, &n)| n > EMBED_NOW_WINDOWS);
        meta.embed_pending.extend(deferred.map(|(su, _)| su.unit.id));

        let distill = self.distill_on_add(&session_id, &new_turns, now);
        let batch = WriteBatch {
            meta: Some(meta.clone()),
            sessions: vec![sess.clone()],
            turns: new_turns.clone(),
            units: stored.clone(),
            delete_units: open_unit.iter().map(|u| u.id).collect(),
            distill: distill.clone(),
            ..Default::default()
        };
        self.store.write(batch).await?;
        self.distill.apply(&distill);

        // Committed: apply to RAM.
        self.meta = meta;
        let n = self.upsert_session(sess) as usize;
        if let Some(u) = open_unit {
            self.remove_unit(u.id);
        }
        let turn_ids: Vec<u64> = new_turns.iter().map(|t| t.id).collect();
        for t in new_turns {
            self.session_turns[n].push(t.id);
            self.turns.push(t);
        }
        let units_embedded = stored.len();
        for su in stored {
            self.insert_unit(su);
        }
        Ok(AddReport { session: session_id, turn_ids, units_embedded, skipped })
    }

    fn unit_containing(&self, turn: u64) -> Option<Unit> {
        let unit = self.units.iter().find(|u| u.turn_ids.contains(&turn))?;
        Some(unit.to_unit(&self.sessions.get(unit.session as usize)?.id))
    }

    /// Units whose long text still has windows to embed (see [`EMBED_NOW_WINDOWS`]).
    pub fn pending_embeddings(&self) -> usize {
        self.meta.embed_pending.len()
    }

    /// One model call of the background embedding: the next windows of the oldest pending unit. Once all of its
    /// windows are embedded they replace its vectors, in one write that also takes it off the pending list, and
    /// recall sees them from then on. Returns the units still pending. A caller holds the memory for one call
    /// at a time (`addMessages` and `recall` go between); an error leaves the unit pending, its earlier vectors
    /// in place.
    pub async fn embed_pending_step(&mut self) -> Result<usize> {
        let Some(&id) = self.meta.embed_pending.first() else {
            self.backfill = None;
            return Ok(0);
        };
        if self.backfill.as_ref().is_none_or(|b| b.unit != id) {
            self.backfill = None;
            let Some(unit) = self.units.get(&id) else {
                // Removed since (forgotten, or replaced by the unit a later message completed).
                return self.drop_pending_head().await;
            };
            let text = unit_text(unit.turn_ids.iter().filter_map(|t| self.turns.get(t)).map(|t| t.unit_text()));
            let windows = self.embedder.windows(&text);
            self.backfill = Some(Backfill { unit: id, vectors: Vec::with_capacity(windows.len()), windows });
        }
        let per_call = self.embedder.windows_per_call();
        let b = self.backfill.as_mut().expect("set above");
        let next: Vec<&[u32]> = b.windows.iter().skip(b.vectors.len()).take(per_call).map(|w| &w[..]).collect();
        let vectors = self.embedder.embed_token_windows(&next).await?;
        let b = self.backfill.as_mut().expect("set above");
        b.vectors.extend(vectors);
        if b.vectors.len() < b.windows.len() {
            return Ok(self.meta.embed_pending.len());
        }
        let b = self.backfill.take().expect("set above");
        let unit = self.units.get(&id);
        let Some((unit, session)) = unit.and_then(|u| Some((u, self.sessions.get(u.session as usize)?))) else {
            return self.drop_pending_head().await;
        };
        let (n, unit) = (unit.session, unit.to_unit(&session.id));
        let vectors = crate::index::vectors::Rows::F32(b.vectors.concat());
        let mut meta = self.meta.clone();
        meta.embed_pending.remove(0);
        let stored = StoredUnit { unit, vectors };
        self.store
            .write(WriteBatch { meta: Some(meta.clone()), units: vec![stored.clone()], ..Default::default() })
            .await?;
        self.meta = meta;
        self.vectors.remove(id);
        self.vectors.push(id, n, &stored.vectors);
        Ok(self.meta.embed_pending.len())
    }

    /// Takes the oldest unit off the pending list (it is gone), in the store first.
    async fn drop_pending_head(&mut self) -> Result<usize> {
        let mut meta = self.meta.clone();
        meta.embed_pending.remove(0);
        self.store.write(WriteBatch { meta: Some(meta.clone()), ..Default::default() }).await?;
        self.meta = meta;
        Ok(self.meta.embed_pending.len())
    }

    /// Runs [`embed_pending_step`](Self::embed_pending_step) until no unit is pending (tests, the CLI, and the
    /// benchmarks, which recall right after ingesting).
    pub async fn embed_pending(&mut self) -> Result<()> {
        while self.embed_pending_step().await? > 0 {}
        Ok(())
    }

    /// The query's vector, as `recall` embeds it.
    pub async fn embed_query(&mut self, query: &str) -> Result<Vec<f32>> {
        self.embedder.embed_query(query).await
    }

    /// The token windows `embed_query` runs through the model (bench only: the same input for a raw
    /// onnxruntime-web run).
    #[cfg(feature = "bench")]
    pub fn query_windows(&self, query: &str) -> Vec<Vec<u32>> {
        self.embedder.windows(query)
    }

    /// The `k` units whose vectors best match `query` (a unit vector), best first: ranking alone, given the query's
    /// vector (bench only: how the peers of `npm run bench` are compared, at unit level).
    #[cfg(feature = "bench")]
    pub fn bench_rank_vector(&mut self, query: &[f32], k: usize) -> Vec<u32> {
        self.vectors.scores_into(query, &mut self.scratch);
        // The best rows, kept sorted in a small buffer: O(rows × k) worst case, O(rows) in practice for k = 10.
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (row, &score) in self.scratch.iter().enumerate() {
            let unit = self.vectors.owners()[row];
            if best.len() == k && score <= best[k - 1].0 {
                continue;
            }
            if let Some(i) = best.iter().position(|&(_, u)| u == unit) {
                if best[i].0 >= score {
                    continue;
                }
                best.remove(i); // a better window of the same unit
            }
            let at = best.partition_point(|&(s, _)| s >= score);
            best.insert(at, (score, unit));
            best.truncate(k);
        }
        best.into_iter().map(|(_, unit)| unit).collect()
    }

    /// Ranks sessions by `options.method` over all stored units (dense, lexical or both), then renders the top-k
    /// sessions as text.
    pub async fn recall(&mut self, query: &str, options: RecallOptions) -> Result<RecallResult> {
        self.recall_expanded(query, &[], options).await
    }

    /// [`recall`](Self::recall) of `query` and of each of `expansions` (sub-queries of it, e.g. an LLM's, see
    /// [`expand_query`]), the rankings merged by taking turns ([`recall::interleave`]), the sub-queries' first, so
    /// that each part of the question places its best session. Blank expansions are skipped; the result's `expansion` lists the ones used.
    pub async fn recall_expanded(
        &mut self,
        query: &str,
        expansions: &[String],
        options: RecallOptions,
    ) -> Result<RecallResult> {
        self.check_query(query)?;
        if options.k == 0 || options.k > 1000 {
            return Err(Error::invalid("`k` must be between 1 and 1000"));
        }
        let expansions: Vec<String> = expansions
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty() && self.check_query(e).is_ok())
            .map(String::from)
            .collect();
        self.index_lexical(usize::MAX);
        // The parts first, the whole question last: it is the parts' coverage the merge is for.
        let mut lists = Vec::with_capacity(1 + expansions.len());
        for q in expansions.iter().map(String::as_str).chain(std::iter::once(query)) {
            lists.push(self.rank_query(q, options).await?);
        }
        let ranked = if lists.len() == 1 {
            lists.pop().unwrap_or_default()
        } else {
            recall::interleave(&lists, options.k, |s| s.session)
        };
        let mut result = self.render_recall(query, &ranked, options);
        if !expansions.is_empty() {
            result.expansion = Some(Expansion { queries: expansions, ..Default::default() });
        }
        Ok(result)
    }

    pub(crate) fn check_query(&self, query: &str) -> Result<()> {
        if query.trim().is_empty() {
            return Err(Error::invalid("the query is empty"));
        }
        if query.chars().count() > self.config.limits.max_message_chars {
            return Err(Error::invalid("the query is over the size limit"));
        }
        Ok(())
    }

    /// The top `options.k` sessions for `query` (the lexical index must be up to date).
    async fn rank_query(&mut self, query: &str, options: RecallOptions) -> Result<Vec<recall::SessionScore>> {
        // The methods that read the lexical index embed the query without the memory's common words; the dense-only
        // methods keep paper parity.
        let dense_query =
            if options.method.uses_lexical() { recall::dense_query(query, &self.lexical) } else { query.into() };
        let q = self.embedder.embed_query(&dense_query).await?;
        self.vectors.scores_into(&q, &mut self.scratch);
        self.lexical_scratch.clear();
        if options.method.uses_lexical() {
            self.lexical.scores_into(&self.lexical.query(query), &mut self.lexical_scratch);
        }
        let (units, turns, lexical) = (&self.units, &self.turns, &self.lexical);
        let unit_terms = |id: u32| match units.get(&id) {
            Some(unit) => lexical.terms_of_parts(lexical_parts(turns, unit.turn_ids).iter().map(|p| p.as_ref())),
            None => Vec::new(),
        };
        let evidence = recall::Evidence {
            dense: &self.scratch,
            row_session: self.vectors.sessions(),
            row_unit: self.vectors.owners(),
            lexical,
            lexical_scores: &self.lexical_scratch,
            sessions: self.sessions.len(),
            query,
            session_info: &self.sessions,
            unit_terms: Some(recall::UnitTerms(&unit_terms)),
            stamps: Some([self.vectors.stamp(), self.lexical.stamp()]),
        };
        Ok(recall::rank(options.method, &evidence, options.k, options.units_per_session, &mut self.rank_scratch))
    }

    /// Ranked sessions with their best units, and their text as the context.
    fn render_recall(&self, query: &str, ranked: &[recall::SessionScore], options: RecallOptions) -> RecallResult {
        // Each session's context text is rendered right after its units' texts are read: its turns share their
        // compressed pages, which the turn store keeps one at a time.
        let (mut sessions, rendered): (Vec<RecalledSession>, Vec<String>) = ranked
            .iter()
            .enumerate()
            .filter_map(|(rank, s)| {
                let session = self.sessions.get(s.session as usize)?;
                let mut units: Vec<RecalledUnit> = Vec::new();
                for &(row, score) in &s.best_rows {
                    let unit = self.units.get(&self.vectors.owners()[row])?;
                    if units.iter().any(|u| u.id == unit.id) {
                        continue; // several windows of one long unit
                    }
                    units.push(RecalledUnit {
                        id: unit.id,
                        score,
                        turn_ids: unit.turn_ids.to_vec(),
                        text: self.unit_text(unit.turn_ids),
                    });
                }
                let recalled = RecalledSession {
                    id: session.id.clone(),
                    rank: rank + 1,
                    score: s.score,
                    first_time: session.first_time,
                    last_time: session.last_time,
                    units,
                };
                Some((recalled, self.render_session(&session.id)))
            })
            .unzip();
        let mut order: Vec<usize> = (0..sessions.len()).collect();
        if options.chronological {
            sort::sort_by(&mut order, |&a, &b| sessions[a].first_time.total_cmp(&sessions[b].first_time));
        }
        let context = order.iter().map(|&i| rendered[i].as_str()).collect::<Vec<_>>().join("\n\n");
        let context_tokens = self.embedder.tokenizer().encode(&context).len();
        sessions.iter_mut().for_each(|s| sort::sort_by(&mut s.units, |a, b| b.score.total_cmp(&a.score)));
        RecallResult { query: query.into(), expansion: None, sessions, context, context_tokens, device: self.device() }
    }

    fn unit_text(&self, turn_ids: &[u64]) -> String {
        turn_ids.iter().filter_map(|id| self.turns.get(id)).map(|t| t.unit_text()).collect::<Vec<_>>().join("\n")
    }

    /// A session as clean text under its date header.
    /// Relative time expressions ("yesterday") carry their date, counted from when each turn was said: the reader
    /// of a context (the user's LLM) sees it months later, and a small model answers "yesterday" otherwise.
    pub fn render_session(&self, id: &str) -> String {
        let Some(&n) = self.session_index.get(id) else { return String::new() };
        let s = &self.sessions[n as usize];
        let mut out = format!("### Session {} ({})", s.id, format_time(s.first_time));
        for tid in &self.session_turns[n as usize] {
            if let Some(t) = self.turns.get(tid) {
                out.push('\n');
                out.push_str(&crate::text::single_line(t.speaker));
                out.push_str(": ");
                self.push_prompt_line(&mut out, &t);
                if let Some(c) = t.caption {
                    out.push_str(&format!(" [shared an image: {}]", crate::text::single_line(c)));
                }
            }
        }
        out
    }

    /// Appends the turn's prompt line (its text screened, dated and on one line), from [`PromptLines`] when it is
    /// there.
    fn push_prompt_line(&self, out: &mut String, t: &crate::types::TurnRef) {
        let mut lines = self.prompt_lines.borrow_mut();
        if let Some(line) = lines.by_turn.get(&t.id) {
            out.push_str(line);
            return;
        }
        let text = crate::text::prompt_text(&t.text, t.time, self.config.screen_memory);
        let line = crate::text::single_line(&text).into_owned();
        out.push_str(&line);
        if lines.bytes + line.len() > PROMPT_LINES_BYTES {
            lines.clear();
        }
        lines.bytes += line.len();
        lines.by_turn.insert(t.id, line);
    }

    /// The turns of a session, in order.
    pub fn session_turns(&self, id: &str) -> Vec<Turn> {
        let Some(&n) = self.session_index.get(id) else { return Vec::new() };
        self.session_turns[n as usize].iter().filter_map(|t| self.turns.get(t)).map(|t| t.to_turn()).collect()
    }

    /// Sessions, oldest first.
    pub fn sessions(&self) -> Vec<Session> {
        let mut s = self.sessions.clone();
        sort::sort_by(&mut s, |a, b| a.first_time.total_cmp(&b.first_time));
        s
    }

    pub fn stats(&self) -> Stats {
        Stats {
            sessions: self.sessions.len(),
            turns: self.turns.len(),
            units: self.units.len(),
            vectors: self.vectors.len(),
            dim: DIM,
            model: MODEL_ID.into(),
            device: self.device(),
            unit_mode: self.config.unit_mode,
            llm: self.llm_counters,
            vector_bytes: self.vectors.bytes(),
            distill: self.distill_stats(),
            quarantined: self.quarantined.clone(),
            pending_embeddings: self.meta.embed_pending.len(),
        }
    }

    /// Erases everything this memory holds, in storage and in RAM.
    pub async fn forget_all(&mut self) -> Result<()> {
        #[cfg(feature = "sync")]
        let cleared = self.record_forget_all().await?;
        #[cfg(not(feature = "sync"))]
        let cleared = false;
        if !cleared {
            self.store.clear().await?;
        }
        self.meta.next_turn = 1;
        self.prompt_lines.get_mut().clear();
        self.meta.next_unit = 1;
        self.meta.embed_pending.clear();
        self.backfill = None;
        self.sessions.clear();
        self.session_index.clear();
        self.session_turns.clear();
        self.turns.clear();
        self.units.clear();
        self.vectors = VectorIndex::with_precision(DIM, self.config.vectors);
        self.lexical.clear();
        self.lexical_pending.clear();
        self.distill = Default::default();
        self.distill_epoch += 1;
        Ok(())
    }

    /// Gives the store back (e.g. to reopen over it).
    pub fn into_store(self) -> S {
        self.store
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Gives the store and the embedder back (to reopen over the same store without loading the model again).
    pub fn into_parts(self) -> (S, Embedder<R>) {
        (self.store, self.embedder)
    }
}
