"""The embedding_bag family: its problem, buckets, and the cost model of its candidates --
cuda/embedding_bag.cu, hip/embedding_bag.hip, mymetaops/triton/embedding_bag.py and, for the
forward, torch.nn.functional.embedding_bag. Count first (bytes, random accesses, instructions, blocks,
latency chains), then turn the counts into time with the device's bandwidths, access rate,
latency and issue rate.

Every kernel is a random row gather. A work item (a bag; in the backward, a run of one row in the
sorted plan) walks its rows in steps; a step loads its indices, then the rows they name: two
dependent round trips. So speed is memory-level parallelism, Little's law with queueing:
    throughput = bytes in flight / loaded latency,  loaded = unloaded * (1 + K * rho / (1 - rho)),
rho being the fraction of the roofline bandwidth in use (solved in closed form: a smooth knee).
HBM also caps random *accesses*, one per gathered row: rows of 64-128 B are access-bound before
byte-bound. (Column chunks of a row cost nothing extra in the forward and backward; in the psw
backward, which fetches them back to back inside a step, each chunk under a cache line is an
access of its own.) Lines written at random stall the bus (write turnaround) on top of
everything else, and launching a block costs SM time (it matters for grids of tiny blocks):
    t = launch + (t_bytes^P + t_accesses^P + t_issue^P + t_blocks^P)^(1/P) + t_random_writes
Items flow through the resident slots (occupancy from registers), but no faster than whole waves
of latency chains. (The shared pieces -- utilization, waves, occupancy, overlap -- are in costs.py.)
Tags: [M] measured on this project's H200, 2026-11, with torch tensors (every native config and
~40 Triton configs on the four benchmark shapes, 16 calibration and validation shapes, forward
and both backwards); [D] datasheet, compiler or ISA fact; [A] assumed.
"""
from __future__ import annotations

import argparse
import inspect
import math
import random
from dataclasses import dataclass, replace

from mymetaops.configs import NativeEmbeddingBagConfig, TorchEmbeddingBagConfig, TritonEmbeddingBagConfig

from . import costs
from .family import Estimate, Family, register
from .hardware import HardwareSpec

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
INDEX_BYTES = {"int32": 4, "int64": 8}
OPS = ("embedding_bag", "embedding_bag_backward", "embedding_bag_per_sample_weights_backward")
FORWARD, BACKWARD, PSW_BACKWARD = OPS

