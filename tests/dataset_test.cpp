#include "dataset.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "core/npy.hpp"
#include "test_util.hpp"

using namespace edgetrain;
namespace fs = std::filesystem;

namespace {

class DatasetFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgetrain_dataset_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string WritePlain(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }

  std::string WriteGzip(const std::string& name, const std::string& bytes) const {
    gzFile file = gzopen(Path(name).c_str(), "wb");
    EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(file);
    return Path(name);
  }

  fs::path dir_;
};

// An IDX file: magic, big-endian dims, then `payload` (already big-endian).
std::string Idx(uint8_t type_code, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string bytes = {0, 0, static_cast<char>(type_code), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>((d >> shift) & 0xFF);
  return bytes + payload;
}

template <typename T>
std::string BigEndian(const std::vector<T>& values) {
  std::string bytes;
  for (T v : values) {
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    for (size_t i = sizeof(T); i-- > 0;) bytes += raw[i];  // tests run on little-endian hosts
  }
  return bytes;
}

std::string Bytes(std::initializer_list<int> values) {
  std::string bytes;
  for (int v : values) bytes += static_cast<char>(v);
  return bytes;
}

// dims: a number, "?" (unknown) or a symbol.
ValueInfo Input(const std::string& name, DataType dtype, const std::vector<std::string>& dims) {
  ValueInfo info{name, dtype, true, {}};
  for (const std::string& d : dims) {
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      info.shape.push_back({std::stoll(d), ""});
    else
      info.shape.push_back({-1, d == "?" ? "" : d});
  }
  return info;
}

DatasetColumn Column(const std::string& input, Tensor values) { return {input, "data.idx", std::move(values)}; }

}  // namespace

TEST_F(DatasetFiles, ReadsPlainAndGzipIdx) {
  std::string bytes = Idx(0x08, {2, 3}, Bytes({0, 1, 2, 253, 254, 255}));
  for (const std::string& path : {WritePlain("u8.idx", bytes), WriteGzip("u8.idx.gz", bytes)}) {
    Tensor t = ReadIdx(path);
    EXPECT_EQ(t.dtype(), DataType::kUint8);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.ToVector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 253, 254, 255}));
    EXPECT_EQ(ReadDataArray(path).ToVector<uint8_t>(), t.ToVector<uint8_t>());
  }
}

TEST_F(DatasetFiles, ReadsEveryIdxElementTypeBigEndian) {
  EXPECT_EQ(ReadIdx(WritePlain("i8", Idx(0x09, {2}, Bytes({-5, 7})))).ToVector<int8_t>(), (std::vector<int8_t>{-5, 7}));
  EXPECT_EQ(ReadIdx(WritePlain("i16", Idx(0x0B, {2}, BigEndian<int16_t>({-2, 300})))).ToVector<int16_t>(),
            (std::vector<int16_t>{-2, 300}));
  EXPECT_EQ(ReadIdx(WriteGzip("i32", Idx(0x0C, {1, 2}, BigEndian<int32_t>({-70000, 1 << 20})))).ToVector<int32_t>(),
            (std::vector<int32_t>{-70000, 1 << 20}));
  Tensor f32 = ReadIdx(WritePlain("f32", Idx(0x0D, {3}, BigEndian<float>({1.5f, -0.25f, 1e-3f}))));
  EXPECT_EQ(f32.dtype(), DataType::kFloat32);
  EXPECT_EQ(f32.ToVector<float>(), (std::vector<float>{1.5f, -0.25f, 1e-3f}));
  EXPECT_EQ(ReadIdx(WritePlain("f64", Idx(0x0E, {1}, BigEndian<double>({3.25})))).ToVector<double>(),
            (std::vector<double>{3.25}));
}

