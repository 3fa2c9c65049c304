"""gcagent.torch with PyPI's torch on the CPU: 2 agents with 2 trainer processes each."""

import signal
import time

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, finish, reports, run_trainers, start_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_ddp_hook_with_none_gives_the_reference_average(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS + ["--compress.codec", "none"]) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["ddp-exact"]), c)
    for r in rep:
        # The first two iterations learn DDP's buckets (it rebuilds them after the first);
        # from the third on every bucket goes through the agent.
        assert r["agent_buckets"][:2] == [0, 0], r
        assert all(n == len(r["declared"]) for n in r["agent_buckets"][2:]), r
        assert len(r["declared"]) >= 3, r
        assert max(r["errors"]) < 2e-7, r
    assert all(r["declared"] == rep[0]["declared"] for r in rep)


def test_ddp_hook_trains_with_2bit(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["ddp-train"],
                                   env={"GCAGENT_CODEC": "2bit", "GCAGENT_CODEC_PARAMS": "threshold=0.01"}), c)
    for r in rep:
        assert r["last_loss"] < 0.6 * r["first_loss"], r
    # Every trainer applied identical averaged gradients.
    assert len({r["param_sum"] for r in rep}) == 1, rep
    done = [line for line in c.log(0).splitlines() if "done:" in line][0]
    assert float(done.split("(ratio ")[1].split(")")[0]) > 8, done


def test_distributed_optimizer_broadcasts_and_averages(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS + ["--compress.codec", "none"]) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["optimizer-exact"]), c)
    for r in rep:
        assert r["broadcast_exact"], r
        assert max(r["errors"]) < 2e-7, r


def test_a_lost_agent_fails_the_futures_instead_of_hanging(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        procs = start_trainers(c, 2, "torch_trainer.py", ["ddp-agent-dies"])
        # Wait until a trainer reports that its buckets go through the agent, then kill agent 1.
        deadline = time.time() + 120
        first = procs[0]
        line = ""
        while time.time() < deadline and "active" not in line:
            line = first.stdout.readline()
            assert line or first.poll() is None, "trainer 0 ended early"
        assert "active" in line
        c.procs[1].send_signal(signal.SIGKILL)
        killed = time.time()
        results = finish(procs, 100)
        elapsed = time.time() - killed
    rep = reports(results)
    for r in rep:
        assert r["raised"], r
        assert "gcagent" in r["raised"], r
    assert elapsed < 90
