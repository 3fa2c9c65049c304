"""The image, built and run: docker/Dockerfile built by podman (a daemonless OCI builder from
Debian's packages) from the wheel `make wheel` makes, on a base imported from the minimal
Debian root (scripts/debian_root.sh; no registry is reachable here), and the compose demo
(docker/compose.yaml) run as the podman run lines generated from its services: each agent in a
network namespace of its own, reached by its service name, each trainer in its agent's network,
IPC and PID namespaces with the socket volume; the real Prometheus of the compose file (its
prometheus.yml, the same 2.42 as the compose image, from Debian) scrapes both agents from a third
namespace while the trainers run the compose file's training job to its end.

Offline: the wheel's dependencies come into the build context from the wheelhouse
(PIP_OPTIONS=--no-index --find-links); apt inside the build reaches Debian's mirror."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "clients" / "python"), str(ROOT / "tests" / "integration")]

from cluster import Namespaces, wait_for  # noqa: E402
from test_wheel import RELEASE, WHEELHOUSE, wheel  # noqa: E402,F401 (the wheel fixture)

DOCKER = ROOT / "docker"
IMAGE = "localhost/gcagent:test"


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("the image test needs root, podman and runc (scripts/setup.sh installs them)")
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    # runc, not crun (cgroups in hybrid mode); no ulimits or pids limit the sandbox refuses.
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\npids_limit = 0\n[engine]\nruntime = "runc"\n')
    env = dict(os.environ, CONTAINERS_CONF=str(conf))

    def run(*args, check=True, timeout=600):
        r = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout)
        assert not check or r.returncode == 0, f"podman {' '.join(args)}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
        return r
    run.env = env
    return run


@pytest.fixture(scope="module")
def image(podman, wheel, tmp_path_factory):  # noqa: F811
    root = subprocess.run([str(ROOT / "scripts" / "debian_root.sh")], capture_output=True, text=True, timeout=1800)
    assert root.returncode == 0, root.stderr[-3000:]
    base = f"localhost/gcagent-debian12-min:{Path(root.stdout.strip()).name}"
    if podman("image", "exists", base, check=False).returncode != 0:
        tar = subprocess.Popen(["tar", "-C", root.stdout.strip(), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["podman", "import", "-", base], stdin=tar.stdout, capture_output=True, text=True,
                                  env=podman.env, timeout=600)
        assert tar.wait() == 0 and imported.returncode == 0, imported.stderr
    context = tmp_path_factory.mktemp("context")
    shutil.copytree(DOCKER, context / "docker")
    (context / "dist").mkdir()
    for whl in [wheel, *WHEELHOUSE.glob("*.whl")]:
        shutil.copy(whl, context / "dist")
    podman("build", "--format", "docker", "--network", "host", "-f", "docker/Dockerfile",
           "--build-arg", "GCAGENT_WHEEL_FROM=dist", "--build-arg", f"BASE_IMAGE={base}",
           "--build-arg", "PIP_OPTIONS=--no-index --find-links /tmp/dist", "-t", IMAGE, str(context), timeout=1200)
    yield IMAGE
    podman("image", "prune", "-f", check=False)  # the layers of earlier builds of the tag


def test_the_image_holds_the_wheel_and_runs_as_its_non_root_user(podman, image):
    out = podman("run", "--rm", "--network", "none", image, "--version").stdout
    assert re.match(rf"gcagent {re.escape(RELEASE)} \(commit \S+, UCX 1\.22\.\d+, CUDA not built in\)", out), out
    who = podman("run", "--rm", "--network", "none", "--entrypoint", "id", image, "-u").stdout.strip()
    assert who == "10001"
    inspect = json.loads(podman("image", "inspect", image).stdout)[0]
    assert "curl -fsS http://127.0.0.1:9464/healthz" in " ".join(inspect["Healthcheck"]["Test"])
    # Nothing of a build in the runtime: no compiler, no CMake.
    which = podman("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c",
                   "command -v gcc g++ cmake c++ || true").stdout
    assert which.strip() == "", which


def run_lines(compose, service, tag, hosts, volumes, network):
    """The podman run arguments for one compose service (what podman-compose would run)."""
    s = compose["services"][service]
    args = ["run", "-d", "--name", f"{service}-{tag}", "--network", network]
    if not network.startswith("container:"):  # a joined network has its container's hosts already
        args += [f"--add-host={name}:{address}" for name, address in hosts.items()]
    if s.get("ipc") == "shareable":
        args += ["--ipc", "shareable"]
    for key in ("ipc", "pid"):
        if str(s.get(key, "")).startswith("service:"):
            args += [f"--{key}", f"container:{s[key].split(':', 1)[1]}-{tag}"]
    if "shm_size" in s:
        args += ["--shm-size", s["shm_size"]]
    if "user" in s:
        args += ["--user", s["user"]]
    for key, value in (s.get("environment") or {}).items():
        args += ["-e", f"{key}={value}"]
    for volume in s.get("volumes", []):
        source, target, *mode = volume.split(":")
        source = str((DOCKER / source).resolve()) if source.startswith(".") else str(volumes[source])
        args += ["-v", ":".join([source, target, *mode])]
    if "entrypoint" in s:
        args += ["--entrypoint", s["entrypoint"][0]]
    return args + [IMAGE] + [str(a) for a in s.get("command", [])]


def query(ns, rank, address, expr):
    code = ("import json,sys,urllib.parse,urllib.request;"
            "print(urllib.request.urlopen(sys.argv[1] + '?' + urllib.parse.urlencode({'query': sys.argv[2]}),"
            "timeout=10).read().decode())")
    r = subprocess.run(ns.prefix(rank) + [sys.executable, "-c", code, f"http://{address}/api/v1/query", expr],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return {}
    return {x["metric"].get("instance", ""): float(x["value"][1]) for x in json.loads(r.stdout)["data"]["result"]}


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the prometheus server is not installed")
def test_the_compose_demo_trains_to_its_end_and_prometheus_scrapes_both_agents(podman, image, tmp_path):
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    with Namespaces(3) as ns:  # the two nodes, and Prometheus's host
        tag = ns.tag
        hosts = {"agent0": ns.addresses[0], "agent1": ns.addresses[1]}
        volumes = {}
        for name in compose["volumes"]:
            volumes[name] = tmp_path / name
            volumes[name].mkdir()
            os.chown(volumes[name], 10001, 10001)  # the image's user writes its socket there
        names = []
        prometheus = None
        try:
            for rank in (0, 1):
                podman(*run_lines(compose, f"agent{rank}", tag, hosts, volumes, f"ns:/run/netns/{ns.names[rank]}"))
                names.append(f"agent{rank}-{tag}")
            # Prometheus with the compose file's configuration, the service names as the
            # agents' addresses (what the compose network's DNS answers).
            config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
            for job in config["scrape_configs"]:
                for group in job["static_configs"]:
                    group["targets"] = [hosts[t.split(":")[0]] + ":" + t.split(":")[1] for t in group["targets"]]
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
            prometheus = subprocess.Popen(ns.prefix(2) + [
                "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                "--web.listen-address=127.0.0.1:9090"], stdout=open(tmp_path / "prometheus.log", "w"),
                stderr=subprocess.STDOUT)
            targets = {f"{hosts[a]}:9464" for a in hosts}
            # The agents ready (every peer up, trainers served): what the compose healthcheck waits for.
            def peers_up():
                up = query(ns, 2, "127.0.0.1:9090", "gcagent_peers_up")
                return up.keys() == targets and all(v >= 1 for v in up.values())
            wait_for(peers_up, timeout=120, what="Prometheus scraping both agents with their peer up")
            for rank in (0, 1):
                podman(*run_lines(compose, f"trainer{rank}", tag, hosts, volumes, f"container:agent{rank}-{tag}"))
                names.append(f"trainer{rank}-{tag}")
            codes = [podman("wait", f"trainer{r}-{tag}", timeout=600).stdout.strip() for r in (0, 1)]
            logs = {n: podman("logs", n, check=False).stdout + podman("logs", n, check=False).stderr for n in names}
            assert codes == ["0", "0"], logs
            iterations = int(compose["services"]["trainer0"]["command"][
                compose["services"]["trainer0"]["command"].index("--iterations") + 1])
            def all_iterations_seen():
                done = query(ns, 2, "127.0.0.1:9090", "sum by (instance) (gcagent_iterations_completed_total)")
                return done.keys() == targets and all(v >= iterations for v in done.values())
            wait_for(all_iterations_seen, timeout=60, what="Prometheus seeing every iteration on both agents")
            wire = query(ns, 2, "127.0.0.1:9090", "sum by (instance) (gcagent_wire_bytes_total)")
            raw = query(ns, 2, "127.0.0.1:9090", "sum by (instance) (gcagent_raw_bytes_total)")
            assert wire.keys() == raw.keys() == targets, (wire, raw)
            for t in targets:
                assert 0 < wire[t] * 10 < raw[t], (t, wire[t], raw[t])  # 2bit, as the node configs say
        finally:
            for name in reversed(names):
                podman("rm", "-f", "-t", "5", name, check=False)
            if prometheus is not None:
                prometheus.terminate()
                prometheus.wait(timeout=30)
