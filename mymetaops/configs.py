"""Knob sets of the kernels, shared by the kernels' launchers and by `mymetaops.model`.

They sit here, outside both, so the model can describe a kernel without importing it and a kernel
module never imports the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class NativeEmbeddingBagConfig:
    """Mirror of `mymetaops::EmbeddingBagConfig` (csrc/include/mymetaops/embedding_bag.h)."""

    vec_bytes: int  # bytes per row access per lane: 16, 8, 4 or 2 (>= element size)
    lanes_per_bag: int  # lanes cooperating on one bag (power of two, <= warp/wavefront size)
    unroll: int  # rows of one bag each lane keeps in flight: 1, 2, 4 or 8
    block_threads: int  # threads per block (multiple of the warp/wavefront size)

    def as_list(self) -> list[int]:
        return [self.vec_bytes, self.lanes_per_bag, self.unroll, self.block_threads]

    def __str__(self) -> str:
        return f"vec{self.vec_bytes}B lanes{self.lanes_per_bag} unroll{self.unroll} block{self.block_threads}"


@dataclass(frozen=True)
class TritonEmbeddingBagConfig:
    """Knobs of the Triton embedding_bag kernels (mymetaops/triton/embedding_bag.py).

    One program owns one bag (forward, per-sample-weights backward) or one distinct row
    (weight backward) and a BLOCK_D-wide slice of the embedding dimension; it loads BLOCK_L rows
    per step, so BLOCK_L rows of BLOCK_D elements are in flight per program.
    """

    block_l: int  # rows loaded per step (power of two)
    block_d: int  # columns per program (power of two); grid dim 1 = cdiv(dim, block_d)
    num_warps: int

    def __str__(self) -> str:
        return f"L{self.block_l} D{self.block_d} w{self.num_warps}"



@dataclass(frozen=True)
class VendorConfig:
    """The vendor op a user would otherwise call. It has no knobs, hence no fields: the dispatch
    passes an empty list. A subclass per op names it."""

    op: ClassVar[str] = "vendor op"

    def __str__(self) -> str:
        return self.op


@dataclass(frozen=True)
class TorchEmbeddingBagConfig(VendorConfig):
    """torch's CUDA/HIP embedding_bag kernel (at::_embedding_bag_forward_only)."""

    op: ClassVar[str] = "torch.nn.functional.embedding_bag"


# --- GEMM family --------------------------------------------------------------------------------

@dataclass(frozen=True)
class NativeGemmConfig:
    """Mirror of `mymetaops::GemmConfig` (csrc/include/mymetaops/gemm.h): a row of the vendor's
    kernel table (mymetaops/model/gemm_kernels.py mirrors it) and a split-K factor. `name` is the
    row's name, for people; the kernel gets [kernel, split_k]."""

    kernel: int  # index into the native kernel table of the device's vendor
    split_k: int = 1
    name: str = ""

    def as_list(self) -> list[int]:
        return [self.kernel, self.split_k]

    def __str__(self) -> str:
        name = self.name or f"kernel{self.kernel}"
        return name if self.split_k == 1 else f"{name} splitk{self.split_k}"


