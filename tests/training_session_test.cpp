// TrainingSession, CheckpointState, LR schedulers and TrainingAgent on generated artifacts of the
// bundled models: gradient accumulation, optimizer steps, exact resume, export, and bad input.
#include "training/training_session.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "autodiff/agent_models.hpp"
#include "autodiff/artifacts.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "runtime/export_options.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"
#include "training/checkpoint_state.hpp"
#include "training/training_agent.hpp"

using namespace edgetrain;
using namespace edgetrain::testing;
namespace fs = std::filesystem;

namespace {

const std::string kModels = EDGETRAIN_MODELS_DIR;

// ctest runs each test in its own process, in parallel: every process gets its own directory.
struct ProcessTempRoot {
  fs::path path = fs::temp_directory_path() / ("edgetrain_training_test_" + std::to_string(getpid()));
  ~ProcessTempRoot() { fs::remove_all(path); }
};

fs::path TempDir(const std::string& name) {
  static ProcessTempRoot root;
  fs::path dir = root.path / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct ArtifactSet {
  std::string dir;
  std::string training() const { return dir + "/training_model.onnx"; }
  std::string eval() const { return dir + "/eval_model.onnx"; }
  std::string optimizer() const { return dir + "/optimizer_model.onnx"; }
  std::string checkpoint() const { return dir + "/checkpoint"; }
};

ArtifactSet Generate(const std::string& name, const std::string& model, ArtifactOptions options) {
  ArtifactSet set{TempDir(name).string()};
  GenerateArtifacts(model, set.dir, options);
  return set;
}

ArtifactOptions WithOutput(OptimizerType optimizer = OptimizerType::kAdamW) {
  ArtifactOptions options;
  options.additional_outputs = {"output"};
  options.optimizer.type = optimizer;
  return options;
}

const ArtifactSet& MlpAdamW() {
  static ArtifactSet set = Generate("mlp_adamw", kModels + "/mlp.onnx", WithOutput());
  return set;
}
const ArtifactSet& MlpSgd() {
  static ArtifactSet set = Generate("mlp_sgd", kModels + "/mlp.onnx", WithOutput(OptimizerType::kSGD));
  return set;
}

TrainingSession Open(const ArtifactSet& set, CheckpointState state) {
  return TrainingSession(std::move(state), set.training(), set.eval(), set.optimizer());
}
TrainingSession Open(const ArtifactSet& set) { return Open(set, CheckpointState::Load(set.checkpoint())); }


std::vector<float> Parameters(const TrainingSession& s, bool trainable_only = true) {
  Tensor buffer(DataType::kFloat32, {static_cast<int64_t>(s.GetParametersSize(trainable_only))});
  s.CopyParametersToBuffer(buffer, trainable_only);
  return buffer.ToVector<float>();
}

float Loss(const std::vector<Tensor>& outputs) { return outputs.at(0).data<float>()[0]; }

}  // namespace

TEST(TrainingSession, NamesFollowTheArtifacts) {
  TrainingSession s = Open(MlpAdamW());
  EXPECT_EQ(s.TrainingInputNames(), (std::vector<std::string>{"input", "labels"}));
  EXPECT_EQ(s.TrainingOutputNames(), (std::vector<std::string>{"loss", "output"}));
  EXPECT_EQ(s.EvalInputNames(), (std::vector<std::string>{"input", "labels"}));
  EXPECT_EQ(s.EvalOutputNames(), (std::vector<std::string>{"loss", "output"}));
  EXPECT_EQ(s.GetParametersSize(), 784u * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  EXPECT_TRUE(s.has_eval_model());
  EXPECT_TRUE(s.has_optimizer_model());
}

TEST(TrainingSession, TrainingReducesTheLossOnABatch) {
  TrainingSession s = Open(MlpAdamW());
  std::vector<Tensor> batch = ImageBatch(32, 1);
  float first = Loss(s.TrainStep(batch));
  EXPECT_NEAR(first, std::log(10.0f), 0.3f);  // untrained: about uniform over 10 classes
  for (int i = 0; i < 20; ++i) {
    s.OptimizerStep();
    s.LazyResetGrad();
    s.TrainStep(batch);
  }
  EXPECT_LT(Loss(s.EvalStep(batch)), 0.5f * first);
  EXPECT_EQ(s.optimizer_step(), 20);
}

// Two sessions on the same state and batches: one returns fresh outputs, the other writes them into
// the caller's tensors from the second step on. Losses, outputs and parameters stay identical.
TEST(TrainingSession, OutputsWrittenIntoTheCallersTensorsMatchFreshOnes) {
  TrainingSession fresh = Open(MlpAdamW()), bound = Open(MlpAdamW());
  std::vector<Tensor> outputs, eval_outputs;
  for (int step = 0; step < 4; ++step) {
    const std::vector<Tensor> batch = ImageBatch(8, 10 + step);
    const std::vector<Tensor> expected = fresh.TrainStep(batch);
    const Tensor previous_loss = outputs.empty() ? Tensor() : outputs[0];
    bound.TrainStep(batch, outputs);
    ASSERT_EQ(outputs.size(), expected.size());
    if (previous_loss.defined()) {
      EXPECT_TRUE(outputs[0].SameData(previous_loss)) << "step " << step;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i].shape(), expected[i].shape());
      EXPECT_EQ(outputs[i].ToVector<float>(), expected[i].ToVector<float>()) << "output " << i << " step " << step;
    }
    fresh.OptimizerStep();
    bound.OptimizerStep();
    fresh.LazyResetGrad();
    bound.LazyResetGrad();
    bound.EvalStep(batch, eval_outputs);
    EXPECT_EQ(eval_outputs[0].ToVector<float>(), fresh.EvalStep(batch)[0].ToVector<float>());
  }
  EXPECT_EQ(Parameters(bound), Parameters(fresh));
  // A tensor of the wrong type or size is not written into: the step gives the output new memory.
  std::vector<Tensor> wrong = {Tensor::Zeros(DataType::kFloat64, {}), Tensor::Zeros(DataType::kFloat32, {3})};
  const Tensor wrong_loss = wrong[0], wrong_logits = wrong[1];
  bound.TrainStep(ImageBatch(8, 3), wrong);
  EXPECT_FALSE(wrong[0].SameData(wrong_loss));
  EXPECT_EQ(wrong[0].dtype(), DataType::kFloat32);
  EXPECT_EQ(wrong[1].shape(), (Shape{8, 10}));
  EXPECT_EQ(wrong_loss.DoubleAt(0), 0.0);
  EXPECT_ERROR(bound.TrainStep({ImageBatch(8, 3)[0]}, wrong), ErrorCode::kInvalidArgument, "expected 2 inputs");
}

