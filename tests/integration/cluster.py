"""Starts gcagent agents and test trainers as real processes, on loopback TCP or inside
network namespaces that the test creates itself."""

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

BUILD = Path(os.environ.get("GCAGENT_BUILD_DIR", Path(__file__).resolve().parents[2] / "build" / "release"))
AGENT = BUILD / "agent" / "gcagent"
TRAINER = BUILD / "clients" / "gcagent_test_trainer"


def free_ports(n):
    """n ports that are free now, below the kernel's ephemeral range: a port the kernel
    handed out with bind(0) may be given again to an outgoing connection (UCX's, for one)
    before the agent that should listen on it starts. Suites run at once get disjoint ranges
    (TEST_PORT_RANGE=first-last, from scripts/test.sh): a port free now may be taken by the
    other suite's agent before this one's binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    first, last = 10000, max(low, 10001) - 1
    if os.environ.get("TEST_PORT_RANGE"):
        a, b = (int(v) for v in os.environ["TEST_PORT_RANGE"].split("-"))
        first, last = max(first, a), min(last, b)
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    socks, ports = [], []
    while len(ports) < n:
        port = rng.randrange(first, last + 1)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(port)
    for s in socks:
        s.close()
    return ports


def wait_for(predicate, timeout=120, what="condition"):
    """predicate()'s first true value, polled until `timeout` seconds (a generous deadline for
    an event, never a bound on how fast it happens)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finish(procs, timeout):
    """[(returncode, output)] once every process ended or the deadline passed (then killed)."""
    deadline = time.time() + timeout
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(trainer timed out)"
        results.append((p.returncode, out))
    return results


