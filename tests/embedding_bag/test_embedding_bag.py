"""embedding_bag on every backend against a float64 reference; autograd, opcheck, bad input."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import HAS_GPU, TRITON_INTERPRETED
from embedding_bag_cases import (INDEX_DTYPES, TABLE_DTYPES, assert_close, cases, make_case,
                                 reference, reference_pool)
from hypothesis import assume, given

import mymetaops
from mymetaops.configs import TritonEmbeddingBagConfig
from mymetaops.ops import embedding_bag as eb_ops

# Backends and where they run: the C++ CPU kernels; Triton in its interpreter (CPU machines) or
# compiled (GPU); the native CUDA/HIP kernels (GPU).
CPU_BACKENDS = ["cpu"] + (["triton-interpreter"] if TRITON_INTERPRETED else [])
GPU_BACKENDS = ["native", "triton"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
INTERPRETER_CONFIG = TritonEmbeddingBagConfig(block_l=8, block_d=32, num_warps=4)


def poison_cuda_cache(nbytes):
    """Fill a freed block of the caching allocator with NaN, so an output that reuses it and is
    left partly unwritten shows NaN."""
    if HAS_GPU and nbytes:
        torch.empty(nbytes // 4 + 1, device="cuda").fill_(float("nan"))


def run(backend, case, grad_seed=0):
    """(out, grad_weight, grad_per_sample_weights) of one backend for case."""
    if backend == "triton-interpreter":
        return run_triton_interpreter(case, grad_seed)
    device = "cpu" if backend == "cpu" else "cuda"
    case = case.to(device)
    weight = case.weight.detach().requires_grad_()
    psw = case.per_sample_weights
    psw = psw.detach().requires_grad_() if psw is not None else None
    indices, offsets = case.bags()
    poison_cuda_cache((offsets.numel() - 1) * weight.shape[1] * weight.element_size())
    with mymetaops.use_backend("auto" if backend == "cpu" else backend):
        out = mymetaops.embedding_bag(case.input, weight, **dict(case.kwargs(), per_sample_weights=psw))
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out)
        out.backward(grad)
    return out, weight.grad, None if psw is None else psw.grad, grad


def run_triton_interpreter(case, grad_seed):
    """The Triton kernels on CPU tensors (TRITON_INTERPRET=1), driven as the GPU entry points do."""
    from mymetaops.triton import embedding_bag as tri

    indices, offsets, last = case.op_bags()
    num_rows = case.weight.shape[0]
    padding_idx = -1 if case.padding_idx is None else case.padding_idx % num_rows
    mode = eb_ops.MODES[case.mode]
    weight = case.weight if case.weight.stride(1) == 1 else case.weight.contiguous()
    psw = case.per_sample_weights
    psw = None if psw is None else psw.reshape(-1)
    record = torch.zeros(8, dtype=torch.int64)
    out = tri.embedding_bag_forward(weight, indices, offsets, mode, psw, padding_idx, last,
                                    INTERPRETER_CONFIG, record)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out)
    split = 4 if indices.numel() % 2 else 1  # half the cases: each row's run in 4 sub-runs
    plan = eb_ops.backward_plan(indices, offsets, num_rows, mode, psw, padding_idx, last, split)
    grad_weight = eb_ops.reduce_split(
        tri.embedding_bag_backward(grad, *plan, num_rows * split, INTERPRETER_CONFIG), num_rows, split)
    grad_psw = None
    if psw is not None:
        grad_psw = tri.embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
                                                                 padding_idx, last, INTERPRETER_CONFIG,
                                                                 record)
    assert record[1] == 0, f"valid input recorded an error: {record.tolist()}"
    return out, grad_weight, grad_psw, grad


def check_against_reference(backend, case):
    out, grad_weight, grad_psw, grad = run(backend, case)
    ref_out, ref_gw, ref_gpsw = reference(case, grad)
    abs_out, abs_gw, abs_gpsw = reference(case, grad, absolute=True)
    dtype = case.weight.dtype
    assert out.dtype == dtype and grad_weight.dtype == dtype
    assert_close(out, ref_out, abs_out, dtype, f"{backend} forward")
    assert_close(grad_weight, ref_gw, abs_gw, dtype, f"{backend} grad weight")
    if case.per_sample_weights is not None:
        assert_close(grad_psw.reshape(-1), ref_gpsw, abs_gpsw, dtype, f"{backend} grad per_sample_weights")


# ---- the reference itself ------------------------------------------------------------------------

@given(cases())
def test_reference_matches_torch(case):
    """Our float64 reference computes what torch.nn.functional.embedding_bag computes."""
    assume(case.input.dim() == 1 or case.input.shape[1] > 0)  # torch fails on bags of size 0 there
    expected = F.embedding_bag(case.input.long(), case.weight.double(),
                               **dict(case.kwargs(), offsets=None if case.offsets is None
                                      else case.offsets.long(),
                                      per_sample_weights=None if case.per_sample_weights is None
                                      else case.per_sample_weights.double()))
    torch.testing.assert_close(reference(case), expected, rtol=1e-12, atol=1e-12)


# ---- cross-backend equivalence ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", CPU_BACKENDS)
@given(case=cases())
def test_cpu_backends_match_reference(backend, case):
    check_against_reference(backend, case)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@given(case=cases())
def test_gpu_backends_match_reference(backend, case):
    check_against_reference(backend, case)


LARGE_CASES = [  # (num_rows, dim, bag sizes): wide rows, long bags, tile remainders
    (1, 1000, [0, 1, 500]),
    (3, 130, [127, 0, 3]),
    (5000, 1000, [500, 499, 0, 1]),
    (100_000, 127, [300] * 7),
    (100_000, 64, [16] * 3000),
]


@pytest.mark.parametrize("num_rows,dim,bag_sizes", LARGE_CASES)
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
@pytest.mark.parametrize("backend", ["cpu"] + [pytest.param(b, marks=pytest.mark.gpu)
                                               for b in GPU_BACKENDS])
def test_large_shapes(backend, dtype, num_rows, dim, bag_sizes):
    for mode, weighted in (("sum", True), ("mean", False)):
        case = make_case(seed=num_rows + dim, num_rows=num_rows, dim=dim, bag_sizes=bag_sizes,
                         dtype=dtype, mode=mode, weighted=weighted, padding=True)
        check_against_reference(backend, case)


@pytest.mark.parametrize("bag_sizes", [[], [0], [0, 0, 0]], ids=["no bags", "one empty", "three empty"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("backend", CPU_BACKENDS + [pytest.param(b, marks=pytest.mark.gpu)
                                                    for b in GPU_BACKENDS])
def test_no_indices(backend, index_dtype, bag_sizes):
    """No lookups at all: zero outputs and gradients, empty per-sample-weight gradients."""
    for mode, weighted in (("sum", True), ("mean", False)):
        case = make_case(seed=9, num_rows=4, dim=3, bag_sizes=bag_sizes, index_dtype=index_dtype,
                         mode=mode, weighted=weighted)
        check_against_reference(backend, case)


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_backends_agree_bitwise_on_repeat(index_dtype):
    """The backward is deterministic: the same call twice gives the same bits."""
    case = make_case(seed=7, num_rows=50, dim=64, bag_sizes=[40] * 200, index_dtype=index_dtype)
    for backend in GPU_BACKENDS:
        first, second = run(backend, case), run(backend, case)
        assert torch.equal(first[1], second[1]), backend


# ---- autograd, torch.compile, opcheck ---------------------------------------------------------------

def opcheck_samples(device):
    """(weight, indices, offsets, mode, per_sample_weights, padding_idx, include_last_offset)."""
    for i, dtype in enumerate(TABLE_DTYPES):
        case = make_case(seed=i, num_rows=20, dim=8, bag_sizes=[3, 0, 5], dtype=dtype,
                         weighted=True, device=device)
        indices, offsets = case.bags()
        indices, offsets = indices.to(device), offsets.to(device)
        yield (case.weight.requires_grad_(), indices, offsets, 0,
               case.per_sample_weights.requires_grad_(), -1, True)
        yield (case.weight.detach(), indices.int(), offsets.int(), 1, None, 2, True)
        yield (case.weight.detach(), indices, offsets[:-1], 0, None, -1, False)  # torch's form


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for args in opcheck_samples(device):
        torch.library.opcheck(torch.ops.mymetaops.embedding_bag.default, args)
        weight, indices, offsets, mode, psw, padding_idx, last = args
        num_bags = offsets.numel() - 1 if last else offsets.numel()
        grad = torch.randn(num_bags, weight.shape[1], device=device, dtype=weight.dtype,
                           requires_grad=True)  # the gradient ops are differentiable too
        torch.library.opcheck(torch.ops.mymetaops.embedding_bag_backward.default,
                              (grad, indices, offsets, weight.shape[0], mode, psw, padding_idx, last))
        if mode == 0:
            torch.library.opcheck(torch.ops.mymetaops.embedding_bag_per_sample_weights_backward.default,
                                  (grad, weight, indices, offsets, mode, padding_idx, last))


def second_order_grads(pool, weight, psw, grad_out, table_probe, index_probe):
    """Gradients of <d pool / d (weight, psw) applied to grad_out, probes> w.r.t. weight, psw and
    grad_out: every path through the two gradient ops' own derivatives."""
    out = pool(weight, psw)
    grad_weight, grad_psw = torch.autograd.grad(out, [weight, psw], grad_out, create_graph=True)
    loss = (grad_weight * table_probe).sum() + (grad_psw * index_probe).sum()
    return torch.autograd.grad(loss, [weight, psw, grad_out])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding", [False, True])
