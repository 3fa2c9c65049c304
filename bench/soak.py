#!/usr/bin/env python3
"""Soak: 4 agents with 2 trainers each run many iterations (10,000 by default) over a mix
of codecs at once, one job per codec. Every trainer checks every result against the
reference average it computes itself (exactly for `none`, within the codec's bound for the
casts, by convergence of the mean for the error-feedback codecs). The agents' RSS is
sampled every second; the run fails if any trainer fails or if an agent's RSS grows by more
than --rss-growth (default 10%) between the end of the warm-up (the first tenth of the
run) and the end. Not part of `make test`.

    GCAGENT_BUILD_DIR=build/release python3 bench/soak.py [--iterations 10000] [--agents 4]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from cluster import TRAINER, Cluster  # noqa: E402

# codec, parameters, check
JOBS = [
    ("none", [], "exact"),
    ("fp16", [], "bound:1e-4"),
    ("bf16", [], "bound:1e-3"),
    ("2bit", ["threshold=0.5"], "converge:0.004"),  # t above the 8-trainer sum (8 x 1/16)
    ("topk", ["ratio=0.25"], "converge:0.004"),
]
TENSORS = "40000,5000,17"


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=10000)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--local", type=int, default=2)
    ap.add_argument("--rss-growth", type=float, default=0.10)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="gcagent-soak-") as tmp, \
            Cluster(tmp, args.agents, ["--compress.min_elements", "0", "--scheduler.slice_elements", "4096"]) as c:
        world = args.agents * args.local
        procs = []
        for codec, params, check in JOBS:
            for r in range(args.agents):
                for l in range(args.local):
                    cmd = [str(TRAINER), "--socket", c.sockets[r], "--job", f"soak-{codec}", "--local-rank", str(l),
                           "--local-size", str(args.local), "--world-rank", str(r * args.local + l),
                           "--world-size", str(world), "--tensors", TENSORS, "--iterations", str(args.iterations),
                           "--codec", codec, "--check", check, "--timeout-ms", "120000", "--report"]
                    for p in params:
                        cmd += ["--param", p]
                    out = open(Path(tmp) / f"{codec}-{r}-{l}.out", "w")
                    procs.append((codec, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=c.env), out))
        started = time.time()
        samples = []  # (seconds, [rss kib per agent])
        while any(p.poll() is None for _, p, _ in procs):
            samples.append((time.time() - started, [rss_kib(p.pid) for p in c.procs]))
            if len(samples) % 60 == 0:
                done = Path(procs[0][2].name).read_text().count("iteration=")
                print(f"soak: {samples[-1][0]:.0f} s: {done} iterations, RSS MiB "
                      f"{' '.join(f'{k / 1024:.1f}' for k in samples[-1][1])}", flush=True)
            time.sleep(1)
        elapsed = time.time() - started
        failed = [(codec, p.returncode, Path(out.name).read_text()[-400:]) for codec, p, out in procs if p.returncode != 0]
        codes = c.stop()

    print(f"soak: {args.agents} agents x {args.local} trainers x {len(JOBS)} jobs "
          f"({', '.join(j[0] for j in JOBS)}), {args.iterations} iterations in {elapsed:.1f} s "
          f"({args.iterations / elapsed:.1f} iterations/s per job)")
    ok = not failed and codes == [0] * args.agents
    for codec, rc, tail in failed:
        print(f"soak: a {codec} trainer exited {rc}:\n{tail}")
    if codes != [0] * args.agents:
        print(f"soak: agents exited {codes}")
    if len(samples) >= 10:
        warm = samples[len(samples) // 10][1]
        end = samples[-1][1]
        for r in range(args.agents):
            growth = (end[r] - warm[r]) / warm[r] if warm[r] else 0.0
            peak = max(s[1][r] for s in samples)
            print(f"soak: agent {r} RSS {warm[r] / 1024:.1f} MiB after warm-up, {end[r] / 1024:.1f} MiB at the end "
                  f"({growth * 100:+.1f}%), peak {peak / 1024:.1f} MiB")
            ok &= growth <= args.rss_growth
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
