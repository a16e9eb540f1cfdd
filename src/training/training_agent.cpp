#include "training/training_agent.hpp"

#include <algorithm>

#include "autodiff/autodiff.hpp"
#include "core/error.hpp"
#include "onnx/importer.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {

namespace {

constexpr const char* kOutputGradSuffix = ".output_grad";

Node MakeNode(const std::string& op, std::vector<std::string> inputs, std::string output,
              AttributeMap attributes = {}) {
  Node n;
  n.name = "agent_" + output;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {std::move(output)};
  n.attributes = std::move(attributes);
  return n;
}

}  // namespace

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

TrainingAgent::TrainingAgent(Model model, std::vector<std::string> trainable, SessionOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& a = *impl_;
  Graph& g = model.graph;
  for (const ValueInfo& in : g.inputs)
    if (!g.IsInitializer(in.name)) a.inputs.push_back(in.name);
  for (const ValueInfo& out : g.outputs) {
    ET_CHECK(IsFloatType(out.dtype), ErrorCode::kInvalidArgument, "TrainingAgent: output '", out.name, "' of '",
             model.source, "' is ", DataTypeName(out.dtype), "; every output needs a float gradient");
    a.outputs.push_back(out.name);
  }
  if (trainable.empty()) {
    for (const auto& [name, value] : g.initializers)
      if (IsFloatType(value.dtype())) trainable.push_back(name);
  }
  // Parameters become graph inputs so that both sessions read the live tensors in `values`.
  for (const std::string& name : trainable) {
    auto it = g.initializers.find(name);
    ET_CHECK(it != g.initializers.end(), ErrorCode::kInvalidArgument, "TrainingAgent: '", model.source,
             "' has no initializer '", name, "'");
    ET_CHECK(IsFloatType(it->second.dtype()), ErrorCode::kInvalidArgument, "TrainingAgent: parameter '", name,
             "' is ", DataTypeName(it->second.dtype()), ", not a float type");
    a.values[name] = it->second;
    ValueInfo info{name, it->second.dtype(), true, {}, false};
    for (int64_t d : it->second.shape()) info.shape.push_back(Dim{d, ""});
    std::erase_if(g.inputs, [&](const ValueInfo& v) { return v.name == name; });
    g.inputs.push_back(info);
    g.initializers.erase(it);
  }
  a.parameters = trainable;
  a.forward.emplace(model, options);

  // Backward: loss = sum over outputs of ReduceSum(output * output_grad), whose gradient is the VJP.
  std::string loss;
  for (const ValueInfo& out : std::vector<ValueInfo>(g.outputs)) {
    ValueInfo grad_in = out;
    grad_in.name = out.name + kOutputGradSuffix;
    g.inputs.push_back(grad_in);
    std::string product = g.nodes.emplace_back(MakeNode("Mul", {out.name, grad_in.name}, out.name + ".vjp_mul")).outputs[0];
    std::string sum = g.nodes
                          .emplace_back(MakeNode("ReduceSum", {product}, out.name + ".vjp_sum",
                                                 {{"keepdims", Attribute::Int(0)}}))
                          .outputs[0];
    loss = loss.empty() ? sum : g.nodes.emplace_back(MakeNode("Add", {loss, sum}, sum + ".acc")).outputs[0];
  }
  std::vector<std::string> wrt;
  for (const std::string& name : a.inputs) {
    const ValueInfo* info = g.FindValueInfo(name);
    a.input_has_gradient.push_back(info != nullptr && IsFloatType(info->dtype));
    if (a.input_has_gradient.back()) wrt.push_back(name);
  }
  wrt.insert(wrt.end(), a.parameters.begin(), a.parameters.end());
  model.opsets[kEdgetrainDomain] = 1;  // fused gradient operators
  std::vector<std::string> grads = AppendGradients(g, GradientRequest{loss, wrt, {}, model.opsets});
  g.outputs.clear();
  for (size_t i = 0; i < grads.size(); ++i) {
    ValueInfo info = *g.FindValueInfo(wrt[i]);
    info.name = grads[i];
    g.outputs.push_back(info);
  }
  a.backward_fetches = grads;
  a.backward.emplace(std::move(model), options);
}

TrainingAgent TrainingAgent::FromFile(const std::string& path, std::vector<std::string> trainable,
                                      SessionOptions options) {
  return TrainingAgent(LoadModel(path, ExecutionImportOptions()), std::move(trainable), options);
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
  for (size_t i = 0; i < a.outputs.size(); ++i) feeds[a.outputs[i] + kOutputGradSuffix] = output_gradients[i];
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
