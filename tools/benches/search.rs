//! Tool-search benchmarks on the 3,309-tool catalog (`tests/fixtures/tool_search/data/
//! cloudflare_3300.json`): building the index, whole `tool_search` calls with one and seven
//! queries against the cached catalog (reference ranking), assembling the tool list at a 200K
//! context, and the hybrid ranking: building its lexical index and its index of the services the
//! tools serve, its lexical legs on one and seven queries, encoding one query with the sentence
//! encoder, a whole one-query call with the embeddings ready, embedding the 3,309 tools once,
//! and loading their embeddings from the on-disk cache; and with six phrasings a tool: what they
//! add to a query, to loading from the cache, and a whole one-query call with them.
//! Run with `cargo bench -p troupe-tools --bench search`.

use std::hint::black_box;
use std::sync::Arc;

use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group};
use serde_json::{Value, json};
use troupe_tools::bridge::tool_search;
use troupe_tools::catalog_file::parse_catalog;
use troupe_tools::deferral::is_deferrable;
use troupe_tools::search::lexical::LexicalIndex;
use troupe_tools::search::phrasings::{PhrasingLegs, Phrasings};
use troupe_tools::search::semantic::{
    Embedder, SemanticReady, ToolVectors, cache_file, content_hash, default_embedder,
    embed_with_cache, write_cache,
};
use troupe_tools::search::services::{ServedBy, services};
use troupe_tools::search::{Catalog, assemble};
use troupe_tools::{Ranking, Registry, ToolDef, ToolSearchConfig, ToolsetView, TroupeHome};

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
    let config = ToolSearchConfig {
        ranking: Ranking::Reference,
        ..ToolSearchConfig::default()
    };

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
    // A fresh view of the same tools (made and dropped outside the timing) finds the catalog
    // cached in the registry but has no tool list of its own yet: what new tools cost once.
    c.bench_function("tool_search/assemble_200k", |b| {
        b.iter_batched_ref(
            || view.registry().view_all(),
            |fresh| assemble(fresh, black_box(Some(200_000)), &config),
            BatchSize::LargeInput,
        )
    });
    // Every later request over the same view: the kept list.
    c.bench_function("tool_search/assemble_200k_kept", |b| {
        b.iter(|| assemble(&view, black_box(Some(200_000)), &config))
    });

    hybrid(c, &view, &one, &seven);
}

fn queries(args: &Value) -> Vec<String> {
    args["queries"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|q| q.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn hybrid(c: &mut Criterion, view: &ToolsetView, one: &Value, seven: &Value) {
    let config = ToolSearchConfig::default();
    assert_eq!(config.ranking, Ranking::Hybrid);
    let catalog = view.catalog(&config.defer);
    let labels: Vec<Option<&str>> = (0..catalog.len())
        .map(|d| Some(catalog.source(d).label.as_str()))
        .collect();
    c.bench_function("tool_search/hybrid_build_lexical", |b| {
        b.iter(|| LexicalIndex::build(black_box(catalog.defs()), &labels))
    });
    c.bench_function("tool_search/hybrid_build_services", |b| {
        b.iter(|| ServedBy::build(services(), black_box(catalog.defs()), &labels))
    });
    let (one_q, seven_q) = (queries(one), queries(seven));
    assert!(
        !catalog
            .hybrid_search(&one_q[0], 5, None)
            .matches()
            .is_empty()
    );
    c.bench_function("tool_search/hybrid_lexical_query_1", |b| {
        b.iter(|| catalog.hybrid_search(black_box(&one_q[0]), 5, None))
    });
    c.bench_function("tool_search/hybrid_lexical_query_7", |b| {
        b.iter(|| {
            for q in &seven_q {
                black_box(catalog.hybrid_search(black_box(q), 5, None));
            }
        })
    });

    let Some(embedder) = default_embedder() else {
        eprintln!("the semantic feature is off: no semantic benchmarks");
        return;
    };
    let texts = catalog.embedding_texts();
    let home_dir = tempfile::tempdir().expect("a temporary troupe home");
    let home = TroupeHome::at(home_dir.path());
    let mut group = c.benchmark_group("tool_search");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(1));
    // Each sample encodes every tool into a fresh, empty cache.
    group.bench_function("hybrid_embed_3309_tools", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let fresh = tempfile::tempdir().expect("a temporary troupe home");
                let started = Instant::now();
                black_box(
                    embed_with_cache(embedder.as_ref(), &TroupeHome::at(fresh.path()), &texts)
                        .expect("embeds"),
                );
                total += started.elapsed();
            }
            total
        })
    });
    embed_with_cache(embedder.as_ref(), &home, &texts).expect("embeds");
    group.bench_function("hybrid_embeddings_from_cache", |b| {
        b.iter(|| embed_with_cache(embedder.as_ref(), &home, black_box(&texts)).expect("loads"))
    });
    group.finish();

    let ready = catalog
        .semantic_wait(&config, Duration::from_secs(1800))
        .expect("the embeddings become ready");
    assert!(ready.vectors.is_ok());
    let query = one_q[0].clone();
    c.bench_function("tool_search/hybrid_encode_query", |b| {
        b.iter(|| embedder.embed(std::slice::from_ref(black_box(&query))))
    });
    c.bench_function("tool_search/hybrid_query_1", |b| {
        b.iter(|| tool_search(view, &config, black_box(one)))
    });
    phrasings(c, catalog.defs(), &ready, &one_q[0], embedder.as_ref());
}

