"""Triton embedding_bag launchers against a float64 reference, and the error record they write.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (conftest.py sets it before
triton is imported), on GPU tensors otherwise. Needs only the Triton modules, not the extension.
"""
import zlib

import pytest
import torch
from embedding_bag_cases import INDEX_DTYPES, TABLE_DTYPES, assert_close, make_case, reference

from mymetaops.configs import TritonEmbeddingBagConfig as Config
from mymetaops.triton import common
from mymetaops.triton import embedding_bag as eb

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# One config per tested dim keeps the interpreter run short while covering block_l = 1, a partial
# column block, several column blocks per row, and both reductions (one warp: each step;
# several: once at the end).
CONFIG_FOR_DIM = {1: Config(1, 32, 1), 3: Config(4, 16, 1), 127: Config(8, 128, 2), 130: Config(16, 64, 8)}
OP_FORWARD, OP_PSW_BACKWARD = 1, 3  # ErrorOp of errors.h


# ---------------------------------------------------------------- inputs and references


def _generator(*case) -> torch.Generator:
    """Fresh generator seeded from the test case (reproducible, unlike hash() of strings)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def _bag_bounds(offsets: torch.Tensor, num_indices: int, include_last_offset: bool):
    """Clamped [start, end) of every bag, as the contract states."""
    offs = offsets.tolist() + ([] if include_last_offset else [num_indices])
    for b in range(len(offs) - 1):
        start = min(max(offs[b], 0), num_indices)
        yield b, start, min(max(offs[b + 1], start), num_indices)


def _is_kept(row: int, padding_idx: int) -> bool:
    return padding_idx < 0 or row != padding_idx


def tensor(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEVICE)


def make_table(gen, num_rows, dim, dtype, strided=False):
    """Random table; `strided` makes it a column slice of a wider one (row stride > dim)."""
    if strided:
        wide = torch.randn(num_rows, dim + 7, generator=gen, dtype=torch.float64)
        return wide.to(dtype)[:, 3:3 + dim].to(DEVICE)
    return torch.randn(num_rows, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)


def make_bags(gen, num_rows, num_bags, max_len, index_dtype, include_last_offset, padding_idx=-1):
    """indices and offsets in the requested form (every 5th bag empty), padding_idx sprinkled in."""
    lengths = torch.randint(0, max_len + 1, (num_bags,), generator=gen)
    lengths[::5] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    indices = torch.randint(0, num_rows, (int(offsets[-1]),), generator=gen)
    if padding_idx >= 0:
        indices[torch.rand(indices.shape, generator=gen) < 0.2] = padding_idx
    offsets = offsets if include_last_offset else offsets[:-1]
    return indices.to(index_dtype).to(DEVICE), offsets.to(index_dtype).to(DEVICE)


def ref_forward(weight, indices, offsets, mode, psw, padding_idx, include_last_offset, magnitude=False):
    """float64 pooling, NaN for a bag with an out-of-range row; `magnitude` pools |terms| instead
    (the error scale)."""
    w = weight.double().cpu()
    idx = indices.tolist()
    scale = psw.double().cpu() if psw is not None else None
    num_bags = offsets.numel() - (1 if include_last_offset else 0)
    out = torch.zeros(num_bags, weight.size(1), dtype=torch.float64)
    for b, start, end in _bag_bounds(offsets, len(idx), include_last_offset):
        kept = [p for p in range(start, end) if _is_kept(idx[p], padding_idx)]
        if any(not 0 <= idx[p] < w.size(0) for p in kept):
            out[b] = float("nan")
            continue
        for p in kept:
            term = w[idx[p]] * (scale[p] if scale is not None else 1.0)
            out[b] += term.abs() if magnitude else term
        if mode == 1 and kept:
            out[b] /= len(kept)
    return out


def ref_psw_backward(grad_output, weight, indices, offsets, padding_idx, include_last_offset, magnitude=False):
    g, w, idx = grad_output.double().cpu(), weight.double().cpu(), indices.tolist()
    out = torch.zeros(len(idx), dtype=torch.float64)
    for b, start, end in _bag_bounds(offsets, len(idx), include_last_offset):
        for p in range(start, end):
            if _is_kept(idx[p], padding_idx) and 0 <= idx[p] < w.size(0):
                terms = g[b] * w[idx[p]]
                out[p] = (terms.abs() if magnitude else terms).sum()
    return out


def make_plan(indices, offsets, num_rows, mode, psw, padding_idx, include_last_offset, marker_gap=0):
    """The row-sorted backward plan (embedding_bag.h): padding / out-of-range / outside-every-bag
    positions get a marker row >= num_rows (num_rows + marker_gap) and sort last."""
    idx = indices.tolist()
    rows = [num_rows + marker_gap] * len(idx)
    bags = [0] * len(idx)
    scales = [0.0] * len(idx)
    for b, start, end in _bag_bounds(offsets, len(idx), include_last_offset):
        kept = [p for p in range(start, end) if _is_kept(idx[p], padding_idx) and 0 <= idx[p] < num_rows]
        for p in kept:
            rows[p], bags[p] = idx[p], b
            scales[p] = float(psw[p]) if psw is not None else (1.0 / len(kept) if mode == 1 else 1.0)
    order = torch.tensor(rows).argsort(stable=True)
    return (torch.tensor(rows)[order].to(indices.dtype).to(DEVICE), torch.tensor(bags)[order].to(DEVICE),
            torch.tensor(scales, dtype=torch.float32)[order].to(DEVICE))


def ref_backward(grad_output, sorted_rows, sorted_bags, sorted_scales, num_rows, magnitude=False):
    """float64 grad_weight; positions with a marker row or a bag outside grad_output add nothing."""
    g = grad_output.double().cpu()
    rows, bags = sorted_rows.cpu().long(), sorted_bags.cpu()
    scales = torch.ones(rows.numel(), dtype=torch.float64) if sorted_scales is None else sorted_scales.double().cpu()
    valid = (rows < num_rows) & (bags >= 0) & (bags < g.size(0))
    terms = g[bags[valid]] * scales[valid, None]
    out = torch.zeros(num_rows, g.size(1), dtype=torch.float64)
    return out.index_add_(0, rows[valid], terms.abs() if magnitude else terms)


def assert_matches(out, ref, magnitude, dtype, what=""):
    """NaN exactly where the reference is NaN, elsewhere within the tolerance of the magnitude."""
    out = out.cpu().reshape(ref.shape)
    nan = ref.isnan()
    assert torch.equal(out.isnan(), nan), \
        f"{what}: NaN at {out.isnan().nonzero().tolist()}, expected {nan.nonzero().tolist()}"
    assert_close(out[~nan], ref[~nan], magnitude[~nan], dtype, what)


def new_record():
    """A cleared error record where the kernels can write it: pinned host memory on a GPU."""
    record = torch.zeros(common.ERROR_RECORD_WORDS, dtype=torch.int64)
    return record.pin_memory() if DEVICE.type == "cuda" else record


def read_record(record):
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    return record.tolist()


def expected_record(code, op, position, value, bound):
    return [1, code, op, position, value, bound, 0, 0]


# ---------------------------------------------------------------- forward

FORWARD_VARIANTS = {  # name: (mode, per-sample weights, padding_idx, strided table)
    "sum": (0, False, -1, False),
    "mean": (1, False, -1, False),
    "psw": (0, True, -1, False),
    "mean_padding": (1, False, 5, False),
    "psw_padding_strided": (0, True, 0, True),
}


@pytest.mark.parametrize("dim", list(CONFIG_FOR_DIM))
@pytest.mark.parametrize("variant", list(FORWARD_VARIANTS))
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_forward(dtype, variant, dim):
    mode, with_psw, padding_idx, strided = FORWARD_VARIANTS[variant]
    # Alternating, so that both index dtypes and both offsets forms are covered per dtype and dim.
    index_dtype = INDEX_DTYPES[(dim + len(variant)) % 2]
    include_last_offset = (dim + len(variant) + TABLE_DTYPES.index(dtype)) % 2 == 0
    gen = _generator("fwd", dtype, index_dtype, variant, dim)
    num_rows, num_bags = 23, 12
    weight = make_table(gen, num_rows, dim, dtype, strided)
    indices, offsets = make_bags(gen, num_rows, num_bags, 40, index_dtype, include_last_offset, padding_idx)
    psw = torch.randn(indices.numel(), generator=gen).to(dtype).to(DEVICE) if with_psw else None
    torch.full((num_bags * dim,), float("nan"), dtype=dtype, device=DEVICE)  # an unwritten output shows NaN
    record = new_record()
    out = eb.embedding_bag_forward(weight, indices, offsets, mode, psw, padding_idx, include_last_offset,
                                   CONFIG_FOR_DIM[dim], record)
    assert out.shape == (num_bags, dim) and out.dtype == dtype
    args = (weight, indices, offsets, mode, psw, padding_idx, include_last_offset)
    assert_matches(out, ref_forward(*args), ref_forward(*args, magnitude=True), dtype)
    assert read_record(record) == [0] * 8


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("mean", False), ("sum", True)])
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_offsets_forms_agree(dtype, mode, weighted):
    """torch's offsets (num_bags, the last bag ending at num_indices) and FBGEMM's (num_bags + 1)
    give identical results, matching the shared float64 reference (forward and both gradients)."""
    index_dtype = INDEX_DTYPES[TABLE_DTYPES.index(dtype) % 2]
    seed = zlib.crc32(repr(("forms", dtype, mode, weighted)).encode())
    case = make_case(seed, num_rows=17, dim=130, bag_sizes=[3, 0, 21, 1, 0, 9, 40], dtype=dtype,
                     index_dtype=index_dtype, mode=mode, weighted=weighted, padding=True).to(DEVICE)
    num_rows, num_bags = case.weight.shape[0], case.offsets.numel()
    padding_idx = case.padding_idx % num_rows
    mode_id = 1 if mode == "mean" else 0
    psw = case.per_sample_weights
    fbgemm_offsets = torch.cat([case.offsets, tensor([case.input.numel()], index_dtype)])
    grad_output = torch.randn(num_bags, 130, generator=_generator("forms_grad", seed)).to(dtype).to(DEVICE)
    ref_out, ref_grad_weight, ref_grad_psw = reference(case, grad_output)
    scales = reference(case, grad_output, absolute=True)
    config = Config(8, 64, 4)

    outs = [eb.embedding_bag_forward(case.weight, case.input, offsets, mode_id, psw, padding_idx, last, config)
            for offsets, last in ((case.offsets, False), (fbgemm_offsets, True))]
    assert torch.equal(outs[0], outs[1])
    assert_close(outs[0], ref_out, scales[0], dtype, "forward")

    plan = make_plan(case.input, case.offsets, num_rows, mode_id, psw, padding_idx, False)
    grad_weight = eb.embedding_bag_backward(grad_output, *plan, num_rows, config)
    assert_close(grad_weight, ref_grad_weight, scales[1], dtype, "grad_weight")

    if weighted:
        grads = [eb.embedding_bag_per_sample_weights_backward(grad_output, case.weight, case.input, offsets,
                                                              padding_idx, last, config)
                 for offsets, last in ((case.offsets, False), (fbgemm_offsets, True))]
        assert torch.equal(grads[0], grads[1])
        assert_close(grads[0], ref_grad_psw, scales[2], dtype, "grad_per_sample_weights")


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_forward_one_row_table_and_empty_inputs(dtype, include_last_offset):
    gen = _generator("one_row", dtype, include_last_offset)
    weight = make_table(gen, 1, 33, dtype, strided=True)
    indices, offsets = make_bags(gen, 1, 9, 50, torch.int64, include_last_offset)
    config = Config(8, 16, 2)
    for mode in (0, 1):
        out = eb.embedding_bag_forward(weight, indices, offsets, mode, None, -1, include_last_offset, config)
        args = (weight, indices, offsets, mode, None, -1, include_last_offset)
        assert_matches(out, ref_forward(*args), ref_forward(*args, magnitude=True), dtype)
    no_indices = tensor([])
    # Bags but no indices: all empty, zero in both modes.
    for mode in (0, 1):
        out = eb.embedding_bag_forward(weight, no_indices, tensor([0, 0, 0, 0][:4 if include_last_offset else 3]),
                                       mode, None, -1, include_last_offset, config)
        assert out.shape == (3, 33) and (out == 0).all()
    # No bags.
    out = eb.embedding_bag_forward(weight, no_indices, tensor([0][:1 if include_last_offset else 0]), 0, None, -1,
                                   include_last_offset, config)
    assert out.shape == (0, 33)
    # dim 0: an empty result, but the values are still checked.
    record = new_record()
    out = eb.embedding_bag_forward(weight[:, :0], tensor([0, 5]), tensor([0, 2][:2 if include_last_offset else 1]),
                                   0, None, -1, include_last_offset, config, record)
    assert out.shape == (1, 0) and read_record(record) == expected_record(1, OP_FORWARD, 1, 5, 1)


# ---------------------------------------------------------------- bad values: outputs and the error record

# 8 indices into a 10-row table with padding_idx 3; offsets [0, 3, 5] (torch form) unless given.
# name: (changes to the indices {position: value}, offsets, include_last_offset,
#        expected (code, position, value, bound) or None for no error)
BAD_VALUES = {
    "index_negative": ({4: -1}, [0, 3, 5], False, (1, 4, -1, 10)),
    "index_past_table": ({6: 10}, [0, 3, 5], False, (1, 6, 10, 10)),
    "index_int32_max": ({0: 2**31 - 1}, [0, 3, 5], False, (1, 0, 2**31 - 1, 10)),
    "index_in_last_bag_fbgemm": ({7: 12}, [0, 3, 5, 8], True, (1, 7, 12, 10)),
    "index_outside_every_bag": ({7: -5}, [0, 3, 5, 7], True, None),
    "first_offset_negative": ({}, [-2, 3, 5], False, (2, 0, -2, 0)),
    "offset_negative": ({}, [0, -1, 5], False, (2, 1, -1, 0)),
    "last_offset_negative_fbgemm": ({}, [0, 3, -4], True, (2, 2, -4, 0)),
    "offset_decreasing": ({}, [0, 5, 3, 3], True, (3, 2, 3, 0)),  # no position in two bags
    "last_offset_decreasing_fbgemm": ({}, [0, 3, 5, 4], True, (3, 3, 4, 0)),
    "offset_past_end": ({}, [0, 3, 9], False, (4, 2, 9, 8)),
    "last_offset_past_end_fbgemm": ({}, [0, 3, 5, 12], True, (4, 3, 12, 8)),
}
BAD_NUM_ROWS, BAD_PADDING_IDX = 10, 3


def bad_input(name, index_dtype):
    changes, offsets, include_last_offset, expected = BAD_VALUES[name]
    rows = [1, 3, 2, 4, 5, 6, 7, 8]  # one padding entry in bag 0
    for position, value in changes.items():
        rows[position] = value
    return tensor(rows, index_dtype), tensor(offsets, index_dtype), include_last_offset, expected


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_bad_values_recorded(name, index_dtype):
    """Each kind of bad value: the record holds its code, op, position, value and bound; the
    outputs are the spec's (NaN bag in the forward, skipped in the backward, offsets clamped)."""
    indices, offsets, include_last_offset, expected = bad_input(name, index_dtype)
    gen = _generator("bad", name, index_dtype)
    weight = make_table(gen, BAD_NUM_ROWS, 20, torch.float32)
    num_bags = offsets.numel() - include_last_offset
    grad_output = torch.randn(num_bags, 20, generator=gen).to(DEVICE)
    config = Config(2, 16, 4)
    for mode in (0, 1):
        record = new_record()
        args = (weight, indices, offsets, mode, None, BAD_PADDING_IDX, include_last_offset)
        out = eb.embedding_bag_forward(*args, config, record)
        assert_matches(out, ref_forward(*args), ref_forward(*args, magnitude=True), torch.float32, f"mode {mode}")
        assert read_record(record) == ([0] * 8 if expected is None else expected_record(expected[0], OP_FORWARD,
                                                                                       *expected[1:]))
    record = new_record()
    args = (grad_output, weight, indices, offsets, BAD_PADDING_IDX, include_last_offset)
    grad_psw = eb.embedding_bag_per_sample_weights_backward(*args, config, record)
    assert_close(grad_psw, ref_psw_backward(*args), ref_psw_backward(*args, magnitude=True), torch.float32)
    assert read_record(record) == ([0] * 8 if expected is None else expected_record(expected[0], OP_PSW_BACKWARD,
                                                                                   *expected[1:]))


