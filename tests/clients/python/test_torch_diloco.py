"""gcagent.torch.diloco (Streaming DiLoCo's outer steps through the agents) against torchft's own
DiLoCo (torchft 0.2.0 from PyPI: torchft.local_sgd.DiLoCo with its Manager, lighthouse and gloo
process group), run here side by side on the same models and data: 2 agents with one trainer
each against 2 torchft replica groups of one rank."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchft")

from shim_cluster import (TRAINERS, Cluster, finish, reports, run_trainers, shim_env, start_trainers,  # noqa: E402
                          wait_for)

AGENT_ARGS = ["--compress.min_elements", "0"]


def torchft_report(*args):
    r = subprocess.run([sys.executable, str(TRAINERS / "torchft_diloco.py"), *args], env=shim_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("report: ")][-1][len("report: "):])


def test_streaming_diloco_steps_as_torchfts_own_mocked_regression_run(tmp_path):
    """torchft's DiLoCoMockedUpdateTest (torchft/diloco_regression_test.py) in all six of its
    configurations (2 fragments; fragment_sync_delay 0 and 1; fragment_update_alpha 0, 0.5 and 1):
    every parameter at each of its 16 recorded steps equals torchft's own run's."""
    reference = torchft_report("mocked")
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 1, "torch_diloco.py", ["mocked"]), c)
    for r, t in zip(rep, reference):
        assert r["history"] == t["history"]
    # The outer steps moved the parameters (not a run where nothing synced).
    assert rep[0]["history"]["0"]["15"] != rep[0]["history"]["0"]["14"]


@pytest.mark.parametrize("name", ["diloco", "streaming"])
def test_diloco_trains_as_torchfts_diloco_on_a_real_model(tmp_path, name):
    """An MLP, each replica on its own batches, 5 outer steps (streaming: 2 fragments, a delay of
    one step, alpha 0.5), uncompressed outer gradients: every parameter within fp32 rounding of
    torchft's run."""
    reference = torchft_report("train", name)
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 1, "torch_diloco.py", ["train", name, "none"]), c)
    for r, t in zip(rep, reference):
        assert r["failed_syncs"] == 0
        worst = max(abs(a - b) for p, q in zip(r["params"], t["params"]) for a, b in zip(p, q))
        assert worst < 1e-6, worst
    # Plain DiLoCo ends on an outer step: both replicas hold the same model. (Streaming's outer
    # steps keep half of each replica's local parameters: alpha 0.5.)
    if name == "diloco":
        assert rep[0]["params"] == rep[1]["params"]
    else:
        assert rep[0]["params"] != rep[1]["params"]


def test_compressed_outer_gradients_train_as_uncompressed(tmp_path):
    """The README's digits MLP (sync_every 20, each average overlapping 2 inner steps), 2 nodes:
    outer gradients in bf16 end within a point of test accuracy of the uncompressed run, and as
    the top 3% with error feedback (SparseLoCo's density) within 3 points, after 11 outer steps."""
    accuracy = {}
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        for codec, params in (("none", ""), ("bf16", ""), ("topk", "ratio=0.03")):
            rep = reports(finish(start_trainers(c, 1, "torch_diloco.py", ["digits", codec, params],
                                                job=f"digits-{codec}"), 240), c)
            assert all(r["failed_syncs"] == 0 and r["outer_steps"] == 11 for r in rep), rep
            accuracy[codec] = rep[0]["accuracy"]
    print("test accuracy:", accuracy)
    assert accuracy["none"] > 0.8, accuracy
    assert accuracy["bf16"] >= accuracy["none"] - 0.01, accuracy
    assert accuracy["topk"] >= accuracy["none"] - 0.03, accuracy


def test_a_job_restarted_from_a_checkpoint_continues_with_its_outer_state_bit_for_bit(tmp_path):
    """Plain DiLoCo with top-10% outer gradients (error feedback): train 3 outer steps, save model,
    inner optimizer and DiLoCo's state (global parameters, outer optimizer, residuals), stop
    everything, start new agents and trainers, load, train 3 more: every parameter equals the
    uninterrupted run's, bit for bit. Without the residuals the restart differs."""
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    runs = {}
    for phase in ("whole", "save", "resume", "forget"):
        (tmp_path / phase).mkdir()
        with Cluster(tmp_path / phase, 2, AGENT_ARGS) as c:
            runs[phase] = reports(run_trainers(c, 1, "torch_diloco.py",
                                               ["checkpoint", phase, "topk", "ratio=0.1", str(ckpt)]), c)
    for rank in range(2):
        whole, resumed, forgot = (runs[p][rank] for p in ("whole", "resume", "forget"))
        assert runs["save"][rank]["outer_steps"] == 3 and resumed["outer_steps"] == 6, (runs["save"], resumed)
        assert resumed["params"] == whole["params"], rank
        assert forgot["params"] != whole["params"], "without the residuals the restart must differ"


