// The header-only C++ wrapper over the C ABI (edgetrain_capi.hpp): the training flow through RAII
// handles, and C error objects surfacing as et::Error with the C message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "edgetrain/edgetrain_capi.hpp"

namespace {

const std::string kArtifacts = EDGETRAIN_CAPI_ARTIFACTS;
constexpr int64_t kBatch = 8;
constexpr int64_t kPixels = 28 * 28;

// Class c lights up the c-th band of 78 pixels.
struct Batch {
  Batch() : images(kBatch * kPixels, 0.0f), labels(kBatch) {
    for (int64_t i = 0; i < kBatch; ++i) {
      labels[i] = i % 10;
      for (int64_t p = labels[i] * 78; p < (labels[i] + 1) * 78; ++p) images[i * kPixels + p] = 1.0f;
    }
  }
  std::vector<et::TensorRef> inputs() const { return {{images, {kBatch, 1, 28, 28}}, {labels, {kBatch}}}; }
  std::vector<float> images;
  std::vector<int64_t> labels;
};

// Calls `fn` expecting an et::Error; returns it.
template <typename Fn>
et::Error ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const et::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an et::Error";
  return et::Error(ET_OK, "");
}

TEST(CApiWrapper, TrainsSavesExportsAndRunsTheAgent) {
  et::CheckpointState state = et::CheckpointState::Load(kArtifacts + "/checkpoint");
  EXPECT_EQ(state.ParameterNames().size(), 6u);
  EXPECT_EQ(state.ParameterShape("net.3.weight"), (std::vector<int64_t>{256, 512}));

  et::TrainingSession session(state, kArtifacts + "/training_model.onnx", kArtifacts + "/eval_model.onnx",
                              kArtifacts + "/optimizer_model.onnx", et::SessionOptions().num_threads(1).seed(3));
  EXPECT_EQ(session.InputNames(), (std::vector<std::string>{"input", "labels"}));
  EXPECT_EQ(session.OutputNames(ET_MODEL_EVAL), (std::vector<std::string>{"loss", "output"}));

  Batch batch;
  session.SetLearningRate(1e-3f);
  std::vector<float> losses;
  for (int step = 0; step < 10; ++step) {
    et::Values outputs = session.TrainStep(batch.inputs());
    ASSERT_EQ(outputs.size(), 2u);
    EXPECT_EQ(outputs.name(0), "loss");
    EXPECT_EQ(outputs.shape(1), (std::vector<int64_t>{kBatch, 10}));
    losses.push_back(outputs.ToVector<float>(0).at(0));
    session.OptimizerStep();
    session.LazyResetGrad();
  }
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "first " << losses.front() << ", last " << losses.back();

  session.RegisterLinearLRScheduler(/*warmup_steps=*/12, /*total_steps=*/20, /*initial_lr=*/1e-2f);
  EXPECT_FLOAT_EQ(session.GetLearningRate(), 1e-2f * 10 / 12);  // applied at once, at step 10
  session.OptimizerStep();
  session.SchedulerStep();
  EXPECT_FLOAT_EQ(session.GetLearningRate(), 1e-2f * 11 / 12);

  std::vector<float> parameters = session.CopyParametersToBuffer();
  EXPECT_EQ(parameters.size(), session.GetParametersSize());
  session.CopyBufferToParameters(parameters);
  EXPECT_EQ(session.CopyParametersToBuffer(), parameters);

  state.AddProperty("epoch", int64_t{2});
  state.AddProperty("note", std::string("wrapper"));
  state.Save(kArtifacts + "/wrapper_checkpoint", /*include_optimizer_state=*/true);
  et::CheckpointState reloaded = et::CheckpointState::Load(kArtifacts + "/wrapper_checkpoint");
  EXPECT_EQ(reloaded.GetIntProperty("epoch"), 2);
  EXPECT_EQ(reloaded.GetStringProperty("note"), "wrapper");
  EXPECT_EQ(reloaded.GetParameter<float>("net.5.bias"), state.GetParameter<float>("net.5.bias"));

  session.ExportModelForInference(kArtifacts + "/wrapper_inference.onnx", {"output"});
  et::TrainingAgent agent(kArtifacts + "/wrapper_inference.onnx");
  EXPECT_EQ(agent.InputNames(), std::vector<std::string>{"input"});
  et::TrainingAgent::ForwardResult forward = agent.Forward({batch.inputs()[0]});
  std::vector<float> eval_output = session.EvalStep(batch.inputs()).ToVector<float>(1);
  std::vector<float> agent_output = forward.outputs.ToVector<float>(0);
  ASSERT_EQ(agent_output.size(), eval_output.size());
  for (size_t i = 0; i < agent_output.size(); ++i) EXPECT_NEAR(agent_output[i], eval_output[i], 1e-5);

  std::vector<float> ones(kBatch * 10, 1.0f);
  et::TrainingAgent::BackwardResult backward = agent.Backward(forward.handle, {{ones, {kBatch, 10}}});
  EXPECT_EQ(backward.input_gradients.shape(0), (std::vector<int64_t>{kBatch, 1, 28, 28}));
  std::vector<float> bias_gradient =
      backward.parameter_gradients.ToVector<float>(backward.parameter_gradients.index("net.5.bias"));
  EXPECT_EQ(bias_gradient, std::vector<float>(10, static_cast<float>(kBatch)));
}

