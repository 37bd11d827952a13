"""Where the public ops' forward+backward spends its time at the issue's four shapes: each GPU
kernel's time per call (torch.profiler, CUDA activity) beside the call's wall time, so a gap
between the kernels' sum and the table's fwd+bwd cell shows up as host time or as a kernel nobody
counted. The same call as attention_table.py's fwd+bwd columns (public wrapper, default arguments,
grad of ones), 10 calls profiled after a warm-up. Then the host side: cProfile of fwd+bwd calls at
host_cost.py's tiny shape (the GPU idle between calls), the functions with the most own and
cumulative time.

    python bench/attention/path_probe.py [--out PREFIX]
    python bench/attention/path_probe.py --dry-run     # CPU plumbing check (tiny shapes)
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))  # the repo: mymetaops without an install
from attention_table import ALPHA, DRY_RUN_SHAPES, SHAPES, _fwd_bwd, make_inputs  # noqa: E402
from bench_common import add_device_arguments, close_report, open_report, sync  # noqa: E402

CALLS = 10
HOST_CALLS, HOST_TOP = 300, 25


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")


def _kernel_us(prof, calls: int) -> dict:
    """GPU time per call of each kernel name (us), largest first."""
    rows = {}
    for item in prof.key_averages():
        us = getattr(item, "self_device_time_total", None)
        if us is None:
            us = getattr(item, "self_cuda_time_total", 0)
        if us and item.device_type == torch.autograd.DeviceType.CUDA:
            rows[item.key] = rows.get(item.key, 0.0) + us / calls
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def _public_ops(offsets, n) -> dict:
    import mymetaops
    return {"hstu": lambda q, k, v: mymetaops.hstu_attention(q, k, v, offsets, n, ALPHA),
            "softmax": lambda q, k, v: mymetaops.jagged_attention(q, k, v, offsets, n)}


def _short(kernel: str) -> str:
    """A kernel's name without its return type, namespaces and template arguments."""
    for prefix in ("void ", "mymetaops::cuda::attention::", "(anonymous namespace)::"):
        kernel = kernel.replace(prefix, "")
    return kernel.split("<")[0].split("(")[0]


def run(args, device, prefix, meta) -> dict:
    gpu = device.type == "cuda"
    rows = []
    for shape in SHAPES if gpu else DRY_RUN_SHAPES:
        _, n, _, _ = shape
        _, offsets, q, k, v = make_inputs(shape, device)
        for name, fn in _public_ops(offsets, n).items():
            step = _fwd_bwd(fn, q, k, v)
            for _ in range(3):
                step()
            sync(device)
            start = time.perf_counter()
            for _ in range(CALLS):
                step()
            sync(device)
            wall_us = (time.perf_counter() - start) / CALLS * 1e6
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
            with profile(activities=activities) as prof:
                for _ in range(CALLS):
                    step()
                sync(device)
            kernels = _kernel_us(prof, CALLS) if gpu else {}
            rows.append(dict(shape=shape, op=name, wall_us=wall_us, kernels_us=sum(kernels.values()), kernels=kernels))
        del q, k, v
    return dict(rows=rows, host=_host_profiles(device))


def _host_profiles(device) -> dict:
    """Per op: the top functions by own and cumulative time over HOST_CALLS fwd+bwd calls at
    host_cost.py's shape."""
    from host_cost import SHAPE, tiny_inputs
    offsets, q, k, v = tiny_inputs(device)
    profiles = {}
    for name, fn in _public_ops(offsets, SHAPE[1]).items():
        step = _fwd_bwd(fn, q, k, v)
        for _ in range(20):
            step()
        sync(device)
        calls = HOST_CALLS if device.type == "cuda" else 3
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            step()
        profiler.disable()
        sync(device)
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(HOST_TOP)
        stats.sort_stats("cumulative").print_stats(HOST_TOP)
        profiles[name] = dict(calls=calls, top=text.getvalue())
    return profiles


def markdown(meta, report) -> str:
    lines = [f"# Attention fwd+bwd: kernels per call ({meta['gpu']}, {meta['date']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, revision {meta['revision']})", "",
             f"Public wrappers, default arguments, bf16, causal, lengths uniform in [1, N]; wall: {CALLS} calls "
             "back to back between two syncs; kernels: torch.profiler's GPU time per call.", "",
             "| shape | op | wall us | kernels us | kernels (us per call) |", "|---|---|---|---|---|"]
    for r in report["rows"]:
        label = "B{} N{} H{} D{}".format(*r["shape"])
        parts = ", ".join(f"{_short(name)}: {us:.1f}" for name, us in r["kernels"].items())
        lines.append(f"| {label} | {r['op']} | {r['wall_us']:.1f} | {r['kernels_us']:.1f} | {parts} |")
    for name, prof in report["host"].items():
        title = f"## Host: {name} fwd+bwd, cProfile over {prof['calls']} calls (own, then cumulative time)"
        lines += ["", title, "", "```", prof["top"].strip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-path_probe", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
