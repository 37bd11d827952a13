"""Triton embedding_bag launchers against a float64 torch reference.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (conftest.py sets it before
triton is imported), on GPU tensors otherwise. The modules are imported by file path so the test
needs neither the package nor its extension.
"""
import importlib.util
import sys
import zlib
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, relpath: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


eb = _load("_test_triton_eb_kernels", "mymetaops/triton/embedding_bag.py")
Config = _load("_test_triton_eb_configs", "mymetaops/configs.py").TritonEmbeddingBagConfig

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INDEX_DTYPES = [torch.int32, torch.int64]
# Error bound per dtype, relative to the pooled magnitude (sum of |terms|) of each output row:
# output rounding to the dtype dominates for fp16/bf16, fp32 accumulation for fp32.
RTOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}
# One config per tested dim keeps the interpreter run short while covering block_l = 1, a partial
# column block, several column blocks per row, and both reductions (one warp: each step;
# several: once at the end).
CONFIG_FOR_DIM = {1: Config(1, 32, 1), 3: Config(4, 16, 1), 130: Config(16, 64, 8)}


# ---------------------------------------------------------------- inputs and references


def _generator(*case) -> torch.Generator:
    """Fresh generator seeded from the test case (reproducible, unlike hash() of strings)."""
    return torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))


def _bag_bounds(offsets: torch.Tensor, num_indices: int):
    """Clamped [start, end) of every bag, as the contract states."""
    offs = offsets.tolist()
    for b in range(len(offs) - 1):
        start = min(max(offs[b], 0), num_indices)
        yield b, start, min(max(offs[b + 1], start), num_indices)


def _is_kept(row: int, padding_idx: int) -> bool:
    return padding_idx < 0 or row != padding_idx


def make_table(gen, num_rows, dim, dtype, strided):
    """Random table; `strided` makes it a column slice of a wider one (row stride > dim)."""
    if strided:
        wide = torch.randn(num_rows, dim + 7, generator=gen, dtype=torch.float64)
        return wide.to(dtype)[:, 3:3 + dim].to(DEVICE)
    return torch.randn(num_rows, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)


def make_bags(gen, num_rows, num_bags, max_len, index_dtype, padding_idx=-1):
    """offsets [num_bags + 1] (every 5th bag empty) and indices, padding_idx sprinkled in."""
    lengths = torch.randint(0, max_len + 1, (num_bags,), generator=gen)
    lengths[::5] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    indices = torch.randint(0, num_rows, (int(offsets[-1]),), generator=gen)
    if padding_idx >= 0:
        indices[torch.rand(indices.shape, generator=gen) < 0.2] = padding_idx
    return indices.to(index_dtype).to(DEVICE), offsets.to(index_dtype).to(DEVICE)


def ref_forward(weight, indices, offsets, mode, psw, padding_idx, magnitude=False):
    """float64 pooling; `magnitude` pools |terms| instead (the per-bag error scale)."""
    w = weight.double().cpu()
    idx = indices.tolist()
    scale = psw.double().cpu() if psw is not None else None
    out = torch.zeros(offsets.numel() - 1, weight.size(1), dtype=torch.float64)
    for b, start, end in _bag_bounds(offsets, len(idx)):
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


def assert_rows_close(out, ref, magnitude, dtype):
    """Per row: |out - ref| <= RTOL * max pooled magnitude; NaN anywhere fails."""
    out = out.double().cpu().reshape(ref.size(0), -1)
    err = (out - ref).abs().reshape(ref.size(0), -1).amax(dim=1)
    bound = RTOL[dtype] * magnitude.reshape(ref.size(0), -1).amax(dim=1)
    bad = ~(err <= bound)
    assert not bad.any(), f"rows {bad.nonzero().flatten().tolist()[:10]}: err {err[bad][:5]} > bound {bound[bad][:5]}"


def poison_allocator(numel, dtype):
    """Best effort: leave NaNs in memory the launcher's torch.empty is likely to get, so an unwritten
    output element shows up as NaN instead of a lucky value."""
    torch.full((numel,), float("nan"), dtype=dtype, device=DEVICE)


