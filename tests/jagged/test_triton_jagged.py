"""Triton jagged launchers (mymetaops/triton/jagged.py) against plain-torch float64 references, the
error record they write, and their argument checks.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (set below, as conftest.py does,
before triton is imported), on GPU tensors otherwise; `gpu`-marked tests need a GPU. Needs only the
Triton modules, not the extension. Interpreter caveats: its tl.dot on bf16 operands is wrong
(Triton 3.8), so the bmm tests run fp16/fp32 there (bf16 on a GPU); its fp32 -> bf16 conversion
truncates, which the bf16 tolerance covers. Every output is poisoned with NaN before a call, so a
row the kernels leave unwritten fails.
"""
import dataclasses
import os
import zlib

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from mymetaops.configs import TritonGemmConfig as G  # noqa: E402
from mymetaops.configs import TritonJaggedConfig as J  # noqa: E402
from mymetaops.triton import common  # noqa: E402
from mymetaops.triton import jagged as tj  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ON_GPU = DEVICE.type == "cuda"
VALUE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# bf16 dots only on a GPU (the interpreter's are wrong).
DOT_DTYPES = (torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu))
# |actual - expected| <= TOL * scale: one rounding of an fp32 result (bf16: a full ulp, as the
# interpreter truncates), room for fp32 accumulation.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# ErrorCode / ErrorOp of errors.h.
INDEX_OUT_OF_RANGE, NEGATIVE_OFFSET, DECREASING_OFFSET, OFFSET_PAST_END = 1, 2, 3, 4
OP_OF = {0: 4, 1: 5, 2: 6, 3: 6, 4: 6}
OP_SOFTMAX, OP_INDEX_SELECT, OP_BMM = 7, 8, 9


# ---------------------------------------------------------------- inputs, records, comparisons


def _generator(*case) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def rows_tensor(gen, rows, cols, dtype, strided=False):
    """Random [rows, cols]; `strided`: a column slice of a wider tensor (row stride cols + 5)."""
    if strided:
        wide = torch.randn(rows, cols + 5, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
        return wide[:, 2:2 + cols]
    return torch.randn(rows, cols, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)


def dense_tensor(gen, batch, length, cols, dtype, strided=False):
    """Random [batch, length, cols]; `strided`: a slice of a [batch, length + 2, cols + 3] tensor."""
    if strided:
        wide = torch.randn(batch, length + 2, cols + 3, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
        return wide[:, 1:1 + length, 3:3 + cols]
    return torch.randn(batch, length, cols, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)


def make_offsets(gen, batch, max_length, index_dtype, first=0):
    """Offsets of `batch` sequences with lengths in 0..max_length + 3 (0 and max_length + 3 among
    them once batch >= 2), starting at `first`."""
    lengths = torch.randint(0, max_length + 4, (batch,), generator=gen)
    if batch >= 2:
        lengths[0], lengths[-1] = max_length + 3, 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]) + first
    return offsets.to(index_dtype).to(DEVICE)


def poisoned(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def new_record():
    record = torch.zeros(common.ERROR_RECORD_WORDS, dtype=torch.int64)
    return record.pin_memory() if ON_GPU else record


def read_record(record):
    if ON_GPU:
        torch.cuda.synchronize()
    return record.tolist()


def expected_record(code, op, position, value, bound):
    return [1, code, op, position, value, bound, 0, 0]


def assert_close(out, ref, scale, dtype, what=""):
    """Elementwise |out - ref| <= TOL[dtype] * scale + the dtype's subnormal spacing (results that
    round to a subnormal lose relative precision); NaN in out fails."""
    out = out.detach().double().cpu()
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} vs {tuple(ref.shape)}"
    err = (out - ref).abs()
    bad = ~(err <= TOL[dtype] * scale + torch.finfo(dtype).tiny * torch.finfo(dtype).eps)
    assert not bad.any(), (f"{what}: {int(bad.sum())} bad of {bad.numel()}, first at {bad.nonzero()[0].tolist()}: "
                           f"{out[bad][0].item()} vs {ref[bad][0].item()}")


def bounds(offsets, total, max_length):
    """(start, n) per sequence: offsets clamped to [0, total], n = min(max(end - start, 0), max_length)."""
    offs = [min(max(v, 0), total) for v in offsets.tolist()]
    return [(offs[b], min(max(offs[b + 1] - offs[b], 0), max_length)) for b in range(len(offs) - 1)]


# ---------------------------------------------------------------- references (float64, plain torch)


def ref_jagged_dense(op, x, offsets, dense, max_length, padding_value, total, dim, magnitude=False):
    """The op in float64 on the given (low-precision) inputs; `magnitude`: the same on |inputs|
    (the error scale)."""
    f = (lambda t: t.double().cpu().abs()) if magnitude else (lambda t: t.double().cpu())
    x = f(x) if x is not None else None
    dense = f(dense) if dense is not None else None
    batch = offsets.numel() - 1
    seqs = bounds(offsets, total, max_length)
    if op == 0:
        out = torch.full((batch, max_length, dim), abs(padding_value) if magnitude else padding_value,
                         dtype=torch.float64)
    elif op == 1:
        out = torch.zeros(total, dim, dtype=torch.float64)
    elif op == 2:
        out = dense.clone()
    elif op == 3:
        out = x.clone()
    else:
        out = torch.zeros(total, dim, dtype=torch.float64)
    for b, (s, n) in enumerate(seqs):
        if op == 0:
            out[b, :n] = x[s:s + n]
        elif op == 1:
            out[s:s + n] = dense[b, :n]
        elif op == 2:
            out[b, :n] += x[s:s + n]
        elif op == 3:
            out[s:s + n] += dense[b, :n]
        else:
            out[s:s + n] = x[s:s + n] * dense[b, :n]
    return out


