//! The lexical leg of the hybrid ranking: a field-weighted BM25 (BM25F) over split, stemmed
//! words, with the domain vocabulary's expansions and no gate. Built once per catalog, beside
//! the reference index, by [`Catalog::lexical`](super::Catalog::lexical).
//!
//! What differs from the reference ranking and why:
//! - names split on camelCase, digits, `_`, `-` and `__` ([`super::split`]), so `getConsoleErrors`
//!   is found by "console errors";
//! - fields weigh differently: a word of the tool's name says more than one of its description,
//!   and parameter descriptions are indexed at a low weight ([`FIELD_WEIGHTS`]);
//! - a small list of English function words is dropped, and a query word that no tool holds
//!   only narrows the evidence (see [`super::hybrid`]); it never empties the answer;
//! - each typed word scores the best of itself and its vocabulary expansions, the expansions at
//!   [`EXPANSION_WEIGHT`] of a typed word, so synonyms help without outvoting what was typed;
//! - two adjacent query words also try their concatenation ("sequential thinking" finds a tool
//!   named `sequentialthinking`).

use std::sync::Arc;

use serde_json::Value;

use super::catalog::FastMap;
use super::split::for_each_split_word;
use super::tokenize::stem;
use super::vocabulary::{EXPANSION_WEIGHT, vocabulary};
use crate::tool::ToolDef;

/// BM25 term-frequency saturation of the lexical leg.
pub const K1: f64 = 1.2;
/// BM25 length normalisation of the lexical leg: descriptions vary a lot in length, and a long
/// one is not less about its tool, so length counts for less than in the reference.
pub const B: f64 = 0.5;

/// How much one occurrence of a word counts in each field.
pub const FIELD_WEIGHTS: FieldWeights = FieldWeights {
    name: 3.0,
    label: 1.5,
    description: 1.0,
    param_name: 0.7,
    param_description: 0.3,
};

/// Per-field weights of a word occurrence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldWeights {
    /// The tool's name (split into words).
    pub name: f64,
    /// The server or toolset label (`github` for `mcp-github`).
    pub label: f64,
    /// The tool's description.
    pub description: f64,
    /// Top-level parameter names.
    pub param_name: f64,
    /// Top-level parameter descriptions.
    pub param_description: f64,
}

/// English function words: they say how a sentence is built, not what a tool does.
const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "been", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "each", "either", "every", "few", "for", "from", "had", "has", "have", "having", "he", "her",
    "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "may", "me", "might", "mine", "more", "most", "must", "my", "myself", "no", "nor",
    "not", "of", "on", "once", "only", "onto", "or", "other", "our", "ours", "own", "please",
    "same", "shall", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "us", "very", "via", "was", "we", "were", "what", "whatever", "when", "where", "whether",
    "which", "while", "who", "whom", "whose", "why", "will", "with", "within", "without", "would",
    "you", "your", "yours", "yourself", "using", "want", "need", "like", "let", "lets",
];

/// Whether `word` (lowercased, unstemmed) carries no meaning for search: a function word, or a
/// number, which names an instance (PR 42, worker-3) rather than a capability.
pub fn is_stop_word(word: &str) -> bool {
    word.bytes().all(|b| b.is_ascii_digit()) || STOP_WORDS.contains(&word)
}

/// The words of a text for the lexical leg: split, lowercased, stop words dropped, stemmed.
pub fn lexical_stems(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_split_word(text, |w| {
        if !is_stop_word(w) {
            out.push(stem(w));
        }
    });
    out
}

/// One term of a prepared query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTerm {
    /// The stem.
    pub stem: String,
    /// Its term id in the index, if any tool holds it.
    pub term: Option<u32>,
    /// 1.0 for a typed word, less for an expansion.
    pub weight: f64,
    /// The typed word (index into [`PreparedQuery::typed`]) this term stands for.
    pub concept: usize,
    /// `None` for a typed word; the typed stems it expands otherwise.
    pub expands: Option<String>,
}

/// A query made ready for the lexical leg: typed content words and their expansions.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedQuery {
    /// The typed content stems, deduplicated, in order.
    pub typed: Vec<String>,
    /// Every term to score: the typed stems first, then expansions and joined words.
    pub terms: Vec<QueryTerm>,
    /// The idf of each typed stem, read once per query rather than once per tool weighed.
    typed_idf: Vec<f64>,
}

