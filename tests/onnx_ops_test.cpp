// The operators issue 19 adds for the rest of ONNX's node suite (src/ops/onnx_training.cpp, vision.cpp,
// linalg_set.cpp) and the offline expansion of ONNX's Gradient node (src/autodiff/onnx_gradient.cpp):
// values against float64 references written out here, and bad inputs as typed errors naming the node
// and the input or attribute. The ONNX backend node tests check the spec's own cases.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autodiff/onnx_gradient.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain {
namespace {

using testing::Doubles;
using testing::ExpectRowError;
using testing::ExpectTensorNear;
using testing::kOneNodeName;
using testing::OneNode;
using testing::OpCase;
using testing::RandomTensor;
using testing::RowName;
using testing::RunOneNode;

constexpr const char* kTraining = "ai.onnx.preview.training";

Tensor Ints(std::vector<int64_t> values, Shape shape = {}) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  return Tensor::FromVector<int64_t>(values, shape);
}
Tensor Scalar(double v) { return Doubles({v}, {}); }

OneNode Op(const std::string& op, std::vector<Tensor> inputs, AttributeMap attrs, size_t outputs = 1,
             const std::string& domain = "", int64_t opset = 17) {
  OneNode node{op, domain, {inputs.begin(), inputs.end()}, std::move(attrs)};
  node.outputs.assign(outputs, true);
  node.opset = opset;
  return node;
}

// ---- bad inputs: one row each, the error names the node and the input or attribute

class OnnxOpsBadInput : public ::testing::TestWithParam<OpCase> {};

TEST_P(OnnxOpsBadInput, FailsNamingNodeAndInput) { ExpectRowError(GetParam()); }

Tensor X22() { return Doubles({1, 2, 3, 4}, {2, 2}); }

const AttributeMap kMomentumAttrs = {{"alpha", Attribute::Float(0.9f)},
                                     {"beta", Attribute::Float(0.1f)},
                                     {"norm_coefficient", Attribute::Float(0.0f)},
                                     {"mode", Attribute::String("standard")}};

AttributeMap With(AttributeMap attrs, const std::string& key, Attribute value) {
  attrs[key] = std::move(value);
  return attrs;
}

