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
    /// Replies cut at the output cap and repaired ([`repair_truncated`]).
    pub repaired: u32,
}

impl<T> Structured<T> {
    /// The same cost record around another value (e.g. once the value has been used).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Structured<U> {
        let Structured { value, calls, usage, latency_ms, truncated, shrunk, cut, repaired } = self;
        Structured { value: f(value), calls, usage, latency_ms, truncated, shrunk, cut, repaired }
    }
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

/// Where a scan of JSON text is with respect to strings (escapes respected).
#[derive(Default)]
struct Strings {
    open: bool,
    escaped: bool,
}

impl Strings {
    /// Feeds `c`; true when it belongs to a string (its quotes included), false when it is structure.
    fn inside(&mut self, c: char) -> bool {
        if self.open {
            match c {
                _ if self.escaped => self.escaped = false,
                '\\' => self.escaped = true,
                '"' => self.open = false,
                _ => {}
            }
            true
        } else if c == '"' {
            self.open = true;
            true
        } else {
            false
        }
    }
}

fn balanced_object(text: &str) -> Option<&str> {
    let mut search = 0;
    while let Some(offset) = text[search..].find('{') {
        let start = search + offset;
        let (mut depth, mut strings) = (0usize, Strings::default());
        for (i, c) in text[start..].char_indices() {
            if strings.inside(c) {
                continue;
            }
            match c {
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

/// A JSON reply cut off at the output cap, made whole: an unfinished string is ended at its last complete sentence
/// (or dropped, with its key, when it has none), open arrays and objects are closed, and every string loses
/// sentences it repeats (the loop that ran the model to its cap). `None` when the result still is not a `T`.
pub fn repair_truncated<T: DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_value(repaired_value(text)?).ok()
}

/// [`repair_truncated`] up to the JSON value, whatever type is asked for.
fn repaired_value(text: &str) -> Option<serde_json::Value> {
    let start = text.find('{')?;
    let body = &text[start..];
    let (mut stack, mut strings) = (Vec::new(), Strings::default());
    let mut str_start = 0;
    for (i, c) in body.char_indices() {
        if strings.inside(c) {
            if c == '"' && strings.open {
                str_start = i;
            }
            continue;
        }
        match c {
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' => {
                stack.pop();
                if stack.is_empty() {
                    return None; // complete: not a truncation (parse_reply already said what is wrong)
                }
            }
            _ => {}
        }
    }
    let mut fixed = if strings.open {
        // End the string at its last complete sentence; without one, drop it (and its key, if it is a value).
        let partial = &body[str_start + 1..];
        match partial.rfind(". ").map(|i| i + 1) {
            Some(end) => format!("{}{}\"", &body[..str_start + 1], &partial[..end]),
            None => body[..str_start].to_string(),
        }
    } else {
        body.to_string()
    };
    // Drop a dangling `"key":` or trailing comma before closing.
    loop {
        let t = fixed.trim_end();
        if let Some(rest) = t.strip_suffix(',') {
            fixed = rest.to_string();
        } else if let Some(rest) = t.strip_suffix(['{', '[']).filter(|_| stack.len() > 1) {
            // An item the cut left empty goes (its closer was the last one opened).
            stack.pop();
            fixed = rest.to_string();
        } else if let Some(rest) = t.strip_suffix(':') {
            let rest = rest.trim_end();
            let key_start = rest.strip_suffix('"').and_then(|r| r.rfind('"'))?;
            fixed = rest[..key_start].to_string();
        } else {
            fixed = t.to_string();
            break;
        }
    }
    while let Some(close) = stack.pop() {
        fixed.push(close);
    }
    let mut value: serde_json::Value = serde_json::from_str(&fixed).ok()?;
    dedupe_sentences(&mut value);
    Some(value)
}

fn dedupe_sentences(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => {
            let mut seen = std::collections::HashSet::new();
            let kept: Vec<&str> =
                s.split_inclusive(". ").filter(|x| seen.insert(x.trim().trim_end_matches('.'))).collect();
            *s = kept.concat().trim().to_string();
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(dedupe_sentences),
        serde_json::Value::Object(o) => o.values_mut().for_each(dedupe_sentences),
        _ => {}
    }
}

/// Parses `text` as a `T`, with a message fit to show the model when it fails.
pub fn parse_reply<T: DeserializeOwned>(text: &str) -> std::result::Result<T, String> {
    typed(reply_value(text)?)
}

/// The JSON object of a reply as a value, before it is read as any type (see [`parser_into`]).
fn reply_value(text: &str) -> std::result::Result<serde_json::Value, String> {
    let obj = extract_json_object(text).ok_or_else(|| {
        if text.contains('{') {
            "the JSON object is incomplete or malformed (was it cut short?)".to_string()
        } else {
            "the reply contains no JSON object".to_string()
        }
    })?;
    // Cannot fail: the object found is one that parsed.
    serde_json::from_str(obj).map_err(|e| format!("the JSON object is malformed: {e}"))
}

/// A reply's JSON value read as a `T`, with a message fit to show the model when it is not one.
fn typed<T: DeserializeOwned>(value: serde_json::Value) -> std::result::Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("the JSON object does not have the expected shape: {e}"))
}