# --- native kernels ------------------------------------------------------------------------------
MAX_BLOCK_THREADS = 1024  # [D] the kernels are built for 1024-thread blocks: it caps registers
NATIVE_BLOCK_THREADS = 256  # [M] 128 / 256 / 512 ran within 1-2% of each other
UNROLLS = (1, 2, 4, 8)
# [M] ptxas -v sm_90a: registers ~= base + held + unroll * (vec / 4 + per row), per op (per row:
# 64-bit address, scale, predicate; + the row's dot product in the psw backward).
NATIVE_REGISTERS = {FORWARD: (28, 4), BACKWARD: (22, 2), PSW_BACKWARD: (28, 5)}
NATIVE_STEP_INSTR = 12  # [A] warp instructions per step: loop, bounds, index loads, compares
NATIVE_ROW_INSTR = 8  # [A] per unrolled row: address, predicate, load, scale
INSTR_PER_ELEMENT = {4: 1.0, 2: 1.5}  # [A] an FMA per element, + a conversion for 16-bit types
# --- Triton kernels ------------------------------------------------------------------------------
TRITON_BLOCK_L = (4, 8, 16, 32)
TRITON_MAX_BLOCK_D = 512  # the kernel allows 1024; wider slices only add registers
TRITON_MAX_TILE = 16384  # [D] kernel limit on block_l * block_d
TRITON_ELEMS_PER_THREAD = (8, 64)  # [M] fewer never won on the H200; [A] more spill
TRITON_BASE_REGISTERS = 24  # [A] program ids, bounds, base pointers
TRITON_LOAD_INSTR = 4  # [A] per vector load and thread: 64-bit address and mask
TRITON_PROGRAM_INSTR = 150  # [M] warp instructions per program and warp (fitted, backward)
TRITON_STEP_INSTR = 250  # [M] per step and warp: index load, 64-bit addresses, masks, reductions
# [M] What the counts miss (layout conversions, the tile reduction each step), one factor per
# num_warps: 2 warps ran 1.0-2.3x (median 1.3x) slower than 1; 4 and 8 warps 2-8x: not offered.
TRITON_SLOWDOWN = {1: 1.1, 2: 1.45}
# [M] The forward on the H200 benchmark shapes (bench/results/2026-11-30-*, every candidate timed
# after a warm-up pass, in shuffled order): 1 warp ran at 0.80-0.84x and 2 warps at 0.55-0.73x of
# the times the factors above predict; its [BLOCK_L, BLOCK_D] tile keeps more rows in flight than
# the counts credit. Backward factors stay as above (not re-measured).
TRITON_FORWARD_SLOWDOWN = {1: 0.9, 2: 0.95}
# --- torch glue of the backward (the same for every backend) ------------------------------------
SORT_BITS_PER_PASS = 8  # [D] CUB onesweep radix sort over all key bits (torch.sort)
# [M] torch.sort of 0.66M / 1.64M / 2.1M int64 keys took 161 / 268 / 317 us: a fixed cost, and its
# passes at a fraction of the copy bandwidth.
SORT_FIXED_US = 90.0
SORT_BANDWIDTH_FRACTION = 0.55
# The weight backward splits a row's run of lookups into interleaved sub-runs past this mean length
# (csrc/embedding_bag/embedding_bag_gpu.cpp, the same rule): partial sums of at most
# SPLIT_SCRATCH_BYTES, reduced after. [M] H200: a 3-row table with 655K lookups took 36 ms unsplit.
RUN_TARGET = 32
SPLIT_SCRATCH_BYTES = 1 << 26
# --- the vendor op: torch.nn.functional.embedding_bag (forward only) ----------------------------
# [M] H200, torch 2.11, uniform random rows, tables of 0.5-5 GB: (10M rows, D128, 65536 bags of 32)
# fp32 0.613 ms, bf16 0.519 ms; (20M, D64, 131072 x 16) fp16 0.303 ms; (1M, D256, 16384 x 100) fp32
# 0.885 ms: 440-520 G gathered elements/s whatever the bytes, ~1.8 per SM per clock (132 SMs at
# 1.98 GHz). [A] The same per SM/CU and clock on other devices.
VENDOR_ELEMENTS_PER_SM_CLOCK = 1.8
# [A] Its kernel walks a bag one row at a time: each step loads an index, then the row it names,
# so a bag is a chain of 2 round trips per row; bags run a warp each, a wave of them at a time.
VENDOR_ROUND_TRIPS_PER_ROW = 2
VENDOR_FORWARD = TorchEmbeddingBagConfig()


@dataclass(frozen=True)
class EmbeddingBagProblem:
    num_rows: int
    dim: int
    num_bags: int
    num_indices: int
    weight_dtype: str = "fp32"  # "fp32" | "fp16" | "bf16"
    index_dtype: str = "int64"  # "int32" | "int64"
    mode: str = "sum"  # "sum" | "mean"
    has_per_sample_weights: bool = False
    align_bytes: int = 16  # largest power of two <= 16 dividing row bytes, row stride and pointers

    def __post_init__(self) -> None:
        if self.weight_dtype not in ELEMENT_BYTES or self.index_dtype not in INDEX_BYTES:
            raise ValueError(f"unsupported dtypes {self.weight_dtype}/{self.index_dtype}")
        if self.mode not in ("sum", "mean"):
            raise ValueError(f"mode must be 'sum' or 'mean', got {self.mode!r}")
        if min(self.num_rows, self.dim, self.num_bags, self.num_indices) < 0:
            raise ValueError("sizes must be non-negative")
        if self.align_bytes not in (1, 2, 4, 8, 16):
            raise ValueError(f"align_bytes must be a power of two <= 16, got {self.align_bytes}")

    @property
    def elt(self) -> int:
        return ELEMENT_BYTES[self.weight_dtype]

    @property
    def row_bytes(self) -> int:
        return self.dim * self.elt


