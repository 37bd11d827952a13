"""The attention family (`hstu_attention`, `jagged_attention` and their backwards): native and
Triton tiles over jagged sequences, costed by the tiles they compute.

The host knows B, max_seq_len N and total_L T, not the lengths (reading them is a sync): the model
takes the mean length m = T / B and lengths spread like uniform ones, so a sequence's causal pairs
average (4/3) m^2 / 2, at most m N / 2. A config (block_m x block_n) computes every tile its
q-blocks touch, the diagonal ones whole:

    tiles   = (pairs + T block_m / 2) / (block_m block_n)   (non-causal: pairs = B (4/3) m^2)
    compute = tiles x 4 block_m block_n D (x 2.5 backward) / (peak x efficiency[config])
    t       = max(compute / SMs, the longest sequence's last block: N / block_n tiles in a row)
              + launches, at least HOST_US (the public op's Python path); candidates tied at
              that floor go to the faster kernel (Estimate.kernel_us)

Native forward kernels (cuda/attention/: TMA + wgmma; hip/attention/: MFMA) are costed the same way
with their own tiles and efficiencies; they run unmasked causal / full attention in bf16 / fp16 at
the head dims NATIVE_KERNELS lists, and `explain` says why they are not offered elsewhere. The
backward's native candidates (NATIVE_BACKWARD, Hopper) are a dK / dV kernel beside Triton's dq,
beside a native dQ kernel, or with dQ fused in (its fp32 buffer's passes costed as bytes). torch
has no jagged HSTU attention; flex_attention compiles per mask and is a benchmark anchor, not a candidate. Tags: [M] measured on this project's H200 (bench/attention/
NOTES.md, 2026-12-02); [A] assumed.
"""
from __future__ import annotations

import argparse
import inspect
import math
import random
from dataclasses import dataclass, replace

from mymetaops.configs import NativeAttentionConfig, TritonAttentionConfig

from . import costs
from .family import Estimate, Family, register
from .hardware import HardwareSpec

HSTU, HSTU_BACKWARD, SOFTMAX, SOFTMAX_BACKWARD = OPS = (
    "hstu_attention", "hstu_attention_backward", "jagged_attention", "jagged_attention_backward")
BACKWARD = {HSTU: HSTU_BACKWARD, SOFTMAX: SOFTMAX_BACKWARD}
DTYPE_IDS = {"bf16": 0, "fp16": 1, "fp32": 2}
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
# Forward candidates on NVIDIA (they compile without spills for D <= 128: scripts/
# check_triton_targets.py), with the share of the bf16 peak each reached on useful FLOPs at B32
# N4096 H4 D128 ([M], the longest shape: little else in its time): hstu / softmax. 64 x 64: run 6
# (grouped grid, tanh sigmoid); 128 x 64: run 1.
NVIDIA_FORWARD = {
    TritonAttentionConfig(64, 64, 4, 3): (435 / 989, 329 / 989),
    TritonAttentionConfig(128, 64, 8, 3): (320 / 989, 333 / 989),
}
# The 64-row tiles spill with HSTU's target / window / contextual masks (Triton 3.8).
MASKED_EXCLUDED = TritonAttentionConfig(64, 64, 4, 3)
# Backward: the kernels' defaults only (the faster sweep tiles spill): [M] 161 / 164 TFLOP/s of
# 2.5x the forward FLOPs at B32 N4096 H4 D128.
BACKWARD_EFFICIENCY = {HSTU_BACKWARD: 161 / 989, SOFTMAX_BACKWARD: 164 / 989}
DEFAULT_EFFICIENCY = 0.25  # [A] AMD, D > 128, fp32: no measurement
# The public wrapper's host path per call, its launches included: [M] forward 50 us through the
# cached Triton launches, backward 280 (fwd+bwd 330 less the forward; the autograd engine's share
# of that is ~155 us, SDPA's fwd+bwd less its forward), bench/attention/NOTES.md run 7; ~40 us for a
# native launch from C++ (run 4, a tiny shape, before the shared part of the path got cheaper).
HOST_US = {"forward": 50.0, "backward": 280.0, "native": 40.0}
KERNEL_DEFAULTS = TritonAttentionConfig()  # the kernels' default_config: backwards, AMD, D > 128, fp32


