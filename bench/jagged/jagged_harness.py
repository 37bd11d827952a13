"""What the jagged benchmarks share: the timer (do_bench median on a GPU, wall time on the CPU), the
run's metadata, acceptance checks, output paths, the seeded jagged batches, the byte and FLOP
counts of every op, and the family's calls: ours through the public wrappers, the aten anchors a
user would write instead, and the model's predictions.

Named jagged_harness (not harness) so that it never shadows bench/embedding_bag/harness.py or
bench/gemm/gemm_harness.py when several folders are on sys.path (pytest collects them all). Every
script also runs on the CPU (`--device cpu`, alias `--dry-run`): tiny shapes, the CPU kernels, the
Triton interpreter, wall-clock "timings" that mean nothing -- it checks the plumbing where no GPU
is. A forced GPU backend (use_backend("native" / "triton" / "vendor")) is skipped there.

Bytes moved per call (what a kernel must read + write, once each; e = 2 bytes (bf16), i = 8 or 4
bytes per offset (int64 / int32); B sequences, L = max_L, D the row width; T = total_L = sum(len),
U = sum(min(len, L)) the rows that have a dense position (= T here: lengths are drawn in [1, L]),
P = B * L the dense positions; bmm: K (jagged_dense_bmm) or M (jagged_jagged_bmm) is D, N the
output width; index_select: S selected rows of n sequences picked (indices), T input rows). Every
op also reads its offsets, (B + 1) * i bytes (index_select: lengths B * i and indices n * i, and
writes the n selected lengths), counted, under 0.01% here.

| op | forward bytes | backward bytes (the gradients its autograd computes) |
|---|---|---|
| jagged_to_padded_dense | (U + P) D e | (U + T) D e: grad rows at positions read, every values row written |
| dense_to_jagged | (U + T) D e | (U + P) D e |
| jagged_dense_elementwise_add | (U + 2P) D e: x, y read, dense out written | (U + T) D e (grad_y = grad: nothing moves) |
| ..._add_jagged_output | (2T + U) D e: x read, y at positions read, out written | (U + P) D e (grad_x = grad: nothing moves) |
| jagged_dense_elementwise_mul | (2T + U) D e | (3U + T + P) D e: grad, x, y at positions read; grad_x, grad_y written |
| jagged_softmax | (U + T) D e: kept rows read once, every row written | (2U + T) D e: grad and output read, every row written |
| jagged_dense_bmm | (U K + B K N + T N) e; 2 U K N FLOPs | (U N + U K + T K + 2 B K N) e; 4 U K N FLOPs |
| jagged_jagged_bmm | (U M + U N + B M N) e; 2 U M N FLOPs | (B M N + (U + T)(M + N)) e; 4 U M N FLOPs |
| jagged_index_select | 2 S D e | (S + T) D e: grad read, every input row written (0 if not picked) |

These are floors (a fused kernel's traffic); the implementation may move more (mul's backward runs
mul, at::mul and jagged_to_padded_dense; softmax may read its rows twice): the shortfall shows as
a lower share of the copy ceiling.
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (str(HERE), str(REPO), str(REPO / "bench")):  # this folder's modules, this checkout's mymetaops
    if _p not in sys.path:                                  # and bench_common, from anywhere
        sys.path.insert(0, _p)

import torch  # noqa: E402
from bench_common import (DRY_RUN_HARDWARE, add_device_arguments, checks_markdown, cuda_usable,  # noqa: E402,F401
                          hardware, median_us, meta_line, short_error, sync, write_report)
from bench_common import check as plain_check, close_report, open_report  # noqa: E402

# Measured ceilings (the numbers, H200, torch 2.11): a torch copy 4.27 TB/s, bf16 torch.mm
# about 770 TFLOP/s at 8192^3. Each run also measures both (a copy of each case's bytes, an 8192^3
# mm) and reports them beside.
COPY_CEILING_TBPS = {"H200": 4.27}
BF16_CEILING_TFLOPS = {"H200": 770.0}
BF16 = torch.bfloat16
# max |ours - anchor| / max |anchor| over every output and gradient: both sides round to bf16 once
# (2 x 2^-9 of the largest element), and softmax's backward cancels (y * (g - sum g y)); a wrong
# kernel is off by O(1).
REL_ERR_BOUND = 2e-2

# (B, max_L, D), the two shapes; lengths uniform in [1, max_L] (seeded). The bmm ops take
# D = N = BMM_DIM at both shapes (the pad + torch.bmm anchor).
SHAPES = ((1024, 1024, 256), (4096, 256, 128))
DRY_RUN_SHAPES = ((8, 16, 16), (16, 8, 8))
BMM_DIM = 256
DRY_RUN_BMM_DIM = 16
SEED = 0

ALL_OPS = ("jagged_to_padded_dense", "dense_to_jagged", "jagged_dense_elementwise_add",
           "jagged_dense_elementwise_add_jagged_output", "jagged_dense_elementwise_mul", "jagged_softmax",
           "jagged_dense_bmm", "jagged_jagged_bmm", "jagged_index_select")
CONVERSIONS = ("jagged_to_padded_dense", "dense_to_jagged")
ELEMENTWISE = ("jagged_dense_elementwise_add", "jagged_dense_elementwise_add_jagged_output",
               "jagged_dense_elementwise_mul")
BMM = ("jagged_dense_bmm", "jagged_jagged_bmm")
SHORT = {"jagged_to_padded_dense": "to_padded", "dense_to_jagged": "to_jagged",
         "jagged_dense_elementwise_add": "add", "jagged_dense_elementwise_add_jagged_output": "add_jagged_out",
         "jagged_dense_elementwise_mul": "mul", "jagged_softmax": "softmax", "jagged_dense_bmm": "dense_bmm",
         "jagged_jagged_bmm": "jagged_bmm", "jagged_index_select": "index_select"}


# --- reports (the shared pieces: bench/bench_common.py) ------------------------------------------------

def report_main(argv, doc: str, add_arguments, run, markdown, what: str) -> int:
    """A benchmark script's main: parse its arguments, run it, and write <prefix>.json and .md
    (prefix: --out, else default_prefix(meta, what)). run(args, device, prefix, meta) may write
    partial reports itself; the final one is written here. Exit 1 if the run was aborted. On the
    CPU, one intra-op thread: waking a pool costs milliseconds per call on a small shared CPU
    (torch.softmax on [4, 8, 16]: 16 ms with 2 threads, 4 us with 1), and tiny shapes need none."""
    args, device, meta, prefix = open_report(argv, doc, add_arguments, what, cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 1 if result.get("aborted") else 0


def check(name: str, value, bound, at_most: bool, fmt: str = "{:.2f}") -> dict:
    """bench_common.check, a missing value failing its bound."""
    return plain_check(name, value, bound, at_most, fmt, missing_fails=True)


def gpu_check(name: str, value, bound, at_most: bool, gpu: bool, fmt: str = "{:.2f}") -> dict:
    """A timing bound: checked on a GPU; on the CPU (dry runs) shown as '(GPU only)', not judged."""
    if gpu:
        return check(name, value, bound, at_most, fmt)
    c = check(name, value, None, at_most, fmt)
    c["required"] = f"{'<=' if at_most else '>='} {fmt.format(bound)} (GPU only)"
    return c


def fmt(v, spec="{:.1f}", none="—"):
    return none if v is None else spec.format(v)


# --- jagged batches ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """A call's sizes, all known on the host (nothing is read back from the device)."""

    batch: int  # B
    max_length: int  # L (max_L, the dense length)
    dim: int  # D (bmm: K of jagged_dense_bmm, M of jagged_jagged_bmm)
    total: int  # T = total_L = sum(len)
    used: int  # U = sum(min(len, L))
    n: int = 0  # N (bmm)
    selected: int = 0  # S, the rows jagged_index_select picks
    num_indices: int = 0  # n, the sequences it picks
    index_bytes: int = 8  # per offset / length / index
    elt: int = 2

    @property
    def positions(self) -> int:
        return self.batch * self.max_length


