//! The "nothing fits" decision of the hybrid ranking, as a logistic regression on the evidence a
//! query leaves behind ([`Evidence`]): fitted, not tuned by hand.
//!
//! # How the coefficients were made
//! [`FITTED`] was fitted by `tools/search-eval/fit_decision.py` on the tuning part of the
//! project's validation set (`tools/search-eval/validation/queries_tune.json`, 378 tools) and the
//! dev set (`tools/search-eval/dev/queries_dev.json`, 420 tools): each query's evidence is a row,
//! labelled 1 when some tool answers it and 0 for the absent ones; L2-regularised logistic
//! regression, and the threshold on the fitted probability chosen on the same rows. The held-out
//! part (`queries_heldout.json`) took no part in it. To refit after a change to the ranking or to
//! the evidence (a feature's definition changes what its coefficient means):
//!
//! ```sh
//! cargo run -p troupe-tools --example retrieval_eval -- tools/search-eval/validation \
//!     --queries queries_tune.json --features /tmp/tune.jsonl --no-phrasings
//! cargo run -p troupe-tools --example retrieval_eval -- tools/search-eval/dev \
//!     --features /tmp/dev.jsonl --no-phrasings
//! python3 tools/search-eval/fit_decision.py /tmp/tune.jsonl /tmp/dev.jsonl
//! ```
//!
//! and paste the `Coefficients` it prints over [`FITTED`]; the same commands without
//! `--no-phrasings` (each set's `phrasings.json` is then used) give [`FITTED_PHRASED`]. `troupe tools search --explain` shows
//! each query's evidence and fitted probability.
//!
//! The decision applies when the semantic leg ran on a catalog large enough for a background (see
//! [`super::hybrid::MIN_BACKGROUND_TOOLS`]); otherwise lexical support alone decides, against
//! [`super::hybrid::COVERAGE_FLOOR`].

/// What one query's ranking says about whether anything fits: the inputs of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    /// Lexical support, 0 to 1: the largest share of the query's weight one candidate holds (or
    /// one tool of the services the query names, for its other words).
    pub support: f64,
    /// How many standard deviations the best similarity stands above the query's mean
    /// similarity to the catalog.
    pub margin: f64,
    /// The best cosine similarity itself.
    pub similarity: f64,
    /// The gap between the best and the second-best similarity, in the same standard
    /// deviations: one tool singled out, rather than a crowd of near ones.
    pub gap: f64,
    /// How much the legs agree on the first tool: its fused score over the score of a tool both
    /// legs rank first (0 to 1).
    pub agreement: f64,
    /// Share of the query's typed words that no tool holds (a service or object the catalog
    /// lacks leaves such words).
    pub unknown: f64,
    /// `ln(1 + typed words)`: long sentences hold less of their weight in any one tool.
    pub length: f64,
    /// 1 when the query names a service some tools serve (support is then that of its tools).
    pub service: f64,
    /// 1 when the query asks a named, served service for actions none of its tools offers
    /// ([`super::actions`]): the mark of a near miss.
    pub unoffered: f64,
}

/// The logistic regression's coefficients: `logit = bias + Σ coefficient × feature`, answered
/// when `logit ≥ threshold` (the log-odds of the chosen probability).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coefficients {
    /// Intercept.
    pub bias: f64,
    /// Per [`Evidence::support`].
    pub support: f64,
    /// Per [`Evidence::margin`].
    pub margin: f64,
    /// Per [`Evidence::similarity`].
    pub similarity: f64,
    /// Per [`Evidence::gap`].
    pub gap: f64,
    /// Per [`Evidence::agreement`].
    pub agreement: f64,
    /// Per [`Evidence::unknown`].
    pub unknown: f64,
    /// Per [`Evidence::length`].
    pub length: f64,
    /// Per [`Evidence::service`].
    pub service: f64,
    /// Per [`Evidence::unoffered`].
    pub unoffered: f64,
    /// The log-odds from which a query is answered.
    pub threshold: f64,
}

/// The fitted decision (see the module docs for how it was fitted and how to refit it).
pub const FITTED: Coefficients = Coefficients {
    bias: -6.8662,
    support: 3.3410,
    margin: 0.4828,
    similarity: 2.2815,
    gap: 0.0728,
    agreement: 1.7771,
    unknown: -0.7609,
    length: 0.3375,
    service: -0.3407,
    unoffered: -2.8394,
    threshold: -2.6456,
};

/// The decision when phrasings took part ([`super::phrasings`]): they move similarities and
/// the fused order, so the evidence has another spread. Fitted the same way as [`FITTED`], on
/// the same queries ranked with the sets' `phrasings.json`.
pub const FITTED_PHRASED: Coefficients = Coefficients {
    bias: -8.0112,
    support: 3.4411,
    margin: 0.4961,
    similarity: 1.8501,
    gap: 0.7091,
    agreement: 2.8169,
    unknown: -1.2387,
    length: 0.3424,
    service: -0.3561,
    unoffered: -2.5233,
    threshold: -3.0912,
};

impl Coefficients {
    /// The log-odds that something fits, from `e`.
    pub fn logit(&self, e: &Evidence) -> f64 {
        self.bias
            + self.support * e.support
            + self.margin * e.margin
            + self.similarity * e.similarity
            + self.gap * e.gap
            + self.agreement * e.agreement
            + self.unknown * e.unknown
            + self.length * e.length
            + self.service * e.service
            + self.unoffered * e.unoffered
    }

    /// Whether `e` answers the query.
    pub fn fits(&self, e: &Evidence) -> bool {
        self.logit(e) >= self.threshold
    }
}

/// The logistic function: a log-odds as a probability.
pub fn probability(logit: f64) -> f64 {
    1.0 / (1.0 + (-logit).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(support: f64, margin: f64) -> Evidence {
        Evidence {
            support,
            margin,
            similarity: 0.5,
            gap: 0.5,
            agreement: 0.5,
            unknown: 0.0,
            length: 4f64.ln(),
            service: 0.0,
            unoffered: 0.0,
        }
    }

    #[test]
    fn more_evidence_from_either_leg_never_lowers_the_score() {
        let base = evidence(0.4, 3.0);
        let l = FITTED.logit(&base);
        assert!(FITTED.logit(&evidence(0.8, 3.0)) > l);
        assert!(FITTED.logit(&evidence(0.4, 5.0)) > l);
    }

    #[test]
    fn strong_evidence_answers_and_none_does_not() {
        assert!(FITTED.fits(&evidence(1.0, 6.0)));
        assert!(!FITTED.fits(&evidence(0.0, 1.0)));
    }

    #[test]
    fn probability_is_the_logistic_function() {
        assert_eq!(probability(0.0), 0.5);
        assert!((probability(2.0) + probability(-2.0) - 1.0).abs() < 1e-12);
    }
}