TEST(CApiWrapper, MemoryBudgetNamesTheSmallestThatFitsWhichTrainsToTheSameLoss) {
  Batch batch;
  et::CheckpointState state = et::CheckpointState::Load(kArtifacts + "/checkpoint");
  et::TrainingSession free(state, kArtifacts + "/training_model.onnx");
  EXPECT_EQ(free.GetMemoryPlan().arena_bytes, 0u);
  const float expected = free.TrainStep(batch.inputs()).ToVector<float>(0).at(0);
  const uint64_t unconstrained = free.GetMemoryPlan().arena_bytes;
  EXPECT_GT(unconstrained, 0u);

  et::Error error = ErrorOf([] { et::SessionOptions().memory_budget(0); });
  EXPECT_EQ(error.code(), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error.what()).find("memory budget must be a positive number of bytes, got 0"),
            std::string::npos) << error.what();
  et::TrainingSession tiny(state, kArtifacts + "/training_model.onnx", {}, {}, et::SessionOptions().memory_budget(64));
  error = ErrorOf([&] { tiny.TrainStep(batch.inputs()); });
  EXPECT_EQ(error.code(), ET_ERROR_RESOURCE_EXHAUSTED);
  const std::string message = error.what(), marker = "a budget of at least ";
  EXPECT_NE(message.find("the memory budget of 64 bytes cannot be met"), std::string::npos) << message;
  ASSERT_NE(message.find(marker), std::string::npos) << message;
  const int64_t smallest = std::stoll(message.substr(message.find(marker) + marker.size()));
  EXPECT_GT(smallest, 64);
  EXPECT_LE(static_cast<uint64_t>(smallest), unconstrained);

  et::TrainingSession fitted(state, kArtifacts + "/training_model.onnx", {}, {},
                             et::SessionOptions().memory_budget(smallest));
  EXPECT_EQ(fitted.TrainStep(batch.inputs()).ToVector<float>(0).at(0), expected);
  EXPECT_EQ(fitted.GetMemoryPlan().arena_bytes, static_cast<uint64_t>(smallest));
}

TEST(CApiWrapper, CErrorsBecomeEtErrorsWithTheSameMessage) {
  const std::string missing = kArtifacts + "/no_such_checkpoint";
  et_checkpoint_state* state = nullptr;
  et_error* c_error = et_checkpoint_load(missing.c_str(), &state);
  ASSERT_NE(c_error, nullptr);
  const std::string c_message = et_error_get_message(c_error);
  const et_error_code c_code = et_error_get_code(c_error);
  et_error_free(c_error);
  EXPECT_NE(c_message.find(missing), std::string::npos) << c_message;

  et::Error error = ErrorOf([&] { et::CheckpointState::Load(missing); });
  EXPECT_EQ(error.code(), c_code);
  EXPECT_EQ(error.code(), ET_ERROR_IO);
  EXPECT_EQ(std::string(error.what()), c_message);

  et::CheckpointState loaded = et::CheckpointState::Load(kArtifacts + "/checkpoint");
  et::TrainingSession session(loaded, kArtifacts + "/training_model.onnx");
  Batch batch;
  std::vector<et::TensorRef> wrong = {{batch.images, {kBatch, 28, 28}}, {batch.labels, {kBatch}}};
  error = ErrorOf([&] { session.TrainStep(wrong); });
  EXPECT_EQ(error.code(), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error.what()).find("input"), std::string::npos) << error.what();
  error = ErrorOf([&] { session.EvalStep(batch.inputs()); });
  EXPECT_NE(std::string(error.what()).find("no eval model"), std::string::npos) << error.what();
  error = ErrorOf([&] { loaded.GetFloatProperty("missing_property"); });
  EXPECT_NE(std::string(error.what()).find("missing_property"), std::string::npos) << error.what();
  error = ErrorOf([] { et::SessionOptions().memory_limit(0); });
  EXPECT_EQ(error.code(), ET_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error.what()).find("positive number of bytes, got 0"), std::string::npos) << error.what();
  error = ErrorOf([&] {
    et::TrainingSession(loaded, kArtifacts + "/training_model.onnx", {}, {}, et::SessionOptions().memory_limit(4096));
  });
  EXPECT_EQ(error.code(), ET_ERROR_RESOURCE_EXHAUSTED);
  EXPECT_NE(std::string(error.what()).find("more than the memory limit of 4096 bytes"), std::string::npos) << error.what();
  error = ErrorOf([&] { loaded.UpdateParameter("net.1.bias", {batch.images, {3}}); });
  EXPECT_NE(std::string(error.what()).find("net.1.bias"), std::string::npos) << error.what();
  error = ErrorOf([&] { loaded.GetParameter<int32_t>("net.1.bias"); });
  EXPECT_NE(std::string(error.what()).find("net.1.bias"), std::string::npos) << error.what();
}

}  // namespace