def test_double_backward(device, padding):
    case = make_case(seed=11, num_rows=30, dim=5, bag_sizes=[3, 0, 6, 1], weighted=True,
                     padding=padding)
    g = torch.Generator().manual_seed(12)
    grad_out = torch.randn(4, 5, generator=g, dtype=torch.float64)
    table_probe = torch.randn(30, 5, generator=g, dtype=torch.float64)
    index_probe = torch.randn(case.input.numel(), generator=g, dtype=torch.float64)
    leaves = lambda dtype, dev: [t.detach().to(dev, dtype).requires_grad_() for t in (  # noqa: E731
        case.weight, case.per_sample_weights, grad_out)] + [table_probe.to(dev, dtype),
                                                              index_probe.to(dev, dtype)]
    expected = second_order_grads(lambda w, p: reference_pool(case, w, p),
                                  *leaves(torch.float64, "cpu"))
    scale = second_order_grads(lambda w, p: reference_pool(case, w, p),
                               *[t.abs().detach().requires_grad_() for t in leaves(torch.float64, "cpu")])
    on_device = case.to(device)
    for backend in ["auto"] if device == "cpu" else GPU_BACKENDS:
        with mymetaops.use_backend(backend):
            actual = second_order_grads(
                lambda w, p: mymetaops.embedding_bag(on_device.input, w, on_device.offsets, mode="sum",
                                                     per_sample_weights=p,
                                                     padding_idx=case.padding_idx),
                *leaves(torch.float32, device))
        for what, a, e, sc in zip(["weight", "per_sample_weights", "grad_output"], actual, expected,
                                  scale):
            assert_close(a, e, sc, torch.float32, f"{backend} second-order grad of {what}")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile(device):
    case = make_case(seed=3, num_rows=40, dim=16, bag_sizes=[4, 0, 7, 2], mode="mean",
                     padding=True, device=device)
    weight = case.weight.detach().requires_grad_()

    def step(weight, input, offsets):
        return mymetaops.embedding_bag(input, weight, offsets, mode="mean",
                                       padding_idx=case.padding_idx).square().sum()

    compiled = torch.compile(step, fullgraph=True)
    loss = compiled(weight, case.input, case.offsets)
    loss.backward()
    ref_weight = case.weight.detach().clone().requires_grad_()
    step(ref_weight, case.input, case.offsets).backward()
    torch.testing.assert_close(loss, step(case.weight, case.input, case.offsets))
    torch.testing.assert_close(weight.grad, ref_weight.grad)


