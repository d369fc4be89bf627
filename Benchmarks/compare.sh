#!/usr/bin/env bash
# Runs every benchmark and prints, from that one run: the time and mallocs per unit of work for
# each scenario (rows) and system (columns); Future's ratio to each peer; and the scaling series
# (cost per link against a chain's length). It writes the figures to .build/compare.json too,
# for plot.py.
#
# Times and ratios come from the Ratios executable (Sources/Ratios/main.swift), which runs an
# iteration of Future's scenario and one of the peer's back to back, in pairs: a shared machine's
# speed drifts between benchmarks run a minute apart, much less within a pair. Each process goes
# round every scenario 20 times, building them anew each round, because where a build lands in
# memory makes some chains run at one of two speeds; a round's ratio is the median of its pairs.
# A figure is the geometric mean over every round of every process (5 processes: 100 rounds),
# printed with the range of the processes' means. Mallocs come from one run of package-benchmark
# (they do not vary), whose malloc interposer would slow the timings.
#
#   ./compare.sh                     # 5 processes of 20 rounds (about 10 minutes)
#   ./compare.sh --save              # also keeps the figures in results/, dated, for the README
#   PROCESSES=10 ./compare.sh        # more rounds, steadier figures
#   BENCHMARK_SMOKE=1 ./compare.sh   # everything once: proves it runs, says nothing of cost
#
# Last, it prints the bytes each pending run holds (Sources/PendingRuns: 100,000 runs parked on
# their operation against 100,000 parked Tasks, heap in use and resident set before and after).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p .build
rounds=${PROCESSES:-5}
[ -n "${BENCHMARK_SMOKE:-}" ] && rounds=1
BENCHMARK_MILLISECONDS=${BENCHMARK_MILLISECONDS:-50} swift package benchmark --no-progress \
    >.build/benchmark.txt 2>&1 || { cat .build/benchmark.txt; exit 1; }
for product in Ratios PendingRuns; do
    swift build -c release --product "$product" >.build/ratios-build.txt 2>&1 ||
        { cat .build/ratios-build.txt; exit 1; }
done
rm -f .build/ratios-*.txt
for process in $(seq "$rounds"); do
    ROUNDS=20 RATIO_MILLISECONDS=400 .build/release/Ratios >".build/ratios-$process.txt"
done
python3 - "$rounds" "${1:-}" <<'PY'
import datetime, json, re, shutil, statistics, sys

rounds, save = int(sys.argv[1]), sys.argv[2] == "--save"
# scenario: (units of work in one iteration, what a unit is)
units = {
    "chain build+run": (10_000, "link"), "chain run": (10_000, "link"),
    "chain build": (10_000, "link"), "awaited chain": (10_000, "link"),
    "promise steps": (1_000, "step"), "fan-out": (10_000, "element"),
    "fan-out on a queue": (10_000, "element"), "fan-out 4 at once": (10_000, "element"),
    "recursive loop": (100_000, "step"), "error at first": (1_000, "link"),
    "async work": (1_000, "run"), "after zero": (1_000, "run"),
}
# A timeout with no clock and on each standard clock, on work that settles at once or waits.
timeouts = [f"{work}{clock}" for work in ("timeout unfired", "timeout, work waits")
            for clock in ("", ", ContinuousClock", ", SuspendingClock")]
units |= {scenario: (1_000, "run") for scenario in timeouts}
systems = ["Future", "Future, building alone", "Callbacks", "Seed 004", "OpenCombine",
           "OpenCombine erased", "async/await", "async nonsending", "Dispatch"]
# No ratio to these: the optimizer inlines callbacks away, and building is a part of Future's work.
floors = {"Callbacks", "Future, building alone"}
main_rows = [("chain build+run", 1000), ("chain run", 1000), ("chain build", 1000),
             ("awaited chain", 1000), ("promise steps", 1000), ("fan-out", 10000),
             ("fan-out on a queue", 10000), ("fan-out 4 at once", 10000),
             ("recursive loop", 100000), ("error at first", 1000), ("async work", 1000),
             *((scenario, 1000) for scenario in timeouts), ("after zero", 1000)]
series = [("chain build+run", [10, 100, 1000]), ("chain run", [10, 100, 1000]),
          ("recursive loop", [1000, 100000])]

def key_of(name):
    match = re.match(r"^(.+?) ×(\d+) \| (.+)$", name)
    return (match[1], int(match[2]), match[3]) if match else None

# Mallocs per unit: package-benchmark's p50 of "Malloc (total)".
mallocs, name = {}, None
scale = {"K": 1e3, "M": 1e6, "G": 1e9}
for line in open(".build/benchmark.txt", encoding="utf-8", errors="replace"):
    line = line.rstrip("\n")
    name = key_of(line) or name
    if name and line.startswith("│") and "Malloc (total)" in line:
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        factor = 1.0
        for token in re.findall(r"\(([^)]*)\)", cells[0]):
            factor *= scale.get(token, 1)
        mallocs[name] = float(cells[3]) * factor / units[name[0]][0]

