#!/usr/bin/env bash
# Counts the instructions, mallocs, lock pairs and reference-count operations of a unit of work
# (a link, a step, an element, a run) of some scenarios, with valgrind's callgrind: counts that
# repeat to within a few instructions on a shared machine, where times do not. Each scenario runs
# twice, for 1 and for 3 iterations of the benchmark's workload, and the figures are the
# difference divided by the units of two iterations: start-up and first-use costs drop out.
#
#   ./instructions.sh                          # the scenarios below, Future's and the peers'
#   ./instructions.sh "fan-out ×10000 | Future"   # some scenarios, by name
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)"; exit 1; }
mkdir -p .build
swift build -c release --product Instructions >.build/instructions-build.txt 2>&1 ||
    { cat .build/instructions-build.txt; exit 1; }
if [ $# -gt 0 ]; then scenarios=("$@"); else
    scenarios=(
        "chain build+run ×1000 | Future" "chain run ×1000 | Future" "chain build ×1000 | Future"
        "promise steps ×1000 | Future" "promise steps ×1000 | Seed 004"
        "fan-out ×10000 | Future" "fan-out ×10000 | Future, building alone"
        "fan-out ×10000 | Seed 004" "recursive loop ×100000 | Future"
        "error at first ×1000 | Future" "timeout unfired ×1000 | Future"
        "timeout unfired ×1000 | Dispatch" "after zero ×1000 | Future"
        "after zero ×1000 | Dispatch"
    )
fi
out=.build/callgrind
mkdir -p "$out"
printf '| scenario | per | instructions | mallocs | lock pairs | retains | releases |\n'
printf '|---|---|---|---|---|---|---|\n'
for scenario in "${scenarios[@]}"; do
    for iterations in 1 3; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$iterations.out" \
            .build/release/Instructions "$scenario" "$iterations" >/dev/null 2>&1
    done
    python3 - "$scenario" "$out/1.out" "$out/3.out" <<'PY'
import re, sys

scenario, one, three = sys.argv[1:]
units = {"chain build+run": (10_000, "link"), "chain run": (10_000, "link"),
         "chain build": (10_000, "link"), "promise steps": (1_000, "step"),
         "fan-out": (10_000, "element"), "recursive loop": (100_000, "step"),
         "error at first": (1_000, "link"), "timeout unfired": (1_000, "run"),
         "after zero": (1_000, "run"), "awaited chain": (10_000, "link"),
         "fan-out on a queue": (10_000, "element"), "fan-out 4 at once": (10_000, "element"),
         "async work": (1_000, "run")}
units |= {f"{work}{clock}": (1_000, "run") for work in ("timeout unfired", "timeout, work waits")
          for clock in ("", ", ContinuousClock", ", SuspendingClock")}
counted = {"malloc": "mallocs", "pthread_mutex_lock": "lock pairs",
           "swift_retain": "retains", "swift_release": "releases"}
counted["pthread_mutex_lock@@GLIBC_2.2.5"] = "lock pairs"  # glibc's versioned name

def totals(path):
    """The program's instructions, and the calls made to each function of `counted`."""
    names, calls, instructions, callee = {}, dict.fromkeys(counted.values(), 0), 0, None
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("summary:"):
            instructions = int(line.split()[1])
        match = re.match(r"^(c?)fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if match:
            if match[3]:
                names[match[2]] = match[3]
            callee = names.get(match[2]) if match[1] else None
        elif line.startswith("calls=") and callee in counted:
            calls[counted[callee]] += int(line.split()[0][6:])
    return instructions, calls

(i1, c1), (i3, c3) = totals(one), totals(three)
count, unit = units[scenario.split(" ×")[0]]
per = lambda a, b: (b - a) / (2 * count)
columns = dict.fromkeys(counted.values())
cells = [f"{per(i1, i3):,.0f}"] + [f"{per(c1[k], c3[k]):.2f}" for k in columns]
print(f"| {scenario} | {unit} | " + " | ".join(cells) + " |")
PY
done
