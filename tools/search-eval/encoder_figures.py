#!/usr/bin/env python3
"""The figures that compare two encoders for tool search's semantic leg beyond the whole search
(docs/benchmarks.md, "all-MiniLM-L6-v2 for the semantic leg"): the semantic leg alone,
the hybrid ranking with the decision aside, and how well the semantic margin tells answerable
from absent queries.

Each argument is a prefix: PREFIX_dump.json and PREFIX_feat.jsonl, written by one run of the
retrieval example (with `--vectors FILE` for an encoder troupe does not bundle):

    E=target/debug/examples/retrieval_eval
    $E tools/search-eval/validation --queries queries_tune.json --vectors /tmp/val.f32.json \\
        --dump /tmp/l6_tune_dump.json --features /tmp/l6_tune_feat.jsonl
    python3 tools/search-eval/encoder_figures.py /tmp/l6_tune

Prints per prefix: recall@5 of the semantic leg alone (tools ordered by cosine similarity;
overall, natural, synonym), recall@5 of the hybrid ranking whatever the decision says (the
ranking's own rank of the first right tool), and the AUC of the semantic margin between
answerable and absent queries over the queries that have evidence (the probability that an
answerable query's margin is above an absent one's; ties count half). Plain Python.
"""

import json
import sys


def semantic_alone(dump):
    tools = dump["tools"]
    by = {}
    for q in dump["queries"]:
        if not q["expected"]:
            continue
        order = sorted(range(len(tools)), key=lambda t: -q["sims"][t])[:5]
        hit = any(tools[t] in q["expected"] for t in order)
        s = by.setdefault(q["style"], [0, 0])
        s[0] += hit
        s[1] += 1
    return by


def hybrid_ranking(rows):
    by = {}
    for q in rows:
        if not q["label"]:
            continue
        s = by.setdefault(q["style"], [0, 0])
        s[0] += q["rank"] is not None and q["rank"] < 5
        s[1] += 1
    return by


def auc(rows):
    pos = [q["evidence"]["margin"] for q in rows if q["evidence"] is not None and q["label"]]
    neg = [q["evidence"]["margin"] for q in rows if q["evidence"] is not None and not q["label"]]
    if not pos or not neg:
        return float("nan"), len(pos), len(neg)
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg)), len(pos), len(neg)


def line(by):
    hit = sum(s[0] for s in by.values())
    n = sum(s[1] for s in by.values())
    style = lambda k: by[k][0] / by[k][1] if k in by else float("nan")
    return f"{hit / n:.3f} (natural {style('natural'):.3f}, synonym {style('synonym'):.3f})"


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: encoder_figures.py PREFIX... (PREFIX_dump.json, PREFIX_feat.jsonl)")
    for prefix in sys.argv[1:]:
        with open(f"{prefix}_dump.json") as f:
            dump = json.load(f)
        with open(f"{prefix}_feat.jsonl") as f:
            rows = [json.loads(l) for l in f if l.strip()]
        a, npos, nneg = auc(rows)
        print(f"{prefix}:")
        print(f"  semantic leg alone, recall@5 {line(semantic_alone(dump))}")
        print(f"  hybrid ranking, decision aside, recall@5 {line(hybrid_ranking(rows))}")
        print(f"  margin AUC answerable vs absent {a:.3f} ({npos} answerable, {nneg} absent)")


if __name__ == "__main__":
    main()
