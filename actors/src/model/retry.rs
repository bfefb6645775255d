//! When to ask a model server again and how long to wait first: which failures are worth a
//! retry, exponential backoff with jitter, and the server's own `Retry-After` (seconds or an
//! HTTP date) or `retry-after-ms`. The OpenAI-compatible provider uses it between attempts.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether an HTTP status is a passing condition worth another attempt: rate limits, request
/// timeouts and server errors other than "not implemented" and "version not supported".
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429)
        || ((500..=599).contains(&status) && !matches!(status, 501 | 505))
}

/// The wait before retry number `attempt` (0 for the first retry): `base * 2^attempt`, capped
/// at `max`, then spread over its upper half with jitter so that many sessions rate-limited
/// together do not come back together.
pub(crate) fn backoff_delay(base: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.min(30));
    let full = base.saturating_mul(factor).min(max);
    full / 2 + full.mul_f64(random_fraction() / 2.0)
}

/// A number in `[0, 1)` that differs between calls; std's hasher keys are random per process
/// and per `RandomState`, which is all jitter needs.
fn random_fraction() -> f64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    // The top 53 bits fill an f64 mantissa exactly.
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// How long the server asked us to wait, from `retry-after-ms` (milliseconds, sent by OpenAI)
/// or `Retry-After` (seconds, or an HTTP date measured from `now`). A date in the past means
/// "now"; anything unreadable is ignored.
pub(crate) fn server_wait(
    retry_after: Option<&str>,
    retry_after_ms: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = retry_after?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Reads an HTTP date in its preferred form, `Sun, 06 Nov 1994 08:49:37 GMT` (the weekday is
/// not checked, and may be left out).
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let rest = match value.split_once(',') {
        Some((_weekday, rest)) => rest,
        None => value,
    };
    let mut parts = rest.split_whitespace();
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()?.to_ascii_lowercase().as_str() {
        "jan" => 1,
        "feb" => 2,
        "mar" => 3,
        "apr" => 4,
        "may" => 5,
        "jun" => 6,
        "jul" => 7,
        "aug" => 8,
        "sep" => 9,
        "oct" => 10,
        "nov" => 11,
        "dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let hour: u64 = clock.next()?.parse().ok()?;
    let minute: u64 = clock.next()?.parse().ok()?;
    let second: u64 = clock.next()?.parse().ok()?;
    let zone = parts.next()?;
    if !(zone.eq_ignore_ascii_case("GMT") || zone.eq_ignore_ascii_case("UTC"))
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil-date algorithm).
fn days_from_civil(year: i64, month: u64, day: u64) -> i64 {
    let month = i64::try_from(month).unwrap_or(1);
    let day = i64::try_from(day).unwrap_or(1);
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_worth_retrying() {
        for status in [408, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 422, 501, 505] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn backoff_doubles_within_its_cap_with_jitter() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for attempt in 0..10 {
            let full = (base * 2u32.pow(attempt)).min(max);
            let delay = backoff_delay(base, max, attempt);
            assert!(
                delay >= full / 2 && delay <= full,
                "attempt {attempt}: {delay:?}"
            );
        }
        // Huge attempt numbers do not overflow.
        assert!(backoff_delay(base, max, u32::MAX) <= max);
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            server_wait(Some("3"), None, now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            server_wait(Some(" 1.5 "), None, now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            server_wait(Some("3"), Some("250"), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            server_wait(Some("Sun, 06 Nov 1994 08:50:07 GMT"), None, now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            server_wait(Some("06 Nov 1994 08:49:40 GMT"), None, now),
            Some(Duration::from_secs(3))
        );
        // A date already past: retry at once.
        assert_eq!(
            server_wait(Some("Sat, 05 Nov 1994 08:49:37 GMT"), None, now),
            Some(Duration::ZERO)
        );
        for junk in [
            "soon",
            "-4",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
        ] {
            assert_eq!(server_wait(Some(junk), None, now), None, "{junk}");
        }
        assert_eq!(server_wait(None, None, now), None);
    }

    #[test]
    fn civil_dates_count_leap_years() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 11, 30), 20_787);
    }
}
