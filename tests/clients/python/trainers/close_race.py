"""Closes gcagent clients from several threads at once, as the shims' threads may: the hook's
completion thread blocked in wait_any, the autograd thread closing a connection it replaced,
and __del__ run by whichever thread drops the last reference. Each round connects a client,
starts a thread blocked in wait_any on it, and releases three closers together. Run with
MALLOC_CHECK_=3: a handle freed twice aborts the process. Prints "report: {...}"."""

import json
import os
import sys
import threading

import gcagent

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def round_once():
    client = gcagent.Client()
    client.declare([gcagent.TensorSpec(key=0, elements=16)])
    wake_r, wake_w = os.pipe()

    def wait():
        try:
            client.wait_any([(1, 0)], timeout_ms=2000, wake_fd=wake_r)
        except gcagent.GcagentError:  # closed before it began, or not submitted
            pass

    waiting = threading.Thread(target=wait)
    waiting.start()
    start = threading.Barrier(3)

    def closer():
        start.wait()
        client.close()

    closers = [threading.Thread(target=closer) for _ in range(3)]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    os.write(wake_w, b"x")
    waiting.join()
    os.close(wake_r)
    os.close(wake_w)


if __name__ == "__main__":
    for _ in range(ROUNDS):
        round_once()
    print("report: " + json.dumps({"rounds": ROUNDS}), flush=True)
