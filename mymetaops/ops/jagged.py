"""The jagged family's Python half: the public wrappers and the fake kernels. The checks, kernels,
autograd and FBGEMM's offset-returning composites are C++ (csrc/jagged/).

Names, schemas and semantics are FBGEMM's (`torch.ops.fbgemm.*`), so migrating is a namespace
change. A jagged tensor is `values` [total, D] (or [total]) with one offsets tensor per jagged
dimension: offsets[0] has B + 1 entries (sequence b is rows offsets[0][b] .. offsets[0][b + 1]),
int32 or int64. Its dense form is [B, max_lengths..., D]: shorter sequences are padded, longer ones
truncated. Values are float32, float16 or bfloat16 (float64 on the CPU); sums and products are
computed in fp32 and rounded once.

No host sync where the sizes are given: pass `max_lengths` / `max_L` / `total_L` /
`num_dense_output_rows`. `dense_to_jagged` without `total_L` and `jagged_index_select` without
`num_dense_output_rows` read a size back from the device (a sync on the GPU). Bad offset values
(negative, decreasing, past the end) raise on the CPU, naming the entry.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch

from mymetaops import _C, model  # _C: the schemas and C++ kernels
from mymetaops.configs import TritonGemmConfig, TritonJaggedConfig
from mymetaops.ops import dispatch

_ops = torch.ops.mymetaops
Offsets = "torch.Tensor | Sequence[torch.Tensor]"  # one tensor, or one per jagged dimension


def _as_list(offsets) -> list[torch.Tensor]:
    return [offsets] if isinstance(offsets, torch.Tensor) else list(offsets)


def _one(offsets) -> torch.Tensor:
    """The offsets of an op with one jagged dimension, given as a tensor or a list of one."""
    if isinstance(offsets, torch.Tensor):
        return offsets
    offsets = list(offsets)
    if len(offsets) != 1:
        raise ValueError(f"this op takes one jagged dimension: one offsets tensor, got {len(offsets)}")
    return offsets[0]


def jagged_to_padded_dense(values: torch.Tensor, offsets: Offsets, max_lengths: int | Sequence[int],
                           padding_value: float = 0.0) -> torch.Tensor:
    """[B, *max_lengths, D] (or [B, *max_lengths] for 1-D values): each sequence's rows, padded
    with `padding_value`, truncated past max_lengths. Differentiable in values."""
    lengths = [max_lengths] if isinstance(max_lengths, int) else list(max_lengths)
    return _ops.jagged_to_padded_dense(values, _as_list(offsets), lengths, padding_value)


def dense_to_jagged(dense: torch.Tensor, offsets: Offsets,
                    total_L: int | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(values [total_L, D], offsets): the rows of each sequence taken from the dense form; rows past
    the dense's lengths (or in no sequence) are 0. total_L None: the last offset, read back from
    the device (a host sync on the GPU); pass it to avoid one. Differentiable in dense."""
    return _ops.dense_to_jagged(dense, _as_list(offsets), total_L)


def jagged_dense_elementwise_add(x_values: torch.Tensor, x_offsets: Offsets, y: torch.Tensor) -> torch.Tensor:
    """Dense [B, *max_lengths, D]: x padded with 0, plus y."""
    return _ops.jagged_dense_elementwise_add(x_values, _as_list(x_offsets), y)


