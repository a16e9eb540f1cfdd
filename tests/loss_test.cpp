// Losses appended to a forward graph: values and gradients against PyTorch, target inputs, errors.
// Expected numbers were computed offline with /usr/bin/python3 and torch (the call is named beside each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>

#include "autodiff/autodiff.hpp"
#include "autodiff/losses.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "ops/kernel.hpp"
#include "runtime/export_options.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

using namespace edgetrain;
using namespace edgetrain::testing;

namespace {

// Inputs of the value tests (float32); the gradient tests use the same numbers in float64.
const std::vector<double> kRegressionPred = {0.5, -1.2, 2.0, 0.1, 3.0, -0.7};                          // x [2, 3]
const std::vector<double> kRegressionTarget = {0.2, -1.0, 0.5, 0.4, 0.0, -2.0};                        // t [2, 3]
const std::vector<double> kLogits = {0.5, -1.2, 2.0, 30.0, -40.0, -0.7};                               // bx [2, 3]
const std::vector<double> kBinaryTargets = {1, 0, 1, 0, 1, 0.3};                                       // bt [2, 3]
const std::vector<double> kScores = {1.0, -0.5, 0.3, 2.0, 0.2, 0.1, -1.0, 0.0, -0.3, 0.8, 1.5, -2.0};  // s [3, 4]
const std::vector<int64_t> kLabels = {1, 0, 3};                                                        // lab [3]
const std::vector<float> kClassWeights = {0.5f, 1.0f, 2.0f, 1.5f};                                     // w [4]
const std::vector<double> kLogProbs = {-1.2, -0.4, -2.0, -0.7, -1.5, -1.1};                            // kx [2, 3]
const std::vector<double> kProbTargets = {0.2, 0.8, 0.0, 0.5, 0.25, 0.25};                             // kt [2, 3]
const std::vector<double> kLogTargets = {-1.0, -0.3, -2.5, -0.6, -1.4, -0.9};                          // klt [2, 3]

std::vector<Dim> Dims(const std::vector<std::string>& dims) {
  std::vector<Dim> out;
  for (const auto& d : dims) {
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      out.push_back(Dim{std::stoll(d), ""});
    else
      out.push_back(Dim{-1, d});
  }
  return out;
}

ValueInfo TensorInfo(const std::string& name, DataType dtype, const std::vector<std::string>& dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_shape = true;
  v.shape = Dims(dims);
  return v;
}

// Through ONNX serialization, the checker and shape inference, as artifact generation does.
Model Reimport(const Model& model) {
  std::string bytes = SerializeModel(model, ExecutionExportOptions());
  return LoadModelFromBuffer(bytes.data(), bytes.size(), model.source, ".", ExecutionImportOptions());
}

// x -> Identity -> pred, or the graph input "pred" itself.
Model ForwardModel(DataType dtype, const std::vector<std::string>& dims, bool through_identity = true) {
  Model m;
  m.source = "loss_test";
  m.ir_version = 8;
  m.opsets[""] = 17;
  m.graph.name = "forward";
  m.graph.inputs.push_back(TensorInfo(through_identity ? "x" : "pred", dtype, dims));
  if (through_identity) m.graph.nodes.push_back(Node{"identity", "Identity", "", {"x"}, {"pred"}, {}, 0});
  m.graph.outputs.push_back(TensorInfo("pred", dtype, dims));
  return Reimport(m);
}

std::vector<std::string> ShapeDims(const Shape& shape) {
  std::vector<std::string> dims;
  for (int64_t d : shape) dims.push_back(std::to_string(d));
  return dims;
}

Tensor Floats(const std::vector<double>& values, Shape shape) {
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), std::move(shape));
}

