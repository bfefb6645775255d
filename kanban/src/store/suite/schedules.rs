//! Suite cases for scheduled jobs: definitions and their errors, exactly-once firing across
//! handles, missed runs after an outage, one-time jobs and manual runs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::{SuiteBackend, default_board};
use crate::domain::{TaskFilter, TaskStatus, Timestamp};
use crate::schedule::sweep::sweep;
use crate::schedule::{FireKind, JobAction, JobPatch, Missed, NewJob, ScheduleError};
use crate::store::{Store, StoreError};

fn job(name: &str, schedule: &str) -> NewJob {
    NewJob {
        name: name.into(),
        owner: "suite".into(),
        schedule: schedule.into(),
        timezone: None,
        action: JobAction::Task {
            title: format!("made by {name}"),
            body: "scheduled".into(),
            assignee: None,
            parents: Vec::new(),
        },
        missed: Missed::Skip,
        until: None,
        max_runs: None,
        paused: false,
    }
}

async fn tasks_by_creator(s: &dyn Store) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for t in s
        .list_tasks(&default_board(), &TaskFilter::default())
        .await
        .unwrap()
    {
        if let Some(c) = t.created_by {
            *by.entry(c).or_insert(0) += 1;
        }
    }
    by
}

/// Jobs are made, read, changed, paused and removed; bad definitions say what to send.
pub async fn schedule_jobs_round_trip_and_refuse_bad_definitions(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let made = s
        .create_job(&board, &job("nightly", "0 2 * * *"))
        .await
        .unwrap();
    assert!(made.id.starts_with("j_"), "{}", made.id);
    assert_eq!((made.timezone.as_str(), made.state()), ("UTC", "active"));
    assert!(made.next_due.unwrap() > made.created_at);

    let cases: [(NewJob, &str); 5] = [
        (job("a", "61 * * * *"), "out of range for the minute"),
        (job("b", "every 500ms"), "not a unit"),
        (job("c", "every 0s"), "minimum interval of 1 s"),
        (
            NewJob {
                timezone: Some("Mars/Olympus".into()),
                ..job("d", "0 9 * * *")
            },
            "IANA time zone",
        ),
        (job("e", "2001-01-01T00:00:00Z"), "in the past"),
    ];
    for (new, says) in cases {
        let err = s.create_job(&board, &new).await.unwrap_err();
        assert!(matches!(err, StoreError::Schedule(_)), "{err:?}");
        assert!(err.to_string().contains(says), "{err} should say {says:?}");
    }
    let taken = s
        .create_job(&board, &job("nightly", "every 1h"))
        .await
        .unwrap_err();
    assert!(
        matches!(taken, StoreError::JobNameTaken { .. }),
        "{taken:?}"
    );
    let never = s
        .create_job(&board, &job("feb30", "0 0 30 2 *"))
        .await
        .unwrap_err();
    assert!(
        matches!(never, StoreError::Schedule(ScheduleError::NeverDue { .. })),
        "{never:?}"
    );

    // By name or id; pausing keeps the next due time for display but stops firing.
    assert_eq!(s.job(&board, "nightly").await.unwrap().id, made.id);
    let paused = s
        .update_job(
            &board,
            &made.id,
            &JobPatch {
                paused: Some(true),
                ..JobPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(paused.state(), "paused");
    let moved = s
        .update_job(
            &board,
            "nightly",
            &JobPatch {
                schedule: Some("30 6 * * 1-5".into()),
                timezone: Some("Europe/Paris".into()),
                paused: Some(false),
                ..JobPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (moved.state(), moved.timezone.as_str()),
        ("active", "Europe/Paris")
    );
    let bad = s
        .update_job(
            &board,
            "nightly",
            &JobPatch {
                schedule: Some("every x".into()),
                ..JobPatch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("every <n><unit>"), "{bad}");
    assert_eq!(s.jobs(&board).await.unwrap().len(), 1);
    s.delete_job(&board, "nightly").await.unwrap();
    assert!(matches!(
        s.job(&board, "nightly").await.unwrap_err(),
        StoreError::JobNotFound { .. }
    ));
}

/// Sweepers on several handles at once fire every due time of every job exactly once.
pub async fn due_jobs_fire_once_across_handles(b: &dyn SuiteBackend) {
    const JOBS: usize = 12;
    let first = b.open().await.unwrap();
    let second = b.open().await.unwrap();
    let board = default_board();
    for i in 0..JOBS {
        first
            .create_job(&board, &job(&format!("tick-{i}"), "every 1s"))
            .await
            .unwrap();
    }
    let mut sweepers = tokio::task::JoinSet::new();
    for n in 0..4 {
        let store: Arc<dyn Store> = Arc::clone(if n % 2 == 0 { &first } else { &second });
        let board = board.clone();
        sweepers.spawn(async move {
            let mut fired = Vec::new();
            for _ in 0..12 {
                fired.extend(sweep(store.as_ref(), &board).await.fired);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            fired
        });
    }
    let mut fired = Vec::new();
    while let Some(part) = sweepers.join_next().await {
        fired.extend(part.unwrap());
    }
    let keys: HashSet<_> = fired.iter().map(|r| (r.job_id.clone(), r.due_at)).collect();
    assert_eq!(
        keys.len(),
        fired.len(),
        "a (job, due time) fired twice: {fired:?}"
    );
    assert!(
        fired.len() >= JOBS * 2,
        "every job fired each second: {}",
        fired.len()
    );
    let tasks = tasks_by_creator(first.as_ref()).await;
    for j in first.jobs(&board).await.unwrap() {
        let runs = first.job_history(&board, &j.id, 1000).await.unwrap();
        let made = tasks
            .get(&format!("schedule:{}", j.id))
            .copied()
            .unwrap_or(0);
        assert_eq!(made, runs.len(), "one task per recorded run of {}", j.name);
        assert_eq!(j.runs as usize, runs.len());
        // Consecutive due times one second apart: none skipped.
        let mut dues: Vec<i64> = runs.iter().map(|r| r.due_at.0).collect();
        dues.sort_unstable();
        assert!(dues.windows(2).all(|w| w[1] - w[0] == 1000), "{dues:?}");
        assert!(
            runs.iter()
                .all(|r| r.kind == FireKind::OnTime && r.outcome.as_deref() == Some("ready"))
        );
    }
}

/// After a gap with no sweep, `run_once` makes one catch-up run and `skip` none; both then go
/// on with the next due time. One-time jobs fire once and end; manual runs leave the schedule.
pub async fn missed_runs_catch_up_once_or_skip(b: &dyn SuiteBackend) {
    let s = b.open().await.unwrap();
    let board = default_board();
    let once = NewJob {
        missed: Missed::RunOnce,
        ..job("catch-up", "every 1s")
    };
    let once = s.create_job(&board, &once).await.unwrap();
    let skip = s
        .create_job(&board, &job("skipper", "every 1s"))
        .await
        .unwrap();
    let at = Timestamp(Timestamp::now().0 + 1500);
    let at_text = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at.0)
        .unwrap()
        .to_rfc3339();
    let single = s
        .create_job(&board, &job("single", &at_text))
        .await
        .unwrap();
    s.note_sweep(&board).await.unwrap();
    // No sweep for longer than an outage gap.
    tokio::time::sleep(Duration::from_millis(
        crate::schedule::OUTAGE_GAP_MS as u64 + 1200,
    ))
    .await;
    let fired = sweep(s.as_ref(), &board).await;
    assert!(fired.error.is_none(), "{:?}", fired.error);
    let of = |id: &str| {
        fired
            .fired
            .iter()
            .filter(|r| r.job_id == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    let caught = of(&once.id);
    assert_eq!(caught.len(), 1, "one catch-up run: {caught:?}");
    assert_eq!(caught[0].kind, FireKind::CatchUp);
    assert!(
        caught[0].covers >= 4 && caught[0].task_id.is_some(),
        "{caught:?}"
    );
    let skipped = of(&skip.id);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(
        (skipped[0].kind, skipped[0].task_id.as_ref()),
        (FireKind::Skipped, None)
    );
    assert_eq!(
        of(&single.id).len(),
        1,
        "the one-time job fell in the outage and is recorded once"
    );
    assert_eq!(s.job(&board, &single.id).await.unwrap().state(), "ended");
    let tasks = tasks_by_creator(s.as_ref()).await;
    assert_eq!(tasks.get(&format!("schedule:{}", once.id)), Some(&1));
    assert_eq!(tasks.get(&format!("schedule:{}", skip.id)), None);

    // Back to normal: the next due times fire on time, one by one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let next = sweep(s.as_ref(), &board).await;
    assert!(
        next.fired.iter().all(|r| r.kind == FireKind::OnTime),
        "{:?}",
        next.fired
    );
    assert!(
        next.fired.iter().any(|r| r.job_id == skip.id),
        "{:?}",
        next.fired
    );

    // A manual run makes a task now and leaves the next due time alone.
    let before = s.job(&board, &skip.id).await.unwrap();
    let manual = s.run_job_now(&board, "skipper").await.unwrap();
    assert_eq!(manual.kind, FireKind::Manual);
    let after = s.job(&board, &skip.id).await.unwrap();
    assert_eq!((after.next_due, after.runs), (before.next_due, before.runs));
    let history = s.job_history(&board, "skipper", 10).await.unwrap();
    assert_eq!(
        history[0].outcome.as_deref(),
        Some(TaskStatus::Ready.as_str())
    );
    assert!(
        history
            .iter()
            .any(|r| r.outcome.as_deref() == Some("skipped"))
    );
}
