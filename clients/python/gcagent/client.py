"""A trainer's connection to its node's gcagent (the C client, through ctypes), and Reducer,
the synchronous "average (or sum, or broadcast) these arrays over every trainer" that the
shims share."""

import contextlib
import ctypes
import mmap
import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from gcagent import _library

OK, ERR_INVALID_ARGUMENT, ERR_IO, ERR_TIMEOUT, ERR_AGENT = 0, 1, 2, 3, 5
DEFAULT_SOCKET = "/run/gcagent/control.sock"
CONNECT_ABI_VERSION = 3      # gcagent_connect_flags
CONNECT_WAIT_FOR_AGENT = 1   # its flag: retry while the socket does not exist


class GcagentError(RuntimeError):
    """A failed gcagent call: `code` is the gcagent_status value, the message says why."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class TensorSpec:
    key: int
    elements: int
    priority: int = 0           # higher is sent first: minus the layer index
    codec: Optional[str] = None  # None: the agent's default
    params: Dict[str, str] = field(default_factory=dict)
    dtype: str = "float32"       # or "bfloat16", "float16": the slot's element type (C ABI 6)


# The slot element types: the C ABI's number and the numpy dtype a slot is seen as (bfloat16
# as its raw 16 bits: numpy has no bfloat16).
DTYPES = {"float32": (1, np.float32), "bfloat16": (2, np.uint16), "float16": (3, np.float16)}


def _env_int(names: Sequence[str], default: int) -> int:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    return default


def codec_from_env() -> Tuple[Optional[str], Dict[str, str]]:
    """GCAGENT_CODEC and GCAGENT_CODEC_PARAMS ("threshold=0.5,error_feedback=false")."""
    params = {}
    for item in filter(None, os.environ.get("GCAGENT_CODEC_PARAMS", "").split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"GCAGENT_CODEC_PARAMS: '{item}' is not key=value")
        params[k.strip()] = v.strip()
    return os.environ.get("GCAGENT_CODEC") or None, params


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _connect_flags(lib):
    """gcagent_connect_flags (C ABI 3), or None for an older library, whose gcagent_connect
    waits for a missing socket whatever is asked."""
    if getattr(lib, "abi_version", 1) < CONNECT_ABI_VERSION:
        return None
    fn = lib.gcagent_connect_flags
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32,
                   ctypes.POINTER(ctypes.c_void_p)]
    return fn


def gpu_uuid(device_ordinal: int) -> bytes:
    """The 16-byte UUID of a CUDA device ordinal as this process sees it (what
    Client.declare_device wants)."""
    lib = _library.load()
    if getattr(lib, "abi_version", 1) < _library.DEVICE_ABI_VERSION:
        raise GcagentError(10, f"gcagent: GPU tensors need C ABI {_library.DEVICE_ABI_VERSION}, "
                               f"the loaded library has {lib.abi_version}")
    out = (ctypes.c_uint8 * 16)()
    rc = lib.gcagent_gpu_uuid(device_ordinal, out)
    if rc != OK:
        raise GcagentError(rc, f"gcagent: gpu {device_ordinal}: {lib.gcagent_last_error(None).decode()}")
    return bytes(out)


class Client:
    """One connection. Defaults come from the environment: GCAGENT_SOCKET, GCAGENT_JOB,
    GCAGENT_LOCAL_RANK (or LOCAL_RANK) and GCAGENT_LOCAL_SIZE (or LOCAL_WORLD_SIZE).
    Not thread-safe, like the C client: callers serialise, with two exceptions the shims rely
    on: close() may come from any thread, at most once in effect (a second one, or __del__,
    does nothing), and one that comes while another thread blocks in wait(), wait_any() or
    submit() frees the connection only once that call returned.

    A socket that does not exist is an error at once, naming it, unless wait_for_agent (or
    GCAGENT_WAIT_FOR_AGENT=1) asks to wait: then one "waiting for the agent" line goes to
    stderr and connecting is retried until timeout_ms."""

    def __init__(self, socket: Optional[str] = None, job: Optional[str] = None,
                 local_rank: Optional[int] = None, local_size: Optional[int] = None,
                 timeout_ms: int = 30000, wait_for_agent: Optional[bool] = None):
        self._lib = _library.load()
        self.socket = socket or os.environ.get("GCAGENT_SOCKET", DEFAULT_SOCKET)
        self.job = job or os.environ.get("GCAGENT_JOB", "default")
        self.local_rank = local_rank if local_rank is not None else _env_int(["GCAGENT_LOCAL_RANK", "LOCAL_RANK"], 0)
        self.local_size = local_size if local_size is not None else _env_int(
            ["GCAGENT_LOCAL_SIZE", "LOCAL_WORLD_SIZE"], 1)
        wait = _env_flag("GCAGENT_WAIT_FOR_AGENT") if wait_for_agent is None else wait_for_agent
        if wait and not os.path.exists(self.socket):
            limit = "no time limit" if timeout_ms < 0 else f"up to {timeout_ms / 1000:g} s"
            print(f"gcagent: waiting for the agent at {self.socket} ({limit})", file=sys.stderr, flush=True)
        self._guard = threading.Lock()  # close() against the calls that may block meanwhile
        self._busy = 0                  # such calls under way
        self._doomed = None             # a handle close() left for the last of them to free
        handle = ctypes.c_void_p()
        args = (self.socket.encode(), self.job.encode(), self.local_rank, self.local_size, timeout_ms)
        connect = _connect_flags(self._lib)
        if connect is not None:
            rc = connect(*args, CONNECT_WAIT_FOR_AGENT if wait else 0, ctypes.byref(handle))
        else:
            rc = self._lib.gcagent_connect(*args, ctypes.byref(handle))
        if rc != OK:
            detail = self._lib.gcagent_last_error(None).decode()
            if rc == ERR_IO and not wait and not os.path.exists(self.socket):
                detail += " (GCAGENT_SOCKET); GCAGENT_WAIT_FOR_AGENT=1 waits for an agent that is still starting"
            raise GcagentError(rc, f"gcagent: connect to {self.socket}: {detail}")
        self._handle = handle
        self.node_rank = self._lib.gcagent_node_rank(handle)
        self.world_rank = self.node_rank * self.local_size + self.local_rank
        self._keep = []
        self._dtypes = {}  # key -> the numpy dtype of its slot, from the last declare

    @property
    def reduction_timeout_s(self) -> Optional[float]:
        """The agent's transport.reduction_timeout: by then it fails a step it cannot complete,
        and until then it may still complete one into the slots. None when it has none or did
        not say (an older agent or library)."""
        if getattr(self._lib, "abi_version", 1) < _library.REDUCTION_TIMEOUT_ABI_VERSION:
            return None
        ms = self._lib.gcagent_reduction_timeout_ms(self._handle)
        return ms / 1000 if ms else None

    @property
    def node_count(self) -> int:
        """The nodes the job's reductions run on now: under transport.on_peer_loss = "shrink"
        it falls when a node is left behind and rises when it is taken back."""
        return self._lib.gcagent_node_count(self._handle)

    @property
    def world_size(self) -> int:
        return self.node_count * self.local_size

    @property
    def result_nodes(self) -> List[int]:
        """The node ranks whose trainers the latest completed step was averaged over: the
        job's membership it was made under ([] before any step completed; every node with a
        library older than C ABI 4)."""
        if getattr(self._lib, "abi_version", 1) < _library.MEMBERSHIP_ABI_VERSION:
            return list(range(self.node_count))
        count = self._lib.gcagent_result_nodes(self._handle, None, 0)
        ranks = (ctypes.c_uint32 * max(count, 1))()
        count = min(count, self._lib.gcagent_result_nodes(self._handle, ranks, count))
        return list(ranks[:count])

    @property
    def resync_root(self) -> Optional[int]:
        """After a completed step: the node whose trainers hold the weights every trainer must
        load now, or None. Set on every member's trainers for the first step they complete
        under a membership that took nodes in (a node back after it was left behind), or after
        a step was given up on some node (which others may have completed), as the step after
        which they load them (gcagent.torch.sync_parameters and the FSDP state's do)."""
        if getattr(self._lib, "abi_version", 1) < _library.MEMBERSHIP_ABI_VERSION:
            return None
        root = self._lib.gcagent_resync_root(self._handle)
        return None if root < 0 else int(root)

    def _check(self, rc: int, what: str):
        if rc != OK:
            detail = self._lib.gcagent_last_error(self._handle).decode()
            raise GcagentError(rc, f"gcagent: {what}: {detail}")

    def _tensor_array(self, tensors: Sequence[TensorSpec]):
        arr = (_library.Tensor * len(tensors))()
        keep = []
        for i, t in enumerate(tensors):
            codec = t.codec.encode() if t.codec else None
            names = [k.encode() for k in t.params]
            values = [str(v).encode() for v in t.params.values()]
            pk = (ctypes.c_char_p * max(1, len(names)))(*names)
            pv = (ctypes.c_char_p * max(1, len(values)))(*values)
            keep += [codec, names, values, pk, pv]
            arr[i] = _library.Tensor(t.key, t.elements, t.priority, codec, pk, pv, len(names))
        return arr, keep

    def declare(self, tensors: Sequence[TensorSpec]):
        arr, keep = self._tensor_array(tensors)
        for t in tensors:
            if t.dtype not in DTYPES:
                raise ValueError(f"gcagent: tensor {t.key}: dtype '{t.dtype}' is not one of {', '.join(DTYPES)}")
        if all(t.dtype == "float32" for t in tensors):
            rc = self._lib.gcagent_declare(self._handle, arr, len(tensors))
        else:
            self._need_state_abi("bfloat16 and float16 tensors")
            dtypes = (ctypes.c_uint8 * len(tensors))(*[DTYPES[t.dtype][0] for t in tensors])
            rc = self._lib.gcagent_declare_dtypes(self._handle, arr, dtypes, len(tensors))
        self._check(rc, f"declare {len(tensors)} tensors")
        self._keep = keep
        self._dtypes = {t.key: DTYPES[t.dtype][1] for t in tensors}

    # ---- GPU tensors (C ABI 2) ----

    def _need_device_abi(self):
        if getattr(self._lib, "abi_version", 1) < _library.DEVICE_ABI_VERSION:
            raise GcagentError(10, f"gcagent: GPU tensors need C ABI {_library.DEVICE_ABI_VERSION}, "
                                   f"the loaded library has {self._lib.abi_version}")

    @staticmethod
    def gpu_uuid(device_ordinal: int) -> bytes:
        return gpu_uuid(device_ordinal)

    def declare_device(self, tensors: Sequence[TensorSpec], gpu_uuid: bytes):
        """Declares tensors that live on the GPU with this UUID: each gets a slot in device
        memory the agent exports (device_buffer)."""
        self._need_device_abi()
        if len(gpu_uuid) != 16:
            raise ValueError(f"gcagent: a GPU UUID has 16 bytes, got {len(gpu_uuid)}")
        arr, keep = self._tensor_array(tensors)
        uuid = (ctypes.c_uint8 * 16)(*gpu_uuid)
        self._check(self._lib.gcagent_declare_device(self._handle, arr, len(tensors), uuid),
                    f"declare {len(tensors)} device tensors")
        self._keep = keep
        self._dtypes = {}

    def device_buffer(self, key: int) -> int:
        """The device slot of `key` as an integer CUdeviceptr."""
        self._need_device_abi()
        ptr = self._lib.gcagent_device_buffer(self._handle, key)
        if not ptr:
            raise GcagentError(6, f"gcagent: tensor {key} is not declared on the device")
        return ptr

    def submit_device(self, iteration: int, keys: Iterable[int], stream: int = 0):
        arr, n = self._keys(keys)
        self._check(self._lib.gcagent_submit_device(self._handle, iteration, arr, n, ctypes.c_void_p(stream or None)),
                    f"submit iteration {iteration} from the device")

    def wait_device(self, iteration: int, keys: Iterable[int], timeout_ms: int = -1, stream: int = 0) -> bool:
        arr, n = self._keys(keys)
        rc = self._lib.gcagent_wait_device(self._handle, iteration, arr, n, timeout_ms,
                                           ctypes.c_void_p(stream or None))
        if rc == ERR_TIMEOUT:
            return False
        self._check(rc, f"wait for iteration {iteration} on the device")
        return True

    def buffer(self, key: int) -> np.ndarray:
        """The shared slot of `key` as an array of its dtype (float32; bfloat16 as uint16 bits;
        float16), valid until the next declare."""
        n = self._lib.gcagent_buffer_elements(self._handle, key)
        ptr = self._lib.gcagent_buffer(self._handle, key)
        if not ptr or n == 0:
            raise GcagentError(6, f"gcagent: tensor {key} is not declared")
        dtype = self._dtypes.get(key, np.float32)
        if dtype is np.float32:
            return np.ctypeslib.as_array(ptr, shape=(n,))
        raw = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint16))
        return np.ctypeslib.as_array(raw, shape=(n,)).view(dtype)

    def slot(self, key: int) -> np.ndarray:
        """The shared slot of `key` as a float32 array that maps the segment itself: unlike
        buffer(), it stays valid after a later declare or close (the mapping lives as long as
        the array and its views), so a framework can keep its gradients there. Writes are the
        agent's input at the next submit of `key`, and its result lands there."""
        n = self._lib.gcagent_buffer_elements(self._handle, key)
        if getattr(self._lib, "abi_version", 1) < _library.WAIT_ANY_ABI_VERSION:
            raise GcagentError(10, f"gcagent: slots mapped by the caller need C ABI {_library.WAIT_ANY_ABI_VERSION}, "
                                   f"the loaded library has {self._lib.abi_version}")
        offset = ctypes.c_uint64()
        fd = self._lib.gcagent_buffer_fd(self._handle, key, ctypes.byref(offset))
        if fd < 0:
            raise GcagentError(6, f"gcagent: slot of tensor {key}: {self._lib.gcagent_last_error(self._handle).decode()}")
        dtype = self._dtypes.get(key, np.float32)
        start = offset.value - offset.value % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(fd, offset.value - start + n * np.dtype(dtype).itemsize, offset=start)
        finally:
            os.close(fd)
        return np.frombuffer(mapping, dtype=dtype, count=n, offset=offset.value - start)

    def wait_any(self, steps: Sequence[Tuple[int, int]], timeout_ms: int = -1,
                 wake_fd: int = -1) -> Tuple[Optional[int], Optional[GcagentError]]:
        """Sleeps until one of the submitted (iteration, key) pairs is done, wake_fd is readable
        (it is not read), or the timeout passes. Returns (index, None) for a completed pair,
        (index, error) for one the agent failed, (None, None) when woken or timed out; raises
        when the connection failed. With a library older than C ABI 5 it polls instead."""
        if getattr(self._lib, "abi_version", 1) < _library.WAIT_ANY_ABI_VERSION:
            return self._poll_any(steps, timeout_ms, wake_fd)
        arr = (_library.Step * len(steps))(*steps)
        index = ctypes.c_size_t()
        with self._using() as handle:
            rc = self._lib.gcagent_wait_any(handle, arr, len(steps), timeout_ms, wake_fd, ctypes.byref(index))
            if rc == OK:
                return index.value, None
            if rc == ERR_TIMEOUT:
                return None, None
            error = GcagentError(rc, f"gcagent: wait: {self._lib.gcagent_last_error(handle).decode()}")
        if rc == ERR_AGENT and index.value < len(steps):
            return index.value, error
        raise error

    def _poll_any(self, steps, timeout_ms, wake_fd):
        import select
        import time
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        while True:
            for i, (it, key) in enumerate(steps):
                try:
                    if self.wait(it, [key], 0):
                        return i, None
                except GcagentError as e:
                    if e.code != ERR_AGENT:
                        raise
                    return i, e
            if deadline is not None and time.monotonic() >= deadline:
                return None, None
            if wake_fd >= 0 and select.select([wake_fd], [], [], 0.0005)[0]:
                return None, None
            if wake_fd < 0:
                time.sleep(0.0005)

    # ---- Error-feedback state (C ABI 6) ----

    def _need_state_abi(self, what="checkpointing residuals"):
        if getattr(self._lib, "abi_version", 1) < _library.STATE_ABI_VERSION:
            raise GcagentError(10, f"gcagent: {what} needs C ABI {_library.STATE_ABI_VERSION}, "
                                   f"the loaded library has {self._lib.abi_version}")

    def get_state(self, key: int) -> bytes:
        """The error-feedback state the node's agent holds for a declared key, as an opaque blob
        for a checkpoint. Call between steps."""
        self._need_state_abi()
        data, n = ctypes.POINTER(ctypes.c_uint8)(), ctypes.c_uint64()
        self._check(self._lib.gcagent_state_get(self._handle, key, ctypes.byref(data), ctypes.byref(n)),
                    f"read the error-feedback state of key {key}")
        try:
            return ctypes.string_at(data, n.value)
        finally:
            self._lib.gcagent_state_free(data)

    def put_state(self, key: int, blob: bytes) -> int:
        """Puts a blob of get_state back (after the declare, before the key's first submit);
        returns how many owner parts were left out because the job's layout changed."""
        self._need_state_abi()
        dropped = ctypes.c_uint32()
        blob = bytes(blob)
        self._check(self._lib.gcagent_state_put(self._handle, key, blob, len(blob), ctypes.byref(dropped)),
                    f"restore the error-feedback state of key {key}")
        return dropped.value

    def job_iteration(self, iteration: int) -> int:
        """The job's iteration this trainer's `iteration` would be reduced as if submitted now:
        the same on every node, though trainers' own numbers drift apart after a realignment
        (0: it was given up). Ask before a submit whose tensor depends on the step's turn."""
        if getattr(self._lib, "abi_version", 1) < _library.JOB_ITERATION_ABI_VERSION:
            raise GcagentError(10, f"gcagent: job_iteration needs C ABI {_library.JOB_ITERATION_ABI_VERSION}, "
                                   f"the loaded library has {self._lib.abi_version}")
        out = ctypes.c_uint64()
        self._check(self._lib.gcagent_job_iteration(self._handle, iteration, ctypes.byref(out)),
                    f"ask the job's iteration of iteration {iteration}")
        return out.value

    @staticmethod
    def _keys(keys: Iterable[int]):
        keys = list(keys)
        return (ctypes.c_uint64 * len(keys))(*keys), len(keys)

    def submit(self, iteration: int, keys: Iterable[int]):
        arr, n = self._keys(keys)
        with self._using() as handle:
            self._check(self._lib.gcagent_submit(handle, iteration, arr, n), f"submit iteration {iteration}")

    def wait(self, iteration: int, keys: Iterable[int], timeout_ms: int = -1) -> bool:
        """True when done, False on timeout; raises on an error."""
        arr, n = self._keys(keys)
        with self._using() as handle:
            rc = self._lib.gcagent_wait(handle, iteration, arr, n, timeout_ms)
            if rc == ERR_TIMEOUT:
                return False
            self._check(rc, f"wait for iteration {iteration}")
        return True

    def poll(self, iteration: int, keys: Iterable[int]) -> bool:
        return self.wait(iteration, keys, 0)

    @contextlib.contextmanager
    def _using(self):
        """The handle for a call that may block while another thread closes the client."""
        with self._guard:
            if not self._handle:
                raise GcagentError(ERR_INVALID_ARGUMENT, "gcagent: the client is closed")
            self._busy += 1
            handle = self._handle
        try:
            yield handle
        finally:
            with self._guard:
                self._busy -= 1
                doomed = self._doomed if self._busy == 0 else None
                if doomed is not None:
                    self._doomed = None
            if doomed is not None:
                self._lib.gcagent_close(doomed)

    def close(self):
        # Taken under the lock before it is freed: two closes (one may be __del__, run by the
        # thread that dropped the last reference) once freed it twice, aborting the process
        # with glibc's "double free or corruption".
        guard = getattr(self, "_guard", None)
        if guard is None:  # __init__ failed before connecting
            return
        with guard:
            handle, self._handle = getattr(self, "_handle", None), None
            if not handle:
                return
            if self._busy > 0:  # the last call under way frees it
                self._doomed = handle
                return
        self._lib.gcagent_close(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


# How long past the agent's reduction timeout a shim still waits: the agent checks deadlines
# once a second, and reports a failure once its coder holds nothing of the step.
AGENT_DECIDES_GRACE_S = 5.0
_warned_short_timeouts = set()


def step_timeout_s(client: "Client", seconds: float) -> float:
    """How long a shim waits for a step before it gives the step up itself: `seconds`, but no
    less than the agent's reduction timeout (plus a grace): a step the trainer gave up earlier
    could still complete into the gradients it writes next, so the agent decides, and its
    error says why. Warns once per value raised."""
    agent = client.reduction_timeout_s
    if agent is None or seconds >= agent + AGENT_DECIDES_GRACE_S:
        return seconds
    waited = agent + AGENT_DECIDES_GRACE_S
    if seconds not in _warned_short_timeouts:
        _warned_short_timeouts.add(seconds)
        warnings.warn(f"gcagent: a step timeout of {seconds:g} s is shorter than the agent's "
                      f"transport.reduction_timeout ({agent:g} s): waiting {waited:g} s, for until then the agent "
                      "may still complete the step into the gradients; lower transport.reduction_timeout to fail "
                      "steps sooner", stacklevel=3)
    return waited


# Where Reducer.broadcast keys live: far above any key a shim numbers from 0, so a value's
# broadcast and its gradient never share a key (nor a codec, nor a residual).
BROADCAST_KEY_BASE = 1 << 48
_REDUCER_CODEC = object()  # reduce(): the Reducer's codec and params


class Reducer:
    """Reduces named float arrays over every trainer of the job, one call at a time.

    Keys are declared on first use; a call with a new key, size, codec or result re-declares
    (each trainer of a node must then make the same calls in the same order, as synchronous
    data parallelism does anyway). Each key counts its own iterations."""

    def __init__(self, client: Optional[Client] = None, codec: Optional[str] = None,
                 params: Optional[Dict[str, str]] = None, timeout_ms: int = 300000):
        self.client = client or Client()
        env_codec, env_params = codec_from_env()
        self.codec = codec if codec is not None else env_codec
        self.params = dict(params) if params is not None else env_params
        # No sooner than the agent decides (step_timeout_s); a negative timeout waits for ever.
        self.timeout_ms = timeout_ms if timeout_ms < 0 else int(step_timeout_s(self.client, timeout_ms / 1000) * 1000)
        # key -> (elements, priority, codec or _REDUCER_CODEC, params, reduce.* entries)
        self._specs: Dict[int, tuple] = {}
        self._stale = False
        self._iteration: Dict[int, int] = {}
        self._slots: Dict[int, np.ndarray] = {}  # key -> its slot (Client.slot), until the next declare
        self._restoring: Dict[int, bytes] = {}  # residuals of load_state_dict, put back once their key is declared
        self.dropped_residuals = 0  # of load_state_dict: owned by another node now

    # Horovod's names: this trainer's place among all trainers of the job, and on its node.
    def rank(self) -> int:
        return self.client.world_rank

    def size(self) -> int:
        return self.client.world_size

    def local_rank(self) -> int:
        return self.client.local_rank

    def local_size(self) -> int:
        return self.client.local_size

    def _tensor_spec(self, key: int) -> TensorSpec:
        elements, priority, codec, params, policy = self._specs[key]
        if codec is _REDUCER_CODEC:
            codec, params = self.codec, tuple(self.params.items())
        return TensorSpec(key, elements, priority, codec, {**dict(params), **dict(policy)})

    def _ensure_declared(self, entries: Dict[int, tuple]):
        """{key: (elements, priority, codec, params, policy)}: declares every known key again
        when one is new or changed."""
        changed = self._stale
        for key, entry in entries.items():
            if self._specs.get(key) != entry:
                self._specs[key] = entry
                changed = True
        if changed:
            self._stale = True  # until the agent takes it: a refused declaration is asked again
            self.client.declare([self._tensor_spec(k) for k in sorted(self._specs)])
            self._stale = False
            self._slots = {}
        self._restore()

    # ---- Checkpoints ----

    def state_dict(self):
        """This trainer's reductions' training state for a checkpoint: each key's iteration count
        and, on each node's local rank 0, the residuals its agent keeps for the keys (of the
        node's side and of the slices that node owns). Loaded back into a restarted job's Reducer
        (load_state_dict), its keys continue with the residuals they had. Call between steps. A
        dict under this trainer's world rank (every trainer saves and loads its own)."""
        residuals = {}
        if self.client.local_rank == 0 and self._specs and not self._stale:
            residuals = {str(k): self.client.get_state(k) for k in sorted(self._specs)}
        return {f"rank{self.client.world_rank}": {
            "node": self.client.node_rank, "nodes": self.client.node_count,
            "iterations": {str(k): it for k, it in self._iteration.items()}, "residuals": residuals}}

    def load_state_dict(self, state_dict):
        """Puts a state_dict() back before the first reduction after a restart. Keys not declared
        yet (a store that declares them as it meets them) get their residuals when they are."""
        name = f"rank{self.client.world_rank}"
        if name not in state_dict:
            raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent: the checkpoint holds no state of this trainer "
                                                     f"({name}); it has {sorted(state_dict)}")
        entry = state_dict[name]
        self._iteration = {int(k): int(it) for k, it in entry["iterations"].items()}
        self._restoring = {int(k): bytes(v) for k, v in entry["residuals"].items()}
        self.dropped_residuals = 0
        if not self._stale:
            self._restore()

    def _restore(self):
        for key in [k for k in self._restoring if k in self._specs]:
            self.dropped_residuals += self.client.put_state(key, self._restoring.pop(key))

    def redeclare(self):
        """Declares the known keys again, with the current codec, on the next reduce."""
        self._stale = bool(self._specs)

    def reduce(self, arrays: Sequence[Tuple[int, np.ndarray, int]], codec=_REDUCER_CODEC,
               params: Optional[Dict[str, str]] = None, result: str = "average",
               aggregation: Optional[str] = None, topology: Optional[str] = None) -> List[np.ndarray]:
        """(key, array, priority) -> the reduced arrays (new float32 arrays, same shapes).

        result: "average" (the sum over every trainer divided once by their number) or
        "sum". codec and params: for these keys (default: the Reducer's). aggregation:
        "bidirectional" or "mxnet" (see the operator guide; default: the agent's).
        topology: "ps", "ring", "allgather" or "auto" (default: the agent's scheduler.topology)."""
        policy = self._policy(result, aggregation, topology)
        own = tuple(sorted((params or {}).items()))
        self._ensure_declared({k: (int(a.size), p, codec, own, policy) for k, a, p in arrays})
        return self._exchange(arrays)

    @staticmethod
    def _policy(result, aggregation, topology):
        """The reduce.* entries of a declaration, checked."""
        if result not in ("average", "sum"):
            raise ValueError(f"gcagent: result '{result}' is not one of: average, sum")
        if topology not in (None, "ps", "ring", "allgather", "auto"):
            raise ValueError(f"gcagent: topology '{topology}' is not one of: ps, ring, allgather, auto")
        policy = {"reduce.result": result} if result != "average" else {}
        if aggregation is not None:
            policy["reduce.aggregation"] = aggregation
        if topology is not None:
            policy["reduce.topology"] = topology
        return tuple(sorted(policy.items()))

    def slots(self, tensors: Sequence[Tuple[int, int, int]], codec=_REDUCER_CODEC,
              params: Optional[Dict[str, str]] = None, result: str = "average",
              aggregation: Optional[str] = None, topology: Optional[str] = None) -> List[np.ndarray]:
        """(key, elements, priority) -> each key's shared slot, declared as reduce() declares
        (the same options): float32 arrays that map the agent's segment themselves (Client.slot). Write a
        gradient into its slot, or keep it there for good, and reduce_slots() averages it in
        place, without a copy either way. The arrays stay valid after a later declaration; the
        slots they map are then no longer the keys' (call slots() again: same arrays while
        nothing changed)."""
        policy = self._policy(result, aggregation, topology)
        own = tuple(sorted((params or {}).items()))
        self._ensure_declared({k: (int(n), p, codec, own, policy) for k, n, p in tensors})
        for k, _, _ in tensors:
            if k not in self._slots:
                self._slots[k] = self.client.slot(k)
        return [self._slots[k] for k, _, _ in tensors]

    def reduce_slots(self, keys: Sequence[int]):
        """Reduces what the slots of `keys` (declared by slots()) hold, in place."""
        self._submit_and_wait(list(keys))

    def broadcast(self, arrays: Sequence[Tuple[int, np.ndarray, int]], root: int = 0) -> List[np.ndarray]:
        """(key, array, priority) -> the arrays of the trainer whose world rank is root, bit
        for bit. Travels uncompressed on its own keys (BROADCAST_KEY_BASE + key): every other
        trainer adds -0.0, the identity of fp32 addition."""
        mine = self.client.world_rank == root
        contributions = [(BROADCAST_KEY_BASE + k, np.asarray(a, dtype=np.float32) if mine
                          else np.full(np.shape(a), -0.0, dtype=np.float32), p) for k, a, p in arrays]
        return self.reduce(contributions, codec="none", result="sum")

    def _exchange(self, arrays) -> List[np.ndarray]:
        for key, a, _ in arrays:
            self.client.buffer(key)[:] = np.asarray(a, dtype=np.float32).reshape(-1)
        self._submit_and_wait([key for key, _, _ in arrays])
        return [self.client.buffer(key).copy().reshape(np.shape(a)) for key, a, _ in arrays]

    def _submit_and_wait(self, keys: List[int]):
        groups: Dict[int, List[int]] = {}
        for key in keys:
            it = self._iteration.get(key, 0) + 1
            self._iteration[key] = it
            groups.setdefault(it, []).append(key)
        for it, keys in groups.items():
            self.client.submit(it, keys)
        for it, keys in groups.items():
            if not self.client.wait(it, keys, self.timeout_ms):
                raise GcagentError(ERR_TIMEOUT, f"gcagent: no result for iteration {it} within {self.timeout_ms} ms")


