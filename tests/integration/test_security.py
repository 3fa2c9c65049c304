"""Peer authentication end to end: agents that share the cluster token reduce; an agent
with another token is refused, logged and counted, and its peers never accept a gradient
from it; a token file others can read stops the start; the token never reaches a log."""

import os
import re
import subprocess
import time
import urllib.request

from cluster import AGENT, Cluster
from test_dataplane import assert_trainers_ok, stop_clean

TOKEN = "4f1c2b7e9a0d3c5e-cluster-token"


def token_file(tmp_path, name, token, mode=0o600):
    path = tmp_path / name
    path.write_text(token + "\n")
    os.chmod(path, mode)
    return str(path)


class TokenCluster(Cluster):
    """A cluster whose agents may each read a different token file."""

    def __init__(self, tmp_path, files, extra=()):
        super().__init__(tmp_path, len(files), extra)
        self.files = files

    def agent_command(self, rank):
        return super().agent_command(rank) + ["--security.token_file", self.files[rank]]


def metric(cluster, rank, name, labels):
    text = urllib.request.urlopen(f"http://{cluster.metrics_address(rank)}/metrics", timeout=5).read().decode()
    m = re.search(re.escape(name + "{" + labels + "}") + r" (\S+)", text)
    return float(m.group(1)) if m else None


def test_agents_with_the_same_token_reduce_and_never_log_it(tmp_path):
    f = token_file(tmp_path, "token", TOKEN)
    with TokenCluster(tmp_path, [f, f, f], ["--scheduler.slice_elements", "4096"]) as c:
        assert_trainers_ok(c.trainers(1, ["--tensors", "40000,17", "--iterations", "3", "--check", "exact"]), c)
        assert metric(c, 0, "gcagent_errors_total", 'kind="auth_failed"') == 0
        stop_clean(c)
        for r in range(3):
            assert TOKEN not in c.log(r)
            assert "not authenticated" not in c.log(r)


def test_an_agent_with_another_token_is_refused_and_counted(tmp_path):
    good = token_file(tmp_path, "token", TOKEN)
    bad = token_file(tmp_path, "other", "not-the-cluster-token")
    # Rank 0 connects to rank 1, which holds another token: rank 0 refuses rank 1's proof.
    with TokenCluster(tmp_path, [good, bad]) as c:
        deadline = time.time() + 60
        while time.time() < deadline and "peer authentication failed" not in c.log(0):
            time.sleep(0.1)
        assert "peer authentication failed: the peer claiming rank 1" in c.log(0), c.log(0)[-2000:]
        refused = None
        while time.time() < deadline and not refused:
            refused = metric(c, 0, "gcagent_errors_total", 'kind="auth_failed"')
            time.sleep(0.2)
        assert refused and refused >= 1, refused
        # Neither side ever considered the other up, so no trainer was accepted.
        for r in range(2):
            assert "is up" not in c.log(r), c.log(r)[-2000:]
            assert not os.path.exists(c.sockets[r])
            assert TOKEN not in c.log(r) and "not-the-cluster-token" not in c.log(r)
        assert c.stop() == [0, 0]


def test_a_token_file_others_can_read_stops_the_start(tmp_path):
    f = token_file(tmp_path, "token", TOKEN, mode=0o644)
    r = subprocess.run([str(AGENT), "--validate", "--security.token_file", f], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert f"security.token_file '{f}' has mode 0644" in r.stderr, r.stderr
    assert TOKEN not in r.stderr + r.stdout
    missing = subprocess.run([str(AGENT), "--validate", "--security.token_file", f + ".absent"],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "No such file" in missing.stderr, missing


def test_bad_timeouts_and_unknown_groups_stop_the_start():
    r = subprocess.run([str(AGENT), "--validate", "--transport.heartbeat_interval", "5", "--transport.peer_timeout", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "transport.heartbeat_interval (5 s) must be below transport.peer_timeout (2 s)" \
        in r.stderr, r
    r = subprocess.run([str(AGENT), "--validate", "--agent.group", "gcagent-no-such-group"], capture_output=True, text=True)
    assert r.returncode == 2 and "agent.group 'gcagent-no-such-group': no such group" in r.stderr, r


def test_a_group_opens_the_socket_and_segments_to_it(tmp_path):
    import grp
    import stat
    group = grp.getgrgid(os.getgid())
    with Cluster(tmp_path, 1, ["--agent.group", group.gr_name]) as c:
        deadline = time.time() + 60
        while not os.path.exists(c.sockets[0]) and time.time() < deadline:
            time.sleep(0.05)
        st = os.stat(c.sockets[0])
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == group.gr_gid, oct(st.st_mode)
        assert_trainers_ok(c.trainers(1, ["--tensors", "1000", "--iterations", "2", "--check", "exact"]), c)
        stop_clean(c)
