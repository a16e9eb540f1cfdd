// The C ABI (include/edgetrain/edgetrain.h) over the C++ training API: each function checks its
// pointers, forwards to C++ and turns any exception into an et_error.
#include "capi/c_api_internal.hpp"

using edgetrain::DataType;
using edgetrain::ErrorCode;
using edgetrain::Fail;
using edgetrain::Tensor;

#define ET_SAME_DTYPE(c_name, cpp_name) \
  static_assert(static_cast<int>(c_name) == static_cast<int>(DataType::cpp_name), #c_name)
ET_SAME_DTYPE(ET_DTYPE_UNDEFINED, kUndefined);
ET_SAME_DTYPE(ET_DTYPE_FLOAT32, kFloat32);
ET_SAME_DTYPE(ET_DTYPE_UINT8, kUint8);
ET_SAME_DTYPE(ET_DTYPE_INT8, kInt8);
ET_SAME_DTYPE(ET_DTYPE_UINT16, kUint16);
ET_SAME_DTYPE(ET_DTYPE_INT16, kInt16);
ET_SAME_DTYPE(ET_DTYPE_INT32, kInt32);
ET_SAME_DTYPE(ET_DTYPE_INT64, kInt64);
ET_SAME_DTYPE(ET_DTYPE_STRING, kString);
ET_SAME_DTYPE(ET_DTYPE_BOOL, kBool);
ET_SAME_DTYPE(ET_DTYPE_FLOAT16, kFloat16);
ET_SAME_DTYPE(ET_DTYPE_FLOAT64, kFloat64);
ET_SAME_DTYPE(ET_DTYPE_UINT32, kUint32);
ET_SAME_DTYPE(ET_DTYPE_UINT64, kUint64);
ET_SAME_DTYPE(ET_DTYPE_BFLOAT16, kBFloat16);
#undef ET_SAME_DTYPE

using namespace edgetrain::capi;

extern "C" {

const char* et_version(void) { return EDGETRAIN_VERSION; }

// ---- errors ----

et_error_code et_error_get_code(const et_error* error) { return error == nullptr ? ET_OK : error->code; }

const char* et_error_get_message(const et_error* error) {
  if (error == nullptr) return "";
  return error == &out_of_memory_error ? "out of memory" : error->message.c_str();
}

void et_error_free(et_error* error) {
  if (error != &out_of_memory_error) delete error;
}

// ---- value lists ----

size_t et_values_count(const et_values* values) { return values == nullptr ? 0 : values->tensors.size(); }

et_dtype et_values_dtype(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? ET_DTYPE_UNDEFINED : static_cast<et_dtype>(t->dtype());
}

size_t et_values_rank(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? 0 : t->rank();
}

const int64_t* et_values_shape(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? nullptr : t->shape().data();
}

int64_t et_values_numel(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? 0 : t->numel();
}

size_t et_values_nbytes(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? 0 : t->nbytes();
}

const void* et_values_data(const et_values* values, size_t index) {
  const Tensor* t = ValueAt(values, index);
  return t == nullptr ? nullptr : t->raw();
}

const char* et_values_name(const et_values* values, size_t index) {
  return ValueAt(values, index) == nullptr ? "" : values->names[index].c_str();
}

void et_values_free(et_values* values) { delete values; }

// ---- checkpoint state ----

et_error* et_checkpoint_load(const char* path, et_checkpoint_state** out_state) {
  return ET_GUARD({
    et_checkpoint_state** out = ET_REQUIRE(out_state);
    *out = new et_checkpoint_state{edgetrain::CheckpointState::Load(ET_REQUIRE_STRING(path)), {}};
  });
}

et_error* et_checkpoint_load_from_buffer(const void* data, size_t size, et_checkpoint_state** out_state) {
  return ET_GUARD({
    et_checkpoint_state** out = ET_REQUIRE(out_state);
    *out = new et_checkpoint_state{edgetrain::CheckpointState::LoadFromBuffer(ET_REQUIRE(data), size), {}};
  });
}

et_error* et_checkpoint_save(const et_checkpoint_state* state, const char* path, bool include_optimizer_state) {
  return ET_GUARD(
      edgetrain::CheckpointState::Save(ET_REQUIRE(state)->state, ET_REQUIRE_STRING(path), include_optimizer_state));
}

void et_checkpoint_free(et_checkpoint_state* state) { delete state; }

et_error* et_checkpoint_add_int_property(et_checkpoint_state* state, const char* name, int64_t value) {
  return ET_GUARD(ET_REQUIRE(state)->state.AddProperty(ET_REQUIRE_STRING(name), value));
}

et_error* et_checkpoint_add_float_property(et_checkpoint_state* state, const char* name, float value) {
  return ET_GUARD(ET_REQUIRE(state)->state.AddProperty(ET_REQUIRE_STRING(name), value));
}

et_error* et_checkpoint_add_string_property(et_checkpoint_state* state, const char* name, const char* value) {
  return ET_GUARD(ET_REQUIRE(state)->state.AddProperty(ET_REQUIRE_STRING(name), ET_REQUIRE_STRING(value)));
}

et_error* et_checkpoint_get_property_type(const et_checkpoint_state* state, const char* name,
                                          et_property_type* out_type) {
  return ET_GUARD({
    edgetrain::PropertyValue value = ET_REQUIRE(state)->state.GetProperty(ET_REQUIRE_STRING(name));
    *ET_REQUIRE(out_type) = std::holds_alternative<int64_t>(value) ? ET_PROPERTY_INT
                            : std::holds_alternative<float>(value) ? ET_PROPERTY_FLOAT
                                                                   : ET_PROPERTY_STRING;
  });
}

et_error* et_checkpoint_get_int_property(const et_checkpoint_state* state, const char* name, int64_t* out_value) {
  return ET_GUARD(*ET_REQUIRE(out_value) =
                      PropertyAs<int64_t>(ET_REQUIRE(state)->state, ET_REQUIRE_STRING(name), "int"));
}

et_error* et_checkpoint_get_float_property(const et_checkpoint_state* state, const char* name, float* out_value) {
  return ET_GUARD(*ET_REQUIRE(out_value) =
                      PropertyAs<float>(ET_REQUIRE(state)->state, ET_REQUIRE_STRING(name), "float"));
}

et_error* et_checkpoint_get_string_property(const et_checkpoint_state* state, const char* name,
                                            const char** out_value) {
  return ET_GUARD({
    std::string value = PropertyAs<std::string>(ET_REQUIRE(state)->state, ET_REQUIRE_STRING(name), "string");
    *ET_REQUIRE(out_value) = state->strings.Intern(std::move(value));
  });
}

et_error* et_checkpoint_parameter_count(const et_checkpoint_state* state, size_t* out_count) {
  return ET_GUARD(*ET_REQUIRE(out_count) = ET_REQUIRE(state)->state.ParameterNames().size());
}

et_error* et_checkpoint_parameter_name(const et_checkpoint_state* state, size_t index, const char** out_name) {
  return ET_GUARD({
    const et_checkpoint_state& handle = *ET_REQUIRE(state);
    *ET_REQUIRE(out_name) = NameAt(handle.strings, handle.state.ParameterNames(), index, "parameter");
  });
}

et_error* et_checkpoint_parameter_info(const et_checkpoint_state* state, const char* name, et_dtype* out_dtype,
                                       int64_t* out_shape, size_t shape_capacity, size_t* out_rank) {
  return ET_GUARD({
    Tensor parameter = ET_REQUIRE(state)->state.GetParameter(ET_REQUIRE_STRING(name));
    ET_REQUIRE(out_dtype);
    ET_REQUIRE(out_rank);
    if (out_shape != nullptr) {
      if (shape_capacity < parameter.rank())
        Fail(ErrorCode::kInvalidArgument, function, ": parameter '", name, "' has rank ", parameter.rank(),
             " but shape_capacity is ", shape_capacity);
      std::copy(parameter.shape().begin(), parameter.shape().end(), out_shape);
    }
    *out_dtype = static_cast<et_dtype>(parameter.dtype());
    *out_rank = parameter.rank();
  });
}

et_error* et_checkpoint_get_parameter(const et_checkpoint_state* state, const char* name, void* buffer,
                                      size_t buffer_size) {
  return ET_GUARD({
    Tensor parameter = ET_REQUIRE(state)->state.GetParameter(ET_REQUIRE_STRING(name));
    if (buffer_size != parameter.nbytes())
      Fail(ErrorCode::kInvalidArgument, function, ": parameter '", name, "' holds ", parameter.nbytes(),
           " bytes but buffer_size is ", buffer_size);
    if (buffer_size > 0) std::memcpy(ET_REQUIRE(buffer), parameter.raw(), buffer_size);
  });
}

et_error* et_checkpoint_update_parameter(et_checkpoint_state* state, const char* name, const et_tensor_view* value) {
  return ET_GUARD({
    std::string parameter = ET_REQUIRE_STRING(name);
    Tensor tensor = FromView(*ET_REQUIRE(value), "parameter '" + parameter + "'");
    ET_REQUIRE(state)->state.UpdateParameter(parameter, tensor);
  });
}

// ---- training session ----

void et_session_options_init(et_session_options* options) {
  if (options == nullptr) return;
  edgetrain::TrainingSessionOptions defaults;
  options->struct_size = sizeof(et_session_options);
  options->num_threads = defaults.num_threads;
  options->seed = defaults.seed;
  options->memory_limit_bytes = 0;
  options->memory_budget_bytes = 0;
  options->frozen_prefix_cache_bytes = 0;
}

et_error* et_session_options_set_num_threads(et_session_options* options, int threads) {
  return ET_GUARD({
    ET_CHECK(threads > 0, ErrorCode::kInvalidArgument, function, ": the thread count must be positive, got ", threads);
    ET_REQUIRE(options)->num_threads = threads;
  });
}

et_error* et_session_options_set_seed(et_session_options* options, uint64_t seed) {
  return ET_GUARD({ ET_REQUIRE(options)->seed = seed; });
}

et_error* et_session_options_set_frozen_prefix_cache(et_session_options* options, int64_t bytes) {
  return ET_GUARD({
    ET_CHECK(bytes > 0, ErrorCode::kInvalidArgument, function,
             ": the frozen prefix cache needs a positive number of bytes, got ", bytes);
    ET_REQUIRE(options)->frozen_prefix_cache_bytes = bytes;
  });
}

et_error* et_session_options_set_memory_budget(et_session_options* options, int64_t bytes) {
  return ET_GUARD({
    ET_CHECK(bytes > 0, ErrorCode::kInvalidArgument, function,
             ": the memory budget must be a positive number of bytes, got ", bytes);
    ET_REQUIRE(options)->memory_budget_bytes = bytes;
  });
}

et_error* et_session_options_set_memory_limit(et_session_options* options, int64_t bytes) {
  return ET_GUARD({
    ET_CHECK(bytes > 0, ErrorCode::kInvalidArgument, function, ": the memory limit must be a positive number of bytes, got ",
             bytes);
    ET_REQUIRE(options)->memory_limit_bytes = bytes;
  });
}

et_error* et_training_session_create(et_checkpoint_state* state, const char* training_model_path,
                                     const char* eval_model_path, const char* optimizer_model_path,
                                     const et_session_options* options, et_training_session** out_session) {
  return ET_GUARD({
    et_training_session** out = ET_REQUIRE(out_session);
    std::string training_path = ET_REQUIRE_STRING(training_model_path);
    *out = new et_training_session{
        edgetrain::TrainingSession(ET_REQUIRE(state)->state, training_path, PathSource(eval_model_path),
                                   PathSource(optimizer_model_path), ToTrainingOptions(options)),
        {}};
  });
}

et_error* et_training_session_create_from_buffers(et_checkpoint_state* state, const void* training_model,
                                                  size_t training_model_size, const void* eval_model,
                                                  size_t eval_model_size, const void* optimizer_model,
                                                  size_t optimizer_model_size, const et_session_options* options,
                                                  et_training_session** out_session) {
  return ET_GUARD({
    et_training_session** out = ET_REQUIRE(out_session);
    edgetrain::ModelSource training = BufferSource(ET_REQUIRE(training_model), training_model_size, "training model");
    *out = new et_training_session{
        edgetrain::TrainingSession(
            ET_REQUIRE(state)->state, training, BufferSource(eval_model, eval_model_size, "eval model"),
            BufferSource(optimizer_model, optimizer_model_size, "optimizer model"), ToTrainingOptions(options)),
        {}};
  });
}

void et_training_session_free(et_training_session* session) { delete session; }

et_error* et_training_session_train_step(et_training_session* session, const et_tensor_view* inputs, size_t input_count,
                                         et_values** out_outputs) {
  return ET_GUARD({
    std::vector<Tensor> outputs = ET_REQUIRE(session)->session.TrainStep(ET_FROM_VIEWS(inputs, input_count));
    Deliver(out_outputs, MakeValues(std::move(outputs), session->session.TrainingOutputNames()));
  });
}

et_error* et_training_session_eval_step(et_training_session* session, const et_tensor_view* inputs, size_t input_count,
                                        et_values** out_outputs) {
  return ET_GUARD({
    std::vector<Tensor> outputs = ET_REQUIRE(session)->session.EvalStep(ET_FROM_VIEWS(inputs, input_count));
    Deliver(out_outputs, MakeValues(std::move(outputs), session->session.EvalOutputNames()));
  });
}

et_error* et_training_session_lazy_reset_grad(et_training_session* session) {
  return ET_GUARD(ET_REQUIRE(session)->session.LazyResetGrad());
}

et_error* et_training_session_optimizer_step(et_training_session* session) {
  return ET_GUARD(ET_REQUIRE(session)->session.OptimizerStep());
}

et_error* et_training_session_get_learning_rate(const et_training_session* session, float* out_learning_rate) {
  return ET_GUARD(*ET_REQUIRE(out_learning_rate) = ET_REQUIRE(session)->session.GetLearningRate());
}

et_error* et_training_session_set_learning_rate(et_training_session* session, float learning_rate) {
  return ET_GUARD(ET_REQUIRE(session)->session.SetLearningRate(learning_rate));
}

et_error* et_training_session_register_linear_lr_scheduler(et_training_session* session, int64_t warmup_steps,
                                                           int64_t total_steps, float initial_lr) {
  return ET_GUARD(ET_REQUIRE(session)->session.RegisterLinearLRScheduler(warmup_steps, total_steps, initial_lr));
}

et_error* et_training_session_register_cosine_lr_scheduler(et_training_session* session, int64_t warmup_steps,
                                                           int64_t total_steps, float initial_lr, float min_lr) {
  return ET_GUARD(ET_REQUIRE(session)->session.RegisterLRScheduler(
      edgetrain::LRScheduler::Cosine(warmup_steps, total_steps, initial_lr, min_lr)));
}

et_error* et_training_session_register_step_lr_scheduler(et_training_session* session, int64_t step_size, float gamma,
                                                         float initial_lr) {
  return ET_GUARD(
      ET_REQUIRE(session)->session.RegisterLRScheduler(edgetrain::LRScheduler::Step(step_size, gamma, initial_lr)));
}

et_error* et_training_session_scheduler_step(et_training_session* session) {
  return ET_GUARD(ET_REQUIRE(session)->session.SchedulerStep());
}

et_error* et_training_session_get_parameters_size(const et_training_session* session, bool trainable_only,
                                                  size_t* out_size) {
  return ET_GUARD(*ET_REQUIRE(out_size) = ET_REQUIRE(session)->session.GetParametersSize(trainable_only));
}

et_error* et_training_session_copy_parameters_to_buffer(const et_training_session* session, float* buffer,
                                                        size_t buffer_count, bool trainable_only) {
  return ET_GUARD({
    Tensor target = FlatFloatBuffer(buffer, buffer_count, function);
    ET_REQUIRE(session)->session.CopyParametersToBuffer(target, trainable_only);
  });
}

et_error* et_training_session_copy_buffer_to_parameters(et_training_session* session, const float* buffer,
                                                        size_t buffer_count, bool trainable_only) {
  return ET_GUARD(ET_REQUIRE(session)->session.CopyBufferToParameters(FlatFloatBuffer(buffer, buffer_count, function),
                                                                      trainable_only));
}

et_error* et_training_session_input_count(const et_training_session* session, et_model_kind model, size_t* out_count) {
  return ET_GUARD(*ET_REQUIRE(out_count) = ModelNames(ET_REQUIRE(session)->session, model, true).size());
}

et_error* et_training_session_input_name(const et_training_session* session, et_model_kind model, size_t index,
                                         const char** out_name) {
  return ET_GUARD({
    const et_training_session& handle = *ET_REQUIRE(session);
    *ET_REQUIRE(out_name) = NameAt(handle.strings, ModelNames(handle.session, model, true), index, "input");
  });
}

et_error* et_training_session_output_count(const et_training_session* session, et_model_kind model, size_t* out_count) {
  return ET_GUARD(*ET_REQUIRE(out_count) = ModelNames(ET_REQUIRE(session)->session, model, false).size());
}

et_error* et_training_session_output_name(const et_training_session* session, et_model_kind model, size_t index,
                                          const char** out_name) {
  return ET_GUARD({
    const et_training_session& handle = *ET_REQUIRE(session);
    *ET_REQUIRE(out_name) = NameAt(handle.strings, ModelNames(handle.session, model, false), index, "output");
  });
}

et_error* et_training_session_get_memory_plan(const et_training_session* session, uint64_t* out_arena_bytes,
                                              size_t* out_recomputed_values) {
  return ET_GUARD({
    const edgetrain::TrainingSession& s = ET_REQUIRE(session)->session;
    if (out_arena_bytes != nullptr) *out_arena_bytes = s.training_arena_bytes();
    if (out_recomputed_values != nullptr) *out_recomputed_values = s.recomputed_values();
  });
}

et_error* et_training_session_get_frozen_prefix_cache(const et_training_session* session, uint64_t* out_samples,
                                                      uint64_t* out_bytes, uint64_t* out_hits, uint64_t* out_misses) {
  return ET_GUARD({
    const edgetrain::FrozenPrefixStats stats = ET_REQUIRE(session)->session.frozen_prefix_stats();
    if (out_samples != nullptr) *out_samples = stats.cached_samples;
    if (out_bytes != nullptr) *out_bytes = stats.cache_bytes;
    if (out_hits != nullptr) *out_hits = stats.hits;
    if (out_misses != nullptr) *out_misses = stats.misses;
  });
}

et_error* et_training_session_set_seed(et_training_session* session, uint64_t seed) {
  return ET_GUARD(ET_REQUIRE(session)->session.SetSeed(seed));
}

et_error* et_training_session_export_model_for_inference(const et_training_session* session, const char* path,
                                                         const char* const* output_names, size_t output_count) {
  return ET_GUARD(ET_REQUIRE(session)->session.ExportModelForInference(
      ET_REQUIRE_STRING(path), FromStrings(output_names, output_count, function, "output_names")));
}

// ---- training agent (et_training_agent_create builds its models offline: c_api_offline.cpp; none exists in a
// device-only build, whose c_api_device_only.cpp answers these with typed errors) ----
#ifndef EDGETRAIN_DEVICE_ONLY

void et_training_agent_free(et_training_agent* agent) { delete agent; }

et_error* et_training_agent_input_count(const et_training_agent* agent, size_t* out_count) {
  return ET_GUARD(*ET_REQUIRE(out_count) = ET_REQUIRE(agent)->agent.InputNames().size());
}

et_error* et_training_agent_input_name(const et_training_agent* agent, size_t index, const char** out_name) {
  return ET_GUARD({
    const et_training_agent& handle = *ET_REQUIRE(agent);
    *ET_REQUIRE(out_name) = NameAt(handle.strings, handle.agent.InputNames(), index, "input");
  });
}

et_error* et_training_agent_output_count(const et_training_agent* agent, size_t* out_count) {
  return ET_GUARD(*ET_REQUIRE(out_count) = ET_REQUIRE(agent)->agent.OutputNames().size());
}

et_error* et_training_agent_output_name(const et_training_agent* agent, size_t index, const char** out_name) {
  return ET_GUARD({
    const et_training_agent& handle = *ET_REQUIRE(agent);
    *ET_REQUIRE(out_name) = NameAt(handle.strings, handle.agent.OutputNames(), index, "output");
  });
}

et_error* et_training_agent_forward(et_training_agent* agent, const et_tensor_view* inputs, size_t input_count,
                                    et_values** out_outputs, int64_t* out_handle) {
  return ET_GUARD({
    ET_REQUIRE(out_handle);
    edgetrain::TrainingAgent::ForwardResult result =
        ET_REQUIRE(agent)->agent.Forward(ET_FROM_VIEWS(inputs, input_count));
    std::unique_ptr<et_values> outputs = MakeValues(std::move(result.outputs), agent->agent.OutputNames());
    *out_handle = result.handle;
    Deliver(out_outputs, std::move(outputs));
  });
}

et_error* et_training_agent_backward(et_training_agent* agent, int64_t handle, const et_tensor_view* output_gradients,
                                     size_t gradient_count, et_values** out_input_gradients,
                                     et_values** out_parameter_gradients) {
  return ET_GUARD({
    edgetrain::TrainingAgent::BackwardResult result =
        ET_REQUIRE(agent)->agent.Backward(handle, ET_FROM_VIEWS(output_gradients, gradient_count));
    std::vector<Tensor> parameter_gradients;
    std::vector<std::string> parameter_names;
    for (auto& [name, gradient] : result.parameter_gradients) {
      parameter_names.push_back(name);
      parameter_gradients.push_back(std::move(gradient));
    }
    std::unique_ptr<et_values> inputs = MakeValues(std::move(result.input_gradients), agent->agent.InputNames());
    std::unique_ptr<et_values> parameters = MakeValues(std::move(parameter_gradients), std::move(parameter_names));
    Deliver(out_input_gradients, std::move(inputs));
    Deliver(out_parameter_gradients, std::move(parameters));
  });
}

et_error* et_training_agent_release(et_training_agent* agent, int64_t handle) {
  return ET_GUARD(ET_REQUIRE(agent)->agent.Release(handle));
}

#endif  // EDGETRAIN_DEVICE_ONLY

}  // extern "C"
