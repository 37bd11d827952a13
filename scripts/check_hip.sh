#!/usr/bin/env bash
# Compile-and-audit check of the AMD HIP kernels (every hip/**/*.hip) on a machine without any GPU.
#
#  1. Per arch of the ARCHS table, its clang compiles every source as HIP, -Werror: the device pass
#     to assembly, and for the targets the host pass too.
#  2. ISA audit of that assembly, per kernel: prints VGPRs, AGPRs, SGPRs, SGPRs spilled, scratch
#     bytes, LDS bytes (group_segment_fixed_size), occupancy (waves per SIMD), MFMA instructions,
#     the 128-bit row loads and how many of them are in flight at most (vmcnt simulated in program
#     order). Fails on
#       - scratch use or a VGPR spill;
#       - a call (device-library functions are not linked, see below);
#       - a flat (address-space-less) memory access;
#       - static LDS over the arch's budget per workgroup (ARCHS);
#       - AGPRs in a kernel without MFMA (v_mfma*, v_smfmac*): there they only hold spills. MFMA
#         kernels keep their accumulators in AGPRs, which is normal;
#       - the load-depth rule, for the kernel families that opt in (LOAD_DEPTH_RULES);
#       - a kernel of a REQUIRED_MFMA row without that row's MFMA instruction on that arch, and a
#         row that matches no kernel of its arch at all (the kernel was renamed or lost).
#     SGPR spills go to VGPR lanes (v_writelane, no memory traffic): reported, not fatal. Only the
#     targets' findings fail the check; the other archs' are printed for information.
#  3. nvcc compiles every source through the HIP-on-CUDA shim (hip/shim), -Werror, which is how
#     the kernels' logic is tested on NVIDIA GPUs.
#
# Flags: the build's (setup.py, torch's cpp_extension): C++20 (torch >= 2.13 compiles extensions
# as C++20), -O3, -I csrc/include, and the defines torch's ROCm / CUDA builds add (TORCH_*_DEFINES).
# For Debian's ROCm 5.2 headers:
#   -x hip --rocm-path=/usr   HIP runtime headers live in /usr/include/hip and the version file in
#                             /usr/share/hip; clang then adds -idirafter /usr/include and its own
#                             __clang_hip_runtime_wrapper.h.
#   -nogpulib                 Debian's device libraries (rocm-device-libs 5.2) predate gfx942, and
#                             without them clang stops with "cannot find ROCm device library".
#   --cuda-host-only -c / --cuda-device-only -S
#                             each pass on its own: a full -c would link the device code with lld.
#   -D__AMDGCN_WAVEFRONT_SIZE=64 (clang 22 only)
#                             clang 22 dropped this macro; the HIP 5.2 headers still use it.
#
# Needs (Debian bookworm, no GPU): apt-get install -y clang-19 clang-22 libamdhip64-dev, plus a
# CUDA 13 toolkit ($CUDA_HOME or NVCC=...). No lld (no device code is linked here) and no
# rocm-device-libs (the kernels call no ocml/ockl function; step 2 fails if one does). A missing
# tool skips its steps, said loudly; with MYMETAOPS_REQUIRE_HIP_CHECK=1 (CI) it fails the check.
#
# Usage: scripts/check_hip.sh  (from the repository root; CLANG19, CLANG22, NVCC override the
# tools, MAX_JOBS the number of compiles at once).
set -euo pipefail

CLANG19=${CLANG19:-clang++-19}
CLANG22=${CLANG22:-clang++-22}
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
REQUIRE=${MYMETAOPS_REQUIRE_HIP_CHECK:-0}
JOBS=${MAX_JOBS:-$(nproc)}

