// Importer and session: loading, validation of feeds, memory planning, and the errors a user can cause.
#include "runtime/session.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ir/passes.hpp"
#include "onnx/importer.hpp"
#include "test_util.hpp"

using namespace edgetrain;
using namespace edgetrain::testing;

namespace {

constexpr int kFloat = onnx::TensorProto::FLOAT;

// Each test writes under its own name: ctest runs tests in parallel processes.
std::string WriteFile(const std::string& name, const std::string& bytes) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path = ::testing::TempDir() + "/" + test->test_suite_name() + "." + test->name() + "." + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// x[batch, 3] -> Identity chain of `length` nodes -> y
// `length` nodes of `op` (a one-input op that keeps the shape) from x to y.
onnx::ModelProto Chain(int length, const std::string& op = "Identity") {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", kFloat, {"batch", "3"});
  std::string prev = "x";
  for (int i = 0; i < length; ++i) {
    std::string index = std::to_string(i);
    std::string out = i + 1 == length ? std::string("y") : std::string("t").append(index);
    AddNode(g, op, {prev}, {out}, std::string("n").append(index));
    prev = out;
  }
  AddValue(g->mutable_output(), "y", kFloat, {"batch", "3"});
  return m;
}

Session SessionFrom(const onnx::ModelProto& m, const std::string& name = "model.onnx") {
  return Session::FromFile(WriteFile(name, Serialize(m)));
}

}  // namespace

TEST(Importer, MissingFile) {
  EXPECT_ERROR(LoadModel("/nonexistent/model.onnx"), ErrorCode::kIoError, "/nonexistent/model.onnx");
}

TEST(Importer, TruncatedModelFile) {
  onnx::ModelProto m = Chain(3);
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(kFloat);
  w->add_dims(64);
  w->set_raw_data(std::string(256, '\1'));
  std::string bytes = Serialize(m);
  std::string path = WriteFile("truncated.onnx", bytes.substr(0, bytes.size() - 100));
  EXPECT_ERROR(LoadModel(path), ErrorCode::kInvalidModel, "truncated.onnx");
}

TEST(Importer, CorruptModelFile) {
  std::string path = WriteFile("corrupt.onnx", std::string("\xff\xff\xff\xff garbage that is not protobuf"));
  EXPECT_ERROR(LoadModel(path), ErrorCode::kInvalidModel, "corrupt.onnx");
  EXPECT_ERROR(LoadModel(WriteFile("empty.onnx", "")), ErrorCode::kInvalidModel, "empty.onnx");
}

TEST(Importer, AbsurdlyLargeInitializerIsRefusedBeforeAllocating) {
  onnx::ModelProto m = Chain(1);
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("huge");
  w->set_data_type(kFloat);
  for (int64_t d : {100000, 100000, 100000}) w->add_dims(d);
  EXPECT_ERROR(SessionFrom(m), ErrorCode::kResourceExhausted, "initializer 'huge'");
}

TEST(Importer, InitializerDataMustMatchItsShape) {
  onnx::ModelProto m = Chain(1);
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(kFloat);
  w->add_dims(10);
  w->set_raw_data(std::string(12, '\0'));
  EXPECT_ERROR(SessionFrom(m), ErrorCode::kInvalidModel, "initializer 'w'");
}

TEST(Importer, ExternalData) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(kFloat);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto* off = w->add_external_data();
  off->set_key("offset");
  off->set_value("4");
  AddNode(g, "Identity", {"w"}, {"y"});
  AddValue(g->mutable_output(), "y", kFloat, {"2"});
  float values[3] = {0, 1.5f, -2};
  std::string weights = WriteFile("weights.bin", std::string(reinterpret_cast<char*>(values), sizeof(values)));
  loc->set_value(std::filesystem::path(weights).filename().string());
  std::string path = WriteFile("external.onnx", Serialize(m));
  Session s = Session::FromFile(path);
  EXPECT_EQ(s.Run({})[0].ToVector<float>(), (std::vector<float>{1.5f, -2}));

  loc->set_value("missing.bin");
  EXPECT_ERROR(SessionFrom(m, "external2.onnx"), ErrorCode::kIoError, "missing.bin");
}

