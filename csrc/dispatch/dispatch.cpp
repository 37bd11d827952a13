// The decision cache, the forced backend and the calls into Python (miss handler, Triton launch).
#include "dispatch.h"

#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace mymetaops::dispatch {
namespace py = pybind11;

bool Key::operator==(const Key& other) const {
  return op == other.op && size == other.size &&
         std::equal(fields.begin(), fields.begin() + size, other.fields.begin());
}

namespace {

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = std::hash<const void*>{}(key.op);
    for (int i = 0; i < key.size; ++i) h = (h ^ static_cast<uint64_t>(key.fields[i])) * 0x100000001b3ULL;
    return static_cast<size_t>(h);
  }
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<Key, Decision, KeyHash> decisions;
  std::atomic<uint64_t> hits{0}, misses{0};
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: calls may run during interpreter exit
  return *instance;
}

// The Python callables (mymetaops/ops/dispatch.py registers them); owned references, never
// released for the same reason.
PyObject* g_miss_handler = nullptr;
PyObject* g_triton_launcher = nullptr;

thread_local int8_t t_forced = kAuto;
thread_local bool t_forced_set = false;

int8_t parse_backend(const char* text) {
  std::string name(text);
  name.erase(0, name.find_first_not_of(" \t"));
  name.erase(name.find_last_not_of(" \t") + 1);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "auto") return kAuto;
  if (name == "native") return static_cast<int8_t>(Backend::kNative);
  if (name == "triton") return static_cast<int8_t>(Backend::kTriton);
  if (name == "vendor") return static_cast<int8_t>(Backend::kVendor);
  TORCH_CHECK_VALUE(false, "MYMETAOPS_BACKEND: unknown backend '", text,
                    "'; expected one of auto, native, triton, vendor");
}

py::object to_python(const c10::IValue& value) {
  if (value.isNone()) return py::none();
  if (value.isTensor()) return py::cast(value.toTensor());
  if (value.isBool()) return py::bool_(value.toBool());
  if (value.isInt()) return py::int_(value.toInt());
  if (value.isDouble()) return py::float_(value.toDouble());
  TORCH_CHECK(false, "mymetaops dispatch: unsupported argument type ", value.tagKind());
}

py::tuple config_tuple(const Decision& decision) {
  py::tuple config(decision.size);
  for (int i = 0; i < decision.size; ++i) config[i] = py::int_(decision.config[i]);
  return config;
}

// A Python exception raised by a handler, re-raised as the same Python exception type when it
// crosses back into Python (torch translates pybind11's error_already_set).
Decision ask_python(const Key& key, c10::ArrayRef<int64_t> exact) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(g_miss_handler != nullptr, key.op,
              ": the GPU dispatch is not initialised; import mymetaops.ops (importing mymetaops and "
              "using any op does) before calling torch.ops.mymetaops on a GPU");
  py::tuple key_fields(key.size), exact_fields(exact.size());
  for (int i = 0; i < key.size; ++i) key_fields[i] = py::int_(key.fields[i]);
  size_t i = 0;
  for (int64_t value : exact) exact_fields[i++] = py::int_(value);
  py::object result;
  try {
    result = py::reinterpret_borrow<py::object>(g_miss_handler)(key.op, key_fields, exact_fields);
  } catch (py::error_already_set& e) {
    // A decision that cannot be made (e.g. a forced backend with no candidate) is the caller's
    // ValueError; anything else is ours.
    const std::string message = py::str(e.value());
    if (e.matches(PyExc_ValueError)) TORCH_CHECK_VALUE(false, message);
    TORCH_CHECK(false, key.op, ": the GPU dispatch failed: ", message);
  }
  auto pair = result.cast<std::pair<int64_t, std::vector<int64_t>>>();
  TORCH_CHECK(pair.first >= 0 && pair.first <= 2 && pair.second.size() <= kMaxConfig,
              "mymetaops dispatch: bad decision from the model for ", key.op);
  Decision decision{static_cast<Backend>(pair.first)};
  decision.size = static_cast<int8_t>(pair.second.size());
  std::copy(pair.second.begin(), pair.second.end(), decision.config.begin());
  return decision;
}

}  // namespace

int8_t thread_forced_backend() { return t_forced_set ? t_forced : kAuto; }

int8_t set_thread_forced_backend(int8_t backend) {
  const int8_t previous = thread_forced_backend();
  t_forced = backend;
  t_forced_set = backend != kAuto;
  return previous;
}

