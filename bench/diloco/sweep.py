"""DiLoCo's hyperparameters on the benchmark's language model (lm.py), simulated in one
process without the agents: M workers train in turn on their own windows and average their
pseudo-gradients every H steps through an outer SGD (plain averaging at lr 1, momentum 0), or
DDP over the M workers' batches (the mean of their gradients every step). Same model, data,
seeds and batches as run.py's trainers, so it picks run.py's settings in minutes of CPU per
point rather than a cluster run. Prints one JSON line: the arguments, the validation loss at
--evals points, the seconds.

  python bench/diloco/sweep.py --mode ddp --steps 1000 --lr 3e-3 --schedule cosine --warmup 50
  python bench/diloco/sweep.py --sync-every 20 --steps 1000 --lr 3e-3 --schedule cosine --warmup 50
"""

import argparse
import copy
import json
import math
import time

import torch

import lm

CONTEXT = 64


def lr_factor(step, steps, schedule, warmup):
    """Linear warm-up, then constant or a cosine down to a tenth."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "cosine":
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
    return 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["diloco", "ddp"], default="diloco")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sync-every", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--outer-lr", type=float, default=1.0)
    ap.add_argument("--outer-momentum", type=float, default=0.0)
    ap.add_argument("--evals", type=int, default=4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    train, val, _ = lm.corpus()
    torch.manual_seed(0)
    start_model = lm.LanguageModel(context=CONTEXT)
    generators = [torch.Generator().manual_seed(1000 + r) for r in range(a.workers)]
    out = {"args": vars(a), "val_loss": []}
    began = time.time()
    if a.mode == "ddp":
        models = [start_model]
    else:
        models = [copy.deepcopy(start_model) for _ in range(a.workers)]
        outer = torch.optim.SGD(start_model.parameters(), lr=a.outer_lr, momentum=a.outer_momentum,
                                nesterov=a.outer_momentum > 0)
    inner = [torch.optim.AdamW(m.parameters(), lr=a.lr) for m in models]
    for step in range(a.steps):
        for opt in inner:
            for group in opt.param_groups:
                group["lr"] = a.lr * lr_factor(step, a.steps, a.schedule, a.warmup)
        if a.mode == "ddp":
            inner[0].zero_grad()
            for g in generators:
                x, y = lm.batch(train, g, a.batch, CONTEXT)
                (lm.loss_of(start_model, x, y) / a.workers).backward()
            inner[0].step()
        else:
            for model, opt, g in zip(models, inner, generators):
                x, y = lm.batch(train, g, a.batch, CONTEXT)
                opt.zero_grad()
                lm.loss_of(model, x, y).backward()
                opt.step()
            if (step + 1) % a.sync_every == 0:  # the outer step: global minus the workers' mean
                with torch.no_grad():
                    for p, *local in zip(start_model.parameters(), *[m.parameters() for m in models]):
                        p.grad = p - sum(local) / a.workers
                outer.step()
                with torch.no_grad():
                    for m in models:
                        for q, p in zip(m.parameters(), start_model.parameters()):
                            q.copy_(p)
        if (step + 1) % max(1, a.steps // a.evals) == 0:
            out["val_loss"].append((step + 1, lm.validation_loss(start_model, val, CONTEXT)))
    out["seconds"] = time.time() - began
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
