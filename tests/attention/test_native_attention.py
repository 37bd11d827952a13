"""Every native attention forward kernel of the build (csrc/include/mymetaops/attention.h: cuda/
attention/ on the CUDA build, hip/attention/ on the HIP-on-CUDA shim build), called directly with
each index of _C._native_attention_kernels(), whatever the model would choose: outputs and lse
against the float64 references, poisoned outputs, lengths 0 and 1, sequences longer than a tile and
not a multiple of it, strided q, bad offsets recorded without a sync. The backward's native dK / dV
and dQ kernels likewise against the float64 gradients. Then the public ops where the model chooses
a native kernel, forward and backward, against the Triton path. Tolerances: test_attention_ops.TOL.
"""
from __future__ import annotations

import pytest
import torch
from hstu_reference import hstu_reference
from softmax_reference import jagged_attention_reference
from test_attention_ops import _close, _inputs, _offsets

import mymetaops
from mymetaops import _C
from mymetaops.ops import attention as attention_ops

pytestmark = pytest.mark.gpu
KERNELS = list(_C._native_attention_kernels()) if torch.cuda.is_available() else []
HSTU, SOFTMAX = attention_ops.HSTU_KIND, attention_ops.SOFTMAX_KIND
# (lengths, max_seq_len): empty and 1-row sequences, one longer than every tile, ragged ends.
LENGTHS = [([5, 0, 1, 37], 40), ([300, 1, 0, 129, 64], 300), ([1], 1), ([200, 77], 257)]
# More tiles than SMs: persistent CTAs run several tiles each, their barrier phases wrap many times.
MANY = ([(37 * i) % 301 for i in range(150)], 300)


def _supported(kernel, kind, d, dtype):
    """Whether the kernel runs this (kind, D, dtype): the launcher's attention_supports says no with
    a RuntimeError naming the reason, before any launch."""
    q, k, v = _inputs([3], 1, d, d, dtype, "cuda", 0)
    try:
        _C._attention_forward_native(q, k, v, _offsets([3], device="cuda"), 3, kind, 0.5, True, kernel)
    except RuntimeError as e:
        assert "native attention" in str(e)
        return False
    return True


def _poison_allocator(total, heads, d, dtype):
    """Leaves NaN in the caching allocator's next blocks of these sizes (the kernel must write every
    element of out / lse)."""
    torch.full((total, heads, d), float("nan"), dtype=dtype, device="cuda")
    torch.full((heads, total), float("nan"), device="cuda")


def _reference(kind, q, k, v, offsets, max_len, alpha, causal):
    leaves = [t.cpu().double() for t in (q, k, v)]
    if kind == HSTU:
        return hstu_reference(*leaves, offsets.cpu(), max_len, alpha, causal), None
    return jagged_attention_reference(*leaves, offsets.cpu(), max_len, causal, alpha)


@pytest.mark.skipif(not KERNELS, reason="no native attention kernels in this build")
@pytest.mark.parametrize("kernel", range(len(KERNELS)), ids=KERNELS)
def test_every_native_attention_kernel_of_the_build(kernel):
    ran = 0
    for kind in (HSTU, SOFTMAX):
        for d in (64, 128):
            for dtype in (torch.bfloat16, torch.float16):
                if not _supported(kernel, kind, d, dtype):
                    continue
                for seed, ((lengths, max_len), causal, strided, index_dtype) in enumerate([
                        (LENGTHS[0], True, False, torch.int32), (LENGTHS[1], True, True, torch.int64),
                        (LENGTHS[2], False, False, torch.int64), (LENGTHS[3], False, False, torch.int32),
                        (MANY, True, False, torch.int32), (MANY, False, True, torch.int64)]):
                    q, k, v = _inputs(lengths, 2, d, d, dtype, "cuda", seed, strided)
                    offsets = _offsets(lengths, index_dtype, "cuda")
                    alpha = 0.3 if kind == HSTU else 1.0 / d ** 0.5
                    _poison_allocator(q.shape[0], 2, d, dtype)
                    out, lse = _C._attention_forward_native(q, k, v, offsets, max_len, kind, alpha, causal, kernel)
                    ref, ref_lse = _reference(kind, q, k, v, offsets, max_len, alpha, causal)
                    what = f"{KERNELS[kernel]} kind {kind} D {d} {dtype} lengths {lengths} causal {causal}"
                    _close(out, ref, dtype, what)
                    if kind == SOFTMAX:
                        _close(lse, ref_lse, dtype, what + " lse")
                    ran += 1
    assert ran, f"{KERNELS[kernel]} ran no (kind, D, dtype) of the minimum coverage"


