"""The same 2bit pushes through a store named by argv[1], for test_mxnet_side_by_side.py to
compare bit for bit:

  dist_sync  MXNet's own (a worker of mxnet_dist_sync.py: 1 scheduler, 1 server, 2 workers)
  gcagent    gcagent.mxnet.KVStore() (a trainer of shim_cluster.py: 2 agents x 1 trainer)
  device     MXNet's 'device' store in one process with 2 CPU contexts, cpu(0) holding worker
             0's gradients and cpu(1) worker 1's: it quantizes each device's gradient with that
             device's residual and adds the decoded values, as dist_sync does with 2 workers.
             (Compression on a device store of CPU contexts works in 1.9.1; the 'local' store
             refuses compression.)

For each threshold (--threshold, repeatable; dist_sync takes one, its compression is set once
a process), a store with set_gradient_compression({'type': '2bit', 'threshold': t}) and no
optimizer, so a pull gives the sum: KEYS keys initialised with zeros, then ITERATIONS times
push every key (worker w's gradient for key k at iteration i: standard normal, seeded by w, i
and k), then pull every key. Every pulled value is written to --out/<store>-t<t>-rank<r>.npy
(shape: iterations x the keys' elements, in key order) and "report: {json}" printed last."""

import argparse
import json
from pathlib import Path

import mxnet as mx
import numpy as np

SIZES = [1, 7, 16, 17, 1000, 4097, 65537, 300000]
KEYS = [f"k{n}" for n in SIZES]
ITERATIONS = 6
WORKERS = 2


def gradient(worker, iteration, key_index):
    seed = 1_000_000 * worker + 1000 * iteration + key_index
    return np.random.RandomState(seed).standard_normal(SIZES[key_index]).astype(np.float32)


def run(push, pull):
    """ITERATIONS rounds of push every key, then pull every key; the pulls, flattened."""
    pulled = np.zeros((ITERATIONS, sum(SIZES)), np.float32)
    for it in range(ITERATIONS):
        for i, k in enumerate(KEYS):
            push(i, k, it)
        offset = 0
        for i, k in enumerate(KEYS):
            out = mx.nd.zeros(SIZES[i])
            pull(k, out)
            pulled[it, offset:offset + SIZES[i]] = out.asnumpy()
            offset += SIZES[i]
    return pulled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("store", choices=["dist_sync", "gcagent", "device"])
    parser.add_argument("--threshold", type=float, action="append", required=True)
    parser.add_argument("--out", required=True)
    opt = parser.parse_args()
    written = []
    for t in opt.threshold:
        if opt.store == "dist_sync":
            if len(opt.threshold) != 1:
                raise SystemExit("dist_sync: one threshold a process")
            kv = mx.kv.create("dist_sync")
        elif opt.store == "gcagent":
            import gcagent
            import gcagent.mxnet
            kv = gcagent.mxnet.KVStore(gcagent.Reducer(gcagent.Client(job=f"side-by-side-{t}")))
        else:
            kv = mx.kv.create("device")
        kv.set_gradient_compression({"type": "2bit", "threshold": t})
        for i, k in enumerate(KEYS):
            kv.init(k, mx.nd.zeros(SIZES[i]))
        if opt.store == "device":
            rank, workers = 0, WORKERS
            pulled = run(lambda i, k, it: kv.push(k, [mx.nd.array(gradient(w, it, i), ctx=mx.cpu(w))
                                                      for w in range(WORKERS)]),
                         lambda k, out: kv.pull(k, out=out))
        else:
            rank, workers = kv.rank, kv.num_workers
            if workers != WORKERS:
                raise SystemExit(f"{WORKERS} workers expected, got {workers}")
            pulled = run(lambda i, k, it: kv.push(k, mx.nd.array(gradient(rank, it, i))),
                         lambda k, out: kv.pull(k, out=out))
        path = Path(opt.out) / f"{opt.store}-t{t}-rank{rank}.npy"
        np.save(path, pulled)
        written.append(str(path))
    print("report: " + json.dumps({"store": opt.store, "rank": rank, "workers": workers, "files": written}),
          flush=True)


if __name__ == "__main__":
    main()
