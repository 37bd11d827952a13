"""embedding_bag: the torch.nn.functional-compatible wrapper, fake kernels, autograd and GPU dispatch.

The schemas live in csrc/registration.cpp. The CPU kernels are C++ (csrc/embedding_bag/). On GPU the
entry points below ask `mymetaops.model` for the fastest candidate (a native kernel config or a
Triton config) and run it; `MYMETAOPS_BACKEND` / `mymetaops.use_backend` force a backend.
"""
from __future__ import annotations

import functools

import torch

from mymetaops import model
from mymetaops._backend import current_backend

_ops = torch.ops.mymetaops
MODES = {"sum": 0, "mean": 1}
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                torch.int32: "int32", torch.int64: "int64"}


# ---- the public wrapper ------------------------------------------------------------------------

def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2.0,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None, *, validate=True):
    """Drop-in for `torch.nn.functional.embedding_bag` (same arguments, same meaning).

    Supported: mode "sum" and "mean", per_sample_weights (sum), 1-D input with offsets or 2-D input
    (fixed bag size), include_last_offset, padding_idx; fp32/fp16/bf16 tables (fp32 accumulation,
    output in the table's dtype); int32/int64 indices. Gradients flow to `weight` (dense) and to
    `per_sample_weights`.

    validate: on GPU, check index and offset values before the launch (one small reduction and a
    host sync) and raise a clear error. With validate=False nothing is synchronized; the kernels still
    never read outside the table: a bag holding an out-of-range index comes out NaN. CPU always checks.
    """
    _reject_unsupported(max_norm, norm_type, scale_grad_by_freq, mode, sparse)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError("embedding_bag: weight must be a 2-D tensor [num_rows, dim]")
    if per_sample_weights is not None and isinstance(input, torch.Tensor):
        if per_sample_weights.shape != input.shape:
            raise ValueError(f"embedding_bag: per_sample_weights must have the shape of input "
                             f"{tuple(input.shape)} (one entry per index), got "
                             f"{tuple(per_sample_weights.shape)}")
        per_sample_weights = per_sample_weights.reshape(-1)
    indices, offsets = _bags(input, offsets, include_last_offset)
    num_rows = weight.shape[0]
    if padding_idx is None:
        padding_idx = -1
    else:
        if not -num_rows <= padding_idx < num_rows:
            raise ValueError(f"embedding_bag: padding_idx must be within [-{num_rows}, {num_rows}), "
                             f"got {padding_idx}")
        padding_idx = padding_idx + num_rows if padding_idx < 0 else padding_idx
    if validate and indices.is_cuda and not torch.compiler.is_compiling():
        check_index_values(indices, offsets, num_rows)
    return _ops.embedding_bag(weight, indices, offsets, MODES[mode], per_sample_weights, padding_idx)


def _reject_unsupported(max_norm, norm_type, scale_grad_by_freq, mode, sparse):
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
    if mode not in MODES:
        raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")