// With SGD, w' = w - lr * g, so parameter deltas expose the accumulated gradient buffers.
TEST(TrainingSession, GradientsAccumulateUntilLazyReset) {
  const float lr = 0.5f;
  std::vector<Tensor> a = ImageBatch(16, 2), b = ImageBatch(16, 3);
  auto delta_after = [&](const std::vector<std::vector<Tensor>>& batches, bool reset_between) {
    TrainingSession s = Open(MlpSgd());
    s.SetLearningRate(lr);
    std::vector<float> before = Parameters(s);
    for (const auto& batch : batches) {
      if (reset_between) s.LazyResetGrad();
      s.TrainStep(batch);
    }
    s.OptimizerStep();
    std::vector<float> after = Parameters(s), delta(after.size());
    for (size_t i = 0; i < after.size(); ++i) delta[i] = (before[i] - after[i]) / lr;
    return delta;
  };
  std::vector<float> ga = delta_after({a}, false), gb = delta_after({b}, false);
  std::vector<float> accumulated = delta_after({a, b}, false), reset = delta_after({a, b}, true);
  double worst_sum = 0, worst_reset = 0, norm = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    worst_sum = std::max(worst_sum, std::abs(double(accumulated[i]) - ga[i] - gb[i]));
    worst_reset = std::max(worst_reset, std::abs(double(reset[i]) - gb[i]));
    norm = std::max(norm, std::abs(double(gb[i])));
  }
  EXPECT_GT(norm, 1e-3);
  EXPECT_LT(worst_sum, 2e-4 * norm + 1e-6);
  EXPECT_LT(worst_reset, 2e-4 * norm + 1e-6);
}