def ref_softmax(values, offsets, max_length, grad=None):
    """(expected, scale): softmax per sequence and column over its first min(len, max_length) rows, or
    its backward y * (g - sum(g * y)); 0 elsewhere."""
    v = values.double().cpu()
    out = torch.zeros_like(v)
    scale = torch.zeros_like(v)
    for s, n in bounds(offsets, v.size(0), max_length):
        if n == 0:
            continue
        block = v[s:s + n]
        if grad is None:
            out[s:s + n] = torch.softmax(block, dim=0)
            scale[s:s + n] = out[s:s + n].abs()
        else:
            g = grad.double().cpu()[s:s + n]
            dot = (g * block).sum(0, keepdim=True)
            out[s:s + n] = block * (g - dot)
            scale[s:s + n] = block.abs() * (g.abs() + (g * block).abs().sum(0, keepdim=True))
    return out, scale


def ref_index_select(values, input_offsets, output_offsets, indices, backward, num_rows, magnitude=False):
    """Forward: out [num_rows = output rows]; backward: values = grad, out [num_rows = input rows]."""
    v = values.double().cpu()
    if magnitude:
        v = v.abs()
    io, oo, idx = input_offsets.tolist(), output_offsets.tolist(), indices.tolist()
    batch = len(io) - 1
    out = torch.zeros(num_rows, v.size(1), dtype=torch.float64)
    for i, index in enumerate(idx):
        if not 0 <= index < batch:
            continue
        length = min(oo[i + 1] - oo[i], io[index + 1] - io[index])
        for j in range(length):
            if backward:
                out[io[index] + j] += v[oo[i] + j]
            else:
                out[oo[i] + j] = v[io[index] + j]
    return out


def ref_dense_bmm(x, offsets, y, max_length, magnitude=False):
    x, y = x.double().cpu(), y.double().cpu()
    if magnitude:
        x, y = x.abs(), y.abs()
    out = torch.zeros(x.size(0), y.size(2), dtype=torch.float64)
    for b, (s, n) in enumerate(bounds(offsets, x.size(0), max_length)):
        out[s:s + n] = x[s:s + n] @ y[b]
    return out


def ref_jagged_bmm(x, y, offsets, max_length, magnitude=False):
    x, y = x.double().cpu(), y.double().cpu()
    if magnitude:
        x, y = x.abs(), y.abs()
    batch = offsets.numel() - 1
    out = torch.zeros(batch, x.size(1), y.size(1), dtype=torch.float64)
    for b, (s, n) in enumerate(bounds(offsets, x.size(0), max_length)):
        out[b] = x[s:s + n].T @ y[s:s + n]
    return out


# ---------------------------------------------------------------- jagged_dense

# name: (B, max_length, D, offsets dtype, strided inputs, first offset, rows after offsets[B], config)
DENSE_CASES = {
    "no_sequences": (0, 3, 3, torch.int64, False, 2, 3, J(4, 4, 1)),
    "one_sequence_d1": (1, 4, 1, torch.int32, True, 2, 1, J(8, 1, 1)),
    "three_d8": (3, 2, 8, torch.int64, True, 0, 0, J(4, 8, 2)),
    "five_d33": (5, 4, 33, torch.int32, True, 3, 2, J(8, 16, 4)),
    "five_d3_max_length_0": (5, 0, 3, torch.int64, False, 1, 0, J(2, 4, 1)),
}


def dense_case(name, op, dtype):
    batch, max_length, dim, index_dtype, strided, first, after, config = DENSE_CASES[name]
    gen = _generator("dense", name, op, dtype)
    offsets = make_offsets(gen, batch, max_length, index_dtype, first)
    total = int(offsets[-1]) + after
    x = None if op == 1 else rows_tensor(gen, total, dim, dtype, strided)
    dense = None if op == 0 else dense_tensor(gen, batch, max_length, dim, dtype, strided)
    return x, offsets, dense, max_length, total, dim, config


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("op", range(5))
@pytest.mark.parametrize("name", list(DENSE_CASES))
def test_jagged_dense(name, op, dtype):
    x, offsets, dense, max_length, total, dim, config = dense_case(name, op, dtype)
    batch = offsets.numel() - 1
    out = poisoned((batch, max_length, dim) if op in (0, 2) else (total, dim), dtype)
    record = new_record() if (op + len(name)) % 2 else None  # with and without a record
    padding = -1.5
    got = tj.jagged_dense(op, x, offsets, dense, out, max_length, padding, config, record)
    assert got is out
    ref = ref_jagged_dense(op, x, offsets, dense, max_length, padding, total, dim)
    if op in (0, 1):  # copies: exact
        assert torch.equal(out.cpu(), ref.to(dtype)), f"op {op}"
    else:
        assert_close(out, ref, ref_jagged_dense(op, x, offsets, dense, max_length, padding, total, dim, True), dtype,
                     f"op {op}")
    if record is not None:
        assert read_record(record) == [0] * 8


