// Helpers the families' GPU glue (csrc/*/*_gpu.cpp) share around a native launcher call: the
// stream to launch on and the launcher's error as a Python error naming the op. Defined in
// launch_gpu.cpp, which GPU builds only compile (it includes the CUDA/HIP runtime headers).
#pragma once
#include <c10/core/Device.h>

#include "mymetaops/types.h"

namespace mymetaops::dispatch {

// The current CUDA (HIP) stream of `device`, as the launchers take it.
void* current_stream(const c10::Device& device);

// Raises RuntimeError("<op> (native kernel): <error>") unless `error` is nullptr (success).
void check_launch(LaunchError error, const char* op);

}  // namespace mymetaops::dispatch
