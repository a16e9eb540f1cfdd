#include "autodiff/losses.hpp"

#include <functional>
#include <map>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {
namespace {

struct NamedLossType {
  const char* name;
  LossType type;
};

constexpr NamedLossType kLossNames[] = {
    {"mse", LossType::kMSE},
    {"cross_entropy", LossType::kCrossEntropy},
    {"bce_with_logits", LossType::kBCEWithLogits},
    {"l1", LossType::kL1},
    {"huber", LossType::kHuber},
    {"smooth_l1", LossType::kSmoothL1},
    {"nll", LossType::kNLL},
    {"kl_div", LossType::kKLDiv},
    {"custom", LossType::kCustom},
};

// Every name in use in `graph` (values and node names), so that new names never clash.
std::set<std::string> NamesInUse(const Graph& graph) {
  std::set<std::string> names;
  for (const auto& v : graph.inputs) names.insert(v.name);
  for (const auto& v : graph.outputs) names.insert(v.name);
  for (const auto& [name, info] : graph.value_info) names.insert(name);
  for (const auto& [name, tensor] : graph.initializers) names.insert(name);
  for (const auto& node : graph.nodes) {
    names.insert(node.name);
    names.insert(node.inputs.begin(), node.inputs.end());
    names.insert(node.outputs.begin(), node.outputs.end());
  }
  names.erase("");
  return names;
}

bool IsGraphValue(const Graph& graph, const std::string& value) {
  if (graph.IsInitializer(value)) return true;
  for (const auto& v : graph.inputs)
    if (v.name == value) return true;
  for (const auto& node : graph.nodes)
    for (const auto& out : node.outputs)
      if (out == value) return true;
  return false;
}

// What is statically known of a value: element type (kUndefined when unknown) and shape.
ValueInfo DescribeValue(const Graph& graph, const std::string& value) {
  ET_CHECK(IsGraphValue(graph, value), ErrorCode::kInvalidArgument, "loss: '", value,
           "' is not a value of the graph (not an input, initializer or node output)");
  ValueInfo info;
  if (const ValueInfo* known = graph.FindValueInfo(value)) {
    info = *known;
  } else if (auto it = graph.initializers.find(value); it != graph.initializers.end()) {
    info.dtype = it->second.dtype();
    info.has_shape = true;
    for (int64_t d : it->second.shape()) info.shape.push_back(Dim{d, ""});
  }
  info.name = value;
  return info;
}

ValueInfo DescribePrediction(const Graph& graph, const std::string& prediction) {
  ET_CHECK(IsGraphValue(graph, prediction), ErrorCode::kInvalidArgument, "loss: prediction '", prediction,
           "' is not a value of the graph (not an input, initializer or node output)");
  ValueInfo info = DescribeValue(graph, prediction);
  ET_CHECK(info.dtype == DataType::kUndefined || IsFloatType(info.dtype), ErrorCode::kInvalidArgument,
           "loss: prediction '", prediction, "' must be a float tensor, got ", DataTypeName(info.dtype));
  return info;
}

Tensor FloatTensor(DataType dtype, const std::vector<double>& values, Shape shape) {
  switch (dtype) {
    case DataType::kFloat64: return Tensor::FromVector<double>(values, std::move(shape));
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      Tensor out(dtype, std::move(shape));
      for (size_t i = 0; i < values.size(); ++i) {
        float v = static_cast<float>(values[i]);
        if (dtype == DataType::kFloat16)
          out.data<Float16>()[i] = Float16(v);
        else
          out.data<BFloat16>()[i] = BFloat16(v);
      }
      return out;
    }
    default: {
      std::vector<float> narrowed(values.begin(), values.end());
      return Tensor::FromVector<float>(narrowed, std::move(shape));
    }
  }
}

// Appends nodes and constants under one name prefix, each name new to the graph.
class LossBuilder {
 public:
  LossBuilder(Graph& graph, std::string prefix, DataType dtype, AppendedLoss& result)
      : graph_(graph), prefix_(std::move(prefix)), dtype_(dtype), result_(result), used_(NamesInUse(graph)) {}

  std::string FreshName(const std::string& stem) {
    std::string name = stem;
    for (int suffix = 1; used_.count(name); ++suffix) name = stem + "_" + std::to_string(suffix);
    used_.insert(name);
    return name;
  }
  bool IsFree(const std::string& name) const { return !used_.count(name); }
  void Reserve(const std::string& name) { used_.insert(name); }

