// Lexical scope of subgraphs (If/Loop/Scan bodies): the values they read from enclosing graphs.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

// The graphs a node's attributes hold (If's branches, Loop's and Scan's bodies, graph lists).
std::vector<const Graph*> Subgraphs(const Node& node);
bool HasSubgraph(const Node& node);
// Names a subgraph reads from its enclosing scopes (its nested subgraphs' reads included), sorted.
std::vector<std::string> OuterReads(const Graph& graph);
// A node's non-empty inputs, then the outer-scope values its subgraph attributes read.
std::vector<std::string> NodeReads(const Node& node);

}  // namespace edgetrain
