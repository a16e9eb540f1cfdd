// What the backward pass keeps: forward values that elementwise operators and normalizations compute
// cheaply from values the backward pass keeps anyway are recomputed there instead of kept across it.
#pragma once

#include <cstddef>

#include "ir/graph.hpp"

namespace edgetrain {

// `graph` holds the forward nodes first (the first `forward_nodes`), then the backward nodes. Each forward
// value that backward nodes read and that a chain of at most `max_chain` cheap operators (activations,
// elementwise arithmetic, BatchNormalization, LayerNormalization, Transpose, a Dropout of ratio 0) computes from kept values, graph
// inputs or initializers, is computed again by a copy of that chain placed just before its first
// backward reader, which then reads the copy: the original is freed after its last forward reader.
// The results are the same bits. Returns how many values are recomputed; graphs with subgraphs are left as they are.
size_t RecomputeCheapForwardValues(Graph& graph, size_t forward_nodes, int max_chain = 6);

}  // namespace edgetrain
