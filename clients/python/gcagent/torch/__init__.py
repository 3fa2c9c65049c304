"""PyTorch: a DDP communication hook and a Horovod-style DistributedOptimizer.

    import gcagent.torch
    model = DistributedDataParallel(model)
    model.register_comm_hook(gcagent.torch.State(), gcagent.torch.hook)

DDP rebuilds its buckets after the first iteration (and may again if the graph changes), so
the hook first learns them: while the bucket list of an iteration differs from the one before,
buckets go through the process group's allreduce; once two iterations agree, the hook declares
one agent tensor per bucket (priority: minus the index of the bucket's first layer, so front
layers go first) and from then on writes each bucket into its shared slot, submits it, and
completes the future from a background thread that sleeps until the agent answers or a bucket
is due (gcagent_wait_any: no polling). With DistributedDataParallel(..., gradient_as_bucket_view=True)
the first step through the agent moves each bucket, and the gradients that are views of it, into
the bucket's shared slot (Tensor.set_): from then on autograd writes the gradients straight into
the agent's memory and the average lands in them, no copy either way. Without it (DDP's default)
the hook copies each bucket into its slot and the result back. An agent error or a timeout fails the bucket's
future, and backward() raises it as the gcagent.GcagentError it is (the hook raises it at the
end of the backward pass, before DDP would, as DDP can only say RuntimeError); nothing waits
forever.

An agent that closed the connection (killed, restarted, or given up on as frozen) is
reconnected to at the start of a later step, when the State made its own client: a new
connection with the same buckets declared, so a training loop that catches the error goes on
once the agent is back (`State.reconnects` counts them). Until then every step fails at once.

Under transport.on_peer_loss = "shrink" a node taken back (or one that trained apart) holds an
older model: call `state.sync_parameters(model.module)` after every step, failed or not; after
the first step completed under the membership that took it in, every member's trainers load
the weights of the node that kept training (a broadcast through the agent), and it returns True.

GPU path: when the buckets are CUDA tensors, the hook declares them on the device instead
(gcagent_declare_device with the bucket's GPU UUID): each bucket is copied into its device slot
on the current stream, the client records an interprocess event on that stream and submits,
and on completion the stream waits for the agent's event before the copy back; the host never
waits for the GPU. The agent must run on the same GPU; when it has none or another, declaring
fails with the agent's message naming both GPUs."""

import collections
import contextlib
import os
import select
import threading
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist

from gcagent.client import (BROADCAST_KEY_BASE, ERR_IO, Client, GcagentError, Reducer, TensorSpec,  # noqa: F401
                            codec_from_env, default_reducer, local_rank, local_size, rank, size, step_timeout_s,
                            warn_dgc_momentum)

RECONNECT_TIMEOUT_MS = 2000  # a step waits no longer for an agent that is coming back
_MODEL_KEY = BROADCAST_KEY_BASE - 1  # State.sync_parameters' key: apart from buckets and broadcasts


class _DeviceSlot:
    """A device pointer the client library returned, seen by torch.as_tensor as CUDA memory."""

    def __init__(self, pointer, elements):
        self.__cuda_array_interface__ = {"shape": (elements,), "typestr": "<f4", "data": (pointer, False),
                                         "version": 2}


def _optimizer_state(optimizer, param):
    """The floating-point tensors of `param`'s optimizer state (momentum, Adam's moments and
    step), in name order: what sync_parameters broadcasts beside the weights."""
    state = optimizer.state.get(param, {})
    return [state[name] for name in sorted(state) if torch.is_tensor(state[name]) and state[name].is_floating_point()]


def _momentum(optimizer):
    """The largest momentum of a torch optimizer's parameter groups (0 without one)."""
    return max((float(g.get("momentum") or 0) for g in optimizer.param_groups), default=0.0)


def _bucket_result(fut):
    # A future given set_exception holds the exception as its value, which DDP would read as a
    # tensor ("Unable to cast ... to Tensor"); value() raises it, failing this future for real.
    return fut.value()


