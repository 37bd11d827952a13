// The per-call dispatch shared by every op family: which backend runs a GPU call, decided once per
// problem bucket by mymetaops.model (Python, on a cache miss) and remembered in a bounded C++ cache,
// so the hot path of a call is a key computation and one hash lookup.
//
// A family computes its key (the problem's sizes rounded to what changes the choice) in C++ and
// declares the same rounding in its model module (Python); the miss handler checks the two agree.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace mymetaops::dispatch {

// Backend codes shared with mymetaops/ops/dispatch.py.
enum class Backend : int8_t { kNative = 0, kTriton = 1, kVendor = 2 };
// What use_backend / MYMETAOPS_BACKEND ask for: -1 auto, else a Backend code.
constexpr int8_t kAuto = -1;

constexpr int kMaxKeyFields = 14;
constexpr int kMaxConfig = 8;

struct Key {
  const char* op;  // a string literal of the calling family: compared by address
  int8_t size = 0;
  std::array<int64_t, kMaxKeyFields> fields{};
  bool operator==(const Key& other) const;
};

struct Decision {
  Backend backend;
  int8_t size = 0;
  std::array<int64_t, kMaxConfig> config{};
  at::IntArrayRef config_ref() const { return {config.data(), static_cast<size_t>(size)}; }
};

// The backend forced for the calling thread (use_backend), else MYMETAOPS_BACKEND, else auto.
int8_t forced_backend();
// Sets the calling thread's forced backend (kAuto = none) and returns the previous one.
int8_t set_thread_forced_backend(int8_t backend);
// RAII: the forced backend of a saved autograd context while its backward runs on another thread.
class ForcedBackendGuard {
 public:
  explicit ForcedBackendGuard(int8_t backend) : previous_(set_thread_forced_backend(backend)) {}
  ~ForcedBackendGuard() { set_thread_forced_backend(previous_); }
  ForcedBackendGuard(const ForcedBackendGuard&) = delete;
  ForcedBackendGuard& operator=(const ForcedBackendGuard&) = delete;

 private:
  int8_t previous_;
};
// RAII: the model's own choice, whatever use_backend or MYMETAOPS_BACKEND force, for the calls an
// implementation makes inside itself (the conversions around the pad + torch.bmm candidate are
// parts of that candidate, not ops the user forced).
class AutoBackendScope {
 public:
  AutoBackendScope();
  ~AutoBackendScope();
  AutoBackendScope(const AutoBackendScope&) = delete;
  AutoBackendScope& operator=(const AutoBackendScope&) = delete;

 private:
  int8_t previous_;
  bool previous_set_;
};
// The calling thread's own setting (kAuto or a Backend code), without the environment.
int8_t thread_forced_backend();

// Key of a call: the op, the device, the forced backend, then the family's fields.
Key make_key(const char* op, const c10::Device& device, std::initializer_list<int64_t> fields);

// The cached decision for `key`; on a miss, asks the Python handler with the key and the exact
// problem's fields (the handler checks that its own rounding of them gives the key).
Decision decide(const Key& key, c10::ArrayRef<int64_t> exact);

// Runs a Triton candidate: calls the Python launcher registered for `op` with (config, args).
at::Tensor run_triton(const char* op, const Decision& decision,
                      const std::vector<c10::IValue>& args);

// Decisions are kept per bucket, at most this many (the cache starts over when full).
constexpr size_t kCacheCapacity = 1 << 16;
struct CacheInfo {
  uint64_t hits, misses;
  size_t size, capacity;
};
CacheInfo cache_info();
void cache_clear();

// Largest power of two <= 16 dividing every value (pointers, byte counts): the vector width a
// native kernel may use.
int64_t alignment_bytes(std::initializer_list<uint64_t> values);

// Half / quarter octaves: floor(steps * log2(x)) for x > 0.
int64_t log2_bucket(double x, int steps);

}  // namespace mymetaops::dispatch
