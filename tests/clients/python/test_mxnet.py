"""gcagent.mxnet with PyPI's mxnet 1.9.1: 2 agents with 2 trainer processes each."""

import pytest

pytest.importorskip("mxnet")

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402


AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_pushpull_and_gluon_trainer(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "mxnet_trainer.py"), c)
        c.stop()
        ratio = [float(l.split("(ratio ")[1].split(")")[0]) for l in c.log(0).splitlines() if "done:" in l][0]
    assert sorted(r["pushpull"]["rank"] for r in rep) == [0, 1, 2, 3]
    for r in rep:
        pp, g = r["pushpull"], r["gluon"]
        # pushpull with codec none: the exact sum over the 4 trainers, as dist_sync gives.
        assert pp["num_workers"] == 4 and max(pp["errors"]) == 0.0, pp
        assert pp["broadcast_exact"], pp
        # MXNet's compression parameters map onto the 2bit codec, and the Trainer trains.
        assert (g["codec"], g["params"], g["aggregation"]) == ("2bit", {"threshold": "0.5"}, "mxnet"), g
        assert g["last_loss"] < 0.6 * g["first_loss"], g
    # The Trainer's broadcast made the weights equal, and every step applied identical sums.
    assert len({r["gluon"]["weight_sum"] for r in rep}) == 1, rep
    # Under MXNet's aggregation the contributions travel 2bit (16x smaller) and the sums
    # uncompressed, so 2 nodes move at most about 1.9x fewer bytes than raw.
    assert 1.2 < ratio < 1.95, ratio


def test_errors_who_is_who_and_codec_warnings(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "mxnet_trainer.py", ["extras"]), c)
    head = "gcagent: declare 5 tensors: the agent rejected the declare: invalid_argument: tensor 0: "
    for rank, r in enumerate(rep):
        assert r["names"] == {"store": [rank, 4, rank % 2, 2], "reducer": [rank, 4, rank % 2, 2]}, r
        # dgc with the Trainer's sgd momentum: one warning over three steps.
        assert r["momentum"] == [
            "gcagent: the dgc codec applies momentum 0.9 itself (momentum correction) and SGD has momentum 0.9: the "
            "gradient would see momentum twice. Either set the optimizer's momentum to 0 and give dgc the momentum "
            "(params {'momentum': '0.9'}), or set dgc's momentum to 0 (params {'momentum': '0'}) and keep the "
            "optimizer's."], r["momentum"]
        # Trainer.step raises the agent's refusal as gcagent.GcagentError (4 weights, broadcast on
        # keys of their own, and the first gradient are declared together).
        codec, param = r["errors"]["codec"], r["errors"]["param"]
        assert codec["type"] == param["type"] == "GcagentError" and codec["code"] == param["code"] == 5, r
        assert codec["message"].startswith(head + "unknown codec 'nosuch'"), codec
        assert param["message"].startswith(head + "codec 'dgc': parameter 'ratio'"), param


def test_gluon_trainer_restarted_from_its_states_continues_with_its_residuals_bit_for_bit(tmp_path):
    """Trainer.save_states and save_parameters per trainer, every trainer and agent stopped, new
    ones started: every step equals the uninterrupted run's, bit for bit. Loading MXNet's part
    of the states alone (its own format, which the store still reads) does not."""
    runs = {}
    for phase in ("whole", "save", "resume", "forget"):
        (tmp_path / phase).mkdir()
        with Cluster(tmp_path / phase, 2, AGENT_ARGS) as c:
            runs[phase] = reports(run_trainers(c, 2, "mxnet_trainer.py", ["checkpoint", phase, str(tmp_path)]), c)
    steps = 10
    for rank in range(4):
        whole, saved, resumed, forgot = (runs[p][rank] for p in ("whole", "save", "resume", "forget"))
        assert saved["losses"] == whole["losses"][:steps], rank
        # 2 layers x (weight, bias), their gradients and their init broadcasts: on local rank 0.
        assert saved["residual_keys"] == (8 if rank % 2 == 0 else 0), saved
        assert resumed["losses"] == whole["losses"][steps:], (rank, resumed["losses"], whole["losses"])
        assert resumed["weights"] == whole["weights"], rank
        assert forgot["weights"] != whole["weights"], "without the residuals the restart must differ"