_default_reducer: Optional[Reducer] = None


def default_reducer() -> Reducer:
    """One Reducer per process, connected on first use (GCAGENT_* environment): what the shims
    use when given none, and what rank(), size(), local_rank() and local_size() ask. (The agent
    takes one connection per local rank and job: a process with a DDP hook's State, which
    connects itself, asks the State's client instead.)"""
    global _default_reducer
    if _default_reducer is None:
        _default_reducer = Reducer()
    return _default_reducer


# Horovod's module functions (hvd.rank() and so on), on the default reducer's connection.
def rank() -> int:
    return default_reducer().rank()


def size() -> int:
    return default_reducer().size()


def local_rank() -> int:
    return default_reducer().local_rank()


def local_size() -> int:
    return default_reducer().local_size()


def warn_dgc_momentum(codec: Optional[str], params: Dict[str, str], optimizer_momentum, optimizer_name: str) -> bool:
    """Warns when the dgc codec, whose momentum correction applies a momentum itself, meets an
    optimizer with momentum of its own: the momentum would count twice. True when it warned."""
    if codec != "dgc" or not optimizer_momentum:
        return False
    try:
        dgc_momentum = float(params.get("momentum", 0))  # dgc's default (compress/codecs/dgc.h)
    except ValueError:
        return False  # the agent refuses it with its own message
    if dgc_momentum == 0:
        return False
    warnings.warn(f"gcagent: the dgc codec applies momentum {dgc_momentum:g} itself (momentum correction) and "
                  f"{optimizer_name} has momentum {float(optimizer_momentum):g}: the gradient would see momentum twice. "
                  f"Either set the optimizer's momentum to 0 and give dgc the momentum "
                  f"(params {{'momentum': '{float(optimizer_momentum):g}'}}), or set dgc's momentum to 0 "
                  f"(params {{'momentum': '0'}}) and keep the optimizer's.", UserWarning, stacklevel=3)
    return True
