// The native GEMM table of the CUDA build and the launchers of mymetaops/gemm.h: argument and
// config checks, the per-device facts a launch needs (cached), and the dispatch to the instance
// named by GemmConfig.kernel. The CUTLASS instances themselves live one per .cu beside this file.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "gemm_configs.cuh"
#include "mymetaops/gemm.h"

namespace mymetaops {
namespace cuda {
namespace gemm {
namespace {

struct Row {
  const char* name;
  GemmInput input;
  TileConfig tile;
  GemmSchedule schedule;
  Decomposition decomposition;  // split_k > 1 turns kDataParallel rows into kSplitK launches
  int32_t max_split_k;
  const Fp8Instance& (*fp8)();
  const GemmInstance& (*bf16_nk)();  // w[N, K]
  const GemmInstance& (*bf16_kn)();  // w[K, N]
};

// Stream-K instances appear twice: as stream-K (K balanced by CUTLASS) and as split-K (the
// model's split_k; 1 = data-parallel).
constexpr int32_t kMaxSplitK = 16;
constexpr auto kPersistent = GemmSchedule::kPersistent;
constexpr auto kDP = Decomposition::kDataParallel;
constexpr Row kRows[] = {
    {"fp8_128x256x128_c2x1_coop", GemmInput::kFp8, kFp8Large, kPersistent, kDP, 1,
     &fp8_instance<kFp8Large>, nullptr, nullptr},
    {"fp8_256x128x128_c1x2_coop", GemmInput::kFp8, kFp8LargeTall, kPersistent, kDP, 1,
     &fp8_instance<kFp8LargeTall>, nullptr, nullptr},
    {"fp8_128x128x128_c2x1_pingpong", GemmInput::kFp8, kFp8Medium, kPersistent, kDP, 1,
     &fp8_instance<kFp8Medium>, nullptr, nullptr},
    {"fp8_128x128x128_c1x2_streamk", GemmInput::kFp8, kFp8SplitK, GemmSchedule::kStreamK,
     Decomposition::kStreamK, 1, &fp8_instance<kFp8SplitK>, nullptr, nullptr},
    {"fp8_128x128x128_c1x2_splitk", GemmInput::kFp8, kFp8SplitK, kPersistent, kDP, kMaxSplitK,
     &fp8_instance<kFp8SplitK>, nullptr, nullptr},
    {"fp8_64x128x128_pingpong", GemmInput::kFp8, kFp8SmallM, kPersistent, kDP, 1,
     &fp8_instance<kFp8SmallM>, nullptr, nullptr},
    {"fp8_128x64x128_streamk", GemmInput::kFp8, kFp8Narrow, GemmSchedule::kStreamK,
     Decomposition::kStreamK, 1, &fp8_instance<kFp8Narrow>, nullptr, nullptr},
    {"fp8_128x64x128_splitk", GemmInput::kFp8, kFp8Narrow, kPersistent, kDP, kMaxSplitK,
     &fp8_instance<kFp8Narrow>, nullptr, nullptr},
    {"bf16_128x256x64_c2x1_coop", GemmInput::kBFloat16, kBf16Large, kPersistent, kDP, 1, nullptr,
     &bf16_instance<kBf16Large, false>, &bf16_instance<kBf16Large, true>},
    {"bf16_128x128x64_pingpong", GemmInput::kBFloat16, kBf16Medium, kPersistent, kDP, 1, nullptr,
     &bf16_instance<kBf16Medium, false>, &bf16_instance<kBf16Medium, true>},
    // Appended: a row's index is its id in recorded benchmark results.
    {"fp8_swapped_64x128x128_pingpong", GemmInput::kFp8, kFp8SmallNSwapped, kPersistent, kDP, 1,
     &fp8_instance<kFp8SmallNSwapped>, nullptr, nullptr},
    {"fp8_64x32x256_pingpong", GemmInput::kFp8, kFp8Tiny, kPersistent, kDP, 1,
     &fp8_instance<kFp8Tiny>, nullptr, nullptr},
};
constexpr int32_t kNumRows = static_cast<int32_t>(sizeof(kRows) / sizeof(kRows[0]));

const std::array<GemmKernelInfo, kNumRows>& table() {
  static const std::array<GemmKernelInfo, kNumRows> infos = [] {
    std::array<GemmKernelInfo, kNumRows> t{};
    for (int32_t i = 0; i < kNumRows; ++i) {
      const Row& r = kRows[i];
      const int32_t stages = r.fp8 ? r.fp8().stages : r.bf16_nk().stages;
      const int32_t warps = r.fp8 ? r.fp8().warps : r.bf16_nk().warps;
      t[i] = GemmKernelInfo{r.name, r.input, r.tile.m, r.tile.n, r.tile.k,
                            r.tile.cluster_m, r.tile.cluster_n, r.schedule, stages,
                            r.max_split_k, warps, r.fp8 != nullptr, r.tile.swap_ab};
    }
    return t;
  }();
  return infos;
}

LaunchError check_config(const GemmConfig& config, GemmInput input, const Row** row) {
  if (config.kernel < 0 || config.kernel >= kNumRows)
    return "native GEMM: config.kernel is not an index of native_gemm_kernels()";
  *row = &kRows[config.kernel];
  if ((*row)->input != input)
    return "native GEMM: config.kernel names a kernel for another input type";
  if (config.split_k < 1 || config.split_k > (*row)->max_split_k)
    return "native GEMM: config.split_k must be between 1 and the kernel's max_split_k";
  return nullptr;
}

RunOptions run_options(const Row& row, const GemmConfig& config, const Device& dev) {
  const Decomposition d = row.decomposition == Decomposition::kDataParallel && config.split_k > 1
                              ? Decomposition::kSplitK
                              : row.decomposition;
  return RunOptions{dev.id, dev.sm_count, config.split_k, d};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int64_t kMaxDim = INT32_MAX;  // CUTLASS's problem shape is int

// K = 0: the product is empty, out = bias (or 0). 16-bit outputs only, copied as raw bits.
__global__ void fill_rows(uint16_t* out, int64_t ldo, int64_t m, int64_t n,
                          const uint16_t* bias) {
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < n;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      out[r * ldo + c] = bias != nullptr ? bias[c] : uint16_t{0};
    }
  }
}

LaunchError launch_fill(void* out, int64_t ldo, int64_t m, int64_t n, const void* bias,
                        cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads < 64
                                            ? (n + kThreads - 1) / kThreads
                                            : 64),
                  static_cast<unsigned>(m < 65535 ? m : 65535));
  fill_rows<<<grid, kThreads, 0, stream>>>(static_cast<uint16_t*>(out), ldo, m, n,
                                           static_cast<const uint16_t*>(bias));
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

LaunchError check_fp8(const Fp8GemmArgs& a) {
  if (a.format != Fp8Format::kE4M3FN) return "native FP8 GEMM on NVIDIA takes e4m3fn operands";
  if (a.out_dtype != DType::kBFloat16) return "native FP8 GEMM kernels write bf16 only";
  if (a.m > kMaxDim || a.n > kMaxDim || a.k > kMaxDim)
    return "native FP8 GEMM: m, n and k must be below 2^31";
  if (a.k % 16 != 0 || a.ldx % 16 != 0 || a.ldw % 16 != 0 || !aligned16(a.xq) ||
      !aligned16(a.wq))
    return "native FP8 GEMM: k, ldx, ldw must be multiples of 16 and xq, wq 16-byte aligned";
  if (a.ldo % 8 != 0 || !aligned16(a.out))
    return "native FP8 GEMM: ldo must be a multiple of 8 and out 16-byte aligned (TMA store)";
  return nullptr;
}

LaunchError check_bf16(const GemmArgs& a) {
  if (a.dtype == DType::kFloat16) return "no native fp16 GEMM kernel";
  if (a.dtype != DType::kBFloat16) return "native GEMM: dtype must be bf16";
  if (a.m > kMaxDim || a.n > kMaxDim || a.k > kMaxDim)
    return "native GEMM: m, n and k must be below 2^31";
  if (a.lda % 8 != 0 || a.ldw % 8 != 0 || a.ldo % 8 != 0 || !aligned16(a.a) ||
      !aligned16(a.w) || !aligned16(a.out))
    return "native GEMM: lda, ldw, ldo must be multiples of 8 and a, w, out 16-byte aligned "
           "(TMA)";
  return nullptr;
}

}  // namespace

constexpr int kMaxDevices = 64;

LaunchError current_device(Device* dev) {
  // Per device: 0 not queried yet, > 0 its SM count (an sm_90 device), -1 not sm_90.
  static std::atomic<int32_t> known[kMaxDevices];
  if (cudaGetDevice(&dev->id) != cudaSuccess) return cudaGetErrorString(cudaGetLastError());
  if (dev->id < 0 || dev->id >= kMaxDevices) return "native GEMM: device index out of range";
  int32_t sm = known[dev->id].load(std::memory_order_relaxed);
  if (sm == 0) {
    int major = 0, minor = 0, count = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev->id) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev->id) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev->id) != cudaSuccess)
      return cudaGetErrorString(cudaGetLastError());
    sm = major == 9 && minor == 0 ? count : -1;
    known[dev->id].store(sm, std::memory_order_relaxed);
  }
  if (sm < 0) return "native GEMM kernels are built for sm_90a (Hopper) only";
  dev->sm_count = sm;
  return nullptr;
}
}  // namespace gemm
}  // namespace cuda

