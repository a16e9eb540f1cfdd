// Header-only C++ wrapper over the C ABI (edgetrain.h): RAII handles, and et::Error exceptions
// thrown from the C error objects. For programs that link edgetrain through its C ABI only.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "edgetrain/edgetrain.h"

namespace et {

class Error : public std::runtime_error {
 public:
  Error(et_error_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  et_error_code code() const { return code_; }

 private:
  et_error_code code_;
};

// Throws the error object (if any) as et::Error after freeing it.
inline void Check(et_error* error) {
  if (error == nullptr) return;
  Error exception(et_error_get_code(error), et_error_get_message(error));
  et_error_free(error);
  throw exception;
}

namespace detail {
template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* handle) const { Free(handle); }
};
template <typename T, void (*Free)(T*)>
using Handle = std::unique_ptr<T, Deleter<T, Free>>;

inline std::vector<const char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<const char*> pointers;
  for (const std::string& s : strings) pointers.push_back(s.c_str());
  return pointers;
}

// A name list read through a C count function and a C by-index name function.
template <typename CountFn, typename NameFn>
std::vector<std::string> Names(CountFn count_fn, NameFn name_fn) {
  size_t count = 0;
  Check(count_fn(&count));
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    Check(name_fn(i, &name));
    names.push_back(name);
  }
  return names;
}
}  // namespace detail

template <typename T>
constexpr et_dtype DtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return ET_DTYPE_FLOAT32;
  else if constexpr (std::is_same_v<T, double>)
    return ET_DTYPE_FLOAT64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ET_DTYPE_INT64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ET_DTYPE_INT32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ET_DTYPE_INT16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ET_DTYPE_INT8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return ET_DTYPE_UINT8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return ET_DTYPE_UINT16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ET_DTYPE_UINT32;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ET_DTYPE_UINT64;
  else if constexpr (std::is_same_v<T, bool>)
    return ET_DTYPE_BOOL;
  else
    static_assert(sizeof(T) == 0, "no et_dtype for this element type");
}

// A caller-owned tensor passed into a call: it holds the shape, and points at data it does not own.
class TensorRef {
 public:
  TensorRef(et_dtype dtype, std::vector<int64_t> shape, const void* data)
      : dtype_(dtype), shape_(std::move(shape)), data_(data) {}
  template <typename T>
  TensorRef(const std::vector<T>& values, std::vector<int64_t> shape)
      : TensorRef(DtypeOf<T>(), std::move(shape), values.data()) {}

  et_tensor_view view() const { return {dtype_, shape_.data(), shape_.size(), data_}; }

 private:
  et_dtype dtype_;
  std::vector<int64_t> shape_;
  const void* data_;
};

namespace detail {
inline std::vector<et_tensor_view> Views(const std::vector<TensorRef>& tensors) {
  std::vector<et_tensor_view> views;
  for (const TensorRef& t : tensors) views.push_back(t.view());
  return views;
}
}  // namespace detail

// An owned list of named tensors returned by edgetrain.
class Values {
 public:
  explicit Values(et_values* values = nullptr) : values_(values) {}

  size_t size() const { return et_values_count(values_.get()); }
  std::string name(size_t i) const { return et_values_name(values_.get(), i); }
  et_dtype dtype(size_t i) const { return et_values_dtype(values_.get(), i); }
  std::vector<int64_t> shape(size_t i) const {
    const int64_t* dims = et_values_shape(values_.get(), i);
    return std::vector<int64_t>(dims, dims + et_values_rank(values_.get(), i));
  }
  int64_t numel(size_t i) const { return et_values_numel(values_.get(), i); }
  // Index of the tensor called `name`; throws et::Error if none is.
  size_t index(const std::string& name) const {
    for (size_t i = 0; i < size(); ++i)
      if (this->name(i) == name) return i;
    throw Error(ET_ERROR_INVALID_ARGUMENT, "no value named '" + name + "'");
  }
  template <typename T>
  std::vector<T> ToVector(size_t i) const {
    if (i >= size() || dtype(i) != DtypeOf<T>())
      throw Error(ET_ERROR_INVALID_ARGUMENT, "value " + std::to_string(i) + " is missing or of another element type");
    const T* data = static_cast<const T*>(et_values_data(values_.get(), i));
    return std::vector<T>(data, data + numel(i));
  }
  const et_values* get() const { return values_.get(); }

