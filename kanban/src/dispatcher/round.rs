//! One dispatcher round, as plain async work over a [`Store`]: read the board's new events,
//! reclaim lapsed leases, promote, and claim ready tasks within the budgets
//! ([`run_round`]). The [`Dispatcher`](super::Dispatcher) actor decides when a round runs and
//! starts the workers for its claims; this module decides what a round does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::dispatcher_config::DispatcherConfig;
use crate::domain::{
    BoardSlug, Event, EventId, EventKind, TaskFilter, TaskId, TaskSort, TaskStatus, WorkerId,
};
use crate::profiles::{Profiles, Unrunnable, WorkerProfile};
use crate::reports::{ClaimedTask, DispatchReport};
use crate::store::{Claim, ClaimSpec, Store, StoreError};

use super::{EVENT_PAGE, RoundKind};

/// Most claims one store call takes together: a bigger batch holds the board's write lock
/// longer for little more gain.
const CLAIM_BATCH: usize = 32;

/// Event kinds after which a running worker no longer holds its task.
pub(super) fn ends_a_run(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Archived
            | EventKind::Blocked
            | EventKind::DependencyWait
            | EventKind::BlockLoopDetected
            | EventKind::Reclaimed
            | EventKind::Completed
            | EventKind::ReviewRequested
            | EventKind::GaveUp
    )
}

/// Event kinds that may make work ready or free a slot; other events need no round.
pub(super) fn may_free_work(kind: EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Heartbeat
            | EventKind::ClaimExtended
            | EventKind::Commented
            | EventKind::Attached
            | EventKind::AttachmentRemoved
            | EventKind::Claimed
            | EventKind::Edited
            | EventKind::Reprioritized
    )
}

pub(super) struct RoundInput {
    pub(super) store: Arc<dyn Store>,
    pub(super) board: BoardSlug,
    pub(super) profiles: Arc<Profiles>,
    pub(super) config: DispatcherConfig,
    pub(super) cursor: Option<EventId>,
    pub(super) kind: RoundKind,
    pub(super) claiming: bool,
    pub(super) budget: usize,
    pub(super) per_assignee: HashMap<String, usize>,
    pub(super) cooling: std::collections::HashSet<TaskId>,
    /// Tasks a worker of this dispatcher still runs (or is being stopped on): not claimed
    /// again until that worker has ended.
    pub(super) busy: std::collections::HashSet<TaskId>,
    pub(super) max: Option<usize>,
    pub(super) dry_run: bool,
    pub(super) check_idle: bool,
    /// Whether a full round fires due scheduled jobs first (see `Dispatcher::next_round`).
    pub(super) sweep: bool,
}

pub(super) struct RoundOutput {
    pub(super) cursor: EventId,
    pub(super) events: Vec<Event>,
    /// Lease holders whose lease this round took back.
    pub(super) lapsed: Vec<WorkerId>,
    /// Whether the round went past reading events.
    pub(super) ran: bool,
    pub(super) report: DispatchReport,
    pub(super) claims: Vec<(Claim, Arc<WorkerProfile>, WorkerId)>,
    /// Nothing was claimable and the board has no running task.
    pub(super) idle: bool,
    /// The round saw a full page of ready tasks and filled every slot it was allowed to.
    pub(super) more_ready: bool,
    /// The round stopped at a [`StoreError::Unavailable`]: the database is out of reach.
    pub(super) unavailable: bool,
}

/// The outcome of a round given up after `limit`: treated as an outage. A claim it may have
/// made has no worker; its lease lapses and is taken back without counting a failure.
pub(super) fn hung_round(cursor: Option<EventId>, limit: Duration) -> RoundOutput {
    RoundOutput {
        cursor: cursor.unwrap_or(EventId::START),
        events: Vec::new(),
        lapsed: Vec::new(),
        ran: true,
        report: DispatchReport {
            errors: vec![format!(
                "the round got no answer from the store within {} s and was given up",
                limit.as_secs()
            )],
            ..DispatchReport::default()
        },
        claims: Vec::new(),
        idle: false,
        more_ready: false,
        unavailable: true,
    }
}

/// A round met [`StoreError::Unavailable`] and stopped there: the database is out of reach.
struct Outage;

/// Notes a store error in the report; an outage stops the round (every further call would fail
/// the same way, and hammering a database that is down helps no one).
fn note(output: &mut RoundOutput, what: &str, error: StoreError) -> Result<(), Outage> {
    output.report.errors.push(format!("{what}: {error}"));
    if matches!(error, StoreError::Unavailable { .. }) {
        output.unavailable = true;
        return Err(Outage);
    }
    Ok(())
}

