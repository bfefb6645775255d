//! The `Troupe` handle from a plain `#[tokio::test]` runtime: sessions, events, approvals
//! through the API, stops, and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value, json};
use troupe::actors::call::CallStatus;
use troupe::actors::events::EventKind;
use troupe::actors::model::{Script, ScriptTurn, ScriptedProvider};
use troupe::actors::session::TurnStatus;
use troupe::actors::supervisor::{ApprovalChoice, ApprovalConfig};
use troupe::tools::{CallContext, Registry, ToolDef, ToolHandler, ToolHints, ToolResult};
use troupe::{SessionOptions, Troupe, TroupeConfig, TroupeError};

type Reply = std::pin::Pin<Box<dyn std::future::Future<Output = ToolResult> + Send>>;

/// Waits for its token, counting how many calls are inside.
struct Hang(Arc<AtomicUsize>);

impl ToolHandler for Hang {
    fn call(&self, _arguments: Map<String, Value>, ctx: CallContext) -> Reply {
        let inside = Arc::clone(&self.0);
        Box::pin(async move {
            inside.fetch_add(1, Ordering::SeqCst);
            ctx.cancel.cancelled().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            ToolResult::text("stopped")
        })
    }
}

fn registry(inside: &Arc<AtomicUsize>) -> Arc<Registry> {
    let read_only = ToolHints {
        read_only: true,
        ..ToolHints::default()
    };
    Registry::with_tools([
        ToolDef::new("hang", "Wait until stopped.", json!({"type": "object"}))
            .with_toolset("test")
            .with_hints(read_only)
            .with_handler(Arc::new(Hang(Arc::clone(inside)))),
        ToolDef::new("publish", "Publish.", json!({"type": "object"}))
            .with_toolset("test")
            .with_fn(|_, _| Box::pin(async { ToolResult::text("published") })),
    ])
}

