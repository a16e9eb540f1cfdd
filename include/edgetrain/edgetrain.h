/* edgetrain C ABI: on-device training of ONNX models from C and other languages.
 *
 * Conventions
 *  - Objects are opaque handles created by et_*_create / et_*_load and released by the matching
 *    et_*_free, which accepts NULL.
 *  - A function that can fail returns et_error*: NULL on success, otherwise an error object the caller
 *    releases with et_error_free. Its results go to out-parameters, written only on success.
 *  - Accessors of error objects and value lists cannot fail: given NULL or an index out of range they
 *    return 0, NULL or "" (described with each).
 *  - A NULL handle, name or required out-parameter is an ET_ERROR_INVALID_ARGUMENT error.
 *  - Strings returned by a handle stay valid until that handle is freed.
 *  - A handle may be used by one thread at a time.
 *  - No C++ exception crosses this boundary.
 */
#ifndef EDGETRAIN_EDGETRAIN_H_
#define EDGETRAIN_EDGETRAIN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EDGETRAIN_VERSION_MAJOR 0
#define EDGETRAIN_VERSION_MINOR 1
#define EDGETRAIN_VERSION_PATCH 0
#define EDGETRAIN_VERSION "0.1.0"

/* The version of the library linked in, "MAJOR.MINOR.PATCH" (compare with EDGETRAIN_VERSION). */
const char* et_version(void);

/* ---- errors ---- */

/* Mirrors edgetrain::ErrorCode; ET_OK is the code of "no error" (a NULL et_error*). */
typedef enum et_error_code {
  ET_OK = 0,
  ET_ERROR_INVALID_ARGUMENT = 1,   /* bad input, option or handle */
  ET_ERROR_INVALID_MODEL = 2,      /* malformed, truncated or inconsistent model or checkpoint */
  ET_ERROR_NOT_IMPLEMENTED = 3,    /* unsupported operator, dtype or attribute combination */
  ET_ERROR_OUT_OF_RANGE = 4,       /* index out of bounds */
  ET_ERROR_IO = 5,                 /* file missing, unreadable, unwritable */
  ET_ERROR_RESOURCE_EXHAUSTED = 6, /* out of memory, tensor above the allocation limit */
  ET_ERROR_INTERNAL = 7            /* a bug in edgetrain */
} et_error_code;

typedef struct et_error et_error;

et_error_code et_error_get_code(const et_error* error);  /* ET_OK for NULL */
const char* et_error_get_message(const et_error* error); /* "" for NULL; valid until et_error_free */
void et_error_free(et_error* error);

/* ---- tensors ---- */

/* Element types, numbered as ONNX TensorProto.DataType. */
typedef enum et_dtype {
  ET_DTYPE_UNDEFINED = 0,
  ET_DTYPE_FLOAT32 = 1,
  ET_DTYPE_UINT8 = 2,
  ET_DTYPE_INT8 = 3,
  ET_DTYPE_UINT16 = 4,
  ET_DTYPE_INT16 = 5,
  ET_DTYPE_INT32 = 6,
  ET_DTYPE_INT64 = 7,
  ET_DTYPE_STRING = 8, /* listed for the numbering; tensors of strings do not cross this ABI */
  ET_DTYPE_BOOL = 9,
  ET_DTYPE_FLOAT16 = 10,
  ET_DTYPE_FLOAT64 = 11,
  ET_DTYPE_UINT32 = 12,
  ET_DTYPE_UINT64 = 13,
  ET_DTYPE_BFLOAT16 = 16
} et_dtype;

/* A tensor the caller owns, passed in: row-major data of prod(shape) elements (a scalar has rank 0).
 * edgetrain reads it during the call only and never writes to it. */
typedef struct et_tensor_view {
  et_dtype dtype;
  const int64_t* shape;
  size_t rank;
  const void* data;
} et_tensor_view;

/* An owned list of tensors returned by edgetrain, each optionally named. */
typedef struct et_values et_values;

size_t et_values_count(const et_values* values);
et_dtype et_values_dtype(const et_values* values, size_t index); /* ET_DTYPE_UNDEFINED for a missing tensor */
size_t et_values_rank(const et_values* values, size_t index);
const int64_t* et_values_shape(const et_values* values, size_t index); /* rank entries */
int64_t et_values_numel(const et_values* values, size_t index);
size_t et_values_nbytes(const et_values* values, size_t index);
const void* et_values_data(const et_values* values, size_t index); /* NULL for a missing tensor */
const char* et_values_name(const et_values* values, size_t index); /* "" when unnamed */
void et_values_free(et_values* values);

