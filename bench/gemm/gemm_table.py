"""The GEMM family's main table: mymetaops.fp8_gemm and mymetaops.gemm as users call them (the
public wrappers, default arguments) on the suite (shapes.py), beside every candidate the model
lists for the problem on this GPU and the vendor anchors, with the model's choice, its regret, and
the numerics of the default path.

    python bench/gemm/gemm_table.py [--out bench/results/<date>-<gpu>-gemm] [--budget-s 240]
    python bench/gemm/gemm_table.py --dry-run [--fake-candidates]   # CPU: the plumbing, fake timings

FP8 (e4m3 rowwise scales, bf16 out), per shape: x [M, K] and w [N, K] are fresh N(0, 1) bf16,
quantized once (mymetaops.quantize_fp8_rowwise) outside the timing; times are do_bench medians
(CUDA events, L2 flushed before each call), every call warmed up first (a Triton config compiles
on its first use: the compile is recorded as first_call_s, not timed). Rows:
  auto            mymetaops.fp8_gemm(xq, wq, x_scale, w_scale): what users call
  candidates      each of model.decide("fp8_gemm", problem, hw).candidates (plus the bucket's
                  choice if the exact problem does not list it): native through
                  torch.ops.mymetaops._fp8_gemm_native, Triton through mymetaops.triton.gemm,
                  vendor = torch._scaled_mm(..., use_fast_accum=K <= 16384) as the dispatch calls it
  anchors         torch._scaled_mm rowwise with default arguments (use_fast_accum=False: the
                  issue's anchor), torch._scaled_mm tensorwise (tensorwise-quantized inputs;
                  default arguments, and use_fast_accum=True as the dispatch would call it), bf16
                  torch.mm on the dequantized inputs (nn.Linear layout)
The model's choice is the dispatch's: the decision for the problem's bucket (what runs). Regret =
auto time / the fastest measured candidate (vendor included; candidates whose result is wrong are
excluded and flagged). Numerics: ||auto - ref|| / ||ref|| with ref the float64 product of the
dequantized inputs (on a subsample of rows above 2^38 multiply-adds); the issue requires <= 1e-2.

bf16 (mymetaops.gemm, a [M, K] row-major, b = w.t(): the nn.Linear forward layout, K-contiguous;
and for the shapes marked b_n_contiguous also b [K, N] row-major): auto vs torch.mm (= the vendor
candidate) and each candidate, regret, numerics.

Writes <out>.json (a header: date, GPU, torch/triton/CUDA versions, revision; every timing as a row
with its problem, backend, config, time_us, tflops, predicted_us: what calibrate.py reads; per-shape
summaries; checks) and <out>.md, both rewritten after every shape (a crash keeps what was measured).
Two passes: first auto, the dispatch's choice and the anchors on every shape (the headline
numbers), then every other candidate, shape by shape, until --budget-s is spent (the suite is in
priority order); a shape whose candidates were not all timed shows "(k/N timed)" by its regret,
and the regret summaries count only shapes with every candidate timed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_harness import (BF16_CEILING_TFLOPS, FP8_CEILING_TFLOPS, add_device_arguments, check,  # noqa: E402
                          checks_markdown, cuda_usable, default_prefix, device_of, geomean, hardware,
                          median_us, meta_line, run_meta, short_error, sync, torch_quantize_rowwise,
                          torch_quantize_tensorwise, wall_per_iteration)
from bench_common import BudgetExhausted, DeviceLost  # noqa: E402
import torch  # noqa: E402

import mymetaops  # noqa: E402
import mymetaops.ops  # noqa: E402,F401  (registers torch.ops.mymetaops)
from mymetaops import model  # noqa: E402
from mymetaops.model import gemm as gemm_model  # noqa: E402
from mymetaops.ops import dispatch  # noqa: E402
from shapes import CEILING_SHAPE, SHAPES, SMOKE_SHAPES, Shape  # noqa: E402

NAME = "gemm_table"
REL_ERR_BOUND = 1e-2  # the issue: bf16 out within 1e-2 of the float64 product
WRONG_REL_ERR = 5e-2  # a candidate this far off is wrong: flagged, never "the fastest"
REF_MACS = 2**38  # float64 reference on all rows up to this many multiply-adds, else a row sample
BF16 = torch.bfloat16


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-gemm)")
    parser.add_argument("--budget-s", type=float, default=240.0,
                        help="stop starting new shapes after this many seconds (default 240)")
    parser.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warmup per timing")
    parser.add_argument("--rep-ms", type=float, default=15.0, help="do_bench measuring window per timing")
    parser.add_argument("--repeats", type=int, default=2, help="timings per record; the smallest median is kept")
    parser.add_argument("--shapes", help="comma-separated MxNxK subset of the suite (or new shapes)")
    parser.add_argument("--no-bf16", action="store_true", help="FP8 only")
    parser.add_argument("--fake-candidates", action="store_true",
                        help="dry runs only: add a fake native row and small Triton configs to the model's "
                             "tables, so every candidate path runs on the CPU")


# --- inputs and references ------------------------------------------------------------------------

def quantize(x, rowwise: bool, notes: list):
    """mymetaops' quantizer (what a user calls); if it fails, plain torch ops (noted)."""
    try:
        return (mymetaops.quantize_fp8_rowwise(x) if rowwise else mymetaops.quantize_fp8_tensorwise(x))
    except Exception as e:  # noqa: BLE001
        note = f"mymetaops.quantize_fp8_{'rowwise' if rowwise else 'tensorwise'} failed ({short_error(e)}): torch ops used"
        if note not in notes:
            notes.append(note)
        fp8 = mymetaops.fp8_dtype(x.device)
        return torch_quantize_rowwise(x, fp8) if rowwise else torch_quantize_tensorwise(x, fp8)