# From each process: each pair's median ratio, and the median times of both halves.
ratios, times, pairs = {}, {}, {}
for process in range(1, rounds + 1):
    future_times = {}
    for line in open(f".build/ratios-{process}.txt", encoding="utf-8"):
        name, ratio, count, peer_ns, future_ns = line.rstrip("\n").split("\t")[:5]
        key = key_of(name)
        ratios.setdefault(key, []).append(float(ratio))
        pairs[key] = pairs.get(key, 0) + int(count)
        times.setdefault(key, []).append(float(peer_ns) / units[key[0]][0])
        future_times.setdefault((key[0], key[1], "Future"), []).append(
            float(future_ns) / units[key[0]][0])
    for key, values in future_times.items():  # Future's time: the median over its pairings
        times.setdefault(key, []).append(statistics.median(values))

def figure(values):
    return statistics.geometric_mean(values), min(values), max(values)

results = {key: {"ns": figure(values)[0], "mallocs": mallocs.get(key, 0.0)}
           for key, values in times.items()}

def number(ns):
    return f"{ns:,.{1 if ns < 100 else 0}f}"

def ratio_text(value):
    return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2 if value >= 0.1 else 3}f}"

def ratio_cell(scenario, length, peer):
    key = (scenario, length, peer)
    if key not in ratios or peer in floors:
        return "—"
    value, low, high = figure(ratios[key])
    if rounds == 1:
        return f"{ratio_text(value)}×"
    return f"{ratio_text(value)}× ({ratio_text(low)}–{ratio_text(high)})"

today = datetime.date.today()
present = [s for s in systems if any(key[2] == s for key in results)]
print(f"Time (ns) and mallocs per unit, {today}; the time is the geometric mean over {rounds}"
      " processes of 20 rounds of the median iteration:\n")
print("| scenario (per unit) | " + " | ".join(present) + " |")
print("|---" * (1 + len(present)) + "|")
for scenario, length in main_rows:
    cells = [f"{number(results[k]['ns'])} · {results[k]['mallocs']:.2f}" if k in results else "—"
             for k in ((scenario, length, s) for s in present)]
    print(f"| {scenario} ×{length:,} (per {units[scenario][1]}) | " + " | ".join(cells) + " |")

peers = [s for s in present if s != "Future" and s not in floors]
counts = list(pairs.values())
print(f"\nFuture's ratio to each peer: the peer's time over Future's (above 1×, Future is faster),"
      f" {today}; the geometric mean over {rounds} processes of 20 rounds (and the range of the"
      f" processes' means) of each round's median pair, from {min(counts):,} to"
      f" {max(counts):,} interleaved pairs in all:\n")
print("| scenario | " + " | ".join(peers) + " |")
print("|---" * (1 + len(peers)) + "|")
for scenario, length in main_rows:
    row = [ratio_cell(scenario, length, peer) for peer in peers]
    print(f"| {scenario} ×{length:,} | " + " | ".join(row) + " |")

print("\nScaling: ns per link (per step for the loop) against length:\n")
print("| scenario | length | " + " | ".join(present) + " |")
print("|---" * (2 + len(present)) + "|")
for scenario, lengths in series:
    for length in lengths:
        values = [results.get((scenario, length, s), {}).get("ns") for s in present]
        print(f"| {scenario} | {length:,} | "
              + " | ".join("—" if v is None else number(v) for v in values) + " |")

print("\nScaling of the ratios: Future's ratio to each peer against length:\n")
print("| scenario | length | " + " | ".join(peers) + " |")
print("|---" * (2 + len(peers)) + "|")
for scenario, lengths in series:
    for length in lengths:
        print(f"| {scenario} | {length:,} | "
              + " | ".join(ratio_cell(scenario, length, peer) for peer in peers) + " |")

data = {"date": today.isoformat(), "processes": rounds,
        "results": [{"scenario": k[0], "length": k[1], "system": k[2], **v}
                    for k, v in sorted(results.items())],
        "ratios": {f"{s} ×{l} vs {p}": dict(zip(("ratio", "low", "high"), figure(values)),
                                            pairs=pairs[(s, l, p)])
                   for (s, l, p), values in sorted(ratios.items()) if p not in floors}}
with open(".build/compare.json", "w") as out:
    json.dump(data, out, indent=1)
if save:
    shutil.copy(".build/compare.json", f"results/compare-{data['date']}.json")
expected = {(s, l) for s, l in main_rows} | {(s, l) for s, ls in series for l in ls}
missing = [f"{s} ×{l}" for s, l in sorted(expected) if (s, l, "Future") not in results]
if missing:
    sys.exit("no result for Future in: " + ", ".join(missing))
PY
# The bytes a pending run holds, against a parked Task, in one process (Sources/PendingRuns).
echo
PENDING_COUNT=$([ -n "${BENCHMARK_SMOKE:-}" ] && echo 1000 || echo 100000) .build/release/PendingRuns
