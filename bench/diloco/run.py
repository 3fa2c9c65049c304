#!/usr/bin/env python3
"""DiLoCo through gcagent against DDP every step, on the byte-level language model of lm.py:
N nodes (network namespaces joined through a bridge, each link shaped by tc tbf to --rates),
one trainer per node, the same number of inner steps and tokens for every row.

Rows: local (no communication: the compute-only baseline), ddp (DistributedDataParallel over
gloo, an all-reduce every step), and diloco-H<h>-<codec> (gcagent.torch.diloco.DiLoCo, an outer
step every h steps through the agents; codecs none, int8 (block-scaled, error feedback), topk
(3%, error feedback); -s<f>: streaming, f fragments with a delay of 2 steps).

Numbers per row: validation loss (nats per byte, trainer 0; the ratio to DDP's), bytes on the
wire per node per inner step (veth counters, TCP/IP headers included; the ratio DDP / row), the
local row's wall time over the row's (the same loop with nothing to wait for, in the same run
and namespaces; noisy on a shared host, and DDP's only measure, its all-reduce being inside
backward), and for DiLoCo the share of the slowest trainer's loop spent computing, that is
outside the outer steps (timed around the inner optimizer's step, less its own math). Needs
root (ip netns, tc).

    bench/diloco/run.py [--rates 100mbit,1gbit] [--rows local,ddp,diloco-H20-none,...]
        [--steps 400] [--nodes 4] [--out bench/results]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import cluster  # noqa: E402
from cluster import Cluster, Namespaces  # noqa: E402

CACHE = Path(os.environ.get("GCAGENT_CACHE", Path.home() / ".cache" / "gcagent"))
TORCH_PY = Path(os.environ.get("GCAGENT_TORCH_PYTHON", CACHE / "venv-torch" / "bin" / "python"))
CODECS = {"none": ("none", ""), "int8": ("int8", ""), "topk": ("topk", "ratio=0.03"), "bf16": ("bf16", "")}
DEFAULT_ROWS = ["local", "ddp", "diloco-H20-none", "diloco-H20-int8", "diloco-H20-topk", "diloco-H100-none",
                "diloco-H100-int8", "diloco-H20-int8-s2"]


def log(msg):
    print(f"[diloco {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sent_bytes(ns):
    """Bytes each node has sent: the rx counter of its veth's host end."""
    return [int(Path(f"/sys/class/net/gca{ns.tag}h{r}/statistics/rx_bytes").read_text()) for r in range(len(ns.names))]


def worker_args(row, steps):
    if row in ("local", "ddp"):
        return ["--system", row, "--steps", str(steps)]
    parts = row.split("-")  # diloco-H20-int8[-s2]
    codec, params = CODECS[parts[2]]
    args = ["--system", "diloco", "--steps", str(steps), "--sync-every", parts[1][1:], "--codec", codec,
            "--params", params]
    if len(parts) > 3:
        args += ["--fragments", parts[3][1:], "--delay", "2"]
    return args


