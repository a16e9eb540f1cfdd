// ONNX Runtime's .ort flatbuffer models: ORT's sample artifacts, .ort files crafted with our schema,
// and damaged files.
#include "onnx/ort_format.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "core/string_tensor.hpp"
#include "onnx/importer.hpp"
#include "onnx/ort_format_generated.h"
#include "runtime/session.hpp"
#include "test_util.hpp"

using namespace edgetrain;
namespace fs = std::filesystem;
namespace fb = edgetrain::ort_format;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

namespace {

const fs::path kSampleDir = fs::path(EDGETRAIN_ORT_ARTIFACTS) / "ort_format";

std::string ReadBytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

std::string Quoted(const fs::path& path) {
  std::string quoted = "'";
  quoted += path.string();
  quoted += "'";
  return quoted;
}

fs::path WriteTemp(const std::string& name, const std::string& bytes) {
  fs::path path = fs::temp_directory_path() / ("edgetrain_ort_format_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// A value as "name: dtype [dims]" ("seq<dtype>" for sequences, "?" for an unknown dim, "(no shape)").
std::string Describe(const ValueInfo& v) {
  std::string s = v.name + ": " + (v.is_sequence ? "seq<" : "") + DataTypeName(v.dtype) + (v.is_sequence ? ">" : "");
  if (!v.has_shape) return s + " (no shape)";
  s += " [";
  for (size_t i = 0; i < v.shape.size(); ++i)
    s += (i ? ", " : "") + (v.shape[i].known()          ? std::to_string(v.shape[i].value)
                            : v.shape[i].symbol.empty() ? "?"
                                                        : v.shape[i].symbol);
  return s + "]";
}

std::vector<std::string> Describe(const std::vector<ValueInfo>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(Describe(v));
  return out;
}

std::map<std::string, int> OpCounts(const Graph& graph) {
  std::map<std::string, int> counts;
  for (const auto& n : graph.nodes) ++counts[(n.domain.empty() ? "ai.onnx" : n.domain) + "::" + n.op_type];
  return counts;
}

// Expected values from ort_format/inspect.json (ONNX Runtime's view of the three sample models).
struct SampleExpectation {
  std::string file;
  int64_t ir_version;
  std::string producer;
  std::map<std::string, int64_t> opsets;  // a few of them
  std::vector<std::string> inputs, outputs;
  std::map<std::string, int> ops;
  size_t initializers;
};

const std::vector<SampleExpectation>& Samples() {
  static const std::vector<SampleExpectation> samples = {
      {"training_model.ort",
       7,
       "pytorch",
       {{"", 14}, {"com.microsoft", 1}, {"ai.onnx.ml", 3}},
       {"input: float32 [batch_size, 10]", "labels: int64 [batch_size]", "fc1.weight: float32 [20, 10]",
        "fc1.bias: float32 [20]", "fc2.weight: float32 [5, 20]", "fc2.bias: float32 [5]",
        "fc2.weight_grad.accumulation.buffer: float32 [5, 20]", "fc2.bias_grad.accumulation.buffer: float32 [5]",
        "lazy_reset_grad: bool [1]"},
       {"onnx::loss::2: float32 []", "fc2.weight_grad.accumulation.out: bool [1]",
        "fc2.bias_grad.accumulation.out: bool [1]"},
       {{"ai.onnx::Gemm", 2},
        {"ai.onnx::ReduceSum", 1},
        {"ai.onnx::SoftmaxCrossEntropyLoss", 1},
        {"com.microsoft::FusedGemm", 1},
        {"com.microsoft::InPlaceAccumulatorV2", 2},
        {"com.microsoft::SoftmaxCrossEntropyLossGrad", 1}},
       2},
      {"eval_model.ort",
       7,
       "pytorch",
       {{"", 14}, {"com.microsoft", 1}},
       {"input: float32 [batch_size, 10]", "labels: int64 [batch_size]", "fc1.weight: float32 [20, 10]",
        "fc1.bias: float32 [20]", "fc2.weight: float32 [5, 20]", "fc2.bias: float32 [5]"},
       {"onnx::loss::2: float32 []"},
       {{"ai.onnx::Gemm", 1}, {"ai.onnx::SoftmaxCrossEntropyLoss", 1}, {"com.microsoft::FusedGemm", 1}},
       0},
      {"optimizer_model.ort",
       8,
       "orttraining",
       {{"", 18}, {"com.microsoft", 1}},
       {"learning_rate: float32 [1]", "step: int64 [1]", "params: seq<float32> (no shape)",
        "gradients: seq<float32> (no shape)", "first_order_moments: seq<float32> (no shape)",
        "second_order_moments: seq<float32> (no shape)"},
       {"onnx::adamw.updated_flag::5: bool [1]"},
       {{"com.microsoft::AdamWOptimizer", 1}},
       0},
  };
  return samples;
}

void ExpectMatches(const Model& model, const SampleExpectation& want) {
  EXPECT_EQ(model.ir_version, want.ir_version);
  EXPECT_EQ(model.producer, want.producer);
  for (const auto& [domain, version] : want.opsets) EXPECT_EQ(model.OpsetFor(domain), version) << domain;
  EXPECT_EQ(model.opsets.size(), 9u);
  EXPECT_EQ(Describe(model.graph.inputs), want.inputs);
  EXPECT_EQ(Describe(model.graph.outputs), want.outputs);
  EXPECT_EQ(OpCounts(model.graph), want.ops);
  EXPECT_EQ(model.graph.initializers.size(), want.initializers);
}

TEST(OrtFormat, SampleModelsMatchWhatOnnxRuntimeSees) {
  for (const auto& want : Samples()) {
    SCOPED_TRACE(want.file);
    ExpectMatches(LoadModel((kSampleDir / want.file).string()), want);
  }
}

TEST(OrtFormat, BuffersAreRecognizedByIdentifierNotName) {
  for (const auto& want : Samples()) {
    SCOPED_TRACE(want.file);
    std::string bytes = ReadBytes(kSampleDir / want.file);
    EXPECT_TRUE(IsOrtFormatModel(bytes.data(), bytes.size()));
    Model model = LoadModelFromBuffer(bytes.data(), bytes.size(), "sample in memory");
    EXPECT_EQ(model.source, "sample in memory");
    ExpectMatches(model, want);
    // A file named like an ONNX model, and a buffer at an odd address, load the same.
    fs::path renamed = WriteTemp(want.file + ".onnx", bytes);
    ExpectMatches(LoadModel(renamed.string()), want);
    fs::remove(renamed);
    std::string shifted = " " + bytes;
    ExpectMatches(LoadModelFromBuffer(shifted.data() + 1, bytes.size()), want);
  }
  std::string onnx = ReadBytes(fs::path(EDGETRAIN_ORT_ARTIFACTS) / "training_api" / "eval_model.onnx");
  EXPECT_FALSE(IsOrtFormatModel(onnx.data(), onnx.size()));
}

TEST(OrtFormat, TrainingModelKeepsItsSharedInitializersAndDependencyOrder) {
  Model model = LoadModel((kSampleDir / "training_model.ort").string());
  const Graph& g = model.graph;
  ASSERT_EQ(g.initializers.count("ortshared_7_1_1_0_token_17"), 1u);
  EXPECT_EQ(g.initializers.at("ortshared_7_1_1_0_token_17").ToVector<int64_t>(), std::vector<int64_t>{0});
  ASSERT_EQ(g.initializers.count("ortshared_1_0_1_0_token_16"), 1u);
  const Tensor& seed = g.initializers.at("ortshared_1_0_1_0_token_16");
  EXPECT_EQ(seed.shape(), Shape{});
  EXPECT_EQ(seed.ToVector<float>(), std::vector<float>{1.0f});
  // ORT lists FusedGemm last (its node index); it feeds both Gemms, so it must come first here.
  EXPECT_EQ(g.nodes.front().op_type, "FusedGemm");
  EXPECT_EQ(g.nodes.front().name, "fused /fc1/Gemm");
  EXPECT_EQ(g.nodes.front().GetString("activation", ""), "Relu");
  EXPECT_EQ(g.nodes.front().GetInt("transB", 0), 1);
  EXPECT_EQ(g.nodes.front().GetFloat("alpha", 0), 1.0f);
  // Types of intermediate values come from the file (ORT stored them), symbolic dims included.
  const ValueInfo* relu = g.FindValueInfo("/relu/Relu_output_0");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(Describe(*relu), "/relu/Relu_output_0: float32 [batch_size, 20]");
}

// Loss of the eval model on the initial parameters equals ORT's first training loss (same forward
// pass, same batch: reference.json's train_losses[0]).
TEST(OrtFormat, EvalModelRunsWhenEveryOperatorHasAKernel) {
  Model model = LoadModel((kSampleDir / "eval_model.ort").string(), ExecutionImportOptions());
  std::vector<std::string> missing = UnsupportedOperators(model.graph, model);
  if (!missing.empty()) {
    EXPECT_ERROR(Session(std::move(model)), ErrorCode::kNotImplemented,
                 "unsupported operators: com.microsoft.FusedGemm");
    GTEST_SKIP() << "no kernel yet for: " << missing.front();
  }
  Checkpoint checkpoint = LoadCheckpoint((kSampleDir / "checkpoint").string());
  std::map<std::string, Tensor> feeds;
  for (const auto* params : {&checkpoint.trainable, &checkpoint.frozen})
    for (const auto& [name, tensor] : *params) feeds[name] = tensor;
  std::string input = ReadBytes(kSampleDir / "ref_inputs" / "train_input.bin");
  std::string labels = ReadBytes(kSampleDir / "ref_inputs" / "train_labels.bin");
  ASSERT_EQ(input.size(), 4u * 10u * sizeof(float));
  ASSERT_EQ(labels.size(), 4u * sizeof(int64_t));
  feeds["input"] = Tensor(DataType::kFloat32, {4, 10});
  std::memcpy(feeds["input"].raw(), input.data(), input.size());
  feeds["labels"] = Tensor(DataType::kInt64, {4});
  std::memcpy(feeds["labels"].raw(), labels.data(), labels.size());
  Session session(std::move(model));
  std::vector<Tensor> outputs = session.Run(feeds);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_NEAR(outputs[0].ToVector<float>().at(0), 1.6245076656341553, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// .ort files crafted with our schema

// Dims as text: digits are fixed sizes, "?" unknown, anything else a symbol.
Offset<fb::TypeInfo> TensorType(FlatBufferBuilder& b, fb::TensorDataType dtype, const std::vector<std::string>& dims) {
  std::vector<Offset<fb::Dimension>> out;
  for (const auto& d : dims) {
    if (d == "?")
      out.push_back(fb::CreateDimension(b, 0, b.CreateString("unknown-dim")));
    else if (std::isdigit(static_cast<unsigned char>(d[0])))
      out.push_back(fb::CreateDimension(b, fb::CreateDimensionValue(b, fb::DimensionValueType::VALUE, std::stoll(d))));
    else
      out.push_back(
          fb::CreateDimension(b, fb::CreateDimensionValueDirect(b, fb::DimensionValueType::PARAM, 0, d.c_str())));
  }
  auto shape = fb::CreateShapeDirect(b, &out);
  return fb::CreateTypeInfo(b, 0, fb::TypeInfoValue::TensorTypeAndShape,
                            fb::CreateTensorTypeAndShape(b, dtype, shape).Union());
}

Offset<fb::ValueInfo> Value(FlatBufferBuilder& b, const std::string& name, Offset<fb::TypeInfo> type) {
  return fb::CreateValueInfoDirect(b, name.c_str(), nullptr, type);
}

Offset<fb::Tensor> RawTensor(FlatBufferBuilder& b, const std::string& name, fb::TensorDataType dtype,
                             const std::vector<int64_t>& dims, const void* bytes, size_t size,
                             int64_t external_data_offset = -1) {
  auto raw = b.CreateVector(static_cast<const uint8_t*>(bytes), size);
  return fb::CreateTensor(b, b.CreateString(name), 0, b.CreateVector(dims), dtype, raw, 0, external_data_offset);
}

Offset<fb::Tensor> FloatTensor(FlatBufferBuilder& b, const std::string& name, const std::vector<int64_t>& dims,
                               const std::vector<float>& values) {
  return RawTensor(b, name, fb::TensorDataType::FLOAT, dims, values.data(), values.size() * sizeof(float));
}

Offset<fb::Node> MakeNode(FlatBufferBuilder& b, const std::string& name, const std::string& domain,
                          const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs,
                          const std::vector<Offset<fb::Attribute>>& attributes = {},
                          fb::NodeType type = fb::NodeType::Primitive) {
  std::vector<Offset<flatbuffers::String>> in, out;
  for (const auto& s : inputs) in.push_back(b.CreateString(s));
  for (const auto& s : outputs) out.push_back(b.CreateString(s));
  return fb::CreateNodeDirect(b, name.c_str(), nullptr, domain.c_str(), 1, 0, op.c_str(), type, "CPUExecutionProvider",
                              &in, &out, &attributes);
}

struct GraphParts {
  std::vector<Offset<fb::Tensor>> initializers;
  std::vector<Offset<fb::ValueInfo>> node_args;
  std::vector<Offset<fb::Node>> nodes;
  std::vector<std::string> inputs, outputs;
  std::vector<Offset<fb::SparseTensor>> sparse_initializers;
};

Offset<fb::Graph> MakeGraph(FlatBufferBuilder& b, const GraphParts& parts) {
  auto strings = [&](const std::vector<std::string>& names) {
    std::vector<Offset<flatbuffers::String>> out;
    for (const auto& s : names) out.push_back(b.CreateString(s));
    return b.CreateVector(out);
  };
  auto inputs = strings(parts.inputs);
  auto outputs = strings(parts.outputs);
  return fb::CreateGraph(b, b.CreateVector(parts.initializers), b.CreateVector(parts.node_args),
                         b.CreateVector(parts.nodes), static_cast<uint32_t>(parts.nodes.size()), inputs, outputs,
                         parts.sparse_initializers.empty() ? 0 : b.CreateVector(parts.sparse_initializers));
}

std::string Finish(FlatBufferBuilder& b, Offset<fb::Graph> graph, const std::string& version = "6") {
  std::vector<Offset<fb::OperatorSetId>> opsets = {fb::CreateOperatorSetIdDirect(b, "", 17),
                                                   fb::CreateOperatorSetIdDirect(b, "test.ort", 1)};
  auto model = fb::CreateModelDirect(b, 8, &opsets, "edgetrain-test", "1.0", "", 1, "crafted", graph);
  b.Finish(fb::CreateInferenceSessionDirect(b, version.c_str(), model), fb::InferenceSessionIdentifier());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

// Nodes listed out of order; an If whose branches read the outer x and bias, one of them through a
// Constant node (a tensor attribute).
std::string ControlFlowModel() {
  FlatBufferBuilder b;
  auto fdims = [&](std::vector<std::string> dims) { return TensorType(b, fb::TensorDataType::FLOAT, dims); };
  GraphParts then_branch;
  then_branch.nodes.push_back(MakeNode(b, "add", "", "Add", {"x", "bias"}, {"then_y"}));
  then_branch.outputs = {"then_y"};
  then_branch.node_args.push_back(Value(b, "then_y", fdims({"batch", "3"})));
  auto then_graph = MakeGraph(b, then_branch);

  GraphParts else_branch;
  std::vector<float> two = {2.0f};
  auto two_tensor = RawTensor(b, "", fb::TensorDataType::FLOAT, {}, two.data(), sizeof(float));
  std::vector<Offset<fb::Attribute>> value = {
      fb::CreateAttribute(b, b.CreateString("value"), 0, fb::AttributeType::TENSOR, 0, 0, 0, two_tensor)};
  else_branch.nodes.push_back(MakeNode(b, "mul", "", "Mul", {"x", "two"}, {"else_y"}));
  else_branch.nodes.push_back(MakeNode(b, "two", "", "Constant", {}, {"two"}, value));
  else_branch.outputs = {"else_y"};
  else_branch.node_args.push_back(Value(b, "else_y", fdims({"batch", "3"})));
  auto else_graph = MakeGraph(b, else_branch);

  std::vector<Offset<fb::Attribute>> branches = {
      fb::CreateAttribute(b, b.CreateString("then_branch"), 0, fb::AttributeType::GRAPH, 0, 0, 0, 0, then_graph),
      fb::CreateAttribute(b, b.CreateString("else_branch"), 0, fb::AttributeType::GRAPH, 0, 0, 0, 0, else_graph)};
  GraphParts main;
  main.initializers.push_back(FloatTensor(b, "bias", {3}, {1, 2, 3}));
  main.nodes.push_back(MakeNode(b, "neg", "", "Neg", {"picked"}, {"y"}));
  main.nodes.push_back(MakeNode(b, "if", "", "If", {"cond"}, {"picked"}, branches));
  main.inputs = {"cond", "x"};
  main.outputs = {"y"};
  main.node_args.push_back(Value(b, "cond", TensorType(b, fb::TensorDataType::BOOL, {})));
  main.node_args.push_back(Value(b, "x", fdims({"batch", "3"})));
  main.node_args.push_back(Value(b, "picked", fdims({"batch", "3"})));
  main.node_args.push_back(Value(b, "y", fdims({"batch", "3"})));
  return Finish(b, MakeGraph(b, main));
}

TEST(OrtFormat, CraftedControlFlowModelImportsAndRuns) {
  std::string bytes = ControlFlowModel();
  Model model = LoadOrtFormatModel(bytes.data(), bytes.size(), "control_flow.ort", ExecutionImportOptions());
  EXPECT_EQ(model.ir_version, 8);
  EXPECT_EQ(model.producer, "edgetrain-test");
  EXPECT_EQ(model.OpsetFor(""), 17);
  EXPECT_EQ(model.OpsetFor("test.ort"), 1);
  ASSERT_EQ(model.graph.nodes.size(), 2u);
  EXPECT_EQ(model.graph.nodes[0].op_type, "If");  // sorted: the If feeds the Neg
  EXPECT_EQ(model.graph.nodes[1].op_type, "Neg");
  const Attribute* else_branch = model.graph.nodes[0].Find("else_branch");
  ASSERT_TRUE(else_branch && else_branch->g);
  ASSERT_EQ(else_branch->g->nodes.size(), 2u);  // sorted too: the Constant feeds the Mul
  EXPECT_EQ(else_branch->g->nodes[0].op_type, "Constant");
  EXPECT_EQ(else_branch->g->nodes[0].GetTensor("value")->ToVector<float>(), std::vector<float>{2.0f});
  EXPECT_EQ(else_branch->g->nodes[1].op_type, "Mul");
  EXPECT_EQ(Describe(model.graph.outputs), std::vector<std::string>{"y: float32 [batch, 3]"});

  Session session(std::move(model));
  Tensor x = Tensor::FromVector<float>({1, 1, 1, 2, 2, 2}, {2, 3});
  std::vector<Tensor> then_out = session.Run({{"cond", Tensor::Scalar<bool>(true)}, {"x", x}});
  EXPECT_EQ(then_out.at(0).ToVector<float>(), (std::vector<float>{-2, -3, -4, -3, -4, -5}));
  std::vector<Tensor> else_out = session.Run({{"cond", Tensor::Scalar<bool>(false)}, {"x", x}});
  EXPECT_EQ(else_out.at(0).ToVector<float>(), (std::vector<float>{-2, -2, -2, -4, -4, -4}));
}

// One node of a custom domain carrying every attribute kind, and values of every type form.
std::string AttributeAndTypeModel() {
  FlatBufferBuilder b;
  GraphParts sub;
  sub.nodes.push_back(MakeNode(b, "inner", "", "Identity", {"a"}, {"b"}));
  sub.inputs = {"a"};
  sub.outputs = {"b"};
  auto sub_graph = [&] { return MakeGraph(b, sub); };
  auto g1 = sub_graph();
  auto g2 = sub_graph();
  auto g3 = sub_graph();
  auto t1 = FloatTensor(b, "t1", {2}, {0.5f, 1.5f});
  std::vector<int32_t> ints32 = {7, -8};
  auto t2 = RawTensor(b, "t2", fb::TensorDataType::INT32, {2, 1}, ints32.data(), sizeof(int32_t) * 2);
  auto t3 = FloatTensor(b, "t3", {}, {4.0f});
  std::vector<float> floats = {1.25f, -2.5f};
  std::vector<int64_t> ints = {3, -4, 5};
  std::vector<std::string> strings = {"alpha", "", "gamma"};
  std::vector<Offset<fb::Tensor>> tensors = {t2, t3};
  std::vector<Offset<fb::Graph>> graphs = {g2, g3};
  auto name = [&](const char* n) { return b.CreateString(n); };
  std::vector<Offset<fb::Attribute>> attributes = {
      fb::CreateAttribute(b, name("f"), 0, fb::AttributeType::FLOAT, 0.75f),
      fb::CreateAttribute(b, name("i"), 0, fb::AttributeType::INT, 0, -42),
      fb::CreateAttribute(b, name("s"), 0, fb::AttributeType::STRING, 0, 0, b.CreateString(std::string("a\0b", 3))),
      fb::CreateAttribute(b, name("t"), 0, fb::AttributeType::TENSOR, 0, 0, 0, t1),
      fb::CreateAttribute(b, name("g"), 0, fb::AttributeType::GRAPH, 0, 0, 0, 0, g1),
      fb::CreateAttribute(b, name("floats"), 0, fb::AttributeType::FLOATS, 0, 0, 0, 0, 0, b.CreateVector(floats)),
      fb::CreateAttribute(b, name("ints"), 0, fb::AttributeType::INTS, 0, 0, 0, 0, 0, 0, b.CreateVector(ints)),
      fb::CreateAttribute(b, name("strings"), 0, fb::AttributeType::STRINGS, 0, 0, 0, 0, 0, 0, 0,
                          b.CreateVectorOfStrings(strings)),
      fb::CreateAttribute(b, name("tensors"), 0, fb::AttributeType::TENSORS, 0, 0, 0, 0, 0, 0, 0, 0,
                          b.CreateVector(tensors)),
      fb::CreateAttribute(b, name("graphs"), 0, fb::AttributeType::GRAPHS, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                          b.CreateVector(graphs)),
  };
  GraphParts main;
  main.nodes.push_back(MakeNode(b, "everything", "test.ort", "Everything", {"seq", "m", ""}, {"out", ""}, attributes));
  main.inputs = {"seq", "m", "untyped"};
  main.outputs = {"out"};
  auto seq_type =
      fb::CreateTypeInfo(b, 0, fb::TypeInfoValue::SequenceType,
                         fb::CreateSequenceType(b, TensorType(b, fb::TensorDataType::INT64, {"n"})).Union());
  main.node_args.push_back(Value(b, "seq", seq_type));
  main.node_args.push_back(Value(b, "m", TensorType(b, fb::TensorDataType::DOUBLE, {"?", "4", "rows"})));
  auto no_shape = fb::CreateTypeInfo(b, 0, fb::TypeInfoValue::TensorTypeAndShape,
                                     fb::CreateTensorTypeAndShape(b, fb::TensorDataType::UINT8).Union());
  main.node_args.push_back(Value(b, "out", no_shape));
  return Finish(b, MakeGraph(b, main));
}

TEST(OrtFormat, EveryAttributeKindAndTypeFormIsConverted) {
  std::string bytes = AttributeAndTypeModel();
  Model model = LoadModelFromBuffer(bytes.data(), bytes.size(), "kinds.ort");
  EXPECT_EQ(Describe(model.graph.inputs), (std::vector<std::string>{"seq: seq<int64> [n]", "m: float64 [?, 4, rows]",
                                                                    "untyped: undefined (no shape)"}));
  EXPECT_EQ(Describe(model.graph.outputs), std::vector<std::string>{"out: uint8 (no shape)"});
  ASSERT_EQ(model.graph.nodes.size(), 1u);
  const Node& n = model.graph.nodes[0];
  EXPECT_EQ(n.domain, "test.ort");
  EXPECT_EQ(n.op_type, "Everything");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"seq", "m", ""}));
  EXPECT_EQ(n.outputs, (std::vector<std::string>{"out", ""}));
  ASSERT_EQ(n.attributes.size(), 10u);
  EXPECT_EQ(n.GetFloat("f", 0), 0.75f);
  EXPECT_EQ(n.GetInt("i", 0), -42);
  EXPECT_EQ(n.GetString("s", ""), std::string("a\0b", 3));
  ASSERT_NE(n.GetTensor("t"), nullptr);
  EXPECT_EQ(n.GetTensor("t")->ToVector<float>(), (std::vector<float>{0.5f, 1.5f}));
  ASSERT_TRUE(n.Find("g") && n.Find("g")->g);
  EXPECT_EQ(n.Find("g")->kind, Attribute::Kind::kGraph);
  EXPECT_EQ(n.Find("g")->g->nodes.at(0).op_type, "Identity");
  EXPECT_EQ(n.GetFloats("floats"), (std::vector<float>{1.25f, -2.5f}));
  EXPECT_EQ(n.GetInts("ints"), (std::vector<int64_t>{3, -4, 5}));
  EXPECT_EQ(n.Find("strings")->strings, (std::vector<std::string>{"alpha", "", "gamma"}));
  const Attribute* tensors = n.Find("tensors");
  ASSERT_EQ(tensors->tensors.size(), 2u);
  EXPECT_EQ(tensors->tensors[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(tensors->tensors[0].ToVector<int32_t>(), (std::vector<int32_t>{7, -8}));
  EXPECT_EQ(tensors->tensors[1].ToVector<float>(), std::vector<float>{4.0f});
  const Attribute* graphs = n.Find("graphs");
  ASSERT_EQ(graphs->graphs.size(), 2u);
  EXPECT_EQ(graphs->graphs[1]->outputs.at(0).name, "b");
}

// ---------------------------------------------------------------------------------------------
// What edgetrain cannot represent, and damaged files

// A graph "x -> Identity -> y" with `extra` hooks for the part under test.
std::string IdentityModel(const std::function<void(FlatBufferBuilder&, GraphParts&)>& extra,
                          const std::string& version = "6") {
  FlatBufferBuilder b;
  GraphParts g;
  g.nodes.push_back(MakeNode(b, "id", "", "Identity", {"x"}, {"y"}));
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.node_args.push_back(Value(b, "x", TensorType(b, fb::TensorDataType::FLOAT, {"2"})));
  g.node_args.push_back(Value(b, "y", TensorType(b, fb::TensorDataType::FLOAT, {"2"})));
  extra(b, g);
  return Finish(b, MakeGraph(b, g), version);
}

Model LoadBytes(const std::string& bytes, const std::string& source) {
  return LoadOrtFormatModel(bytes.data(), bytes.size(), source);
}

TEST(OrtFormat, UnsupportedContentIsNamed) {
  std::string sparse = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    auto values = FloatTensor(b, "w", {1}, {3.0f});
    std::vector<int64_t> index = {1};
    auto indices = RawTensor(b, "w_indices", fb::TensorDataType::INT64, {1}, index.data(), sizeof(int64_t));
    g.sparse_initializers.push_back(
        fb::CreateSparseTensor(b, values, indices, b.CreateVector(std::vector<int64_t>{4})));
  });
  EXPECT_ERROR(LoadBytes(sparse, "sparse.ort"), ErrorCode::kNotImplemented,
               "sparse.ort: sparse initializers are not supported");

  auto strings = [](int64_t count) {
    return IdentityModel([count](FlatBufferBuilder& b, GraphParts& g) {
      std::vector<std::string> words = {"a", "b"};
      g.initializers.push_back(fb::CreateTensor(b, b.CreateString("words"), 0,
                                                b.CreateVector(std::vector<int64_t>{count}),
                                                fb::TensorDataType::STRING, 0, b.CreateVectorOfStrings(words)));
    });
  };
  const Tensor words = LoadBytes(strings(2), "strings.ort").graph.initializers.at("words");
  ASSERT_EQ(words.dtype(), DataType::kString);
  EXPECT_EQ(words.ToVector<std::string>(), (std::vector<std::string>{"a", "b"}));
  EXPECT_ERROR(LoadBytes(strings(3), "strings.ort"), ErrorCode::kInvalidModel,
               "initializer 'words' in strings.ort: holds 2 strings but its shape [3] needs 3");

  std::string external = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    g.initializers.push_back(RawTensor(b, "big", fb::TensorDataType::FLOAT, {1}, nullptr, 0, 128));
  });
  EXPECT_ERROR(LoadBytes(external, "external.ort"), ErrorCode::kNotImplemented,
               "'external.ort': tensor 'big' keeps its data in an external file");

  std::string fused = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    g.nodes.push_back(MakeNode(b, "compiled", "", "TRTKernel", {"x"}, {"z"}, {}, fb::NodeType::Fused));
  });
  EXPECT_ERROR(LoadBytes(fused, "fused.ort"), ErrorCode::kNotImplemented,
               "'fused.ort': node 'compiled' (TRTKernel) was compiled by execution provider 'CPUExecutionProvider'");
}

