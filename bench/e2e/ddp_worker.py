"""One rank of the PyTorch side of bench/e2e: runs inside a node's network namespace and prints
one line "result: {json}".

Workloads:
- gradset: a model whose parameters have the shapes of a gradient set (bench/models/*.csv).
  Each iteration multiplies every parameter by a fixed random tensor and sums (the backward
  pass then writes that tensor into every gradient), under DDP. The gradient-sync time is the
  DDP iteration minus the same iteration under `model.no_sync()` (no communication), both as
  medians over the timed iterations.
- hsdp: the gradient set under FSDP2, sharded over each node's trainers (LOCAL_WORLD_SIZE), one
  FSDP module per layer (rows named alike up to their layer number: encoder.layer.3, ...; the
  rest in the root). --hook fsdp: FSDP2's own HSDP (a nodes x local mesh; the replica all-reduce
  over gloo across nodes); --hook gcagent: the node's mesh, and gcagent.torch.fsdp.hsdp (the
  agents across nodes; codec from GCAGENT_CODEC); --hook fsdp-node: the node's mesh and nothing
  across nodes (the nodes' models drift apart: a timing of the in-node part alone);
  --hook fsdp-world: FSDP2 over every trainer (no replication), its reduce-scatter over gloo;
  --hook gcagent-world: the same mesh, the reduce-scatter through the agents
  (gcagent.torch.fsdp.fsdp). The sync time is the iteration minus the same iteration with
  set_requires_gradient_sync(False) (no reduce-scatter, no all-reduce); both keep FSDP's
  all-gathers (inside the node, or over every trainer for the world rows).
- mlp: a real small training loop (an MLP on scikit-learn's digits, batch 32 per rank, SGD);
  the number is the median time of a whole training step (forward, backward with sync, step).

Hooks (--hook): allreduce (DDP's default gloo allreduce), fp16 (default_hooks.fp16_compress_hook),
powersgd1 / powersgd4 (powerSGD_hook at that rank, from the second iteration on: DDP needs two
iterations first), gcagent (gcagent.torch.hook; codec from GCAGENT_CODEC), optimizer (no DDP:
gcagent.torch.DistributedOptimizer, whose step() reduces every gradient through the agent after
the backward pass; its sync time is synchronize()'s, begun together on every rank). The gcagent hook
learns DDP's buckets first (process-group allreduce while the bucket list still changes: the
first three iterations); the worker fails when a timed gradset iteration did not go through the
agent, so give it --warmup 4 or more.
Bytes on the wire are the namespace's non-loopback tx bytes over the timed iterations.
CPU: cpu_s is the whole process's CPU time per timed iteration (backward included; wall_s the
iterations' whole wall times), shim_cpu_s the part gcagent's shim spent (the hook's completion thread and its calls, or synchronize()).

--check exact|fp16|bf16 (gradset, hsdp): after the timed iterations, one more synced iteration from
zeroed gradients, and every gradient compared with the average of every rank's gradient tensor
(regenerated here from the ranks' seeds), within 1e-6 (exact: allreduce, gcagent none), 2e-4
(fp16 on values below 1/16) or 5e-4 (bf16); the largest difference is reported, a larger one fails the rank."""

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from models import read_shapes


def rank_gradients(shapes, rank):
    """The gradient a rank's backward pass produces, tensor by tensor: values in [-1/16, 1/16),
    like the C trainer's, from a generator seeded with the rank."""
    gen = torch.Generator().manual_seed(rank)
    for _, s in shapes:
        yield torch.rand(s, generator=gen) / 8 - 1 / 16


class GradientSet(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(s)) for _, s in shapes])
        self.grads = list(rank_gradients(shapes, dist.get_rank()))

    def forward(self, x):
        return sum((p * g).sum() for p, g in zip(self.params, self.grads)) * x


def wire_tx():
    total = 0
    for dev in Path("/sys/class/net").iterdir():
        if dev.name != "lo":
            total += int((dev / "statistics" / "tx_bytes").read_text())
    return total


def thread_cpu_seconds(thread) -> float:
    """CPU time of another thread of this process (its schedstat, in nanoseconds)."""
    with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


