//! The one place that knows troupe's keys. [`child_secrets`] reads them from a checked config
//! and troupe's environment: the variable `model.api_key_env` names and each profile's
//! `api_key_env`, their values, inline `api_key`s (model and profiles), the keys troupe falls
//! back to (`TROUPE_API_KEY`, `OPENAI_API_KEY`), `TROUPE_SERVE_TOKEN` and an inline `serve.token`. The result is handed
//! down as a value to whatever starts programs (the built-in tools and their backends, MCP
//! servers, hooks, plugin commands), which keep all of it out of those programs' environment;
//! [`mask_in_outputs`] makes the output masking hide every value in every tool result.

use serde_json::Value;
use troupe_tools::builtin::redact::remember_secret;
use troupe_tools::builtin::sandbox_env::{ChildSecrets, SERVE_TOKEN_ENV};

use crate::settings::Settings;

/// Variables troupe reads a model key from when the config names none.
const FALLBACK_KEY_VARS: &[&str] = &["TROUPE_API_KEY", "OPENAI_API_KEY"];

/// troupe's keys as `config` and the environment give them (see the module doc).
pub fn child_secrets(config: &Settings) -> ChildSecrets {
    child_secrets_with(config, &|name| std::env::var(name).ok())
}

/// [`child_secrets`] with `env` standing for troupe's environment.
pub fn child_secrets_with(config: &Settings, env: &dyn Fn(&str) -> Option<String>) -> ChildSecrets {
    let mut secrets = ChildSecrets::new();
    let named = |secrets: &mut ChildSecrets, name: &str| {
        secrets.add_name(name);
        if let Some(value) = env(name) {
            secrets.add_value(&value);
        }
    };
    if let Some(key) = &config.model.api_key {
        secrets.add_value(key);
    }
    if let Some(name) = &config.model.api_key_env {
        named(&mut secrets, name);
    }
    // Read from the section as written, so a profile the board settings would refuse still
    // has its key kept out and masked.
    if let Value::Object(profiles) = config.section("profiles") {
        for profile in profiles.values() {
            if let Some(Value::String(key)) = profile.get("api_key") {
                secrets.add_value(key);
            }
            if let Some(Value::String(name)) = profile.get("api_key_env") {
                named(&mut secrets, name);
            }
        }
    }
    for name in FALLBACK_KEY_VARS {
        if let Some(value) = env(name) {
            secrets.add_value(&value);
        }
    }
    named(&mut secrets, SERVE_TOKEN_ENV);
    // The connector gateway's token: only troupe's own gateway client reads it.
    if let Some(connectors) = &config.connectors {
        named(&mut secrets, &connectors.token_env);
    }
    if let Some(Value::String(token)) = config.section("serve").get("token") {
        secrets.add_value(token);
    }
    secrets
}

/// Registers every value of `secrets` with the output masking: from now on each is replaced in
/// every tool result, receipt, trace and stored message, plain, encoded or reversed.
pub fn mask_in_outputs(secrets: &ChildSecrets) {
    for value in secrets.values() {
        remember_secret(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_come_from_the_model_the_profiles_and_the_environment() {
        let config = Settings::parse(
            "model:\n  base_url: http://127.0.0.1:9/v1\n  api_key_env: MY_KEY\nprofiles:\n  coder:\n    api_key: inline-profile-key-123456\n  writer:\n    api_key_env: WRITER_KEY\n",
        )
        .unwrap();
        let env = |name: &str| match name {
            "MY_KEY" => Some("my-model-key-abcdef123".to_string()),
            "WRITER_KEY" => Some("writer-key-abcdef12345".to_string()),
            "OPENAI_API_KEY" => Some("sk-fallback-key-0000000".to_string()),
            "TROUPE_SERVE_TOKEN" => Some("serve-token-9876543210".to_string()),
            _ => None,
        };
        let secrets = child_secrets_with(&config, &env);
        assert_eq!(
            secrets.names(),
            ["MY_KEY", "TROUPE_SERVE_TOKEN", "WRITER_KEY"]
        );
        for value in [
            "my-model-key-abcdef123",
            "writer-key-abcdef12345",
            "inline-profile-key-123456",
            "sk-fallback-key-0000000",
            "serve-token-9876543210",
        ] {
            assert!(secrets.values().iter().any(|v| v == value), "{value}");
        }
        // A copy of the model key under another name is withheld too.
        assert!(secrets.withholds("ELSEWHERE", "my-model-key-abcdef123"));
    }
}
