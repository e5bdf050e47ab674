//! UTC calendar arithmetic: civil dates from Unix seconds and back, and RFC 3339 text (the REST
//! API's time format). Pure functions; no time zone database (everything is UTC, as the engine
//! stores it).

use std::time::{Duration, SystemTime};

/// A UTC instant broken into its calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year (proleptic Gregorian).
    pub year: i64,
    /// 1–12.
    pub month: u32,
    /// 1–31.
    pub day: u32,
    /// 0–23.
    pub hour: u32,
    /// 0–59.
    pub minute: u32,
    /// 0–59.
    pub second: u32,
    /// 0 = Sunday … 6 = Saturday.
    pub weekday: u32,
}

/// The civil date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m as u32, d as u32)
}

/// Days since 1970-01-01 of a civil date (the inverse of [`civil_from_days`]).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The calendar fields of `secs` since the Unix epoch.
pub fn civil(secs: i64) -> Civil {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
        // 1970-01-01 was a Thursday.
        weekday: (days + 4).rem_euclid(7) as u32,
    }
}

/// Seconds since the Unix epoch (negative before it; whole seconds).
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    }
}

/// The instant `secs` after the Unix epoch.
pub fn from_unix_secs(secs: i64) -> SystemTime {
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// `t` as RFC 3339 in UTC (`2026-12-01T01:02:03Z`), with milliseconds when it has any
/// (`2026-12-01T01:02:03.250Z`), so a time sent to the engine is never rounded earlier.
pub fn format_rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let c = civil(since.as_secs() as i64);
    let date = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    match since.subsec_millis() {
        0 => format!("{date}Z"),
        ms => format!("{date}.{ms:03}Z"),
    }
}

/// Parses RFC 3339 (`2026-12-01T01:02:03Z`, with optional fractional seconds and a `Z` or
/// `±HH:MM` offset; a space may stand for the `T`). `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept = &frac[..digits.min(9)];
        nanos = kept.parse::<u32>().ok()? * 10u32.pow(9 - kept.len() as u32);
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            let digits = |r: std::ops::Range<usize>| rb[r].iter().all(u8::is_ascii_digit);
            if rb.len() != 6
                || !matches!(rb[0], b'+' | b'-')
                || rb[3] != b':'
                || !digits(1..3)
                || !digits(4..6)
            {
                return None;
            }
            let (h, m): (i64, i64) = (rest[1..3].parse().ok()?, rest[4..6].parse().ok()?);
            if h > 23 || m > 59 {
                return None;
            }
            let sign = if rb[0] == b'-' { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
    };
    let secs = days_from_civil(year, month as u32, day as u32) * 86_400
        + hour * 3600
        + minute * 60
        + second.min(59)
        - offset;
    Some(from_unix_secs(secs) + Duration::from_nanos(u64::from(nanos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_fields_of_known_instants() {
        let c = civil(1_796_083_200 + 3_723);
        assert_eq!(
            (
                c.year, c.month, c.day, c.hour, c.minute, c.second, c.weekday
            ),
            (2026, 12, 1, 1, 2, 3, 2),
            "2026-12-01 is a Tuesday"
        );
        assert_eq!(civil(0).weekday, 4, "1970-01-01 was a Thursday");
        assert_eq!(civil(951_782_400).day, 29, "2000 is a leap year");
    }

    #[test]
    fn days_round_trip_over_four_centuries() {
        for days in (-200_000..200_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn rfc3339_round_trips_and_reads_offsets_and_fractions() {
        let t = from_unix_secs(1_796_083_200 + 3_723);
        assert_eq!(format_rfc3339(t), "2026-12-01T01:02:03Z");
        let later = t + Duration::from_millis(250);
        assert_eq!(format_rfc3339(later), "2026-12-01T01:02:03.250Z");
        assert_eq!(parse_rfc3339(&format_rfc3339(later)), Some(later));
        assert_eq!(parse_rfc3339("2026-12-01T01:02:03Z"), Some(t));
        assert_eq!(parse_rfc3339("2026-12-01T02:02:03+01:00"), Some(t));
        assert_eq!(parse_rfc3339("2026-11-30 21:02:03-04:00"), Some(t));
        assert_eq!(
            parse_rfc3339("2026-12-01T01:02:03.250Z"),
            Some(t + Duration::from_millis(250))
        );
        for bad in [
            "",
            "2026-12-01",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-12-01T01:02:03",
            "2026-12-01T01:02:03.Z",
            "2026-12-01T01:02:03+1:00",
            "2026-12-01T01:02:03+-1:00",
            "２０２６-12-01T01:02:03Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }
}