def make_plan(indices, offsets, num_rows, mode, psw, padding_idx, index_dtype, marker_gap=0):
    """The row-sorted backward plan the glue builds: padding / out-of-range / outside-every-bag
    positions get a marker row >= num_rows (num_rows + marker_gap) and sort last."""
    idx = indices.tolist()
    rows = [num_rows + marker_gap] * len(idx)
    bags = [0] * len(idx)
    scales = [0.0] * len(idx)
    for b, start, end in _bag_bounds(offsets, len(idx)):
        kept = [p for p in range(start, end) if _is_kept(idx[p], padding_idx) and 0 <= idx[p] < num_rows]
        for p in kept:
            rows[p], bags[p] = idx[p], b
            scales[p] = float(psw[p]) if psw is not None else (1.0 / len(kept) if mode == 1 else 1.0)
    order = torch.tensor(rows).argsort(stable=True)
    return (torch.tensor(rows)[order].to(index_dtype).to(DEVICE), torch.tensor(bags)[order].to(DEVICE),
            torch.tensor(scales, dtype=torch.float32)[order].to(DEVICE))


def ref_backward(grad_output, sorted_rows, sorted_bags, sorted_scales, num_rows, magnitude=False):
    g = grad_output.double().cpu()
    rows, bags = sorted_rows.cpu().long(), sorted_bags.cpu()
    scales = torch.ones(rows.numel(), dtype=torch.float64) if sorted_scales is None else sorted_scales.double().cpu()
    valid = rows < num_rows
    terms = g[bags[valid]] * scales[valid, None]
    out = torch.zeros(num_rows, g.size(1), dtype=torch.float64)
    return out.index_add_(0, rows[valid], terms.abs() if magnitude else terms)


def ref_psw_backward(grad_output, weight, indices, offsets, padding_idx, magnitude=False):
    g, w, idx = grad_output.double().cpu(), weight.double().cpu(), indices.tolist()
    out = torch.zeros(len(idx), dtype=torch.float64)
    for b, start, end in _bag_bounds(offsets, len(idx)):
        for p in range(start, end):
            if _is_kept(idx[p], padding_idx) and 0 <= idx[p] < w.size(0):
                terms = g[b] * w[idx[p]]
                out[p] = (terms.abs() if magnitude else terms).sum()
    return out


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
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_forward(dtype, variant, dim):
    mode, with_psw, padding_idx, strided = FORWARD_VARIANTS[variant]
    index_dtype = INDEX_DTYPES[(dim + len(variant)) % 2]  # alternating: both are covered per dtype
    gen = _generator("fwd", dtype, index_dtype, variant, dim)
    num_rows, num_bags = 23, 12
    weight = make_table(gen, num_rows, dim, dtype, strided)
    indices, offsets = make_bags(gen, num_rows, num_bags, 40, index_dtype, padding_idx)
    psw = torch.randn(indices.numel(), generator=gen).to(dtype).to(DEVICE) if with_psw else None
    config = CONFIG_FOR_DIM[dim]
    poison_allocator(num_bags * dim, dtype)
    out = eb.embedding_bag_forward(weight, indices, offsets, mode, psw, padding_idx, config)
    assert out.shape == (num_bags, dim) and out.dtype == dtype
    assert_rows_close(out, ref_forward(weight, indices, offsets, mode, psw, padding_idx),
                      ref_forward(weight, indices, offsets, mode, psw, padding_idx, magnitude=True), dtype)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_forward_out_of_range_index_makes_bag_nan(index_dtype):
    gen = _generator("oob", index_dtype)
    num_rows, dim = 10, 20
    weight = make_table(gen, num_rows, dim, torch.float32, False)
    # Bags: OOB -1 (not padding: padding_idx is 3), OOB == num_rows, a valid one, padding only,
    # OOB huge; the index after the last bag is OOB but outside every bag, so harmless.
    rows = [1, -1, 2, 4, num_rows, 7, 8, 9, 3, 3, 2**30, -7]
    indices = torch.tensor(rows, dtype=index_dtype, device=DEVICE)
    offsets = torch.tensor([0, 3, 5, 8, 10, 11], dtype=index_dtype, device=DEVICE)
    for mode in (0, 1):
        out = eb.embedding_bag_forward(weight, indices, offsets, mode, None, 3, Config(2, 16, 4))
        nan_bags = out.isnan().all(dim=1).cpu()
        assert nan_bags.tolist() == [True, True, False, False, True]
        assert not out[~nan_bags.to(DEVICE)].isnan().any()
        ref = ref_forward(weight, indices, offsets, mode, None, 3)
        assert_rows_close(out[2:4], ref[2:4], ref_forward(weight, indices, offsets, mode, None, 3, True)[2:4],
                          torch.float32)