def test_drop_in_for_torch_defaults():
    """Same positional arguments and defaults as F.embedding_bag (mode='mean')."""
    case = make_case(seed=5, num_rows=30, dim=6, bag_sizes=[2, 5, 0])
    torch.testing.assert_close(mymetaops.embedding_bag(case.input, case.weight, case.offsets),
                               F.embedding_bag(case.input, case.weight, case.offsets))


# ---- dispatch ----------------------------------------------------------------------------------------

def test_use_backend_scopes_and_validates(monkeypatch):
    assert mymetaops.current_backend() == "auto"
    with mymetaops.use_backend("triton"):
        assert mymetaops.current_backend() == "triton"
    assert mymetaops.current_backend() == "auto"
    monkeypatch.setenv("MYMETAOPS_BACKEND", "native")
    assert mymetaops.current_backend() == "native"
    with mymetaops.use_backend("triton"):
        assert mymetaops.current_backend() == "triton"
    with pytest.raises(ValueError, match="unknown backend"):
        mymetaops.use_backend("cudnn").__enter__()
    monkeypatch.setenv("MYMETAOPS_BACKEND", "fastest")
    with pytest.raises(ValueError, match="MYMETAOPS_BACKEND"):
        mymetaops.current_backend()


def test_explain_for_an_absent_gpu(capsys):
    weight = torch.empty(10_000_000, 128, device="meta")
    input = torch.empty(65536 * 32, dtype=torch.int64, device="meta")
    offsets = torch.empty(65536, dtype=torch.int64, device="meta")
    decisions = mymetaops.explain("embedding_bag", input, weight, offsets, mode="sum",
                                  device="MI350X", backward=True)
    text = capsys.readouterr().out
    assert "MI350X" in text and len(decisions) == 2
    assert all(d.choice.available for d in decisions)


