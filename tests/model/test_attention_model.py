"""The attention family's model: its candidates (Triton tiles that compile without spills; the
64-row forward tiles not with HSTU's masks), why there is no native or vendor candidate, the work
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
    assert {str(c.config) for c in d.candidates} == {str(c) for c in a.NVIDIA_FORWARD}
    assert all(c.backend == "triton" for c in d.candidates)


def test_masked_hstu_leaves_out_the_tiles_that_spill():
    d = decide(a.HSTU, _problem(masked=True), HARDWARE["H200"])
    assert a.MASKED_EXCLUDED not in [c.config for c in d.candidates]


@pytest.mark.parametrize("op,problem", [(a.HSTU_BACKWARD, _problem(a.HSTU_BACKWARD)), (a.HSTU, _problem(dim=256)),
                                        (a.SOFTMAX, _problem(a.SOFTMAX, dtype="fp32"))])
def test_elsewhere_the_kernels_defaults_run(op, problem):
    d = decide(op, problem, HARDWARE["H200"])
    assert [c.config.kernel_defaults for c in d.candidates] == [True]
    assert decide(op, problem, HARDWARE["MI300X"]).choice.config.kernel_defaults


@pytest.mark.parametrize("op", a.OPS)
def test_explain_says_there_is_no_native_kernel(op):
    d = decide(op, _problem(op), HARDWARE["H200"])
    absent = dict(d.absent)
    assert "no native attention kernel is built yet" in absent["native"]
    assert "no native attention kernel is built yet" in d.reason
    assert "no jagged attention" in absent["vendor"]
    with pytest.raises(ValueError, match="no native candidate"):
        decide(op, _problem(op), HARDWARE["H200"], "native")


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
