"""What a bad day or a stranger hands an agent: bad configuration, connections that hold
the control socket, frames that announce more than they send, an agent out of descriptors.
Each is refused or outlived with a message naming the cause, never a crash, a hang or a
deleted file, and a healthy job on the same agent keeps reducing exactly."""

import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cluster import AGENT, BUILD, TRAINER, Cluster, wait_for
from test_dataplane import assert_trainers_ok, stop_clean

MAGIC, VERSION, HELLO = 0x43414347, 1, 1
DEADLINE = 120  # seconds to wait for an event; never a bound on how fast it happens


def run_agent(*args, timeout=60):
    return subprocess.run([str(AGENT), *args], capture_output=True, text=True, timeout=timeout)


def test_a_configuration_that_is_not_a_regular_file_is_refused(tmp_path):
    for path in ["/dev/zero", str(tmp_path)]:
        r = run_agent("--validate", "--config", path)
        assert r.returncode == 2 and f"{path}: the configuration is not a regular file" in r.stderr, r


def test_a_deeply_dotted_key_is_refused_before_parsing(tmp_path):
    config = tmp_path / "deep.toml"
    config.write_text("[agent]\n" + "a" + ".a" * 200000 + " = 1\n")
    r = run_agent("--validate", "--config", str(config))
    assert r.returncode == 2, r
    assert "deep.toml:2: more than 64 dotted-key parts or nested tables and arrays" in r.stderr, r


def test_validate_checks_ports_and_the_socket_path():
    r = run_agent("--validate", "--metrics.listen", "127.0.0.1:99999")
    assert r.returncode == 2 and "port '99999' is not in [0, 65535]" in r.stderr, r
    r = run_agent("--validate", "--agent.socket", "/run/" + "s" * 115)
    assert r.returncode == 2 and "more than the 107 a Unix socket path can hold" in r.stderr, r