def _bags(input, offsets, include_last_offset):
    """(indices, offsets with num_bags + 1 entries) from F.embedding_bag's two input forms."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"embedding_bag: input must be a tensor, got {type(input).__name__}")
    if input.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"embedding_bag: input must be int32 or int64, got {input.dtype}")
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None when input is 2-D (each row is a "
                             "bag of fixed size)")
        num_bags, bag_size = input.shape
        offsets = torch.arange(num_bags + 1, dtype=input.dtype, device=input.device) * bag_size
        return input.reshape(-1), offsets
    if input.dim() != 1:
        raise ValueError(f"embedding_bag: input must be 1-D (with offsets) or 2-D, got {input.dim()}-D")
    if offsets is None:
        raise ValueError("embedding_bag: offsets is required when input is 1-D")
    if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1:
        raise ValueError("embedding_bag: offsets must be a 1-D tensor")
    if offsets.dtype != input.dtype:
        if offsets.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"embedding_bag: offsets must be int32 or int64, got {offsets.dtype}")
        input, offsets = input.long(), offsets.long()  # as torch does: mixed widths promote to int64
    if offsets.device != input.device:
        raise ValueError(f"embedding_bag: input and offsets must be on one device, got "
                         f"{input.device} and {offsets.device}")
    if not include_last_offset:
        end = torch.full((1,), input.numel(), dtype=offsets.dtype, device=offsets.device)
        offsets = torch.cat([offsets, end])
    elif offsets.numel() == 0:
        raise ValueError("embedding_bag: with include_last_offset=True offsets needs at least one entry")
    return input, offsets


def check_index_values(indices, offsets, num_rows):
    """Raise a clear error for bad offsets or out-of-range indices (one kernel, one host sync)."""
    from mymetaops.triton.index_checks import index_summary  # imports triton: lazily
    negative, past_table, decreasing, first, last = index_summary(indices, offsets,
                                                                  num_rows).tolist()
    if first < 0:
        raise ValueError(f"embedding_bag: offsets must be non-negative, got offsets[0] = {first}")
    if decreasing:
        raise ValueError("embedding_bag: offsets must be non-decreasing")
    if last > indices.numel():
        raise ValueError(f"embedding_bag: the last offset ({last}) is past the end of the "
                         f"{indices.numel()} indices")
    if negative or past_table:
        used = indices[first:last]  # only indices inside a bag are looked up
        bad = ((used < 0) | (used >= num_rows)).nonzero()
        if bad.numel():
            pos = first + int(bad[0])
            raise IndexError(f"embedding_bag: index {int(indices[pos])} at position {pos} is out "
                             f"of range for a table of {num_rows} rows")


# ---- fake kernels (shapes for torch.compile / meta tensors) ------------------------------------

@torch.library.register_fake("mymetaops::embedding_bag")
def _embedding_bag_fake(weight, indices, offsets, mode=0, per_sample_weights=None, padding_idx=-1):
    _ops._embedding_bag_check(weight, indices, offsets, mode, per_sample_weights, padding_idx)
    return weight.new_empty((offsets.shape[0] - 1, weight.shape[1]))


@torch.library.register_fake("mymetaops::embedding_bag_backward")
def _embedding_bag_backward_fake(grad_output, indices, offsets, num_rows, mode=0,
                                 per_sample_weights=None, padding_idx=-1):
    return grad_output.new_empty((num_rows, grad_output.shape[1]))


@torch.library.register_fake("mymetaops::embedding_bag_per_sample_weights_backward")
def _psw_backward_fake(grad_output, weight, indices, offsets, mode=0, padding_idx=-1):
    return weight.new_empty((indices.shape[0],))


@torch.library.register_fake("mymetaops::_embedding_bag_native")
def _native_fake(weight, indices, offsets, mode, per_sample_weights, padding_idx, config):
    return weight.new_empty((offsets.shape[0] - 1, weight.shape[1]))


@torch.library.register_fake("mymetaops::_embedding_bag_backward_native")
def _native_backward_fake(grad_output, sorted_rows, sorted_bags, sorted_scales, num_rows, config):
    return grad_output.new_empty((num_rows, grad_output.shape[1]))


@torch.library.register_fake("mymetaops::_embedding_bag_per_sample_weights_backward_native")
def _native_psw_backward_fake(grad_output, weight, indices, offsets, padding_idx, config):
    return weight.new_empty((indices.shape[0],))


# ---- autograd ----------------------------------------------------------------------------------

def _setup_context(ctx, inputs, output):
    weight, indices, offsets, mode, per_sample_weights, padding_idx = inputs
    ctx.num_rows = weight.shape[0]
    ctx.mode, ctx.padding_idx = mode, padding_idx
    # ctx.needs_input_grad drops trailing arguments left at their defaults, so ask the tensors.
    ctx.weight_needs_grad = weight.requires_grad
    ctx.psw_needs_grad = per_sample_weights is not None and per_sample_weights.requires_grad
    ctx.save_for_backward(indices, offsets, per_sample_weights,
                          weight if ctx.psw_needs_grad else None)


def _backward(ctx, grad_output):
    indices, offsets, per_sample_weights, weight = ctx.saved_tensors
    grad_output = grad_output.contiguous()
    grad_weight = grad_psw = None
    if ctx.weight_needs_grad:
        grad_weight = _ops.embedding_bag_backward(grad_output, indices, offsets, ctx.num_rows,
                                                  ctx.mode, per_sample_weights, ctx.padding_idx)
    if ctx.psw_needs_grad:
        grad_psw = _ops.embedding_bag_per_sample_weights_backward(
            grad_output, weight, indices, offsets, ctx.mode, ctx.padding_idx)
    return grad_weight, None, None, None, grad_psw, None


torch.library.register_autograd("mymetaops::embedding_bag", _backward, setup_context=_setup_context)


# Double backward. Both gradient ops are linear in each tensor input, so their derivatives are the
# three ops again: with s_i the scale of lookup i (its per-sample weight, 1/count for mean, or 1),
#   grad_weight[r] = sum_{i: idx_i = r} s_i grad_out[bag_i]   -> d/d grad_out = embedding_bag(G),
#                                                                d/d s_i = <G[idx_i], grad_out[bag_i]>
#   grad_psw[i]    = <grad_out[bag_i], weight[idx_i]>         -> d/d grad_out = embedding_bag with
#                                                                psw = u, d/d weight = backward(psw = u)
# for upstream gradients G (a table) and u (one value per index).

def _backward_setup_context(ctx, inputs, output):
    grad_output, indices, offsets, num_rows, mode, per_sample_weights, padding_idx = inputs
    ctx.mode, ctx.padding_idx = mode, padding_idx
    ctx.grad_output_needs_grad = grad_output.requires_grad
    ctx.psw_needs_grad = per_sample_weights is not None and per_sample_weights.requires_grad
    ctx.save_for_backward(indices, offsets, per_sample_weights,
                          grad_output if ctx.psw_needs_grad else None)


def _backward_backward(ctx, grad):
    indices, offsets, per_sample_weights, grad_output = ctx.saved_tensors
    grad = grad.contiguous()
    grad_grad_output = grad_psw = None
    if ctx.grad_output_needs_grad:
        psw = None if per_sample_weights is None else per_sample_weights.to(grad.dtype)
        grad_grad_output = _ops.embedding_bag(grad, indices, offsets, ctx.mode, psw, ctx.padding_idx)
    if ctx.psw_needs_grad:
        grad_psw = _ops.embedding_bag_per_sample_weights_backward(
            grad_output, grad, indices, offsets, ctx.mode, ctx.padding_idx
        ).to(per_sample_weights.dtype)
    return grad_grad_output, None, None, None, None, grad_psw, None


torch.library.register_autograd("mymetaops::embedding_bag_backward", _backward_backward,
                                setup_context=_backward_setup_context)


def _psw_backward_setup_context(ctx, inputs, output):
    grad_output, weight, indices, offsets, mode, padding_idx = inputs
    ctx.num_rows, ctx.padding_idx, ctx.grad_output_dtype = weight.shape[0], padding_idx, grad_output.dtype
    ctx.grad_output_needs_grad = grad_output.requires_grad
    ctx.weight_needs_grad = weight.requires_grad
    ctx.save_for_backward(indices, offsets, weight, grad_output if ctx.weight_needs_grad else None)


def _psw_backward_backward(ctx, grad):
    indices, offsets, weight, grad_output = ctx.saved_tensors
    scales = grad.to(weight.dtype).contiguous()
    grad_grad_output = grad_weight = None
    if ctx.grad_output_needs_grad:
        grad_grad_output = _ops.embedding_bag(weight, indices, offsets, MODES["sum"], scales,
                                              ctx.padding_idx).to(ctx.grad_output_dtype)
    if ctx.weight_needs_grad:
        grad_weight = _ops.embedding_bag_backward(
            grad_output.to(weight.dtype).contiguous(), indices, offsets, ctx.num_rows, MODES["sum"],
            scales, ctx.padding_idx)
    return grad_grad_output, grad_weight, None, None, None, None


torch.library.register_autograd("mymetaops::embedding_bag_per_sample_weights_backward",
                                _psw_backward_backward, setup_context=_psw_backward_setup_context)


# ---- GPU entry points: the model picks the kernel ----------------------------------------------

@functools.lru_cache(maxsize=None)
def native_available() -> bool:
    """Whether this build of mymetaops._C has native GPU kernels (a CPU-only build has none)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("mymetaops::_embedding_bag_native", "CUDA")


