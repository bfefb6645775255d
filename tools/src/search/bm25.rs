//! Ranking a query against a [`Catalog`]: BM25 (k1 1.5, b 0.75) behind two filters, the
//! rarest-token gate and the relevance floor, with exact tool names always first. Called by the
//! `tool_search` bridge; [`Catalog::explain`] shows the same computation step by step.
//!
//! A query touches only the postings of its gate token plus the exact-name matches, so its cost
//! follows how rare its rarest word is, not the size of the catalog.

use super::catalog::Catalog;
use super::tokenize::tokenize;

/// BM25 term-frequency saturation.
pub const K1: f64 = 1.5;
/// BM25 length normalisation.
pub const B: f64 = 0.75;
/// Share of the answerable query terms a tool must hold once the floor engages.
pub const MIN_QUERY_TERM_COVERAGE: f64 = 0.5;
/// The floor engages from this many answerable terms; below it one term is enough.
pub const MIN_ANSWERABLE_TERMS_FOR_COVERAGE: usize = 4;

/// How a query was judged, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The query's tokens, in order, duplicates kept.
    pub query_tokens: Vec<String>,
    /// The rarest token (highest idf; the first one on ties), if the query has tokens.
    pub gate: Option<String>,
    /// How many tools hold the gate.
    pub gate_df: usize,
    /// Tools in the catalog.
    pub n_docs: usize,
    /// Mean index-text length.
    pub avg_dl: f64,
    /// Distinct query tokens that some tool holds, sorted.
    pub answerable: Vec<String>,
    /// How many of them an admitted tool must hold.
    pub required_terms: usize,
    /// Every admitted tool with its score (`+inf` for an exact name), best first.
    pub admitted: Vec<(usize, f64)>,
}

/// One query token resolved against the catalog.
struct QueryTerm {
    term: Option<u32>,
    df: usize,
    idf: f64,
}

/// The number of answerable terms a tool must hold: one below the floor, else half, rounded up.
pub fn required_terms(answerable: usize) -> usize {
    if answerable < MIN_ANSWERABLE_TERMS_FOR_COVERAGE {
        1
    } else {
        (MIN_QUERY_TERM_COVERAGE * answerable as f64).ceil() as usize
    }
}

