// Where the kernels record a bad index or offset value (mymetaops/errors.h), and the one place
// that turns a record into a Python exception.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace mymetaops::dispatch {

// The record of a GPU device: 8 int64 words of pinned host memory, which kernels write through
// unified addressing. Allocated on first use; the pointer is valid on the device and the host.
int64_t* device_error_record(const c10::Device& device);
// The same record as a pinned int64 tensor (for the Triton launchers).
at::Tensor device_error_record_tensor(const c10::Device& device);

// Raises the error a kernel recorded on `device`, if any, and clears the record. No
// synchronization: it sees what kernels finished so far. IndexError for an index, ValueError for
// offsets, naming the op, the position and the value.
void raise_recorded_error(const c10::Device& device);

}  // namespace mymetaops::dispatch
