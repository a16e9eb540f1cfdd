/* The C ABI end to end, compiled as C99: train the bundled MLP's artifacts, schedule the learning
 * rate, move parameters, save and reload the checkpoint, export for inference, run the training
 * agent, and check that errors come back as objects with messages.
 * Usage: c_api_test ARTIFACT_DIR PLAIN_ARTIFACT_DIR (made by `edgetrain generate-artifacts models/mlp.onnx -o DIR`,
 * with `--additional-output output` for the first); the test writes its own files there with a c_api_ prefix. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgetrain/edgetrain.h"

enum { kSamples = 64, kBatch = 16, kPixels = 28 * 28, kClasses = 10, kAgentBatch = 4 };

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#define CHECK_NEAR(a, b, tolerance)                                                                            \
  do {                                                                                                         \
    double a_ = (a), b_ = (b);                                                                                 \
    if (!(fabs(a_ - b_) <= (tolerance))) {                                                                     \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, #a, a_, #b, b_); \
      ++failures;                                                                                              \
    }                                                                                                          \
  } while (0)

/* A call the rest of the test depends on: stop at once if it fails. */
#define OK(call)                                                                                          \
  do {                                                                                                    \
    et_error* error_ = (call);                                                                            \
    if (error_ != NULL) {                                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, et_error_get_message(error_)); \
      et_error_free(error_);                                                                              \
      exit(1);                                                                                            \
    }                                                                                                     \
  } while (0)

#define EXPECT_ERROR(call, code, needle) expect_error((call), (code), (needle), #call, __LINE__)

static void expect_error(et_error* error, et_error_code code, const char* needle, const char* call, int line) {
  if (error == NULL) {
    fprintf(stderr, "%s:%d: %s succeeded, expected an error containing '%s'\n", __FILE__, line, call, needle);
    ++failures;
    return;
  }
  if (et_error_get_code(error) != code || strstr(et_error_get_message(error), needle) == NULL) {
    fprintf(stderr, "%s:%d: %s gave error %d '%s', expected %d containing '%s'\n", __FILE__, line, call,
            (int)et_error_get_code(error), et_error_get_message(error), (int)code, needle);
    ++failures;
  }
  et_error_free(error);
}

static char* join_path(const char* directory, const char* file) {
  size_t length = strlen(directory) + strlen(file) + 2;
  char* path = malloc(length);
  snprintf(path, length, "%s/%s", directory, file);
  return path;
}

