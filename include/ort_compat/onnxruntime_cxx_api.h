// edgetrain's source-compatible stand-in for ONNX Runtime's C++ API header (onnxruntime_cxx_api.h): RAII
// classes in namespace Ort over the C API of onnxruntime_c_api.h, written for edgetrain from ORT's public
// documentation. Failures throw Ort::Exception carrying ORT's error code and edgetrain's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onnxruntime_c_api.h"

namespace Ort {

// The API table of the linked library (edgetrain_ort_compat).
inline const OrtApi& GetApi() noexcept {
  static const OrtApi* api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  return *api;
}

inline std::string GetVersionString() { return OrtGetApiBase()->GetVersionString(); }

class Exception : public std::exception {
 public:
  Exception(std::string&& message, OrtErrorCode code) : message_(std::move(message)), code_(code) {}
  OrtErrorCode GetOrtErrorCode() const { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
  OrtErrorCode code_;
};

// Throws the status as an Ort::Exception (and releases it); does nothing for NULL.
inline void ThrowOnError(OrtStatus* status) {
  if (status == nullptr) return;
  std::string message = GetApi().GetErrorMessage(status);
  OrtErrorCode code = GetApi().GetErrorCode(status);
  GetApi().ReleaseStatus(status);
  throw Exception(std::move(message), code);
}

namespace detail {

// How each C object is released; the training header adds its own types.
template <typename T>
struct Releaser;
#define EDGETRAIN_ORT_RELEASER(NAME)                                                       \
  template <>                                                                              \
  struct Releaser<Ort##NAME> {                                                             \
    static void Release(Ort##NAME* p) noexcept { GetApi().Release##NAME(p); }              \
  };
EDGETRAIN_ORT_RELEASER(Status)
EDGETRAIN_ORT_RELEASER(Env)
EDGETRAIN_ORT_RELEASER(SessionOptions)
EDGETRAIN_ORT_RELEASER(Session)
EDGETRAIN_ORT_RELEASER(RunOptions)
EDGETRAIN_ORT_RELEASER(MemoryInfo)
EDGETRAIN_ORT_RELEASER(Value)
EDGETRAIN_ORT_RELEASER(TensorTypeAndShapeInfo)
EDGETRAIN_ORT_RELEASER(TypeInfo)
#undef EDGETRAIN_ORT_RELEASER

// Owns one C object; move-only, and converts to the raw pointer the C API takes.
template <typename T>
class Base {
 public:
  using contained_type = T;
  Base() = default;
  explicit Base(T* p) noexcept : p_(p) {}
  ~Base() { Releaser<T>::Release(p_); }
  Base(const Base&) = delete;
  Base& operator=(const Base&) = delete;
  Base(Base&& other) noexcept : p_(other.release()) {}
  Base& operator=(Base&& other) noexcept {
    if (this != &other) {
      Releaser<T>::Release(p_);
      p_ = other.release();
    }
    return *this;
  }
  operator T*() const noexcept { return p_; }
  T* release() noexcept { return std::exchange(p_, nullptr); }