TEST(Importer, ModelLocalFunctionIsInlined) {
  onnx::ModelProto m = NewModel();
  auto* imp = m.add_opset_import();
  imp->set_domain("my.functions");
  imp->set_version(1);
  auto* f = m.add_functions();
  f->set_name("Twice");
  f->set_domain("my.functions");
  f->add_input("a");
  f->add_output("b");
  auto* fimp = f->add_opset_import();
  fimp->set_domain("");
  fimp->set_version(17);
  auto* n1 = f->add_node();
  n1->set_op_type("Identity");
  n1->add_input("a");
  n1->add_output("mid");
  auto* n2 = f->add_node();
  n2->set_op_type("Identity");
  n2->add_input("mid");
  n2->add_output("b");
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", kFloat, {"3"});
  AddNode(g, "Twice", {"x"}, {"y"})->set_domain("my.functions");
  AddValue(g->mutable_output(), "y", kFloat, {"3"});
  Model model = LoadModel(WriteFile("function.onnx", Serialize(m)));
  ASSERT_EQ(model.graph.nodes.size(), 2u);
  EXPECT_EQ(model.graph.nodes[0].op_type, "Identity");
  Session s(std::move(model));
  Tensor x = Tensor::FromVector<float>({1, 2, 3}, {3});
  EXPECT_EQ(s.Run({{"x", x}})[0].ToVector<float>(), x.ToVector<float>());
}

TEST(Session, UnsupportedOperatorNamesNodeAndOperator) {
  onnx::ModelProto m = Chain(1);
  AddNode(m.mutable_graph(), "FrobnicateTensor", {"x"}, {"z"}, "frob1");
  m.mutable_graph()->mutable_output(0)->set_name("z");
  EXPECT_ERROR(SessionFrom(m), ErrorCode::kNotImplemented, "FrobnicateTensor-17 (node 'frob1')");
}

TEST(Session, UndefinedValueNamesNode) {
  onnx::ModelProto m = Chain(1);
  m.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  EXPECT_ERROR(SessionFrom(m), ErrorCode::kInvalidModel, "reads 'nowhere'");
}

TEST(Session, FeedValidation) {
  Session s = SessionFrom(Chain(2));
  Tensor good = Tensor::Zeros(DataType::kFloat32, {4, 3});
  EXPECT_EQ(s.Run({{"x", good}})[0].shape(), (Shape{4, 3}));
  EXPECT_ERROR(s.Run({}), ErrorCode::kInvalidArgument, "missing input 'x'");
  EXPECT_ERROR(s.Run({{"x", good}, {"extra", good}}), ErrorCode::kInvalidArgument, "'extra' is not an input");
  EXPECT_ERROR(s.Run({{"x", Tensor::Zeros(DataType::kFloat64, {4, 3})}}), ErrorCode::kInvalidArgument,
               "input 'x' expects float32");
  EXPECT_ERROR(s.Run({{"x", Tensor::Zeros(DataType::kFloat32, {12})}}), ErrorCode::kInvalidArgument,
               "input 'x' expects rank 2");
  EXPECT_ERROR(s.Run({{"x", Tensor::Zeros(DataType::kFloat32, {4, 2})}}), ErrorCode::kInvalidArgument,
               "was fed shape [4, 2] (dimension 1)");
}

TEST(Session, PreparedRunComputesWhatRunDoesAndChecksItsNames) {
  Session s = SessionFrom(Chain(3, "Neg"));
  const Session::PreparedRun run = s.Prepare({"x"}, {"y"});
  std::vector<RuntimeValue> outputs;
  for (float value : {1.5f, -2.0f}) {
    const Tensor x = Tensor::FromVector<float>({value, 0.0f, 3.0f}, {1, 3});
    s.RunPrepared(run, {RuntimeValue::Of(x)}, outputs);
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].tensor.ToVector<float>(), (std::vector<float>{-value, -0.0f, -3.0f}));
    EXPECT_EQ(outputs[0].tensor.ToVector<float>(), s.Run({{"x", x}})[0].ToVector<float>());
  }
  EXPECT_ERROR(s.Prepare({"nope"}), ErrorCode::kInvalidArgument, "'nope' is not an input");
  EXPECT_ERROR(s.Prepare({}), ErrorCode::kInvalidArgument, "missing input 'x'");
  EXPECT_ERROR(s.Prepare({"x", "x"}), ErrorCode::kInvalidArgument, "input 'x' is fed twice");
  EXPECT_ERROR(s.Prepare({"x"}, {"t0_not_an_output"}), ErrorCode::kInvalidArgument, "is not an output");
  EXPECT_ERROR(s.RunPrepared(run, {}, outputs), ErrorCode::kInvalidArgument, "0 values fed for 1 prepared inputs");
  EXPECT_ERROR(s.RunPrepared(run, {RuntimeValue::Of(Tensor::Zeros(DataType::kFloat64, {1, 3}))}, outputs),
               ErrorCode::kInvalidArgument, "input 'x' expects float32");
}

