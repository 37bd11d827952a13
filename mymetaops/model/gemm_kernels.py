"""The GEMM candidates the model knows: the native kernel tables of cuda/gemm and hip/gemm (mirrors
of `native_gemm_kernels()`, checked against the build in tests/gemm), the Triton configs, and the
per-kernel constants the cost model (mymetaops/model/gemm.py) turns counts into time with.

Tags: [M] fitted to this project's H200 measurements (bench/gemm/calibrate.py refreshes them from
a bench run); [A] assumed (AMD: no device here; new rows before their first measurement).
"""
from __future__ import annotations

from dataclasses import dataclass

from mymetaops.configs import TritonGemmConfig

# gemm.h's GemmInput / GemmSchedule codes.
INPUT_NAMES = {0: "fp8", 1: "bf16", 2: "fp16"}
SCHEDULE_NAMES = {0: "data_parallel", 1: "persistent", 2: "stream_k"}


@dataclass(frozen=True)
class KernelRow:
    """One row of a vendor's native table (gemm.h GemmKernelInfo) and the arch it runs on."""

    name: str
    input: str  # "fp8" | "bf16" | "fp16"
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    schedule: str  # "data_parallel" | "persistent" | "stream_k"
    stages: int
    max_split_k: int
    warps: int
    b_k_major_only: bool
    arch: str  # "sm_90a", "gfx942", "gfx950": the arch whose devices run it
    swap_ab: bool = False  # computes out^T = wq . xq^T: tile_m runs along N, tile_n along M

    def as_native_tuple(self) -> tuple:
        """The row as mymetaops._C._native_gemm_kernels() returns it."""
        inputs = {v: k for k, v in INPUT_NAMES.items()}
        schedules = {v: k for k, v in SCHEDULE_NAMES.items()}
        return (self.name, inputs[self.input], self.tile_m, self.tile_n, self.tile_k, self.cluster_m,
                self.cluster_n, schedules[self.schedule], self.stages, self.max_split_k, self.warps,
                int(self.b_k_major_only), int(self.swap_ab))


def _rows(arch: str, *rows: tuple) -> tuple[KernelRow, ...]:
    """Rows of 12 fields (gemm.h's order), or 13 with swap_ab last."""
    return tuple(KernelRow(*row[:12], arch=arch, swap_ab=bool(row[12:13] and row[12])) for row in rows)