@dataclass
class Case:
    """One op's call: its sizes, offsets (and lengths, indices) on the device, floating inputs."""

    op: str
    sizes: Sizes
    offsets: torch.Tensor  # [B + 1]
    lengths: torch.Tensor  # [B] (index_select's)
    indices: torch.Tensor  # [n] (index_select's)
    inputs: list[torch.Tensor] = field(default_factory=list)  # the floating inputs, in the op's order
    shape: tuple[int, int, int] = (0, 0, 0)


def draw_lengths(batch: int, max_length: int, seed: int) -> torch.Tensor:
    """Host lengths, uniform in [1, max_length] (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, max_length + 1, (batch,), generator=g)


def offsets_of(lengths: torch.Tensor) -> torch.Tensor:
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return offsets


def bmm_dim(dry_run: bool) -> int:
    return DRY_RUN_BMM_DIM if dry_run else BMM_DIM


def make_case(op: str, shape, device, index_dtype=torch.int64, seed: int = SEED, bmm_d: int = BMM_DIM,
              dtype=BF16) -> Case:
    """The inputs of `op` at shape (B, max_L, D): lengths uniform in [1, max_L] (the same for every
    op of a shape), values N(0, 1). index_select picks B sequences, uniform with repetition."""
    batch, max_length, dim = shape
    lengths = draw_lengths(batch, max_length, seed)
    g = torch.Generator().manual_seed(seed + 1)
    indices = torch.randint(0, batch, (batch,), generator=g)
    total = int(lengths.sum())
    used = int(lengths.clamp(max=max_length).sum())
    selected = int(lengths[indices].sum())
    n = 0
    if op in BMM:
        dim = n = bmm_d
    sizes = Sizes(batch, max_length, dim, total, used, n, selected, batch,
                  torch.empty((), dtype=index_dtype).element_size(), torch.empty((), dtype=dtype).element_size())
    case = Case(op, sizes, offsets_of(lengths).to(device=device, dtype=index_dtype),
                lengths.to(device=device, dtype=index_dtype), indices.to(device=device, dtype=index_dtype),
                shape=tuple(shape))
    gen = torch.Generator(device=device).manual_seed(seed + 2)
    case.inputs = [torch.randn(*s, device=device, dtype=dtype, generator=gen) for s in input_shapes(op, sizes)]
    return case


def input_shapes(op: str, s: Sizes) -> list[tuple[int, ...]]:
    jagged, dense = (s.total, s.dim), (s.batch, s.max_length, s.dim)
    return {
        "jagged_to_padded_dense": [jagged],
        "dense_to_jagged": [dense],
        "jagged_dense_elementwise_add": [jagged, dense],
        "jagged_dense_elementwise_add_jagged_output": [jagged, dense],
        "jagged_dense_elementwise_mul": [jagged, dense],
        "jagged_softmax": [jagged],
        "jagged_dense_bmm": [jagged, (s.batch, s.dim, s.n)],
        "jagged_jagged_bmm": [jagged, (s.total, s.n)],
        "jagged_index_select": [jagged],
    }[op]


def output_shape(op: str, s: Sizes) -> tuple[int, ...]:
    """The shape of the op's main output (its values, or its dense tensor)."""
    if op in ("jagged_to_padded_dense", "jagged_dense_elementwise_add"):
        return (s.batch, s.max_length, s.dim)
    if op == "jagged_dense_bmm":
        return (s.total, s.n)
    if op == "jagged_jagged_bmm":
        return (s.batch, s.dim, s.n)
    if op == "jagged_index_select":
        return (s.selected, s.dim)
    return (s.total, s.dim)


