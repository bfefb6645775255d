//! Phrasings: requests people might type for a tool, written once per tool by a model
//! (`troupe tools phrasings`) and kept in a file that `tools.tool_search.phrasings` names.
//!
//! A tool's description says what it does in the vendor's words; a person asks in theirs ("tick
//! off the grocery run" for a tool that closes tasks). Phrasings bridge the two at index time,
//! from the description alone: no query is ever looked at. They join the hybrid ranking once the
//! tool embeddings are ready (they are embedded with the tools, in the background):
//! - **lexical**: each tool's phrasings are a BM25 document of their own; a query's score there,
//!   as a share of its best, is added at [`LEXICAL_SHARE`] to the tool's BM25F score as a share of
//!   the best hit's, and the lexical leg is ordered by the sum;
//! - **semantic**: a tool's similarity is blended with that of its closest phrasing
//!   ([`SEMANTIC_SHARE`]): the encoder compares a sentence with sentences, which is what a
//!   paraphrase model does best.
//!
//! The "nothing fits" evidence (lexical support, the services named) still reads the tools' own
//! text: a phrasing is the model's guess at what a tool does, not a fact about it.
//!
//! The file is a JSON object: `{"written_by": "...", "tools": {"tool_name": ["request", ...]}}`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::lexical::{LexicalHit, LexicalIndex};
use super::semantic::ToolVectors;
use crate::tool::ToolDef;

/// Weight of a tool's phrasing score (as a share of the query's best) beside its BM25F score
/// (as a share of the best hit's) in the lexical leg's order.
pub const LEXICAL_SHARE: f64 = 0.3;
/// Weight of a tool's closest phrasing in its similarity; its description has the rest.
/// Both shares were chosen on the tuning part of the validation set and the dev set
/// (`tools/search-eval/`), from 0, 0.15 and 0.3 (lexical) and 0, 0.3 and 0.5 (semantic).
pub const SEMANTIC_SHARE: f32 = 0.3;
/// Most phrasings kept per tool; a file may hold more, the first ones count.
pub const MAX_PER_TOOL: usize = 12;
/// Longest phrasing kept, in bytes; a longer line is not a request.
pub const MAX_LEN: usize = 200;
/// Largest phrasings file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The phrasings of a file, by tool name.
#[derive(Debug, Clone)]
pub struct Phrasings {
    by_tool: HashMap<String, Vec<String>>,
    written_by: Option<String>,
    fingerprint: u64,
}

impl PartialEq for Phrasings {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

impl Phrasings {
    /// Phrasings from `(tool name, requests)` pairs; blank and over-long requests are dropped,
    /// and so are repeats (case aside).
    pub fn new(
        written_by: Option<String>,
        tools: impl IntoIterator<Item = (String, Vec<String>)>,
    ) -> Phrasings {
        let mut by_tool = HashMap::new();
        for (name, requests) in tools {
            let kept = clean(requests);
            if !kept.is_empty() {
                by_tool.insert(name, kept);
            }
        }
        let mut names: Vec<&String> = by_tool.keys().collect();
        names.sort();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for name in names {
            name.hash(&mut h);
            by_tool[name].hash(&mut h);
        }
        Phrasings {
            fingerprint: h.finish(),
            by_tool,
            written_by,
        }
    }

