"""embedding_bag: the torch.nn.functional-compatible wrapper, fake kernels, and the family's hooks
into the GPU dispatch (how to rebuild a problem, how to launch a Triton config).

The schemas live in csrc/registration.cpp; the kernels (CPU, CUDA/HIP with the per-call dispatch,
autograd) are C++ (csrc/embedding_bag/). Only when the compiled library has no GPU kernels (a
CPU-only build on a GPU machine) do the GPU entry points below run instead, with Triton.
"""
from __future__ import annotations

import torch

from mymetaops import model
from mymetaops._backend import current_backend
from mymetaops.configs import TritonEmbeddingBagConfig
from mymetaops.ops import dispatch, errors

_ops = torch.ops.mymetaops
_embedding_bag_op = torch.ops.mymetaops.embedding_bag.default
MODES = {"sum": 0, "mean": 1}
FORWARD, BACKWARD, PSW_BACKWARD = model.embedding_bag.OPS
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 3, torch.int64: 4}
_DTYPE_NAMES = {0: "fp32", 1: "fp16", 2: "bf16", 3: "int32", 4: "int64"}
_INT32_MAX = 2**31 - 1
_INDEX_DTYPES = (torch.int32, torch.int64)


# ---- the public wrapper ------------------------------------------------------------------------

def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2.0,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None, *, validate=False):
    """Drop-in for `torch.nn.functional.embedding_bag` (same arguments, same meaning).

    Supported: mode "sum" and "mean", per_sample_weights (sum), 1-D input with offsets or 2-D input
    (fixed bag size), include_last_offset, padding_idx; fp32/fp16/bf16 tables (fp32 accumulation,
    output in the table's dtype); int32/int64 indices. Gradients flow to `weight` (dense) and to
    `per_sample_weights`.

    Bad index or offset values: on the CPU, an exception at once. On a GPU nothing is synchronized:
    the kernels never read outside the table (a bag with an out-of-range index comes out NaN) and
    record the bad value, which is raised at the next call on that device or by
    `mymetaops.check_errors()` (see mymetaops/ops/errors.py). validate=True (strict mode) waits for
    the call and raises at once: one stream synchronization per call.
    """
    if max_norm is not None or scale_grad_by_freq or sparse or mode not in MODES:
        _reject_unsupported(max_norm, scale_grad_by_freq, mode, sparse)
    if not isinstance(input, torch.Tensor):
        raise TypeError("embedding_bag: input must be a tensor of int32 or int64 indices")
    if per_sample_weights is not None:
        if per_sample_weights.shape != input.shape:
            raise ValueError("embedding_bag: per_sample_weights must have the shape of input "
                             "(one entry per index)")
        per_sample_weights = per_sample_weights.reshape(-1)
    if input.dim() == 2:
        input, offsets, include_last_offset = _fixed_size_bags(input, offsets)
    elif input.dim() != 1:
        raise ValueError("embedding_bag: input must be 1-D (with offsets) or 2-D (one bag per row)")
    elif offsets is None:
        raise ValueError("embedding_bag: offsets is required when input is 1-D")
    elif offsets.dtype != input.dtype and offsets.dtype in _INDEX_DTYPES and input.dtype in _INDEX_DTYPES:
        input, offsets = input.long(), offsets.long()  # as torch does: mixed widths promote to int64
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        if padding_idx < -weight.shape[0]:
            raise ValueError("embedding_bag: padding_idx must be within [-num_rows, num_rows)")
        padding_idx = padding_idx + weight.shape[0]
    out = _embedding_bag_op(weight, input, offsets, MODES[mode], per_sample_weights, padding_idx,
                            include_last_offset)
    if validate and out.is_cuda and not torch.compiler.is_compiling():
        errors.strict_check(out.device)
    return out


