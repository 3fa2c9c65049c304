"""What the DiLoCo trainers through gcagent (torch_diloco.py) and through torchft
(torchft_diloco.py) share: the models, their data, the optimizers, and the step loops."""

import torch
from torch import nn

# torchft's mocked regression test (torchft/diloco_regression_test.py, DiLoCoMockedUpdateTest):
# 2 replicas, 2 one-weight fragments at 1.0, a fixed gradient of 2, inner and outer optimizers
# that subtract lr * grad (inner lr 1, outer lr 2), sync_every 6, 16 recorded steps.
MOCKED_CONFIGS = [(2, 0, 0.0), (2, 0, 0.5), (2, 0, 1.0), (2, 1, 0.0), (2, 1, 0.5), (2, 1, 1.0)]
MOCKED_SYNC_EVERY, MOCKED_STEPS = 6, 16


class MockLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1, 1))


class MockOptimizer(torch.optim.Optimizer):
    """p <- p - lr * grad, nothing else."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad.data, alpha=-group["lr"])


def mocked_model(n_fragments):
    model = nn.Module()
    model.layers = nn.ModuleList([MockLinear() for _ in range(n_fragments)])
    return model


def mocked_loop(model, inner, record):
    """The mocked test's loop: the parameters recorded before each step, then the fixed gradient
    and an inner step; the last record is taken after the 15th step."""
    history = {}
    for step in range(MOCKED_STEPS):
        history[step] = {name: p.detach().clone().tolist() for name, p in model.named_parameters()}
        if step == MOCKED_STEPS - 1:
            break
        for layer in model.layers:
            layer.weight.grad = torch.ones_like(layer.weight) * 2
        inner.step()
    record(history)


# A real model for the side-by-side run: an MLP regressing a fixed random map, each replica on its
# own batches (so the replicas' pseudo-gradients differ), plain SGD inside, Nesterov SGD outside.
TRAIN_SYNC_EVERY, TRAIN_OUTER_STEPS = 4, 5
TRAIN_CONFIGS = {"diloco": (1, 0, 0.0), "streaming": (2, 1, 0.5)}  # fragments, delay, alpha


def train_model():
    """The same initial weights in every replica, from a generator of its own (torchft's replicas
    are threads of one process: the global generator would be shared between them)."""
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def fragments_of(model, n_fragments):
    return [model] if n_fragments == 1 else [model[0], model[2]]


def optimizers(model, n_fragments):
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True)
             for f in fragments_of(model, n_fragments)]
    return inner, outer


def batch(replica, step):
    g = torch.Generator().manual_seed(7919 * replica + step)
    target = torch.Generator().manual_seed(1)
    w = torch.randn(8, 4, generator=target)
    x = torch.randn(32, 8, generator=g)
    return x, torch.sin(x @ w)


def train_loop(model, inner, replica, steps):
    for step in range(steps):
        x, y = batch(replica, step)
        inner.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        inner.step()
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]
