"""gcagent as a torch.distributed backend. `import gcagent.torch` registers it:

    import gcagent.torch
    torch.distributed.init_process_group("gcagent")   # under plain torchrun
    model = DistributedDataParallel(model)              # no comm hook: DDP's allreduce is the agent's

The backend takes what it needs from the Store init_process_group hands it (_store_agent.py):
each node's agent is found (GCAGENT_SOCKET) or started, with a per-job token. A process group
with the same number of ranks on every node (the world; HSDP's replicate groups, one rank per
node) reduces through the agents, as a job of its own; every other group (one node's ranks, a
shard group), and every operation the agents do not do, runs on a gloo process group the backend creates
beside it, said once per operation in the "gcagent.torch.backend" log and counted in
`gloo_calls`.

Through the agents, exactly (codec none, summed in the agent's documented order):
- allreduce and allreduce_coalesced of float32, bfloat16 and float16 CPU tensors with SUM or
  AVG (AVG: the sum divided once by the number of trainers; gloo has no AVG at all).

On gloo, exactly as gloo does them (its errors included): MIN, MAX, PRODUCT, PREMUL_SUM and the
bitwise ops, integer and other dtypes, broadcast, allgather, reduce-scatter, barrier,
all-to-all, send and receive, gather and scatter, and groups not spread alike over every node.

Each agent tensor is one key per (elements, dtype, result): the n-th allreduce of that shape is
the key's n-th iteration on every rank (the order torch.distributed requires), and it waits for
the (n-1)-th to end here before its input is written. Submits and completions run on one thread
per group, which sleeps in gcagent_wait_any; a Work's future completes with the result written
back into the caller's tensors. An agent error or a timeout fails that Work's future with the
gcagent.GcagentError."""

import collections
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend

from gcagent.client import ERR_INVALID_ARGUMENT, ERR_IO, GcagentError, TensorSpec, step_timeout_s
# gcagent.torch imports this module last, once these are defined
from gcagent.torch import _bucket_result, _slot_tensor
from gcagent.torch._store_agent import NodeAgentLink, Placement

NAME = "gcagent"
log = logging.getLogger("gcagent.torch.backend")

_SLOT_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_node: Optional[NodeAgentLink] = None  # this process's agent, found or started by the world group


def _wakeup():
    from gcagent.torch import _Wakeup
    return _Wakeup()


@dataclass
class Options:
    """A gcagent process group's options: init_process_group("gcagent", pg_options=Options(...))
    or new_group(backend="gcagent", pg_options=...). With a codec, the group's SUM and AVG
    allreduces of at least min_elements elements are compressed with it (error feedback per
    tensor storage: give such a group persistent tensors, as DDP's buckets are); smaller ones (a
    loss, a metric) and every other group stay exact."""
    codec: Optional[str] = None
    params: Dict[str, str] = field(default_factory=dict)
    min_elements: int = 1024

    def describe(self) -> str:
        """What every rank of a group must agree on, in one order."""
        return f"codec={self.codec or 'none'} params={sorted(self.params.items())} min_elements={self.min_elements}"


class _Pending:
    __slots__ = ("iteration", "key", "fut", "tensors", "slot", "started")

    def __init__(self, iteration, key, fut, tensors, slot):
        self.iteration, self.key, self.fut, self.tensors, self.slot = iteration, key, fut, tensors, slot
        self.started = time.monotonic()