@pytest.mark.gpu
def test_forced_vendor_backend():
    """The vendor candidate (torch's kernel) runs the forward; the backward ops have none, which
    forcing it says clearly."""
    case = make_case(seed=1, num_rows=10, dim=4, bag_sizes=[2, 3], device="cuda")
    weight = case.weight.detach().requires_grad_()
    with mymetaops.use_backend("vendor"):
        out = mymetaops.embedding_bag(case.input, weight, case.offsets, mode="sum")
        torch.testing.assert_close(out, F.embedding_bag(case.input, case.weight, case.offsets, mode="sum"))
        with pytest.raises(ValueError, match="vendor"):
            out.sum().backward()


def test_decision_cache_once_per_bucket(monkeypatch):
    """The C++ cache asks the model once per bucket, counts hits, and reports the model's errors
    as the caller's ValueError (here on the CPU, with an H200 standing in for the device)."""
    from mymetaops import _C, model
    from mymetaops.ops import dispatch

    monkeypatch.setattr(dispatch, "hardware", lambda index: model.get_hardware("H200"))
    dispatch.cache_clear()
    family = model.family_of("embedding_bag")
    exact = (100_000, 64, 4096, 4096 * 12, 0, 4, 0, 0, 16)  # the C++ kernels' exact fields
    key = family.bucket_key("embedding_bag", eb_ops._exact_problem(exact))
    fields = [0, -1, *key]  # device 0, auto
    first = _C._decide("embedding_bag", fields, list(exact))
    nearby = (100_000, 64, 4200, 4200 * 12, 0, 4, 0, 0, 16)  # same bucket
    assert family.bucket_key("embedding_bag", eb_ops._exact_problem(nearby)) == key
    assert _C._decide("embedding_bag", fields, list(nearby)) == first
    info = dispatch.cache_info()
    assert (info["hits"], info["misses"], info["size"]) == (1, 1, 1)
    with pytest.raises(RuntimeError, match="bucket key"):  # C++ and Python rounding must agree
        _C._decide("embedding_bag", [0, -1, *key[:-1], key[-1] + 1], list(exact))
    with pytest.raises(ValueError, match="vendor"):  # forced vendor, backward: no candidate
        _C._decide("embedding_bag_backward", [0, 2, *key], list(exact))
    dispatch.cache_clear()


