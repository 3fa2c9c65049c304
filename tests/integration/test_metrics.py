"""Observability end to end: a real Prometheus server scrapes two agents during a 2bit run,
and its query API must show the byte counters growing and the codec's ratio; the exposition
passes `promtool check metrics`; the Grafana dashboard names only stats that exist."""

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from cluster import AGENT, Cluster

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "gcagent.json"


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def listed_metrics():
    out = subprocess.run([str(AGENT), "--list-metrics"], check=True, capture_output=True, text=True).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.strip()}


class Prometheus:
    """The real server on an ephemeral port, its TSDB in tmp."""

    def __init__(self, tmp_path, targets):
        self.dir = Path(tmp_path) / "prometheus"
        self.dir.mkdir()
        config = self.dir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gcagent\n    static_configs:\n"
            f"      - targets: [{', '.join(repr(t) for t in targets)}]\n")
        self.log_path = self.dir / "prometheus.log"
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
             "--web.listen-address=127.0.0.1:0"],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        self.address = self._listening_address()
        self._wait_ready()

    def _listening_address(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(r'msg="Listening on" address=(\S+)', self.log_path.read_text())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("prometheus did not start:\n" + self.log_path.read_text()[-3000:])

    def _wait_ready(self, timeout=30):
        # The server listens before its TSDB is open; until then queries answer 503.
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                http_get(f"http://{self.address}/-/ready")
                return
            except OSError:  # urllib's HTTPError and URLError are OSErrors
                time.sleep(0.1)
        raise AssertionError("prometheus never became ready:\n" + self.log_path.read_text()[-3000:])

    def query(self, expr):
        url = f"http://{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        reply = json.loads(http_get(url))
        assert reply["status"] == "success", reply
        return reply["data"]["result"]

    def values_by_instance(self, expr):
        return {r["metric"].get("instance", ""): float(r["value"][1]) for r in self.query(expr)}

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def poll(what, fn, timeout):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the prometheus server is not installed")
def test_prometheus_scrapes_two_agents_during_a_2bit_run(tmp_path):
    with Cluster(tmp_path, 2, ["--compress.min_elements", "0", "--scheduler.slice_elements", "65536"]) as c:
        targets = [c.metrics_address(r) for r in range(2)]
        prom = Prometheus(tmp_path, targets)
        try:
            # Trainers start once both agents are scraped, so growth is seen from zero.
            poll("both targets up", lambda: prom.values_by_instance("up") == {t: 1.0 for t in targets}, 120)
            stop = threading.Event()
            failures = []

            def train():
                batch = 0
                while not stop.is_set():
                    results = c.trainers(1, ["--tensors", "262144,100003", "--iterations", "40", "--codec", "2bit",
                                             "--check", "none"], job=f"metrics{batch}")
                    failures.extend(out for rc, out in results if rc != 0)
                    batch += 1

            runner = threading.Thread(target=train)
            runner.start()
            try:
                sent = 'sum by (instance) (gcagent_{}_bytes_total{{codec="2bit",direction="sent"}})'
                first = poll("2bit bytes on both agents",
                             lambda: (v := prom.values_by_instance(sent.format("wire"))) and len(v) == 2
                             and all(x > 0 for x in v.values()) and v, 120)
                poll("the byte counters to grow",
                     lambda: (v := prom.values_by_instance(sent.format("wire"))) and all(
                         v.get(t, 0) > first[t] for t in targets), 120)
            finally:
                stop.set()
                runner.join()
            assert not failures, failures[0] + "\nagent 0 log:\n" + c.log(0)[-3000:]

            # Wait for a scrape after the last batch, then the counters must agree with each other.
            poll("a scrape after the last batch",
                 lambda: all(v >= 40 for v in prom.values_by_instance("gcagent_iterations_completed_total").values())
                 and len(prom.values_by_instance("gcagent_iterations_completed_total")) == 2, 120)
            raw = prom.values_by_instance(sent.format("raw"))
            wire = prom.values_by_instance(sent.format("wire"))
            for t in targets:
                assert 15.0 < raw[t] / wire[t] <= 16.0, (t, raw[t], wire[t])
            ratio = prom.values_by_instance('gcagent_compression_ratio{codec="2bit",direction="sent"}')
            assert all(15.0 < ratio[t] <= 16.0 for t in targets), ratio
            received = prom.values_by_instance('sum by (instance) (gcagent_raw_bytes_total{direction="received"})')
            assert all(received[t] > 0 for t in targets), received
            iterations = prom.values_by_instance("gcagent_iterations_completed_total")
            assert all(iterations[t] >= 40 for t in targets), iterations
            encodes = prom.values_by_instance('gcagent_encode_seconds_count{codec="2bit"}')
            assert all(encodes[t] > 0 for t in targets), encodes
            assert prom.values_by_instance("gcagent_peers_up") == {t: 1.0 for t in targets}
            info = prom.query("gcagent_build_info")
            assert len(info) == 2 and "2bit" in info[0]["metric"]["codecs"].split(","), info

            # The exposition itself passes Prometheus's own lint.
            if shutil.which("promtool"):
                text = http_get(f"http://{targets[0]}/metrics")
                lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
                assert lint.returncode == 0, lint.stdout + lint.stderr
        finally:
            prom.stop()
        assert c.stop() == [0, 0]


def test_a_busy_metrics_address_fails_the_start_naming_it(tmp_path):
    with Cluster(tmp_path, 1) as c:
        busy = c.metrics_address(0)
        second = subprocess.run([str(AGENT), "--agent.socket", str(tmp_path / "other.sock"), "--metrics.listen", busy],
                                capture_output=True, text=True, timeout=20)
        assert second.returncode != 0
        assert busy in second.stderr, second.stderr


def test_list_metrics_follows_the_naming_rules():
    stats = listed_metrics()
    assert "gcagent_wire_bytes_total" in stats and "gcagent_build_info" in stats
    for name, kind in stats.items():
        assert name.startswith("gcagent_"), name
        assert name.endswith("_total") == (kind == "counter"), name


def test_dashboard_uses_only_listed_metrics():
    stats = listed_metrics()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
            walk(p.get("panels", []))

    walk(dashboard["panels"])
    exprs.extend(v.get("query", "") for v in dashboard.get("templating", {}).get("list", [])
                 if isinstance(v.get("query", ""), str))
    assert len(exprs) >= 6
    used = set()
    for expr in exprs:
        used.update(re.findall(r"\bgcagent_[a-z0-9_]+", expr))
    assert used
    for name in used:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in stats or (base in stats and stats[base] == "histogram"), f"{name} is not in --list-metrics"
    # Every panel kind the issue asks for is there.
    titles = " ".join(p.get("title", "").lower() for p in dashboard["panels"])
    for word in ["throughput", "ratio", "latency", "queue", "errors", "peer"]:
        assert word in titles, word


def test_a_finished_jobs_series_and_its_codecs_gauges_go(tmp_path):
    from cluster import wait_for
    with Cluster(tmp_path, 2) as c:
        url = f"http://{c.metrics_address(0)}/metrics"
        results = []
        runner = threading.Thread(target=lambda: results.extend(c.trainers(
            1, ["--tensors", "300000,17", "--iterations", "400", "--backward-ms", "20", "--codec", "2bit",
                "--check", "none"],  # 8 s or more: long enough to be seen running
            job="resnet-run-7")))
        runner.start()
        # While the job runs, its series and the codec's gauges are there...
        wait_for(lambda: 'gcagent_job_trainers{training_job="resnet-run-7"} 1' in http_get(url),
                 what="the job's series")
        wait_for(lambda: 'gcagent_compression_ratio{codec="2bit",direction="sent"}' in http_get(url),
                 what="2bit's ratio gauge")
        runner.join()
        assert len(results) == 2 and all(rc == 0 for rc, _ in results), results
        # The trainers left: the job's series go at once, the codec's gauges at the next refresh.
        text = http_get(url)
        assert 'training_job="resnet-run-7"' not in text
        wait_for(lambda: 'gcagent_compression_ratio{codec="2bit"' not in http_get(url), what="2bit's gauges to go")
        text = http_get(url)
        assert 'gcagent_residual_l2_norm{codec="2bit"}' not in text
        assert re.search(r'gcagent_raw_bytes_total\{codec="2bit",direction="sent"\} [1-9]', text), "counters stay"
        assert c.stop() == [0, 0]
