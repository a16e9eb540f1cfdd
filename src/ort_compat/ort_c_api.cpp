// ONNX Runtime's C API (include/ort_compat/onnxruntime_c_api.h, onnxruntime_training_c_api.h) over
// edgetrain's C++ runtime: OrtSession is a Session, OrtTrainingSession a TrainingSession, OrtValue a Tensor.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "onnx/importer.hpp"
#include "onnxruntime_training_c_api.h"
#include "runtime/session.hpp"
#include "training/checkpoint_state.hpp"
#include "training/training_session.hpp"

using edgetrain::DataType;
using edgetrain::ErrorCode;
using edgetrain::Tensor;

struct OrtStatus {
  OrtErrorCode code;
  std::string message;
};
struct OrtEnv {
  std::string log_id;
};
struct OrtSessionOptions {
  int intra_op_threads = 0;  // 0: edgetrain's default
};
struct OrtRunOptions {};
struct OrtMemoryInfo {
  std::string name;
  OrtAllocatorType type;
  int id;
  OrtMemType mem_type;
};
struct OrtValue {
  Tensor tensor;
};
struct OrtTensorTypeAndShapeInfo {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;        // -1 for an unknown dim
  std::vector<std::string> symbols;  // "" for a dim without a name
};
struct OrtTypeInfo {
  ONNXType type;
  OrtTensorTypeAndShapeInfo tensor;
};
struct OrtSession {
  edgetrain::Session session;
  std::vector<const edgetrain::ValueInfo*> outputs;
};
struct OrtCheckpointState {
  edgetrain::CheckpointState state;
};
struct OrtTrainingSession {
  edgetrain::TrainingSession session;
  uint64_t seed_generation;
};

namespace {

// SetSeed is global in ORT: sessions pick up a new seed before their next step.
std::atomic<uint64_t> seed_generation{0};
std::atomic<int64_t> global_seed{0};

OrtStatus out_of_memory_status{ORT_FAIL, "out of memory"};

OrtStatus* MakeStatus(OrtErrorCode code, std::string message) noexcept {
  try {
    return new OrtStatus{code, std::move(message)};
  } catch (...) {
    return &out_of_memory_status;
  }
}

OrtErrorCode ToOrtCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return ORT_INVALID_ARGUMENT;
    case ErrorCode::kInvalidModel: return ORT_INVALID_GRAPH;
    case ErrorCode::kNotImplemented: return ORT_NOT_IMPLEMENTED;
    case ErrorCode::kOutOfRange: return ORT_INVALID_ARGUMENT;
    case ErrorCode::kIoError: return ORT_NO_SUCHFILE;
    case ErrorCode::kResourceExhausted: return ORT_RUNTIME_EXCEPTION;
    case ErrorCode::kInternal: return ORT_FAIL;
  }
  return ORT_FAIL;
}

// Runs `body`: NULL on success, else a status; messages other than edgetrain's name the C function.
template <typename Body>
OrtStatus* Guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const edgetrain::Error& e) {
    return MakeStatus(ToOrtCode(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return MakeStatus(ORT_FAIL, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return MakeStatus(ORT_FAIL, std::string(function) + ": " + e.what());
  } catch (...) {
    return MakeStatus(ORT_FAIL, std::string(function) + ": unknown exception");
  }
}
#define ORT_GUARD(...) Guard(__func__, [&, function = __func__]() { __VA_ARGS__; })

template <typename T>
T* Require(T* pointer, const char* function, const char* argument) {
  ET_CHECK(pointer != nullptr, ErrorCode::kInvalidArgument, function, ": ", argument, " is NULL");
  return pointer;
}
#define REQUIRE(argument) Require(argument, function, #argument)

DataType ToDataType(ONNXTensorElementDataType type, const char* function) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return DataType::kFloat32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return DataType::kUint8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return DataType::kInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return DataType::kUint16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return DataType::kInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return DataType::kInt32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return DataType::kInt64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return DataType::kBool;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return DataType::kFloat16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return DataType::kFloat64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return DataType::kUint32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return DataType::kUint64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return DataType::kBFloat16;
    default:
      edgetrain::Fail(ErrorCode::kNotImplemented, function, ": tensor element type ", static_cast<int>(type),
                      " is not supported (strings and complex numbers do not cross this API)");
  }
}

// ONNX numbers both the same way.
ONNXTensorElementDataType ToOrtType(DataType type) { return static_cast<ONNXTensorElementDataType>(type); }

void CheckShape(const int64_t* shape, size_t shape_len, const char* function) {
  ET_CHECK(shape != nullptr || shape_len == 0, ErrorCode::kInvalidArgument, function, ": shape is NULL");
  for (size_t i = 0; i < shape_len; ++i)
    ET_CHECK(shape[i] >= 0, ErrorCode::kInvalidArgument, function, ": dim ", i, " of the shape is ", shape[i],
             " (a tensor's dims must be >= 0)");
}

OrtTensorTypeAndShapeInfo InfoOf(const Tensor& tensor) {
  OrtTensorTypeAndShapeInfo info;
  info.type = ToOrtType(tensor.dtype());
  info.shape.assign(tensor.shape().begin(), tensor.shape().end());
  info.symbols.assign(info.shape.size(), "");
  return info;
}

