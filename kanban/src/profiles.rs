//! Worker profiles: the named agent configurations a task's `assignee` refers to.
//!
//! A [`WorkerProfile`] is what a worker needs to run a session: the model, the tools it may use
//! and the session settings (with its system prompt). [`Profiles`] holds them by name together
//! with `kanban.default_assignee`. The orchestrator builds both from `troupe.yaml`; the
//! dispatcher reads them to decide whom a ready task goes to.

use std::collections::BTreeMap;
use std::sync::Arc;

use troupe_actors::model::ModelProvider;
use troupe_actors::session::SessionConfig;
use troupe_tools::ToolsetView;

/// One named agent configuration that can run tasks.
#[derive(Clone)]
pub struct WorkerProfile {
    /// The profile's name, as written in a task's `assignee`.
    pub name: String,
    /// The model the worker talks to.
    pub provider: Arc<dyn ModelProvider>,
    /// The tools the worker may use besides its task-bound kanban tools.
    pub view: ToolsetView,
    /// Session settings; the worker's protocol guidance is appended to its system prompt.
    pub session: SessionConfig,
    /// Whether its completions wait for review instead of going straight to `done`.
    pub review: Option<crate::review::ReviewPolicy>,
    /// Its workers' tools, made once and shared by its workers (clones share it too).
    pub(crate) catalog: crate::worker_catalog::WorkerCatalog,
}

impl std::fmt::Debug for WorkerProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerProfile")
            .field("name", &self.name)
            .field("provider", &self.provider.describe())
            .field("tools", &self.view.len())
            .field("review", &self.review)
            .finish_non_exhaustive()
    }
}

impl WorkerProfile {
    /// A profile with default session settings.
    pub fn new(
        name: impl Into<String>,
        provider: Arc<dyn ModelProvider>,
        view: ToolsetView,
    ) -> WorkerProfile {
        WorkerProfile {
            name: name.into(),
            provider,
            view,
            session: SessionConfig::default(),
            review: None,
            catalog: crate::worker_catalog::WorkerCatalog::default(),
        }
    }

    /// Makes its completions wait for review (see [`crate::review`]).
    pub fn with_review(mut self, review: crate::review::ReviewPolicy) -> WorkerProfile {
        self.review = Some(review);
        self
    }

    /// Replaces the session settings.
    pub fn with_session_config(mut self, session: SessionConfig) -> WorkerProfile {
        self.session = session;
        self
    }

    /// Sets the system prompt (the worker guidance is added after it).
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> WorkerProfile {
        self.session.system_prompt = Some(prompt.into());
        self
    }
}

/// Why a ready task has no profile to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrunnable {
    /// The task has no assignee and there is no usable default assignee.
    Unassigned,
    /// The assignee names no known profile (or one outside the dispatch allowlist).
    NotSpawnable(String),
}

/// Every profile of the process, by name, and the default assignee for unassigned tasks.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    by_name: BTreeMap<String, Arc<WorkerProfile>>,
    default_assignee: Option<String>,
}

impl Profiles {
    /// No profiles and no default assignee.
    pub fn new() -> Profiles {
        Profiles::default()
    }

    /// Adds (or replaces) a profile.
    pub fn with_profile(mut self, profile: WorkerProfile) -> Profiles {
        self.insert(profile);
        self
    }

    /// Adds (or replaces) a profile in place.
    pub fn insert(&mut self, profile: WorkerProfile) {
        self.by_name.insert(profile.name.clone(), Arc::new(profile));
    }

    /// Sets `kanban.default_assignee`: the profile unassigned tasks go to.
    pub fn with_default_assignee(mut self, name: impl Into<String>) -> Profiles {
        self.default_assignee = Some(name.into());
        self
    }

    /// The default assignee as configured (it may name no known profile).
    pub fn default_assignee(&self) -> Option<&str> {
        self.default_assignee.as_deref()
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<WorkerProfile>> {
        self.by_name.get(name)
    }

    /// Every profile name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    /// Whether there is no profile at all.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The profile that runs a task assigned to `assignee`: the named profile, or the default
    /// assignee's for an unassigned task.
    pub fn resolve(&self, assignee: Option<&str>) -> Result<&Arc<WorkerProfile>, Unrunnable> {
        match assignee {
            Some(name) => self
                .get(name)
                .ok_or_else(|| Unrunnable::NotSpawnable(name.to_string())),
            None => self
                .default_assignee
                .as_deref()
                .and_then(|name| self.get(name))
                .ok_or(Unrunnable::Unassigned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_actors::model::{Script, ScriptedProvider};
    use troupe_tools::Registry;

    fn profile(name: &str) -> WorkerProfile {
        let provider = Arc::new(ScriptedProvider::new(Script::new()));
        WorkerProfile::new(name, provider, Registry::new().view_all())
    }

    #[test]
    fn resolves_named_default_and_unknown_assignees() {
        let profiles = Profiles::new()
            .with_profile(profile("coder"))
            .with_default_assignee("coder");
        assert_eq!(
            profiles.resolve(Some("coder")).map(|p| p.name.as_str()),
            Ok("coder")
        );
        assert_eq!(profiles.resolve(None).map(|p| p.name.as_str()), Ok("coder"));
        assert_eq!(
            profiles.resolve(Some("ghost")).map(|p| p.name.clone()),
            Err(Unrunnable::NotSpawnable("ghost".into()))
        );
        let no_default = Profiles::new().with_profile(profile("coder"));
        assert_eq!(
            no_default.resolve(None).map(|p| p.name.clone()),
            Err(Unrunnable::Unassigned)
        );
        let bad_default = Profiles::new().with_default_assignee("ghost");
        assert_eq!(
            bad_default.resolve(None).map(|p| p.name.clone()),
            Err(Unrunnable::Unassigned)
        );
    }
}
