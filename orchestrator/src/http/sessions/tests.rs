use super::*;

fn event(n: u32) -> SessionEvent {
    SessionEvent {
        session_id: "s".into(),
        kind: EventKind::TurnStarted {
            turn_id: format!("t{n}"),
        },
    }
}

#[test]
fn the_log_numbers_from_one_and_replays_after_a_cursor() {
    let log = EventLog::default();
    assert!(log.is_empty());
    assert_eq!(log.push(event(1)), 1);
    assert_eq!(log.push(event(2)), 2);
    assert_eq!(log.push(event(3)), 3);
    let (events, ended) = log.after(1);
    assert_eq!(
        events.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(!ended);
    assert!(log.after(3).0.is_empty());
    log.end();
    assert!(log.after(3).1);
}

#[test]
fn a_cursor_past_the_end_yields_nothing_and_never_overflows() {
    let log = EventLog::default();
    assert!(log.after(u64::MAX).0.is_empty());
    log.push(event(1));
    assert!(log.after(u64::MAX).0.is_empty());
    assert!(log.after(1).0.is_empty());
    assert_eq!(log.after(0).0.len(), 1);
    assert!(log.turn_started_after("s", 0));
    assert!(!log.turn_started_after("s", 1));
    assert!(!log.turn_started_after("other", 0));
}

#[tokio::test]
async fn a_stored_log_goes_on_from_its_stored_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::sessions::SessionStore::open_sqlite(&dir.path().join("s.db")).unwrap();
    let log = EventLog::stored(store.clone(), "s", Vec::new());
    assert_eq!(log.push(event(1)), 1);
    assert_eq!(log.push(event(2)), 2);
    store.flush().await;
    assert_eq!(log.after(0).0.len(), 2, "both are shown once stored");
    // A restart: the log is rebuilt from the store and numbers on.
    let earlier = store.events("s", SESSION_LOG_CAP).await.unwrap();
    let reopened = EventLog::stored(store.clone(), "s", earlier);
    assert_eq!(reopened.len(), 2);
    assert_eq!(reopened.push(event(3)), 3);
    store.flush().await;
    let (events, _) = reopened.after(1);
    let numbers: Vec<u64> = events.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [2, 3]);
    assert_eq!(events[0].1.kind, "turn_started");
    assert!(reopened.turn_started_after("s", 2));
}

#[test]
fn a_turn_is_settled_by_its_final_event_and_its_answer_in_either_order() {
    let turns = TurnState::default();
    let token = turns.begin().unwrap();
    assert!(turns.begin().is_none(), "one message at a time");
    // The event first: idle at once, the event's fields stand until the answer.
    turns.settle(&json!({"turn_id": "t1", "text": "done", "status": "completed"}));
    assert!(!turns.is_busy());
    assert!(turns.last_outcome().unwrap().get("calls").is_none());
    turns.finish(
        token,
        Some(json!({"turn_id": "t1", "status": "completed", "calls": []})),
    );
    assert!(turns.last_outcome().unwrap().get("calls").is_some());
    // The answer first: the later event does not replace it.
    let token = turns.begin().unwrap();
    turns.finish(
        token,
        Some(json!({"turn_id": "t2", "status": "completed", "calls": []})),
    );
    turns.settle(&json!({"turn_id": "t2", "status": "completed"}));
    assert!(turns.last_outcome().unwrap().get("calls").is_some());
    // An older turn's answer never replaces a newer turn's outcome, nor frees a new message.
    let old = turns.begin().unwrap();
    turns.settle(&json!({"turn_id": "t3", "status": "completed"}));
    let new = turns.begin().unwrap();
    turns.finish(old, Some(json!({"turn_id": "t3", "calls": []})));
    assert!(turns.is_busy(), "the new message is still being worked on");
    turns.finish(new, None);
    assert!(!turns.is_busy());
}

#[test]
fn the_log_drops_its_oldest_past_the_cap() {
    let log = EventLog::default();
    for n in 0..(SESSION_LOG_CAP as u32 + 5) {
        log.push(event(n));
    }
    let (events, _) = log.after(0);
    assert_eq!(events.len(), SESSION_LOG_CAP);
    assert_eq!(events[0].0, 6);
    assert_eq!(log.len(), SESSION_LOG_CAP as u64 + 5);
}
