//! The semantic leg of the hybrid ranking: tool and query embeddings from a small sentence
//! encoder that runs in-process and offline (feature `semantic`, on by default: the bundled
//! paraphrase-MiniLM-L3-v2 of the `pocket-encoder` crate).
//!
//! Tool embeddings never hold up a `tool_search` call. The first hybrid query on a catalog starts
//! a background thread that loads them from the on-disk cache or computes the missing ones; until
//! they are ready the lexical leg answers alone. The cache lives in troupe's home (the
//! [`TroupeHome`] the caller hands down) in `cache/tool-embeddings/`, one file per model, keyed by a
//! hash of each tool's embedding text, so a tool that did not change is never encoded again, in
//! this process or the next. A damaged cache file is ignored (and rewritten), never trusted.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use super::phrasings::PhrasingLegs;
use super::split::for_each_split_word;
use crate::home::TroupeHome;
use crate::tool::ToolDef;

/// Tools encoded per call to the encoder, to bound its working memory.
const EMBED_BATCH: usize = 64;
/// Most vectors one cache file keeps: the current catalog's (its tools and their phrasings) are
/// all kept, however many, and older ones fill what is left.
const CACHE_MAX_VECTORS: usize = 20_000;
/// Longest description part of a tool's embedding text, in characters. The encoder reads about
/// 128 word pieces; more text only costs time.
const EMBED_TEXT_MAX_CHARS: usize = 600;
/// First bytes of a cache file.
const CACHE_MAGIC: &[u8; 8] = b"TRPEMB01";

/// A sentence encoder: unit-length vectors, one per text, in order.
pub trait Embedder: Send + Sync {
    /// Identifies the model and its preprocessing: vectors of different ids never mix.
    fn model_id(&self) -> &str;
    /// Coordinates per vector.
    fn dimensions(&self) -> usize;
    /// Encodes `texts` (none empty) into unit-length vectors.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String>;
}

/// Fixes how many threads the bundled encoder's matrix kernels use, once, before any thread
/// starts: all the cores the process may use, unless `RAYON_NUM_THREADS` already says.
///
/// Without it, candle asks for the physical core count before every matrix product, and on
/// Linux that parses `/proc/cpuinfo` each time: encoding a query took twice as long (figures in
/// docs/benchmarks.md). candle reads only the environment, so this sets `RAYON_NUM_THREADS`.
///
/// # Safety
/// Call it while the process runs a single thread (first thing in `main`): it changes the
/// environment, which another thread may be reading.
pub unsafe fn settle_encoder_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: the caller guarantees no other thread exists.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", cores.to_string()) };
    }
}

/// The bundled encoder when the `semantic` feature is on and it loads; `None` otherwise (the
/// hybrid ranking then runs on its lexical leg alone).
pub fn default_embedder() -> Option<Arc<dyn Embedder>> {
    static EMBEDDER: OnceLock<Option<Arc<dyn Embedder>>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| {
            #[cfg(feature = "semantic")]
            {
                match bundled::PocketEncoder::load() {
                    Ok(e) => Some(Arc::new(e) as Arc<dyn Embedder>),
                    Err(e) => {
                        tracing::warn!(error = %e, "tool search: the sentence encoder did not load; ranking without the semantic leg");
                        None
                    }
                }
            }
            #[cfg(not(feature = "semantic"))]
            {
                None
            }
        })
        .clone()
}

#[cfg(feature = "semantic")]
mod bundled {
    //! `pocket-encoder`: paraphrase-MiniLM-L3-v2 (Apache-2.0), bundled in the crate.

    use super::Embedder;

    pub(super) struct PocketEncoder {
        encoder: pocket_encoder::Encoder,
        id: String,
    }

    impl PocketEncoder {
        pub(super) fn load() -> Result<Self, String> {
            let encoder = pocket_encoder::Encoder::new().map_err(|e| e.to_string())?;
            let info = pocket_encoder::model_info();
            Ok(PocketEncoder {
                encoder,
                id: format!("{}@{}", info.id, info.revision),
            })
        }
    }

    impl Embedder for PocketEncoder {
        fn model_id(&self) -> &str {
            &self.id
        }

