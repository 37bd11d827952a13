"""The attention family: HSTU attention and softmax attention over jagged sequences (public
wrappers, argument checks, the CPU and CUDA kernels, fake kernels and autograd).

Layout (generative-recommenders' `hstu_mha`): q, k [total_L, H, Dqk], v [total_L, H, Dv], bf16 /
fp16 (fp32 and, on the CPU, fp64 too), seq_offsets [B + 1] int32 / int64 with seq_offsets[0] = 0,
seq_offsets[B] = total_L and every length <= max_seq_len; out [total_L, H, Dv] in q's dtype,
products accumulated in fp32.

* `hstu_attention`: out_i = sum_j mask(i, j) silu(alpha q_i . k_j) / max_seq_len v_j, no softmax.
  The mask is `hstu_mha`'s: causal (j <= i, or every j when causal=False), `num_targets[b]` last
  items of a sequence see the history and themselves only, `max_attn_len` > 0 a local window of
  that many earlier positions, `contextual_seq_len` leading rows that see and are seen by the whole
  history. `hstu_mha` takes that package's argument order.
* `jagged_attention`: softmax(scale q_i . k_j) over the same sequence (causal: j <= i), scale None
  = 1 / sqrt(Dqk); the log-sum-exp of each row is kept for the backward.

Kernels: on a GPU, the model (mymetaops/model/attention.py) chooses per bucket of problems between
the native forward kernels (csrc/include/mymetaops/attention.h: cuda/attention/ on Hopper,
hip/attention/ on CDNA; unmasked attention in bf16 / fp16; the CDNA ones withheld until they run
on AMD hardware, see mymetaops/model/attention.py) and the Triton kernels' tiles
(mymetaops/triton/hstu_attention.py, jagged_attention.py), which run everything else; the backward
runs the native dK / dV kernel (Hopper, cuda/attention/dkdv.cu) beside Triton's dq or the native dQ
kernel (dq.cu) where the model offers them, else Triton's; `mymetaops.explain` says why. On the
CPU, a per-sequence torch composite in fp32 (fp64 for fp64 inputs). Eager calls on CUDA tensors skip the custom op's Python round trips (_EagerHstu). No
host sync on the GPU: shapes are checked on the host; offsets and num_targets values by the forward
launch itself, which records the first bad entry on the device (raised by the next call,
`mymetaops.check_errors()` or validate=True; the kernels clamp what they read meanwhile). On the
CPU bad values raise at once.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from mymetaops import _C, model  # noqa: F401  (_C: the schemas)
from mymetaops._backend import current_backend
from mymetaops.ops import dispatch, errors

_ops = torch.ops.mymetaops
_FLOATS_GPU = (torch.float16, torch.bfloat16, torch.float32)
_FLOATS_CPU = _FLOATS_GPU + (torch.float64,)
_INDEX = (torch.int32, torch.int64)


@functools.cache
def _triton():
    from mymetaops.triton import attention_checks, hstu_attention, jagged_attention  # imports triton: lazily
    return attention_checks, hstu_attention, jagged_attention


# ---- argument checks (shapes and dtypes only: nothing read from the device) ---------------------

def _check(name: str, q, k, v, seq_offsets, max_seq_len: int, num_targets=None) -> None:
    shapes = q.shape, k.shape, v.shape
    for what, shape in zip("qkv", shapes):
        if len(shape) != 3:
            raise ValueError(f"{name}: {what} must be [total_L, H, D], got shape {tuple(shape)}")
    (qt, qh, qd), (kt, kh, kd), (vt, vh, _) = shapes
    dtype, device = q.dtype, q.device
    floats = _FLOATS_CPU if device.type == "cpu" else _FLOATS_GPU
    if dtype not in floats or k.dtype != dtype or v.dtype != dtype:
        raise TypeError(f"{name}: q, k, v must share one dtype of {', '.join(map(str, floats))}; "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not qt == kt == vt:
        raise ValueError(f"{name}: q, k, v must have the same rows (total_L), got {qt}, {kt}, {vt}")
    if not qh == kh == vh:
        raise ValueError(f"{name}: q, k, v must have the same heads, got {qh}, {kh}, {vh}")
    if qd != kd:
        raise ValueError(f"{name}: q and k must have the same head dim, got {qd} and {kd}")
    if seq_offsets.dim() != 1 or seq_offsets.numel() < 1 or seq_offsets.dtype not in _INDEX:
        raise ValueError(f"{name}: seq_offsets must be a 1-D int32 / int64 tensor of B + 1 >= 1 entries, "
                         f"got {seq_offsets.dtype} of shape {tuple(seq_offsets.shape)}")
    for what, t in (("k", k), ("v", v), ("seq_offsets", seq_offsets)):
        if t.device != device:
            raise ValueError(f"{name}: {what} is on {t.device}, q on {device}")
    if max_seq_len < 0:
        raise ValueError(f"{name}: max_seq_len must be >= 0, got {max_seq_len}")
    if num_targets is not None:
        batch = seq_offsets.numel() - 1
        if num_targets.dim() != 1 or num_targets.numel() != batch or num_targets.dtype not in _INDEX:
            raise ValueError(f"{name}: num_targets must be a 1-D int32 / int64 tensor of B = {batch} entries, "
                             f"got {num_targets.dtype} of shape {tuple(num_targets.shape)}")
        if num_targets.device != device:
            raise ValueError(f"{name}: num_targets is on {num_targets.device}, q on {device}")
    if qt and qh:
        for what, t in (("q", q), ("k", k), ("v", v)):
            rows, heads, last = t.stride()
            if last != 1 and t.shape[2]:
                raise ValueError(f"{name}: {what}'s last dim must be contiguous (stride 1), got strides {t.stride()}")
            # The GPU kernels' offsets within a tile are int32 (up to 256 rows of a tile).
            if device.type != "cpu" and max(rows, heads) * 256 >= 2**31:
                raise ValueError(f"{name}: {what}'s strides {t.stride()} are too large for the GPU kernels "
                                 "(row and head strides x 256 must be < 2^31)")


def _check_values_cpu(name: str, seq_offsets, num_targets, total: int, max_seq_len: int) -> list[int]:
    """The offsets as ints, after checking their values (CPU tensors: no sync)."""
    offsets = seq_offsets.tolist()
    if offsets[0] != 0:
        raise ValueError(f"{name}: seq_offsets[0] = {offsets[0]} must be 0 (sequences start at row 0)")
    for b in range(1, len(offsets)):
        if offsets[b] < offsets[b - 1]:
            raise ValueError(f"{name}: seq_offsets must be non-decreasing, but seq_offsets[{b}] = {offsets[b]} "
                             f"is below seq_offsets[{b - 1}] = {offsets[b - 1]}")
        if offsets[b] - offsets[b - 1] > max_seq_len:
            raise ValueError(f"{name}: sequence {b - 1} has {offsets[b] - offsets[b - 1]} rows, more than "
                             f"max_seq_len = {max_seq_len}")
    if offsets[-1] != total:
        raise ValueError(f"{name}: seq_offsets[{len(offsets) - 1}] = {offsets[-1]} must be total_L = {total} "
                         "(the rows of q, k and v)")
    if num_targets is not None:
        for b, t in enumerate(num_targets.tolist()):
            if not 0 <= t <= offsets[b + 1] - offsets[b]:
                raise ValueError(f"{name}: num_targets[{b}] = {t} is not in [0, {offsets[b + 1] - offsets[b]}], "
                                 "the length of its sequence")
    return offsets


# ---- CPU kernels: per-sequence composites ----------------------------------------------------------

def hstu_mask(length: int, causal: bool, num_targets: int | None, max_attn_len: int, contextual_seq_len: int,
              device=None) -> torch.Tensor:
    """[length, length] bool: which (i, j) of one sequence hstu_attention adds (hstu_mha's mask)."""
    pos = torch.arange(length, device=device)
    ids, top = pos, length
    if contextual_seq_len > 0:  # the contextual rows share id 0; the history starts at id 1
        ids = (pos - contextual_seq_len + 1).clamp(min=0)
        top = length - contextual_seq_len + 1
    if num_targets is not None:  # targets take the id of the first target: they see no other target
        top -= num_targets
        ids = ids.clamp(max=top)
    dist = ids[:, None] - ids[None, :]
    if not causal:
        dist = dist.abs()
    valid = (dist > 0) | torch.eye(length, dtype=torch.bool, device=device)
    if max_attn_len > 0:
        valid &= dist <= max_attn_len
    if contextual_seq_len > 0:
        valid |= (ids[:, None] == 0) & (ids[None, :] < top)
    return valid


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _per_sequence(offsets, q, fn, empty):
    """fn(b, start, end) for every sequence, concatenated along dim 0 (offsets checked: they cover
    the rows); empty(n) stands for a sequence of n = 0 rows."""
    parts = [fn(b, offsets[b], offsets[b + 1]) for b in range(len(offsets) - 1) if offsets[b + 1] > offsets[b]]
    return torch.cat(parts) if parts else empty


def _hstu_cpu_composite(q, k, v, offsets, max_seq_len, alpha, causal, targets, max_attn_len, contextual_seq_len):
    """Differentiable torch composite (the CPU forward and, under autograd, its backward)."""
    ct = _compute_dtype(q.dtype)

    def one(b, s, e):
        qb, kb, vb = (t[s:e].to(ct).transpose(0, 1) for t in (q, k, v))  # [H, L, D]
        mask = hstu_mask(e - s, causal, None if targets is None else targets[b], max_attn_len, contextual_seq_len)
        p = F.silu(alpha * qb @ kb.transpose(1, 2)) / max_seq_len * mask
        return (p @ vb).transpose(0, 1)
    return _per_sequence(offsets, q, one, q.new_zeros(0, q.shape[1], v.shape[2], dtype=ct))


def _hstu_cpu_args(q, seq_offsets, num_targets, max_seq_len):
    offsets = _check_values_cpu("hstu_attention", seq_offsets, num_targets, q.shape[0], max_seq_len)
    return offsets, None if num_targets is None else num_targets.tolist()


@torch.library.impl("mymetaops::hstu_attention", "CPU")
def _hstu_cpu(q, k, v, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None, max_attn_len=0,
              contextual_seq_len=0):
    _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
    offsets, targets = _hstu_cpu_args(q, seq_offsets, num_targets, max_seq_len)
    return _hstu_cpu_composite(q, k, v, offsets, max_seq_len, alpha, causal, targets, max_attn_len,
                               contextual_seq_len).to(q.dtype)


def _grads(out, leaves, grad_output):
    """The composite's gradients in the leaves' dtypes (0 where a leaf took no part: no sequences)."""
    grads = (torch.autograd.grad(out, leaves, grad_output.to(out.dtype), allow_unused=True) if out.requires_grad
             else [None] * len(leaves))
    return tuple(g.to(t.dtype) if g is not None else torch.zeros_like(t) for g, t in zip(grads, leaves))


@torch.library.impl("mymetaops::hstu_attention_backward", "CPU")
def _hstu_backward_cpu(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                       contextual_seq_len):
    _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
    offsets, targets = _hstu_cpu_args(q, seq_offsets, num_targets, max_seq_len)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = _hstu_cpu_composite(*leaves, offsets, max_seq_len, alpha, causal, targets, max_attn_len,
                                  contextual_seq_len)
        return _grads(out, leaves, grad_output)


def _scale_of(q, scale):
    return 1.0 / math.sqrt(q.shape[2]) if scale is None else float(scale)


def _softmax_cpu_composite(q, k, v, offsets, causal, scale):
    """(out [total_L, H, Dv], lse [total_L, H]) as a differentiable torch composite."""
    ct = _compute_dtype(q.dtype)

    def one(b, s, e):
        qb, kb, vb = (t[s:e].to(ct).transpose(0, 1) for t in (q, k, v))
        scores = scale * qb @ kb.transpose(1, 2)
        if causal:
            scores = scores.masked_fill(~torch.ones(e - s, e - s, dtype=torch.bool).tril(), float("-inf"))
        out = (torch.softmax(scores, -1) @ vb).transpose(0, 1)
        return torch.cat([out, torch.logsumexp(scores, -1).t().unsqueeze(2)], 2)  # lse as a last column
    both = _per_sequence(offsets, q, one, q.new_zeros(0, q.shape[1], v.shape[2] + 1, dtype=ct))
    return both[..., :-1], both[..., -1]


@torch.library.impl("mymetaops::jagged_attention", "CPU")
def _softmax_cpu(q, k, v, seq_offsets, max_seq_len, causal=True, scale=None):
    _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
    offsets = _check_values_cpu("jagged_attention", seq_offsets, None, q.shape[0], max_seq_len)
    out, lse = _softmax_cpu_composite(q, k, v, offsets, causal, _scale_of(q, scale))
    return out.to(q.dtype).contiguous(), lse.t().float().contiguous()


@torch.library.impl("mymetaops::jagged_attention_backward", "CPU")
def _softmax_backward_cpu(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale):
    _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
    offsets = _check_values_cpu("jagged_attention", seq_offsets, None, q.shape[0], max_seq_len)
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        o, _ = _softmax_cpu_composite(*leaves, offsets, causal, _scale_of(q, scale))
        return _grads(o, leaves, grad_output)


# ---- CUDA kernels: native or Triton, as the model decides -------------------------------------------

HSTU_KIND, SOFTMAX_KIND = 0, 1  # AttentionKind of csrc/include/mymetaops/attention.h


@functools.cache
def _native_kernels_known(vendor: str) -> bool:
    """The build's native kernels are the model's mirror for this vendor (not on the HIP-on-CUDA
    shim build, whose kernels are hip/'s; none on a CPU-only build)."""
    built = list(_C._native_attention_kernels())
    return bool(built) and built == [row.name for row in model.attention.NATIVE_KERNELS.get(vendor, ())]


_DTYPE_IDS = {torch.bfloat16: model.attention.DTYPE_IDS["bf16"], torch.float16: model.attention.DTYPE_IDS["fp16"],
              torch.float32: model.attention.DTYPE_IDS["fp32"]}


@functools.lru_cache(maxsize=4096)
def _decided(op: str, device_index: int, backend: str, key: tuple):
    """("native", kernel index) or ("triton", the kernel's tiles or None = its defaults) for a
    bucket of problems, decided once per bucket (as the C++ dispatch does for the other families)."""
    family = model.get_family("attention")
    hw = dispatch.hardware(device_index)
    choice = model.decide(op, family.problem_from_key(op, key), hw, backend, _native_kernels_known(hw.vendor)).choice
    c = choice.config
    if choice.backend == "native":
        return "native", c.kernel
    if c.kernel_defaults:
        return "triton", None
    _, hstu, softmax = _triton()
    tiles = hstu.HstuConfig if op == "hstu_attention" else softmax.AttentionConfig
    return "triton", tiles(c.block_m, c.block_n, c.num_warps, c.num_stages)


def _choice(op, q, v, seq_offsets, max_seq_len, causal, masked=False):
    total, heads, dqk = q.shape
    key = model.attention.bucket_key(heads, dqk, v.shape[2], _DTYPE_IDS[q.dtype], causal, masked,
                                     seq_offsets.shape[0] - 1, max_seq_len, total)
    return _decided(op, q.device.index, current_backend(), key)


def _hstu_forward_gpu(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                      contextual_seq_len):
    """The GPU forward after _check: raise what an earlier kernel recorded (no sync), then the native
    or Triton forward, which checks the offsets' values into the error record itself."""
    masked = num_targets is not None or max_attn_len > 0 or contextual_seq_len > 0
    backend, config = _choice("hstu_attention", q, v, seq_offsets, max_seq_len, causal, masked)
    if backend == "native":
        return _C._attention_forward_native(q, k, v, seq_offsets, max_seq_len, HSTU_KIND, alpha, causal, config)[0]
    checks, hstu, _ = _triton()
    dispatch.raise_recorded_error(q.device)
    return hstu.forward(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                        contextual_seq_len, config, dispatch.error_record(q.device), checks.OP_HSTU_ATTENTION)


def _tma_ready(*tensors) -> bool:
    """Unit last strides, row and head strides in 16-byte multiples and 16-byte aligned data (the
    native dK / dV kernel's TMA loads); other layouts take the Triton backward."""
    return all(t.stride(2) == 1 and t.stride(0) % 8 == 0 and t.stride(1) % 8 == 0 and t.data_ptr() % 16 == 0
               for t in tensors)


def _native_backward(op, q, v, grad_output, seq_offsets, max_seq_len, causal, masked, *tensors) -> int | None:
    """The native backward's kernel (model.attention.NATIVE_BACKWARD's index) when the model chose one
    for this bucket and the rows are ones it covers (every row is in a sequence when there is one and
    max_seq_len > 0), else None (the Triton backward)."""
    if q.shape[0] == 0 or seq_offsets.shape[0] < 2 or max_seq_len <= 0:
        return None
    backend, kernel = _choice(op, q, v, seq_offsets, max_seq_len, causal, masked)
    return kernel if backend == "native" and _tma_ready(q, v, grad_output, *tensors) else None


def _native_backward_call(kernel: int, args: tuple, triton_dq) -> tuple:
    """(dq, dk, dv) of NATIVE_BACKWARD[kernel]: dQ fused into the dK / dV kernel, or that kernel
    beside the native dQ kernel or beside Triton's dq (triton_dq())."""
    if kernel == model.attention.NATIVE_FUSED:
        return _C._attention_backward_native(*args)
    dk, dv = _C._attention_dkdv_native(*args)
    return (_C._attention_dq_native(*args) if kernel == model.attention.NATIVE_DQ else triton_dq()), dk, dv


def _hstu_backward_gpu(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                       contextual_seq_len):
    hstu = _triton()[1]
    masked = num_targets is not None or max_attn_len > 0 or contextual_seq_len > 0
    kernel = _native_backward("hstu_attention_backward", q, v, grad_output, seq_offsets, max_seq_len, causal, masked, k)
    if kernel is None:
        return hstu.backward(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                             contextual_seq_len)
    args = (grad_output, q, k, v, seq_offsets, max_seq_len, HSTU_KIND, alpha, causal)
    return _native_backward_call(kernel, args, lambda: hstu.backward_dq(grad_output, q, k, v, seq_offsets,
                                                                        max_seq_len, alpha, causal))


def _softmax_forward_gpu(q, k, v, seq_offsets, max_seq_len, causal, scale):
    backend, config = _choice("jagged_attention", q, v, seq_offsets, max_seq_len, causal)
    if backend == "native":
        return _C._attention_forward_native(q, k, v, seq_offsets, max_seq_len, SOFTMAX_KIND, _scale_of(q, scale),
                                            causal, config)
    checks, _, softmax = _triton()
    dispatch.raise_recorded_error(q.device)
    return softmax.forward(q, k, v, seq_offsets, max_seq_len, causal, _scale_of(q, scale), config,
                           dispatch.error_record(q.device), checks.OP_JAGGED_ATTENTION)


def _softmax_backward_gpu(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale):
    softmax, scale = _triton()[2], _scale_of(q, scale)
    kernel = _native_backward("jagged_attention_backward", q, v, grad_output, seq_offsets, max_seq_len, causal, False, k)
    if kernel is None:
        return softmax.backward(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale)
    lse = lse.contiguous()
    delta = softmax.backward_delta(grad_output, out)
    args = (grad_output, q, k, v, seq_offsets, max_seq_len, SOFTMAX_KIND, scale, causal, lse, delta)
    return _native_backward_call(kernel, args, lambda: softmax.backward_dq(grad_output, q, k, v, lse, delta, seq_offsets,
                                                                           max_seq_len, causal, scale))


@torch.library.impl("mymetaops::hstu_attention", "CUDA")
def _hstu_cuda(q, k, v, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None, max_attn_len=0,
               contextual_seq_len=0):
    _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
    return _hstu_forward_gpu(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                             contextual_seq_len)


@torch.library.impl("mymetaops::hstu_attention_backward", "CUDA")
def _hstu_backward_cuda(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                        contextual_seq_len):
    _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
    return _hstu_backward_gpu(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets,
                              max_attn_len, contextual_seq_len)


@torch.library.impl("mymetaops::jagged_attention", "CUDA")
def _softmax_cuda(q, k, v, seq_offsets, max_seq_len, causal=True, scale=None):
    _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
    return _softmax_forward_gpu(q, k, v, seq_offsets, max_seq_len, causal, scale)


@torch.library.impl("mymetaops::jagged_attention_backward", "CUDA")
def _softmax_backward_cuda(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale):
    _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
    return _softmax_backward_gpu(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale)


# ---- fake kernels (torch.compile) and autograd -------------------------------------------------------

@torch.library.register_fake("mymetaops::hstu_attention")
def _hstu_fake(q, k, v, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None, max_attn_len=0,
               contextual_seq_len=0):
    _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2]))


