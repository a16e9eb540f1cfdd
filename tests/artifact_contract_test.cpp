// The artifact contract (training/artifact_contract.hpp): every input and output of our generated
// artifacts and of ONNX Runtime's own artifact sets gets the role it plays.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "autodiff/agent_models.hpp"
#include "autodiff/artifacts.hpp"
#include "onnx/importer.hpp"
#include "runtime/export_options.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"
#include "training/artifact_contract.hpp"
#include "training/checkpoint_state.hpp"

namespace edgetrain {
namespace {

const std::string kModels = EDGETRAIN_MODELS_DIR;
const std::string kOrt = EDGETRAIN_ORT_ARTIFACTS;

using Roles = std::map<std::string, std::string>;  // value -> "role" or "role:parameter"

std::string Describe(const ArtifactValue& v) {
  std::string role = ArtifactRoleName(v.role);
  return v.parameter.empty() ? role : role + ":" + v.parameter;
}

ParameterNames Names(const std::set<std::string>& trainable, const std::set<std::string>& all) {
  return {[&all](std::string_view n) { return all.count(std::string(n)) != 0; },
          [&trainable](std::string_view n) { return trainable.count(std::string(n)) != 0; }};
}

Roles InputRoles(ArtifactModel kind, const Model& model, const ParameterNames& names) {
  Roles roles;
  for (const ValueInfo& in : model.graph.inputs)
    roles[in.name] = Describe(ClassifyInput(kind, in.name, names, in.is_sequence));
  return roles;
}

Roles OutputRoles(ArtifactModel kind, const Model& model, const ParameterNames& names) {
  Roles roles;
  for (const ValueInfo& out : model.graph.outputs) roles[out.name] = Describe(ClassifyOutput(kind, out.name, names));
  return roles;
}

TEST(ArtifactContract, ClassifiesOurLeNetBnArtifacts) {
  ArtifactOptions options;
  options.optimizer.type = OptimizerType::kSGD;
  options.optimizer.momentum = 0.9f;
  Artifacts a = BuildArtifacts(LoadModel(kModels + "/lenet_bn.onnx", ExecutionImportOptions()), options);
  std::set<std::string> trainable(a.trainable.begin(), a.trainable.end()), all = trainable;
  all.insert(a.frozen.begin(), a.frozen.end());
  all.insert(a.states.begin(), a.states.end());
  ASSERT_FALSE(a.states.empty());
  ParameterNames names = Names(trainable, all);

  Roles train_in = InputRoles(ArtifactModel::kTraining, a.training, names);
  Roles train_out = OutputRoles(ArtifactModel::kTraining, a.training, names);
  size_t gradients = 0, updates = 0, users = 0;
  for (const auto& [name, role] : train_out) {
    if (role.starts_with("gradient:")) {
      ++gradients;
      EXPECT_EQ(role, "gradient:" + name.substr(0, name.size() - 5)) << name;
      EXPECT_TRUE(trainable.count(role.substr(9))) << name;
    } else if (role.starts_with("state update:")) {
      ++updates;
      EXPECT_TRUE(std::count(a.states.begin(), a.states.end(), role.substr(13))) << name;
    } else {
      ++users;
      EXPECT_EQ(role, "user") << name;
    }
  }
  EXPECT_EQ(gradients, a.trainable.size());
  EXPECT_EQ(updates, a.states.size());
  EXPECT_EQ(users, 1u);  // the loss
  for (const std::string& p : a.trainable) EXPECT_EQ(train_in.at(p), "parameter:" + p);
  for (const std::string& s : a.states) EXPECT_EQ(train_in.at(s), "parameter:" + s);
  size_t user_inputs = 0;
  for (const auto& [name, role] : train_in) user_inputs += role == "user";
  EXPECT_EQ(user_inputs, 2u);  // the image and the labels

  for (const auto& [name, role] : OutputRoles(ArtifactModel::kEval, a.eval, names)) EXPECT_EQ(role, "user") << name;

  Roles opt_in = InputRoles(ArtifactModel::kOptimizer, a.optimizer, names);
  Roles opt_out = OutputRoles(ArtifactModel::kOptimizer, a.optimizer, names);
  EXPECT_EQ(opt_in.at("learning_rate"), "learning rate");
  EXPECT_EQ(opt_in.at("step"), "step");
  EXPECT_EQ(opt_in.size(), 2 + 3 * a.trainable.size());
  EXPECT_EQ(opt_out.size(), 2 * a.trainable.size());
  for (const std::string& p : a.trainable) {
    EXPECT_EQ(opt_in.at(p), "parameter:" + p);
    EXPECT_EQ(opt_in.at(GradientName(p)), "gradient:" + p);
    EXPECT_EQ(opt_in.at(OptimizerStateName(p, kSgdMomentumState)), "optimizer state:" + p);
    EXPECT_EQ(opt_out.at(StateUpdateName(p)), "parameter update:" + p);
    EXPECT_EQ(opt_out.at(StateUpdateName(OptimizerStateName(p, kSgdMomentumState))), "optimizer state update:" + p);
  }
}

TEST(ArtifactContract, ClassifiesOrtArtifactSets) {
  for (const std::string set : {"lenet_cnn", "eeg_cnn", "mnist_webdemo_v1"}) {
    SCOPED_TRACE(set);
    const std::string dir = kOrt + "/" + set + "/";
    CheckpointState state = CheckpointState::Load(dir + "checkpoint");
    std::set<std::string> all, trainable;
    for (const std::string& name : state.ParameterNames()) {
      all.insert(name);
      if (state.IsTrainable(name)) trainable.insert(name);
    }
    ASSERT_FALSE(trainable.empty());
    ParameterNames names = Names(trainable, all);
    Model training = LoadModel(dir + "training_model.onnx", RuntimeImportOptions());
    Roles in = InputRoles(ArtifactModel::kTraining, training, names);
    Roles out = OutputRoles(ArtifactModel::kTraining, training, names);
    EXPECT_EQ(in.at("lazy_reset_grad"), "lazy reset flag");
    for (const std::string& p : trainable) {
      EXPECT_EQ(in.at(p), "parameter:" + p);
      EXPECT_EQ(in.at(OrtAccumulationBufferName(p)), "accumulation buffer:" + p);
      EXPECT_EQ(out.at(p + std::string(kOrtAccumulationFlagSuffix)), "accumulation flag:" + p);
    }
    size_t user_inputs = 0, user_outputs = 0;
    for (const auto& [name, role] : in) user_inputs += role == "user";
    for (const auto& [name, role] : out) user_outputs += role == "user";
    EXPECT_EQ(in.size(), user_inputs + all.size() + trainable.size() + 1);
    EXPECT_EQ(out.size(), user_outputs + trainable.size());
    EXPECT_GE(user_inputs, 1u);
    EXPECT_GE(user_outputs, 1u);  // the loss

    Model optimizer = LoadModel(dir + "optimizer_model.onnx", RuntimeImportOptions());
    EXPECT_EQ(InputRoles(ArtifactModel::kOptimizer, optimizer, names),
              (Roles{{"learning_rate", "learning rate"},
                     {"step", "step"},
                     {"params", "parameter sequence"},
                     {"gradients", "gradient sequence"},
                     {"first_order_moments", "optimizer state sequence"},
                     {"second_order_moments", "optimizer state sequence"}}));
  }
}

TEST(ArtifactContract, NamesNeedTheirParameter) {
  std::set<std::string> trainable{"w", "a.b"}, all{"w", "a.b", "bn.running_mean"};
  ParameterNames names = Names(trainable, all);
  auto in = [&](ArtifactModel m, const std::string& n) { return Describe(ClassifyInput(m, n, names)); };
  auto out = [&](ArtifactModel m, const std::string& n) { return Describe(ClassifyOutput(m, n, names)); };
  EXPECT_EQ(out(ArtifactModel::kTraining, "w_grad"), "gradient:w");
  EXPECT_EQ(out(ArtifactModel::kTraining, "x_grad"), "user");  // x is no parameter
  EXPECT_EQ(out(ArtifactModel::kTraining, "_grad"), "user");
  EXPECT_EQ(out(ArtifactModel::kTraining, "bn.running_mean.updated"), "state update:bn.running_mean");
  EXPECT_EQ(out(ArtifactModel::kTraining, "bn.running_var.updated"), "user");
  EXPECT_EQ(out(ArtifactModel::kEval, "w_grad"), "user");  // eval models have no gradients
  EXPECT_EQ(in(ArtifactModel::kEval, "lazy_reset_grad"), "user");
  EXPECT_EQ(in(ArtifactModel::kTraining, "labels"), "user");
  EXPECT_EQ(in(ArtifactModel::kOptimizer, "a.b.exp_avg"), "optimizer state:a.b");  // dots inside the name
  EXPECT_EQ(in(ArtifactModel::kOptimizer, "a.b_grad"), "gradient:a.b");
  EXPECT_EQ(in(ArtifactModel::kOptimizer, "bn.running_mean"), "user");  // frozen: no optimizer input
  EXPECT_EQ(in(ArtifactModel::kOptimizer, "c.exp_avg"), "user");
  EXPECT_EQ(in(ArtifactModel::kOptimizer, "w."), "user");
  EXPECT_EQ(out(ArtifactModel::kOptimizer, "a.b.exp_avg_sq.updated"), "optimizer state update:a.b");
  EXPECT_EQ(out(ArtifactModel::kOptimizer, "w.updated"), "parameter update:w");
  EXPECT_EQ(out(ArtifactModel::kOptimizer, "w_grad.updated"), "user");
  EXPECT_EQ(out(ArtifactModel::kOptimizer, "updated_flag"), "user");
  EXPECT_EQ(Describe(ClassifyInput(ArtifactModel::kOptimizer, "moments", names, /*is_sequence=*/true)),
            "optimizer state sequence");
}

// ---- the seams between the layers ----

Model FusedModel() {
  Model m;  // one ai.edgetrain operator: exporting it needs its standard-ONNX definition
  m.source = "fused.onnx";
  m.opsets = {{"", 17}, {kEdgetrainDomain, 1}};
  m.graph.inputs.push_back(ValueInfo{"dy", DataType::kFloat32, true, {Dim{4, ""}}, false});
  m.graph.inputs.push_back(ValueInfo{"x", DataType::kFloat32, true, {Dim{4, ""}}, false});
  m.graph.nodes.push_back(Node{"g", "ReluGrad", kEdgetrainDomain, {"dy", "x"}, {"y"}, {}, 0});
  m.graph.outputs.push_back(ValueInfo{"y", DataType::kFloat32, true, {Dim{4, ""}}, false});
  return m;
}

TEST(LayerSeams, ExporterTakesFunctionDefinitionsFromItsCaller) {
  EXPECT_ERROR(SerializeModel(FusedModel()), ErrorCode::kInvalidArgument,
               "model 'fused.onnx': operator ai.edgetrain:ReluGrad has no function definition");
  ExportOptions none;
  none.function_of = [](const std::string&, const std::string&) -> const FunctionDef* { return nullptr; };
  EXPECT_ERROR(SerializeModel(FusedModel(), none), ErrorCode::kInvalidArgument, "ai.edgetrain:ReluGrad");
  // With the registry's definitions the file carries the function and any ONNX runtime can load it.
  const std::string bytes = SerializeModel(FusedModel(), ExecutionExportOptions());
  EXPECT_NE(bytes.find("ai.edgetrain"), std::string::npos);
  Model kept = LoadModelFromBuffer(bytes.data(), bytes.size(), "fused", ".", ExecutionImportOptions());
  ASSERT_EQ(kept.graph.nodes.size(), 1u);
  EXPECT_EQ(kept.graph.nodes[0].op_type, "ReluGrad");
  EXPECT_EQ(kept.graph.nodes[0].domain, kEdgetrainDomain);
  Model inlined = LoadModelFromBuffer(bytes.data(), bytes.size());  // no kernels: the function body
  EXPECT_GT(inlined.graph.nodes.size(), 1u);
  for (const Node& n : inlined.graph.nodes) EXPECT_EQ(n.domain, "") << n.Describe();
}

TEST(LayerSeams, TrainingAgentRunsModelsBuiltOffline) {
  Model m;  // y = x * w
  m.source = "scale.onnx";
  m.opsets[""] = 17;
  m.graph.inputs.push_back(ValueInfo{"x", DataType::kFloat32, true, {Dim{2, ""}}, false});
  m.graph.initializers["w"] = Tensor::FromVector<float>({3, 5}, {2});
  m.graph.nodes.push_back(Node{"mul", "Mul", "", {"x", "w"}, {"y"}, {}, 0});
  m.graph.outputs.push_back(ValueInfo{"y", DataType::kFloat32, true, {Dim{2, ""}}, false});
  AgentModels models = BuildAgentModels(m);
  EXPECT_EQ(models.parameters, std::vector<std::string>{"w"});
  EXPECT_EQ(models.backward_fetches.size(), 2u);  // dx, dw
  bool has_output_grad = false;
  for (const ValueInfo& in : models.backward.graph.inputs) has_output_grad |= in.name == AgentOutputGradientName("y");
  EXPECT_TRUE(has_output_grad);

  TrainingAgent agent(models);
  auto forward = agent.Forward({Tensor::FromVector<float>({1, 2}, {2})});
  EXPECT_EQ(forward.outputs[0].ToDoubleVector(), (std::vector<double>{3, 10}));
  auto backward = agent.Backward(forward.handle, {Tensor::FromVector<float>({1, 1}, {2})});
  EXPECT_EQ(backward.input_gradients[0].ToDoubleVector(), (std::vector<double>{3, 5}));
  EXPECT_EQ(backward.parameter_gradients.at("w").ToDoubleVector(), (std::vector<double>{1, 2}));

  AgentModels missing_value = models;
  missing_value.parameter_values.clear();
  EXPECT_ERROR(TrainingAgent{missing_value}, ErrorCode::kInvalidArgument, "parameter 'w' has no value");
  AgentModels missing_flags = models;
  missing_flags.input_has_gradient.clear();
  EXPECT_ERROR(TrainingAgent{missing_flags}, ErrorCode::kInvalidArgument, "1 inputs but 0 input_has_gradient");
}

}  // namespace
}  // namespace edgetrain
