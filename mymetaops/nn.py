"""torch.nn modules whose forward runs mymetaops ops: swapping the class is the whole migration."""
from __future__ import annotations

import torch

from mymetaops.ops.embedding_bag import embedding_bag as _embedding_bag
from mymetaops.ops.gemm import fp8_linear as _fp8_linear

__all__ = ["EmbeddingBag", "Fp8Linear"]


class EmbeddingBag(torch.nn.EmbeddingBag):
    """`torch.nn.EmbeddingBag` whose forward calls `mymetaops.embedding_bag`.

    A subclass rather than a copy, so everything but the lookup is torch's own: the constructor's
    arguments and validation errors, `from_pretrained` (it builds `cls`, so it returns this class),
    the `weight` parameter and its state_dict key, `reset_parameters` (normal init, padding row
    zeroed), `extra_repr`, and `isinstance(m, torch.nn.EmbeddingBag)`. A state_dict moves between
    the two classes both ways.

    mymetaops does not implement max_norm, scale_grad_by_freq, sparse=True or mode="max". The
    constructor (and so `from_pretrained`) raises NotImplementedError for them, before the table is
    allocated, instead of letting the first forward fail: keep `torch.nn.EmbeddingBag` for such a
    module. Setting one of these attributes after construction fails at the next forward, with the
    functional wrapper's NotImplementedError.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: torch.Tensor | None = None,
                 include_last_offset: bool = False, padding_idx: int | None = None, device=None,
                 dtype=None) -> None:
        unsupported = [name for name, used in (("max_norm", max_norm is not None),
                                               ("scale_grad_by_freq", scale_grad_by_freq),
                                               ("sparse=True", sparse),
                                               ("mode='max'", mode == "max")) if used]
        if unsupported:
            raise NotImplementedError(
                f"mymetaops.nn.EmbeddingBag: mymetaops does not support {', '.join(unsupported)}; "
                f"use torch.nn.EmbeddingBag for this module")
        super().__init__(num_embeddings, embedding_dim, max_norm=max_norm, norm_type=norm_type,
                         scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
                         _weight=_weight, include_last_offset=include_last_offset,
                         padding_idx=padding_idx, device=device, dtype=dtype)

    def forward(self, input: torch.Tensor, offsets: torch.Tensor | None = None,
                per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
        return _embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                              self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                              self.include_last_offset, self.padding_idx)


class Fp8Linear(torch.nn.Linear):
    """`torch.nn.Linear` whose forward calls `mymetaops.fp8_linear`: the weight stays in its
    dtype (bf16/fp16 master copy, trained as usual); x and the weight are quantized to FP8 rowwise
    on every forward, and the input gradient runs in FP8 too (the weight gradient in bf16/fp16).

    A subclass, so the constructor, init, state_dict keys and `isinstance(m, nn.Linear)` are
    torch's. in_features and out_features must be multiples of 16 (checked here, before
    allocating); inputs must be in the weight's dtype (bf16 or fp16): `Fp8Linear(..., dtype=
    torch.bfloat16)` or `.to(torch.bfloat16)`.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        if in_features % 16 or out_features % 16:
            raise ValueError(f"Fp8Linear: in_features and out_features must be multiples of 16, got "
                             f"{in_features} and {out_features}")
        super().__init__(in_features, out_features, bias, device, dtype)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Fp8Linear":
        """An Fp8Linear sharing `linear`'s parameters (no copy)."""
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        if linear.in_features % 16 or linear.out_features % 16:
            raise ValueError(f"Fp8Linear: in_features and out_features must be multiples of 16, got "
                             f"{linear.in_features} and {linear.out_features}")
        m.in_features, m.out_features = linear.in_features, linear.out_features
        m.weight, m.bias = linear.weight, linear.bias
        return m

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _fp8_linear(input, self.weight, self.bias)
