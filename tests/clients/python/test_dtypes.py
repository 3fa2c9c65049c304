"""bfloat16 and float16 slots through real agents (2 nodes x 2 trainers, codec none): every
trainer gets, bit for bit, the average the test computes in the agent's documented order (each
node's trainers summed in fp32 in rank order, the node sums added in node order, divided by the
trainers) and rounds to the slot's type by numpy, apart from the agent's code."""

import numpy as np

from shim_cluster import Cluster, reports, run_trainers
from trainers.dtype_trainer import ITERATIONS, TENSORS, bfloat16_bits, dtype_values, rounded


def widened(slot, dtype):
    """A slot's values (bfloat16 as its bits) in fp32, exactly."""
    if dtype == "bfloat16":
        return (np.asarray(slot, dtype=np.uint32) << 16).view(np.float32)
    return np.asarray(slot).astype(np.float32)


def expected_bits(it, key, n, dtype):
    trainers = [widened(rounded(dtype_values(rank, it, key, n), dtype), dtype) for rank in range(4)]
    node_sums = [trainers[0] + trainers[1], trainers[2] + trainers[3]]
    average = (node_sums[0] + node_sums[1]) * np.float32(0.25)
    if dtype == "bfloat16":
        return bfloat16_bits(average).tolist()
    if dtype == "float16":
        return average.astype(np.float16).view(np.uint16).tolist()
    return average.view(np.uint32).tolist()


def test_bfloat16_and_float16_slots_are_averaged_in_fp32_and_rounded_to_nearest_even(tmp_path):
    with Cluster(tmp_path, 2, ["--scheduler.slice_elements", "1024"]) as c:
        rep = reports(run_trainers(c, 2, "dtype_trainer.py"), c)
    for it in range(1, ITERATIONS + 1):
        for key, n, dtype in TENSORS:
            want = expected_bits(it, key, n, dtype)
            for rank, r in enumerate(rep):
                assert r["seen"][it - 1][str(key)] == want, (it, key, dtype, rank)
