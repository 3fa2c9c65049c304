"""A PyTorch trainer for the shim tests; the environment comes from shim_cluster.py.

    torch_trainer.py suite | suite-cuda | ddp-agent-dies | extras | checkpoint PHASE kept|rebuilt DIR

suite runs four parts, each as its own job on the agents: the DDP hook with codec none
against the reference average, a DDP training run with 2bit, DistributedOptimizer with
broadcast_parameters, and a bfloat16 model's buckets in bfloat16 slots. suite-cuda runs the two DDP parts with the model on GPU 0, so that the
hook's buckets take the agent's device path. extras: Horovod's names, backward_passes_per_step,
dgc's momentum warning, and agent errors as the training loop sees them (the last world rank
leaves the last job). checkpoint trains with the DDP hook and 2bit, and a torch.save per trainer
of model, optimizer and the hook's state in DIR: PHASE whole trains 2 x CHECKPOINT_STEPS steps;
save the first half and saves; resume loads and trains the second half; forget does too,
loading everything but the hook's state. It prints "report: {json}" last."""

import copy
import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gcagent
import gcagent.torch

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])
DEVICE = torch.device("cpu")  # where the DDP models live; suite-cuda moves them to GPU 0


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def batch(rank, it):
    g = torch.Generator().manual_seed(1000 * it + rank)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def reference_grads(model, it):
    """The average over every rank of the gradient each rank computes, in float64."""
    total = None
    for r in range(WORLD):
        model.zero_grad()
        x, y = batch(r, it)
        nn.functional.cross_entropy(model(x), y).backward()
        g = [p.grad.double().clone() for p in model.parameters()]
        total = g if total is None else [a + b for a, b in zip(total, g)]
    return [t / WORLD for t in total]


def max_error(params, reference):
    return max(float((p.grad.double().cpu() - r).abs().max()) for p, r in zip(params, reference))


def init_group():
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=RANK, world_size=WORLD)


def ddp(model, views=False):
    # Small buckets: several of them, so priorities and the rebuild matter.
    return DistributedDataParallel(model.to(DEVICE), bucket_cap_mb=0.01, gradient_as_bucket_view=views)


def in_slots(params, slots):
    """Whether every gradient lies inside one of the agent's slots (torch tensors)."""
    ranges = [(s.data_ptr(), s.data_ptr() + s.numel() * s.element_size()) for s in slots]
    return all(p.grad is not None and any(a <= p.grad.data_ptr() < b for a, b in ranges) for p in params)


