// Numerically stable softmax / log-softmax over the middle dimension of an [outer, n, inner] view.
// Shared by softmax.cpp (Softmax, LogSoftmax) and loss.cpp (SoftmaxCrossEntropyLoss).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/threading.hpp"

namespace edgetrain {

enum class SoftmaxMode { kSoftmax, kLogSoftmax };

template <typename T>
void SoftmaxAlongAxis(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, SoftmaxMode mode,
                      ThreadPool& pool) {
  if (n == 0) return;
  const bool log_mode = mode == SoftmaxMode::kLogSoftmax;
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / n);
    pool.ParallelFor(outer, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* in = x + o * n;
        T* out = y + o * n;
        T max_value = in[0];
        for (int64_t j = 1; j < n; ++j) max_value = std::max(max_value, in[j]);
        double sum = 0.0;
        if (log_mode) {
          for (int64_t j = 0; j < n; ++j) sum += std::exp(in[j] - max_value);
          const T log_sum = static_cast<T>(std::log(sum));
          for (int64_t j = 0; j < n; ++j) out[j] = (in[j] - max_value) - log_sum;
        } else {
          for (int64_t j = 0; j < n; ++j) {
            out[j] = std::exp(in[j] - max_value);
            sum += out[j];
          }
          const T scale = static_cast<T>(1.0 / sum);
          for (int64_t j = 0; j < n; ++j) out[j] *= scale;
        }
      }
    });
    return;
  }
  // inner > 1: a block of contiguous inner positions is normalised together, row by row.
  constexpr int64_t kBlock = 64;
  const int64_t blocks_per_outer = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / (n * kBlock));
  pool.ParallelFor(outer * blocks_per_outer, grain, [&](int64_t begin, int64_t end) {
    std::array<T, kBlock> max_value;
    std::array<double, kBlock> sum;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t o = unit / blocks_per_outer;
      const int64_t i0 = (unit % blocks_per_outer) * kBlock;
      const int64_t width = std::min(kBlock, inner - i0);
      const T* in = x + o * n * inner + i0;
      T* out = y + o * n * inner + i0;
      for (int64_t i = 0; i < width; ++i) {
        max_value[i] = in[i];
        sum[i] = 0.0;
      }
      for (int64_t j = 1; j < n; ++j) {
        for (int64_t i = 0; i < width; ++i) max_value[i] = std::max(max_value[i], in[j * inner + i]);
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < width; ++i) {
          const T e = std::exp(in[j * inner + i] - max_value[i]);
          if (!log_mode) out[j * inner + i] = e;
          sum[i] += e;
        }
      }
      for (int64_t i = 0; i < width; ++i) {
        sum[i] = log_mode ? std::log(sum[i]) : 1.0 / sum[i];
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < width; ++i) {
          if (log_mode) out[j * inner + i] = (in[j * inner + i] - max_value[i]) - static_cast<T>(sum[i]);
          else out[j * inner + i] *= static_cast<T>(sum[i]);
        }
      }
    }
  });
}

}  // namespace edgetrain
