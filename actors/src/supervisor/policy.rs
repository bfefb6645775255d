//! What the supervisor decides before anyone is asked: the `approvals:` settings
//! ([`ApprovalConfig`]), the rules that flag a call ([`ApprovalRules`], [`DefaultRules`]) and the
//! answers a person may give ([`ApprovalChoice`]). Pure values and functions; the
//! [`Supervisor`](super::Supervisor) actor applies them.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use troupe_tools::builtin::{
    Builtins, CommandVerdict, PathAccess, check_command, check_keystrokes, path_needs_approval,
};
use troupe_tools::{ToolHints, ToolKind};

/// Default wait for a person's answer before the request fails closed.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How approvals are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Ask a person for anything the rules flag.
    Manual,
    /// Approve everything the rules flag; the hard-deny floor still applies.
    Off,
}

impl ApprovalMode {
    /// Reads a mode as a config file writes it. `off`, `false`, `no` and `0` turn approvals
    /// off; anything else (unknown words included) is `manual`, so a typo fails safe.
    pub fn parse(raw: &Value) -> ApprovalMode {
        let word = match raw {
            Value::Bool(false) => return ApprovalMode::Off,
            Value::String(s) => s.trim().to_ascii_lowercase(),
            Value::Number(n) if n.as_i64() == Some(0) => return ApprovalMode::Off,
            _ => return ApprovalMode::Manual,
        };
        match word.as_str() {
            "off" | "false" | "no" | "0" => ApprovalMode::Off,
            other => {
                if other != "manual" {
                    tracing::warn!(mode = other, "unknown approvals.mode; using manual");
                }
                ApprovalMode::Manual
            }
        }
    }
}

impl ApprovalMode {
    /// Reads `approvals.mode` strictly: `manual` (or true) and `off` (or false, no, 0); any
    /// other word is an error naming the allowed values, never a silent fallback.
    pub fn read(raw: &Value) -> Result<ApprovalMode, String> {
        match raw {
            Value::Bool(false) => return Ok(ApprovalMode::Off),
            Value::Bool(true) | Value::Null => return Ok(ApprovalMode::Manual),
            Value::Number(n) if n.as_i64() == Some(0) => return Ok(ApprovalMode::Off),
            _ => {}
        }
        match raw
            .as_str()
            .map(|s| s.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("manual") => Ok(ApprovalMode::Manual),
            Some("off" | "false" | "no" | "0") => Ok(ApprovalMode::Off),
            _ => Err(format!(
                "approvals.mode: expected manual or off, found {raw}"
            )),
        }
    }
}

/// What happens to a request when nobody can answer it (no CLI prompt, no API subscriber).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnattendedPolicy {
    /// Refuse (the default).
    Deny,
    /// Allow.
    Approve,
}

/// The approval settings.
#[derive(Debug, Clone)]
pub struct ApprovalConfig {
    /// `manual` or `off`.
    pub mode: ApprovalMode,
    /// How long a person has to answer.
    pub timeout: Duration,
    /// What to do when nobody can answer.
    pub unattended: UnattendedPolicy,
    /// Tool names that always need approval.
    pub require_approval: Vec<String>,
    /// Keys approved permanently (`always` answers add to it for the life of the process).
    pub allowlist: Vec<String>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            mode: ApprovalMode::Manual,
            timeout: DEFAULT_APPROVAL_TIMEOUT,
            unattended: UnattendedPolicy::Deny,
            require_approval: Vec::new(),
            allowlist: Vec::new(),
        }
    }
}

