"""fp16 mixed precision's overflow steps, as torch.amp.GradScaler meets them, through DDP over
gloo and through gcagent (the DDP hook, DistributedOptimizer) with several codecs, one job
each, the same model, data and injected overflows. Rank 0's gradient overflows at two steps:
one element set to inf (a layer's gradient hook) and a loss scaled past fp32's range (every
gradient inf or NaN). Every rank must then see a non-finite gradient, skip the step and halve
the scale, exactly as under DDP, and no later step may hold a NaN.

    torch_overflow.py CODEC...   (gloo is DDP's own allreduce)

Prints "report: {codec: {...}}" last."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gcagent
import gcagent.torch

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])
STEPS = 14
ONE_ELEMENT, WHOLE_LOSS = 6, 10  # the overflowing steps (the hook learns buckets in steps 1-3)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def batch(it):
    g = torch.Generator().manual_seed(1000 * it + RANK)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def run(codec, optimizer_path=False):
    model = mlp()
    step = {"it": 0}

    def overflow_one(grad):  # rank 0's first layer: one element past fp16's range
        if RANK == 0 and step["it"] == ONE_ELEMENT:
            grad = grad.clone()
            grad.view(-1)[5] = float("inf")
        return grad

    model[0].weight.register_hook(overflow_one)
    if optimizer_path:
        reducer = gcagent.Reducer(gcagent.Client(job=f"amp-opt-{codec}"), codec=codec)
        opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), reducer)
        net = model
    else:
        net = DistributedDataParallel(model, bucket_cap_mb=0.01)
        if codec != "gloo":
            net.register_comm_hook(gcagent.torch.State(gcagent.Client(job=f"amp-{codec}"), codec=codec),
                                   gcagent.torch.hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=4)
    scales, skipped, non_finite_grads, later_nan = [], [], [], False
    for it in range(1, STEPS + 1):
        step["it"] = it
        opt.zero_grad()
        x, y = batch(it)
        loss = nn.functional.cross_entropy(net(x), y)
        if RANK == 0 and it == WHOLE_LOSS:
            loss = loss * 1e38  # scaled by the loss scale: past fp32's range
        scaler.scale(loss).backward()
        if optimizer_path:
            opt.synchronize()
        grads = [p.grad for p in model.parameters()]
        non_finite_grads.append(sum(int((~torch.isfinite(g)).sum()) for g in grads))
        before = [p.detach().clone() for p in model.parameters()]
        if optimizer_path:
            with opt.skip_synchronize():
                scaler.step(opt)
        else:
            scaler.step(opt)
        scaler.update()
        skipped.append(all(torch.equal(a, p.detach()) for a, p in zip(before, model.parameters())))
        scales.append(scaler.get_scale())
        if it > WHOLE_LOSS and any(not bool(torch.isfinite(p).all()) for p in model.parameters()):
            later_nan = True
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"scales": scales, "skipped": skipped, "non_finite": [n > 0 for n in non_finite_grads],
            "later_nan": later_nan, "param_sum": float(params.double().sum()),
            "params_finite": bool(torch.isfinite(params).all())}


if __name__ == "__main__":
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=RANK, world_size=WORLD)
    report = {}
    for name in sys.argv[1:]:
        codec, _, path = name.partition(":")
        report[name] = run(codec, optimizer_path=path == "optimizer")
    print("report: " + json.dumps(report), flush=True)
    os._exit(0)
