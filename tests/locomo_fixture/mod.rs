//! One LoCoMo conversation as loci messages, built the same way by the native and the browser tests so that their
//! rankings can be compared (the data is read at test time from ../shared, never committed).
#![allow(dead_code)]

use loci::types::{MessageInput, TimeInput};
use serde_json::Value;

/// `(session id, messages)` in session order: `session_N` keys holding a list, dated by `session_N_date_time`.
pub fn sessions(conversation: &Value) -> Vec<(String, Vec<MessageInput>)> {
    let Some(map) = conversation.as_object() else { return Vec::new() };
    let mut numbered: Vec<(u32, &str)> = map
        .iter()
        .filter(|(_, v)| v.is_array())
        .filter_map(|(k, _)| k.strip_prefix("session_")?.parse::<u32>().ok().map(|n| (n, k.as_str())))
        .collect();
    numbered.sort();
    numbered
        .into_iter()
        .map(|(n, key)| {
            let date = map.get(&format!("session_{n}_date_time")).and_then(Value::as_str).unwrap_or("");
            let time = chrono::NaiveDateTime::parse_from_str(date, "%I:%M %p on %d %B, %Y")
                .map(|t| t.and_utc().timestamp_millis() as f64)
                .ok();
            let messages = map[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|turn| MessageInput {
                    speaker: turn["speaker"].as_str().map(str::to_string),
                    content: turn["text"].as_str().unwrap_or("").to_string(),
                    caption: turn["blip_caption"].as_str().map(str::to_string),
                    time: time.map(TimeInput::Millis),
                    role: None,
                })
                .filter(|m| !m.content.trim().is_empty())
                .collect();
            (key.to_string(), messages)
        })
        .collect()
}

/// One question's ranking: the top sessions and their scores.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct Ranked {
    pub question: String,
    pub sessions: Vec<String>,
    pub scores: Vec<f32>,
}

/// Where the native test writes its rankings for the browser test to compare.
pub const NATIVE_RANKINGS: &str = "target/loci-native-locomo-rankings.json";

/// Where the native distillation test writes the fault-free end state of conv-26 (turns, episodes and facts) for the
/// browser test to compare.
pub const NATIVE_DISTILL_STATE: &str = "target/loci-native-distill-conv26.json";
