"""fp16 mixed precision's overflow steps through gcagent, against DDP over gloo in the same
run: real torch.amp.GradScaler, 2 agents with one trainer each, rank 0's gradient overflowing
at two steps (one element, then the whole loss). Every codec must give what DDP gives: the
same skipped steps, the same scale sequence, no NaN afterwards, identical ranks."""

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]
HOOK_CODECS = ["none", "2bit", "fp8", "int4", "dgc"]
OPTIMIZER_CODECS = ["2bit:optimizer", "fp8:optimizer"]


def test_overflow_steps_pass_through_as_under_ddp(tmp_path):
    runs = ["gloo", *HOOK_CODECS, *OPTIMIZER_CODECS]
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 1, "torch_overflow.py", runs, timeout=400), c)
        c.stop()
    ddp = rep[0]["gloo"]
    # The reference itself: both overflows seen by every rank, skipped, the scale halved.
    assert ddp["non_finite"][5] and ddp["non_finite"][9], ddp
    assert ddp["skipped"][5] and ddp["skipped"][9], ddp
    assert ddp["scales"][5] == ddp["scales"][4] / 2, ddp
    for name in runs:
        for r, report in enumerate(rep):
            got = report[name]
            assert got["non_finite"] == ddp["non_finite"], (name, r, got, ddp)
            assert got["skipped"] == ddp["skipped"], (name, r, got, ddp)
            assert got["scales"] == ddp["scales"], (name, r, got, ddp)
            assert not got["later_nan"] and got["params_finite"], (name, r, got)
        assert rep[0][name]["param_sum"] == rep[1][name]["param_sum"], (name, rep[0][name], rep[1][name])
