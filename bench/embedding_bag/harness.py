"""What the embedding_bag benchmarks share: timers, inputs (random bags, the 26 Criteo tables), the
launcher of one model candidate, and the run's metadata.

Every benchmark also runs on the CPU with --smoke (tiny sizes): that checks the scripts' logic
where no GPU is; its numbers mean nothing.
"""
from __future__ import annotations

import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
for _p in (str(REPO), str(REPO / "bench")):  # this checkout's mymetaops and bench_common, from anywhere
    if _p not in sys.path:
        sys.path.insert(0, _p)

from bench_common import git_revision, interleaved_medians, sync, wall_per_iteration  # noqa: E402,F401

# Criteo Kaggle (Display Advertising Challenge): the cardinalities of its 26 categorical features.
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                        3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                        142572)
CRITEO_ROW_CAP = 100_000
SMOKE_ROW_CAP = 1000


def median_ms(fn, device: torch.device, quick: bool = False, grad_to_none=None) -> float:
    """GPU: do_bench's median (CUDA events, L2 flushed before each call). CPU (smoke runs): the
    median wall time of a few calls (one if quick)."""
    if device.type == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=10 if quick else 25, rep=30 if quick else 100,
                        grad_to_none=grad_to_none, return_mode="median")
    times = []
    for _ in range(1 if quick else 5):
        for t in grad_to_none or ():
            t.grad = None
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def random_bags(num_rows: int, num_bags: int, max_len: int, generator: torch.Generator,
                device: torch.device, index_generator: torch.Generator | None = None):
    """(indices, offsets) of `num_bags` bags of uniform lengths in 1..max_len, uniform rows; offsets
    in F.embedding_bag's form (num_bags entries). The lengths are drawn on the host (the loop knows
    the number of indices without a sync); the indices on the device where `index_generator` is one
    of the device (no host sync, no copy), else on the host with `generator`."""
    lengths = torch.randint(1, max_len + 1, (num_bags,), generator=generator)
    offsets = torch.zeros(num_bags, dtype=torch.int64)
    torch.cumsum(lengths[:-1], 0, out=offsets[1:])
    total = int(lengths.sum())
    if device.type == "cuda":
        offsets = offsets.pin_memory().to(device, non_blocking=True)
    else:
        offsets = offsets.to(device)
    if index_generator is not None:
        indices = torch.randint(0, num_rows, (total,), device=device, generator=index_generator)
    else:
        indices = torch.randint(0, num_rows, (total,), generator=generator).to(device)
    return indices, offsets


def criteo_tables(device: torch.device, dim: int = 64, smoke: bool = False, seed: int = 0):
    """The 26 Criteo tables (rows capped at CRITEO_ROW_CAP, or SMOKE_ROW_CAP), fp32, N(0, 1)."""
    cap = SMOKE_ROW_CAP if smoke else CRITEO_ROW_CAP
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(min(rows, cap), dim, device=device, generator=g)
            for rows in CRITEO_CARDINALITIES]


def candidate_fn(candidate, weight, indices, offsets, mode: int = 0):
    """A call of one model candidate, forced (torch-form offsets, no per-sample weights, no
    padding_idx): native configs through the internal op, Triton configs through the launcher,
    the vendor op through torch."""
    if candidate.backend == "native":
        if weight.device.type == "cpu":
            # Smoke runs: the native kernels are GPU-only; on meta tensors the op's fake kernel
            # still checks the call.
            weight, indices, offsets = (t.to("meta") for t in (weight, indices, offsets))
        config = candidate.config.as_list()
        return lambda: torch.ops.mymetaops._embedding_bag_native(weight, indices, offsets, mode, None,
                                                                 -1, False, config)
    if candidate.backend == "triton":
        from mymetaops.triton import embedding_bag as triton_embedding_bag  # imports triton
        return lambda: triton_embedding_bag.embedding_bag_forward(weight, indices, offsets, mode, None,
                                                                  -1, False, candidate.config)
    if candidate.backend == "vendor":
        return lambda: F.embedding_bag(indices, weight, offsets, mode=("sum", "mean")[mode])
    raise ValueError(f"unknown backend {candidate.backend!r}")


def candidate_name(candidate) -> str:
    return f"{candidate.backend} {candidate.config}"


def run_meta(device: torch.device) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        from mymetaops import model
        gpu, hardware = torch.cuda.get_device_name(device), model.detect_hardware(device).name
    else:
        gpu, hardware = f"CPU {platform.machine()} (smoke: numbers mean nothing)", None
    return dict(date=datetime.date.today().isoformat(), gpu=gpu, hardware=hardware,
                torch=torch.__version__, cuda=torch.version.cuda, triton=triton_version,
                python=platform.python_version(), revision=git_revision())


def check(name: str, value: float, bound: float, at_most: bool, fmt: str = "{:.2f}") -> dict:
    """An acceptance check: `value` must be <= bound (at_most) or >= bound."""
    passed = value <= bound if at_most else value >= bound
    return dict(name=name, value=value, shown=fmt.format(value),
                required=("<= " if at_most else ">= ") + fmt.format(bound), passed=bool(passed))
