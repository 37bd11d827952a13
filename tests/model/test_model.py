"""The analytical model: hardware table, decisions, the embedding_bag cost model and the CLI.

CPU only and fast: the model is pure Python and never touches a GPU.
"""
import dataclasses
import math
import os
import subprocess
import sys
import timeit

import pytest

from mymetaops.configs import NativeEmbeddingBagConfig
from mymetaops.model import (HARDWARE, OPS, EmbeddingBagProblem, HardwareSpec, decide, detect_hardware,
                             format_decision, get_hardware)
from mymetaops.model import embedding_bag as eb
from mymetaops.model import hardware, select

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = get_hardware("H200")
# The four benchmark shapes (rows, dim, bags, bag size, dtype).
BENCHMARKS = [(10_000_000, 128, 65536, 32, "fp32"), (10_000_000, 128, 65536, 32, "bf16"),
              (20_000_000, 64, 131072, 16, "fp16"), (1_000_000, 256, 16384, 100, "fp32")]


def problem(rows=1_000_000, dim=128, bags=4096, bag_size=20, dtype="fp32", index="int64", mode="sum",
            psw=False, align=16):
    return EmbeddingBagProblem(rows, dim, bags, bags * bag_size, dtype, index, mode, psw, align)


# --- hardware ------------------------------------------------------------------------------------

def test_table_has_every_device():
    assert set(HARDWARE) == {"H100", "H200", "B200", "MI300X", "MI325X", "MI350X", "MI355X"}


@pytest.mark.parametrize("name", list(HARDWARE))
def test_spec_is_complete_and_consistent(name):
    s = HARDWARE[name]
    assert s.name == name
    assert (s.vendor, s.warp_size, s.arch[:3]) in {("nvidia", 32, "sm_"), ("amd", 64, "gfx")}
    for f in dataclasses.fields(HardwareSpec):
        value = getattr(s, f.name)
        if isinstance(value, (int, float)):
            assert value > 0, f.name
    assert 0 < s.copy_efficiency <= 1 and s.achievable_hbm_tbps < s.hbm_tbps
    assert s.mem_latency_ns > s.llc_latency_ns
    assert s.max_threads_per_sm % s.warp_size == 0
    assert s.registers_per_sm // s.max_threads_per_sm >= 32  # full occupancy at 32 registers
    assert set(s.peak_tflops) == set(hardware.DTYPES)
    p = s.peak_tflops
    assert p["fp8"] >= p["bf16"] == p["fp16"] >= p["tf32"] >= p["fp32"]
    with pytest.raises(TypeError):
        s.peak_tflops["fp32"] = 0.0  # shared and hashed: read-only
    assert hash(s) == hash(dataclasses.replace(s))


def test_lookup_is_case_insensitive_and_unknown_names_list_the_known():
    assert get_hardware("mi350x") is HARDWARE["MI350X"]
    assert get_hardware(" h200 ") is H200
    with pytest.raises(KeyError, match="MI300X"):
        get_hardware("A100")


@pytest.mark.parametrize("name, gcn_arch, sms, memory, expected", [
    ("NVIDIA H200", "", 132, 141e9, "H200"),
    ("NVIDIA H100 80GB HBM3", "", 132, 80e9, "H100"),
    ("NVIDIA H100 PCIe", "", 114, 80e9, None),  # a cut-down part: built from its properties
    ("NVIDIA B200", "", 148, 180e9, "B200"),
    ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 304, 192e9, "MI300X"),
    ("AMD Instinct MI325X", "gfx942:sramecc+:xnack-", 304, 256e9, "MI325X"),
    ("AMD Radeon Graphics", "gfx950:sramecc+:xnack-", 256, 288e9, "MI350X"),
    ("AMD Instinct MI355X", "gfx950", 256, 288e9, "MI355X"),
    ("AMD Instinct MI300X", "gfx942", 38, 24e9, None),  # a CPX partition
])
def test_detection_matches_name_arch_and_size(name, gcn_arch, sms, memory, expected):
    spec = hardware._match(name, gcn_arch, sms, memory)
    assert (spec.name if spec else None) == expected