# FBGEMM-form bags [0, 2), [2, 2), [2, 9), [9, 12): bag 0 holds index -1, bag 2 indices 10 and 50,
# bag 3 ends past the 9 indices. No position is in two bags (their psw gradients would race).
def several_bad():
    return tensor([1, -1, 2, 10, 4, 5, 6, 7, 50]), tensor([0, 2, 2, 9, 12])


SEVERAL_BAD_EXPECTED = [(1, 1, -1, 10), (1, 3, 10, 10), (4, 4, 12, 9)]  # each bag's first


def test_first_error_wins():
    weight = make_table(_generator("first"), BAD_NUM_ROWS, 20, torch.float32)
    config = Config(2, 16, 4)
    record = new_record()
    indices, offsets, last, expected = bad_input("index_negative", torch.int64)
    eb.embedding_bag_forward(weight, indices, offsets, 0, None, BAD_PADDING_IDX, last, config, record)
    first = expected_record(expected[0], OP_FORWARD, *expected[1:])
    assert read_record(record) == first
    # A later bad value, of another kind and op, leaves the record as it is.
    indices, offsets, last, _ = bad_input("offset_decreasing", torch.int64)
    grad_output = torch.zeros(offsets.numel() - last, 20, device=DEVICE)
    eb.embedding_bag_per_sample_weights_backward(grad_output, weight, indices, offsets, BAD_PADDING_IDX, last,
                                                 config, record)
    assert read_record(record) == first
    # Several bad values in one call: exactly one of them is recorded, whole.
    record = new_record()
    eb.embedding_bag_forward(weight, *several_bad(), 0, None, -1, True, config, record)
    candidates = [expected_record(code, OP_FORWARD, *rest) for code, *rest in SEVERAL_BAD_EXPECTED]
    assert read_record(record) in candidates


