//! The HTTP API's one error shape, `{"error": {"code", "message"}}`, and the extractors that
//! turn axum's own rejections (bad JSON, a bad query string, a bad path) into it. Every handler
//! in `http/` returns [`ApiError`]; client mistakes get a 4xx that says what was wrong and what
//! to send instead, and only faults of the server itself are a 5xx (and logged).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;
use troupe_kanban::StoreError;

use crate::api::TroupeError;

/// An error answer: a status, a stable machine-readable code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A short snake_case code clients can match on (`bad_json`, `task_not_found`, ...).
    pub code: &'static str,
    /// What was wrong and what to send instead.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404: the thing named does not exist.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 409: the thing exists but its state does not allow this.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    /// 429: a cap is reached; retry once something was freed.
    pub fn too_many(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
    }

    /// 401: no token, or the wrong one.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 500: the server failed; logged here, since the client can do nothing about it.
    pub fn internal(message: impl Into<String>) -> ApiError {
        let message = message.into();
        tracing::error!(%message, "HTTP API request failed inside the server");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The JSON body this error is sent as.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message}})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        let message = error.to_string();
        match error {
            StoreError::Invalid(_) => ApiError::bad_request("invalid_field", message),
            StoreError::BoardNotFound { .. } => ApiError::not_found("board_not_found", message),
            StoreError::TaskNotFound { .. } => ApiError::not_found("task_not_found", message),
            StoreError::RunNotFound { .. } => ApiError::not_found("run_not_found", message),
            StoreError::AttachmentNotFound { .. } => {
                ApiError::not_found("attachment_not_found", message)
            }
            StoreError::LinkNotFound { .. } => ApiError::not_found("link_not_found", message),
            StoreError::BoardExists { .. } => ApiError::conflict("board_exists", message),
            StoreError::BoardArchived { .. } => ApiError::conflict("board_archived", message),
            StoreError::DefaultBoardProtected { .. } => {
                ApiError::conflict("default_board_protected", message)
            }
            StoreError::BoardNotArchived { .. } => {
                ApiError::conflict("board_not_archived", message)
            }
            StoreError::InvalidTransition { .. } => {
                ApiError::conflict("invalid_transition", message)
            }
            StoreError::ParentsOpen { .. } => ApiError::conflict("parents_open", message),
            StoreError::LeaseNotHeld { .. } => ApiError::conflict("lease_not_held", message),
            StoreError::SelfLink { .. } => ApiError::bad_request("self_link", message),
            StoreError::Cycle { .. } => ApiError::conflict("link_cycle", message),
            StoreError::CrossBoardLink { .. } => ApiError::bad_request("cross_board_link", message),
            StoreError::AttachmentTooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "attachment_too_large",
                message,
            ),
            StoreError::Conflict { .. } => ApiError::conflict("concurrent_change", message),
            StoreError::Schedule(_) => ApiError::bad_request("invalid_schedule", message),
            StoreError::JobNotFound { .. } => ApiError::not_found("schedule_not_found", message),
            StoreError::JobNameTaken { .. } => ApiError::conflict("schedule_name_taken", message),
            StoreError::JobAlreadyFired { .. } => ApiError::conflict("schedule_fired", message),
            StoreError::Busy { .. } | StoreError::Unavailable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                message,
            ),
            _ => ApiError::internal(message),
        }
    }
}

impl From<TroupeError> for ApiError {
    fn from(error: TroupeError) -> ApiError {
        let message = error.to_string();
        match error {
            TroupeError::UnknownSession(_) => ApiError::not_found("session_not_found", message),
            TroupeError::Session(troupe_actors::session::SessionError::Busy(_)) => {
                ApiError::conflict("session_busy", message)
            }
            TroupeError::Session(troupe_actors::session::SessionError::Closed(_)) => {
                ApiError::conflict("session_closed", message)
            }
            TroupeError::UnknownProfile { .. } | TroupeError::Setup(_) => {
                ApiError::bad_request("bad_session", message)
            }
            TroupeError::Closed => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
            }
            _ => ApiError::internal(message),
        }
    }
}

/// A JSON body whose rejection (wrong content type, broken JSON, wrong fields) comes out in
/// our error shape with axum's explanation of what was wrong.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    let detail = rejection.body_text();
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            format!("{detail}; send the body as JSON with `Content-Type: application/json`"),
        ),
        JsonRejection::JsonSyntaxError(_) => ApiError::bad_request(
            "bad_json",
            format!("the body is not valid JSON ({detail}); send one JSON object"),
        ),
        JsonRejection::JsonDataError(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_fields",
            format!("the JSON does not have the expected fields ({detail}); see /openapi.json"),
        ),
        // A body over the size limit, or one that could not be read: axum's status says which.
        _ => ApiError::new(
            rejection.status(),
            "bad_body",
            format!("the body could not be read ({detail})"),
        ),
    }
}

/// Query parameters whose rejection comes out in our error shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(query_rejection(&rejection)),
        }
    }
}

fn query_rejection(rejection: &QueryRejection) -> ApiError {
    ApiError::bad_request(
        "bad_query",
        format!(
            "the query string is wrong ({}); see /openapi.json for the parameters",
            rejection.body_text()
        ),
    )
}

/// Path parameters whose rejection comes out in our error shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(path_rejection(&rejection)),
        }
    }
}

fn path_rejection(rejection: &PathRejection) -> ApiError {
    ApiError::bad_request(
        "bad_path",
        format!("a part of the path is wrong ({})", rejection.body_text()),
    )
}

/// The answer for a path no route serves.
pub async fn route_not_found(uri: axum::http::Uri) -> Response {
    let error = ApiError::not_found(
        "route_not_found",
        format!(
            "nothing is served at {}; GET /openapi.json lists every route",
            uri.path()
        ),
    );
    in_shape_of(&uri, error)
}

/// The answer for a known path asked with a method it does not take.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let error = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {method}; GET /openapi.json lists the methods of each route",
            uri.path()
        ),
    );
    in_shape_of(&uri, error)
}

/// `error` in the shape the path's clients read: OpenAI's under `/v1/`, troupe's elsewhere.
fn in_shape_of(uri: &axum::http::Uri, error: ApiError) -> Response {
    if uri.path().starts_with("/v1/") {
        return super::openai::errors::OpenAiError::from(error).into_response();
    }
    error.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_kanban::{BoardSlug, TaskId, TaskStatus};

    #[test]
    fn store_errors_map_to_client_statuses() {
        let board = BoardSlug::default_board();
        let missing = ApiError::from(StoreError::TaskNotFound {
            board,
            id: TaskId::generate(),
        });
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(missing.code, "task_not_found");
        let transition = ApiError::from(StoreError::InvalidTransition {
            task: TaskId::generate(),
            status: TaskStatus::Done,
            action: "blocked",
            allowed: "running or ready",
        });
        assert_eq!(transition.status, StatusCode::CONFLICT);
        assert!(transition.message.contains("only running or ready"));
        let body = transition.body();
        assert_eq!(body["error"]["code"], "invalid_transition");
    }

    #[test]
    fn unknown_session_is_404() {
        let error = ApiError::from(TroupeError::UnknownSession("s1".into()));
        assert_eq!(error.status, StatusCode::NOT_FOUND);
        assert!(error.message.contains("s1"));
    }
}
