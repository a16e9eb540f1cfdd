// edgetrain's source-compatible stand-in for ONNX Runtime's training C++ API header
// (onnxruntime_training_cxx_api.h): Ort::CheckpointState and Ort::TrainingSession over the training C API,
// written for edgetrain from ORT's public documentation.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "onnxruntime_cxx_api.h"
#include "onnxruntime_training_c_api.h"

namespace Ort {

inline const OrtTrainingApi& GetTrainingApi() {
  static const OrtTrainingApi* api = GetApi().GetTrainingApi(ORT_API_VERSION);
  return *api;
}

namespace detail {
template <>
struct Releaser<OrtCheckpointState> {
  static void Release(OrtCheckpointState* p) noexcept { GetTrainingApi().ReleaseCheckpointState(p); }
};
template <>
struct Releaser<OrtTrainingSession> {
  static void Release(OrtTrainingSession* p) noexcept { GetTrainingApi().ReleaseTrainingSession(p); }
};
}  // namespace detail

using Property = std::variant<int64_t, float, std::string>;

// Parameters, optimizer state and user properties of a training run (ORT's checkpoint format).
class CheckpointState : public detail::Base<OrtCheckpointState> {
 public:
  CheckpointState() = delete;

  static CheckpointState LoadCheckpoint(const std::basic_string<ORTCHAR_T>& path_to_checkpoint) {
    OrtCheckpointState* out;
    ThrowOnError(GetTrainingApi().LoadCheckpoint(path_to_checkpoint.c_str(), &out));
    return CheckpointState(out);
  }
  static CheckpointState LoadCheckpointFromBuffer(const std::vector<uint8_t>& buffer) {
    OrtCheckpointState* out;
    ThrowOnError(GetTrainingApi().LoadCheckpointFromBuffer(buffer.data(), buffer.size(), &out));
    return CheckpointState(out);
  }
  static void SaveCheckpoint(const CheckpointState& checkpoint_state,
                             const std::basic_string<ORTCHAR_T>& path_to_checkpoint,
                             const bool include_optimizer_state = false) {
    ThrowOnError(
        GetTrainingApi().SaveCheckpoint(checkpoint_state, path_to_checkpoint.c_str(), include_optimizer_state));
  }

  void AddProperty(const std::string& property_name, const Property& property_value) {
    if (const auto* i = std::get_if<int64_t>(&property_value)) {
      int64_t value = *i;
      ThrowOnError(GetTrainingApi().AddProperty(p_, property_name.c_str(), OrtIntProperty, &value));
    } else if (const auto* f = std::get_if<float>(&property_value)) {
      float value = *f;
      ThrowOnError(GetTrainingApi().AddProperty(p_, property_name.c_str(), OrtFloatProperty, &value));
    } else {
      std::string value = std::get<std::string>(property_value);
      ThrowOnError(GetTrainingApi().AddProperty(p_, property_name.c_str(), OrtStringProperty, value.data()));
    }
  }
  Property GetProperty(const std::string& property_name) {
    AllocatorWithDefaultOptions allocator;
    OrtPropertyType type;
    void* value = nullptr;
    ThrowOnError(GetTrainingApi().GetProperty(p_, property_name.c_str(), allocator, &type, &value));
    std::unique_ptr<void, detail::AllocatedFree> owned(value, detail::AllocatedFree(allocator));
    switch (type) {
      case OrtIntProperty: return *static_cast<int64_t*>(value);
      case OrtFloatProperty: return *static_cast<float*>(value);
      default: return std::string(static_cast<char*>(value));
    }
  }

  // Overwrites the parameter; the value must have its type and shape.
  void UpdateParameter(const std::string& parameter_name, const Value& parameter) {
    ThrowOnError(GetTrainingApi().UpdateParameter(p_, parameter_name.c_str(), parameter));
  }
  // A copy of the parameter.
  Value GetParameter(const std::string& parameter_name) {
    AllocatorWithDefaultOptions allocator;
    OrtValue* out;
    ThrowOnError(GetTrainingApi().GetParameter(p_, parameter_name.c_str(), allocator, &out));
    return Value(out);
  }

