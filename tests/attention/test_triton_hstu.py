"""Triton HSTU attention (mymetaops/triton/hstu_attention.py) against the float64 padded-dense
reference (hstu_reference.py): forward and the three gradients, every mask rule, jagged edge cases,
strided inputs, the block plans (which key/query ranges a block visits and which of them skip the
mask), the grid order (attention_checks.grid_position), configs and argument checks.

Runs under TRITON_INTERPRET=1 on CPU tensors when no GPU is present (set below, as conftest.py does,
before triton is imported), on GPU tensors otherwise; `gpu`-marked tests need a GPU. The
interpreter's tl.dot on bf16 operands is wrong (Triton 3.8), so bf16 runs on a GPU only. Every
tensor the launchers allocate is poisoned with NaN (torch.empty patched for the call), so an element
the kernels leave unwritten fails.
"""
import math
import os
import zlib
from dataclasses import dataclass

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from hstu_reference import hstu_error_scales, hstu_mask, hstu_reference  # noqa: E402

from mymetaops.triton import attention_checks, common  # noqa: E402
from mymetaops.triton import hstu_attention as ha  # noqa: E402
from mymetaops.triton.hstu_attention import HstuConfig  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Masked scores are set to a large negative value whose sigmoid overflows exp2 to inf (on purpose:
# silu and silu' are then exactly 0); numpy, under the interpreter, warns about it.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp2:RuntimeWarning")
DTYPES = (torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu))
# |actual - expected| <= TOL * terms + DOT_TOL * dots elementwise (hstu_error_scales: terms = the
# element's sum of |terms|, dots = its sensitivity to the fp32 dot products), expected = float64 on
# the same low-precision inputs. Each term is rounded
# once to the operand dtype before the second product (p, dz) and the result once to the output:
# two half-ulps, 2^-11 (fp16) / 2^-8 (bf16, whose interpreter conversion truncates); fp32 keeps room
# for fp32 accumulation and the GPU's approximate exp2 / division.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# Times the `dots` scale: the fp32 error of the q . k and dO . v products (any operand dtype).
DOT_TOL = 4e-6
SMALL = HstuConfig(16, 16, 4, 2)  # several blocks per sequence even at interpreter sizes


@dataclass(frozen=True)
class Case:
    lengths: tuple
    max_seq_len: int
    heads: int = 2
    dqk: int = 32
    dv: int = 32
    causal: bool = True
    num_targets: tuple | None = None
    max_attn_len: int = 0
    contextual_seq_len: int = 0
    index_dtype: torch.dtype = torch.int64
    first: int = 0  # rows before seq_offsets[0]
    tail: int = 0  # rows after seq_offsets[B]
    config: HstuConfig | None = SMALL
    strided: bool = False  # q, grad_out slices of wider tensors; v without a unit last stride


CASES = {
    "causal": Case((37, 0, 1, 20), 37),
    "causal_default_config": Case((37, 0, 1, 20), 40, config=None),
    "len127_h1_dqk64_dv32": Case((127, 64, 5), 127, heads=1, dqk=64, dv=32, config=HstuConfig(32, 16)),
    "odd_dims_3_40": Case((30, 17), 33, dqk=3, dv=40, config=HstuConfig(16, 32), index_dtype=torch.int32),
    "dims_1_100": Case((20, 9), 24, heads=1, dqk=1, dv=100, config=HstuConfig(32, 32)),
    "non_causal": Case((37, 12, 0), 40, causal=False),
    "targets": Case((37, 12, 1, 9, 0), 40, num_targets=(5, 12, 1, 0, 0), index_dtype=torch.int32),
    "targets_non_causal": Case((37, 12, 9), 40, causal=False, num_targets=(5, 3, 9)),
    "window": Case((40, 17, 3), 40, max_attn_len=5),
    "window_non_causal_targets": Case((37, 21), 37, causal=False, num_targets=(6, 2), max_attn_len=7),
    "contextual_targets": Case((37, 12, 2, 9), 40, num_targets=(4, 2, 0, 9), contextual_seq_len=3),
    "contextual_window_non_causal": Case((37, 19), 37, causal=False, max_attn_len=6, contextual_seq_len=5),
    "contextual_past_length": Case((37, 12, 1), 37, num_targets=(3, 0, 1), max_attn_len=9, contextual_seq_len=20,
                                   config=HstuConfig(16, 32)),
    "single_sequence": Case((45,), 45, heads=1, config=HstuConfig(32, 16)),
    "rows_outside_sequences": Case((10, 7), 16, first=3, tail=5, index_dtype=torch.int32),
    "all_empty": Case((0, 0), 8, first=2, tail=1),
    "strided": Case((29, 3, 16), 32, heads=3, dqk=16, dv=24, num_targets=(2, 1, 0), strided=True),
}