# The bucket dtypes the agent's host slots hold (bfloat16 and float16 averaged in fp32 and
# rounded to nearest even); GPU buckets are float32.
_SLOT_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _slot_tensor(array, dtype):
    """A slot (Client.slot's array over the shared segment) as a tensor of `dtype`."""
    return torch.from_numpy(array).view(dtype) if dtype != torch.float32 else torch.from_numpy(array)


def _shapes(bucket):
    """What tells a bucket's layout apart beyond its size: its parameters' shapes, in order."""
    return tuple(tuple(p.shape) for p in bucket.parameters())


def _settled_with(buf):
    """A bucket's result for DDP inside a backward pass: the average, or when the bucket failed,
    its local gradient unchanged; the failure is raised at the end of the pass (State._raise_failure)."""
    def settle(fut):
        try:
            return fut.value()
        except Exception:  # noqa: BLE001 - State._raise_failure raises it
            return buf
    return settle


class _Reconnecting:
    """A shim's connection to the agent, made anew at its next step once the agent closed it. The
    shim has client, _own_client, _slots (what _declare_on(client) returns), _lost and
    reconnects."""

    def _note_loss(self, e):
        if _connection_lost(self._own_client, e):
            self._lost = e

    def _reconnect(self):
        """A new connection with the tensors declared again, or, while the agent does not answer,
        the old one kept: the step's tensors fail on it at once."""
        fresh = _declared_anew(self._declare_on)
        if fresh is None:
            return
        old, (self.client, self._slots) = self.client, fresh
        old.close()
        self._lost = None
        self.reconnects += 1