# cuda/gemm/gemm_table.cu (same order: the index is the kernel id). CUTLASS 3.x warp-specialized
# TMA kernels, 12 warps (a producer and two consumer warpgroups); FP8 rows write bf16 and need
# N % 8 == 0 (TMA store of out rows). The split-K rows are the stream-K instances run with a
# fixed split (split 1: plain persistent tiles).
CUDA_KERNELS: tuple[KernelRow, ...] = _rows(
    "sm_90a",
    ("fp8_128x256x128_c2x1_coop", "fp8", 128, 256, 128, 2, 1, "persistent", 4, 1, 12, True),
    ("fp8_256x128x128_c1x2_coop", "fp8", 256, 128, 128, 1, 2, "persistent", 4, 1, 12, True),
    ("fp8_128x128x128_c2x1_pingpong", "fp8", 128, 128, 128, 2, 1, "persistent", 6, 1, 12, True),
    ("fp8_128x128x128_c1x2_streamk", "fp8", 128, 128, 128, 1, 2, "stream_k", 6, 1, 12, True),
    ("fp8_128x128x128_c1x2_splitk", "fp8", 128, 128, 128, 1, 2, "persistent", 6, 16, 12, True),
    ("fp8_64x128x128_pingpong", "fp8", 64, 128, 128, 1, 1, "persistent", 9, 1, 12, True),
    ("fp8_128x64x128_streamk", "fp8", 128, 64, 128, 1, 1, "stream_k", 8, 1, 12, True),
    ("fp8_128x64x128_splitk", "fp8", 128, 64, 128, 1, 1, "persistent", 8, 16, 12, True),
    ("bf16_128x256x64_c2x1_coop", "bf16", 128, 256, 64, 2, 1, "persistent", 4, 1, 12, False),
    ("bf16_128x128x64_pingpong", "bf16", 128, 128, 64, 1, 1, "persistent", 6, 1, 12, False),
    ("fp8_swapped_64x128x128_pingpong", "fp8", 64, 128, 128, 1, 1, "persistent", 9, 1, 12, True, True),
    ("fp8_64x32x256_pingpong", "fp8", 64, 32, 256, 1, 1, "persistent", 9, 1, 12, True),
)
# Rows the model does not offer, and split-K limits below a row's max_split_k, with the measurement
# behind each [M] (H200, 2026-12-01, bench/results/*-gemm.json):
NATIVE_NOT_OFFERED = {
    # CUTLASS's stream-K decomposition of these instances was never the fastest candidate on the
    # 37-shape suite and ran 1.2-2.9x slower than the same instance with a fixed split.
    "fp8_128x128x128_c1x2_streamk": "stream-K measured slower than its split-K form on every suite shape",
    "fp8_128x64x128_streamk": "stream-K measured slower than its split-K form on every suite shape",
}
NATIVE_SPLIT_LIMIT = {
    # Split-K of the 1x2-cluster 128x128 instance did not speed up tall-K problems of 32+ tiles
    # (1024x1024x65536: 276 us at split 1, 273 at 2, 263 at 4); its 128x64 sibling splits well.
    "fp8_128x128x128_c1x2_splitk": 1,
}
# What the native kernels write, by vendor (cuda/gemm: bf16 only; hip/gemm: bf16, fp16, fp32), and
# the N they need: N % 8 == 0 for the TMA store of CUTLASS's epilogue.
NATIVE_FP8_OUT = {"nvidia": ("bf16",), "amd": ("bf16", "fp16", "fp32")}
NATIVE_FP8_N_MULTIPLE = {"nvidia": 8, "amd": 1}
# hip/gemm/fp8_gemm.hip's table; each row runs on the arch it names (the other arch's row is a
# LaunchError there). No native bf16/fp16 GEMM on HIP yet: hipBLASLt and Triton cover it.
HIP_KERNELS: tuple[KernelRow, ...] = (
    _rows("gfx942",
          ("gfx942_fp8_256x128x64", "fp8", 256, 128, 64, 1, 1, "data_parallel", 2, 16, 4, True),
          ("gfx942_fp8_128x128x64", "fp8", 128, 128, 64, 1, 1, "data_parallel", 2, 16, 4, True),
          ("gfx942_fp8_64x128x64", "fp8", 64, 128, 64, 1, 1, "data_parallel", 2, 16, 4, True))
    + _rows("gfx950",
            ("gfx950_fp8_256x128x128", "fp8", 256, 128, 128, 1, 1, "data_parallel", 2, 16, 4, True),
            ("gfx950_fp8_128x128x128", "fp8", 128, 128, 128, 1, 1, "data_parallel", 2, 16, 4, True),
            ("gfx950_fp8_64x128x128", "fp8", 64, 128, 128, 1, 1, "data_parallel", 2, 16, 4, True))
)


def native_table(vendor: str) -> tuple[KernelRow, ...]:
    return CUDA_KERNELS if vendor == "nvidia" else HIP_KERNELS


def native_kernel_name(vendor: str, index: int) -> str:
    return native_table(vendor)[index].name


@dataclass(frozen=True)
class KernelCost:
    """What a kernel sustains: the share of the chip's datasheet matrix rate its mainloop reaches
    on a full tile, the time per tile its mainloop does not hide (pipeline fill, epilogue), and a
    fixed time per call beyond the launch (setup of a persistent grid, clusters, workspace flags)."""

    mma_efficiency: float
    tile_overhead_us: float
    tag: str = "[A]"
    fixed_us: float = 0.0