/// The string field `key` of a JSON object as far as `partial` (the object being written, perhaps after prose or a
/// code fence) holds it: what a streamed answer says so far. `None` before the field's opening quote. An escape cut
/// at the end is left for the next piece. Written here because it reads one field of an unfinished object, which a
/// JSON parser refuses.
pub fn partial_string_field(partial: &str, key: &str) -> Option<String> {
    let name = format!("\"{key}\"");
    let after = &partial[partial.find(&name)? + name.len()..];
    let value = after.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = value.chars();
    let hex = |chars: &mut std::str::Chars| -> Option<u32> {
        let digits: String = chars.by_ref().take(4).collect();
        if digits.len() == 4 {
            u32::from_str_radix(&digits, 16).ok()
        } else {
            None
        }
    };
    while let Some(c) = chars.next() {
        let decoded = match c {
            '"' => break,
            '\\' => match chars.next() {
                Some('n') => '\n',
                Some('t') => '\t',
                Some('r') => '\r',
                Some('b') => '\u{8}',
                Some('f') => '\u{c}',
                Some('u') => {
                    let Some(mut code) = hex(&mut chars) else { break };
                    if (0xD800..0xDC00).contains(&code) {
                        // A surrogate pair: the low half follows as its own escape.
                        let low =
                            chars.next().zip(chars.next()).filter(|p| *p == ('\\', 'u')).and_then(|_| hex(&mut chars));
                        let Some(low) = low.filter(|l| (0xDC00..0xE000).contains(l)) else { break };
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    }
                    char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
                }
                Some(other) => other, // \" \\ \/
                None => break,
            },
            other => other,
        };
        out.push(decoded);
    }
    Some(out)
}

/// Sends `request` (JSON mode forced) and parses the reply as a `T`; on failure asks once more with the error.
pub async fn chat_json<T: DeserializeOwned>(llm: &dyn Llm, request: &LlmRequest) -> Result<Structured<T>> {
    let mut slot = None;
    let s = chat_json_parsed(llm, request, &mut parser_into(&mut slot)).await?;
    take_parsed(s, slot)
}

/// Parses a reply's text (`truncated`: cut at the output cap) as the reply type `T`, into the caller's `slot`:
/// returns how many repairs it took (0, or 1 for a cut reply closed after its last complete part), or why the text
/// is not the JSON asked for. The LLM round trips around it ([`chat_json_parsed`]) are the same for every reply
/// type, so they are written once, not once per `T` inlined in each caller (in wasm, a third of the
/// distillation runner's code).
pub(crate) type ReplyParser<'a> = dyn FnMut(&str, bool) -> std::result::Result<u32, String> + 'a;

/// The [`ReplyParser`] of `T`, keeping the value in `slot`.
pub(crate) fn parser_into<T: DeserializeOwned>(
    slot: &mut Option<T>,
) -> impl FnMut(&str, bool) -> std::result::Result<u32, String> + '_ {
    // Only reading the value as a `T` is per type: each reply type costs one serde_json instantiation (from a
    // `Value`), not two (from text, and from the repaired value).
    move |text, truncated| {
        let (value, repaired) = reply_value_repaired(text, truncated)?;
        *slot = Some(typed::<T>(value)?);
        Ok(repaired)
    }
}

/// A reply's JSON value and how many repairs it took: a reply cut at the output cap (`truncated`) whose object is
/// unfinished is closed by [`repaired_value`]. A complete object is taken as it is, even from a cut reply.
fn reply_value_repaired(text: &str, truncated: bool) -> std::result::Result<(serde_json::Value, u32), String> {
    match reply_value(text) {
        Ok(v) => Ok((v, 0)),
        Err(e) if truncated => repaired_value(text).map(|v| (v, 1)).ok_or(e),
        Err(e) => Err(e),
    }
}

/// The value a [`ReplyParser`] kept, in the cost record of the calls that produced it.
pub(crate) fn take_parsed<T>(s: Structured<()>, slot: Option<T>) -> Result<Structured<T>> {
    let value = slot.ok_or_else(|| Error::LlmBadReply("a parsed reply left no value".into()))?;
    Ok(s.map(|()| value))
}

