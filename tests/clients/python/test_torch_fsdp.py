"""gcagent.torch.fsdp with PyPI's torch on the CPU: FSDP2 sharded inside each node over gloo,
the agents between the nodes (2 agents with 2 trainer processes each)."""

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_hsdp_through_the_agent_equals_fsdp2s_own_hsdp(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_fsdp.py", ["suite"]), c)
    for r in rep:
        # PyTorch's own test of the all-reduce hook, with its expected gradients.
        assert r["ported"] == {"hook_called": True, "out_proj": True, "in_proj": True}, r["ported"]
        # Every step bit for bit FSDP2's HSDP over gloo (2 trainers per node: the order of a
        # sum of two does not matter), including the steps that accumulate gradients.
        parity = r["parity"]
        assert parity["equal"] == [True] * 24, parity
        assert parity["modules"] == 3, parity  # two blocks and the root (embeddings, norm, head)
        assert parity["shards"] == 24 * 3, parity
        # The second backward pass of each accumulating pair reads the gradients FSDP keeps.
        assert parity["waited_in_hook"] == 2 * 3, parity
        assert parity["last_loss"] < parity["first_loss"], parity
        assert r["unused"]["error"] is not None and "set_reduce_scatter_unused_params(True)" in r["unused"]["error"], r
