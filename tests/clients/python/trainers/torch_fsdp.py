"""A PyTorch FSDP2 trainer for the shim tests (2 nodes x 2 trainers); the environment comes from
shim_cluster.py.

    torch_fsdp.py suite | agent-dies | diverged | overflow CODEC[:PARAMS]... | train[-bf16] CODEC [PARAMS [STEPS]]
                | checkpoint PHASE CODEC PARAMS DIR | world CODEC PARAMS STEPS

suite runs, each as its own job on the agents:
  ported  PyTorch's own test_custom_hsdp_all_reduce_hook (test/distributed/_composable/fsdp/
          test_fully_shard_comm.py), with gcagent's hook in place of its all_reduce over the
          inter-node group, and its expected gradients; and its _test_reduce_scatter (float32
          and float16) with gcagent's reduce-scatter in place of DefaultReduceScatter;
  parity  a small transformer trained 20 steps with gcagent.torch.fsdp.hsdp (codec none) beside
          the same model under FSDP2's own HSDP over gloo (a 2-D mesh): parameters compared bit
          for bit at every step; then steps without zero_grad (gradients accumulate, so the hook
          waits for its shards itself), still bit for bit;
  unused  a module with a parameter that gets no gradient: the hook's error names the fix;
  training  PyTorch's test_train_parity_hsdp (test_fully_shard_training.py), its 24 subtests,
          gcagent across nodes against DDP over gloo.
agent-dies trains until backward() raises (the test kills an agent).
overflow runs fp16 overflow steps under GradScaler beside FSDP2's own HSDP (overflow()).
diverged moves node 1's replica apart while node 0 gives a step up that node 1 submits late, then
reloads (diverged()).
train trains the transformer on a synthetic language (a fixed random Markov chain)
with HSDP through the agent and reports the validation loss; train-bf16 computes and reduces in
bfloat16 (the agent's slots hold bfloat16).
world runs world_parity (FSDP over all trainers, the reduce-scatter through the agents).
checkpoint trains the transformer with a torch.distributed.checkpoint of model, optimizer and
the hook's state (gcagent.torch.fsdp.HSDPState is Stateful) in DIR: PHASE whole trains 2 x
CHECKPOINT_STEPS steps; save the first half and saves; resume loads and trains the second half;
forget does too, loading everything but the hook's state. It prints "report: {json}" last."""

import copy
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import gcagent
import gcagent.torch.fsdp

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ["GCAGENT_LOCAL_SIZE"])
JOB = os.environ.get("GCAGENT_JOB", "job")
VOCAB, SEQ = 16, 24
STEPS = 600  # train's default: enough for every codec to level out near the language's entropy
CHECKPOINT_STEPS = 12


class MLP(nn.Module):
    """torch.testing._internal.common_fsdp.MLP, the model of PyTorch's test (restated: that
    module needs PyTorch's test dependencies)."""

    def __init__(self, dim, bias=True, dim_multiplier=4):
        super().__init__()
        self.in_proj = nn.Linear(dim, dim_multiplier * dim, bias=bias)
        self.out_proj = nn.Linear(dim_multiplier * dim, dim, bias=bias)

    def forward(self, x):
        return torch.relu(self.out_proj(torch.relu(self.in_proj(x))))


class TinyLM(nn.Module):
    """A pre-norm transformer language model: embeddings, blocks, a head."""

    def __init__(self, dim=32, layers=2):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim)
        self.positions = nn.Embedding(SEQ, dim)
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True,
                                                               norm_first=True) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, tokens):
        h = self.tokens(tokens) + self.positions(torch.arange(tokens.size(1)))
        for block in self.blocks:
            h = block(h, src_mask=self.mask[:tokens.size(1), :tokens.size(1)], is_causal=True)
        return self.head(self.norm(h))


def shard(model, mesh, mp_policy=None):
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    for block in model.blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def chain():
    """The synthetic language: P(next | previous), fixed by its seed (entropy about 1.4 nats)."""
    g = torch.Generator().manual_seed(1234)
    return torch.softmax(torch.randn(VOCAB, VOCAB, generator=g) * 2.5, -1)


