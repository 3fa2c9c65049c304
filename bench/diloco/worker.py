"""One trainer of the DiLoCo benchmark (run.py): the language model of lm.py, each trainer on its
own random windows of the training text, for --steps inner steps of --batch windows.

--system local: no communication at all (the compute-only baseline); ddp: DistributedDataParallel
over gloo, an all-reduce every step; diloco: gcagent.torch.diloco.DiLoCo through the agent (the
environment names it), outer step every --sync-every steps with --codec. Prints
"result: {json}": wall seconds of the training loop, of forward and backward (DDP's all-reduce
overlaps its backward), of the optimizer's math and of DiLoCo's outer steps inside step(), the
validation loss."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import lm

CONTEXT = 64
DDP_LR = 3e-3
# DiLoCo's own: a sweep on this model at 400 steps, H = 20 (simulated, 4 workers) gave a
# validation loss of 2.51 with the paper's outer Nesterov (lr 0.7, momentum 0.9; it needs far
# longer runs), 2.28 with momentum 0.5, 2.05 with plain averaging (lr 1, no momentum) and inner
# lr 3e-3, 1.96 with inner lr 1.5e-3, 2.02 with 1e-3.
INNER_LR = 1.5e-3
OUTER_LR, OUTER_MOMENTUM = 1.0, 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=["local", "ddp", "diloco"], required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sync-every", type=int, default=20)
    ap.add_argument("--fragments", type=int, default=1)
    ap.add_argument("--delay", type=int, default=0)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--params", default="")
    ap.add_argument("--outer-lr", type=float, default=OUTER_LR)
    ap.add_argument("--outer-momentum", type=float, default=OUTER_MOMENTUM)
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    train, val, digest = lm.corpus()
    torch.manual_seed(0)  # every trainer starts from the same model
    model = lm.LanguageModel(context=CONTEXT)
    generator = torch.Generator().manual_seed(1000 + rank)
    trained = model
    if a.system == "ddp":
        dist.init_process_group("gloo")
        trained = torch.nn.parallel.DistributedDataParallel(model)
    inner = torch.optim.AdamW(trained.parameters(), lr=INNER_LR if a.system == "diloco" else DDP_LR)
    # The optimizer's own math, timed by hooks registered before DiLoCo's: the rest of step() is
    # the outer steps (submit, wait, apply).
    math = {"s": 0.0, "at": 0.0}
    inner.register_step_pre_hook(lambda *_: math.update(at=time.perf_counter()))
    inner.register_step_post_hook(lambda *_: math.update(s=math["s"] + time.perf_counter() - math["at"]))
    diloco = None
    if a.system == "diloco":
        import gcagent.torch.diloco
        if a.fragments == 1:
            fragments = [model]
        else:  # blocks grouped into fragments; embeddings and the last norm with the first
            blocks = list(model.blocks)
            per = len(blocks) // a.fragments
            fragments = [torch.nn.ModuleList(blocks[i * per:(i + 1) * per]) for i in range(a.fragments)]
            fragments[0] = torch.nn.ModuleList([*fragments[0], model.embed, model.norm, _Holder(model.position)])
        outer = [torch.optim.SGD(f.parameters(), lr=a.outer_lr, momentum=a.outer_momentum,
                                 nesterov=a.outer_momentum > 0) for f in fragments]
        params = dict(kv.split("=") for kv in a.params.split(",")) if a.params else {}
        diloco = gcagent.torch.diloco.DiLoCo(fragments, inner, outer, sync_every=a.sync_every,
                                             fragment_sync_delay=a.delay, codec=a.codec, params=params)
        diloco.__enter__()
    compute, stepping = 0.0, 0.0
    start = time.perf_counter()
    for _ in range(a.steps):
        x, y = lm.batch(train, generator, a.batch, CONTEXT)
        t0 = time.perf_counter()
        inner.zero_grad()
        lm.loss_of(trained, x, y).backward()
        t1 = time.perf_counter()
        inner.step()
        compute += t1 - t0
        stepping += time.perf_counter() - t1
    wall = time.perf_counter() - start
    if diloco is not None:
        diloco.__exit__(None, None, None)
    result = {"rank": rank, "wall_s": wall, "forward_backward_s": compute, "optimizer_s": math["s"],
              "outer_s": stepping - math["s"], "corpus": digest,
              "val_loss": lm.validation_loss(model, val, CONTEXT), "parameters": lm.parameter_count(model)}
    if diloco is not None:
        result.update(outer_steps=diloco.outer_steps, failed_syncs=diloco.failed_syncs,
                      late_syncs=diloco.late_syncs, waited_s=diloco.waited_s)
    if a.system == "ddp":
        dist.destroy_process_group()
    print("result: " + json.dumps(result), flush=True)


class _Holder(torch.nn.Module):
    """A module around a bare parameter (the position table), so a fragment can hold it."""

    def __init__(self, p):
        super().__init__()
        self.p = p


if __name__ == "__main__":
    main()