@pytest.mark.parametrize("op", range(5))
def test_jagged_dense_chunked_grid(op, monkeypatch):
    """Grid dim 0 launched in chunks of 3 programs (program_base) gives the same output."""
    def chunks(n, device, num_warps):
        for base in range(0, n, 3):
            yield base, min(3, n - base)
    monkeypatch.setattr(tj, "grid_chunks", chunks)
    x, offsets, dense, max_length, total, dim, _ = dense_case("five_d33", op, torch.float32)
    batch = offsets.numel() - 1
    out = poisoned((batch, max_length, dim) if op in (0, 2) else (total, dim))
    tj.jagged_dense(op, x, offsets, dense, out, max_length, 0.25, J(2, 16, 1), new_record())
    ref = ref_jagged_dense(op, x, offsets, dense, max_length, 0.25, total, dim)
    assert_close(out, ref, ref_jagged_dense(op, x, offsets, dense, max_length, 0.25, total, dim, True),
                 torch.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * -0, on purpose
def test_jagged_dense_special_values():
    """NaN / inf / -0 in x and dense: copies keep them bit for bit, x is kept as is for rows
    without a position (op 3), and mul gives 0 there even for NaN x (op 4)."""
    offsets = torch.tensor([1, 3, 4], device=DEVICE)  # rows 0 and 4 have no position
    x = torch.tensor([[float("nan")], [-0.0], [float("inf")], [2.0], [float("-inf")]], device=DEVICE)
    dense = torch.tensor([[[1.0], [-0.0]], [[float("nan")], [5.0]]], device=DEVICE)
    config = J(4, 1, 1)
    out = tj.jagged_dense(0, x, offsets, None, poisoned((2, 2, 1)), 2, 7.0, config)
    torch.testing.assert_close(out, torch.tensor([[[-0.0], [float("inf")]], [[2.0], [7.0]]], device=DEVICE),
                               rtol=0, atol=0, equal_nan=True)
    assert torch.signbit(out[0, 0, 0])
    out = tj.jagged_dense(3, x, offsets, dense, poisoned((5, 1)), 2, 0.0, config)
    torch.testing.assert_close(out, torch.tensor([[float("nan")], [1.0], [float("inf")], [float("nan")],
                                                  [float("-inf")]], device=DEVICE), rtol=0, atol=0, equal_nan=True)
    out = tj.jagged_dense(4, x, offsets, dense, poisoned((5, 1)), 2, 0.0, config)
    torch.testing.assert_close(out, torch.tensor([[0.0], [-0.0], [float("nan")], [float("nan")], [0.0]],
                                                 device=DEVICE), rtol=0, atol=0, equal_nan=True)


# ---------------------------------------------------------------- softmax

# name: (B, max_length, D, offsets dtype, strided, first offset, rows after, config)
SOFTMAX_CASES = {
    "no_sequences": (0, 3, 3, torch.int32, False, 2, 2, J(4, 4, 1)),
    "one_sequence_d1": (1, 5, 1, torch.int64, True, 1, 2, J(2, 1, 1)),
    "three_d8": (3, 6, 8, torch.int32, True, 0, 0, J(4, 8, 2)),
    "five_d33": (5, 4, 33, torch.int64, True, 2, 3, J(2, 16, 4)),
}


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("name", list(SOFTMAX_CASES))
def test_jagged_softmax(name, dtype, backward):
    batch, max_length, dim, index_dtype, strided, first, after, config = SOFTMAX_CASES[name]
    gen = _generator("softmax", name, dtype, backward)
    offsets = make_offsets(gen, batch, max_length, index_dtype, first)
    total = int(offsets[-1]) + after
    values = rows_tensor(gen, total, dim, dtype, strided).mul_(3)  # in place: keeps the strided view
    if total > 2:
        values[1, 0] = float("-inf")  # a -inf entry contributes exp(-inf) = 0
    grad = None
    if backward:  # values: a forward output
        values = torch.softmax(values.double(), 0).to(dtype)
        grad = rows_tensor(gen, total, dim, dtype, strided)
    record = new_record() if backward or batch % 2 else None
    out = tj.jagged_softmax(values, offsets, max_length, poisoned((total, dim), dtype), config, grad, record)
    ref, scale = ref_softmax(values, offsets, max_length, grad)
    assert_close(out, ref, scale, dtype, "backward" if backward else "forward")
    if record is not None:
        assert read_record(record) == [0] * 8


# ---------------------------------------------------------------- index_select

# name: (lengths of the B input sequences, indices, D, values dtype-independent knobs: indices
#        dtype, strided, config)
INDEX_SELECT_CASES = {
    "no_sequences": ([], [], 3, torch.int64, False, J(4, 4, 1)),
    "one_sequence_d1": ([4], [0, 0], 1, torch.int32, True, J(2, 1, 1)),
    "three_d8_repeats": ([2, 0, 5], [2, 1, 0, 2], 8, torch.int64, True, J(4, 8, 2)),
    "five_d33": ([3, 1, 0, 6, 2], [4, 3, 3, 0, 2, 1], 33, torch.int32, False, J(2, 16, 4)),
}


def index_select_inputs(lengths, indices, index_dtype, first=0):
    lengths_t = torch.tensor(lengths, dtype=torch.int64)
    input_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths_t.cumsum(0)]) + first
    idx = torch.tensor(indices, dtype=torch.int64)
    valid = (idx >= 0) & (idx < len(lengths))
    out_lengths = torch.where(valid, lengths_t[idx.clamp(0, max(len(lengths) - 1, 0))] if lengths else idx * 0,
                              torch.full_like(idx, 2))  # a bad index: 2 output rows
    output_offsets = torch.cat([torch.zeros(1, dtype=torch.int64), out_lengths.cumsum(0)])
    return (input_offsets.to(DEVICE), output_offsets.to(DEVICE), idx.to(index_dtype).to(DEVICE),
            int(input_offsets[-1]), int(output_offsets[-1]))


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("name", list(INDEX_SELECT_CASES))
def test_jagged_index_select(name, dtype):
    lengths, indices, dim, index_dtype, strided, config = INDEX_SELECT_CASES[name]
    gen = _generator("index_select", name, dtype)
    first = 1 if len(lengths) > 2 else 0  # input rows before offsets[0]
    input_offsets, output_offsets, idx, input_end, output_rows = index_select_inputs(lengths, indices, index_dtype,
                                                                                    first)
    input_rows = input_end + 1  # and one after the last sequence
    values = rows_tensor(gen, input_rows, dim, dtype, strided)
    record = new_record()
    out = tj.jagged_index_select(values, input_offsets, output_offsets, idx, poisoned((output_rows, dim), dtype),
                                 False, config, record)
    ref = ref_index_select(values, input_offsets, output_offsets, idx, False, output_rows)
    assert torch.equal(out.cpu(), ref.to(dtype))
    assert read_record(record) == [0] * 8

    grad = rows_tensor(gen, output_rows, dim, dtype, strided)
    base = torch.randn(input_rows, dim, generator=gen).to(DEVICE)  # accumulated into, not overwritten
    out = tj.jagged_index_select(grad, input_offsets, output_offsets, idx, base.clone(), True,
                                 config if name != "five_d33" else J(4, 32, 1))
    ref = ref_index_select(grad, input_offsets, output_offsets, idx, True, input_rows)
    scale = ref_index_select(grad, input_offsets, output_offsets, idx, True, input_rows, magnitude=True)
    assert_close(out, ref + base.double().cpu(), scale + base.double().cpu().abs(), torch.float32, "backward")


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_jagged_index_select_bad_index(index_dtype):
    """An index outside [0, B): recorded (bound B); its output rows 0 (forward), skipped (backward)."""
    lengths = [2, 3, 1]
    config = J(2, 8, 2)
    for bad, position in ((-1, 1), (3, 2), (2**31 - 1, 0)):
        indices = [1, 0, 2]
        indices[position] = bad
        input_offsets, output_offsets, idx, input_rows, output_rows = index_select_inputs(lengths, indices,
                                                                                        index_dtype)
        values = rows_tensor(_generator("bad_index", bad), input_rows, 5, torch.float32)
        for backward in (False, True):
            record = new_record()
            src = values if not backward else rows_tensor(_generator("bad_grad", bad), output_rows, 5, torch.float32)
            out = poisoned((output_rows, 5)) if not backward else torch.zeros(input_rows, 5, device=DEVICE)
            tj.jagged_index_select(src, input_offsets, output_offsets, idx, out, backward, config, record)
            ref = ref_index_select(src, input_offsets, output_offsets, idx, backward, out.size(0))
            assert_close(out, ref, ref.abs() + 1, torch.float32, f"index {bad} backward {backward}")
            assert read_record(record) == expected_record(INDEX_OUT_OF_RANGE, OP_INDEX_SELECT, position, bad, 3)
    # No sequences at all: every index is bad; the checks still run with no output rows... and
    # with them.
    input_offsets, output_offsets, idx, _, output_rows = index_select_inputs([], [0], index_dtype)
    record = new_record()
    out = tj.jagged_index_select(torch.zeros(0, 4, device=DEVICE), input_offsets, output_offsets, idx,
                                 poisoned((output_rows, 4)), False, config, record)
    assert (out == 0).all() and read_record(record) == expected_record(INDEX_OUT_OF_RANGE, OP_INDEX_SELECT, 0, 0, 0)


