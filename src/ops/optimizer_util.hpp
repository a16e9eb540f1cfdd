// The per-element optimizer updates, shared by edgetrain's fused update ops (optimizer.cpp) and
// ONNX Runtime's sequence optimizers AdamWOptimizer / SGDOptimizerV2 (ort_fused.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/cpu_features.hpp"
#include "core/threading.hpp"

namespace edgetrain {

// Elements per parallel chunk of an update.
inline constexpr int64_t kOptimizerGrain = 1 << 14;

struct AdamHyperparameters {
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, weight_decay = 0;
  bool correct_bias = true;
  int64_t mode = 0;  // 0: torch.optim.AdamW; 1: Hugging Face AdamW (ORT's mode 1); 2: Adam, L2 weight decay
};

// All three modes are written as
//   g += l2*p;  m1 = b1*m1 + (1-b1)*g;  m2 = b2*m2 + (1-b2)*g^2;
//   p' = (p*keep_before - (lr/ac) * m1 / (sqrt(m2)/sqrt(bc) + eps_eff)) * keep_after
// with ac, bc the bias corrections and eps_eff = eps/sqrt(bc) in mode 1 (ORT's formula rearranged).
struct AdamCoefficients {
  double beta1 = 0.9, beta2 = 0.999;
  double l2 = 0, keep_before = 1, keep_after = 1;
  double step_size = 0, inv_sqrt_bc = 1, eps_eff = 1e-8;
};

// `t` is the power of the bias corrections: the number of this update, counting from 1.
inline AdamCoefficients MakeAdamCoefficients(const AdamHyperparameters& h, double lr, double t) {
  AdamCoefficients c;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  const double ac = h.correct_bias ? 1 - std::pow(h.beta1, t) : 1.0;
  const double bc = h.correct_bias ? 1 - std::pow(h.beta2, t) : 1.0;
  c.step_size = lr / ac;
  c.inv_sqrt_bc = 1 / std::sqrt(bc);
  c.eps_eff = h.mode == 1 ? h.epsilon * c.inv_sqrt_bc : h.epsilon;
  if (h.mode == 0) c.keep_before = 1 - lr * h.weight_decay;
  if (h.mode == 1) c.keep_after = 1 - lr * h.weight_decay;
  if (h.mode == 2) c.l2 = h.weight_decay;
  return c;
}

namespace optimizer_detail {

#if defined(__GNUC__)
#define EDGETRAIN_OPTIMIZER_INLINE inline __attribute__((always_inline))
#else
#define EDGETRAIN_OPTIMIZER_INLINE inline
#endif

// The coefficients as values of the element type (passed by value so that loops keep them in registers).
template <typename T>
struct AdamConstants {
  T b1, b2, one_minus_b1, one_minus_b2, l2, keep_before, keep_after, step_size, inv_sqrt_bc, eps;
};

template <typename T>
EDGETRAIN_OPTIMIZER_INLINE void AdamElement(const AdamConstants<T>& k, T w, T grad, T m1, T m2, T& w_out, T& m1_out,
                                            T& m2_out) {
  grad += k.l2 * w;
  const T first = k.b1 * m1 + k.one_minus_b1 * grad;
  const T second = k.b2 * m2 + k.one_minus_b2 * grad * grad;
  const T denom = std::sqrt(second) * k.inv_sqrt_bc + k.eps;
  m1_out = first;
  m2_out = second;
  w_out = (w * k.keep_before - k.step_size * (first / denom)) * k.keep_after;
}

// Every array is reached through one __restrict pointer, so that the loops vectorise.
template <typename T>
EDGETRAIN_OPTIMIZER_INLINE void AdamInPlace(const AdamConstants<T> k, int64_t begin, int64_t end, T* __restrict p,
                                            const T* __restrict g, T* __restrict m1, T* __restrict m2) {
  for (int64_t i = begin; i < end; ++i) AdamElement(k, p[i], g[i], m1[i], m2[i], p[i], m1[i], m2[i]);
}

template <typename T>
EDGETRAIN_OPTIMIZER_INLINE void AdamOutOfPlace(const AdamConstants<T> k, int64_t begin, int64_t end,
                                               const T* __restrict p, const T* __restrict g, const T* __restrict m1,
                                               const T* __restrict m2, T* __restrict p_out, T* __restrict m1_out,
                                               T* __restrict m2_out) {
  for (int64_t i = begin; i < end; ++i) AdamElement(k, p[i], g[i], m1[i], m2[i], p_out[i], m1_out[i], m2_out[i]);
}

template <typename T>
EDGETRAIN_OPTIMIZER_INLINE void AdamRangeImpl(const AdamConstants<T> k, int64_t begin, int64_t end, const T* p,
                                              const T* g, const T* m1, const T* m2, T* p_out, T* m1_out, T* m2_out) {
  if (p_out == p && m1_out == m1 && m2_out == m2) {
    AdamInPlace(k, begin, end, p_out, g, m1_out, m2_out);
  } else {
    AdamOutOfPlace(k, begin, end, p, g, m1, m2, p_out, m1_out, m2_out);
  }
}

template <typename T>
void AdamRange(const AdamConstants<T> k, int64_t begin, int64_t end, const T* p, const T* g, const T* m1, const T* m2,
               T* p_out, T* m1_out, T* m2_out) {
  AdamRangeImpl(k, begin, end, p, g, m1, m2, p_out, m1_out, m2_out);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__AVX2__)
#define EDGETRAIN_OPTIMIZER_AVX2_DISPATCH 1
// The same loops compiled for AVX2/FMA, chosen at run time when the CPU has them.
template <typename T>
__attribute__((target("avx2,fma"))) void AdamRangeAvx2(const AdamConstants<T> k, int64_t begin, int64_t end,
                                                       const T* p, const T* g, const T* m1, const T* m2, T* p_out,
                                                       T* m1_out, T* m2_out) {
  AdamRangeImpl(k, begin, end, p, g, m1, m2, p_out, m1_out, m2_out);
}
#endif

}  // namespace optimizer_detail

// One Adam update of `count` elements. Outputs may share memory with their inputs (p_out == p,
// m1_out == m1, m2_out == m2: the update in place): each element is read before it is written.
template <typename T>
void AdamUpdate(ThreadPool& pool, const AdamCoefficients& c, int64_t count, const T* p, const T* g, const T* m1,
                const T* m2, T* p_out, T* m1_out, T* m2_out) {
  using namespace optimizer_detail;
  const AdamConstants<T> k{static_cast<T>(c.beta1),       static_cast<T>(c.beta2),      static_cast<T>(1 - c.beta1),
                           static_cast<T>(1 - c.beta2),   static_cast<T>(c.l2),         static_cast<T>(c.keep_before),
                           static_cast<T>(c.keep_after),  static_cast<T>(c.step_size),  static_cast<T>(c.inv_sqrt_bc),
                           static_cast<T>(c.eps_eff)};
#if defined(EDGETRAIN_OPTIMIZER_AVX2_DISPATCH)
  auto range = CpuHasAvx2Fma() ? AdamRangeAvx2<T> : AdamRange<T>;
#else
  auto range = AdamRange<T>;
#endif
  pool.ParallelFor(count, kOptimizerGrain, [&](int64_t begin, int64_t end) {
    range(k, begin, end, p, g, m1, m2, p_out, m1_out, m2_out);
  });
}

// Plain SGD of `count` elements: p' = p - lr * (g + weight_decay * p).
template <typename T>
void SgdUpdate(ThreadPool& pool, double lr, double weight_decay, int64_t count, const T* p, const T* g, T* p_out) {
  const T rate = static_cast<T>(lr), wd = static_cast<T>(weight_decay);
  pool.ParallelFor(count, kOptimizerGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p_out[i] = p[i] - rate * (g[i] + wd * p[i]);
  });
}

}  // namespace edgetrain
