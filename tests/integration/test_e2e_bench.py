"""Smoke test of bench/e2e: real agents in two namespaces, the numbers the benchmark reports and
the table it writes; with the torch venv (GCAGENT_TORCH_PYTHON), DDP gloo, DDP with gcagent's
comm hook and gcagent's DistributedOptimizer on a small gradient set through run.py itself, the
synced gradients checked against the average of every rank's."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import Namespaces

E2E = Path(__file__).resolve().parents[2] / "bench" / "e2e"
sys.path.insert(0, str(E2E))
import models  # noqa: E402
import report  # noqa: E402
import run as e2e  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "bench" / "models"


def test_gradient_set_shapes_follow_the_model_definitions():
    vgg = dict(models.read_shapes(MODELS / "vgg16.csv"))
    assert vgg["classifier.0.weight"] == (4096, 25088)
    assert vgg["features.0.weight"] == (64, 27)
    resnet = dict(models.read_shapes(MODELS / "resnet50.csv"))
    assert resnet["layer1.0.downsample.0.weight"] == (256, 64)
    assert resnet["fc.bias"] == (1000,)
    bert = dict(models.read_shapes(MODELS / "bert_base.csv"))
    assert bert["embeddings.word_embeddings.weight"] == (30522, 768)
    assert bert["embeddings.position_embeddings.weight"] == (512, 768)
    for csv in MODELS.glob("*.csv"):
        rows = [ln.rsplit(",", 1) for ln in csv.read_text().splitlines() if ln and ln[0] != "#" and
                not ln.startswith("name,")]
        shapes = models.read_shapes(csv)
        assert [n for n, _ in shapes] == [n for n, _ in rows]
        for (_, shape), (_, count) in zip(shapes, rows):
            assert shape[0] * (shape[1] if len(shape) > 1 else 1) == int(count)


def test_the_agents_are_told_the_shaped_rate():
    assert e2e.agent_flags("P3-auto", "10gbit")[-2:] == ["--scheduler.link_gbps", "10"]
    assert e2e.agent_flags("P3", "100mbit")[-2:] == ["--scheduler.link_gbps", "0.1"]
    assert e2e.agent_flags("FIFO", "1gbit")[:-2] == e2e.SCHEDULING["FIFO"]
    with pytest.raises(SystemExit, match="'fast' is not"):
        e2e.agent_flags("P3", "fast")


def test_gcagent_runs_report_sync_time_and_wire_bytes(tmp_path):
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    csv = tmp_path / "four.csv"
    # four tensors above the default selective-compression threshold (262144 elements)
    csv.write_text("name,elements\n" + "".join(f"l{i}.weight,400000\n" for i in range(4)))
    with Namespaces(2) as ns:
        ns.shape("1gbit")
        none = e2e.run_gcagent(ns, csv, "none", e2e.agent_flags("P3", "1gbit"), 1, 120)
        twobit = e2e.run_gcagent(ns, csv, "2bit", e2e.agent_flags("FIFO", "1gbit"), 1, 120)
    grad = 4 * 400000 * 4
    assert none["grad_bytes"] == twobit["grad_bytes"] == grad
    # Two nodes: each sends the half of its gradient the other owns and the reduced half it
    # owns, so at least the gradient's size per node (plus TCP/IP headers), uncompressed...
    assert grad <= none["wire_bytes"] < 1.15 * grad
    # ...and about 1/16 of that with 2 bits per element
    assert twobit["wire_bytes"] < grad / 8
    assert none["sync_s"] > 0 and twobit["sync_s"] > 0
    assert none["metrics"][0]["gcagent_decode_seconds_count"] > 0  # owners add contributions (sent uncopied)
    assert 0 < none["agent_cpu_s"] and 0 < none["agent_cpu_share"] <= none["cores"]
    assert none["metrics"][0]["gcagent_errors_total"] == 0
    rows = [dict(none, model="four", rate="1gbit", system="gcagent none", scheduling="P3", nodes=2),
            dict(none, model="four", rate="1gbit", system="ddp", scheduling="-", nodes=2,
                 sync_s=2 * none["sync_s"])]
    table = report.markdown(rows)
    assert "| four | 1gbit | gcagent none | P3 |" in table
    assert "| 2.00x |" in table
    assert "- gcagent none vs DDP gloo (four, 1gbit): 2.00x, goal 1.0x: met" in table


def run_small_gradient_set(tmp_path, systems):
    """bench/e2e/run.py on 2 namespaced nodes at 1 Gbit/s over a small gradient set: its output
    folder (skips where namespaces, the torch venv or a release client library are missing)."""
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    if not e2e.TORCH_PY.exists():
        pytest.skip(f"no torch venv at {e2e.TORCH_PY} (scripts/setup.sh makes it)")
    cache = e2e.cluster.BUILD / "CMakeCache.txt"
    if cache.exists() and "GCAGENT_SANITIZE:BOOL=ON" in cache.read_text():
        # python would load the sanitized client library without the ASan runtime first; the
        # release tree runs this (the shims' own tests run against release agents too).
        pytest.skip("the torch workers cannot load an ASan build's client library")
    csv = tmp_path / "small.csv"
    # DDP makes two buckets of these (its first is capped at 1 MB); both above the selective-
    # compression threshold, so 2bit compresses them
    csv.write_text("name,elements\nl0.weight,400000\nl0.bias,1000\nl1.weight,400000\nl1.bias,1000\n"
                   "l2.weight,300000\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(E2E / "run.py"), "--nodes", "2", "--rates", "1gbit", "--models", str(csv),
                        "--systems", systems, "--scheduling", "P3", "--iterations", "2",
                        "--timeout", "300", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return out


def test_ddp_with_gcagent_hook_rows_on_a_gradient_set(tmp_path):
    out = run_small_gradient_set(tmp_path, "ddp,hook-none,hook-2bit,opt-none")
    rows = {row["system"]: row for row in json.loads((out / "e2e.json").read_text())}
    assert set(rows) == {"ddp", "ddp+gcagent none", "ddp+gcagent 2bit", "optimizer+gcagent none"}
    for row in rows.values():
        assert "error" not in row, row.get("error")
        assert row["model"] == "small" and row["nodes"] == 2 and row["sync_s"] > 0
    grad = 4 * (400000 * 2 + 300000 + 2000)
    ddp, none, twobit, opt = rows["ddp"], rows["ddp+gcagent none"], rows["ddp+gcagent 2bit"], rows["optimizer+gcagent none"]
    assert ddp["scheduling"] == "-" and none["scheduling"] == twobit["scheduling"] == "P3"
    assert ddp["grad_bytes"] == none["grad_bytes"] == twobit["grad_bytes"] == grad
    # every rank compared the gradients of one synced iteration with the average of every
    # rank's: gloo and the agent (uncompressed) within fp32 rounding
    assert ddp["check"] == none["check"] == opt["check"] == "exact" and "check" not in twobit
    assert ddp["check_max_error"] <= 1e-6 and none["check_max_error"] <= 1e-6 and opt["check_max_error"] <= 1e-6
    # the worker's DDP has gradient_as_bucket_view=True: the hook moved each bucket into its
    # slot once and copied none; the shim's CPU per step is reported for every gcagent row
    for row in (none, twobit):
        assert row["moved_buckets"] == row["agent_buckets"] and row["copied_buckets"] == 0, row
    for row in (none, twobit, opt):
        assert 0 < row["shim_cpu_s"] < row["worker_cpu_s"] and row["trainer_cpu_share"] > 0, row
    # the timed iterations went through the agents (the worker fails otherwise), whose metrics
    # were read: no errors, and at least the timed and checked iterations completed
    for row in (none, twobit):
        assert row["agent_buckets"] >= 1
        assert all(m["gcagent_errors_total"] == 0 for m in row["metrics"])
        assert all(m["gcagent_iterations_completed_total"] >= 2 for m in row["metrics"])
    assert none["agent_iterations"] >= 3
    # the agents' traffic is the namespace's: uncompressed at least the gradient per node (two
    # nodes: the half the peer owns out, the reduced half back), 2 bits per element far less
    assert grad <= none["wire_bytes"] < 1.3 * grad
    assert twobit["wire_bytes"] < grad / 4
    table = (out / "e2e.md").read_text()
    assert "| small | 1gbit | ddp+gcagent none | P3 |" in table
    assert "| small | 1gbit | ddp+gcagent 2bit | P3 |" in table
    assert "- ddp+gcagent none vs DDP gloo (small, 1gbit):" in table
    assert "| small | 1gbit | optimizer+gcagent none | P3 |" in table
    assert "- ddp+gcagent none vs the link-rate bound (small, 1gbit):" in table
    shim_rows = table.split("The framework path's CPU")[1]
    assert "| small | 1gbit | ddp+gcagent 2bit | P3 |" in shim_rows and "| 2 / 0 |" in shim_rows


def test_ddp_on_the_gcagent_backend_rows_on_a_gradient_set(tmp_path):
    """backend-<codec>: DDP with no hook on init_process_group("gcagent"), the backend starting
    each namespaced node's agent itself with the row's settings as their variables; uncompressed,
    the synced gradients equal the average of every rank's."""
    out = run_small_gradient_set(tmp_path, "backend-none,backend-2bit")
    rows = {row["system"]: row for row in json.loads((out / "e2e.json").read_text())}
    assert set(rows) == {"ddp on the gcagent backend none", "ddp on the gcagent backend 2bit"}
    none, twobit = rows["ddp on the gcagent backend none"], rows["ddp on the gcagent backend 2bit"]
    for row in (none, twobit):
        assert "error" not in row, row.get("error")
        assert row["sync_s"] > 0 and row["grad_bytes"] == 4 * (400000 * 2 + 300000 + 2000)
    assert none["check"] == "exact" and none["check_max_error"] <= 1e-6
    assert twobit["wire_bytes"] * 8 < none["wire_bytes"], (twobit["wire_bytes"], none["wire_bytes"])
