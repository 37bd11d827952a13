"""The jagged family on a GPU: every backend the model offers against the CPU kernels (which
test_jagged.py checks against float64 and FBGEMM), gradients, no host sync with the sizes given,
bad offsets recorded without a sync, and a > 2^31-element conversion."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mymetaops
import mymetaops.ops  # noqa: F401  (registers the ops)
from mymetaops import model
from mymetaops.ops import dispatch

gpu = pytest.mark.gpu
ops = torch.ops.mymetaops
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # one rounding of the output
BMM_RTOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _backends(op, *args):
    hw = model.detect_hardware()
    problem = model.jagged.problem_of(op, *args)
    decision = model.decide(op, problem, hw, native_available=dispatch.native_available(op, hw.vendor))
    return ["auto", *sorted({c.backend for c in decision.candidates if c.available})]


def _close(got, want, rtol):
    got, want = got.float().cpu(), want.float().cpu()
    scale = want.abs().max().item() if want.numel() else 0.0
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=rtol, atol=rtol * max(scale, 1.0)), (got - want).abs().max()


def _jagged(batch, max_length, dim, dtype, offsets_dtype, device="cuda", seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_length + 3, (batch,), generator=g)  # some past max_length: truncated
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(offsets_dtype)
    values = torch.randn(int(lengths.sum()), dim, generator=g).to(dtype)
    return values.to(device), offsets.to(device)


cases = dict(batch=st.sampled_from((1, 3, 17)), max_length=st.sampled_from((1, 5, 33)),
             dim=st.sampled_from((1, 3, 8, 128)), dtype=st.sampled_from((torch.float32, torch.float16, torch.bfloat16)),
             offsets_dtype=st.sampled_from((torch.int32, torch.int64)))


def _cpu(arg):
    """A tensor, or a list of tensors and ints, on the CPU."""
    if isinstance(arg, list):
        return [_cpu(a) for a in arg]
    return arg.cpu() if isinstance(arg, torch.Tensor) else arg


@gpu
@given(**cases)
def test_conversions_and_elementwise_every_backend(batch, max_length, dim, dtype, offsets_dtype):
    values, offsets = _jagged(batch, max_length, dim, dtype, offsets_dtype)
    y = torch.randn(batch, max_length, dim, device="cuda").to(dtype)
    calls = {
        "jagged_to_padded_dense": (lambda: ops.jagged_to_padded_dense(values, [offsets], [max_length], -1.0),
                                   (values, [offsets], [max_length])),
        "dense_to_jagged_forward": (lambda: ops.dense_to_jagged_forward(y, [offsets], values.shape[0]),
                                    (y, [offsets], values.shape[0])),
        "jagged_dense_elementwise_add": (lambda: ops.jagged_dense_elementwise_add(values, [offsets], y),
                                         (values, [offsets], y)),
        "jagged_dense_elementwise_add_jagged_output_forward": (
            lambda: ops.jagged_dense_elementwise_add_jagged_output_forward(values, [offsets], y), (values, [offsets], y)),
        "jagged_dense_elementwise_mul_forward": (
            lambda: ops.jagged_dense_elementwise_mul_forward(values, [offsets], y), (values, [offsets], y)),
    }
    for op, (call, args) in calls.items():
        want = getattr(ops, op)(*[_cpu(a) for a in args],
                                *([-1.0] if op == "jagged_to_padded_dense" else []))
        for backend in _backends(op, *args):
            with mymetaops.use_backend(backend):
                _close(call(), want, RTOL[dtype])


@gpu
@given(**cases)
def test_softmax_every_backend(batch, max_length, dim, dtype, offsets_dtype):
    values, offsets = _jagged(batch, max_length, dim, dtype, offsets_dtype)
    grad = torch.randn_like(values)
    want = ops.jagged_softmax_forward(values.cpu(), offsets.cpu(), max_length)
    want_grad = ops.jagged_softmax_backward(grad.cpu(), want, offsets.cpu(), max_length)
    for backend in _backends("jagged_softmax_forward", values, offsets, max_length):
        with mymetaops.use_backend(backend):
            out = ops.jagged_softmax_forward(values, offsets, max_length)
            _close(out, want, RTOL[dtype])
            _close(ops.jagged_softmax_backward(grad, out, offsets, max_length), want_grad, 4 * RTOL[dtype])


@gpu
@given(**cases)
def test_bmm_every_backend(batch, max_length, dim, dtype, offsets_dtype):
    x, offsets = _jagged(batch, max_length, dim, dtype, offsets_dtype)
    y = torch.randn(batch, dim, 24, device="cuda").to(dtype)
    yv = torch.randn(x.shape[0], 24, device="cuda").to(dtype)
    want = ops.jagged_dense_bmm_forward(x.cpu(), offsets.cpu(), y.cpu(), max_length)
    want_jj = ops.jagged_jagged_bmm(x.cpu(), yv.cpu(), offsets.cpu(), max_length)
    for backend in _backends("jagged_dense_bmm_forward", x, offsets, y, max_length):
        with mymetaops.use_backend(backend):
            _close(ops.jagged_dense_bmm_forward(x, offsets, y, max_length), want, BMM_RTOL[dtype])
            _close(ops.jagged_jagged_bmm(x, yv, offsets, max_length), want_jj, BMM_RTOL[dtype])


def _poison_allocator():
    """Fill a freed block with NaN, so that outputs allocated next start as NaN (a row a kernel
    leaves unwritten then fails the comparison)."""
    torch.full((1 << 24,), float("nan"), device="cuda")


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("y_layout", ["n_contiguous", "k_contiguous"])
def test_bmm_past_one_tile_every_backend(dtype, y_layout):
    """Sizes past one tile of the native grouped GEMM (128 x 256 x 64): sequences of 0..262 rows
    truncated at 260 (several m tiles, a partial one), K = M = 136 (a K tail), N = 264 (a second n
    tile), empty sequences; y[b] N-contiguous or K-contiguous (the backward's y^T)."""
    x, offsets = _jagged(7, 260, 136, dtype, torch.int64, seed=3)
    if y_layout == "n_contiguous":
        y = torch.randn(7, 136, 264, device="cuda").to(dtype)
    else:
        y = torch.randn(7, 264, 136, device="cuda").to(dtype).transpose(1, 2)
    yv = torch.randn(x.shape[0], 264, device="cuda").to(dtype)
    want = ops.jagged_dense_bmm_forward(x.float().cpu(), offsets.cpu(), y.float().cpu(), 260)
    want_jj = ops.jagged_jagged_bmm(x.float().cpu(), yv.float().cpu(), offsets.cpu(), 260)
    backends = _backends("jagged_dense_bmm_forward", x, offsets, y, 260)
    hw = model.detect_hardware()
    if hw.arch == "sm_90a" and dispatch.native_available("jagged_dense_bmm_forward", hw.vendor):
        assert "native" in backends  # (the HIP-on-CUDA shim build carries hip/'s kernels: none here)
    for backend in backends:
        with mymetaops.use_backend(backend):
            _poison_allocator()
            _close(ops.jagged_dense_bmm_forward(x, offsets, y, 260), want, BMM_RTOL[dtype])
            _poison_allocator()
            _close(ops.jagged_jagged_bmm(x, yv, offsets, 260), want_jj, BMM_RTOL[dtype])


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("offsets_dtype", [torch.int32, torch.int64])
def test_every_native_bmm_kernel_of_the_build(dtype, offsets_dtype):
    """Each native bmm kernel the build has, called past the model (the CUDA build: cuda/jagged_bmm;
    the HIP-on-CUDA shim build: hip/jagged_bmm.hip, its MFMA step as FMAs): y and y^T, sequences
    empty, within and past max_length, rows before offsets[0] and after offsets[B], outputs
    poisoned with NaN first."""
    from mymetaops import _C
    kernels = list(_C._native_jagged_bmm_kernels())
    if not kernels:
        pytest.skip("this build has no native bmm kernel")
    g = torch.Generator().manual_seed(11)
    lengths = torch.tensor([0, 1, 37, 200, 131, 0, 140])
    offsets = torch.cat([torch.tensor([3]), 3 + lengths.cumsum(0)]).to(offsets_dtype).cuda()
    x = torch.randn(int(offsets[-1]) + 5, 72, generator=g).to(dtype).cuda()  # 3 rows before, 5 after
    y = torch.randn(7, 72, 40, generator=g).to(dtype).cuda()
    yt = torch.randn(7, 40, 72, generator=g).to(dtype).cuda().transpose(1, 2)
    yv = torch.randn(x.shape[0], 40, generator=g).to(dtype).cuda()
    for index in range(len(kernels)):
        for w in (y, yt):
            want = ops.jagged_dense_bmm_forward(x.float().cpu(), offsets.cpu(), w.float().cpu(), 136)
            _poison_allocator()
            _close(ops._jagged_dense_bmm_native(x, offsets, w, 136, [index]), want, BMM_RTOL[dtype])
        want = ops.jagged_jagged_bmm(x.float().cpu(), yv.float().cpu(), offsets.cpu(), 136)
        _poison_allocator()
        _close(ops._jagged_jagged_bmm_native(x, yv, offsets, 136, [index]), want, BMM_RTOL[dtype])
    with pytest.raises(ValueError, match="not an index of the build's native bmm kernels"):
        ops._jagged_dense_bmm_native(x, offsets, y, 136, [len(kernels)])
    with pytest.raises(RuntimeError, match="bfloat16 or float16"):
        ops._jagged_dense_bmm_native(x.float(), offsets, y.float(), 136, [0])


@gpu
@pytest.mark.parametrize("op", ["jagged_dense_bmm", "jagged_jagged_bmm"])
def test_bmm_gradients_every_backend(op):
    """bf16 forward and backward (whose GEMMs take y^T and grad^T) on every backend against the
    float32 CPU ops."""
    x, offsets = _jagged(6, 140, 72, torch.bfloat16, torch.int64, seed=5)
    y = torch.randn(*((6, 72, 40) if op == "jagged_dense_bmm" else (x.shape[0], 40)), device="cuda").to(torch.bfloat16)

    def run(x, y, offsets):
        x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
        if op == "jagged_dense_bmm":
            out = mymetaops.jagged_dense_bmm(x, offsets, y, 140)[0]
        else:
            out = mymetaops.jagged_jagged_bmm(x, y, offsets, 140)
        out.backward(torch.linspace(-1, 1, out.numel(), device=out.device).reshape(out.shape).to(out.dtype))
        return out, x.grad, y.grad

    want = run(x.float().cpu(), y.float().cpu(), offsets.cpu())
    args = (x, offsets, y, 140) if op == "jagged_dense_bmm" else (x, y, offsets, 140)
    raw = "jagged_dense_bmm_forward" if op == "jagged_dense_bmm" else op
    for backend in _backends(raw, *args):
        with mymetaops.use_backend(backend):
            for got, ref in zip(run(x, y, offsets), want):
                _close(got, ref, BMM_RTOL[torch.bfloat16])


@gpu
@pytest.mark.parametrize("max_length", [0, 2, 5])
def test_rows_without_a_position_are_zero_on_every_backend(max_length):
    """Jagged outputs: rows no sequence covers (before offsets[0], from offsets[B] on) and rows
    past max_length get 0 (dense_to_jagged, jagged_dense_bmm) on every backend, in memory
    poisoned with NaN first (aten's dense_to_jagged left such rows unwritten: the pad + bmm path
    returned garbage there)."""
    offsets = torch.tensor([2, 4, 8], device="cuda")  # rows 0-1 and 8-10 uncovered; lengths 2 and 4
    x = torch.randn(11, 4, device="cuda")
    y = torch.randn(2, 4, 5, device="cuda")
    dense = torch.randn(2, max_length, 5, device="cuda")
    want = ops.jagged_dense_bmm_forward(x.cpu(), offsets.cpu(), y.cpu(), max_length)
    want_rows = ops.dense_to_jagged_forward(dense.cpu(), [offsets.cpu()], 11)
    for backend in _backends("jagged_dense_bmm_forward", x, offsets, y, max_length):
        torch.full((64, 64), float("nan"), device="cuda")  # freed: the outputs reuse its block
        with mymetaops.use_backend(backend):
            got = ops.jagged_dense_bmm_forward(x, offsets, y, max_length)
        _close(got, want, BMM_RTOL[torch.float32])
    for backend in _backends("dense_to_jagged_forward", dense, [offsets], 11):
        torch.full((64, 64), float("nan"), device="cuda")
        with mymetaops.use_backend(backend):
            got = ops.dense_to_jagged_forward(dense, [offsets], 11)
        _close(got, want_rows, RTOL[torch.float32])


@gpu
@given(batch=st.sampled_from((1, 4, 9)), dim=st.sampled_from((1, 8, 64)),
       dtype=st.sampled_from((torch.float32, torch.bfloat16)), repeat=st.booleans())
def test_index_select_every_backend(batch, dim, dtype, repeat):
    g = torch.Generator().manual_seed(batch * 7 + dim)
    lengths = torch.randint(0, 6, (batch,), generator=g)
    values = torch.randn(int(lengths.sum()), dim, generator=g).to(dtype)
    indices = torch.randint(0, batch, (batch + 2 if repeat else batch,), generator=g)
    want = ops.jagged_index_select(values, lengths, indices)
    grad = torch.randn_like(want[0])
    want_grad = ops.jagged_index_select_backward(grad, lengths, indices, values.shape[0])
    v, l, i = values.cuda(), lengths.cuda(), indices.cuda()
    for backend in _backends("jagged_index_select", v, l, i, want[0].shape[0]):
        with mymetaops.use_backend(backend):
            got = ops.jagged_index_select(v, l, i, want[0].shape[0])
            _close(got[0], want[0], 0.0)
            assert torch.equal(got[1].cpu(), want[1])
            _close(ops.jagged_index_select_backward(grad.cuda(), l, i, values.shape[0]), want_grad, RTOL[dtype])


@gpu
def test_gradients_match_the_cpu():
    values, offsets = _jagged(5, 7, 16, torch.float32, torch.int64)
    y = torch.randn(5, 7, 16, device="cuda")
    results = []
    for device in ("cpu", "cuda"):
        v = values.to(device).requires_grad_()
        w = y.to(device).requires_grad_()
        o = offsets.to(device)
        out = mymetaops.jagged_dense_elementwise_add_jagged_output(v, o, w)[0]
        dense = mymetaops.jagged_to_padded_dense(out, o, 7)
        back = mymetaops.dense_to_jagged(dense * 2, o, total_L=v.shape[0])[0]
        sm = mymetaops.jagged_softmax(back, o, 7)[0]
        bmm = mymetaops.jagged_dense_bmm(sm, o, torch.ones(5, 16, 4, device=device), 7)[0]
        bmm.square().sum().backward()
        results.append((v.grad.cpu(), w.grad.cpu()))
    for got, want in zip(results[1], results[0]):
        _close(got, want, 1e-4)


@gpu
def test_no_host_sync_with_the_sizes_given():
    values, offsets = _jagged(64, 32, 64, torch.bfloat16, torch.int64)
    y = torch.randn(64, 32, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    yb = torch.randn(64, 64, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    lengths = offsets.diff()
    indices = torch.arange(0, 64, 2, device="cuda")
    rows = int(lengths[indices].sum())
    v = values.requires_grad_()
    total = v.shape[0]
    for _ in range(2):  # the second round runs from the decision cache
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = mymetaops.jagged_dense_elementwise_add_jagged_output(v, offsets, y)[0]
            dense = mymetaops.jagged_to_padded_dense(out, offsets, 32)
            back = mymetaops.dense_to_jagged(dense, offsets, total_L=total)[0]
            sm = mymetaops.jagged_softmax(back, offsets, 32)[0]
            mm = mymetaops.jagged_dense_bmm(sm, offsets, yb, 32)[0]
            jj = mymetaops.jagged_jagged_bmm(mm, sm, offsets, 32)
            mul = mymetaops.jagged_dense_elementwise_mul(v, offsets, y)[0]
            sel = mymetaops.jagged_index_select(mul, lengths, indices, rows)[0]
            (jj.float().sum() + sel.float().sum()).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")


@gpu
def test_bad_offsets_are_recorded_and_raised():
    values = torch.randn(6, 4, device="cuda")
    bad = torch.tensor([0, 4, 2, 6], device="cuda")  # decreasing
    for backend in _backends("jagged_to_padded_dense", values, [bad], [3]):
        if backend == "vendor":
            continue  # aten's kernel does not check values
        with mymetaops.use_backend(backend):
            ops.jagged_to_padded_dense(values, [bad], [3])
        with pytest.raises(ValueError, match="offsets"):
            mymetaops.check_errors()


@gpu
def test_more_than_2_to_the_31_elements():
    # 2^31 + 2^20 bf16 elements in the dense output: 64-bit indexing throughout (aten's kernel failed here).
    batch, max_length, dim = 2, 2**29 + 2**18, 2
    offsets = torch.tensor([0, 3, 7], device="cuda")
    values = torch.arange(14, device="cuda", dtype=torch.float32).reshape(7, 2).to(torch.bfloat16)
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * batch * max_length * dim * 2:
        pytest.skip("not enough GPU memory")
    dense = ops.jagged_to_padded_dense(values, [offsets], [max_length], 0.0)
    assert dense.numel() > 2**31
    assert torch.equal(dense[1, :4].float().cpu(), values[3:7].float().cpu())
    assert dense[1, -1].abs().sum().item() == 0
    back = ops.dense_to_jagged_forward(dense, [offsets], 7)
    assert torch.equal(back.cpu(), values.cpu())
