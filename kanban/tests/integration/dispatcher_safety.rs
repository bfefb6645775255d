//! Safety of the dispatcher and its workers when things go wrong around them: a stop that
//! lands during a round, a database outage longer than the lease, a dispatched worker assigning
//! children to a stronger profile, and the size of a wide fan-in's first message. Runs on a real SQLite board behind a wrapper that can
//! pause claims and fail every call.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is the test failing"
)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Addr;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use troupe_actors::model::{
    ModelError, ModelProvider, ModelRequest, ModelResponse, Script, ScriptTurn, ScriptedProvider,
};
use troupe_actors::supervisor::Supervisor;
use troupe_kanban::dispatcher::{DispatcherConfig, DispatcherEvent, DispatcherHandle};
use troupe_kanban::domain::{
    Attachment, Board as BoardInfo, BoardSlug, BoardStats, Comment, Event, EventId, Lease,
    NewAttachment, NewBoard, NewTask, Run, RunId, RunOutcome, Task, TaskFilter, TaskId, TaskLinks,
    TaskPatch, TaskStatus, Timestamp, WorkerId,
};
use troupe_kanban::hooks::DispatcherHooks;
use troupe_kanban::profiles::Profiles;
use troupe_kanban::schedule::{Job, JobPatch, JobRun, NewJob};
use troupe_kanban::store::{
    BlockRequest, Claim, ClaimSpec, Completion, Created, Failure, FailureOutcome, Reclaimed,
    SqliteStore, Store, StoreError, StoreFuture, Transitioned,
};
use troupe_kanban::worker::WorkerOutcome;

use crate::support::{PATIENCE, completes, enter, fast, profile, supervisor};

/// A claim paused after it committed: `entered` fires, then the claim waits for `open`.
type ClaimGate = (oneshot::Sender<()>, oneshot::Receiver<()>);

/// A store that forwards to SQLite, can fail every call ("the database is down") and can pause
/// the next claim after it committed.
struct Flaky {
    inner: Arc<dyn Store>,
    down: AtomicBool,
    gate: Mutex<Option<ClaimGate>>,
    /// Calls of `claim_task` and of `claim_next`.
    by_id: AtomicUsize,
    next: AtomicUsize,
}

impl Flaky {
    fn wrap<'a, T: Send + 'a>(
        &'a self,
        board: &BoardSlug,
        call: StoreFuture<'a, T>,
    ) -> StoreFuture<'a, T> {
        if self.down.load(Ordering::SeqCst) {
            let board = board.clone();
            return Box::pin(async move {
                Err(StoreError::Unavailable {
                    board,
                    reason: "connection refused (test outage)".into(),
                })
            });
        }
        call
    }
}

