// Loss functions appended to a forward graph, built from ONNX operators that have gradient rules.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

struct LossSpec;

// Composes a loss from ONNX operators in C++ (the role of ORT's onnxblock): set LossSpec::compose
// and AppendLoss hands it the predictions; the value it returns is the loss.
class LossComposer {
 public:
  virtual ~LossComposer() = default;
  virtual size_t NumPredictions() const = 0;
  virtual std::string Prediction(size_t i) const = 0;
  // A new graph input holding targets (labels); symbolic dims such as "batch" are kept.
  virtual std::string Target(const std::string& name, DataType dtype, const std::vector<Dim>& shape) = 0;
  virtual std::string Constant(const Tensor& value) = 0;
  virtual std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                         AttributeMap attributes = {}) = 0;
  // What is statically known of a value of the graph (dtype kUndefined, has_shape false when unknown).
  virtual ValueInfo Describe(const std::string& value) const = 0;
  // Appends the built-in loss `spec` (any type but kCustom) of `prediction` and returns its value. Its target
  // is `target_name`: an existing value as it is, else a new input of that name; empty: named as AppendLoss does.
  virtual std::string Loss(const LossSpec& spec, const std::string& prediction, const std::string& target_name) = 0;
};

enum class LossType { kMSE, kCrossEntropy, kBCEWithLogits, kL1, kHuber, kSmoothL1, kNLL, kKLDiv, kCustom };
enum class Reduction { kMean, kSum };

struct LossSpec {
  LossType type = LossType::kCrossEntropy;
  Reduction reduction = Reduction::kMean;
  int64_t ignore_index = -100;             // CrossEntropy, NLL (PyTorch's default)
  std::vector<float> class_weights;        // CrossEntropy, NLL: one per class (empty: none)
  std::vector<float> pos_weight;           // BCEWithLogits: one per class or a single value (empty: none)
  float delta = 1.0f;                      // Huber delta; SmoothL1 beta
  DataType label_type = DataType::kInt64;  // CrossEntropy, NLL labels: int64 or int32
  bool log_target = false;                 // KLDiv: target given as log-probabilities
  std::string custom_loss_path;            // kCustom: ONNX file, inputs = predictions then targets, one scalar output
  std::function<std::string(LossComposer&)> compose;  // kCustom without a file: the loss composed in C++
};

LossType ParseLossType(const std::string& name);  // "mse", "cross_entropy", ... (throws kInvalidArgument listing names)
std::string LossTypeName(LossType type);

// Appends the loss over `predictions` (model output values) to `graph`. Adds one graph input per
// target (named after the predictions: "<prediction>_target" or "labels" for classification, or
// the custom loss graph's own input names) and returns {loss value name, target input names}.
// Shape mismatches that are known statically are errors naming the prediction.
// The graph outputs are left as they are; the caller decides what the training graph returns.
struct AppendedLoss {
  std::string loss;
  std::vector<std::string> targets;
  std::vector<std::string> constants;  // initializers the loss added (weights, scalars): never parameters
};
AppendedLoss AppendLoss(Graph& graph, const LossSpec& spec, const std::vector<std::string>& predictions);

}  // namespace edgetrain
