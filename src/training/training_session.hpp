// TrainingSession: runs the training, eval and optimizer models of an artifact set over the tensors
// of a CheckpointState. Train steps accumulate gradients into session-owned buffers until
// LazyResetGrad; the optimizer step updates the state's parameters and optimizer state in place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/session.hpp"
#include "training/checkpoint_state.hpp"
#include "training/lr_scheduler.hpp"

namespace edgetrain {

// An ONNX model given as a file path or as bytes in memory (the bytes are read at session creation).
struct ModelSource {
  ModelSource() = default;
  ModelSource(std::string file_path) : path(std::move(file_path)) {}
  ModelSource(const char* file_path) : path(file_path) {}
  static ModelSource FromBuffer(const void* data, size_t size, std::string name = "<memory>");

  bool empty() const { return path.empty() && data == nullptr; }
  std::string path;          // a file, or empty for a buffer
  const void* data = nullptr;
  size_t size = 0;
  std::string buffer_name;  // names a buffer in errors
};

struct TrainingSessionOptions {
  int num_threads = 1;
  uint64_t seed = 0x5eed;  // Dropout and other random operators
  // Bytes the session may hold: parameters, gradients, optimizer state, constants and each model's
  // planned intermediate tensors; 0: no limit. Beyond it, creation or a step fails with
  // kResourceExhausted before allocating (and creation before any step).
  uint64_t memory_limit_bytes = 0;
  // Bytes of the training step's intermediate tensors (the planned arena; parameters, gradients and
  // optimizer state not included). Where the plan needs more, forward values are recomputed in the
  // backward pass instead of kept (gradient checkpointing): the same results, more compute. The first
  // step at new input shapes plans; it fails with kResourceExhausted naming the smallest budget that
  // fits when this one is too small. Must be positive; unset: no budget.
  std::optional<int64_t> memory_budget_bytes = std::nullopt;
  // The frozen prefix (the nodes before any trainable parameter) runs as an inference model: frozen
  // parameters as constants, BatchNormalization in eval form folded into Conv, activations fused, nothing
  // kept for the backward pass but its outputs. false: the training graph runs as given.
  bool frozen_prefix_as_inference = true;
  // Caches the frozen prefix's outputs per sample, keyed by a 128-bit hash of the sample's bytes in every
  // input the prefix reads (and their shapes), so that later epochs of head-only training skip the prefix
  // for samples seen before. Refused with kInvalidArgument naming the node when the prefix mixes the
  // samples of a batch (BatchNormalization in training mode, a reduction over the batch axis, Dropout
  // with a nonzero ratio) or when the model has no frozen prefix.
  bool cache_frozen_prefix = false;
  // Bytes the cache may hold; once full, new samples are not cached (computed at every step, no eviction:
  // epochs that visit every sample in turn would evict each entry before its next use). Must be positive.
  int64_t frozen_prefix_cache_bytes = int64_t{1} << 30;
};

// What the frozen prefix does (TrainingSession::frozen_prefix_stats).
struct FrozenPrefixStats {
  bool active = false;                // the training graph runs as prefix + rest
  size_t prefix_nodes = 0;            // nodes of the prefix as compiled (after folding and fusion)
  std::vector<std::string> boundary;  // the prefix's outputs
  bool cache_enabled = false;
  size_t cached_samples = 0;
  uint64_t cache_bytes = 0;
  uint64_t hits = 0, misses = 0;  // samples found and not found in the cache, over all steps
};

class TrainingSession {
 public:
  // The eval and optimizer models are optional. Throws kInvalidArgument naming the parameter when
  // the state does not match the training model (missing, extra, wrong dtype or shape).
  TrainingSession(CheckpointState state, const ModelSource& training_model, const ModelSource& eval_model = {},
                  const ModelSource& optimizer_model = {}, TrainingSessionOptions options = {});
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;

  // Inputs in TrainingInputNames() order; returns TrainingOutputNames() values (loss first).
  // Gradients add up across steps until LazyResetGrad.
  std::vector<Tensor> TrainStep(const std::vector<Tensor>& inputs);
  std::vector<Tensor> EvalStep(const std::vector<Tensor>& inputs);
  // The same, writing the results into `outputs`: an output whose tensor is already there with the
  // right type and size is computed straight into that memory, so a warm step allocates no tensors.
  void TrainStep(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs);
  void EvalStep(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs);
  // The next TrainStep overwrites the gradient buffers instead of adding to them.
  void LazyResetGrad();
  // Updates the parameters from the accumulated gradients and advances the step count.
  void OptimizerStep();

  float GetLearningRate() const;
  void SetLearningRate(float learning_rate);
  // Each registration replaces the previous scheduler and applies it once at once.
  void RegisterLRScheduler(const LRScheduler& scheduler);
  void RegisterLinearLRScheduler(int64_t warmup_steps, int64_t total_steps, float initial_lr);
  // Sets the learning rate from the registered scheduler at the current optimizer step.
  void SchedulerStep();
  int64_t optimizer_step() const;

  // Parameters as one flat float32 buffer, in training-model input order.
  size_t GetParametersSize(bool trainable_only = true) const;
  void CopyParametersToBuffer(Tensor& buffer, bool trainable_only = true) const;
  // With trainable_only = false this also completes a nominal state.
  void CopyBufferToParameters(const Tensor& buffer, bool trainable_only = true);

  std::vector<std::string> TrainingInputNames() const;
  std::vector<std::string> TrainingOutputNames() const;
  std::vector<std::string> EvalInputNames() const;
  std::vector<std::string> EvalOutputNames() const;
  // A copy of the gradient accumulated for a trainable parameter (zeros before the first TrainStep).
  Tensor GetGradient(const std::string& parameter) const;
  // Declared dtype and shape of each training / eval input, in the same order as the names.
  std::vector<ValueInfo> TrainingInputInfos() const;
  std::vector<ValueInfo> EvalInputInfos() const;
  bool has_eval_model() const;
  bool has_optimizer_model() const;

  // Reseeds the random operators (Dropout): the same seed gives the same masks.
  void SetSeed(uint64_t seed);

  // The eval graph reduced to `output_names` (default: its outputs other than the loss), with the
  // current parameter values as initializers and no loss inputs.
  Model InferenceModel(const std::vector<std::string>& output_names = {}) const;
  void ExportModelForInference(const std::string& path, const std::vector<std::string>& output_names = {}) const;

  CheckpointState& state();
  // Bytes of the training model's planned intermediate arena (0 before the first TrainStep) and how many
  // recomputations of forward values it makes under memory_budget_bytes (one per recomputed copy).
  uint64_t training_arena_bytes() const;
  size_t recomputed_values() const;
  FrozenPrefixStats frozen_prefix_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace edgetrain
