"""Learning rate 0 through a shim (argv[1]: torch, tensorflow or mxnet): each trainer starts
from its own random weights, takes rank 0's through the shim's broadcast, then trains a few
steps with 2bit gradients and a learning rate of 0. Nothing may change a weight: the
broadcast is lossless and an update of 0 leaves every weight as it was. One layer is above
the agent's compress.min_elements (262,144), one below. Prints "report: {json}" last:
the digest of rank 0's first weights (on rank 0) and of each trainer's last weights."""

import hashlib
import json
import os
import sys

import numpy as np

import gcagent

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])
IN, HIDDEN, OUT = 512, 600, 10  # 307,200 weights above compress.min_elements, 6,000 below
STEPS = 3


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()


def batch(step):
    rng = np.random.default_rng(100 * step + RANK)
    return rng.standard_normal((32, IN)).astype(np.float32), rng.integers(0, OUT, 32)


def reducer():
    return gcagent.Reducer(gcagent.Client(job="frozen"), codec="2bit", params={"threshold": "0.5"})


def run_torch():
    import torch
    import gcagent.torch
    torch.manual_seed(RANK)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))
    weights = lambda: [p.detach().numpy() for p in model.parameters()]  # noqa: E731
    first = digest(weights())
    r = reducer()
    gcagent.torch.broadcast_parameters(model.parameters(), r)
    opt = gcagent.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9), r)
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
    return first, digest(weights())


def run_tensorflow():
    import tensorflow as tf
    import gcagent.tensorflow as gtf
    tf.keras.utils.set_random_seed(RANK)
    model = tf.keras.Sequential([tf.keras.Input((IN,)), tf.keras.layers.Dense(HIDDEN, activation="relu"),
                                 tf.keras.layers.Dense(OUT)])
    weights = lambda: [v.numpy() for v in model.trainable_variables]  # noqa: E731
    first = digest(weights())
    r = reducer()
    gtf.broadcast_variables(model.trainable_variables, r)
    opt = gtf.DistributedOptimizer(tf.keras.optimizers.SGD(0.0, momentum=0.9), r)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for step in range(STEPS):
        x, y = batch(step)
        with tf.GradientTape() as tape:
            value = loss(y, model(x))
        opt.apply(tape.gradient(value, model.trainable_variables), model.trainable_variables)
    return first, digest(weights())


def run_mxnet():
    import mxnet as mx
    from mxnet import autograd, gluon
    import gcagent.mxnet
    mx.random.seed(RANK)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(HIDDEN, in_units=IN, activation="relu"), gluon.nn.Dense(OUT, in_units=HIDDEN))
    net.initialize(mx.init.Xavier())
    weights = lambda: [p.data().asnumpy() for p in net.collect_params().values()]  # noqa: E731
    first = digest(weights())
    kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="frozen")))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.0, "momentum": 0.9}, kvstore=kv,
                            compression_params={"type": "2bit", "threshold": 0.5})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(STEPS):
        x, y = batch(step)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(32 * WORLD)
    return first, digest(weights())


if __name__ == "__main__":
    first, last = {"torch": run_torch, "tensorflow": run_tensorflow, "mxnet": run_mxnet}[sys.argv[1]]()
    print("report: " + json.dumps({"rank": RANK, "first": first, "last": last}), flush=True)
