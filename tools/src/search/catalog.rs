//! [`Catalog`]: the deferred tools of a view, indexed for search once per catalog version. It
//! holds each tool's source facts, its index text's tokens as term ids with their frequencies,
//! an inverted index, the corpus statistics BM25 needs, and an exact-name map. Built by
//! [`ToolsetView::catalog`](crate::ToolsetView::catalog); read by `bm25`, `listing`, `assemble`
//! and the `tool_search` bridge.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value, json};

use super::lexical::LexicalIndex;
use super::listing::{Listing, ListingGroups};
use super::services::{ServedBy, services};
use super::tokenize::{for_each_raw_word, stem};
use crate::tool::ToolDef;

/// Longest description a `tool_search` record carries, in characters, before it is cut.
pub const RECORD_DESCRIPTION_MAX_CHARS: usize = 500;
/// Longest `required` name a record carries, in characters.
pub const RECORD_REQUIRED_NAME_MAX_CHARS: usize = 64;
/// Most `required` names a record carries.
pub const RECORD_REQUIRED_MAX_NAMES: usize = 32;
/// Characters per estimated token.
pub const CHARS_PER_TOKEN: usize = 4;
/// Listings kept per catalog, one per budget asked for.
const LISTING_CACHE_CAPACITY: usize = 16;

/// A hash map with a cheap multiply-rotate hash. The keys are words and names of the tools in
/// scope, hashed ~100K times per build; SipHash's flood resistance buys nothing there.
pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// The multiply-rotate hash of rustc's FxHasher: eight bytes per step.
#[derive(Default, Clone, Copy)]
pub(super) struct WordHasher {
    hash: u64,
}

impl WordHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Where a deferred tool comes from, as `tool_search` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// An MCP server's tool (toolset `mcp-<server>`).
    Mcp,
    /// A plugin's tool: any other toolset, or an unregistered tool that names its owner.
    Plugin,
    /// An unregistered tool with no known owner.
    Other,
    /// A hosted connector tool a gateway found.
    Connectors,
}

impl SourceKind {
    /// The word used in `tool_search` output.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Mcp => "mcp",
            SourceKind::Plugin => "plugin",
            SourceKind::Other => "other",
            SourceKind::Connectors => "connectors",
        }
    }
}

/// What the catalog knows about one deferred tool besides its tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSource {
    /// `mcp`, `plugin` or `other`.
    pub kind: SourceKind,
    /// The toolset (`mcp-github`, `kanban`), the owning plugin, or `""`.
    pub name: String,
    /// The group label of the listing and of `available_sources`: the source name, or `other`
    /// when empty, with one leading `mcp-` removed.
    pub label: String,
}

/// Classifies a tool's source: its toolset when registered (`mcp-*` is MCP, anything else a
/// plugin), else the plugin that owns it, else `other`.
pub fn classify_source(def: &ToolDef) -> ToolSource {
    if def.kind == crate::tool::ToolKind::Connector {
        let name = def.source_name.clone().unwrap_or_default();
        let label = if name.is_empty() {
            "other".to_string()
        } else {
            name.clone()
        };
        return ToolSource {
            kind: SourceKind::Connectors,
            name,
            label,
        };
    }
    let (kind, name) = match (&def.toolset, &def.source_name) {
        (Some(toolset), _) if toolset.starts_with("mcp-") => (SourceKind::Mcp, toolset.clone()),
        (Some(toolset), _) => (SourceKind::Plugin, toolset.clone()),
        (None, Some(owner)) if !owner.is_empty() => (SourceKind::Plugin, owner.clone()),
        (None, _) => (SourceKind::Other, String::new()),
    };
    let shown = if name.is_empty() {
        "other"
    } else {
        name.as_str()
    };
    let label = shown.strip_prefix("mcp-").unwrap_or(shown).to_string();
    ToolSource { kind, name, label }
}

