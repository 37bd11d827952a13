"""Building blocks shared by every family's cost model: memory counting (sectors, cache hits,
distinct rows), Little's-law utilization with queueing, occupancy (resident blocks), latency chains
flowing through resident slots in waves, the overlap of concurrent limits, launch costs and register
rounding. A family counts its kernels' work; these turn the counts into time.

Tags: [M] measured on this project's H200 (torch 2.11, 2026-11); [D] datasheet, compiler or ISA
fact; [A] assumed.
"""
from __future__ import annotations

import math

from .hardware import HardwareSpec

# --- memory system -------------------------------------------------------------------------------
QUEUEING_K = 0.1  # [M] loaded-latency growth: fits H200 gathers at 26-85% load within 7%
OVERLAP_P = 4.0  # [M] bytes, accesses and issue overlap imperfectly: a p-norm, not a max
GATHER_EFFICIENCY = 0.92  # [M] random-row traffic reaches this share of the copy bandwidth (H200)
LLC_USABLE_FRACTION = 0.75  # [A] share of the last-level cache a gathered tensor keeps
CACHE_LINE_BYTES = 128  # [D] L2 line (Hopper, Blackwell, CDNA): random writes reach DRAM per line
# --- compute units -------------------------------------------------------------------------------
REGISTER_GRANULE = 8  # [D] allocation unit per thread (both vendors); also an estimate's error
# --- launches ------------------------------------------------------------------------------------
TRITON_LAUNCH_EXTRA_US = 2.0  # [A] Triton's Python launcher does more host work per call
# [M] H200: a new Triton config compiles in 0.16-0.26 s in a warm process (seconds in a cold one);
# native kernels are compiled ahead of time. Paid once per config and process.
TRITON_FIRST_CALL_US = 250_000.0
FIRST_CALL_US = {"triton": TRITON_FIRST_CALL_US}  # by backend; absent: nothing to compile


# --- counting ------------------------------------------------------------------------------------

def expected_distinct(num_rows: int, draws: int) -> float:
    """Expected distinct rows among `draws` uniform random picks of `num_rows`: R(1 - e^(-N/R))."""
    return num_rows * -math.expm1(-draws / num_rows) if num_rows else 0.0


def fetch_bytes(row_bytes: int, align: int, sector: int) -> float:
    """Mean whole-sector bytes read for one row. Rows start at multiples of the row stride from a
    base that is sector-aligned when fully (16-byte) aligned, as torch allocations are; a less
    aligned base (a view) can start anywhere at multiples of `align`."""
    step = math.gcd(row_bytes, sector) if align == 16 else math.gcd(math.gcd(row_bytes, sector), align)
    starts = range(0, sector, step)
    return sum(-(-(s + row_bytes) // sector) for s in starts) * sector / len(starts)


def hit_fraction(hw: HardwareSpec, footprint: float) -> float:
    """Uniformly random rows of `footprint` bytes: the cache holds usable/footprint of them."""
    usable = hw.l2_bytes * LLC_USABLE_FRACTION
    return 1.0 if footprint <= usable else usable / footprint


# --- throughput ----------------------------------------------------------------------------------

def utilization(q: float) -> float:
    """rho solving rho * (1 + K rho / (1 - rho)) = q, where q is the bandwidth the bytes in flight
    would carry at unloaded latency over the roofline bandwidth (Little's law; the loaded latency
    is unloaded * (1 + K rho / (1 - rho)): a smooth knee)."""
    a, b = 1.0 - QUEUEING_K, 1.0 + q
    return (b - math.sqrt(b * b - 4.0 * a * q)) / (2.0 * a)


def flow_us(items: float, resident: float, roofline_us: float, chain_ns: float) -> tuple[float, float]:
    """(time, margin) of `items` dependent latency chains of `chain_ns` each, `resident` at once,
    whose bytes take `roofline_us` at full bandwidth. Items flow through the resident slots at the
    utilization their bytes in flight reach, but no faster than whole waves of unloaded chains.
    margin: bytes in flight over the bytes in flight that saturate memory."""
    per_item = roofline_us / items  # us per item at full bandwidth
    q_item = per_item * 1e3 / chain_ns  # bandwidth one item in flight carries, over the roofline
    margin = min(resident, items) * q_item
    return max(roofline_us / utilization(margin), math.ceil(items / resident) * chain_ns * 1e-3), margin


def overlap(*times_us: float) -> float:
    """Limits that run concurrently (bytes, accesses, issue, block launches) but not perfectly."""
    return sum(t ** OVERLAP_P for t in times_us) ** (1 / OVERLAP_P)


def bound_of(launch_us: float, body_us: float, compute_us: float, bytes_us: float, margin: float,
             access_us: float = 0.0) -> str:
    """What limits a kernel: its launch, its issue (compute), or memory -- DRAM accesses, or
    bandwidth when enough bytes are in flight to saturate it, else latency."""
    if launch_us >= body_us:
        return "launch"
    if compute_us >= max(bytes_us, access_us):
        return "compute"
    return "memory" if access_us >= bytes_us or margin >= 1.0 else "latency"


# --- compute units -------------------------------------------------------------------------------

def us_per_warp_instruction(hw: HardwareSpec) -> float:
    """Time of one warp instruction with the whole device issuing."""
    return 1e-3 / (hw.sm_count * hw.issue_lanes_per_clock / hw.warp_size * hw.clock_ghz)


def us_per_block(hw: HardwareSpec) -> float:
    """Device time to launch and retire one block (it matters for grids of tiny blocks)."""
    return hw.block_launch_cycles / hw.clock_ghz * 1e-3 / hw.sm_count


def resident_blocks(hw: HardwareSpec, block_threads: int, registers: int) -> int:
    """Blocks per SM/CU: thread, block and register limits (registers are per warp partition)."""
    per_partition = hw.registers_per_sm // hw.register_partitions
    warps_by_regs = hw.register_partitions * (per_partition // (registers * hw.warp_size))
    return min(hw.max_blocks_per_sm, hw.max_threads_per_sm // block_threads,
               warps_by_regs // (block_threads // hw.warp_size))


def active_resident(blocks: int, items_per_block: int, active_fraction: float) -> float:
    """Active items resident at once. Blocks without an active item retire at once, so resident
    blocks hold at least one: E[active | >= 1] of binomial(items_per_block, active_fraction)."""
    if active_fraction <= 0.0 or active_fraction >= 1.0:
        return blocks * items_per_block * min(active_fraction, 1.0)
    mean = items_per_block * active_fraction
    return blocks * mean / -math.expm1(items_per_block * math.log1p(-active_fraction))


def round_up(x: float, to: int) -> int:
    return int(-(-x // to) * to)


def round_registers(need: float) -> int:
    return round_up(need, REGISTER_GRANULE)


def launch_us(hw: HardwareSpec, backend: str) -> float:
    """Fixed cost of one launch in a busy stream; Triton's launcher adds host work."""
    return hw.launch_overhead_us + (TRITON_LAUNCH_EXTRA_US if backend == "triton" else 0.0)
