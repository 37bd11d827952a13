"""Triton GEMM-family launchers (fp8_gemm, gemm, quantize_fp8_rowwise / _tensorwise) against float64
and plain-torch references.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (conftest.py sets it before
triton is imported), on GPU tensors otherwise. Needs only the Triton modules, not the extension.
Interpreter caveats the tolerances and dtypes account for: its tl.dot on bf16 operands is wrong
(Triton 3.8), so gemm runs fp16/fp32 there (bf16 on a GPU); its fp32 -> bf16 conversion truncates,
so bf16 outputs get a full ulp; its fp32 -> fp8 conversion is wrong, so the quantize kernels use
their integer rounding there (SOFTWARE_CVT) and the exact-equality tests check that.
"""
import zlib

import pytest
import torch

from mymetaops.configs import TritonGemmConfig as Config
from mymetaops.configs import TritonQuantizeConfig as QConfig
from mymetaops.triton import gemm as tg
from mymetaops.triton import quantize_fp8 as tq

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# On a GPU only the device's own FP8 format compiles (Triton rejects fp8e4b8 on NVIDIA); the CPU
# interpreter runs both.
FP8_FORMATS = ((torch.float8_e4m3fnuz if (getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or "")
                .startswith("gfx942") else torch.float8_e4m3fn,) if torch.cuda.is_available()
               else (torch.float8_e4m3fn, torch.float8_e4m3fnuz))
OUT_EPS = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-22}  # rounding of the result
# Small configs keep the interpreter fast: a persistent one (several tiles per program, masked K
# for K % 32 != 0), a one-tile-per-program one with block_k 64 and group_m 1.
FP8_CONFIGS = [Config(16, 32, 32, 2, 4, 1, 1), Config(32, 16, 64, 1, 4, 1, 0)]
GEMM_CONFIGS = [Config(16, 32, 16, 2, 4, 1, 1), Config(32, 16, 32, 1, 4, 1, 0)]


def _generator(*case) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def _strided(t: torch.Tensor, pad: int) -> torch.Tensor:
    """t as the leading columns of a wider tensor (row stride = cols + pad)."""
    wide = torch.zeros(t.size(0), t.size(1) + pad, dtype=t.dtype)
    wide[:, :t.size(1)] = t
    return wide.to(DEVICE)[:, :t.size(1)]


def _poisoned(shape, dtype, pad=0):
    out = torch.full((shape[0], shape[1] + pad), float("nan"), dtype=dtype, device=DEVICE)
    return out[:, :shape[1]]


def _assert_close(out, ref, magnitude, out_dtype, what):
    out = out.double().cpu()
    tol = magnitude * 1e-5 + ref.abs() * OUT_EPS[out_dtype] + 1e-30
    err = (out - ref).abs()
    bad = ~(err <= tol)  # NaN counts as bad
    assert not bad.any(), (f"{what}: {int(bad.sum())} bad of {bad.numel()}, first at {bad.nonzero()[0].tolist()}: "
                           f"{out[bad][0].item()} vs {ref[bad][0].item()}")


# ---------------------------------------------------------------- fp8_gemm

# (M, N, K, rowwise, bias, out dtype, strided, config index); every format runs every case.
FP8_CASES = [
    (1, 3, 16, True, True, torch.bfloat16, False, 0),
    (3, 1, 48, False, False, torch.float32, True, 1),
    (127, 65, 144, True, False, torch.float16, True, 0),
    (127, 65, 144, False, True, torch.bfloat16, False, 1),
    (33, 127, 48, True, True, torch.float32, True, 1),
    (64, 32, 64, False, True, torch.float16, False, 0),  # even K, full tiles
    (5, 7, 0, True, True, torch.bfloat16, False, 0),  # K = 0: bias only
]


def _fp8_inputs(gen, m, n, k, fmt, rowwise, strided):
    xq = torch.randn(m, k, generator=gen).to(fmt)
    wq = torch.randn(n, k, generator=gen).to(fmt)
    x_scale = torch.rand(m if rowwise else 1, generator=gen) + 0.5
    w_scale = torch.rand(n if rowwise else 1, generator=gen) + 0.5
    if strided:  # row strides K + 32 (16-byte aligned) and K + 16
        xq, wq = _strided(xq, 32), _strided(wq, 16)
    else:
        xq, wq = xq.to(DEVICE), wq.to(DEVICE)
    return xq, wq, x_scale.to(DEVICE), w_scale.to(DEVICE)