/// A tool the lexical leg found, with the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct LexicalHit {
    /// Index into the catalog's defs.
    pub doc: usize,
    /// The BM25F score.
    pub score: f64,
    /// Bit `i` is set when the tool holds `prepared.terms[i]` (for the first 64 terms): the
    /// query's support is read from it without looking the terms up again.
    pub held: u64,
}

/// One tool's running score while a query is scored.
#[derive(Debug, Clone, Copy, Default)]
struct Accumulator {
    /// Sum over the typed words done so far.
    total: f64,
    /// The best score of the current typed word's terms.
    best: f64,
    /// Bits of the terms held ([`LexicalHit::held`]).
    held: u64,
}

thread_local! {
    /// Per-thread accumulators, one per tool, kept zeroed between queries so a query does not
    /// allocate and clear a catalog-sized array.
    static SCRATCH: std::cell::RefCell<Vec<Accumulator>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The lexical leg's index: term -> (tool, precomputed BM25F impact), plus document frequencies.
pub struct LexicalIndex {
    vocab: FastMap<String, u32>,
    postings: Vec<Vec<(u32, f32)>>,
    n_docs: usize,
}

impl std::fmt::Debug for LexicalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LexicalIndex")
            .field("tools", &self.n_docs)
            .field("terms", &self.vocab.len())
            .finish_non_exhaustive()
    }
}

/// Calls `each(text, weight)` for every field of a tool's index text.
fn for_each_field(def: &ToolDef, label: Option<&str>, mut each: impl FnMut(&str, f64)) {
    each(&def.name, FIELD_WEIGHTS.name);
    if let Some(label) = label {
        each(label, FIELD_WEIGHTS.label);
    }
    if let Some(description) = &def.description {
        each(description, FIELD_WEIGHTS.description);
    }
    let props = def
        .parameters
        .as_ref()
        .and_then(Value::as_object)
        .and_then(|p| key(p, "properties"));
    if let Some(Value::Object(props)) = props {
        for (name, schema) in props {
            each(name, FIELD_WEIGHTS.param_name);
            if let Some(Value::String(d)) = schema.as_object().and_then(|s| key(s, "description")) {
                each(d, FIELD_WEIGHTS.param_description);
            }
        }
    }
}

/// `map[name]`: a schema object has a handful of keys, and comparing them costs less than
/// hashing the name the way `Map::get` does.
fn key<'a>(map: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    map.iter().find_map(|(k, v)| (k == name).then_some(v))
}

impl LexicalIndex {
    /// Indexes `defs`; `labels[i]` is tool i's source label, `None` when it has no source.
    pub fn build(defs: &[Arc<ToolDef>], labels: &[Option<&str>]) -> LexicalIndex {
        let mut vocab: FastMap<String, u32> = FastMap::default();
        // Lowercased word -> term id (`u32::MAX` for a stop word), so each word is stemmed once.
        let mut seen: FastMap<String, u32> = FastMap::default();
        let mut postings: Vec<Vec<(u32, f32)>> = Vec::new();
        let mut last_doc: Vec<u32> = Vec::new();
        let mut doc_len: Vec<f64> = Vec::with_capacity(defs.len());
        for (doc, def) in defs.iter().enumerate() {
            let doc = doc as u32;
            let mut len = 0.0;
            for_each_field(
                def,
                labels.get(doc as usize).copied().flatten(),
                |text, weight| {
                    for_each_split_word(text, |word| {
                        let id = match seen.get(word) {
                            Some(&id) => id,
                            None => {
                                let id = if is_stop_word(word) {
                                    u32::MAX
                                } else {
                                    let next = vocab.len() as u32;
                                    let id = *vocab.entry(stem(word)).or_insert(next);
                                    if id == next {
                                        postings.push(Vec::new());
                                        last_doc.push(u32::MAX);
                                    }
                                    id
                                };
                                seen.insert(word.to_string(), id);
                                id
                            }
                        };
                        if id == u32::MAX {
                            return;
                        }
                        len += weight;
                        let t = id as usize;
                        if last_doc[t] == doc {
                            if let Some(last) = postings[t].last_mut() {
                                last.1 += weight as f32;
                            }
                        } else {
                            last_doc[t] = doc;
                            postings[t].push((doc, weight as f32));
                        }
                    })
                },
            );
            doc_len.push(len);
        }
        let avg_dl = (doc_len.iter().sum::<f64>() / defs.len().max(1) as f64).max(1.0);
        for list in &mut postings {
            for (doc, tf) in list.iter_mut() {
                let wtf = f64::from(*tf);
                let norm = 1.0 - B + B * doc_len[*doc as usize] / avg_dl;
                *tf = (wtf * (K1 + 1.0) / (wtf + K1 * norm)) as f32;
            }
        }
        LexicalIndex {
            vocab,
            postings,
            n_docs: defs.len(),
        }
    }

