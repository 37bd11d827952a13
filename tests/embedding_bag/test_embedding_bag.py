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

    indices, offsets = case.bags()
    indices, offsets = indices.to(case.input.dtype), offsets.to(case.input.dtype)
    num_rows = case.weight.shape[0]
    padding_idx = -1 if case.padding_idx is None else case.padding_idx % num_rows
    mode = eb_ops.MODES[case.mode]
    weight = case.weight if case.weight.stride(1) == 1 else case.weight.contiguous()
    psw = case.per_sample_weights
    psw = None if psw is None else psw.reshape(-1)
    out = tri.embedding_bag_forward(weight, indices, offsets, mode, psw, padding_idx,
                                    INTERPRETER_CONFIG)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out)
    plan = eb_ops.backward_plan(indices, offsets, num_rows, mode, psw, padding_idx)
    grad_weight = tri.embedding_bag_backward(grad, *plan, num_rows, INTERPRETER_CONFIG)
    grad_psw = None
    if psw is not None:
        grad_psw = tri.embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
                                                                 padding_idx, INTERPRETER_CONFIG)
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
    for i, dtype in enumerate(TABLE_DTYPES):
        case = make_case(seed=i, num_rows=20, dim=8, bag_sizes=[3, 0, 5], dtype=dtype,
                         weighted=True, device=device)
        indices, offsets = case.bags()
        yield (case.weight.requires_grad_(), indices.to(device), offsets.to(device), 0,
               case.per_sample_weights.requires_grad_(), -1)
        yield (case.weight.detach(), indices.to(device).int(), offsets.to(device).int(), 1, None, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for args in opcheck_samples(device):
        torch.library.opcheck(torch.ops.mymetaops.embedding_bag.default, args)
        weight, indices, offsets, mode, psw, padding_idx = args
        grad = torch.randn(offsets.numel() - 1, weight.shape[1], device=device, dtype=weight.dtype,
                           requires_grad=True)  # the gradient ops are differentiable too
        torch.library.opcheck(torch.ops.mymetaops.embedding_bag_backward.default,
                              (grad, indices, offsets, weight.shape[0], mode, psw, padding_idx))
        if mode == 0:
            torch.library.opcheck(torch.ops.mymetaops.embedding_bag_per_sample_weights_backward.default,
                                  (grad, weight, indices, offsets, mode, padding_idx))


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
def test_forced_vendor_backend_is_a_clear_error():
    case = make_case(seed=1, num_rows=10, dim=4, bag_sizes=[2], device="cuda")
    with mymetaops.use_backend("vendor"), pytest.raises(ValueError, match="vendor"):
        mymetaops.embedding_bag(case.input, case.weight, case.offsets)


# ---- bad input: a clear error, never a crash or a wrong answer ------------------------------------------



@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad_index", [-1, 10, 2**40])
def test_index_out_of_range(device, bad_index):
    weight = torch.randn(10, 4, device=device)
    input = torch.tensor([1, bad_index, 3], device=device)
    offsets = torch.tensor([0, 2], device=device)
    # The message names the bad index: formatting integers into C++ error messages once failed
    # (a second, static copy of libstdc++ in the extension; see setup.py).
    with pytest.raises((IndexError, RuntimeError), match=rf"index {bad_index} .*out of range"):
        mymetaops.embedding_bag(input, weight, offsets)


@pytest.mark.gpu
def test_unvalidated_out_of_range_index_poisons_its_bag_only():
    weight = torch.randn(10, 4, device="cuda")
    input = torch.tensor([1, 2**40, 3, 4], device="cuda")
    offsets = torch.tensor([0, 2], device="cuda")
    for backend in GPU_BACKENDS:
        with mymetaops.use_backend(backend):
            out = mymetaops.embedding_bag(input, weight, offsets, mode="sum", validate=False)
        assert out[0].isnan().all(), backend
        torch.testing.assert_close(out[1], weight[3] + weight[4])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offsets,message", [
    ([-1, 2], "non-negative|>= 0"),
    ([0, 3, 2], "non-decreasing"),
    ([0, 9], "past the end"),
])
def test_bad_offsets(device, offsets, message):
    weight = torch.randn(10, 4, device=device)
    input = torch.tensor([1, 2, 3, 4], device=device)
    with pytest.raises((ValueError, RuntimeError), match=message):
        mymetaops.embedding_bag(input, weight, torch.tensor(offsets, device=device),
                                include_last_offset=True)


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
