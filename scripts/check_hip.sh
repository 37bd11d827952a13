#!/usr/bin/env bash
# Compile-and-audit check of the AMD HIP kernels (hip/*.hip) on a machine without any GPU.
#
#  1. clang-19 compiles every hip/*.hip as HIP, -Werror: the host pass, and the device pass of each
#     offload arch to assembly.
#  2. ISA audit of that assembly, per kernel: prints VGPRs (and AGPRs), SGPRs, SGPRs spilled,
#     scratch bytes, occupancy (waves per SIMD), the 128-bit row loads and how many of them are in
#     flight at most (vmcnt simulated in program order). Fails on any scratch use or VGPR spill, any
#     call (device-library functions are not linked, see below), any flat (address-space-less)
#     memory access or AGPR use (these kernels have no MFMA, so AGPRs only hold spills), and when
#     a kernel whose template arguments end in <..., kVecBytes, kUnroll> has kVecBytes == 16 but
#     does not load rows with global_load_dwordx4, kUnroll of them in flight. SGPR spills go to
#     VGPR lanes (v_writelane, no memory traffic): reported, not fatal. Only the targets
#     (TARGET_ARCHS) fail the check; other archs are audited for information.
#  3. nvcc compiles every hip/*.hip through the HIP-on-CUDA shim (hip/shim), -Werror, which is how
#     the kernels' logic is tested on NVIDIA GPUs.
#
# CI (Debian bookworm, no GPU): apt-get install -y clang-19 libamdhip64-dev, plus a CUDA 13 toolkit
# at /usr/local/cuda (or NVCC=...). Nothing else: no lld (no device code is linked here) and no
# rocm-device-libs (the kernels call no ocml/ockl function; step 2 fails if one does).
#
# Flags for Debian's ROCm 5.2 headers with clang-19:
#   -x hip --rocm-path=/usr   HIP runtime headers live in /usr/include/hip and the version file in
#                             /usr/share/hip; clang then adds -idirafter /usr/include and its own
#                             __clang_hip_runtime_wrapper.h.
#   -nogpulib                 Debian's device libraries (rocm-device-libs 5.2) predate gfx942, and
#                             without them clang stops with "cannot find ROCm device library".
#   --cuda-host-only -c / --cuda-device-only -S
#                             each pass on its own: a full -c would link the device code with lld.
#
# Usage: scripts/check_hip.sh  (from the repository root; CLANG, NVCC and HIP_ARCHS override)
set -euo pipefail

CLANG=${CLANG:-clang++-19}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
# gfx942 (MI300X/MI325X) and gfx950 (MI350X/MI355X) are the targets; gfx950 needs clang >= 20 and
# is added when the compiler knows it. gfx90a (MI200, same wave64 CDNA family, not a target) must
# compile; its audit is a second opinion only.
HIP_ARCHS=${HIP_ARCHS:-"gfx942 gfx90a"}
TARGET_ARCHS="gfx942 gfx950"

WARNINGS=(-Wall -Wextra -Werror)
# Warnings accepted despite -Werror, each with its reason: none so far.
ACCEPTED_WARNINGS=()

HIP_FLAGS=(-x hip --rocm-path=/usr -nogpulib -std=c++17 -O3 -I csrc/include
           "${WARNINGS[@]}" "${ACCEPTED_WARNINGS[@]}")
