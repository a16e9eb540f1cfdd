// Typed operator attributes (ops/attributes.hpp): checked once when a session compiles, with errors naming the
// node, the attribute and its value; and the operators' own shape rules, which type what libonnx leaves unknown.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "onnx/importer.hpp"
#include "onnx/proto.hpp"
#include "onnx/schema_hooks.hpp"
#include "ops/attributes.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

using namespace edgetrain;

namespace {

// One `op` node named "n" at default-domain `opset` reading the given graph inputs (all float32 of `shapes`),
// writing `outputs`.
Model OneNode(int64_t opset, const std::string& op, const std::vector<std::pair<std::string, Shape>>& inputs,
              AttributeMap attributes, std::vector<std::string> outputs = {"y"}) {
  Model m;
  m.source = op + ".onnx";
  m.opsets[""] = opset;
  Node node{"n", op, "", {}, outputs, std::move(attributes), 0};
  for (const auto& [name, shape] : inputs) {
    node.inputs.push_back(name);
    m.graph.inputs.push_back(edgetrain::testing::ValueInfoOf(name, DataType::kFloat32, shape));
  }
  m.graph.nodes.push_back(node);
  for (const auto& out : outputs) {
    ValueInfo info;
    info.name = out;
    m.graph.outputs.push_back(info);
  }
  return m;
}

Model GemmModel(AttributeMap attributes) {
  return OneNode(13, "Gemm", {{"a", {2, 3}}, {"b", {3, 4}}}, std::move(attributes));
}

const ValueInfo& Typed(const Model& m, const std::string& name) {
  const ValueInfo* info = m.graph.FindValueInfo(name);
  EXPECT_NE(info, nullptr) << name;
  static const ValueInfo kNone;
  return info ? *info : kNone;
}

// "[batch, 4]" for checking inferred shapes.
std::string Dims(const ValueInfo& info) { return DimsToString(info); }

}  // namespace

// ---- the bad values of each typed attribute struct fail when the session compiles ----

TEST(TypedAttributes, GemmRejectsAnOutOfRangeFlagAtCompile) {
  EXPECT_ERROR((void)Session(GemmModel({{"transA", Attribute::Int(2)}})), ErrorCode::kInvalidModel,
               "node 'n' (Gemm): attribute 'transA' = 2: must be 0 or 1");
}

TEST(TypedAttributes, GemmRejectsAWrongTypeNamingTheValue) {
  EXPECT_ERROR((void)Session(GemmModel({{"alpha", Attribute::String("big")}})), ErrorCode::kInvalidModel,
               "node 'n' (Gemm): attribute 'alpha' must be a float, got a string 'big'");
  EXPECT_ERROR((void)Session(GemmModel({{"transB", Attribute::Ints({1, 0})}})), ErrorCode::kInvalidModel,
               "attribute 'transB' must be an int, got a list of ints [1, 0]");
}

TEST(TypedAttributes, GemmRejectsANonFiniteScale) {
  EXPECT_ERROR((void)Session(GemmModel({{"beta", Attribute::Float(std::numeric_limits<float>::infinity())}})),
               ErrorCode::kInvalidModel, "attribute 'beta' = inf: must be finite");
}

TEST(TypedAttributes, GoodGemmAttributesRunAndGiveTheProduct) {
  Session session(GemmModel({{"alpha", Attribute::Float(2.0f)}}));
  const Tensor a = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::FromVector<float>({1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1}, {3, 4});
  for (int run = 0; run < 2; ++run) {  // the second run reads the attributes kept from compile
    const Tensor y = session.Run({{"a", a}, {"b", b}})[0];
    EXPECT_EQ(y.shape(), (Shape{2, 4}));
    EXPECT_EQ(y.ToVector<float>(), (std::vector<float>{2, 4, 6, 12, 8, 10, 12, 30}));
  }
}