  // The next loss target: `name` (an existing value is used as it is), or a new input named from its stem.
  void RequestTarget(std::string name) { requested_target_ = std::move(name); }
  // The target input `info` describes, named `stem` (made unique) unless a target was requested.
  std::string AddTarget(ValueInfo info, const std::string& stem) {
    std::string requested = std::exchange(requested_target_, "");
    if (!requested.empty() && IsGraphValue(graph_, requested)) return requested;
    ET_CHECK(requested.empty() || IsFree(requested), ErrorCode::kInvalidArgument, "loss: target name '", requested,
             "' is already a name in the model");
    info.name = requested.empty() ? FreshName(stem) : requested;
    AddInput(info);
    return info.name;
  }

  std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                 AttributeMap attributes = {}, std::string output = "") {
    Node node;
    node.name = FreshName(prefix_ + op_type);
    node.op_type = op_type;
    node.inputs = inputs;
    node.outputs = {output.empty() ? FreshName(prefix_ + op_type + "_out") : output};
    node.attributes = std::move(attributes);
    graph_.nodes.push_back(std::move(node));
    return graph_.nodes.back().outputs[0];
  }

  std::string Constant(const std::string& stem, const std::vector<double>& values, Shape shape) {
    std::string name = FreshName(prefix_ + stem);
    graph_.initializers[name] = FloatTensor(dtype_, values, std::move(shape));
    result_.constants.push_back(name);
    return name;
  }
  void AddConstant(const std::string& name) { result_.constants.push_back(name); }
  std::string Scalar(double value) {
    auto [it, inserted] = scalars_.try_emplace(value);
    if (inserted) it->second = Constant("const", {value}, {});
    return it->second;
  }

  // Sum or mean of every element, as a scalar named `output`.
  std::string Reduce(const std::string& value, Reduction reduction, const std::string& output) {
    return Op(reduction == Reduction::kMean ? "ReduceMean" : "ReduceSum", {value}, {{"keepdims", Attribute::Int(0)}},
              output);
  }

  void AddInput(ValueInfo info) {
    Reserve(info.name);
    result_.targets.push_back(info.name);
    graph_.inputs.push_back(std::move(info));
  }

  Graph& graph() { return graph_; }
  DataType dtype() const { return dtype_; }

 private:
  Graph& graph_;
  std::string prefix_;
  DataType dtype_;
  AppendedLoss& result_;
  std::set<std::string> used_;
  std::map<double, std::string> scalars_;
  std::string requested_target_;
};

void AppendBuiltIn(LossBuilder& b, const LossSpec& spec, const ValueInfo& prediction, const std::string& output);

class ComposerOnBuilder final : public LossComposer {
 public:
  ComposerOnBuilder(LossBuilder& b, const std::vector<std::string>& predictions) : b_(b), predictions_(predictions) {}
  size_t NumPredictions() const override { return predictions_.size(); }
  std::string Prediction(size_t i) const override {
    ET_CHECK(i < predictions_.size(), ErrorCode::kInvalidArgument, "custom loss: prediction ", i,
             " does not exist (", predictions_.size(), " given)");
    return predictions_[i];
  }
  std::string Target(const std::string& name, DataType dtype, const std::vector<Dim>& shape) override {
    ET_CHECK(b_.IsFree(name), ErrorCode::kInvalidArgument, "custom loss: target name '", name,
             "' is already a value of the model");
    ValueInfo info;
    info.name = name;
    info.dtype = dtype;
    info.has_shape = true;
    info.shape = shape;
    b_.AddInput(info);
    return name;
  }
  std::string Constant(const Tensor& value) override {
    std::string name = b_.FreshName("custom_loss/const");
    b_.graph().initializers[name] = value;
    b_.AddConstant(name);
    return name;
  }
  std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                 AttributeMap attributes) override {
    return b_.Op(op_type, inputs, std::move(attributes));
  }
  ValueInfo Describe(const std::string& value) const override { return DescribeValue(b_.graph(), value); }
  std::string Loss(const LossSpec& spec, const std::string& prediction, const std::string& target_name) override {
    ET_CHECK(spec.type != LossType::kCustom, ErrorCode::kInvalidArgument,
             "custom loss: a loss composed inside it must be a built-in one");
    ValueInfo info = DescribePrediction(b_.graph(), prediction);
    b_.RequestTarget(target_name);
    std::string loss = b_.FreshName(LossTypeName(spec.type) + "_loss");
    AppendBuiltIn(b_, spec, info, loss);
    return loss;
  }

 private:
  LossBuilder& b_;
  const std::vector<std::string>& predictions_;
};

