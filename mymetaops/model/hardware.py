"""What the model knows about each GPU: datasheet numbers, a few measured here, a few assumed.

Source tags in the comments: [D] vendor datasheet / ISA manual, [M] measured on this project's H200
(torch 2.11, 2026-11), [A] assumed from public microbenchmarks or architecture docs — these are the
constants to recalibrate when a device is measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    vendor: str  # "nvidia" | "amd"
    arch: str  # "sm_90a", "sm_100a", "gfx942", "gfx950"
    sm_count: int  # SMs (NVIDIA) or CUs (AMD)
    clock_ghz: float  # boost clock
    hbm_tbps: float  # DRAM bandwidth, datasheet
    copy_efficiency: float  # fraction of hbm_tbps a large device-to-device copy reaches
    hbm_gb: float
    l2_mb: float  # last-level cache: L2 (NVIDIA) or Infinity Cache / MALL (AMD)
    llc_tbps: float  # achievable last-level-cache bandwidth
    llc_latency_ns: float  # unloaded latency of a last-level-cache hit
    mem_latency_ns: float  # unloaded DRAM latency of a gather (Little's law: bandwidth <= in flight / latency)
    dram_access_rate_g: float  # random DRAM accesses (rows gathered or written) per ns
    sector_bytes: int  # DRAM access granularity: every row read is rounded up to whole sectors
    smem_kb_per_sm: float  # shared memory (NVIDIA) / LDS (AMD) per SM or CU
    warp_size: int  # 32 / 64 (wavefront)
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int  # 32-bit registers per SM / VGPR lanes per CU (512 KB = 131072 on CDNA)
    register_partitions: int  # register-file slices a warp is pinned to (SM sub-partitions / SIMDs)
    max_registers_per_thread: int  # beyond it the compiler spills
    issue_lanes_per_clock: int  # vector-ALU lane-instructions an SM/CU issues per clock
    launch_overhead_us: float  # fixed cost of one kernel launch in a busy stream
    block_launch_cycles: float  # SM time to launch and retire one block (tiny-block grids)
    peak_tflops: Mapping[str, float] = field(hash=False)  # dense TFLOP/s by dtype name (DTYPES)

    def __post_init__(self) -> None:
        # Read-only copy: specs are shared (and hashed for lru_cache), so they must not change.
        object.__setattr__(self, "peak_tflops", MappingProxyType(dict(self.peak_tflops)))

    @property
    def achievable_hbm_tbps(self) -> float:
        """DRAM bandwidth a well-formed streaming kernel reaches (what a device copy measures)."""
        return self.hbm_tbps * self.copy_efficiency

    @property
    def l2_bytes(self) -> float:
        return self.l2_mb * 2**20


def _hopper(name: str, hbm_tbps: float, hbm_gb: float, l2_mb: float, hbm_stacks: int,
            peak: dict) -> HardwareSpec:
    return HardwareSpec(
        name=name, vendor="nvidia", arch="sm_90a",
        sm_count=132, clock_ghz=1.98,  # [D] SXM5; [M] 1980 MHz read under load on our H200
        hbm_tbps=hbm_tbps, hbm_gb=hbm_gb, l2_mb=l2_mb,
        copy_efficiency=4.27 / 4.8,  # [M] H200 device copy 4.27 TB/s; [A] same memory system on H100
        llc_tbps=4.5,  # [M] H200 native gathers from an L2-resident table: 4.3 TB/s (Triton: 6.0)
        llc_latency_ns=200.0,  # [A] L2 hit, unloaded (public microbenchmarks: 150-270 ns)
        mem_latency_ns=380.0,  # [M] H200 gather with few bags in flight: 0.37-0.39 us per round trip
        dram_access_rate_g=30.0 * hbm_stacks / 6,  # [M] H200 (6 stacks): 64 B rows gather at 30 G rows/s
        sector_bytes=32,  # [D] L2 sector
        smem_kb_per_sm=228, warp_size=32, max_threads_per_sm=2048, max_blocks_per_sm=32,  # [D]
        registers_per_sm=65536, register_partitions=4, max_registers_per_thread=255,  # [D]
        issue_lanes_per_clock=128,  # [D] 4 schedulers x 32 lanes
        launch_overhead_us=4.0,  # [A] back-to-back launch gap, 3-5 us
        block_launch_cycles=170,  # [M] H200: 2.1M one-warp Triton programs, 95% exiting at once: 1.36 ms
        peak_tflops=peak,
    )


def _cdna(name: str, arch: str, cus: int, clock_ghz: float, hbm_tbps: float, hbm_gb: float,
          lds_kb: float, peak: dict) -> HardwareSpec:
    return HardwareSpec(
        name=name, vendor="amd", arch=arch, sm_count=cus, clock_ghz=clock_ghz,
        hbm_tbps=hbm_tbps, hbm_gb=hbm_gb,
        copy_efficiency=0.80,  # [A] public MI300X copy results ~4.2-4.3 of 5.3 TB/s
        l2_mb=256,  # [D] Infinity Cache (MALL); per-XCD L2 is 4 MB
        llc_tbps=12.0,  # [A] ~70% of the 17.2 TB/s peak Infinity Cache bandwidth [D]
        llc_latency_ns=300.0,  # [A] Infinity Cache hit, unloaded
        mem_latency_ns=650.0,  # [A] public MI300X pointer chases: HBM ~1.7x Hopper's latency
        dram_access_rate_g=30.0 * 8 / 6,  # [A] the H200's rate per HBM stack [M], 8 stacks
        sector_bytes=64,  # [D] HBM request granularity (L2 line is 128 B)
        smem_kb_per_sm=lds_kb, warp_size=64,
        max_threads_per_sm=2048,  # [D] 4 SIMDs x 8 waves x 64 lanes
        max_blocks_per_sm=32,  # [A] bounded by 32 waves per CU
        registers_per_sm=131072, register_partitions=4,  # [D] 512 KB unified VGPR file per CU
        max_registers_per_thread=512,  # [D] 256 arch VGPRs + 256 AGPRs
        issue_lanes_per_clock=64,  # [D] 4 SIMDs x 16 lanes (fp32 vector rate / 2 / CUs / clock)
        launch_overhead_us=6.0,  # [A] HIP launches cost a little more than CUDA's
        block_launch_cycles=170,  # [A] as measured on the H200
        peak_tflops=peak,
    )


# Dense (no sparsity) peak rates [D]; "fp32" is the best non-TF32 fp32 matmul rate (CUDA cores on
# NVIDIA, MFMA fp32 on CDNA). Measured on our H200 [M]: bf16 mm ~770, fp8 _scaled_mm ~1270.
_HOPPER_PEAK = {"fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989, "fp8": 1979}
_MI300_PEAK = {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}  # fp8 e4m3fnuz

HARDWARE: Mapping[str, HardwareSpec] = MappingProxyType({
    "H100": _hopper("H100", 3.35, 80, 50, 5, _HOPPER_PEAK),  # [D] H100 SXM5
    "H200": _hopper("H200", 4.8, 141, 60, 6, _HOPPER_PEAK),  # [D]; L2 60 MB as torch reports [M]
    "B200": HardwareSpec(
        name="B200", vendor="nvidia", arch="sm_100a", sm_count=148, clock_ghz=1.9,  # [D] SMs, [A] clock
        hbm_tbps=8.0, hbm_gb=180, l2_mb=126,  # [D]
        copy_efficiency=4.27 / 4.8,  # [A] as measured on Hopper
        llc_tbps=9.0, llc_latency_ns=350.0,  # [A] two Hopper-like L2s [M]; a die crossing
        mem_latency_ns=450.0,  # [A] Hopper's [M] plus a die crossing for half the accesses
        dram_access_rate_g=30.0 * 8 / 6,  # [A] the H200's rate per HBM stack [M], 8 stacks
        sector_bytes=32, smem_kb_per_sm=228, warp_size=32, max_threads_per_sm=2048,  # [D]
        max_blocks_per_sm=32, registers_per_sm=65536, register_partitions=4,  # [D]
        max_registers_per_thread=255, issue_lanes_per_clock=128, launch_overhead_us=4.0,
        block_launch_cycles=170,  # [A] as measured on the H200
        peak_tflops={"fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500},  # [D]
    ),
    "MI300X": _cdna("MI300X", "gfx942", 304, 2.1, 5.3, 192, 64, _MI300_PEAK),  # [D]
    "MI325X": _cdna("MI325X", "gfx942", 304, 2.1, 6.0, 256, 64, _MI300_PEAK),  # [D]
    # CDNA4 has no xf32 MFMA: "tf32" runs at the fp32 matrix rate [D]. fp8 is OCP e4m3fn.
    "MI350X": _cdna("MI350X", "gfx950", 256, 2.2, 8.0, 288, 160,
                    {"fp32": 144.2, "tf32": 144.2, "bf16": 2300, "fp16": 2300, "fp8": 4600}),  # [D]
    "MI355X": _cdna("MI355X", "gfx950", 256, 2.4, 8.0, 288, 160,
                    {"fp32": 157.3, "tf32": 157.3, "bf16": 2500, "fp16": 2500, "fp8": 5000}),  # [D]
})


def get_hardware(name: str) -> HardwareSpec:
    """Spec by name, case-insensitive ("h200", "MI350X")."""
    for key, spec in HARDWARE.items():
        if key.lower() == name.strip().lower():
            return spec
    raise KeyError(f"unknown hardware {name!r}; known: {', '.join(HARDWARE)}")


_UNKNOWN_HBM_TBPS = 2.0  # [A] when torch reports no memory clock: low, so nothing is promised
_UNKNOWN_LATENCY_NS = 1000.0  # [A] pessimistic: shallow configs are not trusted to saturate


def detect_hardware(device=None) -> HardwareSpec:
    """Spec of a visible GPU: a table entry when name and SM count match, else one built from
    torch's device properties with conservative defaults (named "unknown: <name>")."""
    import torch  # here, not at the top: the model must import on machines without torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"no GPU visible to torch; name a device instead (known: {', '.join(HARDWARE)})")
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    spec = _match(props.name, getattr(props, "gcnArchName", "") or "", props.multi_processor_count,
                  props.total_memory)
    return spec if spec is not None else _from_properties(props)


