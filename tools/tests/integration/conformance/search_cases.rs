//! Checkers for the search-side case kinds: `search`, `assemble`, `listing`, `listing_sweep`,
//! `config`, `budget`, `tokenize`, `index_text`, `estimate_tokens` and `short_desc`, each
//! checking what the fixtures' README says is checked. Search cases also compare the
//! reference's internals (`debug`): tokens, gate, statistics and every admitted score.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use troupe_tools::bridge::tool_search;
use troupe_tools::search::catalog::def_chars;
use troupe_tools::search::listing::{estimate_tokens, short_desc};
use troupe_tools::search::tokenize::{SNOWBALL_3_DIFFERENCES, for_each_word, tokenize};
use troupe_tools::search::{Catalog, assemble};
use troupe_tools::{Switch, ToolSearchConfig};

use super::fixture::{Case, Outcome, matches_with_marker};

/// Debug scores are exact Python floats; ours must agree to this much.
const SCORE_TOLERANCE: f64 = 1e-9;

pub(crate) fn run(case: &Case) -> Outcome {
    if case.name.starts_with("connectors_") {
        return Outcome::Skip("needs a gateway: run through the CLI against one in orchestrator/tests/integration/connectors_cli.rs".into());
    }
    let result = match case.kind.as_str() {
        "search" => check_search(case),
        "assemble" => check_assemble(case),
        "listing" => check_listing(case),
        "listing_sweep" => check_listing_sweep(case),
        "config" => check_config(case),
        "budget" => check_budget(case),
        "tokenize" => check_tokenize(case),
        "index_text" => check_index_text(case),
        "estimate_tokens" => check_estimate_tokens(case),
        "short_desc" => check_short_desc(case),
        other => Err(format!("no checker for kind {other}")),
    };
    match result {
        Ok(()) => Outcome::Pass,
        Err(why) => Outcome::Fail(why),
    }
}

type Check = Result<(), String>;

fn same(what: &str, got: &Value, want: &Value) -> Check {
    if matches_with_marker(got, want) {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, want {want}"))
    }
}

/// Every check runs the reference ranking: the cases were recorded from it.
fn catalog_of(case: &Case) -> Arc<Catalog> {
    case.registry().view_all().catalog(&case.config().defer)
}