def sample(probs, batch, seed):
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(0, VOCAB, (batch, SEQ + 1), generator=g)
    for t in range(1, SEQ + 1):
        out[:, t] = torch.multinomial(probs[out[:, t - 1]], 1, generator=g).squeeze(1)
    return out[:, :-1], out[:, 1:]


def loss_of(model, x, y):
    return nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))


def client(name):
    return gcagent.Client(job=f"{JOB}-{name}")


def ported():
    """test_custom_hsdp_all_reduce_hook: each replica's weights are constant (replica 0's zero),
    so the average over the two replicas is half of replica 1's gradient."""
    mesh = gcagent.torch.fsdp.node_mesh(local_size=LOCAL)
    model = MLP(10, bias=False)
    rank_group = RANK // 2
    torch.nn.init.constant_(model.in_proj.weight, 1.0 * rank_group)
    torch.nn.init.constant_(model.out_proj.weight, 2.0 * rank_group)
    model = fully_shard(model, mesh=mesh)
    state = gcagent.torch.fsdp.hsdp(model, client=client("ported"), codec="none")
    inp = torch.arange(10, dtype=torch.float32, requires_grad=True).view(1, 10)
    model(inp).sum().backward()
    out_grad = model.out_proj.weight.grad.to_local()
    in_grad = model.in_proj.weight.grad.to_local()
    report = {"hook_called": state.shards == 1,
              "out_proj": torch.equal(out_grad, torch.full((5, 40), 22.5)),
              "in_proj": torch.equal(in_grad, torch.arange(0, 100, 10, dtype=torch.float32).repeat(20, 1))}
    state.close()
    return report