TEST(TrainingSession, LinearSchedulerFollowsOrtFormula) {
  TrainingSession s = Open(MlpAdamW());
  s.RegisterLinearLRScheduler(2, 6, 0.1f);
  EXPECT_FLOAT_EQ(s.GetLearningRate(), 0.0f);  // registering applies it at step 0
  std::vector<float> seen;
  std::vector<Tensor> batch = ImageBatch(8, 4);
  for (int i = 0; i < 7; ++i) {
    s.TrainStep(batch);
    s.OptimizerStep();
    s.SchedulerStep();
    s.LazyResetGrad();
    seen.push_back(s.GetLearningRate());
  }
  std::vector<float> expected = {0.05f, 0.1f, 0.075f, 0.05f, 0.025f, 0.0f, 0.0f};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(seen[i], expected[i]) << "after step " << i + 1;
}

TEST(LRScheduler, CosineAndStep) {
  LRScheduler cosine = LRScheduler::Cosine(2, 10, 1.0f, 0.1f);
  EXPECT_FLOAT_EQ(cosine.LearningRate(1), 0.5f);
  EXPECT_FLOAT_EQ(cosine.LearningRate(2), 1.0f);
  EXPECT_NEAR(cosine.LearningRate(6), 0.1 + 0.9 * 0.5, 1e-6);
  EXPECT_FLOAT_EQ(cosine.LearningRate(10), 0.1f);
  EXPECT_FLOAT_EQ(cosine.LearningRate(50), 0.1f);
  LRScheduler step = LRScheduler::Step(3, 0.5f, 0.8f);
  EXPECT_FLOAT_EQ(step.LearningRate(2), 0.8f);
  EXPECT_FLOAT_EQ(step.LearningRate(3), 0.4f);
  EXPECT_FLOAT_EQ(step.LearningRate(7), 0.2f);
  EXPECT_ERROR(LRScheduler::Step(0, 0.5f, 1.0f), ErrorCode::kInvalidArgument, "step_size");
  EXPECT_ERROR(LRScheduler::Linear(-1, 5, 1.0f), ErrorCode::kInvalidArgument, "warmup_steps");
}

TEST(TrainingSession, ParametersRoundTripThroughOneBuffer) {
  TrainingSession s = Open(MlpAdamW());
  std::vector<Tensor> batch = ImageBatch(8, 5);
  float loss = Loss(s.EvalStep(batch));
  std::vector<float> params = Parameters(s);
  Tensor zeros = Tensor::Zeros(DataType::kFloat32, {static_cast<int64_t>(params.size())});
  s.CopyBufferToParameters(zeros);
  EXPECT_NEAR(Loss(s.EvalStep(batch)), std::log(10.0f), 1e-5);  // zero weights: uniform prediction
  s.CopyBufferToParameters(Tensor::FromVector<float>(params, {static_cast<int64_t>(params.size())}));
  EXPECT_EQ(Loss(s.EvalStep(batch)), loss);
  EXPECT_EQ(s.state().GetParameter("net.1.weight").ToVector<float>()[0], params[0]);
  EXPECT_ERROR(s.CopyBufferToParameters(Tensor::Zeros(DataType::kFloat32, {3})), ErrorCode::kInvalidArgument,
               "float32 with");
}

