//! The reference ranking of a query over a catalog and a few extra tools together (hosted
//! connector tools a gateway found for that query), without indexing the catalog again: the
//! statistics (tool count, document frequencies, mean length) are summed over both, so the
//! answer is exactly that of [`Catalog::search`] on one catalog holding the catalog's tools
//! followed by the extra ones.

use super::bm25::{B, K1, idf, required_terms};
use super::catalog::Catalog;
use super::tokenize::tokenize;

/// A tool of the merged ranking: `Local(doc)` of the catalog, `Extra(doc)` of the extra tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergedDoc {
    /// A tool of the catalog, by its index there.
    Local(usize),
    /// One of the extra tools, by its index among them.
    Extra(usize),
}

struct Term<'a> {
    token: &'a str,
    ids: [Option<u32>; 2],
    df: usize,
    idf: f64,
}

impl Catalog {
    /// The first `limit` tools for `query` over this catalog and `extra` together, ranked as
    /// [`Catalog::search`] ranks one catalog: ties keep this catalog's tools first, in order.
    pub fn search_with(&self, extra: &Catalog, query: &str, limit: usize) -> Vec<MergedDoc> {
        let parts = [self, extra];
        let n_docs = self.len() + extra.len();
        let tokens = tokenize(query);
        if n_docs == 0 || limit == 0 || tokens.is_empty() {
            return Vec::new();
        }
        let terms: Vec<Term<'_>> = tokens
            .iter()
            .map(|token| {
                let ids = [self.term_id(token), extra.term_id(token)];
                let df = ids
                    .iter()
                    .zip(parts)
                    .map(|(id, part)| id.map_or(0, |id| part.postings(id).len()))
                    .sum();
                Term {
                    token,
                    ids,
                    df,
                    idf: idf(n_docs, df),
                }
            })
            .collect();
        let mut gate = 0;
        for (i, t) in terms.iter().enumerate() {
            if t.idf > terms[gate].idf {
                gate = i;
            }
        }
        // Distinct answerable terms (equal tokens are the same term in both parts).
        let mut answerable: Vec<&Term<'_>> = Vec::new();
        for t in terms.iter().filter(|t| t.df > 0) {
            if !answerable.iter().any(|a| a.token == t.token) {
                answerable.push(t);
            }
        }
        let required = required_terms(answerable.len());
        let total: u64 = parts
            .iter()
            .flat_map(|part| (0..part.len()).map(|doc| u64::from(part.doc_len(doc))))
            .sum();
        let length_norm = (total as f64 / n_docs as f64).max(1.0);
        let lowered = query.trim().to_lowercase();

        let mut admitted: Vec<(MergedDoc, f64)> = Vec::new();
        for (p, part) in parts.iter().enumerate() {
            let exact = part.exact_name(&lowered);
            let mut candidates: Vec<u32> = terms[gate].ids[p]
                .map_or(&[][..], |id| part.postings(id))
                .to_vec();
            candidates.extend_from_slice(&exact);
            candidates.sort_unstable();
            candidates.dedup();
            for doc in candidates {
                let doc = doc as usize;
                let merged = if p == 0 {
                    MergedDoc::Local(doc)
                } else {
                    MergedDoc::Extra(doc)
                };
                if exact.contains(&(doc as u32)) {
                    admitted.push((merged, f64::INFINITY));
                    continue;
                }
                let held = answerable
                    .iter()
                    .filter(|a| a.ids[p].is_some_and(|id| part.term_frequency(doc, id) > 0))
                    .count();
                if held < required {
                    continue;
                }
                let dl = f64::from(part.doc_len(doc));
                let mut score = 0.0;
                for t in &terms {
                    let Some(id) = t.ids[p] else { continue };
                    let tf = part.term_frequency(doc, id);
                    if t.df == 0 || tf == 0 {
                        continue;
                    }
                    let tf = f64::from(tf);
                    // The reference's order of operations, as in `bm25`.
                    let denom = tf + K1 * (1.0 - B + B * dl / length_norm);
                    score += t.idf * tf * (K1 + 1.0) / denom;
                }
                admitted.push((merged, score));
            }
        }
        admitted.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
        admitted.truncate(limit);
        admitted.into_iter().map(|(doc, _)| doc).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolDef;

    fn defs(tools: &[(&str, &str)]) -> Vec<Arc<ToolDef>> {
        tools
            .iter()
            .map(|(name, desc)| Arc::new(ToolDef::new(*name, *desc, json!({})).with_toolset("p")))
            .collect()
    }

    #[test]
    fn the_same_answer_as_one_catalog_of_both() {
        let local = defs(&[
            ("gmail_send", "Send an email from gmail."),
            ("gmail_fetch", "Fetch emails from gmail."),
            ("slack_post", "Send a message to slack."),
            ("github_issue", "Open an issue."),
            ("send", "Send."),
        ]);
        let extra = defs(&[
            ("mail_send", "Send mail, send email, send anything."),
            ("calendar", "Add an event."),
            ("gmail_send", "A twin name."),
        ]);
        let one = Catalog::build(local.iter().chain(&extra).cloned().collect());
        let (local_cat, extra_cat) = (Catalog::build(local.clone()), Catalog::build(extra.clone()));
        for query in [
            "gmail send email",
            "send",
            "email",
            "add an event",
            "nothing",
            "gmail_send",
            "a b c d send email",
        ] {
            for limit in [1, 3, 10] {
                let want: Vec<String> = one
                    .search(query, limit)
                    .into_iter()
                    .map(|d| one.defs()[d].name.clone())
                    .collect();
                let got: Vec<String> = local_cat
                    .search_with(&extra_cat, query, limit)
                    .into_iter()
                    .map(|d| match d {
                        MergedDoc::Local(d) => local[d].name.clone(),
                        MergedDoc::Extra(d) => extra[d].name.clone(),
                    })
                    .collect();
                assert_eq!(got, want, "{query} / {limit}");
            }
        }
    }
}
