//! The [`BatchPlanner`]: splits one model turn's tool calls into ordered segments that run in
//! parallel or one by one, judging each call by its underlying tool (a `tool_call` bridge call
//! is unwrapped by the session before it gets here). Call order never changes: a call never
//! starts before an earlier barrier has finished. The tool runner executes the plan.
//!
//! A tool is judged by the [`ToolHints`] its definition declares, never by its name: an MCP
//! server may call a tool anything, `read_file` included. A tool that declares nothing runs
//! alone; a tool written in code declares [`ToolHints::parallel`] unless it says otherwise
//! (`exclusive`, or path and resource arguments that may collide). The built-ins declare theirs
//! in `troupe_tools::builtin::hints_of`.
//!
//! Planning is pure apart from resolving paths on disk (canonicalising them, following
//! symlinks), which is blocking work. So a session reads on its own side what each call claims
//! ([`Claim`]: a barrier, free, or the paths it reads or writes) and asks [`Planners`], a small
//! pool of sync planner actors shared by every session of an actix `System`, to resolve the
//! paths and cut the segments. A batch of one call has nothing to order and is planned in place.

use std::path::{Path, PathBuf};

use actix::prelude::*;
use serde_json::{Map, Value};
use troupe_tools::builtin::resolve_path;
use troupe_tools::{ToolHints, ToolKind, ToolsetView};

use crate::call::{CallEntry, CallTarget};

/// Whether a segment's calls run together or one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// All calls of the segment may run at once.
    Parallel,
    /// The calls run one at a time, in order.
    Sequential,
}

/// A run of calls, by their index in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// How they run.
    pub kind: SegmentKind,
    /// Indices into the batch, ascending.
    pub calls: Vec<usize>,
}

/// The ordered segments of one batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// In execution order; together they hold every call exactly once.
    pub segments: Vec<Segment>,
}

impl Plan {
    /// `n` calls one after another, in order (how a single call always runs).
    pub fn one_by_one(n: usize) -> Plan {
        Plan {
            segments: if n == 0 {
                Vec::new()
            } else {
                vec![Segment {
                    kind: SegmentKind::Sequential,
                    calls: (0..n).collect(),
                }]
            },
        }
    }

    /// True when the whole batch is one parallel segment.
    pub fn fully_parallel(&self) -> bool {
        matches!(self.segments.as_slice(), [only] if only.kind == SegmentKind::Parallel)
    }

    /// The segments as `(kind, indices)` pairs, for compact assertions and logs.
    pub fn shape(&self) -> Vec<(SegmentKind, Vec<usize>)> {
        self.segments
            .iter()
            .map(|s| (s.kind, s.calls.clone()))
            .collect()
    }
}

/// What the planner needs to know about one call.
#[derive(Debug, Clone, Copy)]
pub struct PlanCall<'a> {
    /// The underlying tool's name, for logs: the planner does not judge by it.
    pub name: &'a str,
    /// The arguments, when they parsed as a JSON object; `None` makes the call a barrier.
    pub arguments: Option<&'a Map<String, Value>>,
    /// The tool's hints, when the view knows the tool.
    pub hints: Option<&'a ToolHints>,
    /// The tool's kind, when the view knows the tool.
    pub kind: Option<ToolKind>,
}

/// What one call claims, read from its hints and arguments without touching the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Runs alone.
    Barrier,
    /// May run beside any other call that may.
    Free,
    /// Touches these paths and resources, as written in its arguments; a writer excludes every
    /// call that overlaps it, a reader only overlapping writers.
    Paths {
        /// The paths, unresolved.
        raw: Vec<String>,
        /// The resources it names, as `argument=value` keys (equal keys collide).
        resources: Vec<String>,
        /// Whether it writes them.
        writer: bool,
    },
}

/// How one call may take part in a run.
#[derive(Debug, Clone, PartialEq)]
enum Admission {
    /// Runs alone.
    Barrier,
    /// May join a run; `paths` are the canonical paths it touches and `resources` the resource
    /// keys it names (both empty when unscoped).
    Admitted {
        paths: Vec<PathBuf>,
        resources: Vec<String>,
        writer: bool,
    },
}