TEST(TrainingSession, StateChangesAreSeenBySessionAndSavedAfterTraining) {
  ArtifactSet set = MlpAdamW();
  CheckpointState state = CheckpointState::Load(set.checkpoint());
  TrainingSession s = Open(set, state);
  Tensor bias = state.GetParameter("net.5.bias");
  for (int64_t i = 0; i < bias.numel(); ++i) bias.data<float>()[i] = i == 3 ? 100.0f : 0.0f;
  state.UpdateParameter("net.5.bias", bias);
  Tensor logits = s.EvalStep(ImageBatch(4, 6))[1];
  for (int64_t row = 0; row < 4; ++row) EXPECT_GT(logits.data<float>()[row * 10 + 3], 90.0f);

  s.TrainStep(ImageBatch(4, 6));
  s.OptimizerStep();
  state.AddProperty("epoch", int64_t{7});
  state.AddProperty("best", 0.5f);
  state.AddProperty("note", std::string("fashion"));
  fs::path out = TempDir("saved") / "ckpt";
  CheckpointState::Save(state, out.string(), /*include_optimizer_state=*/true);
  CheckpointState loaded = CheckpointState::Load(out.string());
  EXPECT_EQ(std::get<int64_t>(loaded.GetProperty("epoch")), 7);
  EXPECT_EQ(std::get<float>(loaded.GetProperty("best")), 0.5f);
  EXPECT_EQ(std::get<std::string>(loaded.GetProperty("note")), "fashion");
  ASSERT_TRUE(loaded.has_optimizer_state());
  EXPECT_EQ(loaded.checkpoint().optimizer->step, 1);
  EXPECT_EQ(loaded.GetParameter("net.5.bias").ToVector<float>(), state.GetParameter("net.5.bias").ToVector<float>());
  EXPECT_NE(loaded.GetParameter("net.5.bias").data<float>()[3], 100.0f);  // the optimizer step moved it

  EXPECT_ERROR(state.UpdateParameter("net.5.bias", Tensor::Zeros(DataType::kFloat32, {11})),
               ErrorCode::kInvalidArgument, "'net.5.bias' has shape [10]");
  EXPECT_ERROR(state.UpdateParameter("net.5.bias", Tensor::Zeros(DataType::kFloat64, {10})),
               ErrorCode::kInvalidArgument, "float64");
  EXPECT_ERROR(state.GetParameter("nope"), ErrorCode::kInvalidArgument, "no parameter 'nope'");
  EXPECT_ERROR(state.GetProperty("nope"), ErrorCode::kInvalidArgument, "no property 'nope'");
}

TEST(TrainingSession, LoadsModelsAndStateFromBuffers) {
  const ArtifactSet& set = MlpAdamW();
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  std::vector<char> ckpt = read(set.checkpoint()), training = read(set.training()), eval = read(set.eval());
  TrainingSession from_memory(CheckpointState::LoadFromBuffer(ckpt.data(), ckpt.size()),
                              ModelSource::FromBuffer(training.data(), training.size(), "training"),
                              ModelSource::FromBuffer(eval.data(), eval.size(), "eval"));
  TrainingSession from_files = Open(set);
  std::vector<Tensor> batch = ImageBatch(8, 7);
  EXPECT_EQ(Loss(from_memory.TrainStep(batch)), Loss(from_files.TrainStep(batch)));
  EXPECT_FALSE(from_memory.has_optimizer_model());
  EXPECT_ERROR(from_memory.OptimizerStep(), ErrorCode::kInvalidArgument, "no optimizer model");
}

// Train 3 + 2 steps with a save/load in between; equals 5 uninterrupted steps bit for bit.
TEST(TrainingSession, ResumeFromCheckpointIsExact) {
  const ArtifactSet& set = MlpAdamW();
  auto run = [&](TrainingSession& s, int first, int count) {
    for (int i = first; i < first + count; ++i) {
      s.TrainStep(ImageBatch(16, 100 + i));
      s.OptimizerStep();
      s.SchedulerStep();
      s.LazyResetGrad();
    }
  };
  TrainingSession straight = Open(set);
  straight.RegisterLinearLRScheduler(2, 10, 1e-3f);
  run(straight, 0, 5);

  TrainingSession first = Open(set);
  first.RegisterLinearLRScheduler(2, 10, 1e-3f);
  run(first, 0, 3);
  fs::path path = TempDir("resume") / "ckpt";
  CheckpointState::Save(first.state(), path.string(), true);
  TrainingSession resumed = Open(set, CheckpointState::Load(path.string()));
  EXPECT_EQ(resumed.optimizer_step(), 3);
  resumed.RegisterLinearLRScheduler(2, 10, 1e-3f);
  EXPECT_EQ(resumed.GetLearningRate(), first.GetLearningRate());
  run(resumed, 3, 2);
  EXPECT_EQ(Parameters(resumed), Parameters(straight));
  const auto& m1 = resumed.state().checkpoint().optimizer->momentums.at("net.1.weight");
  const auto& m2 = straight.state().checkpoint().optimizer->momentums.at("net.1.weight");
  EXPECT_EQ(m1[1].ToVector<float>(), m2[1].ToVector<float>());
}

