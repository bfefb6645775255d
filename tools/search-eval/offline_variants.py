#!/usr/bin/env python3
"""Scores variants of the hybrid ranking and of the "nothing fits" evidence offline, from what
the retrieval example writes, so an idea is measured on the tuning part and the dev set in
seconds before any Rust is written (figures in docs/benchmarks.md, "Tool search on our
own set: what else was tried").

    E=target/debug/examples/retrieval_eval
    $E tools/search-eval/validation --queries queries_tune.json \\
        --dump /tmp/tune_dump.json --features /tmp/tune_feat.jsonl
    $E tools/search-eval/validation --queries queries_tune.json --vecs /tmp/tune_vecs.json
    $E tools/search-eval/dev --dump /tmp/dev_dump.json --features /tmp/dev_feat.jsonl
    $E tools/search-eval/dev --vecs /tmp/dev_vecs.json
    python3 tools/search-eval/offline_variants.py /tmp/tune /tmp/dev

Each argument is a prefix: PREFIX_dump.json (lexical hits and similarities per query),
PREFIX_vecs.json (tool, tool-head and query vectors) and PREFIX_feat.jsonl (the decision's
evidence). Ranking variants print recall@5 (natural, synonym) per set; evidence variants add a
feature to the fitted decision and print fit_decision.py's 5-fold estimate. The fusion below
replays the Rust one (reciprocal rank fusion, k = 10, 40 candidates a leg; exact names aside):
its "rrf" line must match the example's ranking, or the dump is stale.

Plain Python, no numpy: a few seconds per variant.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_decision  # noqa: E402

RRF_K = 10
DEPTH = 40


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def mean_sd(xs):
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)) or 1.0


def load(prefix):
    d = json.load(open(f"{prefix}_dump.json"))
    v = json.load(open(f"{prefix}_vecs.json"))
    d["vecs"] = v
    for i, q in enumerate(d["queries"]):
        qv = v["queries"][i]
        q["qv"] = qv
        q["sims_head"] = [dot(qv, h) for h in v["head"]]
    return d


def rrf_scores(q, n, sims, k=RRF_K):
    f = {}
    for i, (doc, _score, _cov) in enumerate(q["lexical"][:DEPTH]):
        f[doc] = f.get(doc, 0.0) + 1.0 / (k + i + 1)
    for i, doc in enumerate(sorted(range(n), key=lambda t: -sims[t])[:DEPTH]):
        f[doc] = f.get(doc, 0.0) + 1.0 / (k + i + 1)
    return f


def ordered(f):
    return sorted(f, key=lambda t: (-f[t], t))


def rrf(q, n, sims=None):
    return ordered(rrf_scores(q, n, q["sims"] if sims is None else sims))


def tie_break(q, n, a, sims=None):
    """RRF plus `a` × (similarity in standard deviations under the best + 3 × BM25F as a share
    of the best hit's): each leg's own scale breaking near-ties of ranks."""
    sims = q["sims"] if sims is None else sims
    f = rrf_scores(q, n, sims)
    m, sd = mean_sd(sims)
    top = max(sims)
    lex = {d: s for d, s, _ in q["lexical"]}
    best = max(lex.values()) if lex else 1.0
    return ordered({t: f[t] + a * ((sims[t] - top) / sd + 3 * lex.get(t, 0.0) / best) for t in f})


def score_fusion(q, n, w_sem=1.0):
    """No ranks: 4 × BM25F as a share of the best + w_sem × similarity in standard deviations."""
    sims = q["sims"]
    m, sd = mean_sd(sims)
    lex = {d: s for d, s, _ in q["lexical"]}
    best = max(lex.values()) if lex else 1.0
    return ordered({t: 4 * lex.get(t, 0.0) / best + w_sem * (sims[t] - m) / sd for t in range(n)})


def rocchio(q, n, vecs, m, beta):
    """The semantic leg again with the query moved towards its first m fused tools."""
    top = rrf(q, n)[:m]
    centre = [sum(vecs[t][j] for t in top) / m for j in range(len(q["qv"]))]
    moved = [a + beta * b for a, b in zip(q["qv"], centre)]
    norm = math.sqrt(dot(moved, moved))
    return rrf(q, n, [dot(moved, t) / norm for t in vecs])


def recall(d, ranker):
    tools = d["tools"]
    n = len(tools)
    by = {}
    for q in d["queries"]:
        if not q["expected"]:
            continue
        r = ranker(q, n)
        pos = next((i for i, t in enumerate(r) if tools[t] in q["expected"]), None)
        s = by.setdefault(q["style"], [0, 0, 0.0])
        s[0] += pos is not None and pos < 5
        s[1] += 1
        s[2] += 1.0 / (pos + 1) if pos is not None else 0.0
    total = sum(s[1] for s in by.values())
    r5 = sum(s[0] for s in by.values()) / total
    mrr = sum(s[2] for s in by.values()) / total
    style = lambda k: by[k][0] / by[k][1] if k in by else float("nan")
    return f"r@5 {r5:.3f} MRR {mrr:.3f} (natural {style('natural'):.3f}, synonym {style('synonym'):.3f})"


def ranking_variants(sets):
    maxed = lambda q: [max(a, b) for a, b in zip(q["sims"], q["sims_head"])]
    mean = lambda q: [(a + b) / 2 for a, b in zip(q["sims"], q["sims_head"])]
    sem_only = lambda key: lambda q, n: sorted(range(n), key=lambda t: -key(q)[t])
    variants = [
        ("rrf (as shipped)", lambda d: lambda q, n: rrf(q, n)),
        ("semantic leg alone, whole text", lambda d: sem_only(lambda q: q["sims"])),
        ("semantic leg alone, head", lambda d: sem_only(lambda q: q["sims_head"])),
        ("semantic leg alone, max(whole, head)", lambda d: sem_only(maxed)),
        ("rrf, semantic max(whole, head)", lambda d: lambda q, n: rrf(q, n, maxed(q))),
        ("rrf, semantic mean(whole, head)", lambda d: lambda q, n: rrf(q, n, mean(q))),
        ("rrf + Rocchio (3 tools, beta 0.3)", lambda d: lambda q, n: rocchio(q, n, d["vecs"]["full"], 3, 0.3)),
        ("rrf + Rocchio (1 tool, beta 0.5)", lambda d: lambda q, n: rocchio(q, n, d["vecs"]["full"], 1, 0.5)),
        ("score fusion", lambda d: lambda q, n: score_fusion(q, n)),
    ] + [
        (f"rrf + tie-break {a}", (lambda a: lambda d: lambda q, n: tie_break(q, n, a))(a))
        for a in (0.01, 0.02, 0.04, 0.08)
    ]
    for name, make in variants:
        print(f"{name:38}", " | ".join(recall(d, make(d)) for d in sets))


def extra_evidence(d, feat_path):
    """The decision's rows from `feat_path`, each with candidate features added."""
    n = len(d["tools"])
    rows = [json.loads(line) for line in open(feat_path) if line.strip()]
    for q, r in zip(d["queries"], rows):
        if q["query"] != r["query"] or r["evidence"] is None:
            continue
        e = r["evidence"]
        fused = rrf(q, n)
        cov = {doc: c for doc, _, c in q["lexical"]}
        sims = q["sims"]
        e["top_cover"] = cov.get(fused[0], 0.0)
        e["top5_cover"] = max(cov.get(t, 0.0) for t in fused[:5])
        sem5 = sorted(range(n), key=lambda t: -sims[t])[:5]
        e["overlap"] = len({h[0] for h in q["lexical"][:5]} & set(sem5)) / 5
        m, sd = mean_sd(q["sims_head"])
        e["head_margin"] = (max(q["sims_head"]) - m) / sd
        ms, sds = mean_sd(sims)
        e["fused_margin"] = (sims[fused[0]] - ms) / sds
        idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))
        total = sum(idf(df) for _, df in q["typed"]) or 1.0
        e["known_idf_mass"] = sum(idf(df) for _, df in q["typed"] if df > 0) / total
        e["rare_df"] = min((df for _, df in q["typed"] if df > 0), default=n) / n
    return rows


