// Reliability: graphs validated before they run (bit-flipped artifacts), the concurrency contract,
// saves that survive SIGKILL and a full disk, and limits on untrusted files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <thread>

#include "autodiff/artifacts.hpp"
#include "edgetrain/edgetrain.h"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"
#include "training/training_session.hpp"

namespace fs = std::filesystem;
using namespace edgetrain;
using edgetrain::testing::ImageBatch;

namespace {

const std::string kModels = EDGETRAIN_MODELS_DIR;

fs::path TempDir(const std::string& name) {
  static const fs::path root = fs::temp_directory_path() / ("edgetrain_reliability_" + std::to_string(getpid()));
  static struct Cleanup {
    ~Cleanup() { fs::remove_all(root); }
  } cleanup;
  fs::path dir = root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct ArtifactDir {
  fs::path dir;
  fs::path training() const { return dir / "training_model.onnx"; }
  fs::path eval() const { return dir / "eval_model.onnx"; }
  fs::path optimizer() const { return dir / "optimizer_model.onnx"; }
  fs::path checkpoint() const { return dir / "checkpoint"; }
};

const ArtifactDir& LeNetBn() {
  static ArtifactDir set = [] {
    ArtifactDir a{TempDir("lenet_bn")};
    ArtifactOptions options;
    options.additional_outputs = {"output"};  // an eval output to export
    GenerateArtifacts(kModels + "/lenet_bn.onnx", a.dir.string(), options);
    return a;
  }();
  return set;
}

// LeNet-BN keeping its activations for the backward pass: a training step whose forward values the budget
// planner can recompute (with the cheap ones recomputed already, its peak is in the backward pass).
const ArtifactDir& LeNetBnKept() {
  static ArtifactDir set = [] {
    ArtifactDir a{TempDir("lenet_bn_kept")};
    ArtifactOptions options;
    options.additional_outputs = {"output"};
    options.recompute_cheap_values = false;
    GenerateArtifacts(kModels + "/lenet_bn.onnx", a.dir.string(), options);
    return a;
  }();
  return set;
}

const ArtifactDir& Mlp() {
  static ArtifactDir set = [] {
    ArtifactDir a{TempDir("mlp")};
    GenerateArtifacts(kModels + "/mlp.onnx", a.dir.string(), ArtifactOptions{});
    return a;
  }();
  return set;
}

TrainingSession Open(const ArtifactDir& a, int threads = 1) {
  return TrainingSession(CheckpointState::Load(a.checkpoint().string()), a.training().string(), a.eval().string(),
                         a.optimizer().string(), TrainingSessionOptions{.num_threads = threads});
}


std::vector<float> Parameters(const TrainingSession& s) {
  Tensor buffer(DataType::kFloat32, {static_cast<int64_t>(s.GetParametersSize(false))});
  s.CopyParametersToBuffer(buffer, false);
  return buffer.ToVector<float>();
}

// Trains `steps` steps with batches seeded from `seed`; returns the losses.
std::vector<float> Train(TrainingSession& s, int steps, uint32_t seed) {
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    losses.push_back(s.TrainStep(ImageBatch(8, seed + i)).at(0).data<float>()[0]);
    s.OptimizerStep();
    s.LazyResetGrad();
  }
  return losses;
}

// A training model with one bit flipped inside the first occurrence of `name`.
std::string FlipBitIn(const std::string& model, const std::string& name, int bit) {
  size_t at = model.find(name);
  EXPECT_NE(at, std::string::npos) << name;
  std::string flipped = model;
  flipped[at + name.size() - 1] ^= static_cast<char>(1 << bit);
  return flipped;
}

}  // namespace

// The crash of issue 18: a bit flip in a gradient's name leaves a graph output that no node
// computes; the executor read a value slot that did not exist in the first TrainStep.
TEST(GraphValidation, BitFlippedGradientNameInLeNetBnIsATypedError) {
  const std::string model = ReadBytes(LeNetBn().training());
  for (const std::string name : {"features.1.weight_grad", "features.4.weight_grad", "features.4.bias_grad"}) {
    const std::string flipped = FlipBitIn(model, name, 0);
    EXPECT_ERROR(
        {
          TrainingSession s(CheckpointState::Load(LeNetBn().checkpoint().string()),
                            ModelSource::FromBuffer(flipped.data(), flipped.size(), "flipped.onnx"));
          s.TrainStep(ImageBatch(2, 1));
        },
        ErrorCode::kInvalidModel, "flipped.onnx");
  }
}

// Every single-bit flip of a training model is refused with edgetrain::Error or trains: never a
// crash and never another exception (the sanitizer build also checks memory on each).
TEST(GraphValidation, SingleBitFlipsOfTrainingModelsTrainOrFailTyped) {
  for (const ArtifactDir* a : {&Mlp(), &LeNetBn()}) {
    const std::string model = ReadBytes(a->training());
    std::mt19937 rng(18);
    int refused = 0, trained = 0;
    for (int k = 0; k < 150; ++k) {
      std::string flipped = model;
      flipped[rng() % flipped.size()] ^= static_cast<char>(1 << (rng() % 8));
      try {
        TrainingSession s(CheckpointState::Load(a->checkpoint().string()),
                          ModelSource::FromBuffer(flipped.data(), flipped.size(), "flipped.onnx"));
        s.TrainStep(ImageBatch(2, k));
        s.TrainStep(ImageBatch(2, k + 1));
        ++trained;
      } catch (const Error&) {
        ++refused;
      }
    }
    EXPECT_EQ(refused + trained, 150);
    EXPECT_GT(refused, 0) << a->dir;
  }
}

