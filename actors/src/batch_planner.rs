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
mod tests {
    use super::SegmentKind::{Parallel as P, Sequential as S};
    use super::*;
    use serde_json::json;
    use troupe_tools::builtin::hints_of;
    use troupe_tools::{Registry, ToolDef, ViewSpec};

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// Plans `(name, arguments, hints)` triples with the cwd at `dir`.
    fn plan_in(
        dir: &Path,
        calls: &[(&str, Option<Value>, Option<ToolHints>)],
    ) -> Vec<(SegmentKind, Vec<usize>)> {
        let arguments: Vec<Option<Map<String, Value>>> =
            calls.iter().map(|(_, a, _)| a.clone().map(args)).collect();
        let plan_calls: Vec<PlanCall<'_>> = calls
            .iter()
            .zip(&arguments)
            .map(|((name, _, hints), arguments)| PlanCall {
                name,
                arguments: arguments.as_ref(),
                hints: hints.as_ref(),
                kind: None,
            })
            .collect();
        BatchPlanner::new(dir).plan(&plan_calls).shape()
    }

    fn plan(calls: &[(&str, Option<Value>, Option<ToolHints>)]) -> Vec<(SegmentKind, Vec<usize>)> {
        let dir = tempfile::tempdir().unwrap();
        plan_in(dir.path(), calls)
    }

    /// A call to the built-in `name`, with the hints troupe-tools declares for it.
    fn builtin(
        name: &'static str,
        arguments: Value,
    ) -> (&'static str, Option<Value>, Option<ToolHints>) {
        (name, Some(arguments), Some(hints_of(name)))
    }

    fn read(path: &str) -> (&'static str, Option<Value>, Option<ToolHints>) {
        builtin("read_file", json!({ "path": path }))
    }

    fn write(path: &str) -> (&'static str, Option<Value>, Option<ToolHints>) {
        builtin("write_file", json!({ "path": path, "content": "x" }))
    }

    /// What a web search would declare, were troupe to ship one: it only reads.
    fn web_search_hints() -> ToolHints {
        ToolHints {
            read_only: true,
            parallel_safe: true,
            ..ToolHints::default()
        }
    }

    /// What a tool that asks a person (`clarify`) would declare.
    fn clarify_hints() -> ToolHints {
        ToolHints {
            interactive: true,
            ..ToolHints::default()
        }
    }

    #[test]
    fn two_reads_of_different_files_run_together() {
        assert_eq!(plan(&[read("a"), read("b")]), vec![(P, vec![0, 1])]);
    }

    #[test]
    fn two_reads_of_one_file_still_run_together() {
        assert_eq!(plan(&[read("a"), read("a")]), vec![(P, vec![0, 1])]);
    }

    #[test]
    fn read_then_write_of_one_file_runs_in_order() {
        assert_eq!(plan(&[read("a"), write("a")]), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn two_writers_to_one_file_run_in_order() {
        assert_eq!(plan(&[write("a"), write("a")]), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn writers_to_different_files_run_together() {
        assert_eq!(plan(&[write("a"), write("b")]), vec![(P, vec![0, 1])]);
    }

    #[test]
    fn web_then_terminal_is_sequential() {
        let calls = [
            (
                "web_search",
                Some(json!({ "query": "x" })),
                Some(web_search_hints()),
            ),
            builtin("terminal", json!({ "command": "ls" })),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn clarify_splits_readers_into_two_parallel_runs() {
        let calls = [
            read("a"),
            read("b"),
            (
                "clarify",
                Some(json!({ "question": "?" })),
                Some(clarify_hints()),
            ),
            read("c"),
            read("d"),
        ];
        assert_eq!(
            plan(&calls),
            vec![(P, vec![0, 1]), (S, vec![2]), (P, vec![3, 4])]
        );
    }

    #[test]
    fn unparseable_or_non_object_arguments_are_barriers() {
        let calls = [
            read("a"),
            ("read_file", None, Some(hints_of("read_file"))),
            read("b"),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1, 2])]);
    }

    #[test]
    fn interactive_tools_are_barriers() {
        let hints = ToolHints {
            interactive: true,
            parallel_safe: true,
            ..ToolHints::default()
        };
        let calls = [
            read("a"),
            ("ask_human", Some(json!({})), Some(hints)),
            read("b"),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1, 2])]);
    }

