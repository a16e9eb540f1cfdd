#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/odtc_generated.h"
#include "test_util.hpp"

using namespace edgetrain;
namespace fs = std::filesystem;

namespace {

const fs::path kOrtArtifacts = EDGETRAIN_ORT_ARTIFACTS;

struct ExpectedParam {
  std::string name;
  Shape dims;
  double sum;    // float64 sum of the float32 values
  float first;   // first element
};

struct OrtSample {
  std::string file;  // relative to kOrtArtifacts
  int32_t version;
  std::vector<ExpectedParam> trainable;
  std::vector<ExpectedParam> frozen;
};

// Expected contents of ORT's sample checkpoints. Names, dims and versions come from each folder's
// inspect.json (written by /work/shared/peers/inspect_artifacts.py); sums and first elements were
// computed with numpy from the raw_data that inspect_artifacts.py's flatbuffer reader extracts.
const std::vector<OrtSample>& OrtSamples() {
  static const std::vector<OrtSample> samples = {
      {"custom_ops/checkpoint", 2,
       {{"onnx::gemm.bias::2", {10}, 0.31120244413614273, -1.1708892583847046f},
        {"onnx::gemm.weight::1", {5, 10}, 3.517355243835482, 0.8408414721488953f}},
       {}},
      {"eeg_cnn/checkpoint", 2,
       {{"classifier.0.weight", {100, 128, 16}, -3.9858092776519705, 0.004246745724231005f},
        {"classifier.0.bias", {100}, 0.2081079488270916, -0.0011114438530057669f},
        {"classifier.1.weight", {2, 100, 1}, -0.829765094909817, -0.1573028862476349f},
        {"classifier.1.bias", {2}, -0.05450592841953039, 0.012645878829061985f}},
       {{"onnx::Conv_57", {128, 18, 3}, -1554.1414117665263, 0.4679769277572632f},
        {"onnx::Conv_58", {128}, 0.6426357912132517, 0.004454732406884432f},
        {"onnx::Conv_60", {128, 128, 3}, -8924.71807726835, 3.42106294631958f},
        {"onnx::Conv_61", {128}, 83.09167671576142, 0.7033932209014893f},
        {"onnx::Conv_63", {128, 128, 3}, 112.50100596997129, 0.14416201412677765f},
        {"onnx::Conv_64", {128}, -58.06915539968759, 0.6913031339645386f}}},
      {"lenet_cnn/checkpoint", 2,
       {{"conv1.weight", {6, 3, 5, 5}, -1.7372359819710255, -0.03266150504350662f},
        {"conv1.bias", {6}, -0.11552713066339493, 0.0530131459236145f},
        {"conv2.weight", {16, 6, 5, 5}, -1.1961354464292526, 0.02109307050704956f},
        {"conv2.bias", {16}, -0.02147510275244713, -0.01357058435678482f},
        {"fc1.weight", {120, 400}, -12.315845819190145, -0.0031478293240070343f},
        {"fc1.bias", {120}, -0.2166082262992859, 0.020629528909921646f},
        {"fc2.weight", {84, 120}, 1.6837372742593288, 0.08712421357631683f},
        {"fc2.bias", {84}, 0.17379017174243927, -0.014530912041664124f},
        {"fc3.weight", {2, 84}, 0.7939803898334503, 0.08649124950170517f},
        {"fc3.bias", {2}, -0.07908845692873001, -0.08498021215200424f}},
       {}},
      {"mnist_webdemo_v1/checkpoint", 1,
       {{"fc1.weight", {500, 784}, -9.646032478660345, 0.025640979409217834f},
        {"fc1.bias", {500}, -0.33798155561089516, 0.015497438609600067f},
        {"fc2.weight", {10, 500}, 2.6949555054306984, -0.02902529574930668f},
        {"fc2.bias", {10}, -0.14761649817228317, -0.037105489522218704f}},
       {}},
      {"ort_format/checkpoint", 2,
       {{"fc2.bias", {5}, 0.026270398870110512, -0.195468932390213f},
        {"fc2.weight", {5, 20}, -1.123135472415015, -0.028520993888378143f}},
       {{"fc1.bias", {20}, 2.1349802874028683, 0.0885000005364418f},
        {"fc1.weight", {20, 10}, 1.2176798643486109, -0.018938513472676277f}}},
      {"training_api/checkpoint.ckpt", 2,
       {{"fc1.bias", {500}, -0.9135427044384414, 0.02458379976451397f},
        {"fc1.weight", {500, 784}, -12.007437785971064, -0.025190064683556557f},
        {"fc2.bias", {10}, -0.025550727732479572, 0.010344088077545166f},
        {"fc2.weight", {10, 500}, 2.5515673453235195, -0.022691288962960243f}},
       {}},
  };
  return samples;
}

// A fresh directory per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("edgetrain_checkpoint_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string PathOf(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> DirectoryEntries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

void ExpectSameTensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what << ": bytes differ";
}

