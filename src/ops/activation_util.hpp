// The element functions of the activations, looked up by op type with their attribute defaults.
// Shared by the ONNX activation kernels (activation.cpp) and ONNX Runtime's FusedGemm
// (ort_fused.cpp), which names its activation in an attribute.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

namespace edgetrain {

template <typename C>
C Sigmoid(C x) {
  // Split by sign so exp never overflows.
  if (x >= 0) return C{1} / (C{1} + std::exp(-x));
  C e = std::exp(x);
  return e / (C{1} + e);
}

template <typename C>
C Softplus(C x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// attr(name, fallback): the value of an activation's float attribute.
using ActivationAttr = std::function<double(const char* name, double fallback)>;

// Calls fn(element) with the element function (a generic lambda of one float value) of activation
// `op` and returns true; returns false when `op` is none of them. Besides the ONNX activations this
// knows ONNX Runtime's ParametricSoftplus and ScaledTanh (FusedGemm accepts them).
template <typename Fn>
bool VisitActivation(const std::string& op, const ActivationAttr& attr, Fn&& fn) {
  if (op == "Relu") {
    fn([](auto x) { return x > decltype(x){0} ? x : decltype(x){0}; });
  } else if (op == "Tanh") {
    fn([](auto x) { return std::tanh(x); });
  } else if (op == "Sigmoid") {
    fn([](auto x) { return Sigmoid(x); });
  } else if (op == "LeakyRelu") {
    fn([alpha = attr("alpha", 0.01)](auto x) { return x < 0 ? static_cast<decltype(x)>(alpha) * x : x; });
  } else if (op == "Elu") {
    fn([alpha = attr("alpha", 1.0)](auto x) {
      using C = decltype(x);
      return x < 0 ? static_cast<C>(alpha) * (std::exp(x) - C{1}) : x;
    });
  } else if (op == "Celu") {
    fn([alpha = attr("alpha", 1.0)](auto x) {
      using C = decltype(x);
      const C a = static_cast<C>(alpha);
      return std::max(C{0}, x) + std::min(C{0}, a * (std::exp(x / a) - C{1}));
    });
  } else if (op == "Selu") {
    fn([alpha = attr("alpha", 1.67326319217681884765625), gamma = attr("gamma", 1.05070102214813232421875)](auto x) {
      using C = decltype(x);
      return static_cast<C>(gamma) * (x > 0 ? x : static_cast<C>(alpha) * (std::exp(x) - C{1}));
    });
  } else if (op == "HardSigmoid") {
    fn([alpha = attr("alpha", 0.2), beta = attr("beta", 0.5)](auto x) {
      using C = decltype(x);
      return std::clamp(static_cast<C>(alpha) * x + static_cast<C>(beta), C{0}, C{1});
    });
  } else if (op == "HardSwish") {
    fn([](auto x) {
      using C = decltype(x);
      return x * std::clamp(x / C{6} + C{0.5}, C{0}, C{1});
    });
  } else if (op == "Softplus") {
    fn([](auto x) { return Softplus(x); });
  } else if (op == "Softsign") {
    fn([](auto x) { return x / (decltype(x){1} + std::abs(x)); });
  } else if (op == "ThresholdedRelu") {
    fn([alpha = attr("alpha", 1.0)](auto x) { return x > static_cast<decltype(x)>(alpha) ? x : decltype(x){0}; });
  } else if (op == "ParametricSoftplus") {  // alpha * softplus(beta * x)
    fn([alpha = attr("alpha", 1.0), beta = attr("beta", 1.0)](auto x) {
      using C = decltype(x);
      return static_cast<C>(alpha) * Softplus(static_cast<C>(beta) * x);
    });
  } else if (op == "ScaledTanh") {  // alpha * tanh(beta * x)
    fn([alpha = attr("alpha", 1.0), beta = attr("beta", 1.0)](auto x) {
      using C = decltype(x);
      return static_cast<C>(alpha) * std::tanh(static_cast<C>(beta) * x);
    });
  } else {
    return false;
  }
  return true;
}

}  // namespace edgetrain
