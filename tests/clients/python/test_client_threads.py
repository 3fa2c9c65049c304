"""The Python client under the threads the shims run: closes from several threads at once, one
of them while another thread blocks in wait_any, with glibc's heap checks on (MALLOC_CHECK_=3,
MALLOC_PERTURB_): a connection freed twice aborted a trainer with "double free or corruption
(fasttop)" in the HSDP test before close() took the handle under a lock."""

import os
import sysconfig

import pytest

from shim_cluster import Cluster, reports, run_trainers  # noqa: E402

pytest.importorskip("numpy")

MALLOC_DEBUG = os.path.join("/lib", sysconfig.get_config_var("MULTIARCH") or "", "libc_malloc_debug.so.0")


def test_concurrent_closes_free_the_connection_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINER_ZYGOTE", "0")  # a process of its own: glibc reads MALLOC_CHECK_ at its start
    with Cluster(tmp_path, 1, []) as c:
        env = {}
        if not os.environ.get("TEST_PRELOAD"):  # under AddressSanitizer, its checks instead
            env = {"MALLOC_CHECK_": "3", "MALLOC_PERTURB_": "165"}
            if os.path.exists(MALLOC_DEBUG):  # glibc 2.34 on: MALLOC_CHECK_ needs it loaded
                env["LD_PRELOAD"] = MALLOC_DEBUG
        rep = reports(run_trainers(c, 1, "close_race.py", ["300"], env=env, timeout=300), c)
    assert rep[0]["rounds"] == 300
