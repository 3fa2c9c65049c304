"""torchft's own DiLoCo (torchft.local_sgd.DiLoCo, its Manager, lighthouse and gloo process group),
two replica groups of one rank as threads of this process, on diloco_common's models: the
reference the gcagent runs are compared with.

    torchft_diloco.py mocked | train NAME

prints "report: {json}": per replica, the mocked parameter histories (every configuration) or
the trained parameters."""

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import torch
import torch.distributed as dist
from torchft._torchft import LighthouseServer
from torchft.local_sgd import DiLoCo
from torchft.manager import Manager
from torchft.process_group import ProcessGroupGloo

import diloco_common as common

REPLICAS = 2


def replica(index, lighthouse, barrier, mode, config):
    # init_sync=False: no replica loads another's state at the first quorum (torchft's default
    # "heals" replica 1 from replica 0 then, which replaces replica 1's first local steps).
    store = dist.TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)
    model = common.mocked_model(config[0]) if mode == "mocked" else common.train_model()
    manager = Manager(pg=ProcessGroupGloo(), min_replica_size=REPLICAS, use_async_quorum=False,
                      load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
                      state_dict=lambda: {"model": model.state_dict()}, replica_id=str(index),
                      store_addr="localhost", store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=lighthouse, init_sync=False, connect_timeout=timedelta(seconds=30),
                      quorum_timeout=timedelta(seconds=30), timeout=timedelta(seconds=30))
    try:
        fragments, delay, alpha = config
        if mode == "mocked":
            inner = common.MockOptimizer(model.parameters(), lr=1)
            outer = [common.MockOptimizer(layer.parameters(), lr=2) for layer in model.layers]
            parts, sync_every = list(model.layers), common.MOCKED_SYNC_EVERY
        else:
            inner, outer = common.optimizers(model, fragments)
            parts, sync_every = common.fragments_of(model, fragments), common.TRAIN_SYNC_EVERY
        result = {}
        with DiLoCo(manager, parts, inner, outer, sync_every=sync_every, fragment_sync_delay=delay,
                    fragment_update_alpha=alpha):
            if mode == "mocked":
                # As torchft's mocked test: one quorum first, every replica in it, committed twice
                # (the manager's step is then 2: fragment 0 syncs first, as through gcagent).
                manager.start_quorum()
                manager.wait_quorum()
                barrier.wait()
                assert manager.should_commit()
                assert manager.should_commit()
                common.mocked_loop(model, inner, lambda h: result.update(history=h))
            else:
                result["params"] = common.train_loop(model, inner, index,
                                                     common.TRAIN_SYNC_EVERY * common.TRAIN_OUTER_STEPS)
        result["manager_step"] = manager.current_step()
        return result
    finally:
        manager.shutdown(wait=False)


def run(mode, config):
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=REPLICAS)
    barrier = threading.Barrier(REPLICAS)
    try:
        with ThreadPoolExecutor(max_workers=REPLICAS) as pool:
            futures = [pool.submit(replica, i, lighthouse.address(), barrier, mode, config) for i in range(REPLICAS)]
            return [f.result() for f in futures]
    finally:
        lighthouse.shutdown()


def main():
    torch.set_num_threads(1)
    if sys.argv[1] == "mocked":
        runs = [run("mocked", config) for config in common.MOCKED_CONFIGS]
        results = [{"history": {i: runs[i][r]["history"] for i in range(len(runs))}} for r in range(REPLICAS)]
    else:
        results = run("train", common.TRAIN_CONFIGS[sys.argv[2]])
    print("report: " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