class State(_Reconnecting):
    """The hook's state: one agent connection and a completion thread per process.

    optimizer: the model's optimizer, when given, is checked against the codec (a warning when
    dgc, which applies momentum itself, meets an optimizer with momentum)."""

    def __init__(self, client=None, codec=None, params=None, process_group=None, timeout_s=300.0, optimizer=None):
        self._own_client = client is None  # only a connection of its own is made anew
        self.client = client or Client()
        env_codec, env_params = codec_from_env()
        self.codec = codec if codec is not None else env_codec
        self.params = dict(params) if params is not None else env_params
        if optimizer is not None:
            warn_dgc_momentum(self.codec, self.params, _momentum(optimizer), type(optimizer).__name__)
        self.process_group = process_group
        self.timeout_s = step_timeout_s(self.client, timeout_s)  # no sooner than the agent decides
        self.step = 1
        self.declared = {}          # bucket index -> elements, once learned
        self.shapes = {}            # bucket index -> its parameters' shapes in order, seen while learning
        self._verify = False        # the first step after load_state_dict: buckets checked against `shapes`
        self.priorities = {}        # bucket index -> priority declared to the agent
        self.seen, self.last_seen = {}, None
        self.device = None          # the buckets' torch.device when they live on a GPU
        self.dtype = torch.float32  # the buckets' dtype: float32, bfloat16 or float16 (host buckets)
        self._warned_dtype = False
        self.agent_buckets = 0      # buckets reduced through the agent
        self.fallback_buckets = 0   # buckets reduced by the process group while learning
        self.reconnects = 0         # connections made anew after the agent closed one
        self.resyncs = 0            # times sync_parameters loaded another node's weights
        self.failed_resyncs = 0     # its broadcasts another fault failed (called again after)
        self._model_elements = 0    # the model's key, declared beside the buckets once used
        self._lost = None           # the error that lost the connection, until it is made anew
        self.moved_buckets = 0      # buckets moved into their slots (no copies from then on)
        self.copied_buckets = 0     # buckets copied into their slots and back (not views: see above)
        self.dropped_residuals = 0  # of the last load_state_dict: owned by another node now
        self._slots = {}            # key -> its slot (a CPU tensor over the agent's segment, or a device slot)
        self._queue = collections.deque()  # buckets handed over, for the completion thread to submit
        self._wakeup = _Wakeup()
        self._pending = []
        self._watch_step, self._watched = None, []  # this backward's agent futures, checked at its end
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._complete_loop, name="gcagent-hook", daemon=True)
        self._thread.start()

    # Runs in the hook (autograd) thread.
    def on_bucket(self, bucket):
        index, buf = bucket.index(), bucket.buffer()
        if self._lost is not None and not self.seen and self.declared:  # a step's first bucket
            self._reconnect()
        self.seen[index] = buf.numel()
        if buf.is_cuda != (self.device is not None) or (buf.is_cuda and buf.device != self.device):
            self.declared = {}
            self.device = buf.device if buf.is_cuda else None
        if buf.dtype != self.dtype:  # the agent's slots hold the buckets' own dtype
            self.declared = {}
            self.dtype = buf.dtype
        if not self._slots_hold_dtype():
            self._unsupported(buf)  # stays on the process group, every step
            self.declared = {}
        if self._verify and self.declared.get(index) == buf.numel() and _shapes(bucket) != self.shapes.get(index):
            self.declared = {}  # DDP built other buckets this time: learnt again, the residuals kept by the agent
        if self.declared.get(index) == buf.numel():
            self.agent_buckets += 1
            if self.device is not None:
                fut = torch.futures.Future(devices=[self.device])
                stream = torch.cuda.current_stream(self.device)
                self._slots[index].copy_(buf.reshape(-1), non_blocking=True)  # on `stream`
                self._hand_over((self.step, index, fut, buf, time.monotonic(), stream))
            else:
                fut = torch.futures.Future()
                slot = self._slots[index]
                if buf.data_ptr() != slot.data_ptr():
                    self._into_slot(bucket, buf, slot)
                self._hand_over((self.step, index, fut, buf, time.monotonic(), None))
            fut = fut.then(_settled_with(buf) if self._watch(fut) else _bucket_result)
        else:
            self.declared = {}
            self.shapes[index] = _shapes(bucket)
            fut = self._fallback(buf)
        if bucket.is_last():
            self._end_iteration()
        return fut

    def _slots_hold_dtype(self):
        return self.dtype in _SLOT_DTYPES and (self.device is None or self.dtype == torch.float32)

    def _unsupported(self, buf):
        if not self._warned_dtype:
            self._warned_dtype = True
            where = "GPU" if buf.is_cuda else "host"
            warnings.warn(f"gcagent: DDP buckets of {buf.dtype} on the {where} are not reduced through the agent "
                          "(it takes float32, and on the host bfloat16 and float16): they stay on the process group")

    def _hand_over(self, item):
        self._queue.append(item)
        self._wakeup.set()

    def _into_slot(self, bucket, buf, slot):
        """Copies the bucket into its slot. When DDP's gradients are views of the bucket
        (gradient_as_bucket_view=True), also moves the bucket and those views into the slot: they
        are the tensors DDP's reducer holds, so autograd and DDP write there from now on."""
        slot.copy_(buf.reshape(-1))
        grads = [p.grad for p in bucket.parameters()]
        bucket_storage = buf.untyped_storage().data_ptr()
        if not all(g is not None and g.untyped_storage().data_ptr() == bucket_storage for g in grads):
            self.copied_buckets += 1
            return
        target, base = slot.untyped_storage(), slot.storage_offset() - buf.storage_offset()
        with torch.no_grad():
            for g in grads:
                g.set_(target, base + g.storage_offset(), g.size(), g.stride())
            buf.set_(target, slot.storage_offset(), buf.size(), buf.stride())
        self.moved_buckets += 1

    def _watch(self, fut):
        """Has the end of this backward pass raise the GcagentError a bucket failed with: raised
        from a callback of the autograd engine it reaches backward()'s caller as itself, where
        DDP would turn a failed future into a RuntimeError. True inside a backward pass."""
        if self._watch_step != self.step:
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._raise_failure)
            except RuntimeError:
                return False  # not inside a backward pass: DDP reports the failed future itself
            self._watch_step, self._watched = self.step, []
        self._watched.append(fut)
        return True

    def _raise_failure(self):
        """Runs before DDP's end of the pass. A failed bucket gave DDP its local gradient
        (_settled_with), so DDP still ends the iteration cleanly and the next one starts anew
        (a future that fails leaves DDP's reducer mid-iteration for good); the failure is
        raised after that, from a callback queued behind DDP's."""
        watched, self._watched = self._watched, []
        failure = None
        for fut in watched:
            try:
                fut.wait()
            except Exception as e:  # noqa: BLE001 - raised below, once DDP is done
                failure = failure or e
        if failure is not None:
            def raise_failure():
                raise failure
            torch.autograd.Variable._execution_engine.queue_callback(raise_failure)

    def _fallback(self, buf):
        self.fallback_buckets += 1
        world = dist.get_world_size(self.process_group)
        work = dist.all_reduce(buf.div_(world), group=self.process_group, async_op=True)
        return work.get_future().then(lambda f: f.value()[0])

    def _end_iteration(self):
        if not self.declared and self.seen == self.last_seen and self._slots_hold_dtype():
            self._declare(self.seen)
        self.last_seen, self.seen = self.seen, {}
        self._verify = False
        self.step += 1

    def _declare(self, buckets):
        self._drain()
        count = len(buckets)
        # DDP fills bucket 0 first, from the last layers: the last bucket holds the first layers.
        self.priorities = {i: -(count - 1 - i) for i in buckets}
        with self._lock:
            self._slots = self._declare_on(self.client, buckets)
        self.declared = dict(buckets)

    def _declare_on(self, client, buckets):
        """Declares one tensor per bucket on `client`, and the model's key once sync_parameters
        used it; returns their slots."""
        specs = [TensorSpec(i, n, self.priorities[i], self.codec, self.params, _SLOT_DTYPES[self.dtype])
                 for i, n in sorted(buckets.items())]
        if self._model_elements:
            specs.append(TensorSpec(_MODEL_KEY, self._model_elements, 1, "none", {"reduce.result": "sum"}))
        keys = {s.key: s.elements for s in specs}
        if self.device is not None:
            client.declare_device(specs, client.gpu_uuid(self.device.index))
            return {k: torch.as_tensor(_DeviceSlot(client.device_buffer(k), n), device=self.device)
                    for k, n in keys.items()}
        client.declare(specs)
        return {k: _slot_tensor(client.slot(k), self.dtype if k != _MODEL_KEY else torch.float32) for k in keys}

    # ---- Checkpoints ----

    def state_dict(self):
        """The hook's training state for a checkpoint: the step count, the buckets it learned,
        and on each node's local rank 0 the residuals its agent keeps for them (of the node's
        side and of the slices that node owns). A restart that loads it reduces its first step
        through the agent with the residuals it had, bit for bit the uninterrupted run, when DDP
        builds the buckets it rebuilt before at once (the same parameters in the same order,
        checked). When it does not (it orders them by when their gradients came in the first
        step), the hook learns them again for two steps, reduced exactly by the process group,
        and the residuals apply from the third. Call between steps. Stateful for torch.distributed.checkpoint (every
        trainer saves its own, under its world rank) and a plain dict for torch.save."""
        self._drain()
        if self._lost is not None and self.declared:
            self._reconnect()
        residuals = {}
        if self.declared and self.client.local_rank == 0:
            with self._lock:
                residuals = {str(k): self.client.get_state(k) for k in sorted(self.declared)}
        return {f"rank{self.client.world_rank}": {
            "step": self.step, "node": self.client.node_rank, "nodes": self.client.node_count,
            "buckets": {str(i): n for i, n in self.declared.items()},
            "shapes": {str(i): [list(s) for s in self.shapes.get(i, ())] for i in self.declared},
            "residuals": residuals}}

    def load_state_dict(self, state_dict):
        """Puts a state_dict() back before the first step after a restart: the buckets are
        declared as they were and their residuals put back (see state_dict). Residuals of
        slices another node owns now are left out and counted in `dropped_residuals`."""
        name = f"rank{self.client.world_rank}"
        if name not in state_dict:
            raise GcagentError(1, f"gcagent: the checkpoint holds no state of this trainer ({name}); "
                                  f"it has {sorted(state_dict)}")
        entry = state_dict[name]
        buckets = {int(i): int(n) for i, n in entry["buckets"].items()}
        self._drain()
        if buckets:
            self.priorities = {i: -(len(buckets) - 1 - i) for i in buckets}
            with self._lock:
                self._slots = self._declare_on(self.client, buckets)
                self.dropped_residuals = sum(self.client.put_state(int(k), bytes(v))
                                             for k, v in entry["residuals"].items())
            self.declared, self.last_seen = dict(buckets), dict(buckets)
            self.shapes = {int(i): tuple(tuple(s) for s in shapes) for i, shapes in entry["shapes"].items()}
            self._verify = True
        self.step = int(entry["step"])

    def sync_parameters(self, module, optimizer=None) -> bool:
        """Call after every step, failed or not. When the step just completed was the first under a
        membership that took nodes in (a node back after transport.on_peer_loss = "shrink" left
        it behind, or one that trained apart), or the first completed after a step was given up
        on some node (which others may have completed: their models then differ by it), every
        trainer of the members loads the weights of the node the agents name: the module's parameters and floating-point buffers are
        broadcast from that node's local rank 0 trainer through the agent, bit for bit, on a
        key of their own (uncompressed, summed: every other trainer adds -0.0). The same step
        on every member's trainers, so they all call it together; True when it loaded them.
        With `optimizer`, the parameters' floating-point optimizer state (momentum, Adam's
        moments and step) comes with them; without, it stays each trainer's own. A broadcast
        that another fault fails returns False (`failed_resyncs`): the agents call the reload
        again, after the next step that completes."""
        root = self.client.resync_root
        if root is None or not self.declared:
            return False
        tensors = [t for t in list(module.parameters()) + list(module.buffers()) if t.is_floating_point()]
        if optimizer is not None:
            tensors += [t for p in module.parameters() for t in _optimizer_state(optimizer, p)]
        elements = sum(t.numel() for t in tensors)
        self._drain()
        if elements != self._model_elements:
            self._model_elements = elements
            with self._lock:
                self._slots = self._declare_on(self.client, self.declared)
        step, self.step = self.step, self.step + 1  # a step number of its own, on every node alike
        mine = self.client.world_rank == root * self.client.local_size
        slot = self._slots[_MODEL_KEY]
        with torch.no_grad(), self._lock:
            # The weights go straight into the slot and come straight back out: one copy each way.
            offset = 0
            for t in tensors if mine else ():
                slot[offset:offset + t.numel()].copy_(t.detach().reshape(-1))
                offset += t.numel()
            if not mine:
                slot.fill_(-0.0)
            try:
                if self.device is not None:
                    stream = torch.cuda.current_stream(self.device)
                    self.client.submit_device(step, [_MODEL_KEY], stream.cuda_stream)
                    done = self.client.wait_device(step, [_MODEL_KEY], int(self.timeout_s * 1000),
                                                   stream.cuda_stream)
                else:
                    self.client.submit(step, [_MODEL_KEY])
                    done = self.client.wait(step, [_MODEL_KEY], int(self.timeout_s * 1000))
            except GcagentError as e:
                # Another fault failed the broadcast (on every node: it is one reduction). The
                # agents call the reload again after the next step that completes.
                self._note_loss(e)
                self.failed_resyncs += 1
                return False
            if not done:
                raise GcagentError(3, f"gcagent: the weights of node {root} did not arrive within {self.timeout_s} s")
            offset = 0
            for t in tensors:
                t.copy_(slot[offset:offset + t.numel()].reshape(t.shape))
                offset += t.numel()
        self.resyncs += 1
        return True

    def _reconnect(self):
        """A new connection with the buckets declared again, or, while the agent does not
        answer, the old one kept: the step's buckets fail on it at once. The old connection's
        slots stay mapped until the new one's are in place."""
        self._drain()
        fresh = _declared_anew(lambda client: self._declare_on(client, self.declared))
        if fresh is None:
            return
        with self._lock:
            old, (self.client, self._slots) = self.client, fresh
        old.close()
        self._lost = None
        self.reconnects += 1

    def _drain(self):
        while self._queue or self._pending:
            time.sleep(0.001)

    # Runs in the completion thread: every client call after the declaration happens here. It
    # sleeps in gcagent_wait_any until a bucket completes, the hook hands over another (the
    # wake-up descriptor), or the oldest bucket's time is up.
    def _complete_loop(self):
        while True:
            self._wakeup.clear()
            while self._queue:
                self._submit(self._queue[0])
                self._queue.popleft()  # only now: _drain sees the bucket in one list or the other
            if not self._pending:
                self._wakeup.wait()
                continue
            due = min(item[4] for item in self._pending) + self.timeout_s
            timeout_ms = max(0, int((due - time.monotonic()) * 1000) + 1)
            try:
                with self._lock:
                    index, error = self.client.wait_any([(item[0], item[1]) for item in self._pending], timeout_ms,
                                                        self._wakeup.fd)
            except Exception as e:  # noqa: BLE001 - the connection failed: every bucket in flight fails
                self._note_loss(e)
                failed, self._pending = self._pending, []
                for item in failed:
                    item[2].set_exception(e)
                continue
            if index is None:
                self._expire()
            else:
                self._finish(self._pending.pop(index), error)

    def _submit(self, item):
        step, index, fut, stream = item[0], item[1], item[2], item[5]
        try:
            with self._lock:
                if stream is not None:
                    self.client.submit_device(step, [index], stream.cuda_stream)
                else:
                    self.client.submit(step, [index])
            self._pending.append(item)
        except Exception as e:  # noqa: BLE001 - every failure must reach the future
            self._note_loss(e)
            fut.set_exception(e)

    def _finish(self, item, error):
        step, index, fut, buf, _, stream = item
        try:
            if error is not None:
                raise error
            if stream is not None:
                with self._lock:  # complete: returns at once, and `stream` now waits for the agent's writes
                    self.client.wait_device(step, [index], 0, stream.cuda_stream)
                with torch.cuda.stream(stream):  # the copy back queues behind them
                    buf.copy_(self._slots[index].reshape(buf.shape), non_blocking=True)
                    fut.set_result(buf)
                return
            slot = self._slots[index]
            if buf.data_ptr() != slot.data_ptr():  # a bucket that is not in its slot (see _into_slot)
                buf.copy_(slot.reshape(buf.shape))
            fut.set_result(buf)
        except Exception as e:  # noqa: BLE001
            self._note_loss(e)
            fut.set_exception(e)

    def _expire(self):
        now, still = time.monotonic(), []
        for item in self._pending:
            step, index, fut, _, started, _ = item
            if now - started > self.timeout_s:
                fut.set_exception(GcagentError(3, f"gcagent: bucket {index} of iteration {step} "
                                                  f"not reduced within {self.timeout_s} s"))
            else:
                still.append(item)
        self._pending = still


