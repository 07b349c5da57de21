//! Export and import: a memory as a portable JSON document (sessions and their turns, with times), so a user can
//! move it to another browser or keep a backup. Vectors are not exported: they are re-derived on import, which
//! also makes the document independent of the embedding model. A child of `memory` to read its state directly.

use serde::{Deserialize, Serialize};

use super::Memory;
use crate::embed::{Runtime, MODEL_ID};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{InputLimits, MessageInput, TimeInput, TimeMs, Turn, ValidMessage};

/// Identifies the document type; `version` changes only with an incompatible layout.
pub const EXPORT_FORMAT: &str = "loci-memory-export";
pub const EXPORT_VERSION: u32 = 1;

/// A whole memory as data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Export {
    pub format: String,
    pub version: u32,
    pub exported_at: TimeMs,
    /// The model the exporting memory embedded with (informative: vectors are recomputed on import).
    pub model: String,
    /// Whether the document is encrypted. Always `false`: an export is plaintext JSON, also from an encrypted
    /// memory (said in the document, so that an app knows to protect it).
    #[serde(default)]
    pub encrypted: bool,
    pub sessions: Vec<ExportSession>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExportSession {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub turns: Vec<ExportTurn>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExportTurn {
    pub speaker: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    pub time: TimeMs,
}

/// What an import did. Sessions whose id already exists are skipped, so re-running an interrupted import
/// continues where it stopped instead of duplicating turns; a session that holds only the beginning of the
/// document's (an import cut inside a session too large for one write) is completed, and counted as imported.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    pub sessions_imported: usize,
    pub sessions_skipped: usize,
    pub turns_imported: usize,
}

impl<S: Store, R: Runtime> Memory<S, R> {
    /// The whole memory as a portable document.
    pub fn export(&self, now: TimeMs) -> Export {
        let sessions = self
            .sessions()
            .into_iter()
            .map(|s| ExportSession {
                turns: self
                    .session_turns(&s.id)
                    .into_iter()
                    .map(|t| ExportTurn { speaker: t.speaker, text: t.text, caption: t.caption, time: t.time })
                    .collect(),
                id: s.id,
                title: s.title,
            })
            .collect();
        Export {
            format: EXPORT_FORMAT.into(),
            version: EXPORT_VERSION,
            exported_at: now,
            model: MODEL_ID.into(),
            encrypted: false,
            sessions,
        }
    }

    /// Adds the sessions of an exported document (validated as a whole first: a bad document stores nothing).
    /// Each session is written in one transaction, unless it is over one call's limits (`max_batch` turns,
    /// `max_call_chars` characters): then in runs of them, and a re-run after a cut between them adds the rest of it
    /// (a session already there whose turns are the document's first ones). `progress(done, total)` is called after
    /// each session.
    pub async fn import(
        &mut self,
        doc: &Export,
        now: TimeMs,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<ImportReport> {
        if doc.format != EXPORT_FORMAT {
            return Err(Error::invalid(format!("not a loci export (format {:?})", doc.format)));
        }
        if doc.version != EXPORT_VERSION {
            return Err(Error::invalid(format!(
                "export version {} is not supported (expected {EXPORT_VERSION})",
                doc.version
            )));
        }
        let mut batches = Vec::with_capacity(doc.sessions.len());
        let mut stored_as = Vec::with_capacity(doc.sessions.len());
        for (i, s) in doc.sessions.iter().enumerate() {
            if s.id.trim().is_empty() || s.turns.is_empty() {
                return Err(Error::invalid(format!("session {i} needs an id and at least one turn")));
            }
            let messages: Vec<MessageInput> = s
                .turns
                .iter()
                .map(|t| MessageInput {
                    speaker: Some(t.speaker.clone()),
                    content: t.text.clone(),
                    caption: t.caption.clone(),
                    time: Some(TimeInput::Millis(t.time)),
                    role: None,
                })
                .collect();
            // Each message as it would be stored (blank ones are skipped), with its position.
            let mut valid = Vec::with_capacity(messages.len());
            for (j, m) in messages.iter().enumerate() {
                if m.chars() > self.config.limits.max_call_chars {
                    return Err(Error::invalid(format!("session {:?}: message {j} is over the size limit", s.id)));
                }
                if let Some(v) = crate::types::validate_message(m, j, &self.config.limits)
                    .map_err(|e| Error::invalid(format!("session {:?}: {e}", s.id)))?
                {
                    valid.push((j, v));
                }
            }
            batches.push((s.id.as_str(), messages));
            stored_as.push(valid);
        }
        let mut report = ImportReport::default();
        let total = batches.len();
        for (done, ((id, messages), valid)) in batches.into_iter().zip(stored_as).enumerate() {
            let from = match self.session_index.contains_key(id) {
                false => Some(0),
                true => self.import_resumes_at(id, &valid),
            };
            let Some(from) = from else {
                report.sessions_skipped += 1;
                progress(done + 1, total);
                continue;
            };
            for chunk in call_sized(&messages[from..], &self.config.limits) {
                report.turns_imported += self.add_messages(chunk, Some(id), now).await?.turn_ids.len();
            }
            report.sessions_imported += 1;
            progress(done + 1, total);
        }
        Ok(report)
    }

    /// Where the import of session `id` (already here), whose messages are stored as `valid` (position, message),
    /// goes on: after the turns stored when they are the document's first ones and fewer (an import cut inside a
    /// session written in several runs); `None` (skip it) otherwise, as when it is all there or was written to since.
    fn import_resumes_at(&self, id: &str, valid: &[(usize, ValidMessage)]) -> Option<usize> {
        let have = self.session_turns(id);
        let same = |t: &Turn, v: &ValidMessage| {
            t.speaker == v.speaker && t.text == v.text && t.caption == v.caption && v.time == Some(t.time)
        };
        let begun = !have.is_empty() && have.len() < valid.len();
        (begun && have.iter().zip(valid).all(|(t, (_, v))| same(t, v))).then(|| valid[have.len()].0)
    }
}

/// `messages` in runs that one `addMessages` call accepts: at most `max_batch` messages and `max_call_chars`
/// characters each (every message alone fits: the caller checked).
fn call_sized<'a>(messages: &'a [MessageInput], limits: &InputLimits) -> Vec<&'a [MessageInput]> {
    let mut runs = Vec::new();
    let (mut start, mut chars) = (0, 0);
    for (i, m) in messages.iter().enumerate() {
        let c = m.chars();
        if i > start && (i - start == limits.max_batch || chars + c > limits.max_call_chars) {
            runs.push(&messages[start..i]);
            (start, chars) = (i, 0);
        }
        chars += c;
    }
    if start < messages.len() {
        runs.push(&messages[start..]);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_runs_stay_under_both_call_caps() {
        let m = |n: usize| MessageInput { role: Some("user".into()), content: "x".repeat(n), ..Default::default() };
        let limits = InputLimits { max_message_chars: 100, max_batch: 3, max_call_chars: 10 };
        let messages = [m(4), m(4), m(4), m(1), m(1), m(1), m(1), m(10)];
        let runs: Vec<usize> = call_sized(&messages, &limits).iter().map(|r| r.len()).collect();
        assert_eq!(runs, vec![2, 3, 2, 1]);
        assert!(call_sized(&[], &limits).is_empty());
    }
}