/// One round, off the actor: it touches only the store.
pub(super) async fn run_round(input: RoundInput) -> RoundOutput {
    let report = DispatchReport {
        dry_run: input.dry_run,
        ..DispatchReport::default()
    };
    let store = input.store.as_ref();
    let board = &input.board;
    let mut output = RoundOutput {
        cursor: input.cursor.unwrap_or(EventId::START),
        events: Vec::new(),
        lapsed: Vec::new(),
        ran: false,
        report,
        claims: Vec::new(),
        idle: false,
        more_ready: false,
        unavailable: false,
    };

    // 1. Catch up with the event log.
    let had_cursor = input.cursor.is_some();
    match read_events(store, board, input.cursor).await {
        Ok((cursor, events)) => {
            output.cursor = cursor;
            output.events = events;
        }
        Err(error) => {
            output.ran = true;
            if note(&mut output, "reading events", error).is_err() {
                return output;
            }
        }
    }
    let relevant = !had_cursor || output.events.iter().any(|e| may_free_work(e.kind));
    if input.kind == RoundKind::Wake && !relevant && !input.check_idle && !output.ran {
        return output;
    }
    output.ran = true;

    // 2. Fire due scheduled jobs (full rounds only; a running dispatcher also sweeps every
    // second on its own), then reclaim and promote (not in a dry run: it changes nothing).
    if input.kind == RoundKind::Full && !input.dry_run && input.sweep {
        let swept = crate::schedule::sweep::sweep(store, board).await;
        output.report.scheduled = swept.fired.into_iter().filter_map(|r| r.task_id).collect();
        if let Some(error) = swept.error
            && note(&mut output, "firing scheduled jobs", error).is_err()
        {
            return output;
        }
    }
    if !input.dry_run {
        match store.reclaim_expired(board).await {
            Ok(reclaimed) => {
                for r in reclaimed {
                    output.report.reclaimed.push(r.task.id);
                    output.lapsed.push(r.lapsed.worker);
                }
            }
            Err(error) => {
                if note(&mut output, "reclaiming leases", error).is_err() {
                    return output;
                }
            }
        }
        match store.promote(board).await {
            Ok(promoted) => output.report.promoted = promoted,
            Err(error) => {
                if note(&mut output, "promoting tasks", error).is_err() {
                    return output;
                }
            }
        }
    }

    // 3. Claim within the budgets.
    let mut budget = input.budget;
    if let Some(max) = input.max {
        budget = budget.min(max);
    }
    let mut claimable_left = false;
    if input.claiming {
        match claim_ready(&input, budget, &mut output).await {
            Ok(left) => claimable_left = left,
            Err(Outage) => return output,
        }
    }

    // 4. Idle check, only when someone waits for it.
    if input.check_idle && output.claims.is_empty() && !claimable_left && !output.more_ready {
        match store.stats(board).await {
            Ok(stats) => {
                output.idle = stats.count(TaskStatus::Running) == 0
                    && (stats.count(TaskStatus::Ready) as usize)
                        <= output.report.skipped_unassigned.len()
                            + output.report.skipped_nonspawnable.len();
            }
            Err(error) => {
                if note(&mut output, "reading board stats", error).is_err() {
                    return output;
                }
            }
        }
    }
    output
}

/// The profile that would run `task` here, or why none would (noted in the report).
fn runnable(
    input: &RoundInput,
    task: &crate::domain::Task,
    report: &mut DispatchReport,
) -> Option<Arc<WorkerProfile>> {
    match input.profiles.resolve(task.assignee.as_deref()) {
        Ok(profile) if input.config.allows(&profile.name) => Some(Arc::clone(profile)),
        Ok(profile) => {
            report
                .skipped_nonspawnable
                .push((task.id.clone(), profile.name.clone()));
            None
        }
        Err(Unrunnable::Unassigned) => {
            report.skipped_unassigned.push(task.id.clone());
            None
        }
        Err(Unrunnable::NotSpawnable(name)) => {
            report.skipped_nonspawnable.push((task.id.clone(), name));
            None
        }
    }
}

