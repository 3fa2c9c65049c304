"""The wheel users install (scripts/wheel.sh: pip wheel through scikit-build-core, then
auditwheel): it bundles the agent and libgcagent_client.so.1 with the agent's non-system
libraries, names UCX's wheel as a dependency, a fresh venv's pip installs it, the package finds
everything there with no variable set, and the demo trainer trains through the installed
gcagent-run.

The build (a few minutes from scratch) is cached under $GCAGENT_CACHE/wheels, keyed by the
content of every source file it reads, so an unchanged tree reuses it; it runs offline with
the venv-wheel backend that scripts/setup.sh makes. UCX's wheel comes to the fresh venv from the
wheelhouse setup.sh downloaded it into, numpy and scikit-learn from this test's own venv (a .pth
file written first, so pip sees them installed): nothing is downloaded here. tests/install/
installs the same wheel from PyPI on a machine that did not build it. PyTorch users need no
launcher of ours: the installed package is also a torch.distributed backend under plain torchrun."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from cluster import free_ports
from shim_cluster import REPO

CACHE = Path(os.environ.get("GCAGENT_CACHE", Path.home() / ".cache" / "gcagent"))
BACKEND = CACHE / "venv-wheel" / "bin" / "python"
# What the wheel is built from (CMakeLists.txt's GCAGENT_WHEEL branch and the package).
SOURCES = ["CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE", "cmake", "scripts/wheel.sh",
           "scripts/requirements-wheel.txt", "common", "compress", "shm", "transport", "metrics", "scheduler", "clients",
           "agent"]
WHEELHOUSE = CACHE / "wheelhouse"
RELEASE = re.search(r"project\(gcagent VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
BUNDLED = ["gcagent/_bundled/gcagent", "gcagent/_bundled/libgcagent_client.so.1", "gcagent/_bundled/gcagent_test_trainer"]


def source_key():
    r = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SOURCES],
                       cwd=REPO, capture_output=True, text=True)
    if r.returncode == 0:
        files = r.stdout.split()
    else:  # not a git checkout: every file under the sources
        files = [str(p.relative_to(REPO)) for s in SOURCES for p in [REPO / s, *(REPO / s).rglob("*")]
                 if "__pycache__" not in p.parts]
    h = hashlib.sha256()
    for name in sorted(set(files)):
        path = REPO / name
        if path.is_file():
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def wheel():
    if not BACKEND.exists():
        pytest.skip(f"no {BACKEND}: GCAGENT_VENVS=wheel scripts/setup.sh makes it")
    home = CACHE / "wheels" / source_key()
    found = sorted(home.glob("gcagent-*.whl"))
    if found:
        return found[0]
    out = home.with_name(home.name + ".partial")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([str(REPO / "scripts" / "wheel.sh"), str(out)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    for old in (CACHE / "wheels").iterdir():  # one cached wheel: the sources' latest
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    out.rename(home)
    return sorted(home.glob("gcagent-*.whl"))[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    site = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    # numpy and scikit-learn from this venv, after the fresh venv's own packages.
    (site / "zz_host_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([str(root / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--find-links", str(WHEELHOUSE), str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return root, site


def clean_env():
    """No hint of the build tree: the installed package must find everything itself."""
    drop = ("PYTHONPATH", "GCAGENT_CLIENT_LIB", "GCAGENT_BINARY", "GCAGENT_BUILD_DIR", "LD_LIBRARY_PATH")
    return {k: v for k, v in os.environ.items() if k not in drop}


def test_the_wheel_bundles_the_agent_the_library_and_their_libraries(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in BUNDLED + ["gcagent/run.py", "gcagent/client.py", "gcagent/torch/__init__.py",
                 "gcagent/torch/fsdp.py"]:
        assert name in names, (name, names)
    assert not [n for n in names if "__pycache__" in n or n.endswith("_installed_path.py")], names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entries = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gcagent-run = gcagent.run:main" in entries and "gcagent = gcagent._node_agent:agent_main" in entries
    # Python-neutral (no extension module inside), manylinux: the glibc the build needs, no more.
    assert re.fullmatch(rf"gcagent-{RELEASE}-py3-none-manylinux_2_\d+_x86_64\.whl", wheel.name), wheel.name
    libs = [n for n in names if n.startswith("gcagent.libs/")]
    for lib in ("libprometheus-cpp-core", "libcrypto"):
        assert any(n.startswith(f"gcagent.libs/{lib}-") for n in libs), libs
    assert not [n for n in libs if "libuc" in n], libs  # UCX is the libucx-cu13 dependency, not a copy
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for line in ["License-Expression: BSD-3-Clause", "Requires-Python: >=3.9", "Requires-Dist: numpy",
                 "Requires-Dist: libucx-cu13<1.23,>=1.22", "Classifier: Programming Language :: Python :: 3.11"]:
        assert line in metadata.splitlines(), metadata[:2000]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names


def test_the_installed_package_finds_its_bundled_files(venv):
    root, site = venv
    code = ("import gcagent, gcagent._library as l, gcagent._node_agent as a; print(gcagent.__file__); "
            "print(l.load()._name); print(a.find_agent())")
    r = subprocess.run([str(root / "bin" / "python"), "-c", code], env=clean_env(), capture_output=True, text=True,
                       timeout=60, cwd=root)
    assert r.returncode == 0, r.stderr
    package, library, agent = r.stdout.split()
    assert package == str(site / "gcagent" / "__init__.py")
    assert library == str(site / "gcagent" / "_bundled" / "libgcagent_client.so.1")
    assert agent == str(site / "gcagent" / "_bundled" / "gcagent")
    r = subprocess.run([agent, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(rf"gcagent {RELEASE} \(commit [0-9a-f]{{12}}(\+dirty)?, UCX 1\.22\.\d+, CUDA not built in\)",
                    r.stdout), r.stdout
    r = subprocess.run([str(root / "bin" / "python"), "-c", "import gcagent; print(gcagent.__version__)"],
                       env=clean_env(), capture_output=True, text=True, timeout=60, cwd=root)
    assert re.fullmatch(rf"{RELEASE}\+g[0-9a-f]{{12}}(\.dirty)?\n", r.stdout), r.stdout + r.stderr
    # Every error says "see gcagent --print-config": the install puts that gcagent on PATH.
    path = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    r = subprocess.run(["gcagent", "--print-config"], env=dict(clean_env(), PATH=path), capture_output=True, text=True,
                       timeout=60, cwd=root)
    assert r.returncode == 0 and "transport.reduction_timeout" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run(["gcagent", "--validate", "--compress.codec=nope"], env=dict(clean_env(), PATH=path),
                       capture_output=True, text=True, timeout=60, cwd=root)
    assert r.returncode != 0 and "nope" in r.stderr, r.stdout + r.stderr


def test_the_demo_trains_through_the_installed_launcher(venv):
    root, _ = venv
    port = free_ports(1)[0]
    env = dict(clean_env(), GCAGENT_CODEC="2bit", GCAGENT_CODEC_PARAMS="threshold=0.05")
    launch = [str(root / "bin" / "gcagent-run"), "--nnodes", "2", "--nproc-per-node", "2", "--master-port", str(port),
              "--agent-option", "compress.min_elements=0"]
    trainer = [str(REPO / "scripts" / "demo_digits.py"), "--epochs", "4"]
    procs = [subprocess.Popen([*launch, "--node-rank", str(r), *trainer], env=env, cwd=root, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in (0, 1)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, out[-3000:] + err[-3000:]
    out0 = results[0][0]
    assert len(re.findall(r"^epoch +\d+  test accuracy", out0, re.M)) == 4, out0
    accuracy = float(re.search(r'^result: .*"accuracy": ([0-9.]+)', out0, re.M).group(1))
    assert accuracy > 50, out0  # ten classes: chance is 10%
    for node, (_, err) in enumerate(results):
        m = re.search(rf"node {node}: agent done: .* sent (\d+) raw bytes as (\d+) wire bytes", err)
        assert m, err
        raw, wire = int(m.group(1)), int(m.group(2))
        assert 0 < wire * 10 < raw, (raw, wire)  # 2bit: a sixteenth, plus headers


def test_ddp_runs_on_the_installed_packages_backend_under_plain_torchrun(venv, tmp_path):
    """The user's whole change for PyTorch: `import gcagent.torch` and init_process_group("gcagent")
    under plain torchrun (c10d rendezvous, two nodes of two trainers): the installed package
    starts each node's bundled agent and DDP's buckets go through it, with no variable set."""
    root, _ = venv
    port = free_ports(1)[0]
    env = dict(clean_env(), REPORT_DIR=str(tmp_path), TMPDIR=str(tmp_path))
    launch = [str(root / "bin" / "python"), "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
              "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "wheel"]
    trainer = [str(REPO / "tests" / "clients" / "python" / "trainers" / "torch_backend.py"), "ddp", "gcagent", "5"]
    procs = [subprocess.Popen([*launch, *trainer], env=env, cwd=root, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for _ in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert all(r["params"] == reports[0]["params"] and r["backend"] == "gcagent" for r in reports)
    assert all(r["agent_calls"] >= 5 and "allreduce" not in r["gloo_calls"] for r in reports), reports[0]
    logs = sorted(p.name for p in tmp_path.glob("gcagent-*/agent*.log"))
    assert logs == ["agent0.log", "agent1.log"], logs  # one agent per node, started by the backend
