"""gcagent-run (python -m gcagent.run), the launcher: real launchers, agents and trainers
(trainers/run_trainer.py) on one host, from a --hosts list and in network namespaces; the sum
every trainer gets is checked bit for bit against the reference. Then failures: a trainer that
fails, an agent that cannot start, nodes that disagree, a signal, the rendezvous on its own.
Needs numpy: scripts/test.sh runs it in the torch venv."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from cluster import AGENT, Namespaces, free_ports, wait_for
from shim_cluster import REPO, TRAINERS, shim_env

RUN_TRAINER = str(TRAINERS / "run_trainer.py")
N = 70001  # two slices of the default 40000


def launch(args, prefix=(), env=None):
    e = shim_env(env)
    e["GCAGENT_BINARY"] = str(AGENT)
    e.pop("GCAGENT_JOB", None)
    return subprocess.Popen([*prefix, sys.executable, "-m", "gcagent.run", *args], env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(procs, timeout=180):
    """[(returncode, stdout, stderr)], killing what outlives the deadline."""
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            e += "\n(launcher timed out)"
        out.append((p.returncode, o, e))
    return out


def reports(stdout):
    return [json.loads(l[len("report: "):]) for l in stdout.splitlines() if l.startswith("report: ")]


def reference_sha256(nnodes, nproc):
    """Each node's trainers summed in local-rank order, then the nodes in rank order (fp32)."""
    values = lambda rank: np.random.default_rng(rank).standard_normal(N).astype(np.float32)  # noqa: E731
    total = np.full(N, -0.0, np.float32)
    for node in range(nnodes):
        local = np.full(N, -0.0, np.float32)
        for l in range(nproc):
            local = local + values(node * nproc + l)
        total = total + local
    return hashlib.sha256(total.tobytes()).hexdigest()


def check_sums(results, nnodes, nproc, master_addr):
    """Every launcher exited 0, stopped its agent, and its trainers got the reference sum with
    torchrun's variables and the shims'."""
    want = reference_sha256(nnodes, nproc)
    seen = set()
    for node, (rc, out, err) in enumerate(results):
        assert rc == 0, f"node {node}: rc {rc}\n{out[-3000:]}\n{err[-3000:]}"
        assert f"gcagent-run: node {node}: agent done: " in err, err
        got = reports(out)
        assert len(got) == nproc, out
        for r in got:
            env = r["env"]
            rank, local = int(env["RANK"]), int(env["LOCAL_RANK"])
            assert rank == node * nproc + local
            assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == \
                (str(nnodes * nproc), str(nproc), str(node), str(nnodes))
            assert (env["GCAGENT_LOCAL_RANK"], env["GCAGENT_LOCAL_SIZE"]) == (str(local), str(nproc))
            assert env["MASTER_ADDR"] == master_addr and int(env["MASTER_PORT"]) > 0
            assert env["GCAGENT_SOCKET"].endswith("control.sock") and env["GCAGENT_NODE_METRICS"]
            assert r["client"] == [node, nnodes, rank, nnodes * nproc]
            assert r["sum_sha256"] == want, (node, local)
            seen.add(rank)
    assert seen == set(range(nnodes * nproc))
    # One MASTER_PORT for every trainer of the job.
    assert len({r["env"]["MASTER_PORT"] for _, out, _ in results for r in reports(out)}) == 1


def test_two_nodes_on_one_host_meet_at_node_0(tmp_path):
    """...and their agents authenticate each other with the token node 0 made for the job."""
    port = free_ports(1)[0]
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--log-dir", str(tmp_path)]
    # Node 1 first: it waits for node 0's store.
    procs = [launch([*common, "--node-rank", str(r), RUN_TRAINER, "sum", str(N)]) for r in (1, 0)]
    node1, node0 = finish(procs)
    check_sums([node0, node1], 2, 2, "127.0.0.1")
    for r in (0, 1):
        assert "all peers up (authenticated by the cluster token)" in (tmp_path / f"agent{r}.log").read_text()