 protected:
  T* p_ = nullptr;
};

// Frees what an OrtAllocator handed out (names of inputs and outputs).
struct AllocatedFree {
  OrtAllocator* allocator_;
  explicit AllocatedFree(OrtAllocator* allocator) : allocator_(allocator) {}
  void operator()(void* p) const {
    if (p != nullptr) allocator_->Free(allocator_, p);
  }
};

inline ONNXTensorElementDataType ElementType(const OrtTensorTypeAndShapeInfo* info) {
  ONNXTensorElementDataType type;
  ThrowOnError(GetApi().GetTensorElementType(info, &type));
  return type;
}
inline size_t DimensionsCount(const OrtTensorTypeAndShapeInfo* info) {
  size_t count;
  ThrowOnError(GetApi().GetDimensionsCount(info, &count));
  return count;
}
inline std::vector<int64_t> Shape(const OrtTensorTypeAndShapeInfo* info) {
  std::vector<int64_t> shape(DimensionsCount(info));
  ThrowOnError(GetApi().GetDimensions(info, shape.data(), shape.size()));
  return shape;
}
inline size_t ElementCount(const OrtTensorTypeAndShapeInfo* info) {
  size_t count;
  ThrowOnError(GetApi().GetTensorShapeElementCount(info, &count));
  return count;
}

}  // namespace detail

using AllocatedStringPtr = std::unique_ptr<char, detail::AllocatedFree>;

// An error as a value: OK when it holds no OrtStatus.
class Status : public detail::Base<OrtStatus> {
 public:
  explicit Status(std::nullptr_t) noexcept {}
  explicit Status(OrtStatus* status) noexcept : Base(status) {}
  explicit Status(const Exception& e) : Base(GetApi().CreateStatus(e.GetOrtErrorCode(), e.what())) {}
  Status(const char* message, OrtErrorCode code) : Base(GetApi().CreateStatus(code, message)) {}
  bool IsOK() const noexcept { return p_ == nullptr; }
  OrtErrorCode GetErrorCode() const { return p_ == nullptr ? ORT_OK : GetApi().GetErrorCode(p_); }
  std::string GetErrorMessage() const { return p_ == nullptr ? std::string() : GetApi().GetErrorMessage(p_); }
};

inline void ThrowOnError(const Status& status) {
  if (!status.IsOK()) throw Exception(status.GetErrorMessage(), status.GetErrorCode());
}

template <typename T>
struct TypeToTensorType;
#define EDGETRAIN_ORT_TENSOR_TYPE(CPP, ONNX) \
  template <>                                \
  struct TypeToTensorType<CPP> {             \
    static constexpr ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_##ONNX; \
  };
EDGETRAIN_ORT_TENSOR_TYPE(float, FLOAT)
EDGETRAIN_ORT_TENSOR_TYPE(double, DOUBLE)
EDGETRAIN_ORT_TENSOR_TYPE(int8_t, INT8)
EDGETRAIN_ORT_TENSOR_TYPE(uint8_t, UINT8)
EDGETRAIN_ORT_TENSOR_TYPE(int16_t, INT16)
EDGETRAIN_ORT_TENSOR_TYPE(uint16_t, UINT16)
EDGETRAIN_ORT_TENSOR_TYPE(int32_t, INT32)
EDGETRAIN_ORT_TENSOR_TYPE(uint32_t, UINT32)
EDGETRAIN_ORT_TENSOR_TYPE(int64_t, INT64)
EDGETRAIN_ORT_TENSOR_TYPE(uint64_t, UINT64)
EDGETRAIN_ORT_TENSOR_TYPE(bool, BOOL)
#undef EDGETRAIN_ORT_TENSOR_TYPE

class Env : public detail::Base<OrtEnv> {
 public:
  explicit Env(std::nullptr_t) noexcept {}
  Env(OrtLoggingLevel logging_level = ORT_LOGGING_LEVEL_WARNING, const char* logid = "") {
    ThrowOnError(GetApi().CreateEnv(logging_level, logid, &p_));
  }
  explicit Env(OrtEnv* p) noexcept : Base(p) {}
};

class SessionOptions : public detail::Base<OrtSessionOptions> {
 public:
  explicit SessionOptions(std::nullptr_t) noexcept {}
  SessionOptions() { ThrowOnError(GetApi().CreateSessionOptions(&p_)); }
  explicit SessionOptions(OrtSessionOptions* p) noexcept : Base(p) {}

  SessionOptions Clone() const {
    OrtSessionOptions* out;
    ThrowOnError(GetApi().CloneSessionOptions(p_, &out));
    return SessionOptions(out);
  }
  SessionOptions& SetIntraOpNumThreads(int intra_op_num_threads) {
    ThrowOnError(GetApi().SetIntraOpNumThreads(p_, intra_op_num_threads));
    return *this;
  }
  SessionOptions& SetInterOpNumThreads(int inter_op_num_threads) {
    ThrowOnError(GetApi().SetInterOpNumThreads(p_, inter_op_num_threads));
    return *this;
  }
  SessionOptions& SetGraphOptimizationLevel(GraphOptimizationLevel graph_optimization_level) {
    ThrowOnError(GetApi().SetSessionGraphOptimizationLevel(p_, graph_optimization_level));
    return *this;
  }
  SessionOptions& SetExecutionMode(ExecutionMode execution_mode) {
    ThrowOnError(GetApi().SetSessionExecutionMode(p_, execution_mode));
    return *this;
  }
  SessionOptions& SetLogId(const char* logid) {
    ThrowOnError(GetApi().SetSessionLogId(p_, logid));
    return *this;
  }
  SessionOptions& SetLogSeverityLevel(int level) {
    ThrowOnError(GetApi().SetSessionLogSeverityLevel(p_, level));
    return *this;
  }
  SessionOptions& EnableCpuMemArena() {
    ThrowOnError(GetApi().EnableCpuMemArena(p_));
    return *this;
  }
  SessionOptions& DisableCpuMemArena() {
    ThrowOnError(GetApi().DisableCpuMemArena(p_));
    return *this;
  }
};

class RunOptions : public detail::Base<OrtRunOptions> {
 public:
  explicit RunOptions(std::nullptr_t) noexcept {}
  RunOptions() { ThrowOnError(GetApi().CreateRunOptions(&p_)); }
};

class MemoryInfo : public detail::Base<OrtMemoryInfo> {
 public:
  explicit MemoryInfo(std::nullptr_t) noexcept {}
  explicit MemoryInfo(OrtMemoryInfo* p) noexcept : Base(p) {}
  MemoryInfo(const char* name, OrtAllocatorType type, int id, OrtMemType mem_type) {
    ThrowOnError(GetApi().CreateMemoryInfo(name, type, id, mem_type, &p_));
  }
  static MemoryInfo CreateCpu(OrtAllocatorType type, OrtMemType mem_type) {
    OrtMemoryInfo* out;
    ThrowOnError(GetApi().CreateCpuMemoryInfo(type, mem_type, &out));
    return MemoryInfo(out);
  }
  std::string GetAllocatorName() const {
    const char* name;
    ThrowOnError(GetApi().MemoryInfoGetName(p_, &name));
    return name;
  }
};

class AllocatorWithDefaultOptions {
 public:
  AllocatorWithDefaultOptions() { ThrowOnError(GetApi().GetAllocatorWithDefaultOptions(&p_)); }
  operator OrtAllocator*() const noexcept { return p_; }
  void* Alloc(size_t size) {
    void* out;
    ThrowOnError(GetApi().AllocatorAlloc(p_, size, &out));
    return out;
  }
  void Free(void* p) { ThrowOnError(GetApi().AllocatorFree(p_, p)); }