def ported_reduce_scatter():
    """PyTorch's TestFullyShardCollectiveOps._test_reduce_scatter (test_fully_shard_comm.py, run
    by test_reduce_scatter_fp32 and test_reduce_scatter_fp16), with gcagent's reduce-scatter
    (what fsdp() installs through set_custom_reduce_scatter) in place of DefaultReduceScatter,
    over 2 nodes x 2 trainer processes instead of 128 threads, on the CPU's streams: FSDP's own
    foreach_reduce copies the gradients in, calls the comm with its op (AVG for float32; SUM
    between a pre- and a post-division for float16) and views the output out; each sharded
    gradient must equal the all_reduce of the same gradients with FSDP's divide factors."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (_div_if_needed, _get_gradient_divide_factors,
                                                                       foreach_reduce)
    from torch.distributed.tensor import DTensor
    param_sizes = [torch.Size(s) for s in ([17, 257], [17], [64, 312], [64], [64, 64], [512, 64], [256], [64, 297])]
    report = {}
    for reduce_scatter_dtype in (torch.float32, torch.float16):
        torch.manual_seed(42)
        orig_params = [nn.Parameter(torch.randn(size)) for size in param_sizes]
        for orig_param in orig_params:
            dist.broadcast(orig_param, src=0)
        module = nn.ParameterList([param.detach().clone() for param in orig_params])
        fully_shard(module, mp_policy=MixedPrecisionPolicy(reduce_dtype=reduce_scatter_dtype))
        state = gcagent.torch.fsdp.fsdp(module, client=client(f"ported-rs-{reduce_scatter_dtype}"), codec="none")
        fsdp_param_group = module._get_fsdp_state()._fsdp_param_groups[0]
        fsdp_param_group.lazy_init()
        fsdp_params = fsdp_param_group.fsdp_params
        fsdp_param_group.comm_ctx.lazy_init(torch.device("cpu"))
        fsdp_param_group.unshard()
        fsdp_param_group.wait_for_unshard()
        fsdp_param_group.reshard()
        unsharded_grads = [torch.ones_like(param) * (RANK % 8) for param in orig_params]
        reduced_grads = [grad.detach().clone() for grad in unsharded_grads]
        group = fsdp_param_group.mesh_info.shard_process_group
        comm = fsdp_param_group._reduce_scatter_comm  # gcagent's
        _, _, _, post_reduce_event, _, _, _ = foreach_reduce(
            fsdp_params, unsharded_grads, group, torch.cpu.current_stream(), comm,
            reduce_dtype=reduce_scatter_dtype, device=torch.device("cpu"), gradient_divide_factor=None,
            all_reduce_group=None, all_reduce_stream=torch.cpu.Stream(), all_reduce_hook=None,
            all_reduce_grads=True, partial_reduce_output=None)
        torch.cpu.current_stream().wait_event(post_reduce_event)
        predivide_factor, postdivide_factor, _, all_reduce_op = _get_gradient_divide_factors(
            group, None, reduce_scatter_dtype)
        for grad in reduced_grads:
            _div_if_needed(grad, predivide_factor)
            dist.all_reduce(grad, group=group, op=all_reduce_op)
            _div_if_needed(grad, postdivide_factor)
        equal = [isinstance(p.sharded_param.grad, DTensor) and torch.equal(p.sharded_param.grad.full_tensor(), g)
                 for p, g in zip(fsdp_params, reduced_grads)]
        report[str(reduce_scatter_dtype)] = {"equal": equal, "agent_shards": state.shards,
                                            "comm": type(comm).__module__}
        state.close()
    return report


def parity(bf16=False):
    """gcagent's HSDP against FSDP2's own (a 2-D mesh over gloo), same inputs, bit for bit.
    bf16: both compute and reduce in bfloat16 (fp32 weights): FSDP casts each reduced shard into
    the fp32 gradients, and the agent's average (fp32, rounded once to bfloat16: what two bfloat16
    terms summed and halved give) lands there at the end of the pass."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else None
    torch.manual_seed(0)
    base = TinyLM()
    ref = shard(copy.deepcopy(base), init_device_mesh("cpu", (WORLD // LOCAL, LOCAL),
                                                       mesh_dim_names=("replicate", "shard")), mp)
    model = shard(base, gcagent.torch.fsdp.node_mesh(local_size=LOCAL), mp)
    state = gcagent.torch.fsdp.hsdp(model, client=client(f"parity-{bf16}"), codec="none")
    opt, ref_opt = (torch.optim.Adam(m.parameters(), lr=3e-3) for m in (model, ref))
    probs, equal, losses = chain(), [], []
    for step in range(24):
        accumulate = step >= 20  # the last 4: pairs of backward passes before one optimizer step
        x, y = sample(probs, 8, 1000 * step + RANK)
        for m, o in ((model, opt), (ref, ref_opt)):
            loss = loss_of(m, x, y)
            loss.backward()
            if not accumulate or step % 2 == 1:
                o.step()
                o.zero_grad()
        losses.append(loss.item())
        equal.append(all(torch.equal(p.to_local(), q.to_local()) for p, q in zip(model.parameters(), ref.parameters())))
    report = {"equal": equal, "shards": state.shards, "waited_in_hook": state.waited_in_hook,
              "modules": len(state._modules), "first_loss": losses[0], "last_loss": losses[19]}
    state.close()
    return report


def documented_order_sum(inputs, chunk):
    """The reduce-scatter's output for chunk `chunk` in gcagent's documented order (DESIGN.md,
    section 4a), computed here from every trainer's input: each node adds its trainers' inputs
    in local-rank order, the owner adds the nodes' sums in node-rank order, and the average
    divides once by the number of trainers."""
    n = inputs[0].numel() // WORLD
    piece = [x.reshape(-1)[chunk * n:(chunk + 1) * n] for x in inputs]
    total = None
    for node in range(WORLD // LOCAL):
        node_sum = piece[node * LOCAL]
        for local in range(1, LOCAL):
            node_sum = node_sum + piece[node * LOCAL + local]
        total = node_sum if total is None else total + node_sum
    return total / WORLD


def world_parity(codec, params, steps):
    """FSDP without replication: the transformer sharded over all four trainers, its
    reduce-scatter through the agents (gcagent.torch.fsdp.fsdp), beside the same model under
    FSDP2's own reduce-scatter over gloo: the largest parameter difference at each step (codec
    none: fp32 summation order alone), and both models' last losses. With codec none each
    reduce-scatter's output is also checked bit for bit against documented_order_sum of every
    trainer's input (gathered over gloo after the step)."""
    torch.manual_seed(0)
    base = TinyLM()
    mesh = init_device_mesh("cpu", (WORLD,))
    ref = shard(copy.deepcopy(base), mesh)
    model = shard(base, mesh)
    state = gcagent.torch.fsdp.fsdp(model, client=client(f"world-{codec}"), codec=codec, params=params)
    # A tap on the shim's reduce-scatter: what FSDP handed it and where the average lands.
    taken = []
    through_agents = gcagent.torch.fsdp._AgentReduceScatter.__call__

    def tap(comm, output_tensor, input_tensor, group, op, async_op=False):
        taken.append((input_tensor.detach().clone(), output_tensor))
        return through_agents(comm, output_tensor, input_tensor, group, op, async_op)

    gcagent.torch.fsdp._AgentReduceScatter.__call__ = tap
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref))
    probs, differences, losses, exact = chain(), [], {"agent": [], "gloo": []}, []
    for step in range(steps):
        x, y = sample(probs, 16, 1000 * step + RANK)
        for name, m, o in (("agent", model, opt), ("gloo", ref, ref_opt)):
            taken.clear()
            loss = loss_of(m, x, y)
            loss.backward()
            if name == "agent" and codec == "none":
                for input_tensor, output_tensor in taken:
                    inputs = [torch.empty_like(input_tensor) for _ in range(WORLD)]
                    dist.all_gather(inputs, input_tensor)
                    expected = documented_order_sum(inputs, RANK)
                    exact.append(torch.equal(output_tensor.reshape(-1), expected))
            o.step()
            o.zero_grad()
            losses[name].append(loss.item())
        differences.append(max(float((p.to_local() - q.to_local()).abs().max())
                               for p, q in zip(model.parameters(), ref.parameters())))
    gcagent.torch.fsdp._AgentReduceScatter.__call__ = through_agents
    report = {"differences": differences, "shards": state.shards, "waited_in_hook": state.waited_in_hook,
              "first_loss": losses["agent"][0], "last_loss": sum(losses["agent"][-10:]) / 10,
              "gloo_last_loss": sum(losses["gloo"][-10:]) / 10, "exact": exact}
    state.close()
    return report


