// Training data files the CLI reads (tools/dataset.*): the first byte picks .npy (even) or IDX
// (odd, gzip-compressed or not); the array then feeds one batch of a [batch, 4] float input.
#include "dataset.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  static fuzz::ScratchFile file(".array");
  if (size < 1) return 0;
  const bool idx = data[0] & 1;
  try {
    const std::string& path = file.Write(data + 1, size - 1);
    Dataset dataset;
    dataset.columns.push_back({"x", path, idx ? ReadIdx(path) : ReadDataArray(path)});
    dataset.size = dataset.columns[0].values.rank() ? dataset.columns[0].values.dim(0) : 0;
    ValueInfo input{"x", DataType::kFloat32, true, {Dim{-1, "batch"}, Dim{4, ""}}, false};
    if (dataset.size > 0) {
      std::vector<int64_t> rows = {0, dataset.size - 1};
      MakeBatch(dataset.columns[0], input, rows);
    }
  } catch (const Error&) {
  }
  return 0;
}
