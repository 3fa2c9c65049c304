"""Error of the low-bit codecs (fp8, int4, mxfp4) on real gradients, against references
written from the formats' specs and against torchft's fp8 rule.

    GCAGENT_BUILD_DIR=build/release $GCAGENT_CACHE/venv-torch/bin/python bench/lowbit_error.py
        [--models vgg16,bert_base] [--json out.json]

The gradient sets: VGG-16 and BERT-base built here in plain PyTorch with the parameter
tensors of bench/models/*.csv (checked: the same element counts, in order), one backward
pass at a fixed seed (VGG-16 on 4 random 64x64 images, BERT-base's encoder on 4 random
sequences of 128 tokens, a mean-square loss on the outputs). Every tensor is one slice,
encoded once with no residual: the error of one step.

For each codec the table gives the relative error ||decoded - g|| / ||g|| per tensor, its
mean and its maximum over the tensors (tensors of all zeros left out), and, where the format
has a reference, the largest difference between gcagent's decoded values and the
reference's (0: bit for bit):
  fp8     per block of `block` values, s = max|x| / 448 (e4m3) or 57344 (e5m2), x / s cast
          with torch's float8_e4m3fn / float8_e5m2 (round to nearest even), times s;
  int4    s = max|x| / 7 per block, numpy's rint (ties to even), clipped to 7, times s;
  mxfp4   the OCP MX rule: X = 2^(floor(log2 max|x|) - 2) per 32 values, e2m1 nearest
          (ties to even) of x / X saturated at 6, times X.
torchft's fp8 (torchft/quantization.py, 0.2.0) is a Triton kernel that needs a GPU; its rule
is run here on the CPU as it documents it: one scale per row (dim 0 of the tensor, the rest
flattened), x * (448 / max|row|) cast to float8_e4m3fn, divided back.
"""

import argparse
import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]


def vgg16():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, c = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    return nn.Sequential(nn.Sequential(*layers), nn.AdaptiveAvgPool2d(7), nn.Flatten(),
                         nn.Linear(512 * 49, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 1000))


class BertLayer(nn.Module):
    """One encoder layer with BERT's parameter tensors: query, key, value, output, norms, MLP."""

    def __init__(self, width=768, heads=12):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.attention_out, self.attention_norm = nn.Linear(width, width), nn.LayerNorm(width)
        self.intermediate, self.out, self.out_norm = nn.Linear(width, 4 * width), nn.Linear(4 * width, width), nn.LayerNorm(width)

    def forward(self, x):
        b, t, w = x.shape
        split = lambda y: y.reshape(b, t, self.heads, w // self.heads).transpose(1, 2)
        a = nn.functional.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        x = self.attention_norm(x + self.attention_out(a.transpose(1, 2).reshape(b, t, w)))
        return self.out_norm(x + self.out(nn.functional.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(30522, 768)
        self.position = nn.Embedding(512, 768)
        self.token_type = nn.Embedding(2, 768)
        self.norm = nn.LayerNorm(768)
        self.layers = nn.ModuleList(BertLayer() for _ in range(12))
        self.pooler = nn.Linear(768, 768)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1])
        x = self.norm(self.word(tokens) + self.position(positions) + self.token_type(torch.zeros_like(tokens)))
        for layer in self.layers:
            x = layer(x)
        return torch.tanh(self.pooler(x[:, 0]))


def gradients(name):
    torch.manual_seed(0)
    if name == "vgg16":
        model, inputs = vgg16(), torch.randn(4, 3, 64, 64)
    else:
        model, inputs = Bert(), torch.randint(0, 30522, (4, 128))
    out = model(inputs)
    (out ** 2).mean().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    with open(REPO / "bench" / "models" / f"{name}.csv") as f:
        expected = [int(row["elements"]) for row in csv.DictReader(line for line in f if not line.startswith("#"))]
    got = [g.numel() for g in grads]
    if got != expected:
        sys.exit(f"{name}: {sum(got)} elements in {len(got)} tensors, the CSV has {sum(expected)} in {len(expected)}")
    return grads


def roundtrip(build, grads, codec, params):
    data = b"".join(struct.pack("<Q", g.numel()) + g.numpy().astype("<f4").tobytes() for g in grads)
    tool = Path(build) / "bench" / "gcagent_codec_roundtrip"
    args = [str(tool), codec] + [f"{k}={v}" for k, v in params.items()]
    out = subprocess.run(args, input=data, capture_output=True, check=True).stdout
    flat = np.frombuffer(out, dtype="<f4")
    result, at = [], 0
    for g in grads:
        result.append(torch.from_numpy(flat[at:at + g.numel()].copy()).reshape(g.shape))
        at += g.numel()
    return result


def blocks(g, size):
    x = g.reshape(-1)
    pad = (-x.numel()) % size
    return torch.cat([x, x.new_zeros(pad)]).reshape(-1, size), x.numel()


def fp8_reference(g, size, dtype, largest):
    b, n = blocks(g, size)
    s = b.abs().amax(dim=1, keepdim=True) / largest
    q = (b / torch.where(s > 0, s, torch.ones_like(s))).to(dtype).to(torch.float32) * s
    return q.reshape(-1)[:n].reshape(g.shape)


def int4_reference(g, size):
    b, n = blocks(g, size)
    a = b.numpy()
    s = np.abs(a).max(axis=1, keepdims=True) / np.float32(7)
    level = np.minimum(np.rint(np.abs(a) / np.where(s > 0, s, 1)), 7)
    return torch.from_numpy((np.sign(a) * level * s).astype(np.float32).reshape(-1)[:n].reshape(g.shape))


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
E2M1_MIDPOINTS = (E2M1[1:] + E2M1[:-1]) / 2


def mxfp4_reference(g):
    b, n = blocks(g, 32)
    a = b.numpy().astype(np.float64)
    amax = np.abs(a).max(axis=1, keepdims=True)
    exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0)))
    x = np.exp2(np.maximum(exponent - 2, -126))
    v = np.minimum(np.abs(a) / x, 6.0)
    # The nearest e2m1 value; on a midpoint (two codes apart by one) the even code.
    low = np.searchsorted(E2M1_MIDPOINTS, v, side="left")
    high = np.searchsorted(E2M1_MIDPOINTS, v, side="right")
    code = np.where(low % 2 == 0, low, high)
    out = np.sign(a) * E2M1[code] * x
    return torch.from_numpy(out.astype(np.float32).reshape(-1)[:n].reshape(g.shape))


