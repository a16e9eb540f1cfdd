/* Fashion-MNIST training in C99 through the edgetrain C ABI (include/edgetrain/edgetrain.h) alone.
 *
 * Usage: fashion_mnist ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N] [--resume CKPT]
 *                      [--total-steps N] [--lr F] [--threads N] [--check-export 0|1]
 *   ARTIFACT_DIR  from `edgetrain generate-artifacts models/mlp.onnx -o ARTIFACT_DIR --additional-output output`
 *   DATA_DIR      {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (e.g. /usr/share/datasets/fashion-mnist)
 *   OUT_DIR       created if missing; receives `checkpoint` after every epoch and `model.onnx` at the end
 *
 * Each epoch trains on batches of 64 in a seeded order, then measures the test accuracy with the eval model.
 * The order of epoch e is a Fisher-Yates shuffle driven by SplitMix64 seeded with kSeed ^ (e * golden gamma),
 * the order `edgetrain train --seed 0` uses, so a resumed run sees the samples an uninterrupted run would.
 * The learning rate follows ORT's linear schedule (no warmup) from --lr (default 1e-3) down to 0 at optimizer
 * step --total-steps (default: the end of this run; give it to resume on the uninterrupted run's schedule).
 * --limit keeps the first N samples of both sets; --threads sets the intra-op threads (default 1). The exported model
 * is finally run through the training agent's forward pass on the test set, and its accuracy must equal the eval
 * model's (--check-export 0 skips that second pass over the test set). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, mkdir */

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "edgetrain/edgetrain.h"

enum { kRows = 28, kColumns = 28, kPixels = kRows * kColumns, kClasses = 10, kBatch = 64 };
static const uint64_t kSeed = 0;
static const uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

/* ---- errors ---- */

/* Prints a failed call's error with its message; true when the call succeeded. */
static bool succeeded(et_error* error, const char* call) {
  if (error == NULL) return true;
  fprintf(stderr, "error: %.*s failed (code %d): %s\n", (int)strcspn(call, "("), call, (int)et_error_get_code(error),
          et_error_get_message(error));
  et_error_free(error);
  return false;
}