// The loss of `spec` on prediction x (float32, through an Identity) and its one target.
double EvaluateLoss(const LossSpec& spec, const Tensor& x, const Tensor& target) {
  Model model = ForwardModel(x.dtype(), ShapeDims(x.shape()));
  AppendedLoss loss = AppendLoss(model.graph, spec, {"pred"});
  EXPECT_EQ(loss.targets.size(), 1u);
  model.graph.outputs = {TensorInfo(loss.loss, x.dtype(), {})};
  std::vector<Tensor> out = Session(Reimport(model)).Run({{"x", x}, {loss.targets.at(0), target}});
  EXPECT_TRUE(out[0].shape().empty()) << "the loss must be a scalar";
  return out[0].ToDoubleVector()[0];
}

#define EXPECT_REL_NEAR(actual, expected, relative) \
  EXPECT_NEAR((actual), (expected), (relative)*std::max(1.0, std::fabs(expected)))

LossSpec Spec(LossType type, Reduction reduction = Reduction::kMean) {
  LossSpec spec;
  spec.type = type;
  spec.reduction = reduction;
  return spec;
}

std::string WriteModel(const std::string& name, const onnx::ModelProto& model) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << Serialize(model);
  return path;
}

void SetInt(onnx::NodeProto* node, const std::string& key, int64_t value) {
  auto* a = node->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

// loss = ReduceSum((y - target)^2) * scale with scale = 2. Its intermediate "pred" and output "loss"
// clash with names of the graph it is appended to.
std::string SquaredErrorLossFile(int elem_type, const std::string& file) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "y", elem_type, {"2", "3"});
  AddValue(g->mutable_input(), "target", elem_type, {"2", "3"});
  auto* scale = g->add_initializer();
  scale->set_name("scale");
  scale->set_data_type(elem_type);
  if (elem_type == onnx::TensorProto::DOUBLE)
    scale->add_double_data(2.0);
  else
    scale->add_float_data(2.0f);
  AddNode(g, "Sub", {"y", "target"}, {"pred"});
  AddNode(g, "Mul", {"pred", "pred"}, {"squared"});
  SetInt(AddNode(g, "ReduceSum", {"squared"}, {"total"}), "keepdims", 0);
  AddNode(g, "Mul", {"total", "scale"}, {"loss"});
  AddValue(g->mutable_output(), "loss", elem_type, {});
  return WriteModel(file, m);
}

}  // namespace

TEST(LossNames, ParseAndName) {
  for (LossType type : {LossType::kMSE, LossType::kCrossEntropy, LossType::kBCEWithLogits, LossType::kL1,
                        LossType::kHuber, LossType::kSmoothL1, LossType::kNLL, LossType::kKLDiv, LossType::kCustom})
    EXPECT_EQ(ParseLossType(LossTypeName(type)), type);
  EXPECT_ERROR(ParseLossType("hinge"), ErrorCode::kInvalidArgument, "mse, cross_entropy");
}

TEST(LossValue, MSE) {
  Tensor x = Floats(kRegressionPred, {2, 3}), t = Floats(kRegressionTarget, {2, 3});
  EXPECT_REL_NEAR(EvaluateLoss(Spec(LossType::kMSE), x, t), 2.193333387, 1e-5);  // F.mse_loss(x, t)
  EXPECT_REL_NEAR(EvaluateLoss(Spec(LossType::kMSE, Reduction::kSum), x, t), 13.15999985,
                  1e-5);  // F.mse_loss(x, t, reduction="sum")
}

TEST(LossValue, L1) {
  Tensor x = Floats(kRegressionPred, {2, 3}), t = Floats(kRegressionTarget, {2, 3});
  EXPECT_REL_NEAR(EvaluateLoss(Spec(LossType::kL1), x, t), 1.100000024, 1e-5);  // F.l1_loss(x, t)
  EXPECT_REL_NEAR(EvaluateLoss(Spec(LossType::kL1, Reduction::kSum), x, t), 6.600000381,
                  1e-5);  // F.l1_loss(x, t, reduction="sum")
}

