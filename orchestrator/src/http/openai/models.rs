//! `GET /v1/models`: the models a client may name, one per profile of troupe.yaml
//! (`troupe/<profile>`) and `troupe` for the server's own model, each with its context length.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::super::HttpState;
use super::errors::OpenAiError;

/// The model id of the server's default model (no profile).
pub const DEFAULT_MODEL: &str = "troupe";

/// The prefix of a profile's model id.
pub const PROFILE_PREFIX: &str = "troupe/";

/// What a model id names: the default model (`None`) or a profile.
pub fn resolve(state: &HttpState, model: &str) -> Result<Option<String>, OpenAiError> {
    let model = model.trim();
    if model == DEFAULT_MODEL {
        if state.provider.is_none() {
            return Err(unknown(
                state,
                model,
                "this server has no default model (model.base_url in troupe.yaml)",
            ));
        }
        return Ok(None);
    }
    match model.strip_prefix(PROFILE_PREFIX) {
        Some(profile) if state.troupe.profile(profile).is_some() => Ok(Some(profile.to_string())),
        _ => Err(unknown(state, model, "no such model")),
    }
}

fn unknown(state: &HttpState, model: &str, why: &str) -> OpenAiError {
    let known: Vec<String> = entries(state)
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect();
    OpenAiError::not_found(
        "model",
        "model_not_found",
        format!(
            "the model {model:?} does not exist on this server ({why}); send one of: {} (GET /v1/models lists them)",
            if known.is_empty() {
                "(none: configure a model or a profile in troupe.yaml)".to_string()
            } else {
                known.join(", ")
            }
        ),
    )
}

/// Every model of the server, as `/v1/models` lists them.
fn entries(state: &HttpState) -> Vec<Value> {
    let mut models = Vec::new();
    if state.provider.is_some() {
        let context = state.troupe.session_defaults().context_length;
        models.push(entry(DEFAULT_MODEL, context, None));
    }
    let mut names = state.troupe.profile_names();
    names.sort();
    for name in names {
        if let Some(profile) = state.troupe.profile(&name) {
            models.push(entry(
                &format!("{PROFILE_PREFIX}{name}"),
                profile.session.context_length,
                Some(&name),
            ));
        }
    }
    models
}

fn entry(id: &str, context_length: Option<i64>, profile: Option<&str>) -> Value {
    json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": "troupe",
        "context_length": context_length,
        "troupe_profile": profile,
    })
}

/// Handler of `GET /v1/models`.
pub async fn list(State(state): State<HttpState>) -> Json<Value> {
    Json(json!({"object": "list", "data": entries(&state)}))
}

/// Handler of `GET /v1/models/{model}` (a profile's id holds a slash, so the path is matched
/// whole).
pub async fn show(
    State(state): State<HttpState>,
    Path(model): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    resolve(&state, &model)?;
    entries(&state)
        .into_iter()
        .find(|m| m["id"] == model.trim())
        .map(Json)
        .ok_or_else(|| unknown(&state, &model, "no such model"))
}
