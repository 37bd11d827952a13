"""The embedding_bag family of the model: decisions, the cost model, the vendor candidate, the
first-call compile, buckets and their regret, explain and the CLI.

CPU only and fast: the model is pure Python and never touches a GPU.
"""
import dataclasses
import math
import os
import random
import subprocess
import sys
import timeit

import pytest

from mymetaops.configs import NativeEmbeddingBagConfig, TorchEmbeddingBagConfig
from mymetaops.model import (decide, decide_bucketed, family_of, format_bucketed, format_decision, get_family,
                             get_hardware, regret)
from mymetaops.model import costs, select
from mymetaops.model import embedding_bag as eb
from mymetaops.model.embedding_bag import EmbeddingBagProblem
from mymetaops.model.regret import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200 = get_hardware("H200")
FAMILY = get_family("embedding_bag")
OPS = eb.OPS
# The four benchmark shapes (rows, dim, bags, bag size, dtype).
BENCHMARKS = [(10_000_000, 128, 65536, 32, "fp32"), (10_000_000, 128, 65536, 32, "bf16"),
              (20_000_000, 64, 131072, 16, "fp16"), (1_000_000, 256, 16384, 100, "fp32")]
# torch.nn.functional.embedding_bag on the H200 [M], ms.
VENDOR_MEASURED = [(BENCHMARKS[0], 0.613), (BENCHMARKS[1], 0.519), (BENCHMARKS[2], 0.303), (BENCHMARKS[3], 0.885)]


def problem(rows=1_000_000, dim=128, bags=4096, bag_size=20, dtype="fp32", index="int64", mode="sum",
            psw=False, align=16):
    return EmbeddingBagProblem(rows, dim, bags, bags * bag_size, dtype, index, mode, psw, align)


# --- decisions -----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["H200", "MI300X", "MI350X"])
def test_decide_takes_a_fastest_available_candidate(op, name):
    d = decide(op, problem(psw=op.endswith("weights_backward")), get_hardware(name))
    times = [c.time_us for c in d.candidates]
    assert times == sorted(times) and d.choice in d.candidates and d.choice.available
    fastest = min(c.cost_us for c in d.candidates if c.available)
    assert d.choice.cost_us <= fastest + select.ROBUST_TIE_FRACTION * d.choice.time_us
    assert all(c.time_us > 0 and c.bound in ("memory", "latency", "compute", "launch") for c in d.candidates)
    assert decide(op, problem(psw=op.endswith("weights_backward")), get_hardware(name)) is d  # memoized


@pytest.mark.parametrize("backend", ["native", "triton", "vendor"])
def test_forcing_a_backend(backend):
    d = decide("embedding_bag", problem(), H200, backend)
    assert d.choice.backend == backend and "forced" in d.reason
    same = [c for c in d.candidates if c.backend == backend]
    assert d.choice.time_us <= min(c.time_us for c in same) * (1 + select.ROBUST_TIE_FRACTION)


def test_forcing_vendor_where_torch_has_no_op_names_the_backends_there_are():
    with pytest.raises(ValueError, match="no standalone op .* backends with candidates: native, triton"):
        decide("embedding_bag_backward", problem(), H200, "vendor")
    with pytest.raises(ValueError, match="backend must be"):
        decide("embedding_bag", problem(), H200, "cublas")


def test_without_native_kernels_the_reason_says_why():
    # The backward has no vendor op: Triton runs, compile and all.
    d = decide("embedding_bag_backward", problem(), H200, native_available=False)
    assert d.choice.backend == "triton" and "not built" in d.reason and "JIT" in d.reason
    natives = [c for c in d.candidates if c.backend == "native"]
    assert natives and all(not c.available and "not built" in c.unavailable_reason for c in natives)
    assert "UNAVAILABLE" in format_decision(d, shown=len(d.candidates))
    with pytest.raises(ValueError, match="not built"):
        decide("embedding_bag", problem(), H200, "native", native_available=False)
    # The forward has torch's op, which compiles nothing: it beats a Triton kernel's first call.
    d = decide("embedding_bag", problem(), H200, native_available=False)
    assert d.choice.backend == "vendor" and "not built" in d.reason


def test_wrong_problem_is_an_error():
    with pytest.raises(TypeError, match="EmbeddingBagProblem"):
        decide("embedding_bag", (1, 2, 3), H200)


def test_format_decision_shows_hardware_candidates_choice_and_reason():
    d = decide("embedding_bag", problem(), get_hardware("MI350X"))
    text = format_decision(d, shown=5)
    assert "MI350X" in text and "choice:" in text and d.reason in text
    assert sum(line.startswith("*") for line in text.splitlines()) == 1
    assert "more candidates not shown" in text