impl Store for Flaky {
    fn list_boards(&self, include_archived: bool) -> StoreFuture<'_, Vec<BoardInfo>> {
        self.wrap(
            &BoardSlug::default_board(),
            self.inner.list_boards(include_archived),
        )
    }

    fn create_board(&self, board: &NewBoard) -> StoreFuture<'_, BoardInfo> {
        self.wrap(&BoardSlug::default_board(), self.inner.create_board(board))
    }

    fn board(&self, slug: &BoardSlug) -> StoreFuture<'_, BoardInfo> {
        self.wrap(slug, self.inner.board(slug))
    }

    fn archive_board(&self, slug: &BoardSlug) -> StoreFuture<'_, BoardInfo> {
        self.wrap(slug, self.inner.archive_board(slug))
    }

    fn delete_board(&self, slug: &BoardSlug) -> StoreFuture<'_, ()> {
        self.wrap(slug, self.inner.delete_board(slug))
    }

    fn create_task(&self, board: &BoardSlug, task: &NewTask) -> StoreFuture<'_, Created> {
        self.wrap(board, self.inner.create_task(board, task))
    }

    fn task(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.task(board, id))
    }

    fn list_tasks(&self, board: &BoardSlug, filter: &TaskFilter) -> StoreFuture<'_, Vec<Task>> {
        self.wrap(board, self.inner.list_tasks(board, filter))
    }

    fn patch_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        patch: &TaskPatch,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.patch_task(board, id, patch))
    }

    fn assign_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        assignee: Option<&str>,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.assign_task(board, id, assignee))
    }

    fn stats(&self, board: &BoardSlug) -> StoreFuture<'_, BoardStats> {
        self.wrap(board, self.inner.stats(board))
    }

    fn link(&self, board: &BoardSlug, parent: &TaskId, child: &TaskId) -> StoreFuture<'_, ()> {
        self.wrap(board, self.inner.link(board, parent, child))
    }

    fn unlink(&self, board: &BoardSlug, parent: &TaskId, child: &TaskId) -> StoreFuture<'_, ()> {
        self.wrap(board, self.inner.unlink(board, parent, child))
    }

    fn links(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, TaskLinks> {
        self.wrap(board, self.inner.links(board, id))
    }

    fn add_comment(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        author: &str,
        body: &str,
    ) -> StoreFuture<'_, Comment> {
        self.wrap(board, self.inner.add_comment(board, id, author, body))
    }

    fn comments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Comment>> {
        self.wrap(board, self.inner.comments(board, id))
    }

    fn events_since(
        &self,
        board: &BoardSlug,
        cursor: EventId,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Event>> {
        self.wrap(board, self.inner.events_since(board, cursor, limit))
    }

    fn task_events(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Event>> {
        self.wrap(board, self.inner.task_events(board, id))
    }

    fn runs(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Run>> {
        self.wrap(board, self.inner.runs(board, id))
    }

    fn run(&self, board: &BoardSlug, id: RunId) -> StoreFuture<'_, Run> {
        self.wrap(board, self.inner.run(board, id))
    }

    fn record_run_usage(&self, board: &BoardSlug, id: RunId, usage: &Value) -> StoreFuture<'_, ()> {
        self.wrap(board, self.inner.record_run_usage(board, id, usage))
    }

    fn attach(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        file: &NewAttachment,
    ) -> StoreFuture<'_, Attachment> {
        self.wrap(board, self.inner.attach(board, id, file))
    }

    fn attachments(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Vec<Attachment>> {
        self.wrap(board, self.inner.attachments(board, id))
    }

    fn attachment_content(&self, board: &BoardSlug, attachment: i64) -> StoreFuture<'_, Vec<u8>> {
        self.wrap(board, self.inner.attachment_content(board, attachment))
    }

    fn remove_attachment(&self, board: &BoardSlug, attachment: i64) -> StoreFuture<'_, ()> {
        self.wrap(board, self.inner.remove_attachment(board, attachment))
    }

    fn promote(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<TaskId>> {
        self.wrap(board, self.inner.promote(board))
    }

    fn claim_next(&self, board: &BoardSlug, spec: &ClaimSpec) -> StoreFuture<'_, Option<Claim>> {
        self.next.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.claim_next(board, spec);
        let gate = self.gate.lock().unwrap().take();
        let down = self.wrap(board, Box::pin(async { Ok(()) }));
        Box::pin(async move {
            down.await?;
            let claim = inner.await?;
            if let Some((entered, open)) = gate {
                let _ = entered.send(());
                let _ = open.await;
            }
            Ok(claim)
        })
    }

    fn claim_task(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        spec: &ClaimSpec,
    ) -> StoreFuture<'_, Claim> {
        self.by_id.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.claim_task(board, id, spec);
        let gate = self.gate.lock().unwrap().take();
        let down = self.wrap(board, Box::pin(async { Ok(()) }));
        Box::pin(async move {
            down.await?;
            let claim = inner.await?;
            if let Some((entered, open)) = gate {
                let _ = entered.send(());
                let _ = open.await;
            }
            Ok(claim)
        })
    }

    fn heartbeat(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: &WorkerId,
        ttl: Duration,
    ) -> StoreFuture<'_, Lease> {
        self.wrap(board, self.inner.heartbeat(board, id, worker, ttl))
    }

    fn complete(&self, board: &BoardSlug, id: &TaskId, done: &Completion) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.complete(board, id, done))
    }

    fn block(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        block: &BlockRequest,
    ) -> StoreFuture<'_, Transitioned> {
        self.wrap(board, self.inner.block(board, id, block))
    }

    fn unblock(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.unblock(board, id))
    }

    fn archive(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Transitioned> {
        self.wrap(board, self.inner.archive(board, id))
    }

    fn schedule(&self, board: &BoardSlug, id: &TaskId, until: Timestamp) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.schedule(board, id, until))
    }

    fn specify(&self, board: &BoardSlug, id: &TaskId) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.specify(board, id))
    }

    fn request_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        summary: Option<&str>,
        worker: Option<&WorkerId>,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.request_review(board, id, summary, worker))
    }

    fn submit_for_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        done: &Completion,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.submit_for_review(board, id, done))
    }

    fn approve_review(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        done: &Completion,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.approve_review(board, id, done))
    }

    fn request_changes(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        reason: &str,
    ) -> StoreFuture<'_, Task> {
        self.wrap(board, self.inner.request_changes(board, id, reason))
    }

    fn reclaim_expired(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Reclaimed>> {
        self.wrap(board, self.inner.reclaim_expired(board))
    }

    fn release(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: &WorkerId,
    ) -> StoreFuture<'_, Transitioned> {
        self.wrap(board, self.inner.release(board, id, worker))
    }

    fn record_failure(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        failure: &Failure,
    ) -> StoreFuture<'_, FailureOutcome> {
        self.wrap(board, self.inner.record_failure(board, id, failure))
    }

    fn requeue_rate_limited(
        &self,
        board: &BoardSlug,
        id: &TaskId,
        worker: Option<&WorkerId>,
        error: &str,
    ) -> StoreFuture<'_, Task> {
        self.wrap(
            board,
            self.inner.requeue_rate_limited(board, id, worker, error),
        )
    }

    fn create_job(&self, board: &BoardSlug, job: &NewJob) -> StoreFuture<'_, Job> {
        self.wrap(board, self.inner.create_job(board, job))
    }

    fn jobs(&self, board: &BoardSlug) -> StoreFuture<'_, Vec<Job>> {
        self.wrap(board, self.inner.jobs(board))
    }

    fn job(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, Job> {
        self.wrap(board, self.inner.job(board, key))
    }

    fn update_job(&self, board: &BoardSlug, key: &str, patch: &JobPatch) -> StoreFuture<'_, Job> {
        self.wrap(board, self.inner.update_job(board, key, patch))
    }

    fn delete_job(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, Job> {
        self.wrap(board, self.inner.delete_job(board, key))
    }

    fn job_history(
        &self,
        board: &BoardSlug,
        key: &str,
        limit: usize,
    ) -> StoreFuture<'_, Vec<JobRun>> {
        self.wrap(board, self.inner.job_history(board, key, limit))
    }

    fn run_job_now(&self, board: &BoardSlug, key: &str) -> StoreFuture<'_, JobRun> {
        self.wrap(board, self.inner.run_job_now(board, key))
    }

    fn note_sweep(&self, board: &BoardSlug) -> StoreFuture<'_, ()> {
        self.wrap(board, self.inner.note_sweep(board))
    }

    fn fire_next_job(&self, board: &BoardSlug) -> StoreFuture<'_, Option<JobRun>> {
        self.wrap(board, self.inner.fire_next_job(board))
    }
}

