"""Times every native GEMM kernel of this build (and its split-K values) on a few shapes.

A GPU script, run by hand: python bench/gemm/native_sweep.py [--shapes 8192x8192x8192,...]
For each shape it prints TFLOP/s of each FP8 row of the native table through
torch.ops.mymetaops._fp8_gemm_native (rowwise and tensorwise scales, bf16 out), of each bf16 row
through _gemm_native (w as [N, K] and as [K, N]), and of the vendor library (torch._scaled_mm,
torch.mm) beside them; with --triton, each FP8 Triton config through both load paths instead.
Times are triton.testing.do_bench medians.
"""
import argparse

import torch
import triton.testing

import mymetaops  # noqa: F401  (loads the ops)
from mymetaops import _C

# Big square (the 1250 TFLOP/s target), mid square, weight gradient (tall K), huge M with small N
# and K, small M (inference-like), and a rectangular training shape.
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (1024, 1024, 65536), (65536, 512, 256),
          (128, 4096, 4096), (16, 4096, 4096), (2048, 8192, 2048)]
SPLIT_K = (1, 2, 4, 8, 16)
FP8_INPUT, BF16_INPUT = 0, 1  # GemmInput


def tflops(m, n, k, ms):
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def quantize(x, rowwise):
    amax = x.abs().amax(dim=1) if rowwise else x.abs().amax().reshape(1)
    scale = amax.float().clamp(min=1e-12) / 448.0
    q = (x / (scale[:, None] if rowwise else scale)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, scale


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def sweep_fp8(rows, m, n, k):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    for rowwise in (True, False):
        xq, xs = quantize(x, rowwise)
        wq, ws = quantize(w, rowwise)
        mode = "rowwise" if rowwise else "tensorwise"
        ref_scales = (xs[:, None], ws[None, :]) if rowwise else (xs, ws)
        ms = bench(lambda: torch._scaled_mm(xq, wq.t(), *ref_scales, out_dtype=torch.bfloat16,
                                            use_fast_accum=True))
        print(f"  fp8 {mode:10s} {'torch._scaled_mm':34s}         {tflops(m, n, k, ms):7.1f}")
        ref = torch._scaled_mm(xq, wq.t(), *ref_scales, out_dtype=torch.bfloat16,
                               use_fast_accum=True).float() + bias.float()
        for index, row in rows:
            for split in [s for s in SPLIT_K if s <= row[9]]:
                config = [index, split]

                def run():
                    return torch.ops.mymetaops._fp8_gemm_native(xq, wq, xs, ws, bias,
                                                                 torch.bfloat16, config)
                try:
                    err = (run().float() - ref).abs().max().item() / ref.abs().max().item()
                    ms = bench(run)
                except RuntimeError as e:  # an unsupported shape is reported, not fatal
                    print(f"  fp8 {mode:10s} {row[0]:34s} sk={split:<3d} {str(e).splitlines()[0]}")
                    continue
                print(f"  fp8 {mode:10s} {row[0]:34s} sk={split:<3d} {tflops(m, n, k, ms):7.1f}"
                      f"   rel_err={err:.1e}")


def sweep_bf16(rows, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    for layout, b in (("w[N,K]", torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()),
                      ("w[K,N]", torch.randn(k, n, device="cuda", dtype=torch.bfloat16))):
        ms = bench(lambda: torch.addmm(bias, a, b))
        print(f"  bf16 {layout} {'torch.addmm':34s}         {tflops(m, n, k, ms):7.1f}")
        ref = torch.addmm(bias, a, b).float()
        for index, row in rows:
            def run():
                return torch.ops.mymetaops._gemm_native(a, b, bias, [index, 1])
            try:
                err = (run().float() - ref).abs().max().item() / ref.abs().max().item()
                ms = bench(run)
            except RuntimeError as e:
                print(f"  bf16 {layout} {row[0]:34s} sk=1   {str(e).splitlines()[0]}")
                continue
            print(f"  bf16 {layout} {row[0]:34s} sk=1   {tflops(m, n, k, ms):7.1f}"
                  f"   rel_err={err:.1e}")


def sweep_triton_fp8(m, n, k):
    """Each FP8 Triton config through both load paths (TMA descriptors, pointers), rowwise."""
    from mymetaops.triton import gemm as triton_gemm
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize(x, True)
    wq, ws = quantize(w, True)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for config in triton_gemm.FP8_CONFIGS_NVIDIA:
        for tma in (True, False):
            if tma and not triton_gemm.fp8_tma_possible(xq, wq):
                continue
            ms = bench(lambda: triton_gemm.fp8_gemm(xq, wq, xs, ws, None, out, config, use_tma=tma))
            name = f"triton {config.block_m}x{config.block_n}x{config.block_k} {'tma' if tma else 'pointers'}"
            print(f"  fp8 rowwise    {name:34s}         {tflops(m, n, k, ms):7.1f}   {ms * 1e3:7.1f} us")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="comma-separated MxNxK list (default: a built-in set)")
    parser.add_argument("--no-bf16", action="store_true", help="FP8 kernels only")
    parser.add_argument("--triton", action="store_true",
                        help="only the FP8 Triton configs, each with TMA descriptors and with pointers")
    args = parser.parse_args()
    shapes = ([tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
              if args.shapes else SHAPES)
    # Rows: (name, input, tile_m, tile_n, tile_k, cluster_m, cluster_n, schedule, stages,
    # max_split_k, warps, b_k_major_only).
    table = list(enumerate(_C._native_gemm_kernels()))
    print(f"{torch.cuda.get_device_name()}: {len(table)} native kernels")
    for index, row in table:
        print(f"  [{index}] {row[0]}: stages={row[8]} warps={row[10]} max_split_k={row[9]}")
    fp8 = [(i, r) for i, r in table if r[1] == FP8_INPUT]
    bf16 = [(i, r) for i, r in table if r[1] == BF16_INPUT]
    for m, n, k in shapes:
        print(f"M={m} N={n} K={k}  (TFLOP/s)")
        if args.triton:
            sweep_triton_fp8(m, n, k)
            continue
        sweep_fp8(fp8, m, n, k)
        if bf16 and not args.no_bf16:
            sweep_bf16(bf16, m, n, k)


if __name__ == "__main__":
    main()
