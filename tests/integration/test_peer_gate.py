"""What a stranger can send to an agent's peer port (transport.listen) and to UCX's own ports:
the bytes that used to abort any agent inside UCX, garbage, half handshakes and floods. The
gate refuses each (logged, counted by reason), UCX never sees them, the agent's memory stays
bounded, and a job on the same agents keeps reducing exactly."""

import os
import re
import socket
import struct
import subprocess
import sys
import urllib.request

import pytest

from cluster import Cluster, Namespaces, wait_for
from test_dataplane import assert_trainers_ok, stop_clean
from test_faults import restart_agent
from test_hostile_input import rss_bytes
from test_security import TOKEN, TokenCluster, token_file

GATE_MAGIC, GATE_VERSION = 0x48414347, 1
HELLO, PROOF = 1, 3
UCX_TCP_MAGIC = 0xCAFEBABE12345678  # what UCX's TCP interface expects first


def frame(kind, body):
    return struct.pack("<IBBHI", GATE_MAGIC, GATE_VERSION, kind, 0, len(body)) + body


def refusals(cluster, rank, reason):
    text = urllib.request.urlopen(f"http://{cluster.metrics_address(rank)}/metrics", timeout=5).read().decode()
    m = re.search(r'gcagent_peer_refusals_total\{reason="' + reason + r'"\} (\S+)', text)
    return float(m.group(1)) if m else 0.0


def healthy_job(cluster):
    assert_trainers_ok(cluster.trainers(1, ["--tensors", "40000,17", "--iterations", "3", "--check", "exact"]), cluster)


def peer_port(cluster, rank):
    host, port = cluster.peers[rank].rsplit(":", 1)
    return host, int(port)


def test_garbage_half_handshakes_and_floods_never_reach_ucx(tmp_path):
    f = token_file(tmp_path, "token", TOKEN)
    with TokenCluster(tmp_path, [f, f], ["--transport.max_handshakes_per_address", "4",
                                         "--transport.peer_timeout", "5", "--transport.heartbeat_interval", "0.5"]) as c:
        healthy_job(c)
        target = peer_port(c, 1)
        before = rss_bytes(c.procs[1].pid)
        # The connection that aborted every agent inside UCX's sockaddr listener, and garbage.
        for payload in [bytes(64), os.urandom(4096), b"GET / HTTP/1.1\r\n\r\n",
                        struct.pack("<Q", UCX_TCP_MAGIC) + os.urandom(64),
                        struct.pack("<IBBHI", GATE_MAGIC, GATE_VERSION, HELLO, 0, 1 << 30)]:
            with socket.create_connection(target) as s:
                s.sendall(payload)
                s.settimeout(60)
                try:
                    while s.recv(4096):
                        pass
                except ConnectionResetError:
                    pass
        # A proof before any hello, and a hello that claims a rank it cannot have.
        for payload in [frame(PROOF, bytes(33)), frame(HELLO, struct.pack("<II", 1, 2) + bytes(16))]:
            with socket.create_connection(target) as s:
                s.sendall(payload)
                s.settimeout(60)
                assert b"handshake:" in s.recv(4096)  # the refusal says why
        # Half handshakes that hold their slot, and a crowd behind them.
        half = []
        for _ in range(4):
            s = socket.create_connection(target)
            s.sendall(frame(HELLO, struct.pack("<II", 0, 2) + bytes(16)))
            half.append(s)
        crowd = []
        for _ in range(200):
            try:
                crowd.append(socket.create_connection(target))
            except OSError:
                break
        wait_for(lambda: refusals(c, 1, "over_capacity") >= 100, what="the crowd to be refused")
        wait_for(lambda: refusals(c, 1, "timed_out") >= 4, what="the half handshakes to time out")
        for s in half + crowd:
            s.close()
        assert refusals(c, 1, "malformed") >= 7
        assert rss_bytes(c.procs[1].pid) - before < 32 << 20
        healthy_job(c)  # the same agents, the same link: still exact
        assert c.procs[1].poll() is None
        assert "peer 0 is down" not in c.log(1)  # the link between the agents never noticed
        stop_clean(c)
        log = c.log(1)
        assert "refused a peer link from 127.0.0.1 (malformed): handshake: not a gcagent peer (bad magic)" in log
        assert "more refused since the last report" in log or log.count("(over_capacity)") == 1
        assert log.count("(over_capacity)") < 10, "a flood must not flood the log"