# The offload archs: the compiler that knows the arch, the LDS one workgroup may allocate (bytes),
# and whether it is a target (its findings fail the check) or a second opinion (info).
#   arch    compiler   LDS     role
ARCHS=(
  "gfx942 $CLANG19   65536  target"  # MI300X/MI325X: 64 KB LDS
  "gfx950 $CLANG22   163840 target"  # MI350X/MI355X: 160 KB LDS; needs clang >= 20
  "gfx90a $CLANG19   65536  info"    # MI200: same wave64 CDNA family, not a target
)

# The load-depth rule, opt-in per kernel family. A kernel whose demangled unqualified name matches
# NAME (an ERE) has its kVecBytes and kUnroll as template arguments number VEC and UNROLL (from 1);
# when kVecBytes == 16 it must load rows with global_load_dwordx4 and keep kUnroll of them in
# flight at once (the point of the unrolled gather). A matching kernel whose two arguments are not
# integers fails: its family's signature changed, update the rule. Kernels no rule matches are not
# read (their integer template arguments mean other things).
#   NAME                                                            VEC  UNROLL
LOAD_DEPTH_RULES=(
  # embedding_bag_{forward,backward,per_sample_weights_backward}_kernel<T, I, kVecBytes, kUnroll>
  "embedding_bag_(forward|backward|per_sample_weights_backward)_kernel   3    4"
)

# The MFMA a kernel family must contain, per arch: a kernel whose demangled name matches KERNEL
# (an ERE) in ARCH's device pass must have an instruction whose mnemonic matches INSTRUCTION (an
# ERE, whole mnemonic), and every row must match at least one kernel of its arch (all sources
# together). For the FP8 GEMM the instruction is also the proof that the pass compiled the arch's
# FP8 format: gfx942's fp8 MFMA reads e4m3fnuz, gfx950's f8f6f4 (cbsz = blgp = 0) OCP e4m3fn.
# A kernel of the other arch (its Tile says which) is a trap in this pass and matches no row.
#   ARCH    KERNEL                                  INSTRUCTION
REQUIRED_MFMA=(
  # hip/gemm/fp8_gemm.hip: fp8_gemm_kernel<Gfx942Fp8Tile<BM, BN, WM, WN>, Out, kPartial>
  "gfx942   fp8_gemm_kernel<.*Gfx942Fp8Tile<     v_mfma_f32_32x32x16_fp8_fp8"
  "gfx950   fp8_gemm_kernel<.*Gfx950Fp8Tile<     v_mfma_(scale_)?f32_32x32x64_f8f6f4"
  # hip/jagged_bmm.hip: jagged_bmm_kernel<T, I, form, B's major>, the 16-bit MFMA of its dtype
  "gfx942   jagged_bmm_kernel<[^,]*BFloat16,        v_mfma_f32_32x32x8_bf16"
  "gfx950   jagged_bmm_kernel<[^,]*BFloat16,        v_mfma_f32_32x32x8_bf16"
  "gfx942   jagged_bmm_kernel<[^,]*Half,            v_mfma_f32_32x32x8_f16"
  "gfx950   jagged_bmm_kernel<[^,]*Half,            v_mfma_f32_32x32x8_f16"
  # hip/attention/attention_fwd.hip: attention_fwd_kernel<Tile, T, I, causal>, both products on
  # the 16-bit MFMA of its dtype
  "gfx942   attention_fwd_kernel<.*BFloat16,       v_mfma_f32_32x32x8_bf16"
  "gfx950   attention_fwd_kernel<.*BFloat16,       v_mfma_f32_32x32x8_bf16"
  "gfx942   attention_fwd_kernel<.*Half,           v_mfma_f32_32x32x8_f16"
  "gfx950   attention_fwd_kernel<.*Half,           v_mfma_f32_32x32x8_f16"
)

