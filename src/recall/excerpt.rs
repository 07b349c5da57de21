//! A long text cut for a question: when a quoted text (a pasted document) must shrink to fit the model's window,
//! its head is not what matters, the part that answers is. [`Excerpt`] keeps the sentences that share the
//! question's words (rarer words in the text weigh more, as BM25's idf), then the sentences around them, in the
//! text's order, with `[…]` where sentences were left out. A text that shares no word with the question is cut at
//! its end, as before.
//!
//! Pure: no embedding (the text's window vectors are not at hand where prompts are fitted, and a sentence-level
//! lexical match is what a cut of a few hundred characters needs), no allocation per call beyond the result.

use std::borrow::Cow;
use std::ops::Range;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::index::bm25;
use crate::llm::fit::cap_text;
use crate::sort;

/// Texts at most this long are cut at their end ([`cap_text`]): too short to hold passages worth choosing between.
const MIN_EXCERPTED_CHARS: usize = 400;

/// A sentence longer than this (a run without sentence punctuation: a table, code, a list pasted as one line) is
/// split at spaces into passages of about this size, so that one passage never takes a whole cut.
const MAX_PASSAGE_CHARS: usize = 320;

/// A text's first passage is kept right after the best match when it is at most this long: it is the speaker and what the text is
/// ("Ana: Here is the report from the contractor:").
const OPENING_CHARS: usize = 200;

const GAP: &str = "[…]";

/// One text's passages in the order they are kept as the cut grows (see the module docs).
#[derive(Debug, Clone)]
pub struct Excerpt<'t> {
    text: &'t str,
    /// Byte ranges of the text's passages, in order, covering it.
    passages: Vec<Range<usize>>,
    /// Characters of each passage, trimmed.
    chars: Vec<usize>,
    /// Passage indices, the first kept first.
    preference: Vec<usize>,
    /// The passage that matches the question best.
    best: usize,
}

impl<'t> Excerpt<'t> {
    /// `terms`: the question's [`bm25::tokens`] (see [`question_terms`]). `None` when `text` is short enough to be
    /// cut at its end, or when it shares no term with the question.
    pub fn new(text: &'t str, terms: &FxHashSet<String>) -> Option<Self> {
        if terms.is_empty() || text.chars().nth(MIN_EXCERPTED_CHARS).is_none() {
            return None;
        }
        let passages = passages(text);
        let held: Vec<FxHashSet<String>> =
            passages.iter().map(|r| bm25::tokens(&text[r.clone()]).filter(|t| terms.contains(t)).collect()).collect();
        let mut df: FxHashMap<&str, usize> = FxHashMap::default();
        for t in held.iter().flatten() {
            *df.entry(t.as_str()).or_default() += 1;
        }
        if df.is_empty() {
            return None;
        }
        let n = passages.len() as f32;
        let idf = |t: &str| {
            let d = df[t] as f32;
            (1.0 + (n - d + 0.5) / (d + 0.5)).ln()
        };
        let score: Vec<f32> = held.iter().map(|h| h.iter().map(|t| idf(t)).sum()).collect();
        let chars: Vec<usize> = passages.iter().map(|r| text[r.clone()].trim().chars().count()).collect();

        let mut hits: Vec<usize> = (0..passages.len()).filter(|&i| score[i] > 0.0).collect();
        sort::sort_by(&mut hits, |&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        // The best hit, then the opening (shown first, as it comes first), then the other hits.
        let mut preference = Vec::with_capacity(passages.len());
        preference.push(hits[0]);
        if hits[0] != 0 && chars[0] <= OPENING_CHARS {
            preference.push(0);
        }
        preference.extend(hits[1..].iter().copied().filter(|&i| !(i == 0 && chars[0] <= OPENING_CHARS)));
        // Then the context of the hits: the passages nearest a hit first, the one after before the one before
        // (a passage usually goes on from the sentence that matched).
        let mut rest: Vec<(usize, usize, bool)> = (0..passages.len())
            .filter(|i| !preference.contains(i))
            .map(|i| {
                let (distance, after) =
                    hits.iter().map(|&h| (h.abs_diff(i), i > h)).min_by_key(|&(d, a)| (d, !a)).unwrap_or((i, true));
                (i, distance, after)
            })
            .collect();
        sort::sort_by_key(&mut rest, |&(i, d, after)| (d, !after, i));
        preference.extend(rest.into_iter().map(|(i, _, _)| i));
        Some(Excerpt { text, passages, chars, preference, best: hits[0] })
    }

    /// The text cut to at most about `cap` characters: the longest prefix of the preference order that fits,
    /// rendered in the text's order. A larger `cap` keeps a superset of a smaller one's passages.
    pub fn cut(&self, cap: usize) -> Cow<'t, str> {
        if self.text.chars().nth(cap).is_none() {
            return Cow::Borrowed(self.text);
        }
        let gap = GAP.chars().count() + 2;
        let mut keep = vec![false; self.passages.len()];
        let mut used = 0;
        for &i in &self.preference {
            // Each passage may bring a gap marker with it.
            let cost = self.chars[i] + gap;
            if used + cost > cap {
                break;
            }
            used += cost;
            keep[i] = true;
        }
        if !keep.iter().any(|&k| k) {
            // Not even the first passage fits: the head of the best one.
            let head = cap_text(self.text[self.passages[self.best].clone()].trim(), cap.saturating_sub(gap));
            return Cow::Owned(if self.best == 0 { head.into_owned() } else { format!("{GAP} {head}") });
        }
        let mut out = String::with_capacity(cap + 8);
        let mut gap_open = false;
        for (i, r) in self.passages.iter().enumerate() {
            if keep[i] {
                if gap_open || (i > 0 && !keep[i - 1]) {
                    push_part(&mut out, GAP);
                }
                push_part(&mut out, self.text[r.clone()].trim());
                gap_open = false;
            } else {
                gap_open = true;
            }
        }
        if gap_open {
            push_part(&mut out, GAP);
        }
        Cow::Owned(out)
    }
}