struct Board {
    _dir: tempfile::TempDir,
    /// The real store.
    store: Arc<dyn Store>,
    /// The same store behind the wrapper.
    flaky: Arc<Flaky>,
    slug: BoardSlug,
    supervisor: Addr<Supervisor>,
}

async fn board() -> Board {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).await.unwrap());
    let flaky = Arc::new(Flaky {
        inner: Arc::clone(&store),
        down: AtomicBool::new(false),
        gate: Mutex::new(None),
        by_id: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
    });
    Board {
        _dir: dir,
        store,
        flaky,
        slug: BoardSlug::default_board(),
        supervisor: supervisor(),
    }
}

fn start(
    b: &Board,
    store: Arc<dyn Store>,
    profiles: Profiles,
    config: DispatcherConfig,
) -> DispatcherHandle {
    DispatcherHandle::start(
        store,
        b.slug.clone(),
        profiles,
        b.supervisor.clone(),
        DispatcherHooks::new(),
        config,
    )
}

/// A model call that never answers until cancelled, counted while in flight.
struct Hangs {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

/// A model that completes its task, counted in the same in-flight tally as [`Hangs`].
struct CountedCompletes {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    inner: ScriptedProvider,
}

impl ModelProvider for Hangs {
    fn describe(&self) -> String {
        "hangs (test)".into()
    }

