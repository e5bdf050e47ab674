//! Cron expressions as the real engine's validator takes them (`cron.SecondOptional | Minute |
//! Hour | Dom | Month | Dow`): five fields (`minute hour day-of-month month day-of-week`, UTC),
//! or six with a leading seconds field. Each field: `*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists,
//! month and weekday names (`JAN`, `MON`), and `7` for Sunday. When both day fields are
//! restricted, a day matches if either does (classic cron).

use hatchet_runtime::protocol::calendar::{civil, days_from_civil};

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    days_restricted: bool,
    weekdays_restricted: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// How far ahead [`Cron::next_after`] looks (a `30 2 31 2 *` never fires).
const HORIZON_DAYS: i64 = 366 * 8;

fn value(text: &str, names: &[&str], first_name: u32) -> Option<u32> {
    if let Ok(n) = text.parse::<u32>() {
        return Some(n);
    }
    let upper = text.to_ascii_uppercase();
    names
        .iter()
        .position(|n| *n == upper)
        .map(|i| i as u32 + first_name)
}

/// The bit set of one field; `Err` names what is wrong.
fn field(text: &str, min: u32, max: u32, names: &[&str], first_name: u32) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {s:?} is not a positive number"))?,
            ),
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let a = value(a, names, first_name).ok_or_else(|| format!("{a:?} is not a value"))?;
            let b = value(b, names, first_name).ok_or_else(|| format!("{b:?} is not a value"))?;
            (a, b)
        } else {
            let v = value(range, names, first_name)
                .ok_or_else(|| format!("{range:?} is not a value"))?;
            // `5/15` (and `5/1`) mean from 5 to the end of the range, every 15 (or 1).
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(format!("{part:?} is outside {min}-{max}"));
        }
        for v in (lo..=hi).step_by(step as usize) {
            bits |= 1 << v;
        }
    }
    Ok(bits)
}

