"""The jagged benchmarks' plumbing on the CPU (no GPU needed; CI runs it): run_all.py --dry-run runs
every script's --dry-run (host_cost, jagged_table, varying_loop) in its own process, with tiny
shapes, the CPU kernels and the Triton interpreter, then prints its summary table last. The tests
read what each wrote; the numbers mean nothing, but every row must have run, every output must
match its anchor, and the reports must carry the run's metadata. About 30 s.

Run: python -m pytest bench/jagged/test_bench_jagged.py
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import jagged_harness as h  # noqa: E402  (a unique name: no other folder's harness can shadow it)

META = ("date", "gpu", "hardware", "torch", "triton", "revision", "python")
SECTIONS = {"host_cost": "jagged-host_cost", "jagged_table": "jagged", "varying_loop": "jagged-varying_loop"}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("jagged-bench")
    proc = subprocess.run([sys.executable, str(HERE / "run_all.py"), "--dry-run", "--out-dir", str(out),
                           "--budget-s", "240"], capture_output=True, text=True, timeout=200)
    return out, proc


def report(out: Path, suffix: str) -> dict:
    found = sorted(out.glob(f"*-CPU-dry-run-{suffix}.json"))
    assert found, f"no {suffix}.json in {sorted(p.name for p in out.iterdir())}"
    data = json.loads(found[-1].read_text())
    assert Path(str(found[-1])[:-5] + ".md").exists()
    return data


def test_run_all_runs_every_section_and_prints_the_summary_last(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = sorted(out.glob("*-jagged-summary.md"))
    assert summary, proc.stdout[-2000:]
    text = summary[-1].read_text()
    assert proc.stdout.rstrip().endswith(text.rstrip()), "the summary table is not the last thing printed"
    for name in SECTIONS:
        assert f"| {name} | ok |" in text, text[:2000]
    assert "FAIL" not in text.replace("FAILED", ""), text


@pytest.mark.parametrize("section", SECTIONS)
def test_reports_carry_the_run_metadata(dry_run, section):
    data = report(dry_run[0], SECTIONS[section])
    for key in META:
        assert key in data, key
    assert data["gpu"].startswith("CPU") and data["hardware"] == h.DRY_RUN_HARDWARE
    assert data["checks"], "no checks"
    assert not [c for c in data["checks"] if c["passed"] is False], [c for c in data["checks"] if c["passed"] is False]


def test_jagged_table_times_every_row_of_every_op(dry_run):
    data = report(dry_run[0], "jagged")
    assert not data["aborted"] and not data["skipped"] and not data["notes"], (data["aborted"], data["skipped"],
                                                                                 data["notes"])
    assert data["ceiling"]["tflops"]
    cases = {(c["op"], c["shape"]) for c in data["cases"]}
    assert cases == {(op, "x".join(map(str, s))) for op in h.ALL_OPS for s in h.DRY_RUN_SHAPES}
    for c in data["cases"]:
        for d in ("fwd", "bwd"):
            for key in (f"{d}_us", f"{d}_anchor_us", f"{d}_copy_gbps", f"{d}_int32_us", f"{d}_gbps"):
                assert c[key], (c["op"], c["shape"], key)
            backends = c[f"{d}_backends"]
            assert backends and all(b["skipped"] for b in backends.values()), (c["op"], backends)  # GPU only
        assert c["worst_rel_err"] is not None and c["worst_rel_err"] <= h.REL_ERR_BOUND, c
        assert not c["failed_rows"], c["failed_rows"]
        if c["op"] in h.BMM:
            assert c["fwd_tflops"] and c["fwd_pct_mm"] and c["flops_bwd"] == 2 * c["flops_fwd"]
    timed = [r for r in data["records"] if r["time_us"] is not None]
    assert all(r["rel_err"] is not None for r in timed if r["what"] not in ("copy", "ceiling"))
    names = {c["name"] for c in data["checks"]}
    for bound in ("ours / aten throughput", "copy ceiling", "bf16 mm TFLOP/s"):
        assert any(bound in n for n in names), bound


def test_host_cost_has_every_op_and_its_anchor(dry_run):
    data = report(dry_run[0], "jagged-host_cost")
    rows = {r["call"]: r for r in data["rows"]}
    for op in h.ALL_OPS:
        assert rows[f"{h.SHORT[op]}: mymetaops.{op}"]["us"], op
    bounded = [c for c in data["checks"] if c["required"].startswith("<= 1.50")]
    assert len(bounded) == 2 and all(c["value"] for c in bounded), bounded
    assert len(data["sync_debug"]) == len(h.ALL_OPS) + 1


def test_varying_loop_runs_both_loops(dry_run):
    data = report(dry_run[0], "jagged-varying_loop")
    assert not data["errors"], data["errors"]
    assert data["ms_per_step"]["mymetaops"] and data["ms_per_step"]["aten"]
    assert set(data["cache"]) >= {"hits", "misses"}
    assert data["rel_err"] is not None and data["rel_err"] <= h.REL_ERR_BOUND
    assert data["host_us"]["mymetaops"]["backward"] > 0


def test_byte_counts():
    """The docstring's table on a small batch (the issue's example: to_padded reads
    sum(min(len, max_L)) * D * 2 bytes and writes B * max_L * D * 2)."""
    lengths = h.draw_lengths(6, 5, 3)
    B, L, D = 6, 5, 4
    T = int(lengths.sum())
    U = int(lengths.clamp(max=L).sum())
    s = h.Sizes(B, L, D, T, U)
    off = (B + 1) * 8
    assert h.moved_bytes("jagged_to_padded_dense", "fwd", s) == U * D * 2 + B * L * D * 2 + off
    assert h.moved_bytes("dense_to_jagged", "fwd", s) == (U + T) * D * 2 + off
    assert h.moved_bytes("jagged_dense_elementwise_add", "fwd", s) == (U + 2 * B * L) * D * 2 + off
    sb = h.Sizes(B, L, 8, T, U, n=16)
    assert h.flops("jagged_dense_bmm", "fwd", sb) == 2 * U * 8 * 16
    assert h.moved_bytes("jagged_jagged_bmm", "fwd", sb) == (U * 8 + U * 16 + B * 8 * 16) * 2 + off
