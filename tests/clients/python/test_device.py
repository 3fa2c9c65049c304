"""GPU tensors against a real agent, through the real client library (ctypes).

Everywhere: a trainer that declares device tensors on an agent that cannot reach its GPU gets
the agent's exact refusal naming the GPU (and why the agent has none, or which one it uses),
the refusal is counted as errors_total{kind="device_unavailable"} and logged, and the same
trainer and another job keep reducing host tensors on that agent.

With a GPU (and PyTorch built with CUDA): the device path end to end, slots mapped through
CUDA IPC, ordered by the interprocess events."""

import ctypes
import re
import urllib.request

import numpy as np
import pytest

from gcagent.client import Client, GcagentError, TensorSpec, gpu_uuid
from shim_cluster import LIBRARY, Cluster

FOREIGN_GPU = bytes(range(1, 17))
FOREIGN_TEXT = "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"


@pytest.fixture(autouse=True)
def library(monkeypatch):
    monkeypatch.setenv("GCAGENT_CLIENT_LIB", str(LIBRARY))


def host_has_gpu():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def metric_at(cluster, rank, name, labels):
    text = urllib.request.urlopen(f"http://{cluster.metrics_address(rank)}/metrics", timeout=5).read().decode()
    m = re.search(re.escape(name + "{" + labels + "}") + r" (\S+)", text)
    return float(m.group(1)) if m else None


def metric(cluster, name, labels):
    return metric_at(cluster, 0, name, labels)


def reduce_host(client, key, values, iteration):
    client.buffer(key)[:] = values
    client.submit(iteration, [key])
    assert client.wait(iteration, [key], 20000)
    return client.buffer(key).copy()


def test_device_declare_is_refused_with_the_gpu_named_and_host_jobs_go_on(tmp_path):
    with Cluster(tmp_path, 1) as c:
        trainer = Client(socket=c.sockets[0], job="gpu-job", local_rank=0, local_size=1)
        with pytest.raises(GcagentError) as refused:
            trainer.declare_device([TensorSpec(1, 1000)], FOREIGN_GPU)
        assert refused.value.code == 5  # GCAGENT_ERR_AGENT
        head = ("gcagent: declare 1 device tensors: the agent rejected the declare device: failed_precondition: "
                f"the trainer's tensors live on {FOREIGN_TEXT}")
        message = str(refused.value)
        if host_has_gpu():
            assert re.fullmatch(re.escape(head + ", which this agent does not see (it sees ") +
                                r"gpu 0 \(GPU-[0-9a-f-]{36}\).*\); give the agent the trainer's GPU "
                                r"\(CUDA_VISIBLE_DEVICES\)", message), message
        else:
            no_gpu = [
                "cannot load libcuda.so.1: libcuda.so.1: cannot open shared object file: No such file or directory",
                "this agent was built without CUDA",
            ]
            assert message in [f"{head}, but this agent has no GPU ({why}); declare host tensors instead"
                               for why in no_gpu], message
        assert "device declare refused: the trainer's tensors live on " + FOREIGN_TEXT in c.log(0)

        # The refused trainer's connection still works: it reduces on the host instead.
        trainer.declare([TensorSpec(1, 1000)])
        values = np.arange(1000, dtype=np.float32)
        np.testing.assert_array_equal(reduce_host(trainer, 1, values, 1), values)

        # And another job on the same agent was never disturbed.
        other = Client(socket=c.sockets[0], job="host-job", local_rank=0, local_size=1)
        other.declare([TensorSpec(7, 33, codec="none")])
        np.testing.assert_array_equal(reduce_host(other, 7, np.full(33, 2.5, np.float32), 1),
                                      np.full(33, 2.5, np.float32))

        assert metric(c, "gcagent_errors_total", 'kind="device_unavailable"') == 1
        assert metric(c, "gcagent_errors_total", 'kind="bad_message"') == 0
        with pytest.raises(GcagentError) as wrong:
            trainer.submit_device(2, [1])
        assert "the tensors are declared on the host: submit them with gcagent_submit" in str(wrong.value)
        trainer.close()
        other.close()


def test_gpu_uuid_without_a_gpu_says_why():
    if host_has_gpu():
        pytest.skip("this host has a GPU: the refusal of gcagent_gpu_uuid is for hosts without one")
    with pytest.raises(GcagentError) as e:
        gpu_uuid(0)
    assert e.value.code == 10  # GCAGENT_ERR_UNSUPPORTED
    assert str(e.value) in [
        "gcagent: gpu 0: no GPU: cannot load libcuda.so.1: libcuda.so.1: cannot open shared object file: "
        "No such file or directory",
        "gcagent: gpu 0: this gcagent client library was built without CUDA",
    ]


