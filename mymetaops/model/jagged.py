"""The jagged family: its problem, buckets, and the cost of its candidates -- cuda/jagged.cu,
hip/jagged.hip, mymetaops/triton/jagged.py and, where torch has one, the aten op.

Two kinds of kernels. The conversions, the elementwise ops, softmax and index_select stream rows:
count the bytes that must move (read + written), turn them into time with the achievable DRAM
bandwidth, derated when too few bytes are in flight (Little's law over the resident threads) and
when a row's width is not a multiple of what a group of lanes moves or a group's piece of a row is
narrower than a cache line; a kernel writing a jagged output also pays, per run of rows, a binary
search of the offsets (a chain of dependent L2 reads), hidden behind the other groups' loads unless
it takes longer than they do. The two bmm ops are GEMMs over sequences: mymetaops.model.gemm's
tile estimate, over M padded to whole tiles per sequence (a tile does not span two sequences).

The problem knows the call's sizes only, not its lengths (reading them would be a sync): the
expected rows per sequence are min(total / batch, max_length).

Tags: [D] datasheet / ISA, [A] assumed (no GPU measurement of this family yet: calibrate against
bench/jagged/ on a GPU), [M] measured.
"""
from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass

from mymetaops.configs import (AtenJaggedConfig, NativeBmmConfig, NativeJaggedConfig, PaddedBmmConfig,
                               TritonGemmConfig, TritonJaggedConfig)

from . import costs
from . import gemm as gemm_model
from .family import Estimate, Family, register
from .hardware import HardwareSpec

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
DTYPE_IDS = {"fp32": 0, "fp16": 1, "bf16": 2}  # the launcher ABI's DType codes (types.h)
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
INDEX_IDS = {"int32": 3, "int64": 4}
INDEX_NAMES = {v: k for k, v in INDEX_IDS.items()}

TO_PADDED, TO_JAGGED, ADD_DENSE, ADD_JAGGED, MUL = (
    "jagged_to_padded_dense", "dense_to_jagged_forward", "jagged_dense_elementwise_add",
    "jagged_dense_elementwise_add_jagged_output_forward", "jagged_dense_elementwise_mul_forward")
SOFTMAX, SOFTMAX_BACKWARD = "jagged_softmax_forward", "jagged_softmax_backward"
INDEX_SELECT, INDEX_SELECT_BACKWARD = "jagged_index_select", "jagged_index_select_backward"
DENSE_BMM, JAGGED_BMM = "jagged_dense_bmm_forward", "jagged_jagged_bmm"
DENSE_OPS = (TO_PADDED, TO_JAGGED, ADD_DENSE, ADD_JAGGED, MUL)  # JaggedDenseOp 0..4 (jagged.h)
MEMORY_OPS = DENSE_OPS + (SOFTMAX, SOFTMAX_BACKWARD, INDEX_SELECT, INDEX_SELECT_BACKWARD)
BMM_OPS = (DENSE_BMM, JAGGED_BMM)
OPS = MEMORY_OPS + BMM_OPS
JAGGED_OUTPUT = (TO_JAGGED, ADD_JAGGED, MUL)  # rows find their sequence by a binary search
# Rows per offsets search of the native kernels: cuda/jagged.cu's groups own runs of kRowsPerRun
# consecutive rows and search once per run; hip/jagged.hip searches per row.
NATIVE_ROWS_PER_SEARCH = {"nvidia": 8, "amd": 1}

