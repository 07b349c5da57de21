//! Dates named in a query ("on 9 November, 2022", "in July 2023", "October 13", "in 2023"), and how close a
//! session's time is to them. A question that names a date is mostly about what was said around that date, and a
//! session's own time is the one clue neither the embedding nor BM25 sees (timestamps are never embedded).
//!
//! Only explicit calendar dates count; relative ones ("last week") need the time the question is asked, which a
//! query does not carry. The parser is a few rules over words, allocation-free: it never guesses from a bare
//! number, and "may" is a month only next to a day or a year.

/// Milliseconds in a day.
pub const DAY_MS: f64 = 86_400_000.0;

/// The period a query names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Period {
    /// `[start, end)` in epoch milliseconds (UTC calendar days).
    Span { start: f64, end: f64 },
    /// A month (1–12) without a year ("in June"): the same month of any year.
    Month(u32),
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Month number of a word: full names and the usual abbreviations ("sept" too).
fn month_of(w: &str) -> Option<u32> {
    if let Some(i) = MONTHS.iter().position(|m| *m == w) {
        return Some(i as u32 + 1);
    }
    let i = match w {
        "jan" => 0,
        "feb" => 1,
        "mar" => 2,
        "apr" => 3,
        "jun" => 5,
        "jul" => 6,
        "aug" => 7,
        "sep" | "sept" => 8,
        "oct" => 9,
        "nov" => 10,
        "dec" => 11,
        _ => return None,
    };
    Some(i + 1)
}

/// A day of the month: `1`–`31`, optionally with an ordinal suffix ("8th", "1st").
fn day_of(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    if digits.is_empty() || digits.len() > 2 || !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return None;
    }
    let d: u32 = digits.parse().ok()?;
    (1..=31).contains(&d).then_some(d)
}

/// A year: four digits, 1900–2199.
fn year_of(w: &str) -> Option<i32> {
    if w.len() != 4 || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let y: i32 = w.parse().ok()?;
    (1900..2200).contains(&y).then_some(y)
}

pub use crate::calendar::days_from_civil;

/// (year, month) of a day count since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i32, u32) {
    let (y, m, _) = crate::calendar::civil_from_days(z);
    (y, m)
}

fn ms(days: i64) -> f64 {
    days as f64 * DAY_MS
}

/// The period a query names, if it names one: the hull of every explicit date in it ("between August 11 and August
/// 15, 2023" is the span of both). A day or month without a year takes the year of another mention in the query;
/// a month alone with no year anywhere is [`Period::Month`].
pub fn query_period(text: &str) -> Option<Period> {
    // Lower-casing without allocating: each word is folded into a small buffer of its own.
    let mut bufs = [[0u8; 12]; 64];
    let mut words = [""; 64];
    let mut n = 0;
    for w in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty() && w.len() <= 12) {
        if n == words.len() {
            break;
        }
        let b = &mut bufs[n][..w.len()];
        b.copy_from_slice(w.as_bytes());
        b.make_ascii_lowercase();
        n += 1;
    }
    for (i, w) in words.iter_mut().enumerate().take(n) {
        // The buffers hold ASCII only (the split keeps ASCII alphanumerics), so this never fails.
        let len = bufs[i].iter().position(|&b| b == 0).unwrap_or(12);
        *w = std::str::from_utf8(&bufs[i][..len]).unwrap_or("");
    }
    let words = &words[..n];
    // (year or none, month, day or none) of each mention, and the standalone years.
    let mut mentions: [(Option<i32>, u32, Option<u32>); 8] = [(None, 0, None); 8];
    let mut found = 0;
    let mut used = [false; 64];
    for i in 0..n {
        let Some(month) = month_of(words[i]) else { continue };
        let before = if i > 0 && !used[i - 1] { day_of(words[i - 1]) } else { None };
        let after = words.get(i + 1).and_then(|w| day_of(w));
        let day = before.or(after);
        let year_at = if after.is_some() { i + 2 } else { i + 1 };
        let year = words.get(year_at).and_then(|w| year_of(w));
        if words[i] == "may" && day.is_none() && year.is_none() {
            continue; // the verb
        }
        if before.is_some() {
            used[i - 1] = true;
        }
        used[i] = true;
        if after.is_some() {
            used[i + 1] = true;
        }
        if year.is_some() {
            used[year_at] = true;
        }
        if found < mentions.len() {
            mentions[found] = (year, month, day);
            found += 1;
        }
    }
    let mut lone_year = None;
    for i in 0..n {
        if !used[i] {
            if let Some(y) = year_of(words[i]) {
                lone_year = Some(lone_year.map_or((y, y), |(a, b): (i32, i32)| (a.min(y), b.max(y))));
            }
        }
    }
    let known_year = mentions[..found].iter().find_map(|m| m.0).or(lone_year.map(|y| y.0));
    let mut span: Option<(f64, f64)> = None;
    let add = |span: &mut Option<(f64, f64)>, s: f64, e: f64| {
        *span = Some(span.map_or((s, e), |(a, b)| (a.min(s), b.max(e))))
    };
    let mut month_only = None;
    for &(year, month, day) in &mentions[..found] {
        let Some(y) = year.or(known_year) else {
            month_only = Some(month);
            continue;
        };
        match day {
            Some(d) => {
                let start = days_from_civil(y, month, d);
                add(&mut span, ms(start), ms(start + 1));
            }
            None => {
                let (ny, nm) = if month == 12 { (y + 1, 1) } else { (y, month + 1) };
                add(&mut span, ms(days_from_civil(y, month, 1)), ms(days_from_civil(ny, nm, 1)));
            }
        }
    }
    if span.is_none() {
        if let (Some((a, b)), None) = (lone_year, month_only) {
            add(&mut span, ms(days_from_civil(a, 1, 1)), ms(days_from_civil(b + 1, 1, 1)));
        }
    }
    match (span, month_only) {
        (Some((start, end)), _) => Some(Period::Span { start, end }),
        (None, Some(m)) => Some(Period::Month(m)),
        (None, None) => None,
    }
}

