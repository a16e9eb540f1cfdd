#include "autodiff/optimizers.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "ops/kernel.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

constexpr const char* kOptimizerNames[] = {"adamw", "adam", "sgd"};
constexpr OptimizerType kOptimizerTypes[] = {OptimizerType::kAdamW, OptimizerType::kAdam, OptimizerType::kSGD};

}  // namespace

float EffectiveWeightDecay(const OptimizerSpec& spec) {
  if (spec.weight_decay) return *spec.weight_decay;
  return spec.type == OptimizerType::kAdamW ? 0.01f : 0.0f;
}

namespace {

void CheckHyperParameter(bool valid, const char* name, float value, const char* requirement) {
  ET_CHECK(std::isfinite(value) && valid, ErrorCode::kInvalidArgument, "optimizer option ", name, " = ", value,
           " is invalid: it must be ", requirement);
}

void ValidateSpec(const OptimizerSpec& spec) {
  CheckHyperParameter(spec.beta1 >= 0 && spec.beta1 < 1, "beta1", spec.beta1, "in [0, 1)");
  CheckHyperParameter(spec.beta2 >= 0 && spec.beta2 < 1, "beta2", spec.beta2, "in [0, 1)");
  CheckHyperParameter(spec.epsilon >= 0, "epsilon", spec.epsilon, ">= 0");
  CheckHyperParameter(EffectiveWeightDecay(spec) >= 0, "weight_decay", EffectiveWeightDecay(spec), ">= 0");
  CheckHyperParameter(spec.momentum >= 0, "momentum", spec.momentum, ">= 0");
  CheckHyperParameter(true, "dampening", spec.dampening, "finite");
  CheckHyperParameter(spec.max_grad_norm >= 0, "max_grad_norm", spec.max_grad_norm, ">= 0 (0 disables clipping)");
  CheckHyperParameter(spec.l1_penalty >= 0, "l1_penalty", spec.l1_penalty, ">= 0");
  CheckHyperParameter(spec.l2_penalty >= 0, "l2_penalty", spec.l2_penalty, ">= 0");
  if (spec.type == OptimizerType::kSGD && spec.nesterov)
    ET_CHECK(spec.momentum > 0 && spec.dampening == 0, ErrorCode::kInvalidArgument,
             "optimizer option nesterov needs momentum > 0 and dampening = 0 (got momentum ", spec.momentum,
             ", dampening ", spec.dampening, ")");
  ET_CHECK(!spec.hugging_face_mode || spec.type == OptimizerType::kAdamW, ErrorCode::kInvalidArgument,
           "optimizer option hugging_face_mode applies to adamw only, not ", OptimizerTypeName(spec.type));
}

// Appends nodes and constants to the optimizer graph.
class OptimizerGraphBuilder {
 public:
  explicit OptimizerGraphBuilder(Graph& graph) : graph_(graph) {}

  std::string Op(const std::string& op, std::vector<std::string> inputs, const std::string& output,
                 AttributeMap attributes = {}, const std::string& domain = "") {
    Node n;
    n.name = output + "/" + op;
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(inputs);
    n.outputs = {output};
    n.attributes = std::move(attributes);
    graph_.nodes.push_back(std::move(n));
    return output;
  }

  // A scalar initializer of `dtype` (float32 or float64).
  std::string Constant(const std::string& label, double value, DataType dtype) {
    std::string name = "optimizer." + label + "." + DataTypeName(dtype);
    if (!graph_.IsInitializer(name))
      graph_.initializers[name] = dtype == DataType::kFloat64 ? Tensor::Scalar<double>(value)
                                                              : Tensor::Scalar<float>(static_cast<float>(value));
    return name;
  }

  std::string CastTo(const std::string& value, DataType from, DataType to) {
    if (from == to) return value;
    return Op("Cast", {value}, value + "." + DataTypeName(to), {{"to", Attribute::Int(static_cast<int64_t>(to))}});
  }