@dataclass(frozen=True)
class NativeKernel:
    """A row of a vendor's native forward kernels (csrc/include/mymetaops/attention.h), in the build's
    attention_kernel_names() order: what it runs and its tiles."""

    name: str
    ops: tuple[str, ...]
    dims: tuple[int, ...]  # head dims it runs (Dqk = Dv)
    block_m: int
    block_n: int
    efficiency: tuple[float, ...]  # share of the bf16 / fp16 peak on the tiles it computes, per op of `ops`
    withheld: str = ""  # why the model does not offer it although it is built (tests call it directly)
    withheld_ops: tuple[str, ...] = ()  # the ops `withheld` holds for; () = all of `ops`
    # Where it is offered: its block_m x block_n steps per SM at least this multiple of the longest
    # sequence's chain of steps (max_seq_len / block_n): below it the chain and the SMs left idle
    # by too few tiles bound the time, which larger tiles lengthen. The dispatch decides on a
    # bucket's middle problem (B, N, T within ~9%), so the threshold keeps a margin on both sides.
    min_steps_per_chain: float = 0.0
    # Per op of `ops`, the max_seq_len range (lo, hi] where it is offered; () = every length. Where
    # two native tilings run the same head dim, each is offered where it measured faster.
    offered_len: tuple[tuple[int, int], ...] = ()
    # Bytes a (row, head, dim) moves in passes outside the kernel: the fused dQ's fp32 buffer is
    # zeroed (4), read and converted to dtype (4 + 2).
    pass_bytes: int = 0

    def withheld_for(self, op: str) -> str:
        """Why the model does not offer this kernel for op ("" when it does)."""
        return self.withheld if not self.withheld_ops or op in self.withheld_ops else ""


HOPPER_D64_WITHHELD = ("the Hopper D = 64 kernel ran softmax up to 1.3x slower than Triton's tiles on the H200 "
                       "(bench/attention run 15: B512 N256 H4, uniform lengths)")
AMD_WITHHELD = ("the CDNA kernels (hip/attention/) have run only through the HIP-on-CUDA shim, which replaces "
                "their MFMA steps: not offered before they pass on AMD hardware")
