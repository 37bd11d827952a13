// The jagged family's Python helper in mymetaops._C: the native bmm kernels of this build.
#include <torch/extension.h>

#include "jagged.h"

namespace mymetaops::jagged {
namespace {
BmmKernelNamesProvider bmm_kernels_provider = nullptr;
}  // namespace

void set_native_bmm_kernels_provider(BmmKernelNamesProvider provider) { bmm_kernels_provider = provider; }

void bind(pybind11::module_& m) {
  m.def(
      "_native_jagged_bmm_kernels",
      [] { return bmm_kernels_provider != nullptr ? bmm_kernels_provider() : std::vector<std::string>{}; },
      "Names of the native jagged bmm kernels of this build (empty without GPU kernels).");
}

}  // namespace mymetaops::jagged