def test_detect_hardware_without_gpu_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert detect_hardware().sm_count > 0
    else:
        with pytest.raises(RuntimeError, match="no GPU"):
            detect_hardware()


# --- decisions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["H200", "MI300X", "MI350X"])
def test_decide_takes_a_fastest_available_candidate(op, name):
    d = decide(op, problem(psw=op.endswith("weights_backward")), get_hardware(name))
    times = [c.time_us for c in d.candidates]
    assert times == sorted(times) and d.choice in d.candidates and d.choice.available
    fastest = min(c.time_us for c in d.candidates if c.available)
    assert d.choice.time_us <= fastest * (1 + select.ROBUST_TIE_FRACTION)
    assert all(c.time_us > 0 and c.bound in ("memory", "latency", "compute", "launch") for c in d.candidates)
    assert decide(op, problem(psw=op.endswith("weights_backward")), get_hardware(name)) is d  # memoized


@pytest.mark.parametrize("backend", ["native", "triton"])
def test_forcing_a_backend(backend):
    d = decide("embedding_bag", problem(), H200, backend)
    assert d.choice.backend == backend and "forced" in d.reason
    same = [c for c in d.candidates if c.backend == backend]
    assert d.choice.time_us <= min(c.time_us for c in same) * (1 + select.ROBUST_TIE_FRACTION)


def test_forcing_vendor_names_the_backends_there_are():
    with pytest.raises(ValueError, match="native, triton"):
        decide("embedding_bag", problem(), H200, "vendor")
    with pytest.raises(ValueError, match="backend must be"):
        decide("embedding_bag", problem(), H200, "cublas")


def test_without_native_kernels_triton_is_chosen_and_the_reason_says_why():
    d = decide("embedding_bag", problem(), H200, native_available=False)
    assert d.choice.backend == "triton" and "not built" in d.reason
    natives = [c for c in d.candidates if c.backend == "native"]
    assert natives and all(not c.available and "not built" in c.unavailable_reason for c in natives)
    assert "UNAVAILABLE" in format_decision(d, shown=len(d.candidates))
    with pytest.raises(ValueError, match="not built"):
        decide("embedding_bag", problem(), H200, "native", native_available=False)


def test_unknown_op_and_wrong_problem_are_errors():
    with pytest.raises(ValueError, match="unknown op"):
        decide("jagged_softmax", problem(), H200)
    with pytest.raises(TypeError):
        decide("embedding_bag", (1, 2, 3), H200)


def test_format_decision_shows_hardware_candidates_choice_and_reason():
    d = decide("embedding_bag", problem(), get_hardware("MI350X"))
    text = format_decision(d, shown=5)
    assert "MI350X" in text and "choice:" in text and d.reason in text
    assert sum(line.startswith("*") for line in text.splitlines()) == 1
    assert "more candidates not shown" in text


def test_decide_is_cheap():
    p = problem(rows=20_000_000, dim=64, bags=131072, bag_size=16, dtype="fp16")
    seconds = min(timeit.repeat(lambda: select.decide.__wrapped__("embedding_bag", p, H200), number=20, repeat=3)) / 20
    assert seconds < 2e-3  # ~0.1 ms on a slow CI core; this only guards against regressions


# --- the embedding_bag cost model ---------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_more_indices_never_take_less_time(op):
    psw = op.endswith("weights_backward")
    previous_best, previous = 0.0, {}
    for bag_size in (1, 2, 5, 10, 20, 50, 100, 200):
        d = decide(op, problem(bag_size=bag_size, psw=psw), H200)
        times = {c.config: c.time_us for c in d.candidates}
        assert min(times.values()) >= previous_best * (1 - 1e-9)
        for config, t in times.items():
            assert t >= previous.get(config, 0.0) * (1 - 1e-9), config
        previous_best, previous = min(times.values()), times


def test_lanes_go_up_to_the_wavefront_on_amd_and_the_warp_on_nvidia():
    p = problem(dim=256)  # 1 KB rows: a 64-lane group of 16-byte vectors covers one
    for name, widest in (("H200", 32), ("MI300X", 64), ("MI350X", 64)):
        lanes = {c.config.lanes_per_bag for c in decide("embedding_bag", p, get_hardware(name)).candidates
                 if c.backend == "native"}
        assert max(lanes) == widest