# max_seq_len up to which the 64 x 64 tiling is offered instead of 128 x 128 ([M] run 36, H100:
# 1.06-1.29x faster at N = 128-512, 1.76x at N = 64, 0.93-1.04x at N = 1024, 0.76-0.94x from 2048;
# softmax at D = 128 only up to N = 256: 0.95x at N = 512). The dispatch decides on a bucket's middle
# problem (N + 1 in quarter octaves: N = 512's bucket reaches 608, its middle ~558), so the cuts sit
# past the measured lengths' buckets and below N = 1024's (run 37: the cut at 512 sent N = 512 to
# 128 x 128, 1.04x slower). BIG: no upper bound.
SHORT, SHORT_SOFTMAX_D128, BIG = 600, 300, 1 << 62
# The mirror of the native kernels each vendor's build has (checked against _C at run time: the
# model offers them only where the two agree).
NATIVE_KERNELS: dict[str, tuple[NativeKernel, ...]] = {
    # cuda/attention/: persistent, a TMA producer warp and 2 consumer warpgroups of 64 q rows x 128
    # keys, 3 K/V stages, wgmma SS then RS, tiles handed out from a counter, the sequences longest
    # first from 5 q blocks up. [M] H200 run 13 (bench/attention/NOTES.md), launcher: hstu 251 /
    # 134 / 528 / 62 TF, softmax 234 / 133 / 441 / 72 on the four shapes (run 9, index
    # order: 224 / 137 / 442 / 66 and 199 / 121 / 392 / 56; Triton's best tiles in run 9: 223 /
    # 127 / 449 / 61 and 194 / 121 / 317 / 55). Efficiency: the long shape's, hstu / softmax. With
    # no JIT they win wherever they are offered and Triton is not 2x faster (select.JIT_PAYS_OFF),
    # so where they are offered is measured (regret.py): at D = 128 they ran 0.78-1.005x the best
    # Triton tile where each SM had 3.4-9.7 steps per step of the longest sequence's chain (run 9),
    # and since the longest sequences start first (run 13) 0.85-0.97x at 2.1 (B32 N2048 H1, equal
    # lengths), but up to 1.36x slower below 1 (the same, uniform lengths): its chain of 128 x 128
    # steps is twice Triton's. At D = 64 (half the work per tile, still one CTA per SM; efficiency
    # from B16 N4096 H2, equal lengths, run 15) HSTU ran 0.86-0.93x the best Triton tile at 4-25
    # steps per chain step and 1.04x at 1.5, so it is offered from 2 as at D = 128; softmax ran up
    # to 1.3x slower at 7 and is withheld.
    # The 64 x 64 rows (a pipe per consumer warpgroup: its own producer warp, stages and 64-row
    # tiles; three pipes at D = 64, two at D = 128): [M] run 36 (H100, two pipes), kernel times
    # against 128 x 128 on 13 shapes: 1.06-1.76x faster at N <= 512 (HSTU; 1.22x at B512 N256 D64),
    # 0.93-1.04x at N = 1024, 0.76-0.94x from N = 2048 (each pipe reads its own K / V); the third
    # pipe at D = 64 1.00-1.08x (run 39). Efficiency: the 128 x 128 row's scaled by the two kernels'
    # times at B32 N4096 H4 (D = 128 and D = 64) and their computed tiles there (0.96 / 0.91
    # useful). The 16-byte epilogue (run 40) sped every native forward by 1.03-1.08x; the rows were
    # not rescaled (regret 1.023 with them, run 40).
    "nvidia": (
        NativeKernel("hopper_d64_128x128", (HSTU, SOFTMAX), (64,), 128, 128, (417 / 989, 328 / 989),
                     HOPPER_D64_WITHHELD, (SOFTMAX,), min_steps_per_chain=2.0, offered_len=((SHORT, BIG), (SHORT, BIG))),
        NativeKernel("hopper_d128_128x128", (HSTU, SOFTMAX), (128,), 128, 128, (528 / 989, 441 / 989),
                     min_steps_per_chain=2.0, offered_len=((SHORT, BIG), (SHORT_SOFTMAX_D128, BIG))),
        NativeKernel("hopper_d64_64x64", (HSTU, SOFTMAX), (64,), 64, 64, (342 / 989, 267 / 989),
                     offered_len=((0, SHORT), (0, SHORT))),
        NativeKernel("hopper_d128_64x64", (HSTU, SOFTMAX), (128,), 64, 64, (390 / 989, 344 / 989),
                     offered_len=((0, SHORT), (0, SHORT_SOFTMAX_D128))),
    ),
    # hip/attention/attention_fwd.hip: 4 waves x 32 q rows, K / V double-buffered in LDS, MFMA
    # 32x32x8; [A] 0.30 of the peak (no AMD GPU here; Triton's AMD tiles are assumed at 0.25).
    "amd": (
        NativeKernel("cdna_hstu_d64_128x64", (HSTU,), (64,), 128, 64, (0.30,), AMD_WITHHELD),
        NativeKernel("cdna_hstu_d128_128x32", (HSTU,), (128,), 128, 32, (0.30,), AMD_WITHHELD),
        NativeKernel("cdna_softmax_d64_128x64", (SOFTMAX,), (64,), 128, 64, (0.30,), AMD_WITHHELD),
        NativeKernel("cdna_softmax_d128_128x32", (SOFTMAX,), (128,), 128, 32, (0.30,), AMD_WITHHELD),
    ),
}
# The backward's native candidates on Hopper, both with the dK / dV kernel (cuda/attention/dkdv.cu:
# dK / dV per block of 128 keys, Q and dO streamed in 64-row steps, softmax's lse / delta staged in
# shared memory), in NativeAttentionConfig.kernel order: beside Triton's dq, or beside the native dQ
# kernel (dq.cu: the forward's structure, 128 query rows, 64-key steps). Costed as the Triton
# backward (its 64 x 64 default steps) at its measured speed-up: [M] run 22 (H100 SXM, each part a
# kernel, bench/attention/backward_probe.py; NOTES.md), over the Triton backward at six shapes
# (D = 64 and 128, N 256-4096): dK / dV + Triton dq HSTU 0.98-1.07x, softmax 1.49-1.80x at D = 128
# and 1.07-1.17x at D = 64; dK / dV + native dQ HSTU 1.02-1.10x, softmax 1.52-1.88x at D = 128 and
# 1.00-1.19x at D = 64. The factors are the medians (per op; D = 64 softmax gains less).
# The fused row (dkdv_kernel.cuh with kDq: dQ = dS K from the dK / dV loop, bulk reduce-adds into
# fp32) does 5 products where the others do 7: [P] predicted at the dK / dV kernel's rate, 1.5x
# (HSTU) and 2.3x (softmax) the Triton backward, beside its buffer's passes (pass_bytes); [M] runs
# 25-30 (H100) measured it slower than dK / dV + native dQ at every shape (FUSED_WITHHELD), so it
# stays withheld.
FUSED_WITHHELD = ("the fused dK / dV / dQ kernel ran 1.08x (HSTU) and 1.08x (softmax) the time of dK / dV + native dQ "
                  "at B32 N4096 D = 128, 1.21-1.22x at B64 N1024 and 1.09-1.22x at D = 64 on an H100 (bench/attention "
                  "run 30): its buffer's zeroing and conversion and the dQ product in every step cost more than the "
                  "second kernel's recompute; it passes the float64 test")
