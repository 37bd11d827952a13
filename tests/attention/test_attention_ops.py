"""The attention ops as users call them (torch.ops.mymetaops.hstu_attention / jagged_attention and
the mymetaops wrappers): forward and gradients against the float64 references
(hstu_reference.py, softmax_reference.py), opcheck, torch.compile, the errors on bad input. CPU
tests run everywhere; `gpu` tests run the Triton kernels behind the CUDA registration, check that
no call syncs, and that bad offsets are recorded on the device and raised.

Every output is compared against the reference with one tolerance per dtype (TOL, relative to the
largest reference element); inputs are fresh random draws per case.
"""
from __future__ import annotations

import math

import pytest
import torch
from hstu_reference import hstu_mask as reference_mask
from hstu_reference import hstu_reference
from softmax_reference import jagged_attention_reference

import mymetaops
import mymetaops.ops  # noqa: F401  (registers the ops)
from mymetaops.ops.attention import hstu_mask

_ops = torch.ops.mymetaops
HAS_GPU = torch.cuda.is_available()
# max |ours - reference| <= TOL * max |reference|: one rounding of the output to the dtype (bf16's
# 2^-8, fp16's 2^-11) plus fp32 accumulation over at most a few hundred terms.
TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}

# (lengths, max_seq_len, heads, dqk, dv, hstu options)
CASES = [
    ([5, 0, 1, 37], 40, 2, 8, 8, {}),
    ([3], 3, 1, 16, 4, {}),
    ([127], 127, 1, 3, 5, {"causal": False}),
    ([7, 12, 0, 9], 16, 3, 8, 8, {"num_targets": [2, 0, 0, 9]}),
    ([20, 6], 24, 2, 8, 8, {"max_attn_len": 4}),
    ([20, 6, 1], 24, 2, 8, 8, {"contextual_seq_len": 3, "num_targets": [4, 1, 0]}),
    ([11, 30], 32, 1, 8, 8, {"causal": False, "max_attn_len": 5, "contextual_seq_len": 2}),
    ([], 8, 2, 8, 8, {}),
]


def _offsets(lengths, dtype=torch.int64, device="cpu"):
    out = torch.zeros(len(lengths) + 1, dtype=dtype)
    out[1:] = torch.tensor(lengths, dtype=torch.int64).cumsum(0) if lengths else out[1:]
    return out.to(device)


def _inputs(lengths, heads, dqk, dv, dtype, device, seed, strided=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(lengths)

    def draw(d):
        return (torch.randn(total, heads, d, generator=g) * 0.5).to(dtype).to(device)
    q = draw(2 * dqk)[:, :, :dqk] if strided else draw(dqk)  # strided: a slice of a wider tensor
    return q, draw(dqk), draw(dv)


def _close(ours, ref, dtype, what, floor=1e-30):
    """floor: the least scale, for references that are 0 by cancellation (a softmax gradient over
    one key is P (dP - delta) = 1 (x - x)), where ours holds the fp32 rounding of the cancelled terms."""
    ours, ref = ours.detach().double().cpu(), ref.detach().double().cpu()
    assert ours.shape == ref.shape, what
    scale = max(ref.abs().max().item(), floor) if ref.numel() else 1.0
    err = (ours - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= TOL[dtype] * scale, f"{what}: max err {err:.3e} > {TOL[dtype]:.0e} x {scale:.3e}"


def _reference_grads(ref, leaves, grad):
    """Autograd through the reference (zeros where it has no graph: no sequences)."""
    if not ref.requires_grad:
        return [torch.zeros_like(t) for t in leaves]
    return torch.autograd.grad(ref, leaves, grad.double().cpu(), allow_unused=True)


def _hstu_options(opts, batch, device):
    o = dict(opts)
    o.setdefault("causal", True)
    if "num_targets" in o:
        o["num_targets"] = torch.tensor(o["num_targets"], dtype=torch.int64, device=device)
    return o


def _run_hstu_case(case, dtype, device, index_dtype, seed, alpha=0.7, strided=False):
    lengths, max_len, heads, dqk, dv, opts = case
    q, k, v = _inputs(lengths, heads, dqk, dv, dtype, device, seed, strided)
    offsets = _offsets(lengths, index_dtype, device)
    o = _hstu_options(opts, len(lengths), device)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = mymetaops.hstu_attention(*leaves, offsets, max_len, alpha, **o)
    ref_leaves = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    ref = hstu_reference(*ref_leaves, offsets.cpu(), max_len, alpha, o["causal"],
                         None if o.get("num_targets") is None else o["num_targets"].cpu(),
                         o.get("max_attn_len", 0), o.get("contextual_seq_len", 0))
    _close(out, ref, dtype, "hstu out")
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype).to(device)
    grads = torch.autograd.grad(out, leaves, grad)
    ref_grads = _reference_grads(ref, ref_leaves, grad)
    for name, a, b in zip("qkv", grads, ref_grads):
        _close(a, b, dtype, f"hstu d{name}")


def _run_softmax_case(case, dtype, device, index_dtype, seed, scale=None, strided=False):
    lengths, max_len, heads, dqk, dv, opts = case
    causal = opts.get("causal", True)
    q, k, v = _inputs(lengths, heads, dqk, dv, dtype, device, seed, strided)
    offsets = _offsets(lengths, index_dtype, device)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, lse = _ops.jagged_attention(*leaves, offsets, max_len, causal, scale)
    ref_leaves = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = jagged_attention_reference(*ref_leaves, offsets.cpu(), max_len, causal, scale)
    _close(out, ref, dtype, "softmax out")
    _close(lse, ref_lse, torch.float32 if dtype == torch.float64 else dtype, "softmax lse")
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype).to(device)
    grads = torch.autograd.grad(out, leaves, grad)
    ref_grads = _reference_grads(ref, ref_leaves, grad)
    for name, a, b in zip("qkv", grads, ref_grads):
        _close(a, b, dtype, f"softmax d{name}")