static unsigned char* read_file(const char* path, size_t* size) {
  FILE* file = fopen(path, "rb");
  unsigned char* data;
  if (file == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(file, 0, SEEK_END);
  *size = (size_t)ftell(file);
  fseek(file, 0, SEEK_SET);
  data = malloc(*size);
  if (fread(data, 1, *size, file) != *size) exit(1);
  fclose(file);
  return data;
}

/* Synthetic, learnable data: class c lights up the c-th band of 78 pixels, over small LCG noise. */
static float images[kSamples * kPixels];
static int64_t labels[kSamples];

static void make_data(void) {
  uint32_t state = 12345u;
  int i, p;
  for (i = 0; i < kSamples; ++i) {
    labels[i] = i % kClasses;
    for (p = 0; p < kPixels; ++p) {
      state = state * 1664525u + 1013904223u;
      images[i * kPixels + p] = (float)(state >> 8) / 16777216.0f * 0.2f + (p / 78 == labels[i] ? 1.0f : 0.0f);
    }
  }
}

static const int64_t kBatchShape[] = {kBatch, 1, 28, 28};
static const int64_t kBatchLabelShape[] = {kBatch};
static const int64_t kAllShape[] = {kSamples, 1, 28, 28};
static const int64_t kAllLabelShape[] = {kSamples};

/* Samples first.. as (input, labels); the shapes give the batch size. */
static void batch_views(int first, const int64_t* image_shape, const int64_t* label_shape, et_tensor_view views[2]) {
  et_tensor_view image = {ET_DTYPE_FLOAT32, image_shape, 4, images + first * kPixels};
  et_tensor_view label = {ET_DTYPE_INT64, label_shape, 1, labels + first};
  views[0] = image;
  views[1] = label;
}

static float scalar(const et_values* values, size_t index) {
  CHECK(et_values_dtype(values, index) == ET_DTYPE_FLOAT32 && et_values_rank(values, index) == 0);
  return *(const float*)et_values_data(values, index);
}

/* Mean loss of the eval model over all samples. */
static float eval_loss(et_training_session* session) {
  et_tensor_view inputs[2];
  et_values* outputs = NULL;
  float loss;
  batch_views(0, kAllShape, kAllLabelShape, inputs);
  OK(et_training_session_eval_step(session, inputs, 2, &outputs));
  CHECK(et_values_count(outputs) == 2);
  CHECK(strcmp(et_values_name(outputs, 0), "loss") == 0);
  CHECK(strcmp(et_values_name(outputs, 1), "output") == 0);
  CHECK(et_values_rank(outputs, 1) == 2 && et_values_shape(outputs, 1)[0] == kSamples &&
        et_values_shape(outputs, 1)[1] == kClasses);
  loss = scalar(outputs, 0);
  et_values_free(outputs);
  return loss;
}

static void check_names(const et_training_session* session, et_model_kind model) {
  size_t count = 0;
  const char* name = NULL;
  OK(et_training_session_input_count(session, model, &count));
  CHECK(count == 2);
  OK(et_training_session_input_name(session, model, 0, &name));
  CHECK(strcmp(name, "input") == 0);
  OK(et_training_session_input_name(session, model, 1, &name));
  CHECK(strcmp(name, "labels") == 0);
  OK(et_training_session_output_count(session, model, &count));
  CHECK(count == 2);
  OK(et_training_session_output_name(session, model, 0, &name));
  CHECK(strcmp(name, "loss") == 0);
  OK(et_training_session_output_name(session, model, 1, &name));
  CHECK(strcmp(name, "output") == 0);
  EXPECT_ERROR(et_training_session_input_name(session, model, 2, &name), ET_ERROR_OUT_OF_RANGE, "index 2");
}

/* Trains `steps` batches in order (wrapping around); returns the losses. */
static void train(et_training_session* session, int steps, float* losses) {
  int step;
  for (step = 0; step < steps; ++step) {
    et_tensor_view inputs[2];
    et_values* outputs = NULL;
    batch_views((step * kBatch) % kSamples, kBatchShape, kBatchLabelShape, inputs);
    OK(et_training_session_train_step(session, inputs, 2, &outputs));
    CHECK(et_values_count(outputs) == 2);
    CHECK(strcmp(et_values_name(outputs, 0), "loss") == 0);
    losses[step] = scalar(outputs, 0);
    et_values_free(outputs);
    OK(et_training_session_optimizer_step(session));
    OK(et_training_session_lazy_reset_grad(session));
  }
}

/* ORT's LinearLRScheduler. */
static float linear_lr(int64_t step, int64_t warmup, int64_t total, float initial) {
  double factor = step < warmup ? (double)step / (double)(warmup > 1 ? warmup : 1)
                                : (double)(total - step) / (double)(total - warmup > 1 ? total - warmup : 1);
  return (float)(initial * (factor > 0 ? factor : 0));
}

static void test_errors(const char* artifacts, et_checkpoint_state* state, et_training_session* session) {
  char* missing = join_path(artifacts, "no_such_checkpoint");
  char* training_model = join_path(artifacts, "training_model.onnx");
  et_checkpoint_state* no_state = NULL;
  et_training_session* no_session = NULL;
  et_training_agent* no_agent = NULL;
  et_tensor_view inputs[2];
  const int64_t wrong_shape[] = {kBatch, 1, 28, 27};
  int64_t value = 0;
  float learning_rate = 0;

  EXPECT_ERROR(et_checkpoint_load(missing, &no_state), ET_ERROR_IO, missing);
  CHECK(no_state == NULL);
  EXPECT_ERROR(et_training_session_create(state, missing, NULL, NULL, NULL, &no_session), ET_ERROR_IO, missing);
  CHECK(no_session == NULL);

  batch_views(0, wrong_shape, kBatchLabelShape, inputs);
  EXPECT_ERROR(et_training_session_train_step(session, inputs, 2, NULL), ET_ERROR_INVALID_ARGUMENT, "input");
  batch_views(0, kBatchShape, kBatchLabelShape, inputs);
  EXPECT_ERROR(et_training_session_train_step(session, inputs, 1, NULL), ET_ERROR_INVALID_ARGUMENT, "expected 2");
  inputs[0].data = NULL;
  EXPECT_ERROR(et_training_session_train_step(session, inputs, 2, NULL), ET_ERROR_INVALID_ARGUMENT,
               "inputs[0]: data is NULL");

  /* NULL handles, names and out-parameters are errors naming the argument. */
  EXPECT_ERROR(et_training_session_train_step(NULL, inputs, 2, NULL), ET_ERROR_INVALID_ARGUMENT,
               "et_training_session_train_step: session is NULL");
  EXPECT_ERROR(et_training_session_get_learning_rate(session, NULL), ET_ERROR_INVALID_ARGUMENT,
               "out_learning_rate is NULL");
  EXPECT_ERROR(et_training_session_get_learning_rate(NULL, &learning_rate), ET_ERROR_INVALID_ARGUMENT,
               "session is NULL");
  EXPECT_ERROR(et_training_session_input_name(NULL, ET_MODEL_TRAINING, 0, NULL), ET_ERROR_INVALID_ARGUMENT, "is NULL");
  EXPECT_ERROR(et_checkpoint_load(NULL, &no_state), ET_ERROR_INVALID_ARGUMENT, "path is NULL");
  EXPECT_ERROR(et_checkpoint_save(NULL, missing, true), ET_ERROR_INVALID_ARGUMENT, "state is NULL");
  EXPECT_ERROR(et_checkpoint_get_int_property(state, NULL, &value), ET_ERROR_INVALID_ARGUMENT, "name is NULL");
  EXPECT_ERROR(et_checkpoint_parameter_name(NULL, 0, NULL), ET_ERROR_INVALID_ARGUMENT, "is NULL");
  EXPECT_ERROR(et_training_session_create(NULL, training_model, NULL, NULL, NULL, &no_session),
               ET_ERROR_INVALID_ARGUMENT, "state is NULL");
  EXPECT_ERROR(et_training_session_create_from_buffers(state, NULL, 0, NULL, 0, NULL, 0, NULL, &no_session),
               ET_ERROR_INVALID_ARGUMENT, "training_model is NULL");
  EXPECT_ERROR(et_training_agent_create(NULL, NULL, 0, NULL, &no_agent), ET_ERROR_INVALID_ARGUMENT,
               "model_path is NULL");
  EXPECT_ERROR(et_training_agent_create(training_model, NULL, 0, NULL, NULL), ET_ERROR_INVALID_ARGUMENT,
               "out_agent is NULL");
  EXPECT_ERROR(et_training_agent_create(training_model, NULL, 1, NULL, &no_agent), ET_ERROR_INVALID_ARGUMENT,
               "trainable_names is NULL");
  EXPECT_ERROR(et_training_session_set_learning_rate(session, -1.0f), ET_ERROR_INVALID_ARGUMENT, "learning rate");
  EXPECT_ERROR(et_training_session_input_count(session, (et_model_kind)7, (size_t*)&value), ET_ERROR_INVALID_ARGUMENT,
               "model kind 7");

  /* Accessors tolerate NULL. */
  CHECK(et_error_get_code(NULL) == ET_OK);
  CHECK(strcmp(et_error_get_message(NULL), "") == 0);
  CHECK(et_values_count(NULL) == 0 && et_values_data(NULL, 0) == NULL && et_values_shape(NULL, 3) == NULL);
  CHECK(strcmp(et_values_name(NULL, 0), "") == 0 && et_values_dtype(NULL, 0) == ET_DTYPE_UNDEFINED);
  et_error_free(NULL);
  et_values_free(NULL);
  et_checkpoint_free(NULL);
  et_training_session_free(NULL);
  et_training_agent_free(NULL);
  free(missing);
  free(training_model);
}

static void test_properties(et_checkpoint_state* state) {
  int64_t int_value = 0;
  float float_value = 0;
  const char* string_value = NULL;
  et_property_type type;
  OK(et_checkpoint_add_int_property(state, "epoch", 3));
  OK(et_checkpoint_add_float_property(state, "best_loss", 0.25f));
  OK(et_checkpoint_add_string_property(state, "dataset", "synthetic bands"));
  OK(et_checkpoint_get_int_property(state, "epoch", &int_value));
  CHECK(int_value == 3);
  OK(et_checkpoint_get_float_property(state, "best_loss", &float_value));
  CHECK(float_value == 0.25f);
  OK(et_checkpoint_get_string_property(state, "dataset", &string_value));
  CHECK(strcmp(string_value, "synthetic bands") == 0);
  OK(et_checkpoint_get_property_type(state, "best_loss", &type));
  CHECK(type == ET_PROPERTY_FLOAT);
  EXPECT_ERROR(et_checkpoint_get_int_property(state, "dataset", &int_value), ET_ERROR_INVALID_ARGUMENT,
               "property 'dataset' is not of type int");
  EXPECT_ERROR(et_checkpoint_get_float_property(state, "no_such_property", &float_value), ET_ERROR_INVALID_ARGUMENT,
               "no_such_property");
}

/* Checks the parameter list; returns the total element count of the float parameters. */
static size_t test_parameters(et_checkpoint_state* state) {
  size_t count = 0, i, total = 0, rank = 0;
  int64_t shape[4];
  et_dtype dtype;
  const char* name = NULL;
  float bias[kClasses], read_back[kClasses];
  const int64_t bias_shape[] = {kClasses};
  const int64_t wrong_shape[] = {kClasses + 1};
  et_tensor_view bias_view = {ET_DTYPE_FLOAT32, bias_shape, 1, bias};
  et_tensor_view wrong_view = {ET_DTYPE_FLOAT32, wrong_shape, 1, bias};

  OK(et_checkpoint_parameter_count(state, &count));
  CHECK(count == 6);
  for (i = 0; i < count; ++i) {
    int64_t numel = 1;
    size_t d;
    OK(et_checkpoint_parameter_name(state, i, &name));
    OK(et_checkpoint_parameter_info(state, name, &dtype, shape, 4, &rank));
    CHECK(dtype == ET_DTYPE_FLOAT32);
    for (d = 0; d < rank; ++d) numel *= shape[d];
    total += (size_t)numel;
  }
  OK(et_checkpoint_parameter_name(state, 0, &name));
  CHECK(strcmp(name, "net.1.bias") == 0);
  OK(et_checkpoint_parameter_info(state, "net.1.weight", &dtype, shape, 4, &rank));
  CHECK(rank == 2 && shape[0] == 512 && shape[1] == 784);
  EXPECT_ERROR(et_checkpoint_parameter_info(state, "net.1.weight", &dtype, shape, 1, &rank), ET_ERROR_INVALID_ARGUMENT,
               "rank 2");
  EXPECT_ERROR(et_checkpoint_parameter_name(state, 6, &name), ET_ERROR_OUT_OF_RANGE, "index 6");

  /* Update one parameter and read it back; a wrong shape or buffer size names the parameter. */
  OK(et_checkpoint_get_parameter(state, "net.5.bias", bias, sizeof bias));
  for (i = 0; i < kClasses; ++i) bias[i] += 0.5f;
  OK(et_checkpoint_update_parameter(state, "net.5.bias", &bias_view));
  OK(et_checkpoint_get_parameter(state, "net.5.bias", read_back, sizeof read_back));
  CHECK(memcmp(bias, read_back, sizeof bias) == 0);
  for (i = 0; i < kClasses; ++i) bias[i] -= 0.5f;
  OK(et_checkpoint_update_parameter(state, "net.5.bias", &bias_view));
  EXPECT_ERROR(et_checkpoint_update_parameter(state, "net.5.bias", &wrong_view), ET_ERROR_INVALID_ARGUMENT,
               "net.5.bias");
  EXPECT_ERROR(et_checkpoint_get_parameter(state, "net.5.bias", bias, sizeof bias - 4), ET_ERROR_INVALID_ARGUMENT,
               "net.5.bias");
  EXPECT_ERROR(et_checkpoint_get_parameter(state, "net.9.bias", bias, sizeof bias), ET_ERROR_INVALID_ARGUMENT,
               "net.9.bias");
  return total;
}

static void test_scheduler(et_training_session* session, int64_t step) {
  const int64_t warmup = step + 2, total = step + 6;
  const float initial = 2e-3f;
  float learning_rate = 0;
  int k;
  OK(et_training_session_set_learning_rate(session, 5e-4f));
  OK(et_training_session_get_learning_rate(session, &learning_rate));
  CHECK(learning_rate == 5e-4f);
  /* Registering applies the schedule at once, at the current optimizer step. */
  OK(et_training_session_register_linear_lr_scheduler(session, warmup, total, initial));
  OK(et_training_session_get_learning_rate(session, &learning_rate));
  CHECK_NEAR(learning_rate, linear_lr(step, warmup, total, initial), 1e-9);
  CHECK(learning_rate > 0 && learning_rate < initial);
  for (k = 1; k <= 8; ++k) {
    OK(et_training_session_optimizer_step(session));
    OK(et_training_session_scheduler_step(session));
    OK(et_training_session_get_learning_rate(session, &learning_rate));
    CHECK_NEAR(learning_rate, linear_lr(step + k, warmup, total, initial), 1e-9);
  }
  CHECK(learning_rate == 0.0f); /* past total_steps */
  /* Cosine: at the end of the warmup the rate is initial_lr; halfway through the decay, (initial + min) / 2. */
  OK(et_training_session_register_cosine_lr_scheduler(session, 0, 2 * (step + 8), initial, 1e-4f));
  OK(et_training_session_get_learning_rate(session, &learning_rate));
  CHECK_NEAR(learning_rate, 0.5 * (initial + 1e-4f), 1e-7);
  /* Step: gamma^(step / step_size). */
  OK(et_training_session_register_step_lr_scheduler(session, 4, 0.5f, initial));
  OK(et_training_session_get_learning_rate(session, &learning_rate));
  CHECK_NEAR(learning_rate, initial * pow(0.5, (double)((step + 8) / 4)), 1e-9);
  EXPECT_ERROR(et_training_session_register_step_lr_scheduler(session, 0, 0.5f, initial), ET_ERROR_INVALID_ARGUMENT,
               "step_size");
  EXPECT_ERROR(et_training_session_register_cosine_lr_scheduler(session, -1, 10, initial, 0.0f),
               ET_ERROR_INVALID_ARGUMENT, "warmup_steps");
  EXPECT_ERROR(et_training_session_register_cosine_lr_scheduler(NULL, 0, 10, initial, 0.0f), ET_ERROR_INVALID_ARGUMENT,
               "");
}

static void test_parameter_buffers(et_training_session* session, size_t expected_size) {
  size_t size = 0;
  float* saved;
  float* zeros;
  float loss_before;
  OK(et_training_session_get_parameters_size(session, true, &size));
  CHECK(size == expected_size);
  saved = malloc(size * sizeof(float));
  zeros = calloc(size, sizeof(float));
  OK(et_training_session_copy_parameters_to_buffer(session, saved, size, true));
  loss_before = eval_loss(session);
  /* All-zero weights give equal logits: the cross entropy of 10 classes is ln(10). */
  OK(et_training_session_copy_buffer_to_parameters(session, zeros, size, true));
  CHECK_NEAR(eval_loss(session), log(10.0), 1e-5);
  OK(et_training_session_copy_buffer_to_parameters(session, saved, size, true));
  CHECK(eval_loss(session) == loss_before);
  EXPECT_ERROR(et_training_session_copy_parameters_to_buffer(session, saved, size - 1, true), ET_ERROR_INVALID_ARGUMENT,
               "");
  EXPECT_ERROR(et_training_session_copy_buffer_to_parameters(session, NULL, size, true), ET_ERROR_INVALID_ARGUMENT,
               "buffer: data is NULL");
  free(saved);
  free(zeros);
}

static void read_parameter(const et_checkpoint_state* state, const char* name, float* buffer, size_t count) {
  OK(et_checkpoint_get_parameter(state, name, buffer, count * sizeof(float)));
}

/* One identical train step on both sessions; returns their eval losses after it. */
static void step_both(et_training_session* a, et_training_session* b, float* loss_a, float* loss_b) {
  et_tensor_view inputs[2];
  batch_views(0, kBatchShape, kBatchLabelShape, inputs);
  OK(et_training_session_set_learning_rate(a, 1e-3f));
  OK(et_training_session_set_learning_rate(b, 1e-3f));
  OK(et_training_session_train_step(a, inputs, 2, NULL));
  OK(et_training_session_train_step(b, inputs, 2, NULL));
  OK(et_training_session_optimizer_step(a));
  OK(et_training_session_optimizer_step(b));
  OK(et_training_session_lazy_reset_grad(a));
  OK(et_training_session_lazy_reset_grad(b));
  *loss_a = eval_loss(a);
  *loss_b = eval_loss(b);
}

static void test_checkpoint_round_trip(const char* artifacts, et_checkpoint_state* state,
                                       et_training_session* session) {
  char* path = join_path(artifacts, "c_api_checkpoint");
  char* training_model = join_path(artifacts, "training_model.onnx");
  char* eval_model = join_path(artifacts, "eval_model.onnx");
  char* optimizer_model = join_path(artifacts, "optimizer_model.onnx");
  enum { kWeights = 512 * 784 };
  float* trained = malloc(kWeights * sizeof(float));
  float* loaded = malloc(kWeights * sizeof(float));
  et_checkpoint_state* reloaded = NULL;
  et_checkpoint_state* from_buffer = NULL;
  et_checkpoint_state* truncated = NULL;
  et_training_session* resumed = NULL;
  unsigned char* bytes;
  size_t size = 0, count = 0;
  int64_t epoch = 0;
  const char* dataset = NULL;
  float loss_trained, loss_resumed;

  /* The session trains the state's own tensors, so saving the state saves the trained model. */
  OK(et_checkpoint_save(state, path, true));
  OK(et_checkpoint_load(path, &reloaded));
  OK(et_checkpoint_get_int_property(reloaded, "epoch", &epoch));
  CHECK(epoch == 3);
  OK(et_checkpoint_get_string_property(reloaded, "dataset", &dataset));
  CHECK(strcmp(dataset, "synthetic bands") == 0);
  read_parameter(state, "net.1.weight", trained, kWeights);
  read_parameter(reloaded, "net.1.weight", loaded, kWeights);
  CHECK(memcmp(trained, loaded, kWeights * sizeof(float)) == 0);

  bytes = read_file(path, &size);
  OK(et_checkpoint_load_from_buffer(bytes, size, &from_buffer));
  OK(et_checkpoint_parameter_count(from_buffer, &count));
  CHECK(count == 6);
  read_parameter(from_buffer, "net.1.weight", loaded, kWeights);
  CHECK(memcmp(trained, loaded, kWeights * sizeof(float)) == 0);
  EXPECT_ERROR(et_checkpoint_load_from_buffer(bytes, size / 2, &truncated), ET_ERROR_INVALID_MODEL, "");
  CHECK(truncated == NULL);

  /* With the optimizer state saved (moments and step), a resumed session takes the same next step. */
  OK(et_training_session_create(reloaded, training_model, eval_model, optimizer_model, NULL, &resumed));
  CHECK_NEAR(eval_loss(resumed), eval_loss(session), 1e-6);
  step_both(session, resumed, &loss_trained, &loss_resumed);
  CHECK_NEAR(loss_resumed, loss_trained, 1e-6);

  et_training_session_free(resumed);
  et_checkpoint_free(reloaded);
  et_checkpoint_free(from_buffer);
  free(bytes);
  free(trained);
  free(loaded);
  free(path);
  free(training_model);
  free(eval_model);
  free(optimizer_model);
}

/* A session over the same state, created from the model bytes, computes the same eval loss. */
static void test_session_from_buffers(const char* artifacts, et_checkpoint_state* state, et_training_session* session) {
  char* training_path = join_path(artifacts, "training_model.onnx");
  char* eval_path = join_path(artifacts, "eval_model.onnx");
  size_t training_size = 0, eval_size = 0;
  unsigned char* training_model = read_file(training_path, &training_size);
  unsigned char* eval_model = read_file(eval_path, &eval_size);
  et_training_session* from_buffers = NULL;
  et_session_options options;
  et_session_options_init(&options);
  CHECK(options.num_threads == 1);
  CHECK(options.struct_size == sizeof options);
  options.struct_size = 0;
  EXPECT_ERROR(et_training_session_create_from_buffers(state, training_model, training_size, eval_model, eval_size,
                                                       NULL, 0, &options, &from_buffers),
               ET_ERROR_INVALID_ARGUMENT, "struct_size is 0; initialise the options with et_session_options_init");
  options.struct_size = sizeof options + 8;
  EXPECT_ERROR(et_training_session_create_from_buffers(state, training_model, training_size, eval_model, eval_size,
                                                       NULL, 0, &options, &from_buffers),
               ET_ERROR_INVALID_ARGUMENT, "struct_size is");
  CHECK(from_buffers == NULL);
  options.struct_size = sizeof options;
  EXPECT_ERROR(et_session_options_set_num_threads(&options, 0), ET_ERROR_INVALID_ARGUMENT,
               "thread count must be positive, got 0");
  EXPECT_ERROR(et_session_options_set_num_threads(NULL, 2), ET_ERROR_INVALID_ARGUMENT, "options is NULL");
  OK(et_session_options_set_num_threads(&options, 2));
  OK(et_session_options_set_seed(&options, 7));
  CHECK(options.num_threads == 2 && options.seed == 7);
  OK(et_training_session_create_from_buffers(state, training_model, training_size, eval_model, eval_size, NULL, 0,
                                             &options, &from_buffers));
  CHECK_NEAR(eval_loss(from_buffers), eval_loss(session), 1e-5);
  OK(et_training_session_set_seed(from_buffers, 11));
  EXPECT_ERROR(et_training_session_optimizer_step(from_buffers), ET_ERROR_INVALID_ARGUMENT, "no optimizer model");
  et_training_session_free(from_buffers);
  free(training_model);
  free(eval_model);
  free(training_path);
  free(eval_path);
}

static void test_inference_and_agent(const char* artifacts, et_training_session* session) {
  char* path = join_path(artifacts, "c_api_inference.onnx");
  const char* output_names[] = {"output"};
  const int64_t image_shape[] = {kAgentBatch, 1, 28, 28};
  const int64_t label_shape[] = {kAgentBatch};
  const int64_t gradient_shape[] = {kAgentBatch, kClasses};
  float ones[kAgentBatch * kClasses];
  et_tensor_view inputs[2];
  et_tensor_view gradient = {ET_DTYPE_FLOAT32, gradient_shape, 2, ones};
  et_values* eval_outputs = NULL;
  et_values* outputs = NULL;
  et_values* input_gradients = NULL;
  et_values* parameter_gradients = NULL;
  et_training_agent* agent = NULL;
  int64_t handle = 0, unused_handle = 0;
  size_t count = 0, i, j;
  const char* name = NULL;
  const float* values;
  const float* expected;
  double input_gradient_norm = 0;

  for (i = 0; i < kAgentBatch * kClasses; ++i) ones[i] = 1.0f;
  OK(et_training_session_export_model_for_inference(session, path, output_names, 1));
  batch_views(0, image_shape, label_shape, inputs);
  OK(et_training_session_eval_step(session, inputs, 2, &eval_outputs));

  OK(et_training_agent_create(path, NULL, 0, NULL, &agent));
  OK(et_training_agent_input_count(agent, &count));
  CHECK(count == 1);
  OK(et_training_agent_input_name(agent, 0, &name));
  CHECK(strcmp(name, "input") == 0);
  OK(et_training_agent_output_count(agent, &count));
  CHECK(count == 1);
  OK(et_training_agent_output_name(agent, 0, &name));
  CHECK(strcmp(name, "output") == 0);

  /* The exported model computes what the eval model computes. */
  OK(et_training_agent_forward(agent, inputs, 1, &outputs, &handle));
  CHECK(et_values_count(outputs) == 1 && strcmp(et_values_name(outputs, 0), "output") == 0);
  CHECK(et_values_rank(outputs, 0) == 2 && et_values_shape(outputs, 0)[0] == kAgentBatch &&
        et_values_shape(outputs, 0)[1] == kClasses);
  values = et_values_data(outputs, 0);
  expected = et_values_data(eval_outputs, 1);
  for (i = 0; i < kAgentBatch * kClasses; ++i) CHECK_NEAR(values[i], expected[i], 1e-5);

  /* Output gradient 1 everywhere: the last bias's gradient is the batch size. */
  OK(et_training_agent_backward(agent, handle, &gradient, 1, &input_gradients, &parameter_gradients));
  CHECK(et_values_count(input_gradients) == 1 && strcmp(et_values_name(input_gradients, 0), "input") == 0);
  CHECK(et_values_numel(input_gradients, 0) == kAgentBatch * kPixels);
  values = et_values_data(input_gradients, 0);
  for (i = 0; i < (size_t)et_values_numel(input_gradients, 0); ++i) input_gradient_norm += values[i] * values[i];
  CHECK(input_gradient_norm > 0);
  CHECK(et_values_count(parameter_gradients) == 6);
  for (i = 0; i < et_values_count(parameter_gradients); ++i) {
    if (strcmp(et_values_name(parameter_gradients, i), "net.5.bias") != 0) continue;
    CHECK(et_values_numel(parameter_gradients, i) == kClasses);
    values = et_values_data(parameter_gradients, i);
    for (j = 0; j < kClasses; ++j) CHECK(values[j] == (float)kAgentBatch);
  }
  EXPECT_ERROR(et_training_agent_backward(agent, handle, &gradient, 1, NULL, NULL), ET_ERROR_INVALID_ARGUMENT,
               "unknown handle");

  OK(et_training_agent_forward(agent, inputs, 1, NULL, &unused_handle));
  EXPECT_ERROR(et_training_agent_backward(agent, unused_handle, &gradient, 0, NULL, NULL), ET_ERROR_INVALID_ARGUMENT,
               "");
  OK(et_training_agent_release(agent, unused_handle));

  et_values_free(eval_outputs);
  et_values_free(outputs);
  et_values_free(input_gradients);
  et_values_free(parameter_gradients);
  et_training_agent_free(agent);
  free(path);
}

/* Artifacts made without additional outputs export the base model's own output by name. */
static void test_export_by_base_output_name(const char* plain) {
  char* checkpoint = join_path(plain, "checkpoint");
  char* training_model = join_path(plain, "training_model.onnx");
  char* eval_model = join_path(plain, "eval_model.onnx");
  char* path = join_path(plain, "c_api_exported.onnx");
  const char* output_names[] = {"output"};
  const char* unknown[] = {"logits"};
  const int64_t image_shape[] = {kAgentBatch, 1, 28, 28};
  const int64_t label_shape[] = {kAgentBatch};
  et_tensor_view inputs[2];
  et_checkpoint_state* state = NULL;
  et_training_session* session = NULL;
  et_training_agent* agent = NULL;
  et_values* outputs = NULL;
  int64_t handle = 0;

  OK(et_checkpoint_load(checkpoint, &state));
  OK(et_training_session_create(state, training_model, eval_model, NULL, NULL, &session));
  OK(et_training_session_export_model_for_inference(session, path, output_names, 1));
  EXPECT_ERROR(et_training_session_export_model_for_inference(session, path, unknown, 1), ET_ERROR_INVALID_ARGUMENT,
               "'logits'");
  OK(et_training_agent_create(path, NULL, 0, NULL, &agent));
  batch_views(0, image_shape, label_shape, inputs);
  OK(et_training_agent_forward(agent, inputs, 1, &outputs, &handle));
  CHECK(et_values_count(outputs) == 1 && strcmp(et_values_name(outputs, 0), "output") == 0);
  CHECK(et_values_rank(outputs, 0) == 2 && et_values_shape(outputs, 0)[0] == kAgentBatch &&
        et_values_shape(outputs, 0)[1] == kClasses);
  et_values_free(outputs);
  et_training_agent_free(agent);
  et_training_session_free(session);
  et_checkpoint_free(state);
  free(checkpoint);
  free(training_model);
  free(eval_model);
  free(path);
}

int main(int argc, char** argv) {
  const char* artifacts;
  char *checkpoint, *training_model, *eval_model, *optimizer_model;
  et_checkpoint_state* state = NULL;
  et_training_session* session = NULL;
  size_t parameter_elements;
  float losses[12], loss_before, loss_after;
  const int steps = 12;
  int step;

  if (argc != 3) {
    fprintf(stderr, "usage: %s ARTIFACT_DIR PLAIN_ARTIFACT_DIR\n", argv[0]);
    return 2;
  }
  artifacts = argv[1];
  checkpoint = join_path(artifacts, "checkpoint");
  training_model = join_path(artifacts, "training_model.onnx");
  eval_model = join_path(artifacts, "eval_model.onnx");
  optimizer_model = join_path(artifacts, "optimizer_model.onnx");
  make_data();

  CHECK(strcmp(et_version(), EDGETRAIN_VERSION) == 0);
  CHECK(strcmp(et_version(), EDGETRAIN_PROJECT_VERSION) == 0);

  OK(et_checkpoint_load(checkpoint, &state));
  test_properties(state);
  parameter_elements = test_parameters(state);
  CHECK(parameter_elements == 535818);

  OK(et_training_session_create(state, training_model, eval_model, optimizer_model, NULL, &session));
  check_names(session, ET_MODEL_TRAINING);
  check_names(session, ET_MODEL_EVAL);

  OK(et_training_session_set_learning_rate(session, 1e-3f));
  loss_before = eval_loss(session);
  train(session, steps, losses);
  loss_after = eval_loss(session);
  for (step = 0; step < steps; ++step) printf("step %d: loss %.5f\n", step, losses[step]);
  printf("eval loss %.5f -> %.5f\n", loss_before, loss_after);
  CHECK(losses[steps - 1] < 0.5f * losses[0]);
  CHECK(loss_after < 0.5f * loss_before);

  test_scheduler(session, steps);
  test_parameter_buffers(session, parameter_elements);
  test_checkpoint_round_trip(artifacts, state, session);
  test_session_from_buffers(artifacts, state, session);
  test_inference_and_agent(artifacts, session);
  test_errors(artifacts, state, session);
  test_export_by_base_output_name(argv[2]);

  et_training_session_free(session);
  et_checkpoint_free(state);
  free(checkpoint);
  free(training_model);
  free(eval_model);
  free(optimizer_model);
  if (failures > 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
