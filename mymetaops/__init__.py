"""mymetaops: dual-vendor (CUDA + HIP) PyTorch operators for recommendation-model training.

Ops live in `torch.ops.mymetaops`; the functions here are thin, torch.nn.functional-style wrappers.
On GPU, `mymetaops.model` picks the kernel for each call; `explain` shows why.
"""
import torch  # noqa: F401  (loads libtorch, which _C links against)

from mymetaops import _C  # noqa: F401  (loads the library: registers every op's schema and kernels)
from mymetaops._backend import BACKENDS, current_backend, use_backend
from mymetaops.explain import explain
from mymetaops.ops.embedding_bag import embedding_bag

__all__ = ["BACKENDS", "current_backend", "embedding_bag", "explain", "use_backend"]