# ---------------------------------------------------------------- bmm

# name: (B, max_length, offsets dtype, first offset, rows after, config)
BMM_CASES = {
    "no_sequences": (0, 4, torch.int64, 1, 2, G(16, 16, 16, 1, 4, 1, 0)),
    "one_sequence": (1, 20, torch.int32, 2, 1, G(16, 32, 16, 2, 2, 1, 1)),
    "three": (3, 5, torch.int64, 0, 0, G(32, 16, 32, 1, 4, 1, 0)),
    "five_persistent": (5, 18, torch.int32, 3, 2, G(16, 16, 16, 2, 4, 1, 1)),
}
# (K, N) per case: masked K, exact K, K = 0 (all rows 0); N below / across / at the block.
BMM_SIZES = {"no_sequences": (5, 3), "one_sequence": (33, 17), "three": (16, 1), "five_persistent": (0, 16)}
JAGGED_BMM_SIZES = {"no_sequences": (5, 3), "one_sequence": (33, 17), "three": (16, 1), "five_persistent": (17, 33)}


@pytest.mark.parametrize("dtype", DOT_DTYPES)
@pytest.mark.parametrize("name", list(BMM_CASES))
def test_jagged_dense_bmm(name, dtype):
    batch, max_length, index_dtype, first, after, config = BMM_CASES[name]
    k, n = BMM_SIZES[name]
    gen = _generator("dense_bmm", name, dtype)
    offsets = make_offsets(gen, batch, max_length, index_dtype, first)
    total = int(offsets[-1]) + after
    x = rows_tensor(gen, total, k, dtype, strided=True)
    # y [B, K, N] with N the slow dim (a transposed view) for odd cases.
    if batch % 2:
        y = torch.randn(batch, n, k, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE).transpose(1, 2)
    else:
        y = dense_tensor(gen, batch, k, n, dtype, strided=True)
    record = new_record()
    out = tj.jagged_dense_bmm(x, offsets, y, poisoned((total, n), dtype), max_length, config, record)
    assert_close(out, ref_dense_bmm(x, offsets, y, max_length), ref_dense_bmm(x, offsets, y, max_length, True),
                 dtype)
    assert read_record(record) == [0] * 8


@pytest.mark.parametrize("dtype", DOT_DTYPES)
@pytest.mark.parametrize("name", list(BMM_CASES))
def test_jagged_jagged_bmm(name, dtype):
    batch, max_length, index_dtype, first, after, config = BMM_CASES[name]
    m, n = JAGGED_BMM_SIZES[name]
    gen = _generator("jagged_bmm", name, dtype)
    offsets = make_offsets(gen, batch, max_length, index_dtype, first)
    total = int(offsets[-1]) + after
    x = rows_tensor(gen, total, m, dtype, strided=True)
    y = rows_tensor(gen, n, total, dtype).T if batch % 2 else rows_tensor(gen, total, n, dtype)  # column-major y
    record = new_record() if batch % 2 else None
    out = tj.jagged_jagged_bmm(x, y, offsets, poisoned((batch, m, n), dtype), max_length, config, record)
    assert_close(out, ref_jagged_bmm(x, y, offsets, max_length), ref_jagged_bmm(x, y, offsets, max_length, True),
                 dtype)
    if record is not None:
        assert read_record(record) == [0] * 8