def train_parity_hsdp():
    """PyTorch's TestFullyShardHSDPTraining.test_train_parity_hsdp (test_fully_shard_training.py),
    its subtests and checks, with gcagent across nodes in place of the 2-D mesh's all-reduce and
    DDP over gloo (all trainers) in place of replicate(): losses equal at every microbatch,
    parameters and gradients (full tensors) equal to the reference's after each step, within
    torch.testing's float32 tolerances (the reference averages in another order)."""
    from torch.distributed._composable import checkpoint
    failures, runs = [], 0
    for reshard in (False, True):
        for use_checkpointing in (False, True):
            for mlp_dim in (3, 16, 17):
                for sync_last in (True, False):
                    name = f"reshard={reshard},ckpt={use_checkpointing},dim={mlp_dim},sync_last={sync_last}"
                    try:
                        _train_parity_hsdp(reshard, use_checkpointing, mlp_dim, sync_last, runs, checkpoint)
                    except AssertionError as e:
                        failures.append(f"{name}: {str(e)[:300]}")
                    runs += 1
    return {"subtests": runs, "failures": failures}


def _train_parity_hsdp(reshard_after_forward, use_activation_checkpointing, mlp_dim, sync_last, run, checkpoint):
    torch.manual_seed(42)
    model = nn.Sequential(nn.LayerNorm(mlp_dim, bias=False), MLP(mlp_dim, dim_multiplier=3), MLP(mlp_dim),
                          MLP(mlp_dim, dim_multiplier=3))
    ref_model = DistributedDataParallel(copy.deepcopy(model))
    ref_optim = torch.optim.Adam(ref_model.parameters(), lr=1e-2)
    mesh = gcagent.torch.fsdp.node_mesh(local_size=LOCAL)
    for mlp in list(model)[1:]:
        if use_activation_checkpointing:
            checkpoint(mlp)
        fully_shard(mlp, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    state = gcagent.torch.fsdp.hsdp(model, client=client(f"training-{run}"), codec="none")
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    check_sharded_parity(ref_model.module, model)
    torch.manual_seed(42 + RANK + 1)
    num_microbatches = 3
    for iter_idx in range(5):
        for microbatch_idx in range(num_microbatches):
            is_last_microbatch = microbatch_idx == num_microbatches - 1
            if sync_last:
                model.set_requires_gradient_sync(is_last_microbatch)
            inp = torch.randn((8, mlp_dim))
            losses = []
            for _model in (ref_model, model):
                losses.append(_model(inp).sum())
                losses[-1].backward()
            torch.testing.assert_close(losses[0], losses[1])
        check_sharded_parity(ref_model.module, model)
        for _model, _optim in ((ref_model, ref_optim), (model, optim)):
            _optim.step()
            _optim.zero_grad(set_to_none=(iter_idx % 2 == 0))
        check_sharded_parity(ref_model.module, model)
    state.close()


def check_sharded_parity(ref_model, model):
    """common_fsdp.check_sharded_parity's checks on full tensors: parameters, and gradients
    where the reference has them."""
    for (name, ref), (_, p) in zip(ref_model.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.full_tensor(), ref.detach(), msg=lambda m: f"{name}: {m}")
        if ref.grad is not None:
            torch.testing.assert_close(p.grad.full_tensor(), ref.grad, msg=lambda m: f"{name}.grad: {m}")


def unused():
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.spare = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.used(x)

    torch.manual_seed(0)
    model = fully_shard(Partly(), mesh=gcagent.torch.fsdp.node_mesh(local_size=LOCAL))
    state = gcagent.torch.fsdp.hsdp(model, client=client("unused"), codec="none")
    try:
        model(torch.ones(2, 4)).sum().backward()
        message = None
    except gcagent.GcagentError as e:
        message = str(e)
    state.close()
    return {"error": message}


def agent_dies():
    """Trains until backward() raises; the test kills an agent once this prints "active"."""
    torch.manual_seed(0)
    model = shard(TinyLM(), gcagent.torch.fsdp.node_mesh(local_size=LOCAL))
    state = gcagent.torch.fsdp.hsdp(model, client=client("dies"), codec="none", timeout_s=30)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probs = chain()
    # Gives up (reporting no error) 150 s after the first step through the agent: generous, so
    # only a real hang ends the loop.
    deadline, active_at = time.monotonic() + 300, None
    step = 0
    while time.monotonic() < deadline:
        step += 1
        x, y = sample(probs, 8, 1000 * step + RANK)
        try:
            loss_of(model, x, y).backward()
        except Exception as e:  # noqa: BLE001 - what backward() raises is the point of the test
            return {"raised": str(e), "type": type(e).__name__, "steps": step,
                    "after_active": None if active_at is None else time.monotonic() - active_at}
        opt.step()
        opt.zero_grad()
        if active_at is None:
            print("active", flush=True)
            active_at = time.monotonic()
            deadline = active_at + 150
    return {"raised": None, "steps": step}


def replica_digest(model, opt):
    """This trainer's shard of the weights and its AdamW state, as one hash."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p._local_tensor.detach().numpy().tobytes())
        for name in sorted(opt.state[p]):
            t = opt.state[p][name]
            h.update(getattr(t, "_local_tensor", t).detach().numpy().tobytes())
    return h.hexdigest()


def diverged():
    """Node 1's replica made to differ (its shards and AdamW's moments and step count moved, as
    a step completed there alone would leave them) while node 0 gives step 4 up at the reduction
    timeout; node 1 submits its step 4 only then, and it must fail there too. Every trainer calls
    sync_parameters(opt) after every step."""
    torch.manual_seed(0)
    model = shard(TinyLM(), gcagent.torch.fsdp.node_mesh(local_size=LOCAL))
    state = gcagent.torch.fsdp.hsdp(model, client=client("diverged"), codec="none")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    probs = chain()
    failed, errors, loaded, digests = 0, [], [], []
    for step in range(1, 9):
        late = step == 4 and RANK >= LOCAL
        if late:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01)
                    for t in opt.state[p].values():
                        t.mul_(1.5)
            dist.barrier()  # node 1 submits step 4 once node 0's step 4 failed
        x, y = sample(probs, 8, 1000 * step + RANK)
        try:
            loss_of(model, x, y).backward()
            opt.step()
        except gcagent.GcagentError as e:
            failed += 1
            errors.append(str(e))
        opt.zero_grad()
        if step == 4 and not late:
            dist.barrier()
        if state.sync_parameters(opt):
            loaded.append(step)
        digests.append(replica_digest(model, opt))
    state.close()
    return {"failed": failed, "errors": errors, "loaded": loaded, "digests": digests, "resyncs": state.resyncs}


def train(codec, params, bf16=False, steps=STEPS):
    """bf16: computes and reduces in bfloat16 (MixedPrecisionPolicy), fp32 weights: the
    agent's slots then hold bfloat16."""
    torch.manual_seed(0)
    from torch.distributed.fsdp import MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else None
    model = shard(TinyLM(), gcagent.torch.fsdp.node_mesh(local_size=LOCAL), mp)
    state = gcagent.torch.fsdp.hsdp(model, client=client(f"train-{codec}-{bf16}"), codec=codec, params=params)
    # SGD with momentum, the optimizer these codecs were made for (Adam's per-coordinate scaling
    # turns 2bit's sparse +-threshold updates into full steps, and it diverges here)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    probs = chain()
    vx, vy = sample(probs, 256, 99)
    with torch.no_grad():
        initial = loss_of(model, vx, vy).item()
    started = time.monotonic()
    for step in range(steps):
        x, y = sample(probs, 32, 1000 * step + RANK)
        loss_of(model, x, y).backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        val = loss_of(model, vx, vy).item()
    state.close()
    slot_dtypes = sorted({str(t.dtype) for t in state._slots.values()})
    return {"val_loss": val, "initial_val_loss": initial, "shards": state.shards,
            "seconds_per_step": (time.monotonic() - started) / steps, "slot_dtypes": slot_dtypes}


