"""Cross-compile a sample of the Triton GEMM-family kernels for gfx942, gfx950 (MFMA present, no
scratch, LDS budget) and sm_90 (the TMA path: wgmma, no spills) with
scripts/check_triton_targets.py, which checks every suggested config when run whole (too slow for a
unit test). No GPU needed. The script runs in a subprocess without TRITON_INTERPRET, which
conftest.py sets on CPU-only machines and which makes triton.jit functions uncompilable."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The largest and smallest AMD FP8 tiles (rowwise, bias, masked K), a bf16 tile, the rowwise
# quantize; on sm_90 also Hopper's FP8 TMA path.
SAMPLE = (r"^(fp8_gemm\(rowwise\+bias maskedK bf16( tma)?\) (256x128x128|16x64x256|128x128x128) "
          r"|gemm\(bf16 b\[K,N\]\+bias maskedK\) 128x128x64 |quantize_rowwise\(bf16\+ub -> \w+\) R4 )")


def test_cross_compile_sample():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(ROOT / "scripts" / "check_triton_targets.py"), "--only", "gemm", "--match", SAMPLE]
    for arch in ("gfx942", "gfx950", "sm90"):
        cmd += ["--arch", arch]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "0 failure(s)" in out, out
    lines = [line for line in out.splitlines() if line.startswith(("ok", "FAIL"))]
    for arch in ("gfx942", "gfx950"):
        fp8 = [line for line in lines if f" {arch} " in line and " fp8_gemm(" in line]
        bf16 = [line for line in lines if f" {arch} " in line and " gemm(bf16" in line]
        assert len(fp8) >= 2 and bf16, out
        assert all(line.split()[-1].startswith("v_mfma") and ("fp8" in line.split()[-1] or "f8f6f4" in line.split()[-1])
                   for line in fp8), out
        assert all("bf16" in line.split()[-1] for line in bf16), out
        assert any(f" {arch} " in line and "quantize_rowwise" in line for line in lines), out
    tma = [line for line in lines if " sm90 " in line and " tma)" in line]
    assert tma and all(line.rstrip().endswith("wgmma") for line in tma), out


# Attention: HSTU's forward at D = 128 (the most registers on sm_90), jagged attention's dq at
# D = 64 and the delta preprocess (memory-bound, no matrix instructions): 9 compiles.
ATTENTION_SAMPLE = (r"^(hstu_attn_fwd\(bf16/i64 causal D128\) |jagged_attn_dq\(bf16/i64 causal D64\) "
                    r"|jagged_attn_bwd_preprocess\()")


def test_cross_compile_attention_sample():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(ROOT / "scripts" / "check_triton_targets.py"), "--only", "attention", "--match",
           ATTENTION_SAMPLE]
    for arch in ("gfx942", "gfx950", "sm90"):
        cmd += ["--arch", arch]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "0 failure(s)" in out, out
    lines = [line for line in out.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(lines) == 9, out
    for arch in ("gfx942", "gfx950"):
        dots = [line for line in lines if f" {arch} " in line and "preprocess" not in line]
        assert len(dots) == 2, out
        assert all(line.split()[-1].startswith("v_mfma") and "bf16" in line.split()[-1] for line in dots), out
    dots = [line for line in lines if " sm90 " in line and "preprocess" not in line]
    assert len(dots) == 2 and all(line.split()[-1] in ("wgmma", "mma.sync", "wgmma+mma.sync") for line in dots), out
    assert sum("preprocess" in line for line in lines) == 3, out
