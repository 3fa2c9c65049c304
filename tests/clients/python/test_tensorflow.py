"""gcagent.tensorflow with PyPI's tensorflow-cpu: 2 agents with 2 trainer processes each."""

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_tape_and_keras_fit(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "tf_trainer.py", env={"TF_CPP_MIN_LOG_LEVEL": "2"}), c)
    for r in rep:
        # The tape with codec none: the reference average.
        assert max(r["tape"]["errors"]) < 2e-7, r
        # model.fit with 2bit trains.
        losses = r["fit"]["losses"]
        assert losses[-1] < 0.6 * losses[0], losses
    # broadcast_variables made the weights equal, and every step applied identical averages.
    assert len({r["fit"]["weight_sum"] for r in rep}) == 1, rep


def fp32_average(values):
    """What the agent returns for one element: the fp32 sum in world-rank order, divided once."""
    total = np.float32(0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return float(total / np.float32(len(values)))


def test_errors_horovod_names_metric_average_and_codec_warnings(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "tf_trainer.py", ["extras"], env={"TF_CPP_MIN_LOG_LEVEL": "2"}), c)
    # backward_passes_per_step=2 with SGD(1.0): the weights move on every second pass, by the
    # average over the 4 trainers of their two passes' sum (exact on this grid).
    given = np.array([r["passes"]["given"] for r in rep])  # [trainer][pass][element]
    step = [-(given[:, p] + given[:, p + 1]).mean(axis=0) for p in (0, 2)]
    want = [np.zeros(6), step[0], step[0], step[0] + step[1]]
    refused = ("gcagent: declare 6 tensors: the agent rejected the declare: invalid_argument: tensor 0: unknown codec "
               "'nosuch'")
    for rank, r in enumerate(rep):
        assert r["names"] == {"reducer": [rank, 4, rank % 2, 2], "module": [rank, 4, rank % 2, 2]}, r
        assert r["passes"]["reductions"] == [2], r["passes"]
        assert [list(w) for w in want] == r["passes"]["weights"], r["passes"]
        # MetricAverageCallback: every trainer's history holds the average of all trainers' logs.
        metrics = r["metrics"]
        assert sorted(metrics["averaged"]) == ["loss", "val_loss"], metrics
        for name, series in metrics["averaged"].items():
            assert series == [fp32_average([o["metrics"]["own"][e][name] for o in rep]) for e in range(2)], name
        assert r["momentum"] == [
            "gcagent: the dgc codec applies momentum 0.9 itself (momentum correction) and SGD has momentum 0.9: the "
            "gradient would see momentum twice. Either set the optimizer's momentum to 0 and give dgc the momentum "
            "(params {'momentum': '0.9'}), or set dgc's momentum to 0 (params {'momentum': '0'}) and keep the "
            "optimizer's."], r["momentum"]
        # Eagerly the agent's refusal is a GcagentError. Inside model.fit's tf.function TensorFlow
        # makes it a tf.errors.UnknownError that quotes it; agent_errors() gives it back.
        errors = r["errors"]
        assert errors["eager"]["type"] == "GcagentError" and errors["eager"]["message"].startswith(refused), errors
        assert errors["fit"]["type"] == "UnknownError", errors
        assert f"GcagentError: {refused}" in errors["fit"]["message"], errors
        assert errors["agent_errors"]["type"] == "GcagentError", errors
        assert errors["agent_errors"]["cause"] == "UnknownError", errors
        assert errors["agent_errors"]["message"] == errors["eager"]["message"], errors
    # The trainers computed different losses, so the average is not any one of them.
    assert len({r["metrics"]["own"][0]["loss"] for r in rep}) == 4, rep


def test_a_custom_loop_restarted_from_its_checkpoint_continues_with_its_residuals_bit_for_bit(tmp_path):
    """Model and optimizer through tf.train.Checkpoint, the reducer's state pickled beside them,
    every trainer and agent stopped, new ones started: every step equals the uninterrupted
    run's, bit for bit; without the reducer's state it does not."""
    runs = {}
    for phase in ("whole", "save", "resume", "forget"):
        (tmp_path / phase).mkdir()
        with Cluster(tmp_path / phase, 2, AGENT_ARGS) as c:
            args = ["checkpoint", phase, str(tmp_path)]
            runs[phase] = reports(run_trainers(c, 2, "tf_trainer.py", args, env={"TF_CPP_MIN_LOG_LEVEL": "2"}), c)
    steps = 8
    for rank in range(4):
        whole, saved, resumed, forgot = (runs[p][rank] for p in ("whole", "save", "resume", "forget"))
        assert saved["losses"] == whole["losses"][:steps], rank
        assert (saved["residual_keys"] > 0) == (rank % 2 == 0), saved  # local rank 0 keeps its node's
        assert resumed["losses"] == whole["losses"][steps:], (rank, resumed["losses"], whole["losses"])
        assert resumed["weights"] == whole["weights"], rank
        assert forgot["weights"] != whole["weights"], "without the residuals the restart must differ"
