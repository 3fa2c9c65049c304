"""The gcagent package itself: pip install, finding the library, errors, and Reducer
against one real agent. Needs numpy, and setuptools with bdist_wheel (>= 70.1) for the
pip install: scripts/test.sh runs it in the torch venv."""

import os
import subprocess
import sys

import numpy as np
import pytest

from shim_cluster import LIBRARY, REPO, Cluster, shim_env

PACKAGE = REPO / "clients" / "python"


def python(code, env):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_pip_install_records_the_library_path(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, GCAGENT_CLIENT_LIB=str(LIBRARY))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(PACKAGE)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("GCAGENT_CLIENT_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    r = python("import gcagent, gcagent._installed_path as p, gcagent._library as l; l.load(); "
               "print(gcagent.__file__); print(p.LIBRARY)", env)
    assert r.returncode == 0, r.stderr
    where, recorded = r.stdout.split()
    assert where.startswith(str(target))
    assert recorded == os.path.abspath(LIBRARY)


def test_a_missing_library_is_named():
    env = shim_env({"GCAGENT_CLIENT_LIB": "/nonexistent/libgcagent_client.so.1"})
    r = python("import gcagent; gcagent.Client()", env)
    assert r.returncode != 0
    assert "OSError: gcagent: cannot load libgcagent_client.so.1; tried GCAGENT_CLIENT_LIB " \
           "(/nonexistent/libgcagent_client.so.1)" in r.stderr, r.stderr


CONNECT = "import gcagent\ntry:\n  gcagent.Client(timeout_ms={})\nexcept gcagent.GcagentError as e:\n  print(e.code, e)"


def test_no_agent_is_an_error_naming_the_socket_at_once(tmp_path):
    """A socket that does not exist is "no agent" (2), not a timeout (3), though the client
    was given 10 minutes: it did not wait for one."""
    sock = tmp_path / "none.sock"
    r = python(CONNECT.format(600000), shim_env({"GCAGENT_SOCKET": str(sock)}))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"2 gcagent: connect to {sock}: no gcagent agent at {sock}: the socket does not exist; start "
                        "the agent first, or check that this is its agent.socket (GCAGENT_SOCKET); "
                        "GCAGENT_WAIT_FOR_AGENT=1 waits for an agent that is still starting\n"), r.stdout
    assert "waiting" not in r.stderr, r.stderr


def test_a_client_asked_to_wait_says_so_once_then_times_out(tmp_path):
    sock = tmp_path / "none.sock"
    r = python(CONNECT.format(300), shim_env({"GCAGENT_SOCKET": str(sock), "GCAGENT_WAIT_FOR_AGENT": "1"}))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"3 gcagent: connect to {sock}: no gcagent agent answered at {sock}"), r.stdout
    assert r.stderr.splitlines() == [f"gcagent: waiting for the agent at {sock} (up to 0.3 s)"], r.stderr


def test_a_waiting_client_connects_once_the_agent_starts(tmp_path):
    cluster = Cluster(tmp_path, 1)
    env = shim_env({"GCAGENT_SOCKET": cluster.sockets[0], "GCAGENT_WAIT_FOR_AGENT": "1"})
    client = subprocess.Popen([sys.executable, "-c", "import gcagent; c = gcagent.Client(timeout_ms=120000); "
                               "print(c.node_count, c.world_size)"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # The agent starts only once the client has said that it waits.
        assert client.stderr.readline() == f"gcagent: waiting for the agent at {cluster.sockets[0]} (up to 120 s)\n"
        with cluster:
            out, err = client.communicate(timeout=120)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert out == "1 1\n"


def test_bad_codec_params_in_the_environment():
    env = shim_env({"GCAGENT_CODEC_PARAMS": "threshold"})
    r = python("import gcagent.client as c; c.codec_from_env()", env)
    assert "ValueError: GCAGENT_CODEC_PARAMS: 'threshold' is not key=value" in r.stderr, r.stderr


@pytest.fixture
def agent(tmp_path, monkeypatch):
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))
    with Cluster(tmp_path, 1) as c:
        yield c


