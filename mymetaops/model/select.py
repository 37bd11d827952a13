"""Pick the kernel for a call: every candidate's predicted time, the choice, and why. Knows no
family: candidates, problem descriptions and buckets come from the op's registered family."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .costs import FIRST_CALL_US
from .family import BACKENDS, Family, family_of
from .hardware import HardwareSpec

# Predictions within 1% are a tie the model cannot resolve; among tied candidates take the one
# whose prediction is most robust: native first (its counts rest on far more calibration: every
# native config was measured), then the vendor op (a few measured shapes), then Triton (its codegen
# adds unmodeled costs); then most bytes in flight beyond what saturates memory (up to
# MARGIN_ENOUGH; past it more buys nothing), then the fewest pieces per row (fewer dependent steps;
# narrow pieces were measured free on Hopper only), then fewest registers, then the fastest.
ROBUST_TIE_FRACTION = 0.01
MARGIN_ENOUGH = 4.0
TRUST_ORDER = ("native", "vendor", "triton")
# A candidate compiled on first use (Triton) is chosen despite its compile when it is predicted at
# least this much faster per call than every ready one: the compile is paid once per process, the
# slowdown on every call (bf16 GEMMs with rows that are not 16-byte multiples: cuBLAS 2.6x slower).
JIT_PAYS_OFF = 2.0
SHOWN_CANDIDATES = 10
NATIVE_MISSING = "native kernel not built for this device"


@dataclass(frozen=True)
class Candidate:
    backend: str  # "native" | "triton" | "vendor"
    config: Any  # a mymetaops.configs dataclass
    time_us: float  # per call, steady state
    bound: str  # "memory" | "latency" | "compute" | "launch"
    detail: str
    available: bool = True
    unavailable_reason: str = ""
    margin: float = 0.0  # bytes in flight / bytes in flight that saturate memory
    registers: int = 0
    pieces: int = 1  # pieces each row is fetched in
    first_call_us: float = 0.0  # paid once per process: JIT compilation
    kernel_us: float = 0.0  # the kernel's own time under a host floor (Estimate.kernel_us)

    @property
    def cost_us(self) -> float:
        """What selection weighs: a compile on the first call would stall it, so it counts in full."""
        return self.time_us + self.first_call_us


@dataclass(frozen=True)
class Decision:
    op: str
    hardware: HardwareSpec
    problem: Any
    candidates: tuple[Candidate, ...]  # fastest (steady state) first
    choice: Candidate
    reason: str
    absent: tuple[tuple[str, str], ...] = ()  # (backend, why it has no candidate here)


def _candidates(family: Family, op: str, problem: Any, hw: HardwareSpec, native_available: bool) -> list[Candidate]:
    if not isinstance(problem, family.problem_type):
        raise TypeError(f"{op} needs a {family.problem_type.__name__}, got {type(problem).__name__}")
    out = []
    for backend, config, e in family.candidates(op, problem, hw):
        if backend not in BACKENDS:
            raise ValueError(f"family {family.name!r} offered a candidate of unknown backend {backend!r}")
        missing = backend == "native" and not native_available
        out.append(Candidate(backend, config, e.time_us, e.bound, e.detail, not missing,
                             NATIVE_MISSING if missing else "", e.margin, e.registers, e.pieces,
                             FIRST_CALL_US.get(backend, 0.0), e.kernel_us))
    return sorted(out, key=lambda c: c.time_us)


def _robust_best(pool: list[Candidate]) -> Candidate:
    if jit_pays_off(pool):  # choose among the compiled-on-first-use candidates
        pool = [c for c in pool if c.first_call_us]
    best = min(pool, key=lambda c: c.cost_us)
    # The tie band is 1% of a call, not of the first call's compile (equal among forced Triton configs).
    tied = [c for c in pool if c.cost_us <= best.cost_us + ROBUST_TIE_FRACTION * best.time_us]
    return min(tied, key=lambda c: (TRUST_ORDER.index(c.backend), -min(c.margin, MARGIN_ENOUGH), c.pieces,
                                    c.registers, c.cost_us, c.kernel_us))


def jit_pays_off(pool: list[Candidate]) -> bool:
    """Whether the fastest candidate, though compiled on first use, is predicted JIT_PAYS_OFF times
    faster per call than every candidate that needs no compile: a one-time compile against a
    slowdown on every later call."""
    fastest = min(pool, key=lambda c: c.time_us)
    ready = [c.time_us for c in pool if not c.first_call_us]
    return bool(fastest.first_call_us) and bool(ready) and min(ready) >= JIT_PAYS_OFF * fastest.time_us


def first_call_note(c: Candidate) -> str:
    return f"+{c.first_call_us / 1e3:.0f} ms JIT on first use" if c.first_call_us else ""


def decide(op: str, problem: Any, hardware: HardwareSpec, backend: str = "auto",
           native_available: bool = True) -> Decision:
    """Predict every candidate of `op` on `hardware` and choose one. `backend` "auto" takes the
    fastest available, counting a first call's compilation; "native", "triton" or "vendor"
    restrict the choice to that backend. Memoized (the dispatch calls it once per bucket)."""
    return _decide(family_of(op), op, problem, hardware, backend, native_available)


@functools.lru_cache(maxsize=4096)
def _decide(family: Family, op: str, problem: Any, hardware: HardwareSpec, backend: str,
            native_available: bool) -> Decision:
    if backend not in ("auto",) + BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {', '.join(BACKENDS)}, got {backend!r}")
    candidates = _candidates(family, op, problem, hardware, native_available)
    offered = sorted({c.backend for c in candidates})
    absent = tuple((b, family.absent_reason(op, problem, hardware, b)) for b in BACKENDS if b not in offered)
    if backend != "auto" and backend not in offered:
        note = dict(absent)[backend]
        raise ValueError(f"{op} has no {backend} candidate here{': ' + note if note else ''}; "
                         f"backends with candidates: {', '.join(offered)}")
    if backend == "native" and not native_available:
        raise ValueError(f"backend 'native' forced, but the {NATIVE_MISSING}")
    pool = [c for c in candidates if c.available and backend in ("auto", c.backend)]
    if not pool:
        raise ValueError(f"no available candidate for {op} (backend={backend!r})")
    choice = _robust_best(pool)
    cheapest = min(pool, key=lambda c: (c.cost_us, c.kernel_us))
    if backend != "auto":
        reason = f"forced to {backend} (MYMETAOPS_BACKEND / use_backend): its fastest predicted config"
    elif not native_available and any(c.backend == "native" for c in candidates):
        best_native = next(c for c in candidates if c.backend == "native")
        reason = (f"{NATIVE_MISSING}: {choice.backend} selected (the best native config would take "
                  f"{best_native.time_us:.1f} us)")
    elif choice.first_call_us and jit_pays_off(pool):
        ready = min(c.time_us for c in pool if not c.first_call_us)
        reason = (f"fastest predicted per call, {ready / choice.time_us:.1f}x faster than the best candidate "
                  f"that needs no compile: its compile (paid once) pays off")
    elif choice is cheapest:
        reason = "fastest predicted"
        if choice.kernel_us and any(c is not choice and c.cost_us == choice.cost_us for c in pool):
            reason += (f": tied at the host path's {choice.time_us:.0f} us with others, the fastest kernel "
                       f"({choice.kernel_us:.1f} us)")
    else:
        reason = (f"within {ROBUST_TIE_FRACTION:.0%} of the fastest prediction ({cheapest.time_us:.1f} us) and "
                  f"more robust: native, then vendor, then Triton; bytes in flight to spare, fewer row "
                  f"pieces, fewer registers")
    fastest = pool[0]  # steady state
    if backend == "auto" and fastest.first_call_us and fastest.cost_us > choice.cost_us:
        reason += (f"; not {fastest.backend} {fastest.config} ({fastest.time_us:.1f} us per call): "
                   f"{first_call_note(fastest)}")
    if choice.first_call_us:
        reason += f" ({first_call_note(choice)})"
    if backend == "auto" and choice.backend != "native" and "native" in dict(absent):
        reason += f"; no native kernel takes this problem: {dict(absent)['native'] or 'none built for this chip'}"
    return Decision(op, hardware, problem, tuple(candidates), choice, reason, absent)


def format_decision(decision: Decision, shown: int = SHOWN_CANDIDATES) -> str:
    """Multi-line table: hardware, problem, the fastest candidates (choice marked '*'), reason."""
    p = decision.problem
    return "\n".join([_hardware_line(decision), f"problem: {family_of(decision.op).describe(p)}",
                      *_candidate_lines(decision, shown)])


def _hardware_line(d: Decision) -> str:
    hw = d.hardware
    return (f"{d.op} on {hw.name} ({hw.vendor} {hw.arch}, {hw.sm_count} SMs/CUs, HBM {hw.hbm_tbps:.2f} TB/s "
            f"datasheet / {hw.achievable_hbm_tbps:.2f} achievable, last-level cache {hw.l2_mb:.0f} MB)")


def _candidate_lines(decision: Decision, shown: int) -> list[str]:
    lines = [f"  {'backend':8} {'config':34} {'time us':>9}  {'first call':15} {'bound':8} detail"]
    rows = list(decision.candidates[:shown])
    if decision.choice not in rows:
        rows.append(decision.choice)
    for c in rows:
        mark = "*" if c is decision.choice else " "
        note = c.detail if c.available else f"UNAVAILABLE ({c.unavailable_reason}); {c.detail}"
        first = f"+{c.first_call_us / 1e3:.0f} ms JIT" if c.first_call_us else ""
        lines.append(f"{mark} {c.backend:8} {str(c.config):34} {c.time_us:9.1f}  {first:15} {c.bound:8} {note}")
    if len(decision.candidates) > len(rows):
        lines.append(f"  ... {len(decision.candidates) - len(rows)} more candidates not shown")
    lines += [f"  {backend}: no candidate: {why or 'none for this op'}" for backend, why in decision.absent]
    lines.append(f"choice: {decision.choice.backend} {decision.choice.config}: {decision.reason}")
    return lines


# --- what the dispatch runs: one decision per bucket ---------------------------------------------

@dataclass(frozen=True)
class BucketedDecision:
    problem: Any  # the exact problem of the call
    key: tuple[int, ...]  # its bucket
    decision: Decision  # made for the bucket's representative: what the dispatch runs
    exact: Decision  # what the model would choose for the exact problem


def decide_bucketed(op: str, problem: Any, hardware: HardwareSpec, backend: str = "auto",
                    native_available: bool = True) -> BucketedDecision:
    """The decision the dispatch makes for `problem`: that of its bucket's representative."""
    family = family_of(op)
    key = family.bucket_key(op, problem)
    representative = family.problem_from_key(op, key)
    return BucketedDecision(problem, key, decide(op, representative, hardware, backend, native_available),
                            decide(op, problem, hardware, backend, native_available))


def same_candidate(decision: Decision, c: Candidate) -> Candidate | None:
    """`c`'s backend and config among another decision's candidates (None: not offered there)."""
    return next((x for x in decision.candidates if x.backend == c.backend and x.config == c.config), None)


def format_bucketed(b: BucketedDecision, shown: int = SHOWN_CANDIDATES) -> str:
    """format_decision of the bucket's decision, with the exact problem and the bucket."""
    d, family = b.decision, family_of(b.decision.op)
    at_exact = same_candidate(b.exact, d.choice)
    if at_exact is None:
        verdict = "not offered at the exact problem"
    else:
        own = b.exact.choice
        verdict = (f"{at_exact.time_us:.1f} us; the exact problem's own choice ({own.backend} {own.config}) "
                   f"{own.time_us:.1f} us ({at_exact.time_us / own.time_us - 1:+.1%})")
    return "\n".join([
        _hardware_line(d),
        f"problem: {family.describe(b.problem)}",
        f"bucket {b.key}: decided once for its representative,",
        f"         {family.describe(d.problem)}",
        *_candidate_lines(d, shown),
        f"at the exact problem the choice takes {verdict}",
    ])