def test_two_nodes_from_a_hosts_list(tmp_path):
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    token = tmp_path / "token"  # the operator's secret, the same on every node
    token.write_text("a-cluster-token-of-enough-length")
    token.chmod(0o600)
    procs = [launch(["--hosts", hosts, "--node-rank", str(r), "--nproc-per-node", "2", "--token-file", str(token),
                     "--log-dir", str(tmp_path), RUN_TRAINER, "sum", str(N)]) for r in (0, 1)]
    results = finish(procs)
    check_sums(results, 2, 2, "127.0.0.1")
    assert {r["env"]["MASTER_PORT"] for _, out, _ in results for r in reports(out)} == {"29500"}
    for r in (0, 1):
        assert "all peers up (authenticated by the cluster token)" in (tmp_path / f"agent{r}.log").read_text()


def test_a_hosts_list_without_a_token_stops_naming_the_fix(tmp_path):
    """Without a rendezvous there is no one to make a token: the agent refuses unauthenticated
    peers and the launcher fails with its reason."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    [(rc, _, err)] = finish([launch(["--hosts", hosts, "--node-rank", "0", RUN_TRAINER, "sum", str(N)])])
    assert rc != 0
    assert "security.token_file is empty and transport.peers names 2 agents" in err, err
    assert "security.allow_unauthenticated = true" in err, err


def test_two_nodes_in_network_namespaces():
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    port = free_ports(1)[0]
    with Namespaces(2) as ns:
        master = ns.addresses[0]
        procs = [launch(["--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "2", "--master-addr", master,
                         "--master-port", str(port), RUN_TRAINER, "sum", str(N)], prefix=ns.prefix(r))
                 for r in (0, 1)]
        results = finish(procs)
    check_sums(results, 2, 2, master)


def test_a_failing_trainer_fails_the_launch_and_stops_the_agent():
    rc, out, err = finish([launch(["--nproc-per-node", "2", RUN_TRAINER, "exit", "3"])])[0]
    assert rc == 1, err
    assert "exited with code 3; stopping the others" in err, err
    assert "gcagent-run: node 0: agent done: " in err, err


def test_an_agent_that_cannot_start_is_named_with_its_error():
    rc, out, err = finish([launch(["--agent-option", "scheduler.slice_elements=10", RUN_TRAINER, "sum", "4"])])[0]
    assert rc == 1
    assert "gcagent-run: the agent exited with code 2 at start" in err, err
    assert "scheduler.slice_elements: 10 is outside [1024" in err, err
    assert "report: " not in out  # no trainer ran
    # The log the message names is still there after the launcher exited, and it says so.
    named = re.search(r"last lines of (\S+agent0\.log):", err).group(1)
    assert f"the agent's log is kept at {named}" in err, err
    assert "scheduler.slice_elements" in Path(named).read_text()
    shutil.rmtree(Path(named).parent)


def test_an_agent_option_must_be_section_key_value():
    rc, out, err = finish([launch(["--agent-option", "codec=2bit", RUN_TRAINER, "sum", "4"])])[0]
    assert rc == 1
    assert "gcagent-run: --agent-option 'codec=2bit' is not section.key=value" in err, err


def test_a_missing_agent_binary_is_named():
    e = shim_env({"PATH": "/usr/bin:/bin"})
    e.pop("GCAGENT_BINARY", None)
    r = subprocess.run([sys.executable, "-m", "gcagent.run", RUN_TRAINER, "sum", "4"], env=e, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert "gcagent-run: cannot find the gcagent binary; tried the wheel's " in r.stderr, r.stderr
    assert "Pass --agent or set GCAGENT_BINARY" in r.stderr


def test_nodes_that_disagree_are_told_which_flag(tmp_path):
    port = free_ports(1)[0]
    common = ["--nnodes", "2", "--master-port", str(port), "--rdzv-timeout", "60"]
    procs = [launch([*common, "--node-rank", "0", "--nproc-per-node", "2", RUN_TRAINER, "sum", "4"]),
             launch([*common, "--node-rank", "1", "--nproc-per-node", "1", RUN_TRAINER, "sum", "4"])]
    for rc, out, err in finish(procs):
        assert rc == 1
        assert "--nproc-per-node" in err and "every node must pass the same" in err, err
        assert "report: " not in out


def test_sigterm_reaches_the_trainers_and_the_agent_stops(tmp_path):
    marker, logs = tmp_path / "signals", tmp_path / "logs"
    p = launch(["--nproc-per-node", "2", "--log-dir", str(logs), RUN_TRAINER, "wait-signal", str(marker)])
    lines = []
    wait_for(lambda: lines.append(p.stdout.readline()) or lines.count("waiting\n") == 2, 120, "both trainers")
    p.send_signal(signal.SIGTERM)
    rc, _, err = finish([p])[0]
    assert rc == 128 + signal.SIGTERM, err
    assert sorted(marker.read_text().splitlines()) == [f"rank {r} got signal {signal.SIGTERM}" for r in (0, 1)]
    assert "done: " in (logs / "agent0.log").read_text()  # stopped with SIGTERM, cleanly
    assert "gcagent-run: node 0: agent done: " in err


def test_the_rendezvous_agrees_one_list_and_refuses_a_node_rank_twice():
    from gcagent import GcagentError
    from gcagent._rendezvous import StoreClient, rendezvous

    port = free_ports(1)[0]
    results = {}

    def node(name, rank):
        try:
            results[name] = rendezvous("127.0.0.1", port, rank, 3, 1, f"127.0.0.1:{1000 + rank}", 60, 4242)
        except GcagentError as e:
            results[name] = e

    threads = [threading.Thread(target=node, args=(str(r), r)) for r in (0, 1)]
    for t in threads:
        t.start()
    watcher = StoreClient("127.0.0.1", port, 30)
    watcher.get("node/1", 30)  # node 1 holds its rank; node 0 and node 1 wait for node 2
    watcher.close()
    node("1 again", 1)
    node("2", 2)
    for t in threads:
        t.join()
    assert isinstance(results["1 again"], GcagentError)
    assert str(results["1 again"]).startswith("gcagent-run: node rank 1 joined twice: another launcher already "
                                              "holds it"), results["1 again"]
    for r in "012":
        assert results[r].peers == ["127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:1002"], results[r]
        assert results[r].trainer_port == 4242


def test_a_missing_master_is_named():
    from gcagent import GcagentError
    from gcagent._rendezvous import rendezvous

    with pytest.raises(GcagentError, match=r"no rendezvous at 127\.0\.0\.1:\d+ within 0\.5 s .*is node 0 started"):
        rendezvous("127.0.0.1", free_ports(1)[0], 1, 2, 1, "127.0.0.1:1001", 0.5)


def test_a_node_rank_held_twice_is_refused_while_the_store_is_up():
    from gcagent import GcagentError
    from gcagent._rendezvous import StoreClient, StoreServer

    port = free_ports(1)[0]
    server = StoreServer("127.0.0.1", port)
    try:
        a, b = StoreClient("127.0.0.1", port, 10), StoreClient("127.0.0.1", port, 10)
        a.set("node/1", "x")
        with pytest.raises(GcagentError, match="'node/1' is already set"):
            b.set("node/1", "y")
        with pytest.raises(GcagentError, match="'node/2' did not appear within 0.2 s"):
            b.get("node/2", 0.2)
        assert b.get("node/1", 1) == "x"
        a.close()
        b.close()
    finally:
        server.close()


def test_bad_arguments():
    for args, message in [(["--nnodes", "2", "--node-rank", "2"], "--node-rank 2 is not in [0, 2)"),
                          (["--nnodes", "3", "--hosts", "a,b"], "--nnodes 3 but --hosts lists 2 nodes")]:
        rc, _, err = finish([launch([*args, RUN_TRAINER, "sum", "4"])])[0]
        assert rc == 2 and message in err, err


def readme_script(heading):
    """The first python block of the README under `heading`."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def readme_ddp_script():
    """The README's PyTorch DDP example, the python block under "Launching a job"."""
    return readme_script("## Launching a job: gcagent-run")


