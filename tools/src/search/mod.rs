//! Tool search over a view's deferred tools: the tokenizer, the [`Catalog`] index built once per
//! catalog version, BM25 ranking with the rarest-token gate and the relevance floor, the catalog
//! listing, and the assembly of the tool list the model sees (visible tools plus the three
//! bridge tools). The bridge functions in [`crate::bridge`] are the callers.
//!
//! # Layout
//! - [`tokenize`]: ASCII words, lowercased, Snowball English stems (rust-stemmers).
//! - [`catalog`]: [`Catalog`], per-tool sources, index text, postings and statistics.
//! - [`bm25`]: the reference ranking of a query ([`Catalog::search`], [`Catalog::explain`]).
//! - [`hybrid`]: the default ranking ([`Catalog::hybrid_search`]): [`lexical`] (BM25F over
//!   [`split`] words with the [`vocabulary`]'s expansions) fused with [`semantic`] (sentence
//!   embeddings, computed in the background and cached on disk), and the "nothing fits" decision,
//!   which also weighs the [`services`] a query names and whether their tools offer the
//!   [`actions`] it asks; its fitted coefficients are in [`decision`].
//! - [`merged`]: the reference ranking over a catalog plus a query's connector tools.
//! - [`explain`]: the rankings explained for people (`troupe tools search --explain`).
//! - [`listing`]: the listing forms and [`listing::short_desc`].
//! - [`assemble`](mod@assemble): tiers and the model-visible tool list.
//! - [`bridge_schemas`]: the three bridge tools' schemas and descriptions.

pub mod actions;
pub mod assemble;
pub mod bm25;
pub mod bridge_schemas;
pub mod catalog;
pub mod decision;
pub mod explain;
pub mod hybrid;
pub mod lexical;
pub mod listing;
pub mod merged;
pub mod phrasings;
pub mod semantic;
pub mod services;
pub mod split;
pub mod tokenize;
pub mod vocabulary;

pub use assemble::{Assembly, assemble, assemble_defs};
pub use catalog::{Catalog, SourceKind, ToolSource};
pub use decision::{Coefficients, Evidence};
pub use hybrid::{HybridAnswer, HybridMatch, Verdict};
pub use listing::{Listing, ListingForm};
