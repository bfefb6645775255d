//! The plugins compiled into troupe. Like every plugin they are off until enabled; a user or
//! project folder of the same name replaces one.

use super::dashboard::DashboardPart;
use super::manifest::Manifest;

/// A plugin compiled into troupe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// Tracks and removes scratch files tools create ([`super::disk_cleanup`]).
    DiskCleanup,
    /// Sends troupe's traces to Langfuse ([`crate::observability::langfuse`]).
    Langfuse,
    /// The achievements tab of the dashboard ([`super::achievements`]).
    Achievements,
}

/// Every compiled-in plugin.
pub fn all() -> Vec<Builtin> {
    vec![
        Builtin::DiskCleanup,
        Builtin::Langfuse,
        Builtin::Achievements,
    ]
}

impl Builtin {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::DiskCleanup => super::disk_cleanup::NAME,
            Builtin::Langfuse => crate::observability::langfuse::NAME,
            Builtin::Achievements => super::achievements::NAME,
        }
    }

    /// Its manifest (name, version, description).
    pub fn manifest(self) -> Manifest {
        match self {
            Builtin::DiskCleanup => Manifest {
                name: self.name().to_string(),
                version: Some("1.0.0".into()),
                description: Some(
                    "Tracks scratch files that tools create in the troupe home or /tmp/troupe-* and removes them by safe rules".into(),
                ),
                ..Manifest::default()
            },
            Builtin::Langfuse => Manifest {
                name: self.name().to_string(),
                version: Some("1.0.0".into()),
                description: Some(
                    "Sends the traces of sessions, turns, model requests and tool calls to Langfuse over OTLP, grouped by troupe's session id".into(),
                ),
                ..Manifest::default()
            },
            Builtin::Achievements => Manifest {
                name: self.name().to_string(),
                version: Some("1.0.0".into()),
                description: Some(
                    "A dashboard tab of tiered badges earned from the stored sessions: tools, subagent trees, board work, approvals, models, hours and streaks".into(),
                ),
                ..Manifest::default()
            },
        }
    }

    /// Its dashboard tab, for a plugin that has one.
    pub fn dashboard(self) -> Option<DashboardPart> {
        match self {
            Builtin::Achievements => Some(super::achievements::dashboard_part()),
            Builtin::DiskCleanup | Builtin::Langfuse => None,
        }
    }

    /// What keeps it from loading in this environment (missing keys), if anything.
    pub fn problems(self) -> Vec<String> {
        match self {
            Builtin::DiskCleanup | Builtin::Achievements => Vec::new(),
            Builtin::Langfuse => crate::observability::langfuse::target()
                .err()
                .into_iter()
                .collect(),
        }
    }

    /// What it provides, for listings.
    pub fn provides(self) -> Vec<String> {
        match self {
            Builtin::DiskCleanup => vec![
                "hooks: pre_tool_call, post_tool_call, on_session_end".into(),
                "commands: /disk-cleanup".into(),
            ],
            Builtin::Langfuse => vec!["traces: OTLP to Langfuse".into()],
            // Its tab is listed from its dashboard part.
            Builtin::Achievements => Vec::new(),
        }
    }
}