def describe(p: EmbeddingBagProblem) -> str:
    per_bag = p.num_indices / p.num_bags if p.num_bags else 0.0
    extras = ", per-sample weights" if p.has_per_sample_weights else ""
    return (f"{p.num_rows} rows x {p.dim} {p.weight_dtype}, {p.num_bags} bags, {p.num_indices} "
            f"{p.index_dtype} indices ({per_bag:.1f}/bag), {p.mode}{extras}, {p.align_bytes}-byte aligned")


# --- counting: what an op moves, whatever the kernel ---------------------------------------------

def row_split(num_indices: int, num_rows: int, row_bytes: int) -> int:
    """Sub-runs per row of the weight backward: a power of two (the C++ glue's rule)."""
    if num_rows == 0 or row_bytes == 0 or num_indices <= num_rows * RUN_TARGET:
        return 1
    want = -(-num_indices // (num_rows * RUN_TARGET))
    cap = SPLIT_SCRATCH_BYTES // (num_rows * row_bytes)
    split = 1
    while split < want and split * 2 <= cap:
        split *= 2
    return split


class Work:
    """One op on one device, counted once; the per-config estimates read it."""

    def __init__(self, op: str, p: EmbeddingBagProblem, hw: HardwareSpec):
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        self.op, self.p, self.hw = op, p, hw
        self.elt, self.row_bytes = p.elt, p.row_bytes
        ib, n, b = INDEX_BYTES[p.index_dtype], p.num_indices, p.num_bags
        fetch = costs.fetch_bytes(p.row_bytes, p.align_bytes, hw.sector_bytes) if p.dim else 0.0
        self.glue_us, self.glue = 0.0, ""
        self.random_writes = 0.0  # cache lines written at random places
        if op == BACKWARD:
            self.split = row_split(n, p.num_rows, p.row_bytes)
            distinct = costs.expected_distinct(p.num_rows * self.split, n)
            self.units, self.active, self.rows = n, distinct, (n / distinct if distinct else 0.0)
            self.hit = costs.hit_fraction(hw, b * p.row_bytes)  # grad_output rows are re-read
            scales = 4 if p.mode == "mean" or p.has_per_sample_weights else 0
            self.step_elem = 8  # sorted bag ids
            stream, written = n * (ib + 8 + scales), distinct * p.row_bytes
            self.random_writes = distinct * -(-p.row_bytes // costs.CACHE_LINE_BYTES)
            self._glue(n, scales)
        else:
            self.units, self.active, self.rows = b, b, (n / b if b else 0.0)
            self.hit = costs.hit_fraction(hw, p.num_rows * p.row_bytes)
            self.step_elem = ib
            stream = (b + 1) * ib + n * ib  # offsets + indices
            if op == FORWARD:
                written = b * p.row_bytes
                stream += n * p.elt if p.has_per_sample_weights else 0
            else:  # the grad rows, read once per bag; a dot product per lookup written
                stream, written = stream + b * p.row_bytes, n * p.elt
        gather = self.active * self.rows * fetch
        self.cache_bytes = gather * self.hit
        self.dram_bytes = gather - self.cache_bytes + stream + written
        # Every byte crosses the last-level cache; DRAM bytes also cross HBM.
        self.roofline_us = max(self.dram_bytes / (hw.achievable_hbm_tbps * costs.GATHER_EFFICIENCY),
                               (self.dram_bytes + self.cache_bytes) / hw.llc_tbps) / 1e6
        self.row_ns = self.hit * hw.llc_latency_ns + (1.0 - self.hit) * hw.mem_latency_ns
        self.active_fraction = self.active / self.units if self.units else 0.0
        # The same for every config: hoisted out of the per-config work.
        self.us_per_instr = costs.us_per_warp_instruction(hw)
        self.access_us = self.active * self.rows * (1.0 - self.hit) / hw.dram_access_rate_g * 1e-3
        self.write_us = self.random_writes / hw.dram_access_rate_g * 1e-3
        self.us_per_block = costs.us_per_block(hw)
        self.all_bytes = self.dram_bytes + self.cache_bytes
        self.moved = (f"{gather / 1e6:.0f} MB gathered ({self.hit:.0%} cached) + "
                      f"{(stream + written) / 1e6:.0f} MB streamed")

    def _glue(self, n: int, scales: int) -> None:
        """torch work of every backend's backward: zero the dense grad, sort the lookups by row."""
        p, hw = self.p, self.hw
        bw = hw.achievable_hbm_tbps * 1e6  # bytes per us
        sub_rows = p.num_rows * self.split
        zero_bytes = sub_rows * p.row_bytes
        zero_us = zero_bytes / bw + hw.launch_overhead_us
        if self.split > 1:  # partial sums read back, the gradient written
            zero_us += (zero_bytes + p.num_rows * p.row_bytes) / bw + hw.launch_overhead_us
        key_bytes = 4 if sub_rows < 2**31 - 2 else 8  # the glue's sort keys
        passes = math.ceil(key_bytes * 8 / SORT_BITS_PER_PASS)
        # Each pass reads and writes keys + int64 positions; then bags (and scales) are permuted.
        sort_us = (SORT_FIXED_US + passes * 2 * n * (key_bytes + 8) / (bw * SORT_BANDWIDTH_FRACTION)
                   + n * (16 + 2 * scales) / bw)
        self.glue_us = zero_us + sort_us
        split = f", rows split in {self.split}" if self.split > 1 else ""
        self.glue = (f"; + glue {self.glue_us:.0f} us (zero-fill {zero_bytes / 1e9:.2f} GB {zero_us:.0f} us{split}, "
                     f"sort of {n} keys {sort_us:.0f} us)")

    def steps(self, per_step: int) -> float:
        """Row-loading steps of an active item walking its rows `per_step` at a time. Backward
        runs have random lengths: on average their last step is half used."""
        if self.op == BACKWARD:
            return self.rows / per_step + (per_step - 1) / (2 * per_step)
        return float(math.ceil(self.rows / per_step))

    def estimate(self, registers: int, resident: float, chain_ns: float, warp_instr: float, blocks: float,
                 pieces: int, accesses_per_row: int, launch_us: float, slowdown: float,
                 occupancy: str) -> Estimate:
        """Time of one launch: `resident` active items at once, each a `chain_ns` dependent chain."""
        active = self.active
        if active <= 0 or self.roofline_us <= 0 or resident <= 0:
            return Estimate(launch_us + self.glue_us, "launch", "nothing to gather" + self.glue, math.inf,
                            registers, pieces)
        bytes_us, margin = costs.flow_us(active, resident, self.roofline_us, chain_ns)
        issue_us = warp_instr * self.us_per_instr
        access_us = self.access_us * accesses_per_row
        block_us = blocks * self.us_per_block
        body = (costs.overlap(bytes_us, access_us, issue_us, block_us) + self.write_us) * slowdown
        bound = costs.bound_of(launch_us, body, max(issue_us, block_us), bytes_us, margin, access_us)
        detail = (f"{self.moved} at {self.all_bytes / body * 1e-6:.2f} TB/s; {occupancy}; "
                  f"in flight {margin:.1f}x the need{self.glue}")
        return Estimate(launch_us + body + self.glue_us, bound, detail, margin, registers, pieces)


# --- native kernels ------------------------------------------------------------------------------

def native_registers(op: str, p: EmbeddingBagProblem, hw: HardwareSpec, c: NativeEmbeddingBagConfig) -> int | None:
    """Registers per thread, or None where the kernel would spill: 1024-thread blocks cap them
    (64 on NVIDIA, 128 VGPRs on CDNA); one granule over the estimate is within its error."""
    words = c.vec_bytes // 4 or 1
    base, per_row = NATIVE_REGISTERS[op]
    held = words if op == PSW_BACKWARD else c.vec_bytes // p.elt  # grad slice / fp32 accumulators
    need = base + held + c.unroll * (words + per_row)
    cap = hw.registers_per_sm // MAX_BLOCK_THREADS
    return None if need > cap + costs.REGISTER_GRANULE else min(costs.round_registers(need), cap)


def native_configs(op: str, p: EmbeddingBagProblem, hw: HardwareSpec) -> list[tuple[NativeEmbeddingBagConfig, int]]:
    """(config, registers): the widest legal vector; lanes from 1 to the warp size except
    pointless extremes (pieces under 1/4 of the row only add steps and instructions: never faster
    on the H200 [M] -- but a full warp is kept for long rows; lanes beyond twice the row idle);
    no unroll that would spill."""
    vec = min(16, p.align_bytes)
    if vec < p.elt:  # the native kernels need vec_bytes >= the element size
        return []
    out = []
    lanes = 1
    while lanes <= hw.warp_size:
        # A whole warp/wavefront per bag is always offered: the kernels take any row length.
        useful = lanes * vec * 4 >= p.row_bytes or lanes == hw.warp_size
        if useful and lanes * vec <= 2 * max(p.row_bytes, vec):
            for unroll in UNROLLS:
                c = NativeEmbeddingBagConfig(vec, lanes, unroll, NATIVE_BLOCK_THREADS)
                regs = native_registers(op, p, hw, c)
                if regs is not None:
                    out.append((c, regs))
        lanes *= 2
    return out


def native_estimate(w: Work, c: NativeEmbeddingBagConfig, regs: int) -> Estimate:
    hw = w.hw
    blocks = costs.resident_blocks(hw, c.block_threads, regs) * hw.sm_count
    piece = c.lanes_per_bag * c.vec_bytes
    chunks = max(1, -(-w.row_bytes // piece))
    # A step's indices miss to DRAM once per sector of them; later column chunks find them cached.
    index_ns = min(1.0, c.unroll * w.step_elem / hw.sector_bytes) * hw.mem_latency_ns
    if w.op == PSW_BACKWARD:  # column chunks loop inside each step
        steps, step_ns = w.steps(c.unroll), index_ns + chunks * w.row_ns
    else:
        steps, step_ns = w.steps(c.unroll) * chunks, index_ns / chunks + w.row_ns
    row_instr = NATIVE_ROW_INSTR + c.vec_bytes // w.elt * INSTR_PER_ELEMENT[w.elt]
    if w.op == PSW_BACKWARD:  # butterfly sum of each row's dot product
        row_instr += 2 * math.log2(c.lanes_per_bag)
    groups_per_warp = max(1, hw.warp_size // c.lanes_per_bag)  # narrow groups share instructions
    return w.estimate(
        regs, costs.active_resident(blocks, c.block_threads // c.lanes_per_bag, w.active_fraction),
        hw.mem_latency_ns + steps * step_ns,  # chain: the offsets / run-start load, then the steps
        w.active * steps * (NATIVE_STEP_INSTR + c.unroll * row_instr) / groups_per_warp,
        -(-w.units // (c.block_threads // c.lanes_per_bag)), chunks,
        chunks if w.op == PSW_BACKWARD and piece < costs.CACHE_LINE_BYTES else 1,
        costs.launch_us(hw, "native"), 1.0,
        f"{blocks // hw.sm_count * c.block_threads // hw.warp_size} warps/SM ({regs} regs), "
        f"{min(piece, w.row_bytes)} B pieces")


# --- Triton kernels ------------------------------------------------------------------------------

def triton_vector_bytes(p: EmbeddingBagProblem) -> int:
    """Triton vectorizes a row access only when it knows the row stride (the dim of a contiguous
    table) is a multiple of 16 elements and the base 16-byte aligned [D: its divisibility hints]."""
    return 16 if p.dim % 16 == 0 and p.align_bytes == 16 else ELEMENT_BYTES[p.weight_dtype]


def triton_registers(p: EmbeddingBagProblem, hw: HardwareSpec, c: TritonEmbeddingBagConfig) -> int:
    per_thread = c.block_l * c.block_d / (c.num_warps * hw.warp_size)
    elt = ELEMENT_BYTES[p.weight_dtype]
    tile = per_thread * (elt / 4 + (elt < 4))  # loaded words (+ their fp32 copies)
    pointers = 2 * per_thread * elt / triton_vector_bytes(p)  # a 64-bit address per vector
    return min(costs.round_registers(TRITON_BASE_REGISTERS + tile + pointers), hw.max_registers_per_thread)


def triton_configs(p: EmbeddingBagProblem, hw: HardwareSpec) -> list[TritonEmbeddingBagConfig]:
    """Whole-row slices and half-row ones (twice the programs), each BLOCK_L x num_warps whose
    threads hold a sensible share of the tile."""
    full = max(16, min(TRITON_MAX_BLOCK_D, 1 << (p.dim - 1).bit_length()))
    out = []
    for bd in sorted({full, max(16, full // 2)}):
        for bl in TRITON_BLOCK_L:
            for nw in TRITON_SLOWDOWN:
                low, high = TRITON_ELEMS_PER_THREAD
                if bl * bd <= TRITON_MAX_TILE and low <= bl * bd / (nw * hw.warp_size) <= high:
                    out.append(TritonEmbeddingBagConfig(bl, bd, nw))
    return out


def triton_estimate(w: Work, c: TritonEmbeddingBagConfig) -> Estimate:
    p, hw = w.p, w.hw
    regs = triton_registers(p, hw, c)
    blocks = costs.resident_blocks(hw, c.num_warps * hw.warp_size, regs) * hw.sm_count
    d_chunks = max(1, -(-p.dim // c.block_d))
    index_ns = min(1.0, c.block_l * w.step_elem / hw.sector_bytes) * hw.mem_latency_ns
    if w.op == PSW_BACKWARD:  # one program per bag loops over the columns inside each step
        slices, steps = 1, w.steps(c.block_l) * d_chunks
        step_ns = index_ns / d_chunks + w.row_ns
    else:  # one program per (item, column slice)
        slices, steps = d_chunks, w.steps(c.block_l)
        step_ns = index_ns + w.row_ns
    per_thread = c.block_l * c.block_d / (c.num_warps * hw.warp_size)
    loads = per_thread * w.elt / triton_vector_bytes(p)
    step_instr = TRITON_STEP_INSTR + per_thread * INSTR_PER_ELEMENT[w.elt] + loads * TRITON_LOAD_INSTR
    warps = c.num_warps * slices
    return w.estimate(
        regs, costs.active_resident(blocks, 1, w.active_fraction) / slices,  # an item is `slices` programs
        hw.mem_latency_ns + steps * step_ns,
        warps * (w.units * TRITON_PROGRAM_INSTR + w.active * steps * step_instr),
        w.units * slices, d_chunks,
        d_chunks if w.op == PSW_BACKWARD and c.block_d * w.elt < costs.CACHE_LINE_BYTES else 1,
        costs.launch_us(hw, "triton"),
        (TRITON_FORWARD_SLOWDOWN if w.op == FORWARD else TRITON_SLOWDOWN)[c.num_warps],
        f"{blocks // hw.sm_count} programs/SM ({regs} regs), {steps:.1f} steps")


# --- the vendor op -------------------------------------------------------------------------------

def vendor_estimate(w: Work) -> Estimate:
    """torch.nn.functional.embedding_bag: bound by its rate of gathered elements, or by the bytes
    it moves at copy bandwidth."""
    p, hw = w.p, w.hw
    rate_g = VENDOR_ELEMENTS_PER_SM_CLOCK * hw.sm_count * hw.clock_ghz  # elements per ns
    elements_us = p.num_indices * p.dim / rate_g * 1e-3
    bytes_us = w.dram_bytes / (hw.achievable_hbm_tbps * 1e6)
    launch = costs.launch_us(hw, "vendor")
    mean_rows = p.num_indices / p.num_bags if p.num_bags else 0.0
    waves = math.ceil(p.num_bags / (hw.sm_count * hw.max_threads_per_sm // hw.warp_size))
    chain_us = waves * (hw.mem_latency_ns + VENDOR_ROUND_TRIPS_PER_ROW * mean_rows * w.row_ns) * 1e-3
    body = max(elements_us, bytes_us, chain_us)
    source = "measured on the H200" if hw.name == "H200" else "the H200's, scaled by SMs x clock"
    detail = (f"torch's kernel: {p.num_indices * p.dim / 1e6:.0f}M elements at {rate_g:.0f} G/s "
              f"({source}); {w.dram_bytes / 1e6:.0f} MB at copy bandwidth {bytes_us:.0f} us; "
              f"{waves} waves of {chain_us / max(waves, 1):.1f} us row chains")
    # Its bytes in flight are not modeled: margin and registers only matter in ties among our configs.
    return Estimate(launch + body, costs.bound_of(launch, body, elements_us, max(bytes_us, chain_us), math.inf), detail,
                    math.inf, 0, 1)


# --- the family: problems from calls and CLI arguments, buckets, samples -------------------------

# The C++ DType enum (csrc/include/mymetaops/types.h) and the mode ids of the schemas.
DTYPE_IDS = {"fp32": 0, "fp16": 1, "bf16": 2, "int32": 3, "int64": 4}
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
MODE_IDS = {"sum": 0, "mean": 1}
MODE_NAMES = {v: k for k, v in MODE_IDS.items()}
_TORCH_DTYPES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16",
                 "torch.int32": "int32", "torch.int64": "int64"}  # by str(): no torch import here
NO_BAGS, NO_INDICES, NO_TABLE = -1, -1000, -1  # bucket fields of empty sizes
SAMPLE_DIMS = (16, 32, 64, 128, 256)


def align_bytes(*values: int) -> int:
    """Largest power of two <= 16 dividing every value (pointers, byte counts)."""
    align = 16
    for value in values:
        while align > 1 and value % align:
            align //= 2
    return align


def _wrapper_arguments(input, weight, offsets=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                       mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                       padding_idx=None, *, validate=True):
    """The signature of mymetaops.embedding_bag (that of torch.nn.functional.embedding_bag)."""


class EmbeddingBagFamily(Family):
    name = "embedding_bag"
    ops = OPS
    problem_type = EmbeddingBagProblem

    def candidates(self, op, problem, hw):
        work = Work(op, problem, hw)
        for config, registers in native_configs(op, problem, hw):
            yield "native", config, native_estimate(work, config, registers)
        for config in triton_configs(problem, hw):
            yield "triton", config, triton_estimate(work, config)
        if op == FORWARD:
            yield "vendor", VENDOR_FORWARD, vendor_estimate(work)

    def missing_backend_note(self, op, backend):
        if backend == "vendor" and op != FORWARD:
            return "torch has no standalone op that takes these arguments"
        return ""

    def describe(self, problem):
        return describe(problem)

    def add_arguments(self, parser):
        parser.add_argument("--rows", type=int, required=True)
        parser.add_argument("--dim", type=int, required=True)
        parser.add_argument("--bags", type=int, required=True)
        parser.add_argument("--bag-size", type=float, required=True, help="mean indices per bag")
        parser.add_argument("--dtype", choices=sorted(ELEMENT_BYTES), default="fp32")
        parser.add_argument("--index-dtype", choices=sorted(INDEX_BYTES), default="int64")
        parser.add_argument("--mode", choices=tuple(MODE_IDS), default="sum")
        parser.add_argument("--per-sample-weights", action="store_true")
        parser.add_argument("--align-bytes", type=int,
                            help="default: from the row bytes (torch tensors are 16-byte aligned)")

    def problem_from_args(self, op, args: argparse.Namespace):
        row_bytes = args.dim * ELEMENT_BYTES[args.dtype]
        return EmbeddingBagProblem(
            args.rows, args.dim, args.bags, round(args.bags * args.bag_size), args.dtype, args.index_dtype,
            args.mode, args.per_sample_weights, args.align_bytes or align_bytes(row_bytes))

    def problem_from_call(self, op, *args, **kwargs):
        """The problem of `mymetaops.embedding_bag(*args, **kwargs)`, built as the dispatch does."""
        if op != FORWARD:
            raise ValueError(f"explain takes calls of {FORWARD} (backward=True adds its backward ops), not {op}")
        a = inspect.signature(_wrapper_arguments).bind(*args, **kwargs).arguments
        input, weight, offsets = a["input"], a["weight"], a.get("offsets")
        if weight.dim() != 2:
            raise ValueError("embedding_bag: weight must be a 2-D tensor [num_rows, dim]")
        index_dtype = _TORCH_DTYPES[str(input.dtype)]
        if input.dim() == 2:  # fixed-size bags, one per row
            num_bags = input.shape[0]
        else:
            if offsets is None:
                raise ValueError("embedding_bag: offsets is required when input is 1-D")
            num_bags = offsets.numel() - 1 if a.get("include_last_offset", False) else offsets.numel()
            if offsets.dtype != input.dtype:
                index_dtype = "int64"  # mixed widths promote to int64, as in torch
        weight_dtype = _TORCH_DTYPES[str(weight.dtype)]
        row_bytes = weight.shape[1] * weight.element_size()
        if weight.device.type == "meta":
            align = 16
        elif weight.stride(1) != 1 and weight.shape[1] != 1:  # the dispatch runs a contiguous copy
            align = align_bytes(row_bytes)
        else:
            align = align_bytes(weight.data_ptr(), row_bytes, weight.stride(0) * weight.element_size())
        return EmbeddingBagProblem(weight.shape[0], weight.shape[1], num_bags, input.numel(), weight_dtype,
                                   index_dtype, a.get("mode", "mean"), a.get("per_sample_weights") is not None,
                                   align)

    def backward_ops(self, op, problem):
        if op != FORWARD:
            return []
        # The weight backward gathers rows of grad_output, a fresh contiguous [bags, dim] tensor.
        out = [(BACKWARD, replace(problem, align_bytes=align_bytes(problem.row_bytes)))]
        if problem.has_per_sample_weights:
            out.append((PSW_BACKWARD, problem))
        return out

    def bucket_key(self, op, p):
        """(weight dtype, index dtype, dim, align bytes, mode, has psw, half octaves of the bags,
        quarter octaves of the mean bag length, half octaves of the table's bytes); all three ops
        share it. Mirrored in C++ by the dispatch: floor(k * log2(double)) there too."""
        bags = math.floor(2 * math.log2(p.num_bags)) if p.num_bags else NO_BAGS
        length = (math.floor(4 * math.log2(p.num_indices / p.num_bags)) if p.num_indices and p.num_bags
                  else NO_INDICES)
        table_bytes = p.num_rows * p.row_bytes
        table = math.floor(2 * math.log2(table_bytes)) if table_bytes else NO_TABLE
        return (DTYPE_IDS[p.weight_dtype], DTYPE_IDS[p.index_dtype], p.dim, p.align_bytes, MODE_IDS[p.mode],
                int(p.has_per_sample_weights), bags, length, table)

    def problem_from_key(self, op, key):
        """The geometric middle of each rounded size."""
        weight_dtype, index_dtype, dim, align, mode, psw, bags_b, length_b, table_b = key
        num_bags = 0 if bags_b == NO_BAGS else round(2 ** ((bags_b + 0.5) / 2))
        num_indices = 0 if length_b == NO_INDICES else round(num_bags * 2 ** ((length_b + 0.5) / 4))
        row_bytes = dim * ELEMENT_BYTES[DTYPE_NAMES[weight_dtype]]
        num_rows = 0 if table_b == NO_TABLE else max(1, round(2 ** ((table_b + 0.5) / 2) / row_bytes))
        return EmbeddingBagProblem(num_rows, dim, num_bags, num_indices, DTYPE_NAMES[weight_dtype],
                                   DTYPE_NAMES[index_dtype], MODE_NAMES[mode], bool(psw), align)

    def sample(self, op, rng: random.Random):
        """Recsys tables: 1e3-1e8 rows, the usual dims, 2^8-2^17 bags of 1-100 mean lookups."""
        dim, dtype = rng.choice(SAMPLE_DIMS), rng.choice(tuple(ELEMENT_BYTES))
        psw = op == PSW_BACKWARD or rng.random() < 0.25
        num_bags = round(2 ** rng.uniform(8, 17))
        return EmbeddingBagProblem(
            round(10 ** rng.uniform(3, 8)), dim, num_bags, round(num_bags * 10 ** rng.uniform(0, 2)), dtype,
            rng.choice(tuple(INDEX_BYTES)), "sum" if psw else rng.choice(tuple(MODE_IDS)), psw,
            align_bytes(dim * ELEMENT_BYTES[dtype]))


FAMILY = register(EmbeddingBagFamily())