def _fp8_reference(xq, wq, x_scale, w_scale, bias, magnitude=False):
    x, w = xq.cpu().double(), wq.cpu().double()
    xs, ws = x_scale.cpu().double(), w_scale.cpu().double()
    if magnitude:
        x, w, xs, ws = x.abs(), w.abs(), xs.abs(), ws.abs()
    ref = (x @ w.T) * xs.reshape(-1, 1) * ws.reshape(1, -1)
    if bias is not None:
        b = bias.cpu().double()
        ref = ref + (b.abs() if magnitude else b)
    return ref


@pytest.mark.parametrize("fmt", FP8_FORMATS)
@pytest.mark.parametrize("case", range(len(FP8_CASES)))
def test_fp8_gemm(fmt, case):
    m, n, k, rowwise, with_bias, out_dtype, strided, config = FP8_CASES[case]
    gen = _generator("fp8", fmt, case)
    xq, wq, x_scale, w_scale = _fp8_inputs(gen, m, n, k, fmt, rowwise, strided)
    bias = torch.randn(n, generator=gen).to(out_dtype).to(DEVICE) if with_bias else None
    out = _poisoned((m, n), out_dtype, pad=5 if strided else 0)
    result = tg.fp8_gemm(xq, wq, x_scale, w_scale, bias, out, FP8_CONFIGS[config])
    assert result is out
    _assert_close(out, _fp8_reference(xq, wq, x_scale, w_scale, bias),
                  _fp8_reference(xq, wq, x_scale, w_scale, bias, magnitude=True), out_dtype, f"case {case}")


def test_fp8_gemm_mixed_scale_modes_and_empty():
    gen = _generator("mixed")
    xq, wq, _, w_scale = _fp8_inputs(gen, 9, 20, 32, torch.float8_e4m3fn, True, False)
    x_scale = torch.tensor([0.75], device=DEVICE)
    out = _poisoned((9, 20), torch.float32)
    tg.fp8_gemm(xq, wq, x_scale, w_scale, None, out, FP8_CONFIGS[0])
    _assert_close(out, _fp8_reference(xq, wq, x_scale, w_scale, None),
                  _fp8_reference(xq, wq, x_scale, w_scale, None, True), torch.float32, "mixed")
    # M = 0 / N = 0: nothing to write, nothing launched.
    empty = torch.empty(0, 20, dtype=torch.bfloat16, device=DEVICE)
    tg.fp8_gemm(xq[:0], wq, x_scale, w_scale, None, empty, FP8_CONFIGS[0])


@pytest.mark.parametrize("case", [1, 2, 3])
def test_fp8_gemm_tma_kernel_path(case):
    """The descriptor-load path of the kernel (USE_TMA) on every device: Triton's interpreter runs
    host-side descriptor loads on CPU tensors (zero-filled out-of-bounds boxes), a Hopper GPU runs TMA.
    Launched past the TMA rule (which keeps CPU tensors and small problems on pointers); operands are
    16-byte aligned."""
    if tg.TensorDescriptor is None:
        pytest.skip("this Triton has no host-side tensor descriptors")
    if DEVICE.type == "cuda" and not tg.fp8_tma_possible(*_fp8_inputs(_generator(), 1, 1, 16, torch.float8_e4m3fn,
                                                                   True, False)[:2]):
        pytest.skip("no TMA on this GPU")
    m, n, k, rowwise, with_bias, out_dtype, strided, config = FP8_CASES[case]
    gen = _generator("fp8 tma", case)
    xq, wq, x_scale, w_scale = _fp8_inputs(gen, m, n, k, torch.float8_e4m3fn, rowwise, strided)
    bias = torch.randn(n, generator=gen).to(out_dtype).to(DEVICE) if with_bias else None
    out = _poisoned((m, n), out_dtype)
    tg._launch_fp8_gemm(xq, wq, x_scale, w_scale, bias, out, FP8_CONFIGS[config], use_tma=True)
    _assert_close(out, _fp8_reference(xq, wq, x_scale, w_scale, bias),
                  _fp8_reference(xq, wq, x_scale, w_scale, bias, magnitude=True), out_dtype, f"case {case}")


