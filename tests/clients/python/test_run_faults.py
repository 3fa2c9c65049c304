"""Faults as users meet them, through the user's path: the launcher (gcagent-run) on 2 nodes of
this host, each with its agent and 2 real DDP trainers (trainers/torch_recovery.py: the
digits MLP through gcagent's hook, every step in try/except gcagent.GcagentError), with the
agents' timeouts at their defaults. A node's agent is frozen (SIGSTOP) for longer than both
transport.peer_timeout and GCAGENT_CLIENT_LIVENESS_TIMEOUT, or killed, and what every
launcher and trainer does afterwards is checked, as is that no launcher leaves a segment in
/dev/shm. Needs torch and scikit-learn: scripts/test.sh runs it in the torch venv."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cluster import AGENT, Namespaces, free_ports, wait_for
from shim_cluster import TRAINERS, shim_env

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

RECOVERY = str(TRAINERS / "torch_recovery.py")
FREEZE_S = 12.0  # longer than transport.peer_timeout and GCAGENT_CLIENT_LIVENESS_TIMEOUT (10 s each)


def shm_segments(prefix):
    return sorted(p.name for p in Path("/dev/shm").glob(f"{prefix}*"))


def children(pid):
    """The pids whose parent is `pid`, with their command names."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        if ppid == pid:
            found.append((int(stat.parent.name), name))
    return found


