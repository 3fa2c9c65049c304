"""A small byte-level transformer language model on text that ships with Python: the source
files of the standard library's top-level modules (sorted by name, the first CORPUS_BYTES
bytes). The last tenth is the validation text. Used by the DiLoCo benchmark (run.py)."""

import hashlib
import math
import sysconfig
from pathlib import Path

import torch

CORPUS_BYTES = 2_000_000
VOCAB = 256  # bytes


def corpus():
    """(train, validation) as uint8 tensors, and a digest naming the text (it differs between
    Python versions)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = bytearray()
    for path in sorted(stdlib.glob("*.py")):
        text += path.read_bytes()
        if len(text) >= CORPUS_BYTES:
            break
    data = torch.frombuffer(bytearray(text[:CORPUS_BYTES]), dtype=torch.uint8).long()
    split = len(data) * 9 // 10
    return data[:split], data[split:], hashlib.sha256(text[:CORPUS_BYTES]).hexdigest()[:12]


class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.attention = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LanguageModel(torch.nn.Module):
    """A GPT-style decoder: embeddings, `layers` pre-norm blocks, a tied output layer."""

    def __init__(self, width=128, layers=2, heads=4, context=64):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.position = torch.nn.Parameter(torch.zeros(context, width))
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))
        torch.nn.init.normal_(self.embed.weight, std=0.02)  # tied with the output: small logits at first

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[:tokens.shape[1]]
        mask = self.mask[:tokens.shape[1], :tokens.shape[1]]
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.embed.weight.t()


def batch(data, generator, size, context):
    """`size` random windows of context + 1 bytes: inputs and next-byte targets."""
    start = torch.randint(0, len(data) - context - 1, (size,), generator=generator)
    windows = torch.stack([data[s:s + context + 1] for s in start.tolist()])
    return windows[:, :-1], windows[:, 1:]


def loss_of(model, tokens, targets):
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


@torch.no_grad()
def validation_loss(model, data, context, windows=256):
    """Mean next-byte cross-entropy (nats) over `windows` fixed windows of the validation text."""
    stride = (len(data) - context - 1) // windows
    total = 0.0
    for at in range(0, windows, 32):
        starts = [(at + i) * stride for i in range(min(32, windows - at))]
        w = torch.stack([data[s:s + context + 1] for s in starts])
        total += loss_of(model, w[:, :-1], w[:, 1:]).item() * len(starts)
    return total / windows


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    import time
    torch.set_num_threads(1)
    train, val, digest = corpus()
    torch.manual_seed(0)
    model = LanguageModel()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    print("params", parameter_count(model), "corpus", digest, "val0", validation_loss(model, val, 64), math.log(256))
    start = time.time()
    for step in range(400):
        x, y = batch(train, g, 16, 64)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    print("400 steps", time.time() - start, "loss", validation_loss(model, val, 64))
