"""gcagent.torch.fsdp with PyPI's torch on the CPU: FSDP2 sharded inside each node over gloo,
the agents between the nodes (2 agents with 2 trainer processes each)."""

import signal

import pytest

pytest.importorskip("torch")

from shim_cluster import Cluster, finish, read_until, reports, run_trainers, start_trainers  # noqa: E402

AGENT_ARGS = ["--compress.min_elements", "0", "--scheduler.slice_elements", "1024"]


def test_hsdp_through_the_agent_equals_fsdp2s_own_hsdp(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_fsdp.py", ["suite"]), c)
    for r in rep:
        # PyTorch's own test of the all-reduce hook, with its expected gradients.
        assert r["ported"] == {"hook_called": True, "out_proj": True, "in_proj": True}, r["ported"]
        # Its test of the reduce-scatter (test_reduce_scatter_fp32 and _fp16) with gcagent's
        # comm in place of DefaultReduceScatter: all 8 gradients equal the all_reduce's.
        for dtype in ("torch.float32", "torch.float16"):
            assert r["ported_reduce_scatter"][dtype] == {"equal": [True] * 8, "agent_shards": 1,
                                                         "comm": "gcagent.torch.fsdp"}, r["ported_reduce_scatter"]
        # Every step bit for bit FSDP2's HSDP over gloo (2 trainers per node: the order of a
        # sum of two does not matter), including the steps that accumulate gradients.
        parity = r["parity"]
        assert parity["equal"] == [True] * 24, parity
        assert parity["modules"] == 3, parity  # two blocks and the root (embeddings, norm, head)
        assert parity["shards"] == 24 * 3, parity
        # The second backward pass of each accumulating pair reads the gradients FSDP keeps.
        assert parity["waited_in_hook"] == 2 * 3, parity
        assert parity["last_loss"] < parity["first_loss"], parity
        # The same in bfloat16 (fp32 weights): FSDP casts each shard into fp32 gradients, and the
        # average lands there at the end of the pass, still with no wait in the hook but for
        # the accumulating steps.
        assert r["parity_bf16"]["equal"] == [True] * 24, r["parity_bf16"]
        assert r["parity_bf16"]["waited_in_hook"] == 2 * 3, r["parity_bf16"]
        # PyTorch's test_train_parity_hsdp, all 24 subtests (resharding, activation checkpointing,
        # uneven shards, gradients synced at the last microbatch or at each) against DDP.
        assert r["training"] == {"subtests": 24, "failures": []}, r["training"]
        assert r["unused"]["error"] is not None and "set_reduce_scatter_unused_params(True)" in r["unused"]["error"], r


# The codecs' convergence against uncompressed HSDP (600 steps each, 7 minutes here) is a
# benchmark: bench/hsdp_convergence.py. Here each compressed path trains a few steps.
SHORT = [("train", "2bit", "threshold=0.002,reduce.aggregation=mxnet"), ("train", "dgc", "ratio=0.01,momentum=0"),
         ("train-bf16", "fp8", "")]


def test_hsdp_with_compressed_shards_trains_alike_on_every_trainer(tmp_path):
    """Compressed shards (fp32 2bit and dgc, bfloat16 fp8), 40 SGD steps, 2 nodes x 2 trainers:
    every trainer ends with the same model, its loss below the untrained one."""
    steps = 40
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        for mode, codec, params in SHORT:
            rep = reports(run_trainers(c, 2, "torch_fsdp.py", [mode, codec, params, str(steps)]), c)
            assert all(r["shards"] == steps * 3 for r in rep), rep
            assert {d for r in rep for d in r["slot_dtypes"]} == {"torch.bfloat16" if mode == "train-bf16"
                                                                  else "torch.float32"}, rep
            # Every trainer of a node holds other shards, yet all apply the same averages: the
            # validation loss of the whole model is one value.
            assert len({round(r["val_loss"], 6) for r in rep}) == 1, rep
            assert rep[0]["val_loss"] < 0.9 * rep[0]["initial_val_loss"], (codec, rep[0])


def test_hsdp_overflow_steps_skip_and_scale_as_fsdp2s_own(tmp_path):
    """torch.amp.GradScaler through gcagent's HSDP and FSDP2's own over gloo, rank 0's loss
    overflowing at one step: the same scale sequence (the step skipped, the scale halved),
    whatever the codec, and no NaN left in the parameters."""
    codecs = ["none", "2bit:threshold=0.002", "fp8"]
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        rep = reports(run_trainers(c, 2, "torch_fsdp.py", ["overflow", *codecs]), c)
    for r in rep:
        for codec in codecs:
            got = r[codec]
            assert got["ref_scales"][4] == got["ref_scales"][3] / 2, got  # FSDP2's own: skipped, halved
            assert got["scales"] == got["ref_scales"], (codec, got)
            assert got["finite"], (codec, got)
        assert r["none"]["equal_to_fsdp2"], r["none"]


def test_a_killed_agent_fails_the_step_instead_of_hanging(tmp_path):
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        procs = start_trainers(c, 2, "torch_fsdp.py", ["agent-dies"])
        read_until(procs[0], "active")  # its first step went through the agents: agent 1 is killed
        c.procs[1].send_signal(signal.SIGKILL)
        results = finish(procs, 240)
    rep = reports(results)
    # The dead agent's trainers see their connection close; the others see their agent fail
    # the shards (peer lost), or at worst the hook's 30 s timeout. None hangs.
    for r in rep:
        assert r["type"] == "GcagentError" and r["raised"].startswith("gcagent: "), rep


def test_replicas_apart_after_a_step_given_up_reload_node_0s_shards_and_optimizer_state(tmp_path):
    """Node 1's replica moved apart (shards, AdamW's moments and step count) while node 0 gave
    step 4 up at the reduction timeout; node 1's trainers submit step 4 only after that, and it
    fails there too, at once (a given-up step fails on every node, the notice before the submit
    or after). The agents call a reload, and after the next step that completes every trainer
    loads node 0's shard of its local rank and that shard's optimizer state through
    sync_parameters(optimizer). From there on both nodes hold the same replica, bit for bit, at
    every step."""
    with Cluster(tmp_path, 2, AGENT_ARGS + ["--transport.reduction_timeout", "2"]) as c:
        rep = reports(run_trainers(c, 2, "torch_fsdp.py", ["diverged"]))
    assert [r["failed"] for r in rep] == [1, 1, 1, 1], rep  # step 4, on both nodes
    for r in rep[2:]:
        assert "given up to realign with the other nodes" in r["errors"][0], r["errors"]
    assert rep[0]["loaded"] and all(r["loaded"] == rep[0]["loaded"] for r in rep), rep
    assert all(r["resyncs"] == len(r["loaded"]) for r in rep), rep
    last = rep[0]["loaded"][-1]
    for local in range(2):
        node0, node1 = rep[local]["digests"], rep[2 + local]["digests"]
        assert node0[:3] == node1[:3], local  # one replica until node 1 was moved
        assert node0[3] != node1[3], local    # apart after step 4
        assert node0[last - 1:] == node1[last - 1:], (local, last)  # one again from the reload on
    assert rep[0]["digests"] != rep[1]["digests"], "local ranks hold different shards"


@pytest.mark.parametrize("codec,params", [("2bit", "threshold=0.002"), ("dgc", "ratio=0.01,momentum=0")])
def test_a_job_restarted_from_a_checkpoint_continues_with_its_residuals_bit_for_bit(tmp_path, codec, params):
    """Train, save model, optimizer and the hook's state with torch.distributed.checkpoint, stop
    every trainer and agent, start new ones, load, train on: every step equals the uninterrupted
    run's, bit for bit. Loading all but the hook's state (its residuals reset, as DeepSpeed's
    1-bit optimizers do on load) does not: the check can fail."""
    ckpt = tmp_path / "checkpoint"
    runs = {}
    for phase in ("whole", "save", "resume", "forget"):
        (tmp_path / phase).mkdir()
        with Cluster(tmp_path / phase, 2, AGENT_ARGS) as c:  # new agents: nothing survives but the checkpoint
            args = ["checkpoint", phase, codec, params, str(ckpt)]
            runs[phase] = reports(run_trainers(c, 2, "torch_fsdp.py", args), c)
    steps = 12
    for rank in range(4):
        whole, saved, resumed, forgot = (runs[p][rank] for p in ("whole", "save", "resume", "forget"))
        assert saved["losses"] == whole["losses"][:steps + 1], rank  # the same run up to the checkpoint
        assert saved["residual_bytes"] > 0, saved
        assert resumed["step"] == forgot["step"] + steps == 2 * steps, (resumed, forgot)
        assert resumed["dropped"] == 0, resumed
        assert resumed["losses"] == whole["losses"][steps + 1:], (rank, resumed["losses"], whole["losses"])
        assert resumed["digest"] == whole["digest"], rank
        assert forgot["digest"] != whole["digest"], "without the residuals the restart must differ"


def test_fsdp_over_every_trainer_reduce_scatters_through_the_agents(tmp_path):
    """FSDP without replication (the transformer sharded over 2 nodes x 2 trainers), each
    module's reduce-scatter through the agents: each region reduced to its node alone. With
    codec none every step stays within fp32 summation-order rounding of FSDP2's own
    reduce-scatter over gloo, and every reduce-scatter's output equals bit for bit the sum the
    trainer computes from every trainer's input in gcagent's documented order; with 2bit it
    trains as FSDP2 over gloo does."""
    with Cluster(tmp_path, 2, AGENT_ARGS) as c:
        exact = reports(run_trainers(c, 2, "torch_fsdp.py", ["world", "none", "", "20"]), c)
        twobit = reports(run_trainers(c, 2, "torch_fsdp.py", ["world", "2bit", "threshold=0.002", "150"]), c)
    for r in exact:
        assert r["shards"] == 20 * 3 and r["waited_in_hook"] == 0, r
        assert max(r["differences"]) < 1e-5, r["differences"]
        assert r["exact"] == [True] * (20 * 3), r["exact"]
    for r in twobit:
        assert r["last_loss"] < 0.8 * r["first_loss"], r
        assert r["last_loss"] <= 1.05 * r["gloo_last_loss"], r