def run_row(ns, row, steps, timeout):
    n = len(ns.names)
    port = 29500 + (os.getpid() + int(time.time())) % 2000
    base = {"MASTER_ADDR": ns.addresses[0], "MASTER_PORT": str(port), "WORLD_SIZE": str(n), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"), str(HERE)])}

    def launch(c):
        procs = []
        for r in range(n):
            env = dict(os.environ, **base, RANK=str(r), GLOO_SOCKET_IFNAME=f"gca{ns.tag}v{r}")
            if c is not None:
                env.update(GCAGENT_SOCKET=c.sockets[r], GCAGENT_WAIT_FOR_AGENT="1", GCAGENT_JOB="diloco",
                           GCAGENT_LOCAL_RANK="0", GCAGENT_LOCAL_SIZE="1", WORLD_RANK=str(r),
                           GCAGENT_CLIENT_LIB=str(cluster.BUILD / "clients" / "libgcagent_client.so.1"))
            procs.append(subprocess.Popen(ns.prefix(r) + [str(TORCH_PY), str(HERE / "worker.py"),
                                                          *worker_args(row, steps)],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        finished = cluster.finish(procs, timeout)
        outs = [out for _, out in finished]
        if any(rc for rc, _ in finished):
            raise RuntimeError(f"{row}: a worker failed:\n" + "\n".join(o[-2000:] for o in outs))
        return [json.loads([ln for ln in o.splitlines() if ln.startswith("result: ")][-1][8:]) for o in outs]

    before = sent_bytes(ns)
    if row.startswith("diloco"):
        with tempfile.TemporaryDirectory() as tmp, Cluster(tmp, n, ["--compress.min_elements", "0"],
                                                           namespaces=ns) as c:
            before = sent_bytes(ns)  # the agents' handshakes are set-up, not training traffic
            results = launch(c)
    else:
        results = launch(None)
    after = sent_bytes(ns)
    wire = statistics.mean(b - a for a, b in zip(before, after)) / steps
    return {"row": row, "wall_s": max(r["wall_s"] for r in results), "val_loss": results[0]["val_loss"],
            "val_losses": [r["val_loss"] for r in results], "wire_bytes_per_step": wire,
            "waited_s": max(r.get("waited_s", 0.0) for r in results),
            # the share of each trainer's loop spent outside outer steps (forward, backward,
            # optimizer, batches); the slowest trainer's
            "compute_fraction": min(1 - r["outer_s"] / r["wall_s"] for r in results),
            "late_syncs": max(r.get("late_syncs", 0) for r in results),
            "failed_syncs": max(r.get("failed_syncs", 0) for r in results),
            "parameters": results[0]["parameters"], "corpus": results[0]["corpus"]}


def table(rate, rows, steps, nodes):
    by = {r["row"]: r for r in rows}
    ddp, local = by.get("ddp"), by.get("local")
    lines = [f"### {rate}, {nodes} nodes x 1 trainer, {steps} inner steps of 16 x 64 bytes each "
             f"({rows[0]['parameters']} parameters, corpus {rows[0]['corpus']})", "",
             "| row | val loss | vs DDP | wire bytes/node/step | DDP / row | wall s | local wall / wall | "
             "computing | late syncs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = f"{r['val_loss'] / ddp['val_loss']:.3f}" if ddp else ""
        ratio = (f"{ddp['wire_bytes_per_step'] / r['wire_bytes_per_step']:.0f}x"
                 if ddp and r["wire_bytes_per_step"] > 0 and r["row"] != "local" else "")
        frac = f"{local['wall_s'] / r['wall_s']:.2f}" if local else ""
        computing = f"{r['compute_fraction']:.3f}" if r["row"].startswith("diloco") else ""
        lines.append(f"| {r['row']} | {r['val_loss']:.4f} | {vs} | {r['wire_bytes_per_step']:.0f} | {ratio} | "
                     f"{r['wall_s']:.1f} | {frac} | {computing} | {r['late_syncs']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    ok, why = Namespaces.available()
    if not ok:
        sys.exit(f"bench/diloco: {why}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report = ["## DiLoCo through gcagent against DDP every step (bench/diloco/run.py)", "",
              f"Command: `bench/diloco/run.py --rates {a.rates} --rows {a.rows} --steps {a.steps} "
              f"--nodes {a.nodes}`; host: {os.cpu_count()} cores.", ""]
    raw = {}
    for rate in a.rates.split(","):
        rows = []
        with Namespaces(a.nodes) as ns:
            ns.shape(rate)
            for row in a.rows.split(","):
                log(f"{rate} {row}")
                rows.append(run_row(ns, row, a.steps, a.timeout))
                log(json.dumps(rows[-1]))
        raw[rate] = rows
        report.append(table(rate, rows, a.steps, a.nodes))
    (out / "diloco_lm.md").write_text("\n".join(report))
    (out / "diloco_lm.json").write_text(json.dumps(raw, indent=1))
    print("\n".join(report))


if __name__ == "__main__":
    main()
