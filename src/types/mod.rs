//! The data model: what the caller gives (messages) and what loci keeps (turns, sessions, units; `distilled`:
//! episodes, facts and jobs).
//! Validation lives here so that a bad message is refused before anything is written.

pub mod distilled;
// The engine's (a crate of its own: see engine/src/lib.rs), under the paths the rest of loci reads them by.
pub use loci_engine::{bytes, calendar, Session, TimeMs};
mod turns;

pub use turns::{PackedTurn, TurnRef, Turns};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A message as the caller hands it to `addMessages`. Other fields are ignored, so OpenAI-style message objects
/// (with `name`, `tool_calls`, …) can be passed as they are.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct MessageInput {
    /// `"user"`, `"assistant"`, … Either this or `speaker` is required.
    #[serde(default)]
    pub role: Option<String>,
    /// A speaker's name, for multi-party conversations.
    #[serde(default)]
    pub speaker: Option<String>,
    /// The utterance.
    pub content: String,
    /// Event time: ISO-8601 / RFC 3339 string, `YYYY-MM-DD`, or epoch milliseconds. Defaults to now.
    #[serde(default)]
    pub time: Option<TimeInput>,
    /// A description of an image shared with the message.
    #[serde(default)]
    pub caption: Option<String>,
}

/// A time as JavaScript may give it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum TimeInput {
    /// Epoch milliseconds (`Date.now()`, `date.getTime()`).
    Millis(f64),
    /// ISO-8601 text.
    Text(String),
}

/// One stored utterance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub id: u64,
    pub session: String,
    /// Position within its session, from 0.
    pub seq: u32,
    pub speaker: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// When it was said (caller-supplied, default: ingest time).
    pub time: TimeMs,
    /// When loci stored it.
    pub ingested: TimeMs,
}

impl Turn {
    /// The text that is embedded and indexed: `[speaker]: text`, plus the image caption when there is one.
    /// This is the papers' format (BENCHMARK_PROTOCOL.md), caption phrase included, so that
    /// benchmark numbers and the product use one code path.
    pub fn unit_text(&self) -> String {
        unit_text_of(&self.speaker, &self.text, self.caption.as_deref())
    }
}

/// [`Turn::unit_text`] of a turn's parts.
pub fn unit_text_of(speaker: &str, text: &str, caption: Option<&str>) -> String {
    let mut s = format!("[{speaker}]: {text}");
    if let Some(c) = caption {
        s.push_str("\n The image Caption: ");
        s.push_str(c);
    }
    s
}

/// What gets embedded: by default a pair of consecutive turns of one session (the papers' setting).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub id: u32,
    pub session: String,
    pub turn_ids: Vec<u64>,
}

/// How turns are grouped into embedded units.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum UnitMode {
    /// Positions (0,1), (2,3), … of a session; an odd last turn stands alone until its partner arrives.
    #[default]
    Pair,
    /// One turn per unit.
    Single,
}

impl UnitMode {
    /// Turns per unit.
    pub fn size(self) -> usize {
        match self {
            UnitMode::Pair => 2,
            UnitMode::Single => 1,
        }
    }
}

/// Limits applied to incoming messages.
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    /// Maximum characters of one message's content (and of its caption). Pasting a long document into a chat is
    /// normal (embedded as overlapping windows, cut in LLM prompts to fit): 200,000 characters, about a
    /// 60-page report, by default; the cap only stops a runaway paste from filling the store.
    pub max_message_chars: usize,
    /// Maximum messages in one `addMessages` call.
    pub max_batch: usize,
    /// Maximum characters (contents and captions) in one `addMessages` call: ten of the longest messages. More
    /// at once is a mistake or an attack, not a chat; `import` splits its sessions to stay under it.
    pub max_call_chars: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits { max_message_chars: 200_000, max_batch: 10_000, max_call_chars: 2_000_000 }
    }
}

impl MessageInput {
    /// Characters of its content and caption (what the call caps count).
    pub fn chars(&self) -> usize {
        self.content.chars().count() + self.caption.as_ref().map_or(0, |c| c.chars().count())
    }
}

/// A validated message: speaker resolved, time parsed, text trimmed of nothing (the user's words are kept as given).
#[derive(Debug, Clone, PartialEq)]
pub struct ValidMessage {
    pub speaker: String,
    pub text: String,
    pub caption: Option<String>,
    pub time: Option<TimeMs>,
}

