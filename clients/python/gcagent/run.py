"""gcagent-run (python -m gcagent.run): torchrun for gcagent. Run once per node:

    gcagent-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\
        --nproc-per-node 4 train.py --epochs 10

It starts this node's agent (control socket, peer port, log), meets the other nodes' launchers
at --master-addr:--master-port (node 0 hosts a small key-value store there) to agree one
transport.peers list, or takes the list from --hosts, then starts --nproc-per-node trainers
with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT) and the shims' (GCAGENT_SOCKET, GCAGENT_LOCAL_RANK,
GCAGENT_LOCAL_SIZE, GCAGENT_NODE_METRICS). SIGINT and SIGTERM are passed on to the trainers.
When they are done the agent is stopped; the exit status is non-zero if any trainer or the
agent failed."""

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from gcagent._node_agent import NodeAgent, die_with_parent, find_agent
from gcagent._rendezvous import rendezvous
from gcagent.client import GcagentError

DEFAULT_AGENT_PORT = 18515  # transport.listen's default, for --hosts entries without a port
TRAINER_GRACE_S = 10        # after SIGTERM, before SIGKILL
HEALTH_EVERY_S = 1.0        # how often the agent is asked whether a node is lost


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="gcagent-run", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nnodes", type=int, default=None, help="number of nodes (default 1, or the length of --hosts)")
    ap.add_argument("--node-rank", type=int, default=0, help="this node's rank, 0 to nnodes-1")
    ap.add_argument("--nproc-per-node", type=int, default=1, help="trainer processes on this node")
    ap.add_argument("--master-addr", default="127.0.0.1", help="node 0's address: the rendezvous, and the "
                    "trainers' MASTER_ADDR")
    ap.add_argument("--master-port", type=int, default=29500, help="the rendezvous port on node 0 (with --hosts "
                    "or one node: the trainers' MASTER_PORT)")
    ap.add_argument("--hosts", default="", help="every node's agent as host[:port] in rank order, instead of the "
                    f"rendezvous (port {DEFAULT_AGENT_PORT} when absent)")
    ap.add_argument("--node-addr", default="", help="the address the other nodes reach this one at (default: the "
                    "local address that routes to --master-addr)")
    ap.add_argument("--agent-port", type=int, default=0, help="this agent's peer port (default: a free one)")
    ap.add_argument("--agent", default=None, help="the gcagent binary (default: GCAGENT_BINARY, the wheel's, PATH)")
    ap.add_argument("--agent-config", default=None, help="a TOML configuration for the agent")
    ap.add_argument("--agent-option", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="an agent setting, e.g. compress.min_elements=0 (repeatable)")
    ap.add_argument("--token-file", default=None, help="the cluster token the agents authenticate each other with "
                    "(the same file on every node, e.g. a mounted Kubernetes Secret); default: a fresh one per job "
                    "from the rendezvous. With --hosts there is none: name one, or pass --agent-option "
                    "security.allow_unauthenticated=true")
    ap.add_argument("--job", default=None, help="GCAGENT_JOB for the trainers (default: theirs, else 'default')")
    ap.add_argument("--log-dir", default=None, help="keep the agent's log here as agent<node-rank>.log")
    ap.add_argument("--rdzv-timeout", type=float, default=300, help="seconds to wait for the other nodes")
    ap.add_argument("-m", "--module", action="store_true", help="run the script as a Python module (python -m)")
    ap.add_argument("--no-python", action="store_true", help="run the script as a program, not with Python")
    ap.add_argument("script", help="the trainer script (or module, or program)")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    a.hosts = [h.strip() for h in a.hosts.split(",") if h.strip()]
    if a.hosts:
        if a.nnodes is not None and a.nnodes != len(a.hosts):
            ap.error(f"--nnodes {a.nnodes} but --hosts lists {len(a.hosts)} nodes")
        a.nnodes = len(a.hosts)
    a.nnodes = a.nnodes or 1
    if a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        ap.error(f"--node-rank {a.node_rank} is not in [0, {a.nnodes})")
    if a.nproc_per_node < 1:
        ap.error("--nproc-per-node must be at least 1")
    if a.module and a.no_python:
        ap.error("--module and --no-python exclude each other")
    return a


def free_port(host: str) -> int:
    """A port free on `host` now, below the kernel's ephemeral range: a port that bind(0)
    handed out may go to an outgoing connection before the agent listens on it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(1000):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    raise GcagentError(2, f"gcagent-run: no free port on {host}")


def address_towards(host: str) -> str:
    """This machine's address on the route to `host` (its own address when host is local)."""
    ip = socket.gethostbyname(host)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))  # UDP: picks the route, sends nothing
        return s.getsockname()[0]