def ddp_exact(views=False):
    """views: gradient_as_bucket_view=True, so the hook moves the buckets into their slots; the
    iterations then alternate zero_grad(set_to_none=True) (autograd makes new gradients, which
    DDP copies into the moved buckets) and set_to_none=False (they stay in the slots)."""
    ref = mlp()
    model = ddp(mlp(), views)
    state = gcagent.torch.State(gcagent.Client(job="exact-views" if views else "exact"), codec="none")
    position = {id(p): i for i, p in enumerate(model.parameters())}
    first_param = {}  # bucket index -> position of its first-layer-most parameter

    def recording_hook(s, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        first_param[bucket.index()] = min(position[id(p)] for p in bucket.parameters())
        return gcagent.torch.hook(s, bucket)

    model.register_comm_hook(state, recording_hook)
    errors, buckets, in_slot = [], [], []
    for it in range(1, 9):
        model.zero_grad(set_to_none=it % 2 == 0)
        x, y = batch(RANK, it)
        before = state.agent_buckets
        nn.functional.cross_entropy(model(x.to(DEVICE)), y.to(DEVICE)).backward()
        errors.append(max_error(model.parameters(), reference_grads(ref, it)))
        buckets.append(state.agent_buckets - before)
        in_slot.append(state.device is None and in_slots(model.parameters(), state._slots.values()))
    # Priority order of the buckets, highest first, and where each bucket's layers start.
    order = sorted(state.priorities, key=lambda i: -state.priorities[i])
    return {"errors": errors, "agent_buckets": buckets, "fallback": state.fallback_buckets, "device": str(state.device),
            "declared": sorted(state.declared.items()), "first_param_by_priority": [first_param[i] for i in order],
            "moved": state.moved_buckets, "copied": state.copied_buckets, "in_slots": in_slot}


def ddp_train():
    torch.manual_seed(0)
    model = ddp(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    state = gcagent.torch.State(gcagent.Client(job="train"), codec="2bit", params={"threshold": "0.005"})
    model.register_comm_hook(state, gcagent.torch.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    torch.manual_seed(7)
    w = torch.randn(32, 10)
    losses = []
    for it in range(1, 41):
        x = torch.randn(64, 32, generator=torch.Generator().manual_seed(100 * it + RANK))
        y = (x @ w).argmax(1)
        x, y = x.to(DEVICE), y.to(DEVICE)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"first_loss": sum(losses[:5]) / 5, "last_loss": sum(losses[-5:]) / 5, "param_sum": float(params.sum()),
            "agent_buckets": state.agent_buckets, "device": str(state.device)}


CHECKPOINT_STEPS = 10


def checkpointed(phase, kept, directory):
    """kept: DDP keeps the buckets of its first step (find_unused_parameters=True), so a restart
    makes the saved ones at once; else it rebuilds them after the first step, in the order the
    gradients came, and a restart learns them again."""
    init_group()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                                  nn.Linear(64, 10)), bucket_cap_mb=0.01, find_unused_parameters=kept)
    state = gcagent.torch.State(gcagent.Client(job="checkpoint"), codec="2bit", params={"threshold": "0.005"})
    model.register_comm_hook(state, gcagent.torch.hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    path = os.path.join(directory, f"{'kept' if kept else 'rebuilt'}-rank{RANK}.pt")
    first, last = 1, 2 * CHECKPOINT_STEPS
    if phase in ("resume", "forget"):
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        if phase == "resume":
            state.load_state_dict(saved["gcagent"])
        first = CHECKPOINT_STEPS + 1
    elif phase == "save":
        last = CHECKPOINT_STEPS
    torch.manual_seed(7)
    w = torch.randn(32, 10)
    losses, fallback_before = [], state.fallback_buckets
    for it in range(first, last + 1):
        x = torch.randn(64, 32, generator=torch.Generator().manual_seed(100 * it + RANK))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), (x @ w).argmax(1))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    report = {"losses": losses, "params": params.tolist(), "fallback": state.fallback_buckets - fallback_before,
              "agent_buckets": state.agent_buckets, "dropped": state.dropped_residuals}
    if phase == "save":
        hook_state = state.state_dict()
        torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "gcagent": hook_state}, path)
        report["residual_bytes"] = sum(len(v) for v in hook_state[f"rank{RANK}"]["residuals"].values())
    return report


def optimizer_exact():
    model = mlp(seed=RANK)  # different on every trainer until the broadcast
    reducer = gcagent.Reducer(gcagent.Client(job="optimizer"), codec="none")
    gcagent.torch.broadcast_parameters(model.parameters(), reducer)
    ref = mlp(seed=0)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters()))
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), reducer)
    errors, in_slot = [], []
    for it in range(1, 5):
        if it == 3:
            model.zero_grad()  # None gradients: moved into their slots again at the next step
        else:
            opt.zero_grad()  # zeroed where they are, in their slots
        x, y = batch(RANK, it)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.synchronize()
        errors.append(max_error(model.parameters(), reference_grads(copy.deepcopy(model), it)))
        in_slot.append(in_slots(model.parameters(), [torch.from_numpy(s) for s in reducer._slots.values()]))
        opt.optimizer.step()
    return {"broadcast_exact": same, "errors": errors, "in_slots": in_slot}