/// Splits a turn's calls into segments. Relative paths resolve against `cwd`.
#[derive(Debug, Clone)]
pub struct BatchPlanner {
    /// The directory relative paths are taken from (the session's working directory).
    pub cwd: PathBuf,
}

impl BatchPlanner {
    /// A planner resolving relative paths against `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        BatchPlanner { cwd: cwd.into() }
    }

    /// Plans calls described by [`PlanCall`]s.
    pub fn plan(&self, calls: &[PlanCall<'_>]) -> Plan {
        let claims: Vec<Claim> = calls.iter().map(claim).collect();
        self.plan_claims(&claims)
    }

    /// Plans calls by their claims: resolves their paths on disk and cuts the segments.
    pub fn plan_claims(&self, claims: &[Claim]) -> Plan {
        let mut builder = Builder::default();
        for (index, claim) in claims.iter().enumerate() {
            match self.admit(claim) {
                Admission::Barrier => builder.barrier(index),
                Admission::Admitted {
                    paths,
                    resources,
                    writer,
                } => builder.admit(index, paths, resources, writer),
            }
        }
        builder.finish()
    }

    fn admit(&self, claim: &Claim) -> Admission {
        match claim {
            Claim::Barrier => Admission::Barrier,
            Claim::Free => Admission::Admitted {
                paths: Vec::new(),
                resources: Vec::new(),
                writer: false,
            },
            Claim::Paths {
                raw,
                resources,
                writer,
            } => {
                // A call that names nothing it touches (its paths all blank) cannot be placed:
                // it runs alone.
                let paths = self.canonical_all(raw);
                if paths.is_empty() && resources.is_empty() {
                    Admission::Barrier
                } else {
                    Admission::Admitted {
                        paths,
                        resources: resources.clone(),
                        writer: *writer,
                    }
                }
            }
        }
    }

    fn canonical_all(&self, raw: &[String]) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for path in raw {
            if let Some(canonical) = self.canonical(path)
                && !out.contains(&canonical)
            {
                out.push(canonical);
            }
        }
        out
    }

    /// `~` expanded, made absolute against the cwd, `.`/`..` folded and symlinks resolved on the
    /// longest existing prefix: the same resolution the file tools apply before they touch a
    /// path. `None` for an empty path.
    fn canonical(&self, raw: &str) -> Option<PathBuf> {
        let raw = raw.trim();
        (!raw.is_empty()).then(|| resolve_path(raw, &self.cwd))
    }
}

/// What `call` claims (see [`Claim`]), by its declared hints alone.
pub fn claim(call: &PlanCall<'_>) -> Claim {
    // Unknown to the view, talking to a person, or asking to be alone: runs alone.
    let Some(hints) = call.hints.filter(|h| !h.interactive && !h.exclusive) else {
        return Claim::Barrier;
    };
    let Some(arguments) = call.arguments else {
        return Claim::Barrier;
    };
    let writer = !hints.read_only;
    let resources = match resource_keys(hints, arguments) {
        Some(keys) if keys.is_empty() => return Claim::Barrier,
        Some(keys) => keys,
        None => Vec::new(),
    };
    if let Some(raw) = scoped_paths(hints, arguments) {
        // A path-scoped call that names no path cannot be placed.
        if raw.is_empty() {
            return Claim::Barrier;
        }
        return Claim::Paths {
            raw,
            resources,
            writer,
        };
    }
    if !resources.is_empty() {
        return Claim::Paths {
            raw: Vec::new(),
            resources,
            writer,
        };
    }
    if hints.parallel_safe || hints.read_only {
        return Claim::Free;
    }
    Claim::Barrier
}

/// The resources a call names, as `argument=value` keys; `None` when its hints declare no
/// resource argument, empty when it gives none of them (it cannot be placed). A value is keyed
/// by its JSON text, so `7` and `"7"` are different resources, as the tool sees them.
fn resource_keys(hints: &ToolHints, arguments: &Map<String, Value>) -> Option<Vec<String>> {
    if hints.resource_args.is_empty() {
        return None;
    }
    let mut keys = Vec::new();
    for name in &hints.resource_args {
        match arguments.get(name) {
            None | Some(Value::Null) => {}
            Some(value) => keys.push(format!("{name}={value}")),
        }
    }
    Some(keys)
}