TEST_F(DatasetFiles, BadIdxFilesAreErrorsNamingTheFile) {
  EXPECT_ERROR(ReadIdx(Path("missing.idx")), ErrorCode::kIoError, "missing.idx");
  EXPECT_ERROR(ReadDataArray(Path("missing.npy")), ErrorCode::kIoError, "missing.npy");
  EXPECT_ERROR(ReadIdx(WritePlain("magic.idx", Bytes({1, 0, 8, 1, 0, 0, 0, 0}))), ErrorCode::kInvalidArgument,
               "magic.idx' is neither an IDX nor a .npy file (bad magic)");
  EXPECT_ERROR(ReadIdx(WritePlain("empty.idx", "")), ErrorCode::kInvalidArgument, "empty.idx' is neither");
  EXPECT_ERROR(ReadIdx(WritePlain("type.idx", Idx(0x0A, {1}, "x"))), ErrorCode::kInvalidArgument,
               "type.idx': unknown element type code 10");
  EXPECT_ERROR(ReadIdx(WritePlain("header.idx", Idx(0x08, {4, 4}, "").substr(0, 9))), ErrorCode::kInvalidArgument,
               "header.idx' is truncated: its header has 2 dims but the file ends after 9 bytes");
  EXPECT_ERROR(ReadIdx(WritePlain("short.idx", Idx(0x0B, {2, 3}, std::string(11, 'x')))), ErrorCode::kInvalidArgument,
               "short.idx' is truncated: dims [2, 3] need 6 int16 elements but it holds 11 bytes of data");
  EXPECT_ERROR(ReadIdx(WriteGzip("long.idx.gz", Idx(0x08, {2}, "abc"))), ErrorCode::kInvalidArgument,
               "long.idx.gz' has extra data: dims [2] need 2 uint8 elements but it holds 3 bytes of data");
  EXPECT_ERROR(ReadIdx(WritePlain("huge.idx", Idx(0x0E, {0xFFFFFFFF, 0xFFFFFFFF}, "x"))), ErrorCode::kResourceExhausted,
               "huge.idx': dims [4294967295, 4294967295] are larger than");

  // A gzip stream cut short, and a compressed .npy.
  std::string payload(5000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7919 % 251);
  std::string gz_path = WriteGzip("cut.idx.gz", Idx(0x08, {5000}, payload));
  std::string compressed((std::istreambuf_iterator<char>(std::ifstream(gz_path, std::ios::binary).rdbuf())), {});
  EXPECT_ERROR(ReadIdx(WritePlain("cut.idx.gz", compressed.substr(0, compressed.size() / 2))),
               ErrorCode::kInvalidArgument, "cut.idx.gz': corrupt or truncated gzip data");
  WriteNpy(Path("a.npy"), Tensor::FromVector<float>({1, 2}, {2}));
  std::string npy((std::istreambuf_iterator<char>(std::ifstream(Path("a.npy"), std::ios::binary).rdbuf())), {});
  EXPECT_ERROR(ReadDataArray(WriteGzip("a.npy.gz", npy)), ErrorCode::kNotImplemented,
               "a.npy.gz' is a compressed .npy file");
}

