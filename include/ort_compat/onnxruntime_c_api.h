/* edgetrain's source-compatible stand-in for ONNX Runtime's C API header (onnxruntime_c_api.h).
 *
 * Written for edgetrain from ONNX Runtime's public API documentation: the names, types and signatures an
 * application uses are ORT's, so an app written against ORT compiles unchanged with
 * `-I <edgetrain>/include/ort_compat` and links `edgetrain_ort_compat` (static) or `-lonnxruntime` (edgetrain's
 * libonnxruntime.so). It covers what an inference or
 * on-device training app calls (environment, session options, CPU tensors, sessions, allocator, errors).
 * The function table is not laid out in ORT's order: binaries built against ORT's own header must be
 * rebuilt against this one. Element types and enum values are ORT's (ONNX's numbering).
 */
#ifndef EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_C_API_H_
#define EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The ONNX Runtime release whose API this header follows (1.19). */
#define ORT_API_VERSION 19

#ifdef __cplusplus
extern "C" {
#define NO_EXCEPTION noexcept
#else
#define NO_EXCEPTION
#endif

#define ORT_API_CALL
#if defined(__GNUC__)
#define ORT_EXPORT __attribute__((visibility("default")))
#else
#define ORT_EXPORT
#endif
#define ORT_MUST_USE_RESULT
#define ORTCHAR_T char
#define ORT_TSTR(X) X

#define ORT_RUNTIME_CLASS(X) \
  struct Ort##X;             \
  typedef struct Ort##X Ort##X

ORT_RUNTIME_CLASS(Env);
ORT_RUNTIME_CLASS(Status);
ORT_RUNTIME_CLASS(MemoryInfo);
ORT_RUNTIME_CLASS(Session);
ORT_RUNTIME_CLASS(Value);
ORT_RUNTIME_CLASS(RunOptions);
ORT_RUNTIME_CLASS(TypeInfo);
ORT_RUNTIME_CLASS(TensorTypeAndShapeInfo);
ORT_RUNTIME_CLASS(SessionOptions);

typedef OrtStatus* OrtStatusPtr;

typedef enum ONNXTensorElementDataType {
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15,
  ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
} ONNXTensorElementDataType;

typedef enum ONNXType {
  ONNX_TYPE_UNKNOWN = 0,
  ONNX_TYPE_TENSOR = 1,
  ONNX_TYPE_SEQUENCE = 2,
  ONNX_TYPE_MAP = 3,
  ONNX_TYPE_OPAQUE = 4,
  ONNX_TYPE_SPARSETENSOR = 5,
  ONNX_TYPE_OPTIONAL = 6
} ONNXType;

typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE = 0,
  ORT_LOGGING_LEVEL_INFO = 1,
  ORT_LOGGING_LEVEL_WARNING = 2,
  ORT_LOGGING_LEVEL_ERROR = 3,
  ORT_LOGGING_LEVEL_FATAL = 4
} OrtLoggingLevel;

typedef enum OrtErrorCode {
  ORT_OK = 0,
  ORT_FAIL = 1,
  ORT_INVALID_ARGUMENT = 2,
  ORT_NO_SUCHFILE = 3,
  ORT_NO_MODEL = 4,
  ORT_ENGINE_ERROR = 5,
  ORT_RUNTIME_EXCEPTION = 6,
  ORT_INVALID_PROTOBUF = 7,
  ORT_MODEL_LOADED = 8,
  ORT_NOT_IMPLEMENTED = 9,
  ORT_INVALID_GRAPH = 10,
  ORT_EP_FAIL = 11
} OrtErrorCode;

typedef enum GraphOptimizationLevel {
  ORT_DISABLE_ALL = 0,
  ORT_ENABLE_BASIC = 1,
  ORT_ENABLE_EXTENDED = 2,
  ORT_ENABLE_ALL = 99
} GraphOptimizationLevel;

typedef enum ExecutionMode { ORT_SEQUENTIAL = 0, ORT_PARALLEL = 1 } ExecutionMode;

typedef enum OrtAllocatorType {
  OrtInvalidAllocator = -1,
  OrtDeviceAllocator = 0,
  OrtArenaAllocator = 1
} OrtAllocatorType;