/// The claims of a session's call entries, judged by their underlying tools in `view`.
pub fn claims_of(entries: &[CallEntry], view: &ToolsetView) -> Vec<Claim> {
    entries
        .iter()
        .map(|entry| match &entry.target {
            // The session answers these from its catalog, which they only read.
            CallTarget::Lookup { .. } => Claim::Free,
            CallTarget::Invalid { .. } => Claim::Barrier,
            target => {
                let def = view.get(entry.underlying());
                claim(&PlanCall {
                    name: entry.underlying(),
                    arguments: target.arguments(),
                    hints: def.map(|d| &d.hints),
                    kind: def.map(|d| d.kind),
                })
            }
        })
        .collect()
}

/// The paths a path-scoped call touches; `None` when its hints name no path argument. A tool
/// that does not declare `read_only` writes the paths it names.
fn scoped_paths(hints: &ToolHints, arguments: &Map<String, Value>) -> Option<Vec<String>> {
    let string_arg = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if let Some(patch) = &hints.patch_paths
        && string_arg(&patch.mode_arg).as_deref() == Some(patch.mode_value.as_str())
    {
        // The patch names the files; a path argument beside it is ignored, as the tool does.
        let body = string_arg(&patch.body_arg).unwrap_or_default();
        return Some(v4a_paths(&body));
    }
    if hints.path_args.is_empty() {
        return None;
    }
    let mut paths: Vec<String> = hints
        .path_args
        .iter()
        .filter_map(|key| string_arg(key))
        .collect();
    if paths.is_empty()
        && let Some(default) = &hints.default_path
    {
        paths.push(default.clone());
    }
    Some(paths)
}