namespace {
Model TinyModel() {
  Model m;
  m.source = "tiny.onnx";
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph.name = "main";
  m.graph.inputs.push_back(edgetrain::testing::ValueInfoOf("x", DataType::kFloat32, {2}));
  m.graph.outputs.push_back(edgetrain::testing::ValueInfoOf("y", DataType::kFloat32, {2}));
  Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"y"};
  m.graph.nodes.push_back(relu);
  return m;
}
}  // namespace

TEST(GraphValidation, GraphOutputNoNodeComputesIsRefused) {
  Model m = TinyModel();
  m.graph.outputs.push_back(edgetrain::testing::ValueInfoOf("z", DataType::kFloat32, {2}));
  EXPECT_ERROR(Session session(m), ErrorCode::kInvalidModel, "graph output 'z' is not computed");
}

TEST(GraphValidation, NodeOutputRedefiningAnInputOrInitializerIsRefused) {
  Model m = TinyModel();
  m.graph.initializers["w"] = Tensor(DataType::kFloat32, {2});
  Node copy;
  copy.name = "overwrites_w";
  copy.op_type = "Relu";
  copy.inputs = {"x"};
  copy.outputs = {"w"};
  m.graph.nodes.push_back(copy);
  m.graph.outputs.push_back(edgetrain::testing::ValueInfoOf("w", DataType::kFloat32, {2}));
  EXPECT_ERROR(Session session(m, SessionOptions{.constant_folding = false}), ErrorCode::kInvalidModel,
               "output 'w' redefines a graph input or initializer");
  Model n = TinyModel();
  n.graph.nodes[0].outputs = {"x"};
  EXPECT_ERROR(Session session(n), ErrorCode::kInvalidModel, "node 'relu'");
}

TEST(GraphValidation, SubgraphNestingDepthIsBounded) {
  auto nested = [](int depth) {
    Model m = TinyModel();
    m.graph.inputs.push_back(edgetrain::testing::ValueInfoOf("c", DataType::kBool, {}));
    auto leaf = [] {
      auto g = std::make_shared<Graph>();
      g->name = "leaf";
      Node copy;
      copy.name = "copy";
      copy.op_type = "Identity";
      copy.inputs = {"x"};
      copy.outputs = {"leaf_out"};
      g->nodes.push_back(copy);
      g->outputs.push_back(edgetrain::testing::ValueInfoOf("leaf_out", DataType::kFloat32, {2}));
      return g;
    };
    std::shared_ptr<Graph> inner = leaf();
    for (int d = 0; d < depth; ++d) {
      auto outer = std::make_shared<Graph>();
      outer->name = "level" + std::to_string(d);
      Node branch;
      branch.name = "if" + std::to_string(d);
      branch.op_type = "If";
      branch.inputs = {"c"};
      branch.outputs = {"out" + std::to_string(d)};
      Attribute then_branch, else_branch;
      then_branch.kind = else_branch.kind = Attribute::Kind::kGraph;
      then_branch.g = inner;  // a chain, as a file holds it (no subgraph shared by two branches)
      else_branch.g = leaf();
      branch.attributes["then_branch"] = then_branch;
      branch.attributes["else_branch"] = else_branch;
      outer->nodes.push_back(branch);
      outer->outputs.push_back(edgetrain::testing::ValueInfoOf(branch.outputs[0], DataType::kFloat32, {2}));
      inner = outer;
    }
    m.graph.nodes[0].inputs = {inner->outputs[0].name};
    m.graph.nodes.insert(m.graph.nodes.begin(), inner->nodes[0]);
    return m;
  };
  Session shallow(nested(3));
  Tensor x = Tensor::FromVector<float>({-1, 2}, {2});
  Tensor c = Tensor::FromVector<bool>({true}, {});
  EXPECT_EQ(shallow.Run({{"x", x}, {"c", c}})[0].ToVector<float>(), (std::vector<float>{0, 2}));
  EXPECT_ERROR(Session session(nested(40)), ErrorCode::kInvalidModel, "subgraphs nest more than 16 deep");
}

// ---- concurrency contract ----

TEST(Concurrency, SeparateSessionsOnSeparateThreadsMatchRunningAlone) {
  TrainingSession alone = Open(LeNetBn(), 2);  // each session's kernels run on its own 2 threads
  const std::vector<float> losses = Train(alone, 4, 7);
  const std::vector<float> parameters = Parameters(alone);
  std::vector<std::vector<float>> thread_losses(3), thread_parameters(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      TrainingSession s = Open(LeNetBn(), 2);
      thread_losses[t] = Train(s, 4, 7);
      thread_parameters[t] = Parameters(s);
    });
  for (auto& t : threads) t.join();
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(thread_losses[t], losses) << "thread " << t;
    EXPECT_EQ(thread_parameters[t], parameters) << "thread " << t;
  }
}