OrtTypeInfo TypeInfoOf(const edgetrain::ValueInfo& value) {
  OrtTypeInfo info{value.is_sequence ? ONNX_TYPE_SEQUENCE : ONNX_TYPE_TENSOR, {}};
  info.tensor.type = ToOrtType(value.dtype);
  for (const edgetrain::Dim& dim : value.shape) {
    info.tensor.shape.push_back(dim.known() ? dim.value : -1);
    info.tensor.symbols.push_back(dim.symbol);
  }
  return info;
}

char* CopyString(OrtAllocator* allocator, const std::string& text, const char* function) {
  REQUIRE(allocator);
  char* out = static_cast<char*>(allocator->Alloc(allocator, text.size() + 1));
  ET_CHECK(out != nullptr, ErrorCode::kResourceExhausted, function, ": the allocator returned NULL");
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

std::string NameAt(const std::vector<std::string>& names, size_t index, const char* function, const char* model,
                   const char* kind) {
  ET_CHECK(index < names.size(), ErrorCode::kInvalidArgument, function, ": index ", index, " is out of range (the ",
           model, " has ", names.size(), " ", kind, ")");
  return names[index];
}

std::vector<Tensor> Inputs(const OrtValue* const* inputs, size_t inputs_len, const char* function) {
  ET_CHECK(inputs != nullptr || inputs_len == 0, ErrorCode::kInvalidArgument, function, ": inputs is NULL");
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < inputs_len; ++i) {
    ET_CHECK(inputs[i] != nullptr, ErrorCode::kInvalidArgument, function, ": input ", i, " is NULL");
    tensors.push_back(inputs[i]->tensor);
  }
  return tensors;
}

// NULL outputs[i] receive new values; a value already there must have the result's type and size and is filled.
void StoreOutputs(std::vector<Tensor> results, const std::vector<std::string>& names, OrtValue** outputs,
                  size_t outputs_len, const char* function) {
  ET_CHECK(outputs_len == results.size(), ErrorCode::kInvalidArgument, function, ": outputs_len is ", outputs_len,
           " but the model has ", results.size(), " outputs");
  ET_CHECK(outputs != nullptr || outputs_len == 0, ErrorCode::kInvalidArgument, function, ": outputs is NULL");
  for (size_t i = 0; i < outputs_len; ++i) {
    OrtValue* target = outputs[i];
    if (target == nullptr) continue;
    ET_CHECK(target->tensor.dtype() == results[i].dtype() && target->tensor.numel() == results[i].numel(),
             ErrorCode::kInvalidArgument, function, ": the value given for output '", names[i], "' is ",
             edgetrain::DataTypeName(target->tensor.dtype()), " ", edgetrain::ShapeToString(target->tensor.shape()),
             ", the output is ", edgetrain::DataTypeName(results[i].dtype()), " ",
             edgetrain::ShapeToString(results[i].shape()));
  }
  for (size_t i = 0; i < outputs_len; ++i) {
    if (outputs[i] == nullptr) {
      outputs[i] = new OrtValue{std::move(results[i])};
    } else if (results[i].nbytes() > 0 && !outputs[i]->tensor.SameData(results[i])) {
      std::memcpy(outputs[i]->tensor.raw(), results[i].raw(), results[i].nbytes());
    }
  }
}

edgetrain::TrainingSessionOptions TrainingOptions(const OrtSessionOptions* options) {
  edgetrain::TrainingSessionOptions out;
  if (options != nullptr && options->intra_op_threads > 0) out.num_threads = options->intra_op_threads;
  if (seed_generation.load() > 0) out.seed = static_cast<uint64_t>(global_seed.load());
  return out;
}

void ApplyGlobalSeed(OrtTrainingSession& session) {
  const uint64_t generation = seed_generation.load();
  if (session.seed_generation == generation) return;
  session.session.SetSeed(static_cast<uint64_t>(global_seed.load()));
  session.seed_generation = generation;
}

edgetrain::ModelSource OptionalBuffer(const void* data, size_t size, const char* name) {
  if (data == nullptr) return {};
  return edgetrain::ModelSource::FromBuffer(data, size, name);
}

// ---- the default allocator: malloc and free ----

const OrtMemoryInfo cpu_memory_info{"Cpu", OrtDeviceAllocator, 0, OrtMemTypeDefault};

void* DefaultAlloc(OrtAllocator*, size_t size) { return std::malloc(size == 0 ? 1 : size); }
void DefaultFree(OrtAllocator*, void* p) { std::free(p); }
const OrtMemoryInfo* DefaultInfo(const OrtAllocator*) { return &cpu_memory_info; }

OrtAllocator default_allocator{ORT_API_VERSION, DefaultAlloc, DefaultFree, DefaultInfo, DefaultAlloc};

// ---- errors ----

OrtStatus* CreateStatus(OrtErrorCode code, const char* msg) noexcept {
  return MakeStatus(code, msg != nullptr ? msg : "");
}
OrtErrorCode GetErrorCode(const OrtStatus* status) noexcept { return status != nullptr ? status->code : ORT_OK; }
const char* GetErrorMessage(const OrtStatus* status) noexcept {
  return status != nullptr ? status->message.c_str() : "";
}
void ReleaseStatus(OrtStatus* status) noexcept {
  if (status != &out_of_memory_status) delete status;
}

// ---- environment and options ----

OrtStatus* CreateEnv(OrtLoggingLevel, const char* logid, OrtEnv** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = new OrtEnv{logid != nullptr ? logid : ""});
}
void ReleaseEnv(OrtEnv* env) noexcept { delete env; }

