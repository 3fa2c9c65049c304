"""The launcher's agent: where the gcagent binary is, and one agent process per node (its
command line, its log, waiting until trainers can connect, stopping it with SIGTERM)."""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from gcagent import _library
from gcagent.client import GcagentError

ERR_INVALID, ERR_IO, ERR_TIMEOUT = 1, 2, 3
AGENT_NAME = "gcagent"
# The launcher's own variables: not the agent's (which refuses GCAGENT_ names it does not know).
LAUNCHER_VARIABLES = ("GCAGENT_BINARY", "GCAGENT_NODE_METRICS")


def find_agent(explicit: Optional[str] = None, search_path: bool = True) -> str:
    """The gcagent binary: --agent, else GCAGENT_BINARY, else the one bundled in the wheel, else
    the build tree's recorded at pip-install time, else PATH (unless search_path is false).
    Raises GcagentError naming every place tried."""
    if explicit or os.environ.get("GCAGENT_BINARY"):
        path = explicit or os.environ["GCAGENT_BINARY"]
        if not os.access(path, os.X_OK):
            raise GcagentError(ERR_INVALID, f"gcagent-run: the agent {path} is not an executable file")
        return path
    tried = []
    bundled = _library.BUNDLED_DIR / AGENT_NAME
    tried.append(f"the wheel's {bundled}")
    if os.access(bundled, os.X_OK):
        return str(bundled)
    try:
        from gcagent._installed_path import AGENT
    except ImportError:
        AGENT = ""
    if AGENT:
        tried.append(f"the path recorded at install time ({AGENT})")
        if os.access(AGENT, os.X_OK):
            return AGENT
    on_path = shutil.which(AGENT_NAME) if search_path else None
    if search_path:
        tried.append("PATH")
    if on_path:
        return on_path
    raise GcagentError(ERR_INVALID, "gcagent-run: cannot find the gcagent binary; tried " + ", ".join(tried) +
                       ". Pass --agent or set GCAGENT_BINARY to build/release/agent/gcagent")


def agent_main():
    """The `gcagent` command a pip install puts on PATH: runs the package's agent with the
    arguments given (gcagent --print-config, --validate, --config ...). PATH is not searched:
    the `gcagent` found there would be this command itself."""
    import sys
    try:
        binary = find_agent(search_path=False)
    except GcagentError as e:
        print(str(e).replace("gcagent-run: ", "gcagent: ", 1), file=sys.stderr)
        sys.exit(2)
    os.execv(binary, [binary, *sys.argv[1:]])


try:
    _LIBC = ctypes.CDLL(None)  # loaded here: the forked child only makes the call
except OSError:
    _LIBC = None


def die_with_parent():
    """preexec_fn: the child gets SIGTERM if the launcher dies, even by SIGKILL (Linux)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def agent_preexec():
    """preexec_fn of the agent: as die_with_parent, and it starts with SIGINT and SIGTERM
    blocked (the agent keeps them so until its loop can stop cleanly): a stop sent while it is
    still loading its libraries waits for it instead of killing it with nothing logged."""
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


class NodeAgent:
    """One agent for this node's trainers."""

    def __init__(self, binary: str, socket_path: str, log_path: Path, node_rank: int, peers: Sequence[str],
                 listen: Optional[str], config: Optional[str], options: Sequence[str], metrics_port: int = 0):
        self.socket_path = socket_path
        self.log_path = Path(log_path)
        self.command: List[str] = [binary]
        if config:
            self.command += ["--config", config]
        # Set here, so the user's options (after) may replace the last two: a port of its own for
        # metrics (two nodes on one host must not share 9464) and segments named per launcher.
        self.shm_prefix = f"gcarun{os.getpid()}"
        self.command += ["--agent.socket", socket_path, "--agent.node_rank", str(node_rank),
                         "--metrics.listen", f"127.0.0.1:{metrics_port}", "--agent.shm_prefix", self.shm_prefix]
        # Known before the agent runs when the port is: trainers may start beside it.
        self.metrics: Optional[str] = f"127.0.0.1:{metrics_port}" if metrics_port else None
        if len(peers) > 1:
            self.command += ["--transport.peers", ",".join(peers), "--transport.listen", listen]
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or "." not in key:
                raise GcagentError(ERR_INVALID, f"gcagent-run: --agent-option '{option}' is not section.key=value")
            self.command.append(f"--{key.lstrip('-')}={value}")
            if key.lstrip("-") == "agent.shm_prefix":
                self.shm_prefix = value
            if key.lstrip("-") == "metrics.listen":
                self.metrics = None  # the user's: read from the log once the agent runs
        self.proc: Optional[subprocess.Popen] = None

    def start(self):
        with open(self.log_path, "ab") as log:
            # A session of its own: a Ctrl-C at the terminal reaches the trainers, and the agent
            # outlives them until they have finished.
            env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, preexec_fn=agent_preexec)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_value(self, marker: str) -> Optional[str]:
        """What follows the last `marker` in the log, or None."""
        try:
            found = [l.split(marker, 1)[1].strip() for l in self.log_path.read_text(errors="replace").splitlines()
                     if marker in l]
        except OSError:
            return None
        return found[-1] if found else None

    def wait_ready(self, timeout: float) -> Optional[str]:
        """Waits until the control socket exists; returns the metrics host:port (None when
        metrics are off). Raises with the log's last lines if the agent exits first."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket_path):
            if self.proc.poll() is not None:
                raise GcagentError(ERR_IO, f"gcagent-run: the agent exited with code {self.proc.returncode} at start; "
                                           f"last lines of {self.log_path}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise GcagentError(ERR_TIMEOUT, f"gcagent-run: the agent made no control socket within {timeout:g} s; "
                                                f"last lines of {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.05)
        self.metrics = self.log_value("metrics on ") or self.metrics
        return self.metrics

    def health(self) -> dict:
        """The agent's /healthz body; {} when it cannot be asked (metrics off, busy, stopping)."""
        if not self.metrics:
            return {}
        try:
            with urllib.request.urlopen(f"http://{self.metrics}/healthz", timeout=2) as r:
                body = json.loads(r.read())
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def lost_node(self) -> Optional[Tuple[int, str]]:
        """(rank, why) of a member node the agent says its jobs cannot go on without (/healthz
        "lost_node": unreachable past transport.reduction_timeout); None while there is none."""
        lost = self.health().get("lost_node")
        return (int(lost["rank"]), str(lost["why"])) if isinstance(lost, dict) else None

    def lost_nodes_now(self) -> List[Tuple[int, str]]:
        """(rank, why) of the member nodes unreachable now that did not say goodbye (/healthz
        "away_nodes")."""
        away = self.health().get("away_nodes") or []
        return [(int(a["rank"]), str(a["why"])) for a in away if isinstance(a, dict) and not a.get("shut_down")]

    def remove_segments(self) -> List[str]:
        """Removes what the agent left in /dev/shm under its prefix (it cannot when killed);
        returns the names removed."""
        removed = []
        for path in Path("/dev/shm").glob(f"{self.shm_prefix}-*"):
            try:
                path.unlink()
                removed.append(path.name)
            except OSError:
                pass
        return removed

    def poll(self) -> Optional[int]:
        return self.proc.poll() if self.proc else None

    def stop(self, grace: float = 30) -> int:
        """SIGTERM (the agent fails what is in flight, removes its segments and socket, logs
        its "done:" line), SIGKILL after `grace` seconds. Returns its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
