"""gcagent.mxnet.KVStore next to MXNet 1.9.1's own dist_sync on identical inputs
(trainers/mxnet_side_by_side.py): 2 workers, 2bit at thresholds 0.5 and 0.3, no optimizer (a
pull gives the sum), 8 keys of 1 to 300000 elements, 6 iterations of push then pull with
random normal gradients. Every pulled value must be bit for bit what dist_sync pulled (as
uint32). Columns: real dist_sync (1 scheduler, 1 server, 2 workers); gcagent with 2 agents x 1
trainer, default agent flags (every key is compressed under the mxnet aggregation whatever
compress.min_elements says) and with 1024-element slices; MXNet's device store with 2 CPU
contexts (one per worker: each device quantized with its own residual, as each dist_sync
worker is)."""

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mxnet")

from mxnet_dist_sync import has_dist_kvstore, run_dist_sync  # noqa: E402
from shim_cluster import TRAINERS, Cluster, reports, run_trainers, shim_env  # noqa: E402

sys.path.insert(0, str(TRAINERS))
import mxnet_side_by_side as sbs  # noqa: E402  - the keys, sizes and iterations the trainer uses

THRESHOLDS = ["0.5", "0.3"]
TIMEOUT = 600  # a deadline for a hung run only


@pytest.fixture(scope="module")
def dist_sync(tmp_path_factory):
    """{threshold: pulled values} of real dist_sync (both workers must agree bit for bit)."""
    ok, why = has_dist_kvstore()
    if not ok:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("dist_sync")
    pulled = {}
    for t in THRESHOLDS:  # a dist_sync process sets its compression once
        reports(run_dist_sync("mxnet_side_by_side.py", 2, ["dist_sync", "--threshold", t, "--out", str(out)],
                              timeout=TIMEOUT))
        ranks = [np.load(out / f"dist_sync-t{t}-rank{r}.npy") for r in range(2)]
        assert np.array_equal(ranks[0].view(np.uint32), ranks[1].view(np.uint32)), f"dist_sync workers disagree, {t}"
        pulled[t] = ranks[0]
    return pulled


def differing(got, want):
    """{key: count of elements whose bits differ, summed over the iterations} for keys that differ."""
    g, w = got.view(np.uint32), want.view(np.uint32)
    bounds = np.cumsum([0] + sbs.SIZES)
    counts = {}
    for i, key in enumerate(sbs.KEYS):
        n = int((g[:, bounds[i]:bounds[i + 1]] != w[:, bounds[i]:bounds[i + 1]]).sum())
        if n:
            counts[key] = f"{n} of {sbs.ITERATIONS * sbs.SIZES[i]}"
    return counts


def test_dist_sync_pulls_decoded_2bit_sums(dist_sync):
    """Sanity for the reference column: every pulled value is the sum of 2 workers' decoded
    2bit values (0, +-t or +-2t in fp32), both signs and 0 occur in every key but the
    1-element one, and every key's values change over the iterations."""
    bounds = np.cumsum([0] + sbs.SIZES)
    for t, pulled in dist_sync.items():
        tf = np.float32(t)
        allowed = np.array([0, tf, -tf, tf + tf, -(tf + tf)], np.float32)
        assert np.isin(pulled, allowed).all(), t
        for i, key in enumerate(sbs.KEYS):
            values = pulled[:, bounds[i]:bounds[i + 1]]
            assert len({v.tobytes() for v in values}) > 1 or sbs.SIZES[i] == 1, (t, key)
            if sbs.SIZES[i] >= 16:
                assert (values > 0).any() and (values < 0).any() and (values == 0).any(), (t, key)


@pytest.mark.parametrize("flags", [[], ["--scheduler.slice_elements", "1024"]], ids=["default", "slices1024"])
def test_gcagent_pulls_what_dist_sync_pulls(dist_sync, tmp_path, flags):
    out = tmp_path / "pulled"
    out.mkdir()
    args = ["gcagent", "--out", str(out)] + [a for t in THRESHOLDS for a in ("--threshold", t)]
    with Cluster(tmp_path, 2, flags) as c:
        rep = reports(run_trainers(c, 1, "mxnet_side_by_side.py", args, timeout=TIMEOUT), c)
    assert sorted(r["rank"] for r in rep) == [0, 1], rep
    failures = {}
    for t in THRESHOLDS:
        for r in range(2):
            diff = differing(np.load(out / f"gcagent-t{t}-rank{r}.npy"), dist_sync[t])
            if diff:
                failures[f"threshold {t}, trainer {r}"] = diff
    assert not failures, f"gcagent ({' '.join(flags) or 'default flags'}) differs from dist_sync: {failures}"


def test_device_store_pulls_what_dist_sync_pulls(dist_sync, tmp_path):
    """MXNet's device store with 2 CPU contexts is the third column (it compresses on CPU
    contexts in 1.9.1; the local store refuses compression)."""
    args = [sys.executable, str(TRAINERS / "mxnet_side_by_side.py"), "device", "--out", str(tmp_path)]
    args += [a for t in THRESHOLDS for a in ("--threshold", t)]
    run = subprocess.run(args, env=shim_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    failures = {t: differing(np.load(tmp_path / f"device-t{t}-rank0.npy"), dist_sync[t]) for t in THRESHOLDS}
    failures = {t: d for t, d in failures.items() if d}
    assert not failures, f"the device store differs from dist_sync: {failures}"