class ShimClock:
    """The CPU time gcagent's DDP hook spends: its calls in the autograd thread and its
    completion thread's, measured here so that any version of the shim can be compared."""

    def __init__(self, state):
        self.state, self.in_calls = state, 0.0

    def hook(self, state, bucket):
        import gcagent.torch
        started = time.thread_time()
        try:
            return gcagent.torch.hook(state, bucket)
        finally:
            self.in_calls += time.thread_time() - started

    def seconds(self):
        return self.in_calls + thread_cpu_seconds(self.state._thread)


def register(model, hook, rank):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook.startswith("powersgd"):
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(hook[len("powersgd"):]),
                                   start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, psgd.powerSGD_hook)
    elif hook == "gcagent":
        import gcagent.torch
        state = gcagent.torch.State()
        state.clock = ShimClock(state)
        model.register_comm_hook(state, state.clock.hook)
        return state
    elif hook != "allreduce":
        raise SystemExit(f"ddp_worker: unknown hook {hook!r}")
    return None


# bf16: 8 significant bits, rounded at most twice (a node's share, then the average) on values
# below 1/16.
TOLERANCE = {"exact": 1e-6, "fp16": 2e-4, "bf16": 5e-4}


def timed_together(step, iterations):
    """The seconds of each of `iterations` calls of step(), every rank starting each together."""
    times = []
    for _ in range(iterations):
        dist.barrier()
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return times


def check_average(model, shapes, tolerance):
    """The largest difference between a synced gradient and the average over every rank of the
    gradients the ranks produced (each rank's regenerated tensor by tensor, so one tensor of
    each is held at a time); raises past `tolerance`."""
    world = dist.get_world_size()
    streams = [rank_gradients(shapes, r) for r in range(world)]
    worst = 0.0
    for (name, _), p in zip(shapes, model.params):
        expected = sum(next(g) for g in streams) / world
        diff = (p.grad - expected).abs().max().item()
        if not diff <= tolerance:  # NaN fails too
            raise SystemExit(f"ddp_worker: rank {dist.get_rank()}: gradient {name} differs from the average "
                             f"of every rank's by {diff:.3g} (tolerance {tolerance:g})")
        worst = max(worst, diff)
    return worst


def optimizer_gradset(a, rank):
    """The gradient set through gcagent.torch.DistributedOptimizer: no DDP, every gradient
    reduced by the agent at step(), after the backward pass (nothing overlaps). The sync time is
    synchronize()'s, every rank starting it together (a barrier after the backward pass), as
    the C trainer submits every layer at once; zero_grad() keeps the gradients in the slots."""
    import gcagent.torch
    shapes = read_shapes(a.model)
    model = GradientSet(shapes)
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0))
    x = torch.ones(())

    def backward():
        opt.zero_grad()
        model(x).backward()
        dist.barrier()

    for _ in range(a.warmup):
        backward()
        opt.step()
    times, walls, shim, tx0, cpu0 = [], [], 0.0, wire_tx(), time.process_time()
    for _ in range(a.iterations):
        w = time.perf_counter()
        backward()
        t, c = time.perf_counter(), time.thread_time()
        opt.synchronize()
        shim += time.thread_time() - c
        times.append(time.perf_counter() - t)
        walls.append(time.perf_counter() - w)
    cpu = (time.process_time() - cpu0) / a.iterations
    dist.barrier()
    tx = (wire_tx() - tx0) / a.iterations
    out = {"iteration_s": times, "wall_s": walls, "sync_s": statistics.median(times), "wire_bytes": tx, "cpu_s": cpu,
           "shim_cpu_s": shim / a.iterations, "grad_bytes": sum(p.numel() for p in model.params) * 4}
    if a.check != "none":
        backward()
        opt.synchronize()
        out["check"] = a.check
        out["check_max_error"] = check_average(model, shapes, TOLERANCE[a.check])
    return out


def backend_group():
    """On the gcagent backend with a codec (BENCH_BACKEND_CODEC): a group made with
    gcagent.torch.Options(codec) for DDP's buckets; else the default group."""
    codec = os.environ.get("BENCH_BACKEND_CODEC", "none")
    if os.environ.get("BENCH_BACKEND") != "gcagent" or codec == "none":
        return None
    import gcagent.torch
    params = dict(kv.split("=", 1) for kv in os.environ.get("BENCH_BACKEND_PARAMS", "").split(",") if kv)
    return dist.new_group(pg_options=gcagent.torch.Options(codec=codec, params=params, min_elements=0))