impl ApprovalConfig {
    /// Reads the `approvals` section of `troupe.yaml`: `mode` (manual | off), `timeout`
    /// (seconds), `unattended` (deny | approve), `require_approval` (tool names) and
    /// `allowlist` (rule keys). Absent keys keep their defaults; a wrong type is an error that
    /// names the key and says what to write.
    pub fn from_value(raw: &Value) -> Result<ApprovalConfig, String> {
        let mut config = ApprovalConfig::default();
        let map = match raw {
            Value::Null => return Ok(config),
            Value::Object(map) => map,
            _ => return Err("approvals: expected a mapping with mode, timeout, unattended, require_approval or allowlist".into()),
        };
        if let Some(mode) = map.get("mode") {
            config.mode = ApprovalMode::read(mode)?;
        }
        if let Some(timeout) = map.get("timeout") {
            let seconds = timeout
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| format!("approvals.timeout: expected a positive number of seconds such as 300, found {timeout}"))?;
            config.timeout = Duration::from_secs_f64(seconds.min(86_400.0));
        }
        if let Some(unattended) = map.get("unattended") {
            config.unattended = match unattended
                .as_str()
                .map(|s| s.trim().to_ascii_lowercase())
                .as_deref()
            {
                Some("deny") => UnattendedPolicy::Deny,
                Some("approve") => UnattendedPolicy::Approve,
                _ => {
                    return Err(format!(
                        "approvals.unattended: expected deny or approve, found {unattended}"
                    ));
                }
            };
        }
        for (key, target) in [
            ("require_approval", &mut config.require_approval),
            ("allowlist", &mut config.allowlist),
        ] {
            match map.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        match item.as_str() {
                            Some(name) => target.push(name.to_string()),
                            None => {
                                return Err(format!(
                                    "approvals.{key}: expected a list of names, found the item {item}"
                                ));
                            }
                        }
                    }
                }
                Some(other) => {
                    return Err(format!(
                        "approvals.{key}: expected a list of names, found {other}"
                    ));
                }
            }
        }
        Ok(config)
    }
}

/// What the rules say about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleVerdict {
    /// Nothing to ask.
    Allow,
    /// A person must approve; `key` identifies the rule for session and permanent approvals.
    Ask {
        /// Allowlist key.
        key: String,
        /// Why, in a short phrase.
        reason: String,
    },
    /// Never run, whatever the mode.
    Forbid {
        /// Why.
        reason: String,
    },
}

/// The facts a rule looks at.
#[derive(Debug, Clone, Copy)]
pub struct RuleInput<'a> {
    /// The session asking.
    pub session_id: &'a str,
    /// The underlying tool.
    pub tool: &'a str,
    /// Its kind, when the view knows it.
    pub kind: Option<ToolKind>,
    /// Its hints.
    pub hints: &'a ToolHints,
    /// Its arguments.
    pub arguments: &'a Map<String, Value>,
}

/// Which calls need approval. The default set is [`DefaultRules`]; tests and embedders may
/// bring their own.
pub trait ApprovalRules: Send + Sync + 'static {
    /// The verdict for one call.
    fn check(&self, input: &RuleInput<'_>) -> RuleVerdict;
}

/// troupe's rules: `terminal` commands and text typed into a background process (`process`
/// write and close) through the dangerous-command checks, file tools through
/// the path checks, destructive MCP tools, and tool names the config lists.
#[derive(Clone, Default)]
pub struct DefaultRules {
    /// The built-in tools' shared state, for each session's working directory and roots.
    pub builtins: Option<Arc<Builtins>>,
    /// Tool names that always need approval.
    pub configured: HashSet<String>,
}

impl std::fmt::Debug for DefaultRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultRules")
            .field("builtins", &self.builtins.is_some())
            .field("configured", &self.configured)
            .finish()
    }
}

impl DefaultRules {
    /// The rules, with these tool names always needing approval.
    pub fn new(configured: impl IntoIterator<Item = String>) -> Self {
        DefaultRules {
            builtins: None,
            configured: configured.into_iter().collect(),
        }
    }

    /// Uses the built-in tools' session directories for the path rules.
    pub fn with_builtins(mut self, builtins: Arc<Builtins>) -> Self {
        self.builtins = Some(builtins);
        self
    }

    fn path_reason(&self, session_id: &str, path: &str, access: PathAccess) -> Option<String> {
        match &self.builtins {
            Some(builtins) => builtins.path_needs_approval(session_id, path, access),
            None => {
                let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
                path_needs_approval(path, access, &cwd, &[])
            }
        }
    }
}

