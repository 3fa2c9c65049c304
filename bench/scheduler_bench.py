#!/usr/bin/env python3
"""Scheduler benchmark: a synthetic backward pass of a model's layer gradients, last layer
first at a steady pace, into N agents (one trainer each) in network namespaces whose links
are shaped with tc tbf. Two comparisons, each run in the same script:

1. P3 (scheduler.inflight_per_peer 10) against FIFO (a window so large that every slice is
   handed to the transport when it is produced): the time from the first submit of an
   iteration until layer 0's gradient is synced on every node, and the iteration time;
2. selective compression with the 2bit codec: `auto` (the fitted cost model) against
   always compressing (min_elements 0), the static size threshold (262144 elements) and
   never compressing (codec none).

Times are medians over the iterations after the first (which pays for connection set-up
and page faults); per iteration the slowest trainer counts. Needs root (ip netns, tc).
Usage: bench/scheduler_bench.py [--model vgg16] [--nodes 4] [--rate 1gbit] [--iterations 4]
                                [--pace-ms 3] [--out FILE.md]"""

import argparse
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--pace-ms", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    ok, why = Namespaces.available()
    if not ok:
        raise SystemExit(f"scheduler_bench: {why}")
    model = ROOT / "bench" / "models" / f"{a.model}.csv"
    rows = []
    with Namespaces(a.nodes) as ns:
        ns.shape(a.rate)
        common = ["--agent.codec_threads", "1"]
        p3 = run(ns, a.nodes, model, a.iterations, a.pace_ms, common + ["--scheduler.inflight_per_peer", "10"])
        fifo = run(ns, a.nodes, model, a.iterations, a.pace_ms, common + ["--scheduler.inflight_per_peer", "4096"])
        rows.append(("P3, window 10", "none", *p3))
        rows.append(("FIFO", "none", *fifo))
        never = p3
        always = run(ns, a.nodes, model, a.iterations, a.pace_ms,
                     common + ["--compress.min_elements", "0"], codec="2bit")
        size = run(ns, a.nodes, model, a.iterations, a.pace_ms, common, codec="2bit")
        auto = run(ns, a.nodes, model, a.iterations, a.pace_ms,
                   common + ["--compress.selection", "auto", "--scheduler.refit_interval", "1"], codec="2bit")
        rows.append(("never compress", "none", *never))
        rows.append(("always compress", "2bit", *always))
        rows.append(("size threshold 262144", "2bit", *size))
        rows.append(("auto (cost model)", "2bit", *auto))
    lines = [f"{a.model}, {a.nodes} agents, links shaped to {a.rate}, backward pace {a.pace_ms} ms/tensor, "
             f"median of {a.iterations - 1} iterations",
             "", "| run | codec | layer 0 synced (ms) | iteration (ms) |", "|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} |" for r in rows]
    lines += ["", f"P3 syncs layer 0 {fifo[0] / p3[0]:.2f}x sooner than FIFO; iteration time ratio FIFO/P3 "
              f"{fifo[1] / p3[1]:.2f}.",
              f"auto vs always: {always[1] / auto[1]:.2f}x, auto vs never: {never[1] / auto[1]:.2f}x, "
              f"auto vs size threshold: {size[1] / auto[1]:.2f}x (iteration time ratios, >1 means auto is faster)."]
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