OrtStatus* GetAvailableProviders(char*** out_ptr, int* provider_length) noexcept {
  return ORT_GUARD({
    char*** out = REQUIRE(out_ptr);
    int* length = REQUIRE(provider_length);
    char** list = static_cast<char**>(std::malloc(sizeof(char*)));
    ET_CHECK(list != nullptr, ErrorCode::kResourceExhausted, function, ": out of memory");
    list[0] = CopyString(&default_allocator, "CPUExecutionProvider", function);
    *out = list;
    *length = 1;
  });
}
OrtStatus* ReleaseAvailableProviders(char** ptr, int providers_length) noexcept {
  if (ptr != nullptr) {
    for (int i = 0; i < providers_length; ++i) std::free(ptr[i]);
    std::free(ptr);
  }
  return nullptr;
}

OrtStatus* CreateSessionOptions(OrtSessionOptions** options) noexcept {
  return ORT_GUARD(*REQUIRE(options) = new OrtSessionOptions{});
}
OrtStatus* CloneSessionOptions(const OrtSessionOptions* in_options, OrtSessionOptions** out_options) noexcept {
  return ORT_GUARD(*REQUIRE(out_options) = new OrtSessionOptions(*REQUIRE(in_options)));
}
OrtStatus* SetIntraOpNumThreads(OrtSessionOptions* options, int intra_op_num_threads) noexcept {
  return ORT_GUARD({
    ET_CHECK(intra_op_num_threads >= 0, ErrorCode::kInvalidArgument, function, ": intra_op_num_threads is ",
             intra_op_num_threads, " (0 for the default, or a positive count)");
    REQUIRE(options)->intra_op_threads = intra_op_num_threads;
  });
}
// Options edgetrain accepts and does not need: one inter-op thread, its own graph passes, no arena switch.
OrtStatus* SetInterOpNumThreads(OrtSessionOptions* options, int) noexcept { return ORT_GUARD(REQUIRE(options)); }
OrtStatus* SetSessionGraphOptimizationLevel(OrtSessionOptions* options, GraphOptimizationLevel) noexcept {
  return ORT_GUARD(REQUIRE(options));
}
OrtStatus* SetSessionExecutionMode(OrtSessionOptions* options, ExecutionMode) noexcept {
  return ORT_GUARD(REQUIRE(options));
}
OrtStatus* SetSessionLogId(OrtSessionOptions* options, const char*) noexcept { return ORT_GUARD(REQUIRE(options)); }
OrtStatus* SetSessionLogSeverityLevel(OrtSessionOptions* options, int) noexcept { return ORT_GUARD(REQUIRE(options)); }
OrtStatus* EnableCpuMemArena(OrtSessionOptions* options) noexcept { return ORT_GUARD(REQUIRE(options)); }
OrtStatus* DisableCpuMemArena(OrtSessionOptions* options) noexcept { return ORT_GUARD(REQUIRE(options)); }
void ReleaseSessionOptions(OrtSessionOptions* options) noexcept { delete options; }

// ---- inference sessions ----

OrtSession* NewSession(edgetrain::Model model, const OrtSessionOptions* options) {
  edgetrain::SessionOptions session_options;
  if (options != nullptr && options->intra_op_threads > 0) session_options.num_threads = options->intra_op_threads;
  auto* session = new OrtSession{edgetrain::Session(std::move(model), session_options), {}};
  for (const std::string& name : session->session.OutputNames())
    session->outputs.push_back(session->session.model().graph.FindValueInfo(name));
  return session;
}

OrtStatus* CreateSession(const OrtEnv* env, const ORTCHAR_T* model_path, const OrtSessionOptions* options,
                         OrtSession** out) noexcept {
  return ORT_GUARD({
    REQUIRE(env);
    REQUIRE(out);
    *out = NewSession(edgetrain::LoadModel(REQUIRE(model_path), edgetrain::ExecutionImportOptions()), options);
  });
}
OrtStatus* CreateSessionFromArray(const OrtEnv* env, const void* model_data, size_t model_data_length,
                                  const OrtSessionOptions* options, OrtSession** out) noexcept {
  return ORT_GUARD({
    REQUIRE(env);
    REQUIRE(out);
    *out = NewSession(edgetrain::LoadModelFromBuffer(REQUIRE(model_data), model_data_length, "<memory>", ".",
                                                     edgetrain::ExecutionImportOptions()),
                      options);
  });
}

OrtStatus* Run(OrtSession* session, const OrtRunOptions*, const char* const* input_names,
               const OrtValue* const* inputs, size_t input_len, const char* const* output_names,
               size_t output_names_len, OrtValue** outputs) noexcept {
  return ORT_GUARD({
    REQUIRE(session);
    std::vector<Tensor> tensors = Inputs(inputs, input_len, function);
    ET_CHECK(input_names != nullptr || input_len == 0, ErrorCode::kInvalidArgument, function, ": input_names is NULL");
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0; i < input_len; ++i) {
      ET_CHECK(input_names[i] != nullptr, ErrorCode::kInvalidArgument, function, ": input name ", i, " is NULL");
      feeds[input_names[i]] = tensors[i];
    }
    ET_CHECK(output_names != nullptr || output_names_len == 0, ErrorCode::kInvalidArgument, function,
             ": output_names is NULL");
    std::vector<std::string> fetches;
    for (size_t i = 0; i < output_names_len; ++i) {
      ET_CHECK(output_names[i] != nullptr, ErrorCode::kInvalidArgument, function, ": output name ", i, " is NULL");
      fetches.emplace_back(output_names[i]);
    }
    ET_CHECK(!fetches.empty(), ErrorCode::kInvalidArgument, function, ": no output names given");
    StoreOutputs(session->session.Run(feeds, fetches), fetches, outputs, output_names_len, function);
  });
}

