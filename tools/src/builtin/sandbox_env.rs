//! The environment handed to child processes. `terminal` commands get the user's environment
//! minus troupe's own provider and messaging credentials; `execute_code` scripts get a minimal
//! allow-listed environment with anything that looks like a secret removed. Both keep the
//! names an operator listed in `env_passthrough`. Pure functions over a list of variables.

/// Credentials troupe itself uses (model providers, messaging, hosting): a shell command the
/// model runs has no business reading them.
const TROUPE_MANAGED: &[&str] = &[
    "TROUPE_API_KEY",
    "TROUPE_TOKEN",
    "TROUPE_HTTP_TOKEN",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENROUTER_API_KEY",
    "OPENROUTER_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "DEEPSEEK_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "PERPLEXITY_API_KEY",
    "COHERE_API_KEY",
    "FIREWORKS_API_KEY",
    "XAI_API_KEY",
    "HELICONE_API_KEY",
    "PARALLEL_API_KEY",
    "FIRECRAWL_API_KEY",
    "TAVILY_API_KEY",
    "EXA_API_KEY",
    "HF_TOKEN",
    "GH_TOKEN",
    "TELEGRAM_BOT_TOKEN",
    "DISCORD_BOT_TOKEN",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "DAYTONA_API_KEY",
];

/// Name fragments that mark a variable as secret for `execute_code`.
const SECRET_FRAGMENTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "CREDENTIAL",
    "PASSWD",
    "AUTH",
    "DSN",
    "WEBHOOK",
    "CREDS",
    "BEARER",
    "APIKEY",
];

/// Name prefixes `execute_code` scripts may see (a prefix match, so `LC_ALL` and `XDG_*` pass).
const SAFE_PREFIXES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_",
    "TERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    "SHELL",
    "LOGNAME",
    "XDG_",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA",
    "TZ",
];

/// Whether a variable's name says it holds a secret (`OPENAI_API_KEY`, `PGPASSWORD`, ...).
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_FRAGMENTS.iter().any(|f| upper.contains(f))
}

/// The environment for a `terminal` command: everything but troupe's own credentials (and any
/// `TROUPE_*` secret), plus the `passthrough` names even when they are on that list.
pub fn terminal_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
    extra_blocked: &[String],
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(name, _)| {
            if passthrough.iter().any(|p| p == name) {
                return true;
            }
            let upper = name.to_ascii_uppercase();
            let troupe_secret =
                upper.starts_with("TROUPE_") && SECRET_FRAGMENTS.iter().any(|f| upper.contains(f));
            !(TROUPE_MANAGED.contains(&upper.as_str())
                || troupe_secret
                || extra_blocked.iter().any(|b| b == name))
        })
        .collect()
}

/// The environment for an `execute_code` script: the `passthrough` names, then the safe names
/// that do not look secret. Everything else is dropped.
pub fn code_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(name, _)| {
            if passthrough.iter().any(|p| p == name) {
                return true;
            }
            let upper = name.to_ascii_uppercase();
            if SECRET_FRAGMENTS.iter().any(|f| upper.contains(f)) {
                return false;
            }
            SAFE_PREFIXES.iter().any(|p| name.starts_with(p)) || name == "TROUPE_HOME"
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|n| (n.to_string(), "v".to_string()))
            .collect()
    }
    fn names(v: Vec<(String, String)>) -> Vec<String> {
        v.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn terminal_strips_troupe_credentials_only() {
        let got = names(terminal_env(
            vars(&[
                "PATH",
                "OPENAI_API_KEY",
                "TROUPE_API_KEY",
                "TROUPE_HOME",
                "TROUPE_SESSION_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "MY_TOKEN",
                "GH_TOKEN",
                "CUSTOM",
            ]),
            &["GH_TOKEN".to_string()],
            &["CUSTOM".to_string()],
        ));
        assert_eq!(
            got,
            [
                "PATH",
                "TROUPE_HOME",
                "AWS_SECRET_ACCESS_KEY",
                "MY_TOKEN",
                "GH_TOKEN"
            ]
        );
    }

    #[test]
    fn code_keeps_only_safe_names() {
        let got = names(code_env(
            vars(&[
                "PATH",
                "HOME",
                "LANG",
                "LC_ALL",
                "SHELL",
                "PYTHONPATH",
                "VIRTUAL_ENV",
                "OPENAI_API_KEY",
                "GITHUB_TOKEN",
                "DB_PASSWORD",
                "BYPASS_CACHE",
                "RANDOM_THING",
                "PATH_TOKEN",
                "MY_SETTING",
                "HOME_AUTH",
            ]),
            &["MY_SETTING".to_string()],
        ));
        assert_eq!(
            got,
            [
                "PATH",
                "HOME",
                "LANG",
                "LC_ALL",
                "SHELL",
                "PYTHONPATH",
                "VIRTUAL_ENV",
                "MY_SETTING"
            ]
        );
    }
}
