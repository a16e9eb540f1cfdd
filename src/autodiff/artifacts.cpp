#include "autodiff/artifacts.hpp"
#include "autodiff/recompute.hpp"
#include "autodiff/recurrent_last_step.hpp"

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_set>

#include "autodiff/autodiff.hpp"
#include "checkpoint/checkpoint.hpp"
#include "ir/passes.hpp"
#include "ir/scope.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "ops/kernel.hpp"
#include "runtime/session.hpp"
#include "runtime/export_options.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

constexpr int64_t kTrainingOpset = 17;
constexpr const char* kTrainingModeTrue = "edgetrain.training_mode_true";
constexpr const char* kTrainingModeFalse = "edgetrain.training_mode_false";

bool IsBatchNorm(const Node& n) { return n.domain.empty() && n.op_type == "BatchNormalization"; }

// Scales of QuantizeLinear/DequantizeLinear: fixed by default, as in PyTorch's FakeQuantize (observer
// buffers); listed in requires_grad they train with LSQ's gradient.
std::set<std::string> QuantizationScales(const Graph& g) {
  std::set<std::string> scales;
  for (const auto& n : g.nodes)
    if (n.domain.empty() && (n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear") && n.inputs.size() > 1)
      scales.insert(n.inputs[1]);
  return scales;
}

bool IsDropout(const Node& n) { return n.domain.empty() && n.op_type == "Dropout"; }

// Float initializers in order of first use, so parameter order follows the network.
std::vector<std::string> FloatInitializersInUseOrder(const Graph& g) {
  std::vector<std::string> order;
  std::unordered_set<std::string> seen;
  for (size_t index : TopologicalOrder(g))
    for (const auto& in : NodeReads(g.nodes[index]))  // subgraphs' reads of the outer scope included
      if (!seen.count(in) && g.IsInitializer(in) && IsFloatType(g.initializers.at(in).dtype())) {
        seen.insert(in);
        order.push_back(in);
      }
  return order;
}

ValueInfo InfoOf(const std::string& name, const Tensor& t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t.dtype();
  v.has_shape = true;
  for (int64_t d : t.shape()) v.shape.push_back(Dim{d, ""});
  return v;
}

ValueInfo OutputInfo(const Graph& g, const std::string& name) {
  if (const ValueInfo* v = g.FindValueInfo(name)) {
    ValueInfo copy = *v;
    copy.name = name;
    return copy;
  }
  ValueInfo v;
  v.name = name;
  return v;
}

// Parameters leave the initializers and become graph inputs (fed from the checkpoint).
void ParametersToInputs(Graph& g, const std::vector<std::string>& params) {
  for (const auto& p : params) {
    g.inputs.push_back(InfoOf(p, g.initializers.at(p)));
    g.initializers.erase(p);
  }
}

// Puts BatchNormalization and Dropout into training or eval mode. In training mode BatchNorm
// returns its updated running statistics as "<stat>.updated" and Dropout returns its mask.
// Nodes marked in `as_exported` keep the export's mode.
std::vector<std::string> SetMode(Graph& g, bool training, const std::vector<std::string>& states,
                                 const std::vector<bool>& as_exported = {}) {
  auto is_state = [&](const std::string& v) { return std::count(states.begin(), states.end(), v) != 0; };
  std::vector<std::string> state_updates;
  g.initializers[training ? kTrainingModeTrue : kTrainingModeFalse] = Tensor::Scalar<bool>(training);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (k < as_exported.size() && as_exported[k]) continue;
    if (IsBatchNorm(n)) {
      n.attributes["training_mode"] = Attribute::Int(training ? 1 : 0);
      // Statistics that are not state (computed in the graph) cannot be written back.
      bool writes_back = training && n.inputs.size() > 4 && is_state(n.inputs[3]) && is_state(n.inputs[4]);
      n.outputs.resize(writes_back ? 3 : 1);
      if (writes_back) {
        for (size_t k = 1; k <= 2; ++k) {
          n.outputs[k] = StateUpdateName(n.inputs[2 + k]);
          state_updates.push_back(n.outputs[k]);
        }
      }
    } else if (IsDropout(n)) {
      n.inputs.resize(3);
      n.inputs[2] = training ? kTrainingModeTrue : kTrainingModeFalse;
      if (training && (n.outputs.size() < 2 || n.outputs[1].empty())) {
        n.outputs.resize(2);
        n.outputs[1] = n.name + ".mask";
      }
    }
  }
  return state_updates;
}

void CheckNames(const Graph& g, const std::vector<std::string>& names, const std::string& what,
                const std::string& source) {
  for (const auto& name : names) {
    ET_CHECK(g.IsInitializer(name), ErrorCode::kInvalidArgument, what, " '", name, "' is not an initializer of ",
             source);
    ET_CHECK(IsFloatType(g.initializers.at(name).dtype()), ErrorCode::kInvalidArgument, what, " '", name, "' is ",
             DataTypeName(g.initializers.at(name).dtype()), ", only float parameters can train");
  }
}

std::vector<std::string> ModelOutputsFor(const Graph& g, const std::vector<std::string>& names,
                                         const std::string& what, const std::string& source) {
  for (const auto& name : names) {
    bool found = std::any_of(g.outputs.begin(), g.outputs.end(), [&](const ValueInfo& o) { return o.name == name; });
    if (!found) {
      std::string valid;
      for (const auto& o : g.outputs) valid += (valid.empty() ? "" : ", ") + o.name;
      Fail(ErrorCode::kInvalidArgument, what, " '", name, "' is not an output of ", source, " (outputs: ", valid, ")");
    }
  }
  return names;
}

// Runs the forward graph once on dummy inputs (symbolic dimensions = 2) and records the rank of
// every value static shape inference left without one; gradient rules need ranks, not sizes.
void FillRanksByProbe(Model& model) {
  Model probe = model;
  std::vector<std::string> unknown;
  for (const auto& n : probe.graph.nodes)
    for (const auto& o : n.outputs) {
      const ValueInfo* v = probe.graph.FindValueInfo(o);
      if (!o.empty() && (!v || !v->has_shape) && !(v && v->is_sequence)) unknown.push_back(o);
    }
  if (unknown.empty()) return;
  probe.graph.outputs.clear();
  for (const auto& name : unknown) {
    ValueInfo v;
    v.name = name;
    probe.graph.outputs.push_back(v);
  }
  std::map<std::string, Tensor> feeds;
  for (const auto& in : probe.graph.inputs) {
    if (probe.graph.IsInitializer(in.name)) continue;
    Shape shape;
    for (const auto& d : in.shape) shape.push_back(d.known() ? d.value : 2);
    feeds[in.name] = Tensor::Zeros(in.dtype == DataType::kUndefined ? DataType::kFloat32 : in.dtype, shape);
  }
  std::vector<Tensor> values;
  try {
    SessionOptions options;
    options.constant_folding = false;
    values = Session(probe, options).Run(feeds);
  } catch (const Error&) {
    return;  // no probe possible (e.g. inputs of unknown rank): rules fall back to what they know
  }
  for (size_t i = 0; i < unknown.size(); ++i) {
    ValueInfo& v = model.graph.value_info[unknown[i]];
    v.name = unknown[i];
    v.dtype = values[i].dtype();
    v.has_shape = true;
    v.shape.assign(values[i].rank(), Dim{});
  }
}

}  // namespace