TEST(TrainingSession, BatchNormRunningStatisticsAreWrittenBack) {
  static ArtifactSet set = Generate("lenet", kModels + "/lenet_bn.onnx", WithOutput());
  TrainingSession s = Open(set);
  std::vector<Tensor> batch = ImageBatch(8, 8);
  Tensor mean = s.state().GetParameter("features.1.running_mean");
  EXPECT_EQ(mean.ToVector<float>(), std::vector<float>(6, 0.0f));
  s.TrainStep(batch);
  std::vector<float> m1 = s.state().GetParameter("features.1.running_mean").ToVector<float>();
  s.TrainStep(batch);  // same batch, same weights: m2 = 0.9 * m1 + 0.1 * batch_mean = 1.9 * m1
  std::vector<float> m2 = s.state().GetParameter("features.1.running_mean").ToVector<float>();
  for (size_t c = 0; c < m1.size(); ++c) {
    EXPECT_GT(std::abs(m1[c]), 1e-6);
    EXPECT_NEAR(m2[c], 1.9f * m1[c], 1e-5f + 1e-5f * std::abs(m1[c]));
  }
}

TEST(TrainingSession, ExportedModelMatchesTheEvalGraph) {
  TrainingSession s = Open(MlpAdamW());
  std::vector<Tensor> batch = ImageBatch(16, 9);
  s.TrainStep(batch);
  s.OptimizerStep();
  fs::path path = TempDir("export") / "inference.onnx";
  s.ExportModelForInference(path.string(), {"output"});
  Session inference = Session::FromFile(path.string());
  EXPECT_EQ(inference.InputNames(), std::vector<std::string>{"input"});
  EXPECT_EQ(inference.model().graph.initializers.size(), 6u);
  Tensor exported = inference.Run({{"input", batch[0]}})[0];
  Tensor eval = s.EvalStep(batch)[1];
  EXPECT_EQ(exported.ToVector<float>(), eval.ToVector<float>());
  EXPECT_ERROR(s.ExportModelForInference(path.string(), {"nope"}), ErrorCode::kInvalidArgument, "'nope'");
}

// Step 7 of ORT's flow: artifacts made without additional outputs export the base model's own
// output by name, and any other value the eval graph computes, trimmed to what it needs.
TEST(TrainingSession, ExportsAnyValueOfTheEvalGraphByName) {
  static ArtifactSet plain = Generate("mlp_plain", kModels + "/mlp.onnx", ArtifactOptions{});
  TrainingSession s = Open(plain);
  std::vector<Tensor> batch = ImageBatch(8, 12);
  s.TrainStep(batch);
  s.OptimizerStep();
  Model eval_model = LoadModel(plain.eval());
  std::string hidden;
  for (const Node& node : eval_model.graph.nodes)
    if (node.op_type == "Relu" && hidden.empty()) hidden = node.outputs[0];
  ASSERT_FALSE(hidden.empty());

  fs::path dir = TempDir("export_base");
  fs::path path = dir / "inference.onnx";
  s.ExportModelForInference(path.string(), {"output", hidden});
  Session inference = Session::FromFile(path.string());
  EXPECT_EQ(inference.InputNames(), std::vector<std::string>{"input"});
  EXPECT_EQ(inference.OutputNames(), (std::vector<std::string>{"output", hidden}));
  for (const ValueInfo& output : inference.model().graph.outputs) EXPECT_EQ(output.dtype, DataType::kFloat32);
  std::vector<Tensor> exported = inference.Run({{"input", batch[0]}});
  TrainingSession with_output = Open(MlpAdamW(), s.state());
  EXPECT_EQ(exported[0].ToVector<float>(), with_output.EvalStep(batch)[1].ToVector<float>());
  EXPECT_EQ(exported[1].shape(), (Shape{8, exported[1].shape()[1]}));

  fs::path hidden_only = dir / "hidden.onnx";
  s.ExportModelForInference(hidden_only.string(), {hidden});
  EXPECT_LT(Session::FromFile(hidden_only.string()).model().graph.nodes.size(), inference.model().graph.nodes.size());
  EXPECT_ERROR(s.ExportModelForInference(path.string(), {"output", "no_such_value"}), ErrorCode::kInvalidArgument,
               "'no_such_value'");
  EXPECT_ERROR(s.ExportModelForInference(path.string()), ErrorCode::kInvalidArgument, "name the outputs");
}