        fn dimensions(&self) -> usize {
            pocket_encoder::model_info().dimensions
        }

        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            self.encoder.embed(texts).map_err(|e| e.to_string())
        }
    }
}

/// The embeddings of a catalog's tools, row `i` for tool `i`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolVectors {
    dims: usize,
    data: Vec<f32>,
}

impl ToolVectors {
    /// Rows of `dims` coordinates.
    pub fn new(dims: usize, rows: Vec<Vec<f32>>) -> Result<ToolVectors, String> {
        let mut data = Vec::with_capacity(rows.len() * dims);
        for row in rows {
            if row.len() != dims {
                return Err(format!(
                    "an embedding has {} coordinates, expected {dims}",
                    row.len()
                ));
            }
            data.extend(row);
        }
        Ok(ToolVectors { dims, data })
    }

    /// Tools embedded.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dims).unwrap_or(0)
    }

    /// Whether no tool is embedded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Coordinates of each vector.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Each tool's vector, in catalog order.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.dims.max(1))
    }

    /// The first `rows` rows and the rest (all rows and none when `rows` is past the end).
    pub fn split_at(mut self, rows: usize) -> (ToolVectors, ToolVectors) {
        let at = (rows * self.dims).min(self.data.len());
        let rest = self.data.split_off(at);
        let dims = self.dims;
        (self, ToolVectors { dims, data: rest })
    }

    /// Cosine similarity of `query` (unit length) to every tool, in catalog order.
    pub fn similarities(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dims || self.dims == 0 {
            return Vec::new();
        }
        self.data
            .chunks_exact(self.dims)
            .map(|row| dot(row, query))
            .collect()
    }
}

/// The dot product of two equal-length vectors, summed in eight lanes so the compiler can keep
/// them in SIMD registers (a single running sum has to be added in order, one at a time).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The text a tool is embedded from: its source label, its name's words and its description.
pub fn embedding_text(def: &ToolDef, label: Option<&str>) -> String {
    let mut name_words: Vec<String> = Vec::new();
    for_each_split_word(&def.name, |w| name_words.push(w.to_string()));
    if name_words.first().is_some_and(|w| w == "mcp") {
        name_words.remove(0);
    }
    let mut text = String::new();
    if let Some(label) = label {
        let mut label_words = Vec::new();
        for_each_split_word(label, |w| label_words.push(w.to_string()));
        if !name_words.starts_with(&label_words) {
            text.push_str(&label_words.join(" "));
            text.push_str(": ");
        }
    }
    text.push_str(&name_words.join(" "));
    if let Some(description) = def.description.as_deref().map(str::trim)
        && !description.is_empty()
    {
        text.push_str(". ");
        text.extend(description.chars().take(EMBED_TEXT_MAX_CHARS));
    }
    if text.trim().is_empty() {
        text.push_str("tool");
    }
    text
}

/// 64-bit FNV-1a over the model id and the text: the cache key of one tool embedding.
pub fn content_hash(model_id: &str, text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in model_id
        .as_bytes()
        .iter()
        .chain(&[0u8])
        .chain(text.as_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cache file of `model_id` under `home` (in its `cache/tool-embeddings`).
pub fn cache_file(home: &TroupeHome, model_id: &str) -> PathBuf {
    let safe: String = model_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(120)
        .collect();
    home.tool_embeddings().join(format!("{safe}.bin"))
}

/// Reads a cache file: hash -> vector. A missing file is empty; a damaged one is reported and
/// treated as empty.
pub fn read_cache(path: &Path, dims: usize) -> HashMap<u64, Vec<f32>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "tool search: cannot read the embedding cache; recomputing");
            return HashMap::new();
        }
    };
    match parse_cache(&bytes, dims) {
        Some(map) => map,
        None => {
            tracing::warn!(path = %path.display(), "tool search: the embedding cache is damaged or from another model; recomputing");
            HashMap::new()
        }
    }
}