TEST(Int64Vector, BehavesLikeAVectorInlineAndOnTheHeap) {
  Int64Vector v = {1, 2, 3};
  v.insert(v.begin() + 1, {7, 8});
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{1, 7, 8, 2, 3}));
  v.erase(v.begin(), v.begin() + 2);
  EXPECT_EQ(v, (Int64Vector{8, 2, 3}));
  for (int64_t i = 0; i < 20; ++i) v.push_back(i);  // grows past the inline capacity
  EXPECT_EQ(v.size(), 23u);
  EXPECT_EQ(v.back(), 19);
  Int64Vector moved = std::move(v);
  EXPECT_EQ(moved.size(), 23u);
  EXPECT_TRUE(v.empty());
  Int64Vector copy = moved;
  copy.resize(2);
  EXPECT_EQ(copy, (Int64Vector{8, 2}));
  EXPECT_EQ(moved[3], 0);
  copy.insert(copy.end(), copy.begin(), copy.end());  // a range that aliases the vector
  EXPECT_EQ(copy, (Int64Vector{8, 2, 8, 2}));
  EXPECT_NE(copy, moved);
}

TEST(Session, SymbolicDimensionsMustAgree) {
  onnx::ModelProto m = Chain(1);
  AddValue(m.mutable_graph()->mutable_input(), "x2", kFloat, {"batch", "3"});
  AddNode(m.mutable_graph(), "Identity", {"x2"}, {"y2"});
  AddValue(m.mutable_graph()->mutable_output(), "y2", kFloat, {"batch", "3"});
  Session s = SessionFrom(m);
  EXPECT_ERROR(
      s.Run({{"x", Tensor::Zeros(DataType::kFloat32, {4, 3})}, {"x2", Tensor::Zeros(DataType::kFloat32, {5, 3})}}),
      ErrorCode::kInvalidArgument, "'batch' = 4");
}

TEST(Session, MemoryPlanReusesBuffersByLiveness) {
  Session s = SessionFrom(Chain(6, "Relu"));
  Tensor x = Tensor::FromVector<float>(std::vector<float>(3000, 0.5f), {1000, 3});
  for (int run = 0; run < 3; ++run) {
    Tensor y = s.Run({{"x", x}})[0];
    EXPECT_EQ(y.ToVector<float>(), x.ToVector<float>());
    EXPECT_FALSE(y.SameData(x));
  }
  // Five 12000-byte intermediates, each Relu writing over the input it is the last to read: one buffer.
  EXPECT_EQ(s.planned_peak_bytes(), 12032u);
  Tensor x2 = Tensor::Zeros(DataType::kFloat32, {10, 3});  // new shapes: replanned
  EXPECT_EQ(s.Run({{"x", x2}})[0].shape(), (Shape{10, 3}));
  EXPECT_EQ(s.Run({{"x", x2}})[0].shape(), (Shape{10, 3}));
  EXPECT_EQ(s.planned_peak_bytes(), 128u);
}

