//! `troupe kanban dispatch` and `troupe kanban worker`: the process that starts the runtime,
//! runs a dispatcher on the board and reports its workers as they start and end.

use troupe_kanban::dispatcher::{DispatchReport, DispatcherEvent, DispatcherHandle};
use troupe_kanban::domain::TaskId;

use super::render;
use super::{Ctx, DispatchArgs, Failure, Outcome, WorkerArgs, shutdown_signal, to_json};
use crate::api::Troupe;
use crate::runtime::{Runtime, RuntimeOptions};
use crate::settings::Settings;

/// The pieces a process needs to run workers: the runtime (tools, MCP servers, troupe) and the
/// profiles it runs.
pub(crate) struct Engine {
    pub(crate) runtime: Runtime,
    pub(crate) troupe: Troupe,
    pub(crate) profiles: troupe_kanban::profiles::Profiles,
}

impl Engine {
    /// Starts the runtime of troupe.yaml (workers are unattended, so approval requests follow
    /// `approvals.unattended`) and builds the profiles of the settings.
    pub(crate) async fn start(
        config: &Settings,
        only: Option<&[String]>,
    ) -> Result<Engine, Failure> {
        // Workers' tasks end with their turn: their delegations wait for their results.
        let runtime = Runtime::start(
            config.clone(),
            RuntimeOptions::default().with_background_delegation(false),
        )
        .await?;
        runtime.report_notices("troupe kanban");
        let profiles = match runtime.worker_profiles(only) {
            Ok(profiles) => profiles,
            Err(e) => {
                runtime.close().await;
                return Err(e.into());
            }
        };
        Ok(Engine {
            troupe: runtime.troupe().clone(),
            runtime,
            profiles,
        })
    }

    /// Refuses to go on without a profile: nothing could run the claimed tasks.
    fn require_profiles(&self) -> Result<(), Failure> {
        if self.profiles.is_empty() {
            return Err(Failure::usage(format!(
                "no worker profiles, so no task can run: {NO_PROFILES_HINT}"
            )));
        }
        Ok(())
    }
}

/// How to add a profile, for messages about having none.
const NO_PROFILES_HINT: &str = "add a profiles: section to troupe.yaml, such as\n  profiles:\n    coder: {base_url: http://127.0.0.1:8080/v1, model: qwen, toolsets: [core]}";

pub(super) async fn dispatch(ctx: &Ctx, a: DispatchArgs) -> Outcome {
    if a.max == Some(0) {
        return Err(Failure::usage(
            "--max must be at least 1; leave it out to claim as many as the budgets allow",
        ));
    }
    let mut settings = ctx.kanban.settings().clone();
    if let Some(limit) = a.failure_limit {
        if limit == 0 {
            return Err(Failure::usage(
                "--failure-limit must be at least 1 (the failed runs a task may have before it is given up)",
            ));
        }
        settings.failure_limit = limit;
    }
    let stop = shutdown_signal();
    let engine = Engine::start(&ctx.config, None).await?;
    // A dry run claims nothing, so it works without profiles: every ready task is then
    // reported as having no runnable profile.
    if !a.dry_run
        && let Err(e) = engine.require_profiles()
    {
        engine.runtime.close().await;
        return Err(e);
    }
    let config = settings.dispatcher_config().with_auto_dispatch(false);
    let dispatcher = ctx
        .kanban
        .start_dispatcher(
            &engine.troupe,
            ctx.board.clone(),
            engine.profiles.clone(),
            config,
        )
        .await
        .map_err(|e| Failure::failed(e.to_string()))?;
    let mut events = dispatcher.subscribe();
    let outcome = async {
        let report = dispatcher
            .dispatch_once(a.max, a.dry_run)
            .await
            .map_err(|e| Failure::failed(e.to_string()))?;
        if a.json {
            println!("{}", to_json(&report));
        } else {
            print_report(&report, &engine.profiles);
        }
        if a.dry_run || report.claimed.is_empty() {
            return Ok(());
        }
        if a.max.is_some() {
            // `--max N` bounds the whole run: wait for the tasks this round claimed and claim
            // nothing more (automatic rounds are off, so nothing else is started).
            return wait_for_claimed(&dispatcher, &report, &mut events, a.json, stop).await;
        }
        // Run what was claimed (and what it makes ready) until the board is idle, with a line
        // per worker as it starts and ends.
        let idle = dispatcher.wait_idle();
        tokio::pin!(idle);
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                done = &mut idle => return done.map_err(|e| Failure::failed(e.to_string())),
                Ok(event) = events.recv() => if !a.json { progress_line(&event) },
                () = &mut stop => {
                    eprintln!("stopping: running tasks are handed back to the board");
                    return Ok(());
                }
            }
        }
    }
    .await;
    dispatcher.stop().await;
    engine.runtime.close().await;
    outcome
}

