//! The hybrid ranking (`tools.tool_search.ranking: hybrid`, the default): the lexical leg
//! ([`super::lexical`]) and, once the tool embeddings are ready, the semantic leg
//! ([`super::semantic`]), fused by reciprocal rank fusion, exact names always first, and a
//! calibrated "nothing fits" decision.
//!
//! # Nothing fits
//! Embeddings always find a nearest tool, and BM25 finds one for any shared word, so a hit is no
//! evidence by itself. The evidence ([`Evidence`]) is weighed by a logistic regression fitted on
//! labelled queries ([`super::decision`], where the coefficients and how to refit them live); its
//! two main inputs:
//! - **lexical support**: the largest share of the query's weight that one candidate holds
//!   ([`LexicalIndex::coverage`], 0 to 1): rare words count most, and a word that no tool holds
//!   (the typical sign of a service the catalog lacks, "gmail", "stripe") counts the most of all;
//! - **semantic margin**: how many standard deviations the best similarity stands above the
//!   query's mean similarity to the whole catalog (its background). A margin, unlike a raw
//!   similarity, means the same for a long sentence and a two-word query.
//!
//! and beside them the best similarity, its gap to the second, how far the legs agree on the
//! first tool, the share of words no tool holds, the query's length, whether it names a served
//! service, and whether it asks that service for actions none of its tools offers
//! ([`super::actions`]: the mark of a near miss). Until the embeddings are ready, or when the catalog is too small to make a background
//! ([`MIN_BACKGROUND_TOOLS`]), there is no margin, and lexical support must reach
//! [`COVERAGE_FLOOR`] alone. An exact tool name is always answered.
//!
//! The [`services`](super::services) a query names come first: one that no tool serves means
//! nothing fits ("gmail send email" without Gmail tools) unless a served one is named too (then
//! the absent one is the topic: "a GitHub issue about the Telegram bot"); when services are served,
//! the lexical support is that of their tools for the query's other words ("slack delete message"
//! is weighed by whether a Slack tool deletes, not by the "slack" every Slack tool holds).

use std::sync::Arc;
use std::time::Duration;

use super::Catalog;
use super::actions::asked_actions;
use super::catalog::FastMap;
use super::decision::{Evidence, FITTED, FITTED_PHRASED, probability};
use super::lexical::{LexicalIndex, PreparedQuery, QueryTerm};
use super::semantic::{SemanticReady, default_embedder, embedding_text};
use super::services::{services, stems_of};
use super::split::for_each_split_word;
use super::tokenize::{for_each_raw_word, stem};
use crate::config::ToolSearchConfig;

/// Reciprocal rank fusion constant: 1 / (k + rank), ranks from 1.
pub const RRF_K: f64 = 10.0;
/// Candidates each leg brings to the fusion.
pub const LEG_DEPTH: usize = 40;
/// Lexical hits a query keeps: the fusion's share and, beyond it, where the tools of a named
/// service are looked for when weighing its support.
pub const LEXICAL_CANDIDATES: usize = 200;
/// Weight of the lexical leg in the fusion.
pub const LEXICAL_WEIGHT: f64 = 1.0;
/// Weight of the semantic leg in the fusion.
pub const SEMANTIC_WEIGHT: f64 = 1.0;
/// Lexical support that answers a query when the semantic leg has not run.
pub const COVERAGE_FLOOR: f64 = 0.6;
/// Fewest tools whose similarities make a background: in a catalog of `n` tools no margin can
/// exceed `sqrt(n - 1)` standard deviations, so below this size the margin says nothing and the
/// decision rests on lexical support alone (as before the embeddings are ready).
pub const MIN_BACKGROUND_TOOLS: usize = 50;

/// What the services a query names say (see [`super::services`]).
struct NamedServices {
    /// Named services some tools serve.
    present: Vec<String>,
    /// Named services no tool serves.
    absent: Vec<String>,
    /// With present services named: the best support among their tools for the query's other
    /// words (`None` when no present service is named).
    support: Option<f64>,
    /// With present services named: the query asks them for actions and none of those is
    /// offered by any of their tools ([`super::actions`]).
    unoffered: bool,
}