def ddp_bf16():
    """A bfloat16 model under DDP (gradient_as_bucket_view=True), codec none: once the buckets go
    through the agent, every gradient is bit for bit the reference: each rank's bfloat16
    gradient (computed here on a copy of the model) widened to fp32, summed node by node in
    rank order, the node sums added in node order, times 1/4, rounded to nearest even."""
    ref = mlp().to(torch.bfloat16)
    model = DistributedDataParallel(mlp().to(torch.bfloat16), bucket_cap_mb=0.01, gradient_as_bucket_view=True)
    state = gcagent.torch.State(gcagent.Client(job="bf16"), codec="none")
    model.register_comm_hook(state, gcagent.torch.hook)
    exact, agent_buckets = [], []
    for it in range(1, 7):
        model.zero_grad(set_to_none=False)
        x, y = batch(RANK, it)
        before = state.agent_buckets
        nn.functional.cross_entropy(model(x.to(torch.bfloat16)), y).backward()
        agent_buckets.append(state.agent_buckets - before)
        grads = []
        for r in range(WORLD):
            ref.zero_grad()
            rx, ry = batch(r, it)
            nn.functional.cross_entropy(ref(rx.to(torch.bfloat16)), ry).backward()
            grads.append([p.grad.float() for p in ref.parameters()])
        nodes = [[a + b for a, b in zip(grads[0], grads[1])], [a + b for a, b in zip(grads[2], grads[3])]]
        expected = [((a + b) * 0.25).to(torch.bfloat16) for a, b in zip(*nodes)]
        exact.append(all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected)))
    return {"exact": exact, "agent_buckets": agent_buckets, "moved": state.moved_buckets,
            "slot_dtypes": sorted({str(t.dtype) for t in state._slots.values()}),
            "in_slots": in_slots(model.parameters(), state._slots.values())}


def suite():
    init_group()
    return {"exact": ddp_exact(), "views": ddp_exact(views=True), "train": ddp_train(), "optimizer": optimizer_exact(),
            "bf16": ddp_bf16()}


def suite_cuda():
    global DEVICE
    DEVICE = torch.device("cuda", 0)
    init_group()
    return {"exact": ddp_exact(), "train": ddp_train()}


def ddp_agent_dies():
    init_group()
    model = ddp(mlp())
    state = gcagent.torch.State(timeout_s=30)
    model.register_comm_hook(state, gcagent.torch.hook)
    # Gives up (reporting no error) 150 s after the agent took the buckets, or 300 s after the
    # start if it never did: generous, so only a real hang ends the loop.
    deadline, announced = time.time() + 300, False
    it = 0
    while time.time() < deadline:
        it += 1
        x, y = batch(RANK, it)
        model.zero_grad()
        try:
            nn.functional.cross_entropy(model(x), y).backward()
        except Exception as e:  # noqa: BLE001 - what DDP raises is the point of the test
            # On a loaded machine the agent may die before this trainer's buckets went through it.
            after = time.time() - announced_at if announced else None
            return {"raised": str(e), "type": type(e).__name__, "iterations": it, "seconds_after_active": after}
        if state.agent_buckets and not announced:
            print("active", flush=True)
            announced, announced_at = True, time.time()
            deadline = announced_at + 150
        time.sleep(0.01)
    return {"raised": None, "iterations": it}


def step(model, it):
    x, y = batch(RANK, it)
    model.zero_grad()
    nn.functional.cross_entropy(model(x.to(DEVICE)), y.to(DEVICE)).backward()


