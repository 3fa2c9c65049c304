"""Runs a script as the workers of MXNet's own dist_sync kvstore on loopback: 1 scheduler,
1 server and N workers, each its own process, with the environment MXNet 1.9.1's
tools/launch.py --launcher local gives them (dmlc-core's tracker: DMLC_ROLE, DMLC_PS_ROOT_URI,
DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_TASK_ID, DMLC_JOB_CLUSTER=local).

launch.py runs the user's command for every role and `import mxnet` turns a scheduler or a
server process into that role and exits; here those two run `python -c "import mxnet"`.
DMLC_NODE_HOST=127.0.0.1 keeps ps-lite on loopback (by default it binds the first
non-loopback interface). Every process is killed when the workers are done or the deadline
passes, whichever comes first."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster import free_ports

HERE = Path(__file__).parent
TRAINERS = HERE / "trainers"


def has_dist_kvstore():
    """(True, "") when the installed mxnet was built with the dist kvstore (the PyPI wheel is)."""
    probe = subprocess.run([sys.executable, "-c", "from mxnet.runtime import Features; "
                            "print(Features().is_enabled('DIST_KVSTORE'))"], capture_output=True, text=True)
    if probe.returncode != 0:
        return False, probe.stderr[-2000:]
    if probe.stdout.strip() != "True":
        return False, "this mxnet has no DIST_KVSTORE"
    return True, ""


def _env(role, port, n_workers, extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(TRAINERS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(DMLC_ROLE=role, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER="1", DMLC_NUM_WORKER=str(n_workers), DMLC_NODE_HOST="127.0.0.1",
               DMLC_JOB_CLUSTER="local")
    env.update(extra or {})
    return env


def _kill(proc):
    """Kills one process this module started (and what it started: its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def run_dist_sync(script, n_workers, args=(), env=None, timeout=240):
    """Runs trainers/<script> as the n_workers workers of a dist_sync job. Returns
    [(returncode, output)] of the workers in the order started (ps-lite gives ranks in the
    order workers register, so a worker learns its rank from kv.rank); a failed or timed-out
    run also carries the scheduler's and the server's output."""
    port = free_ports(1)[0]
    started = []  # (process, role, output file)
    with tempfile.TemporaryDirectory(prefix="dist_sync") as tmp:
        def start(cmd, role, task_id):
            e = _env(role, port, n_workers, env)
            e["DMLC_TASK_ID"] = str(task_id)
            out = open(Path(tmp) / f"{role}{task_id}.log", "w+")
            p = subprocess.Popen(cmd, env=e, stdout=out, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
            started.append((p, role, out))
            return p

        try:
            start([sys.executable, "-c", "import mxnet"], "scheduler", 0)
            workers = [start([sys.executable, str(TRAINERS / script), *args], "worker", i) for i in range(n_workers)]
            start([sys.executable, "-c", "import mxnet"], "server", n_workers)
            deadline = time.time() + timeout
            while time.time() < deadline and any(p.poll() is None for p in workers):
                if any(p.poll() not in (None, 0) for p, _, _ in started):
                    break  # a worker or the server died: the others would wait for it forever
                time.sleep(0.2)
            timed_out = any(p.poll() is None for p in workers)
        finally:
            for p, _, _ in started:
                _kill(p)
        logs = []
        for p, role, out in started:
            out.seek(0)
            logs.append((p, role, out.read()))
            out.close()
    bad = timed_out or any(p.returncode != 0 for p, _, _ in logs)
    others = "".join(f"\n--- {role} (rc {p.returncode}):\n{text[-3000:]}" for p, role, text in logs
                     if role != "worker") if bad else ""
    note = "\n(dist_sync run stopped: a process failed or the deadline passed)" if bad else ""
    return [(p.returncode, text + note + others) for p, role, text in logs if role == "worker"]
