//! Pending approvals, their answers, and `/stop`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use troupe_actors::supervisor::{ApprovalChoice, ApprovalKind, PendingApproval};
use troupe_tools::clarify::Question;

use super::super::HttpState;
use crate::api::Troupe;

use super::super::errors::{ApiError, ApiJson, ApiPath};

/// Handler of `GET /api/approvals`: every pending request, oldest first.
pub async fn all_approvals(State(state): State<HttpState>) -> Result<Json<Value>, ApiError> {
    list_pending(&state.troupe).await
}

/// Every pending request of `troupe`, oldest first, as `GET /api/approvals` answers.
pub(crate) async fn list_pending(troupe: &Troupe) -> Result<Json<Value>, ApiError> {
    let pending = troupe.pending_approvals().await?;
    Ok(Json(json!({ "approvals": pending })))
}

/// Handler of `GET /api/sessions/{id}/approvals`: the session's pending requests (its
/// subagents' included), oldest first.
pub async fn session_approvals(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    state.sessions.get(&id)?;
    let pending: Vec<PendingApproval> = state
        .troupe
        .pending_approvals()
        .await?
        .into_iter()
        .filter(|p| p.session_id == id || p.agent_path.iter().any(|s| s == &id))
        .collect();
    Ok(Json(json!({ "approvals": pending })))
}

/// `POST /api/approvals/{request_id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// `once`, `session`, `always` or `deny`; `answer` for a question (`kind: question`).
    pub choice: String,
    /// With `deny`: why, for the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// With `answer`: the person's answer (a choice's text or number, or their own words when
    /// the question allows them).
    #[serde(default)]
    pub answer: Option<String>,
}

/// Handler of `POST /api/approvals/{request_id}`.
pub async fn answer(
    State(state): State<HttpState>,
    ApiPath(request_id): ApiPath<String>,
    ApiJson(body): ApiJson<AnswerRequest>,
) -> Result<Json<Value>, ApiError> {
    answer_pending(&state.troupe, &request_id, body).await
}

/// Answers `troupe`'s pending request `request_id` with `body`, as
/// `POST /api/approvals/{request_id}` does.
pub(crate) async fn answer_pending(
    troupe: &Troupe,
    request_id: &str,
    body: AnswerRequest,
) -> Result<Json<Value>, ApiError> {
    let choice = match body.choice.trim().to_ascii_lowercase().as_str() {
        "once" => ApprovalChoice::Once,
        "session" => ApprovalChoice::Session,
        "always" => ApprovalChoice::Always,
        "deny" => ApprovalChoice::Deny {
            reason: body.reason.clone(),
        },
        "answer" => question_answer(troupe, request_id, body.answer.as_deref()).await?,
        other => {
            return Err(ApiError::bad_request(
                "bad_choice",
                format!("choice {other:?} is not one of once, session, always, deny, answer"),
            ));
        }
    };
    if body.answer.is_some() && !matches!(choice, ApprovalChoice::Answer { .. }) {
        return Err(ApiError::bad_request(
            "bad_choice",
            "`answer` goes only with choice `answer`",
        ));
    }
    if body.reason.is_some() && !matches!(choice, ApprovalChoice::Deny { .. }) {
        return Err(ApiError::bad_request(
            "bad_choice",
            "`reason` goes only with choice `deny`",
        ));
    }
    if !troupe.answer(request_id, choice).await? {
        return Err(ApiError::not_found(
            "approval_not_pending",
            format!(
                "approval request {request_id} is not pending (already answered, timed out, or \
                 never asked); GET /api/approvals lists the pending ones"
            ),
        ));
    }
    Ok(Json(
        json!({"request_id": request_id, "answered": body.choice.trim().to_ascii_lowercase()}),
    ))
}

/// The answer to a pending question, read against its choices: a choice's number or text, or
/// other words when the question allows them.
async fn question_answer(
    troupe: &Troupe,
    request_id: &str,
    answer: Option<&str>,
) -> Result<ApprovalChoice, ApiError> {
    let pending = troupe.pending_approvals().await?;
    let Some(request) = pending.iter().find(|p| p.request_id == request_id) else {
        return Err(ApiError::not_found(
            "approval_not_pending",
            format!(
                "request {request_id} is not pending (already answered, timed out, or never asked); GET /api/approvals lists the pending ones"
            ),
        ));
    };
    if request.kind != ApprovalKind::Question {
        return Err(ApiError::bad_request(
            "bad_choice",
            "choice `answer` is for questions (kind: question); answer a call with once, session, always or deny",
        ));
    }
    let question =
        Question::parse(&request.arguments).map_err(|e| ApiError::bad_request("bad_choice", e))?;
    let typed = answer.unwrap_or_default();
    match question.read_answer(typed) {
        Some(text) => Ok(ApprovalChoice::Answer { text }),
        None if typed.trim().is_empty() => Err(ApiError::bad_request(
            "bad_choice",
            "choice `answer` needs `answer`: a choice's number or text, or your own words when the question allows them",
        )),
        None => Err(ApiError::bad_request(
            "bad_choice",
            format!(
                "{typed:?} is not one of the choices ({}) and this question takes no other answer",
                question.choices.join(", ")
            ),
        )),
    }
}

/// `POST /api/sessions/{id}/stop` body (optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// `soft` (the default: the running turn ends at the next safe point) or `hard` (the turn
    /// and every descendant's end now).
    #[serde(default)]
    pub mode: Option<String>,
}

/// Handler of `POST /api/sessions/{id}/stop`. The body may be empty (a soft stop).
pub async fn stop(
    State(state): State<HttpState>,
    ApiPath(id): ApiPath<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: StopRequest = if body.iter().all(u8::is_ascii_whitespace) {
        StopRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(
                "bad_json",
                format!("the body is not a stop request ({e}); send {{\"mode\": \"soft\"}} or {{\"mode\": \"hard\"}}"),
            )
        })?
    };
    let hard = match request.mode.as_deref().map(str::trim) {
        None | Some("soft") => false,
        Some("hard") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_stop_mode",
                format!("stop mode {other:?} is neither soft nor hard"),
            ));
        }
    };
    state.sessions.get(&id)?;
    let stopped = state.troupe.stop(&id, hard).await?;
    Ok(Json(json!({
        "session_id": id,
        "mode": if hard { "hard" } else { "soft" },
        "turns_stopped": stopped,
    })))
}