    /// Parses a phrasings file's text.
    pub fn parse(text: &str) -> Result<Phrasings, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        let tools = value
            .get("tools")
            .and_then(Value::as_object)
            .ok_or("expected an object with \"tools\": {\"tool_name\": [\"a request\", ...]}")?;
        let mut pairs = Vec::with_capacity(tools.len());
        for (name, list) in tools {
            let list = list.as_array().ok_or_else(|| {
                format!("\"tools\".{name:?} must be a list of requests (strings)")
            })?;
            let requests = list
                .iter()
                .map(|r| {
                    r.as_str().map(str::to_string).ok_or_else(|| {
                        format!("\"tools\".{name:?} holds {r}, which is not a string")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            pairs.push((name.clone(), requests));
        }
        let written_by = value
            .get("written_by")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Phrasings::new(written_by, pairs))
    }

    /// Reads a phrasings file (at most [`MAX_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<Phrasings, String> {
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "{} is {size} bytes, more than the {} MiB a phrasings file may be; a dozen \
                 requests for each of 10,000 tools take about 10 MiB",
                path.display(),
                MAX_FILE_BYTES / (1024 * 1024)
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Phrasings::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The file text: tools in name order, so a rewrite changes only what changed.
    pub fn to_file_text(&self) -> String {
        let mut names: Vec<&String> = self.by_tool.keys().collect();
        names.sort();
        let tools: serde_json::Map<String, Value> = names
            .into_iter()
            .map(|n| (n.clone(), json!(self.by_tool[n])))
            .collect();
        let mut text = serde_json::to_string_pretty(&json!({
            "written_by": self.written_by,
            "tools": tools,
        }))
        .unwrap_or_default();
        text.push('\n');
        text
    }

    /// Writes the file whole or not at all: a temporary file of this process, on disk before it
    /// is renamed over the old one.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = path.with_extension(format!("partial.{}", std::process::id()));
        let written = std::fs::File::create(&tmp).and_then(|mut file| {
            file.write_all(self.to_file_text().as_bytes())?;
            file.sync_all()
        });
        written
            .and_then(|()| std::fs::rename(&tmp, path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
    }

    /// A tool's phrasings (empty when it has none).
    pub fn of(&self, tool: &str) -> &[String] {
        self.by_tool.get(tool).map_or(&[], Vec::as_slice)
    }

    /// Tools with phrasings.
    pub fn len(&self) -> usize {
        self.by_tool.len()
    }

    /// Whether no tool has phrasings.
    pub fn is_empty(&self) -> bool {
        self.by_tool.is_empty()
    }

    /// What wrote them (a model's name), when the file says.
    pub fn written_by(&self) -> Option<&str> {
        self.written_by.as_deref()
    }

    /// Each tool's name and phrasings, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.by_tool.iter().map(|(n, p)| (n.as_str(), p.as_slice()))
    }

    /// The phrasings of `defs` (catalog order) as `(tool index, text)` pairs.
    pub fn for_catalog(&self, defs: &[Arc<ToolDef>]) -> Vec<(u32, String)> {
        defs.iter()
            .enumerate()
            .flat_map(|(doc, def)| {
                self.of(&def.name)
                    .iter()
                    .map(move |p| (doc as u32, p.clone()))
            })
            .collect()
    }
}

/// The lines of a model's answer that read as requests: list marks and quotes trimmed, blank,
/// over-long and repeated lines dropped, at most [`MAX_PER_TOOL`].
pub fn requests_from_reply(reply: &str) -> Vec<String> {
    clean(
        reply
            .lines()
            .map(|line| strip_list_mark(line.trim()))
            // "Here are six requests:" introduces the list; it is not one of them.
            .filter(|line| !line.ends_with(':'))
            .map(|line| {
                line.trim_matches(|c| c == '"' || c == '\'')
                    .trim()
                    .to_string()
            })
            .collect(),
    )
}

/// `line` without a list mark (`1.`, `2)`, `-`, `*`, `•`) and the space after it; a number
/// that starts the request itself ("3 tickets are late") stays.
fn strip_list_mark(line: &str) -> &str {
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let rest = if digits > 0 {
        match line[digits..].strip_prefix(['.', ')']) {
            Some(rest) => rest,
            None => return line,
        }
    } else {
        match line.strip_prefix(['-', '*', '•']) {
            Some(rest) => rest,
            None => return line,
        }
    };
    if rest.starts_with(char::is_whitespace) {
        rest.trim_start()
    } else {
        line
    }
}

fn clean(requests: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    requests
        .into_iter()
        .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|r| r.len() >= 3 && r.len() <= MAX_LEN)
        .filter(|r| seen.insert(r.to_lowercase()))
        .take(MAX_PER_TOOL)
        .collect()
}

/// A catalog's phrasings ready for queries: their BM25 index (one document per tool) and
/// their vectors, each with the tool it belongs to.
pub struct PhrasingLegs {
    index: LexicalIndex,
    owner: Vec<u32>,
    vectors: Int8Vectors,
    tools: usize,
    phrased: usize,
}

impl std::fmt::Debug for PhrasingLegs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhrasingLegs")
            .field("phrasings", &self.owner.len())
            .field("tools", &self.tools)
            .field("phrased", &self.phrased)
            .finish()
    }
}

impl PhrasingLegs {
    /// The legs for a catalog of `tools` tools, from its `(tool, phrasing)` pairs and their
    /// vectors (same order).
    pub fn new(
        tools: usize,
        pairs: &[(u32, String)],
        vectors: ToolVectors,
    ) -> Result<PhrasingLegs, String> {
        if vectors.len() != pairs.len() {
            return Err(format!(
                "{} phrasing vectors for {} phrasings",
                vectors.len(),
                pairs.len()
            ));
        }
        let mut joined = vec![String::new(); tools];
        for (doc, text) in pairs {
            let doc = *doc as usize;
            if doc >= tools {
                return Err(format!("a phrasing names tool {doc} of {tools}"));
            }
            joined[doc].push_str(text);
            joined[doc].push_str(". ");
        }
        let docs: Vec<Arc<ToolDef>> = joined
            .into_iter()
            .map(|text| Arc::new(ToolDef::new("", text, Value::Null)))
            .collect();
        let labels = vec![None; docs.len()];
        let phrased = docs.iter().filter(|d| !d.description().is_empty()).count();
        Ok(PhrasingLegs {
            phrased,
            index: LexicalIndex::build(&docs, &labels),
            owner: pairs.iter().map(|(doc, _)| *doc).collect(),
            vectors: Int8Vectors::new(&vectors),
            tools,
        })
    }

