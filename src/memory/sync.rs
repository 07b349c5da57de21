//! Sync wired into the memory (docs/SYNC.md, "Wiring into `Memory`"): the device's log, the map between this
//! memory's turn ids and the operations that carry them everywhere, and the apply of a merged state. Only with the
//! cargo feature `sync`.
//!
//! Writes are recorded by difference, at sync time: a turn the memory holds that the map does not name is new (a
//! `turn` operation), a mapped turn no longer held was forgotten (`forgetTurn`). So `addMessages`, `import` and
//! `forget({ turn })` write nothing more than without sync, and whatever a write acknowledged is in the store,
//! hence found by the next sync. A forgotten session is the one thing a difference cannot tell apart from its
//! turns going (the rule "a forget wins over the turns written concurrently" needs the op), so `forget_session`
//! writes a small intent in its own batch.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{unit_text, Memory};
use crate::embed::Runtime;
use crate::error::{Error, Result};
use crate::store::{Store, StoredUnit, WriteBatch};
use crate::sync::{self, Cipher, DerivedOp, DeviceLog, Held, Merged, Op, OpId, Remote, Segment, TurnOp, VersionVector};
use crate::types::distilled::{Episode, Fact, FactStatus};
use crate::types::{Session, TimeMs, Turn, Unit};

/// A forgotten session, waiting for the next sync to become a `forgetSession` operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ForgetIntent {
    session: String,
    /// The memory's next turn id when it was forgotten: the turns below it (recorded first) were made before the
    /// forget, those from it on after (they start the session anew).
    before: u64,
}

/// An episode or fact as the log knows it here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DerivedLocal {
    /// Its id in this memory.
    local: u64,
    /// Of its body as last recorded or applied: a change here is sent again.
    hash: u64,
    op: OpId,
}

/// The body of an episode as synced: its turns are the operation's sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EpisodeBody {
    title: String,
    narrative: String,
    time: TimeMs,
    start: TimeMs,
    end: TimeMs,
    ingested: TimeMs,
}

/// The body of a fact as synced: its links to episodes and facts by key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FactBody {
    statement: String,
    kind: String,
    time: TimeMs,
    ingested: TimeMs,
    status: FactStatus,
    origin: String,
    episodes: Vec<String>,
    supersedes: Vec<String>,
    superseded_by: Option<String>,
}

fn episode_body(e: &Episode) -> EpisodeBody {
    EpisodeBody {
        title: e.title.clone(),
        narrative: e.narrative.clone(),
        time: e.time,
        start: e.start,
        end: e.end,
        ingested: e.ingested,
    }
}

fn fact_body(f: &Fact, episode_key: impl Fn(u64) -> Option<String>, fact_key: impl Fn(u64) -> String) -> FactBody {
    FactBody {
        statement: f.statement.clone(),
        kind: f.kind.clone(),
        time: f.time,
        ingested: f.ingested,
        status: f.status,
        origin: f.origin.clone(),
        episodes: f.episode_ids.iter().filter_map(|&e| episode_key(e)).collect(),
        supersedes: f.supersedes.iter().map(|&x| fact_key(x)).collect(),
        superseded_by: f.superseded_by.map(fact_key),
    }
}

fn body_hash(body: &serde_json::Value) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(body.to_string().as_bytes());
    h.finish()
}

fn to_body<T: Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::SyncFailed(format!("encoding a distilled record: {e}")))
}

/// What a memory keeps of its sync, as one record of the store (sealed in an encrypted memory like the rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SyncRecord {
    log: DeviceLog,
    /// This memory's turn id → the operation that carries it.
    turns: BTreeMap<u64, OpId>,
    #[serde(default)]
    intents: Vec<ForgetIntent>,
    /// Episodes (`e:…`) and facts (`f:…`) by key: the local record, what it was when recorded, its operation.
    #[serde(default)]
    derived: BTreeMap<String, DerivedLocal>,
    /// Set while `forget_all` is clearing the store: an open that finds it finishes the clear first, so that the
    /// turns it forgot are never recorded again as new ones.
    #[serde(default)]
    clearing: bool,
}

