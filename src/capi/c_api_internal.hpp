// Shared by the C ABI's translation units (c_api.cpp on the device runtime, c_api_offline.cpp in the
// offline library): the handle structs, error conversion and argument checks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "edgetrain/edgetrain.h"
#include "training/checkpoint_state.hpp"
#include "training/training_agent.hpp"
#include "training/training_session.hpp"

namespace edgetrain::capi {

// Strings handed out by a handle: each distinct string is stored once and never moves.
class StringPool {
 public:
  const char* Intern(std::string text) const { return strings_.insert(std::move(text)).first->c_str(); }

 private:
  mutable std::set<std::string> strings_;
};

}  // namespace edgetrain::capi

struct et_error {
  et_error_code code;
  std::string message;
};

struct et_values {
  std::vector<edgetrain::Tensor> tensors;
  std::vector<std::string> names;  // empty strings when unnamed
};

struct et_checkpoint_state {
  edgetrain::CheckpointState state;
  edgetrain::capi::StringPool strings;
};

struct et_training_session {
  edgetrain::TrainingSession session;
  edgetrain::capi::StringPool strings;
};

struct et_training_agent {
  edgetrain::TrainingAgent agent;
  edgetrain::capi::StringPool strings;
};

namespace edgetrain::capi {

// Returned when even the error object cannot be allocated; et_error_free leaves it alone.
inline et_error out_of_memory_error{ET_ERROR_RESOURCE_EXHAUSTED, ""};

inline et_error_code ToCCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return ET_ERROR_INVALID_ARGUMENT;
    case ErrorCode::kInvalidModel: return ET_ERROR_INVALID_MODEL;
    case ErrorCode::kNotImplemented: return ET_ERROR_NOT_IMPLEMENTED;
    case ErrorCode::kOutOfRange: return ET_ERROR_OUT_OF_RANGE;
    case ErrorCode::kIoError: return ET_ERROR_IO;
    case ErrorCode::kResourceExhausted: return ET_ERROR_RESOURCE_EXHAUSTED;
    case ErrorCode::kInternal: return ET_ERROR_INTERNAL;
  }
  return ET_ERROR_INTERNAL;
}

inline et_error* MakeError(et_error_code code, const char* message) noexcept {
  try {
    return new et_error{code, message};
  } catch (...) {
    return &out_of_memory_error;
  }
}

// Runs `body`: NULL on success, else an error object. edgetrain::Error messages already name what
// failed; any other exception is prefixed with the C function's name.
template <typename Body>
inline et_error* Guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const edgetrain::Error& e) {
    return MakeError(ToCCode(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return MakeError(ET_ERROR_RESOURCE_EXHAUSTED, (std::string(function) + ": out of memory").c_str());
  } catch (const std::exception& e) {
    return MakeError(ET_ERROR_INTERNAL, (std::string(function) + ": " + e.what()).c_str());
  } catch (...) {
    return MakeError(ET_ERROR_INTERNAL, (std::string(function) + ": unknown exception").c_str());
  }
}

// The body names the C function as `function` (inside a lambda, __func__ would be "operator()").
#define ET_GUARD(...) Guard(__func__, [&, function = __func__]() { __VA_ARGS__; })

// Every pointer argument a function dereferences goes through Require.
template <typename T>
inline T* Require(T* pointer, const char* function, const char* argument) {
  if (pointer == nullptr) Fail(ErrorCode::kInvalidArgument, function, ": ", argument, " is NULL");
  return pointer;
}
#define ET_REQUIRE(pointer) Require(pointer, function, #pointer)

inline std::string RequireString(const char* text, const char* function, const char* argument) {
  return std::string(Require(text, function, argument));
}
#define ET_REQUIRE_STRING(text) RequireString(text, function, #text)

// Borrows the caller's memory for the duration of one call (inputs are only read: the cast is safe).
inline Tensor FromView(const et_tensor_view& view, const std::string& what) {
  int32_t dtype_value = static_cast<int32_t>(view.dtype);
  if (!edgetrain::IsKnownDataType(dtype_value) || edgetrain::DataTypeSize(static_cast<DataType>(dtype_value)) == 0)
    Fail(ErrorCode::kInvalidArgument, what, ": element type ", dtype_value, " is not a tensor type this ABI accepts");
  if (view.rank > 0 && view.shape == nullptr) Fail(ErrorCode::kInvalidArgument, what, ": shape is NULL");
  edgetrain::Shape shape(view.shape, view.shape + view.rank);
  if (edgetrain::NumElements(shape) > 0 && view.data == nullptr)
    Fail(ErrorCode::kInvalidArgument, what, ": data is NULL");
  return Tensor::Borrow(static_cast<DataType>(dtype_value), std::move(shape), const_cast<void*>(view.data));
}

// `count` float32 values at `buffer`, borrowed for one call.
inline Tensor FlatFloatBuffer(const float* buffer, size_t count, const char* function) {
  int64_t elements = static_cast<int64_t>(count);
  return FromView({ET_DTYPE_FLOAT32, &elements, 1, buffer}, std::string(function) + ": buffer");
}

inline std::vector<Tensor> FromViews(const et_tensor_view* views, size_t count, const char* function,
                                     const char* argument) {
  if (count > 0) Require(views, function, argument);
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < count; ++i)
    tensors.push_back(FromView(views[i], std::string(function) + ": " + argument + "[" + std::to_string(i) + "]"));
  return tensors;
}
#define ET_FROM_VIEWS(views, count) FromViews(views, count, function, #views)