WARNINGS=(-Wall -Wextra -Werror)
# Warnings accepted despite -Werror, each with its reason: none so far.
ACCEPTED_WARNINGS=()
# torch/utils/cpp_extension.py: COMMON_HIP_FLAGS + COMMON_HIPCC_FLAGS (ROCm build), and
# COMMON_NVCC_FLAGS (the CUDA build, which MYMETAOPS_HIP_ON_CUDA=1 puts hip/ through).
TORCH_HIP_DEFINES=(-D__HIP_PLATFORM_AMD__=1 -DUSE_ROCM=1 -DHIPBLAS_V2 -DCUDA_HAS_FP16=1
                   -D__HIP_NO_HALF_OPERATORS__=1 -D__HIP_NO_HALF_CONVERSIONS__=1
                   -DHIP_ENABLE_WARP_SYNC_BUILTINS=1)
TORCH_NVCC_DEFINES=(-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
                    -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__
                    --expt-relaxed-constexpr)

HIP_FLAGS=(-x hip --rocm-path=/usr -nogpulib -std=c++20 -O3 -I csrc/include
           "${TORCH_HIP_DEFINES[@]}" "${WARNINGS[@]}" "${ACCEPTED_WARNINGS[@]}")
NVCC_FLAGS=(-x cu -std=c++20 -O3 -I hip/shim -I csrc/include "${TORCH_NVCC_DEFINES[@]}"
            -gencode=arch=compute_90,code=sm_90
            -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror)

