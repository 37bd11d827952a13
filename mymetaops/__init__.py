"""mymetaops: dual-vendor (CUDA + HIP) PyTorch operators for recommendation-model training.

Ops live in `torch.ops.mymetaops` (registered by `import mymetaops.ops`, which touching any op
below does too); the functions here are thin, torch.nn.functional-style wrappers, and `mymetaops.nn`
holds drop-in modules. On GPU, `mymetaops.model` picks the kernel for each call; `explain` shows why.

Importing the package loads nothing heavy: the compiled library, Triton and the ops load on first
use, so `mymetaops.model` (pure Python) works on any machine, with or without a build.
"""
from __future__ import annotations

import importlib

from mymetaops._backend import BACKENDS, current_backend, use_backend

_LAZY = {  # attribute: (module, name in it, or None for the module itself)
    "embedding_bag": ("mymetaops.ops.embedding_bag", "embedding_bag"),
    "check_errors": ("mymetaops.ops.errors", "check_errors"),
    "fp8_dtype": ("mymetaops.ops.gemm", "fp8_dtype"),
    "quantize_fp8_rowwise": ("mymetaops.ops.gemm", "quantize_fp8_rowwise"),
    "quantize_fp8_tensorwise": ("mymetaops.ops.gemm", "quantize_fp8_tensorwise"),
    "fp8_gemm": ("mymetaops.ops.gemm", "fp8_gemm"),
    "gemm": ("mymetaops.ops.gemm", "gemm"),
    "fp8_linear": ("mymetaops.ops.gemm", "fp8_linear"),
    **{name: ("mymetaops.ops.jagged", name) for name in (
        "jagged_to_padded_dense", "dense_to_jagged", "jagged_dense_elementwise_add",
        "jagged_dense_elementwise_add_jagged_output", "jagged_dense_elementwise_mul", "jagged_softmax",
        "jagged_dense_bmm", "jagged_jagged_bmm", "jagged_index_select")},
    **{name: ("mymetaops.ops.attention", name) for name in ("hstu_attention", "hstu_mha", "jagged_attention")},
    "explain": ("mymetaops._explain", "explain"),
    "nn": ("mymetaops.nn", None),
    "ops": ("mymetaops.ops", None),
    "model": ("mymetaops.model", None),
}

__all__ = ["BACKENDS", "current_backend", "use_backend", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'mymetaops' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value
