/* A native federated-learning worker for devices without Python, in C99 over the C ABI alone: it loads the
 * global model's flat trainable-parameter buffer, trains on the device's data, and writes the updated buffer.
 * A thin Flower client process drives it (edgetrain.federated.client_app.NativeWorkerClient).
 *
 *   federated_worker train ARTIFACTS SAMPLE_SHAPE IMAGES LABELS PARAMS_IN PARAMS_OUT EPOCHS BATCH LR SEED
 *   federated_worker eval  ARTIFACTS SAMPLE_SHAPE IMAGES LABELS PARAMS_IN
 *
 * IMAGES: raw float32 samples of SAMPLE_SHAPE (e.g. 1x28x28); LABELS: raw int64; PARAMS_*: raw float32, the
 * session's trainable buffer. Prints "samples=N loss=L accuracy=A" (accuracy when the model returns logits). */
#include <edgetrain/edgetrain.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char* what, et_error* error) {
  fprintf(stderr, "federated_worker: %s: %s\n", what, et_error_get_message(error));
  et_error_free(error);
  return 1;
}

#define TRY(what, call)                        \
  do {                                         \
    et_error* error_ = (call);                 \
    if (error_) return fail((what), error_);   \
  } while (0)

/* Reads a whole file; *size gets its byte count. NULL (and a message) on failure. */
static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  void* data = NULL;
  long length;
  if (!f) {
    fprintf(stderr, "federated_worker: cannot open '%s'\n", path);
    return NULL;
  }
  if (fseek(f, 0, SEEK_END) == 0 && (length = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc(length > 0 ? (size_t)length : 1);
    if (data && fread(data, 1, (size_t)length, f) == (size_t)length) {
      *size = (size_t)length;
    } else {
      free(data);
      data = NULL;
      fprintf(stderr, "federated_worker: cannot read '%s'\n", path);
    }
  }
  fclose(f);
  return data;
}

static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  int ok = f && fwrite(data, 1, size, f) == size;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "federated_worker: cannot write '%s'\n", path);
  return ok;
}

typedef struct Data {
  float* images;
  int64_t* labels;
  int64_t count, sample_size, shape[8];
  size_t rank; /* of one batch: 1 + the sample shape's */
} Data;

static int load_data(const char* sample_shape, const char* images_path, const char* labels_path, Data* d) {
  size_t images_bytes = 0, labels_bytes = 0;
  const char* p = sample_shape;
  d->rank = 1;
  d->sample_size = 1;
  while (*p && d->rank < 8) {
    char* end;
    long dim = strtol(p, &end, 10);
    if (end == p || dim <= 0) {
      fprintf(stderr, "federated_worker: sample shape '%s' is not like 1x28x28\n", sample_shape);
      return 0;
    }
    d->shape[d->rank++] = dim;
    d->sample_size *= dim;
    p = *end == 'x' ? end + 1 : end;
    if (*end && *end != 'x') break;
  }
  if (*p || d->rank == 1) {
    fprintf(stderr, "federated_worker: sample shape '%s' is not like 1x28x28\n", sample_shape);
    return 0;
  }
  d->images = read_file(images_path, &images_bytes);
  d->labels = read_file(labels_path, &labels_bytes);
  if (!d->images || !d->labels) return 0;
  d->count = (int64_t)(labels_bytes / sizeof(int64_t));
  if (images_bytes != (size_t)d->count * (size_t)d->sample_size * sizeof(float) || d->count == 0) {
    fprintf(stderr, "federated_worker: '%s' holds %zu bytes, not %lld samples of %s floats ('%s' has the labels)\n",
            images_path, images_bytes, (long long)d->count, sample_shape, labels_path);
    return 0;
  }
  return 1;
}

/* One step over samples order[start, start + n): a train step (train != 0) or an eval step. */
static et_error* step(et_training_session* session, const Data* d, const int64_t* order, int64_t start, int64_t n,
                      int train, float* batch_images, int64_t* batch_labels, et_values** out) {
  int64_t i, batch_shape[8], label_shape[1];
  et_tensor_view views[2];
  for (i = 0; i < n; ++i) {
    int64_t s = order[start + i];
    memcpy(batch_images + i * d->sample_size, d->images + s * d->sample_size, sizeof(float) * (size_t)d->sample_size);
    batch_labels[i] = d->labels[s];
  }
  memcpy(batch_shape, d->shape, sizeof(batch_shape));
  batch_shape[0] = n;
  label_shape[0] = n;
  views[0].dtype = ET_DTYPE_FLOAT32;
  views[0].shape = batch_shape;
  views[0].rank = d->rank;
  views[0].data = batch_images;
  views[1].dtype = ET_DTYPE_INT64;
  views[1].shape = label_shape;
  views[1].rank = 1;
  views[1].data = batch_labels;
  return train ? et_training_session_train_step(session, views, 2, out)
               : et_training_session_eval_step(session, views, 2, out);
}

