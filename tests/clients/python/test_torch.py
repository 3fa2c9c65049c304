"""gcagent.torch with PyPI's torch on the CPU: 2 agents with 2 trainer processes each."""

import json
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, finish, read_until, reports, run_trainers, start_trainers  # noqa: E402

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
        assert exact["agent_buckets"] == [0, 0, 0] + [len(exact["declared"])] * 5, exact
        assert len(exact["declared"]) >= 3, exact
        # DDP's default buckets are not views: copied into their slots and back at every step.
        assert exact["moved"] == 0 and exact["copied"] == 5 * len(exact["declared"]), exact
        # gradient_as_bucket_view=True: each bucket moved into its slot once, at the first step
        # through the agent; from then on every gradient lives there, whether zero_grad set it
        # to None (DDP copies autograd's new gradient into the moved bucket) or zeroed it.
        views = r["views"]
        assert views["agent_buckets"] == exact["agent_buckets"], views
        assert views["moved"] == len(views["declared"]) and views["copied"] == 0, views
        assert views["in_slots"] == [False] * 3 + [True] * 5, views
        assert max(views["errors"]) < 2e-7, views
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
        assert opt["in_slots"] == [True] * 4, opt  # the gradients live in the agent's slots
        # A bfloat16 model: its buckets live in bfloat16 slots, averaged in fp32 by the agent and
        # rounded once: bit for bit the reference from the fourth step on (the first three learn).
        bf16 = r["bf16"]
        assert bf16["slot_dtypes"] == ["torch.bfloat16"] and bf16["in_slots"], bf16
        assert bf16["agent_buckets"][:3] == [0, 0, 0] and min(bf16["agent_buckets"][3:]) >= 2, bf16
        assert bf16["exact"][3:] == [True] * 3, bf16
        assert bf16["moved"] == bf16["agent_buckets"][3], bf16
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
        assert exact["agent_buckets"] == [0, 0, 0] + [len(exact["declared"])] * 5, exact
        assert max(exact["errors"]) < 1e-5, exact  # the GPU's float32 against the CPU's float64
        assert train["last_loss"] < 0.6 * train["first_loss"], train
        assert train["agent_buckets"] >= 2 * 30, train
    assert len({r["train"]["param_sum"] for r in rep}) == 1, rep
    assert all(s > 0 for s in sent), sent