TEST(OrtFormat, MalformedContentIsNamed) {
  for (const std::string version : {"7", "", "5x"}) {
    std::string bytes = IdentityModel([](FlatBufferBuilder&, GraphParts&) {}, version);
    EXPECT_ERROR(LoadBytes(bytes, "version.ort"), ErrorCode::kInvalidModel,
                 "'version.ort' has ORT format version '" + version + "'; edgetrain reads versions 1 to 6");
  }
  for (const std::string version : {"1", "5", "6"})
    EXPECT_EQ(LoadBytes(IdentityModel([](FlatBufferBuilder&, GraphParts&) {}, version), "v.ort").graph.nodes.size(),
              1u);

  FlatBufferBuilder b;
  b.Finish(fb::CreateInferenceSessionDirect(b, "6", fb::CreateModel(b, 8)), fb::InferenceSessionIdentifier());
  std::string no_graph(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  EXPECT_ERROR(LoadBytes(no_graph, "empty.ort"), ErrorCode::kInvalidModel,
               "'empty.ort' is an ORT-format file without a model graph");

  std::string graph_less = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    std::vector<Offset<fb::Attribute>> attrs = {
        fb::CreateAttribute(b, b.CreateString("body"), 0, fb::AttributeType::GRAPH)};
    g.nodes.push_back(MakeNode(b, "loop", "", "Loop", {}, {"z"}, attrs));
  });
  EXPECT_ERROR(LoadBytes(graph_less, "loop.ort"), ErrorCode::kInvalidModel,
               "'loop.ort': attribute 'body' of node 'loop' is of type graph but holds none");

  std::string short_data = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    g.initializers.push_back(FloatTensor(b, "w", {3}, {1.0f, 2.0f}));
  });
  EXPECT_ERROR(LoadBytes(short_data, "short.ort"), ErrorCode::kInvalidModel,
               "initializer 'w' in short.ort: has 8 bytes of data but its shape [3] of float32 needs 12");

  std::string cycle = IdentityModel([](FlatBufferBuilder& b, GraphParts& g) {
    g.nodes.push_back(MakeNode(b, "p", "", "Neg", {"q_out"}, {"p_out"}));
    g.nodes.push_back(MakeNode(b, "q", "", "Neg", {"p_out"}, {"q_out"}));
  });
  EXPECT_ERROR(LoadBytes(cycle, "cycle.ort"), ErrorCode::kInvalidModel, "'cycle.ort': ");
}

