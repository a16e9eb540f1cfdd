// Gradient-check rows for src/ops/elementwise.cpp and src/ops/activation.cpp.
#include "gradient_check.hpp"

namespace edgetrain::testing {

std::vector<GradCase> ElementwiseGradCases() {
  auto away_from_zero = [](size_t, std::vector<double>& v) {
    for (double& x : v) x = x < 0 ? x - 0.5 : x + 0.5;
  };
  return {
      {"Add_same_shape", "Add", {In({2, 3}), In({2, 3})}},
      {"Add_broadcast_row", "Add", {In({4, 3}), In({3})}},
      {"Add_broadcast_both", "Add", {In({4, 1}), In({1, 3})}},
      {"Sub_broadcast_scalar", "Sub", {In({2, 3}), In({})}},
      {"Mul_broadcast_keepdim", "Mul", {In({2, 3, 4}), In({2, 1, 4})}},
      {"Div_broadcast", "Div", {In({3, 4}), In({4})}, {}, 1, "", 1e-5, away_from_zero},
      {"Neg", "Neg", {In({5})}},
  };
}

}  // namespace edgetrain::testing
