//! The bearer token every route of the HTTP API needs: where it comes from (`serve.token`, the
//! `TROUPE_SERVE_TOKEN` variable, else a file generated once under the troupe home, mode 0600,
//! but only when the commands troupe runs cannot read that home: otherwise a token made for
//! this run alone, shown once on stderr, so no session can read it and answer its own
//! approvals),
//! the middleware that checks it in constant time, and the CORS layer, closed unless
//! `serve.cors_origins` lists origins. Used by [`super::router`] and `troupe serve`.

use std::path::{Path, PathBuf};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::HttpState;
use super::errors::ApiError;

/// The environment variable that supplies the token when the config does not.
pub const TOKEN_ENV: &str = "TROUPE_SERVE_TOKEN";
/// The environment variable that supplies the dashboard token when the config does not.
pub const DASHBOARD_TOKEN_ENV: &str = "TROUPE_DASHBOARD_TOKEN";

/// What a request's token lets it do, put in the request's extensions by [`require_token`].
/// The API token is the one `/v1` clients hold too, so it reads only the sessions opened over
/// HTTP; the dashboard token, given to people only, reads every session in the store (chat,
/// board workers, subagents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The server's token (`serve.token`): every route, sessions opened over HTTP only.
    Api,
    /// The dashboard token (`serve.dashboard_token`): every route but `/v1`, and every stored
    /// session.
    Dashboard,
}

/// Checks a dashboard token from config or the environment as the API token is checked, and
/// refuses one equal to the API token: the two scopes would be one.
fn check_dashboard_token(
    origin: &'static str,
    raw: &str,
    api_token: &str,
) -> Result<String, TokenError> {
    let token = check(origin, raw)?;
    if constant_time_eq(token.as_bytes(), api_token.as_bytes()) {
        return Err(TokenError::Unusable {
            origin,
            problem: "the dashboard token equals the API token, so every /v1 client could read \
                      every session; pick a different one"
                .into(),
        });
    }
    Ok(token)
}
/// The file, under the troupe home, that keeps a generated token.
pub const TOKEN_FILE: &str = "serve.token";
/// The file, under the troupe home, that keeps a generated dashboard token.
pub const DASHBOARD_TOKEN_FILE: &str = "dashboard.token";
/// Shortest token accepted from config or the environment: shorter ones are easy to guess.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Where the token in use came from, for the startup message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `serve.token` in troupe.yaml.
    Config,
    /// The `TROUPE_SERVE_TOKEN` environment variable.
    Environment,
    /// A token file that already existed.
    File(PathBuf),
    /// A token generated now and written to this file.
    Generated(PathBuf),
    /// A token generated now for this run only and kept in memory: the commands troupe runs
    /// could read a file under the troupe home. `ignored` is a token file that exists there
    /// and was not used, for the same reason.
    Ephemeral {
        /// A token file found under the home and left unused.
        ignored: Option<PathBuf>,
    },
}

/// Why no token could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// A configured token is too short or has characters a header cannot carry.
    #[error("{origin}: {problem}")]
    Unusable {
        /// Where it came from.
        origin: &'static str,
        /// What is wrong and what to use instead.
        problem: String,
    },
    /// The token file exists but cannot be trusted as it is (open to other users, or empty).
    #[error("{problem}")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// The token file could not be read or written.
    #[error("token file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Finds the token: `configured` (from `serve.token`), else `from_env` (the value of
/// [`TOKEN_ENV`], passed in so callers and tests decide), else the token file under `home`,
/// generating it (mode 0600) on first use. The file is read or written only when
/// `commands_cannot_read_home` (the commands troupe runs are confined away from `home`): a file
/// a command could read would let a session answer its own approvals. Otherwise the token is
/// made for this run and kept in memory ([`TokenSource::Ephemeral`]).
pub fn resolve_token(
    configured: Option<&str>,
    from_env: Option<&str>,
    home: &Path,
    commands_cannot_read_home: bool,
) -> Result<(String, TokenSource), TokenError> {
    if let Some(token) = configured {
        return Ok((check("serve.token", token)?, TokenSource::Config));
    }
    if let Some(token) = from_env.filter(|t| !t.trim().is_empty()) {
        return Ok((check(TOKEN_ENV, token)?, TokenSource::Environment));
    }
    token_from_file(home.join(TOKEN_FILE), commands_cannot_read_home)
}