    /// Tools of the catalog that have phrasings.
    pub fn phrased_tools(&self) -> usize {
        self.phrased
    }

    /// The lexical leg's order: `hits` (BM25F over the tools' text) re-weighed with the query's
    /// score over the phrasings, as `(tool, score)`, best first, at most `limit`.
    pub fn lexical_order(
        &self,
        query: &str,
        hits: &[LexicalHit],
        limit: usize,
    ) -> Vec<(usize, f64)> {
        let prepared = self.index.prepare(query);
        let phrased = self.index.score_top(&prepared, limit);
        let best_hit = hits.iter().map(|h| h.score).fold(0.0, f64::max);
        let best_phrased = phrased.iter().map(|h| h.score).fold(0.0, f64::max);
        let mut score: HashMap<usize, f64> = HashMap::with_capacity(hits.len() + phrased.len());
        if best_hit > 0.0 {
            for h in hits {
                *score.entry(h.doc).or_default() += h.score / best_hit;
            }
        }
        if best_phrased > 0.0 {
            for h in &phrased {
                *score.entry(h.doc).or_default() += LEXICAL_SHARE * h.score / best_phrased;
            }
        }
        let mut order: Vec<(usize, f64)> = score.into_iter().filter(|&(_, s)| s > 0.0).collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        order.truncate(limit);
        order
    }

    /// Blends each tool's similarity `sims` (to its description) with that of its closest
    /// phrasing to `query` (the query's vector); tools without phrasings keep theirs.
    pub fn blend_similarities(&self, query: &[f32], sims: &mut [f32]) {
        if sims.len() != self.tools {
            return;
        }
        let own = self.vectors.similarities(query);
        let mut best = vec![f32::NEG_INFINITY; self.tools];
        for (&doc, &s) in self.owner.iter().zip(&own) {
            let b = &mut best[doc as usize];
            *b = b.max(s);
        }
        for (s, b) in sims.iter_mut().zip(best) {
            if b.is_finite() {
                *s = (1.0 - SEMANTIC_SHARE) * *s + SEMANTIC_SHARE * b;
            }
        }
    }
}

/// Unit vectors stored as one byte a coordinate and a scale each: a query reads a quarter of
/// the memory. Six phrasings a tool over 3,309 tools are 7.6 MB this way, 30 MB as `f32`, and
/// reading them, not multiplying, is what a query's time goes to. The error of a similarity is
/// under a hundredth.
struct Int8Vectors {
    dims: usize,
    data: Vec<i8>,
    scales: Vec<f32>,
}

impl Int8Vectors {
    fn new(vectors: &ToolVectors) -> Int8Vectors {
        let mut data = Vec::with_capacity(vectors.len() * vectors.dims());
        let mut scales = Vec::with_capacity(vectors.len());
        let mut dims = 0;
        for row in vectors.rows() {
            dims = row.len();
            let (packed, scale) = pack(row);
            scales.push(scale);
            data.extend(packed);
        }
        Int8Vectors { dims, data, scales }
    }

    /// The similarity of `query` (unit length, `dims` long) to each vector. The query is
    /// packed the same way, so each product is of two small integers: sums of those vectorise
    /// on any x86-64, where turning bytes into floats does not without newer instructions.
    fn similarities(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dims || self.dims == 0 {
            return Vec::new();
        }
        let (packed, query_scale) = pack(query);
        let mut out = vec![0f32; self.scales.len()];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just been seen to have AVX2.
            unsafe { dots_avx2(&self.data, &packed, &mut out) };
            return self.scaled(out, query_scale);
        }
        dots(&self.data, &packed, &mut out);
        self.scaled(out, query_scale)
    }

    fn scaled(&self, mut dots: Vec<f32>, query_scale: f32) -> Vec<f32> {
        for (d, scale) in dots.iter_mut().zip(&self.scales) {
            *d *= scale * query_scale;
        }
        dots
    }
}

/// `out[i]` = the dot product of row `i` of `rows` with `query` (rows as long as it).
/// Inlined, so that [`dots_avx2`] compiles its own copy for AVX2.
#[inline(always)]
fn dots(rows: &[i8], query: &[i8], out: &mut [f32]) {
    for (row, o) in rows.chunks_exact(query.len()).zip(out) {
        let dot: i32 = row
            .iter()
            .zip(query)
            .map(|(a, b)| i32::from(*a) * i32::from(*b))
            .sum();
        *o = dot as f32;
    }
}