/// Six phrasings a tool, made of its own description's words (what they say does not matter
/// here, only how many there are), with vectors spread over the sphere: what phrasings add to a
/// one-query call, and to loading the embeddings from the cache.
fn phrasings(
    c: &mut Criterion,
    deferred: &[Arc<ToolDef>],
    ready: &SemanticReady,
    query: &str,
    embedder: &dyn Embedder,
) {
    let tools: Vec<(String, Vec<String>)> = deferred
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let words: Vec<&str> = d.description().split_whitespace().collect();
            let phrasings = (0..6)
                .map(|k| {
                    let start = (k * 3).min(words.len());
                    let end = (start + 8).min(words.len());
                    format!("please {} ({i}.{k})", words[start..end].join(" "))
                })
                .collect();
            (d.name.clone(), phrasings)
        })
        .collect();
    let phrasings = Arc::new(Phrasings::new(None, tools));
    // A home whose cache already holds the tools' vectors and the phrasings'.
    let home_dir = tempfile::tempdir().expect("a temporary troupe home");
    let home = TroupeHome::at(home_dir.path());
    let fresh = Registry::with_tools(deferred.iter().map(|d| d.as_ref().clone())).view_all();
    let config = ToolSearchConfig::default()
        .with_home(home.clone())
        .with_phrasings(Some(Arc::clone(&phrasings)));
    let catalog = fresh.catalog(&config.defer);
    let texts = catalog.embedding_texts();
    let pairs = phrasings.for_catalog(catalog.defs());
    let dims = embedder.dimensions();
    let own = ready.vectors.as_ref().expect("the tools' vectors");
    let query_vector = embedder
        .embed(&[query.to_string()])
        .expect("encodes")
        .remove(0);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut spread = || {
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    };
    let phrasing_rows: Vec<Vec<f32>> = pairs.iter().map(|_| spread()).collect();
    let mut rest = std::collections::HashMap::new();
    for (text, row) in texts.iter().zip(own.rows()) {
        rest.insert(content_hash(embedder.model_id(), text), row.to_vec());
    }
    for ((_, text), row) in pairs.iter().zip(&phrasing_rows) {
        rest.insert(content_hash(embedder.model_id(), text), row.clone());
    }
    write_cache(&cache_file(&home, embedder.model_id()), dims, &[], &rest)
        .expect("writes the cache");

    let legs = PhrasingLegs::new(
        texts.len(),
        &pairs,
        ToolVectors::new(dims, phrasing_rows).expect("vectors"),
    )
    .expect("legs");
    let lexical = catalog.lexical();
    let hits = lexical.score_top(&lexical.prepare(query), 200);
    let sims = own.similarities(&query_vector);
    c.bench_function("tool_search/hybrid_phrasings_added_3309x6", |b| {
        b.iter(|| {
            let order = legs.lexical_order(black_box(query), &hits, 40);
            let mut sims = sims.clone();
            legs.blend_similarities(&query_vector, &mut sims);
            black_box((order, sims))
        })
    });
    let all: Vec<String> = texts
        .iter()
        .cloned()
        .chain(pairs.iter().map(|(_, t)| t.clone()))
        .collect();
    let mut group = c.benchmark_group("tool_search");
    group.sample_size(10);
    group.bench_function("hybrid_embeddings_from_cache_with_phrasings", |b| {
        b.iter(|| embed_with_cache(embedder, &home, black_box(&all)).expect("loads"))
    });
    group.finish();
    catalog
        .semantic_wait(&config, Duration::from_secs(600))
        .expect("the embeddings come from the cache");
    let one = json!({"queries": [query]});
    c.bench_function("tool_search/hybrid_query_1_with_phrasings", |b| {
        b.iter(|| tool_search(&fresh, &config, black_box(&one)))
    });
}

criterion_group!(benches, bench);

fn main() {
    // SAFETY: first thing in the process, as in the `troupe` binary's main.
    unsafe { troupe_tools::search::semantic::settle_encoder_threads() };
    benches();
    Criterion::default().configure_from_args().final_summary();
}
