"""The FP8 quantize family (`quantize_fp8_rowwise`, `quantize_fp8_tensorwise`): memory-bound
kernels that read x once and write one byte per element plus the scales.

    bytes = rows * cols * (input bytes + 1) + 4 * rows   (+ x read again by tensorwise kernels
            whose second pass misses the last-level cache)
    t     = launch(es) + bytes / (achievable HBM bandwidth x the kernel's streaming efficiency)
Rowwise rows narrower than one pass of a block leave lanes idle: the Triton kernel's efficiency
falls with cols / block_cols. Tags: [M] measured on this project's H200; [A] assumed.
"""
from __future__ import annotations

import argparse
import inspect
import math
import random
from dataclasses import dataclass

from mymetaops.configs import NativeQuantizeConfig, TritonQuantizeConfig

from . import costs
from .family import Estimate, Family, register
from .hardware import HardwareSpec

OPS = ("quantize_fp8_rowwise", "quantize_fp8_tensorwise")
ROWWISE, TENSORWISE = OPS
IN_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
DTYPE_IDS = {"fp32": 0, "fp16": 1, "bf16": 2}
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
NATIVE_EFFICIENCY = 0.85  # [A] of the copy bandwidth, one pass with 16-byte loads
NATIVE_UNALIGNED_EFFICIENCY = 0.45  # [A] scalar loads when x is not 16-byte aligned
TRITON_EFFICIENCY = 0.80  # [A]
GRID_BARRIER_US = 3.0  # [A] tensorwise: the grid-wide amax exchange inside the native launch
TRITON_CONFIGS = (TritonQuantizeConfig(1, 1024, 4), TritonQuantizeConfig(1, 4096, 8),
                  TritonQuantizeConfig(8, 256, 4), TritonQuantizeConfig(32, 64, 4))


@dataclass(frozen=True)
class QuantizeProblem:
    rows: int
    cols: int
    in_dtype: str = "bf16"
    align_bytes: int = 16  # largest power of two <= 16 dividing x's pointer, row stride and row bytes

    @property
    def bytes(self) -> float:
        return self.rows * self.cols * (IN_BYTES[self.in_dtype] + 1) + 4.0 * self.rows


def _estimate(op: str, p: QuantizeProblem, hw: HardwareSpec, backend: str, efficiency: float,
              launches: int, lane_use: float, what: str) -> Estimate:
    bw = hw.achievable_hbm_tbps * 1e6 * efficiency * lane_use
    data = p.bytes
    extra = 0.0
    if op == TENSORWISE:  # the quantize pass reads x again; from the cache when it fits
        x_bytes = p.rows * p.cols * IN_BYTES[p.in_dtype]
        data += 0.0 if x_bytes <= hw.l2_bytes * costs.LLC_USABLE_FRACTION else x_bytes
        extra = GRID_BARRIER_US if backend == "native" else 0.0
    launch = launches * costs.launch_us(hw, backend)
    body = data / bw + extra
    bound = "launch" if launch >= body else "memory"
    return Estimate(launch + body, bound, f"{what}: {data / 1e6:.2f} MB at {bw / 1e6:.2f} TB/s", 1.0, 0, 1)


def _rowwise_arguments(x, scale_ub=None, fp8_dtype=None):
    """mymetaops.quantize_fp8_rowwise."""


def _tensorwise_arguments(x, fp8_dtype=None):
    """mymetaops.quantize_fp8_tensorwise."""


_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


class QuantizeFamily(Family):
    name = "quantize_fp8"
    ops = OPS
    problem_type = QuantizeProblem

    def candidates(self, op, p, hw):
        eff = NATIVE_EFFICIENCY if p.align_bytes >= 16 else NATIVE_UNALIGNED_EFFICIENCY
        yield "native", NativeQuantizeConfig(), _estimate(op, p, hw, "native", eff, 1, 1.0, "native one pass")
        for c in TRITON_CONFIGS:
            if op == TENSORWISE and c.block_rows > 1:
                continue  # the tensorwise kernel walks flat blocks
            width = c.block_cols if op == ROWWISE else c.block_cols * c.block_rows
            lanes = min(1.0, p.cols / width) if op == ROWWISE and p.cols else 1.0
            yield "triton", c, _estimate(op, p, hw, "triton", TRITON_EFFICIENCY, 2 if op == TENSORWISE else 1,
                                         max(lanes, 0.05), f"triton {c}")

    def missing_backend_note(self, op, backend):
        return "quantization has no vendor op in torch" if backend == "vendor" else ""

    def describe(self, p):
        return f"{p.rows} rows x {p.cols} cols {p.in_dtype} (aligned to {p.align_bytes} B): {p.bytes / 1e6:.2f} MB"

    def add_arguments(self, parser):
        parser.add_argument("--rows", type=int, required=True)
        parser.add_argument("--cols", type=int, required=True)
        parser.add_argument("--dtype", choices=sorted(IN_BYTES), default="bf16")

    def problem_from_args(self, op, args: argparse.Namespace):
        return QuantizeProblem(args.rows, args.cols, args.dtype)

    def problem_from_call(self, op, *args, **kwargs):
        sig = _rowwise_arguments if op == ROWWISE else _tensorwise_arguments
        x = inspect.signature(sig).bind(*args, **kwargs).arguments["x"]
        cols = x.shape[-1] if x.dim() else 1
        rows = x.numel() // cols if cols else 0
        return QuantizeProblem(rows, cols, _TORCH_DTYPES[str(x.dtype)], align_of(x))

    def bucket_key(self, op, p):
        """csrc/gemm/gemm_gpu.cpp: dtype, alignment, quarter octaves of rows + 1 and cols + 1."""
        return (DTYPE_IDS[p.in_dtype], p.align_bytes, math.floor(4 * math.log2(p.rows + 1)),
                math.floor(4 * math.log2(p.cols + 1)))

    def problem_from_key(self, op, key):
        dtype, align, rb, cb = key
        return QuantizeProblem(max(0, round(2 ** ((rb + 0.5) / 4)) - 1), max(0, round(2 ** ((cb + 0.5) / 4)) - 1),
                               DTYPE_NAMES[dtype], align)

    def sample(self, op, rng: random.Random):
        return QuantizeProblem(round(2 ** rng.uniform(4, 17)), rng.choice((64, 256, 512, 1024, 4096)),
                               rng.choice(("bf16", "bf16", "fp16", "fp32")))


def align_of(x) -> int:
    """csrc/gemm/gemm_gpu.cpp's alignment of x viewed as rows: pointer, row stride and row bytes."""
    if x.device.type == "meta" or x.dim() == 0:
        return 16
    cols = x.shape[-1]
    rows_view = x.reshape(-1, cols) if cols else x.reshape(0, 0)
    if rows_view.dim() == 2 and cols and rows_view.stride(1) != 1:
        rows_view = rows_view.contiguous()
    elt = x.element_size()
    stride = rows_view.stride(0) if rows_view.dim() == 2 and rows_view.shape[0] > 0 else cols
    value = 16 | rows_view.data_ptr() | stride * elt | cols * elt
    return value & -value


FAMILY = register(QuantizeFamily())