std::string ReductionName(Reduction reduction) { return reduction == Reduction::kMean ? "mean" : "sum"; }

// A target input with the prediction's type and shape, named "<prediction>_target".
std::string AddRegressionTarget(LossBuilder& b, const ValueInfo& prediction) {
  ValueInfo target = prediction;
  if (target.dtype == DataType::kUndefined) target.dtype = b.dtype();
  return b.AddTarget(target, prediction.name + "_target");
}

// Classification scores [N, C, d...] take labels [N, d...] of the label type, named "labels".
std::string AddLabels(LossBuilder& b, const ValueInfo& prediction, const LossSpec& spec, const std::string& loss) {
  ET_CHECK(spec.label_type == DataType::kInt64 || spec.label_type == DataType::kInt32, ErrorCode::kInvalidArgument,
           loss, " loss: labels must be int64 or int32, got ", DataTypeName(spec.label_type));
  ValueInfo labels;
  labels.dtype = spec.label_type;
  labels.has_shape = prediction.has_shape;
  if (prediction.has_shape) {
    ET_CHECK(prediction.shape.size() >= 2, ErrorCode::kInvalidArgument, loss, " loss: prediction '", prediction.name,
             "' must be [N, C] or [N, C, d1, ...], got ", DimsToString(prediction));
    labels.shape.push_back(prediction.shape[0]);
    labels.shape.insert(labels.shape.end(), prediction.shape.begin() + 2, prediction.shape.end());
  }
  return b.AddTarget(labels, "labels");
}

std::string AppendClassification(LossBuilder& b, const ValueInfo& prediction, const LossSpec& spec,
                                 const std::string& op_type, const std::string& output) {
  const std::string loss = spec.type == LossType::kNLL ? "nll" : "cross_entropy";
  std::string labels = AddLabels(b, prediction, spec, loss);
  std::vector<std::string> inputs = {prediction.name, labels};
  if (!spec.class_weights.empty()) {
    if (prediction.has_shape && prediction.shape[1].known()) {
      ET_CHECK(static_cast<int64_t>(spec.class_weights.size()) == prediction.shape[1].value,
               ErrorCode::kInvalidArgument, loss, " loss: ", spec.class_weights.size(),
               " class weights for prediction '", prediction.name, "' with ", prediction.shape[1].value,
               " classes (shape ", DimsToString(prediction), ")");
    }
    std::vector<double> weights(spec.class_weights.begin(), spec.class_weights.end());
    inputs.push_back(b.Constant("class_weights", weights, {static_cast<int64_t>(weights.size())}));
  }
  return b.Op(op_type, inputs,
              {{"reduction", Attribute::String(ReductionName(spec.reduction))},
               {"ignore_index", Attribute::Int(spec.ignore_index)}},
              output);
}

// max(x, 0) - x*t + log(1 + exp(-|x|)); with pos_weight p (torch): (1 - t)*x + (1 + (p - 1)*t)*softplus(-x),
// where softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)).
std::string AppendBCEWithLogits(LossBuilder& b, const ValueInfo& prediction, const LossSpec& spec,
                                const std::string& output) {
  const std::string& x = prediction.name;
  std::string pos_weight_minus_one;
  if (!spec.pos_weight.empty()) {
    const int64_t count = static_cast<int64_t>(spec.pos_weight.size());
    if (count != 1 && prediction.has_shape) {
      ET_CHECK(!prediction.shape.empty(), ErrorCode::kInvalidArgument, "bce_with_logits loss: ", count,
               " pos_weight values for the scalar prediction '", x, "'");
      const Dim& classes = prediction.shape.back();
      ET_CHECK(!classes.known() || classes.value == count, ErrorCode::kInvalidArgument, "bce_with_logits loss: ", count,
               " pos_weight values for prediction '", x, "' with ", classes.value,
               " classes in its last dimension (shape ", DimsToString(prediction), ")");
    }
    std::vector<double> values;
    for (float w : spec.pos_weight) values.push_back(static_cast<double>(w) - 1.0);
    pos_weight_minus_one = b.Constant("pos_weight_minus_one", values, {count});
  }
  std::string t = AddRegressionTarget(b, prediction);
  std::string one = b.Scalar(1.0);
  std::string log1p_exp_neg_abs = b.Op("Log", {b.Op("Add", {one, b.Op("Exp", {b.Op("Neg", {b.Op("Abs", {x})})})})});
  std::string elementwise;
  if (pos_weight_minus_one.empty()) {
    elementwise = b.Op("Add", {b.Op("Sub", {b.Op("Relu", {x}), b.Op("Mul", {x, t})}), log1p_exp_neg_abs});
  } else {
    std::string softplus_neg = b.Op("Add", {b.Op("Relu", {b.Op("Neg", {x})}), log1p_exp_neg_abs});
    std::string log_weight = b.Op("Add", {b.Op("Mul", {pos_weight_minus_one, t}), one});
    elementwise = b.Op("Add", {b.Op("Mul", {b.Op("Sub", {one, t}), x}), b.Op("Mul", {log_weight, softplus_neg})});
  }
  return b.Reduce(elementwise, spec.reduction, output);
}