    fn complete(
        &self,
        _request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let guard = enter(&self.now, &self.most);
        Box::pin(async move {
            cancel.cancelled().await;
            drop(guard);
            Err(ModelError::Cancelled)
        })
    }
}

impl ModelProvider for CountedCompletes {
    fn describe(&self) -> String {
        "completes, counted (test)".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let guard = enter(&self.now, &self.most);
        let call = self.inner.complete(request, cancel);
        Box::pin(async move {
            let out = call.await;
            drop(guard);
            out
        })
    }
}

async fn create(b: &Board, task: NewTask) -> Task {
    b.store.create_task(&b.slug, &task).await.unwrap().task
}

#[actix_rt::test]
async fn a_stop_during_a_round_hands_its_claims_back_without_running_them() {
    let b = board().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let provider = Arc::new(Hangs {
        now: Arc::new(AtomicUsize::new(0)),
        most: Arc::new(AtomicUsize::new(0)),
        calls: Arc::clone(&calls),
    });
    let profiles = Profiles::new().with_profile(profile("p", provider));
    let task = create(&b, NewTask::new("a").with_assignee("p")).await;
    let (entered_tx, entered) = oneshot::channel();
    let (open, open_rx) = oneshot::channel();
    *b.flaky.gate.lock().unwrap() = Some((entered_tx, open_rx));
    let store: Arc<dyn Store> = b.flaky.clone();
    let d = start(&b, store, profiles, fast().with_auto_dispatch(false));
    let mut events = d.subscribe();
    let round = {
        let d = d.clone();
        actix_rt::spawn(async move { d.dispatch_once(None, false).await })
    };
    // The claim is committed and the round is paused inside the store.
    tokio::time::timeout(PATIENCE, entered)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        b.store.task(&b.slug, &task.id).await.unwrap().status,
        TaskStatus::Running
    );
    let stopping = d.stop();
    tokio::pin!(stopping);
    assert!(futures::poll!(&mut stopping).is_pending());
    // Messages are handled in order: once this answers, the stop has been seen.
    let _ = d.running().await;
    let _ = open.send(());
    tokio::time::timeout(PATIENCE, stopping).await.unwrap();
    let _ = round.await;
    let after = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(
        after.status,
        TaskStatus::Ready,
        "the claim made during the stopped round was handed back"
    );
    assert_eq!(after.consecutive_failures, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no worker ran it");
    while let Ok(event) = events.try_recv() {
        assert!(
            !matches!(event, DispatcherEvent::WorkerStarted { .. }),
            "no worker may start after a stop: {event:?}"
        );
    }
    assert!(!d.is_running());
}

#[actix_rt::test]
async fn a_worker_cut_off_from_the_database_stops_before_another_host_takes_over() {
    let b = board().await;
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hangs = Arc::new(Hangs {
        now: Arc::clone(&now),
        most: Arc::clone(&most),
        calls: Arc::new(AtomicUsize::new(0)),
    });
    let task = create(&b, NewTask::new("a").with_assignee("p")).await;
    // Host A: reaches the board through the wrapper; its model hangs.
    let ttl = Duration::from_millis(900);
    let config_a = fast()
        .with_auto_dispatch(false)
        .with_lease_ttl(ttl)
        .with_heartbeat_interval(Duration::from_millis(150));
    let store_a: Arc<dyn Store> = b.flaky.clone();
    let a = start(
        &b,
        store_a,
        Profiles::new().with_profile(profile("p", hangs)),
        config_a,
    );
    let mut a_events = a.subscribe();
    assert_eq!(a.dispatch_once(None, false).await.unwrap().claimed.len(), 1);
    loop {
        let event = tokio::time::timeout(PATIENCE, a_events.recv())
            .await
            .unwrap()
            .unwrap();
        if matches!(event, DispatcherEvent::WorkerStarted { .. }) {
            break;
        }
    }
    // Wait until the hung model call is in flight, then cut host A off.
    while now.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.flaky.down.store(true, Ordering::SeqCst);
    // Host B: the real store and a model that completes; it takes the task once the lease lapses.
    let completes = Arc::new(CountedCompletes {
        now: Arc::clone(&now),
        most: Arc::clone(&most),
        inner: ScriptedProvider::new(completes()),
    });
    let bhost = start(
        &b,
        Arc::clone(&b.store),
        Profiles::new().with_profile(profile("p", completes)),
        fast().with_lease_ttl(ttl),
    );
    let report = loop {
        let event = tokio::time::timeout(PATIENCE, a_events.recv())
            .await
            .unwrap()
            .unwrap();
        if let DispatcherEvent::WorkerFinished(report) = event {
            break report;
        }
    };
    assert_eq!(report.outcome, WorkerOutcome::Stopped);
    assert!(
        report.detail.as_deref().unwrap_or("").contains("lease"),
        "{report:?}"
    );
    tokio::time::timeout(PATIENCE, bhost.wait_idle())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "the two hosts' runs overlapped"
    );
    let after = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(after.status, TaskStatus::Done);
    assert_eq!(
        after.consecutive_failures, 0,
        "losing the lease is no failure"
    );
    let runs = b.store.runs(&b.slug, &task.id).await.unwrap();
    assert_eq!(runs[0].outcome, Some(RunOutcome::Reclaimed));
    bhost.stop().await;
    b.flaky.down.store(false, Ordering::SeqCst);
    a.stop().await;
}