TEST(LossValue, Huber) {
  Tensor x = Floats(kRegressionPred, {2, 3}), t = Floats(kRegressionTarget, {2, 3});
  LossSpec spec = Spec(LossType::kHuber);
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 0.7349999547, 1e-5);  // F.huber_loss(x, t, delta=1.0)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 4.409999847, 1e-5);  // F.huber_loss(x, t, delta=1.0, reduction="sum")
  spec.delta = 0.5f;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 2.63499999, 1e-5);  // F.huber_loss(x, t, delta=0.5, reduction="sum")
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 0.4391666651, 1e-5);  // F.huber_loss(x, t, delta=0.5)
}

TEST(LossValue, SmoothL1) {
  Tensor x = Floats(kRegressionPred, {2, 3}), t = Floats(kRegressionTarget, {2, 3});
  LossSpec spec = Spec(LossType::kSmoothL1);
  spec.delta = 0.5f;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 0.8783333302, 1e-5);  // F.smooth_l1_loss(x, t, beta=0.5)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 5.269999981, 1e-5);  // F.smooth_l1_loss(x, t, beta=0.5, reduction="sum")
  spec.delta = 0.0f;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 6.600000381, 1e-5);  // F.smooth_l1_loss(x, t, beta=0.0, reduction="sum")
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 1.100000024, 1e-5);  // F.smooth_l1_loss(x, t, beta=0.0)
}

TEST(LossValue, BCEWithLogitsIsStableForLargeLogits) {
  Tensor x = Floats(kLogits, {2, 3}), t = Floats(kBinaryTargets, {2, 3});
  LossSpec spec = Spec(LossType::kBCEWithLogits);
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 11.91291142, 1e-5);  // F.binary_cross_entropy_with_logits(bx, bt)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 71.4774704,
                  1e-5);  // F.binary_cross_entropy_with_logits(bx, bt, reduction="sum")
  spec.pos_weight = {2.0f, 0.5f, 1.5f};
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 52.1804924,
                  1e-5);  // F.binary_cross_entropy_with_logits(bx, bt, reduction="sum", pos_weight=pw)
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 8.696748734,
                  1e-5);  // F.binary_cross_entropy_with_logits(bx, bt, pos_weight=pw)
  spec.pos_weight = {3.0f};
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 25.55690002,
                  1e-5);  // F.binary_cross_entropy_with_logits(bx, bt, pos_weight=torch.tensor([3.0]))
}

TEST(LossValue, CrossEntropy) {
  Tensor s = Floats(kScores, {3, 4}), labels = Tensor::FromVector<int64_t>(kLabels, {3});
  LossSpec spec = Spec(LossType::kCrossEntropy);
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 2.707665205, 1e-5);  // F.cross_entropy(s, lab)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 8.122995377, 1e-5);  // F.cross_entropy(s, lab, reduction="sum")
  spec.class_weights = kClassWeights;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 9.582558632,
                  1e-5);  // F.cross_entropy(s, lab, weight=w, reduction="sum")
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 3.194186211, 1e-5);  // F.cross_entropy(s, lab, weight=w)
  spec.ignore_index = 0;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 3.611656904,
                  1e-5);  // F.cross_entropy(s, lab, weight=w, ignore_index=0)
}

TEST(LossValue, CrossEntropyInt32LabelsAndDefaultIgnoreIndex) {
  Tensor s = Floats(kScores, {3, 4}), labels = Tensor::FromVector<int32_t>({1, -100, 3}, {3});
  LossSpec spec = Spec(LossType::kCrossEntropy);
  spec.label_type = DataType::kInt32;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 3.508081436,
                  1e-5);  // F.cross_entropy(s, torch.tensor([1, -100, 3]))
}

TEST(LossValue, CrossEntropyOverSpatialPositions) {
  // ss [2, 3, 2] (N, C, d1), sl [2, 2]
  Tensor s = Floats({0.1, -0.4, 1.2, 0.3, -0.5, 0.9, 2.0, 0.0, -1.0, 0.5, 0.3, -0.2}, {2, 3, 2});
  Tensor labels = Tensor::FromVector<int64_t>({0, 2, 1, 1}, {2, 2});
  LossSpec spec = Spec(LossType::kCrossEntropy);
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 1.516949058, 1e-5);  // F.cross_entropy(ss, sl)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 6.06779623, 1e-5);  // F.cross_entropy(ss, sl, reduction="sum")
}

