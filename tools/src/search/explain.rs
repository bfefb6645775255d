//! Human-readable explanations of a ranking, for people tuning a catalog
//! (`troupe tools search --explain`): per query, what the query became (typed words, expansions),
//! the "nothing fits" decision with its evidence, and per tool which legs found it and why.

use std::fmt::Write;

use super::Catalog;
use super::decision::probability;
use super::hybrid::{COVERAGE_FLOOR, HybridAnswer, MIN_BACKGROUND_TOOLS};
use super::semantic::SemanticReady;

/// Explains the hybrid ranking of `query` (at most `limit` tools). `semantic` is the catalog's
/// embeddings when ready; without them the text says the lexical leg answered alone.
pub fn explain_hybrid(
    catalog: &Catalog,
    query: &str,
    limit: usize,
    semantic: Option<&SemanticReady>,
) -> String {
    let answer = catalog.hybrid_search(query, limit, semantic);
    render_hybrid(catalog, query, &answer)
}

/// Renders one hybrid answer.
pub fn render_hybrid(catalog: &Catalog, query: &str, answer: &HybridAnswer) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "query {query:?} (ranking: hybrid)");
    let typed = if answer.prepared.typed.is_empty() {
        "(none)".to_string()
    } else {
        answer.prepared.typed.join(", ")
    };
    let _ = writeln!(out, "  typed words (stemmed): {typed}");
    let expansions: Vec<String> = answer
        .prepared
        .terms
        .iter()
        .filter_map(|t| {
            t.expands
                .as_ref()
                .map(|from| format!("{} for \"{from}\" (weight {:.2})", t.stem, t.weight))
        })
        .collect();
    if !expansions.is_empty() {
        let _ = writeln!(out, "  expansions: {}", expansions.join("; "));
    }
    let v = &answer.verdict;
    let legs = if answer.semantic_used {
        "lexical and semantic legs"
    } else if semantic_compiled() {
        "lexical leg only (the tool embeddings are not ready)"
    } else {
        "lexical leg only (built without the semantic feature)"
    };
    let _ = writeln!(out, "  legs: {legs}");
    if answer.phrased_tools > 0 {
        let _ = writeln!(
            out,
            "  phrasings: {} tools (the lexical score is BM25F and the phrasings' BM25, each as a \
             share of its best; a similarity is blended with the closest phrasing's)",
            answer.phrased_tools
        );
    }
    let score_name = if answer.phrased_tools > 0 {
        "score"
    } else {
        "BM25F"
    };
    let evidence = match (v.evidence, v.logit, v.background) {
        (Some(e), Some(logit), Some(bg)) => {
            let _ = writeln!(
                out,
                "  decision inputs: support {:.2}, margin {:.2} sd, similarity {:.3} (background \
                 {bg:.3}), gap {:.2} sd, agreement {:.2}, unknown words {:.2}, length {:.2}, \
                 service named {}, actions not offered {}",
                e.support,
                e.margin,
                e.similarity,
                e.gap,
                e.agreement,
                e.unknown,
                e.length,
                e.service,
                e.unoffered
            );
            format!(
                "fitted score {logit:.2} log-odds, probability {:.3}; answered from {:.2} log-odds \
                 (probability {:.3})",
                probability(logit),
                v.threshold,
                probability(v.threshold)
            )
        }
        _ if v.similarity.is_some() => format!(
            "lexical support {:.2}, answered from {COVERAGE_FLOOR:.2}: fewer than {MIN_BACKGROUND_TOOLS} tools make no semantic background",
            v.coverage
        ),
        _ => format!(
            "lexical support {:.2}, answered from {COVERAGE_FLOOR:.2} without the semantic leg",
            v.coverage
        ),
    };
    if !v.services.is_empty() {
        let _ = writeln!(
            out,
            "  services named: {} (support counts their tools and the other words)",
            v.services.join(", ")
        );
    }
    let evidence = if v.absent_services.is_empty() || !v.services.is_empty() || v.fits {
        evidence
    } else {
        format!(
            "the query names {}, which no tool here serves",
            v.absent_services.join(", ")
        )
    };
    let _ = writeln!(
        out,
        "  decision: {} ({evidence})",
        if v.fits {
            "answered"
        } else {
            "nothing fits, no match returned"
        }
    );
    if answer.ranked.is_empty() {
        let _ = writeln!(out, "  no candidate");
        return out;
    }
    if !v.fits {
        let _ = writeln!(out, "  best candidates, not returned:");
    }
    for (i, m) in answer.ranked.iter().enumerate() {
        let name = &catalog.defs()[m.doc].name;
        let score = if m.exact {
            "exact name".to_string()
        } else {
            format!("fused {:.4}", m.score)
        };
        let _ = writeln!(out, "  {}. {name} ({score})", i + 1);
        match m.lexical {
            Some((rank, score)) => {
                let terms: Vec<String> = m
                    .matched
                    .iter()
                    .map(|t| match &t.expands {
                        None => t.stem.clone(),
                        Some(from) => format!("{} (expands \"{from}\")", t.stem),
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "     lexical: rank {rank}, {score_name} {score:.3}, support {:.2}, matched {}",
                    m.coverage,
                    if terms.is_empty() {
                        "nothing".to_string()
                    } else {
                        terms.join(", ")
                    }
                );
            }
            None => {
                let _ = writeln!(out, "     lexical: not found");
            }
        }
        if answer.semantic_used {
            match m.semantic {
                Some((rank, sim)) => {
                    let _ = writeln!(out, "     semantic: rank {rank}, similarity {sim:.3}");
                }
                None => {
                    let _ = writeln!(out, "     semantic: not among its nearest tools");
                }
            }
        }
    }
    out
}

