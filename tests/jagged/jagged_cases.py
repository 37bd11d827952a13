"""Shared by the jagged family's tests: float64 references of every op, random jagged cases,
hypothesis strategies and the tolerances.

A jagged tensor with n jagged dims is (values, offsets): offsets[0] has B + 1 entries and indexes
offsets[1] (or the rows of values when n = 1), and so on down to the rows of values. Its dense form
is [B, *max_lengths, D] (or [B, *max_lengths] for 1-D values). Element (b, j0, .., j_{n-1}) of the
dense form is row r of values, found by walking down the levels: start = b; at level k, with
lo = offsets[k][start], hi = offsets[k][start + 1], the element is padding when j_k >= hi - lo,
else start = lo + j_k; r = start after the last level. Every reference below is written on top of
that walk (`index_map`), in plain torch, differentiable, in whatever floating dtype it is given
(`reference` runs them in float64).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
from hypothesis import strategies as st

# Tolerances, stated once: |actual - expected| <= TOLERANCE[dtype] * scale, elementwise, where
# expected is the float64 result of the same (low-precision) inputs and scale the sum of |terms|
# of the element (or |expected| for softmax). The ops accumulate in fp32 and round the output
# once: half an ulp is 2^-9 (bf16), 2^-11 (fp16), 2^-24 (fp32); the bounds leave room for fp32
# accumulation and for one more rounding (FBGEMM comparisons: two roundings, one each side).
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
VALUE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# FBGEMM's CPU softmax computes in the input dtype, without fp32 accumulation: measured up to 1.24x
# the bound above in bf16/fp16 (sequences up to 23 rows), its backward up to 1.2x. Comparisons with
# FBGEMM allow its side FBGEMM_FACTOR[op] times the bound (default 1), forward and backward.
FBGEMM_FACTOR = {"jagged_softmax": 3.0, "jagged_softmax_forward": 3.0}
INDEX_KINDS = ("int32", "int64", "mixed")  # "mixed": int32 and int64 tensors in one call


def index_dtypes(kind: str, count: int) -> list[torch.dtype]:
    """The dtype of each of `count` index tensors (offsets per level; lengths, indices)."""
    if kind == "mixed":
        return [(torch.int32, torch.int64)[i % 2] for i in range(count)]
    return [getattr(torch, kind)] * count


# ---- the walk ------------------------------------------------------------------------------------

def as_list(offsets) -> list[torch.Tensor]:
    return [offsets] if isinstance(offsets, torch.Tensor) else list(offsets)


def index_map(offsets, sizes) -> torch.Tensor:
    """[B, *sizes] int64: the row of values each dense element reads, -1 for padding."""
    offs = [o.detach().cpu().long().tolist() for o in as_list(offsets)]
    sizes = [int(s) for s in sizes]
    assert len(sizes) == len(offs), "one size per jagged dim"
    batch = len(offs[0]) - 1
    flat = torch.full((batch, math.prod(sizes)), -1, dtype=torch.int64)
    for b in range(batch):
        for position, js in enumerate(itertools.product(*(range(s) for s in sizes))):
            start = b
            for level, j in enumerate(js):
                lo, hi = offs[level][start], offs[level][start + 1]
                if j >= hi - lo:
                    break
                start = lo + j
            else:
                flat[b, position] = start
    return flat.reshape(batch, *sizes)


def _with_d(t: torch.Tensor, has_d: bool) -> torch.Tensor:
    return t if has_d else t.unsqueeze(-1)


def _scatter_rows(total: int, imap: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """A [total, D] tensor holding dense[position] at the row each position maps to, 0 elsewhere."""
    mask = imap >= 0
    out = dense.new_zeros(total, dense.shape[-1])
    return out.index_put((imap[mask],), dense[mask]) if mask.any() else out


# ---- references (any floating dtype; run in float64 by `reference`) --------------------------------

def jagged_to_padded_dense(values, offsets, max_lengths, padding_value=0.0):
    offsets = as_list(offsets)
    has_d = values.dim() == 2
    v = _with_d(values, has_d)
    imap = index_map(offsets, max_lengths)
    mask = imap >= 0
    out = v.new_full((*imap.shape, v.shape[-1]), padding_value)
    if mask.any():
        out = out.index_put((mask,), v[imap[mask]])
    return out if has_d else out.squeeze(-1)


def dense_to_jagged_forward(dense, x_offsets, total_L=None):
    offsets = as_list(x_offsets)
    n = len(offsets)
    has_d = dense.dim() == 2 + n
    d = _with_d(dense, has_d)
    last = int(offsets[-1][-1])
    total = last if total_L is None else int(total_L)
    assert total >= last, "total_L below the last offset is an error"
    out = _scatter_rows(total, index_map(offsets, d.shape[1:1 + n]), d)
    return out if has_d else out.squeeze(-1)


def jagged_dense_elementwise_add(x_values, x_offsets, y):
    offsets = as_list(x_offsets)
    return jagged_to_padded_dense(x_values, offsets, list(y.shape[1:1 + len(offsets)]), 0.0) + y


def jagged_dense_elementwise_add_jagged_output_forward(x_values, x_offsets, y):
    offsets = as_list(x_offsets)
    has_d = x_values.dim() == 2
    x, yd = _with_d(x_values, has_d), _with_d(y, has_d)
    out = x + _scatter_rows(x.shape[0], index_map(offsets, yd.shape[1:1 + len(offsets)]), yd)
    return out if has_d else out.squeeze(-1)


def jagged_dense_elementwise_mul_forward(x_values, x_offsets, y):
    offsets = as_list(x_offsets)
    has_d = x_values.dim() == 2
    x, yd = _with_d(x_values, has_d), _with_d(y, has_d)
    out = x * _scatter_rows(x.shape[0], index_map(offsets, yd.shape[1:1 + len(offsets)]), yd)
    return out if has_d else out.squeeze(-1)


def _sequences(x_offsets, max_L):
    """(first row, rows kept = min(length, max_L)) of each sequence."""
    offs = x_offsets.detach().cpu().long().tolist()
    return [(offs[b], max(0, min(offs[b + 1] - offs[b], int(max_L)))) for b in range(len(offs) - 1)]


def jagged_softmax_forward(values, x_offsets, max_L):
    out = torch.zeros_like(values)
    for start, rows in _sequences(x_offsets, max_L):
        if rows:
            out[start:start + rows] = torch.softmax(values[start:start + rows], dim=0)
    return out


def jagged_softmax_backward(grad_output, output, x_offsets, max_L, sign=-1.0):
    """grad = y * (g - sum_rows(g * y)); sign=+1 (with |g|, |y|) gives the sum of |terms|."""
    out = torch.zeros_like(grad_output)
    for start, rows in _sequences(x_offsets, max_L):
        if rows:
            g, y = grad_output[start:start + rows], output[start:start + rows]
            out[start:start + rows] = y * (g + sign * (g * y).sum(0, keepdim=True))
    return out


def jagged_dense_bmm_forward(x_values, x_offsets, y, max_L):
    out = x_values.new_zeros(x_values.shape[0], y.shape[-1])
    for b, (start, rows) in enumerate(_sequences(x_offsets, max_L)):
        if rows:
            out[start:start + rows] = x_values[start:start + rows] @ y[b]
    return out


def jagged_jagged_bmm(x_values, y_values, x_offsets, max_L):
    seqs = _sequences(x_offsets, max_L)
    out = x_values.new_zeros(len(seqs), x_values.shape[-1], y_values.shape[-1])
    for b, (start, rows) in enumerate(seqs):
        if rows:
            out[b] = x_values[start:start + rows].t() @ y_values[start:start + rows]
    return out


def _starts(lengths):
    lens = lengths.detach().cpu().long().tolist()
    return [sum(lens[:i]) for i in range(len(lens))], lens


def jagged_index_select(values, lengths, indices, num_dense_output_rows=None):
    starts, lens = _starts(lengths)
    pieces = [values[starts[i]:starts[i] + lens[i]] for i in indices.detach().cpu().long().tolist()]
    out = torch.cat(pieces) if pieces else values.new_zeros(0, values.shape[-1])
    return out, lengths.detach().cpu()[indices.detach().cpu().long()]


def jagged_index_select_backward(grad_output, lengths, indices, num_input_rows):
    starts, lens = _starts(lengths)
    out = grad_output.new_zeros(int(num_input_rows), grad_output.shape[-1])
    row = 0
    for i in indices.detach().cpu().long().tolist():
        out[starts[i]:starts[i] + lens[i]] += grad_output[row:row + lens[i]]
        row += lens[i]
    return out


@dataclass(frozen=True)
class OpSpec:
    """How each op is called and checked."""

    reference: Callable  # float64 reference of the op's main output
    multi_level: bool  # takes Tensor[] offsets (any number of jagged dims, 1-D values allowed)
    exact: bool  # a copy: bit-exact against the reference
    differentiable: tuple[int, ...]  # argument positions autograd flows to (public ops only)
    returns: str  # "tensor", "values+offsets" (FBGEMM's (Tensor, Tensor[]) / (Tensor, Tensor)), "list"
    multilinear: bool = True  # the reference on |inputs| sums |terms| (every op but softmax)


OPS = {
    "jagged_to_padded_dense": OpSpec(jagged_to_padded_dense, True, True, (0,), "tensor"),
    "dense_to_jagged": OpSpec(dense_to_jagged_forward, True, True, (0,), "values+offsets"),
    "dense_to_jagged_forward": OpSpec(dense_to_jagged_forward, True, True, (), "tensor"),
    "jagged_dense_elementwise_add": OpSpec(jagged_dense_elementwise_add, True, False, (0, 2), "tensor"),
    "jagged_dense_elementwise_add_jagged_output": OpSpec(
        jagged_dense_elementwise_add_jagged_output_forward, True, False, (0, 2), "values+offsets"),
    "jagged_dense_elementwise_add_jagged_output_forward": OpSpec(
        jagged_dense_elementwise_add_jagged_output_forward, True, False, (), "tensor"),
    "jagged_dense_elementwise_mul": OpSpec(jagged_dense_elementwise_mul_forward, True, False, (0, 2),
                                           "values+offsets"),
    "jagged_dense_elementwise_mul_forward": OpSpec(jagged_dense_elementwise_mul_forward, True, False, (),
                                                   "tensor"),
    "jagged_softmax": OpSpec(jagged_softmax_forward, False, False, (0,), "values+offsets", False),
    "jagged_softmax_forward": OpSpec(jagged_softmax_forward, False, False, (), "tensor", False),
    "jagged_softmax_backward": OpSpec(jagged_softmax_backward, False, False, (), "tensor", False),
    "jagged_dense_bmm": OpSpec(jagged_dense_bmm_forward, False, False, (0, 2), "values+offsets"),
    "jagged_dense_bmm_forward": OpSpec(jagged_dense_bmm_forward, False, False, (), "tensor"),
    "jagged_jagged_bmm": OpSpec(jagged_jagged_bmm, False, False, (0, 1), "tensor"),
    "jagged_index_select": OpSpec(lambda *a: jagged_index_select(*a)[0], False, True, (0,), "list"),
    "jagged_index_select_backward": OpSpec(jagged_index_select_backward, False, False, (), "tensor"),
}
PUBLIC_OPS = [name for name, spec in OPS.items() if spec.differentiable]
INTERNAL_OPS = [name for name, spec in OPS.items() if not spec.differentiable]


def primary(op: str, out):
    """The op's main output (its values / dense tensor) out of what it returns."""
    return out if OPS[op].returns == "tensor" else out[0]


