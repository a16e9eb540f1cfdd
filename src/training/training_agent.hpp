// TrainingAgent: a model used as one layer inside another framework. Forward runs the model and
// keeps its inputs under a handle; Backward takes the gradients of the outputs and returns the
// gradients of the float inputs and of the parameters (a vector-Jacobian product, which re-runs
// the forward part from the kept inputs).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/session.hpp"

namespace edgetrain {

class TrainingAgent {
 public:
  // `model`: an inference model; `trainable` names its float initializers that get gradients
  // (default: every float initializer).
  explicit TrainingAgent(Model model, std::vector<std::string> trainable = {}, SessionOptions options = {});
  static TrainingAgent FromFile(const std::string& path, std::vector<std::string> trainable = {},
                                SessionOptions options = {});
  ~TrainingAgent();
  TrainingAgent(TrainingAgent&&) noexcept;

  struct ForwardResult {
    std::vector<Tensor> outputs;  // in OutputNames() order
    int64_t handle = 0;
  };
  struct BackwardResult {
    std::vector<Tensor> input_gradients;              // in InputNames() order; undefined for non-float inputs
    std::map<std::string, Tensor> parameter_gradients;  // by parameter name
  };
  // Inputs in InputNames() order.
  ForwardResult Forward(const std::vector<Tensor>& inputs);
  // One gradient per output, shaped like it. Consumes the handle (kInvalidArgument if unknown).
  BackwardResult Backward(int64_t handle, const std::vector<Tensor>& output_gradients);
  // Drops a handle whose Backward will not run.
  void Release(int64_t handle);

  std::vector<std::string> InputNames() const;
  std::vector<std::string> OutputNames() const;
  const std::vector<std::string>& ParameterNames() const;
  // The parameter's live tensor: writing to it changes what the next Forward uses.
  Tensor Parameter(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace edgetrain
