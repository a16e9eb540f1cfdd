// Optimizer models: one ONNX graph that updates every trainable parameter from its gradient.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

enum class OptimizerType { kAdamW, kAdam, kSGD };

struct OptimizerSpec {
  OptimizerType type = OptimizerType::kAdamW;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  // AdamW: decoupled; Adam and SGD: added to the gradient (L2). Unset: torch's default for the
  // optimizer (AdamW 0.01, Adam and SGD 0).
  std::optional<float> weight_decay;
  bool hugging_face_mode = false;  // AdamW: ORT's adam_mode 1 (bias correction folded into lr; decay after)
  bool correct_bias = true;
  float momentum = 0.0f, dampening = 0.0f;  // SGD
  bool nesterov = false;
  float max_grad_norm = 0.0f;  // > 0: clip the global L2 norm of all gradients first
  float l1_penalty = 0.0f, l2_penalty = 0.0f;  // added to the loss gradient: l1*sign(w) + l2*w
};

float EffectiveWeightDecay(const OptimizerSpec& spec);

OptimizerType ParseOptimizerType(const std::string& name);  // "adamw", "adam", "sgd"
std::string OptimizerTypeName(OptimizerType type);
// Names of the per-parameter state tensors, in checkpoint order ("<param>.exp_avg", ...).
std::vector<std::string> OptimizerStateNames(const OptimizerSpec& spec, const std::string& param);

// The optimizer graph. Inputs: learning_rate (float scalar), step (int64 scalar, the number of
// updates done so far), then for each parameter in order: the parameter, its gradient
// ("<param>_grad"), its states. Outputs: for each parameter "<param>.updated" then its states
// "<state>.updated", in input order. One fused ai.edgetrain update node per parameter
// (AdamWUpdate, SGDUpdate or SGDMomentumUpdate, see ops/optimizer.cpp), after the penalties and
// then the clipping, both in standard ops.
Model BuildOptimizerModel(const OptimizerSpec& spec, const std::vector<std::string>& params,
                          const std::vector<ValueInfo>& param_infos);

}  // namespace edgetrain
