// What the gradient rule of an operator with a subgraph (Scan) needs from the autodiff walk beyond
// GradientContext: the outer-scope values its body reads, and the body differentiated by the walk.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/gradient.hpp"

namespace edgetrain {

class SubgraphGradientContext : public GradientContext {
 public:
  // Whether a value the node's subgraph reads from the enclosing graph needs a gradient; declares it.
  virtual bool NeedsGradOf(const std::string& outer_value) const = 0;
  virtual void SetGradOf(const std::string& outer_value, const std::string& value) = 0;
  // The vector-Jacobian product of `graph` by our autodiff: inputs (graph's inputs..., `outer`..., one
  // incoming gradient per graph output), outputs (d/d each graph input..., d/d each of `outer`...).
  // Throws kNotImplemented naming the node when the graph is not differentiable.
  virtual std::shared_ptr<Graph> DifferentiateSubgraph(const Graph& graph, const std::vector<std::string>& outer) = 0;
};

}  // namespace edgetrain
