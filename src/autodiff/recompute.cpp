#include "autodiff/recompute.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/scope.hpp"

namespace edgetrain {
namespace {

// Operators that cost one or two passes over their output: cheaper to run again than to keep their output.
bool IsCheap(const Node& node) {
  static const std::unordered_set<std::string> kCheap = {
      "Relu", "LeakyRelu", "Sigmoid", "Tanh",  "HardSigmoid", "HardSwish",          "Elu",
      "Selu", "Softplus",  "Erf",     "Neg",   "Add",         "Sub",                "Mul",
      "Div",  "Clip",      "Sqrt",    "Where", "Transpose", "BatchNormalization", "LayerNormalization"};
  return node.domain.empty() && kCheap.count(node.op_type) != 0;
}

// A Dropout whose ratio is a constant 0 copies its input (and an all-true mask): running it again gives the same.
bool IsIdentityDropout(const Graph& graph, const Node& node,
                       const std::unordered_map<std::string, const Tensor*>& constant_values) {
  if (node.op_type != "Dropout" || !node.domain.empty()) return false;
  if (node.inputs.size() < 2 || node.inputs[1].empty()) return false;  // the default ratio is 0.5
  auto ratio = constant_values.find(node.inputs[1]);
  if (ratio == constant_values.end() && graph.initializers.count(node.inputs[1]))
    return graph.initializers.at(node.inputs[1]).numel() == 1 && graph.initializers.at(node.inputs[1]).DoubleAt(0) == 0;
  return ratio != constant_values.end() && ratio->second->numel() == 1 && ratio->second->DoubleAt(0) == 0;
}

// Backward nodes that read a forward value for its shape or type only (Shape, Size, CastLike of a constant) move
// to just after the last producer of what they read, so that the value is not kept for them.
size_t HoistShapeReads(Graph& graph, size_t forward_nodes) {
  std::vector<Node>& nodes = graph.nodes;
  std::unordered_map<std::string, size_t> producer;
  std::unordered_set<std::string> constants;
  for (const auto& [name, tensor] : graph.initializers) constants.insert(name);
  for (size_t i = 0; i < forward_nodes; ++i) {
    for (const std::string& output : nodes[i].outputs)
      if (!output.empty()) producer[output] = i;
    if (nodes[i].op_type == "Constant" && nodes[i].domain.empty()) constants.insert(nodes[i].outputs.at(0));
  }
  std::vector<std::vector<Node>> after(forward_nodes);
  std::vector<Node> rest;
  size_t hoisted = 0;
  for (size_t i = forward_nodes; i < nodes.size(); ++i) {
    Node& node = nodes[i];
    const bool shape_read = node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size") &&
                            node.inputs.size() == 1 && producer.count(node.inputs[0]);
    const bool type_read = node.domain.empty() && node.op_type == "CastLike" && node.inputs.size() == 2 &&
                           constants.count(node.inputs[0]) && producer.count(node.inputs[1]);
    if (!shape_read && !type_read) {
      rest.push_back(std::move(node));
      continue;
    }
    size_t at = 0;
    for (const std::string& input : node.inputs)
      if (auto p = producer.find(input); p != producer.end()) at = std::max(at, p->second);
    after[at].push_back(std::move(node));
    ++hoisted;
  }
  std::vector<Node> ordered;
  ordered.reserve(nodes.size());
  for (size_t i = 0; i < forward_nodes; ++i) {
    ordered.push_back(std::move(nodes[i]));
    for (Node& node : after[i]) ordered.push_back(std::move(node));
  }
  for (Node& node : rest) ordered.push_back(std::move(node));
  nodes = std::move(ordered);
  return hoisted;
}

}  // namespace

size_t RecomputeCheapForwardValues(Graph& graph, size_t forward_nodes, int max_chain) {
  for (const Node& node : graph.nodes)
    if (HasSubgraph(node)) return 0;
  std::vector<Node>& nodes = graph.nodes;
  forward_nodes = std::min(forward_nodes, nodes.size());
  forward_nodes += HoistShapeReads(graph, forward_nodes);
  std::unordered_map<std::string, size_t> first_backward_read;
  for (size_t i = forward_nodes; i < nodes.size(); ++i)
    for (const std::string& input : nodes[i].inputs)
      if (!input.empty()) first_backward_read.emplace(input, i);
  std::unordered_set<std::string> graph_outputs, names;
  for (const ValueInfo& output : graph.outputs) graph_outputs.insert(output.name);
  for (const Node& node : nodes)
    for (const std::string& output : node.outputs) names.insert(output);

  // Forward values a cheap chain recomputes from kept values (read by the backward pass and not
  // recomputed), graph inputs and initializers: the chain's length.
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, int> chain;
  std::unordered_map<std::string, const Tensor*> constant_values;
  for (size_t i = 0; i < forward_nodes; ++i) {
    const Node& node = nodes[i];
    if (node.op_type == "Constant" && node.domain.empty()) {  // its output is there throughout, as initializers are
      if (const Tensor* value = node.GetTensor("value"); value != nullptr && !node.outputs.empty())
        constant_values[node.outputs[0]] = value;
      continue;
    }
    for (const std::string& output : node.outputs)
      if (!output.empty()) producer[output] = i;
    if (!(IsCheap(node) || IsIdentityDropout(graph, node, constant_values)) || node.outputs.empty() ||
        node.outputs[0].empty() || graph_outputs.count(node.outputs[0]))
      continue;
    int longest = 0;
    bool available = true;
    for (const std::string& input : node.inputs) {
      if (input.empty() || !producer.count(input)) continue;  // graph input or initializer
      if (auto c = chain.find(input); c != chain.end()) {
        longest = std::max(longest, c->second);
      } else if (!first_backward_read.count(input)) {
        available = false;  // freed after the forward pass
        break;
      }
    }
    if (available && longest < max_chain) chain[node.outputs[0]] = longest + 1;
  }

  // Where each needed copy goes: before the first backward node that reads it or a copy that reads it.
  std::unordered_map<std::string, size_t> position;
  size_t recomputed = 0;
  for (const auto& [value, length] : chain)
    if (auto read = first_backward_read.find(value); read != first_backward_read.end()) {
      position[value] = read->second;
      ++recomputed;
    }
  if (recomputed == 0) return 0;
  for (size_t i = forward_nodes; i-- > 0;) {
    const Node& node = nodes[i];
    if (node.outputs.empty() || !position.count(node.outputs[0])) continue;
    const size_t at = position[node.outputs[0]];
    for (const std::string& input : node.inputs)
      if (chain.count(input)) {
        auto [it, inserted] = position.emplace(input, at);
        if (!inserted) it->second = std::min(it->second, at);
      }
  }

  auto fresh = [&](const std::string& base) {
    std::string name = base + "_recomputed";
    for (int k = 2; names.count(name); ++k) name = base + "_recomputed" + std::to_string(k);
    names.insert(name);
    return name;
  };
  std::unordered_map<std::string, std::string> copy_of;
  std::vector<std::pair<size_t, Node>> copies;  // (position, node), in forward order
  for (size_t i = 0; i < forward_nodes; ++i) {
    const Node& original = nodes[i];
    if (original.outputs.empty() || !position.count(original.outputs[0])) continue;
    Node copy = original;
    copy.name = original.name.empty() ? "" : original.name + "_recompute";
    copy.description.clear();
    // Training-mode BatchNormalization normalizes with the batch's statistics, and a runtime may update the
    // running statistics in place of its inputs: the copy gets running statistics of its own (unused).
    if (copy.op_type == "BatchNormalization" && copy.inputs.size() == 5 && original.GetInt("training_mode", 0) != 0) {
      const size_t at = position[original.outputs[0]];
      for (int k : {3, 4}) {
        Node stat;
        stat.name = copy.name.empty() ? "" : copy.name + (k == 3 ? "_mean" : "_var");
        stat.op_type = k == 3 ? "Neg" : "Abs";
        stat.inputs = {copy.inputs[1]};
        stat.outputs = {fresh(copy.inputs[k])};
        copy.inputs[k] = stat.outputs[0];
        copies.emplace_back(at, std::move(stat));
      }
    }
    for (std::string& input : copy.inputs)
      if (auto c = copy_of.find(input); c != copy_of.end() && chain.count(input)) input = c->second;
    for (std::string& output : copy.outputs) {
      if (output.empty()) continue;
      const std::string name = fresh(output);
      if (const ValueInfo* info = graph.FindValueInfo(output)) {
        ValueInfo renamed = *info;
        renamed.name = name;
        graph.value_info[name] = renamed;
      }
      copy_of.emplace(output, name);
      output = name;
    }
    copies.emplace_back(position[original.outputs[0]], std::move(copy));
  }
  for (size_t i = forward_nodes; i < nodes.size(); ++i)
    for (std::string& input : nodes[i].inputs)
      if (auto c = copy_of.find(input); c != copy_of.end() && chain.count(input)) {
        input = c->second;
        nodes[i].description.clear();
      }

  std::stable_sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node> ordered;
  ordered.reserve(nodes.size() + copies.size());
  auto next = copies.begin();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (; next != copies.end() && next->first == i; ++next) ordered.push_back(std::move(next->second));
    ordered.push_back(std::move(nodes[i]));
  }
  nodes = std::move(ordered);
  return recomputed;
}

}  // namespace edgetrain
