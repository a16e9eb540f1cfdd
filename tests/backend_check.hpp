// The fast-kernel check of the case table (tests/op_case.hpp): a row's node on oneDNN, or in float32,
// against the reference kernels, both backends in one process (SetKernelBackend).
#pragma once

#include <algorithm>
#include <cmath>

#include "core/kernel_backend.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain::testing {

inline Tensor Float32Of(const Tensor& t) {
  if (t.dtype() != DataType::kFloat64) return t;
  const std::vector<double> values = t.ToDoubleVector();
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), t.shape());
}

inline OneNode WithFloat32Inputs(OneNode node) {
  for (CaseInput& input : node.inputs)
    if (input.present()) input.tensor = Float32Of(input.tensor);
  return node;
}

// The node's outputs on the current kernel backend, with the ai.edgetrain domain imported (for the fused
// gradients).
inline std::vector<Tensor> RunNode(const OneNode& node) {
  Model model = OneNodeModel(node);
  model.opsets[kEdgetrainDomain] = 1;
  std::vector<Tensor> tensors;
  for (const RuntimeValue& value : Session(std::move(model)).RunValues(OneNodeFeeds(node.inputs)))
    tensors.push_back(value.tensor);
  return tensors;
}

// The node's outputs on `backend`.
inline std::vector<Tensor> RunOnBackend(KernelBackend backend, const OneNode& node) {
  SetKernelBackend(backend);
  return RunNode(node);
}

// The node's outputs on the fast kernels: oneDNN's backend where built, else the reference backend with the
// direct kernels (core/kernel_backend.hpp), the only fast kernels that such a build can switch off.
inline std::vector<Tensor> RunFast(const OneNode& node) {
  const bool was = SetDirectKernels(true);
  std::vector<Tensor> outputs = RunOnBackend(DnnlAvailable() ? KernelBackend::kDnnl : KernelBackend::kReference, node);
  SetDirectKernels(was);
  return outputs;
}

// The node's outputs on the reference kernels alone.
inline std::vector<Tensor> RunReference(const OneNode& node) {
  const bool was = SetDirectKernels(false);
  std::vector<Tensor> outputs = RunOnBackend(KernelBackend::kReference, node);
  SetDirectKernels(was);
  return outputs;
}

// Each output within tolerance times the largest magnitude of the reference's output.
inline void ExpectNearLargest(const std::vector<Tensor>& actual, const std::vector<Tensor>& reference, double tolerance,
                              const std::string& label) {
  ASSERT_EQ(actual.size(), reference.size()) << label;
  for (size_t k = 0; k < reference.size(); ++k) {
    const std::vector<double> expected = reference[k].ToDoubleVector();
    double largest = 0.0;
    for (double v : expected) largest = std::max(largest, std::abs(v));
    ASSERT_GT(largest, 0.0) << label << " output " << k << " is all zeros";
    ExpectValuesNear(actual[k], reference[k].shape(), expected, tolerance * largest,
                     label + " output " + std::to_string(k));
  }
}

// Runs the row's backend check with `backend` as the one under test (kDnnlVsReference: always the fast kernels,
// RunFast, against the reference ones). In a build without oneDNN the reference backend runs the direct kernels.
inline void CheckBackends(const OpCase& row, KernelBackend backend, const std::string& label) {
  ASSERT_NE(static_cast<int>(row.backends), static_cast<int>(BackendCheck::kNone)) << row.name << ": no backend check";
  const OneNode node = row.Node();
  if (row.backends == BackendCheck::kDnnlVsReference) {
    const std::vector<Tensor> fast = RunFast(node);
    ExpectNearLargest(fast, RunReference(node), row.backend_tolerance, label);
    return;
  }
  const std::vector<Tensor> expected = RunReference(node);
  const std::vector<Tensor> actual = RunOnBackend(backend, WithFloat32Inputs(node));
  if (row.backends == BackendCheck::kFloat32VsFloat64) {
    ExpectNearLargest(actual, expected, row.backend_tolerance, label);
    return;
  }
  ASSERT_EQ(actual.size(), expected.size()) << label;
  for (size_t k = 0; k < expected.size(); ++k)
    ExpectValuesNear(actual[k], expected[k].shape(), expected[k].ToDoubleVector(), row.backend_tolerance, label);
}

}  // namespace edgetrain::testing