// BatchNormalizationGrad writes dX over a dY that dies there (in place): the same values as when dY is
// kept (a graph output, so never overwritten): its kernel must read each dY element before writing dX there.
TEST(Session, InPlaceBatchNormalizationGradMatchesTheOutOfPlaceOne) {
  auto model = [](bool keep_dy) {
    onnx::ModelProto m = NewModel();
    auto* imp = m.add_opset_import();
    imp->set_domain("ai.edgetrain");
    imp->set_version(1);
    auto* g = m.mutable_graph();
    AddValue(g->mutable_input(), "g", kFloat, {"2", "3", "5"});
    AddValue(g->mutable_input(), "x", kFloat, {"2", "3", "5"});
    AddValue(g->mutable_input(), "scale", kFloat, {"3"});
    AddNode(g, "Neg", {"g"}, {"dy"});
    auto* n = AddNode(g, "BatchNormalizationGrad", {"dy", "x", "scale"}, {"dx", "dscale", "dbias"});
    n->set_domain("ai.edgetrain");
    auto* eps = n->add_attribute();
    eps->set_name("epsilon");
    eps->set_type(onnx::AttributeProto::FLOAT);
    eps->set_f(1e-5f);
    AddNode(g, "Neg", {"dx"}, {"minus_dx"});
    AddValue(g->mutable_output(), "minus_dx", kFloat, {"2", "3", "5"});
    AddValue(g->mutable_output(), "dscale", kFloat, {"3"});
    AddValue(g->mutable_output(), "dbias", kFloat, {"3"});
    if (keep_dy) AddValue(g->mutable_output(), "dy", kFloat, {"2", "3", "5"});
    return m;
  };
  std::vector<float> gv(30), xv(30);
  for (size_t i = 0; i < 30; ++i) {
    gv[i] = std::sin(0.7f * static_cast<float>(i));
    xv[i] = std::cos(1.3f * static_cast<float>(i)) * static_cast<float>(i % 4);
  }
  const Tensor g = Tensor::FromVector<float>(gv, {2, 3, 5}), x = Tensor::FromVector<float>(xv, {2, 3, 5});
  const Tensor scale = Tensor::FromVector<float>({0.5f, -2.0f, 1.5f}, {3});
  Session in_place = SessionFrom(model(false), "bngrad_in_place.onnx");
  Session kept = SessionFrom(model(true), "bngrad_kept.onnx");
  for (int run = 0; run < 2; ++run) {  // the measuring run, then the planned one
    const std::vector<Tensor> a = in_place.Run({{"g", g}, {"x", x}, {"scale", scale}});
    const std::vector<Tensor> b = kept.Run({{"g", g}, {"x", x}, {"scale", scale}});
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a.at(i).ToVector<float>(), b.at(i).ToVector<float>()) << i;
    EXPECT_EQ(b.at(3).ToVector<float>()[1], -gv[1]);  // dY kept intact
  }
  // One planned tensor each: dx took dy's memory in one, dy is a graph output (not planned) in the other.
  EXPECT_EQ(in_place.planned_peak_bytes(), kept.planned_peak_bytes());
  EXPECT_GT(in_place.planned_peak_bytes(), 0u);
}

// An output nothing reads is dead once its node returns: every node's unread outputs share the session's buffers
// rather than each keeping one (ViT-B/32's gradient ran 25 LayerNormalizations whose Y nobody read). Eight Splits
// whose second halves nobody reads allocate those halves' memory once, as one Split does.
TEST(Session, UnreadOutputsShareOneBuffer) {
  auto model = [](int splits) {
    onnx::ModelProto m = NewModel();
    auto* g = m.mutable_graph();
    AddValue(g->mutable_input(), "x", kFloat, {"1000", "6"});
    for (int i = 0; i < splits; ++i) {
      const std::string index = std::to_string(i);
      auto* axis = AddNode(g, "Split", {"x"}, {"y" + index, "unread" + index}, "split" + index)->add_attribute();
      axis->set_name("axis");
      axis->set_type(onnx::AttributeProto::INT);
      axis->set_i(1);
      AddValue(g->mutable_output(), "y" + index, kFloat, {"1000", "3"});
    }
    return m;
  };
  std::vector<float> xv(6000);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  const Tensor x = Tensor::FromVector<float>(xv, {1000, 6});
  auto bytes_of_two_runs = [&](Session& s, int splits) {
    const uint64_t before = Tensor::allocated_bytes();
    for (int run = 0; run < 2; ++run) {
      const std::vector<Tensor> ys = s.Run({{"x", x}});
      EXPECT_EQ(ys.size(), static_cast<size_t>(splits));
      for (const Tensor& y : ys) {
        EXPECT_EQ(y.ToVector<float>()[0], 0.0f);
        EXPECT_EQ(y.ToVector<float>()[2999], 5996.0f);  // row 999, column 2
      }
    }
    return Tensor::allocated_bytes() - before;
  };
  Session one = SessionFrom(model(1), "one_split.onnx"), eight = SessionFrom(model(8), "eight_splits.onnx");
  const uint64_t output_bytes = 12032;  // [1000, 3] float32, padded to 64 bytes: each run's graph outputs are fresh
  EXPECT_EQ(bytes_of_two_runs(eight, 8) - bytes_of_two_runs(one, 1), 2 * 7 * output_bytes);
}