def _to_reference(a, absolute):
    if isinstance(a, torch.Tensor):
        if a.is_floating_point():
            t = a.detach().cpu().double()
            return t.abs() if absolute else t
        return a.detach().cpu()
    if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
        return [t.detach().cpu() for t in a]
    return a


def reference(op: str, args, grad_output=None, absolute=False):
    """The float64 result of op on args (main output only); with grad_output, also the gradients
    of the op's differentiable arguments (a list, in argument order).

    absolute=True runs on |inputs| (and |grad_output|): for the multilinear ops that is the sum of
    |terms| of every element, the scale the tolerance is relative to.
    """
    spec = OPS[op]
    conv = [_to_reference(a, absolute) for a in args]
    leaves = [conv[i] for i in spec.differentiable] if grad_output is not None else []
    for leaf in leaves:
        leaf.requires_grad_()
    with torch.enable_grad():
        out = spec.reference(*conv)
    if grad_output is None:
        return out.detach()
    g = grad_output.detach().cpu().double()
    if not out.requires_grad:  # no element of out depends on the inputs (e.g. nothing selected)
        return out.detach(), [torch.zeros_like(leaf) for leaf in leaves]
    grads = torch.autograd.grad(out, leaves, g.abs() if absolute else g, allow_unused=True)
    grads = [torch.zeros_like(leaf) if gr is None else gr for leaf, gr in zip(leaves, grads)]
    return out.detach(), grads