/// Checks one message; `index` names it in the error. `Ok(None)`: nothing to store (blank content and no caption,
/// e.g. an assistant turn that only called a tool), which the caller skips and reports rather than refuse the batch.
pub fn validate_message(m: &MessageInput, index: usize, limits: &InputLimits) -> Result<Option<ValidMessage>> {
    let at = |msg: String| Error::invalid(format!("message {index}: {msg}"));
    let speaker = match (&m.speaker, &m.role) {
        (Some(s), _) if !s.trim().is_empty() => s.trim().to_string(),
        (_, Some(r)) if !r.trim().is_empty() => r.trim().to_string(),
        _ => return Err(at("needs a non-empty `role` or `speaker`".into())),
    };
    if speaker.chars().count() > 200 {
        return Err(at("`role`/`speaker` is longer than 200 characters".into()));
    }
    let blank = |s: &str| s.trim().is_empty();
    if blank(&m.content) && m.caption.as_deref().is_none_or(blank) {
        return Ok(None);
    }
    let chars = m.content.chars().count();
    if chars > limits.max_message_chars {
        return Err(at(format!(
            "`content` has {chars} characters, over the limit of {} (option `maxMessageChars`)",
            limits.max_message_chars
        )));
    }
    let caption = match &m.caption {
        Some(c) if c.chars().count() > limits.max_message_chars => {
            return Err(at("`caption` is over the size limit".into()))
        }
        Some(c) if !c.trim().is_empty() => Some(c.clone()),
        _ => None,
    };
    let time = match &m.time {
        None => None,
        Some(t) => Some(parse_time(t).map_err(|e| at(e.to_string()))?),
    };
    Ok(Some(ValidMessage { speaker, text: m.content.clone(), caption, time }))
}

/// The times a caller may give: years 1 to 9999. chrono's calendar reaches a little further (about ±262,000 years),
/// but date arithmetic near its ends overflows, and no chat message was sent outside this.
use calendar::{EARLIEST_MS, LATEST_MS};

/// Parses a caller's time into epoch milliseconds (years 1 to 9999).
pub fn parse_time(t: &TimeInput) -> Result<TimeMs> {
    let ms = match t {
        TimeInput::Millis(ms) if ms.is_finite() => *ms,
        TimeInput::Millis(ms) => {
            return Err(Error::invalid(format!("`time` {ms} is not a valid epoch-milliseconds value")))
        }
        TimeInput::Text(text) => parse_time_text(text.trim())
            .ok_or_else(|| Error::invalid(format!("`time` {text:?} is not an ISO-8601 date or date-time")))?,
    };
    if !(EARLIEST_MS..=LATEST_MS).contains(&ms) {
        let given = match t {
            TimeInput::Millis(ms) => ms.to_string(),
            TimeInput::Text(text) => format!("{text:?}"),
        };
        return Err(Error::invalid(format!("`time` {given} is outside the years 1 to 9999")));
    }
    Ok(ms)
}

/// Naive date-times are read as UTC: the browser's zone is not the memory's business.
fn parse_time_text(s: &str) -> Option<TimeMs> {
    calendar::parse_iso(s)
}

/// Formats epoch milliseconds as a date header, e.g. `2023-05-08 13:56 UTC`.
pub fn format_time(ms: TimeMs) -> String {
    // Stored times lie in the years 1 to 9999 (`parse_time`); anything else is not shown as a date.
    match (EARLIEST_MS..=LATEST_MS).contains(&ms) {
        true => calendar::format_date_time(ms),
        false => "unknown time".to_string(),
    }
}