Artifacts BuildArtifacts(const Model& forward_model, const ArtifactOptions& options) {
  Model forward = forward_model;
  MaterializeInitializerCopies(forward.graph);
  FillRanksByProbe(forward);
  const Graph& g0 = forward.graph;
  const std::string& source = forward.source;
  CheckNames(g0, options.requires_grad, "requires-grad parameter", source);
  CheckNames(g0, options.frozen, "frozen parameter", source);
  for (const auto& name : options.requires_grad)
    ET_CHECK(std::find(options.frozen.begin(), options.frozen.end(), name) == options.frozen.end(),
             ErrorCode::kInvalidArgument, "parameter '", name, "' is listed both as requires-grad and as frozen");

  Artifacts out;
  std::set<std::string> states;
  for (const auto& n : g0.nodes)
    if (IsBatchNorm(n))
      for (size_t k = 3; k <= 4 && k < n.inputs.size(); ++k)
        if (g0.IsInitializer(n.inputs[k])) states.insert(n.inputs[k]);
  const std::set<std::string> scales = QuantizationScales(g0);
  for (const auto& p : FloatInitializersInUseOrder(g0)) {
    bool listed_frozen = std::count(options.frozen.begin(), options.frozen.end(), p) != 0;
    bool listed_trainable = std::count(options.requires_grad.begin(), options.requires_grad.end(), p) != 0;
    bool trains_by_default = options.requires_grad.empty() && !options.unlisted_are_constants;
    if (states.count(p) && !listed_trainable) out.states.push_back(p);
    else if (listed_trainable || (trains_by_default && !listed_frozen && !scales.count(p))) out.trainable.push_back(p);
    else if (listed_frozen || !options.unlisted_are_constants) out.frozen.push_back(p);
  }
  ET_CHECK(!out.trainable.empty() || options.unlisted_are_constants, ErrorCode::kInvalidArgument, source,
           " has no trainable parameter (no float initializer is left to train)");

  std::vector<std::string> predictions = options.loss_inputs;
  if (predictions.empty()) {
    ET_CHECK(!g0.outputs.empty(), ErrorCode::kInvalidArgument, source, " has no outputs");
    predictions = {g0.outputs[0].name};
  }
  ModelOutputsFor(g0, predictions, "loss input", source);
  ModelOutputsFor(g0, options.additional_outputs, "additional output", source);

  std::vector<std::string> params = out.trainable;
  params.insert(params.end(), out.frozen.begin(), out.frozen.end());
  params.insert(params.end(), out.states.begin(), out.states.end());
  for (const auto& p : params) out.initial_values[p] = g0.initializers.at(p);
  {  // `rnn(x)[0][:, -1]` reads Y_h, so that Y is neither kept nor differentiated; requested values keep their meaning
    std::vector<std::string> requested = predictions;
    requested.insert(requested.end(), options.additional_outputs.begin(), options.additional_outputs.end());
    ReadLastRecurrentStepFromFinalState(forward.graph, std::max<int64_t>(forward.OpsetFor(""), kTrainingOpset),
                                        requested);
  }

  auto build = [&](bool training) {
    Model m = forward;
    m.opsets[""] = std::max<int64_t>(m.OpsetFor(""), kTrainingOpset);
    m.opsets[kEdgetrainDomain] = 1;  // fused gradient operators
    Graph& g = m.graph;
    ParametersToInputs(g, params);
    std::vector<bool> as_exported;
    if (training && options.frozen_backbone_as_exported) {
      // BatchNormalization and Dropout in eval form that no trainable parameter reaches stay so.
      std::unordered_set<std::string> trained(out.trainable.begin(), out.trainable.end());
      as_exported.assign(g.nodes.size(), false);
      for (size_t k : TopologicalOrder(g)) {
        const Node& n = g.nodes[k];
        bool reached = false;
        for (const auto& in : NodeReads(n)) reached |= trained.count(in) != 0;
        if (reached) {
          for (const auto& o : n.outputs) trained.insert(o);
        } else {
          const bool eval_form = IsBatchNorm(n) ? n.GetInt("training_mode", 0) == 0 && n.outputs.size() == 1
                                                : IsDropout(n) && (n.inputs.size() < 3 || n.inputs[2].empty());
          as_exported[k] = eval_form;
        }
      }
    }
    std::vector<std::string> state_updates = SetMode(g, training, out.states, as_exported);
    AppendedLoss loss = AppendLoss(g, options.loss, predictions);
    std::vector<ValueInfo> user_inputs, param_inputs;
    for (const auto& in : g.inputs)
      (std::count(params.begin(), params.end(), in.name) ? param_inputs : user_inputs).push_back(in);
    // Inputs: user inputs, loss targets (already appended by AppendLoss), then parameters.
    std::stable_sort(param_inputs.begin(), param_inputs.end(), [&](const ValueInfo& a, const ValueInfo& b) {
      return std::find(params.begin(), params.end(), a.name) < std::find(params.begin(), params.end(), b.name);
    });
    g.inputs = user_inputs;
    g.inputs.insert(g.inputs.end(), param_inputs.begin(), param_inputs.end());

    std::vector<ValueInfo> outputs;
    ValueInfo loss_info;
    loss_info.name = loss.loss;
    loss_info.dtype = DataType::kFloat32;
    loss_info.has_shape = true;
    outputs.push_back(loss_info);
    for (const auto& name : options.additional_outputs) outputs.push_back(OutputInfo(forward.graph, name));
    if (training) {
      GradientRequest request;
      request.loss = loss.loss;
      request.wrt = out.trainable;
      request.opsets = m.opsets;
      std::vector<std::string> grads;
      const size_t forward_nodes = g.nodes.size();
      if (!out.trainable.empty()) grads = AppendGradients(g, request);
      if (options.recompute_cheap_values) RecomputeCheapForwardValues(g, forward_nodes);
      for (size_t i = 0; i < grads.size(); ++i) {
        ValueInfo v = InfoOf(grads[i], forward.graph.initializers.at(out.trainable[i]));
        outputs.push_back(v);
      }
      for (const auto& s : state_updates) {
        std::string state = s.substr(0, s.size() - kStateUpdateSuffix.size());
        outputs.push_back(InfoOf(s, forward.graph.initializers.at(state)));
      }
    }
    g.outputs = outputs;
    EliminateDeadNodes(g);
    for (auto it = g.initializers.begin(); it != g.initializers.end();) {  // drop unused constants
      bool used = false;
      for (const auto& n : g.nodes) {
        const std::vector<std::string> reads = NodeReads(n);
        used |= std::count(reads.begin(), reads.end(), it->first) != 0;
      }
      it = used ? std::next(it) : g.initializers.erase(it);
    }
    return m;
  };
  out.training = build(true);
  out.eval = build(false);

  std::vector<ValueInfo> infos;
  for (const auto& p : out.trainable) infos.push_back(InfoOf(p, g0.initializers.at(p)));
  if (!out.trainable.empty()) out.optimizer = BuildOptimizerModel(options.optimizer, out.trainable, infos);
  return out;
}