fn named_services(
    catalog: &Catalog,
    lexical: &LexicalIndex,
    prepared: &PreparedQuery,
    lexical_hits: &[super::lexical::LexicalHit],
    query: &str,
) -> NamedServices {
    let mut words: Vec<String> = Vec::new();
    for_each_raw_word(query, |w| words.push(w.to_string()));
    let stems: Vec<String> = words.iter().flat_map(|w| stems_of(w)).collect();
    let served = catalog.served_by();
    let mut named = NamedServices {
        present: Vec::new(),
        absent: Vec::new(),
        support: None,
        unoffered: false,
    };
    let mut skip: Vec<usize> = Vec::new();
    // Each served service's tools, ascending: looked up, never merged (a service may be the
    // whole catalog).
    let mut lists: Vec<&[u32]> = Vec::new();
    for mention in services().mentions(&stems) {
        let tools = served.tools(mention.service);
        if tools.is_empty() {
            named.absent.push(mention.label);
        } else {
            named.present.push(mention.label);
            lists.push(tools);
        }
        // The typed words of the name, as the lexical leg split them ("GitHub": git, hub): a
        // served service's are held by all its tools, an absent one's beside a served one are
        // the topic; neither says which tool does the work.
        for word in &words[mention.positions] {
            for_each_split_word(word, |w| {
                let s = stem(w);
                let found = prepared.typed.iter().position(|t| *t == s);
                if let Some(c) = found.filter(|c| !skip.contains(c)) {
                    skip.push(c);
                }
            });
        }
    }
    if !lists.is_empty() {
        let serves = |doc: usize| {
            lists
                .iter()
                .any(|tools| tools.binary_search(&(doc as u32)).is_ok())
        };
        // The service's own name is held by all its tools: the rest of the query decides. The
        // service's best candidates are its first lexical hits (a tool holding none of the
        // query's words supports nothing); a service may be the whole catalog, so only its
        // first LEG_DEPTH among the query's lexical candidates are weighed.
        let rest = prepared.typed.len() > skip.len();
        named.support = Some(
            lexical_hits
                .iter()
                .filter(|h| serves(h.doc))
                .take(LEG_DEPTH)
                .map(|h| lexical.hit_coverage(h, prepared, if rest { &skip } else { &[] }))
                .fold(0.0, f64::max),
        );
        let rest: Vec<String> = (0..prepared.typed.len())
            .filter(|c| !skip.contains(c))
            .map(|c| prepared.typed[c].clone())
            .collect();
        let asked = asked_actions(&rest);
        if asked != 0 {
            let actions = catalog.tool_actions();
            let offered = lists
                .iter()
                .flat_map(|tools| tools.iter())
                .fold(0, |set, &doc| set | actions.of(doc as usize));
            named.unoffered = asked & offered == 0;
        }
    }
    named
}

/// One tool of a hybrid answer, with why it is there.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridMatch {
    /// Index into the catalog's defs.
    pub doc: usize,
    /// The fused score (`+inf` for an exact name).
    pub score: f64,
    /// Whether the query is the tool's name.
    pub exact: bool,
    /// Rank (from 1) and score in the lexical leg: BM25F, or with phrasings the blend of
    /// shares the leg is ordered by ([`super::phrasings`]).
    pub lexical: Option<(usize, f64)>,
    /// Rank (from 1) and cosine similarity in the semantic leg.
    pub semantic: Option<(usize, f32)>,
    /// Share of the query's weight the tool holds ([`LexicalIndex::coverage`]).
    pub coverage: f64,
    /// The query terms the tool holds: typed words and expansions.
    pub matched: Vec<QueryTerm>,
}

/// The evidence behind the "nothing fits" decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the query is answered.
    pub fits: bool,
    /// Whether the query is a tool's name (always answered).
    pub exact: bool,
    /// The lexical support: the best coverage among the candidates, or among the tools of the
    /// services the query names.
    pub coverage: f64,
    /// The best similarity, when the semantic leg ran.
    pub similarity: Option<f32>,
    /// The query's mean similarity to the catalog, when the semantic leg ran.
    pub background: Option<f32>,
    /// The best similarity's distance from the background, in standard deviations.
    pub margin: Option<f64>,
    /// The decision's inputs, when the semantic leg gave a margin.
    pub evidence: Option<Evidence>,
    /// The fitted log-odds that something fits ([`FITTED`] on `evidence`, or
    /// [`FITTED_PHRASED`] when phrasings took part).
    pub logit: Option<f64>,
    /// The log-odds from which those coefficients answer.
    pub threshold: f64,
    /// Services the query names that some tools serve; `coverage` is then the support of those
    /// tools for the query's other words.
    pub services: Vec<String>,
    /// Services the query names that no tool serves: unless the query also names a served
    /// service or an exact tool name, nothing fits.
    pub absent_services: Vec<String>,
}

