"""The deployment files, checked without Docker or Kubernetes: the compose file and the
manifests parse and reference files that exist; the Dockerfile makes its wheel with the scripts
`make wheel` runs and installs it in the runtime; every configuration they carry passes
`gcagent --validate`. tests/docker/test_image.py builds the image and runs the compose demo."""

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
BUILD = Path(os.environ.get("GCAGENT_BUILD_DIR", ROOT / "build" / "release"))
AGENT = BUILD / "agent" / "gcagent"


def load_compose():
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def validate(config_path, tmp_path, env=None):
    """gcagent --validate on a configuration file; returns its stdout+stderr."""
    r = subprocess.run([str(AGENT), "--config", str(config_path), "--validate"], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=60)
    assert r.returncode == 0, f"{config_path}: {r.stderr}"
    return r.stdout


# --- compose ---

def test_compose_parses_and_every_file_it_references_exists():
    compose = load_compose()
    services = compose["services"]
    assert {"agent0", "trainer0", "agent1", "trainer1", "prometheus", "grafana"} <= set(services)
    mounts = 0
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                mounts += 1
                assert (DOCKER / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
        build = service.get("build")
        if build:
            context = DOCKER / build["context"]
            assert (context / build["dockerfile"]).is_file(), f"{name}: {build}"
    assert mounts == 5  # two node configs, prometheus.yml, grafana provisioning and dashboards


def test_compose_trainers_share_ipc_pid_and_the_socket_volume_with_their_agent():
    services = load_compose()["services"]
    for rank in (0, 1):
        agent, trainer = services[f"agent{rank}"], services[f"trainer{rank}"]
        assert agent["ipc"] == "shareable"
        assert trainer["ipc"] == f"service:agent{rank}"
        assert trainer["pid"] == f"service:agent{rank}"
        agent_socket = [v for v in agent["volumes"] if v.endswith(":/run/gcagent")]
        trainer_socket = [v for v in trainer["volumes"] if v.endswith(":/run/gcagent")]
        assert agent_socket == trainer_socket == [f"node{rank}-socket:/run/gcagent"]
        assert "--socket" in trainer["command"]
        assert trainer["command"][trainer["command"].index("--socket") + 1] == "/run/gcagent/control.sock"
        assert trainer["depends_on"][f"agent{rank}"]["condition"] == "service_healthy"
        assert "/readyz" in " ".join(agent["healthcheck"]["test"])
        assert trainer["user"] == "10001:10001"


def test_compose_node_configs_are_valid_and_name_the_compose_services(tmp_path):
    services = load_compose()["services"]
    prometheus = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    for rank in (0, 1):
        path = DOCKER / f"gcagent-node{rank}.toml"
        config = tomllib.loads(path.read_text())
        assert config["agent"]["node_rank"] == rank
        assert config["agent"]["socket"] == "/run/gcagent/control.sock"
        hosts = [p.rsplit(":", 1)[0] for p in config["transport"]["peers"]]
        assert hosts == ["agent0", "agent1"] and all(h in services for h in hosts)
        port = config["metrics"]["listen"].rsplit(":", 1)[1]
        assert f"agent{rank}:{port}" in targets
        validate(path, tmp_path)


def test_grafana_provisioning_points_at_the_mounted_dashboards():
    grafana = load_compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 2)[:2] if v.count(":") == 2 else v.split(":") for v in grafana["volumes"])
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/gcagent.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert mounts["./grafana/dashboards"] == path
    json.loads((DOCKER / "grafana/dashboards/gcagent.json").read_text())
    datasource = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


# --- Dockerfile ---

def dockerfile():
    text = (DOCKER / "Dockerfile").read_text()
    return re.sub(r"\\\n", " ", text)  # join continued lines


def stages():
    """{stage name: [instruction lines]} in order."""
    out, current = {}, None
    for line in dockerfile().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            current = m.group(2) or m.group(1)
            out[current] = [line]
        elif current:
            out[current].append(line)
    return out


def test_dockerfile_wheel_stage_runs_the_scripts_make_wheel_runs():
    build = stages()["wheel-build"]
    assert build[0].startswith("FROM debian:12 ")
    runs = " ".join(l for l in build if l.startswith("RUN "))
    assert "GCAGENT_VENVS=wheel scripts/setup.sh" in runs and "scripts/wheel.sh /dist" in runs
    assert 'SKBUILD_CMAKE_DEFINE="GCAGENT_WITH_CUDA=ON"' in runs  # the CUDA variant's kernels
    # The same scripts outside Docker: `make wheel` calls them.
    makefile = (ROOT / "Makefile").read_text()
    assert 'GCAGENT_VENVS="wheel" scripts/setup.sh' in makefile and "scripts/wheel.sh dist" in makefile
    for line in build:
        m = re.match(r"COPY\s+(?!--from)(.+)\s+\S+$", line)
        if m:
            for source in m.group(1).split():
                assert (ROOT / source).exists(), f"COPY source {source} does not exist"
    # The wheel comes from that stage or from dist/ (make wheel), picked by a build argument.
    assert stages()["wheel-dist"] == ["FROM scratch AS wheel-dist", "COPY dist/ /dist/"]
    assert stages()["wheel"] == ["FROM wheel-${GCAGENT_WHEEL_FROM} AS wheel"]
    assert re.search(r"^ARG GCAGENT_WHEEL_FROM=build$", dockerfile(), re.M)


