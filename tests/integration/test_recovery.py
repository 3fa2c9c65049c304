"""Recovery end to end, with real agents and resilient trainers (they catch the error and go
on, as `gcagent_test_trainer --keep-going` does, reconnecting when their agent died): after a
peer agent is stopped past the peer timeout and resumed, killed and restarted, or cut off by
its link for a while, the job's nodes realign and every trainer completes steps again, with
exact averages and every tensor of a step summed with the same steps of the others. Slices
of the given-up iterations count as stale, never as bad messages."""

import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from cluster import Cluster, Namespaces
from test_faults import FLAGS, Trainers, restart_agent, wait_mesh_whole
from test_dataplane import stop_clean

RESILIENT = ["--keep-going", "--timeout-ms", "30000"]
# The agents give a stuck step up (on every node, realigning) well before the trainers' own
# 30 s wait ends: a trainer that stops waiting reconnects, and a trainer that leaves ends its
# job on every node, which no realignment undoes.
AGENT_FLAGS = FLAGS + ["--transport.reduction_timeout", "10"]
# Steps every trainer must complete after the fault, each checked.
AGAIN = 15


def successes(trainers, i):
    return len(re.findall(r"^iteration=\d+ ", trainers.output(i), re.M))


def assert_steps_complete_again(trainers, timeout=180, cluster=None):
    """Every trainer completes AGAIN more checked steps than it had when this is called, and
    none of them saw a wrong value (a trainer exits 1 on one)."""
    base = [successes(trainers, i) for i in range(len(trainers.procs))]
    deadline = time.time() + timeout
    while time.time() < deadline:
        for i, p in enumerate(trainers.procs):
            assert p.poll() is None, f"trainer {i} exited {p.returncode}:\n{trainers.output(i)[-1500:]}"
        if all(successes(trainers, i) >= base[i] + AGAIN for i in range(len(trainers.procs))):
            return
        time.sleep(0.1)
    agents = [] if cluster is None else [f"agent {r}: {cluster.log(r)[-2500:]}" for r in range(cluster.n)]
    raise AssertionError("steps did not complete again:\n" +
                         "\n".join([f"trainer {i}: {trainers.output(i)[-600:]}" for i in range(len(trainers.procs))] +
                                   agents))


def wait_for_output(trainers, indices, text, timeout=60):
    """Until every trainer in `indices` printed `text` (or the generous deadline passed)."""
    deadline = time.time() + timeout
    while not all(text in trainers.output(i) for i in indices) and time.time() < deadline:
        time.sleep(0.05)