impl Verdict {
    /// Whether the same evidence would answer the query with `threshold` in place of the fitted
    /// log-odds threshold: the decision itself at `self.threshold`, and what a sweep compares.
    pub fn answered_at(&self, threshold: f64) -> bool {
        // An absent service decides only alone: beside a served one it is the topic ("a GitHub
        // issue about the Telegram bot"), not where the work runs.
        let elsewhere = !self.absent_services.is_empty() && self.services.is_empty();
        self.exact
            || (!elsewhere
                && match self.logit {
                    Some(logit) => logit >= threshold,
                    None => self.coverage >= COVERAGE_FLOOR,
                })
    }

    /// The fitted probability that something fits, when the fitted decision applied.
    pub fn probability(&self) -> Option<f64> {
        self.logit.map(probability)
    }
}

/// A hybrid answer: the matches (empty when nothing fits) and how it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridAnswer {
    /// The query's typed words, expansions and joined words.
    pub prepared: PreparedQuery,
    /// The fused ranking, best first, at most the limit asked for, whatever the verdict (see
    /// [`HybridAnswer::matches`]).
    pub ranked: Vec<HybridMatch>,
    /// The decision and its evidence.
    pub verdict: Verdict,
    /// Whether the semantic leg took part (its embeddings were ready).
    pub semantic_used: bool,
    /// Tools whose phrasings took part (0 without a phrasings file, or before the embeddings
    /// are ready). With them, a match's lexical score is a blend of shares, not BM25F.
    pub phrased_tools: usize,
}

impl HybridAnswer {
    /// What the query gets: the ranking when something fits, nothing otherwise.
    pub fn matches(&self) -> &[HybridMatch] {
        if self.verdict.fits { &self.ranked } else { &[] }
    }
}

/// The query's similarity to every tool (blended with the tool's closest phrasing, when there
/// are phrasings), when the semantic leg can run.
fn semantic_scores(ready: &SemanticReady, query: &str) -> Option<Vec<f32>> {
    let vectors = ready.vectors.as_ref().ok()?;
    if query.trim().is_empty() || vectors.is_empty() {
        return None;
    }
    match ready.embedder.embed(&[query.to_string()]) {
        Ok(v) if v.len() == 1 => {
            let mut sims = vectors.similarities(&v[0]);
            if let Some(phrasings) = &ready.phrasings {
                phrasings.blend_similarities(&v[0], &mut sims);
            }
            Some(sims)
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "tool search: encoding the query failed; lexical leg only");
            None
        }
    }
}

impl Catalog {
    /// The tool embeddings when ready. The first call starts computing them in the background
    /// (from the on-disk cache where it can) and, like every call until they are done, returns
    /// `None` at once. `None` also when the `semantic` feature is off or the encoder failed.
    /// The cache is read and written in the settings' home, and the settings' phrasings are
    /// embedded with the tools (the first call's settings are the ones used).
    pub fn semantic(&self, config: &ToolSearchConfig) -> Option<Arc<SemanticReady>> {
        self.semantic
            .get_or_start(default_embedder, config.home.clone(), || {
                let phrasings = config
                    .phrasings
                    .as_ref()
                    .map(|p| p.for_catalog(self.defs()))
                    .unwrap_or_default();
                (self.embedding_texts(), phrasings)
            })
    }

    /// Like [`Catalog::semantic`], but waits up to `timeout` for the embeddings: for the command
    /// line and benchmarks, which answer once; a session never waits.
    pub fn semantic_wait(
        &self,
        config: &ToolSearchConfig,
        timeout: Duration,
    ) -> Option<Arc<SemanticReady>> {
        self.semantic(config)
            .or_else(|| self.semantic.wait(timeout))
    }

    /// Each tool's embedding text, in catalog order.
    pub fn embedding_texts(&self) -> Vec<String> {
        (0..self.len())
            .map(|doc| {
                let source = self.source(doc);
                let label = (!source.name.is_empty()).then_some(source.label.as_str());
                embedding_text(&self.defs()[doc], label)
            })
            .collect()
    }