/// `ln(1 + (N - df + 0.5) / (df + 0.5))`: never negative, largest for a token no tool holds.
pub fn idf(n_docs: usize, df: usize) -> f64 {
    let (n, df) = (n_docs as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

impl Catalog {
    /// The tools matching `query`, best first, at most `limit` of them (indices into
    /// [`Catalog::defs`]). Ties keep catalog order.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        if self.is_empty() || limit == 0 {
            return Vec::new();
        }
        let mut ranked = self.rank(query).map(|r| r.admitted).unwrap_or_default();
        ranked.truncate(limit);
        ranked.into_iter().map(|(doc, _)| doc).collect()
    }

    /// The whole judgement of `query`: tokens, gate, floor and every admitted tool with its
    /// score. [`Catalog::search`] returns the first `limit` of `admitted`.
    pub fn explain(&self, query: &str) -> Explanation {
        self.rank(query).unwrap_or_else(|| Explanation {
            query_tokens: tokenize(query),
            gate: None,
            gate_df: 0,
            n_docs: self.len(),
            avg_dl: self.avg_dl(),
            answerable: Vec::new(),
            required_terms: 0,
            admitted: Vec::new(),
        })
    }

    /// `None` when the query has no tokens or the catalog is empty.
    fn rank(&self, query: &str) -> Option<Explanation> {
        let tokens = tokenize(query);
        if tokens.is_empty() || self.is_empty() {
            return None;
        }
        let n_docs = self.len();
        let terms: Vec<QueryTerm> = tokens
            .iter()
            .map(|t| {
                let term = self.term_id(t);
                let df = term.map_or(0, |id| self.postings(id).len());
                QueryTerm {
                    term,
                    df,
                    idf: idf(n_docs, df),
                }
            })
            .collect();

        // The gate: highest idf, the first in query order on ties.
        let mut gate = 0;
        for (i, t) in terms.iter().enumerate() {
            if t.idf > terms[gate].idf {
                gate = i;
            }
        }

        // Distinct answerable terms, by term id (equal tokens have equal ids).
        let mut answerable: Vec<(u32, &str)> = terms
            .iter()
            .zip(&tokens)
            .filter_map(|(t, tok)| t.term.map(|id| (id, tok.as_str())))
            .collect();
        answerable.sort_unstable();
        answerable.dedup_by_key(|(id, _)| *id);
        let required = required_terms(answerable.len());

        // Candidates in catalog order: the gate's postings merged with the exact-name matches.
        let gate_docs: &[u32] = terms[gate].term.map_or(&[], |id| self.postings(id));
        let exact = self.exact_name(&query.trim().to_lowercase());
        let mut candidates: Vec<u32> = Vec::with_capacity(gate_docs.len() + exact.len());
        candidates.extend_from_slice(gate_docs);
        candidates.extend_from_slice(&exact);
        if !exact.is_empty() {
            candidates.sort_unstable();
            candidates.dedup();
        }

        let length_norm = self.avg_dl().max(1.0);
        let mut admitted: Vec<(usize, f64)> = Vec::new();
        for &doc in &candidates {
            let doc = doc as usize;
            if exact.contains(&(doc as u32)) {
                admitted.push((doc, f64::INFINITY));
                continue;
            }
            let held = answerable
                .iter()
                .filter(|(id, _)| self.term_frequency(doc, *id) > 0)
                .count();
            if held < required {
                continue;
            }
            let dl = f64::from(self.doc_len(doc));
            let mut score = 0.0;
            for t in &terms {
                let Some(id) = t.term else { continue };
                let tf = self.term_frequency(doc, id);
                if t.df == 0 || tf == 0 {
                    continue;
                }
                let tf = f64::from(tf);
                // Same order of operations as the reference, so scores agree to the last bit.
                let denom = tf + K1 * (1.0 - B + B * dl / length_norm);
                score += t.idf * tf * (K1 + 1.0) / denom;
            }
            admitted.push((doc, score));
        }
        // Stable: equal scores keep catalog order.
        admitted.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));

        let mut answerable_tokens: Vec<String> =
            answerable.iter().map(|(_, t)| t.to_string()).collect();
        answerable_tokens.sort();
        Some(Explanation {
            gate: Some(tokens[gate].clone()),
            gate_df: terms[gate].df,
            query_tokens: tokens,
            n_docs,
            avg_dl: self.avg_dl(),
            answerable: answerable_tokens,
            required_terms: required,
            admitted,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolDef;

    fn catalog(tools: &[(&str, &str)]) -> Catalog {
        Catalog::build(
            tools
                .iter()
                .map(|(name, desc)| {
                    Arc::new(ToolDef::new(*name, *desc, json!({})).with_toolset("p"))
                })
                .collect(),
        )
    }

    fn names(c: &Catalog, query: &str, limit: usize) -> Vec<String> {
        c.search(query, limit)
            .into_iter()
            .map(|d| c.defs()[d].name.clone())
            .collect()
    }

    #[test]
    fn gate_ties_go_to_the_first_token() {
        let c = catalog(&[("alpha", "red"), ("beta", "blue"), ("gamma", "green")]);
        // red and blue are both held by one tool: equal idf, red comes first.
        let e = c.explain("red blue");
        assert_eq!(e.gate.as_deref(), Some("red"));
        assert_eq!(names(&c, "red blue", 5), ["alpha"]);
        assert_eq!(names(&c, "blue red", 5), ["beta"]);
    }

    #[test]
    fn an_unknown_word_is_the_gate_and_empties_the_query() {
        let c = catalog(&[("alpha", "red"), ("beta", "blue")]);
        let e = c.explain("red telegram");
        assert_eq!((e.gate.as_deref(), e.gate_df), (Some("telegram"), 0));
        assert!(names(&c, "red telegram", 5).is_empty());
    }

    #[test]
    fn floor_needs_half_of_four_or_more_terms() {
        assert_eq!(
            (
                required_terms(3),
                required_terms(4),
                required_terms(5),
                required_terms(7)
            ),
            (1, 2, 3, 4)
        );
        let c = catalog(&[
            ("one", "save snippet shell code"),
            ("two", "save"),
            ("three", "snippet shell code"),
            ("four", "snippet shell code"),
        ]);
        // Four answerable terms: two required. `two` holds the gate `save` and nothing else.
        let e = c.explain("save snippet shell code");
        assert_eq!((e.gate.as_deref(), e.required_terms), (Some("save"), 2));
        assert_eq!(names(&c, "save snippet shell code", 5), ["one"]);
        // Three answerable terms: one is enough, so `two` is back.
        let mut three = names(&c, "save snippet shell", 5);
        three.sort();
        assert_eq!(three, ["one", "two"]);
    }

    #[test]
    fn exact_name_is_admitted_even_without_the_gate() {
        let c = catalog(&[
            ("issue_tracker", "issue issue issue"),
            ("mcp__gh__make_issue", "Open one."),
        ]);
        // `mcp` is not indexed (the prefix is stripped), so it is an unknown gate: only the
        // exact name survives, whatever the case and surrounding spaces.
        let e = c.explain("  MCP__gh__Make_Issue ");
        assert_eq!((e.gate.as_deref(), e.gate_df), (Some("mcp"), 0));
        assert_eq!(e.admitted, [(1, f64::INFINITY)]);
        assert_eq!(
            names(&c, " mcp__gh__make_issue", 5),
            ["mcp__gh__make_issue"]
        );
        // Without the prefix the words rank normally and the exact name is not involved.
        assert!(
            c.explain("make issue")
                .admitted
                .iter()
                .all(|(_, s)| s.is_finite())
        );
    }

    #[test]
    fn ties_keep_catalog_order_and_limit_cuts() {
        let c = catalog(&[("r_b", "report"), ("r_a", "report"), ("r_c", "report")]);
        assert_eq!(names(&c, "report", 5), ["r_b", "r_a", "r_c"]);
        assert_eq!(names(&c, "report", 2), ["r_b", "r_a"]);
        assert!(names(&c, "report", 0).is_empty());
    }

    #[test]
    fn duplicate_query_tokens_count_twice() {
        let c = catalog(&[("a", "zeta omega"), ("b", "zeta")]);
        let once = c.explain("zeta omega").admitted[0].1;
        let twice = c.explain("zeta zeta omega").admitted[0].1;
        assert!(twice > once);
        assert_eq!(c.explain("zeta zeta omega").answerable, ["omega", "zeta"]);
    }

    #[test]
    fn empty_query_or_catalog_finds_nothing() {
        let c = catalog(&[("a", "x")]);
        assert!(c.search("?!", 5).is_empty());
        assert!(Catalog::build(Vec::new()).search("x", 5).is_empty());
    }
}
