"""A TensorFlow trainer for the shim tests (environment from shim_cluster.py): the tape with
codec none against the reference average, then model.fit through DistributedOptimizer with
2bit, each as its own job on the agents. Prints "report: {json}" last."""

import json
import os

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


if __name__ == "__main__":
    print("report: " + json.dumps({"tape": tape_exact(), "fit": keras_fit()}), flush=True)