/// The searchable catalog of a view's deferred tools, built once per catalog version.
///
/// Everything a query needs is precomputed: term ids and frequencies per tool, the inverted
/// index (term -> tools holding it, ascending), document frequencies, lengths and their mean, and
/// the tools by lowercased name. Searching it gives the same answer as recomputing everything
/// from the definitions, every time.
pub struct Catalog {
    defs: Vec<Arc<ToolDef>>,
    /// The distinct sources; `source_of[doc]` indexes it (most tools share a handful).
    sources: Vec<ToolSource>,
    source_of: Vec<u32>,
    /// Stemmed token -> term id.
    vocab: FastMap<String, u32>,
    /// Per tool, `(term id, term frequency)` sorted by term id, in `doc_terms[starts[i]..starts[i+1]]`.
    doc_terms: Vec<(u32, u32)>,
    starts: Vec<usize>,
    /// Token count of each tool's index text, duplicates included.
    doc_len: Vec<u32>,
    /// Term id -> the tools whose index text holds it, ascending.
    postings: Vec<Vec<u32>>,
    avg_dl: f64,
    /// Lowercased name -> the first tool with that name (exact-name matches); further tools
    /// with the same lowercased name follow through `same_name_next` (`u32::MAX` ends it).
    by_lower_name: FastMap<String, u32>,
    same_name_next: Vec<u32>,
    /// `(label, tool count)` sorted by label.
    source_counts: Vec<(String, usize)>,
    /// Built on first use: only assembly needs them.
    listing_groups: OnceLock<ListingGroups>,
    deferred_tokens: OnceLock<i64>,
    listings: Mutex<HashMap<i64, Listing>>,
    /// The hybrid ranking's lexical index, built on its first query.
    lexical: OnceLock<LexicalIndex>,
    /// Which tools serve each service a query may name, built on the first hybrid query.
    served: OnceLock<ServedBy>,
    /// The actions each tool offers, read on the first query that names a served service.
    actions: OnceLock<super::actions::ToolActions>,
    /// The hybrid ranking's tool embeddings, filled in the background.
    pub(super) semantic: super::semantic::SemanticSlot,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.defs.len())
            .field("terms", &self.vocab.len())
            .field("avg_dl", &self.avg_dl)
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// Indexes `defs` (deferred tools, in catalog order: that order breaks score ties).
    pub fn build(defs: Vec<Arc<ToolDef>>) -> Catalog {
        let mut vocab: FastMap<String, u32> = FastMap::default();
        // Lowercased word -> term id, so a word seen before is not stemmed again: words of up to
        // eight bytes packed in a u64, longer ones as strings.
        let mut short_terms: FastMap<u64, u32> = FastMap::default();
        let mut long_terms: FastMap<String, u32> = FastMap::default();
        let mut lowered = String::new();
        let mut postings: Vec<Vec<u32>> = Vec::new();
        // Per term: the last tool that held it and where its entry for that tool sits.
        let mut last_doc: Vec<u32> = Vec::new();
        let mut slot: Vec<usize> = Vec::new();
        let mut doc_terms: Vec<(u32, u32)> = Vec::new();
        let mut starts = Vec::with_capacity(defs.len() + 1);
        let mut doc_len = Vec::with_capacity(defs.len());
        let mut sources: Vec<ToolSource> = Vec::new();
        let mut source_ids: FastMap<(Option<&str>, Option<&str>), u32> = FastMap::default();
        let mut source_of = Vec::with_capacity(defs.len());
        let mut by_lower_name: FastMap<String, u32> = FastMap::default();
        by_lower_name.reserve(defs.len());
        let mut same_name_next = vec![u32::MAX; defs.len()];
        let mut same_name_last: FastMap<u32, u32> = FastMap::default();

        for (doc, def) in defs.iter().enumerate() {
            let doc = doc as u32;
            let key = (def.toolset.as_deref(), def.source_name.as_deref());
            let source_id = *source_ids.entry(key).or_insert_with(|| {
                sources.push(classify_source(def));
                (sources.len() - 1) as u32
            });
            source_of.push(source_id);
            let start = doc_terms.len();
            starts.push(start);
            let mut len = 0u32;
            for_each_index_part(def, &sources[source_id as usize], |part| {
                for_each_raw_word(part, |raw| {
                    // Short words (most of them) are looked up by their bytes packed in a u64:
                    // no string to build, hash or compare.
                    let packed = pack_short_word(raw);
                    let known = match packed {
                        Some(key) => short_terms.get(&key).copied(),
                        None => {
                            lowered.clear();
                            lowered.push_str(raw);
                            lowered.make_ascii_lowercase();
                            long_terms.get(lowered.as_str()).copied()
                        }
                    };
                    let id = match known {
                        Some(id) => id,
                        None => {
                            let word = raw.to_ascii_lowercase();
                            let next = vocab.len() as u32;
                            let id = *vocab.entry(stem(&word)).or_insert(next);
                            if id == next {
                                postings.push(Vec::new());
                                last_doc.push(u32::MAX);
                                slot.push(0);
                            }
                            match packed {
                                Some(key) => short_terms.insert(key, id),
                                None => long_terms.insert(word, id),
                            };
                            id
                        }
                    };
                    len += 1;
                    let t = id as usize;
                    if last_doc[t] == doc {
                        doc_terms[slot[t]].1 += 1;
                    } else {
                        last_doc[t] = doc;
                        slot[t] = doc_terms.len();
                        doc_terms.push((id, 1));
                        postings[t].push(doc);
                    }
                })
            });
            // Sorted by term id so that frequencies can be looked up by binary search.
            doc_terms[start..].sort_unstable_by_key(|&(t, _)| t);
            doc_len.push(len);
            match by_lower_name.entry(lowercase_name(&def.name)) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(doc);
                }
                std::collections::hash_map::Entry::Occupied(first) => {
                    // Rare: names differing only in case. Chain them in catalog order.
                    let last = same_name_last.entry(*first.get()).or_insert(*first.get());
                    same_name_next[*last as usize] = doc;
                    *last = doc;
                }
            }
        }
        starts.push(doc_terms.len());
        let total: u64 = doc_len.iter().map(|&n| u64::from(n)).sum();
        let avg_dl = total as f64 / defs.len().max(1) as f64;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for &id in &source_of {
            *counts
                .entry(sources[id as usize].label.as_str())
                .or_default() += 1;
        }
        let source_counts = counts
            .into_iter()
            .map(|(l, n)| (l.to_string(), n))
            .collect();
        Catalog {
            defs,
            sources,
            source_of,
            vocab,
            doc_terms,
            starts,
            doc_len,
            postings,
            avg_dl,
            by_lower_name,
            same_name_next,
            source_counts,
            listing_groups: OnceLock::new(),
            deferred_tokens: OnceLock::new(),
            listings: Mutex::new(HashMap::new()),
            lexical: OnceLock::new(),
            served: OnceLock::new(),
            actions: OnceLock::new(),
            semantic: Default::default(),
        }
    }

    /// The hybrid ranking's lexical index, built on first use (a few milliseconds for thousands
    /// of tools) and kept for the catalog's life.
    pub fn lexical(&self) -> &LexicalIndex {
        self.lexical
            .get_or_init(|| LexicalIndex::build(&self.defs, &self.labels()))
    }

    /// Which tools serve each service of [`super::services::SERVICES`], found on first use.
    pub fn served_by(&self) -> &ServedBy {
        self.served
            .get_or_init(|| ServedBy::build(services(), &self.defs, &self.labels()))
    }

    /// The actions each tool offers ([`super::actions`]), read on first use.
    pub fn tool_actions(&self) -> &super::actions::ToolActions {
        self.actions
            .get_or_init(|| super::actions::ToolActions::build(&self.defs))
    }

    /// Each tool's source label, `None` for a tool without a source.
    fn labels(&self) -> Vec<Option<&str>> {
        (0..self.len())
            .map(|doc| {
                let source = self.source(doc);
                (!source.name.is_empty()).then_some(source.label.as_str())
            })
            .collect()
    }

    /// The deferred tools, in catalog order.
    pub fn defs(&self) -> &[Arc<ToolDef>] {
        &self.defs
    }

    /// How many tools the catalog holds.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// Whether the catalog holds no tool.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// The source facts of tool `doc`.
    pub fn source(&self, doc: usize) -> &ToolSource {
        &self.sources[self.source_of[doc] as usize]
    }

    /// `(label, tool count)` per group label, sorted by label: what `available_sources` lists.
    pub fn source_counts(&self) -> &[(String, usize)] {
        &self.source_counts
    }

    /// The text tool `doc` is indexed by: its name's words (one leading `mcp__` removed, `_ . :
    /// -` as spaces), its label unless empty or already one of those words, its description and
    /// its top-level parameter names, separated by single spaces.
    pub fn index_text(&self, doc: usize) -> String {
        let mut parts = Vec::new();
        for_each_index_part(&self.defs[doc], self.source(doc), |p| {
            parts.push(p.to_string())
        });
        let name_words: String = parts[0]
            .chars()
            .map(|c| {
                if matches!(c, '_' | '.' | ':' | '-') {
                    ' '
                } else {
                    c
                }
            })
            .collect();
        format!(
            "{name_words} {} {} {}",
            parts[1],
            parts[2],
            parts[3..].join(" ")
        )
    }

    /// The tokens of tool `doc`'s index text, in order, as stored.
    pub fn doc_tokens(&self, doc: usize) -> Vec<String> {
        super::tokenize::tokenize(&self.index_text(doc))
    }

    /// The record `tool_search` returns for tool `doc`: source, source name, description (cut at
    /// 500 characters) and the required argument names. Derived on demand from the definition:
    /// a call needs a handful, and storing all of them would slow every build.
    pub fn record(&self, doc: usize) -> Value {
        let source = self.source(doc);
        let mut record = Map::new();
        record.insert("source".into(), json!(source.kind.as_str()));
        record.insert("source_name".into(), json!(source.name));
        record.insert(
            "description".into(),
            json!(clip_description(self.defs[doc].description())),
        );
        record.insert(
            "required".into(),
            json!(record_required(self.defs[doc].parameters())),
        );
        Value::Object(record)
    }

    /// Estimated tokens of the deferred tools' definitions: the code points of each definition's
    /// compact JSON, summed, divided by four and rounded up. Computed once.
    pub fn deferred_tokens(&self) -> i64 {
        *self.deferred_tokens.get_or_init(|| {
            let chars: usize = self.defs.iter().map(|d| def_chars(d)).sum();
            chars.div_ceil(CHARS_PER_TOKEN) as i64
        })
    }

    /// The listing of the deferred tools that fits `max_tokens`, computed once per budget.
    pub fn listing(&self, max_tokens: i64) -> Listing {
        let mut cache = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = cache.get(&max_tokens) {
            return found.clone();
        }
        let groups = self.listing_groups.get_or_init(|| ListingGroups::new(self));
        let listing = groups.render(max_tokens);
        if cache.len() >= LISTING_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(max_tokens, listing.clone());
        listing
    }

    // ---- what bm25 reads ----

    pub(super) fn term_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    pub(super) fn postings(&self, term: u32) -> &[u32] {
        &self.postings[term as usize]
    }

    /// How often `term` occurs in tool `doc` (0 when it does not).
    pub(super) fn term_frequency(&self, doc: usize, term: u32) -> u32 {
        let terms = &self.doc_terms[self.starts[doc]..self.starts[doc + 1]];
        match terms.binary_search_by_key(&term, |&(t, _)| t) {
            Ok(i) => terms[i].1,
            Err(_) => 0,
        }
    }

    pub(super) fn doc_len(&self, doc: usize) -> u32 {
        self.doc_len[doc]
    }

    /// Mean token count of the tools' index texts (0 for an empty catalog).
    pub fn avg_dl(&self) -> f64 {
        self.avg_dl
    }

    /// The tools whose lowercased name is `lowered`, in catalog order.
    pub(super) fn exact_name(&self, lowered: &str) -> Vec<u32> {
        let mut found = Vec::new();
        let mut next = self.by_lower_name.get(lowered).copied().unwrap_or(u32::MAX);
        while next != u32::MAX {
            found.push(next);
            next = self.same_name_next[next as usize];
        }
        found
    }
}

