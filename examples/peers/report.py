"""Prints the side-by-side bench's results (JSON lines from run.sh) as a table of medians, with
each peer's figure as a multiple of troupe's."""

import json
import statistics
import sys

ROWS = [
    ("fan_out", "one turn, 8 calls of a 200 ms async tool (wall)", "wall_s", "s"),
    ("long_conversation", "200 turns in one conversation (per turn)", "per_unit_ms", "ms"),
    ("many_conversations", "200 one-turn conversations (per turn)", "per_unit_ms", "ms"),
    ("concurrent", "100 concurrent sessions (wall)", "wall_s", "s"),
]
FRAMEWORKS = ["troupe", "agents_sdk", "langgraph"]


def main():
    results = {}
    with open(sys.argv[1]) as lines:
        for line in lines:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                results.setdefault((row["framework"], row["workload"]), []).append(row)
    print("| workload | troupe | Agents SDK | LangGraph |")
    print("| --- | --- | --- | --- |")
    for workload, label, key, unit in ROWS:
        cells = []
        base = None
        for framework in FRAMEWORKS:
            runs = results.get((framework, workload), [])
            if not runs:
                cells.append("n/a")
                continue
            values = [r[key] for r in runs]
            median = statistics.median(values)
            spread = f"{min(values):.3g}–{max(values):.3g}" if len(values) > 1 else f"{median:.3g}"
            if framework == "troupe":
                base = median
                cells.append(f"**{median:.3g} {unit}** ({spread})")
            else:
                ratio = f", {median / base:.1f}× troupe" if base else ""
                cells.append(f"{median:.3g} {unit} ({spread}{ratio})")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
