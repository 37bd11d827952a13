// Torch-free vocabulary shared by csrc/ (torch glue) and the vendor kernels in cuda/ and hip/.
// Everything that crosses the launcher boundary is a raw pointer, a size, or one of these enums.
#pragma once
#include <cstdint>

namespace mymetaops {

enum class DType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kInt32 = 3,
  kInt64 = 4,
};

// Launchers return nullptr on success, otherwise a static, human-readable reason
// (an unsupported configuration or the vendor runtime's launch error string).
using LaunchError = const char*;

}  // namespace mymetaops
