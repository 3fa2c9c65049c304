"""MXNet 1.9: gcagent.mxnet.KVStore, a KVStoreBase that behaves as MXNet's dist_sync store.

    import gcagent.mxnet
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore=gcagent.mxnet.KVStore(),
                            compression_params={"type": "2bit", "threshold": 0.5})

Pass an instance: a string name silently skips synchronisation when a process has one device.
What dist_sync does, this store does (each trainer process is one of dist_sync's workers):

- init(key, value) stores the value of the worker with rank 0; pull(key, out) copies the
  stored value into out; broadcast is init then pull. The value travels uncompressed and
  arrives bit for bit.
- push(key, values) sums the values of this worker's devices, then over every worker; the
  sum replaces the stored value, or, after set_optimizer, the optimizer updates the stored
  value with it (as dist_sync's servers do; every worker applies the same update to the same
  sum). pushpull is push then pull.
- set_gradient_compression({"type": "2bit" | "1bit", "threshold": t}) compresses every
  dense fp32 key as dist_sync does: each worker encodes its sum with its own residual, the
  decoded contributions are added in fp32 and the sum travels uncompressed (the agent's
  "mxnet" aggregation). Thresholds MXNet refuses are refused with MXNet's message, other
  entries ignored as MXNet ignores them. Any other type names a gcagent codec, the other
  entries being its parameters.

Keys are declared to the agent as the store first meets them, with the priority MXNet passes
(minus the parameter index). An agent error raises gcagent.GcagentError from the call that met
it (push, pushpull, Trainer.step). A dgc codec meeting an optimizer with momentum (set_optimizer)
warns."""

import ctypes
import pickle

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStoreBase

from gcagent.client import GcagentError, Reducer, warn_dgc_momentum

# Marks a states file of save_optimizer_states (the optimizer's states and the reductions').
_STATES_FORMAT = "gcagent.mxnet.states"

# MXNet's compression types, run by the codecs of the same name with MXNet's aggregation.
_MXNET_TYPES = ("2bit", "1bit")
# gradient_compression.h: DMLC_DECLARE_FIELD(threshold).set_default(0.5)
_MXNET_DEFAULT_THRESHOLD = "0.5"
# The barrier's key, apart from the keys the store numbers from 0 and from their broadcasts.
_BARRIER_KEY = (1 << 47) - 1
_INVALID_ARGUMENT = 1


def _float_threshold(text):
    """MXNet's parse of a float parameter: a number whose fp32 value is normal (or zero).
    Returns the text for the agent; raises MXNet's message otherwise."""
    try:
        wide = float(text)
    except ValueError:
        raise GcagentError(_INVALID_ARGUMENT, f"Invalid Parameter format for threshold expect float but value='{text}'")
    narrow = np.float32(wide) if np.isfinite(wide) else wide
    tiny, huge = np.finfo(np.float32).tiny, np.finfo(np.float32).max
    if wide != 0 and np.isfinite(wide) and not (tiny <= abs(float(narrow)) <= huge):
        raise GcagentError(_INVALID_ARGUMENT, f"Out of range value for threshold, value='{text}'")
    return str(text)


