"""MXNet 1.9: gcagent.mxnet.KVStore, a KVStoreBase whose instance goes to gluon.Trainer.

    import gcagent.mxnet
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore=gcagent.mxnet.KVStore(),
                            compression_params={"type": "2bit", "threshold": 0.5})

Pass an instance: a string name silently skips synchronisation when a process has one device.
Like MXNet's dist_sync store, pushpull gives the sum over every trainer (and every device
of each), so Trainer.step(batch_size) scales as it does there. Keys are declared to the agent
as the store first meets them, with the priority MXNet passes (minus the parameter index)."""

import mxnet as mx
import numpy as np
from mxnet.kvstore import KVStoreBase

from gcagent.client import Reducer

# MXNet's compression names that differ from gcagent's codec names.
_CODEC_NAMES = {"2bit": "2bit", "1bit": "1bit"}


# Registered as "gcagentkvstore" (mx.kv.create); the name "kvstore" belongs to MXNet's own.
@KVStoreBase.register
class GcagentKVStore(KVStoreBase):
    """Synchronous data-parallel store over the node's gcagent (GCAGENT_* environment)."""

    def __init__(self, reducer=None):
        self._reducer = reducer or Reducer()
        self._ids = {}  # MXNet key (int or str) -> (agent key, priority), in order of first use

    @property
    def type(self):
        return "gcagent"

    @property
    def rank(self):
        return self._reducer.client.world_rank

    @property
    def num_workers(self):
        return self._reducer.client.world_size

    @staticmethod
    def is_capable(capability):
        # The optimizer runs in the trainer, never in the store.
        return capability != KVStoreBase.OPTIMIZER

    def _id(self, key, priority):
        """The agent key and its priority, fixed at first use: MXNet's priority (minus the
        parameter index), or minus the order of first use when MXNet passes none (broadcast)."""
        if key not in self._ids:
            self._ids[key] = (len(self._ids), int(priority) if priority else -len(self._ids))
        return self._ids[key]

    @staticmethod
    def _as_list(x):
        return list(x) if isinstance(x, (list, tuple)) else [x]

    def _exchange(self, keys, values, outs, priority, scale_root=None):
        keys = self._as_list(keys)
        if len(keys) > 1:
            values = values if isinstance(values, (list, tuple)) and len(values) == len(keys) else [values] * len(keys)
            outs = outs if outs is not None else [None] * len(keys)
            for k, v, o in zip(keys, values, outs):
                self._exchange(k, v, o, priority, scale_root)
            return
        key, priority = self._id(keys[0], priority)
        vals = self._as_list(values)
        local = vals[0].asnumpy().astype(np.float32)
        for v in vals[1:]:
            local += v.asnumpy()
        world = self.num_workers
        if scale_root is not None:  # broadcast: root's value, times N; zeros elsewhere
            local = local * world if self.rank == scale_root else np.zeros_like(local)
        averaged = self._reducer.reduce([(key, local, priority)])[0]
        result = averaged if scale_root is not None else averaged * world
        for o in self._as_list(outs if outs is not None else values):
            o[:] = mx.nd.array(result, ctx=o.context, dtype=o.dtype)

    def broadcast(self, key, value, out, priority=0):
        """Every out gets the value of the trainer with rank 0 (exact when the number of
        trainers is a power of two)."""
        self._exchange(key, value, out, priority, scale_root=0)

    def pushpull(self, key, value, out=None, priority=0):
        """out (value when out is None) gets the sum of value over every trainer and device."""
        self._exchange(key, value, out, priority)

    def set_gradient_compression(self, compression_params):
        """{'type': '2bit', 'threshold': 0.5} -> codec 2bit with threshold=0.5; any other type
        names a gcagent codec, and the other entries become its parameters."""
        params = dict(compression_params)
        kind = str(params.pop("type", "none"))
        self._reducer.codec = _CODEC_NAMES.get(kind, kind)
        self._reducer.params = {k: str(v) for k, v in params.items()}
        self._reducer.redeclare()

    def set_optimizer(self, optimizer):
        raise NotImplementedError("gcagent.mxnet.KVStore runs no optimizer: use update_on_kvstore=False")

    def save_optimizer_states(self, fname, dump_optimizer=False):
        raise NotImplementedError("gcagent.mxnet.KVStore keeps no optimizer: save the Trainer's states")

    def load_optimizer_states(self, fname):
        raise NotImplementedError("gcagent.mxnet.KVStore keeps no optimizer: load the Trainer's states")


KVStore = GcagentKVStore
