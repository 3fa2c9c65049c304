"""The launcher's rendezvous: node 0 hosts a tiny TCP key-value store at --master-addr:
--master-port (torchrun's static rendezvous, without torch); every node writes its agent's
address there and reads everyone's, so all agree on one transport.peers list, and node 0 puts
a fresh cluster token there for the job's agents (whoever reaches the store before the job
starts could read it: keep the master port inside the cluster, as torchrun's).

The store speaks one JSON object per line: {"op": "set", "key", "value"} (a key is written
once: a second write is an error, which is how a node rank used twice is caught) and
{"op": "get", "key", "timeout"} (waits for the key). It lives only until every node has read
the list: nothing listens there once the trainers run."""

import json
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from gcagent.client import GcagentError

ERR_INVALID, ERR_IO, ERR_TIMEOUT = 1, 2, 3
MAX_LINE = 64 * 1024  # a request is a key and a short value; anything longer is refused


class StoreServer:
    """The key-value store, served by a thread per connection until close()."""

    def __init__(self, host: str, port: int):
        self._values: Dict[str, str] = {}
        self._changed = threading.Condition()
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="gcagent-rendezvous", daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket):
        with conn, conn.makefile("rwb") as f:
            for line in iter(lambda: f.readline(MAX_LINE + 1), b""):
                if len(line) > MAX_LINE:
                    return
                try:
                    reply = self._answer(json.loads(line))
                except (ValueError, KeyError, TypeError) as e:
                    reply = {"error": f"bad request: {e}"}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    def _answer(self, req) -> dict:
        key = str(req["key"])
        with self._changed:
            if req["op"] == "set":
                if key in self._values:
                    return {"error": f"'{key}' is already set"}
                self._values[key] = str(req["value"])
                self._changed.notify_all()
                return {"ok": True}
            if req["op"] == "get":
                deadline = time.monotonic() + float(req.get("timeout", 0))
                while key not in self._values and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return {"timeout": True}
                    self._changed.wait(left)
                if key not in self._values:
                    return {"error": "the store closed"}
                return {"value": self._values[key]}
        return {"error": f"unknown op '{req['op']}'"}

    def close(self):
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._sock.close()


class StoreClient:
    """One connection to the store, made within `timeout` seconds (node 0 may start later)."""

    def __init__(self, host: str, port: int, timeout: float):
        self.where = f"{host}:{port}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise GcagentError(ERR_TIMEOUT, f"gcagent-run: no rendezvous at {self.where} within {timeout:g} s "
                                                    f"({e}); is node 0 started with the same --master-addr "
                                                    f"and --master-port?") from None
                time.sleep(0.2)
        self._sock.settimeout(None)
        self._file = self._sock.makefile("rwb")

    def _call(self, req: dict) -> dict:
        try:
            self._file.write(json.dumps(req).encode() + b"\n")
            self._file.flush()
            line = self._file.readline(MAX_LINE + 1)
        except OSError as e:
            raise GcagentError(ERR_IO, f"gcagent-run: rendezvous at {self.where}: {e}") from None
        if not line:
            raise GcagentError(ERR_IO, f"gcagent-run: rendezvous at {self.where} closed the connection "
                                       "(node 0 stopped?)")
        return json.loads(line)

    def set(self, key: str, value: str):
        reply = self._call({"op": "set", "key": key, "value": value})
        if "error" in reply:
            raise GcagentError(ERR_INVALID, f"gcagent-run: rendezvous: {reply['error']}")

    def get(self, key: str, timeout: float) -> str:
        reply = self._call({"op": "get", "key": key, "timeout": timeout})
        if reply.get("timeout"):
            raise GcagentError(ERR_TIMEOUT, f"gcagent-run: rendezvous: '{key}' did not appear within {timeout:g} s")
        if "error" in reply:
            raise GcagentError(ERR_IO, f"gcagent-run: rendezvous: {reply['error']}")
        return reply["value"]

    def close(self):
        self._file.close()
        self._sock.close()


@dataclass
class Agreement:
    peers: List[str]   # every agent's host:port in node-rank order: transport.peers
    trainer_port: int  # MASTER_PORT for the trainers' own process group (node 0 picked it)
    token: str = ""    # the job's cluster token (node 0 made it): the agents authenticate each other


def rendezvous(master: str, port: int, node_rank: int, nnodes: int, nproc: int, address: str,
               timeout: float, trainer_port: Optional[int] = None) -> Agreement:
    """Publishes this node's agent address and returns what every node agreed. Node 0 hosts
    the store (and passes trainer_port); it returns once every node has read the list."""
    server = StoreServer(_bind_host(master), port) if node_rank == 0 else None
    try:
        client = StoreClient(master, port, timeout)
        try:
            mine = {"address": address, "nnodes": nnodes, "nproc": nproc}
            try:
                client.set(f"node/{node_rank}", json.dumps(mine))
            except GcagentError as e:
                raise GcagentError(e.code, f"gcagent-run: node rank {node_rank} joined twice: another launcher "
                                           f"already holds it ({e})") from None
            if node_rank == 0:
                client.set("trainer_port", str(trainer_port))
                client.set("token", secrets.token_hex(32))
            deadline = time.monotonic() + timeout
            peers = []
            for r in range(nnodes):  # node 0's entry first: every node compares itself with it
                try:
                    theirs = json.loads(client.get(f"node/{r}", max(0.0, deadline - time.monotonic())))
                except GcagentError as e:
                    if e.code != ERR_TIMEOUT:
                        raise
                    raise GcagentError(ERR_TIMEOUT, f"gcagent-run: node {r} did not join the rendezvous at "
                                                    f"{client.where} within {timeout:g} s") from None
                for what, flag in (("nnodes", "--nnodes"), ("nproc", "--nproc-per-node")):
                    if theirs[what] != mine[what]:
                        # Node 0 keeps the store up until the others have seen what it saw, so
                        # each of them says which flag too instead of finding the store gone.
                        client.set(f"checked/{node_rank}", "1")
                        if server is not None:
                            for other in range(1, nnodes):
                                try:
                                    client.get(f"checked/{other}", max(0.0, deadline - time.monotonic()))
                                except GcagentError:
                                    break
                        raise GcagentError(ERR_INVALID, f"gcagent-run: node {r} runs with {flag} {theirs[what]}, "
                                                        f"node {node_rank} with {mine[what]}: every node must "
                                                        "pass the same")
                peers.append(theirs["address"])
            client.set(f"checked/{node_rank}", "1")
            agreed = Agreement(peers, int(client.get("trainer_port", max(0.0, deadline - time.monotonic()))),
                               client.get("token", max(0.0, deadline - time.monotonic())))
            client.set(f"read/{node_rank}", "1")
            if server is not None:  # the store may go once every node has the list
                for r in range(nnodes):
                    client.get(f"read/{r}", max(0.0, deadline - time.monotonic()))
            return agreed
        finally:
            client.close()
    finally:
        if server is not None:
            server.close()


def _bind_host(master: str) -> str:
    """Node 0 listens on the master address when it is one of its own, else on every address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((socket.gethostbyname(master), 0))
        return master
    except OSError:
        return ""