void ExpectSameTensors(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    ExpectSameTensor(tensor, b.at(name), name);
  }
}

void ExpectSameCheckpoint(const Checkpoint& a, const Checkpoint& b) {
  ExpectSameTensors(a.trainable, b.trainable);
  ExpectSameTensors(a.frozen, b.frozen);
  EXPECT_EQ(a.is_nominal, b.is_nominal);
  EXPECT_EQ(a.nominal_trainable, b.nominal_trainable);
  EXPECT_EQ(a.nominal_frozen, b.nominal_frozen);
  EXPECT_EQ(a.properties, b.properties);
  ASSERT_EQ(a.optimizer.has_value(), b.optimizer.has_value());
  if (!a.optimizer) return;
  EXPECT_EQ(a.optimizer->group_name, b.optimizer->group_name);
  EXPECT_EQ(a.optimizer->step, b.optimizer->step);
  EXPECT_EQ(a.optimizer->initial_learning_rate, b.optimizer->initial_learning_rate);
  ASSERT_EQ(a.optimizer->momentums.size(), b.optimizer->momentums.size());
  for (const auto& [name, list] : a.optimizer->momentums) {
    ASSERT_TRUE(b.optimizer->momentums.count(name)) << name;
    const auto& other = b.optimizer->momentums.at(name);
    ASSERT_EQ(list.size(), other.size()) << name;
    for (size_t i = 0; i < list.size(); ++i) ExpectSameTensor(list[i], other[i], name + " momentum");
  }
}

template <typename T>
Tensor Iota(Shape shape, double start, double step) {
  Tensor t(DataTypeOf<T>(), std::move(shape));
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(start + step * static_cast<double>(i));
  return t;
}

// A checkpoint with several element types, AdamW state and properties of every kind.
Checkpoint RichCheckpoint() {
  Checkpoint c;
  c.trainable["layer.weight"] = Iota<float>({3, 4}, -1.5, 0.25);
  c.trainable["layer.bias"] = Iota<double>({3}, 0.1, 0.2);
  c.trainable["a_first"] = Iota<float>({}, 7.0, 0.0);
  c.frozen["embedding.ids"] = Iota<int64_t>({2, 2}, -3, 1000000000000.0);
  c.frozen["mask"] = Iota<bool>({5}, 0, 1);
  c.frozen["bytes"] = Iota<uint8_t>({7}, 249, 1);  // up to 255
  c.frozen["counts"] = Iota<int32_t>({2, 0, 3}, 0, 1);  // zero elements
  Tensor half(DataType::kFloat16, {2});
  half.data<Float16>()[0] = Float16(1.5f);
  half.data<Float16>()[1] = Float16(-2.25f);
  c.frozen["half"] = half;
  OptimizerState opt;
  opt.step = 42;
  opt.initial_learning_rate = 1e-3f;
  for (const char* name : {"layer.weight", "layer.bias", "a_first"}) {
    const Tensor& p = c.trainable[name];
    Tensor m1 = p.Clone(), m2 = p.Clone();
    if (p.dtype() == DataType::kFloat32) m2.data<float>()[0] = 0.5f;
    opt.momentums[name] = {m1, m2};
  }
  c.optimizer = opt;
  c.properties["epoch"] = int64_t{12};
  c.properties["big"] = int64_t{-9000000000000};
  c.properties["best_score"] = 0.875f;
  c.properties["model_name"] = std::string("lenet \xce\xbb");
  c.properties["empty"] = std::string();
  return c;
}