def metric(cluster, rank, name, labels, ns=None):
    """A sample of an agent's /metrics, fetched from inside its namespace when it has one."""
    url = f"http://{cluster.metrics_address(rank)}/metrics"
    if ns is None:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    else:
        code = f"import urllib.request;print(urllib.request.urlopen('{url}',timeout=10).read().decode())"
        text = subprocess.run(ns.prefix(rank) + [sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    sample = name + ("{" + labels + "}" if labels else "")
    m = re.search("^" + re.escape(sample) + r" (\S+)", text, re.M)
    return float(m.group(1)) if m else None


def assert_no_bad_messages(cluster, ns=None):
    for r in range(cluster.n):
        assert metric(cluster, r, "gcagent_errors_total", 'kind="bad_message"', ns) == 0, cluster.log(r)[-2000:]


def test_trainers_go_on_after_a_stopped_peer_resumes(tmp_path):
    with Cluster(tmp_path, 3, AGENT_FLAGS) as c:
        trainers = Trainers(c, 1, "steady", extra=RESILIENT)
        trainers.wait_iterations(3)
        c.procs[2].send_signal(signal.SIGSTOP)
        try:
            # The others see it lost and fail their steps at once meanwhile.
            wait_for_output(trainers, [0], "failed iteration=")
            assert "peer rank 2" in trainers.output(0), trainers.output(0)[-800:]
            time.sleep(1.0)
        finally:
            c.procs[2].send_signal(signal.SIGCONT)
        time.sleep(0.5)
        # UCX 1.13's TCP transport sometimes aborted here, on a stale PUT acknowledgement once
        # the peers had closed their links (tcp_ep.c "PUT_TX_WAITING_ACK"); UCX 1.22 does not.
        assert c.procs[2].poll() is None, c.log(2)[-2000:]
        assert_steps_complete_again(trainers, cluster=c)
        assert any("realigned" in c.log(r) for r in range(3)), [c.log(r)[-1500:] for r in range(3)]
        assert_no_bad_messages(c)
        trainers.kill()
        stop_clean(c)


def test_trainers_go_on_after_a_killed_agent_restarts(tmp_path):
    with Cluster(tmp_path, 3, AGENT_FLAGS) as c:
        trainers = Trainers(c, 1, "steady", extra=RESILIENT)
        trainers.wait_iterations(3)
        c.procs[2].send_signal(signal.SIGKILL)
        c.procs[2].wait()
        wait_for_output(trainers, [0], "failed iteration=")
        restart_agent(c, 2)
        assert_steps_complete_again(trainers, cluster=c)
        assert "reconnected" in trainers.output(2), trainers.output(2)[-800:]
        assert_no_bad_messages(c)
        trainers.kill()
        stop_clean(c)


def test_trainers_go_on_after_a_cut_link_heals(tmp_path):
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(f"skipping the link test: {why}")
    with Namespaces(2) as ns, Cluster(tmp_path, 2, AGENT_FLAGS, namespaces=ns) as c:
        trainers = Trainers(c, 1, "steady", extra=RESILIENT)
        trainers.wait_iterations(3)
        inner = f"gca{ns.tag}v1"
        subprocess.run(ns.prefix(1) + ["ip", "link", "set", inner, "down"], check=True)
        try:
            wait_for_output(trainers, [0, 1], "failed iteration=")
            assert "peer rank 1" in trainers.output(0), trainers.output(0)[-800:]
            time.sleep(2.0)  # both sides fail steps at once for a while
        finally:
            subprocess.run(ns.prefix(1) + ["ip", "link", "set", inner, "up"], check=True)
            subprocess.run(ns.prefix(1) + ["ip", "addr", "replace", f"{ns.addresses[1]}/24", "dev", inner])
        assert_steps_complete_again(trainers, cluster=c)
        assert_no_bad_messages(c, ns)
        trainers.kill()
        stop_clean(c)


def test_a_clean_shutdown_is_said_and_the_restarted_agent_rejoins(tmp_path):
    with Cluster(tmp_path, 3, AGENT_FLAGS) as c:
        trainers = Trainers(c, 1, "steady", extra=RESILIENT)
        trainers.wait_iterations(3)
        c.procs[2].send_signal(signal.SIGTERM)
        assert c.procs[2].wait(timeout=30) == 0, c.log(2)[-2000:]
        wait_for_output(trainers, [0], "shut down")
        # Said, not guessed from a timeout: the error names the shutdown.
        said = re.search(r"peer rank 2 (lost|is down): it shut down \(agent stopping on signal 15\)", trainers.output(0))
        assert said, trainers.output(0)[-800:]
        for r in (0, 1):
            assert metric(c, r, "gcagent_recovery_events_total", 'event="peer_shutdown"') == 1
            assert metric(c, r, "gcagent_recovery_events_total", 'event="peer_lost"') == 0
        restart_agent(c, 2)
        assert_steps_complete_again(trainers, cluster=c)
        for r in (0, 1):
            assert metric(c, r, "gcagent_recovery_events_total", 'event="peer_rejoined"') >= 1
        assert_no_bad_messages(c)
        trainers.kill()
        stop_clean(c)


def test_a_trainer_whose_agent_freezes_hears_it_at_the_liveness_timeout(tmp_path):
    with Cluster(tmp_path, 2, FLAGS) as c:
        env = c.env
        c.env = dict(env, GCAGENT_CLIENT_LIVENESS_TIMEOUT="2")
        # Their own waits would last 10 minutes: only the liveness timeout can end trainer 1's.
        trainers = Trainers(c, 1, "frozen", extra=["--timeout-ms", "600000"])
        c.env = env
        trainers.wait_iterations(3)
        c.procs[1].send_signal(signal.SIGSTOP)
        try:
            assert trainers.wait_exit([1], 120) == [2]
        finally:
            c.procs[1].send_signal(signal.SIGCONT)
        assert "the agent has not answered for 2 s: it is stopped or hung (GCAGENT_CLIENT_LIVENESS_TIMEOUT)" in \
            trainers.output(1), trainers.output(1)[-800:]
        trainers.kill()


def steps_on(trainers, i, nodes):
    """Steps trainer i completed while the job ran on `nodes` nodes."""
    return len(re.findall(rf"^iteration=\d+ .* nodes={nodes} members=", trainers.output(i), re.M))


def wait_steps_on(trainers, indices, nodes, count, timeout=180):
    """Until every trainer in `indices` completed `count` checked steps on `nodes` nodes; a
    trainer that exits meanwhile (a wrong value is exit 1) fails the test."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for i in indices:
            p = trainers.procs[i]
            assert p.poll() is None, f"trainer {i} exited {p.returncode}:\n{trainers.output(i)[-1500:]}"
        if all(steps_on(trainers, i, nodes) >= count for i in indices):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {count} steps on {nodes} nodes:\n" +
                         "\n".join(f"trainer {i}: {trainers.output(i)[-600:]}" for i in indices))


def test_the_job_goes_on_without_a_killed_node_and_takes_it_back(tmp_path):
    # transport.on_peer_loss = shrink: the last node is killed; past the grace period the two
    # others average over their own trainers only (exact values, checked by every trainer
    # against the node count its agent reports); the restarted node is taken back.
    flags = FLAGS + ["--transport.on_peer_loss", "shrink", "--transport.shrink_grace", "1"]
    with Cluster(tmp_path, 3, flags) as c:
        # Trainer 2 waits up to 2 minutes for its agent to come back.
        trainers = Trainers(c, 1, "shrink", extra=["--keep-going", "--timeout-ms", "120000"])
        trainers.wait_iterations(3)
        c.procs[2].send_signal(signal.SIGKILL)
        c.procs[2].wait()
        wait_steps_on(trainers, [0, 1], 2, AGAIN)
        for r in (0, 1):
            assert metric(c, r, "gcagent_recovery_events_total", 'event="shrunk"') == 1, c.log(r)[-2000:]
            assert metric(c, r, "gcagent_members", "") == 2
            assert metric(c, r, "gcagent_membership_epoch", "") == 1
        assert "membership: epoch 0 (nodes 0, 1, 2) -> epoch 1 (nodes 0, 1)" in c.log(0), c.log(0)[-2000:]
        restart_agent(c, 2)
        wait_steps_on(trainers, [0, 1, 2], 3, AGAIN)
        for r in range(3):
            assert metric(c, r, "gcagent_members", "") == 3, c.log(r)[-2000:]
        assert metric(c, 0, "gcagent_recovery_events_total", 'event="grown"') == 1
        assert "-> epoch 2 (nodes 0, 1, 2)" in c.log(2), c.log(2)[-2000:]
        assert_no_bad_messages(c)
        trainers.kill()
        stop_clean(c)