inline std::vector<std::string> FromStrings(const char* const* strings, size_t count, const char* function,
                                     const char* argument) {
  if (count > 0) Require(strings, function, argument);
  std::vector<std::string> result;
  for (size_t i = 0; i < count; ++i)
    result.push_back(
        RequireString(strings[i], function, (std::string(argument) + "[" + std::to_string(i) + "]").c_str()));
  return result;
}

inline std::unique_ptr<et_values> MakeValues(std::vector<Tensor> tensors, std::vector<std::string> names) {
  names.resize(tensors.size());
  return std::unique_ptr<et_values>(new et_values{std::move(tensors), std::move(names)});
}

// Hands `values` to the caller (called once everything that can fail has run), or drops them.
inline void Deliver(et_values** out, std::unique_ptr<et_values> values) noexcept {
  if (out != nullptr) *out = values.release();
}

inline const Tensor* ValueAt(const et_values* values, size_t index) {
  if (values == nullptr || index >= values->tensors.size()) return nullptr;
  return &values->tensors[index];
}

inline const char* NameAt(const StringPool& strings, const std::vector<std::string>& names, size_t index,
                          const char* what) {
  if (index >= names.size())
    Fail(ErrorCode::kOutOfRange, what, " index ", index, " is out of range (", names.size(), " names)");
  return strings.Intern(names[index]);
}

// Whether a caller compiled with options->struct_size bytes of et_session_options set `field`.
template <typename Field>
inline bool HasField(const et_session_options* options, const Field* field) {
  const auto end = reinterpret_cast<const char*>(field + 1) - reinterpret_cast<const char*>(options);
  return static_cast<size_t>(end) <= options->struct_size;
}

inline edgetrain::TrainingSessionOptions ToTrainingOptions(const et_session_options* options) {
  edgetrain::TrainingSessionOptions result;
  if (options == nullptr) return result;
  ET_CHECK(options->struct_size > offsetof(et_session_options, num_threads) &&
               options->struct_size <= sizeof(et_session_options),
           ErrorCode::kInvalidArgument, "session options: struct_size is ", options->struct_size,
           "; initialise the options with et_session_options_init (this library's et_session_options has ",
           sizeof(et_session_options), " bytes)");
  if (HasField(options, &options->num_threads)) result.num_threads = options->num_threads;
  if (HasField(options, &options->seed)) result.seed = options->seed;
  if (HasField(options, &options->memory_limit_bytes)) {
    ET_CHECK(options->memory_limit_bytes >= 0, ErrorCode::kInvalidArgument, "session options: memory_limit_bytes is ",
             options->memory_limit_bytes, "; it must be positive, or 0 for no limit");
    result.memory_limit_bytes = static_cast<uint64_t>(options->memory_limit_bytes);
  }
  if (HasField(options, &options->memory_budget_bytes)) {
    ET_CHECK(options->memory_budget_bytes >= 0, ErrorCode::kInvalidArgument, "session options: memory_budget_bytes is ",
             options->memory_budget_bytes, "; it must be positive, or 0 for no budget");
    if (options->memory_budget_bytes > 0) result.memory_budget_bytes = options->memory_budget_bytes;
  }
  if (HasField(options, &options->frozen_prefix_cache_bytes)) {
    ET_CHECK(options->frozen_prefix_cache_bytes >= 0, ErrorCode::kInvalidArgument,
             "session options: frozen_prefix_cache_bytes is ", options->frozen_prefix_cache_bytes,
             "; it must be positive, or 0 for no cache");
    if (options->frozen_prefix_cache_bytes > 0) {
      result.cache_frozen_prefix = true;
      result.frozen_prefix_cache_bytes = options->frozen_prefix_cache_bytes;
    }
  }
  return result;
}

inline edgetrain::ModelSource PathSource(const char* path) {
  return path == nullptr ? edgetrain::ModelSource{} : path;
}

inline edgetrain::ModelSource BufferSource(const void* data, size_t size, const char* name) {
  return data == nullptr ? edgetrain::ModelSource{} : edgetrain::ModelSource::FromBuffer(data, size, name);
}

// The input (or output) names of the session's training or eval model.
inline std::vector<std::string> ModelNames(const edgetrain::TrainingSession& session, et_model_kind model,
                                           bool inputs) {
  switch (model) {
    case ET_MODEL_TRAINING: return inputs ? session.TrainingInputNames() : session.TrainingOutputNames();
    case ET_MODEL_EVAL: return inputs ? session.EvalInputNames() : session.EvalOutputNames();
    case ET_MODEL_KIND_MAX_ENUM: break;
  }
  Fail(ErrorCode::kInvalidArgument, "model kind ", static_cast<int>(model), " is neither training nor eval");
}

template <typename T>
inline T PropertyAs(const edgetrain::CheckpointState& state, const std::string& name, const char* type_name) {
  edgetrain::PropertyValue value = state.GetProperty(name);
  if (!std::holds_alternative<T>(value))
    Fail(ErrorCode::kInvalidArgument, "property '", name, "' is not of type ", type_name);
  return std::get<T>(value);
}

}  // namespace edgetrain::capi