@functools.lru_cache(maxsize=16)
def _hardware(device_index: int) -> model.HardwareSpec:
    return model.detect_hardware(torch.device("cuda", device_index))


def _align_bytes(*tensors_and_row_bytes) -> int:
    """Largest power of two <= 16 that divides every given pointer / byte count."""
    align = 16
    for value in tensors_and_row_bytes:
        value = value.data_ptr() if isinstance(value, torch.Tensor) else int(value)
        while align > 1 and value % align:
            align //= 2
    return align


def problem_of(table, indices, offsets, mode, has_per_sample_weights, num_rows=None):
    """The model's description of one embedding_bag call (tensors may be meta tensors).

    table: the weight (forward) or grad_output (backward: rows are then written, num_rows given).
    """
    row_bytes = table.shape[1] * table.element_size()
    align = 16 if table.device.type == "meta" else _align_bytes(
        table, row_bytes, table.stride(0) * table.element_size())
    return model.EmbeddingBagProblem(
        num_rows=table.shape[0] if num_rows is None else num_rows, dim=table.shape[1],
        num_bags=offsets.shape[0] - 1, num_indices=indices.shape[0],
        weight_dtype=_DTYPE_NAMES[table.dtype], index_dtype=_DTYPE_NAMES[indices.dtype],
        mode="mean" if mode == MODES["mean"] else "sum",
        has_per_sample_weights=has_per_sample_weights, align_bytes=align)


