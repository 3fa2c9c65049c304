"""A Reducer with a step timeout shorter than the agent's transport.reduction_timeout, against
a peer that submits late (after that timeout, before the agent's): the trainer must wait for
the agent rather than give the step up while the agent may still complete it into its slot.
World rank 1 submits LATE_S seconds late. Rank 0 reduces through its slot with timeout_ms
SHORT_MS, records whether it raised, then fills the slot with a sentinel and watches it for a
while. Prints "report: {...}"."""

import json
import time
import warnings

import numpy as np

import gcagent

SHORT_MS, LATE_S, N = 300, 1.5, 1024

if __name__ == "__main__":
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reducer = gcagent.Reducer(timeout_ms=SHORT_MS, codec="none")
    rank = reducer.client.world_rank
    slot = reducer.slots([(0, N, 0)])[0]
    slot[:] = rank + 1.0
    if rank == 1:
        time.sleep(LATE_S)
    error, started = None, time.monotonic()
    try:
        reducer.reduce_slots([0])
    except gcagent.GcagentError as e:
        error = str(e)
    waited = time.monotonic() - started
    result = float(slot[0])
    slot[:] = -7.0  # the next step's gradient, written the moment the trainer heard
    time.sleep(2 * LATE_S)
    report = {"error": error, "result": result, "waited_s": waited,
              "sentinel_kept": bool((slot == -7.0).all()), "timeout_ms": reducer.timeout_ms,
              "agent_timeout_s": reducer.client.reduction_timeout_s,
              "warnings": [str(w.message) for w in caught]}
    print("report: " + json.dumps(report), flush=True)
