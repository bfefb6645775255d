//! The fan-out run of `troupe demo`: an orchestrating task on the `default` board of a fresh
//! SQLite store splits its work into child tasks and a final task that waits for them; a
//! dispatcher runs the children in parallel as worker sessions and the final one last, while a
//! live view prints each board event with the status counts. Offline it runs on
//! [`DemoModel`](crate::kanban_demo_model::DemoModel); with `TROUPE_BASE_URL` or
//! `OPENAI_BASE_URL` set, on that server. Called by `cli/demo.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use troupe_actors::model::ModelProvider;
use troupe_actors::session::SessionConfig;
use troupe_kanban::dispatcher::DispatcherConfig;
use troupe_kanban::domain::{
    BoardSlug, Event, EventId, EventKind, NewTask, TaskFilter, TaskId, TaskStatus,
};
use troupe_kanban::profiles::{Profiles, WorkerProfile};

use super::error::{CliError, EXIT_DONE, EXIT_FAILED, report};
use super::kanban_render as render;
use super::status_line::{REDRAW_EVERY, StatusLine, elapsed};
use crate::kanban_api::Kanban;
use crate::kanban_demo_model::{DemoModel, DemoPlan};
use crate::runtime::{Runtime, RuntimeOptions};
use crate::settings::Settings;
use crate::settings::kanban::StoreLocation;

/// How often the demo's dispatcher looks at the event log: short, so the board moves briskly.
const DEMO_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs the fan-out on a board in `store` (a fresh directory under the system's temporary
/// directory when `None`); returns the exit code.
pub(crate) async fn run(store: Option<PathBuf>) -> i32 {
    report("demo", fan_out(store).await.map_err(CliError::failed))
}

async fn fan_out(store: Option<PathBuf>) -> Result<i32, String> {
    let stop = super::kanban::shutdown_signal();
    let plan = DemoPlan::bundled()?;
    let dir = store.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("troupe-demo-{}", uuid::Uuid::new_v4().simple()))
    });
    let kanban = Kanban::open_at(StoreLocation::Sqlite(dir.clone()))
        .await
        .map_err(|e| format!("cannot open the demo board store at {}: {e}", dir.display()))?;
    let board = BoardSlug::default_board();

    let (provider, which) = provider(&plan)?;
    println!(
        "troupe kanban fan-out: board `default` of a SQLite store at {}",
        dir.display()
    );
    println!("model: {which}");

    // The demo's own profiles run on the same runtime as every other command (built-in tools,
    // approvals, hooks); its config is the defaults, so the demo runs the same anywhere, and its
    // workers' sessions are kept beside its board rather than in the user's troupe home.
    let config = Settings::from_value(serde_json::json!({
        "sessions": {"store": dir.join("sessions.db").display().to_string()}
    }))
    .map_err(|e| e.to_string())?;
    let runtime = Runtime::start(
        config,
        RuntimeOptions::default().with_background_delegation(false),
    )
    .await
    .map_err(|e| e.to_string())?;
    runtime.report_notices("troupe demo");
    let outcome = run_board(&runtime, &kanban, &board, &plan, provider, &dir, stop).await;
    runtime.close().await;
    outcome
}