NVCC_FLAGS=(-x cu -I hip/shim -I csrc/include -gencode=arch=compute_90,code=sm_90 -std=c++17
            -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if echo '__global__ void probe() {}' |
    "$CLANG" -x hip --rocm-path=/usr -nogpulib --offload-arch=gfx950 --cuda-device-only -S \
      -o /dev/null - 2>/dev/null; then
  HIP_ARCHS="$HIP_ARCHS gfx950"
fi

# ISA audit of one device assembly file: prints the table, exits 1 on a violation.
audit() {
  local target=0
  case " $TARGET_ARCHS " in *" $1 "*) target=1 ;; esac
  awk -v arch="$1" -v target="$target" '
    function vmem_op(kind) {
      queue[tail++] = kind
      if (kind == "x4") { x4_queued++; if (x4_queued > x4_inflight[k]) x4_inflight[k] = x4_queued }
    }
    /^\t\.type\t.*,@function$/ {
      k = $2; sub(/,@function$/, "", k); kernels[++n] = k
      head = tail = x4_queued = 0; x4_inflight[k] = x4[k] = flat[k] = calls[k] = 0
      next
    }
    # vmcnt counts the vector-memory ops in issue order: vmcnt(N) leaves the last N in flight.
    /^\t(global|buffer|flat|scratch)_(load|store|atomic)/ {
      vmem_op($1 == "global_load_dwordx4" || $1 == "buffer_load_dwordx4" ? "x4" : "other")
    }
    /^\tflat_/ { flat[k]++ }
    /^\t(global|buffer)_load_dwordx4/ { x4[k]++ }
    /^\ts_(swappc|call)_b64/ { calls[k]++ }
    /^\ts_waitcnt.*vmcnt\(/ {
      match($0, /vmcnt\([0-9]+\)/); left = substr($0, RSTART + 6, RLENGTH - 7) + 0
      while (tail - head > left) { if (queue[head++] == "x4") x4_queued-- }
    }
    /^; NumVgprs: /     { vgpr[k] = $3 }
    /^; NumAgprs: /     { agpr[k] = $3 }
    /^; NumSgprs: /     { sgpr[k] = $3 }
    /^; ScratchSize: /  { scratch[k] = $3 }
    /^; Occupancy: /    { occupancy[k] = $3 }
    /^ +\.name: /              { meta = $2 }
    /^ +\.sgpr_spill_count: /  { sspill[meta] = $2 }
    /^ +\.vgpr_spill_count: /  { vspill[meta] = $2 }
    function fail(why) { problems[++bad] = arch " " k ": " why }
    END {
      printf "%-7s %5s %5s %5s %6s %7s %4s %6s %9s  %s\n", "arch", "VGPR", "AGPR", "SGPR",
             "sspill", "scratch", "occ", "x4ld", "x4flight", "kernel"
      for (i = 1; i <= n; i++) {
        k = kernels[i]
        printf "%-7s %5s %5s %5s %6s %7s %4s %6d %9d  %s\n", arch, vgpr[k], agpr[k], sgpr[k],
               sspill[k], scratch[k], occupancy[k], x4[k], x4_inflight[k], k
        if (scratch[k] + 0 > 0) fail("uses " scratch[k] " bytes of scratch")
        if (vspill[k] + 0 > 0) fail("spills " vspill[k] " VGPRs")
        if (agpr[k] + 0 > 0) fail("uses AGPRs (spill space: there is no MFMA)")
        if (calls[k] > 0) fail("calls a function (device libraries are not linked)")
        if (flat[k] > 0) fail("has flat memory accesses (a pointer lost its global address space)")
        if (match(k, /Li[0-9]+ELi[0-9]+EE/)) {
          split(substr(k, RSTART + 2, RLENGTH - 4), knobs, "ELi")
          if (knobs[1] == 16 && x4[k] == 0) fail("16-byte config without global_load_dwordx4")
          if (knobs[1] == 16 && x4_inflight[k] < knobs[2])
            fail("only " x4_inflight[k] " of " knobs[2] " unrolled row loads in flight")
        }
      }
      for (i = 1; i <= bad; i++)
        print (target ? "AUDIT FAIL: " : "AUDIT NOTE (not a target): ") problems[i] > "/dev/stderr"
      exit (target && bad > 0)
    }' "$2"
}

# Demangled, without the namespace and the kernel parameter list.
readable() {
  c++filt | sed -e 's/mymetaops::(anonymous namespace):://g' -e 's/void //' -e 's/>([^)]*)/>/'
}

status=0
for src in hip/*.hip; do
  base=$(basename "$src" .hip)
  echo "== $src: clang host pass"
  "$CLANG" "${HIP_FLAGS[@]}" --offload-arch=gfx942 --cuda-host-only -c "$src" \
    -o "$work/$base.host.o"
  for arch in $HIP_ARCHS; do
    echo "== $src: clang device pass, $arch"
    "$CLANG" "${HIP_FLAGS[@]}" --offload-arch="$arch" --cuda-device-only -S "$src" \
      -o "$work/$base.$arch.s"
    if ! audit "$arch" "$work/$base.$arch.s" > "$work/$base.$arch.table" \
        2> "$work/$base.$arch.findings"; then
      status=1
    fi
    readable < "$work/$base.$arch.table"
    readable < "$work/$base.$arch.findings" >&2
  done
  echo "== $src: nvcc through hip/shim"
  "$NVCC" "${NVCC_FLAGS[@]}" -c "$src" -o "$work/$base.cuda.o"
done

if [ "$status" -ne 0 ]; then
  echo "check_hip: ISA audit failed (see AUDIT FAIL lines)" >&2
  exit 1
fi
echo "check_hip: OK ($HIP_ARCHS, nvcc shim)"