fn assert_shareable<T: Clone + Send + Sync + 'static>() {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_troupe_runs_sessions_answers_approvals_stops_and_closes() {
    assert_shareable::<Troupe>();
    let inside = Arc::new(AtomicUsize::new(0));
    let approvals = ApprovalConfig {
        require_approval: vec!["publish".into()],
        ..ApprovalConfig::default()
    };
    let troupe =
        Troupe::start(TroupeConfig::new(registry(&inside)).with_approvals(approvals)).unwrap();
    let mut requests = troupe.approvals().await.unwrap();
    let mut events = troupe.events();

    let script = Script::new()
        .turn(ScriptTurn::tool_call("publish", json!({})))
        .turn(ScriptTurn::text("published it"));
    let session = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
        .await
        .unwrap();
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.send("publish").await })
    };
    let request = requests.next().await.unwrap();
    assert_eq!(request.agent_path, [session.id().to_string()]);
    assert_eq!(troupe.pending_approvals().await.unwrap().len(), 1);
    assert!(
        troupe
            .answer(&request.request_id, ApprovalChoice::Session)
            .await
            .unwrap()
    );
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);

    let mut saw_finish = false;
    while let Some(event) = events.try_next() {
        if let EventKind::ToolCallFinished { status, .. } = event.kind {
            saw_finish = status == CallStatus::Ok;
        }
    }
    assert!(
        saw_finish,
        "the troupe-wide stream carried the session's events"
    );

    // A second session hangs in a tool until a stop through the API.
    let script = Script::new()
        .turn(ScriptTurn::tool_call("hang", json!({})).with_tool_call("hang", json!({})))
        .turn(ScriptTurn::text("unreachable"));
    let hanging = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
        .await
        .unwrap();
    let turn = {
        let hanging = hanging.clone();
        tokio::spawn(async move { hanging.send("wait").await })
    };
    while inside.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(troupe.stop(hanging.id(), false).await.unwrap(), 1);
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert!(
        outcome
            .calls
            .iter()
            .all(|c| c.status == CallStatus::Interrupted)
    );
    assert_eq!(inside.load(Ordering::SeqCst), 0);

    let report = troupe.close().await;
    assert_eq!(report.sessions_closed, 2);
    assert!(report.clean);
    let after = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(
            Script::new(),
        ))))
        .await;
    assert!(matches!(after, Err(TroupeError::Closed)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_session_is_reopened_by_id_and_its_waiting_call_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let approvals = ApprovalConfig {
        require_approval: vec!["publish".into()],
        ..ApprovalConfig::default()
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let config = |inside: &Arc<AtomicUsize>| {
        let mut config = TroupeConfig::new(registry(inside)).with_approvals(approvals.clone());
        config.sessions = Some(troupe::sessions::SessionStore::open_sqlite(&path).unwrap());
        config
    };
    let script = || {
        Arc::new(ScriptedProvider::new(
            Script::new()
                .turn(ScriptTurn::tool_call("publish", json!({})))
                .turn(ScriptTurn::text("published it")),
        ))
    };
    let troupe = Troupe::start(config(&inside)).unwrap();
    let mut requests = troupe.approvals().await.unwrap();
    let session = troupe
        .open_session(SessionOptions::new(script()))
        .await
        .unwrap();
    let id = session.id().to_string();
    let waiting = {
        let session = session.clone();
        tokio::spawn(async move { session.send("publish").await })
    };
    requests.next().await.unwrap();
    // The process "dies": the troupe goes without closing its sessions.
    drop((requests, session, troupe));
    let _ = waiting.await;

    let troupe = Troupe::start(config(&inside)).unwrap();
    let mut requests = troupe.approvals().await.unwrap();
    let missing = troupe
        .reopen_session("no-such-id", SessionOptions::new(script()))
        .await;
    assert!(matches!(missing, Err(TroupeError::UnknownSession(_))));
    let session = troupe
        .reopen_session(&id[..20], SessionOptions::new(script()))
        .await
        .unwrap();
    assert_eq!(session.id(), id);
    let turn = {
        let session = session.clone();
        tokio::spawn(async move { session.resume_turn().await })
    };
    let request = requests.next().await.unwrap();
    assert_eq!(request.tool, "publish");
    troupe
        .answer(&request.request_id, ApprovalChoice::Once)
        .await
        .unwrap();
    let outcome = turn.await.unwrap().unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.text, "published it");
    assert_eq!(outcome.calls[0].status, CallStatus::Ok);
    let conversation = session.conversation().await.unwrap();
    assert_eq!(conversation.len(), 4, "{conversation:?}");
    troupe.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_whose_arguments_held_a_secret_is_not_asked_again_masked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let approvals = ApprovalConfig {
        require_approval: vec!["publish".into()],
        ..ApprovalConfig::default()
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let config = |inside: &Arc<AtomicUsize>| {
        let mut config = TroupeConfig::new(registry(inside)).with_approvals(approvals.clone());
        config.sessions = Some(troupe::sessions::SessionStore::open_sqlite(&path).unwrap());
        config
    };
    let script = || {
        Arc::new(ScriptedProvider::new(
            Script::new()
                .turn(ScriptTurn::tool_call(
                    "publish",
                    json!({"token": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"}),
                ))
                .turn(ScriptTurn::text("published it")),
        ))
    };
    let troupe = Troupe::start(config(&inside)).unwrap();
    let mut requests = troupe.approvals().await.unwrap();
    let session = troupe
        .open_session(SessionOptions::new(script()))
        .await
        .unwrap();
    let id = session.id().to_string();
    let waiting = {
        let session = session.clone();
        tokio::spawn(async move { session.send("publish").await })
    };
    requests.next().await.unwrap();
    drop((requests, session, troupe));
    let _ = waiting.await;

    let troupe = Troupe::start(config(&inside)).unwrap();
    let session = troupe
        .reopen_session(&id, SessionOptions::new(script()))
        .await
        .unwrap();
    let outcome = session.resume_turn().await.unwrap().unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert!(troupe.pending_approvals().await.unwrap().is_empty());
    let conversation = serde_json::to_string(&session.conversation().await.unwrap()).unwrap();
    assert!(
        conversation.contains("[Not run: publish was waiting for a person's approval"),
        "{conversation}"
    );
    troupe.close().await;
}

/// Counts the calls inside a tool at once, and the most there ever were.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    /// Enters, waits until `all` calls are inside (or a while has passed: the calls may be
    /// running one at a time), and leaves.
    async fn visit(&self, all: usize) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        for _ in 0..100 {
            if self.inside.load(Ordering::SeqCst) >= all {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The arguments of the overlap tools.
#[derive(serde::Deserialize, troupe::schemars::JsonSchema)]
struct Nth {
    /// Which call this is.
    #[allow(dead_code, reason = "read through serde")]
    n: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_written_in_code_run_together_unless_they_ask_to_run_alone() {
    use troupe::tool_fn::tool_fn;
    let free = Arc::new(Overlap::default());
    let alone = Arc::new(Overlap::default());
    let (f, a) = (Arc::clone(&free), Arc::clone(&alone));
    let registry = Registry::with_tools([
        tool_fn("lookup", "Look something up.", move |_: Nth| {
            let f = Arc::clone(&f);
            async move {
                f.visit(8).await;
                "found".to_string()
            }
        }),
        tool_fn("migrate", "Change the database.", move |_: Nth| {
            let a = Arc::clone(&a);
            async move {
                a.visit(3).await;
                "migrated".to_string()
            }
        })
        .exclusive(),
    ]);
    let troupe = Troupe::start(TroupeConfig::new(registry)).unwrap();
    let mut eight = ScriptTurn::default();
    for n in 0..8 {
        eight = eight.with_tool_call("lookup", json!({ "n": n }));
    }
    let mut three = ScriptTurn::default();
    for n in 0..3 {
        three = three.with_tool_call("migrate", json!({ "n": n }));
    }
    let script = Script::new()
        .turn(eight)
        .turn(three)
        .turn(ScriptTurn::text("done"));
    let session = troupe
        .open_session(SessionOptions::new(Arc::new(ScriptedProvider::new(script))))
        .await
        .unwrap();
    let outcome = session.send("go").await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.calls.len(), 11);
    assert!(outcome.calls.iter().all(|c| c.status == CallStatus::Ok));
    assert_eq!(
        free.most.load(Ordering::SeqCst),
        8,
        "eight calls of a tool that declared nothing ran at once"
    );
    assert_eq!(
        alone.most.load(Ordering::SeqCst),
        1,
        "an exclusive tool ran one call at a time"
    );
    troupe.close().await;
}