def case_with(case: Case, index_dtype) -> Case:
    """The same case with its offsets, lengths and indices in another dtype."""
    c = replace(case, offsets=case.offsets.to(index_dtype), lengths=case.lengths.to(index_dtype),
                indices=case.indices.to(index_dtype))
    c.sizes = replace(case.sizes, index_bytes=torch.empty((), dtype=index_dtype).element_size())
    return c


# --- bytes and FLOPs (the table in the module's docstring) -----------------------------------------

def moved_bytes(op: str, direction: str, s: Sizes) -> float:
    """Bytes that must be read + written by one call of `op` ("fwd") or its backward ("bwd")."""
    T, U, P, e = s.total, s.used, s.positions, s.elt
    offsets = (s.batch + 1) * s.index_bytes
    fwd = direction == "fwd"
    if op == "jagged_to_padded_dense":
        rows = U + P if fwd else U + T
    elif op == "dense_to_jagged":
        rows = U + T if fwd else U + P
    elif op == "jagged_dense_elementwise_add":
        rows = U + 2 * P if fwd else U + T
    elif op == "jagged_dense_elementwise_add_jagged_output":
        rows = 2 * T + U if fwd else U + P
    elif op == "jagged_dense_elementwise_mul":
        rows = 2 * T + U if fwd else 3 * U + T + P
    elif op == "jagged_softmax":
        rows = U + T if fwd else 2 * U + T
    elif op == "jagged_index_select":
        index = (s.batch + 2 * s.num_indices) * s.index_bytes  # lengths, indices read; selected lengths written
        return (2 * s.selected if fwd else s.selected + T) * s.dim * e + index
    elif op == "jagged_dense_bmm":
        K, N, B = s.dim, s.n, s.batch
        elems = U * K + B * K * N + T * N if fwd else U * N + U * K + T * K + 2 * B * K * N
        return elems * e + offsets
    elif op == "jagged_jagged_bmm":
        M, N, B = s.dim, s.n, s.batch
        elems = U * M + U * N + B * M * N if fwd else B * M * N + (U + T) * (M + N)
        return elems * e + offsets
    else:
        raise ValueError(op)
    return rows * s.dim * e + offsets


