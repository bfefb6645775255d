//! Five-field cron expressions (`minute hour day-of-month month day-of-week`) and the next time
//! one matches in a time zone.
//!
//! Fields take `*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, and lists `a,b`; months and
//! weekdays also take English names (`jan`, `mon`); weekday 7 is Sunday like 0. When both the
//! day of month and the day of week are restricted, a day matching either one matches (the
//! classic cron rule). `@hourly`, `@daily` (`@midnight`), `@weekly`, `@monthly` and `@yearly`
//! (`@annually`) stand for their usual expressions.
//!
//! # Time zones and daylight saving
//! An expression is matched against the wall clock of its zone. Two wall-clock times need a
//! rule:
//! - a time skipped by a spring-forward change (02:30 on a day the clocks jump from 02:00 to
//!   03:00) fires at the first instant after the gap (03:00 new time), once, however many
//!   skipped times matched;
//! - a time that happens twice in a fall-back change (01:30 on a day the clocks go from 02:00
//!   back to 01:00) fires once, at its first occurrence.

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use super::ScheduleError;

/// How far ahead [`CronExpr::next_after`] looks before saying the expression never matches
/// (long enough for `0 0 29 2 *` across a century year without a leap day).
const SEARCH_DAYS: i64 = 366 * 9;

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// The day-of-month field was `*` (or `?`).
    any_day: bool,
    /// The day-of-week field was `*` (or `?`).
    any_weekday: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field's rules: its name, its range, and the names it takes.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &MONTHS,
    },
    // 7 is accepted for Sunday and folded onto 0.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &WEEKDAYS,
    },
];

impl CronExpr {
    /// Parses an expression; the error says which field is wrong and what it accepts.
    pub fn parse(text: &str) -> Result<CronExpr, ScheduleError> {
        let trimmed = text.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            other if other.starts_with('@') => {
                return Err(bad(
                    text,
                    format!(
                        "{other} is not a known shorthand; use @hourly, @daily, @weekly, @monthly or @yearly"
                    ),
                ));
            }
            _ => trimmed.to_string(),
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(bad(
                text,
                format!(
                    "it has {} field(s); a cron expression has five: minute hour day-of-month month \
                 day-of-week, for example \"30 2 * * 1-5\" (02:30 on weekdays)",
                    parts.len()
                ),
            ));
        }
        let mut sets = [0u64; 5];
        for (i, (part, field)) in parts.iter().zip(FIELDS.iter()).enumerate() {
            sets[i] = parse_field(part, field).map_err(|why| bad(text, why))?;
        }
        // Sunday as 7 is Sunday as 0.
        let weekdays = ((sets[4] | (sets[4] >> 7)) & 0x7f) as u8;
        Ok(CronExpr {
            minutes: sets[0],
            hours: sets[1] as u32,
            days: sets[2] as u32,
            months: sets[3] as u16,
            weekdays,
            any_day: is_any(parts[2]),
            any_weekday: is_any(parts[4]),
        })
    }

    /// Whether the expression matches calendar day `date`.
    fn day_matches(&self, date: NaiveDate) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().num_days_from_sunday()) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            // Both restricted: either one will do.
            (false, false) => dom || dow,
        }
    }

    /// The first instant strictly after `after` at which the expression matches the wall clock
    /// of `tz`, under the daylight-saving rules of the module; `None` when it never matches
    /// (`0 0 31 2 *`).
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&tz).naive_local();
        // Matching happens on whole minutes: start from the minute after the one holding `after`.
        let start = local.with_second(0)?.with_nanosecond(0)? + Duration::minutes(1);
        let first_day = start.date();
        let mut date = first_day;
        let last_day = first_day + Duration::days(SEARCH_DAYS);
        while date <= last_day {
            if self.day_matches(date) {
                for hour in 0..24u32 {
                    if self.hours & (1 << hour) == 0 || (date == first_day && hour < start.hour()) {
                        continue;
                    }
                    for minute in 0..60u32 {
                        if self.minutes & (1 << minute) == 0
                            || (date == first_day
                                && hour == start.hour()
                                && minute < start.minute())
                        {
                            continue;
                        }
                        let wall = date.and_hms_opt(hour, minute, 0)?;
                        if let Some(instant) = resolve(wall, tz)
                            && instant > after
                        {
                            return Some(instant);
                        }
                    }
                }
            }
            date = date.succ_opt()?;
        }
        None
    }
}

/// The instant a wall-clock time of `tz` stands for: the first of two in a repeated hour, and
/// the end of the gap for a time a spring-forward change skipped.
pub(crate) fn resolve(wall: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => {
            // Gaps are whole minutes and never longer than a day: the first wall minute that
            // exists again is the instant the clocks jumped.
            let mut probe = wall;
            for _ in 0..(24 * 60) {
                probe += Duration::minutes(1);
                match tz.from_local_datetime(&probe) {
                    LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
                        return Some(t.with_timezone(&Utc));
                    }
                    LocalResult::None => {}
                }
            }
            None
        }
    }
}

fn bad(expr: &str, why: String) -> ScheduleError {
    ScheduleError::BadCron {
        expr: expr.to_string(),
        why,
    }
}

fn is_any(part: &str) -> bool {
    part == "*" || part == "?"
}

/// One field as a bit set (bit n set when value n matches).
fn parse_field(part: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in part.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| {
                    format!(
                        "the {} step {s:?} is not a number; write it like */15",
                        field.name
                    )
                })?;
                if step == 0 {
                    return Err(format!(
                        "the {} step is 0; a step is at least 1",
                        field.name
                    ));
                }
                (r, step)
            }
            None => (item, 1),
        };
        let (lo, hi) = if is_any(range) {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, field)?, value(b, field)?)
        } else {
            let v = value(range, field)?;
            // `5/10` means from 5 to the end, in steps of 10.
            if step > 1 { (v, field.max) } else { (v, v) }
        };
        if lo > hi {
            return Err(format!(
                "the {} range {range:?} runs backwards; write the smaller value first",
                field.name
            ));
        }
        let mut v = lo;
        while v <= hi {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

/// One value of a field: a number in range, or one of the field's names.
fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        // Months count from 1, weekdays from 0.
        return Ok(i as u32 + field.min);
    }
    let names = if field.names.is_empty() {
        String::new()
    } else {
        format!(" or a name ({})", field.names.join(", "))
    };
    let v: u32 = text.parse().map_err(|_| {
        format!(
            "{text:?} is not a valid {}; use a number from {} to {}{names}",
            field.name, field.min, field.max
        )
    })?;
    if v < field.min || v > field.max {
        return Err(format!(
            "{v} is out of range for the {}; use {} to {}",
            field.name, field.min, field.max
        ));
    }
    Ok(v)
}