// Huber (torch.nn.HuberLoss) and SmoothL1 (torch.nn.SmoothL1Loss) in one smooth formula: with a = |p - t|
// and q = min(a, delta) = a - relu(a - delta), Huber = 0.5*q^2 + delta*(a - q) and SmoothL1 = Huber / beta.
std::string AppendHuber(LossBuilder& b, const ValueInfo& prediction, const LossSpec& spec, const std::string& output) {
  const bool smooth_l1 = spec.type == LossType::kSmoothL1;
  const double delta = spec.delta;
  std::string t = AddRegressionTarget(b, prediction);
  std::string abs_diff = b.Op("Abs", {b.Op("Sub", {prediction.name, t})});
  if (smooth_l1 && delta == 0.0) return b.Reduce(abs_diff, spec.reduction, output);  // torch: beta 0 is L1
  std::string quadratic_part = b.Op("Sub", {abs_diff, b.Op("Relu", {b.Op("Sub", {abs_diff, b.Scalar(delta)})})});
  std::string linear_part = b.Op("Sub", {abs_diff, quadratic_part});
  const double quadratic_scale = smooth_l1 ? 0.5 / delta : 0.5;
  const double linear_scale = smooth_l1 ? 1.0 : delta;
  std::string squared = b.Op("Mul", {b.Op("Mul", {quadratic_part, quadratic_part}), b.Scalar(quadratic_scale)});
  std::string linear = linear_scale == 1.0 ? linear_part : b.Op("Mul", {linear_part, b.Scalar(linear_scale)});
  return b.Reduce(b.Op("Add", {squared, linear}), spec.reduction, output);
}

// torch.nn.KLDivLoss: target * (log(target) - input), 0 where target is 0; log_target: exp(t) * (t - input).
std::string AppendKLDiv(LossBuilder& b, const ValueInfo& prediction, const LossSpec& spec, const std::string& output) {
  std::string t = AddRegressionTarget(b, prediction);
  std::string elementwise;
  if (spec.log_target) {
    elementwise = b.Op("Mul", {b.Op("Exp", {t}), b.Op("Sub", {t, prediction.name})});
  } else {
    std::string target_is_zero = b.Op("Equal", {t, b.Scalar(0.0)});
    std::string safe_target = b.Op("Where", {target_is_zero, b.Scalar(1.0), t});
    elementwise = b.Op("Mul", {t, b.Op("Sub", {b.Op("Log", {safe_target}), prediction.name})});
  }
  return b.Reduce(elementwise, spec.reduction, output);
}

// Applies `rename` to every value name of `graph`, its nodes and subgraphs; node names get `prefix`.
void RenameGraph(Graph& graph, const std::function<std::string(const std::string&)>& rename, LossBuilder& b,
                 const std::string& prefix) {
  for (auto& v : graph.inputs) v.name = rename(v.name);
  for (auto& v : graph.outputs) v.name = rename(v.name);
  std::map<std::string, ValueInfo> value_info;
  for (auto& [name, info] : graph.value_info) {
    info.name = rename(name);
    value_info[info.name] = info;
  }
  graph.value_info = std::move(value_info);
  std::map<std::string, Tensor> initializers;
  for (auto& [name, tensor] : graph.initializers) initializers[rename(name)] = tensor;
  graph.initializers = std::move(initializers);
  for (auto& node : graph.nodes) {
    node.name = b.FreshName(prefix + (node.name.empty() ? node.op_type : node.name));
    for (auto& in : node.inputs) in = rename(in);
    for (auto& out : node.outputs) out = rename(out);
    for (auto& [key, attribute] : node.attributes) {
      if (attribute.g) RenameGraph(*attribute.g, rename, b, prefix);
      for (auto& sub : attribute.graphs) RenameGraph(*sub, rename, b, prefix);
    }
  }
}

