//! Unit tests of schedules: cron parsing, time zones and DST, intervals, one-time jobs, end
//! conditions and missed-run decisions.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed step fails the test"
)]

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::cron::CronExpr;
use super::plan::{decide, due_after, first_due};
use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn ts(text: &str) -> Timestamp {
    Timestamp(utc(text).timestamp_millis())
}

fn next(expr: &str, zone: &str, after: &str) -> String {
    let tz: Tz = zone.parse().unwrap();
    let t = CronExpr::parse(expr)
        .unwrap()
        .next_after(utc(after), tz)
        .unwrap();
    t.with_timezone(&tz).to_rfc3339()
}

fn job(schedule: &str, anchor: &str) -> Job {
    Job {
        id: "j_00000001".into(),
        name: "t".into(),
        owner: "o".into(),
        schedule: schedule.into(),
        timezone: "UTC".into(),
        anchor: ts(anchor),
        action: JobAction::Prompt {
            prompt: "p".into(),
            profile: "default".into(),
        },
        missed: Missed::Skip,
        until: None,
        max_runs: None,
        paused: false,
        next_due: None,
        runs: 0,
        last: None,
        created_at: ts(anchor),
        updated_at: ts(anchor),
    }
}

#[test]
fn cron_fields_lists_ranges_steps_and_names() {
    assert_eq!(
        next("*/15 * * * *", "UTC", "2026-03-02T10:07:00Z"),
        "2026-03-02T10:15:00+00:00"
    );
    assert_eq!(
        next("0 9 * * mon-fri", "UTC", "2026-03-06T09:00:00Z"),
        "2026-03-09T09:00:00+00:00"
    );
    assert_eq!(
        next("5,35 1-2 * jan,mar *", "UTC", "2026-02-01T00:00:00Z"),
        "2026-03-01T01:05:00+00:00"
    );
    assert_eq!(
        next("0 0 1 * *", "UTC", "2026-01-31T12:00:00Z"),
        "2026-02-01T00:00:00+00:00"
    );
    // Sunday as 7.
    assert_eq!(
        next("0 12 * * 7", "UTC", "2026-03-02T00:00:00Z"),
        "2026-03-08T12:00:00+00:00"
    );
    // Day of month and day of week both restricted: either matches.
    assert_eq!(
        next("0 0 13 * fri", "UTC", "2026-03-01T00:00:00Z"),
        "2026-03-06T00:00:00+00:00"
    );
    assert_eq!(
        next("@hourly", "UTC", "2026-03-02T10:00:00Z"),
        "2026-03-02T11:00:00+00:00"
    );
    // Leap day, years away.
    assert_eq!(
        next("0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z"),
        "2028-02-29T00:00:00+00:00"
    );
    // Strictly after: a match at the instant itself is not next.
    assert_eq!(
        next("30 10 * * *", "UTC", "2026-03-02T10:30:00Z"),
        "2026-03-03T10:30:00+00:00"
    );
}

#[test]
fn cron_errors_say_what_to_write() {
    let cases = [
        ("* * * *", "five"),
        ("60 * * * *", "out of range for the minute"),
        ("* 24 * * *", "0 to 23"),
        ("* * * foo *", "jan, feb"),
        ("*/0 * * * *", "at least 1"),
        ("5-1 * * * *", "backwards"),
        ("@often", "@hourly"),
    ];
    for (expr, says) in cases {
        let err = CronExpr::parse(expr).unwrap_err().to_string();
        assert!(err.contains(says), "{expr}: {err}");
    }
}

#[test]
fn cron_runs_on_the_wall_clock_of_its_zone() {
    // 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer.
    assert_eq!(
        next("0 9 * * *", "Europe/Paris", "2026-01-10T12:00:00Z"),
        "2026-01-11T09:00:00+01:00"
    );
    assert_eq!(
        next("0 9 * * *", "Europe/Paris", "2026-07-10T12:00:00Z"),
        "2026-07-11T09:00:00+02:00"
    );
    assert_eq!(
        next("0 9 * * *", "Asia/Kolkata", "2026-07-10T00:00:00Z"),
        "2026-07-10T09:00:00+05:30"
    );
}

