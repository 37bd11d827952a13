"""Command line: the model's decision for a call shape, the regret of deciding per bucket, or the
hardware table, on any machine. Each op takes its family's arguments (see `explain <op> --help`).

    python -m mymetaops.model explain embedding_bag --device MI350X --rows 10000000 --dim 128 \\
        --bags 65536 --bag-size 32 --dtype fp32 [--index-dtype int64] [--mode sum] \\
        [--per-sample-weights] [--backward] [--backend triton] [--no-native]
    python -m mymetaops.model regret embedding_bag --device H200 [--samples 2000] [--seed 0]
    python -m mymetaops.model hardware
"""
from __future__ import annotations

import argparse
import sys

from .family import BACKENDS, families, family_of, get_family
from .hardware import DTYPES, HARDWARE, HardwareSpec, detect_hardware, get_hardware
from .regret import format_regret, sweep
from .select import SHOWN_CANDIDATES, decide_bucketed, format_bucketed


def hardware_table() -> str:
    head = (f"{'name':8} {'arch':8} {'SMs':>4} {'GHz':>5} {'HBM TB/s':>9} {'(achiev.)':>9} {'GB':>5} "
            f"{'LLC MB':>7} {'smem KB':>8} {'warp':>4} {'lat ns':>6} " + " ".join(f"{d:>6}" for d in DTYPES))
    lines = [head + "   (peak dense TFLOP/s)"]
    for s in HARDWARE.values():
        lines.append(f"{s.name:8} {s.arch:8} {s.sm_count:4d} {s.clock_ghz:5.2f} {s.hbm_tbps:9.2f} "
                     f"{s.achievable_hbm_tbps:9.2f} {s.hbm_gb:5.0f} {s.l2_mb:7.0f} {s.smem_kb_per_sm:8.0f} "
                     f"{s.warp_size:4d} {s.mem_latency_ns:6.0f} "
                     + " ".join(f"{s.peak_tflops.get(d, 0):6.0f}" for d in DTYPES))
    return "\n".join(lines)


def _device(name: str | None) -> HardwareSpec:
    return detect_hardware() if name is None else get_hardware(name)


def _parser() -> argparse.ArgumentParser:
    """Built per call: families registered at runtime get their commands too."""
    parser = argparse.ArgumentParser(prog="python -m mymetaops.model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("hardware", help="print the hardware table")
    device_help = f"one of {', '.join(HARDWARE)} (default: the GPU here)"
    explain = sub.add_parser("explain", help="print every candidate's predicted time and the choice")
    ops = explain.add_subparsers(dest="op", required=True, metavar="op")
    for family in families():
        for op in family.ops:
            p = ops.add_parser(op, help=f"{family.name} family")
            p.add_argument("--device", help=device_help)
            p.add_argument("--backward", action="store_true", help="also the backward kernels' decisions")
            p.add_argument("--backend", choices=("auto",) + BACKENDS, default="auto")
            p.add_argument("--no-native", action="store_true", help="as if no native kernel were built")
            p.add_argument("--show", type=int, default=SHOWN_CANDIDATES, help="candidates listed per decision")
            family.add_arguments(p)
    regret = sub.add_parser("regret", help="regret of deciding per bucket over realistic random problems")
    regret.add_argument("family", choices=[f.name for f in families()])
    regret.add_argument("--device", help=device_help)
    regret.add_argument("--samples", type=int, default=2000, help="random problems per op")
    regret.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "hardware":
            print(hardware_table())
            return 0
        hw = _device(args.device)
        if args.command == "regret":
            family = get_family(args.family)
            print(format_regret(sweep(family, hw, args.samples, args.seed), family))
            return 0
        family = family_of(args.op)
        problem = family.problem_from_args(args.op, args)
        todo = [(args.op, problem)] + (family.backward_ops(args.op, problem) if args.backward else [])
        decisions = [decide_bucketed(op, p, hw, args.backend, not args.no_native) for op, p in todo]
    except (KeyError, ValueError, RuntimeError) as e:  # unknown device, no GPU, bad combination
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    print("\n\n".join(format_bucketed(d, args.show) for d in decisions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
