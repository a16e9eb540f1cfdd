// Gradient-check rows for the activation operator family (src/ops/activation.cpp).
#include "gradient_check.hpp"

#include <cmath>

namespace edgetrain::testing {

namespace {

// A transform that moves values within 0.1 of any kink by 0.2 (away from it).
std::function<void(size_t, std::vector<double>&)> AwayFrom(std::vector<double> kinks) {
  return [kinks](size_t, std::vector<double>& values) {
    for (double& v : values)
      for (double k : kinks)
        if (std::abs(v - k) < 0.1) v += v < k ? -0.2 : 0.2;
  };
}

}  // namespace

std::vector<OpCase> ActivationGradCases() {
  const auto away_from_zero = AwayFrom({0.0});
  return {
      {"Relu", "Relu", {In({3, 4})}, {}, 1, "", 1e-5, away_from_zero},
      {"LeakyRelu_default", "LeakyRelu", {In({3, 4})}, {}, 1, "", 1e-5, away_from_zero},
      {"LeakyRelu_alpha", "LeakyRelu", {In({3, 4})}, {{"alpha", Attribute::Float(0.3f)}}, 1, "", 1e-5,
       away_from_zero},
      {"Elu_default", "Elu", {In({3, 4}, -3, 3)}, {}, 1, "", 1e-5, away_from_zero},
      {"Elu_alpha", "Elu", {In({3, 4}, -3, 3)}, {{"alpha", Attribute::Float(0.5f)}}, 1, "", 1e-5, away_from_zero},
      {"Selu_default", "Selu", {In({3, 4}, -3, 3)}, {}, 1, "", 1e-5, away_from_zero},
      {"Selu_alpha_gamma", "Selu", {In({3, 4}, -3, 3)},
       {{"alpha", Attribute::Float(1.5f)}, {"gamma", Attribute::Float(2.0f)}}, 1, "", 1e-5, away_from_zero},
      {"Sigmoid", "Sigmoid", {In({3, 4}, -4, 4)}},
      {"Silu", "Silu", {In({3, 4}, -4, 4)}, {}, 1, kEdgetrainDomain},
      {"HardSigmoid_default", "HardSigmoid", {In({4, 5}, -4, 4)}, {}, 1, "", 1e-5, AwayFrom({-2.5, 2.5})},
      {"HardSigmoid_alpha_beta", "HardSigmoid", {In({4, 5}, -3, 3)},
       {{"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(0.25f)}}, 1, "", 1e-5, AwayFrom({-0.5, 1.5})},
      {"HardSwish", "HardSwish", {In({4, 5}, -5, 5)}, {}, 1, "", 1e-5, AwayFrom({-3.0, 3.0})},
      {"Softplus", "Softplus", {In({3, 4}, -4, 4)}},
      AtOpset(18, {"Mish", "Mish", {In({3, 4}, -4, 4)}}),
      AtOpset(20, {"GeluExact", "Gelu", {In({3, 4}, -3, 3)}}),
      AtOpset(20, {"GeluTanh", "Gelu", {In({3, 4}, -3, 3)}, {{"approximate", Attribute::String("tanh")}}}),
      {"PRelu_same_shape", "PRelu", {In({2, 3}), In({2, 3})}, {}, 1, "", 1e-5, away_from_zero},
      {"PRelu_channel_slope", "PRelu", {In({2, 3, 4}), In({3, 1})}, {}, 1, "", 1e-5, away_from_zero},
      {"PRelu_last_axis_slope", "PRelu", {In({2, 3, 4}), In({4})}, {}, 1, "", 1e-5, away_from_zero},
      {"PRelu_scalar_slope", "PRelu", {In({2, 3, 4}), In({1})}, {}, 1, "", 1e-5, away_from_zero},
  };
}

}  // namespace edgetrain::testing
