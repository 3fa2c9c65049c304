"""Smoke test of bench/e2e (the gcagent half; the torch half needs the torch venv and minutes):
real agents in two namespaces, the numbers the benchmark reports and the table it writes."""
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


def test_gcagent_runs_report_sync_time_and_wire_bytes(tmp_path):
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    csv = tmp_path / "four.csv"
    # four tensors above the default selective-compression threshold (262144 elements)
    csv.write_text("name,elements\n" + "".join(f"l{i}.weight,400000\n" for i in range(4)))
    with Namespaces(2) as ns:
        ns.shape("1gbit")
        none = e2e.run_gcagent(ns, csv, "none", "P3", 1, 120)
        twobit = e2e.run_gcagent(ns, csv, "2bit", "FIFO", 1, 120)
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