/// Where one sync stands between its steps: what to send.
#[derive(Debug, Clone)]
pub struct SyncOutgoing {
    pub device: String,
    pub segments: Vec<Segment>,
    /// What this device merged: fetch what comes after.
    pub merged: VersionVector,
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncApplied {
    /// Operations this device sent.
    pub ops_sent: usize,
    /// Other devices' segments merged.
    pub segments_received: usize,
    /// Turns of other devices stored here.
    pub turns_added: usize,
    /// Turns here that another device forgot.
    pub turns_forgotten: usize,
    /// Sessions whose turns (from some position on) were put in the merged order and embedded again.
    pub sessions_rewritten: usize,
    /// Episodes and facts put or deleted.
    pub derived_changed: usize,
}

pub(super) fn encode(record: &SyncRecord) -> Result<Vec<u8>> {
    serde_json::to_vec(record).map_err(|e| Error::Storage(format!("encoding the sync record: {e}")))
}

pub(super) fn decode(bytes: &[u8]) -> Result<SyncRecord> {
    serde_json::from_slice(bytes).map_err(|e| Error::Storage(format!("the sync record does not decode: {e}")))
}

impl<S: Store, R: Runtime> Memory<S, R> {
    /// This memory's sync device id, once it has synced.
    pub fn sync_device(&self) -> Option<&str> {
        self.sync.as_ref().map(|s| s.log.device.as_str())
    }

