// Checks a training model's gradients against float64 central differences: the model is promoted
// to float64, fed random inputs and the checkpoint's parameters, and sampled parameter elements are
// perturbed one at a time.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

struct GradientCheckOptions {
  int64_t batch_size = 2;          // value of every symbolic dimension
  int samples_per_parameter = 16;  // elements perturbed per parameter (all when the tensor is smaller)
  uint64_t seed = 1;
  double tolerance = 1e-4;
};

struct ParameterGradientError {
  std::string parameter;
  double worst_relative_error = 0;
};

// Every float32 tensor, value type and type attribute of the graph becomes float64.
void PromoteToFloat64(Graph& graph);

std::vector<ParameterGradientError> CheckTrainingGradients(const std::string& artifact_dir, const std::string& prefix,
                                                           const GradientCheckOptions& options);

}  // namespace edgetrain
