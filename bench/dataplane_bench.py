#!/usr/bin/env python3
"""Data-plane benchmarks, each against a baseline measured in the same run:

1. round trip trainer -> agent -> trainer of one 100 MB gradient through one agent with
   codec `none`, against a plain memcpy of the same 100 MB (goal: 3x memcpy or less). The
   trainers keep their gradients in their own memory (--copy), so the round trip includes
   the copy into the shared slot and the copy out, as with a framework; with 2 trainers it
   also includes the agent's local sum;
2. a 2-agent allreduce of 100 MB over loopback TCP, with `none` and with `2bit`.

Times are the trainer's submit-to-complete medians over the iterations after the first.
Usage: bench/dataplane_bench.py [--iterations N] [--mb 100] [--out FILE.md]"""

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from cluster import Cluster  # noqa: E402


def memcpy_ms(nbytes, repeats=7):
    src = (ctypes.c_char * nbytes)()
    dst = (ctypes.c_char * nbytes)()
    ctypes.memset(src, 1, nbytes)
    ctypes.memset(dst, 0, nbytes)  # fault both in before timing
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        ctypes.memmove(dst, src, nbytes)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def run(nodes, codec, elements, iterations, local=1, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp, nodes, ["--compress.min_elements", "0", *extra])
        c.start()
        try:
            args = ["--tensors", str(elements), "--iterations", str(iterations), "--check", "none", "--report",
                    "--copy"]
            if codec:
                args += ["--codec", codec]
            results = c.trainers(local, args, timeout=600)
        finally:
            c.stop()
        for rc, out in results:
            if rc != 0:
                raise SystemExit(f"trainer failed:\n{out}")
        ms = [float(line.split("ms=")[1].split()[0]) for line in results[0][1].splitlines()
              if line.startswith("iteration=")]
        return statistics.median(ms[1:] if len(ms) > 1 else ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--out")
    a = ap.parse_args()
    nbytes = a.mb * 1000 * 1000
    elements = nbytes // 4
    base = memcpy_ms(nbytes)
    rows = [("memcpy (baseline)", base, 1.0)]
    for local in (1, 2):
        t = run(1, "none", elements, a.iterations, local)
        rows.append((f"1 agent round trip, none, {local} trainer{'s' if local > 1 else ''}", t, t / base))
    for codec in ("none", "2bit"):
        t = run(2, codec, elements, a.iterations)
        rows.append((f"2 agents allreduce, {codec}", t, t / base))
    lines = [f"| {a.mb} MB of fp32 | median ms | x memcpy | GB/s |", "|---|---|---|---|"]
    for name, ms, ratio in rows:
        lines.append(f"| {name} | {ms:.1f} | {ratio:.2f} | {nbytes / ms / 1e6:.2f} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        Path(a.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