    #[test]
    fn unknown_tools_are_barriers() {
        let calls = [("some_plugin_tool", Some(json!({})), None), read("a")];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn mcp_tools_need_the_server_opt_in_or_a_read_only_annotation() {
        let opted = ToolHints {
            parallel_safe: true,
            ..ToolHints::default()
        };
        let read_only = ToolHints {
            read_only: true,
            ..ToolHints::default()
        };
        let calls = [
            ("mcp__a__x", Some(json!({})), Some(opted.clone())),
            ("mcp__a__y", Some(json!({})), Some(opted)),
            ("mcp__b__z", Some(json!({})), Some(read_only)),
            ("mcp__c__w", Some(json!({})), Some(ToolHints::default())),
        ];
        assert_eq!(plan(&calls), vec![(P, vec![0, 1, 2]), (S, vec![3])]);
    }

    /// A call entry of `target`, `index`-th in its batch.
    fn entry(index: usize, tool: &str, target: CallTarget) -> CallEntry {
        CallEntry {
            index,
            call_id: format!("c{index}"),
            model_call_id: format!("m{index}"),
            tool: tool.to_string(),
            target,
        }
    }

    fn lookup(index: usize, name: &str) -> CallEntry {
        entry(
            index,
            name,
            CallTarget::Lookup {
                name: name.to_string(),
                arguments: Map::new(),
                run: Box::new(|_| Box::pin(async { troupe_tools::ToolResult::text("") })),
            },
        )
    }

    fn tool(index: usize, name: &str, arguments: Value) -> CallEntry {
        entry(
            index,
            name,
            CallTarget::Tool {
                name: name.to_string(),
                arguments: args(arguments),
            },
        )
    }

    #[test]
    fn bridge_lookups_run_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let view = Registry::with_tools([]).view(ViewSpec::all()).unwrap();
        let entries = [lookup(0, "tool_search"), lookup(1, "tool_describe")];
        let claims = claims_of(&entries, &view);
        assert_eq!(claims, vec![Claim::Free, Claim::Free]);
        assert_eq!(
            BatchPlanner::new(dir.path()).plan_claims(&claims).shape(),
            vec![(P, vec![0, 1])]
        );
    }

    #[test]
    fn an_mcp_tool_named_like_a_builtin_reader_is_judged_by_its_hints_not_its_name() {
        // A server may call its tool `read_file`; without annotations or the server's opt-in
        // it declares nothing, like an unknown tool.
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::with_tools([
            ToolDef::new("read_file", "Reads whatever the server likes.", json!({}))
                .with_toolset("mcp-files")
                .with_kind(ToolKind::Mcp)
                .with_hints(ToolHints::default()),
            ToolDef::new("search_files", "Searches.", json!({}))
                .with_toolset("mcp-files")
                .with_kind(ToolKind::Mcp)
                .with_hints(ToolHints::default()),
        ]);
        let view = registry.view(ViewSpec::all()).unwrap();
        let entries = [
            tool(0, "read_file", json!({ "path": "a" })),
            tool(1, "read_file", json!({ "path": "b" })),
            tool(2, "search_files", json!({ "pattern": "x" })),
        ];
        let claims = claims_of(&entries, &view);
        assert_eq!(claims, vec![Claim::Barrier; 3]);
        assert_eq!(
            BatchPlanner::new(dir.path()).plan_claims(&claims).shape(),
            vec![(S, vec![0, 1, 2])]
        );
        // The same names from troupe's built-ins declare what they read.
        assert_eq!(
            plan(&[
                read("a"),
                read("b"),
                builtin("search_files", json!({ "pattern": "x" }))
            ]),
            vec![(P, vec![0, 1, 2])]
        );
        // Nor does a name alone make a tool a reader without a view to vouch for it.
        assert_eq!(
            plan(&[
                ("read_file", Some(json!({ "path": "a" })), None),
                ("read_file", Some(json!({ "path": "b" })), None),
            ]),
            vec![(S, vec![0, 1])]
        );
    }