# --- streaming kernels ---------------------------------------------------------------------------
NATIVE_BLOCK_THREADS = 256  # [A] as embedding_bag's (128-512 ran within 2% there)
NATIVE_VEC_BYTES = (16, 8, 4, 2)
LOADS_IN_FLIGHT = 2  # [A] independent vector loads a thread keeps outstanding (x and dense / unrolled rows)
# Share of the bandwidth left when a group of lanes moves `chunk` bytes of a row per step (vec x
# lanes) and its warp's access is that many separate pieces: [M] H200 2026-12-01, the jagged-output
# kernel at 16 B x 1 lane (16 B chunks) ran at 0.14 of the same kernel covering its 256-512 B rows
# in one step, at 16 B x 2 lanes (32 B) at 0.45; [A] 64 B between those and 128 B; 128 B or more
# (a whole line per group step) is the reference.
CHUNK_EFFICIENCY = ((128, 1.0), (64, 0.7), (32, 0.45), (16, 0.14), (0, 0.1))
TRITON_EFFICIENCY = 0.85  # [A] share of the native kernel's bandwidth a Triton tile reaches
# mymetaops/triton/jagged.py's suggested configs (the model must not import Triton; tests/jagged
# checks the two agree): (block_rows, block_d, num_warps).
TRITON_CONFIGS = {
    "nvidia": ((32, 128, 4), (16, 256, 4), (8, 512, 8), (64, 32, 2), (256, 8, 2), (1024, 1, 4)),
    "amd": ((32, 128, 4), (16, 256, 4), (8, 512, 8), (64, 32, 1), (256, 8, 2), (1024, 1, 4)),
}
SEARCH_STEP_NS = 1.0  # [A] one dependent L2 read of a binary search, amortized over the lanes of a row
# The aten ops a user would call otherwise (one jagged dimension; torch's CUDA/ROCm kernels).
VENDOR_OPS = {TO_PADDED: "aten._jagged_to_padded_dense_forward"}
# Not a candidate: it writes no value to the jagged rows no sequence covers (before offsets[0], from
# offsets[B] on), which FBGEMM's dense_to_jagged sets to 0 (seen on the H200: garbage in those rows).
ATEN_TO_JAGGED_NOTE = ("aten._padded_dense_to_jagged_forward leaves the rows outside offsets[0]..offsets[B] "
                       "unwritten (FBGEMM's semantics zero them), so it is no candidate")
VENDOR_EFFICIENCY = 0.5  # [A] DESIGN.md: aten._jagged_to_padded_dense_forward reaches 1.7-2.3 TB/s (0.4-0.55 of copy)

# --- bmm --------------------------------------------------------------------------------------------
# (block_m, block_n, block_k, group_m, warps, stages, persistent), as triton/jagged.py's BMM_CONFIGS_*.
BMM_TRITON_CONFIGS = {
    "nvidia": ((128, 128, 64, 8, 8, 3, 0), (64, 128, 64, 8, 4, 3, 0), (64, 64, 64, 4, 4, 3, 0),
               (32, 64, 64, 1, 4, 3, 0), (16, 64, 128, 1, 4, 3, 0), (64, 128, 64, 8, 4, 3, 1)),
    "amd": ((128, 128, 64, 8, 8, 2, 0), (64, 128, 64, 8, 4, 2, 0), (64, 64, 64, 4, 4, 2, 0),
            (32, 64, 64, 1, 4, 2, 0), (16, 64, 128, 1, 4, 2, 0), (64, 128, 64, 8, 4, 2, 1)),
}
# The native grouped GEMMs, in jagged_bmm_kernel_names() order: (name, tile m, n, k). NVIDIA:
# cuda/jagged_bmm/ (CUTLASS ptr-array, cooperative, persistent, per-sequence TMA descriptors built
# on the device; sm_90a). AMD: hip/jagged_bmm.hip (MFMA tiles, one workgroup per tile).
NATIVE_BMM_KERNELS = {
    "nvidia": (("grouped_128x256x64_coop", 128, 256, 64),),
    "amd": (("mfma_128x128x32", 128, 128, 32),),
}
NATIVE_BMM_ARCHS = {"nvidia": ("sm_90a",), "amd": ("gfx942", "gfx950")}
NATIVE_BMM_DTYPES = ("bf16", "fp16")
# [A] The mainloop of the CUTLASS grouped kernel as that of cuda/gemm's 128x256x64 instance
# (gemm_kernels.NATIVE_COST), plus per tile the rebuild of the TMA descriptors when a CTA moves to
# another sequence's tile (nearly every tile: a sequence has a few tiles, a wave 132).
NATIVE_BMM_COST = {"nvidia": ("bf16_128x256x64_c2x1_coop", 0.5), "amd": (None, 0.0)}
# Share of the achievable DRAM bandwidth the grouped GEMM streams its bytes at where they bound it:
# [M] H200 2026-12-01 (bench/jagged run 4): 3.28-3.47 TB/s = 0.77-0.81 of 4.27 (jagged_jagged_bmm
# at both shapes, jagged_dense_bmm at (4096, 256, 128)); [A] the same on AMD.
NATIVE_BMM_STREAM_SHARE = {"nvidia": 0.8, "amd": 0.8}
# [D] fp32 operands (an ieee-precision dot, no tensor cores) spill with tiles over 64x64 on sm_90,
# gfx942 and gfx950 (scripts/check_triton_targets.py).
FP32_MAX_TILE = 64 * 64
FP32_DOT_EFFICIENCY = 0.6  # [A] share of the fp32 (non-tensor-core) peak an ieee-precision dot reaches


