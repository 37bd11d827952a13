"""Pick the kernel for a call: every candidate's predicted time, the choice, and why."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from . import embedding_bag as eb
from .hardware import HardwareSpec

BACKENDS = ("native", "triton", "vendor")
# Predictions within 1% are a tie the model cannot resolve; among tied candidates take the one
# whose prediction is most robust: native before Triton (its counts rest on far more calibration:
# every native config was measured, and Triton's codegen adds unmodeled costs), then most bytes in
# flight beyond what saturates memory (up to MARGIN_ENOUGH; past it more buys nothing), then the
# fewest pieces per row (fewer dependent steps; narrow pieces were measured free on Hopper only),
# then fewest registers, then the fastest.
ROBUST_TIE_FRACTION = 0.01
MARGIN_ENOUGH = 4.0
SHOWN_CANDIDATES = 10
NATIVE_MISSING = "native kernel not built for this device"


@dataclass(frozen=True)
class Candidate:
    backend: str  # "native" | "triton" | "vendor"
    config: Any  # a mymetaops.configs dataclass, or None
    time_us: float
    bound: str  # "memory" | "latency" | "compute" | "launch"
    detail: str
    available: bool = True
    unavailable_reason: str = ""
    margin: float = 0.0  # bytes in flight / bytes in flight that saturate memory
    registers: int = 0
    pieces: int = 1  # pieces each row is fetched in


@dataclass(frozen=True)
class Decision:
    op: str
    hardware: HardwareSpec
    problem: Any
    candidates: tuple[Candidate, ...]  # fastest first
    choice: Candidate
    reason: str


def _candidates(op: str, problem: Any, hw: HardwareSpec, native_available: bool) -> list[Candidate]:
    if op not in eb.OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(eb.OPS)}")
    if not isinstance(problem, eb.EmbeddingBagProblem):
        raise TypeError(f"{op} needs an EmbeddingBagProblem, got {type(problem).__name__}")
    work = eb.Work(op, problem, hw)
    out = []
    for config, registers in eb.native_configs(op, problem, hw):
        e = eb.native_estimate(work, config, registers)
        out.append(Candidate("native", config, e.time_us, e.bound, e.detail, native_available,
                             "" if native_available else NATIVE_MISSING, e.margin, e.registers, e.pieces))
    for config in eb.triton_configs(problem, hw):
        e = eb.triton_estimate(work, config)
        out.append(Candidate("triton", config, e.time_us, e.bound, e.detail, True, "", e.margin, e.registers,
                             e.pieces))
    return sorted(out, key=lambda c: c.time_us)


def _robust_best(candidates: list[Candidate]) -> Candidate:
    fastest = candidates[0].time_us  # sorted
    tied = [c for c in candidates if c.time_us <= fastest * (1 + ROBUST_TIE_FRACTION)]
    return min(tied, key=lambda c: (c.backend != "native", -min(c.margin, MARGIN_ENOUGH), c.pieces, c.registers,
                                    c.time_us))


@functools.lru_cache(maxsize=4096)
def decide(op: str, problem: Any, hardware: HardwareSpec, backend: str = "auto",
           native_available: bool = True) -> Decision:
    """Predict every candidate of `op` on `hardware` and choose one. `backend` "auto" takes the
    fastest available; "native", "triton" or "vendor" restrict the choice to that backend."""
    if backend not in ("auto",) + BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {', '.join(BACKENDS)}, got {backend!r}")
    candidates = _candidates(op, problem, hardware, native_available)
    offered = sorted({c.backend for c in candidates})
    if backend != "auto" and backend not in offered:
        raise ValueError(f"{op} has no {backend} candidate here; backends with candidates: {', '.join(offered)}")
    if backend == "native" and not native_available:
        raise ValueError(f"backend 'native' forced, but the {NATIVE_MISSING}")
    pool = [c for c in candidates if c.available and backend in ("auto", c.backend)]
    if not pool:
        raise ValueError(f"no available candidate for {op} (backend={backend!r})")
    choice = _robust_best(pool)
    if backend != "auto":
        reason = f"forced to {backend} (MYMETAOPS_BACKEND / use_backend): its fastest predicted config"
    elif not native_available and any(c.backend == "native" for c in candidates):
        best_native = next(c for c in candidates if c.backend == "native")
        reason = (f"{NATIVE_MISSING}: Triton selected (the best native config would take "
                  f"{best_native.time_us:.1f} us)")
    elif choice is pool[0]:
        reason = "fastest predicted"
    else:
        reason = (f"within {ROBUST_TIE_FRACTION:.0%} of the fastest prediction ({pool[0].time_us:.1f} us) and "
                  f"more robust: native, bytes in flight to spare, fewer row pieces, fewer registers")
    return Decision(op, hardware, problem, tuple(candidates), choice, reason)


def format_decision(decision: Decision, shown: int = SHOWN_CANDIDATES) -> str:
    """Multi-line table: hardware, problem, the fastest candidates (choice marked '*'), reason."""
    hw, p = decision.hardware, decision.problem
    lines = [
        f"{decision.op} on {hw.name} ({hw.vendor} {hw.arch}, {hw.sm_count} SMs/CUs, HBM {hw.hbm_tbps:.2f} TB/s "
        f"datasheet / {hw.achievable_hbm_tbps:.2f} achievable, last-level cache {hw.l2_mb:.0f} MB)",
        f"problem: {eb.describe(p)}",
        f"  {'backend':8} {'config':34} {'time us':>9}  {'bound':8} detail",
    ]
    rows = list(decision.candidates[:shown])
    if decision.choice not in rows:
        rows.append(decision.choice)
    for c in rows:
        mark = "*" if c is decision.choice else " "
        note = c.detail if c.available else f"UNAVAILABLE ({c.unavailable_reason}); {c.detail}"
        lines.append(f"{mark} {c.backend:8} {str(c.config):34} {c.time_us:9.1f}  {c.bound:8} {note}")
    if len(decision.candidates) > len(rows):
        lines.append(f"  ... {len(decision.candidates) - len(rows)} more candidates not shown")
    lines.append(f"choice: {decision.choice.backend} {decision.choice.config}: {decision.reason}")
    return "\n".join(lines)
