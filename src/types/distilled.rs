//! The distilled part of the data model: episodes, facts, the durable job queue and the segmentation buffer, as
//! stored, plus [`DistillState`], the same in RAM, which applies a [`DistillWrite`] exactly as a store does. Every
//! change is one `DistillWrite`, written in the same atomic batch as anything else it depends on, so a crash
//! between two writes loses no work: the turns are the source of truth and every pending step is a persisted
//! [`Job`]. Data only: what distillation does with it lives in `crate::distill`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::TimeMs;

/// A Nemori episode: a coherent stretch of conversation, told in the third person.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    pub id: u64,
    pub title: String,
    pub narrative: String,
    /// When the episode happened (the narrator's date, else its first turn's time).
    pub time: TimeMs,
    /// First and last turn times.
    pub start: TimeMs,
    pub end: TimeMs,
    /// Turns it covers, in id order (may span sessions after a merge).
    pub turn_ids: Vec<u64>,
    /// Ids of the episodes merged into this one (each was narrated, then found to be the same ongoing event).
    #[serde(default)]
    pub merged_from: Vec<u64>,
    /// When loci made (or last merged) it.
    pub ingested: TimeMs,
    /// Unit vector of `title + narrative`.
    #[serde(with = "packed", default)]
    pub vector: Vec<f32>,
}

impl Episode {
    /// What is embedded: title and narrative.
    pub fn embed_text(&self) -> String {
        format!("{}\n{}", self.title, self.narrative)
    }
}

/// Whether a fact is current.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum FactStatus {
    #[default]
    Active,
    /// Replaced by a merge or a conflict; kept, linked, never erased by consolidation.
    Superseded,
}

/// A durable, specific statement distilled from episodes (Nemori's semantic memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fact {
    pub id: u64,
    pub statement: String,
    /// `"fact"` for facts distilled line by line (the prompts since `loci-distill-prompts/2`, which leave the
    /// model one thing to write a line); earlier ones carry the model's kind (identity, preference, event, …).
    pub kind: String,
    /// Event time: its episode's time.
    pub time: TimeMs,
    /// When loci distilled it.
    pub ingested: TimeMs,
    /// Provenance: the episodes and turns it was distilled from (a merge unions them).
    pub episode_ids: Vec<u64>,
    pub turn_ids: Vec<u64>,
    pub status: FactStatus,
    /// Facts this one replaced (by merge or conflict).
    #[serde(default)]
    pub supersedes: Vec<u64>,
    #[serde(default)]
    pub superseded_by: Option<u64>,
    /// How it entered: `new`, `merge` or `conflict`.
    pub origin: String,
    #[serde(with = "packed", default)]
    pub vector: Vec<f32>,
}

/// What a job does. Each is re-derivable from turns; each applies all of its result in one write or nothing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", tag = "kind", try_from = "JobKindRecord")]
pub enum JobKind {
    /// Partition the next window of `session`'s buffered turns. `last`: the session ended (or a flush asked), so
    /// nothing is held back as unfinished.
    Segment { session: String, last: bool },
    /// Narrate the groups of one window (one call), then integrate them with existing episodes.
    Narrate { groups: Vec<Vec<u64>> },
    /// Predict, distill and consolidate facts for these (episode, new turns) pairs.
    Distill { items: Vec<DistillItem> },
}

/// A stored [`JobKind`] as read: every variant's fields optional beside the tag. serde's derive reads an internally
/// tagged enum by buffering the record into its generic `Content` tree first, 10 KB of wasm for this one type;
/// a flat struct reads the same records directly.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobKindRecord {
    kind: String,
    session: Option<String>,
    last: Option<bool>,
    groups: Option<Vec<Vec<u64>>>,
    items: Option<Vec<DistillItem>>,
}

impl TryFrom<JobKindRecord> for JobKind {
    type Error = String;

    fn try_from(r: JobKindRecord) -> Result<Self, String> {
        let missing = |field: &str| format!("missing field `{field}` in a `{}` job", r.kind);
        Ok(match r.kind.as_str() {
            "segment" => JobKind::Segment {
                session: r.session.ok_or_else(|| missing("session"))?,
                last: r.last.ok_or_else(|| missing("last"))?,
            },
            "narrate" => JobKind::Narrate { groups: r.groups.ok_or_else(|| missing("groups"))? },
            "distill" => JobKind::Distill { items: r.items.ok_or_else(|| missing("items"))? },
            other => return Err(format!("unknown job kind `{other}`")),
        })
    }
}

impl JobKind {
    pub fn name(&self) -> &'static str {
        match self {
            JobKind::Segment { .. } => "segment",
            JobKind::Narrate { .. } => "narrate",
            JobKind::Distill { .. } => "distill",
        }
    }
}

/// One episode whose new turns await distillation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistillItem {
    pub episode: u64,
    pub turn_ids: Vec<u64>,
}

