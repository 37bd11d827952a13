"""Triton jagged softmax attention (mymetaops/triton/jagged_attention.py): out, lse and dq, dk, dv
against the float64 reference of softmax_reference.py, and the launchers' argument handling.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (set below, before triton is
imported, as conftest.py does), on GPU tensors otherwise; `gpu`-marked tests need a GPU. The
interpreter's tl.dot on bf16 operands is wrong (Triton 3.8), so bf16 runs on a GPU only. Every
output allocation is NaN-filled (the launchers' `_new_output` is patched), so an element the
kernels leave unwritten fails.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from softmax_reference import jagged_attention_reference  # noqa: E402

from mymetaops.triton import common  # noqa: E402
from mymetaops.triton import jagged_attention as ja  # noqa: E402

C = ja.AttentionConfig
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = (torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu))
# |actual - expected| <= TOL * max|expected| (per tensor): p, ds and the outputs are rounded to the
# dtype once each (fp16 2^-11, bf16 2^-8), with room for fp32 accumulation over ~100 rows (the
# interpreter's errors reach ~0.4 of these bounds). lse is fp32 from exact products whatever the
# dtype: LSE_TOL * max(1, max|lse|).
TOL = {torch.float32: 4e-6, torch.float16: 1.5e-3, torch.bfloat16: 1.2e-2}
LSE_TOL = 2e-6

# name: (lengths, H, Dqk, Dv, offsets dtype, rows before offsets[0], rows after offsets[B],
#        max_seq_len or None for max(lengths), fwd config, dkdv config, dq config; None: defaults)
CASES = {
    # Empty and length-1 sequences, rows outside the sequences, odd Dqk, BLOCK_M != BLOCK_N.
    "mixed_d40": ([37, 0, 1, 20, 16], 2, 40, 16, torch.int64, 2, 3, None, C(32, 16, 4, 1), C(16, 32, 4, 1),
                  C(32, 16, 4, 1)),
    # One sequence of 127 rows (not a tile multiple), H = 1, default tiles.
    "single_127_h1": ([127], 1, 32, 32, torch.int32, 0, 0, None, None, None, None),
    # Head dims of 3 (padded to 16), lengths around the 16-row tiles.
    "d3": ([5, 17, 16, 3], 3, 3, 3, torch.int32, 0, 1, None, C(16, 16, 4, 1), C(16, 16, 4, 1), C(16, 16, 4, 1)),
    # Dqk != Dv, both powers of two (no head-dim mask); max_seq_len above every length.
    "dqk64_dv32": ([33, 48], 2, 64, 32, torch.int64, 1, 0, 70, C(16, 32, 4, 1), C(32, 16, 4, 1), C(16, 32, 4, 1)),
    # Only empty sequences: every row is outside (out = 0, lse = 0, gradients 0).
    "all_empty": ([0, 0], 2, 16, 16, torch.int64, 1, 2, 0, C(16, 16, 4, 1), C(16, 16, 4, 1), C(16, 16, 4, 1)),
}


@pytest.fixture(autouse=True)
def nan_outputs(monkeypatch):
    def poisoned(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(ja, "_new_output", poisoned)


def make_offsets(lengths, index_dtype, before):
    offsets = torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0) + before
    return offsets.to(index_dtype).to(DEVICE)


def rows(gen, total, heads, dim, dtype, strided=False):
    """Random [total, H, dim] on DEVICE; `strided`: a slice of a [total, H, dim + 7] tensor (row
    stride H * (dim + 7), head stride dim + 7) starting at column 3."""
    if strided:
        wide = torch.randn(total, heads, dim + 7, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
        return wide[:, :, 3:3 + dim]
    return torch.randn(total, heads, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)


def assert_close(got, ref, tol, what):
    got = got.detach().double().cpu()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    bound = tol * max(ref.abs().max().item() if ref.numel() else 0.0, 1e-3)
    err = (got - ref).abs()
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} off by more than {bound:.3g}, first at "
                           f"{bad.nonzero()[0].tolist()}: {got[bad][0].item()} vs {ref[bad][0].item()}")


def check(q, k, v, offsets, max_seq_len, causal, dtype, scale=None, configs=(None, None, None), seed=0):
    """Run forward and backward; compare out, lse, dq, dk, dv with the reference."""
    gen = torch.Generator().manual_seed(seed + 1)
    qr, kr, vr = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    ref_out, ref_lse = jagged_attention_reference(qr, kr, vr, offsets.cpu(), max_seq_len, causal, scale)
    grad = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64).to(dtype)
    if ref_out.requires_grad:
        ref_out.backward(grad.double())
    refs = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (qr, kr, vr)]

    fwd, dkdv, dq_config = configs
    out, lse = ja.jagged_attention_fwd(q, k, v, offsets, max_seq_len, causal, scale, fwd)
    assert out.dtype == dtype and lse.dtype == torch.float32 and out.is_contiguous()
    assert_close(out, ref_out.detach(), TOL[dtype], "out")
    assert_close(lse, ref_lse.detach(), LSE_TOL * max(1.0, ref_lse.abs().max().item() if lse.numel() else 1.0),
                 "lse")
    grads = ja.jagged_attention_bwd(grad.to(DEVICE), q, k, v, out, lse, offsets, max_seq_len, causal, scale, dkdv,
                                    dq_config)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, refs):
        assert got.dtype == dtype
        assert_close(got, ref, TOL[dtype], name)
    return out, lse, grads


def case_inputs(name, dtype, strided=False):
    lengths, heads, dqk, dv, index_dtype, before, after, max_seq_len, *configs = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)) + 31 * (dtype == torch.float16))
    offsets = make_offsets(lengths, index_dtype, before)
    total = before + sum(lengths) + after
    q = rows(gen, total, heads, dqk, dtype, strided)
    k = rows(gen, total, heads, dqk, dtype)
    v = rows(gen, total, heads, dv, dtype)
    return q, k, v, offsets, max(lengths) if max_seq_len is None else max_seq_len, tuple(configs)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_attention(name, dtype, causal):
    q, k, v, offsets, max_seq_len, configs = case_inputs(name, dtype)
    out, lse, grads = check(q, k, v, offsets, max_seq_len, causal, dtype, configs=configs)
    # Rows outside every sequence: exactly 0.
    first, last = int(offsets[0]), int(offsets[-1])
    for t in (out, *grads):
        assert (t[:first] == 0).all() and (t[last:] == 0).all()
    assert (lse[:, :first] == 0).all() and (lse[:, last:] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_custom_scale_strided_q(dtype):
    """scale given; q a slice of a wider tensor (row / head strides passed, no copy)."""
    q, k, v, offsets, max_seq_len, configs = case_inputs("mixed_d40", dtype, strided=True)
    assert not q.is_contiguous() and q.stride(2) == 1
    check(q, k, v, offsets, max_seq_len, True, dtype, scale=0.37, configs=configs)


def test_non_contiguous_last_dim():
    """k with a strided last dim (a permute) is copied to contiguous; v a head slice."""
    gen = torch.Generator().manual_seed(5)
    lengths, heads, d = [19, 6], 2, 16
    offsets = make_offsets(lengths, torch.int32, 0)
    total = sum(lengths)
    q = rows(gen, total, heads, d, torch.float32)
    k = torch.randn(total, d, heads, generator=gen, dtype=torch.float64).float().to(DEVICE).permute(0, 2, 1)
    v = torch.randn(total, heads + 1, d, generator=gen, dtype=torch.float64).float().to(DEVICE)[:, 1:]
    assert k.stride(2) != 1 and not v.is_contiguous()
    check(q, k, v, offsets, max(lengths), False, torch.float32, configs=(C(16, 16, 4, 1),) * 3)


def test_autograd_wrapper_and_determinism():
    """jagged_attention's autograd gradients equal the launcher's; two backward runs are bitwise
    equal (no atomics)."""
    q, k, v, offsets, max_seq_len, _ = case_inputs("d3", torch.float16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = ja.jagged_attention(*leaves, offsets, max_seq_len, True, None)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype).to(DEVICE)
    out.backward(grad)
    fwd_out, lse = ja.jagged_attention_fwd(q, k, v, offsets, max_seq_len, True)
    assert torch.equal(out.detach(), fwd_out)
    first = ja.jagged_attention_bwd(grad, q, k, v, fwd_out, lse, offsets, max_seq_len, True)
    second = ja.jagged_attention_bwd(grad, q, k, v, fwd_out, lse, offsets, max_seq_len, True)
    for leaf, a, b in zip(leaves, first, second):
        assert torch.equal(a, b) and torch.equal(leaf.grad, a)


def test_grid_in_several_launches(monkeypatch):
    """A grid past the runtime's limit goes out in chunks (program_base): 5 programs a launch."""
    monkeypatch.setattr(common, "max_programs", lambda device, num_warps: 5)
    q, k, v, offsets, max_seq_len, configs = case_inputs("mixed_d40", torch.float32)
    check(q, k, v, offsets, max_seq_len, True, torch.float32, configs=configs)