// Builds an ODTC buffer by hand, for inputs our writer never produces.
struct RawTensor {
  std::string name;
  std::vector<int64_t> dims;
  odtc::TensorDataType dtype = odtc::TensorDataType::FLOAT;
  std::vector<uint8_t> raw;
};

std::vector<uint8_t> BuildRaw(int32_t version, const std::vector<RawTensor>& trainable, int optimizer_groups = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<odtc::Tensor>> tensors;
  for (const auto& t : trainable) {
    tensors.push_back(odtc::CreateTensorDirect(fbb, t.name.c_str(), nullptr, &t.dims, t.dtype, &t.raw));
  }
  auto module = odtc::CreateModuleStateDirect(fbb, &tensors, nullptr);
  std::vector<flatbuffers::Offset<odtc::OptimizerGroup>> groups;
  for (int i = 0; i < optimizer_groups; ++i) groups.push_back(odtc::CreateOptimizerGroupDirect(fbb, "group"));
  auto root = odtc::CreateCheckpointDirect(fbb, version, module, &groups);
  odtc::FinishCheckpointBuffer(fbb, root);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace

TEST(CheckpointOrt, LoadsEverySampleWithExpectedContents) {
  ASSERT_TRUE(fs::exists(kOrtArtifacts)) << "no ORT artifacts at " << kOrtArtifacts << " (shared/ must sit beside the project)";
  for (const auto& sample : OrtSamples()) {
    SCOPED_TRACE(sample.file);
    Checkpoint c = LoadCheckpoint((kOrtArtifacts / sample.file).string());
    EXPECT_EQ(c.version, sample.version);
    EXPECT_FALSE(c.is_nominal);
    EXPECT_FALSE(c.optimizer.has_value());  // ORT's generate_artifacts writes no optimizer state
    EXPECT_TRUE(c.properties.empty());
    auto check = [](const std::map<std::string, Tensor>& got, const std::vector<ExpectedParam>& want) {
      ASSERT_EQ(got.size(), want.size());
      for (const auto& param : want) {
        SCOPED_TRACE(param.name);
        ASSERT_TRUE(got.count(param.name));
        const Tensor& t = got.at(param.name);
        EXPECT_EQ(t.dtype(), DataType::kFloat32);
        EXPECT_EQ(t.shape(), param.dims);
        double sum = 0;
        for (float v : t.ToVector<float>()) sum += v;
        EXPECT_NEAR(sum, param.sum, 1e-9 * std::max(1.0, std::abs(param.sum)) * 100);
        EXPECT_EQ(t.data<float>()[0], param.first);
      }
    };
    check(c.trainable, sample.trainable);
    check(c.frozen, sample.frozen);
  }
}

TEST_F(CheckpointTest, OrtSamplesRoundTripByteForByte) {
  ASSERT_TRUE(fs::exists(kOrtArtifacts)) << "no ORT artifacts at " << kOrtArtifacts << " (shared/ must sit beside the project)";
  for (const auto& sample : OrtSamples()) {
    SCOPED_TRACE(sample.file);
    Checkpoint original = LoadCheckpoint((kOrtArtifacts / sample.file).string());
    std::string path = PathOf("resaved");
    SaveCheckpoint(original, path);
    Checkpoint reloaded = LoadCheckpoint(path);
    EXPECT_EQ(reloaded.version, 2);  // version-1 input is written as version 2
    ExpectSameCheckpoint(original, reloaded);
    // Our output is a fixed point: serialising what we read back gives the same bytes.
    EXPECT_EQ(SerializeCheckpoint(reloaded), ReadBytes(path));
  }
}

TEST_F(CheckpointTest, RichCheckpointRoundTripsThroughFileAndMemory) {
  Checkpoint original = RichCheckpoint();
  std::string path = PathOf("rich.ckpt");
  SaveCheckpoint(original, path);
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"rich.ckpt"});
  ExpectSameCheckpoint(original, LoadCheckpoint(path));

  std::vector<uint8_t> bytes = SerializeCheckpoint(original);
  EXPECT_EQ(bytes, ReadBytes(path));
  ExpectSameCheckpoint(original, LoadCheckpointFromBuffer(bytes.data(), bytes.size()));
  // A misaligned caller buffer is fine too.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  ExpectSameCheckpoint(original, LoadCheckpointFromBuffer(shifted.data() + 1, bytes.size()));
}