    /// Called by open: finishes a `forget_all` that a crash cut between its log write and the clear.
    /// Returns whether it cleared (the memory must then be opened again).
    pub(super) async fn resume_sync_clear(&mut self) -> Result<bool> {
        if self.sync.as_ref().is_some_and(|s| s.clearing) {
            self.clear_synced().await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `forget_all` of a memory that syncs: the `forgetAll` goes into the log (with nothing mapped any more) before
    /// the store is cleared; the clear keeps the sync record.
    pub(super) async fn record_forget_all(&mut self) -> Result<bool> {
        let Some((record, bytes)) = self.changed_record(|state| {
            state.log.record(Op::ForgetAll);
            state.turns.clear();
            state.intents.clear();
            state.derived.clear();
            state.clearing = true;
        })?
        else {
            return Ok(false);
        };
        self.store.write(WriteBatch { sync: Some(bytes), ..Default::default() }).await?;
        self.sync = Some(record);
        self.clear_synced().await?;
        Ok(true)
    }

    async fn clear_synced(&mut self) -> Result<()> {
        self.store.clear().await?;
        if let Some((record, bytes)) = self.changed_record(|state| state.clearing = false)? {
            self.store.write(WriteBatch { sync: Some(bytes), ..Default::default() }).await?;
            self.sync = Some(record);
        }
        Ok(())
    }

    /// The sync record with `change` made, and its bytes for a write (`None` when this memory never synced): the
    /// caller keeps it in RAM once the write has committed, so that a refused write changes nothing.
    fn changed_record(&self, change: impl FnOnce(&mut SyncRecord)) -> Result<Option<(SyncRecord, Vec<u8>)>> {
        let Some(mut record) = self.sync.clone() else { return Ok(None) };
        change(&mut record);
        let bytes = encode(&record)?;
        Ok(Some((record, bytes)))
    }

    /// The record `forget_session` writes with its batch (when this memory syncs): the intent to send. Kept in RAM
    /// by [`adopt_sync_record`](Self::adopt_sync_record) once that write commits.
    pub(super) fn forget_session_intent(&self, session: &str) -> Result<Option<(SyncRecord, Vec<u8>)>> {
        let before = self.meta.next_turn;
        self.changed_record(|state| state.intents.push(ForgetIntent { session: session.to_string(), before }))
    }

    pub(super) fn adopt_sync_record(&mut self, record: Option<SyncRecord>) {
        if record.is_some() {
            self.sync = record;
        }
    }

    /// One whole sync against `remote` under the sync key `cipher` (`BAD_KEY` before anything is sent when the
    /// server's memory is under another key). `new_device` draws this memory's device id at its first sync.
    /// It holds the memory throughout; the browser runs the steps with the memory free meanwhile:
    /// [`sync_outgoing`](Self::sync_outgoing), [`sync::send_segments`], [`sync_sent`](Self::sync_sent),
    /// [`sync::fetch_segments`], [`sync_merge`](Self::sync_merge).
    pub async fn sync(
        &mut self,
        remote: &dyn Remote,
        cipher: &dyn Cipher,
        new_device: impl FnOnce() -> String,
    ) -> Result<SyncApplied> {
        sync::check_key(remote, cipher).await?;
        let outgoing = self.sync_outgoing(new_device).await?;
        let ops_sent = outgoing.segments.iter().map(|s| s.ops.len()).sum();
        let last = sync::send_segments(remote, cipher, &outgoing.segments).await?;
        self.sync_sent(last).await?;
        let fetched = sync::fetch_segments(remote, cipher, &outgoing.merged, &outgoing.device).await?;
        let mut applied = self.sync_merge(fetched).await?;
        applied.ops_sent = ops_sent;
        Ok(applied)
    }

    /// Step 1: records what changed here since the last sync, cuts it into segments, persists the log; what to
    /// send. A crash after it sends the same segments next time.
    pub async fn sync_outgoing(&mut self, new_device: impl FnOnce() -> String) -> Result<SyncOutgoing> {
        if self.sync.is_none() {
            self.sync = Some(SyncRecord {
                log: DeviceLog::new(new_device()),
                turns: BTreeMap::new(),
                intents: Vec::new(),
                derived: BTreeMap::new(),
                clearing: false,
            });
        }
        self.record_changes()?;
        let state = self.sync.as_mut().ok_or_else(|| Error::invalid("this memory has not synced"))?;
        let segments = state.log.outgoing();
        let out = SyncOutgoing { device: state.log.device.clone(), segments, merged: state.log.merged_up_to().clone() };
        self.persist_sync().await?;
        Ok(out)
    }

    /// Step 2: this device's segments up to `last` are on the server.
    pub async fn sync_sent(&mut self, last: Option<u64>) -> Result<()> {
        let (Some(state), Some(n)) = (self.sync.as_mut(), last) else { return Ok(()) };
        state.log.sent(n);
        self.persist_sync().await
    }

    /// Step 3: merges the segments fetched from the other devices and makes this memory hold the merged state
    /// (in one store write, the map included). The changes made here meanwhile are recorded first.
    pub async fn sync_merge(&mut self, fetched: Vec<Segment>) -> Result<SyncApplied> {
        if self.sync.is_none() {
            return Err(Error::invalid("sync_merge before sync_outgoing"));
        }
        self.record_changes()?;
        let state = self.sync.as_mut().ok_or_else(|| Error::invalid("this memory has not synced"))?;
        let segments_received = state.log.merge_fetched(fetched)?;
        self.persist_sync().await?;
        let mut applied = self.apply_merged().await?;
        applied.segments_received = segments_received;
        Ok(applied)
    }

    async fn persist_sync(&mut self) -> Result<()> {
        let sync = self.sync.as_ref().map(encode).transpose()?;
        self.store.write(WriteBatch { sync, ..Default::default() }).await
    }

    /// Records, as operations, what the memory holds that the log does not say yet (see the module's comment).
    fn record_changes(&mut self) -> Result<()> {
        let Some(state) = self.sync.as_mut() else { return Ok(()) };
        if state.clearing {
            // What the memory holds now is what `forgetAll` forgot: recorded, it would come back everywhere.
            return Err(Error::Storage("forgetAll did not finish: forget all again, or open the memory again".into()));
        }
        let merged = state.log.state()?;
        let session_of: HashMap<&OpId, &str> = merged.turns().map(|(s, t)| (&t.id, s)).collect();
        let forgotten_sessions: HashSet<&str> = state.intents.iter().map(|i| i.session.as_str()).collect();
        // Mapped turns no longer held: forgotten here (one by one, unless their whole session was).
        let gone: Vec<u64> = state.turns.keys().copied().filter(|id| self.turns.get(id).is_none()).collect();
        let mut ops = Vec::new();
        for id in gone {
            if let Some(op) = state.turns.remove(&id) {
                let whole_session = session_of.get(&op).is_some_and(|s| forgotten_sessions.contains(s));
                if session_of.contains_key(&op) && !whole_session {
                    ops.push(Op::ForgetTurn { turn: op });
                }
            }
        }
        for op in ops {
            state.log.record(op);
        }
        // Turns new here, in id order (the order they were made), each session's forget in its place among them.
        let mut new: Vec<u64> = self.turns.iter().map(|t| t.id).filter(|id| !state.turns.contains_key(id)).collect();
        new.sort_unstable();
        let mut intents = std::mem::take(&mut state.intents);
        intents.sort_by_key(|i| i.before);
        let mut intents = intents.into_iter().peekable();
        for id in new {
            while let Some(intent) = intents.next_if(|i| i.before <= id) {
                state.log.record(Op::ForgetSession { session: intent.session });
            }
            let Some(t) = self.turns.get(&id) else { continue };
            let op = TurnOp {
                session: t.session.to_string(),
                speaker: t.speaker.to_string(),
                text: t.text.to_string(),
                caption: t.caption.map(str::to_string),
                time: t.time,
                ingested: t.ingested,
            };
            let op_id = state.log.record(Op::Turn(op));
            state.turns.insert(id, op_id);
        }
        for intent in intents {
            state.log.record(Op::ForgetSession { session: intent.session });
        }
        // Titles set here (an import) that the merge does not have.
        for s in &self.sessions {
            if let Some(title) = &s.title {
                if merged.sessions.get(&s.id).is_none_or(|m| m.title.as_ref() != Some(title)) {
                    state.log.record(Op::Title { session: s.id.clone(), title: title.clone() });
                }
            }
        }
        self.record_derived()
    }

    /// Records the episodes and facts made, changed or forgotten here since the last sync (by difference, as turns;
    /// their turns are recorded first). A record received from another device is sent again only if it changed here.
    fn record_derived(&mut self) -> Result<()> {
        let Some(state) = self.sync.as_mut() else { return Ok(()) };
        let by_local: HashMap<(bool, u64), String> =
            state.derived.iter().map(|(k, d)| ((k.starts_with("e:"), d.local), k.clone())).collect();
        let record = |state: &mut SyncRecord, key: String, local: u64, sources: Vec<OpId>, body: serde_json::Value| {
            let hash = body_hash(&body);
            if let Some(held) = state.derived.get(&key) {
                if held.hash == hash {
                    return;
                }
                state.log.record(Op::ForgetDerived { key: key.clone() });
            }
            let op = state.log.record(Op::Derived(DerivedOp { key: key.clone(), sources, body }));
            state.derived.insert(key, DerivedLocal { local, hash, op });
        };
        let device = state.log.device.clone();
        let sources = |state: &SyncRecord, turns: &[u64]| -> Option<Vec<OpId>> {
            turns.iter().map(|t| state.turns.get(t).cloned()).collect()
        };
        let mut live: HashSet<String> = HashSet::new();
        for e in self.distill.episodes.values() {
            let key = by_local.get(&(true, e.id)).cloned().unwrap_or_else(|| format!("e:{device}:{}", e.id));
            let Some(from) = sources(state, &e.turn_ids) else { continue };
            live.insert(key.clone());
            record(state, key, e.id, from, to_body(&episode_body(e))?);
        }
        let episode_key = |state: &SyncRecord, id: u64| {
            state.derived.iter().find(|(k, d)| k.starts_with("e:") && d.local == id).map(|(k, _)| k.clone())
        };
        let fact_key = |id: u64| by_local.get(&(false, id)).cloned().unwrap_or_else(|| format!("f:{device}:{id}"));
        for f in self.distill.facts.values() {
            let key = fact_key(f.id);
            let Some(from) = sources(state, &f.turn_ids) else { continue };
            let body = fact_body(f, |e| episode_key(state, e), fact_key);
            live.insert(key.clone());
            record(state, key, f.id, from, to_body(&body)?);
        }
        let gone: Vec<String> = state.derived.keys().filter(|k| !live.contains(*k)).cloned().collect();
        for key in gone {
            state.derived.remove(&key);
            state.log.record(Op::ForgetDerived { key });
        }
        Ok(())
    }

    /// Makes the memory hold the log's merged state: forgets the turns it forgot, puts each changed session's turns
    /// in the merged order from the first position that differs (rounded down to a unit), stores the turns new
    /// here and embeds the units from there; then reloads.
    async fn apply_merged(&mut self) -> Result<SyncApplied> {
        let Some(state) = self.sync.as_ref() else { return Ok(SyncApplied::default()) };
        let merged: Merged = state.log.state()?;
        let mut map = state.turns.clone();
        let local_of: HashMap<OpId, u64> = map.iter().map(|(&id, op)| (op.clone(), id)).collect();
        let mut held = Held::default();
        for (s, ids) in self.sessions.iter().zip(&self.session_turns) {
            held.sessions.insert(s.id.clone(), ids.iter().filter_map(|id| map.get(id).cloned()).collect());
        }
        held.derived = state.derived.iter().map(|(k, d)| (k.clone(), d.op.clone())).collect();
        let mut derived = state.derived.clone();
        let device = state.log.device.clone();
        let plan = sync::plan(&held, &merged);
        let forgotten: HashSet<u64> = plan.forget.iter().filter_map(|op| local_of.get(op).copied()).collect();
        let mut touched: Vec<String> = plan.sessions.keys().cloned().collect();
        let size = self.config.unit_mode.size();
        // Each session's units, by session number, in one pass over them.
        let mut units_of: Vec<Vec<super::units::UnitRef>> = vec![Vec::new(); self.sessions.len()];
        for u in self.units.iter() {
            if let Some(list) = units_of.get_mut(u.session as usize) {
                list.push(u);
            }
        }
        let none = Vec::new();
        let session_units = |session: &str| self.session_index.get(session).map_or(&none, |&n| &units_of[n as usize]);
        for (s, ids) in self.sessions.iter().zip(&self.session_turns) {
            let retitled = merged.sessions.get(&s.id).is_some_and(|m| m.title != s.title);
            // A local `forget({ turn })` leaves a unit of another shape: rewritten, so every device holds the same.
            let whole = ids.len() - ids.len() % size;
            if retitled
                || ids.iter().any(|id| forgotten.contains(id))
                || positional_prefix(session_units(&s.id), ids, whole, size) != whole
            {
                touched.push(s.id.clone());
            }
        }
        touched.sort_unstable();
        touched.dedup();
        if touched.is_empty() && plan.put_derived.is_empty() && plan.delete_derived.is_empty() {
            return Ok(SyncApplied::default());
        }

        let mut meta = self.meta.clone();
        let mut batch = WriteBatch::default();
        let mut applied = SyncApplied { turns_forgotten: forgotten.len(), ..Default::default() };
        let mut to_embed: Vec<(Unit, String)> = Vec::new();
        for session in touched.iter().map(String::as_str) {
            let local: &[u64] = self.session_index.get(session).map_or(&[], |&n| &self.session_turns[n as usize]);
            let Some(target) = merged.sessions.get(session) else {
                // Every turn forgotten: the session goes.
                batch.delete_sessions.push(session.to_string());
                batch.delete_turns.extend(local);
                batch.delete_units.extend(session_units(session).iter().map(|u| u.id));
                continue;
            };
            // The first position where the memory's order and the merge's differ (a forgotten turn, another one).
            let differs = local
                .iter()
                .zip(&target.turns)
                .position(|(id, t)| forgotten.contains(id) || local_of.get(&t.id) != Some(id))
                .unwrap_or(local.len().min(target.turns.len()));
            let start = positional_prefix(session_units(session), local, differs - differs % size, size);
            if start < local.len() || start < target.turns.len() {
                applied.sessions_rewritten += 1;
            }
            let kept: HashSet<u64> = local[..start].iter().copied().collect();
            let from_start = session_units(session).iter().filter(|u| !u.turn_ids.iter().all(|t| kept.contains(t)));
            batch.delete_units.extend(from_start.map(|u| u.id));
            let tail_ids: HashSet<u64> =
                target.turns[start..].iter().filter_map(|t| local_of.get(&t.id).copied()).collect();
            batch.delete_turns.extend(local[start..].iter().filter(|id| !tail_ids.contains(id)));
            // Positions are kept as sequence numbers, which a forget leaves with gaps: the tail goes after the last kept.
            let base = local[..start].last().and_then(|id| self.turns.get(id)).map_or(0, |t| t.seq + 1);
            let mut tail = Vec::with_capacity(target.turns.len() - start);
            for (i, t) in target.turns[start..].iter().enumerate() {
                let id = match local_of.get(&t.id) {
                    Some(&id) => id,
                    None => {
                        let id = meta.next_turn;
                        meta.next_turn += 1;
                        map.insert(id, t.id.clone());
                        applied.turns_added += 1;
                        id
                    }
                };
                tail.push(Turn {
                    id,
                    session: session.to_string(),
                    seq: base + i as u32,
                    speaker: t.turn.speaker.clone(),
                    text: t.turn.text.clone(),
                    caption: t.turn.caption.clone(),
                    time: t.turn.time,
                    ingested: t.turn.ingested,
                });
            }
            for group in tail.chunks(size) {
                let unit = Unit {
                    id: meta.next_unit,
                    session: session.to_string(),
                    turn_ids: group.iter().map(|t| t.id).collect(),
                };
                meta.next_unit += 1;
                to_embed.push((unit, unit_text(group.iter().map(Turn::unit_text))));
            }
            batch.turns.extend(tail);
            batch.sessions.push(Session {
                id: session.to_string(),
                first_time: target.first_time().unwrap_or_default(),
                last_time: target.last_time().unwrap_or_default(),
                turn_count: target.turns.len() as u32,
                title: target.title.clone(),
            });
        }
        // Every window embedded now: this is background work, and a unit's rows are those of its whole text.
        let texts: Vec<&str> = to_embed.iter().map(|(_, text)| text.as_str()).collect();
        let (windows, _) = self.embedder.embed_some(&texts, usize::MAX).await?;
        let mut units: Vec<StoredUnit> =
            to_embed.into_iter().map(|(unit, _)| StoredUnit { unit, vectors: Default::default() }).collect();
        for w in windows {
            units[w.text].vectors.extend_from_slice(&w.vector);
        }
        batch.units = units;
        let deleted_units: HashSet<u32> = batch.delete_units.iter().copied().collect();
        meta.embed_pending.retain(|id| !deleted_units.contains(id));
        map.retain(|id, _| !forgotten.contains(id));
        batch.distill = self.apply_derived(&plan, &map, &mut derived, &forgotten, &device).await?;
        applied.derived_changed = plan.put_derived.len() + plan.delete_derived.len();
        batch.meta = Some(meta);
        let state = self.sync.as_mut().ok_or_else(|| Error::invalid("this memory has not synced"))?;
        let before = (std::mem::replace(&mut state.turns, map), std::mem::replace(&mut state.derived, derived));
        batch.sync = Some(encode(state)?);
        self.distill_epoch += 1;
        if let Err(e) = self.store.write(batch).await {
            if let Some(state) = self.sync.as_mut() {
                (state.turns, state.derived) = before;
            }
            return Err(e);
        }
        self.reload().await?;
        Ok(applied)
    }

    /// The distillation write that makes the memory hold the merge's episodes and facts: those of forgotten turns
    /// go (as `forget({ turn })` does, except that only this device's own turns are queued for distillation again:
    /// each device distils the turns it wrote, and its episodes reach the others by sync), the merge's are put with
    /// ids of this memory (`derived` maps their keys), links between them resolved by key, vectors embedded here.
    async fn apply_derived(
        &mut self,
        plan: &sync::Plan,
        map: &BTreeMap<u64, OpId>,
        derived: &mut BTreeMap<String, DerivedLocal>,
        forgotten: &HashSet<u64>,
        device: &str,
    ) -> Result<crate::types::distilled::DistillWrite> {
        use crate::distill::TextEmbed;
        let mut w = self.distill.forget_turns(forgotten);
        let mut meta = w.meta.take().unwrap_or_else(|| self.distill.meta.clone());
        meta.pending.retain(|t| map.get(t).is_some_and(|op| op.device == device));
        for key in &plan.delete_derived {
            if let Some(d) = derived.remove(key) {
                match key.starts_with("e:") {
                    true => w.delete_episodes.push(d.local),
                    false => w.delete_facts.push(d.local),
                }
            }
        }
        // Episodes first (facts link to them), each under the id held for its key or a new one.
        let mut puts: Vec<&sync::MergedDerived> = plan.put_derived.iter().collect();
        puts.sort_by_key(|r| !r.record.key.starts_with("e:"));
        for r in &puts {
            let episode = r.record.key.starts_with("e:");
            let local = derived.get(&r.record.key).map(|d| d.local).unwrap_or_else(|| {
                let next = if episode { &mut meta.next_episode } else { &mut meta.next_fact };
                *next += 1;
                *next - 1
            });
            derived.insert(r.record.key.clone(), DerivedLocal { local, hash: 0, op: r.id.clone() });
        }
        let local_turn: HashMap<&OpId, u64> = map.iter().map(|(&id, op)| (op, id)).collect();
        let local_of = |key: &str| derived.get(key).map(|d| d.local);
        let (mut episodes, mut facts) = (Vec::new(), Vec::new());
        for r in &puts {
            let Some(local) = local_of(&r.record.key) else { continue };
            let turns: Option<Vec<u64>> = r.record.sources.iter().map(|op| local_turn.get(op).copied()).collect();
            let Some(mut turn_ids) = turns else { continue };
            turn_ids.sort_unstable();
            let bad = |e: serde_json::Error| Error::SyncFailed(format!("a distilled record of another device: {e}"));
            if r.record.key.starts_with("e:") {
                let b: EpisodeBody = serde_json::from_value(r.record.body.clone()).map_err(bad)?;
                episodes.push(Episode {
                    id: local,
                    title: b.title,
                    narrative: b.narrative,
                    time: b.time,
                    start: b.start,
                    end: b.end,
                    turn_ids,
                    merged_from: Vec::new(),
                    ingested: b.ingested,
                    vector: Vec::new(),
                });
            } else {
                let b: FactBody = serde_json::from_value(r.record.body.clone()).map_err(bad)?;
                let linked = |keys: &[String], episode: bool| -> Vec<u64> {
                    keys.iter().filter(|k| k.starts_with("e:") == episode).filter_map(|k| local_of(k)).collect()
                };
                facts.push(Fact {
                    id: local,
                    statement: b.statement,
                    kind: b.kind,
                    time: b.time,
                    ingested: b.ingested,
                    episode_ids: linked(&b.episodes, true),
                    turn_ids,
                    status: b.status,
                    supersedes: linked(&b.supersedes, false),
                    superseded_by: b.superseded_by.as_deref().and_then(local_of),
                    origin: b.origin,
                    vector: Vec::new(),
                });
            }
        }
        let texts: Vec<String> = episodes.iter().map(Episode::embed_text).collect();
        for (e, v) in episodes.iter_mut().zip(self.embedder.embed_texts(&texts).await?) {
            e.vector = v;
        }
        let texts: Vec<String> = facts.iter().map(|f| f.statement.clone()).collect();
        for (f, v) in facts.iter_mut().zip(self.embedder.embed_texts(&texts).await?) {
            f.vector = v;
        }
        // What the next recording will compare them with: their bodies as this memory holds them.
        let key_of: HashMap<(bool, u64), String> =
            derived.iter().map(|(k, d)| ((k.starts_with("e:"), d.local), k.clone())).collect();
        for e in &episodes {
            if let Some(d) = key_of.get(&(true, e.id)).and_then(|k| derived.get_mut(k)) {
                d.hash = body_hash(&to_body(&episode_body(e))?);
            }
        }
        for f in &facts {
            let body = fact_body(
                f,
                |e| key_of.get(&(true, e)).cloned(),
                |x| key_of.get(&(false, x)).cloned().unwrap_or_else(|| format!("f:{device}:{x}")),
            );
            if let Some(d) = key_of.get(&(false, f.id)).and_then(|k| derived.get_mut(k)) {
                d.hash = body_hash(&to_body(&body)?);
            }
        }
        let deleted_episodes: HashSet<u64> = w.delete_episodes.iter().copied().collect();
        let deleted_facts: HashSet<u64> = w.delete_facts.iter().copied().collect();
        w.episodes.retain(|e| !deleted_episodes.contains(&e.id));
        w.facts.retain(|f| !deleted_facts.contains(&f.id));
        w.episodes.extend(episodes);
        w.facts.extend(facts);
        w.meta = Some(meta);
        Ok(w)
    }
}

/// How many of `local`'s first turns (at most `wanted`, a multiple of the unit size) sit in units (`units`, the
/// session's) that are its positional chunks ((0,1), (2,3)… for pairs), so that the units before stay as a rewrite
/// from there would make them. 0 when a local `forget({ turn })` left a unit of another shape before `wanted`.
fn positional_prefix(units: &[super::units::UnitRef], local: &[u64], wanted: usize, size: usize) -> usize {
    let position: HashMap<u64, usize> = local.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let mut covered = 0;
    for u in units {
        let Some(&first) = u.turn_ids.first().and_then(|t| position.get(t)) else { return 0 };
        if first >= wanted {
            continue;
        }
        let chunk = first % size == 0
            && u.turn_ids.iter().enumerate().all(|(i, t)| position.get(t) == Some(&(first + i)))
            && (u.turn_ids.len() == size || first + u.turn_ids.len() == local.len());
        if !chunk || first + u.turn_ids.len() > wanted {
            return 0;
        }
        covered += u.turn_ids.len();
    }
    if covered == wanted {
        wanted
    } else {
        0
    }
}
