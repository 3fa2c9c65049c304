"""PyTorch FSDP2 across nodes through the agent: HSDP whose replica all-reduce is gcagent's.

    from torch.distributed.fsdp import fully_shard
    import gcagent.torch.fsdp

    mesh = gcagent.torch.fsdp.node_mesh()      # this node's trainers
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    state = gcagent.torch.fsdp.hsdp(model)     # across nodes: the agent

FSDP2 shards the model over the trainers of each node and reduce-scatters each module's
gradients there (the node's process group: gloo, NCCL). The shard a trainer holds, averaged
over its node, reaches the all-reduce hook (FSDPModule.set_all_reduce_hook). The hook writes it
into the agent's slot for (module, local rank): a key that only this local rank of each node
contributes (reduce.contributor), so the agent averages it over the nodes, compressed with
error feedback and residuals of its own, the first modules first. The hook submits and
returns: backward goes on while the agent works. At the end of the backward pass (a callback
of the autograd engine) the averages are copied into FSDP's reduce-scatter output, of which
the sharded gradients are views, or into the one buffer FSDP cast that output into (fp32
gradients of a bfloat16 reduce). Where FSDP would read that output before the end of the
pass otherwise (gradients accumulated over steps without zero_grad, gradients of several
dtypes, CPU offload, post-accumulate-grad hooks, CUDA tensors), the hook waits for its shard
itself.

A shard that fails or is not reduced within timeout_s fails the step: backward() raises the
GcagentError at the end of the pass, once every shard in flight is back; the gradients of that
step must not be applied. A step given up on one node may still have completed on another (no
protocol can rule that out: the last message may be lost), so the nodes' replicas would differ
by it; the agents then name a node whose weights every node loads after the next step that
completes: call state.sync_parameters(optimizer) after every step, failed or not. An agent that closed the connection (killed, restarted) is connected
to again at the start of a later pass, when the state made its own client (`reconnects`). The average over nodes follows FSDP's: with codec none each trainer
gets (sum over nodes, in node order, of the node's average) / nodes, bit for bit what FSDP2's
own HSDP computes with two trainers per node."""

import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule

from gcagent.client import (BROADCAST_KEY_BASE, ERR_INVALID_ARGUMENT, ERR_TIMEOUT, Client, GcagentError, TensorSpec,
                            codec_from_env, step_timeout_s)
from gcagent.torch import _Reconnecting, _optimizer_state