# ---------------------------------------------------------------- inputs and comparisons


def _generator(*key) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def _make(case: Case, dtype: torch.dtype, name: str):
    gen = _generator(name, str(dtype))
    lengths = torch.tensor(case.lengths, dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]) + case.first
    total = int(offsets[-1]) + case.tail
    H = case.heads

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).to(DEVICE)
    if case.strided:
        q = randn(total, H + 2, case.dqk + 5)[:, 1:1 + H, 2:2 + case.dqk]  # row and head strides
        v = randn(total, case.dv, H).transpose(1, 2)  # last stride H: the launcher copies it
        grad_out = randn(total, H + 1, case.dv + 3)[:, :H, 3:]
    else:
        q, v, grad_out = randn(total, H, case.dqk), randn(total, H, case.dv), randn(total, H, case.dv)
    k = randn(total, H, case.dqk)
    targets = None if case.num_targets is None else torch.tensor(case.num_targets, dtype=case.index_dtype,
                                                                  device=DEVICE)
    return q, k, v, grad_out, offsets.to(case.index_dtype).to(DEVICE), targets


def _args(case: Case):
    return dict(max_seq_len=case.max_seq_len, alpha=1.0 / math.sqrt(case.dqk), causal=case.causal,
                max_attn_len=case.max_attn_len, contextual_seq_len=case.contextual_seq_len)


@pytest.fixture
def poison_empty(monkeypatch):
    """torch.empty returns NaN-filled floating tensors while the test runs."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t
    monkeypatch.setattr(torch, "empty", nan_empty)


def assert_close(actual, expected, scales, dtype, what):
    actual = actual.detach().double().cpu()
    expected = expected.detach().double().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    err = (actual - expected).abs()
    terms, dots = scales
    bound = TOL[dtype] * terms + DOT_TOL * dots + torch.finfo(dtype).tiny  # + results near the subnormals
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), (f"{what}: {int(bad.sum())} bad of {bad.numel()}, first at {bad.nonzero()[0].tolist()}: "
                           f"{actual[bad][0].item()} vs {expected[bad][0].item()} (bound {bound[bad][0].item():.3g})")


# ---------------------------------------------------------------- forward and backward


def check_forward(name, case, dtype):
    q, k, v, grad_out, offsets, targets = _make(case, dtype, name)
    args = _args(case)
    out = ha.hstu_attention_fwd(q, k, v, offsets, num_targets=targets, config=case.config, **args)
    assert out.dtype == dtype and out.shape == (q.shape[0], q.shape[1], case.dv) and out.is_contiguous()
    ref = hstu_reference(q.cpu(), k.cpu(), v.cpu(), offsets.cpu(), num_targets=targets, **args)
    scales = hstu_error_scales(q, k, v, grad_out, offsets.cpu(), num_targets=targets, **args)[0]
    assert_close(out, ref, scales, dtype, f"{name} out")


def check_backward(name, case, dtype):
    q, k, v, grad_out, offsets, targets = _make(case, dtype, name)
    args = _args(case)
    grads = ha.hstu_attention_bwd(grad_out, q, k, v, offsets, num_targets=targets, config=case.config, **args)
    leaves = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    ref = hstu_reference(*leaves, offsets.cpu(), num_targets=targets, **args)
    ref.backward(grad_out.cpu().double())
    scales = hstu_error_scales(q, k, v, grad_out, offsets.cpu(), num_targets=targets, **args)[1:]
    for what, grad, leaf, scale, src in zip(("dq", "dk", "dv"), grads, leaves, scales, (q, k, v)):
        assert grad.dtype == dtype and grad.shape == src.shape and grad.is_contiguous(), what
        assert_close(grad, leaf.grad, scale, dtype, f"{name} {what}")
    return grads


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_forward(name, dtype, poison_empty):
    check_forward(name, CASES[name], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_backward(name, dtype, poison_empty):
    check_backward(name, CASES[name], dtype)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("ctx", [0, 3])
def test_all_targets_and_more_targets_than_rows(ctx, causal, poison_empty):
    """num_targets = length (every id collapses to M <= 0) and > length (M < 0): the diagonal only,
    the contextual rule never applies."""
    case = Case((21, 9, 4), 24, num_targets=(21, 12, 4), causal=causal, contextual_seq_len=ctx)
    check_forward("degenerate", case, torch.float32)
    check_backward("degenerate", case, torch.float32)


def test_grid_in_several_launches(monkeypatch, poison_empty):
    """A grid past the runtime's limit goes out in chunks (program_base): 7 programs a launch."""
    monkeypatch.setattr(common, "max_programs", lambda device, num_warps: 7)
    check_forward("contextual_targets", CASES["contextual_targets"], torch.float32)
    check_backward("contextual_targets", CASES["contextual_targets"], torch.float32)