/// Explains the reference ranking of `query`: its tokens, the rarest-token gate, the floor, and
/// each admitted tool's BM25 score.
pub fn explain_reference(catalog: &Catalog, query: &str, limit: usize) -> String {
    let e = catalog.explain(query);
    let mut out = String::new();
    let _ = writeln!(out, "query {query:?} (ranking: reference)");
    let _ = writeln!(out, "  tokens: {}", e.query_tokens.join(", "));
    match &e.gate {
        Some(gate) => {
            let _ = writeln!(
                out,
                "  rarest-token gate: {gate} (held by {} of {} tools); a tool must hold {} of: {}",
                e.gate_df,
                e.n_docs,
                e.required_terms,
                e.answerable.join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "  no token to search with");
        }
    }
    if e.admitted.is_empty() {
        let _ = writeln!(out, "  no match");
    }
    for (i, (doc, score)) in e.admitted.iter().take(limit).enumerate() {
        let name = &catalog.defs()[*doc].name;
        if score.is_infinite() {
            let _ = writeln!(out, "  {}. {name} (exact name)", i + 1);
        } else {
            let _ = writeln!(out, "  {}. {name} (BM25 {score:.3})", i + 1);
        }
    }
    out
}

fn semantic_compiled() -> bool {
    cfg!(feature = "semantic")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolDef;

    fn catalog() -> Catalog {
        Catalog::build(
            [
                ("delete_block", "notion", "Delete a block of a page."),
                ("post_message", "slack", "Post a message to a channel."),
            ]
            .iter()
            .map(|(n, s, d)| {
                Arc::new(ToolDef::new(*n, *d, json!({})).with_toolset(format!("mcp-{s}")))
            })
            .collect(),
        )
    }

    #[test]
    fn hybrid_explanation_names_terms_expansions_and_decision() {
        let c = catalog();
        let text = explain_hybrid(&c, "remove a notion block", 5, None);
        assert!(
            text.contains("typed words (stemmed): remov, notion, block"),
            "{text}"
        );
        assert!(text.contains("delet for \"remov\""), "{text}");
        assert!(text.contains("decision: answered"), "{text}");
        assert!(text.contains("1. delete_block"), "{text}");
        assert!(
            text.contains("matched notion, block, delet (expands \"remov\")"),
            "{text}"
        );
        assert!(text.contains("lexical leg only"), "{text}");
    }

    #[test]
    fn hybrid_explanation_shows_rejected_candidates() {
        let c = catalog();
        let text = explain_hybrid(&c, "gmail send email", 5, None);
        assert!(text.contains("nothing fits"), "{text}");
        assert!(text.contains("best candidates, not returned"), "{text}");
        assert!(
            text.contains("the query names gmail, which no tool here serves"),
            "{text}"
        );
        let text = explain_hybrid(&c, "slack post a message", 5, None);
        assert!(text.contains("services named: slack"), "{text}");
        assert!(text.contains("decision: answered"), "{text}");
    }

    #[test]
    fn reference_explanation_names_the_gate() {
        let c = catalog();
        let text = explain_reference(&c, "delete block", 5);
        assert!(text.contains("rarest-token gate"), "{text}");
        assert!(text.contains("1. delete_block (BM25"), "{text}");
    }
}