#[actix_rt::test]
async fn a_dispatched_worker_cannot_hand_work_to_a_profile_outside_the_allowlist() {
    let b = board().await;
    // The planner tries to create a child for the powerful profile, then completes.
    let planner = ScriptedProvider::new(
        Script::new()
            .turn(ScriptTurn::tool_call(
                "kanban_create",
                json!({"title": "escalate", "assignee": "root"}),
            ))
            .turn(ScriptTurn::tool_call(
                "kanban_create",
                json!({"title": "fine", "assignee": "helper"}),
            ))
            .turn(ScriptTurn::tool_call(
                "kanban_complete",
                json!({"summary": "planned"}),
            ))
            .turn(ScriptTurn::text("done")),
    );
    let idle_provider = || Arc::new(ScriptedProvider::new(completes())) as Arc<dyn ModelProvider>;
    let profiles = Profiles::new()
        .with_profile(profile("planner", Arc::new(planner)))
        .with_profile(profile("root", idle_provider()))
        .with_profile(profile("helper", idle_provider()));
    let task = create(&b, NewTask::new("plan").with_assignee("planner")).await;
    let config = fast()
        .with_auto_dispatch(false)
        .with_worker_assignable_profiles(vec!["helper".into()]);
    let d = start(&b, Arc::clone(&b.store), profiles, config);
    let mut events = d.subscribe();
    d.dispatch_once(Some(1), false).await.unwrap();
    loop {
        let event = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .unwrap()
            .unwrap();
        if matches!(event, DispatcherEvent::WorkerFinished(_)) {
            break;
        }
    }
    let children = b.store.links(&b.slug, &task.id).await.unwrap().children;
    assert_eq!(children.len(), 1, "only the allowed child was created");
    let child = b.store.task(&b.slug, &children[0]).await.unwrap();
    assert_eq!(child.assignee.as_deref(), Some("helper"));
    d.stop().await;
}

