"""A TensorFlow trainer for the shim tests (environment from shim_cluster.py).

    tf_trainer.py [suite | extras | checkpoint PHASE DIR]

suite: the tape with codec none against the reference average, then model.fit through
DistributedOptimizer with 2bit, each as its own job on the agents. extras: Horovod's names,
backward_passes_per_step, MetricAverageCallback, dgc's momentum warning and agent errors as
the training loop sees them. checkpoint trains in a custom loop with DistributedOptimizer and 2bit,
saving model and optimizer (tf.train.Checkpoint) and the reducer's state (pickled) per trainer in
DIR: PHASE whole trains 2 x CHECKPOINT_STEPS steps; save the first half and saves; resume loads
and trains the second half; forget does too without the reducer's state. Prints "report: {json}"
last."""

import json
import os
import sys
import warnings

import numpy as np
import tensorflow as tf

import gcagent
import gcagent.tensorflow as gtf

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])


def model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    m = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
    return m


def batch(rank, it):
    rng = np.random.default_rng(1000 * it + rank)
    return rng.standard_normal((16, 32)).astype(np.float32), rng.integers(0, 10, 16)


LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


CHECKPOINT_STEPS = 8


def checkpointed(phase, directory):
    import pickle
    tf.config.experimental.enable_op_determinism()
    m = model()
    reducer = gcagent.Reducer(gcagent.Client(job="checkpoint"), codec="2bit", params={"threshold": "0.005"})
    opt = gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9), reducer)
    opt.build(m.trainable_variables)
    ckpt = tf.train.Checkpoint(model=m, optimizer=opt)
    path = os.path.join(directory, f"rank{RANK}")
    first, last = 0, 2 * CHECKPOINT_STEPS
    if phase in ("resume", "forget"):
        ckpt.read(path + ".ckpt").assert_consumed()
        if phase == "resume":
            with open(path + ".gcagent", "rb") as f:
                reducer.load_state_dict(pickle.load(f))
        first = CHECKPOINT_STEPS
    elif phase == "save":
        last = CHECKPOINT_STEPS
    losses = []
    for it in range(first, last):
        x, y = batch(RANK, it)
        with tf.GradientTape() as tape:
            loss = LOSS(y, m(x))
        opt.apply(tape.gradient(loss, m.trainable_variables), m.trainable_variables)
        losses.append(float(loss))
    report = {"losses": losses, "weights": [v.numpy().tolist() for v in m.trainable_variables]}
    if phase == "save":
        ckpt.write(path + ".ckpt")
        state = reducer.state_dict()
        with open(path + ".gcagent", "wb") as f:
            pickle.dump(state, f)
        report["residual_keys"] = len(state[f"rank{RANK}"]["residuals"])
    return report


def grads(m, x, y, tape_wrapper=None):
    with tf.GradientTape() as tape:
        loss = LOSS(y, m(x))
    tape = tape_wrapper(tape) if tape_wrapper else tape
    return tape.gradient(loss, m.trainable_variables)


def tape_exact():
    m = model()
    reducer = gcagent.Reducer(gcagent.Client(job="tape"), codec="none")
    errors = []
    for it in range(1, 4):
        x, y = batch(RANK, it)
        got = grads(m, x, y, lambda t: gtf.DistributedGradientTape(t, reducer))
        ref = [sum(grads(m, *batch(r, it))[i].numpy().astype(np.float64) for r in range(WORLD)) / WORLD
               for i in range(len(got))]
        errors.append(max(float(np.abs(g.numpy() - r).max()) for g, r in zip(got, ref)))
    return {"errors": errors}


def keras_fit():
    m = model(seed=RANK)  # different everywhere until the broadcast
    reducer = gcagent.Reducer(gcagent.Client(job="fit"), codec="2bit", params={"threshold": "0.005"})
    gtf.broadcast_variables(m.trainable_variables, reducer)
    m.compile(optimizer=gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.2, momentum=0.9), reducer),
              loss=LOSS, jit_compile=False)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 10)).astype(np.float32)
    x = np.random.default_rng(100 + RANK).standard_normal((640, 32)).astype(np.float32)
    y = (x @ w).argmax(1)
    hist = m.fit(x, y, batch_size=64, epochs=10, shuffle=False, verbose=0)
    return {"losses": [float(v) for v in hist.history["loss"]],
            "weight_sum": float(sum(np.sum(v.numpy(), dtype=np.float64) for v in m.trainable_variables))}


