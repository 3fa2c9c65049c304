"""An MXNet trainer for the shim tests (environment from shim_cluster.py).

    mxnet_trainer.py [suite | extras | checkpoint PHASE DIR]

suite: pushpull with codec none against the exact sum, then gluon.Trainer with the store and
2bit compression, each as its own job on the agents. extras: who is who, dgc's momentum
warning and agent errors as the training loop sees them. checkpoint trains with gluon.Trainer and
2bit, saving parameters and Trainer.save_states per trainer in DIR: PHASE whole trains 2 x
CHECKPOINT_STEPS steps; save the first half and saves; resume loads and trains the second half;
forget loads MXNet's part of the states alone. Prints "report: {json}" last."""

import json
import os
import sys
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import gcagent
import gcagent.mxnet

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])


def grid_values(rank, it, n):
    """Values on a 2^-14 grid: sums of a few are exact in fp32 in any order."""
    return np.random.default_rng(1000 * it + rank).integers(-1024, 1024, n).astype(np.float32) / 16384


def pushpull_exact():
    kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="pushpull"), codec="none"))
    sizes = [7, 4096, 40001]
    errors = []
    for it in range(1, 4):
        for key, n in enumerate(sizes):
            out = mx.nd.zeros(n)
            kv.pushpull(key, mx.nd.array(grid_values(RANK, it + key, n)), out=out, priority=-key)
            want = sum(grid_values(r, it + key, n).astype(np.float64) for r in range(WORLD))
            errors.append(float(np.abs(out.asnumpy() - want).max()))
    value = mx.nd.array(grid_values(RANK, 99, 5))
    out = mx.nd.zeros(5)
    kv.broadcast(100, value, out)
    return {"errors": errors, "broadcast_exact": bool((out.asnumpy() == grid_values(0, 99, 5)).all()),
            "rank": kv.rank, "num_workers": kv.num_workers}


def gluon_train():
    mx.random.seed(RANK)  # different initial weights everywhere until the broadcast
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 32)))
    kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="gluon")))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv,
                            compression_params={"type": "2bit", "threshold": 0.5})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    w = np.random.default_rng(7).standard_normal((32, 10)).astype(np.float32)
    losses = []
    for it in range(60):
        x = np.random.default_rng(100 * it + RANK).standard_normal((64, 32)).astype(np.float32)
        y = (x @ w).argmax(1)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y)).mean()
        loss.backward()
        # Mean gradients (mostly under the threshold: 2bit sends what the residual gathers);
        # pushpull sums over the trainers, as dist_sync does.
        trainer.step(WORLD)
        losses.append(float(loss.asscalar()))
    weights = sum(float(p.data().asnumpy().astype(np.float64).sum()) for p in net.collect_params().values())
    return {"first_loss": sum(losses[:5]) / 5, "last_loss": sum(losses[-5:]) / 5, "weight_sum": weights,
            "codec": kv._codec[0], "params": kv._codec[1], "aggregation": kv._codec[2]}


CHECKPOINT_STEPS = 10


def checkpointed(phase, directory):
    mx.random.seed(0)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 32)))
    path = os.path.join(directory, f"rank{RANK}")
    if phase in ("resume", "forget"):
        net.load_parameters(path + ".params")
    kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="checkpoint")))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv,
                            compression_params={"type": "2bit", "threshold": 0.05})
    first, last = 0, 2 * CHECKPOINT_STEPS
    if phase == "resume":
        trainer.load_states(path + ".states")
        first = CHECKPOINT_STEPS
    elif phase == "forget":
        import pickle
        with open(path + ".states", "rb") as f:
            mxnet_only = pickle.load(f)["optimizer"]
        with open(path + ".mxnet", "wb") as f:
            f.write(mxnet_only)
        trainer.load_states(path + ".mxnet")  # MXNet's own format: no residuals
        first = CHECKPOINT_STEPS
    elif phase == "save":
        last = CHECKPOINT_STEPS
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    w = np.random.default_rng(7).standard_normal((32, 10)).astype(np.float32)
    losses = []
    for it in range(first, last):
        x = np.random.default_rng(100 * it + RANK).standard_normal((64, 32)).astype(np.float32)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array((x @ w).argmax(1))).mean()
        loss.backward()
        trainer.step(WORLD)
        losses.append(float(loss.asscalar()))
    weights = [p.data().asnumpy().tolist() for p in net.collect_params().values()]
    report = {"losses": losses, "weights": weights}
    if phase == "save":
        net.save_parameters(path + ".params")
        trainer.save_states(path + ".states")
        report["residual_keys"] = len(kv._reducer.state_dict()[f"rank{RANK}"]["residuals"])
    return report


def small_net():
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 32)))
    return net


def train(net, trainer, steps):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for it in range(steps):
        x = np.random.default_rng(100 * it + RANK).standard_normal((8, 32)).astype(np.float32)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(np.arange(8) % 10)).mean()
        loss.backward()
        trainer.step(WORLD)


def caught(fn):
    """What the training loop's `except` sees: the exception's type, code and message."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - what reaches the caller is the point
        return {"type": type(e).__name__, "code": getattr(e, "code", None), "message": str(e)}
    return None


def who_is_who():
    kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="names")))
    r = kv._reducer
    return {"store": [kv.rank, kv.num_workers, kv.local_rank, kv.local_size],
            "reducer": [r.rank(), r.size(), r.local_rank(), r.local_size()]}


def momentum_warnings():
    """dgc meets the Trainer's sgd momentum: one warning, however many steps."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        net = small_net()
        kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job="dgc")))
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9}, kvstore=kv,
                                compression_params={"type": "dgc", "ratio": "0.1", "momentum": "0.9"})
        train(net, trainer, 3)
        # Either momentum alone is quiet.
        quiet = gcagent.mxnet.KVStore(kv._reducer)
        quiet.set_gradient_compression({"type": "dgc", "momentum": "0"})
        quiet.set_optimizer(mx.optimizer.SGD(momentum=0.9))
        quiet = gcagent.mxnet.KVStore(kv._reducer)
        quiet.set_gradient_compression({"type": "dgc", "momentum": "0.9"})
        quiet.set_optimizer(mx.optimizer.SGD())
        # dgc's default momentum is 0: quiet with the optimizer's.
        quiet = gcagent.mxnet.KVStore(kv._reducer)
        quiet.set_gradient_compression({"type": "dgc"})
        quiet.set_optimizer(mx.optimizer.SGD(momentum=0.9))
    return [str(w.message) for w in seen if "gcagent" in str(w.message)]


def agent_errors():
    """Compression the agent refuses, met by Trainer.step: an unknown codec, a bad parameter."""
    out = {}
    for job, compression in (("codec", {"type": "nosuch"}), ("param", {"type": "dgc", "ratio": "2"})):
        net = small_net()
        kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job=job)))
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv,
                                compression_params=compression)
        out[job] = caught(lambda: train(net, trainer, 1))
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "checkpoint":
        result = checkpointed(sys.argv[2], sys.argv[3])
    elif (sys.argv[1] if len(sys.argv) > 1 else "suite") == "extras":
        result = {"names": who_is_who(), "momentum": momentum_warnings(), "errors": agent_errors()}
    else:
        result = {"pushpull": pushpull_exact(), "gluon": gluon_train()}
    print("report: " + json.dumps(result), flush=True)