def test_a_file_at_the_socket_path_is_never_deleted(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    r = run_agent("--agent.socket", str(victim), "--agent.shm_prefix", "gcagent-test-victim",
                  "--metrics.listen", "127.0.0.1:0", "--transport.listen", "127.0.0.1:0")
    assert r.returncode == 1, r
    assert f"control socket {victim}: a file that is not a socket is there; not removing it" in r.stderr, r
    assert victim.read_text() == "keep me"


def connect(cluster):
    wait_for(lambda: os.path.exists(cluster.sockets[0]), what="the control socket")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(cluster.sockets[0])
    return s


def closed_by_agent(s):
    """True once the agent has closed the connection (EOF after any reply)."""
    s.settimeout(DEADLINE)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def has_room(cluster, n):
    """True if n connections at once are accepted: each gets the agent's answer to a bad
    magic (a refused one gets none); the agent then closes them itself."""
    probes = [connect(cluster) for _ in range(n)]
    try:
        for p in probes:
            p.sendall(b"NOPE" + bytes(12))
        return all(b"bad magic" in p.recv(4096) for p in probes) and all(closed_by_agent(p) for p in probes)
    except OSError:
        return False
    finally:
        for p in probes:
            p.close()


def healthy_job(cluster):
    assert_trainers_ok(cluster.trainers(2, ["--tensors", "1000,17", "--iterations", "2", "--check", "exact"]), cluster)


def test_frames_announcing_more_than_a_hello_are_refused_before_any_memory_is_taken(tmp_path):
    with Cluster(tmp_path, 1) as c:
        s = connect(c)
        s.close()
        before = rss_bytes(c.procs[0].pid)
        held = []
        for _ in range(64):  # each announces 16 MiB, the protocol's largest body, and sends none
            s = connect(c)
            s.sendall(struct.pack("<IHHII", MAGIC, VERSION, HELLO, 16 << 20, 1))
            held.append(s)
        for s in held:
            reply = s.recv(4096)
            assert b"bytes before hello (at most 65536)" in reply, reply
            assert closed_by_agent(s)
        assert rss_bytes(c.procs[0].pid) - before < 32 << 20
        healthy_job(c)
        stop_clean(c)


def test_silent_and_stalled_connections_are_closed_at_their_deadlines(tmp_path):
    with Cluster(tmp_path, 1, ["--agent.hello_timeout", "0.5", "--agent.frame_timeout", "0.5"]) as c:
        silent = connect(c)
        stalled = connect(c)
        stalled.sendall(struct.pack("<IHHII", MAGIC, VERSION, HELLO, 100, 1) + b"\x05\x00")
        assert closed_by_agent(silent) and closed_by_agent(stalled)
        healthy_job(c)  # a trainer that says hello in time is not touched by the deadline
        stop_clean(c)
        assert "no hello in time; disconnecting" in c.log(0)


def test_connections_over_the_cap_are_closed_and_the_job_keeps_working(tmp_path):
    with Cluster(tmp_path, 1, ["--agent.max_connections", "4"]) as c:
        held = [connect(c) for _ in range(4)]
        extra = [connect(c) for _ in range(8)]
        for s in extra:
            assert closed_by_agent(s)
        for s in held + extra:
            s.close()
        wait_for(lambda: has_room(c, 3), what="room for 3 connections")  # our closes reach the agent
        healthy_job(c)
        stop_clean(c)
        assert "4 trainer connections are open; refusing more until some close" in c.log(0)


class FewDescriptors(Cluster):
    """Agents started under a low RLIMIT_NOFILE (prlimit), as a crowded machine gives."""

    def agent_command(self, rank):
        return ["prlimit", "--nofile=256:256", *super().agent_command(rank)]


def sanitized_build():
    cache = BUILD / "CMakeCache.txt"
    return cache.exists() and "GCAGENT_SANITIZE:BOOL=ON" in cache.read_text()


def test_an_agent_out_of_descriptors_recovers_once_they_are_freed(tmp_path):
    if sanitized_build():
        # UBSan's vptr check probes memory through a pipe: with no descriptor left it takes
        # every virtual call for a bad vptr and aborts the agent. The release tree runs this.
        pytest.skip("UBSan cannot check vptrs in a process out of descriptors")
    with FewDescriptors(tmp_path, 1, ["--agent.max_connections", "4096"]) as c:
        held = []
        for _ in range(400):  # more than the agent can accept: the rest wait in the backlog
            try:
                held.append(connect(c))
            except OSError:
                break
        wait_for(lambda: "accept failed: Too many open files" in c.log(0), what="the agent to run out of descriptors")
        for s in held:
            s.close()
        wait_for(lambda: "accepting trainers again" in c.log(0), what="the agent to accept again")
        healthy_job(c)
        stop_clean(c)
        assert c.log(0).count("accept failed:") == 1  # once per streak, not once per retry


def test_an_agent_running_as_root_says_so(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the warning is for agents started as root")
    r = run_agent("--validate")
    assert r.returncode == 0, r
    assert "running as root: root is needed only to bind, to read a root-only token file and to give segments to " \
        "trainers of another uid; set agent.user" in r.stdout + r.stderr


def test_agent_user_drops_root_once_the_ports_are_bound(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only an agent started as root can drop to another user")
    import pwd
    nobody = pwd.getpwnam("nobody")
    run_dir = Path(tempfile.mkdtemp(prefix="gcagent-user-"))  # reachable by nobody, unlike tmp_path
    os.chown(run_dir, nobody.pw_uid, nobody.pw_gid)
    os.chmod(run_dir, 0o755)
    try:
        c = Cluster(tmp_path, 2, ["--agent.user", "nobody"])
        c.sockets = [str(run_dir / f"agent{r}.sock") for r in range(2)]
        with c:
            healthy_job(c)
            for p in c.procs:
                with open(f"/proc/{p.pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f)
                assert status["Uid"].split() == [str(nobody.pw_uid)] * 4, status["Uid"]
                assert status["Gid"].split() == [str(nobody.pw_gid)] * 4, status["Gid"]
                assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
            stop_clean(c)
            assert "running as user nobody (uid" in c.log(0)
            assert "running as root" not in c.log(0)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_agent_user_is_checked_by_validate():
    r = run_agent("--validate", "--agent.user", "no-such-gcagent-user")
    assert r.returncode == 2 and "agent.user 'no-such-gcagent-user': no such user" in r.stderr, r


class PrivateShmCluster(Cluster):
    """One agent whose /dev/shm is a private tmpfs of `size` (a mount namespace of its own);
    its trainers join that namespace to open their segments."""

    def __init__(self, tmp_path, size):
        super().__init__(tmp_path, 1)
        self.size = size

    def agent_command(self, rank):
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f'mount -t tmpfs -o size={self.size} tmpfs /dev/shm && exec "$@"', "sh"] + super().agent_command(rank)

    def run_trainer(self, job, args, timeout=120):
        cmd = ["nsenter", "-t", str(self.procs[0].pid), "-m", str(TRAINER), "--socket", self.sockets[0], "--job", job,
               "--local-rank", "0", "--local-size", "1", "--world-rank", "0", "--world-size", "1",
               "--timeout-ms", str(timeout * 1000), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr


def test_a_full_dev_shm_refuses_the_declare_and_the_agent_serves_on(tmp_path):
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a private tmpfs here (needs root)")
    healthy = ["--tensors", "100000,17", "--iterations", "3", "--check", "exact"]
    with PrivateShmCluster(tmp_path, "16m") as c:
        wait_for(lambda: os.path.exists(c.sockets[0]), what="the control socket")
        rc, out = c.run_trainer("healthy", healthy)
        assert rc == 0, out
        before = rss_bytes(c.procs[0].pid)
        # 32 MB of gradients for a 16 MiB /dev/shm: refused, naming /dev/shm and the size.
        rc, out = c.run_trainer("victim", ["--tensors", "8000000", "--iterations", "1", "--check", "none"])
        assert rc != 0
        assert re.search(r"shm segment \S+: needs 32000000 bytes, /dev/shm has \d+ free", out), out
        rc, out = c.run_trainer("healthy", healthy)  # the same agent, still exact
        assert rc == 0, out
        assert c.procs[0].poll() is None
        assert rss_bytes(c.procs[0].pid) - before < 16 << 20
        stop_clean(c)


def test_the_loopback_backend_is_refused_for_agents_of_their_own():
    r = run_agent("--validate", "--transport.backend", "loopback", "--transport.peers", "127.0.0.1:1,127.0.0.1:2")
    assert r.returncode == 2, r
    assert "transport.backend loopback links the agents of one process only; 2 agents in transport.peers need ucx" \
        in r.stderr, r
    assert run_agent("--validate", "--transport.backend", "loopback").returncode == 0