TEST_F(DatasetFiles, LoadsNpyAndIdxColumnsOfTheSameLength) {
  WriteNpy(Path("x.npy"), Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  std::string labels = WriteGzip("y.idx.gz", Idx(0x08, {3}, Bytes({2, 0, 1})));
  Dataset data = LoadDataset({{"features", Path("x.npy")}, {"labels", labels}});
  EXPECT_EQ(data.size, 3);
  ASSERT_EQ(data.columns.size(), 2u);
  EXPECT_EQ(data.Column("features").values.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(data.Column("labels").file, labels);

  ValueInfo features = Input("features", DataType::kFloat32, {"batch", "2"});
  ValueInfo label_input = Input("labels", DataType::kInt64, {"batch"});
  std::vector<int64_t> indices = {2, 0};
  std::vector<Tensor> batch = data.Batch({&label_input, &features}, indices);
  EXPECT_EQ(batch[0].ToVector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(batch[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(batch[1].ToVector<float>(), (std::vector<float>{5, 6, 1, 2}));

  data.KeepFirst(2);
  EXPECT_EQ(data.size, 2);
  EXPECT_ERROR(data.Batch({&features}, indices), ErrorCode::kOutOfRange, "sample 2 is outside the 2 samples");
  EXPECT_ERROR(data.KeepFirst(0), ErrorCode::kInvalidArgument, "must be positive");
  ValueInfo other = Input("mask", DataType::kFloat32, {"batch"});
  EXPECT_ERROR(data.Batch({&other}, std::vector<int64_t>{0, 1}), ErrorCode::kInvalidArgument,
               "no data for model input 'mask' (the data feeds: features, labels)");
}

TEST_F(DatasetFiles, BadDatasetsAreErrorsNamingTheFiles) {
  std::string three = WritePlain("three.idx", Idx(0x08, {3}, Bytes({1, 2, 3})));
  std::string four = WritePlain("four.idx", Idx(0x08, {4, 1}, Bytes({1, 2, 3, 4})));
  EXPECT_ERROR(LoadDataset({{"x", three}, {"y", four}}), ErrorCode::kInvalidArgument,
               "four.idx' (input 'y') has 4 samples but '" + three + "' (input 'x') has 3");
  EXPECT_ERROR(LoadDataset({{"x", three}, {"x", three}}), ErrorCode::kInvalidArgument,
               "model input 'x' is given data twice");
  WriteNpy(Path("scalar.npy"), Tensor::Scalar<float>(1));
  EXPECT_ERROR(LoadDataset({{"x", Path("scalar.npy")}}), ErrorCode::kInvalidArgument,
               "scalar.npy' for input 'x' holds a scalar");
  EXPECT_ERROR(LoadDataset({}), ErrorCode::kInvalidArgument, "no data files given");
  EXPECT_ERROR(LoadDataset({{"x", three}, {"y", Path("none.idx")}}), ErrorCode::kIoError, "none.idx");
}

TEST(MakeBatch, ScalesPixelsAndReshapesToTheInput) {
  std::vector<uint8_t> pixels(12);
  std::iota(pixels.begin(), pixels.end(), 0);
  pixels[11] = 255;
  DatasetColumn images = Column("input", Tensor::FromVector<uint8_t>(pixels, {3, 2, 2}));
  std::vector<int64_t> indices = {2, 0};

  Tensor nchw = MakeBatch(images, Input("input", DataType::kFloat32, {"batch", "1", "2", "2"}), indices);
  EXPECT_EQ(nchw.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(nchw.ToVector<float>(),
            (std::vector<float>{8 / 255.0f, 9 / 255.0f, 10 / 255.0f, 1.0f, 0.0f, 1 / 255.0f, 2 / 255.0f, 3 / 255.0f}));
  Tensor flat = MakeBatch(images, Input("input", DataType::kFloat64, {"N", "4"}), indices);
  EXPECT_EQ(flat.shape(), (Shape{2, 4}));
  EXPECT_EQ(flat.ToVector<double>()[3], 1.0);
  EXPECT_EQ(flat.ToVector<double>()[5], 1 / 255.0);

  // Unknown dims take the data's; an unknown rank takes the data's shape.
  EXPECT_EQ(MakeBatch(images, Input("input", DataType::kFloat32, {"?", "2", "width"}), indices).shape(),
            (Shape{2, 2, 2}));
  ValueInfo any_shape{"input", DataType::kFloat32, false, {}};
  EXPECT_EQ(MakeBatch(images, any_shape, indices).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(MakeBatch(images, Input("input", DataType::kFloat32, {"2", "4"}), indices).shape(), (Shape{2, 4}));
  // Into an integer input uint8 is not scaled.
  EXPECT_EQ(MakeBatch(images, Input("input", DataType::kInt32, {"b", "4"}), indices).ToVector<int32_t>()[3], 255);
}

TEST(MakeBatch, CastsLabelsAndFloats) {
  DatasetColumn labels = Column("labels", Tensor::FromVector<uint8_t>({9, 0, 3}, {3}));
  std::vector<int64_t> indices = {0, 2, 2};
  Tensor as_int64 = MakeBatch(labels, Input("labels", DataType::kInt64, {"batch"}), indices);
  EXPECT_EQ(as_int64.dtype(), DataType::kInt64);
  EXPECT_EQ(as_int64.ToVector<int64_t>(), (std::vector<int64_t>{9, 3, 3}));
  EXPECT_EQ(MakeBatch(labels, Input("labels", DataType::kInt32, {"batch"}), indices).ToVector<int32_t>(),
            (std::vector<int32_t>{9, 3, 3}));
  // An input without a declared type takes the data as it is.
  EXPECT_EQ(MakeBatch(labels, Input("labels", DataType::kUndefined, {"batch"}), indices).ToVector<uint8_t>(),
            (std::vector<uint8_t>{9, 3, 3}));

  DatasetColumn doubles = Column("x", Tensor::FromVector<double>({0.5, -1.25}, {2, 1}));
  EXPECT_EQ(
      MakeBatch(doubles, Input("x", DataType::kFloat32, {"batch", "1"}), std::vector<int64_t>{1, 0}).ToVector<float>(),
      (std::vector<float>{-1.25f, 0.5f}));
  DatasetColumn ints = Column("x", Tensor::FromVector<int16_t>({-3, 200}, {2}));
  EXPECT_EQ(MakeBatch(ints, Input("x", DataType::kFloat32, {"batch"}), std::vector<int64_t>{0, 1}).ToVector<float>(),
            (std::vector<float>{-3.0f, 200.0f}));
}

TEST(MakeBatch, MismatchesAreErrorsNamingTheInput) {
  DatasetColumn images = Column("input", Tensor::Zeros(DataType::kUint8, {3, 28, 28}));
  std::vector<int64_t> indices = {0, 1};
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {"batch", "3", "28", "28"}), indices),
               ErrorCode::kInvalidArgument,
               "input 'input' [batch, 3, 28, 28] cannot take samples of shape [28, 28] from 'data.idx' [3, 28, 28]");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {"batch", "?", "27"}), indices),
               ErrorCode::kInvalidArgument, "input 'input' [batch, ?, 27] cannot take samples of shape [28, 28]");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {"batch", "?"}), indices),
               ErrorCode::kInvalidArgument, "input 'input' [batch, ?] cannot take samples");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {}), indices), ErrorCode::kInvalidArgument,
               "the input has no batch dimension");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {"64", "784"}), indices),
               ErrorCode::kInvalidArgument,
               "input 'input' [64, 784] has a fixed batch size but the batch has 2 samples");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat32, {"b", "784"}), std::vector<int64_t>{3}),
               ErrorCode::kOutOfRange, "sample 3 is outside the 3 samples of 'data.idx'");
  EXPECT_ERROR(MakeBatch(images, Input("input", DataType::kFloat16, {"b", "784"}), indices), ErrorCode::kNotImplemented,
               "input 'input'");

  DatasetColumn floats = Column("labels", Tensor::FromVector<float>({1, 2}, {2}));
  EXPECT_ERROR(MakeBatch(floats, Input("labels", DataType::kInt64, {"batch"}), indices), ErrorCode::kInvalidArgument,
               "input 'labels' takes int64 but 'data.idx' holds float32");
  DatasetColumn big = Column("labels", Tensor::FromVector<int64_t>({1, int64_t{1} << 40}, {2}));
  EXPECT_ERROR(MakeBatch(big, Input("labels", DataType::kInt32, {"batch"}), indices), ErrorCode::kOutOfRange,
               "input 'labels' (int32): value 1099511627776 of sample 1 in 'data.idx' does not fit");
  DatasetColumn negative = Column("labels", Tensor::FromVector<int8_t>({-1, 1}, {2}));
  EXPECT_ERROR(MakeBatch(negative, Input("labels", DataType::kUint8, {"batch"}), indices), ErrorCode::kOutOfRange,
               "value -1 of sample 0");
}