def split_host(entry: str):
    host, sep, port = entry.rpartition(":")
    return (host, int(port)) if sep else (entry, DEFAULT_AGENT_PORT)


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


class Launch:
    """One node's run: agent, agreement, trainers, supervision."""

    def __init__(self, a):
        self.a = a
        self.signal_received: Optional[int] = None
        self.supervising = False
        self.trainers: List[subprocess.Popen] = []
        self.agent: Optional[NodeAgent] = None
        self.run_dir = Path(tempfile.mkdtemp(prefix="gcagent-run-"))
        self.log_dir = Path(a.log_dir) if a.log_dir else self.run_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.who = f"gcagent-run: node {a.node_rank}"

    def say(self, text: str):
        print(f"{self.who}: {text}", file=sys.stderr, flush=True)

    def agree(self):
        """transport.peers, this agent's listen address, MASTER_ADDR and MASTER_PORT."""
        a = self.a
        if a.hosts:
            peers = [f"{h}:{p}" for h, p in map(split_host, a.hosts)]
            self.use_token(None)
            return peers, peers[a.node_rank], split_host(a.hosts[0])[0], a.master_port
        if a.nnodes == 1:
            return [], None, a.master_addr, a.master_port
        host = a.node_addr or address_towards(a.master_addr)
        mine = f"{host}:{a.agent_port or free_port(host)}"
        trainer_port = free_port(address_towards(a.master_addr)) if a.node_rank == 0 else None
        agreed = rendezvous(a.master_addr, a.master_port, a.node_rank, a.nnodes, a.nproc_per_node, mine,
                            a.rdzv_timeout, trainer_port)
        self.use_token(agreed.token)
        return agreed.peers, mine, a.master_addr, agreed.trainer_port

    def use_token(self, generated: Optional[str]):
        """Hands the agent its cluster token: --token-file, else the rendezvous's (a file of
        mode 0600 in the run directory); with neither the agent refuses its peers unless the
        options allow them unauthenticated, and says so."""
        a = self.a
        if a.token_file:
            a.agent_option = [f"security.token_file={a.token_file}", *a.agent_option]
        elif generated:
            path = self.run_dir / "cluster.token"
            path.touch(mode=0o600)
            path.write_text(generated)
            a.agent_option = [f"security.token_file={path}", *a.agent_option]

    def trainer_command(self) -> List[str]:
        a = self.a
        if a.no_python:
            return [a.script, *a.script_args]
        return [sys.executable, *(["-m"] if a.module else []), a.script, *a.script_args]

    def start_trainers(self, master_addr: str, master_port: int, metrics: Optional[str]):
        a = self.a
        n = a.nproc_per_node
        for local in range(n):
            env = dict(os.environ, RANK=str(a.node_rank * n + local), WORLD_SIZE=str(a.nnodes * n),
                       LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(n), GROUP_RANK=str(a.node_rank),
                       GROUP_WORLD_SIZE=str(a.nnodes), MASTER_ADDR=master_addr, MASTER_PORT=str(master_port),
                       GCAGENT_SOCKET=self.agent.socket_path, GCAGENT_LOCAL_RANK=str(local),
                       GCAGENT_LOCAL_SIZE=str(n), GCAGENT_WAIT_FOR_AGENT="1")
            if a.job:
                env["GCAGENT_JOB"] = a.job
            if metrics:
                env["GCAGENT_NODE_METRICS"] = metrics
            if n > 1 and "OMP_NUM_THREADS" not in os.environ:
                env["OMP_NUM_THREADS"] = "1"  # as torchrun: trainers sharing a node do not oversubscribe it
            self.trainers.append(subprocess.Popen(self.trainer_command(), env=env, preexec_fn=die_with_parent))

    def on_signal(self, signum, _frame):
        self.signal_received = signum
        if self.supervising:
            for p in self.trainers:
                if p.poll() is None:
                    p.send_signal(signum)
        else:  # still meeting the other nodes or starting: give up at once
            raise Interrupted(signum)

    def stop_trainers(self):
        for p in self.trainers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TRAINER_GRACE_S
        for p in self.trainers:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def supervise(self) -> int:
        """0 once every trainer succeeded; 1 at the first failure of a trainer or the agent
        (the other trainers are stopped), or once the agent says a node is lost for good (its
        /healthz names one: unreachable past transport.reduction_timeout); 128 + the signal
        when one was passed on."""
        next_health = time.monotonic() + HEALTH_EVERY_S
        while True:
            codes = [p.poll() for p in self.trainers]
            for local, code in enumerate(codes):
                if code not in (None, 0):
                    if self.signal_received is None:
                        self.say(f"trainer local rank {local} (rank {self.a.node_rank * len(codes) + local}) "
                                 f"exited with code {code}; stopping the others")
                    self.stop_trainers()
                    return 128 + self.signal_received if self.signal_received else 1
            if all(code == 0 for code in codes):
                if self.signal_received:
                    return 128 + self.signal_received
                # Trainers that catch gcagent's errors finish their loops whatever failed: a
                # node lost at the end means the last steps did not complete on every node.
                lost = self.agent.lost_nodes_now() if self.a.nnodes > 1 else []
                for rank, why in lost:
                    self.say(f"the trainers finished while node {rank} was unreachable ({why}): their last steps "
                             "did not complete on every node")
                return 1 if lost else 0
            if self.agent.poll() is not None:
                self.say(f"the agent exited with code {self.agent.poll()} while trainers ran; stopping them; last "
                         f"lines of {self.agent.log_path}:\n{self.agent.log_tail()}")
                self.stop_trainers()
                return 1
            if self.a.nnodes > 1 and time.monotonic() >= next_health:
                next_health = time.monotonic() + HEALTH_EVERY_S
                lost = self.agent.lost_node()
                if lost is not None and self.signal_received is None:
                    self.say(f"node {lost[0]} is lost, the job cannot go on: {lost[1]}; stopping the trainers")
                    self.stop_trainers()
                    return 1
            time.sleep(0.1)

    def run(self) -> int:
        a = self.a
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, self.on_signal)
        status = 1
        try:
            binary = find_agent(a.agent)
            peers, listen, master_addr, master_port = self.agree()
            self.agent = NodeAgent(binary, str(self.run_dir / "control.sock"), self.log_dir / f"agent{a.node_rank}.log",
                                   a.node_rank, peers, listen, a.agent_config, a.agent_option,
                                   metrics_port=free_port("127.0.0.1"))
            self.agent.start()
            # After a rendezvous every node's agent starts within moments of the others: the
            # trainers import their framework (seconds) meanwhile, their clients waiting for the
            # socket (GCAGENT_WAIT_FOR_AGENT). From a --hosts list the other nodes may start
            # much later, longer than a client waits: the trainers start once the agent is ready.
            early = not a.hosts
            if early:
                self.start_trainers(master_addr, master_port, self.agent.metrics)
            metrics = self.agent.wait_ready(a.rdzv_timeout)
            if not early:
                self.start_trainers(master_addr, master_port, metrics)
            self.supervising = True
            status = self.supervise()
        except GcagentError as e:
            print(e, file=sys.stderr, flush=True)
        except Interrupted as e:
            self.stop_trainers()
            status = 128 + e.signum
        finally:
            self.supervising = False
            status = self.finish(status)
        return status

    def finish(self, status: int) -> int:
        """Stops the agent; a clean run whose agent fails to stop cleanly fails too. Signals
        are ignored meanwhile: the stop is bounded (SIGKILL after a grace period)."""
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        self.stop_trainers()  # any still running: the agent failed at start
        agent_died = self.agent is not None and self.agent.poll() not in (None, 0)
        agent_status = self.agent.stop() if self.agent else 0
        if self.agent:
            done = self.agent.log_value("done: ")
            if done:
                self.say(f"agent done: {done}")
        if agent_status != 0 and not agent_died:
            self.say(f"the agent exited with code {agent_status} when stopped; last lines of "
                     f"{self.agent.log_path}:\n{self.agent.log_tail()}")
            status = status or 1
        if self.agent:
            removed = self.agent.remove_segments()  # a killed agent cannot
            if removed:
                self.say(f"removed {len(removed)} shared-memory segment(s) the agent left: {', '.join(removed)}")
        if self.agent and agent_status != 0 and self.a.log_dir is None:
            # The log the failure message named stays; the rest of the run's folder goes.
            for path in self.run_dir.iterdir():
                if path != self.agent.log_path:
                    path.unlink(missing_ok=True)
            self.say(f"the agent's log is kept at {self.agent.log_path}")
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        return status


def main(argv=None) -> int:
    return Launch(parse_args(sys.argv[1:] if argv is None else argv)).run()


if __name__ == "__main__":
    sys.exit(main())