def _reject_unsupported(max_norm, scale_grad_by_freq, mode, sparse):
    if max_norm is not None:
        raise NotImplementedError("mymetaops.embedding_bag: max_norm is not supported; renormalize "
                                  "the table yourself or use torch.nn.functional.embedding_bag")
    if scale_grad_by_freq:
        raise NotImplementedError("mymetaops.embedding_bag: scale_grad_by_freq is not supported")
    if sparse:
        raise NotImplementedError("mymetaops.embedding_bag: sparse gradients are not supported; "
                                  "the gradient of weight is dense")
    if mode == "max":
        raise NotImplementedError("mymetaops.embedding_bag: mode='max' is not implemented yet; "
                                  "use mode='sum' or 'mean', or torch.nn.functional.embedding_bag")
    raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")


def _fixed_size_bags(input, offsets):
    """(indices, offsets in torch's form, include_last_offset=False) of a 2-D input: a bag per row."""
    if offsets is not None:
        raise ValueError("embedding_bag: offsets must be None when input is 2-D (each row is a "
                         "bag of fixed size)")
    num_bags, bag_size = input.shape
    indices = input.reshape(-1)
    if indices.dtype == torch.int32 and indices.numel() > _INT32_MAX:
        indices = indices.long()  # int32 offsets could not address the last bags
    if bag_size == 0:
        return indices, torch.zeros(num_bags, dtype=indices.dtype, device=input.device), False
    offsets = torch.arange(0, num_bags * bag_size, bag_size, dtype=indices.dtype, device=input.device)
    return indices, offsets, False


# ---- fake kernels (shapes for torch.compile / meta tensors; the checks are the C++ ones) -------

def _num_bags(offsets, include_last_offset):
    return offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]


@torch.library.register_fake("mymetaops::embedding_bag")
def _embedding_bag_fake(weight, indices, offsets, mode=0, per_sample_weights=None, padding_idx=-1,
                        include_last_offset=True):
    _ops._embedding_bag_check(weight, indices, offsets, mode, per_sample_weights, padding_idx,
                              include_last_offset)
    return weight.new_empty((_num_bags(offsets, include_last_offset), weight.shape[1]))


@torch.library.register_fake("mymetaops::embedding_bag_backward")
def _embedding_bag_backward_fake(grad_output, indices, offsets, num_rows, mode=0,
                                 per_sample_weights=None, padding_idx=-1, include_last_offset=True):
    _ops._embedding_bag_backward_check(grad_output, indices, offsets, num_rows, mode,
                                       per_sample_weights, padding_idx, include_last_offset)
    return grad_output.new_empty((num_rows, grad_output.shape[1]))


@torch.library.register_fake("mymetaops::embedding_bag_per_sample_weights_backward")
def _psw_backward_fake(grad_output, weight, indices, offsets, mode=0, padding_idx=-1,
                       include_last_offset=True):
    _ops._embedding_bag_per_sample_weights_backward_check(grad_output, weight, indices, offsets, mode,
                                                          padding_idx, include_last_offset)
    return weight.new_empty((indices.shape[0],))


@torch.library.register_fake("mymetaops::_embedding_bag_native")
def _native_fake(weight, indices, offsets, mode, per_sample_weights, padding_idx, include_last_offset,
                 config):
    return _embedding_bag_fake(weight, indices, offsets, mode, per_sample_weights, padding_idx,
                               include_last_offset)


# ---- the family's hooks into the GPU dispatch ---------------------------------------------------

def _exact_problem(exact):
    """The problem the C++ kernels describe on a cache miss (csrc/embedding_bag/embedding_bag_gpu.cpp)."""
    num_rows, dim, num_bags, num_indices, weight_dtype, index_dtype, mode, has_psw, align = exact
    return model.embedding_bag.EmbeddingBagProblem(
        num_rows=num_rows, dim=dim, num_bags=num_bags, num_indices=num_indices,
        weight_dtype=_DTYPE_NAMES[weight_dtype], index_dtype=_DTYPE_NAMES[index_dtype],
        mode="mean" if mode == MODES["mean"] else "sum", has_per_sample_weights=bool(has_psw),
        align_bytes=align)