def torchft_fp8(g):
    rows = g.reshape(g.shape[0], -1) if g.dim() > 1 else g.reshape(1, -1)
    scale = 448.0 / rows.abs().amax(dim=1, keepdim=True)
    scale = torch.where(torch.isinf(scale), torch.ones_like(scale), scale)
    return ((rows * scale).to(torch.float8_e4m3fn).to(torch.float32) / scale).reshape(g.shape)


def relative_errors(grads, decoded):
    errs = []
    for g, d in zip(grads, decoded):
        norm = g.double().norm()
        if norm > 0:
            errs.append(float((d.double() - g.double()).norm() / norm))
    return float(np.mean(errs)), float(np.max(errs))


def max_difference(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b) if x.numel() > 0)


CODECS = [
    ("fp8 e4m3, block 32", "fp8", {"block": "32"}, lambda g: fp8_reference(g, 32, torch.float8_e4m3fn, 448.0)),
    ("fp8 e4m3, block 256", "fp8", {"block": "256"}, lambda g: fp8_reference(g, 256, torch.float8_e4m3fn, 448.0)),
    ("fp8 e5m2, block 32", "fp8", {"exponent_bits": "5", "block": "32"},
     lambda g: fp8_reference(g, 32, torch.float8_e5m2, 57344.0)),
    ("int4, block 64", "int4", {"block": "64"}, lambda g: int4_reference(g, 64)),
    ("int4, block 64, rotated", "int4", {"block": "64", "rotate": "true"}, None),
    ("int4, block 64, stochastic", "int4", {"block": "64", "stochastic": "true"}, None),
    ("mxfp4", "mxfp4", {}, mxfp4_reference),
    ("mxfp4, rotated", "mxfp4", {"rotate": "true"}, None),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vgg16,bert_base")
    ap.add_argument("--json")
    args = ap.parse_args()
    build = os.environ.get("GCAGENT_BUILD_DIR", str(REPO / "build" / "release"))
    torch.set_num_threads(os.cpu_count() or 1)
    results = []
    for model in args.models.split(","):
        grads = gradients(model)
        print(f"\n{model}: {sum(g.numel() for g in grads):,} elements in {len(grads)} tensors")
        print(f"{'codec':32} {'bits/value':>10} {'mean rel err':>13} {'max rel err':>12} {'|ours - ref|':>13}")
        rows = []
        for label, codec, params, reference in CODECS:
            decoded = roundtrip(build, grads, codec, params)
            mean, worst = relative_errors(grads, decoded)
            diff = max_difference(decoded, [reference(g) for g in grads]) if reference else None
            bits = {"fp8": 8 + 32 / int(params.get("block", 32)), "int4": 4 + 32 / int(params.get("block", 64)),
                    "mxfp4": 4 + 8 / 32}[codec]
            rows.append({"model": model, "codec": label, "bits": bits, "mean": mean, "max": worst, "ref_diff": diff})
        ft = [torchft_fp8(g) for g in grads]
        mean, worst = relative_errors(grads, ft)
        rows.append({"model": model, "codec": "torchft fp8 rule (row-wise e4m3)", "bits": None, "mean": mean,
                     "max": worst, "ref_diff": None})
        for r in rows:
            bits = f"{r['bits']:.2f}" if r["bits"] else "8 + 32/row"
            diff = "-" if r["ref_diff"] is None else f"{r['ref_diff']:.3g}"
            print(f"{r['codec']:32} {bits:>10} {r['mean']:13.5f} {r['max']:12.5f} {diff:>13}")
        results += rows
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