def flops(op: str, direction: str, s: Sizes) -> float:
    if op not in BMM:
        return 0.0
    return (2.0 if direction == "fwd" else 4.0) * s.used * s.dim * s.n


# --- the anchors: aten's conversions (differentiable as NJT makes them) and torch composites -------

_aten = torch.ops.aten


class _AtenToPadded(torch.autograd.Function):
    """aten._jagged_to_padded_dense_forward, whose backward (aten has none) is the other aten
    conversion, as NJT's to_padded_tensor / _nested_from_padded_tensor pair runs it."""

    @staticmethod
    def forward(ctx, values, offsets, max_length: int, total: int, padding: float):
        ctx.save_for_backward(offsets)
        ctx.total = total
        return _aten._jagged_to_padded_dense_forward(values, [offsets], [max_length], padding)

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        return _aten._padded_dense_to_jagged_forward(grad, [offsets], ctx.total), None, None, None, None


class _AtenToJagged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dense, offsets, total: int):
        ctx.save_for_backward(offsets)
        ctx.max_length = dense.shape[1]
        return _aten._padded_dense_to_jagged_forward(dense, [offsets], total)

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        return _aten._jagged_to_padded_dense_forward(grad, [offsets], [ctx.max_length], 0.0), None, None


def aten_to_padded(values, offsets, max_length: int, total: int, padding: float = 0.0):
    if torch.is_grad_enabled() and values.requires_grad:
        return _AtenToPadded.apply(values, offsets, max_length, total, padding)
    return _aten._jagged_to_padded_dense_forward(values, [offsets], [max_length], padding)


def aten_to_jagged(dense, offsets, total: int):
    if torch.is_grad_enabled() and dense.requires_grad:
        return _AtenToJagged.apply(dense, offsets, total)
    return _aten._padded_dense_to_jagged_forward(dense, [offsets], total)


def torch_index_select(values, lengths, indices, selected: int):
    """jagged_index_select in torch ops, no host sync (output_size given): the rows each picked
    sequence spans, then values.index_select (its backward: index_add into zeros)."""
    lengths = lengths.long()
    indices = indices.long()
    starts = torch.cumsum(lengths, 0) - lengths
    picked = lengths[indices]
    out_starts = torch.cumsum(picked, 0) - picked
    seq = torch.repeat_interleave(picked, output_size=selected)
    rows = starts[indices][seq] + torch.arange(selected, device=values.device) - out_starts[seq]
    return values.index_select(0, rows)


def _mm():
    import mymetaops
    import mymetaops.ops  # noqa: F401  (registers torch.ops.mymetaops)
    return mymetaops


@dataclass(frozen=True)
class OpSpec:
    """How an op is called: ours (public wrapper, default arguments, every size given), the raw
    op, and the anchor (what a user would write with torch/aten); each returns the op's main
    output (its values or dense tensor) from (case, floating inputs)."""

    name: str
    ours: Callable
    raw: Callable
    anchor: Callable
    anchor_name: str
    model_op: str