#[actix_rt::test]
async fn a_wide_fan_in_gets_a_capped_first_message_that_names_what_it_left_out() {
    use troupe_kanban::worker_context::{FIELD_CAP, TOTAL_CAP, build_worker_context};
    let b = board().await;
    let mut parents = Vec::new();
    for i in 0..50 {
        let parent = create(&b, NewTask::new(format!("part {i}"))).await;
        let claim = b
            .store
            .claim_task(&b.slug, &parent.id, &ClaimSpec::new(WorkerId::local()))
            .await
            .unwrap();
        let done = Completion {
            summary: Some("s".repeat(FIELD_CAP)),
            result: Some("r".repeat(FIELD_CAP)),
            metadata: Some(json!({"notes": "m".repeat(FIELD_CAP)})),
            worker: Some(claim.lease.worker),
            usage: None,
        };
        b.store.complete(&b.slug, &parent.id, &done).await.unwrap();
        parents.push(parent.id);
    }
    let mut fan_in = NewTask::new("merge");
    for id in &parents {
        fan_in = fan_in.with_parent(id.clone());
    }
    let task = create(&b, fan_in).await;
    b.store
        .attach(
            &b.slug,
            &task.id,
            &NewAttachment {
                filename: "data.csv".into(),
                content_type: "text/csv".into(),
                content: b"a,b\n1,2\n".to_vec(),
                uploaded_by: Some("tester".into()),
            },
        )
        .await
        .unwrap();
    let text = build_worker_context(b.store.as_ref(), &b.slug, &task)
        .await
        .unwrap();
    // Uncapped, the parents alone would take 50 x 3 x 4 KB.
    assert!(
        text.len() <= TOTAL_CAP && text.len() < 50 * FIELD_CAP,
        "{} bytes",
        text.len()
    );
    assert!(text.contains(parents[0].as_str()));
    assert!(
        text.contains("parent result(s) left out") && text.contains(parents[49].as_str()),
        "the note names the parents left out"
    );
    assert!(text.contains("data.csv") && text.contains("8 bytes"));
    assert!(text.ends_with(&format!("for {}.", task.id)));
}

#[actix_rt::test]
async fn rounds_claim_through_claim_next_with_caps_and_the_default_assignee() {
    let b = board().await;
    let provider: Arc<dyn ModelProvider> = Arc::new(ScriptedProvider::new(completes()));
    let profiles = Profiles::new()
        .with_profile(profile("p", Arc::clone(&provider)))
        .with_profile(profile("q", provider))
        .with_default_assignee("p");
    let mut p_tasks = Vec::new();
    for i in 0..3 {
        p_tasks.push(create(&b, NewTask::new(format!("p{i}")).with_assignee("p")).await);
    }
    let q = create(&b, NewTask::new("q").with_assignee("q")).await;
    let loose = create(&b, NewTask::new("loose")).await;
    let ghost = create(&b, NewTask::new("ghost").with_assignee("ghost")).await;
    let store: Arc<dyn Store> = b.flaky.clone();
    let config = fast().with_auto_dispatch(false).with_assignee_cap("p", 2);
    let d = start(&b, store, profiles, config);
    let report = d.dispatch_once(None, false).await.unwrap();
    let claimed: Vec<TaskId> = report.claimed.iter().map(|c| c.task_id.clone()).collect();
    assert_eq!(claimed.len(), 3, "{report:?}");
    assert!(claimed.contains(&q.id), "{report:?}");
    let p_claimed = report.claimed.iter().filter(|c| c.assignee == "p").count();
    assert_eq!(p_claimed, 2, "the cap of p holds: {report:?}");
    assert_eq!(report.skipped_capacity, 2, "{report:?}");
    assert_eq!(
        report.skipped_nonspawnable,
        vec![(ghost.id.clone(), "ghost".to_string())]
    );
    assert_eq!(b.flaky.by_id.load(Ordering::SeqCst), 0, "no claim by id");
    assert!(b.flaky.next.load(Ordering::SeqCst) >= 3);
    // The unassigned task went to the default assignee, so claim_next can see it.
    let loose_now = b.store.task(&b.slug, &loose.id).await.unwrap();
    assert_eq!(loose_now.assignee.as_deref(), Some("p"));
    tokio::time::timeout(PATIENCE, d.wait_idle())
        .await
        .unwrap()
        .unwrap();
    for t in p_tasks.iter().chain([&q, &loose]) {
        assert_eq!(
            b.store.task(&b.slug, &t.id).await.unwrap().status,
            TaskStatus::Done
        );
    }
    d.stop().await;
}

