"""A trainer for gcagent-run's tests (argv[1] says what it does):

    sum N        sums N values of its own (seeded by RANK) over every trainer, codec none, and
                 prints "report: {json}": the variables the launcher set, the client's view of
                 its place, and the sha256 of the sum's bytes
    exit CODE    exits at once with CODE
    wait-signal  prints "waiting", then sleeps until SIGTERM; writes argv[2] when it comes"""

import hashlib
import json
import os
import signal
import sys
import time

import numpy as np

VARIABLES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
             "MASTER_ADDR", "MASTER_PORT", "GCAGENT_SOCKET", "GCAGENT_LOCAL_RANK", "GCAGENT_LOCAL_SIZE",
             "GCAGENT_NODE_METRICS", "GCAGENT_JOB"]


def values(rank, n):
    return np.random.default_rng(rank).standard_normal(n).astype(np.float32)


def run_sum(n):
    import gcagent
    with gcagent.Client() as client:
        total = gcagent.Reducer(client, codec="none").reduce([(1, values(int(os.environ["RANK"]), n), 0)],
                                                             result="sum")[0]
        report = {"env": {k: os.environ.get(k) for k in VARIABLES},
                  "client": [client.node_rank, client.node_count, client.world_rank, client.world_size],
                  "sum_sha256": hashlib.sha256(total.tobytes()).hexdigest()}
    os.write(1, ("report: " + json.dumps(report) + "\n").encode())  # one write: trainers share the pipe


def wait_signal(marker):
    def on_term(signum, _frame):
        with open(marker, "a") as f:
            f.write(f"rank {os.environ['RANK']} got signal {signum}\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    os.write(1, b"waiting\n")
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "sum":
        run_sum(int(sys.argv[2]))
    elif what == "exit":
        sys.exit(int(sys.argv[2]))
    elif what == "wait-signal":
        wait_signal(sys.argv[2])