#[test]
fn a_time_skipped_by_spring_forward_fires_at_the_end_of_the_gap_once() {
    // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    let ny = "America/New_York";
    assert_eq!(
        next("30 2 * * *", ny, "2026-03-08T05:00:00Z"),
        "2026-03-08T03:00:00-04:00"
    );
    // The day after, 02:30 exists again.
    assert_eq!(
        next("30 2 * * *", ny, "2026-03-08T07:00:00Z"),
        "2026-03-09T02:30:00-04:00"
    );
    // Every quarter hour: the skipped 02:00-02:45 collapse into one run at 03:00, then 03:15.
    let tz: Tz = ny.parse().unwrap();
    let e = CronExpr::parse("*/15 * * * *").unwrap();
    let a = e.next_after(utc("2026-03-08T06:50:00Z"), tz).unwrap();
    assert_eq!(a, utc("2026-03-08T07:00:00Z")); // 03:00 EDT
    let b = e.next_after(a, tz).unwrap();
    assert_eq!(b, utc("2026-03-08T07:15:00Z"));
}

#[test]
fn a_repeated_hour_of_fall_back_fires_once() {
    // New York, 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice.
    let tz: Tz = "America/New_York".parse().unwrap();
    let e = CronExpr::parse("30 1 * * *").unwrap();
    let first = e.next_after(utc("2026-11-01T04:00:00Z"), tz).unwrap();
    assert_eq!(first, utc("2026-11-01T05:30:00Z")); // 01:30 EDT
    let again = e.next_after(first, tz).unwrap();
    assert_eq!(
        again.with_timezone(&tz).to_rfc3339(),
        "2026-11-02T01:30:00-05:00"
    );
    // Hourly: 01:00 EDT, then 02:00 EST; the second 01:00 (EST) is not a run of its own.
    let hourly = CronExpr::parse("0 * * * *").unwrap();
    let one = hourly.next_after(utc("2026-11-01T04:30:00Z"), tz).unwrap();
    assert_eq!(one, utc("2026-11-01T05:00:00Z"));
    assert_eq!(
        hourly.next_after(one, tz).unwrap(),
        utc("2026-11-01T07:00:00Z")
    );
    // Asked from inside the second 01:xx, the next run is after it, not back in the first.
    assert_eq!(
        hourly.next_after(utc("2026-11-01T06:10:00Z"), tz).unwrap(),
        utc("2026-11-01T07:00:00Z")
    );
}

#[test]
fn schedules_parse_as_cron_interval_or_instant() {
    assert!(matches!(
        Timing::parse("0 9 * * *", "Europe/Paris").unwrap(),
        Timing::Cron(..)
    ));
    assert_eq!(
        Timing::parse("every 10m", "UTC").unwrap(),
        Timing::Every(600_000)
    );
    assert_eq!(
        Timing::parse("every 1s", "UTC").unwrap(),
        Timing::Every(1000)
    );
    assert_eq!(
        Timing::parse("Every 2 h", "UTC").unwrap(),
        Timing::Every(7_200_000)
    );
    assert_eq!(
        Timing::parse("every 1d", "UTC").unwrap(),
        Timing::Every(86_400_000)
    );
    assert_eq!(
        Timing::parse("2027-01-31T09:00:00+01:00", "UTC").unwrap(),
        Timing::Once(ts("2027-01-31T08:00:00Z"))
    );
    // Without an offset, read in the job's zone.
    assert_eq!(
        Timing::parse("2027-07-01T09:00", "Europe/Paris").unwrap(),
        Timing::Once(ts("2027-07-01T07:00:00Z"))
    );
    let short = Timing::parse("every 0s", "UTC").unwrap_err();
    assert!(
        matches!(short, ScheduleError::IntervalTooShort { .. }),
        "{short}"
    );
    assert!(
        Timing::parse("every 10", "UTC")
            .unwrap_err()
            .to_string()
            .contains("every <n><unit>")
    );
    assert!(
        Timing::parse("every 3w", "UTC")
            .unwrap_err()
            .to_string()
            .contains("not a unit")
    );
    let zone = Timing::parse("0 9 * * *", "Europe/Pariss").unwrap_err();
    assert!(zone.to_string().contains("Europe/Paris"), "{zone}");
    assert!(matches!(
        Timing::parse("2027-13-01T00:00", "UTC").unwrap_err(),
        ScheduleError::BadInstant { .. }
    ));
    assert!(matches!(
        Timing::parse("", "UTC").unwrap_err(),
        ScheduleError::Unreadable { .. }
    ));
}

