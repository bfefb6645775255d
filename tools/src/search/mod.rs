//! Tool search over a view's deferred tools: the tokenizer, the [`Catalog`] index built once per
//! catalog version, BM25 ranking with the rarest-token gate and the relevance floor, the catalog
//! listing, and the assembly of the tool list the model sees (visible tools plus the three
//! bridge tools). The bridge functions in [`crate::bridge`] are the callers.
//!
//! # Layout
//! - [`tokenize`]: ASCII words, lowercased, Snowball English (3.x) stems.
//! - [`catalog`]: [`Catalog`], per-tool sources, index text, postings and statistics.
//! - [`bm25`]: ranking a query ([`Catalog::search`], [`Catalog::explain`]).
//! - [`listing`]: the listing forms and [`listing::short_desc`].
//! - [`assemble`]: tiers and the model-visible tool list.
//! - [`bridge_schemas`]: the three bridge tools' schemas and descriptions.

pub mod assemble;
pub mod bm25;
pub mod bridge_schemas;
pub mod catalog;
pub mod listing;
pub mod tokenize;

pub use assemble::{Assembly, assemble, assemble_defs};
pub use catalog::{Catalog, SourceKind, ToolSource};
pub use listing::{Listing, ListingForm};
