// Gradient-check rows for the normalization operator family (BatchNormalization,
// LayerNormalization, InstanceNormalization) and Dropout. Dropout with ratio > 0 draws a new mask
// on every run, so it is checked exactly in dropout_gradient_test.cpp instead.
#include "gradient_check.hpp"

namespace edgetrain::testing {

namespace {

Attribute I(int64_t v) { return Attribute::Int(v); }
Attribute F(float v) { return Attribute::Float(v); }

CaseInput Scalar(double value) { return Const(Tensor::Scalar<double>(value)); }
CaseInput Flag(bool value) { return Const(Tensor::Scalar<bool>(value)); }

// Scale near 1 and variance away from 0.
CaseInput ScaleIn(Shape shape) { return In(std::move(shape), 0.5, 1.5); }
CaseInput VarIn(Shape shape) { return In(std::move(shape), 0.5, 1.5); }

// BatchNormalization(X, scale, B, mean, var) in training mode. ONNX shape inference wants all three
// outputs; momentum 1 keeps the running statistics (which get no gradient) independent of X.
OpCase BatchNormTraining(std::string name, Shape x) {
  const int64_t c = x[1];
  std::vector<double> mean(static_cast<size_t>(c)), var(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    mean[i] = 0.1 * static_cast<double>(i);
    var[i] = 1.0 + 0.2 * static_cast<double>(i);
  }
  return {name,
          "BatchNormalization",
          {In(x), ScaleIn({c}), In({c}), Const(Tensor::FromVector<double>(mean, {c})),
           Const(Tensor::FromVector<double>(var, {c}))},
          {{"training_mode", I(1)}, {"epsilon", F(1e-3f)}, {"momentum", F(1.0f)}},
          3};
}

}  // namespace

std::vector<OpCase> NormalizationGradCases() {
  return {
      BatchNormTraining("BatchNormTraining2d", {3, 2, 3, 2}),
      BatchNormTraining("BatchNormTraining1d", {4, 3, 5}),
      BatchNormTraining("BatchNormTrainingNoSpatial", {5, 3}),
      {"BatchNormInference", "BatchNormalization", {In({2, 3, 2, 2}), ScaleIn({3}), In({3}), In({3}), VarIn({3})},
       {{"epsilon", F(1e-3f)}}},
      {"BatchNormInferenceMode0", "BatchNormalization", {In({2, 3, 4}), ScaleIn({3}), In({3}), In({3}), VarIn({3})},
       {{"training_mode", I(0)}}},

      {"LayerNormLastAxis", "LayerNormalization", {In({3, 4}), ScaleIn({4}), In({4})}, {{"axis", I(-1)}}},
      {"LayerNormAxis1", "LayerNormalization", {In({2, 3, 4}), ScaleIn({3, 4}), In({3, 4})},
       {{"axis", I(1)}, {"epsilon", F(1e-3f)}}},
      {"LayerNormNoBias", "LayerNormalization", {In({2, 5}), ScaleIn({5})}},
      {"LayerNormAxis1NoBias", "LayerNormalization", {In({2, 2, 3}), ScaleIn({2, 3}), Omitted()}, {{"axis", I(1)}}},
      {"LayerNormBroadcastScale", "LayerNormalization", {In({2, 3, 4}), ScaleIn({1, 4}), In({4})}, {{"axis", I(1)}}},
      // Mean and InvStdDev are float64 outputs here, so the loss depends on them too.
      {"LayerNormStatsOutputs", "LayerNormalization", {In({2, 3, 4}), ScaleIn({4}), In({4})},
       {{"axis", I(-1)}, {"stash_type", I(11)}}, 3},
      // float32 statistics outputs (not in the loss): the rule recomputes them in float64.
      {"LayerNormFloat32Stash", "LayerNormalization", {In({3, 4}), ScaleIn({4}), In({4})}, {}, 3},

      // GroupNormalization: scale and bias per channel (opset 21) or per group (18).
      AtOpset(21, {"GroupNorm2d", "GroupNormalization", {In({2, 4, 3, 2}), ScaleIn({4}), In({4})},
                   {{"num_groups", I(2)}, {"epsilon", F(1e-3f)}}}),
      AtOpset(21, {"GroupNormNoSpatial", "GroupNormalization", {In({3, 6}), ScaleIn({6}), In({6})},
                   {{"num_groups", I(3)}}}),
      AtOpset(18, {"GroupNormPerGroup18", "GroupNormalization", {In({2, 6, 4}), ScaleIn({3}), In({3})},
                   {{"num_groups", I(3)}}}),
      {"InstanceNorm1d", "InstanceNormalization", {In({2, 3, 4}), ScaleIn({3}), In({3})}},
      {"InstanceNorm2d", "InstanceNormalization", {In({2, 2, 3, 3}), ScaleIn({2}), In({2})},
       {{"epsilon", F(1e-3f)}}},

      {"DropoutNoTrainingInput", "Dropout", {In({3, 4})}},
      {"DropoutInference", "Dropout", {In({3, 4}), Scalar(0.5), Flag(false)}, {}, 2},
      {"DropoutTrainingRatio0", "Dropout", {In({3, 4}), Scalar(0.0), Flag(true)}, {}, 2},
  };
}

}  // namespace edgetrain::testing
