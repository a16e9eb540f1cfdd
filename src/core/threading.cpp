#include "core/threading.hpp"

#include <algorithm>

namespace edgetrain {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  auto run_chunk = [&](int64_t c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    next_chunk_ = 1;  // the caller takes chunk 0
    chunks_done_ = 0;
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunk(0);
  std::unique_lock<std::mutex> lock(mutex_);
  while (next_chunk_ < job_chunks_) {
    int64_t c = next_chunk_++;
    lock.unlock();
    run_chunk(c);
    lock.lock();
    ++chunks_done_;
  }
  work_done_.wait(lock, [&] { return chunks_done_ == job_chunks_ - 1; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || (generation_ != seen && job_ && next_chunk_ < job_chunks_); });
    if (stopping_) return;
    seen = generation_;
    while (job_ && next_chunk_ < job_chunks_) {
      int64_t c = next_chunk_++;
      const auto* fn = job_;
      int64_t n = job_n_, chunks = job_chunks_;
      lock.unlock();
      int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      if (begin < end) (*fn)(begin, end);
      lock.lock();
      if (++chunks_done_ == job_chunks_ - 1) work_done_.notify_all();
    }
  }
}

}  // namespace edgetrain