def test_no_sequences():
    """B = 0: every row is outside; no program runs, the launcher zeroes the outputs."""
    q = rows(torch.Generator().manual_seed(1), 3, 2, 8, torch.float32)
    offsets = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    out, lse = ja.jagged_attention_fwd(q, q, q, offsets, 4)
    assert (out == 0).all() and (lse == 0).all()
    grads = ja.jagged_attention_bwd(q, q, q, q, out, lse, offsets, 4)
    assert all((g == 0).all() for g in grads)


@pytest.mark.parametrize("offsets,total,max_len,record", [
    ([0, 3, 37], 37, 40, [0, 0, 0, 0, 0]),
    ([0], 0, 4, [0, 0, 0, 0, 0]),
    ([3], 3, 4, [7, 11, 0, 3, 0]),  # (code, op, position, value, bound): B = 0, the check launch
    ([1, 3, 5], 5, 4, [7, 11, 0, 1, 0]),
    ([0, 3, 4], 5, 4, [7, 11, 2, 4, 5]),  # the last offset != total_L
    ([0, 20, 2, 37], 37, 40, [3, 11, 2, 2, 0]),
    ([0, 5, 38], 38, 32, [6, 11, 1, 33, 32]),
    ([0, 2, 2], 2, 0, [6, 11, 0, 2, 0]),  # max_seq_len = 0: still one program per (sequence, head)
])
def test_forward_records_bad_offsets(offsets, total, max_len, record):
    """The forward launch with an error record checks seq_offsets (several heads and q blocks)."""
    q = rows(torch.Generator().manual_seed(4), total, 2, 16, torch.float32)
    errors = torch.zeros(8, dtype=torch.int64, device=DEVICE)
    ja.jagged_attention_fwd(q, q, q, torch.tensor(offsets, device=DEVICE), max_len, config=C(16, 16, 4, 1),
                            errors=errors, error_op=11)
    assert errors.tolist()[1:6] == record