def test_without_record_same_outputs():
    """errors=None: the kernels compiled without the record give the same outputs on bad input."""
    gen = _generator("no_record")
    weight = make_table(gen, BAD_NUM_ROWS, 20, torch.float32)
    indices, offsets = several_bad()
    grad_output = torch.randn(4, 20, generator=gen).to(DEVICE)
    config = Config(4, 16, 1)
    for mode in (0, 1):
        args = (weight, indices, offsets, mode, None, BAD_PADDING_IDX, True)
        out = eb.embedding_bag_forward(*args, config)
        torch.testing.assert_close(out, eb.embedding_bag_forward(*args, config, new_record()), rtol=0, atol=0,
                                   equal_nan=True)
        assert_matches(out, ref_forward(*args), ref_forward(*args, magnitude=True), torch.float32)
    args = (grad_output, weight, indices, offsets, BAD_PADDING_IDX, True)
    assert torch.equal(eb.embedding_bag_per_sample_weights_backward(*args, config),
                       eb.embedding_bag_per_sample_weights_backward(*args, config, new_record()))


# ---------------------------------------------------------------- weight backward

BACKWARD_VARIANTS = {  # name: (mode, per-sample weights, padding_idx, pass scales)
    "sum_no_scales": (0, False, -1, False),
    "mean": (1, False, 2, True),
    "psw": (0, True, -1, True),
}