TEST_F(CheckpointTest, OptimizerStateCanBeLeftOut) {
  Checkpoint original = RichCheckpoint();
  SaveCheckpoint(original, PathOf("no_opt"), /*include_optimizer_state=*/false);
  Checkpoint reloaded = LoadCheckpoint(PathOf("no_opt"));
  EXPECT_FALSE(reloaded.optimizer.has_value());
  ExpectSameTensors(original.trainable, reloaded.trainable);
  EXPECT_EQ(original.properties, reloaded.properties);
}

TEST(CheckpointFormat, WritesVersion2WithSortedTensorsAndOrtLayout) {
  Checkpoint c = RichCheckpoint();
  std::vector<uint8_t> bytes = SerializeCheckpoint(c);
  ASSERT_TRUE(odtc::CheckpointBufferHasIdentifier(bytes.data()));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()) + 4, 4), "ODTC");
  const odtc::Checkpoint* root = odtc::GetCheckpoint(bytes.data());
  EXPECT_EQ(root->version(), 2);
  std::vector<std::string> names;
  for (const auto* t : *root->module_state()->requires_grad_params()) names.push_back(t->name()->str());
  EXPECT_EQ(names, (std::vector<std::string>{"a_first", "layer.bias", "layer.weight"}));
  names.clear();
  for (const auto* t : *root->module_state()->frozen_params()) names.push_back(t->name()->str());
  EXPECT_EQ(names, (std::vector<std::string>{"bytes", "counts", "embedding.ids", "half", "mask"}));
  EXPECT_FALSE(root->module_state()->is_nominal_state());
  EXPECT_FALSE(root->module_state()->has_external_data());
  const auto* tensor = root->module_state()->requires_grad_params()->Get(2);
  EXPECT_EQ(tensor->data_type(), odtc::TensorDataType::FLOAT);
  EXPECT_EQ(tensor->raw_data()->size(), 48u);
  EXPECT_EQ(tensor->external_data_offset(), -1);
  ASSERT_EQ(root->optimizer_groups()->size(), 1u);
  const auto* group = root->optimizer_groups()->Get(0);
  EXPECT_EQ(group->group_name()->str(), "group0");
  EXPECT_EQ(group->step(), 42);
  EXPECT_EQ(group->optimizer_states()->Get(0)->param_name()->str(), "a_first");
  EXPECT_EQ(group->optimizer_states()->Get(0)->momentums()->size(), 2u);
  EXPECT_EQ(root->property_bag()->ints()->size(), 2u);
  EXPECT_EQ(root->property_bag()->floats()->size(), 1u);
  EXPECT_EQ(root->property_bag()->strings()->size(), 2u);
}

TEST_F(CheckpointTest, NominalCheckpointRoundTrips) {
  Checkpoint c;
  c.is_nominal = true;
  c.nominal_trainable = {{"fc.weight", DataType::kFloat32}, {"fc.bias", DataType::kFloat32}};
  c.nominal_frozen = {{"table", DataType::kFloat64}};
  c.properties["note"] = std::string("nominal");
  SaveCheckpoint(c, PathOf("nominal"));
  Checkpoint reloaded = LoadCheckpoint(PathOf("nominal"));
  EXPECT_TRUE(reloaded.is_nominal);
  EXPECT_TRUE(reloaded.trainable.empty());
  EXPECT_TRUE(reloaded.frozen.empty());
  ExpectSameCheckpoint(c, reloaded);

  std::vector<uint8_t> bytes = ReadBytes(PathOf("nominal"));
  const auto* module = odtc::GetCheckpoint(bytes.data())->module_state();
  EXPECT_TRUE(module->is_nominal_state());
  for (const auto* t : *module->requires_grad_params()) {
    EXPECT_EQ(t->dims(), nullptr);
    EXPECT_EQ(t->raw_data(), nullptr);
  }
}

