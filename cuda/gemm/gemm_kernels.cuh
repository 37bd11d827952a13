// CUTLASS 3.x Hopper (sm_90a) GEMM templates behind the instances of gemm_configs.cuh: TMA loads,
// warp-specialized wgmma mainloops, and an epilogue visitor tree (EVT) that applies scales and bias
// to the fp32 accumulators and stores the tile with TMA. Included by the instance files only.
//
// Build note: compile with -DNDEBUG. Without it CUTLASS's device-side assert()s become calls to
// __assertfail, an extern function; ptxas then serializes every wgmma of the kernel around the call
// (warning C7510), which cost a 128x128x128 FP8 kernel ~10% at 8192^3.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/numeric_types.h>

#include "gemm_configs.cuh"

namespace mymetaops {
namespace cuda {
namespace gemm {
namespace detail {

using cute::_0;
using cute::_1;
using cute::Int;
using cute::Shape;
using cute::Stride;
namespace fusion = cutlass::epilogue::fusion;

// Persistent tile order: a wave walks the output in strips up to 8 tiles wide, so the A and B tiles
// it reads fit in L2 (CUTLASS narrows the strip when the grid of tiles is small).
inline constexpr int kMaxSwizzle = 8;

using Problem = Shape<int, int, int, int>;  // M, N, K, batch
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;

template <const TileConfig& kTile>
struct Shapes {
  using Tile = Shape<Int<kTile.m>, Int<kTile.n>, Int<kTile.k>>;
  using Cluster = Shape<Int<kTile.cluster_m>, Int<kTile.cluster_n>, _1>;
  static constexpr bool kCooperative = kTile.mainloop != Mainloop::kPingpong;
  static constexpr bool kStreamK = kTile.mainloop == Mainloop::kCooperativeStreamK;
  using EpilogueSchedule = std::conditional_t<kCooperative,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;
  // FP8 fast accumulation: wgmma accumulates in its own fp32 registers without the periodic
  // promotion into a second accumulator (what cuBLAS and torch._scaled_mm do too).
  using Fp8MainloopSchedule =
      std::conditional_t<kCooperative,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>;
  using MainloopSchedule = std::conditional_t<kCooperative,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                              cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Scheduler = std::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler,
                                       cutlass::gemm::PersistentScheduler>;
};

// The kernel around a mainloop and an epilogue: the largest pipeline the smem left by the
// epilogue holds.
template <const TileConfig& kTile, class Element, class LayoutB, class MainloopSchedule, class Epilogue>
struct Assemble {
  using S = Shapes<kTile>;
  static constexpr int kAlign = 16 / static_cast<int>(sizeof(Element));  // 16-byte TMA rows
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, RowMajor, kAlign, Element,
      LayoutB, kAlign, float, typename S::Tile, typename S::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue, typename S::Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr int32_t kStages = Mainloop::DispatchPolicy::Stages;
  static constexpr int32_t kWarps = Kernel::MaxThreadsPerBlock / 32;
};

template <const TileConfig& kTile, class Fusion, class LayoutD = RowMajor>
using BuildEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Shapes<kTile>::Tile,
    typename Shapes<kTile>::Cluster, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, LayoutD, 8,                   // no C operand
    cutlass::bfloat16_t, LayoutD, 8,    // D: bf16, 16-byte aligned runs for the TMA store
    typename Shapes<kTile>::EpilogueSchedule, Fusion>::CollectiveOp;

constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// FP8: D = bf16(w_scale[n] * (x_scale[m] * acc) + bias[n]). The scale broadcasts take their
// stride as a run-time bool: true walks the [M] / [N] vector (rowwise), false repeats element 0
// (tensorwise), so one instance serves both. A null bias reads as 0. Swapped (kTile.swap_ab), the
// kernel's rows are out's columns: x_scale broadcasts along its rows, w_scale and bias along its
// columns, and D = out^T is stored column-major.
template <class Tile, bool kPerRow, class Element>
using Broadcast = std::conditional_t<
    kPerRow, fusion::Sm90ColBroadcast<0, Tile, Element, float, Stride<bool, _0, _0>>,
    fusion::Sm90RowBroadcast<0, Tile, Element, float, Stride<_0, bool, _0>>>;
template <class Tile, bool kPerRow>
using BiasBroadcast = std::conditional_t<
    kPerRow, fusion::Sm90ColBroadcast<0, Tile, cutlass::bfloat16_t, float, Stride<_1, _0, _0>>,
    fusion::Sm90RowBroadcast<0, Tile, cutlass::bfloat16_t, float, Stride<_0, _1, _0>>>;

template <const TileConfig& kTile>
struct Fp8Kernel {
  using Tile = typename Shapes<kTile>::Tile;
  static constexpr bool kSwap = kTile.swap_ab;
  using XScale = Broadcast<Tile, !kSwap, float>;  // one per row of out
  using WScale = Broadcast<Tile, kSwap, float>;   // one per column of out
  using Bias = BiasBroadcast<Tile, kSwap>;
  using XScaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
                                  XScale, fusion::Sm90AccFetch>;
  using Fusion = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::homogeneous_multiply_add, cutlass::bfloat16_t, float, kRound>,
      WScale, XScaled, Bias>;
  using Parts = Assemble<kTile, cutlass::float_e4m3_t, ColumnMajor,
                         typename Shapes<kTile>::Fp8MainloopSchedule,
                         BuildEpilogue<kTile, Fusion, std::conditional_t<kSwap, ColumnMajor, RowMajor>>>;
  using Gemm = typename Parts::Gemm;
};

// bf16: D = bf16(acc + bias[n]); B is w[N, K] (column-major K x N) or, kWKn, w[K, N].
template <const TileConfig& kTile, bool kWKn>
struct Bf16Kernel {
  using Tile = typename Shapes<kTile>::Tile;
  using Bias = fusion::Sm90RowBroadcast<0, Tile, cutlass::bfloat16_t, float, Stride<_0, _1, _0>>;
  using Fusion =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, cutlass::bfloat16_t, float, kRound>,
                      fusion::Sm90AccFetch, Bias>;
  using Parts = Assemble<kTile, cutlass::bfloat16_t, std::conditional_t<kWKn, RowMajor, ColumnMajor>,
                         typename Shapes<kTile>::MainloopSchedule, BuildEpilogue<kTile, Fusion>>;
  using Gemm = typename Parts::Gemm;
};

template <class Gemm>
void set_schedule(typename Gemm::Arguments& a, const RunOptions& run) {
  a.hw_info.device_id = run.device;
  a.hw_info.sm_count = run.sm_count;
  a.scheduler.max_swizzle_size = kMaxSwizzle;
  if constexpr (std::is_same_v<typename Gemm::GemmKernel::TileSchedulerTag,
                               cutlass::gemm::StreamKScheduler>) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    switch (run.decomposition) {
      case Decomposition::kDataParallel:
        a.scheduler.decomposition_mode = Mode::DataParallel;
        break;
      case Decomposition::kSplitK:
        a.scheduler.decomposition_mode = Mode::SplitK;
        a.scheduler.splits = run.split_k;
        break;
      case Decomposition::kStreamK:
        a.scheduler.decomposition_mode = Mode::StreamK;
        break;
    }
  }
}

// The stride of a scale broadcast: along the kernel's rows (kPerRow) or its columns.
template <bool kPerRow>
auto broadcast_stride(bool rowwise) {
  if constexpr (kPerRow) {
    return cute::make_stride(rowwise, _0{}, _0{});
  } else {
    return cute::make_stride(_0{}, rowwise, _0{});
  }
}

template <class Gemm, bool kSwap>
typename Gemm::Arguments fp8_arguments(const Fp8GemmArgs& g, const RunOptions& run) {
  using Kernel = typename Gemm::GemmKernel;
  const bool rowwise = g.scale_mode == ScaleMode::kRowwise;
  const auto* x = static_cast<const cutlass::float_e4m3_t*>(g.xq);
  const auto* w = static_cast<const cutlass::float_e4m3_t*>(g.wq);
  typename Gemm::Arguments a{};
  a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  // Both operands are K-major: A is [rows, K], B is [columns, K] (column-major K x columns).
  a.problem_shape = kSwap ? Problem{n, m, k, 1} : Problem{m, n, k, 1};
  a.mainloop.ptr_A = kSwap ? w : x;
  a.mainloop.dA = typename Kernel::StrideA{kSwap ? g.ldw : g.ldx, _1{}, int64_t{0}};
  a.mainloop.ptr_B = kSwap ? x : w;
  a.mainloop.dB = typename Kernel::StrideB{kSwap ? g.ldx : g.ldw, _1{}, int64_t{0}};
  auto& fusion = a.epilogue.thread;  // the operands of Fp8Kernel::Fusion, in its order
  fusion.op_0 = {g.w_scale, 0.0f, broadcast_stride<kSwap>(rowwise)};
  fusion.op_1.op_0 = {g.x_scale, 0.0f, broadcast_stride<!kSwap>(rowwise)};
  fusion.op_2 = {static_cast<const cutlass::bfloat16_t*>(g.bias), cutlass::bfloat16_t(0.0f), {}};
  a.epilogue.ptr_D = static_cast<cutlass::bfloat16_t*>(g.out);
  // Swapped, D is out^T in column-major order: element (i, j) at i + j * ldo, out[j][i].
  if constexpr (kSwap) {
    a.epilogue.dD = typename Kernel::StrideD{_1{}, g.ldo, int64_t{0}};
  } else {
    a.epilogue.dD = typename Kernel::StrideD{g.ldo, _1{}, int64_t{0}};
  }
  set_schedule<Gemm>(a, run);
  return a;
}

template <class Gemm, bool kWKn>
typename Gemm::Arguments bf16_arguments(const GemmArgs& g, const RunOptions& run) {
  using Kernel = typename Gemm::GemmKernel;
  typename Gemm::Arguments a{};
  a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  a.problem_shape = Problem{static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1};
  a.mainloop.ptr_A = static_cast<const cutlass::bfloat16_t*>(g.a);
  a.mainloop.dA = typename Kernel::StrideA{g.lda, _1{}, int64_t{0}};
  a.mainloop.ptr_B = static_cast<const cutlass::bfloat16_t*>(g.w);
  if constexpr (kWKn) {
    a.mainloop.dB = typename Kernel::StrideB{_1{}, g.ldw, int64_t{0}};  // (n, k) -> n + k * ldw
  } else {
    a.mainloop.dB = typename Kernel::StrideB{g.ldw, _1{}, int64_t{0}};  // (n, k) -> n * ldw + k
  }
  a.epilogue.thread.op_1 = {static_cast<const cutlass::bfloat16_t*>(g.bias),
                            cutlass::bfloat16_t(0.0f), {}};
  a.epilogue.ptr_D = static_cast<cutlass::bfloat16_t*>(g.out);
  a.epilogue.dD = typename Kernel::StrideD{g.ldo, _1{}, int64_t{0}};
  set_schedule<Gemm>(a, run);
  return a;
}

// The kernel's dynamic smem above 48 KiB must be allowed once per device (CUTLASS's own
// initialize() would do it on every call).
template <class Kernel>
LaunchError allow_smem(int device) {
  static std::atomic<uint64_t> allowed{0};  // one bit per device
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (allowed.load(std::memory_order_relaxed) & bit) != 0) return nullptr;
  const cudaError_t err =
      cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::SharedStorageSize);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  allowed.fetch_or(bit, std::memory_order_relaxed);
  return nullptr;
}

template <class Gemm>
LaunchError run(const typename Gemm::Arguments& a, void* workspace, int device,
                cudaStream_t stream) {
  using Kernel = typename Gemm::GemmKernel;
  if (Gemm::can_implement(a) != cutlass::Status::kSuccess)
    return "native GEMM: CUTLASS cannot run this problem with this kernel (operand alignment, "
           "strides or sizes)";
  if (LaunchError err = allow_smem<Kernel>(device)) return err;
  // Zeroes stream-K/split-K flags in the workspace on `stream`; nothing for the other schedulers.
  if (Kernel::initialize_workspace(a, workspace, stream) != cutlass::Status::kSuccess) {
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? cudaGetErrorString(err)
                              : "native GEMM: CUTLASS could not initialize its workspace";
  }
  typename Kernel::Params params = Kernel::to_underlying_arguments(a, workspace);
  const cutlass::Status status = Gemm::run(params, stream);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return status == cutlass::Status::kSuccess ? nullptr : "native GEMM: CUTLASS launch failed";
}

template <const TileConfig& kTile>
const Fp8Instance& fp8_entry() {
  using K = Fp8Kernel<kTile>;
  using Gemm = typename K::Gemm;
  static const Fp8Instance instance{
      K::Parts::kStages, K::Parts::kWarps,
      [](const Fp8GemmArgs& g, const RunOptions& r) -> int64_t {
        return static_cast<int64_t>(Gemm::get_workspace_size(fp8_arguments<Gemm, K::kSwap>(g, r)));
      },
      [](const Fp8GemmArgs& g, const RunOptions& r, cudaStream_t s) -> LaunchError {
        return run<Gemm>(fp8_arguments<Gemm, K::kSwap>(g, r), g.workspace, r.device, s);
      }};
  return instance;
}

template <const TileConfig& kTile, bool kWKn>
const GemmInstance& bf16_entry() {
  using K = Bf16Kernel<kTile, kWKn>;
  using Gemm = typename K::Gemm;
  static const GemmInstance instance{
      K::Parts::kStages, K::Parts::kWarps,
      [](const GemmArgs& g, const RunOptions& r) -> int64_t {
        return static_cast<int64_t>(Gemm::get_workspace_size(bf16_arguments<Gemm, kWKn>(g, r)));
      },
      [](const GemmArgs& g, const RunOptions& r, cudaStream_t s) -> LaunchError {
        return run<Gemm>(bf16_arguments<Gemm, kWKn>(g, r), g.workspace, r.device, s);
      }};
  return instance;
}

}  // namespace detail
}  // namespace gemm
}  // namespace cuda
}  // namespace mymetaops
