// Artifact generation: options, layout of the generated models, and the errors a user can cause.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autodiff/artifacts.hpp"
#include "checkpoint/checkpoint.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

using namespace edgetrain;
using namespace edgetrain::testing;

namespace {

// x[batch, 4] -> Gemm(w1, b1) -> Relu -> Gemm(w2, b2) -> y[batch, 3]; plus an int64 shape constant.
Model TwoLayerModel() {
  Model m;
  m.source = "two_layer.onnx";
  m.opsets[""] = 17;
  Graph& g = m.graph;
  ValueInfo x;
  x.name = "x";
  x.dtype = DataType::kFloat32;
  x.has_shape = true;
  x.shape = {Dim{-1, "batch"}, Dim{4, ""}};
  g.inputs.push_back(x);
  g.initializers["w1"] = Tensor::FromVector<float>(std::vector<float>(20, 0.1f), {5, 4});
  g.initializers["b1"] = Tensor::FromVector<float>(std::vector<float>(5, 0.0f), {5});
  g.initializers["w2"] = Tensor::FromVector<float>(std::vector<float>(15, -0.2f), {3, 5});
  g.initializers["b2"] = Tensor::FromVector<float>(std::vector<float>(3, 0.1f), {3});
  g.initializers["unused_shape"] = Tensor::FromVector<int64_t>({1, 3}, {2});
  g.nodes.push_back(Node{"fc1", "Gemm", "", {"x", "w1", "b1"}, {"h"}, {{"transB", Attribute::Int(1)}}, 0});
  g.nodes.push_back(Node{"act", "Relu", "", {"h"}, {"a"}, {}, 0});
  g.nodes.push_back(Node{"fc2", "Gemm", "", {"a", "w2", "b2"}, {"y"}, {{"transB", Attribute::Int(1)}}, 0});
  ValueInfo y;
  y.name = "y";
  y.dtype = DataType::kFloat32;
  y.has_shape = true;
  y.shape = {Dim{-1, "batch"}, Dim{3, ""}};
  g.outputs.push_back(y);
  g.value_info["h"] = ValueInfo{"h", DataType::kFloat32, true, {Dim{-1, "batch"}, Dim{5, ""}}, false};
  g.value_info["a"] = ValueInfo{"a", DataType::kFloat32, true, {Dim{-1, "batch"}, Dim{5, ""}}, false};
  return m;
}

std::vector<std::string> InputNames(const Model& m) {
  std::vector<std::string> names;
  for (const auto& in : m.graph.inputs) names.push_back(in.name);
  return names;
}

std::vector<std::string> OutputNames(const Model& m) {
  std::vector<std::string> names;
  for (const auto& o : m.graph.outputs) names.push_back(o.name);
  return names;
}

}  // namespace

TEST(Artifacts, DefaultLayout) {
  Artifacts a = BuildArtifacts(TwoLayerModel(), {});
  EXPECT_EQ(a.trainable, (std::vector<std::string>{"w1", "b1", "w2", "b2"}));
  EXPECT_TRUE(a.frozen.empty());
  EXPECT_EQ(InputNames(a.training), (std::vector<std::string>{"x", "labels", "w1", "b1", "w2", "b2"}));
  EXPECT_EQ(OutputNames(a.training),
            (std::vector<std::string>{"loss", "w1_grad", "b1_grad", "w2_grad", "b2_grad"}));
  EXPECT_EQ(InputNames(a.eval), (std::vector<std::string>{"x", "labels", "w1", "b1", "w2", "b2"}));
  EXPECT_EQ(OutputNames(a.eval), (std::vector<std::string>{"loss"}));
}

TEST(Artifacts, FrozenAndRequiresGradLists) {
  ArtifactOptions options;
  options.frozen = {"w1", "b1"};
  Artifacts a = BuildArtifacts(TwoLayerModel(), options);
  EXPECT_EQ(a.trainable, (std::vector<std::string>{"w2", "b2"}));
  EXPECT_EQ(a.frozen, (std::vector<std::string>{"w1", "b1"}));
  EXPECT_EQ(OutputNames(a.training), (std::vector<std::string>{"loss", "w2_grad", "b2_grad"}));

  options = {};
  options.requires_grad = {"w2"};
  options.additional_outputs = {"y"};
  a = BuildArtifacts(TwoLayerModel(), options);
  EXPECT_EQ(a.trainable, (std::vector<std::string>{"w2"}));
  EXPECT_EQ(OutputNames(a.training), (std::vector<std::string>{"loss", "y", "w2_grad"}));
  EXPECT_EQ(OutputNames(a.eval), (std::vector<std::string>{"loss", "y"}));
}