impl ApprovalRules for DefaultRules {
    fn check(&self, input: &RuleInput<'_>) -> RuleVerdict {
        let arg = |key: &str| input.arguments.get(key).and_then(Value::as_str);
        match input.tool {
            "terminal" | "process" => {
                let terminal_verdict = |command: &str| match &self.builtins {
                    Some(b) => b.check_terminal_command(input.session_id, command, arg("workdir")),
                    None => check_command(command),
                };
                // Asking to write beyond the boundary is always a person's call (a command
                // that is never run stays forbidden).
                if input.tool == "terminal"
                    && let Some(paths) = writable_request(input.arguments)
                {
                    let also = match terminal_verdict(arg("command").unwrap_or("")) {
                        CommandVerdict::Forbidden { reason, .. } => {
                            return RuleVerdict::Forbid {
                                reason: reason.to_string(),
                            };
                        }
                        CommandVerdict::NeedsApproval { reason, .. } => format!("; and {reason}"),
                        CommandVerdict::Allowed => String::new(),
                    };
                    return RuleVerdict::Ask {
                        key: format!("terminal:writable:{paths}"),
                        reason: format!(
                            "the command asks to write outside its workspace and temp: {paths}{also}"
                        ),
                    };
                }
                let verdict = match (input.tool, &self.builtins) {
                    ("terminal", _) => terminal_verdict(arg("command").unwrap_or("")),
                    // Text written to a background process's stdin runs like a command.
                    (_, builtins) => match process_input(input.arguments) {
                        Some((id, data, closing)) => match builtins {
                            Some(b) => {
                                b.check_process_write(input.session_id, &id, &data, closing)
                                    .verdict
                            }
                            None => check_keystrokes("", &data, "", None, closing).verdict,
                        },
                        None => CommandVerdict::Allowed,
                    },
                };
                match verdict {
                    // A harmless command still waits when the config lists `terminal`.
                    CommandVerdict::Allowed => {}
                    // Inside an isolated backend the configuration may waive the question.
                    CommandVerdict::NeedsApproval { .. }
                        if self.builtins.as_ref().is_some_and(|b| {
                            !b.dangerous_commands_need_approval(input.session_id)
                        }) => {}
                    CommandVerdict::NeedsApproval { key, reason } => {
                        return RuleVerdict::Ask {
                            key: format!("{}:{key}", input.tool),
                            reason: reason.to_string(),
                        };
                    }
                    CommandVerdict::Forbidden { reason, .. } => {
                        return RuleVerdict::Forbid {
                            reason: reason.to_string(),
                        };
                    }
                }
            }
            // A schedule runs later, with no one watching, as the profile its template names:
            // making, changing, starting or removing one is the person's call. Reading and
            // pausing are not.
            "cronjob" => {
                let action = arg("action").unwrap_or("list").trim();
                if matches!(action, "create" | "update" | "resume" | "run" | "remove") {
                    return RuleVerdict::Ask {
                        key: format!("cronjob:{action}"),
                        reason: format!(
                            "cronjob {action} changes work that runs later by itself, as the \
                             profile its task or prompt names"
                        ),
                    };
                }
            }
            "read_file" | "search_files" | "write_file" | "patch" => {
                let access = if matches!(input.tool, "write_file" | "patch") {
                    PathAccess::Write
                } else {
                    PathAccess::Read
                };
                if let Some(path) = arg("path")
                    && let Some(reason) = self.path_reason(input.session_id, path, access)
                {
                    return RuleVerdict::Ask {
                        key: format!("{}:{path}", input.tool),
                        reason,
                    };
                }
            }
            _ => {}
        }
        if self.configured.contains(input.tool) {
            return RuleVerdict::Ask {
                key: format!("tool:{}", input.tool),
                reason: format!(
                    "the configuration asks for approval before every {} call",
                    input.tool
                ),
            };
        }
        if input.kind == Some(ToolKind::Mcp) && input.hints.destructive {
            return RuleVerdict::Ask {
                key: format!("tool:{}", input.tool),
                reason: format!("its server marks {} as destructive", input.tool),
            };
        }
        RuleVerdict::Allow
    }
}

/// The process id, the text and whether stdin closes, for a `process` call that types into a
/// process (`write`, and `close`, which runs an unfinished line).
fn process_input(arguments: &Map<String, Value>) -> Option<(String, String, bool)> {
    troupe_tools::builtin::process_keystrokes(arguments)
}

/// The paths a `terminal` call's `writable` names (sorted, comma-separated), if any; a value
/// that is not a list of paths is shown as written (the tool refuses it later).
fn writable_request(arguments: &Map<String, Value>) -> Option<String> {
    match arguments.get("writable") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if items.is_empty() => None,
        Some(Value::Array(items)) => {
            let mut paths: Vec<String> = items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| i.to_string())
                })
                .collect();
            paths.sort();
            paths.dedup();
            Some(paths.join(", "))
        }
        Some(Value::String(one)) if one.trim().is_empty() => None,
        Some(Value::String(one)) => Some(one.clone()),
        Some(other) => Some(other.to_string()),
    }
}

/// A person's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalChoice {
    /// Allow this call only.
    Once,
    /// Allow this and later calls matching the same rule, in this session.
    Session,
    /// Allow matching calls from now on, in every session of this process.
    Always,
    /// Refuse, optionally saying why (the model is told).
    Deny {
        /// The person's reason.
        reason: Option<String>,
    },
    /// The answer to a question ([`super::ApprovalKind::Question`]); to a call or budget
    /// request it is a refusal with these words as the reason.
    Answer {
        /// The person's answer.
        text: String,
    },
}

