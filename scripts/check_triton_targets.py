#!/usr/bin/env python
"""Cross-compile the Triton kernels (embedding_bag, the GEMM family: fp8_gemm, gemm, FP8 quantize; the
jagged family; the attention family: HSTU and jagged softmax attention, forward and backward) for
MI300 (gfx942), MI355 (gfx950) and H100/H200 (sm_90) without a GPU, and fail if one does not compile,
or if an AMD kernel spills (scratch) or needs more LDS than the chip has.

GEMM kernels are compiled with each suggested config of their vendor (mymetaops/triton/gemm.py:
*_CONFIGS_AMD for gfx942/gfx950, *_CONFIGS_NVIDIA for sm_90) and must also contain matrix
instructions: MFMA of the operand type on AMD (fp8: `v_mfma_*fp8*` / `*f8f6f4`; bf16/fp16), and on
sm_90 wgmma (or mma.sync for tiles too small for a warpgroup); there the stack frame and local
memory (spills) must be 0 and shared memory within 227 KB. The attention kernels
(mymetaops/triton/hstu_attention.py, jagged_attention.py) are compiled with their default_config
per vendor at a few head dims and are held to the same checks (bf16/fp16 MFMA; wgmma or mma.sync);
their delta preprocess, memory-bound, only to compiling, no scratch and LDS. `--only gemm` (or
embedding_bag, jagged, attention), `--arch gfx942` and `--match REGEX` (on the labels) narrow the
run (tests/gemm/test_triton_targets.py uses them).

Prints one line per kernel/config/target: registers, spills/scratch and shared memory (LDS).
CUDA registers, stack frame (spills land there) and local memory come from `cuobjdump -res-usage`
on the cubin (Triton's bundled copy); they are reported, not checked.

Uses ASTSource(fn, signature with constexprs typed "constexpr", constexprs by name, attrs keyed by
argument index): checked on Triton 3.6 and 3.8.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package: importing it builds nothing
from mymetaops.model.gemm import PROMOTED_MAX_TILE  # noqa: E402
from mymetaops.triton import embedding_bag as kernels  # noqa: E402
from mymetaops.triton import gemm as gemm_kernels  # noqa: E402
from mymetaops.triton import hstu_attention as hstu_kernels  # noqa: E402
from mymetaops.triton import jagged as jagged_kernels  # noqa: E402
from mymetaops.triton import jagged_attention as attention_kernels  # noqa: E402
from mymetaops.triton import quantize_fp8 as quantize_kernels  # noqa: E402

TARGETS = {  # name: (target, LDS budget in bytes or None)
    "gfx942": (GPUTarget("hip", "gfx942", 64), 64 * 1024),
    "gfx950": (GPUTarget("hip", "gfx950", 64), 160 * 1024),
    "sm90": (GPUTarget("cuda", 90, 32), 232448),  # 227 KB: the most one block may opt into
}
AMD, NVIDIA = ("gfx942", "gfx950"), ("sm90",)
POINTER_TYPES = {"fp32": "*fp32", "fp16": "*fp16", "bf16": "*bf16", "i32": "*i32", "i64": "*i64"}
# (block_l, block_d, num_warps): the small end, the shapes that ran fastest on an H200 for
# D = 64..256 (one warp, 16-32 rows in flight), multi-warp ones, and the largest valid tiles
# (block_l * block_d = 16384).
CONFIGS = [(1, 16, 1), (16, 64, 1), (32, 128, 1), (16, 64, 4), (8, 128, 4), (32, 128, 8), (16, 256, 8),
           (64, 256, 16), (16, 1024, 8), (256, 64, 16)]
# (float dtype, index dtype): every config runs the first; the others a subset.
DTYPES = [("fp32", "i64"), ("bf16", "i32"), ("fp16", "i64")]
SUBSET = {(32, 128, 1), (16, 64, 4), (8, 128, 4), (64, 256, 16)}
# Configs also compiled with 64-bit sizes (past 2^31 indices or rows, the JIT passes i64 scalars).
WIDE_SIZES = {(32, 128, 1), (16, 64, 4)}


def _source(fn, types: dict[str, str], constexprs: dict) -> ASTSource:
    """Arguments not in `types` are constexprs. Pointers, dims and strides get the 16-divisibility
    the JIT infers for aligned tensors and multiple-of-16 sizes, as at real launches."""
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    aligned = [n for n, t in types.items() if t.startswith("*") or n in ("dim", "weight_row_stride",
                                                                       "grad_out_row_stride")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def _cases():
    """(label, ASTSource, num_warps) for every kernel, config and dtype checked."""
    for config in CONFIGS:
        block_l, block_d, num_warps = config
        blocks = {"BLOCK_L": block_l, "BLOCK_D": block_d}
        reduce_each_step = {"REDUCE_EACH_STEP": num_warps == 1}  # as the launchers set it
        for fdt, idt in DTYPES if config in SUBSET else DTYPES[:1]:
            for size in ("i32", "i64") if config in WIDE_SIZES and fdt == "fp32" else ("i32",):
                f, i = POINTER_TYPES[fdt], POINTER_TYPES[idt]
                tag = f"{fdt}/{idt} L{block_l} D{block_d} w{num_warps}" + (" i64 sizes" if size == "i64" else "")
                scalars = {n: size for n in ("num_rows", "dim", "weight_row_stride", "num_indices", "num_offsets",
                                             "padding_idx", "bag_base")}
                bags = {"weight_ptr": f, "indices_ptr": i, "offsets_ptr": i, "out_ptr": f, **scalars}
                errors = {"errors_ptr": "*i64"}
                yield (f"forward(sum+psw+errors) {tag}", _source(
                    kernels._forward_kernel, {**bags, "psw_ptr": f, **errors},
                    {"MEAN": False, "HAS_PSW": True, "HAS_ERRORS": True, **reduce_each_step, **blocks}), num_warps)
                yield (f"forward(mean+errors)    {tag}", _source(
                    kernels._forward_kernel, {**bags, **errors},
                    {"psw_ptr": None, "MEAN": True, "HAS_PSW": False, "HAS_ERRORS": True, **reduce_each_step,
                     **blocks}), num_warps)
                yield (f"forward(sum)            {tag}", _source(
                    kernels._forward_kernel, bags,
                    {"psw_ptr": None, "errors_ptr": None, "MEAN": False, "HAS_PSW": False, "HAS_ERRORS": False,
                     **reduce_each_step, **blocks}), num_warps)
                yield (f"backward(scales)        {tag}", _source(
                    kernels._backward_kernel,
                    {"grad_out_ptr": f, "sorted_rows_ptr": i, "sorted_bags_ptr": "*i64", "sorted_scales_ptr": "*fp32",
                     "grad_weight_ptr": f, **{n: size for n in ("grad_out_row_stride", "num_positions", "num_rows",
                                                                "num_bags", "dim", "pos_base")}},
                    {"HAS_SCALES": True, **reduce_each_step, **blocks}), num_warps)
                yield (f"psw_backward(errors)    {tag}", _source(
                    kernels._psw_backward_kernel, {**bags, "grad_out_ptr": f, "grad_out_row_stride": size, **errors},
                    {"HAS_ERRORS": True, **blocks}), num_warps)


def _amd_usage(asm: str) -> dict[str, int]:
    """Resource usage from the AMDGPU kernel metadata in the assembly (static LDS only)."""
    def field(key):
        m = re.search(rf"\.{key}:\s+(\d+)", asm)
        return int(m.group(1)) if m else 0
    return {"vgpr": field("vgpr_count"), "agpr": field("agpr_count"), "sgpr": field("sgpr_count"),
            "scratch": field("private_segment_fixed_size"), "vgpr_spills": field("vgpr_spill_count"),
            "sgpr_spills": field("sgpr_spill_count"), "lds": field("group_segment_fixed_size")}


def _cuda_usage(cubin: bytes) -> dict[str, int] | None:
    """REG/STACK/LOCAL from cuobjdump on the cubin, or None where no cuobjdump is found."""
    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    if not cuobjdump.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(cuobjdump), "-res-usage", f.name], capture_output=True, text=True).stdout
    usage = dict(re.findall(r"(REG|STACK|LOCAL|SHARED):(\d+)", out))
    return {k.lower(): int(v) for k, v in usage.items()}


# --------------------------------------------------------------------------- GEMM family

# The FP8 pointer type of each target: gfx942's MFMA takes e4m3fnuz, gfx950 and Hopper e4m3fn.
FP8_TYPE = {"gfx942": "fp8e4b8", "gfx950": "fp8e4nv", "sm90": "fp8e4nv"}
MFMA = {"fp8": r"v_mfma_\w*(fp8|f8f6f4)", "bf16": r"v_mfma_\w*bf16", "fp16": r"v_mfma_\w*_f16"}
GEMM_SCALARS = ("M", "N", "K", "stride_om", "num_programs")


def _gemm_source(fn, types: dict[str, str], constexprs: dict) -> ASTSource:
    """Pointers, K and the row strides get the 16-divisibility of aligned operands (FP8 rows are
    16-byte aligned by contract); M and N do not."""
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    aligned = [n for n, t in types.items() if t.startswith("*") or n == "K" or n.startswith("stride")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def _gemm_cases():
    """(label, ASTSource, options, targets, required ISA pattern per backend or None)."""
    for vendor, targets, fp8_configs, bf16_configs in (
            ("AMD", AMD, gemm_kernels.FP8_CONFIGS_AMD, gemm_kernels.BF16_CONFIGS_AMD),
            ("NVIDIA", NVIDIA, gemm_kernels.FP8_CONFIGS_NVIDIA, gemm_kernels.BF16_CONFIGS_NVIDIA)):
        for i, c in enumerate(fp8_configs):
            options = {"num_warps": c.num_warps, "num_stages": c.num_stages}
            blocks = {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "GROUP_M": c.group_m}
            # Rowwise + bias + masked K for every config; for the first, also tensorwise, no bias, fp32
            # out, even K; the long-K form (promoted into fp32 every BLOCK_K) for every config the
            # model offers past FAST_ACCUM_MAX_K.
            variants = [(True, True, False, "bf16", False)] + (
                [(False, False, True, "fp32", False)] if i == 0 else []) + (
                [(True, False, True, "bf16", True)] if c.block_m * c.block_n <= PROMOTED_MAX_TILE else [])
            paths = [False, True] if vendor == "NVIDIA" else [False]  # TMA: Hopper only
            for tname in targets:
                f8 = FP8_TYPE[tname]
                for rowwise, bias, even_k, out, promote in variants:
                    for tma in paths:
                        x = f"tensordesc<{f8}[{c.block_m}, {c.block_k}]>" if tma else f"*{f8}"
                        w = f"tensordesc<{f8}[{c.block_n}, {c.block_k}]>" if tma else f"*{f8}"
                        types = {"x": x, "w": w, "x_scale_ptr": "*fp32", "w_scale_ptr": "*fp32", "out_ptr": f"*{out}",
                                 "stride_xm": "i32", "stride_wn": "i32", **{n: "i32" for n in GEMM_SCALARS}}
                        constexprs = {"X_ROWWISE": rowwise, "W_ROWWISE": rowwise, "HAS_BIAS": bias, "USE_TMA": tma,
                                      "EVEN_K": even_k, "IMPRECISE_ACC": c.block_k if promote else None, **blocks}
                        if bias:
                            types["bias_ptr"] = f"*{out}"
                        else:
                            constexprs["bias_ptr"] = None
                        label = (f"fp8_gemm({'rowwise' if rowwise else 'tensorwise'}{'+bias' if bias else ''}"
                                 f"{'' if even_k else ' maskedK'}{' promoted' if promote else ''} {out}"
                                 f"{' tma' if tma else ''}) {c}")
                        yield (label, _gemm_source(gemm_kernels._fp8_gemm_kernel, types, constexprs), options,
                               (tname,), {"hip": MFMA["fp8"], "cuda": r"wgmma\.mma_async\S*e4m3|mma\.sync\S*e4m3"})
        for i, c in enumerate(bf16_configs):
            options = {"num_warps": c.num_warps, "num_stages": c.num_stages}
            blocks = {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "GROUP_M": c.group_m}
            # b as torch.mm's [K, N] (N contiguous) and as nn.Linear's w[N, K].t() (K contiguous);
            # the JIT specializes strides of 1 to constants, as here.
            for dtype in ("bf16", "fp16") if i < 2 else ("bf16",):
                for layout, unit in (("b[K,N]", {"stride_ak": 1, "stride_bn": 1}),
                                     ("w[N,K].t()", {"stride_ak": 1, "stride_bk": 1})):
                    strides = {n: "i32" for n in ("stride_am", "stride_ak", "stride_bk", "stride_bn") if n not in unit}
                    types = {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "bias_ptr": f"*{dtype}",
                             "out_ptr": f"*{dtype}", **strides, **{n: "i32" for n in GEMM_SCALARS}}
                    constexprs = {**unit, "HAS_BIAS": True, "EVEN_K": False, **blocks}
                    yield (f"gemm({dtype} {layout}+bias maskedK) {c}", _gemm_source(gemm_kernels._gemm_kernel, types,
                                                                                     constexprs),
                           options, targets, {"hip": MFMA[dtype], "cuda": r"wgmma\.mma_async|mma\.sync"})
    # Quantize: memory-bound, no matrix instructions; every target.
    for block_rows, block_cols, num_warps in ((1, 1024, 4), (4, 512, 4), (16, 256, 8)):
        blocks = {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols}
        options = {"num_warps": num_warps}
        tag = f"R{block_rows} C{block_cols} w{num_warps}"
        for tname in TARGETS:
            f8 = FP8_TYPE[tname]
            fmt = {"FP8_MAX": 240.0 if f8 == "fp8e4b8" else 448.0, "NO_NEG_ZERO": f8 == "fp8e4b8",
                   "SOFTWARE_CVT": False}
            for x in ("bf16", "fp32"):
                sizes = {n: "i32" for n in ("rows", "cols", "stride_x", "stride_xq")}
                yield (f"quantize_rowwise({x}+ub -> {f8}) {tag}", _gemm_source(
                    quantize_kernels._rowwise_kernel,
                    {"x_ptr": f"*{x}", "xq_ptr": f"*{f8}", "scale_ptr": "*fp32", "scale_ub_ptr": "*fp32", **sizes},
                    {"HAS_UB": True, **fmt, **blocks}), options, (tname,), None)
                tiles = {"num_tiles": "i32", "num_programs": "i32"}
                yield (f"quantize_amax({x}) {tag}", _gemm_source(
                    quantize_kernels._amax_kernel,
                    {"x_ptr": f"*{x}", "amax_bits_ptr": "*i32", "rows": "i32", "cols": "i32", "stride_x": "i32",
                     **tiles}, blocks), options, (tname,), None)
                yield (f"quantize_tensorwise({x} -> {f8}) {tag}", _gemm_source(
                    quantize_kernels._tensorwise_kernel,
                    {"x_ptr": f"*{x}", "xq_ptr": f"*{f8}", "scale_ptr": "*fp32", "amax_bits_ptr": "*i32", **sizes,
                     **tiles}, {**fmt, **blocks}), options, (tname,), None)


# Sizes and strides of the jagged kernels that a 16-byte aligned row makes multiples of 16 elements.
JAGGED_ALIGNED = ("dim", "x_row_stride", "dense_batch_stride", "dense_row_stride", "values_row_stride",
                  "grad_row_stride")


def _jagged_source(fn, types: dict[str, str], constexprs: dict, aligned=JAGGED_ALIGNED) -> ASTSource:
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    marked = [n for n, t in types.items() if t.startswith("*") or n in aligned]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in marked}
    return ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def _jagged_memory_cases(configs):
    """Every streaming kernel with every suggested config in bf16 (int32 offsets), the first config
    also in fp32 (int64 offsets); error records compiled in (their most expensive form)."""
    k = jagged_kernels
    for n, c in enumerate(configs):
        blocks, options = {"BLOCK_ROWS": c.block_rows, "BLOCK_D": c.block_d}, {"num_warps": c.num_warps}
        for fdt, idt in (("bf16", "i32"),) + ((("fp32", "i64"),) if n == 0 else ()):
            f, i, tag = POINTER_TYPES[fdt], POINTER_TYPES[idt], f"{fdt}/{idt} {c}"

            def scalars(*names):
                return {name: "i32" for name in names}
            for op in (0, 2):
                types = {"x_ptr": f, "offsets_ptr": i, "out_ptr": f, "errors_ptr": "*i64", "padding_value": "fp32",
                         **scalars("batch", "max_length", "num_positions", "total", "dim", "num_offsets",
                                   "x_row_stride", "dense_batch_stride", "dense_row_stride", "program_base")}
                constexprs = {"OP": op, "ERROR_OP": k.ERROR_OP_OF[op], "HAS_ERRORS": True, **blocks}
                if op == 0:
                    constexprs["dense_ptr"] = None
                else:
                    types["dense_ptr"] = f
                yield f"jagged_dense(op{op}) {tag}", _jagged_source(k._dense_output_kernel, types, constexprs), options
            for op in (1, 3, 4):
                types = {"offsets_ptr": i, "dense_ptr": f, "out_ptr": f, "errors_ptr": "*i64",
                         **scalars("batch", "max_length", "total", "dim", "num_offsets", "search_steps",
                                   "dense_batch_stride", "dense_row_stride", "program_base")}
                constexprs = {"OP": op, "ERROR_OP": k.ERROR_OP_OF[op], "HAS_ERRORS": True, **blocks}
                if op == 1:
                    constexprs.update(x_ptr=None, x_row_stride=0)
                else:
                    types.update(x_ptr=f, x_row_stride="i32")
                yield f"jagged_dense(op{op}) {tag}", _jagged_source(k._jagged_output_kernel, types, constexprs), options
            for backward in (False, True):
                types = {"values_ptr": f, "offsets_ptr": i, "out_ptr": f, "errors_ptr": "*i64",
                         **scalars("batch", "max_length", "total", "dim", "num_offsets", "values_row_stride",
                                   "program_base", "last_program")}
                constexprs = {"BACKWARD": backward, "HAS_ERRORS": True, "REDUCE_EACH_STEP": c.num_warps == 1, **blocks}
                if backward:
                    types.update(grad_ptr=f, grad_row_stride="i32")
                else:
                    constexprs.update(grad_ptr=None, grad_row_stride=0)
                yield (f"jagged_softmax({'backward' if backward else 'forward'}) {tag}",
                       _jagged_source(k._softmax_kernel, types, constexprs), options)
                types = {"values_ptr": f, "input_offsets_ptr": "*i64", "output_offsets_ptr": "*i64", "indices_ptr": i,
                         "out_ptr": "*fp32" if backward else f, "errors_ptr": "*i64",
                         **scalars("dim", "values_row_stride", "num_indices", "batch", "num_input_rows",
                                   "num_output_rows", "search_steps", "program_base")}
                yield (f"jagged_index_select({'backward' if backward else 'forward'}) {tag}",
                       _jagged_source(k._index_select_kernel, types, {"BACKWARD": backward, "HAS_ERRORS": True, **blocks}),
                       options)


def _jagged_bmm_cases(configs):
    """Both bmm kernels with every suggested config in bf16 (the first also fp16): matrix
    instructions required."""
    k = jagged_kernels
    for n, c in enumerate(configs):
        blocks = {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "GROUP_M": c.group_m}
        options = {"num_warps": c.num_warps, "num_stages": c.num_stages}
        for dt in ("bf16", "fp16") if n == 0 else ("bf16",):
            f, isa = POINTER_TYPES[dt], {"hip": MFMA[dt], "cuda": r"wgmma\.mma_async|mma\.sync"}
            pointers = {"x_ptr": f, "y_ptr": f, "offsets_ptr": "*i64", "out_ptr": f, "errors_ptr": "*i64"}
            tiles = ("num_offsets", "m_tiles", "n_tiles", "num_tiles", "tile_base", "tile_step", "last_sequence")
            types = {**pointers, **{name: "i32" for name in ("batch", "max_length", "total", "K", "N", *tiles,
                                                          "stride_xm", "stride_yb", "stride_yk")}}
            constexprs = {"stride_xk": 1, "stride_yn": 1, "HAS_ERRORS": True, "EVEN_K": False, "IEEE": False, **blocks}
            yield (f"jagged_dense_bmm({dt}) {c}", _jagged_source(k._jagged_dense_bmm_kernel, types, constexprs,
                                                                 ("K", "N", "stride_xm", "stride_yb", "stride_yk")),
                   options, isa)
            types = {**pointers, **{name: "i32" for name in ("batch", "max_length", "total", "M", "N", *tiles,
                                                          "stride_xr", "stride_yr")}}
            constexprs = {"stride_xm": 1, "stride_yn": 1, "HAS_ERRORS": True, "IEEE": False, **blocks}
            yield (f"jagged_jagged_bmm({dt}) {c}", _jagged_source(k._jagged_jagged_bmm_kernel, types, constexprs,
                                                                  ("M", "N", "stride_xr", "stride_yr")), options, isa)


def _jagged_cases():
    k = jagged_kernels
    for targets, memory, bmm in ((AMD, k.JAGGED_CONFIGS_AMD, k.BMM_CONFIGS_AMD),
                                 (NVIDIA, k.JAGGED_CONFIGS_NVIDIA, k.BMM_CONFIGS_NVIDIA)):
        for label, src, options in _jagged_memory_cases(memory):
            yield label, src, options, targets, None
        for label, src, options, isa in _jagged_bmm_cases(bmm):
            yield label, src, options, targets, isa


# --------------------------------------------------------------------------- attention family

ATTENTION_VENDORS = (("amd", AMD), ("nvidia", NVIDIA))  # default_config's vendor: its targets
# sm_90: wgmma, or mma.sync where the tiles are too small for a warpgroup (dk/dv at D = 256).
ATTENTION_MMA = r"wgmma\.mma_async|mma\.sync"
ATTENTION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}  # default_config takes the torch dtype
HSTU_SIGMOID = {"nvidia": "tanh", "amd": "rcp"}  # the launchers' sigmoid form on each vendor's GPUs


def _attention_source(fn, types: dict[str, str], constexprs: dict) -> ASTSource:
    """Pointers and the stride_* args get the 16-divisibility of contiguous [rows, H, D] tensors
    with D a multiple of 16, as at real launches; sizes and scalars do not."""
    names = fn.arg_names
    signature = {n: types.get(n, "constexpr") for n in names}
    marked = [n for n, t in types.items() if t.startswith("*") or n.startswith("stride_")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in marked}
    return ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


# (dtype, seq_offsets type, D, kernels, causal, masks), each compiled with its vendor's default
# config: bf16 causal at D = 64 and 128 for every kernel, the forward also at D = 256; HSTU's masks
# (targets, window, contextual rows) at D = 128 in every kernel (dk/dv and dq have tables of their
# own for masks); fp16 operands with int32 offsets on one forward per op. The forwards with their
# value checks (errors given), as the ops call them. Kept small (each compile takes seconds): 60
# compiles in all.
HSTU_CASES = [("bf16", "i64", d, ("fwd", "dkdv", "dq"), True, False) for d in (64, 128)] + [
    ("bf16", "i64", 256, ("fwd",), True, False),
    ("bf16", "i64", 128, ("fwd", "dkdv", "dq"), True, True),
    ("fp16", "i32", 128, ("fwd",), True, False)]
JAGGED_ATTENTION_CASES = [("bf16", "i64", d, ("fwd", "dkdv", "dq"), True) for d in (64, 128)] + [
    ("bf16", "i64", 256, ("fwd",), True),
    ("fp16", "i32", 128, ("fwd",), True)]


def _hstu_attention_cases():
    k = hstu_kernels
    fns = {"fwd": k._hstu_fwd_kernel, "dkdv": k._hstu_bwd_dkdv_kernel, "dq": k._hstu_bwd_dq_kernel}
    outputs = {"fwd": ("Out",), "dkdv": ("DK", "DV_"), "dq": ("DQ",)}
    strides = {"fwd": ("q", "k", "v", "o"), "dkdv": ("q", "k", "v", "do", "dk", "dv"),
               "dq": ("q", "k", "v", "do", "dq")}
    for vendor, targets in ATTENTION_VENDORS:
        for dt, idt, d, kernels, causal, masks in HSTU_CASES:
            f = POINTER_TYPES[dt]
            isa = {"hip": MFMA[dt], "cuda": ATTENTION_MMA}
            for kernel in kernels:
                c = k.default_config(d, d, ATTENTION_DTYPES[dt], kernel=kernel, vendor=vendor, masked=masks)
                options = {"num_warps": c.num_warps, "num_stages": c.num_stages}
                types = {n: f for n in ("Q", "K", "V") + (("DO",) if kernel != "fwd" else ()) + outputs[kernel]}
                types["seq_offsets"] = POINTER_TYPES[idt]
                types.update({f"stride_{t}{dim}": "i32" for t in strides[kernel] for dim in "mh"})
                types.update({n: "i32" for n in ("total_rows", "num_seqs", "num_heads", "max_seq_len",
                                                 "max_attn_len", "contextual_seq_len", "program_base",
                                                 "group_size")})
                types.update(alpha="fp32", inv_n="fp32")
                constexprs = {"CAUSAL": causal, "HAS_TARGETS": masks, "HAS_WINDOW": masks, "HAS_CONTEXT": masks,
                              "DQK": d, "DV": d, "BLOCK_DQK": k._block_d(d), "BLOCK_DV": k._block_d(d),
                              "BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "IEEE": False,
                              "SIGMOID": HSTU_SIGMOID[vendor]}
                if kernel == "fwd":  # with the value checks, as the op calls it
                    types.update(errors="*i64", error_op="i32")
                    constexprs["CHECK"] = True
                if masks:
                    types["num_targets"] = "*i32"
                else:
                    constexprs["num_targets"] = None  # the launchers pass None without targets
                variant = ("causal" if causal else "full") + ("+targets+window+context" if masks else "")
                yield (f"hstu_attn_{kernel}({dt}/{idt} {variant} D{d}) {c}",
                       _attention_source(fns[kernel], types, constexprs), options, targets, isa)


def _jagged_attention_cases():
    k = attention_kernels
    fns = {"fwd": k._jagged_attn_fwd_kernel, "dkdv": k._jagged_attn_bwd_dkdv_kernel,
           "dq": k._jagged_attn_bwd_dq_kernel}
    pointers = {"fwd": ("q_ptr", "k_ptr", "v_ptr", "out_ptr"), "dkdv": ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "dk_ptr",
                                                                        "dv_ptr"),
                "dq": ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "dq_ptr")}
    strides = {"fwd": ("q", "k", "v", "o"), "dkdv": ("q", "k", "v", "do", "dk", "dv"),
               "dq": ("q", "k", "v", "do", "dq")}
    for vendor, targets in ATTENTION_VENDORS:
        for dt, idt, d, kernels, causal in JAGGED_ATTENTION_CASES:
            f = POINTER_TYPES[dt]
            isa = {"hip": MFMA[dt], "cuda": ATTENTION_MMA}
            for kernel in kernels:
                c = k.default_config(d, d, ATTENTION_DTYPES[dt], kernel, vendor)
                options = {"num_warps": c.num_warps, "num_stages": c.num_stages}
                types = {n: f for n in pointers[kernel]}
                types.update(offsets_ptr=POINTER_TYPES[idt], lse_ptr="*fp32")
                if kernel != "fwd":
                    types["delta_ptr"] = "*fp32"
                types.update({f"stride_{t}{dim}": "i32" for t in strides[kernel] for dim in "mh"})
                blocks = "num_n_blocks" if kernel == "dkdv" else "num_m_blocks"
                types.update({n: "i32" for n in ("total_rows", "max_seq_len", "num_heads", "num_seqs", blocks,
                                                 "program_base", "group_size")})
                types["qk_scale"] = "fp32"
                constexprs = {"CAUSAL": causal, "IEEE": False, "DQK": d, "DV": d, "BLOCK_DQK": k._block_d(d),
                              "BLOCK_DV": k._block_d(d), "BLOCK_M": c.block_m, "BLOCK_N": c.block_n}
                if kernel == "fwd":  # with the value checks, as the op calls it
                    types.update(errors_ptr="*i64", error_op="i32")
                    constexprs["CHECK"] = True
                else:
                    types["sm_scale"] = "fp32"
                yield (f"jagged_attn_{kernel}({dt}/{idt} {'causal' if causal else 'full'} D{d}) {c}",
                       _attention_source(fns[kernel], types, constexprs), options, targets, isa)
    # The backward's delta = rowsum(out * dout): memory-bound, no matrix instructions; the
    # launcher's BLOCK_R and 4 warps.
    for d in (128,):
        block_r = 64 if k._block_d(d) <= 128 else 32
        types = {"out_ptr": "*bf16", "do_ptr": "*bf16", "delta_ptr": "*fp32", "total_rows": "i32",
                 **{f"stride_{t}{dim}": "i32" for t in ("o", "do") for dim in "mh"}}
        yield (f"jagged_attn_bwd_preprocess(bf16 D{d}) R{block_r} w4",
               _attention_source(k._bwd_preprocess_kernel, types,
                                 {"DV": d, "BLOCK_R": block_r, "BLOCK_DV": k._block_d(d)}),
               {"num_warps": 4}, tuple(TARGETS), None)


def _attention_cases():
    yield from _hstu_attention_cases()
    yield from _jagged_attention_cases()


def _embedding_bag_cases():
    for label, src, num_warps in _cases():
        yield label, src, {"num_warps": num_warps}, tuple(TARGETS), None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("embedding_bag", "gemm", "jagged", "attention"),
                        help="one family's kernels")
    parser.add_argument("--arch", action="append", choices=tuple(TARGETS), help="targets (default: all)")
    parser.add_argument("--match", help="only cases whose label matches this regular expression")
    args = parser.parse_args(argv)
    archs = set(args.arch or TARGETS)
    families = {"embedding_bag": _embedding_bag_cases, "gemm": _gemm_cases, "jagged": _jagged_cases,
                "attention": _attention_cases}
    failures = 0
    print(f"triton {triton.__version__}")
    for family, cases in families.items():
        if args.only and family != args.only:
            continue
        for label, src, options, targets, isa in cases():
            if args.match and not re.search(args.match, label):
                continue
            for tname in targets:
                if tname not in archs:
                    continue
                failures += _check(tname, label, src, options, isa)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


def _check(tname, label, src, options, isa) -> int:
    """Compile one case for one target, print its line; 1 if it failed a check."""
    target, lds_budget = TARGETS[tname]
    try:
        compiled = triton.compile(src, target=target, options=options)
    except Exception as e:  # noqa: BLE001 - any compiler error is a failed check
        print(f"FAIL {tname:6} {label}: compile error: {str(e).splitlines()[0] if str(e) else type(e)}")
        return 1
    problems = []
    matrix = ""
    if target.backend == "hip":
        asm = compiled.asm["amdgcn"]
        u = _amd_usage(asm)
        # Triton allocates its shared memory dynamically: only metadata.shared counts it.
        lds = u["lds"] + compiled.metadata.shared
        # SGPR spills go to VGPR lanes (no memory): reported, not failed.
        if u["scratch"] or u["vgpr_spills"]:
            problems.append(f"scratch {u['scratch']} B, {u['vgpr_spills']} VGPR spills")
        if lds > lds_budget:
            problems.append(f"LDS {lds} > {lds_budget}")
        usage = (f"vgpr {u['vgpr']:3} agpr {u['agpr']:3} sgpr {u['sgpr']:3} "
                 f"scratch {u['scratch']:4} spills v{u['vgpr_spills']}/s{u['sgpr_spills']} lds {lds:6}")
        if isa is not None:
            found = sorted(set(m.group(0) for m in re.finditer(isa["hip"] + r"\w*", asm)))
            matrix = " " + (",".join(found) if found else "NO MFMA")
            if not found:
                problems.append("no MFMA instruction")
    else:
        u = _cuda_usage(compiled.asm["cubin"])
        usage = ("regs n/a (no cuobjdump)" if u is None else
                 f"regs {u.get('reg', 0):3} stack {u.get('stack', 0):4} local {u.get('local', 0):4}")
        usage += f" smem {compiled.metadata.shared:6}"
        if isa is not None:  # the GEMMs: spills and shared memory are checked too
            ptx = compiled.asm["ptx"]
            kinds = [k for k, pat in (("wgmma", r"wgmma\.mma_async"), ("mma.sync", r"mma\.sync"))
                     if re.search(pat, ptx)]
            matrix = " " + ("+".join(kinds) if kinds else "NO MMA")
            if not re.search(isa["cuda"], ptx):
                problems.append("no wgmma/mma of the operand type")
            if u is not None and (u.get("stack", 0) or u.get("local", 0)):
                problems.append("local memory / stack (spills)")
            if compiled.metadata.shared > lds_budget:
                problems.append(f"smem {compiled.metadata.shared} > {lds_budget}")
    print(f"{'FAIL' if problems else 'ok  '} {tname:6} {label}  {usage}{matrix}"
          + (f"  <- {', '.join(problems)}" if problems else ""))
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main())