def test_a_lost_agent_fails_the_futures_instead_of_hanging(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        procs = start_trainers(c, 2, "torch_trainer.py", ["ddp-agent-dies"])
        read_until(procs[0], "active")  # its buckets go through the agent: agent 1 is killed
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


RECOVERY_FLAGS = ["--transport.peer_timeout", "2", "--transport.heartbeat_interval", "0.2"]
RECOVERY_STEPS = 800
FSDP_RECOVERY_STEPS = 300  # an FSDP2 step costs more here (the node's gloo collectives)


def train_digits(tmp_path, stop_agent_for=0.0, kill_agent_for=0.0, fsdp=False, steps=RECOVERY_STEPS, pace_ms=40):
    """2 agents x 2 DDP trainers with gcagent's hook on the digits MLP (trainers/
    torch_recovery.py, which catches gcagent's errors and goes on); optionally agent 1 stopped
    (SIGSTOP) for that many seconds once trainer 0 has made 60 steps, or killed (SIGKILL) and
    started again that many seconds later. Steps are paced (pace_ms each at least) so that a
    fault lands mid-run; an uninterrupted run needs no pace. Every trainer's output, drained as
    it comes (a full pipe would stop a trainer), and the agents' logs."""
    tmp_path.mkdir()
    with Cluster(tmp_path, 2, RECOVERY_FLAGS) as c:
        procs = start_trainers(c, 2, "torch_recovery.py", ["--steps", str(steps), "--pace-ms", str(pace_ms)] +
                               (["--fsdp"] if fsdp else []))
        outs = [[] for _ in procs]
        drains = [threading.Thread(target=lambda p=p, o=o: o.extend(p.stdout), daemon=True)
                  for p, o in zip(procs, outs)]
        for t in drains:
            t.start()
        if stop_agent_for or kill_agent_for:
            deadline = time.time() + 300
            while not any(line.startswith("step=60 ok") for line in list(outs[0])) and time.time() < deadline:
                time.sleep(0.05)
        if stop_agent_for:
            c.procs[1].send_signal(signal.SIGSTOP)
            time.sleep(stop_agent_for)
            c.procs[1].send_signal(signal.SIGCONT)
        if kill_agent_for:
            c.procs[1].send_signal(signal.SIGKILL)
            c.procs[1].wait()
            time.sleep(kill_agent_for)
            with open(c.logs[1], "a") as log:
                c.procs[1] = subprocess.Popen(c.agent_command(1), stdout=log, stderr=subprocess.STDOUT, env=c.env)
        for p in procs:
            try:
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in drains:
            t.join(timeout=10)
        logs = [c.log(r) for r in range(c.n)]
    return ["".join(o) for o in outs], logs


def digits_reports(outs):
    found = [re.findall(r"^report: (.*)$", out, re.M) for out in outs]
    assert all(found), [out[-1500:] for out in outs]
    return [json.loads(f[-1]) for f in found]


@pytest.fixture(scope="module")
def digits_baseline(tmp_path_factory):
    """The uninterrupted run's reports (its exact sums make it the same every time, paced or not)."""
    clean, _ = train_digits(tmp_path_factory.mktemp("digits") / "clean", pace_ms=0)
    baseline = digits_reports(clean)
    assert all(r["failed"] == 0 for r in baseline), baseline
    return baseline


def assert_recovered(outs, baseline, total=RECOVERY_STEPS, points=1.0):
    """The trainers failed steps while a peer was away, every step succeeds again from a few
    steps after it came back, and the model ends within `points` of an uninterrupted run's."""
    rep = digits_reports(outs)
    felt = 0
    for out, r in zip(outs, rep):
        steps = re.findall(r"^step=(\d+) (ok|failed)(.*)$", out, re.M)
        assert len(steps) == total, out[-1500:]
        assert r["failed"] < total // 2, r
        # The trainers beside the agent that was away number their steps behind the others
        # after the realignment: their last steps fail once the others finished (from the first
        # "... left" on). Before that, every step succeeds from soon after the fault.
        end = next((i for i, (_, how, why) in enumerate(steps) if how == "failed" and "left" in why), len(steps))
        fault = [i for i, (_, how, _) in enumerate(steps[:end]) if how == "failed"]
        failures = "\n".join(f"step {steps[i][0]}:{steps[i][2][:200]}" for i in fault[-5:])
        felt += bool(fault)
        if fault:  # (a trainer beside a stopped agent may have waited through it instead)
            assert fault[-1] < total // 2, failures
            assert end - fault[-1] > total // 3, (end, failures)
    assert felt >= 2, "the healthy node's trainers must have failed steps while the peer was away"
    # A step given up on one node may have completed on the other (the stopped agent's results
    # were on their way): every trainer loaded node 0's weights after the next step, so all
    # four end with one model, bit for bit.
    assert all(r["resyncs"] >= 1 for r in rep), rep
    assert len({r["model"] for r in rep}) == 1, rep
    assert abs(rep[0]["accuracy"] - baseline[0]["accuracy"]) <= points, (rep, baseline)
    return rep


def test_ddp_training_recovers_after_a_stopped_peer_agent(tmp_path, digits_baseline):
    """The digits MLP through a peer agent stopped past the peer timeout: the trainers fail the
    steps meanwhile (caught, as a training loop does), the nodes realign once it resumes, every
    step succeeds again from a few steps later, and the model ends within 1 point of an
    uninterrupted run's."""
    outs, logs = train_digits(tmp_path / "stopped", stop_agent_for=5.0)
    assert "realigned" in logs[1], logs[1][-3000:]
    assert_recovered(outs, digits_baseline)


def test_ddp_training_recovers_after_a_killed_agent_restarts(tmp_path, digits_baseline):
    """Agent 1 killed (SIGKILL) and started again 2 s later: its trainers' hooks connect to the
    new agent and declare their buckets again, and training goes on as after a stop."""
    outs, logs = train_digits(tmp_path / "killed", kill_agent_for=2.0)
    rep = assert_recovered(outs, digits_baseline)
    assert [r["reconnects"] for r in rep] == [0, 0, 1, 1], (rep, [out[-1500:] for out in outs[2:]])
    assert "joined job 'job'" in logs[1].rsplit("accepting trainers", 1)[-1], logs[1][-3000:]  # the new agent's


@pytest.fixture(scope="module")
def fsdp_baseline(tmp_path_factory):
    """The uninterrupted FSDP2 run's reports."""
    clean, _ = train_digits(tmp_path_factory.mktemp("fsdp") / "clean", fsdp=True, steps=FSDP_RECOVERY_STEPS, pace_ms=0)
    baseline = digits_reports(clean)
    assert all(r["failed"] == 0 for r in baseline), baseline
    return baseline


def test_fsdp_training_recovers_after_a_killed_agent_restarts(tmp_path, fsdp_baseline):
    """The same MLP under FSDP2, sharded over each node's two trainers, with
    gcagent.torch.fsdp.hsdp across the nodes: agent 1 killed and started again 2 s later, its
    trainers connect to the new agent and declare their shards again, and the model ends within
    3 points of an uninterrupted run's of as many steps, the same on both nodes."""
    outs, logs = train_digits(tmp_path / "fsdp-killed", kill_agent_for=2.0, fsdp=True, steps=FSDP_RECOVERY_STEPS)
    # The 2 s away cost node 0's trainers every 40 ms step meanwhile (47 of 300 in one run with
    # one thread per trainer: 1.6 points below the uninterrupted run), as for the stopped agent.
    rep = assert_recovered(outs, fsdp_baseline, FSDP_RECOVERY_STEPS, points=3.0)
    assert [r["reconnects"] for r in rep] == [0, 0, 1, 1], (rep, [out[-1500:] for out in outs[2:]])
    assert "joined job 'job'" in logs[1].rsplit("accepting trainers", 1)[-1], logs[1][-3000:]


def test_fsdp_training_recovers_after_a_stopped_peer_agent(tmp_path, fsdp_baseline):
    """FSDP2 with agent 1 stopped (SIGSTOP) past the peer timeout: node 0's trainers fail the
    steps meanwhile, the nodes realign once it resumes, and training goes on to a model within 3
    points of the uninterrupted run's, the same on both nodes."""
    outs, logs = train_digits(tmp_path / "fsdp-stopped", stop_agent_for=5.0, fsdp=True, steps=FSDP_RECOVERY_STEPS)
    assert "realigned" in logs[1], logs[1][-3000:]
    # A stop costs the healthy node's trainers every step it lasts (44 of 300 in one run, more
    # on a loaded machine): 3 points, where the killed agent's run (its trainers fail at once,
    # and realign sooner) keeps to 1.
    assert_recovered(outs, fsdp_baseline, FSDP_RECOVERY_STEPS, points=3.0)


def test_ddp_restarted_from_a_checkpoint_continues_with_its_residuals_bit_for_bit(tmp_path):
    """The DDP hook's state saved with torch.save beside model and optimizer, every trainer and
    agent stopped, new ones started: the restart's first step already goes through the agents
    (the buckets declared as saved), and every step equals the uninterrupted run's, bit for
    bit, when DDP keeps its first buckets (find_unused_parameters=True). Without the hook's state
    it differs (the check can fail). Where DDP rebuilds its buckets after the first step (the
    default), the restart's first buckets differ from the saved ones (the hook compares the
    parameters' shapes in order): it learns them again, as at the start."""
    runs = {}
    for phase, model in (("whole", "kept"), ("save", "kept"), ("resume", "kept"), ("forget", "kept"),
                         ("save", "rebuilt"), ("resume", "rebuilt")):
        (tmp_path / f"{phase}-{model}").mkdir()
        with Cluster(tmp_path / f"{phase}-{model}", 2) as c:
            args = ["checkpoint", phase, model, str(tmp_path)]
            runs[phase, model] = reports(run_trainers(c, 2, "torch_trainer.py", args), c)
    steps = 10
    for rank in range(4):
        whole, saved, resumed, forgot = (runs[p, "kept"][rank] for p in ("whole", "save", "resume", "forget"))
        assert saved["losses"] == whole["losses"][:steps], rank
        # Local rank 0 keeps its node's residuals; the others the step and the buckets.
        assert (saved["residual_bytes"] > 0) == (rank % 2 == 0), saved
        assert resumed["fallback"] == 0 and resumed["dropped"] == 0, resumed
        assert resumed["losses"] == whole["losses"][steps:], (rank, resumed["losses"], whole["losses"])
        assert resumed["params"] == whole["params"], rank
        assert forgot["params"] != whole["params"], "without the residuals the restart must differ"
        relearnt, before = runs["resume", "rebuilt"][rank], runs["save", "rebuilt"][rank]
        assert relearnt["fallback"] == before["fallback"] > 0, (before, relearnt)  # two steps, as at the start
        assert relearnt["agent_buckets"] == before["agent_buckets"], (before, relearnt)