def _match(name: str, gcn_arch: str, sm_count: int, total_memory: int) -> HardwareSpec | None:
    upper = name.upper()
    if gcn_arch.startswith("gfx942"):
        key = "MI325X" if "MI325" in upper or total_memory > 200e9 else "MI300X"
    elif gcn_arch.startswith("gfx950"):
        key = "MI355X" if "MI355" in upper else "MI350X"  # unnamed gfx950: the slower part
    else:
        key = next((k for k in ("H100", "H200", "B200") if k in upper), None)
    if key is None or HARDWARE[key].sm_count != sm_count:  # a partition (MIG, CPX) or a cut-down part
        return None
    return HARDWARE[key]


def _from_properties(props) -> HardwareSpec:
    # The vendor's current family stands in for what the properties do not report.
    gcn_arch = getattr(props, "gcnArchName", "") or ""
    base = HARDWARE["MI300X"] if gcn_arch else HARDWARE["H100"]
    bus_bits, mem_khz = getattr(props, "memory_bus_width", 0), getattr(props, "memory_clock_rate", 0)
    hbm_tbps = bus_bits / 8 * mem_khz * 1e3 * 2 / 1e12 if bus_bits and mem_khz else _UNKNOWN_HBM_TBPS
    clock_ghz = getattr(props, "clock_rate", 0) / 1e6 or 1.5
    fp32 = props.multi_processor_count * base.issue_lanes_per_clock * 2 * clock_ghz / 1e3
    return replace(
        base, name=f"unknown: {props.name}",
        arch=gcn_arch.split(":")[0] or f"sm_{props.major}{props.minor}",
        sm_count=props.multi_processor_count, clock_ghz=clock_ghz, hbm_tbps=hbm_tbps,
        hbm_gb=props.total_memory / 1e9, l2_mb=props.L2_cache_size / 2**20,
        mem_latency_ns=_UNKNOWN_LATENCY_NS,
        smem_kb_per_sm=props.shared_memory_per_multiprocessor / 1024, warp_size=props.warp_size,
        max_threads_per_sm=props.max_threads_per_multi_processor,
        peak_tflops={"fp32": fp32},
    )