@triton.jit
def _grid_probe_kernel(out_ptr, program_base, num_seqs, num_heads, num_blocks, group_size,
                       LOW_BLOCKS_FIRST: tl.constexpr):
    """out[program] = (block, sequence, head) of attention_checks.grid_position."""
    block, b, h = attention_checks.grid_position(program_base, num_seqs, num_heads, num_blocks, group_size,
                                                 LOW_BLOCKS_FIRST)
    slot = out_ptr + (tl.program_id(0).to(tl.int64) + program_base) * 3
    tl.store(slot, block)
    tl.store(slot + 1, b)
    tl.store(slot + 2, h.to(tl.int32))


@pytest.mark.parametrize("low_blocks_first", [False, True])
@pytest.mark.parametrize("num_seqs,num_heads,num_blocks,group", [
    (3, 2, 4, 1), (5, 3, 3, 4), (7, 2, 6, 6), (2, 3, 5, 7), (4, 1, 1, 3), (1, 1, 5, 1), (3, 4, 2, 12)])
def test_grid_position_groups(num_seqs, num_heads, num_blocks, group, low_blocks_first):
    """Every (block, sequence, head) once, in groups of `group` consecutive (sequence, head) pairs
    (the last one smaller when group does not divide B * H; one group when group >= B * H), the
    blocks longest first within a group and its pairs inner; launched in chunks of 5 programs
    (program_base)."""
    pairs = num_seqs * num_heads
    total = pairs * num_blocks
    out = torch.full((total, 3), -1, dtype=torch.int32, device=DEVICE)
    for base in range(0, total, 5):
        _grid_probe_kernel[(min(5, total - base),)](out, base, num_seqs, num_heads, num_blocks, group,
                                                    LOW_BLOCKS_FIRST=low_blocks_first)
    got = [tuple(row) for row in out.cpu().tolist()]
    assert sorted(got) == [(blk, b, h) for blk in range(num_blocks) for b in range(num_seqs)
                           for h in range(num_heads)]
    expected = []
    for first in range(0, pairs, group):
        members = range(first, min(first + group, pairs))
        ranks = range(num_blocks) if low_blocks_first else range(num_blocks - 1, -1, -1)
        expected += [(blk, bh // num_heads, bh % num_heads) for blk in ranks for bh in members]
    assert got == expected


def test_no_sequences_and_zero_max_seq_len(poison_empty):
    q = torch.randn(4, 2, 16, device=DEVICE)
    v = torch.randn(4, 2, 8, device=DEVICE)
    for offsets, n in ((torch.tensor([0], device=DEVICE), 4), (torch.tensor([0, 0, 0], device=DEVICE), 0)):
        out = ha.hstu_attention_fwd(q, q, v, offsets, n, 0.5)
        assert out.shape == (4, 2, 8) and not out.any()
        for g, src in zip(ha.hstu_attention_bwd(v, q, q, v, offsets, n, 0.5), (q, q, v)):
            assert g.shape == src.shape and not g.any()
    empty = torch.empty(0, 2, 16, device=DEVICE)
    assert ha.hstu_attention_fwd(empty, empty, empty, torch.tensor([0, 0], device=DEVICE), 4, 0.5).shape == (0, 2, 16)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_default_configs_long(dtype, d, poison_empty):
    """Default tiles at real sizes (several hundred rows, D = 64 / 128), targets and a context; the
    backward twice, bitwise equal (no atomics)."""
    case = Case((1000, 517, 0, 1, 1024), 1024, heads=2, dqk=d, dv=d, num_targets=(20, 3, 0, 1, 64),
                contextual_seq_len=6, config=None)
    name = f"gpu_long_{d}"
    check_forward(name, case, dtype)
    first = check_backward(name, case, dtype)
    second = check_backward(name, case, dtype)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


# ---------------------------------------------------------------- block plans


@triton.jit
def _plan_probe_kernel(out_ptr, lengths_ptr, targets_ptr, ctx, max_attn_len, num_seqs, num_blocks,
                       CAUSAL: tl.constexpr, HAS_TARGETS: tl.constexpr, HAS_WINDOW: tl.constexpr,
                       HAS_CONTEXT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS: tl.constexpr,
                       SEQS: tl.constexpr, BLOCKS: tl.constexpr):
    """out[s, block] = the plan of query block (KEYS=False: lo, a, b, hi, 0) or key block
    (KEYS=True: ctx_end, lo, a, b, hi) `block` of sequence s. One program evaluates the plans of
    every (sequence, block) at once: they are elementwise, so scalars and [SEQS, BLOCKS] tensors
    alike."""
    s = tl.arange(0, SEQS)[:, None]
    blk = tl.arange(0, BLOCKS)[None, :]
    inside = (s < num_seqs) & (blk < num_blocks)
    seq_len = tl.load(lengths_ptr + s, mask=s < num_seqs, other=0)
    ntargets = seq_len * 0
    if HAS_TARGETS:
        ntargets = tl.load(targets_ptr + s, mask=s < num_seqs, other=0)
    max_id = seq_len - ntargets
    if HAS_CONTEXT:
        max_id = max_id - ctx + 1
    if KEYS:
        r0, r1, r2, r3, r4 = ha._key_block_plan(blk * BLOCK_N + s * 0, seq_len, ntargets, ctx, max_id,
                                                max_attn_len, BLOCK_M, BLOCK_N, CAUSAL, HAS_TARGETS, HAS_WINDOW,
                                                HAS_CONTEXT)
    else:
        r0, r1, r2, r3 = ha._query_block_plan(blk * BLOCK_M + s * 0, seq_len, ntargets, ctx, max_id, max_attn_len,
                                              BLOCK_M, BLOCK_N, CAUSAL, HAS_TARGETS, HAS_WINDOW, HAS_CONTEXT)
        r4 = r0 * 0
    base = out_ptr + (s * num_blocks + blk) * 5
    tl.store(base, r0, mask=inside)
    tl.store(base + 1, r1, mask=inside)
    tl.store(base + 2, r2, mask=inside)
    tl.store(base + 3, r3, mask=inside)
    tl.store(base + 4, r4, mask=inside)


def _probe(lengths, targets, causal, window, ctx, block_m, block_n, keys):
    num_blocks = triton.cdiv(max(lengths), block_n if keys else block_m)
    out = torch.full((len(lengths), num_blocks, 5), -1, dtype=torch.int32, device=DEVICE)
    lengths_t = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    targets_t = torch.tensor(targets if targets is not None else [0] * len(lengths), dtype=torch.int32,
                             device=DEVICE)
    _plan_probe_kernel[(1,)](
        out, lengths_t, targets_t, ctx, window, len(lengths), num_blocks, CAUSAL=causal,
        HAS_TARGETS=targets is not None, HAS_WINDOW=window > 0, HAS_CONTEXT=ctx > 0, BLOCK_M=block_m,
        BLOCK_N=block_n, KEYS=keys, SEQS=triton.next_power_of_2(len(lengths)),
        BLOCKS=triton.next_power_of_2(num_blocks))
    return out.cpu().tolist()


def _check_split(lo, a, b, hi, length, block, what):
    assert 0 <= lo <= a <= b <= hi <= length, f"{what}: plan {lo, a, b, hi} for length {length}"
    assert (a - lo) % block == 0 or a == hi, f"{what}: masked head {lo}..{a} not whole blocks"
    assert (b - a) % block == 0, f"{what}: interior {a}..{b} not whole blocks"


PLAN_SHAPES = [(False, 0, 0), (True, 0, 0), (False, 3, 0), (True, 40, 0), (False, 0, 2), (True, 0, 7), (False, 5, 3),
               (True, 33, 12)]  # (targets, max_attn_len, contextual_seq_len)


@pytest.mark.parametrize("blocks", [(16, 16), (32, 16), (16, 32)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", PLAN_SHAPES)
def test_block_plans(shape, causal, blocks):
    """Every valid (row, key) pair of a block lies in the range its plan visits, and every pair in the
    mask-free interior is valid (and its keys/rows exist). Random lengths and target counts."""
    has_targets, window, ctx = shape
    block_m, block_n = blocks
    gen = _generator("plans", shape, causal, blocks)
    lengths = [70, 1, 2, 16, 17, 33] + torch.randint(1, 71, (10,), generator=gen).tolist()
    targets = None
    if has_targets:
        targets = [min(n, int(t)) for n, t in zip(lengths, torch.randint(0, 12, (len(lengths),), generator=gen))]
        targets[0], targets[1] = lengths[0] + 2, 1  # more targets than rows; all targets
    qplans = _probe(lengths, targets, causal, window, ctx, block_m, block_n, keys=False)
    kplans = _probe(lengths, targets, causal, window, ctx, block_m, block_n, keys=True)
    interior = 0
    for s, n in enumerate(lengths):
        mask = hstu_mask(n, n, causal, None if targets is None else targets[s], window, ctx)
        for blk, (lo, a, b, hi, _) in enumerate(qplans[s]):
            m0 = blk * block_m
            if m0 >= n:
                continue
            what = f"query block {blk} of sequence {s} (length {n})"
            _check_split(lo, a, b, hi, n, block_n, what)
            rows = mask[m0:m0 + block_m]
            visited = torch.zeros(n, dtype=torch.bool)
            visited[lo:hi] = True
            assert not (rows & ~visited).any(), f"{what}: valid keys outside {lo}..{hi}"
            assert rows[:, a:b].all(), f"{what}: an invalid pair in the interior {a}..{b}"
            interior += b - a
            if not has_targets and not window and not ctx:  # the mask only where it is needed
                assert (a, b) == ((0, m0 // block_n * block_n) if causal else (0, n // block_n * block_n)), what
        for blk, (ctx_end, lo, a, b, hi) in enumerate(kplans[s]):
            n0 = blk * block_n
            if n0 >= n:
                continue
            what = f"key block {blk} of sequence {s} (length {n})"
            _check_split(lo, a, b, hi, n, block_m, what)
            assert 0 <= ctx_end <= lo and ctx_end <= max(ctx, 0), f"{what}: contextual rows 0..{ctx_end}"
            cols = mask[:, n0:n0 + block_n]
            visited = torch.zeros(n, dtype=torch.bool)
            visited[:ctx_end] = True
            visited[lo:hi] = True
            assert not (cols & ~visited[:, None]).any(), f"{what}: valid rows outside 0..{ctx_end}, {lo}..{hi}"
            assert cols[a:b].all(), f"{what}: an invalid pair in the interior {a}..{b}"
            interior += b - a
            if not has_targets and not window and not ctx:  # masked: the diagonal rows only (causal)
                first = min(n0 + math.ceil(min(block_n, n - n0) / block_m) * block_m, n) if causal else 0
                assert (a, b) == (first, first + (n - first) // block_m * block_m), what
    if not window or window >= 2 * max(blocks):
        assert interior > 0  # the mask-free path is taken (a window narrower than two blocks has none)


# ---------------------------------------------------------------- value checks in the forward launch


@pytest.mark.parametrize("offsets,total,max_len,targets,record", [
    ([0, 3, 37], 37, 40, None, [0, 0, 0, 0, 0]),
    ([0, 3, 37], 37, 40, [3, 0], [0, 0, 0, 0, 0]),
    ([0], 0, 4, None, [0, 0, 0, 0, 0]),
    ([2], 2, 4, None, [7, 10, 0, 2, 0]),  # (code, op, position, value, bound): B = 0, offsets[0] != 0
    ([1, 3, 5], 5, 4, None, [7, 10, 0, 1, 0]),  # first offset != 0
    ([0, 3, 7], 5, 4, None, [7, 10, 2, 7, 5]),  # last offset != total_L
    ([0, 3, 4], 5, 4, None, [7, 10, 2, 4, 5]),
    ([0, 1], 0, 4, None, [7, 10, 1, 1, 0]),  # total_L = 0: no forward program, the check launch
    ([0, 20, 2, 37], 37, 40, None, [3, 10, 2, 2, 0]),  # decreasing
    ([0, 5, 38], 38, 32, None, [6, 10, 1, 33, 32]),  # sequence 1 longer than max_seq_len
    ([0, 2, 2], 2, 0, None, [6, 10, 0, 2, 0]),  # max_seq_len = 0: the check launch
    ([0, 3, 37], 37, 40, [1, 35], [8, 10, 1, 35, 34]),  # num_targets[1] > its length
    ([0, 3, 37], 37, 40, [-1, 0], [8, 10, 0, -1, 3]),
])
def test_forward_records_bad_values(offsets, total, max_len, targets, record):
    """The forward launch with an error record checks seq_offsets and num_targets: a bad entry is
    recorded with its code, position, value and bound (several heads and query blocks)."""
    q = torch.randn(total, 2, 16, device=DEVICE)
    errors = torch.zeros(8, dtype=torch.int64, device=DEVICE)
    targets = None if targets is None else torch.tensor(targets, device=DEVICE)
    out = ha.hstu_attention_fwd(q, q, q, torch.tensor(offsets, device=DEVICE), max_len, 0.5, num_targets=targets,
                                config=SMALL, errors=errors, error_op=10)
    assert errors.tolist()[1:6] == record and out.shape == q.shape


# ---------------------------------------------------------------- configs and checks


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
@pytest.mark.parametrize("kernel", ["fwd", "dkdv", "dq"])
def test_default_configs(kernel, vendor):
    for dqk in (1, 16, 32, 40, 64, 100, 128, 256):
        for dv in (16, 64, 128, 256):
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                c = ha.default_config(dqk, dv, dtype, kernel=kernel, vendor=vendor)
                ha._check_config(c)
                assert ha._smem_estimate(c, dqk, dv, dtype.itemsize, kernel, vendor) <= ha.SMEM_BUDGET[vendor], c
    assert ha.default_config(64, 64, kernel=kernel, vendor=vendor).block_n >= \
        ha.default_config(256, 256, kernel=kernel, vendor=vendor).block_n


def test_config_and_argument_checks():
    q = torch.randn(8, 2, 16, device=DEVICE)
    offsets = torch.tensor([0, 5, 8], device=DEVICE)
    for bad in (HstuConfig(8, 16), HstuConfig(16, 24), HstuConfig(16, 16, 3), HstuConfig(16, 16, 4, 0)):
        with pytest.raises(ValueError):
            ha.hstu_attention_fwd(q, q, q, offsets, 8, 1.0, config=bad)
    with pytest.raises(ValueError, match="config"):
        ha.hstu_attention_fwd(q, q, q, offsets, 8, 1.0, config=(16, 16))
    with pytest.raises(ValueError, match="k must"):
        ha.hstu_attention_fwd(q, q[:, :, :8], q, offsets, 8, 1.0)
    with pytest.raises(ValueError, match="v must"):
        ha.hstu_attention_fwd(q, q, q[:7], offsets, 8, 1.0)
    with pytest.raises(ValueError, match="seq_offsets"):
        ha.hstu_attention_fwd(q, q, q, offsets.float(), 8, 1.0)
    with pytest.raises(ValueError, match="num_targets"):
        ha.hstu_attention_fwd(q, q, q, offsets, 8, 1.0, num_targets=torch.tensor([1], device=DEVICE))
    with pytest.raises(ValueError, match="grad_out"):
        ha.hstu_attention_bwd(q[:, :, :8], q, q, q, offsets, 8, 1.0)
    with pytest.raises(ValueError, match="q must"):
        ha.hstu_attention_fwd(q.to(torch.int32), q, q, offsets, 8, 1.0)
    with pytest.raises(ValueError, match="max_seq_len"):
        ha.hstu_attention_fwd(q, q, q, offsets, -1, 1.0)
