// The training-artifact contract, in one place: how training, eval and optimizer models (ours and
// ONNX Runtime's) name gradients, state updates, gradient accumulators and optimizer state. Artifact
// generation writes these names and the TrainingSession reads them back through ClassifyInput/Output.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace edgetrain {

// Ours: training outputs "<param>_grad" and "<state>.updated" (BatchNorm running statistics);
// optimizer inputs learning_rate, step, then per parameter "<param>", "<param>_grad", its states
// "<param>.<state>"; optimizer outputs "<input>.updated".
inline constexpr std::string_view kGradientSuffix = "_grad";
inline constexpr std::string_view kStateUpdateSuffix = ".updated";
inline constexpr std::string_view kLearningRateInput = "learning_rate";
inline constexpr std::string_view kStepInput = "step";
inline constexpr std::string_view kAdamFirstMomentState = "exp_avg";
inline constexpr std::string_view kAdamSecondMomentState = "exp_avg_sq";
inline constexpr std::string_view kSgdMomentumState = "momentum_buffer";
// ORT's: training inputs "<param>_grad.accumulation.buffer" and lazy_reset_grad, outputs the
// accumulators' flags "<param>_grad.accumulation.out"; optimizer inputs are sequences.
inline constexpr std::string_view kOrtAccumulationBufferSuffix = "_grad.accumulation.buffer";
inline constexpr std::string_view kOrtAccumulationFlagSuffix = "_grad.accumulation.out";
inline constexpr std::string_view kOrtLazyResetGradInput = "lazy_reset_grad";
inline constexpr std::string_view kOrtParamsInput = "params";
inline constexpr std::string_view kOrtGradientsInput = "gradients";
// TrainingAgent's backward model: one input "<output>.output_grad" per forward output.
inline constexpr std::string_view kAgentOutputGradientSuffix = ".output_grad";

std::string GradientName(std::string_view parameter);
std::string StateUpdateName(std::string_view value);
std::string OptimizerStateName(std::string_view parameter, std::string_view state);
std::string OrtAccumulationBufferName(std::string_view parameter);
std::string AgentOutputGradientName(std::string_view output);

enum class ArtifactModel { kTraining, kEval, kOptimizer };

enum class ArtifactRole {
  kUser,                    // a caller's input (data, labels) or output (loss, extra outputs)
  kParameter,               // a checkpoint parameter fed to the model
  kGradient,                // training output or optimizer input "<param>_grad"
  kStateUpdate,             // training output "<param>.updated": the new value of a frozen state
  kAccumulationBuffer,      // ORT training input: the gradient buffer the graph accumulates into
  kAccumulationFlag,        // ORT training output: whether the accumulator ran
  kLazyResetGrad,           // ORT training input: overwrite (true) or add to the buffers
  kLearningRate,            // optimizer input
  kStep,                    // optimizer input
  kOptimizerState,          // optimizer input "<param>.<state>"
  kParameterUpdate,         // optimizer output "<param>.updated"
  kOptimizerStateUpdate,    // optimizer output "<param>.<state>.updated"
  kParameterSequence,       // ORT optimizer input "params"
  kGradientSequence,        // ORT optimizer input "gradients"
  kOptimizerStateSequence,  // ORT optimizer input: one sequence per moment
};
const char* ArtifactRoleName(ArtifactRole role);

struct ArtifactValue {
  ArtifactRole role = ArtifactRole::kUser;
  std::string parameter;  // the parameter the value belongs to; empty for kUser and the scalars
};

// What the names of the checkpoint tell the classification.
struct ParameterNames {
  std::function<bool(std::string_view)> is_parameter;  // any checkpoint parameter
  std::function<bool(std::string_view)> is_trainable;  // one that gets a gradient
};

// Pure functions of the name, the model kind and the checkpoint's names; ORT's sequence inputs are
// recognised by `is_sequence`.
ArtifactValue ClassifyInput(ArtifactModel model, std::string_view name, const ParameterNames& parameters,
                            bool is_sequence = false);
ArtifactValue ClassifyOutput(ArtifactModel model, std::string_view name, const ParameterNames& parameters);

}  // namespace edgetrain