def test_bmm_chunked_grid(monkeypatch):
    """One-tile-per-program launches in chunks of 2 programs give the same output."""
    def chunks(n, device, num_warps):
        for base in range(0, n, 2):
            yield base, min(2, n - base)
    monkeypatch.setattr(tj, "grid_chunks", chunks)
    gen = _generator("bmm_chunks")
    offsets = make_offsets(gen, 3, 20, torch.int64, 1)
    total = int(offsets[-1]) + 1
    x = rows_tensor(gen, total, 20, torch.float32)
    y = dense_tensor(gen, 3, 20, 17, torch.float32)
    config = G(16, 16, 16, 1, 4, 1, 0)
    out = tj.jagged_dense_bmm(x, offsets, y, poisoned((total, 17)), 20, config)
    assert_close(out, ref_dense_bmm(x, offsets, y, 20), ref_dense_bmm(x, offsets, y, 20, True), torch.float32)
    out = tj.jagged_jagged_bmm(x, x, offsets, poisoned((3, 20, 20)), 20, config)
    assert_close(out, ref_jagged_bmm(x, x, offsets, 20), ref_jagged_bmm(x, x, offsets, 20, True), torch.float32)


# ---------------------------------------------------------------- bad offsets: the record and the outputs

# 8 rows, 3 sequences. name: (offsets, expected (code, position, value, bound), outputs comparable
# to the clamped reference on every row: False where a row lies in two sequences)
BAD_OFFSETS = {
    "first_negative": ([-2, 3, 5, 8], (NEGATIVE_OFFSET, 0, -2, 0), True),
    "negative": ([0, -1, 5, 8], (NEGATIVE_OFFSET, 1, -1, 0), True),
    "decreasing": ([0, 5, 3, 8], (DECREASING_OFFSET, 2, 3, 0), False),
    "last_decreasing": ([2, 5, 7, 6], (DECREASING_OFFSET, 3, 6, 0), False),
    "past_end": ([0, 3, 5, 12], (OFFSET_PAST_END, 3, 12, 8), True),
}
BAD_TOTAL, BAD_MAX_LENGTH = 8, 4


def bad_offsets(name, index_dtype):
    offsets, expected, comparable = BAD_OFFSETS[name]
    return torch.tensor(offsets, dtype=index_dtype, device=DEVICE), expected, comparable


def check_bad(out, ref, scale, record, op, expected, comparable, what):
    if comparable:
        assert_close(out, ref, scale, torch.float32, what)
    else:  # every element still written
        assert not out.isnan().any(), what
    assert read_record(record) == expected_record(expected[0], op, *expected[1:]), what


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("name", list(BAD_OFFSETS))
def test_bad_offsets_jagged_dense(name, index_dtype):
    offsets, expected, comparable = bad_offsets(name, index_dtype)
    gen = _generator("bad_dense", name)
    x = rows_tensor(gen, BAD_TOTAL, 3, torch.float32)
    dense = dense_tensor(gen, 3, BAD_MAX_LENGTH, 3, torch.float32)
    for op in range(5):
        record = new_record()
        out = poisoned((3, BAD_MAX_LENGTH, 3) if op in (0, 2) else (BAD_TOTAL, 3))
        xo, do = (None if op == 1 else x), (None if op == 0 else dense)
        tj.jagged_dense(op, xo, offsets, do, out, BAD_MAX_LENGTH, 0.5, J(2, 4, 2), record)
        args = (op, xo, offsets, do, BAD_MAX_LENGTH, 0.5, BAD_TOTAL, 3)
        check_bad(out, ref_jagged_dense(*args), ref_jagged_dense(*args, magnitude=True), record, OP_OF[op], expected,
                  comparable or op in (0, 2), f"op {op}")


@pytest.mark.parametrize("name", list(BAD_OFFSETS))
def test_bad_offsets_softmax_and_bmm(name):
    offsets, expected, comparable = bad_offsets(name, torch.int64)
    gen = _generator("bad_softmax", name)
    values = rows_tensor(gen, BAD_TOTAL, 3, torch.float32)
    grad = rows_tensor(gen, BAD_TOTAL, 3, torch.float32)
    for g in (None, grad):
        record = new_record()
        out = tj.jagged_softmax(values, offsets, BAD_MAX_LENGTH, poisoned((BAD_TOTAL, 3)), J(2, 4, 1), g, record)
        ref, scale = ref_softmax(values, offsets, BAD_MAX_LENGTH, g)
        check_bad(out, ref, scale, record, OP_SOFTMAX, expected, comparable, f"softmax backward {g is not None}")
    config = G(16, 16, 16, 1, 4, 1, 1)
    y = dense_tensor(gen, 3, 3, 5, torch.float32)
    record = new_record()
    out = tj.jagged_dense_bmm(values, offsets, y, poisoned((BAD_TOTAL, 5)), BAD_MAX_LENGTH, config, record)
    check_bad(out, ref_dense_bmm(values, offsets, y, BAD_MAX_LENGTH),
              ref_dense_bmm(values, offsets, y, BAD_MAX_LENGTH, True), record, OP_BMM, expected, comparable,
              "dense_bmm")
    record = new_record()
    out = tj.jagged_jagged_bmm(values, grad, offsets, poisoned((3, 3, 3)), BAD_MAX_LENGTH, config, record)
    check_bad(out, ref_jagged_bmm(values, grad, offsets, BAD_MAX_LENGTH),
              ref_jagged_bmm(values, grad, offsets, BAD_MAX_LENGTH, True), record, OP_BMM, expected, True,
              "jagged_bmm")


