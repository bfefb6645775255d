//! Tool search over a view's deferred tools. (Being written: tokenizer, BM25 index, listing.)

use std::sync::Arc;

use crate::tool::ToolDef;

/// The searchable catalog of a view's deferred tools, built once per catalog version.
#[derive(Debug)]
pub struct Catalog {
    defs: Vec<Arc<ToolDef>>,
}

impl Catalog {
    /// Indexes `defs` (deferred tools, in catalog order).
    pub fn build(defs: Vec<Arc<ToolDef>>) -> Catalog {
        Catalog { defs }
    }

    /// The deferred tools, in catalog order.
    pub fn defs(&self) -> &[Arc<ToolDef>] {
        &self.defs
    }
}
