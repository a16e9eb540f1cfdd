#include "ops/dnnl_util.hpp"

#include <algorithm>

#include "core/tensor.hpp"
#include "core/threading.hpp"

#if defined(EDGETRAIN_WITH_DNNL)

namespace edgetrain::dnnl_util {

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& CpuStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

void* ScratchpadBuffer(size_t bytes) {
  // A tensor's memory: aligned, and on huge pages when large (the reorders into it are TLB-bound otherwise).
  thread_local Tensor buffer;
  if (static_cast<size_t>(buffer.numel()) < bytes || !buffer.raw()) {
    buffer = Tensor();  // freed before the larger one is allocated
    buffer = Tensor(DataType::kUint8, {static_cast<int64_t>(std::max<size_t>(bytes, 1))}, "oneDNN scratchpad");
  }
  return buffer.raw();
}

bool Execute(BoundPrimitive& bound, std::initializer_list<ArgData> data, int threads) {
  try {
    for (const ArgData& d : data) {
      for (size_t i = 0; i < bound.args.size(); ++i)
        if (bound.args[i].arg == d.arg) bound.memories[i].set_data_handle(const_cast<void*>(d.data));
    }
    bound.memories.back().set_data_handle(ScratchpadBuffer(bound.scratchpad_bytes));
  } catch (const dnnl::error&) {
    return false;
  }
  LimitLibraryThreads(threads);
  dnnl::stream& stream = CpuStream();
  // The C API takes the cached argument array as is (the C++ execute builds a map per call).
  return dnnl_primitive_execute(bound.primitive.get(), stream.get(), static_cast<int>(bound.args.size()),
                                bound.args.data()) == dnnl_success &&
         dnnl_stream_wait(stream.get()) == dnnl_success;
}

}  // namespace edgetrain::dnnl_util

#endif