def test_decide_is_cheap():
    p = problem(rows=20_000_000, dim=64, bags=131072, bag_size=16, dtype="fp16")
    undecorated = select._decide.__wrapped__
    seconds = min(timeit.repeat(lambda: undecorated(FAMILY, "embedding_bag", p, H200, "auto", True), number=20,
                                repeat=3)) / 20
    assert seconds < 2e-3  # ~0.5-1 ms on a slow CI core; this only guards against regressions


# --- first call: Triton compiles ------------------------------------------------------------------

def test_auto_does_not_stall_the_first_call_on_a_triton_compile():
    # On the MI350X a Triton config is predicted faster per call for this shape, but compiling it
    # would cost the first call ~250 ms: a native kernel runs.
    d = decide("embedding_bag", problem(rows=10_000_000, bags=65536, bag_size=32), get_hardware("MI350X"))
    assert d.candidates[0].backend == "triton" and d.candidates[0].first_call_us == costs.TRITON_FIRST_CALL_US
    assert d.choice.backend == "native" and d.choice.first_call_us == 0
    assert "JIT on first use" in d.reason and "+250 ms JIT" in format_decision(d)
    forced = decide("embedding_bag", problem(rows=10_000_000, bags=65536, bag_size=32), get_hardware("MI350X"),
                    "triton")
    # Forcing Triton still takes its fastest config (up to the robust tie-break's 1%).
    assert forced.choice.backend == "triton"
    assert forced.choice.time_us <= forced.candidates[0].time_us * (1 + select.ROBUST_TIE_FRACTION)
    assert all(c.first_call_us == 0 for c in d.candidates if c.backend != "triton")


# --- the vendor candidate -------------------------------------------------------------------------

@pytest.mark.parametrize("shape, ms", VENDOR_MEASURED)
def test_vendor_forward_matches_the_h200_measurements(shape, ms):
    rows, dim, bags, bag_size, dtype = shape
    d = decide("embedding_bag", problem(rows, dim, bags, bag_size, dtype), H200)
    vendor = [c for c in d.candidates if c.backend == "vendor"]
    assert len(vendor) == 1 and vendor[0].config == TorchEmbeddingBagConfig()
    assert str(vendor[0].config) == "torch.nn.functional.embedding_bag"
    assert dataclasses.astuple(vendor[0].config) == ()  # no knobs: the dispatch passes []
    assert vendor[0].bound == "compute"  # element-rate bound
    assert vendor[0].time_us / 1e3 == pytest.approx(ms, rel=0.12)
    assert d.choice.time_us <= vendor[0].time_us  # auto is never knowingly slower than torch


def test_vendor_rate_scales_with_sms_and_clock():
    p = problem(rows=10_000_000, bags=65536, bag_size=32)
    times = {name: next(c for c in decide("embedding_bag", p, get_hardware(name)).candidates
                        if c.backend == "vendor") for name in ("H200", "MI350X")}
    assert "measured on the H200" in times["H200"].detail and "scaled" in times["MI350X"].detail
    assert times["MI350X"].time_us < times["H200"].time_us


def test_only_the_forward_has_a_vendor_candidate():
    for op in OPS[1:]:
        assert all(c.backend != "vendor" for c in decide(op, problem(psw=True), H200).candidates)


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
    # No native kernel takes 2-byte aligned fp32 rows; torch's op does, and compiles nothing.
    assert d.choice.backend == ("native" if vec else "vendor")


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
    assert costs.expected_distinct(1_000_000, 1_638_400) == pytest.approx(1e6 * (1 - math.exp(-1.6384)))
    assert costs.expected_distinct(0, 10) == 0.0


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
        assert abs(eb.native_registers("embedding_bag", p, H200, c) - ptxas) <= costs.REGISTER_GRANULE


# --- buckets: what the C++ dispatch computes on every call ---------------------------------------