/* ---- checkpoint state: parameters, optimizer state and properties ---- */

typedef struct et_checkpoint_state et_checkpoint_state;

typedef enum et_property_type {
  ET_PROPERTY_INT = 0, /* int64_t */
  ET_PROPERTY_FLOAT = 1,
  ET_PROPERTY_STRING = 2
} et_property_type;

et_error* et_checkpoint_load(const char* path, et_checkpoint_state** out_state);
et_error* et_checkpoint_load_from_buffer(const void* data, size_t size, et_checkpoint_state** out_state);
/* Atomic write (temporary file then rename); with include_optimizer_state, the optimizer's moments and step. */
et_error* et_checkpoint_save(const et_checkpoint_state* state, const char* path, bool include_optimizer_state);
void et_checkpoint_free(et_checkpoint_state* state);

/* Adding a property replaces one of the same name. Getting one of another type is an error. */
et_error* et_checkpoint_add_int_property(et_checkpoint_state* state, const char* name, int64_t value);
et_error* et_checkpoint_add_float_property(et_checkpoint_state* state, const char* name, float value);
et_error* et_checkpoint_add_string_property(et_checkpoint_state* state, const char* name, const char* value);
et_error* et_checkpoint_get_property_type(const et_checkpoint_state* state, const char* name,
                                          et_property_type* out_type);
et_error* et_checkpoint_get_int_property(const et_checkpoint_state* state, const char* name, int64_t* out_value);
et_error* et_checkpoint_get_float_property(const et_checkpoint_state* state, const char* name, float* out_value);
et_error* et_checkpoint_get_string_property(const et_checkpoint_state* state, const char* name, const char** out_value);

/* Parameter names: trainable ones first, then frozen ones, each sorted. */
et_error* et_checkpoint_parameter_count(const et_checkpoint_state* state, size_t* out_count);
et_error* et_checkpoint_parameter_name(const et_checkpoint_state* state, size_t index, const char** out_name);
/* The parameter's element type and rank, and its dims in out_shape (room for shape_capacity; a smaller
 * capacity than the rank is an error). With out_shape NULL only the type and rank are returned. */
et_error* et_checkpoint_parameter_info(const et_checkpoint_state* state, const char* name, et_dtype* out_dtype,
                                       int64_t* out_shape, size_t shape_capacity, size_t* out_rank);
/* Copies the parameter's data into `buffer`, whose size must equal the parameter's byte size. */
et_error* et_checkpoint_get_parameter(const et_checkpoint_state* state, const char* name, void* buffer,
                                      size_t buffer_size);
/* Overwrites the parameter in place; `value` must have its element type and shape. */
et_error* et_checkpoint_update_parameter(et_checkpoint_state* state, const char* name, const et_tensor_view* value);

/* ---- training session ---- */

typedef struct et_training_session et_training_session;

typedef struct et_session_options {
  /* sizeof(et_session_options) as the caller was compiled, set by et_session_options_init: a library newer
   * than the caller gives the fields the caller lacks their defaults; 0 or a size larger than the library's
   * own is ET_ERROR_INVALID_ARGUMENT at creation. */
  size_t struct_size;
  int num_threads; /* intra-op threads */
  uint64_t seed;   /* random operators such as Dropout */
  /* Bytes the session may hold (parameters, gradients, optimizer state, planned intermediate tensors);
   * 0: no limit. A session that needs more fails with ET_ERROR_RESOURCE_EXHAUSTED at creation or before
   * the allocation that would cross it; a negative value is ET_ERROR_INVALID_ARGUMENT at creation. */
  int64_t memory_limit_bytes;
  /* Bytes of a training step's intermediate tensors (parameters, gradients and optimizer state not
   * included); 0: no budget. Where the plan needs more, forward values are recomputed in the backward
   * pass (gradient checkpointing): the same results, more compute. A budget no plan meets fails the
   * first train step at new input shapes with ET_ERROR_RESOURCE_EXHAUSTED naming the smallest that fits;
   * a negative value is ET_ERROR_INVALID_ARGUMENT at creation. Training sessions only. */
  int64_t memory_budget_bytes;
  /* Bytes of a per-sample cache of the frozen prefix's outputs (the nodes before every trainable parameter,
   * run as inference); 0: no cache. Samples are told apart by a hash of their bytes in the inputs the prefix
   * reads; once full, new samples are not cached. A prefix that mixes the samples of a batch (BatchNorm in
   * training mode, Dropout) is ET_ERROR_INVALID_ARGUMENT at creation naming the node, as is a negative value. */
  int64_t frozen_prefix_cache_bytes;
} et_session_options;

