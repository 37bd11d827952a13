"""pytest-benchmark: mymetaops.fp8_gemm as users call it (the default wrapper), the raw op, and
torch._scaled_mm (rowwise, default arguments and with use_fast_accum=True); mymetaops.gemm vs
torch.mm. GPU only (bench/conftest.py skips the lot without one).

Run: python -m pytest bench/gemm -m gpu --benchmark-columns=median,iqr --benchmark-group-by=param:shape
"""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
if str(HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(HERE.parents[1]))


def _load(name, file):
    """This folder's module under its own name: bench/embedding_bag has a shapes.py too, and pytest
    puts both folders on sys.path."""
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_shapes = _load("_mymetaops_bench_gemm_shapes", "shapes.py")

import mymetaops  # noqa: E402

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
# The reference points and one of each other kind.
BENCH_SHAPES = [(s.m, s.n, s.k) for s in _shapes.SHAPES if s.kind == "ref"] + [(16, 4096, 4096), (32768, 4096, 1024)]
FP8_IMPLEMENTATIONS = {
    "mymetaops": lambda xq, wq, xs, ws: mymetaops.fp8_gemm(xq, wq, xs, ws),
    "mymetaops-op": lambda xq, wq, xs, ws: torch.ops.mymetaops.fp8_gemm(xq, wq, xs, ws, None, BF16),
    "scaled_mm": lambda xq, wq, xs, ws: torch._scaled_mm(xq, wq.t(), xs[:, None], ws[None, :], out_dtype=BF16),
    "scaled_mm-fast-accum": lambda xq, wq, xs, ws: torch._scaled_mm(xq, wq.t(), xs[:, None], ws[None, :],
                                                                    out_dtype=BF16, use_fast_accum=True),
}
GEMM_IMPLEMENTATIONS = {
    "mymetaops": lambda a, b: mymetaops.gemm(a, b),
    "torch": lambda a, b: torch.mm(a, b),
}


def _name(shape):
    return "x".join(map(str, shape))


def cuda_timed(benchmark, fn):
    def run():
        fn()
        torch.cuda.synchronize()
    run()  # the decision and any compile, before the rounds
    benchmark.pedantic(run, warmup_rounds=3, rounds=20)


@pytest.mark.parametrize("impl", FP8_IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", BENCH_SHAPES, ids=_name)
def test_fp8_gemm(benchmark, shape, impl):
    m, n, k = shape
    x = torch.randn(m, k, device="cuda", dtype=BF16)
    w = torch.randn(n, k, device="cuda", dtype=BF16)
    xq, xs = mymetaops.quantize_fp8_rowwise(x)
    wq, ws = mymetaops.quantize_fp8_rowwise(w)
    cuda_timed(benchmark, lambda: FP8_IMPLEMENTATIONS[impl](xq, wq, xs, ws))


@pytest.mark.parametrize("impl", GEMM_IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", BENCH_SHAPES[:4], ids=_name)
def test_gemm_bf16(benchmark, shape, impl):
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=BF16)
    b = torch.randn(n, k, device="cuda", dtype=BF16).t()  # nn.Linear's layout
    cuda_timed(benchmark, lambda: GEMM_IMPLEMENTATIONS[impl](a, b))


@pytest.mark.parametrize("impl", ["mymetaops.nn.Fp8Linear", "torch.nn.Linear"])
@pytest.mark.parametrize("shape", [(65536, 1024, 512)], ids=_name)
def test_linear_forward_backward(benchmark, shape, impl):
    m, n, k = shape
    cls = mymetaops.nn.Fp8Linear if impl.startswith("mymetaops") else torch.nn.Linear
    layer = cls(k, n, device="cuda", dtype=BF16)
    x = torch.randn(m, k, device="cuda", dtype=BF16, requires_grad=True)
    grad = torch.randn(m, n, device="cuda", dtype=BF16)

    def step():
        x.grad = None
        layer.weight.grad = layer.bias.grad = None
        layer(x).backward(grad)
    cuda_timed(benchmark, step)
