"""gcagent.torch with PyPI's torch on the CPU: 2 agents with 2 trainer processes each."""

import re
import signal
import time
import urllib.request

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, finish, reports, run_trainers, start_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_ddp_hook_and_distributed_optimizer(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["suite"]), c)
        c.stop()
        ratio = [float(l.split("(ratio ")[1].split(")")[0]) for l in c.log(0).splitlines() if "done:" in l][0]
    for r in rep:
        exact, train, opt = r["exact"], r["train"], r["optimizer"]
        # The hook learns DDP's buckets until two iterations agree: DDP rebuilds them after
        # the first, so iterations 1-3 go through the process group, and from then on every
        # bucket goes through the agent. With codec none the result is the reference average.
        assert exact["agent_buckets"] == [0, 0, 0] + [len(exact["declared"])] * 3, exact
        assert len(exact["declared"]) >= 3, exact
        # Priorities follow the layers: the bucket holding the first layer goes first.
        firsts = exact["first_param_by_priority"]
        assert firsts[0] == 0 and firsts == sorted(firsts), exact
        assert max(exact["errors"]) < 2e-7, exact
        # 2bit through the hook still trains.
        assert train["last_loss"] < 0.6 * train["first_loss"], train
        assert train["agent_buckets"] >= 2 * 30, train  # 2 buckets, 37 of 40 iterations
        # DistributedOptimizer: the broadcast gives rank 0's weights, the gradients the average.
        assert opt["broadcast_exact"], opt
        assert max(opt["errors"]) < 2e-7, opt
    assert all(r["exact"]["declared"] == rep[0]["exact"]["declared"] for r in rep)
    # Every trainer applied identical averaged gradients.
    assert len({r["train"]["param_sum"] for r in rep}) == 1, rep
    # The 2bit job's bytes shrank on the wire (the none jobs count at ratio 1).
    assert ratio > 1.5, ratio


def test_ddp_hook_with_cuda_buckets_takes_the_device_path(tmp_path):
    """The same DDP parts with the models on GPU 0: the hook copies each bucket into its device
    slot, the agent sums, codes and averages it on the GPU, and the results match the CPU's."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no GPU: the device path needs one (and PyTorch with CUDA)")
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["suite-cuda"]), c)
        sent = []
        for rank in range(2):
            text = urllib.request.urlopen(f"http://{c.metrics_address(rank)}/metrics", timeout=5).read().decode()
            sent.append(float(re.search(r'gcagent_gpu_copy_bytes_total\{direction="sent"\} (\S+)', text).group(1)))
    for r in rep:
        exact, train = r["exact"], r["train"]
        assert exact["device"] == train["device"] == "cuda:0", r
        assert exact["agent_buckets"] == [0, 0, 0] + [len(exact["declared"])] * 3, exact
        assert max(exact["errors"]) < 1e-5, exact  # the GPU's float32 against the CPU's float64
        assert train["last_loss"] < 0.6 * train["first_loss"], train
        assert train["agent_buckets"] >= 2 * 30, train
    assert len({r["train"]["param_sum"] for r in rep}) == 1, rep
    assert all(s > 0 for s in sent), sent


def test_a_lost_agent_fails_the_futures_instead_of_hanging(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        procs = start_trainers(c, 2, "torch_trainer.py", ["ddp-agent-dies"])
        # Wait until a trainer reports that its buckets go through the agent, then kill agent 1.
        deadline = time.time() + 300
        first = procs[0]
        line = ""
        while time.time() < deadline and "active" not in line:
            line = first.stdout.readline()
            assert line or first.poll() is None, "trainer 0 ended early"
        assert "active" in line
        c.procs[1].send_signal(signal.SIGKILL)
        results = finish(procs, 240)
    rep = reports(results)
    # Trainers on the dead agent's node see the socket close; the others see their agent
    # fail the reduction (peer lost, or a local trainer left), or at worst the hook's timeout.
    for r in rep:
        assert r["type"] == "GcagentError" and r["raised"].startswith("gcagent: "), rep


def test_errors_horovod_names_and_codec_warnings(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_trainer.py", ["extras"]), c)
    refused = "the agent rejected the declare: invalid_argument: tensor 0: unknown codec 'nosuch'"
    for rank, r in enumerate(rep):
        # Horovod's names, on a Reducer and as gcagent.torch's functions: 2 nodes x 2 trainers.
        assert r["names"] == {"reducer": [rank, 4, rank % 2, 2], "module": [rank, 4, rank % 2, 2]}, r
        # backward_passes_per_step=2: one reduction of the two passes' sum; a third pass raises.
        passes = r["passes"]
        assert passes["error"] < 5e-7 and passes["reductions"] == [1], passes
        assert passes["third"] == {"type": "ValueError", "code": None, "message": (
            "gcagent: gradients were computed more than backward_passes_per_step=2 times before step(); raise "
            "backward_passes_per_step to accumulate them locally")}, passes
        # dgc with momentum 0.9 meets SGD's momentum: one warning per optimizer and hook.
        momentum = r["momentum"]
        assert momentum["ddp_agent_buckets"] > 0, momentum
        assert momentum["warnings"] == [
            f"gcagent: the dgc codec applies momentum 0.9 itself (momentum correction) and SGD has momentum {m}: "
            "the gradient would see momentum twice. Either set the optimizer's momentum to 0 and give dgc the "
            f"momentum (params {{'momentum': '{m}'}}), or set dgc's momentum to 0 (params {{'momentum': '0'}}) "
            "and keep the optimizer's." for m in ("0.9", "0.5")], momentum
        # An agent error is gcagent.GcagentError with the agent's message, in the optimizer and
        # through DDP's backward() alike (declaring 8 parameters, or DDP's buckets).
        errors = r["errors"]
        assert errors["optimizer"]["type"] == errors["ddp"]["type"] == "GcagentError", errors
        assert errors["optimizer"]["code"] == errors["ddp"]["code"] == 5, errors
        assert errors["optimizer"]["message"].startswith(f"gcagent: declare 8 tensors: {refused}"), errors
        assert errors["ddp"]["message"].startswith("gcagent: declare "), errors
        assert refused in errors["ddp"]["message"], errors
    # The last trainer leaves once the buckets go through the agent; each other trainer's next
    # backward() raises the GcagentError its agent reported, not DDP's RuntimeError.
    assert rep[3]["leaves"]["left"] and rep[3]["leaves"]["agent_buckets"] > 0, rep[3]
    for r in rep[:3]:
        raised = r["leaves"]["raised"]
        assert raised and raised["type"] == "GcagentError", r["leaves"]
        assert raised["message"].startswith("gcagent: ") and "trainer local rank 1 of job 'left' left" in \
            raised["message"], raised