NATIVE_BACKWARD: dict[str, tuple[NativeKernel, ...]] = {
    "nvidia": (
        NativeKernel("hopper_dkdv_128x64 + triton_dq", (HSTU_BACKWARD, SOFTMAX_BACKWARD), (64, 128), 64, 64,
                     (BACKWARD_EFFICIENCY[HSTU_BACKWARD] * 1.04, BACKWARD_EFFICIENCY[SOFTMAX_BACKWARD] * 1.55)),
        NativeKernel("hopper_dkdv_128x64 + hopper_dq_128x64", (HSTU_BACKWARD, SOFTMAX_BACKWARD), (64, 128), 64, 64,
                     (BACKWARD_EFFICIENCY[HSTU_BACKWARD] * 1.08, BACKWARD_EFFICIENCY[SOFTMAX_BACKWARD] * 1.60)),
        NativeKernel("hopper_dkdv_dq_128x64", (HSTU_BACKWARD, SOFTMAX_BACKWARD), (64, 128), 64, 64,
                     (BACKWARD_EFFICIENCY[HSTU_BACKWARD] * 1.5, BACKWARD_EFFICIENCY[SOFTMAX_BACKWARD] * 2.3),
                     FUSED_WITHHELD, pass_bytes=10),
    ),
}
NATIVE_DQ, NATIVE_FUSED = 1, 2  # the NATIVE_BACKWARD indexes whose dQ is native: a kernel apart, fused
NATIVE_ARCHS = {"nvidia": ("sm_90a",), "amd": ("gfx942", "gfx950")}
NATIVE_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class AttentionProblem:
    op: str
    batch: int
    max_len: int
    total: int
    heads: int
    dqk: int
    dv: int
    dtype: str = "bf16"
    causal: bool = True
    masked: bool = False  # hstu: num_targets, a window or contextual rows

    @property
    def pairs(self) -> float:
        """(q, k) pairs computed per head, from the mean length (the lengths stay on the GPU)."""
        if self.batch == 0 or self.total == 0:
            return 0.0
        mean = self.total / self.batch
        square = min(4.0 / 3.0 * mean * mean, mean * self.max_len)
        return self.batch * square * (0.5 if self.causal else 1.0)

    @property
    def flops(self) -> float:
        per_pair = 2 * (self.dqk + self.dv) * self.heads
        return per_pair * self.pairs * (2.5 if self.op in BACKWARD.values() else 1.0)


def _steps(p: AttentionProblem, block_m: int, block_n: int) -> float:
    """block_m x block_n tiles a config computes on p: the (q, k) pairs, the diagonal ones whole."""
    waste = p.total * block_m / 2 * p.heads if p.causal else 0.0
    return (p.pairs * p.heads + waste) / (block_m * block_n)