def _specs() -> dict[str, OpSpec]:
    m = _mm()
    ops = torch.ops.mymetaops
    S = lambda c: c.sizes  # noqa: E731
    return {s.name: s for s in (
        OpSpec("jagged_to_padded_dense",
               lambda c, t: m.jagged_to_padded_dense(t[0], c.offsets, S(c).max_length),
               lambda c, t: ops.jagged_to_padded_dense(t[0], [c.offsets], [S(c).max_length], 0.0),
               lambda c, t: aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total),
               "aten._jagged_to_padded_dense_forward(values, [offsets], [max_L], 0.0)", "jagged_to_padded_dense"),
        OpSpec("dense_to_jagged",
               lambda c, t: m.dense_to_jagged(t[0], c.offsets, S(c).total)[0],
               lambda c, t: ops.dense_to_jagged(t[0], [c.offsets], S(c).total)[0],
               lambda c, t: aten_to_jagged(t[0], c.offsets, S(c).total),
               "aten._padded_dense_to_jagged_forward(dense, [offsets], total_L)", "dense_to_jagged_forward"),
        OpSpec("jagged_dense_elementwise_add",
               lambda c, t: m.jagged_dense_elementwise_add(t[0], c.offsets, t[1]),
               lambda c, t: ops.jagged_dense_elementwise_add(t[0], [c.offsets], t[1]),
               lambda c, t: aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total) + t[1],
               "aten pad(x) + y", "jagged_dense_elementwise_add"),
        OpSpec("jagged_dense_elementwise_add_jagged_output",
               lambda c, t: m.jagged_dense_elementwise_add_jagged_output(t[0], c.offsets, t[1])[0],
               lambda c, t: ops.jagged_dense_elementwise_add_jagged_output(t[0], [c.offsets], t[1])[0],
               lambda c, t: aten_to_jagged(aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total) + t[1],
                                           c.offsets, S(c).total),
               "aten back(aten pad(x) + y)", "jagged_dense_elementwise_add_jagged_output_forward"),
        OpSpec("jagged_dense_elementwise_mul",
               lambda c, t: m.jagged_dense_elementwise_mul(t[0], c.offsets, t[1])[0],
               lambda c, t: ops.jagged_dense_elementwise_mul(t[0], [c.offsets], t[1])[0],
               lambda c, t: aten_to_jagged(aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total) * t[1],
                                           c.offsets, S(c).total),
               "aten back(aten pad(x) * y)", "jagged_dense_elementwise_mul_forward"),
        OpSpec("jagged_softmax",
               lambda c, t: m.jagged_softmax(t[0], c.offsets, S(c).max_length)[0],
               lambda c, t: ops.jagged_softmax(t[0], c.offsets, S(c).max_length)[0],
               lambda c, t: aten_to_jagged(torch.softmax(aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total,
                                                                        float("-inf")), dim=1), c.offsets, S(c).total),
               "aten back(softmax(aten pad(x, -inf), dim=1)) (NJT's softmax)", "jagged_softmax_forward"),
        OpSpec("jagged_dense_bmm",
               lambda c, t: m.jagged_dense_bmm(t[0], c.offsets, t[1], S(c).max_length)[0],
               lambda c, t: ops.jagged_dense_bmm(t[0], c.offsets, t[1], S(c).max_length)[0],
               lambda c, t: aten_to_jagged(torch.bmm(aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total),
                                                     t[1]), c.offsets, S(c).total),
               "aten back(torch.bmm(aten pad(x), y))", "jagged_dense_bmm_forward"),
        OpSpec("jagged_jagged_bmm",
               lambda c, t: m.jagged_jagged_bmm(t[0], t[1], c.offsets, S(c).max_length),
               lambda c, t: ops.jagged_jagged_bmm(t[0], t[1], c.offsets, S(c).max_length),
               lambda c, t: torch.bmm(aten_to_padded(t[0], c.offsets, S(c).max_length, S(c).total).transpose(1, 2),
                                      aten_to_padded(t[1], c.offsets, S(c).max_length, S(c).total)),
               "torch.bmm(aten pad(x)^T, aten pad(y))", "jagged_jagged_bmm"),
        OpSpec("jagged_index_select",
               lambda c, t: m.jagged_index_select(t[0], c.lengths, c.indices, S(c).selected)[0],
               lambda c, t: ops.jagged_index_select(t[0], c.lengths, c.indices, S(c).selected)[0],
               lambda c, t: torch_index_select(t[0], c.lengths, c.indices, S(c).selected),
               "values.index_select(0, rows from cumsum + repeat_interleave(output_size))", "jagged_index_select"),
    )}


@functools.cache
def specs() -> dict[str, OpSpec]:
    return _specs()


def primary(out):
    """The main output of an op's call (a tensor, or the first of a tuple / list)."""
    return out if isinstance(out, torch.Tensor) else out[0]


# --- numerics ----------------------------------------------------------------------------------------

_CHUNK = 1 << 26  # elements compared at a time (fp32 temporaries of at most 256 MB)