bool ProvablyNotScalar(const ValueInfo& info) {
  if (!info.has_shape) return false;
  for (const Dim& d : info.shape)
    if (d.known() && d.value != 1) return true;
  return false;
}

void CheckCustomInputFits(const ValueInfo& input, const ValueInfo& prediction, const std::string& path) {
  ET_CHECK(input.dtype == DataType::kUndefined || prediction.dtype == DataType::kUndefined ||
               input.dtype == prediction.dtype,
           ErrorCode::kInvalidArgument, "custom loss ", path, ": input '", input.name, "' is ",
           DataTypeName(input.dtype), " but prediction '", prediction.name, "' is ", DataTypeName(prediction.dtype));
  if (!input.has_shape || !prediction.has_shape) return;
  bool fits = input.shape.size() == prediction.shape.size();
  for (size_t d = 0; fits && d < input.shape.size(); ++d)
    fits = !input.shape[d].known() || !prediction.shape[d].known() || input.shape[d].value == prediction.shape[d].value;
  ET_CHECK(fits, ErrorCode::kInvalidArgument, "custom loss ", path, ": input '", input.name, "' has shape ",
           DimsToString(input), " but prediction '", prediction.name, "' has shape ", DimsToString(prediction));
}

std::string AppendCustom(LossBuilder& b, const std::vector<ValueInfo>& predictions, const LossSpec& spec,
                         const std::string& output) {
  const std::string& path = spec.custom_loss_path;
  ET_CHECK(!path.empty(), ErrorCode::kInvalidArgument, "custom loss: no ONNX file given (custom_loss_path)");
  Model custom = LoadModel(path, ExecutionImportOptions());
  Graph& loss_graph = custom.graph;

  std::vector<ValueInfo> inputs;  // inputs that are also initializers are defaults, not loss inputs
  for (const auto& in : loss_graph.inputs)
    if (!loss_graph.IsInitializer(in.name)) inputs.push_back(in);
  ET_CHECK(inputs.size() >= predictions.size(), ErrorCode::kInvalidArgument, "custom loss ", path, ": its graph has ",
           inputs.size(), " inputs but ", predictions.size(),
           " predictions are given (its inputs are the predictions, then the targets)");
  ET_CHECK(loss_graph.outputs.size() == 1, ErrorCode::kInvalidArgument, "custom loss ", path,
           ": its graph must have one output (the scalar loss), it has ", loss_graph.outputs.size());
  ET_CHECK(!ProvablyNotScalar(loss_graph.outputs[0]), ErrorCode::kInvalidArgument, "custom loss ", path, ": output '",
           loss_graph.outputs[0].name, "' must be a scalar, its shape is ", DimsToString(loss_graph.outputs[0]));

  std::map<std::string, std::string> renamed;
  for (size_t i = 0; i < predictions.size(); ++i) {
    CheckCustomInputFits(inputs[i], predictions[i], path);
    renamed[inputs[i].name] = predictions[i].name;
  }
  for (size_t i = predictions.size(); i < inputs.size(); ++i)  // targets keep their names when free
    renamed[inputs[i].name] = b.IsFree(inputs[i].name) ? inputs[i].name : b.FreshName("custom_loss/" + inputs[i].name);
  const std::string& loss_output = loss_graph.outputs[0].name;
  const bool output_is_computed = !renamed.count(loss_output) && !loss_graph.IsInitializer(loss_output);
  if (output_is_computed) renamed[loss_output] = output;
  for (const auto& [from, to] : renamed) b.Reserve(to);
  auto rename = [&](const std::string& name) -> std::string {
    if (name.empty()) return name;
    auto [it, inserted] = renamed.try_emplace(name);
    if (inserted) it->second = b.FreshName("custom_loss/" + name);
    return it->second;
  };
  RenameGraph(loss_graph, rename, b, "custom_loss/");

  Graph& graph = b.graph();
  for (size_t i = predictions.size(); i < inputs.size(); ++i) {
    ValueInfo target = inputs[i];
    target.name = renamed[inputs[i].name];
    b.AddInput(target);
  }
  for (auto& [name, tensor] : loss_graph.initializers) {
    graph.initializers[name] = tensor;
    b.AddConstant(name);
  }
  for (auto& [name, info] : loss_graph.value_info) graph.value_info.try_emplace(name, info);
  for (auto& node : loss_graph.nodes) {
    if (node.opset == 0) node.opset = custom.OpsetFor(node.domain);
    graph.nodes.push_back(std::move(node));
  }
  ValueInfo output_info = loss_graph.outputs[0];
  if (!output_is_computed) b.Op("Identity", {output_info.name}, {}, output);
  output_info.name = output;
  graph.value_info[output] = output_info;
  return output;
}

