//! Errors of the `/v1` routes in the shape OpenAI's clients read,
//! `{"error": {"message", "type", "param", "code"}}`, and the body extractor that turns a body
//! too large, not JSON, or of the wrong types into one of them.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::super::errors::ApiError;

/// The largest request body the `/v1` routes read (a long conversation sent back whole).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// An error answer of the `/v1` routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What was wrong and what to send instead.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: &'static str,
}

impl OpenAiError {
    fn new(status: StatusCode, kind: &'static str, code: &'static str, message: String) -> Self {
        OpenAiError {
            status,
            message,
            kind,
            param: None,
            code,
        }
    }

    /// 400: the request is wrong.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        OpenAiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            code,
            message.into(),
        )
    }

    /// 400 about one field.
    pub fn invalid_param(
        param: impl Into<String>,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        OpenAiError {
            param: Some(param.into()),
            ..OpenAiError::invalid(code, message)
        }
    }

    /// 404: the model (or the response) named does not exist.
    pub fn not_found(param: &str, code: &'static str, message: impl Into<String>) -> OpenAiError {
        OpenAiError {
            param: Some(param.into()),
            ..OpenAiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                code,
                message.into(),
            )
        }
    }

    /// 401: no token or the wrong one.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        OpenAiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            message.into(),
        )
    }

    /// 429: the session named is working on another request.
    pub fn busy(message: impl Into<String>) -> Self {
        OpenAiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "session_busy",
            message.into(),
        )
    }

    /// 503: the server cannot take another session now.
    pub fn overloaded(message: impl Into<String>) -> Self {
        OpenAiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "server_busy",
            message.into(),
        )
    }

    /// 500: the server failed (logged).
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        tracing::error!(%message, "a /v1 request failed inside the server");
        OpenAiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal",
            message,
        )
    }

    /// The JSON body this error is sent as (also the `error` of a stream that failed).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for OpenAiError {
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

/// The troupe API's errors, in OpenAI's shape, with the same status.
impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let kind = match error.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 | 400 | 409 | 413 | 422 => "invalid_request_error",
            429 => "rate_limit_error",
            _ => "server_error",
        };
        OpenAiError::new(error.status, kind, error.code, error.message)
    }
}

impl From<crate::api::TroupeError> for OpenAiError {
    fn from(error: crate::api::TroupeError) -> Self {
        OpenAiError::from(ApiError::from(error))
    }
}

/// A JSON object body read with OpenAI-shaped errors: 413 past [`MAX_BODY_BYTES`], 400 for
/// text that is not JSON or JSON that is not an object. Its fields are checked by the handler
/// ([`field`] and friends), so a wrong type is answered naming the field.
#[derive(Debug)]
pub struct OpenAiBody(pub Map<String, Value>);

impl<S> FromRequest<S> for OpenAiBody
where
    S: Send + Sync,
{
    type Rejection = OpenAiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES)
            .await
            .map_err(|error| {
                let text = error.to_string();
                if text.contains("length limit") {
                    OpenAiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "invalid_request_error",
                        "request_too_large",
                        format!(
                            "the request body is over {MAX_BODY_BYTES} bytes; send a shorter \
                             conversation (continue a session with the X-Troupe-Session header \
                             and only the new message)"
                        ),
                    )
                } else {
                    OpenAiError::invalid("bad_body", format!("the body could not be read: {text}"))
                }
            })?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(OpenAiBody(map)),
            Ok(_) => Err(OpenAiError::invalid(
                "bad_json",
                "the body must be a JSON object such as {\"model\": \"troupe\", \"messages\": [...]}",
            )),
            Err(e) => Err(OpenAiError::invalid(
                "bad_json",
                format!("the body is not JSON ({e}); send a JSON object"),
            )),
        }
    }
}

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// `true` or `false`.
    Bool,
    /// A number.
    Number,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl Kind {
    fn matches(self, value: &Value) -> bool {
        match self {
            Kind::Str => value.is_string(),
            Kind::Bool => value.is_boolean(),
            Kind::Number => value.is_number(),
            Kind::Array => value.is_array(),
            Kind::Object => value.is_object(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Bool => "true or false",
            Kind::Number => "a number",
            Kind::Array => "an array",
            Kind::Object => "an object",
        }
    }
}

/// Field `name` of `body` when present and not null, refused (400 naming it) when it is not of
/// `kind`. `path` is how the field is named in the error (`messages[2].content`).
pub fn field<'a>(
    body: &'a Map<String, Value>,
    name: &str,
    path: &str,
    kind: Kind,
) -> Result<Option<&'a Value>, OpenAiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) if kind.matches(value) => Ok(Some(value)),
        Some(value) => Err(OpenAiError::invalid_param(
            path,
            "invalid_type",
            format!("`{path}` must be {}, not {}", kind.name(), type_name(value)),
        )),
    }
}

/// [`field`] that must be there.
pub fn required<'a>(
    body: &'a Map<String, Value>,
    name: &str,
    path: &str,
    kind: Kind,
) -> Result<&'a Value, OpenAiError> {
    field(body, name, path, kind)?.ok_or_else(|| {
        OpenAiError::invalid_param(
            path,
            "missing_required_parameter",
            format!("`{path}` is required ({})", kind.name()),
        )
    })
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_openai_shape() {
        let error = OpenAiError::invalid_param("messages", "invalid_type", "wrong");
        assert_eq!(
            error.body(),
            json!({"error": {"message": "wrong", "type": "invalid_request_error",
                             "param": "messages", "code": "invalid_type"}})
        );
        let from_api: OpenAiError = ApiError::too_many("too_many_sessions", "full").into();
        assert_eq!(from_api.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(from_api.kind, "rate_limit_error");
        assert_eq!(from_api.code, "too_many_sessions");
    }

    #[test]
    fn fields_of_the_wrong_type_are_named() {
        let body = json!({"stream": "yes", "model": "troupe"});
        let body = body.as_object().cloned().unwrap_or_default();
        let error = field(&body, "stream", "stream", Kind::Bool).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("stream"));
        assert!(error.message.contains("true or false"), "{}", error.message);
        assert!(field(&body, "model", "model", Kind::Str).unwrap().is_some());
        assert!(
            field(&body, "tools", "tools", Kind::Array)
                .unwrap()
                .is_none()
        );
        let missing = required(&body, "messages", "messages", Kind::Array).unwrap_err();
        assert_eq!(missing.code, "missing_required_parameter");
    }
}