// A frozen prefix's parameters stay the checkpoint's: constant folding leaves a Transpose of a shared weight of 64 KiB
// or more (its copy would double the weight's memory) and the fusions take it into the product instead; an initializer
// the session owns alone is folded as before. Both compute the same product.
TEST(Session, SharedInitializersAreNotFoldedIntoCopies) {
  auto model = [] {
    Model m;
    m.source = "shared_weight.onnx";
    m.opsets[""] = 17;
    ValueInfo x;
    x.name = "x";
    x.dtype = DataType::kFloat32;
    x.has_shape = true;
    x.shape = {Dim{4, ""}, Dim{128, ""}};
    m.graph.inputs.push_back(x);
    std::vector<float> w(256 * 128);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3.0f;
    m.graph.initializers["w"] = Tensor::FromVector<float>(w, {256, 128});  // 128 KiB
    m.graph.nodes.push_back(Node{"wt", "Transpose", "", {"w"}, {"w_t"}, {}, 0});
    m.graph.nodes.push_back(Node{"product", "MatMul", "", {"x", "w_t"}, {"y"}, {}, 0});
    ValueInfo y;
    y.name = "y";
    y.dtype = DataType::kFloat32;
    m.graph.outputs.push_back(y);
    return m;
  };
  SessionOptions shared_options;
  shared_options.shared_initializers = {"w"};
  Session shared(model(), shared_options), owned(model());
  EXPECT_EQ(shared.model().graph.initializers.count("w_t"), 0u);
  EXPECT_EQ(owned.model().graph.initializers.count("w_t"), 1u);
  std::vector<float> xv(4 * 128);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 5) - 2.0f;
  const Tensor x = Tensor::FromVector<float>(xv, {4, 128});
  const std::vector<float> a = shared.Run({{"x", x}})[0].ToVector<float>(), b = owned.Run({{"x", x}})[0].ToVector<float>();
  ASSERT_EQ(a.size(), 4u * 256u);
  EXPECT_EQ(a, b);  // small integers: exact in any summation order
}

TEST(Session, ViewsShareTheirInputsMemory) {
  // Identity, Reshape and friends hand on their input's memory: nothing to plan, nothing copied
  // but the graph output, which never points into the caller's or the session's memory.
  Session s = SessionFrom(Chain(6, "Identity"));
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  for (int run = 0; run < 2; ++run) {
    Tensor y = s.Run({{"x", x}})[0];
    EXPECT_EQ(y.ToVector<float>(), x.ToVector<float>());
    EXPECT_FALSE(y.SameData(x));
  }
  EXPECT_EQ(s.planned_peak_bytes(), 0u);
}

TEST(Session, ConstantsAreFolded) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  auto* c = AddNode(g, "Constant", {}, {"c"});
  auto* value = c->add_attribute();
  value->set_name("value_floats");
  value->set_type(onnx::AttributeProto::FLOATS);
  value->add_floats(2);
  value->add_floats(3);
  AddNode(g, "Identity", {"c"}, {"c2"}, "fold_me");
  AddNode(g, "Identity", {"c2"}, {"y"}, "keep_me");
  AddValue(g->mutable_output(), "y", kFloat, {"2"});
  Session s = SessionFrom(m);
  ASSERT_EQ(s.model().graph.nodes.size(), 1u);
  EXPECT_EQ(s.model().graph.nodes[0].name, "keep_me");
  EXPECT_EQ(s.Run({})[0].ToVector<float>(), (std::vector<float>{2, 3}));
}

TEST(Session, OutOfRangeGatherIndexNamesNode) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "data", kFloat, {"4", "2"});
  AddValue(g->mutable_input(), "indices", onnx::TensorProto::INT64, {"3"});
  AddNode(g, "Gather", {"data", "indices"}, {"y"}, "lookup");
  AddValue(g->mutable_output(), "y", kFloat, {"3", "2"});
  Session s = SessionFrom(m);
  Tensor data = Tensor::Zeros(DataType::kFloat32, {4, 2});
  EXPECT_EQ(s.Run({{"data", data}, {"indices", Tensor::FromVector<int64_t>({0, -1, 3}, {3})}})[0].shape(),
            (Shape{3, 2}));
  EXPECT_ERROR(s.Run({{"data", data}, {"indices", Tensor::FromVector<int64_t>({0, 4, 1}, {3})}}),
               ErrorCode::kOutOfRange, "node 'lookup' (Gather): index 4 is out of range");
}

