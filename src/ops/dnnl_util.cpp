#include "ops/dnnl_util.hpp"

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
  constexpr size_t kAlignment = 64;
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes + kAlignment) {
    buffer = {};  // freed before the larger one is allocated
    buffer.resize(bytes + kAlignment);
  }
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + (kAlignment - address % kAlignment) % kAlignment;
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