def parameters_digest(model):
    import hashlib
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.to_local().detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def checkpointed(phase, codec, params, directory):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    torch.manual_seed(0)
    model = shard(TinyLM(), gcagent.torch.fsdp.node_mesh(local_size=LOCAL))
    state = gcagent.torch.fsdp.hsdp(model, client=client(f"checkpoint-{codec}"), codec=codec, params=params)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    first, last = 0, 2 * CHECKPOINT_STEPS
    if phase in ("resume", "forget"):
        model_sd, optim_sd = get_state_dict(model, opt)
        loaded = {"model": model_sd, "optim": optim_sd}
        if phase == "resume":
            loaded["gcagent"] = state
        dcp.load(loaded, checkpoint_id=directory)
        set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
        first = CHECKPOINT_STEPS
    elif phase == "save":
        last = CHECKPOINT_STEPS
    probs = chain()
    losses = []
    for step in range(first, last):
        x, y = sample(probs, 16, 1000 * step + RANK)
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step == CHECKPOINT_STEPS - 1:
            losses.append(parameters_digest(model))
    report = {"losses": losses, "digest": parameters_digest(model), "step": state._step,
              "dropped": state.dropped_residuals}
    if phase == "save":
        model_sd, optim_sd = get_state_dict(model, opt)
        dcp.save({"model": model_sd, "optim": optim_sd, "gcagent": state}, checkpoint_id=directory)
        mine = state.state_dict()[f"rank{RANK}"]
        report["residual_bytes"] = sum(len(v) for v in mine["residuals"].values())
    state.close()
    return report


