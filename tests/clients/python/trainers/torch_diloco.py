"""A DiLoCo trainer through gcagent (gcagent.torch.diloco.DiLoCo), one trainer per agent; the
environment comes from shim_cluster.py.

    torch_diloco.py mocked | train NAME CODEC [PARAMS] | digits CODEC PARAMS
                  | checkpoint PHASE CODEC PARAMS DIR | elastic DIR

mocked: torchft's mocked regression test in each of diloco_common.MOCKED_CONFIGS, its parameter
histories; train: the MLP of diloco_common, TRAIN_OUTER_STEPS outer steps of config NAME, its
parameters. Prints "report: {json}" last."""

import json
import os
import sys
import time

import torch

import diloco_common as common
import gcagent
import gcagent.torch.diloco

RANK = int(os.environ["WORLD_RANK"])
JOB = os.environ.get("GCAGENT_JOB", "job")


def digits_mlp(shares):
    """scikit-learn's digits, this trainer's share of the training set (one of `shares`), the test
    set, and the README's MLP with the same initial weights on every trainer."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return x[:1500][RANK::shares], y[:1500][RANK::shares], x[1500:], y[1500:], model


def digits(codec, params):
    """The README's DiLoCo example (an MLP on scikit-learn's digits, sync_every 20), each average
    overlapping 2 inner steps (fragment_sync_delay), outer gradients with `codec`: the test
    accuracy and loss after 10 epochs."""
    train_x, train_y, test_x, test_y, model = digits_mlp(int(os.environ["WORLD_SIZE"]))
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    with gcagent.torch.diloco.DiLoCo([model], inner, outer, sync_every=20, fragment_sync_delay=2,
                                     codec=codec, params=params) as diloco:
        for _ in range(10):
            for i in range(0, len(train_x) - 31, 32):
                inner.zero_grad()
                torch.nn.functional.cross_entropy(model(train_x[i:i + 32]), train_y[i:i + 32]).backward()
                inner.step()
    with torch.no_grad():
        out = model(test_x)
    return {"accuracy": (out.argmax(1) == test_y).float().mean().item(),
            "test_loss": torch.nn.functional.cross_entropy(out, test_y).item(), "diloco": diloco,
            "late_syncs": diloco.late_syncs}


def elastic(directory):
    """Streaming DiLoCo (the digits MLP's two layers as fragments, sync_every 10, a delay of one
    step, alpha 0) with inner steps paced at 10 ms, failed outer steps caught, until the job's
    iteration written to DIR/stop has completed. Each outer step appends "job=J nodes=[...]" (or
    "failed job=J: why") to DIR/progress<RANK>. Reports accuracy and the outer state."""
    # the data's shares: whoever is in the job now
    train_x, train_y, test_x, test_y, model = digits_mlp(int(os.environ.get("DILOCO_NODES", "3")))
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    progress = open(os.path.join(directory, f"progress{RANK}"), "a", buffering=1)
    stop_file = os.path.join(directory, "stop")
    nodes_seen = []
    with gcagent.torch.diloco.DiLoCo([model[0], model[2]], inner, outer, sync_every=10,
                                     fragment_sync_delay=1) as diloco:
        step = 0
        while True:
            at = (step * 32) % (len(train_x) - 32)
            inner.zero_grad()
            torch.nn.functional.cross_entropy(model(train_x[at:at + 32]), train_y[at:at + 32]).backward()
            try:
                inner.step()
                if diloco.local_step == 0:
                    nodes = diloco.client.result_nodes
                    if not nodes_seen or nodes_seen[-1] != nodes:
                        nodes_seen.append(nodes)
                    progress.write(f"job={diloco.job_iteration} nodes={nodes}\n")
            except gcagent.GcagentError as e:
                progress.write(f"failed job={diloco.job_iteration}: {e}\n")
            step += 1
            if diloco.local_step == 0 and os.path.exists(stop_file):
                stop = open(stop_file).read().strip()
                if stop and diloco.job_iteration >= int(stop):
                    break
            time.sleep(0.01)
    with torch.no_grad():
        out = model(test_x)
    return {"accuracy": (out.argmax(1) == test_y).float().mean().item(), "nodes_seen": nodes_seen,
            "global": [g.reshape(-1).tolist() for g in diloco.global_parameters()],
            "momentum": [s["momentum_buffer"].reshape(-1).tolist() for s in outer.state_dict()["state"].values()],
            "resyncs": diloco.resyncs, "loaded": diloco.loaded, "job_iteration": diloco.job_iteration,
            "diloco": diloco}


CHECKPOINT_OUTER_STEPS = 3


def checkpointed(phase, codec, params, directory):
    """Plain DiLoCo on diloco_common's MLP with a compressed codec (its residuals matter): whole
    trains 2 x CHECKPOINT_OUTER_STEPS outer steps; save trains the first half and saves model,
    inner optimizer and DiLoCo state (torch.save); resume loads them into a fresh model and trains
    the second half; forget does too without the DiLoCo state's residuals. Reports the parameters."""
    model = common.train_model()
    inner, outer = common.optimizers(model, 1)
    path = os.path.join(directory, f"rank{RANK}.pt")
    steps = common.TRAIN_SYNC_EVERY * CHECKPOINT_OUTER_STEPS
    first, last = {"whole": (0, 2 * steps), "save": (0, steps), "resume": (steps, 2 * steps),
                   "forget": (steps, 2 * steps)}[phase]
    with gcagent.torch.diloco.DiLoCo([model], inner, outer, sync_every=common.TRAIN_SYNC_EVERY, codec=codec,
                                     params=params) as diloco:
        if phase in ("resume", "forget"):
            saved = torch.load(path, weights_only=False)
            model.load_state_dict(saved["model"])
            inner.load_state_dict(saved["inner"])
            if phase == "forget":
                for f in saved["diloco"]["fragments"]:
                    f["residuals"] = b""
            diloco.load_state_dict(saved["diloco"])
        for step in range(first, last):
            x, y = common.batch(RANK, step)
            inner.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            inner.step()
        if phase == "save":
            torch.save({"model": model.state_dict(), "inner": inner.state_dict(), "diloco": diloco.state_dict()}, path)
    return {"params": [p.detach().reshape(-1).tolist() for p in model.parameters()], "diloco": diloco}


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
    elif mode == "checkpoint":
        params = dict(kv.split("=") for kv in sys.argv[4].split(",")) if sys.argv[4] else {}
        report.update(checkpointed(sys.argv[2], sys.argv[3], params, sys.argv[5]))
        diloco = report.pop("diloco")
    elif mode == "elastic":
        report.update(elastic(sys.argv[2]))
        diloco = report.pop("diloco")
    elif mode == "digits":
        report.update(digits(sys.argv[2], dict(kv.split("=") for kv in sys.argv[3].split(",")) if sys.argv[3] else {}))
        diloco = report.pop("diloco")
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