impl ApprovalChoice {
    /// Reads a typed answer: `o`/`once`/`y`/`yes`, `s`/`session`, `a`/`always`, anything else
    /// denies. `None` for empty input (the caller decides the default).
    pub fn parse(input: &str) -> Option<ApprovalChoice> {
        let word = input.trim().to_ascii_lowercase();
        Some(match word.as_str() {
            "" => return None,
            "o" | "once" | "y" | "yes" | "ok" | "approve" => ApprovalChoice::Once,
            "s" | "session" => ApprovalChoice::Session,
            "a" | "always" => ApprovalChoice::Always,
            _ => ApprovalChoice::Deny { reason: None },
        })
    }

    pub(super) fn word(&self) -> &'static str {
        match self {
            ApprovalChoice::Once => "once",
            ApprovalChoice::Session => "session",
            ApprovalChoice::Always => "always",
            ApprovalChoice::Deny { .. } => "deny",
            ApprovalChoice::Answer { .. } => "answer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input<'a>(
        tool: &'a str,
        args: &'a Map<String, Value>,
        kind: Option<ToolKind>,
        hints: &'a ToolHints,
    ) -> RuleInput<'a> {
        RuleInput {
            session_id: "s",
            tool,
            kind,
            hints,
            arguments: args,
        }
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn asking_to_write_more_always_asks_and_shows_the_paths() {
        let rules = DefaultRules::new(Vec::<String>::new());
        let none = ToolHints::default();
        let ask = obj(json!({"command": "ls", "writable": ["/srv/b", "/srv/a"]}));
        match rules.check(&input("terminal", &ask, Some(ToolKind::Core), &none)) {
            RuleVerdict::Ask { key, reason } => {
                assert_eq!(key, "terminal:writable:/srv/a, /srv/b");
                assert!(reason.contains("/srv/a, /srv/b"), "{reason}");
            }
            other => panic!("expected a question, got {other:?}"),
        }
        let none_asked = obj(json!({"command": "ls", "writable": []}));
        assert_eq!(
            rules.check(&input("terminal", &none_asked, Some(ToolKind::Core), &none)),
            RuleVerdict::Allow
        );
        let wipe = obj(json!({"command": "rm -rf /", "writable": ["/"]}));
        assert!(matches!(
            rules.check(&input("terminal", &wipe, Some(ToolKind::Core), &none)),
            RuleVerdict::Forbid { .. }
        ));
    }

    #[test]
    fn mode_parsing_fails_safe() {
        assert_eq!(ApprovalMode::parse(&json!(false)), ApprovalMode::Off);
        assert_eq!(ApprovalMode::parse(&json!("off")), ApprovalMode::Off);
        assert_eq!(ApprovalMode::parse(&json!("manual")), ApprovalMode::Manual);
        assert_eq!(ApprovalMode::parse(&json!("auto")), ApprovalMode::Manual);
        assert_eq!(ApprovalMode::parse(&json!(true)), ApprovalMode::Manual);
        assert_eq!(ApprovalMode::parse(&Value::Null), ApprovalMode::Manual);
        assert_eq!(ApprovalMode::read(&json!("off")), Ok(ApprovalMode::Off));
        assert_eq!(
            ApprovalMode::read(&json!("manual")),
            Ok(ApprovalMode::Manual)
        );
        let err = ApprovalMode::read(&json!("manul")).unwrap_err();
        assert!(err.contains("expected manual or off"), "{err}");
        assert!(ApprovalConfig::from_value(&json!({"mode": "manul"})).is_err());
    }

    #[test]
    fn schedules_that_run_later_need_a_persons_yes() {
        let rules = DefaultRules::new(Vec::<String>::new());
        let none = ToolHints::default();
        for action in ["create", "update", "resume", "run", "remove"] {
            let call = obj(json!({"action": action, "job_id": "nightly"}));
            assert!(
                matches!(
                    rules.check(&input("cronjob", &call, Some(ToolKind::Core), &none)),
                    RuleVerdict::Ask { key, .. } if key == format!("cronjob:{action}")
                ),
                "{action}"
            );
        }
        for action in ["list", "history", "pause"] {
            let call = obj(json!({"action": action}));
            assert_eq!(
                rules.check(&input("cronjob", &call, Some(ToolKind::Core), &none)),
                RuleVerdict::Allow,
                "{action}"
            );
        }
    }