 private:
  detail::Handle<et_values, et_values_free> values_;
};

class CheckpointState {
 public:
  static CheckpointState Load(const std::string& path) {
    et_checkpoint_state* state = nullptr;
    Check(et_checkpoint_load(path.c_str(), &state));
    return CheckpointState(state);
  }
  static CheckpointState LoadFromBuffer(const void* data, size_t size) {
    et_checkpoint_state* state = nullptr;
    Check(et_checkpoint_load_from_buffer(data, size, &state));
    return CheckpointState(state);
  }
  void Save(const std::string& path, bool include_optimizer_state = false) const {
    Check(et_checkpoint_save(state_.get(), path.c_str(), include_optimizer_state));
  }

  void AddProperty(const std::string& name, int64_t value) {
    Check(et_checkpoint_add_int_property(state_.get(), name.c_str(), value));
  }
  void AddProperty(const std::string& name, float value) {
    Check(et_checkpoint_add_float_property(state_.get(), name.c_str(), value));
  }
  void AddProperty(const std::string& name, const std::string& value) {
    Check(et_checkpoint_add_string_property(state_.get(), name.c_str(), value.c_str()));
  }
  int64_t GetIntProperty(const std::string& name) const {
    int64_t value = 0;
    Check(et_checkpoint_get_int_property(state_.get(), name.c_str(), &value));
    return value;
  }
  float GetFloatProperty(const std::string& name) const {
    float value = 0.0f;
    Check(et_checkpoint_get_float_property(state_.get(), name.c_str(), &value));
    return value;
  }
  std::string GetStringProperty(const std::string& name) const {
    const char* value = nullptr;
    Check(et_checkpoint_get_string_property(state_.get(), name.c_str(), &value));
    return value;
  }

  std::vector<std::string> ParameterNames() const {
    return detail::Names(
        [&](size_t* count) { return et_checkpoint_parameter_count(state_.get(), count); },
        [&](size_t i, const char** name) { return et_checkpoint_parameter_name(state_.get(), i, name); });
  }
  std::vector<int64_t> ParameterShape(const std::string& name, et_dtype* dtype = nullptr) const {
    et_dtype element_type = ET_DTYPE_UNDEFINED;
    size_t rank = 0;
    Check(et_checkpoint_parameter_info(state_.get(), name.c_str(), &element_type, nullptr, 0, &rank));
    std::vector<int64_t> shape(rank);
    Check(et_checkpoint_parameter_info(state_.get(), name.c_str(), &element_type, shape.data(), rank, &rank));
    if (dtype != nullptr) *dtype = element_type;
    return shape;
  }
  template <typename T>
  std::vector<T> GetParameter(const std::string& name) const {
    et_dtype dtype = ET_DTYPE_UNDEFINED;
    int64_t count = 1;
    for (int64_t dim : ParameterShape(name, &dtype)) count *= dim;
    if (dtype != DtypeOf<T>())
      throw Error(ET_ERROR_INVALID_ARGUMENT, "parameter '" + name + "' has element type " +
                                                 std::to_string(static_cast<int>(dtype)) + ", not the one requested");
    std::vector<T> values(static_cast<size_t>(count));
    Check(et_checkpoint_get_parameter(state_.get(), name.c_str(), values.data(), values.size() * sizeof(T)));
    return values;
  }
  void UpdateParameter(const std::string& name, const TensorRef& value) {
    et_tensor_view view = value.view();
    Check(et_checkpoint_update_parameter(state_.get(), name.c_str(), &view));
  }

  et_checkpoint_state* get() const { return state_.get(); }

