//! The proleptic Gregorian calendar in UTC, as loci needs it: day numbers since 1970-01-01, the ISO-8601 layouts a
//! caller may give a message's time in, and dates written for a reader.
//!
//! Hand-written where `chrono` exists: loci reads five fixed layouts and writes two, and chrono's general
//! strftime-style parser and formatter were 21 KB of the gzipped wasm (issue 41), a sixth of what the page's
//! download had grown by. The tests hold this module to chrono's results on every layout (chrono is a
//! dev-dependency), so the hand-written part has a reference it cannot drift from unnoticed.

pub const DAY_MS: f64 = 86_400_000.0;
/// The instants a time may be: the years 1 to 9999.
pub const EARLIEST_MS: f64 = -62_135_596_800_000.0; // 0001-01-01T00:00:00Z
pub const LATEST_MS: f64 = 253_402_300_799_999.0; // 9999-12-31T23:59:59.999Z

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y } as i64;
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01 (Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = (yoe + era * 400 + if m <= 2 { 1 } else { 0 }) as i32;
    (y, m, d)
}

/// The day number of epoch milliseconds (the day that holds the instant, also before 1970).
pub fn day_of_ms(ms: f64) -> i64 {
    (ms / DAY_MS).floor() as i64
}

/// Monday 0 … Sunday 6 (1970-01-01 was a Thursday).
pub fn weekday_from_monday(day: i64) -> u32 {
    (day + 3).rem_euclid(7) as u32
}

pub const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `2023-05-08 13:56 UTC`: a date header.
pub fn format_date_time(ms: f64) -> String {
    let day = day_of_ms(ms);
    let (y, m, d) = civil_from_days(day);
    let minutes = ((ms - day as f64 * DAY_MS) / 60_000.0).floor() as i64;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", minutes / 60, minutes % 60)
}

/// `7 May 2023`: how people write a date.
pub fn format_day(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{d} {} {y:04}", MONTH_NAMES[m as usize - 1])
}

/// `April 2023`.
pub fn format_month(y: i32, m: u32) -> String {
    format!("{} {y:04}", MONTH_NAMES[m as usize - 1])
}

/// Epoch milliseconds of an ISO-8601 date or date-time: `2023-05-08`, `2023-05-08T13:56` or `2023-05-08 13:56`,
/// with seconds and a fraction optional, and with an offset (`Z`, `+02:00`) when seconds are given (RFC 3339).
/// Without an offset the time is read as UTC. Fields after the year take one or two digits. `None` for anything
/// else, and for dates and times that do not exist.
pub fn parse_iso(s: &str) -> Option<f64> {
    let mut r = Reader(s.as_bytes());
    let y = r.digits(4, 4)? as i32;
    r.byte(b'-')?;
    let m = r.digits(1, 2)?;
    r.byte(b'-')?;
    let d = r.digits(1, 2)?;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let day_ms = days_from_civil(y, m, d) as f64 * DAY_MS;
    if r.0.is_empty() {
        return Some(day_ms);
    }
    match r.0[0] {
        b'T' | b't' | b' ' => r.0 = &r.0[1..],
        _ => return None,
    }
    let hour = r.digits(1, 2)?;
    r.byte(b':')?;
    let minute = r.digits(1, 2)?;
    let (mut second, mut millis) = (0, 0);
    let with_seconds = r.byte(b':').is_some();
    if with_seconds {
        second = r.digits(1, 2)?;
        if r.byte(b'.').is_some() {
            // Any number of digits; the instant is kept to the millisecond, cut like chrono's.
            let digits = r.0.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            millis = r.0[..digits].iter().chain(b"00").take(3).fold(0, |n, c| n * 10 + (c - b'0') as u32);
            r.0 = &r.0[digits..];
        }
    }
    // A leap second (:60) is the instant after :59, as chrono counts it.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let offset_minutes = match r.0 {
        [] => 0,
        [b'Z' | b'z'] if with_seconds => 0,
        [sign @ (b'+' | b'-'), ..] if with_seconds => {
            r.0 = &r.0[1..];
            let h = r.digits(2, 2)?;
            r.byte(b':')?;
            let min = r.digits(2, 2)?;
            if !r.0.is_empty() || h > 23 || min > 59 {
                return None;
            }
            let total = (h * 60 + min) as i64;
            if *sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return None,
    };
    let clock_ms = ((hour * 60 + minute) as i64 * 60 + second as i64) * 1000 + millis as i64;
    Some(day_ms + (clock_ms - offset_minutes * 60_000) as f64)
}