@torch.library.register_fake("mymetaops::hstu_attention_backward")
def _hstu_backward_fake(grad_output, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                        contextual_seq_len):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake("mymetaops::jagged_attention")
def _softmax_fake(q, k, v, seq_offsets, max_seq_len, causal=True, scale=None):
    _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
    return (q.new_empty((q.shape[0], q.shape[1], v.shape[2])),
            q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32))


@torch.library.register_fake("mymetaops::jagged_attention_backward")
def _softmax_backward_fake(grad_output, q, k, v, out, lse, seq_offsets, max_seq_len, causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _hstu_setup(ctx, inputs, output):
    q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len, contextual_seq_len = inputs
    ctx.save_for_backward(q, k, v, seq_offsets, num_targets)
    ctx.args = (max_seq_len, alpha, causal, max_attn_len, contextual_seq_len)


def _hstu_grad(ctx, grad):
    q, k, v, seq_offsets, num_targets = ctx.saved_tensors
    max_seq_len, alpha, causal, max_attn_len, contextual_seq_len = ctx.args
    dq, dk, dv = _ops.hstu_attention_backward(grad.contiguous(), q, k, v, seq_offsets, max_seq_len, alpha, causal,
                                              num_targets, max_attn_len, contextual_seq_len)
    return dq, dk, dv, None, None, None, None, None, None, None


torch.library.register_autograd("mymetaops::hstu_attention", _hstu_grad, setup_context=_hstu_setup)


def _softmax_setup(ctx, inputs, output):
    q, k, v, seq_offsets, max_seq_len, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, seq_offsets)
    ctx.args = (max_seq_len, causal, scale)
    ctx.mark_non_differentiable(lse)