 private:
  explicit CheckpointState(et_checkpoint_state* state) : state_(state) {}
  detail::Handle<et_checkpoint_state, et_checkpoint_free> state_;
};

struct SessionOptions {
  SessionOptions() { et_session_options_init(&options); }
  SessionOptions& num_threads(int threads) {
    options.num_threads = threads;
    return *this;
  }
  SessionOptions& seed(uint64_t value) {
    options.seed = value;
    return *this;
  }
  SessionOptions& memory_limit(int64_t bytes) {
    Check(et_session_options_set_memory_limit(&options, bytes));
    return *this;
  }
  // Gradient checkpointing: the training step's intermediate tensors fit `bytes` (et_session_options).
  SessionOptions& memory_budget(int64_t bytes) {
    Check(et_session_options_set_memory_budget(&options, bytes));
    return *this;
  }
  // Caches the frozen prefix's outputs per sample, up to `bytes` (et_session_options).
  SessionOptions& frozen_prefix_cache(int64_t bytes) {
    Check(et_session_options_set_frozen_prefix_cache(&options, bytes));
    return *this;
  }
  et_session_options options;
};

class TrainingSession {
 public:
  // Empty eval/optimizer paths leave those models out.
  TrainingSession(const CheckpointState& state, const std::string& training_model, const std::string& eval_model = {},
                  const std::string& optimizer_model = {}, const SessionOptions& options = {}) {
    et_training_session* session = nullptr;
    Check(et_training_session_create(state.get(), training_model.c_str(), OrNull(eval_model), OrNull(optimizer_model),
                                     &options.options, &session));
    session_.reset(session);
  }

  Values TrainStep(const std::vector<TensorRef>& inputs) {
    std::vector<et_tensor_view> views = detail::Views(inputs);
    et_values* outputs = nullptr;
    Check(et_training_session_train_step(session_.get(), views.data(), views.size(), &outputs));
    return Values(outputs);
  }
  Values EvalStep(const std::vector<TensorRef>& inputs) {
    std::vector<et_tensor_view> views = detail::Views(inputs);
    et_values* outputs = nullptr;
    Check(et_training_session_eval_step(session_.get(), views.data(), views.size(), &outputs));
    return Values(outputs);
  }
  void LazyResetGrad() { Check(et_training_session_lazy_reset_grad(session_.get())); }
  void OptimizerStep() { Check(et_training_session_optimizer_step(session_.get())); }

  float GetLearningRate() const {
    float learning_rate = 0.0f;
    Check(et_training_session_get_learning_rate(session_.get(), &learning_rate));
    return learning_rate;
  }
  void SetLearningRate(float learning_rate) {
    Check(et_training_session_set_learning_rate(session_.get(), learning_rate));
  }
  void RegisterLinearLRScheduler(int64_t warmup_steps, int64_t total_steps, float initial_lr) {
    Check(et_training_session_register_linear_lr_scheduler(session_.get(), warmup_steps, total_steps, initial_lr));
  }
  void SchedulerStep() { Check(et_training_session_scheduler_step(session_.get())); }

  size_t GetParametersSize(bool trainable_only = true) const {
    size_t size = 0;
    Check(et_training_session_get_parameters_size(session_.get(), trainable_only, &size));
    return size;
  }
  std::vector<float> CopyParametersToBuffer(bool trainable_only = true) const {
    std::vector<float> buffer(GetParametersSize(trainable_only));
    Check(et_training_session_copy_parameters_to_buffer(session_.get(), buffer.data(), buffer.size(), trainable_only));
    return buffer;
  }
  void CopyBufferToParameters(const std::vector<float>& buffer, bool trainable_only = true) {
    Check(et_training_session_copy_buffer_to_parameters(session_.get(), buffer.data(), buffer.size(), trainable_only));
  }