/* Fills `options` with the defaults (1 thread, the library's default seed, no memory limit, no budget) and
 * sets struct_size. Call it before setting any field. */
void et_session_options_init(et_session_options* options);
/* Sets options->num_threads; `threads` must be positive (ET_ERROR_INVALID_ARGUMENT otherwise). */
et_error* et_session_options_set_num_threads(et_session_options* options, int threads);
/* Sets options->seed. */
et_error* et_session_options_set_seed(et_session_options* options, uint64_t seed);
/* Sets options->memory_limit_bytes; `bytes` must be positive (ET_ERROR_INVALID_ARGUMENT otherwise). */
et_error* et_session_options_set_memory_limit(et_session_options* options, int64_t bytes);
/* Sets options->memory_budget_bytes; `bytes` must be positive (ET_ERROR_INVALID_ARGUMENT otherwise). */
et_error* et_session_options_set_memory_budget(et_session_options* options, int64_t bytes);
/* Sets options->frozen_prefix_cache_bytes; `bytes` must be positive (ET_ERROR_INVALID_ARGUMENT otherwise). */
et_error* et_session_options_set_frozen_prefix_cache(et_session_options* options, int64_t bytes);

/* Which graph of a session a name query is about. The last value keeps the type as wide as int, so
 * that an unknown kind is a typed error rather than undefined behaviour. */
typedef enum et_model_kind {
  ET_MODEL_TRAINING = 0,
  ET_MODEL_EVAL = 1,
  ET_MODEL_KIND_MAX_ENUM = 0x7fffffff
} et_model_kind;

/* The session trains the tensors of `state` (shared: saving the state later saves the trained values;
 * the state handle may be freed before the session). eval_model_path and optimizer_model_path may be
 * NULL; options may be NULL for the defaults. */
et_error* et_training_session_create(et_checkpoint_state* state, const char* training_model_path,
                                     const char* eval_model_path, const char* optimizer_model_path,
                                     const et_session_options* options, et_training_session** out_session);
/* The same from ONNX bytes in memory, read during the call; an eval or optimizer model may be NULL. */
et_error* et_training_session_create_from_buffers(et_checkpoint_state* state, const void* training_model,
                                                  size_t training_model_size, const void* eval_model,
                                                  size_t eval_model_size, const void* optimizer_model,
                                                  size_t optimizer_model_size, const et_session_options* options,
                                                  et_training_session** out_session);
void et_training_session_free(et_training_session* session);

/* Inputs in the order of the training (eval) model's input names; the outputs, loss first, are named.
 * out_outputs may be NULL to drop them. Gradients add up across train steps until lazy_reset_grad. */
et_error* et_training_session_train_step(et_training_session* session, const et_tensor_view* inputs, size_t input_count,
                                         et_values** out_outputs);
et_error* et_training_session_eval_step(et_training_session* session, const et_tensor_view* inputs, size_t input_count,
                                        et_values** out_outputs);
/* The next train step overwrites the gradients instead of adding to them. */
et_error* et_training_session_lazy_reset_grad(et_training_session* session);
et_error* et_training_session_optimizer_step(et_training_session* session);

et_error* et_training_session_get_learning_rate(const et_training_session* session, float* out_learning_rate);
et_error* et_training_session_set_learning_rate(et_training_session* session, float learning_rate);
/* ORT's LinearLRScheduler: lr = initial_lr * (step < warmup ? step / max(1, warmup)
 * : max(0, (total - step) / max(1, total - warmup))). Registering applies it at the current step. */
et_error* et_training_session_register_linear_lr_scheduler(et_training_session* session, int64_t warmup_steps,
                                                           int64_t total_steps, float initial_lr);
/* Cosine decay from initial_lr to min_lr at total_steps after a linear warmup (lr = min_lr + (initial_lr - min_lr)
 * * (1 + cos(pi * progress)) / 2); registering applies it at the current step. */
et_error* et_training_session_register_cosine_lr_scheduler(et_training_session* session, int64_t warmup_steps,
                                                           int64_t total_steps, float initial_lr, float min_lr);