def test_dockerfile_runtime_installs_the_wheel_and_is_non_root_with_a_healthcheck():
    assert re.search(r"^ARG BASE_IMAGE=debian:12-slim$", dockerfile(), re.M)
    runtime = stages()["runtime"]
    assert runtime[0] == "FROM ${BASE_IMAGE} AS runtime"
    runs = " ".join(l for l in runtime if l.startswith("RUN "))
    assert "/opt/gcagent/bin/pip install" in runs and "/tmp/dist/gcagent-*.whl" in runs
    assert "COPY --from=wheel /dist/ /tmp/dist/" in runtime
    users = [l.split()[1] for l in runtime if l.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    health = [l for l in runtime if l.startswith("HEALTHCHECK ")]
    assert len(health) == 1 and "http://127.0.0.1:9464/healthz" in health[0]
    assert any("GCAGENT_METRICS_LISTEN=0.0.0.0:9464" in l for l in runtime)
    assert not any(re.search(r"\b(g\+\+|cmake|ninja-build|build-essential)\b", l) for l in runtime)


# --- Kubernetes ---

def manifests():
    docs = list(yaml.safe_load_all((DOCKER / "k8s/gcagent.yaml").read_text()))
    return {d["kind"]: d for d in docs if d}


def test_k8s_manifests_parse_into_a_sidecar_pod_and_a_headless_service():
    m = manifests()
    assert set(m) == {"ConfigMap", "Service", "StatefulSet", "NetworkPolicy"}
    for d in m.values():
        assert d["apiVersion"] and d["metadata"]["name"] == "gcagent-demo"
    service, sts = m["Service"], m["StatefulSet"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert sts["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    pod = sts["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"gcagent", "trainer"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["socket"] and volumes["shm"]["emptyDir"]["medium"] == "Memory"
    for c in containers.values():
        mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
        assert mounts["socket"] == "/run/gcagent" and mounts["shm"] == "/dev/shm"
    agent = containers["gcagent"]
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert agent["readinessProbe"]["httpGet"]["port"] in ports
    assert "hostIPC" in (DOCKER / "k8s/gcagent.yaml").read_text()  # the GPU IPC note
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_k8s_config_names_every_pod_by_dns_and_validates_for_each_rank(tmp_path):
    m = manifests()
    sts, service = m["StatefulSet"], m["Service"]
    text = m["ConfigMap"]["data"]["gcagent.toml"]
    config = tomllib.loads(text)
    expected = [f"{sts['metadata']['name']}-{i}.{service['metadata']['name']}:18515"
                for i in range(sts["spec"]["replicas"])]
    assert config["transport"]["peers"] == expected
    assert config["agent"]["socket"].startswith("/run/gcagent/")
    path = tmp_path / "gcagent.toml"
    path.write_text(text)
    token = tmp_path / "token"  # the init container's copy: the agent's own, mode 0600
    token.write_text("a-cluster-token-of-enough-length")
    token.chmod(0o600)
    for rank in range(sts["spec"]["replicas"]):
        validate(path, tmp_path, env={"GCAGENT_AGENT_NODE_RANK": str(rank), "GCAGENT_SECURITY_TOKEN_FILE": str(token)})
    agent = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}["gcagent"]
    rank_env = {e["name"]: e for e in agent["env"]}["GCAGENT_AGENT_NODE_RANK"]
    assert rank_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"


def test_k8s_peers_authenticate_and_the_policy_opens_exactly_the_ports_used():
    m = manifests()
    config = tomllib.loads(m["ConfigMap"]["data"]["gcagent.toml"])
    pod = m["StatefulSet"]["spec"]["template"]["spec"]
    # The token reaches the agent as a file of the pod's uid with mode 0600.
    token_dir = config["security"]["token_file"].rsplit("/", 1)[0]
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["install", "-m", "600"] and init["command"][-1] == config["security"]["token_file"]
    agent = {c["name"]: c for c in pod["containers"]}["gcagent"]
    assert {v["name"]: v["mountPath"] for v in agent["volumeMounts"]}["token"] == token_dir
    # The policy: the handshake port, UCX's data port range, the metrics port; nothing else.
    first, last = (int(p) for p in config["transport"]["data_ports"].split("-"))
    listen_port = int(config["transport"]["listen"].rsplit(":", 1)[1])
    metrics_port = int(config["metrics"]["listen"].rsplit(":", 1)[1])
    opened = set()
    for rule in m["NetworkPolicy"]["spec"]["ingress"]:
        for p in rule["ports"]:
            opened |= set(range(p["port"], p.get("endPort", p["port"]) + 1))
    assert opened == {listen_port, metrics_port} | set(range(first, last + 1))
    assert "not authenticated" not in yaml.safe_dump(m["NetworkPolicy"])
