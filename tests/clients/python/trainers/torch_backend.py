"""Trainers on the gcagent torch.distributed backend, started by plain torchrun (the test
starts one torchrun per node):

    torch_backend.py collectives          the collectives' results against values PyTorch's
                                          own tests expect (test_c10d_gloo, distributed_test)
    torch_backend.py ddp BACKEND STEPS    a model trained with DDP and no comm hook on BACKEND
                                          (gcagent or gloo); reports every parameter

    torch_backend.py hsdp BACKEND STEPS   FSDP2's own HSDP (fully_shard on a 2-D DeviceMesh made
                                          on BACKEND: replicate across nodes, shard within)
    torch_backend.py residuals STEPS      two tensors of one size allreduced through one 2bit
                                          group, and each through a group of its own
    torch_backend.py disagree             ranks that make a group with different options
    torch_backend.py hook CODEC PARAMS STEPS   DDP on the gcagent backend with gcagent's comm
                                          hook (compressed buckets), the shim finding the
                                          backend's agent by itself
    torch_backend.py group CODEC PARAMS STEPS  DDP, no hook, on a group made with
                                          pg_options=gcagent.torch.Options(codec=CODEC)
    torch_backend.py fault kill|freeze    DDP trains 3 steps; then node 1's agent is killed
                                          (SIGKILL) or frozen (SIGSTOP) and every rank reports
                                          how its next step and plain all_reduces end

Each rank writes its report to $REPORT_DIR/rank<RANK>.json."""

import json
import logging
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch import nn

import gcagent.torch  # noqa: F401 - registers the backend
from gcagent.torch import backend as gcagent_backend


