"""gcagent as a torch.distributed backend (gcagent/torch/backend.py), on the user's path: plain
torchrun, one per node (two nodes on this host, two trainers each), `import gcagent.torch` and
init_process_group("gcagent"); each node's agent is started by the backend through torchrun's
store. Expected values are PyTorch's (its collective tests' inputs and results) or gloo's, run
in the same test."""

import json
import subprocess
import sys

import pytest

from shim_cluster import BUILD, TRAINERS, free_ports, shim_env

NODES, LOCAL = 2, 2
SCRIPT = str(TRAINERS / "torch_backend.py")


def torchrun(tmp_path, args, rdzv="c10d", env=None, timeout=300):
    """Runs the trainers under one torchrun per node; returns (the reports by rank, each node's output)."""
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    port = free_ports(1)[0]
    e = shim_env({"REPORT_DIR": str(reports), "GCAGENT_BINARY": str(BUILD / "agent" / "gcagent"),
                  "TMPDIR": str(tmp_path), **(env or {})})
    common = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", str(LOCAL)]
    procs = []
    for node in range(NODES):
        if rdzv == "c10d":
            launch = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "backend-test"]
        else:
            launch = ["--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port)]
        procs.append(subprocess.Popen(common + launch + [SCRIPT, *args], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-6000:]
    found = sorted(reports.glob("rank*.json"), key=lambda f: int(f.stem[4:]))
    assert len(found) == NODES * LOCAL, outs
    return [json.loads(f.read_text()) for f in found], outs


def test_collectives_give_pytorchs_expected_values_through_the_agents_or_gloo(tmp_path):
    """distributed_test's all_reduce cases (SUM through the agents; MIN, MAX, PRODUCT on gloo)
    and test_c10d_gloo's simple sum, AVG, bfloat16 and float16 sums, all_reduce_coalesced,
    int64 (gloo), broadcast, all_gather and barrier (gloo), a group with one rank per node
    (the agents) and one of node 0's ranks (gloo), under a static torchrun rendezvous."""
    reps, outs = torchrun(tmp_path, ["collectives"], rdzv="static")
    for rank, r in enumerate(reps):
        checks = {k: v for k, v in r.items() if isinstance(v, bool)}
        assert all(checks.values()), (rank, checks)
        assert r["backend"] == "gcagent"
        assert r["agent_calls"] == 4 + 1 + 1 + 2 + 1, r  # sum from each source, simple sum, avg, bf16, fp16, coalesced
        assert r["gloo_calls"] == {"allreduce": 3 * 4 + 1 + 1, "broadcast": 1, "allgather": 1, "barrier": 2}, r
        assert "can't be cast" in r["avg_int"], r  # gloo's own error
        assert ("spread" in r) == (rank % 2 == 0) and ("node" in r) == (rank < 2)
        if "spread" in r:
            assert r["spread_calls"] == [1, {}], r  # one rank per node: through the agents
        if "node" in r:
            assert r["node_calls"] == [0, {"allreduce": 1}], r  # node 0's ranks: gloo
    log = "".join(outs)
    assert "gcagent backend: node 0 started its agent" in log and "gcagent backend: node 1 started its agent" in log
    agent_logs = sorted(tmp_path.glob("gcagent-*/agent*.log"))
    assert len(agent_logs) == NODES, agent_logs
    for f in agent_logs:  # the job's token, from rank 0 through the store
        assert "all peers up (authenticated by the cluster token)" in f.read_text(), f
    assert "gcagent backend: broadcast runs on the gloo sub-backend (the agents have no broadcast yet)" in log
    assert "gcagent backend: group 2 (ranks [0, 1]) runs on gloo: the agents serve groups with the same number of " \
           "ranks on every node" in log


def test_ddp_without_a_hook_ends_where_ddp_over_gloo_does(tmp_path):
    """DDP, no comm hook, several buckets, 30 SGD steps under torchrun --rdzv-backend c10d: on the
    gcagent backend (every bucket through the agents, uncompressed) the parameters equal those
    of the same run on gloo within fp32 summation order, and every rank holds the same model."""
    (tmp_path / "gcagent").mkdir()
    (tmp_path / "gloo").mkdir()
    ours, _ = torchrun(tmp_path / "gcagent", ["ddp", "gcagent", "30"])
    gloo, _ = torchrun(tmp_path / "gloo", ["ddp", "gloo", "30"])
    assert all(r["params"] == ours[0]["params"] for r in ours), "one model on every rank"
    assert ours[0]["agent_calls"] >= 30 and "allreduce" not in ours[0]["gloo_calls"], ours[0]
    worst = max(abs(a - b) for pa, pb in zip(ours[0]["params"], gloo[0]["params"]) for a, b in zip(pa, pb))
    assert worst < 1e-6, worst
    assert ours[0]["params"] != [[0.0]], "trained"
    for a, b in zip(ours[0]["losses"], gloo[0]["losses"]):
        assert abs(a - b) < 1e-5, (ours[0]["losses"], gloo[0]["losses"])


def test_fsdp2s_own_hsdp_on_a_device_mesh_of_the_backend_equals_it_on_gloo(tmp_path):
    """fully_shard on a 2-D DeviceMesh (replicate across the 2 nodes, shard over each node's 2
    trainers) made with init_process_group("gcagent"), FSDP2 unchanged: its replicate groups
    (one rank per node) allreduce through the agents, its shard groups' all-gathers and
    reduce-scatters run on gloo; after 10 AdamW steps every parameter equals, bit for bit, the
    same run on gloo (a sum of two floats has one order)."""
    (tmp_path / "gcagent").mkdir()
    (tmp_path / "gloo").mkdir()
    ours, _ = torchrun(tmp_path / "gcagent", ["hsdp", "gcagent", "10"])
    gloo, _ = torchrun(tmp_path / "gloo", ["hsdp", "gloo", "10"])
    for a, b in zip(ours, gloo):
        assert a["params"] == b["params"] and a["losses"] == b["losses"]
        replicate, shard = a["groups"]["replicate"], a["groups"]["shard"]
        assert replicate == [30, {}], a["groups"]  # 3 modules x 10 steps, through the agents
        assert shard[0] == 0 and shard[1]["reduce_scatter_single"] == 30, a["groups"]


def test_a_compressed_group_keeps_a_residual_per_tensor(tmp_path):
    """new_group(pg_options=gcagent.torch.Options(codec="2bit")): two persistent tensors of one
    size, allreduced in turn through that one group for 6 steps, give bit for bit what each gives
    through a group of its own (the reference: one tensor per job, so nothing to mix). Keyed by
    size alone they would share one residual and differ."""
    reps, _ = torchrun(tmp_path, ["residuals", "6"], env={"GCAGENT_COMPRESS_MIN_ELEMENTS": "0"})
    for r in reps:
        assert r["keys"] == [2], r["keys"]
        assert r["shared"] == r["own"]
        assert r["shared"][-1] != r["exact_last"], "compressed"
        assert set(r["shared"][-1]) <= {-1.0, -0.5, 0.0, 0.5, 1.0}, "2bit's levels: two nodes' +-0.5 or 0"
    assert all(r["shared"] == reps[0]["shared"] for r in reps)


# DDP divides each gradient by the world size before its allreduce (a SUM); the hook averages
# in the agents: the group's 2bit threshold is a quarter of the hook's.
@pytest.mark.parametrize("via,threshold", [("hook", "0.02"), ("group", "0.005")])
def test_ddp_compressed_by_the_comm_hook_or_a_group_option_trains_one_model(tmp_path, via, threshold):
    """DDP on the gcagent backend, its buckets compressed with 2bit either by gcagent's comm hook
    (its State connects to the agent the backend started, with no GCAGENT_ variable set by the
    user; its learning iterations go through the backend) or by no hook at all, DDP on a group
    made with pg_options=gcagent.torch.Options(codec="2bit"): no allreduce goes to gloo, every
    rank ends with the same model, which differs from the uncompressed run's, and it learns."""
    (tmp_path / "2bit").mkdir()
    (tmp_path / "none").mkdir()
    # The agents the backend starts read their settings from the environment, as any agent.
    compressed, _ = torchrun(tmp_path / "2bit", [via, "2bit", f"threshold={threshold}", "40"],
                             env={"GCAGENT_COMPRESS_MIN_ELEMENTS": "0"})
    exact, _ = torchrun(tmp_path / "none", ["ddp", "gcagent", "40"])
    assert all(r["params"] == compressed[0]["params"] for r in compressed), "one model on every rank"
    assert compressed[0]["params"] != exact[0]["params"], "the buckets were compressed"
    for r in compressed:
        assert "allreduce" not in r["gloo_calls"], r
        if via == "hook":
            assert r["hook_job"].startswith("torch-"), r["hook_job"]
            assert 0 < r["agent_calls"] < 10, r  # the hook's learning steps
        else:
            assert r["agent_calls"] >= 40, r
            # A key per bucket: those of the buckets DDP had before it rebuilt them are retired
            # (their slots and residuals leave the agents), the rebuilt ones' stay.
            before, rebuilt = r["buckets"]
            assert (r["keys"], r["retired_keys"]) == (rebuilt, before), r
        first, last = sum(r["losses"][:5]) / 5, sum(r["losses"][-5:]) / 5
        assert last < 0.95 * first, r["losses"]


def test_ranks_that_disagree_on_a_groups_options_all_fail_naming_the_difference(tmp_path):
    """Rank 3 makes a group with 2bit, the others with fp8: new_group raises on every rank (none
    waits for a collective that cannot match), naming both."""
    reps, _ = torchrun(tmp_path, ["disagree"])
    for rank, r in enumerate(reps):
        assert r["error"] and "disagree on its options" in r["error"], r
        assert "codec=2bit" in r["error"] and "codec=fp8" in r["error"], r


def test_a_node_without_its_agent_fails_init_process_group_naming_the_socket(tmp_path):
    """GCAGENT_SOCKET names an agent that is not there: init_process_group raises on every rank,
    naming the socket, instead of waiting; and a node with GCAGENT_SOCKET beside one without:
    every rank raises, naming the mix."""
    missing = tmp_path / "no-agent.sock"
    both = failing_init(tmp_path / "both", [{"GCAGENT_SOCKET": str(missing)}] * NODES)
    for out in both:
        assert f"gcagent: connect to {missing}" in out, out[-3000:]
    mixed = failing_init(tmp_path / "mixed", [{}, {"GCAGENT_SOCKET": str(missing)}])
    assert "node(s) 1 use an agent of their own (GCAGENT_SOCKET) and node 0 none: set GCAGENT_SOCKET on every " \
           "node or on none" in mixed[0], mixed[0][-3000:]
    assert f"gcagent: connect to {missing}" in mixed[1], mixed[1][-3000:]


def failing_init(tmp_path, node_envs):
    """Runs one trainer per node, node n with node_envs[n]; each must fail: their outputs."""
    tmp_path.mkdir()
    procs = []
    port = free_ports(1)[0]
    for node, extra in enumerate(node_envs):
        e = shim_env({"REPORT_DIR": str(tmp_path), "TMPDIR": str(tmp_path),
                      "GCAGENT_BINARY": str(BUILD / "agent" / "gcagent"), **extra})
        procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES),
                                       "--nproc-per-node", "1", "--node-rank", str(node), "--master-addr",
                                       "127.0.0.1", "--master-port", str(port), SCRIPT, "collectives"],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        out = p.communicate(timeout=120)[0]
        assert p.returncode != 0, out[-3000:]
        outs.append(out)
    return outs


