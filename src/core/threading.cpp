#include "core/threading.hpp"

#include <algorithm>
#include <exception>

#if !defined(_OPENMP) && defined(__EMSCRIPTEN_PTHREADS__)
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace edgetrain {
namespace {

thread_local bool in_parallel = false;

// The WebAssembly module with pthreads: one set of worker threads for every pool, on the Web Workers
// loaded with the module (a thread the module's pool cannot start is a smaller team, not a wait).
class Workers {
 public:
  static Workers& Get() {
    static Workers* workers = new Workers();  // never destroyed: its threads live as long as the module
    return *workers;
  }

  // Runs fn on `team` chunks of [0, n), chunk 0 in the caller; false (nothing run) without a worker.
  bool Run(int64_t n, int team, FunctionRef<void(int64_t, int64_t)> fn) {
    std::unique_lock<std::mutex> dispatch(dispatch_, std::try_to_lock);
    if (!dispatch.owns_lock()) return false;
    while (static_cast<int>(threads_.size()) < team - 1) {
      try {
        threads_.emplace_back(&Workers::Loop, this, static_cast<int>(threads_.size()), generation_);
      } catch (const std::system_error&) {
        break;
      }
    }
    team = std::min(team, static_cast<int>(threads_.size()) + 1);
    if (team <= 1) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn, n_ = n, team_ = team, pending_ = team - 1;
      ++generation_;
    }
    wake_.notify_all();
    RunChunk(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    return true;
  }

 private:
  void RunChunk(int c) {
    const int64_t begin = n_ * c / team_, end = n_ * (c + 1) / team_;
    in_parallel = true;
    try {
      if (begin < end) (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
    }
    in_parallel = false;
  }

  void Loop(int index, uint64_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index + 1 >= team_) continue;
      lock.unlock();
      RunChunk(index + 1);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex dispatch_;  // one ParallelFor at a time; a second caller meanwhile runs inline
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  uint64_t generation_ = 0;
  FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int team_ = 0, pending_ = 0;
  std::exception_ptr failure_;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1 || in_parallel || !Workers::Get().Run(n, static_cast<int>(chunks), fn)) fn(0, n);
}

void LimitLibraryThreads(int) {}

}  // namespace edgetrain
#elif !defined(_OPENMP)
namespace edgetrain {

// No OpenMP runtime (the single-threaded WebAssembly module): loops run inline.
ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {}

void ThreadPool::ParallelFor(int64_t n, int64_t, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n > 0) fn(0, n);
}

void LimitLibraryThreads(int) {}

}  // namespace edgetrain
#else
#include <omp.h>

namespace edgetrain {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  std::exception_ptr failure;
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t c = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * c / team, end = n * (c + 1) / team;
    try {
      if (begin < end) fn(begin, end);
    } catch (...) {
#pragma omp critical(edgetrain_parallel_for_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void LimitLibraryThreads(int threads) {
  const int wanted = omp_in_parallel() ? 1 : std::max(1, threads);
  if (omp_get_max_threads() != wanted) omp_set_num_threads(wanted);
}

}  // namespace edgetrain
#endif
