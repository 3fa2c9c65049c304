"""The health endpoint against real agents: /readyz answers 503 until every peer is up and
200 after; /healthz answers 200 throughout; the last error appears with its kind, message
and time where the agent decided it. Peers are given by host name (localhost), as a
Kubernetes headless service gives them; a name that does not resolve stops the start with
an error naming it."""

import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from cluster import AGENT, Cluster, free_ports, wait_for


def get(address, path):
    """(status, parsed JSON body) of GET http://address/path."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def by_name(cluster):
    cluster.peers = [f"localhost:{p}" for p in free_ports(cluster.n)]
    return cluster


def start_agent(cluster, rank):
    log = open(cluster.logs[rank], "w")
    proc = subprocess.Popen(cluster.agent_command(rank), stdout=log, stderr=subprocess.STDOUT, env=cluster.env)
    cluster.procs.append(proc)
    return proc


def test_ready_only_when_every_peer_is_up_and_the_last_error_shows(tmp_path):
    c = by_name(Cluster(tmp_path, 2))
    try:
        first = start_agent(c, 0)
        address = c.metrics_address(0)
        # Alone, rank 0 is alive but not ready: its peer is missing.
        time.sleep(0.5)
        status, body = get(address, "/readyz")
        assert status == 503, body
        assert body["status"] == "not ready"
        assert (body["peers_connected"], body["peers_expected"], body["serving"]) == (0, 1, False)
        assert body["last_error"] is None and body["errors"] == 0
        status, live = get(address, "/healthz")
        assert status == 200 and live["rank"] == 0

        second = start_agent(c, 1)
        other = c.metrics_address(1)
        status, body = wait_for(lambda: (lambda r: r if r[0] == 200 else None)(get(address, "/readyz")),
                                what="rank 0 ready")
        assert (body["status"], body["peers_connected"], body["peers_expected"], body["serving"]) == \
            ("ready", 1, 1, True), body
        wait_for(lambda: get(other, "/readyz")[0] == 200, what="rank 1 ready")

        # Trainers connect; the gauge reaches the health body within the 1 s refresh.
        trainer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        trainer.connect(c.sockets[0])
        trainer.sendall(b"NOPE" + bytes(12))  # a bad magic: the agent answers, counts and records it
        trainer.recv(4096)
        trainer.close()
        body = wait_for(lambda: (lambda b: b if b["last_error"] else None)(get(address, "/healthz")[1]),
                        what="the bad message as last error")
        assert body["last_error"]["kind"] == "bad_message", body
        assert body["last_error"]["message"].startswith("trainer message: "), body
        assert "bad magic" in body["last_error"]["message"], body
        assert body["errors"] == 1
        assert 0 <= body["last_error"]["seconds_ago"] < 10
        assert body["last_error"]["time"].endswith("Z")

        # The peer dies: rank 0 is no longer ready and says why.
        second.send_signal(signal.SIGKILL)
        second.wait()
        status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(get(address, "/readyz")),
                                what="rank 0 not ready after its peer died")
        assert body["peers_connected"] == 0 and body["peers_expected"] == 1, body
        assert body["last_error"]["kind"] == "peer_lost", body
        assert body["last_error"]["message"].startswith("peer rank 1 lost: "), body
        assert get(address, "/healthz")[0] == 200
        # /metrics is still the Prometheus text on the same port, counting the same errors.
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
            text = r.read().decode()
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert 'gcagent_errors_total{kind="bad_message"} 1' in text
        assert 'gcagent_errors_total{kind="peer_lost"} 1' in text
        try:
            urllib.request.urlopen(f"http://{address}/nope", timeout=5)
            raise AssertionError("an unknown path was served")
        except urllib.error.HTTPError as e:
            assert e.code == 404
            assert b"no such path '/nope'" in e.read()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
    finally:
        c.stop()


def test_a_peer_name_that_does_not_resolve_stops_the_start_naming_it(tmp_path):
    port = free_ports(1)[0]
    r = subprocess.run([str(AGENT), "--agent.socket", str(tmp_path / "a.sock"), "--metrics.listen", "",
                        "--transport.peers", f"localhost:{port},no-such-peer.invalid:{port}",
                        "--agent.node_rank", "0", "--transport.listen", "127.0.0.1:0",
                        "--security.allow_unauthenticated", "true"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert f"gcagent: address 'no-such-peer.invalid:{port}': cannot resolve: " in r.stderr, r.stderr
