//! The planner's rules, one behaviour per test.

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