def scale(op: str, args, grad_output=None):
    """What the tolerance is relative to: of the main output, or (with grad_output) of each gradient."""
    if OPS[op].multilinear:
        result = reference(op, args, grad_output, absolute=True)
        return result if grad_output is None else result[1]
    if op == "jagged_softmax_backward":
        g, y, offsets, max_L = (_to_reference(a, True) for a in args)
        return jagged_softmax_backward(g, y, offsets, max_L, sign=1.0)
    y = reference(op, args)  # jagged_softmax(_forward): relative to each probability
    if grad_output is None:
        return y
    return [jagged_softmax_backward(_to_reference(grad_output, True), y, args[1], args[2], sign=1.0)]


# ---- comparisons -----------------------------------------------------------------------------------

def assert_close(actual, expected, scale_, dtype, what="", factor=1.0):
    """|actual - expected| <= factor * TOLERANCE[dtype] * scale (+ the dtype's subnormal spacing)
    elementwise, the same shape, and no NaN anywhere (an element left unwritten shows up as garbage
    or NaN)."""
    actual = actual.detach().cpu().double()
    expected = expected.detach().cpu().double()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert not actual.isnan().any(), f"{what}: NaN in the result (an element left unwritten?)"
    err = (actual - expected).abs()
    finfo = torch.finfo(dtype)
    bound = factor * TOLERANCE[dtype] * scale_.detach().cpu().double() + finfo.smallest_normal * finfo.eps
    if err.numel() and not (err <= bound).all():
        worst = int((err - bound).flatten().argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), err.shape))
        raise AssertionError(
            f"{what}: error {err.flatten()[worst]:.3g} over bound {bound.flatten()[worst]:.3g} at {index}: "
            f"got {actual.flatten()[worst]:.8g}, expected {expected.flatten()[worst]:.8g}")


