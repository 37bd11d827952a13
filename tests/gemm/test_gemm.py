"""The GEMM family's ops: quantize_fp8_*, fp8_gemm, gemm, fp8_linear -- against float64 references,
across backends on the GPU, with opcheck, torch.compile, bad inputs and the no-sync rule."""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mymetaops
import mymetaops.ops  # noqa: F401  (registers the ops)
from gemm_cases import (FORMATS, FP8_GEMM_RTOL, FP8_MAX, FP8_RELATIVE_STEP, FP8_SUBNORMAL, GEMM_RTOL,
                        fp8_gemm_reference, fp8_operands, quantize_reference, relative_error)
from mymetaops import model
from mymetaops.ops import dispatch

ops = torch.ops.mymetaops
gpu = pytest.mark.gpu
ODD = (1, 3, 127)


def device_fp8(device):
    return mymetaops.fp8_dtype(device)


# ---- quantization -------------------------------------------------------------------------------

@pytest.mark.parametrize("fp8", FORMATS)
@pytest.mark.parametrize("shape", [(1, 16), (3, 7), (127, 130), (2, 5, 64), (4, 0), (0, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_rowwise_round_trip(fp8, shape, dtype):
    x = (torch.randn(shape) * 10 ** torch.empty(shape[:-1] + (1,)).uniform_(-3, 3)).to(dtype)
    xq, scale = mymetaops.quantize_fp8_rowwise(x, fp8_dtype=fp8)
    assert xq.dtype == fp8 and xq.shape == x.shape and scale.shape == x.shape[:-1]
    assert scale.dtype == torch.float32
    back = xq.double() * scale.double().unsqueeze(-1)
    bound = FP8_RELATIVE_STEP * x.double().abs() + FP8_SUBNORMAL[fp8] * scale.double().unsqueeze(-1)
    assert ((back - x.double()).abs() <= bound + 1e-30).all()
    ref_q, ref_s = quantize_reference(x, fp8, True)
    assert torch.equal(xq.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(scale, ref_s)
    if x.numel():  # the largest entry of each row lands on (or next to) the format's max
        assert xq.float().abs().amax().item() <= FP8_MAX[fp8]


@pytest.mark.parametrize("fp8", FORMATS)
def test_quantize_rowwise_scale_ub_clamps_outliers(fp8):
    x = torch.randn(4, 64)
    x[1, 3] = 1e4
    ub = torch.tensor(8.0)
    xq, scale = mymetaops.quantize_fp8_rowwise(x, ub, fp8)
    assert scale[1].item() == pytest.approx(8.0 / FP8_MAX[fp8], rel=1e-6)
    assert xq[1, 3].float().item() == FP8_MAX[fp8]  # saturated, not inf/NaN


@pytest.mark.parametrize("fp8", FORMATS)
def test_quantize_tensorwise_round_trip(fp8):
    x = torch.randn(37, 48, dtype=torch.bfloat16) * 3
    xq, scale = mymetaops.quantize_fp8_tensorwise(x, fp8)
    assert scale.shape == () and xq.dtype == fp8
    ref_q, ref_s = quantize_reference(x, fp8, False)
    assert torch.equal(xq.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(scale, ref_s)
    assert relative_error(xq.double() * scale.double(), x) < 0.04


def test_quantize_zero_rows_and_strided_input():
    x = torch.zeros(3, 32)
    xq, scale = mymetaops.quantize_fp8_rowwise(x)
    assert (xq.float() == 0).all() and torch.isfinite(scale).all()
    wide = torch.randn(64, 48)
    xq, scale = mymetaops.quantize_fp8_rowwise(wide.t())  # K not contiguous: copied, same answer
    ref_q, ref_s = quantize_reference(wide.t().contiguous(), torch.float8_e4m3fn, True)
    assert torch.equal(xq.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(scale, ref_s)


def test_fp8_dtype_names_the_device_format():
    assert mymetaops.fp8_dtype("cpu") == torch.float8_e4m3fn
    if torch.cuda.is_available():
        is_gfx942 = (getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or "").startswith("gfx942")
        assert mymetaops.fp8_dtype("cuda") == (torch.float8_e4m3fnuz if is_gfx942 else torch.float8_e4m3fn)


# ---- fp8_gemm on the CPU (the reference every GPU backend is compared with) ---------------------

@pytest.mark.parametrize("fp8", FORMATS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (3, 127, 48), (127, 3, 144), (64, 96, 256)])
@pytest.mark.parametrize("rowwise", [True, False])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fp8_gemm_cpu(fp8, m, n, k, rowwise, out_dtype):
    xq, wq, xs, ws = fp8_operands(m, n, k, fp8, rowwise, row_pad=16 if m > 1 else 0)
    bias = torch.randn(n).to(out_dtype)
    out = mymetaops.fp8_gemm(xq, wq, xs, ws, bias, out_dtype)
    assert out.dtype == out_dtype and out.shape == (m, n)
    assert relative_error(out, fp8_gemm_reference(xq, wq, xs, ws, bias)) <= FP8_GEMM_RTOL[out_dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 127, 5), (64, 33, 128)])
def test_gemm_cpu_and_grad(dtype, m, n, k):
    a = torch.randn(m, k, dtype=dtype, requires_grad=True)
    b = torch.randn(n, k, dtype=dtype).t().requires_grad_()  # nn.Linear's weight.t(): K contiguous
    bias = torch.randn(n, dtype=dtype, requires_grad=True)
    out = mymetaops.gemm(a, b, bias)
    ref = a.double() @ b.double() + bias.double()
    assert relative_error(out, ref) <= GEMM_RTOL[dtype]
    g = torch.randn(m, n, dtype=dtype)
    out.backward(g)
    ga, gb, gbias = torch.autograd.grad(ref, (a, b, bias), g.double())
    assert relative_error(a.grad, ga) <= GEMM_RTOL[dtype]
    assert relative_error(b.grad, gb) <= GEMM_RTOL[dtype]
    assert relative_error(bias.grad, gbias) <= GEMM_RTOL[dtype]


# ---- fp8_linear ---------------------------------------------------------------------------------

def _linear_grads(fn, x, w, b, g):
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    out = fn(x, w, b)
    out.backward(g)
    return out, x.grad, w.grad, b.grad


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_fp8_linear_gradients_track_bf16(device):
    torch.manual_seed(0)
    x = torch.randn(4, 33, 64, dtype=torch.bfloat16, device=device)
    w = (torch.randn(48, 64, device=device) / 8).to(torch.bfloat16)
    b = torch.randn(48, dtype=torch.bfloat16, device=device)
    g = torch.randn(4, 33, 48, dtype=torch.bfloat16, device=device)
    ours = _linear_grads(mymetaops.fp8_linear, x, w, b, g)
    ref = _linear_grads(lambda x, w, b: torch.nn.functional.linear(x.double(), w.double(), b.double()),
                        x, w, b, g.double())
    bf16 = _linear_grads(torch.nn.functional.linear, x, w, b, g)
    for got, want, base in zip(ours, ref, bf16):
        # FP8 forward / input gradient: ~2^-4 per element, averaged over K; bf16 for the weight grad.
        assert relative_error(got, want) <= max(5e-2, 4 * relative_error(base, want))
    assert relative_error(ours[2], ref[2]) <= 1e-2  # the weight gradient runs in bf16


def test_autograd_in_cpp_second_order_and_forward_mode():
    # gemm's backward is made of gemm: differentiable again (d/da of <grad_b, v> = grad @ v^T).
    a = torch.randn(5, 32, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(32, 16, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(5, 16, dtype=torch.bfloat16, requires_grad=True)
    grad_b, = torch.autograd.grad(mymetaops.gemm(a, b), b, g, create_graph=True)
    v = torch.randn(32, 16, dtype=torch.bfloat16)
    grad_g, = torch.autograd.grad((grad_b * v).sum(), g)
    assert relative_error(grad_g, a.double() @ v.double()) <= GEMM_RTOL[torch.bfloat16]
    with pytest.raises(RuntimeError, match="forward-mode AD"):
        torch.func.jvp(lambda t: mymetaops.gemm(t, b.detach()), (a.detach(),), (torch.ones_like(a),))
    w = torch.randn(16, 32, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="forward-mode AD"):
        torch.func.jvp(lambda t: mymetaops.fp8_linear(t, w), (a.detach(),), (torch.ones_like(a),))


def test_fp8_linear_module_is_a_linear():
    m = mymetaops.nn.Fp8Linear(32, 16, dtype=torch.bfloat16)
    assert isinstance(m, torch.nn.Linear) and set(m.state_dict()) == {"weight", "bias"}
    out = m(torch.randn(2, 32, dtype=torch.bfloat16))
    assert out.shape == (2, 16)
    with pytest.raises(ValueError, match="multiples of 16"):
        mymetaops.nn.Fp8Linear(30, 16)
    lin = torch.nn.Linear(64, 32, dtype=torch.bfloat16)
    assert mymetaops.nn.Fp8Linear.from_linear(lin).weight is lin.weight


# ---- bad input ----------------------------------------------------------------------------------

def test_bad_inputs_get_clear_errors():
    xq, wq, xs, ws = fp8_operands(8, 8, 32)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        mymetaops.fp8_gemm(xq[:, :24], wq[:, :24], xs, ws)
    with pytest.raises(RuntimeError, match="share K"):
        mymetaops.fp8_gemm(xq, wq[:, :16], xs, ws)
    with pytest.raises(RuntimeError, match="both be rowwise"):
        mymetaops.fp8_gemm(xq, wq, xs, ws[:3])
    with pytest.raises(RuntimeError, match="both be rowwise"):
        mymetaops.fp8_gemm(xq, wq, xs[:1], ws)
    with pytest.raises(RuntimeError, match="FP8"):
        mymetaops.fp8_gemm(xq.float(), wq, xs, ws)
    with pytest.raises(RuntimeError, match="share an FP8 format"):
        mymetaops.fp8_gemm(xq, wq.float().to(torch.float8_e4m3fnuz), xs, ws)
    with pytest.raises(RuntimeError, match="float32"):
        mymetaops.fp8_gemm(xq, wq, xs.double(), ws.double())
    with pytest.raises(RuntimeError, match="contiguous"):
        mymetaops.fp8_gemm(xq.t().contiguous().t(), wq, xs, ws)  # [M, K] with M contiguous
    with pytest.raises(RuntimeError, match="out_dtype"):
        mymetaops.fp8_gemm(xq, wq, xs, ws, torch.zeros(8, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="out_dtype must be"):
        mymetaops.fp8_gemm(xq, wq, xs, ws, None, torch.int32)
    with pytest.raises(RuntimeError, match="bfloat16 or float16"):
        mymetaops.gemm(torch.randn(2, 3), torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="share K"):
        mymetaops.gemm(torch.randn(2, 3, dtype=torch.bfloat16), torch.randn(4, 4, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        mymetaops.quantize_fp8_rowwise(torch.ones(3, 4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="fp8_dtype"):
        mymetaops.quantize_fp8_rowwise(torch.ones(3, 4), fp8_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="multiples of 16"):
        mymetaops.fp8_linear(torch.randn(2, 24, dtype=torch.bfloat16), torch.randn(16, 24, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        mymetaops.fp8_linear(torch.randn(2, 32), torch.randn(16, 32))


@gpu
def test_device_format_mismatch_is_an_error():
    device = "cuda"
    other = next(f for f in FORMATS if f != device_fp8(device))
    xq, wq, xs, ws = fp8_operands(16, 16, 32, other, device=device)
    with pytest.raises(RuntimeError, match="FP8 format of"):
        mymetaops.fp8_gemm(xq, wq, xs, ws)
    with pytest.raises(RuntimeError, match="FP8 format of"):
        mymetaops.quantize_fp8_rowwise(torch.randn(4, 16, device=device), fp8_dtype=other)


# ---- opcheck and torch.compile ------------------------------------------------------------------

def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# test_schema clones FP8 inputs through ops torch lacks for float8 on the CPU ("mul_cpu_reduced_float"
# not implemented for Float8_e4m3fn), so ops that take FP8 tensors run the other three checks.
FP8_INPUT_CHECKS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("device", _devices())
def test_opcheck(device):
    fp8 = device_fp8(device)
    for m, n, k, rowwise in [(3, 5, 32, True), (16, 32, 64, False), (1, 17, 16, True)]:
        xq, wq, xs, ws = fp8_operands(m, n, k, fp8, rowwise, device=device)
        torch.library.opcheck(ops.fp8_gemm, (xq, wq, xs, ws), test_utils=FP8_INPUT_CHECKS)
        bias = torch.randn(n, device=device, dtype=torch.bfloat16)
        torch.library.opcheck(ops.fp8_gemm, (xq, wq, xs, ws, bias), test_utils=FP8_INPUT_CHECKS)
    for shape in [(3, 32), (2, 4, 16), (1, 48)]:
        x = torch.randn(shape, device=device, dtype=torch.bfloat16)
        torch.library.opcheck(ops.quantize_fp8_rowwise, (x,))
        torch.library.opcheck(ops.quantize_fp8_tensorwise, (x,))
    for m, n, k in [(3, 5, 7), (16, 32, 64)]:
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16, requires_grad=True)
        torch.library.opcheck(ops.gemm, (a, b))
        torch.library.opcheck(ops.gemm, (a, b, torch.randn(n, device=device, dtype=torch.bfloat16)))
    x = torch.randn(5, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(16, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    torch.library.opcheck(ops.fp8_linear, (x, w))


@pytest.mark.parametrize("device", _devices())
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    lin = mymetaops.nn.Fp8Linear(64, 32, device=device, dtype=torch.bfloat16)

    def step(x, a, b):
        xq, xs = mymetaops.quantize_fp8_rowwise(x)
        y = mymetaops.fp8_gemm(xq, xq, xs, xs)
        return lin(x).float().sum() + y.float().sum() + mymetaops.gemm(a, b).float().sum()

    x = torch.randn(8, 64, device=device, dtype=torch.bfloat16)
    a = torch.randn(8, 16, device=device, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(16, 24, device=device, dtype=torch.bfloat16)
    compiled = torch.compile(step, fullgraph=True)
    got = compiled(x, a, b)
    got.backward()
    assert torch.allclose(got, step(x, a, b), rtol=1e-2)


# ---- the model ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(model.HARDWARE))
def test_explain_every_device(name, capsys):
    fmt = "e4m3fnuz" if model.get_hardware(name).arch == "gfx942" else "e4m3fn"
    for p in [model.gemm.GemmProblem(8192, 8192, 8192, fp8_format=fmt),
              model.gemm.GemmProblem(1024, 1024, 65536, fp8_format=fmt),
              model.gemm.GemmProblem(16, 4096, 4096, scaling="tensorwise", fp8_format=fmt)]:
        d = model.decide("fp8_gemm", p, model.get_hardware(name))
        assert d.choice.time_us > 0 and d.candidates
        print(model.format_decision(d))
    d = model.decide("gemm", model.gemm.GemmProblem(4096, 4096, 4096, "bf16", "bf16", "none", fp8_format=""),
                     model.get_hardware(name))
    assert d.choice.backend in ("native", "triton", "vendor")
    assert "choice:" in capsys.readouterr().out


def test_vendor_rules_and_buckets():
    fam = model.get_family("gemm")
    hw = model.get_hardware("H200")
    odd = model.gemm.GemmProblem(1000, 1000, 1008)
    assert "N % 16" in model.gemm.vendor_available(odd, hw)
    assert not any(b == "vendor" for b, _, _ in fam.candidates("fp8_gemm", odd, hw))
    rep = fam.problem_from_key("fp8_gemm", fam.bucket_key("fp8_gemm", odd))
    assert rep.n % 16 and rep.m >= odd.m and rep.k >= odd.k  # the representative keeps the vendor rule
    for x in [1, 16, 17, 255, 256, 257, 16384, 16385, 65536, 68000, 131072]:
        b = model.gemm.size_bucket(x)
        assert model.gemm.bucket_size(b) >= x and model.gemm.size_bucket(model.gemm.bucket_size(b)) == b
        assert x <= 256 or model.gemm.bucket_size(b) % 64 == 0  # keeps every alignment of its sizes
    # bf16: rows that are not 16-byte multiples (torch.mm's slow path) stay so in the representative.
    for n, k in [(1500, 2000), (1024, 1001), (1024, 65536)]:
        p = model.gemm.GemmProblem(5000, n, k, "bf16", "bf16", "none")
        rep = fam.problem_from_key("gemm", fam.bucket_key("gemm", p))
        assert model.gemm.vendor_aligned(rep) == model.gemm.vendor_aligned(p), (n, k)
    fnuz = model.gemm.GemmProblem(64, 64, 64, fp8_format="e4m3fnuz")
    assert "format" in model.gemm.vendor_available(fnuz, hw)
    # Past FAST_ACCUM_MAX_K the Triton FP8 kernel keeps two accumulators: no tile that would spill.
    tall = model.gemm.GemmProblem(1024, 1024, 65536)
    tiles = [c.block_m * c.block_n for b, c, _ in fam.candidates("fp8_gemm", tall, hw) if b == "triton"]
    assert tiles and max(tiles) <= model.gemm.PROMOTED_MAX_TILE
    f32_bias = model.gemm.GemmProblem(64, 64, 64, out_dtype="fp32", scaling="tensorwise", has_bias=True)
    assert "bias" in model.gemm.vendor_available(f32_bias, hw)  # torch._scaled_mm refuses it


def test_a_swapped_kernel_tiles_the_transposed_problem():
    row = next(r for r in model.gemm_kernels.CUDA_KERNELS if r.swap_ab)
    p = model.gemm.GemmProblem(131072, 64, 256)
    q = model.gemm.tiled_problem(p, row)
    assert (q.m, q.n, q.k) == (64, 131072, 256) and model.gemm.tiled_problem(q, row) == p


def test_the_narrow_tile_side_goes_along_the_longer_output_side():
    # Measured on the H200 (SHORT_SIDE_NARROW_TILE_FACTOR): for 512x2048x16384 the swapped 64x128
    # kernel (64 rows along N = 2048) beat the unswapped one 1.31x; for N = 64 it is the only tile
    # without waste; for M = 16 the rule does not apply (the tile is not full either way).
    hw = model.get_hardware("H200")
    factor = model.gemm.narrow_tile_factor
    wide = model.gemm.GemmProblem(512, 2048, 16384)
    assert factor(wide, hw, 64, 128) == model.gemm.SHORT_SIDE_NARROW_TILE_FACTOR
    assert factor(model.gemm.GemmProblem(2048, 512, 16384), hw, 64, 128) == 1.0
    assert factor(model.gemm.GemmProblem(16, 4096, 4096), hw, 64, 128) == 1.0
    assert factor(wide, model.get_hardware("MI300X"), 64, 128) == 1.0
    for m, n, k in ((512, 2048, 16384), (131072, 64, 256)):
        choice = model.decide("fp8_gemm", model.gemm.GemmProblem(m, n, k), hw).choice
        assert choice.config.name == "fp8_swapped_64x128x128_pingpong", (m, n, k, choice)


def test_a_choice_without_native_says_why():
    d = model.decide("fp8_gemm", model.gemm.GemmProblem(5000, 1500, 2000), model.get_hardware("H200"))
    assert d.choice.backend == "triton" and "no native kernel takes this problem: " in d.reason
    assert "N % 8" in dict(d.absent)["native"] and "N % 16" in dict(d.absent)["vendor"]
    assert "native: no candidate" in model.format_decision(d)


def test_native_table_mirror_matches_the_build():
    from mymetaops import _C

    built = _C._native_gemm_kernels()
    if not built:
        pytest.skip("this build has no native GPU kernels")
    vendor = "amd" if torch.version.hip else "nvidia"
    assert [tuple(r) for r in built] == [r.as_native_tuple() for r in model.gemm_kernels.native_table(vendor)]


# ---- the GPU: every backend against the reference -----------------------------------------------

def _backends(op, problem):
    hw = model.detect_hardware()
    native = dispatch.native_available(op, hw.vendor)
    return sorted({c.backend for c in model.decide(op, problem, hw, native_available=native).candidates
                   if c.available})


@gpu
@given(m=st.sampled_from((1, 3, 16, 127, 200, 1000)), n=st.sampled_from((1, 3, 64, 127, 720)),
       k=st.sampled_from((16, 48, 144, 1536)), rowwise=st.booleans(), bias=st.booleans(),
       out=st.sampled_from((torch.bfloat16, torch.float16, torch.float32)), pad=st.sampled_from((0, 32)))
def test_fp8_gemm_every_backend_matches_reference(m, n, k, rowwise, bias, out, pad):
    xq, wq, xs, ws = fp8_operands(m, n, k, device_fp8("cuda"), rowwise, device="cuda", row_pad=pad)
    b = torch.randn(n, device="cuda").to(out) if bias else None
    ref = fp8_gemm_reference(xq, wq, xs, ws, b)
    problem = model.gemm.problem_of_fp8(xq, wq, xs, ws, b, out)
    for backend in ("auto", *_backends("fp8_gemm", problem)):
        with mymetaops.use_backend(backend):
            got = mymetaops.fp8_gemm(xq, wq, xs, ws, b, out)
        assert got.dtype == out and torch.isfinite(got).all(), backend
        assert relative_error(got, ref) <= FP8_GEMM_RTOL[out], backend


@gpu
@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (127, 129, 272), (1000, 720, 1536), (256, 1024, 8192)])
def test_every_native_fp8_kernel_and_split(m, n, k):
    hw = model.detect_hardware()
    xq, wq, xs, ws = fp8_operands(m, n, k, device_fp8("cuda"), True, device="cuda")
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    ref = fp8_gemm_reference(xq, wq, xs, ws, bias)
    if not dispatch.native_available("fp8_gemm", hw.vendor):
        pytest.skip(f"this build's native GEMM table is not {hw.vendor}'s (the HIP-on-CUDA shim build)")
    rows = model.gemm.native_rows(model.gemm.GemmProblem(m, n, k), hw)
    if not rows:
        pytest.skip(f"no native FP8 kernel for {hw.name}")
    for index, row in rows:
        for split in sorted({1, min(2, row.max_split_k), row.max_split_k}):
            got = ops._fp8_gemm_native(xq, wq, xs, ws, bias, None, [index, split])
            assert relative_error(got, ref) <= FP8_GEMM_RTOL[torch.bfloat16], (row.name, split)


@gpu
def test_fp8_gemm_tall_k_accuracy():
    # The weight-gradient shape: K = the batch. Fast accumulation must stay within the bound.
    xq, wq, xs, ws = fp8_operands(256, 256, 131072, device_fp8("cuda"), True, device="cuda")
    ref = fp8_gemm_reference(xq, wq, xs, ws)
    for backend in ("auto", *_backends("fp8_gemm", model.gemm.GemmProblem(256, 256, 131072))):
        with mymetaops.use_backend(backend):
            assert relative_error(mymetaops.fp8_gemm(xq, wq, xs, ws), ref) <= 1e-2, backend


@gpu
@given(m=st.sampled_from((1, 5, 64, 300)), n=st.sampled_from((8, 64, 136, 512)), k=st.sampled_from((8, 64, 200, 1024)),
       dtype=st.sampled_from((torch.bfloat16, torch.float16)), kn=st.booleans(), bias=st.booleans())
def test_gemm_every_backend_matches_reference(m, n, k, dtype, kn, bias):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype) if kn else torch.randn(n, k, device="cuda", dtype=dtype).t()
    bb = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    ref = a.double() @ b.double() + (bb.double() if bias else 0)
    for backend in ("auto", *_backends("gemm", model.gemm.problem_of_gemm(a, b, bb))):
        with mymetaops.use_backend(backend):
            got = mymetaops.gemm(a, b, bb)
        assert relative_error(got, ref) <= GEMM_RTOL[dtype], backend


@gpu
@pytest.mark.parametrize("backend", ["native", "triton"])
@pytest.mark.parametrize("shape", [(1, 16), (3, 7), (127, 1000), (2048, 4096), (5, 3, 64), (0, 16), (4, 0)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_quantize_gpu_is_bit_exact(backend, shape, dtype):
    fp8 = device_fp8("cuda")
    x = (torch.randn(shape, device="cuda") * 30).to(dtype)
    for op, rowwise in [(mymetaops.quantize_fp8_rowwise, True), (mymetaops.quantize_fp8_tensorwise, False)]:
        with mymetaops.use_backend(backend):
            xq, scale = op(x)
        ref_q, ref_s = quantize_reference(x, fp8, rowwise)
        assert torch.equal(xq.view(torch.uint8), ref_q.view(torch.uint8)), (op.__name__, backend)
        assert torch.equal(scale, ref_s), (op.__name__, backend)
    ub = torch.tensor(2.0, device="cuda")
    with mymetaops.use_backend(backend):
        xq, scale = mymetaops.quantize_fp8_rowwise(x, ub)
    ref_q, ref_s = quantize_reference(x, fp8, True, ub)
    assert torch.equal(xq.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(scale, ref_s)


@gpu
def test_default_path_never_syncs():
    fp8 = device_fp8("cuda")
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(96, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(2):  # the second round runs from the decision cache
        torch.cuda.set_sync_debug_mode("error")
        try:
            xq, xs = mymetaops.quantize_fp8_rowwise(x.detach())
            wq, ws = mymetaops.quantize_fp8_rowwise(w.detach())
            mymetaops.fp8_gemm(xq, wq, xs, ws)
            tq, ts = mymetaops.quantize_fp8_tensorwise(x.detach())
            mymetaops.fp8_gemm(tq, tq, ts, ts)
            mymetaops.gemm(x, w.t()).float().sum().backward()
            mymetaops.fp8_linear(x, w).float().sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert fp8 == xq.dtype


@gpu
def test_every_triton_config_compiles_and_matches():
    hw = model.detect_hardware()
    xq, wq, xs, ws = fp8_operands(200, 136, 272, device_fp8("cuda"), True, device="cuda")
    ref = fp8_gemm_reference(xq, wq, xs, ws)
    from mymetaops.triton import gemm as triton_gemm

    for (vendor, kind), configs in model.gemm_kernels.TRITON_CONFIGS.items():
        if vendor != hw.vendor or kind != "fp8":
            continue
        for c in configs:
            out = torch.full((200, 136), float("nan"), device="cuda", dtype=torch.bfloat16)
            triton_gemm.fp8_gemm(xq, wq, xs, ws, None, out, c)
            assert relative_error(out, ref) <= 1e-2, str(c)
    for a_rows, cfg in itertools.product([1, 64], model.gemm_kernels.TRITON_CONFIGS.get((hw.vendor, "16bit"), ())):
        a = torch.randn(a_rows, 96, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(96, 40, device="cuda", dtype=torch.bfloat16)
        out = torch.full((a_rows, 40), float("nan"), device="cuda", dtype=torch.bfloat16)
        triton_gemm.gemm(a, b, None, out, cfg)
        assert relative_error(out, a.double() @ b.double()) <= 1e-2, str(cfg)


def test_model_triton_configs_match_the_kernels():
    triton_gemm = pytest.importorskip("mymetaops.triton.gemm")
    lists = {("nvidia", "fp8"): triton_gemm.FP8_CONFIGS_NVIDIA, ("amd", "fp8"): triton_gemm.FP8_CONFIGS_AMD,
             ("nvidia", "16bit"): triton_gemm.BF16_CONFIGS_NVIDIA, ("amd", "16bit"): triton_gemm.BF16_CONFIGS_AMD}
    for key, configs in lists.items():
        assert tuple(configs) == model.gemm_kernels.TRITON_CONFIGS[key], key
