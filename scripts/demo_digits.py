"""The demo's trainer: a numpy MLP (64-128-64-10, ReLU) on scikit-learn's bundled digits,
data parallel through gcagent. Run by gcagent-run, once per trainer process:

    gcagent-run --nproc-per-node 2 ... scripts/demo_digits.py --epochs 15

Each trainer takes its share of the training split (every RANK-th sample) and mini-batches of
32; the averaged gradients (gcagent.Reducer, codec from GCAGENT_CODEC and
GCAGENT_CODEC_PARAMS) drive plain SGD, from rank 0's initial weights (Reducer.broadcast).
Rank 0 prints the test accuracy of each epoch, the median time of its steps, and the bytes its
agent has sent on the wire and raw so far (the agent's /metrics, at GCAGENT_NODE_METRICS);
last, a "result:" JSON line."""

import argparse
import json
import os
import re
import sys
import time
import urllib.request

import numpy as np

import gcagent

SIZES = [64, 128, 64, 10]


def load_split(rank, world):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return xtr[rank::world], ytr[rank::world], xte, yte


def init_weights(seed):
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in zip(SIZES, SIZES[1:]):
        bound = 1 / np.sqrt(n_in)  # as torch.nn.Linear
        params += [rng.uniform(-bound, bound, (n_in, n_out)).astype(np.float32),
                   rng.uniform(-bound, bound, n_out).astype(np.float32)]
    return params


def forward(params, x):
    """Activations of every layer; the last are the logits."""
    acts = [x]
    for i in range(0, len(params), 2):
        z = acts[-1] @ params[i] + params[i + 1]
        acts.append(np.maximum(z, 0) if i + 2 < len(params) else z)
    return acts


def gradients(params, x, y):
    """Mean cross-entropy gradients of every parameter, by backpropagation."""
    acts = forward(params, x)
    logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    delta = probs
    delta[np.arange(len(y)), y] -= 1
    delta /= len(y)
    grads = [None] * len(params)
    for i in range(len(params) - 2, -1, -2):
        grads[i], grads[i + 1] = acts[i // 2].T @ delta, delta.sum(axis=0)
        if i:
            delta = (delta @ params[i].T) * (acts[i // 2] > 0)
    return grads


def sent_bytes(metrics_addr):
    """(wire, raw) bytes this node's agent has sent, from its Prometheus counters."""
    if not metrics_addr:
        return None
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10).read().decode()

    def total(name):
        return sum(float(v) for v in re.findall(rf'^{name}{{[^}}]*direction="sent"[^}}]*}} (\S+)$', text, re.M))
    return total("gcagent_wire_bytes_total"), total("gcagent_raw_bytes_total")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    xtr, ytr, xte, yte = load_split(rank, world)
    reducer = gcagent.Reducer()
    params = init_weights(seed=rank)  # different on purpose: the broadcast makes them rank 0's
    params = reducer.broadcast([(k, p, -k) for k, p in enumerate(params)])
    order = np.random.default_rng(1000 + rank)
    steps = -(-len(xtr) // a.batch)  # every trainer takes the same number of steps
    step_times, accuracy = [], 0.0
    for epoch in range(1, a.epochs + 1):
        perm = order.permutation(len(xtr))
        for s in range(steps):
            idx = perm[(s * a.batch) % len(xtr):][:a.batch]
            started = time.perf_counter()
            grads = gradients(params, xtr[idx], ytr[idx])
            # Priority minus the layer index: the first layer goes first.
            averaged = reducer.reduce([(k, g, -(k // 2)) for k, g in enumerate(grads)])
            params = [p - np.float32(a.lr) * g for p, g in zip(params, averaged)]
            step_times.append(time.perf_counter() - started)
        if rank == 0:
            accuracy = float((forward(params, xte)[-1].argmax(axis=1) == yte).mean()) * 100
            line = (f"epoch {epoch:2d}  test accuracy {accuracy:5.1f}%  step {np.median(step_times) * 1e3:6.2f} ms")
            sent = sent_bytes(os.environ.get("GCAGENT_NODE_METRICS"))
            if sent:
                line += f"  node 0 sent {sent[0] / 1e6:7.3f} MB on the wire for {sent[1] / 1e6:7.3f} MB raw"
            print(line, flush=True)
    if rank == 0:
        print("result: " + json.dumps({"accuracy": accuracy, "step_ms": float(np.median(step_times)) * 1e3}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