def test_device_tensors_reduce_through_cuda_ipc(tmp_path):
    torch = pytest.importorskip("torch")
    if not host_has_gpu() or not torch.cuda.is_available():
        pytest.skip("no GPU: the device path needs one (and PyTorch with CUDA)")
    from gcagent.torch import _DeviceSlot
    with Cluster(tmp_path, 1) as c:
        trainer = Client(socket=c.sockets[0], job="gpu-job", local_rank=0, local_size=1)
        uuid = trainer.gpu_uuid(0)
        sizes = {1: 1000, 2: 1 << 20}
        trainer.declare_device([TensorSpec(k, n, codec="none") for k, n in sizes.items()], uuid)
        slots = {k: torch.as_tensor(_DeviceSlot(trainer.device_buffer(k), n), device="cuda:0") for k, n in sizes.items()}
        assert all(trainer.device_buffer(k) % 256 == 0 for k in sizes)
        stream = torch.cuda.Stream()
        for it in (1, 2, 3):
            with torch.cuda.stream(stream):
                grads = {k: torch.arange(n, device="cuda:0", dtype=torch.float32) * it for k, n in sizes.items()}
                for k in sizes:
                    slots[k].copy_(grads[k])
            trainer.submit_device(it, list(sizes), stream.cuda_stream)
            assert trainer.wait_device(it, list(sizes), 30000, stream.cuda_stream)
            with torch.cuda.stream(stream):
                back = {k: slots[k].clone() for k in sizes}
            stream.synchronize()
            for k in sizes:  # one trainer on one node: the average is its own gradient
                assert torch.equal(back[k], grads[k]), f"key {k} iteration {it}"
        assert metric(c, "gcagent_errors_total", 'kind="device_unavailable"') == 0
        trainer.close()


@pytest.mark.parametrize("staged", ["", "none,topk,dgc,threshold"], ids=["all-coded", "default"])
def test_device_and_host_jobs_give_the_same_bytes_for_every_codec(tmp_path, staged):
    """2 agents x 2 trainer processes on one GPU: the same gradients reduced once through host
    tensors and once through device slots, where the agent sums, encodes (residuals on the
    GPU) and decodes on the GPU, must give bit-identical results for all 12 codecs; with the
    default configuration none and the selection codecs are staged through the host instead."""
    torch = pytest.importorskip("torch")
    if not host_has_gpu() or not torch.cuda.is_available():
        pytest.skip("no GPU: the device path needs one (and PyTorch with CUDA)")
    from shim_cluster import reports, run_trainers
    iterations = 4
    args = ["--compress.min_elements", "0", "--scheduler.slice_elements", "16384", "--compress.gpu_staged_codecs", staged]
    with Cluster(tmp_path, 2, args) as c:
        rep = reports(run_trainers(c, 2, "device_trainer.py", [str(iterations)]), c)
        sent = [metric_at(c, rank, "gcagent_gpu_copy_bytes_total", 'direction="sent"') for rank in range(2)]
        received = [metric_at(c, rank, "gcagent_gpu_copy_bytes_total", 'direction="received"') for rank in range(2)]
        errors = [metric_at(c, rank, "gcagent_errors_total", 'kind="device_unavailable"') for rank in range(2)]
    for r in rep:
        assert all(n == 0 for counts in r["differing"].values() for n in counts), r
        assert max(r["none_error"]) < 1e-6, r
    assert errors == [0, 0]
    # The GPU sums a node's two trainers and only encodings cross PCIe: less than one fp32
    # gradient per iteration each way (staging would move two, 4 bytes per element each).
    fp32_bytes = 4 * iterations * (70_001 + 2 * 50_000 + 65_537 + 5 * 40_000 + 3 * 100_000)
    staged_elements = 70_001 + 3 * 100_000 if staged else 0  # none's tensor and the selection codecs'
    staged_bytes = 2 * 4 * iterations * staged_elements  # both trainers' slots
    for s, rc in zip(sent, received):
        assert staged_bytes < s < staged_bytes + fp32_bytes, (sent, received, fp32_bytes)
        assert staged_bytes < rc < staged_bytes + fp32_bytes, (sent, received, fp32_bytes)
