//! The one place that knows troupe's keys. [`child_secrets`] reads them from a checked config
//! and troupe's environment: the variable `model.api_key_env` names and each profile's
//! `api_key_env`, their values, inline `api_key`s (model and profiles), the keys troupe falls
//! back to (`TROUPE_API_KEY`, `OPENAI_API_KEY`), `TROUPE_SERVE_TOKEN` and an inline `serve.token`. The result is handed
//! down as a value to whatever starts programs (the built-in tools and their backends, MCP
//! servers, hooks, plugin commands), which keep all of it out of those programs' environment;
//! [`mask_in_outputs`] makes the output masking hide every value in every tool result.

use std::path::Path;

use serde_json::Value;
use troupe_tools::builtin::redact::remember_secret;
use troupe_tools::builtin::sandbox_env::{ChildSecrets, SERVE_TOKEN_ENV};
use troupe_tools::builtin::sudo::SUDO_PASSWORD_ENV;

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
    // sudo's password: troupe feeds it to sudo; no command gets it in its environment.
    secrets.add_name(SUDO_PASSWORD_ENV);
    if let Some(password) = sudo_password_with(config.home.path(), env) {
        secrets.add_value(&password);
    }
    secrets
}

/// troupe's environment file: `NAME=value` lines in the home (`$TROUPE_HOME/.env`), where
/// commands cannot read it (troupe's home is out of their reach).
pub const ENV_FILE: &str = ".env";

/// `SUDO_PASSWORD` from troupe's environment, else from its environment file in `home`.
pub fn sudo_password(home: &Path) -> Option<String> {
    sudo_password_with(home, &|name| std::env::var(name).ok())
}

fn sudo_password_with(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    env(SUDO_PASSWORD_ENV)
        .filter(|v| !v.is_empty())
        .or_else(|| env_file_value(&home.join(ENV_FILE), SUDO_PASSWORD_ENV))
}

/// The value of `name` in an environment file (`NAME=value`, `export NAME=value`, the value
/// optionally quoted; `#` starts a comment line). `None` when the file or the name is missing.
pub fn env_file_value(file: &Path, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let (key, value) = line.split_once('=')?;
        if line.starts_with('#') || key.trim() != name {
            return None;
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
            .unwrap_or(value);
        (!unquoted.is_empty()).then(|| unquoted.to_string())
    })
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
    fn the_environment_file_gives_sudo_its_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(ENV_FILE);
        std::fs::write(
            &file,
            "# troupe's secrets\nOTHER=x\nexport SUDO_PASSWORD='s3cret pw'\n",
        )
        .unwrap();
        assert_eq!(
            env_file_value(&file, "SUDO_PASSWORD").as_deref(),
            Some("s3cret pw")
        );
        assert_eq!(env_file_value(&file, "MISSING"), None);
        assert_eq!(
            sudo_password_with(dir.path(), &|_| None).as_deref(),
            Some("s3cret pw")
        );
        // troupe's own environment wins over the file.
        assert_eq!(
            sudo_password_with(dir.path(), &|_| Some("from-env".into())).as_deref(),
            Some("from-env")
        );
        assert_eq!(
            sudo_password_with(&dir.path().join("none"), &|_| None),
            None
        );
    }

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
            [
                "MY_KEY",
                "SUDO_PASSWORD",
                "TROUPE_SERVE_TOKEN",
                "WRITER_KEY"
            ]
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