std::vector<std::string> SessionInputNames(const OrtSession& session) {
  std::vector<std::string> names;
  for (const edgetrain::ValueInfo* info : session.session.Inputs()) names.push_back(info->name);
  return names;
}

OrtStatus* SessionGetInputCount(const OrtSession* session, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(session)->session.Inputs().size());
}
OrtStatus* SessionGetOutputCount(const OrtSession* session, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(session)->session.OutputNames().size());
}
OrtStatus* SessionGetInputName(const OrtSession* session, size_t index, OrtAllocator* allocator,
                               char** value) noexcept {
  return ORT_GUARD(*REQUIRE(value) = CopyString(
                       allocator, NameAt(SessionInputNames(*REQUIRE(session)), index, function, "model", "inputs"),
                       function));
}
OrtStatus* SessionGetOutputName(const OrtSession* session, size_t index, OrtAllocator* allocator,
                                char** value) noexcept {
  return ORT_GUARD(*REQUIRE(value) = CopyString(
                       allocator, NameAt(REQUIRE(session)->session.OutputNames(), index, function, "model", "outputs"),
                       function));
}
OrtStatus* SessionGetInputTypeInfo(const OrtSession* session, size_t index, OrtTypeInfo** type_info) noexcept {
  return ORT_GUARD({
    const auto& inputs = REQUIRE(session)->session.Inputs();
    ET_CHECK(index < inputs.size(), ErrorCode::kInvalidArgument, function, ": index ", index,
             " is out of range (the model has ", inputs.size(), " inputs)");
    *REQUIRE(type_info) = new OrtTypeInfo(TypeInfoOf(*inputs[index]));
  });
}
OrtStatus* SessionGetOutputTypeInfo(const OrtSession* session, size_t index, OrtTypeInfo** type_info) noexcept {
  return ORT_GUARD({
    const auto& outputs = REQUIRE(session)->outputs;
    ET_CHECK(index < outputs.size(), ErrorCode::kInvalidArgument, function, ": index ", index,
             " is out of range (the model has ", outputs.size(), " outputs)");
    edgetrain::ValueInfo unknown;
    *REQUIRE(type_info) = new OrtTypeInfo(TypeInfoOf(outputs[index] != nullptr ? *outputs[index] : unknown));
  });
}
void ReleaseSession(OrtSession* session) noexcept { delete session; }

OrtStatus* CreateRunOptions(OrtRunOptions** out) noexcept { return ORT_GUARD(*REQUIRE(out) = new OrtRunOptions{}); }
void ReleaseRunOptions(OrtRunOptions* options) noexcept { delete options; }

// ---- memory ----

OrtStatus* CreateMemoryInfo(const char* name, OrtAllocatorType type, int id, OrtMemType mem_type,
                            OrtMemoryInfo** out) noexcept {
  return ORT_GUARD({
    std::string device = REQUIRE(name);
    ET_CHECK(device == "Cpu", ErrorCode::kNotImplemented, function, ": memory '", device,
             "' is not supported (edgetrain runs on the CPU: use \"Cpu\")");
    *REQUIRE(out) = new OrtMemoryInfo{device, type, id, mem_type};
  });
}
OrtStatus* CreateCpuMemoryInfo(OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out) noexcept {
  return CreateMemoryInfo("Cpu", type, 0, mem_type, out);
}
OrtStatus* MemoryInfoGetName(const OrtMemoryInfo* ptr, const char** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(ptr)->name.c_str());
}
void ReleaseMemoryInfo(OrtMemoryInfo* info) noexcept { delete info; }

OrtStatus* GetAllocatorWithDefaultOptions(OrtAllocator** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = &default_allocator);
}
OrtStatus* AllocatorAlloc(OrtAllocator* ort_allocator, size_t size, void** out) noexcept {
  return ORT_GUARD({
    void* p = REQUIRE(ort_allocator)->Alloc(ort_allocator, size);
    ET_CHECK(p != nullptr, ErrorCode::kResourceExhausted, function, ": cannot allocate ", size, " bytes");
    *REQUIRE(out) = p;
  });
}
OrtStatus* AllocatorFree(OrtAllocator* ort_allocator, void* p) noexcept {
  return ORT_GUARD(REQUIRE(ort_allocator)->Free(ort_allocator, p));
}

// ---- values ----