class GcagentBackend(_C10dBackend):
    """One process group's backend on this rank (see the module's doc)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, group_name: str = "",
                 global_ranks: Optional[List[int]] = None, options: Optional["Options"] = None):
        super().__init__(rank, size)
        self.group_name = group_name or "default"
        self.config = options or Options()
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("gcagent-gloo/", store), rank, size, timeout)
        self.gloo_calls: Dict[str, int] = collections.Counter()
        self.agent_calls = 0
        self.client = None
        # Every rank of the group says how its start went and with which options; a failure
        # or a disagreement anywhere fails the group's creation on every rank, naming it.
        try:
            local = self._connect(store, rank, size, timeout, global_ranks)
            mine = f"ok {self.config.describe()}"
        except GcagentError as e:
            local, mine = None, f"error {e}"
        store.set(f"gcagent/started/{rank}", mine)
        keys = [f"gcagent/started/{r}" for r in range(size)]
        store.wait(keys, timeout)
        said = [store.get(k).decode() for k in keys]
        why = mine[6:] if mine.startswith("error ") else next(
            (f"gcagent backend: rank {r} of group {self.group_name} failed: {word[6:]}" for r, word in enumerate(said)
             if word.startswith("error ")), None)
        why = why or next((f"gcagent backend: the ranks of group {self.group_name} disagree on its options: rank "
                           f"{rank} has {mine[3:]}, rank {r} {word[3:]}" for r, word in enumerate(said)
                           if word != mine), None)
        if why:
            if self.client is not None:
                self.client.close()
            raise GcagentError(ERR_INVALID_ARGUMENT, why)
        if local is None:
            return
        self.timeout_s = step_timeout_s(self.client, timeout.total_seconds())
        self._keys: Dict[Tuple[int, str, str], int] = {}
        self._specs: List[TensorSpec] = []
        self._slots: Dict[int, torch.Tensor] = {}
        self._iteration: Dict[int, int] = {}
        self._last: Dict[int, torch.futures.Future] = {}
        self._next_key = 1
        self._storage_of: Dict[int, "weakref.ref"] = {}  # compressed key -> its tensor's storage
        self.retired_keys = 0
        self._queue: collections.deque = collections.deque()
        self._pending: List[_Pending] = []
        self._lock = threading.Lock()
        self._wakeup = _wakeup()
        self._closed = False
        self._thread = threading.Thread(target=self._complete_loop, name=f"gcagent-{self.group_name}", daemon=True)
        self._thread.start()

    def _connect(self, store, rank, size, timeout, global_ranks) -> Optional[Tuple[int, int]]:
        """Finds or starts the node's agent (the first group) and connects this group's job when
        the agents serve it: (local rank, local size) in the job, else None (gloo)."""
        global _node
        if _node is None:  # the first group is init_process_group's: the world
            _node = NodeAgentLink(store, Placement.from_environment(rank, size), timeout)
        p = _node.placement
        members = list(global_ranks) if global_ranks else list(range(p.world))
        local = _spread(members, p)
        if local is None:
            log.info("gcagent backend: group %s (ranks %s) runs on gloo: the agents serve groups with the same "
                     "number of ranks on every node", self.group_name, members)
            return None
        # This group is a job of its own on the agents, its trainers numbered node by node.
        self.client = _node.connect(f"{_node.job}-{self.group_name}", local[0], local[1])
        return local

    def getBackendName(self) -> str:
        return NAME

    # ---- Collectives ----

    def allreduce(self, tensors, opts):
        why = self._not_for_agent(tensors, opts.reduceOp)
        if why:
            return self._on_gloo("allreduce", why, self.gloo.allreduce, tensors, opts)
        return self._reduce(tensors, opts.reduceOp.op)

    def allreduce_coalesced(self, tensors, opts):
        why = self._not_for_agent(tensors, opts.reduceOp)
        if why:
            return self._on_gloo("allreduce_coalesced", why, self.gloo.allreduce_coalesced, tensors, opts)
        return self._reduce(tensors, opts.reduceOp.op)

    def _not_for_agent(self, tensors, op) -> Optional[str]:
        """Why an allreduce goes to gloo; None: through the agents."""
        op = op.op  # the RedOpType (a ReduceOp compares equal to one only from its own side)
        if self.client is None:
            return f"group {self.group_name} is not spread alike over every node"
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            return f"the agents sum or average, {_op_name(op)} is exact on gloo"
        for t in tensors:
            if t.device.type != "cpu":
                return f"{t.device.type} tensors go through gloo for now"
            if t.dtype not in _SLOT_DTYPES:
                return f"the agents reduce float32, bfloat16 and float16, not {t.dtype}"
        return None

    def _on_gloo(self, what, why, call, *args):
        if what not in self.gloo_calls:
            log.info("gcagent backend: %s runs on the gloo sub-backend (%s)", what, why)
        self.gloo_calls[what] += 1
        return call(*args)

    # ---- Through the agent ----

    def _reduce(self, tensors, op) -> "torch.distributed.Work":
        result = "average" if op == dist.ReduceOp.AVG else "sum"
        futures = []
        for t in tensors:
            futures.append(self._reduce_one(t, result))
        self.agent_calls += 1
        return _Work(futures, tensors)

    def _reduce_one(self, tensor, result) -> torch.futures.Future:
        key = self._key(tensor, result)
        previous = self._last.get(key)
        if previous is not None and not previous.done():
            try:
                previous.wait()  # its caller hears of its failure
            except Exception:  # noqa: BLE001
                pass
        slot = self._slots[key]
        slot.copy_(tensor.reshape(-1))
        iteration = self._iteration.get(key, 0) + 1
        self._iteration[key] = iteration
        fut = torch.futures.Future()
        self._last[key] = fut
        self._queue.append(_Pending(iteration, key, fut, [tensor], slot))
        self._wakeup.set()
        return fut

    def _key(self, tensor, result: str) -> int:
        """The agent key of an allreduce of `tensor`. Exact ones: one per (elements, dtype,
        result). Compressed ones (Options.codec, at least Options.min_elements): one per tensor
        storage, so that a residual follows its tensor (DDP's bucket buffers live as long as
        their buckets) and two tensors of one size never share one."""
        dtype = _SLOT_DTYPES[tensor.dtype]
        compressed = self.config.codec not in (None, "none") and tensor.numel() >= self.config.min_elements
        identity = (tensor.numel(), dtype, result)
        if compressed:
            identity += (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        key = self._keys.get(identity)
        # A compressed key whose storage died names an address the allocator handed out again
        # (on some ranks only): a new tensor, which must not inherit the dead one's residual.
        storage = self._storage_of.get(key)
        if key is not None and (storage is None or storage() is not None):
            return key
        # A new key: the node's trainers declare every key again (the same calls in the same
        # order on every rank), once nothing is in flight. Priorities follow first use: DDP
        # launches its buckets from the last layers on, so a later key is a front layer's and
        # goes first (P3).
        for fut in list(self._last.values()):
            if not fut.done():
                try:
                    fut.wait()
                except Exception:  # noqa: BLE001
                    pass
        self._retire_dead()
        key, self._next_key = self._next_key, self._next_key + 1
        params = {"reduce.result": "sum"} if result == "sum" else {}
        if compressed:
            spec = TensorSpec(key, tensor.numel(), key, self.config.codec, {**self.config.params, **params}, dtype)
        else:
            spec = TensorSpec(key, tensor.numel(), key, "none", params, dtype)
        error = None
        try:
            with self._lock:
                self.client.declare(self._specs + [spec])
                self._slots = {s.key: _slot_tensor(self.client.slot(s.key), dtype_of(s.dtype))
                               for s in self._specs + [spec]}
        except GcagentError as e:
            error = e
        # No node sends the key's slices before every node knows it: a peer's agent keeps early
        # slices only within a budget (a 400 MB layer's overflow it drops), and ranks meet a
        # new key seconds apart in a first backward pass. Every rank says whether its agent
        # took the key, so that none waits here for one that failed.
        mine = [0] * self.size()
        mine[self.rank()] = int(error is not None)
        failed = [r for r, f in enumerate(self._over_ranks(mine, dist.ReduceOp.MAX)) if f]
        if error is not None:
            raise error
        if failed:
            raise GcagentError(ERR_IO, f"gcagent backend: group {self.group_name}: the agent of rank(s) "
                                       f"{', '.join(map(str, failed))} did not take the key of an allreduce of "
                                       f"{tensor.numel()} elements (the error is raised there)")
        self._specs.append(spec)
        self._keys[identity] = key
        if compressed:
            self._storage_of[key] = weakref.ref(tensor.untyped_storage())
        return key

    def _over_ranks(self, values: List[int], op) -> List[int]:
        """`values` reduced element-wise with `op` over the group's ranks (on its gloo sub-backend)."""
        t = torch.tensor(values, dtype=torch.int32)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        self.gloo.allreduce([t], opts).wait()
        return t.tolist()

    def _retire_dead(self):
        """Compressed keys whose tensor is gone (DDP's buckets from before it rebuilt them) leave
        the agents, with their slots and residuals: those gone on every rank of the group, as
        the group agrees on gloo, so that every rank declares the same list."""
        candidates = sorted(self._storage_of)
        if not candidates:
            return
        gone = self._over_ranks([int(self._storage_of[k]() is None) for k in candidates], dist.ReduceOp.MIN)
        retired = {k for k, g in zip(candidates, gone) if g}
        if not retired:
            return
        self._specs = [s for s in self._specs if s.key not in retired]
        self._keys = {i: k for i, k in self._keys.items() if k not in retired}
        for k in retired:
            for table in (self._storage_of, self._slots, self._iteration, self._last):
                table.pop(k, None)
        self.retired_keys += len(retired)

    # Runs in the group's completion thread: every submit and wait of the agent tensors.
    def _complete_loop(self):
        while not self._closed:
            self._wakeup.clear()
            while self._queue:
                self._submit(self._queue[0])
                self._queue.popleft()
            if not self._pending:
                self._wakeup.wait()
                continue
            due = min(p.started for p in self._pending) + self.timeout_s
            timeout_ms = max(0, int((due - time.monotonic()) * 1000) + 1)
            try:
                with self._lock:
                    index, error = self.client.wait_any([(p.iteration, p.key) for p in self._pending], timeout_ms,
                                                        self._wakeup.fd)
            except Exception as e:  # noqa: BLE001 - the connection failed: everything in flight fails
                failed, self._pending = self._pending, []
                for p in failed:
                    p.fut.set_exception(e)
                continue
            if index is None:
                self._expire()
            else:
                self._finish(self._pending.pop(index), error)

    def _submit(self, p: _Pending):
        try:
            with self._lock:
                self.client.submit(p.iteration, [p.key])
            self._pending.append(p)
        except Exception as e:  # noqa: BLE001 - every failure must reach the future
            p.fut.set_exception(e)

    def _finish(self, p: _Pending, error):
        if error is None:
            for t in p.tensors:
                t.copy_(p.slot.view(t.shape))
        # The slot is free again (a next call of the key need not wait), and the future, whose
        # value holds the caller's tensors, is no longer kept here: a tensor the caller drops
        # (DDP's buckets before it rebuilt them) can die and its key retire.
        if self._last.get(p.key) is p.fut:
            del self._last[p.key]
        if error is not None:
            p.fut.set_exception(error)
        else:
            p.fut.set_result(p.tensors)

    def _expire(self):
        now, still = time.monotonic(), []
        for p in self._pending:
            if now - p.started > self.timeout_s:
                p.fut.set_exception(GcagentError(3, f"gcagent backend: allreduce of {p.slot.numel()} elements "
                                                    f"(key {p.key}, iteration {p.iteration}) not done within "
                                                    f"{self.timeout_s:g} s"))
            else:
                still.append(p)
        self._pending = still

    def shutdown(self):
        if self.client is not None and not self._closed:
            self._closed = True
            self._wakeup.set()
            self._thread.join(5)
            self.client.close()


