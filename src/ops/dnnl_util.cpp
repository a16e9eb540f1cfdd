#include "ops/dnnl_util.hpp"

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
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

}  // namespace edgetrain::dnnl_util

#endif
