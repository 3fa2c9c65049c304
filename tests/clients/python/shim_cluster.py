"""Runs framework trainer scripts (trainers/*.py) as real processes against real agents: the
Cluster of tests/integration starts the agents, this starts L trainers per agent with the
environment the shims read."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cluster import BUILD, Cluster, free_ports  # noqa: F401 - re-exported for the tests

REPO = Path(__file__).resolve().parents[3]
TRAINERS = Path(__file__).parent / "trainers"
LIBRARY = BUILD / "clients" / "libgcagent_client.so.1"


def shim_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "clients" / "python"), str(TRAINERS)])
    env["GCAGENT_CLIENT_LIB"] = str(LIBRARY)
    env.update(extra or {})
    return env


def start_trainers(cluster, local_size, script, args=(), env=None, job="job"):
    """Starts local_size trainers per agent; returns the processes in world-rank order."""
    world = cluster.n * local_size
    master_port = free_ports(1)[0]
    procs = []
    for r in range(cluster.n):
        for l in range(local_size):
            e = shim_env(env)
            e.update(GCAGENT_SOCKET=cluster.sockets[r], GCAGENT_JOB=job, GCAGENT_LOCAL_RANK=str(l),
                     GCAGENT_LOCAL_SIZE=str(local_size), WORLD_RANK=str(r * local_size + l),
                     WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
            procs.append(subprocess.Popen([sys.executable, str(TRAINERS / script), *args], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


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