def evidence_variants(sets, prefixes, max_silent):
    paths = []
    for d, prefix in zip(sets, prefixes):
        path = f"{prefix}_feat_extra.jsonl"
        with open(path, "w") as out:
            for r in extra_evidence(d, f"{prefix}_feat.jsonl"):
                out.write(json.dumps(r) + "\n")
        paths.append(path)
    base = list(fit_decision.FEATURES)
    for extra in ["", "top_cover", "top5_cover", "overlap", "head_margin", "fused_margin",
                  "known_idf_mass", "rare_df"]:
        fit_decision.FEATURES[:] = base + ([extra] if extra else [])
        argv = ["fit_decision.py", *paths, "--max-silent", str(max_silent)]
        saved, sys.argv = sys.argv, argv
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            fit_decision.main()
        sys.argv = saved
        fold = next(line for line in buf.getvalue().splitlines() if "fold" in line)
        print(f"  + {extra or '(none)':15} {fold}")
    fit_decision.FEATURES[:] = base


def main():
    prefixes = sys.argv[1:]
    if not prefixes:
        sys.exit(__doc__)
    sets = [load(p) for p in prefixes]
    print("ranking (recall@5 of answerable queries, decision aside):", ", ".join(prefixes))
    ranking_variants(sets)
    for max_silent in (0.0, 0.03):
        rule = "cost ratio 5" if max_silent == 0 else f"at most {max_silent:.0%} silenced"
        print(f"evidence (threshold by {rule}):")
        evidence_variants(sets, prefixes, max_silent)


if __name__ == "__main__":
    main()
