"""Command line: the model's decision for a call shape, or the hardware table, on any machine.

    python -m mymetaops.model explain embedding_bag --device MI350X --rows 10000000 --dim 128 \\
        --bags 65536 --bag-size 32 --dtype fp32 [--index-dtype int64] [--mode sum] \\
        [--per-sample-weights] [--backward] [--backend triton] [--no-native]
    python -m mymetaops.model hardware
"""
from __future__ import annotations

import argparse
import sys

from .embedding_bag import ELEMENT_BYTES, INDEX_BYTES, OPS, EmbeddingBagProblem
from .hardware import DTYPES, HARDWARE, HardwareSpec, detect_hardware, get_hardware
from .select import BACKENDS, decide, format_decision


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


def _align_bytes(row_bytes: int) -> int:
    """Largest power of two <= 16 dividing the row bytes (tensors from torch are 16-byte aligned)."""
    align = 16
    while align > 1 and row_bytes % align:
        align //= 2
    return align


def _device(name: str | None) -> HardwareSpec:
    return detect_hardware() if name is None else get_hardware(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mymetaops.model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("hardware", help="print the hardware table")
    ex = sub.add_parser("explain", help="print every candidate's predicted time and the choice")
    ex.add_argument("op", choices=OPS)
    ex.add_argument("--device", help=f"one of {', '.join(HARDWARE)} (default: the GPU here)")
    ex.add_argument("--rows", type=int, required=True)
    ex.add_argument("--dim", type=int, required=True)
    ex.add_argument("--bags", type=int, required=True)
    ex.add_argument("--bag-size", type=float, required=True, help="mean indices per bag")
    ex.add_argument("--dtype", choices=sorted(ELEMENT_BYTES), default="fp32")
    ex.add_argument("--index-dtype", choices=sorted(INDEX_BYTES), default="int64")
    ex.add_argument("--mode", choices=("sum", "mean"), default="sum")
    ex.add_argument("--per-sample-weights", action="store_true")
    ex.add_argument("--backward", action="store_true", help="also the backward kernels' decisions")
    ex.add_argument("--align-bytes", type=int, help="default: from the row bytes")
    ex.add_argument("--backend", choices=("auto",) + BACKENDS, default="auto")
    ex.add_argument("--no-native", action="store_true", help="as if no native kernel were built")
    ex.add_argument("--show", type=int, default=10, help="candidates listed per decision")
    args = parser.parse_args(argv)
    try:
        if args.command == "hardware":
            print(hardware_table())
            return 0
        hw = _device(args.device)
        row_bytes = args.dim * ELEMENT_BYTES[args.dtype]
        problem = EmbeddingBagProblem(
            args.rows, args.dim, args.bags, round(args.bags * args.bag_size), args.dtype, args.index_dtype,
            args.mode, args.per_sample_weights, args.align_bytes or _align_bytes(row_bytes))
        ops = [args.op]
        if args.backward and args.op == "embedding_bag":
            ops.append("embedding_bag_backward")
            if args.per_sample_weights:
                ops.append("embedding_bag_per_sample_weights_backward")
        decisions = [decide(op, problem, hw, args.backend, not args.no_native) for op in ops]
    except (KeyError, ValueError, RuntimeError) as e:  # unknown device, no GPU, bad combination
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    print("\n\n".join(format_decision(d, args.show) for d in decisions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