@pytest.mark.gpu
@pytest.mark.parametrize("config", [0, 1, 4])
def test_fp8_gemm_tma_matches_pointers(config):
    """On a Hopper GPU: the TMA path gives the same output as the pointer path."""
    xq, wq, x_scale, w_scale = _fp8_inputs(_generator("tma", config), 300, 200, 272, torch.float8_e4m3fn, True, True)
    if not tg.fp8_tma_possible(xq, wq):
        pytest.skip("no TMA on this GPU")
    cfg = tg.FP8_CONFIGS_NVIDIA[config]
    outs = [tg.fp8_gemm(xq, wq, x_scale, w_scale, None, _poisoned((300, 200), torch.bfloat16), cfg, use_tma=t)
            for t in (True, False)]
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_fp8_gemm_rejects_bad_inputs():
    xq, wq, x_scale, w_scale = _fp8_inputs(_generator("bad"), 4, 4, 32, torch.float8_e4m3fn, True, False)
    out = _poisoned((4, 4), torch.bfloat16)
    with pytest.raises(ValueError, match="K"):
        tg.fp8_gemm(xq[:, :24], wq[:, :24], x_scale, w_scale, None, out, FP8_CONFIGS[0])
    with pytest.raises(ValueError, match="x_scale"):
        tg.fp8_gemm(xq, wq, x_scale[:3], w_scale, None, out, FP8_CONFIGS[0])
    with pytest.raises(ValueError, match="block_k"):
        tg.fp8_gemm(xq, wq, x_scale, w_scale, None, out, Config(16, 16, 16, 1, 4, 1))
    if not tg.fp8_tma_possible(xq, wq):
        with pytest.raises(ValueError, match="use_tma"):
            tg.fp8_gemm(xq, wq, x_scale, w_scale, None, out, FP8_CONFIGS[0], use_tma=True)


def test_suggested_configs_valid():
    for configs, fp8 in ((tg.FP8_CONFIGS_NVIDIA, True), (tg.FP8_CONFIGS_AMD, True),
                         (tg.BF16_CONFIGS_NVIDIA, False), (tg.BF16_CONFIGS_AMD, False)):
        assert 3 <= len(configs) <= 6
        assert any(c.block_m <= 64 for c in configs)
        for c in configs:
            tg.validate_config(c, fp8=fp8)


# ---------------------------------------------------------------- gemm

# fp32 only in the interpreter (tl.dot on fp32 runs TF32 on a GPU; the op takes bf16/fp16 only);
# bf16 only on a GPU (the interpreter's bf16 tl.dot is wrong).
GEMM_DTYPES = [torch.float16] + ([torch.bfloat16] if DEVICE.type == "cuda" else [torch.float32])
# (M, N, K, a transposed, b layout, bias, config index)
GEMM_CASES = [
    (1, 3, 16, False, "kn", True, 0),
    (37, 29, 50, True, "nk", True, 1),
    (127, 1, 20, False, "strided", False, 0),
    (3, 127, 7, True, "kn", False, 1),
    (64, 64, 32, False, "nk", True, 0),
]


def _gemm_operand(gen, rows, cols, dtype, layout):
    """[rows, cols] in the given layout: kn = contiguous, nk = transpose of a contiguous [cols, rows],
    strided = a column slice of a wider tensor."""
    if layout == "nk":
        return torch.randn(cols, rows, generator=gen).to(dtype).to(DEVICE).T
    if layout == "strided":
        return _strided(torch.randn(rows, cols, generator=gen).to(dtype), 3)
    return torch.randn(rows, cols, generator=gen).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.parametrize("case", range(len(GEMM_CASES)))
