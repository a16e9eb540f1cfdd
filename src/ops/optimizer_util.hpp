// The per-element optimizer updates, shared by edgetrain's fused update ops (optimizer.cpp) and
// ONNX Runtime's sequence optimizers AdamWOptimizer / SGDOptimizerV2 (ort_fused.cpp).
#pragma once

#include <cmath>
#include <cstdint>

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

// One Adam update of `count` elements. Outputs may share memory with their inputs: each element is
// read before it is written.
template <typename T>
void AdamUpdate(ThreadPool& pool, const AdamCoefficients& c, int64_t count, const T* p, const T* g, const T* m1,
                const T* m2, T* p_out, T* m1_out, T* m2_out) {
  const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
  const T one_minus_b1 = static_cast<T>(1 - c.beta1), one_minus_b2 = static_cast<T>(1 - c.beta2);
  const T l2 = static_cast<T>(c.l2), keep_before = static_cast<T>(c.keep_before);
  const T keep_after = static_cast<T>(c.keep_after), step_size = static_cast<T>(c.step_size);
  const T inv_sqrt_bc = static_cast<T>(c.inv_sqrt_bc), eps = static_cast<T>(c.eps_eff);
  pool.ParallelFor(count, kOptimizerGrain, [&](int64_t begin, int64_t end) {
    // Outputs never alias inputs (fresh tensors), so the loop vectorises.
    const T* __restrict pi = p;
    const T* __restrict gi = g;
    const T* __restrict m1i = m1;
    const T* __restrict m2i = m2;
    T* __restrict po = p_out;
    T* __restrict m1o = m1_out;
    T* __restrict m2o = m2_out;
    for (int64_t i = begin; i < end; ++i) {
      const T w = pi[i];
      const T grad = gi[i] + l2 * w;
      const T first = b1 * m1i[i] + one_minus_b1 * grad;
      const T second = b2 * m2i[i] + one_minus_b2 * grad * grad;
      const T denom = std::sqrt(second) * inv_sqrt_bc + eps;
      m1o[i] = first;
      m2o[i] = second;
      po[i] = (w * keep_before - step_size * (first / denom)) * keep_after;
    }
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