TEST(Artifacts, WritesFilesWithPrefixAndNominalCheckpoint) {
  std::string dir = ::testing::TempDir() + "/artifacts_prefix";
  std::filesystem::remove_all(dir);
  std::string model = ::testing::TempDir() + "/two_layer.onnx";
  {
    onnx::ModelProto m = NewModel();
    auto* g = m.mutable_graph();
    AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"batch", "4"});
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(3);
    w->add_dims(4);
    for (int i = 0; i < 12; ++i) w->add_float_data(0.01f * static_cast<float>(i));
    AddNode(g, "MatMul", {"x", "wt"}, {"y"});
    AddNode(g, "Transpose", {"w"}, {"wt"}, "transpose_w");
    AddValue(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {"batch", "3"});
    std::ofstream(model, std::ios::binary) << Serialize(m);
  }
  ArtifactOptions options;
  options.prefix = "mlp_";
  options.nominal_checkpoint = true;
  ArtifactPaths paths = GenerateArtifacts(model, dir, options);
  EXPECT_EQ(paths.training_model, dir + "/mlp_training_model.onnx");
  for (const auto& p : {paths.training_model, paths.eval_model, paths.optimizer_model, paths.checkpoint})
    EXPECT_TRUE(std::filesystem::exists(p)) << p;
  Checkpoint c = LoadCheckpoint(paths.checkpoint);
  EXPECT_TRUE(c.is_nominal);
  EXPECT_EQ(c.nominal_trainable.count("w"), 1u);
  EXPECT_TRUE(c.trainable.empty());
}

TEST(Artifacts, BadOptionsNameTheProblem) {
  ArtifactOptions options;
  options.frozen = {"nonexistent"};
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), options), ErrorCode::kInvalidArgument,
               "frozen parameter 'nonexistent' is not an initializer of two_layer.onnx");
  options = {};
  options.requires_grad = {"unused_shape"};
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), options), ErrorCode::kInvalidArgument, "only float parameters can train");
  options = {};
  options.requires_grad = {"w1"};
  options.frozen = {"w1"};
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), options), ErrorCode::kInvalidArgument,
               "'w1' is listed both as requires-grad and as frozen");
  options = {};
  options.frozen = {"w1", "b1", "w2", "b2"};
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), options), ErrorCode::kInvalidArgument, "has no trainable parameter");
  options = {};
  options.loss_inputs = {"logits"};
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), options), ErrorCode::kInvalidArgument,
               "loss input 'logits' is not an output of two_layer.onnx (outputs: y)");
}

TEST(Artifacts, LossThatDoesNotFitTheOutputIsAnError) {
  Model m = TwoLayerModel();
  m.graph.nodes.push_back(Node{"flat", "ReduceSum", "", {"y"}, {"s"}, {{"keepdims", Attribute::Int(0)}}, 0});
  m.graph.outputs = {ValueInfo{"s", DataType::kFloat32, true, {}, false}};
  EXPECT_ERROR(BuildArtifacts(m, {}), ErrorCode::kInvalidArgument, "'s'");
}

TEST(Artifacts, OperatorWithoutGradientRuleIsNamed) {
  Model m = TwoLayerModel();
  // Round is not differentiable: on the path to w1 it must be reported by node and operator.
  m.graph.nodes[1] = Node{"rounding", "Round", "", {"h"}, {"a"}, {}, 0};
  EXPECT_ERROR(BuildArtifacts(m, {}), ErrorCode::kNotImplemented, "node 'rounding' (Round)");
}

TEST(Artifacts, LossComposedInCppTrainsLikeTheBuiltInOne) {
  auto squared_error = [](LossComposer& c) {
    std::string target = c.Target("y_target", DataType::kFloat32, {Dim{-1, "batch"}, Dim{3, ""}});
    std::string diff = c.Op("Sub", {c.Prediction(0), target});
    std::string half = c.Constant(Tensor::Scalar<float>(0.5f));
    return c.Op("Mul", {half, c.Op("ReduceMean", {c.Op("Mul", {diff, diff})}, {{"keepdims", Attribute::Int(0)}})});
  };
  ArtifactOptions composed;
  composed.loss.type = LossType::kCustom;
  composed.loss.compose = squared_error;
  ArtifactOptions builtin;
  builtin.loss.type = LossType::kMSE;
  Artifacts a = BuildArtifacts(TwoLayerModel(), composed);
  Artifacts b = BuildArtifacts(TwoLayerModel(), builtin);
  EXPECT_EQ(InputNames(a.training), (std::vector<std::string>{"x", "y_target", "w1", "b1", "w2", "b2"}));

  std::map<std::string, Tensor> feeds;
  feeds["x"] = Tensor::FromVector<float>({0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 3}, {2, 4});
  Tensor target = Tensor::FromVector<float>({1, 0, -1, 0.5f, 0.25f, 2}, {2, 3});
  for (const auto& [name, t] : TwoLayerModel().graph.initializers) feeds[name] = t;
  feeds.erase("unused_shape");
  std::map<std::string, Tensor> feeds_a = feeds, feeds_b = feeds;
  feeds_a["y_target"] = target;
  feeds_b[InputNames(b.training)[1]] = target;
  std::vector<Tensor> out_a = Session(a.training).Run(feeds_a);
  std::vector<Tensor> out_b = Session(b.training).Run(feeds_b);
  ASSERT_EQ(out_a.size(), out_b.size());
  for (size_t k = 0; k < out_a.size(); ++k) {  // half the MSE: half its loss and gradients
    std::vector<float> va = out_a[k].ToVector<float>(), vb = out_b[k].ToVector<float>();
    for (size_t e = 0; e < va.size(); ++e) EXPECT_NEAR(va[e], 0.5f * vb[e], 1e-6f) << "output " << k;
  }

  composed.loss.compose = [](LossComposer& c) {
    return c.Op("ReduceSum", {c.Target("x", DataType::kFloat32, {Dim{3, ""}})});
  };
  EXPECT_ERROR(BuildArtifacts(TwoLayerModel(), composed), ErrorCode::kInvalidArgument,
               "target name 'x' is already a value of the model");
}