TEST(Concurrency, OneSessionFromTwoThreadsIsRefusedNotRaced) {
  TrainingSession s = Open(Mlp());
  std::atomic<int> ran{0}, refused{0};
  std::atomic<bool> other_error{false};
  auto hammer = [&](uint32_t seed) {
    const std::vector<Tensor> batch = ImageBatch(16, seed);
    for (int i = 0; i < 200; ++i) {
      try {
        s.TrainStep(batch);
        ++ran;
      } catch (const Error& e) {
        if (std::string(e.what()).find("in use by another thread") == std::string::npos) other_error = true;
        ++refused;
      }
    }
  };
  std::thread a(hammer, 1), b(hammer, 2);
  a.join();
  b.join();
  EXPECT_FALSE(other_error);
  EXPECT_EQ(ran + refused, 400);
  EXPECT_GT(ran, 0);
  // Used from one thread again, it trains as before.
  EXPECT_TRUE(std::isfinite(s.TrainStep(ImageBatch(16, 3)).at(0).data<float>()[0]));
}

// ---- crash-safe persistence ----

namespace {

// Files in `dir` whose name starts with `stem` and contains ".tmp." (AtomicFileWriter's temporaries).
std::vector<std::string> TempFilesOf(const fs::path& dir, const std::string& stem) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) == 0 && name.find(".tmp.") != std::string::npos) found.push_back(name);
  }
  return found;
}

// Runs `write(i)` for i = 0, 1, 2, ... in a child process and SIGKILLs it after a random delay
// below `window`, `kills` times; after each kill calls `check()`.
template <typename Write, typename Check>
void KillDuringWrites(int kills, std::chrono::microseconds window, Write write, Check check) {
  std::mt19937 rng(2026);
  for (int k = 0; k < kills; ++k) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (uint64_t i = 1;; ++i) write(i);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % window.count()));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "kill " << k << ": the writer failed";
    check(k);
  }
}

}  // namespace

void CheckpointKillTest(bool external_data) {
  const fs::path dir = TempDir(external_data ? "kill_checkpoint_external" : "kill_checkpoint");
  TrainingSession s = Open(LeNetBn());
  Train(s, 1, 11);
  CheckpointState::Save(s.state(), (dir / "a").string(), true, external_data);
  Train(s, 1, 12);
  CheckpointState::Save(s.state(), (dir / "b").string(), true, external_data);
  const std::string target = (dir / "ckpt").string();
  fs::copy_file(dir / "a", target);
  if (external_data) fs::copy_file(dir / "a.data", target + ".data");
  // A version is compared as its values: the checkpoint re-saved with embedded data, byte for byte.
  auto values_of = [&](const std::string& path) {
    const std::string copy = (dir / "embedded").string();
    CheckpointState::Save(CheckpointState::Load(path), copy, true, false);
    return ReadBytes(copy);
  };
  const std::string versions[2] = {values_of((dir / "a").string()), values_of((dir / "b").string())};
  ASSERT_NE(versions[0], versions[1]);
  const auto start = std::chrono::steady_clock::now();
  CheckpointState::Save(s.state(), (dir / "timing").string(), true, external_data);
  const auto save_time = std::chrono::steady_clock::now() - start;
  const auto window = std::chrono::duration_cast<std::chrono::microseconds>(save_time * 3) +
                      std::chrono::microseconds(2000);
  const CheckpointState a = CheckpointState::Load((dir / "a").string());
  const CheckpointState b = CheckpointState::Load((dir / "b").string());
  int seen[2] = {0, 0};
  KillDuringWrites(
      200, window,
      [&](uint64_t i) { CheckpointState::Save(i % 2 ? b : a, target, true, external_data); },
      [&](int k) {
        std::string now;
        try {
          now = values_of(target);
        } catch (const Error& e) {
          FAIL() << "kill " << k << ": the checkpoint does not load: " << e.what();
        }
        const int v = now == versions[0] ? 0 : now == versions[1] ? 1 : -1;
        ASSERT_NE(v, -1) << "kill " << k << ": the checkpoint is neither the old nor the new one";
        ++seen[v];
      });
  EXPECT_GT(seen[0] + seen[1], 0);
  EXPECT_FALSE(TempFilesOf(dir, "ckpt").empty() && seen[1] == 0) << "the kills never interrupted a save";
  CheckpointState::Save(b, target, true, external_data);  // the next good save clears the killed ones' temporaries
  EXPECT_EQ(TempFilesOf(dir, "ckpt"), std::vector<std::string>{});
  EXPECT_EQ(values_of(target), versions[1]);
  std::printf("checkpoint%s: 200 kills, target was the old version %d times and the new %d times\n",
              external_data ? " with external data" : "", seen[0], seen[1]);
}

TEST(CrashSafety, SigkillDuringCheckpointSaveWithOptimizerState) { CheckpointKillTest(false); }
TEST(CrashSafety, SigkillDuringCheckpointSaveWithExternalData) { CheckpointKillTest(true); }