/// The dashboard token, found as [`resolve_token`] finds the API token: `serve.dashboard_token`,
/// else [`DASHBOARD_TOKEN_ENV`], else [`DASHBOARD_TOKEN_FILE`] under `home` (only where the
/// commands troupe runs cannot read it), else one made for this run. It must differ from
/// `api_token`.
pub fn resolve_dashboard_token(
    configured: Option<&str>,
    from_env: Option<&str>,
    home: &Path,
    commands_cannot_read_home: bool,
    api_token: &str,
) -> Result<(String, TokenSource), TokenError> {
    if let Some(token) = configured {
        let token = check_dashboard_token("serve.dashboard_token", token, api_token)?;
        return Ok((token, TokenSource::Config));
    }
    if let Some(token) = from_env.filter(|t| !t.trim().is_empty()) {
        let token = check_dashboard_token(DASHBOARD_TOKEN_ENV, token, api_token)?;
        return Ok((token, TokenSource::Environment));
    }
    let (token, source) =
        token_from_file(home.join(DASHBOARD_TOKEN_FILE), commands_cannot_read_home)?;
    let token = check_dashboard_token("the dashboard token file", &token, api_token)?;
    Ok((token, source))
}

/// A token kept in `path` (read, or generated into it), or one for this run alone when the
/// commands troupe runs could read the file.
fn token_from_file(
    path: PathBuf,
    commands_cannot_read_home: bool,
) -> Result<(String, TokenSource), TokenError> {
    if !commands_cannot_read_home {
        let ignored = path.exists().then_some(path);
        return Ok((generate_token(), TokenSource::Ephemeral { ignored }));
    }
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            // An empty file is not ours to overwrite: someone made it, so ask them.
            if text.trim().is_empty() {
                return Err(TokenError::Unsafe {
                    path: path.clone(),
                    problem: format!(
                        "the token file {} is empty; delete it (troupe then writes a new \
                         token) or write a token of at least {MIN_TOKEN_CHARS} characters into it",
                        path.display()
                    ),
                });
            }
            refuse_shared_file(&path)?;
            let token = check("the token file", &text)?;
            return Ok((token, TokenSource::File(path)));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(TokenError::File { path, source }),
    }
    let token = generate_token();
    write_private(&path, &token).map_err(|source| TokenError::File {
        path: path.clone(),
        source,
    })?;
    Ok((token, TokenSource::Generated(path)))
}

/// Refuses a token file that group or others may read or write: the token would not be a
/// secret any more.
fn refuse_shared_file(path: &Path) -> Result<(), TokenError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|source| TokenError::File {
                path: path.to_path_buf(),
                source,
            })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(TokenError::Unsafe {
                path: path.to_path_buf(),
                problem: format!(
                    "the token file {} has mode {:o}, so other users can read it; run \
                     `chmod 600 {}` (and pick a new token if it may have leaked)",
                    path.display(),
                    mode & 0o777,
                    path.display()
                ),
            });
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// A new random token: 64 hex characters from two v4 UUIDs (244 random bits).
pub fn generate_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn check(origin: &'static str, raw: &str) -> Result<String, TokenError> {
    let token = raw.trim();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(TokenError::Unusable {
            origin,
            problem: format!(
                "the token is {} characters; use at least {MIN_TOKEN_CHARS} (or remove it and \
                 let troupe generate one)",
                token.chars().count()
            ),
        });
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(TokenError::Unusable {
            origin,
            problem: "the token has spaces or non-ASCII characters; use printable ASCII only"
                .into(),
        });
    }
    Ok(token.to_string())
}