def _progress(directory, rank):
    path = directory / f"progress{rank}"
    return path.read_text().splitlines() if path.exists() else []


def _wait_progress(directory, rank, pattern, procs, timeout=180):
    """The first progress line of `rank` from now on that matches `pattern`, its match."""
    seen = len(_progress(directory, rank))
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = _progress(directory, rank)
        for line in lines[seen:]:
            m = re.match(pattern, line)
            if m:
                return m
        seen = len(lines)
        dead = [i for i, p in enumerate(procs) if p.poll() is not None]
        assert not dead, f"trainers {dead} ended: " + procs[dead[0]].stdout.read()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} from trainer {rank} within {timeout} s: {lines[-5:]}")


def test_a_node_leaves_and_another_joins_between_outer_steps(tmp_path):
    """Streaming DiLoCo (2 fragments, a delay of one step) on 3 nodes under
    transport.on_peer_loss = shrink. Node 2's agent and trainer are killed (SIGKILL): nodes 0 and 1
    go on, their outer steps averaged over the two of them. Node 2 is started again, a fresh
    trainer from its initial weights: it is taken in, receives the outer state (global parameters
    and the outer optimizer's momentum) from node 0 through the agents, and the three train on
    together. Every trainer ends with the same global parameters and momentum, bit for bit, and
    the digits accuracy of a run that lost nothing (within 5 points of 0.9)."""
    args = AGENT_ARGS + ["--transport.on_peer_loss", "shrink", "--transport.shrink_grace", "1"]
    with Cluster(tmp_path, 3, args) as c:
        procs = start_trainers(c, 1, "torch_diloco.py", ["elastic", str(tmp_path)])
        try:
            _wait_progress(tmp_path, 2, r"job=(\d+) nodes=\[0, 1, 2\]", procs)
            for _ in range(20):
                _wait_progress(tmp_path, 2, r"job=(\d+) nodes=\[0, 1, 2\]", procs)
            procs[2].kill()
            c.procs[2].kill()
            procs[2].wait()
            c.procs[2].wait()
            for _ in range(5):  # outer steps of the two survivors alone
                _wait_progress(tmp_path, 0, r"job=(\d+) nodes=\[0, 1\]", procs[:2])
            log = open(c.logs[2], "a")
            c.procs[2] = subprocess.Popen(c.agent_command(2), stdout=log, stderr=subprocess.STDOUT, env=c.env)
            wait_for(lambda: os.path.exists(c.sockets[2]), what="agent 2's socket")
            procs[2] = start_trainers(c, 1, "torch_diloco.py", ["elastic", str(tmp_path)], only=2)
            joined = int(_wait_progress(tmp_path, 0, r"job=(\d+) nodes=\[0, 1, 2\]", procs).group(1))
            (tmp_path / "stop").write_text(str(joined + 80))
            rep = reports(finish(procs, 240), c)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    print("elastic DiLoCo:", [(r["accuracy"], r["nodes_seen"], r["failed_syncs"], r["resyncs"], r["loaded"])
                              for r in rep])
    # One broadcast after the node left (the survivors may have diverged: a step in flight at the
    # change can complete on one node and fail on the other), one after it joined.
    assert [r["resyncs"] for r in rep] == [2, 2, 1], rep
    assert rep[0]["loaded"] == 0 and rep[2]["loaded"] == 1, rep
    assert [0, 1] in rep[0]["nodes_seen"] and rep[0]["nodes_seen"][-1] == [0, 1, 2], rep[0]["nodes_seen"]
    assert rep[2]["nodes_seen"][-1] == [0, 1, 2]
    assert rep[0]["job_iteration"] == rep[1]["job_iteration"] == rep[2]["job_iteration"]
    assert rep[0]["global"] == rep[1]["global"] == rep[2]["global"]
    assert rep[0]["momentum"] == rep[1]["momentum"] == rep[2]["momentum"]
    assert min(r["accuracy"] for r in rep) > 0.85, rep


