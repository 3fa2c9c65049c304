"""A shim's step timeout against the agent's: the agent says its transport.reduction_timeout at
the hello, and a shim whose own timeout is shorter waits for the agent instead (with a
warning), so it never gives up a step the agent then completes into its memory."""

import pytest

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

pytest.importorskip("numpy")


def test_a_short_step_timeout_waits_for_the_agent_which_may_still_complete_the_step(tmp_path):
    with Cluster(tmp_path, 2, ["--transport.reduction_timeout", "4"]) as c:
        rep = reports(run_trainers(c, 1, "late_peer.py", timeout=120), c)
    for r in rep:
        assert r["agent_timeout_s"] == 4.0, r
        assert r["timeout_ms"] == 9000, r  # the agent's 4 s and the grace, not the 300 ms asked
        assert any("shorter than the agent's transport.reduction_timeout (4 s)" in w for w in r["warnings"]), r
        assert r["error"] is None, r  # the late peer's step completed
        assert r["result"] == 1.5, r  # (1 + 2) / 2
        assert r["sentinel_kept"], r  # nothing of that step wrote the slot afterwards
