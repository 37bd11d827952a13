"""What every family's benchmark harness shares: the timers (host-side and do_bench), the run's
metadata and revision, acceptance checks, report paths and files, host-cost helpers, and run_all's
section runner.

Imported by bench/<family>/*harness.py (which put this folder on sys.path); named so that it never
shadows a family's own modules.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import inspect
import json
import math
import os
import platform
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


# --- device, timer, metadata, reports ---------------------------------------------------------------

RESULTS = REPO / "bench" / "results"
DRY_RUN_HARDWARE = "H200"  # the CPU has no GPU to detect: decisions and predictions are for this one


class BudgetExhausted(Exception):
    pass


class DeviceLost(Exception):
    pass


def add_device_arguments(parser) -> None:
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a plumbing check)")
    parser.add_argument("--dry-run", action="store_true",
                        help="= --device cpu: tiny shapes, CPU kernels, fake timings (numbers mean nothing)")


def device_of(args, cpu_threads: int | None = None) -> torch.device:
    """The device of --device / --dry-run (a dry run sets args.dry_run and, on the CPU, Triton's
    interpreter); cpu_threads, if given, is the CPU's intra-op thread count."""
    if args.dry_run:
        args.device = "cpu"
    device = torch.device(args.device)
    if device.type == "cpu":
        # Before any Triton kernel is defined: on the CPU, Triton runs in its interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        if cpu_threads is not None:
            torch.set_num_threads(cpu_threads)
        args.dry_run = True
    elif device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@functools.cache
def _do_bench():
    from triton.testing import do_bench
    params = inspect.signature(do_bench).parameters
    return do_bench, "return_mode" in params, "quantiles" in params


def median_us(fn, device: torch.device, warmup_ms: float = 10, rep_ms: float = 30) -> float:
    """GPU: triton.testing.do_bench's median (CUDA events, L2 flushed before each call), in us.
    CPU (dry runs): the median wall time of 3 calls."""
    if device.type == "cuda":
        do_bench, has_mode, has_quantiles = _do_bench()
        if has_mode:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        elif has_quantiles:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5])
        else:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms)
        if isinstance(ms, (list, tuple)):
            ms = ms[0]
        return float(ms) * 1e3
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def hardware(device: torch.device):
    """The model's hardware: detected on a GPU, DRY_RUN_HARDWARE on the CPU."""
    from mymetaops import model
    if device.type == "cuda":
        return model.detect_hardware(device)
    return model.get_hardware(DRY_RUN_HARDWARE)


def run_meta(device: torch.device) -> dict:
    """Where and with what the run ran: date, GPU, hardware, versions, revision."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if device.type == "cuda":
        gpu, hw = torch.cuda.get_device_name(device), hardware(device).name
    else:
        gpu, hw = f"CPU {platform.machine()} (dry run: numbers mean nothing)", DRY_RUN_HARDWARE
    return dict(date=datetime.date.today().isoformat(), gpu=gpu, hardware=hw, torch=torch.__version__,
                cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None), triton=triton_version,
                python=platform.python_version(), revision=git_revision())


def meta_line(meta: dict) -> str:
    return (f"{meta['gpu']}, {meta['date']}; torch {meta['torch']}, CUDA {meta['cuda']}, triton {meta['triton']}, "
            f"Python {meta['python']}; revision {meta['revision']}")


def gpu_slug(meta: dict) -> str:
    name = "CPU-dry-run" if meta["gpu"].startswith("CPU") else meta["gpu"].split(" (")[0]
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def default_prefix(meta: dict, what: str) -> Path:
    """bench/results/<date>-<gpu>-<what> (dry runs: under /tmp, never among the recorded results)."""
    base = RESULTS if not meta["gpu"].startswith("CPU") else Path(os.environ.get("TMPDIR", "/tmp")) / "mymetaops-bench"
    return base / f"{meta['date']}-{gpu_slug(meta)}-{what}"


def open_report(argv, doc: str, add_arguments, what: str, cpu_threads: int | None = None):
    """A benchmark script's start: its parsed arguments, device, run_meta and output prefix
    (--out, else default_prefix(meta, what))."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    device = device_of(args, cpu_threads)
    meta = run_meta(device)
    prefix = Path(args.out) if args.out else default_prefix(meta, what)
    return args, device, meta, prefix