def _declared_anew(declare_on):
    """A new connection with declare_on(client) run on it: (client, what it returned), or None
    while the agent does not answer (a shim then keeps its old connection, on which every step
    fails at once)."""
    client = None
    try:
        client = Client(timeout_ms=RECONNECT_TIMEOUT_MS)
        return client, declare_on(client)
    except GcagentError:
        if client is not None:
            client.close()
        return None


def _connection_lost(own_client, e) -> bool:
    """The agent closed a connection the shim made itself (it died, restarted or was given up on
    as frozen): the shim connects anew at its next step."""
    return own_client and isinstance(e, GcagentError) and e.code == ERR_IO


class _Wakeup:
    """An eventfd the completion thread sleeps on, beside the agent's socket in gcagent_wait_any."""

    def __init__(self):
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def set(self):
        os.eventfd_write(self.fd, 1)

    def clear(self):
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass

    def wait(self):
        select.select([self.fd], [], [])


def sync_parameters(state: State, module, optimizer=None) -> bool:
    """state.sync_parameters(module, optimizer): after each step, loads the weights (and with
    `optimizer` its state) of the node the agents name, when the nodes' models may differ (see
    State.sync_parameters)."""
    return state.sync_parameters(module, optimizer)


def hook(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: model.register_comm_hook(gcagent.torch.State(), gcagent.torch.hook)."""
    return state.on_bucket(bucket)


class DistributedOptimizer:
    """Horovod-style wrapper for training without DDP: step() first replaces every gradient by
    its average over all trainers (one agent tensor per parameter, front layers first).

    The gradients of float32 CPU parameters live in the agent's shared slots: the first
    synchronize() moves each into its slot (a missing one becomes zeros, as Horovod fills it),
    autograd then accumulates into the slot in place, and the average lands there: no copy
    either way. zero_grad() therefore zeroes those gradients in place instead of setting them
    to None (a None gradient would cost a copy into the slot on the next step). Other
    parameters (GPU, other dtypes) are copied into their slots and back.

    reducer: default_reducer() when none. backward_passes_per_step: as Horovod's, how many
    backward passes may add into the gradients (autograd sums them) before step() reduces the
    sums once; one pass more raises. A dgc codec meeting an optimizer with momentum warns."""

    def __init__(self, optimizer, reducer=None, backward_passes_per_step=1):
        self.optimizer = optimizer
        self._reducer = reducer
        if int(backward_passes_per_step) < 1:
            raise ValueError(f"gcagent: backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._passes = {}   # parameter -> backward passes since the last reduction
        self._placed = {}   # parameter -> the slot its gradient lives in (float32 CPU parameters)
        self._skip = False  # inside skip_synchronize()
        for p in self._params():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._count_pass)
        codec, params = (reducer.codec, reducer.params) if reducer is not None else codec_from_env()
        warn_dgc_momentum(codec, params, _momentum(optimizer), type(optimizer).__name__)

    @property
    def reducer(self):
        if self._reducer is None:
            self._reducer = default_reducer()
        return self._reducer

    def _params(self):
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _count_pass(self, p):
        n = self._passes.get(p, 0) + 1
        if n > self.backward_passes_per_step:
            raise ValueError(f"gcagent: gradients were computed more than backward_passes_per_step="
                             f"{self.backward_passes_per_step} times before step(); raise backward_passes_per_step "
                             "to accumulate them locally")
        self._passes[p] = n

    def synchronize(self):
        """Replaces every gradient by its average over all trainers (step() calls it)."""
        params = [(i, p) for i, p in enumerate(self._params()) if p.requires_grad]
        slots = self.reducer.slots([(i, p.numel(), -i) for i, p in params])
        copied = []
        with torch.no_grad():
            for (_, p), s in zip(params, slots):
                slot = torch.from_numpy(s).view(p.shape)
                if p.grad is not None and p.grad.data_ptr() == slot.data_ptr():
                    continue  # already there
                if p.grad is None:
                    slot.zero_()
                else:
                    slot.copy_(p.grad)
                if p.dtype == torch.float32 and p.device.type == "cpu":
                    p.grad = self._placed[p] = slot  # lives in its slot from now on
                else:
                    copied.append((p, slot))
        self.reducer.reduce_slots([i for i, _ in params])
        with torch.no_grad():
            for p, slot in copied:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(slot)
        self._passes.clear()

    def zero_grad(self, set_to_none: bool = True):
        """Zeroes the gradients that live in their slots in place (whatever set_to_none says),
        and the others as the optimizer does."""
        with torch.no_grad():
            for p in self._params():
                if p.grad is None:
                    continue
                if set_to_none and p.grad is not self._placed.get(p):
                    p.grad = None
                else:
                    p.grad.zero_()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's: step() inside applies the gradients an explicit synchronize() reduced
        (to clip them in between, say) without reducing them again."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not self._skip:
            self.synchronize()
        return self.optimizer.step(closure)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


def broadcast_parameters(params, reducer: Reducer = None, root: int = 0):
    """Copies the root trainer's parameter values to every trainer, bit for bit (fp32):
    uncompressed, on keys of their own (Reducer.broadcast), whatever the gradients' codec.
    reducer: default_reducer() when none."""
    reducer = reducer or default_reducer()
    params = list(params)
    arrays = [(i, p.detach().to("cpu", torch.float32).numpy(), -i) for i, p in enumerate(params)]
    with torch.no_grad():
        for p, a in zip(params, reducer.broadcast(arrays, root)):
            p.copy_(torch.from_numpy(a))


from gcagent.torch import fsdp  # noqa: E402,F401 - gcagent.torch.fsdp.hsdp(...) after `import gcagent.torch`


if dist.is_available():  # a torch built without torch.distributed has no backends to join
    from gcagent.torch import backend as _backend  # noqa: E402 - registers the "gcagent" backend
    from gcagent.torch.backend import Options  # noqa: E402,F401

    _backend.register()
