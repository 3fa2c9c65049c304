"""gcagent: hand gradients to the node's gcagent daemon for compressed, prioritised averaging.

Framework shims: gcagent.torch, gcagent.tensorflow, gcagent.mxnet (each imports its framework
only when imported itself)."""

from gcagent._version import version as _version
from gcagent.client import (Client, GcagentError, Reducer, TensorSpec, default_reducer, local_rank, local_size, rank,
                            size)

__all__ = ["Client", "GcagentError", "Reducer", "TensorSpec", "default_reducer", "local_rank", "local_size", "rank",
           "size", "__version__"]

__version__ = _version()