using cuda::gemm::Device;
using cuda::gemm::Row;

const GemmKernelInfo* native_gemm_kernels(int32_t* count) {
  *count = cuda::gemm::kNumRows;
  return cuda::gemm::table().data();
}

int64_t fp8_gemm_workspace_bytes(const Fp8GemmArgs& args, const GemmConfig& config) {
  const Row* row = nullptr;
  Device dev{};
  if (cuda::gemm::check_config(config, GemmInput::kFp8, &row) || cuda::gemm::check_fp8(args) ||
      args.m == 0 || args.n == 0 || args.k == 0 || cuda::gemm::current_device(&dev))
    return 0;  // the launch reports the problem, or needs no CUTLASS workspace
  return row->fp8().workspace(args, cuda::gemm::run_options(*row, config, dev));
}

LaunchError launch_fp8_gemm(const Fp8GemmArgs& args, const GemmConfig& config, void* stream) {
  const Row* row = nullptr;
  if (LaunchError err = cuda::gemm::check_config(config, GemmInput::kFp8, &row)) return err;
  if (LaunchError err = cuda::gemm::check_fp8(args)) return err;
  if (args.m == 0 || args.n == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (args.k == 0) return cuda::gemm::launch_fill(args.out, args.ldo, args.m, args.n, args.bias, s);
  Device dev{};
  if (LaunchError err = cuda::gemm::current_device(&dev)) return err;
  return row->fp8().launch(args, cuda::gemm::run_options(*row, config, dev), s);
}

int64_t gemm_workspace_bytes(const GemmArgs& args, const GemmConfig& config) {
  const Row* row = nullptr;
  Device dev{};
  if (cuda::gemm::check_config(config, GemmInput::kBFloat16, &row) ||
      cuda::gemm::check_bf16(args) || args.m == 0 || args.n == 0 || args.k == 0 ||
      cuda::gemm::current_device(&dev))
    return 0;
  const auto& instance = args.w_kn ? row->bf16_kn() : row->bf16_nk();
  return instance.workspace(args, cuda::gemm::run_options(*row, config, dev));
}

LaunchError launch_gemm(const GemmArgs& args, const GemmConfig& config, void* stream) {
  if (args.dtype == DType::kFloat16) return "no native fp16 GEMM kernel";
  const Row* row = nullptr;
  if (LaunchError err = cuda::gemm::check_config(config, GemmInput::kBFloat16, &row)) return err;
  if (LaunchError err = cuda::gemm::check_bf16(args)) return err;
  if (args.m == 0 || args.n == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  if (args.k == 0) return cuda::gemm::launch_fill(args.out, args.ldo, args.m, args.n, args.bias, s);
  Device dev{};
  if (LaunchError err = cuda::gemm::current_device(&dev)) return err;
  const auto& instance = args.w_kn ? row->bf16_kn() : row->bf16_nk();
  return instance.launch(args, cuda::gemm::run_options(*row, config, dev), s);
}

}  // namespace mymetaops
