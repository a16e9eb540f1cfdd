// ONNX Runtime's training-artifact layout, recognised so that its artifacts train unchanged.
// ORT updates gradient buffers, parameters and moments in place; edgetrain's kernels never write
// into their inputs, so these functions expose the updated values as graph outputs instead and the
// TrainingSession copies them back.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

// For every InPlaceAccumulatorV2 node: makes its accumulated value a graph output. Returns
// accumulation-buffer input -> that output, and the names of the accumulators' flag outputs.
struct OrtAccumulators {
  std::map<std::string, std::string> accumulated_output;  // buffer input -> output holding its new value
  std::vector<std::string> flag_outputs;                  // graph outputs that only report "updated"
};
OrtAccumulators ExposeAccumulatedGradients(Model& training);

// ORT's optimizer model: inputs learning_rate, step, then sequences of parameters, gradients and
// per-moment states, one AdamWOptimizer or SGDOptimizerV2 node.
struct OrtOptimizerLayout {
  std::string learning_rate = "learning_rate", step;  // step is empty when the model has no step input
  std::string params, gradients;
  std::vector<std::string> states;          // sequence inputs, one per moment (AdamW: 2, SGD: 0 or 1)
  std::string updated_flag;                 // bool output: whether the update ran
  std::string updated_params;               // sequence outputs exposed by PrepareOrtOptimizer
  std::vector<std::string> updated_states;
};
// Recognises the layout and exposes the updated sequences as graph outputs; nullopt for models in
// edgetrain's own optimizer layout. Throws kInvalidModel naming the model when it is ORT's layout
// but malformed.
std::optional<OrtOptimizerLayout> PrepareOrtOptimizer(Model& optimizer);

}  // namespace edgetrain