# ---- bad input: a clear error, never a crash or a wrong answer ------------------------------------------



def raises_now_or_on_check(device, exception, match, validate_too=True):
    """The exception a bad value must raise: at once on the CPU; on a GPU without a sync, by
    check_errors() (and at once with validate=True)."""
    def check(call):
        if device == "cpu":
            with pytest.raises(exception, match=match):
                call(validate=False)
            return
        mymetaops.check_errors()  # nothing pending from earlier tests
        call(validate=False)  # no exception, no sync
        with pytest.raises(exception, match=match):
            mymetaops.check_errors()
        mymetaops.check_errors()  # reported once
        if validate_too:
            with pytest.raises(exception, match=match):
                call(validate=True)
    return check


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad_index", [-1, 10, 2**40])
def test_index_out_of_range(device, bad_index):
    weight = torch.randn(10, 4, device=device)
    input = torch.tensor([1, bad_index, 3], device=device)
    offsets = torch.tensor([0, 2], device=device)
    # The message names the op, the bad index and its position: formatting integers into C++
    # error messages once failed (a second, static copy of libstdc++ in the extension; see setup.py).
    raises_now_or_on_check(device, IndexError, rf"embedding_bag: index {bad_index} at position 1 .*out of range")(
        lambda validate: mymetaops.embedding_bag(input, weight, offsets, validate=validate))


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_bad_index_poisons_its_bag_and_is_raised_at_the_next_call(backend):
    weight = torch.randn(10, 4, device="cuda")
    input = torch.tensor([1, 2**40, 3, 4], device="cuda")
    offsets = torch.tensor([0, 2], device="cuda")
    mymetaops.check_errors()
    with mymetaops.use_backend(backend):
        out = mymetaops.embedding_bag(input, weight, offsets, mode="sum")
        assert out[0].isnan().all(), backend  # reading out reads the result: the kernel is done
        torch.testing.assert_close(out[1], weight[3] + weight[4])
        with pytest.raises(IndexError, match="index 1099511627776 at position 1"):
            mymetaops.embedding_bag(input[2:], weight, offsets[:1], mode="sum")  # the next call
    mymetaops.check_errors()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offsets,include_last_offset,message", [
    ([-1, 2], True, r"non-negative, got offsets\[0\] = -1"),
    ([0, 3, 2], True, r"non-decreasing, but offsets\[2\] = 2"),
    ([0, 9], True, r"offsets\[1\] = 9 is past the end of the 4 indices"),
    ([0, 8], False, r"offsets\[1\] = 8 is past the end of the 4 indices"),  # the caller's position
])
def test_bad_offsets(device, offsets, include_last_offset, message):
    weight = torch.randn(10, 4, device=device)
    input = torch.tensor([1, 2, 3, 4], device=device)
    offsets = torch.tensor(offsets, device=device)
    raises_now_or_on_check(device, ValueError, message)(
        lambda validate: mymetaops.embedding_bag(input, weight, offsets, include_last_offset=include_last_offset,
                                                 validate=validate))