def test_gemm(dtype, case):
    m, n, k, a_t, b_layout, with_bias, config = GEMM_CASES[case]
    gen = _generator("gemm", dtype, case)
    a = _gemm_operand(gen, m, k, dtype, "nk" if a_t else "kn")
    b = _gemm_operand(gen, k, n, dtype, b_layout)
    bias = torch.randn(n, generator=gen).to(dtype).to(DEVICE) if with_bias else None
    out = _poisoned((m, n), dtype, pad=2)
    assert tg.gemm(a, b, bias, out, GEMM_CONFIGS[config]) is out
    ref = a.cpu().double() @ b.cpu().double() + (bias.cpu().double() if with_bias else 0)
    mag = a.cpu().double().abs() @ b.cpu().double().abs() + (bias.cpu().double().abs() if with_bias else 0)
    _assert_close(out, ref, mag, dtype, f"case {case}")


# ---------------------------------------------------------------- quantize


def _quantize_reference(x, fmt, rowwise, scale_ub=None):
    """gemm.h's formula in plain torch: fp32 math, torch's round-to-nearest-even fp8 conversion."""
    fp8_max = tq.FP8_MAX[fmt]
    xf = x.cpu().float()
    if rowwise:
        amax = xf.abs().amax(dim=1) if xf.size(1) else torch.zeros(xf.size(0))
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub.cpu())
    else:
        amax = (xf.abs().amax() if xf.numel() else torch.zeros(())).reshape(1)
    inv = torch.tensor(fp8_max, dtype=torch.float32) / amax.clamp_min(1e-12)
    xq = (xf * (inv[:, None] if rowwise else inv)).clamp(-fp8_max, fp8_max).to(fmt)
    return xq, torch.tensor(1.0, dtype=torch.float32) / inv


def _poisoned_fp8(rows, cols, fmt, pad=0):
    nan_code = 0x7F if fmt == torch.float8_e4m3fn else 0x80
    buf = torch.full((rows, cols + pad), nan_code, dtype=torch.uint8, device=DEVICE).view(fmt)
    return buf[:, :cols]


def _quantize_input(gen, rows, cols, dtype, strided):
    """Rows spanning 1e-6 .. 1e3 (fp8 subnormals and ties), a zero row, tiny negative values."""
    x = torch.randn(rows, cols, generator=gen) * torch.logspace(-6, 3, rows)[:, None]
    if rows > 3:
        x[3] = 0
    if rows > 5:
        x[5, :7] = -1e-9
    x = x.to(dtype)
    return _strided(x, 5) if strided else x.to(DEVICE)


def _check_quantized(x, xq, scale, fmt, rowwise, scale_ub=None):
    ref_q, ref_scale = _quantize_reference(x, fmt, rowwise, scale_ub)
    assert torch.equal(scale.cpu(), ref_scale), f"scale {scale.cpu()} vs {ref_scale}"
    q_bits, ref_bits = xq.cpu().contiguous().view(torch.uint8), ref_q.view(torch.uint8)
    bad = q_bits != ref_bits
    assert not bad.any(), (f"{int(bad.sum())} codes differ, first at {bad.nonzero()[0].tolist()}: "
                           f"{q_bits[bad][0].item():#x} vs {ref_bits[bad][0].item():#x}")
    if scale_ub is None:  # round trip within fp8 precision (3 mantissa bits; subnormal floor)
        deq = xq.cpu().double() * scale.cpu().double().reshape(-1, 1)
        xd = x.cpu().double()
        assert ((deq - xd).abs() <= xd.abs() * 2.0**-4 + scale.cpu().double().reshape(-1, 1) * 2.0**-9).all()


QUANTIZE_CONFIGS = [QConfig(4, 64, 4), QConfig(1, 256, 1), QConfig(16, 16, 2)]


@pytest.mark.parametrize("config", range(len(QUANTIZE_CONFIGS)))
@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", FP8_FORMATS)
def test_quantize(fmt, dtype, rowwise, config):
    rows, cols = (37, 300) if config == 0 else (9, 33)
    strided = config != 1
    x = _quantize_input(_generator("q", fmt, dtype, rowwise, config), rows, cols, dtype, strided)
    xq = _poisoned_fp8(rows, cols, fmt, pad=3 if strided else 0)
    scale = torch.full((rows if rowwise else 1,), float("nan"), device=DEVICE)
    if rowwise:
        tq.quantize_fp8_rowwise(x, None, xq, scale, QUANTIZE_CONFIGS[config])
    else:
        tq.quantize_fp8_tensorwise(x, xq, scale, QUANTIZE_CONFIGS[config])
    _check_quantized(x, xq, scale, fmt, rowwise)


