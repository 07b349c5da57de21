//! Relative time expressions made absolute: "yesterday" said on 8 May 2023 is 7 May 2023. Nemori's narration asks
//! the model to do this; a small model often does not (qwen2.5-1.5b kept "yesterday" in its narratives), and a
//! memory read months later cannot resolve "yesterday" any more. So each expression loci recognises gets its date
//! next to it, in parentheses, unless one is there already: the words stay as they were said.

use crate::types::calendar::{
    civil_from_days, day_of_ms, days_from_civil, format_day, format_month, weekday_from_monday, EARLIEST_MS, LATEST_MS,
};
use crate::types::TimeMs;

/// A day, as a number of days since 1970-01-01.
pub type Day = i64;

/// The stretch of calendar a relative expression names, counted from the day it was said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// `yesterday`, `today`, `3 days ago`.
    Day(Day),
    /// `last weekend`: its Saturday and Sunday.
    Weekend(Day),
    /// `last week`, `two weeks ago`: the week starting on this Monday.
    Week(Day),
    /// `last month`: year and month (1–12).
    Month(i32, u32),
    /// `last year`.
    Year(i32),
}

impl Period {
    /// The first and last day of the period.
    pub fn days(self) -> (Day, Day) {
        match self {
            Period::Day(d) => (d, d),
            Period::Weekend(saturday) => (saturday, saturday + 1),
            Period::Week(monday) => (monday, monday + 6),
            Period::Month(y, m) => {
                let first = days_from_civil(y, m, 1);
                let next = if m == 12 { days_from_civil(y + 1, 1, 1) } else { days_from_civil(y, m + 1, 1) };
                (first, next - 1)
            }
            Period::Year(y) => (days_from_civil(y, 1, 1), days_from_civil(y + 1, 1, 1) - 1),
        }
    }

    /// How the period is written next to its expression: "7 May 2023", "the week of 1 May 2023", "April 2023".
    pub fn note(self) -> String {
        match self {
            Period::Day(d) => format_day(d),
            Period::Weekend(saturday) => format!("{} to {}", format_day(saturday), format_day(saturday + 1)),
            Period::Week(monday) => format!("the week of {}", format_day(monday)),
            Period::Month(y, m) => format_month(y, m),
            Period::Year(y) => y.to_string(),
        }
    }
}

/// One relative expression found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelativeDate {
    /// Byte span of the expression's words in the text.
    pub start: usize,
    pub end: usize,
    pub period: Period,
    /// A date in parentheses follows it already ("yesterday (7 May 2023)").
    pub dated: bool,
}

