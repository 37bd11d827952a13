"""A toy recommendation model trained with mymetaops on the present device.

    python -m mymetaops.demo [--steps 30] [--device cpu|cuda] [--fp8]

Three embedding tables pooled with `mymetaops.embedding_bag` (jagged bags, empty ones included),
a bottom MLP for dense features, an HSTU-style encoder of each user's item history (the first
table's bag, as a jagged sequence: one `mymetaops.hstu_attention` layer, one
`mymetaops.jagged_attention` layer, mean-pooled through `mymetaops.jagged_to_padded_dense`) and a
top MLP; a few SGD steps on synthetic clicks. It prints the
loss and the kernel the model picks for each table (and, on a CPU-only machine, what it would pick
on an H200 and an MI350X). --fp8: the top MLP's hidden layer is a `mymetaops.nn.Fp8Linear` (bf16
master weights, FP8 GEMMs for its forward and input gradient).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import mymetaops

TABLE_ROWS = (200_000, 50_000, 1_000)
EMBEDDING_DIM = 64
MEAN_BAG_SIZE = (20, 8, 2)
DENSE_FEATURES = 13
HISTORY_TABLE, HISTORY_HEADS = 0, 2
MAX_HISTORY = 2 * MEAN_BAG_SIZE[HISTORY_TABLE]  # bag lengths are drawn in [0, 2 * mean]


class Bf16Fp8Linear(nn.Module):
    """An Fp8Linear in a float32 model: bf16 in (its master weights' dtype), float32 out."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = mymetaops.nn.Fp8Linear(in_features, out_features, dtype=torch.bfloat16)

    def forward(self, x):
        return self.linear(x.to(torch.bfloat16)).float()


class HistoryEncoder(nn.Module):
    """One HSTU layer (silu-gated projections, hstu_attention, a gate u on the normalized output)
    and one softmax attention layer over each user's jagged history [total, dim], then the mean of
    each sequence's rows ([B, dim]; 0 for an empty history)."""

    def __init__(self, dim=EMBEDDING_DIM, heads=HISTORY_HEADS):
        super().__init__()
        self.heads = heads
        self.uvqk = nn.Linear(dim, 4 * dim)
        self.hstu_out = nn.Linear(dim, dim)
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, seq_offsets, lengths):
        total, dim = x.shape
        heads = (total, self.heads, dim // self.heads)
        u, v, q, k = F.silu(self.uvqk(x)).split(dim, dim=1)
        attn = mymetaops.hstu_attention(q.reshape(heads), k.reshape(heads), v.reshape(heads), seq_offsets,
                                        MAX_HISTORY, alpha=(dim // self.heads) ** -0.5)
        x = x + self.hstu_out(u * F.layer_norm(attn.reshape(total, dim), (dim,)))
        q, k, v = self.qkv(x).split(dim, dim=1)
        x = x + mymetaops.jagged_attention(q.reshape(heads), k.reshape(heads), v.reshape(heads), seq_offsets,
                                           MAX_HISTORY).reshape(total, dim)
        padded = mymetaops.jagged_to_padded_dense(x, seq_offsets, MAX_HISTORY)  # [B, MAX_HISTORY, dim]
        return padded.sum(1) / lengths.clamp(min=1).unsqueeze(1)


class ToyRecsys(nn.Module):
    def __init__(self, fp8: bool = False):
        super().__init__()
        self.tables = nn.ParameterList(
            nn.Parameter(torch.randn(rows, EMBEDDING_DIM) * 0.05) for rows in TABLE_ROWS)
        self.bottom = nn.Sequential(nn.Linear(DENSE_FEATURES, EMBEDDING_DIM), nn.ReLU())
        self.history = HistoryEncoder()
        hidden = (Bf16Fp8Linear if fp8 else nn.Linear)(EMBEDDING_DIM * (len(TABLE_ROWS) + 2), 128)
        self.top = nn.Sequential(hidden, nn.ReLU(), nn.Linear(128, 1))

    def forward(self, dense, sparse, history):
        pooled = [mymetaops.embedding_bag(indices, table, offsets, mode="sum")
                  for table, (indices, offsets) in zip(self.tables, sparse)]
        items, seq_offsets, lengths = history
        encoded = self.history(self.tables[HISTORY_TABLE][items], seq_offsets, lengths)
        return self.top(torch.cat([self.bottom(dense)] + pooled + [encoded], dim=1)).squeeze(1)


def synthetic_batch(batch_size, generator, device):
    """Dense features, jagged sparse features per table, the history (the first table's bags as
    jagged sequences: items, seq_offsets [B + 1], lengths), and clicks that depend on them."""
    dense = torch.randn(batch_size, DENSE_FEATURES, generator=generator)
    sparse = []
    for rows, mean_size in zip(TABLE_ROWS, MEAN_BAG_SIZE):
        lengths = torch.randint(0, 2 * mean_size + 1, (batch_size,), generator=generator)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        indices = torch.randint(0, rows, (int(lengths.sum()),), generator=generator)
        sparse.append((indices.to(device), offsets.to(device)))
    first_table_rows = sparse[0][0].cpu()
    hot = torch.zeros(batch_size).index_add_(
        0, torch.repeat_interleave(torch.arange(batch_size), torch.diff(
            torch.cat([sparse[0][1].cpu(), torch.tensor([first_table_rows.numel()])]))),
        (first_table_rows % 7 == 0).float())
    clicks = ((dense[:, 0] + hot - 0.5) > 0).float()
    items = sparse[HISTORY_TABLE][0]
    seq_offsets = torch.cat([sparse[HISTORY_TABLE][1], torch.tensor([items.numel()], device=device)])
    history = (items, seq_offsets, torch.diff(seq_offsets).float())
    return dense.to(device), sparse, history, clicks.to(device)


def print_dispatch(model, sparse, device):
    print("== dispatch: the kernel the model picks for each table ==")
    targets = [None] if device.type == "cuda" else ["H200", "MI350X"]
    if device.type != "cuda":
        print("No GPU here: the C++ CPU kernels run; below is what the model would pick on GPUs.")
    for target in targets:
        for table, (indices, offsets) in zip(model.tables, sparse):
            meta_table = table.detach().to("meta") if target else table.detach()
            meta_idx = indices.to("meta") if target else indices
            meta_off = offsets.to("meta") if target else offsets
            decision, = mymetaops.explain("embedding_bag", meta_idx, meta_table, meta_off,
                                          mode="sum", device=target, print_result=False)
            choice = decision.choice
            print(f"  {decision.hardware.name:>8}  table {tuple(table.shape)}: {choice.backend} "
                  f"[{choice.config}] predicted {choice.time_us:.1f} us ({choice.bound}-bound)")


def main():
    parser = argparse.ArgumentParser(description="Train a toy recsys model on mymetaops ops.")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--fp8", action="store_true", help="the top MLP's hidden layer in FP8 (Fp8Linear)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = ToyRecsys(args.fp8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(args.batch_size, generator, device) for _ in range(4)]
    print(f"mymetaops demo on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"backend={mymetaops.current_backend()}{', top hidden layer in FP8' if args.fp8 else ''}")
    print_dispatch(model, batches[0][1], device)
    loss_fn = nn.BCEWithLogitsLoss()
    for step in range(args.steps):
        dense, sparse, history, clicks = batches[step % len(batches)]
        loss = loss_fn(model(dense, sparse, history), clicks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