TEST(TypedAttributes, LayerNormalizationRejectsBadStashTypeAxisAndEpsilon) {
  auto model = [](AttributeMap attributes) {
    return OneNode(17, "LayerNormalization", {{"x", {2, 3}}, {"s", {3}}}, std::move(attributes));
  };
  EXPECT_ERROR((void)Session(model({{"stash_type", Attribute::Int(7)}})), ErrorCode::kInvalidModel,
               "node 'n' (LayerNormalization): attribute 'stash_type' = 7: must be 1 (float32) or 11 (float64)");
  EXPECT_ERROR((void)Session(model({{"axis", Attribute::Float(1.5f)}})), ErrorCode::kInvalidModel,
               "attribute 'axis' must be an int, got a float 1.5");
  EXPECT_ERROR((void)Session(model({{"epsilon", Attribute::Float(-1e-5f)}})), ErrorCode::kInvalidModel,
               "attribute 'epsilon' = -1e-05: must be finite and >= 0");
}

TEST(TypedAttributes, BatchNormalizationRejectsBadTrainingModeAndEpsilon) {
  auto model = [](AttributeMap attributes) {
    return OneNode(15, "BatchNormalization", {{"x", {2, 3, 4}}, {"s", {3}}, {"b", {3}}, {"m", {3}}, {"v", {3}}},
                   std::move(attributes));
  };
  EXPECT_ERROR((void)Session(model({{"training_mode", Attribute::Int(5)}})), ErrorCode::kInvalidModel,
               "node 'n' (BatchNormalization): attribute 'training_mode' = 5: must be 0 or 1");
  EXPECT_ERROR((void)Session(model({{"epsilon", Attribute::String("tiny")}})), ErrorCode::kInvalidModel,
               "attribute 'epsilon' must be a float, got a string 'tiny'");
  EXPECT_ERROR((void)Session(model({{"momentum", Attribute::Float(std::nanf(""))}})), ErrorCode::kInvalidModel,
               "attribute 'momentum' = nan: must be finite");
}

TEST(TypedAttributes, ConvRejectsBadStridesPadsAutoPadAndGroup) {
  auto model = [](const std::string& op, AttributeMap attributes) {
    return OneNode(13, op, {{"x", {1, 2, 5, 5}}, {"w", {2, 2, 3, 3}}}, std::move(attributes));
  };
  EXPECT_ERROR((void)Session(model("Conv", {{"strides", Attribute::Ints({1, 0})}})), ErrorCode::kInvalidModel,
               "node 'n' (Conv): attribute 'strides' = [1, 0]: must be >= 1");
  EXPECT_ERROR((void)Session(model("Conv", {{"pads", Attribute::Ints({1, 1, 1})}})), ErrorCode::kInvalidModel,
               "attribute 'pads' = [1, 1, 1]: must be an even count of values >= 0");
  EXPECT_ERROR((void)Session(model("Conv", {{"auto_pad", Attribute::String("SAME")}})), ErrorCode::kInvalidModel,
               "attribute 'auto_pad' = 'SAME': must be one of 'NOTSET' 'SAME_UPPER' 'SAME_LOWER' 'VALID'");
  EXPECT_ERROR((void)Session(model("Conv", {{"group", Attribute::Int(0)}})), ErrorCode::kInvalidModel,
               "attribute 'group' = 0: must be >= 1");
  EXPECT_ERROR((void)Session(model("Conv", {{"kernel_shape", Attribute::Ints({3, 3})}, {"dilations", Attribute::Ints({1})}})),
               ErrorCode::kInvalidModel, "attribute 'dilations' = [1]: has a length that differs from kernel_shape's");
  EXPECT_ERROR((void)Session(model("ConvTranspose", {{"output_padding", Attribute::Ints({-1, 0})}})),
               ErrorCode::kInvalidModel, "node 'n' (ConvTranspose): attribute 'output_padding' = [-1, 0]: must be >= 0");
}

TEST(TypedAttributes, ReaderNamesAMissingRequiredAttribute) {
  const Node node{"e", "Einsum", "", {"x"}, {"y"}, {}, 0};
  EXPECT_ERROR(AttributeReader(node).RequiredInt("equation"), ErrorCode::kInvalidModel,
               "node 'e' (Einsum): required attribute 'equation' is missing");
}

// ---- shape rules ----

