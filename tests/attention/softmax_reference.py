"""Float64 reference of softmax attention over jagged sequences (mymetaops/triton/jagged_attention.py),
one sequence at a time in plain torch, differentiable with autograd (the gradient references).

Layout as the kernels': q, k [total_L, H, Dqk], v [total_L, H, Dv], seq_offsets [B + 1]; out
[total_L, H, Dv], lse [H, total_L] (natural log of the scaled scores' exp-sum). Rows outside
[offsets[0], offsets[B]) get out = 0 and lse = 0, as the kernels write them.
"""
from __future__ import annotations

import math

import torch


def jagged_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_offsets: torch.Tensor,
                               max_seq_len: int, causal: bool = True, scale: float | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) in float64 on the CPU from the given values (already rounded to their dtype). Any
    of q, k, v may require grad (float64 leaves: their .grad is the reference gradient)."""
    total, heads, dqk = q.shape
    dv = v.size(2)
    if scale is None:
        scale = 1.0 / math.sqrt(dqk)
    q, k, v = (t if t.dtype == torch.float64 and t.device.type == "cpu" else t.detach().double().cpu()
               for t in (q, k, v))
    offsets = seq_offsets.tolist()
    if any(b > a for a, b in zip(offsets[1:], offsets)) or (offsets and (offsets[0] < 0 or offsets[-1] > total)):
        raise ValueError(f"offsets must be non-decreasing within [0, {total}], got {offsets}")
    outs, lses = [], []
    if offsets[0] > 0:  # rows before the first sequence
        outs.append(q.new_zeros(offsets[0], heads, dv))
        lses.append(q.new_zeros(heads, offsets[0]))
    for start, end in zip(offsets, offsets[1:]):
        n = end - start
        if n > max_seq_len:
            raise ValueError(f"a sequence of length {n} > max_seq_len {max_seq_len}")
        if n == 0:
            continue
        scores = torch.einsum("ihd,jhd->hij", q[start:end], k[start:end]) * scale
        if causal:
            allowed = torch.ones(n, n, dtype=torch.bool).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        lses.append(torch.logsumexp(scores, dim=-1))
        outs.append(torch.einsum("hij,jhd->ihd", torch.softmax(scores, dim=-1), v[start:end]))
    after = total - offsets[-1]
    if after > 0:  # rows from offsets[B] on
        outs.append(q.new_zeros(after, heads, dv))
        lses.append(q.new_zeros(heads, after))
    out = torch.cat(outs, 0) if outs else q.new_zeros(0, heads, dv)
    lse = torch.cat(lses, 1) if lses else q.new_zeros(heads, 0)
    return out, lse
