"""What deciding per bucket instead of per problem costs: the regret report.

For one exact problem, regret = predicted time (at the exact problem) of the choice made for its
bucket's representative / predicted time of the exact problem's own choice - 1. Steady-state times:
the first-call compile only steers the choice.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Iterable

from .family import Family
from .hardware import HardwareSpec
from .select import decide_bucketed, same_candidate

OVER = 0.01  # the share of problems over this regret is reported


@dataclass(frozen=True)
class RegretReport:
    op: str
    hardware: HardwareSpec
    samples: int
    mean: float
    max: float
    share_over: float  # of problems with regret > OVER
    worst: Any  # the problem of the max regret
    worst_key: tuple[int, ...]


def problem_regret(op: str, problem: Any, hw: HardwareSpec, native_available: bool = True) -> tuple[float, tuple]:
    """(regret, bucket key) of one problem; inf when the bucket's choice is not offered for it."""
    b = decide_bucketed(op, problem, hw, native_available=native_available)
    at_exact = same_candidate(b.exact, b.decision.choice)
    if at_exact is None:
        return math.inf, b.key
    return at_exact.time_us / b.exact.choice.time_us - 1.0, b.key


def regret(op: str, problems: Iterable[Any], hw: HardwareSpec, native_available: bool = True) -> RegretReport:
    rows = [(problem_regret(op, p, hw, native_available), p) for p in problems]
    if not rows:
        raise ValueError("regret needs at least one problem")
    values = [r for (r, _), _ in rows]
    (worst, worst_key), worst_problem = max(rows, key=lambda row: row[0][0])
    return RegretReport(op, hw, len(rows), sum(values) / len(values), worst, sum(v > OVER for v in values) / len(values),
                        worst_problem, worst_key)


def sweep(family: Family, hw: HardwareSpec, samples: int, seed: int = 0,
          ops: Iterable[str] | None = None) -> list[RegretReport]:
    """regret of `samples` of the family's realistic random problems, per op (fixed seed)."""
    reports = []
    for op in ops or family.ops:
        rng = random.Random(f"{seed}:{op}")
        reports.append(regret(op, [family.sample(op, rng) for _ in range(samples)], hw))
    return reports


def format_regret(reports: list[RegretReport], family: Family) -> str:
    lines = [f"regret of deciding per bucket (predicted time of the bucket's choice / the problem's own "
             f"choice - 1) on {reports[0].hardware.name}",
             f"  {'op':45} {'samples':>7} {'mean':>7} {'max':>7} {f'>{OVER:.0%}':>6}"]
    for r in reports:
        lines.append(f"  {r.op:45} {r.samples:7d} {r.mean:7.2%} {r.max:7.2%} {r.share_over:6.1%}")
    for r in reports:
        if r.max > OVER:
            lines.append(f"worst {r.op}: bucket {r.worst_key}: {family.describe(r.worst)}")
    return "\n".join(lines)