def _softmax_grad(ctx, grad, grad_lse):
    q, k, v, out, lse, seq_offsets = ctx.saved_tensors
    max_seq_len, causal, scale = ctx.args
    dq, dk, dv = _ops.jagged_attention_backward(grad.contiguous(), q, k, v, out, lse, seq_offsets, max_seq_len,
                                                causal, scale)
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd("mymetaops::jagged_attention", _softmax_grad, setup_context=_softmax_setup)


# ---- the eager GPU path: the same kernels without the custom op's Python round trips -------------
# A Python custom op pays for torch.library's autograd wrapper, its argument re-binding and a
# redispatch into Python, forward and backward: 80-140 us a call on the H200 (bench/attention/
# NOTES.md), more than the kernels of most recommender shapes take. Eager calls on plain CUDA tensors
# take this autograd.Function instead; everything else (torch.compile, tensor subclasses, dispatch
# modes, functorch transforms, the CPU) goes through torch.ops.mymetaops, so both see one set of
# kernels and tests compare the two.

def _eager_gpu(*tensors) -> bool:
    return (all(type(t) is torch.Tensor and t.is_cuda for t in tensors) and not torch.compiler.is_compiling()
            and torch._C._len_torch_dispatch_stack() == 0 and not torch._C._are_functorch_transforms_active())


