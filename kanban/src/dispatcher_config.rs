//! [`DispatcherConfig`]: how a dispatcher and its workers behave (ticks, leases, heartbeats,
//! caps, stop grace, reminders), with the defaults troupe.yaml's `kanban` section starts from.
//! It sits below the [`dispatcher`](crate::dispatcher) and the [`worker`](crate::worker), which
//! both read it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::domain::DEFAULT_CLAIM_TTL;

/// Default pause between two ticks (`kanban.dispatch_interval_seconds`).
pub const DEFAULT_DISPATCH_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of workers one dispatcher runs at once.
pub const DEFAULT_MAX_IN_PROGRESS: usize = 8;
/// Default pause between two polls of the event log by [`PollWake`](crate::dispatcher::PollWake).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Default time between a soft stop and a hard stop when a run passes its max runtime.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5);
/// Default number of reminders a worker gets when it ends without a terminal board call.
pub const DEFAULT_STOP_NUDGES: u32 = 2;
/// Default pause before a task whose run was rate limited is claimed again by this dispatcher.
pub const DEFAULT_RATE_LIMIT_COOLDOWN: Duration = Duration::from_secs(300);
/// How a dispatcher behaves. Build with [`DispatcherConfig::default`] and the `with_*` methods.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherConfig {
    /// Pause between ticks; each tick runs a full round (reclaim, promote, claim).
    pub interval: Duration,
    /// Lease length of each claim; a running worker extends it by heartbeats.
    pub lease_ttl: Duration,
    /// How often a running worker extends its lease; `None` means a third of `lease_ttl`.
    pub heartbeat_interval: Option<Duration>,
    /// Most workers this dispatcher runs at once (`kanban.max_in_progress`).
    pub max_in_progress: usize,
    /// Most workers per assignee profile, for profiles without their own cap
    /// (`kanban.max_in_progress_per_profile`); `None` is no limit.
    pub max_in_progress_per_assignee: Option<usize>,
    /// Caps for single profiles, overriding `max_in_progress_per_assignee`.
    pub assignee_caps: BTreeMap<String, usize>,
    /// `kanban.failure_limit`: failures before a task is given up, when it sets no
    /// `max_retries` (the store's default is 2).
    pub failure_limit: Option<u32>,
    /// `kanban.dispatch_profiles`: only these profiles are run; `None` runs any known profile.
    pub dispatch_profiles: Option<Vec<String>>,
    /// Time between the soft stop and the hard stop of a run that passed its max runtime.
    pub stop_grace: Duration,
    /// Reminders a worker gets to make its terminal board call before it counts as a protocol
    /// violation.
    pub stop_nudges: u32,
    /// Whether ticks, wake-ups and ending workers start rounds on their own. `false` leaves
    /// claiming to [`DispatcherHandle::dispatch_once`](crate::dispatcher::DispatcherHandle::dispatch_once) (a one-shot `dispatch`).
    pub auto_dispatch: bool,
    /// Pause between two polls of the event log when the default [`PollWake`](crate::dispatcher::PollWake) is used.
    pub poll_interval: Duration,
    /// How long this dispatcher leaves a task alone after its run was rate limited.
    pub rate_limit_cooldown: Duration,
    /// `kanban.worker_assignable_profiles`: profiles a worker may assign the children it
    /// creates to, besides its own profile and the default assignee.
    pub worker_assignable_profiles: Vec<String>,
    /// Threads (actix arbiters) the workers and their sessions run on, taken in turn: with
    /// more than one, a busy board keeps every core working instead of one. `0` or `1` runs
    /// them on the dispatcher's own arbiter.
    pub worker_threads: usize,
}

/// Default number of worker threads: one per core, at most four.
pub fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            interval: DEFAULT_DISPATCH_INTERVAL,
            lease_ttl: DEFAULT_CLAIM_TTL,
            heartbeat_interval: None,
            max_in_progress: DEFAULT_MAX_IN_PROGRESS,
            max_in_progress_per_assignee: None,
            assignee_caps: BTreeMap::new(),
            failure_limit: None,
            dispatch_profiles: None,
            stop_grace: DEFAULT_STOP_GRACE,
            stop_nudges: DEFAULT_STOP_NUDGES,
            auto_dispatch: true,
            poll_interval: DEFAULT_POLL_INTERVAL,
            rate_limit_cooldown: DEFAULT_RATE_LIMIT_COOLDOWN,
            worker_assignable_profiles: Vec::new(),
            worker_threads: default_worker_threads(),
        }
    }
}

impl DispatcherConfig {
    /// Sets how many threads the workers run on (see [`DispatcherConfig::worker_threads`]).
    pub fn with_worker_threads(mut self, threads: usize) -> Self {
        self.worker_threads = threads;
        self
    }

    /// Sets the tick interval.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets the lease length.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets how often workers extend their lease.
    pub fn with_heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = Some(every);
        self
    }

    /// Sets the most workers run at once (at least 1).
    pub fn with_max_in_progress(mut self, max: usize) -> Self {
        self.max_in_progress = max.max(1);
        self
    }

    /// Sets the default per-profile cap.
    pub fn with_max_in_progress_per_assignee(mut self, max: usize) -> Self {
        self.max_in_progress_per_assignee = Some(max);
        self
    }

    /// Caps one profile.
    pub fn with_assignee_cap(mut self, assignee: impl Into<String>, max: usize) -> Self {
        self.assignee_caps.insert(assignee.into(), max);
        self
    }

    /// Sets `kanban.failure_limit`.
    pub fn with_failure_limit(mut self, limit: u32) -> Self {
        self.failure_limit = Some(limit);
        self
    }

    /// Runs only these profiles.
    pub fn with_dispatch_profiles(mut self, profiles: Vec<String>) -> Self {
        self.dispatch_profiles = Some(profiles);
        self
    }

    /// Sets the soft-to-hard stop grace.
    pub fn with_stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// Sets how many reminders a worker gets before a protocol violation.
    pub fn with_stop_nudges(mut self, nudges: u32) -> Self {
        self.stop_nudges = nudges;
        self
    }

    /// Turns automatic rounds on or off.
    pub fn with_auto_dispatch(mut self, auto: bool) -> Self {
        self.auto_dispatch = auto;
        self
    }

    /// Sets the event-log poll interval of the default wake source.
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Sets the pause after a rate-limited run.
    pub fn with_rate_limit_cooldown(mut self, cooldown: Duration) -> Self {
        self.rate_limit_cooldown = cooldown;
        self
    }

    /// Sets the profiles workers may assign their children to (besides their own profile and
    /// the default assignee).
    pub fn with_worker_assignable_profiles(mut self, profiles: Vec<String>) -> Self {
        self.worker_assignable_profiles = profiles;
        self
    }

    /// The heartbeat interval in effect.
    pub fn heartbeat_every(&self) -> Duration {
        self.heartbeat_interval
            .unwrap_or(self.lease_ttl / 3)
            .max(Duration::from_millis(10))
    }

    /// The cap for `assignee`, if any.
    pub(crate) fn cap_for(&self, assignee: &str) -> Option<usize> {
        self.assignee_caps
            .get(assignee)
            .copied()
            .or(self.max_in_progress_per_assignee)
    }

    /// Whether this dispatcher may run `assignee`.
    pub(crate) fn allows(&self, assignee: &str) -> bool {
        self.dispatch_profiles
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| p == assignee))
    }
}
