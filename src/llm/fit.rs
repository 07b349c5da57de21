//! Prompts that fit the model. Users bring models with windows of 2k–8k tokens (WebLLM's small models, Chrome's
//! built-in one, a local llama.cpp), so every prompt loci sends is sized against the LLM's
//! [`context_tokens`](super::Llm::context_tokens) before it goes out: the texts it quotes (turns, narratives,
//! facts, a recalled context) are cut, longest first, to the largest length at which the prompt and the reply's
//! cap fit, with a margin because loci counts with its own WordPiece tokenizer, not the model's. An endpoint that
//! still answers "context exceeded" (its tokenizer counts more than ours, or its window is smaller than the one
//! loci was told) gets the prompt again at half the size (as loci counts it). Work shrinks; it never fails for size alone.

use std::borrow::Cow;

use serde::de::DeserializeOwned;

use super::structured::{chat_json_parsed, parser_into, take_parsed, ReplyParser, Structured};
use super::{ChatMessage, Llm, LlmRequest};
use crate::error::{Error, Result};

/// The window assumed when the user does not give one: llama.cpp's default, and about what small in-browser
/// models have.
pub const DEFAULT_CONTEXT_TOKENS: usize = 4096;

/// Shortest a quoted text is cut to before a prompt is declared unable to fit.
const MIN_CAP: usize = 40;

/// Re-sends after an endpoint's "context exceeded", each at half the previous size (a window claimed 8× too large
/// still gets through).
const SHRINK_RETRIES: u32 = 4;

/// Counts tokens of a text (loci's WordPiece in the product).
pub type Count<'a> = &'a dyn Fn(&str) -> usize;

/// Tokens a prompt may take in a window of `context_tokens` with `max_output` reserved for the reply: 15% of the
/// window is kept back for tokenizer differences.
pub fn input_budget(context_tokens: usize, max_output: u32) -> usize {
    (context_tokens * 85 / 100).saturating_sub(max_output as usize)
}

/// The most a reply may take in a window of `context_tokens`: a quarter, as the prompt needs the rest.
pub fn reply_limit(context_tokens: usize) -> u32 {
    (context_tokens / 4) as u32
}

/// A prompt's tokens: its messages' and ~4 per message for the chat template.
pub fn prompt_tokens(messages: &[ChatMessage], count: Count) -> usize {
    messages.iter().map(|m| count(&m.content) + 4).sum()
}

/// `text` cut to at most `cap` characters, marked where it was cut.
pub fn cap_text(text: &str, cap: usize) -> Cow<'_, str> {
    match text.char_indices().nth(cap) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{} […]", text[..end].trim_end())),
    }
}

/// `text` cut to at most `cap` characters (and the mark) by leaving out its middle: for what a user asks, where a
/// pasted document says what is wanted of it at its opening ("Here is the report: …") or its end ("… what should I
/// check first?"). Two thirds of the cap go to the opening.
pub fn cap_ends(text: &str, cap: usize) -> Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= cap {
        return Cow::Borrowed(text);
    }
    let head = cap - cap / 3;
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    let (start, end) = (&text[..at(head)], &text[at(chars - cap / 3)..]);
    Cow::Owned(format!("{} […] {}", start.trim_end(), end.trim_start()))
}

