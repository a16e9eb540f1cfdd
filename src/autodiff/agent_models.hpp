// Builds a TrainingAgent's forward and backward models from an inference model (offline: the
// backward model comes from the reverse walk); the device-side TrainingAgent only runs them.
#pragma once

#include <string>
#include <vector>

#include "training/training_agent.hpp"

namespace edgetrain {

// `trainable` names the float initializers that get gradients (default: every float initializer).
AgentModels BuildAgentModels(Model model, std::vector<std::string> trainable = {});
TrainingAgent MakeTrainingAgent(Model model, std::vector<std::string> trainable = {}, SessionOptions options = {});
TrainingAgent LoadTrainingAgent(const std::string& path, std::vector<std::string> trainable = {},
                                SessionOptions options = {});

}  // namespace edgetrain
