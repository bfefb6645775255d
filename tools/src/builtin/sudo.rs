//! sudo in `terminal` commands at run time: where the password comes from (what the person
//! typed earlier in the session, `SUDO_PASSWORD` from troupe's environment file, or a masked
//! prompt), feeding it to sudo's stdin, and what the result says when sudo wanted one it did
//! not get. Reading the command is [`sudo_plan`](super::sudo_plan).

use serde_json::{Value, json};

use super::sudo_plan::{needed_password, plan, refused_password};
use super::{Builtins, SudoPassword};
use crate::tool::CallContext;

/// Where headless sessions and subagents get sudo's password from, for the hints.
pub const SUDO_PASSWORD_ENV: &str = "SUDO_PASSWORD";

/// A `terminal` command after [`prepare`]: what runs, and what troupe writes to its stdin.
pub(crate) struct SudoRun {
    /// The command to run (rewritten when troupe feeds sudo).
    pub(crate) command: String,
    /// `password\n` for sudo's stdin, when troupe feeds it.
    pub(crate) input: Option<String>,
    /// The password fed, for masking and for forgetting a wrong one.
    password: Option<String>,
    /// The text runs sudo somewhere.
    mentions: bool,
}

impl std::fmt::Debug for SudoRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SudoRun")
            .field("command", &self.command)
            .field("fed", &self.input.is_some())
            .finish()
    }
}

/// Decides how `command` meets sudo: `Err` is why it is refused (it feeds sudo a password
/// itself). A recognised sudo gets its password from what the person typed earlier in the
/// session, else `SUDO_PASSWORD`, else a masked prompt when the session has a person at an
/// interactive chat; with none of these the command runs as written (passwordless sudo works,
/// and one that needs a password fails with a hint saying how to provision it). Background
/// commands are never fed.
pub(crate) async fn prepare(
    builtins: &Builtins,
    ctx: &CallContext,
    command: &str,
    background: bool,
) -> Result<SudoRun, String> {
    let plan = plan(command);
    if let Some(why) = plan.self_fed {
        return Err(format!("This command was not run: {why}."));
    }
    let mut run = SudoRun {
        command: command.to_string(),
        input: None,
        password: None,
        mentions: plan.mentions,
    };
    let Some(rewritten) = plan.rewritten else {
        return Ok(run);
    };
    if background {
        return Ok(run);
    }
    let cached = crate::sync::lock(&builtins.sudo_passwords)
        .get(&ctx.session_id)
        .cloned();
    let configured = builtins.config.terminal.sudo_password.clone();
    let password = match (cached.or(configured), &ctx.secrets) {
        (Some(SudoPassword(p)), _) => Some(p),
        (None, Some(asker)) => {
            let shown: String = command.chars().take(120).collect();
            let typed = asker
                .ask_secret(format!("sudo password for: {shown}"), ctx.cancel.clone())
                .await;
            if let Some(p) = &typed {
                crate::sync::lock(&builtins.sudo_passwords)
                    .insert(ctx.session_id.clone(), SudoPassword(p.clone()));
            }
            typed
        }
        (None, None) => None,
    };
    if let Some(password) = password.filter(|p| !p.is_empty()) {
        super::redact::remember_secret(&password);
        run.command = rewritten;
        run.input = Some(format!("{password}\n"));
        run.password = Some(password);
    }
    Ok(run)
}

/// Adds to a finished command's `result` what its sudo needs said: a refused password is
/// forgotten (`sudo_auth_failed`, `sudo_cache_cleared`); a sudo that wanted a password it did
/// not get gets a `hint` saying how to provide one. The password never stays in the output.
pub(crate) fn finish(builtins: &Builtins, ctx: &CallContext, run: &SudoRun, result: &mut Value) {
    if let (Some(password), Some(Value::String(output))) = (&run.password, result.get_mut("output"))
        && password.chars().count() >= 3
        && output.contains(password.as_str())
    {
        *output = output.replace(password.as_str(), "[sudo password]");
    }
    if !run.mentions {
        return;
    }
    let output = result
        .get("output")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if run.password.is_some() {
        if refused_password(&output) {
            let cleared = crate::sync::lock(&builtins.sudo_passwords)
                .remove(&ctx.session_id)
                .is_some();
            result["sudo_auth_failed"] = json!(true);
            if cleared {
                result["sudo_cache_cleared"] = json!(true);
            }
            result["hint"] = json!(if cleared {
                "sudo refused the password the person typed; it was forgotten, and the next sudo command asks again."
            } else {
                "sudo refused SUDO_PASSWORD from troupe's environment file; ask the person to correct it there."
            });
        }
        return;
    }
    if !needed_password(&output) {
        return;
    }
    let hint = if output.contains("no new privileges") {
        "sudo cannot raise privileges inside troupe's boundary on this machine (terminal.confine); ask the person to run it, or to choose a backend where it is allowed.".to_string()
    } else if ctx.secrets.is_some() {
        "troupe asks for sudo's password only when sudo is the command itself (sudo ..., /usr/bin/sudo ..., env VAR=x sudo ...), not inside bash -c, env -S, a variable or after a pipe. Run sudo directly.".to_string()
    } else {
        format!(
            "sudo needs a password, and this session cannot ask for one: subagents and sessions without a person at an interactive troupe chat never prompt. Run the command from the parent session's troupe chat, or have the person add {SUDO_PASSWORD_ENV}=... to troupe's environment file ($TROUPE_HOME/.env). Never put a password in a command or a message."
        )
    };
    result["hint"] = json!(hint);
}