def test_bad_offsets_checked_without_work():
    """Offsets are checked whatever the sizes: no sequence, max_length 0, D 0, N 0."""
    config, gconfig = J(2, 4, 1), G(16, 16, 16, 1, 4, 1, 0)
    only = torch.tensor([-3], device=DEVICE)  # B = 0
    record = new_record()
    tj.jagged_dense(1, None, only, torch.zeros(0, 2, 3, device=DEVICE), poisoned((4, 3)), 2, 0.0, config, record)
    assert read_record(record) == expected_record(NEGATIVE_OFFSET, OP_OF[1], 0, -3, 0)
    offsets = torch.tensor([0, 2, 9], device=DEVICE)  # past the 4 rows
    record = new_record()
    tj.jagged_dense(0, torch.zeros(4, 3, device=DEVICE), offsets, None, poisoned((2, 0, 3)), 0, 0.0, config, record)
    assert read_record(record) == expected_record(OFFSET_PAST_END, OP_OF[0], 2, 9, 4)
    record = new_record()
    tj.jagged_softmax(torch.zeros(4, 0, device=DEVICE), offsets, 3, poisoned((4, 0)), config, None, record)
    assert read_record(record) == expected_record(OFFSET_PAST_END, OP_SOFTMAX, 2, 9, 4)
    record = new_record()
    tj.jagged_dense_bmm(torch.zeros(4, 3, device=DEVICE), offsets, torch.zeros(2, 3, 0, device=DEVICE),
                        poisoned((4, 0)), 3, gconfig, record)
    assert read_record(record) == expected_record(OFFSET_PAST_END, OP_BMM, 2, 9, 4)
    record = new_record()
    tj.jagged_jagged_bmm(torch.zeros(4, 0, device=DEVICE), torch.zeros(4, 3, device=DEVICE), only,
                         poisoned((0, 0, 3)), 3, gconfig, record)
    assert read_record(record) == expected_record(NEGATIVE_OFFSET, OP_BMM, 0, -3, 0)
    for m, n in ((0, 3), (3, 0)):  # sequences with rows, nothing to multiply
        record = new_record()
        tj.jagged_jagged_bmm(torch.zeros(4, m, device=DEVICE), torch.zeros(4, n, device=DEVICE), offsets,
                             poisoned((2, m, n)), 3, gconfig, record)
        assert read_record(record) == expected_record(OFFSET_PAST_END, OP_BMM, 2, 9, 4)


def test_first_error_wins():
    """A later bad value leaves the record as it is; with several in one call one is recorded, whole."""
    config = J(2, 4, 1)
    x = torch.zeros(8, 3, device=DEVICE)
    record = new_record()
    offsets, expected, _ = bad_offsets("negative", torch.int64)
    tj.jagged_dense(3, x, offsets, torch.zeros(3, 2, 3, device=DEVICE), poisoned((8, 3)), 2, 0.0, config, record)
    first = expected_record(expected[0], OP_OF[3], *expected[1:])
    assert read_record(record) == first
    offsets, _, _ = bad_offsets("past_end", torch.int64)
    tj.jagged_softmax(x, offsets, 2, poisoned((8, 3)), config, None, record)
    assert read_record(record) == first
    record = new_record()
    several = torch.tensor([0, -1, 5, 3, 20], device=DEVICE)  # negative at 1, decreasing at 3, past end at 4
    tj.jagged_dense(4, x, several, torch.zeros(4, 2, 3, device=DEVICE), poisoned((8, 3)), 2, 0.0, config, record)
    assert read_record(record) in [expected_record(NEGATIVE_OFFSET, OP_OF[4], 1, -1, 0),
                                   expected_record(DECREASING_OFFSET, OP_OF[4], 3, 3, 0),
                                   expected_record(OFFSET_PAST_END, OP_OF[4], 4, 20, 8)]


# ---------------------------------------------------------------- configs and argument checks


def test_suggested_configs_valid():
    for config in tj.JAGGED_CONFIGS_NVIDIA + tj.JAGGED_CONFIGS_AMD:
        tj.validate_config(config)
    for config in tj.BMM_CONFIGS_NVIDIA + tj.BMM_CONFIGS_AMD:
        tj.validate_bmm_config(config)
    assert all(3 <= len(c) <= 6 for c in (tj.JAGGED_CONFIGS_NVIDIA, tj.JAGGED_CONFIGS_AMD, tj.BMM_CONFIGS_NVIDIA,
                                          tj.BMM_CONFIGS_AMD))


VENDOR = "amd" if torch.version.hip is not None else "nvidia"


@pytest.mark.parametrize("config", tj.JAGGED_CONFIGS_AMD if VENDOR == "amd" else tj.JAGGED_CONFIGS_NVIDIA, ids=str)
def test_suggested_jagged_configs_run(config):
    gen = _generator("suggested", str(config))
    offsets = make_offsets(gen, 3, 5, torch.int64, 1)
    total = int(offsets[-1]) + 1
    x = rows_tensor(gen, total, 3, torch.float16, strided=True)
    dense = dense_tensor(gen, 3, 5, 3, torch.float16)
    out = tj.jagged_dense(3, x, offsets, dense, poisoned((total, 3), torch.float16), 5, 0.0, config, new_record())
    args = (3, x, offsets, dense, 5, 0.0, total, 3)
    assert_close(out, ref_jagged_dense(*args), ref_jagged_dense(*args, magnitude=True), torch.float16)
    out = tj.jagged_softmax(x, offsets, 5, poisoned((total, 3), torch.float16), config, None, new_record())
    ref, scale = ref_softmax(x, offsets, 5)
    assert_close(out, ref, scale, torch.float16)


