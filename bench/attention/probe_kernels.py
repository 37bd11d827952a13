"""The kernels of latency_probe.py, on the HSTU forward's grid: "grid only" decodes each program's
(block, sequence, head) and reads its offsets; "Q copy" also loads its Q block and stores it. A
module of their own, imported after open_report: on the CPU that turns on Triton's interpreter,
which must happen before a kernel is defined."""
import triton
import triton.language as tl

from mymetaops.triton import hstu_attention as hstu


@triton.jit
def grid_only(seq_offsets, sink, group_size, total_rows, num_seqs, num_heads, max_seq_len, BLOCK: tl.constexpr):
    block, b, h, seq_start, seq_len, _, _ = hstu._program(
        seq_offsets, None, None, 0, 0, group_size, total_rows, num_seqs, num_heads, max_seq_len, 0, BLOCK, False,
        False, False, False)
    if block * BLOCK < seq_len:  # a store, so the decode and the loads are not dead code
        tl.store(sink + b * num_heads + h, seq_start)


@triton.jit
def q_copy(Q, Out, seq_offsets, stride_m, stride_h, group_size, total_rows, num_seqs, num_heads, max_seq_len,
           D: tl.constexpr, BLOCK: tl.constexpr):
    block, b, h, seq_start, seq_len, _, _ = hstu._program(
        seq_offsets, None, None, 0, 0, group_size, total_rows, num_seqs, num_heads, max_seq_len, 0, BLOCK, False,
        False, False, False)
    m0 = block * BLOCK
    if m0 < seq_len:
        offs = m0 + tl.arange(0, BLOCK)
        q = hstu._resident(Q, stride_m, stride_h, h, seq_start, offs, seq_len, D, D)
        hstu._store_rows(Out, stride_m, stride_h, h, seq_start, offs, seq_len, q.to(tl.float32) * 2.0, D, D)