@pytest.mark.gpu
@pytest.mark.parametrize("mode,weighted", [("sum", True), ("mean", False)])
def test_default_path_never_syncs(mode, weighted):
    """Forward and backward of every op, default arguments, with torch's sync detector on."""
    case = make_case(seed=21, num_rows=1000, dim=64, bag_sizes=[8] * 32 + [0, 3], mode=mode,
                     weighted=weighted, padding=True, device="cuda")
    weight = case.weight.detach().requires_grad_()
    psw = None if case.per_sample_weights is None else case.per_sample_weights.detach().requires_grad_()
    mymetaops.embedding_bag(case.input, weight, **dict(case.kwargs(), per_sample_weights=psw))  # decide first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            out = mymetaops.embedding_bag(case.input, weight, **dict(case.kwargs(), per_sample_weights=psw))
            out.backward(torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    mymetaops.check_errors()


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_types_and_ranks(device):
    weight = torch.randn(10, 4, device=device)
    input = torch.tensor([1, 2, 3], device=device)
    offsets = torch.tensor([0, 1], device=device)
    cases = [
        (dict(input=input.float(), weight=weight, offsets=offsets), "int32 or int64"),
        (dict(input=input, weight=weight.double(), offsets=offsets), "float32, float16 or bfloat16"),
        (dict(input=input, weight=weight[0], offsets=offsets), "2-D"),
        (dict(input=input.reshape(1, 1, 3), weight=weight, offsets=None), "1-D .* or 2-D"),
        (dict(input=input, weight=weight, offsets=None), "offsets is required"),
        (dict(input=input.reshape(1, 3), weight=weight, offsets=offsets), "offsets must be None"),
        (dict(input=input, weight=weight, offsets=offsets, per_sample_weights=torch.ones(
            3, device=device, dtype=torch.float16), mode="sum"), "dtype"),
        (dict(input=input, weight=weight, offsets=offsets, per_sample_weights=torch.ones(
            2, device=device), mode="sum"), "shape of input"),
        (dict(input=input, weight=weight, offsets=offsets, per_sample_weights=torch.ones(
            3, device=device), mode="mean"), "mode='sum'"),
        (dict(input=input, weight=weight, offsets=offsets, padding_idx=10), "padding_idx"),
    ]
    for kwargs, message in cases:
        with pytest.raises((TypeError, ValueError, RuntimeError), match=message):
            mymetaops.embedding_bag(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(max_norm=1.0), dict(scale_grad_by_freq=True),
                                    dict(sparse=True), dict(mode="max")])
def test_unsupported_arguments(kwargs):
    with pytest.raises(NotImplementedError):
        mymetaops.embedding_bag(torch.tensor([0]), torch.randn(2, 3), torch.tensor([0]), **kwargs)


@pytest.mark.gpu
def test_device_mismatch():
    weight = torch.randn(10, 4, device="cuda")
    with pytest.raises((ValueError, RuntimeError), match="device"):
        mymetaops.embedding_bag(torch.tensor([1, 2]), weight, torch.tensor([0]))
    with pytest.raises((ValueError, RuntimeError), match="device"):
        mymetaops.embedding_bag(torch.tensor([1, 2], device="cuda"), weight, torch.tensor([0]))


# ---- function transforms, forward AD, fake kernels, compile (found by fuzzing the CPU build) -----

def transforms_case(device):
    case = make_case(seed=31, num_rows=12, dim=5, bag_sizes=[3, 0, 4], weighted=True, device=device)
    torch_pool = lambda w, p: F.embedding_bag(case.input, w, case.offsets, mode="sum", per_sample_weights=p)  # noqa: E731
    ours = lambda w, p: mymetaops.embedding_bag(case.input, w, case.offsets, mode="sum", per_sample_weights=p)  # noqa: E731
    return case, ours, torch_pool


@pytest.mark.parametrize("device", DEVICES)
def test_func_transforms_match_torch(device):
    """torch.func.grad / vjp / jacrev work as through torch's op; forward mode (jvp, forward_ad)
    computes the tangent (the op is linear in weight and in per_sample_weights), never zeros."""
    case, ours, torch_pool = transforms_case(device)
    w, p = case.weight, case.per_sample_weights
    torch.testing.assert_close(torch.func.jacrev(ours, argnums=(0, 1))(w, p),
                               torch.func.jacrev(torch_pool, argnums=(0, 1))(w, p))
    loss = lambda f: lambda w, p: f(w, p).square().sum()  # noqa: E731
    torch.testing.assert_close(torch.func.grad(loss(ours))(w, p), torch.func.grad(loss(torch_pool))(w, p))
    g = torch.randn(3, 5, device=device)
    torch.testing.assert_close(torch.func.vjp(ours, w, p)[1](g), torch.func.vjp(torch_pool, w, p)[1](g))
    tw, tp = torch.randn_like(w), torch.randn_like(p)
    _, tangent = torch.func.jvp(ours, (w, p), (tw, tp))
    expected = torch_pool(tw, p) + torch_pool(w, tp)
    assert tangent.abs().sum() > 0
    torch.testing.assert_close(tangent, expected)
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        out = mymetaops.embedding_bag(case.input, fwAD.make_dual(w, tw), case.offsets, mode="mean")
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent,
                                   F.embedding_bag(case.input, tw, case.offsets, mode="mean"))


