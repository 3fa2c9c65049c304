#!/usr/bin/env python3
"""End-to-end benchmark: gcagent against torch.distributed DDP (gloo; fp16 and PowerSGD hooks)
and, where it builds, Horovod, on an emulated cluster of N nodes. Each node is a network
namespace joined to the others by a veth through a bridge, its link shaped by tc tbf to the
given rate both ways (the kernel has no netem: no delay). Every system runs in the same
namespaces, one after the other, in one run of this script.

Workloads:
- gradient sets (bench/models/{vgg16,resnet50,bert_base}.csv): gcagent's C test trainer hands
  every layer to its agent (one tensor per layer, priority -layer) and waits for all;
  DDP syncs a model whose parameters have those shapes (bench/e2e/ddp_worker.py);
- mlp: a real small PyTorch training loop (digits MLP), DDP with each hook and with gcagent's
  DDP comm hook.

Systems: ddp (gloo allreduce), ddp-fp16, powersgd1, powersgd4 (DDP hooks), horovod; a codec
name (none, fp16, 2bit, onebit, dgc, threshold): gcagent through the C test trainer (gradient
sets) or its DDP comm hook (mlp); backend-<codec> (backend-none, backend-2bit, ...): DDP with no
hook on the gcagent torch.distributed backend, which starts the agents itself (rows "ddp on the
gcagent backend <codec>"); backend-hsdp (gradient sets): FSDP2's own HSDP, as fsdp-hsdp, on a
DeviceMesh of the gcagent backend (the replicate groups' all-reduce through the agents, the
in-node collectives on its gloo sub-backend; row "fsdp2-hsdp on the gcagent backend"); hook-<codec> (hook-none, hook-2bit, ...): DDP with gcagent's
comm hook and that codec on any workload (rows "ddp+gcagent <codec>"); opt-<codec> (gradient
sets): gcagent.torch.DistributedOptimizer without DDP (rows "optimizer+gcagent <codec>"); fsdp-hsdp
(gradient sets): FSDP2 sharded over each node's --local trainers, one module per layer, with
FSDP2's own HSDP across nodes over gloo (row "fsdp2-hsdp gloo"); fsdp-node: the same sharding and
nothing across nodes (row "fsdp2 in-node only": the in-node reduce-scatter every HSDP row pays,
subtracted in the goals to give the cross-node part); hsdp-<codec>: the same sharding,
gcagent.torch.fsdp.hsdp across nodes (rows "hsdp+gcagent <codec>", speed-up against
"fsdp2-hsdp gloo"); fsdp-world: FSDP2 over every trainer of every node (no replication), its
reduce-scatter over gloo (row "fsdp2 gloo"); fsdp-<codec>: the same mesh, the reduce-scatter
through the agents (gcagent.torch.fsdp.fsdp; rows "fsdp+gcagent <codec>"); the agents started in the
namespaces as for the C trainer and with the same scheduling, so gcagent overlaps with the
backward pass as DDP's allreduce does. gcagent's rows run once per --scheduling.

Gradient sets through DDP: after the timed iterations one more synced iteration is compared
with the average of every rank's gradient (exact for ddp and hook-none, fp16 rounding for
ddp-fp16 and hook-fp16; the lossy codecs are not checked); --no-check skips it.

Numbers: the gradient-sync time per iteration (median over the timed iterations, slowest
rank), goodput = fp32 gradient bytes / sync time, bytes on the wire per node and iteration
(veth counters: TCP/IP headers included), speedup = DDP gloo's sync time / the system's, both
measured in this run. Needs root (ip netns, tc).

    bench/e2e/run.py [--rates 1gbit,10gbit] [--models vgg16,resnet50,bert_base,mlp]
        [--systems ddp,ddp-fp16,powersgd1,powersgd4,horovod,none,fp16,2bit,onebit,dgc,threshold,
                   hook-none,hook-fp16,hook-2bit,hook-onebit,hook-dgc,hook-threshold,opt-none,opt-2bit,...]
        [--scheduling P3,FIFO] [--nodes 4] [--iterations 2] [--no-check] [--out bench/results]
        [--shim OTHER_CHECKOUT/clients/python]
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster  # noqa: E402
from cluster import Cluster, Namespaces  # noqa: E402
import report  # noqa: E402

CACHE = Path(os.environ.get("GCAGENT_CACHE", Path.home() / ".cache" / "gcagent"))
TORCH_PY = Path(os.environ.get("GCAGENT_TORCH_PYTHON", CACHE / "venv-torch" / "bin" / "python"))
BENCH_PY = Path(os.environ.get("GCAGENT_BENCH_PYTHON", CACHE / "venv-bench" / "bin" / "python"))
WORKER = Path(__file__).resolve().parent / "ddp_worker.py"
SHIM = ROOT / "clients" / "python"  # the gcagent package the workers import (--shim)

DDP_SYSTEMS = {"ddp": "allreduce", "ddp-fp16": "fp16", "powersgd1": "powersgd1", "powersgd4": "powersgd4"}
# codec label -> (codec, params)
CODECS = {"none": ("none", []), "fp16": ("fp16", []), "bf16": ("bf16", []), "2bit": ("2bit", []), "onebit": ("onebit", []),
          "dgc": ("dgc", ["ratio=0.001"]), "threshold": ("threshold", ["drop=0.99"]),
          "topk": ("topk", ["ratio=0.01"])}
# DDP with gcagent's comm hook: system -> codec label
HOOKS = {f"hook-{c}": c for c in CODECS}
# gcagent.torch.DistributedOptimizer (no DDP): system -> codec label
OPTIMIZERS = {f"opt-{c}": c for c in CODECS}
# DDP with no hook on the gcagent torch.distributed backend, its buckets' group made with
# gcagent.torch.Options(codec) (none: the exact default): system -> codec label
BACKENDS = {f"backend-{c}": c for c in CODECS}
# FSDP2 sharded over each node's trainers (--local), across nodes: FSDP2's own HSDP over gloo, or
# gcagent.torch.fsdp.hsdp with a codec: system -> codec label (None: FSDP2's own)
HSDP = {"fsdp-hsdp": None, "fsdp-node": None, **{f"hsdp-{c}": c for c in CODECS}}
BACKEND_HSDP = "backend-hsdp"  # FSDP2's own HSDP on a DeviceMesh of the gcagent backend
# FSDP2 over every trainer (no replication): its own reduce-scatter over gloo, or
# gcagent.torch.fsdp.fsdp's through the agents: system -> codec label (None: FSDP2's own)
FSDP_WORLD = {"fsdp-world": None, **{f"fsdp-{c}": c for c in CODECS}}
# the synced gradients checked against the average of every rank's (gradient sets)
CHECKS = {"allreduce": "exact", "fsdp": "exact", "fsdp-world": "exact", "fp16": "fp16",
          ("gcagent-world", "none"): "exact", ("gcagent", "none"): "exact", ("gcagent", "fp16"): "fp16",
          ("optimizer", "none"): "exact", ("optimizer", "fp16"): "fp16", ("gcagent-world", "bf16"): "bf16",
          ("gcagent", "bf16"): "bf16", ("backend", "none"): "exact", ("backend", "fp16"): "fp16"}
SCHEDULING = {"P3": ["--scheduler.inflight_per_peer", "10"],
              "FIFO": ["--scheduler.inflight_per_peer", "4096", "--scheduler.priority", "false"]}
# the same under another topology (agent/engine/reduction_policy.h): P3-ring, P3-allgather, P3-auto, FIFO-ring, ...
SCHEDULING.update({f"{k}-{t}": v + ["--scheduler.topology", t]
                   for k, v in list(SCHEDULING.items()) for t in ("ring", "allgather", "auto")})


def agent_flags(scheduling, rate):
    """The agents' flags for a scheduling row on links of `rate` (tc syntax): the planner is
    told the links' speed (scheduler.link_gbps), as an operator would."""
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    if not m:
        raise SystemExit(f"e2e: rate {rate!r} is not <number>[k|m|g]bit")
    gbps = float(m.group(1)) * {"k": 1e-6, "m": 1e-3, "g": 1.0, "": 1e-9}[m.group(2)]
    return SCHEDULING[scheduling] + ["--scheduler.link_gbps", f"{gbps:g}"]