/// Creates the root task and runs the board until it is idle or a signal stops it.
async fn run_board(
    runtime: &Runtime,
    kanban: &Kanban,
    board: &BoardSlug,
    plan: &DemoPlan,
    provider: Arc<dyn ModelProvider>,
    dir: &std::path::Path,
    stop: impl std::future::Future<Output = ()>,
) -> Result<i32, String> {
    let troupe = runtime.troupe();
    let view = runtime
        .view(Some(&["core".to_string()][..]))
        .map_err(|e| e.to_string())?;
    let session = SessionConfig {
        max_iterations: 6,
        ..runtime.session_defaults()
    };
    let profiles = Profiles::new()
        .with_profile(
            WorkerProfile::new("orchestrator", Arc::clone(&provider), view.clone())
                .with_session_config(session.clone())
                .with_system_prompt("You plan work and split it into tasks for other workers."),
        )
        .with_profile(
            WorkerProfile::new("worker", provider, view)
                .with_session_config(session)
                .with_system_prompt("You run one check on this machine with the terminal and report what you found."),
        );

    let root = kanban
        .create_task(
            board,
            &NewTask::new(plan.orchestrator.title.clone())
                .with_body(plan.orchestrator_body())
                .with_assignee("orchestrator")
                .with_created_by("troupe demo"),
        )
        .await
        .map_err(|e| e.to_string())?
        .task;
    println!(
        "{} `{}` goes to the orchestrator; it will create {} checks and a report that waits for them\n",
        root.id,
        root.title,
        plan.checks.len()
    );

    // The orchestrator hands its checks to the `worker` profile, which has the terminal.
    let config = DispatcherConfig::default()
        .with_poll_interval(DEMO_POLL)
        .with_worker_assignable_profiles(vec!["worker".into()]);
    let dispatcher = kanban
        .start_dispatcher(troupe, board.clone(), profiles, config)
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut view = LiveView::new(kanban.clone(), board.clone(), started);
    let mut feed = kanban
        .watch(board.clone(), EventId::START)
        .with_poll_interval(DEMO_POLL);
    let first = dispatcher.dispatch_once(None, false).await;
    if let Err(e) = first {
        return Err(e.to_string());
    }
    let idle = dispatcher.wait_idle();
    tokio::pin!(idle);
    let mut stop = std::pin::pin!(stop);
    let mut interrupted = false;
    // On a terminal, a line says the board is working between events (a real model can take
    // minutes before the first one).
    let mut line = StatusLine::detect();
    let mut ticker = tokio::time::interval(REDRAW_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_event = Instant::now();
    loop {
        tokio::select! {
            event = feed.next() => {
                line.clear();
                last_event = Instant::now();
                match event {
                    Ok(event) => view.show(&event).await,
                    Err(e) => eprintln!("troupe demo: cannot read the board's events: {e}"),
                }
            }
            _ = ticker.tick(), if line.enabled() => {
                let running = view.running();
                let text = if running == 0 {
                    "waiting for the board's next event".to_string()
                } else {
                    format!("{running} task{} running", if running == 1 { "" } else { "s" })
                };
                line.show(&text, &format!("{} since the last event", elapsed(last_event.elapsed())));
            }
            done = &mut idle => {
                if let Err(e) = done {
                    eprintln!("troupe demo: {e}");
                }
                break;
            }
            () = &mut stop => {
                interrupted = true;
                break;
            }
        }
    }
    line.clear();
    // What happened just before the board went idle is already stored: show it too.
    while let Ok(Some(event)) = feed.try_next().await {
        view.show(&event).await;
    }
    dispatcher.stop().await;
    if interrupted {
        println!("\nstopped; the board keeps its state at {}", dir.display());
        return Ok(130);
    }
    summary(kanban, board, &root.id, &view, dir).await
}

/// The model both profiles use: the environment's server (read the way every command reads
/// it), else the bundled demo model.
fn provider(plan: &DemoPlan) -> Result<(Arc<dyn ModelProvider>, String), String> {
    match crate::settings::ModelSection::default().provider(&crate::settings::TroupeHome::from_env())
        .map_err(|e| e.to_string())?
    {
        Some(provider) => {
            let which = format!("{} (from the environment)", provider.describe());
            Ok((provider, which))
        }
        None => Ok((
            Arc::new(DemoModel::new(plan.clone())),
            "no model endpoint in the environment (TROUPE_BASE_URL), so the bundled demo model answers".into(),
        )),
    }
}

/// Prints board events as they come, each with the status counts after it.
struct LiveView {
    kanban: Kanban,
    board: BoardSlug,
    started: Instant,
    titles: HashMap<TaskId, String>,
    /// Each task's status as the events so far tell it, so the counts printed with an event
    /// are those right after it, even when the view is catching up.
    statuses: HashMap<TaskId, TaskStatus>,
    /// The most tasks seen running at once.
    peak: usize,
}

impl LiveView {
    fn new(kanban: Kanban, board: BoardSlug, started: Instant) -> LiveView {
        LiveView {
            kanban,
            board,
            started,
            titles: HashMap::new(),
            statuses: HashMap::new(),
            peak: 0,
        }
    }

    /// Tasks running as the events so far tell it.
    fn running(&self) -> usize {
        self.statuses
            .values()
            .filter(|s| **s == TaskStatus::Running)
            .count()
    }

    async fn title(&mut self, id: &TaskId) -> String {
        if let Some(t) = self.titles.get(id) {
            return t.clone();
        }
        let title = match self.kanban.task(&self.board, id).await {
            Ok(task) => task.title,
            Err(_) => String::new(),
        };
        self.titles.insert(id.clone(), title.clone());
        title
    }

    async fn show(&mut self, event: &Event) {
        let Some(id) = event.task_id.clone() else {
            return;
        };
        let named = |key: &str| {
            event
                .payload
                .get(key)
                .and_then(|v| v.as_str())
                .and_then(|raw| TaskStatus::ALL.into_iter().find(|s| s.as_str() == raw))
        };
        let status = match event.kind {
            EventKind::Created => named("status"),
            EventKind::Promoted => named("to").or(Some(TaskStatus::Ready)),
            EventKind::Claimed => Some(TaskStatus::Running),
            EventKind::Completed => Some(TaskStatus::Done),
            EventKind::Blocked | EventKind::GaveUp => Some(TaskStatus::Blocked),
            EventKind::DependencyWait => Some(TaskStatus::Todo),
            EventKind::Archived => Some(TaskStatus::Archived),
            EventKind::Reclaimed
            | EventKind::Crashed
            | EventKind::TimedOut
            | EventKind::ProtocolViolation
            | EventKind::Unblocked => Some(TaskStatus::Ready),
            _ => None,
        };
        let Some(status) = status else { return };
        self.statuses.insert(id.clone(), status);
        let running = self.running();
        self.peak = self.peak.max(running);
        let mark = match event.kind {
            EventKind::Created => "+",
            EventKind::Promoted => "↑",
            EventKind::Claimed => "▶",
            EventKind::Completed => "✓",
            EventKind::Blocked | EventKind::GaveUp => "✗",
            _ => "!",
        };
        let title = self.title(&id).await;
        let counts = TaskStatus::ALL
            .iter()
            .filter_map(|s| {
                let n = self.statuses.values().filter(|v| *v == s).count();
                (n > 0).then(|| format!("{s} {n}"))
            })
            .collect::<Vec<_>>()
            .join(" · ");
        println!(
            "[{:>6}] {mark} {:<10} {id}  {:<34} | {counts}",
            render::seconds(self.started.elapsed().as_millis() as i64),
            event.kind.as_str(),
            render::clip(&title, 34),
        );
    }
}

async fn summary(
    kanban: &Kanban,
    board: &BoardSlug,
    root: &TaskId,
    view: &LiveView,
    dir: &std::path::Path,
) -> Result<i32, String> {
    let tasks = kanban
        .list(board, &TaskFilter::default())
        .await
        .map_err(|e| e.to_string())?;
    println!("\n{}", render::task_table(&tasks));
    // The report is the task that waits for the most others.
    let mut report = None;
    let mut most = 0;
    for task in tasks.iter().filter(|t| t.id != *root) {
        let parents = kanban
            .store()
            .links(board, &task.id)
            .await
            .map_err(|e| e.to_string())?
            .parents
            .len();
        if parents > most {
            most = parents;
            report = Some(task);
        }
    }
    let done = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Done)
        .count();
    println!(
        "{done} of {} tasks done in {}; at most {} ran at once",
        tasks.len(),
        render::seconds(view.started.elapsed().as_millis() as i64),
        view.peak
    );
    let code = match report {
        Some(task) if task.status == TaskStatus::Done => {
            println!(
                "\n{} `{}`:\n{}",
                task.id,
                task.title,
                task.result.as_deref().unwrap_or("(no result)")
            );
            EXIT_DONE
        }
        Some(task) => {
            println!(
                "\nthe report task {} ended {}, not done",
                task.id, task.status
            );
            EXIT_FAILED
        }
        None => {
            println!("\nno report task was created; the orchestrator did not finish its plan");
            EXIT_FAILED
        }
    };
    println!(
        "\nlook around: troupe kanban --store {} list   (or show <id>, runs <id>, stats, watch --since 0 --once)",
        dir.display()
    );
    Ok(code)
}