fn push_part(out: &mut String, part: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    out.push_str(part);
}

/// The distinct [`bm25::tokens`] of a question.
pub fn question_terms(question: &str) -> FxHashSet<String> {
    bm25::tokens(question).collect()
}

/// Sentences (Unicode's sentence boundaries, UAX #29), each longer than [`MAX_PASSAGE_CHARS`] split at spaces.
fn passages(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for Range { start, end } in sentences(text) {
        let sentence = &text[start..end];
        if sentence.len() <= MAX_PASSAGE_CHARS {
            out.push(start..start + sentence.len());
            continue;
        }
        let mut from = start;
        let mut chars = 0;
        for (i, c) in sentence.char_indices() {
            chars += 1;
            if chars >= MAX_PASSAGE_CHARS && c.is_whitespace() {
                out.push(from..start + i + c.len_utf8());
                from = start + i + c.len_utf8();
                chars = 0;
            }
        }
        if from < start + sentence.len() {
            out.push(from..start + sentence.len());
        }
    }
    out
}

/// Byte ranges of the text's sentences (UAX #29), in order, covering it: natively by the unicode-segmentation crate.
#[cfg(not(target_arch = "wasm32"))]
pub fn sentences(text: &str) -> Vec<Range<usize>> {
    use unicode_segmentation::UnicodeSegmentation;
    text.split_sentence_bound_indices().map(|(start, s)| start..start + s.len()).collect()
}

/// Byte ranges of the text's sentences (UAX #29), in order, covering it. In the browser: the platform's own
/// `Intl.Segmenter` (ICU), as NFD is the platform's `normalize` (text/wordpiece.rs): unicode-segmentation's tables
/// are ~32 KB of the wasm (issue 41) for a step only long quoted texts take. A browser without `Intl.Segmenter`
/// (Firefox before 125) gets [`sentences_by_punctuation`].
#[cfg(target_arch = "wasm32")]
pub fn sentences(text: &str) -> Vec<Range<usize>> {
    use wasm_bindgen::{JsCast, JsValue};
    let segmenter = || -> Option<Vec<Range<usize>>> {
        let get = |o: &JsValue, k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k)).ok();
        let ctor: js_sys::Function =
            get(&js_sys::global(), "Intl").and_then(|i| get(&i, "Segmenter"))?.dyn_into().ok()?;
        let options = js_sys::Object::new();
        js_sys::Reflect::set(&options, &"granularity".into(), &"sentence".into()).ok()?;
        let segmenter = js_sys::Reflect::construct(&ctor, &js_sys::Array::of2(&JsValue::UNDEFINED, &options)).ok()?;
        let segment: js_sys::Function = get(&segmenter, "segment")?.dyn_into().ok()?;
        let segments = segment.call1(&segmenter, &JsValue::from_str(text)).ok()?;
        let mut out = Vec::new();
        let mut at = 0;
        for item in js_sys::try_iter(&segments).ok()?? {
            let len = get(&item.ok()?, "segment")?.as_string()?.len();
            out.push(at..at + len);
            at += len;
        }
        // The segments cover the text; anything else is not trusted.
        (at == text.len()).then_some(out)
    };
    segmenter().unwrap_or_else(|| sentences_by_punctuation(text))
}