impl Cron {
    /// Parses an expression; the error says which field is wrong and why.
    pub(crate) fn parse(expr: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let (sec, [m, h, dom, mon, dow]) = (match fields[..] {
            [m, h, dom, mon, dow] => Some((None, [m, h, dom, mon, dow])),
            [sec, m, h, dom, mon, dow] => Some((Some(sec), [m, h, dom, mon, dow])),
            _ => None,
        })
        .ok_or_else(|| {
            format!(
                "cron expression {expr:?} must have 5 fields (minute hour day-of-month month day-of-week) or 6 (a leading second), not {}",
                fields.len()
            )
        })?;
        let named = |what: &str, r: Result<u64, String>| {
            r.map_err(|e| format!("cron expression {expr:?}: {what}: {e}"))
        };
        let mut weekdays = named("day of week", field(dow, 0, 7, &WEEKDAYS, 0))?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7); // 7 is Sunday too
        }
        Ok(Cron {
            seconds: match sec {
                Some(sec) => named("second", field(sec, 0, 59, &[], 0))?,
                None => 1,
            },
            minutes: named("minute", field(m, 0, 59, &[], 0))?,
            hours: named("hour", field(h, 0, 23, &[], 0))?,
            days: named("day of month", field(dom, 1, 31, &[], 0))?,
            months: named("month", field(mon, 1, 12, &MONTHS, 1))?,
            weekdays,
            days_restricted: dom != "*",
            weekdays_restricted: dow != "*",
        })
    }

    fn day_matches(&self, month: u32, day: u32, weekday: u32) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        let by_day = self.days & (1 << day) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => by_day || by_weekday,
            _ => by_day && by_weekday,
        }
    }

    /// The first second strictly after `secs` (Unix seconds, UTC) that matches, or `None` when
    /// nothing matches within eight years.
    pub(crate) fn next_after(&self, secs: i64) -> Option<i64> {
        let minute = secs.div_euclid(60) * 60;
        if self.first_minute_from(minute) == Some(minute)
            && let Some(s) = (secs - minute + 1..60).find(|s| self.seconds & (1 << s) != 0)
        {
            return Some(minute + s);
        }
        let first_second = i64::from(self.seconds.trailing_zeros());
        self.first_minute_from(minute + 60)
            .map(|m| m + first_second)
    }

    /// The first matching whole minute at or after `start` (a whole minute, Unix seconds).
    fn first_minute_from(&self, start: i64) -> Option<i64> {
        let first = civil(start);
        let first_day = days_from_civil(first.year, first.month, first.day);
        for day in first_day..first_day + HORIZON_DAYS {
            let c = civil(day * 86_400);
            if !self.day_matches(c.month, c.day, c.weekday) {
                continue;
            }
            let from = if day == first_day {
                first.hour * 60 + first.minute
            } else {
                0
            };
            for minute_of_day in from..24 * 60 {
                let (h, m) = (minute_of_day / 60, minute_of_day % 60);
                if self.hours & (1 << h) != 0 && self.minutes & (1 << m) != 0 {
                    return Some(day * 86_400 + i64::from(minute_of_day) * 60);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hatchet_runtime::protocol::calendar::{
        format_rfc3339, from_unix_secs, parse_rfc3339, unix_secs,
    };

    fn next(expr: &str, after: &str) -> String {
        let t = unix_secs(parse_rfc3339(after).expect("time"));
        let n = Cron::parse(expr)
            .expect("parses")
            .next_after(t)
            .expect("fires");
        format_rfc3339(from_unix_secs(n))
    }

    #[test]
    fn next_occurrences_of_common_expressions() {
        let at = "2026-11-30T09:30:20Z"; // a Monday
        assert_eq!(next("* * * * *", at), "2026-11-30T09:31:00Z");
        assert_eq!(next("*/15 * * * *", at), "2026-11-30T09:45:00Z");
        assert_eq!(next("0 0 * * *", at), "2026-12-01T00:00:00Z");
        assert_eq!(
            next("30 9 * * *", "2026-11-30T09:30:00Z"),
            "2026-12-01T09:30:00Z"
        );
        assert_eq!(
            next("0 12 * * MON-FRI", "2026-12-04T13:00:00Z"),
            "2026-12-07T12:00:00Z"
        );
        assert_eq!(next("0 0 * * 7", at), "2026-12-06T00:00:00Z", "7 is Sunday");
        assert_eq!(next("0 0 1 JAN *", at), "2027-01-01T00:00:00Z");
        assert_eq!(next("0 0 29 2 *", at), "2028-02-29T00:00:00Z");
        assert_eq!(next("5/20 8-9 * * *", at), "2026-11-30T09:45:00Z");
        assert_eq!(
            next("58/1 * * * *", at),
            "2026-11-30T09:58:00Z",
            "a step runs to the end"
        );
        assert_eq!(
            next("0 0 13 * FRI", at),
            "2026-12-04T00:00:00Z",
            "day OR weekday"
        );
    }

    #[test]
    fn a_six_field_expression_leads_with_seconds_as_the_real_engine_parses_it() {
        let at = "2026-11-30T09:30:20Z";
        assert_eq!(next("* * * * * *", at), "2026-11-30T09:30:21Z");
        assert_eq!(next("*/15 * * * * *", at), "2026-11-30T09:30:30Z");
        assert_eq!(next("10 * * * * *", at), "2026-11-30T09:31:10Z");
        assert_eq!(next("0 0 0 * * *", at), "2026-12-01T00:00:00Z");
        assert_eq!(next("30 15 9 * * *", at), "2026-12-01T09:15:30Z");
        for (bad, says) in [
            ("60 * * * * *", "second"),
            ("* * * * * * *", "6 (a leading second)"),
        ] {
            let e = Cron::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn impossible_dates_never_fire_and_bad_fields_say_why() {
        assert_eq!(
            Cron::parse("0 0 31 2 *").expect("parses").next_after(0),
            None
        );
        for (bad, says) in [
            ("* * * *", "5 fields"),
            ("60 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day of month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day of week"),
            ("*/0 * * * *", "positive"),
            ("5-1 * * * *", "outside"),
            ("x * * * *", "not a value"),
        ] {
            let e = Cron::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
