// The launchers of the jagged bmm ops (csrc/include/mymetaops/jagged.h) on CUDA: argument checks,
// the operand form (jagged_dense_bmm with y or y^T per sequence, or jagged_jagged_bmm), and the
// dispatch to its CUTLASS grouped GEMM instance (grouped_gemm.cuh, one .cu per form beside this
// file).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "../gemm/gemm_configs.cuh"
#include "instances.h"
#include "mymetaops/jagged.h"

namespace mymetaops {
namespace cuda {
namespace jagged_bmm {
namespace {

constexpr const char* kKernelNames[] = {"grouped_128x256x64_coop"};
constexpr int32_t kNumKernels = sizeof(kKernelNames) / sizeof(kKernelNames[0]);

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool multiple_of_8(int64_t v) { return v % 8 == 0; }  // 16 bytes of 16-bit elements

// The instance for these operands, or an error saying what they lack.
LaunchError pick(const JaggedBmmArgs& a, const JaggedBmmConfig& config, const Instance** out) {
  if (config.kernel < 0 || config.kernel >= kNumKernels)
    return "native jagged bmm: config.kernel is not an index of jagged_bmm_kernel_names()";
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return "native jagged bmm: bfloat16 or float16 operands only (float32 runs on Triton or torch.bmm)";
  if (a.offsets_dtype != DType::kInt32 && a.offsets_dtype != DType::kInt64)
    return "native jagged bmm: offsets must be int32 or int64";
  const bool half = a.dtype == DType::kFloat16;
  const int64_t rows = a.max_length < a.total ? a.max_length : a.total;  // the most rows a GEMM gets
  if (a.batch > INT32_MAX || rows > INT32_MAX || a.m > INT32_MAX || a.n > INT32_MAX || a.k > INT32_MAX)
    return "native jagged bmm: a sequence's GEMM must have sizes below 2^31";
  if (!aligned16(a.x) || !aligned16(a.y) || !aligned16(a.out) || !multiple_of_8(a.x_row_stride) ||
      !multiple_of_8(a.n))
    return "native jagged bmm: operands must be 16-byte aligned (base pointers, row strides, N)";
  if (a.form == JaggedBmmForm::kJaggedJagged) {
    if (!multiple_of_8(a.m) || !multiple_of_8(a.y_k_stride))
      return "native jagged bmm: operands must be 16-byte aligned (M, y's row stride)";
    *out = half ? &instance<Operands::kJagged, true>() : &instance<Operands::kJagged, false>();
    return nullptr;
  }
  if (a.form != JaggedBmmForm::kJaggedDense) return "native jagged bmm: unknown JaggedBmmForm";
  if (!multiple_of_8(a.k) || !multiple_of_8(a.y_batch_stride))
    return "native jagged bmm: operands must be 16-byte aligned (K, y's batch stride)";
  if (a.y_n_stride == 1 && multiple_of_8(a.y_k_stride)) {
    *out = half ? &instance<Operands::kDenseN, true>() : &instance<Operands::kDenseN, false>();
  } else if (a.y_k_stride == 1 && multiple_of_8(a.y_n_stride)) {
    *out = half ? &instance<Operands::kDenseK, true>() : &instance<Operands::kDenseK, false>();
  } else {
    return "native jagged bmm: y[b] must have its K or its N dimension contiguous, the other stride "
           "16-byte aligned";
  }
  return nullptr;
}

}  // namespace
}  // namespace jagged_bmm
}  // namespace cuda

const char* const* jagged_bmm_kernel_names(int32_t* count) {
  *count = cuda::jagged_bmm::kNumKernels;
  return cuda::jagged_bmm::kKernelNames;
}

int64_t jagged_bmm_workspace_bytes(const JaggedBmmArgs& args, const JaggedBmmConfig& config) {
  const cuda::jagged_bmm::Instance* instance = nullptr;
  cuda::gemm::Device dev{};
  if (cuda::jagged_bmm::pick(args, config, &instance) || cuda::gemm::current_device(&dev)) return 0;
  return instance->workspace(args, dev.id);  // the launch reports what is wrong
}

LaunchError launch_jagged_bmm(const JaggedBmmArgs& args, const JaggedBmmConfig& config, void* stream) {
  const cuda::jagged_bmm::Instance* instance = nullptr;
  if (LaunchError err = cuda::jagged_bmm::pick(args, config, &instance)) return err;
  cuda::gemm::Device dev{};
  if (LaunchError err = cuda::gemm::current_device(&dev)) return err;
  if (args.workspace == nullptr) return "native jagged bmm: no workspace given";
  return instance->launch(args, dev.id, static_cast<cudaStream_t>(stream));
}

}  // namespace mymetaops
