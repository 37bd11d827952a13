"""The jagged family's model for the bmm ops: which problems the native grouped GEMMs take (and why
not, in `explain`), the bytes floor of every bmm estimate, and the alignment the C++ glue computes."""
from __future__ import annotations

import pytest
import torch

from mymetaops.model import HARDWARE, decide
from mymetaops.model import jagged as j


def _bmm(op=j.DENSE_BMM, dtype="bf16", align=16, levels=1):
    return j.JaggedProblem(op, 1024, 1024, 531598, 256, 256, dtype, "int64", align, levels)


@pytest.mark.parametrize("op", j.BMM_OPS)
@pytest.mark.parametrize("device,kernel", [("H200", "grouped_128x256x64_coop"), ("MI300X", "mfma_128x128x32")])
def test_native_grouped_gemm_is_a_candidate(op, device, kernel):
    d = decide(op, _bmm(op), HARDWARE[device])
    native = [c for c in d.candidates if c.backend == "native"]
    assert [str(c.config) for c in native] == [kernel]


@pytest.mark.parametrize("problem,device,reason", [
    (_bmm(dtype="fp32"), "H200", "bf16 / fp16"),
    (_bmm(align=2), "H200", "16-byte aligned"),
    (_bmm(), "B200", "built for sm_90a"),
])
def test_native_refusals_say_why(problem, device, reason):
    d = decide(problem.op, problem, HARDWARE[device])
    assert not any(c.backend == "native" for c in d.candidates)
    assert reason in dict(d.absent)["native"]


@pytest.mark.parametrize("op", j.BMM_OPS)
@pytest.mark.parametrize("shape", [(1024, 1024, 531598), (4096, 256, 530622), (64, 32, 1000)])
def test_no_bmm_estimate_beats_moving_its_bytes(op, shape):
    batch, max_length, total = shape
    p = j.JaggedProblem(op, batch, max_length, total, 256, 256)
    hw = HARDWARE["H200"]
    floor = j.bmm_bytes(p) / (hw.achievable_hbm_tbps * 1e6)
    for c in decide(op, p, hw).candidates:
        assert c.time_us >= floor * (1 - 1e-9), c


def test_bmm_alignment_follows_the_unit_stride():
    x = torch.empty(10, 16, dtype=torch.bfloat16)
    y = torch.empty(3, 16, 24, dtype=torch.bfloat16)
    assert j.bmm_alignment(x, y) == 16
    assert j.bmm_alignment(x, torch.empty(3, 24, 16, dtype=torch.bfloat16).transpose(1, 2)) == 16  # y^T
    assert j.bmm_alignment(x, torch.empty(3, 16, 12, dtype=torch.bfloat16)) == 8  # N = 12: 24-byte rows
    assert j.bmm_alignment(torch.empty(16, 10, dtype=torch.bfloat16).t(), y) == 1  # x without a unit stride
    assert j.bmm_alignment(x, torch.empty(3, 16, 24, 2, dtype=torch.bfloat16)[..., 0]) == 1  # y neither
    assert j.bmm_alignment(torch.empty(161, dtype=torch.bfloat16)[1:].view(10, 16), y) == 2  # base 2 bytes off