shopt -s globstar nullglob
sources=(hip/**/*.hip)  # hip/shim holds headers only
if [ ${#sources[@]} -eq 0 ]; then
  echo "check_hip: no hip/**/*.hip (run from the repo root)" >&2
  exit 1
fi

# Missing tools: their steps are skipped (locally) or the check fails (CI).
skipped=()
missing() {
  if [ "$REQUIRE" = 1 ]; then
    echo "check_hip: FAILED: $1 (MYMETAOPS_REQUIRE_HIP_CHECK=1)" >&2
    exit 1
  fi
  echo "check_hip: SKIPPING $2: $1" >&2
  skipped+=("$2")
}
have_hip_headers=1
if [ ! -f /usr/include/hip/hip_runtime.h ]; then
  have_hip_headers=0
  missing "no HIP headers (apt-get install -y libamdhip64-dev)" "the clang passes"
fi
archs=()  # the rows of ARCHS whose compiler is there
for row in "${ARCHS[@]}"; do
  read -r arch compiler _ _ <<<"$row"
  [ "$have_hip_headers" = 1 ] || continue
  if command -v "$compiler" >/dev/null; then
    archs+=("$row")
  else
    missing "$compiler not found (apt-get install -y ${compiler/clang++/clang})" "$arch"
  fi
done
have_nvcc=1
if ! command -v "$NVCC" >/dev/null; then
  have_nvcc=0
  missing "$NVCC not found (set CUDA_HOME or NVCC)" "the nvcc shim compile"
fi

# ISA audit of one arch's device assembly ($4), its functions' names demangled in $5
# ("mangled<TAB>demangled" lines): prints the table, the findings on stderr, writes to $6 how
# many kernels each REQUIRED_MFMA row of this arch matched ("row count" lines), and exits 1 on a
# target's finding.
audit() {
  local arch=$1 lds_budget=$2 target=$3 asm=$4 names=$5 matched=$6 rules required
  rules=$(printf '%s\n' "${LOAD_DEPTH_RULES[@]}")
  required=$(printf '%s\n' "${REQUIRED_MFMA[@]}")
  awk -v arch="$arch" -v target="$target" -v lds_budget="$lds_budget" -v rules="$rules" \
      -v required="$required" -v matched_file="$matched" '
    BEGIN {
      nrules = split(rules, rule_lines, "\n")
      nrequired = split(required, required_lines, "\n")
    }
    FNR == NR { split($0, f, "\t"); demangled[f[1]] = f[2]; next }  # the names file
    function vmem_op(kind) {
      queue[tail++] = kind
      if (kind == "x4") { x4_queued++; if (x4_queued > x4_inflight[k]) x4_inflight[k] = x4_queued }
    }
    # The template arguments of the kernel name d matching the ERE name, into args[]; their count.
    function template_args(d, name,    i, c, depth, arg, n) {
      if (!match(d, "(^|[ :])" name "<")) return 0
      for (i = RSTART + RLENGTH; i <= length(d); i++) {
        c = substr(d, i, 1)
        if (depth == 0 && (c == "," || c == ">")) {
          gsub(/^ +| +$/, "", arg); args[++n] = arg; arg = ""
          if (c == ">") return n
          continue
        }
        if (c == "<" || c == "(") depth++
        if (c == ">" || c == ")") depth--
        arg = arg c
      }
      return 0
    }
    /^\t\.type\t.*,@function$/ {
      k = $2; sub(/,@function$/, "", k); kernels[++n] = k
      head = tail = x4_queued = 0; x4_inflight[k] = x4[k] = flat[k] = calls[k] = mfma[k] = 0
      mnemonics[k] = ""
      next
    }
    # vmcnt counts the vector-memory ops in issue order: vmcnt(N) leaves the last N in flight.
    /^\t(global|buffer|flat|scratch)_(load|store|atomic)/ {
      vmem_op($1 == "global_load_dwordx4" || $1 == "buffer_load_dwordx4" ? "x4" : "other")
    }
    /^\tflat_/ { flat[k]++ }
    /^\t(global|buffer)_load_dwordx4/ { x4[k]++ }
    /^\tv_(mfma|smfmac)/ { mfma[k]++; if (index(mnemonics[k], " " $1 " ") == 0) mnemonics[k] = mnemonics[k] " " $1 " " }
    /^\ts_(swappc|call)_b64/ { calls[k]++ }
    /^\ts_waitcnt.*vmcnt\(/ {
      match($0, /vmcnt\([0-9]+\)/); left = substr($0, RSTART + 6, RLENGTH - 7) + 0
      while (tail - head > left) { if (queue[head++] == "x4") x4_queued-- }
    }
    # A kernel that calls an unknown function gets expressions, not numbers, from clang 22.
    function num(x) { return x ~ /^[0-9]+$/ ? x : "?" }
    /^; NumVgprs: /              { vgpr[k] = num($3) }
    /^; NumAgprs: /              { agpr[k] = num($3) }
    /^; (Total)?NumSgprs: /      { sgpr[k] = num($3) }  # clang 22 says TotalNumSgprs
    /^; ScratchSize: /           { scratch[k] = num($3) }
    /^; Occupancy: /             { occupancy[k] = num($3) }
    /^\t\.amdhsa_kernel /        { kd = $2 }
    /^\t\t\.amdhsa_group_segment_fixed_size / { lds[kd] = $2 }
    /^ +\.name: /                { meta = $2 }
    /^ +\.sgpr_spill_count: /    { sspill[meta] = $2 }
    /^ +\.vgpr_spill_count: /    { vspill[meta] = $2 }
    function fail(why) { problems[++bad] = arch " " k ": " why }
    function load_depth(d,    r, f, nargs, vec, unroll) {
      for (r = 1; r <= nrules; r++) {
        split(rule_lines[r], f, " ")
        if (f[1] == "" || !(nargs = template_args(d, f[1]))) continue
        vec = args[f[2]]; unroll = args[f[3]]
        if (vec !~ /^[0-9]+$/ || unroll !~ /^[0-9]+$/) {
          fail("template arguments " f[2] " and " f[3] " are not integers: update its " \
               "LOAD_DEPTH_RULES entry")
        } else if (vec == 16 && x4[k] == 0) {
          fail("16-byte config without global_load_dwordx4")
        } else if (vec == 16 && x4_inflight[k] < unroll + 0) {
          fail("only " x4_inflight[k] " of " unroll " unrolled row loads in flight")
        }
        return
      }
    }
    # The REQUIRED_MFMA rows of this arch that the kernel (demangled d) matches need their MFMA.
    function required_mfma(d,    r, f, n, i, ops, found) {
      for (r = 1; r <= nrequired; r++) {
        split(required_lines[r], f, " ")
        if (f[1] != arch || d !~ f[2]) continue
        row_matches[r]++
        n = split(mnemonics[k], ops, " "); found = 0
        for (i = 1; i <= n; i++) if (ops[i] ~ ("^(" f[3] ")$")) found = 1
        if (!found) fail("has no " f[3] " (REQUIRED_MFMA; its MFMA:" (n ? mnemonics[k] : " none") ")")
      }
    }
    END {
      printf "%-7s %5s %5s %5s %6s %7s %6s %4s %5s %5s %8s  %s\n", "arch", "VGPR", "AGPR",
             "SGPR", "sspill", "scratch", "LDS", "occ", "mfma", "x4ld", "x4flight", "kernel"
      for (i = 1; i <= n; i++) {
        k = kernels[i]
        printf "%-7s %5s %5s %5s %6s %7s %6d %4s %5d %5d %8d  %s\n", arch, vgpr[k], agpr[k],
               sgpr[k], sspill[k], scratch[k], lds[k], occupancy[k], mfma[k], x4[k],
               x4_inflight[k], k
        if (scratch[k] + 0 > 0) fail("uses " scratch[k] " bytes of scratch")
        if (vspill[k] + 0 > 0) fail("spills " vspill[k] " VGPRs")
        if (lds[k] + 0 > lds_budget + 0)
          fail("uses " lds[k] " bytes of LDS, over the " lds_budget " of a " arch " workgroup")
        if (agpr[k] + 0 > 0 && mfma[k] == 0) fail("uses AGPRs without MFMA (spill space)")
        if (calls[k] > 0) fail("calls a function (device libraries are not linked)")
        if (flat[k] > 0) fail("has flat memory accesses (a pointer lost its global address space)")
        load_depth(demangled[k])
        required_mfma(demangled[k])
      }
      for (r = 1; r <= nrequired; r++) {
        split(required_lines[r], f, " ")
        if (f[1] == arch) print r, row_matches[r] + 0 > matched_file
      }
      close(matched_file)
      for (i = 1; i <= bad; i++)
        print (target ? "AUDIT FAIL: " : "AUDIT NOTE (not a target): ") problems[i] > "/dev/stderr"
      exit (target && bad > 0)
    }' "$names" "$asm"
}

# Demangled, without the namespace and the kernel parameter list.
readable() {
  c++filt | sed -e 's/mymetaops::(anonymous namespace):://g' -e 's/mymetaops::[a-z0-9_]*_detail:://g' \
    -e 's/void //' -e 's/>([^)]*)/>/'
}

# One arch's device pass of one source, then its audit (table in .table, findings in .findings).
# These run where set -e does not apply (in an && list): each step returns on failure itself.
device_pass() {
  local src=$1 out=$2 arch=$3 compiler=$4 lds=$5 role=$6 extra=()
  [ "$compiler" != "$CLANG22" ] || extra=(-D__AMDGCN_WAVEFRONT_SIZE=64)
  "$compiler" "${HIP_FLAGS[@]}" "${extra[@]}" --offload-arch="$arch" --cuda-device-only -S \
    "$src" -o "$out.s" || return
  sed -n 's/^\t\.type\t\(.*\),@function$/\1/p' "$out.s" >"$out.mangled" || return
  c++filt <"$out.mangled" | paste "$out.mangled" - >"$out.names" || return
  : >"$out.required" || return
  audit "$arch" "$lds" "$([ "$role" = target ] && echo 1 || echo 0)" "$out.s" "$out.names" \
    "$out.required" >"$out.table" 2>"$out.findings"
}

host_pass() {
  local src=$1 out=$2 arch=$3 compiler=$4 extra=()
  [ "$compiler" != "$CLANG22" ] || extra=(-D__AMDGCN_WAVEFRONT_SIZE=64)
  "$compiler" "${HIP_FLAGS[@]}" "${extra[@]}" --offload-arch="$arch" --cuda-host-only -c "$src" \
    -o "$out.o"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Every step in the background, MAX_JOBS at once: its output in $work/<step>.log, its exit status
# in $work/<step>.rc. The report is printed afterwards, in order.
steps=() headings=()
launch() {  # launch STEP HEADING COMMAND...
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  steps+=("$1") headings+=("$2")
  { "${@:3}" >"$work/$1.log" 2>&1 && echo 0 >"$work/$1.rc" || echo 1 >"$work/$1.rc"; } &
}
for src in "${sources[@]}"; do
  id=${src//\//_}
  for row in "${archs[@]}"; do
    read -r arch compiler lds role <<<"$row"
    if [ "$role" = target ]; then
      launch "$id.host.$arch" "$src: host pass, $arch ($compiler)" \
        host_pass "$src" "$work/$id.host.$arch" "$arch" "$compiler"
    fi
    launch "$id.$arch" "$src: device pass and ISA audit, $arch ($compiler, LDS budget $lds)" \
      device_pass "$src" "$work/$id.$arch" "$arch" "$compiler" "$lds" "$role"
  done
  if [ "$have_nvcc" = 1 ]; then
    launch "$id.cuda" "$src: nvcc through hip/shim" \
      "$NVCC" "${NVCC_FLAGS[@]}" -c "$src" -o "$work/$id.cuda.o"
  fi
done
wait

status=0
declare -A kernels        # per arch
declare -A required_hits  # per "arch row": kernels that REQUIRED_MFMA row matched
for i in "${!steps[@]}"; do
  step=${steps[$i]}
  echo "== ${headings[$i]}"
  cat "$work/$step.log" >&2
  if [ -f "$work/$step.table" ]; then
    readable <"$work/$step.table"
    readable <"$work/$step.findings" >&2
    arch=${step##*.}
    kernels[$arch]=$(( ${kernels[$arch]:-0} + $(wc -l <"$work/$step.table") - 1 ))
    while read -r row count; do
      required_hits["$arch $row"]=$(( ${required_hits["$arch $row"]:-0} + count ))
    done <"$work/$step.required"
  fi
  if [ "$(cat "$work/$step.rc")" != 0 ]; then
    echo "check_hip: FAILED: ${headings[$i]}" >&2
    status=1
  fi
done

# Every REQUIRED_MFMA row of a checked target arch must have matched a kernel.
for row in "${archs[@]}"; do
  read -r arch _ _ role <<<"$row"
  [ "$role" = target ] || continue
  for i in "${!REQUIRED_MFMA[@]}"; do
    read -r rarch rname rinstr <<<"${REQUIRED_MFMA[$i]}"
    [ "$rarch" = "$arch" ] || continue
    hits=${required_hits["$arch $((i + 1))"]:-0}
    if [ "$hits" -eq 0 ]; then
      echo "AUDIT FAIL: $arch: no kernel matches REQUIRED_MFMA $rname ($rinstr)" >&2
      status=1
    else
      echo "== REQUIRED_MFMA $arch: $hits kernels match $rname, each needs $rinstr (checked above)"
    fi
  done
done

summary="${#sources[@]} sources;"
for row in "${archs[@]}"; do
  read -r arch _ _ role <<<"$row"
  summary+=" $arch ($role): ${kernels[$arch]:-0} kernels;"
done
[ "$have_nvcc" = 1 ] && summary+=" nvcc shim: ok;"
[ ${#skipped[@]} -gt 0 ] && summary+=" SKIPPED: $(IFS=,; echo "${skipped[*]}")"
if [ "$status" -ne 0 ]; then
  echo "check_hip: FAILED ($summary)" >&2
  exit 1
fi
echo "check_hip: OK ($summary)"