def decide(op: str, problem, device: torch.device) -> "model.Decision":
    return model.decide(op, problem, _hardware(device.index if device.index is not None
                                               else torch.cuda.current_device()),
                        backend=current_backend(), native_available=native_available())


def _triton():
    from mymetaops.triton import embedding_bag as triton_embedding_bag  # imports triton: lazily
    return triton_embedding_bag


@torch.library.register_kernel("mymetaops::embedding_bag", "cuda")
def _embedding_bag_cuda(weight, indices, offsets, mode=0, per_sample_weights=None, padding_idx=-1):
    _ops._embedding_bag_check(weight, indices, offsets, mode, per_sample_weights, padding_idx)
    weight = weight if weight.stride(1) == 1 or weight.shape[1] == 1 else weight.contiguous()
    indices, offsets = indices.contiguous(), offsets.contiguous()
    if per_sample_weights is not None:
        per_sample_weights = per_sample_weights.contiguous()
    problem = problem_of(weight, indices, offsets, mode, per_sample_weights is not None)
    choice = decide("embedding_bag", problem, weight.device).choice
    if choice.backend == "native":
        return _ops._embedding_bag_native(weight, indices, offsets, mode, per_sample_weights,
                                          padding_idx, choice.config.as_list())
    return _triton().embedding_bag_forward(weight, indices, offsets, mode, per_sample_weights,
                                           padding_idx, choice.config)


