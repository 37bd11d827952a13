"""The GEMM family: FP8 GEMM (`fp8_gemm`) and bf16/fp16 GEMM (`gemm`). Its problem, buckets, and
one cost model over every candidate -- the native tile kernels (cuda/gemm: CUTLASS on Hopper;
hip/gemm: MFMA on CDNA), the Triton configs (mymetaops/triton/gemm.py) and the vendor library
(torch._scaled_mm / torch.mm: cuBLASLt, hipBLASLt).

Count first. A tile kernel cuts out[M, N] into tm x tn tiles, each a mainloop over K in tk steps
(split_k slices of it with split-K). Per tile-unit:
    mma   = 2 tm tn tk steps / (datasheet rate per SM x the kernel's mainloop efficiency)
    feed  = (tm + tn) tk steps bytes / the bandwidth one SM pulls from L2
    unit  = max(mma, feed) + the kernel's per-tile overhead (pipeline fill, epilogue not hidden)
Units run in waves over the SMs/CUs (wave quantization: ceil(units / slots), slots = SMs rounded
down to whole clusters); stream-K spreads the K steps evenly instead. The whole kernel also needs
its DRAM bytes (A, B, out once; split-K partials) and its L2->SM bytes (every tile reads its A and
B panels; a cluster multicasts the panel its CTAs share):
    t = launch + max(waves x unit, dram bytes / HBM, L2 bytes / L2) [+ split-K reduction]
The vendor library is modeled the same way as the best of the tiles its heuristics choose from
(torch's rowwise FP8 kernel has no split-K; cuBLASLt and hipBLASLt do), with its own efficiency.
Per-kernel constants (mainloop efficiency, per-tile overhead) are in gemm_kernels.py, fitted on the
H200 by bench/gemm/calibrate.py; the rest are the chip's numbers from hardware.py.
Tags: [M] measured on this project's H200; [D] datasheet; [A] assumed.
"""
from __future__ import annotations

import argparse
import inspect
import math
import random
from dataclasses import dataclass, replace

from mymetaops.configs import NativeGemmConfig, ScaledMmConfig, TorchMmConfig, TritonGemmConfig

from . import costs
from .family import Estimate, Family, register
from .gemm_kernels import (DEFAULT_NATIVE_COST, NATIVE_COST, NATIVE_FP8_N_MULTIPLE, NATIVE_FP8_OUT,
                           NATIVE_NOT_OFFERED, NATIVE_SPLIT_LIMIT, TRITON_CONFIGS, TRITON_COST, KernelCost,
                           KernelRow, native_table)
from .hardware import HardwareSpec

OPS = ("fp8_gemm", "gemm")
FP8_GEMM, GEMM = OPS
OUT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
DTYPE_IDS = {"fp32": 0, "fp16": 1, "bf16": 2}  # the launcher ABI's DType codes (types.h)
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
LAYOUTS = ("n_contiguous", "k_contiguous", "strided")  # csrc/gemm/gemm.h Layout codes
FORMATS = ("e4m3fn", "e4m3fnuz")

# --- the memory system as a GEMM sees it -------------------------------------------------------
# [A] bytes per clock one SM/CU pulls from L2 (Hopper: 64 B/clk per SM in public microbenchmarks;
# CDNA3: 64 B/clk per CU L2 read bandwidth [D]).
SM_FEED_BYTES_PER_CLOCK = {"nvidia": 64.0, "amd": 64.0}
# Aggregate L2->SM bandwidth a GEMM's panel reads reach, TB/s. Hopper [M]: bf16 8192^3 with 128x128
# tiles and no clusters reads 17.2 GB through L2 in 1436 us on the H200 (>= 12.0 TB/s, and bound by
# it); others [A] (MI300X's L2 is per XCD, the Infinity Cache behind it 17 TB/s peak).
L2_GEMM_TBPS = {"H100": 12.5, "H200": 12.5, "B200": 20.0, "MI300X": 12.0, "MI325X": 12.0,
                "MI350X": 14.0, "MI355X": 14.0}
