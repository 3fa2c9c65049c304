"""gcagent: hand gradients to the node's gcagent daemon for compressed, prioritised averaging.

Framework shims: gcagent.torch, gcagent.tensorflow, gcagent.mxnet (each imports its framework
only when imported itself)."""

from gcagent.client import Client, GcagentError, Reducer, TensorSpec

__all__ = ["Client", "GcagentError", "Reducer", "TensorSpec"]