fn parse_cache(bytes: &[u8], dims: usize) -> Option<HashMap<u64, Vec<f32>>> {
    let rest = bytes.strip_prefix(CACHE_MAGIC)?;
    let (head, rest) = rest.split_at_checked(4)?;
    if u32::from_le_bytes(head.try_into().ok()?) as usize != dims || dims == 0 {
        return None;
    }
    let record = 8 + 4 * dims;
    if rest.len() % record != 0 {
        return None;
    }
    let mut map = HashMap::with_capacity(rest.len() / record);
    for chunk in rest.chunks_exact(record) {
        let hash = u64::from_le_bytes(chunk[..8].try_into().ok()?);
        let v: Vec<f32> = chunk[8..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        map.insert(hash, v);
    }
    Some(map)
}

/// Writes all of `first`, then `rest` while the file holds under `CACHE_MAX_VECTORS`, to
/// `path`, through a temporary file renamed into place, so a reader never sees half a file.
pub fn write_cache(
    path: &Path,
    dims: usize,
    first: &[(u64, &[f32])],
    rest: &HashMap<u64, Vec<f32>>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::with_capacity(12 + (first.len() + rest.len()) * (8 + 4 * dims));
    out.extend_from_slice(CACHE_MAGIC);
    out.extend_from_slice(&(dims as u32).to_le_bytes());
    let mut written = std::collections::HashSet::new();
    let others = rest.iter().map(|(h, v)| (*h, v.as_slice()));
    for (i, (hash, v)) in first.iter().copied().chain(others).enumerate() {
        let kept_anyway = i < first.len();
        if (!kept_anyway && written.len() >= CACHE_MAX_VECTORS)
            || v.len() != dims
            || !written.insert(hash)
        {
            continue;
        }
        out.extend_from_slice(&hash.to_le_bytes());
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    // Unique per write: two sessions of one process may encode the same catalog at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("cache"),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&out)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Embeds `texts` with `embedder`, taking what the cache under `home` holds and storing what
/// was computed. The cache is an optimisation: failing to write it is logged, not an error.
pub fn embed_with_cache(
    embedder: &dyn Embedder,
    home: &TroupeHome,
    texts: &[String],
) -> Result<ToolVectors, String> {
    embed_counting(embedder, home, texts, &AtomicUsize::new(0))
}

/// [`embed_with_cache`], adding to `done` the tools embedded so far (those from the cache at
/// once, the others batch by batch): one atomic add per batch, nothing the encoder notices.
pub fn embed_counting(
    embedder: &dyn Embedder,
    home: &TroupeHome,
    texts: &[String],
    done: &AtomicUsize,
) -> Result<ToolVectors, String> {
    let dims = embedder.dimensions();
    let path = cache_file(home, embedder.model_id());
    let mut cached = read_cache(&path, dims);
    let hashes: Vec<u64> = texts
        .iter()
        .map(|t| content_hash(embedder.model_id(), t))
        .collect();
    let missing: Vec<usize> = (0..texts.len())
        .filter(|&i| !cached.contains_key(&hashes[i]))
        .collect();
    done.fetch_add(texts.len() - missing.len(), Ordering::Relaxed);
    let mut computed: HashMap<u64, Vec<f32>> = HashMap::with_capacity(missing.len());
    for batch in missing.chunks(EMBED_BATCH) {
        let batch_texts: Vec<String> = batch.iter().map(|&i| texts[i].clone()).collect();
        let vectors = embedder.embed(&batch_texts)?;
        if vectors.len() != batch.len() {
            return Err(format!(
                "the encoder returned {} vectors for {} texts",
                vectors.len(),
                batch.len()
            ));
        }
        for (&i, v) in batch.iter().zip(vectors) {
            computed.insert(hashes[i], v);
        }
        done.fetch_add(batch.len(), Ordering::Relaxed);
    }
    let mut rows = Vec::with_capacity(texts.len());
    for h in &hashes {
        let v = computed
            .get(h)
            .or_else(|| cached.get(h))
            .cloned()
            .ok_or_else(|| "an embedding went missing".to_string())?;
        rows.push(v);
    }
    let vectors = ToolVectors::new(dims, rows)?;
    if !missing.is_empty() {
        let first: Vec<(u64, &[f32])> = hashes
            .iter()
            .zip(vectors.data.chunks_exact(dims.max(1)))
            .map(|(h, v)| (*h, v))
            .collect();
        for h in &hashes {
            cached.remove(h);
        }
        if let Err(e) = write_cache(&path, dims, &first, &cached) {
            tracing::warn!(path = %path.display(), error = %e, "tool search: cannot write the embedding cache");
        }
    }
    Ok(vectors)
}

/// Where a catalog's tool embeddings arrive: empty until the background thread is done.
#[derive(Default)]
pub struct SemanticSlot {
    started: AtomicBool,
    state: Arc<(Mutex<Progress>, Condvar)>,
    /// Tools to embed (set when the work starts) and tools embedded so far, for a progress bar.
    counts: Arc<(AtomicUsize, AtomicUsize)>,
}

/// How far the background thread got.
#[derive(Default)]
enum Progress {
    /// Not started, or still loading the encoder and embedding the tools.
    #[default]
    Working,
    /// Done.
    Ready(Arc<SemanticReady>),
    /// No encoder (the `semantic` feature is off, or it did not load): the lexical leg answers.
    Unavailable,
}

impl Progress {
    fn ready(&self) -> Option<Arc<SemanticReady>> {
        match self {
            Progress::Ready(ready) => Some(Arc::clone(ready)),
            Progress::Working | Progress::Unavailable => None,
        }
    }
}

/// Tool embeddings ready for queries, with the encoder that made them.
pub struct SemanticReady {
    /// The encoder, for the queries.
    pub embedder: Arc<dyn Embedder>,
    /// The tools' vectors, or why there are none.
    pub vectors: Result<ToolVectors, String>,
    /// The tools' phrasings with their vectors, when the settings name a phrasings file.
    pub phrasings: Option<PhrasingLegs>,
}

impl SemanticReady {
    /// Embeddings without phrasings.
    pub fn new(embedder: Arc<dyn Embedder>, vectors: Result<ToolVectors, String>) -> Self {
        SemanticReady {
            embedder,
            vectors,
            phrasings: None,
        }
    }

    /// Embeds `tools` (a catalog's embedding texts) and `phrasings` (`(tool, text)` pairs) in
    /// one pass through the cache, counting in `done`: one pass, so the cache file keeps both
    /// (two writes would each keep their own texts first and push the other's out past the
    /// cap). When that pass fails, the tools' texts are tried alone and the leg goes on without
    /// phrasings. On a cold cache the leg waits for the phrasings too (about six texts a tool).
    pub fn compute(
        embedder: Arc<dyn Embedder>,
        home: &TroupeHome,
        tools: &[String],
        phrasings: &[(u32, String)],
        done: &AtomicUsize,
    ) -> SemanticReady {
        if phrasings.is_empty() {
            let vectors = embed_counting(embedder.as_ref(), home, tools, done);
            return SemanticReady::new(embedder, vectors);
        }
        let mut texts = tools.to_vec();
        texts.extend(phrasings.iter().map(|(_, t)| t.clone()));
        let (vectors, phrasings) = match embed_counting(embedder.as_ref(), home, &texts, done) {
            Ok(all) => {
                let (own, phrased) = all.split_at(tools.len());
                let legs = PhrasingLegs::new(tools.len(), phrasings, phrased)
                    .inspect_err(|e| tracing::warn!(error = %e, "tool search: phrasings left out"))
                    .ok();
                (Ok(own), legs)
            }
            Err(e) => {
                tracing::warn!(error = %e, "tool search: embedding the phrasings failed; trying the tools alone");
                let alone = embed_counting(embedder.as_ref(), home, tools, &AtomicUsize::new(0));
                (alone, None)
            }
        };
        SemanticReady {
            embedder,
            vectors,
            phrasings,
        }
    }
}

impl std::fmt::Debug for SemanticReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemanticReady")
            .field("model", &self.embedder.model_id())
            .field("tools", &self.vectors.as_ref().map(ToolVectors::len))
            .field("phrasings", &self.phrasings)
            .finish()
    }
}

impl SemanticSlot {
    /// The embeddings when ready; otherwise starts computing them (once) in the background and
    /// returns `None` at once. `texts` is called only when the work starts; `embedder` is called
    /// on the background thread, so loading the encoder (tens of MiB, a noticeable pause) never
    /// happens on the caller's, which is a session's actor thread.
    pub fn get_or_start(
        &self,
        embedder: impl FnOnce() -> Option<Arc<dyn Embedder>> + Send + 'static,
        home: TroupeHome,
        texts: impl FnOnce() -> (Vec<String>, Vec<(u32, String)>),
    ) -> Option<Arc<SemanticReady>> {
        if let Some(ready) = self.ready() {
            return Some(ready);
        }
        if self.started.swap(true, Ordering::AcqRel) {
            return None;
        }
        let (texts, phrasings) = texts();
        self.counts
            .0
            .store(texts.len() + phrasings.len(), Ordering::Relaxed);
        let counts = Arc::clone(&self.counts);
        let state = Arc::clone(&self.state);
        let spawned = std::thread::Builder::new()
            .name("tool-embeddings".into())
            .spawn(move || {
                let (lock, ready) = &*state;
                let Some(embedder) = embedder() else {
                    *crate::sync::lock(lock) = Progress::Unavailable;
                    ready.notify_all();
                    return;
                };
                let started = std::time::Instant::now();
                let computed =
                    SemanticReady::compute(embedder, &home, &texts, &phrasings, &counts.1);
                match &computed.vectors {
                    Ok(v) => tracing::debug!(tools = v.len(), phrasings = phrasings.len(), elapsed = ?started.elapsed(), "tool search: embeddings ready"),
                    Err(e) => tracing::warn!(error = %e, "tool search: embedding the tools failed; ranking without the semantic leg"),
                }
                *crate::sync::lock(lock) = Progress::Ready(Arc::new(computed));
                ready.notify_all();
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "tool search: cannot start the embedding thread");
            *crate::sync::lock(&self.state.0) = Progress::Unavailable;
        }
        None
    }

    /// While the embeddings are being computed: tools embedded so far and tools in all.
    /// `None` when the work has not started or is over.
    pub fn progress(&self) -> Option<(usize, usize)> {
        if !self.started.load(Ordering::Acquire)
            || !matches!(*crate::sync::lock(&self.state.0), Progress::Working)
        {
            return None;
        }
        let total = self.counts.0.load(Ordering::Relaxed);
        Some((self.counts.1.load(Ordering::Relaxed).min(total), total))
    }

    /// The embeddings if they are ready.
    pub fn ready(&self) -> Option<Arc<SemanticReady>> {
        crate::sync::lock(&self.state.0).ready()
    }

    /// Waits up to `timeout` for the embeddings (for the command line, which answers once and
    /// exits; a session never waits).
    pub fn wait(&self, timeout: Duration) -> Option<Arc<SemanticReady>> {
        if !self.started.load(Ordering::Acquire) {
            return self.ready();
        }
        let (lock, cond) = &*self.state;
        let guard = crate::sync::lock(lock);
        let (guard, _) = cond
            .wait_timeout_while(guard, timeout, |s| matches!(s, Progress::Working))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.ready()
    }
}

impl super::catalog::Catalog {
    /// While this catalog's tool embeddings are being computed: tools embedded so far and in
    /// all (for a progress bar on a person's terminal); `None` otherwise.
    pub fn embedding_progress(&self) -> Option<(usize, usize)> {
        self.semantic.progress()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A deterministic encoder for cache and plumbing tests: one coordinate per letter a–z,
    /// counting letters, normalised. Counts its calls.
    pub(crate) struct LetterEncoder {
        pub(crate) calls: std::sync::atomic::AtomicUsize,
    }

    impl Embedder for LetterEncoder {
        fn model_id(&self) -> &str {
            "letters-v1"
        }
        fn dimensions(&self) -> usize {
            26
        }
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
            self.calls.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts
                .iter()
                .map(|t| {
                    let mut v = vec![0f32; 26];
                    for b in t.bytes().filter(u8::is_ascii_alphabetic) {
                        v[(b.to_ascii_lowercase() - b'a') as usize] += 1.0;
                    }
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                    v.iter_mut().for_each(|x| *x /= n);
                    v
                })
                .collect())
        }
    }

    #[test]
    fn the_lane_dot_product_is_the_plain_one() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..19).map(|i| (i % 4) as f32 + 0.25).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!(
            (dot(&a, &b) - plain).abs() < 1e-4,
            "{} vs {plain}",
            dot(&a, &b)
        );
        assert_eq!(dot(&[], &[]), 0.0);
    }

    #[test]
    fn embedding_text_names_source_words_and_description() {
        let def = ToolDef::new("mcp_github_createIssue", "Open an issue.", json!({}));
        assert_eq!(
            embedding_text(&def, Some("github")),
            "github create issue. Open an issue."
        );
        let def = ToolDef::new("take_screenshot", "", json!({}));
        assert_eq!(
            embedding_text(&def, Some("chrome-devtools")),
            "chrome devtools: take screenshot"
        );
    }

    #[test]
    fn the_cache_spares_the_encoder_and_survives_damage() {
        let home = tempfile::tempdir().unwrap();
        let enc = LetterEncoder {
            calls: Default::default(),
        };
        let texts: Vec<String> = ["alpha", "beta", "gamma"].map(String::from).to_vec();
        let first = embed_with_cache(&enc, &TroupeHome::at(home.path()), &texts).unwrap();
        assert_eq!(enc.calls.load(Ordering::SeqCst), 3);
        // Same texts: all from the cache.
        let again = embed_with_cache(&enc, &TroupeHome::at(home.path()), &texts).unwrap();
        assert_eq!(enc.calls.load(Ordering::SeqCst), 3);
        assert_eq!(first, again);
        // One new text: only it is encoded.
        let more: Vec<String> = ["alpha", "delta"].map(String::from).to_vec();
        let v = embed_with_cache(&enc, &TroupeHome::at(home.path()), &more).unwrap();
        assert_eq!(enc.calls.load(Ordering::SeqCst), 4);
        assert_eq!(v.len(), 2);
        // A damaged file is ignored and rewritten.
        let path = cache_file(&TroupeHome::at(home.path()), enc.model_id());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&path, &bytes).unwrap();
        let v = embed_with_cache(&enc, &TroupeHome::at(home.path()), &more).unwrap();
        assert_eq!(enc.calls.load(Ordering::SeqCst), 6);
        assert_eq!(v.len(), 2);
        assert_eq!(read_cache(&path, 26).len(), 2);
        // Another model's dimensions: not read.
        assert!(read_cache(&path, 25).is_empty());
    }

    #[test]
    fn the_current_catalog_is_cached_whole_past_the_cap() {
        let home = tempfile::tempdir().unwrap();
        let path = cache_file(&TroupeHome::at(home.path()), "m");
        // A catalog with its phrasings can need more vectors than the cap: all are kept, and
        // older entries only fill what the cap leaves.
        let rows: Vec<(u64, Vec<f32>)> = (0..CACHE_MAX_VECTORS as u64 + 5)
            .map(|h| (h, vec![1.0]))
            .collect();
        let first: Vec<(u64, &[f32])> = rows.iter().map(|(h, v)| (*h, v.as_slice())).collect();
        let older: HashMap<u64, Vec<f32>> = [(u64::MAX, vec![0.5])].into_iter().collect();
        write_cache(&path, 1, &first, &older).unwrap();
        let read = read_cache(&path, 1);
        assert_eq!(read.len(), CACHE_MAX_VECTORS + 5);
        assert!(!read.contains_key(&u64::MAX));
        // Under the cap, older entries stay.
        write_cache(&path, 1, &first[..10], &older).unwrap();
        assert_eq!(read_cache(&path, 1).len(), 11);
    }

    #[test]
    fn embedding_counts_cached_tools_at_once_and_computed_ones_by_batch() {
        let home = tempfile::tempdir().unwrap();
        let enc = LetterEncoder {
            calls: Default::default(),
        };
        let texts: Vec<String> = (0..150).map(|i| format!("tool number {i}")).collect();
        let done = AtomicUsize::new(0);
        embed_counting(&enc, &TroupeHome::at(home.path()), &texts[..10], &done).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 10);
        let done = AtomicUsize::new(0);
        embed_counting(&enc, &TroupeHome::at(home.path()), &texts, &done).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 150);
        // Ten from the cache, 140 encoded in batches of EMBED_BATCH.
        assert_eq!(enc.calls.load(Ordering::SeqCst), 150);
    }

    #[test]
    fn a_slot_reports_progress_only_while_it_works() {
        let home = tempfile::tempdir().unwrap();
        let slot = SemanticSlot::default();
        assert_eq!(slot.progress(), None);
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let enc: Arc<dyn Embedder> = Arc::new(LetterEncoder {
            calls: Default::default(),
        });
        let texts: Vec<String> = ["alpha", "beta"].map(String::from).to_vec();
        let first = slot.get_or_start(
            move || {
                // Held until the test has seen the work under way.
                let _ = gate.recv();
                Some(enc)
            },
            TroupeHome::at(home.path()),
            || (texts, Vec::new()),
        );
        assert!(first.is_none());
        assert_eq!(slot.progress(), Some((0, 2)));
        release.send(()).unwrap();
        assert!(slot.wait(Duration::from_secs(10)).is_some());
        assert_eq!(slot.progress(), None);
    }

    #[test]
    fn the_slot_fills_in_the_background() {
        let home = tempfile::tempdir().unwrap();
        let slot = SemanticSlot::default();
        let enc: Arc<dyn Embedder> = Arc::new(LetterEncoder {
            calls: Default::default(),
        });
        assert!(slot.ready().is_none());
        let loaded = Arc::clone(&enc);
        let first = slot.get_or_start(
            move || Some(loaded),
            TroupeHome::at(home.path()),
            || (vec!["abc".into(), "xyz".into()], vec![(1, "cab".into())]),
        );
        assert!(first.is_none(), "the first call never waits");
        let ready = slot.wait(Duration::from_secs(30)).expect("ready");
        let sims = ready
            .vectors
            .as_ref()
            .unwrap()
            .similarities(&enc.embed(&["cab".into()]).unwrap()[0]);
        assert!(sims[0] > 0.99 && sims[1] < 0.01, "{sims:?}");
        // The phrasing was embedded with the tools and belongs to the second.
        assert!(ready.phrasings.is_some(), "{ready:?}");
        // Without an encoder the slot says so, and a wait returns at once instead of timing out.
        let empty = SemanticSlot::default();
        assert!(
            empty
                .get_or_start(|| None, TroupeHome::at(home.path()), Default::default)
                .is_none()
        );
        let waited = std::time::Instant::now();
        assert!(empty.wait(Duration::from_secs(60)).is_none());
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "no encoder, no wait"
        );
    }

    /// The bundled encoder itself, end to end: it loads offline, gives unit vectors of its
    /// stated size, and places a paraphrase nearer than an unrelated sentence.
    #[cfg(feature = "semantic")]
    #[test]
    fn smoke_the_bundled_encoder() {
        let encoder = default_embedder().expect("the bundled encoder loads");
        assert!(
            encoder.model_id().to_lowercase().contains("minilm"),
            "{}",
            encoder.model_id()
        );
        let texts: Vec<String> = [
            "github: delete issue. Delete an issue from a repository.",
            "remove a ticket from the repo",
            "what will the weather be tomorrow",
        ]
        .map(String::from)
        .to_vec();
        let v = encoder.embed(&texts).expect("encodes");
        assert_eq!(v.len(), 3);
        for row in &v {
            assert_eq!(row.len(), encoder.dimensions());
            let norm: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3, "unit length, got {norm}");
        }
        let tools = ToolVectors::new(encoder.dimensions(), vec![v[0].clone()]).unwrap();
        let paraphrase = tools.similarities(&v[1])[0];
        let unrelated = tools.similarities(&v[2])[0];
        assert!(
            paraphrase > unrelated + 0.2,
            "paraphrase {paraphrase}, unrelated {unrelated}"
        );
    }
}