OrtStatus* CreateTensorWithDataAsOrtValue(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                          const int64_t* shape, size_t shape_len, ONNXTensorElementDataType type,
                                          OrtValue** out) noexcept {
  return ORT_GUARD({
    REQUIRE(info);
    REQUIRE(out);
    CheckShape(shape, shape_len, function);
    DataType dtype = ToDataType(type, function);
    edgetrain::Shape dims(shape, shape + shape_len);
    const size_t needed = static_cast<size_t>(edgetrain::NumElements(dims)) * edgetrain::DataTypeSize(dtype);
    ET_CHECK(p_data_len >= needed, ErrorCode::kInvalidArgument, function, ": a ", edgetrain::DataTypeName(dtype), " ",
             edgetrain::ShapeToString(dims), " tensor needs ", needed, " bytes, the buffer has ", p_data_len);
    ET_CHECK(p_data != nullptr || needed == 0, ErrorCode::kInvalidArgument, function, ": p_data is NULL");
    *out = new OrtValue{Tensor::Borrow(dtype, std::move(dims), p_data)};
  });
}
OrtStatus* CreateTensorAsOrtValue(OrtAllocator* allocator, const int64_t* shape, size_t shape_len,
                                  ONNXTensorElementDataType type, OrtValue** out) noexcept {
  return ORT_GUARD({
    REQUIRE(allocator);
    REQUIRE(out);
    CheckShape(shape, shape_len, function);
    *out = new OrtValue{Tensor::Zeros(ToDataType(type, function), edgetrain::Shape(shape, shape + shape_len))};
  });
}
OrtStatus* IsTensor(const OrtValue* value, int* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(value)->tensor.defined() ? 1 : 0);
}
OrtStatus* GetValueType(const OrtValue* value, ONNXType* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(value)->tensor.defined() ? ONNX_TYPE_TENSOR : ONNX_TYPE_UNKNOWN);
}
OrtStatus* GetTensorMutableData(OrtValue* value, void** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(value)->tensor.raw());
}
OrtStatus* GetTensorTypeAndShape(const OrtValue* value, OrtTensorTypeAndShapeInfo** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = new OrtTensorTypeAndShapeInfo(InfoOf(REQUIRE(value)->tensor)));
}
void ReleaseValue(OrtValue* value) noexcept { delete value; }

// ---- type and shape information ----

OrtStatus* CreateTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo** out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = new OrtTensorTypeAndShapeInfo{});
}
OrtStatus* SetTensorElementType(OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType type) noexcept {
  return ORT_GUARD(REQUIRE(info)->type = type);
}
OrtStatus* SetDimensions(OrtTensorTypeAndShapeInfo* info, const int64_t* dim_values, size_t dim_count) noexcept {
  return ORT_GUARD({
    REQUIRE(info);
    ET_CHECK(dim_values != nullptr || dim_count == 0, ErrorCode::kInvalidArgument, function, ": dim_values is NULL");
    info->shape.assign(dim_values, dim_values + dim_count);
    info->symbols.assign(dim_count, "");
  });
}
OrtStatus* GetTensorElementType(const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(info)->type);
}
OrtStatus* GetDimensionsCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(info)->shape.size());
}
OrtStatus* GetDimensions(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values,
                         size_t dim_values_length) noexcept {
  return ORT_GUARD({
    const size_t count = std::min(dim_values_length, REQUIRE(info)->shape.size());
    ET_CHECK(dim_values != nullptr || count == 0, ErrorCode::kInvalidArgument, function, ": dim_values is NULL");
    std::copy(info->shape.begin(), info->shape.begin() + static_cast<std::ptrdiff_t>(count), dim_values);
  });
}
OrtStatus* GetSymbolicDimensions(const OrtTensorTypeAndShapeInfo* info, const char* dim_params[],
                                 size_t dim_params_length) noexcept {
  return ORT_GUARD({
    const size_t count = std::min(dim_params_length, REQUIRE(info)->symbols.size());
    ET_CHECK(dim_params != nullptr || count == 0, ErrorCode::kInvalidArgument, function, ": dim_params is NULL");
    for (size_t i = 0; i < count; ++i) dim_params[i] = info->symbols[i].c_str();
  });
}
OrtStatus* GetTensorShapeElementCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) noexcept {
  return ORT_GUARD({
    int64_t count = 1;
    for (int64_t dim : REQUIRE(info)->shape) count *= dim;
    *REQUIRE(out) = static_cast<size_t>(count);
  });
}
void ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* info) noexcept { delete info; }
OrtStatus* CastTypeInfoToTensorInfo(const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out) noexcept {
  return ORT_GUARD({
    REQUIRE(out);
    *out = REQUIRE(type_info)->type == ONNX_TYPE_TENSOR ? &type_info->tensor : nullptr;
  });
}
OrtStatus* GetOnnxTypeFromTypeInfo(const OrtTypeInfo* type_info, ONNXType* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(type_info)->type);
}
void ReleaseTypeInfo(OrtTypeInfo* info) noexcept { delete info; }

// ---- training: checkpoints ----

OrtStatus* LoadCheckpoint(const ORTCHAR_T* checkpoint_path, OrtCheckpointState** checkpoint_state) noexcept {
  return ORT_GUARD({
    REQUIRE(checkpoint_state);
    *checkpoint_state = new OrtCheckpointState{edgetrain::CheckpointState::Load(REQUIRE(checkpoint_path))};
  });
}
OrtStatus* LoadCheckpointFromBuffer(const void* checkpoint_buffer, const size_t num_bytes,
                                    OrtCheckpointState** checkpoint_state) noexcept {
  return ORT_GUARD({
    REQUIRE(checkpoint_state);
    *checkpoint_state =
        new OrtCheckpointState{edgetrain::CheckpointState::LoadFromBuffer(REQUIRE(checkpoint_buffer), num_bytes)};
  });
}
OrtStatus* SaveCheckpoint(OrtCheckpointState* checkpoint_state, const ORTCHAR_T* checkpoint_path,
                          const bool include_optimizer_state) noexcept {
  return ORT_GUARD(edgetrain::CheckpointState::Save(REQUIRE(checkpoint_state)->state, REQUIRE(checkpoint_path),
                                                    include_optimizer_state));
}
void ReleaseCheckpointState(OrtCheckpointState* state) noexcept { delete state; }

