//! Running one client call as a session runs a model's call: a batch of one entry on the
//! troupe's tool runner, so the hooks (which see `tool_call` and the tool it names, as in a
//! session), the approval rules and their supervisor, the built-in tools' danger checks and
//! confinement, events and traces all apply. The client's cancellation
//! token is the call's token (a cancelled call stops its process); a call that outlasts
//! [`PROGRESS_EVERY`] reports MCP progress while it runs, and stops when that cannot be sent.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use rmcp::Peer;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use troupe_actors::batch_planner::Plan;
use troupe_actors::call::{CallEntry, CallTarget};
use troupe_actors::tool_runner::BatchContext;
use troupe_actors::trace::TraceSpan;
use troupe_tools::{Content, ToolResult, ToolsetView};

use super::Shared;

/// How often a running call reports progress.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Where a call's progress goes: the client's token for this request, and the way back.
pub(super) struct Progress {
    /// The token the client put in the request's `_meta`.
    pub(super) token: ProgressToken,
    /// The client.
    pub(super) peer: Peer<RoleServer>,
}

impl Shared {
    /// Runs `target` (reached through `view`, named `called_as` by the client) for the client
    /// connection `session_id` as a session runs a model's call: one batch of one entry on the
    /// troupe's runner. The call ends when `cancel` fires.
    pub(super) async fn run_call(
        &self,
        session_id: &str,
        view: ToolsetView,
        called_as: &str,
        target: CallTarget,
        cancel: CancellationToken,
        progress: Option<Progress>,
    ) -> ToolResult {
        let call_id = troupe_actors::call::new_id();
        let underlying = target.name().to_string();
        // Each client call is a trace of its own, the tool call's span under it.
        let trace = TraceSpan::start(
            "mcp_serve.call",
            &TraceSpan::default(),
            SpanKind::Server,
            || {
                vec![
                    KeyValue::new("troupe.session_id", session_id.to_string()),
                    KeyValue::new("troupe.tool", underlying.clone()),
                ]
            },
        );
        let ctx = BatchContext {
            session_id: session_id.to_string(),
            agent_path: vec![session_id.to_string()],
            turn_id: call_id.clone(),
            view,
            search: self.search.clone(),
            hooks: self.runtime.troupe().hooks().clone(),
            supervisor: self.supervisor.clone(),
            events: self.events.clone(),
            token: cancel.clone(),
            drain: CancellationToken::new(),
            trace: trace.clone(),
            journal: None,
        };
        let entry = CallEntry {
            index: 0,
            call_id: call_id.clone(),
            model_call_id: call_id,
            tool: called_as.to_string(),
            target,
        };
        let runner = self.runner;
        let running: futures::future::BoxFuture<'static, ToolResult> = Box::pin(async move {
            let mut outcomes = runner
                .run_batch(&ctx, vec![entry], &Plan::one_by_one(1))
                .await;
            match outcomes.pop() {
                Some(outcome) => outcome.result,
                // The runner gives every call its slot; answer plainly if it ever did not.
                None => ToolResult::error("the call was not run; try it again"),
            }
        });
        let result = match progress {
            None => running.await,
            Some(progress) => with_progress(running, &underlying, progress, &cancel).await,
        };
        if result.is_error {
            trace.fail("the call ended with an error");
        }
        trace.end();
        result
    }
}

/// Awaits `running`, telling the client every [`PROGRESS_EVERY`] that `tool` still runs. When
/// progress can no longer be sent the client is gone (an HTTP client that hung up without
/// cancelling), so `cancel` fires and the call stops rather than run on for nobody.
async fn with_progress(
    running: futures::future::BoxFuture<'static, ToolResult>,
    tool: &str,
    progress: Progress,
    cancel: &CancellationToken,
) -> ToolResult {
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    tokio::pin!(running);
    loop {
        tokio::select! {
            result = &mut running => return result,
            _ = ticks.tick() => {
                let seconds = started.elapsed().as_secs_f64().floor();
                let param = ProgressNotificationParam::new(progress.token.clone(), seconds)
                    .with_message(format!("{tool} has run for {seconds:.0} s"));
                if let Err(error) = progress.peer.notify_progress(param).await {
                    tracing::debug!(%error, "could not send progress; stopping the call");
                    cancel.cancel();
                }
            }
        }
    }
}

/// What the client reads: troupe's result as an MCP tool result (an error stays an error).
pub(super) fn to_mcp(result: ToolResult) -> CallToolResult {
    let content: Vec<ContentBlock> = result
        .content
        .into_iter()
        .map(|part| match part {
            Content::Text(text) => ContentBlock::text(text),
            Content::Image { data, mime_type } => ContentBlock::image(data, mime_type),
            Content::Resource {
                uri,
                text: Some(text),
                ..
            } => ContentBlock::embedded_text(uri, text),
            Content::Resource { uri, .. } => ContentBlock::text(format!("[resource {uri}]")),
        })
        .collect();
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    // MCP wants structured content to be an object.
    if let Some(structured @ Value::Object(_)) = result.structured {
        out.structured_content = Some(structured);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_stays_an_error_and_only_objects_are_structured() {
        let out = to_mcp(ToolResult::error("denied by a hook"));
        assert_eq!(out.is_error, Some(true));
        let out = to_mcp(ToolResult::json(json!([1, 2])));
        assert_eq!(out.is_error, Some(false));
        assert!(out.structured_content.is_none());
        let out = to_mcp(ToolResult::json(json!({"a": 1})));
        assert_eq!(out.structured_content, Some(json!({"a": 1})));
    }
}
