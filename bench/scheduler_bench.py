#!/usr/bin/env python3
"""Scheduler benchmark: a synthetic backward pass of a model's layer gradients, last layer
first at a steady pace, into N agents (one trainer each) in network namespaces whose links
are shaped with tc tbf. Two comparisons, each run in the same script:

1. P3 (scheduler.inflight_per_peer 10) against FIFO (scheduler.priority false, and a window so
   large that every slice is handed to the transport when it is encoded), both with --codec (default none; e.g. 2bit,
   which compresses the tensors the selective-compression threshold lets through, or every
   tensor with --min-elements 0): the time from the first submit of an iteration until
   layer 0's gradient is synced on every node, and the iteration time, and the ratio FIFO/P3
   of each (goal: layer 0 synced >= 1.5x sooner under P3);
2. selective compression with the 2bit codec: `auto` (the fitted cost model) against
   always compressing (min_elements 0), the static size threshold (262144 elements) and
   never compressing (codec none).

Times are medians over the iterations after the first (which pays for connection set-up
and page faults); per iteration the slowest trainer counts. Needs root (ip netns, tc).
Usage: bench/scheduler_bench.py [--model vgg16|FILE.csv] [--nodes 4] [--rate 1gbit] [--iterations 4]
                                [--pace-ms 3] [--codec none|2bit|...] [--min-elements N]
                                [--only p3-fifo|selection] [--out FILE.md]"""

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from cluster import Cluster, Namespaces  # noqa: E402


def run(ns, nodes, model, iterations, pace_ms, extra, codec=None):
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--model", str(model), "--iterations", str(iterations), "--check", "none", "--report",
                "--backward-ms", str(pace_ms)]
        if codec:
            args += ["--codec", codec]
        with Cluster(tmp, nodes, list(extra), namespaces=ns) as c:
            results = c.trainers(1, args, timeout=900)
            for rc, out in results:
                if rc != 0:
                    raise SystemExit(f"trainer failed:\n{out}\n{c.logs[0].read_text()[-3000:]}")
    first = [[float(v) for v in re.findall(r"first_layer_ms=([\d.]+)", out)] for _, out in results]
    whole = [[float(v) for v in re.findall(r"^iteration=\d+ ms=([\d.]+)", out, re.M)] for _, out in results]
    slowest = lambda per_trainer: [max(t[i] for t in per_trainer) for i in range(1, iterations)]  # noqa: E731
    return statistics.median(slowest(first)), statistics.median(slowest(whole))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vgg16", help="bench/models/NAME.csv, or the path of a CSV")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--pace-ms", type=int, default=3)
    ap.add_argument("--codec", default="none", help="the codec of the P3 and FIFO runs (the trainer's --codec)")
    ap.add_argument("--min-elements", type=int,
                    help="compress.min_elements for the P3 and FIFO runs (default: the agent's, 262144)")
    ap.add_argument("--only", choices=["p3-fifo", "selection"], help="run one of the two comparisons")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()
    if a.iterations < 2:
        raise SystemExit("scheduler_bench: --iterations must be at least 2 (the first is not counted)")
    ok, why = Namespaces.available()
    if not ok:
        raise SystemExit(f"scheduler_bench: {why}")
    model = Path(a.model) if a.model.endswith(".csv") else ROOT / "bench" / "models" / f"{a.model}.csv"
    name = model.stem
    codec = None if a.codec == "none" else a.codec
    rows, result = [], {"model": name, "nodes": a.nodes, "rate": a.rate, "pace_ms": a.pace_ms,
                        "iterations": a.iterations, "codec": a.codec, "command": "bench/scheduler_bench.py " +
                        " ".join(sys.argv[1:])}
    with Namespaces(a.nodes) as ns:
        ns.shape(a.rate)
        common = ["--agent.codec_threads", "1"]
        if a.only != "selection":
            sched = common + ([] if a.min_elements is None else ["--compress.min_elements", str(a.min_elements)])
            p3 = run(ns, a.nodes, model, a.iterations, a.pace_ms, sched + ["--scheduler.inflight_per_peer", "10"],
                     codec=codec)
            fifo = run(ns, a.nodes, model, a.iterations, a.pace_ms,
                       sched + ["--scheduler.inflight_per_peer", "4096", "--scheduler.priority", "false"],
                       codec=codec)
            label = a.codec + ("" if a.min_elements is None else f" (min_elements {a.min_elements})")
            rows.append(("P3, window 10", label, *p3))
            rows.append(("FIFO", label, *fifo))
            result.update(p3_layer0_ms=p3[0], p3_iteration_ms=p3[1], fifo_layer0_ms=fifo[0], fifo_iteration_ms=fifo[1],
                          layer0_ratio=fifo[0] / p3[0], iteration_ratio=fifo[1] / p3[1])
        if a.only != "p3-fifo":
            if a.only != "selection" and codec is None and a.min_elements is None:
                never = p3
            else:
                never = run(ns, a.nodes, model, a.iterations, a.pace_ms, common)
            always = run(ns, a.nodes, model, a.iterations, a.pace_ms,
                         common + ["--compress.min_elements", "0"], codec="2bit")
            size = run(ns, a.nodes, model, a.iterations, a.pace_ms, common, codec="2bit")
            auto = run(ns, a.nodes, model, a.iterations, a.pace_ms,
                       common + ["--compress.selection", "auto", "--scheduler.refit_interval", "1"], codec="2bit")
            rows.append(("never compress", "none", *never))
            rows.append(("always compress", "2bit", *always))
            rows.append(("size threshold 262144", "2bit", *size))
            rows.append(("auto (cost model)", "2bit", *auto))
            result.update(never_iteration_ms=never[1], always_iteration_ms=always[1], size_iteration_ms=size[1],
                          auto_iteration_ms=auto[1])
    lines = [f"{name}, {a.nodes} agents, links shaped to {a.rate}, backward pace {a.pace_ms} ms/tensor, "
             f"median of {a.iterations - 1} iterations (`{result['command']}`)",
             "", "| run | codec | layer 0 synced (ms) | iteration (ms) |", "|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} |" for r in rows]
    lines.append("")
    if "layer0_ratio" in result:
        verdict = "met" if result["layer0_ratio"] >= 1.5 else "MISSED"
        lines.append(f"P3 syncs layer 0 {result['layer0_ratio']:.2f}x sooner than FIFO (codec {a.codec}; "
                     f"goal 1.5x: {verdict}); iteration time ratio FIFO/P3 {result['iteration_ratio']:.2f}.")
    if "auto_iteration_ms" in result:
        lines.append(f"auto vs always: {always[1] / auto[1]:.2f}x, auto vs never: {never[1] / auto[1]:.2f}x, "
                     f"auto vs size threshold: {size[1] / auto[1]:.2f}x (iteration time ratios, >1 means auto "
                     "is faster).")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