@dataclass(frozen=True)
class JaggedProblem:
    """One call: `total` jagged rows of `dim` elements in `batch` sequences, dense length
    `max_length`. bmm: dim = K (jagged_dense_bmm) or M (jagged_jagged_bmm), n = N. index_select:
    batch = selected sequences, total = input rows, max_length = output rows."""

    op: str
    batch: int
    max_length: int
    total: int
    dim: int
    n: int = 0
    dtype: str = "bf16"
    offsets_dtype: str = "int64"
    align: int = 16  # bytes: the widest vector the rows, strides and pointers allow
    levels: int = 1  # jagged dimensions (the GPU kernels take one)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown jagged op {self.op!r}")
        if min(self.batch, self.max_length, self.total, self.dim, self.n) < 0:
            raise ValueError(f"negative size in {self}")

    @property
    def elt(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    @property
    def row_bytes(self) -> int:
        return self.dim * self.elt

    @property
    def rows_per_sequence(self) -> float:
        """Expected rows of a sequence inside the dense form."""
        if self.batch == 0:
            return 0.0
        return min(self.total / self.batch, float(self.max_length))


def moved_bytes(p: JaggedProblem) -> float:
    """Bytes a kernel must read and write (offsets included)."""
    positions = p.batch * p.max_length  # dense rows
    used = p.batch * p.rows_per_sequence  # jagged rows that have a position
    row = p.row_bytes
    offsets = (p.batch + 1) * (4 if p.offsets_dtype == "int32" else 8)
    if p.op == TO_PADDED:
        rows = used + positions
    elif p.op == TO_JAGGED:
        rows = used + p.total
    elif p.op == ADD_DENSE:
        rows = used + 2 * positions
    elif p.op in (ADD_JAGGED, MUL):
        rows = 2 * p.total + used
    elif p.op == SOFTMAX:
        rows = 2 * used + p.total  # two passes over a sequence's rows, every row written
    elif p.op == SOFTMAX_BACKWARD:
        rows = 4 * used + p.total  # grad and output, twice
    elif p.op == INDEX_SELECT:
        rows = 2 * p.max_length  # max_length holds the output rows
    else:  # INDEX_SELECT_BACKWARD: grad read, fp32 accumulator read-modify-write, then cast
        rows = p.max_length + p.total * (2 * 4 / p.elt + 2)
    return rows * row + offsets


def output_rows(p: JaggedProblem) -> float:
    if p.op in (TO_PADDED, ADD_DENSE):
        return p.batch * p.max_length
    if p.op == INDEX_SELECT:
        return p.max_length
    return p.total


def _stream_estimate(p: JaggedProblem, hw: HardwareSpec, vec: int, lanes: int, block_threads: int,
                     efficiency: float, launch: float, host: float, what: str,
                     rows_per_search: int = 1) -> Estimate:
    bytes_ = moved_bytes(p)
    rows = output_rows(p)
    if rows == 0 or p.dim == 0:
        return Estimate(max(host, launch), "launch", f"{what}: nothing to move", 1.0, 0, 1)
    chunk = vec * lanes  # bytes a group of lanes moves per step
    waste = p.row_bytes / (math.ceil(p.row_bytes / chunk) * chunk)  # lanes idle past a row's end
    coalesced = next(e for size, e in CHUNK_EFFICIENCY if min(chunk, p.row_bytes) >= size)
    threads = hw.sm_count * min(hw.max_threads_per_sm, hw.max_blocks_per_sm * block_threads)
    threads = min(threads, rows * lanes)  # no more threads than rows to give them
    in_flight = threads * vec * LOADS_IN_FLIGHT * waste
    needed = hw.achievable_hbm_tbps * 1e3 * hw.mem_latency_ns  # bytes in flight that saturate DRAM
    margin = in_flight / needed
    bandwidth = hw.achievable_hbm_tbps * 1e6 * efficiency * min(1.0, margin) * waste * coalesced  # bytes per us
    bytes_us = bytes_ / bandwidth
    search_us = 0.0
    if p.op in JAGGED_OUTPUT:
        steps = math.ceil(math.log2(p.batch + 1)) if p.batch else 0
        search_us = rows / rows_per_search * steps * SEARCH_STEP_NS * 1e-3 / max(1.0, threads / lanes / 32)
    body = max(bytes_us, search_us)  # [A] a group's search overlaps the other groups' loads
    device = launch + body
    detail = (f"{what}: {bytes_ / 1e6:.1f} MB at {bandwidth / 1e6:.2f} TB/s ({vec} B x {lanes} lanes per row step, "
              f"{waste:.0%} of lanes busy, {min(margin, 9.99):.2f}x the bytes in flight DRAM needs"
              + (f", {coalesced:.0%} of the bandwidth with {chunk} B pieces" if coalesced < 1 else "") + ")"
              + (f", {search_us:.1f} us of offset searches" if search_us else ""))
    bound = "memory" if bytes_us >= search_us else "latency"
    return Estimate(max(host, device), bound, detail, margin, 0, math.ceil(p.row_bytes / chunk))


def native_candidates(p: JaggedProblem, hw: HardwareSpec):
    if p.levels != 1:
        return
    launch = costs.launch_us(hw, "native")
    for vec in NATIVE_VEC_BYTES:
        if vec < p.elt or vec > p.align or (p.row_bytes and vec > p.row_bytes and vec != p.elt):
            continue
        for lanes in (1, 2, 4, 8, 16, 32, 64):
            if lanes > hw.warp_size or (lanes > 1 and vec * lanes // 2 >= p.row_bytes):
                continue
            config = NativeJaggedConfig(vec, lanes, NATIVE_BLOCK_THREADS)
            yield config, _stream_estimate(p, hw, vec, lanes, NATIVE_BLOCK_THREADS, 1.0, launch,
                                           gemm_model.HOST_US["native"], "native",
                                           NATIVE_ROWS_PER_SEARCH[hw.vendor])


def triton_candidates(p: JaggedProblem, hw: HardwareSpec):
    if p.levels != 1:
        return
    launch = costs.launch_us(hw, "triton")
    for block_rows, block_d, warps in TRITON_CONFIGS[hw.vendor]:
        if p.dim and block_d > 2 * max(16, 1 << (p.dim - 1).bit_length()):
            continue  # a tile mostly past the row's end
        vec = min(16, max(p.elt, block_d * p.elt // (warps * hw.warp_size // block_rows or 1)))
        lanes = max(1, min(hw.warp_size, block_d * p.elt // vec))
        yield (TritonJaggedConfig(block_rows, block_d, warps),
               _stream_estimate(p, hw, vec, lanes, warps * hw.warp_size, TRITON_EFFICIENCY, launch,
                                gemm_model.HOST_US["triton"], "triton"))


def vendor_candidates(p: JaggedProblem, hw: HardwareSpec):
    if p.op not in VENDOR_OPS or p.levels != 1:
        return
    launch = costs.launch_us(hw, "vendor")
    yield AtenJaggedConfig(), _stream_estimate(p, hw, 16, 32, 256, VENDOR_EFFICIENCY, launch,
                                               gemm_model.HOST_US["vendor"], VENDOR_OPS[p.op])


# --- bmm --------------------------------------------------------------------------------------------

def _gemm_view(p: JaggedProblem, tm: int) -> gemm_model.GemmProblem:
    """The sequences' GEMMs as one GEMM whose M is padded to whole tm-row tiles per sequence."""
    per = p.rows_per_sequence
    if p.op == DENSE_BMM:  # [len_b, K] x [K, N] per sequence
        m, n, k = p.batch * math.ceil(per / tm) * tm, p.n, p.dim
    else:  # [M, len_b] x [len_b, N] per sequence: tiles of [M, N], K = the rows
        m, n, k = p.batch * math.ceil(p.dim / tm) * tm, p.n, max(1, math.ceil(per))
    dtype = p.dtype if p.dtype != "fp32" else "bf16"
    return gemm_model.GemmProblem(m, n, k, dtype, dtype, "none")


def _bmm_estimate(p: JaggedProblem, hw: HardwareSpec, c: TritonGemmConfig, cost, launch: float, host: float,
                  what: str) -> Estimate:
    g = _gemm_view(p, c.block_m)
    tiling = gemm_model.Tiling(c.block_m, c.block_n, c.block_k, 1, 1,
                               "persistent" if c.persistent else "data_parallel", 1)
    e = gemm_model.tile_estimate(g, hw, tiling, cost, launch, what, host)
    if p.dtype == "fp32":  # no tensor cores at ieee precision: the fp32 rate
        rate = hw.peak_tflops["fp32"] * 1e6 * FP32_DOT_EFFICIENCY
        compute = g.flops / rate
        e = e._replace(time_us=max(e.time_us, launch + compute), bound="compute")
    return e


def bmm_bytes(p: JaggedProblem) -> float:
    """Bytes a bmm must move once: x's used rows, y (per sequence, or its used rows) and out."""
    used = p.batch * p.rows_per_sequence
    if p.op == DENSE_BMM:  # x [T, K], y [B, K, N], out [T, N]
        return (used * p.dim + p.batch * p.dim * p.n + p.total * p.n) * p.elt
    return (used * p.dim + used * p.n + p.batch * p.dim * p.n) * p.elt  # x [T, M], y [T, N], out [B, M, N]


def _at_least_the_bytes(e: Estimate, p: JaggedProblem, hw: HardwareSpec, share: float = 1.0) -> Estimate:
    """The GEMM view counts one B operand; y (jagged_dense_bmm) and out (jagged_jagged_bmm) are one
    [N, K] matrix per sequence: no estimate may beat moving them at `share` of the achievable DRAM
    bandwidth."""
    floor = bmm_bytes(p) / (hw.achievable_hbm_tbps * 1e6 * share)
    if e.time_us >= floor:
        return e
    return e._replace(time_us=floor, bound="memory",
                      detail=f"{e.detail}; {bmm_bytes(p) / 1e6:.1f} MB to move: {floor:.1f} us")


def native_bmm_refusal(p: JaggedProblem, hw: HardwareSpec) -> str:
    """Why no native bmm kernel takes this problem ("" when one does)."""
    if p.levels != 1:
        return "the GPU kernels take one jagged dimension"
    if hw.arch not in NATIVE_BMM_ARCHS[hw.vendor]:
        return f"the native jagged bmm kernels are built for {', '.join(NATIVE_BMM_ARCHS[hw.vendor])}, not {hw.arch}"
    if p.dtype not in NATIVE_BMM_DTYPES:
        return "the native jagged bmm kernels take bf16 / fp16 (fp32: Triton or torch.bmm)"
    if p.align < 16:
        return ("the native jagged bmm kernels need 16-byte aligned operands (base pointers, row strides, "
                f"K / M and N multiples of 8) and a unit stride in y's last two dims; these are {p.align}-byte")
    return ""


def bmm_native_candidates(p: JaggedProblem, hw: HardwareSpec):
    if native_bmm_refusal(p, hw):
        return
    launch = costs.launch_us(hw, "native")
    base, switch_us = NATIVE_BMM_COST[hw.vendor]
    mainloop = gemm_model.NATIVE_COST.get(base, gemm_model.DEFAULT_NATIVE_COST[hw.vendor])
    cost = gemm_model.KernelCost(mainloop.mma_efficiency, mainloop.tile_overhead_us + switch_us, "[A]",
                                 mainloop.fixed_us)
    for index, (name, tm, tn, tk) in enumerate(NATIVE_BMM_KERNELS[hw.vendor]):
        g = _gemm_view(p, tm)
        schedule = "persistent" if hw.vendor == "nvidia" else "data_parallel"
        e = gemm_model.tile_estimate(g, hw, gemm_model.Tiling(tm, tn, tk, 1, 1, schedule), cost,
                                     2 * launch, f"native grouped GEMM {name}", gemm_model.HOST_US["native"])
        yield NativeBmmConfig(index, name), _at_least_the_bytes(e, p, hw, NATIVE_BMM_STREAM_SHARE[hw.vendor])


def bmm_triton_candidates(p: JaggedProblem, hw: HardwareSpec):
    launch = costs.launch_us(hw, "triton")
    cost = gemm_model.TRITON_COST[(hw.vendor, "16bit")]
    for row in BMM_TRITON_CONFIGS[hw.vendor]:
        c = TritonGemmConfig(*row)
        if p.dtype == "fp32" and c.block_m * c.block_n > FP32_MAX_TILE:
            continue
        yield c, _at_least_the_bytes(_bmm_estimate(p, hw, c, cost, launch, gemm_model.HOST_US["triton"],
                                                   "triton grouped tiles"), p, hw)


def bmm_vendor_estimate(p: JaggedProblem, hw: HardwareSpec) -> Estimate:
    dtype = p.dtype if p.dtype != "fp32" else "bf16"
    if p.op == DENSE_BMM:
        g = gemm_model.GemmProblem(p.batch * p.max_length, p.n, p.dim, dtype, dtype, "none")
        pads = [JaggedProblem(TO_PADDED, p.batch, p.max_length, p.total, p.dim, dtype=p.dtype),
                JaggedProblem(TO_JAGGED, p.batch, p.max_length, p.total, p.n, dtype=p.dtype)]
    else:
        g = gemm_model.GemmProblem(p.batch * p.dim, p.n, p.max_length, dtype, dtype, "none")
        pads = [JaggedProblem(TO_PADDED, p.batch, p.max_length, p.total, p.dim, dtype=p.dtype),
                JaggedProblem(TO_PADDED, p.batch, p.max_length, p.total, p.n, dtype=p.dtype)]
    mm = gemm_model.vendor_estimate(g, hw)
    # The conversions are this family's own (csrc/jagged/jagged_gpu.cpp): their best native estimate.
    steps = [min((e for _, e in native_candidates(q, hw)), key=lambda e: e.time_us) for q in pads]
    total = mm.time_us + sum(s.time_us for s in steps)
    return Estimate(total, mm.bound, f"{PaddedBmmConfig.op}: bmm {mm.time_us:.1f} us + conversions "
                    f"{sum(s.time_us for s in steps):.1f} us", 1.0, 0, 1)


# --- the problem of a call -----------------------------------------------------------------------

_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32",
                 "torch.float64": "fp32"}


def alignment(*tensors) -> int:
    """csrc/jagged/jagged_gpu.cpp's alignment: the largest power of two <= 16 dividing every base
    address, row stride (bytes) and row width (bytes) of the floating tensors (16 for meta tensors)."""
    value = 16
    for t in tensors:
        if t is None:
            continue
        elt = t.element_size()
        value |= t.shape[-1] * elt if t.dim() > 1 else elt
        if t.device.type != "meta":
            value |= t.data_ptr()
            for d in range(t.dim() - 1):
                value |= t.stride(d) * elt
    return value & -value


def bmm_alignment(x, y) -> int:
    """csrc/jagged/jagged_gpu.cpp's bmm_alignment: alignment() over x's and y's base pointers, row
    widths and the strides that are not 1, y's unit stride being either of its last two dims (the
    backward passes y^T); 1 when x or y has no unit stride there."""
    def unit(t, d):
        return t.stride(d) == 1 or t.shape[d] == 1

    if not unit(x, 1):
        return 1
    elt = x.element_size()
    values = [x.shape[1] * elt, x.stride(0) * elt, y.shape[-1] * elt]
    if y.dim() == 2:
        if not unit(y, 1):
            return 1
        values.append(y.stride(0) * elt)
    else:
        inner = 2 if unit(y, 2) else 1 if unit(y, 1) else -1
        if inner < 0:
            return 1
        values.append(y.shape[1] * elt)
        values += [y.stride(d) * elt for d in range(3) if d != inner]
    if x.device.type != "meta":
        values += [x.data_ptr(), y.data_ptr()]
    value = 16
    for v in values:
        value |= v
    return value & -value


def _rows(t) -> int:
    return t.shape[-1] if t.dim() > 1 else 1


def problem_of(op, *args, **kwargs) -> JaggedProblem:
    """The problem of a call of the raw op `op` (torch.ops.mymetaops.<op>) with these arguments,
    as csrc/jagged/jagged_gpu.cpp computes it. A size the call leaves to be read back (total_L,
    num_dense_output_rows) counts as the largest it can be."""
    a = list(args)
    if op in (TO_PADDED, TO_JAGGED, ADD_DENSE, ADD_JAGGED, MUL):
        first, offsets = a[0], list(a[1])
        batch = offsets[0].shape[0] - 1
        common = dict(dtype=_TORCH_DTYPES[str(first.dtype)], offsets_dtype=str(offsets[0].dtype).split(".")[1],
                      levels=len(offsets))
        if op == TO_PADDED:
            max_lengths = a[2] if len(a) > 2 else kwargs["max_lengths"]
            return JaggedProblem(op, batch, int(max_lengths[0]), first.shape[0], _rows(first),
                                 align=alignment(first), **common)
        if op == TO_JAGGED:
            total = a[2] if len(a) > 2 else kwargs.get("total_L")
            max_length = first.shape[1]
            inner = first.dim() == len(offsets) + 2
            return JaggedProblem(op, batch, max_length, batch * max_length if total is None else int(total),
                                 first.shape[-1] if inner else 1, align=alignment(first), **common)
        y = a[2] if len(a) > 2 else kwargs["y"]
        return JaggedProblem(op, batch, y.shape[1], first.shape[0], _rows(first), align=alignment(first, y), **common)
    if op in (SOFTMAX, SOFTMAX_BACKWARD):
        *tensors, offsets, max_L = a[:4] if op == SOFTMAX_BACKWARD else a[:3]
        v = tensors[-1]
        return JaggedProblem(op, offsets.shape[0] - 1, int(max_L), v.shape[0], v.shape[1],
                             dtype=_TORCH_DTYPES[str(v.dtype)], offsets_dtype=str(offsets.dtype).split(".")[1],
                             align=alignment(*tensors))
    if op == INDEX_SELECT:
        values, lengths, indices = a[:3]
        rows = a[3] if len(a) > 3 else kwargs.get("num_dense_output_rows")
        return JaggedProblem(op, indices.shape[0], values.shape[0] if rows is None else int(rows), values.shape[0],
                             values.shape[1], dtype=_TORCH_DTYPES[str(values.dtype)],
                             offsets_dtype=str(lengths.dtype).split(".")[1], align=alignment(values))
    if op == INDEX_SELECT_BACKWARD:
        grad, lengths, indices, num_input_rows = a[:4]
        return JaggedProblem(op, indices.shape[0], grad.shape[0], int(num_input_rows), grad.shape[1],
                             dtype=_TORCH_DTYPES[str(grad.dtype)], offsets_dtype=str(lengths.dtype).split(".")[1],
                             align=alignment(grad))
    if op == DENSE_BMM:
        x, offsets, y, max_L = a[:4]
        return JaggedProblem(op, offsets.shape[0] - 1, int(max_L), x.shape[0], x.shape[1], y.shape[2],
                             _TORCH_DTYPES[str(x.dtype)], str(offsets.dtype).split(".")[1], bmm_alignment(x, y))
    x, y, offsets, max_L = a[:4]  # JAGGED_BMM
    return JaggedProblem(op, offsets.shape[0] - 1, int(max_L), x.shape[0], x.shape[1], y.shape[1],
                         _TORCH_DTYPES[str(x.dtype)], str(offsets.dtype).split(".")[1], bmm_alignment(x, y))


# --- the family ------------------------------------------------------------------------------------

def size_bucket(x: int) -> int:
    """csrc/jagged/jagged_gpu.cpp's rounding: exact up to 64, then quarter octaves."""
    return x if x <= 64 else 64 + int(4 * math.log2(x / 64.0))


def bucket_size(b: int) -> int:
    """The representative of a size bucket: the bucket's lower end."""
    return b if b <= 64 else math.ceil(64 * 2 ** ((b - 64) / 4.0))


class JaggedFamily(Family):
    name = "jagged"
    ops = OPS
    problem_type = JaggedProblem

    def candidates(self, op, p, hw):
        if op in BMM_OPS:
            for config, e in bmm_native_candidates(p, hw):
                yield "native", config, e
            for config, e in bmm_triton_candidates(p, hw):
                yield "triton", config, e
            if p.levels == 1:
                yield "vendor", PaddedBmmConfig(), bmm_vendor_estimate(p, hw)
            return
        for config, e in native_candidates(p, hw):
            yield "native", config, e
        for config, e in triton_candidates(p, hw):
            yield "triton", config, e
        for config, e in vendor_candidates(p, hw):
            yield "vendor", config, e

    def missing_backend_note(self, op, backend):
        if backend == "vendor" and op == TO_JAGGED:
            return ATEN_TO_JAGGED_NOTE
        if backend == "vendor" and op not in VENDOR_OPS and op not in BMM_OPS:
            return "torch has no kernel of this jagged op"
        return ""

    def absent_reason(self, op, problem, hw, backend):
        if problem.levels != 1 and backend in ("native", "triton", "vendor"):
            return "the GPU kernels take one jagged dimension (more run on the CPU)"
        if backend == "native" and op in BMM_OPS:
            return native_bmm_refusal(problem, hw)
        return self.missing_backend_note(op, backend)

    def describe(self, p):
        what = (f"{p.batch} sequences, max length {p.max_length}, {p.total} rows of {p.dim} {p.dtype}"
                + (f", N={p.n}" if p.op in BMM_OPS else "") + f", {p.offsets_dtype} offsets, rows {p.align}-byte aligned")
        return f"{p.op}: {what}; {moved_bytes(p) / 1e6:.1f} MB to move" if p.op in MEMORY_OPS else f"{p.op}: {what}"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--batch", type=int, required=True)
        parser.add_argument("--max-length", type=int, required=True)
        parser.add_argument("--total", type=int, help="jagged rows (default: batch * max_length / 2)")
        parser.add_argument("--dim", type=int, required=True)
        parser.add_argument("--n", type=int, default=0, help="bmm ops: N")
        parser.add_argument("--dtype", choices=sorted(ELEMENT_BYTES), default="bf16")
        parser.add_argument("--offsets-dtype", choices=sorted(INDEX_IDS), default="int64")

    def problem_from_args(self, op, args):
        total = args.total if args.total is not None else args.batch * args.max_length // 2
        return JaggedProblem(op, args.batch, args.max_length, total, args.dim, args.n, args.dtype, args.offsets_dtype)

    def problem_from_call(self, op, *args, **kwargs):
        return problem_of(op, *args, **kwargs)

    def bucket_key(self, op, p):
        """csrc/jagged/jagged_gpu.cpp's key fields: the sizes that vary per step (sequences, lengths,
        rows) in quarter octaves; the row width and N (a model's dimensions) exact."""
        return (DTYPE_IDS[p.dtype], INDEX_IDS[p.offsets_dtype], p.align, p.levels, size_bucket(p.batch),
                size_bucket(p.max_length), size_bucket(p.total), p.dim, p.n)

    def problem_from_key(self, op, key):
        dtype, index, align, levels, b, l, t, d, n = key
        return JaggedProblem(op, bucket_size(b), bucket_size(l), bucket_size(t), d, n, DTYPE_NAMES[dtype],
                             INDEX_NAMES[index], align, levels)

    def sample(self, op, rng: random.Random):
        """Recsys user histories: 256-8192 sequences of up to 64-4096 rows, D 16-512."""
        batch = round(2 ** rng.uniform(8, 13))
        max_length = round(2 ** rng.uniform(6, 12))
        total = round(batch * max_length * rng.uniform(0.2, 0.8))
        dim = rng.choice((16, 32, 64, 128, 256, 512))
        n = rng.choice((64, 128, 256)) if op in BMM_OPS else 0
        if op == INDEX_SELECT:  # batch selected of max(batch, ...) sequences
            return JaggedProblem(op, batch, total // 2, total, dim)
        return JaggedProblem(op, batch, max_length, total, dim, n, rng.choice(("bf16", "fp16", "fp32")))


FAMILY = register(JaggedFamily())