    #[test]
    fn a_read_only_mcp_tool_with_a_declared_path_argument_is_a_scoped_reader() {
        let hints = ToolHints {
            read_only: true,
            path_args: vec!["file".into()],
            ..ToolHints::default()
        };
        let calls = [
            (
                "mcp__fs__read",
                Some(json!({ "file": "a" })),
                Some(hints.clone()),
            ),
            read("a"),
            write("a"),
            ("mcp__fs__read", Some(json!({ "file": "b" })), Some(hints)),
        ];
        assert_eq!(plan(&calls), vec![(P, vec![0, 1]), (P, vec![2, 3])]);
    }

    #[test]
    fn a_search_without_path_covers_the_cwd_and_conflicts_with_a_write_below_it() {
        let calls = [
            builtin("search_files", json!({ "pattern": "x" })),
            read("sub/a"),
            write("sub/b"),
        ];
        assert_eq!(plan(&calls), vec![(P, vec![0, 1]), (S, vec![2])]);
    }

    #[test]
    fn ancestor_directories_overlap() {
        let calls = [
            builtin("search_files", json!({ "pattern": "x", "path": "src" })),
            write("src/lib.rs"),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn dot_dot_and_symlinks_resolve_to_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/f"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let calls = [write("link/f"), read("real/../real/f")];
        assert_eq!(plan_in(dir.path(), &calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn v4a_patches_reserve_every_header_path_including_both_ends_of_a_move() {
        let body = "*** Begin Patch\n*** Update File: a\n***Move File: b -> c\n*** End Patch";
        let patch = builtin(
            "patch",
            json!({ "mode": "patch", "patch": body, "path": "decoy" }),
        );
        assert_eq!(plan(&[read("c"), patch.clone()]), vec![(S, vec![0, 1])]);
        assert_eq!(plan(&[read("b"), patch.clone()]), vec![(S, vec![0, 1])]);
        assert_eq!(plan(&[read("decoy"), patch]), vec![(P, vec![0, 1])]);
    }

    #[test]
    fn a_path_scoped_call_without_a_path_is_a_barrier() {
        let calls = [
            read("a"),
            builtin("write_file", json!({ "content": "x" })),
            read("b"),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1, 2])]);
    }

    #[test]
    fn a_conflicting_writer_starts_a_new_run_that_later_readers_join() {
        let calls = [read("a"), read("b"), write("a"), read("c")];
        assert_eq!(plan(&calls), vec![(P, vec![0, 1]), (P, vec![2, 3])]);
    }

    #[test]
    fn tools_with_hinted_path_args_are_scoped() {
        let hints = ToolHints {
            path_args: vec!["file".into()],
            ..ToolHints::default()
        };
        let calls = [
            read("a"),
            ("plugin_write", Some(json!({ "file": "a" })), Some(hints)),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn a_tool_written_in_code_runs_in_parallel_unless_it_says_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let plain = ToolDef::new("fetch_price", "Looks up a price.", json!({}));
        let alone = ToolDef::new("migrate", "Migrates the database.", json!({})).exclusive();
        let replaced = ToolDef::new("wipe", "Wipes.", json!({})).with_hints(ToolHints {
            destructive: true,
            ..ToolHints::default()
        });
        assert_eq!(plain.hints, ToolHints::parallel());
        let view = Registry::with_tools([plain, alone, replaced])
            .view(ViewSpec::all())
            .unwrap();
        let entries = [
            tool(0, "fetch_price", json!({ "sku": "a" })),
            tool(1, "fetch_price", json!({ "sku": "b" })),
            tool(2, "fetch_price", json!({ "sku": "c" })),
            tool(3, "migrate", json!({})),
            tool(4, "fetch_price", json!({ "sku": "d" })),
            tool(5, "wipe", json!({})),
        ];
        let claims = claims_of(&entries, &view);
        assert_eq!(
            BatchPlanner::new(dir.path()).plan_claims(&claims).shape(),
            vec![(P, vec![0, 1, 2]), (S, vec![3, 4, 5])]
        );
    }

    #[test]
    fn exclusive_wins_over_every_other_hint() {
        let hints = ToolHints {
            read_only: true,
            parallel_safe: true,
            exclusive: true,
            ..ToolHints::default()
        };
        let calls = [
            ("peek", Some(json!({})), Some(hints.clone())),
            ("peek", Some(json!({})), Some(hints)),
        ];
        assert_eq!(plan(&calls), vec![(S, vec![0, 1])]);
    }

    #[test]
    fn calls_naming_the_same_resource_do_not_run_together() {
        let writes = ToolHints {
            parallel_safe: true,
            resource_args: vec!["record".into()],
            ..ToolHints::default()
        };
        let reads = ToolHints {
            read_only: true,
            ..writes.clone()
        };
        let update = |record: Value| {
            (
                "update",
                Some(json!({ "record": record })),
                Some(writes.clone()),
            )
        };
        let show = |record: Value| {
            (
                "show",
                Some(json!({ "record": record })),
                Some(reads.clone()),
            )
        };
        // Different records run together; the second write to `7` waits for the first.
        assert_eq!(
            plan(&[update(json!("7")), update(json!("8")), update(json!("7"))]),
            vec![(P, vec![0, 1]), (S, vec![2])]
        );
        // Readers of one record share it; a writer of it does not.
        assert_eq!(
            plan(&[show(json!("7")), show(json!("7")), update(json!("7"))]),
            vec![(P, vec![0, 1]), (S, vec![2])]
        );
        // `7` and `"7"` are different values to the tool, so different resources.
        assert_eq!(
            plan(&[update(json!(7)), update(json!("7"))]),
            vec![(P, vec![0, 1])]
        );
        // A call that names no resource cannot be placed.
        assert_eq!(
            plan(&[
                update(json!("1")),
                ("update", Some(json!({})), Some(writes.clone())),
                update(json!("2"))
            ]),
            vec![(S, vec![0, 1, 2])]
        );
    }

    #[actix_rt::test]
    async fn the_pool_plans_a_batch_as_the_planner_does() {
        let dir = tempfile::tempdir().unwrap();
        let call = |name: &str, path: &str| Claim::Paths {
            raw: vec![path.into()],
            resources: Vec::new(),
            writer: name == "write_file",
        };
        let claims = vec![
            call("read_file", "a"),
            call("read_file", "b"),
            call("write_file", "a"),
            Claim::Free,
            Claim::Barrier,
        ];
        let planners = Planners::of_system(dir.path()).await;
        let workers = planners.workers.clone().expect("the pool starts");
        let pooled = workers
            .send(PlanBatch {
                cwd: dir.path().into(),
                claims: claims.clone(),
            })
            .await
            .unwrap();
        assert_eq!(pooled, BatchPlanner::new(dir.path()).plan_claims(&claims));
        assert_eq!(
            pooled.shape(),
            vec![(P, vec![0, 1]), (P, vec![2, 3]), (S, vec![4])]
        );
        // Every session of the System shares one pool.
        let again = Planners::of_system(dir.path()).await;
        assert!(again.workers.is_some_and(|w| w == workers));
    }

    #[test]
    fn a_single_call_needs_no_pool() {
        assert_eq!(Plan::one_by_one(1).shape(), vec![(S, vec![0])]);
        assert_eq!(Plan::one_by_one(3).shape(), vec![(S, vec![0, 1, 2])]);
        assert!(Plan::one_by_one(0).segments.is_empty());
    }

    #[test]
    fn one_call_is_sequential_and_empty_batches_have_no_segments() {
        assert_eq!(plan(&[read("a")]), vec![(S, vec![0])]);
        assert_eq!(plan(&[]), vec![]);
    }
}