TEST(CrashSafety, SigkillDuringModelExport) {
  const fs::path dir = TempDir("kill_export");
  TrainingSession s = Open(LeNetBn());
  s.ExportModelForInference((dir / "a.onnx").string(), {"output"});
  Train(s, 1, 21);
  s.ExportModelForInference((dir / "b.onnx").string(), {"output"});
  const std::string versions[2] = {ReadBytes(dir / "a.onnx"), ReadBytes(dir / "b.onnx")};
  ASSERT_NE(versions[0], versions[1]);
  const std::string target = (dir / "model.onnx").string();
  fs::copy_file(dir / "a.onnx", target);
  TrainingSession other = Open(LeNetBn());  // exports the old weights
  const auto start = std::chrono::steady_clock::now();
  s.ExportModelForInference((dir / "timing.onnx").string(), {"output"});
  const auto window = std::chrono::duration_cast<std::chrono::microseconds>(
                          (std::chrono::steady_clock::now() - start) * 3) +
                      std::chrono::microseconds(2000);
  int seen[2] = {0, 0};
  KillDuringWrites(
      200, window, [&](uint64_t i) { (i % 2 ? s : other).ExportModelForInference(target, {"output"}); },
      [&](int k) {
        const std::string now = ReadBytes(target);
        const int v = now == versions[0] ? 0 : now == versions[1] ? 1 : -1;
        ASSERT_NE(v, -1) << "kill " << k << ": the model is neither the old nor the new one";
        ++seen[v];
      });
  EXPECT_NO_THROW(Session::FromFile(target));
  s.ExportModelForInference(target, {"output"});
  EXPECT_EQ(TempFilesOf(dir, "model.onnx"), std::vector<std::string>{});
  std::printf("export: 200 kills, target was the old version %d times and the new %d times\n", seen[0], seen[1]);
}

TEST(CrashSafety, FullDiskIsATypedErrorAndKeepsTheOldCheckpoint) {
  const fs::path dir = TempDir("full_disk");
  TrainingSession s = Open(LeNetBn());
  Train(s, 1, 31);
  const std::string target = (dir / "ckpt").string();
  CheckpointState::Save(s.state(), target, true);
  const std::string old_bytes = ReadBytes(target);
  Train(s, 1, 32);
  for (bool external : {false, true}) {
    struct rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    struct rlimit small = saved;
    small.rlim_cur = 64 * 1024;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    try {
      CheckpointState::Save(s.state(), target, true, external);
      ADD_FAILURE() << "a save past RLIMIT_FSIZE succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIoError) << e.what();
      EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
    }
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    EXPECT_EQ(ReadBytes(target), old_bytes);
    EXPECT_EQ(TempFilesOf(dir, "ckpt"), std::vector<std::string>{});
    EXPECT_NO_THROW(CheckpointState::Load(target));
  }
}

// ---- untrusted files ----

TEST(UntrustedFiles, ExternalDataThroughASymlinkOutOfTheModelDirectoryIsRefused) {
  const fs::path dir = TempDir("symlink");
  fs::create_directories(dir / "model");
  fs::create_directories(dir / "elsewhere");
  { std::ofstream(dir / "elsewhere" / "secret.bin") << std::string(64, 'x'); }
  fs::create_symlink(dir / "elsewhere" / "secret.bin", dir / "model" / "weights.bin");
  fs::create_directory_symlink(dir / "elsewhere", dir / "model" / "linked");
  for (const std::string location : {"weights.bin", "linked/secret.bin"}) {
    onnx::ModelProto proto;
    proto.set_ir_version(8);
    proto.add_opset_import()->set_version(17);
    auto* g = proto.mutable_graph();
    g->set_name("g");
    edgetrain::testing::AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"4"});
    edgetrain::testing::AddValue(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {"4"});
    edgetrain::testing::AddNode(g, "Add", {"x", "w"}, {"y"});
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(4);
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* entry = w->add_external_data();
    entry->set_key("location");
    entry->set_value(location);
    const std::string path = (dir / "model" / "model.onnx").string();
    {
      std::ofstream out(path, std::ios::binary);
      proto.SerializeToOstream(&out);
    }
    EXPECT_ERROR(Session::FromFile(path), ErrorCode::kInvalidModel, location);
  }
}

// ---- memory limit ----

namespace {
TrainingSession OpenLimited(const ArtifactDir& a, uint64_t limit) {
  return TrainingSession(CheckpointState::Load(a.checkpoint().string()), a.training().string(), a.eval().string(),
                         a.optimizer().string(), TrainingSessionOptions{.memory_limit_bytes = limit});
}
}  // namespace