@pytest.mark.parametrize("fmt", FP8_FORMATS)
def test_quantize_scale_ub(fmt):
    x = _quantize_input(_generator("ub", fmt), 12, 70, torch.float32, False)
    for ub in (1e-3, 2.5, 1e6):
        scale_ub = torch.tensor([ub], device=DEVICE)
        xq = _poisoned_fp8(12, 70, fmt)
        scale = torch.full((12,), float("nan"), device=DEVICE)
        tq.quantize_fp8_rowwise(x, scale_ub, xq, scale, QUANTIZE_CONFIGS[0])
        _check_quantized(x, xq, scale, fmt, True, scale_ub)


@pytest.mark.parametrize("fmt", FP8_FORMATS)
def test_quantize_zeros_and_empty(fmt):
    config = QUANTIZE_CONFIGS[0]
    # All-zero input: xq 0, scale 1e-12 / fp8_max, both modes.
    x = torch.zeros(6, 40, dtype=torch.bfloat16, device=DEVICE)
    for rowwise in (True, False):
        xq, scale = _poisoned_fp8(6, 40, fmt), torch.full((6 if rowwise else 1,), float("nan"), device=DEVICE)
        if rowwise:
            tq.quantize_fp8_rowwise(x, None, xq, scale, config)
        else:
            tq.quantize_fp8_tensorwise(x, xq, scale, config)
        _check_quantized(x, xq, scale, fmt, rowwise)
        assert (xq.cpu().view(torch.uint8) == 0).all()
    # Rows of no columns: every row's scale is that of amax 0; no rows: nothing, no crash.
    x = torch.zeros(5, 0, device=DEVICE)
    scale = torch.full((5,), float("nan"), device=DEVICE)
    tq.quantize_fp8_rowwise(x, None, _poisoned_fp8(5, 0, fmt), scale, config)
    _check_quantized(x, _poisoned_fp8(5, 0, fmt), scale, fmt, True)
    scale = torch.full((1,), float("nan"), device=DEVICE)
    tq.quantize_fp8_tensorwise(x, _poisoned_fp8(5, 0, fmt), scale, config)
    _check_quantized(x, _poisoned_fp8(5, 0, fmt), scale, fmt, False)
    x = torch.zeros(0, 8, device=DEVICE)
    tq.quantize_fp8_rowwise(x, None, _poisoned_fp8(0, 8, fmt), torch.empty(0, device=DEVICE), config)
    scale = torch.full((1,), float("nan"), device=DEVICE)
    tq.quantize_fp8_tensorwise(x, _poisoned_fp8(0, 8, fmt), scale, config)
    _check_quantized(x, _poisoned_fp8(0, 8, fmt), scale, fmt, False)


def test_quantize_rejects_bad_inputs():
    x = torch.zeros(4, 16, device=DEVICE)
    xq = _poisoned_fp8(4, 16, torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="scale"):
        tq.quantize_fp8_rowwise(x, None, xq, torch.empty(3, device=DEVICE), QUANTIZE_CONFIGS[0])
    with pytest.raises(ValueError, match="xq"):
        tq.quantize_fp8_tensorwise(x, torch.empty(4, 16, device=DEVICE), torch.empty(1, device=DEVICE),
                                   QUANTIZE_CONFIGS[0])
    with pytest.raises(ValueError, match="block_cols"):
        tq.quantize_fp8_tensorwise(x, xq, torch.empty(1, device=DEVICE), QConfig(1, 8, 1))


def test_fp8_tma_rule_keeps_small_problems_on_pointers(monkeypatch):
    """Descriptors cost host time per launch: below TRITON_FP8_TMA_MIN_MACS the rule takes pointers even where
    TMA could load the operands."""
    monkeypatch.setattr(tg, "fp8_tma_possible", lambda xq, wq: True)

    def operands(m, n, k):
        return (torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn),
                torch.empty(n, k, device="meta", dtype=torch.float8_e4m3fn))
    assert not tg.fp8_use_tma(*operands(5000, 1500, 2000))
    assert tg.fp8_use_tma(*operands(8192, 8192, 8192))
