//! In-process scoring of the hybrid ranking on a labelled retrieval set, for tuning the method
//! without building the `troupe` binary: recall@1/@5, MRR and empty answers per query style,
//! and absent precision (the figures the set's own scoring script prints, when it has one), plus
//! each miss with the evidence of the "nothing fits" decision.
//!
//! `cargo run -p troupe-tools --example retrieval_eval -- DIR [--verbose] [--lexical]`, where DIR
//! holds `catalog.json` and `queries_dev.json` (`{query, expected: [names], style}` each).
//! `--queries FILE` reads the queries from FILE (a path, or a name inside DIR) instead.
//! `--phrasings FILE` ranks with the tools' phrasings from FILE (`troupe tools phrasings`);
//! without it, DIR's `phrasings.json` when there is one; `--no-phrasings` ranks without them.
//! `--lexical` ranks without the semantic leg; `--dump FILE` writes each query's raw evidence;
//! `--features FILE` writes each query's "nothing fits" evidence and label, one JSON object a line
//! (what `tools/search-eval/fit_decision.py` fits the decision on); `--explain` prints each miss
//! explained as `troupe tools search --explain` does; `--sweep` scores the same rankings for a
//! range of decision thresholds (log-odds).
//!
//! To compare another sentence encoder on the same ranking, `--texts FILE` writes every text the
//! semantic leg would encode (the tools' embedding texts, then the queries), one JSON object a
//! line (`{"text", "kind": "tool" | "query"}`), and `--vectors FILE` ranks with vectors computed elsewhere for exactly those texts
//! (`{"model": ID, "dims": N, "vectors": {TEXT: [..]}}`, unit length) instead of the bundled
//! encoder; `tools/search-eval/encoder_compare.py` makes such a file. `--encode-time` times
//! the encoder on each query alone (median and 90th percentile). `--vecs FILE` writes the raw
//! vectors instead of scoring (each tool's embedding text, its head — name and first sentence —
//! and each query: `{"full", "head", "head_text", "queries"}`), for the offline variants in
//! `tools/search-eval/offline_variants.py`.

#![allow(clippy::print_stdout, reason = "a scoring program prints its figures")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use troupe_tools::catalog_file::parse_catalog;
use troupe_tools::search::Verdict;
use troupe_tools::search::explain::render_hybrid;
use troupe_tools::search::phrasings::Phrasings;
use troupe_tools::search::semantic::{Embedder, SemanticReady, ToolVectors};
use troupe_tools::{Registry, ToolSearchConfig};

#[derive(Default)]
struct Style {
    n: usize,
    r1: usize,
    r5: usize,
    rr: f64,
    empty: usize,
    absent_ok: usize,
}