TEST(MemoryLimit, SessionWhoseParametersExceedTheLimitIsRefusedAtCreation) {
  const ArtifactDir& a = LeNetBn();
  EXPECT_ERROR(OpenLimited(a, 100'000), ErrorCode::kResourceExhausted,
               "training model '" + a.training().string() + "': the session needs at least ");
  EXPECT_ERROR(OpenLimited(a, 100'000), ErrorCode::kResourceExhausted, "more than the memory limit of 100000 bytes");
}

TEST(MemoryLimit, StepWhoseIntermediatesExceedTheLimitIsRefusedBeforeAllocatingThem) {
  const ArtifactDir& a = LeNetBn();
  TrainingSession unlimited = Open(a);
  // Parameters (all), then for the trainable ones a gradient and AdamW's two moments, all float32.
  const uint64_t held = 4 * (unlimited.GetParametersSize(false) + 3 * unlimited.GetParametersSize(true));
  TrainingSession tight = OpenLimited(a, held + 16 * 1024);  // creation fits; a batch of 8 does not
  const std::vector<float> before = Parameters(tight);
  EXPECT_ERROR(tight.TrainStep(ImageBatch(8, 1)), ErrorCode::kResourceExhausted, "model '" + a.training().string() + "'");
  EXPECT_ERROR(tight.TrainStep(ImageBatch(8, 1)), ErrorCode::kResourceExhausted,
               "for the intermediate tensors alive at this node");
  EXPECT_ERROR(tight.TrainStep(ImageBatch(8, 1)), ErrorCode::kResourceExhausted,
               "more than the memory limit of " + std::to_string(held + 16 * 1024) + " bytes");
  EXPECT_EQ(Parameters(tight), before);
}

TEST(MemoryLimit, SessionWithinTheLimitTrainsAsWithout) {
  const ArtifactDir& a = LeNetBn();
  TrainingSession unlimited = Open(a), limited = OpenLimited(a, 64ull << 20);
  const std::vector<float> expected = Train(unlimited, 3, 7);
  EXPECT_EQ(Train(limited, 3, 7), expected);
  EXPECT_EQ(Parameters(limited), Parameters(unlimited));
  EXPECT_EQ(limited.EvalStep(ImageBatch(8, 3)).at(0).ToVector<float>(), unlimited.EvalStep(ImageBatch(8, 3)).at(0).ToVector<float>());
}

TEST(MemoryLimit, CApiRefusesNonPositiveLimitsAndReportsTheExhaustedOne) {
  const ArtifactDir& a = LeNetBn();
  et_session_options options;
  et_session_options_init(&options);
  EXPECT_EQ(options.memory_limit_bytes, 0);
  for (int64_t bad : {int64_t{0}, int64_t{-1}, INT64_MIN}) {
    et_error* error = et_session_options_set_memory_limit(&options, bad);
    EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
    std::string expected = "must be a positive number of bytes, got ";
    expected += std::to_string(bad);
    EXPECT_NE(std::string(et_error_get_message(error)).find(expected), std::string::npos) << et_error_get_message(error);
    et_error_free(error);
  }
  et_error* error = et_session_options_set_memory_limit(nullptr, 10);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
  et_error_free(error);

  et_checkpoint_state* state = nullptr;
  ASSERT_EQ(et_checkpoint_load(a.checkpoint().c_str(), &state), nullptr);
  auto create = [&](const et_session_options& o) {
    et_training_session* session = nullptr;
    et_error* e = et_training_session_create(state, a.training().c_str(), a.eval().c_str(), a.optimizer().c_str(), &o,
                                             &session);
    et_training_session_free(session);
    return e;
  };
  options.memory_limit_bytes = -4096;  // set directly, past the setter
  error = create(options);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(et_error_get_message(error)).find("memory_limit_bytes is -4096"), std::string::npos)
      << et_error_get_message(error);
  et_error_free(error);
  ASSERT_EQ(et_session_options_set_memory_limit(&options, 4096), nullptr);
  EXPECT_EQ(options.memory_limit_bytes, 4096);
  error = create(options);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_RESOURCE_EXHAUSTED);
  EXPECT_NE(std::string(et_error_get_message(error)).find(a.training().string()), std::string::npos)
      << et_error_get_message(error);
  et_error_free(error);
  ASSERT_EQ(et_session_options_set_memory_limit(&options, 64ll << 20), nullptr);
  error = create(options);
  EXPECT_EQ(error, nullptr) << et_error_get_message(error);
  et_error_free(error);
  et_checkpoint_free(state);
}

TEST(MemoryLimit, InferenceSessionChecksItsInitializersAndItsPlan) {
  SessionOptions options;
  options.memory_limit_bytes = 1000;
  EXPECT_ERROR(Session::FromFile(kModels + "/lenet_bn.onnx", options), ErrorCode::kResourceExhausted,
               "model '" + kModels + "/lenet_bn.onnx' needs at least ");
  options.memory_limit_bytes = 64ull << 20;
  Session session = Session::FromFile(kModels + "/lenet_bn.onnx", options);
  const Tensor x = ImageBatch(4, 5).at(0);
  std::vector<Tensor> out = session.Run({{session.InputNames().at(0), x}});
  EXPECT_EQ(out.at(0).shape(), (Shape{4, 10}));
  EXPECT_GT(session.planned_peak_bytes(), 0u);
  EXPECT_EQ(Session::FromFile(kModels + "/lenet_bn.onnx").Run({{session.InputNames().at(0), x}}).at(0).ToVector<float>(),
            out.at(0).ToVector<float>());
}

// ---- memory budget (gradient checkpointing) ----

namespace {
TrainingSession OpenBudgeted(const ArtifactDir& a, int64_t budget) {
  return TrainingSession(CheckpointState::Load(a.checkpoint().string()), a.training().string(), a.eval().string(),
                         a.optimizer().string(), TrainingSessionOptions{.memory_budget_bytes = budget});
}

// The loss and every gradient of `steps` steps (with optimizer steps between), in order.
std::vector<std::vector<float>> LossesAndGradients(TrainingSession& s, int steps) {
  std::vector<std::vector<float>> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(s.TrainStep(ImageBatch(16, 40 + i)).at(0).ToVector<float>());
    for (const std::string& name : s.state().ParameterNames())
      if (s.state().IsTrainable(name)) out.push_back(s.GetGradient(name).ToVector<float>());
    s.OptimizerStep();
    s.LazyResetGrad();
  }
  return out;
}
}  // namespace

