//! [`SubagentTracker`]: the running subagents of one session tree, shared by every session in
//! it. `delegate_task` records each child as it starts and forgets it when it ends; `list`,
//! `steer` and `stop` look children up here, limited to the caller's own descendants.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use troupe_tools::sync::lock;

use serde_json::{Value, json};

use crate::session::SessionHandle;

/// One running subagent.
#[derive(Debug, Clone)]
pub(crate) struct SubagentRecord {
    /// Its id (`sa-<task index>-<8 hex>`).
    pub subagent_id: String,
    /// Its session.
    pub session: SessionHandle,
    /// The delegation it belongs to.
    pub delegation_id: String,
    /// Position of its task in that call.
    pub task_index: usize,
    /// Its goal.
    pub goal: String,
    /// When it was spawned.
    pub started: Instant,
    /// Tool calls it has started.
    pub activity: Arc<super::run::Activity>,
}

/// The running subagents of a tree. Cheap to share.
#[derive(Debug, Default)]
pub struct SubagentTracker {
    running: Mutex<HashMap<String, SubagentRecord>>,
}

impl SubagentTracker {
    /// An empty tracker, for a new top-level session.
    pub fn new() -> Arc<Self> {
        Arc::new(SubagentTracker::default())
    }

    pub(crate) fn insert(&self, record: SubagentRecord) {
        lock(&self.running).insert(record.subagent_id.clone(), record);
    }

    pub(crate) fn remove(&self, subagent_id: &str) {
        lock(&self.running).remove(subagent_id);
    }

    /// A subagent below `caller` (its child, grandchild, ...), if it is running.
    pub(crate) fn find_below(&self, caller: &str, subagent_id: &str) -> Option<SubagentRecord> {
        lock(&self.running)
            .get(subagent_id)
            .filter(|r| is_below(r, caller))
            .cloned()
    }

    /// How many subagents below `caller` are running.
    pub(crate) fn count_below(&self, caller: &str) -> usize {
        lock(&self.running)
            .values()
            .filter(|r| is_below(r, caller))
            .count()
    }

    /// The running subagents below `caller`, oldest first.
    pub(crate) fn records_below(&self, caller: &str) -> Vec<SubagentRecord> {
        let mut records: Vec<SubagentRecord> = lock(&self.running)
            .values()
            .filter(|r| is_below(r, caller))
            .cloned()
            .collect();
        records.sort_by_key(|r| r.started);
        records
    }

    /// The running subagents below `caller`, oldest first, as the model reads them.
    pub(crate) fn list_below(&self, caller: &str) -> Vec<Value> {
        self.records_below(caller)
            .into_iter()
            .map(|r| {
                let path = r.session.agent_path();
                let caller_at = path.iter().position(|id| id == caller).unwrap_or(0);
                json!({
                    "subagent_id": r.subagent_id,
                    "delegation_id": r.delegation_id,
                    "task_index": r.task_index,
                    "goal": r.goal,
                    "depth_below_you": path.len().saturating_sub(caller_at + 1),
                    "running_seconds": round2(r.started.elapsed().as_secs_f64()),
                    "tool_calls": r.activity.tool_calls(),
                })
            })
            .collect()
    }
}

fn is_below(record: &SubagentRecord, caller: &str) -> bool {
    let path = record.session.agent_path();
    path.iter()
        .position(|id| id == caller)
        .is_some_and(|at| at + 1 < path.len())
}

pub(crate) fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}
