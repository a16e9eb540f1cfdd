#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

std::string Join(std::string_view a, std::string_view b) { return std::string(a).append(b); }

// The parameter `name` is "<parameter><suffix>" of, when `holds` accepts it.
bool StripSuffix(std::string_view name, std::string_view suffix, const std::function<bool(std::string_view)>& holds,
                 std::string& parameter) {
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return false;
  std::string_view prefix = name.substr(0, name.size() - suffix.size());
  if (!holds || !holds(prefix)) return false;
  parameter = prefix;
  return true;
}

// "<parameter>.<state>": the longest prefix before a '.' that `holds` accepts (names may hold dots).
bool StripState(std::string_view name, const std::function<bool(std::string_view)>& holds, std::string& parameter) {
  for (size_t dot = name.rfind('.'); dot != std::string_view::npos && dot > 0; dot = name.rfind('.', dot - 1)) {
    if (dot + 1 < name.size() && holds && holds(name.substr(0, dot))) {
      parameter = name.substr(0, dot);
      return true;
    }
  }
  return false;
}

}  // namespace

std::string GradientName(std::string_view parameter) { return Join(parameter, kGradientSuffix); }
std::string StateUpdateName(std::string_view value) { return Join(value, kStateUpdateSuffix); }
std::string OptimizerStateName(std::string_view parameter, std::string_view state) {
  return Join(Join(parameter, "."), state);
}
std::string OrtAccumulationBufferName(std::string_view parameter) {
  return Join(parameter, kOrtAccumulationBufferSuffix);
}
std::string AgentOutputGradientName(std::string_view output) { return Join(output, kAgentOutputGradientSuffix); }

const char* ArtifactRoleName(ArtifactRole role) {
  switch (role) {
    case ArtifactRole::kUser: return "user";
    case ArtifactRole::kParameter: return "parameter";
    case ArtifactRole::kGradient: return "gradient";
    case ArtifactRole::kStateUpdate: return "state update";
    case ArtifactRole::kAccumulationBuffer: return "accumulation buffer";
    case ArtifactRole::kAccumulationFlag: return "accumulation flag";
    case ArtifactRole::kLazyResetGrad: return "lazy reset flag";
    case ArtifactRole::kLearningRate: return "learning rate";
    case ArtifactRole::kStep: return "step";
    case ArtifactRole::kOptimizerState: return "optimizer state";
    case ArtifactRole::kParameterUpdate: return "parameter update";
    case ArtifactRole::kOptimizerStateUpdate: return "optimizer state update";
    case ArtifactRole::kParameterSequence: return "parameter sequence";
    case ArtifactRole::kGradientSequence: return "gradient sequence";
    case ArtifactRole::kOptimizerStateSequence: return "optimizer state sequence";
  }
  return "unknown";
}

ArtifactValue ClassifyInput(ArtifactModel model, std::string_view name, const ParameterNames& parameters,
                            bool is_sequence) {
  ArtifactValue v;
  const auto& is_trainable = parameters.is_trainable;
  const auto& is_parameter = parameters.is_parameter;
  auto role = [&](ArtifactRole r) {
    v.role = r;
    return v;
  };
  if (model == ArtifactModel::kOptimizer) {
    if (name == kLearningRateInput) return role(ArtifactRole::kLearningRate);
    if (name == kStepInput) return role(ArtifactRole::kStep);
    if (is_sequence) {
      if (name == kOrtParamsInput) return role(ArtifactRole::kParameterSequence);
      if (name == kOrtGradientsInput) return role(ArtifactRole::kGradientSequence);
      return role(ArtifactRole::kOptimizerStateSequence);
    }
    if (is_trainable && is_trainable(name)) {
      v.parameter = name;
      return role(ArtifactRole::kParameter);
    }
    if (StripSuffix(name, kGradientSuffix, is_trainable, v.parameter)) return role(ArtifactRole::kGradient);
    if (StripState(name, is_trainable, v.parameter)) return role(ArtifactRole::kOptimizerState);
    return role(ArtifactRole::kUser);
  }
  if (model == ArtifactModel::kTraining && name == kOrtLazyResetGradInput) return role(ArtifactRole::kLazyResetGrad);
  if (is_parameter && is_parameter(name)) {
    v.parameter = name;
    return role(ArtifactRole::kParameter);
  }
  if (model == ArtifactModel::kTraining) {
    // A buffer names its parameter even when the checkpoint lacks it: the session reports that.
    if (StripSuffix(name, kOrtAccumulationBufferSuffix, [](std::string_view) { return true; }, v.parameter))
      return role(ArtifactRole::kAccumulationBuffer);
  }
  return role(ArtifactRole::kUser);
}

ArtifactValue ClassifyOutput(ArtifactModel model, std::string_view name, const ParameterNames& parameters) {
  ArtifactValue v;
  if (model == ArtifactModel::kTraining) {
    if (StripSuffix(name, kGradientSuffix, parameters.is_trainable, v.parameter)) {
      v.role = ArtifactRole::kGradient;
    } else if (StripSuffix(name, kStateUpdateSuffix, parameters.is_parameter, v.parameter)) {
      v.role = ArtifactRole::kStateUpdate;
    } else if (StripSuffix(name, kOrtAccumulationFlagSuffix, parameters.is_trainable, v.parameter)) {
      v.role = ArtifactRole::kAccumulationFlag;
    }
  } else if (model == ArtifactModel::kOptimizer) {
    std::string updated;
    if (StripSuffix(name, kStateUpdateSuffix, [](std::string_view) { return true; }, updated)) {
      ArtifactValue input = ClassifyInput(model, updated, parameters);
      if (input.role == ArtifactRole::kParameter) v.role = ArtifactRole::kParameterUpdate;
      if (input.role == ArtifactRole::kOptimizerState) v.role = ArtifactRole::kOptimizerStateUpdate;
      if (v.role != ArtifactRole::kUser) v.parameter = input.parameter;
    }
  }
  return v;
}

}  // namespace edgetrain