@pytest.mark.skipif(not KERNELS, reason="no native attention kernels in this build")
@pytest.mark.parametrize("offsets,max_len,match", [
    ([0, 3, 7], 8, "must be 5"),
    ([0, 4, 5], 3, "more than max_seq_len = 3"),
    ([0, 4, 2, 5], 8, "non-decreasing"),
    ([1, 3, 5], 8, "must be 0"),
])
def test_native_bad_offsets_are_recorded_without_a_sync(offsets, max_len, match):
    kernel, kind, d = next((i, kind, d) for i in range(len(KERNELS)) for kind in (HSTU, SOFTMAX)
                           for d in (64, 128) if _supported(i, kind, d, torch.bfloat16))
    q, k, v = _inputs([5], 2, d, d, torch.bfloat16, "cuda", 27)
    bad = torch.tensor(offsets, device="cuda")
    mymetaops.check_errors()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, _ = _C._attention_forward_native(q, k, v, bad, max_len, kind, 0.5, True, kernel)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.isfinite(out.float()).all()  # clamped: nothing read out of bounds
    with pytest.raises(ValueError, match=match):
        mymetaops.check_errors()


@pytest.mark.skipif(not KERNELS or torch.cuda.get_device_capability() != (9, 0), reason="needs Hopper kernels")
@pytest.mark.parametrize("kind", [HSTU, SOFTMAX], ids=["hstu", "softmax"])
def test_native_backward_kernels(kind):
    """_C._attention_dkdv_native and _attention_dq_native (cuda/attention/dkdv.cu, dq.cu), and the
    dK / dV kernel with dQ fused in (_attention_backward_native), against the float64 reference's
    gradients:
    every head dim and dtype, the ragged lengths, strided q, both offset dtypes, causal and full,
    poisoned allocator (every row inside a sequence must be written)."""
    from mymetaops.triton import jagged_attention as triton_softmax
    for d in (64, 128):
        for dtype in (torch.bfloat16, torch.float16):
            many = [(MANY, True, False, torch.int64)] if (d, dtype) == (128, torch.bfloat16) else []  # CPU reference
            for seed, ((lengths, max_len), causal, strided, index_dtype) in enumerate([
                    (LENGTHS[0], True, False, torch.int32), (LENGTHS[1], True, True, torch.int64),
                    (LENGTHS[2], False, False, torch.int64), (LENGTHS[3], False, True, torch.int32)] + many):
                q, k, v = _inputs(lengths, 2, d, d, dtype, "cuda", 40 + seed, strided)
                grad = _inputs(lengths, 2, d, d, dtype, "cuda", 80 + seed)[0]
                offsets = _offsets(lengths, index_dtype, "cuda")
                alpha = 0.3 if kind == HSTU else 1.0 / d ** 0.5
                leaves = [t.cpu().double().requires_grad_() for t in (q, k, v)]
                if kind == HSTU:
                    ref = hstu_reference(*leaves, offsets.cpu(), max_len, alpha, causal)
                    extra = ()
                else:
                    ref = jagged_attention_reference(*leaves, offsets.cpu(), max_len, causal, alpha)[0]
                    out, lse = attention_ops._softmax_forward_gpu(q, k, v, offsets, max_len, causal, alpha)
                    extra = (lse, triton_softmax.backward_delta(grad, out))
                ref_dq, ref_dk, ref_dv = torch.autograd.grad(ref, leaves, grad.cpu().double())
                _poison_allocator(q.shape[0], 2, d, dtype)
                _poison_allocator(q.shape[0], 2, d, dtype)
                dk, dv = _C._attention_dkdv_native(grad, q, k, v, offsets, max_len, kind, alpha, causal, *extra)
                _poison_allocator(q.shape[0], 2, d, dtype)
                dq = _C._attention_dq_native(grad, q, k, v, offsets, max_len, kind, alpha, causal, *extra)
                what = f"backward kind {kind} D {d} {dtype} lengths {lengths} causal {causal}"
                floor = 1e-3 * ref_dv.abs().max().item()  # dq, dk of one-key softmax rows: 0 by cancellation
                _close(dq, ref_dq, dtype, what + " dq", floor)
                _close(dk, ref_dk, dtype, what + " dk", floor)
                _close(dv, ref_dv, dtype, what + " dv")
                for _ in range(3):
                    _poison_allocator(q.shape[0], 2, d, dtype)
                fused = _C._attention_backward_native(grad, q, k, v, offsets, max_len, kind, alpha, causal, *extra)
                for name, ours, ref, fl in zip(("dq", "dk", "dv"), fused, (ref_dq, ref_dk, ref_dv), (floor, floor, 1e-30)):
                    _close(ours, ref, dtype, f"{what} fused {name}", fl)