void AppendBuiltIn(LossBuilder& b, const LossSpec& spec, const ValueInfo& prediction, const std::string& output) {
  if (spec.type == LossType::kHuber)
    ET_CHECK(spec.delta > 0, ErrorCode::kInvalidArgument, "huber loss: delta must be > 0, got ", spec.delta);
  if (spec.type == LossType::kSmoothL1)
    ET_CHECK(spec.delta >= 0, ErrorCode::kInvalidArgument, "smooth_l1 loss: beta must be >= 0, got ", spec.delta);
  switch (spec.type) {
    case LossType::kMSE: {
      std::string diff = b.Op("Sub", {prediction.name, AddRegressionTarget(b, prediction)});
      b.Reduce(b.Op("Mul", {diff, diff}), spec.reduction, output);
      break;
    }
    case LossType::kL1:
      b.Reduce(b.Op("Abs", {b.Op("Sub", {prediction.name, AddRegressionTarget(b, prediction)})}), spec.reduction,
               output);
      break;
    case LossType::kCrossEntropy: AppendClassification(b, prediction, spec, "SoftmaxCrossEntropyLoss", output); break;
    case LossType::kNLL: AppendClassification(b, prediction, spec, "NegativeLogLikelihoodLoss", output); break;
    case LossType::kBCEWithLogits: AppendBCEWithLogits(b, prediction, spec, output); break;
    case LossType::kHuber:
    case LossType::kSmoothL1: AppendHuber(b, prediction, spec, output); break;
    case LossType::kKLDiv: AppendKLDiv(b, prediction, spec, output); break;
    case LossType::kCustom: Fail(ErrorCode::kInternal, "AppendBuiltIn: a custom loss is not built in");
  }
  ValueInfo loss_info;
  loss_info.name = output;
  loss_info.dtype = prediction.dtype == DataType::kUndefined ? b.dtype() : prediction.dtype;
  loss_info.has_shape = true;
  b.graph().value_info[output] = loss_info;
}

}  // namespace

LossType ParseLossType(const std::string& name) {
  std::string known;
  for (const auto& entry : kLossNames) {
    if (name == entry.name) return entry.type;
    known += known.empty() ? entry.name : std::string(", ") + entry.name;
  }
  Fail(ErrorCode::kInvalidArgument, "unknown loss '", name, "' (known: ", known, ")");
}

std::string LossTypeName(LossType type) {
  for (const auto& entry : kLossNames)
    if (entry.type == type) return entry.name;
  Fail(ErrorCode::kInternal, "LossTypeName: unknown loss type ", static_cast<int>(type));
}

AppendedLoss AppendLoss(Graph& graph, const LossSpec& spec, const std::vector<std::string>& predictions) {
  const std::string loss_name = LossTypeName(spec.type);
  ET_CHECK(!predictions.empty(), ErrorCode::kInvalidArgument, loss_name, " loss: no prediction given");
  ET_CHECK(spec.type == LossType::kCustom || predictions.size() == 1, ErrorCode::kInvalidArgument, loss_name,
           " loss takes one prediction, got ", predictions.size(), " (use a custom loss for several)");
  std::vector<ValueInfo> infos;
  for (const auto& p : predictions) infos.push_back(DescribePrediction(graph, p));
  const ValueInfo& prediction = infos[0];
  const DataType dtype = prediction.dtype == DataType::kUndefined ? DataType::kFloat32 : prediction.dtype;

  // Built on a copy, so that a failed call leaves the graph as it was.
  Graph appended = graph;
  AppendedLoss result;
  LossBuilder b(appended, loss_name + "_loss/", dtype, result);
  result.loss = b.FreshName("loss");
  if (spec.type != LossType::kCustom) {
    AppendBuiltIn(b, spec, prediction, result.loss);
  } else if (spec.compose) {
    ComposerOnBuilder composer(b, predictions);
    std::string value = spec.compose(composer);
    b.Op("Identity", {value}, {}, result.loss);
  } else {
    AppendCustom(b, infos, spec, result.loss);
  }
  graph = std::move(appended);
  return result;
}

}  // namespace edgetrain
