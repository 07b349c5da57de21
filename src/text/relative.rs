//! Relative time expressions made absolute: "yesterday" said on 8 May 2023 is 7 May 2023. Nemori's narration asks
//! the model to do this; a small model often does not (qwen2.5-1.5b kept "yesterday" in its narratives), and a
//! memory read months later cannot resolve "yesterday" any more. So each expression loci recognises gets its date
//! next to it, in parentheses, unless one is there already: the words stay as they were said.

use crate::types::calendar::{
    civil_from_days, day_of_ms, format_day, format_month, weekday_from_monday, EARLIEST_MS, LATEST_MS,
};
use crate::types::TimeMs;

/// A day, as a number of days since 1970-01-01.
type Day = i64;

/// `text` with the date of each relative expression (`yesterday`, `last week`, `3 days ago`, …) added after it,
/// counted from `said` (epoch ms, UTC).
pub fn anchor_relative_dates(text: &str, said: TimeMs) -> String {
    if !(EARLIEST_MS..=LATEST_MS).contains(&said) {
        return text.to_string();
    }
    let day = day_of_ms(said);
    // Most turns hold no expression at all: one look for the words every expression needs, before cutting the text
    // into words (recall renders every turn of the sessions it returns through here).
    let lower = text.to_lowercase();
    if !CUES.iter().any(|cue| lower.contains(cue)) {
        return text.to_string();
    }
    // Words with their byte spans, lower-cased.
    let words: Vec<(usize, usize, String)> = text
        .char_indices()
        .filter(|&(i, c)| c.is_alphanumeric() && text[..i].chars().next_back().is_none_or(|p| !p.is_alphanumeric()))
        .map(|(start, _)| {
            let end = text[start..].find(|c: char| !c.is_alphanumeric()).map_or(text.len(), |n| start + n);
            (start, end, text[start..end].to_lowercase())
        })
        .collect();
    let mut out = String::with_capacity(text.len() + 32);
    let mut copied = 0;
    let mut i = 0;
    while i < words.len() {
        let word = |k: usize| words.get(i + k).map(|w| w.2.as_str()).unwrap_or("");
        let w = [word(0), word(1), word(2)];
        let Some((len, note)) = may_start_an_expression(w).then(|| resolve(day, w)).flatten() else {
            i += 1;
            continue;
        };
        let end = words[i + len - 1].1;
        // Already dated by the model, or part of a longer word ("today's").
        let after = &text[end..];
        if !after.trim_start().starts_with('(') && !after.starts_with(['\'', '’']) {
            out.push_str(&text[copied..end]);
            out.push_str(&format!(" ({note})"));
            copied = end;
        }
        i += len;
    }
    out.push_str(&text[copied..]);
    out
}

/// A word that every expression [`resolve`] knows holds (lower case): a text without any has nothing to date.
const CUES: [&str; 10] =
    ["yesterday", "today", "tonight", "tomorrow", "morning", "afternoon", "evening", "last", "next", "ago"];

/// Whether `w` has the shape of one of [`resolve`]'s expressions, which alone does calendar arithmetic.
fn may_start_an_expression(w: [&str; 3]) -> bool {
    matches!(w[0], "yesterday" | "today" | "tonight" | "this" | "tomorrow" | "last" | "next") || w[2] == "ago"
}

/// "7 May 2023": how people (and LoCoMo's answers) write a date, so that a model quoting it answers in kind.
fn ymd(d: Day) -> String {
    format_day(d)
}

fn number(w: &str) -> Option<i64> {
    const WORDS: [&str; 10] = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
    w.parse().ok().filter(|n| (1..=60).contains(n)).or_else(|| WORDS.iter().position(|x| *x == w).map(|n| n as i64 + 1))
}

/// `day` moved by `days`; `None` past the years 1 to 9999 that a turn's time can have.
fn shift(day: Day, days: i64) -> Option<Day> {
    let moved = day.checked_add(days)?;
    (day_of_ms(EARLIEST_MS)..=day_of_ms(LATEST_MS)).contains(&moved).then_some(moved)
}

