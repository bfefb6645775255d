//! One board worker's profile as the runtime builds it from its `profiles:` entry: its model,
//! tools, session settings and, when it has `review:`, who reviews its completions (the
//! reviewer profile is built here too, whether or not this process dispatches it).

use std::sync::Arc;

use troupe_kanban::profiles::WorkerProfile;
use troupe_kanban::review::ReviewPolicy;
use troupe_tools::memory::MemoryStore;

use super::{Runtime, RuntimeError, invalid, profile_view};
use crate::settings::ProfileSettings;
use crate::settings::review::ReviewSetting;

impl Runtime {
    /// The worker profile `name` (`p` its settings), with its review policy.
    pub(super) fn worker_profile(
        &self,
        name: &str,
        p: &ProfileSettings,
    ) -> Result<WorkerProfile, RuntimeError> {
        let profile = self.bare_worker_profile(name, p)?;
        let review = match &p.review {
            None => return Ok(profile),
            Some(ReviewSetting::Person) => ReviewPolicy::Person,
            Some(ReviewSetting::Agent {
                profile: reviewer,
                max_rounds,
            }) => {
                let settings = self.inner.config.kanban.profiles.get(reviewer).ok_or_else(|| {
                    invalid(
                        &format!("profiles.{name}.review"),
                        format!("names the reviewer profile {reviewer:?}, which is not under profiles:"),
                    )
                })?;
                ReviewPolicy::Agent {
                    reviewer: Arc::new(self.bare_worker_profile(reviewer, settings)?),
                    max_rounds: *max_rounds,
                }
            }
        };
        Ok(profile.with_review(review))
    }

    /// The profile without its review policy (a reviewer's own `review:` is not followed: it
    /// reviews, it does not complete tasks).
    fn bare_worker_profile(
        &self,
        name: &str,
        p: &ProfileSettings,
    ) -> Result<WorkerProfile, RuntimeError> {
        let provider = p
            .provider(&self.inner.config.model, &self.inner.config.home)
            .map_err(|problem| invalid(&format!("profiles.{name}"), problem))?;
        let view = profile_view(self.registry(), p)?;
        let mut session = p.session_config(&self.inner.worker_session);
        session.memory = Some(Arc::new(MemoryStore::in_home(
            &self.inner.config.home,
            Some(name),
        )));
        // Workers' conversations are kept like any session's, readable after the run.
        session.persist =
            self.inner
                .troupe
                .session_store()
                .map(|store| troupe_actors::journal::Persist {
                    journal: Arc::new(store.clone()),
                    origin: troupe_actors::journal::Origin {
                        kind: "worker".into(),
                        options: serde_json::json!({"profile": name}),
                    },
                });
        Ok(WorkerProfile::new(name, provider, view).with_session_config(session))
    }
}