#define TRY(call)                                \
  do {                                           \
    if (!succeeded((call), #call)) return false; \
  } while (0)

static void* allocate(size_t size) {
  void* memory = malloc(size > 0 ? size : 1);
  if (memory == NULL) fprintf(stderr, "error: out of memory allocating %zu bytes\n", size);
  return memory;
}

static char* join_path(const char* directory, const char* file) {
  size_t size = strlen(directory) + strlen(file) + 2;
  char* path = allocate(size);
  if (path != NULL) snprintf(path, size, "%s/%s", directory, file);
  return path;
}

static double now_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* ---- data: gzip'd IDX files ---- */

typedef struct dataset {
  int64_t count;
  unsigned char* images; /* count * kPixels bytes */
  int64_t* labels;
} dataset;

/* Reads `size` bytes or reports which file ended early or failed. */
static bool read_exactly(gzFile file, const char* path, void* buffer, size_t size) {
  unsigned char* out = buffer;
  while (size > 0) {
    unsigned chunk = size > (1u << 30) ? (1u << 30) : (unsigned)size;
    int got = gzread(file, out, chunk);
    if (got <= 0) {
      int code = Z_OK;
      const char* message = gzerror(file, &code);
      fprintf(stderr, "error: %s: %s\n", path, got < 0 && code != Z_OK ? message : "file is truncated");
      return false;
    }
    out += got;
    size -= (size_t)got;
  }
  return true;
}

static uint32_t big_endian_u32(const unsigned char bytes[4]) {
  return (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 | (uint32_t)bytes[2] << 8 | (uint32_t)bytes[3];
}

/* Reads an unsigned-byte IDX file of `rank` dims whose dims after the first must equal inner_dims;
 * returns its data (NULL on failure) and the first dim in *count. */
static unsigned char* read_idx(const char* path, uint32_t rank, const uint32_t* inner_dims, int64_t* count) {
  unsigned char header[4], dim_bytes[4];
  unsigned char* data = NULL;
  size_t sample_size = 1;
  uint32_t d;
  gzFile file;
  errno = 0;
  file = gzopen(path, "rb");
  if (file == NULL) {
    fprintf(stderr, "error: %s: cannot open: %s\n", path, errno != 0 ? strerror(errno) : "out of memory");
    return NULL;
  }
  if (!read_exactly(file, path, header, 4)) goto done;
  if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != rank) {
    fprintf(stderr, "error: %s: not an IDX file of unsigned bytes with %" PRIu32 " dims\n", path, rank);
    goto done;
  }
  for (d = 0; d < rank; ++d) {
    uint32_t dim;
    if (!read_exactly(file, path, dim_bytes, 4)) goto done;
    dim = big_endian_u32(dim_bytes);
    if (d == 0) {
      *count = dim;
    } else if (dim != inner_dims[d - 1]) {
      fprintf(stderr, "error: %s: dim %" PRIu32 " is %" PRIu32 ", expected %" PRIu32 "\n", path, d, dim,
              inner_dims[d - 1]);
      goto done;
    } else {
      sample_size *= dim;
    }
  }
  data = allocate((size_t)*count * sample_size);
  if (data != NULL && !read_exactly(file, path, data, (size_t)*count * sample_size)) {
    free(data);
    data = NULL;
  }
done:
  gzclose(file);
  return data;
}

static void free_dataset(dataset* set) {
  free(set->images);
  free(set->labels);
  set->images = NULL;
  set->labels = NULL;
}

/* Loads DATA_DIR/<split>-images-idx3-ubyte.gz and its labels, keeping the first `limit` samples (0: all). */
static bool load_dataset(const char* data_dir, const char* split, int64_t limit, dataset* set) {
  static const uint32_t kImageDims[] = {kRows, kColumns};
  char images_name[64], labels_name[64];
  char *images_path = NULL, *labels_path = NULL;
  unsigned char* label_bytes = NULL;
  int64_t label_count = 0, i;
  bool ok = false;
  snprintf(images_name, sizeof images_name, "%s-images-idx3-ubyte.gz", split);
  snprintf(labels_name, sizeof labels_name, "%s-labels-idx1-ubyte.gz", split);
  images_path = join_path(data_dir, images_name);
  labels_path = join_path(data_dir, labels_name);
  if (images_path == NULL || labels_path == NULL) goto done;
  set->images = read_idx(images_path, 3, kImageDims, &set->count);
  if (set->images == NULL) goto done;
  label_bytes = read_idx(labels_path, 1, NULL, &label_count);
  if (label_bytes == NULL) goto done;
  if (label_count != set->count) {
    fprintf(stderr, "error: %s holds %" PRId64 " labels for the %" PRId64 " images of %s\n", labels_path, label_count,
            set->count, images_path);
    goto done;
  }
  if (limit > 0 && limit < set->count) set->count = limit;
  set->labels = allocate((size_t)set->count * sizeof(int64_t));
  if (set->labels == NULL) goto done;
  for (i = 0; i < set->count; ++i) {
    if (label_bytes[i] >= kClasses) {
      fprintf(stderr, "error: %s: label %d of sample %" PRId64 " is not a class 0..9\n", labels_path, label_bytes[i],
              i);
      goto done;
    }
    set->labels[i] = label_bytes[i];
  }
  ok = true;
done:
  if (!ok) free_dataset(set);
  free(label_bytes);
  free(images_path);
  free(labels_path);
  return ok;
}

/* ---- sample order ---- */

static uint64_t splitmix64_next(uint64_t* state) {
  uint64_t z = (*state += kGoldenGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void shuffled_order(int64_t* order, int64_t count, int64_t epoch) {
  uint64_t state = kSeed ^ ((uint64_t)epoch * kGoldenGamma);
  int64_t i;
  for (i = 0; i < count; ++i) order[i] = i;
  for (i = count - 1; i >= 1; --i) {
    int64_t j = (int64_t)(splitmix64_next(&state) % (uint64_t)(i + 1)), swapped = order[i];
    order[i] = order[j];
    order[j] = swapped;
  }
}

/* ---- batches and predictions ---- */

typedef struct batch {
  int64_t size;
  float pixels[kBatch * kPixels];
  int64_t labels[kBatch];
  int64_t image_shape[4];
  int64_t label_shape[1];
  et_tensor_view views[2]; /* input, labels */
} batch;

/* Fills the batch with samples order[first..first+size) (samples first.. when order is NULL), pixels / 255. */
static void fill_batch(const dataset* set, const int64_t* order, int64_t first, int64_t size, batch* out) {
  int64_t i, p;
  for (i = 0; i < size; ++i) {
    int64_t sample = order != NULL ? order[first + i] : first + i;
    const unsigned char* image = set->images + sample * kPixels;
    for (p = 0; p < kPixels; ++p) out->pixels[i * kPixels + p] = (float)image[p] / 255.0f;
    out->labels[i] = set->labels[sample];
  }
  out->size = size;
  out->image_shape[0] = size;
  out->image_shape[1] = 1;
  out->image_shape[2] = kRows;
  out->image_shape[3] = kColumns;
  out->label_shape[0] = size;
  out->views[0].dtype = ET_DTYPE_FLOAT32;
  out->views[0].shape = out->image_shape;
  out->views[0].rank = 4;
  out->views[0].data = out->pixels;
  out->views[1].dtype = ET_DTYPE_INT64;
  out->views[1].shape = out->label_shape;
  out->views[1].rank = 1;
  out->views[1].data = out->labels;
}

/* The output named `name`: a float32 scalar (columns 0) or [rows, columns] matrix; NULL after printing why not. */
static const float* find_output(const et_values* values, const char* name, int64_t rows, int64_t columns) {
  size_t i;
  for (i = 0; i < et_values_count(values); ++i) {
    const int64_t* shape = et_values_shape(values, i);
    size_t rank = et_values_rank(values, i);
    if (strcmp(et_values_name(values, i), name) != 0) continue;
    if (et_values_dtype(values, i) == ET_DTYPE_FLOAT32 && rank == (columns > 0 ? 2u : 0u) &&
        (rank == 0 || (shape[0] == rows && shape[1] == columns)))
      return et_values_data(values, i);
    fprintf(stderr, "error: model output '%s' is not a float32 %s\n", name,
            columns > 0 ? "matrix [batch, 10]" : "scalar");
    return NULL;
  }
  fprintf(stderr, "error: the model has no output '%s'\n", name);
  return NULL;
}

static int64_t count_correct(const float* logits, const int64_t* labels, int64_t rows) {
  int64_t correct = 0, i;
  int c;
  for (i = 0; i < rows; ++i) {
    const float* row = logits + i * kClasses;
    int best = 0;
    for (c = 1; c < kClasses; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == labels[i];
  }
  return correct;
}

/* ---- the application ---- */

typedef struct options {
  const char *artifact_dir, *data_dir, *out_dir, *resume;
  int64_t epochs, limit, total_steps;
  float learning_rate;
  int threads;
  bool check_export;
} options;

typedef struct app {
  options options;
  char *training_model, *eval_model, *optimizer_model, *initial_checkpoint, *checkpoint, *exported_model;
  dataset train, test;
  batch* batch;
  int64_t* order;
  et_checkpoint_state* state;
  et_training_session* session;
  et_training_agent* agent;
} app;

static int64_t batch_size_at(const dataset* set, int64_t first) {
  return set->count - first < kBatch ? set->count - first : kBatch;
}

static bool train_epoch(app* a, int64_t epoch, double* mean_loss) {
  double loss_sum = 0;
  int64_t first, steps = 0;
  uint64_t seed_state = kSeed ^ (uint64_t)(epoch + 1);
  TRY(et_training_session_set_seed(a->session, splitmix64_next(&seed_state))); /* Dropout masks per epoch */
  shuffled_order(a->order, a->train.count, epoch);
  for (first = 0; first < a->train.count; first += kBatch, ++steps) {
    et_values* outputs = NULL;
    const float* loss;
    fill_batch(&a->train, a->order, first, batch_size_at(&a->train, first), a->batch);
    TRY(et_training_session_train_step(a->session, a->batch->views, 2, &outputs));
    loss = find_output(outputs, "loss", 0, 0);
    if (loss != NULL) loss_sum += *loss;
    et_values_free(outputs);
    if (loss == NULL) return false;
    TRY(et_training_session_optimizer_step(a->session));
    TRY(et_training_session_scheduler_step(a->session));
    TRY(et_training_session_lazy_reset_grad(a->session));
  }
  *mean_loss = loss_sum / (double)steps;
  return true;
}

/* Test-set accuracy (and mean loss) of the eval model. */
static bool evaluate(app* a, int64_t* correct, double* mean_loss) {
  double loss_sum = 0;
  int64_t first;
  *correct = 0;
  for (first = 0; first < a->test.count; first += kBatch) {
    et_values* outputs = NULL;
    const float *loss, *logits;
    fill_batch(&a->test, NULL, first, batch_size_at(&a->test, first), a->batch);
    TRY(et_training_session_eval_step(a->session, a->batch->views, 2, &outputs));
    loss = find_output(outputs, "loss", 0, 0);
    logits = find_output(outputs, "output", a->batch->size, kClasses);
    if (loss != NULL && logits != NULL) {
      loss_sum += *loss * (double)a->batch->size;
      *correct += count_correct(logits, a->batch->labels, a->batch->size);
    }
    et_values_free(outputs);
    if (loss == NULL || logits == NULL) return false;
  }
  *mean_loss = loss_sum / (double)a->test.count;
  return true;
}

/* Test-set accuracy of the exported model, run by the training agent's forward pass alone. */
static bool evaluate_exported(app* a, int64_t* correct) {
  int64_t first;
  *correct = 0;
  for (first = 0; first < a->test.count; first += kBatch) {
    et_values* outputs = NULL;
    const float* logits;
    int64_t handle = 0;
    fill_batch(&a->test, NULL, first, batch_size_at(&a->test, first), a->batch);
    TRY(et_training_agent_forward(a->agent, a->batch->views, 1, &outputs, &handle));
    logits = find_output(outputs, "output", a->batch->size, kClasses);
    if (logits != NULL) *correct += count_correct(logits, a->batch->labels, a->batch->size);
    et_values_free(outputs);
    TRY(et_training_agent_release(a->agent, handle)); /* no backward pass follows */
    if (logits == NULL) return false;
  }
  return true;
}

static bool make_paths(app* a) {
  const options* o = &a->options;
  a->training_model = join_path(o->artifact_dir, "training_model.onnx");
  a->eval_model = join_path(o->artifact_dir, "eval_model.onnx");
  a->optimizer_model = join_path(o->artifact_dir, "optimizer_model.onnx");
  a->initial_checkpoint = join_path(o->artifact_dir, "checkpoint");
  a->checkpoint = join_path(o->out_dir, "checkpoint");
  a->exported_model = join_path(o->out_dir, "model.onnx");
  return a->training_model && a->eval_model && a->optimizer_model && a->initial_checkpoint && a->checkpoint &&
         a->exported_model;
}

static bool make_directory(const char* path) {
  if (mkdir(path, 0777) == 0 || errno == EEXIST) return true;
  fprintf(stderr, "error: cannot create directory %s: %s\n", path, strerror(errno));
  return false;
}

static bool run(app* a) {
  const options* o = &a->options;
  const char* output_names[] = {"output"};
  et_session_options session_options;
  et_error* error;
  int64_t first_epoch = 0, epoch, total_steps, correct = 0, exported_correct = 0;
  const double start = now_seconds();

  if (!make_paths(a) || !make_directory(o->out_dir)) return false;
  et_session_options_init(&session_options);
  session_options.num_threads = o->threads;
  session_options.seed = kSeed;
  TRY(et_checkpoint_load(o->resume != NULL ? o->resume : a->initial_checkpoint, &a->state));
  if (o->resume != NULL) TRY(et_checkpoint_get_int_property(a->state, "epoch", &first_epoch));
  TRY(et_training_session_create(a->state, a->training_model, a->eval_model, a->optimizer_model, &session_options,
                                 &a->session));

  if (!load_dataset(o->data_dir, "train", o->limit, &a->train) ||
      !load_dataset(o->data_dir, "t10k", o->limit, &a->test))
    return false;
  a->batch = allocate(sizeof *a->batch);
  a->order = allocate((size_t)a->train.count * sizeof(int64_t));
  if (a->batch == NULL || a->order == NULL) return false;
  printf("data: %" PRId64 " training and %" PRId64 " test samples, loaded in %.1f s\n", a->train.count, a->test.count,
         now_seconds() - start);

  total_steps =
      o->total_steps > 0 ? o->total_steps : (first_epoch + o->epochs) * ((a->train.count + kBatch - 1) / kBatch);
  TRY(et_training_session_register_linear_lr_scheduler(a->session, 0, total_steps, o->learning_rate));
  if (o->resume != NULL) printf("resuming from %s after epoch %" PRId64 "\n", o->resume, first_epoch);

  for (epoch = first_epoch; epoch < first_epoch + o->epochs; ++epoch) {
    const double epoch_start = now_seconds();
    double train_loss = 0, test_loss = 0, train_seconds;
    float learning_rate = 0;
    if (!train_epoch(a, epoch, &train_loss)) return false;
    train_seconds = now_seconds() - epoch_start;
    if (!evaluate(a, &correct, &test_loss)) return false;
    TRY(et_training_session_get_learning_rate(a->session, &learning_rate));
    TRY(et_checkpoint_add_int_property(a->state, "epoch", epoch + 1));
    TRY(et_checkpoint_save(a->state, a->checkpoint, true));
    printf("epoch %" PRId64 ": train loss %.4f, %.0f samples/s, lr %.3g; test loss %.4f, test accuracy %.2f%% (%" PRId64
           "/%" PRId64 "); %.1f s\n",
           epoch + 1, train_loss, (double)a->train.count / train_seconds, learning_rate, test_loss,
           100.0 * (double)correct / (double)a->test.count, correct, a->test.count, now_seconds() - epoch_start);
    fflush(stdout);
  }
  printf("saved %s\n", a->checkpoint);

  TRY(et_training_session_export_model_for_inference(a->session, a->exported_model, output_names, 1));
  if (!o->check_export) {
    printf("exported %s; not re-run (--check-export 0)\n", a->exported_model);
    return true;
  }
  error = et_training_agent_create(a->exported_model, NULL, 0, &session_options, &a->agent);
  if (error != NULL && et_error_get_code(error) == ET_ERROR_NOT_IMPLEMENTED) { /* a device-only build: no autodiff */
    printf("exported %s; not re-run: %s\n", a->exported_model, et_error_get_message(error));
    et_error_free(error);
    return true;
  }
  TRY(error);
  if (!evaluate_exported(a, &exported_correct)) return false;
  printf("exported %s: test accuracy %.2f%% (%" PRId64 "/%" PRId64 ")\n", a->exported_model,
         100.0 * (double)exported_correct / (double)a->test.count, exported_correct, a->test.count);
  if (exported_correct != correct) {
    fprintf(stderr, "error: the exported model classifies %" PRId64 " test samples right, the eval model %" PRId64 "\n",
            exported_correct, correct);
    return false;
  }
  printf("total %.1f s\n", now_seconds() - start);
  return true;
}

static void free_app(app* a) {
  et_training_agent_free(a->agent);
  et_training_session_free(a->session);
  et_checkpoint_free(a->state);
  free_dataset(&a->train);
  free_dataset(&a->test);
  free(a->batch);
  free(a->order);
  free(a->training_model);
  free(a->eval_model);
  free(a->optimizer_model);
  free(a->initial_checkpoint);
  free(a->checkpoint);
  free(a->exported_model);
}

/* ---- command line ---- */

static bool parse_count(const char* flag, const char* text, int64_t minimum, int64_t maximum, int64_t* value) {
  char* end = NULL;
  long long parsed;
  errno = 0;
  parsed = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || parsed < minimum || parsed > maximum) {
    if (maximum == INT64_MAX) {
      fprintf(stderr, "error: %s needs an integer >= %" PRId64 ", got '%s'\n", flag, minimum, text);
    } else {
      fprintf(stderr, "error: %s needs an integer in [%" PRId64 ", %" PRId64 "], got '%s'\n", flag, minimum, maximum,
              text);
    }
    return false;
  }
  *value = parsed;
  return true;
}

static bool parse_options(int argc, char** argv, options* o) {
  int i, positional = 0;
  int64_t threads = 1, check_export = 1;
  o->epochs = 1;
  o->limit = 0;
  o->total_steps = 0;
  o->learning_rate = 1e-3f;
  o->resume = NULL;
  for (i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (strncmp(arg, "--", 2) != 0) {
      const char** slots[] = {&o->artifact_dir, &o->data_dir, &o->out_dir};
      if (positional == 3) {
        fprintf(stderr, "error: unexpected argument '%s'\n", arg);
        return false;
      }
      *slots[positional++] = arg;
      continue;
    }
    if (i + 1 == argc) {
      fprintf(stderr, "error: %s needs a value\n", arg);
      return false;
    }
    const char* value = argv[++i];
    if (strcmp(arg, "--epochs") == 0) {
      if (!parse_count(arg, value, 1, INT64_MAX, &o->epochs)) return false;
    } else if (strcmp(arg, "--limit") == 0) {
      if (!parse_count(arg, value, 1, INT64_MAX, &o->limit)) return false;
    } else if (strcmp(arg, "--total-steps") == 0) {
      if (!parse_count(arg, value, 1, INT64_MAX, &o->total_steps)) return false;
    } else if (strcmp(arg, "--threads") == 0) {
      if (!parse_count(arg, value, 1, 256, &threads)) return false;
    } else if (strcmp(arg, "--check-export") == 0) {
      if (!parse_count(arg, value, 0, 1, &check_export)) return false;
    } else if (strcmp(arg, "--resume") == 0) {
      o->resume = value;
    } else if (strcmp(arg, "--lr") == 0) {
      char* end = NULL;
      o->learning_rate = strtof(value, &end);
      if (end == value || *end != '\0' || !(o->learning_rate > 0)) {
        fprintf(stderr, "error: --lr needs a number > 0, got '%s'\n", value);
        return false;
      }
    } else {
      fprintf(stderr, "error: unknown option '%s'\n", arg);
      return false;
    }
  }
  o->threads = (int)threads;
  o->check_export = check_export != 0;
  if (positional != 3) fprintf(stderr, "error: expected ARTIFACT_DIR DATA_DIR OUT_DIR\n");
  return positional == 3;
}

int main(int argc, char** argv) {
  app a;
  bool ok;
  memset(&a, 0, sizeof a);
  if (!parse_options(argc, argv, &a.options)) {
    fprintf(stderr,
            "usage: %s ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N] [--resume CKPT] [--total-steps N]"
            " [--lr F] [--threads N] [--check-export 0|1]\n",
            argv[0]);
    return 2;
  }
  printf("edgetrain %s\n", et_version());
  ok = run(&a);
  free_app(&a);
  return ok ? 0 : 1;
}
