#!/usr/bin/env python
"""Cross-compile the Triton embedding_bag kernels for MI300 (gfx942), MI355 (gfx950) and H100/H200
(sm_90) without a GPU, and fail if one does not compile, or if an AMD kernel spills (scratch) or
needs more LDS than the chip has.

Prints one line per kernel/config/target: registers, spills/scratch and shared memory (LDS).
CUDA registers, stack frame (spills land there) and local memory come from `cuobjdump -res-usage`
on the cubin (Triton's bundled copy); they are reported, not checked.

Uses ASTSource(fn, signature with constexprs typed "constexpr", constexprs by name, attrs keyed by
argument index): checked on Triton 3.6 and 3.8.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package: importing it builds nothing
from mymetaops.triton import embedding_bag as kernels  # noqa: E402

TARGETS = {  # name: (target, LDS budget in bytes or None)
    "gfx942": (GPUTarget("hip", "gfx942", 64), 64 * 1024),
    "gfx950": (GPUTarget("hip", "gfx950", 64), 160 * 1024),
    "sm90": (GPUTarget("cuda", 90, 32), None),
}
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


def main() -> int:
    failures = 0
    print(f"triton {triton.__version__}")
    for label, src, num_warps in _cases():
        for tname, (target, lds_budget) in TARGETS.items():
            try:
                compiled = triton.compile(src, target=target, options={"num_warps": num_warps})
            except Exception as e:  # noqa: BLE001 - any compiler error is a failed check
                failures += 1
                print(f"FAIL {tname:6} {label}: compile error: {str(e).splitlines()[0] if str(e) else type(e)}")
                continue
            problems = []
            if target.backend == "hip":
                u = _amd_usage(compiled.asm["amdgcn"])
                # Triton allocates its shared memory dynamically: only metadata.shared counts it.
                lds = u["lds"] + compiled.metadata.shared
                # SGPR spills go to VGPR lanes (no memory): reported, not failed.
                if u["scratch"] or u["vgpr_spills"]:
                    problems.append(f"scratch {u['scratch']} B, {u['vgpr_spills']} VGPR spills")
                if lds > lds_budget:
                    problems.append(f"LDS {lds} > {lds_budget}")
                usage = (f"vgpr {u['vgpr']:3} agpr {u['agpr']:3} sgpr {u['sgpr']:3} "
                         f"scratch {u['scratch']:4} spills v{u['vgpr_spills']}/s{u['sgpr_spills']} lds {lds:6}")
            else:
                u = _cuda_usage(compiled.asm["cubin"])
                usage = ("regs n/a (no cuobjdump)" if u is None else
                         f"regs {u.get('reg', 0):3} stack {u.get('stack', 0):4} local {u.get('local', 0):4}")
                usage += f" smem {compiled.metadata.shared:6}"
            failures += bool(problems)
            print(f"{'FAIL' if problems else 'ok  '} {tname:6} {label}  {usage}"
                  + (f"  <- {', '.join(problems)}" if problems else ""))
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