    /// Ranks `query` the hybrid way. `semantic` is the catalog's embeddings when they are
    /// ready; without them the lexical leg answers alone.
    pub fn hybrid_search(
        &self,
        query: &str,
        limit: usize,
        semantic: Option<&SemanticReady>,
    ) -> HybridAnswer {
        let lexical = self.lexical();
        let prepared = lexical.prepare(query);
        let lexical_hits = lexical.score_top(&prepared, LEXICAL_CANDIDATES);
        // With phrasings the lexical leg's order weighs them too; the evidence does not.
        let phrasings = semantic.and_then(|s| s.phrasings.as_ref());
        let leg: Vec<(usize, f64)> = match phrasings {
            Some(phrasings) => phrasings.lexical_order(query, &lexical_hits, LEG_DEPTH),
            None => lexical_hits.iter().map(|h| (h.doc, h.score)).collect(),
        };
        let sims = semantic.and_then(|s| semantic_scores(s, query));
        rank(
            self,
            Legs {
                lexical,
                prepared,
                lexical_hits: &lexical_hits,
                lexical_leg: &leg,
                sims: sims.as_deref(),
                phrased_tools: phrasings.map_or(0, |p| p.phrased_tools()),
            },
            query,
            limit,
        )
    }
}

/// What the legs found for one query.
struct Legs<'a> {
    lexical: &'a LexicalIndex,
    prepared: PreparedQuery,
    /// BM25F over the tools' own text: the evidence.
    lexical_hits: &'a [super::lexical::LexicalHit],
    /// The lexical leg's order in the fusion, `(tool, score)`.
    lexical_leg: &'a [(usize, f64)],
    sims: Option<&'a [f32]>,
    phrased_tools: usize,
}

