// See launch_gpu.h.
#include "launch_gpu.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

namespace mymetaops::dispatch {

void* current_stream(const c10::Device& device) {
  return at::cuda::getCurrentCUDAStream(device.index()).stream();
}

void check_launch(LaunchError error, const char* op) {
  TORCH_CHECK(error == nullptr, op, " (native kernel): ", error);
}

}  // namespace mymetaops::dispatch