def overflow(codecs):
    """fp16 overflow steps under torch.amp.GradScaler: gcagent's HSDP beside FSDP2's own over
    gloo, the same model, data and scaler settings; rank 0's loss overflows at step OVERFLOW_STEP
    (every gradient it computes inf or NaN). Both must skip the same steps with the same scale
    sequence, and no NaN may stay."""
    report = {}
    for codec in codecs:
        name, _, spec = codec.partition(":")
        params = dict(kv.split("=") for kv in spec.split(",")) if spec else {}
        torch.manual_seed(0)
        base = TinyLM()
        ref = shard(copy.deepcopy(base), init_device_mesh("cpu", (WORLD // LOCAL, LOCAL),
                                                           mesh_dim_names=("replicate", "shard")))
        model = shard(base, gcagent.torch.fsdp.node_mesh(local_size=LOCAL))
        state = gcagent.torch.fsdp.hsdp(model, client=client(f"overflow-{name}"), codec=name, params=params)
        runs = {}
        for label, m in (("agent", model), ("fsdp2", ref)):
            runs[label] = (m, torch.optim.SGD(m.parameters(), lr=0.05),
                           torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=3), [])
        probs = chain()
        for step in range(1, 11):
            x, y = sample(probs, 8, 1000 * step + RANK)
            for label, (m, opt, scaler, scales) in runs.items():
                loss = loss_of(m, x, y)
                if RANK == 0 and step == OVERFLOW_STEP:
                    loss = loss * 1e38
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
                scales.append(scaler.get_scale())
        finite = all(bool(torch.isfinite(p.to_local()).all()) for p in model.parameters())
        equal = all(torch.equal(p.to_local(), q.to_local()) for p, q in zip(model.parameters(), ref.parameters()))
        report[codec] = {"scales": runs["agent"][3], "ref_scales": runs["fsdp2"][3], "finite": finite,
                         "equal_to_fsdp2": equal}
        state.close()
    return report


