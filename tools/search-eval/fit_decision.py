#!/usr/bin/env python3
"""Fits the "nothing fits" decision of tool search (tools/src/search/decision.rs) on labelled
queries: an L2-regularised, class-balanced logistic regression on each query's evidence, and the
threshold on its log-odds that best separates answerable from absent queries on the same rows.

Input: JSON-lines files written by the retrieval example's `--features FILE` (one per labelled
query set; each line holds the query's evidence and whether some tool answers it). Only the
tuning data goes in: the validation set's `queries_tune.json` and the dev set. The held-out part
is scored afterwards, never fitted on.

    cargo run -p troupe-tools --example retrieval_eval -- tools/search-eval/validation \\
        --queries queries_tune.json --features /tmp/tune.jsonl --no-phrasings
    cargo run -p troupe-tools --example retrieval_eval -- tools/search-eval/dev \\
        --features /tmp/dev.jsonl --no-phrasings
    python3 tools/search-eval/fit_decision.py /tmp/tune.jsonl /tmp/dev.jsonl

Prints the fit (coefficients per standard deviation of each feature, so their sizes compare), a
k-fold estimate of how it carries over, and the `FITTED` constant to paste into decision.rs.
Without `--no-phrasings` the example ranks with each set's phrasings.json, and the fit is the
one to paste over `FITTED_PHRASED`. `--separation` adds how far any threshold could go on the
same evidence (docs/benchmarks.md, "What the evidence can tell apart").
Plain Python: no numpy needed.
"""

import argparse
import json
import math
import random

FEATURES = ["support", "margin", "similarity", "gap", "agreement", "unknown", "length", "service",
            "unoffered"]


def load(paths):
    """The rows the score decides, and the counts of rows a rule decided: (answerable, absent)."""
    rows = []
    ruled = [0, 0]
    ruled_n = [0, 0]
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                q = json.loads(line)
                # Exact names and queries that name only absent services are decided by rules
                # before the fitted score; without a semantic margin there is no score at all.
                if q["ruled"] or q["evidence"] is None:
                    # A rule silences (absent services) or answers (exact names); either way the
                    # score does not move it, but it counts in the rates the threshold weighs.
                    ruled[int(q["label"])] += q["fits"] != bool(q["label"])
                    ruled_n[int(q["label"])] += 1
                    continue
                rows.append(([float(q["evidence"][k]) for k in FEATURES], int(q["label"]), q))
    return rows, ruled, ruled_n


def solve(a, b):
    """Solves a x = b by Gaussian elimination with partial pivoting (a is small and dense)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-12:
            raise ValueError("singular system: a feature is constant or duplicated")
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def standardise(xs):
    d = len(xs[0])
    mean = [sum(x[j] for x in xs) / len(xs) for j in range(d)]
    sd = [math.sqrt(sum((x[j] - mean[j]) ** 2 for x in xs) / len(xs)) or 1.0 for j in range(d)]
    return mean, sd


def fit(xs, ys, l2):
    """Newton's method on the class-balanced, L2-penalised log loss (the intercept unpenalised);
    xs are standardised. Returns [intercept, w1..wd]."""
    n_pos = sum(ys)
    n_neg = len(ys) - n_pos
    weight = {1: len(ys) / (2.0 * n_pos), 0: len(ys) / (2.0 * n_neg)}
    d = len(xs[0]) + 1
    w = [0.0] * d
    for _ in range(50):
        grad = [0.0] * d
        hess = [[0.0] * d for _ in range(d)]
        for x, y in zip(xs, ys):
            z = [1.0] + x
            p = sigmoid(sum(wi * zi for wi, zi in zip(w, z)))
            c = weight[y]
            for i in range(d):
                grad[i] += c * (p - y) * z[i]
                for j in range(d):
                    hess[i][j] += c * p * (1 - p) * z[i] * z[j]
        for i in range(1, d):
            grad[i] += l2 * w[i]
            hess[i][i] += l2
        step = solve(hess, grad)
        w = [wi - si for wi, si in zip(w, step)]
        if max(abs(s) for s in step) < 1e-9:
            break
    return w


def logits(w, xs):
    return [w[0] + sum(wi * xi for wi, xi in zip(w[1:], x)) for x in xs]


def cost(zs, ys, t, silence_cost, ruled, ruled_n):
    """The rates the issue sets targets for, weighed: `silence_cost` × (share of answerable
    queries answered with nothing) + (share of absent queries answered). Queries a rule decided
    count in both shares with their fixed outcome."""
    silenced = sum(z < t for z, y in zip(zs, ys) if y == 1) + ruled[1]
    answered = sum(z >= t for z, y in zip(zs, ys) if y == 0) + ruled[0]
    n_pos = sum(ys) + ruled_n[1]
    n_neg = len(ys) - sum(ys) + ruled_n[0]
    return silence_cost * silenced / n_pos + answered / n_neg


def best_threshold(zs, ys, silence_cost, ruled=(0, 0), ruled_n=(0, 0)):
    """The log-odds threshold of least cost; among ties, the one nearest 0 (the balanced fit's
    own boundary). Candidates lie midway between neighbouring scores."""
    s = sorted(set(zs))
    candidates = [0.0] + [(a + b) / 2 for a, b in zip(s, s[1:])] + [s[0] - 1e-3, s[-1] + 1e-3]
    return min(
        candidates,
        key=lambda t: (round(cost(zs, ys, t, silence_cost, ruled, ruled_n), 9), abs(t)),
    )


def capped_threshold(zs, ys, max_silent, ruled=(0, 0), ruled_n=(0, 0)):
    """The highest log-odds threshold at which the share of answerable queries answered with
    nothing stays within `max_silent`: absent precision made as high as it can be under the
    issue's own bound on wrong silences. Unlike a cost ratio, whose minimum can jump between two
    distant thresholds when one query moves, this moves by one query at a time. Queries a rule
    decided count with their fixed outcome."""
    n_pos = sum(ys) + ruled_n[1]
    s = sorted(set(zs))
    candidates = [s[0] - 1e-3] + [(a + b) / 2 for a, b in zip(s, s[1:])]
    best = candidates[0]
    for t in candidates:
        silenced = sum(z < t for z, y in zip(zs, ys) if y == 1) + ruled[1]
        if silenced / n_pos <= max_silent:
            best = t
    return best


def choose_threshold(zs, ys, args, ruled=(0, 0), ruled_n=(0, 0)):
    if args.max_silent > 0:
        return capped_threshold(zs, ys, args.max_silent, ruled, ruled_n)
    return best_threshold(zs, ys, args.silence_cost, ruled, ruled_n)


def folds_of(ys, folds, seed):
    """Each row's fold, stratified by label, from a fixed seed."""
    rng = random.Random(seed)
    fold_of = [0] * len(ys)
    for label in (0, 1):
        rows = [i for i, y in enumerate(ys) if y == label]
        rng.shuffle(rows)
        for k, i in enumerate(rows):
            fold_of[i] = k % folds
    return fold_of