@pytest.mark.parametrize("dtype, align, vec", [("fp32", 16, 16), ("fp32", 8, 8), ("bf16", 4, 4),
                                               ("fp16", 2, 2), ("fp32", 2, None)])
def test_vector_width_respects_alignment(dtype, align, vec):
    d = decide("embedding_bag", problem(dtype=dtype, align=align), H200)
    widths = {c.config.vec_bytes for c in d.candidates if c.backend == "native"}
    assert widths == ({vec} if vec else set())
    assert d.choice.backend == ("native" if vec else "triton")


def test_spilling_unrolls_are_not_offered():
    d = decide("embedding_bag_per_sample_weights_backward", problem(psw=True), H200)
    assert all(c.config.unroll <= 4 for c in d.candidates if c.backend == "native")


@pytest.mark.parametrize("rows, dim, bags, bag_size, dtype", BENCHMARKS)
def test_h200_benchmark_shapes_are_memory_bound(rows, dim, bags, bag_size, dtype):
    # Calibrated on these shapes: the fastest measured (native or Triton, within 3% of each other)
    # gathered rows at 3.1-4.2 TB/s.
    p = EmbeddingBagProblem(rows, dim, bags, bags * bag_size, dtype, "int64")
    d = decide("embedding_bag", p, H200)
    assert d.choice.bound == "memory"
    gathered = p.num_indices * p.row_bytes
    assert 2.8e6 < gathered / d.choice.time_us < 4.4e6  # bytes per us


def test_backward_counts_the_glue_and_distinct_rows():
    p = problem(rows=1_000_000, bags=16384, bag_size=100)
    d = decide("embedding_bag_backward", p, H200)
    assert "zero-fill" in d.choice.detail and "sort" in d.choice.detail
    assert eb.expected_distinct(1_000_000, 1_638_400) == pytest.approx(1e6 * (1 - math.exp(-1.6384)))
    assert eb.expected_distinct(0, 10) == 0.0


@pytest.mark.parametrize("sizes", [(0, 128, 10, 100), (100, 0, 10, 100), (100, 128, 0, 0), (100, 128, 10, 0)])
@pytest.mark.parametrize("op", OPS)
def test_empty_problems_are_launch_bound(sizes, op):
    d = decide(op, EmbeddingBagProblem(*sizes), get_hardware("MI300X"))
    assert d.choice.time_us < 200 and math.isfinite(d.choice.time_us)


def test_problem_validation():
    with pytest.raises(ValueError):
        problem(dtype="fp64")
    with pytest.raises(ValueError):
        problem(mode="max")
    with pytest.raises(ValueError):
        problem(align=3)
    with pytest.raises(ValueError):
        EmbeddingBagProblem(-1, 1, 1, 1)


def test_native_registers_match_ptxas_within_a_granule():
    # ptxas -v, sm_90a, fp32 / int64 forward kernel: unroll 1, 2, 4 -> 36, 55, 64 registers.
    p = problem()
    for unroll, ptxas in ((1, 36), (2, 55), (4, 64)):
        c = NativeEmbeddingBagConfig(16, 32, unroll, 256)
        assert abs(eb.native_registers("embedding_bag", p, H200, c) - ptxas) <= eb.REGISTER_GRANULE


# --- command line --------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "mymetaops.model", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_explains_a_device_that_is_not_here():
    r = run_cli("explain", "embedding_bag", "--device", "MI350X", "--rows", "10000000", "--dim", "128",
                "--bags", "65536", "--bag-size", "32", "--dtype", "fp32", "--backward")
    assert r.returncode == 0, r.stderr
    assert "MI350X" in r.stdout and "embedding_bag_backward" in r.stdout and r.stdout.count("choice:") == 2


def test_cli_hardware_table_and_errors():
    r = run_cli("hardware")
    assert r.returncode == 0 and all(name in r.stdout for name in HARDWARE)
    r = run_cli("explain", "embedding_bag", "--device", "Z80", "--rows", "1", "--dim", "1", "--bags", "1",
                "--bag-size", "1")
    assert r.returncode == 2 and "unknown hardware" in r.stderr