AutoBackendScope::AutoBackendScope() : previous_(t_forced), previous_set_(t_forced_set) {
  t_forced = kAuto;
  t_forced_set = true;  // set: the environment is not consulted either
}

AutoBackendScope::~AutoBackendScope() {
  t_forced = previous_;
  t_forced_set = previous_set_;
}

int8_t forced_backend() {
  if (t_forced_set) return t_forced;
  const char* env = std::getenv("MYMETAOPS_BACKEND");
  return env == nullptr || *env == '\0' ? kAuto : parse_backend(env);
}

Key make_key(const char* op, const c10::Device& device, std::initializer_list<int64_t> fields) {
  Key key{op};
  TORCH_INTERNAL_ASSERT(fields.size() + 2 <= kMaxKeyFields);
  key.fields[0] = device.index();
  key.fields[1] = forced_backend();
  std::copy(fields.begin(), fields.end(), key.fields.begin() + 2);
  key.size = static_cast<int8_t>(fields.size() + 2);
  return key;
}

Decision decide(const Key& key, c10::ArrayRef<int64_t> exact) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.decisions.find(key);
    if (it != c.decisions.end()) {
      c.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  // Not under the lock: the handler takes the GIL, and a thread holding the GIL may be waiting
  // for this lock.
  const Decision decision = ask_python(key, exact);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.misses.fetch_add(1, std::memory_order_relaxed);
  if (c.decisions.size() >= kCacheCapacity) c.decisions.clear();
  c.decisions.emplace(key, decision);
  return decision;
}

at::Tensor run_triton(const char* op, const Decision& decision,
                      const std::vector<c10::IValue>& args) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(g_triton_launcher != nullptr, op, ": the GPU dispatch is not initialised");
  py::tuple py_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) py_args[i] = to_python(args[i]);
  py::object out =
      py::reinterpret_borrow<py::object>(g_triton_launcher)(op, config_tuple(decision), py_args);
  return out.cast<at::Tensor>();
}

CacheInfo cache_info() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.hits.load(), c.misses.load(), c.decisions.size(), kCacheCapacity};
}

void cache_clear() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.decisions.clear();
  c.hits = 0;
  c.misses = 0;
}

int64_t alignment_bytes(std::initializer_list<uint64_t> values) {
  uint64_t all = 16;
  for (uint64_t v : values) all |= v;
  return static_cast<int64_t>(all & (~all + 1));  // lowest set bit, at most 16
}

int64_t log2_bucket(double x, int steps) { return static_cast<int64_t>(std::floor(steps * std::log2(x))); }

// Python bindings (module.cpp calls this).
void bind(py::module_& m) {
  m.def("_set_dispatch_handlers", [](py::object miss, py::object triton) {
    Py_XINCREF(miss.ptr());
    Py_XINCREF(triton.ptr());
    g_miss_handler = miss.ptr();
    g_triton_launcher = triton.ptr();
  });
  m.def("_set_thread_forced_backend", &set_thread_forced_backend,
        "Sets this thread's forced backend (-1 auto, 0 native, 1 triton, 2 vendor); returns the previous");
  m.def("_forced_backend", &forced_backend);
  m.def("_cache_info", [] {
    const CacheInfo info = cache_info();
    return py::dict(py::arg("hits") = info.hits, py::arg("misses") = info.misses,
                    py::arg("size") = info.size, py::arg("capacity") = info.capacity);
  });
  m.def("_cache_clear", &cache_clear);
  // The hot path's decide(), for tests of the cache and the handler on machines without a GPU.
  m.def("_decide", [](const std::string& op, std::vector<int64_t> fields, std::vector<int64_t> exact) {
    static std::mutex interned_mutex;
    static auto* interned = new std::unordered_map<std::string, std::string>();
    const char* name;
    {
      std::lock_guard<std::mutex> lock(interned_mutex);
      name = interned->try_emplace(op, op).first->second.c_str();
    }
    Key key{name};
    TORCH_CHECK_VALUE(fields.size() <= kMaxKeyFields, "too many key fields");
    std::copy(fields.begin(), fields.end(), key.fields.begin());
    key.size = static_cast<int8_t>(fields.size());
    Decision d;
    {
      py::gil_scoped_release no_gil;  // as on the hot path, where ops run without the GIL
      d = decide(key, exact);
    }
    return py::make_tuple(static_cast<int>(d.backend), config_tuple(d));
  });
}

}  // namespace mymetaops::dispatch