    #[test]
    fn text_typed_into_a_process_is_checked_like_a_command() {
        let rules = DefaultRules::new(Vec::<String>::new());
        let none = ToolHints::default();
        let rm = obj(
            json!({"action": "write", "session_id": "proc_0123456789ab", "data": "rm -rf build\n"}),
        );
        assert!(matches!(
            rules.check(&input("process", &rm, Some(ToolKind::Core), &none)),
            RuleVerdict::Ask { key, .. } if key.starts_with("process:")
        ));
        let ls = obj(json!({"action": "write", "session_id": "proc_0123456789ab", "data": "ls\n"}));
        assert_eq!(
            rules.check(&input("process", &ls, Some(ToolKind::Core), &none)),
            RuleVerdict::Allow
        );
        let poll = obj(json!({"action": "poll", "session_id": "proc_0123456789ab"}));
        assert_eq!(
            rules.check(&input("process", &poll, Some(ToolKind::Core), &none)),
            RuleVerdict::Allow
        );
    }

    #[test]
    fn default_rules_cover_terminal_mcp_and_configured_tools() {
        let rules = DefaultRules::new(["deploy".to_string()]);
        let none = ToolHints::default();
        let destructive = ToolHints {
            destructive: true,
            ..ToolHints::default()
        };
        let ls = obj(json!({"command": "ls -la"}));
        assert_eq!(
            rules.check(&input("terminal", &ls, Some(ToolKind::Core), &none)),
            RuleVerdict::Allow
        );
        let rm = obj(json!({"command": "rm -rf build"}));
        assert!(matches!(
            rules.check(&input("terminal", &rm, Some(ToolKind::Core), &none)),
            RuleVerdict::Ask { .. }
        ));
        let wipe = obj(json!({"command": "rm -rf /"}));
        assert!(matches!(
            rules.check(&input("terminal", &wipe, Some(ToolKind::Core), &none)),
            RuleVerdict::Forbid { .. }
        ));
        let empty = Map::new();
        assert!(matches!(
            rules.check(&input(
                "mcp__gh__delete_repo",
                &empty,
                Some(ToolKind::Mcp),
                &destructive
            )),
            RuleVerdict::Ask { .. }
        ));
        assert_eq!(
            rules.check(&input("mcp__gh__list", &empty, Some(ToolKind::Mcp), &none)),
            RuleVerdict::Allow
        );
        assert!(matches!(
            rules.check(&input("deploy", &empty, None, &none)),
            RuleVerdict::Ask { .. }
        ));
        let secret = obj(json!({"path": "/etc/shadow", "content": "x"}));
        assert!(matches!(
            rules.check(&input(
                "write_file",
                &secret,
                Some(ToolKind::Core),
                &destructive
            )),
            RuleVerdict::Ask { .. }
        ));
    }

    #[test]
    fn approval_section_reads_and_rejects_clearly() {
        let config = ApprovalConfig::from_value(&json!({
            "mode": "off", "timeout": 30, "unattended": "approve", "require_approval": ["deploy"], "allowlist": ["tool:x"]
        }))
        .unwrap();
        assert_eq!(config.mode, ApprovalMode::Off);
        assert_eq!(config.timeout, Duration::from_secs(30));
        assert_eq!(config.unattended, UnattendedPolicy::Approve);
        assert_eq!(config.require_approval, ["deploy"]);
        assert_eq!(config.allowlist, ["tool:x"]);
        assert_eq!(
            ApprovalConfig::from_value(&Value::Null).unwrap().timeout,
            DEFAULT_APPROVAL_TIMEOUT
        );
        let error = ApprovalConfig::from_value(&json!({"unattended": "maybe"})).unwrap_err();
        assert!(error.contains("approvals.unattended") && error.contains("deny or approve"));
        assert!(ApprovalConfig::from_value(&json!({"timeout": -1})).is_err());
    }

    #[test]
    fn typed_answers() {
        assert_eq!(ApprovalChoice::parse("o"), Some(ApprovalChoice::Once));
        assert_eq!(
            ApprovalChoice::parse(" Session "),
            Some(ApprovalChoice::Session)
        );
        assert_eq!(ApprovalChoice::parse("a"), Some(ApprovalChoice::Always));
        assert_eq!(
            ApprovalChoice::parse("nope"),
            Some(ApprovalChoice::Deny { reason: None })
        );
        assert_eq!(ApprovalChoice::parse("  "), None);
    }
}