@pytest.mark.parametrize("config", tj.BMM_CONFIGS_AMD if VENDOR == "amd" else tj.BMM_CONFIGS_NVIDIA, ids=str)
def test_suggested_bmm_configs_run(config):
    gen = _generator("suggested_bmm", str(config))
    offsets = make_offsets(gen, 2, 6, torch.int32)
    total = int(offsets[-1])
    x = rows_tensor(gen, total, 20, torch.float16)
    y = dense_tensor(gen, 2, 20, 9, torch.float16)
    out = tj.jagged_dense_bmm(x, offsets, y, poisoned((total, 9), torch.float16), 6, config)
    assert_close(out, ref_dense_bmm(x, offsets, y, 6), ref_dense_bmm(x, offsets, y, 6, True), torch.float16)
    out = tj.jagged_jagged_bmm(x, x[:, :9], offsets, poisoned((2, 20, 9), torch.float16), 6, config)
    assert_close(out, ref_jagged_bmm(x, x[:, :9], offsets, 6), ref_jagged_bmm(x, x[:, :9], offsets, 6, True),
                 torch.float16)


@pytest.mark.parametrize("config,match", [
    (J(3, 16, 1), "block_rows"), (J(2048, 1, 1), "block_rows"), (J(0, 16, 1), "block_rows"),
    (J(4, 24, 1), "block_d"), (J(4, 2048, 1), "block_d"), (J(32, 1024, 4), "block_rows \\* block_d"),
    (J(4, 16, 3), "num_warps"), (J(4, 16, 32), "num_warps"), (G(16, 16, 16, 1, 4, 1, 0), "TritonJaggedConfig"),
])
def test_invalid_jagged_config(config, match):
    x, offsets = torch.zeros(4, 3, device=DEVICE), torch.tensor([0, 4], device=DEVICE)
    with pytest.raises(ValueError, match=match):
        tj.jagged_dense(0, x, offsets, None, poisoned((1, 4, 3)), 4, 0.0, config)
    with pytest.raises(ValueError, match=match):
        tj.jagged_softmax(x, offsets, 4, poisoned((4, 3)), config)
    with pytest.raises(ValueError, match=match):
        tj.jagged_index_select(x, offsets, offsets[:1], offsets[:0], poisoned((0, 3)), False, config)


@pytest.mark.parametrize("config,match", [
    (G(8, 16, 16, 1, 4, 1, 0), "block_m"), (G(16, 512, 16, 1, 4, 1, 0), "block_n"),
    (G(16, 16, 8, 1, 4, 1, 0), "block_k"), (G(16, 16, 256, 1, 4, 1, 0), "block_k"),
    (G(16, 16, 16, 0, 4, 1, 0), "group_m"), (G(16, 16, 16, 1, 3, 1, 0), "num_warps"),
    (G(16, 16, 16, 1, 4, 0, 0), "num_stages"), (G(16, 16, 16, 1, 4, 1, 2), "persistent"),
    (J(16, 16, 4), "TritonGemmConfig"),
])
def test_invalid_bmm_config(config, match):
    x, offsets = torch.zeros(4, 16, device=DEVICE), torch.tensor([0, 4], device=DEVICE)
    with pytest.raises(ValueError, match=match):
        tj.jagged_dense_bmm(x, offsets, torch.zeros(1, 16, 16, device=DEVICE), poisoned((4, 16)), 4, config)
    with pytest.raises(ValueError, match=match):
        tj.jagged_jagged_bmm(x, x, offsets, poisoned((1, 16, 16)), 4, config)


