//! One subagent's life: open its session, drive its turn (with steering, stops and the
//! inactivity timeout), and hand its report back.

use super::*;

/// How driving a child ended.
pub(super) enum Driven {
    /// The turn ended on its own.
    Finished(TurnOutcome),
    /// The parent stopped; the partial outcome, if it came back in time.
    Interrupted(Option<TurnOutcome>),
    /// No sign of life for the limit; the partial outcome, if any.
    TimedOut(Option<TurnOutcome>, Duration),
    /// The child could not be reached.
    Lost(SessionError),
}

pub(super) async fn run_child(
    ctx: &DelegateContext,
    delegation_id: &str,
    view: ToolsetView,
    plan: ChildPlan,
    slot: Option<OwnedSemaphorePermit>,
    cancel: CancellationToken,
) -> Value {
    let started = Instant::now();
    let depth = ctx.depth() + 1;
    let ChildPlan {
        index,
        subagent_id,
        task,
    } = plan;
    ctx.events.send(
        &ctx.parent_id,
        EventKind::SubagentSpawned {
            delegation_id: delegation_id.to_string(),
            subagent_id: subagent_id.clone(),
            task_index: index,
            goal: task.goal.clone(),
            depth,
        },
    );
    let mut report = Report::new(index, &subagent_id);
    // Held until the report is sent, so a queued sibling starts only after this one ended.
    let _slot = match slot {
        Some(slot) => Some(slot),
        None => tokio::select! {
            slot = Arc::clone(&ctx.slots).acquire_owned() => slot.ok(),
            _ = cancel.cancelled() => None,
        },
    };
    if cancel.is_cancelled() {
        report.status("interrupted", "interrupted");
        report.summary = "The parent was stopped before this subagent started.".into();
        return report.finish(ctx, started, None);
    }
    let activity = Arc::new(Activity::new());
    let handle = match open_child(ctx, view, Arc::clone(&activity)).await {
        Ok(handle) => handle,
        Err(error) => {
            report.status("error", "error");
            report.error = Some(format!("The subagent could not be started: {error}"));
            return report.finish(ctx, started, Some(&activity));
        }
    };
    let guard = ChildGuard {
        tracker: Arc::clone(&ctx.tracker),
        subagent_id: subagent_id.clone(),
        session: handle.clone(),
    };
    ctx.tracker.insert(SubagentRecord {
        subagent_id: subagent_id.clone(),
        session: handle.clone(),
        delegation_id: delegation_id.to_string(),
        task_index: index,
        goal: task.goal.clone(),
        started,
        activity: Arc::clone(&activity),
    });
    let watcher = watch_progress(ctx, &handle, &subagent_id, Arc::clone(&activity));
    ctx.events.send(
        &ctx.parent_id,
        EventKind::SubagentStarted {
            subagent_id: subagent_id.clone(),
            child_session_id: handle.id().to_string(),
            task_index: index,
        },
    );
    let child_session_id = handle.id().to_string();
    let subagent = SubagentInfo {
        parent_path: &ctx.parent_path,
        subagent_id: &subagent_id,
        child_session_id: &child_session_id,
        goal: &task.goal,
    };
    ctx.hooks.on_subagent_start(&subagent);
    let timeout = ctx.delegation().child_timeout;
    let mut driven = drive(&handle, opening(&task), &activity, timeout, &cancel).await;
    if let (Some(schema), Driven::Finished(outcome)) = (&task.output_schema, &driven)
        && outcome.status == TurnStatus::Completed
    {
        match check_output(schema, &outcome.text) {
            Ok(value) => report.schema_valid(value),
            Err(errors) => {
                let fix = format!(
                    "Your answer does not match the required JSON Schema: {}. Reply again with only the corrected JSON (no prose, no code fence). The schema:\n{schema}",
                    errors.join("; ")
                );
                let retried = drive(&handle, fix, &activity, timeout, &cancel).await;
                match &retried {
                    Driven::Finished(second) if second.status == TurnStatus::Completed => {
                        match check_output(schema, &second.text) {
                            Ok(value) => report.schema_valid(value),
                            Err(errors) => report.schema_invalid(errors),
                        }
                    }
                    _ => report.schema_invalid(errors),
                }
                driven = retried;
            }
        }
    }
    report.read(&driven, timeout);
    if report.summary.is_empty()
        && let Ok(conversation) = handle.conversation().await
        && let Some(last) = last_words(&conversation)
    {
        report.summary = last;
    }
    // The parent sees how far the child's own plan came, and what it left open.
    let todos = handle.todos();
    if !todos.is_empty() {
        let open: Vec<&str> = todos
            .items
            .iter()
            .filter(|item| {
                matches!(
                    item.status,
                    troupe_tools::todo::TodoStatus::Pending
                        | troupe_tools::todo::TodoStatus::InProgress
                )
            })
            .map(|item| item.content.as_str())
            .collect();
        report.extra.insert(
            "todos".into(),
            serde_json::json!({"summary": todos.summary(), "open": open}),
        );
    }
    ctx.hooks
        .on_subagent_end(&subagent, report.status, &report.summary);
    watcher.abort();
    drop(guard);
    report.child_session_id = Some(handle.id().to_string());
    report.finish(ctx, started, Some(&activity))
}

