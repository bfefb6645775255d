//! When a job falls due: [`Timing`] parses a job's `schedule` text (a cron expression in a time
//! zone, `every <n><s|m|h|d>`, or one ISO-8601 instant) and gives the due time after any moment.

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;

use super::ScheduleError;
use super::cron::{CronExpr, resolve};
use crate::domain::Timestamp;

/// The shortest interval an `every` schedule may have.
pub const MIN_INTERVAL_MS: i64 = 1000;

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// A cron expression matched against the wall clock of a zone.
    Cron(CronExpr, Tz),
    /// Every `period` milliseconds, counted from an anchor (the job's creation or resumption).
    Every(i64),
    /// Once, at this instant.
    Once(Timestamp),
}

/// Reads a time zone name; the error names a few valid ones.
pub fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    name.trim()
        .parse::<Tz>()
        .map_err(|_| ScheduleError::UnknownZone {
            zone: name.to_string(),
        })
}

impl Timing {
    /// Parses `schedule` with `zone` (an IANA name, for cron expressions and instants written
    /// without an offset).
    pub fn parse(schedule: &str, zone: &str) -> Result<Timing, ScheduleError> {
        let tz = parse_zone(zone)?;
        let text = schedule.trim();
        if text.is_empty() {
            return Err(ScheduleError::Unreadable {
                schedule: schedule.to_string(),
                why: "it is empty".into(),
            });
        }
        let lower = text.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("every") {
            return parse_every(schedule, rest.trim()).map(Timing::Every);
        }
        if looks_like_instant(text) {
            return parse_instant(schedule, text, tz).map(Timing::Once);
        }
        CronExpr::parse(text).map(|c| Timing::Cron(c, tz))
    }

    /// The first due time strictly after `after`, for an `every` schedule counted from
    /// `anchor`; `None` when there is none (a one-time job whose instant has passed, an
    /// expression that never matches).
    pub fn next_after(&self, after: Timestamp, anchor: Timestamp) -> Option<Timestamp> {
        match self {
            Timing::Cron(expr, tz) => {
                let after = DateTime::<Utc>::from_timestamp_millis(after.0)?;
                expr.next_after(after, *tz)
                    .map(|t| Timestamp(t.timestamp_millis()))
            }
            Timing::Every(period) => {
                if after.0 < anchor.0 {
                    return Some(anchor);
                }
                let steps = (after.0 - anchor.0) / period + 1;
                steps
                    .checked_mul(*period)?
                    .checked_add(anchor.0)
                    .map(Timestamp)
            }
            Timing::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// Whether the job fires at most once.
    pub fn is_once(&self) -> bool {
        matches!(self, Timing::Once(_))
    }
}

/// `every 10m`: a positive count and one unit letter.
fn parse_every(schedule: &str, rest: &str) -> Result<i64, ScheduleError> {
    let fail = |why: String| ScheduleError::BadInterval {
        schedule: schedule.to_string(),
        why,
    };
    let compact: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
    let split = compact
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| fail("it has no unit".into()))?;
    let (count, unit) = compact.split_at(split);
    let count: i64 = count
        .parse()
        .map_err(|_| fail(format!("{count:?} is not a whole number")))?;
    let unit_ms = match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => return Err(fail(format!("{other:?} is not a unit"))),
    };
    let period = count
        .checked_mul(unit_ms)
        .ok_or_else(|| fail("it is too long".into()))?;
    if period < MIN_INTERVAL_MS {
        return Err(ScheduleError::IntervalTooShort {
            schedule: schedule.to_string(),
        });
    }
    Ok(period)
}

/// An instant starts with a four-digit year and a dash (`2027-01-31T09:00`).
fn looks_like_instant(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// An RFC 3339 instant, or a wall-clock time without an offset read in `tz`.
fn parse_instant(schedule: &str, text: &str, tz: Tz) -> Result<Timestamp, ScheduleError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(Timestamp(t.timestamp_millis()));
    }
    let normalized = text.replacen(' ', "T", 1);
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(wall) = NaiveDateTime::parse_from_str(&normalized, format) {
            return resolve(wall, tz)
                .map(|t| Timestamp(t.timestamp_millis()))
                .ok_or_else(|| ScheduleError::BadInstant {
                    schedule: schedule.to_string(),
                });
        }
    }
    Err(ScheduleError::BadInstant {
        schedule: schedule.to_string(),
    })
}