def grid(rank, n, seed):
    """Values on a 2^-4 grid: sums of a few are exact in fp32 in any order."""
    return (np.random.default_rng(1000 * seed + rank).integers(-64, 64, n) / 16).astype(np.float32)


def caught(fn):
    """What the training loop's `except` sees: the exception's type and message, and its cause's type."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - what reaches the caller is the point
        return {"type": type(e).__name__, "message": str(e), "cause": type(e.__cause__).__name__}
    return None


def horovod_names():
    reducer = gcagent.Reducer(gcagent.Client(job="names"))
    return {"reducer": [reducer.rank(), reducer.size(), reducer.local_rank(), reducer.local_size()],
            "module": [gtf.rank(), gtf.size(), gtf.local_rank(), gtf.local_size()]}


def backward_passes():
    """SGD(1.0) with backward_passes_per_step=2 inside a tf.function: the weights after each of
    four passes (the gradients given directly)."""
    reducer = gcagent.Reducer(gcagent.Client(job="passes"), codec="none")
    v = tf.Variable(np.zeros(6, np.float32))
    opt = gtf.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), reducer, backward_passes_per_step=2)

    @tf.function(jit_compile=False)
    def apply(g):
        opt.apply([g], [v])

    given, weights = [grid(RANK, 6, p) for p in range(1, 5)], []
    for g in given:
        apply(tf.constant(g))
        weights.append(v.numpy().tolist())
    return {"given": [g.tolist() for g in given], "weights": weights,
            "reductions": sorted(set(reducer._iteration.values()))}


class Recorder(tf.keras.callbacks.Callback):
    """The epoch-end logs as this trainer computed them (listed before MetricAverageCallback)."""

    def __init__(self):
        super().__init__()
        self.logs = []

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs))


def metric_average():
    m = model()
    reducer = gcagent.Reducer(gcagent.Client(job="metrics"), codec="none")
    m.compile(optimizer=gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), reducer), loss=LOSS,
              jit_compile=False)
    x, y = batch(RANK, 50)
    vx, vy = batch(RANK, 60)
    recorder = Recorder()
    hist = m.fit(x, y, batch_size=8, epochs=2, validation_data=(vx, vy), shuffle=False, verbose=0,
                 callbacks=[recorder, gtf.MetricAverageCallback(reducer)])
    return {"own": recorder.logs, "averaged": hist.history}


def momentum_warnings():
    client = gcagent.Client(job="dgc")
    dgc = gcagent.Reducer(client, codec="dgc", params={"momentum": "0.9"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9), dgc)
        # Either momentum alone is quiet.
        gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                 gcagent.Reducer(client, codec="dgc", params={"momentum": "0"}))
        gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), dgc)
    return [str(w.message) for w in seen if "gcagent" in str(w.message)]


def agent_errors():
    """A codec the agent refuses: from an eager tape, from model.fit, and from model.fit inside
    agent_errors()."""
    m = model()
    tape = gcagent.Reducer(gcagent.Client(job="tape-codec"), codec="nosuch")
    eager = caught(lambda: grads(m, *batch(RANK, 1), lambda t: gtf.DistributedGradientTape(t, tape)))
    fit_reducer = gcagent.Reducer(gcagent.Client(job="fit-codec"), codec="nosuch")
    m.compile(optimizer=gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), fit_reducer), loss=LOSS,
              jit_compile=False)
    x, y = batch(RANK, 2)

    def fit():
        m.fit(x, y, batch_size=8, epochs=1, verbose=0)

    def fit_in_agent_errors():
        with gtf.agent_errors():
            fit()

    return {"eager": eager, "fit": caught(fit), "agent_errors": caught(fit_in_agent_errors)}


def extras():
    return {"names": horovod_names(), "passes": backward_passes(), "metrics": metric_average(),
            "momentum": momentum_warnings(), "errors": agent_errors()}


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "suite"
    if mode == "checkpoint":
        result = checkpointed(sys.argv[2], sys.argv[3])
    else:
        result = extras() if mode == "extras" else {"tape": tape_exact(), "fit": keras_fit()}
    print("report: " + json.dumps(result), flush=True)