# Native kernels by name; a row without an entry gets DEFAULT_NATIVE_COST. [M] fitted by
# bench/gemm/calibrate.py to the H200 run of 2026-12-01 (bench/results/*-gemm.json).
NATIVE_COST: dict[str, KernelCost] = {
    "bf16_128x128x64_pingpong": KernelCost(0.964, 0.891, "[M]", 3.39),
    "bf16_128x256x64_c2x1_coop": KernelCost(0.921, 2.242, "[M]", 2.91),
    "fp8_128x128x128_c1x2_splitk": KernelCost(0.717, 4.750, "[M]", 0.00),
    "fp8_128x128x128_c1x2_streamk": KernelCost(0.408, 3.781, "[M]", 0.00),
    "fp8_128x128x128_c2x1_pingpong": KernelCost(0.810, 1.133, "[M]", 4.97),
    "fp8_128x256x128_c2x1_coop": KernelCost(0.923, 3.047, "[M]", 2.75),
    "fp8_128x64x128_splitk": KernelCost(0.663, 1.500, "[M]", 6.34),
    "fp8_128x64x128_streamk": KernelCost(0.411, 1.500, "[M]", 0.00),
    "fp8_256x128x128_c1x2_coop": KernelCost(0.816, 5.852, "[M]", 0.00),
    "fp8_64x128x128_pingpong": KernelCost(0.723, 0.930, "[M]", 2.23),
    # The same instance with A and B exchanged (for N <= 64 at large M), fitted on the third run.
    "fp8_swapped_64x128x128_pingpong": KernelCost(0.721, 0.766, "[M]", 3.43),
    # [A]: the 64x128 sibling's overheads, a lower mainloop rate for wgmma's N = 32 (half the MMA
    # work per A fragment loaded from smem). Run 6 timed it (7.7-8.9 us where 8.0-8.7 was predicted,
    # 14.7 at 16x4096x4096 against 10.3); its refit is in bench/results/*-gemm-calibration.json.
    "fp8_64x32x256_pingpong": KernelCost(0.60, 0.93, "[A]", 2.23),
}
DEFAULT_NATIVE_COST = {"nvidia": KernelCost(0.62, 0.8), "amd": KernelCost(0.50, 1.0)}  # [A]
# Per (vendor, input kind), as TRITON_CONFIGS, and on NVIDIA per FP8 load path (gemm.triton_cost_key:
# "fp8_tma" builds TMA descriptors per call, "fp8" and "16bit" load through pointers): on the H200
# the three fit different constants. AMD [A].
TRITON_COST = {("nvidia", "fp8_tma"): KernelCost(0.702, 1.047, "[M]", 30.00),
               ("nvidia", "fp8"): KernelCost(0.501, 1.484, "[M]", 7.58),
               ("nvidia", "16bit"): KernelCost(0.763, 1.531, "[M]", 8.73),
               ("amd", "fp8"): KernelCost(0.45, 1.2), ("amd", "16bit"): KernelCost(0.45, 1.2)}



def _triton(*rows: tuple) -> tuple[TritonGemmConfig, ...]:
    return tuple(TritonGemmConfig(*row) for row in rows)


# Triton configs by (vendor, input kind "fp8" | "16bit"): (block_m, block_n, block_k, group_m,
# warps, stages, persistent). The same lists as mymetaops/triton/gemm.py's *_CONFIGS_* (the model
# must not import Triton; tests/gemm checks the two agree). Every one cross-compiles for its
# vendor's targets without spills (scripts/check_triton_targets.py).
TRITON_CONFIGS: dict[tuple[str, str], tuple[TritonGemmConfig, ...]] = {
    ("nvidia", "fp8"): _triton((128, 256, 128, 8, 8, 3, 1), (128, 128, 128, 8, 8, 4, 1), (64, 128, 128, 8, 4, 4, 1),
                               (64, 128, 256, 8, 4, 3, 1), (64, 32, 256, 1, 4, 4, 1), (64, 64, 128, 4, 4, 4, 0)),
    ("amd", "fp8"): _triton((256, 128, 128, 8, 8, 2, 1), (128, 128, 128, 8, 4, 2, 1), (64, 128, 128, 8, 4, 2, 1),
                            (32, 64, 256, 8, 4, 2, 1), (16, 64, 256, 1, 4, 2, 1), (64, 64, 128, 4, 4, 2, 0)),
    ("nvidia", "16bit"): _triton((128, 256, 64, 8, 8, 3, 1), (128, 128, 64, 8, 4, 4, 1), (64, 128, 64, 8, 4, 4, 1),
                                 (32, 64, 128, 8, 4, 4, 1), (16, 64, 128, 1, 4, 4, 1), (64, 64, 64, 4, 4, 4, 0)),
    ("amd", "16bit"): _triton((256, 256, 32, 8, 8, 2, 1), (128, 128, 64, 8, 4, 2, 1), (64, 128, 64, 8, 4, 2, 1),
                              (32, 64, 128, 8, 4, 2, 1), (16, 64, 128, 1, 4, 2, 1), (64, 64, 64, 4, 4, 2, 0)),
}
