//! Structured output: a typed value from an LLM reply. Models wrap JSON in code fences or prose, cut it short, or
//! get a field wrong; this finds the JSON object in the text, validates it with serde into the expected type and, on
//! failure, asks once more telling the model what was wrong. A second failure is [`Error::LlmBadReply`] — the
//! caller's state is untouched because nothing is applied before a value has parsed.

use serde::de::DeserializeOwned;

use super::{ChatMessage, Llm, LlmRequest, Usage};
use crate::error::{Error, Result};

/// A parsed value and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T> {
    pub value: T,
    /// Calls made: 1, or 2 when the first reply had to be corrected.
    pub calls: u32,
    pub usage: Usage,
    pub latency_ms: f64,
    /// Replies cut at the output cap (`finish_reason: "length"`), each answered with a corrective retry.
    pub truncated: u32,
    /// Times the prompt was sent again smaller because the endpoint said its context was exceeded.
    pub shrunk: u32,
    /// Whether quoted texts were cut to fit the model's window.
    pub cut: bool,
}

/// The first complete JSON object in `text`: inside a ```` ```json ```` fence if there is one, else the first `{`
/// whose braces balance (strings and escapes respected). `None` when no complete object is there (e.g. truncated).
pub fn extract_json_object(text: &str) -> Option<&str> {
    let fenced = text.find("```").and_then(|start| {
        let after = &text[start + 3..];
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
        let body = &after[body_start..];
        body.find("```").map(|end| &body[..end])
    });
    if let Some(obj) = fenced.and_then(balanced_object) {
        return Some(obj);
    }
    balanced_object(text)
}

fn balanced_object(text: &str) -> Option<&str> {
    let mut search = 0;
    while let Some(offset) = text[search..].find('{') {
        let start = search + offset;
        let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
        for (i, c) in text[start..].char_indices() {
            if in_str {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_str = true,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        let candidate = &text[start..start + i + 1];
                        if serde_json::from_str::<serde_json::Value>(candidate).is_ok() {
                            return Some(candidate);
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
        search = start + 1;
    }
    None
}

/// Parses `text` as a `T`, with a message fit to show the model when it fails.
pub fn parse_reply<T: DeserializeOwned>(text: &str) -> std::result::Result<T, String> {
    let obj = extract_json_object(text).ok_or_else(|| {
        if text.contains('{') {
            "the JSON object is incomplete or malformed (was it cut short?)".to_string()
        } else {
            "the reply contains no JSON object".to_string()
        }
    })?;
    serde_json::from_str(obj).map_err(|e| format!("the JSON object does not have the expected shape: {e}"))
}

/// Sends `request` (JSON mode forced) and parses the reply as a `T`; on failure asks once more with the error.
pub async fn chat_json<T: DeserializeOwned>(llm: &dyn Llm, request: &LlmRequest) -> Result<Structured<T>> {
    let mut request = LlmRequest { json: true, ..request.clone() };
    let mut usage = Usage::default();
    let mut latency_ms = 0.0;
    let mut last_error = String::new();
    let mut truncated = 0;
    for attempt in 1..=2u32 {
        let reply = llm.chat(&request).await?;
        usage.add(reply.usage);
        latency_ms += reply.latency_ms;
        truncated += reply.truncated as u32;
        match parse_reply::<T>(&reply.text) {
            Ok(value) => {
                return Ok(Structured { value, calls: attempt, usage, latency_ms, truncated, shrunk: 0, cut: false })
            }
            Err(e) => {
                last_error = if reply.truncated {
                    format!(
                        "the reply was cut off at the output limit before the JSON object ended; reply with a \
                             shorter JSON object ({e})"
                    )
                } else {
                    e
                };
                request.messages.push(ChatMessage::assistant(reply.text));
                request.messages.push(ChatMessage::user(super::prompts::correction(&last_error)));
            }
        }
    }
    Err(Error::LlmBadReply(format!("no valid JSON after a corrective retry: {last_error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ScriptedLlm;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Keep {
        keep: Vec<String>,
    }

    #[test]
    fn finds_the_object_in_fences_and_prose() {
        assert_eq!(extract_json_object(r#"{"a": 1}"#), Some(r#"{"a": 1}"#));
        assert_eq!(
            extract_json_object("Sure! ```json\n{\"a\": {\"b\": \"}\"}}\n``` hope it helps"),
            Some("{\"a\": {\"b\": \"}\"}}")
        );
        assert_eq!(extract_json_object("Here: {\"a\": \"x\\\"}\"} and {\"b\": 2}"), Some("{\"a\": \"x\\\"}\"}"));
        assert_eq!(extract_json_object("prefix {not json} then {\"ok\": true}"), Some("{\"ok\": true}"));
        assert_eq!(extract_json_object("{\"trunc"), None);
        assert_eq!(extract_json_object("no json at all"), None);
    }

    #[test]
    fn errors_name_what_was_wrong() {
        assert!(parse_reply::<Keep>("{\"keep\": [").unwrap_err().contains("incomplete"));
        assert!(parse_reply::<Keep>("nothing").unwrap_err().contains("no JSON object"));
        assert!(parse_reply::<Keep>("{\"kept\": []}").unwrap_err().contains("missing field `keep`"));
        assert_eq!(parse_reply::<Keep>("```\n{\"keep\": [\"1.2\"]}\n```").unwrap().keep, vec!["1.2"]);
    }

    #[test]
    fn retries_once_with_the_error_then_gives_a_typed_error() {
        let llm = ScriptedLlm::new([Ok("not json".to_string()), Ok("{\"keep\": [\"1.1\"]}".to_string())]);
        let r: Structured<Keep> =
            pollster::block_on(chat_json(&llm, &LlmRequest::new(vec![ChatMessage::user("q")]))).unwrap();
        assert_eq!((r.value.keep.len(), r.calls), (1, 2));
        let second = &llm.requests.borrow()[1];
        assert!(second.json);
        assert_eq!(second.messages.len(), 3);
        assert!(second.messages[2].content.contains("no JSON object"), "{}", second.messages[2].content);

        let llm = ScriptedLlm::new([Ok("{\"trunc".to_string()), Ok("still {\"bad\": 1}".to_string())]);
        let e =
            pollster::block_on(chat_json::<Keep>(&llm, &LlmRequest::new(vec![ChatMessage::user("q")]))).unwrap_err();
        assert_eq!(e.code(), "LLM_BAD_REPLY");
        assert_eq!(llm.remaining(), 0);
    }
}
