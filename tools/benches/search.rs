//! Tool-search benchmarks on the 3,309-tool catalog (`tests/fixtures/tool_search/data/
//! cloudflare_3300.json`): building the index, whole `tool_search` calls with one and seven
//! queries against the cached catalog, and assembling the tool list at a 200K context.
//! Run with `cargo bench -p troupe-tools --bench search`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use troupe_tools::bridge::tool_search;
use troupe_tools::catalog_file::parse_catalog;
use troupe_tools::deferral::is_deferrable;
use troupe_tools::search::{Catalog, assemble};
use troupe_tools::{Registry, ToolDef, ToolSearchConfig, ToolsetView};

fn load() -> (ToolsetView, Vec<Arc<ToolDef>>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tool_search/data/cloudflare_3300.json"
    );
    let text =
        std::fs::read_to_string(path).expect("the benchmark catalog is part of the repository");
    let json: Value = serde_json::from_str(&text).expect("the benchmark catalog is valid JSON");
    let defs = parse_catalog(&json).expect("the benchmark catalog parses");
    let view = Registry::with_tools(defs).view_all();
    let config = ToolSearchConfig::default();
    let deferred: Vec<Arc<ToolDef>> = view
        .tools()
        .iter()
        .filter(|d| is_deferrable(d, Some(&config.defer)))
        .cloned()
        .collect();
    (view, deferred)
}

fn bench(c: &mut Criterion) {
    let (view, deferred) = load();
    assert_eq!(deferred.len(), 3309);
    let config = ToolSearchConfig::default();

    c.bench_function("tool_search/build", |b| {
        b.iter(|| Catalog::build(black_box(deferred.clone())))
    });

    let one = json!({"queries": ["cloudflare dns records list"]});
    let seven = json!({"queries": [
        "cloudflare dns records list",
        "create dns record",
        "github create issue",
        "linear list issues",
        "sentry resolve issue",
        "workers scripts upload",
        "zone settings update"
    ]});
    // Warm the view's catalog cache, as a session's first call would.
    let warm = tool_search(&view, &config, &seven);
    assert!(
        warm["results"][0]["matches"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
    );

    c.bench_function("tool_search/query_1", |b| {
        b.iter(|| tool_search(&view, &config, black_box(&one)))
    });
    c.bench_function("tool_search/query_7", |b| {
        b.iter(|| tool_search(&view, &config, black_box(&seven)))
    });
    c.bench_function("tool_search/assemble_200k", |b| {
        b.iter(|| assemble(&view, black_box(Some(200_000)), &config))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