def test_invalid_arguments():
    config, gconfig = J(4, 4, 1), G(16, 16, 16, 1, 4, 1, 0)
    x = torch.zeros(6, 3, device=DEVICE)
    offsets = torch.tensor([0, 2, 6], device=DEVICE)
    dense = torch.zeros(2, 3, 3, device=DEVICE)
    bad_calls = {
        "op": lambda: tj.jagged_dense(5, x, offsets, dense, poisoned((6, 3)), 3, 0.0, config),
        "x for op 1": lambda: tj.jagged_dense(1, x, offsets, dense, poisoned((6, 3)), 3, 0.0, config),
        "no dense for op 2": lambda: tj.jagged_dense(2, x, offsets, None, poisoned((2, 3, 3)), 3, 0.0, config),
        "max_length": lambda: tj.jagged_dense(0, x, offsets, None, poisoned((2, 3, 3)), -1, 0.0, config),
        "float offsets": lambda: tj.jagged_dense(0, x, offsets.float(), None, poisoned((2, 3, 3)), 3, 0.0, config),
        "empty offsets": lambda: tj.jagged_dense(0, x, offsets[:0], None, poisoned((0, 3, 3)), 3, 0.0, config),
        "strided offsets": lambda: tj.jagged_dense(0, x, torch.tensor([0, 9, 2, 9, 6], device=DEVICE)[::2], None,
                                                   poisoned((2, 3, 3)), 3, 0.0, config),
        "column stride": lambda: tj.jagged_dense(0, torch.zeros(3, 6, device=DEVICE).T, offsets, None,
                                                 poisoned((2, 3, 3)), 3, 0.0, config),
        "dense shape": lambda: tj.jagged_dense(2, x, offsets, dense[:, :2], poisoned((2, 3, 3)), 3, 0.0, config),
        "dtype mix": lambda: tj.jagged_dense(3, x, offsets, dense.half(), poisoned((6, 3)), 3, 0.0, config),
        "out shape": lambda: tj.jagged_dense(0, x, offsets, None, poisoned((2, 4, 3)), 3, 0.0, config),
        "out dtype": lambda: tj.jagged_dense(0, x, offsets, None, poisoned((2, 3, 3), torch.float16), 3, 0.0, config),
        "out strided": lambda: tj.jagged_dense(3, x, offsets, dense, poisoned((6, 4))[:, :3], 3, 0.0, config),
        "fp64": lambda: tj.jagged_dense(0, x.double(), offsets, None, poisoned((2, 3, 3), torch.float64), 3, 0.0,
                                        config),
        "errors shape": lambda: tj.jagged_dense(0, x, offsets, None, poisoned((2, 3, 3)), 3, 0.0, config,
                                                torch.zeros(7, dtype=torch.int64)),
        "errors dtype": lambda: tj.jagged_dense(0, x, offsets, None, poisoned((2, 3, 3)), 3, 0.0, config,
                                                torch.zeros(8, dtype=torch.int32)),
        "softmax grad shape": lambda: tj.jagged_softmax(x, offsets, 3, poisoned((6, 3)), config, x[:5]),
        "softmax out": lambda: tj.jagged_softmax(x, offsets, 3, poisoned((6, 2)), config),
        "index_select output_offsets": lambda: tj.jagged_index_select(
            x, offsets, offsets[:2], offsets[:2], poisoned((6, 3)), False, config),
        "index_select backward out dtype": lambda: tj.jagged_index_select(
            x, offsets, offsets, offsets[:2], poisoned((6, 3), torch.float16), True, config),
        "index_select backward flag": lambda: tj.jagged_index_select(
            x, offsets, offsets, offsets[:2], poisoned((6, 3)), 1, config),
        "dense_bmm y batch": lambda: tj.jagged_dense_bmm(x, offsets, torch.zeros(3, 3, 4, device=DEVICE),
                                                         poisoned((6, 4)), 3, gconfig),
        "dense_bmm out": lambda: tj.jagged_dense_bmm(x, offsets, torch.zeros(2, 3, 4, device=DEVICE),
                                                     poisoned((6, 5)), 3, gconfig),
        "jagged_bmm y rows": lambda: tj.jagged_jagged_bmm(x, x[:5], offsets, poisoned((2, 3, 3)), 3, gconfig),
        "jagged_bmm out dtype": lambda: tj.jagged_jagged_bmm(x, x, offsets, poisoned((2, 3, 3), torch.float16), 3,
                                                             gconfig),
    }
    for what, call in bad_calls.items():
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"{what}: no ValueError")


# ---------------------------------------------------------------- GPU: larger shapes, vendor configs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_gpu_memory_kernels_large(dtype):
    configs = tj.JAGGED_CONFIGS_AMD if VENDOR == "amd" else tj.JAGGED_CONFIGS_NVIDIA
    gen = _generator("gpu_large", dtype)
    batch, max_length = 300, 96
    for dim in (1, 7, 128, 300):
        offsets = make_offsets(gen, batch, max_length, torch.int64, 5)
        total = int(offsets[-1]) + 7
        x = rows_tensor(gen, total, dim, dtype, strided=True)
        dense = dense_tensor(gen, batch, max_length, dim, dtype, strided=True)
        for config in configs:
            record = new_record()
            for op in range(5):
                xo, do = (None if op == 1 else x), (None if op == 0 else dense)
                out = poisoned((batch, max_length, dim) if op in (0, 2) else (total, dim), dtype)
                tj.jagged_dense(op, xo, offsets, do, out, max_length, -2.0, config, record)
                args = (op, xo, offsets, do, max_length, -2.0, total, dim)
                assert_close(out, ref_jagged_dense(*args), ref_jagged_dense(*args, magnitude=True), dtype,
                             f"op {op} D {dim} {config}")
            out = tj.jagged_softmax(x, offsets, max_length, poisoned((total, dim), dtype), config, None, record)
            ref, scale = ref_softmax(x, offsets, max_length)
            assert_close(out, ref, scale, dtype, f"softmax D {dim} {config}")
            assert read_record(record) == [0] * 8


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_gpu_bmm_large(dtype):
    configs = tj.BMM_CONFIGS_AMD if VENDOR == "amd" else tj.BMM_CONFIGS_NVIDIA
    gen = _generator("gpu_bmm", dtype)
    batch, max_length, k, n = 40, 200, 96, 136
    offsets = make_offsets(gen, batch, max_length, torch.int32, 3)
    total = int(offsets[-1]) + 2
    x = rows_tensor(gen, total, k, dtype)
    y = dense_tensor(gen, batch, k, n, dtype)
    y2 = rows_tensor(gen, total, n, dtype)
    for config in configs:
        record = new_record()
        out = tj.jagged_dense_bmm(x, offsets, y, poisoned((total, n), dtype), max_length, config, record)
        assert_close(out, ref_dense_bmm(x, offsets, y, max_length), ref_dense_bmm(x, offsets, y, max_length, True),
                     dtype, f"dense_bmm {config}")
        out = tj.jagged_jagged_bmm(x, y2, offsets, poisoned((batch, k, n), dtype), max_length, config, record)
        assert_close(out, ref_jagged_bmm(x, y2, offsets, max_length),
                     ref_jagged_bmm(x, y2, offsets, max_length, True), dtype, f"jagged_bmm {config}")
        assert read_record(record) == [0] * 8


def test_the_model_offers_the_suggested_configs():
    from mymetaops.model import jagged as jm
    for vendor in ("nvidia", "amd"):
        suffix = vendor.upper()
        memory = [(c.block_rows, c.block_d, c.num_warps) for c in getattr(tj, f"JAGGED_CONFIGS_{suffix}")]
        assert list(jm.TRITON_CONFIGS[vendor]) == memory
        bmm = [tuple(dataclasses.astuple(c)) for c in getattr(tj, f"BMM_CONFIGS_{suffix}")]
        assert list(jm.BMM_TRITON_CONFIGS[vendor]) == bmm