TEST(LossValue, NLL) {
  Tensor s = Floats(kScores, {3, 4}), labels = Tensor::FromVector<int64_t>(kLabels, {3});
  LossSpec spec = Spec(LossType::kNLL);
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 0.7666666508, 1e-5);  // F.nll_loss(s, lab)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 2.299999952, 1e-5);  // F.nll_loss(s, lab, reduction="sum")
  spec.class_weights = kClassWeights;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 3.400000095, 1e-5);  // F.nll_loss(s, lab, weight=w, reduction="sum")
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, s, labels), 1.133333325, 1e-5);  // F.nll_loss(s, lab, weight=w)
}

TEST(LossValue, KLDiv) {
  Tensor x = Floats(kLogProbs, {2, 3});
  Tensor probabilities = Floats(kProbTargets, {2, 3}), log_probabilities = Floats(kLogTargets, {2, 3});
  LossSpec spec = Spec(LossType::kKLDiv);
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, probabilities), 0.003312808694, 1e-5);  // F.kl_div(kx, kt)
  spec.reduction = Reduction::kSum;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, probabilities), 0.01987685263, 1e-5);  // F.kl_div(kx, kt, reduction="sum")
  spec.log_target = true;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, log_probabilities), 0.2674700022,
                  1e-5);  // F.kl_div(kx, klt, reduction="sum", log_target=True)
  spec.reduction = Reduction::kMean;
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, log_probabilities), 0.04457833245,
                  1e-5);  // F.kl_div(kx, klt, log_target=True)
}

TEST(LossValue, CustomLossFromFile) {
  LossSpec spec = Spec(LossType::kCustom);
  spec.custom_loss_path = SquaredErrorLossFile(onnx::TensorProto::FLOAT, "custom_squared_error.onnx");
  Tensor x = Floats(kRegressionPred, {2, 3}), t = Floats(kRegressionTarget, {2, 3});
  EXPECT_REL_NEAR(EvaluateLoss(spec, x, t), 26.31999969, 1e-5);  // 2 * ((x - t) ** 2).sum()

  Model model = ForwardModel(DataType::kFloat32, {"2", "3"});
  AppendedLoss loss = AppendLoss(model.graph, spec, {"pred"});
  EXPECT_EQ(loss.targets, std::vector<std::string>{"target"});  // a custom target keeps its name
  EXPECT_EQ(loss.loss, "loss");
  ASSERT_EQ(loss.constants.size(), 1u);
  EXPECT_NE(loss.constants[0], "scale");  // renamed with the custom loss prefix
  EXPECT_TRUE(model.graph.IsInitializer(loss.constants[0]));
}

TEST(LossValue, CustomLossOverTwoPredictions) {
  // loss = ReduceMean(|a + b - t|)
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  for (const char* name : {"p", "q", "t"}) AddValue(g->mutable_input(), name, onnx::TensorProto::FLOAT, {"2", "3"});
  AddNode(g, "Add", {"p", "q"}, {"sum"});
  AddNode(g, "Sub", {"sum", "t"}, {"difference"});
  AddNode(g, "Abs", {"difference"}, {"distance"});
  SetInt(AddNode(g, "ReduceMean", {"distance"}, {"out"}), "keepdims", 0);
  AddValue(g->mutable_output(), "out", onnx::TensorProto::FLOAT, {});
  LossSpec spec = Spec(LossType::kCustom);
  spec.custom_loss_path = WriteModel("custom_two_predictions.onnx", m);

  Model model;
  model.opsets[""] = 17;
  model.graph.inputs = {TensorInfo("a", DataType::kFloat32, {"2", "3"}),
                        TensorInfo("b", DataType::kFloat32, {"2", "3"})};
  AppendedLoss loss = AppendLoss(model.graph, spec, {"a", "b"});
  ASSERT_EQ(loss.targets, std::vector<std::string>{"t"});
  model.graph.outputs = {TensorInfo(loss.loss, DataType::kFloat32, {})};
  std::vector<Tensor> out = Session(Reimport(model))
                                .Run({{"a", Floats(kRegressionPred, {2, 3})},
                                      {"b", Floats(kRegressionTarget, {2, 3})},
                                      {"t", Floats({1, 0, 2, -1, 0.5, 0}, {2, 3})}});
  EXPECT_REL_NEAR(out[0].ToDoubleVector()[0], 1.616666675, 1e-5);  // (a + b - t).abs().mean()
}

