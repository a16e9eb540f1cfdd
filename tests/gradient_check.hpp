// Table-driven gradient check: one row per operator configuration. For each row the harness builds
// a one-node float64 model, appends a loss sum(y_k * w_k) with fixed random weights, lets autodiff
// append the backward graph, and compares every input gradient with float64 central differences.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"

namespace edgetrain::testing {

struct GradInput {
  Shape shape;
  bool differentiable = true;  // float64 input that gets a gradient
  double low = -1.0, high = 1.0;  // uniform range of the random values (keep away from kinks)
  Tensor constant;             // when defined: a fixed (non-differentiable) value, e.g. axes or indices
  bool omitted = false;        // an optional input left out ("")
};

struct GradCase {
  std::string name;  // row label (unique)
  std::string op;
  std::vector<GradInput> inputs;
  AttributeMap attributes = {};
  int num_outputs = 1;
  std::string domain = "";
  double tolerance = 1e-5;
  // Optional transform of the random input values (e.g. keep |x| away from 0 for Abs).
  std::function<void(size_t input, std::vector<double>& values)> transform = nullptr;
  int64_t opset = 17;  // of the ONNX domain
};

inline void PrintTo(const GradCase& row, std::ostream* os) { *os << row.name; }

// `row` built at a default-domain opset other than 17.
inline GradCase AtOpset(int64_t opset, GradCase row) {
  row.opset = opset;
  return row;
}

inline GradInput In(Shape shape, double low = -1.0, double high = 1.0) {
  GradInput in;
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}
inline GradInput Const(Tensor value) {
  GradInput in;
  in.differentiable = false;
  in.constant = std::move(value);
  return in;
}
inline GradInput Ints(std::vector<int64_t> values) {
  return Const(Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())}));
}
inline GradInput Omitted() {
  GradInput in;
  in.omitted = true;
  in.differentiable = false;
  return in;
}

// Through ONNX serialization and shape inference, as artifact generation does. With
// `inline_fused`, ai.edgetrain operators are replaced by their standard-ONNX function bodies.
Model Reimport(const Model& model, bool inline_fused = false);

// Runs the check; reports failures through gtest with the worst element.
void CheckGradient(const GradCase& row);
// The same check for a hand-built float64 model (several nodes): the loss weights every float
// output, and the gradients of the `wrt` inputs (named in `feeds`) are compared with finite
// differences. forward.source labels failures.
void CheckGraphGradient(Model forward, std::map<std::string, Tensor> feeds, std::vector<std::string> wrt,
                        double tolerance);

// The rows, one function per operator family (tests/gradient_rows_*.cpp).
std::vector<GradCase> ElementwiseGradCases();
std::vector<GradCase> ActivationGradCases();
std::vector<GradCase> ReductionGradCases();
std::vector<GradCase> ShapeGradCases();
std::vector<GradCase> MatMulConvGradCases();
std::vector<GradCase> NormalizationGradCases();
std::vector<GradCase> RecurrentGradCases();
std::vector<GradCase> SpectralGradCases();
std::vector<GradCase> VisionLinalgGradCases();

}  // namespace edgetrain::testing