@pytest.mark.parametrize("kind", ["kill", "freeze"])
def test_a_killed_or_frozen_agent_fails_ddps_step_and_all_reduce_on_every_rank(tmp_path, kind):
    """Node 1's agent is killed (SIGKILL) or frozen (SIGSTOP, past transport.peer_timeout and the
    client's liveness timeout) between two DDP steps: on every rank the next step's backward
    and plain all_reduces (of a shape the agents know, and of a new one) raise, naming the
    cause, and leave their tensors as they were; nothing hangs and nothing crashes."""
    reps, _ = torchrun(tmp_path, ["fault", kind])
    # node 0's agent names the peer it lost; node 1's trainers, their own agent's state
    node1 = "closed the connection (did it exit?)" if kind == "kill" else "has not answered for 10 s"
    for rank, r in enumerate(reps):
        cause = "peer rank 1" if rank < 2 else node1
        assert r["ddp_error"] and cause in r["ddp_error"], (rank, r)
        assert r["allreduce_error"] and cause in r["allreduce_error"], (rank, r)
        # a new shape: its key's declaration fails on node 1, which every rank hears of before
        # anything is sent
        if rank >= 2:
            assert r["new_shape_error"] and cause in r["new_shape_error"], (rank, r)
        else:
            assert r["new_shape_error"] == "GcagentError: gcagent backend: group 0: the agent of rank(s) 2, 3 did " \
                                           "not take the key of an allreduce of 8192 elements (the error is raised " \
                                           "there)", (rank, r)
        assert r["allreduce_untouched"] and r["new_shape_untouched"], (rank, r)