class Launchers:
    """gcagent-run once per node on this host, each with --log-dir, its output drained as it
    comes (a full pipe would stop the trainers)."""

    def __init__(self, tmp_path, nnodes, nproc, script_args, options=(), env=None, namespaces=None):
        """namespaces: a cluster.Namespaces with a namespace per node, each launcher in its own
        (node 0's address the rendezvous), instead of every node on this host's loopback."""
        self.tmp_path = tmp_path
        self.nnodes, self.nproc = nnodes, nproc
        script_args = [*script_args, "--out-dir", str(tmp_path)]
        self.port = free_ports(1)[0]
        e = shim_env(env)
        e["GCAGENT_BINARY"] = str(AGENT)
        e.pop("GCAGENT_JOB", None)
        self.procs, self.outs, self.errs, self.drains = [], [], [], []
        for node in reversed(range(nnodes)):  # node 0, which hosts the rendezvous, last
            args = ["--nnodes", str(nnodes), "--node-rank", str(node), "--nproc-per-node", str(nproc),
                    "--master-port", str(self.port), "--log-dir", str(tmp_path / "logs")]
            if namespaces:
                args += ["--master-addr", namespaces.addresses[0]]
            for option in options:
                args += ["--agent-option", option]
            prefix, node_env = [], e
            if namespaces:  # gloo finds its address by the interface, not the hostname
                prefix = namespaces.prefix(node)
                node_env = dict(e, GLOO_SOCKET_IFNAME=f"gca{namespaces.tag}v{node}")
            p = subprocess.Popen([*prefix, sys.executable, "-m", "gcagent.run", *args, RECOVERY, *script_args], env=node_env,
                                 text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.procs.insert(0, p)
        for p in self.procs:
            out, err = [], []
            self.outs.append(out)
            self.errs.append(err)
            for stream, sink in ((p.stdout, out), (p.stderr, err)):
                t = threading.Thread(target=lambda s=stream, k=sink: k.extend(s), daemon=True)
                t.start()
                self.drains.append(t)

    def out(self, node):
        return "".join(self.outs[node])

    def err(self, node):
        return "".join(self.errs[node])

    def agent_pid(self, node):
        return wait_for(lambda: next((pid for pid, name in children(self.procs[node].pid) if name == "gcagent"), None),
                        what=f"node {node}'s agent")

    def segment_prefix(self, node):
        return f"gcarun{self.procs[node].pid}"

    def trainer_out(self, rank):
        try:
            return (self.tmp_path / f"rank{rank}.txt").read_text()
        except OSError:
            return ""

    def wait_for_step(self, step):
        wait_for(lambda: f"\nstep={step} ok" in self.trainer_out(0), timeout=300, what=f"trainer 0's step {step}")

    def finish(self, timeout=400):
        deadline = time.time() + timeout
        for p in self.procs:
            try:
                p.wait(max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in self.drains:
            t.join(timeout=10)
        for node in range(len(self.procs)):  # for a failing test's reader
            (self.tmp_path / f"launcher{node}.out").write_text(self.out(node))
            (self.tmp_path / f"launcher{node}.err").write_text(self.err(node))
        return [p.returncode for p in self.procs]

    def reports(self):
        """{world rank: the report its trainer printed last}."""
        found = {}
        for rank in range(self.nnodes * self.nproc):
            lines = [l for l in self.trainer_out(rank).splitlines() if l.startswith("report: ")]
            if lines:
                found[rank] = json.loads(lines[-1][len("report: "):])
        return found

    def steps(self, rank):
        """[(step, ok, why)] of the trainer of world rank `rank`."""
        return [(int(s), how == "ok", why) for s, how, why in
                re.findall(r"^step=(\d+) (ok|failed)(.*)$", self.trainer_out(rank), re.M)]

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()


STEPS = 900
ARGS = ["--steps", str(STEPS), "--pace-ms", "40"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run without a fault: its accuracy (exact sums make it the same every time, paced or
    not: the pace only lets a fault land mid-run)."""
    job = Launchers(tmp_path_factory.mktemp("clean"), 2, 2, ["--steps", str(STEPS), "--pace-ms", "0"])
    codes = job.finish()
    assert codes == [0, 0], (codes, job.err(0)[-3000:], job.err(1)[-3000:])
    reports = job.reports()
    assert sorted(reports) == [0, 1, 2, 3] and all(r["failed"] == 0 for r in reports.values()), reports
    return reports


def test_a_frozen_agent_under_ddp_recovers_through_the_launcher(tmp_path, uninterrupted):
    """Node 1's agent stopped for 12 s: node 0's agent gives it up after the peer timeout, node
    1's trainers give their agent up after the liveness timeout and reconnect once it answers
    again. Every trainer then goes on within a few steps, both launchers exit 0, and the model
    ends within 1 point of the uninterrupted run's."""
    job = Launchers(tmp_path, 2, 2, ARGS)
    try:
        agent = job.agent_pid(1)
        job.wait_for_step(60)
        os.kill(agent, signal.SIGSTOP)
        time.sleep(FREEZE_S)
        os.kill(agent, signal.SIGCONT)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == [0, 0], (codes, job.err(0)[-3000:], job.err(1)[-3000:])
    reports = job.reports()
    assert sorted(reports) == [0, 1, 2, 3], [job.trainer_out(r)[-1500:] for r in range(4)]
    for rank in range(4):
        steps = job.steps(rank)
        assert len(steps) == STEPS, steps[-5:]
        # Node 1's trainers number their steps behind node 0's after the realignment (node 0's
        # failed the freeze's steps at once, node 1's waited for their agent): their last steps
        # fail once node 0's trainers have finished and left. Before that, every step succeeds
        # from a few steps after the freeze on.
        end = next((i for i, (_, ok, why) in enumerate(steps) if not ok and "left" in why), len(steps))
        failed = [i for i, (_, ok, _) in enumerate(steps[:end]) if not ok]
        assert failed, f"rank {rank} never felt the freeze"
        assert failed[-1] - failed[0] < 100, [steps[i] for i in failed[-3:]]  # ~12 s of 40 ms steps, and a few
        assert end - failed[-1] > STEPS // 2, (end, [steps[i] for i in failed[-3:]])
        assert all(not ok for _, ok, _ in steps[end:]), steps[end:][:3]
    # Node 1's trainers gave their agent up and connected again.
    assert reports[2]["reconnects"] >= 1 and reports[3]["reconnects"] >= 1, reports
    assert abs(reports[0]["accuracy"] - uninterrupted[0]["accuracy"]) <= 1.0, (reports, uninterrupted)
    assert reports[0]["accuracy"] == reports[2]["accuracy"], reports  # one model on both nodes
    for node in (0, 1):
        assert shm_segments(job.segment_prefix(node)) == [], node


LONG = ["--steps", "2500", "--pace-ms", "40"]  # 100 s: past the reduction timeout after a loss


def kill_node_1(job):
    agent = job.agent_pid(1)
    job.wait_for_step(60)
    os.kill(agent, signal.SIGKILL)


def test_a_killed_node_ends_the_survivors_launch_naming_it(tmp_path):
    """Node 1's agent killed (default transport.on_peer_loss = fail): node 1's launcher exits 1
    at once; node 0's trainers fail every step (and catch it), and once node 1 has been
    unreachable for transport.reduction_timeout, node 0's launcher stops them and exits 1 naming
    node 1, instead of finishing the loop and exiting 0. Neither leaves a segment behind."""
    # A reduction timeout of 20 s rather than the default 60: the same path, in a third of the time.
    job = Launchers(tmp_path, 2, 2, LONG, options=["transport.reduction_timeout=20"])
    try:
        kill_node_1(job)
        codes = job.finish()
    finally:
        job.kill_all()
    err0, err1 = job.err(0), job.err(1)
    assert codes == [1, 1], (codes, err0[-3000:], err1[-3000:])
    assert "the agent exited with code -9 while trainers ran" in err1, err1[-3000:]
    assert "gcagent-run: node 0: node 1 is lost, the job cannot go on: node 1 has been unreachable for " in err0, \
        err0[-3000:]
    assert "longer than transport.reduction_timeout (20 s)" in err0, err0[-3000:]
    steps = job.steps(0)
    assert 60 < len(steps) < 2500, len(steps)  # stopped, not run to the end
    assert not steps[-1][1] and "peer rank 1" in steps[-1][2], steps[-1]
    for node in (0, 1):
        assert shm_segments(job.segment_prefix(node)) == [], node
    assert "removed 2 shared-memory segment(s) the agent left" in err1, err1[-2000:]


def test_a_killed_node_under_shrink_leaves_the_survivors_going_on(tmp_path):
    """The same kill under transport.on_peer_loss = shrink with transport.quorum = none (one
    node of two is no majority: the operator allows it to go on alone): after
    transport.shrink_grace node 0 goes on as the only member; its trainers' steps succeed
    again and its launcher exits 0."""
    job = Launchers(tmp_path, 2, 2, ["--steps", "1500", "--pace-ms", "40"],
                    options=["transport.on_peer_loss=shrink", "transport.quorum=none"])
    try:
        kill_node_1(job)
        codes = job.finish()
    finally:
        job.kill_all()
    assert codes == [0, 1], (codes, job.err(0)[-3000:], job.err(1)[-3000:])
    for rank in (0, 1):
        steps = job.steps(rank)
        assert len(steps) == 1500, len(steps)
        failed = [i for i, (_, ok, _) in enumerate(steps) if not ok]
        assert failed and all(ok for _, ok, _ in steps[failed[-1] + 1:])
        assert len(steps) - failed[-1] > 200, failed[-1]  # trained on as one node
    assert "membership: epoch 0 (nodes 0, 1) -> epoch 1 (node 0)" in (tmp_path / "logs" / "agent0.log").read_text()
    for node in (0, 1):
        assert shm_segments(job.segment_prefix(node)) == [], node


def test_a_partition_under_shrink_leaves_one_model_on_every_node(tmp_path):
    """3 nodes x 1 DDP trainer through gcagent-run, each node in its own network namespace,
    transport.on_peer_loss = shrink: the links between {0, 1} and {2} are cut silently for
    25 s (past the peer timeout and the grace period), then healed. The majority {0, 1} goes
    on as a membership of its own; node 2's steps fail with the quorum error (it trains on
    nothing); after the heal it is taken back, every trainer loads node 0's weights after the
    same step (gcagent.torch.sync_parameters), and the three end with the same model, within
    a point of the uninterrupted run's accuracy. Every launcher exits 0."""
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(f"skipping the partition test: {why}")
    with Namespaces(3) as ns:
        job = Launchers(tmp_path, 3, 1, ["--steps", "1700", "--pace-ms", "40"], namespaces=ns,
                        options=["transport.on_peer_loss=shrink", "transport.shrink_grace=1"])
        try:
            job.wait_for_step(100)
            ns.partition([0, 1], [2])
            time.sleep(25.0)
            ns.partition([0, 1], [2], cut=False)
        except BaseException:
            job.kill_all()
            job.finish()  # the launchers' output, for the reader
            raise
        codes = job.finish(timeout=600)
    assert codes == [0, 0, 0], (codes, job.err(0)[-3000:], job.err(2)[-3000:])
    reports = job.reports()
    assert sorted(reports) == [0, 1, 2], [job.trainer_out(r)[-1500:] for r in range(3)]
    minority = job.trainer_out(2)
    assert "the job has no quorum: this node reaches 1 of the 3 nodes of epoch 0" in minority, minority[-3000:]
    for rank in range(3):
        out = job.trainer_out(rank)
        # Once after the heal (node 2 a joiner), and for {0, 1} after the shrink as well (a step
        # in flight at the cut may have completed on one node only), or again after a step given
        # up while the links came back.
        loaded = len(re.findall(r"^step=\d+ loaded the weights of node 0$", out, re.M))
        assert loaded == reports[rank]["resyncs"] >= (2 if rank < 2 else 1), (loaded, reports, out[-3000:])
    assert reports[0]["model"] == reports[1]["model"] == reports[2]["model"], reports
    print("partition 2|1 under DDP:", {r: (reports[r]["failed"], reports[r]["accuracy"]) for r in range(3)})
    assert reports[0]["accuracy"] > 90, reports