def _estimate(p: AttentionProblem, hw: HardwareSpec, c: TritonAttentionConfig, efficiency: float) -> Estimate:
    backward = p.op in BACKWARD.values()
    native = isinstance(c, NativeAttentionConfig)
    if backward:  # Triton's dq (and preprocess) beside a native dK / dV: the Triton backward's host path
        launch, host = 4 * costs.launch_us(hw, "triton"), HOST_US["backward"]
    elif native:  # one launch of the checks, one of the kernel, from C++
        launch, host = 2 * costs.launch_us(hw, "native"), HOST_US["native"]
    else:  # + the value checks
        launch = (4 if backward else 2) * costs.launch_us(hw, "triton")
        host = HOST_US["backward" if backward else "forward"]
    if p.pairs == 0:
        return Estimate(host + launch, "launch", "no rows", 1.0, 0, 1)
    rate = hw.peak_tflops[p.dtype] * 1e6 * efficiency  # FLOP/us
    if native:
        row = (NATIVE_BACKWARD if backward else NATIVE_KERNELS)[hw.vendor][c.kernel]
        block_m, block_n = row.block_m, row.block_n
    else:
        block_m, block_n = (c.block_m, c.block_n) if not c.kernel_defaults else (64, 64)
    tile_flops = 2 * (p.dqk + p.dv) * (2.5 if backward else 1.0)
    computed = _steps(p, block_m, block_n) * block_m * block_n  # (q, k) pairs, the diagonal tiles whole
    compute = computed * tile_flops / rate
    chain = math.ceil(p.max_len / block_n) * block_m * block_n * tile_flops / (rate / hw.sm_count)
    moved = p.total * p.heads * (2 * p.dqk + 2 * p.dv) * (2 if backward else 1) * 2  # q, k, v, out (+ grads)
    bytes_us = moved / (hw.achievable_hbm_tbps * 1e6)
    body = max(compute, chain, bytes_us)
    passes = p.total * p.heads * p.dqk * row.pass_bytes / (hw.achievable_hbm_tbps * 1e6) if native else 0.0
    time = launch + body + passes
    bound = "compute" if body == compute else "memory" if body == bytes_us else "latency"
    if host > time:
        bound = "launch"
    detail = (f"{'native' if native else 'triton'} {c}: {computed / (block_m * block_n):.0f} tiles at "
              f"{efficiency:.0%} of the peak, longest sequence {chain:.1f} us; host {host:.0f} us")
    # Under the host floor the candidates tie for an eager caller; the faster kernel still wins
    # where the calls are captured in a CUDA graph, so kernel_us breaks the tie.
    return Estimate(max(time, host), bound, detail, 1.0, 0, 1, time)


def _row_refusal(row: NativeKernel, op: str, p: AttentionProblem, hw: HardwareSpec) -> str:
    """Why the model does not offer this native forward row for p, which it runs ("" when it does)."""
    if row.withheld_for(op):
        return row.withheld_for(op)
    if row.offered_len:
        lo, hi = row.offered_len[row.ops.index(op)]
        if not lo < p.max_len <= hi:
            return (f"{row.name} is offered for max_seq_len in ({lo}, {hi}], where it measured faster than the "
                    f"other tiling of D = {p.dqk} (bench/attention run 36)")
    steps = _steps(p, row.block_m, row.block_n) / hw.sm_count
    chain = p.max_len / row.block_n
    if steps < row.min_steps_per_chain * chain:
        return (f"{row.name} would run {steps:.1f} steps of {row.block_m} x {row.block_n} per SM against a "
                f"chain of {chain:.1f} for the longest sequence (below {row.min_steps_per_chain:g}x it: few or "
                f"dominant long sequences, where Triton's smaller tiles are faster)")
    return ""


def _hstu_arguments(q, k, v, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None, max_attn_len=0,
                    contextual_seq_len=0, *, validate=False):
    """mymetaops.hstu_attention."""


def _softmax_arguments(q, k, v, seq_offsets, max_seq_len, causal=True, scale=None, *, validate=False):
    """mymetaops.jagged_attention."""


_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32",
                 "torch.float64": "fp32"}