 private:
  explicit CheckpointState(OrtCheckpointState* p) noexcept : Base(p) {}
};

// Trains the parameters of a CheckpointState with the training, eval and optimizer models.
class TrainingSession : public detail::Base<OrtTrainingSession> {
 public:
  TrainingSession(const Env& env, const SessionOptions& session_options, CheckpointState& checkpoint_state,
                  const std::basic_string<ORTCHAR_T>& train_model_path,
                  const std::optional<std::basic_string<ORTCHAR_T>>& eval_model_path = std::nullopt,
                  const std::optional<std::basic_string<ORTCHAR_T>>& optimizer_model_path = std::nullopt) {
    ThrowOnError(GetTrainingApi().CreateTrainingSession(
        env, session_options, checkpoint_state, train_model_path.c_str(),
        eval_model_path ? eval_model_path->c_str() : nullptr,
        optimizer_model_path ? optimizer_model_path->c_str() : nullptr, &p_));
    Init();
  }
  TrainingSession(const Env& env, const SessionOptions& session_options, CheckpointState& checkpoint_state,
                  const std::vector<uint8_t>& train_model_data, const std::vector<uint8_t>& eval_model_data = {},
                  const std::vector<uint8_t>& optim_model_data = {}) {
    ThrowOnError(GetTrainingApi().CreateTrainingSessionFromBuffer(
        env, session_options, checkpoint_state, train_model_data.data(), train_model_data.size(),
        eval_model_data.empty() ? nullptr : eval_model_data.data(), eval_model_data.size(),
        optim_model_data.empty() ? nullptr : optim_model_data.data(), optim_model_data.size(), &p_));
    Init();
  }

  // Inputs in InputNames(true) order; the outputs of the training model, loss first.
  std::vector<Value> TrainStep(const std::vector<Value>& input_values) {
    std::vector<OrtValue*> outputs(training_output_count_, nullptr);
    ThrowOnError(GetTrainingApi().TrainStep(p_, nullptr, input_values.size(),
                                            reinterpret_cast<const OrtValue* const*>(input_values.data()),
                                            outputs.size(), outputs.data()));
    return Wrap(outputs);
  }
  void LazyResetGrad() { ThrowOnError(GetTrainingApi().LazyResetGrad(p_)); }
  std::vector<Value> EvalStep(const std::vector<Value>& input_values) {
    std::vector<OrtValue*> outputs(eval_output_count_, nullptr);
    ThrowOnError(GetTrainingApi().EvalStep(p_, nullptr, input_values.size(),
                                           reinterpret_cast<const OrtValue* const*>(input_values.data()),
                                           outputs.size(), outputs.data()));
    return Wrap(outputs);
  }

  void SetLearningRate(float learning_rate) { ThrowOnError(GetTrainingApi().SetLearningRate(p_, learning_rate)); }
  float GetLearningRate() const {
    float out;
    ThrowOnError(GetTrainingApi().GetLearningRate(p_, &out));
    return out;
  }
  void RegisterLinearLRScheduler(int64_t warmup_step_count, int64_t total_step_count, float initial_lr) {
    ThrowOnError(GetTrainingApi().RegisterLinearLRScheduler(p_, warmup_step_count, total_step_count, initial_lr));
  }
  void SchedulerStep() { ThrowOnError(GetTrainingApi().SchedulerStep(p_)); }
  void OptimizerStep() { ThrowOnError(GetTrainingApi().OptimizerStep(p_, nullptr)); }

  void ExportModelForInferencing(const std::basic_string<ORTCHAR_T>& inference_model_path,
                                 const std::vector<std::string>& graph_output_names) {
    std::vector<const char*> names;
    for (const std::string& name : graph_output_names) names.push_back(name.c_str());
    ThrowOnError(GetTrainingApi().ExportModelForInferencing(p_, inference_model_path.c_str(), names.size(),
                                                            names.data()));
  }