TEST(LossTargets, NamesTypesAndSymbolicShapes) {
  Model model = ForwardModel(DataType::kFloat32, {"batch", "4", "5"});
  LossSpec spec = Spec(LossType::kCrossEntropy);
  spec.label_type = DataType::kInt32;
  spec.class_weights = kClassWeights;
  Graph graph = model.graph;
  AppendedLoss loss = AppendLoss(graph, spec, {"pred"});
  ASSERT_EQ(loss.targets, std::vector<std::string>{"labels"});
  const ValueInfo* labels = graph.FindValueInfo("labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(labels->dtype, DataType::kInt32);
  ASSERT_EQ(labels->shape.size(), 2u);
  EXPECT_EQ(labels->shape[0].symbol, "batch");
  EXPECT_EQ(labels->shape[1].value, 5);
  ASSERT_EQ(loss.constants.size(), 1u);
  EXPECT_EQ(graph.initializers.at(loss.constants[0]).shape(), Shape{4});

  graph = model.graph;
  loss = AppendLoss(graph, Spec(LossType::kMSE), {"pred"});
  ASSERT_EQ(loss.targets, std::vector<std::string>{"pred_target"});
  const ValueInfo* target = graph.FindValueInfo("pred_target");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->dtype, DataType::kFloat32);
  ASSERT_EQ(target->shape.size(), 3u);
  EXPECT_EQ(target->shape[0].symbol, "batch");
  EXPECT_EQ(target->shape[2].value, 5);

  // Names already taken get a suffix.
  graph = model.graph;
  graph.initializers["labels"] = Tensor::Scalar<float>(1);
  graph.initializers["loss"] = Tensor::Scalar<float>(1);
  loss = AppendLoss(graph, Spec(LossType::kNLL), {"pred"});
  EXPECT_EQ(loss.targets, std::vector<std::string>{"labels_1"});
  EXPECT_EQ(loss.loss, "loss_1");
}

TEST(LossErrors, PredictionNotInGraph) {
  Model model = ForwardModel(DataType::kFloat32, {"2", "3"});
  EXPECT_ERROR(AppendLoss(model.graph, Spec(LossType::kMSE), {"logits"}), ErrorCode::kInvalidArgument, "'logits'");
  EXPECT_ERROR(AppendLoss(model.graph, Spec(LossType::kMSE), {}), ErrorCode::kInvalidArgument, "no prediction");
  EXPECT_ERROR(AppendLoss(model.graph, Spec(LossType::kMSE), {"pred", "x"}), ErrorCode::kInvalidArgument,
               "one prediction");
}

