#include "core/kernel_backend.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace edgetrain {

namespace {

bool ReferenceAskedFor() {
  const char* choice = std::getenv("EDGETRAIN_KERNELS");
  return choice && std::strcmp(choice, "reference") == 0;
}

KernelBackend InitialBackend() {
  if (!DnnlAvailable() || ReferenceAskedFor()) return KernelBackend::kReference;
  return KernelBackend::kDnnl;
}

std::atomic<KernelBackend>& Backend() {
  static std::atomic<KernelBackend> backend{InitialBackend()};
  return backend;
}

std::atomic<bool>& DirectKernels() {
  static std::atomic<bool> on{!ReferenceAskedFor()};
  return on;
}

std::atomic<bool>& WinogradConvolutions() {
  static std::atomic<bool> on{[] {
    const char* choice = std::getenv("EDGETRAIN_WINOGRAD");
    return !(choice && std::strcmp(choice, "0") == 0);
  }()};
  return on;
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

bool UseDirectKernels() {
  return DirectKernels().load(std::memory_order_relaxed) && (!DnnlAvailable() || UseDnnl());
}

bool SetDirectKernels(bool on) { return DirectKernels().exchange(on, std::memory_order_relaxed); }

bool UseWinogradConvolutions() { return WinogradConvolutions().load(std::memory_order_relaxed); }

bool SetWinogradConvolutions(bool on) { return WinogradConvolutions().exchange(on, std::memory_order_relaxed); }

}  // namespace edgetrain