def _needs_grad(q, k, v) -> bool:
    """Whether autograd records the call (without it, the autograd.Function's ~10 us are saved)."""
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


class _EagerHstu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len, contextual_seq_len):
        ctx.save_for_backward(q, k, v, seq_offsets, num_targets)
        ctx.args = (max_seq_len, alpha, causal, max_attn_len, contextual_seq_len)
        return _hstu_forward_gpu(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                                 contextual_seq_len)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, seq_offsets, num_targets = ctx.saved_tensors
        max_seq_len, alpha, causal, max_attn_len, contextual_seq_len = ctx.args
        dq, dk, dv = _hstu_backward_gpu(grad.contiguous(), q, k, v, seq_offsets, max_seq_len, alpha, causal,
                                        num_targets, max_attn_len, contextual_seq_len)
        return dq, dk, dv, None, None, None, None, None, None, None


class _EagerSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, seq_offsets, max_seq_len, causal, scale):
        out, lse = _softmax_forward_gpu(q, k, v, seq_offsets, max_seq_len, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse, seq_offsets)
        ctx.args = (max_seq_len, causal, scale)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, seq_offsets = ctx.saved_tensors
        max_seq_len, causal, scale = ctx.args
        dq, dk, dv = _softmax_backward_gpu(grad.contiguous(), q, k, v, out, lse, seq_offsets, max_seq_len, causal,
                                           scale)
        return dq, dk, dv, None, None, None, None