/// The lowercased bytes of a word of at most eight ASCII letters and digits, packed in a u64
/// (zero bytes pad it; a word never contains one), or `None` for a longer word.
#[inline]
fn pack_short_word(word: &str) -> Option<u64> {
    let len = word.len();
    if len == 0 || len > 8 {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes[..len].copy_from_slice(word.as_bytes());
    // Setting bit 0x20 lowercases an ASCII letter and leaves a digit as it is; the mask covers
    // the word's bytes only, so the padding stays zero.
    let case_bits = 0x2020_2020_2020_2020_u64 >> (64 - 8 * len);
    Some(u64::from_le_bytes(bytes) | case_bits)
}

/// A name lowercased as Python's `str.lower` does; the ASCII case (nearly every tool) is quick.
fn lowercase_name(name: &str) -> String {
    if name.is_ascii() {
        name.to_ascii_lowercase()
    } else {
        name.to_lowercase()
    }
}

/// Calls `each` with the parts of a tool's index text, in order: the name without one leading
/// `mcp__`, the label (or `""`), the description, then each top-level parameter name. Tokenizing
/// the parts one by one gives the tokens of the joined text, because the joining spaces and the
/// `_ . : -` that become spaces all separate words anyway.
fn for_each_index_part(def: &ToolDef, source: &ToolSource, mut each: impl FnMut(&str)) {
    // A connector tool: its connector, the gateway's slug (words split at `_`) and its
    // description; no label rule, no parameter names.
    if source.kind == SourceKind::Connectors {
        each(&source.name);
        each(def.vendor_slug.as_deref().unwrap_or(&def.name));
        each(def.description());
        return;
    }
    let name = def.name.strip_prefix("mcp__").unwrap_or(&def.name);
    each(name);
    // The label without the `other` fallback: a tool of unknown origin indexes no label.
    let label = source.name.strip_prefix("mcp-").unwrap_or(&source.name);
    let in_name = name
        .split(['_', '.', ':', '-'])
        .flat_map(str::split_whitespace)
        .any(|w| w == label);
    each(if label.is_empty() || in_name {
        ""
    } else {
        label
    });
    each(def.description());
    if let Some(Value::Object(properties)) = def.parameters().get("properties") {
        for key in properties.keys() {
            each(key);
        }
    }
}

/// A description cut to [`RECORD_DESCRIPTION_MAX_CHARS`] characters, marked with `…` when cut.
pub fn clip_description(description: &str) -> String {
    match description.char_indices().nth(RECORD_DESCRIPTION_MAX_CHARS) {
        None => description.to_string(),
        Some((cut, _)) => format!("{}…", &description[..cut]),
    }
}

/// The `required` names of a parameter schema as a record carries them: strings only, each cut
/// to 64 characters, at most 32; anything but a list gives none.
pub fn record_required(parameters: &Value) -> Vec<String> {
    let Some(Value::Array(items)) = parameters.get("required") else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_str)
        .map(|s| s.chars().take(RECORD_REQUIRED_NAME_MAX_CHARS).collect())
        .take(RECORD_REQUIRED_MAX_NAMES)
        .collect()
}