def out_of_fold(xs, ys, folds, l2, seed):
    """Each row's log-odds from a fit on the other folds."""
    fold_of = folds_of(ys, folds, seed)
    zs = [0.0] * len(ys)
    for k in range(folds):
        train = [i for i in range(len(ys)) if fold_of[i] != k]
        test = [i for i in range(len(ys)) if fold_of[i] == k]
        m_, s_ = standardise([xs[i] for i in train])
        st = lambda x: [(v - m) / s for v, m, s in zip(x, m_, s_)]
        w = fit([st(xs[i]) for i in train], [ys[i] for i in train], l2)
        for i, z in zip(test, logits(w, [st(xs[i]) for i in test])):
            zs[i] = z
    return zs


def separation(xs, ys, ruled, ruled_n, folds, l2, seeds=5):
    """How well the evidence can tell the classes apart at all, whatever threshold is chosen:
    out-of-fold AUC, and for a bound on the answerable queries answered with nothing, the best
    absent precision any threshold reaches under it (rules included). Averaged over `seeds`
    fold assignments."""
    bounds = (0.03, 0.05, 0.10)
    sums = [0.0] * (1 + len(bounds))
    n_pos = sum(ys) + ruled_n[1]
    n_neg = len(ys) - sum(ys) + ruled_n[0]
    for seed in range(45, 45 + seeds):
        zs = out_of_fold(xs, ys, folds, l2, seed)
        pos = sorted(z for z, y in zip(zs, ys) if y == 1)
        neg = [z for z, y in zip(zs, ys) if y == 0]
        sums[0] += sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / len(pos) / len(neg)
        for j, bound in enumerate(bounds):
            # Silence the lowest answerable rows the bound allows; a threshold at the next one.
            allowed = int(bound * n_pos) - ruled[1]
            t = pos[max(0, min(allowed, len(pos) - 1))] if allowed >= 0 else float("-inf")
            answered = sum(z >= t for z in neg) + ruled[0]
            sums[1 + j] += 1 - answered / n_neg
    print(f"separation, out of fold over {seeds} fold draws: AUC {sums[0] / seeds:.3f}")
    for j, bound in enumerate(bounds):
        print(
            f"  at most {bound:.0%} of answerable queries answered with nothing: absent "
            f"precision at best {sums[1 + j] / seeds:.3f}"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("features", nargs="+", help="JSON-lines files from --features")
    ap.add_argument("--l2", type=float, default=1.0, help="penalty on standardised coefficients")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument(
        "--silence-cost",
        type=float,
        default=5.0,
        help="cost of answering an answerable query with nothing, relative to answering an "
        "absent one; 5 is the ratio of the issue's targets (at most 3 %% answerable queries "
        "answered with nothing, at most 15 %% absent ones answered)",
    )
    ap.add_argument(
        "--max-silent",
        type=float,
        default=0.0,
        help="choose the threshold as the highest log-odds at which at most this share of the "
        "answerable queries is answered with nothing (0.03 is the issue's target); 0, the "
        "default and what FITTED was made with, chooses it by --silence-cost instead",
    )
    ap.add_argument(
        "--score",
        nargs="+",
        default=[],
        metavar="FILE",
        help="after fitting, score these --features files with the fitted decision (recall@5 "
        "per style, answered with nothing, absent precision): how a refit would do on rankings "
        "it was not fitted on, such as the held-out part, without rebuilding",
    )
    ap.add_argument(
        "--separation",
        action="store_true",
        help="also print how far any threshold can go on this evidence: out-of-fold AUC and the "
        "best absent precision at 3, 5 and 10 %% of answerable queries answered with nothing",
    )
    ap.add_argument(
        "--without",
        nargs="+",
        default=[],
        choices=FEATURES,
        help="leave these features out of the fit (their coefficient stays 0)",
    )
    args = ap.parse_args()
    if args.without:
        FEATURES[:] = [f for f in FEATURES if f not in args.without]
    rows, ruled, ruled_n = load(args.features)
    xs = [r[0] for r in rows]
    ys = [r[1] for r in rows]
    print(
        f"{len(rows)} queries decided by the score: {sum(ys)} answerable, {len(ys) - sum(ys)} "
        f"absent; {ruled_n[1]} answerable and {ruled_n[0]} absent decided by a rule"
    )
    mean, sd = standardise(xs)
    std = lambda x: [(v - m) / s for v, m, s in zip(x, mean, sd)]

    # How the fit carries over: k folds, stratified by label, fixed seed.
    fold_of = folds_of(ys, args.folds, 45)
    answered_pos = silent_neg = 0
    for k in range(args.folds):
        train = [i for i in range(len(ys)) if fold_of[i] != k]
        test = [i for i in range(len(ys)) if fold_of[i] == k]
        m_, s_ = standardise([xs[i] for i in train])
        st = lambda x: [(v - m) / s for v, m, s in zip(x, m_, s_)]
        w = fit([st(xs[i]) for i in train], [ys[i] for i in train], args.l2)
        t = choose_threshold(
            logits(w, [st(xs[i]) for i in train]), [ys[i] for i in train], args
        )
        for i, z in zip(test, logits(w, [st(xs[i]) for i in test])):
            answered_pos += ys[i] == 1 and z >= t
            silent_neg += ys[i] == 0 and z < t
    print(
        f"{args.folds}-fold: answerable answered {answered_pos / sum(ys):.3f}, "
        f"absent silenced {silent_neg / (len(ys) - sum(ys)):.3f}"
    )

    w = fit([std(x) for x in xs], ys, args.l2)
    zs = logits(w, [std(x) for x in xs])
    t = choose_threshold(zs, ys, args, ruled, ruled_n)
    silenced = (sum(z < t for z, y in zip(zs, ys) if y) + ruled[1]) / (sum(ys) + ruled_n[1])
    answered = (sum(z >= t for z, y in zip(zs, ys) if not y) + ruled[0]) / (
        len(ys) - sum(ys) + ruled_n[0]
    )
    print(
        f"all queries, rules included: answerable answered with nothing {silenced:.3f}, "
        f"absent precision {1 - answered:.3f}"
    )
    print(
        f"scored rows: answerable answered {sum(z >= t for z, y in zip(zs, ys) if y) / sum(ys):.3f}, "
        f"absent silenced {sum(z < t for z, y in zip(zs, ys) if not y) / (len(ys) - sum(ys)):.3f}"
    )
    print("per standard deviation of each feature:")
    for name, wi, s in zip(FEATURES, w[1:], sd):
        print(f"  {name:11} {wi:+.3f}  (sd {s:.3f})")
    # Back to the features' own units for the Rust constant.
    raw = [wi / s for wi, s in zip(w[1:], sd)]
    bias = w[0] - sum(wi * m / s for wi, m, s in zip(w[1:], mean, sd))
    print("\npub const FITTED: Coefficients = Coefficients {")
    print(f"    bias: {bias:.4f},")
    for name, r in zip(FEATURES, raw):
        print(f"    {name}: {r:.4f},")
    print(f"    threshold: {t:.4f},")
    print("};")
    for path in args.score:
        score(path, bias, dict(zip(FEATURES, raw)), t)
    if args.separation:
        separation(xs, ys, ruled, ruled_n, args.folds, args.l2)


def score(path, bias, coefficients, t):
    """Prints the figures of `path` (a --features file) under the given decision."""
    by_style = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            q = json.loads(line)
            if q["ruled"] or q["evidence"] is None:
                answered = q["fits"]
            else:
                z = bias + sum(c * float(q["evidence"][k]) for k, c in coefficients.items())
                answered = z >= t
            s = by_style.setdefault(q["style"], [0, 0, 0])
            s[0] += 1
            if q["label"]:
                s[1] += answered and q["rank"] is not None and q["rank"] < 5
                s[2] += not answered
            else:
                s[1] += not answered
    print(f"\n{path}:")
    hit = n = 0
    for style, (count, good, empty) in sorted(by_style.items()):
        if style == "absent":
            print(f"  {style:8} {count:4}  absent precision {good / count:.3f}")
        else:
            print(f"  {style:8} {count:4}  recall@5 {good / count:.3f}  empty {empty / count:.3f}")
            hit += good
            n += count
    print(f"  overall recall@5 {hit / max(n, 1):.3f}")


if __name__ == "__main__":
    main()