/// A cursor over ASCII bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self, b: u8) -> Option<()> {
        let (&first, rest) = self.0.split_first()?;
        (first == b).then(|| self.0 = rest)
    }

    /// A number of `min..=max` digits (as many as there are, up to `max`).
    fn digits(&mut self, min: usize, max: usize) -> Option<u32> {
        let n = self.0.iter().take(max).take_while(|c| c.is_ascii_digit()).count();
        if n < min {
            return None;
        }
        let value = self.0[..n].iter().fold(0, |v, c| v * 10 + (c - b'0') as u32);
        self.0 = &self.0[n..];
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, NaiveDate};

    /// What loci read times with before: chrono, on the same five layouts.
    fn chrono_parse(s: &str) -> Option<f64> {
        if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(s) {
            return Some(dt.timestamp_millis() as f64);
        }
        for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%d %H:%M"] {
            if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(s, fmt) {
                return Some(dt.and_utc().timestamp_millis() as f64);
            }
        }
        let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
        Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis() as f64)
    }

    #[test]
    fn civil_dates_round_trip_as_chrono_counts_them() {
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
        for day in (-800_000..3_000_000).step_by(997).chain(-2..3) {
            let date = epoch + chrono::Duration::days(day);
            assert_eq!(civil_from_days(day), (date.year(), date.month(), date.day()), "day {day}");
            assert_eq!(days_from_civil(date.year(), date.month(), date.day()), day);
            assert_eq!(weekday_from_monday(day), date.weekday().num_days_from_monday());
        }
    }

    /// `s` with `T` for `t` and every one-digit field (not a fraction) zero-padded.
    fn strict(s: &str) -> String {
        let mut out = String::new();
        let chars: Vec<char> = s.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            let starts_run = c.is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_digit());
            let one_digit = starts_run && chars.get(i + 1).is_none_or(|n| !n.is_ascii_digit());
            if one_digit && (i == 0 || chars[i - 1] != '.') {
                out.push('0');
            }
            out.push(if c == 't' { 'T' } else { c });
        }
        out
    }

    #[test]
    fn every_layout_reads_as_chrono_read_it() {
        let rng = std::cell::Cell::new(0x9e37_79b9_7f4a_7c15u64);
        let next = |n: u64| {
            let mut x = rng.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            rng.set(x);
            x % n
        };
        let mut agreed = 0;
        for _ in 0..20_000 {
            let (y, m, d) = (1 + next(9999), 1 + next(13), next(32));
            let (h, min, s) = (next(25), next(61), next(62));
            let pad = |v: u64| if next(4) == 0 { v.to_string() } else { format!("{v:02}") };
            let date = format!("{y:04}-{}-{}", pad(m), pad(d));
            let fraction = ["", ".5", ".123", ".123456789", ".9999"][next(5) as usize];
            let offset = ["", "Z", "z", "+02:00", "-11:30", "+24:00", "+0200"][next(7) as usize];
            let sep = ["T", " ", "t"][next(3) as usize];
            let s = match next(4) {
                0 => date,
                1 => format!("{date}{sep}{}:{}", pad(h), pad(min)),
                _ => format!("{date}{sep}{}:{}:{}{fraction}{offset}", pad(h), pad(min), pad(s)),
            };
            let (ours, theirs) = (parse_iso(&s), chrono_parse(&s));
            // Where chrono was stricter (a lower-case `t` in its naive layouts, a one-digit field with an offset),
            // loci reads the instant chrono reads in the strict spelling.
            if theirs.is_none() && ours.is_some() {
                assert_eq!(ours, chrono_parse(&strict(&s)), "{s}");
                continue;
            }
            assert_eq!(ours, theirs, "{s}");
            agreed += ours.is_some() as u32;
        }
        assert!(agreed > 5_000, "too few valid samples: {agreed}");
    }

    #[test]
    fn malformed_times_are_refused() {
        for s in [
            "",
            "2023",
            "2023-05",
            "2023-13-01",
            "2023-02-29",
            "2023-05-08T",
            "2023-05-08T24:00",
            "23-05-08",
            "2023-05-08T13:56Z",
            "2023-05-08T13:56:00+2",
            "2023-05-08 13:56:00 UTC",
            "2023-05-08T13:56:00.",
            "２０２３-05-08",
            "2023-05-08T13:56:00+02:00x",
        ] {
            assert_eq!(parse_iso(s), None, "{s:?}");
        }
        assert_eq!(parse_iso("2024-02-29"), Some(days_from_civil(2024, 2, 29) as f64 * DAY_MS));
    }

    #[test]
    fn dates_are_written_as_chrono_wrote_them() {
        for ms in [0.0, 1_683_554_160_000.0, -1.0, -62_135_596_800_000.0, 253_402_300_799_999.0, 951_782_400_000.0] {
            let dt = chrono::DateTime::from_timestamp_millis(ms as i64).unwrap();
            assert_eq!(format_date_time(ms), dt.format("%Y-%m-%d %H:%M UTC").to_string());
            let day = day_of_ms(ms);
            assert_eq!(format_day(day), dt.date_naive().format("%-d %B %Y").to_string());
            assert_eq!(format_month(dt.year(), dt.month()), dt.date_naive().format("%B %Y").to_string());
        }
    }
}