# [M] H200 host (2026-12-01), per call made back to back: the C++ dispatch and a CUTLASS launch
# (argument checks, TMA descriptors), torch._scaled_mm / torch.mm, and Triton's Python launcher
# (grid, descriptors, argument binding). A small GEMM cannot finish faster than its host work.
HOST_US = {"native": 8.0, "vendor": 8.5, "triton": 24.0}
SPLIT_K_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_K_STEPS_PER_SPLIT = 4  # [A] fewer K steps per slice cannot fill the pipeline

# --- the vendor library, as a set of tiles it picks from ----------------------------------------
# (tm, tn, tk, cluster_m, cluster_n) for 8-bit and 16-bit inputs.
VENDOR_TILES = {
    "fp8": ((64, 128, 128, 1, 1), (128, 128, 128, 2, 1), (128, 256, 128, 2, 1)),
    "16bit": ((64, 128, 64, 1, 1), (128, 128, 64, 2, 1), (128, 256, 64, 2, 1)),
}
# Mainloop efficiency and per-tile overhead of the vendor kernels: NVIDIA [M] fitted by
# bench/gemm/calibrate.py (H200, 2026-12-01); AMD [A].
VENDOR_COST = {
    ("nvidia", "scaled_mm_rowwise"): KernelCost(0.826, 2.391, "[M]", 0.42),
    ("nvidia", "scaled_mm_tensorwise"): KernelCost(0.596, 0.308, "[M]", 0.00),
    ("nvidia", "mm"): KernelCost(0.787, 0.961, "[M]", 0.00),
    ("amd", "scaled_mm_rowwise"): KernelCost(0.50, 1.2),
    ("amd", "scaled_mm_tensorwise"): KernelCost(0.55, 1.0),
    ("amd", "mm"): KernelCost(0.60, 0.8),
}
VENDOR_UNALIGNED_FACTOR = 0.3  # [M] see vendor_estimate
VENDOR_PRECISE_ACC_FACTOR = 0.85  # [M] _scaled_mm rowwise without fast accumulation: 1.1-1.3x slower when compute-bound
# [M] cuBLAS balances a partial last wave across every SM (stream-K kernels): bf16 3000x1000x4000
# (96 tiles of 128x256 on 132 SMs) ran at 650 TFLOP/s, more than one wave of its tiles allows.
VENDOR_STREAM_K = {("nvidia", "mm")}
VENDOR_EXTRA_LAUNCH_US = 2.0  # [A] torch's op around cuBLASLt: scale checks, heuristic query


@dataclass(frozen=True)
class GemmProblem:
    """out[m, n] = x[m, k] . w^T (+ bias): what one call computes and how its operands lie."""

    m: int
    n: int
    k: int
    input: str = "fp8"  # "fp8" | "bf16" | "fp16"
    out_dtype: str = "bf16"  # "bf16" | "fp16" | "fp32"
    scaling: str = "rowwise"  # "rowwise" | "tensorwise" (fp8) | "none" (bf16/fp16)
    has_bias: bool = False
    fp8_format: str = "e4m3fn"  # fp8 only: "e4m3fn" | "e4m3fnuz"
    b_layout: str = "k_contiguous"  # gemm only: how torch.mm's b lies (LAYOUTS)
    native_layout: bool = True  # gemm only: a and b meet the native kernels' layout and alignment

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 0:
            raise ValueError(f"negative GEMM size {self.m}x{self.n}x{self.k}")
        if self.input not in ("fp8", "bf16", "fp16") or self.out_dtype not in OUT_BYTES:
            raise ValueError(f"unknown dtypes {self.input} -> {self.out_dtype}")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def in_bytes(self) -> int:
        return 1 if self.input == "fp8" else 2

    @property
    def rate_key(self) -> str:
        return self.input  # hardware.peak_tflops: "fp8", "bf16", "fp16"


def describe(p: GemmProblem) -> str:
    what = (f"fp8 ({p.fp8_format}, {p.scaling} scales)" if p.input == "fp8"
            else f"{p.input} (b {p.b_layout}{'' if p.native_layout else ', not native-aligned'})")
    return (f"M={p.m} N={p.n} K={p.k} {what} -> {p.out_dtype}{' + bias' if p.has_bias else ''}: "
            f"{p.flops / 1e9:.2f} GFLOP")