def max_rel_err(out, ref) -> float | None:
    """max |out - ref| / max |ref| over every tensor (out and ref: tensors or sequences of them,
    in the same order); None without a reference. NaN or a shape mismatch gives inf."""
    if ref is None or out is None:
        return None
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    if len(outs) != len(refs):
        return math.inf
    worst = 0.0
    for o, r in zip(outs, refs):
        if o is None or r is None:
            if o is not r:
                return math.inf
            continue
        if o.shape != r.shape:
            return math.inf
        o, r = o.detach().reshape(-1), r.detach().reshape(-1)
        diff = torch.zeros((), device=r.device)
        scale = torch.zeros((), device=r.device)
        for s in range(0, r.numel(), _CHUNK):
            oc, rc = o[s:s + _CHUNK].float(), r[s:s + _CHUNK].float()
            diff = torch.maximum(diff, (oc - rc).abs().max())
            scale = torch.maximum(scale, rc.abs().max())
        d, sc = float(diff), float(scale)
        if math.isnan(d):
            return math.inf
        worst = max(worst, d / sc if sc > 0 else d)
    return worst


# --- the model's predictions -------------------------------------------------------------------------

def model_problems(op: str, direction: str, s: Sizes, index_dtype: str = "int64", dtype: str = "bf16"):
    """(model op, JaggedProblem) of the kernels a call of `op` runs (forward, or its backward as
    csrc/jagged/jagged_autograd.cpp builds it; mul's at::mul is not modelled)."""
    from mymetaops.model import jagged as j

    def P(mop, dim=s.dim, n=0, batch=s.batch, max_length=s.max_length, total=s.total):
        return mop, j.JaggedProblem(mop, batch, max_length, total, dim, n, dtype, index_dtype)

    fwd = direction == "fwd"
    if op == "jagged_to_padded_dense":
        return [P(j.TO_PADDED)] if fwd else [P(j.TO_JAGGED)]
    if op == "dense_to_jagged":
        return [P(j.TO_JAGGED)] if fwd else [P(j.TO_PADDED)]
    if op == "jagged_dense_elementwise_add":
        return [P(j.ADD_DENSE)] if fwd else [P(j.TO_JAGGED)]
    if op == "jagged_dense_elementwise_add_jagged_output":
        return [P(j.ADD_JAGGED)] if fwd else [P(j.TO_PADDED)]
    if op == "jagged_dense_elementwise_mul":
        return [P(j.MUL)] if fwd else [P(j.MUL), P(j.TO_PADDED)]
    if op == "jagged_softmax":
        return [P(j.SOFTMAX)] if fwd else [P(j.SOFTMAX_BACKWARD)]
    if op == "jagged_dense_bmm":  # x [T, K], y [B, K, N]
        K, N = s.dim, s.n
        return [P(j.DENSE_BMM, K, N)] if fwd else [P(j.DENSE_BMM, N, K), P(j.JAGGED_BMM, K, N)]
    if op == "jagged_jagged_bmm":  # x [T, M], y [T, N]
        M, N = s.dim, s.n
        return [P(j.JAGGED_BMM, M, N)] if fwd else [P(j.DENSE_BMM, N, M), P(j.DENSE_BMM, M, N)]
    if op == "jagged_index_select":
        mop = j.INDEX_SELECT if fwd else j.INDEX_SELECT_BACKWARD
        return [P(mop, batch=s.num_indices, max_length=s.selected, total=s.total)]
    raise ValueError(op)


def predicted_us(op: str, direction: str, s: Sizes, hw, backend: str = "auto", native: bool = True,
                 index_dtype: str = "int64") -> float | None:
    """The model's time for the dispatch's choice (its bucket's decision, at the exact problem),
    summed over the kernels the call runs; None where the backend has no candidate."""
    from mymetaops import model
    total = 0.0
    try:
        for mop, p in model_problems(op, direction, s, index_dtype):
            b = model.decide_bucketed(mop, p, hw, backend, native)
            choice = b.decision.choice
            at_exact = next((c for c in b.exact.candidates
                             if (c.backend, c.config) == (choice.backend, choice.config)), b.exact.choice)
            total += at_exact.time_us
    except (ValueError, KeyError):
        return None
    return total


def offered_backends(op: str, direction: str, s: Sizes, hw) -> list[str]:
    """The backends the model has candidates of for every kernel of the op's direction on this
    hardware (a backward may take other kernels than the forward: to_padded's is dense_to_jagged)."""
    from mymetaops import model
    decisions = [model.decide(mop, p, hw, "auto", True) for mop, p in model_problems(op, direction, s)]
    return [b for b in ("native", "triton", "vendor")
            if all(any(c.backend == b for c in d.candidates) for d in decisions)]