def assert_exact(actual, expected, dtype, what=""):
    """Bit-exact: a copy of low-precision inputs is the float64 reference cast back."""
    actual = actual.detach().cpu()
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype} != {dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    expected = expected.to(dtype)
    same = (actual == expected) | (actual.isnan() & expected.isnan())
    if not same.all():
        bad = (~same).nonzero()[0].tolist()
        raise AssertionError(f"{what}: {int((~same).sum())} elements differ, first at {bad}: "
                             f"got {actual[tuple(bad)].item()}, expected {expected[tuple(bad)].item()}")


def check(op: str, actual, args, what=""):
    """The op's main output against the float64 reference of args, every element."""
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
    assert actual.dtype == dtype, f"{what}: output dtype {actual.dtype} != input dtype {dtype}"
    expected = reference(op, args)
    if OPS[op].exact:
        assert_exact(actual, expected, dtype, what)
    else:
        assert_close(actual, expected, scale(op, args), dtype, what)


# ---- cases ---------------------------------------------------------------------------------------

@dataclass
class JaggedCase:
    """A jagged tensor (values, offsets) and its dense sizes; op_args builds each op's arguments."""

    values: torch.Tensor  # [total, D] or [total]
    offsets: list[torch.Tensor]
    max_lengths: tuple[int, ...]
    lengths: list[list[int]]  # per level, the length of every node
    index_kind: str
    strided: bool
    padding_value: float
    seed: int
    name: str = ""

    @property
    def batch(self) -> int:
        return self.offsets[0].numel() - 1

    @property
    def last_offset(self) -> int:
        return int(self.offsets[-1][-1])

    @property
    def dim(self):
        return self.values.shape[1] if self.values.dim() == 2 else None

    @property
    def every_row_in_a_sequence(self) -> bool:
        """Offsets from 0, each level's last offset = the next level's node count / the rows."""
        counts = [o.numel() - 1 for o in self.offsets[1:]] + [self.values.shape[0]]
        return all(int(o[0]) == 0 and int(o[-1]) == c for o, c in zip(self.offsets, counts))

    def __repr__(self):  # short, for hypothesis' falsifying examples
        return (f"JaggedCase({self.name!r}, B={self.batch}, max_lengths={self.max_lengths}, D={self.dim}, "
                f"lengths={self.lengths}, offsets={[o.tolist() for o in self.offsets]}, "
                f"dtype={self.values.dtype}, index={self.index_kind}, strided={self.strided}, seed={self.seed})")


def strided_copy(t: torch.Tensor, how: str = "rows") -> torch.Tensor:
    """The same values in a non-contiguous layout. rows: the leading columns of a wider buffer (row
    stride > the row's size; 1-D: every other element); transposed: the dims stored reversed."""
    if how == "transposed" and t.dim() >= 2:
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))
    if t.dim() == 1:
        wide = t.new_zeros(2 * t.numel() + 1)
        wide[1::2] = t
        return wide[1::2]
    wide = t.new_zeros(*t.shape[:-1], t.shape[-1] + 3)
    wide[..., 1:-2] = t
    return wide[..., 1:-2]