# Hopper's FP8 MMA accumulates with fewer mantissa bits than fp32 (CDNA's MFMA does not) ("fast accumulation", as in
# CUTLASS's FP8FastAccum and torch._scaled_mm(use_fast_accum=True)). Over K = 131072 one such chain
# measured a relative error of 1.03e-2 (H200); past this K, the Triton kernel promotes into fp32
# after every BLOCK_K step and the vendor op is called with use_fast_accum=False.
FAST_ACCUM_MAX_K = 16384
# Promotion keeps a second fp32 accumulator: a 128x256 tile's two spill on sm_90 (255 registers and a
# 248-byte stack, scripts/check_triton_targets.py), so past FAST_ACCUM_MAX_K Triton FP8 tiles stay
# within this many elements.
PROMOTED_MAX_TILE = 128 * 128
# The same limit where out's row stride (N) is not a multiple of 16 elements: the tile's stores stay
# scalar and a 128x256 FP8 tile spills (255 registers, 208-byte stack; bench/gemm/NOTES.md). It
# timed 1.2-1.4x its 128x128 sibling at 5000x1500x2000 in all three H200 runs.
UNALIGNED_OUT_MAX_TILE = 128 * 128


def size_bucket(x: int) -> int:
    """csrc/gemm/gemm_gpu.cpp's size_bucket: to 16 up to 256, to 64 up to 16384, then 1/16 octave."""
    if x <= 256:
        return -(-x // 16) * 16
    if x <= 16384:
        return -(-x // 64) * 64
    return 16384 + math.floor(16 * math.log2(x))


def n_alignment(n: int) -> int:
    """csrc/gemm/gemm_gpu.cpp: 2 when 16 divides N, 1 when 8 does, else 0."""
    return 2 if n % 16 == 0 else 1 if n % 8 == 0 else 0


def bucket_size(b: int) -> int:
    """The representative size of a bucket: its upper end, down to a multiple of 64 past 16384 (the
    buckets there are over 700 wide), so that it keeps the alignment every size of the bucket may have."""
    return b if b <= 16384 else math.floor(2 ** ((b - 16384 + 1) / 16)) // 64 * 64


def vendor_aligned(p) -> bool:
    """Whether N's and K's rows are 16-byte multiples (torch.mm's fast path; gemm_gpu.cpp's key)."""
    return p.n * p.in_bytes % 16 == 0 and p.k * p.in_bytes % 16 == 0


# --- the cost of one tile kernel ------------------------------------------------------------------

@dataclass(frozen=True)
class Tiling:
    tm: int
    tn: int
    tk: int
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "data_parallel"
    split_k: int = 1


def tile_estimate(p: GemmProblem, hw: HardwareSpec, t: Tiling, cost: KernelCost, launch_us: float,
                  what: str, host_us: float = 0.0, fixup_in_kernel: bool = False,
                  l2_efficiency: float = 1.0) -> Estimate:
    """host_us: the host time of one call, a floor for calls made back to back; fixup_in_kernel:
    split-K partials reduced by the kernel itself (CUTLASS: the last CTA of a tile sums the
    others' partials) rather than by a second launch; l2_efficiency: the share of the chip's
    L2-to-SM bandwidth this tiling gets."""
    if p.m == 0 or p.n == 0:
        return Estimate(max(host_us, launch_us), "launch", f"{what}: empty output", 1.0, 0, 1)
    rate_sm = hw.peak_tflops[p.rate_key] * 1e6 * cost.mma_efficiency / hw.sm_count  # FLOP/us per SM
    feed_sm = SM_FEED_BYTES_PER_CLOCK[hw.vendor] * hw.clock_ghz * 1e3  # bytes/us per SM
    steps = max(1, -(-p.k // t.tk))
    steps_per_unit = -(-steps // t.split_k)
    tiles = (-(-p.m // t.tm)) * (-(-p.n // t.tn))
    mma_unit = 2.0 * t.tm * t.tn * t.tk * steps_per_unit / rate_sm
    feed_unit = (t.tm + t.tn) * t.tk * steps_per_unit * p.in_bytes / feed_sm
    cluster = t.cluster_m * t.cluster_n
    slots = hw.sm_count // cluster * cluster
    if t.schedule == "stream_k":
        # Every SM gets an equal share of all K steps; a tile cut between SMs costs a fix-up.
        total = tiles * steps * max(2.0 * t.tm * t.tn * t.tk / rate_sm,
                                    (t.tm + t.tn) * t.tk * p.in_bytes / feed_sm)
        waves = -(-tiles // slots)
        compute = total / slots + waves * cost.tile_overhead_us + (cost.tile_overhead_us if tiles % slots else 0)
    else:
        units = tiles * t.split_k
        waves = -(-units // slots)
        compute = waves * (max(mma_unit, feed_unit) + cost.tile_overhead_us)
        if t.split_k > 1 and fixup_in_kernel:  # the tile's last CTA reads the others' fp32 partials
            compute += -(-tiles // slots) * t.split_k * t.tm * t.tn * 4 / feed_sm
    bw = hw.achievable_hbm_tbps * 1e6  # bytes/us
    dram = (p.m + p.n) * p.k * p.in_bytes + p.m * p.n * OUT_BYTES[p.out_dtype]
    reduce_us = 0.0
    if t.split_k > 1 and not fixup_in_kernel:  # fp32 partials reduced by a second launch
        partial = p.m * p.n * 4 * t.split_k
        dram += partial
        reduce_us = launch_us * 0.5 + (partial + p.m * p.n * OUT_BYTES[p.out_dtype]) / bw
    l2_bytes = tiles * p.k * p.in_bytes * (t.tm / t.cluster_n + t.tn / t.cluster_m)
    l2_us = l2_bytes / (L2_GEMM_TBPS.get(hw.name, 8.0) * 1e6 * l2_efficiency)
    mem_us = dram / bw
    body = max(compute, mem_us, l2_us)
    bound = "compute" if body == compute else "memory"
    ideal = p.flops / (hw.peak_tflops[p.rate_key] * 1e6 * cost.mma_efficiency)
    detail = (f"{what}: {tiles} tiles{f' x {t.split_k} K-slices' if t.split_k > 1 else ''} on "
              f"{slots} slots ({waves} wave{'s' if waves != 1 else ''}, {ideal / max(compute, 1e-9):.0%} "
              f"of the mainloop rate), DRAM {dram / 1e6:.1f} MB, L2 {l2_bytes / 1e6:.0f} MB")
    device_us = launch_us + cost.fixed_us + body + reduce_us
    if host_us > device_us:
        bound, detail = "launch", f"{detail}; host-bound: {host_us:.0f} us of host work per call"
    return Estimate(max(host_us, device_us), bound, detail, 1.0, 0, 1)


def _split_choices(p: GemmProblem, tk: int, max_split: int, slots: int, tiles: int) -> list[int]:
    steps = max(1, -(-p.k // tk))
    return [s for s in SPLIT_K_CHOICES
            if s <= max_split and (s == 1 or (steps >= s * MIN_K_STEPS_PER_SPLIT and tiles * s <= 2 * slots))]


# --- candidates ---------------------------------------------------------------------------------

def native_refusal(p: GemmProblem, hw: HardwareSpec) -> str:
    """Why no native kernel of the chip takes the problem ('' when some may; see native_rows)."""
    if p.input == "fp8":
        if p.fp8_format != ("e4m3fnuz" if hw.arch == "gfx942" else "e4m3fn"):
            return f"{p.fp8_format} is not {hw.arch}'s FP8 format"
        if p.out_dtype not in NATIVE_FP8_OUT[hw.vendor]:
            return f"the native FP8 kernels write {' or '.join(NATIVE_FP8_OUT[hw.vendor])} only"
        if p.n % NATIVE_FP8_N_MULTIPLE[hw.vendor]:
            return f"the native FP8 kernels need N % {NATIVE_FP8_N_MULTIPLE[hw.vendor]} == 0 (16-byte output rows)"
    elif not p.native_layout or p.b_layout == "strided":
        return "the native kernels need a with K contiguous, b N- or K-contiguous, 16-byte aligned rows"
    return ""


def native_rows(p: GemmProblem, hw: HardwareSpec) -> list[tuple[int, KernelRow]]:
    table = native_table(hw.vendor)
    rows = []
    if native_refusal(p, hw):
        return rows
    for index, row in enumerate(table):
        if row.arch != hw.arch or row.input != p.input or row.name in NATIVE_NOT_OFFERED:
            continue
        if p.input != "fp8" and row.b_k_major_only and p.b_layout != "k_contiguous":
            continue
        rows.append((index, row))
    return rows


def tiled_problem(p: GemmProblem, row: KernelRow) -> GemmProblem:
    """The problem as a kernel row tiles it: M and N exchanged for a swapped (out^T) kernel."""
    return replace(p, m=p.n, n=p.m) if row.swap_ab else p


# [M] A 64x128 tile turned so that its 64-row side runs along the shorter output side of a long-K
# problem, both sides at least a full tile, ran 1.1-1.4x slower than the same tile turned the other
# way with the same tile count (H200, the unswapped / swapped pair: 512x2048x16384 1.31x, where both
# are L2-bound, 4096x1024x32768 1.36x, 32768x1024x4096 and 16384x4096x4096 1.1x). Its mainloop rate
# and its share of L2 bandwidth are scaled by this factor there.
SHORT_SIDE_NARROW_TILE_FACTOR = 0.8
SHORT_SIDE_MIN_K = 4096


def narrow_tile_factor(p: GemmProblem, hw: HardwareSpec, tile_m: int, tile_n: int) -> float:
    """SHORT_SIDE_NARROW_TILE_FACTOR where its rule holds for a tile_m x tile_n tile over p (the
    tiled problem: its M runs along tile_m), else 1. Measured for FP8 on NVIDIA, native and
    _scaled_mm alike (the vendor's 64x128 tile times as our unswapped one there)."""
    if (hw.vendor == "nvidia" and p.input == "fp8" and tile_m < tile_n and p.k >= SHORT_SIDE_MIN_K
            and p.m < p.n and p.m >= tile_n):
        return SHORT_SIDE_NARROW_TILE_FACTOR
    return 1.0


def _turned(cost: KernelCost, factor: float) -> KernelCost:
    return cost if factor == 1.0 else replace(cost, mma_efficiency=cost.mma_efficiency * factor)


def native_candidates(p0: GemmProblem, hw: HardwareSpec):
    launch = costs.launch_us(hw, "native")
    for index, row in native_rows(p0, hw):
        p = tiled_problem(p0, row)
        cost = NATIVE_COST.get(row.name, DEFAULT_NATIVE_COST[hw.vendor])
        turned = narrow_tile_factor(p, hw, row.tile_m, row.tile_n)
        cost = _turned(cost, turned)
        tiles = (-(-p.m // row.tile_m)) * (-(-p.n // row.tile_n))
        splits = [1] if row.schedule == "stream_k" else _split_choices(
            p, row.tile_k, min(row.max_split_k, NATIVE_SPLIT_LIMIT.get(row.name, row.max_split_k)),
            hw.sm_count, tiles)
        for split in splits:
            tiling = Tiling(row.tile_m, row.tile_n, row.tile_k, row.cluster_m, row.cluster_n, row.schedule, split)
            yield (NativeGemmConfig(index, split, row.name),
                   tile_estimate(p, hw, tiling, cost, launch, f"native {row.schedule}", HOST_US["native"],
                                 fixup_in_kernel=hw.vendor == "nvidia", l2_efficiency=turned))


# mymetaops/triton/gemm.py's load-path rule: its FP8 kernel on NVIDIA loads through host-side TMA
# descriptors from this many multiply-adds on (they cost host time per launch), pointers below.
TRITON_FP8_TMA_MIN_MACS = 1 << 35


def triton_cost_key(p: GemmProblem, hw: HardwareSpec) -> tuple[str, str]:
    """The TRITON_COST entry of a problem: by input kind, and for FP8 on NVIDIA by load path."""
    if p.input != "fp8":
        return hw.vendor, "16bit"
    if hw.vendor == "nvidia" and p.m * p.n * p.k >= TRITON_FP8_TMA_MIN_MACS:
        return hw.vendor, "fp8_tma"
    return hw.vendor, "fp8"


def triton_candidates(p: GemmProblem, hw: HardwareSpec):
    launch = costs.launch_us(hw, "triton")
    kind = (hw.vendor, "fp8" if p.input == "fp8" else "16bit")
    cost = TRITON_COST[triton_cost_key(p, hw)]
    for c in TRITON_CONFIGS.get(kind, ()):
        if (hw.vendor == "nvidia" and p.input == "fp8" and (p.k > FAST_ACCUM_MAX_K or p.n % 16)
                and c.block_m * c.block_n > min(PROMOTED_MAX_TILE, UNALIGNED_OUT_MAX_TILE)):
            continue
        schedule = "persistent" if c.persistent else "data_parallel"
        tiling = Tiling(c.block_m, c.block_n, c.block_k, 1, 1, schedule, 1)
        yield c, tile_estimate(p, hw, tiling, cost, launch, f"triton {schedule}", HOST_US["triton"])


def vendor_available(p: GemmProblem, hw: HardwareSpec) -> str:
    """'' when the vendor op takes the problem, else why not."""
    if p.input != "fp8":
        return ""
    native_format = "e4m3fnuz" if hw.arch == "gfx942" else "e4m3fn"
    if p.fp8_format != native_format:
        return f"{p.fp8_format} is not this chip's FP8 format"
    if p.n % 16:
        return "torch._scaled_mm needs N % 16 == 0"
    if p.scaling == "rowwise" and p.out_dtype != "bf16":
        return "torch._scaled_mm's rowwise scaling writes bfloat16 only"
    if p.has_bias and p.out_dtype == "fp32":
        return "torch._scaled_mm takes no bias with a float32 output"
    return ""


def vendor_estimate(p: GemmProblem, hw: HardwareSpec) -> Estimate:
    if p.input == "fp8":
        key, tiles, can_split = f"scaled_mm_{p.scaling}", VENDOR_TILES["fp8"], p.scaling != "rowwise"
    else:
        key, tiles, can_split = "mm", VENDOR_TILES["16bit"], True
    cost = VENDOR_COST[(hw.vendor, key)]
    if p.input != "fp8" and not vendor_aligned(p):
        # [M] cuBLAS on rows that are not 16-byte multiples takes a slow path: bf16 5000x1500x2000
        # ran at 189 TFLOP/s (native / Triton tiles: 480+).
        cost = KernelCost(cost.mma_efficiency * VENDOR_UNALIGNED_FACTOR, cost.tile_overhead_us, cost.tag, cost.fixed_us)
    if p.input == "fp8" and p.k > FAST_ACCUM_MAX_K:  # called with use_fast_accum=False
        cost = KernelCost(cost.mma_efficiency * VENDOR_PRECISE_ACC_FACTOR, cost.tile_overhead_us, cost.tag, cost.fixed_us)
    launch = costs.launch_us(hw, "vendor") + VENDOR_EXTRA_LAUNCH_US
    best = None
    for tm, tn, tk, cm, cn in tiles:
        ntiles = (-(-p.m // tm)) * (-(-p.n // tn))
        tilings = [Tiling(tm, tn, tk, cm, cn, "data_parallel", split)
                   for split in (_split_choices(p, tk, 16, hw.sm_count, ntiles) if can_split else [1])]
        if (hw.vendor, key) in VENDOR_STREAM_K:
            tilings.append(Tiling(tm, tn, tk, cm, cn, "stream_k", 1))
        turned = narrow_tile_factor(p, hw, tm, tn)
        for t in tilings:
            how = f" split {t.split_k}" if t.split_k > 1 else " stream-K" if t.schedule == "stream_k" else ""
            e = tile_estimate(p, hw, t, _turned(cost, turned), launch, f"vendor ({key}, as tile {tm}x{tn}x{tk}{how})",
                              HOST_US["vendor"], l2_efficiency=turned)
            if best is None or e.time_us < best.time_us:
                best = e
    return best


VENDOR_CONFIG = {FP8_GEMM: ScaledMmConfig(), GEMM: TorchMmConfig()}


def _fp8_wrapper_arguments(xq, wq, x_scale, w_scale, bias=None, out_dtype=None):
    """The signature of mymetaops.fp8_gemm."""


def _gemm_wrapper_arguments(a, b, bias=None):
    """The signature of mymetaops.gemm."""


_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def b_layout_of(b) -> str:
    """csrc/gemm/gemm.cpp's layout_of_b."""
    if b.stride(1) == 1 or b.shape[1] == 1:
        return "n_contiguous"
    if b.stride(0) == 1 or b.shape[0] == 1:
        return "k_contiguous"
    return "strided"


def native_layout_of(a, b) -> bool:
    """csrc/gemm/gemm_gpu.cpp's native_layout: a with K contiguous, b N- or K-contiguous, rows and
    pointers 16-byte aligned."""
    layout = b_layout_of(b)
    if layout == "strided" or (a.stride(1) != 1 and a.shape[1] > 1):
        return False
    if a.device.type == "meta":
        return True
    elt = a.element_size()
    ldb = b.stride(0) if layout == "n_contiguous" else b.stride(1)
    value = a.data_ptr() | b.data_ptr() | a.stride(0) * elt | ldb * elt | b.shape[1] * elt | 16
    return (value & -value) >= 16


def problem_of_fp8(xq, wq, x_scale, w_scale, bias=None, out_dtype=None) -> GemmProblem:
    rowwise = not (x_scale.numel() == 1 and w_scale.numel() == 1)
    out = _TORCH_DTYPES[str(out_dtype)] if out_dtype is not None else "bf16"
    return GemmProblem(xq.shape[0], wq.shape[0], xq.shape[1], "fp8", out,
                       "rowwise" if rowwise else "tensorwise", bias is not None,
                       "e4m3fnuz" if "fnuz" in str(xq.dtype) else "e4m3fn")


def problem_of_gemm(a, b, bias=None) -> GemmProblem:
    dtype = _TORCH_DTYPES[str(a.dtype)]
    return GemmProblem(a.shape[0], b.shape[1], a.shape[1], dtype, dtype, "none", bias is not None, "",
                       b_layout_of(b), native_layout_of(a, b))


class GemmFamily(Family):
    name = "gemm"
    ops = OPS
    problem_type = GemmProblem

    def candidates(self, op, problem, hw):
        for config, e in native_candidates(problem, hw):
            yield "native", config, e
        for config, e in triton_candidates(problem, hw):
            yield "triton", config, e
        if not vendor_available(problem, hw):
            yield "vendor", VENDOR_CONFIG[op], vendor_estimate(problem, hw)

    def absent_reason(self, op, problem, hw, backend):
        if backend == "native":
            return native_refusal(problem, hw) or self.missing_backend_note(op, backend)
        if backend == "vendor":
            return vendor_available(problem, hw) or self.missing_backend_note(op, backend)
        return self.missing_backend_note(op, backend)

    def missing_backend_note(self, op, backend):
        if backend == "native":
            return ("no native kernel of this input type for this chip and layout (native GEMM kernels: "
                    "sm_90a CUTLASS, gfx942/gfx950 MFMA; bf16/fp16 b must be N- or K-contiguous and "
                    "16-byte aligned)")
        if backend == "vendor" and op == FP8_GEMM:
            return "torch._scaled_mm does not take this problem (format, N % 16, or rowwise with non-bf16 out)"
        return ""

    def describe(self, problem):
        return describe(problem)

    def add_arguments(self, parser):
        parser.add_argument("--m", type=int, required=True)
        parser.add_argument("--n", type=int, required=True)
        parser.add_argument("--k", type=int, required=True)
        parser.add_argument("--out-dtype", choices=sorted(OUT_BYTES), default="bf16")
        parser.add_argument("--scaling", choices=("rowwise", "tensorwise"), default="rowwise",
                            help="fp8_gemm only")
        parser.add_argument("--format", choices=FORMATS, help="fp8_gemm only; default: the device's")
        parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="gemm only")
        parser.add_argument("--b-layout", choices=LAYOUTS, default="k_contiguous", help="gemm only")
        parser.add_argument("--bias", action="store_true")

    def problem_from_args(self, op, args: argparse.Namespace):
        if op == FP8_GEMM:
            fmt = args.format or ("e4m3fnuz" if getattr(args, "device", "") in ("MI300X", "MI325X") else "e4m3fn")
            return GemmProblem(args.m, args.n, args.k, "fp8", args.out_dtype, args.scaling, args.bias, fmt)
        return GemmProblem(args.m, args.n, args.k, args.dtype, args.dtype, "none", args.bias, "", args.b_layout)

    def problem_from_call(self, op, *args, **kwargs):
        if op == FP8_GEMM:
            a = inspect.signature(_fp8_wrapper_arguments).bind(*args, **kwargs).arguments
            return problem_of_fp8(**a)
        a = inspect.signature(_gemm_wrapper_arguments).bind(*args, **kwargs).arguments
        return problem_of_gemm(**a)

    def bucket_key(self, op, p):
        """csrc/gemm/gemm_gpu.cpp's key fields: the flags, then size_bucket of M, N, K."""
        sizes = (size_bucket(p.m), size_bucket(p.n), size_bucket(p.k))
        if op == FP8_GEMM:
            return (int(p.fp8_format == "e4m3fnuz"), int(p.scaling == "rowwise"), DTYPE_IDS[p.out_dtype],
                    int(p.has_bias), n_alignment(p.n), *sizes)
        return (DTYPE_IDS[p.input], LAYOUTS.index(p.b_layout), int(p.native_layout), int(vendor_aligned(p)),
                int(p.has_bias), *sizes)

    def problem_from_key(self, op, key):
        if op == FP8_GEMM:
            fnuz, rowwise, out, bias, n_align, mb, nb, kb = key
            # The representative keeps the call's N % 16 and N % 8 (the vendor op needs 16 | N, the
            # native NVIDIA kernels 8 | N); bucket sizes are multiples of 16.
            n = bucket_size(nb) - {2: 0, 1: 8, 0: 4}[n_align]
            return GemmProblem(bucket_size(mb), n, bucket_size(kb), "fp8", DTYPE_NAMES[out],
                               "rowwise" if rowwise else "tensorwise", bool(bias),
                               "e4m3fnuz" if fnuz else "e4m3fn")
        dtype, layout, native, aligned, bias, mb, nb, kb = key
        # An unaligned call's representative has N % 8 == 4: the same bucket, rows not 16-byte multiples.
        return GemmProblem(bucket_size(mb), bucket_size(nb) - (0 if aligned else 4), bucket_size(kb), DTYPE_NAMES[dtype],
                           DTYPE_NAMES[dtype], "none", bool(bias), "", LAYOUTS[layout], bool(native))

    def sample(self, op, rng: random.Random):
        """Recsys training GEMMs: MLP layers (N, K 64-4096) at batch 16-131072, and their
        gradients (the weight gradient's K is the batch)."""
        dims = (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096)
        batch = round(2 ** rng.uniform(4, 17))
        a, b = rng.choice(dims), rng.choice(dims)
        m, n, k = rng.choice(((batch, a, b), (batch, b, a), (a, b, batch)))
        if op == FP8_GEMM:
            return GemmProblem(m, n, k - k % 16 or 16, "fp8", "bf16",
                               rng.choice(("rowwise", "rowwise", "tensorwise")), rng.random() < 0.3)
        return GemmProblem(m, n, k, "bf16", "bf16", "none", rng.random() < 0.3, "",
                           rng.choice(("n_contiguous", "k_contiguous")))


FAMILY = register(GemmFamily())
