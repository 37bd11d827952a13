"""The GEMM benchmark suite: (M, N, K) problems of recommendation-model training, out[M, N] =
x[M, K] . w[N, K]^T, each with a label and a kind.

Kinds: "ref" the issue's reference points; "fwd" an MLP layer's forward at a large batch (DLRM/DCN
top and bottom MLPs, DCN cross layers); "dgrad" the input gradient of a forward (M, N, K): (M, K, N);
"wgrad" the weight gradient: out [N, K], the reduction over the batch, (N, K, M); "small_m"
serving-like and small per-GPU batches; "odd" sizes that are not multiples of 128 (N % 16 != 0 in
some: torch._scaled_mm cannot take them); "square". K is a multiple of 16 everywhere (FP8 tensor
cores take K in steps of 16).

The list is in priority order: a run that hits its time budget drops shapes from the end.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    kind: str
    label: str = ""
    # also time the bf16 gemm with b N-contiguous ([K, N] row-major), beside the nn.Linear layout
    b_n_contiguous: bool = False

    def __post_init__(self):
        if self.k % 16:
            raise ValueError(f"{self}: K must be a multiple of 16 (FP8)")

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def __str__(self) -> str:
        return self.name


def _fwd(m, n, k, label, **kw):
    """A forward layer and, listed after it by the caller, its gradients."""
    return Shape(m, n, k, "fwd", label, **kw)


def dgrad(s: Shape, label: str = "") -> Shape:
    return Shape(s.m, s.k, s.n, "dgrad", label or f"input grad of {s.name}")


def wgrad(s: Shape, label: str = "") -> Shape:
    return Shape(s.n, s.k, s.m, "wgrad", label or f"weight grad of {s.name}")


_DLRM_TOP_1 = _fwd(65536, 1024, 512, "DLRM top MLP 512->1024, batch 64k")
_DLRM_TOP_2 = Shape(65536, 512, 256, "ref", "issue: DLRM top MLP 256->512, batch 64k", b_n_contiguous=True)
_BOTTOM = _fwd(131072, 256, 512, "bottom MLP 512->256, batch 128k")
_DCN_WIDE = _fwd(32768, 4096, 1024, "DCN wide layer 1024->4096, batch 32k")
_MID = Shape(16384, 512, 2048, "ref", "issue: 2048->512, batch 16k")
_WIDE2 = _fwd(65536, 2048, 512, "MLP 512->2048, batch 64k")

SHAPES: list[Shape] = [
    # the reference points first
    Shape(8192, 8192, 8192, "ref", "issue: 8192^3 (the FP8 ceiling)", b_n_contiguous=True),
    Shape(1024, 1024, 65536, "ref", "issue: weight grad 1024x1024, batch 64k", b_n_contiguous=True),
    _DLRM_TOP_2,
    Shape(1000, 720, 1536, "ref", "issue: odd sizes", b_n_contiguous=True),
    _MID,
    # MLP forwards at large batch
    _DLRM_TOP_1,
    _BOTTOM,
    _DCN_WIDE,
    _fwd(65536, 1024, 1024, "MLP 1024->1024, batch 64k"),
    _fwd(131072, 64, 256, "narrow bottom layer 256->64, batch 128k"),
    _fwd(16384, 4096, 4096, "DCN cross 4096x4096, batch 16k"),
    _WIDE2,
    # input gradients
    dgrad(_DLRM_TOP_1),
    dgrad(_DLRM_TOP_2),
    dgrad(_BOTTOM),
    dgrad(_DCN_WIDE),
    dgrad(_MID),
    # weight gradients (K = the batch)
    wgrad(_DLRM_TOP_1),
    wgrad(_DLRM_TOP_2, "weight grad of 65536x512x256 (issue's forward)"),
    wgrad(_BOTTOM),
    wgrad(_DCN_WIDE),
    wgrad(_MID),
    Shape(512, 256, 131072, "wgrad", "weight grad 512x256, batch 128k"),
    # small M: serving, small per-GPU batches
    Shape(16, 4096, 4096, "small_m", "serving, batch 16", b_n_contiguous=True),
    Shape(32, 2048, 4096, "small_m", "serving, batch 32"),
    Shape(64, 4096, 1024, "small_m", "serving, batch 64"),
    Shape(128, 4096, 4096, "small_m", "batch 128"),
    Shape(128, 1024, 1024, "small_m", "batch 128, 1024^2 layer"),
    Shape(256, 1024, 2048, "small_m", "batch 256"),
    Shape(256, 4096, 4096, "small_m", "batch 256, 4096^2 layer"),
    # sizes that are not multiples of 128 (N % 16 != 0: torch._scaled_mm n/a)
    Shape(1000, 1000, 1008, "odd", "N % 16 != 0"),
    Shape(3000, 1000, 4000, "odd", "N % 16 != 0"),
    Shape(5000, 1500, 2000, "odd", "not multiples of 128"),
    Shape(777, 4096, 1040, "odd", "M odd, K = 65 x 16"),
    # squares
    Shape(4096, 4096, 4096, "square"),
    Shape(2048, 2048, 2048, "square"),
    Shape(16384, 16384, 8192, "square", "largest"),
]

# The shape whose best native TFLOP/s the summary reports.
CEILING_SHAPE = (8192, 8192, 8192)

# --dry-run / --device cpu: tiny, the same kinds (odd N, small M, tall K), so every code path runs.
SMOKE_SHAPES: list[Shape] = [
    Shape(64, 48, 32, "ref", "smoke", b_n_contiguous=True),
    Shape(40, 24, 48, "odd", "smoke: N % 16 != 0"),
    Shape(16, 64, 128, "small_m", "smoke"),
    Shape(32, 16, 256, "wgrad", "smoke: tall K"),
]


def check_suite(shapes=SHAPES) -> None:
    names = [s.name for s in shapes]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate shapes {sorted(duplicates)}")


check_suite()
