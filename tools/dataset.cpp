#include "dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/npy.hpp"

namespace edgetrain {

namespace {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;
constexpr size_t kReadChunkBytes = size_t{1} << 20;
const char kNpyMagic[] = "\x93NUMPY";

// The whole file, decompressed when it is gzip (gzread passes other files through unchanged).
std::vector<uint8_t> ReadDecompressed(const std::string& path) {
  std::error_code ignored;
  ET_CHECK(std::filesystem::is_regular_file(path, ignored), ErrorCode::kIoError, "cannot open data file '", path, "'");
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  ET_CHECK(file != nullptr, ErrorCode::kIoError, "cannot open data file '", path, "'");
  std::vector<uint8_t> bytes;
  while (true) {
    ET_CHECK(bytes.size() <= kMaxTensorBytes, ErrorCode::kResourceExhausted, "data file '", path, "' holds more than ",
             kMaxTensorBytes, " bytes");
    size_t used = bytes.size();
    bytes.resize(used + kReadChunkBytes);
    int got = gzread(file.get(), bytes.data() + used, kReadChunkBytes);
    bytes.resize(used + std::max(got, 0));
    int status = Z_OK;
    const char* message = gzerror(file.get(), &status);
    ET_CHECK(got >= 0 && status == Z_OK, ErrorCode::kInvalidArgument, "data file '", path,
             "': corrupt or truncated gzip data (", message, ")");
    if (got == 0) return bytes;
  }
}

DataType IdxElementType(uint8_t code, const std::string& path) {
  switch (code) {
    case 0x08: return DataType::kUint8;
    case 0x09: return DataType::kInt8;
    case 0x0B: return DataType::kInt16;
    case 0x0C: return DataType::kInt32;
    case 0x0D: return DataType::kFloat32;
    case 0x0E: return DataType::kFloat64;
    default: Fail(ErrorCode::kInvalidArgument, "IDX file '", path, "': unknown element type code ", int{code});
  }
}

uint32_t BigEndianU32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The shape of one sample as `input` takes it (see MakeBatch).
Shape SampleShape(const DatasetColumn& column, const ValueInfo& input, int64_t batch) {
  const Shape& data_shape = column.values.shape();
  Shape row_shape(data_shape.begin() + 1, data_shape.end());
  if (!input.has_shape) return row_shape;
  const std::string mismatch = "input '" + input.name + "' " + DimsToString(input) + " cannot take samples of shape " +
                               ShapeToString(row_shape) + " from '" + column.file + "' " + ShapeToString(data_shape);
  ET_CHECK(!input.shape.empty(), ErrorCode::kInvalidArgument, mismatch, ": the input has no batch dimension");
  ET_CHECK(!input.shape[0].known() || input.shape[0].value == batch, ErrorCode::kInvalidArgument, "input '", input.name,
           "' ", DimsToString(input), " has a fixed batch size but the batch has ", batch, " samples");
  std::vector<Dim> sample_dims(input.shape.begin() + 1, input.shape.end());
  bool all_known = std::all_of(sample_dims.begin(), sample_dims.end(), [](const Dim& d) { return d.known(); });
  if (all_known) {
    Shape declared;
    for (const Dim& d : sample_dims) declared.push_back(d.value);
    ET_CHECK(NumElements(declared) == NumElements(row_shape), ErrorCode::kInvalidArgument, mismatch);
    return declared;
  }
  ET_CHECK(sample_dims.size() == row_shape.size(), ErrorCode::kInvalidArgument, mismatch);
  for (size_t i = 0; i < sample_dims.size(); ++i)
    ET_CHECK(!sample_dims[i].known() || sample_dims[i].value == row_shape[i], ErrorCode::kInvalidArgument, mismatch);
  return row_shape;
}

template <typename Source, typename Target>
void ConvertRows(const Source* source, Target* target, std::span<const int64_t> indices, int64_t row_elements,
                 const DatasetColumn& column, const ValueInfo& input) {
  constexpr bool kFloatSource = std::is_floating_point_v<Source>;
  constexpr bool kFloatTarget = std::is_floating_point_v<Target>;
  if constexpr (kFloatSource && !kFloatTarget) {
    Fail(ErrorCode::kInvalidArgument, "input '", input.name, "' takes ", DataTypeName(DataTypeOf<Target>()), " but '",
         column.file, "' holds ", DataTypeName(DataTypeOf<Source>()), " (floating-point data for an integer input)");
  } else {
    for (size_t row = 0; row < indices.size(); ++row) {
      const Source* in = source + indices[row] * row_elements;
      Target* out = target + static_cast<int64_t>(row) * row_elements;
      for (int64_t i = 0; i < row_elements; ++i) {
        if constexpr (std::is_same_v<Source, uint8_t> && kFloatTarget) {
          out[i] = static_cast<Target>(in[i]) / Target{255};  // pixels into [0, 1]
        } else if constexpr (!kFloatSource && !kFloatTarget) {
          ET_CHECK(std::in_range<Target>(in[i]), ErrorCode::kOutOfRange, "input '", input.name, "' (",
                   DataTypeName(DataTypeOf<Target>()), "): value ", +in[i], " of sample ", indices[row], " in '",
                   column.file, "' does not fit");
          out[i] = static_cast<Target>(in[i]);
        } else {
          out[i] = static_cast<Target>(in[i]);
        }
      }
    }
  }
}

}  // namespace

Tensor ReadIdx(const std::string& path) {
  std::vector<uint8_t> bytes = ReadDecompressed(path);
  ET_CHECK(bytes.size() < 6 || std::memcmp(bytes.data(), kNpyMagic, 6) != 0, ErrorCode::kNotImplemented, "'", path,
           "' is a compressed .npy file; decompress it first");
  ET_CHECK(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0, ErrorCode::kInvalidArgument, "'", path,
           "' is neither an IDX nor a .npy file (bad magic)");
  DataType dtype = IdxElementType(bytes[2], path);
  size_t rank = bytes[3];
  size_t header_bytes = 4 + 4 * rank;
  ET_CHECK(bytes.size() >= header_bytes, ErrorCode::kInvalidArgument, "IDX file '", path,
           "' is truncated: its header has ", rank, " dims but the file ends after ", bytes.size(), " bytes");
  Shape shape;
  uint64_t elements = 1;
  for (size_t i = 0; i < rank; ++i) {
    uint64_t dim = BigEndianU32(bytes.data() + 4 + 4 * i);
    shape.push_back(static_cast<int64_t>(dim));
    elements = dim == 0 || elements <= kMaxTensorBytes / dim ? elements * dim : kMaxTensorBytes + 1;
  }
  size_t element_size = DataTypeSize(dtype);
  uint64_t available = bytes.size() - header_bytes;
  ET_CHECK(elements <= kMaxTensorBytes / element_size, ErrorCode::kResourceExhausted, "IDX file '", path, "': dims ",
           ShapeToString(shape), " are larger than the ", kMaxTensorBytes, "-byte limit");
  ET_CHECK(elements * element_size == available, ErrorCode::kInvalidArgument, "IDX file '", path, "' ",
           available < elements * element_size ? "is truncated" : "has extra data", ": dims ", ShapeToString(shape),
           " need ", elements, " ", DataTypeName(dtype), " elements but it holds ", available, " bytes of data");
  Tensor tensor(dtype, shape, path);
  uint8_t* out = static_cast<uint8_t*>(tensor.raw());
  std::memcpy(out, bytes.data() + header_bytes, available);
  if constexpr (std::endian::native == std::endian::little) {
    for (uint64_t i = 0; element_size > 1 && i < elements; ++i)
      std::reverse(out + i * element_size, out + (i + 1) * element_size);
  }
  return tensor;
}

Tensor ReadDataArray(const std::string& path) {
  char magic[6] = {};
  std::ifstream file(path, std::ios::binary);
  file.read(magic, sizeof magic);
  if (file.good() && std::memcmp(magic, kNpyMagic, sizeof magic) == 0) return ReadNpy(path);
  return ReadIdx(path);
}

const DatasetColumn& Dataset::Column(const std::string& input) const {
  std::string names;
  for (const DatasetColumn& column : columns) {
    if (column.input == input) return column;
    names += (names.empty() ? "" : ", ") + column.input;
  }
  Fail(ErrorCode::kInvalidArgument, "no data for model input '", input, "' (the data feeds: ", names, ")");
}

void Dataset::KeepFirst(int64_t count) {
  ET_CHECK(count > 0, ErrorCode::kInvalidArgument, "the sample limit must be positive, got ", count);
  size = std::min(size, count);
}

std::vector<Tensor> Dataset::Batch(const std::vector<const ValueInfo*>& inputs,
                                   std::span<const int64_t> indices) const {
  for (int64_t index : indices)
    ET_CHECK(index >= 0 && index < size, ErrorCode::kOutOfRange, "sample ", index, " is outside the ", size,
             " samples of the data");
  std::vector<Tensor> batch;
  for (const ValueInfo* input : inputs) batch.push_back(MakeBatch(Column(input->name), *input, indices));
  return batch;
}

Dataset LoadDataset(const std::vector<std::pair<std::string, std::string>>& input_files) {
  ET_CHECK(!input_files.empty(), ErrorCode::kInvalidArgument, "no data files given");
  Dataset dataset;
  for (const auto& [input, file] : input_files) {
    for (const DatasetColumn& column : dataset.columns)
      ET_CHECK(column.input != input, ErrorCode::kInvalidArgument, "model input '", input, "' is given data twice: '",
               column.file, "' and '", file, "'");
    DatasetColumn column{input, file, ReadDataArray(file)};
    ET_CHECK(column.values.rank() >= 1, ErrorCode::kInvalidArgument, "'", file, "' for input '", input,
             "' holds a scalar; data needs a first dimension of samples");
    if (dataset.columns.empty()) dataset.size = column.values.dim(0);
    const DatasetColumn& first = dataset.columns.empty() ? column : dataset.columns.front();
    ET_CHECK(column.values.dim(0) == first.values.dim(0), ErrorCode::kInvalidArgument, "'", file, "' (input '", input,
             "') has ", column.values.dim(0), " samples but '", first.file, "' (input '", first.input, "') has ",
             first.values.dim(0));
    dataset.columns.push_back(std::move(column));
  }
  return dataset;
}

Tensor MakeBatch(const DatasetColumn& column, const ValueInfo& input, std::span<const int64_t> indices) {
  const int64_t rows = column.values.dim(0);
  for (int64_t index : indices)
    ET_CHECK(index >= 0 && index < rows, ErrorCode::kOutOfRange, "sample ", index, " is outside the ", rows,
             " samples of '", column.file, "'");
  const int64_t batch_size = static_cast<int64_t>(indices.size());
  Shape batch_shape = SampleShape(column, input, batch_size);
  batch_shape.insert(batch_shape.begin(), batch_size);
  DataType target = input.dtype == DataType::kUndefined ? column.values.dtype() : input.dtype;
  Tensor batch(target, batch_shape, "input '" + input.name + "'");
  const int64_t row_elements = NumElements(Shape(column.values.shape().begin() + 1, column.values.shape().end()));
  VisitNumeric(column.values.dtype(), "data file '" + column.file + "'", [&](auto source_tag) {
    using Source = typename decltype(source_tag)::type;
    VisitNumeric(target, "input '" + input.name + "'", [&](auto target_tag) {
      using Target = typename decltype(target_tag)::type;
      ConvertRows(column.values.data<Source>(), batch.data<Target>(), indices, row_elements, column, input);
    });
  });
  return batch;
}

uint64_t SplitMix64::Next() {
  state_ += kGoldenGamma;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch) {
  ET_CHECK(n >= 0, ErrorCode::kInvalidArgument, "cannot order ", n, " samples");
  SplitMix64 rng(seed ^ (static_cast<uint64_t>(epoch) * kGoldenGamma));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i >= 1; --i) std::swap(order[i], order[rng.Next() % static_cast<uint64_t>(i + 1)]);
  return order;
}

}  // namespace edgetrain