/// How well a session spanning `[first, last]` (epoch ms) matches `period`: 1 when it overlaps, falling off as
/// `exp(−gap / scale_days)` with the gap in days; for [`Period::Month`], 1 when the session touches that month
/// of any year, else 0. Not finite times match nothing.
pub fn closeness(period: Period, first: f64, last: f64, scale_days: f64) -> f32 {
    if !first.is_finite() || !last.is_finite() {
        return 0.0;
    }
    match period {
        Period::Span { start, end } => {
            let gap = if last < start {
                start - last
            } else if first >= end {
                first - end
            } else {
                0.0
            };
            if gap <= 0.0 {
                1.0
            } else if scale_days <= 0.0 {
                0.0
            } else {
                (-(gap / DAY_MS) / scale_days).exp() as f32
            }
        }
        Period::Month(m) => {
            let (_, a) = civil_from_days((first / DAY_MS).floor() as i64);
            let (_, b) = civil_from_days((last / DAY_MS).floor() as i64);
            if a == m || b == m {
                1.0
            } else {
                0.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> f64 {
        ms(days_from_civil(y, m, d))
    }

    fn span(a: f64, b: f64) -> Option<Period> {
        Some(Period::Span { start: a, end: b })
    }

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2023, 5, 8), 19_485);
        // "1:56 pm on 8 May, 2023" is 1_683_554_160_000 ms: the same day.
        assert_eq!((1_683_554_160_000.0 / DAY_MS).floor() as i64, 19_485);
        for z in [-1000, 0, 59, 60, 19_485, 30_000] {
            let (y, m) = civil_from_days(z);
            assert!(days_from_civil(y, m, 1) <= z && z < days_from_civil(y, m, 1) + 31);
        }
        assert_eq!(civil_from_days(days_from_civil(2024, 2, 29)), (2024, 2));
    }

    #[test]
    fn parses_the_usual_ways_of_naming_a_date() {
        assert_eq!(query_period("What movie did Joanna watch on 1 May, 2022?"), span(day(2022, 5, 1), day(2022, 5, 2)));
        assert_eq!(query_period("What did Tim read on 8th December, 2023?"), span(day(2023, 12, 8), day(2023, 12, 9)));
        assert_eq!(
            query_period("Which city was Calvin at on October 3, 2023?"),
            span(day(2023, 10, 3), day(2023, 10, 4))
        );
        assert_eq!(query_period("Where did Joanna travel to in July 2022?"), span(day(2022, 7, 1), day(2022, 8, 1)));
        assert_eq!(query_period("What happened in December 2023?"), span(day(2023, 12, 1), day(2024, 1, 1)));
        assert_eq!(
            query_period("Where was John between August 11 and August 15 2023?"),
            span(day(2023, 8, 11), day(2023, 8, 16))
        );
        assert_eq!(query_period("What did he do in 2022?"), span(day(2022, 1, 1), day(2023, 1, 1)));
        assert_eq!(query_period("When did Melanie go camping in June?"), Some(Period::Month(6)));
        assert_eq!(query_period("Plans for SEPT 2024"), span(day(2024, 9, 1), day(2024, 10, 1)));
    }

    #[test]
    fn ignores_what_is_not_a_date() {
        for q in [
            "May I ask what Caroline researched?",
            "What may Melanie enjoy?",
            "How many of the 12 pets were adopted?",
            "Which 3 books did she read?",
            "What is Caroline's identity?",
            "",
        ] {
            assert_eq!(query_period(q), None, "{q}");
        }
        // "may" next to a day or a year is the month.
        assert_eq!(query_period("on May 25, 2023"), span(day(2023, 5, 25), day(2023, 5, 26)));
        assert_eq!(query_period("in may 2023"), span(day(2023, 5, 1), day(2023, 6, 1)));
    }

    #[test]
    fn closeness_is_one_inside_and_falls_off_outside() {
        let p = Period::Span { start: day(2023, 7, 1), end: day(2023, 8, 1) };
        assert_eq!(closeness(p, day(2023, 7, 15), day(2023, 7, 15), 7.0), 1.0);
        assert_eq!(closeness(p, day(2023, 6, 30), day(2023, 7, 1), 7.0), 1.0, "a session that runs into the span");
        let week_after = closeness(p, day(2023, 8, 8), day(2023, 8, 8), 7.0);
        assert!((week_after - (-1.0f32).exp()).abs() < 1e-3, "{week_after}");
        assert!(closeness(p, day(2023, 9, 1), day(2023, 9, 1), 7.0) < week_after);
        assert_eq!(closeness(p, day(2023, 8, 8), day(2023, 8, 8), 0.0), 0.0);
        assert_eq!(closeness(p, f64::NAN, f64::NAN, 7.0), 0.0);
        let june = Period::Month(6);
        assert_eq!(closeness(june, day(2021, 6, 3), day(2021, 6, 3), 7.0), 1.0);
        assert_eq!(closeness(june, day(2021, 7, 3), day(2021, 7, 3), 7.0), 0.0);
    }
}
