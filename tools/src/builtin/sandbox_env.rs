//! The environment handed to child processes, and the one place that knows which of
//! troupe's variables are secrets ([`ChildSecrets`]).
//!
//! - `terminal` commands get the user's environment minus troupe's own credentials
//!   ([`terminal_env`]);
//! - `execute_code` scripts get a minimal allow-listed environment with anything that looks
//!   like a secret removed ([`code_env`]);
//! - MCP servers, hooks and plugin commands get only the basics a program needs (`PATH`,
//!   `HOME`, `USER`, `LOGNAME`, `LANG`, `LC_*`, `TERM`, `TZ`, `TMPDIR`, `SHELL`) plus the names
//!   their config passes through ([`minimal_env`]); what their config's own `env` sets is added
//!   by the caller;
//! - the local client programs of a backend (`ssh`, `docker`, `bwrap`) get troupe's environment
//!   minus its credentials ([`client_env`]).
//!
//! Whatever an `env_passthrough` list says, none of them gets a variable [`ChildSecrets`]
//! names (the model's `api_key_env`, every profile's, `TROUPE_SERVE_TOKEN`) or one whose value
//! holds a key troupe uses. Pure functions over a list of variables.

/// The variable `troupe serve` reads its bearer token from.
pub const SERVE_TOKEN_ENV: &str = "TROUPE_SERVE_TOKEN";

/// Values shorter than this are not matched inside other variables (too many false matches).
const SECRET_VALUE_MIN_CHARS: usize = 8;

/// The keys troupe holds, as the runtime knows them from its config: the names of the
/// variables that carry them (`model.api_key_env`, each profile's `api_key_env`, the serve
/// token's) and the values themselves (inline keys, keys read from those variables, the serve
/// token). Built once by the runtime and handed down; no child process troupe starts gets any
/// of them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildSecrets {
    /// Variable names, sorted.
    names: Vec<String>,
    /// Secret values, sorted.
    values: Vec<String>,
}

impl std::fmt::Debug for ChildSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The names are no secret; the values are never shown.
        f.debug_struct("ChildSecrets")
            .field("names", &self.names)
            .field("values", &self.values.len())
            .finish()
    }
}

impl ChildSecrets {
    /// None known beyond the built-in list of provider variables and the serve token.
    pub fn new() -> ChildSecrets {
        ChildSecrets::default()
    }

    /// Adds the name of a variable that holds one of troupe's keys.
    pub fn add_name(&mut self, name: &str) {
        let name = name.trim();
        if !name.is_empty()
            && let Err(at) = self.names.binary_search_by(|n| n.as_str().cmp(name))
        {
            self.names.insert(at, name.to_string());
        }
    }

    /// Adds a key troupe uses (too short a value is ignored: it would match everywhere).
    pub fn add_value(&mut self, value: &str) {
        let value = value.trim();
        if value.chars().count() >= SECRET_VALUE_MIN_CHARS
            && let Err(at) = self.values.binary_search_by(|v| v.as_str().cmp(value))
        {
            self.values.insert(at, value.to_string());
        }
    }

    /// [`ChildSecrets::add_name`], chained.
    pub fn with_name(mut self, name: &str) -> ChildSecrets {
        self.add_name(name);
        self
    }

    /// [`ChildSecrets::add_value`], chained.
    pub fn with_value(mut self, value: &str) -> ChildSecrets {
        self.add_value(value);
        self
    }

    /// Everything `other` knows too.
    pub fn merge(&mut self, other: &ChildSecrets) {
        for name in &other.names {
            self.add_name(name);
        }
        for value in &other.values {
            self.add_value(value);
        }
    }

    /// The variable names given (not the built-in list).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The secret values, for registering them with the output masking.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a variable must never reach a child, whatever a passthrough list says: it is
    /// named as one of troupe's keys, it is the serve token, or its value holds a key troupe
    /// uses.
    pub fn withholds(&self, name: &str, value: &str) -> bool {
        name == SERVE_TOKEN_ENV
            || self.names.iter().any(|n| n == name)
            || self.values.iter().any(|v| value.contains(v.as_str()))
    }
}

/// Whether a variable is one of the provider and messaging credentials troupe may use itself
/// (the built-in list, and any `TROUPE_*` name that says secret). A passthrough list may hand
/// such a variable to a program that needs it (a GitHub token to a GitHub MCP server).
fn troupe_managed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    TROUPE_MANAGED.contains(&upper.as_str())
        || (upper.starts_with("TROUPE_") && SECRET_FRAGMENTS.iter().any(|f| upper.contains(f)))
}

/// Credentials troupe itself uses (model providers, messaging, hosting): a shell command the
/// model runs has no business reading them.
const TROUPE_MANAGED: &[&str] = &[
    "TROUPE_API_KEY",
    "TROUPE_TOKEN",
    "TROUPE_HTTP_TOKEN",
    "TROUPE_SERVE_TOKEN",
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

/// Names every program troupe starts gets (a prefix match for `LC_`): enough to find
/// programs, the user's home and temp, and the locale.
const MINIMAL_NAMES: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TZ", "TMPDIR", "SHELL",
];

/// Whether `name` is one of [`MINIMAL_NAMES`] or a locale setting (`LC_*`).
fn minimal_name(name: &str) -> bool {
    MINIMAL_NAMES.contains(&name) || name.starts_with("LC_")
}

/// The one filter behind every environment below: what `secrets` withholds never passes; a
/// `passthrough` name passes; anything else passes when `admits` says so.
fn filter_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
    secrets: &ChildSecrets,
    admits: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter(|(name, value)| {
            !secrets.withholds(name, value)
                && (passthrough.iter().any(|p| p == name) || admits(name))
        })
        .collect()
}