ArtifactPaths GenerateArtifacts(const std::string& model_path, const std::string& out_dir,
                                const ArtifactOptions& options) {
  ImportOptions import = ExecutionImportOptions();
  import.upgrade_to_opset = kTrainingOpset;
  Model forward = LoadModel(model_path, import);
  Artifacts artifacts = BuildArtifacts(forward, options);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  ET_CHECK(!ec, ErrorCode::kIoError, "cannot create the artifact directory '", out_dir, "': ", ec.message());
  std::string base = (std::filesystem::path(out_dir) / options.prefix).string();
  ArtifactPaths paths{base + "training_model.onnx", base + "eval_model.onnx", base + "optimizer_model.onnx",
                      base + "checkpoint"};
  SaveModel(artifacts.training, paths.training_model, ExecutionExportOptions());
  SaveModel(artifacts.eval, paths.eval_model, ExecutionExportOptions());
  if (artifacts.trainable.empty())
    paths.optimizer_model.clear();  // nothing to update
  else
    SaveModel(artifacts.optimizer, paths.optimizer_model, ExecutionExportOptions());

  Checkpoint checkpoint;
  checkpoint.is_nominal = options.nominal_checkpoint;
  for (const auto& p : artifacts.trainable) checkpoint.trainable[p] = artifacts.initial_values.at(p);
  for (const auto* list : {&artifacts.frozen, &artifacts.states})
    for (const auto& p : *list) checkpoint.frozen[p] = artifacts.initial_values.at(p);
  SaveCheckpoint(checkpoint, paths.checkpoint, /*include_optimizer_state=*/false);
  return paths;
}

}  // namespace edgetrain
