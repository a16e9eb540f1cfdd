#include "training/training_agent.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

struct TrainingAgent::Impl {
  std::vector<std::string> inputs, outputs, parameters;
  std::map<std::string, Tensor> values;
  std::optional<Session> forward, backward;
  std::vector<std::string> backward_fetches;  // input gradients (float inputs) then parameter gradients
  std::vector<bool> input_has_gradient;
  std::map<int64_t, std::vector<Tensor>> pending;  // handle -> the inputs its Forward ran on
  int64_t next_handle = 1;

  std::map<std::string, Tensor> Feeds(const std::vector<Tensor>& user_inputs) const {
    std::map<std::string, Tensor> feeds = values;
    for (size_t i = 0; i < inputs.size(); ++i) feeds[inputs[i]] = user_inputs[i];
    return feeds;
  }
};

TrainingAgent::TrainingAgent(AgentModels models, SessionOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& a = *impl_;
  ET_CHECK(models.input_has_gradient.size() == models.inputs.size(), ErrorCode::kInvalidArgument,
           "TrainingAgent: ", models.inputs.size(), " inputs but ", models.input_has_gradient.size(),
           " input_has_gradient flags");
  for (const std::string& p : models.parameters)
    ET_CHECK(models.parameter_values.count(p), ErrorCode::kInvalidArgument, "TrainingAgent: parameter '", p,
             "' has no value");
  a.inputs = std::move(models.inputs);
  a.outputs = std::move(models.outputs);
  a.parameters = std::move(models.parameters);
  a.values = std::move(models.parameter_values);
  a.input_has_gradient = std::move(models.input_has_gradient);
  a.backward_fetches = std::move(models.backward_fetches);
  a.forward.emplace(std::move(models.forward), options);
  a.backward.emplace(std::move(models.backward), options);
}

TrainingAgent::~TrainingAgent() = default;
TrainingAgent::TrainingAgent(TrainingAgent&&) noexcept = default;

TrainingAgent::ForwardResult TrainingAgent::Forward(const std::vector<Tensor>& inputs) {
  Impl& a = *impl_;
  ET_CHECK(inputs.size() == a.inputs.size(), ErrorCode::kInvalidArgument, "TrainingAgent::Forward: expected ",
           a.inputs.size(), " inputs, got ", inputs.size());
  ForwardResult result;
  result.outputs = a.forward->Run(a.Feeds(inputs));
  result.handle = a.next_handle++;
  std::vector<Tensor>& kept = a.pending[result.handle];  // copies: the caller may reuse its buffers
  for (const Tensor& t : inputs) kept.push_back(t.Clone());
  return result;
}

TrainingAgent::BackwardResult TrainingAgent::Backward(int64_t handle, const std::vector<Tensor>& output_gradients) {
  Impl& a = *impl_;
  auto it = a.pending.find(handle);
  ET_CHECK(it != a.pending.end(), ErrorCode::kInvalidArgument, "TrainingAgent::Backward: unknown handle ", handle,
           " (each Forward handle is used once)");
  ET_CHECK(output_gradients.size() == a.outputs.size(), ErrorCode::kInvalidArgument,
           "TrainingAgent::Backward: expected ", a.outputs.size(), " output gradients, got ", output_gradients.size());
  std::map<std::string, Tensor> feeds = a.Feeds(it->second);
  for (size_t i = 0; i < a.outputs.size(); ++i) feeds[AgentOutputGradientName(a.outputs[i])] = output_gradients[i];
  std::vector<Tensor> grads = a.backward->Run(feeds, a.backward_fetches);
  a.pending.erase(it);

  BackwardResult result;
  size_t k = 0;
  for (bool has_gradient : a.input_has_gradient) result.input_gradients.push_back(has_gradient ? grads[k++] : Tensor());
  for (const std::string& name : a.parameters) result.parameter_gradients[name] = grads[k++];
  return result;
}

void TrainingAgent::Release(int64_t handle) { impl_->pending.erase(handle); }

std::vector<std::string> TrainingAgent::InputNames() const { return impl_->inputs; }
std::vector<std::string> TrainingAgent::OutputNames() const { return impl_->outputs; }
const std::vector<std::string>& TrainingAgent::ParameterNames() const { return impl_->parameters; }

Tensor TrainingAgent::Parameter(const std::string& name) const {
  auto it = impl_->values.find(name);
  ET_CHECK(it != impl_->values.end(), ErrorCode::kInvalidArgument, "TrainingAgent: no parameter '", name, "'");
  return it->second;
}

}  // namespace edgetrain