std::vector<OpCase> BadInputRows() {
  return {
      OpCase{"AdagradOddInputCount", Op("Adagrad", {Scalar(0.1), Ints({1}), X22(), X22()}, {}, 1, kTraining),
             ErrorCode::kInvalidModel, "3 lists of equally many tensors"},
      OpCase{"AdagradNegativeCount", Op("Adagrad", {Scalar(0.1), Ints({-1}), X22(), X22(), X22()}, {}, 2, kTraining),
             ErrorCode::kInvalidArgument, "input 1 (T) must be >= 0"},
      OpCase{"AdagradCountNotInt64", Op("Adagrad", {Scalar(0.1), Scalar(1), X22(), X22(), X22()}, {}, 2, kTraining),
             ErrorCode::kInvalidArgument, "input 1 (T, the update count) must be an int64 scalar"},
      OpCase{"AdagradRateNotScalar", Op("Adagrad", {X22(), Ints({1}), X22(), X22(), X22()}, {}, 2, kTraining),
             ErrorCode::kInvalidArgument, "input 0 (R, the learning rate)"},
      OpCase{"AdagradStateShape",
             Op("Adagrad", {Scalar(0.1), Ints({1}), X22(), X22(), Doubles({1, 2}, {2})}, {}, 2, kTraining),
             ErrorCode::kInvalidArgument, "input 4 is float64 [2]"},
      OpCase{"AdamTooFewOutputs", Op("Adam", {Scalar(0.1), Ints({1}), X22(), X22(), X22(), X22()}, {}, 2, kTraining),
             ErrorCode::kInvalidModel, "expects 3 outputs"},
      OpCase{"MomentumBadMode",
             Op("Momentum", {Scalar(0.1), Ints({1}), X22(), X22(), X22()},
                With(kMomentumAttrs, "mode", Attribute::String("heavy")), 2, kTraining),
             ErrorCode::kInvalidArgument, "attribute 'mode' must be \"standard\" or \"nesterov\""},
      OpCase{"MomentumMissingAlpha",
             Op("Momentum", {Scalar(0.1), Ints({1}), X22(), X22(), X22()},
                {{"beta", Attribute::Float(1)},
                 {"norm_coefficient", Attribute::Float(0)},
                 {"mode", Attribute::String("standard")}},
                2, kTraining),
             ErrorCode::kInvalidModel, "required attribute 'alpha'"},
      OpCase{"DetNotSquare", Op("Det", {Doubles({1, 2, 3, 4, 5, 6}, {2, 3})}, {}), ErrorCode::kInvalidArgument,
             "input 0 (X) must be (..., M, M)"},
      OpCase{"UniqueAxisOutOfRange", Op("Unique", {X22()}, {{"axis", Attribute::Int(2)}}, 4),
             ErrorCode::kInvalidArgument, "axis"},
      OpCase{"GridSampleBadMode",
             Op("GridSample", {RandomTensor({1, 1, 3, 3}, 1), RandomTensor({1, 2, 2, 2}, 2)},
                {{"mode", Attribute::String("linear")}}, 1, "", 16),
             ErrorCode::kInvalidArgument, "attribute 'mode' is \"linear\"; opset 16 accepts"},
      OpCase{"GridSampleBadPadding",
             Op("GridSample", {RandomTensor({1, 1, 3, 3}, 1), RandomTensor({1, 2, 2, 2}, 2)},
                {{"padding_mode", Attribute::String("wrap")}}, 1, "", 16),
             ErrorCode::kInvalidArgument, "attribute 'padding_mode'"},
      OpCase{"GridSampleGridShape",
             Op("GridSample", {RandomTensor({1, 1, 3, 3}, 1), RandomTensor({1, 2, 2, 3}, 2)}, {}, 1, "", 16),
             ErrorCode::kInvalidArgument, "input 1 (grid) must be (N, out..., 2)"},
      OpCase{"GridSampleVolumeBeforeOpset20",
             Op("GridSample", {RandomTensor({1, 1, 2, 3, 3}, 1), RandomTensor({1, 2, 2, 2, 3}, 2)}, {}, 1, "", 16),
             ErrorCode::kInvalidArgument, "N-D needs opset 20"},
      OpCase{"GridSampleCubicVolume",
             Op("GridSample", {RandomTensor({1, 1, 2, 3, 3}, 1), RandomTensor({1, 2, 2, 2, 3}, 2)},
                {{"mode", Attribute::String("cubic")}}, 1, "", 20),
             ErrorCode::kNotImplemented, "cubic sampling is defined for 4-D inputs only"},
      OpCase{"RoiAlignRoisShape",
             Op("RoiAlign", {RandomTensor({1, 1, 4, 4}, 1), Doubles({0, 0, 1}, {1, 3}), Ints({0}, {1})}, {}, 1, "", 16),
             ErrorCode::kInvalidArgument, "input 1 (rois) must be (num_rois, 4)"},
      OpCase{
          "RoiAlignBatchIndex",
          Op("RoiAlign", {RandomTensor({1, 1, 4, 4}, 1), Doubles({0, 0, 1, 1}, {1, 4}), Ints({3}, {1})}, {}, 1, "", 16),
          ErrorCode::kInvalidArgument, "input 2 (batch_indices) holds 3"},
      OpCase{"RoiAlignBadMode",
             Op("RoiAlign", {RandomTensor({1, 1, 4, 4}, 1), Doubles({0, 0, 1, 1}, {1, 4}), Ints({0}, {1})},
                {{"mode", Attribute::String("median")}}, 1, "", 16),
             ErrorCode::kInvalidArgument, "attribute 'mode' must be \"avg\" or \"max\""},
      OpCase{"NmsScoresShape", Op("NonMaxSuppression", {RandomTensor({1, 3, 4}, 1), RandomTensor({1, 1, 2}, 2)}, {}),
             ErrorCode::kInvalidArgument, "(scores) (batches, classes, boxes)"},
      OpCase{"NmsThresholdNotScalar",
             Op("NonMaxSuppression",
                {RandomTensor({1, 3, 4}, 1), RandomTensor({1, 1, 3}, 2), Ints({1}), Doubles({0.5, 0.5}, {2})}, {}),
             ErrorCode::kInvalidArgument, "input 3 (iou_threshold) must hold one value"},
      OpCase{"NmsCenterPointBox",
             Op("NonMaxSuppression", {RandomTensor({1, 3, 4}, 1), RandomTensor({1, 1, 3}, 2)},
                {{"center_point_box", Attribute::Int(2)}}),
             ErrorCode::kInvalidArgument, "attribute 'center_point_box' must be 0 or 1"}};
}