def test_a_peer_with_another_token_is_refused_by_the_acceptor_too(tmp_path):
    a, b = token_file(tmp_path, "a", TOKEN), token_file(tmp_path, "b", "another-token")
    with TokenCluster(tmp_path, [a, b]) as c:
        wait_for(lambda: refusals(c, 1, "unauthenticated") >= 1, what="the acceptor to refuse")
        wait_for(lambda: refusals(c, 0, "unauthenticated") >= 1, what="the connector to refuse")
        c.stop()
        assert "peer authentication failed" in c.log(0)
        assert "refused a peer link from 127.0.0.1 (unauthenticated)" in c.log(1)


STRANGER = """
import socket, struct, sys, os
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
except OSError as e:
    print("refused:", e)
    sys.exit(0)
s.sendall(struct.pack("<Q", 0xCAFEBABE12345678) + bytes([0]) + struct.pack("<I", 3134220761) + os.urandom(64))
print("connected")
"""


def test_strangers_cannot_reach_ucx_ports_only_peers_can(tmp_path):
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    data_port = 18600
    with Namespaces(3) as ns:  # agents in the first two, a stranger in the third
        c = Cluster(tmp_path, 2, ["--transport.data_ports", f"{data_port}-{data_port}"], namespaces=ns)
        c.peers = c.peers[:2]
        with c:
            healthy_job(c)
            for rank in range(2):
                listening = subprocess.run(ns.prefix(rank) + ["ss", "-ltnH"], capture_output=True, text=True).stdout
                assert f"{ns.addresses[rank]}:{data_port}" in listening, listening
                assert f"0.0.0.0:{data_port}" not in listening  # one device, not every one
            for rank in range(2):
                r = subprocess.run(ns.prefix(2) + [sys.executable, "-c", STRANGER, ns.addresses[rank], str(data_port)],
                                   capture_output=True, text=True, timeout=60)
                assert r.stdout.startswith("refused:"), r.stdout + r.stderr
            # The gate's port is open to the stranger, and refuses it there: closed without a
            # word (it is not a gcagent peer), logged and counted.
            r = subprocess.run(ns.prefix(2) + [sys.executable, "-c",
                                               "import socket,sys; s=socket.create_connection((sys.argv[1], 18515), timeout=10);"
                                               "s.sendall(bytes(64)); s.settimeout(30); print(s.recv(100))",
                                               ns.addresses[0]], capture_output=True, text=True, timeout=60)
            assert r.stdout.strip() == "b''", r.stdout + r.stderr
            wait_for(lambda: f"refused a peer link from {ns.addresses[2]} (malformed): handshake: not a gcagent peer "
                     "(bad magic)" in c.log(0), what="the stranger's refusal in the log")
            healthy_job(c)
            assert all(p.poll() is None for p in c.procs)
            stop_clean(c)


def test_a_peer_restarted_at_a_new_address_gets_in_once_it_authenticates(tmp_path):
    """A rescheduled pod comes back at another address: its peer list entry (a name, in a real
    cluster) no longer resolves to what the other agents' UCX ports admit. Its handshake with
    the cluster token lets it in: the filter follows the authenticated peers, and a job runs
    again. Rank 0 moves: it dials rank 1, whose UCX port then sees the new address."""
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    with Namespaces(2) as ns, Cluster(tmp_path, 2, namespaces=ns) as c:
        healthy_job(c)
        c.procs[0].kill()
        c.procs[0].wait()
        inner, old = f"gca{ns.tag}v0", ns.addresses[0]
        new = old.rsplit(".", 1)[0] + ".200"
        subprocess.run(ns.prefix(0) + ["ip", "addr", "del", f"{old}/24", "dev", inner], check=True)
        subprocess.run(ns.prefix(0) + ["ip", "addr", "add", f"{new}/24", "dev", inner], check=True)
        c.peers[0] = f"{new}:18515"  # its own entry: where it listens now (rank 1 keeps the old list)
        restart_agent(c, 0)
        wait_for(lambda: f"rank 0 authenticated from {new}: UCX's listening ports admit that address" in c.log(1),
                 what="rank 1 admitting rank 0's new address")
        assert_trainers_ok(c.trainers(1, ["--tensors", "40000,17", "--iterations", "3", "--check", "exact"],
                                      job="after-the-move"), c)
        stop_clean(c)