 private:
  Graph& graph_;
};

ValueInfo Named(ValueInfo info, const std::string& name) {
  info.name = name;
  return info;
}

ValueInfo ScalarInfo(const std::string& name, DataType dtype) {
  ValueInfo info;
  info.name = name;
  info.dtype = dtype;
  info.has_shape = true;
  return info;
}

// torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (global_norm + 1e-6)), applied to every
// gradient. The norm accumulates in the first parameter's dtype.
std::vector<std::string> ClipByGlobalNorm(OptimizerGraphBuilder& b, const std::vector<std::string>& grads,
                                          const std::vector<DataType>& dtypes, float max_norm) {
  const DataType acc = dtypes[0];
  std::vector<std::string> squares;
  for (size_t i = 0; i < grads.size(); ++i) {
    std::string square =
        b.Op("ReduceSumSquare", {grads[i]}, grads[i] + ".sum_square", {{"keepdims", Attribute::Int(0)}});
    squares.push_back(b.CastTo(square, dtypes[i], acc));
  }
  std::string norm = b.Op("Sqrt", {b.Op("Sum", squares, "optimizer.grad_sum_square")}, "optimizer.grad_norm");
  std::string shifted = b.Op("Add", {norm, b.Constant("clip_epsilon", 1e-6, acc)}, "optimizer.grad_norm_shifted");
  std::string ratio = b.Op("Div", {b.Constant("max_grad_norm", max_norm, acc), shifted}, "optimizer.clip_ratio");
  std::string scale = b.Op("Min", {b.Constant("one", 1.0, acc), ratio}, "optimizer.clip_scale");
  std::vector<std::string> clipped;
  for (size_t i = 0; i < grads.size(); ++i)
    clipped.push_back(b.Op("Mul", {grads[i], b.CastTo(scale, acc, dtypes[i])}, grads[i] + ".clipped"));
  return clipped;
}

}  // namespace

OptimizerType ParseOptimizerType(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (size_t i = 0; i < std::size(kOptimizerNames); ++i)
    if (lower == kOptimizerNames[i]) return kOptimizerTypes[i];
  std::string valid;
  for (const char* known : kOptimizerNames) valid += std::string(valid.empty() ? "" : ", ") + known;
  Fail(ErrorCode::kInvalidArgument, "unknown optimizer '", name, "'; valid optimizers: ", valid);
}

std::string OptimizerTypeName(OptimizerType type) {
  for (size_t i = 0; i < std::size(kOptimizerTypes); ++i)
    if (kOptimizerTypes[i] == type) return kOptimizerNames[i];
  Fail(ErrorCode::kInternal, "unknown optimizer type ", static_cast<int>(type));
}

std::vector<std::string> OptimizerStateNames(const OptimizerSpec& spec, const std::string& param) {
  switch (spec.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam:
      return {OptimizerStateName(param, kAdamFirstMomentState), OptimizerStateName(param, kAdamSecondMomentState)};
    case OptimizerType::kSGD:
      if (spec.momentum != 0) return {OptimizerStateName(param, kSgdMomentumState)};
      return {};
  }
  return {};
}