/// Code points of a definition's compact JSON, as the model would receive it.
pub fn def_chars(def: &ToolDef) -> usize {
    let json = def.to_openai().to_string();
    // Compact serde_json output matches `separators=(",", ":")` with non-ASCII kept as is.
    json.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, toolset: Option<&str>, description: &str, params: Value) -> Arc<ToolDef> {
        let mut def = ToolDef::new(name, description, params);
        if let Some(ts) = toolset {
            def = def.with_toolset(ts);
        }
        Arc::new(def)
    }

    #[test]
    fn index_text_follows_the_rules() {
        let catalog = Catalog::build(vec![
            tool(
                "mcp__github__create_issue",
                Some("mcp-github"),
                "Open an issue",
                json!({"properties": {"repo": {"description": "not indexed"}, "title": {}}}),
            ),
            tool("create_ticket", Some("mcp-linear"), "Make one.", json!({})),
            tool("orphan", None, "", json!(null)),
        ]);
        // `__` gives two spaces; `github` is already a name word, so no label is added.
        assert_eq!(
            catalog.index_text(0),
            "github  create issue  Open an issue repo title"
        );
        assert_eq!(catalog.index_text(1), "create ticket linear Make one. ");
        assert_eq!(catalog.index_text(2), "orphan   ");
        assert_eq!(catalog.source(2).label, "other");
        assert_eq!(
            catalog.doc_tokens(0),
            [
                "github", "creat", "issu", "open", "an", "issu", "repo", "titl"
            ]
        );
    }

    #[test]
    fn statistics_and_postings() {
        let catalog = Catalog::build(vec![
            tool("a_one", Some("p"), "issues issues", json!({})),
            tool("b_two", Some("p"), "issue", json!({})),
        ]);
        // a one p issues issues -> 5 tokens; b two p issue -> 4.
        assert_eq!(catalog.avg_dl(), 4.5);
        let issu = catalog.term_id("issu").unwrap();
        assert_eq!(catalog.postings(issu), &[0, 1]);
        assert_eq!(catalog.term_frequency(0, issu), 2);
        assert_eq!(catalog.term_frequency(1, issu), 1);
        assert_eq!(catalog.exact_name("b_two"), [1]);
        assert!(catalog.exact_name("nothing").is_empty());
        assert_eq!(catalog.source_counts(), &[("p".to_string(), 2)]);
    }

    /// The stored frequencies and lengths equal those of tokenizing each index text afresh.
    #[test]
    fn stored_terms_match_a_fresh_tokenization() {
        let catalog = Catalog::build(vec![
            tool(
                "mcp__Cloud__DNS_Records_List",
                Some("mcp-cloud"),
                "List DNS records. LIST again, lists!",
                json!({"properties": {"zone_identifier": {}, "per_page": {}}}),
            ),
            tool(
                "abcdefgh_abcdefghi_ABCDEFGH",
                Some("plug"),
                "Eight-byte words and nine-byte words: abcdefgh abcdefghi.",
                json!({}),
            ),
            tool("x", None, "", json!(null)),
        ]);
        let by_id: HashMap<u32, &String> = catalog.vocab.iter().map(|(t, &id)| (id, t)).collect();
        for doc in 0..catalog.len() {
            let mut want: BTreeMap<String, u32> = BTreeMap::new();
            let tokens = catalog.doc_tokens(doc);
            for t in &tokens {
                *want.entry(t.clone()).or_default() += 1;
            }
            let got: BTreeMap<String, u32> = catalog.doc_terms
                [catalog.starts[doc]..catalog.starts[doc + 1]]
                .iter()
                .map(|&(id, tf)| (by_id[&id].clone(), tf))
                .collect();
            assert_eq!(got, want, "tool {doc}");
            assert_eq!(catalog.doc_len(doc) as usize, tokens.len());
        }
    }

    #[test]
    fn names_differing_in_case_all_match_exactly() {
        let catalog = Catalog::build(vec![
            tool("Fetch", Some("p"), "", json!({})),
            tool("other", Some("p"), "", json!({})),
            tool("FETCH", Some("p"), "", json!({})),
            tool("fetch", Some("p"), "", json!({})),
        ]);
        assert_eq!(catalog.exact_name("fetch"), [0, 2, 3]);
        assert_eq!(catalog.exact_name("other"), [1]);
    }

    #[test]
    fn packed_words_are_distinct_and_case_blind() {
        assert_eq!(pack_short_word("Dns"), pack_short_word("dns"));
        assert_ne!(pack_short_word("a"), pack_short_word("a0"));
        assert_ne!(pack_short_word("abcdefgh"), pack_short_word("abcdefg"));
        assert_eq!(pack_short_word("abcdefghi"), None);
        assert_eq!(
            pack_short_word("A1z9"),
            Some(u64::from_le_bytes(*b"a1z9\0\0\0\0"))
        );
        assert_eq!(
            pack_short_word("ABCDEFGH"),
            Some(u64::from_le_bytes(*b"abcdefgh"))
        );
    }

    #[test]
    fn records_clip_and_trim() {
        let long = "x".repeat(600);
        let many: Vec<Value> = (0..40)
            .map(|i| json!(format!("{i}{}", "y".repeat(70))))
            .collect();
        let mut params = json!({"required": many});
        params["required"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!(7));
        let catalog = Catalog::build(vec![tool("t", Some("p"), &long, params)]);
        let record = catalog.record(0);
        assert_eq!(record["description"].as_str().unwrap().chars().count(), 501);
        assert!(record["description"].as_str().unwrap().ends_with('…'));
        let required = record["required"].as_array().unwrap();
        assert_eq!(required.len(), 32);
        assert_eq!(required[0].as_str().unwrap().chars().count(), 64);
        assert_eq!(
            record_required(&json!({"required": "x"})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn sources() {
        let owned = ToolDef {
            source_name: Some("honcho".into()),
            ..ToolDef::new("recall", "", json!({}))
        };
        assert_eq!(classify_source(&owned).kind, SourceKind::Plugin);
        assert_eq!(classify_source(&owned).label, "honcho");
        let mcp = ToolDef::new("x", "", json!({})).with_toolset("mcp-github");
        assert_eq!(
            (
                classify_source(&mcp).kind,
                classify_source(&mcp).label.as_str()
            ),
            (SourceKind::Mcp, "github")
        );
    }
}