fn read_json(path: &PathBuf) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let dir = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            !a.starts_with("--")
                && (*i == 0
                    || !matches!(
                        args[i - 1].as_str(),
                        "--dump"
                            | "--queries"
                            | "--features"
                            | "--texts"
                            | "--vectors"
                            | "--vecs"
                            | "--phrasings"
                    ))
        })
        .map(|(_, a)| a)
        .map(PathBuf::from)
        .ok_or("usage: retrieval_eval DIR [--queries FILE] [--verbose] [--lexical]")?;
    let verbose = args.iter().any(|a| a == "--verbose");
    let lexical_only = args.iter().any(|a| a == "--lexical");
    let defs = parse_catalog(&read_json(&dir.join("catalog.json"))?).map_err(|e| e.to_string())?;
    let queries_path = value_of("--queries").map_or_else(
        || dir.join("queries_dev.json"),
        |f| {
            let own = PathBuf::from(f);
            if own.exists() { own } else { dir.join(f) }
        },
    );
    let queries = read_json(&queries_path)?;
    let queries = queries
        .as_array()
        .ok_or_else(|| format!("{} is not an array", queries_path.display()))?;
    let view = Registry::with_tools(defs).view_all();
    // A set's own phrasings file is used unless told otherwise, as its catalog is.
    let phrasings_path = match value_of("--phrasings") {
        Some(path) => Some(PathBuf::from(path)),
        None => Some(dir.join("phrasings.json")).filter(|p| p.exists()),
    };
    let phrasings = match phrasings_path {
        Some(path) if !args.iter().any(|a| a == "--no-phrasings") => {
            Some(std::sync::Arc::new(Phrasings::read(&path)?))
        }
        _ => None,
    };
    let config = ToolSearchConfig::default().with_phrasings(phrasings);
    let catalog = view.catalog(&config.defer);
    if let Some(path) = value_of("--texts") {
        // An encoder trained for retrieval may encode a query and a passage differently.
        let mut out = String::new();
        let tools = catalog.embedding_texts().into_iter().map(|t| (t, "tool"));
        let asked = queries
            .iter()
            .filter_map(|q| q["query"].as_str().map(|t| (t.to_string(), "query")));
        for (text, kind) in tools.chain(asked) {
            out.push_str(&serde_json::json!({"text": text, "kind": kind}).to_string());
            out.push('\n');
        }
        return std::fs::write(path, out).map_err(|e| format!("{path}: {e}"));
    }
    let semantic = if lexical_only {
        None
    } else if let Some(path) = value_of("--vectors") {
        let table = VectorTable::read(&PathBuf::from(path))?;
        let vectors = table.embed(&catalog.embedding_texts())?;
        let table_dims = table.dims;
        Some(std::sync::Arc::new(SemanticReady::new(
            std::sync::Arc::new(table),
            ToolVectors::new(table_dims, vectors),
        )))
    } else {
        catalog.semantic_wait(&config, Duration::from_secs(600))
    };
    if let Some(path) = value_of("--vecs") {
        let ready = semantic.as_deref().ok_or("--vecs needs the semantic leg")?;
        return write_vecs(&catalog, ready, queries, &PathBuf::from(path));
    }
    if args.iter().any(|a| a == "--encode-time") {
        encode_time(semantic.as_deref(), queries)?;
    }
    let dump_path = value_of("--dump").map(PathBuf::from);
    let features_path = value_of("--features").map(PathBuf::from);
    let explain = args.iter().any(|a| a == "--explain");
    let mut features = String::new();
    let sweep = args.iter().any(|a| a == "--sweep");
    let mut sweep_rows: Vec<SweepRow> = Vec::new();
    let mut dump = Vec::new();
    let mut by: BTreeMap<String, Style> = BTreeMap::new();
    let mut misses = Vec::new();
    for q in queries {
        let text = q["query"].as_str().unwrap_or_default();
        let style = q["style"].as_str().unwrap_or("?").to_string();
        let expected: Vec<&str> = q["expected"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let answer = catalog.hybrid_search(text, 5, semantic.as_deref());
        if dump_path.is_some() {
            dump.push(dump_query(&catalog, q, text, semantic.as_deref()));
        }
        if features_path.is_some() {
            let rank = answer
                .ranked
                .iter()
                .position(|m| expected.contains(&catalog.defs()[m.doc].name.as_str()));
            features.push_str(&features_line(
                text,
                &style,
                &expected,
                rank,
                &answer.verdict,
            ));
            features.push('\n');
        }
        let explained = || {
            if explain {
                format!("\n{}", render_hybrid(&catalog, text, &answer).trim_end())
            } else {
                String::new()
            }
        };
        let got: Vec<&str> = answer
            .matches()
            .iter()
            .map(|m| catalog.defs()[m.doc].name.as_str())
            .collect();
        if sweep {
            sweep_rows.push(SweepRow {
                style: style.clone(),
                nothing_expected: expected.is_empty(),
                rank: answer
                    .ranked
                    .iter()
                    .position(|m| expected.contains(&catalog.defs()[m.doc].name.as_str())),
                verdict: answer.verdict.clone(),
            });
        }
        let s = by.entry(style.clone()).or_default();
        s.n += 1;
        let v = &answer.verdict;
        let evidence = format!(
            "cov {:.2} sim {:.3} margin {:.2} p {:.3}",
            v.coverage,
            v.similarity.unwrap_or(f32::NAN),
            v.margin.unwrap_or(f64::NAN),
            v.probability().unwrap_or(f64::NAN)
        );
        if expected.is_empty() {
            if got.is_empty() {
                s.absent_ok += 1;
            } else {
                misses.push(format!(
                    "MISS [{style}] {text:?}: nothing fits, got {got:?} ({evidence}){}",
                    explained()
                ));
            }
            continue;
        }
        s.empty += usize::from(got.is_empty());
        match got.iter().position(|g| expected.contains(g)) {
            Some(r) => {
                s.r5 += usize::from(r < 5);
                s.r1 += usize::from(r == 0);
                s.rr += 1.0 / (r as f64 + 1.0);
            }
            None => {
                let ranked: Vec<&str> = answer
                    .ranked
                    .iter()
                    .map(|m| catalog.defs()[m.doc].name.as_str())
                    .collect();
                misses.push(format!(
                    "MISS [{style}] {text:?}: expected {expected:?}, got {got:?} (ranked {ranked:?}; {evidence}){}",
                    explained()
                ));
            }
        }
    }
    println!(
        "{:10} {:>4} {:>6} {:>6} {:>6} {:>6}",
        "style", "n", "r@1", "r@5", "MRR", "empty"
    );
    let mut tot = Style::default();
    let mut absent = (0, 1);
    for (name, s) in &by {
        if name == "absent" {
            absent = (s.absent_ok, s.n);
            println!(
                "{name:10} {:4} absent precision {:.3}",
                s.n,
                s.absent_ok as f64 / s.n as f64
            );
            continue;
        }
        let n = s.n as f64;
        println!(
            "{name:10} {:4} {:6.3} {:6.3} {:6.3} {:6.3}",
            s.n,
            s.r1 as f64 / n,
            s.r5 as f64 / n,
            s.rr / n,
            s.empty as f64 / n
        );
        tot.n += s.n;
        tot.r5 += s.r5;
        tot.rr += s.rr;
    }
    if sweep {
        print_sweep(&sweep_rows);
    }
    if let Some(path) = dump_path {
        let names: Vec<&str> = catalog.defs().iter().map(|d| d.name.as_str()).collect();
        let all = serde_json::json!({"tools": names, "queries": dump});
        std::fs::write(&path, all.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = features_path {
        std::fs::write(&path, features).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if verbose || explain {
        for m in &misses {
            println!("{m}");
        }
    }
    println!(
        "{}: recall@5 {:.3}, MRR {:.3}, absent precision {:.3} (semantic leg {}, {})",
        queries_path.display(),
        tot.r5 as f64 / tot.n.max(1) as f64,
        tot.rr / tot.n.max(1) as f64,
        absent.0 as f64 / absent.1.max(1) as f64,
        if semantic.is_some() { "on" } else { "off" },
        match semantic.as_deref().and_then(|s| s.phrasings.as_ref()) {
            Some(p) => format!("phrasings for {} tools", p.phrased_tools()),
            None => "no phrasings".to_string(),
        }
    );
    Ok(())
}

/// One query for the sweep: the rank of its first expected tool in the ranking, whatever the
/// verdict, and the verdict's evidence.
struct SweepRow {
    style: String,
    nothing_expected: bool,
    rank: Option<usize>,
    verdict: Verdict,
}

/// Recall@5 per style and absent precision for a range of log-odds thresholds: how the
/// "nothing fits" line trades answers for silence on this set.
fn print_sweep(rows: &[SweepRow]) {
    let mut styles: Vec<&str> = rows
        .iter()
        .filter(|r| !r.nothing_expected)
        .map(|r| r.style.as_str())
        .collect();
    styles.sort_unstable();
    styles.dedup();
    print!("logit ");
    for s in &styles {
        print!("{s:>9}");
    }
    println!("  overall   absent");
    for step in 0..=16 {
        let floor = -4.0 + f64::from(step) * 0.5;
        print!("{floor:5.2} ");
        let (mut hit_all, mut n_all) = (0, 0);
        for s in &styles {
            let (mut hit, mut n) = (0, 0);
            for r in rows.iter().filter(|r| !r.nothing_expected && r.style == *s) {
                n += 1;
                hit += usize::from(r.verdict.answered_at(floor) && r.rank.is_some_and(|k| k < 5));
            }
            hit_all += hit;
            n_all += n;
            print!("{:9.3}", hit as f64 / n.max(1) as f64);
        }
        let absent: Vec<_> = rows.iter().filter(|r| r.nothing_expected).collect();
        let silent = absent
            .iter()
            .filter(|r| !r.verdict.answered_at(floor))
            .count();
        println!(
            "  {:7.3}  {:7.3}",
            hit_all as f64 / n_all.max(1) as f64,
            silent as f64 / absent.len().max(1) as f64
        );
    }
}

/// One query's "nothing fits" evidence as a JSON line: `label` is 1 when some tool answers it,
/// `rank` the position of its first right tool in the ranking (whatever the verdict), `ruled`
/// whether a rule decided it before the fitted score (an exact name, or only absent services
/// named), and `evidence` the fitted decision's inputs (null without a semantic margin).
fn features_line(
    text: &str,
    style: &str,
    expected: &[&str],
    rank: Option<usize>,
    v: &Verdict,
) -> String {
    let ruled = v.exact || (!v.absent_services.is_empty() && v.services.is_empty());
    let evidence = v.evidence.map(|e| {
        serde_json::json!({
            "support": e.support, "margin": e.margin, "similarity": e.similarity, "gap": e.gap,
            "agreement": e.agreement, "unknown": e.unknown, "length": e.length,
            "service": e.service, "unoffered": e.unoffered,
        })
    });
    serde_json::json!({
        "query": text, "style": style, "label": u8::from(!expected.is_empty()),
        "rank": rank, "ruled": ruled, "fits": v.fits, "logit": v.logit, "evidence": evidence,
    })
    .to_string()
}

/// The raw evidence of one query, for exploring fusion and decision rules offline: the lexical
/// hits (tool, BM25F score, support) and the similarity to every tool.
fn dump_query(
    catalog: &troupe_tools::search::Catalog,
    q: &Value,
    text: &str,
    semantic: Option<&troupe_tools::search::semantic::SemanticReady>,
) -> Value {
    let lexical = catalog.lexical();
    let prepared = lexical.prepare(text);
    let hits: Vec<Value> = lexical
        .score(&prepared)
        .iter()
        .take(100)
        .map(|h| serde_json::json!([h.doc, h.score, lexical.coverage(h.doc, &prepared)]))
        .collect();
    let typed: Vec<Value> = prepared
        .typed
        .iter()
        .map(|t| serde_json::json!([t, lexical.df(t)]))
        .collect();
    let sims = semantic.and_then(|s| {
        let v = s.vectors.as_ref().ok()?;
        let e = s.embedder.embed(&[text.to_string()]).ok()?;
        Some(v.similarities(&e[0]))
    });
    serde_json::json!({
        "query": text, "style": q["style"], "expected": q["expected"],
        "typed": typed, "lexical": hits, "sims": sims,
    })
}

/// Writes the raw vectors for offline study: each tool's embedding text and its head (name and
/// first sentence of the description), and each query.
fn write_vecs(
    catalog: &troupe_tools::search::Catalog,
    ready: &SemanticReady,
    queries: &[Value],
    path: &PathBuf,
) -> Result<(), String> {
    let full = catalog.embedding_texts();
    let head: Vec<String> = full
        .iter()
        .map(|t| match t.find(". ") {
            Some(i) => {
                let rest = &t[i + 2..];
                match rest.find(['.', '\n']) {
                    Some(j) => t[..i + 2 + j].to_string(),
                    None => t.clone(),
                }
            }
            None => t.clone(),
        })
        .collect();
    let texts: Vec<String> = queries
        .iter()
        .filter_map(|q| q["query"].as_str().map(String::from))
        .collect();
    let round = |vs: Vec<Vec<f32>>| -> Vec<Vec<f64>> {
        vs.into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|x| (f64::from(x) * 1e4).round() / 1e4)
                    .collect()
            })
            .collect()
    };
    let enc = |t: &[String]| -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::new();
        for c in t.chunks(32) {
            out.extend(ready.embedder.embed(c)?);
        }
        Ok(out)
    };
    let v = serde_json::json!({
        "full": round(enc(&full)?), "head": round(enc(&head)?), "head_text": head,
        "queries": round(enc(&texts)?),
    });
    std::fs::write(path, v.to_string()).map_err(|e| format!("{}: {e}", path.display()))
}

