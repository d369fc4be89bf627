"""Plots the cost per link against a chain's length, from the figures compare.sh wrote.

    python3 plot.py results/compare-2026-11-23.json results/scaling-2026-11-23.png

Each line is a system: flat means a link costs the same whatever the chain's length; rising
means each link costs more in a longer chain (the erased OpenCombine chain nests one subscriber
per link). Log scales on both axes; the figures come from one run of compare.sh, on its date.
A system keeps its colour in every panel; one that costs under 1 ns (the callbacks' loop, which
the optimizer turns into a plain loop) is left out.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

source, target = sys.argv[1], sys.argv[2]
data = json.load(open(source))
panels = [("chain build+run", "built and run"), ("chain run", "run, built beforehand"),
          ("recursive loop", "recursive loop (per step)")]
systems = ["Future", "Seed 004", "OpenCombine", "OpenCombine erased", "async/await",
           "async nonsending", "Callbacks"]
figure, axes = plt.subplots(1, len(panels), figsize=(15, 4.8))
for axis, (scenario, title) in zip(axes, panels):
    for index, system in enumerate(systems):
        points = sorted((r["length"], r["ns"]) for r in data["results"]
                        if r["scenario"] == scenario and r["system"] == system and "ns" in r)
        # The callbacks' loop compiles to almost nothing: a point near 0 would squash the axis.
        if points and min(p[1] for p in points) >= 1:
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                      label=system, color=f"C{index}")
    axis.set(xscale="log", yscale="log", title=title, xlabel="length (links or steps)",
             ylabel="ns per link (p50)")
    axis.grid(True, which="both", alpha=0.3)
axes[0].legend(fontsize=8)
figure.suptitle(f"Cost per link against length, one run of compare.sh on {data['date']}")
figure.tight_layout()
figure.savefig(target, dpi=110)