/// [`chat_json`] for any reply type: `parse` reads each reply.
pub(crate) async fn chat_json_parsed(
    llm: &dyn Llm,
    request: &LlmRequest,
    parse: &mut ReplyParser<'_>,
) -> Result<Structured<()>> {
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
        // A reply cut at the output cap (often a small model looping on one sentence) is closed after its last
        // complete part rather than paid for again.
        match parse(&reply.text, reply.truncated) {
            Ok(repaired) => {
                let s = Structured {
                    value: (),
                    calls: attempt,
                    usage,
                    latency_ms,
                    truncated,
                    shrunk: 0,
                    cut: false,
                    repaired,
                };
                return Ok(s);
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

    #[test]
    fn a_field_being_written_is_read_as_far_as_it_goes() {
        let whole = r#"Sure! ```json
{"answer": "In \"Lisbon\",\nwith Maya \u00e9t\u00e9 \ud83d\ude00 \\ done"}
```"#;
        let parsed: serde_json::Value = serde_json::from_str(extract_json_object(whole).unwrap()).unwrap();
        let full = parsed["answer"].as_str().unwrap();
        assert_eq!(partial_string_field(whole, "answer").as_deref(), Some(full));
        let mut last = String::new();
        for end in (0..=whole.len()).filter(|&i| whole.is_char_boundary(i)) {
            let Some(so_far) = partial_string_field(&whole[..end], "answer") else {
                assert!(!whole[..end].contains("\"answer\": \""), "read once its quote opens");
                continue;
            };
            assert!(full.starts_with(&so_far), "{so_far:?} at {end}");
            assert!(so_far.len() >= last.len(), "never shrinks while one reply is written");
            last = so_far;
        }
        assert_eq!(last, full);
        assert_eq!(partial_string_field(r#"{"queries": ["a"]}"#, "answer"), None);
        assert_eq!(partial_string_field(r#"{"answer" :  ""#, "answer").as_deref(), Some(""));
    }
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

    #[derive(Debug, Deserialize, PartialEq)]
    struct Episodes {
        episodes: Vec<Narrated>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Narrated {
        group: u32,
        narrative: String,
        #[serde(default)]
        title: String,
    }

    #[test]
    fn a_reply_cut_in_a_loop_is_closed_after_its_last_sentence_without_the_repeats() {
        let looped =
            "{\n \"episodes\": [\n  {\"group\": 1, \"narrative\": \"Ana met Ben. They talked. Ben smiled. They \
                      talked. Ben smiled. They talk";
        let e: Episodes = repair_truncated(looped).expect("repaired");
        assert_eq!(
            e.episodes,
            vec![Narrated {
                group: 1,
                narrative: "Ana met Ben. They talked. Ben smiled.".into(),
                title: String::new()
            }]
        );
        // Cut inside a key, after a comma: the partial entry goes.
        let cut = "{\"episodes\": [{\"group\": 1, \"narrative\": \"Done.\"}, {\"gro";
        let e: Episodes = repair_truncated(cut).expect("repaired");
        assert_eq!(e.episodes.len(), 1);
        let dangling = "{\"episodes\": [{\"group\": 1, \"narrative\": \"Done.\", \"title\":";
        assert_eq!(repair_truncated::<Episodes>(dangling).unwrap().episodes[0].narrative, "Done.");
        assert!(repair_truncated::<Episodes>("{\"episodes\": []}").is_none(), "complete JSON is not a truncation");
        assert!(repair_truncated::<Keep>("no json").is_none());
    }

    #[test]
    fn a_truncated_reply_is_repaired_and_counted_instead_of_asked_again() {
        struct Cut;
        #[async_trait::async_trait(?Send)]
        impl crate::llm::Llm for Cut {
            async fn chat(&self, _: &LlmRequest) -> Result<crate::llm::LlmReply> {
                Ok(crate::llm::LlmReply {
                    text: "{\"keep\": [\"1.1\", \"1.2\", \"1.".into(),
                    usage: Usage::default(),
                    latency_ms: 1.0,
                    truncated: true,
                })
            }
        }
        let r: Structured<Keep> =
            pollster::block_on(chat_json(&Cut, &LlmRequest::new(vec![ChatMessage::user("q")]))).unwrap();
        assert_eq!(
            (r.value.keep, r.calls, r.truncated, r.repaired),
            (vec!["1.1".to_string(), "1.2".to_string()], 1, 1, 1)
        );
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