OrtStatus* AddProperty(OrtCheckpointState* checkpoint_state, const char* property_name,
                       enum OrtPropertyType property_type, void* property_value) noexcept {
  return ORT_GUARD({
    std::string name = REQUIRE(property_name);
    REQUIRE(property_value);
    edgetrain::CheckpointState& state = REQUIRE(checkpoint_state)->state;
    switch (property_type) {
      case OrtIntProperty: state.AddProperty(name, *static_cast<const int64_t*>(property_value)); break;
      case OrtFloatProperty: state.AddProperty(name, *static_cast<const float*>(property_value)); break;
      case OrtStringProperty: state.AddProperty(name, std::string(static_cast<const char*>(property_value))); break;
      default:
        edgetrain::Fail(ErrorCode::kInvalidArgument, function, ": property '", name, "' has type ",
                        static_cast<int>(property_type), " (OrtIntProperty, OrtFloatProperty or OrtStringProperty)");
    }
  });
}
OrtStatus* GetProperty(const OrtCheckpointState* checkpoint_state, const char* property_name,
                       OrtAllocator* allocator, enum OrtPropertyType* property_type, void** property_value) noexcept {
  return ORT_GUARD({
    REQUIRE(allocator);
    REQUIRE(property_type);
    REQUIRE(property_value);
    edgetrain::PropertyValue value = REQUIRE(checkpoint_state)->state.GetProperty(REQUIRE(property_name));
    if (const auto* i = std::get_if<int64_t>(&value)) {
      void* out = allocator->Alloc(allocator, sizeof(int64_t));
      ET_CHECK(out != nullptr, ErrorCode::kResourceExhausted, function, ": the allocator returned NULL");
      std::memcpy(out, i, sizeof(int64_t));
      *property_type = OrtIntProperty;
      *property_value = out;
    } else if (const auto* f = std::get_if<float>(&value)) {
      void* out = allocator->Alloc(allocator, sizeof(float));
      ET_CHECK(out != nullptr, ErrorCode::kResourceExhausted, function, ": the allocator returned NULL");
      std::memcpy(out, f, sizeof(float));
      *property_type = OrtFloatProperty;
      *property_value = out;
    } else {
      *property_value = CopyString(allocator, std::get<std::string>(value), function);
      *property_type = OrtStringProperty;
    }
  });
}
OrtStatus* GetParameterTypeAndShape(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                    OrtTensorTypeAndShapeInfo** parameter_type_and_shape) noexcept {
  return ORT_GUARD({
    REQUIRE(parameter_type_and_shape);
    Tensor parameter = REQUIRE(checkpoint_state)->state.GetParameter(REQUIRE(parameter_name));
    *parameter_type_and_shape = new OrtTensorTypeAndShapeInfo(InfoOf(parameter));
  });
}
OrtStatus* UpdateParameter(OrtCheckpointState* checkpoint_state, const char* parameter_name,
                           OrtValue* parameter) noexcept {
  return ORT_GUARD(
      REQUIRE(checkpoint_state)->state.UpdateParameter(REQUIRE(parameter_name), REQUIRE(parameter)->tensor));
}
OrtStatus* GetParameter(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                        OrtAllocator* allocator, OrtValue** parameter) noexcept {
  return ORT_GUARD({
    REQUIRE(allocator);
    REQUIRE(parameter);
    *parameter = new OrtValue{REQUIRE(checkpoint_state)->state.GetParameter(REQUIRE(parameter_name))};
  });
}

// ---- training: sessions ----

OrtStatus* CreateTrainingSession(const OrtEnv* env, const OrtSessionOptions* options,
                                 OrtCheckpointState* checkpoint_state, const ORTCHAR_T* train_model_path,
                                 const ORTCHAR_T* eval_model_path, const ORTCHAR_T* optimizer_model_path,
                                 OrtTrainingSession** out) noexcept {
  return ORT_GUARD({
    REQUIRE(env);
    REQUIRE(out);
    std::string training_path = REQUIRE(train_model_path);
    edgetrain::ModelSource eval = eval_model_path != nullptr ? edgetrain::ModelSource(eval_model_path)
                                                             : edgetrain::ModelSource();
    edgetrain::ModelSource optimizer = optimizer_model_path != nullptr
                                           ? edgetrain::ModelSource(optimizer_model_path)
                                           : edgetrain::ModelSource();
    *out = new OrtTrainingSession{edgetrain::TrainingSession(REQUIRE(checkpoint_state)->state, training_path, eval,
                                                             optimizer, TrainingOptions(options)),
                                  seed_generation.load()};
  });
}
OrtStatus* CreateTrainingSessionFromBuffer(const OrtEnv* env, const OrtSessionOptions* options,
                                           OrtCheckpointState* checkpoint_state, const void* train_model_data,
                                           size_t train_data_length, const void* eval_model_data,
                                           size_t eval_data_length, const void* optim_model_data,
                                           size_t optim_data_length, OrtTrainingSession** out) noexcept {
  return ORT_GUARD({
    REQUIRE(env);
    REQUIRE(out);
    *out = new OrtTrainingSession{
        edgetrain::TrainingSession(
            REQUIRE(checkpoint_state)->state,
            edgetrain::ModelSource::FromBuffer(REQUIRE(train_model_data), train_data_length, "<training model>"),
            OptionalBuffer(eval_model_data, eval_data_length, "<eval model>"),
            OptionalBuffer(optim_model_data, optim_data_length, "<optimizer model>"), TrainingOptions(options)),
        seed_generation.load()};
  });
}
void ReleaseTrainingSession(OrtTrainingSession* session) noexcept { delete session; }