TEST_F(CheckpointTest, FullCheckpointSavedAsNominalKeepsNamesAndTypes) {
  Checkpoint c = RichCheckpoint();
  c.is_nominal = true;
  std::vector<uint8_t> bytes = SerializeCheckpoint(c, /*include_optimizer_state=*/false);
  Checkpoint reloaded = LoadCheckpointFromBuffer(bytes.data(), bytes.size());
  EXPECT_TRUE(reloaded.is_nominal);
  EXPECT_EQ(reloaded.nominal_trainable.size(), 3u);
  EXPECT_EQ(reloaded.nominal_trainable.at("layer.bias"), DataType::kFloat64);
  EXPECT_EQ(reloaded.nominal_frozen.at("half"), DataType::kFloat16);
}

TEST_F(CheckpointTest, ExternalDataRoundTrips) {
  Checkpoint original = RichCheckpoint();
  std::string path = PathOf("ext.ckpt");
  SaveCheckpoint(original, path, true, /*external_data=*/true);
  EXPECT_EQ(DirectoryEntries(), (std::vector<std::string>{"ext.ckpt", "ext.ckpt.data"}));
  ExpectSameCheckpoint(original, LoadCheckpoint(path));

  std::vector<uint8_t> bytes = ReadBytes(path);
  const odtc::Checkpoint* root = odtc::GetCheckpoint(bytes.data());
  EXPECT_TRUE(root->module_state()->has_external_data());
  for (const auto* list : {root->module_state()->requires_grad_params(), root->module_state()->frozen_params()}) {
    for (const auto* t : *list) {
      EXPECT_EQ(t->raw_data(), nullptr);
      int64_t alignment = (t->data_type() == odtc::TensorDataType::INT64 ||
                           t->data_type() == odtc::TensorDataType::DOUBLE) ? 8 : 4;
      EXPECT_GE(t->external_data_offset(), 0);
      EXPECT_EQ(t->external_data_offset() % alignment, 0) << t->name()->str();
    }
  }
  EXPECT_ERROR(LoadCheckpointFromBuffer(bytes.data(), bytes.size(), "ext in memory"),
               ErrorCode::kInvalidArgument, "'ext in memory' keeps its tensor data in an external file");

  // A truncated side file is an error naming the tensor, a missing one names the side file.
  fs::resize_file(path + ".data", 8);
  EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kInvalidModel, "lies outside");
  fs::remove(path + ".data");
  EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kIoError, path + ".data");

  // Saving the same path without external data removes the stale side file.
  SaveCheckpoint(original, path, true, true);
  SaveCheckpoint(original, path);
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"ext.ckpt"});
  ExpectSameCheckpoint(original, LoadCheckpoint(path));
}

TEST_F(CheckpointTest, FailedSaveLeavesNoFileAndNamesThePath) {
  Checkpoint c = RichCheckpoint();
  std::string missing_dir = PathOf("no/such/dir/ckpt");
  EXPECT_ERROR(SaveCheckpoint(c, missing_dir), ErrorCode::kIoError, missing_dir);
  EXPECT_ERROR(SaveCheckpoint(c, missing_dir, true, true), ErrorCode::kIoError, missing_dir);
  EXPECT_TRUE(DirectoryEntries().empty());

  // The temporary file is written, but the rename onto a directory fails: nothing is left over.
  fs::create_directories(PathOf("taken"));
  fs::path blocker = dir_ / "taken" / "keep";
  WriteBytes(blocker.string(), "x", 1);
  EXPECT_ERROR(SaveCheckpoint(c, PathOf("taken")), ErrorCode::kIoError, PathOf("taken"));
  EXPECT_EQ(DirectoryEntries(), std::vector<std::string>{"taken"});

  // A failed save keeps the previous checkpoint intact.
  std::string path = PathOf("good");
  SaveCheckpoint(c, path);
  std::vector<uint8_t> before = ReadBytes(path);
  Checkpoint broken = c;
  broken.trainable["undefined"] = Tensor();
  EXPECT_ERROR(SaveCheckpoint(broken, path), ErrorCode::kInvalidArgument, "'undefined'");
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_EQ(DirectoryEntries(), (std::vector<std::string>{"good", "taken"}));
}

