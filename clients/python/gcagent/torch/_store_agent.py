"""The node's agent for the torch.distributed backend, found or started through the Store that
init_process_group hands the backend: no launcher or rendezvous of gcagent's own.

Where a trainer stands comes from torchrun's variables: GROUP_RANK (its node), LOCAL_RANK and
LOCAL_WORLD_SIZE; without them every rank is a node of its own. With GCAGENT_SOCKET set (an
agent beside the trainers, as in the container deployment) that agent is used. Otherwise each
node's local rank 0 starts one: every node publishes its agent's peer address in the store,
rank 0 a per-job token and run name, and once every address is in, local rank 0 starts the
agent with them and says so in the store; the node's other trainers wait for that word. The
agent lives as long as local rank 0's process (it gets SIGTERM if that process dies) and is
stopped when every local trainer of its node has finished."""

import atexit
import logging
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Optional

from gcagent._node_agent import NodeAgent, find_agent
from gcagent.client import ERR_INVALID_ARGUMENT, ERR_IO, Client, GcagentError

AGENT_START_TIMEOUT_S = 60
FINISH_WAIT_S = 30  # local rank 0 waits this long for its node's other trainers before it stops the agent
log = logging.getLogger("gcagent.torch.backend")


@dataclass
class Placement:
    """Where this trainer stands: its node and its place on it."""
    rank: int
    world: int
    node: int
    nodes: int
    local_rank: int
    local_size: int

    @staticmethod
    def from_environment(rank: int, world: int) -> "Placement":
        def env(name):
            value = os.environ.get(name)
            try:
                return int(value) if value not in (None, "") else None
            except ValueError:
                raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent backend: {name}={value!r} is not a number")
        local_size = env("LOCAL_WORLD_SIZE") or 1
        local_rank = env("LOCAL_RANK") or 0
        node = env("GROUP_RANK")
        if node is None:
            node = rank // local_size
        p = Placement(rank, world, node, world // local_size, local_rank, local_size)
        if world % local_size or not 0 <= local_rank < local_size or rank != node * local_size + local_rank:
            raise GcagentError(ERR_INVALID_ARGUMENT,
                               f"gcagent backend: rank {rank} of {world} is local rank {local_rank} of {local_size} on "
                               f"node {node} (GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE): the agents number trainers "
                               "node by node (rank = node x local size + local rank) and need the same number on "
                               "every node, as torchrun gives them")
        return p


class NodeAgentLink:
    """This trainer's agent: its socket, the job's name on it, and (on the local rank 0 that
    started it) the agent process."""

    def __init__(self, store, placement: Placement, timeout: timedelta):
        self.placement = placement
        self.store = store
        self.agent: Optional[NodeAgent] = None
        self._finished = False
        p = placement
        if p.rank == 0:
            store.set("gcagent/run", secrets.token_hex(6))
            store.set("gcagent/token", secrets.token_hex(32))
        self.run = store.get("gcagent/run").decode()
        sidecar = os.environ.get("GCAGENT_SOCKET")
        self.job = os.environ.get("GCAGENT_JOB") or f"torch-{self.run}"
        if sidecar:
            self.socket = sidecar
            if p.local_rank == 0:
                store.set(f"gcagent/peer/{p.node}", "")  # a node that starts agents must not wait for this one's
        else:
            self.run_dir = Path(tempfile.gettempdir()) / f"gcagent-{self.run}"
            self.socket = str(self.run_dir / f"node{p.node}.sock")
            if p.local_rank == 0:
                self._start_agent(timeout)
            else:
                store.wait([f"gcagent/ready/{p.node}"], timeout)
                why = store.get(f"gcagent/ready/{p.node}").decode()
                if why != "ok":
                    raise GcagentError(ERR_IO, f"gcagent backend: node {p.node}'s agent did not start: {why}")
            atexit.register(self.finish)
        # The shims' own connections in this process (the comm hook's State, hsdp, DiLoCo, a
        # Reducer) reach the same agent, as a job beside the groups' (torch-RUN-GROUP).
        for name, value in (("GCAGENT_SOCKET", self.socket), ("GCAGENT_JOB", self.job),
                            ("GCAGENT_LOCAL_RANK", str(p.local_rank)), ("GCAGENT_LOCAL_SIZE", str(p.local_size))):
            os.environ.setdefault(name, value)

    def _start_agent(self, timeout: timedelta):
        from gcagent.run import address_towards, free_port
        p, store = self.placement, self.store
        self.run_dir.mkdir(mode=0o700, exist_ok=True)
        host = address_towards(os.environ.get("MASTER_ADDR") or "127.0.0.1")
        mine = f"{host}:{free_port(host)}"
        store.set(f"gcagent/peer/{p.node}", mine)
        keys = [f"gcagent/peer/{n}" for n in range(p.nodes)]
        store.wait(keys, timeout)
        peers = [store.get(k).decode() for k in keys]
        sidecars = [n for n, peer in enumerate(peers) if not peer]
        if sidecars:
            why = (f"node(s) {', '.join(map(str, sidecars))} use an agent of their own (GCAGENT_SOCKET) and node "
                   f"{p.node} none: set GCAGENT_SOCKET on every node or on none")
            store.set(f"gcagent/ready/{p.node}", why)
            raise GcagentError(ERR_INVALID_ARGUMENT, f"gcagent backend: {why}")
        token_file = self.run_dir / f"node{p.node}.token"
        token_file.write_text(store.get("gcagent/token").decode())
        token_file.chmod(0o600)
        try:
            self.agent = NodeAgent(find_agent(), self.socket, self.run_dir / f"agent{p.node}.log", p.node, peers, mine,
                                   None, [f"security.token_file={token_file}"])
            self.agent.start()
            self.agent.wait_ready(AGENT_START_TIMEOUT_S)
        except GcagentError as e:
            store.set(f"gcagent/ready/{p.node}", str(e))
            raise
        log.info("gcagent backend: node %d started its agent (log %s, peers %s)", p.node, self.agent.log_path,
                 ",".join(peers))
        store.set(f"gcagent/ready/{p.node}", "ok")

    def connect(self, job: str, local_rank: int, local_size: int) -> Client:
        client = Client(self.socket, job=job, local_rank=local_rank, local_size=local_size,
                        wait_for_agent=False)  # a started one is up once its node said "ok"
        if client.node_rank != self.placement.node:
            client.close()
            raise GcagentError(ERR_INVALID_ARGUMENT,
                               f"gcagent backend: the agent at {self.socket} is node {client.node_rank}'s, this "
                               f"trainer is on node {self.placement.node} (GROUP_RANK)")
        return client

    def finish(self):
        """Says this trainer is done; local rank 0 then stops the agent once every trainer of
        its node is (or FINISH_WAIT_S has passed)."""
        if self._finished:
            return
        self._finished = True
        p = self.placement
        try:
            done = self.store.add(f"gcagent/done/{p.node}", 1)
            deadline = time.monotonic() + FINISH_WAIT_S
            while self.agent is not None and done < p.local_size and time.monotonic() < deadline:
                time.sleep(0.05)
                done = self.store.add(f"gcagent/done/{p.node}", 0)
        except Exception:  # noqa: BLE001 - the store's host may be gone already: stop anyway
            pass
        if self.agent is not None:
            self.agent.stop()
            self.agent.remove_segments()