Model BuildOptimizerModel(const OptimizerSpec& spec, const std::vector<std::string>& params,
                          const std::vector<ValueInfo>& param_infos) {
  ValidateSpec(spec);
  ET_CHECK(!params.empty(), ErrorCode::kInvalidArgument, "the optimizer needs at least one trainable parameter");
  ET_CHECK(params.size() == param_infos.size(), ErrorCode::kInternal, "BuildOptimizerModel: ", params.size(),
           " parameters but ", param_infos.size(), " value infos");
  std::set<std::string> seen;
  std::vector<DataType> dtypes;
  for (size_t i = 0; i < params.size(); ++i) {
    ET_CHECK(seen.insert(params[i]).second, ErrorCode::kInvalidArgument, "parameter '", params[i],
             "' is listed twice for the optimizer");
    DataType dtype = param_infos[i].dtype;
    ET_CHECK(dtype == DataType::kFloat32 || dtype == DataType::kFloat64, ErrorCode::kNotImplemented, "parameter '",
             params[i], "' is ", DataTypeName(dtype), "; the optimizer updates float32 and float64 parameters only");
    dtypes.push_back(dtype);
  }

  Model model;
  model.source = "optimizer_model";
  model.ir_version = 8;
  model.producer = "edgetrain";
  model.opsets = {{"", 17}, {kEdgetrainDomain, 1}};
  Graph& graph = model.graph;
  graph.name = "optimizer";
  graph.inputs.push_back(ScalarInfo(std::string(kLearningRateInput), DataType::kFloat32));
  graph.inputs.push_back(ScalarInfo(std::string(kStepInput), DataType::kInt64));
  OptimizerGraphBuilder b(graph);

  std::vector<std::string> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& p = params[i];
    graph.inputs.push_back(Named(param_infos[i], p));
    graph.inputs.push_back(Named(param_infos[i], GradientName(p)));
    for (const auto& state : OptimizerStateNames(spec, p)) graph.inputs.push_back(Named(param_infos[i], state));
    // Penalties belong to the loss, so they come before clipping.
    std::string g = GradientName(p);
    if (spec.l1_penalty > 0) {
      std::string sign = b.Op("Sign", {p}, p + ".sign");
      std::string term = b.Op("Mul", {sign, b.Constant("l1_penalty", spec.l1_penalty, dtypes[i])}, p + ".l1_term");
      g = b.Op("Add", {g, term}, GradientName(p) + ".l1");
    }
    if (spec.l2_penalty > 0) {
      std::string term = b.Op("Mul", {p, b.Constant("l2_penalty", spec.l2_penalty, dtypes[i])}, p + ".l2_term");
      g = b.Op("Add", {g, term}, GradientName(p) + ".l2");
    }
    grads.push_back(g);
  }
  if (spec.max_grad_norm > 0) grads = ClipByGlobalNorm(b, grads, dtypes, spec.max_grad_norm);

  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& p = params[i];
    std::vector<std::string> states = OptimizerStateNames(spec, p);
    std::vector<std::string> inputs = {std::string(kLearningRateInput), std::string(kStepInput), p, grads[i]};
    inputs.insert(inputs.end(), states.begin(), states.end());
    Node update;
    update.name = p + "/update";
    update.domain = kEdgetrainDomain;
    update.inputs = std::move(inputs);
    update.outputs = {StateUpdateName(p)};
    for (const auto& state : states) update.outputs.push_back(StateUpdateName(state));
    if (spec.type == OptimizerType::kSGD) {
      update.op_type = spec.momentum != 0 ? "SGDMomentumUpdate" : "SGDUpdate";
      update.attributes["weight_decay"] = Attribute::Float(EffectiveWeightDecay(spec));
      if (spec.momentum != 0) {
        update.attributes["momentum"] = Attribute::Float(spec.momentum);
        update.attributes["dampening"] = Attribute::Float(spec.dampening);
        update.attributes["nesterov"] = Attribute::Int(spec.nesterov ? 1 : 0);
      }
    } else {
      int64_t adam_mode = spec.type == OptimizerType::kAdam ? 2 : spec.hugging_face_mode ? 1 : 0;
      update.op_type = "AdamWUpdate";
      update.attributes = {{"beta1", Attribute::Float(spec.beta1)},
                           {"beta2", Attribute::Float(spec.beta2)},
                           {"epsilon", Attribute::Float(spec.epsilon)},
                           {"weight_decay", Attribute::Float(EffectiveWeightDecay(spec))},
                           {"correct_bias", Attribute::Int(spec.correct_bias ? 1 : 0)},
                           {"adam_mode", Attribute::Int(adam_mode)}};
    }
    for (const auto& out : update.outputs) graph.outputs.push_back(Named(param_infos[i], out));
    graph.nodes.push_back(std::move(update));
  }
  return model;
}

}  // namespace edgetrain