def _triton():
    from mymetaops.triton import embedding_bag as triton_embedding_bag  # imports triton: lazily
    return triton_embedding_bag


def _run_triton(op, config, *args):
    """Launch a Triton config with the arguments the C++ kernels pass (embedding_bag_gpu.cpp)."""
    config = TritonEmbeddingBagConfig(*config)
    if op == FORWARD:
        weight, indices, offsets, mode, psw, padding_idx, last, record = args
        return _triton().embedding_bag_forward(weight, indices, offsets, mode, psw, padding_idx, last,
                                               config, record)
    if op == BACKWARD:
        grad_output, sorted_rows, sorted_bags, sorted_scales, num_rows = args
        return _triton().embedding_bag_backward(grad_output, sorted_rows, sorted_bags, sorted_scales,
                                                num_rows, config)
    grad_output, weight, indices, offsets, padding_idx, last, record = args
    return _triton().embedding_bag_per_sample_weights_backward(grad_output, weight, indices, offsets,
                                                               padding_idx, last, config, record)


dispatch.register(model.embedding_bag.OPS, _exact_problem, _run_triton)


def align_bytes(table: torch.Tensor) -> int:
    """Largest power of two <= 16 dividing the table's pointer, row bytes and row stride bytes."""
    if table.device.type == "meta":
        return 16
    elt = table.element_size()
    value = 16 | table.data_ptr() | table.shape[1] * elt | table.stride(0) * elt
    return value & -value


def problem_of(table, num_rows, indices, num_bags, mode, has_per_sample_weights):
    """The model's description of a call, as the C++ kernels compute it; `table` is the weight, or
    grad_output in the weight backward (which writes num_rows rows)."""
    return _exact_problem((num_rows, table.shape[1], num_bags, indices.shape[0],
                           _DTYPE_CODES[table.dtype], _DTYPE_CODES[indices.dtype], mode,
                           has_per_sample_weights, align_bytes(table)))


def backward_plan(indices, offsets, num_rows, mode, per_sample_weights, padding_idx, include_last_offset,
                  split=1):
    """The weight backward's plan from torch ops, with no host sync: lookups sorted by row, with
    their bag and scale (the native plan kernel computes the same: mymetaops/embedding_bag.h).

    Lookups outside every bag, of padding_idx or of rows outside the table get the key
    num_rows * split, so they sort last and the kernels skip them. With split > 1 (a power of two)
    row r's lookups go to the interleaved sub-rows r * split + position % split, which the
    backward kernel sums separately (see `reduce_split`). The stable sort keeps each (sub-)row's
    lookups in position order, which makes the summation order (and the result) deterministic.
    """
    n, num_bags = indices.numel(), _num_bags(offsets, include_last_offset)
    starts = offsets[:num_bags].long()
    positions = torch.arange(n, device=indices.device)
    bags = torch.searchsorted(starts, positions, right=True) - 1
    in_bag = bags >= 0
    if include_last_offset:
        in_bag &= positions < offsets[num_bags].long()
    counted = in_bag & ((indices != padding_idx) | (padding_idx < 0))
    used = counted & (indices >= 0) & (indices < num_rows)
    keys = torch.where(used, indices.long() * split + (positions & (split - 1)),
                       torch.full_like(positions, num_rows * split))
    sorted_rows, order = torch.sort(keys, stable=True)
    bags = bags.clamp_(min=0)
    scales = None
    if per_sample_weights is not None:
        scales = per_sample_weights.float()
    elif mode == MODES["mean"] and num_bags:
        counts = torch.zeros(num_bags, device=indices.device).index_add_(0, bags, counted.float())
        scales = counts.clamp_(min=1).reciprocal_()[bags]
    sorted_scales = None if scales is None else scales[order]
    return sorted_rows, bags[order], sorted_scales


def reduce_split(grad_weight, num_rows, split):
    """The gradient from the backward kernel's [num_rows * split, dim] partial sums."""
    if split == 1:
        return grad_weight
    return grad_weight.view(num_rows, split, -1).sum(1, dtype=torch.float32).to(grad_weight.dtype)