TEST(ShapeRules, GemmMatMulAndLayerNormTypeAChainWithASymbolicBatch) {
  Model m;
  m.opsets[""] = 21;
  m.graph.inputs = {edgetrain::testing::ValueInfoOf("x", DataType::kFloat32, {-1, 3}),
                    edgetrain::testing::ValueInfoOf("w", DataType::kFloat32, {5, 3}),
                    edgetrain::testing::ValueInfoOf("v", DataType::kFloat32, {2, 5, 6}),
                    edgetrain::testing::ValueInfoOf("s", DataType::kFloat32, {6})};
  m.graph.nodes.push_back({"g", "Gemm", "", {"x", "w"}, {"h"}, {{"transB", Attribute::Int(1)}}, 0});
  m.graph.nodes.push_back({"mm", "MatMul", "", {"h", "v"}, {"p"}, {}, 0});
  m.graph.nodes.push_back({"ln", "LayerNormalization", "", {"p", "s"}, {"y", "mean", "inv_std"},
                           {{"axis", Attribute::Int(-1)}, {"stash_type", Attribute::Int(11)}}, 0});
  ValueInfo y;
  y.name = "y";
  m.graph.outputs.push_back(y);
  InferTypesByRules(m);
  EXPECT_EQ(Dims(Typed(m, "h")), "[batch, 5]");
  EXPECT_EQ(Dims(Typed(m, "p")), "[2, batch, 6]");
  EXPECT_EQ(TypeToString(Typed(m, "y")), "float32 [2, batch, 6]");
  EXPECT_EQ(TypeToString(Typed(m, "mean")), "float64 [2, batch, 1]");
  EXPECT_EQ(TypeToString(Typed(m, "inv_std")), "float64 [2, batch, 1]");
}

