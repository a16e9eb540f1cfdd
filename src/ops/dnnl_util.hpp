// Shared plumbing for kernels that run on oneDNN primitives: the CPU engine, a stream per thread,
// a per-thread cache of primitives keyed by their configuration, and a user scratchpad that only
// grows (so a steady-state step allocates nothing). Only compiled with EDGETRAIN_WITH_DNNL.
#pragma once

#if defined(EDGETRAIN_WITH_DNNL)

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgetrain::dnnl_util {

dnnl::engine& CpuEngine();
dnnl::stream& CpuStream();

// Makes the primitive apply max(y, 0) to its output (a ReLU post-op).
inline void AppendRelu(dnnl::primitive_attr& attr) {
  dnnl::post_ops post;
  post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(post);
}

// A cache key built from integers without allocating once its buffer has grown.
class Key {
 public:
  Key& Add(int64_t v) {
    text_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Key& Add(std::initializer_list<int64_t> values) {
    for (int64_t v : values) Add(v);
    return *this;
  }
  Key& Add(std::span<const int64_t> values) {  // a std::vector or an Int64Vector, length first
    Add(static_cast<int64_t>(values.size()));
    for (int64_t v : values) Add(v);
    return *this;
  }
  const std::string& text() const { return text_; }
  void Clear() { text_.clear(); }

 private:
  std::string text_;
};

// The primitive of kind `Entry` cached under `key` for this thread, made by `make` on a miss.
template <typename Entry>
Entry& Cached(const Key& key, const std::function<Entry()>& make) {
  thread_local std::unordered_map<std::string, std::unique_ptr<Entry>> cache;
  auto it = cache.find(key.text());
  if (it == cache.end()) it = cache.emplace(key.text(), std::make_unique<Entry>(make())).first;
  return *it->second;
}

// This thread's scratchpad of at least `bytes` (for primitives made with scratchpad_mode::user).
// Creating dnnl::memory objects allocates: cache them with the primitive and call
// set_data_handle(ScratchpadBuffer(...)) / set_data_handle(tensor data) on each execution.
void* ScratchpadBuffer(size_t bytes);

// A primitive with one memory object per argument (the user scratchpad last) that get the tensors'
// pointers on every run; `refused` when oneDNN has no implementation for the configuration.
struct BoundPrimitive {
  dnnl::primitive primitive;
  std::vector<dnnl::memory> memories;
  std::vector<dnnl_exec_arg_t> args;  // parallel to `memories`
  size_t scratchpad_bytes = 0;
  bool refused = false;
};

// The primitive of `pd` (made with scratchpad_mode::user) with memory objects for `arg_descs`.
template <typename Primitive>
BoundPrimitive Bind(const typename Primitive::primitive_desc& pd,
                    const std::vector<std::pair<int, dnnl::memory::desc>>& arg_descs) {
  BoundPrimitive bound;
  bound.primitive = Primitive(pd);
  auto add = [&](int arg, const dnnl::memory::desc& desc) {
    bound.memories.emplace_back(desc, CpuEngine(), nullptr);
    bound.args.push_back({arg, bound.memories.back().get()});
  };
  for (const auto& [arg, desc] : arg_descs) add(arg, desc);
  add(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
  bound.scratchpad_bytes = pd.scratchpad_desc().get_size();
  return bound;
}

struct ArgData {
  int arg;
  const void* data;
};

// Points the memory objects at `data`, runs the primitive on this thread's stream with `threads`
// OpenMP threads and waits; false when oneDNN reports an error.
bool Execute(BoundPrimitive& bound, std::initializer_list<ArgData> data, int threads);

}  // namespace edgetrain::dnnl_util

#endif
