//! What the server says it serves: the model ids its `/models` lists, asked once per provider
//! and only when needed. They name the model when troupe.yaml names none (a local server that
//! serves one model), and they key the memory of text tool calls: llama.cpp answers to any
//! model name and echoes it back, so only its listing says which model is really behind it.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::OnceCell;

use super::super::ModelError;

/// How long the listing may take: a server that does not answer quickly is not asked again.
const LISTING_TIMEOUT: Duration = Duration::from_secs(5);

/// The model a request goes to, and the one the server reports for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The name sent in the request.
    pub(crate) requested: String,
    /// The model the server reports serving: its only listed model, else `requested`.
    pub(crate) served: String,
}

/// The listing of one server, fetched once it answers (an empty list: it has no listing).
#[derive(Debug, Default)]
pub(crate) struct ServedModels {
    listing: OnceCell<Vec<String>>,
}

impl ServedModels {
    /// Which model `requested` (empty: none configured) is on the server at `base_url`. With no
    /// name configured the server's only model is used; several, or none listed, is an error
    /// that says what to set. With a name, the listing is asked only to key the memory
    /// (`memory_by_listing`), and the name is sent as it is.
    pub(crate) async fn resolve(
        &self,
        http: &reqwest::Client,
        headers: &HeaderMap,
        base_url: &str,
        requested: &str,
        memory_by_listing: bool,
    ) -> Result<Resolved, ModelError> {
        let requested = requested.trim();
        if !requested.is_empty() && !memory_by_listing {
            return Ok(Resolved {
                requested: requested.to_string(),
                served: requested.to_string(),
            });
        }
        let listing = self
            .listing
            .get_or_try_init(|| fetch(http, headers, base_url))
            .await;
        let listing = match listing {
            Ok(ids) => ids.as_slice(),
            // The request itself says so (and is retried) when a model is named.
            Err(_) if !requested.is_empty() => &[],
            Err(reason) => {
                return Err(ModelError::Unreachable {
                    url: base_url.to_string(),
                    reason: format!(
                        "{reason}; check that the server is running and that base_url is right"
                    ),
                });
            }
        };
        let only = (listing.len() == 1).then(|| listing[0].clone());
        if !requested.is_empty() {
            return Ok(Resolved {
                requested: requested.to_string(),
                served: only.unwrap_or_else(|| requested.to_string()),
            });
        }
        match (only, listing) {
            (Some(id), _) => {
                tracing::info!(model = %id, "no model named in the config; using the server's only model");
                Ok(Resolved {
                    requested: id.clone(),
                    served: id,
                })
            }
            (None, ids) if !ids.is_empty() => {
                let mut shown: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
                if ids.len() > shown.len() {
                    shown.push("…");
                }
                Err(ModelError::Config(format!(
                    "no model is named and the server at {base_url} serves {} models ({}); set model.model in troupe.yaml (or --model, or TROUPE_MODEL) to one of them",
                    ids.len(),
                    shown.join(", ")
                )))
            }
            _ => Err(ModelError::Config(format!(
                "no model is named and the server at {base_url} did not list its models at {}/models; set model.model in troupe.yaml (or --model, or TROUPE_MODEL) to the model it serves",
                base_url.trim_end_matches('/')
            ))),
        }
    }
}

/// The ids `GET {base_url}/models` lists (none when the server has no listing); an error when
/// the server cannot be reached (not remembered: it may be up at the next request).
async fn fetch(
    http: &reqwest::Client,
    headers: &HeaderMap,
    base_url: &str,
) -> Result<Vec<String>, String> {
    let base = base_url.trim().trim_end_matches('/');
    let base = base.strip_suffix("/chat/completions").unwrap_or(base);
    let url = format!("{base}/models");
    let answer = http
        .get(&url)
        .headers(headers.clone())
        .timeout(LISTING_TIMEOUT)
        .send()
        .await;
    let response = match answer {
        Ok(response) if response.status().is_success() => response,
        Ok(response) => {
            tracing::debug!(%url, status = response.status().as_u16(), "the server did not list its models");
            return Ok(Vec::new());
        }
        Err(error) => {
            tracing::debug!(%url, %error, "the server did not list its models");
            return Err(format!("asking {url} for its models: {error}"));
        }
    };
    Ok(response
        .json::<Value>()
        .await
        .map(|body| model_ids(&body))
        .unwrap_or_default())
}

/// The ids of an OpenAI-style listing (`{"data": [{"id": ...}]}`), or of a bare list of them.
pub(crate) fn model_ids(body: &Value) -> Vec<String> {
    let entries = body
        .get("data")
        .or_else(|| body.get("models"))
        .unwrap_or(body);
    entries
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|entry| {
                    entry
                        .get("id")
                        .or_else(|| entry.get("name"))
                        .or(Some(entry))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::model_ids;
    use serde_json::json;

    #[test]
    fn listings_of_several_shapes_give_their_ids() {
        assert_eq!(
            model_ids(&json!({"object": "list", "data": [{"id": "qwen2.5-coder-1.5b"}]})),
            vec!["qwen2.5-coder-1.5b"]
        );
        assert_eq!(
            model_ids(&json!({"models": [{"name": "a"}, {"name": "b"}]})),
            vec!["a", "b"]
        );
        assert_eq!(model_ids(&json!(["x"])), vec!["x"]);
        assert!(model_ids(&json!({"error": "no"})).is_empty());
    }
}
