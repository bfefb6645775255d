//! The plugins compiled into troupe. Like every plugin they are off until enabled; a user or
//! project folder of the same name replaces one.

use super::manifest::Manifest;

/// A plugin compiled into troupe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// Tracks and removes scratch files tools create ([`super::disk_cleanup`]).
    DiskCleanup,
}

/// Every compiled-in plugin.
pub fn all() -> Vec<Builtin> {
    vec![Builtin::DiskCleanup]
}

impl Builtin {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::DiskCleanup => super::disk_cleanup::NAME,
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
        }
    }

    /// What it provides, for listings.
    pub fn provides(self) -> Vec<String> {
        match self {
            Builtin::DiskCleanup => vec![
                "hooks: pre_tool_call, post_tool_call, on_session_end".into(),
                "commands: /disk-cleanup".into(),
            ],
        }
    }
}