INSTANTIATE_TEST_SUITE_P(Rows, OnnxOpsBadInput,
                         ::testing::ValuesIn(testing::RowsWith({testing::OnnxOpsCases}, testing::HasError)), RowName());

// ---- expected outputs of operators without a passing backend node case: the random generators where their
// distribution is degenerate (their one deterministic output), and the Lp norms written out

Tensor Floats(std::vector<float> values, Shape shape) { return Tensor::FromVector<float>(values, std::move(shape)); }

std::vector<OpCase> ValueRows() {
  const double r5 = std::sqrt(5.0);
  auto outputs = [](Tensor t) { return [t] { return std::vector<Tensor>{t}; }; };
  const Attribute shape23 = Attribute::Ints({2, 3});
  return {
      OpCase{"RandomUniformLowEqualsHigh",
             Op("RandomUniform", {}, {{"shape", shape23}, {"low", Attribute::Float(2.5f)}, {"high", Attribute::Float(2.5f)}}),
             outputs(Floats(std::vector<float>(6, 2.5f), {2, 3}))},
      OpCase{"RandomUniformLikeKeepsShapeAndType",
             Op("RandomUniformLike", {Doubles({1, 2, 3, 4}, {2, 2})},
                {{"low", Attribute::Float(-1.0f)}, {"high", Attribute::Float(-1.0f)}}),
             outputs(Doubles({-1, -1, -1, -1}, {2, 2}))},
      OpCase{"RandomNormalZeroScale",
             Op("RandomNormal", {}, {{"shape", shape23}, {"mean", Attribute::Float(0.75f)}, {"scale", Attribute::Float(0.0f)}}),
             outputs(Floats(std::vector<float>(6, 0.75f), {2, 3}))},
      OpCase{"RandomNormalLikeZeroScaleDtype",
             Op("RandomNormalLike", {Floats({1, 2, 3}, {3})},
                {{"mean", Attribute::Float(-2.0f)}, {"scale", Attribute::Float(0.0f)},
                 {"dtype", Attribute::Int(static_cast<int64_t>(DataType::kFloat64))}}),
             outputs(Doubles({-2, -2, -2}, {3}))},
      OpCase{"BernoulliCertainProbabilities", Op("Bernoulli", {Doubles({0, 1, 1, 0, 0, 1}, {2, 3})}, {}),
             outputs(Doubles({0, 1, 1, 0, 0, 1}, {2, 3}))},
      OpCase{"LpNormalizationL2", Op("LpNormalization", {X22()}, {{"axis", Attribute::Int(1)}}),
             outputs(Doubles({1 / r5, 2 / r5, 3.0 / 5, 4.0 / 5}, {2, 2}))},
      OpCase{"LpNormalizationL1Axis0", Op("LpNormalization", {X22()}, {{"axis", Attribute::Int(0)}, {"p", Attribute::Int(1)}}),
             outputs(Doubles({1.0 / 4, 2.0 / 6, 3.0 / 4, 4.0 / 6}, {2, 2}))},
      OpCase{"GlobalLpPoolL2", Op("GlobalLpPool", {Doubles({1, 2, 3, 4}, {1, 2, 2, 1})}, {}),
             outputs(Doubles({r5, 5}, {1, 2, 1, 1}))},
      OpCase{"GlobalLpPoolL1", Op("GlobalLpPool", {Doubles({1, -2, 3, 4}, {1, 2, 2, 1})}, {{"p", Attribute::Int(1)}}),
             outputs(Doubles({3, 7}, {1, 2, 1, 1}))},
      OpCase{"RandomNormalNegativeScale",
             Op("RandomNormal", {}, {{"shape", shape23}, {"scale", Attribute::Float(-1.0f)}}),
             ErrorCode::kInvalidArgument, "attribute 'scale' must be >= 0"},
      OpCase{"RandomUniformLowAboveHigh",
             Op("RandomUniform", {}, {{"shape", shape23}, {"low", Attribute::Float(2.0f)}, {"high", Attribute::Float(1.0f)}}),
             ErrorCode::kInvalidArgument, "must not exceed 'high'"},
      OpCase{"BernoulliProbabilityAboveOne", Op("Bernoulli", {Doubles({0.5, 1.5}, {2})}, {}),
             ErrorCode::kInvalidArgument, "probability 1.5 is outside [0, 1]"},
  };
}

class OnnxOpsValues : public ::testing::TestWithParam<OpCase> {};