/// The environment for a `terminal` command: everything but troupe's own credentials (and any
/// `TROUPE_*` secret), plus the `passthrough` names even when they are on that list. What
/// `secrets` withholds is dropped whatever `passthrough` says.
pub fn terminal_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
    secrets: &ChildSecrets,
) -> Vec<(String, String)> {
    filter_env(vars, passthrough, secrets, |name| !troupe_managed(name))
}

/// The environment for an `execute_code` script: the `passthrough` names, then the safe names
/// that do not look secret. Everything else is dropped, and so is what `secrets` withholds.
pub fn code_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
    secrets: &ChildSecrets,
) -> Vec<(String, String)> {
    filter_env(vars, passthrough, secrets, |name| {
        !is_secret_name(name)
            && (SAFE_PREFIXES.iter().any(|p| name.starts_with(p)) || name == "TROUPE_HOME")
    })
}

/// The environment for an MCP server, a hook or a plugin's command: the basic names (`PATH`,
/// `HOME`, `USER`, `LOGNAME`, `LANG`, `LC_*`, `TERM`, `TZ`, `TMPDIR`, `SHELL`) and the
/// `passthrough` names, never what `secrets` withholds. The caller adds what the program's own
/// config sets (its `env:`).
pub fn minimal_env(
    vars: impl IntoIterator<Item = (String, String)>,
    passthrough: &[String],
    secrets: &ChildSecrets,
) -> Vec<(String, String)> {
    filter_env(vars, passthrough, secrets, minimal_name)
}

/// The environment for a local client program of a backend (`ssh`, `docker`, `bwrap`): it may
/// need the user's settings for itself (`SSH_AUTH_SOCK`, `DOCKER_HOST`), but none of troupe's
/// credentials; what it passes on to a command is the request's environment, not its own.
pub fn client_env(
    vars: impl IntoIterator<Item = (String, String)>,
    secrets: &ChildSecrets,
) -> Vec<(String, String)> {
    filter_env(vars, &[], secrets, |name| !troupe_managed(name))
}

/// troupe's own environment as UTF-8 pairs (a variable that is not UTF-8 is left out: no
/// program troupe starts is handed bytes it could not check).
pub fn process_vars() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
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
            &ChildSecrets::new().with_name("CUSTOM"),
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
            &ChildSecrets::new(),
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

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_api_key_env_name_the_serve_token_and_key_values_reach_no_child() {
        let key = "model-key-0123456789abcdef";
        let secrets = ChildSecrets::new().with_name("MY_KEY").with_value(key);
        let vars = pairs(&[
            ("PATH", "/usr/bin"),
            ("MY_KEY", key),
            ("TROUPE_SERVE_TOKEN", "serve-token-value-123456"),
            // Another name carrying the same key is found by its value.
            ("COPY_OF_IT", &format!("Bearer {key}")),
            ("WORK_DIR", "/srv"),
        ]);
        // A passthrough list cannot hand them out.
        let passthrough: Vec<String> = ["MY_KEY", "TROUPE_SERVE_TOKEN", "COPY_OF_IT"]
            .map(String::from)
            .to_vec();
        let expect_terminal = ["PATH", "WORK_DIR"];
        assert_eq!(
            names(terminal_env(vars.clone(), &passthrough, &secrets)),
            expect_terminal
        );
        assert_eq!(
            names(code_env(vars.clone(), &passthrough, &secrets)),
            ["PATH"]
        );
        assert_eq!(
            names(minimal_env(vars.clone(), &passthrough, &secrets)),
            ["PATH"]
        );
        assert_eq!(names(client_env(vars, &secrets)), expect_terminal);
    }

    #[test]
    fn minimal_env_keeps_the_basics_and_the_passthrough_names_only() {
        let vars = vars(&[
            "PATH",
            "HOME",
            "USER",
            "LOGNAME",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "TERM",
            "TZ",
            "TMPDIR",
            "SHELL",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "PYTHONPATH",
            "DISPLAY",
            "TROUPE_HOME",
            "PROXY_URL",
        ]);
        let got = names(minimal_env(
            vars,
            &["GITHUB_TOKEN".to_string(), "PROXY_URL".to_string()],
            &ChildSecrets::new(),
        ));
        assert_eq!(
            got,
            [
                "PATH",
                "HOME",
                "USER",
                "LOGNAME",
                "LANG",
                "LC_ALL",
                "LC_CTYPE",
                "TERM",
                "TZ",
                "TMPDIR",
                "SHELL",
                "GITHUB_TOKEN",
                "PROXY_URL"
            ]
        );
    }

    #[test]
    fn client_programs_keep_their_settings_but_no_credential() {
        let got = names(client_env(
            vars(&[
                "PATH",
                "SSH_AUTH_SOCK",
                "DOCKER_HOST",
                "OPENAI_API_KEY",
                "TROUPE_SERVE_TOKEN",
                "TROUPE_API_KEY",
                "LLM_CRED",
            ]),
            &ChildSecrets::new().with_name("LLM_CRED"),
        ));
        assert_eq!(got, ["PATH", "SSH_AUTH_SOCK", "DOCKER_HOST"]);
    }

    #[test]
    fn short_values_are_not_matched_and_debug_hides_values() {
        let secrets = ChildSecrets::new()
            .with_value("abc")
            .with_value("long-enough-value");
        assert_eq!(secrets.values(), ["long-enough-value"]);
        assert!(!secrets.withholds("X", "abc"));
        assert!(secrets.withholds("X", "xx long-enough-value xx"));
        assert!(!format!("{secrets:?}").contains("long-enough"));
    }
}