/// Packs f32 vectors as little-endian bytes: binary in storage, never JSON arrays.
pub fn pack_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Inverse of [`pack_f32`]; trailing bytes that do not make a whole float are an error.
pub fn unpack_f32(bytes: &[u8]) -> Option<Vec<f32>> {
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lexical index reads a unit as its turns' parts (`Memory` indexes them so, without joining them): the
    /// same terms as the joined unit text.
    #[test]
    fn parts_index_as_the_joined_unit_text() {
        let turn = |speaker: &str, text: &str, caption: Option<&str>| Turn {
            id: 1,
            session: "s".into(),
            seq: 0,
            speaker: speaker.into(),
            text: text.into(),
            caption: caption.map(str::to_string),
            time: 0.0,
            ingested: 0.0,
        };
        let turns = [turn("Mary-Ann", "Running late, sorry!", None), turn("Léo", "Look: the images", Some("a Cat"))];
        let joined = turns.iter().map(|t| t.unit_text()).collect::<Vec<_>>().join("\n");
        let (mut a, mut b) = (crate::index::Bm25Index::new(), crate::index::Bm25Index::new());
        a.insert(1, 0, &joined);
        a.insert(2, 0, "image cat");
        let parts = turns.iter().flat_map(|t| {
            let c = t.caption.as_deref();
            [Some(t.speaker.as_str()), Some(t.text.as_str()), c.map(|_| "The image Caption"), c]
        });
        b.insert_parts(1, 0, parts.flatten());
        b.insert(2, 0, "image cat");
        let (mut x, mut y) = (Vec::new(), Vec::new());
        let q = "mary ann run late sorry leo look images caption cat";
        a.scores_into(&a.query(q), &mut x);
        b.scores_into(&b.query(q), &mut y);
        assert!(x[0] > 0.0);
        assert_eq!(x, y);
        assert_eq!(a.query(q), b.query(q));
    }

    fn msg(content: &str) -> MessageInput {
        MessageInput { role: Some("user".into()), content: content.into(), ..Default::default() }
    }

    #[test]
    fn skips_blank_content_and_refuses_oversized_content() {
        let limits = InputLimits { max_message_chars: 10, max_batch: 5, max_call_chars: 100 };
        assert_eq!(validate_message(&msg("  \n"), 0, &limits).unwrap(), None, "nothing to store");
        let captioned = MessageInput { caption: Some("a dog".into()), ..msg("") };
        assert_eq!(validate_message(&captioned, 0, &limits).unwrap().unwrap().caption.as_deref(), Some("a dog"));
        let err = validate_message(&msg("12345678901"), 3, &limits).unwrap_err();
        assert!(err.to_string().contains("message 3"), "{err}");
        assert!(validate_message(&msg("1234567890"), 0, &limits).unwrap().is_some());
    }

    #[test]
    fn needs_role_or_speaker() {
        let m = MessageInput { content: "hi".into(), ..Default::default() };
        assert!(validate_message(&m, 0, &InputLimits::default()).is_err());
        let blank = MessageInput { content: "".into(), ..Default::default() };
        assert!(validate_message(&blank, 0, &InputLimits::default()).is_err(), "a blank message still needs a role");
        let m = MessageInput { speaker: Some("Caroline".into()), content: "hi".into(), ..Default::default() };
        assert_eq!(validate_message(&m, 0, &InputLimits::default()).unwrap().unwrap().speaker, "Caroline");
    }

    #[test]
    fn parses_times() {
        let t = |s: &str| parse_time(&TimeInput::Text(s.into()));
        assert_eq!(t("2023-05-08T13:56:00Z").unwrap(), 1_683_554_160_000.0);
        assert_eq!(t("2023-05-08T15:56:00+02:00").unwrap(), 1_683_554_160_000.0);
        assert_eq!(t("2023-05-08T13:56").unwrap(), 1_683_554_160_000.0);
        assert_eq!(t("2023-05-08").unwrap(), 1_683_504_000_000.0);
        assert!(t("yesterday").is_err());
        assert!(t("2023-13-45").is_err());
        assert!(parse_time(&TimeInput::Millis(f64::NAN)).is_err());
        // Years 1 to 9999 only: past them chrono's date arithmetic panics (a recall rendering "yesterday" would trap).
        assert!(
            parse_time(&TimeInput::Millis(EARLIEST_MS)).is_ok() && parse_time(&TimeInput::Millis(LATEST_MS)).is_ok()
        );
        for out in [EARLIEST_MS - 1.0, LATEST_MS + 1.0, -8.334_601_315_2e15, 8.6e15] {
            let e = parse_time(&TimeInput::Millis(out)).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)) && e.to_string().contains("years 1 to 9999"), "{out}: {e}");
        }
        assert!(t("+10000-01-01T00:00:00").is_err());
        assert!(t("0000-12-31").is_err());
        assert_eq!(format_time(1_683_554_160_000.0), "2023-05-08 13:56 UTC");
    }

    #[test]
    fn unit_text_follows_the_paper_format() {
        let turn = Turn {
            id: 1,
            session: "s".into(),
            seq: 0,
            speaker: "Mel".into(),
            text: "Look!".into(),
            caption: Some("a dog".into()),
            time: 0.0,
            ingested: 0.0,
        };
        assert_eq!(turn.unit_text(), "[Mel]: Look!\n The image Caption: a dog");
    }
}