/// The largest cap (characters per quoted text) at which `build(cap)` fits `budget`: `usize::MAX` when the whole
/// prompt fits, `None` when even [`MIN_CAP`] does not.
pub fn fit_cap(budget: usize, build: &dyn Fn(usize) -> Vec<ChatMessage>, count: Count) -> Option<usize> {
    let fits = |cap: usize| prompt_tokens(&build(cap), count) <= budget;
    if fits(usize::MAX) {
        return Some(usize::MAX);
    }
    if !fits(MIN_CAP) {
        return None;
    }
    // Binary search between MIN_CAP (fits) and the longest text (does not).
    let longest = build(usize::MAX).iter().map(|m| m.content.chars().count()).max().unwrap_or(MIN_CAP);
    let (mut lo, mut hi) = (MIN_CAP, longest.max(MIN_CAP + 1));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// [`chat_json`] for a prompt built at a length cap: sent at the largest cap that fits the LLM's window (less
/// `request.max_tokens` for the reply), and re-sent at half the size when the endpoint says the context is exceeded.
/// `request.messages` is ignored; `build(usize::MAX)` is the prompt uncut.
pub async fn chat_json_fitted<T: DeserializeOwned>(
    llm: &dyn Llm,
    request: &LlmRequest,
    build: &dyn Fn(usize) -> Vec<ChatMessage>,
    count: Count<'_>,
) -> Result<Structured<T>> {
    chat_json_fitted_first(llm, request, &[build], count).await
}

/// [`chat_json_fitted`] with ways of building the prompt in order of preference: each time, the first that fits
/// at some cap is sent (e.g. every line cut to a common length, else the whole cut at its end).
pub async fn chat_json_fitted_first<T: DeserializeOwned>(
    llm: &dyn Llm,
    request: &LlmRequest,
    builds: &[&dyn Fn(usize) -> Vec<ChatMessage>],
    count: Count<'_>,
) -> Result<Structured<T>> {
    let mut slot = None;
    let s = chat_json_fitted_parsed(llm, request, builds, count, &mut parser_into(&mut slot)).await?;
    take_parsed(s, slot)
}

/// [`chat_json_fitted_first`] for any reply type: `parse` reads each reply (see [`ReplyParser`]).
async fn chat_json_fitted_parsed(
    llm: &dyn Llm,
    request: &LlmRequest,
    builds: &[&dyn Fn(usize) -> Vec<ChatMessage>],
    count: Count<'_>,
    parse: &mut ReplyParser<'_>,
) -> Result<Structured<()>> {
    let max_tokens = request.max_tokens.map(|m| m.min(reply_limit(llm.context_tokens())));
    let request = &LlmRequest { max_tokens, ..request.clone() };
    let mut budget = input_budget(llm.context_tokens(), max_tokens.unwrap_or(0));
    let mut shrunk = 0;
    loop {
        let fitted = builds.iter().find_map(|build| fit_cap(budget, *build, count).map(|cap| (build, cap)));
        let (build, cap) = fitted.ok_or_else(|| {
            Error::LlmContextExceeded(format!(
                "the prompt does not fit the model's {}-token context even with every quoted text cut to \
                 {MIN_CAP} characters (give the LLM's real `contextTokens`, or a smaller output cap)",
                llm.context_tokens()
            ))
        })?;
        let attempt = LlmRequest { messages: build(cap), ..request.clone() };
        match chat_json_parsed(llm, &attempt, parse).await {
            Err(Error::LlmContextExceeded(_)) if shrunk < SHRINK_RETRIES => {
                shrunk += 1;
                budget = prompt_tokens(&attempt.messages, count) / 2;
            }
            Ok(mut s) => {
                s.shrunk = shrunk;
                s.cut = cap != usize::MAX;
                return Ok(s);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ScriptedLlm;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    #[test]
    fn a_question_cut_keeps_its_opening_and_its_end() {
        assert_eq!(cap_ends("short", 40), "short");
        let paste = format!("Here is the report: {} What should I check first?", "é line of the report. ".repeat(500));
        let cut = cap_ends(&paste, 300);
        assert!(cut.starts_with("Here is the report: é line"), "{cut}");
        assert!(cut.ends_with("What should I check first?"), "{cut}");
        assert!(cut.contains(" […] "));
        assert!(cut.chars().count() <= 300 + " […] ".chars().count(), "{}", cut.chars().count());
    }

    fn prompt(texts: &[String], cap: usize) -> Vec<ChatMessage> {
        let quoted: Vec<String> = texts.iter().map(|t| cap_text(t, cap).into_owned()).collect();
        vec![ChatMessage::system("Answer in JSON."), ChatMessage::user(quoted.join("\n"))]
    }

    #[test]
    fn cuts_the_longest_texts_only_as_far_as_needed() {
        let long = "word ".repeat(2_000);
        let texts = vec!["a short line".to_string(), long.clone()];
        let build = |cap| prompt(&texts, cap);
        assert_eq!(fit_cap(10_000, &build, &words), Some(usize::MAX), "fits whole");
        let cap = fit_cap(500, &build, &words).expect("fits when cut");
        assert!(prompt_tokens(&build(cap), &words) <= 500);
        assert!(prompt_tokens(&build(cap + 1), &words) > 500, "the largest cap that fits");
        assert!(build(cap)[1].content.starts_with("a short line\nword word"), "short texts are kept whole");
        assert!(build(cap)[1].content.ends_with("[…]"));
        assert_eq!(fit_cap(5, &build, &words), None, "even the shortest cut does not fit");
        assert_eq!(cap_text("héllo wörld", 3), "hél […]");
    }

    /// `text` with each of its lines cut to at most `cap` characters, as the answer's context is (where a long line
    /// keeps the sentences its question asks about: `recall::excerpt`).
    fn cap_lines(text: &str, cap: usize) -> String {
        text.lines().map(|l| cap_text(l, cap)).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn a_long_line_gives_way_before_the_lines_after_it_and_many_lines_are_cut_at_the_end() {
        #[derive(serde::Deserialize)]
        struct Ok_ {
            #[allow(dead_code)]
            ok: bool,
        }
        let send = |context: String| {
            let llm = ScriptedLlm::new([Ok(r#"{"ok": true}"#.to_string())]);
            let per_line = |cap| vec![ChatMessage::user(cap_lines(&context, cap))];
            let at_end = |cap| vec![ChatMessage::user(cap_text(&context, cap).into_owned())];
            let request = LlmRequest { max_tokens: Some(100), ..LlmRequest::new(vec![]) };
            let builds: [&dyn Fn(usize) -> Vec<ChatMessage>; 2] = [&per_line, &at_end];
            assert!(pollster::block_on(chat_json_fitted_first::<Ok_>(&llm, &request, &builds, &words)).unwrap().cut);
            let sent = llm.requests.borrow()[0].messages[0].content.clone();
            assert!(
                prompt_tokens(&[ChatMessage::user(sent.clone())], &words) <= input_budget(DEFAULT_CONTEXT_TOKENS, 100)
            );
            sent
        };
        // A pasted document first, the answer after it: the document is cut, the last line kept whole.
        let sent = send(format!("{}\nthe ferry was booked by Maria", "word ".repeat(8_000)));
        assert!(
            sent.ends_with("\nthe ferry was booked by Maria") && sent.contains("[…]"),
            "{}",
            &sent[sent.len() - 80..]
        );
        // Too many lines for even the shortest cut each: the whole is cut at its end instead.
        let many: Vec<String> = (0..2_000).map(|i| format!("line {i} {}", "word ".repeat(10))).collect();
        let sent = send(many.join("\n"));
        assert!(sent.starts_with("line 0 word") && sent.ends_with("[…]") && !sent.contains("line 1999"));
    }

    #[test]
    fn an_endpoint_that_says_context_exceeded_gets_a_smaller_prompt() {
        let long = "word ".repeat(3_000);
        let texts = vec![long];
        let llm = ScriptedLlm::new([
            Err(Error::LlmContextExceeded("HTTP 400: exceeds the available context size".into())),
            Ok(r#"{"ok": true}"#.to_string()),
        ]);
        #[derive(serde::Deserialize)]
        struct Ok_ {
            ok: bool,
        }
        let request = LlmRequest { max_tokens: Some(100), ..LlmRequest::new(vec![]) };
        let reply: Structured<Ok_> =
            pollster::block_on(chat_json_fitted(&llm, &request, &|cap| prompt(&texts, cap), &words)).unwrap();
        assert!(reply.value.ok);
        assert_eq!((reply.shrunk, reply.cut), (1, true));
        let sent = llm.requests.borrow();
        let (first, second) = (prompt_tokens(&sent[0].messages, &words), prompt_tokens(&sent[1].messages, &words));
        assert!(first <= input_budget(DEFAULT_CONTEXT_TOKENS, 100), "{first}");
        assert!(second <= first / 2 + 1, "{second} after {first}");
    }
}
