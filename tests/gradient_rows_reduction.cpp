// Gradient-check rows for the reduction operator family: Reduce*, CumSum, TopK, Softmax,
// LogSoftmax and the two classification losses.
#include <algorithm>

#include "gradient_check.hpp"

namespace edgetrain::testing {

namespace {

Attribute I(int64_t v) { return Attribute::Int(v); }
Attribute Is(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
Attribute S(const char* v) { return Attribute::String(v); }

CaseInput Labels64(std::vector<int64_t> values, Shape shape) {
  return Const(Tensor::FromVector<int64_t>(values, std::move(shape)));
}
CaseInput Labels32(std::vector<int32_t> values, Shape shape) {
  return Const(Tensor::FromVector<int32_t>(values, std::move(shape)));
}
CaseInput ClassWeights(std::vector<double> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Const(Tensor::FromVector<double>(values, {n}));
}

// For a [rows, width] input reduced along its last axis: makes the first two entries of every row
// its common maximum, a two-way tie (central differences then give 1/2 to each).
void TieRowMaxima(std::vector<double>& values, int64_t width) {
  for (size_t row = 0; row + width <= values.size(); row += width) {
    const double top = *std::max_element(values.begin() + row, values.begin() + row + width) + 0.25;
    values[row] = values[row + 1] = top;
  }
}

// Spreads values at least 0.08 apart (a permutation of 0.1 steps plus small noise), so that no
// ties or near-ties within the finite-difference step occur.
void Distinct(std::vector<double>& values) {
  const size_t n = values.size();
  for (size_t k = 0; k < n; ++k) values[k] = values[k] * 0.01 + 0.1 * static_cast<double>((k * 7) % n);
}

}  // namespace

std::vector<OpCase> ReductionGradCases() {
  std::vector<OpCase> rows = {
      // ReduceSum: axes as input 1 (opset 13+).
      {"ReduceSumAxis1KeepDims", "ReduceSum", {In({2, 3, 4}), Ints({1})}},
      {"ReduceSumAxesNoKeepDims", "ReduceSum", {In({2, 3, 4}), Ints({0, -1})}, {{"keepdims", I(0)}}},
      {"ReduceSumAllNoKeepDims", "ReduceSum", {In({2, 3})}, {{"keepdims", I(0)}}},
      {"ReduceSumNoopEmptyAxes", "ReduceSum", {In({2, 3})}, {{"noop_with_empty_axes", I(1)}}},

      // ReduceMean (axes attribute below opset 18).
      {"ReduceMeanAxis1", "ReduceMean", {In({2, 3, 4})}, {{"axes", Is({1})}}},
      {"ReduceMeanAxesNoKeepDims", "ReduceMean", {In({2, 3, 4})}, {{"axes", Is({0, 2})}, {"keepdims", I(0)}}},
      {"ReduceMeanAll", "ReduceMean", {In({3, 4})}},
      {"ReduceMeanAllNoKeepDims", "ReduceMean", {In({3, 4})}, {{"keepdims", I(0)}}},
      {"ReduceMeanNoopEmptyAxes", "ReduceMean", {In({3, 4})}, {{"noop_with_empty_axes", I(1)}}},

      // ReduceMax / ReduceMin: distinct values, and two-way ties shared evenly.
      {"ReduceMaxAxis1", "ReduceMax", {In({2, 5, 3})}, {{"axes", Is({1})}}, 1, "", 1e-5,
       [](size_t, std::vector<double>& v) { Distinct(v); }},
      {"ReduceMaxAxesNoKeepDims", "ReduceMax", {In({2, 3, 4})}, {{"axes", Is({0, 2})}, {"keepdims", I(0)}}, 1, "",
       1e-5, [](size_t, std::vector<double>& v) { Distinct(v); }},
      {"ReduceMaxAll", "ReduceMax", {In({3, 4})}, {{"keepdims", I(0)}}, 1, "", 1e-5,
       [](size_t, std::vector<double>& v) { Distinct(v); }},
      {"ReduceMaxTiesSplitEvenly", "ReduceMax", {In({3, 4})}, {{"axes", Is({-1})}, {"keepdims", I(0)}}, 1, "", 1e-5,
       [](size_t, std::vector<double>& v) { TieRowMaxima(v, 4); }},
      {"ReduceMinAxis0", "ReduceMin", {In({4, 3})}, {{"axes", Is({0})}}, 1, "", 1e-5,
       [](size_t, std::vector<double>& v) { Distinct(v); }},
      {"ReduceMaxNoopEmptyAxes", "ReduceMax", {In({2, 3})}, {{"noop_with_empty_axes", I(1)}}},

      // ReduceL2 / ReduceL1 / ReduceSumSquare / ReduceLogSumExp / ReduceLogSum.
      {"ReduceL2Axis1", "ReduceL2", {In({2, 3, 4})}, {{"axes", Is({1})}}},
      {"ReduceL2AllNoKeepDims", "ReduceL2", {In({3, 4})}, {{"keepdims", I(0)}}},
      {"ReduceL2AxesNoKeepDims", "ReduceL2", {In({2, 3, 4})}, {{"axes", Is({0, 2})}, {"keepdims", I(0)}}},
      {"ReduceL1Axis1", "ReduceL1", {In({2, 3, 4})}, {{"axes", Is({1})}, {"keepdims", I(0)}}, 1, "", 1e-5,
       [](size_t, std::vector<double>& v) {
         for (double& x : v) x = x < 0 ? x - 0.1 : x + 0.1;
       }},
      {"ReduceSumSquareAxis2", "ReduceSumSquare", {In({2, 3, 4})}, {{"axes", Is({2})}}},
      {"ReduceSumSquareAxesNoKeepDims", "ReduceSumSquare", {In({2, 3, 4})},
       {{"axes", Is({-1, 0})}, {"keepdims", I(0)}}},
      {"ReduceSumSquareAll", "ReduceSumSquare", {In({3, 4})}},
      {"ReduceLogSumExpAxis1", "ReduceLogSumExp", {In({2, 3, 4}, -3.0, 3.0)}, {{"axes", Is({1})}}},
      {"ReduceLogSumExpAxesNoKeepDims", "ReduceLogSumExp", {In({2, 3, 4}, -3.0, 3.0)},
       {{"axes", Is({0, 2})}, {"keepdims", I(0)}}},
      {"ReduceLogSumExpAll", "ReduceLogSumExp", {In({3, 4}, -3.0, 3.0)}, {{"keepdims", I(0)}}},
      {"ReduceLogSumAxis1", "ReduceLogSum", {In({2, 3, 4}, 0.5, 2.0)}, {{"axes", Is({1})}, {"keepdims", I(0)}}},

      // Opset 18: the axes of every Reduce* are an input; empty or absent axes reduce everything unless noop.
      AtOpset(18, {"ReduceMean18Axis1", "ReduceMean", {In({2, 3, 4}), Ints({1})}}),
      AtOpset(18, {"ReduceMean18AxesNoKeepDims", "ReduceMean", {In({2, 3, 4}), Ints({0, -1})}, {{"keepdims", I(0)}}}),
      AtOpset(18, {"ReduceMean18EmptyAxesInput", "ReduceMean", {In({3, 4}), Ints({})}, {{"keepdims", I(0)}}}),
      AtOpset(18, {"ReduceMean18NoopEmptyAxes", "ReduceMean", {In({3, 4})}, {{"noop_with_empty_axes", I(1)}}}),
      AtOpset(18, {"ReduceMax18Axis1", "ReduceMax", {In({2, 5, 3}), Ints({1})}, {}, 1, "", 1e-5,
                   [](size_t, std::vector<double>& v) { Distinct(v); }}),
      AtOpset(20, {"ReduceMin20AxesNoKeepDims", "ReduceMin", {In({2, 3, 4}), Ints({0, 2})}, {{"keepdims", I(0)}}, 1,
                   "", 1e-5, [](size_t, std::vector<double>& v) { Distinct(v); }}),
      AtOpset(18, {"ReduceL2_18Axis1", "ReduceL2", {In({2, 3, 4}), Ints({1})}}),
      AtOpset(18, {"ReduceSumSquare18Axis2", "ReduceSumSquare", {In({2, 3, 4}), Ints({2})}}),
      AtOpset(18, {"ReduceLogSumExp18Axes", "ReduceLogSumExp", {In({2, 3, 4}, -3.0, 3.0), Ints({0, 2})},
                   {{"keepdims", I(0)}}}),
      AtOpset(18, {"ReduceLogSum18Axis1", "ReduceLogSum", {In({2, 3, 4}, 0.5, 2.0), Ints({1})}}),

      // CumSum: axis input, exclusive/reverse.
      {"CumSumAxis1", "CumSum", {In({2, 4, 3}), Ints({1})}},
      {"CumSumExclusiveReverse", "CumSum", {In({2, 5}), Ints({-1})}, {{"exclusive", I(1)}, {"reverse", I(1)}}},

      // TopK: values' gradient scattered back to the chosen positions.
      {"TopKLastAxis", "TopK", {In({3, 5}), Ints({2})}, {}, 2, "", 1e-5,
       [](size_t, std::vector<double>& v) { Distinct(v); }},
      {"TopKAxis0Smallest", "TopK", {In({5, 2, 3}), Ints({3})}, {{"axis", I(0)}, {"largest", I(0)}}, 2, "", 1e-5,
       [](size_t, std::vector<double>& v) { Distinct(v); }},

      // Softmax / LogSoftmax (opset 13+ single-axis semantics).
      {"SoftmaxLastAxis", "Softmax", {In({3, 5}, -2.0, 2.0)}},
      {"SoftmaxAxis1Of3d", "Softmax", {In({2, 4, 3}, -2.0, 2.0)}, {{"axis", I(1)}}},
      {"SoftmaxAxis0", "Softmax", {In({4, 3}, -2.0, 2.0)}, {{"axis", I(0)}}},
      {"LogSoftmaxLastAxis", "LogSoftmax", {In({3, 5}, -2.0, 2.0)}},
      {"LogSoftmaxAxis1Of3d", "LogSoftmax", {In({2, 4, 3}, -2.0, 2.0)}, {{"axis", I(1)}}},

      // SoftmaxCrossEntropyLoss: [N, C] and [N, C, d1] scores, every reduction, weights, ignore_index.
      {"SceMean", "SoftmaxCrossEntropyLoss", {In({4, 5}, -2.0, 2.0), Labels64({0, 3, 4, 1}, {4})}},
      {"SceSum", "SoftmaxCrossEntropyLoss", {In({4, 5}, -2.0, 2.0), Labels64({0, 3, 4, 1}, {4})},
       {{"reduction", S("sum")}}},
      {"SceNone", "SoftmaxCrossEntropyLoss", {In({4, 5}, -2.0, 2.0), Labels64({0, 3, 4, 1}, {4})},
       {{"reduction", S("none")}}},
      {"SceMeanWeighted", "SoftmaxCrossEntropyLoss",
       {In({4, 5}, -2.0, 2.0), Labels64({0, 3, 4, 3}, {4}), ClassWeights({0.5, 1.0, 2.0, 1.5, 0.25})}},
      {"SceSumWeightedInt32", "SoftmaxCrossEntropyLoss",
       {In({4, 5}, -2.0, 2.0), Labels32({2, 3, 0, 1}, {4}), ClassWeights({0.5, 1.0, 2.0, 1.5, 0.25})},
       {{"reduction", S("sum")}}},
      {"SceMeanIgnoreIndexInt32", "SoftmaxCrossEntropyLoss", {In({4, 5}, -2.0, 2.0), Labels32({2, -1, 0, 4}, {4})},
       {{"ignore_index", I(-1)}}},
      {"SceMeanWeightedIgnoreClass", "SoftmaxCrossEntropyLoss",
       {In({5, 4}, -2.0, 2.0), Labels64({1, 2, 0, 2, 3}, {5}), ClassWeights({0.5, 1.0, 2.0, 1.5})},
       {{"ignore_index", I(2)}}},
      {"SceMean3d", "SoftmaxCrossEntropyLoss",
       {In({2, 3, 4}, -2.0, 2.0), Labels64({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4})}},
      {"SceNone3dIgnoreIndex", "SoftmaxCrossEntropyLoss",
       {In({2, 3, 4}, -2.0, 2.0), Labels64({0, -100, 2, 1, 2, 2, -100, 1}, {2, 4})},
       {{"reduction", S("none")}, {"ignore_index", I(-100)}}},
      {"SceSum3dWeightedIgnoreIndex", "SoftmaxCrossEntropyLoss",
       {In({2, 3, 4}, -2.0, 2.0), Labels32({0, 5, 2, 1, 2, 2, 5, 1}, {2, 4}), ClassWeights({2.0, 0.5, 1.25})},
       {{"reduction", S("sum")}, {"ignore_index", I(5)}}},
      {"SceMeanWithLogProbOutput", "SoftmaxCrossEntropyLoss",
       {In({4, 5}, -2.0, 2.0), Labels64({0, 3, 4, 1}, {4}), ClassWeights({0.5, 1.0, 2.0, 1.5, 0.25})},
       {{"ignore_index", I(3)}}, 2},
      {"SceNone3dWithLogProbOutput", "SoftmaxCrossEntropyLoss",
       {In({2, 3, 4}, -2.0, 2.0), Labels64({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4})}, {{"reduction", S("none")}}, 2},

      // NegativeLogLikelihoodLoss: the same configurations on the input (log-probabilities).
      {"NllMean", "NegativeLogLikelihoodLoss", {In({4, 5}), Labels64({0, 3, 4, 1}, {4})}},
      {"NllSum", "NegativeLogLikelihoodLoss", {In({4, 5}), Labels64({0, 3, 4, 1}, {4})}, {{"reduction", S("sum")}}},
      {"NllNone", "NegativeLogLikelihoodLoss", {In({4, 5}), Labels64({0, 3, 4, 1}, {4})}, {{"reduction", S("none")}}},
      {"NllMeanWeighted", "NegativeLogLikelihoodLoss",
       {In({4, 5}), Labels64({0, 3, 4, 3}, {4}), ClassWeights({0.5, 1.0, 2.0, 1.5, 0.25})}},
      {"NllMeanIgnoreIndexInt32", "NegativeLogLikelihoodLoss", {In({4, 5}), Labels32({2, -1, 0, 4}, {4})},
       {{"ignore_index", I(-1)}}},
      {"NllMean3dWeightedIgnoreClass", "NegativeLogLikelihoodLoss",
       {In({2, 3, 4}), Labels64({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4}), ClassWeights({2.0, 0.5, 1.25})},
       {{"ignore_index", I(1)}}},
      {"NllNone3dInt32", "NegativeLogLikelihoodLoss", {In({2, 3, 4}), Labels32({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4})},
       {{"reduction", S("none")}}},
      {"NllSum3dWeighted", "NegativeLogLikelihoodLoss",
       {In({2, 3, 4}), Labels64({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4}), ClassWeights({2.0, 0.5, 1.25})},
       {{"reduction", S("sum")}}},
  };
  return rows;
}

}  // namespace edgetrain::testing
