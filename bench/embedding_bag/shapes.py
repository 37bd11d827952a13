"""The embedding_bag benchmark shapes and their inputs (uniform random rows: the cache-hostile case)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    rows: int
    dim: int
    bags: int
    bag_size: int
    dtype: torch.dtype

    def __str__(self):
        rows = f"{self.rows // 1_000_000}M" if self.rows % 1_000_000 == 0 else str(self.rows)
        return f"({rows}, {self.dim}, {self.bags}, {self.bag_size}) {str(self.dtype)[6:]}"


SHAPES = [
    Shape(10_000_000, 128, 65536, 32, torch.float32),
    Shape(10_000_000, 128, 65536, 32, torch.bfloat16),
    Shape(20_000_000, 64, 131072, 16, torch.float16),
    Shape(1_000_000, 256, 16384, 100, torch.float32),
]
BACKWARD_SHAPE = SHAPES[3]
# --smoke (e.g. on the CPU, where Triton runs interpreted: about 0.1 s per bag and config): the same
# dtypes and dims, tiny.
SMOKE_SHAPES = [
    Shape(2000, 128, 8, 8, torch.float32),
    Shape(2000, 128, 8, 8, torch.bfloat16),
    Shape(4000, 64, 16, 4, torch.float16),
    Shape(1000, 256, 4, 10, torch.float32),
]
SMOKE_BACKWARD_SHAPE = SMOKE_SHAPES[3]


def make_inputs(shape: Shape, device="cuda", seed=0):
    """(weight, indices, offsets in F.embedding_bag's form with num_bags entries)."""
    g = torch.Generator(device=device).manual_seed(seed)
    weight = torch.randn(shape.rows, shape.dim, device=device, dtype=shape.dtype, generator=g)
    n = shape.bags * shape.bag_size
    indices = torch.randint(0, shape.rows, (n,), device=device, generator=g)
    offsets = torch.arange(shape.bags, device=device) * shape.bag_size
    return weight, indices, offsets


def forward_bytes(shape: Shape, index_bytes=8) -> int:
    """Bytes the forward must move: gathered rows + indices + offsets + output."""
    elt = torch.finfo(shape.dtype).bits // 8
    n = shape.bags * shape.bag_size
    return n * shape.dim * elt + n * index_bytes + (shape.bags + 1) * index_bytes \
        + shape.bags * shape.dim * elt
