"""TensorFlow 2: DistributedGradientTape for custom loops, DistributedOptimizer for Keras.

    import gcagent.tensorflow
    tape = gcagent.tensorflow.DistributedGradientTape(tape)           # custom training loop
    model.compile(optimizer=gcagent.tensorflow.DistributedOptimizer(tf.keras.optimizers.SGD(0.1)), ...)

Both average every gradient over all trainers through the node's agent before it is applied:
one agent tensor per trainable variable, in the model's order, priority minus that index
(front layers first). Inside a tf.function (model.fit) the exchange runs through
tf.numpy_function, so the step needs jit_compile=False.

An agent error raises gcagent.GcagentError where TensorFlow runs eagerly; inside a tf.function
TensorFlow turns it into tf.errors.UnknownError ("GcagentError: <message>" in its message),
which agent_errors() turns back:

    with gcagent.tensorflow.agent_errors():
        model.fit(...)                       # raises the GcagentError itself

MetricAverageCallback averages the epoch-end logs over every trainer; rank(), size(),
local_rank() and local_size() are Horovod's, on default_reducer()."""

import contextlib

import numpy as np
import tensorflow as tf

from gcagent.client import (GcagentError, codec_from_env, default_reducer, local_rank, local_size, rank,  # noqa: F401
                            size, warn_dgc_momentum)

# MetricAverageCallback's key: apart from the gradients' (from 0), their broadcasts'
# (BROADCAST_KEY_BASE) and the MXNet store's barrier.
METRIC_KEY = 1 << 46
_raised = None  # the last GcagentError an exchange raised, for agent_errors()


def _average_numpy(reducer, *grads):
    global _raised
    try:
        averaged = reducer.reduce([(i, g, -i) for i, g in enumerate(grads)])
    except GcagentError as e:
        _raised = e  # raised in a TensorFlow thread, where the caller cannot see it
        raise
    return [a.astype(g.dtype, copy=False) for a, g in zip(averaged, grads)]


@contextlib.contextmanager
def agent_errors():
    """Raises a GcagentError that a tf.function (model.fit) turned into a tf.errors.OpError as
    the GcagentError itself, the tf error as its __cause__."""
    global _raised
    _raised = None
    try:
        yield
    except tf.errors.OpError as e:
        raised = _raised
        if raised is not None and str(raised) in e.message:
            raise raised from e
        raise


def allreduce_gradients(grads, reducer=None):
    """The average over every trainer of each gradient (None entries stay None)."""
    reducer = reducer or default_reducer()
    present = [i for i, g in enumerate(grads) if g is not None]
    dense = [tf.convert_to_tensor(grads[i]) for i in present]
    if not dense:
        return list(grads)
    if tf.executing_eagerly():
        out = [tf.constant(a) for a in _average_numpy(reducer, *[d.numpy() for d in dense])]
    else:
        out = tf.numpy_function(lambda *g: _average_numpy(reducer, *g), dense, [d.dtype for d in dense],
                                stateful=True, name="gcagent_allreduce")
        out = [tf.ensure_shape(o, d.shape) for o, d in zip(out, dense)]
    result = list(grads)
    for i, o in zip(present, out):
        result[i] = o
    return result


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns averaged gradients; the rest passes through."""

    def __init__(self, tape, reducer=None):
        self._tape = tape
        self._reducer = reducer

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients, **kwargs)
        flat = tf.nest.flatten(grads)
        return tf.nest.pack_sequence_as(grads, allreduce_gradients(flat, self._reducer))

    def __getattr__(self, name):
        return getattr(self._tape, name)


def DistributedOptimizer(optimizer, reducer=None, backward_passes_per_step=1):  # noqa: N802 - named like a class
    """A copy of `optimizer` (a Keras optimizer) whose apply() first averages the gradients.

    backward_passes_per_step: as Horovod's: apply() adds the gradients into local sums, and
    only every backward_passes_per_step-th call averages the sums over all trainers (one
    exchange) and applies them; the calls in between change no weight. A dgc codec meeting an
    optimizer with momentum warns."""
    passes = int(backward_passes_per_step)
    if passes < 1:
        raise ValueError(f"gcagent: backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
    base = type(optimizer)
    codec, params = (reducer.codec, reducer.params) if reducer is not None else codec_from_env()
    warn_dgc_momentum(codec, params, getattr(optimizer, "momentum", 0), base.__name__)

    class _Distributed(base):
        def build(self, variables):
            super().build(variables)
            if passes > 1:
                self._gcagent_sums = [self.add_variable_from_reference(v, name="gcagent_sum") for v in variables]
                self._gcagent_passes = self.add_variable((), dtype="int64", name="gcagent_passes")

        def apply(self, grads, trainable_variables=None):
            if passes == 1:
                return super().apply(allreduce_gradients(list(grads), reducer), trainable_variables)
            variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
            if not self.built:
                self.build(variables)
            sums = [self._gcagent_sums[self._get_variable_index(v)] for v in variables]
            for total, g in zip(sums, grads):
                if g is not None:
                    total.assign_add(tf.convert_to_tensor(g))
            self._gcagent_passes.assign_add(1)

            def reduce_and_apply():
                super(_Distributed, self).apply(allreduce_gradients([t.value for t in sums], reducer), variables)
                for total in sums:
                    total.assign(tf.zeros_like(total.value))

            tf.cond(self._gcagent_passes.value % passes == 0, reduce_and_apply, lambda: None)

    _Distributed.__name__ = f"Distributed{base.__name__}"
    return _Distributed.from_config(optimizer.get_config())


def broadcast_variables(variables, reducer=None, root=0):
    """Sets every trainer's variables to the root trainer's values, bit for bit (fp32):
    uncompressed, on keys of their own (Reducer.broadcast), whatever the gradients' codec."""
    reducer = reducer or default_reducer()
    arrays = [(i, np.asarray(v.numpy(), np.float32), -i) for i, v in enumerate(variables)]
    for v, a in zip(variables, reducer.broadcast(arrays, root)):
        v.assign(a.astype(v.numpy().dtype, copy=False))


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Horovod's MetricAverageCallback: at the end of each epoch, every number in the logs
    becomes its average over all trainers (one uncompressed exchange). List it before the
    callbacks that read the logs; every trainer must log the same names."""

    def __init__(self, reducer=None):
        super().__init__()
        self._reducer = reducer

    def on_epoch_end(self, epoch, logs=None):
        names = sorted(k for k, v in (logs or {}).items() if _is_number(v))
        if not names:
            return
        values = np.array([float(logs[k]) for k in names], np.float32)
        reducer = self._reducer or default_reducer()
        averaged = reducer.reduce([(METRIC_KEY, values, 0)], codec="none")[0]
        for k, v in zip(names, averaged):
            logs[k] = float(v)


def _is_number(v):
    if isinstance(v, (str, bytes)):
        return False
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False