def make_case(seed=0, batch=3, max_lengths=(4,), dim=3, dtype=torch.float32, index_kind="int64",
              over=3, strided=False, base=0, extra_rows=0, lengths=None, padding_value=-2.5,
              device="cpu", name="") -> JaggedCase:
    """Random lengths uniform in 0..max_lengths[k] + over at every level (over > 0: sequences that
    the dense form truncates), values ~ N(0, 1) rounded to dtype. base > 0: every level's offsets start
    at base (the nodes / rows before it belong to no sequence); extra_rows: rows after the last offset.
    lengths: the lengths of every level, instead of random ones (hypothesis draws them)."""
    g = torch.Generator().manual_seed(seed)
    n = len(max_lengths)
    dtypes = index_dtypes(index_kind, n)
    offsets, all_lengths, count = [], [], batch
    for level in range(n):
        if lengths is not None:
            lens = list(lengths[level])
            assert len(lens) == count, (level, len(lens), count)
        else:
            lens = torch.randint(0, max_lengths[level] + over + 1, (count,), generator=g).tolist()
        start = base if count else 0
        offsets.append(torch.tensor([start] + lens, dtype=torch.int64).cumsum(0).to(dtypes[level]))
        all_lengths.append(lens)
        count = int(offsets[-1][-1]) + extra_rows
    values = torch.randn(count, dim if dim is not None else 1, generator=g, dtype=torch.float64)
    values = values.to(dtype)
    if dim is None:
        values = values.squeeze(-1)
    values, offsets = values.to(device), [o.to(device) for o in offsets]
    if strided:
        values = strided_copy(values)
        offsets = [strided_copy(o) for o in offsets]
    return JaggedCase(values, offsets, tuple(max_lengths), all_lengths, index_kind, strided, padding_value,
                      seed, name)


def _randn(g, shape, dtype, device):
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device)


