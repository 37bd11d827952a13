"""embedding_bag on the GPU: ours vs F.embedding_bag, every candidate of the model, one table.

    python bench/embedding_bag_table.py [--out bench/results] [--quick]

Times are do_bench medians (CUDA events) after warm-up; the copy ceiling and the anchors are measured
in the same run. Writes <date>-<gpu>-embedding_bag.json (every row, with GPU/torch/triton versions)
and .md (the table) into --out, and prints the table last.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]
from shapes import BACKWARD_SHAPE, SHAPES, forward_bytes, make_inputs  # noqa: E402

import mymetaops  # noqa: E402
from mymetaops import model  # noqa: E402
from mymetaops.ops import embedding_bag as eb_ops  # noqa: E402
from mymetaops.triton import embedding_bag as triton_eb  # noqa: E402

MODE_SUM = 0


def median_ms(fn, quick=False, grad_to_none=None):
    return do_bench(fn, warmup=10 if quick else 25, rep=30 if quick else 100,
                    grad_to_none=grad_to_none, return_mode="median")


def copy_ceiling_tbps():
    """Device-to-device copy of 2 GiB, counting bytes read + written: the bandwidth ceiling."""
    src = torch.empty(2**29, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e9


def run_candidate(candidate, weight, indices, offsets):
    if candidate.backend == "native":
        return lambda: torch.ops.mymetaops._embedding_bag_native(
            weight, indices, offsets, MODE_SUM, None, -1, candidate.config.as_list())
    return lambda: triton_eb.embedding_bag_forward(weight, indices, offsets, MODE_SUM, None, -1,
                                                   candidate.config)


def bench_forward(shape, ceiling, quick):
    weight, indices, offsets_b = make_inputs(shape)
    offsets = torch.cat([offsets_b, offsets_b.new_tensor([indices.numel()])])
    nbytes = forward_bytes(shape)
    ours = median_ms(lambda: torch.ops.mymetaops.embedding_bag(weight, indices, offsets, MODE_SUM))
    ours_validated = median_ms(lambda: mymetaops.embedding_bag(indices, weight, offsets_b, mode="sum"))
    anchor = median_ms(lambda: F.embedding_bag(indices, weight, offsets_b, mode="sum"))
    decision = eb_ops.decide("embedding_bag", eb_ops.problem_of(weight, indices, offsets, MODE_SUM,
                                                                False), weight.device)
    # Every candidate runs once before any is timed, then each is timed in two passes of shuffled
    # order and keeps its better median: whatever runs first on a fresh multi-GB table runs slower.
    available = [c for c in decision.candidates if c.available]
    runs = {c: run_candidate(c, weight, indices, offsets) for c in available}
    for fn in runs.values():
        fn()
    best = {}
    for seed in range(2):
        order = sorted(available, key=lambda c: hash((seed, str(c.config))))
        for c in order:
            best[c] = min(best.get(c, float("inf")), median_ms(runs[c], quick))
    measured = [(ms, c) for c, ms in best.items()]
    fastest_ms, fastest = min(measured, key=lambda m: m[0])
    chosen_ms = next(ms for ms, c in measured if c == decision.choice)
    torch.testing.assert_close(  # the timed kernels compute the right thing
        torch.ops.mymetaops.embedding_bag(weight, indices, offsets, MODE_SUM),
        F.embedding_bag(indices, weight, offsets_b, mode="sum"), rtol=2e-2, atol=2e-2)
    return dict(
        kind="forward", shape=str(shape), bytes=nbytes, ours_ms=ours,
        ours_validated_ms=ours_validated, torch_ms=anchor, speedup=anchor / ours,
        ours_tbps=nbytes / ours / 1e9, torch_tbps=nbytes / anchor / 1e9,
        pct_of_copy=100 * nbytes / ours / 1e9 / ceiling,
        choice=f"{decision.choice.backend} {decision.choice.config}",
        choice_predicted_us=decision.choice.time_us, choice_ms=chosen_ms,
        fastest=f"{fastest.backend} {fastest.config}", fastest_ms=fastest_ms,
        choice_vs_fastest=chosen_ms / fastest_ms,
        candidates=[dict(backend=c.backend, config=str(c.config), predicted_us=c.time_us,
                         measured_ms=ms) for ms, c in measured])


def bench_forward_backward(shape):
    weight, indices, offsets = make_inputs(shape)
    weight.requires_grad_()
    grad = torch.randn(shape.bags, shape.dim, device="cuda", dtype=shape.dtype)

    def step(fn):
        def run():
            fn().backward(grad)
        return run
    # grad_to_none: each step writes a fresh dense gradient instead of accumulating into the last.
    ours = median_ms(step(lambda: mymetaops.embedding_bag(indices, weight, offsets, mode="sum",
                                                          validate=False)), grad_to_none=[weight])
    anchor = median_ms(step(lambda: F.embedding_bag(indices, weight, offsets, mode="sum")),
                       grad_to_none=[weight])
    return dict(kind="forward+backward", shape=str(shape), ours_ms=ours, torch_ms=anchor,
                speedup=anchor / ours)


def table(rows, ceiling, meta):
    lines = [f"# embedding_bag on {meta['gpu']} ({meta['date']}, torch {meta['torch']}, "
             f"triton {meta['triton']}); copy ceiling {ceiling:.2f} TB/s",
             "",
             "| shape (rows, D, B, L) dtype | ours ms | torch ms | speedup | ours TB/s | % of copy "
             "| ours+validate ms | model choice (ms) | measured fastest (ms) | choice/fastest |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["kind"] == "forward":
            lines.append(
                f"| {r['shape']} | {r['ours_ms']:.3f} | {r['torch_ms']:.3f} | {r['speedup']:.2f}x | "
                f"{r['ours_tbps']:.2f} | {r['pct_of_copy']:.0f}% | {r['ours_validated_ms']:.3f} | "
                f"{r['choice']} ({r['choice_ms']:.3f}) | {r['fastest']} ({r['fastest_ms']:.3f}) | "
                f"{r['choice_vs_fastest']:.3f} |")
    for r in rows:
        if r["kind"] == "forward+backward":
            lines += ["", f"forward+backward {r['shape']}: ours {r['ours_ms']:.3f} ms, torch "
                          f"{r['torch_ms']:.3f} ms, speedup {r['speedup']:.2f}x"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    args = parser.parse_args()
    meta = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
                hardware=model.detect_hardware().name)
    ceiling = copy_ceiling_tbps()
    rows = [bench_forward(shape, ceiling, args.quick) for shape in SHAPES]
    rows.append(bench_forward_backward(BACKWARD_SHAPE))
    text = table(rows, ceiling, meta)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{meta['date']}-{meta['gpu'].replace(' ', '_')}-embedding_bag"
    (out / f"{stem}.json").write_text(json.dumps(dict(meta, copy_tbps=ceiling, rows=rows), indent=1))
    (out / f"{stem}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