TEST(ShuffledOrder, SplitMix64MatchesTheReferenceOutputs) {
  SplitMix64 rng(1234567);  // test vector of the reference implementation
  for (uint64_t expected : {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                            4593380528125082431ull, 16408922859458223821ull})
    EXPECT_EQ(rng.Next(), expected);
  EXPECT_EQ(SplitMix64(0).Next(), 0xE220A8397B1DCDAFull);
}

TEST(ShuffledOrder, IsAPinnedPermutationPerSeedAndEpoch) {
  // The same sequence is pinned in tests/fashion_mnist_torch.py --self-test.
  std::vector<int64_t> order = ShuffledOrder(100, 42, 0);
  EXPECT_EQ(std::vector<int64_t>(order.begin(), order.begin() + 10),
            (std::vector<int64_t>{91, 99, 1, 14, 65, 55, 78, 70, 66, 9}));
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 100u);
  EXPECT_EQ(*std::max_element(order.begin(), order.end()), 99);
  EXPECT_EQ(ShuffledOrder(100, 42, 0), order);
  EXPECT_NE(ShuffledOrder(100, 42, 1), order);
  EXPECT_NE(ShuffledOrder(100, 43, 0), order);
  EXPECT_EQ(ShuffledOrder(5, 7, 3), (std::vector<int64_t>{3, 2, 4, 1, 0}));
  EXPECT_EQ(ShuffledOrder(1, 7, 0), (std::vector<int64_t>{0}));
  EXPECT_TRUE(ShuffledOrder(0, 7, 0).empty());
  EXPECT_ERROR(ShuffledOrder(-1, 7, 0), ErrorCode::kInvalidArgument, "cannot order -1 samples");
}