    /// How many tools hold `stem`.
    pub fn df(&self, stem: &str) -> usize {
        self.vocab
            .get(stem)
            .map_or(0, |&t| self.postings[t as usize].len())
    }

    /// `ln(1 + (N - df + 0.5) / (df + 0.5))` for `stem` (largest for a word no tool holds).
    pub fn idf(&self, stem: &str) -> f64 {
        super::bm25::idf(self.n_docs, self.df(stem))
    }

    /// Tools indexed.
    pub fn len(&self) -> usize {
        self.n_docs
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    /// The typed content words of `query`, their vocabulary expansions, and the concatenations
    /// of adjacent typed words that some tool holds.
    pub fn prepare(&self, query: &str) -> PreparedQuery {
        // All words, stop words included, for phrase matching ("turn off", "look up"): as
        // written (lowercased), stemmed, and whether each is a stop word.
        let mut raw: Vec<String> = Vec::new();
        let mut all_stems: Vec<String> = Vec::new();
        let mut stops: Vec<bool> = Vec::new();
        for_each_split_word(query, |w| {
            raw.push(w.to_string());
            all_stems.push(stem(w));
            stops.push(is_stop_word(w));
        });
        let mut typed: Vec<String> = Vec::new();
        // Concept of each word position (None for stop words).
        let mut concept_at: Vec<Option<usize>> = Vec::with_capacity(raw.len());
        for (s, &stop) in all_stems.iter().zip(&stops) {
            if stop {
                concept_at.push(None);
                continue;
            }
            let c = match typed.iter().position(|t| t == s) {
                Some(c) => c,
                None => {
                    typed.push(s.clone());
                    typed.len() - 1
                }
            };
            concept_at.push(Some(c));
        }
        let mut terms: Vec<QueryTerm> = typed
            .iter()
            .enumerate()
            .map(|(c, s)| QueryTerm {
                stem: s.clone(),
                term: self.vocab.get(s).copied(),
                weight: 1.0,
                concept: c,
                expands: None,
            })
            .collect();
        // A stem joins the terms when some tool holds it and its concept lacks it; what it
        // expands is written only then.
        let push = |terms: &mut Vec<QueryTerm>,
                    stem: &str,
                    weight: f64,
                    concept: usize,
                    from: &dyn Fn() -> String| {
            if terms.iter().any(|t| t.stem == stem && t.concept == concept) {
                return;
            }
            let Some(&term) = self.vocab.get(stem) else {
                return;
            };
            terms.push(QueryTerm {
                stem: stem.to_string(),
                term: Some(term),
                weight,
                concept,
                expands: Some(from()),
            });
        };
        // Adjacent content words written as one ("sequential thinking" -> sequentialthinking).
        for i in 1..raw.len() {
            if let (Some(a), Some(_)) = (concept_at[i - 1], concept_at[i]) {
                let joined = stem(&format!("{}{}", raw[i - 1], raw[i]));
                let from = || format!("{} {}", all_stems[i - 1], all_stems[i]);
                push(&mut terms, &joined, 1.0, a, &from);
            }
        }
        for expansion in vocabulary().expand(&all_stems) {
            // The expansion stands for the first content word of the matched entry.
            let Some(concept) = expansion.positions.clone().find_map(|p| concept_at[p]) else {
                continue;
            };
            let from = || expansion.matched.join(" ");
            for s in &expansion.stems {
                push(&mut terms, s, EXPANSION_WEIGHT, concept, &from);
            }
        }
        let typed_idf = typed.iter().map(|t| self.idf(t)).collect();
        PreparedQuery {
            typed,
            terms,
            typed_idf,
        }
    }

    /// Scores every tool holding a term of `prepared`: per typed word, the best of its own
    /// score and its expansions' (weighted), summed over typed words. Best first; equal scores
    /// keep catalog order.
    pub fn score(&self, prepared: &PreparedQuery) -> Vec<LexicalHit> {
        self.score_top(prepared, usize::MAX)
    }

    /// The best `k` of [`LexicalIndex::score`], in the same order, without sorting the rest: a
    /// word that every tool holds (the server's name in a one-server catalog) makes thousands of
    /// hits, and a query needs only the head.
    pub fn score_top(&self, prepared: &PreparedQuery, k: usize) -> Vec<LexicalHit> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(self.n_docs, Accumulator::default());
            self.score_into(prepared, k, &mut scratch[..self.n_docs])
        })
    }

    /// [`LexicalIndex::score_top`] on `acc`, one zeroed accumulator per tool, left zeroed.
    fn score_into(
        &self,
        prepared: &PreparedQuery,
        k: usize,
        acc: &mut [Accumulator],
    ) -> Vec<LexicalHit> {
        // Each held term's weight times its idf, an expansion's idf capped at its typed word's:
        // an expansion stands in for the typed word and is never worth more than it would be,
        // however rare it is. A typed word in no tool has the largest idf there is, so it caps
        // nothing.
        let caps = &prepared.typed_idf;
        let factors: Vec<Option<f64>> = prepared
            .terms
            .iter()
            .map(|t| {
                t.term.map(|term| {
                    let idf = super::bm25::idf(self.n_docs, self.postings[term as usize].len());
                    t.weight * idf.min(caps[t.concept])
                })
            })
            .collect();
        // Typed words by the most they can add to a tool's score, largest first, and what the
        // ones after each can still add together: once `k` tools score more than that, a tool
        // none of the earlier words reached cannot make the head, and is left out.
        let mut concepts: Vec<(usize, f64)> = (0..prepared.typed.len())
            .map(|c| {
                // No impact exceeds K1 + 1 (BM25's saturation).
                let most = prepared
                    .terms
                    .iter()
                    .zip(&factors)
                    .filter(|(t, _)| t.concept == c)
                    .filter_map(|(_, factor)| factor.map(|f| f * (K1 + 1.0)))
                    .fold(0.0, f64::max);
                (c, most)
            })
            .collect();
        concepts.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut after = vec![0.0; concepts.len() + 1];
        for i in (0..concepts.len()).rev() {
            after[i] = after[i + 1] + concepts[i].1;
        }

        let mut touched: Vec<u32> = Vec::new();
        let mut any: Vec<u32> = Vec::new();
        let mut closed = false;
        for (position, &(concept, _)) in concepts.iter().enumerate() {
            if !closed && position > 0 && any.len() >= k {
                let mut totals: Vec<f64> = any.iter().map(|&d| acc[d as usize].total).collect();
                // The k-th best is at most the best: no need to find it when the best is short.
                let best = totals.iter().copied().fold(0.0, f64::max);
                if best > after[position] {
                    let (_, kth, _) = totals.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                    closed = *kth > after[position];
                }
            }
            for (i, t) in prepared.terms.iter().enumerate() {
                if t.concept != concept {
                    continue;
                }
                let (Some(term), Some(factor)) = (t.term, factors[i]) else {
                    continue;
                };
                let bit = if i < 64 { 1u64 << i } else { 0 };
                for &(doc, impact) in &self.postings[term as usize] {
                    let a = &mut acc[doc as usize];
                    if closed && a.total == 0.0 {
                        continue;
                    }
                    a.held |= bit;
                    let s = factor * f64::from(impact);
                    if a.best == 0.0 {
                        touched.push(doc);
                    }
                    if s > a.best {
                        a.best = s;
                    }
                }
            }
            for &doc in &touched {
                let a = &mut acc[doc as usize];
                if a.total == 0.0 {
                    any.push(doc);
                }
                a.total += a.best;
                a.best = 0.0;
            }
            touched.clear();
        }
        // Every tool a term reached is in `any` (once, unless its scores were all 0): taking its
        // accumulator leaves the scratch zeroed for the next query.
        let mut hits: Vec<LexicalHit> = Vec::with_capacity(any.len());
        for &doc in &any {
            let a = std::mem::take(&mut acc[doc as usize]);
            if a.held == 0 && a.total == 0.0 && hits.iter().any(|h| h.doc == doc as usize) {
                continue;
            }
            hits.push(LexicalHit {
                doc: doc as usize,
                score: a.total,
                held: a.held,
            });
        }
        let order =
            |a: &LexicalHit, b: &LexicalHit| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc));
        if hits.len() > k {
            hits.select_nth_unstable_by(k, order);
            hits.truncate(k);
        }
        hits.sort_unstable_by(order);
        hits
    }

    /// Whether tool `doc` holds `stem`.
    pub fn holds(&self, doc: usize, stem: &str) -> bool {
        self.vocab.get(stem).is_some_and(|&t| {
            self.postings[t as usize]
                .binary_search_by_key(&(doc as u32), |&(d, _)| d)
                .is_ok()
        })
    }

    /// How much of the query tool `doc` answers, in `0..=1`: the idf-weighted share of the typed
    /// words it holds, a word held only through an expansion counting at the expansion weight.
    /// Words no tool holds weigh the most, so a query about something absent scores low.
    pub fn coverage(&self, doc: usize, prepared: &PreparedQuery) -> f64 {
        self.coverage_except(doc, prepared, &[])
    }

    /// [`LexicalIndex::coverage`] of the typed words other than `skip` (indices into
    /// [`PreparedQuery::typed`]); 0 when no word is left.
    pub fn coverage_except(&self, doc: usize, prepared: &PreparedQuery, skip: &[usize]) -> f64 {
        self.support(prepared, skip, |_, t| self.holds(doc, &t.stem))
    }

    /// [`LexicalIndex::coverage_except`] of a scored hit, from the terms it holds
    /// ([`LexicalHit::held`]) rather than from the postings.
    pub fn hit_coverage(&self, hit: &LexicalHit, prepared: &PreparedQuery, skip: &[usize]) -> f64 {
        if prepared.terms.len() > 64 {
            return self.coverage_except(hit.doc, prepared, skip);
        }
        self.support(prepared, skip, |i, _| hit.held & (1u64 << i) != 0)
    }

    /// The idf-weighted share of the typed words other than `skip` that a tool holds, a word
    /// held only through an expansion counting at the expansion's weight; `holds(i, term)` says
    /// whether the tool holds `prepared.terms[i]`.
    fn support(
        &self,
        prepared: &PreparedQuery,
        skip: &[usize],
        holds: impl Fn(usize, &QueryTerm) -> bool,
    ) -> f64 {
        let mut held = 0.0;
        let mut all = 0.0;
        for (c, &idf) in prepared.typed_idf.iter().enumerate() {
            if skip.contains(&c) {
                continue;
            }
            all += idf;
            let best = prepared
                .terms
                .iter()
                .enumerate()
                .filter(|&(i, t)| t.concept == c && holds(i, t))
                .map(|(_, t)| t.weight)
                .fold(0.0, f64::max);
            held += idf * best;
        }
        if all > 0.0 { held / all } else { 0.0 }
    }

    /// The terms of `prepared` that tool `doc` holds.
    pub fn matched<'q>(&self, doc: usize, prepared: &'q PreparedQuery) -> Vec<&'q QueryTerm> {
        prepared
            .terms
            .iter()
            .filter(|t| self.holds(doc, &t.stem))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn index(tools: &[(&str, &str, &str)]) -> (Vec<Arc<ToolDef>>, LexicalIndex) {
        let defs: Vec<Arc<ToolDef>> = tools
            .iter()
            .map(|(name, label, desc)| {
                Arc::new(ToolDef::new(*name, *desc, json!({})).with_toolset(format!("mcp-{label}")))
            })
            .collect();
        let labels: Vec<Option<&str>> = tools.iter().map(|(_, l, _)| Some(*l)).collect();
        let idx = LexicalIndex::build(&defs, &labels);
        (defs, idx)
    }

    fn top(defs: &[Arc<ToolDef>], idx: &LexicalIndex, query: &str) -> Vec<String> {
        idx.score(&idx.prepare(query))
            .into_iter()
            .map(|h| defs[h.doc].name.clone())
            .collect()
    }

    #[test]
    fn stop_words_and_numbers_carry_nothing() {
        assert!(is_stop_word("the") && is_stop_word("42") && !is_stop_word("get"));
        assert_eq!(
            lexical_stems("Which PR 42 is the newest?"),
            ["pr", "newest"]
        );
    }

    #[test]
    fn an_unknown_word_narrows_instead_of_emptying() {
        let (defs, idx) = index(&[
            ("create_issue", "github", "Open a new issue."),
            ("list_issues", "github", "List issues."),
        ]);
        assert_eq!(
            top(&defs, &idx, "github create issue telegram")[0],
            "create_issue"
        );
    }

    #[test]
    fn camel_case_names_are_found_by_their_words() {
        let (defs, idx) = index(&[
            (
                "getConsoleErrors",
                "browser-tools",
                "Check our browser logs",
            ),
            ("takeScreenshot", "browser-tools", "Take a screenshot"),
        ]);
        assert_eq!(top(&defs, &idx, "console errors"), ["getConsoleErrors"]);
    }

    #[test]
    fn joined_words_find_a_run_together_name() {
        let (defs, idx) = index(&[
            ("sequentialthinking", "reasoning", "Step by step."),
            ("other", "reasoning", "Thinking aloud about sequences."),
        ]);
        let q = idx.prepare("sequential thinking");
        assert!(q.terms.iter().any(|t| t.stem == stem("sequentialthinking")));
        assert_eq!(
            top(&defs, &idx, "sequential thinking")[0],
            "sequentialthinking"
        );
    }

    #[test]
    fn name_outweighs_description() {
        let (defs, idx) = index(&[
            ("notes_tool", "x", "Deletes a page among other things."),
            ("delete_page", "x", "Removes something."),
        ]);
        assert_eq!(top(&defs, &idx, "delete page")[0], "delete_page");
    }

    #[test]
    fn expansions_find_synonyms_below_typed_words() {
        let (defs, idx) = index(&[
            ("delete_block", "notion", "Deletes a block."),
            ("erase_block", "notion", "Erases a block."),
            ("get_block", "notion", "Gets a block."),
        ]);
        // "remove" is in no tool: the delete group finds both, equally.
        let got = top(&defs, &idx, "remove block");
        assert_eq!(&got[..2], ["delete_block", "erase_block"]);
        // Typed "erase" beats the expansion to delete.
        assert_eq!(top(&defs, &idx, "erase block")[0], "erase_block");
        let q = idx.prepare("erase block");
        let delete = q.terms.iter().find(|t| t.stem == stem("delete")).unwrap();
        assert!(delete.weight < 1.0 && delete.expands.as_deref() == Some("eras"));
    }

    #[test]
    fn a_synonym_and_its_word_count_once() {
        let (defs, idx) = index(&[
            ("delete_remove", "x", "Delete, remove, erase, destroy."),
            ("delete_thing", "x", "Delete a thing."),
        ]);
        let q = idx.prepare("delete thing");
        let hits = idx.score(&q);
        assert_eq!(defs[hits[0].doc].name, "delete_thing");
    }

    #[test]
    fn coverage_weighs_words_by_rarity() {
        let (_, idx) = index(&[
            ("create_issue", "github", "Create an issue."),
            ("create_page", "notion", "Create a page."),
            ("list_pages", "notion", "List pages."),
        ]);
        let full = idx.prepare("github create issue");
        assert!((idx.coverage(0, &full) - 1.0).abs() < 1e-9);
        // "linear" is in no tool: the best tool answers less than half of the query's weight.
        let absent = idx.prepare("linear create issue");
        assert!(idx.coverage(0, &absent) < 0.75);
        assert!(idx.coverage(0, &absent) > idx.coverage(1, &absent));
        // Nothing but stop words: nothing to cover.
        assert_eq!(idx.coverage(0, &idx.prepare("the of a")), 0.0);
    }

    #[test]
    fn the_head_is_exactly_that_of_a_full_scoring() {
        // Every tool holds "acme" (as every tool of a one-server catalog holds its name), a few
        // hold the rarer words: skipping tools that cannot reach the head must not change it.
        let mut tools: Vec<(String, String)> = Vec::new();
        for i in 0..120 {
            let words = match i % 6 {
                0 => "Create a dns record in the zone.",
                1 => "List dns records.",
                2 => "Update zone settings.",
                3 => "Delete a worker script.",
                4 => "Upload a worker script.",
                _ => "Show the account.",
            };
            tools.push((format!("acme_tool_{i}"), format!("Acme: {words} Item {i}.")));
        }
        let spec: Vec<(&str, &str, &str)> = tools
            .iter()
            .map(|(n, d)| (n.as_str(), "acme", d.as_str()))
            .collect();
        let (_, idx) = index(&spec);
        for query in [
            "acme dns records list",
            "create dns record",
            "acme zone settings update",
            "remove acme worker script",
            "acme",
            "acme telegram",
        ] {
            let prepared = idx.prepare(query);
            let full = idx.score(&prepared);
            for k in [1, 5, 17, 40, 119, 500] {
                let head = idx.score_top(&prepared, k);
                assert_eq!(head, full[..k.min(full.len())], "{query}, k = {k}");
            }
        }
        // The scratch is left zeroed: the same query scores the same the second time.
        let prepared = idx.prepare("acme dns records list");
        assert_eq!(idx.score_top(&prepared, 5), idx.score_top(&prepared, 5));
    }
}