def op_args(op: str, case: JaggedCase) -> tuple:
    """The op's arguments (raw op form: offsets a list for the multi-level ops) built on case."""
    g = torch.Generator().manual_seed(case.seed + 7919)
    v, dtype, device = case.values, case.values.dtype, case.values.device
    batch, n, d = case.batch, len(case.offsets), case.dim
    dense_shape = (batch, *case.max_lengths) + ((d,) if d is not None else ())
    layout = lambda t: strided_copy(t, "transposed") if case.strided else t  # noqa: E731
    if op == "jagged_to_padded_dense":
        return (v, case.offsets, list(case.max_lengths), case.padding_value)
    if op in ("dense_to_jagged", "dense_to_jagged_forward"):
        total_L = v.shape[0] if v.shape[0] != case.last_offset else None
        return (layout(_randn(g, dense_shape, dtype, device)), case.offsets, total_L)
    if op.startswith("jagged_dense_elementwise"):
        return (v, case.offsets, layout(_randn(g, dense_shape, dtype, device)))
    assert n == 1 and d is not None, f"{op} takes one offsets tensor and 2-D values"
    offsets, max_L = case.offsets[0], case.max_lengths[0]
    if op in ("jagged_softmax", "jagged_softmax_forward"):
        return (v, offsets, max_L)
    if op == "jagged_softmax_backward":
        output = jagged_softmax_forward(v.cpu().double(), offsets, max_L).to(dtype).to(device)
        return (_randn(g, v.shape, dtype, device), output, offsets, max_L)
    if op in ("jagged_dense_bmm", "jagged_dense_bmm_forward"):
        cols = 1 + case.seed % 5
        return (v, offsets, layout(_randn(g, (batch, d, cols), dtype, device)), max_L)
    if op == "jagged_jagged_bmm":
        y = _randn(g, (v.shape[0], 1 + case.seed % 4), dtype, device)
        return (v, strided_copy(y) if case.strided else y, offsets, max_L)
    lengths_dtype, indices_dtype = index_dtypes(case.index_kind, 2)
    lengths = torch.tensor(case.lengths[0], dtype=lengths_dtype, device=device)
    count = int(torch.randint(0, 2 * batch + 2, (), generator=g)) if batch else 0
    indices = torch.randint(0, max(batch, 1), (count,), generator=g).to(indices_dtype).to(device)
    if case.strided:
        lengths, indices = strided_copy(lengths), strided_copy(indices)
    rows = int(lengths.long()[indices.long()].sum()) if count else 0
    if op == "jagged_index_select":
        return (v, lengths, indices, rows if case.seed % 2 else None)
    if op == "jagged_index_select_backward":
        return (_randn(g, (rows, d), dtype, device), lengths, indices, v.shape[0])
    raise KeyError(op)


def applies(op: str, case: JaggedCase) -> bool:
    return OPS[op].multi_level or (len(case.offsets) == 1 and case.dim is not None)


def applies_to_structure(op: str, structure: str) -> bool:
    kwargs = STRUCTURES[structure]
    return OPS[op].multi_level or (len(kwargs["max_lengths"]) == 1 and kwargs["dim"] is not None)


def case_on(case: JaggedCase, device) -> JaggedCase:
    """The case on device, strided again where it was."""
    def move(t):
        return strided_copy(t.contiguous().to(device)) if case.strided else t.to(device)
    return replace(case, values=move(case.values), offsets=[move(o) for o in case.offsets])


# Named structures for the parametrized tests (dtype, index kind and device are parametrized).
STRUCTURES = {
    "basic": dict(batch=4, max_lengths=(5,), dim=7),
    "b1": dict(batch=1, max_lengths=(4,), dim=3, padding_value=float("-inf")),
    "b0": dict(batch=0, max_lengths=(3,), dim=2),
    "d1": dict(batch=3, max_lengths=(4,), dim=1),
    "values-1d": dict(batch=3, max_lengths=(4,), dim=None),
    "max-length-0": dict(batch=3, max_lengths=(0,), dim=2),
    "all-empty": dict(batch=3, max_lengths=(3,), dim=4, lengths=[[0, 0, 0]]),
    "no-truncation": dict(batch=5, max_lengths=(6,), dim=5, over=0, padding_value=0.0),
    "long": dict(batch=3, max_lengths=(12,), dim=9),
    "strided": dict(batch=4, max_lengths=(5,), dim=6, strided=True),
    "uncovered": dict(batch=3, max_lengths=(4,), dim=3, base=2, extra_rows=3),
    "2-levels": dict(batch=3, max_lengths=(3, 4), dim=5),
    "2-levels-values-1d": dict(batch=2, max_lengths=(2, 3), dim=None),
    "2-levels-strided": dict(batch=3, max_lengths=(2, 3), dim=4, strided=True),
    "2-levels-uncovered": dict(batch=2, max_lengths=(3, 2), dim=3, base=1, extra_rows=2),
    "2-levels-b0": dict(batch=0, max_lengths=(2, 3), dim=2),
    "3-levels": dict(batch=2, max_lengths=(2, 3, 2), dim=3),
}