/// Forgets and closes a child however its driver ends, even when the parent's call is
/// abandoned mid-way (its future dropped).
pub(super) struct ChildGuard {
    tracker: Arc<SubagentTracker>,
    subagent_id: String,
    session: SessionHandle,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.tracker.remove(&self.subagent_id);
        self.session.addr().do_send(CloseSession);
    }
}

/// Opens the child session on the actor system's arbiter (actors cannot start on the pool).
pub(super) async fn open_child(
    ctx: &DelegateContext,
    view: ToolsetView,
    activity: Arc<Activity>,
) -> Result<SessionHandle, SessionError> {
    let limits = ctx.delegation().clone();
    let config = SessionConfig {
        system_prompt: Some(SUBAGENT_SYSTEM_PROMPT.to_string()),
        max_iterations: limits.max_iterations,
        budget: limits.budget,
        // Opened inside the `delegate_task` call, so its session goes under the call's span.
        trace_parent: crate::trace::TraceSpan::current(),
        background_delegation: false,
        // Only the root's answer is shown as it streams.
        stream_text: false,
        report_progress: false,
        // Its transcript is kept under its parent's, in the same journal.
        persist: ctx
            .config
            .persist
            .as_ref()
            .map(|p| crate::journal::Persist {
                journal: std::sync::Arc::clone(&p.journal),
                origin: crate::journal::Origin::new("subagent"),
            }),
        ..ctx.config.clone()
    };
    let params = SessionParams {
        provider: Arc::new(CountingProvider {
            inner: Arc::clone(&ctx.provider),
            activity,
        }),
        view,
        config,
        hooks: ctx.hooks.clone(),
        supervisor: ctx.supervisor.clone(),
        parent: Some(ctx.parent_id.clone()),
        upstream_events: Some(ctx.events.clone()),
    };
    let tracker = Arc::clone(&ctx.tracker);
    let meter = Some(Arc::clone(&ctx.meter));
    let (tx, rx) = oneshot::channel();
    let sent = ctx.arbiter.spawn(async move {
        // Nobody is waiting when the call was abandoned mid-open: close the child here, or
        // it would stay registered with nobody to drive or close it.
        if let Err(Ok(orphan)) =
            tx.send(SessionHandle::open_in_tree(params, tracker, meter, None).await)
        {
            orphan.addr().do_send(CloseSession);
        }
    });
    if !sent {
        return Err(SessionError::Mailbox("the actor system has stopped".into()));
    }
    rx.await
        .map_err(|_| SessionError::Mailbox("the actor system dropped the request".into()))?
}

/// Forwards a child's tool calls to the parent as progress and stamps its activity.
pub(super) fn watch_progress(
    ctx: &DelegateContext,
    handle: &SessionHandle,
    subagent_id: &str,
    activity: Arc<Activity>,
) -> tokio::task::JoinHandle<()> {
    let mut events = handle.events();
    let parent_events = ctx.events.clone();
    let parent_id = ctx.parent_id.clone();
    let child_id = handle.id().to_string();
    let subagent_id = subagent_id.to_string();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            activity.touch();
            if event.session_id != child_id {
                continue;
            }
            if let EventKind::ToolCallStarted {
                underlying_tool, ..
            } = &event.kind
            {
                activity.tool_calls.fetch_add(1, Ordering::Relaxed);
                parent_events.send(
                    &parent_id,
                    EventKind::SubagentToolCall {
                        subagent_id: subagent_id.clone(),
                        child_session_id: child_id.clone(),
                        tool: underlying_tool.clone(),
                    },
                );
            }
        }
    })
}

/// Sends `text` to the child and waits for the turn, stopping the child when the parent is
/// stopped or the child shows no sign of life for `timeout`.
pub(super) async fn drive(
    handle: &SessionHandle,
    text: String,
    activity: &Activity,
    timeout: Option<Duration>,
    cancel: &CancellationToken,
) -> Driven {
    activity.touch();
    let send = handle.send(text);
    tokio::pin!(send);
    loop {
        let wait = timeout
            .map(|limit| limit.saturating_sub(activity.idle_for()))
            .unwrap_or(Duration::MAX);
        tokio::select! {
            answered = &mut send => {
                return match answered {
                    Ok(outcome) => Driven::Finished(outcome),
                    Err(error) => Driven::Lost(error),
                };
            }
            _ = cancel.cancelled() => {
                return Driven::Interrupted(halt(handle, &mut send).await);
            }
            _ = tokio::time::sleep(wait), if timeout.is_some() => {
                let idle = activity.idle_for();
                if timeout.is_some_and(|limit| idle >= limit) {
                    return Driven::TimedOut(halt(handle, &mut send).await, idle);
                }
            }
        }
    }
}

/// Hard-stops the child (and its subtree) and collects the partial outcome; past the grace
/// the child is closed, which ends its turn for sure.
pub(super) async fn halt<F>(
    handle: &SessionHandle,
    send: &mut std::pin::Pin<&mut F>,
) -> Option<TurnOutcome>
where
    F: std::future::Future<Output = Result<TurnOutcome, SessionError>>,
{
    if let Err(error) = handle.stop(true).await {
        tracing::debug!(%error, "subagent could not be stopped through the supervisor");
    }
    match tokio::time::timeout(STOP_GRACE, send.as_mut()).await {
        Ok(Ok(outcome)) => Some(outcome),
        _ => {
            let _ = handle.close().await;
            tokio::time::timeout(STOP_GRACE, send.as_mut())
                .await
                .ok()
                .and_then(Result::ok)
        }
    }
}