def node_mesh(device_type: str = "cpu", local_size: int = None):
    """The 1-D DeviceMesh of this node's trainers, for fully_shard(..., mesh=...).

    Trainers are numbered node by node (gcagent-run's and torchrun's RANK): with L trainers per
    node, node n holds ranks n*L ... n*L+L-1. local_size: LOCAL_WORLD_SIZE (or
    GCAGENT_LOCAL_SIZE) when not given. Needs torch.distributed initialised over every trainer."""
    if local_size is None:
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("GCAGENT_LOCAL_SIZE") or 0)
    world = dist.get_world_size()
    if local_size < 1 or world % local_size:
        raise ValueError(f"gcagent: {world} trainers do not make nodes of {local_size} (local_size, LOCAL_WORLD_SIZE)")
    mesh = init_device_mesh(device_type, (world // local_size, local_size), mesh_dim_names=("node", "local"))
    return mesh["local"]


# sync_parameters' keys, one per local rank, below those of gcagent.torch (State's weights).
_WEIGHTS_KEY = BROADCAST_KEY_BASE - 2

# The reduce dtypes the agent's slots take, as the agent's slot dtypes.
_SLOT_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _slot_tensor(client, key, dtype):
    """The agent's slot of `key` as a CPU tensor of `dtype` over the shared segment."""
    array = client.slot(key)
    return torch.from_numpy(array).view(dtype) if dtype != torch.float32 else torch.from_numpy(array)


class _Shards:
    """What the hook needs of one FSDP module: its parameter group's sharded parameters."""

    def __init__(self, index, module, reduce_dtypes=(torch.float32, torch.bfloat16)):
        groups = module._get_fsdp_state()._fsdp_param_groups
        if len(groups) > 1:
            raise ValueError(f"gcagent: module {type(module).__name__} has {len(groups)} FSDP parameter groups "
                             "(shard_placement_fn with several meshes); hsdp() takes one per module")
        self.index = index
        self.name = type(module).__name__
        self.group = groups[0] if groups else None
        self.params = [p for g in groups for p in g.fsdp_params if p.sharded_param.requires_grad]
        self.node_group = groups[0].mesh_info.shard_process_group if groups else None  # this node's trainers
        self.elements = sum(p.padded_sharded_param_size.numel() for p in self.params)
        # FSDP reduces in MixedPrecisionPolicy.reduce_dtype, else in the parameters' own dtype.
        dtypes = {p.mp_policy.reduce_dtype or p.sharded_param.dtype for p in self.params}
        if len(dtypes) > 1:
            raise ValueError(f"gcagent: module {index} ({self.name}) reduces gradients of several dtypes {dtypes}")
        self.dtype = dtypes.pop() if dtypes else torch.float32
        if self.dtype not in reduce_dtypes:
            raise ValueError(f"gcagent: module {index} ({self.name}) reduces in {self.dtype}; this takes "
                             f"{', '.join(str(d) for d in reduce_dtypes)} (hsdp(): FSDP pre- and post-divides "
                             "float16 around the all-reduce hook; fsdp() takes float16 too)")

    def read_early(self, output) -> bool:
        """True when FSDP reads the reduce-scatter output before the backward pass ends other than
        through views of it or one cast of it (see the module's docstring)."""
        if output.device.type != "cpu":
            return True
        grad_dtypes = {getattr(p, "sharded_grad_dtype", None) or output.dtype for p in self.params}
        if len(grad_dtypes) > 1:  # several casts: not one buffer laid out as the output
            return True
        for p in self.params:
            if (p.sharded_param.grad is not None or p.offload_to_cpu
                    or getattr(p.sharded_param, "_post_accumulate_grad_hooks", None)):
                return True
        return False

    def gradient_buffer(self, output):
        """The flat tensor the sharded gradients view, laid out as the reduce-scatter output: the
        output itself, or the buffer FSDP cast it into (a bfloat16 reduce for fp32 gradients);
        None when the gradients are laid out otherwise (this FSDP version copied them)."""
        grads = [p.sharded_param.grad for p in self.params]
        if any(g is None for g in grads):
            return None
        local = [g._local_tensor for g in grads]
        storage = local[0].untyped_storage()
        if output.dtype == local[0].dtype and storage.data_ptr() == output.untyped_storage().data_ptr():
            base = output.storage_offset()
        else:
            base = local[0].storage_offset()
        offset = base
        for p, g in zip(self.params, local):
            if (g.untyped_storage().data_ptr() != storage.data_ptr() or g.storage_offset() != offset
                    or g.dtype != local[0].dtype or not g.is_contiguous()):
                return None
            offset += p.padded_sharded_param_size.numel()
        if (offset - base) * local[0].element_size() > storage.nbytes() - base * local[0].element_size():
            return None
        return torch.empty(0, dtype=local[0].dtype).set_(storage, base, (output.numel(),))


class HSDPState(_Reconnecting):
    """The all-reduce hook's state: one agent connection per trainer. See the module's docstring.

    shards: shards reduced through the agent; waited_in_hook: of those, the ones the hook
    waited for itself (FSDP would have read them early)."""

    _REDUCE_DTYPES = (torch.float32, torch.bfloat16)

    def __init__(self, model, client=None, codec=None, params=None, timeout_s=300.0):
        self._own_client = client is None  # only a connection of its own is made anew
        self.client = client or Client()
        env_codec, env_params = codec_from_env()
        self.codec = codec if codec is not None else env_codec
        self.params = dict(params) if params is not None else env_params
        self.timeout_s = step_timeout_s(self.client, timeout_s)  # no sooner than the agent decides
        modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
        if not modules:
            raise ValueError("gcagent: hsdp() needs a model with fully_shard applied (no FSDPModule found)")
        hooked = [(_Shards(i, m, self._REDUCE_DTYPES), m) for i, m in enumerate(modules)]
        hooked = [(s, m) for s, m in hooked if s.params]  # a module whose parameters all are frozen reduces nothing
        self._modules = [s for s, _ in hooked]
        self.local_rank, self.local_size = self.client.local_rank, self.client.local_size
        self._step = 0           # backward passes with shards through the agent: the agent's iteration
        self._in_pass = False    # a backward pass whose first shard came
        self._at_end = False     # ... and whose end runs _finish (a callback of the autograd engine)
        self._pending = []       # (shards, key, reduce-scatter output) until the pass ends
        self._failure = None     # the pass's first failure, raised at its end
        self.shards = 0
        self.waited_in_hook = 0
        self.reconnects = 0  # connections made anew after the agent closed one
        self._lost = None    # the error that lost the connection, until it is made anew
        self.dropped_residuals = 0  # of the last load_state_dict: owned by another node now
        self.resyncs = 0            # times sync_parameters loaded the root node's weights
        self.failed_resyncs = 0     # its broadcasts another fault failed (called again after)
        self._weights_elements = 0  # of sync_parameters' keys, once it needed them
        self._slots = self._declare_on(self.client)
        for shards, module in hooked:
            self._attach(module, shards)

    def _attach(self, module, shards):
        module.set_all_reduce_hook(functools.partial(self._on_shard, shards))

    def _key(self, shards, local_rank):
        return shards.index * self.local_size + local_rank

    def _saved_keys(self):
        """The keys whose residuals this trainer saves: the shards it contributes."""
        return [self._key(s, self.local_rank) for s in self._modules]

    def _submit(self, shards, output, input_tensor):
        """Puts the module's gradient in the slots and submits it: the keys submitted, and the
        tensor the average lands in (a slot, or part of one)."""
        key = self._key(shards, self.local_rank)
        slot = self._slots[key]
        with torch.no_grad():
            slot.copy_(output.reshape(-1))
        self.client.submit(self._step, [key])
        return [key], slot

    def _declare_on(self, client):
        """Declares every shard on `client` (every trainer of a node declares them all; each
        submits only its own); returns this trainer's slots."""
        specs = [TensorSpec(self._key(s, r), s.elements, -s.index, self.codec,
                            {**self.params, "reduce.contributor": str(r)}, _SLOT_DTYPES[s.dtype])
                 for s in self._modules for r in range(self.local_size)]
        specs += self._weights_specs()
        client.declare(specs)
        slots = {self._key(s, self.local_rank): _slot_tensor(client, self._key(s, self.local_rank), s.dtype)
                 for s in self._modules}
        if self._weights_elements:
            slots[_WEIGHTS_KEY - self.local_rank] = _slot_tensor(client, _WEIGHTS_KEY - self.local_rank, torch.float32)
        return slots

    # ---- Replicas made one again ----

    def _weights_specs(self):
        # One key per local rank, summed uncompressed over the nodes, that rank alone adding.
        return [TensorSpec(_WEIGHTS_KEY - r, self._weights_elements, 1, "none",
                           {"reduce.result": "sum", "reduce.contributor": str(r)}) for r in range(self.local_size)
                ] if self._weights_elements else []

    def _replica_state(self, optimizer):
        """(tensor, elements it takes in the key) for this trainer's shard of every parameter and,
        with an optimizer, that parameter's floating-point optimizer state (momentum, Adam's
        moments and step): each padded to the parameter's padded shard, which every local rank
        of every node shares, so every trainer of a node declares the same keys."""
        out = []
        for s in self._modules:
            for p in s.params:
                padded = p.padded_sharded_param_size.numel()
                out.append((p.sharded_param._local_tensor, padded))
                for t in _optimizer_state(optimizer, p.sharded_param) if optimizer is not None else ():
                    t = getattr(t, "_local_tensor", t)
                    room = padded if t.dim() > 0 else 1
                    if t.numel() > room:
                        raise ValueError(f"gcagent: an optimizer state tensor of FSDP module {s.index} ({s.name}) has "
                                         f"{t.numel()} elements, more than its parameter's shard ({room})")
                    out.append((t, room))
        return out

    def sync_parameters(self, optimizer=None) -> bool:
        """Call after every step, failed or not, on every trainer: when the agents say the nodes'
        replicas may differ (a step given up on one node that another completed, or a node taken
        back in), every trainer loads the shard its local rank holds on the root node, and with
        `optimizer` its optimizer state for that shard, bit for bit, through the agents
        (uncompressed, summed: every other node adds -0.0); an iteration of its own. True when
        it loaded them; False also when another fault failed the broadcast (`failed_resyncs`),
        which the agents then call again. Module buffers stay each trainer's own, as FSDP keeps
        them."""
        root = self.client.resync_root
        if root is None or self._in_pass:
            return False
        if self._lost is not None:
            self._reconnect()
        tensors = self._replica_state(optimizer)
        elements = sum(room for _, room in tensors)
        if elements != self._weights_elements:
            self._weights_elements = elements
            self._slots = self._declare_on(self.client)
        self._step += 1  # an iteration of its own, on every node alike
        key = _WEIGHTS_KEY - self.local_rank
        slot = self._slots[key]
        mine = self.client.node_rank == root
        with torch.no_grad():
            slot.fill_(-0.0)
            offset = 0
            for t, room in tensors:
                if mine:
                    slot[offset:offset + t.numel()].copy_(t.detach().reshape(-1))
                offset += room
            try:
                self.client.submit(self._step, [key])
                done = self.client.wait(self._step, [key], int(self.timeout_s * 1000))
            except GcagentError as e:
                # Another fault failed the broadcast (on every node): the agents call the reload
                # again after the next step that completes.
                self._note_loss(e)
                self.failed_resyncs += 1
                return False
            if not done:
                raise GcagentError(ERR_TIMEOUT, f"gcagent: the weights of node {root} did not arrive within "
                                                f"{self.timeout_s} s")
            offset = 0
            for t, room in tensors:
                t.copy_(slot[offset:offset + t.numel()].view(t.shape))
                offset += room
        self.resyncs += 1
        return True

    # Runs in the autograd thread, inside FSDP's post-backward.
    def _on_shard(self, shards, output, input_tensor=None):
        if not self._in_pass:
            if self._lost is not None:
                self._reconnect()
            # A step per backward pass, every shard of it under that number: a pass that failed
            # on one node part-way leaves no key a step behind the others.
            self._step += 1
            self._in_pass, self._failure = True, None
            self._at_end = self._queue_finish()
        if self._failure is None:
            try:
                self._reduce(shards, output, input_tensor)
            except GcagentError as e:
                # Raised at the end of the pass, not here: the rest of FSDP's backward (the node's
                # reduce-scatters, which every trainer of the node must make alike) still runs.
                self._note_loss(e)
                self._failure = e
                self._abandon()
        if not self._at_end:
            self._in_pass = False  # outside a backward pass: every call is a pass of its own
            if self._failure is not None:
                raise self._failure

    def _reduce(self, shards, output, input_tensor):
        if output.numel() != shards.elements:
            raise GcagentError(ERR_INVALID_ARGUMENT,
                               f"gcagent: FSDP module {shards.index} ({shards.name}) reduced {output.numel()} "
                               f"elements, {shards.elements} declared: parameters without gradients this step? "
                               "module.set_reduce_scatter_unused_params(True) reduces them as zeros")
        if output.dtype != shards.dtype:
            raise GcagentError(ERR_INVALID_ARGUMENT,
                               f"gcagent: FSDP module {shards.index} ({shards.name}) reduced {output.dtype}, "
                               f"declared {shards.dtype}: set MixedPrecisionPolicy(reduce_dtype=...) first")
        keys, result = self._submit(shards, output, input_tensor)
        self.shards += 1
        if self._at_end and not self._reads_early(shards, output):
            self._pending.append((shards, keys, output, result))
            return
        self.waited_in_hook += 1
        self._wait(shards, keys)
        with torch.no_grad():
            output.copy_(result.view(output.shape))

    def _reads_early(self, shards, output) -> bool:
        """Whether FSDP reads the output before the pass ends (the hook then waits for it)."""
        return shards.read_early(output)

    def _queue_finish(self) -> bool:
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        except RuntimeError:
            return False  # not inside a backward pass
        return True

    def _wait(self, shards, keys):
        if not self.client.wait(self._step, keys, int(self.timeout_s * 1000)):
            raise GcagentError(ERR_TIMEOUT, f"gcagent: the shard of FSDP module {shards.index} ({shards.name}) of "
                                            f"step {self._step} was not reduced within {self.timeout_s} s")

    def _finish(self):
        """The end of the backward pass: every shard in flight back in FSDP's gradients, or the
        pass's first failure raised."""
        if not self._in_pass:
            return
        pending, self._pending, self._in_pass = self._pending, [], False
        failure, self._failure = self._failure, None
        for shards, keys, output, result in pending:
            try:
                self._wait(shards, keys)
                gradients = shards.gradient_buffer(output)
                if gradients is None:
                    raise GcagentError(ERR_INVALID_ARGUMENT,
                                       f"gcagent: FSDP module {shards.index} ({shards.name}) copied its reduce-scatter "
                                       "output before the agent's average arrived: this FSDP version is not supported")
                with torch.no_grad():  # into the output, or the gradients FSDP cast it into (as FSDP casts)
                    gradients.copy_(result.view(gradients.shape))
            except GcagentError as e:
                self._note_loss(e)
                failure = failure or e  # the others are still waited for: nothing stays in flight
        # The node's trainers leave the pass together: a trainer whose shards came back first
        # must not exit (or close its connection) while another's are in flight, as the agent
        # fails a job's reductions when one of its trainers leaves.
        dist.barrier(group=self._modules[0].node_group)
        if failure is not None:
            raise failure

    def _abandon(self):
        """A shard failed: the shards already in flight are waited for and dropped."""
        pending, self._pending = self._pending, []
        for shards, keys, _, _ in pending:
            try:
                self._wait(shards, keys)
            except GcagentError:
                pass  # the hook's own error is the one raised

    # ---- Checkpoints ----

    def state_dict(self):
        """The error-feedback state of the shards this trainer contributes (the residuals its
        node's agent keeps for them, of the node's side and of the slices that node owns) and the
        step count, for a checkpoint. It is training state like the optimizer's: a restart that
        loads it continues with the residuals it had, bit for bit. Call between steps. Stateful
        for torch.distributed.checkpoint (every trainer saves its own, under its world rank)
        and a plain dict for torch.save."""
        if self._in_pass:
            raise GcagentError(ERR_INVALID_ARGUMENT, "gcagent: state_dict() during a backward pass")
        if self._lost is not None:
            self._reconnect()
        mine = self._saved_keys()
        return {f"rank{self.client.world_rank}": {
            "step": self._step, "node": self.client.node_rank, "nodes": self.client.node_count,
            "residuals": {str(k): self.client.get_state(k) for k in mine}}}

    def load_state_dict(self, state_dict):
        """Puts a state_dict() back, before the first backward pass after a restart: the agents
        continue with the residuals and step count it holds. Residuals of slices another node
        owns now (a job restarted on another number of nodes) are left out and counted in
        `dropped_residuals`; the node's own always apply."""
        name = f"rank{self.client.world_rank}"
        if name not in state_dict:
            raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent: the checkpoint holds no state of this trainer ({name}); "
                                                     f"it has {sorted(state_dict)}")
        entry = state_dict[name]
        residuals = {int(k): v for k, v in entry["residuals"].items()}
        mine = set(self._saved_keys())
        if set(residuals) != mine:
            raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent: the checkpoint's shards {sorted(residuals)} are not this "
                                                     f"model's {sorted(mine)} (another model, or other fully_shard modules)")
        if self._lost is not None:
            self._reconnect()
        self.dropped_residuals = sum(self.client.put_state(k, bytes(v)) for k, v in residuals.items())
        self._step = int(entry["step"])

    def close(self):
        self.client.close()