fn check_search(case: &Case) -> Check {
    let args = match case.get("args") {
        Value::Null => {
            let mut args = Map::new();
            args.insert("queries".into(), case.get("queries").clone());
            if !case.get("limit").is_null() {
                args.insert("limit".into(), case.get("limit").clone());
            }
            Value::Object(args)
        }
        raw => raw.clone(),
    };
    let view = case.registry().view_all();
    let got = tool_search(&view, &case.config(), &args);
    let want = case.expected();
    if want.get("error").is_some() {
        return match got.get("error") {
            Some(Value::String(_)) => Ok(()),
            _ => Err(format!("expected an error, got {got}")),
        };
    }
    // Everything the reference returned, key order included; hints are our own words.
    same("output", &got, want)?;
    let got_keys: Vec<&String> = got
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    let want_keys: Vec<&String> = want
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if got_keys != want_keys {
        return Err(format!("output keys: got {got_keys:?}, want {want_keys:?}"));
    }
    let got_tools: Vec<&String> = got["tools"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    let want_tools: Vec<&String> = want["tools"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if got_tools != want_tools {
        return Err(format!(
            "tools map order: got {got_tools:?}, want {want_tools:?}"
        ));
    }
    check_debug(case)
}

/// Compares the reference's internals with [`Catalog::explain`].
fn check_debug(case: &Case) -> Check {
    let debug = case.get("debug");
    if debug.is_null() {
        return Ok(());
    }
    let catalog = catalog_of(case);
    if let Some(doc_tokens) = debug.get("doc_tokens").and_then(Value::as_object) {
        for (i, def) in catalog.defs().iter().enumerate() {
            same(
                &format!("tokens of {}", def.name),
                &json!(catalog.doc_tokens(i)),
                &doc_tokens[&def.name],
            )?;
        }
        if doc_tokens.len() != catalog.len() {
            return Err(format!(
                "catalog holds {} tools, the reference {}",
                catalog.len(),
                doc_tokens.len()
            ));
        }
    }
    let queries = case.expected()["queries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let per_query = debug["per_query"].as_array().cloned().unwrap_or_default();
    for (query, want) in queries.iter().zip(&per_query) {
        let query = query.as_str().unwrap_or_default();
        let e = catalog.explain(query);
        let at = |what: &str| format!("{query:?} {what}");
        same(
            &at("query tokens"),
            &json!(e.query_tokens),
            &want["query_tokens"],
        )?;
        if want.get("gate").is_none() {
            if !e.admitted.is_empty() {
                return Err(at("has no tokens but admitted tools"));
            }
            continue;
        }
        same(&at("gate"), &json!(e.gate), &want["gate"])?;
        same(&at("gate df"), &json!(e.gate_df), &want["gate_df"])?;
        same(&at("n_docs"), &json!(e.n_docs), &want["n_docs"])?;
        close(&at("avg_dl"), e.avg_dl, want["avg_dl"].as_f64())?;
        same(&at("answerable"), &json!(e.answerable), &want["answerable"])?;
        same(
            &at("required terms"),
            &json!(e.required_terms),
            &want["required_terms"],
        )?;
        same(
            &at("admitted count"),
            &json!(e.admitted.len()),
            &want["admitted_count"],
        )?;
        // `admitted_ranked` may be a prefix of the admitted list.
        let ranked = want["admitted_ranked"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (rank, ((doc, score), want_pair)) in e.admitted.iter().zip(&ranked).enumerate() {
            let name = &catalog.defs()[*doc].name;
            same(&at(&format!("rank {rank}")), &json!(name), &want_pair[0])?;
            let want_score = match &want_pair[1] {
                Value::String(s) if s == "inf" => Some(f64::INFINITY),
                other => other.as_f64(),
            };
            close(&at(&format!("score of {name}")), *score, want_score)?;
        }
        if e.admitted.len() < ranked.len() {
            return Err(at("admitted fewer tools than the reference ranked"));
        }
    }
    Ok(())
}

fn close(what: &str, got: f64, want: Option<f64>) -> Check {
    let Some(want) = want else {
        return Err(format!("{what}: the case has no number"));
    };
    let ok = if want.is_infinite() {
        got == want
    } else {
        (got - want).abs() <= SCORE_TOLERANCE
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, want {want}"))
    }
}

fn check_assemble(case: &Case) -> Check {
    let view = case.registry().view_all();
    let context_length = case.get("context_length").as_i64();
    let a = assemble(&view, context_length, &case.config());
    let want = case.expected();
    let got = json!({
        "activated": a.activated,
        "tier": a.tier,
        "listing_form": a.listing_form.as_str(),
        "deferred_count": a.deferred_count,
        "deferred_tokens": a.deferred_tokens,
        "threshold_tokens": a.threshold_tokens,
        "listing_budget": a.listing_budget,
        "tool_names": a.tool_names(),
        "tool_search_description": a.tool_search_description(),
    });
    for key in [
        "activated",
        "tier",
        "listing_form",
        "deferred_count",
        "deferred_tokens",
        "threshold_tokens",
        "listing_budget",
        "tool_names",
        "tool_search_description",
    ] {
        same(key, &got[key], &want[key])?;
    }
    if let Some(Value::Array(schemas)) = want.get("bridge_schemas") {
        // Same shape, keys in the same order, every description our own.
        let got_schemas: Vec<Value> = a.tools[a.tools.len() - 3..].to_vec();
        for (got, want) in got_schemas.iter().zip(schemas) {
            let want = own_words_descriptions(want);
            same("bridge schema", got, &want)?;
            if key_paths(got) != key_paths(&want) {
                return Err(format!("bridge schema key order differs: {got}"));
            }
        }
        if schemas.len() != 3 {
            return Err(format!("the case has {} bridge schemas", schemas.len()));
        }
    }
    Ok(())
}

/// `value` with every `description` string replaced by the own-words marker.
fn own_words_descriptions(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k == "description" && v.is_string() {
                        json!("<own words>")
                    } else {
                        own_words_descriptions(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(own_words_descriptions).collect()),
        other => other.clone(),
    }
}

/// Every object key with its path, in document order.
fn key_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, path: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let p = format!("{path}.{k}");
                    out.push(p.clone());
                    walk(v, &p, out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

fn check_listing_at(catalog: &Catalog, max_tokens: i64, want: &Value) -> Check {
    let listing = catalog.listing(max_tokens);
    let got = json!({"form": listing.form.as_str(), "text": listing.text});
    same(
        &format!("listing at {max_tokens} tokens: form"),
        &got["form"],
        &want["form"],
    )?;
    same(
        &format!("listing at {max_tokens} tokens: text"),
        &got["text"],
        &want["text"],
    )?;
    if let Some(text) = &listing.text {
        let tokens = estimate_tokens(text.chars().count());
        if tokens > max_tokens {
            return Err(format!(
                "listing of {tokens} tokens does not fit {max_tokens}"
            ));
        }
    }
    Ok(())
}

fn check_listing(case: &Case) -> Check {
    let max_tokens = case
        .get("max_tokens")
        .as_i64()
        .ok_or("the case has no max_tokens")?;
    check_listing_at(&catalog_of(case), max_tokens, case.expected())
}

fn check_listing_sweep(case: &Case) -> Check {
    let catalog = catalog_of(case);
    let want = case.expected().as_array().ok_or("expected a list")?;
    for step in want {
        let max_tokens = step["max_tokens"]
            .as_i64()
            .ok_or("a step has no max_tokens")?;
        check_listing_at(&catalog, max_tokens, step)?;
    }
    Ok(())
}

fn switch_word(s: Switch) -> &'static str {
    s.as_str()
}

fn check_config(case: &Case) -> Check {
    let inputs = case.get("inputs").as_array().ok_or("no inputs")?;
    let want = case.expected().as_array().ok_or("expected a list")?;
    for (input, want) in inputs.iter().zip(want) {
        let c = ToolSearchConfig::from_raw(input);
        let defer = if c.defer.is_explicit() {
            json!(c.defer.names().collect::<Vec<_>>())
        } else {
            Value::Null
        };
        let mut want = want.clone();
        // The reference's explicit list is a set: compare it sorted.
        if let Some(Value::Array(names)) = want.get_mut("defer_tools") {
            names.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
        let got = json!({
            "enabled": switch_word(c.enabled),
            "threshold_pct": c.threshold_pct,
            "search_default_limit": c.search_default_limit,
            "max_search_limit": c.max_search_limit,
            "listing": switch_word(c.listing),
            "listing_max_tokens": c.listing_max_tokens,
            "defer_tools": defer,
        });
        same(&format!("config {input}"), &got, &want)?;
    }
    Ok(())
}

fn check_budget(case: &Case) -> Check {
    let inputs = case.get("inputs").as_array().ok_or("no inputs")?;
    let want = case.expected().as_array().ok_or("expected a list")?;
    for (input, want) in inputs.iter().zip(want) {
        let c = ToolSearchConfig::from_raw(&input["config"]);
        let got = c.listing_budget(input["context_length"].as_i64());
        same(&format!("budget {input}"), &json!(got), want)?;
    }
    Ok(())
}

fn check_tokenize(case: &Case) -> Check {
    let inputs = case.get("inputs").as_array().ok_or("no inputs")?;
    let want = case.expected().as_array().ok_or("expected a list")?;
    let mut differing = Vec::new();
    for (input, want) in inputs.iter().zip(want) {
        let text = input.as_str().unwrap_or_default();
        let want = with_our_stems(text, want, &mut differing);
        let got = tokenize(text);
        same(&format!("tokens of {input}"), &json!(got), &want)?;
    }
    expected_difference(case, &differing)
}

/// `want` (the reference's tokens of `text`) with the stems of the listed Snowball 3.1.1
/// differences replaced by ours; the words replaced are added to `differing`.
fn with_our_stems(text: &str, want: &Value, differing: &mut Vec<String>) -> Value {
    let mut words = Vec::new();
    for_each_word(text, |w| words.push(w.to_string()));
    let Some(tokens) = want.as_array() else {
        return want.clone();
    };
    if tokens.len() != words.len() {
        return want.clone();
    }
    let adjusted = tokens
        .iter()
        .zip(&words)
        .map(|(token, word)| {
            match SNOWBALL_3_DIFFERENCES
                .iter()
                .find(|(w, reference, _)| w == word && token == reference)
            {
                Some((w, _, ours)) => {
                    differing.push((*w).to_string());
                    json!(ours)
                }
                None => token.clone(),
            }
        })
        .collect();
    Value::Array(adjusted)
}

/// Passes when the case depends on a differing stem exactly when the driver lists it.
fn expected_difference(case: &Case, differing: &[String]) -> Check {
    let listed = super::EXPECTED_STEM_DIFFERENCES
        .iter()
        .find(|(name, _)| *name == case.name);
    match (listed, differing.is_empty()) {
        (None, true) => Ok(()),
        (Some((_, words)), false) => {
            let mut found: Vec<&str> = differing.iter().map(String::as_str).collect();
            found.sort_unstable();
            found.dedup();
            if found == *words {
                Ok(())
            } else {
                Err(format!(
                    "differs on {found:?}, listed as differing on {words:?}"
                ))
            }
        }
        (None, false) => Err(format!(
            "hangs on stems rust-stemmers gives differently ({differing:?}) but is not listed in EXPECTED_STEM_DIFFERENCES"
        )),
        (Some(_), true) => {
            Err("listed in EXPECTED_STEM_DIFFERENCES but hangs on no differing stem".into())
        }
    }
}

fn check_index_text(case: &Case) -> Check {
    let catalog = catalog_of(case);
    let want = case.expected().as_array().ok_or("expected a list")?;
    let got: Vec<Value> = (0..catalog.len())
        .map(|i| {
            let source = catalog.source(i);
            json!({
                "name": catalog.defs()[i].name,
                "source": source.kind.as_str(),
                "source_name": source.name,
                "search_text": catalog.index_text(i),
                "tokens": catalog.doc_tokens(i),
            })
        })
        .collect();
    same("index texts", &json!(got), &json!(want))
}

fn check_estimate_tokens(case: &Case) -> Check {
    let catalog = catalog_of(case);
    let chars: Vec<usize> = catalog.defs().iter().map(|d| def_chars(d)).collect();
    same(
        "chars per definition",
        &json!(chars),
        &case.expected()["chars"],
    )?;
    same(
        "tokens",
        &json!(catalog.deferred_tokens()),
        &case.expected()["tokens"],
    )
}

fn check_short_desc(case: &Case) -> Check {
    let inputs = case.get("inputs").as_array().ok_or("no inputs")?;
    let want = case.expected().as_array().ok_or("expected a list")?;
    for (input, want) in inputs.iter().zip(want) {
        let got = short_desc(input.as_str().unwrap_or_default());
        same(&format!("short description of {input}"), &json!(got), want)?;
    }
    Ok(())
}