def gradset(a, rank):
    if a.hook == "optimizer":
        return optimizer_gradset(a, rank)
    shapes = read_shapes(a.model)
    model = GradientSet(shapes)
    # PowerSGD issues its second and third allreduce of a bucket from future callbacks: with
    # several buckets those interleave with the next buckets' in a different order on each
    # rank, and gloo fails ("Received data size doesn't match expected size"). One bucket
    # keeps the order; the others keep DDP's default 25 MB buckets.
    cap = {"bucket_cap_mb": 1e5} if a.hook.startswith("powersgd") else {}
    ddp = DDP(model, gradient_as_bucket_view=True, process_group=backend_group(), **cap)
    state = register(ddp, a.hook, rank)
    x = torch.ones(())

    def step():
        ddp(x).backward()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    agent0, fallback0 = (state.agent_buckets, state.fallback_buckets) if state else (0, 0)
    shim0 = state.clock.seconds() if state else 0.0
    tx0, cpu0 = wire_tx(), time.process_time()
    times = timed_together(step, a.iterations)
    cpu = (time.process_time() - cpu0) / a.iterations
    shim = (state.clock.seconds() - shim0) / a.iterations if state else 0.0
    # a rank is done once its own results are in; the agents may still be sending the peers'
    dist.barrier()
    tx = (wire_tx() - tx0) / a.iterations
    if state is not None and (state.fallback_buckets != fallback0 or state.agent_buckets == agent0):
        raise SystemExit(f"ddp_worker: rank {rank}: {state.fallback_buckets - fallback0} buckets of the timed "
                         f"iterations went through the process group, {state.agent_buckets - agent0} through "
                         "the agent: the hook had not learned DDP's buckets yet (raise --warmup)")
    local = []
    with ddp.no_sync():
        for _ in range(a.iterations):
            t = time.perf_counter()
            step()
            local.append(time.perf_counter() - t)
    elements = sum(p.numel() for p in model.params)
    out = {"iteration_s": times, "wall_s": times, "local_s": statistics.median(local),
           "sync_s": statistics.median(times) - statistics.median(local), "wire_bytes": tx, "cpu_s": cpu,
           "grad_bytes": elements * 4}
    if state is not None:
        out.update(agent_buckets=(state.agent_buckets - agent0) // a.iterations,
                   fallback_buckets=state.fallback_buckets, shim_cpu_s=shim,
                   moved_buckets=getattr(state, "moved_buckets", 0), copied_buckets=getattr(state, "copied_buckets", 0))
    if a.check != "none":
        dist.barrier()
        for p in model.params:
            p.grad.zero_()  # a view into DDP's bucket (gradient_as_bucket_view): zeroed in place
        step()
        if state is not None and state.fallback_buckets != fallback0:
            raise SystemExit(f"ddp_worker: rank {rank}: the checked iteration went through the process group")
        out["check"] = a.check
        out["check_max_error"] = check_average(model, shapes, TOLERANCE[a.check])
    return out


def layer_groups(shapes):
    """[(layer name, [row index])] in row order: rows whose names agree up to their first number
    (encoder.layer.3.*) form a layer; the other rows go to the root (""), as FSDP users wrap."""
    groups = {}
    for i, (name, _) in enumerate(shapes):
        m = re.match(r"(.*?\.\d+)\.", name)
        groups.setdefault(m.group(1) if m else "", []).append(i)
    return list(groups.items())


class Layer(nn.Module):
    def __init__(self, shapes, grads):
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(s)) for _, s in shapes])
        self.grads = grads

    def forward(self, x):
        return x + sum((p * g).sum() for p, g in zip(self.params, self.grads))


class ShardedGradientSet(nn.Module):
    """The gradient set as layers (layer_groups); the root holds the rows outside any layer."""

    def __init__(self, shapes):
        super().__init__()
        grads = list(rank_gradients(shapes, dist.get_rank()))
        groups = layer_groups(shapes)
        rest = dict(groups).get("", [])
        self.layers = nn.ModuleList(Layer([shapes[i] for i in rows], [grads[i] for i in rows])
                                    for name, rows in groups if name)
        self.root = Layer([shapes[i] for i in rest], [grads[i] for i in rest])  # registered last: parameters() order
        self.order = [i for name, rows in groups if name for i in rows] + rest  # parameters() order -> rows

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.root(x)