  // Input (output) names of the training model, or of the eval model with training = false.
  std::vector<std::string> InputNames(const bool training) {
    const OrtTrainingApi& api = GetTrainingApi();
    return Names(training ? api.TrainingSessionGetTrainingModelInputCount : api.TrainingSessionGetEvalModelInputCount,
                 training ? api.TrainingSessionGetTrainingModelInputName : api.TrainingSessionGetEvalModelInputName);
  }
  std::vector<std::string> OutputNames(const bool training) {
    const OrtTrainingApi& api = GetTrainingApi();
    return Names(training ? api.TrainingSessionGetTrainingModelOutputCount : api.TrainingSessionGetEvalModelOutputCount,
                 training ? api.TrainingSessionGetTrainingModelOutputName : api.TrainingSessionGetEvalModelOutputName);
  }

  // The parameters (trainable ones only, or all) as one flat float tensor.
  Value ToBuffer(const bool only_trainable) {
    size_t size;
    ThrowOnError(GetTrainingApi().GetParametersSize(p_, &size, only_trainable));
    AllocatorWithDefaultOptions allocator;
    const int64_t shape[] = {static_cast<int64_t>(size)};
    Value buffer = Value::CreateTensor<float>(allocator, shape, 1);
    ThrowOnError(GetTrainingApi().CopyParametersToBuffer(p_, buffer, only_trainable));
    return buffer;
  }
  // Loads a buffer of ToBuffer's layout; its size tells whether it holds the trainable parameters or all.
  void FromBuffer(Value& buffer) {
    size_t trainable_size, all_size;
    ThrowOnError(GetTrainingApi().GetParametersSize(p_, &trainable_size, true));
    ThrowOnError(GetTrainingApi().GetParametersSize(p_, &all_size, false));
    const size_t count = buffer.GetTensorTypeAndShapeInfo().GetElementCount();
    if (count != trainable_size && count != all_size)
      throw Exception("FromBuffer: the buffer has " + std::to_string(count) +
                          " elements; the trainable parameters have " + std::to_string(trainable_size) +
                          " and all parameters " + std::to_string(all_size),
                      ORT_INVALID_ARGUMENT);
    ThrowOnError(GetTrainingApi().CopyBufferToParameters(p_, buffer, count == trainable_size));
  }

 private:
  size_t training_output_count_ = 0, eval_output_count_ = 0;

  void Init() {
    ThrowOnError(GetTrainingApi().TrainingSessionGetTrainingModelOutputCount(p_, &training_output_count_));
    ThrowOnError(GetTrainingApi().TrainingSessionGetEvalModelOutputCount(p_, &eval_output_count_));
  }
  static std::vector<Value> Wrap(const std::vector<OrtValue*>& outputs) {
    std::vector<Value> values;
    values.reserve(outputs.size());
    for (OrtValue* output : outputs) values.emplace_back(output);
    return values;
  }
  using CountFunction = OrtStatus*(ORT_API_CALL*)(const OrtTrainingSession*, size_t*) NO_EXCEPTION;
  using NameFunction = OrtStatus*(ORT_API_CALL*)(const OrtTrainingSession*, size_t, OrtAllocator*, char**) NO_EXCEPTION;
  std::vector<std::string> Names(CountFunction count_function, NameFunction name_function) const {
    size_t count;
    ThrowOnError(count_function(p_, &count));
    AllocatorWithDefaultOptions allocator;
    std::vector<std::string> names;
    for (size_t i = 0; i < count; ++i) {
      char* name;
      ThrowOnError(name_function(p_, i, allocator, &name));
      names.emplace_back(name);
      allocator.Free(name);
    }
    return names;
  }
};

// Seeds the random operators (Dropout) of every training session.
inline void SetSeed(const int64_t seed) { ThrowOnError(GetTrainingApi().SetSeed(seed)); }

}  // namespace Ort