# Every other operation of c10d's Backend, passed to the gloo sub-backend as it is, with why.
_ON_GLOO = {
    "the agents have no broadcast yet": ("broadcast",),
    "the agents have no allgather yet": ("allgather", "_allgather_base", "all_gather_single", "allgather_coalesced",
                                         "all_gather_single_coalesced", "allgather_into_tensor_coalesced"),
    "reduce-scatters go through the agents only under gcagent.torch.fsdp yet": (
        "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single", "reduce_scatter_single_coalesced",
        "reduce_scatter_tensor_coalesced"),
    "the agents have no barrier yet": ("barrier", "monitored_barrier"),
    "not an agent operation": ("reduce", "gather", "gather_into_tensor", "gather_single", "scatter", "alltoall",
                               "alltoall_base", "all_to_all_single", "send", "recv", "recv_anysource",
                               "allreduce_sparse"),
}


def _forward_to_gloo(name, why):
    def call(self, *args):
        return self._on_gloo(name, why, getattr(self.gloo, name), *args)
    call.__name__ = name
    return call


for _why, _names in _ON_GLOO.items():
    for _name in _names:
        if hasattr(dist.ProcessGroupGloo, _name):
            setattr(GcagentBackend, _name, _forward_to_gloo(_name, _why))


class _Work(dist.Work):
    """An agent collective's Work. The per-tensor futures get set_exception on failure, which
    keeps the exception as their value: Python's wait() raises it, but C++ callers of the
    future (DDP's reducer) would read it as a result and c10d's future-wrapping Work's wait()
    would return. So wait() raises the first tensor's failure itself, and get_future() gives a
    future that fails for real."""

    def __init__(self, futures, tensors):
        super().__init__()
        self._futures = futures
        if len(futures) == 1:
            self._fut = futures[0].then(_bucket_result)
        else:
            self._fut = torch.futures.collect_all(futures).then(lambda done: _all_values(done, tensors))

    def wait(self, timeout=None):
        for fut in self._futures:
            fut.wait()
        return True

    def is_completed(self):
        return all(fut.done() for fut in self._futures)

    def get_future(self):
        return self._fut


