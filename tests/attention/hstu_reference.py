"""Float64 padded-dense reference of HSTU attention (generative-recommenders' `pytorch_hstu_mha`
semantics), differentiable with torch autograd, and the error scales of the Triton kernels' tests.

Each sequence b (rows seq_offsets[b] .. seq_offsets[b + 1], length L <= max_seq_len = N) is padded
to N rows; per head, scores[i, j] = silu(alpha * q_i . k_j) / N are multiplied by the sequence's
[N, N] mask (`hstu_mask`) and out = scores @ v; rows j >= L are zero padding (q = k = v = 0, so
they add nothing, as in the padded original). Rows of the jagged tensor outside
[seq_offsets[0], seq_offsets[B]) are 0 in the result.

The mask follows `_get_valid_attn_mask`: with c = contextual_seq_len and nt = num_targets[b] (0
without num_targets), positions get ids id(x) = max(x - c + 1, 0) when c > 0 (else x); the largest
id M = L - nt (+ 1 - c when c > 0); with num_targets, ids are clamped to at most M. With
d = id(i) - id(j): valid = (i == j) or (d > 0 causal, d != 0 otherwise); a window w > 0 keeps only
d <= w (|d| <= w non-causal); c > 0 adds every (i, j) with id(i) == 0 and id(j) < M.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def hstu_mask(length: int, max_seq_len: int, causal: bool, num_targets: int | None, max_attn_len: int,
              contextual_seq_len: int) -> torch.Tensor:
    """[N, N] bool mask of one sequence of `length` rows (rows/cols >= length are padding)."""
    pos = torch.arange(max_seq_len)
    ids = pos.clone()
    max_id = torch.tensor(length)
    if contextual_seq_len > 0:
        ids = (ids - contextual_seq_len + 1).clamp(min=0)
        max_id = max_id - contextual_seq_len + 1
    if num_targets is not None:
        max_id = max_id - num_targets
        ids = torch.minimum(ids, max_id)
    dist = ids[:, None] - ids[None, :]
    if not causal:
        dist = dist.abs()
    valid = (dist > 0) | (pos[:, None] == pos[None, :])
    if max_attn_len > 0:
        valid = valid & (dist <= max_attn_len)
    if contextual_seq_len > 0:
        valid = valid | ((ids[:, None] == 0) & (ids[None, :] < max_id))
    return valid


def _lengths(seq_offsets, max_seq_len):
    offsets = [int(x) for x in seq_offsets.tolist()]
    lengths = [offsets[b + 1] - offsets[b] for b in range(len(offsets) - 1)]
    assert all(0 <= n <= max_seq_len for n in lengths), f"lengths {lengths} outside [0, {max_seq_len}]"
    return offsets, lengths


def _pad(x, offsets, lengths, max_seq_len):
    """[total, H, D] -> [B, H, N, D] float64 (differentiable)."""
    x = x.double()
    seqs = [F.pad(x[offsets[b]:offsets[b] + n], (0, 0, 0, 0, 0, max_seq_len - n)) for b, n in enumerate(lengths)]
    return torch.stack(seqs).transpose(1, 2)


def _unpad(dense, offsets, lengths, total):
    """[B, H, N, D] -> [total, H, D]; rows outside the sequences are 0."""
    parts = [dense.new_zeros(offsets[0], dense.shape[1], dense.shape[3])]
    parts += [dense[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]
    parts.append(dense.new_zeros(total - offsets[-1], dense.shape[1], dense.shape[3]))
    return torch.cat(parts)


def _masks(lengths, max_seq_len, causal, num_targets, max_attn_len, contextual_seq_len):
    targets = [None] * len(lengths) if num_targets is None else [int(t) for t in num_targets.tolist()]
    return torch.stack([hstu_mask(n, max_seq_len, causal, t, max_attn_len, contextual_seq_len)
                        for n, t in zip(lengths, targets)]).unsqueeze(1)  # [B, 1, N, N]


def hstu_reference(q, k, v, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None, max_attn_len=0,
                   contextual_seq_len=0):
    """out [total_L, H, Dv] float64; differentiable in q, k, v (through their float64 casts)."""
    total, H = q.shape[0], q.shape[1]
    if seq_offsets.numel() == 1 or max_seq_len == 0:
        return q.new_zeros(total, H, v.shape[2], dtype=torch.float64) + 0 * (q.sum() + k.sum() + v.sum()).double()
    offsets, lengths = _lengths(seq_offsets, max_seq_len)
    pq, pk, pv = (_pad(t, offsets, lengths, max_seq_len) for t in (q, k, v))
    mask = _masks(lengths, max_seq_len, causal, num_targets, max_attn_len, contextual_seq_len).to(pq.device)
    scores = F.silu(torch.einsum("bhid,bhjd->bhij", pq, pk) * alpha) / max_seq_len
    out = torch.einsum("bhij,bhjd->bhid", scores * mask, pv)
    return _unpad(out, offsets, lengths, total)


@torch.no_grad()
def hstu_error_scales(q, k, v, grad_out, seq_offsets, max_seq_len, alpha, causal=True, num_targets=None,
                      max_attn_len=0, contextual_seq_len=0):
    """Per element of out, dq, dk, dv: (terms, dots), the scales its rounding errors are bounded by.

    terms: the sum of |terms| the element is made of (each rounded once to the operand dtype, the
    sum once to the output): out_i: sum_j |p_ij| |v_j|; dv_j: sum_i |p_ij| |dO_i|; dq_i:
    alpha/N sum_j |dz_ij| |k_j|; dk_j: alpha/N sum_i |dz_ij| |q_i|, with p = mask silu(z) / N,
    dz = mask (dO_i . v_j) silu'(z), z = alpha q_i . k_j.
    dots: the same sums with each term's sensitivity to the fp32 error of the dot products it
    depends on (|z| and |dO . v| replaced by alpha |q_i| . |k_j| and |dO_i| . |v_j|, propagated
    through |silu'| <= 1.1 and |silu''| <= 0.5); it matters where z cancels (|q . k| << |q| . |k|)."""
    total, H = q.shape[0], q.shape[1]
    if seq_offsets.numel() == 1 or max_seq_len == 0:
        zeros = [torch.zeros(total, H, d, dtype=torch.float64) for d in (v.shape[2], q.shape[2], q.shape[2],
                                                                           v.shape[2])]
        return tuple((z, z) for z in zeros)
    offsets, lengths = _lengths(seq_offsets, max_seq_len)
    pq, pk, pv, pdo = (_pad(t.detach().cpu(), offsets, lengths, max_seq_len) for t in (q, k, v, grad_out))
    mask = _masks(lengths, max_seq_len, causal, num_targets.cpu() if num_targets is not None else None,
                  max_attn_len, contextual_seq_len)
    alpha = abs(alpha)
    z = torch.einsum("bhid,bhjd->bhij", pq, pk) * alpha
    z_dot = torch.einsum("bhid,bhjd->bhij", pq.abs(), pk.abs()) * alpha
    dp = torch.einsum("bhid,bhjd->bhij", pdo, pv)
    dp_dot = torch.einsum("bhid,bhjd->bhij", pdo.abs(), pv.abs())
    sig = torch.sigmoid(z)
    dsilu = (sig * (1 + z * (1 - sig))).abs()
    p = (z * sig).abs() * mask / max_seq_len
    p_dot = 1.1 * z_dot * mask / max_seq_len
    dz = (dp * dsilu).abs() * mask * alpha / max_seq_len
    dz_dot = (dp_dot * dsilu + 0.5 * dp.abs() * z_dot) * mask * alpha / max_seq_len

    def sums(w, w_dot, x, rows_of_w):
        eq = "bhij,bhjd->bhid" if rows_of_w else "bhij,bhid->bhjd"
        return (_unpad(torch.einsum(eq, w, x.abs()), offsets, lengths, total),
                _unpad(torch.einsum(eq, w_dot, x.abs()), offsets, lengths, total))
    return (sums(p, p_dot, pv, True), sums(dz, dz_dot, pk, True), sums(dz, dz_dot, pq, False),
            sums(p, p_dot, pdo, False))
