"""Convergence check: two tasks trained by 4 workers (2 agents with 2 trainer processes each)
through gcagent, once per codec with error feedback on and off, against `none`.

    GCAGENT_BUILD_DIR=build/release $GCAGENT_CACHE/venv-torch/bin/python bench/convergence.py
        [--task digits|lm] [--epochs 30] [--steps 300] [--only 2bit,fp8] [--feedback both|on|off]
        [--json out.json]

digits: an MLP on scikit-learn's bundled digits; prints the final test accuracy of each run
and its distance from `none`. Each worker owns a quarter of the training split and takes
mini-batches of 32; the optimizer is plain SGD (lr 0.5) on the averaged gradient
(gcagent.torch.DistributedOptimizer).

lm: the byte-level transformer language model of bench/diloco/lm.py (437,760 parameters) on
the Python standard library's source text; each worker takes `--steps` AdamW steps (lr 3e-3)
on batches of 16 windows of 64 bytes drawn from its own stream, on the averaged gradient;
prints the validation loss (nats per byte) and its ratio to `none`'s.

Both: the same initial weights and data order in every run, so the codec is the only
difference; every tensor is compressed (compress.min_elements 0). Run as a worker when
WORLD_RANK is set."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, codec, params): thresholds sized for this MLP's gradients (|g| ~ 1e-3 .. 1e-1).
CONFIGS = [
    ("none", "none", {}),
    ("2bit", "2bit", {"threshold": "0.01"}),
    ("onebit", "onebit", {}),
    # momentum 0: the baseline is plain SGD, and DGC's momentum correction would add a
    # momentum of 0.9 on top (10x the step here, which diverges at this learning rate).
    ("dgc 1%", "dgc", {"ratio": "0.01", "momentum": "0"}),
    ("threshold 1%", "threshold", {"drop": "0.99"}),
    ("fp8 e4m3", "fp8", {}),
    ("int4", "int4", {}),
    ("int4 rotated", "int4", {"rotate": "true"}),
    ("mxfp4", "mxfp4", {}),
]

# The language model's rows: the low-bit formats, and 2-bit and onebit for scale.
LM_CONFIGS = [
    ("none", "none", {}),
    ("fp8 e4m3", "fp8", {}),
    ("int4", "int4", {}),
    ("int4 rotated", "int4", {"rotate": "true"}),
    ("mxfp4", "mxfp4", {}),
    ("onebit", "onebit", {}),
]


def lm_worker(steps):
    import torch

    import gcagent
    import gcagent.torch

    sys.path.insert(0, str(REPO / "bench" / "diloco"))
    import lm

    rank = int(os.environ["WORLD_RANK"])
    torch.set_num_threads(1)
    train, val, _ = lm.corpus()
    torch.manual_seed(0)
    model = lm.LanguageModel()
    opt = gcagent.torch.DistributedOptimizer(torch.optim.AdamW(model.parameters(), lr=3e-3), gcagent.Reducer())
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x, y = lm.batch(train, generator, 16, 64)
        opt.zero_grad()
        lm.loss_of(model, x, y).backward()
        opt.step()
    print("report: " + json.dumps({"accuracy": lm.validation_loss(model, val, 64)}), flush=True)


def worker(epochs, lr):
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch import nn

    import gcagent
    import gcagent.torch

    rank, world = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    xtr, ytr = torch.from_numpy(xtr[rank::world]), torch.from_numpy(ytr[rank::world])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), gcagent.Reducer())
    order = torch.Generator().manual_seed(rank)
    steps = (len(xtr) + 31) // 32
    for _ in range(epochs):
        perm = torch.randperm(len(xtr), generator=order)
        for s in range(steps):  # every worker takes the same number of steps
            idx = perm[(s * 32) % len(xtr):][:32]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = float((model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()) * 100
    print("report: " + json.dumps({"accuracy": acc}), flush=True)


def run(label, codec, params, epochs, lr, build, task="digits", steps=300):
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    os.environ["GCAGENT_BUILD_DIR"] = str(build)
    from cluster import Cluster

    env = {"PYTHONPATH": str(REPO / "clients" / "python"), "GCAGENT_CLIENT_LIB": str(build / "clients" / "libgcagent_client.so.1"),
           "GCAGENT_CODEC": codec, "GCAGENT_CODEC_PARAMS": ",".join(f"{k}={v}" for k, v in params.items())}
    with tempfile.TemporaryDirectory() as tmp, Cluster(tmp, 2, ["--compress.min_elements", "0"]) as c:
        procs = []
        for r in range(2):
            for l in range(2):
                # GCAGENT_WAIT_FOR_AGENT: the agents may not have made their sockets yet.
                e = dict(os.environ, **env, GCAGENT_SOCKET=c.sockets[r], GCAGENT_WAIT_FOR_AGENT="1",
                         GCAGENT_JOB="digits", GCAGENT_LOCAL_RANK=str(l), GCAGENT_LOCAL_SIZE="2",
                         WORLD_RANK=str(2 * r + l), WORLD_SIZE="4")
                procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--task", task, "--epochs", str(epochs),
                                               "--lr", str(lr), "--steps", str(steps)],
                                              env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"{label}: a worker failed:\n" + "\n".join(o[-2000:] for o in outs))
        accs = [json.loads([l for l in o.splitlines() if l.startswith("report: ")][-1][8:])["accuracy"] for o in outs]
        c.stop()
        done = [l for l in c.log(0).splitlines() if "done:" in l]
    assert len(set(accs)) == 1, f"{label}: workers disagree: {accs}"
    ratio = float(done[0].split("(ratio ")[1].split(")")[0]) if done and "(ratio " in done[0] else float("nan")
    return accs[0], ratio


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--task", default="digits", choices=["digits", "lm"])
    ap.add_argument("--steps", type=int, default=300, help="lm: optimizer steps per worker")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--only", default="")
    ap.add_argument("--feedback", default="both", choices=["both", "on", "off"], help="error feedback runs")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.worker:
        return lm_worker(a.steps) if a.task == "lm" else worker(a.epochs, a.lr)
    build = Path(os.environ.get("GCAGENT_BUILD_DIR", REPO / "build" / "release")).resolve()
    rows = []
    for label, codec, params in (LM_CONFIGS if a.task == "lm" else CONFIGS):
        if a.only and codec not in a.only.split(","):
            continue
        for ef in ([True] if codec == "none" else {"both": [True, False], "on": [True], "off": [False]}[a.feedback]):
            p = dict(params) if ef else dict(params, error_feedback="false")
            started = time.time()
            acc, ratio = run(label, codec, p, a.epochs, a.lr, build, a.task, a.steps)
            rows.append({"codec": label, "error_feedback": ef if codec != "none" else None, "accuracy": acc,
                         "wire_ratio": ratio, "seconds": round(time.time() - started, 1)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    base = next((r["accuracy"] for r in rows if r["codec"] == "none"), None)
    if a.task == "lm":
        print("| codec | error feedback | validation loss (nats/byte) | / none | wire ratio |")
    else:
        print("| codec | error feedback | test accuracy (%) | vs none (points) | wire ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        ef = "-" if r["error_feedback"] is None else ("on" if r["error_feedback"] else "off")
        if base is None:
            delta = ""
        else:
            delta = f"{r['accuracy'] / base:.3f}" if a.task == "lm" else f"{r['accuracy'] - base:+.2f}"
        print(f"| {r['codec']} | {ef} | {r['accuracy']:.{4 if a.task == 'lm' else 2}f} | {delta} | {r['wire_ratio']:.1f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
