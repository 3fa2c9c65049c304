"""Learning rate 0 leaves every weight bit for bit as rank 0 started it, in each framework
whose venv runs this file (2 agents with 2 trainers each, the agents' default flags)."""

import importlib.util

import pytest

from shim_cluster import Cluster, reports, run_trainers

FRAMEWORKS = [f for f in ("torch", "tensorflow", "mxnet") if importlib.util.find_spec(f) is not None]


@pytest.mark.parametrize("framework", FRAMEWORKS or [pytest.param("none", marks=pytest.mark.skip("no framework"))])
def test_learning_rate_zero_changes_no_weight(tmp_path, framework):
    with Cluster(tmp_path, 2) as c:
        rep = reports(run_trainers(c, 2, "frozen_weights.py", [framework], env={"TF_CPP_MIN_LOG_LEVEL": "2"}), c)
    root = next(r for r in rep if r["rank"] == 0)
    assert len({r["first"] for r in rep}) == len(rep), "the trainers should start apart"
    assert [r["rank"] for r in rep if r["last"] != root["first"]] == [], rep