typedef enum OrtMemType {
  OrtMemTypeCPUInput = -2,
  OrtMemTypeCPUOutput = -1,
  OrtMemTypeCPU = OrtMemTypeCPUOutput,
  OrtMemTypeDefault = 0
} OrtMemType;

/* A memory allocator: the default one hands out malloc'd memory that its Free releases. */
typedef struct OrtAllocator {
  uint32_t version;
  void*(ORT_API_CALL* Alloc)(struct OrtAllocator* this_, size_t size);
  void(ORT_API_CALL* Free)(struct OrtAllocator* this_, void* p);
  const struct OrtMemoryInfo*(ORT_API_CALL* Info)(const struct OrtAllocator* this_);
  void*(ORT_API_CALL* Reserve)(struct OrtAllocator* this_, size_t size);
} OrtAllocator;

struct OrtTrainingApi;
typedef struct OrtTrainingApi OrtTrainingApi;

/* Every function returning OrtStatus* returns NULL on success, else an error the caller releases with
 * ReleaseStatus. Out-parameters are written only on success. */
struct OrtApi {
  /* ---- errors ---- */
  OrtStatus*(ORT_API_CALL* CreateStatus)(OrtErrorCode code, const char* msg)NO_EXCEPTION;
  OrtErrorCode(ORT_API_CALL* GetErrorCode)(const OrtStatus* status) NO_EXCEPTION;
  const char*(ORT_API_CALL* GetErrorMessage)(const OrtStatus* status)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseStatus)(OrtStatus* input) NO_EXCEPTION;

  /* ---- environment (logging is accepted and ignored) ---- */
  OrtStatus*(ORT_API_CALL* CreateEnv)(OrtLoggingLevel log_severity_level, const char* logid, OrtEnv** out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseEnv)(OrtEnv* input) NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetAvailableProviders)(char*** out_ptr, int* provider_length)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* ReleaseAvailableProviders)(char** ptr, int providers_length)NO_EXCEPTION;

  /* ---- session options ---- */
  OrtStatus*(ORT_API_CALL* CreateSessionOptions)(OrtSessionOptions** options)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CloneSessionOptions)(const OrtSessionOptions* in_options,
                                                OrtSessionOptions** out_options)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetIntraOpNumThreads)(OrtSessionOptions* options, int intra_op_num_threads)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetInterOpNumThreads)(OrtSessionOptions* options, int inter_op_num_threads)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetSessionGraphOptimizationLevel)(
      OrtSessionOptions* options, GraphOptimizationLevel graph_optimization_level)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetSessionExecutionMode)(OrtSessionOptions* options,
                                                    ExecutionMode execution_mode)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetSessionLogId)(OrtSessionOptions* options, const char* logid)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetSessionLogSeverityLevel)(OrtSessionOptions* options,
                                                       int session_log_severity_level)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* EnableCpuMemArena)(OrtSessionOptions* options)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* DisableCpuMemArena)(OrtSessionOptions* options)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseSessionOptions)(OrtSessionOptions* input) NO_EXCEPTION;

  /* ---- inference sessions (.onnx and .ort models) ---- */
  OrtStatus*(ORT_API_CALL* CreateSession)(const OrtEnv* env, const ORTCHAR_T* model_path,
                                          const OrtSessionOptions* options, OrtSession** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CreateSessionFromArray)(const OrtEnv* env, const void* model_data, size_t model_data_length,
                                                   const OrtSessionOptions* options, OrtSession** out)NO_EXCEPTION;
  /* Inputs by name; outputs[i] for output_names[i]: NULL entries receive new values, others are filled. */
  OrtStatus*(ORT_API_CALL* Run)(OrtSession* session, const OrtRunOptions* run_options, const char* const* input_names,
                                const OrtValue* const* inputs, size_t input_len, const char* const* output_names,
                                size_t output_names_len, OrtValue** outputs)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SessionGetInputCount)(const OrtSession* session, size_t* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SessionGetOutputCount)(const OrtSession* session, size_t* out)NO_EXCEPTION;
  /* The name is allocated with `allocator`; free it with allocator->Free (or AllocatorFree). */
  OrtStatus*(ORT_API_CALL* SessionGetInputName)(const OrtSession* session, size_t index, OrtAllocator* allocator,
                                                char** value)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SessionGetOutputName)(const OrtSession* session, size_t index, OrtAllocator* allocator,
                                                 char** value)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SessionGetInputTypeInfo)(const OrtSession* session, size_t index,
                                                    OrtTypeInfo** type_info)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SessionGetOutputTypeInfo)(const OrtSession* session, size_t index,
                                                     OrtTypeInfo** type_info)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseSession)(OrtSession* input) NO_EXCEPTION;

  OrtStatus*(ORT_API_CALL* CreateRunOptions)(OrtRunOptions** out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseRunOptions)(OrtRunOptions* input) NO_EXCEPTION;

  /* ---- memory ---- */
  OrtStatus*(ORT_API_CALL* CreateCpuMemoryInfo)(OrtAllocatorType type, OrtMemType mem_type,
                                                OrtMemoryInfo** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CreateMemoryInfo)(const char* name, OrtAllocatorType type, int id, OrtMemType mem_type,
                                             OrtMemoryInfo** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* MemoryInfoGetName)(const OrtMemoryInfo* ptr, const char** out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseMemoryInfo)(OrtMemoryInfo* input) NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetAllocatorWithDefaultOptions)(OrtAllocator** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* AllocatorAlloc)(OrtAllocator* ort_allocator, size_t size, void** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* AllocatorFree)(OrtAllocator* ort_allocator, void* p)NO_EXCEPTION;

  /* ---- values (CPU tensors) ---- */
  /* A tensor over the caller's memory (p_data_len bytes), which must outlive the value. */
  OrtStatus*(ORT_API_CALL* CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                                           const int64_t* shape, size_t shape_len,
                                                           ONNXTensorElementDataType type, OrtValue** out)NO_EXCEPTION;
  /* A tensor owning new, zero-filled memory. */
  OrtStatus*(ORT_API_CALL* CreateTensorAsOrtValue)(OrtAllocator* allocator, const int64_t* shape, size_t shape_len,
                                                   ONNXTensorElementDataType type, OrtValue** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* IsTensor)(const OrtValue* value, int* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetValueType)(const OrtValue* value, ONNXType* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetTensorMutableData)(OrtValue* value, void** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseValue)(OrtValue* input) NO_EXCEPTION;

  /* ---- type and shape information ---- */
  OrtStatus*(ORT_API_CALL* CreateTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetTensorElementType)(OrtTensorTypeAndShapeInfo* info,
                                                 ONNXTensorElementDataType type)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetDimensions)(OrtTensorTypeAndShapeInfo* info, const int64_t* dim_values,
                                          size_t dim_count)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info,
                                                 ONNXTensorElementDataType* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out)NO_EXCEPTION;
  /* Copies min(rank, dim_values_length) dims; an unknown dim is -1. */
  OrtStatus*(ORT_API_CALL* GetDimensions)(const OrtTensorTypeAndShapeInfo* info, int64_t* dim_values,
                                          size_t dim_values_length)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetSymbolicDimensions)(const OrtTensorTypeAndShapeInfo* info, const char* dim_params[],
                                                  size_t dim_params_length)NO_EXCEPTION;
  /* The element count; an unknown dim counts as -1 (ORT's convention), so the result is then negative. */
  OrtStatus*(ORT_API_CALL* GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* input) NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CastTypeInfoToTensorInfo)(const OrtTypeInfo* type_info,
                                                     const OrtTensorTypeAndShapeInfo** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetOnnxTypeFromTypeInfo)(const OrtTypeInfo* type_info, ONNXType* out)NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseTypeInfo)(OrtTypeInfo* input) NO_EXCEPTION;

  /* ---- training (onnxruntime_training_c_api.h); NULL for an unsupported version ---- */
  const OrtTrainingApi*(ORT_API_CALL* GetTrainingApi)(uint32_t version)NO_EXCEPTION;
};
typedef struct OrtApi OrtApi;

struct OrtApiBase {
  /* NULL for a version above ORT_API_VERSION. */
  const OrtApi*(ORT_API_CALL* GetApi)(uint32_t version)NO_EXCEPTION;
  const char*(ORT_API_CALL* GetVersionString)(void)NO_EXCEPTION;
};
typedef struct OrtApiBase OrtApiBase;

ORT_EXPORT const OrtApiBase* ORT_API_CALL OrtGetApiBase(void) NO_EXCEPTION;

#ifdef __cplusplus
}
#endif

#endif /* EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_C_API_H_ */
