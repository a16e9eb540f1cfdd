// TrainingAgent: a model used as one layer inside another framework. Forward runs the model and
// keeps its inputs under a handle; Backward takes the gradients of the outputs and returns the
// gradients of the float inputs and of the parameters (a vector-Jacobian product, which re-runs
// the forward part from the kept inputs). Its two models are built offline (BuildAgentModels in
// autodiff/agent_models.hpp); the agent itself only runs them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/session.hpp"

namespace edgetrain {

// The forward model with its trainable parameters as inputs, and the backward model that adds one
// input "<output>.output_grad" per output and returns the gradients `backward_fetches`.
struct AgentModels {
  Model forward, backward;
  std::vector<std::string> inputs, outputs, parameters;
  std::map<std::string, Tensor> parameter_values;
  std::vector<bool> input_has_gradient;        // per input: whether backward returns its gradient
  std::vector<std::string> backward_fetches;  // input gradients (float inputs) then parameter gradients
};

class TrainingAgent {
 public:
  explicit TrainingAgent(AgentModels models, SessionOptions options = {});
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