def _all_values(done, tensors):
    for fut in done.value():
        fut.value()
    return list(tensors)


def _spread(members: List[int], p: Placement) -> Optional[Tuple[int, int]]:
    """(this rank's place among the group's ranks on its node, their number) when the group has
    the same number of ranks on every node (an agent job then serves it), else None. Global
    ranks are numbered node by node (Placement checks it)."""
    per_node = collections.Counter(r // p.local_size for r in members)
    if len(per_node) != p.nodes or len(set(per_node.values())) != 1:
        return None
    mine = sorted(r for r in members if r // p.local_size == p.node)
    return mine.index(p.rank), len(mine)


def _op_name(op) -> str:
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


def dtype_of(name: str):
    return next(t for t, n in _SLOT_DTYPES.items() if n == name)


def _create(dist_options, backend_options):
    """init_process_group's and new_group's creator (the extended API: the group's name)."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise GcagentError(1, f"gcagent backend: pg_options must be gcagent.torch.Options, not "
                              f"{type(backend_options).__name__}")
    return GcagentBackend(dist_options.store, dist_options.group_rank, dist_options.group_size, dist_options.timeout,
                          str(dist_options.group_id or ""), list(dist_options.global_ranks_in_group or []),
                          backend_options)


def register():
    """Registers the backend under the name "gcagent" (idempotent)."""
    if NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])
