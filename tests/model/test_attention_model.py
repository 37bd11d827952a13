"""The attention family's model: its candidates (native kernels where they run; Triton tiles that
compile without spills, the 64-row forward tiles not with HSTU's masks), why a native or vendor
candidate is absent, the work
it counts from the mean length, and the bucket round trip the GPU path caches decisions on."""
from __future__ import annotations

import pytest

from mymetaops.model import HARDWARE, decide, get_family
from mymetaops.model import attention as a


def _problem(op=a.HSTU, masked=False, dim=128, dtype="bf16"):
    return a.AttentionProblem(op, 64, 1024, 35762, 4, dim, dim, dtype, True, masked)


@pytest.mark.parametrize("op", [a.HSTU, a.SOFTMAX])
def test_forward_candidates_are_the_measured_tiles(op):
    d = decide(op, _problem(op), HARDWARE["H200"])
    triton = [c for c in d.candidates if c.backend == "triton"]
    assert {str(c.config) for c in triton} == {str(c) for c in a.NVIDIA_FORWARD}


def test_masked_hstu_leaves_out_the_tiles_that_spill():
    d = decide(a.HSTU, _problem(masked=True), HARDWARE["H200"])
    assert a.MASKED_EXCLUDED not in [c.config for c in d.candidates]


@pytest.mark.parametrize("op,problem", [(a.HSTU_BACKWARD, _problem(a.HSTU_BACKWARD, masked=True)),
                                        (a.HSTU, _problem(dim=256)), (a.SOFTMAX, _problem(a.SOFTMAX, dtype="fp32"))])
def test_elsewhere_the_kernels_defaults_run(op, problem):
    d = decide(op, problem, HARDWARE["H200"])
    assert [c.config.kernel_defaults for c in d.candidates] == [True]
    assert decide(op, problem, HARDWARE["MI300X"]).choice.config.kernel_defaults


@pytest.mark.parametrize("op,problem,why", [
    (a.HSTU_BACKWARD, _problem(a.HSTU_BACKWARD, masked=True), "masks run on Triton only"),
    (a.SOFTMAX_BACKWARD, _problem(a.SOFTMAX_BACKWARD, dtype="fp32"), "takes bf16 / fp16"),
    (a.HSTU, _problem(masked=True), "masks run on Triton only"),
    (a.SOFTMAX, _problem(a.SOFTMAX, dim=40), "not Dqk 40"),
])
def test_explain_says_why_no_native_kernel_runs_it(op, problem, why):
    d = decide(op, problem, HARDWARE["H200"])
    assert all(c.backend == "triton" for c in d.candidates)
    assert why in dict(d.absent)["native"]
    assert "no jagged attention" in dict(d.absent)["vendor"]
    with pytest.raises(ValueError, match="no native candidate"):
        decide(op, problem, HARDWARE["H200"], "native")


@pytest.mark.parametrize("op,dim", [(a.HSTU_BACKWARD, 64), (a.HSTU_BACKWARD, 128), (a.SOFTMAX_BACKWARD, 64),
                                    (a.SOFTMAX_BACKWARD, 128)])
def test_the_native_dkdv_kernel_is_chosen_for_unmasked_backwards_on_hopper(op, dim):
    """Native dK / dV beside Triton's dq, beside the native dQ, or with dQ fused in (all three
    candidates), costed at their speed-up over the Triton backward: chosen on the H200; on AMD the
    backward stays Triton's and explain says why."""
    p = _problem(op, dim=dim)
    d = decide(op, p, HARDWARE["H200"])
    assert d.choice.backend == "native" and "hopper_dkdv" in d.choice.config.name
    native = [c.config for c in d.candidates if c.backend == "native"]
    assert sorted((c.kernel, c.name) for c in native) == [(i, k.name) for i, k in enumerate(a.NATIVE_BACKWARD["nvidia"])
                                                        if not k.withheld_for(op)]
    assert [c.backend for c in d.candidates].count("triton") == 1
    amd = decide(op, p, HARDWARE["MI300X"])
    assert amd.choice.backend == "triton" and "no native dK / dV kernel" in dict(amd.absent)["native"]


