"""MXNet's own gradient compression tests, ported (trainers/mxnet_ported.py), run against
MXNet 1.9.1's real dist_sync store on loopback and against gcagent.mxnet.KVStore.

- Real dist_sync (1 scheduler, 1 server, 2 workers) must pass every ported 2bit check: that
  validates the port. It runs twice: with 1 device a worker (MXNet's own setting) and with 2
  (each worker pushes a list of 2 values), the setting 2 agents x 2 trainers stands for.
- gcagent with 2 agents x 1 trainer and 2 agents x 2 trainers, default agent flags (what a
  new user gets): the same 2bit checks, and master's 1bit checks (1.9.1 has no 1bit).

With 2 trainers per agent, MXNet's expected values computed with nworker = kv.num_workers (4)
do not hold: the agent sums its 2 trainers before compression with one residual, as
dist_sync sums one worker's devices (2 trainers pushing 0.4 make 0.8, which meets 2bit's
0.5). The trainer script therefore treats each agent as one dist_sync worker: each trainer
pushes half of MXNet's value, and nworker is the number of agents; the dist_sync run with 2
devices a worker passes the same checks, so that is dist_sync's own behaviour.

Each check is reported by name; a failure lists every failed check of every process."""

import numpy as np
import pytest

pytest.importorskip("mxnet")

import mxnet_reference as ref  # noqa: E402
from mxnet_dist_sync import has_dist_kvstore, run_dist_sync  # noqa: E402
from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

CHECKS_2BIT = [f"2bit.{c}" for c in ("check_compr_pull_before_push", "check_compr_zero", "check_compr_residual",
                                      "check_compr_ones", "check_compr_random")] + \
              [f"2bit.test_compress_kvstore.{c}" for c in ("pull_init_test", "pull_before_push", "push_zeros",
                                                            "verify_residual", "check_neg", "check_compr_random")] + \
              ["2bit.extra.device_list_sum_order"]
KVSTORE_1BIT = ("pull_init_test", "pull_before_push", "push_ones", "push_neg_ones", "verify_residual_1bit",
                "check_compr_random")


def checks_1bit(thresholds):
    return [f"1bit.{c}" for c in ("check_compr_pull_before_push", "check_compr_ones", "check_compr_neg_ones",
                                   "check_compr_residual", "check_compr_random")] + \
           [f"1bit.test_compress_kvstore[{t:g}].{c}" for t in thresholds for c in KVSTORE_1BIT]


# test_kvstore.py's 1bit thresholds (master) with 1 trainer an agent; with 2 only the
# nightly dist test's 0, to keep the set within a few minutes on two cores.
LAYOUTS = {"2x1": (1, [-0.5, 0, 0.5]), "2x2": (2, [0])}
TIMEOUT = 600  # a deadline for a hung run, far above the minute or two a loaded machine needs


def assert_all_passed(rep, expected, who):
    """Every process ran exactly the expected checks, and each passed."""
    failures = []
    for r in rep:
        got = {k: v for k, v in r["checks"].items() if k.split(".")[0] == expected[0].split(".")[0]}
        missing = [c for c in expected if c not in got]
        if missing:
            failures.append(f"rank {r['rank']}: not reported: {missing}")
        failures += [f"rank {r['rank']}: {name}: {outcome}" for name, outcome in got.items() if outcome != "passed"]
    assert not failures, f"{who}: {len(failures)} failed:\n" + "\n".join(failures)


def test_reference_matches_mxnet_helpers():
    """mxnet_reference.expected_quantization, which the checks use on big arrays, gives what
    MXNet's own helpers (copied from 1.9.1 and master) give: residuals, decoded values and
    packed words, bit for bit and dtype for dtype, over several steps."""
    rng = np.random.RandomState(7)

    def same(a, b):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)

    for shape in [(1,), (2, 3), (16,), (17,), (32,), (64,), (33, 3)]:
        for kind, threshold in [("2bit", 0.5), ("2bit", 0.3), ("1bit", 0), ("1bit", -0.5), ("1bit", 0.5)]:
            res_copied = res_fast = np.zeros(shape)
            for step in range(4):
                grad = rng.uniform(-1, 1, shape).astype(np.float32) * (2 if step % 2 else 0.9)
                helper = ref.compute_2bit if kind == "2bit" else ref.compute_1bit
                copied = ref.compute_expected_quantization(grad, res_copied, threshold, helper)
                if kind == "2bit":
                    old = ref.compute_expected_2bit_quantization(grad, res_copied, threshold)
                    assert all(same(a, b) for a, b in zip(old, copied)), (shape, threshold, step)
                fast = ref.expected_quantization(grad, res_fast, threshold, kind)
                for name, a, b in zip(("compr", "residual", "decompr"), copied, fast):
                    assert same(a, b), (shape, kind, threshold, step, name, a, b)
                res_copied, res_fast = copied[1], fast[1]


@pytest.mark.parametrize("devices", [1, 2])
def test_dist_sync_passes_the_ported_2bit_checks(devices):
    ok, why = has_dist_kvstore()
    if not ok:
        pytest.skip(why)
    rep = reports(run_dist_sync("mxnet_ported.py", 2, ["dist_sync", "--suite", "2bit", "--devices", str(devices)],
                                timeout=TIMEOUT))
    assert sorted(r["rank"] for r in rep) == [0, 1] and all(r["parts"] == devices for r in rep), rep
    assert_all_passed(rep, CHECKS_2BIT, f"dist_sync, 2 workers x {devices} devices")


_RUNS = {}


@pytest.fixture(params=list(LAYOUTS), scope="module")
def gcagent_run(request, tmp_path_factory):
    """One run of both suites per layout, shared by the 2bit and the 1bit test."""
    layout = request.param
    if layout not in _RUNS:
        local_size, thresholds = LAYOUTS[layout]
        args = ["gcagent", "--suite", "2bit", "--suite", "1bit"]
        args += [a for t in thresholds for a in ("--kvstore-1bit-threshold", str(t))]
        with Cluster(tmp_path_factory.mktemp(f"ported{layout}"), 2) as c:
            _RUNS[layout] = reports(run_trainers(c, local_size, "mxnet_ported.py", args, timeout=TIMEOUT), c)
    rep = _RUNS[layout]
    local_size, thresholds = LAYOUTS[layout]
    assert sorted(r["rank"] for r in rep) == list(range(2 * local_size)), rep
    assert all(r["workers"] == 2 and r["parts"] == local_size for r in rep), rep
    return layout, rep, thresholds


def test_gcagent_passes_the_ported_2bit_checks(gcagent_run):
    layout, rep, _ = gcagent_run
    assert_all_passed(rep, CHECKS_2BIT, f"gcagent {layout}")


def test_gcagent_passes_masters_1bit_checks(gcagent_run):
    layout, rep, thresholds = gcagent_run
    assert_all_passed(rep, checks_1bit(thresholds), f"gcagent {layout}")