TEST_P(OnnxOpsValues, MatchExpected) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, OnnxOpsValues,
                         ::testing::ValuesIn(testing::RowsWith({testing::OnnxOpsCases}, testing::HasExpectedValues)),
                         RowName());

// ---- values

TEST(OnnxTrainingOps, MomentumUpdatesTwoTensorsPerNode) {
  // Two tensors of different shapes in one node; T = 0 uses beta_adjusted = 1 (the spec's first step).
  const Tensor x1 = Doubles({1, -2}, {2}), x2 = Doubles({0.5}, {1});
  const Tensor g1 = Doubles({0.1, 0.2}, {2}), g2 = Doubles({-0.3}, {1});
  const Tensor v1 = Doubles({0.4, 0.0}, {2}), v2 = Doubles({1.0}, {1});
  for (const char* mode : {"standard", "nesterov"})
    for (int64_t t : {0, 3}) {
      auto out = RunOneNode(Op("Momentum", {Scalar(0.1), Ints({t}), x1, x2, g1, g2, v1, v2},
                          With(With(kMomentumAttrs, "mode", Attribute::String(mode)), "norm_coefficient",
                               Attribute::Float(0.01f)),
                          4, kTraining));
      ASSERT_EQ(out.size(), 4u);
      const double beta = t > 0 ? 0.1 : 1.0, alpha = 0.9, norm = static_cast<double>(0.01f);
      auto expect = [&](const Tensor& x, const Tensor& g, const Tensor& v, const Tensor& x_out, const Tensor& v_out) {
        for (int64_t i = 0; i < x.numel(); ++i) {
          const double gr = norm * x.DoubleAt(i) + g.DoubleAt(i);
          const double vn = alpha * v.DoubleAt(i) + beta * gr;
          const double xn = x.DoubleAt(i) - 0.1 * (std::string(mode) == "nesterov" ? gr + alpha * vn : vn);
          EXPECT_NEAR(v_out.DoubleAt(i), vn, 1e-6) << mode << " t=" << t;
          EXPECT_NEAR(x_out.DoubleAt(i), xn, 1e-6) << mode << " t=" << t;
        }
      };
      expect(x1, g1, v1, out[0], out[2]);
      expect(x2, g2, v2, out[1], out[3]);
    }
}

TEST(OnnxTrainingOps, AdamAppliesPostNormAndBiasCorrection) {
  const Tensor x = Doubles({1.0, -0.5}, {2}), g = Doubles({0.2, 0.4}, {2});
  const Tensor v = Doubles({0.1, 0.0}, {2}), h = Doubles({0.01, 0.3}, {2});
  const double alpha = 0.8, beta = 0.95, eps = 1e-3, norm = 0.1, post = 0.05;
  auto attr = [](double f) { return Attribute::Float(static_cast<float>(f)); };
  auto out = RunOneNode(Op("Adam", {Scalar(0.01), Ints({2}), x, g, v, h},
                      {{"alpha", attr(alpha)}, {"beta", attr(beta)}, {"epsilon", attr(eps)},
                       {"norm_coefficient", attr(norm)}, {"norm_coefficient_post", attr(post)}},
                      3, kTraining));
  for (int64_t i = 0; i < 2; ++i) {
    const double gr = norm * x.DoubleAt(i) + g.DoubleAt(i);
    const double vn = alpha * v.DoubleAt(i) + (1 - alpha) * gr, hn = beta * h.DoubleAt(i) + (1 - beta) * gr * gr;
    const double r = 0.01 * std::sqrt(1 - beta * beta) / (1 - alpha * alpha);
    EXPECT_NEAR(out[0].DoubleAt(i), (1 - post) * (x.DoubleAt(i) - r * vn / (std::sqrt(hn) + eps)), 1e-6);
    EXPECT_NEAR(out[1].DoubleAt(i), vn, 1e-6);
    EXPECT_NEAR(out[2].DoubleAt(i), hn, 1e-6);
  }
}

TEST(LinalgSetOps, DetOfSingularAndPivotedMatrices) {
  // A singular matrix, one that needs a row swap, and a 3x3 with a known determinant.
  auto out = RunOneNode(Op("Det", {Doubles({1, 2, 2, 4, 0, 1, 1, 0}, {2, 2, 2})}, {}));
  ExpectTensorNear(out[0], Doubles({0, -1}, {2}), 1e-12, "det 2x2");
  out = RunOneNode(Op("Det", {Doubles({2, -3, 1, 2, 0, -1, 1, 4, 5}, {3, 3})}, {}));
  ExpectTensorNear(out[0], Doubles({49}, {}), 1e-12, "det 3x3");
}