/// Sentences ended by `.`, `!` or `?` (closing quotes and brackets with them) and the spaces after: UAX #29's
/// common case, for a browser without `Intl.Segmenter`.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn sentences_by_punctuation(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    // The terminator of the sentence being ended, if one was seen.
    let (mut start, mut ended, mut spaced) = (0, None, false);
    for (i, c) in text.char_indices() {
        if let Some(terminator) = ended {
            if c.is_whitespace() {
                spaced = true;
                continue;
            }
            if !spaced && matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '.' | '!' | '?') {
                continue;
            }
            // "3.5" or "e.g" is no end: only a terminator followed by a space is, and a full stop not before a
            // lowercase word ("i.e. the").
            if spaced && !(terminator == '.' && c.is_lowercase()) {
                out.push(start..i);
                start = i;
            }
            spaced = false;
        }
        ended = matches!(c, '.' | '!' | '?').then_some(c);
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> String {
        let mut lines: Vec<String> = (0..60)
            .map(|i| format!("Item {i}: the hallway was painted on day {} and the crew took {} hours.", i % 28, i % 5))
            .collect();
        lines.insert(40, "The spare key for the cabin is under the blue flowerpot.".into());
        format!("Ana: Here is the report. {}", lines.join(" "))
    }

    #[test]
    fn the_sentence_that_shares_the_questions_rare_words_is_kept_with_the_opening() {
        let text = report();
        let e = Excerpt::new(&text, &question_terms("Where is the spare key for the cabin?")).expect("excerpted");
        let cut = e.cut(300);
        assert!(cut.chars().count() <= 300, "{cut}");
        assert!(cut.starts_with("Ana: Here is the report. "), "{cut}");
        assert!(cut.contains("The spare key for the cabin is under the blue flowerpot."), "{cut}");
        assert!(cut.contains("[…]"), "{cut}");
        // Its neighbours come with it as room allows: the sentence after it first.
        assert!(cut.contains("Item 40:"), "{cut}");
        // A text cut at its end would have lost it.
        assert!(!cap_text(&text, 300).contains("spare key"));
    }

    #[test]
    fn a_larger_cap_keeps_everything_a_smaller_one_kept() {
        let text = report();
        let e = Excerpt::new(&text, &question_terms("spare key cabin hours")).unwrap();
        let parts = |s: &str| s.split(GAP).map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect::<Vec<_>>();
        let mut last_len = 0;
        for cap in (60..text.len() + 10).step_by(37) {
            let cut = e.cut(cap);
            let len = cut.chars().count();
            assert!(len <= cap.max(text.chars().count()), "cap {cap}: {len}");
            assert!(len >= last_len, "cap {cap}: {len} < {last_len}");
            last_len = len;
            let bigger = e.cut(cap + 37);
            for p in parts(&cut) {
                for sentence in unicode_segmentation::UnicodeSegmentation::split_sentence_bounds(p.as_str())
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                {
                    assert!(bigger.contains(sentence), "cap {cap}: {sentence:?} lost at {}", cap + 37);
                }
            }
        }
        assert_eq!(e.cut(usize::MAX), text);
    }

    /// Unicode's sentence boundaries; `tests/browser.rs` asks the same of the browser's `Intl.Segmenter`.
    #[test]
    fn sentences_follow_uax29() {
        let text = "He paid 3.5 dollars. Then \"Really?!\" she asked. 今日は晴れ。明日は雨。 Last one";
        let got: Vec<&str> = sentences(text).into_iter().map(|r| &text[r]).collect();
        assert_eq!(
            got,
            ["He paid 3.5 dollars. ", "Then \"Really?!\" ", "she asked. ", "今日は晴れ。", "明日は雨。 ", "Last one"]
        );
    }

    /// The fallback for browsers without `Intl.Segmenter` agrees with UAX #29 on plain prose.
    #[test]
    fn sentences_by_punctuation_agree_with_uax29_on_prose() {
        for text in [
            report(),
            "He paid 3.5 dollars. Then \"Really?!\" She asked.  Fine... ok (see below.) Last one".to_string(),
            "No terminator at all".to_string(),
            "Ends with one. ".to_string(),
        ] {
            assert_eq!(sentences_by_punctuation(&text), sentences(&text), "{text:?}");
        }
    }

    #[test]
    fn a_text_sharing_no_word_or_short_is_left_to_a_cut_at_its_end() {
        let text = report();
        assert!(Excerpt::new(&text, &question_terms("What did Ben bake?")).is_none());
        assert!(Excerpt::new(&text, &question_terms("")).is_none());
        assert!(Excerpt::new("Ana: a short line about the cabin key.", &question_terms("cabin key")).is_none());
    }

    #[test]
    fn a_run_without_sentence_punctuation_is_split_into_passages() {
        let row = |i: usize| format!("row {i} | north depot | pallets {} |", i * 3);
        let mut rows: Vec<String> = (0..200).map(row).collect();
        rows[150] = "row 150 | harbour depot | forklift battery replaced |".into();
        let text = rows.join(" ");
        let e = Excerpt::new(&text, &question_terms("When was the forklift battery replaced?")).unwrap();
        let cut = e.cut(400);
        assert!(cut.chars().count() <= 400 && cut.contains("forklift battery replaced"), "{cut}");
        assert!(e.passages.iter().all(|r| text[r.clone()].chars().count() <= MAX_PASSAGE_CHARS + 40));
    }

    #[test]
    fn a_cap_below_the_first_passage_gives_its_head() {
        let long_sentence = format!("The cabin key {}.", "is somewhere under a pot ".repeat(40));
        let text = format!("{long_sentence} {}", "Other things happened. ".repeat(30));
        let e = Excerpt::new(&text, &question_terms("cabin key")).unwrap();
        let cut = e.cut(100);
        assert!(cut.chars().count() <= 100 && cut.contains("cabin key"), "{cut}");
    }
}
