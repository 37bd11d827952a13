// The GEMM family's Python helpers in mymetaops._C: the FP8 format of a device (one rule, in
// gemm.cpp, for the kernels and for mymetaops.fp8_dtype) and the native kernel table.
#include <torch/extension.h>

#include "gemm.h"

namespace mymetaops::gemm {
namespace {
KernelTableProvider table_provider = nullptr;
}  // namespace

void set_native_kernel_table_provider(KernelTableProvider provider) { table_provider = provider; }

void bind(pybind11::module_& m) {
  m.def(
      "_fp8_dtype",
      [](const std::string& device) { return std::string(c10::toString(fp8_dtype_of(c10::Device(device)))); },
      "Name of the FP8 dtype of a device (e.g. 'Float8_e4m3fn').");
  m.def(
      "_native_gemm_kernels",
      [] { return table_provider != nullptr ? table_provider() : std::vector<KernelTableRow>{}; },
      "Rows of the native GEMM kernel table of this build (empty without GPU kernels).");
}

}  // namespace mymetaops::gemm