def named_case(name, dtype=torch.float32, index_kind="int64", device="cpu", seed=None) -> JaggedCase:
    kwargs = STRUCTURES[name]
    seed = seed if seed is not None else sum(map(ord, name))
    return make_case(seed=seed, dtype=dtype, index_kind=index_kind, device=device, name=name, **kwargs)


def index_kinds_for(op: str, structure: str) -> list[str]:
    """mixed only where a call has more than one index tensor."""
    several = len(STRUCTURES[structure]["max_lengths"]) > 1 or op.startswith("jagged_index_select")
    return list(INDEX_KINDS) if several else ["int32", "int64"]


# ---- hypothesis ----------------------------------------------------------------------------------

@st.composite
def jagged_cases(draw, multi_level=True, allow_values_1d=True, dtypes=VALUE_DTYPES, max_batch=5):
    """B in 0..max_batch, 1..3 jagged dims (1 when not multi_level), lengths 0..max_L + 3, D in 1..9
    (or 1-D values), any index dtypes, strided or not, uncovered nodes / rows or not."""
    n = draw(st.integers(1, 3)) if multi_level else 1
    batch = draw(st.integers(0, max_batch))
    cap = 6 if n == 1 else 3
    max_lengths = tuple(draw(st.integers(0, cap)) for _ in range(n))
    base = draw(st.sampled_from([0, 0, 0, 1, 2]))
    extra = draw(st.sampled_from([0, 0, 0, 1, 3]))
    lengths, count = [], batch
    for level in range(n):
        lens = draw(st.lists(st.integers(0, max_lengths[level] + 3), min_size=count, max_size=count))
        lengths.append(lens)
        count = (base if count else 0) + sum(lens) + extra
    choices = list(range(1, 10)) + ([None] if allow_values_1d else [])
    return make_case(
        seed=draw(st.integers(0, 2**31 - 1)), batch=batch, max_lengths=max_lengths,
        dim=draw(st.sampled_from(choices)), dtype=draw(st.sampled_from(dtypes)),
        index_kind=draw(st.sampled_from(INDEX_KINDS)), strided=draw(st.booleans()), base=base,
        extra_rows=extra, lengths=lengths, padding_value=draw(st.sampled_from([0.0, -1.5, 3.0])),
        name="hypothesis")

# ---- FBGEMM as an oracle -------------------------------------------------------------------------

class FbgemmRefuses(Exception):
    """FBGEMM does not take this input (or leaves its result undefined there): nothing to compare."""


def _every_row_covered(offsets, rows) -> bool:
    counts = [o.numel() - 1 for o in offsets[1:]] + [rows]
    return all(int(o[0]) == 0 and int(o[-1]) == c for o, c in zip(offsets, counts))


def _kept_rows(x_offsets, max_L, rows) -> torch.Tensor:
    mask = torch.zeros(rows, dtype=torch.bool)
    for start, kept in _sequences(x_offsets, max_L):
        mask[start:start + kept] = True
    return mask