/// Encodes each query alone with the ranking's encoder and prints the median and 90th
/// percentile time: the query's share of a hybrid call, for comparing encoders.
fn encode_time(semantic: Option<&SemanticReady>, queries: &[Value]) -> Result<(), String> {
    let ready = semantic.ok_or("--encode-time needs the semantic leg")?;
    let texts: Vec<String> = queries
        .iter()
        .filter_map(|q| q["query"].as_str().map(String::from))
        .collect();
    // Warm the kernels and the thread pool first, as a running session has.
    for t in texts.iter().take(5) {
        ready.embedder.embed(std::slice::from_ref(t))?;
    }
    let mut ms = Vec::with_capacity(texts.len());
    for t in &texts {
        let start = std::time::Instant::now();
        ready.embedder.embed(std::slice::from_ref(t))?;
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    if let (Some(median), Some(p90)) = (ms.get(ms.len() / 2), ms.get(ms.len() * 9 / 10)) {
        println!(
            "{} queries encoded one at a time by {}: median {median:.2} ms, p90 {p90:.2} ms",
            ms.len(),
            ready.embedder.model_id()
        );
    }
    Ok(())
}

/// Vectors computed by another encoder for known texts: an [`Embedder`] that looks them up, so
/// the ranking can be scored with an encoder troupe does not bundle.
struct VectorTable {
    model: String,
    dims: usize,
    vectors: std::collections::HashMap<String, Vec<f32>>,
}

impl VectorTable {
    fn read(path: &PathBuf) -> Result<VectorTable, String> {
        let v = read_json(path)?;
        let dims = v["dims"]
            .as_u64()
            .ok_or("the vector file has no \"dims\"")? as usize;
        let model = v["model"].as_str().unwrap_or("external").to_string();
        let mut vectors = std::collections::HashMap::new();
        for (text, row) in v["vectors"].as_object().ok_or("no \"vectors\" object")? {
            let row: Vec<f32> = row
                .as_array()
                .ok_or("a vector is not an array")?
                .iter()
                .map(|x| x.as_f64().unwrap_or(0.0) as f32)
                .collect();
            vectors.insert(text.clone(), row);
        }
        Ok(VectorTable {
            model,
            dims,
            vectors,
        })
    }
}

impl Embedder for VectorTable {
    fn model_id(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dims
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        texts
            .iter()
            .map(|t| {
                self.vectors
                    .get(t)
                    .cloned()
                    .ok_or_else(|| format!("no vector for {t:?}: rerun with --texts"))
            })
            .collect()
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retrieval_eval: {e}");
            ExitCode::FAILURE
        }
    }
}
