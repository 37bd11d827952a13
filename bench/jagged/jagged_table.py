"""The jagged family's main table: each of the nine ops forward and backward, as users call it (the
public wrapper, default arguments, total_L / max_L / num_dense_output_rows given so nothing
syncs), beside its anchor and a torch copy of the same bytes in the same run, every forced
backend the model has for it, and an int32-offsets row; GB/s against the copy ceiling, TFLOP/s
against a bf16 torch.mm measured in the same run.

    python bench/jagged/jagged_table.py [--out bench/results/<date>-<gpu>-jagged] [--budget-s 150]
    python bench/jagged/jagged_table.py --dry-run   # CPU: the plumbing, tiny shapes, fake timings

Shapes (B, max_L, D) = (1024, 1024, 256) and (4096, 256, 128), bf16 values N(0, 1), lengths
uniform in [1, max_L] (seeded, the same for every op of a shape), int64 offsets; the bmm ops take
D = N = 256 at both shapes; jagged_index_select picks B sequences uniformly with repetition. Every
case's inputs are larger than the L2 (60 MB on the H200), and do_bench flushes it before each call.

Rows of a case, each a do_bench median (CUDA events, L2 flushed before each call; the first call
is made and checked before, its wall time recorded as first_call_s):
  ours            the public wrapper (mymetaops.<op>), int64 offsets
  anchor          what a user would write with torch: aten._jagged_to_padded_dense_forward(values,
                  [offsets], [max_L], 0.0) (to_padded), aten._padded_dense_to_jagged_forward(dense,
                  [offsets], total_L) (dense_to_jagged); for the elementwise ops pad with aten,
                  add / mul, back with aten; softmax: a padded masked softmax (pad with -inf,
                  softmax over the rows, back: NJT's softmax); bmm: pad + torch.bmm (+ back to
                  jagged); index_select: values.index_select over the picked rows (cumsum +
                  repeat_interleave with output_size). aten's conversions have no derivative: their
                  backward is the other conversion, as NJT runs it.
  copy            dst.copy_(src) moving the case's bytes (half read, half written)
  ours int32      the wrapper with int32 offsets (lengths and indices for index_select)
  backend X       the wrapper under mymetaops.use_backend(X), for each backend the model has a
                  candidate of for the op's forward kernel (skipped on the CPU; one that raises is
                  reported, not fatal)
Backward ("bwd"): torch.autograd.grad(out, floating inputs, grad, retain_graph=True) with a fixed
grad tensor on a graph built once: the gradient kernels the op's autograd runs, timed alone.
Bytes: jagged_harness.moved_bytes (the table in its docstring); the bmm FLOPs count the rows that
exist (2 U K N forward, twice that backward), the anchor's padding not included.
Numerics: every row's output (and gradients) once against the anchor's (int64, same inputs, same
grad): max |ours - anchor| / max |anchor| <= 2e-2, so a fast wrong kernel cannot pass.
Checks (H200, the issue): to_padded / dense_to_jagged / elementwise forward >= 85% of the 4.27
TB/s copy ceiling (3630 GB/s); to_padded >= 1.5x aten, dense_to_jagged >= 1.9x aten; bmm forward
>= 50% of the bf16 mm rate measured here (8192^3). On the CPU the timing bounds are not judged.

Writes <out>.json (every record and per-case summaries; rewritten after every case, so a crash
keeps what was measured) and <out>.md. Two passes: first ours, the anchor and the copy of every
case (the headline numbers), then the int32 rows and the forced backends, until --budget-s is
spent.
"""
from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jagged_harness import (ALL_OPS, BF16, BF16_CEILING_TFLOPS, BMM, CONVERSIONS, COPY_CEILING_TBPS,  # noqa: E402
                            DRY_RUN_SHAPES, ELEMENTWISE, REL_ERR_BOUND, SEED, SHAPES, SHORT, add_device_arguments,
                            bmm_dim, case_with, check, checks_markdown, cuda_usable, flops, fmt, gpu_check, hardware,
                            make_case, max_rel_err, median_us, meta_line, moved_bytes, offered_backends, output_shape,
                            predicted_us, primary, report_main, short_error, specs, sync, write_report)