// A load hands each tensor's file pages back once it has copied them (CheckpointFile): a tensor whose data another
// tensor's table points at too (a file our writer never makes) is read from the file again, not from the pages
// already handed back (they would read as zeros). Large tensors, so that whole pages are handed back.
TEST_F(CheckpointTest, TensorsSharingTheirDataBothLoadIt) {
  std::vector<float> values(20000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 101) + 1.0f;
  const std::vector<uint8_t> raw = FloatBytes(values);
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<int64_t> dims = {20000};
  auto data = fbb.CreateVector(raw);
  std::vector<flatbuffers::Offset<odtc::Tensor>> tensors;
  for (const char* name : {"a", "b"}) {
    auto dims_offset = fbb.CreateVector(dims);
    tensors.push_back(odtc::CreateTensor(fbb, fbb.CreateString(name), 0, dims_offset, odtc::TensorDataType::FLOAT, data));
  }
  auto module = odtc::CreateModuleStateDirect(fbb, &tensors, nullptr);
  odtc::FinishCheckpointBuffer(fbb, odtc::CreateCheckpointDirect(fbb, 2, module, nullptr));
  const std::string path = PathOf("shared_data");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(fbb.GetBufferPointer()), static_cast<std::streamsize>(fbb.GetSize()));
  const Checkpoint loaded = LoadCheckpoint(path);
  ASSERT_EQ(loaded.trainable.size(), 2u);
  EXPECT_EQ(loaded.trainable.at("a").ToVector<float>(), values);
  EXPECT_EQ(loaded.trainable.at("b").ToVector<float>(), values);
}

TEST_F(CheckpointTest, MissingFileOrDirectoryIsAnIoError) {
  EXPECT_ERROR(LoadCheckpoint(PathOf("absent")), ErrorCode::kIoError, PathOf("absent"));
  EXPECT_ERROR(LoadCheckpoint(dir_.string()), ErrorCode::kIoError, "is a directory");
}

TEST_F(CheckpointTest, TruncatedFileIsRejectedByTheVerifier) {
  std::vector<uint8_t> bytes = SerializeCheckpoint(RichCheckpoint());
  std::string path = PathOf("truncated");
  WriteBytes(path, bytes.data(), bytes.size() / 2);
  EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kInvalidModel, "checkpoint '" + path + "' is corrupt or truncated");
  WriteBytes(path, bytes.data(), 5);
  EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kInvalidModel, "checkpoint '" + path + "' is truncated (5 bytes)");
  WriteBytes(path, bytes.data(), 0);
  EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kInvalidModel, "is truncated (0 bytes)");
}

TEST_F(CheckpointTest, CorruptBytesAreRejectedByTheVerifier) {
  std::vector<uint8_t> bytes = SerializeCheckpoint(RichCheckpoint());
  {
    std::vector<uint8_t> bad = bytes;
    uint32_t huge = 0x7ffffff0;
    std::memcpy(bad.data(), &huge, 4);  // root table offset points past the end
    EXPECT_ERROR(LoadCheckpointFromBuffer(bad.data(), bad.size(), "bad root"), ErrorCode::kInvalidModel,
                 "checkpoint 'bad root' is corrupt or truncated");
  }
  {
    // Blow up the length of the first raw_data vector.
    std::vector<uint8_t> bad = bytes;
    const auto* raw = odtc::GetCheckpoint(bad.data())->module_state()->requires_grad_params()->Get(0)->raw_data();
    size_t length_at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(raw) - bad.data());
    uint32_t huge = 0x10000000;
    std::memcpy(bad.data() + length_at, &huge, 4);
    std::string path = PathOf("corrupt");
    WriteBytes(path, bad.data(), bad.size());
    EXPECT_ERROR(LoadCheckpoint(path), ErrorCode::kInvalidModel, "checkpoint '" + path + "' is corrupt");
  }
}

TEST(CheckpointFormat, WrongFileIdentifierIsNamed) {
  std::vector<uint8_t> bytes = SerializeCheckpoint(RichCheckpoint());
  std::memcpy(bytes.data() + 4, "ORTM", 4);
  EXPECT_ERROR(LoadCheckpointFromBuffer(bytes.data(), bytes.size(), "model.ort"), ErrorCode::kInvalidModel,
               "checkpoint 'model.ort' is not an ODTC checkpoint (file identifier 'ORTM', expected 'ODTC')");
  std::memcpy(bytes.data() + 4, "\x01\x02zz", 4);
  EXPECT_ERROR(LoadCheckpointFromBuffer(bytes.data(), bytes.size()), ErrorCode::kInvalidModel,
               "file identifier '\\x01\\x02zz'");
}