@pytest.mark.parametrize("op", [a.HSTU, a.SOFTMAX])
def test_native_kernels_are_candidates_where_they_run(op):
    p = _problem(op)
    for vendor, hw in (("nvidia", HARDWARE["H200"]), ("amd", HARDWARE["MI300X"])):
        rows = [k for k in a.NATIVE_KERNELS[vendor]
                if op in k.ops and p.dqk in k.dims and not a._row_refusal(k, op, p, hw)]
        native = [c for c in decide(op, p, hw).candidates if c.backend == "native"]
        assert sorted(c.config.name for c in native) == sorted(k.name for k in rows)
        assert sorted(c.config.kernel for c in native) == [a.NATIVE_KERNELS[vendor].index(k) for k in rows]


def test_the_refusals_name_what_the_native_kernels_lack():
    family = get_family("attention")
    saved = a.NATIVE_KERNELS["nvidia"]
    a.NATIVE_KERNELS["nvidia"] = (a.NativeKernel("test_kernel_d128", (a.HSTU,), (128,), 128, 128, (0.9,)),)
    try:
        for p, why in ((_problem(masked=True), "masks run on Triton only"),
                       (_problem(a.SOFTMAX, dtype="fp32"), "bf16 / fp16"), (_problem(dim=40), "not Dqk 40")):
            assert why in family.native_refusal(p.op, p, HARDWARE["H200"])
        assert family.native_refusal(a.HSTU, _problem(), HARDWARE["H200"]) == ""
    finally:
        a.NATIVE_KERNELS["nvidia"] = saved


@pytest.mark.parametrize("op,n,dim,tiles", [
    (a.HSTU, 256, 64, "64x64"), (a.SOFTMAX, 256, 64, "64x64"), (a.HSTU, 512, 128, "64x64"),
    (a.SOFTMAX, 256, 128, "64x64"), (a.SOFTMAX, 512, 128, "128x128"), (a.HSTU, 1024, 128, "128x128"),
    (a.HSTU, 1024, 64, "128x128")])
