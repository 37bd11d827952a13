#include "device_errors.h"

#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/extension.h>

#include <array>
#include <atomic>
#include <mutex>

#include "mymetaops/errors.h"

namespace mymetaops::dispatch {
namespace {

constexpr int kMaxDevices = 64;

struct Records {
  std::mutex mutex;
  std::array<at::Tensor, kMaxDevices> tensors;
  std::array<std::atomic<int64_t*>, kMaxDevices> words{};
};

Records& records() {
  static Records* instance = new Records();  // never destroyed: pinned memory outlives the calls
  return *instance;
}

const char* op_name(int64_t op) {
  switch (static_cast<ErrorOp>(op)) {
    case ErrorOp::kEmbeddingBag: return "embedding_bag";
    case ErrorOp::kEmbeddingBagBackward: return "embedding_bag_backward";
    case ErrorOp::kEmbeddingBagPerSampleWeightsBackward:
      return "embedding_bag_per_sample_weights_backward";
    case ErrorOp::kJaggedToPaddedDense: return "jagged_to_padded_dense";
    case ErrorOp::kDenseToJagged: return "dense_to_jagged";
    case ErrorOp::kJaggedDenseElementwise: return "jagged_dense_elementwise";
    case ErrorOp::kJaggedSoftmax: return "jagged_softmax";
    case ErrorOp::kJaggedIndexSelect: return "jagged_index_select";
    case ErrorOp::kJaggedBmm: return "jagged_bmm";
    case ErrorOp::kHstuAttention: return "hstu_attention";
    case ErrorOp::kJaggedAttention: return "jagged_attention";
  }
  return "mymetaops op";
}

}  // namespace

int64_t* device_error_record(const c10::Device& device) {
  const int index = device.index();
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "mymetaops: device index ", index, " out of range");
  Records& r = records();
  if (int64_t* words = r.words[index].load(std::memory_order_acquire)) return words;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.tensors[index].defined()) {
    r.tensors[index] = at::zeros({kErrorRecordWords}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    r.words[index].store(r.tensors[index].mutable_data_ptr<int64_t>(), std::memory_order_release);
  }
  return r.words[index].load(std::memory_order_acquire);
}

at::Tensor device_error_record_tensor(const c10::Device& device) {
  device_error_record(device);
  return records().tensors[device.index()];
}

void raise_recorded_error(const c10::Device& device) {
  int64_t* words = records().words[device.index()].load(std::memory_order_acquire);
  if (words == nullptr) return;
  volatile int64_t* record = words;
  const int64_t code = record[kErrCode];
  if (code == 0) return;
  const int64_t op = record[kErrOp], position = record[kErrPosition], value = record[kErrValue],
                bound = record[kErrBound];
  record[kErrCode] = 0;
  record[kErrClaimed] = 0;
  const char* name = op_name(op);
  const auto where = c10::str(" (recorded on ", device, " by an earlier call, without a host sync; ",
                              "mymetaops.check_errors() or validate=True finds the call)");
  switch (static_cast<ErrorCode>(code)) {
    case ErrorCode::kIndexOutOfRange:
      if (op == static_cast<int64_t>(ErrorOp::kJaggedIndexSelect)) {
        TORCH_CHECK_INDEX(false, name, ": indices[", position, "] = ", value, " is not a sequence (lengths has ",
                          bound, "); its rows are 0", where);
      }
      TORCH_CHECK_INDEX(false, name, ": index ", value, " at position ", position,
                        " is out of range for a table of ", bound, " rows; its bag's output is NaN",
                        where);
    case ErrorCode::kNegativeOffset:
      TORCH_CHECK_VALUE(false, name, ": offsets must be non-negative, got offsets[", position,
                        "] = ", value, where);
    case ErrorCode::kDecreasingOffset:
      TORCH_CHECK_VALUE(false, name, ": offsets must be non-decreasing, but offsets[", position,
                        "] = ", value, " is below offsets[", position - 1, "]", where);
    case ErrorCode::kOffsetPastEnd:
      TORCH_CHECK_VALUE(false, name, ": offsets[", position, "] = ", value, " is past the end of the ",
                        bound, op <= static_cast<int64_t>(ErrorOp::kEmbeddingBagPerSampleWeightsBackward)
                                   ? " indices" : " rows", where);
    case ErrorCode::kNegativeLength:
      TORCH_CHECK_VALUE(false, name, ": lengths must be non-negative, got lengths[", position, "] = ",
                        value, where);
    case ErrorCode::kLengthAboveMax:
      TORCH_CHECK_VALUE(false, name, ": sequence ", position, " has ", value, " rows, more than max_seq_len = ",
                        bound, "; its rows past max_seq_len were left out", where);
    case ErrorCode::kOffsetNotAtEnd:
      TORCH_CHECK_VALUE(false, name, ": seq_offsets[", position, "] = ", value, " must be ", bound,
                        position == 0 ? " (sequences start at row 0)" : " (total_L, the rows of q, k and v)",
                        where);
    case ErrorCode::kTargetsOutOfRange:
      TORCH_CHECK_VALUE(false, name, ": num_targets[", position, "] = ", value, " is not in [0, ", bound,
                        "], the length of its sequence; it was clamped", where);
    default:
      TORCH_CHECK(false, name, ": unknown error code ", code, " recorded on ", device);
  }
}

void bind_errors(pybind11::module_& m) {
  m.def("_raise_recorded_error", [](int64_t device_index) {
    raise_recorded_error(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)));
  });
  m.def("_error_record", [](int64_t device_index) {
    return device_error_record_tensor(
        c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)));
  });
}

}  // namespace mymetaops::dispatch
