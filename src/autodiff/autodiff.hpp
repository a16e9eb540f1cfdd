// Reverse-mode automatic differentiation over our IR: appends to a graph the nodes that compute
// d(loss)/d(value) for a list of values, by a reverse walk that calls each operator's gradient rule.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

struct GradientRequest {
  std::string loss;                      // a float value of the graph (usually a scalar)
  std::vector<std::string> wrt;          // graph inputs or initializers to differentiate against
  std::vector<std::string> grad_names;   // name of each gradient value (default: "<wrt>_grad")
  std::map<std::string, int64_t> opsets; // the graph's opset imports (for the rules)
};

// Appends the backward nodes to `graph` and returns the gradient value names in `wrt` order.
// A value in `wrt` that does not reach the loss gets a zero gradient. Throws kNotImplemented naming
// the node and operator when an operator on the path to a `wrt` value has no gradient rule.
std::vector<std::string> AppendGradients(Graph& graph, const GradientRequest& request);

}  // namespace edgetrain