 private:
  OrtAllocator* p_ = nullptr;
};

// Type and shape of a tensor, owned.
class TensorTypeAndShapeInfo : public detail::Base<OrtTensorTypeAndShapeInfo> {
 public:
  explicit TensorTypeAndShapeInfo(std::nullptr_t) noexcept {}
  explicit TensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* p) noexcept : Base(p) {}
  ONNXTensorElementDataType GetElementType() const { return detail::ElementType(p_); }
  size_t GetElementCount() const { return detail::ElementCount(p_); }
  size_t GetDimensionsCount() const { return detail::DimensionsCount(p_); }
  void GetDimensions(int64_t* values, size_t values_count) const {
    ThrowOnError(GetApi().GetDimensions(p_, values, values_count));
  }
  std::vector<int64_t> GetShape() const { return detail::Shape(p_); }
};

// The same, viewing one that another object owns.
class ConstTensorTypeAndShapeInfo {
 public:
  explicit ConstTensorTypeAndShapeInfo(const OrtTensorTypeAndShapeInfo* p) noexcept : p_(p) {}
  operator const OrtTensorTypeAndShapeInfo*() const noexcept { return p_; }
  ONNXTensorElementDataType GetElementType() const { return detail::ElementType(p_); }
  size_t GetElementCount() const { return detail::ElementCount(p_); }
  size_t GetDimensionsCount() const { return detail::DimensionsCount(p_); }
  void GetDimensions(int64_t* values, size_t values_count) const {
    ThrowOnError(GetApi().GetDimensions(p_, values, values_count));
  }
  std::vector<int64_t> GetShape() const { return detail::Shape(p_); }

 private:
  const OrtTensorTypeAndShapeInfo* p_;
};

class TypeInfo : public detail::Base<OrtTypeInfo> {
 public:
  explicit TypeInfo(std::nullptr_t) noexcept {}
  explicit TypeInfo(OrtTypeInfo* p) noexcept : Base(p) {}
  ConstTensorTypeAndShapeInfo GetTensorTypeAndShapeInfo() const {
    const OrtTensorTypeAndShapeInfo* out;
    ThrowOnError(GetApi().CastTypeInfoToTensorInfo(p_, &out));
    return ConstTensorTypeAndShapeInfo(out);
  }
  ONNXType GetONNXType() const {
    ONNXType out;
    ThrowOnError(GetApi().GetOnnxTypeFromTypeInfo(p_, &out));
    return out;
  }
};

class Value : public detail::Base<OrtValue> {
 public:
  Value(std::nullptr_t) noexcept {}
  explicit Value(OrtValue* p) noexcept : Base(p) {}

