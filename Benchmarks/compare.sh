#!/usr/bin/env bash
# Runs every benchmark in one process and prints one Markdown table: for each scenario (rows) and
# system (columns), the median (p50) wall-clock nanoseconds and mallocs per unit of work, then how
# many times faster Future is than each peer (below 1× means Future is slower).
#
#   ./compare.sh                     # all benchmarks, release build
#   BENCHMARK_SMOKE=1 ./compare.sh   # each benchmark once: checks they run, not what they cost
set -euo pipefail
cd "$(dirname "$0")"
raw=.build/benchmark-output.txt
mkdir -p .build
swift package benchmark --no-progress >"$raw" 2>&1 || { cat "$raw"; exit 1; }
python3 - "$raw" <<'PY'
import re, sys

units = {  # scenario: (units of work in one iteration, what a unit is)
    "chain build+run": (1_000, "link"),
    "chain run": (1_000, "link"),
    "chain build": (1_000, "link"),
    "awaited chain": (1_000, "link"),
    "promise steps": (1_000, "step"),
    "fan-out": (10_000, "element"),
    "recursive loop": (100_000, "step"),
    "error at first": (1_000, "link"),
    "async work": (1_000, "run"),
}
# Scenarios that only some systems take part in.
only = {"awaited chain": ("Future", "async/await"), "async work": ("Future", "async/await")}
systems = ["Future", "Callbacks", "Seed 004", "OpenCombine", "async/await"]
scale = {"K": 1e3, "M": 1e6, "G": 1e9, "ns": 1, "us": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9}

results, name = {}, None
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    line = line.rstrip("\n")
    if " | " in line and not line.startswith(("│", "╒", "╞", "├", "╘")):
        name = tuple(part.strip() for part in line.split(" | ", 1))
        continue
    if name and line.startswith("│") and ("Malloc (total)" in line or "Time (wall clock)" in line):
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        label, p50 = cells[0], float(cells[3])
        factor = 1.0
        for token in re.findall(r"\(([^)]*)\)", label):
            factor *= scale.get(token, 1)
        metric = "mallocs" if label.startswith("Malloc") else "ns"
        results.setdefault(name, {})[metric] = p50 * factor

def cell(scenario, system):
    if system == "Future" and scenario == "fan-out":
        return "pending (no combinator yet)"
    if (system in ("Callbacks", "async/await")) and scenario == "chain build":
        return "nothing to build"
    if scenario in only and system not in only[scenario]:
        return "—"
    found = results.get((scenario, system))
    if not found or "ns" not in found:
        return "—"
    count = units[scenario][0]
    ns = found["ns"] / count
    return f"{ns:,.{1 if ns < 100 else 0}f} ns · {found.get('mallocs', 0) / count:.2f} mallocs"

def ratio(scenario, peer):
    mine, theirs = results.get((scenario, "Future")), results.get((scenario, peer))
    if not mine or not theirs or "ns" not in mine or "ns" not in theirs:
        return "—"
    value = theirs["ns"] / mine["ns"]
    return f"{value:.2f}×" + ("" if value >= 1 else " (slower)")

peers = systems[1:]
print("| scenario (per unit) | " + " | ".join(systems) + " | " + " | ".join(f"Future vs {p}" for p in peers) + " |")
print("|---" * (1 + len(systems) + len(peers)) + "|")
for scenario, (count, unit) in units.items():
    row = [f"{scenario} (per {unit}, {count:,} per run)"]
    row += [cell(scenario, system) for system in systems]
    row += [ratio(scenario, peer) for peer in peers]
    print("| " + " | ".join(row) + " |")
missing = [f"{s} | {y}" for s in units for y in systems if (s, y) not in results
           and not (y == "Future" and s == "fan-out")
           and not (y in ("Callbacks", "async/await") and s == "chain build")
           and not (s in only and y not in only[s])]
if missing:
    sys.exit("no result for: " + ", ".join(missing))
PY
