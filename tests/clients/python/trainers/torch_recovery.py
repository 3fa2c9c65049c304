"""A resilient PyTorch trainer for the recovery test: DDP with gcagent's hook trains an MLP
(64-128-64-10) on scikit-learn's digits, each trainer on its share of the training split. A step
whose backward raises gcagent.GcagentError is dropped (no optimizer step: the weights stay) and
the loop goes on, as a training loop that catches the error does. Each step also takes --pace-ms
of "compute", failed or not, so a fault lands mid-run.

    torch_recovery.py --steps N [--pace-ms MS] [--fsdp]

--fsdp trains the same MLP under FSDP2, sharded over each node's trainers, with
gcagent.torch.fsdp.hsdp across nodes (no DDP). Either way the trainer calls the state's
sync_parameters after every step (the replicas made one again after a fault).

Prints "step=I ok" or "step=I failed: MESSAGE" per step, and last "report: {json}" with the
steps that failed and the test accuracy of its model."""

import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gcagent
import gcagent.torch
import gcagent.torch.fsdp

# WORLD_RANK from the tests' own start_trainers, RANK from gcagent-run.
RANK = int(os.environ.get("WORLD_RANK") or os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--pace-ms", type=float, default=0)
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--out-dir", help="write the lines to OUT_DIR/rank<R>.txt instead (trainers that would share "
                    "one output, as under gcagent-run)")
    a = ap.parse_args()
    if a.out_dir:
        sys.stdout = open(os.path.join(a.out_dir, f"rank{RANK}.txt"), "w", buffering=1)
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=RANK, world_size=WORLD)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    xtr, ytr = xtr[RANK::WORLD], ytr[RANK::WORLD]
    torch.manual_seed(0)  # the same initial weights everywhere
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        mesh = gcagent.torch.fsdp.node_mesh()
        for layer in mlp[::2]:
            fully_shard(layer, mesh=mesh)
        model = fully_shard(mlp, mesh=mesh)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        state = gcagent.torch.fsdp.hsdp(model, codec="none", timeout_s=120)
    else:
        model = DistributedDataParallel(mlp, bucket_cap_mb=0.01,
                                        gradient_as_bucket_view=True)  # as the README asks: buckets in the agent's slots
        # With momentum: a reload that left the optimizer's state behind would leave the nodes'
        # models apart again at once. (test_torch_fsdp.py checks the FSDP state's alike.)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        state = gcagent.torch.State(codec="none", optimizer=optimizer, timeout_s=120)
        model.register_comm_hook(state, gcagent.torch.hook)
    order = torch.Generator().manual_seed(1000 + RANK)
    failed = 0
    for step in range(1, a.steps + 1):
        idx = torch.randint(0, len(xtr), (32,), generator=order)
        started = time.monotonic()
        optimizer.zero_grad()
        try:
            nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            optimizer.step()
            print(f"step={step} ok", flush=True)
        except gcagent.GcagentError as e:
            failed += 1
            print(f"step={step} failed: {e}", flush=True)
        root = state.client.resync_root
        if a.fsdp:
            if state.sync_parameters(optimizer):  # replicas that may differ: one model again
                print(f"step={step} loaded the weights of node {root}", flush=True)
        else:
            if gcagent.torch.sync_parameters(state, model.module, optimizer):  # a node taken (back) in: one model again
                print(f"step={step} loaded the weights of node {root}", flush=True)
            print(f"  hook step={state.step} fallback={state.fallback_buckets} agent={state.agent_buckets}", flush=True)
        left = a.pace_ms / 1e3 - (time.monotonic() - started)
        if left > 0:
            time.sleep(left)
    with torch.no_grad():
        accuracy = float((mlp(xte).argmax(dim=1) == yte).float().mean()) * 100
    weights = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in mlp.parameters()]
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in weights)).hexdigest()
    print("report: " + json.dumps({"rank": RANK, "failed": failed, "accuracy": accuracy, "reconnects": state.reconnects,
                                   "resyncs": state.resyncs, "model": digest}), flush=True)
    os._exit(0)  # the process group's teardown would wait for peers that may have left


if __name__ == "__main__":
    main()