OrtStatus* TrainingSessionGetTrainingModelOutputCount(const OrtTrainingSession* sess, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(sess)->session.TrainingOutputNames().size());
}
OrtStatus* TrainingSessionGetEvalModelOutputCount(const OrtTrainingSession* sess, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(sess)->session.EvalOutputNames().size());
}
OrtStatus* TrainingSessionGetTrainingModelInputCount(const OrtTrainingSession* sess, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(sess)->session.TrainingInputNames().size());
}
OrtStatus* TrainingSessionGetEvalModelInputCount(const OrtTrainingSession* sess, size_t* out) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(sess)->session.EvalInputNames().size());
}
OrtStatus* TrainingSessionGetTrainingModelOutputName(const OrtTrainingSession* sess, size_t index,
                                                     OrtAllocator* allocator, char** output) noexcept {
  return ORT_GUARD({
    const std::vector<std::string> names = REQUIRE(sess)->session.TrainingOutputNames();
    *REQUIRE(output) = CopyString(allocator, NameAt(names, index, function, "training model", "outputs"), function);
  });
}
OrtStatus* TrainingSessionGetEvalModelOutputName(const OrtTrainingSession* sess, size_t index,
                                                 OrtAllocator* allocator, char** output) noexcept {
  return ORT_GUARD({
    const std::vector<std::string> names = REQUIRE(sess)->session.EvalOutputNames();
    *REQUIRE(output) = CopyString(allocator, NameAt(names, index, function, "eval model", "outputs"), function);
  });
}
OrtStatus* TrainingSessionGetTrainingModelInputName(const OrtTrainingSession* sess, size_t index,
                                                    OrtAllocator* allocator, char** output) noexcept {
  return ORT_GUARD({
    const std::vector<std::string> names = REQUIRE(sess)->session.TrainingInputNames();
    *REQUIRE(output) = CopyString(allocator, NameAt(names, index, function, "training model", "inputs"), function);
  });
}
OrtStatus* TrainingSessionGetEvalModelInputName(const OrtTrainingSession* sess, size_t index,
                                                OrtAllocator* allocator, char** output) noexcept {
  return ORT_GUARD({
    const std::vector<std::string> names = REQUIRE(sess)->session.EvalInputNames();
    *REQUIRE(output) = CopyString(allocator, NameAt(names, index, function, "eval model", "inputs"), function);
  });
}

OrtStatus* LazyResetGrad(OrtTrainingSession* session) noexcept {
  return ORT_GUARD(REQUIRE(session)->session.LazyResetGrad());
}
OrtStatus* TrainStep(OrtTrainingSession* sess, const OrtRunOptions*, size_t inputs_len,
                     const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs) noexcept {
  return ORT_GUARD({
    ApplyGlobalSeed(*REQUIRE(sess));
    std::vector<Tensor> results = sess->session.TrainStep(Inputs(inputs, inputs_len, function));
    StoreOutputs(std::move(results), sess->session.TrainingOutputNames(), outputs, outputs_len, function);
  });
}
OrtStatus* EvalStep(const OrtTrainingSession* sess, const OrtRunOptions*, size_t inputs_len,
                    const OrtValue* const* inputs, size_t outputs_len, OrtValue** outputs) noexcept {
  return ORT_GUARD({
    // ORT's signature takes a const session; evaluating still uses the session's buffers and seed.
    auto* session = const_cast<OrtTrainingSession*>(REQUIRE(sess));
    ApplyGlobalSeed(*session);
    std::vector<Tensor> results = session->session.EvalStep(Inputs(inputs, inputs_len, function));
    StoreOutputs(std::move(results), session->session.EvalOutputNames(), outputs, outputs_len, function);
  });
}
OrtStatus* SetLearningRate(OrtTrainingSession* sess, float learning_rate) noexcept {
  return ORT_GUARD(REQUIRE(sess)->session.SetLearningRate(learning_rate));
}
OrtStatus* GetLearningRate(OrtTrainingSession* sess, float* learning_rate) noexcept {
  return ORT_GUARD(*REQUIRE(learning_rate) = REQUIRE(sess)->session.GetLearningRate());
}
OrtStatus* OptimizerStep(OrtTrainingSession* sess, const OrtRunOptions*) noexcept {
  return ORT_GUARD(REQUIRE(sess)->session.OptimizerStep());
}
OrtStatus* RegisterLinearLRScheduler(OrtTrainingSession* sess, const int64_t warmup_step_count,
                                     const int64_t total_step_count, const float initial_lr) noexcept {
  return ORT_GUARD(
      REQUIRE(sess)->session.RegisterLinearLRScheduler(warmup_step_count, total_step_count, initial_lr));
}
OrtStatus* SchedulerStep(OrtTrainingSession* sess) noexcept {
  return ORT_GUARD(REQUIRE(sess)->session.SchedulerStep());
}