def test_default_config():
    """The defaults are valid tiles for every supported head dim, kernel, dtype and vendor."""
    for vendor in ("nvidia", "amd"):
        for kernel in ("fwd", "dkdv", "dq"):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                for d in (1, 3, 32, 40, 64, 100, 128, 256):
                    ja._check_config(ja.default_config(d, 64, dtype, kernel, vendor))
    with pytest.raises(ValueError):
        ja.default_config(64, 64, torch.float16, "bwd")


def test_bad_arguments():
    q = rows(torch.Generator().manual_seed(2), 4, 1, 16, torch.float32)
    good = torch.tensor([0, 4], dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="seq_offsets"):
        ja.jagged_attention_fwd(q, q, q, good.float(), 4)
    with pytest.raises(ValueError, match="k must be"):
        ja.jagged_attention_fwd(q, q.half(), q, good, 4)
    with pytest.raises(ValueError, match="max_seq_len"):
        ja.jagged_attention_fwd(q, q, q, good, -1)
    with pytest.raises(ValueError, match="block_m"):
        ja.jagged_attention_fwd(q, q, q, good, 4, config=C(8, 16, 4, 1))
    out, lse = ja.jagged_attention_fwd(q, q, q, good, 4)
    with pytest.raises(ValueError, match="lse"):
        ja.jagged_attention_bwd(q, q, q, q, out, lse.t(), good, 4)
    with pytest.raises(ValueError, match="reference|max_seq_len"):
        jagged_attention_reference(q, q, q, good.cpu(), 3)