@pytest.mark.parametrize("p, key", [
    # 65536 bags = 2^16: 32 half octaves; 32/bag = 2^5: 20 quarter octaves; 10M x 512 B = 2^32.25 B.
    (problem(10_000_000, 128, 65536, 32), (0, 4, 128, 16, 0, 0, 32, 20, 64)),
    (problem(20_000_000, 64, 131072, 16, "fp16", "int32", "mean"), (1, 3, 64, 16, 1, 0, 34, 16, 62)),
    (problem(1_000, 16, 300, 1, "bf16", psw=True, align=4), (2, 4, 16, 4, 0, 1, 16, 0, 29)),
    (EmbeddingBagProblem(1_000_000, 256, 16384, 1_638_400), (0, 4, 256, 16, 0, 0, 28, 26, 59)),
    (EmbeddingBagProblem(1, 1, 1, 3), (0, 4, 1, 16, 0, 0, 0, 6, 4)),  # 3/bag: 4*log2(3) = 6.34
    (EmbeddingBagProblem(100, 128, 10, 5), (0, 4, 128, 16, 0, 0, 6, -4, 31)),  # half a lookup per bag
    (EmbeddingBagProblem(100, 128, 0, 0), (0, 4, 128, 16, 0, 0, -1, -1000, 31)),
    (EmbeddingBagProblem(100, 128, 10, 0), (0, 4, 128, 16, 0, 0, 6, -1000, 31)),
    (EmbeddingBagProblem(0, 128, 10, 100), (0, 4, 128, 16, 0, 0, 6, 13, -1)),
    (EmbeddingBagProblem(100, 0, 10, 100), (0, 4, 0, 16, 0, 0, 6, 13, -1)),
])
def test_bucket_keys_of_known_problems(p, key):
    assert all(FAMILY.bucket_key(op, p) == key for op in OPS)  # one key for all three ops


def test_bucket_edges_are_exact_at_powers_of_two():
    below, at = problem(bags=1023, bag_size=4), problem(bags=1024, bag_size=4)
    assert FAMILY.bucket_key("embedding_bag", below)[6] == 19 and FAMILY.bucket_key("embedding_bag", at)[6] == 20
    # 2 lookups per bag exactly: 4 quarter octaves; one lookup fewer falls below.
    assert FAMILY.bucket_key("embedding_bag", EmbeddingBagProblem(10, 4, 1000, 2000))[7] == 4
    assert FAMILY.bucket_key("embedding_bag", EmbeddingBagProblem(10, 4, 1000, 1999))[7] == 3


def test_representatives_of_known_keys():
    r = FAMILY.problem_from_key("embedding_bag", (0, 4, 128, 16, 0, 0, 32, 20, 64))
    assert r == EmbeddingBagProblem(9_975_792, 128, 77_936, 2_719_674, "fp32", "int64", "sum", False, 16)
    r = FAMILY.problem_from_key("embedding_bag", (1, 3, 64, 8, 1, 1, -1, -1000, -1))
    assert r == EmbeddingBagProblem(0, 64, 0, 0, "fp16", "int32", "mean", True, 8)


@pytest.mark.parametrize("op", OPS)
def test_representatives_fall_in_their_own_bucket(op):
    rng = random.Random(7)
    for _ in range(500):
        key = FAMILY.bucket_key(op, FAMILY.sample(op, rng))
        assert FAMILY.bucket_key(op, FAMILY.problem_from_key(op, key)) == key


def test_regret_of_buckets_is_small_on_a_fixed_seed_sweep():
    for name in ("H200", "MI350X"):
        for r in sweep(FAMILY, get_hardware(name), samples=150, seed=3):
            assert r.samples == 150 and r.mean <= 0.01 and r.share_over <= 0.05, (name, r)
            assert FAMILY.bucket_key(r.op, r.worst) == r.worst_key


def test_regret_is_zero_on_representatives():
    reps = [FAMILY.problem_from_key("embedding_bag", FAMILY.bucket_key("embedding_bag", p))
            for p in (problem(), problem(rows=5_000_000, dim=64, bags=20_000, bag_size=7, dtype="bf16"))]
    r = regret("embedding_bag", reps, H200)
    assert r.mean == r.max == 0.0 and r.share_over == 0.0


# --- explain: what the dispatch would run for a call ----------------------------------------------

def explain_call(*args, **kwargs):
    from mymetaops import explain
    return explain("embedding_bag", *args, print_result=False, **kwargs)


def test_explain_builds_the_problem_from_meta_tensors_and_decides_for_the_bucket(capsys):
    torch = pytest.importorskip("torch")
    from mymetaops import explain
    weight = torch.empty(1_000_000, 64, dtype=torch.bfloat16, device="meta")
    indices = torch.empty(40_000, dtype=torch.int32, device="meta")
    offsets = torch.empty(2_000, dtype=torch.int32, device="meta")
    psw = torch.empty(40_000, device="meta")
    decisions = explain("embedding_bag", indices, weight, offsets, mode="sum", per_sample_weights=psw,
                        device="MI350X", backward=True, backend="auto")
    exact = EmbeddingBagProblem(1_000_000, 64, 2_000, 40_000, "bf16", "int32", "sum", True, 16)
    key = FAMILY.bucket_key("embedding_bag", exact)
    assert [d.op for d in decisions] == list(OPS)
    assert all(d.problem == FAMILY.problem_from_key(d.op, key) for d in decisions)  # what runs
    assert decisions[0] is decide("embedding_bag", FAMILY.problem_from_key("embedding_bag", key),
                                  get_hardware("MI350X"))
    out = capsys.readouterr().out
    assert out.count("choice:") == 3 and str(key) in out and FAMILY.describe(exact) in out
    assert "at the exact problem the choice takes" in out


