// MaxPool's windows: the input taps of every output position, and the maximum of a window (pool.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace edgetrain::pool_detail {

// For every output position, the row-major spatial offsets of the input taps its window covers
// (taps outside the input are skipped), and how many taps fall inside the padded input.
struct PoolWindows {
  std::vector<int64_t> begin;  // output o uses offsets[begin[o] .. begin[o+1])
  std::vector<int64_t> offsets;
  std::vector<int64_t> padded_counts;
  int64_t uniform_taps = 0;  // the tap count of every window when they all have the same, else 0

  // The input-plane offsets that output position `o` reads; a fixed `Extent` needs uniform_taps == Extent.
  template <size_t Extent = std::dynamic_extent>
  std::span<const int64_t, Extent> Taps(int64_t o) const {
    if constexpr (Extent == std::dynamic_extent) {
      return {offsets.data() + begin[o], static_cast<size_t>(begin[o + 1] - begin[o])};
    } else {
      return std::span<const int64_t, Extent>(offsets.data() + o * static_cast<int64_t>(Extent), Extent);
    }
  }
};

// The largest value among `taps` of `plane` (lowest for an empty window) and its offset (the first
// tap, or 0, when no value beats the lowest); MaxPool and its gradient pick the same tap.
template <typename T, size_t Extent>
std::pair<T, int64_t> WindowMax(const T* plane, std::span<const int64_t, Extent> taps) {
  T best = std::numeric_limits<T>::lowest();
  if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
  int64_t best_offset = taps.empty() ? 0 : taps[0];
  for (int64_t tap : taps) {
    if constexpr (Extent == std::dynamic_extent) {
      if (plane[tap] > best) {
        best = plane[tap];
        best_offset = tap;
      }
    } else {
      // Unrolled windows select without branches (the branch on random data mispredicts).
      const int64_t better = -static_cast<int64_t>(plane[tap] > best);
      best_offset ^= (best_offset ^ tap) & better;
      best = std::max(best, plane[tap]);
    }
  }
  return {best, best_offset};
}

#if defined(__GNUC__)
// WindowMax of four windows of the table at a time in vector lanes, with WindowMax's comparisons per lane: best[i],
// offset[i] for windows first + i. MaxPool uses it on WebAssembly, where WindowMax's scalar selects took 16 ns per
// window in Node.js 20 (2 ns natively, where this is no faster).
template <size_t Extent>
void WindowMaxima4(const float* plane, const PoolWindows& windows, int64_t first, float* best, int64_t* offset) {
  typedef float F4 __attribute__((vector_size(16)));
  typedef int32_t M4 __attribute__((vector_size(16)));
  typedef int64_t O4 __attribute__((vector_size(32)));
  constexpr int64_t e = static_cast<int64_t>(Extent);
  const int64_t* taps = windows.offsets.data() + first * e;
  F4 top = F4{} - std::numeric_limits<float>::infinity();
  O4 at = {taps[0], taps[e], taps[2 * e], taps[3 * e]};
  for (int64_t t = 0; t < e; ++t) {
    const O4 tap = {taps[t], taps[e + t], taps[2 * e + t], taps[3 * e + t]};
    const F4 v = {plane[tap[0]], plane[tap[1]], plane[tap[2]], plane[tap[3]]};
    const M4 better = v > top;
    top = reinterpret_cast<F4>((reinterpret_cast<M4>(v) & better) | (reinterpret_cast<M4>(top) & ~better));
    const O4 wide = __builtin_convertvector(better, O4);
    at = (tap & wide) | (at & ~wide);
  }
  __builtin_memcpy(best, &top, sizeof top);
  __builtin_memcpy(offset, &at, sizeof at);
}
#endif

}  // namespace edgetrain::pool_detail