/// Step 3 of a round: claims ready tasks within `budget` and the per-profile caps. Returns
/// whether claimable work was left for a later round.
///
/// The usual way is [`Store::claim_many`] with the profiles that still have a free slot, which
/// lets dispatchers on several hosts take different tasks instead of racing for the same ones
/// (PostgreSQL skips rows another claimer holds), and fills every free slot in one transaction.
/// Claiming by id is kept for what `claim_many` cannot say: a dry run, and a round where a task this dispatcher must leave alone (its old
/// worker is still stopping, or it is cooling down after a rate limit) is among the ready ones.
async fn claim_ready(
    input: &RoundInput,
    budget: usize,
    output: &mut RoundOutput,
) -> Result<bool, Outage> {
    let store = input.store.as_ref();
    let board = &input.board;
    let page = budget.saturating_mul(4).max(64);
    let filter = TaskFilter {
        statuses: vec![TaskStatus::Ready],
        sort: TaskSort::Priority,
        limit: Some(page),
        ..TaskFilter::default()
    };
    let ready = match store.list_tasks(board, &filter).await {
        Ok(ready) => ready,
        Err(error) => {
            note(output, "listing ready tasks", error)?;
            Vec::new()
        }
    };
    let full_page = ready.len() >= page;
    let held_back = |id: &TaskId| input.busy.contains(id) || input.cooling.contains(id);
    if input.dry_run || ready.iter().any(|t| held_back(&t.id)) {
        return claim_by_id(input, budget, ready, full_page, output).await;
    }

    // Note what cannot run here, and give unassigned tasks to the default assignee so that
    // `claim_many`, which filters by assignee, can see them.
    let mut runnable_page: Vec<(TaskId, String)> = Vec::new();
    let mut to_assign = budget;
    for task in &ready {
        let Some(profile) = runnable(input, task, &mut output.report) else {
            continue;
        };
        if task.assignee.is_none() {
            let used = input.per_assignee.get(&profile.name).copied().unwrap_or(0);
            let capped = input
                .config
                .cap_for(&profile.name)
                .is_some_and(|cap| used >= cap);
            if to_assign == 0 || capped {
                // Left unassigned for now: nothing here could run it this round.
                runnable_page.push((task.id.clone(), profile.name.clone()));
                continue;
            }
            to_assign -= 1;
            if let Err(error) = store
                .assign_task(board, &task.id, Some(&profile.name))
                .await
            {
                note(output, &format!("assigning {}", task.id), error)?;
                continue;
            }
        }
        runnable_page.push((task.id.clone(), profile.name.clone()));
    }

    let mut per_assignee = input.per_assignee.clone();
    let mut budget = budget;
    let mut names: Vec<String> = input.profiles.names();
    names.retain(|name| input.config.allows(name));
    let mut stopped_early = false;
    while budget > 0 {
        let open: Vec<String> = names
            .iter()
            .filter(|name| {
                let used = per_assignee.get(name.as_str()).copied().unwrap_or(0);
                input.config.cap_for(name).is_none_or(|cap| used < cap)
            })
            .cloned()
            .collect();
        if open.is_empty() {
            break;
        }
        // As many claims as can be made with this list of open profiles: each of them could
        // take any one, so no capped profile may get more than it has room for.
        let room = open
            .iter()
            .filter_map(|name| {
                let used = per_assignee.get(name.as_str()).copied().unwrap_or(0);
                input
                    .config
                    .cap_for(name)
                    .map(|cap| cap.saturating_sub(used))
            })
            .min()
            .unwrap_or(budget)
            .min(budget)
            .clamp(1, CLAIM_BATCH);
        let specs: Vec<ClaimSpec> = (0..room)
            .map(|_| {
                ClaimSpec::new(WorkerId::local())
                    .with_ttl(input.config.lease_ttl)
                    .with_assignees(open.clone())
            })
            .collect();
        let claims = match store.claim_many(board, &specs).await {
            Ok(claims) => claims,
            Err(error) => {
                note(output, "claiming the next ready task", error)?;
                stopped_early = true;
                break;
            }
        };
        let exhausted = claims.len() < specs.len();
        for claim in claims {
            let worker = claim.lease.worker.clone();
            let profile = claim
                .task
                .assignee
                .as_deref()
                .and_then(|name| input.profiles.get(name))
                .map(Arc::clone);
            // A task whose old worker here is still ending (it became ready after the listing)
            // is kept: the actor starts its new worker only once the old one has ended. One
            // cooling down after a rate limit is handed back.
            let Some(profile) = profile.filter(|_| !input.cooling.contains(&claim.task.id)) else {
                crate::worker::release(store, board, &claim.task.id, &worker).await;
                stopped_early = true;
                continue;
            };
            output
                .report
                .claimed
                .push(ClaimedTask::made(&claim, &profile.name, &worker));
            *per_assignee.entry(profile.name.clone()).or_default() += 1;
            budget -= 1;
            output.claims.push((claim, profile, worker));
        }
        if exhausted || stopped_early {
            break;
        }
    }
    // What the page held that this round left for lack of a slot.
    let claimed: std::collections::HashSet<&TaskId> =
        output.report.claimed.iter().map(|c| &c.task_id).collect();
    output.report.skipped_capacity = runnable_page
        .iter()
        .filter(|(id, _)| !claimed.contains(id))
        .filter(|(_, name)| {
            let used = per_assignee.get(name.as_str()).copied().unwrap_or(0);
            budget == 0 || input.config.cap_for(name).is_some_and(|cap| used >= cap)
        })
        .count();
    Ok(output.report.skipped_capacity > 0 || stopped_early)
}