/// The expression starting at `w[0]`: how many words it takes and the date to note.
fn resolve(day: Day, w: [&str; 3]) -> Option<(usize, String)> {
    let monday = shift(day, -(weekday_from_monday(day) as i64))?;
    let (year, month, _) = civil_from_days(day);
    let shifted_month = |by: i32| {
        let m = year * 12 + month as i32 - 1 + by;
        let y = m.div_euclid(12);
        (1..=9999).contains(&y).then(|| format_month(y, m.rem_euclid(12) as u32 + 1))
    };
    Some(match w {
        ["yesterday", ..] => (1, ymd(shift(day, -1)?)),
        ["today" | "tonight", ..] | ["this", "morning" | "afternoon" | "evening", _] => {
            (if w[0] == "this" { 2 } else { 1 }, ymd(day))
        }
        ["tomorrow", ..] => (1, ymd(shift(day, 1)?)),
        ["last", "week", _] => (2, format!("the week of {}", ymd(shift(monday, -7)?))),
        ["next", "week", _] => (2, format!("the week of {}", ymd(shift(monday, 7)?))),
        ["last", "weekend", _] => {
            // The Saturday and Sunday before this week's Monday (said on a weekend: the one before it).
            let sunday = shift(monday, -1)?;
            (2, format!("{} to {}", ymd(shift(sunday, -1)?), ymd(sunday)))
        }
        ["last", "month", _] => (2, shifted_month(-1)?),
        ["next", "month", _] => (2, shifted_month(1)?),
        ["last", "year", _] => (2, (year - 1).to_string()),
        ["next", "year", _] => (2, (year + 1).to_string()),
        [n, "day" | "days", "ago"] => (3, ymd(shift(day, -number(n)?)?)),
        [n, "week" | "weeks", "ago"] => (3, format!("the week of {}", ymd(shift(monday, -7 * number(n)?)?))),
        [n, "month" | "months", "ago"] => (3, shifted_month(-(number(n)? as i32))?),
        [n, "year" | "years", "ago"] => (3, (year - number(n)? as i32).to_string()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2023-05-08, a Monday, 13:56 UTC.
    const SAID: TimeMs = 1_683_554_160_000.0;

    #[test]
    fn relative_expressions_get_their_dates() {
        let cases = [
            ("I went to the support group yesterday.", "I went to the support group yesterday (7 May 2023)."),
            ("Tonight we cook; tomorrow we hike.", "Tonight (8 May 2023) we cook; tomorrow (9 May 2023) we hike."),
            ("We moved last year", "We moved last year (2022)"),
            ("I started two weeks ago", "I started two weeks ago (the week of 24 April 2023)"),
            ("It broke 3 days ago!", "It broke 3 days ago (5 May 2023)!"),
            ("Last weekend was great", "Last weekend (6 May 2023 to 7 May 2023) was great"),
            (
                "We met last month and again this morning.",
                "We met last month (April 2023) and again this morning (8 May 2023).",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(anchor_relative_dates(text, SAID), want, "{text}");
        }
    }

    #[test]
    fn the_calendar_s_ends_are_left_undated_not_a_panic() {
        let text = "yesterday, tomorrow, last week, next week, last weekend, last month, next year, 3 days ago";
        let first = EARLIEST_MS;
        let last = LATEST_MS;
        let out = anchor_relative_dates(text, first);
        assert!(out.starts_with("yesterday, tomorrow (2 January 0001),"), "{out}");
        let out = anchor_relative_dates(text, last);
        assert!(out.starts_with("yesterday (30 December 9999), tomorrow,"), "{out}");
        for said in [f64::NAN, f64::INFINITY, -8.64e15, 8.64e15, f64::MAX] {
            let out = anchor_relative_dates(text, said);
            assert!(out.starts_with("yesterday"), "{out}");
        }
    }

    #[test]
    fn dated_or_unrelated_words_are_left_alone() {
        for text in ["yesterday (7 May 2023) was long", "the last weekday", "years ago, long ago", "today's plan", ""] {
            assert_eq!(anchor_relative_dates(text, SAID), text);
        }
        // A month back from 31 March is February, from January the December before.
        let jan = 1_673_740_800_000.0; // 2023-01-15
        assert_eq!(anchor_relative_dates("last month", jan), "last month (December 2022)");
        assert_eq!(anchor_relative_dates("next month", jan), "next month (February 2023)");
    }
}