TEST(CheckpointFormat, UnknownVersionIsNamed) {
  RawTensor w{"w", {2}, odtc::TensorDataType::FLOAT, FloatBytes({1, 2})};
  std::vector<uint8_t> v7 = BuildRaw(7, {w});
  EXPECT_ERROR(LoadCheckpointFromBuffer(v7.data(), v7.size(), "x"), ErrorCode::kInvalidModel,
               "checkpoint 'x' has format version 7; edgetrain reads versions 1 and 2");
  std::vector<uint8_t> v0 = BuildRaw(0, {w});
  EXPECT_ERROR(LoadCheckpointFromBuffer(v0.data(), v0.size(), "x"), ErrorCode::kInvalidModel, "format version 0");
  std::vector<uint8_t> v1 = BuildRaw(1, {w});
  Checkpoint c = LoadCheckpointFromBuffer(v1.data(), v1.size());
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.trainable.at("w").ToVector<float>(), (std::vector<float>{1, 2}));
}

TEST(CheckpointFormat, RawDataLengthMustMatchTheShape) {
  std::vector<uint8_t> bytes =
      BuildRaw(2, {{"fc.weight", {2, 3}, odtc::TensorDataType::FLOAT, FloatBytes({1, 2, 3, 4, 5})}});
  EXPECT_ERROR(LoadCheckpointFromBuffer(bytes.data(), bytes.size(), "c"), ErrorCode::kInvalidModel,
               "checkpoint 'c': trainable parameter 'fc.weight': raw_data holds 20 bytes but a float32 tensor of "
               "shape [2, 3] needs 24");
  bytes = BuildRaw(2, {{"no_data", {4}, odtc::TensorDataType::INT64, {}}});
  EXPECT_ERROR(LoadCheckpointFromBuffer(bytes.data(), bytes.size()), ErrorCode::kInvalidModel,
               "'no_data': raw_data holds 0 bytes");
}

TEST(CheckpointFormat, MalformedTensorsAreNamed) {
  auto load = [](const std::vector<RawTensor>& tensors, int groups = 0) {
    std::vector<uint8_t> bytes = BuildRaw(2, tensors, groups);
    return LoadCheckpointFromBuffer(bytes.data(), bytes.size(), "c");
  };
  EXPECT_ERROR(load({{"neg", {2, -1}, odtc::TensorDataType::FLOAT, {}}}), ErrorCode::kInvalidModel,
               "'neg' has a negative dimension -1");
  EXPECT_ERROR(load({{"str", {1}, odtc::TensorDataType::STRING, {}}}), ErrorCode::kNotImplemented,
               "'str' is a string tensor");
  EXPECT_ERROR(load({{"cplx", {1}, odtc::TensorDataType::COMPLEX64, std::vector<uint8_t>(8)}}),
               ErrorCode::kNotImplemented, "'cplx' has element type COMPLEX64");
  EXPECT_ERROR(load({{"untyped", {1}, odtc::TensorDataType::UNDEFINED, {}}}), ErrorCode::kInvalidModel,
               "'untyped' has no element type");
  EXPECT_ERROR(load({{"", {1}, odtc::TensorDataType::FLOAT, FloatBytes({1})}}), ErrorCode::kInvalidModel,
               "tensor without a name");
  RawTensor twin{"twin", {1}, odtc::TensorDataType::FLOAT, FloatBytes({1})};
  EXPECT_ERROR(load({twin, twin}), ErrorCode::kInvalidModel, "'twin' appears more than once");
  EXPECT_ERROR(load({twin}, 2), ErrorCode::kNotImplemented, "has 2 optimizer groups");
}

TEST(CheckpointFormat, DamagedBuffersFailCleanly) {
  std::vector<uint8_t> bytes = SerializeCheckpoint(RichCheckpoint());
  auto load_or_error = [](const std::vector<uint8_t>& data) {
    try {
      LoadCheckpointFromBuffer(data.data(), data.size(), "damaged");
    } catch (const Error&) {
    }
  };
  for (size_t n = 0; n < bytes.size(); n += 3) load_or_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> damaged = bytes;
    for (int flips = 0; flips < 1 + trial % 4; ++flips) damaged[rng() % damaged.size()] = static_cast<uint8_t>(rng());
    load_or_error(damaged);
  }
}