class Namespaces:
    """N network namespaces joined by veth pairs through a bridge: 10.77.x.(r+1)/24."""

    def __init__(self, n):
        self.tag = uuid.uuid4().hex[:6]
        self.names = [f"gca{self.tag}n{r}" for r in range(n)]
        self.bridge = f"gca{self.tag}br"
        self.subnet = 77
        self.addresses = [f"10.{self.subnet}.{int(self.tag[:2], 16)}.{r + 1}" for r in range(n)]

    @staticmethod
    def available():
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return False, "network namespaces need root and iproute2"
        probe = f"gcaprobe{os.getpid()}"
        r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if r.returncode != 0:
            return False, f"ip netns add failed: {r.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return True, ""

    def _ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def __enter__(self):
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("link", "set", self.bridge, "up")
        for r, ns in enumerate(self.names):
            host, inner = f"gca{self.tag}h{r}", f"gca{self.tag}v{r}"
            self._ip("netns", "add", ns)
            self._ip("link", "add", host, "type", "veth", "peer", "name", inner)
            self._ip("link", "set", host, "master", self.bridge)
            self._ip("link", "set", host, "up")
            self._ip("link", "set", inner, "netns", ns)
            self._ip("-n", ns, "addr", "add", f"{self.addresses[r]}/24", "dev", inner)
            self._ip("-n", ns, "link", "set", inner, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def prefix(self, rank):
        return ["ip", "netns", "exec", self.names[rank]]

    # A MAC no interface has: a node that sends to it sends into the void, and nothing says so.
    VOID_MAC = "02:00:00:00:00:01"

    def partition(self, a, b, cut=True):
        """Cuts (or heals) every link between the nodes in `a` and those in `b`, silently, as a
        failed switch port or a firewall's DROP does: each side's address for the other
        resolves to a MAC nobody has, so frames go nowhere and no error comes back; TCP only
        retransmits. (The kernel here has neither netem nor iptables.)"""
        for x, y in [(x, y) for x in a for y in b] + [(y, x) for x in a for y in b]:
            dev = f"gca{self.tag}v{x}"
            if cut:
                self._ip("-n", self.names[x], "neigh", "replace", self.addresses[y], "lladdr", self.VOID_MAC, "dev",
                         dev, "nud", "permanent")
            else:
                subprocess.run(["ip", "-n", self.names[x], "neigh", "del", self.addresses[y], "dev", dev],
                               capture_output=True)

    def shape(self, rate):
        """Limits every node's link to `rate` (tc syntax, e.g. "100mbit") both ways: a token
        bucket on each veth end (the kernel has no netem, so no delay is added)."""
        for r, ns in enumerate(self.names):
            for cmd in (["tc", "qdisc", "replace", "dev", f"gca{self.tag}h{r}", "root"],
                        ["tc", "-n", ns, "qdisc", "replace", "dev", f"gca{self.tag}v{r}", "root"]):
                subprocess.run(cmd + ["tbf", "rate", rate, "burst", "256kb", "latency", "10ms"], check=True,
                               capture_output=True, text=True)


class Cluster:
    """N agents, each with its own control socket, all in one job mesh."""

    def __init__(self, tmp_path, n, extra=(), namespaces=None, env=None):
        self.n = n
        self.dir = Path(tmp_path)
        self.namespaces = namespaces
        self.prefix = f"gcatest{uuid.uuid4().hex[:8]}"
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("GCAGENT_LOG_LEVEL", "info")
        if namespaces:
            port = 18515
            self.peers = [f"{a}:{port}" for a in namespaces.addresses]
        else:
            self.peers = [f"127.0.0.1:{p}" for p in free_ports(n)]
        self.sockets = [str(self.dir / f"agent{r}.sock") for r in range(n)]
        self.logs = [self.dir / f"agent{r}.log" for r in range(n)]
        self.extra = list(extra)
        self.rank_extra = {}  # rank -> flags for that agent only (after `extra`)
        self.procs = []
        # One cluster token, as an operator would give every node (agents with peers need one).
        self.token_file = self.dir / f"{self.prefix}.token"
        if n > 1:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.token_file.write_text(secrets.token_hex(32))
            self.token_file.chmod(0o600)

    def agent_command(self, rank):
        cmd = [str(AGENT), "--agent.socket", self.sockets[rank], "--agent.shm_prefix", self.prefix,
               "--agent.summary_interval", "0", "--agent.codec_threads", "1",
               "--metrics.listen", "127.0.0.1:0"]  # the default port would collide between agents
        if self.n > 1:
            host = self.peers[rank].rsplit(":", 1)[0]
            cmd += ["--transport.peers", ",".join(self.peers), "--agent.node_rank", str(rank),
                    "--transport.listen", f"{host}:0", "--security.token_file", str(self.token_file)]
        cmd += self.extra + self.rank_extra.get(rank, [])
        return (self.namespaces.prefix(rank) if self.namespaces else []) + cmd

    def start(self):
        for r in range(self.n):
            log = open(self.logs[r], "w")
            self.procs.append(subprocess.Popen(self.agent_command(r), stdout=log, stderr=subprocess.STDOUT,
                                               env=self.env))
        return self

    def trainers(self, local_size, args, timeout=120, job="job"):
        """Runs local_size trainers per agent to completion; returns [(rc, output)]."""
        world = self.n * local_size
        procs = []
        for r in range(self.n):
            for l in range(local_size):
                cmd = [str(TRAINER), "--socket", self.sockets[r], "--job", job, "--local-rank", str(l),
                       "--local-size", str(local_size), "--world-rank", str(r * local_size + l),
                       "--world-size", str(world), "--timeout-ms", str(timeout * 1000), *args]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                              env=self.env))
        return finish(procs, timeout)

    def stop(self, timeout=20):
        codes = []
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append("hung")
        return codes

    def log(self, rank):
        return self.logs[rank].read_text()

    def metrics_address(self, rank, timeout=60):
        """host:port of an agent's Prometheus endpoint, from its last "metrics on" log line (a
        restarted agent appends to its log)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in reversed(self.log(rank).splitlines()):
                if "metrics on " in line:
                    return line.rsplit("metrics on ", 1)[1].strip()
            time.sleep(0.05)
        raise AssertionError(f"agent {rank} logged no metrics address:\n{self.log(rank)[-2000:]}")

    def leftovers(self):
        """Shared-memory segments and sockets this cluster left behind."""
        shm = [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(self.prefix)]
        socks = [s for s in self.sockets if os.path.exists(s)]
        return shm + socks

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
