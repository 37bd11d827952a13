// The Python module mymetaops._C. Importing it loads the library, whose static initializers
// register the ops with the PyTorch dispatcher; the functions below connect the C++ dispatch to
// mymetaops.ops.dispatch (the model on a cache miss, the Triton launchers) and to check_errors().
#include <torch/extension.h>

namespace mymetaops::dispatch {
void bind(pybind11::module_& m);
void bind_errors(pybind11::module_& m);
}  // namespace mymetaops::dispatch
namespace mymetaops::gemm {
void bind(pybind11::module_& m);
}  // namespace mymetaops::gemm
namespace mymetaops::jagged {
void bind(pybind11::module_& m);
}  // namespace mymetaops::jagged
namespace mymetaops::attention {
void bind(pybind11::module_& m);
}  // namespace mymetaops::attention

PYBIND11_MODULE(_C, m) {
  m.doc() = "mymetaops operators";
  mymetaops::dispatch::bind(m);
  mymetaops::dispatch::bind_errors(m);
  mymetaops::gemm::bind(m);
  mymetaops::jagged::bind(m);
  mymetaops::attention::bind(m);
}
