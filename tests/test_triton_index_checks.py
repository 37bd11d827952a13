"""The one-pass index/offsets summary (mymetaops/triton/index_checks.py) against a Python reference.

Interpreter on CPU tensors without a GPU, compiled on a GPU; imported by file path like
test_triton_embedding_bag.py.
"""
import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "_test_index_checks", Path(__file__).resolve().parents[1] / "mymetaops/triton/index_checks.py")
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
LIMITS = {torch.int32: 2**31 - 1, torch.int64: 2**63 - 1}


def reference(indices, offsets, num_rows):
    return [int(any(i < 0 for i in indices)), int(any(i >= num_rows for i in indices)),
            int(any(b < a for a, b in zip(offsets, offsets[1:]))), offsets[0], offsets[-1]]


def summary(indices, offsets, num_rows, dtype):
    return checks.index_summary(torch.tensor(indices, dtype=dtype, device=DEVICE),
                                torch.tensor(offsets, dtype=dtype, device=DEVICE), num_rows).tolist()


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    num_rows = draw(st.integers(0, 50))
    top = LIMITS[dtype]
    value = st.one_of(st.integers(-3, num_rows + 3), st.sampled_from([-top - 1, -1, top, 2**30]))
    indices = draw(st.lists(value, max_size=40))
    offsets = draw(st.lists(st.integers(-2, len(indices) + 2), min_size=1, max_size=12))
    if draw(st.booleans()):
        offsets.sort()
    return dtype, indices, offsets, num_rows


@given(cases())
def test_summary_matches_reference(case):
    dtype, indices, offsets, num_rows = case
    assert summary(indices, offsets, num_rows, dtype) == reference(indices, offsets, num_rows)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_summary_across_programs(dtype):
    """Several programs per input: a bad value in the last, partial block is still seen."""
    n = 3 * checks.SUMMARY_BLOCK + 5
    indices = torch.randint(0, 100, (n,), dtype=dtype)
    offsets = torch.arange(n + 1, dtype=dtype)
    assert summary(indices.tolist(), offsets.tolist(), 100, dtype) == [0, 0, 0, 0, n]
    indices[-1], offsets[-2] = 100, n + 1
    assert summary(indices.tolist(), offsets.tolist(), 100, dtype) == [0, 1, 1, 0, n]
    indices[-1], indices[0] = 5, -7
    assert summary(indices.tolist(), offsets.tolist(), 100, dtype) == [1, 0, 1, 0, n]


def test_summary_rejects_bad_shapes():
    with pytest.raises(ValueError, match="non-empty"):
        checks.index_summary(torch.tensor([1]), torch.tensor([], dtype=torch.int64), 3)