@pytest.mark.parametrize("dim", list(CONFIG_FOR_DIM))
@pytest.mark.parametrize("variant", list(BACKWARD_VARIANTS))
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_backward(dtype, variant, dim):
    mode, with_psw, padding_idx, pass_scales = BACKWARD_VARIANTS[variant]
    index_dtype = INDEX_DTYPES[(dim + len(variant)) % 2]
    gen = _generator("bwd", dtype, index_dtype, variant, dim)
    num_rows, num_bags = 17, 10  # few rows: runs longer than block_l
    indices, offsets = make_bags(gen, num_rows, num_bags, 50, index_dtype, True, padding_idx)
    psw = torch.randn(indices.numel(), generator=gen) if with_psw else None
    plan = make_plan(indices, offsets, num_rows, mode, psw, padding_idx, True, marker_gap=dim % 3)
    scales = plan[2] if pass_scales else None
    grad_output = torch.randn(num_bags, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
    out = eb.embedding_bag_backward(grad_output, plan[0], plan[1], scales, num_rows, CONFIG_FOR_DIM[dim])
    assert out.shape == (num_rows, dim) and out.dtype == dtype
    assert_close(out, ref_backward(grad_output, plan[0], plan[1], scales, num_rows),
                 ref_backward(grad_output, plan[0], plan[1], scales, num_rows, magnitude=True), dtype)


@pytest.mark.parametrize("block_l,num_warps", [(1, 4), (4, 1), (8, 4)])
def test_backward_runs_across_blocks_and_deterministic(block_l, num_warps):
    """Runs of length k * block_l (the walk reads one block past the run), block_l + 1, and a run
    ending exactly at the last position; bags outside grad_output (-1, 9, huge) are skipped."""
    gen = _generator("runs", block_l, num_warps)
    num_rows, dim = 6, 40
    lengths = {0: 2 * block_l, 1: block_l + 1, 3: 1, 5: 3 * block_l}
    rows = torch.cat([torch.full((n,), r) for r, n in lengths.items()])
    bags = torch.randint(0, 9, (rows.numel(),), generator=gen)
    bags[::3] = torch.tensor([-1, 9, 2**40]).repeat(rows.numel())[:len(bags[::3])]
    scales = torch.randn(rows.numel(), generator=gen)
    grad_output = torch.randn(9, dim, generator=gen).to(DEVICE)
    args = (grad_output, rows.to(DEVICE), bags.to(DEVICE), scales.to(DEVICE), num_rows, Config(block_l, 16, num_warps))
    out = eb.embedding_bag_backward(*args)
    assert torch.equal(out, eb.embedding_bag_backward(*args))
    assert_close(out, ref_backward(*args[:5]), ref_backward(*args[:5], magnitude=True), torch.float32)


def test_backward_empty_plan():
    grad_weight = eb.embedding_bag_backward(torch.randn(3, 5, device=DEVICE), tensor([]), tensor([]), None, 4,
                                            Config(4, 16, 1))
    assert grad_weight.shape == (4, 5) and (grad_weight == 0).all()


# ---------------------------------------------------------------- per-sample-weights backward


@pytest.mark.parametrize("dim", list(CONFIG_FOR_DIM))
@pytest.mark.parametrize("padding_idx", [-1, 4])
@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_per_sample_weights_backward(dtype, padding_idx, dim):
    index_dtype = INDEX_DTYPES[(dim + padding_idx) % 2]
    include_last_offset = (dim + TABLE_DTYPES.index(dtype)) % 2 == 0
    gen = _generator("psw", dtype, index_dtype, padding_idx, dim)
    num_rows, num_bags = 19, 11
    weight = make_table(gen, num_rows, dim, dtype, strided=padding_idx >= 0)
    indices, offsets = make_bags(gen, num_rows, num_bags, 30, index_dtype, include_last_offset, padding_idx)
    if include_last_offset:  # a position past the last offset, outside every bag, gives 0
        indices = torch.cat([indices, indices[:1] * 0 + 1])
    grad_output = torch.randn(num_bags, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
    # block_d 16: dims above 16 take several column chunks of the in-kernel loop.
    config = Config(CONFIG_FOR_DIM[dim].block_l, 16, 4)
    record = new_record()
    args = (grad_output, weight, indices, offsets, padding_idx, include_last_offset)
    out = eb.embedding_bag_per_sample_weights_backward(*args, config, record)
    assert out.shape == indices.shape and out.dtype == dtype
    assert_close(out, ref_psw_backward(*args), ref_psw_backward(*args, magnitude=True), dtype)
    assert read_record(record) == [0] * 8


@pytest.mark.parametrize("include_last_offset", [False, True])
def test_per_sample_weights_backward_empty(include_last_offset):
    weight = torch.randn(4, 3, device=DEVICE)
    offsets = tensor([0, 0][:2 if include_last_offset else 1])
    out = eb.embedding_bag_per_sample_weights_backward(torch.randn(1, 3, device=DEVICE), weight, tensor([]),
                                                       offsets, -1, include_last_offset, Config(4, 16, 1))
    assert out.shape == (0,)
    out = eb.embedding_bag_per_sample_weights_backward(torch.randn(0, 3, device=DEVICE), weight, tensor([1, 2]),
                                                       tensor([0][:1 if include_last_offset else 0]), -1,
                                                       include_last_offset, Config(4, 16, 1))
    assert out.tolist() == [0, 0]


# ---------------------------------------------------------------- launch plumbing


def test_grids_split_into_launches(monkeypatch):
    """Grids over the runtime's limit are launched in chunks: force a tiny limit."""
    monkeypatch.setattr(common, "max_programs", lambda device, num_warps: 3)
    gen = _generator("chunks")
    num_rows, dim, num_bags = 7, 18, 10
    weight = make_table(gen, num_rows, dim, torch.float32)
    indices, offsets = make_bags(gen, num_rows, num_bags, 12, torch.int64, False)
    config = Config(4, 16, 4)
    args = (weight, indices, offsets, 0, None, -1, False)
    out = eb.embedding_bag_forward(*args, config)
    assert_matches(out, ref_forward(*args), ref_forward(*args, magnitude=True), torch.float32)
    grad_output = torch.randn(num_bags, dim, generator=gen).to(DEVICE)
    plan = make_plan(indices, offsets, num_rows, 0, None, -1, False)
    grad_weight = eb.embedding_bag_backward(grad_output, plan[0], plan[1], None, num_rows, config)
    assert_close(grad_weight, ref_backward(grad_output, plan[0], plan[1], None, num_rows),
                 ref_backward(grad_output, plan[0], plan[1], None, num_rows, magnitude=True), torch.float32)
    args = (grad_output, weight, indices, offsets, -1, False)
    grad_psw = eb.embedding_bag_per_sample_weights_backward(*args, config)
    assert_close(grad_psw, ref_psw_backward(*args), ref_psw_backward(*args, magnitude=True), torch.float32)


@pytest.mark.parametrize("config", [Config(3, 16, 4), Config(512, 16, 4), Config(4, 8, 4), Config(4, 2048, 4),
                                    Config(32, 1024, 4), Config(4, 16, 3)])
def test_invalid_config_raises(config):
    weight = torch.zeros(4, 4, device=DEVICE)
    offsets = tensor([0, 0])
    with pytest.raises(ValueError, match="block_l|block_d|num_warps"):
        eb.embedding_bag_forward(weight, offsets[:0], offsets, 0, None, -1, True, config)


@pytest.mark.parametrize("offsets,include_last_offset,errors,match", [
    (tensor([]), True, None, "include_last_offset"),
    (tensor([0], torch.int32), False, None, "share"),
    (tensor([0]), False, torch.zeros(8, dtype=torch.int32, device=DEVICE), "int64"),
    (tensor([0]), False, torch.zeros(7, dtype=torch.int64, device=DEVICE), "8 words"),
    (tensor([0]), False, torch.zeros(16, dtype=torch.int64, device=DEVICE)[::2], "contiguous"),
])
def test_invalid_arguments_raise(offsets, include_last_offset, errors, match):
    weight = torch.zeros(4, 4, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        eb.embedding_bag_forward(weight, tensor([1]), offsets, 0, None, -1, include_last_offset, Config(4, 16, 1),
                                 errors)
    with pytest.raises(ValueError, match=match):
        eb.embedding_bag_per_sample_weights_backward(torch.zeros(offsets.numel(), 4, device=DEVICE), weight,
                                                     tensor([1]), offsets, -1, include_last_offset,
                                                     Config(4, 16, 1), errors)


@pytest.mark.gpu
def test_record_on_device_or_pinned_only():
    with pytest.raises(ValueError, match="pinned"):
        eb.embedding_bag_forward(torch.zeros(4, 4, device=DEVICE), tensor([1]), tensor([0]), 0, None, -1, False,
                                 Config(4, 16, 1), torch.zeros(8, dtype=torch.int64))


@pytest.mark.gpu  # a > 4 GiB table
def test_forward_row_offsets_past_int32():
    """rows * row_stride > 2^31 elements: the row offset must be computed in 64 bits."""
    num_rows, dim = 2**31 // 128 + 1000, 128
    weight = torch.zeros(num_rows, dim, dtype=torch.float16, device=DEVICE)
    last = torch.arange(num_rows - 4, num_rows, device=DEVICE)
    weight[last] = torch.arange(1, 5, dtype=torch.float16, device=DEVICE)[:, None]
    for index_dtype in INDEX_DTYPES:
        indices = last.to(index_dtype)
        offsets = tensor([0, 2], index_dtype)
        record = new_record()
        out = eb.embedding_bag_forward(weight, indices, offsets, 0, None, -1, False, Config(4, 64, 4), record)
        assert out[:, 0].tolist() == [3.0, 7.0] and (out == out[:, :1]).all()
        assert read_record(record) == [0] * 8