/// Every file a V4A patch body names: update, add and delete headers, and both ends of a move.
fn v4a_paths(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in body.lines() {
        let Some(rest) = line.trim_start().strip_prefix("***") else {
            continue;
        };
        let rest = rest.trim_start();
        for header in ["Update File:", "Add File:", "Delete File:"] {
            if let Some(path) = rest.strip_prefix(header) {
                out.push(path.trim().to_string());
            }
        }
        if let Some(mv) = rest.strip_prefix("Move File:") {
            for part in mv.split("->") {
                out.push(part.trim().to_string());
            }
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// Whether two canonical paths overlap: equal, or one is an ancestor of the other.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Builds segments from admissions, in order.
#[derive(Default)]
struct Builder {
    segments: Vec<Segment>,
    run: Vec<usize>,
    reserved: Vec<(PathBuf, bool)>,
    reserved_resources: Vec<(String, bool)>,
}

impl Builder {
    fn barrier(&mut self, index: usize) {
        self.close_run();
        self.push_sequential(vec![index]);
    }

    fn admit(&mut self, index: usize, paths: Vec<PathBuf>, resources: Vec<String>, writer: bool) {
        let path_conflict = paths.iter().any(|p| {
            self.reserved
                .iter()
                .any(|(r, r_writer)| (writer || *r_writer) && overlaps(p, r))
        });
        let resource_conflict = resources.iter().any(|key| {
            self.reserved_resources
                .iter()
                .any(|(r, r_writer)| (writer || *r_writer) && r == key)
        });
        if path_conflict || resource_conflict {
            self.close_run();
        }
        self.run.push(index);
        self.reserved.extend(paths.into_iter().map(|p| (p, writer)));
        self.reserved_resources
            .extend(resources.into_iter().map(|r| (r, writer)));
    }

    fn close_run(&mut self) {
        let run = std::mem::take(&mut self.run);
        self.reserved.clear();
        self.reserved_resources.clear();
        match run.len() {
            0 => {}
            1 => self.push_sequential(run),
            _ => self.segments.push(Segment {
                kind: SegmentKind::Parallel,
                calls: run,
            }),
        }
    }

    fn push_sequential(&mut self, calls: Vec<usize>) {
        if let Some(last) = self.segments.last_mut()
            && last.kind == SegmentKind::Sequential
        {
            last.calls.extend(calls);
            return;
        }
        self.segments.push(Segment {
            kind: SegmentKind::Sequential,
            calls,
        });
    }

    fn finish(mut self) -> Plan {
        self.close_run();
        Plan {
            segments: self.segments,
        }
    }
}

/// Sync planner actors per actix `System`: planning blocks on the disk, so it runs here, off
/// the threads that drive sessions.
pub const PLANNER_THREADS: usize = 2;

/// One planner actor of the pool: it holds nothing; each request brings its working directory.
pub struct PlannerWorker;

impl Actor for PlannerWorker {
    type Context = SyncContext<Self>;
}

/// Asks a planner worker to plan a batch by its calls' claims.
#[derive(Debug, Message)]
#[rtype(result = "Plan")]
pub struct PlanBatch {
    /// The directory relative paths are taken from.
    pub cwd: PathBuf,
    /// One claim per call, in emission order.
    pub claims: Vec<Claim>,
}

impl Handler<PlanBatch> for PlannerWorker {
    type Result = MessageResult<PlanBatch>;

    fn handle(&mut self, msg: PlanBatch, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(BatchPlanner::new(msg.cwd).plan_claims(&msg.claims))
    }
}

/// Starts the planner workers once per `System` and hands their address to each session.
#[derive(Default)]
pub struct PlannerPool {
    workers: Option<Addr<PlannerWorker>>,
}

impl Actor for PlannerPool {
    type Context = Context<Self>;
}

impl Supervised for PlannerPool {}

impl SystemService for PlannerPool {
    fn service_started(&mut self, _ctx: &mut Context<Self>) {
        self.workers = Some(SyncArbiter::start(PLANNER_THREADS, || PlannerWorker));
    }
}

/// Asks the pool for its workers' address.
#[derive(Debug, Message)]
#[rtype(result = "Option<Addr<PlannerWorker>>")]
struct Workers;

impl Handler<Workers> for PlannerPool {
    type Result = Option<Addr<PlannerWorker>>;

    fn handle(&mut self, _msg: Workers, _ctx: &mut Self::Context) -> Self::Result {
        self.workers.clone()
    }
}

/// A session's way to its `System`'s planner pool, with the session's working directory.
#[derive(Debug, Clone)]
pub struct Planners {
    workers: Option<Addr<PlannerWorker>>,
    cwd: PathBuf,
}

impl Planners {
    /// The current `System`'s pool (started on first use), planning against `cwd`. Must run
    /// inside a `System`.
    pub async fn of_system(cwd: impl Into<PathBuf>) -> Planners {
        let workers = match PlannerPool::from_registry().send(Workers).await {
            Ok(workers) => workers,
            Err(error) => {
                tracing::warn!(%error, "the planner pool did not answer; batches will run one call at a time");
                None
            }
        };
        Planners {
            workers,
            cwd: cwd.into(),
        }
    }

    /// Plans a session's call entries, judged by their underlying tools in `view`. The claims
    /// are read now; the future only waits for the pool. Should the pool be gone (its `System`
    /// stopping), every call runs alone: slower, never unsafe.
    pub fn plan(
        &self,
        entries: &[CallEntry],
        view: &ToolsetView,
    ) -> impl Future<Output = Plan> + Send + 'static {
        let n = entries.len();
        // A batch of one has nothing to order.
        let request = (n > 1).then(|| PlanBatch {
            cwd: self.cwd.clone(),
            claims: claims_of(entries, view),
        });
        let workers = self.workers.clone();
        async move {
            let (Some(request), Some(workers)) = (request, workers) else {
                return Plan::one_by_one(n);
            };
            match workers.send(request).await {
                Ok(plan) => plan,
                Err(error) => {
                    tracing::warn!(%error, "the planner pool did not answer; this batch runs one call at a time");
                    Plan::one_by_one(n)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