TEST(LossErrors, ShapesThatDoNotFitTheLoss) {
  Model vector_model = ForwardModel(DataType::kFloat32, {"4"});
  const Graph before = vector_model.graph;
  EXPECT_ERROR(AppendLoss(vector_model.graph, Spec(LossType::kCrossEntropy), {"pred"}), ErrorCode::kInvalidArgument,
               "prediction 'pred' must be [N, C]");
  EXPECT_EQ(vector_model.graph.nodes.size(), before.nodes.size());  // a failed call leaves the graph as it was
  EXPECT_EQ(vector_model.graph.inputs.size(), before.inputs.size());
  EXPECT_ERROR(AppendLoss(vector_model.graph, Spec(LossType::kNLL), {"pred"}), ErrorCode::kInvalidArgument,
               "prediction 'pred' must be [N, C]");

  Model model = ForwardModel(DataType::kFloat32, {"batch", "3"});
  LossSpec cross_entropy = Spec(LossType::kCrossEntropy);
  cross_entropy.class_weights = kClassWeights;
  EXPECT_ERROR(AppendLoss(model.graph, cross_entropy, {"pred"}), ErrorCode::kInvalidArgument,
               "4 class weights for prediction 'pred' with 3 classes");
  cross_entropy.class_weights.clear();
  cross_entropy.label_type = DataType::kFloat32;
  EXPECT_ERROR(AppendLoss(model.graph, cross_entropy, {"pred"}), ErrorCode::kInvalidArgument, "int64 or int32");

  LossSpec bce = Spec(LossType::kBCEWithLogits);
  bce.pos_weight = {1.0f, 2.0f};
  EXPECT_ERROR(AppendLoss(model.graph, bce, {"pred"}), ErrorCode::kInvalidArgument,
               "2 pos_weight values for prediction 'pred' with 3 classes");

  LossSpec huber = Spec(LossType::kHuber);
  huber.delta = 0;
  EXPECT_ERROR(AppendLoss(model.graph, huber, {"pred"}), ErrorCode::kInvalidArgument, "delta must be > 0");

  Model int_model = ForwardModel(DataType::kInt64, {"2", "3"});
  EXPECT_ERROR(AppendLoss(int_model.graph, Spec(LossType::kMSE), {"pred"}), ErrorCode::kInvalidArgument,
               "prediction 'pred' must be a float tensor");
}

TEST(LossErrors, CustomLossThatDoesNotFit) {
  LossSpec spec = Spec(LossType::kCustom);
  spec.custom_loss_path = SquaredErrorLossFile(onnx::TensorProto::FLOAT, "custom_fit.onnx");
  Model model;
  model.opsets[""] = 17;
  model.graph.inputs = {
      TensorInfo("a", DataType::kFloat32, {"2", "3"}), TensorInfo("b", DataType::kFloat32, {"2", "3"}),
      TensorInfo("c", DataType::kFloat32, {"2", "3"}), TensorInfo("d", DataType::kFloat32, {"3", "2"})};
  EXPECT_ERROR(AppendLoss(model.graph, spec, {"a", "b", "c"}), ErrorCode::kInvalidArgument,
               "its graph has 2 inputs but 3 predictions");
  EXPECT_ERROR(AppendLoss(model.graph, spec, {"d"}), ErrorCode::kInvalidArgument,
               "input 'y' has shape [2, 3] but prediction 'd' has shape [3, 2]");

  onnx::ModelProto elementwise = NewModel();
  auto* g = elementwise.mutable_graph();
  AddValue(g->mutable_input(), "y", onnx::TensorProto::FLOAT, {"2", "3"});
  AddValue(g->mutable_input(), "t", onnx::TensorProto::FLOAT, {"2", "3"});
  AddNode(g, "Sub", {"y", "t"}, {"difference"});
  AddValue(g->mutable_output(), "difference", onnx::TensorProto::FLOAT, {"2", "3"});
  spec.custom_loss_path = WriteModel("custom_not_scalar.onnx", elementwise);
  EXPECT_ERROR(AppendLoss(model.graph, spec, {"a"}), ErrorCode::kInvalidArgument,
               "output 'difference' must be a scalar");

  spec.custom_loss_path = ::testing::TempDir() + "/no_such_loss.onnx";
  EXPECT_ERROR(AppendLoss(model.graph, spec, {"a"}), ErrorCode::kIoError, "no_such_loss.onnx");
}

// ---- gradients: d loss / d prediction (float64) against torch.autograd ----

