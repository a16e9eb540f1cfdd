#include "autodiff/agent_models.hpp"

#include <algorithm>

#include "autodiff/autodiff.hpp"
#include "core/error.hpp"
#include "onnx/importer.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

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

AgentModels BuildAgentModels(Model model, std::vector<std::string> trainable) {
  AgentModels a;
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
  // Parameters become graph inputs so that both sessions read the live tensors the agent owns.
  for (const std::string& name : trainable) {
    auto it = g.initializers.find(name);
    ET_CHECK(it != g.initializers.end(), ErrorCode::kInvalidArgument, "TrainingAgent: '", model.source,
             "' has no initializer '", name, "'");
    ET_CHECK(IsFloatType(it->second.dtype()), ErrorCode::kInvalidArgument, "TrainingAgent: parameter '", name,
             "' is ", DataTypeName(it->second.dtype()), ", not a float type");
    a.parameter_values[name] = it->second;
    ValueInfo info{name, it->second.dtype(), true, {}, false};
    for (int64_t d : it->second.shape()) info.shape.push_back(Dim{d, ""});
    std::erase_if(g.inputs, [&](const ValueInfo& v) { return v.name == name; });
    g.inputs.push_back(info);
    g.initializers.erase(it);
  }
  a.parameters = trainable;
  a.forward = model;

  // Backward: loss = sum over outputs of ReduceSum(output * output_grad), whose gradient is the VJP.
  std::string loss;
  for (const ValueInfo& out : std::vector<ValueInfo>(g.outputs)) {
    ValueInfo grad_in = out;
    grad_in.name = AgentOutputGradientName(out.name);
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
  a.backward = std::move(model);
  return a;
}

TrainingAgent MakeTrainingAgent(Model model, std::vector<std::string> trainable, SessionOptions options) {
  return TrainingAgent(BuildAgentModels(std::move(model), std::move(trainable)), options);
}

TrainingAgent LoadTrainingAgent(const std::string& path, std::vector<std::string> trainable, SessionOptions options) {
  return MakeTrainingAgent(LoadModel(path, ExecutionImportOptions()), std::move(trainable), options);
}

}  // namespace edgetrain
