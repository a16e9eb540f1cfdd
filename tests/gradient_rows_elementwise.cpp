// Gradient-check rows for src/ops/elementwise.cpp.
#include "gradient_check.hpp"

#include <cmath>

namespace edgetrain::testing {

namespace {

Tensor Scalar(double value) { return Tensor::Scalar<double>(value); }

Tensor Mask(const std::vector<bool>& values, Shape shape) { return Tensor::FromVector<bool>(values, std::move(shape)); }

}  // namespace

std::vector<OpCase> ElementwiseGradCases() {
  auto away_from_zero = [](size_t, std::vector<double>& v) {
    for (double& x : v) x = x < 0 ? x - 0.5 : x + 0.5;
  };
  // Clip bounds at -0.5 and 0.5: keep x at least 0.1 away from both.
  auto away_from_half = [](size_t, std::vector<double>& v) {
    for (double& x : v)
      if (std::abs(std::abs(x) - 0.5) < 0.1) x += x < 0 ? -0.2 : 0.2;
  };
  const Attribute to_double = Attribute::Int(static_cast<int64_t>(DataType::kFloat64));
  return {
      {"Add_same_shape", "Add", {In({2, 3}), In({2, 3})}},
      {"Add_broadcast_row", "Add", {In({4, 3}), In({3})}},
      {"Add_broadcast_both", "Add", {In({4, 1}), In({1, 3})}},
      {"Sub_broadcast_scalar", "Sub", {In({2, 3}), In({})}},
      {"Mul_broadcast_keepdim", "Mul", {In({2, 3, 4}), In({2, 1, 4})}},
      {"Div_broadcast", "Div", {In({3, 4}), In({4})}, {}, 1, "", 1e-5, away_from_zero},
      {"Neg", "Neg", {In({5})}},
      {"Abs", "Abs", {In({2, 5})}, {}, 1, "", 1e-5, away_from_zero},
      {"Atan", "Atan", {In({2, 5}, -3, 3)}},
      {"Cos", "Cos", {In({2, 5}, -3, 3)}},
      {"Sin", "Sin", {In({2, 5}, -3, 3)}},
      {"Erf", "Erf", {In({2, 5}, -2, 2)}},
      {"Exp", "Exp", {In({2, 5}, -2, 2)}},
      {"Log", "Log", {In({2, 5}, 0.5, 3)}},
      {"Reciprocal", "Reciprocal", {In({2, 5})}, {}, 1, "", 1e-5, away_from_zero},
      {"Sqrt", "Sqrt", {In({2, 5}, 0.5, 3)}},
      {"Tanh", "Tanh", {In({2, 5}, -3, 3)}},
      {"Pow_both", "Pow", {In({3, 4}, 0.5, 2), In({3, 4}, -2, 2)}},
      {"Pow_broadcast_exponent", "Pow", {In({2, 3, 4}, 0.5, 2), In({4}, -2, 3)}},
      {"Pow_scalar_exponent", "Pow", {In({3, 4}, 0.5, 2), In({}, 1, 3)}},
      {"Pow_constant_square", "Pow", {In({3, 4}, -2, 2), Const(Scalar(2.0))}},
      {"Max_two", "Max", {In({3, 4}), In({3, 4})}},
      {"Max_three_broadcast", "Max", {In({2, 3}), In({3}), In({2, 1})}},
      {"Max_single", "Max", {In({2, 3})}},
      {"Min_two", "Min", {In({3, 4}), In({3, 4})}},
      {"Min_three_broadcast", "Min", {In({2, 1, 4}), In({3, 1}), In({})}},
      {"Where_same_shape", "Where",
       {Const(Mask({true, false, false, true, true, false}, {2, 3})), In({2, 3}), In({2, 3})}},
      {"Where_broadcast", "Where", {Const(Mask({true, false, true}, {3})), In({2, 3}), In({2, 1})}},
      {"Where_broadcast_condition", "Where", {Const(Mask({true, false}, {2, 1})), In({3}), In({2, 3})}},
      {"Clip_min_max", "Clip", {In({3, 4}), Const(Scalar(-0.5)), Const(Scalar(0.5))}, {}, 1, "", 1e-5,
       away_from_half},
      {"Clip_max_only", "Clip", {In({3, 4}), Omitted(), Const(Scalar(0.5))}, {}, 1, "", 1e-5, away_from_half},
      {"Clip_min_only", "Clip", {In({3, 4}), Const(Scalar(-0.5))}, {}, 1, "", 1e-5, away_from_half},
      {"Clip_no_bounds", "Clip", {In({3, 4})}},
      {"Cast_double_to_double", "Cast", {In({2, 3})}, {{"to", to_double}}},
      {"CastLike_double_to_double", "CastLike", {In({2, 3}), Const(Scalar(0.0))}},
      {"Identity", "Identity", {In({2, 3})}},
      {"Sum_two", "Sum", {In({3, 4}), In({3, 4})}},
      {"Sum_three_broadcast", "Sum", {In({2, 3}), In({3}), In({2, 1})}},
      {"Sum_single", "Sum", {In({2, 3})}},
  };
}

}  // namespace edgetrain::testing