@pytest.mark.skipif(not KERNELS or torch.cuda.get_device_capability() != (9, 0), reason="needs Hopper kernels")
def test_native_kernels_run_from_a_fresh_thread():
    """The autograd engine runs backwards (and checkpointed forwards) on its own thread, where no CUDA
    context may be current: the launchers bind one before building their TMA descriptors (without
    it the descriptors failed and the kernel faulted, run 21). Same results as on the main thread."""
    import threading
    lengths, max_len = [300, 1, 129], 300
    q, k, v = _inputs(lengths, 2, 128, 128, torch.bfloat16, "cuda", 60)
    grad = _inputs(lengths, 2, 128, 128, torch.bfloat16, "cuda", 61)[0]
    offsets = _offsets(lengths, device="cuda")
    kernel = KERNELS.index("hopper_d128_128x128")

    def calls():
        out = _C._attention_forward_native(q, k, v, offsets, max_len, HSTU, 0.3, True, kernel)[0]
        return (out, *_C._attention_dkdv_native(grad, q, k, v, offsets, max_len, HSTU, 0.3, True),
                _C._attention_dq_native(grad, q, k, v, offsets, max_len, HSTU, 0.3, True))
    results = {}
    worker = threading.Thread(target=lambda: results.setdefault("thread", calls()))
    worker.start()
    worker.join()
    torch.cuda.synchronize()
    for ours, main in zip(results["thread"], calls()):
        assert torch.equal(ours, main)


def _chosen_backend(op, q, v, offsets, max_len):
    return attention_ops._choice(op, q, v, offsets, max_len, True)[0]


@pytest.mark.skipif(not KERNELS or torch.cuda.get_device_capability() != (9, 0), reason="needs Hopper kernels")
def test_default_path_runs_the_hopper_kernel_on_many_sequences():
    """The model offers the Hopper kernel on batches of many sequences (B128 N1024 H4: ~4.5 steps
    per SM for each of the longest sequence's, mymetaops/model/attention.py): the default call
    runs it and matches the Triton path."""
    g = torch.Generator().manual_seed(5)
    lengths, max_len = torch.randint(1, 1025, (128,), generator=g).tolist(), 1024
    q, k, v = _inputs(lengths, 4, 128, 128, torch.bfloat16, "cuda", 35)
    offsets = _offsets(lengths, device="cuda")
    for op, call in (("hstu_attention", lambda: mymetaops.hstu_attention(q, k, v, offsets, max_len, 0.2)),
                     ("jagged_attention", lambda: mymetaops.jagged_attention(q, k, v, offsets, max_len))):
        assert _chosen_backend(op, q, v, offsets, max_len) == "native"
        ours = call()
        with mymetaops.use_backend("triton"):
            theirs = call()
        _close(ours, theirs.double(), torch.bfloat16, f"{op} (native) vs triton")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_public_ops_match_the_triton_path(dtype):
    """The default path (native where the model chooses it, the eager autograd path) against the
    Triton kernels through torch.ops.mymetaops under use_backend("triton"): forward and gradients."""
    lengths, max_len = [1000, 3, 0, 517, 1024], 1024
    q, k, v = (t.requires_grad_() for t in _inputs(lengths, 2, 128, 128, dtype, "cuda", 31))
    offsets = _offsets(lengths, device="cuda")
    grad = torch.randn(q.shape, device="cuda").to(dtype)
    for op, call, triton_call in (
            ("hstu_attention", lambda: mymetaops.hstu_attention(q, k, v, offsets, max_len, 0.2),
             lambda: torch.ops.mymetaops.hstu_attention(q, k, v, offsets, max_len, 0.2)),
            ("jagged_attention", lambda: mymetaops.jagged_attention(q, k, v, offsets, max_len),
             lambda: torch.ops.mymetaops.jagged_attention(q, k, v, offsets, max_len)[0])):
        ours = call()
        ours_grads = torch.autograd.grad(ours, (q, k, v), grad)
        with mymetaops.use_backend("triton"):
            theirs = triton_call()
            theirs_grads = torch.autograd.grad(theirs, (q, k, v), grad)
        backend = _chosen_backend(op, q, v, offsets, max_len)
        assert _chosen_backend(op + "_backward", q, v, offsets, max_len) == "native"  # the dK / dV kernel
        _close(ours, theirs.double(), dtype, f"{op} ({backend}) vs triton")
        for name, a, b in zip("qkv", ours_grads, theirs_grads):
            _close(a, b.double(), dtype, f"{op} d{name}")
