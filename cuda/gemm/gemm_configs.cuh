// The native GEMM instances of cuda/gemm, as the launchers (gemm_table.cu) see them: tile shapes
// as named constants, and one small record of entry points per compiled CUTLASS instance. Light on
// purpose (no CUTLASS headers): the table compiles fast and each instance .cu includes
// gemm_kernels.cuh on its own, so ninja builds the slow instances in parallel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mymetaops/gemm.h"

namespace mymetaops {
namespace cuda {
namespace gemm {

enum class Mainloop : int32_t {
  kCooperative = 0,         // 2 consumer warpgroups share one tile (split along M), persistent
  kPingpong = 1,            // 2 consumer warpgroups own alternate tiles: one's epilogue hides
                            // behind the other's MMAs, persistent
  kCooperativeStreamK = 2,  // cooperative with CUTLASS's stream-K scheduler: data-parallel,
                            // split-K or stream-K chosen per launch
};

// One CUTLASS instance's shape, a template argument of the kernel templates. swap_ab: the kernel
// computes out^T = wq . xq^T (m tiles N, n tiles M) and stores it column-major, which is out.
struct TileConfig {
  int32_t m, n, k;
  int32_t cluster_m, cluster_n;
  Mainloop mainloop;
  bool swap_ab = false;
};

// FP8 tiles (K tile 128 = one 128-byte TMA/swizzle row of e4m3).
// Large square problems (8192^3): each consumer warpgroup owns a 64x256 slab, the most MMA work
// per byte of smem; the 2x1 cluster multicasts each B tile to both CTAs.
inline constexpr TileConfig kFp8Large{128, 256, 128, 2, 1, Mainloop::kCooperative};
// Large problems with N > M: the transposed shape, A multicast across the 1x2 cluster.
inline constexpr TileConfig kFp8LargeTall{256, 128, 128, 1, 2, Mainloop::kCooperative};
// Mid-size problems: smaller tiles for more of them per wave; ping-pong hides the epilogue.
inline constexpr TileConfig kFp8Medium{128, 128, 128, 2, 1, Mainloop::kPingpong};
// Few output tiles and long K (weight gradients, M = N = 1024, K = 65536): split-K / stream-K.
inline constexpr TileConfig kFp8SplitK{128, 128, 128, 1, 2, Mainloop::kCooperativeStreamK};
// Small M (16..256 rows): a 64-row tile wastes the least of wgmma's 64-row minimum.
inline constexpr TileConfig kFp8SmallM{64, 128, 128, 1, 1, Mainloop::kPingpong};
// Small M or N with few tiles: narrow tiles cut along K so enough CTAs stream the weights.
inline constexpr TileConfig kFp8Narrow{128, 64, 128, 1, 1, Mainloop::kCooperativeStreamK};
// Tiny problems (M <= 256, under ~10 us): 64x32 tiles give 4x the CTAs of 64x128, so 64x4096 or
// 128x1024 outputs fill about a wave, and a 256-deep K step halves the pipeline round trips; the
// Triton kernel of this shape beat the 64x128 instance there by 1.2-1.3x (H200, 2026-12-01).
inline constexpr TileConfig kFp8Tiny{64, 32, 256, 1, 1, Mainloop::kPingpong};
// Small N at large M (MLP layers of 64 outputs): A and B swapped, so N fills wgmma's 64-row side
// instead of half of a 128-wide tile; torch._scaled_mm's rowwise kernel transposes such problems.
inline constexpr TileConfig kFp8SmallNSwapped{64, 128, 128, 1, 1, Mainloop::kPingpong, true};

// bf16 tiles (K tile 64 = one 128-byte swizzle row of bf16).
// Large problems: the bf16 counterpart of kFp8Large.
inline constexpr TileConfig kBf16Large{128, 256, 64, 2, 1, Mainloop::kCooperative};
// Mid-size problems.
inline constexpr TileConfig kBf16Medium{128, 128, 64, 1, 1, Mainloop::kPingpong};

// How a stream-K-scheduled instance cuts the work of one launch.
enum class Decomposition : int32_t { kDataParallel = 0, kSplitK = 1, kStreamK = 2 };

struct RunOptions {
  int32_t device;    // current CUDA device
  int32_t sm_count;  // its SMs (persistent grids)
  int32_t split_k;   // kSplitK only
  Decomposition decomposition;
};

// Entry points of one compiled instance. workspace() is CUTLASS's own need for these arguments
// (stream-K/split-K partials and flags); launch() checks what CUTLASS can run and launches.
struct Fp8Instance {
  int32_t stages;
  int32_t warps;
  int64_t (*workspace)(const Fp8GemmArgs& args, const RunOptions& run);
  LaunchError (*launch)(const Fp8GemmArgs& args, const RunOptions& run, cudaStream_t stream);
};

struct GemmInstance {
  int32_t stages;
  int32_t warps;
  int64_t (*workspace)(const GemmArgs& args, const RunOptions& run);
  LaunchError (*launch)(const GemmArgs& args, const RunOptions& run, cudaStream_t stream);
};

// What a launch needs to know of the current device, queried once per device (gemm_table.cu).
struct Device {
  int32_t id;
  int32_t sm_count;
};
// The current device; an error unless it is an sm_90 GPU (the instances are built for sm_90a).
LaunchError current_device(Device* dev);

// Defined (specialized) by the instance files, one per TileConfig.
template <const TileConfig& kTile>
const Fp8Instance& fp8_instance();
// w_kn: B is w[K, N] (N contiguous) instead of w[N, K].
template <const TileConfig& kTile, bool kWKn>
const GemmInstance& bf16_instance();

}  // namespace gemm
}  // namespace cuda
}  // namespace mymetaops