def test_forward_ad_through_the_gradient_ops_is_a_clear_error():
    case, _, _ = transforms_case("cpu")
    indices, offsets = case.bags()
    grad = torch.randn(3, 5)
    with pytest.raises(RuntimeError, match="forward-mode AD .* not implemented"):
        torch.func.jacfwd(lambda g: torch.ops.mymetaops.embedding_bag_backward(g, indices, offsets, 12))(grad)


def test_fake_kernels_check_their_arguments():
    """The gradient ops' fake kernels run the same checks as the real ones (shapes, dtypes)."""
    meta = lambda *shape, dtype=torch.float32: torch.empty(shape, dtype=dtype, device="meta")  # noqa: E731
    indices, offsets = meta(10, dtype=torch.int64), meta(4, dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"grad_output must be \[num_bags=3, dim=5\]"):
        torch.ops.mymetaops.embedding_bag_per_sample_weights_backward(meta(2, 5), meta(7, 5), indices, offsets)
    with pytest.raises(RuntimeError, match="grad_output must be float32, float16 or bfloat16"):
        torch.ops.mymetaops.embedding_bag_backward(meta(3, 5, dtype=torch.int32), indices, offsets, 7)
    with pytest.raises(RuntimeError, match="grad_output must be 2-D"):
        torch.ops.mymetaops.embedding_bag_backward(meta(3), indices, offsets, 7)
    with pytest.raises(RuntimeError, match="per_sample_weights must have one entry per index"):
        torch.ops.mymetaops.embedding_bag_backward(meta(3, 5), indices, offsets, 7, 0, meta(9))
    assert torch.ops.mymetaops.embedding_bag_backward(meta(4, 5), indices, offsets, 7, 0, None, -1,
                                                       False).shape == (7, 5)


def test_huge_int32_inputs_get_int64_offsets():
    """2-D int32 input past 2^31 elements: offsets the int32 range cannot hold are built as int64
    (meta tensors: no memory). 1-D int32 input that long needs no appended offset either."""
    weight = torch.empty(100, 8, device="meta")
    out = mymetaops.embedding_bag(torch.empty(2**20, 2**11 + 1, dtype=torch.int32, device="meta"), weight)
    assert out.shape == (2**20, 8)
    out = mymetaops.embedding_bag(torch.empty(2**31 + 5, dtype=torch.int32, device="meta"), weight,
                                  torch.empty(3, dtype=torch.int32, device="meta"))
    assert out.shape == (3, 8)


def test_errors_under_dynamic_compile_keep_their_message():
    """A bad argument under torch.compile(dynamic=True) raises the real message (no f-string of a
    symbolic size in the wrapper)."""
    weight, input, offsets = torch.randn(10, 4), torch.tensor([1, 2, 3]), torch.tensor([0, 1])
    step = torch.compile(lambda w, i, o, p: mymetaops.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
                         dynamic=True, fullgraph=True)
    with pytest.raises(Exception, match="per_sample_weights must have the shape of input"):
        step(weight, input, offsets, torch.ones(2))
    with pytest.raises(Exception, match="padding_idx"):
        torch.compile(lambda w, i, o: mymetaops.embedding_bag(i, w, o, padding_idx=-11), dynamic=True)(
            weight, input, offsets)