@dataclass(frozen=True)
class TritonGemmConfig:
    """Knobs of the Triton GEMM kernels (mymetaops/triton/gemm.py). persistent=1: a grid of
    min(tiles, SMs/CUs) programs looping over tiles in grouped order; else one program per tile."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int  # tiles of M walked together (L2 reuse of the N operand)
    num_warps: int
    num_stages: int
    persistent: int = 1

    def __str__(self) -> str:
        kind = "persistent" if self.persistent else "grid"
        return (f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} w{self.num_warps} "
                f"s{self.num_stages} {kind}")


@dataclass(frozen=True)
class TritonQuantizeConfig:
    """Knobs of the Triton FP8 quantize kernels (mymetaops/triton/quantize_fp8.py): one program
    per block_rows rows (rowwise) or per block of a grid-stride loop (tensorwise), block_cols
    columns per step."""

    block_rows: int
    block_cols: int
    num_warps: int

    def __str__(self) -> str:
        return f"R{self.block_rows} C{self.block_cols} w{self.num_warps}"


@dataclass(frozen=True)
class TritonAttentionConfig:
    """Tiles of the Triton attention kernels (mymetaops/triton/hstu_attention.py,
    jagged_attention.py): block_m query rows by block_n key rows, num_warps, num_stages. All 0:
    the kernels' own default_config (per kernel and head dim; the backward's two kernels)."""

    block_m: int = 0
    block_n: int = 0
    num_warps: int = 0
    num_stages: int = 0

    @property
    def kernel_defaults(self) -> bool:
        return self.block_m == 0

    def __str__(self) -> str:
        if self.kernel_defaults:
            return "the kernels' default tiles"
        return f"M{self.block_m} N{self.block_n} w{self.num_warps} s{self.num_stages}"


@dataclass(frozen=True)
class NativeAttentionConfig:
    """A native attention forward kernel (csrc/include/mymetaops/attention.h): its index in the
    build's _C._native_attention_kernels() and its name (a fixed tile shape)."""

    kernel: int
    name: str

    def as_list(self) -> list[int]:
        return [self.kernel]

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ScaledMmConfig(VendorConfig):
    """torch._scaled_mm (cuBLASLt / hipBLASLt, or torch's CUTLASS rowwise kernel)."""

    op: ClassVar[str] = "torch._scaled_mm"


@dataclass(frozen=True)
class TorchMmConfig(VendorConfig):
    """torch.mm / torch.addmm (cuBLAS / hipBLASLt)."""

    op: ClassVar[str] = "torch.mm"


@dataclass(frozen=True)
class NativeQuantizeConfig:
    """The native FP8 quantize kernels (cuda/gemm/quantize_fp8.cu, hip/gemm/quantize_fp8.hip) size
    their launch themselves: no knobs."""

    def as_list(self) -> list[int]:
        return []

    def __str__(self) -> str:
        return "native quantize"


# --- jagged family ------------------------------------------------------------------------------

@dataclass(frozen=True)
class NativeJaggedConfig:
    """Mirror of `mymetaops::JaggedConfig` (csrc/include/mymetaops/jagged.h)."""

    vec_bytes: int  # bytes per access per lane: 16, 8, 4 or 2 (>= element size)
    lanes_per_row: int  # lanes cooperating on one row (power of two, <= warp/wavefront size)
    block_threads: int  # threads per block (multiple of the warp/wavefront size)

    def as_list(self) -> list[int]:
        return [self.vec_bytes, self.lanes_per_row, self.block_threads]

    def __str__(self) -> str:
        return f"vec{self.vec_bytes}B lanes{self.lanes_per_row} block{self.block_threads}"


@dataclass(frozen=True)
class NativeBmmConfig:
    """Mirror of `mymetaops::JaggedBmmConfig` (csrc/include/mymetaops/jagged.h): the index of a
    native jagged bmm kernel (jagged_bmm_kernel_names); `name` is for people."""

    kernel: int
    name: str = ""

    def as_list(self) -> list[int]:
        return [self.kernel]

    def __str__(self) -> str:
        return self.name or f"kernel{self.kernel}"


@dataclass(frozen=True)
class TritonJaggedConfig:
    """Knobs of the Triton jagged kernels (mymetaops/triton/jagged.py): a program moves a
    [block_rows, block_d] tile of rows (dense positions or jagged rows) per step."""

    block_rows: int  # rows per program (power of two)
    block_d: int  # columns per program (power of two); grid dim 1 = cdiv(dim, block_d)
    num_warps: int

    def __str__(self) -> str:
        return f"R{self.block_rows} D{self.block_d} w{self.num_warps}"


@dataclass(frozen=True)
class AtenJaggedConfig(VendorConfig):
    """torch's own CUDA/ROCm kernel of a jagged conversion: aten._jagged_to_padded_dense_forward
    or aten._padded_dense_to_jagged_forward."""

    op: ClassVar[str] = "aten jagged conversion"


@dataclass(frozen=True)
class PaddedBmmConfig(VendorConfig):
    """What a user writes without a jagged bmm: pad to dense, torch.bmm, back to jagged."""

    op: ClassVar[str] = "pad + torch.bmm (+ dense_to_jagged)"