OrtStatus* GetParametersSize(OrtTrainingSession* sess, size_t* out, bool trainable_only) noexcept {
  return ORT_GUARD(*REQUIRE(out) = REQUIRE(sess)->session.GetParametersSize(trainable_only));
}
OrtStatus* CopyParametersToBuffer(OrtTrainingSession* sess, OrtValue* parameters_buffer,
                                  bool trainable_only) noexcept {
  return ORT_GUARD(REQUIRE(sess)->session.CopyParametersToBuffer(REQUIRE(parameters_buffer)->tensor, trainable_only));
}
OrtStatus* CopyBufferToParameters(OrtTrainingSession* sess, OrtValue* parameters_buffer,
                                  bool trainable_only) noexcept {
  return ORT_GUARD(REQUIRE(sess)->session.CopyBufferToParameters(REQUIRE(parameters_buffer)->tensor, trainable_only));
}

OrtStatus* ExportModelForInferencing(OrtTrainingSession* sess, const ORTCHAR_T* inference_model_path,
                                     size_t graph_outputs_len, const char* const* graph_output_names) noexcept {
  return ORT_GUARD({
    REQUIRE(sess);
    std::string path = REQUIRE(inference_model_path);
    ET_CHECK(graph_output_names != nullptr || graph_outputs_len == 0, ErrorCode::kInvalidArgument, function,
             ": graph_output_names is NULL");
    std::vector<std::string> names;
    for (size_t i = 0; i < graph_outputs_len; ++i) {
      ET_CHECK(graph_output_names[i] != nullptr, ErrorCode::kInvalidArgument, function, ": graph output name ", i,
               " is NULL");
      names.emplace_back(graph_output_names[i]);
    }
    sess->session.ExportModelForInference(path, names);
  });
}
OrtStatus* SetSeed(const int64_t seed) noexcept {
  global_seed.store(seed);
  seed_generation.fetch_add(1);
  return nullptr;
}

// ---- the tables ----

const OrtTrainingApi training_api = {
    LoadCheckpoint,
    SaveCheckpoint,
    CreateTrainingSession,
    CreateTrainingSessionFromBuffer,
    TrainingSessionGetTrainingModelOutputCount,
    TrainingSessionGetEvalModelOutputCount,
    TrainingSessionGetTrainingModelOutputName,
    TrainingSessionGetEvalModelOutputName,
    LazyResetGrad,
    TrainStep,
    EvalStep,
    SetLearningRate,
    GetLearningRate,
    OptimizerStep,
    RegisterLinearLRScheduler,
    SchedulerStep,
    GetParametersSize,
    CopyParametersToBuffer,
    CopyBufferToParameters,
    ReleaseTrainingSession,
    ReleaseCheckpointState,
    ExportModelForInferencing,
    SetSeed,
    TrainingSessionGetTrainingModelInputCount,
    TrainingSessionGetEvalModelInputCount,
    TrainingSessionGetTrainingModelInputName,
    TrainingSessionGetEvalModelInputName,
    AddProperty,
    GetProperty,
    LoadCheckpointFromBuffer,
    GetParameterTypeAndShape,
    UpdateParameter,
    GetParameter,
};

const OrtTrainingApi* GetTrainingApi(uint32_t version) noexcept {
  return version >= 1 && version <= ORT_API_VERSION ? &training_api : nullptr;
}

const OrtApi api = {
    CreateStatus,
    GetErrorCode,
    GetErrorMessage,
    ReleaseStatus,
    CreateEnv,
    ReleaseEnv,
    GetAvailableProviders,
    ReleaseAvailableProviders,
    CreateSessionOptions,
    CloneSessionOptions,
    SetIntraOpNumThreads,
    SetInterOpNumThreads,
    SetSessionGraphOptimizationLevel,
    SetSessionExecutionMode,
    SetSessionLogId,
    SetSessionLogSeverityLevel,
    EnableCpuMemArena,
    DisableCpuMemArena,
    ReleaseSessionOptions,
    CreateSession,
    CreateSessionFromArray,
    Run,
    SessionGetInputCount,
    SessionGetOutputCount,
    SessionGetInputName,
    SessionGetOutputName,
    SessionGetInputTypeInfo,
    SessionGetOutputTypeInfo,
    ReleaseSession,
    CreateRunOptions,
    ReleaseRunOptions,
    CreateCpuMemoryInfo,
    CreateMemoryInfo,
    MemoryInfoGetName,
    ReleaseMemoryInfo,
    GetAllocatorWithDefaultOptions,
    AllocatorAlloc,
    AllocatorFree,
    CreateTensorWithDataAsOrtValue,
    CreateTensorAsOrtValue,
    IsTensor,
    GetValueType,
    GetTensorMutableData,
    GetTensorTypeAndShape,
    ReleaseValue,
    CreateTensorTypeAndShapeInfo,
    SetTensorElementType,
    SetDimensions,
    GetTensorElementType,
    GetDimensionsCount,
    GetDimensions,
    GetSymbolicDimensions,
    GetTensorShapeElementCount,
    ReleaseTensorTypeAndShapeInfo,
    CastTypeInfoToTensorInfo,
    GetOnnxTypeFromTypeInfo,
    ReleaseTypeInfo,
    GetTrainingApi,
};

const OrtApi* GetApi(uint32_t version) noexcept { return version >= 1 && version <= ORT_API_VERSION ? &api : nullptr; }
const char* GetVersionString() noexcept { return "1.19.2-edgetrain"; }

const OrtApiBase api_base = {GetApi, GetVersionString};

}  // namespace

extern "C" const OrtApiBase* OrtGetApiBase(void) noexcept { return &api_base; }
