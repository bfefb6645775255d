//! What a session did, summed up without reading its transcript: its row, how often it called
//! each tool (counted in the store from the tool results' names) and how many approvals its
//! event log asked for. Read in batches by id, so a scan over thousands of sessions (the
//! achievements plugin) reads only the sessions that changed since it last looked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Backend, SessionStore, SessionStoreError, SessionSummary, blocking};

/// A session's identity for change detection: when it started and when it was last written.
/// A session whose fingerprint is unchanged has nothing new to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Milliseconds since the Unix epoch when it was opened.
    pub started: i64,
    /// Milliseconds since the Unix epoch of its latest write.
    pub last_active: i64,
}

/// One session's activity, summed up in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionActivity {
    /// Its row.
    pub summary: SessionSummary,
    /// Tool name -> how many results it got from that tool.
    pub tools: BTreeMap<String, u64>,
    /// Approvals its event log asked a person for.
    pub approvals: u64,
}

/// The most ids one [`SessionStore::activity`] read takes (larger lists are read in slices).
pub const ACTIVITY_SLICE: usize = 500;

/// The event text marking an approval request in a stored event log.
pub(crate) const APPROVAL_EVENT: &str = "%\"type\":\"approval_requested\"%";

impl SessionStore {
    /// Every stored session's id and [`Fingerprint`], subagents included, oldest first.
    pub async fn fingerprints(&self) -> Result<Vec<(String, Fingerprint)>, SessionStoreError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let db = std::sync::Arc::clone(db);
                blocking(move || db.fingerprints()).await
            }
            Backend::Postgres(db) => db.fingerprints().await,
        }
    }

    /// The activity of the sessions `ids` (ids not stored are left out), in no set order.
    pub async fn activity(
        &self,
        ids: &[String],
    ) -> Result<Vec<SessionActivity>, SessionStoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for slice in ids.chunks(ACTIVITY_SLICE) {
            let slice = slice.to_vec();
            let read = match &self.backend {
                Backend::Sqlite(db) => {
                    let db = std::sync::Arc::clone(db);
                    blocking(move || db.activity(&slice)).await?
                }
                Backend::Postgres(db) => db.activity(&slice).await?,
            };
            out.extend(read);
        }
        Ok(out)
    }
}

/// Joins rows, tool counts and approval counts read separately into activities.
pub(crate) fn assemble(
    summaries: Vec<SessionSummary>,
    tools: Vec<(String, String, u64)>,
    approvals: Vec<(String, u64)>,
) -> Vec<SessionActivity> {
    let mut by_id: BTreeMap<String, SessionActivity> = summaries
        .into_iter()
        .map(|summary| {
            (
                summary.id.clone(),
                SessionActivity {
                    summary,
                    tools: BTreeMap::new(),
                    approvals: 0,
                },
            )
        })
        .collect();
    for (id, tool, count) in tools {
        if let Some(activity) = by_id.get_mut(&id) {
            *activity.tools.entry(tool).or_default() += count;
        }
    }
    for (id, count) in approvals {
        if let Some(activity) = by_id.get_mut(&id) {
            activity.approvals += count;
        }
    }
    by_id.into_values().collect()
}
