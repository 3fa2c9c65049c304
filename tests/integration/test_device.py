"""GPU tensors declared to a real agent that cannot serve them, with the C test trainer: every
trainer of one job asks for device slots on a GPU the agent does not have, gets the agent's
refusal word for word (naming the trainer's GPU and why), falls back to host tensors and
reduces exactly; a host-only job on the same agents runs alongside. The refusals are logged and
counted in errors_total{kind="device_unavailable"}, never as bad messages."""

import ctypes
import re
import subprocess
import urllib.request

from cluster import TRAINER, Cluster, finish
from test_dataplane import assert_trainers_ok, stop_clean

UUID_HEX = "0102030405060708090a0b0c0d0e0f10"
UUID_TEXT = "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"


def host_has_gpu():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def metric(cluster, rank, name, labels):
    text = urllib.request.urlopen(f"http://{cluster.metrics_address(rank)}/metrics", timeout=5).read().decode()
    m = re.search(re.escape(name + "{" + labels + "}") + r" (\S+)", text)
    return float(m.group(1)) if m else None


def start(cluster, rank, local_rank, local_size, world_rank, world_size, job, extra=()):
    cmd = [str(TRAINER), "--socket", cluster.sockets[rank], "--job", job, "--local-rank", str(local_rank),
           "--local-size", str(local_size), "--world-rank", str(world_rank), "--world-size", str(world_size),
           "--tensors", "1000,70000", "--iterations", "3", "--check", "exact", "--timeout-ms", "60000", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cluster.env)


def test_device_declare_on_agents_without_the_gpu_is_refused_and_host_jobs_reduce(tmp_path):
    nodes, local = 2, 2
    with Cluster(tmp_path, nodes) as c:
        procs = []
        for r in range(nodes):
            for l in range(local):
                w = r * local + l
                procs.append(start(c, r, l, local, w, nodes * local, "gpu-job", ["--try-device-uuid", UUID_HEX]))
                procs.append(start(c, r, l, local, w, nodes * local, "host-job"))
        results = finish(procs, 120)
        assert_trainers_ok(results, c)
        device_lines = [line for rc, out in results[0::2] for line in out.splitlines()
                        if line.startswith("device_declare:")]
        assert len(device_lines) == nodes * local, results
        head = ("device_declare: the agent reported an error: the agent rejected the declare device: "
                f"failed_precondition: the trainer's tensors live on {UUID_TEXT}")
        for line in device_lines:
            if host_has_gpu():
                assert line.startswith(head + ", which this agent does not see (it sees gpu 0 (GPU-"), line
            else:
                assert line in [
                    f"{head}, but this agent has no GPU ({why}); declare host tensors instead" for why in (
                        "cannot load libcuda.so.1: libcuda.so.1: cannot open shared object file: "
                        "No such file or directory",
                        "this agent was built without CUDA")], line
        for r in range(nodes):
            assert metric(c, r, "gcagent_errors_total", 'kind="device_unavailable"') == local
            assert metric(c, r, "gcagent_errors_total", 'kind="bad_message"') == 0
            assert c.log(r).count("device declare refused: the trainer's tensors live on " + UUID_TEXT) == local
        stop_clean(c)