def fbgemm_call(op: str, args, grad_output=None):
    """torch.ops.fbgemm's result for op on args: (main output, gradients of the differentiable
    arguments or None, rows) where rows masks the rows (dim 0) of the output and of the values'
    gradient that FBGEMM defines (None: all). Raises FbgemmRefuses where FBGEMM cannot be asked.

    Adapted to what FBGEMM takes, same semantics: offsets of mixed dtypes cast to int64 (FBGEMM wants
    one dtype), 1-D values given a trailing dim of 1 (only its jagged_to_padded_dense takes 1-D),
    strided softmax values made contiguous (FBGEMM's CPU softmax reads them wrongly)."""
    import fbgemm_gpu  # noqa: F401

    fb = torch.ops.fbgemm
    spec = OPS[op]
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if any(a.dtype == torch.float64 for a in floats):
        raise FbgemmRefuses("FBGEMM's CPU kernels have no float64")
    args = list(args)
    leaves = []
    if grad_output is not None:
        for i in spec.differentiable:
            args[i] = args[i].detach().clone().requires_grad_()
            leaves.append(args[i])
    rows = None
    squeeze = False
    if grad_output is not None and op == "jagged_dense_elementwise_mul" and floats[0].dtype == torch.bfloat16:
        raise FbgemmRefuses("FBGEMM's CPU jagged_dense_elementwise_mul_backward has no bfloat16")
    if spec.multi_level:
        offsets = list(args[1])
        if any(o.numel() != int(above[-1]) + 1 for above, o in zip(offsets, offsets[1:])):
            raise FbgemmRefuses("FBGEMM wants offsets[k + 1] to have offsets[k][-1] + 1 entries (no nodes "
                                "past a level's last offset)")
        if len({o.dtype for o in offsets}) > 1:
            offsets = [o.long() for o in offsets]
        args[1] = offsets
        if op != "jagged_to_padded_dense":  # FBGEMM's CPU kernels view() the dense operand
            i = 0 if op.startswith("dense_to_jagged") else 2
            args[i] = args[i].contiguous()
        has_d = args[0].dim() == (2 if op != "dense_to_jagged" and op != "dense_to_jagged_forward"
                                  else 2 + len(offsets))
        if not has_d and op != "jagged_to_padded_dense":
            squeeze = True
            args[0] = args[0].unsqueeze(-1)
            if op.startswith("jagged_dense_elementwise"):
                args[2] = args[2].unsqueeze(-1)
        if op.startswith("jagged_dense_elementwise_add_jagged_output") or op.startswith(
                "jagged_dense_elementwise_mul"):
            if not _every_row_covered(offsets, args[0].shape[0]):
                raise FbgemmRefuses("FBGEMM's jagged-output elementwise ops need offsets from 0 and every "
                                    "row of x_values in a sequence (it sizes the output from offsets)")
    if op == "jagged_dense_elementwise_add_jagged_output_forward":
        out = fb.jagged_dense_dense_elementwise_add_jagged_output_forward(
            args[0], args[1], args[2], torch.zeros_like(args[2]))
    elif op in ("jagged_softmax", "jagged_softmax_forward", "jagged_softmax_backward"):
        i = 1 if op == "jagged_softmax_backward" else 0
        args[0], args[i] = args[0].contiguous(), args[i].contiguous()
        rows = _kept_rows(args[i + 1], args[i + 2], args[0].shape[0])
        out = getattr(fb, op)(*args)
    elif op in ("jagged_index_select", "jagged_index_select_backward"):
        lengths, indices = args[1], args[2]
        if indices.numel() == 0:
            raise FbgemmRefuses("FBGEMM's jagged_index_select fails for no indices (select(): index -1)")
        if op == "jagged_index_select":
            out = fb.jagged_index_select(*args)
        else:
            if args[0].shape[0] == 0:
                raise FbgemmRefuses("no rows selected: nothing to differentiate")
            values = torch.zeros(args[3], args[0].shape[1], dtype=args[0].dtype, requires_grad=True)
            out, = torch.autograd.grad(fb.jagged_index_select(values, lengths, indices)[0], values, args[0])
    else:
        out = getattr(fb, op)(*args)
    main = primary(op, out)
    if squeeze:
        main = main.squeeze(-1)
    if grad_output is None:
        return main.detach(), None, rows
    grads = torch.autograd.grad(main, leaves, grad_output, allow_unused=True)
    grads = [torch.zeros_like(leaf) if gr is None else gr for leaf, gr in zip(leaves, grads)]
    return main.detach(), grads, rows
