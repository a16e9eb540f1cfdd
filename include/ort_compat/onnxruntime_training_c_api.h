/* edgetrain's source-compatible stand-in for ONNX Runtime's training C API (onnxruntime_training_c_api.h),
 * written from ORT's public documentation and implemented over edgetrain's TrainingSession and
 * CheckpointState. Reach it with OrtGetApiBase()->GetApi(ORT_API_VERSION)->GetTrainingApi(ORT_API_VERSION).
 * The members follow ORT 1.19's order. */
#ifndef EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_TRAINING_C_API_H_
#define EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_TRAINING_C_API_H_

#include "onnxruntime_c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

ORT_RUNTIME_CLASS(TrainingSession);
ORT_RUNTIME_CLASS(CheckpointState);

typedef enum OrtPropertyType { OrtIntProperty = 0, OrtFloatProperty = 1, OrtStringProperty = 2 } OrtPropertyType;

struct OrtTrainingApi {
  /* ---- checkpoints (ORT's ODTC format) ---- */
  OrtStatus*(ORT_API_CALL* LoadCheckpoint)(const ORTCHAR_T* checkpoint_path,
                                           OrtCheckpointState** checkpoint_state)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SaveCheckpoint)(OrtCheckpointState* checkpoint_state, const ORTCHAR_T* checkpoint_path,
                                           const bool include_optimizer_state)NO_EXCEPTION;

  /* ---- session: the state is shared, so a later SaveCheckpoint writes the trained values ---- */
  OrtStatus*(ORT_API_CALL* CreateTrainingSession)(const OrtEnv* env, const OrtSessionOptions* options,
                                                  OrtCheckpointState* checkpoint_state,
                                                  const ORTCHAR_T* train_model_path, const ORTCHAR_T* eval_model_path,
                                                  const ORTCHAR_T* optimizer_model_path,
                                                  OrtTrainingSession** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CreateTrainingSessionFromBuffer)(
      const OrtEnv* env, const OrtSessionOptions* options, OrtCheckpointState* checkpoint_state,
      const void* train_model_data, size_t train_data_length, const void* eval_model_data, size_t eval_data_length,
      const void* optim_model_data, size_t optim_data_length, OrtTrainingSession** out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetTrainingModelOutputCount)(const OrtTrainingSession* sess,
                                                                       size_t* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetEvalModelOutputCount)(const OrtTrainingSession* sess,
                                                                   size_t* out)NO_EXCEPTION;
  /* Names are allocated with `allocator`. */
  OrtStatus*(ORT_API_CALL* TrainingSessionGetTrainingModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                                      OrtAllocator* allocator,
                                                                      char** output)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetEvalModelOutputName)(const OrtTrainingSession* sess, size_t index,
                                                                  OrtAllocator* allocator, char** output)NO_EXCEPTION;

  /* ---- the training loop ---- */
  OrtStatus*(ORT_API_CALL* LazyResetGrad)(OrtTrainingSession* session)NO_EXCEPTION;
  /* inputs in training-model input order; outputs_len must equal the output count; NULL outputs[i] receive new
   * values, others must match the output's type and element count and are filled. */
  OrtStatus*(ORT_API_CALL* TrainStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options, size_t inputs_len,
                                      const OrtValue* const* inputs, size_t outputs_len,
                                      OrtValue** outputs)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* EvalStep)(const OrtTrainingSession* sess, const OrtRunOptions* run_options,
                                     size_t inputs_len, const OrtValue* const* inputs, size_t outputs_len,
                                     OrtValue** outputs)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SetLearningRate)(OrtTrainingSession* sess, float learning_rate)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetLearningRate)(OrtTrainingSession* sess, float* learning_rate)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* OptimizerStep)(OrtTrainingSession* sess, const OrtRunOptions* run_options)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* RegisterLinearLRScheduler)(OrtTrainingSession* sess, const int64_t warmup_step_count,
                                                      const int64_t total_step_count,
                                                      const float initial_lr)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* SchedulerStep)(OrtTrainingSession* sess)NO_EXCEPTION;

  /* ---- parameters as one flat float tensor of GetParametersSize elements ---- */
  OrtStatus*(ORT_API_CALL* GetParametersSize)(OrtTrainingSession* sess, size_t* out, bool trainable_only)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CopyParametersToBuffer)(OrtTrainingSession* sess, OrtValue* parameters_buffer,
                                                   bool trainable_only)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* CopyBufferToParameters)(OrtTrainingSession* sess, OrtValue* parameters_buffer,
                                                   bool trainable_only)NO_EXCEPTION;

  void(ORT_API_CALL* ReleaseTrainingSession)(OrtTrainingSession* input) NO_EXCEPTION;
  void(ORT_API_CALL* ReleaseCheckpointState)(OrtCheckpointState* input) NO_EXCEPTION;

  /* The eval model with the current parameters, reduced to graph_output_names and without loss inputs. */
  OrtStatus*(ORT_API_CALL* ExportModelForInferencing)(OrtTrainingSession* sess, const ORTCHAR_T* inference_model_path,
                                                      size_t graph_outputs_len,
                                                      const char* const* graph_output_names)NO_EXCEPTION;
  /* Seeds the random operators (Dropout) of every training session, existing ones included. */
  OrtStatus*(ORT_API_CALL* SetSeed)(const int64_t seed)NO_EXCEPTION;

  OrtStatus*(ORT_API_CALL* TrainingSessionGetTrainingModelInputCount)(const OrtTrainingSession* sess,
                                                                      size_t* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetEvalModelInputCount)(const OrtTrainingSession* sess,
                                                                  size_t* out)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetTrainingModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                                     OrtAllocator* allocator,
                                                                     char** output)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* TrainingSessionGetEvalModelInputName)(const OrtTrainingSession* sess, size_t index,
                                                                 OrtAllocator* allocator, char** output)NO_EXCEPTION;

  /* ---- checkpoint properties and parameters ---- */
  /* property_value points to an int64_t, a float or a NUL-terminated string. */
  OrtStatus*(ORT_API_CALL* AddProperty)(OrtCheckpointState* checkpoint_state, const char* property_name,
                                        enum OrtPropertyType property_type, void* property_value)NO_EXCEPTION;
  /* *property_value is allocated with `allocator`: an int64_t, a float or a string. */
  OrtStatus*(ORT_API_CALL* GetProperty)(const OrtCheckpointState* checkpoint_state, const char* property_name,
                                        OrtAllocator* allocator, enum OrtPropertyType* property_type,
                                        void** property_value)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* LoadCheckpointFromBuffer)(const void* checkpoint_buffer, const size_t num_bytes,
                                                     OrtCheckpointState** checkpoint_state)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* GetParameterTypeAndShape)(const OrtCheckpointState* checkpoint_state,
                                                     const char* parameter_name,
                                                     OrtTensorTypeAndShapeInfo** parameter_type_and_shape)NO_EXCEPTION;
  OrtStatus*(ORT_API_CALL* UpdateParameter)(OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                            OrtValue* parameter)NO_EXCEPTION;
  /* A copy of the parameter in a new value. */
  OrtStatus*(ORT_API_CALL* GetParameter)(const OrtCheckpointState* checkpoint_state, const char* parameter_name,
                                         OrtAllocator* allocator, OrtValue** parameter)NO_EXCEPTION;
};

#ifdef __cplusplus
}
#endif

#endif /* EDGETRAIN_ORT_COMPAT_ONNXRUNTIME_TRAINING_C_API_H_ */
