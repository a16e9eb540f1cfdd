#include "ir/passes.hpp"

#include <unordered_set>

namespace edgetrain {

void EliminateDeadNodes(Graph& graph, const std::vector<std::string>& keep) {
  std::unordered_set<std::string> live(keep.begin(), keep.end());
  if (keep.empty())
    for (const auto& o : graph.outputs) live.insert(o.name);
  std::vector<size_t> order = TopologicalOrder(graph);
  std::vector<bool> needed(graph.nodes.size(), false);
  for (size_t k = order.size(); k-- > 0;) {
    const Node& n = graph.nodes[order[k]];
    bool used = false;
    for (const auto& o : n.outputs) used |= !o.empty() && live.count(o);
    if (!used) continue;
    needed[order[k]] = true;
    for (const auto& i : n.inputs)
      if (!i.empty()) live.insert(i);
    for (const auto& [key, a] : n.attributes) {  // subgraphs may read outer values
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sub : subs)
        for (const auto& sn : sub->nodes)
          for (const auto& i : sn.inputs) live.insert(i);
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (needed[i]) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
}

void MaterializeInitializerCopies(Graph& graph) {
  std::unordered_set<std::string> outputs;
  for (const auto& o : graph.outputs) outputs.insert(o.name);
  std::vector<Node> kept;
  for (auto& n : graph.nodes) {
    bool copies_initializer = n.domain.empty() && n.op_type == "Identity" && n.inputs.size() == 1 &&
                              n.outputs.size() == 1 && graph.IsInitializer(n.inputs[0]) && !outputs.count(n.outputs[0]);
    if (copies_initializer) graph.initializers[n.outputs[0]] = graph.initializers.at(n.inputs[0]).Clone();
    else kept.push_back(std::move(n));
  }
  graph.nodes = std::move(kept);
}

size_t FoldConstants(Graph& graph, const NodeEvaluator& evaluate, const std::function<bool(const Node&)>& can_fold) {
  std::unordered_set<std::string> overridable;
  for (const auto& in : graph.inputs) overridable.insert(in.name);
  std::unordered_set<std::string> outputs;
  for (const auto& o : graph.outputs) outputs.insert(o.name);
  auto is_constant = [&](const std::string& v) {
    return v.empty() || (graph.initializers.count(v) && !overridable.count(v));
  };
  size_t folded = 0;
  std::vector<Node> kept;
  for (size_t index : TopologicalOrder(graph)) {
    Node& n = graph.nodes[index];
    bool constant = !n.attributes.count("then_branch") && can_fold(n);
    for (const auto& i : n.inputs) constant = constant && is_constant(i);
    for (const auto& o : n.outputs) constant = constant && !outputs.count(o);  // keep output producers
    if (constant) {
      std::vector<Tensor> inputs;
      for (const auto& i : n.inputs) inputs.push_back(i.empty() ? Tensor() : graph.initializers.at(i));
      std::optional<std::vector<Tensor>> results = evaluate(n, inputs);
      if (results) {
        for (size_t k = 0; k < n.outputs.size() && k < results->size(); ++k)
          if (!n.outputs[k].empty()) graph.initializers[n.outputs[k]] = (*results)[k];
        ++folded;
        continue;
      }
    }
    kept.push_back(std::move(n));
  }
  graph.nodes = std::move(kept);
  return folded;
}

}  // namespace edgetrain