/* lr = initial_lr * gamma^(step / step_size) (step_size > 0); registering applies it at the current step. */
et_error* et_training_session_register_step_lr_scheduler(et_training_session* session, int64_t step_size, float gamma,
                                                         float initial_lr);
/* Sets the learning rate from the registered scheduler at the current optimizer step. */
et_error* et_training_session_scheduler_step(et_training_session* session);

/* Parameters as one flat float32 buffer in training-model input order: trainable ones only, or all. */
et_error* et_training_session_get_parameters_size(const et_training_session* session, bool trainable_only,
                                                  size_t* out_size);
et_error* et_training_session_copy_parameters_to_buffer(const et_training_session* session, float* buffer,
                                                        size_t buffer_count, bool trainable_only);
/* With trainable_only false this also fills a nominal checkpoint state. */
et_error* et_training_session_copy_buffer_to_parameters(et_training_session* session, const float* buffer,
                                                        size_t buffer_count, bool trainable_only);

et_error* et_training_session_input_count(const et_training_session* session, et_model_kind model, size_t* out_count);
et_error* et_training_session_input_name(const et_training_session* session, et_model_kind model, size_t index,
                                         const char** out_name);
et_error* et_training_session_output_count(const et_training_session* session, et_model_kind model, size_t* out_count);
et_error* et_training_session_output_name(const et_training_session* session, et_model_kind model, size_t index,
                                          const char** out_name);

/* The training step's planned arena of intermediate tensors in bytes (0 before the first train step) and
 * how many recomputations of forward values it makes to fit memory_budget_bytes (a value recomputed once
 * per backward reader counts once per reader). Either out-parameter may be NULL. */
et_error* et_training_session_get_memory_plan(const et_training_session* session, uint64_t* out_arena_bytes,
                                              size_t* out_recomputed_values);

/* The frozen prefix cache: samples and bytes it holds, samples found in it and not, over all train steps
 * (all 0 without a cache). Any out-parameter may be NULL. */
et_error* et_training_session_get_frozen_prefix_cache(const et_training_session* session, uint64_t* out_samples,
                                                      uint64_t* out_bytes, uint64_t* out_hits, uint64_t* out_misses);

/* Reseeds the random operators: the same seed gives the same Dropout masks. */
et_error* et_training_session_set_seed(et_training_session* session, uint64_t seed);
/* Writes the eval model with the current parameters and without the loss, reduced to `output_names`
 * (output_count 0: every eval output other than the loss). */
et_error* et_training_session_export_model_for_inference(const et_training_session* session, const char* path,
                                                         const char* const* output_names, size_t output_count);

/* ---- training agent: a model as one differentiable layer inside another framework ---- */

typedef struct et_training_agent et_training_agent;

/* `trainable_names` lists the float initializers that get gradients (trainable_count 0: all of them);
 * options may be NULL for the defaults. */
et_error* et_training_agent_create(const char* model_path, const char* const* trainable_names, size_t trainable_count,
                                   const et_session_options* options, et_training_agent** out_agent);
void et_training_agent_free(et_training_agent* agent);

et_error* et_training_agent_input_count(const et_training_agent* agent, size_t* out_count);
et_error* et_training_agent_input_name(const et_training_agent* agent, size_t index, const char** out_name);
et_error* et_training_agent_output_count(const et_training_agent* agent, size_t* out_count);
et_error* et_training_agent_output_name(const et_training_agent* agent, size_t index, const char** out_name);

/* Runs the model on inputs in input-name order; returns the named outputs and a handle for backward. */
et_error* et_training_agent_forward(et_training_agent* agent, const et_tensor_view* inputs, size_t input_count,
                                    et_values** out_outputs, int64_t* out_handle);
/* One gradient per output, shaped like it; consumes the handle. Returns the gradients of the inputs
 * (named; ET_DTYPE_UNDEFINED for a non-float input) and of the parameters (named). Either out-parameter
 * may be NULL to drop that list. */
et_error* et_training_agent_backward(et_training_agent* agent, int64_t handle, const et_tensor_view* output_gradients,
                                     size_t gradient_count, et_values** out_input_gradients,
                                     et_values** out_parameter_gradients);
/* Drops a forward handle whose backward will not run. */
et_error* et_training_agent_release(et_training_agent* agent, int64_t handle);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EDGETRAIN_EDGETRAIN_H_ */
