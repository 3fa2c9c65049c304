"""A trainer of bfloat16, float16 and float32 slots (numpy only; environment from shim_cluster.py).

Each of ITERATIONS steps, writes this trainer's values (dtype_values: a seeded normal draw,
rounded into the slot's type) into every slot, submits, waits, and reports the slots' raw bits.
Prints "report: {json}" last."""

import json
import os

import numpy as np


TENSORS = [(1, 5000, "bfloat16"), (2, 3000, "float16"), (3, 1000, "float32")]
ITERATIONS = 3


def dtype_values(rank, it, key, n):
    """This trainer's gradient, in fp32, before it is rounded into its slot's type."""
    return (np.random.default_rng(1000 * it + 10 * key + rank).standard_normal(n) * 0.01).astype(np.float32)


def bfloat16_bits(x):
    """fp32 -> bfloat16 bits, rounded to nearest even (finite values)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def rounded(x, dtype):
    """What a trainer writes into a slot of `dtype` for the fp32 values x."""
    return {"bfloat16": bfloat16_bits, "float16": lambda v: v.astype(np.float16),
            "float32": lambda v: v}[dtype](x)


def main():
    import gcagent
    rank = int(os.environ["WORLD_RANK"])
    client = gcagent.Client(job="dtypes")
    client.declare([gcagent.TensorSpec(k, n, 0, "none", {}, dtype) for k, n, dtype in TENSORS])
    seen = []
    for it in range(1, ITERATIONS + 1):
        for k, n, dtype in TENSORS:
            client.slot(k)[:] = rounded(dtype_values(rank, it, k, n), dtype)
        keys = [k for k, _, _ in TENSORS]
        client.submit(it, keys)
        assert client.wait(it, keys, 60000)
        seen.append({str(k): client.slot(k).view(np.uint16 if dtype != "float32" else np.uint32).tolist()
                     for k, _, dtype in TENSORS})
    client.close()
    print("report: " + json.dumps({"seen": seen}), flush=True)


if __name__ == "__main__":
    main()
