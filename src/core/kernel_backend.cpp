#include "core/kernel_backend.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace edgetrain {

namespace {

KernelBackend InitialBackend() {
  const char* choice = std::getenv("EDGETRAIN_KERNELS");
  if (!DnnlAvailable() || (choice && std::strcmp(choice, "reference") == 0)) return KernelBackend::kReference;
  return KernelBackend::kDnnl;
}

std::atomic<KernelBackend>& Backend() {
  static std::atomic<KernelBackend> backend{InitialBackend()};
  return backend;
}

}  // namespace

bool DnnlAvailable() {
#if defined(EDGETRAIN_WITH_DNNL)
  return true;
#else
  return false;
#endif
}

KernelBackend ActiveKernelBackend() { return Backend().load(std::memory_order_relaxed); }

void SetKernelBackend(KernelBackend backend) {
  ET_CHECK(backend != KernelBackend::kDnnl || DnnlAvailable(), ErrorCode::kInvalidArgument,
           "this build of edgetrain has no oneDNN kernels (configure with -DEDGETRAIN_WITH_DNNL=ON)");
  Backend().store(backend, std::memory_order_relaxed);
}

}  // namespace edgetrain
