// Graph-level passes over our IR.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

// Removes nodes none of whose outputs reach `keep` (default: the graph outputs).
void EliminateDeadNodes(Graph& graph, const std::vector<std::string>& keep = {});

// Replaces each Identity node that copies an initializer by an initializer of its own holding a
// copy. Exporters emit such nodes when they deduplicate equal tensors (PyTorch shares BatchNorm's
// initial weight and running variance, both all ones); for training they are distinct variables.
void MaterializeInitializerCopies(Graph& graph);

// Evaluates a node on constant inputs; returns its outputs (one per node output), or nullopt when
// they cannot be stored as constants (sequences).
using NodeEvaluator =
    std::function<std::optional<std::vector<Tensor>>(const Node&, const std::vector<Tensor>&)>;

// Replaces every node whose inputs are all constant (initializers that are not also graph inputs)
// and for which `can_fold(node)` holds by initializers holding its outputs. Returns the count.
size_t FoldConstants(Graph& graph, const NodeEvaluator& evaluate, const std::function<bool(const Node&)>& can_fold);

}  // namespace edgetrain
