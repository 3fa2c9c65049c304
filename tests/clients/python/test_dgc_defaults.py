"""dgc's defaults train README.md's DDP example (digits MLP, plain SGD at lr 0.5, 2 nodes x 2
trainers, 10 epochs) to within 2 points of the uncompressed run's final accuracy, with
GCAGENT_CODEC=dgc and nothing else (issue 40: the old defaults, momentum 0.9 and no warm-up,
ended near chance). Needs torch and scikit-learn: scripts/test.sh runs it in the torch venv."""

import re

import pytest

from cluster import free_ports
from test_run import finish, launch, readme_ddp_script


def final_accuracy(tmp_path, env):
    script = tmp_path / "train.py"
    script.write_text(readme_ddp_script())
    port = free_ports(1)[0]
    procs = [launch(["--nnodes", "2", "--node-rank", str(r), "--master-port", str(port), "--agent-option",
                     "compress.min_elements=0", str(script)], env=env) for r in (1, 0)]
    (rc1, _, err1), (rc0, out0, err0) = finish(procs)
    assert rc0 == 0 and rc1 == 0, out0[-3000:] + err0[-3000:] + err1[-3000:]
    accuracies = [float(a) for a in re.findall(r"^epoch \d+: test accuracy ([0-9.]+)%$", out0, re.M)]
    assert len(accuracies) == 10, out0
    m = re.search(r"node 0: agent done: (\d+) iterations; sent (\d+) raw bytes as (\d+) wire bytes", err0)
    assert m, err0
    return accuracies[-1], int(m.group(2)), int(m.group(3))


def test_dgc_defaults_train_the_readme_example_as_uncompressed_does(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    plain, raw, wire = final_accuracy(tmp_path, {"GCAGENT_CODEC": "none"})
    assert wire == raw
    dgc, raw, wire = final_accuracy(tmp_path, {"GCAGENT_CODEC": "dgc", "GCAGENT_CODEC_PARAMS": ""})
    assert dgc >= plain - 2, f"dgc's defaults: {dgc}% after 10 epochs, uncompressed {plain}%"
    # Compressed all the same, warm-up included: 2% of the bytes (0.1% once warm).
    assert 0 < wire * 20 < raw, (raw, wire)