def test_the_language_model_benchmarks_worker_trains_through_the_agents(tmp_path):
    """bench/diloco/worker.py (the DiLoCo benchmark's trainer: the byte-level transformer on the
    standard library's sources), 2 nodes, int8 outer gradients, streaming with 2 fragments: 8
    inner steps, 4 outer steps (2 per fragment), none failed, and a validation loss below the untrained
    model's (ln 256 nats per byte)."""
    bench = TRAINERS.parents[3] / "bench" / "diloco"
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        procs = []
        for r in range(2):
            env = shim_env({"GCAGENT_SOCKET": c.sockets[r], "GCAGENT_JOB": "lm", "GCAGENT_LOCAL_RANK": "0",
                            "GCAGENT_LOCAL_SIZE": "1", "RANK": str(r), "WORLD_SIZE": "2"})
            env["PYTHONPATH"] += os.pathsep + str(bench)
            procs.append(subprocess.Popen([sys.executable, str(bench / "worker.py"), "--system", "diloco",
                                           "--steps", "8", "--sync-every", "4", "--fragments", "2", "--delay", "1",
                                           "--codec", "int8"], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        results = finish(procs, 300)
    assert all(rc == 0 for rc, _ in results), [out[-3000:] for _, out in results]
    for _, out in results:
        r = json.loads([ln for ln in out.splitlines() if ln.startswith("result: ")][-1][len("result: "):])
        assert r["outer_steps"] == 4 and r["failed_syncs"] == 0, r
        assert r["val_loss"] < 5.545, r


def test_the_hyperparameter_sweep_runs_both_modes():
    """bench/diloco/sweep.py (DiLoCo and DDP simulated in one process, the benchmark's model and
    data): a few steps of each, a cosine schedule with warm-up, a validation loss below the
    untrained model's."""
    bench = TRAINERS.parents[3] / "bench" / "diloco"
    for mode in ("diloco", "ddp"):
        out = subprocess.run([sys.executable, str(bench / "sweep.py"), "--mode", mode, "--steps", "6", "--sync-every",
                              "3", "--workers", "2", "--lr", "3e-3", "--schedule", "cosine", "--warmup", "2",
                              "--evals", "2"], capture_output=True, text=True, timeout=300, cwd=bench)
        assert out.returncode == 0, out.stderr[-3000:]
        r = json.loads(out.stdout.splitlines()[-1])
        assert [s for s, _ in r["val_loss"]] == [3, 6], r
        assert r["val_loss"][-1][1] < 5.545, r


def test_a_frozen_agent_fails_outer_steps_and_the_nodes_take_turns_alike_after(tmp_path):
    """Streaming DiLoCo (2 fragments) on 2 nodes, transport.on_peer_loss = fail: agent 1 is
    stopped (SIGSTOP) for 8 s, past the peer timeout (2 s). Node 0's outer steps fail at once
    while it is away. After it resumes, the trainers' counts of outer steps differ, but both take
    each turn by the job's iteration: their outer steps succeed again, on both nodes in the same
    job iterations. The step in flight at the freeze completes on both nodes or on neither."""
    args = AGENT_ARGS + ["--transport.peer_timeout", "2", "--transport.heartbeat_interval", "0.2"]
    with Cluster(tmp_path, 2, args) as c:
        procs = start_trainers(c, 1, "torch_diloco.py", ["elastic", str(tmp_path)],
                               env={"DILOCO_NODES": "2"})
        try:
            for _ in range(20):
                _wait_progress(tmp_path, 1, r"job=(\d+) nodes=\[0, 1\]", procs)
            c.procs[1].send_signal(signal.SIGSTOP)
            _wait_progress(tmp_path, 0, r"failed job=(\d+)", procs)
            time.sleep(8.0)
            c.procs[1].send_signal(signal.SIGCONT)
            back = int(_wait_progress(tmp_path, 1, r"job=(\d+) nodes=\[0, 1\]", procs).group(1))
            (tmp_path / "stop").write_text(str(back + 40))
            rep = reports(finish(procs, 240), c)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            if c.procs[1].poll() is None:
                c.procs[1].send_signal(signal.SIGCONT)
    done = [{int(m) for m in re.findall(r"^job=(\d+) ", "\n".join(_progress(tmp_path, r)), re.M)} for r in (0, 1)]
    print("frozen agent under DiLoCo:", [(r["failed_syncs"], r["accuracy"]) for r in rep],
          "outer steps only one node completed:", sorted(done[0] ^ done[1]))
    assert rep[0]["failed_syncs"] > 0, rep
    after = {j for j in done[0] if j > back}
    assert len(after) >= 30 and after <= done[1], (sorted(after), sorted(done[1]))
    assert rep[0]["job_iteration"] == rep[1]["job_iteration"]
    # The step in flight at the freeze: node 0 gave it up; agent 1, resumed, found node 0's
    # results waiting but asked first (agent/engine/stall_reconcile.cc), so it failed there too.
    # Every outer step completed on both nodes or on neither, and the global parameters agree.
    assert not done[0] ^ done[1], sorted(done[0] ^ done[1])
    assert rep[0]["global"] == rep[1]["global"]