/// Waits until every worker `report` started has ended (or a stop signal), printing a line
/// per worker event unless `json`.
async fn wait_for_claimed(
    dispatcher: &DispatcherHandle,
    report: &DispatchReport,
    events: &mut tokio::sync::broadcast::Receiver<DispatcherEvent>,
    json: bool,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), Failure> {
    use tokio::sync::broadcast::error::RecvError;
    let mut waiting: Vec<(troupe_kanban::domain::WorkerId, TaskId)> = report
        .claimed
        .iter()
        .filter_map(|c| c.worker.clone().map(|w| (w, c.task_id.clone())))
        .collect();
    let mut stop = std::pin::pin!(stop);
    while !waiting.is_empty() {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if !json {
                        progress_line(&event);
                    }
                    if let DispatcherEvent::WorkerFinished(done) = &event {
                        waiting.retain(|(worker, _)| *worker != done.worker);
                    }
                }
                // Some events were missed: ask which of ours still run.
                Err(RecvError::Lagged(_)) => {
                    let running = dispatcher
                        .running()
                        .await
                        .map_err(|e| Failure::failed(e.to_string()))?;
                    waiting.retain(|(_, task)| running.contains(task));
                }
                Err(RecvError::Closed) => {
                    return Err(Failure::failed(
                        "the dispatcher ended before its workers reported back",
                    ));
                }
            },
            () = &mut stop => {
                eprintln!("stopping: running tasks are handed back to the board");
                return Ok(());
            }
        }
    }
    Ok(())
}

fn print_report(report: &DispatchReport, profiles: &troupe_kanban::profiles::Profiles) {
    let verb = if report.dry_run {
        "would claim"
    } else {
        "claimed"
    };
    println!(
        "{verb} {} task(s); promoted {}, reclaimed {}",
        report.claimed.len(),
        report.promoted.len(),
        report.reclaimed.len()
    );
    for c in &report.claimed {
        println!(
            "  {}  {:<12} {}",
            c.task_id,
            render::clip(&c.assignee, 60),
            render::clip(&c.title, 60)
        );
    }
    let unassigned = match profiles.default_assignee() {
        Some(name) => format!(
            "it has no assignee, and kanban.default_assignee {name:?} is not a configured profile"
        ),
        None => "it has no assignee and kanban.default_assignee is not set".to_string(),
    };
    for id in &report.skipped_unassigned {
        println!("  {id}  no runnable profile: {unassigned}");
    }
    let known = if profiles.is_empty() {
        "none are configured".to_string()
    } else {
        format!("configured: {}", profiles.names().join(", "))
    };
    for (id, who) in &report.skipped_nonspawnable {
        println!(
            "  {id}  no runnable profile: {who:?} is not a profile this process may run ({known})"
        );
    }
    if report.skipped_capacity > 0 {
        println!(
            "  {} more ready task(s) wait for a free slot",
            report.skipped_capacity
        );
    }
    for e in &report.errors {
        println!("  error: {e}");
    }
    if report.dry_run && profiles.is_empty() {
        println!("no worker profiles, so nothing can be claimed yet: {NO_PROFILES_HINT}");
    }
}

fn progress_line(event: &DispatcherEvent) {
    match event {
        DispatcherEvent::WorkerStarted {
            task_id, assignee, ..
        } => {
            eprintln!("▶ {task_id} started ({})", render::clip(assignee, 60));
        }
        DispatcherEvent::WorkerFinished(r) => {
            let detail = r
                .detail
                .as_deref()
                .map(|d| format!(": {}", render::clip(d, 80)))
                .unwrap_or_default();
            eprintln!("■ {} {}{detail}", r.task_id, r.outcome.as_str());
        }
        DispatcherEvent::RoundFinished(_) => {}
    }
}

pub(super) async fn worker(ctx: &Ctx, a: WorkerArgs) -> Outcome {
    let mut settings = ctx.kanban.settings().clone();
    if let Some(max) = a.max {
        if max == 0 {
            return Err(Failure::usage("--max must be at least 1"));
        }
        settings.max_in_progress = Some(max);
    }
    let stop = shutdown_signal();
    let engine = Engine::start(&ctx.config, a.profiles.as_deref()).await?;
    if let Err(e) = engine.require_profiles() {
        engine.runtime.close().await;
        return Err(e);
    }
    let mut config = settings.dispatcher_config();
    if let Some(only) = &a.profiles {
        config = config.with_dispatch_profiles(only.clone());
    }
    let dispatcher: DispatcherHandle = ctx
        .kanban
        .start_dispatcher(
            &engine.troupe,
            ctx.board.clone(),
            engine.profiles.clone(),
            config,
        )
        .await
        .map_err(|e| Failure::failed(e.to_string()))?;
    eprintln!(
        "worker on board {} of the {}: profiles {}, up to {} at once; SIGINT or SIGTERM stops it",
        ctx.board,
        settings.store.describe(),
        engine.profiles.names().join(", "),
        settings
            .max_in_progress
            .unwrap_or(troupe_kanban::dispatcher::DEFAULT_MAX_IN_PROGRESS)
    );
    let mut events = dispatcher.subscribe();
    // The first round runs at once rather than after the first tick.
    if let Err(e) = dispatcher.dispatch_once(None, false).await {
        eprintln!("the first dispatch round failed ({e}); the worker keeps trying on its own");
    }
    let mut stop = std::pin::pin!(stop);
    let idle = async {
        if a.until_idle {
            dispatcher.wait_idle().await
        } else {
            std::future::pending().await
        }
    };
    tokio::pin!(idle);
    let result = loop {
        tokio::select! {
            Ok(event) = events.recv() => progress_line(&event),
            done = &mut idle => break done.map_err(|e| Failure::failed(e.to_string())),
            () = &mut stop => {
                eprintln!("stopping: no new claims; running tasks are handed back to the board for another worker");
                break Ok(());
            }
        }
    };
    dispatcher.stop().await;
    let stats = dispatcher.stats();
    eprintln!(
        "worker done: {} claimed, {} completed, {} blocked, {} failed",
        stats.claimed, stats.completed, stats.blocked, stats.failed
    );
    engine.runtime.close().await;
    result
}