from bench_common import BudgetExhausted, DeviceLost  # noqa: E402
import torch  # noqa: E402

from mymetaops import use_backend  # noqa: E402
from mymetaops.ops import dispatch  # noqa: E402

NAME = "jagged_table"
COPY_FRACTION = 0.85  # the issue: conversions and elementwise ops at >= 85% of the copy ceiling
SPEEDUP_BOUND = {"jagged_to_padded_dense": 1.5, "dense_to_jagged": 1.9}  # ours / aten throughput
BMM_FRACTION = 0.5  # bmm forward >= 50% of the bf16 mm rate
MM_SIZE, DRY_RUN_MM_SIZE = 8192, 128


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-jagged)")
    parser.add_argument("--budget-s", type=float, default=150.0,
                        help="stop starting new cases after this many seconds (default 150)")
    parser.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warmup per timing")
    parser.add_argument("--rep-ms", type=float, default=30.0, help="do_bench measuring window per timing")
    parser.add_argument("--repeats", type=int, default=2,
                        help="medians per headline record, taken in turns with the case's other headline calls; "
                             "the smallest is kept")
    parser.add_argument("--ops", help="comma-separated subset of: " + ", ".join(ALL_OPS))
    parser.add_argument("--shapes", help="comma-separated BxLxD (default: the issue's two)")
    parser.add_argument("--no-backends", action="store_true", help="no forced-backend or int32 rows")


# --- one timing -------------------------------------------------------------------------------------

class Bench:
    """Times calls for one run: the first call (wall time, numerics against the reference),
    do_bench medians, the budget, and the records."""

    def __init__(self, args, device, started, hw):
        self.args, self.device, self.hw = args, device, hw
        self.deadline = started + args.budget_s
        self.hard_deadline = self.deadline + max(10.0, 0.05 * args.budget_s)
        self.records = []
        self.fns = {}
        self.mm_tflops = None  # the bf16 mm ceiling measured in this run

    def over_budget(self) -> bool:
        return time.monotonic() > self.deadline

    def derive(self, r: dict) -> None:
        t = r["time_us"]
        if not t:
            return
        copy_ceiling = COPY_CEILING_TBPS.get(self.hw.name)
        r["gbps"] = r["bytes"] / t / 1e3 if r["bytes"] else None
        r["pct_copy_ceiling"] = 100 * r["gbps"] / (copy_ceiling * 1e3) if r["gbps"] and copy_ceiling else None
        r["tflops"] = r["flops"] / t / 1e6 if r["flops"] else None
        r["pct_mm"] = 100 * r["tflops"] / self.mm_tflops if r["tflops"] and self.mm_tflops else None

    def measure(self, base: dict, make, ref=None, repeats: int | None = None) -> dict:
        """One record: make() builds the timed call (for a backward, the graph), its first call is
        checked against ref, then timed: the smallest of `repeats` do_bench medians."""
        if time.monotonic() > self.hard_deadline:
            raise BudgetExhausted()
        r = dict(base, time_us=None, gbps=None, pct_copy_ceiling=None, tflops=None, pct_mm=None, rel_err=None,
                 first_call_s=None, error=None)
        try:
            sync(self.device)
            start = time.perf_counter()
            fn = make()
            out = fn()
            sync(self.device)
            r["first_call_s"] = time.perf_counter() - start
            r["rel_err"] = max_rel_err(out, ref)
            del out
            misses = dispatch.cache_info()["misses"] if self.device.type == "cuda" else 0
            r["time_us"] = min(median_us(fn, self.device, self.args.warmup_ms, self.args.rep_ms)
                               for _ in range(repeats or self.args.repeats))
            if self.device.type == "cuda" and base["what"].startswith("ours"):
                # The dispatch decides once per bucket: a miss while timing is a per-call model run.
                r["cache_misses_timed"] = dispatch.cache_info()["misses"] - misses
            self.derive(r)
            self.fns[id(r)] = fn
        except BudgetExhausted:
            raise
        except Exception as e:  # noqa: BLE001  (a failing row is reported, not fatal)
            r["error"] = short_error(e)
            lost = cuda_usable(self.device)
            if lost:
                self.records.append(r)
                raise DeviceLost(f"{base['op']} {base['shape']} {base['direction']} {base['name']}: {r['error']}; "
                                 f"device unusable: {lost}")
        self.records.append(r)
        return r

    def interleave(self, records: list[dict]) -> None:
        """More medians of a case's headline calls (ours, the anchor, the copy), taken in turns,
        each record keeping its smallest: a slow phase hits all of them alike."""
        records = [r for r in records if r is not None and r.get("time_us") is not None]
        for _ in range(max(0, self.args.repeats - 1)):
            for r in records:
                if time.monotonic() > self.hard_deadline:
                    raise BudgetExhausted()
                t = median_us(self.fns[id(r)], self.device, self.args.warmup_ms, self.args.rep_ms)
                if t < r["time_us"]:
                    r["time_us"] = t
                    self.derive(r)

    def skipped(self, base: dict, why: str) -> dict:
        r = dict(base, time_us=None, gbps=None, pct_copy_ceiling=None, tflops=None, pct_mm=None, rel_err=None,
                 first_call_s=None, error=None, skipped=why)
        self.records.append(r)
        return r


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


