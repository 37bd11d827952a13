"""What every family's benchmark harness shares: host-side timers and the run's revision.

Imported by bench/<family>/*harness.py (which put this folder on sys.path); named so that it never
shadows a family's own modules.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wall_per_iteration(fn, iterations: int, device: torch.device) -> float:
    """Seconds per call of `fn` over back-to-back calls, synchronized before and after only."""
    sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    sync(device)
    return (time.perf_counter() - start) / iterations


def interleaved_medians(fns: dict, iterations: int, repetitions: int, device: torch.device,
                        warmup: int) -> dict:
    """Median over `repetitions` of wall_per_iteration for each fn, the fns taking turns within a
    repetition so that a drift in clocks or load hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repetitions):
        for name, fn in fns.items():
            samples[name].append(wall_per_iteration(fn, iterations, device))
    return {name: statistics.median(s) for name, s in samples.items()}


def git_revision() -> str | None:
    """MYMETAOPS_REVISION if set (the device machine's copy may have no .git), else git describe."""
    if os.environ.get("MYMETAOPS_REVISION"):
        return os.environ["MYMETAOPS_REVISION"]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
