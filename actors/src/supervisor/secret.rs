//! Secrets a tool asks the person for (sudo's password). They take a route of their own, apart
//! from approvals: only an answerer that can read a secret without showing it (the interactive
//! `troupe chat`, at a masked prompt) subscribes, so the HTTP API, the dashboard and a
//! program's approval stream never see one. The request holds only its prompt; the answer goes
//! straight back to the waiting tool and is never kept, sent as an event or logged.

use actix::prelude::*;
use tokio::sync::{mpsc, oneshot};

use super::Supervisor;
use crate::call::new_id;

/// A secret the person is asked for, as the answerer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRequest {
    /// The id to answer it by.
    pub request_id: String,
    /// The session asking.
    pub session_id: String,
    /// What is asked (`sudo password for: ...`).
    pub prompt: String,
}

/// Asks the person for a secret. Replies `None` at once when no answerer can take secrets;
/// otherwise the request's id and where the answer arrives (`None` in it: declined, timed out
/// or withdrawn).
#[derive(Debug, Message)]
#[rtype(result = "Option<(String, oneshot::Receiver<Option<String>>)>")]
pub struct AskSecret {
    /// The session asking (a root session: subagents never ask).
    pub session_id: String,
    /// What to show the person.
    pub prompt: String,
}

impl Handler<AskSecret> for Supervisor {
    type Result = MessageResult<AskSecret>;

    fn handle(&mut self, msg: AskSecret, ctx: &mut Self::Context) -> Self::Result {
        self.secret_answerers.retain(|tx| !tx.is_closed());
        if self.secret_answerers.is_empty() {
            return MessageResult(None);
        }
        let request = SecretRequest {
            request_id: new_id(),
            session_id: msg.session_id,
            prompt: msg.prompt,
        };
        let request_id = request.request_id.clone();
        self.secret_answerers
            .retain(|tx| tx.send(request.clone()).is_ok());
        let (tx, rx) = oneshot::channel();
        self.secrets.insert(request_id.clone(), tx);
        let timer_id = request_id.clone();
        ctx.run_later(self.config.timeout, move |act, _| {
            if let Some(waiter) = act.secrets.remove(&timer_id) {
                let _ = waiter.send(None);
            }
        });
        MessageResult(Some((request_id, rx)))
    }
}

/// The person's answer to a [`SecretRequest`] (`None`: declined). Replies whether it was still
/// waiting. Its `Debug` never shows the secret.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct AnswerSecret {
    /// The request.
    pub request_id: String,
    /// What the person typed.
    pub secret: Option<String>,
}

impl std::fmt::Debug for AnswerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerSecret")
            .field("request_id", &self.request_id)
            .field("answered", &self.secret.is_some())
            .finish()
    }
}

impl Handler<AnswerSecret> for Supervisor {
    type Result = bool;

    fn handle(&mut self, msg: AnswerSecret, _ctx: &mut Self::Context) -> bool {
        match self.secrets.remove(&msg.request_id) {
            Some(waiter) => waiter.send(msg.secret).is_ok(),
            None => false,
        }
    }
}

/// Withdraws a secret request whose call was stopped.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WithdrawSecret {
    /// The request.
    pub request_id: String,
}

impl Handler<WithdrawSecret> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: WithdrawSecret, _ctx: &mut Self::Context) {
        if let Some(waiter) = self.secrets.remove(&msg.request_id) {
            let _ = waiter.send(None);
        }
    }
}

/// Subscribes an answerer that can read a secret without showing it; it receives every secret
/// request from now on.
#[derive(Debug, Message)]
#[rtype(result = "mpsc::UnboundedReceiver<SecretRequest>")]
pub struct SubscribeSecrets;

impl Handler<SubscribeSecrets> for Supervisor {
    type Result = MessageResult<SubscribeSecrets>;

    fn handle(&mut self, _msg: SubscribeSecrets, _ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = mpsc::unbounded_channel();
        self.secret_answerers.push(tx);
        MessageResult(rx)
    }
}