def test_the_readmes_ddp_script_trains_on_two_nodes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    script = tmp_path / "train.py"
    script.write_text(readme_ddp_script())
    port = free_ports(1)[0]
    env = {"GCAGENT_CODEC": "2bit", "GCAGENT_CODEC_PARAMS": "threshold=0.05"}
    procs = [launch(["--nnodes", "2", "--node-rank", str(r), "--master-port", str(port), "--agent-option",
                     "compress.min_elements=0", str(script)], env=env) for r in (1, 0)]
    (rc1, _, err1), (rc0, out0, err0) = finish(procs)
    assert rc0 == 0 and rc1 == 0, out0[-3000:] + err0[-3000:] + err1[-3000:]
    accuracies = [float(a) for a in re.findall(r"^epoch \d+: test accuracy ([0-9.]+)%$", out0, re.M)]
    assert len(accuracies) == 10 and accuracies[-1] > 50, out0  # ten classes: chance is 10%
    # The gradients went through the agents, compressed.
    for node, err in ((0, err0), (1, err1)):
        m = re.search(rf"node {node}: agent done: (\d+) iterations; sent (\d+) raw bytes as (\d+) wire bytes", err)
        assert m and int(m.group(1)) > 0 and 0 < int(m.group(3)) * 10 < int(m.group(2)), err


