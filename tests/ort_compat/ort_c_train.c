/* Fashion-MNIST training written against ONNX Runtime's training C API (onnxruntime_training_c_api.h) alone:
 * it compiles unchanged against ORT's headers and against edgetrain's include/ort_compat.
 *
 * Usage: ort_c_train ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N]
 *        ort_c_train --errors ARTIFACT_DIR OUT_DIR
 * The first trains with the recipe of examples/c/fashion_mnist.c (so its accuracy must equal the native
 * example's), exports the model and runs it with an OrtSession. The second checks that failures come back as
 * OrtStatus errors with ORT's codes and messages that name the file, input or parameter. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fashion_mnist_data.h"
#include "onnxruntime_training_c_api.h"

static const OrtApi* g_ort = NULL;
static const OrtTrainingApi* g_ort_training = NULL;

/* Prints a failed call's status; true when the call succeeded. */
static bool check_status(OrtStatus* status, const char* call) {
  if (status == NULL) return true;
  fprintf(stderr, "error: %s failed (OrtErrorCode %d): %s\n", call, (int)g_ort->GetErrorCode(status),
          g_ort->GetErrorMessage(status));
  g_ort->ReleaseStatus(status);
  return false;
}

#define ORT_TRY(call)                              \
  do {                                             \
    if (!check_status((call), #call)) return false; \
  } while (0)

static void join(char* out, size_t size, const char* dir, const char* file) { snprintf(out, size, "%s/%s", dir, file); }

typedef struct batch {
  float pixels[kBatch * kPixels];
  int64_t labels[kBatch];
  int64_t size;
  OrtValue* values[2]; /* images, labels */
} batch;

static bool make_values(batch* b, const OrtMemoryInfo* memory) {
  const int64_t image_shape[] = {b->size, 1, kRows, kColumns};
  const int64_t label_shape[] = {b->size};
  ORT_TRY(g_ort->CreateTensorWithDataAsOrtValue(memory, b->pixels, (size_t)b->size * kPixels * sizeof(float),
                                                image_shape, 4, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &b->values[0]));
  ORT_TRY(g_ort->CreateTensorWithDataAsOrtValue(memory, b->labels, (size_t)b->size * sizeof(int64_t), label_shape, 1,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &b->values[1]));
  return true;
}

static void release_values(batch* b) {
  g_ort->ReleaseValue(b->values[0]);
  g_ort->ReleaseValue(b->values[1]);
  b->values[0] = b->values[1] = NULL;
}

/* Index of the eval model's output `name`, or -1. */
static int eval_output_index(OrtTrainingSession* session, const char* name) {
  OrtAllocator* allocator;
  size_t count = 0, i;
  int found = -1;
  if (!check_status(g_ort->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions") ||
      !check_status(g_ort_training->TrainingSessionGetEvalModelOutputCount(session, &count), "output count"))
    return -1;
  for (i = 0; i < count; ++i) {
    char* output_name = NULL;
    if (!check_status(g_ort_training->TrainingSessionGetEvalModelOutputName(session, i, allocator, &output_name),
                      "TrainingSessionGetEvalModelOutputName"))
      return -1;
    if (strcmp(output_name, name) == 0) found = (int)i;
    allocator->Free(allocator, output_name);
  }
  return found;
}

static bool evaluate(OrtTrainingSession* session, const fm_dataset* test, const OrtMemoryInfo* memory, batch* b,
                     int64_t* correct) {
  OrtValue* outputs[2] = {NULL, NULL};
  int64_t first;
  int loss_index = eval_output_index(session, "loss"), logits_index = eval_output_index(session, "output");
  if (loss_index < 0 || logits_index < 0 || loss_index + logits_index != 1) {
    fprintf(stderr, "error: the eval model's outputs are not loss and output\n");
    return false;
  }
  *correct = 0;
  for (first = 0; first < test->count; first += kBatch) {
    float* logits = NULL;
    b->size = fm_batch_size(test, first);
    fm_fill(test, NULL, first, b->size, b->pixels, b->labels);
    if (!make_values(b, memory)) return false;
    ORT_TRY(g_ort_training->EvalStep(session, NULL, 2, (const OrtValue* const*)b->values, 2, outputs));
    release_values(b);
    ORT_TRY(g_ort->GetTensorMutableData(outputs[logits_index], (void**)&logits));
    *correct += fm_count_correct(logits, b->labels, b->size);
    g_ort->ReleaseValue(outputs[0]);
    g_ort->ReleaseValue(outputs[1]);
    outputs[0] = outputs[1] = NULL;
  }
  return true;
}

static bool evaluate_exported(OrtEnv* env, const char* path, const fm_dataset* test, const OrtMemoryInfo* memory,
                              batch* b, int64_t* correct) {
  OrtSessionOptions* options = NULL;
  OrtSession* session = NULL;
  OrtAllocator* allocator;
  char *input_name = NULL, *output_name = NULL;
  size_t input_count = 0, output_count = 0;
  int64_t first;
  bool ok = false;
  ORT_TRY(g_ort->CreateSessionOptions(&options));
  ORT_TRY(g_ort->SetIntraOpNumThreads(options, 1));
  ORT_TRY(g_ort->CreateSession(env, path, options, &session));
  g_ort->ReleaseSessionOptions(options);
  ORT_TRY(g_ort->GetAllocatorWithDefaultOptions(&allocator));
  ORT_TRY(g_ort->SessionGetInputCount(session, &input_count));
  ORT_TRY(g_ort->SessionGetOutputCount(session, &output_count));
  ORT_TRY(g_ort->SessionGetInputName(session, 0, allocator, &input_name));
  ORT_TRY(g_ort->SessionGetOutputName(session, 0, allocator, &output_name));
  if (input_count != 1 || output_count != 1 || strcmp(input_name, "input") != 0 || strcmp(output_name, "output") != 0) {
    fprintf(stderr, "error: the exported model's interface is not input -> output\n");
    goto done;
  }
  *correct = 0;
  for (first = 0; first < test->count; first += kBatch) {
    const char* input_names[1];
    const char* output_names[1];
    OrtValue* logits_value = NULL;
    float* logits = NULL;
    input_names[0] = input_name;
    output_names[0] = output_name;
    b->size = fm_batch_size(test, first);
    fm_fill(test, NULL, first, b->size, b->pixels, b->labels);
    if (!make_values(b, memory)) goto done;
    if (!check_status(g_ort->Run(session, NULL, input_names, (const OrtValue* const*)b->values, 1, output_names, 1,
                                 &logits_value),
                      "Run"))
      goto done;
    release_values(b);
    if (!check_status(g_ort->GetTensorMutableData(logits_value, (void**)&logits), "GetTensorMutableData")) goto done;
    *correct += fm_count_correct(logits, b->labels, b->size);
    g_ort->ReleaseValue(logits_value);
  }
  ok = true;
done:
  allocator->Free(allocator, input_name);
  allocator->Free(allocator, output_name);
  g_ort->ReleaseSession(session);
  return ok;
}

static bool train(const char* artifacts, const char* data, const char* out, int64_t epochs, int64_t limit) {
  char train_path[4096], eval_path[4096], optimizer_path[4096], checkpoint_path[4096], saved_path[4096],
      exported_path[4096];
  const char* export_names[] = {"output"};
  OrtEnv* env = NULL;
  OrtSessionOptions* options = NULL;
  OrtMemoryInfo* memory = NULL;
  OrtCheckpointState* state = NULL;
  OrtTrainingSession* session = NULL;
  OrtValue* parameters = NULL;
  fm_dataset train_set, test_set;
  batch* b = (batch*)calloc(1, sizeof(batch));
  int64_t* order;
  int64_t epoch, correct = 0, exported_correct = 0, steps_per_epoch;
  size_t parameter_count = 0, training_inputs = 0;
  float learning_rate = 0;

  join(train_path, sizeof train_path, artifacts, "training_model.onnx");
  join(eval_path, sizeof eval_path, artifacts, "eval_model.onnx");
  join(optimizer_path, sizeof optimizer_path, artifacts, "optimizer_model.onnx");
  join(checkpoint_path, sizeof checkpoint_path, artifacts, "checkpoint");
  join(saved_path, sizeof saved_path, out, "checkpoint");
  join(exported_path, sizeof exported_path, out, "model.onnx");

  ORT_TRY(g_ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "fashion_mnist", &env));
  ORT_TRY(g_ort->CreateSessionOptions(&options));
  ORT_TRY(g_ort->SetIntraOpNumThreads(options, 1));
  ORT_TRY(g_ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory));
  ORT_TRY(g_ort_training->LoadCheckpoint(checkpoint_path, &state));
  ORT_TRY(g_ort_training->CreateTrainingSession(env, options, state, train_path, eval_path, optimizer_path, &session));
  ORT_TRY(g_ort_training->TrainingSessionGetTrainingModelInputCount(session, &training_inputs));
  if (training_inputs != 2) {
    fprintf(stderr, "error: the training model takes %zu inputs, expected images and labels\n", training_inputs);
    return false;
  }

  if (!fm_load(data, "train", limit, &train_set) || !fm_load(data, "t10k", limit, &test_set)) return false;
  order = (int64_t*)malloc((size_t)train_set.count * sizeof(int64_t));
  steps_per_epoch = (train_set.count + kBatch - 1) / kBatch;
  ORT_TRY(g_ort_training->RegisterLinearLRScheduler(session, 0, epochs * steps_per_epoch, 1e-3f));

  for (epoch = 0; epoch < epochs; ++epoch) {
    int64_t first;
    double loss_sum = 0;
    ORT_TRY(g_ort_training->SetSeed(fm_epoch_seed(epoch)));
    fm_shuffled_order(order, train_set.count, epoch);
    for (first = 0; first < train_set.count; first += kBatch) {
      OrtValue* outputs[2] = {NULL, NULL};
      float* loss = NULL;
      b->size = fm_batch_size(&train_set, first);
      fm_fill(&train_set, order, first, b->size, b->pixels, b->labels);
      if (!make_values(b, memory)) return false;
      ORT_TRY(g_ort_training->TrainStep(session, NULL, 2, (const OrtValue* const*)b->values, 2, outputs));
      release_values(b);
      ORT_TRY(g_ort->GetTensorMutableData(outputs[0], (void**)&loss));
      loss_sum += *loss;
      g_ort->ReleaseValue(outputs[0]);
      g_ort->ReleaseValue(outputs[1]);
      ORT_TRY(g_ort_training->OptimizerStep(session, NULL));
      ORT_TRY(g_ort_training->SchedulerStep(session));
      ORT_TRY(g_ort_training->LazyResetGrad(session));
    }
    if (!evaluate(session, &test_set, memory, b, &correct)) return false;
    {
      int64_t finished = epoch + 1;
      ORT_TRY(g_ort_training->AddProperty(state, "epoch", OrtIntProperty, &finished));
    }
    ORT_TRY(g_ort_training->SaveCheckpoint(state, saved_path, true));
    ORT_TRY(g_ort_training->GetLearningRate(session, &learning_rate));
    printf("epoch %lld: train loss %.4f, lr %.3g; test accuracy %.2f%% (%lld/%lld)\n", (long long)(epoch + 1),
           loss_sum / (double)steps_per_epoch, learning_rate, 100.0 * (double)correct / (double)test_set.count,
           (long long)correct, (long long)test_set.count);
  }

  /* The flat parameter buffer: every MLP parameter trains, so both sizes agree. */
  {
    size_t all_count = 0;
    int64_t shape[1];
    OrtAllocator* allocator;
    ORT_TRY(g_ort_training->GetParametersSize(session, &parameter_count, true));
    ORT_TRY(g_ort_training->GetParametersSize(session, &all_count, false));
    if (parameter_count == 0 || parameter_count != all_count) {
      fprintf(stderr, "error: %zu trainable parameters of %zu\n", parameter_count, all_count);
      return false;
    }
    shape[0] = (int64_t)parameter_count;
    ORT_TRY(g_ort->GetAllocatorWithDefaultOptions(&allocator));
    ORT_TRY(g_ort->CreateTensorAsOrtValue(allocator, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &parameters));
    ORT_TRY(g_ort_training->CopyParametersToBuffer(session, parameters, true));
    ORT_TRY(g_ort_training->CopyBufferToParameters(session, parameters, true));
    g_ort->ReleaseValue(parameters);
  }

  ORT_TRY(g_ort_training->ExportModelForInferencing(session, exported_path, 1, export_names));
  if (!evaluate_exported(env, exported_path, &test_set, memory, b, &exported_correct)) return false;
  printf("exported %s: test accuracy %.2f%% (%lld/%lld)\n", exported_path,
         100.0 * (double)exported_correct / (double)test_set.count, (long long)exported_correct,
         (long long)test_set.count);
  if (exported_correct != correct) {
    fprintf(stderr, "error: the exported model classifies %lld right, the eval model %lld\n",
            (long long)exported_correct, (long long)correct);
    return false;
  }
  g_ort_training->ReleaseTrainingSession(session);
  g_ort_training->ReleaseCheckpointState(state);
  g_ort->ReleaseMemoryInfo(memory);
  g_ort->ReleaseSessionOptions(options);
  g_ort->ReleaseEnv(env);
  fm_free(&train_set);
  fm_free(&test_set);
  free(order);
  free(b);
  return true;
}

/* ---- error paths ---- */

static int g_failures = 0;

/* The status must be an error with `code` whose message contains `needle`; releases it. */
static void expect_error(OrtStatus* status, OrtErrorCode code, const char* needle, const char* what) {
  if (status == NULL) {
    fprintf(stderr, "FAIL %s: succeeded\n", what);
    ++g_failures;
    return;
  }
  if (g_ort->GetErrorCode(status) != code || strstr(g_ort->GetErrorMessage(status), needle) == NULL) {
    fprintf(stderr, "FAIL %s: code %d, message '%s'; expected code %d and '%s'\n", what,
            (int)g_ort->GetErrorCode(status), g_ort->GetErrorMessage(status), (int)code, needle);
    ++g_failures;
  } else {
    printf("ok %s: %s\n", what, g_ort->GetErrorMessage(status));
  }
  g_ort->ReleaseStatus(status);
}

static bool errors(const char* artifacts, const char* out) {
  char train_path[4096], eval_path[4096], checkpoint_path[4096], missing_path[4096], exported_path[4096];
  OrtEnv* env = NULL;
  OrtMemoryInfo* memory = NULL;
  OrtCheckpointState* state = NULL;
  OrtTrainingSession *session = NULL, *with_eval = NULL;
  OrtAllocator* allocator = NULL;
  OrtValue* inputs[2] = {NULL, NULL};
  OrtValue* outputs[2] = {NULL, NULL};
  OrtValue* bias = NULL;
  float pixels[2 * 27 * 27] = {0}, wrong_bias[5] = {0};
  int64_t labels[2] = {0, 1}, wrong_image_shape[] = {2, 1, 27, 27}, label_shape[] = {2}, bias_shape[] = {5}, one = 1;
  const char* unknown_output[] = {"no_such_value"};
  void* property = NULL;
  OrtPropertyType property_type;

  join(train_path, sizeof train_path, artifacts, "training_model.onnx");
  join(eval_path, sizeof eval_path, artifacts, "eval_model.onnx");
  join(checkpoint_path, sizeof checkpoint_path, artifacts, "checkpoint");
  join(missing_path, sizeof missing_path, out, "no_checkpoint");
  join(exported_path, sizeof exported_path, out, "never.onnx");

  if (OrtGetApiBase()->GetApi(ORT_API_VERSION + 1) != NULL || g_ort->GetTrainingApi(ORT_API_VERSION + 1) != NULL) {
    fprintf(stderr, "FAIL: an API version above ORT_API_VERSION is not NULL\n");
    ++g_failures;
  }
  ORT_TRY(g_ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "errors", &env));
  ORT_TRY(g_ort->GetAllocatorWithDefaultOptions(&allocator));

  expect_error(g_ort_training->LoadCheckpoint(missing_path, &state), ORT_NO_SUCHFILE, missing_path,
               "LoadCheckpoint of a missing file");
  expect_error(g_ort_training->LoadCheckpoint(train_path, &state), ORT_INVALID_GRAPH, train_path,
               "LoadCheckpoint of a model file");
  expect_error(g_ort->CreateMemoryInfo("Cuda", OrtDeviceAllocator, 0, OrtMemTypeDefault, &memory),
               ORT_NOT_IMPLEMENTED, "Cuda", "CreateMemoryInfo for a GPU");
  ORT_TRY(g_ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &memory));
  expect_error(g_ort->CreateTensorWithDataAsOrtValue(memory, pixels, 8, wrong_image_shape, 4,
                                                     ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &inputs[0]),
               ORT_INVALID_ARGUMENT, "needs 5832 bytes", "a tensor larger than its buffer");

  ORT_TRY(g_ort_training->LoadCheckpoint(checkpoint_path, &state));
  expect_error(g_ort_training->CreateTrainingSession(env, NULL, state, missing_path, NULL, NULL, &session),
               ORT_NO_SUCHFILE, missing_path, "CreateTrainingSession with a missing model");
  ORT_TRY(g_ort_training->CreateTrainingSession(env, NULL, state, train_path, NULL, NULL, &session));

  ORT_TRY(g_ort->CreateTensorWithDataAsOrtValue(memory, pixels, sizeof pixels, wrong_image_shape, 4,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &inputs[0]));
  ORT_TRY(g_ort->CreateTensorWithDataAsOrtValue(memory, labels, sizeof labels, label_shape, 1,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &inputs[1]));
  expect_error(g_ort_training->TrainStep(session, NULL, 2, (const OrtValue* const*)inputs, 2, outputs),
               ORT_INVALID_ARGUMENT, "'input'", "TrainStep with a wrongly shaped input");
  expect_error(g_ort_training->TrainStep(session, NULL, 1, (const OrtValue* const*)inputs, 2, outputs),
               ORT_INVALID_ARGUMENT, "input", "TrainStep with an input missing");
  expect_error(g_ort_training->EvalStep(session, NULL, 2, (const OrtValue* const*)inputs, 2, outputs),
               ORT_INVALID_ARGUMENT, "eval model", "EvalStep without an eval model");
  expect_error(g_ort_training->OptimizerStep(session, NULL), ORT_INVALID_ARGUMENT, "optimizer",
               "OptimizerStep without an optimizer model");

  expect_error(g_ort_training->GetProperty(state, "no_such_property", allocator, &property_type, &property),
               ORT_INVALID_ARGUMENT, "no_such_property", "GetProperty of an unknown name");
  ORT_TRY(g_ort_training->AddProperty(state, "epoch", OrtIntProperty, &one));
  ORT_TRY(g_ort_training->GetProperty(state, "epoch", allocator, &property_type, &property));
  if (property_type != OrtIntProperty || *(int64_t*)property != 1) {
    fprintf(stderr, "FAIL: property 'epoch' does not read back\n");
    ++g_failures;
  }
  allocator->Free(allocator, property);
  {
    OrtTensorTypeAndShapeInfo* info = NULL;
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    int64_t dims[1] = {0};
    ORT_TRY(g_ort_training->GetParameterTypeAndShape(state, "net.5.bias", &info));
    ORT_TRY(g_ort->GetTensorElementType(info, &type));
    ORT_TRY(g_ort->GetDimensionsCount(info, &rank));
    ORT_TRY(g_ort->GetDimensions(info, dims, 1));
    g_ort->ReleaseTensorTypeAndShapeInfo(info);
    if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || rank != 1 || dims[0] != 10) {
      fprintf(stderr, "FAIL: GetParameterTypeAndShape of net.5.bias is type %d rank %zu dim %lld\n", (int)type, rank,
              (long long)dims[0]);
      ++g_failures;
    }
    expect_error(g_ort_training->GetParameterTypeAndShape(state, "no_such_parameter", &info), ORT_INVALID_ARGUMENT,
                 "no_such_parameter", "GetParameterTypeAndShape of an unknown name");
  }
  expect_error(g_ort_training->TrainingSessionGetTrainingModelInputName(session, 2, allocator, (char**)&property),
               ORT_INVALID_ARGUMENT, "index 2 is out of range", "an input name past the end");
  expect_error(g_ort_training->GetParameter(state, "no_such_parameter", allocator, &bias), ORT_INVALID_ARGUMENT,
               "no_such_parameter", "GetParameter of an unknown name");
  ORT_TRY(g_ort->CreateTensorWithDataAsOrtValue(memory, wrong_bias, sizeof wrong_bias, bias_shape, 1,
                                                ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &bias));
  expect_error(g_ort_training->UpdateParameter(state, "net.5.bias", bias), ORT_INVALID_ARGUMENT, "net.5.bias",
               "UpdateParameter with the wrong shape");
  g_ort->ReleaseValue(bias);
  ORT_TRY(g_ort_training->CreateTrainingSession(env, NULL, state, train_path, eval_path, NULL, &with_eval));
  expect_error(g_ort_training->ExportModelForInferencing(with_eval, exported_path, 1, unknown_output),
               ORT_INVALID_ARGUMENT, "no_such_value", "ExportModelForInferencing of an unknown value");
  expect_error(g_ort_training->SaveCheckpoint(state, "/nonexistent_dir/checkpoint", false), ORT_NO_SUCHFILE,
               "/nonexistent_dir/checkpoint", "SaveCheckpoint into a missing directory");
  expect_error(g_ort->CreateSession(env, missing_path, NULL, NULL), ORT_INVALID_ARGUMENT, "out is NULL",
               "CreateSession without an out-parameter");

  g_ort->ReleaseValue(inputs[0]);
  g_ort->ReleaseValue(inputs[1]);
  g_ort_training->ReleaseTrainingSession(with_eval);
  g_ort_training->ReleaseTrainingSession(session);
  g_ort_training->ReleaseCheckpointState(state);
  g_ort->ReleaseMemoryInfo(memory);
  g_ort->ReleaseEnv(env);
  return g_failures == 0;
}

int main(int argc, char** argv) {
  int64_t epochs = 1, limit = 0;
  int i;
  g_ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  g_ort_training = g_ort != NULL ? g_ort->GetTrainingApi(ORT_API_VERSION) : NULL;
  if (g_ort_training == NULL) {
    fprintf(stderr, "error: no training API of version %d\n", ORT_API_VERSION);
    return 1;
  }
  if (argc == 4 && strcmp(argv[1], "--errors") == 0) return errors(argv[2], argv[3]) ? 0 : 1;
  if (argc < 4) {
    fprintf(stderr, "usage: %s ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N]\n", argv[0]);
    return 2;
  }
  for (i = 4; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--epochs") == 0) epochs = atoll(argv[i + 1]);
    if (strcmp(argv[i], "--limit") == 0) limit = atoll(argv[i + 1]);
  }
  return train(argv[1], argv[2], argv[3], epochs, limit) ? 0 : 1;
}