  std::vector<std::string> InputNames(et_model_kind model = ET_MODEL_TRAINING) const {
    return detail::Names(
        [&](size_t* count) { return et_training_session_input_count(session_.get(), model, count); },
        [&](size_t i, const char** name) { return et_training_session_input_name(session_.get(), model, i, name); });
  }
  std::vector<std::string> OutputNames(et_model_kind model = ET_MODEL_TRAINING) const {
    return detail::Names(
        [&](size_t* count) { return et_training_session_output_count(session_.get(), model, count); },
        [&](size_t i, const char** name) { return et_training_session_output_name(session_.get(), model, i, name); });
  }

  struct MemoryPlan {
    uint64_t arena_bytes = 0;  // the training step's planned intermediate tensors (0 before the first step)
    size_t recomputed_values = 0;
  };
  MemoryPlan GetMemoryPlan() const {
    MemoryPlan plan;
    Check(et_training_session_get_memory_plan(session_.get(), &plan.arena_bytes, &plan.recomputed_values));
    return plan;
  }

  struct FrozenPrefixCache {
    uint64_t samples = 0, bytes = 0, hits = 0, misses = 0;
  };
  FrozenPrefixCache GetFrozenPrefixCache() const {
    FrozenPrefixCache c;
    Check(et_training_session_get_frozen_prefix_cache(session_.get(), &c.samples, &c.bytes, &c.hits, &c.misses));
    return c;
  }

  void SetSeed(uint64_t seed) { Check(et_training_session_set_seed(session_.get(), seed)); }
  void ExportModelForInference(const std::string& path, const std::vector<std::string>& output_names = {}) const {
    std::vector<const char*> names = detail::CStrings(output_names);
    Check(et_training_session_export_model_for_inference(session_.get(), path.c_str(), names.data(), names.size()));
  }

  et_training_session* get() const { return session_.get(); }

 private:
  static const char* OrNull(const std::string& path) { return path.empty() ? nullptr : path.c_str(); }

  detail::Handle<et_training_session, et_training_session_free> session_;
};

class TrainingAgent {
 public:
  explicit TrainingAgent(const std::string& model_path, const std::vector<std::string>& trainable = {},
                         const SessionOptions& options = {}) {
    std::vector<const char*> names = detail::CStrings(trainable);
    et_training_agent* agent = nullptr;
    Check(et_training_agent_create(model_path.c_str(), names.data(), names.size(), &options.options, &agent));
    agent_.reset(agent);
  }

  struct ForwardResult {
    Values outputs;
    int64_t handle = 0;
  };
  struct BackwardResult {
    Values input_gradients;
    Values parameter_gradients;
  };
  ForwardResult Forward(const std::vector<TensorRef>& inputs) {
    std::vector<et_tensor_view> views = detail::Views(inputs);
    et_values* outputs = nullptr;
    int64_t handle = 0;
    Check(et_training_agent_forward(agent_.get(), views.data(), views.size(), &outputs, &handle));
    return {Values(outputs), handle};
  }
  BackwardResult Backward(int64_t handle, const std::vector<TensorRef>& output_gradients) {
    std::vector<et_tensor_view> views = detail::Views(output_gradients);
    et_values* input_gradients = nullptr;
    et_values* parameter_gradients = nullptr;
    Check(et_training_agent_backward(agent_.get(), handle, views.data(), views.size(), &input_gradients,
                                     &parameter_gradients));
    return {Values(input_gradients), Values(parameter_gradients)};
  }
  void Release(int64_t handle) { Check(et_training_agent_release(agent_.get(), handle)); }

  std::vector<std::string> InputNames() const {
    return detail::Names(
        [&](size_t* count) { return et_training_agent_input_count(agent_.get(), count); },
        [&](size_t i, const char** name) { return et_training_agent_input_name(agent_.get(), i, name); });
  }
  std::vector<std::string> OutputNames() const {
    return detail::Names(
        [&](size_t* count) { return et_training_agent_output_count(agent_.get(), count); },
        [&](size_t i, const char** name) { return et_training_agent_output_name(agent_.get(), i, name); });
  }

  et_training_agent* get() const { return agent_.get(); }

 private:
  detail::Handle<et_training_agent, et_training_agent_free> agent_;
};

}  // namespace et
