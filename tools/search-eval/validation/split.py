#!/usr/bin/env python3
"""Checks the validation set and (once, before any tuning) split it.

    python3 split.py check                  # every expected name is in catalog.json, no query twice
    python3 split.py split ALL.json         # write queries_tune.json and queries_heldout.json

The split is deterministic and stratified by style: within each style the queries are ordered by
the SHA-256 of their text (lower-cased, stripped), and the first round(0.4 * n) go to the tuning
part, the rest to the held-out part. Re-running it on the same queries gives the same parts; it
was run once, when the set was written, and is kept to show how. Do not re-split after tuning.
"""
import collections
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STYLES = ["keyword", "natural", "synonym", "camel", "cross", "absent"]


def key(q):
    return hashlib.sha256(q["query"].strip().lower().encode()).hexdigest()


def check(queries):
    names = {t["function"]["name"] for t in json.load(open(os.path.join(HERE, "catalog.json")))}
    bad, seen = 0, set()
    for q in queries:
        text = q["query"].strip().lower()
        if text in seen:
            print(f"twice: {q['query']!r}")
            bad += 1
        seen.add(text)
        if q["style"] not in STYLES:
            print(f"unknown style {q['style']!r}: {q['query']!r}")
            bad += 1
        if (q["style"] == "absent") != (not q["expected"]):
            print(f"absent iff expected is empty: {q['query']!r}")
            bad += 1
        for n in q["expected"]:
            if n not in names:
                print(f"not in catalog: {n} ({q['query']!r})")
                bad += 1
    return bad


def table(parts):
    print(f"{'style':10}" + "".join(f"{p:>9}" for p in parts))
    for s in STYLES + ["all"]:
        row = [sum(1 for q in qs if s in ("all", q["style"])) for qs in parts.values()]
        print(f"{s:10}" + "".join(f"{n:9}" for n in row))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "check"
    if cmd == "split":
        queries = json.load(open(sys.argv[2]))
        tune, held = [], []
        for s in STYLES:
            qs = sorted((q for q in queries if q["style"] == s), key=key)
            cut = round(0.4 * len(qs))
            tune += qs[:cut]
            held += qs[cut:]
        for name, part in (("queries_tune.json", tune), ("queries_heldout.json", held)):
            with open(os.path.join(HERE, name), "w") as f:
                json.dump(part, f, indent=1, ensure_ascii=False)
                f.write("\n")
    parts = {n: json.load(open(os.path.join(HERE, f"queries_{n}.json"))) for n in ("tune", "heldout")}
    bad = check(parts["tune"] + parts["heldout"])
    table(parts)
    print("ok" if not bad else f"{bad} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
