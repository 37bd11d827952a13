"""torch.nn modules whose forward runs mymetaops ops: swapping the class is the whole migration."""
from __future__ import annotations

import torch

from mymetaops.ops.embedding_bag import embedding_bag as _embedding_bag

__all__ = ["EmbeddingBag"]


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