# Registered as "gcagentkvstore" (mx.kv.create); the name "kvstore" belongs to MXNet's own.
@KVStoreBase.register
class GcagentKVStore(KVStoreBase):
    """Synchronous data-parallel store over the node's gcagent (GCAGENT_* environment)."""

    def __init__(self, reducer=None):
        self._reducer = reducer or Reducer()
        self._ids = {}         # MXNet key (int or str) -> (agent key, priority), in order of first use
        self._stored = {}      # MXNet key -> the stored value (a float32 NDArray), as on dist_sync's servers
        self._codec = None     # (codec, params, aggregation) once set_gradient_compression ran
        self._updater = None   # set_optimizer's updater
        self._momentum = None  # (momentum, optimizer name) once set_optimizer ran
        self._warned = False

    # ---- who is who ----

    @property
    def type(self):
        # 'dist' and '_sync' make Gluon and Module treat the store as dist_sync.
        return "dist_sync_gcagent"

    @property
    def rank(self):
        return self._reducer.client.world_rank

    @property
    def num_workers(self):
        return self._reducer.client.world_size

    @property
    def node_rank(self):
        return self._reducer.client.node_rank

    @property
    def num_nodes(self):
        return self._reducer.client.node_count

    @property
    def local_rank(self):
        return self._reducer.client.local_rank

    @property
    def local_size(self):
        return self._reducer.client.local_size

    @staticmethod
    def is_capable(capability):
        return capability == KVStoreBase.OPTIMIZER

    # ---- keys ----

    def _id(self, key, priority):
        """The agent key and its priority, fixed at first use: MXNet's priority (minus the
        parameter index), or minus the order of first use when MXNet passes none."""
        if key not in self._ids:
            self._ids[key] = (len(self._ids), int(priority) if priority else -len(self._ids))
        return self._ids[key]

    @staticmethod
    def _as_list(x):
        return list(x) if isinstance(x, (list, tuple)) else [x]

    def _pairs(self, keys, values):
        """[(key, [NDArray, ...])]: one key with one or several devices' arrays, or a list of
        keys each with its array (or its list of arrays)."""
        if isinstance(keys, (list, tuple)):
            if not isinstance(values, (list, tuple)) or len(values) != len(keys):
                raise ValueError(f"gcagent: {len(keys)} keys need as many values")
            return [(k, self._as_list(v)) for k, v in zip(keys, values)]
        return [(keys, self._as_list(values))]

    @staticmethod
    def _local_sum(arrays):
        """The worker's sum over its devices in fp32 (_sum_into), as a new array."""
        total = np.empty(arrays[0].size, np.float32)
        GcagentKVStore._sum_into(total, arrays)
        return total.reshape(arrays[0].shape)

    @staticmethod
    def _sum_into(slot, arrays):
        """The worker's sum over its devices in fp32, written into `slot` (a flat float32 array),
        grouped as dist_sync's CommCPU adds them (comm.h ReduceSumCPU: in_0 += in_1 + in_2 +
        in_3 + in_4, four at a time): three arrays sum as a + (b + c), which rounds differently
        from (a + b) + c. The first array arrives through MXNet's own copy straight into it."""
        first = arrays[0]
        if first.dtype == np.float32:
            mx.base.check_call(mx.base._LIB.MXNDArraySyncCopyToCPU(
                first.handle, slot.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(slot.size)))
        else:
            slot[:] = first.asnumpy().astype(np.float32, copy=False).reshape(-1)
        for i in range(1, len(arrays), 4):
            group = arrays[i].asnumpy().astype(np.float32, copy=False)
            for a in arrays[i + 1:i + 4]:
                group = group + a.asnumpy().astype(np.float32, copy=False)
            np.add(slot, group.reshape(-1), out=slot)

    def _reduce_options(self):
        codec, params, aggregation = self._codec or (self._reducer.codec or "none", self._reducer.params, None)
        return {"codec": codec, "params": params, "result": "sum", "aggregation": aggregation}

    # ---- KVStore ----

    def init(self, key, value):
        """Stores the value of the worker with rank 0 under each key (bit for bit)."""
        for k, vals in self._pairs(key, value):
            if k in self._stored:
                raise GcagentError(_INVALID_ARGUMENT, f"duplicate init of key {k}. Please double check if you "
                                                      "called kv.init or kv.broadcast with this key multiple times")
            agent_key, priority = self._id(k, 0)
            value = self._reducer.broadcast([(agent_key, self._local_sum(vals[:1]), priority)])[0]
            self._stored[k] = mx.nd.array(value, dtype=np.float32)

    def push(self, key, value, priority=0):
        """Sums the values over this worker's devices and every worker; the sum becomes the
        stored value, or updates it through the optimizer after set_optimizer."""
        pairs = {}
        for k, vals in self._pairs(key, value):
            # A key named twice in one call: MXNet groups its values as more devices (GroupKVPairs).
            pairs.setdefault(k, []).extend(vals)
        pairs = list(pairs.items())
        ids = [self._id(k, priority) for k, _ in pairs]
        # The local sums are written into the agent's slots and reduced there: one copy in,
        # one out (into the stored NDArray).
        slots = self._reducer.slots([(agent_key, vals[0].size, p) for (agent_key, p), (_, vals) in zip(ids, pairs)],
                                    **self._reduce_options())
        for slot, (_, vals) in zip(slots, pairs):
            self._sum_into(slot, vals)
        self._reducer.reduce_slots([agent_key for agent_key, _ in ids])
        for (k, vals), slot in zip(pairs, slots):
            total = mx.nd.array(slot.reshape(vals[0].shape), dtype=np.float32)
            if self._updater is None:
                self._stored[k] = total
                continue
            if k not in self._stored:
                raise GcagentError(_INVALID_ARGUMENT, f"key {k} has not been initialized: init or broadcast it "
                                                      "before pushing with an optimizer")
            self._updater(k, total, self._stored[k])  # in place, with the key, as on the servers

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Copies the stored value of each key into every out array."""
        for k, outs in self._pairs(key, out):
            if k not in self._stored:
                raise GcagentError(_INVALID_ARGUMENT, f"key {k} has not been initialized: init, broadcast or push "
                                                      "it before pulling")
            stored = self._stored[k]
            for o in outs:
                o[:] = (stored if stored.dtype == o.dtype else stored.astype(o.dtype)).reshape(o.shape)

    def pushpull(self, key, value, out=None, priority=0):
        """push, then pull into out (into value when out is None)."""
        self.push(key, value, priority)
        self.pull(key, out if out is not None else value, priority)

    def broadcast(self, key, value, out, priority=0):
        """init with value (rank 0's wins), then pull into out: bit for bit everywhere."""
        self.init(key, value)
        self.pull(key, out, priority)

    def _barrier(self):
        """Returns once every worker has called it."""
        self._reducer.reduce([(_BARRIER_KEY, np.zeros(1, np.float32), 0)], codec="none", result="sum")

    barrier = _barrier

    # ---- configuration ----

    def set_gradient_compression(self, compression_params):
        """{'type': '2bit' | '1bit', 'threshold': t}: MXNet's compression, threshold 0.5 when
        absent, type required (MXNet's messages). Any other type names a gcagent codec; its
        other entries are its parameters."""
        params = dict(compression_params)
        if "type" not in params:
            raise GcagentError(_INVALID_ARGUMENT, "Required parameter type of string is not presented")
        kind = str(params.pop("type"))
        if kind in _MXNET_TYPES:
            threshold = _float_threshold(params.pop("threshold", _MXNET_DEFAULT_THRESHOLD))
            if kind == "2bit" and not float(threshold) > 0:
                raise GcagentError(_INVALID_ARGUMENT, f"threshold must be greater than 0 for two bit compression, "
                                                      f"got {threshold}")
            # Other entries are ignored, as MXNet ignores them (GradientCompressionParam's
            # InitAllowUnknown): what runs on dist_sync runs here.
            self._codec = (kind, {"threshold": threshold}, "mxnet")
        else:
            self._codec = (kind, {k: str(v) for k, v in params.items()}, None)
        self._check_momentum()

    def set_optimizer(self, optimizer):
        """The optimizer updates the stored values with each sum, as on dist_sync's servers:
        a copy taken now (MXNet pickles it to the servers), so later changes to the Trainer's
        optimizer do not reach it, as in dist_sync."""
        self._updater = mx.optimizer.get_updater(pickle.loads(pickle.dumps(optimizer)))
        self._momentum = (getattr(optimizer, "momentum", 0), type(optimizer).__name__)
        self._check_momentum()

    def _check_momentum(self):
        """Once both are known, and once per store: dgc's momentum against the optimizer's."""
        if not self._warned and self._momentum is not None:
            options = self._reduce_options()
            self._warned = warn_dgc_momentum(options["codec"], options["params"], *self._momentum)

    # ---- checkpoints ----

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """The optimizer's states (what dist_sync saves) and, beside them, the reductions' own:
        each key's iteration count and, on each node's local rank 0, the residuals its agent
        keeps (Reducer.state_dict). gluon.Trainer.save_states calls this; every trainer saves
        its own file, as the residuals are its node's."""
        if self._updater is None:
            raise GcagentError(_INVALID_ARGUMENT, "no optimizer to save: set_optimizer was not called")
        with open(fname, "wb") as f:
            pickle.dump({_STATES_FORMAT: 1, "optimizer": self._updater.get_states(dump_optimizer),
                         "reduction": self._reducer.state_dict()}, f)

    def load_optimizer_states(self, fname):
        """Loads a file of save_optimizer_states, or one of MXNet's own stores (the optimizer's
        states alone: the residuals then start from zero)."""
        if self._updater is None:
            raise GcagentError(_INVALID_ARGUMENT, "no optimizer to load into: set_optimizer was not called")
        with open(fname, "rb") as f:
            data = f.read()
        try:
            saved = pickle.loads(data)
        except Exception:  # noqa: BLE001 - not ours: MXNet's own format
            saved = None
        if not (isinstance(saved, dict) and _STATES_FORMAT in saved):
            return self._updater.set_states(data)
        self._updater.set_states(saved["optimizer"])
        self._reducer.load_state_dict(saved["reduction"])


KVStore = GcagentKVStore