def write_report(prefix: Path, meta: dict, result: dict, text: str) -> None:
    """<prefix>.json (meta and result) and <prefix>.md (text)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(dict(meta, **result), indent=1, default=str))
    Path(f"{prefix}.md").write_text(text)


def close_report(prefix: Path, meta: dict, result: dict, text: str) -> None:
    """A benchmark script's end: write_report, then the report and where it went on stdout."""
    write_report(prefix, meta, result, text)
    print(text)
    print(f"written: {prefix}.json, {prefix}.md")


def check(name: str, value, bound, at_most: bool, fmt: str = "{:.2f}", missing_fails: bool = False) -> dict:
    """An acceptance check: `value` <= bound (at_most) or >= bound; bound None: reported only.
    A missing value (None) is shown as n/a: failed if missing_fails and there is a bound, else not judged."""
    required = "" if bound is None else ("<= " if at_most else ">= ") + fmt.format(bound)
    if value is None:
        judged = missing_fails and bound is not None
        return dict(name=name, value=None, shown="n/a", required=required if judged else "",
                    passed=False if judged else None)
    shown = fmt.format(value)
    if bound is None:
        return dict(name=name, value=value, shown=shown, required="(reported)", passed=None)
    passed = value <= bound if at_most else value >= bound
    return dict(name=name, value=value, shown=shown, required=required, passed=bool(passed))


def checks_markdown(checks: list[dict]) -> list[str]:
    lines = ["| check | measured | required | |", "|---|---|---|---|"]
    for c in checks:
        verdict = {True: "PASS", False: "FAIL", None: ""}[c["passed"]]
        lines.append(f"| {c['name']} | {c['shown']} | {c['required']} | {verdict} |")
    return lines


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def cuda_usable(device: torch.device) -> str:
    """'' when the device still works after an error, else why not (a sticky CUDA error)."""
    if device.type != "cuda":
        return ""
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
    except Exception as e:  # noqa: BLE001
        return short_error(e)
    return ""


# --- host cost ----------------------------------------------------------------------------------------

def sync_free(fn, device) -> str:
    """'pass' when fn runs under torch.cuda.set_sync_debug_mode("error"), else why not."""
    if device.type != "cuda":
        fn()
        return "n/a (CPU)"
    torch.cuda.synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as e:
        return "FAIL: " + str(e).splitlines()[0][:160]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize(device)
    return "pass"


def time_host_calls(fns: dict, calls: int, reps: int, device: torch.device, warmup: int):
    """Seconds per call of each fn (interleaved_medians) and the report's rows; a fn that fails on
    its first call gets a row with its error, and the others still run."""
    fns, errors = dict(fns), {}
    for name, fn in list(fns.items()):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            errors[name] = short_error(e)
            del fns[name]
    seconds = interleaved_medians(fns, calls, reps, device, warmup=warmup)
    rows = [dict(call=name, us=s * 1e6, error=None) for name, s in seconds.items()]
    rows += [dict(call=name, us=None, error=e) for name, e in errors.items()]
    return seconds, rows


def no_sync_checks(sync: dict) -> list[dict]:
    """One check per sync_free verdict (n/a on the CPU: not judged)."""
    return [dict(name=f"no host sync: {what}", value=verdict, shown=verdict, required="pass",
                 passed=None if verdict.startswith("n/a") else verdict == "pass") for what, verdict in sync.items()]


def host_cost_rows_markdown(rows: list[dict]) -> list[str]:
    """The host-cost table: us per call and the ratio to the torch counterpart."""
    lines = ["| call | us/call | x torch counterpart |", "|---|---|---|"]
    for r in rows:
        shown = f"{r['us']:.1f}" if r["us"] is not None else f"ERROR {r['error']}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(f"| {r['call']} | {shown} | {ratio} |")
    return lines


# --- run_all: one subprocess per section under a time budget -----------------------------------------

STARTUP_S = 10  # a child's imports and CUDA context, before its own clock starts