# ---- CPU -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [0, 1, 6, 13])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("targets", [None, 0, 2])
@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("contextual", [0, 1, 3])
def test_hstu_mask_matches_the_reference(length, causal, targets, window, contextual):
    if targets is not None and targets > length:
        pytest.skip("more targets than rows")
    ours = hstu_mask(length, causal, targets, window, contextual)
    ref = reference_mask(length, length, causal, targets, window, contextual)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_hstu_cpu(case, dtype, index_dtype):
    _run_hstu_case(case, dtype, "cpu", index_dtype, seed=hash((len(case[0]), str(dtype))) % 1000)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_softmax_cpu(case, dtype):
    _run_softmax_case(case, dtype, "cpu", torch.int64, seed=3)


def test_non_contiguous_q_and_custom_scale_cpu():
    _run_hstu_case(CASES[0], torch.float32, "cpu", torch.int64, seed=5, strided=True)
    _run_softmax_case(CASES[0], torch.float32, "cpu", torch.int32, seed=5, scale=0.3, strided=True)


def test_hstu_mha_takes_generative_recommenders_argument_order():
    lengths, max_len, heads, dqk, dv, _ = CASES[0]
    q, k, v = _inputs(lengths, heads, dqk, dv, torch.float32, "cpu", 9)
    offsets = _offsets(lengths)
    ours = mymetaops.hstu_mha(max_len, 0.5, q, k, v, offsets, causal=True, dropout_pr=0.0, training=True)
    assert torch.equal(ours, mymetaops.hstu_attention(q, k, v, offsets, max_len, 0.5))
    with pytest.raises(NotImplementedError, match="dropout"):
        mymetaops.hstu_mha(max_len, 0.5, q, k, v, offsets, dropout_pr=0.1)


def _opcheck_samples(device, dtype):
    for lengths, max_len, heads, dqk, dv, opts in CASES[:4]:
        q, k, v = (t.requires_grad_() for t in _inputs(lengths, heads, dqk, dv, dtype, device, 11))
        offsets = _offsets(lengths, device=device)
        o = _hstu_options(opts, len(lengths), device)
        yield "hstu_attention", (q, k, v, offsets, max_len, 0.5, o["causal"], o.get("num_targets"), 0, 0)
        yield "jagged_attention", (q, k, v, offsets, max_len, o["causal"], None)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_opcheck(device):
    if device == "cuda" and not HAS_GPU:
        pytest.skip("no GPU")
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    for name, args in _opcheck_samples(device, dtype):
        torch.library.opcheck(getattr(_ops, name).default, args)