TEST(MemoryBudget, ASmallerArenaGivesTheSameLossesAndGradientsBitForBit) {
  const ArtifactDir& a = LeNetBnKept();
  TrainingSession free = Open(a);
  const std::vector<std::vector<float>> expected = LossesAndGradients(free, 3);
  const uint64_t unconstrained = free.training_arena_bytes();
  ASSERT_GT(unconstrained, 0u);
  EXPECT_EQ(free.recomputed_values(), 0u);

  const uint64_t budget = unconstrained * 4 / 5;  // LeNet-BN's smallest plan is 3/4 of its arena
  TrainingSession half = OpenBudgeted(a, static_cast<int64_t>(budget));
  EXPECT_EQ(LossesAndGradients(half, 3), expected);
  EXPECT_LE(half.training_arena_bytes(), budget);
  EXPECT_GT(half.recomputed_values(), 0u);
  EXPECT_EQ(Parameters(half), Parameters(free));
}

// The training graph as generate-artifacts writes it (BatchNorm and Relu already recomputed from the
// convolutions' outputs): the planner drops convolution outputs too, recomputed once per backward reader.
TEST(MemoryBudget, DefaultGraphAtItsSmallestBudgetGivesTheSameBits) {
  TrainingSession free = Open(LeNetBn());
  const std::vector<std::vector<float>> expected = LossesAndGradients(free, 2);
  TrainingSession tiny = OpenBudgeted(LeNetBn(), 1);
  std::string message;
  try {
    tiny.TrainStep(ImageBatch(16, 40));
  } catch (const Error& e) {
    message = e.what();
  }
  const std::string marker = "a budget of at least ";
  ASSERT_NE(message.find(marker), std::string::npos) << message;
  const int64_t smallest = std::stoll(message.substr(message.find(marker) + marker.size()));
  EXPECT_LT(static_cast<uint64_t>(smallest), free.training_arena_bytes() * 9 / 10);
  TrainingSession tight = OpenBudgeted(LeNetBn(), smallest);
  EXPECT_EQ(LossesAndGradients(tight, 2), expected);
  EXPECT_LE(tight.training_arena_bytes(), static_cast<uint64_t>(smallest));
  EXPECT_GT(tight.recomputed_values(), 0u);
  EXPECT_EQ(Parameters(tight), Parameters(free));
}

TEST(MemoryBudget, CheapValuesRecomputedInTheBackwardPassGiveTheSameBits) {
  const ArtifactDir& kept = LeNetBnKept();
  TrainingSession keeping = Open(kept), recomputing = Open(LeNetBn());
  EXPECT_EQ(LossesAndGradients(recomputing, 2), LossesAndGradients(keeping, 2));
  EXPECT_EQ(Parameters(recomputing), Parameters(keeping));

  // The copies: BatchNormalization and Relu from the convolutions' outputs, which BatchNormalizationGrad keeps.
  std::map<std::string, int> copies;
  for (const Node& node : LoadModel(LeNetBn().training().string()).graph.nodes)
    if (node.name.ends_with("_recompute")) ++copies[node.op_type];
  EXPECT_EQ(copies, (std::map<std::string, int>{{"BatchNormalization", 2}, {"Relu", 2}}));
  for (const Node& node : LoadModel(kept.training().string()).graph.nodes)
    EXPECT_FALSE(node.name.ends_with("_recompute")) << node.Describe();
}

TEST(MemoryBudget, ZeroOrNegativeBudgetIsRefusedAtCreation) {
  for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{-4096}})
    EXPECT_ERROR(OpenBudgeted(LeNetBn(), bad), ErrorCode::kInvalidArgument,
                 "memory_budget_bytes must be a positive number of bytes, got " + std::to_string(bad));
}

TEST(MemoryBudget, TooSmallBudgetNamesTheSmallestThatFitsAndThatOneTrains) {
  const ArtifactDir& a = LeNetBnKept();
  TrainingSession tiny = OpenBudgeted(a, 1024);
  const std::vector<float> before = Parameters(tiny);
  std::string message;
  try {
    tiny.TrainStep(ImageBatch(16, 40));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    message = e.what();
  }
  EXPECT_NE(message.find("the memory budget of 1024 bytes cannot be met"), std::string::npos) << message;
  const std::string marker = "a budget of at least ";
  const size_t at = message.find(marker);
  ASSERT_NE(at, std::string::npos) << message;
  const int64_t smallest = std::stoll(message.substr(at + marker.size()));
  EXPECT_EQ(Parameters(tiny), before);

  TrainingSession free = Open(a);
  const std::vector<std::vector<float>> expected = LossesAndGradients(free, 1);
  EXPECT_LT(static_cast<uint64_t>(smallest), free.training_arena_bytes());
  TrainingSession tight = OpenBudgeted(a, smallest);
  EXPECT_EQ(LossesAndGradients(tight, 1), expected);
  EXPECT_EQ(tight.training_arena_bytes(), static_cast<uint64_t>(smallest));
}

