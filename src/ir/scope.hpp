// Lexical scope of subgraphs (If/Loop/Scan bodies): the values they read from enclosing graphs.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

// Names a subgraph reads from its enclosing scopes (its nested subgraphs' reads included), sorted.
std::vector<std::string> OuterReads(const Graph& graph);

}  // namespace edgetrain