/// Writes `text` to a file only its owner can read, creating the parent directory.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    std::io::Write::write_all(&mut file, format!("{text}\n").as_bytes())?;
    file.sync_all()
}

/// Compares two byte strings in time that depends only on their lengths, so a wrong guess
/// says nothing about how many leading characters were right.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// The token a request carries: `Authorization: Bearer <token>`, or, on the WebSocket feed
/// only (browsers cannot set headers there), a `token` query parameter.
fn presented_token(request: &Request) -> Option<String> {
    presented_token_in(request.headers(), request.uri())
}

/// [`presented_token`] from a request's headers and URI (the listener reads them before the
/// router has the request).
pub(crate) fn presented_token_in(headers: &HeaderMap, uri: &axum::http::Uri) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string());
    }
    if uri.path().ends_with(super::FEED_PATH) {
        let query = uri.query()?;
        return query.split('&').find_map(|pair| {
            pair.strip_prefix("token=")
                .map(|t| percent_decode(t).unwrap_or_else(|| t.to_string()))
        });
    }
    None
}

fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = raw.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Middleware: refuses every request without the right token (CORS preflights from allowed
/// origins excepted, since browsers send those without credentials), and marks the others with
/// their [`Scope`].
pub async fn require_token(
    State(state): State<HttpState>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::OPTIONS && allowed_origin(&state, request.headers()).is_some() {
        return next.run(request).await;
    }
    let presented = presented_token(&request);
    let api = presented
        .as_deref()
        .is_some_and(|token| constant_time_eq(token.as_bytes(), state.token.as_bytes()));
    // OpenAI's clients read their own error shape; they hold the API token only.
    if request.uri().path().starts_with("/v1/") {
        if api {
            request.extensions_mut().insert(Scope::Api);
            return next.run(request).await;
        }
        return super::openai::errors::OpenAiError::unauthorized(
            "send the server's token as the API key (`Authorization: Bearer <token>`; troupe \
             serve prints where the token is kept)",
        )
        .into_response();
    }
    let dashboard = presented.as_deref().is_some_and(|token| {
        state
            .dashboard_token
            .as_deref()
            .is_some_and(|d| constant_time_eq(token.as_bytes(), d.as_bytes()))
    });
    match (presented, api, dashboard) {
        (None, _, _) => ApiError::unauthorized(
            "this API needs a token: send `Authorization: Bearer <token>` (troupe serve prints \
             where the token is kept)",
        )
        .into_response(),
        (Some(_), _, true) => {
            request.extensions_mut().insert(Scope::Dashboard);
            next.run(request).await
        }
        (Some(_), true, false) => {
            request.extensions_mut().insert(Scope::Api);
            next.run(request).await
        }
        (Some(_), false, false) => {
            ApiError::unauthorized("the token is wrong; use the one troupe serve was started with")
                .into_response()
        }
    }
}

fn allowed_origin(state: &HttpState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    state
        .cors_origins
        .iter()
        .any(|allowed| allowed == "*" || allowed == text)
        .then(|| origin.clone())
}

/// Middleware: answers CORS preflights and marks answers to allowed origins. With no
/// configured origins nothing is added, so browsers on other origins are refused.
pub async fn cors(State(state): State<HttpState>, request: Request, next: Next) -> Response {
    let origin = allowed_origin(&state, request.headers());
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let Some(origin) = origin else {
        return next.run(request).await;
    };
    let mut response = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    if preflight {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PATCH, DELETE, OPTIONS"),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, last-event-id"),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abc", b"abcdef"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn a_token_is_generated_once_and_kept_private() {
        let home = tempfile::tempdir().unwrap();
        let (first, source) = resolve_token(None, None, home.path(), true).unwrap();
        assert_eq!(first.len(), 64);
        assert!(matches!(source, TokenSource::Generated(_)));
        let (second, source) = resolve_token(None, None, home.path(), true).unwrap();
        assert_eq!(first, second);
        assert!(matches!(source, TokenSource::File(_)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(home.path().join(TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn short_configured_tokens_are_refused_with_a_reason() {
        let home = tempfile::tempdir().unwrap();
        let error = resolve_token(Some("short"), None, home.path(), true).unwrap_err();
        assert!(error.to_string().contains("at least 16"), "{error}");
        let (token, source) =
            resolve_token(Some("  0123456789abcdef0123  "), None, home.path(), false).unwrap();
        assert_eq!(token, "0123456789abcdef0123");
        assert_eq!(source, TokenSource::Config);
    }

    #[test]
    fn an_empty_token_file_is_refused_with_what_to_do() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join(TOKEN_FILE);
        std::fs::write(&path, "  \n").unwrap();
        let error = resolve_token(None, None, home.path(), true).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("is empty"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("delete it"), "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn a_token_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join(TOKEN_FILE);
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = resolve_token(None, None, home.path(), true).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(&format!("chmod 600 {}", path.display())),
            "{text}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (token, source) = resolve_token(None, None, home.path(), true).unwrap();
        assert_eq!(token, "0123456789abcdef0123456789abcdef");
        assert!(matches!(source, TokenSource::File(_)));
    }

    #[test]
    fn no_token_file_is_written_or_read_where_commands_can_read_the_home() {
        let home = tempfile::tempdir().unwrap();
        let (first, source) = resolve_token(None, None, home.path(), false).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(source, TokenSource::Ephemeral { ignored: None });
        assert!(!home.path().join(TOKEN_FILE).exists());
        // A file left from a confined run is not trusted either: a command could read it.
        let path = home.path().join(TOKEN_FILE);
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        let (second, source) = resolve_token(None, None, home.path(), false).unwrap();
        assert_ne!(second, "0123456789abcdef0123456789abcdef");
        assert_ne!(second, first);
        assert_eq!(
            source,
            TokenSource::Ephemeral {
                ignored: Some(path)
            }
        );
        // The variable still wins, and is used as given.
        let (token, source) =
            resolve_token(None, Some("from-the-environment-0123"), home.path(), false).unwrap();
        assert_eq!(token, "from-the-environment-0123");
        assert_eq!(source, TokenSource::Environment);
    }

    #[test]
    fn the_dashboard_token_is_found_like_the_api_token_and_never_equals_it() {
        let home = tempfile::tempdir().unwrap();
        let api = "the-api-token-0123456789abcdef";
        let error = resolve_dashboard_token(Some(api), None, home.path(), true, api).unwrap_err();
        assert!(
            error.to_string().contains("equals the API token"),
            "{error}"
        );
        let error =
            resolve_dashboard_token(None, Some("short"), home.path(), true, api).unwrap_err();
        assert!(error.to_string().contains(DASHBOARD_TOKEN_ENV), "{error}");
        let (token, source) =
            resolve_dashboard_token(None, Some("people-only-0123456789"), home.path(), true, api)
                .unwrap();
        assert_eq!(
            (token.as_str(), source),
            ("people-only-0123456789", TokenSource::Environment)
        );
        // Kept in its own 0600 file where commands cannot read the home, apart from the API's.
        let (first, source) = resolve_dashboard_token(None, None, home.path(), true, api).unwrap();
        assert_eq!(
            source,
            TokenSource::Generated(home.path().join(DASHBOARD_TOKEN_FILE))
        );
        assert!(!home.path().join(TOKEN_FILE).exists());
        let (again, _) = resolve_dashboard_token(None, None, home.path(), true, api).unwrap();
        assert_eq!(first, again);
        // Made for the run where they could.
        let other = tempfile::tempdir().unwrap();
        let (_, source) = resolve_dashboard_token(None, None, other.path(), false, api).unwrap();
        assert_eq!(source, TokenSource::Ephemeral { ignored: None });
        assert!(!other.path().join(DASHBOARD_TOKEN_FILE).exists());
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(percent_decode("%zz"), None);
    }
}