def test_reducer_with_one_trainer_returns_its_values(agent):
    import gcagent
    with gcagent.Client(agent.sockets[0], "solo", 0, 1) as client:
        assert (client.node_rank, client.node_count, client.world_size) == (0, 1, 1)
        reducer = gcagent.Reducer(client, codec="none")
        assert (reducer.rank(), reducer.size(), reducer.local_rank(), reducer.local_size()) == (0, 1, 0, 1)
        a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.full(5, 0.25, np.float32)
        out = reducer.reduce([(1, a, 0), (2, b, -1)])
        assert out[0].shape == (3, 4) and np.array_equal(out[0], a) and np.array_equal(out[1], b)
        # A new key re-declares; the old keys keep counting their iterations.
        out = reducer.reduce([(1, a * 2, 0), (3, np.ones(3, np.float64), -2)])
        assert np.array_equal(out[0], a * 2) and out[1].dtype == np.float32
        assert reducer._iteration == {1: 2, 2: 1, 3: 1}


def test_slots_reduce_in_place_and_outlive_their_declaration(agent):
    import gcagent
    with gcagent.Client(agent.sockets[0], "slots", 0, 1) as client:
        reducer = gcagent.Reducer(client, codec="none")
        a, b = reducer.slots([(1, 6, 0), (2, 3, -1)], result="sum")
        assert a.dtype == np.float32 and (a.size, b.size) == (6, 3)
        assert reducer.slots([(1, 6, 0), (2, 3, -1)], result="sum")[0] is a  # nothing changed: the same arrays
        a[:] = np.arange(6)
        b[:] = -1.5
        reducer.reduce_slots([1, 2])
        assert np.array_equal(a, np.arange(6, dtype=np.float32)) and np.array_equal(b, np.full(3, -1.5, np.float32))
        assert reducer._iteration == {1: 1, 2: 1}
        # A new key declares again: the old arrays stay readable (their own mapping), the keys
        # have new slots.
        c = reducer.slots([(1, 6, 0), (3, 4, -2)], result="sum")[0]
        assert c is not a and a[5] == 5.0
    assert a[4] == 4.0  # the client is closed; the array still maps the memory


@pytest.mark.parametrize("abi", ["current", "before wait_any"])
def test_waiting_for_any_key_answers_each_key_and_wakes_on_a_descriptor(agent, abi):
    """Client.wait_any, and with a library older than C ABI 5 (no gcagent_wait_any) the polling
    that stands in for it: the same answers."""
    import os
    import gcagent
    with gcagent.Client(agent.sockets[0], "any", 0, 1) as client:
        real = client._lib.abi_version
        client._lib.abi_version = real if abi == "current" else 4
        try:
            client.declare([gcagent.TensorSpec(7, 4, 0, "none"), gcagent.TensorSpec(8, 4, 0, "none")])
            client.buffer(7)[:] = 1.0
            client.buffer(8)[:] = 2.0
            client.submit(1, [7, 8])
            steps, done = [(1, 7), (1, 8)], []
            while steps:
                index, error = client.wait_any(steps, 5000)
                assert error is None and index is not None
                done.append(steps.pop(index)[1])
            assert sorted(done) == [7, 8] and client.buffer(8)[0] == 2.0
        finally:
            client._lib.abi_version = real
    # A key that cannot complete (the node's second trainer never submits): the timeout, or a
    # readable descriptor, ends the wait with (None, None).
    with gcagent.Client(agent.sockets[0], "stuck", 0, 2) as client:
        client._lib.abi_version = real if abi == "current" else 4
        try:
            client.declare([gcagent.TensorSpec(1, 4, 0, "none")])
            client.submit(1, [1])
            assert client.wait_any([(1, 1)], 50) == (None, None)
            wake = os.eventfd(1)
            try:
                assert client.wait_any([(1, 1)], -1, wake) == (None, None)
            finally:
                os.close(wake)
        finally:
            client._lib.abi_version = real