# ---- GPU entry points of a build without native kernels ------------------------------------------

def _decide(op, table, num_rows, indices, num_bags, mode, has_psw):
    problem = problem_of(table, num_rows, indices, num_bags, mode, has_psw)
    device = table.device.index if table.device.index is not None else torch.cuda.current_device()
    choice = dispatch.decide_bucket(op, device, current_backend(), problem).choice
    return choice, dispatch.config_ints(choice.config)


def _forward_without_native(weight, indices, offsets, mode=0, per_sample_weights=None, padding_idx=-1,
                            include_last_offset=True):
    _ops._embedding_bag_check(weight, indices, offsets, mode, per_sample_weights, padding_idx,
                              include_last_offset)
    dispatch.raise_recorded_error(weight.device)
    weight = weight if weight.stride(1) == 1 or weight.shape[1] == 1 else weight.contiguous()
    indices, offsets = indices.contiguous(), offsets.contiguous()
    psw = None if per_sample_weights is None else per_sample_weights.contiguous()
    choice, config = _decide(FORWARD, weight, weight.shape[0], indices,
                             _num_bags(offsets, include_last_offset), mode, psw is not None)
    if choice.backend == "vendor":
        return torch.ops.aten._embedding_bag_forward_only(weight, indices, offsets, False, mode, False,
                                                          psw, include_last_offset, padding_idx)[0]
    return _run_triton(FORWARD, config, weight, indices, offsets, mode, psw, padding_idx,
                       include_last_offset, dispatch.error_record(weight.device))


def _backward_without_native(grad_output, indices, offsets, num_rows, mode=0, per_sample_weights=None,
                             padding_idx=-1, include_last_offset=True):
    _ops._embedding_bag_backward_check(grad_output, indices, offsets, num_rows, mode,
                                       per_sample_weights, padding_idx, include_last_offset)
    dispatch.raise_recorded_error(grad_output.device)
    grad_output, indices, offsets = grad_output.contiguous(), indices.contiguous(), offsets.contiguous()
    _, config = _decide(BACKWARD, grad_output, num_rows, indices,
                        _num_bags(offsets, include_last_offset), mode, per_sample_weights is not None)
    split = model.embedding_bag.row_split(indices.numel(), num_rows,
                                          grad_output.shape[1] * grad_output.element_size())
    plan = backward_plan(indices, offsets, num_rows, mode, per_sample_weights, padding_idx,
                         include_last_offset, split)
    return reduce_split(_run_triton(BACKWARD, config, grad_output, *plan, num_rows * split), num_rows, split)


def _psw_backward_without_native(grad_output, weight, indices, offsets, mode=0, padding_idx=-1,
                                 include_last_offset=True):
    _ops._embedding_bag_per_sample_weights_backward_check(grad_output, weight, indices, offsets, mode,
                                                          padding_idx, include_last_offset)
    dispatch.raise_recorded_error(weight.device)
    weight = weight if weight.stride(1) == 1 or weight.shape[1] == 1 else weight.contiguous()
    grad_output, indices, offsets = grad_output.contiguous(), indices.contiguous(), offsets.contiguous()
    _, config = _decide(PSW_BACKWARD, weight, weight.shape[0], indices,
                        _num_bags(offsets, include_last_offset), mode, True)
    return _run_triton(PSW_BACKWARD, config, grad_output, weight, indices, offsets, padding_idx,
                       include_last_offset, dispatch.error_record(weight.device))


if not dispatch.native_available():
    torch.library.register_kernel("mymetaops::embedding_bag", "cuda", _forward_without_native)
    torch.library.register_kernel("mymetaops::embedding_bag_backward", "cuda", _backward_without_native)
    torch.library.register_kernel("mymetaops::embedding_bag_per_sample_weights_backward", "cuda",
                                  _psw_backward_without_native)

__all__ = ["embedding_bag", "backward_plan", "problem_of", "align_bytes", "MODES"]
