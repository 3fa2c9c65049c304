"""Runs framework trainer scripts (trainers/*.py) as real processes against real agents: the
Cluster of tests/integration starts the agents, this starts L trainers per agent with the
environment the shims read."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cluster
from cluster import BUILD, finish, free_ports, wait_for  # noqa: F401 - re-exported for the tests
from zygote import Zygote

# One OpenMP thread per trainer, as torchrun and gcagent-run give trainers that share a host:
# four trainers of two threads each on two cores spend most of their time spinning at OpenMP's
# barriers (a 300-step DDP run: 28.6 s with the default, 9.8 s with one thread). Set here, before
# any trainer or the zygote starts, so that every framework reads it when it loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[3]
TRAINERS = Path(__file__).parent / "trainers"
# TEST_CLIENT_LIB: another tree's client library for the trainers (the sanitizer tree's,
# with TEST_PRELOAD naming the runtime it needs loaded first: scripts/test.sh).
LIBRARY = Path(os.environ.get("TEST_CLIENT_LIB", BUILD / "clients" / "libgcagent_client.so.1"))


class Cluster(cluster.Cluster):
    """The integration tests' agents, started once every control socket exists: a client made
    right after connects at once (a socket that does not exist yet would be an error)."""

    def start(self):
        super().start()
        try:
            for r, (sock, proc) in enumerate(zip(self.sockets, self.procs)):
                wait_for(lambda s=sock, p=proc: os.path.exists(s) or p.poll() is not None, what=f"agent {r}'s socket")
                assert os.path.exists(sock), f"agent {r} exited:\n{self.log(r)[-3000:]}"
        except BaseException:
            self.stop()
            raise
        return self


def shim_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "clients" / "python"), str(TRAINERS)])
    env["GCAGENT_CLIENT_LIB"] = str(LIBRARY)
    if os.environ.get("TEST_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["TEST_PRELOAD"]
    env.update(extra or {})
    return env


# PyTorch trainers are forks of a process that imported torch once (zygote.py): importing it
# costs every trainer seconds of CPU. TRAINER_ZYGOTE=0 gives each its own interpreter.
TORCH_PRELOAD = ["numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch.distributed.fsdp",
                 "torch.distributed.checkpoint", "sklearn.datasets"]


def spawn(argv, env):
    """A trainer process running `python argv...`, its stderr merged into its stdout."""
    # A preloaded runtime must be there when the interpreter starts: no forks of the zygote then.
    zygote = os.environ.get("TRAINER_ZYGOTE", "1") != "0" and not os.environ.get("TEST_PRELOAD")
    if zygote and importlib.util.find_spec("torch") is not None:
        return Zygote.of(sys.executable, TORCH_PRELOAD).start(argv, env)
    return subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def start_trainers(cluster, local_size, script, args=(), env=None, job="job", only=None):
    """Starts local_size trainers per agent; returns the processes in world-rank order (with
    only=r: those of agent r alone, one trainer started again)."""
    world = cluster.n * local_size
    master_port = free_ports(1)[0]
    procs = []
    for r in range(cluster.n) if only is None else [only]:
        for l in range(local_size):
            e = shim_env(env)
            e.update(GCAGENT_SOCKET=cluster.sockets[r], GCAGENT_JOB=job, GCAGENT_LOCAL_RANK=str(l),
                     GCAGENT_LOCAL_SIZE=str(local_size), WORLD_RANK=str(r * local_size + l),
                     WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
            procs.append(spawn([str(TRAINERS / script), *args], e))
    return procs if only is None or local_size > 1 else procs[0]


def read_until(proc, text, timeout=300):
    """Reads the trainer's output until a line holding `text` (a trainer's "active", say)."""
    deadline, line = time.time() + timeout, ""
    while time.time() < deadline and text not in line:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, f"the trainer ended before printing {text!r}"
    assert text in line, f"no {text!r} from the trainer within {timeout} s"


def run_trainers(cluster, local_size, script, args=(), env=None, timeout=240):
    return finish(start_trainers(cluster, local_size, script, args, env), timeout)


def reports(results, cluster=None):
    """The JSON line each trainer printed last ("report: {...}"), after checking every exit code."""
    bad = [(i, rc, out) for i, (rc, out) in enumerate(results) if rc != 0]
    if bad:
        logs = "" if cluster is None else "\nagent 0 log:\n" + cluster.log(0)[-3000:]
        raise AssertionError("trainer failures:\n" + "\n".join(f"trainer {i} rc={rc}:\n{out[-4000:]}"
                                                               for i, rc, out in bad) + logs)
    found = []
    for _, out in results:
        lines = [l for l in out.splitlines() if l.startswith("report: ")]
        assert lines, out[-3000:]
        found.append(json.loads(lines[-1][len("report: "):]))
    return found