def test_each_hopper_tiling_is_offered_where_it_measured_faster(op, n, dim, tiles):
    """run 36: 64 x 64 (a pipe per consumer warpgroup) up to N = 512 (softmax at D = 128: 256),
    128 x 128 above; the other tiling is refused."""
    p = a.AttentionProblem(op, 256, n, 256 * n // 2, 4, dim, dim)
    d = decide(op, p, HARDWARE["H200"])
    native = [c.config.name for c in d.candidates if c.backend == "native"]
    assert native == [f"hopper_d{dim}_{tiles}"]
    other = next(k for k in a.NATIVE_KERNELS["nvidia"] if k.name == f"hopper_d{dim}_{'128x128' if tiles == '64x64' else '64x64'}")
    assert a._row_refusal(other, op, p, HARDWARE["H200"])  # its range, or withheld (softmax D = 64, 128 x 128)


def test_a_native_kernel_is_chosen_when_predicted_faster():
    row = a.NativeKernel("test_kernel_d128", (a.HSTU,), (128,), 128, 128, (0.9,))
    family = get_family("attention")
    saved = a.NATIVE_KERNELS["nvidia"]
    a.NATIVE_KERNELS["nvidia"] = (row,)
    try:
        candidates = list(family.candidates(a.HSTU, _problem(), HARDWARE["H200"]))
    finally:
        a.NATIVE_KERNELS["nvidia"] = saved
    native = [e for backend, c, e in candidates if backend == "native"]
    triton = [e for backend, c, e in candidates if backend == "triton"]
    assert len(native) == 1 and native[0].time_us < min(e.time_us for e in triton)


def test_work_from_the_mean_length_matches_uniform_lengths():
    # bench/attention's B64 N1024 H4 D128 draw: 25.3 GFLOP of useful forward work (the estimate,
    # 27.3, counts (4/3) m^2 per sequence: 8% high at this draw)
    assert _problem().flops == pytest.approx(25.3e9, rel=0.10)
    assert _problem(a.HSTU_BACKWARD).flops == pytest.approx(2.5 * _problem().flops)


@pytest.mark.parametrize("op", a.OPS)
def test_bucket_round_trip(op):
    family = get_family("attention")
    p = _problem(op)
    key = family.bucket_key(op, p)
    assert family.bucket_key(op, family.problem_from_key(op, key)) == key


@pytest.mark.parametrize("op", [a.HSTU, a.SOFTMAX])
def test_hopper_kernel_runs_batches_of_many_sequences(op):
    # bench/attention regret.py, run 9: at B64 N1024 H4 D128 (uniform lengths) the Hopper kernel
    # ran 1.00-1.005x the best Triton tile and has no JIT: the model chooses it.
    d = decide(op, _problem(op), HARDWARE["H200"])
    assert d.choice.backend == "native" and d.choice.config.name == "hopper_d128_128x128"


@pytest.mark.parametrize("problem,why", [
    # one dominant sequence (Zipf-like lengths: T / B far below N): the chain of 128 x 128 steps
    (a.AttentionProblem(a.HSTU, 64, 1024, 2000, 4, 128, 128), "against a chain of 8.0"),
    # one head, few sequences: too few steps per SM
    (a.AttentionProblem(a.SOFTMAX, 32, 2048, 35000, 1, 128, 128), "against a chain of 16.0"),
])
def test_hopper_kernel_is_not_offered_where_it_measured_slower(problem, why):
    d = decide(problem.op, problem, HARDWARE["H200"])
    assert d.choice.backend == "triton"
    assert why in dict(d.absent)["native"]


@pytest.mark.parametrize("op", [a.HSTU, a.SOFTMAX])
def test_candidates_tied_at_the_host_floor_go_to_the_fastest_kernel(op):
    """Tiny problems: every candidate costs the public path's host floor; the choice is the one whose
    kernel is predicted fastest (not the first listed), and the reason says so."""
    p = a.AttentionProblem(op, 128, 256, 16448, 8, 32, 32)
    d = decide(op, p, HARDWARE["H200"])
    assert len({c.time_us for c in d.candidates}) == 1 and len(d.candidates) > 1
    assert all(0 < c.kernel_us < c.time_us for c in d.candidates)
    assert d.choice.kernel_us == min(c.kernel_us for c in d.candidates)
    assert "tied at the host path's" in d.reason


def test_above_the_host_floor_kernel_time_is_the_estimate():
    d = decide(a.HSTU, _problem(), HARDWARE["H200"])
    assert all(c.kernel_us == c.time_us for c in d.candidates if c.time_us > a.HOST_US["forward"])


def test_the_fused_backward_pays_for_its_fp32_dq_buffer(monkeypatch):
    """The fused row's time holds its dQ buffer's passes (zero, read, convert: pass_bytes per
    (row, head, dim)) at the HBM rate: the same problem's estimate grows by exactly that."""
    p = _problem(a.HSTU_BACKWARD, dim=128)
    hw = HARDWARE["H200"]
    rows = a.NATIVE_BACKWARD["nvidia"]
    fused = rows[a.NATIVE_FUSED]
    assert fused.pass_bytes > 0
    c = a.NativeAttentionConfig(a.NATIVE_FUSED, fused.name)
    with_passes = a._estimate(p, hw, c, fused.efficiency[0]).kernel_us
    monkeypatch.setitem(a.NATIVE_BACKWARD, "nvidia",
                        tuple(a.replace(r, pass_bytes=0) if r is fused else r for r in rows))
    without = a._estimate(p, hw, c, fused.efficiency[0]).kernel_us
    expected = p.total * p.heads * p.dqk * fused.pass_bytes / (hw.achievable_hbm_tbps * 1e6)
    assert with_passes - without == pytest.approx(expected)


def test_a_withheld_backward_row_is_no_candidate(monkeypatch):
    rows = a.NATIVE_BACKWARD["nvidia"]
    monkeypatch.setitem(a.NATIVE_BACKWARD, "nvidia", tuple(
        a.replace(r, withheld="not measured") if i == a.NATIVE_FUSED else r for i, r in enumerate(rows)))
    problem = a.replace(_problem(a.HSTU_BACKWARD, dim=128), batch=77)  # not in decide's memo
    d = decide(a.HSTU_BACKWARD, problem, HARDWARE["H200"])
    names = [c.config.name for c in d.candidates if c.backend == "native"]
    assert rows[a.NATIVE_FUSED].name not in names and len(names) == len(rows) - 1