def caught(fn):
    """What the training loop's `except` sees: the exception's type, code and message."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - what reaches the caller is the point
        return {"type": type(e).__name__, "code": getattr(e, "code", None), "message": str(e)}
    return None


def horovod_names():
    reducer = gcagent.Reducer(gcagent.Client(job="names"))
    return {"reducer": [reducer.rank(), reducer.size(), reducer.local_rank(), reducer.local_size()],
            "module": [gcagent.torch.rank(), gcagent.torch.size(), gcagent.torch.local_rank(),
                       gcagent.torch.local_size()]}


def backward_passes():
    """Two backward passes, then one reduction of their sum; a third pass before it raises."""
    model = mlp()
    reducer = gcagent.Reducer(gcagent.Client(job="passes"), codec="none")
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), reducer,
                                             backward_passes_per_step=2)
    opt.zero_grad()
    for it in (1, 2):
        x, y = batch(RANK, it)
        nn.functional.cross_entropy(model(x), y).backward()
    opt.synchronize()
    want = [a + b for a, b in zip(reference_grads(copy.deepcopy(model), 1), reference_grads(copy.deepcopy(model), 2))]
    error = max_error(model.parameters(), want)
    reductions = sorted(set(reducer._iteration.values()))
    with opt.skip_synchronize():
        opt.step()
    x, y = batch(RANK, 3)
    third = caught(lambda: [nn.functional.cross_entropy(model(x), y).backward() for _ in range(3)])
    return {"error": error, "reductions": reductions, "third": third}


def momentum_warnings():
    """dgc with an optimizer's momentum warns once per optimizer or hook, however many steps."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = mlp()
        reducer = gcagent.Reducer(gcagent.Client(job="dgc"), codec="dgc", params={"ratio": "0.1", "momentum": "0.9"})
        opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), reducer)
        for it in range(1, 4):
            step(model, it)
            opt.step()
        model = ddp(mlp())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        state = gcagent.torch.State(gcagent.Client(job="dgc-ddp"), codec="dgc", params={"momentum": "0.9"},
                                    optimizer=optimizer)
        model.register_comm_hook(state, gcagent.torch.hook)
        for it in range(1, 6):
            step(model, it)
            optimizer.step()
        # Either momentum alone is quiet.
        quiet = gcagent.Reducer(reducer.client, codec="dgc", params={"momentum": "0"})
        gcagent.torch.DistributedOptimizer(torch.optim.SGD(mlp().parameters(), lr=0.01, momentum=0.9), quiet)
        gcagent.torch.DistributedOptimizer(torch.optim.SGD(mlp().parameters(), lr=0.01), reducer)
        # dgc's default momentum is 0: quiet with the optimizer's.
        gcagent.torch.DistributedOptimizer(torch.optim.SGD(mlp().parameters(), lr=0.01, momentum=0.9),
                                           gcagent.Reducer(reducer.client, codec="dgc"))
    return {"warnings": [str(w.message) for w in seen if "gcagent" in str(w.message)],
            "ddp_agent_buckets": state.agent_buckets}


def agent_errors():
    """Declarations the agent refuses, through DistributedOptimizer and through the DDP hook."""
    model = mlp()
    reducer = gcagent.Reducer(gcagent.Client(job="optimizer-codec"), codec="nosuch")
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), reducer)
    step(model, 1)
    optimizer = caught(opt.step)
    model = ddp(mlp())
    model.register_comm_hook(gcagent.torch.State(gcagent.Client(job="ddp-codec"), codec="nosuch"), gcagent.torch.hook)
    hook = caught(lambda: [step(model, it) for it in range(1, 7)])
    return {"optimizer": optimizer, "ddp": hook}


def trainer_leaves():
    """Once the hook's buckets go through the agent, the last world rank leaves the job: every
    other trainer's next backward() raises what its agent says."""
    model = ddp(mlp())
    state = gcagent.torch.State(gcagent.Client(job="left"), codec="none")
    model.register_comm_hook(state, gcagent.torch.hook)
    for it in range(1, 6):  # 4 and 5 through the agent
        step(model, it)
    if RANK == WORLD - 1:
        return {"left": True, "agent_buckets": state.agent_buckets}
    deadline, it = time.time() + 120, 5
    while time.time() < deadline:  # generous: only a hang ends the loop
        it += 1
        raised = caught(lambda: step(model, it))
        if raised:
            return {"raised": raised, "agent_buckets": state.agent_buckets}
    return {"raised": None}


def extras():
    init_group()
    return {"names": horovod_names(), "passes": backward_passes(), "momentum": momentum_warnings(),
            "errors": agent_errors(), "leaves": trainer_leaves()}


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "checkpoint":
        print("report: " + json.dumps(checkpointed(sys.argv[2], sys.argv[3] == "kept", sys.argv[4])), flush=True)
        os._exit(0)
    result = {"suite": suite, "suite-cuda": suite_cuda, "ddp-agent-dies": ddp_agent_dies, "extras": extras}[mode]()
    print("report: " + json.dumps(result), flush=True)
    os._exit(0)  # the process group may still wait on peers that failed