def forward_make(call, case, backend=None):
    def make():
        if backend is None:
            return lambda: primary(call(case, case.inputs))

        def fn():
            with use_backend(backend):
                return primary(call(case, case.inputs))
        return fn
    return make


def backward_make(call, case, grad, backend=None):
    """The graph built once (under the backend: its backward runs under it too), then the gradient
    of the output w.r.t. every floating input, the graph retained."""
    def make():
        leaves = [t.detach().requires_grad_() for t in case.inputs]
        with use_backend(backend) if backend else nullcontext():
            out = primary(call(case, leaves))

        def fn():
            with use_backend(backend) if backend else nullcontext():
                return torch.autograd.grad(out, leaves, grad, retain_graph=True)
        return fn
    return make


def copy_make(nbytes: float, device):
    def make():
        n = max(1, int(nbytes // 4))  # bf16 elements read, and as many written
        src = torch.ones(n, dtype=BF16, device=device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    return make


def bench_ceiling(bench: Bench, device, dry_run: bool) -> dict:
    n = DRY_RUN_MM_SIZE if dry_run else MM_SIZE
    base = dict(shape=f"{n}^3", shape_index=-1, op="torch.mm", direction="fwd", what="ceiling",
                name=f"torch.mm bf16 {n}^3", backend=None, index_dtype=None, bytes=0, flops=2.0 * n ** 3,
                predicted_us=None)

    def make():
        g = torch.Generator(device=device).manual_seed(7)
        a = torch.randn(n, n, device=device, dtype=BF16, generator=g)
        b = torch.randn(n, n, device=device, dtype=BF16, generator=g)
        return lambda: torch.mm(a, b)
    r = bench.measure(base, make, repeats=2)
    bench.mm_tflops = r["tflops"]
    return r


def bench_case(bench: Bench, op: str, index: int, shape, phase: str, summary: dict, native: bool) -> None:
    device, hw, dry = bench.device, bench.hw, bench.args.dry_run
    spec = specs()[op]
    case = make_case(op, shape, device, torch.int64, seed=SEED + index, bmm_d=bmm_dim(dry))
    s = case.sizes
    # The reference: the anchor's output and gradients (int64 offsets, a fixed grad tensor). If the
    # anchor cannot run, ours is still timed, unverified (its numerics check fails as n/a).
    g = torch.Generator(device=device).manual_seed(SEED + 100 + index)
    grad = torch.randn(output_shape(op, s), device=device, dtype=case.inputs[0].dtype, generator=g)
    try:
        leaves = [t.detach().requires_grad_() for t in case.inputs]
        ref_out = spec.anchor(case, leaves)
        ref_grads = torch.autograd.grad(ref_out, leaves, grad)
        ref_out = ref_out.detach()
        del leaves
    except Exception as e:  # noqa: BLE001
        ref_out = ref_grads = None
        summary["reference_error"] = f"the anchor ({spec.anchor_name}) raised: {short_error(e)}"
        if cuda_usable(device):
            raise DeviceLost(f"{op} {shape_name(shape)}: the anchor: {short_error(e)}") from e
    sizes = {d: (moved_bytes(op, d, s), flops(op, d, s)) for d in ("fwd", "bwd")}
    summary.update(op=op, shape=shape_name(shape), shape_index=index, batch=s.batch, max_length=s.max_length,
                   dim=s.dim, n=s.n, total=s.total, used=s.used, selected=s.selected,
                   bytes_fwd=sizes["fwd"][0], bytes_bwd=sizes["bwd"][0], flops_fwd=sizes["fwd"][1],
                   flops_bwd=sizes["bwd"][1], anchor=spec.anchor_name,
                   inputs_mb=sum(t.numel() * t.element_size() for t in case.inputs) / 1e6)

    def base(direction, what, name, backend=None, index_dtype="int64", predicted=None, nbytes=None):
        b, f = sizes[direction]
        return dict(shape=shape_name(shape), shape_index=index, op=op, direction=direction, what=what, name=name,
                    backend=backend, index_dtype=index_dtype, bytes=b if nbytes is None else nbytes,
                    flops=f if what != "copy" else 0.0, predicted_us=predicted)

    def refs(direction):
        return ref_out if direction == "fwd" else ref_grads

    def make(direction, call, c, backend=None):
        return forward_make(call, c, backend) if direction == "fwd" else backward_make(call, c, grad, backend)

    if phase == "core":
        for direction in ("fwd", "bwd"):
            nbytes = sizes[direction][0]
            headline = [
                bench.measure(base(direction, "ours", f"mymetaops.{op}",
                                   predicted=predicted_us(op, direction, s, hw, "auto", native)),
                              make(direction, spec.ours, case), refs(direction), repeats=1),
                bench.measure(base(direction, "anchor", spec.anchor_name), make(direction, spec.anchor, case),
                              refs(direction), repeats=1),
                bench.measure(base(direction, "copy", "dst.copy_(src), the same bytes",
                                   nbytes=4 * max(1, int(nbytes // 4))), copy_make(nbytes, device), repeats=1)]
            bench.interleave(headline)
    else:
        c32 = case_with(case, torch.int32)
        for direction in ("fwd", "bwd"):
            bench.measure(base(direction, "ours int32", f"mymetaops.{op}, int32 offsets", index_dtype="int32",
                               predicted=predicted_us(op, direction, c32.sizes, hw, "auto", native, "int32")),
                          make(direction, spec.ours, c32), refs(direction))
        for direction in ("fwd", "bwd"):
            for backend in offered_backends(op, direction, s, hw):
                b = base(direction, f"backend {backend}", f"mymetaops.{op} under use_backend({backend!r})", backend,
                         predicted=predicted_us(op, direction, s, hw, backend, native))
                if device.type != "cuda":
                    bench.skipped(b, "a GPU backend: skipped on the CPU")
                else:
                    bench.measure(b, make(direction, spec.ours, case, backend), refs(direction))
        summary["rest_done"] = True


def case_records(bench: Bench, op: str, shape) -> list[dict]:
    return [r for r in bench.records if r["op"] == op and r["shape"] == shape_name(shape)]


def summarize(summary: dict, recs: list[dict]) -> None:
    def get(direction, what):
        return next((r for r in recs if r["direction"] == direction and r["what"] == what), None)

    for d in ("fwd", "bwd"):
        ours, anchor, copy_, i32 = get(d, "ours"), get(d, "anchor"), get(d, "copy"), get(d, "ours int32")
        summary[f"{d}_us"] = ours["time_us"] if ours else None
        summary[f"{d}_gbps"] = ours["gbps"] if ours else None
        summary[f"{d}_pct_copy_ceiling"] = ours["pct_copy_ceiling"] if ours else None
        summary[f"{d}_tflops"] = ours["tflops"] if ours else None
        summary[f"{d}_pct_mm"] = ours["pct_mm"] if ours else None
        summary[f"{d}_predicted_us"] = ours["predicted_us"] if ours else None
        summary[f"{d}_error"] = ours["error"] if ours else None
        summary[f"{d}_anchor_us"] = anchor["time_us"] if anchor else None
        summary[f"{d}_anchor_error"] = anchor["error"] if anchor else None
        summary[f"{d}_speedup_vs_anchor"] = (anchor["time_us"] / ours["time_us"]
                                            if ours and anchor and ours["time_us"] and anchor["time_us"] else None)
        summary[f"{d}_copy_gbps"] = copy_["gbps"] if copy_ else None
        summary[f"{d}_int32_us"] = i32["time_us"] if i32 else None
        summary[f"{d}_backends"] = {r["backend"]: dict(us=r["time_us"], error=r["error"], skipped=r.get("skipped"),
                                                       predicted_us=r["predicted_us"], rel_err=r["rel_err"])
                                    for r in recs if r["direction"] == d and r["what"].startswith("backend")}
    errs = [(r["rel_err"], r) for r in recs if r.get("rel_err") is not None]
    worst = max(errs, key=lambda t: t[0]) if errs else None
    summary["worst_rel_err"] = worst[0] if worst else None
    summary["worst_rel_err_row"] = f"{worst[1]['direction']} {worst[1]['what']}" if worst else None
    summary["failed_rows"] = ([summary["reference_error"]] if summary.get("reference_error") else []) + \
        [f"{r['direction']} {r['what']}: {r['error']}" for r in recs if r["error"]]


# --- checks and the report ------------------------------------------------------------------------

def summary_checks(cases: list[dict], ceiling: dict | None, gpu: bool, hw_name: str) -> list[dict]:
    checks = []
    copy_ceiling = COPY_CEILING_TBPS.get(hw_name, 0.0)
    bound = math.ceil(COPY_FRACTION * copy_ceiling * 1e3 - 1e-6)  # GB/s: 3630 on the H200
    for c in cases:
        if "op" not in c:
            continue
        op, where = c["op"], f"{c['shape']}"
        short = SHORT[op]
        if op in CONVERSIONS + ELEMENTWISE:
            checks.append(gpu_check(f"{short} {where} fwd: GB/s, >= {COPY_FRACTION:.0%} of the {copy_ceiling} TB/s copy "
                                    f"ceiling (copy of the same bytes here: {fmt(c.get('fwd_copy_gbps'), '{:.0f}')})",
                                    c.get("fwd_gbps"), bound, False, gpu, "{:.0f}"))
        if op in SPEEDUP_BOUND:
            checks.append(gpu_check(f"{short} {where} fwd: ours / aten throughput", c.get("fwd_speedup_vs_anchor"),
                                    SPEEDUP_BOUND[op], False, gpu))
        if op in BMM:
            ratio = c["fwd_pct_mm"] / 100 if c.get("fwd_pct_mm") is not None else None
            mm = ceiling.get("tflops") if ceiling else None
            # What the bytes allow: at the copy ceiling, the call takes at least bytes / 4.27 TB/s.
            allowed = (c["flops_fwd"] / (c["bytes_fwd"] / (copy_ceiling * 1e6)) / 1e6 / mm
                       if mm and copy_ceiling else None)
            checks.append(gpu_check(f"{short} {where} fwd: TFLOP/s / bf16 mm TFLOP/s measured here "
                                    f"({fmt(c.get('fwd_tflops'), '{:.0f}')} / {fmt(mm, '{:.0f}')}; its bytes at "
                                    f"{copy_ceiling} TB/s allow {fmt(allowed, '{:.2f}')})",
                                    ratio, BMM_FRACTION, False, gpu))
        if op in ("jagged_softmax", "jagged_index_select"):
            checks.append(check(f"{short} {where} fwd: GB/s (copy of the same bytes: "
                                f"{fmt(c.get('fwd_copy_gbps'), '{:.0f}')})", c.get("fwd_gbps"), None, False, "{:.0f}"))
        checks.append(check(f"{short} {where}: worst rel err vs the anchor, fwd and bwd, every row "
                            f"({c.get('worst_rel_err_row') or '—'})", c.get("worst_rel_err"), REL_ERR_BOUND, True,
                            "{:.1e}"))
    failed = [f"{c['op']} {c['shape']} {f}" for c in cases if "op" in c for f in c.get("failed_rows", [])]
    checks.append(check("rows that raised (forced backends included; listed below the tables)", len(failed), None,
                        True, "{:.0f}"))
    return checks


def floor_us(c: dict, d: str, hw: str) -> float | None:
    """The call's floor: its bytes at the copy ceiling, its FLOPs at the bf16 mm ceiling (the issue's)."""
    tbps, tflops = COPY_CEILING_TBPS.get(hw), BF16_CEILING_TFLOPS.get(hw)
    if not tbps:
        return None
    return max(c[f"bytes_{d}"] / (tbps * 1e6), c[f"flops_{d}"] / (tflops * 1e6) if tflops else 0.0)


def _pct(v):
    return fmt(v, "{:.0f}%")


def _backend_cell(c, d, b):
    x = c.get(f"{d}_backends", {}).get(b)
    if x is None:
        return ""
    if x.get("skipped"):
        return "skip"
    if x.get("error"):
        return "ERR"
    return fmt(x.get("us"))


def markdown(meta, report) -> str:
    hw = meta["hardware"]
    lines = [f"# Jagged family on {meta_line(meta)}", ""]
    if report.get("aborted"):
        lines += [f"> ABORTED: {report['aborted']}", ""]
    if report.get("skipped"):
        lines += [f"> Time budget spent: not run: {', '.join(report['skipped'])}", ""]
    for note in report.get("notes", []):
        lines += [f"> {note}", ""]
    lines += checks_markdown(report["checks"])
    ceiling = report.get("ceiling") or {}
    lines += ["", f"Ceilings: copy {COPY_CEILING_TBPS.get(hw, '—')} TB/s (the issue's; a copy of each row's bytes is "
                  f"measured beside it), bf16 torch.mm {fmt(ceiling.get('tflops'), '{:.0f}')} TFLOP/s measured here at "
                  f"{ceiling.get('shape', '—')} (the issue's: {fmt(BF16_CEILING_TFLOPS.get(hw), '{:.0f}')}). "
                  "bf16 values, do_bench medians (us), L2 flushed before each call. bwd = torch.autograd.grad of the "
                  "output w.r.t. the floating inputs, a fixed grad tensor. speedup = anchor us / ours us. "
                  "int32 = ours with int32 offsets; native / triton / vendor = ours under use_backend "
                  "(skip: GPU only; ERR: raised, listed below). floor = the bytes at the copy ceiling or the FLOPs at "
                  "the issue's bf16 mm ceiling, whichever is longer. predicted = the model (the dispatch's choice, "
                  "summed over the kernels of the call)."]
    cases = [c for c in report["cases"] if "op" in c]
    for shape in dict.fromkeys(c["shape"] for c in cases):
        rows = [c for c in cases if c["shape"] == shape]
        c0 = rows[0]
        lines += ["", f"## (B, max_L, D) = ({shape.replace('x', ', ')}): total_L = {c0['total']} "
                      f"(lengths uniform in [1, {c0['max_length']}]), int64 offsets; bmm D = N = "
                      f"{next((c['dim'] for c in rows if c['op'] in BMM), '—')}", "",
                  "| op | dir | MB moved | GFLOP | floor us | ours us | GB/s (% of copy ceiling) | copy GB/s | TFLOP/s "
                  "(% of mm) | anchor us | speedup | int32 us | native us | triton us | vendor us | predicted us | "
                  "worst rel err |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in rows:
            for d in ("fwd", "bwd"):
                ours = fmt(c.get(f"{d}_us")) if not c.get(f"{d}_error") else "ERR"
                anchor = fmt(c.get(f"{d}_anchor_us")) if not c.get(f"{d}_anchor_error") else "ERR"
                tb = (f"{fmt(c.get(f'{d}_gbps'), '{:.0f}')} ({_pct(c.get(f'{d}_pct_copy_ceiling'))})"
                      if c.get(f"{d}_gbps") else "—")
                tf = (f"{fmt(c.get(f'{d}_tflops'), '{:.0f}')} ({_pct(c.get(f'{d}_pct_mm'))})"
                      if c.get(f"{d}_tflops") else "")
                lines.append(
                    f"| {SHORT[c['op']] if d == 'fwd' else ''} | {d} | {c[f'bytes_{d}'] / 1e6:.1f} | "
                    f"{fmt(c[f'flops_{d}'] / 1e9 if c[f'flops_{d}'] else None, '{:.1f}', '')} | "
                    f"{fmt(floor_us(c, d, hw))} | {ours} | {tb} | "
                    f"{fmt(c.get(f'{d}_copy_gbps'), '{:.0f}')} | {tf} | {anchor} | "
                    f"{fmt(c.get(f'{d}_speedup_vs_anchor'), '{:.2f}x')} | {fmt(c.get(f'{d}_int32_us'), '{:.1f}', '')} | "
                    f"{_backend_cell(c, d, 'native')} | {_backend_cell(c, d, 'triton')} | {_backend_cell(c, d, 'vendor')} | "
                    f"{fmt(c.get(f'{d}_predicted_us'))} | {fmt(c.get('worst_rel_err') if d == 'fwd' else None, '{:.1e}', '')} |")
    anchors = {c["op"]: c["anchor"] for c in cases}
    if anchors:
        lines += ["", "Anchors: " + "; ".join(f"{SHORT[op]} = `{a}`" for op, a in anchors.items()) + "."]
    failed = [(c["op"], c["shape"], f) for c in cases for f in c.get("failed_rows", [])]
    if failed:
        lines += ["", "## Rows that raised", ""] + [f"- {SHORT[op]} {shape} {f}" for op, shape, f in failed]
    lines += ["", "<details><summary>Every timing</summary>", "",
              "| shape | op | dir | what | index | us | GB/s | TFLOP/s | predicted us | rel err | first call s | |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["records"]:
        note = f"ERROR {r['error']}" if r["error"] else (r.get("skipped") or "")
        lines.append(f"| {r['shape']} | {SHORT.get(r['op'], r['op'])} | {r['direction']} | {r['what']} | "
                     f"{r['index_dtype'] or ''} | {fmt(r['time_us'])} | {fmt(r['gbps'], '{:.0f}')} | "
                     f"{fmt(r['tflops'], '{:.0f}')} | {fmt(r['predicted_us'])} | {fmt(r['rel_err'], '{:.1e}')} | "
                     f"{fmt(r['first_call_s'], '{:.3f}')} | {note} |")
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------------------

def parse_shapes(text):
    return [tuple(int(v) for v in name.strip().split("x")) for name in text.split(",")]


def run(args, device, prefix, meta) -> dict:
    started = time.monotonic()
    hw = hardware(device)
    gpu = device.type == "cuda"
    native = dispatch.native_available() if gpu else True  # dry runs: the model as if built
    shapes = parse_shapes(args.shapes) if args.shapes else list(DRY_RUN_SHAPES if args.dry_run else SHAPES)
    ops = [o.strip() for o in args.ops.split(",")] if args.ops else list(ALL_OPS)
    unknown = set(ops) - set(ALL_OPS)
    if unknown:
        raise SystemExit(f"unknown ops {sorted(unknown)}")
    from mymetaops._backend import current_backend
    meta.update(budget_s=args.budget_s, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, repeats=args.repeats,
                backend=current_backend(), native_available=native, l2_mb=hw.l2_mb)
    bench = Bench(args, device, started, hw)
    report = dict(name=NAME, shapes=[shape_name(s) for s in shapes], ops=ops, cases=[], records=bench.records,
                  ceiling=None, checks=[], notes=[], skipped=[], aborted=None)

    def save():
        report["checks"] = summary_checks(report["cases"], report["ceiling"], gpu, hw.name)
        report["elapsed_s"] = time.monotonic() - started
        write_report(prefix, meta, report, markdown(meta, report))

    try:
        r = bench_ceiling(bench, device, args.dry_run)
        report["ceiling"] = dict(shape=r["shape"], tflops=r["tflops"], us=r["time_us"], error=r["error"])
    except DeviceLost as e:
        report["aborted"] = str(e)
    summaries = {}
    cases = [(op, index, shape) for index, shape in enumerate(shapes) for op in ops]
    phases = ("core",) if args.no_backends else ("core", "rest")
    for phase in phases:
        if report["aborted"]:
            break
        for number, (op, index, shape) in enumerate(cases):
            key = (op, shape_name(shape))
            if phase == "rest" and (key not in summaries or "op" not in summaries[key]):
                continue
            if bench.over_budget():
                left = [c for c in cases[number:] if phase == "core" or (c[0], shape_name(c[2])) in summaries]
                what = "ours, anchor, copy" if phase == "core" else "int32 and forced backends"
                report["skipped"] += [f"{SHORT[c[0]]} {shape_name(c[2])} ({what})" for c in left]
                print(f"budget of {args.budget_s:.0f} s spent: {what} not run for {len(left)} cases", flush=True)
                break
            t0 = time.monotonic()
            summary = summaries.setdefault(key, {})
            try:
                bench_case(bench, op, index, shape, phase, summary, native)
            except BudgetExhausted:
                summary["partial"] = "budget"
            except DeviceLost as e:
                report["aborted"] = str(e)
                print(f"ABORTED: {e}", flush=True)
            except Exception as e:  # noqa: BLE001  (a case that cannot run at all: reported, the rest still run)
                report["notes"].append(f"{SHORT[op]} {shape_name(shape)} ({phase}): {short_error(e)}")
                print(f"{op} {shape_name(shape)}: {short_error(e)}", flush=True)
                lost = cuda_usable(device)
                if lost:
                    report["aborted"] = f"{op} {shape_name(shape)}: device unusable: {lost}"
            finally:
                bench.fns.clear()  # the case's timed calls hold its tensors (and graphs)
                if gpu:
                    torch.cuda.empty_cache()
            if "op" in summary:
                summarize(summary, case_records(bench, op, shape))
            report["cases"] = list(summaries.values())
            s_ = summary
            if phase == "core":
                what = (f"fwd {fmt(s_.get('fwd_us'))} us {fmt(s_.get('fwd_gbps'), '{:.0f}')} GB/s "
                        f"x{fmt(s_.get('fwd_speedup_vs_anchor'), '{:.2f}')} anchor; bwd {fmt(s_.get('bwd_us'))} us "
                        f"x{fmt(s_.get('bwd_speedup_vs_anchor'), '{:.2f}')}")
            else:
                what = (f"int32 fwd {fmt(s_.get('fwd_int32_us'))} / bwd {fmt(s_.get('bwd_int32_us'))} us; backends "
                        + ", ".join(f"{b} {_backend_cell(s_, 'fwd', b)} / {_backend_cell(s_, 'bwd', b)}"
                                    for b in s_.get("fwd_backends", {})))
            print(f"[{time.monotonic() - started:6.1f} s] {phase:4} {shape_name(shape):>14} {SHORT[op]:>15}: {what}; "
                  f"rel err {fmt(s_.get('worst_rel_err'), '{:.1e}')} ({time.monotonic() - t0:.1f} s)", flush=True)
            save()
            if report["aborted"]:
                break
    if gpu:
        small = [c for c in report["cases"] if c.get("inputs_mb") and c["inputs_mb"] < hw.l2_mb * 1.048576]
        if small:
            report["notes"].append(f"inputs smaller than the L2 ({hw.l2_mb:.0f} MB): "
                                   + ", ".join(f"{SHORT[c['op']]} {c['shape']}" for c in small))
    save()
    return report


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "jagged")


if __name__ == "__main__":
    sys.exit(main())