def test_the_readmes_fsdp2_script_trains_on_two_nodes_of_two_trainers(tmp_path):
    """The README's FSDP2 example through gcagent-run: sharded over each node's 2 trainers,
    the shards averaged across the 2 nodes by the agents, with 2bit."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    script = tmp_path / "train_fsdp.py"
    script.write_text(readme_script("### PyTorch FSDP2"))
    port = free_ports(1)[0]
    env = {"GCAGENT_CODEC": "2bit", "GCAGENT_CODEC_PARAMS": "threshold=0.05"}
    procs = [launch(["--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "2", "--master-port", str(port),
                     "--agent-option", "compress.min_elements=0", str(script)], env=env) for r in (1, 0)]
    (rc1, _, err1), (rc0, out0, err0) = finish(procs, timeout=300)
    assert rc0 == 0 and rc1 == 0, out0[-3000:] + err0[-3000:] + err1[-3000:]
    accuracies = [float(a) for a in re.findall(r"^epoch \d+: test accuracy ([0-9.]+)%$", out0, re.M)]
    assert len(accuracies) == 10 and accuracies[-1] > 80, out0  # ten classes: chance is 10%
    for node, err in ((0, err0), (1, err1)):
        m = re.search(rf"node {node}: agent done: (\d+) iterations; sent (\d+) raw bytes as (\d+) wire bytes", err)
        assert m and int(m.group(1)) > 0 and 0 < int(m.group(3)) * 10 < int(m.group(2)), err


def test_the_readmes_diloco_script_trains_on_two_nodes(tmp_path):
    """The README's DiLoCo example through gcagent-run: each node trains alone, the agents average
    the pseudo-gradient every 20 steps (11 outer steps in 10 epochs)."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    script = tmp_path / "train_diloco.py"
    script.write_text(readme_script("### PyTorch DiLoCo"))
    port = free_ports(1)[0]
    procs = [launch(["--nnodes", "2", "--node-rank", str(r), "--master-port", str(port), str(script)])
             for r in (1, 0)]
    (rc1, _, err1), (rc0, out0, err0) = finish(procs, timeout=300)
    assert rc0 == 0 and rc1 == 0, out0[-3000:] + err0[-3000:] + err1[-3000:]
    epochs = re.findall(r"^epoch \d+: test accuracy ([0-9.]+)% after (\d+) outer steps$", out0, re.M)
    assert len(epochs) == 10 and float(epochs[-1][0]) > 80 and int(epochs[-1][1]) == 11, out0
    for node, err in ((0, err0), (1, err1)):
        m = re.search(rf"node {node}: agent done: (\d+) iterations; sent (\d+) raw bytes", err)
        assert m and int(m.group(1)) == 11, err