/// `text` with the date of each relative expression (`yesterday`, `last week`, `3 days ago`, …) added after it,
/// counted from `said` (epoch ms, UTC).
pub fn anchor_relative_dates(text: &str, said: TimeMs) -> String {
    let found = relative_dates(text, said);
    if found.iter().all(|r| r.dated) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 32);
    let mut copied = 0;
    for r in found.iter().filter(|r| !r.dated) {
        out.push_str(&text[copied..r.end]);
        out.push_str(&format!(" ({})", r.period.note()));
        copied = r.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Every relative expression loci recognises in `text`, in order, with the period it names counted from `said`
/// (epoch ms, UTC). Empty when `said` is outside the calendar. A word that is part of a longer one ("today's") is
/// not an expression.
pub fn relative_dates(text: &str, said: TimeMs) -> Vec<RelativeDate> {
    let mut found = Vec::new();
    if !(EARLIEST_MS..=LATEST_MS).contains(&said) {
        return found;
    }
    let day = day_of_ms(said);
    // Most turns hold no expression at all: one look for the words every expression needs, before cutting the text
    // into words (recall renders every turn of the sessions it returns through here).
    let lower = text.to_lowercase();
    if !CUES.iter().any(|cue| lower.contains(cue)) {
        return found;
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
    let mut i = 0;
    while i < words.len() {
        let word = |k: usize| words.get(i + k).map(|w| w.2.as_str()).unwrap_or("");
        let w = [word(0), word(1), word(2)];
        let Some((len, period)) = may_start_an_expression(w).then(|| resolve(day, w)).flatten() else {
            i += 1;
            continue;
        };
        let end = words[i + len - 1].1;
        let after = &text[end..];
        if !after.starts_with(['\'', '’']) {
            found.push(RelativeDate { start: words[i].0, end, period, dated: after.trim_start().starts_with('(') });
        }
        i += len;
    }
    found
}

/// A word that every expression [`resolve`] knows holds (lower case): a text without any has nothing to date.
const CUES: [&str; 10] =
    ["yesterday", "today", "tonight", "tomorrow", "morning", "afternoon", "evening", "last", "next", "ago"];

/// Whether `w` has the shape of one of [`resolve`]'s expressions, which alone does calendar arithmetic.
fn may_start_an_expression(w: [&str; 3]) -> bool {
    matches!(w[0], "yesterday" | "today" | "tonight" | "this" | "tomorrow" | "last" | "next") || w[2] == "ago"
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

/// The expression starting at `w[0]`: how many words it takes and the period it names.
fn resolve(day: Day, w: [&str; 3]) -> Option<(usize, Period)> {
    let monday = shift(day, -(weekday_from_monday(day) as i64))?;
    let (year, month, _) = civil_from_days(day);
    let shifted_month = |by: i32| {
        let m = year * 12 + month as i32 - 1 + by;
        let y = m.div_euclid(12);
        (1..=9999).contains(&y).then(|| Period::Month(y, m.rem_euclid(12) as u32 + 1))
    };
    let year_of = |y: i32| (1..=9999).contains(&y).then_some(Period::Year(y));
    Some(match w {
        ["yesterday", ..] => (1, Period::Day(shift(day, -1)?)),
        ["today" | "tonight", ..] | ["this", "morning" | "afternoon" | "evening", _] => {
            (if w[0] == "this" { 2 } else { 1 }, Period::Day(day))
        }
        ["tomorrow", ..] => (1, Period::Day(shift(day, 1)?)),
        ["last", "week", _] => (2, Period::Week(shift(monday, -7)?)),
        ["next", "week", _] => (2, Period::Week(shift(monday, 7)?)),
        // The Saturday and Sunday before this week's Monday (said on a weekend: the one before it); both days must
        // lie in the calendar.
        ["last", "weekend", _] => (2, Period::Weekend(shift(shift(monday, -1)?, -1)?)),
        ["last", "month", _] => (2, shifted_month(-1)?),
        ["next", "month", _] => (2, shifted_month(1)?),
        ["last", "year", _] => (2, year_of(year - 1)?),
        ["next", "year", _] => (2, year_of(year + 1)?),
        [n, "day" | "days", "ago"] => (3, Period::Day(shift(day, -number(n)?)?)),
        [n, "week" | "weeks", "ago"] => (3, Period::Week(shift(monday, -7 * number(n)?)?)),
        [n, "month" | "months", "ago"] => (3, shifted_month(-(number(n)? as i32))?),
        [n, "year" | "years", "ago"] => (3, year_of(year - number(n)? as i32)?),
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
    fn expressions_name_the_days_of_their_period() {
        let days = |text: &str| -> Vec<(String, String)> {
            relative_dates(text, SAID)
                .iter()
                .map(|r| {
                    let (first, last) = r.period.days();
                    (text[r.start..r.end].to_string(), format!("{} – {}", format_day(first), format_day(last)))
                })
                .collect()
        };
        assert_eq!(
            days("Yesterday, last weekend and last week; last month, last year"),
            [
                ("Yesterday", "7 May 2023 – 7 May 2023"),
                ("last weekend", "6 May 2023 – 7 May 2023"),
                ("last week", "1 May 2023 – 7 May 2023"),
                ("last month", "1 April 2023 – 30 April 2023"),
                ("last year", "1 January 2022 – 31 December 2022"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // February of a leap year, and December's month ending the year.
        let feb = relative_dates("last month", 1_709_251_200_000.0); // 2024-03-01
        assert_eq!(feb[0].period.days(), (days_from_civil(2024, 2, 1), days_from_civil(2024, 2, 29)));
        let dec = relative_dates("last month", 1_673_740_800_000.0); // 2023-01-15
        assert_eq!(dec[0].period.days(), (days_from_civil(2022, 12, 1), days_from_civil(2022, 12, 31)));
    }

    #[test]
    fn a_dated_expression_is_found_and_marked_dated() {
        let found = relative_dates("yesterday (7 May 2023) and today's plan, then tomorrow", SAID);
        let seen: Vec<(bool, Period)> = found.iter().map(|r| (r.dated, r.period)).collect();
        let day = day_of_ms(SAID);
        assert_eq!(seen, [(true, Period::Day(day - 1)), (false, Period::Day(day + 1))]);
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
