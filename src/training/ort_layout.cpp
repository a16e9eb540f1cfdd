#include "training/ort_layout.hpp"

#include <unordered_map>

#include "core/error.hpp"
#include "ir/rewriter.hpp"

namespace edgetrain {

namespace {

bool IsMicrosoftOp(const Node& node, const std::string& op) {
  return node.op_type == op && node.domain == kMicrosoftDomain;
}

// Names output `index` of `node` (adding outputs as needed) and lists it as a graph output.
std::string ExposeOutput(Graph& graph, Node& node, size_t index, ValueInfo info) {
  if (node.outputs.size() <= index) node.outputs.resize(index + 1);
  if (node.outputs[index].empty()) node.outputs[index] = node.name + ".exposed_output_" + std::to_string(index);
  info.name = node.outputs[index];
  for (const ValueInfo& out : graph.outputs)
    if (out.name == info.name) return info.name;
  graph.outputs.push_back(info);
  return info.name;
}

const ValueInfo* FindInput(const Graph& graph, const std::string& name) {
  for (const ValueInfo& in : graph.inputs)
    if (in.name == name) return &in;
  return nullptr;
}

}  // namespace

OrtAccumulators ExposeAccumulatedGradients(Model& training) {
  OrtAccumulators result;
  Graph& g = training.graph;
  for (Node& node : g.nodes) {
    if (!IsMicrosoftOp(node, "InPlaceAccumulatorV2")) continue;
    ET_CHECK(!node.inputs.empty() && !node.outputs.empty(), ErrorCode::kInvalidModel, training.source, ": ",
             node.Describe(), " needs a buffer input and a flag output");
    const std::string& buffer = node.inputs[0];
    const ValueInfo* info = FindInput(g, buffer);
    ET_CHECK(info != nullptr, ErrorCode::kInvalidModel, training.source, ": ", node.Describe(),
             " accumulates into '", buffer, "', which is not a graph input");
    result.accumulated_output[buffer] = ExposeOutput(g, node, 1, *info);
    result.flag_outputs.push_back(node.outputs[0]);
  }
  return result;
}

std::optional<OrtOptimizerLayout> PrepareOrtOptimizer(Model& optimizer) {
  Graph& g = optimizer.graph;
  Node* update = nullptr;
  size_t weights_index = 0;
  for (Node& node : g.nodes) {
    if (IsMicrosoftOp(node, "AdamWOptimizer")) weights_index = 2;
    else if (IsMicrosoftOp(node, "SGDOptimizerV2")) weights_index = 1;
    else continue;
    ET_CHECK(update == nullptr, ErrorCode::kInvalidModel, optimizer.source,
             ": more than one optimizer node (", update->Describe(), ", ", node.Describe(), ")");
    update = &node;
  }
  if (update == nullptr) return std::nullopt;
  // ORT's SGD model declares a first_order_moments input that its SGDOptimizerV2 does not read: an input no node
  // reads needs no feed.
  std::unordered_map<std::string, size_t> reads;
  CountReads(g, reads);
  std::erase_if(g.inputs, [&](const ValueInfo& in) { return !reads.count(in.name); });

  OrtOptimizerLayout layout;
  auto graph_input = [&](size_t index, const char* what) {
    ET_CHECK(update->inputs.size() > index && FindInput(g, update->inputs[index]) != nullptr, ErrorCode::kInvalidModel,
             optimizer.source, ": ", update->Describe(), ": its ", what, " input is not a graph input");
    return update->inputs[index];
  };
  ET_CHECK(FindInput(g, layout.learning_rate) != nullptr, ErrorCode::kInvalidModel, optimizer.source,
           ": ORT optimizer model without a learning_rate input");
  if (FindInput(g, "step") != nullptr) layout.step = "step";
  layout.params = graph_input(weights_index, "weights");
  layout.gradients = FindInput(g, "gradients") != nullptr ? "gradients" : graph_input(weights_index + 1, "gradients");
  for (size_t k = weights_index + 2; k < update->inputs.size(); ++k) {
    const ValueInfo* info = FindInput(g, update->inputs[k]);
    if (update->inputs[k].empty() || info == nullptr || !info->is_sequence) break;  // update_signal and after
    layout.states.push_back(update->inputs[k]);
  }
  ValueInfo sequence{"", DataType::kFloat32, false, {}, true};
  ValueInfo flag{"", DataType::kBool, true, {Dim{1, ""}}, false};
  layout.updated_flag = ExposeOutput(g, *update, 0, flag);
  layout.updated_params = ExposeOutput(g, *update, 1, sequence);
  for (size_t k = 0; k < layout.states.size(); ++k)
    layout.updated_states.push_back(ExposeOutput(g, *update, 2 + k, sequence));
  return layout;
}

}  // namespace edgetrain