def test_forward_clamps_offsets():
    gen = _generator("clamp")
    weight = make_table(gen, 8, 5, torch.float32, False)
    indices = torch.tensor([0, 1, 2, 3, 4, 5, 6], device=DEVICE)
    # Negative start, a decreasing pair (empty bag), an end past num_indices, a bag fully past it.
    offsets = torch.tensor([-4, 2, 6, 3, 5, 100, 200], device=DEVICE)
    out = eb.embedding_bag_forward(weight, indices, offsets, 0, None, -1, Config(2, 16, 4))
    ref = ref_forward(weight, indices, offsets, 0, None, -1)
    assert ref[2].abs().sum() == 0 and ref[5].abs().sum() == 0  # the reference agrees on the clamping
    assert_rows_close(out, ref, ref_forward(weight, indices, offsets, 0, None, -1, True), torch.float32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_forward_one_row_table_and_no_indices(dtype):
    gen = _generator("one_row", dtype)
    weight = make_table(gen, 1, 33, dtype, True)
    indices, offsets = make_bags(gen, 1, 9, 50, torch.int64)
    for mode in (0, 1):
        out = eb.embedding_bag_forward(weight, indices, offsets, mode, None, -1, Config(8, 16, 2))
        assert_rows_close(out, ref_forward(weight, indices, offsets, mode, None, -1),
                          ref_forward(weight, indices, offsets, mode, None, -1, True), dtype)
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    out = eb.embedding_bag_forward(weight, empty, torch.zeros(4, dtype=torch.int64, device=DEVICE), 1, None, -1,
                                   Config(8, 16, 2))
    assert out.shape == (3, 33) and (out == 0).all()


# ---------------------------------------------------------------- weight backward

BACKWARD_VARIANTS = {  # name: (mode, per-sample weights, padding_idx, pass scales)
    "sum_no_scales": (0, False, -1, False),
    "mean": (1, False, 2, True),
    "psw": (0, True, -1, True),
}


@pytest.mark.parametrize("dim", list(CONFIG_FOR_DIM))
@pytest.mark.parametrize("variant", list(BACKWARD_VARIANTS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_backward(dtype, variant, dim):
    mode, with_psw, padding_idx, pass_scales = BACKWARD_VARIANTS[variant]
    index_dtype = INDEX_DTYPES[(dim + len(variant)) % 2]
    gen = _generator("bwd", dtype, index_dtype, variant, dim)
    num_rows, num_bags = 17, 10  # few rows: runs longer than block_l
    indices, offsets = make_bags(gen, num_rows, num_bags, 50, index_dtype, padding_idx)
    psw = torch.randn(indices.numel(), generator=gen) if with_psw else None
    plan = make_plan(indices, offsets, num_rows, mode, psw, padding_idx, index_dtype, marker_gap=dim % 3)
    scales = plan[2] if pass_scales else None
    grad_output = torch.randn(num_bags, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
    config = CONFIG_FOR_DIM[dim]
    out = eb.embedding_bag_backward(grad_output, plan[0], plan[1], scales, num_rows, config)
    assert out.shape == (num_rows, dim) and out.dtype == dtype
    assert_rows_close(out, ref_backward(grad_output, plan[0], plan[1], scales, num_rows),
                      ref_backward(grad_output, plan[0], plan[1], scales, num_rows, magnitude=True), dtype)


@pytest.mark.parametrize("block_l,num_warps", [(1, 4), (4, 1), (8, 4)])
def test_backward_runs_across_blocks_and_deterministic(block_l, num_warps):
    """Runs of length k * block_l (the walk reads one block past the run), block_l + 1, and a run
    ending exactly at the last position."""
    gen = _generator("runs", block_l, num_warps)
    num_rows, dim = 6, 40
    lengths = {0: 2 * block_l, 1: block_l + 1, 3: 1, 5: 3 * block_l}
    rows = torch.cat([torch.full((n,), r) for r, n in lengths.items()])
    bags = torch.randint(0, 9, (rows.numel(),), generator=gen)
    scales = torch.randn(rows.numel(), generator=gen)
    grad_output = torch.randn(9, dim, generator=gen).to(DEVICE)
    args = (grad_output, rows.to(DEVICE), bags.to(DEVICE), scales.to(DEVICE), num_rows, Config(block_l, 16, num_warps))
    out = eb.embedding_bag_backward(*args)
    assert torch.equal(out, eb.embedding_bag_backward(*args))
    assert_rows_close(out, ref_backward(*args[:5]), ref_backward(*args[:5], magnitude=True), torch.float32)


# ---------------------------------------------------------------- per-sample-weights backward


@pytest.mark.parametrize("dim", list(CONFIG_FOR_DIM))
@pytest.mark.parametrize("padding_idx", [-1, 4])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_per_sample_weights_backward(dtype, padding_idx, dim):
    index_dtype = INDEX_DTYPES[(dim + padding_idx) % 2]
    gen = _generator("psw", dtype, index_dtype, padding_idx, dim)
    num_rows, num_bags = 19, 11
    weight = make_table(gen, num_rows, dim, dtype, strided=padding_idx >= 0)
    indices, offsets = make_bags(gen, num_rows, num_bags, 30, index_dtype, padding_idx)
    if indices.numel() > 2:  # an OOB row and a position outside every bag both give 0
        indices[indices.numel() // 2] = num_rows
        offsets[-1] -= 1
    grad_output = torch.randn(num_bags, dim, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
    # block_d 16: dim 130 takes nine column chunks of the in-kernel loop.
    config = Config(CONFIG_FOR_DIM[dim].block_l, 16, 4)
    out = eb.embedding_bag_per_sample_weights_backward(grad_output, weight, indices, offsets, padding_idx, config)
    assert out.shape == indices.shape and out.dtype == dtype
    assert_rows_close(out, ref_psw_backward(grad_output, weight, indices, offsets, padding_idx).unsqueeze(1),
                      ref_psw_backward(grad_output, weight, indices, offsets, padding_idx, True).unsqueeze(1), dtype)


# ---------------------------------------------------------------- launch plumbing


def test_grids_split_into_launches(monkeypatch):
    """Grids over the runtime's limit are launched in chunks: force a tiny limit."""
    monkeypatch.setattr(eb, "_max_programs", lambda device, num_warps: 3)
    gen = _generator("chunks")
    num_rows, dim, num_bags = 7, 18, 10
    weight = make_table(gen, num_rows, dim, torch.float32, False)
    indices, offsets = make_bags(gen, num_rows, num_bags, 12, torch.int64)
    config = Config(4, 16, 4)
    out = eb.embedding_bag_forward(weight, indices, offsets, 0, None, -1, config)
    assert_rows_close(out, ref_forward(weight, indices, offsets, 0, None, -1),
                      ref_forward(weight, indices, offsets, 0, None, -1, True), torch.float32)
    grad_output = torch.randn(num_bags, dim, generator=gen).to(DEVICE)
    plan = make_plan(indices, offsets, num_rows, 0, None, -1, torch.int64)
    grad_weight = eb.embedding_bag_backward(grad_output, plan[0], plan[1], None, num_rows, config)
    assert_rows_close(grad_weight, ref_backward(grad_output, plan[0], plan[1], None, num_rows),
                      ref_backward(grad_output, plan[0], plan[1], None, num_rows, magnitude=True), torch.float32)
    grad_psw = eb.embedding_bag_per_sample_weights_backward(grad_output, weight, indices, offsets, -1, config)
    assert_rows_close(grad_psw, ref_psw_backward(grad_output, weight, indices, offsets, -1).unsqueeze(1),
                      ref_psw_backward(grad_output, weight, indices, offsets, -1, True).unsqueeze(1), torch.float32)


@pytest.mark.parametrize("config", [Config(3, 16, 4), Config(512, 16, 4), Config(4, 8, 4), Config(4, 2048, 4),
                                    Config(32, 1024, 4), Config(4, 16, 3)])
def test_invalid_config_raises(config):
    weight = torch.zeros(4, 4, device=DEVICE)
    offsets = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError):
        eb.embedding_bag_forward(weight, offsets[:0], offsets, 0, None, -1, config)


@pytest.mark.gpu  # a > 4 GiB table
def test_forward_row_offsets_past_int32():
    """rows * row_stride > 2^31 elements: the row offset must be computed in 64 bits."""
    num_rows, dim = 2**31 // 128 + 1000, 128
    weight = torch.zeros(num_rows, dim, dtype=torch.float16, device=DEVICE)
    last = torch.arange(num_rows - 4, num_rows, device=DEVICE)
    weight[last] = torch.arange(1, 5, dtype=torch.float16, device=DEVICE)[:, None]
    for index_dtype in INDEX_DTYPES:
        indices = last.to(index_dtype)
        offsets = torch.tensor([0, 2, 4], dtype=index_dtype, device=DEVICE)
        out = eb.embedding_bag_forward(weight, indices, offsets, 0, None, -1, Config(4, 64, 4))
        assert out[:, 0].tolist() == [3.0, 7.0] and (out == out[:, :1]).all()