def add_run_all_arguments(parser, budget_s: float, sections_help: str, extra=()) -> None:
    """run_all's arguments; `extra`: (flag, kwargs) pairs added after --only."""
    parser.add_argument("--out-dir", help=f"default {RESULTS} (dry runs: /tmp/mymetaops-bench)")
    parser.add_argument("--budget-s", type=float, default=budget_s,
                        help=f"all sections together (default {budget_s:.0f}): the GPU call's limit minus the build")
    parser.add_argument("--quick", action="store_true", help="smaller budgets and shorter timing windows")
    parser.add_argument("--only", help="comma-separated: " + sections_help)
    for flag, kwargs in extra:
        parser.add_argument(flag, **kwargs)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry-run", action="store_true", help="= --device cpu")


def chosen_sections(only: str | None, known: list[str]) -> list[str]:
    """--only's comma-separated names, else all of `known`; exits on a name not known."""
    names = only.split(",") if only else list(known)
    unknown = set(names) - set(known)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}")
    return names


def prefixes_in(args, meta: dict):
    """suffix -> the output prefix default_prefix names, in --out-dir if given (the folder created)."""
    out_dir = Path(args.out_dir) if args.out_dir else default_prefix(meta, "x").parent
    out_dir.mkdir(parents=True, exist_ok=True)
    return lambda suffix: out_dir / default_prefix(meta, suffix).name


def run_section(name, cmd, timeout, env):
    """Run one section's command; its status ('ok', 'exit N', 'killed after ...') and seconds."""
    print(f"\n=== {name}: {' '.join(cmd[1:])} (limit {timeout:.0f} s)", flush=True)
    start = time.monotonic()
    try:
        rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
        status = "ok" if rc == 0 else f"exit {rc}"
    except subprocess.TimeoutExpired:
        status = f"killed after {timeout:.0f} s"
    return status, time.monotonic() - start


def run_sections(order, sections: dict, reserve_s: dict, args, started: float, command, prefix, env,
                 drop_old_reports: bool = False) -> dict:
    """Run each section of `order` found in `sections` (name: (script, output suffix, budgets
    (normal, quick), kill margin, minimum s worth starting)) in its own process, its budget capped
    so that the later names of `order` keep reserve_s each; command(name, prefix, budget) builds
    its command line, prefix(suffix) its output prefix. Each result: status, seconds, the checks of
    its <prefix>.json. drop_old_reports: delete that JSON first (an earlier run's is not this one's)."""
    results = {}
    for i, name in enumerate(order):
        if name not in sections:
            continue
        _, suffix, budgets, margin, minimum = sections[name]
        left = args.budget_s - (time.monotonic() - started)
        later = sum(reserve_s[n] for n in order[i + 1:])
        budget = min(budgets[1] if args.quick else budgets[0], left - later - STARTUP_S)
        if budget < minimum:
            results[name] = dict(status=f"skipped: {left:.0f} s left of --budget-s", elapsed_s=0.0, checks=[])
            continue
        p = prefix(suffix)
        if drop_old_reports:
            Path(f"{p}.json").unlink(missing_ok=True)
        status, elapsed = run_section(name, command(name, p, budget), budget + margin, env)
        checks = []
        try:
            checks = json.loads(Path(f"{p}.json").read_text()).get("checks", [])
        except (OSError, ValueError) as e:
            status += f"; no report ({type(e).__name__})"
        results[name] = dict(status=status, elapsed_s=elapsed, checks=checks, prefix=str(p))
    return results


def sections_table(results: dict) -> list[str]:
    """The summary's table: each section's status, seconds and report."""
    lines = ["| section | status | seconds | report |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['status']} | {r['elapsed_s']:.0f} | "
                     f"{Path(r['prefix']).name + '.md' if r.get('prefix') else ''} |")
    return lines


def write_summary(prefix: Path, text: str) -> None:
    """run_all's summary: <prefix>.md, then the text LAST on stdout (what a log's tail shows)."""
    summary = Path(f"{prefix}.md")
    summary.write_text(text)
    print(f"\nwritten: {summary}\n")
    print(text, end="", flush=True)


def sections_passed(results: dict) -> bool:
    return all(r["status"] == "ok" or r["status"].startswith("skipped") for r in results.values())
