// The bookkeeping that graph rewrites share (ir/passes.cpp, and the offline rewrites of autodiff/): who
// produces each value, how often each value is read, and the nodes a rewrite absorbed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.hpp"
#include "ir/scope.hpp"

namespace edgetrain {

// How many times each value is read: by node inputs (subgraphs included) and as a graph output.
inline void CountReads(const Graph& graph, std::unordered_map<std::string, size_t>& reads) {
  for (const auto& n : graph.nodes) {
    for (const auto& i : n.inputs)
      if (!i.empty()) ++reads[i];
    for (const Graph* sub : Subgraphs(n)) CountReads(*sub, reads);
  }
  for (const auto& o : graph.outputs) ++reads[o.name];
}

// The rewrites of one fusion pass: which node produces each value, how often each value is read,
// and the nodes a fusion absorbed (dropped at the end).
class Rewriter {
 public:
  explicit Rewriter(Graph& graph) : graph_(graph), removed_(graph.nodes.size(), false) {
    CountReads(graph, reads_);
    for (size_t k = 0; k < graph.nodes.size(); ++k)
      for (const auto& o : graph.nodes[k].outputs)
        if (!o.empty()) producer_[o] = k;
  }

  // The default-domain node of type `op_type` whose only output is `value` and that nothing but one
  // reader reads; null otherwise.
  Node* SoleProducer(const std::string& value, const char* op_type) {
    Node* n = Producer(value);
    if (!n || !n->domain.empty() || n->op_type != op_type || n->outputs.size() != 1) return nullptr;
    return reads_[value] == 1 ? n : nullptr;
  }

  // The node that makes `value` while it is still in the graph; null for an input or initializer.
  Node* Producer(const std::string& value) {
    auto it = producer_.find(value);
    return it == producer_.end() || removed_[it->second] ? nullptr : &graph_.nodes[it->second];
  }

  // `producer` takes over output 0 of `last`, which goes away with the nodes `between` them.
  void Absorb(Node& producer, size_t last, std::initializer_list<const Node*> between = {}) {
    producer.outputs.assign(1, graph_.nodes[last].outputs[0]);
    producer_[producer.outputs[0]] = static_cast<size_t>(&producer - graph_.nodes.data());
    removed_[last] = true;
    for (const Node* n : between) removed_[static_cast<size_t>(n - graph_.nodes.data())] = true;
    ++count_;
  }

  // One more read of `value` (a rewrite made a node read it).
  void AddRead(const std::string& value) { ++reads_[value]; }

  // `n` goes; the reads of its inputs go with it.
  void Remove(const Node& n) {
    removed_[static_cast<size_t>(&n - graph_.nodes.data())] = true;
    for (const std::string& input : n.inputs)
      if (!input.empty()) DropRead(input);
  }

  size_t Reads(const std::string& value) {
    auto it = reads_.find(value);
    return it == reads_.end() ? 0 : it->second;
  }

  // True for an initializer a feed cannot override.
  bool IsConstant(const std::string& value) const {
    if (!graph_.IsInitializer(value)) return false;
    for (const auto& in : graph_.inputs)
      if (in.name == value) return false;
    return true;
  }

  // The value of `value` when it is constant: an initializer no feed overrides, or a Constant node's tensor.
  const Tensor* ConstantTensor(const std::string& value) {
    if (IsConstant(value)) return &graph_.initializers.at(value);
    const Node* p = Producer(value);
    if (!p || !p->domain.empty() || p->op_type != "Constant" || p->outputs.size() != 1) return nullptr;
    const Attribute* a = p->Find("value");
    return a && a->kind == Attribute::Kind::kTensor ? &a->t : nullptr;
  }

  // The integers of a constant int64 or int32 `value`; nullopt for anything else.
  std::optional<std::vector<int64_t>> ConstantInts(const std::string& value) {
    const Tensor* t = value.empty() ? nullptr : ConstantTensor(value);
    if (!t || (t->dtype() != DataType::kInt64 && t->dtype() != DataType::kInt32)) return std::nullopt;
    return t->ToInt64Vector();
  }

  // One read of `value` went away: an initializer nothing reads any more (and no feed overrides) goes.
  void DropRead(const std::string& value) {
    if (--reads_[value] == 0 && IsConstant(value)) graph_.initializers.erase(value);
  }

  // A name no value of the graph has yet, from `base`.
  std::string FreshName(const std::string& base) {
    if (used_names_.empty()) {
      for (const auto& [name, t] : graph_.initializers) used_names_.insert(name);
      for (const auto& in : graph_.inputs) used_names_.insert(in.name);
      for (const auto& n : graph_.nodes) {
        used_names_.insert(n.inputs.begin(), n.inputs.end());
        used_names_.insert(n.outputs.begin(), n.outputs.end());
      }
    }
    std::string name = base;
    for (int k = 1; used_names_.count(name); ++k) name = base + "_" + std::to_string(k);
    used_names_.insert(name);
    return name;
  }

  size_t Finish() {
    std::vector<Node> kept;
    for (size_t k = 0; k < graph_.nodes.size(); ++k)
      if (!removed_[k]) kept.push_back(std::move(graph_.nodes[k]));
    graph_.nodes = std::move(kept);
    return count_;
  }

 private:
  Graph& graph_;
  std::vector<bool> removed_;
  std::unordered_map<std::string, size_t> reads_, producer_;
  std::unordered_set<std::string> used_names_;
  size_t count_ = 0;
};

}  // namespace edgetrain