/// Durable background work.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: u64,
    pub work: JobKind,
    pub attempts: u32,
    /// Rate limits (429s) this job met: they back off like failures but never park it, since the
    /// endpoint asked for time, not refused the work.
    #[serde(default)]
    pub rate_limited: u32,
    /// Not run before this time (backoff after a failure).
    pub next_try: TimeMs,
    /// Failed too often; skipped until retried explicitly. Never deleted.
    pub parked: bool,
    #[serde(default)]
    pub last_error: Option<String>,
    pub created: TimeMs,
}

/// Distillation's counters and the segmentation buffer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistillMeta {
    pub next_episode: u64,
    pub next_fact: u64,
    pub next_job: u64,
    /// Turn ids waiting for segmentation, in arrival order: new turns and carried-over ones.
    pub pending: Vec<u64>,
}

impl Default for DistillMeta {
    fn default() -> Self {
        DistillMeta { next_episode: 1, next_fact: 1, next_job: 1, pending: Vec::new() }
    }
}

/// Everything distillation persisted, as loaded at open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DistillRecords {
    pub meta: Option<DistillMeta>,
    pub episodes: Vec<Episode>,
    pub facts: Vec<Fact>,
    pub jobs: Vec<Job>,
}

/// One atomic change to distilled state (put records replace those with the same id).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DistillWrite {
    pub meta: Option<DistillMeta>,
    pub episodes: Vec<Episode>,
    pub facts: Vec<Fact>,
    pub jobs: Vec<Job>,
    pub delete_episodes: Vec<u64>,
    pub delete_facts: Vec<u64>,
    pub delete_jobs: Vec<u64>,
}

impl DistillWrite {
    pub fn is_empty(&self) -> bool {
        self == &DistillWrite::default()
    }
}

/// Distilled state in RAM, kept in step with the store by applying the same [`DistillWrite`]s.
#[derive(Debug, Clone, Default)]
pub struct DistillState {
    pub meta: DistillMeta,
    pub episodes: BTreeMap<u64, Episode>,
    pub facts: BTreeMap<u64, Fact>,
    pub jobs: BTreeMap<u64, Job>,
}

impl DistillState {
    pub fn from_records(r: DistillRecords) -> Self {
        DistillState {
            meta: r.meta.unwrap_or_default(),
            episodes: crate::sort::map_from(r.episodes.into_iter().map(|e| (e.id, e))),
            facts: crate::sort::map_from(r.facts.into_iter().map(|f| (f.id, f))),
            jobs: crate::sort::map_from(r.jobs.into_iter().map(|j| (j.id, j))),
        }
    }

    /// Applies a write that the store accepted.
    pub fn apply(&mut self, w: &DistillWrite) {
        if let Some(m) = &w.meta {
            self.meta = m.clone();
        }
        for id in &w.delete_episodes {
            self.episodes.remove(id);
        }
        for id in &w.delete_facts {
            self.facts.remove(id);
        }
        for id in &w.delete_jobs {
            self.jobs.remove(id);
        }
        for e in &w.episodes {
            self.episodes.insert(e.id, e.clone());
        }
        for f in &w.facts {
            self.facts.insert(f.id, f.clone());
        }
        for j in &w.jobs {
            self.jobs.insert(j.id, j.clone());
        }
    }

    /// The next job to run at `now`: the oldest one that is not parked, if it is due. Jobs run strictly in order
    /// (a later job may depend on an earlier one's result), so a job waiting for its backoff holds the queue.
    pub fn next_job(&self) -> Option<&Job> {
        self.jobs.values().find(|j| !j.parked)
    }

    pub fn active_facts(&self) -> impl Iterator<Item = &Fact> {
        self.facts.values().filter(|f| f.status == FactStatus::Active)
    }
}

/// `Vec<f32>` as little-endian bytes (a `Uint8Array` in IndexedDB): vectors never travel as JSON number arrays.
pub mod packed {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    use crate::types::{pack_f32, unpack_f32};

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&pack_f32(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("packed f32 bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        let bytes = d.deserialize_byte_buf(Bytes)?;
        unpack_f32(&bytes).ok_or_else(|| de::Error::custom("vector bytes are not whole f32 values"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_kinds_read_back_as_written_and_a_wrong_record_says_why() {
        let kinds = [
            JobKind::Segment { session: "s1".into(), last: true },
            JobKind::Narrate { groups: vec![vec![1, 2], vec![3]] },
            JobKind::Distill { items: vec![DistillItem { episode: 4, turn_ids: vec![5, 6] }] },
        ];
        for kind in kinds {
            let json = serde_json::to_string(&kind).unwrap();
            assert!(json.contains(&format!("\"kind\":\"{}\"", kind.name())), "{json}");
            assert_eq!(serde_json::from_str::<JobKind>(&json).unwrap(), kind);
        }
        let err = |json: &str| serde_json::from_str::<JobKind>(json).unwrap_err().to_string();
        assert!(err(r#"{"kind":"segment","session":"s1"}"#).contains("missing field `last` in a `segment` job"));
        assert!(err(r#"{"kind":"compact"}"#).contains("unknown job kind `compact`"));
        assert!(err(r#"{"session":"s1","last":true}"#).contains("missing field `kind`"));
    }
}