def test_explain_call_forms():
    torch = pytest.importorskip("torch")
    weight = torch.empty(1000, 32, device="meta")
    # 2-D input: one bag per row; include_last_offset: one offset fewer bags; mixed widths: int64.
    d = explain_call(torch.empty(64, 10, dtype=torch.int64, device="meta"), weight, device="H200")
    assert FAMILY.bucket_key("embedding_bag", EmbeddingBagProblem(1000, 32, 64, 640, mode="mean")) == \
        FAMILY.bucket_key("embedding_bag", d[0].problem)
    offsets = torch.empty(101, dtype=torch.int64, device="meta")
    d = explain_call(torch.empty(5000, dtype=torch.int32, device="meta"), weight, offsets, None, 2.0, False,
                     "sum", include_last_offset=True, device="H200")
    assert d[0].problem == FAMILY.problem_from_key(
        "embedding_bag", FAMILY.bucket_key("embedding_bag", EmbeddingBagProblem(1000, 32, 100, 5000)))


def test_explain_alignment_of_real_tensors():
    torch = pytest.importorskip("torch")
    table = torch.zeros(100, 33)  # 132-byte rows: 4-byte aligned
    indices, offsets = torch.zeros(10, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    assert FAMILY.problem_from_call("embedding_bag", indices, table, offsets).align_bytes == 4
    view = torch.zeros(100, 34)[:, 1:33]  # 4-byte offset into a 136-byte stride
    assert FAMILY.problem_from_call("embedding_bag", indices, view, offsets).align_bytes == 4
    assert FAMILY.problem_from_call("embedding_bag", indices, torch.zeros(100, 32), offsets).align_bytes == 16
    # The backward gathers rows of grad_output, a fresh contiguous tensor.
    p = FAMILY.problem_from_call("embedding_bag", indices, view, offsets)
    assert FAMILY.backward_ops("embedding_bag", p)[0][1].align_bytes == 16


def test_explain_errors():
    torch = pytest.importorskip("torch")
    from mymetaops import explain
    with pytest.raises(ValueError, match="unknown op"):
        explain("jagged_softmax", device="H200")
    weight = torch.empty(10, 4, device="meta")
    with pytest.raises(ValueError, match="no standalone op"):
        explain("embedding_bag", torch.empty(4, 2, dtype=torch.int64, device="meta"), weight, device="H200",
                backward=True, backend="vendor", print_result=False)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no GPU here"):
            explain("embedding_bag", torch.empty(4, 2, dtype=torch.int64, device="meta"), weight,
                    print_result=False)


def test_bucketed_text_names_the_bucket_and_the_exact_problem():
    b = decide_bucketed("embedding_bag", problem(bags=5000), H200)
    text = format_bucketed(b)
    assert str(b.key) in text and family_of("embedding_bag").describe(b.problem) in text
    assert family_of("embedding_bag").describe(b.decision.problem) in text


# --- command line --------------------------------------------------------------------------------

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "mymetaops.model", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_explains_a_device_that_is_not_here():
    r = run_cli("explain", "embedding_bag", "--device", "MI350X", "--rows", "10000000", "--dim", "128",
                "--bags", "65536", "--bag-size", "32", "--dtype", "fp32", "--backward")
    assert r.returncode == 0, r.stderr
    assert "MI350X" in r.stdout and "embedding_bag_backward" in r.stdout and r.stdout.count("choice:") == 2
    assert "bucket (0, 4, 128, 16, 0, 0, 32, 20, 64)" in r.stdout


def test_cli_forced_vendor_backward_is_a_clear_error():
    r = run_cli("explain", "embedding_bag_backward", "--device", "H200", "--rows", "1000", "--dim", "64",
                "--bags", "100", "--bag-size", "3", "--backend", "vendor")
    assert r.returncode == 2 and "no vendor candidate" in r.stderr and "native, triton" in r.stderr


def test_cli_regret_report():
    r = run_cli("regret", "embedding_bag", "--device", "MI350X", "--samples", "40")
    assert r.returncode == 0, r.stderr
    assert all(op in r.stdout for op in OPS) and "mean" in r.stdout
