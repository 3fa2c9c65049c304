"""P3 scheduling and selective compression with real agents over shaped links."""
import re

import pytest

from cluster import SANITIZED, Cluster, Namespaces

# Eight layers of 400k elements (1.6 MB each), produced last layer first, 5 ms apart.
LAYERS = ",".join(["400000"] * 8)


def completion_order(output):
    return [int(k) for k in re.findall(r"key_done key=(\d+)", output)]


def first_layer_ms(output):
    return float(re.search(r"first_layer_ms=([\d.]+)", output).group(1))


def run_backward_pass(tmp_path, ns, extra):
    tmp_path.mkdir()
    with Cluster(tmp_path, 2, ["--scheduler.slice_elements", "40000", *extra], namespaces=ns) as c:
        results = c.trainers(1, ["--tensors", LAYERS, "--iterations", "1", "--check", "exact",
                                 "--backward-ms", "5", "--report"], timeout=120)
        for rc, out in results:
            assert rc == 0, out
        assert c.stop() == [0, 0]
        return [out for _, out in results]


def test_high_priority_tensor_submitted_last_finishes_first_over_a_throttled_link(tmp_path):
    ok, why = Namespaces.available()
    if not ok:
        pytest.skip(why)
    if SANITIZED:
        # Measured against the clock: in the sanitized tree the order is a matter of luck
        # (about half the runs there put another layer first).
        pytest.skip("P3's timing is checked in the release tree; the sanitizers slow the agent unevenly")
    with Namespaces(2) as ns:
        ns.shape("200mbit")
        p3 = run_backward_pass(tmp_path / "p3", ns, ["--scheduler.inflight_per_peer", "2"])
        # A window larger than the whole iteration hands every slice to the transport at
        # once: first come, first served.
        fifo = run_backward_pass(tmp_path / "fifo", ns, ["--scheduler.inflight_per_peer", "4096"])
    for out in p3:
        order = completion_order(out)
        assert sorted(order) == list(range(8)), out
        # Layer 0 was submitted last, behind 11.2 MB of other layers on a 25 MB/s link; with
        # P3 it overtakes everything that was still queued.
        assert order.index(0) <= 1, out
    # Without the window every slice is on the wire at once and layer 0 shares the link
    # with all of them until the end.
    for p, f in zip(p3, fifo):
        assert first_layer_ms(p) < 0.6 * first_layer_ms(f), (p, f)