try:  # FSDP2's interface for a custom reduce-scatter (set_custom_reduce_scatter)
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatter
except ImportError:  # an FSDP2 without it: fsdp() then says so
    _ReduceScatter = None


def _reduce_scatter_op(shards):
    """The op FSDP will hand the reduce-scatter of `shards`' module, by FSDP's own rule: AVG for
    float32 and bfloat16, SUM around a pre- and post-division for float16 (or with
    set_force_sum_reduction_for_comms), PREMUL_SUM for a gradient divide factor other than the
    world size."""
    group = shards.group
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors
        return _get_gradient_divide_factors(shards.node_group, None, shards.dtype, group.device.type,
                                            group.gradient_divide_factor, group.force_sum_reduction_for_comms)[2]
    except (ImportError, AttributeError, TypeError):  # another FSDP version: its default rule
        return dist.ReduceOp.SUM if shards.dtype == torch.float16 else dist.ReduceOp.AVG


def _op_name(op):
    return {dist.ReduceOp.AVG: "AVG", dist.ReduceOp.SUM: "SUM"}.get(op, str(op)) if isinstance(
        op, dist.ReduceOp.RedOpType) else str(op)


class _AgentReduceScatter(_ReduceScatter or object):
    """FSDP2's reduce-scatter of one module, through the agents (FSDPState)."""

    def __init__(self, state, shards):
        self._state, self._shards = state, shards

    def allocate(self, size, *, dtype, device):
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        self._state._op = op
        self._state._on_shard(self._shards, output_tensor, input_tensor)
        return None


