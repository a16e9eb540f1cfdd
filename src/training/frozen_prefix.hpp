// The frozen prefix of a training graph: the nodes that read the caller's inputs and fixed (frozen)
// parameters but no trainable one. It runs as an inference model of its own (frozen parameters baked
// in as constants, so BatchNormalization folds into Conv and activations fuse) and hands the rest of
// the training graph only the tensors that cross the boundary.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

struct FrozenPrefixSplit {
  Model prefix;                       // inputs: `inputs` and `fixed`; outputs: `boundary`
  Model rest;                         // the training graph without the prefix; reads `boundary` as inputs
  std::vector<std::string> inputs;    // the caller's inputs the prefix reads
  std::vector<std::string> fixed;     // the frozen parameters the prefix reads
  std::vector<std::string> boundary;  // prefix values that the rest reads
};

// `caller`: the training model's inputs the caller feeds; `fixed`: inputs whose values do not change
// from step to step (frozen parameters that nothing updates). Every other input is variable. Returns
// nullopt when the prefix holds no Conv, Gemm or MatMul (nothing to gain).
std::optional<FrozenPrefixSplit> SplitFrozenPrefix(const Model& training, const std::set<std::string>& caller,
                                                   const std::set<std::string>& fixed);

// Whether a cache of the prefix's boundary values per sample gives what running the prefix would: every
// frozen node that reads the caller's inputs keeps the samples of the batch (axis 0) apart and draws no
// random numbers. Throws kInvalidArgument naming the first node that mixes samples (BatchNormalization
// in training mode, a reduction over the batch axis, Dropout with a nonzero ratio, ...) or whose effect on
// the batch axis edgetrain cannot tell. `not_trained`: the fixed parameters and those the step only updates
// (BatchNorm's running statistics), so that the whole frozen part is checked. `compiled_prefix` is the prefix
// as a session compiled it (folded); where it computes shapes from the batch, it runs on zeros at batch sizes 2
// and 3 to follow them.
void CheckPrefixPerSample(const Model& training, const std::set<std::string>& caller,
                          const std::set<std::string>& not_trained, const Model& compiled_prefix,
                          const std::vector<std::string>& prefix_inputs, const std::vector<std::string>& boundary);

}  // namespace edgetrain