TEST(TrainingSession, NominalCheckpointNeedsParametersFirst) {
  ArtifactOptions options = WithOutput();
  options.nominal_checkpoint = true;
  static ArtifactSet nominal = Generate("nominal", kModels + "/mlp.onnx", options);
  CheckpointState state = CheckpointState::Load(nominal.checkpoint());
  ASSERT_TRUE(state.is_nominal());
  TrainingSession s = Open(nominal, state);
  std::vector<Tensor> batch = ImageBatch(8, 10);
  EXPECT_ERROR(s.TrainStep(batch), ErrorCode::kInvalidArgument, "nominal");
  EXPECT_ERROR(s.OptimizerStep(), ErrorCode::kInvalidArgument, "nominal");
  EXPECT_ERROR(Parameters(s, false), ErrorCode::kInvalidArgument,
               "CopyParametersToBuffer: the checkpoint is nominal; supply the parameters with "
               "CopyBufferToParameters(buffer, trainable_only=false) first");

  TrainingSession full = Open(MlpAdamW());
  std::vector<float> all = Parameters(full, false);
  s.CopyBufferToParameters(Tensor::FromVector<float>(all, {static_cast<int64_t>(all.size())}), false);
  EXPECT_FALSE(state.is_nominal());
  EXPECT_EQ(Loss(s.TrainStep(batch)), Loss(full.TrainStep(batch)));
  EXPECT_EQ(state.ParameterNames().size(), 6u);
}