def test_an_unknown_codec_is_refused_at_declare(agent):
    import gcagent
    with gcagent.Client(agent.sockets[0], "bad", 0, 1) as client:
        reducer = gcagent.Reducer(client, codec="nosuch")
        with pytest.raises(gcagent.GcagentError, match="unknown codec 'nosuch'") as e:
            reducer.reduce([(1, np.zeros(4, np.float32), 0)])
        assert e.value.code == 5


def _each_node(cluster, job, work):
    """work(reducer, rank) on one thread per agent (one trainer each); their results by rank."""
    import threading

    import gcagent
    results, errors = [None] * cluster.n, []

    def run(rank):
        try:
            with gcagent.Client(cluster.sockets[rank], job, 0, 1) as client:
                results[rank] = work(gcagent.Reducer(client, codec="none"), rank)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((rank, e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(cluster.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def _values(rank, it, n):
    return np.random.default_rng(1000 * it + rank).standard_normal(n).astype(np.float32)


def test_three_nodes_sum_in_rank_order_and_average_with_one_division(tmp_path, monkeypatch):
    """Codec none, 3 agents: the sum is fp32 addition in rank order, bit for bit (whatever
    order the contributions arrive in), and the average is that sum divided once by 3."""
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))
    sizes = [1, 1000, 70001]

    def work(reducer, rank):
        out = []
        for it in range(1, 4):
            arrays = [(k, _values(rank, it * 10 + k, n), -k) for k, n in enumerate(sizes)]
            out.append((reducer.reduce(arrays, result="sum"),
                        reducer.reduce([(10 + k, a, p) for k, a, p in arrays])))
        return out

    with Cluster(tmp_path, 3, ["--scheduler.slice_elements", "4096"]) as c:
        results = _each_node(c, "exact", work)
    for it in range(1, 4):
        for k, n in enumerate(sizes):
            total = (_values(0, it * 10 + k, n) + _values(1, it * 10 + k, n)) + _values(2, it * 10 + k, n)
            average = total / np.float32(3)
            for rank, got in enumerate(results):
                summed, averaged = got[it - 1]
                assert np.array_equal(summed[k].view(np.uint32), total.view(np.uint32)), (it, k, rank)
                assert np.array_equal(averaged[k].view(np.uint32), average.view(np.uint32)), (it, k, rank)


def test_broadcast_is_bit_for_bit_whatever_the_codec(tmp_path, monkeypatch):
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))
    special = np.array([-0.0, 0.0, 1e-45, -3e-39, np.inf, -np.inf, 3.4e38, 1.0 / 3], np.float32)

    def work(reducer, rank):
        reducer.codec, reducer.params = "2bit", {"threshold": "0.5"}  # the gradients' codec: not used
        mine = np.concatenate([special, _values(rank, 7, 5000)]) if rank == 1 else np.full(5008, rank, np.float32)
        return reducer.broadcast([(0, mine.reshape(2, 2504), 0)], root=1)[0]

    with Cluster(tmp_path, 3) as c:
        results = _each_node(c, "broadcast", work)
    want = np.concatenate([special, _values(1, 7, 5000)]).reshape(2, 2504)
    for got in results:
        assert got.shape == (2, 2504) and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_result_kind_is_checked(agent):
    import gcagent
    with gcagent.Client(agent.sockets[0], "kind", 0, 1) as client:
        with pytest.raises(ValueError, match="result 'mean' is not one of: average, sum"):
            gcagent.Reducer(client).reduce([(1, np.zeros(4, np.float32), 0)], result="mean")


