"""A trainer for the GPU test of test_device.py; the environment comes from shim_cluster.py.

    device_trainer.py ITERATIONS

Declares one tensor per codec twice, in two jobs on the same agents: "host" with host tensors
and "device" with device slots on GPU 0 (CUDA IPC). Every iteration it reduces the same
gradients (seeded by rank, iteration and key) through both, and reports per key how many
elements of the two results differ bitwise. It prints "report: {json}" last."""

import json
import os
import sys

import numpy as np
import torch

from gcagent.client import Client, TensorSpec
from gcagent.torch import _DeviceSlot

RANK, WORLD = int(os.environ["WORLD_RANK"]), int(os.environ["WORLD_SIZE"])

# key -> (codec, params, elements); sizes cut into several slices, some of them ragged.
TENSORS = {
    1: ("none", {}, 70_001),
    2: ("fp16", {}, 50_000),
    3: ("bf16", {}, 50_000),
    4: ("2bit", {"threshold": "0.05"}, 65_537),
    5: ("1bit", {}, 40_000),
    6: ("onebit", {}, 40_000),
    7: ("terngrad", {}, 40_000),
    8: ("qsgd", {}, 40_000),
    9: ("randomk", {"ratio": "0.05"}, 40_000),
    10: ("topk", {"ratio": "0.02"}, 100_000),
    11: ("dgc", {"ratio": "0.01"}, 100_000),
    12: ("threshold", {"drop": "0.9"}, 100_000),
}


def gradient(rank, iteration, key, elements):
    rng = np.random.default_rng([rank, iteration, key])
    return (rng.standard_normal(elements) * 0.1).astype(np.float32)


def main(iterations):
    specs = [TensorSpec(k, n, priority=-k, codec=c, params=p) for k, (c, p, n) in TENSORS.items()]
    host = Client(job="host")
    host.declare(specs)
    device = Client(job="device")
    device.declare_device(specs, device.gpu_uuid(0))
    slots = {k: torch.as_tensor(_DeviceSlot(device.device_buffer(k), n), device="cuda:0")
             for k, (_, _, n) in TENSORS.items()}
    stream = torch.cuda.Stream()
    differing = {TENSORS[k][0]: [] for k in TENSORS}
    none_error = []
    keys = list(TENSORS)
    for it in range(1, iterations + 1):
        grads = {k: gradient(RANK, it, k, n) for k, (_, _, n) in TENSORS.items()}
        for k in keys:
            host.buffer(k)[:] = grads[k]
        host.submit(it, keys)
        assert host.wait(it, keys, 60000), f"host iteration {it} timed out"
        host_result = {k: host.buffer(k).copy() for k in keys}

        with torch.cuda.stream(stream):
            for k in keys:
                slots[k].copy_(torch.from_numpy(grads[k]).to("cuda:0", non_blocking=False))
        device.submit_device(it, keys, stream.cuda_stream)
        assert device.wait_device(it, keys, 60000, stream.cuda_stream), f"device iteration {it} timed out"
        with torch.cuda.stream(stream):
            back = {k: slots[k].clone() for k in keys}
        stream.synchronize()
        for k in keys:
            dev = back[k].cpu().numpy()
            differing[TENSORS[k][0]].append(int(np.count_nonzero(dev.view(np.uint32) != host_result[k].view(np.uint32))))
        reference = sum(gradient(r, it, 1, TENSORS[1][2]).astype(np.float64) for r in range(WORLD)) / WORLD
        none_error.append(float(np.abs(back[1].cpu().numpy() - reference).max()))
    host.close()
    device.close()
    return {"differing": differing, "none_error": none_error}


if __name__ == "__main__":
    print("report: " + json.dumps(main(int(sys.argv[1]))), flush=True)
    os._exit(0)