namespace {

struct LossAndGradient {
  double value = 0;
  std::vector<double> gradient;
};

// Appends the loss and its gradient w.r.t. the graph input "pred"; skips the test when an operator
// on the path has no gradient rule yet.
std::optional<LossAndGradient> LossGradient(const LossSpec& spec, const std::vector<double>& pred, Shape shape,
                                            const Tensor& target) {
  Model model = ForwardModel(DataType::kFloat64, ShapeDims(shape), /*through_identity=*/false);
  AppendedLoss loss = AppendLoss(model.graph, spec, {"pred"});
  model = Reimport(model);
  GradientRequest request;
  request.loss = loss.loss;
  request.wrt = {"pred"};
  request.opsets = model.opsets;
  std::vector<std::string> grads;
  try {
    grads = AppendGradients(model.graph, request);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotImplemented) throw;
    ADD_FAILURE() << "no gradient rule yet: " << e.what();
    return std::nullopt;
  }
  model.graph.outputs = {TensorInfo(loss.loss, DataType::kFloat64, {}), TensorInfo(grads[0], DataType::kFloat64, {})};
  model.graph.outputs[1].has_shape = false;
  std::vector<Tensor> out =
      Session(Reimport(model)).Run({{"pred", Tensor::FromVector<double>(pred, shape)}, {loss.targets.at(0), target}});
  EXPECT_EQ(out[1].shape(), shape);
  return LossAndGradient{out[0].ToDoubleVector()[0], out[1].ToDoubleVector()};
}

void ExpectGradient(const LossSpec& spec, const std::vector<double>& pred, Shape shape, const Tensor& target,
                    double expected_value, const std::vector<double>& expected_gradient) {
  std::optional<LossAndGradient> result = LossGradient(spec, pred, shape, target);
  if (!result) return;
  EXPECT_REL_NEAR(result->value, expected_value, 1e-9);
  ASSERT_EQ(result->gradient.size(), expected_gradient.size());
  for (size_t i = 0; i < expected_gradient.size(); ++i)
    EXPECT_REL_NEAR(result->gradient[i], expected_gradient[i], 1e-9) << "element " << i;
}

Tensor Doubles(const std::vector<double>& values, Shape shape) { return Tensor::FromVector<double>(values, shape); }

}  // namespace

TEST(LossGradient, MSE) {
  // F.mse_loss(x, t) in float64, backward()
  ExpectGradient(Spec(LossType::kMSE), kRegressionPred, {2, 3}, Doubles(kRegressionTarget, {2, 3}), 2.1933333333333329,
                 {0.099999999999999992, -0.066666666666666652, 0.5, -0.10000000000000001, 1, 0.43333333333333335});
}

TEST(LossGradient, L1) {
  // F.l1_loss(x, t, reduction="sum") in float64, backward()
  ExpectGradient(Spec(LossType::kL1, Reduction::kSum), kRegressionPred, {2, 3}, Doubles(kRegressionTarget, {2, 3}),
                 6.5999999999999996, {1, -1, 1, -1, 1, 1});
}

TEST(LossGradient, Huber) {
  LossSpec spec = Spec(LossType::kHuber);
  spec.delta = 0.5f;
  // F.huber_loss(x, t, delta=0.5) in float64, backward()
  ExpectGradient(spec, kRegressionPred, {2, 3}, Doubles(kRegressionTarget, {2, 3}), 0.43916666666666665,
                 {0.049999999999999996, -0.033333333333333326, 0.083333333333333329, -0.050000000000000003,
                  0.083333333333333329, 0.083333333333333329});
}

TEST(LossGradient, SmoothL1) {
  LossSpec spec = Spec(LossType::kSmoothL1, Reduction::kSum);
  spec.delta = 0.5f;
  // F.smooth_l1_loss(x, t, beta=0.5, reduction="sum") in float64, backward()
  ExpectGradient(spec, kRegressionPred, {2, 3}, Doubles(kRegressionTarget, {2, 3}), 5.2699999999999996,
                 {0.59999999999999998, -0.39999999999999991, 1, -0.60000000000000009, 1, 1});
}

