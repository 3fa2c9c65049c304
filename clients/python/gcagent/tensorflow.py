"""TensorFlow 2: DistributedGradientTape for custom loops, DistributedOptimizer for Keras.

    import gcagent.tensorflow
    tape = gcagent.tensorflow.DistributedGradientTape(tape)           # custom training loop
    model.compile(optimizer=gcagent.tensorflow.DistributedOptimizer(tf.keras.optimizers.SGD(0.1)), ...)

Both average every gradient over all trainers through the node's agent before it is applied:
one agent tensor per trainable variable, in the model's order, priority minus that index
(front layers first). Inside a tf.function (model.fit) the exchange runs through
tf.numpy_function, so the step needs jit_compile=False."""

import numpy as np
import tensorflow as tf

from gcagent.client import Reducer

_default_reducer = None


def default_reducer() -> Reducer:
    """One Reducer per process, connected on first use (GCAGENT_* environment)."""
    global _default_reducer
    if _default_reducer is None:
        _default_reducer = Reducer()
    return _default_reducer


def _average_numpy(reducer, *grads):
    averaged = reducer.reduce([(i, g, -i) for i, g in enumerate(grads)])
    return [a.astype(g.dtype, copy=False) for a, g in zip(averaged, grads)]


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


def DistributedOptimizer(optimizer, reducer=None):  # noqa: N802 - named like the class it returns
    """A copy of `optimizer` (a Keras optimizer) whose apply() first averages the gradients."""
    base = type(optimizer)

    class _Distributed(base):
        def apply(self, grads, trainable_variables=None):
            return super().apply(allreduce_gradients(list(grads), reducer), trainable_variables)

    _Distributed.__name__ = f"Distributed{base.__name__}"
    return _Distributed.from_config(optimizer.get_config())


def broadcast_variables(variables, reducer=None, root=0):
    """Sets every trainer's variables to the root trainer's values, bit for bit (fp32):
    uncompressed, on keys of their own (Reducer.broadcast), whatever the gradients' codec."""
    reducer = reducer or default_reducer()
    arrays = [(i, np.asarray(v.numpy(), np.float32), -i) for i, v in enumerate(variables)]
    for v, a in zip(variables, reducer.broadcast(arrays, root)):
        v.assign(a.astype(v.numpy().dtype, copy=False))