def jagged_dense_elementwise_add_jagged_output(x_values: torch.Tensor, x_offsets: Offsets,
                                               y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(values, offsets): x plus y at each row's position; rows past y's lengths keep x."""
    return _ops.jagged_dense_elementwise_add_jagged_output(x_values, _as_list(x_offsets), y)


def jagged_dense_elementwise_mul(x_values: torch.Tensor, x_offsets: Offsets,
                                 y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(values, offsets): x times y at each row's position; rows past y's lengths are 0."""
    return _ops.jagged_dense_elementwise_mul(x_values, _as_list(x_offsets), y)


def jagged_softmax(values: torch.Tensor, x_offsets: Offsets, max_L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, offsets): per sequence and column, a softmax over its first min(length, max_L)
    rows; later rows are 0."""
    return _ops.jagged_softmax(values, _one(x_offsets), max_L)


def jagged_dense_bmm(x_values: torch.Tensor, x_offsets: Offsets, y: torch.Tensor,
                     max_L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [total_L, N], offsets): x_values [total_L, K] times y[b] [K, N] per sequence, over its
    first min(length, max_L) rows; later rows are 0."""
    return _ops.jagged_dense_bmm(x_values, _one(x_offsets), y, max_L)


def jagged_jagged_bmm(x_values: torch.Tensor, y_values: torch.Tensor, x_offsets: Offsets,
                      max_L: int) -> torch.Tensor:
    """[B, M, N]: x_b^T . y_b over each sequence's first min(length, max_L) rows (x [total_L, M],
    y [total_L, N], one jagged layout)."""
    return _ops.jagged_jagged_bmm(x_values, y_values, _one(x_offsets), max_L)


def jagged_index_select(values: torch.Tensor, lengths: torch.Tensor, indices: torch.Tensor,
                        num_dense_output_rows: int | None = None) -> list[torch.Tensor]:
    """[values of the sequences indices[i], concatenated; their lengths]. num_dense_output_rows
    (the selected rows) None: computed from lengths (a host sync on the GPU). Differentiable in
    values (a sequence selected twice gets both gradients)."""
    return _ops.jagged_index_select(values, lengths, indices, num_dense_output_rows)


# ---- fake kernels (shapes for torch.compile / meta tensors; the checks are the C++ ones) -------

def _batch(offsets) -> int:
    return offsets[0].shape[0] - 1


@torch.library.register_fake("mymetaops::jagged_to_padded_dense")
def _to_padded_dense_fake(values, offsets, max_lengths, padding_value=0.0):
    _ops._jagged_to_padded_dense_check(values, offsets, max_lengths)
    return values.new_empty((_batch(offsets), *max_lengths, *values.shape[1:]))


@torch.library.register_fake("mymetaops::dense_to_jagged_forward")
def _dense_to_jagged_fake(dense, x_offsets, total_L=None):
    _ops._dense_to_jagged_check(dense, x_offsets, total_L)
    if total_L is None:
        total_L = torch.library.get_ctx().new_dynamic_size()
    inner = dense.shape[1 + len(x_offsets):]
    return dense.new_empty((total_L, *inner))


def _jagged_out_fake(x_values, x_offsets, y):
    _ops._jagged_dense_elementwise_check(x_values, x_offsets, y)
    return x_values.new_empty(x_values.shape)


torch.library.register_fake("mymetaops::jagged_dense_elementwise_add_jagged_output_forward")(_jagged_out_fake)
torch.library.register_fake("mymetaops::jagged_dense_elementwise_mul_forward")(_jagged_out_fake)


@torch.library.register_fake("mymetaops::jagged_dense_elementwise_add")
def _add_dense_fake(x_values, x_offsets, y):
    _ops._jagged_dense_elementwise_check(x_values, x_offsets, y)
    return y.new_empty(y.shape)  # contiguous, as the kernels write it


@torch.library.register_fake("mymetaops::jagged_softmax_forward")
def _softmax_fake(values, x_offsets, max_L):
    _ops._jagged_softmax_check(values, x_offsets, max_L)
    return values.new_empty(values.shape)


@torch.library.register_fake("mymetaops::jagged_softmax_backward")
def _softmax_backward_fake(grad_output, output, x_offsets, max_L):
    _ops._jagged_softmax_backward_check(grad_output, output, x_offsets, max_L)
    return output.new_empty(output.shape)


@torch.library.register_fake("mymetaops::jagged_dense_bmm_forward")
def _dense_bmm_fake(x_values, x_offsets, y, max_L):
    _ops._jagged_dense_bmm_check(x_values, x_offsets, y, max_L)
    return x_values.new_empty((x_values.shape[0], y.shape[2]))


@torch.library.register_fake("mymetaops::jagged_jagged_bmm")
def _jagged_bmm_fake(x_values, y_values, x_offsets, max_L):
    _ops._jagged_jagged_bmm_check(x_values, y_values, x_offsets, max_L)
    return x_values.new_empty((x_offsets.shape[0] - 1, x_values.shape[1], y_values.shape[1]))


@torch.library.register_fake("mymetaops::_jagged_dense_bmm_native")
def _dense_bmm_native_fake(x_values, x_offsets, y, max_L, config):
    return _dense_bmm_fake(x_values, x_offsets, y, max_L)


@torch.library.register_fake("mymetaops::_jagged_jagged_bmm_native")
def _jagged_bmm_native_fake(x_values, y_values, x_offsets, max_L, config):
    return _jagged_bmm_fake(x_values, y_values, x_offsets, max_L)


@torch.library.register_fake("mymetaops::jagged_index_select")
def _index_select_fake(values, lengths, indices, num_dense_output_rows=None):
    _ops._jagged_index_select_check(values, lengths, indices)
    rows = num_dense_output_rows
    if rows is None:
        rows = torch.library.get_ctx().new_dynamic_size()
    return [values.new_empty((rows, values.shape[1])), lengths.new_empty(indices.shape)]


@torch.library.register_fake("mymetaops::jagged_index_select_backward")
def _index_select_backward_fake(grad_output, lengths, indices, num_input_rows):
    _ops._jagged_index_select_backward_check(grad_output, lengths, indices, num_input_rows)
    return grad_output.new_empty((num_input_rows, grad_output.shape[1]))


# ---- the family's hooks into the GPU dispatch -----------------------------------------------------

def _exact_problem(op, fields):
    """The problem csrc/jagged/jagged_gpu.cpp passes on a miss (its Sizes, in order)."""
    batch, max_length, total, dim, n, dtype, offsets_dtype, align, levels = fields
    j = model.jagged
    return j.JaggedProblem(op, batch, max_length, total, dim, n, j.DTYPE_NAMES[dtype], j.INDEX_NAMES[offsets_dtype],
                           align, levels)


@functools.cache
def _triton_jagged():
    from mymetaops.triton import jagged as triton_jagged  # imports triton: lazily
    return triton_jagged


def _run_triton_jagged(op, config, *args):
    """Launch a Triton config with the arguments jagged_gpu.cpp passes (it checked them)."""
    t, j = _triton_jagged(), model.jagged
    if op in j.DENSE_OPS:
        kind, x, offsets, dense, out, max_length, padding_value, errors = args
        return t.jagged_dense(kind, x, offsets, dense, out, max_length, padding_value, TritonJaggedConfig(*config), errors)
    if op in (j.SOFTMAX, j.SOFTMAX_BACKWARD):
        values, offsets, max_length, out, grad, errors = args
        return t.jagged_softmax(values, offsets, max_length, out, TritonJaggedConfig(*config), grad_output=grad,
                                errors=errors)
    if op in (j.INDEX_SELECT, j.INDEX_SELECT_BACKWARD):
        values, input_offsets, output_offsets, indices, out, backward, errors = args
        return t.jagged_index_select(values, input_offsets, output_offsets, indices, out, backward,
                                     TritonJaggedConfig(*config), errors)
    if op == j.DENSE_BMM:
        x, offsets, y, out, max_length, errors = args
        return t.jagged_dense_bmm(x, offsets, y, out, max_length, TritonGemmConfig(*config), errors)
    x, y, offsets, out, max_length, errors = args
    return t.jagged_jagged_bmm(x, y, offsets, out, max_length, TritonGemmConfig(*config), errors)


def _native_bmm_kernels_are(vendor: str) -> bool:
    """The model names the build's native bmm kernels by its mirror (model.jagged.NATIVE_BMM_KERNELS):
    they are offered only where the two agree (not on the HIP-on-CUDA shim build, whose kernels are
    hip/'s)."""
    return list(_C._native_jagged_bmm_kernels()) == [row[0] for row in model.jagged.NATIVE_BMM_KERNELS[vendor]]


for _op in model.jagged.OPS:
    dispatch.register((_op,), functools.partial(_exact_problem, _op), _run_triton_jagged,
                      _native_bmm_kernels_are if _op in model.jagged.BMM_OPS else None)


__all__ = ["jagged_to_padded_dense", "dense_to_jagged", "jagged_dense_elementwise_add",
           "jagged_dense_elementwise_add_jagged_output", "jagged_dense_elementwise_mul", "jagged_softmax",
           "jagged_dense_bmm", "jagged_jagged_bmm", "jagged_index_select"]