def test_a_tensor_chooses_its_topology_from_python(tmp_path, monkeypatch):
    """Under an agent default of ps, keys reduced with topology="allgather" sum in rank order
    bit for bit on every node; topology="ring" gives every node the same bits, the sum in
    ring order (each slice's ring ends at its owner), within fp32 rounding of it."""
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))
    sizes = [1, 1000, 70001]

    def work(reducer, rank):
        arrays = [(k, _values(rank, 50 + k, n), -k) for k, n in enumerate(sizes)]
        return (reducer.reduce(arrays, result="sum", topology="allgather"),
                reducer.reduce([(10 + k, a, p) for k, a, p in arrays], result="sum", topology="ring"))

    with Cluster(tmp_path, 3, ["--scheduler.slice_elements", "4096"]) as c:
        results = _each_node(c, "topologies", work)
    for k, n in enumerate(sizes):
        total = (_values(0, 50 + k, n) + _values(1, 50 + k, n)) + _values(2, 50 + k, n)
        for rank, (allgathered, ringed) in enumerate(results):
            assert np.array_equal(allgathered[k].view(np.uint32), total.view(np.uint32)), (k, rank)
            assert np.array_equal(ringed[k].view(np.uint32), results[0][1][k].view(np.uint32)), (k, rank)
            np.testing.assert_allclose(ringed[k], total, rtol=1e-5, atol=1e-5)


def test_a_topology_is_checked(agent):
    import gcagent
    with gcagent.Client(agent.sockets[0], "topology", 0, 1) as client:
        with pytest.raises(ValueError, match="topology 'tree' is not one of: ps, ring, allgather, auto"):
            gcagent.Reducer(client).reduce([(1, np.zeros(4, np.float32), 0)], topology="tree")
        with pytest.raises(gcagent.GcagentError, match="reduce.topology 'tree' is not one of: ps, ring, allgather, auto"):
            gcagent.Reducer(client).reduce([(1, np.zeros(4, np.float32), 0)], codec="none",
                                           params={"reduce.topology": "tree"})


def test_a_shard_one_trainer_holds_is_averaged_over_the_nodes(tmp_path, monkeypatch):
    """reduce.contributor: 2 nodes x 2 trainers; tensor 1 is local rank 0's shard, tensor 2
    local rank 1's, tensor 3 everyone's. Each shard's holders alone submit it and get the
    average over the nodes, bit for bit; the shared tensor is averaged over all four. A
    trainer that submits another's shard is told whose it is."""
    import threading

    import gcagent
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))
    n = 70001
    specs = [gcagent.TensorSpec(1, n, 0, "none", {"reduce.contributor": "0"}),
             gcagent.TensorSpec(2, n, -1, "none", {"reduce.contributor": "1"}),
             gcagent.TensorSpec(3, n, -2, "none")]
    mine = {0: [1, 3], 1: [2, 3]}

    def values(node, local, key, it):
        return _values(100 * node + 10 * local + key, it, n)

    results, errors = {}, []

    def trainer(c, node, local):
        try:
            with gcagent.Client(c.sockets[node], "hsdp", local, 2) as client:
                client.declare(specs)
                if local == 0:  # refused, and nothing else of the job disturbed
                    with pytest.raises(gcagent.GcagentError,
                                       match=r"tensor 2 is contributed by local rank 1 alone \(reduce.contributor\); "
                                             r"local rank 0 submitted it"):
                        client.submit(1, [2])
                        client.wait(1, [2], 60000)
                for it in range(1, 4):
                    for key in mine[local]:
                        client.buffer(key)[:] = values(node, local, key, it)
                    client.submit(it, mine[local])
                    assert client.wait(it, mine[local], 60000)
                    results[(node, local, it)] = {key: client.buffer(key).copy() for key in mine[local]}
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((node, local, e))

    with Cluster(tmp_path, 2, ["--scheduler.slice_elements", "4096"]) as c:
        threads = [threading.Thread(target=trainer, args=(c, node, local)) for node in range(2) for local in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for it in range(1, 4):
        for node in range(2):
            for local, key in ((0, 1), (1, 2)):
                want = (values(0, local, key, it) + values(1, local, key, it)) / np.float32(2)
                got = results[(node, local, it)][key]
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (it, node, key)
            # Each node's two trainers first (their local sum), then the nodes in rank order.
            local_sums = [values(m, 0, 3, it) + values(m, 1, 3, it) for m in range(2)]
            want = (local_sums[0] + local_sums[1]) / np.float32(4)
            for local in range(2):
                got = results[(node, local, it)][3]
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (it, node, local)
