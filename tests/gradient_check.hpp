// The float64 gradient check of the case table (tests/op_case.hpp). For each row the harness builds
// a one-node float64 model, appends a loss sum(y_k * w_k) with fixed random weights, lets autodiff
// append the backward graph, and compares every input gradient with float64 central differences.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "op_case.hpp"

namespace edgetrain::testing {

inline CaseInput Ints(std::vector<int64_t> values) {
  return Const(Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())}));
}

// Through ONNX serialization and shape inference, as artifact generation does. With
// `inline_fused`, ai.edgetrain operators are replaced by their standard-ONNX function bodies.
Model Reimport(const Model& model, bool inline_fused = false);

// Runs the check; reports failures through gtest with the worst element.
void CheckGradient(const OpCase& row);
// The operators (domain:op) of the row's training graph, as the check builds it, fused and with fused ops inlined.
std::set<std::string> GradientGraphOps(const OpCase& row);
// The same check for a hand-built float64 model (several nodes): the loss weights every float
// output, and the gradients of the `wrt` inputs (named in `feeds`) are compared with finite
// differences. forward.source labels failures.
void CheckGraphGradient(Model forward, std::map<std::string, Tensor> feeds, std::vector<std::string> wrt,
                        double tolerance);

}  // namespace edgetrain::testing
