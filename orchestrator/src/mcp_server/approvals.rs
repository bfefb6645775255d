//! Approvals of calls made through `troupe mcp serve`. The server holds the troupe's approval
//! subscription, so a flagged call waits for an answer, and answers each request itself:
//! - the client connection that made the call declared elicitation: the person at that client
//!   is asked (MCP `elicitation/create`) and their answer is the verdict;
//! - otherwise, when the server keeps a queue (`--http`, or `--queue` with stdio), the request
//!   waits there for a person (`GET /api/approvals`, `POST /api/approvals/{id}`) until
//!   `approvals.timeout`, after which the supervisor applies `approvals.unattended`;
//! - without a queue nobody can be asked: the call follows `approvals.unattended`, so with the
//!   default `deny` it fails closed with a message saying why and what to do instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::service::ElicitationError;
use rmcp::{Peer, RoleServer, schemars};
use serde::Deserialize;
use troupe_actors::supervisor::{ApprovalChoice, PendingApproval, UnattendedPolicy};
use troupe_tools::sync::lock;

use crate::api::Troupe;

/// The client connections that can ask their person, by the session id their calls carry.
#[derive(Default)]
pub(super) struct Askers {
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
}

impl Askers {
    /// Calls of `session_id` are asked of `peer`'s person from now on.
    pub(super) fn add(&self, session_id: &str, peer: Peer<RoleServer>) {
        lock(&self.peers).insert(session_id.to_string(), peer);
    }

    /// The connection `session_id` is gone.
    pub(super) fn remove(&self, session_id: &str) {
        lock(&self.peers).remove(session_id);
    }

    /// The client that answers for `session_id`, if one can.
    pub(super) fn peer(&self, session_id: &str) -> Option<Peer<RoleServer>> {
        lock(&self.peers).get(session_id).cloned()
    }
}

/// The form a client shows its person: flat, of primitive fields, as elicitation requires.
/// Only this call is decided: a standing "allow" would reach past this connection (the
/// supervisor's allow list is the whole troupe's), so the form offers none.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Answer {
    /// once: run this call; deny: refuse it.
    #[schemars(extend("enum" = ["once", "deny"]))]
    decision: String,
    /// Why, when denying (the caller reads it).
    #[serde(default)]
    reason: String,
}

rmcp::elicit_safe!(Answer);

/// Answers every approval request of the troupe until it closes (see the module doc).
pub(super) async fn answer_all(
    troupe: Troupe,
    askers: Arc<Askers>,
    unattended: UnattendedPolicy,
    timeout: Duration,
    queued: bool,
) {
    let mut requests = match troupe.approvals().await {
        Ok(requests) => requests,
        Err(error) => {
            tracing::warn!(%error, "mcp serve: cannot subscribe to approvals; flagged calls follow approvals.unattended");
            return;
        }
    };
    while let Some(pending) = requests.next().await {
        let troupe = troupe.clone();
        let askers = Arc::clone(&askers);
        tokio::spawn(async move {
            let root = pending
                .agent_path
                .first()
                .cloned()
                .unwrap_or_else(|| pending.session_id.clone());
            let choice = match askers.peer(&root) {
                Some(peer) => ask(&peer, &pending, timeout).await,
                None if queued => {
                    // Left for a person at the queue; the supervisor's timer ends it otherwise.
                    tracing::info!(
                        request = %pending.request_id,
                        tool = %pending.tool,
                        "mcp serve: an approval waits in the queue (GET /api/approvals)"
                    );
                    return;
                }
                None => nobody_to_ask(&pending, unattended),
            };
            if let Err(error) = troupe.answer(&pending.request_id, choice).await {
                tracing::debug!(%error, "mcp serve: the approval could not be answered");
            }
        });
    }
}

/// The verdict when no person can be asked: `approvals.unattended`, told plainly.
fn nobody_to_ask(pending: &PendingApproval, unattended: UnattendedPolicy) -> ApprovalChoice {
    match unattended {
        UnattendedPolicy::Approve => ApprovalChoice::Once,
        UnattendedPolicy::Deny => ApprovalChoice::Deny {
            reason: Some(format!(
                "nobody could be asked: {tool} needs approval ({reason}), this MCP client did \
                 not declare elicitation support, and this `troupe mcp serve` keeps no approval \
                 queue. Use a client that supports elicitation, start the server with `--queue \
                 127.0.0.1:PORT` (or `--http`) so a person answers at /api/approvals, list the \
                 tool under approvals.allowlist in troupe.yaml, or run the work through `troupe \
                 serve`, whose dashboard answers approvals",
                tool = pending.tool,
                reason = pending.reason
            )),
        },
    }
}

/// Asks the client's person about `pending`; anything but a clear yes is a no.
/// A question left unanswered for `timeout` (approvals.timeout) is a no.
async fn ask(
    peer: &Peer<RoleServer>,
    pending: &PendingApproval,
    timeout: Duration,
) -> ApprovalChoice {
    let arguments = serde_json::Value::Object(pending.arguments.clone()).to_string();
    let shown: String = arguments.chars().take(1000).collect();
    let message = format!(
        "troupe asks before running {tool}: {reason}.\nArguments: {shown}\nChoose once (run \
         this call) or deny; you will be asked again next time.",
        tool = pending.tool,
        reason = pending.reason
    );
    let Ok(answer) = tokio::time::timeout(timeout, peer.elicit::<Answer>(message)).await else {
        return deny(
            pending,
            &format!("did not answer within {} s", timeout.as_secs()),
        );
    };
    match answer {
        Ok(Some(Answer { decision, reason })) => match decision.trim() {
            "once" => ApprovalChoice::Once,
            "deny" if !reason.trim().is_empty() => ApprovalChoice::Deny {
                reason: Some(reason),
            },
            "deny" => deny(pending, "denied the call"),
            // Anything the form does not offer ("always", say) is not a yes.
            other => deny(
                pending,
                &format!("answered {:?}, which is not once", visible(other)),
            ),
        },
        Ok(None) | Err(ElicitationError::NoContent) => deny(pending, "gave no answer"),
        Err(ElicitationError::UserDeclined) => deny(pending, "declined"),
        Err(ElicitationError::UserCancelled) => deny(pending, "dismissed the question"),
        Err(error) => {
            tracing::warn!(%error, "mcp serve: asking the client failed; denying");
            deny(pending, "could not be reached")
        }
    }
}

/// At most 40 characters of a client's answer, for a message.
fn visible(answer: &str) -> String {
    answer
        .chars()
        .filter(|c| !c.is_control())
        .take(40)
        .collect()
}

fn deny(pending: &PendingApproval, what: &str) -> ApprovalChoice {
    ApprovalChoice::Deny {
        reason: Some(format!(
            "the person at the MCP client {what} when asked about {}",
            pending.tool
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_form_is_one_elicitation_accepts() {
        let schema = rmcp::schemars::schema_for!(Answer);
        let object = serde_json::to_value(&schema)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap();
        let parsed = rmcp::model::ElicitationSchema::from_json_schema(object);
        assert!(parsed.is_ok(), "{parsed:?}");
        let text = serde_json::to_string(&schema).unwrap();
        assert!(
            text.contains("\"deny\"") && text.contains("\"once\""),
            "{text}"
        );
        // Nothing the server would not honour for this connection alone.
        assert!(
            !text.contains("\"always\"") && !text.contains("\"session\""),
            "{text}"
        );
    }
}