int main(int argc, char** argv) {
  char path[3][4096];
  const char* names[3] = {"checkpoint", "training_model.onnx", "eval_model.onnx"};
  char optimizer[4096];
  et_checkpoint_state* state = NULL;
  et_training_session* session = NULL;
  et_session_options options;
  Data d;
  size_t size = 0, params_bytes = 0;
  float* params;
  int64_t *order, *batch_labels, i, epochs = 1, batch = 64, correct = 0, steps = 0;
  float* batch_images;
  double loss_sum = 0;
  uint64_t seed = 0;
  int train, k, have_logits = 0;

  if (argc < 7 || (strcmp(argv[1], "train") == 0 ? argc != 12 : strcmp(argv[1], "eval") != 0 || argc != 7)) {
    fprintf(stderr, "usage: federated_worker train ARTIFACTS SAMPLE_SHAPE IMAGES LABELS PARAMS_IN PARAMS_OUT EPOCHS "
                    "BATCH LR SEED\n       federated_worker eval ARTIFACTS SAMPLE_SHAPE IMAGES LABELS PARAMS_IN\n");
    return 2;
  }
  train = strcmp(argv[1], "train") == 0;
  for (k = 0; k < 3; ++k) snprintf(path[k], sizeof(path[k]), "%s/%s", argv[2], names[k]);
  snprintf(optimizer, sizeof(optimizer), "%s/optimizer_model.onnx", argv[2]);
  memset(&d, 0, sizeof(d));
  if (!load_data(argv[3], argv[4], argv[5], &d)) return 1;
  if (train) {
    epochs = atoll(argv[8]);
    batch = atoll(argv[9]);
    seed = strtoull(argv[11], NULL, 10);
    if (epochs < 1 || batch < 1) {
      fprintf(stderr, "federated_worker: EPOCHS and BATCH must be positive, got '%s' and '%s'\n", argv[8], argv[9]);
      return 1;
    }
  } else {
    batch = 1000;
  }

  TRY("load checkpoint", et_checkpoint_load(path[0], &state));
  et_session_options_init(&options);
  TRY("create session", et_training_session_create(state, path[1], path[2], train ? optimizer : NULL, &options,
                                                    &session));
  et_checkpoint_free(state);
  TRY("parameters size", et_training_session_get_parameters_size(session, true, &size));
  params = read_file(argv[6], &params_bytes);
  if (!params) return 1;
  if (params_bytes != size * sizeof(float)) {
    fprintf(stderr, "federated_worker: '%s' holds %zu bytes, the trainable buffer is %zu floats\n", argv[6],
            params_bytes, size);
    return 1;
  }
  TRY("set parameters", et_training_session_copy_buffer_to_parameters(session, params, size, true));
  if (train && atof(argv[10]) > 0)
    TRY("set learning rate", et_training_session_set_learning_rate(session, (float)atof(argv[10])));

  order = malloc(sizeof(int64_t) * (size_t)d.count);
  batch_images = malloc(sizeof(float) * (size_t)(batch * d.sample_size));
  batch_labels = malloc(sizeof(int64_t) * (size_t)batch);
  if (!order || !batch_images || !batch_labels) return fail("out of memory", NULL);
  for (i = 0; i < d.count; ++i) order[i] = i;
  for (k = 0; k < epochs; ++k) {
    int64_t start;
    for (i = d.count - 1; train && i > 0; --i) { /* Fisher-Yates with a 64-bit LCG */
      int64_t j, t;
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      j = (int64_t)((seed >> 33) % (uint64_t)(i + 1));
      t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    for (start = 0; start < d.count; start += batch) {
      int64_t n = d.count - start < batch ? d.count - start : batch;
      et_values* out = NULL;
      TRY(train ? "train step" : "eval step",
          step(session, &d, order, start, n, train, batch_images, batch_labels, &out));
      loss_sum += (double)*(const float*)et_values_data(out, 0) * (train ? 1.0 : (double)n);
      if (!train && et_values_count(out) > 1 && et_values_rank(out, 1) == 2) {
        const float* logits = et_values_data(out, 1);
        int64_t classes = et_values_shape(out, 1)[1], r, c;
        have_logits = 1;
        for (r = 0; r < n; ++r) {
          int64_t best = 0;
          for (c = 1; c < classes; ++c)
            if (logits[r * classes + c] > logits[r * classes + best]) best = c;
          correct += best == batch_labels[r];
        }
      }
      et_values_free(out);
      ++steps;
      if (train) {
        TRY("optimizer step", et_training_session_optimizer_step(session));
        TRY("reset gradients", et_training_session_lazy_reset_grad(session));
      }
    }
  }
  if (train) {
    TRY("get parameters", et_training_session_copy_parameters_to_buffer(session, params, size, true));
    if (!write_file(argv[7], params, size * sizeof(float))) return 1;
  }
  printf("samples=%lld loss=%.9g", (long long)d.count, train ? loss_sum / (double)steps : loss_sum / (double)d.count);
  if (have_logits) printf(" accuracy=%.9g", (double)correct / (double)d.count);
  printf("\n");
  et_training_session_free(session);
  free(params);
  free(order);
  free(batch_images);
  free(batch_labels);
  free(d.images);
  free(d.labels);
  return 0;
}