OVERFLOW_STEP = 5


def main():
    torch.set_num_threads(1)  # four trainers and two agents share the host's cores
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    if sys.argv[1] == "suite":
        report = {"ported": ported(), "ported_reduce_scatter": ported_reduce_scatter(), "parity": parity(), "parity_bf16": parity(bf16=True), "unused": unused(),
                  "training": train_parity_hsdp()}
    elif sys.argv[1] == "agent-dies":
        print("report: " + json.dumps(agent_dies()), flush=True)
        os._exit(0)  # the node's process group may still wait on a trainer that failed apart
    elif sys.argv[1] == "diverged":
        report = diverged()
    elif sys.argv[1] == "overflow":
        report = overflow(sys.argv[2:])
    elif sys.argv[1] == "world":
        params = dict(kv.split("=") for kv in sys.argv[3].split(",")) if sys.argv[3] else {}
        report = world_parity(sys.argv[2], params, int(sys.argv[4]))
    elif sys.argv[1] == "checkpoint":
        params = dict(kv.split("=") for kv in sys.argv[4].split(",")) if sys.argv[4] else {}
        report = checkpointed(sys.argv[2], sys.argv[3], params, sys.argv[5])
    else:
        params = dict(kv.split("=") for kv in sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else {}
        steps = int(sys.argv[4]) if len(sys.argv) > 4 else STEPS
        report = train(sys.argv[2], params, bf16=sys.argv[1] == "train-bf16", steps=steps)
    dist.destroy_process_group()
    print("report: " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
