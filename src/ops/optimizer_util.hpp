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

// One Adam update of `count` elements. Outputs may share memory with their inputs (p_out == p,
// m1_out == m1, m2_out == m2: the update in place): each element is read before it is written.
template <typename T>
void AdamUpdate(ThreadPool& pool, const AdamCoefficients& c, int64_t count, const T* p, const T* g, const T* m1,
                const T* m2, T* p_out, T* m1_out, T* m2_out) {
  const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
  const T one_minus_b1 = static_cast<T>(1 - c.beta1), one_minus_b2 = static_cast<T>(1 - c.beta2);
  const T l2 = static_cast<T>(c.l2), keep_before = static_cast<T>(c.keep_before);
  const T keep_after = static_cast<T>(c.keep_after), step_size = static_cast<T>(c.step_size);
  const T inv_sqrt_bc = static_cast<T>(c.inv_sqrt_bc), eps = static_cast<T>(c.eps_eff);
  auto element = [&](T w, T grad, T m1v, T m2v, T& w_out, T& m1_out, T& m2_out) {
    grad += l2 * w;
    const T first = b1 * m1v + one_minus_b1 * grad;
    const T second = b2 * m2v + one_minus_b2 * grad * grad;
    const T denom = std::sqrt(second) * inv_sqrt_bc + eps;
    m1_out = first;
    m2_out = second;
    w_out = (w * keep_before - step_size * (first / denom)) * keep_after;
  };
  // Every array is reached through one __restrict pointer, so that the loops vectorise.
  auto in_place = [&](int64_t begin, int64_t end, T* __restrict pi, const T* __restrict gi, T* __restrict m1i,
                      T* __restrict m2i) {
    for (int64_t i = begin; i < end; ++i) element(pi[i], gi[i], m1i[i], m2i[i], pi[i], m1i[i], m2i[i]);
  };
  auto out_of_place = [&](int64_t begin, int64_t end, const T* __restrict pi, const T* __restrict gi,
                          const T* __restrict m1i, const T* __restrict m2i, T* __restrict po, T* __restrict m1o,
                          T* __restrict m2o) {
    for (int64_t i = begin; i < end; ++i) element(pi[i], gi[i], m1i[i], m2i[i], po[i], m1o[i], m2o[i]);
  };
  pool.ParallelFor(count, kOptimizerGrain, [&](int64_t begin, int64_t end) {
    if (p_out == p && m1_out == m1 && m2_out == m2) {
      in_place(begin, end, p_out, g, m1_out, m2_out);
    } else {
      out_of_place(begin, end, p, g, m1, m2, p_out, m1_out, m2_out);
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