TEST(LossGradient, BCEWithLogits) {
  // F.binary_cross_entropy_with_logits(bx, bt, reduction="sum") in float64, backward()
  ExpectGradient(
      Spec(LossType::kBCEWithLogits, Reduction::kSum), kLogits, {2, 3}, Doubles(kBinaryTargets, {2, 3}),
      71.477473511446661,
      {-0.37754066879814541, 0.23147521650098238, -0.11920292202211769, 0.99999999999990652, -1, 0.031812227831833906});
  LossSpec spec = Spec(LossType::kBCEWithLogits);
  spec.pos_weight = {2.0f, 0.5f, 1.5f};
  // F.binary_cross_entropy_with_logits(bx, bt, pos_weight=pw) in float64, backward()
  ExpectGradient(spec, kLogits, {2, 3}, Doubles(kBinaryTargets, {2, 3}), 8.696748734746846,
                 {-0.12584688959938181, 0.03857920275016373, -0.029800730505529411, 0.16666666666665109,
                  -0.083333333333333329, -0.011402656332231836});
}

TEST(LossGradient, CrossEntropy) {
  LossSpec spec = Spec(LossType::kCrossEntropy);
  spec.class_weights = kClassWeights;
  spec.ignore_index = 0;
  // F.cross_entropy(s, lab, weight=w, ignore_index=0) in float64, backward()
  ExpectGradient(spec, kScores, {3, 4}, Tensor::FromVector<int64_t>(kLabels, {3}), 3.6116569692385725,
                 {0.090130744488081199, -0.37988911254807728, 0.044757603132559699, 0.24500076492743636, 0, 0, 0, 0,
                  0.05861380111501803, 0.17608558984409076, 0.35459283329507357, -0.58929222425418248});
}

TEST(LossGradient, NLL) {
  LossSpec spec = Spec(LossType::kNLL, Reduction::kSum);
  spec.class_weights = kClassWeights;
  // F.nll_loss(s, lab, weight=w, reduction="sum") in float64, backward()
  ExpectGradient(spec, kScores, {3, 4}, Tensor::FromVector<int64_t>(kLabels, {3}), 3.3999999999999999,
                 {0, -1, 0, 0, -0.5, 0, 0, 0, 0, 0, 0, -1.5});
}

TEST(LossGradient, KLDiv) {
  // F.kl_div(kx, kt) in float64, backward()
  ExpectGradient(Spec(LossType::kKLDiv), kLogProbs, {2, 3}, Doubles(kProbTargets, {2, 3}), 0.0033128009369823761,
                 {-0.033333333333333333, -0.13333333333333333, 0, -0.083333333333333329, -0.041666666666666664,
                  -0.041666666666666664});
  LossSpec spec = Spec(LossType::kKLDiv, Reduction::kSum);
  spec.log_target = true;
  // F.kl_div(kx, klt, reduction="sum", log_target=True) in float64, backward()
  ExpectGradient(spec, kLogProbs, {2, 3}, Doubles(kLogTargets, {2, 3}), 0.26747000294219403,
                 {-0.36787944117144233, -0.74081822068171788, -0.0820849986238988, -0.5488116360940265,
                  -0.24659696394160649, -0.40656965974059911});
}

TEST(LossGradient, Custom) {
  LossSpec spec = Spec(LossType::kCustom);
  spec.custom_loss_path = SquaredErrorLossFile(onnx::TensorProto::DOUBLE, "custom_squared_error_f64.onnx");
  // 2 * ((x - t) ** 2).sum() in float64, backward()
  ExpectGradient(spec, kRegressionPred, {2, 3}, Doubles(kRegressionTarget, {2, 3}), 26.319999999999997,
                 {1.2, -0.79999999999999982, 6, -1.2000000000000002, 12, 5.2000000000000002});
}