TEST(Session, AbsurdRuntimeAllocationIsRefused) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "shape", onnx::TensorProto::INT64, {"3"});
  AddNode(g, "ConstantOfShape", {"shape"}, {"y"}, "fill");
  AddValue(g->mutable_output(), "y", kFloat, {"a", "b", "c"});
  Session s = SessionFrom(m);
  EXPECT_EQ(s.Run({{"shape", Tensor::FromVector<int64_t>({2, 3, 4}, {3})}})[0].numel(), 24);
  EXPECT_ERROR(s.Run({{"shape", Tensor::FromVector<int64_t>({100000, 100000, 100000}, {3})}}),
               ErrorCode::kResourceExhausted, "node 'fill' (ConstantOfShape)");
}

TEST(Session, FetchMustBeAnOutput) {
  Session s = SessionFrom(Chain(3));
  Tensor x = Tensor::Zeros(DataType::kFloat32, {1, 3});
  EXPECT_EQ(s.Run({{"x", x}}, {"y"}).size(), 1u);
  EXPECT_ERROR(s.Run({{"x", x}}, {"t0"}), ErrorCode::kInvalidArgument, "'t0' is not an output");
}

TEST(Session, BindingAndOverwritingNameTheModelsOwnValues) {
  Session s = SessionFrom(Chain(3, "Relu"));
  Tensor x = Tensor::FromVector<float>({-1, 2, 3}, {1, 3});
  Tensor target = Tensor::Zeros(DataType::kFloat32, {1, 3});
  s.BindOutput("y", target);
  EXPECT_TRUE(s.Run({{"x", x}})[0].SameData(target));
  EXPECT_EQ(target.ToVector<float>(), (std::vector<float>{0, 2, 3}));
  EXPECT_ERROR(s.BindOutput("t0", target), ErrorCode::kInvalidArgument, "cannot bind 't0': it is not an output");
  EXPECT_ERROR(s.AllowOverwrite("y"), ErrorCode::kInvalidArgument,
               "cannot let input 'y' be overwritten: it is not an input");
}

// ONNX 1.12's shape inference crashes on this form; the importer must not.
TEST(Importer, TrainingModeBatchNormWithOneOutputLoads) {
  onnx::ModelProto m = NewModel();
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", kFloat, {"2", "3", "4"});
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(kFloat);
    t->add_dims(3);
    for (int i = 0; i < 3; ++i) t->add_float_data(1.0f);
  }
  auto* bn = AddNode(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn");
  auto* mode = bn->add_attribute();
  mode->set_name("training_mode");
  mode->set_type(onnx::AttributeProto::INT);
  mode->set_i(1);
  AddValue(g->mutable_output(), "y", kFloat, {"2", "3", "4"});
  Session s = SessionFrom(m, "bn_one_output.onnx");
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 4);
  std::vector<float> y = s.Run({{"x", Tensor::FromVector<float>(x, {2, 3, 4})}})[0].ToVector<float>();
  EXPECT_NEAR(y[0], 1.0f - 1.5f / std::sqrt(1.25f + 1e-5f), 1e-5);  // batch mean 1.5, biased variance 1.25
}

TEST(NodeDescription, FrozenWhileCompiledAndFreshInEveryCopy) {
  Node node;
  node.name = "fc1";
  node.op_type = "Gemm";
  EXPECT_EQ(node.Describe(), "node 'fc1' (Gemm)");
  node.name = "fc2";  // an unfrozen node notices the change
  EXPECT_EQ(node.Describe(), "node 'fc2' (Gemm)");
  node.FreezeDescription();
  EXPECT_EQ(node.Describe(), "node 'fc2' (Gemm)");
  Node copy = node;  // copies and moves start unfrozen, so passes may rename them
  copy.name = "fc2_recompute";
  copy.domain = "com.microsoft";
  EXPECT_EQ(copy.Describe(), "node 'fc2_recompute' (com.microsoft.Gemm)");
  Node moved = std::move(copy);
  moved.op_type = "FusedGemm";
  EXPECT_EQ(moved.Describe(), "node 'fc2_recompute' (com.microsoft.FusedGemm)");
  node = moved;
  EXPECT_EQ(node.Describe(), "node 'fc2_recompute' (com.microsoft.FusedGemm)");
  node.op_type = "Gemm";
  EXPECT_EQ(node.Describe(), "node 'fc2_recompute' (com.microsoft.Gemm)");
}