class FSDPState(HSDPState):
    """FSDP2 sharded over every trainer of every node, its reduce-scatter the agents'.

    FSDP's reduce-scatter input is the module's whole gradient, cut into one chunk per trainer
    of the job (node by node); node n's trainers own the n-th region of it. Each region is a
    tensor of its own, reduced to node n alone (reduce.owner): every trainer of the job submits
    all the regions, its node's agent sums them over the node's trainers and sends each to its
    owner, compressed with error feedback, and only the owner gets the region's average back:
    each node sends and receives (N-1)/N of the gradient once, where an all-reduce moves it
    twice. A trainer's shard is its part of its own node's region.

    The agents reduce as FSDP asks (its rule, read at fsdp()): float32 and bfloat16 gradients
    are averaged (AVG); float16 ones are summed (SUM: FSDP divides before and after, against
    overflow), in fp32, rounded once to float16."""

    _REDUCE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, model, client=None, codec=None, params=None, timeout_s=300.0):
        if _ReduceScatter is None:
            raise ValueError("gcagent: fsdp() needs FSDP2's set_custom_reduce_scatter (torch 2.9 or later)")
        self._op = dist.ReduceOp.AVG  # of the reduce-scatter being made
        self._ops = {}  # module index -> the op its regions were declared for
        super().__init__(model, client=client, codec=codec, params=params, timeout_s=timeout_s)
        self.nodes = self.client.node_count
        world = dist.get_world_size(self._modules[0].node_group) if self._modules else 0
        if world != self.nodes * self.local_size:
            raise ValueError(f"gcagent: fsdp() needs fully_shard over every trainer of the job ({self.nodes} nodes x "
                             f"{self.local_size}); the modules are sharded over {world} (for a mesh of this node's "
                             "trainers, use hsdp())")

    def _attach(self, module, shards):
        module.set_custom_reduce_scatter(_AgentReduceScatter(self, shards))

    def _key(self, shards, node):
        return shards.index * self.client.node_count + node

    def _saved_keys(self):
        # Every local trainer contributes every region: local rank 0 keeps the node's residuals.
        if self.local_rank != 0:
            return []
        return [self._key(s, n) for s in self._modules for n in range(self.client.node_count)]

    def _declare_on(self, client):
        nodes = client.node_count
        for shards in self._modules:
            op = _reduce_scatter_op(shards)
            if op not in (dist.ReduceOp.AVG, dist.ReduceOp.SUM):
                raise ValueError(f"gcagent: FSDP module {shards.index} ({shards.name}) would reduce-scatter with "
                                 f"{_op_name(op)} (a gradient divide factor other than the number of trainers); "
                                 "the agents average or sum")
            self._ops[shards.index] = op
        specs = [TensorSpec(shards.index * nodes + n, self.local_size * shards.elements, -shards.index, self.codec,
                            {**self.params, "reduce.owner": str(n),
                             **({"reduce.result": "sum"} if self._ops[shards.index] == dist.ReduceOp.SUM else {})},
                            _SLOT_DTYPES[shards.dtype])
                 for shards in self._modules for n in range(nodes)]
        client.declare(specs)
        return {spec.key: _slot_tensor(client, spec.key, shards.dtype)
                for spec, shards in zip(specs, [s for s in self._modules for _ in range(nodes)])}

    def sync_parameters(self, optimizer=None) -> bool:
        """Every shard lives on one trainer only: there are no replicas to make one again. A step
        given up on some nodes and completed on others leaves it applied to some shards only,
        as a failed step of FSDP's own leaves it; False."""
        return False

    def _reads_early(self, shards, output) -> bool:
        # After a SUM FSDP divides the output at once (its post-division).
        return self._op == dist.ReduceOp.SUM or shards.read_early(output)

    def _refuse(self, shards, why):
        raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent: FSDP module {shards.index} ({shards.name}): {why}")

    def _submit(self, shards, output, input_tensor):
        declared = self._ops[shards.index]
        if self._op != declared:
            self._refuse(shards, f"FSDP asked for a reduce-scatter with {_op_name(self._op)}; its regions were declared "
                                 f"for {_op_name(declared)} at fsdp(): set the gradient divide factor and "
                                 "set_force_sum_reduction_for_comms before fsdp()")
        region = self.local_size * shards.elements
        if input_tensor is None or input_tensor.numel() != self.nodes * region:
            self._refuse(shards, f"a reduce-scatter input of {None if input_tensor is None else input_tensor.numel()} "
                                 f"elements, {self.nodes} regions of {region} declared")
        flat = input_tensor.reshape(-1)
        keys = [self._key(shards, n) for n in range(self.nodes)]
        with torch.no_grad():
            for n, key in enumerate(keys):
                self._slots[key].copy_(flat[n * region:(n + 1) * region])
        self.client.submit(self._step, keys)
        own = self._slots[self._key(shards, self.client.node_rank)]
        return keys, own[self.local_rank * shards.elements:(self.local_rank + 1) * shards.elements]


def fsdp(model, client=None, codec=None, params=None, timeout_s: float = 300.0) -> FSDPState:
    """Hands the reduce-scatter of every fully_shard module of `model`, sharded over every
    trainer of the job (a 1-D mesh over the world: fully_shard's default), to the agents (see
    FSDPState): FSDP without replication, compressed between the nodes. All trainers call it
    with the same model, after fully_shard and before the first backward pass. Failures,
    reconnection and checkpoints as hsdp()'s."""
    return FSDPState(model, client=client, codec=codec, params=params, timeout_s=timeout_s)


def hsdp(model, client=None, codec=None, params=None, timeout_s: float = 300.0) -> HSDPState:
    """Hands the cross-node all-reduce of every fully_shard module of `model` to the agent (see
    the module's docstring). All trainers call it with the same model, after fully_shard and
    before the first backward pass. codec, params: the agent's codec for the shards (default:
    GCAGENT_CODEC and GCAGENT_CODEC_PARAMS, else the agent's)."""
    return HSDPState(model, client=client, codec=codec, params=params, timeout_s=timeout_s)