def backward_plan(indices, offsets, num_rows, mode, per_sample_weights, padding_idx):
    """Lookups sorted by row, with their bag and scale: the input of every GPU backward kernel.

    Lookups outside every bag, of padding_idx or of rows outside the table get the key num_rows, so
    they sort last and the kernels skip them. The stable sort keeps each row's lookups in position
    order, which makes the summation order (and the result) deterministic.
    """
    positions = torch.arange(indices.numel(), device=indices.device)
    bags = torch.searchsorted(offsets.long(), positions, right=True) - 1
    num_bags = offsets.numel() - 1
    used = (bags >= 0) & (bags < num_bags) & (indices >= 0) & (indices < num_rows)
    if padding_idx >= 0:
        used &= indices != padding_idx
    keys = torch.where(used, indices, torch.full_like(indices, num_rows))
    sorted_rows, order = torch.sort(keys, stable=True)
    sorted_bags = bags[order]
    scales = None
    if per_sample_weights is not None:
        scales = per_sample_weights.float()
    elif mode == MODES["mean"]:
        counts = torch.bincount(bags[used], minlength=num_bags).clamp_(min=1)
        scales = 1.0 / counts.float()[bags.clamp(0, max(num_bags - 1, 0))]
    sorted_scales = scales[order] if scales is not None else None
    return sorted_rows, sorted_bags, sorted_scales


def _check_grad_output(grad_output, offsets, op):
    if grad_output.dim() != 2 or grad_output.shape[0] != offsets.shape[0] - 1:
        raise ValueError(f"{op}: grad_output must be [num_bags={offsets.shape[0] - 1}, dim], got "
                         f"{tuple(grad_output.shape)}")


@torch.library.register_kernel("mymetaops::embedding_bag_backward", "cuda")
def _embedding_bag_backward_cuda(grad_output, indices, offsets, num_rows, mode=0,
                                 per_sample_weights=None, padding_idx=-1):
    _check_grad_output(grad_output, offsets, "embedding_bag_backward")
    grad_output = grad_output.contiguous()
    rows, bags, scales = backward_plan(indices, offsets, num_rows, mode, per_sample_weights,
                                       padding_idx)
    problem = problem_of(grad_output, indices, offsets, mode, per_sample_weights is not None,
                         num_rows=num_rows)
    choice = decide("embedding_bag_backward", problem, grad_output.device).choice
    if choice.backend == "native":
        return _ops._embedding_bag_backward_native(grad_output, rows, bags, scales, num_rows,
                                                   choice.config.as_list())
    return _triton().embedding_bag_backward(grad_output, rows, bags, scales, num_rows, choice.config)


@torch.library.register_kernel("mymetaops::embedding_bag_per_sample_weights_backward", "cuda")
def _psw_backward_cuda(grad_output, weight, indices, offsets, mode=0, padding_idx=-1):
    _ops._embedding_bag_check(weight, indices, offsets, mode, None, padding_idx)
    if mode != MODES["sum"]:
        raise ValueError("embedding_bag_per_sample_weights_backward: per_sample_weights are only "
                         "supported with mode='sum'")
    _check_grad_output(grad_output, offsets, "embedding_bag_per_sample_weights_backward")
    grad_output = grad_output.contiguous().to(weight.dtype)
    weight = weight if weight.stride(1) == 1 or weight.shape[1] == 1 else weight.contiguous()
    indices, offsets = indices.contiguous(), offsets.contiguous()
    problem = problem_of(weight, indices, offsets, mode, has_per_sample_weights=True)
    choice = decide("embedding_bag_per_sample_weights_backward", problem, weight.device).choice
    if choice.backend == "native":
        return _ops._embedding_bag_per_sample_weights_backward_native(
            grad_output, weight, indices, offsets, padding_idx, choice.config.as_list())
    return _triton().embedding_bag_per_sample_weights_backward(grad_output, weight, indices,
                                                               offsets, padding_idx, choice.config)


__all__ = ["embedding_bag", "backward_plan", "check_index_values", "problem_of", "decide",
           "native_available"]
