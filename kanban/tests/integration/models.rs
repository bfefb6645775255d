//! The model providers the dispatcher tests script: a planner that fans out, and models that
//! hang, count the calls in flight, or are rate limited first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use troupe_actors::model::{
    ChatMessage, FinishReason, ModelError, ModelProvider, ModelRequest, ModelResponse,
    ScriptedProvider, Usage,
};

use crate::support::enter;

/// An orchestrating model: it creates `n` children, then a final task waiting for all of them
/// (reading the children's ids from the tool results), then completes its own task.
pub(crate) struct FanOutPlanner {
    pub(crate) n: usize,
}

impl ModelProvider for FanOutPlanner {
    fn describe(&self) -> String {
        "fan-out planner (test)".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        let n = self.n;
        Box::pin(async move {
            let assistant_turns = request
                .messages
                .iter()
                .filter(|m| matches!(m, ChatMessage::Assistant { .. }))
                .count();
            let created: Vec<String> = request
                .messages
                .iter()
                .filter_map(|m| match m {
                    ChatMessage::Tool { content, .. } => serde_json::from_str::<Value>(content)
                        .ok()
                        .and_then(|v| v["task_id"].as_str().map(String::from)),
                    _ => None,
                })
                .collect();
            let call = |name: &str, args: Value| troupe_actors::model::ToolCallRequest {
                id: format!("call_{}", uuid_like(&args)),
                name: name.into(),
                arguments: args.to_string(),
            };
            let tool_calls = match assistant_turns {
                0 => (0..n)
                    .map(|i| {
                        call(
                            "kanban_create",
                            json!({"title": format!("part {i}"), "assignee": "coder"}),
                        )
                    })
                    .collect(),
                1 => vec![call(
                    "kanban_create",
                    json!({"title": "put it together", "assignee": "coder", "parents": created}),
                )],
                2 => vec![call(
                    "kanban_complete",
                    json!({"summary": format!("split into {n} parts and a final step")}),
                )],
                _ => Vec::new(),
            };
            let finish_reason = if tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            Ok(ModelResponse {
                content: tool_calls.is_empty().then(|| "planned".to_string()),
                tool_calls,
                finish_reason,
                usage: Usage::default(),
            })
        })
    }
}

pub(crate) fn uuid_like(v: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:x}", h.finish())
}

/// A model whose first request never answers (until cancelled); later ones follow a script.
pub(crate) struct HangsFirst {
    pub(crate) calls: AtomicUsize,
    pub(crate) then: ScriptedProvider,
}

impl ModelProvider for HangsFirst {
    fn describe(&self) -> String {
        "hangs first (test)".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Box::pin(async move {
                cancel.cancelled().await;
                Err(ModelError::Cancelled)
            });
        }
        self.then.complete(request, cancel)
    }
}

/// Counts model calls in flight (a call ends when its future finishes or is dropped) and keeps
/// the most seen at once.
pub(crate) struct InFlight {
    pub(crate) inner: Arc<dyn ModelProvider>,
    pub(crate) now: Arc<AtomicUsize>,
    pub(crate) most: Arc<AtomicUsize>,
}

impl ModelProvider for InFlight {
    fn describe(&self) -> String {
        "in-flight counter (test)".into()
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

/// A model that is rate limited on its first request, then follows a script.
pub(crate) struct LimitedFirst {
    pub(crate) calls: AtomicUsize,
    pub(crate) then: ScriptedProvider,
}

impl ModelProvider for LimitedFirst {
    fn describe(&self) -> String {
        "rate limited first (test)".into()
    }

    fn complete(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ModelResponse, ModelError>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return Box::pin(async {
                Err(ModelError::Status {
                    status: 429,
                    body: "slow down".into(),
                })
            });
        }
        self.then.complete(request, cancel)
    }
}