TEST(LinalgSetOps, UniqueUnsortedKeepsFirstOccurrenceOrder) {
  auto out = RunOneNode(Op("Unique", {Ints({3, 1, 3, 2, 1, 3}, {6})}, {{"sorted", Attribute::Int(0)}}, 4));
  EXPECT_EQ(out[0].ToInt64Vector(), (std::vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(out[1].ToInt64Vector(), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(out[2].ToInt64Vector(), (std::vector<int64_t>{0, 1, 0, 2, 1, 0}));
  EXPECT_EQ(out[3].ToInt64Vector(), (std::vector<int64_t>{3, 2, 1}));
}

// ---- ONNX's Gradient node, expanded offline

Model GradientModel(const std::vector<std::string>& xs, const std::string& y, std::vector<std::string> inputs) {
  Model m;
  m.source = "gradient test";
  m.opsets = {{"", 17}, {kTraining, 1}};
  for (const char* name : {"a", "b"}) m.graph.inputs.push_back(testing::ValueInfoOf(name, DataType::kFloat64, {2}));
  auto make = [](const std::string& name, const std::string& op, const std::string& domain,
                 std::vector<std::string> in, std::vector<std::string> out) {
    Node n;
    n.name = name;
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    return n;
  };
  Node add = make("add", "Add", "", {"a", "b"}, {"c"});
  Node mul = make("mul", "Mul", "", {"c", "a"}, {"d"});
  Node grad = make(kOneNodeName, "Gradient", kTraining, std::move(inputs), {});
  Attribute xs_attr;
  xs_attr.kind = Attribute::Kind::kStrings;
  xs_attr.strings = xs;
  grad.attributes["xs"] = xs_attr;
  grad.attributes["y"] = Attribute::String(y);
  for (const auto& x : xs) grad.outputs.push_back("d_" + x);
  m.graph.nodes = {add, mul, grad};
  auto output = [](const std::string& name) {
    ValueInfo info;
    info.name = name;
    return info;
  };
  m.graph.outputs.push_back(output("d"));
  for (const auto& x : xs) m.graph.outputs.push_back(output("d_" + x));
  return m;
}

TEST(OnnxGradient, ExpandsToBackwardNodesWithRespectToInputsAndIntermediates) {
  // d = (a + b) * a: dd/da = 2a + b, dd/db = a.
  const Tensor a = Doubles({1, -2}, {2}), b = Doubles({3, 0.5}, {2});
  Model inputs_only = GradientModel({"a", "b"}, "d", {"a", "b"});
  EXPECT_EQ(ExpandOnnxGradientNodes(inputs_only), 1u);
  for (const auto& node : inputs_only.graph.nodes) EXPECT_NE(node.op_type, "Gradient");
  auto out = Session(std::move(inputs_only)).Run({{"a", a}, {"b", b}});
  ExpectTensorNear(out[1], Doubles({5, -3.5}, {2}), 1e-12, "dd/da");
  ExpectTensorNear(out[2], Doubles({1, -2}, {2}), 1e-12, "dd/db");
  // With c = a + b among the xs, d = c * a is differentiated as a function of (a, b, c): c is cut from
  // its producer, so dd/da = c, dd/db = 0 and dd/dc = a.
  Model with_c = GradientModel({"a", "b", "c"}, "d", {"a", "b", "c"});
  ExpandOnnxGradientNodes(with_c);
  out = Session(std::move(with_c)).Run({{"a", a}, {"b", b}});
  ExpectTensorNear(out[1], Doubles({4, -1.5}, {2}), 1e-12, "dd/da with c held");
  ExpectTensorNear(out[2], Doubles({0, 0}, {2}), 1e-12, "dd/db with c held");
  ExpectTensorNear(out[3], Doubles({1, -2}, {2}), 1e-12, "dd/dc");
}

TEST(OnnxGradient, MalformedNodesAreTypedErrors) {
  Model unknown_y = GradientModel({"a"}, "nothing", {"a"});
  EXPECT_ERROR(ExpandOnnxGradientNodes(unknown_y), ErrorCode::kInvalidModel, "'y' names 'nothing'");
  Model wrong_inputs = GradientModel({"a"}, "d", {"b"});
  EXPECT_ERROR(ExpandOnnxGradientNodes(wrong_inputs), ErrorCode::kInvalidModel, "'xs' then 'zs'");
  Model no_xs = GradientModel({}, "d", {});
  EXPECT_ERROR(ExpandOnnxGradientNodes(no_xs), ErrorCode::kInvalidModel, "attribute 'xs' is missing");
  // Without the offline pass, the device runtime refuses the node as an unsupported operator.
  EXPECT_ERROR(Session(GradientModel({"a"}, "d", {"a"})), ErrorCode::kNotImplemented, "Gradient");
}

// ---- optional values: an optional graph input fed a tensor or None

Model OptionalModel(const std::string& op, int64_t opset) {
  Model m;
  m.source = "optional test";
  m.opsets = {{"", opset}};
  ValueInfo in = testing::ValueInfoOf("opt", DataType::kFloat32, {2});
  in.is_optional = true;
  m.graph.inputs.push_back(in);
  Node node;
  node.name = kOneNodeName;
  node.op_type = op;
  node.inputs = {"opt"};
  node.outputs = {"out"};
  m.graph.nodes.push_back(node);
  ValueInfo out;
  out.name = "out";
  m.graph.outputs.push_back(out);
  return m;
}

TEST(OptionalOps, HasAndGetElementOfTensorAndNone) {
  const RuntimeValue two = RuntimeValue::Of(Tensor::FromVector<float>({1.5f, -2}, {2}));
  Session has(OptionalModel("OptionalHasElement", 15));
  EXPECT_TRUE(has.RunValues({{"opt", two}})[0].tensor.data<bool>()[0]);
  EXPECT_FALSE(has.RunValues({{"opt", RuntimeValue{}}})[0].tensor.data<bool>()[0]);
  Session get(OptionalModel("OptionalGetElement", 15));
  EXPECT_EQ(get.RunValues({{"opt", two}})[0].tensor.ToDoubleVector(), (std::vector<double>{1.5, -2}));
  EXPECT_ERROR(get.RunValues({{"opt", RuntimeValue{}}}), ErrorCode::kInvalidArgument,
               "node 'ort_op' (OptionalGetElement): input 0 ('opt') is an empty optional");
  // Identity passes None through.
  Session identity(OptionalModel("Identity", 16));
  EXPECT_TRUE(identity.RunValues({{"opt", RuntimeValue{}}})[0].is_none());
  // Run, which returns tensors, refuses a None output.
  Model none_out = OptionalModel("Optional", 15);
  none_out.graph.nodes[0].inputs = {""};
  Attribute& type = none_out.graph.nodes[0].attributes["type"];
  type.kind = Attribute::Kind::kType;
  type.type = std::make_shared<ValueInfo>(testing::ValueInfoOf("", DataType::kFloat32, {2}));
  EXPECT_ERROR(Session(std::move(none_out)).Run({{"opt", Tensor::FromVector<float>({1, 2}, {2})}}),
               ErrorCode::kInvalidArgument, "an output is an empty optional (None); use RunValues");
}

TEST(OptionalOps, BadInputsAreTypedErrors) {
  // None only for an input declared optional.
  Model plain = OptionalModel("Identity", 16);
  plain.graph.inputs[0].is_optional = false;
  EXPECT_ERROR(Session(std::move(plain)).RunValues({{"opt", RuntimeValue{}}}), ErrorCode::kInvalidArgument,
               "input 'opt' was fed an empty tensor (None is only for optional inputs)");
  // Optional without an input needs the type of the empty optional.
  Model untyped = OptionalModel("Optional", 15);
  untyped.graph.nodes[0].inputs = {""};
  EXPECT_ERROR(Session(std::move(untyped)).RunValues({{"opt", RuntimeValue{}}}), ErrorCode::kInvalidModel,
               "attribute 'type' (the type of the empty optional) is required");
  // OptionalHasElement takes a left-out input only from opset 18 on.
  Model missing = OptionalModel("OptionalHasElement", 15);
  missing.graph.nodes[0].inputs = {""};
  EXPECT_ERROR(Session(std::move(missing)).RunValues({{"opt", RuntimeValue{}}}), ErrorCode::kInvalidModel,
               "input 0 (the optional) is required before opset 18");
}

}  // namespace

std::vector<testing::OpCase> testing::OnnxOpsCases() { return testing::Concat(BadInputRows(), ValueRows()); }

}  // namespace edgetrain