def problem_of(op: str, q, v, seq_offsets, max_seq_len: int, causal: bool, masked: bool) -> AttentionProblem:
    return AttentionProblem(op, seq_offsets.shape[0] - 1, int(max_seq_len), q.shape[0], q.shape[1], q.shape[2],
                            v.shape[2], _TORCH_DTYPES.get(str(q.dtype), "fp32"), bool(causal), bool(masked))


def bucket_key(heads: int, dqk: int, dv: int, dtype_id: int, causal: bool, masked: bool, batch: int, max_len: int,
               total: int) -> tuple:
    """A problem's bucket: quarter octaves of B + 1, N + 1 and T + 1; the head shape, dtype and
    masks exactly. From the fields, so the per-call path needs no AttentionProblem."""
    return (heads, dqk, dv, dtype_id, int(causal), int(masked), math.floor(4 * math.log2(batch + 1)),
            math.floor(4 * math.log2(max_len + 1)), math.floor(4 * math.log2(total + 1)))


def _platform_refusal(subject: str, plural: bool, op: str, p: AttentionProblem, hw: HardwareSpec) -> str:
    """What every native attention kernel, forward or backward, needs of the device and problem:
    its arch, bf16 / fp16, and HSTU unmasked ("" when p has it)."""
    be, take = ("are", "take") if plural else ("is", "takes")
    if hw.arch not in NATIVE_ARCHS[hw.vendor]:
        return f"{subject} {be} built for {', '.join(NATIVE_ARCHS[hw.vendor])}, not {hw.arch}"
    if p.dtype not in NATIVE_DTYPES:
        return f"{subject} {take} bf16 / fp16, not {p.dtype}"
    if op in (HSTU, HSTU_BACKWARD) and p.masked:
        return "HSTU's target / window / contextual masks run on Triton only"
    return ""


