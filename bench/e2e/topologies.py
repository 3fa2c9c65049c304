"""The topologies side by side, from bench/e2e/run.py's e2e.json files (runs with --scheduling
P3,P3-ring,P3-allgather,P3-auto): per workload, link and node count, each codec's sync time
and wire bytes per node under ps, ring and allgather, where auto landed against the best
fixed choice, and DDP gloo / PowerSGD rank 1 of the same run. With matplotlib, also a plot of
sync time against node count per topology.

    python3 bench/e2e/topologies.py OUT.md [PLOT.png] e2e.json [e2e.json ...]
"""

import json
import sys
from collections import defaultdict

TOPOLOGIES = {"P3": "ps", "P3-ring": "ring", "P3-allgather": "allgather", "P3-auto": "auto"}
FIXED = ("ps", "ring", "allgather")


def load(paths):
    """{(model, rate, nodes): {system: {topology: row}}}"""
    runs = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for row in json.load(open(path)):
            if "sync_s" not in row:
                continue
            key = (row["model"], row["rate"], row.get("nodes", 4))
            system = row["system"]
            if system.startswith("gcagent "):
                topology = TOPOLOGIES.get(row["scheduling"])
                if topology:
                    runs[key][system[len("gcagent "):]][topology] = row
            elif row["scheduling"] == "-":
                runs[key][system]["-"] = row
    return runs


def auto_choice(row):
    """What auto chose, from the agents' gcagent_planned_topology (tensors per topology)."""
    counts = defaultdict(float)
    for agent in row.get("metrics", []):
        for name, value in agent.items():
            if name.startswith("gcagent_planned_topology{"):
                counts[name.split('"')[1]] += value
    chosen = [f"{t} {int(counts[t] / max(1, len(row['metrics'])))}" for t in FIXED if counts[t]]
    return ", ".join(chosen) if chosen else "?"


def markdown(runs):
    out = []
    for (model, rate, nodes), systems in sorted(runs.items()):
        out.append(f"### {model}, {rate}, {nodes} nodes\n")
        base = {s: systems[s]["-"]["sync_s"] for s in ("ddp", "powersgd1") if "-" in systems.get(s, {})}
        if base:
            out.append("Baselines: " + ", ".join(f"{s} {v * 1e3:.0f} ms" for s, v in base.items()) + "\n")
        out.append("| codec | ps (ms) | ring (ms) | allgather (ms) | auto (ms) | auto chose (tensors) | auto vs best fixed "
                   "| wire MB/node ps / ring / allgather | best vs DDP gloo |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for codec, by in systems.items():
            if "-" in by:
                continue
            ms = {t: by[t]["sync_s"] * 1e3 for t in TOPOLOGIES.values() if t in by}
            fixed = {t: v for t, v in ms.items() if t in FIXED}
            best = min(fixed.values()) if fixed else None
            cells = [f"{ms[t]:.0f}" if t in ms else "-" for t in ("ps", "ring", "allgather", "auto")]
            chose = auto_choice(by["auto"]) if "auto" in by else "-"
            vs = f"{ms['auto'] / best:.2f}x the best" if "auto" in ms and best else "-"
            wire = " / ".join(f"{by[t]['wire_bytes'] / 1e6:.1f}" if t in by else "-" for t in FIXED)
            speed = f"{base['ddp'] * 1e3 / best:.2f}x" if best and "ddp" in base else "-"
            out.append(f"| {codec} | " + " | ".join(cells) + f" | {chose} | {vs} | {wire} | {speed} |")
        out.append("")
    return "\n".join(out)


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = defaultdict(lambda: defaultdict(list))  # (model, rate, codec) -> topology -> [(nodes, ms)]
    for (model, rate, nodes), systems in runs.items():
        for codec, by in systems.items():
            for t, row in by.items():
                if t != "-":
                    series[(model, rate, codec)][t].append((nodes, row["sync_s"] * 1e3))
    panels = [k for k, v in series.items() if any(len(p) > 1 for p in v.values())]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, key in zip(axes[0], sorted(panels)):
        for t, points in sorted(series[key].items()):
            points.sort()
            ax.plot([n for n, _ in points], [v for _, v in points], marker="o", label=t)
        ax.set_title(f"{key[2]}: {key[0]} at {key[1]}")
        ax.set_xlabel("nodes")
        ax.set_ylabel("sync per iteration (ms)")
        ax.set_xticks(sorted({n for p in series[key].values() for n, _ in p}))
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = sys.argv[1:]
    out = args.pop(0)
    png = args.pop(0) if args and args[0].endswith(".png") else None
    runs = load(args)
    text = markdown(runs)
    open(out, "w").write(text)
    print(text)
    if png:
        try:
            plot(runs, png)
        except ImportError:
            print(f"no matplotlib: {png} not drawn", file=sys.stderr)


if __name__ == "__main__":
    main()
