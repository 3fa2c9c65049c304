"""The wheel on a machine that did not build it: a minimal Debian 12 root (debootstrap minbase
with python3 and python3-venv only: no compiler, no UCX, no prometheus-cpp; scripts/debian_root.sh, cached) entered through an overlay in namespaces of its own
(in_root.sh). Inside, a fresh venv's pip installs the wheel, which brings UCX's wheel
(libucx-cu13) as its dependency, and the README's train.py trains on 2 nodes x 2 trainers through
the installed gcagent-run. Checked: the agent loads its libraries from the wheels only, the
training reaches the accuracy, and nothing is left behind (no process, no shared-memory segment,
no launcher directory).

Offline: UCX's wheel comes from the wheelhouse scripts/setup.sh downloaded it into (PyPI's file),
and the frameworks the script imports (torch, scikit-learn, numpy) from this test's own venv,
mounted read-only and named in a .pth file, since PyPI's torch is several GB."""

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from cluster import free_ports
from shim_cluster import REPO
from test_run import readme_ddp_script
from test_wheel import RELEASE, WHEELHOUSE, wheel  # noqa: F401 (the wheel fixture)

IN_ROOT = Path(__file__).with_name("in_root.sh")

JOB = r"""
set -eu
stage() {{ echo "$(date +%s) $1" >> /job/stages.txt; }}
stage venv
python3 -m venv /opt/gcagent
site=$(/opt/gcagent/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo /opt/frameworks > "$site/zz_frameworks.pth"
/opt/gcagent/bin/pip install -q --disable-pip-version-check --no-index --find-links /wheelhouse /job/{wheel} \
  > /job/pip.txt 2>&1
/opt/gcagent/bin/pip list --disable-pip-version-check --path "$site" > /job/installed.txt
stage installed
ldd "$site/gcagent/_bundled/gcagent" > /job/ldd.txt
gcagent_version=$(/opt/gcagent/bin/gcagent --version)
echo "$gcagent_version" > /job/version.txt
cd /job
export PATH=/opt/gcagent/bin:$PATH GCAGENT_CODEC=2bit GCAGENT_CODEC_PARAMS=threshold=0.05
launch="gcagent-run --nnodes 2 --nproc-per-node 2 --master-port {port} --agent-option compress.min_elements=0"
$launch --node-rank 1 train.py > node1.out 2> node1.err &
node1=$!
rc0=0; $launch --node-rank 0 train.py > node0.out 2> node0.err || rc0=$?
rc1=0; wait $node1 || rc1=$?
echo "$rc0 $rc1" > rc.txt
stage trained
ls -A /dev/shm > shm_after.txt
ls -A /tmp > tmp_after.txt
for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline" 2>/dev/null || true; echo; done > procs_after.txt
"""


@pytest.fixture(scope="module")
def debian_root():
    if os.geteuid() != 0:
        pytest.skip("entering the minimal root needs root (mount and PID namespaces, chroot)")
    if shutil.which("debootstrap") is None:
        pytest.skip("no debootstrap: scripts/setup.sh installs it")
    r = subprocess.run([str(REPO / "scripts" / "debian_root.sh")], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    root = Path(r.stdout.strip())
    # The minimal root has no compiler, UCX or prometheus-cpp (Python brings OpenSSL's libraries;
    # the agent loads its own copy all the same, checked below).
    for absent in ["usr/bin/gcc", "usr/bin/cmake", "usr/lib/x86_64-linux-gnu/libucp.so.0",
                   "usr/lib/x86_64-linux-gnu/libprometheus-cpp-core.so.1.0"]:
        assert not (root / absent).exists(), absent
    return root


def test_the_wheel_installs_and_trains_in_a_minimal_debian_root(wheel, debian_root, tmp_path):  # noqa: F811
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(wheel, job)
    (job / "train.py").write_text(readme_ddp_script())
    (job / "job.sh").write_text(JOB.format(wheel=wheel.name, port=free_ports(1)[0]))
    frameworks = sysconfig.get_paths()["purelib"]  # this venv's torch, scikit-learn, numpy
    assert not (Path(frameworks) / "gcagent").exists(), "the frameworks' venv must not hold gcagent itself"
    r = subprocess.run([str(IN_ROOT), str(debian_root), str(tmp_path / "state"),
                        "--bind", f"{job}:/job:rw", "--bind", f"{WHEELHOUSE}:/wheelhouse",
                        "--bind", f"{frameworks}:/opt/frameworks", "--", "/bin/sh", "/job/job.sh"],
                       capture_output=True, text=True, timeout=900)
    out = {p.name: p.read_text() for p in job.iterdir() if p.suffix in (".txt", ".out", ".err")}
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:] + out.get("pip.txt", "")

    # pip pulled UCX's wheel as the dependency; the agent loads UCX from it, the rest from the wheel.
    assert re.search(r"^libucx-cu13 +1\.22\.", out["installed.txt"], re.M), out["installed.txt"]
    assert re.search(rf"^gcagent +{re.escape(RELEASE)}$", out["installed.txt"], re.M), out["installed.txt"]
    ldd = out["ldd.txt"]
    assert "not found" not in ldd, ldd
    for lib, home in [("libucp.so.0", "/site-packages/libucx/lib/"), ("libprometheus-cpp-core", "/gcagent.libs/"),
                      ("libcrypto", "/gcagent.libs/")]:
        line = next((l for l in ldd.splitlines() if lib in l), "=> ")
        assert home in os.path.normpath(line.split("=> ")[1]), (lib, ldd)
    assert out["version.txt"].startswith(f"gcagent {RELEASE} (commit "), out["version.txt"]

    # The README's script trained through the agents, compressed.
    assert out["rc.txt"].split() == ["0", "0"], out["node0.err"][-3000:] + out["node1.err"][-3000:]
    accuracies = [float(a) for a in re.findall(r"^epoch \d+: test accuracy ([0-9.]+)%$", out["node0.out"], re.M)]
    assert len(accuracies) == 10 and accuracies[-1] > 75, out["node0.out"]
    for node in (0, 1):
        m = re.search(rf"node {node}: agent done: (\d+) iterations; sent (\d+) raw bytes as (\d+) wire bytes",
                      out[f"node{node}.err"])
        assert m and int(m.group(1)) > 0 and 0 < int(m.group(3)) * 10 < int(m.group(2)), out[f"node{node}.err"]

    # Nothing left behind: no segment, no launcher directory, no agent or trainer.
    assert out["shm_after.txt"].split() == [], out["shm_after.txt"]
    assert not [d for d in out["tmp_after.txt"].split() if d.startswith("gcagent")], out["tmp_after.txt"]
    left = [p for p in out["procs_after.txt"].splitlines() if "gcagent" in p or "train.py" in p]
    assert left == [], left