namespace {
// One C ABI train step of LeNet-BN on ImageBatch(16, 40): the loss, or the error (caller frees it).
et_error* CTrainStep(et_training_session* session, float* loss) {
  const std::vector<Tensor> batch = ImageBatch(16, 40);
  std::vector<et_tensor_view> views;
  for (const Tensor& t : batch)
    views.push_back({t.dtype() == DataType::kFloat32 ? ET_DTYPE_FLOAT32 : ET_DTYPE_INT64, t.shape().data(),
                     t.shape().size(), t.raw()});
  et_values* outputs = nullptr;
  et_error* error = et_training_session_train_step(session, views.data(), views.size(), &outputs);
  if (error == nullptr) *loss = *static_cast<const float*>(et_values_data(outputs, 0));
  et_values_free(outputs);
  return error;
}
}  // namespace

TEST(MemoryBudget, CApiBudgetRecomputesToTheSameLossAndNamesTheSmallestThatFits) {
  const ArtifactDir& a = LeNetBnKept();
  et_session_options options;
  et_session_options_init(&options);
  EXPECT_EQ(options.memory_budget_bytes, 0);
  for (int64_t bad : {int64_t{0}, int64_t{-1}, INT64_MIN}) {
    et_error* error = et_session_options_set_memory_budget(&options, bad);
    EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
    const std::string expected = "et_session_options_set_memory_budget: the memory budget must be a positive number "
                                 "of bytes, got " + std::to_string(bad);
    EXPECT_NE(std::string(et_error_get_message(error)).find(expected), std::string::npos) << et_error_get_message(error);
    et_error_free(error);
  }
  EXPECT_EQ(options.memory_budget_bytes, 0);

  et_checkpoint_state* state = nullptr;
  ASSERT_EQ(et_checkpoint_load(a.checkpoint().c_str(), &state), nullptr);
  auto create = [&](const et_session_options& o, et_training_session** session) {
    return et_training_session_create(state, a.training().c_str(), a.eval().c_str(), a.optimizer().c_str(), &o,
                                      session);
  };
  et_training_session* session = nullptr;
  options.memory_budget_bytes = -4096;  // set directly, past the setter
  et_error* error = create(options, &session);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(et_error_get_message(error)).find("memory_budget_bytes is -4096"), std::string::npos)
      << et_error_get_message(error);
  et_error_free(error);
  EXPECT_EQ(session, nullptr);

  et_session_options_init(&options);  // no budget: the reference loss and the full arena
  ASSERT_EQ(create(options, &session), nullptr);
  float expected_loss = 0, loss = 0;
  ASSERT_EQ(CTrainStep(session, &expected_loss), nullptr);
  uint64_t unconstrained = 0, arena = 0;
  size_t recomputed = 1;
  ASSERT_EQ(et_training_session_get_memory_plan(session, &unconstrained, &recomputed), nullptr);
  EXPECT_GT(unconstrained, 0u);
  EXPECT_EQ(recomputed, 0u);
  et_training_session_free(session);

  ASSERT_EQ(et_session_options_set_memory_budget(&options, 1024), nullptr);
  ASSERT_EQ(create(options, &session), nullptr);
  error = CTrainStep(session, &loss);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_RESOURCE_EXHAUSTED);
  const std::string message = et_error_get_message(error);
  et_error_free(error);
  et_training_session_free(session);
  EXPECT_NE(message.find("the memory budget of 1024 bytes cannot be met"), std::string::npos) << message;
  const std::string marker = "a budget of at least ";
  ASSERT_NE(message.find(marker), std::string::npos) << message;
  const int64_t smallest = std::stoll(message.substr(message.find(marker) + marker.size()));
  EXPECT_LT(static_cast<uint64_t>(smallest), unconstrained);

  ASSERT_EQ(et_session_options_set_memory_budget(&options, smallest), nullptr);
  ASSERT_EQ(create(options, &session), nullptr);
  ASSERT_EQ(CTrainStep(session, &loss), nullptr);
  EXPECT_EQ(loss, expected_loss);  // recomputation gives the same bits
  ASSERT_EQ(et_training_session_get_memory_plan(session, &arena, &recomputed), nullptr);
  EXPECT_EQ(arena, static_cast<uint64_t>(smallest));
  EXPECT_GT(recomputed, 0u);
  error = et_training_session_get_memory_plan(nullptr, &arena, &recomputed);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
  et_error_free(error);
  et_training_session_free(session);

  et_training_agent* agent = nullptr;
  error = et_training_agent_create((kModels + "/lenet_bn.onnx").c_str(), nullptr, 0, &options, &agent);
  EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(et_error_get_message(error)).find("memory_budget_bytes applies to training sessions"),
            std::string::npos) << et_error_get_message(error);
  et_error_free(error);
  et_checkpoint_free(state);
}

