"""gcagent.tensorflow with PyPI's tensorflow-cpu: 2 agents with 2 trainer processes each."""

import pytest

pytest.importorskip("tensorflow")

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402


def test_tape_and_keras_fit(tmp_path):
    with Cluster(tmp_path, 2, ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]) as c:
        rep = reports(run_trainers(c, 2, "tf_trainer.py", env={"TF_CPP_MIN_LOG_LEVEL": "2"}), c)
    for r in rep:
        # The tape with codec none: the reference average.
        assert max(r["tape"]["errors"]) < 2e-7, r
        # model.fit with 2bit trains.
        losses = r["fit"]["losses"]
        assert losses[-1] < 0.6 * losses[0], losses
    # broadcast_variables made the weights equal, and every step applied identical averages.
    assert len({r["fit"]["weight_sum"] for r in rep}) == 1, rep
