//! The one error type of the command line, and its exit codes, in one place: 0 done, 1 refused
//! or failed, 2 bad input or config, 3 a budget ran out (130 when a person interrupted the run). Every subcommand
//! returns [`CliError`] for what went wrong; [`report`] prints it the same way everywhere.

use troupe_kanban::store::StoreError;

use crate::runtime::RuntimeError;
use crate::settings::ConfigError;

/// The command did what was asked.
pub(crate) const EXIT_DONE: i32 = 0;
/// The command was refused or failed (a model, a server, a store, a task).
pub(crate) const EXIT_FAILED: i32 = 1;
/// The command line, a file or the config was wrong; the message says what to write instead.
pub(crate) const EXIT_BAD_INPUT: i32 = 2;
/// A budget ran out: what was printed is what the work had when it stopped.
pub(crate) const EXIT_BUDGET: i32 = 3;
/// A person stopped the run (Ctrl-C).
pub(crate) const EXIT_INTERRUPTED: i32 = 130;

/// What went wrong, with its exit code and the message for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliError {
    /// The exit code: [`EXIT_FAILED`] or [`EXIT_BAD_INPUT`].
    pub(crate) code: i32,
    /// What went wrong and what to do instead.
    pub(crate) message: String,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl CliError {
    /// Bad input or config (exit code 2).
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_BAD_INPUT,
            message: message.into(),
        }
    }

    /// Refused or failed (exit code 1).
    pub(crate) fn failed(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> CliError {
        CliError::usage(e.to_string())
    }
}

impl From<RuntimeError> for CliError {
    fn from(e: RuntimeError) -> CliError {
        match e {
            RuntimeError::Config(e) => CliError::usage(e.to_string()),
            RuntimeError::Unaccepted(change) => CliError::usage(change.to_string()),
            RuntimeError::Start(message) => CliError::failed(message),
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> CliError {
        let code = match e {
            StoreError::Invalid(_) => EXIT_BAD_INPUT,
            _ => EXIT_FAILED,
        };
        CliError {
            code,
            message: e.to_string(),
        }
    }
}

impl From<crate::api::TroupeError> for CliError {
    fn from(e: crate::api::TroupeError) -> CliError {
        use crate::api::TroupeError;
        match e {
            TroupeError::UnknownProfile { .. } | TroupeError::Setup(_) => {
                CliError::usage(e.to_string())
            }
            other => CliError::failed(other.to_string()),
        }
    }
}

/// The exit code of a finished command: its own code when it ran, else the error's, printed
/// as `troupe <command>: <message>` on stderr.
pub(crate) fn report(command: &str, result: Result<i32, CliError>) -> i32 {
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("troupe {command}: {}", error.message);
            error.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_kind_of_error() {
        let config = RuntimeError::Config(ConfigError::Invalid {
            key: "k".into(),
            problem: "p".into(),
        });
        assert_eq!(CliError::from(config).code, EXIT_BAD_INPUT);
        assert_eq!(
            CliError::from(RuntimeError::Start("x".into())).code,
            EXIT_FAILED
        );
        assert_eq!(report("x", Ok(EXIT_DONE)), 0);
        assert_eq!(report("x", Err(CliError::usage("bad"))), 2);
    }
}