TEST(ShapeRules, ConvConvTransposeAndBatchNorm) {
  Model m;
  m.opsets[""] = 21;
  m.graph.inputs = {edgetrain::testing::ValueInfoOf("x", DataType::kFloat32, {-1, 2, 9, 8})};
  m.graph.initializers["w"] = Tensor(DataType::kFloat32, {4, 2, 3, 3});
  m.graph.initializers["wt"] = Tensor(DataType::kFloat32, {4, 3, 2, 2});
  for (const char* c : {"s", "b", "mu", "var"}) m.graph.initializers[c] = Tensor(DataType::kFloat32, {4});
  m.graph.nodes.push_back({"c", "Conv", "", {"x", "w"}, {"c_out"},
                           {{"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({1, 1, 1, 1})}}, 0});
  m.graph.nodes.push_back({"same", "Conv", "", {"x", "w"}, {"same_out"},
                           {{"strides", Attribute::Ints({2, 3})}, {"auto_pad", Attribute::String("SAME_UPPER")}}, 0});
  m.graph.nodes.push_back({"bn", "BatchNormalization", "", {"c_out", "s", "b", "mu", "var"}, {"bn_out"}, {}, 0});
  m.graph.nodes.push_back({"t", "ConvTranspose", "", {"bn_out", "wt"}, {"t_out"},
                           {{"group", Attribute::Int(2)}, {"strides", Attribute::Ints({2, 2})},
                            {"output_padding", Attribute::Ints({1, 0})}},
                           0});
  InferTypesByRules(m);
  EXPECT_EQ(Dims(Typed(m, "c_out")), "[batch, 4, 5, 4]");  // (9 + 2 - 3) / 2 + 1, (8 + 2 - 3) / 2 + 1
  EXPECT_EQ(Dims(Typed(m, "same_out")), "[batch, 4, 5, 3]");
  EXPECT_EQ(Dims(Typed(m, "bn_out")), "[batch, 4, 5, 4]");
  EXPECT_EQ(Dims(Typed(m, "t_out")), "[batch, 6, 11, 8]");  // 2 * (5 - 1) + 1 + 2, 2 * (4 - 1) + 2
}

TEST(ShapeRules, KeepWhatIsKnownAndLeaveWhatTheyCannotTell) {
  Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {edgetrain::testing::ValueInfoOf("a", DataType::kFloat32, {2, 3}),
                    edgetrain::testing::ValueInfoOf("b", DataType::kFloat32, {4, 5})};
  ValueInfo unknown_rank;
  unknown_rank.name = "u";
  unknown_rank.dtype = DataType::kFloat32;
  m.graph.inputs.push_back(unknown_rank);
  m.graph.value_info["declared"] = edgetrain::testing::ValueInfoOf("declared", DataType::kFloat32, {7, 7});
  m.graph.nodes.push_back({"bad", "Gemm", "", {"a", "b"}, {"mismatch"}, {{"transA", Attribute::Int(3)}}, 0});
  m.graph.nodes.push_back({"keep", "Gemm", "", {"a", "a"}, {"declared"}, {{"transB", Attribute::Int(1)}}, 0});
  m.graph.nodes.push_back({"rank", "MatMul", "", {"u", "a"}, {"unknown"}, {}, 0});
  InferTypesByRules(m);
  EXPECT_EQ(m.graph.FindValueInfo("mismatch"), nullptr);  // a bad attribute: the session reports it
  EXPECT_EQ(Dims(Typed(m, "declared")), "[7, 7]");
  EXPECT_EQ(m.graph.FindValueInfo("unknown"), nullptr);
}

// An opset past libonnx 1.12's (17), imported with and without libonnx: the shape rules type Gemm's and
// LayerNormalization's outputs where no inference runs, and the model runs.
TEST(ShapeRules, ImportAtOpset21TypesGemmAndLayerNormalization) {
  onnx::ModelProto proto;
  proto.set_ir_version(10);
  proto.add_opset_import()->set_version(21);
  onnx::GraphProto* g = proto.mutable_graph();
  g->set_name("g");
  edgetrain::testing::AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"batch", "3"});
  edgetrain::testing::AddValue(g->mutable_input(), "w", onnx::TensorProto::FLOAT, {"4", "3"});
  edgetrain::testing::AddValue(g->mutable_input(), "s", onnx::TensorProto::FLOAT, {"4"});
  auto* gemm = g->add_node();
  gemm->set_op_type("Gemm");
  gemm->add_input("x");
  gemm->add_input("w");
  gemm->add_output("h");
  auto* trans = gemm->add_attribute();
  trans->set_name("transB");
  trans->set_type(onnx::AttributeProto::INT);
  trans->set_i(1);
  auto* ln = g->add_node();
  ln->set_op_type("LayerNormalization");
  ln->add_input("h");
  ln->add_input("s");
  ln->add_output("y");
  g->add_output()->set_name("y");
  const std::string bytes = proto.SerializeAsString();
  // As in a device-only build, where no libonnx infers anything: the shape rules alone type the graph.
  const OnnxSchemaHooks* libonnx = GetOnnxSchemaHooks();
  SetOnnxSchemaHooks(nullptr);
  ImportOptions without_rules = ExecutionImportOptions();
  without_rules.complete_types = nullptr;
  const Model untyped = LoadModelFromBuffer(bytes.data(), bytes.size(), "opset21", ".", without_rules);
  const Model device = LoadModelFromBuffer(bytes.data(), bytes.size(), "opset21", ".", ExecutionImportOptions());
  SetOnnxSchemaHooks(libonnx);
  EXPECT_EQ(untyped.graph.FindValueInfo("h"), nullptr);
  EXPECT_EQ(TypeToString(Typed(device, "h")), "float32 [batch, 4]");
  EXPECT_EQ(TypeToString(Typed(device, "y")), "float32 [batch, 4]");
  const Model m = LoadModelFromBuffer(bytes.data(), bytes.size(), "opset21", ".", ExecutionImportOptions());
  EXPECT_EQ(TypeToString(Typed(m, "h")), "float32 [batch, 4]");
  EXPECT_EQ(TypeToString(Typed(m, "y")), "float32 [batch, 4]");
  Session session(m);
  const Tensor y = session.Run({{"x", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                                {"w", Tensor::FromVector<float>({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, {4, 3})},
                                {"s", Tensor::FromVector<float>({1, 1, 1, 1}, {4})}})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  // Row [1, 2, 3, 6]: mean 3, variance 3.5.
  EXPECT_NEAR(y.ToVector<float>()[3], 3.0f / std::sqrt(3.5f + 1e-5f), 1e-5f);
}
