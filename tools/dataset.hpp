// Training data for the CLI: arrays read from IDX (MNIST format, optionally gzip-compressed) or .npy
// files, each feeding one model input, cut into batches converted to the input's dtype and shape.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"

namespace edgetrain {

// An IDX file: magic 00 00 TYPE RANK, RANK big-endian uint32 dims, then big-endian elements.
// TYPE 08 uint8, 09 int8, 0B int16, 0C int32, 0D float32, 0E float64. A gzip file (1f 8b) is
// decompressed. Throws kIoError when the file cannot be read, kInvalidArgument naming the file
// when the magic is wrong, the data is truncated or there is more data than the dims say.
Tensor ReadIdx(const std::string& path);

// A .npy file (by its magic "\x93NUMPY") or else an IDX file.
Tensor ReadDataArray(const std::string& path);

struct DatasetColumn {
  std::string input;  // the model input it feeds
  std::string file;   // where it was read from, for messages
  Tensor values;      // [samples, per-sample dims...]
};

struct Dataset {
  std::vector<DatasetColumn> columns;
  int64_t size = 0;  // samples; every column's first dimension is at least this

  // Throws kInvalidArgument naming `input` and the columns there are when it has none.
  const DatasetColumn& Column(const std::string& input) const;
  // Uses only the first `count` samples (fewer when the data has fewer).
  void KeepFirst(int64_t count);
  // One batch tensor per model input, in `inputs` order, from the samples `indices`.
  std::vector<Tensor> Batch(const std::vector<const ValueInfo*>& inputs, std::span<const int64_t> indices) const;
};

// Reads (input name, file) pairs. Throws kInvalidArgument naming both files when their first
// dimensions differ, and naming the input when it is given twice or its array has rank 0.
Dataset LoadDataset(const std::vector<std::pair<std::string, std::string>>& input_files);

// The batch for `input` of rows `indices` of `column`, as the input declares it:
// - dtype: uint8 into a float type is scaled by 1/255; other numbers are cast. Integers into an
//   integer type must fit it (kOutOfRange otherwise); floats never go into an integer type.
// - shape: [indices.size(), per-sample shape]; the per-sample shape is the input's shape after its
//   batch dim (the column's own when the input's rank or a dim is unknown) and must hold as many
//   elements as one row of the column, so [N,28,28] data feeds [batch,1,28,28] or [batch,784].
// Errors name the input, its declared shape and the file's shape.
Tensor MakeBatch(const DatasetColumn& column, const ValueInfo& input, std::span<const int64_t> indices);

// SplitMix64 (Steele, Lea, Flood 2014), wrapping uint64 arithmetic:
//   state += 0x9E3779B97F4A7C15; z = state;
//   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//   return z ^ (z >> 31);
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();

 private:
  uint64_t state_;
};

// The sample order of one epoch (epochs count from 0), the same on every platform:
//   rng = SplitMix64(seed ^ (uint64(epoch) * 0x9E3779B97F4A7C15)); order = [0, 1, ..., n-1];
//   for i = n-1 down to 1: j = rng.Next() % (i + 1); swap(order[i], order[j]).
// tests/fashion_mnist_torch.py reproduces it in Python.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace edgetrain