TEST(OrtFormat, TruncatedFilesFailCleanlyNamingTheFile) {
  std::string bytes = ReadBytes(kSampleDir / "eval_model.ort");
  size_t end_of_data = bytes.find_last_not_of('\0') + 1;  // dropping only the final zero padding is harmless
  ASSERT_GT(end_of_data, bytes.size() - 8);
  for (size_t size = 0; size < end_of_data; ++size) {
    SCOPED_TRACE(size);
    EXPECT_ERROR(LoadOrtFormatModel(bytes.data(), size, "eval_model.ort"), ErrorCode::kInvalidModel,
                 "'eval_model.ort' is ");
  }
  fs::path truncated = WriteTemp("truncated.ort", bytes.substr(0, bytes.size() / 2));
  EXPECT_ERROR(LoadModel(truncated.string()), ErrorCode::kInvalidModel,
               Quoted(truncated) + " is a corrupt or truncated ORT-format model");
  fs::path stub = WriteTemp("stub.ort", bytes.substr(0, 6));  // too short for an identifier: named by extension
  EXPECT_ERROR(LoadModel(stub.string()), ErrorCode::kInvalidModel,
               Quoted(stub) + " is not an ORT-format model: it does not carry the 'ORTM' file identifier");
  fs::remove(truncated);
  fs::remove(stub);
}

TEST(OrtFormat, CorruptBytesFailCleanly) {
  std::string bytes = ReadBytes(kSampleDir / "training_model.ort");
  std::string bad_root = bytes;
  bad_root[0] = '\x7f';  // the root table offset points far outside the file
  EXPECT_ERROR(LoadModelFromBuffer(bad_root.data(), bad_root.size(), "bad_root.ort"), ErrorCode::kInvalidModel,
               "'bad_root.ort' is a corrupt or truncated ORT-format model (FlatBuffers verification failed)");
  // Any single damaged byte either still reads as some model or gives an edgetrain::Error; never a crash.
  int rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ flip);
      try {
        LoadOrtFormatModel(damaged.data(), damaged.size(), "damaged.ort");
      } catch (const Error& e) {
        ++rejected;
        EXPECT_NE(std::string(e.what()).find("damaged.ort"), std::string::npos) << "byte " << i << ": " << e.what();
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