class AttentionFamily(Family):
    name = "attention"
    ops = OPS
    problem_type = AttentionProblem

    def candidates(self, op, p, hw):
        yield from self.native_candidates(op, p, hw)
        yield from self.triton_candidates(op, p, hw)

    def native_refusal(self, op, p, hw) -> str:
        """Why no native kernel runs p on hw ("" when one does)."""
        kernels = NATIVE_KERNELS.get(hw.vendor, ())
        if op in BACKWARD.values():
            return self.native_backward_refusal(op, p, hw)
        if not kernels:
            return f"no native attention kernel is built for {hw.vendor}"
        if all(k.withheld_for(op) for k in kernels):
            return kernels[0].withheld_for(op)
        if why := _platform_refusal("the native attention kernels", True, op, p, hw):
            return why
        if p.dqk != p.dv or not any(op in k.ops and p.dqk in k.dims for k in kernels):
            dims = sorted({d for k in kernels if op in k.ops for d in k.dims})
            return f"the native kernels run Dqk = Dv in {dims}, not Dqk {p.dqk} / Dv {p.dv}"
        reasons = [_row_refusal(k, op, p, hw) for k in kernels if op in k.ops and p.dqk in k.dims]
        return "" if "" in reasons else reasons[0]  # the first row's reason where none is offered

    def native_backward_refusal(self, op, p, hw) -> str:
        rows = NATIVE_BACKWARD.get(hw.vendor)
        if not rows:
            return f"the backward runs on Triton only on {hw.vendor} (no native dK / dV kernel yet)"
        if why := _platform_refusal("the native dK / dV kernel", False, op, p, hw):
            return why
        if p.dqk != p.dv or p.dqk not in rows[0].dims:
            return f"the native dK / dV kernel runs Dqk = Dv in {list(rows[0].dims)}, not Dqk {p.dqk} / Dv {p.dv}"
        return ""

    def native_candidates(self, op, p, hw):
        if self.native_refusal(op, p, hw):
            return
        if op in BACKWARD.values():
            for index, row in enumerate(NATIVE_BACKWARD[hw.vendor]):
                if not row.withheld_for(op):
                    c = NativeAttentionConfig(index, row.name)
                    yield "native", c, _estimate(p, hw, c, row.efficiency[row.ops.index(op)])
            return
        for index, k in enumerate(NATIVE_KERNELS[hw.vendor]):
            if op in k.ops and p.dqk in k.dims and not _row_refusal(k, op, p, hw):
                c = NativeAttentionConfig(index, k.name)
                yield "native", c, _estimate(p, hw, c, k.efficiency[k.ops.index(op)])

    def triton_candidates(self, op, p, hw):
        backward = op in BACKWARD.values()
        if hw.vendor != "nvidia" or max(p.dqk, p.dv) > 128 or p.dtype == "fp32" or backward:
            efficiency = BACKWARD_EFFICIENCY.get(op, DEFAULT_EFFICIENCY) if hw.vendor == "nvidia" else \
                DEFAULT_EFFICIENCY
            yield "triton", KERNEL_DEFAULTS, _estimate(p, hw, KERNEL_DEFAULTS, efficiency)
            return
        for c, (hstu, softmax) in NVIDIA_FORWARD.items():
            if op == HSTU and p.masked and c == MASKED_EXCLUDED:
                continue
            yield "triton", c, _estimate(p, hw, c, hstu if op == HSTU else softmax)

    def absent_reason(self, op, p, hw, backend):
        if backend == "native":
            return self.native_refusal(op, p, hw) + ": Triton runs it"
        return self.missing_backend_note(op, backend)

    def missing_backend_note(self, op, backend):
        if backend == "vendor":
            return "torch has no jagged attention of these semantics (flex_attention is a benchmark anchor only)"
        return ""

    def describe(self, p):
        return (f"{p.op}: B {p.batch}, max_seq_len {p.max_len}, total_L {p.total}, H {p.heads}, Dqk {p.dqk}, "
                f"Dv {p.dv}, {p.dtype}, {'causal' if p.causal else 'full'}{', masked' if p.masked else ''}: "
                f"{p.flops / 1e9:.2f} GFLOP (from the mean length)")

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, required=True)
        parser.add_argument("--max-length", type=int, required=True)
        parser.add_argument("--total", type=int, required=True)
        parser.add_argument("--heads", type=int, default=4)
        parser.add_argument("--dim", type=int, default=128)
        parser.add_argument("--dtype", choices=sorted(DTYPE_IDS), default="bf16")
        parser.add_argument("--full", action="store_true", help="non-causal")
        parser.add_argument("--masked", action="store_true", help="hstu: targets, window or contextual rows")

    def problem_from_args(self, op, args: argparse.Namespace):
        return AttentionProblem(op, args.batch, args.max_length, args.total, args.heads, args.dim, args.dim,
                                args.dtype, not args.full, args.masked)

    def problem_from_call(self, op, *args, **kwargs):
        bound = inspect.signature(_hstu_arguments if op == HSTU else _softmax_arguments).bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        masked = op == HSTU and (a["num_targets"] is not None or a["max_attn_len"] > 0 or a["contextual_seq_len"] > 0)
        return problem_of(op, a["q"], a["v"], a["seq_offsets"], a["max_seq_len"], a["causal"], masked)

    def backward_ops(self, op, p):
        return [(BACKWARD[op], replace(p, op=BACKWARD[op]))] if op in BACKWARD else []

    def bucket_key(self, op, p):
        return bucket_key(p.heads, p.dqk, p.dv, DTYPE_IDS[p.dtype], p.causal, p.masked, p.batch, p.max_len, p.total)

    def problem_from_key(self, op, key):
        heads, dqk, dv, dtype, causal, masked, bb, nb, tb = key

        def mid(b):
            return max(0, round(2 ** ((b + 0.5) / 4)) - 1)
        return AttentionProblem(op, mid(bb), mid(nb), mid(tb), heads, dqk, dv, DTYPE_NAMES[dtype], bool(causal),
                                bool(masked))

    def sample(self, op, rng: random.Random):
        batch, n = rng.choice((32, 64, 256, 512)), rng.choice((256, 512, 1024, 4096))
        return AttentionProblem(op, batch, n, round(batch * n / 2), rng.choice((1, 2, 4)), rng.choice((64, 128)),
                                rng.choice((64, 128)), "bf16", True, op == HSTU and rng.random() < 0.3)


FAMILY = register(AttentionFamily())