/// Claims tasks of `ready` one by one by id, skipping those held back; also the dry run.
async fn claim_by_id(
    input: &RoundInput,
    mut budget: usize,
    ready: Vec<crate::domain::Task>,
    full_page: bool,
    output: &mut RoundOutput,
) -> Result<bool, Outage> {
    let store = input.store.as_ref();
    let board = &input.board;
    let mut claimable_left = false;
    let mut per_assignee = input.per_assignee.clone();
    for task in ready {
        if input.busy.contains(&task.id) {
            // Its lease lapsed here but the old worker has not ended yet: claiming it now
            // would run the task twice at once. The worker's end asks for a new round.
            tracing::debug!(task = %task.id, "deferring a task whose old worker is still stopping");
            claimable_left = true;
            continue;
        }
        if input.cooling.contains(&task.id) {
            output.report.skipped_cooldown.push(task.id.clone());
            claimable_left = true;
            continue;
        }
        let Some(profile) = runnable(input, &task, &mut output.report) else {
            continue;
        };
        let used = per_assignee.get(&profile.name).copied().unwrap_or(0);
        let capped = input
            .config
            .cap_for(&profile.name)
            .is_some_and(|cap| used >= cap);
        if budget == 0 || capped {
            output.report.skipped_capacity += 1;
            claimable_left = true;
            continue;
        }
        if input.dry_run {
            output.report.claimed.push(ClaimedTask {
                task_id: task.id.clone(),
                title: task.title.clone(),
                assignee: profile.name.clone(),
                run_id: None,
                worker: None,
            });
        } else {
            match claim_one(store, board, &task, &profile, &input.config).await {
                Ok(Some((claim, worker))) => {
                    output
                        .report
                        .claimed
                        .push(ClaimedTask::made(&claim, &profile.name, &worker));
                    output.claims.push((claim, Arc::clone(&profile), worker));
                }
                Ok(None) => continue,
                Err(error) => {
                    note(output, &format!("claiming {}", task.id), error)?;
                    continue;
                }
            }
        }
        budget -= 1;
        *per_assignee.entry(profile.name.clone()).or_default() += 1;
    }
    output.more_ready = full_page && budget > 0 && !input.dry_run;
    Ok(claimable_left)
}

/// Reads every event after `cursor`; with no cursor yet, starts at the newest event.
async fn read_events(
    store: &dyn Store,
    board: &BoardSlug,
    cursor: Option<EventId>,
) -> Result<(EventId, Vec<Event>), StoreError> {
    let Some(mut cursor) = cursor else {
        return Ok((store.stats(board).await?.last_event_id, Vec::new()));
    };
    let mut events = Vec::new();
    loop {
        let page = store.events_since(board, cursor, EVENT_PAGE).await?;
        let n = page.len();
        if let Some(last) = page.last() {
            cursor = last.id;
        }
        events.extend(page);
        if n < EVENT_PAGE {
            return Ok((cursor, events));
        }
    }
}

/// Claims one ready task for a fresh worker identity; an unassigned task is first given to
/// the default assignee, so the board shows who runs it. `None` when another dispatcher got
/// there first.
async fn claim_one(
    store: &dyn Store,
    board: &BoardSlug,
    task: &crate::domain::Task,
    profile: &WorkerProfile,
    config: &DispatcherConfig,
) -> Result<Option<(Claim, WorkerId)>, StoreError> {
    if task.assignee.is_none() {
        store
            .assign_task(board, &task.id, Some(&profile.name))
            .await?;
    }
    let worker = WorkerId::local();
    let spec = ClaimSpec::new(worker.clone()).with_ttl(config.lease_ttl);
    match store.claim_task(board, &task.id, &spec).await {
        Ok(claim) => Ok(Some((claim, worker))),
        // Lost the race to another claimer, or a parent reopened: not an error.
        Err(StoreError::InvalidTransition { .. })
        | Err(StoreError::Conflict { .. })
        | Err(StoreError::ParentsOpen { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}