def collectives():
    dist.init_process_group("gcagent")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    # distributed_test's _test_all_reduce_helper: the source rank holds 2, every other 10.
    for op, name, master, worker, expect in [(dist.ReduceOp.SUM, "sum", 2, 10, 2 + 10 * (world - 1)),
                                             (dist.ReduceOp.MIN, "min", 1010, 2, 2),
                                             (dist.ReduceOp.MAX, "max", -1, 10, 10),
                                             (dist.ReduceOp.PRODUCT, "product", 2, 2, 2 ** world)]:
        ok = True
        for src in range(world):
            t = torch.full((src + 1,) * 3, float(master if rank == src else worker))
            work = dist.all_reduce(t, op, async_op=src % 2 == 1)
            if work is not None:
                work.wait()
            ok &= bool(torch.equal(t, torch.full_like(t, float(expect))))
        out[name] = ok
    # test_c10d_gloo's simple_reduce_tests: each rank holds rank + 1.
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    out["simple_sum"] = t.item() == world * (world + 1) / 2
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, dist.ReduceOp.AVG)
    out["avg"] = t.item() == (world + 1) / 2
    for dtype in (torch.bfloat16, torch.float16):
        t = torch.full((1000,), float(rank + 1), dtype=dtype)
        dist.all_reduce(t)
        out[f"sum_{dtype}"] = bool(torch.equal(t, torch.full_like(t, world * (world + 1) / 2)))
    # distributed_test's _test_all_reduce_coalesced_helper (SUM): per-tensor sums.
    tensors = [torch.full((5,), float(rank + 1)), torch.full((7,), float(2 * rank))]
    dist.all_reduce_coalesced(tensors)
    out["coalesced"] = (bool(torch.equal(tensors[0], torch.full((5,), world * (world + 1) / 2))) and
                        bool(torch.equal(tensors[1], torch.full((7,), float(world * (world - 1))))))
    t = torch.arange(6, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(t)
    out["int64"] = bool(torch.equal(t, torch.arange(6) * (world * (world + 1) // 2)))
    b = torch.tensor([float(rank)] * 3)
    dist.broadcast(b, src=world - 1)
    out["broadcast"] = b.tolist() == [float(world - 1)] * 3
    gathered = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank, rank * 10.0]))
    out["allgather"] = [g.tolist() for g in gathered] == [[r, r * 10.0] for r in range(world)]
    dist.barrier()
    try:  # on gloo, as gloo does it
        dist.all_reduce(torch.ones(3, dtype=torch.int32), dist.ReduceOp.AVG)
        out["avg_int"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["avg_int"] = str(e)
    dist.barrier()
    # A group with one rank per node (HSDP's replicate groups) reduces through the agents, a
    # job of its own; one node's ranks (a shard group) run on gloo, and say so.
    for name, ranks in (("spread", [r for r in range(world) if r % 2 == 0]), ("node", [0, 1])):
        sub = dist.new_group(ranks)
        if rank in ranks:
            t = torch.full((4,), float(rank + 1))
            dist.all_reduce(t, group=sub)
            out[name] = t.tolist() == [float(sum(r + 1 for r in ranks))] * 4
            b = sub._get_backend(torch.device("cpu"))
            out[f"{name}_calls"] = [b.agent_calls, dict(b.gloo_calls)]
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    out["agent_calls"] = backend.agent_calls
    out["gloo_calls"] = dict(backend.gloo_calls)
    out["backend"] = dist.get_backend()
    dist.destroy_process_group()
    return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.layers(x)


def ddp(backend, steps, codec=None, params="", via="hook"):
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    params = dict(kv.split("=") for kv in params.split(",") if kv)
    group = None
    if codec is not None and via == "group":
        group = dist.new_group(pg_options=gcagent.torch.Options(codec=codec, params=params, min_elements=0))
    model = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.01, process_group=group)  # several buckets
    state = None
    if codec is not None and via == "hook":
        state = gcagent.torch.State(codec=codec, params=params)
        model.register_comm_hook(state, gcagent.torch.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    teacher = torch.randn(32, 10, generator=torch.Generator().manual_seed(7))  # labels a model can learn
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = (x @ teacher).argmax(dim=1)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out = {"losses": losses, "params": [p.detach().reshape(-1).tolist() for p in model.parameters()],
           "backend": dist.get_backend()}
    if backend == "gcagent":
        b = (group or dist.group.WORLD)._get_backend(torch.device("cpu"))
        out["agent_calls"], out["gloo_calls"] = b.agent_calls, dict(b.gloo_calls)
        out["keys"], out["retired_keys"] = len(b._specs), b.retired_keys
        logged = model._get_ddp_logging_data()
        out["buckets"] = [len(logged[k].split(",")) for k in ("bucket_sizes", "rebuilt_bucket_sizes")]
    if state is not None:
        out["hook_job"] = state.client.job
    dist.destroy_process_group()
    return out


def hsdp(backend, steps):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (world // local, local), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = Net()
    for layer in model.layers:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    teacher = torch.randn(32, 10, generator=torch.Generator().manual_seed(7))
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 32, generator=g)
        loss = nn.functional.cross_entropy(model(x), (x @ teacher).argmax(dim=1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out = {"losses": losses, "params": [p.full_tensor().reshape(-1).tolist() for p in model.parameters()]}
    if backend == "gcagent":
        out["groups"] = {}
        for dim in ("replicate", "shard"):
            b = mesh[dim].get_group()._get_backend(torch.device("cpu"))
            out["groups"][dim] = [b.agent_calls, dict(b.gloo_calls)]
    dist.destroy_process_group()
    return out


def residuals(steps):
    """A compressed group keys residuals by tensor: two persistent tensors of one size through
    one group must give what each gives through a group of its own."""
    dist.init_process_group("gcagent")
    rank = dist.get_rank()
    world = list(range(dist.get_world_size()))
    opts = gcagent.torch.Options(codec="2bit", params={"threshold": "0.5"}, min_elements=0)
    shared = dist.new_group(world, pg_options=opts)
    own = [dist.new_group(world, pg_options=opts) for _ in range(2)]
    tensors = [torch.zeros(4096), torch.zeros(4096)]
    out = {"shared": [], "own": []}
    # Keys own their owner node (the agents spread keys over nodes by number): B's own group
    # gives its first key to another tensor, so that B is key 2 in both runs, as A is key 1.
    dist.all_reduce(torch.zeros(8), group=own[1])
    for name, groups in (("shared", [shared, shared]), ("own", own)):
        for step in range(steps):
            for i, (t, g) in enumerate(zip(tensors, groups)):
                gen = torch.Generator().manual_seed(100 * step + 10 * rank + i)
                t.copy_(torch.randn(4096, generator=gen) * (0.2 if i == 0 else 0.9) + (0.3 if i == 0 else -0.6))
                dist.all_reduce(t, group=g)
                out[name].append(t.tolist())
    exact = torch.zeros(4096)
    for r in world:
        gen = torch.Generator().manual_seed(100 * (steps - 1) + 10 * r + 1)
        exact += torch.randn(4096, generator=gen) * 0.9 - 0.6
    out["exact_last"] = exact.tolist()
    out["keys"] = [len(shared._get_backend(torch.device("cpu"))._specs)]
    dist.destroy_process_group()
    return out


def fault(kind):
    dist.init_process_group("gcagent")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.01)
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):
        model(x).sum().backward()
    dist.all_reduce(torch.zeros(4096))  # the agents know this shape's key from now on
    dist.barrier()  # gloo: every rank is between steps
    agent = gcagent_backend._node.agent  # local rank 0 of node 1 started node 1's agent
    if rank == 2:
        os.kill(agent.proc.pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    dist.barrier()
    out = {}
    try:
        model(x).sum().backward()
        out["ddp_error"] = None
    except Exception as e:  # noqa: BLE001
        out["ddp_error"] = f"{type(e).__name__}: {e}"
    # A shape the agents know (submitted, then failed) and a new one (its key's declaration fails).
    for name, size in (("allreduce", 4096), ("new_shape", 8192)):
        t = torch.full((size,), float(rank))
        try:
            dist.all_reduce(t)
            out[f"{name}_error"] = None
        except Exception as e:  # noqa: BLE001
            out[f"{name}_error"] = f"{type(e).__name__}: {e}"
        out[f"{name}_untouched"] = bool(torch.equal(t, torch.full((size,), float(rank))))
    dist.barrier()
    if rank == 2 and kind == "freeze":
        os.kill(agent.proc.pid, signal.SIGCONT)
    return out


def disagree():
    dist.init_process_group("gcagent")
    rank = dist.get_rank()
    try:
        dist.new_group(pg_options=gcagent.torch.Options(codec="2bit" if rank == 3 else "fp8"))
        return {"error": None}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)  # the backend says which operations run on gloo
    mode = sys.argv[1]
    if mode == "collectives":
        report = collectives()
    elif mode == "ddp":
        report = ddp(sys.argv[2], int(sys.argv[3]))
    elif mode == "disagree":
        report = disagree()
    elif mode == "residuals":
        report = residuals(int(sys.argv[2]))
    elif mode == "fault":
        report = fault(sys.argv[2])
    elif mode == "hsdp":
        report = hsdp(sys.argv[2], int(sys.argv[3]))
    else:  # hook or group
        report = ddp("gcagent", int(sys.argv[4]), sys.argv[2], sys.argv[3], via=mode)
    with open(os.path.join(os.environ["REPORT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(report, f)