/// [`dots`] compiled for AVX2, which widens and multiplies sixteen bytes at a time; the
/// baseline x86-64 target has to do it in many more steps.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dots_avx2(rows: &[i8], query: &[i8], out: &mut [f32]) {
    dots(rows, query, out);
}

/// One byte a coordinate and the scale that gives the coordinate back.
fn pack(v: &[f32]) -> (Vec<i8>, f32) {
    let top = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if top > 0.0 { top / 127.0 } else { 1.0 };
    let packed = v
        .iter()
        .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (packed, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_bad_ones_say_what_to_send() {
        let p = Phrasings::parse(
            r#"{"written_by": "qwen", "tools": {"close_task": ["tick off the groceries", "  ", "Tick off the groceries", "mark it done"]}}"#,
        )
        .expect("parses");
        assert_eq!(
            p.of("close_task"),
            ["tick off the groceries", "mark it done"]
        );
        assert_eq!(p.written_by(), Some("qwen"));
        let again = Phrasings::parse(&p.to_file_text()).expect("round trip");
        assert_eq!(again, p);
        assert_eq!(again.of("close_task"), p.of("close_task"));

        let err = Phrasings::parse(r#"{"close_task": ["x"]}"#).expect_err("no tools key");
        assert!(err.contains("\"tools\""), "{err}");
        let err = Phrasings::parse(r#"{"tools": {"a": "one"}}"#).expect_err("not a list");
        assert!(err.contains("list of requests"), "{err}");
        let err = Phrasings::parse(r#"{"tools": {"a": [1]}}"#).expect_err("not a string");
        assert!(err.contains("not a string"), "{err}");
        assert!(
            Phrasings::parse("nope")
                .expect_err("not json")
                .contains("not JSON")
        );
    }

    #[test]
    fn a_file_past_the_limit_is_refused_unread() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("phrasings.json");
        // Sparse: the size is what is checked, before anything is read.
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(MAX_FILE_BYTES + 1))
            .expect("a large file");
        let err = Phrasings::read(&path).expect_err("too large");
        assert!(err.contains("64 MiB"), "{err}");
    }

    #[test]
    fn a_reply_becomes_requests() {
        let reply = "1. close the grocery task\n- \"tick off the shopping\"\n\n* done with the dentist call\n2) close the grocery task\n";
        assert_eq!(
            requests_from_reply(reply),
            [
                "close the grocery task",
                "tick off the shopping",
                "done with the dentist call"
            ]
        );
        let long = "word ".repeat(100);
        assert!(requests_from_reply(&long).is_empty());
        // A number that is part of the request stays; an introduction is not a request.
        assert_eq!(
            requests_from_reply(
                "Here are six requests:\n3D print the bracket\n2 tickets are late, close them\n10. -5 degrees tomorrow?"
            ),
            [
                "3D print the bracket",
                "2 tickets are late, close them",
                "-5 degrees tomorrow?"
            ]
        );
    }

    #[test]
    fn a_byte_a_coordinate_keeps_similarities_within_a_hundredth() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut unit = |dims: usize| {
            let v: Vec<f32> = (0..dims)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let rows: Vec<Vec<f32>> = (0..50).map(|_| unit(387)).collect();
        let exact = ToolVectors::new(387, rows.clone()).expect("vectors");
        let packed = Int8Vectors::new(&exact);
        let query = unit(387);
        let want = exact.similarities(&query);
        let got = packed.similarities(&query);
        assert_eq!(got.len(), 50);
        for (w, g) in want.iter().zip(&got) {
            assert!((w - g).abs() < 0.01, "{w} against {g}");
        }
        assert!(packed.similarities(&query[..10]).is_empty());
    }

    #[test]
    fn the_closest_phrasing_pulls_a_tool_up() {
        let pairs = vec![(1u32, "tick it off".to_string()), (1, "other".to_string())];
        let vectors = ToolVectors::new(2, vec![vec![1.0, 0.0], vec![0.0, 1.0]]).expect("vectors");
        let legs = PhrasingLegs::new(3, &pairs, vectors).expect("legs");
        let mut sims = vec![0.5, 0.2, 0.4];
        legs.blend_similarities(&[1.0, 0.0], &mut sims);
        let pulled = (1.0 - SEMANTIC_SHARE) * 0.2 + SEMANTIC_SHARE;
        assert_eq!(sims, vec![0.5, pulled, 0.4]);
        // The lexical leg: tool 1's phrasing holds "tick", the tools' own text does not.
        let order = legs.lexical_order("tick off", &[], 10);
        assert_eq!(order.first().map(|o| o.0), Some(1));
    }
}