def sample_rows(m: int, n: int, k: int, device) -> torch.Tensor | None:
    """None (every row) when the float64 reference is small enough, else evenly spaced rows."""
    if m * n * k <= REF_MACS:
        return None
    r = max(1, min(m, REF_MACS // max(1, n * k)))
    return torch.linspace(0, m - 1, r, device=device).round().long().unique()


def rel_err(out, ref, rows) -> float | None:
    if ref is None or out is None or out.device.type == "meta":
        return None
    o = (out if rows is None else out[rows]).double()
    denom = torch.linalg.vector_norm(ref)
    return float(torch.linalg.vector_norm(o - ref) / denom) if float(denom) > 0 else float(torch.linalg.vector_norm(o))


# --- one timing -------------------------------------------------------------------------------------

class Bench:
    """Times calls for one run: warm-up (first-call wall time), numerics, do_bench median, the
    budget, and the records."""

    def __init__(self, args, device, started):
        self.args, self.device = args, device
        self.deadline = started + args.budget_s
        self.hard_deadline = self.deadline + max(10.0, 0.05 * args.budget_s)
        self.records = []
        self.fns = {}

    def over_budget(self) -> bool:
        return time.monotonic() > self.deadline

    def measure(self, base: dict, fn, ref=None, rows=None, repeats: int | None = None) -> dict:
        """One record: base + first_call_s, rel_err, time_us, tflops (or error), and
        back_to_back_us, the wall time per call of calls made back to back (no L2 flush between
        them): above time_us where the host, not the GPU, sets the pace (a candidate is called as
        the bench calls it: a Triton one without the dispatch's launch path)."""
        if time.monotonic() > self.hard_deadline:
            raise BudgetExhausted()
        r = dict(base, time_us=None, tflops=None, rel_err=None, first_call_s=None, error=None)
        try:
            sync(self.device)
            start = time.perf_counter()
            out = fn()
            sync(self.device)
            r["first_call_s"] = time.perf_counter() - start
            r["rel_err"] = rel_err(out, ref, rows)
            del out
            misses = dispatch.cache_info()["misses"] if self.device.type == "cuda" else 0
            # The smallest of `repeats` medians: a slow phase (clocks, the host) seen doubling one
            # timing of a 10-30 us call would otherwise be a regret. interleave() adds medians
            # taken in turns with the other calls of a case.
            r["time_us"] = min(median_us(fn, self.device, self.args.warmup_ms, self.args.rep_ms)
                               for _ in range(repeats or self.args.repeats))
            r["tflops"] = 2.0 * base["m"] * base["n"] * base["k"] / r["time_us"] / 1e6
            if base["what"] == "auto" and self.device.type == "cuda":
                # Decision-cache misses while timing: the dispatch decides once per bucket, so
                # anything above 0 is a per-call model evaluation and explains a slow default path.
                r["cache_misses_timed"] = dispatch.cache_info()["misses"] - misses
            if base["what"] != "tensorwise":
                calls = max(5, min(200, int(5000 / max(r["time_us"], 1.0))))  # about 5 ms
                r["back_to_back_us"] = wall_per_iteration(fn, calls, self.device) * 1e6
        except BudgetExhausted:
            raise
        except Exception as e:  # noqa: BLE001  (one failing candidate is reported, not fatal)
            r["error"] = short_error(e)
            lost = cuda_usable(self.device)
            if lost:
                self.records.append(r)
                raise DeviceLost(f"{base['name']} on {base['shape']}: {r['error']}; device unusable: {lost}")
        self.records.append(r)
        self.fns[id(r)] = fn  # for interleave()
        return r

    def interleave(self, records: list[dict]) -> None:
        """More medians of a case's headline calls (auto, the chosen kernel, the anchor), taken in
        turns, each record keeping its smallest: a slow phase then hits all of them alike instead
        of whichever call was timed during it."""
        records = [r for r in records if r is not None and r.get("time_us") is not None]
        for _ in range(max(1, self.args.repeats - 1)):
            for r in records:
                if time.monotonic() > self.hard_deadline:
                    raise BudgetExhausted()
                t = median_us(self.fns[id(r)], self.device, self.args.warmup_ms, self.args.rep_ms)
                if t < r["time_us"]:
                    r["time_us"] = t
                    r["tflops"] = 2.0 * r["m"] * r["n"] * r["k"] / t / 1e6


def config_record(backend, config):
    if config is None:
        return dict(config="", config_type=None, config_fields=None)
    fields = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None
    return dict(config=str(config), config_type=type(config).__name__, config_fields=fields)


def candidate_key(backend, config) -> str:
    return f"{backend} {config}"


def fp8_candidate_fn(c, xq, wq, xs, ws, device):
    if c.backend == "native":
        cfg = c.config.as_list()
        if device.type == "cpu":  # dry runs: native kernels are GPU-only; the fake kernel checks the call
            xq, wq, xs, ws = (t.to("meta") for t in (xq, wq, xs, ws))
        return lambda: torch.ops.mymetaops._fp8_gemm_native(xq, wq, xs, ws, None, BF16, cfg)
    if c.backend == "triton":
        from mymetaops.triton import gemm as triton_gemm  # imports triton
        out = torch.empty(xq.shape[0], wq.shape[0], dtype=BF16, device=device)
        return lambda: triton_gemm.fp8_gemm(xq, wq, xs, ws, None, out, c.config)
    if c.backend == "vendor":
        sa, sb = xs.reshape(-1, 1), ws.reshape(1, -1)
        fast = xq.shape[1] <= gemm_model.FAST_ACCUM_MAX_K  # as the dispatch calls it
        return lambda: torch._scaled_mm(xq, wq.t(), sa, sb, out_dtype=BF16, use_fast_accum=fast)
    raise ValueError(f"unknown backend {c.backend!r}")


def gemm_candidate_fn(c, a, b, device):
    if c.backend == "native":
        cfg = c.config.as_list()
        if device.type == "cpu":
            a, b = a.to("meta"), b.to("meta")
        return lambda: torch.ops.mymetaops._gemm_native(a, b, None, cfg)
    if c.backend == "triton":
        from mymetaops.triton import gemm as triton_gemm
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=device)
        return lambda: triton_gemm.gemm(a, b, None, out, c.config)
    if c.backend == "vendor":
        return lambda: torch.mm(a, b)
    raise ValueError(f"unknown backend {c.backend!r}")


def decisions(op, problem, hw, native):
    """(exact decision, the dispatch's choice: the decision of the problem's bucket)."""
    from mymetaops._backend import current_backend
    exact = model.decide(op, problem, hw, "auto", native)
    bucketed = model.decide_bucketed(op, problem, hw, current_backend(), native)
    return exact, bucketed.decision.choice


def same(c, choice) -> bool:
    return (c.backend, c.config) == (choice.backend, choice.config)


def to_time(exact, choice):
    """The available candidates of the exact problem, and the dispatch's choice if it is not one."""
    todo = [c for c in exact.candidates if c.available]
    if not any(same(c, choice) for c in todo):
        todo.append(choice)
    return todo


def _back_to_back_regret(auto, candidates):
    """auto's back-to-back time over the smallest candidate's: the regret where host time counts
    (the model's host floor per backend), beside `regret`, which do_bench's L2 flush hides it from."""
    times = [r["back_to_back_us"] for r in candidates if r.get("back_to_back_us")]
    if not auto or not auto.get("back_to_back_us") or not times:
        return None
    return auto["back_to_back_us"] / min(times)


def summarize(summary, recs, choice, exact, anchor_name):
    """Fill a case's summary from its records (both passes)."""
    auto = next((r for r in recs if r["what"] == "auto"), None)
    anchor = next((r for r in recs if r["name"] == anchor_name), None)
    cands = [r for r in recs if r["what"] == "candidate" and r["time_us"] is not None]
    good = [r for r in cands if r["rel_err"] is None or r["rel_err"] <= WRONG_REL_ERR]
    wrong = [r for r in cands if r not in good]
    fastest = min(good, key=lambda r: r["time_us"]) if good else None
    chosen = next((r for r in recs if r["what"] == "candidate" and r["key"] == candidate_key(choice.backend, choice.config)),
                  None)
    exact_choice = next((c for c in exact.candidates if same(c, choice)), None)
    auto_us = auto["time_us"] if auto else None
    anchor_us = anchor["time_us"] if anchor else None
    summary.update(
        auto_back_to_back_us=auto.get("back_to_back_us") if auto else None,
        auto_cache_misses_timed=auto.get("cache_misses_timed") if auto else None,
        anchor_back_to_back_us=anchor.get("back_to_back_us") if anchor else None,
        auto_us=auto_us, auto_tflops=auto["tflops"] if auto else None, auto_rel_err=auto["rel_err"] if auto else None,
        auto_error=auto["error"] if auto else None, anchor=anchor_name, anchor_us=anchor_us,
        speedup_vs_anchor=(anchor_us / auto_us) if anchor_us and auto_us else None,
        choice=candidate_key(choice.backend, choice.config),
        choice_predicted_us=exact_choice.time_us if exact_choice else choice.time_us,
        choice_us=chosen["time_us"] if chosen else None,
        fastest=fastest["key"] if fastest else None, fastest_us=fastest["time_us"] if fastest else None,
        fastest_predicted_us=fastest["predicted_us"] if fastest else None,
        regret=(auto_us / fastest["time_us"]) if auto_us and fastest else None,
        back_to_back_regret=_back_to_back_regret(auto, good),
        choice_regret=(chosen["time_us"] / fastest["time_us"]) if chosen and chosen["time_us"] and fastest else None,
        candidates_timed=len(cands), wrong_candidates=[(r["key"], r["rel_err"]) for r in wrong],
        failed_candidates=[(r["key"], r["error"]) for r in recs if r["what"] == "candidate" and r["error"]],
        exact_model_choice=candidate_key(exact.choice.backend, exact.choice.config))
    return auto, recs


def base_record(section, shape, index, problem, op, what, name, backend=None, config=None, predicted_us=None,
                layout=None):
    return dict(section=section, shape=shape.name, shape_index=index, label=shape.label, kind=shape.kind,
                m=shape.m, n=shape.n, k=shape.k, b_layout=layout, op=op,
                problem=dataclasses.asdict(problem) if problem is not None else None, what=what, name=name,
                backend=backend, key=candidate_key(backend, config) if backend else name,
                predicted_us=predicted_us, **config_record(backend, config))


# --- the two sections, each in two passes ------------------------------------------------------------------
# Pass "core": auto, the dispatch's choice and the anchors of every shape (the headline numbers);
# pass "rest": every other candidate (regret, calibration), while the budget lasts.

SCALED_MM_ROWWISE = "_scaled_mm rowwise (default args)"
SCALED_MM_TENSORWISE = "_scaled_mm tensorwise (default args)"
TENSORWISE_FAST = "vendor torch._scaled_mm tensorwise (fast accum)"
BF16_DEQUANT = "torch.mm bf16 (dequantized inputs)"


def case_records(bench, section, shape, layout):
    return [r for r in bench.records if r["section"] == section and r["shape"] == shape.name
            and r["b_layout"] == layout]


def bench_fp8(bench: Bench, shape: Shape, index: int, hw, native: bool, notes: list, phase: str,
              summary: dict) -> dict:
    device, (m, n, k) = bench.device, (shape.m, shape.n, shape.k)
    g = torch.Generator(device=device).manual_seed(1000 + index)  # the same inputs in both passes
    x = torch.randn(m, k, device=device, dtype=BF16, generator=g)
    w = torch.randn(n, k, device=device, dtype=BF16, generator=g)
    xq, xs = quantize(x, True, notes)
    wq, ws = quantize(w, True, notes)
    if phase == "core":
        xtq, xts = quantize(x, False, notes)
        wtq, wts = quantize(w, False, notes)
    del x, w
    rows = sample_rows(m, n, k, device)
    xr, xsr = (xq, xs) if rows is None else (xq[rows], xs[rows])
    ref = (xr.double() * xsr.double()[:, None]) @ (wq.double() * ws.double()[:, None]).t()
    problem = gemm_model.problem_of_fp8(xq, wq, xs, ws, None, BF16)
    exact, choice = decisions("fp8_gemm", problem, hw, native)
    todo = to_time(exact, choice)
    op = "fp8_gemm"

    def base(what, name, backend=None, config=None, predicted_us=None, p=problem, o=op):
        return base_record("fp8", shape, index, p, o, what, name, backend, config, predicted_us)

    def candidate(c, repeats=None):
        return bench.measure(base("candidate", candidate_key(c.backend, c.config), c.backend, c.config, c.time_us),
                             fp8_candidate_fn(c, xq, wq, xs, ws, device), ref, rows, repeats)

    summary.update(section="fp8", shape=shape.name, shape_index=index, label=shape.label, kind=shape.kind,
                   m=m, n=n, k=k, flops=shape.flops, ref_rows=None if rows is None else int(rows.numel()),
                   candidates_total=len(todo))
    try:
        if phase == "core":
            summary["candidates_complete"] = len(todo) == 1
            headline = [bench.measure(base("auto", "mymetaops.fp8_gemm"), lambda: mymetaops.fp8_gemm(xq, wq, xs, ws),
                                      ref, rows, repeats=1),
                        candidate(next(c for c in todo if same(c, choice)), repeats=1)]
            scaled_mm_why = gemm_model.vendor_available(problem, hw)
            summary["scaled_mm_na"] = scaled_mm_why or None
            if not scaled_mm_why:
                sa, sb = xs.reshape(-1, 1), ws.reshape(1, -1)
                headline.append(bench.measure(base("anchor", SCALED_MM_ROWWISE),
                                              lambda: torch._scaled_mm(xq, wq.t(), sa, sb, out_dtype=BF16), ref, rows,
                                              repeats=1))
            bench.interleave(headline)
            if not scaled_mm_why:
                pt = dataclasses.replace(problem, scaling="tensorwise")
                bench.measure(base("anchor", SCALED_MM_TENSORWISE, p=pt),
                              lambda: torch._scaled_mm(xtq, wtq.t(), xts, wts, out_dtype=BF16))
                # as the dispatch would call it for tensorwise scales: the vendor candidate of that problem
                bench.measure(base("tensorwise", TENSORWISE_FAST, "vendor", gemm_model.VENDOR_CONFIG["fp8_gemm"],
                                   gemm_model.vendor_estimate(pt, hw).time_us, p=pt),
                              lambda: torch._scaled_mm(xtq, wtq.t(), xts, wts, out_dtype=BF16, use_fast_accum=True))
            xd = (xq.float() * xs[:, None]).to(BF16)
            wd = (wq.float() * ws[:, None]).to(BF16)
            bench.measure(base("anchor", BF16_DEQUANT, p=None, o="mm"), lambda: torch.mm(xd, wd.t()))
            del xd, wd
        else:
            for c in todo:
                if not same(c, choice):
                    candidate(c)
            summary["candidates_complete"] = True
    except BudgetExhausted:
        summary["partial"] = "budget"
    recs = case_records(bench, "fp8", shape, None)
    auto, _ = summarize(summary, recs, choice, exact, SCALED_MM_ROWWISE)
    for name, key in ((SCALED_MM_TENSORWISE, "tensorwise_us"), (TENSORWISE_FAST, "tensorwise_fast_us"),
                      (BF16_DEQUANT, "bf16_mm_us")):
        r = next((r for r in recs if r["name"] == name), None)
        summary[key] = r["time_us"] if r else None
    ceiling = FP8_CEILING_TFLOPS.get(hw.name)
    summary["pct_of_ceiling"] = 100 * auto["tflops"] / ceiling if auto and ceiling and auto["tflops"] else None
    natives = [r for r in recs if r["backend"] == "native" and r["tflops"] and r["what"] == "candidate"
               and (r["rel_err"] is None or r["rel_err"] <= WRONG_REL_ERR)]
    summary["best_native_tflops"] = max((r["tflops"] for r in natives), default=None)
    return summary


def bench_bf16(bench: Bench, shape: Shape, index: int, hw, native: bool, layout: str, phase: str,
               summary: dict) -> dict:
    device, (m, n, k) = bench.device, (shape.m, shape.n, shape.k)
    g = torch.Generator(device=device).manual_seed(2000 + index)
    a = torch.randn(m, k, device=device, dtype=BF16, generator=g)
    w = torch.randn(n, k, device=device, dtype=BF16, generator=g)
    b = w.t() if layout == "k_contiguous" else w.t().contiguous()
    del w
    rows = sample_rows(m, n, k, device)
    ref = (a if rows is None else a[rows]).double() @ b.double()
    problem = gemm_model.problem_of_gemm(a, b, None)
    exact, choice = decisions("gemm", problem, hw, native)
    todo = to_time(exact, choice)
    section = "bf16"

    def base(what, name, backend=None, config=None, predicted_us=None):
        return base_record(section, shape, index, problem, "gemm", what, name, backend, config, predicted_us, layout)

    def candidate(c, repeats=None):
        if c.backend == "vendor":  # the same call as the anchor: its timing, once
            anchor = next((r for r in case_records(bench, section, shape, layout) if r["what"] == "anchor"), None)
            if anchor is not None:
                bench.records.append(dict(anchor, **base("candidate", candidate_key(c.backend, c.config), c.backend,
                                                         c.config, c.time_us)))
                return None
        return bench.measure(base("candidate", candidate_key(c.backend, c.config), c.backend, c.config, c.time_us),
                             gemm_candidate_fn(c, a, b, device), ref, rows, repeats)

    summary.update(section=section, shape=shape.name, shape_index=index, label=shape.label, kind=shape.kind,
                   m=m, n=n, k=k, b_layout=layout, flops=shape.flops,
                   ref_rows=None if rows is None else int(rows.numel()), candidates_total=len(todo))
    try:
        if phase == "core":
            summary["candidates_complete"] = len(todo) == 1
            headline = [bench.measure(base("auto", "mymetaops.gemm"), lambda: mymetaops.gemm(a, b), ref, rows, 1),
                        bench.measure(base("anchor", "torch.mm"), lambda: torch.mm(a, b), ref, rows, 1)]
            chosen = next(c for c in todo if same(c, choice))
            if chosen.backend != "vendor":  # the vendor candidate is the anchor's record, copied
                headline.append(candidate(chosen, repeats=1))
            bench.interleave(headline)
            if chosen.backend == "vendor":
                candidate(chosen)
        else:
            for c in todo:
                if not same(c, choice):
                    candidate(c)
            summary["candidates_complete"] = True
    except BudgetExhausted:
        summary["partial"] = "budget"
    auto, _ = summarize(summary, case_records(bench, section, shape, layout), choice, exact, "torch.mm")
    ceiling = BF16_CEILING_TFLOPS.get(hw.name)
    summary["pct_of_ceiling"] = 100 * auto["tflops"] / ceiling if auto and ceiling and auto["tflops"] else None
    return summary


# --- the report ------------------------------------------------------------------------------------------

def _f(v, fmt="{:.1f}", none="—"):
    return none if v is None else fmt.format(v)


def summary_checks(shapes_done: list[dict]) -> list[dict]:
    checks = []
    for section, anchor in (("fp8", "_scaled_mm rowwise (default args)"), ("bf16", "torch.mm")):
        rows = [s for s in shapes_done if s["section"] == section and s.get("auto_us")]
        if not rows:
            continue
        sp = [(s["speedup_vs_anchor"], s) for s in rows if s.get("speedup_vs_anchor")]
        if sp:
            worst = min(sp, key=lambda t: t[0])
            checks.append(check(f"{section}: auto / {anchor} throughput, geomean over {len(sp)} shapes",
                                geomean(v for v, _ in sp), None, at_most=False, fmt="{:.3f}"))
            checks.append(check(f"{section}: auto / {anchor} throughput, minimum ({worst[1]['shape']}"
                                f"{' ' + worst[1].get('b_layout', '') if section == 'bf16' else ''})",
                                worst[0], None, at_most=False, fmt="{:.3f}"))
        rg = [(s["regret"], s) for s in rows if s.get("regret") and s.get("candidates_complete")]
        if rg:
            worst = max(rg, key=lambda t: t[0])
            checks.append(check(f"{section}: selection regret (auto / fastest measured candidate), geomean over "
                                f"{len(rg)} shapes with every candidate timed",
                                geomean(v for v, _ in rg), None, at_most=True, fmt="{:.3f}"))
            checks.append(check(f"{section}: selection regret, worst ({worst[1]['shape']})", worst[0], None,
                                at_most=True, fmt="{:.3f}"))
        bb = [(s["back_to_back_regret"], s) for s in rows
              if s.get("back_to_back_regret") and s.get("candidates_complete")]
        if bb:
            worst = max(bb, key=lambda t: t[0])
            checks.append(check(f"{section}: back-to-back regret (auto / fastest candidate, calls back to back, "
                                f"host time counted), geomean; worst {worst[0]:.3f} ({worst[1]['shape']})",
                                geomean(v for v, _ in bb), None, at_most=True, fmt="{:.3f}"))
        cr = [s["choice_regret"] for s in rows if s.get("choice_regret") and s.get("candidates_complete")]
        if cr:
            checks.append(check(f"{section}: kernel-only regret (choice / fastest), geomean", geomean(cr), None,
                                at_most=True, fmt="{:.3f}"))
        errs = [(s["auto_rel_err"], s) for s in rows if s.get("auto_rel_err") is not None]
        if errs:
            worst = max(errs, key=lambda t: t[0])
            checks.append(check(f"{section}: auto relative error vs float64, worst ({worst[1]['shape']})",
                                worst[0], REL_ERR_BOUND, at_most=True, fmt="{:.2e}"))
        if section == "fp8":
            at = next((s for s in rows if (s["m"], s["n"], s["k"]) == CEILING_SHAPE), None)
            if at is not None:
                checks.append(check("fp8: best native TFLOP/s at 8192^3 (max over native candidates)",
                                    at.get("best_native_tflops"), None, at_most=False, fmt="{:.0f}"))
                checks.append(check("fp8: auto TFLOP/s at 8192^3", at.get("auto_tflops"), None, at_most=False,
                                    fmt="{:.0f}"))
    return checks


def markdown(meta, report) -> str:
    shapes_done, records, checks = report["shapes"], report["records"], report["checks"]
    hw = meta["hardware"]
    lines = [f"# GEMM family on {meta_line(meta)}", ""]
    if report.get("aborted"):
        lines += [f"> ABORTED: {report['aborted']}", ""]
    if report.get("skipped"):
        lines += [f"> Time budget spent: not run: {', '.join(report['skipped'])}", ""]
    for note in report.get("notes", []):
        lines += [f"> {note}", ""]
    lines += checks_markdown(checks)
    fp8_ceiling = FP8_CEILING_TFLOPS.get(hw)
    lines += ["", f"## fp8_gemm, e4m3 rowwise, bf16 out (TFLOP/s; do_bench medians; ceiling "
                  f"{_f(fp8_ceiling, '{:.0f}')} TFLOP/s measured)", "",
              "auto = `mymetaops.fp8_gemm` (default arguments); _scaled_mm = `torch._scaled_mm` rowwise, default "
              "arguments (use_fast_accum=False); tensorwise = `torch._scaled_mm` on tensorwise-quantized inputs "
              "(default args); bf16 mm = `torch.mm` on the dequantized inputs. choice = the dispatch's (the "
              "bucket's decision), with predicted / measured us; fastest = the fastest measured candidate "
              "(vendor = _scaled_mm with use_fast_accum=K <= 16384, as the dispatch calls it); regret = auto / fastest.",
              "",
              "| shape M×N×K | kind | auto | _scaled_mm | auto ÷ _scaled_mm | tensorwise | bf16 mm | model choice "
              "(pred / meas us) | fastest measured (pred / meas us) | regret | % of ceiling | rel err |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def tf(s, us):
        return _f(s["flops"] / us / 1e6, "{:.0f}") if us else "—"

    def regret(s):
        shown = _f(s.get("regret"), "{:.3f}")
        if not s.get("candidates_complete"):
            shown += f" ({s.get('candidates_timed', 0)}/{s.get('candidates_total', '?')} timed)"
        return shown
    for s in (s for s in shapes_done if s["section"] == "fp8"):
        sm = "n/a" if s.get("scaled_mm_na") else tf(s, s.get("anchor_us"))
        lines.append(
            f"| {s['shape']} | {s['kind']} | {tf(s, s.get('auto_us'))} | {sm} | "
            f"{'n/a' if s.get('scaled_mm_na') else _f(s.get('speedup_vs_anchor'), '{:.2f}x')} | "
            f"{'n/a' if s.get('scaled_mm_na') else tf(s, s.get('tensorwise_us'))} | {tf(s, s.get('bf16_mm_us'))} | "
            f"{s.get('choice', '—')} ({_f(s.get('choice_predicted_us'))} / {_f(s.get('choice_us'))}) | "
            f"{s.get('fastest') or '—'} ({_f(s.get('fastest_predicted_us'))} / {_f(s.get('fastest_us'))}) | "
            f"{regret(s)} | {_f(s.get('pct_of_ceiling'), '{:.0f}%')} | "
            f"{_f(s.get('auto_rel_err'), '{:.1e}')}{' (rows sampled)' if s.get('ref_rows') else ''} |")
    na = [s["shape"] for s in shapes_done if s["section"] == "fp8" and s.get("scaled_mm_na")]
    if na:
        lines += ["", f"n/a: torch._scaled_mm cannot run these ({'; '.join(sorted(set(na)))}): "
                      f"{next(s['scaled_mm_na'] for s in shapes_done if s.get('scaled_mm_na'))}."]
    bf = [s for s in shapes_done if s["section"] == "bf16"]
    if bf:
        lines += ["", f"## gemm, bf16 (TFLOP/s; ceiling {_f(BF16_CEILING_TFLOPS.get(hw), '{:.0f}')} TFLOP/s "
                      "measured; b k_contiguous = w.t(), the nn.Linear layout)", "",
                  "| shape M×N×K | kind | b layout | auto | torch.mm | auto ÷ torch.mm | model choice (pred / meas us) "
                  "| fastest measured (pred / meas us) | regret | % of ceiling | rel err |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in bf:
            lines.append(
                f"| {s['shape']} | {s['kind']} | {s['b_layout']} | {tf(s, s.get('auto_us'))} | "
                f"{tf(s, s.get('anchor_us'))} | {_f(s.get('speedup_vs_anchor'), '{:.2f}x')} | "
                f"{s.get('choice', '—')} ({_f(s.get('choice_predicted_us'))} / {_f(s.get('choice_us'))}) | "
                f"{s.get('fastest') or '—'} ({_f(s.get('fastest_predicted_us'))} / {_f(s.get('fastest_us'))}) | "
                f"{regret(s)} | {_f(s.get('pct_of_ceiling'), '{:.0f}%')} | "
                f"{_f(s.get('auto_rel_err'), '{:.1e}')} |")
    bad = [(s["section"], s["shape"], s.get("b_layout"), what, key, v) for s in shapes_done
           for what, lst in (("wrong", s.get("wrong_candidates", [])), ("failed", s.get("failed_candidates", [])))
           for key, v in lst]
    if bad:
        lines += ["", "## Candidates that failed or computed a wrong result (excluded from 'fastest')", ""]
        lines += [f"- {sec} {shape}{' ' + lay if lay else ''}: {key}: {what} "
                  f"({'rel err %.2e' % v if what == 'wrong' else v})" for sec, shape, lay, what, key, v in bad]
    lines += ["", "<details><summary>Every timing (us; predicted us; prediction / measurement)</summary>", "",
              "| section | shape | layout | what | call | measured us | TFLOP/s | predicted us | pred/meas | rel err | "
              "first call s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        ratio = r["predicted_us"] / r["time_us"] if r["predicted_us"] and r["time_us"] else None
        err = f" ERROR {r['error']}" if r["error"] else ""
        lines.append(f"| {r['section']} | {r['shape']} | {r['b_layout'] or ''} | {r['what']} | {r['name']}{err} | "
                     f"{_f(r['time_us'])} | {_f(r['tflops'], '{:.0f}')} | {_f(r['predicted_us'])} | "
                     f"{_f(ratio, '{:.2f}')} | {_f(r['rel_err'], '{:.1e}')} | {_f(r['first_call_s'], '{:.3f}')} |")
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def write(prefix: Path, meta, report):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(dict(meta, **report), indent=1, default=str))
    Path(f"{prefix}.md").write_text(markdown(meta, report))


# --- the dry-run tables ------------------------------------------------------------------------------------

def install_fake_candidates():
    """Dry runs: one fake native row per input kind and two small Triton configs per kind, so that
    every candidate path runs on the CPU (native on meta tensors, Triton interpreted)."""
    from mymetaops.configs import TritonGemmConfig
    from mymetaops.model import gemm_kernels as gk
    gk.CUDA_KERNELS = gk.CUDA_KERNELS + (
        gk.KernelRow("fake_fp8_128x128x128", "fp8", 128, 128, 128, 1, 1, "data_parallel", 4, 4, 128, False, "sm_90a"),
        gk.KernelRow("fake_bf16_128x128x64", "bf16", 128, 128, 64, 1, 1, "persistent", 4, 1, 128, True, "sm_90a"),
    )
    gk.TRITON_CONFIGS[("nvidia", "fp8")] = (TritonGemmConfig(16, 32, 32, 2, 4, 1, 1), TritonGemmConfig(32, 16, 64, 1, 4, 1, 0))
    gk.TRITON_CONFIGS[("nvidia", "16bit")] = (TritonGemmConfig(16, 32, 16, 2, 4, 1, 1),)
    model.select._decide.cache_clear()


# --- main ----------------------------------------------------------------------------------------------------

def parse_shapes(text):
    known = {s.name: s for s in SHAPES}
    out = []
    for name in text.split(","):
        name = name.strip()
        if name in known:
            out.append(known[name])
        else:
            m, n, k = (int(v) for v in name.split("x"))
            out.append(Shape(m, n, k, "custom", "--shapes"))
    return out


def run(args, device) -> tuple[dict, dict, Path]:
    started = time.monotonic()
    meta = run_meta(device)
    prefix = Path(args.out) if args.out else default_prefix(meta, "gemm")
    if args.fake_candidates:
        if device.type != "cpu":
            raise SystemExit("--fake-candidates is for dry runs (the fake native row would launch on the GPU)")
        install_fake_candidates()
    hw = hardware(device)
    native = (dispatch.native_available("fp8_gemm", hardware(device).vendor) if device.type == "cuda"
              else True)  # dry runs: meta tensors
    shapes = parse_shapes(args.shapes) if args.shapes else (SMOKE_SHAPES if args.dry_run else SHAPES)
    from mymetaops._backend import current_backend
    from mymetaops.model.gemm_kernels import native_table
    meta.update(budget_s=args.budget_s, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, repeats=args.repeats, backend=current_backend(),
                native_available=native,
                native_kernels=[dataclasses.asdict(r) for r in native_table(hw.vendor) if r.arch == hw.arch])
    try:
        from mymetaops import _C
        meta["native_kernels_built"] = [list(r) for r in _C._native_gemm_kernels()]
    except Exception as e:  # noqa: BLE001
        meta["native_kernels_built"] = short_error(e)
    bench = Bench(args, device, started)
    report = dict(shapes=[], records=bench.records, checks=[], notes=[], skipped=[], aborted=None)
    cases = []  # (shape, index, section, layout)
    for index, shape in enumerate(shapes):
        cases.append((shape, index, "fp8", None))
        if not args.no_bf16:
            cases += [(shape, index, "bf16", layout)
                      for layout in ["k_contiguous"] + (["n_contiguous"] if shape.b_n_contiguous else [])]
    summaries = {}  # (section, shape, layout) -> its summary, in suite order
    for phase in ("core", "rest"):
        for number, (shape, index, section, layout) in enumerate(cases):
            key = (section, shape.name, layout)
            if phase == "rest" and (key not in summaries or summaries[key].get("candidates_complete")
                                    or summaries[key].get("section") == "error"):
                continue
            if bench.over_budget():
                left = [c for c in cases[number:] if phase == "core" or (c[2], c[0].name, c[3]) in summaries]
                what = "auto and anchors" if phase == "core" else "the other candidates"
                report["skipped"] += [f"{c[2]} {c[0].name}{' ' + c[3] if c[3] else ''} ({what})" for c in left]
                print(f"budget of {args.budget_s:.0f} s spent: {what} not run for {len(left)} cases", flush=True)
                break
            t0 = time.monotonic()
            summary = summaries.setdefault(key, {})
            try:
                if section == "fp8":
                    bench_fp8(bench, shape, index, hw, native, report["notes"], phase, summary)
                else:
                    bench_bf16(bench, shape, index, hw, native, layout, phase, summary)
            except DeviceLost as e:
                report["aborted"] = str(e)
                print(f"ABORTED: {e}", flush=True)
            except Exception as e:  # noqa: BLE001  (a case that cannot run at all: reported, the rest still run)
                summary.update(section="error", shape=shape.name, shape_index=index, kind=shape.kind,
                               b_layout=layout, error=f"{section}: {short_error(e)}")
                report["notes"].append(f"{section} {shape.name}{' ' + layout if layout else ''}: {short_error(e)}")
                print(f"{section} {shape.name}: {short_error(e)}", flush=True)
                lost = cuda_usable(device)
                if lost:
                    report["aborted"] = f"{shape.name}: device unusable: {lost}"
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            s_ = summary
            print(f"[{time.monotonic() - started:6.1f} s] {phase:4} {section:4} {shape.name:>18} {layout or '':12} "
                  f"auto {_f(s_.get('auto_tflops'), '{:.0f}')} TFLOP/s, x{_f(s_.get('speedup_vs_anchor'), '{:.2f}')} "
                  f"anchor, regret {_f(s_.get('regret'), '{:.3f}')} ({s_.get('candidates_timed', 0)}/"
                  f"{s_.get('candidates_total', '?')} candidates; {time.monotonic() - t0:.1f} s)", flush=True)
            report["shapes"] = list(summaries.values())
            report["checks"] = summary_checks(report["shapes"])
            report["elapsed_s"] = time.monotonic() - started
            write(prefix, meta, report)
            if report["aborted"]:
                break
        if report["aborted"]:
            break
    report["shapes"] = list(summaries.values())
    report["checks"] = summary_checks(report["shapes"])
    report["elapsed_s"] = time.monotonic() - started
    write(prefix, meta, report)
    return meta, report, prefix


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    device = device_of(args)
    meta, report, prefix = run(args, device)
    print(f"\nwritten: {prefix}.json, {prefix}.md  ({report['elapsed_s']:.0f} s)\n")
    print("\n".join(checks_markdown(report["checks"])))
    return 1 if report.get("aborted") else 0


if __name__ == "__main__":
    sys.exit(main())
