/* Fashion-MNIST for the ORT-style test apps (C99 and C++): the gzip'd IDX files, the sample order and the
 * batches of examples/c/fashion_mnist.c, so that the apps train exactly as the native C example does. */
#ifndef EDGETRAIN_TESTS_ORT_COMPAT_FASHION_MNIST_DATA_H_
#define EDGETRAIN_TESTS_ORT_COMPAT_FASHION_MNIST_DATA_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { kRows = 28, kColumns = 28, kPixels = kRows * kColumns, kClasses = 10, kBatch = 64 };
static const uint64_t kSeed = 0;
static const uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

typedef struct fm_dataset {
  int64_t count;
  unsigned char* images; /* count * kPixels */
  int64_t* labels;
} fm_dataset;

/* Reads DIR/NAME (an unsigned-byte IDX file with `rank` dims) and returns its payload; NULL after printing why. */
static unsigned char* fm_read_idx(const char* dir, const char* name, unsigned rank, int64_t* count,
                                  size_t* sample_size) {
  char path[4096];
  unsigned char header[4], dim[4];
  unsigned char* data = NULL;
  unsigned d;
  gzFile file;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  file = gzopen(path, "rb");
  if (file == NULL) {
    fprintf(stderr, "error: %s: cannot open\n", path);
    return NULL;
  }
  *sample_size = 1;
  if (gzread(file, header, 4) != 4 || header[2] != 0x08 || header[3] != rank) {
    fprintf(stderr, "error: %s: not an IDX file of unsigned bytes with %u dims\n", path, rank);
    gzclose(file);
    return NULL;
  }
  for (d = 0; d < rank; ++d) {
    uint32_t value;
    if (gzread(file, dim, 4) != 4) break;
    value = (uint32_t)dim[0] << 24 | (uint32_t)dim[1] << 16 | (uint32_t)dim[2] << 8 | (uint32_t)dim[3];
    if (d == 0)
      *count = value;
    else
      *sample_size *= value;
  }
  if (d == rank) data = (unsigned char*)malloc((size_t)*count * *sample_size);
  if (data != NULL && gzread(file, data, (unsigned)((size_t)*count * *sample_size)) !=
                          (int)((size_t)*count * *sample_size)) {
    free(data);
    data = NULL;
  }
  if (data == NULL) fprintf(stderr, "error: %s: truncated\n", path);
  gzclose(file);
  return data;
}

/* <split>-images-idx3-ubyte.gz and its labels, the first `limit` samples (0: all); 0 after printing why. */
static int fm_load(const char* dir, const char* split, int64_t limit, fm_dataset* set) {
  char name[64];
  int64_t label_count = 0, i;
  size_t image_size = 0, label_size = 0;
  unsigned char* label_bytes;
  snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", split);
  set->images = fm_read_idx(dir, name, 3, &set->count, &image_size);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", split);
  label_bytes = set->images != NULL ? fm_read_idx(dir, name, 1, &label_count, &label_size) : NULL;
  if (label_bytes == NULL || image_size != kPixels || label_count != set->count) {
    if (label_bytes != NULL) fprintf(stderr, "error: %s: %s images and labels do not match\n", dir, split);
    free(set->images);
    free(label_bytes);
    return 0;
  }
  if (limit > 0 && limit < set->count) set->count = limit;
  set->labels = (int64_t*)malloc((size_t)set->count * sizeof(int64_t));
  for (i = 0; i < set->count; ++i) set->labels[i] = label_bytes[i];
  free(label_bytes);
  return 1;
}

static void fm_free(fm_dataset* set) {
  free(set->images);
  free(set->labels);
}

static uint64_t fm_splitmix64_next(uint64_t* state) {
  uint64_t z = (*state += kGoldenGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The sample order of epoch `epoch`: the example's Fisher-Yates shuffle. */
static void fm_shuffled_order(int64_t* order, int64_t count, int64_t epoch) {
  uint64_t state = kSeed ^ ((uint64_t)epoch * kGoldenGamma);
  int64_t i;
  for (i = 0; i < count; ++i) order[i] = i;
  for (i = count - 1; i >= 1; --i) {
    int64_t j = (int64_t)(fm_splitmix64_next(&state) % (uint64_t)(i + 1)), swapped = order[i];
    order[i] = order[j];
    order[j] = swapped;
  }
}

/* The seed of epoch `epoch`'s Dropout masks, as the example sets it. */
static int64_t fm_epoch_seed(int64_t epoch) {
  uint64_t state = kSeed ^ (uint64_t)(epoch + 1);
  return (int64_t)fm_splitmix64_next(&state);
}

static int64_t fm_batch_size(const fm_dataset* set, int64_t first) {
  return set->count - first < kBatch ? set->count - first : (int64_t)kBatch;
}

/* Samples order[first..first+size) (first.. when order is NULL): pixels / 255 and labels. */
static void fm_fill(const fm_dataset* set, const int64_t* order, int64_t first, int64_t size, float* pixels,
                    int64_t* labels) {
  int64_t i, p;
  for (i = 0; i < size; ++i) {
    int64_t sample = order != NULL ? order[first + i] : first + i;
    const unsigned char* image = set->images + sample * kPixels;
    for (p = 0; p < kPixels; ++p) pixels[i * kPixels + p] = (float)image[p] / 255.0f;
    labels[i] = set->labels[sample];
  }
}

static int64_t fm_count_correct(const float* logits, const int64_t* labels, int64_t rows) {
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

#endif /* EDGETRAIN_TESTS_ORT_COMPAT_FASHION_MNIST_DATA_H_ */
