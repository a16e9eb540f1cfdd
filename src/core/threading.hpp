// Intra-op parallelism: one pool per session, sized by the session's thread count. The pool runs on
// OpenMP, the runtime oneDNN uses too, so edgetrain's loops and oneDNN's share one set of threads.
#pragma once

#include <cstdint>

#include "core/function_ref.hpp"

namespace edgetrain {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller; <=1 runs inline
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Splits [0, n) into chunks of at least `grain` and runs fn(begin, end) on them in parallel.
  // Inside another ParallelFor it runs inline. An exception from fn is rethrown in the caller.
  void ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  int num_threads_;
};

// Makes libraries that size their own parallel regions from OpenMP (oneDNN) use `threads` threads
// in the calling thread; 1 inside a ParallelFor.
void LimitLibraryThreads(int threads);

}  // namespace edgetrain
