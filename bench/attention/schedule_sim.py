"""The Hopper forward's persistent schedule, simulated on the CPU: how long the SMs stay busy when
CTAs take tiles from the counter (cuda/attention/fwd_kernel.cuh, TileSource and tile_at), in the
launch's index order or with the sequences longest first, and with different grab sizes.

A tile of q block m costs TILE_US + STEP_US x (m + 1) (its key steps under the causal mask): the
least-squares fit of run 11's stage timings over the four D = 128 shapes (bench/attention/NOTES.md).
A grab that finds no tile with rows costs its atomic's latency (--atomic-us); otherwise the
producer's one-ahead grab hides it. Each CTA runs its tiles back to back; the makespan against the
mean busy time is what ncu reads as sm__cycles_active avg / max (run 12: 0.75 at B64 N1024, 0.79 at
B32 N4096 in index order with grabs of 4). Against the GPU: longest first with grabs of 2 was
simulated 1.16-1.30x faster than index order with grabs of 4 at the D = 128 shapes and measured
1.15-1.27x from N = 1024 (run 13); grabs of 1 at B32 N2048 H1, simulated 1.43x, measured
1.21-1.30x (run 15). The production rule (attention.cu) is its own column.

    python bench/attention/schedule_sim.py [--sms 132] [--atomic-us 0.5]
"""
from __future__ import annotations

import argparse
import heapq
import math
import random

TILE_US, STEP_US = 2.3, 1.84  # run 11's fit of the full kernel (us per tile, per 128 x 128 step)
BLOCK = 128
GROUP_WAVES = 2  # cuda/attention/attention.cu: kGroupWaves
SORT_MIN_BLOCKS = 5  # attention.cu: kSortMinBlocks
SINGLE_GRAB_TILES = 8  # fwd_kernel.cuh: kSingleGrabTiles
SHAPES = ((64, 1024, 4), (256, 512, 2), (32, 4096, 4), (512, 256, 4), (16, 8192, 4), (32, 2048, 1))


def tile_order(lengths: list[int], heads: int, max_len: int, sms: int, longest_first: bool):
    """(sequence, q block) per tile index, as tile_at decodes them: pairs in groups, the q block
    the outer index within a group, descending."""
    blocks = math.ceil(min(max_len, sum(lengths)) / BLOCK)
    seqs = sorted(range(len(lengths)), key=lambda b: -lengths[b]) if longest_first else range(len(lengths))
    pairs = [b for b in seqs for _ in range(heads)]
    group = min(len(pairs), max(heads, math.ceil(GROUP_WAVES * sms / blocks) // heads * heads))  # whole sequences
    order = []
    for g0 in range(0, len(pairs), group):
        for m in reversed(range(blocks)):
            order += [(b, m) for b in pairs[g0:g0 + group]]
    return order


def busy_share(lengths, order, sms: int, grab: int, atomic_us: float) -> tuple[float, float]:
    """(makespan us, mean busy us / makespan) of CTAs taking `grab` indices at a time."""
    free = [(0.0, cta) for cta in range(sms)]
    busy = [0.0] * sms
    for i in range(0, len(order), grab):
        t, cta = heapq.heappop(free)
        work = sum(TILE_US + STEP_US * (m + 1) for b, m in order[i:i + grab] if m * BLOCK < lengths[b])
        busy[cta] += work
        heapq.heappush(free, (t + (work if work else atomic_us), cta))
    makespan = max(t for t, _ in free)
    return makespan, sum(busy) / sms / makespan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--atomic-us", type=float, default=0.5)
    args = ap.parse_args()
    variants = (("index, grab 4 (run 12)", False, 4), ("index, grab 2", False, 2),
                ("longest first, grab 2", True, 2), ("longest first, grab 1", True, 1))
    print("| shape | " + " | ".join(v[0] for v in variants) + " | production |")
    print("|---" * (len(variants) + 2) + "|")
    for batch, max_len, heads in SHAPES:
        rng = random.Random(0)
        lengths = [rng.randint(1, max_len) for _ in range(batch)]
        blocks = math.ceil(min(max_len, sum(lengths)) / BLOCK)
        tiles = blocks * batch * heads
        production = ("production", blocks >= SORT_MIN_BLOCKS,
                      1 if tiles < SINGLE_GRAB_TILES * min(tiles, args.sms) else 2)
        cells, base = [], None
        for _, longest_first, grab in variants + (production,):
            order = tile_order(lengths, heads, max_len, args.sms, longest_first)
            makespan, share = busy_share(lengths, order, args.sms, grab, args.atomic_us)
            base = base or makespan
            cells.append(f"{makespan:.0f} us, busy {share:.2f} ({base / makespan:.2f}x)")
        print(f"| B{batch} N{max_len} H{heads} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