#[test]
fn intervals_count_from_their_anchor() {
    let j = job("every 10m", "2026-03-02T10:00:00Z");
    let t = j.timing().unwrap();
    assert_eq!(
        first_due(&j, &t, j.anchor),
        Some(ts("2026-03-02T10:10:00Z"))
    );
    assert_eq!(
        due_after(&j, &t, ts("2026-03-02T10:10:00Z")),
        Some(ts("2026-03-02T10:20:00Z"))
    );
    assert_eq!(
        due_after(&j, &t, ts("2026-03-02T10:19:59Z")),
        Some(ts("2026-03-02T10:20:00Z"))
    );
}

#[test]
fn end_conditions_stop_a_job() {
    let mut j = job("every 1h", "2026-03-02T10:00:00Z");
    let t = j.timing().unwrap();
    j.until = Some(ts("2026-03-02T12:00:00Z"));
    assert_eq!(
        due_after(&j, &t, ts("2026-03-02T11:00:00Z")),
        Some(ts("2026-03-02T12:00:00Z"))
    );
    assert_eq!(
        due_after(&j, &t, ts("2026-03-02T12:00:00Z")),
        None,
        "nothing after until"
    );
    j.until = None;
    j.max_runs = Some(2);
    j.runs = 1;
    j.next_due = Some(ts("2026-03-02T12:00:00Z"));
    let fire = decide(&j, &t, ts("2026-03-02T12:00:01Z"), None).unwrap();
    assert_eq!(
        (fire.kind, fire.runs, fire.next_due),
        (FireKind::OnTime, 2, None),
        "the second run is the last"
    );
}

#[test]
fn a_one_time_job_fires_once() {
    let mut j = job("2026-03-02T12:00:00Z", "2026-03-02T10:00:00Z");
    let t = j.timing().unwrap();
    assert!(t.is_once());
    j.next_due = first_due(&j, &t, j.anchor);
    assert_eq!(j.next_due, Some(ts("2026-03-02T12:00:00Z")));
    assert_eq!(
        decide(&j, &t, ts("2026-03-02T11:59:59Z"), None),
        None,
        "not yet due"
    );
    let fire = decide(&j, &t, ts("2026-03-02T12:00:00.500Z"), None).unwrap();
    assert_eq!((fire.kind, fire.next_due), (FireKind::OnTime, None));
}

#[test]
fn missed_due_times_are_skipped_or_caught_up_once() {
    let mut j = job("every 1s", "2026-03-02T10:00:00Z");
    let t = j.timing().unwrap();
    j.next_due = Some(ts("2026-03-02T10:00:01Z"));
    let now = ts("2026-03-02T10:00:12.300Z");
    let outage = Some((ts("2026-03-02T10:00:00.500Z"), now));
    let skip = decide(&j, &t, now, outage).unwrap();
    assert_eq!(
        (skip.kind, skip.covers, skip.runs),
        (FireKind::Skipped, 12, 0)
    );
    assert_eq!(skip.due_at, ts("2026-03-02T10:00:12Z"));
    assert_eq!(skip.next_due, Some(ts("2026-03-02T10:00:13Z")));
    j.missed = Missed::RunOnce;
    let once = decide(&j, &t, now, outage).unwrap();
    assert_eq!(
        (once.kind, once.covers, once.runs),
        (FireKind::CatchUp, 12, 1)
    );
    assert_eq!(once.next_due, Some(ts("2026-03-02T10:00:13Z")));
    // Late but outside any outage and under the late limit: fired one by one.
    let late = decide(&j, &t, ts("2026-03-02T10:00:03Z"), None).unwrap();
    assert_eq!(
        (late.kind, late.next_due),
        (FireKind::OnTime, Some(ts("2026-03-02T10:00:02Z")))
    );
    // Far later than the late limit with no outage recorded: missed all the same.
    let stale = decide(&j, &t, ts("2026-03-02T10:05:00Z"), None).unwrap();
    assert_eq!(stale.kind, FireKind::CatchUp);
    // Paused jobs never fire.
    j.paused = true;
    assert_eq!(decide(&j, &t, now, outage), None);
}

#[test]
fn zone_names_are_checked() {
    assert!(parse_zone("America/New_York").is_ok());
    assert_eq!(Utc.timestamp_millis_opt(0).unwrap().timestamp(), 0);
    let err = parse_zone("Nowhere/Land").unwrap_err().to_string();
    assert!(err.contains("IANA"), "{err}");
}