TEST(FashionMnist, ReadsTheRealFiles) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  ASSERT_TRUE(fs::exists(dir)) << "install the Debian package dataset-fashion-mnist (scripts/setup.sh)";
  for (auto [split, samples, first_label] : {std::tuple{"train", 60000, 9}, std::tuple{"t10k", 10000, 9}}) {
    Dataset data = LoadDataset(
        {{"input", dir + split + "-images-idx3-ubyte.gz"}, {"labels", dir + split + "-labels-idx1-ubyte.gz"}});
    EXPECT_EQ(data.size, samples);
    EXPECT_EQ(data.Column("input").values.shape(), (Shape{samples, 28, 28}));
    std::vector<uint8_t> labels = data.Column("labels").values.ToVector<uint8_t>();
    EXPECT_EQ(labels[0], first_label);
    EXPECT_EQ(*std::max_element(labels.begin(), labels.end()), 9);
    EXPECT_EQ(std::count(labels.begin(), labels.end(), 0), samples / 10);  // the classes are balanced

    ValueInfo input = Input("input", DataType::kFloat32, {"batch", "1", "28", "28"});
    ValueInfo label_input = Input("labels", DataType::kInt64, {"batch"});
    std::vector<Tensor> batch = data.Batch({&input, &label_input}, std::vector<int64_t>{0, samples - 1});
    EXPECT_EQ(batch[0].shape(), (Shape{2, 1, 28, 28}));
    EXPECT_EQ(batch[1].ToVector<int64_t>()[0], first_label);
    std::vector<float> pixels = batch[0].ToVector<float>();
    EXPECT_EQ(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
    EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
  }
  // Row 14 of the first training image, as Python's gzip module reads it.
  Tensor images = ReadIdx(dir + "train-images-idx3-ubyte.gz");
  const uint8_t* row = images.data<uint8_t>() + 14 * 28;
  EXPECT_EQ(std::vector<int>(row + 10, row + 16), (std::vector<int>{0, 0, 237, 226, 217, 223}));
}