  // A tensor over p_data (p_data_element_count elements of T), which must outlive the value.
  template <typename T>
  static Value CreateTensor(const OrtMemoryInfo* info, T* p_data, size_t p_data_element_count, const int64_t* shape,
                            size_t shape_len) {
    return CreateTensor(info, p_data, p_data_element_count * sizeof(T), shape, shape_len, TypeToTensorType<T>::type);
  }
  static Value CreateTensor(const OrtMemoryInfo* info, void* p_data, size_t p_data_byte_count, const int64_t* shape,
                            size_t shape_len, ONNXTensorElementDataType type) {
    OrtValue* out;
    ThrowOnError(
        GetApi().CreateTensorWithDataAsOrtValue(info, p_data, p_data_byte_count, shape, shape_len, type, &out));
    return Value(out);
  }
  // A tensor owning new memory.
  template <typename T>
  static Value CreateTensor(OrtAllocator* allocator, const int64_t* shape, size_t shape_len) {
    return CreateTensor(allocator, shape, shape_len, TypeToTensorType<T>::type);
  }
  static Value CreateTensor(OrtAllocator* allocator, const int64_t* shape, size_t shape_len,
                            ONNXTensorElementDataType type) {
    OrtValue* out;
    ThrowOnError(GetApi().CreateTensorAsOrtValue(allocator, shape, shape_len, type, &out));
    return Value(out);
  }

  bool IsTensor() const {
    int out;
    ThrowOnError(GetApi().IsTensor(p_, &out));
    return out != 0;
  }
  template <typename T>
  T* GetTensorMutableData() {
    void* out;
    ThrowOnError(GetApi().GetTensorMutableData(p_, &out));
    return static_cast<T*>(out);
  }
  template <typename T>
  const T* GetTensorData() const {
    void* out;
    ThrowOnError(GetApi().GetTensorMutableData(p_, &out));
    return static_cast<const T*>(out);
  }
  void* GetTensorMutableRawData() { return GetTensorMutableData<void>(); }
  const void* GetTensorRawData() const { return GetTensorData<void>(); }
  TensorTypeAndShapeInfo GetTensorTypeAndShapeInfo() const {
    OrtTensorTypeAndShapeInfo* out;
    ThrowOnError(GetApi().GetTensorTypeAndShape(p_, &out));
    return TensorTypeAndShapeInfo(out);
  }
};
static_assert(sizeof(Value) == sizeof(OrtValue*), "a Value array must be usable as an OrtValue* array");

class Session : public detail::Base<OrtSession> {
 public:
  explicit Session(std::nullptr_t) noexcept {}
  Session(const Env& env, const ORTCHAR_T* model_path, const SessionOptions& options) {
    ThrowOnError(GetApi().CreateSession(env, model_path, options, &p_));
  }
  Session(const Env& env, const void* model_data, size_t model_data_length, const SessionOptions& options) {
    ThrowOnError(GetApi().CreateSessionFromArray(env, model_data, model_data_length, options, &p_));
  }

  std::vector<Value> Run(const RunOptions& run_options, const char* const* input_names, const Value* input_values,
                         size_t input_count, const char* const* output_names, size_t output_count) {
    std::vector<Value> outputs;
    outputs.reserve(output_count);
    for (size_t i = 0; i < output_count; ++i) outputs.emplace_back(nullptr);
    Run(run_options, input_names, input_values, input_count, output_names, outputs.data(), output_count);
    return outputs;
  }
  // Fills output_values: null entries receive new values.
  void Run(const RunOptions& run_options, const char* const* input_names, const Value* input_values,
           size_t input_count, const char* const* output_names, Value* output_values, size_t output_count) {
    ThrowOnError(GetApi().Run(p_, run_options, input_names, reinterpret_cast<const OrtValue* const*>(input_values),
                              input_count, output_names, output_count, reinterpret_cast<OrtValue**>(output_values)));
  }

  size_t GetInputCount() const {
    size_t out;
    ThrowOnError(GetApi().SessionGetInputCount(p_, &out));
    return out;
  }
  size_t GetOutputCount() const {
    size_t out;
    ThrowOnError(GetApi().SessionGetOutputCount(p_, &out));
    return out;
  }
  AllocatedStringPtr GetInputNameAllocated(size_t index, OrtAllocator* allocator) const {
    char* out;
    ThrowOnError(GetApi().SessionGetInputName(p_, index, allocator, &out));
    return AllocatedStringPtr(out, detail::AllocatedFree(allocator));
  }
  AllocatedStringPtr GetOutputNameAllocated(size_t index, OrtAllocator* allocator) const {
    char* out;
    ThrowOnError(GetApi().SessionGetOutputName(p_, index, allocator, &out));
    return AllocatedStringPtr(out, detail::AllocatedFree(allocator));
  }
  TypeInfo GetInputTypeInfo(size_t index) const {
    OrtTypeInfo* out;
    ThrowOnError(GetApi().SessionGetInputTypeInfo(p_, index, &out));
    return TypeInfo(out);
  }
  TypeInfo GetOutputTypeInfo(size_t index) const {
    OrtTypeInfo* out;
    ThrowOnError(GetApi().SessionGetOutputTypeInfo(p_, index, &out));
    return TypeInfo(out);
  }
};

}  // namespace Ort