// ---- counts bounded before allocation ----

namespace {
std::string Numbered(std::string prefix, int i) { return prefix.append(std::to_string(i)); }

// x -> Identity x `nodes` -> y, written to a file; `edit` adds to the proto first.
std::string CountsModel(const std::string& name, int nodes, const std::function<void(onnx::ModelProto&)>& edit = {}) {
  onnx::ModelProto m = edgetrain::testing::NewModel();
  auto* g = m.mutable_graph();
  edgetrain::testing::AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"2"});
  edgetrain::testing::AddValue(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {"2"});
  for (int i = 0; i < nodes; ++i)
    edgetrain::testing::AddNode(g, "Identity", {i ? Numbered("v", i) : "x"}, {i + 1 < nodes ? Numbered("v", i + 1) : "y"},
                                Numbered("n", i));
  if (edit) edit(m);
  const std::string path = (TempDir("counts") / (name + ".onnx")).string();
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path;
}
}  // namespace

TEST(UntrustedFiles, NodeCountIsBoundedBeforeConversion) {
  const std::string path = CountsModel("five_nodes", 5);
  ImportOptions options;
  options.max_nodes = 4;
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted,
               path + ": graph 'test' has 5 nodes, more than the limit of 4");
  options.max_nodes = 5;
  EXPECT_EQ(LoadModel(path, options).graph.nodes.size(), 5u);
}

// Each model-local function calls the next four times: 6 levels expand to 4^6 nodes.
TEST(UntrustedFiles, NodeCountAfterFunctionExpansionIsBounded) {
  const std::string path = CountsModel("expanding", 1, [](onnx::ModelProto& m) {
    auto* g = m.mutable_graph();
    g->mutable_node(0)->set_op_type("F0");
    g->mutable_node(0)->set_domain("local");
    auto* imp = m.add_opset_import();
    imp->set_domain("local");
    imp->set_version(1);
    for (int level = 0; level <= 5; ++level) {
      auto* f = m.add_functions();
      f->set_name(Numbered("F", level));
      f->set_domain("local");
      f->add_input("a");
      f->add_output("b");
      auto* fi = f->add_opset_import();
      fi->set_version(17);
      auto* fl = f->add_opset_import();
      fl->set_domain("local");
      fl->set_version(1);
      for (int k = 0; k < 4; ++k) {
        auto* n = f->add_node();
        n->set_op_type(level < 5 ? Numbered("F", level + 1) : "Identity");
        if (level < 5) n->set_domain("local");
        n->add_input(k ? Numbered("t", k) : "a");
        n->add_output(k < 3 ? Numbered("t", k + 1) : "b");
      }
    }
  });
  ImportOptions options;
  options.max_nodes = 4095;
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted,
               path + ": a graph has more than 4095 nodes after expanding functions");
  options.max_nodes = 4096;
  Model model = LoadModel(path, options);
  EXPECT_EQ(model.graph.nodes.size(), 4096u);
  EXPECT_EQ(model.graph.nodes.front().op_type, "Identity");
}

TEST(UntrustedFiles, InitializerCountIsBoundedBeforeConversion) {
  const std::string path = CountsModel("initializers", 1, [](onnx::ModelProto& m) {
    for (int i = 0; i < 3; ++i) {
      auto* t = m.mutable_graph()->add_initializer();
      t->set_name(Numbered("w", i));
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_float_data(1.0f);
    }
  });
  ImportOptions options;
  options.max_initializers = 2;
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted,
               path + ": graph 'test' has 3 initializers, more than the limit of 2");
  options.max_initializers = 3;
  EXPECT_EQ(LoadModel(path, options).graph.initializers.size(), 3u);
}

TEST(UntrustedFiles, StringAttributeLengthIsBounded) {
  const std::string path = CountsModel("strings", 1, [](onnx::ModelProto& m) {
    auto* node = m.mutable_graph()->mutable_node(0);
    auto* s = node->add_attribute();
    s->set_name("note");
    s->set_type(onnx::AttributeProto::STRING);
    s->set_s(std::string(50, 'a'));
    auto* list = node->add_attribute();
    list->set_name("notes");
    list->set_type(onnx::AttributeProto::STRINGS);
    for (int i = 0; i < 3; ++i) list->add_strings(std::string(30, 'b'));
  });
  ImportOptions options;
  options.max_string_bytes = 49;
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted,
               "attribute 'note' holds 50 bytes of strings, more than the limit of 49");
  options.max_string_bytes = 89;
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted, path + ": ");
  EXPECT_ERROR(LoadModel(path, options), ErrorCode::kResourceExhausted,
               "attribute 'notes' holds 90 bytes of strings, more than the limit of 89");
  options.max_string_bytes = 90;
  const Model model = LoadModel(path, options);
  EXPECT_EQ(model.graph.nodes.at(0).attributes.at("note").s, std::string(50, 'a'));
  EXPECT_EQ(model.graph.nodes.at(0).attributes.at("notes").strings, std::vector<std::string>(3, std::string(30, 'b')));
}