def log(msg):
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def host_rx(ns):
    """Bytes each node has sent: the rx counter of its veth's host end."""
    return [int(Path(f"/sys/class/net/gca{ns.tag}h{r}/statistics/rx_bytes").read_text()) for r in range(len(ns.names))]


def tbf_counters(ns):
    """(packets sent, packets the token buckets dropped), summed over both ends of every link."""
    sent, dropped = 0, 0
    for r, name in enumerate(ns.names):
        for cmd in (["tc", "-s", "qdisc", "show", "dev", f"gca{ns.tag}h{r}"],
                    ["tc", "-n", name, "-s", "qdisc", "show", "dev", f"gca{ns.tag}v{r}"]):
            text = subprocess.run(cmd, capture_output=True, text=True).stdout
            for m in re.finditer(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", text):
                sent, dropped = sent + int(m.group(1)), dropped + int(m.group(2))
    return sent, dropped


def scrape(c, ns, rank):
    """The agent's Prometheus exposition, fetched from inside its namespace."""
    addr = c.metrics_address(rank)
    code = f"import urllib.request;print(urllib.request.urlopen('http://{addr}/metrics',timeout=10).read().decode())"
    r = subprocess.run(ns.prefix(rank) + [sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    return r.stdout


def cpu_seconds(pid):
    """User + system CPU time of a process, all threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile_from_metrics(text):
    """Seconds spent per stage (histogram _sum) and counters, summed over label sets; and the
    tensors per topology (gcagent_planned_topology, by label: what auto chose)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^(gcagent_[a-z0-9_]+?)(\{[^}]*\})?\s+([0-9.eE+-]+|NaN|\+Inf)$", line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name.endswith("_bucket") or value in ("NaN", "+Inf"):
            continue
        if name.endswith(("_seconds_sum", "_seconds_count", "_total")):
            out[name] = out.get(name, 0.0) + float(value)
        elif name == "gcagent_planned_topology":
            out[name + labels] = float(value)
    return out


def run_gcagent(ns, model_csv, codec, agent_args, iterations, timeout):
    name, params = CODECS[codec]
    # Every layer submitted at once, then one blocking wait, as DDP's sync after a backward pass
    # whose cost is measured apart. (The trainer's --backward-ms mode, which hands the layers
    # over one by one, is bench/scheduler_bench.py's.)
    args = ["--model", str(model_csv), "--iterations", str(iterations + 1), "--check", "none", "--report",
            "--codec", name]
    for p in params:
        args += ["--param", p]
    with tempfile.TemporaryDirectory() as tmp:
        with Cluster(tmp, len(ns.names), agent_args, namespaces=ns) as c:
            before, cpu0, started = host_rx(ns), [cpu_seconds(p.pid) for p in c.procs], time.time()
            results = c.trainers(1, args, timeout=timeout)
            after, cpu1, wall = host_rx(ns), [cpu_seconds(p.pid) for p in c.procs], time.time() - started
            load = os.getloadavg()[0]
            for rc, out in results:
                if rc != 0:
                    raise RuntimeError(f"trainer failed (rc {rc}):\n{out[-2000:]}\n{c.log(0)[-3000:]}")
            metrics = [profile_from_metrics(scrape(c, ns, r)) for r in range(c.n)]
    whole = [[float(v) for v in re.findall(r"^iteration=\d+ ms=([\d.]+)", out, re.M)] for _, out in results]
    grad_bytes = int(re.search(r"bytes=(\d+)", results[0][1]).group(1))
    slowest = lambda per: [max(t[i] for t in per) for i in range(1, iterations + 1)]  # noqa: E731
    wire = statistics.mean(a - b for a, b in zip(after, before)) / (iterations + 1)
    return {"sync_s": statistics.median(slowest(whole)) / 1e3, "iteration_s": [v / 1e3 for v in slowest(whole)], "wire_bytes": wire, "grad_bytes": grad_bytes,
            "metrics": metrics,
            # the agents' CPU time per iteration (mean over agents), the CPU share they got
            # (CPU seconds / wall seconds, summed over agents: at most the machine's cores),
            # and the 1-minute load average at the end: on a small shared machine the agents
            # wait for a core
            "agent_cpu_s": statistics.mean(b - a for a, b in zip(cpu0, cpu1)) / (iterations + 1),
            "agent_cpu_share": sum(b - a for a, b in zip(cpu0, cpu1)) / wall, "loadavg": load, "cores": os.cpu_count()}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def agent_environment(flags):
    """The agent's settings of command-line flags (--section.key value) as its variables
    (GCAGENT_SECTION_KEY): how the agents the torch backend starts get them."""
    return {"GCAGENT_" + flag.lstrip("-").replace(".", "_").upper(): value for flag, value in zip(flags[::2], flags[1::2])}


def run_torch(ns, workload, model_csv, hook, iterations, timeout, gcagent_codec=None, python=TORCH_PY,
              agent_extra=(), check=True, local=1, backend_codec=None):
    """Torch workers, `local` per namespace (and an agent each when gcagent_codec is given, started
    with agent_extra). check: compare the synced gradients of a gradient set with the average
    of every rank's where the hook is exact or fp16 (CHECKS). backend_codec: DDP on the gcagent
    torch.distributed backend instead of gloo, which starts the agents itself (agent_extra as
    their variables), its buckets' group compressed with that codec."""
    n = len(ns.names)
    port = 29500 + (os.getpid() + int(time.time())) % 2000
    base = {"MASTER_ADDR": ns.addresses[0], "MASTER_PORT": str(port), "WORLD_SIZE": str(n * local),
            "LOCAL_WORLD_SIZE": str(local), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(SHIM)}
    # gcagent's hook sends the first three iterations through the process group while it learns
    # DDP's buckets; two more pay the agents' connection set-up
    warmup = {"gradset": 5 if hook == "gcagent" else 3, "hsdp": 3}.get(workload, 20)
    args = ["--workload", workload, "--hook", hook, "--iterations", str(iterations), "--warmup", str(warmup)]
    if model_csv:
        args += ["--model", str(model_csv)]
    if backend_codec is not None:
        name, params = CODECS[backend_codec]
        build = cluster.BUILD
        base.update(BENCH_BACKEND="gcagent", BENCH_BACKEND_CODEC=name, BENCH_BACKEND_PARAMS=",".join(params),
                    GCAGENT_BINARY=str(build / "agent" / "gcagent"),
                    GCAGENT_CLIENT_LIB=str(build / "clients" / "libgcagent_client.so.1"),
                    **agent_environment(["--agent.codec_threads", "1", "--agent.summary_interval", "0",
                                         *agent_extra]))
    mode = CHECKS.get((hook, gcagent_codec) if gcagent_codec is not None else
                      ("backend", backend_codec) if backend_codec is not None else hook)
    if check and workload in ("gradset", "hsdp") and mode:
        args += ["--check", mode]
    if workload == "mlp":
        args[args.index("--iterations") + 1] = str(max(iterations, 50))

    def launch(c):
        procs = []
        for r in range(n):
            for lr in range(local):
                env = dict(os.environ, **base, RANK=str(r * local + lr), LOCAL_RANK=str(lr), GROUP_RANK=str(r),
                           GLOO_SOCKET_IFNAME=f"gca{ns.tag}v{r}")
                if c is not None:
                    build = cluster.BUILD
                    name, params = CODECS[gcagent_codec]
                    # GCAGENT_WAIT_FOR_AGENT: the agents may not have made their sockets yet.
                    env.update(GCAGENT_SOCKET=c.sockets[r], GCAGENT_WAIT_FOR_AGENT="1", GCAGENT_JOB="e2e",
                               GCAGENT_LOCAL_RANK=str(lr), GCAGENT_LOCAL_SIZE=str(local), GCAGENT_CODEC=name,
                               GCAGENT_CODEC_PARAMS=",".join(params),
                               GCAGENT_CLIENT_LIB=str(build / "clients" / "libgcagent_client.so.1"))
                procs.append(subprocess.Popen(ns.prefix(r) + [str(python), str(WORKER), *args], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate()[0] + "\n(timed out)")
        if any(p.returncode for p in procs):
            raise RuntimeError("a torch worker failed:\n" + "\n".join(o[-4000:] for o in outs) +
                               f"\nreturn codes: {[p.returncode for p in procs]}")
        return [json.loads([ln for ln in o.splitlines() if ln.startswith("result: ")][-1][8:]) for o in outs]

    agent = {}
    if gcagent_codec is None:
        res = launch(None)
    else:
        with tempfile.TemporaryDirectory() as tmp, Cluster(tmp, n, list(agent_extra), namespaces=ns) as c:
            cpu0, started = [cpu_seconds(p.pid) for p in c.procs], time.time()
            res = launch(c)
            cpu1, wall = [cpu_seconds(p.pid) for p in c.procs], time.time() - started
            metrics = [profile_from_metrics(scrape(c, ns, r)) for r in range(c.n)]
        # per agent iteration (the hook's learning iterations do not reach the agents), over
        # the whole run: warm-up, timed, no_sync and checked iterations
        done = statistics.mean(m.get("gcagent_iterations_completed_total", 0) for m in metrics)
        agent = {"metrics": metrics, "agent_iterations": done,
                 "agent_cpu_s": statistics.mean(b - a for a, b in zip(cpu0, cpu1)) / max(done, 1),
                 "agent_cpu_share": sum(b - a for a, b in zip(cpu0, cpu1)) / wall, "loadavg": os.getloadavg()[0],
                 "cores": os.cpu_count()}
    per_iter = [max(r["iteration_s"][i] for r in res) for i in range(len(res[0]["iteration_s"]))]
    out = {"sync_s": max(r["sync_s"] for r in res), "iteration_s": per_iter,
           "wire_bytes": statistics.mean(r["wire_bytes"] for r in res), "grad_bytes": res[0]["grad_bytes"], **agent}
    for key in ("agent_buckets", "fallback_buckets", "check", "moved_buckets", "copied_buckets", "agent_shards"):
        if key in res[0]:
            out[key] = res[0][key]
    if "shim_cpu_s" in res[0]:
        out["shim_cpu_s"] = statistics.mean(r["shim_cpu_s"] for r in res)
    if "cpu_s" in res[0]:
        # the trainers' CPU share: CPU seconds over wall seconds of the timed iterations, summed over trainers
        out["trainer_cpu_share"] = sum(r["cpu_s"] / statistics.mean(r["wall_s"]) for r in res)
    if "check_max_error" in res[0]:
        out["check_max_error"] = max(r["check_max_error"] for r in res)
    if "cpu_s" in res[0]:
        out["worker_cpu_s"] = statistics.mean(r["cpu_s"] for r in res)
    if "loss" in res[0]:
        out["loss"] = res[0]["loss"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rates", default="1gbit")
    ap.add_argument("--models", default="vgg16", help="vgg16, resnet50, bert_base (bench/models), mlp, "
                    "or the path of a gradient-set CSV (name,elements)")
    ap.add_argument("--systems", default="ddp,ddp-fp16,powersgd1,powersgd4,horovod," + ",".join(CODECS),
                    help="also: " + ",".join(HOOKS) + " (DDP with gcagent's comm hook), " + ",".join(BACKENDS) +
                    " (DDP, no hook, on the gcagent torch.distributed backend), " + ",".join(OPTIMIZERS) +
                    " (gcagent.torch.DistributedOptimizer)")
    ap.add_argument("--scheduling", default="P3,FIFO", help="gcagent runs: P3 (window 10), FIFO (no priority); "
                    "P3-ring, P3-allgather, P3-auto (FIFO-... likewise): the same on that topology")
    ap.add_argument("--local", type=int, default=2, help="trainers per node of the FSDP2 systems (fsdp-hsdp, hsdp-<codec>)")
    ap.add_argument("--iterations", type=int, default=2, help="timed iterations (after the warm-up ones)")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--no-check", action="store_true",
                    help="skip the check of DDP's synced gradient sets against the average of every rank's")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--shim", help="the clients/python folder of another checkout: its gcagent package runs the "
                    "hook and optimizer rows (a previous version against this one; give it its own --out)")
    a = ap.parse_args()
    if a.shim:
        global SHIM
        SHIM = Path(a.shim).resolve()
    ok, why = Namespaces.available()
    if not ok:
        raise SystemExit(f"e2e: {why}")
    # SIGTERM unwinds like Ctrl-C, so the namespaces and agents are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("e2e: terminated"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "e2e.json"
    rows = json.loads(raw.read_text()) if raw.exists() else []
    systems = a.systems.split(",")
    command = "bench/e2e/run.py " + " ".join(sys.argv[1:])
    with Namespaces(a.nodes) as ns:
        for rate in a.rates.split(","):
            ns.shape(rate)
            for model in a.models.split(","):
                workload = "mlp" if model == "mlp" else "gradset"
                csv = None if workload == "mlp" else ROOT / "bench" / "models" / f"{model}.csv"
                if model.endswith(".csv"):  # a gradient set of one's own: the rows name it by its stem
                    csv, model = Path(model).resolve(), Path(model).stem
                for system in systems:
                    runs = []
                    if system in DDP_SYSTEMS:
                        runs.append((system, "-", lambda s=system: run_torch(ns, workload, csv, DDP_SYSTEMS[s],
                                                                              a.iterations, a.timeout,
                                                                              check=not a.no_check)))
                    elif (system in HSDP or system in FSDP_WORLD) and workload == "gradset":
                        # FSDP2 sharded in the node (HSDP) or over every trainer: FSDP2's own, or the agents'
                        if system in HSDP:
                            codec = HSDP[system]
                            hook = {"fsdp-hsdp": "fsdp", "fsdp-node": "fsdp-node"}.get(system, "gcagent")
                            label = {"fsdp": "fsdp2-hsdp gloo", "fsdp-node": "fsdp2 in-node only"}.get(
                                hook, f"hsdp+gcagent {codec}")
                        else:
                            codec = FSDP_WORLD[system]
                            hook = "fsdp-world" if codec is None else "gcagent-world"
                            label = "fsdp2 gloo" if codec is None else f"fsdp+gcagent {codec}"
                        scheds = ["-"] if codec is None else a.scheduling.split(",")
                        for sched in scheds:
                            runs.append((label, sched, lambda s=codec, q=sched, h=hook: run_torch(
                                ns, "hsdp", csv, h, a.iterations, a.timeout,
                                gcagent_codec=s, agent_extra=() if s is None else agent_flags(q, rate),
                                check=not a.no_check, local=a.local)))
                    elif system == "horovod":
                        # `pip install horovod` (0.28.1, the newest on PyPI) with HOROVOD_WITH_GLOO=1
                        # HOROVOD_WITH_PYTORCH=1 against torch 2.15 did not finish building within
                        # 15 minutes on the 2-core machine this was written on: recorded as not run
                        log("horovod: not built here (README.md, End-to-end benchmark); skipped")
                        rows = [r for r in rows if (r["model"], r["rate"], r["system"]) != (model, rate, system)]
                        rows.append({"model": model, "rate": rate, "system": system, "scheduling": "-",
                                     "nodes": a.nodes, "error": "not run: horovod did not build from PyPI here"})
                        continue
                    elif system in CODECS:
                        if workload == "mlp":
                            runs.append((f"gcagent {system}", "P3", lambda s=system: run_torch(
                                ns, workload, None, "gcagent", a.iterations, a.timeout, gcagent_codec=s)))
                        else:
                            for sched in a.scheduling.split(","):
                                runs.append((f"gcagent {system}", sched, lambda s=system, q=sched: run_gcagent(
                                    ns, csv, s, agent_flags(q, rate), a.iterations, a.timeout)))
                    elif system == BACKEND_HSDP and workload == "gradset":
                        for sched in a.scheduling.split(","):
                            runs.append(("fsdp2-hsdp on the gcagent backend", sched, lambda q=sched: run_torch(
                                ns, "hsdp", csv, "fsdp", a.iterations, a.timeout, agent_extra=agent_flags(q, rate),
                                check=not a.no_check, local=a.local, backend_codec="none")))
                    elif system in BACKENDS:
                        codec = BACKENDS[system]
                        for sched in a.scheduling.split(","):
                            runs.append((f"ddp on the gcagent backend {codec}", sched,
                                         lambda s=codec, q=sched: run_torch(
                                             ns, workload, csv, "allreduce", a.iterations, a.timeout,
                                             agent_extra=agent_flags(q, rate), check=not a.no_check,
                                             backend_codec=s)))
                    elif system in HOOKS or (system in OPTIMIZERS and workload == "gradset"):
                        hook, codec = ("gcagent", HOOKS[system]) if system in HOOKS else ("optimizer", OPTIMIZERS[system])
                        label = f"{'ddp' if hook == 'gcagent' else 'optimizer'}+gcagent {codec}"
                        for sched in a.scheduling.split(","):
                            runs.append((label, sched,
                                         lambda h=hook, s=codec, q=sched: run_torch(
                                             ns, workload, csv, h, a.iterations, a.timeout, gcagent_codec=s,
                                             agent_extra=agent_flags(q, rate), check=not a.no_check)))
                    else:
                        raise SystemExit(f"e2e: unknown system {system!r}")
                    for label, sched, fn in runs:
                        log(f"{model} {rate} {label} {sched}")
                        started, tbf0 = time.time(), tbf_counters(ns)
                        try:
                            res = fn()
                        except RuntimeError as e:
                            log(f"{label} failed: {str(e)[:3000]}")
                            res = {"error": str(e)[:500]}
                        tbf1 = tbf_counters(ns)
                        # whole run, warm-up included: drops make TCP back off
                        res.update(tbf_packets=tbf1[0] - tbf0[0], tbf_drops=tbf1[1] - tbf0[1])
                        res.update(model=model, rate=rate, system=label, scheduling=sched, nodes=a.nodes,
                                   local=a.local if label.startswith(("fsdp2", "hsdp+", "fsdp+")) else 1,
                                   wall_s=round(time.time() - started, 1), command=command)
                        rows = [r for r in rows if (r["model"], r["rate"], r["system"], r["scheduling"]) !=
                                (model, rate, label, sched)] + [res]
                        raw.write_text(json.dumps(rows, indent=1))
                        if "sync_s" in res:
                            checked = (f", gradients checked ({res['check']}, max error {res['check_max_error']:.2g})"
                                       if "check_max_error" in res else "")
                            log(f"  sync {res['sync_s'] * 1e3:.1f} ms, "
                                f"wire {res['wire_bytes'] / 1e6:.1f} MB/node{checked}")
    (out / "e2e.md").write_text(report.markdown(rows))
    print(report.markdown(rows))
    # the plots need matplotlib, which lives in the bench venv (scripts/setup.sh)
    if BENCH_PY.exists():
        subprocess.run([str(BENCH_PY), str(Path(__file__).resolve().parent / "report.py"), str(raw), str(out)])
    else:
        log(f"no {BENCH_PY}: plots skipped (scripts/setup.sh makes it)")


if __name__ == "__main__":
    main()