#[actix_rt::test]
async fn a_round_stops_at_the_first_unavailable_error() {
    let b = board().await;
    let provider: Arc<dyn ModelProvider> = Arc::new(ScriptedProvider::new(completes()));
    let profiles = Profiles::new().with_profile(profile("p", provider));
    for i in 0..5 {
        create(&b, NewTask::new(format!("t{i}")).with_assignee("p")).await;
    }
    let store: Arc<dyn Store> = b.flaky.clone();
    let d = start(&b, store, profiles, fast().with_auto_dispatch(false));
    // A first round sets the event cursor.
    b.flaky.down.store(true, Ordering::SeqCst);
    let report = d.dispatch_once(None, false).await.unwrap();
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert!(report.errors[0].contains("unreachable"), "{report:?}");
    assert!(report.claimed.is_empty());
    assert_eq!(b.flaky.next.load(Ordering::SeqCst), 0);
    assert_eq!(b.flaky.by_id.load(Ordering::SeqCst), 0);
    // Once it is back, the next round claims as usual.
    b.flaky.down.store(false, Ordering::SeqCst);
    let report = d.dispatch_once(None, false).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.claimed.len(), 5, "{report:?}");
    tokio::time::timeout(PATIENCE, d.wait_idle())
        .await
        .unwrap()
        .unwrap();
    d.stop().await;
}

#[actix_rt::test]
async fn an_outage_while_a_worker_reads_its_task_hands_it_back_without_a_failure() {
    let b = board().await;
    let provider: Arc<dyn ModelProvider> = Arc::new(ScriptedProvider::new(completes()));
    let profiles = Profiles::new().with_profile(profile("p", provider));
    let task = create(&b, NewTask::new("a").with_assignee("p")).await;
    let (entered_tx, entered) = oneshot::channel();
    let (open, open_rx) = oneshot::channel();
    *b.flaky.gate.lock().unwrap() = Some((entered_tx, open_rx));
    let store: Arc<dyn Store> = b.flaky.clone();
    let config = fast()
        .with_auto_dispatch(false)
        .with_lease_ttl(Duration::from_millis(300));
    let d = start(&b, store, profiles, config);
    let mut events = d.subscribe();
    let round = {
        let d = d.clone();
        actix_rt::spawn(async move { d.dispatch_once(None, false).await })
    };
    // The claim is committed; the database goes away before the worker reads its task.
    tokio::time::timeout(PATIENCE, entered)
        .await
        .unwrap()
        .unwrap();
    b.flaky.down.store(true, Ordering::SeqCst);
    let _ = open.send(());
    let finished = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(DispatcherEvent::WorkerFinished(report)) = events.recv().await {
                return report;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(finished.outcome, WorkerOutcome::Released, "{finished:?}");
    assert!(!finished.gave_up);
    let _ = round.await;
    b.flaky.down.store(false, Ordering::SeqCst);
    let after = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(
        after.consecutive_failures, 0,
        "an outage is not the task's failure"
    );
    // Once the lease is back (it lapses, as the release could not get through), the task runs.
    tokio::time::timeout(PATIENCE, d.wait_idle())
        .await
        .unwrap()
        .unwrap();
    let done = b.store.task(&b.slug, &task.id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert_eq!(done.consecutive_failures, 0);
    d.stop().await;
}