def _assert_compiled_matches(step, compiled, q, k, v):
    """compiled(q, k, v) and its gradients equal step's, run eagerly."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    loss = compiled(*leaves)
    loss.backward()
    ref_leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    ref = step(*ref_leaves)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    for a, b in zip(leaves, ref_leaves):
        torch.testing.assert_close(a.grad, b.grad)


def test_torch_compile_fullgraph():
    lengths, max_len, heads, dqk, dv, _ = CASES[0]
    q, k, v = _inputs(lengths, heads, dqk, dv, torch.float32, "cpu", 13)
    offsets = _offsets(lengths)

    def step(q, k, v):
        a = mymetaops.hstu_attention(q, k, v, offsets, max_len, 0.5)
        b = mymetaops.jagged_attention(q, k, v, offsets, max_len)
        return (a + b).sum()
    _assert_compiled_matches(step, torch.compile(step, fullgraph=True, backend="aot_eager"), q, k, v)


def _good():
    q, k, v = _inputs([3, 2], 2, 8, 8, torch.float32, "cpu", 17)
    return q, k, v, _offsets([3, 2])


@pytest.mark.parametrize("mutate,error,match", [
    (lambda q, k, v, o: (q[:4], k, v, o), ValueError, "same rows"),
    (lambda q, k, v, o: (q, k[:, :1], v, o), ValueError, "same heads"),
    (lambda q, k, v, o: (q, k[..., :4], v, o), ValueError, "same head dim"),
    (lambda q, k, v, o: (q, k.double(), v, o), TypeError, "one dtype"),
    (lambda q, k, v, o: (q[0], k, v, o), ValueError, r"\[total_L, H, D\]"),
    (lambda q, k, v, o: (q, k, v, o.float()), ValueError, "int32 / int64"),
    (lambda q, k, v, o: (q, k, v, torch.tensor([0, 3, 4])), ValueError, "must be total_L = 5"),
    (lambda q, k, v, o: (q, k, v, torch.tensor([1, 3, 5])), ValueError, r"seq_offsets\[0\] = 1 must be 0"),
    (lambda q, k, v, o: (q, k, v, torch.tensor([0, 4, 3, 5])), ValueError, "non-decreasing"),
])
@pytest.mark.parametrize("op", ["hstu", "softmax"])
def test_bad_input_raises_clearly(mutate, error, match, op):
    q, k, v, o = mutate(*_good())
    with pytest.raises(error, match=match):
        if op == "hstu":
            mymetaops.hstu_attention(q, k, v, o, 4, 0.5)
        else:
            mymetaops.jagged_attention(q, k, v, o, 4)


def test_lengths_above_max_and_bad_targets_raise():
    q, k, v, o = _good()
    with pytest.raises(ValueError, match="more than max_seq_len = 2"):
        mymetaops.hstu_attention(q, k, v, o, 2, 0.5)
    with pytest.raises(ValueError, match=r"num_targets\[1\] = 3 is not in \[0, 2\]"):
        mymetaops.hstu_attention(q, k, v, o, 4, 0.5, num_targets=torch.tensor([1, 3]))
    with pytest.raises(ValueError, match="B = 2 entries"):
        mymetaops.hstu_attention(q, k, v, o, 4, 0.5, num_targets=torch.tensor([1]))


# ---- GPU: the Triton kernels behind the CUDA registration ---------------------------------------------

GPU_CASES = CASES + [
    ([300, 1, 0, 129, 64], 300, 2, 64, 64, {}),
    ([256, 100, 17], 256, 1, 128, 128, {"num_targets": [10, 0, 17], "contextual_seq_len": 4}),
    ([200, 77], 200, 2, 32, 128, {"max_attn_len": 50}),
    ([90, 5], 96, 2, 256, 256, {"causal": False}),
    ([33, 64], 64, 4, 40, 100, {}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[f"case{i}" for i in range(len(GPU_CASES))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gpu_matches_the_reference(case, dtype, index_dtype):
    _run_hstu_case(case, dtype, "cuda", index_dtype, seed=21)
    _run_softmax_case(case, dtype, "cuda", index_dtype, seed=22)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [GPU_CASES[-5], GPU_CASES[-4], GPU_CASES[3]], ids=["plain", "targets", "window"])
def test_gpu_cached_launches_match_the_reference(case, monkeypatch):
    """Calls after the first of a shape take the cached direct launch (mymetaops/triton/launch.py),
    not kernel[grid]: fresh inputs of the same shapes, forward and gradients against the reference."""
    from mymetaops.triton import launch
    jit_launches = []
    jit = launch.Launcher._jit
    monkeypatch.setattr(launch.Launcher, "_jit", lambda self, *a: jit_launches.append(1) or jit(self, *a))
    for seed in (41, 42, 43):
        _run_hstu_case(case, torch.bfloat16, "cuda", torch.int64, seed=seed)
        _run_softmax_case(case, torch.bfloat16, "cuda", torch.int64, seed=seed)
        if seed == 41:
            first = len(jit_launches)
    assert len(jit_launches) == first  # every later launch went direct


@pytest.mark.gpu
def test_gpu_calls_without_autograd_match():
    """Under no_grad (or on leaves without requires_grad) the wrappers skip the autograd.Function:
    the same kernels, so the same bits."""
    lengths, max_len, heads, dqk, dv, _ = GPU_CASES[-5]
    q, k, v = _inputs(lengths, heads, dqk, dv, torch.bfloat16, "cuda", 33)
    offsets = _offsets(lengths, device="cuda")
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    for op, args in ((mymetaops.hstu_attention, (offsets, max_len, 0.5)),
                     (mymetaops.jagged_attention, (offsets, max_len))):
        with_grad = op(*leaves, *args)
        assert with_grad.requires_grad
        with torch.no_grad():
            assert torch.equal(op(*leaves, *args), with_grad)
        assert torch.equal(op(q, k, v, *args), with_grad)


@pytest.mark.gpu
def test_gpu_non_contiguous_q():
    _run_hstu_case(GPU_CASES[-5], torch.bfloat16, "cuda", torch.int64, seed=23, strided=True)
    _run_softmax_case(GPU_CASES[-5], torch.bfloat16, "cuda", torch.int64, seed=23, strided=True, scale=0.1)


@pytest.mark.gpu
def test_gpu_no_host_sync():
    lengths = [100, 3, 0, 64]
    q, k, v = (t.requires_grad_() for t in _inputs(lengths, 2, 64, 64, torch.bfloat16, "cuda", 25))
    offsets = _offsets(lengths, device="cuda")
    targets = torch.tensor([3, 0, 0, 1], device="cuda")
    for _ in range(2):  # the second pass: every kernel compiled already
        torch.cuda.set_sync_debug_mode("error")
        try:
            a = mymetaops.hstu_attention(q, k, v, offsets, 128, 0.5, num_targets=targets, max_attn_len=16)
            b = mymetaops.jagged_attention(q, k, v, offsets, 128)
            (a.float().sum() + b.float().sum()).backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)


@pytest.mark.gpu
@pytest.mark.parametrize("offsets,max_len,match", [
    ([0, 3, 7], 8, "must be 5"),
    ([0, 4, 5], 3, "more than max_seq_len = 3"),
    ([0, 4, 2, 5], 8, "non-decreasing"),
])
def test_gpu_bad_offsets_are_recorded_and_raised(offsets, max_len, match):
    q, k, v = _inputs([5], 2, 16, 16, torch.bfloat16, "cuda", 27)
    o = torch.tensor(offsets, device="cuda")
    for call in (lambda: mymetaops.hstu_attention(q, k, v, o, max_len, 0.5),
                 lambda: mymetaops.jagged_attention(q, k, v, o, max_len)):
        out = call()  # no sync: queued, the error recorded on the device
        assert torch.isfinite(out.float()).all()  # the kernels clamp: nothing read out of bounds
        with pytest.raises(ValueError, match=match):
            mymetaops.check_errors()


@pytest.mark.gpu
def test_gpu_bad_targets_raise_with_validate():
    q, k, v = _inputs([5, 2], 2, 16, 16, torch.bfloat16, "cuda", 29)
    o = _offsets([5, 2], device="cuda")
    with pytest.raises(ValueError, match=r"num_targets\[1\] = 3"):
        mymetaops.hstu_attention(q, k, v, o, 8, 0.5, num_targets=torch.tensor([1, 3], device="cuda"), validate=True)


@pytest.mark.parametrize("offsets,total,max_len,targets,record", [
    ([0, 3, 5], 5, 4, None, [0, 0, 0, 0, 0]),
    ([0], 0, 4, None, [0, 0, 0, 0, 0]),
    ([0, 3, 7], 5, 4, None, [7, 10, 2, 7, 5]),  # (code, op, position, value, bound): last offset != total_L
    ([1, 3, 5], 5, 4, None, [7, 10, 0, 1, 0]),  # first offset != 0
    ([0, 4, 2, 5], 5, 8, None, [3, 10, 2, 2, 0]),  # decreasing
    ([0, 5, 6], 6, 4, None, [6, 10, 0, 5, 4]),  # sequence 0 longer than max_seq_len
    ([0, 3, 5], 5, 4, [1, 3], [8, 10, 1, 3, 2]),  # num_targets[1] > its length
])
def test_value_check_kernel_records_the_first_bad_entry(offsets, total, max_len, targets, record):
    from mymetaops.triton import attention_checks
    device = "cuda" if HAS_GPU else "cpu"  # the CPU: Triton's interpreter (conftest.py)
    errors = torch.zeros(8, dtype=torch.int64, device=device)
    attention_checks.check_values(torch.tensor(offsets, device=device),
                                  None if targets is None else torch.tensor(targets, device=device),
                                  total, max_len, attention_checks.OP_HSTU_ATTENTION, errors)
    assert errors.tolist()[1:6] == record


@pytest.mark.gpu
def test_gpu_torch_compile_fullgraph_inductor():
    lengths = [40, 0, 7, 64]
    q, k, v = _inputs(lengths, 2, 64, 64, torch.bfloat16, "cuda", 31)
    offsets = _offsets(lengths, device="cuda")

    def step(q, k, v):
        a = mymetaops.hstu_attention(q, k, v, offsets, 64, 0.5, max_attn_len=8)
        b = mymetaops.jagged_attention(q, k, v, offsets, 64)
        return (a.float() * b.float()).sum()
    _assert_compiled_matches(step, torch.compile(step, fullgraph=True), q, k, v)