TEST(TrainingSession, SetSeedMakesDropoutReproducible) {
  // x[4, 8] -> MatMul(w) -> Dropout(0.5) -> y, MSE against targets.
  Model m;
  m.source = "dropout.onnx";
  m.opsets[""] = 17;
  m.graph.inputs.push_back(ValueInfo{"x", DataType::kFloat32, true, {Dim{4, ""}, Dim{8, ""}}, false});
  m.graph.initializers["w"] = Tensor::FromVector<float>(std::vector<float>(64, 0.25f), {8, 8});
  m.graph.initializers["ratio"] = Tensor::Scalar<float>(0.5f);
  m.graph.nodes.push_back(Node{"mm", "MatMul", "", {"x", "w"}, {"h"}, {}, 0});
  m.graph.nodes.push_back(Node{"drop", "Dropout", "", {"h", "ratio"}, {"y"}, {}, 0});
  m.graph.outputs.push_back(ValueInfo{"y", DataType::kFloat32, true, {Dim{4, ""}, Dim{8, ""}}, false});
  fs::path dir = TempDir("dropout");
  SaveModel(m, (dir / "dropout.onnx").string(), ExecutionExportOptions());
  ArtifactOptions options;
  options.loss.type = LossType::kMSE;
  options.frozen = {"ratio"};
  ArtifactSet set = Generate("dropout_artifacts", (dir / "dropout.onnx").string(), options);
  TrainingSession s = Open(set);
  std::vector<Tensor> batch = {Tensor::FromVector<float>(std::vector<float>(32, 1.0f), {4, 8}),
                               Tensor::Zeros(DataType::kFloat32, {4, 8})};
  s.SetSeed(7);
  float a = Loss(s.TrainStep(batch));
  float b = Loss(s.TrainStep(batch));
  s.SetSeed(7);
  float c = Loss(s.TrainStep(batch));
  EXPECT_NE(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(Loss(s.EvalStep(batch)), 4.0f);  // eval: no dropout, every y = 8 * 0.25 = 2
}

// ---- bad input: each error names what is wrong and leaves the state as it was ----

TEST(TrainingSessionErrors, BadFeedsLeaveTheStateUnchanged) {
  TrainingSession s = Open(MlpSgd());
  s.SetLearningRate(0.1f);
  TrainingSession reference = Open(MlpSgd());
  reference.SetLearningRate(0.1f);
  std::vector<Tensor> batch = ImageBatch(8, 11);
  s.TrainStep(batch);
  reference.TrainStep(batch);

  EXPECT_ERROR(s.TrainStep({batch[0]}), ErrorCode::kInvalidArgument, "expected 2 inputs (input, labels), got 1");
  EXPECT_ERROR(s.TrainStep({batch[0], batch[1], batch[1]}), ErrorCode::kInvalidArgument, "got 3");
  EXPECT_ERROR(s.TrainStep({batch[0], Tensor::Zeros(DataType::kFloat32, {8})}), ErrorCode::kInvalidArgument, "labels");
  EXPECT_ERROR(s.TrainStep({Tensor::Zeros(DataType::kFloat32, {8, 1, 28, 27}), batch[1]}), ErrorCode::kInvalidArgument,
               "input");
  EXPECT_ERROR(s.EvalStep({batch[0]}), ErrorCode::kInvalidArgument, "EvalStep: expected 2 inputs");
  Tensor bad_label = batch[1].Clone();
  bad_label.data<int64_t>()[0] = 42;  // out of range for 10 classes: fails inside the graph
  EXPECT_ANY_THROW(s.TrainStep({batch[0], bad_label}));

  s.OptimizerStep();
  reference.OptimizerStep();
  EXPECT_EQ(Parameters(s), Parameters(reference));
}

TEST(TrainingSessionErrors, CheckpointMustMatchTheModel) {
  const ArtifactSet& set = MlpAdamW();
  auto open_with = [&](const std::function<void(Checkpoint&)>& edit) {
    CheckpointState state = CheckpointState::Load(set.checkpoint());
    edit(state.checkpoint());
    return Open(set, state);
  };
  EXPECT_ERROR(open_with([](Checkpoint& c) { c.trainable.erase("net.3.weight"); }), ErrorCode::kInvalidArgument,
               "checkpoint has no parameter 'net.3.weight'");
  EXPECT_ERROR(open_with([](Checkpoint& c) { c.frozen["extra.weight"] = Tensor::Zeros(DataType::kFloat32, {2}); }),
               ErrorCode::kInvalidArgument, "checkpoint parameter 'extra.weight' is not an input");
  EXPECT_ERROR(open_with([](Checkpoint& c) { c.trainable["net.3.bias"] = Tensor::Zeros(DataType::kFloat32, {255}); }),
               ErrorCode::kInvalidArgument, "'net.3.bias' has shape [255]");
  EXPECT_ERROR(open_with([](Checkpoint& c) { c.trainable["net.3.bias"] = Tensor::Zeros(DataType::kFloat64, {256}); }),
               ErrorCode::kInvalidArgument, "'net.3.bias' is float64");
  EXPECT_ERROR(open_with([](Checkpoint& c) {
                 c.optimizer = OptimizerState{};
                 c.optimizer->momentums["net.1.bias"] = {Tensor::Zeros(DataType::kFloat32, {512})};
               }),
               ErrorCode::kInvalidArgument, "optimizer state of parameter 'net.1.bias' has 1 tensors");
  EXPECT_ERROR(TrainingSession(CheckpointState::Load(set.checkpoint()), set.dir + "/missing.onnx"), ErrorCode::kIoError,
               "missing.onnx");
}

TEST(TrainingSessionErrors, CorruptOrTruncatedCheckpoint) {
  const ArtifactSet& set = MlpAdamW();
  std::ifstream in(set.checkpoint(), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  fs::path dir = TempDir("corrupt");
  std::ofstream((dir / "truncated").string(), std::ios::binary).write(bytes.data(), 1000);
  EXPECT_ERROR(CheckpointState::Load((dir / "truncated").string()), ErrorCode::kInvalidModel, "truncated");
  std::vector<char> flipped = bytes;
  for (size_t i = 0; i < 64; ++i) flipped[i] = static_cast<char>(0xA5);
  std::ofstream((dir / "corrupt").string(), std::ios::binary).write(flipped.data(), flipped.size());
  EXPECT_ERROR(CheckpointState::Load((dir / "corrupt").string()), ErrorCode::kInvalidModel, "corrupt");
  EXPECT_ERROR(CheckpointState::Load((dir / "absent").string()), ErrorCode::kIoError, "absent");
}

// ---- TrainingAgent: forward/backward split, checked against float64 central differences ----

TEST(TrainingAgent, BackwardIsTheVectorJacobianProduct) {
  Model m;  // y = tanh(x @ w + b), float64
  m.source = "agent.onnx";
  m.opsets[""] = 17;
  m.graph.inputs.push_back(ValueInfo{"x", DataType::kFloat64, true, {Dim{-1, "batch"}, Dim{3, ""}}, false});
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> w(6), b(2), x(6), gy(4);
  for (auto* v : {&w, &b, &x, &gy})
    for (double& e : *v) e = normal(rng);
  m.graph.initializers["w"] = Tensor::FromVector<double>(w, {3, 2});
  m.graph.initializers["b"] = Tensor::FromVector<double>(b, {2});
  m.graph.nodes.push_back(Node{"mm", "MatMul", "", {"x", "w"}, {"h"}, {}, 0});
  m.graph.nodes.push_back(Node{"add", "Add", "", {"h", "b"}, {"z"}, {}, 0});
  m.graph.nodes.push_back(Node{"act", "Tanh", "", {"z"}, {"y"}, {}, 0});
  m.graph.outputs.push_back(ValueInfo{"y", DataType::kFloat64, true, {Dim{-1, "batch"}, Dim{2, ""}}, false});
  TrainingAgent agent = MakeTrainingAgent(m);
  EXPECT_EQ(agent.ParameterNames(), (std::vector<std::string>{"b", "w"}));

  Tensor xt = Tensor::FromVector<double>(x, {2, 3}), gt = Tensor::FromVector<double>(gy, {2, 2});
  auto objective = [&]() {
    Tensor y = agent.Forward({xt}).outputs[0];
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += y.data<double>()[i] * gy[i];
    return sum;
  };
  auto handle = agent.Forward({xt}).handle;
  TrainingAgent::BackwardResult grads = agent.Backward(handle, {gt});
  auto check = [&](Tensor value, const Tensor& grad) {
    for (int64_t i = 0; i < value.numel(); ++i) {
      double saved = value.data<double>()[i];
      value.data<double>()[i] = saved + 1e-6;
      double up = objective();
      value.data<double>()[i] = saved - 1e-6;
      double down = objective();
      value.data<double>()[i] = saved;
      EXPECT_NEAR(grad.data<double>()[i], (up - down) / 2e-6, 1e-8);
    }
  };
  check(agent.Parameter("w"), grads.parameter_gradients.at("w"));
  check(agent.Parameter("b"), grads.parameter_gradients.at("b"));
  check(xt, grads.input_gradients.at(0));
  EXPECT_ERROR(agent.Backward(handle, {gt}), ErrorCode::kInvalidArgument, "unknown handle");
  EXPECT_ERROR(agent.Backward(agent.Forward({xt}).handle, {Tensor::Zeros(DataType::kFloat64, {2, 3})}),
               ErrorCode::kInvalidArgument, "y.output_grad");
}