# ---- public wrappers -----------------------------------------------------------------------------------

def _strict(out, validate: bool):
    if validate and out.is_cuda and not torch.compiler.is_compiling():
        errors.strict_check(out.device)
    return out


def hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor, max_seq_len: int,
                   alpha: float, causal: bool = True, num_targets: torch.Tensor | None = None, max_attn_len: int = 0,
                   contextual_seq_len: int = 0, *, validate: bool = False) -> torch.Tensor:
    """HSTU attention over jagged sequences: [total_L, H, Dv] (see the module docstring for the
    layout and the masks). Differentiable in q, k, v. validate=True raises bad seq_offsets /
    num_targets values at once on a GPU (one stream sync); otherwise the next call does."""
    if _eager_gpu(q, k, v, seq_offsets):
        _check("hstu_attention", q, k, v, seq_offsets, max_seq_len, num_targets)
        forward = _EagerHstu.apply if _needs_grad(q, k, v) else _hstu_forward_gpu
        out = forward(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len, contextual_seq_len)
    else:
        out = _ops.hstu_attention(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                                  contextual_seq_len)
    return _strict(out, validate)


def hstu_mha(max_seq_len: int, alpha: float, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             seq_offsets: torch.Tensor, causal: bool = True, dropout_pr: float = 0.0, training: bool = True,
             num_targets: torch.Tensor | None = None, max_attn_len: int = 0, contextual_seq_len: int = 0,
             sort_by_length: bool = False, kernel=None) -> torch.Tensor:
    """generative-recommenders' `hstu_mha`, argument for argument (migrating is a namespace change).
    Dropout is not implemented: dropout_pr must be 0 (or training False). sort_by_length and kernel
    are accepted and ignored: the schedule and the kernel are this library's choice."""
    if dropout_pr != 0.0 and training:
        raise NotImplementedError(f"hstu_mha: attention dropout is not implemented (dropout_pr = {dropout_pr}); "
                                  "pass dropout_pr=0.0 or training=False")
    return hstu_attention(q, k, v, seq_offsets, max_seq_len, alpha, causal, num_targets, max_attn_len,
                          contextual_seq_len)


def jagged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor, max_seq_len: int,
                     causal: bool = True, scale: float | None = None, *, validate: bool = False) -> torch.Tensor:
    """Softmax attention over jagged sequences: [total_L, H, Dv]; scale None = 1 / sqrt(Dqk).
    Differentiable in q, k, v. validate as in hstu_attention."""
    if _eager_gpu(q, k, v, seq_offsets):
        _check("jagged_attention", q, k, v, seq_offsets, max_seq_len)
        if _needs_grad(q, k, v):
            out = _EagerSoftmax.apply(q, k, v, seq_offsets, max_seq_len, causal, scale)
        else:
            out = _softmax_forward_gpu(q, k, v, seq_offsets, max_seq_len, causal, scale)[0]
    else:
        out, _ = _ops.jagged_attention(q, k, v, seq_offsets, max_seq_len, causal, scale)
    return _strict(out, validate)