fn rank(catalog: &Catalog, legs: Legs<'_>, query: &str, limit: usize) -> HybridAnswer {
    let Legs {
        lexical,
        prepared,
        lexical_hits,
        lexical_leg,
        sims,
        phrased_tools,
    } = legs;
    let n = catalog.len();
    let mut fused: Vec<(usize, f64)> = Vec::new();
    let mut slot_of = FastMap::<usize, usize>::default();
    let mut lex_of = FastMap::<usize, (usize, f64)>::default();
    let mut sem_of = FastMap::<usize, (usize, f32)>::default();
    for (i, &(doc, score)) in lexical_leg.iter().take(LEG_DEPTH).enumerate() {
        let rank = i + 1;
        lex_of.insert(doc, (rank, score));
        let s = LEXICAL_WEIGHT / (RRF_K + rank as f64);
        let slot = *slot_of.entry(doc).or_insert_with(|| {
            fused.push((doc, 0.0));
            fused.len() - 1
        });
        fused[slot].1 += s;
    }
    let mut background = None;
    let mut margin = None;
    let mut best_sim = None;
    let mut gap = 0.0;
    if let Some(sims) = sims.filter(|s| s.len() == n && n > 0) {
        let mean = sims.iter().map(|&s| f64::from(s)).sum::<f64>() / n as f64;
        let var = sims
            .iter()
            .map(|&s| (f64::from(s) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        // Only the leg's head is ranked; the rest of the catalog counts in the background.
        let by_similarity = |a: &usize, b: &usize| sims[*b].total_cmp(&sims[*a]).then(a.cmp(b));
        let mut order: Vec<usize> = (0..n).collect();
        if n > LEG_DEPTH {
            order.select_nth_unstable_by(LEG_DEPTH, by_similarity);
            order.truncate(LEG_DEPTH);
        }
        order.sort_unstable_by(by_similarity);
        let top = sims[order[0]];
        best_sim = Some(top);
        background = Some(mean as f32);
        if n >= MIN_BACKGROUND_TOOLS {
            let sd = var.sqrt().max(1e-6);
            margin = Some((f64::from(top) - mean) / sd);
            gap = order
                .get(1)
                .map_or(0.0, |&second| f64::from(top - sims[second]) / sd);
        }
        for (i, &doc) in order.iter().take(LEG_DEPTH).enumerate() {
            let rank = i + 1;
            sem_of.insert(doc, (rank, sims[doc]));
            let s = SEMANTIC_WEIGHT / (RRF_K + rank as f64);
            let slot = *slot_of.entry(doc).or_insert_with(|| {
                fused.push((doc, 0.0));
                fused.len() - 1
            });
            fused[slot].1 += s;
        }
    }
    // Exact names first, whatever the legs say.
    let exact = catalog.exact_name(&query.trim().to_lowercase());
    for &doc in &exact {
        let doc = doc as usize;
        match slot_of.get(&doc) {
            Some(&slot) => fused[slot].1 = f64::INFINITY,
            None => {
                fused.push((doc, f64::INFINITY));
                slot_of.insert(doc, fused.len() - 1);
            }
        }
    }
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

    let named = named_services(catalog, lexical, &prepared, lexical_hits, query);
    // Support from the terms each lexical hit holds; a tool the lexical candidates left out is
    // looked up in the postings.
    let hit_of: FastMap<usize, &super::lexical::LexicalHit> =
        lexical_hits.iter().map(|h| (h.doc, h)).collect();
    let support_of = |doc: usize| match hit_of.get(&doc) {
        Some(hit) => lexical.hit_coverage(hit, &prepared, &[]),
        None => lexical.coverage(doc, &prepared),
    };
    let coverage = match named.support {
        Some(support) => support,
        None => fused
            .iter()
            .take(LEG_DEPTH)
            .map(|&(doc, _)| support_of(doc))
            .fold(0.0, f64::max),
    };
    let evidence = margin.map(|margin| {
        let typed = prepared.typed.len();
        let unknown = prepared.typed.iter().filter(|t| lexical.df(t) == 0).count();
        // A tool both legs rank first scores this much; exact names (infinite) are left out.
        let best_fused = (LEXICAL_WEIGHT + SEMANTIC_WEIGHT) / (RRF_K + 1.0);
        let first = fused
            .iter()
            .map(|&(_, s)| s)
            .find(|s| s.is_finite())
            .unwrap_or(0.0);
        Evidence {
            support: coverage,
            margin,
            similarity: best_sim.map_or(0.0, f64::from),
            gap,
            agreement: (first / best_fused).min(1.0),
            unknown: if typed == 0 {
                0.0
            } else {
                unknown as f64 / typed as f64
            },
            length: (1.0 + typed as f64).ln(),
            service: if named.present.is_empty() { 0.0 } else { 1.0 },
            unoffered: if named.unoffered { 1.0 } else { 0.0 },
        }
    });
    // The phrased coefficients were fitted on catalogs phrased whole; a file written for
    // another catalog, or a run of `troupe tools phrasings` cut short, moves few similarities.
    let fitted = if phrased_tools > 0 && phrased_tools * 2 >= n {
        &FITTED_PHRASED
    } else {
        &FITTED
    };
    let mut verdict = Verdict {
        fits: false,
        exact: !exact.is_empty(),
        coverage,
        similarity: best_sim,
        background,
        margin,
        logit: evidence.as_ref().map(|e| fitted.logit(e)),
        threshold: fitted.threshold,
        evidence,
        services: named.present,
        absent_services: named.absent,
    };
    verdict.fits = verdict.answered_at(verdict.threshold);
    let ranked = fused
        .into_iter()
        .take(limit)
        .map(|(doc, score)| HybridMatch {
            doc,
            score,
            exact: exact.contains(&(doc as u32)),
            lexical: lex_of.get(&doc).copied(),
            semantic: sem_of.get(&doc).copied(),
            coverage: support_of(doc),
            matched: lexical
                .matched(doc, &prepared)
                .into_iter()
                .cloned()
                .collect(),
        })
        .collect();
    HybridAnswer {
        prepared,
        ranked,
        verdict,
        semantic_used: sims.is_some(),
        phrased_tools,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolDef;

    /// `rank` with the lexical leg in BM25F order and no phrasings.
    fn rank_legs(
        c: &Catalog,
        lexical: &LexicalIndex,
        prepared: PreparedQuery,
        hits: &[super::super::lexical::LexicalHit],
        sims: Option<&[f32]>,
        query: &str,
        limit: usize,
    ) -> HybridAnswer {
        let leg: Vec<(usize, f64)> = hits.iter().map(|h| (h.doc, h.score)).collect();
        rank(
            c,
            Legs {
                lexical,
                prepared,
                lexical_hits: hits,
                lexical_leg: &leg,
                sims,
                phrased_tools: 0,
            },
            query,
            limit,
        )
    }

    fn catalog(tools: &[(&str, &str, &str)]) -> Catalog {
        Catalog::build(
            tools
                .iter()
                .map(|(name, server, desc)| {
                    Arc::new(
                        ToolDef::new(*name, *desc, json!({})).with_toolset(format!("mcp-{server}")),
                    )
                })
                .collect(),
        )
    }

    fn names_of(c: &Catalog, answer: &HybridAnswer) -> Vec<String> {
        names(c, answer)
    }

    fn names(c: &Catalog, answer: &HybridAnswer) -> Vec<String> {
        answer
            .matches()
            .iter()
            .map(|m| c.defs()[m.doc].name.clone())
            .collect()
    }

    fn fixture() -> Catalog {
        catalog(&[
            (
                "create_issue",
                "github",
                "Create a new issue in a repository.",
            ),
            ("list_issues", "github", "List the issues of a repository."),
            ("delete_block", "notion", "Delete a block of a page."),
            ("post_message", "slack", "Post a message to a channel."),
            (
                "take_screenshot",
                "playwright",
                "Take a screenshot of the page.",
            ),
        ])
    }

    #[test]
    fn lexical_alone_answers_until_embeddings_are_ready() {
        let c = fixture();
        let a = c.hybrid_search("remove a notion block", 5, None);
        assert!(!a.semantic_used);
        assert_eq!(names(&c, &a)[0], "delete_block");
        let why = &a.matches()[0];
        assert!(why.lexical.is_some() && why.semantic.is_none());
        assert!(
            why.matched
                .iter()
                .any(|t| t.expands.as_deref() == Some("remov")),
            "{:?}",
            why.matched
        );
    }

    #[test]
    fn exact_names_come_first() {
        let c = fixture();
        let a = c.hybrid_search("  List_Issues ", 5, None);
        assert!(a.matches()[0].exact);
        assert_eq!(a.matches()[0].score, f64::INFINITY);
        assert_eq!(names(&c, &a)[0], "list_issues");
    }

    #[test]
    fn nothing_fits_a_query_about_an_absent_service() {
        let c = fixture();
        let a = c.hybrid_search("gmail send email", 5, None);
        assert!(!a.verdict.fits, "{:?}", a.verdict);
        assert!(a.matches().is_empty());
        assert!(!a.ranked.is_empty(), "the ranking is kept for explanations");
        // The same action on a present service is answered.
        let b = c.hybrid_search("slack send message", 5, None);
        assert!(b.verdict.fits);
        assert_eq!(names(&c, &b)[0], "post_message");
    }

    #[test]
    fn fusion_rewards_agreement_between_legs() {
        let c = fixture();
        let lexical = c.lexical();
        let prepared = lexical.prepare("github issue");
        let hits = lexical.score(&prepared);
        // Similarities that put list_issues first: fused with the lexical leg's tie between the
        // two issue tools, list_issues leads.
        let sims = [0.5f32, 0.9, 0.1, 0.1, 0.1];
        let a = rank_legs(&c, lexical, prepared, &hits, Some(&sims), "github issue", 5);
        assert!(a.semantic_used);
        let ranked: Vec<&str> = a
            .ranked
            .iter()
            .map(|m| c.defs()[m.doc].name.as_str())
            .collect();
        assert_eq!(ranked[..2], ["list_issues", "create_issue"]);
        assert_eq!(a.ranked[0].semantic, Some((1, 0.9)));
        assert!(a.ranked[0].lexical.is_some());
    }

    /// Sixty filler tools and a Slack one, with similarities that single out the Slack tool.
    fn slack_among_fillers() -> (Catalog, Vec<f32>) {
        let names: Vec<String> = (0..60).map(|i| format!("tool_{i}")).collect();
        let mut tools: Vec<(&str, &str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), "misc", "Does a thing."))
            .collect();
        tools.push(("post_message", "slack", "Post a message to a channel."));
        tools.push((
            "add_reaction",
            "slack",
            "Add an emoji reaction to a message.",
        ));
        let mut sims: Vec<f32> = (0..62).map(|i| 0.1 + (i % 5) as f32 * 0.01).collect();
        sims[60] = 0.8;
        (catalog(&tools), sims)
    }

    #[test]
    fn a_named_service_that_no_tool_serves_means_nothing_fits() {
        let (c, sims) = slack_among_fillers();
        let answer = |q: &str| {
            let lexical = c.lexical();
            let prepared = lexical.prepare(q);
            let hits = lexical.score(&prepared);
            rank_legs(&c, lexical, prepared, &hits, Some(&sims), q, 5)
        };
        // The same evidence answers for Slack and not for Discord, which no tool serves.
        let slack = answer("post a message on slack");
        assert!(slack.verdict.fits, "{:?}", slack.verdict);
        assert_eq!(slack.verdict.services, ["slack"]);
        let discord = answer("post a message on discord");
        assert!(!discord.verdict.fits, "{:?}", discord.verdict);
        assert_eq!(discord.verdict.absent_services, ["discord"]);
        assert!(discord.matches().is_empty());
        // An exact name is answered whatever the query names.
        let exact = c.hybrid_search("post_message", 5, None);
        assert!(exact.verdict.fits);
    }

    #[test]
    fn an_action_no_tool_of_the_named_service_offers_is_evidence() {
        let (c, sims) = slack_among_fillers();
        let evidence = |q: &str| {
            let lexical = c.lexical();
            let prepared = lexical.prepare(q);
            let hits = lexical.score(&prepared);
            let a = rank_legs(&c, lexical, prepared, &hits, Some(&sims), q, 5);
            a.verdict.evidence.expect("a margin makes evidence")
        };
        // Slack's tools post and react; none pins or deletes.
        assert_eq!(
            evidence("pin the message in the slack channel").unoffered,
            0.0,
            "pin names no action of the vocabulary: nothing to weigh"
        );
        assert_eq!(
            evidence("delete the message in the slack channel").unoffered,
            1.0
        );
        assert_eq!(
            evidence("post a message in the slack channel").unoffered,
            0.0
        );
        assert_eq!(evidence("add a reaction on slack").unoffered, 0.0);
        // Without a named service there is no service to ask.
        assert_eq!(evidence("delete the message in the channel").unoffered, 0.0);
        let q = "delete the message in the slack channel";
        let lexical = c.lexical();
        let prepared = lexical.prepare(q);
        let hits = lexical.score(&prepared);
        let a = rank_legs(&c, lexical, prepared, &hits, Some(&sims), q, 5);
        let text = super::super::explain::render_hybrid(&c, q, &a);
        assert!(text.contains("actions not offered 1"), "{text}");
        let with = evidence(q);
        let without = Evidence {
            unoffered: 0.0,
            ..with
        };
        assert!(FITTED.logit(&with) < FITTED.logit(&without));
    }

    #[test]
    fn a_named_service_is_weighed_by_what_its_tools_do() {
        let c = fixture();
        let lexical = c.lexical();
        // Slack's post-message tool holds "slack" and "message", but no Slack tool deletes.
        let prepared = lexical.prepare("slack delete message");
        let post = c
            .defs()
            .iter()
            .position(|d| d.name == "post_message")
            .unwrap_or_default();
        let a = c.hybrid_search("slack delete message", 5, None);
        assert_eq!(a.verdict.services, ["slack"]);
        assert!(
            a.verdict.coverage < lexical.coverage(post, &prepared),
            "{:?}",
            a.verdict
        );
        assert!(!a.verdict.fits, "{:?}", a.verdict);
        // What Slack does is answered in full.
        let b = c.hybrid_search("slack post message", 5, None);
        assert_eq!(b.verdict.coverage, 1.0);
        assert!(b.verdict.fits);
    }

    #[test]
    fn a_clear_semantic_margin_answers_without_lexical_support() {
        // Sixty tools, one of which the (given) similarities single out.
        let names: Vec<String> = (0..60).map(|i| format!("tool_{i}")).collect();
        let tools: Vec<(&str, &str, &str)> = names
            .iter()
            .map(|n| (n.as_str(), "misc", "Does a thing."))
            .collect();
        let c = catalog(&tools);
        let lexical = c.lexical();
        let prepared = lexical.prepare("capture what the browser shows");
        let hits = lexical.score(&prepared);
        assert!(hits.is_empty(), "no lexical support at all");
        let mut sims: Vec<f32> = (0..60).map(|i| 0.1 + (i % 5) as f32 * 0.01).collect();
        sims[17] = 0.7;
        let a = rank_legs(&c, lexical, prepared.clone(), &hits, Some(&sims), "q", 5);
        assert!(a.verdict.fits, "{:?}", a.verdict);
        assert_eq!(names_of(&c, &a)[0], "tool_17");
        // The decision's inputs: the singled-out tool stands far above the second, only the
        // semantic leg found it (half the score of a tool both legs rank first), and none of
        // the query's words is held by a tool.
        let e = a.verdict.evidence.expect("a margin makes evidence");
        assert_eq!(e.support, 0.0);
        assert!(e.gap > 5.0 && e.margin > e.gap, "{e:?}");
        assert!((e.agreement - 0.5).abs() < 1e-9, "{e:?}");
        assert_eq!(e.unknown, 1.0);
        assert_eq!(
            e.length,
            4f64.ln(),
            "capture, browser, show: three typed words"
        );
        assert_eq!(a.verdict.logit, Some(FITTED.logit(&e)));
        let text = super::super::explain::render_hybrid(&c, "q", &a);
        assert!(text.contains("decision inputs: support 0.00"), "{text}");
        assert!(text.contains("actions not offered 0"), "{text}");
        assert!(text.contains("decision: answered (fitted score"), "{text}");
        // A flat similarity profile is no evidence, however high.
        let flat: Vec<f32> = (0..60).map(|i| 0.6 + (i % 5) as f32 * 0.01).collect();
        let b = rank_legs(&c, lexical, prepared.clone(), &hits, Some(&flat), "q", 5);
        assert!(!b.verdict.fits, "{:?}", b.verdict);
        // Too few tools for a background: the same profile on a small catalog gives no margin.
        let small = catalog(&tools[..10]);
        let small_hits = small.lexical().score(&prepared);
        let c = rank_legs(
            &small,
            small.lexical(),
            prepared,
            &small_hits,
            Some(&sims[..10]),
            "q",
            5,
        );
        assert!(
            c.semantic_used && c.verdict.margin.is_none(),
            "{:?}",
            c.verdict
        );
        assert!(!c.verdict.fits);
    }

    /// Hashes each word to one of 64 coordinates: sentences that share words are near.
    struct WordHashEncoder;

    impl super::super::semantic::Embedder for WordHashEncoder {
        fn model_id(&self) -> &str {
            "word-hash-test"
        }
        fn dimensions(&self) -> usize {
            64
        }
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            Ok(texts
                .iter()
                .map(|t| {
                    let mut v = vec![0f32; 64];
                    for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                        if !w.is_empty() {
                            let h = w.bytes().fold(7usize, |h, b| h * 31 + b as usize);
                            v[h % 64] += 1.0;
                        }
                    }
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                    v.iter().map(|x| x / n).collect()
                })
                .collect())
        }
    }

    #[test]
    fn phrasings_find_a_tool_in_words_its_description_never_uses() {
        let fillers: Vec<String> = (0..60).map(|i| format!("tool_{i}")).collect();
        let mut tools: Vec<(&str, &str, &str)> = fillers
            .iter()
            .map(|n| (n.as_str(), "misc", "Does a thing."))
            .collect();
        tools.push(("close_task", "todo", "Close a task by its id."));
        tools.push(("add_label", "todo", "Attach a label to a task."));
        let c = catalog(&tools);
        let home = tempfile::tempdir().unwrap();
        let home = crate::home::TroupeHome::at(home.path());
        let texts = c.embedding_texts();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let plain = SemanticReady::compute(Arc::new(WordHashEncoder), &home, &texts, &[], &done);
        // The whole catalog is phrased, as `troupe tools phrasings` leaves it.
        let mut phrased: Vec<(String, Vec<String>)> = fillers
            .iter()
            .map(|n| (n.clone(), vec!["do the usual thing for me".to_string()]))
            .collect();
        phrased.push((
            "close_task".to_string(),
            vec![
                "tick off the errand".to_string(),
                "mark the chore done".into(),
            ],
        ));
        let phrasings =
            super::super::phrasings::Phrasings::new(None, phrased).for_catalog(c.defs());
        let phrased =
            SemanticReady::compute(Arc::new(WordHashEncoder), &home, &texts, &phrasings, &done);
        let query = "tick off the errand";
        let without = c.hybrid_search(query, 5, Some(&plain));
        assert_eq!(without.phrased_tools, 0);
        assert_ne!(
            names(&c, &without).first().map(String::as_str),
            Some("close_task"),
            "{:?}",
            without.verdict
        );
        let with = c.hybrid_search(query, 5, Some(&phrased));
        assert_eq!(with.phrased_tools, 61);
        assert!(with.verdict.fits, "{:?}", with.verdict);
        assert_eq!(names(&c, &with)[0], "close_task");
        assert_eq!(with.verdict.threshold, FITTED_PHRASED.threshold);
        // Both legs found it through its phrasings; the evidence still reads the tools' own
        // text, where no word of the query is.
        assert!(with.ranked[0].lexical.is_some() && with.ranked[0].semantic.is_some());
        assert_eq!(with.verdict.coverage, 0.0);
        let text = super::super::explain::render_hybrid(&c, query, &with);
        assert!(text.contains("phrasings: 61 tools"), "{text}");
    }
}
