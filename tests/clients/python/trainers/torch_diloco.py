"""A DiLoCo trainer through gcagent (gcagent.torch.diloco.DiLoCo), one trainer per agent; the
environment comes from shim_cluster.py.

    torch_diloco.py mocked | train NAME CODEC [PARAMS]

mocked: torchft's mocked regression test in each of diloco_common.MOCKED_CONFIGS, its parameter
histories; train: the MLP of diloco_common, TRAIN_OUTER_STEPS outer steps of config NAME, its
parameters. Prints "report: {json}" last."""

import json
import os
import sys

import torch

import diloco_common as common
import gcagent
import gcagent.torch.diloco

RANK = int(os.environ["WORLD_RANK"])
JOB = os.environ.get("GCAGENT_JOB", "job")


def main():
    torch.set_num_threads(1)
    mode = sys.argv[1]
    report = {}
    if mode == "mocked":  # every configuration, each a job of its own
        for index, (fragments, delay, alpha) in enumerate(common.MOCKED_CONFIGS):
            model = common.mocked_model(fragments)
            inner = common.MockOptimizer(model.parameters(), lr=1)
            outer = [common.MockOptimizer(layer.parameters(), lr=2) for layer in model.layers]
            client = gcagent.Client(job=f"{JOB}-mocked-{index}")
            with gcagent.torch.diloco.DiLoCo(list(model.layers), inner, outer, sync_every=common.MOCKED_SYNC_EVERY,
                                             fragment_sync_delay=delay, fragment_update_alpha=alpha, codec="none",
                                             client=client) as diloco:
                common.mocked_loop(model, inner, lambda h, i=index: report.setdefault("history", {}).update({i: h}))
            client.close()
    else:
        fragments, delay, alpha = common.TRAIN_CONFIGS[sys.argv[2]]
        params = dict(kv.split("=") for kv in sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[4] else {}
        model = common.train_model()
        inner, outer = common.optimizers(model, fragments)
        with gcagent.torch.diloco.DiLoCo(common.fragments_of(model, fragments), inner, outer,
                                         sync_every=common.TRAIN_SYNC_EVERY, fragment_sync_delay=delay,
                                         fragment_update_alpha=alpha, codec=sys.argv[3], params=params) as diloco:
            report["params"] = common.train_loop(model, inner, RANK,
                                                 common.TRAIN_SYNC_EVERY * common.TRAIN_OUTER_STEPS)
    report.update(outer_steps=diloco.outer_steps, failed_syncs=diloco.failed_syncs)
    print("report: " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
