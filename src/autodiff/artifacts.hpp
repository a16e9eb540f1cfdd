// The offline phase: a forward ONNX model -> training, eval and optimizer models plus a checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autodiff/losses.hpp"
#include "autodiff/optimizers.hpp"
#include "ir/graph.hpp"

namespace edgetrain {

struct ArtifactOptions {
  // Parameters that train. Empty: every float initializer except `frozen`, BatchNorm statistics and the
  // scales of QuantizeLinear/DequantizeLinear.
  std::vector<std::string> requires_grad;
  std::vector<std::string> frozen;
  LossSpec loss;
  std::vector<std::string> loss_inputs;         // model outputs that feed the loss (default: the first)
  std::vector<std::string> additional_outputs;  // model outputs the train and eval steps also return
  OptimizerSpec optimizer;
  std::string prefix;                           // prepended to every file name
  bool nominal_checkpoint = false;              // names and types only, no values
  // ORT's semantics (its onnxblock): initializers neither requires-grad nor frozen stay graph constants, and
  // a model with no trainable parameter still gets training and eval models (and no optimizer model).
  bool unlisted_are_constants = false;
  // The training model recomputes, in the backward pass, forward values that activations, elementwise
  // arithmetic and normalizations make from values it keeps anyway (RecomputeCheapForwardValues).
  bool recompute_cheap_values = true;
  // In the training model, BatchNormalization and Dropout nodes in eval form (as exported under
  // model.eval()) that no trainable parameter reaches stay in eval mode, as a PyTorch backbone frozen
  // with .eval(); false: every one runs in training mode.
  bool frozen_backbone_as_exported = false;
};

struct ArtifactPaths {
  std::string training_model, eval_model, optimizer_model, checkpoint;
};

// Loads `model_path` (converted to opset 17 when older) and writes the four artifacts into `out_dir`.
// Throws kInvalidArgument for bad options (unknown names, a name both frozen and trainable, no
// trainable parameter, an unknown loss input) and kNotImplemented naming the node whose operator
// has no gradient rule.
ArtifactPaths GenerateArtifacts(const std::string& model_path, const std::string& out_dir,
                                const ArtifactOptions& options);

// The same from an already-imported model (opset >= 13 expected); writes nothing.
struct Artifacts {
  Model training, eval, optimizer;
  std::vector<std::string> trainable, frozen, states;  // parameter names, in parameter order
  std::map<std::string, Tensor> initial_values;        // every parameter's value (the checkpoint)
};
Artifacts BuildArtifacts(const Model& forward, const ArtifactOptions& options);

}  // namespace edgetrain