def hsdp(a, rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    world = dist.get_world_size()
    shapes = read_shapes(a.model)
    model = ShardedGradientSet(shapes)
    if a.hook == "fsdp":
        mesh = init_device_mesh("cpu", (world // local, local), mesh_dim_names=("replicate", "shard"))
    elif a.hook in ("fsdp-world", "gcagent-world"):  # FSDP without replication: over every trainer
        mesh = init_device_mesh("cpu", (world,))
    elif a.hook == "fsdp-node":  # the reduce-scatter inside the node alone: what every HSDP row pays first
        mesh = init_device_mesh("cpu", (world // local, local), mesh_dim_names=("node", "local"))["local"]
    else:
        import gcagent.torch.fsdp
        mesh = gcagent.torch.fsdp.node_mesh(local_size=local)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if a.hook == "gcagent-world":
        import gcagent.torch.fsdp
        state = gcagent.torch.fsdp.fsdp(model)
    else:
        state = gcagent.torch.fsdp.hsdp(model) if a.hook == "gcagent" else None
    x = torch.ones(())

    def step(sync=True):
        model.set_requires_gradient_sync(sync)
        for p in model.parameters():
            p.grad = None
        model(x).backward()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    tx0, cpu0 = wire_tx(), time.process_time()
    times = timed_together(step, a.iterations)
    cpu = (time.process_time() - cpu0) / a.iterations
    dist.barrier()
    tx = (wire_tx() - tx0) / a.iterations
    checked = {}
    if a.check != "none":  # before the unsynced steps, whose gradients FSDP keeps to reduce later
        dist.barrier()
        step()
        streams = [rank_gradients(shapes, r) for r in range(world)]
        expected = [sum(next(g) for g in streams) / world for _ in shapes]
        worst = 0.0
        for i, p in zip(model.order, model.parameters()):
            diff = (p.grad.full_tensor() - expected[i]).abs().max().item()
            if not diff <= TOLERANCE[a.check]:
                raise SystemExit(f"ddp_worker: rank {rank}: gradient {shapes[i][0]} differs from the average of "
                                 f"every rank's by {diff:.3g}")
            worst = max(worst, diff)
        checked = {"check": a.check, "check_max_error": worst}
    local_times = timed_together(lambda: step(sync=False), a.iterations)
    elements = sum(p.numel() for p in model.parameters())
    out = {"iteration_s": times, "wall_s": times, "local_s": statistics.median(local_times),
           "sync_s": statistics.median(times) - statistics.median(local_times), "wire_bytes": tx, "cpu_s": cpu,
           "grad_bytes": elements * 4}  # a DTensor's numel is the whole parameter's: the node's shards together
    if state is not None:
        out["agent_shards"] = state.shards
    out.update(checked)
    return out


def mlp(a, rank):
    import numpy as np
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = torch.from_numpy((x / 16.0).astype(np.float32))[rank::dist.get_world_size()]
    y = torch.from_numpy(y)[rank::dist.get_world_size()]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    ddp = DDP(model)
    state = register(ddp, a.hook, rank)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)

    def step():
        idx = torch.randint(0, len(x), (32,), generator=gen)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    times, tx0 = [], wire_tx()
    for _ in range(a.iterations):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    tx = (wire_tx() - tx0) / a.iterations
    out = {"iteration_s": times, "sync_s": statistics.median(times), "wire_bytes": tx, "loss": loss,
           "grad_bytes": sum(p.numel() for p in model.parameters()) * 4}
    if state is not None:
        out["agent_buckets"] = state.agent_buckets
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["gradset", "hsdp", "mlp"], required=True)
    ap.add_argument("--model", help="bench/models/*.csv for gradset")
    ap.add_argument("--hook", default="allreduce")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--check", choices=["none", *TOLERANCE], default="none",
                    help="gradset: compare one synced iteration's gradients with the average of every rank's")
    a = ap.parse_args()
    torch.set_num_threads(1)
    backend = os.environ.get("BENCH_BACKEND", "gloo")
    if backend == "gcagent":  # DDP with no hook on the gcagent backend (run.py's backend-<codec> rows)
        import gcagent.torch
    dist.init_process_group(backend)
    rank = dist.get_rank()
    result = {"gradset": gradset, "hsdp": hsdp, "mlp": mlp}[a.workload](a, rank)
    dist.barrier()
    print("result: " + json.dumps(result), flush=True)
    # destroy_process_group can hang in gloo teardown once every rank is done; nothing is left to do
    os._exit(0)


if __name__ == "__main__":
    main()
