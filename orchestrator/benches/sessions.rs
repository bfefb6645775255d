//! What durable sessions cost, as a plain bench program (`harness = false`):
//! 1. one session on a scripted model, no-op tool calls, with no store, with the SQLite store
//!    and (when `TROUPE_TEST_POSTGRES_URL` names a cluster) with PostgreSQL: the time added per
//!    model turn (one call per round) and per tool call (ten calls per round). Runs alternate, so
//!    a noisy machine slows each kind alike; medians are shown.
//! 2. `troupe sessions list` on 10,000 stored sessions: the store's query for the newest 50,
//!    and for all of them.
//!
//! Run with `cargo bench -p troupe --bench sessions`.

#![allow(clippy::print_stdout, reason = "a bench program prints its figures")]
#![allow(clippy::unwrap_used, reason = "a bench program fails loudly")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use serde_json::json;
use troupe::sessions::{ListQuery, SessionStore};
use troupe_actors::hooks::HookRegistry;
use troupe_actors::journal::{Journal, OpenedSession, Origin, Persist};
use troupe_actors::model::{ChatMessage, Script, ScriptTurn, ScriptedProvider};
use troupe_actors::session::{SessionConfig, SessionHandle, SessionParams};
use troupe_actors::supervisor::{ApprovalConfig, DefaultRules, Supervisor};
use troupe_actors::usage::Spend;
use troupe_tools::{Registry, ToolDef, ToolHints, ToolResult};

fn registry() -> Arc<Registry> {
    Registry::with_tools([
        ToolDef::new("noop", "Does nothing.", json!({"type": "object"}))
            .with_toolset("core")
            .with_hints(ToolHints {
                read_only: true,
                ..ToolHints::default()
            })
            .with_fn(|_, _| Box::pin(async { ToolResult::text("ok") })),
    ])
}

/// One session running `rounds` model turns of `calls` no-op calls each; its wall time.
async fn one_run(store: Option<&SessionStore>, rounds: usize, calls: usize) -> Duration {
    let supervisor =
        Supervisor::new(ApprovalConfig::default(), Arc::new(DefaultRules::default())).start();
    let mut script = Script::new();
    for round in 0..rounds {
        let mut turn = ScriptTurn::default();
        for n in 0..calls {
            turn = turn.with_tool_call("noop", json!({ "round": round, "n": n }));
        }
        script = script.turn(turn);
    }
    script = script.turn(ScriptTurn::text("done"));
    let config = SessionConfig {
        max_iterations: 10_000,
        persist: store.map(|store| Persist {
            journal: Arc::new(store.clone()),
            origin: Origin::new("bench"),
        }),
        ..SessionConfig::default()
    };
    let session = SessionHandle::open(SessionParams {
        provider: Arc::new(ScriptedProvider::new(script)),
        view: registry().view_all(),
        config,
        hooks: HookRegistry::new(),
        supervisor,
        parent: None,
        upstream_events: None,
    })
    .await
    .unwrap();
    let started = Instant::now();
    let outcome = session.send("go").await.unwrap();
    if let Some(store) = store {
        // The last step is on disk too.
        store.flush().await;
    }
    let elapsed = started.elapsed();
    assert_eq!(outcome.calls.len(), rounds * calls);
    let _ = session.close().await;
    elapsed
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

async fn turn_costs(stores: &[(&str, Option<SessionStore>)]) {
    for (rounds, calls, what) in [(100, 1, "per model turn"), (20, 10, "per tool call")] {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); stores.len()];
        for _ in 0..7 {
            for (index, (_, store)) in stores.iter().enumerate() {
                samples[index].push(one_run(store.as_ref(), rounds, calls).await);
            }
        }
        let medians: Vec<Duration> = samples.into_iter().map(median).collect();
        let base = medians[0];
        let unit = if calls == 1 { rounds } else { rounds * calls };
        for ((name, _), median) in stores.iter().zip(&medians) {
            let added = median.as_secs_f64() - base.as_secs_f64();
            println!(
                "{rounds} rounds x {calls} call(s), {name}: {:.2} ms (median of 7); {what}: {:.1} µs, {:+.1} µs against no store",
                median.as_secs_f64() * 1e3,
                median.as_secs_f64() * 1e6 / unit as f64,
                added * 1e6 / unit as f64
            );
        }
    }
}

async fn fill(store: &SessionStore, count: usize) {
    for n in 0..count {
        let id = format!("{n:08}-bench-session");
        store.opened(OpenedSession {
            id: id.clone(),
            agent_path: vec![id.clone()],
            model: "m".into(),
            origin: Origin::new("chat"),
        });
        // Queued at once; the flush below waits for all of them.
        drop(store.step(
            &id,
            0,
            vec![
                ChatMessage::User {
                    content: format!("task number {n}: tidy the build scripts"),
                },
                ChatMessage::Assistant {
                    content: Some(format!("Done with task {n}.")),
                    tool_calls: Vec::new(),
                },
            ],
            Spend::default(),
            &Arc::default(),
        ));
    }
    store.flush().await;
}

async fn list_costs(name: &str, store: &SessionStore) {
    let started = Instant::now();
    fill(store, 10_000).await;
    println!(
        "{name}: wrote 10,000 sessions (2 messages each) in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    for (limit, label) in [(Some(50), "newest 50"), (None, "all 10,000")] {
        let mut samples = Vec::new();
        for _ in 0..21 {
            let started = Instant::now();
            let listed = store
                .list(ListQuery {
                    limit,
                    ..ListQuery::default()
                })
                .await
                .unwrap();
            samples.push(started.elapsed());
            assert_eq!(listed.len(), limit.unwrap_or(10_000));
        }
        println!(
            "{name}: sessions list, {label} of 10,000: {:.2} ms (median of 21)",
            median(samples).as_secs_f64() * 1e3
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let system = actix_rt::System::with_tokio_rt(move || runtime);
    system.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SessionStore::open_sqlite(&dir.path().join("turns.db")).unwrap();
        let mut stores = vec![("no store", None), ("SQLite", Some(sqlite))];
        let cluster = std::env::var("TROUPE_TEST_POSTGRES_URL").ok();
        let mut postgres_list = None;
        if let Some(cluster) = &cluster {
            let db =
                troupe_kanban::store::test_cluster::fresh_database(cluster, "bench_sessions").await;
            stores.push((
                "PostgreSQL",
                Some(SessionStore::connect_postgres(&db.url).await.unwrap()),
            ));
            let db =
                troupe_kanban::store::test_cluster::fresh_database(cluster, "bench_list").await;
            postgres_list = Some(SessionStore::connect_postgres(&db.url).await.unwrap());
        } else {
            println!("(no TROUPE_TEST_POSTGRES_URL: PostgreSQL figures skipped)");
        }
        turn_costs(&stores).await;
        let listing = SessionStore::open_sqlite(&dir.path().join("list.db")).unwrap();
        list_costs("SQLite", &listing).await;
        if let Some(store) = &postgres_list {
            list_costs("PostgreSQL", store).await;
        }
    });
}
