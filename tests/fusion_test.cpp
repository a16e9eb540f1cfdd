// The session's graph fusions (ir/passes.hpp): each pattern against the same model run unfused
// (SessionOptions::fuse_operators off) on random inputs, on both kernel backends, and the graphs
// where a fusion would change a result and so must not happen.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <tuple>

#include "autodiff/recurrent_last_step.hpp"
#include "core/kernel_backend.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "runtime/export_options.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain::testing {
namespace {

Tensor RandomFloats(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  const std::vector<double> values = RandomValues(shape, seed, low, high);
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), shape);
}

// A model under construction: float32 input "x", initializers, nodes, outputs.
struct ModelBuilder {
  Model model;
  uint64_t seed = 1;

  explicit ModelBuilder(const Shape& x_shape, int64_t opset = 17) {
    model.source = "fusion test";
    model.opsets = {{"", opset}};
    model.graph.inputs.push_back(ValueInfoOf("x", DataType::kFloat32, x_shape));
  }
  // A random initializer; `positive` draws from [0.5, 1.5) (variances, scales).
  std::string Initializer(const std::string& name, const Shape& shape, bool positive = false) {
    model.graph.initializers[name] = positive ? RandomFloats(shape, seed++, 0.5, 1.5) : RandomFloats(shape, seed++);
    return name;
  }
  // Makes initializer `name` a graph input too: a feed may override it, so it is not a constant.
  void Overridable(const std::string& name) {
    const Tensor& t = model.graph.initializers.at(name);
    model.graph.inputs.push_back(ValueInfoOf(name, t.dtype(), t.shape()));
  }
  Node& Add(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
            AttributeMap attributes = {}) {
    Node node;
    node.name = op + std::to_string(model.graph.nodes.size());
    node.op_type = op;
    node.inputs = std::move(inputs);
    node.outputs = std::move(outputs);
    node.attributes = std::move(attributes);
    model.graph.nodes.push_back(node);
    return model.graph.nodes.back();
  }
  // Conv with weight [out, in/group, k, k] (and a bias unless `bias` is false).
  std::string Conv(const std::string& x, int64_t in, int64_t out, int64_t k, AttributeMap attrs,
                   bool bias = true) {
    const std::string y = "conv" + std::to_string(model.graph.nodes.size());
    const int64_t group = attrs.count("group") ? attrs.at("group").i : 1;
    std::vector<std::string> inputs = {x, Initializer(y + ".w", {out, in / group, k, k})};
    if (bias) inputs.push_back(Initializer(y + ".b", {out}));
    Add("Conv", inputs, {y}, std::move(attrs));
    return y;
  }
  std::string BatchNorm(const std::string& x, int64_t channels, AttributeMap attrs = {}) {
    const std::string y = "bn" + std::to_string(model.graph.nodes.size());
    Add("BatchNormalization",
        {x, Initializer(y + ".scale", {channels}, true), Initializer(y + ".bias", {channels}),
         Initializer(y + ".mean", {channels}), Initializer(y + ".var", {channels}, true)},
        {y}, std::move(attrs));
    return y;
  }
  std::string Unary(const std::string& op, const std::string& x, AttributeMap attrs = {}) {
    const std::string y = op + std::to_string(model.graph.nodes.size());
    Add(op, {x}, {y}, std::move(attrs));
    return y;
  }
  // Gemm Y = X W^T + b with W [out, in].
  std::string Linear(const std::string& x, int64_t in, int64_t out) {
    const std::string y = "gemm" + std::to_string(model.graph.nodes.size());
    Add("Gemm", {x, Initializer(y + ".w", {out, in}), Initializer(y + ".b", {out})}, {y},
        {{"transB", Attribute::Int(1)}});
    return y;
  }
  void Output(const std::string& name) { model.graph.outputs.push_back(ValueInfoOf(name, DataType::kFloat32, {})); }
};

// "Conv,BatchNormalization,Relu": the op types a session runs, in graph order.
std::string OpTypes(const Session& session) {
  std::string types;
  for (const Node& n : session.model().graph.nodes) types += (types.empty() ? "" : ",") + n.op_type;
  return types;
}

std::vector<KernelBackend> Backends() {
  std::vector<KernelBackend> backends = {KernelBackend::kReference};
  if (DnnlAvailable()) backends.push_back(KernelBackend::kDnnl);
  return backends;
}

class Fusion : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = ActiveKernelBackend(); }
  void TearDown() override { SetKernelBackend(saved_); }

  // Runs `model` fused and unfused on every backend with the same random feeds; expects the fused
  // session to run `fused_ops` and every output to agree within float rounding.
  static void ExpectFusion(const Model& model, const std::map<std::string, Tensor>& feeds, const std::string& fused_ops,
                           int threads = 1) {
    for (KernelBackend backend : Backends()) {
      SetKernelBackend(backend);
      const std::string label = backend == KernelBackend::kDnnl ? "oneDNN" : "reference";
      SessionOptions fuse, plain;
      fuse.num_threads = plain.num_threads = threads;
      plain.fuse_operators = false;
      Session fused(model, fuse), unfused(model, plain);
      EXPECT_EQ(OpTypes(fused), fused_ops) << label;
      const std::vector<Tensor> expected = unfused.Run(feeds), actual = fused.Run(feeds);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t k = 0; k < expected.size(); ++k) {
        double largest = 0.0;
        for (double v : expected[k].ToDoubleVector()) largest = std::max(largest, std::abs(v));
        ASSERT_GT(largest, 0.0) << label << " output " << k << " is all zeros";
        ExpectValuesNear(actual[k], expected[k].shape(), expected[k].ToDoubleVector(), 1e-5 * largest,
                         label + " output " + std::to_string(k));
      }
    }
  }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

AttributeMap Pads(int64_t p) { return {{"pads", Attribute::Ints({p, p, p, p})}}; }

TEST_F(Fusion, BatchNormFoldsIntoConvAndReluIntoTheResult) {
  ModelBuilder b({4, 3, 12, 12});
  b.Output(b.Unary("Relu", b.BatchNorm(b.Conv("x", 3, 8, 3, Pads(1)), 8, {{"epsilon", Attribute::Float(1e-3f)}})));
  ExpectFusion(b.model, {{"x", RandomFloats({4, 3, 12, 12}, 99)}}, "FusedConv");
}

TEST_F(Fusion, BatchNormFoldsIntoConvWithoutBias) {
  ModelBuilder b({2, 4, 9, 9});
  AttributeMap attrs = {{"strides", Attribute::Ints({2, 2})}, {"group", Attribute::Int(2)}};
  b.Output(b.BatchNorm(b.Conv("x", 4, 6, 3, attrs, /*bias=*/false), 6));
  ExpectFusion(b.model, {{"x", RandomFloats({2, 4, 9, 9}, 7)}}, "Conv");
  Session fused(b.model);
  const Node& conv = fused.model().graph.nodes.at(0);
  ASSERT_EQ(conv.inputs.size(), 3u);
  EXPECT_EQ(fused.model().graph.initializers.count("conv0.w"), 0u) << "the unfolded weight is no longer read";
}

TEST_F(Fusion, ConvReluFusesOnBothBackendsAndThreadCounts) {
  ModelBuilder b({3, 6, 10, 10});
  AttributeMap attrs = Pads(2);
  attrs["group"] = Attribute::Int(3);
  b.Output(b.Unary("Relu", b.Conv("x", 6, 9, 5, attrs)));
  for (int threads : {1, 2}) ExpectFusion(b.model, {{"x", RandomFloats({3, 6, 10, 10}, 5)}}, "FusedConv", threads);
}

TEST_F(Fusion, GemmReluFusesForLargeAndSmallBatches) {
  for (int64_t batch : {16, 2}) {  // oneDNN's matmul from 8 rows on, its sgemm or the reference below
    ModelBuilder b({batch, 20});
    b.Output(b.Linear(b.Unary("Relu", b.Linear("x", 20, 24)), 24, 5));
    ExpectFusion(b.model, {{"x", RandomFloats({batch, 20}, 11)}}, "FusedGemm,Gemm");
  }
}

TEST_F(Fusion, FoldedWeightLeavesASharedWeightAlone) {
  ModelBuilder b({2, 3, 8, 8});
  const std::string first = b.Conv("x", 3, 4, 3, Pads(1));
  b.Add("Conv", {"x", first + ".w", first + ".b"}, {"second"}, Pads(1));  // the same weight, no BatchNorm
  b.Add("Add", {b.BatchNorm(first, 4), "second"}, {"sum"});
  b.Output("sum");
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 8, 8}, 3)}}, "Conv,Conv,Add");
}

TEST_F(Fusion, ProducerReadTwiceIsNotFused) {
  ModelBuilder b({2, 3, 8, 8});
  const std::string conv = b.Conv("x", 3, 4, 3, Pads(1));
  b.Add("Add", {conv, b.Unary("Relu", conv)}, {"sum"});
  b.Output("sum");
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 8, 8}, 4)}}, "Conv,Relu,Add");

  ModelBuilder g({8, 6});
  const std::string linear = g.Linear("x", 6, 6);
  g.Add("Mul", {linear, g.Unary("Relu", linear)}, {"product"});
  g.Output("product");
  ExpectFusion(g.model, {{"x", RandomFloats({8, 6}, 6)}}, "Gemm,Relu,Mul");

  ModelBuilder n({2, 3, 6, 6});  // BatchNorm beside another reader of the Conv
  const std::string shared = n.Conv("x", 3, 4, 3, Pads(1));
  n.Add("Add", {n.BatchNorm(shared, 4), shared}, {"sum"});
  n.Output("sum");
  ExpectFusion(n.model, {{"x", RandomFloats({2, 3, 6, 6}, 8)}}, "Conv,BatchNormalization,Add");
}

TEST_F(Fusion, GraphOutputIsNotFused) {
  ModelBuilder b({2, 3, 8, 8});
  const std::string conv = b.Conv("x", 3, 4, 3, Pads(1));
  b.Output(b.Unary("Relu", conv));
  b.Output(conv);
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 8, 8}, 4)}}, "Conv,Relu");

  ModelBuilder n({2, 3, 8, 8});
  const std::string normalized_conv = n.Conv("x", 3, 4, 3, Pads(1));
  n.Output(n.BatchNorm(normalized_conv, 4));
  n.Output(normalized_conv);
  ExpectFusion(n.model, {{"x", RandomFloats({2, 3, 8, 8}, 4)}}, "Conv,BatchNormalization");
}

TEST_F(Fusion, BatchNormWithParametersAFeedCanChangeIsNotFolded) {
  ModelBuilder b({2, 3, 8, 8});
  const std::string bn = b.BatchNorm(b.Conv("x", 3, 4, 3, Pads(1)), 4);
  b.Overridable(bn + ".mean");
  b.Output(bn);
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 8, 8}, 4)}, {bn + ".mean", RandomFloats({4}, 12)}},
               "Conv,BatchNormalization");

  ModelBuilder w({2, 3, 8, 8});  // a Conv weight a feed can change: the BatchNormalization stays, the Relu joins it
  const std::string conv = w.Conv("x", 3, 4, 3, Pads(1));
  w.Overridable(conv + ".w");
  w.Output(w.Unary("Relu", w.BatchNorm(conv, 4)));
  ExpectFusion(w.model, {{"x", RandomFloats({2, 3, 8, 8}, 4)}, {conv + ".w", RandomFloats({4, 3, 3, 3}, 13)}},
               "Conv,BatchNormalizationRelu");
}

TEST_F(Fusion, TrainingModeBatchNormIsNotFolded) {
  ModelBuilder b({4, 3, 8, 8}, /*opset=*/15);
  b.Output(b.BatchNorm(b.Conv("x", 3, 4, 3, Pads(1)), 4, {{"training_mode", Attribute::Int(1)}}));
  ExpectFusion(b.model, {{"x", RandomFloats({4, 3, 8, 8}, 4)}}, "Conv,BatchNormalization");

  ModelBuilder s({4, 3, 8, 8}, /*opset=*/15);  // training mode declared by its statistics outputs
  const std::string bn = s.BatchNorm(s.Conv("x", 3, 4, 3, Pads(1)), 4, {{"training_mode", Attribute::Int(1)}});
  s.model.graph.nodes.back().outputs = {bn, "running_mean", "running_var"};
  s.Output(bn);
  s.Output("running_mean");
  ExpectFusion(s.model, {{"x", RandomFloats({4, 3, 8, 8}, 4)}}, "Conv,BatchNormalization");
}

// ORT's eeg_cnn training graph has frozen Conv -> Relu layers whose Conv output nothing else reads:
// they fuse there too, and the loss and every gradient stay as they were.
TEST_F(Fusion, AppliesInOrtTrainingGraph) {
  const std::filesystem::path path = std::filesystem::path(EDGETRAIN_ORT_ARTIFACTS) / "eeg_cnn" / "training_model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is missing";
  const Model model = LoadModel(path.string(), RuntimeImportOptions());
  std::map<std::string, Tensor> feeds;
  uint64_t seed = 20;
  for (const ValueInfo& in : model.graph.inputs) {
    if (model.graph.IsInitializer(in.name)) continue;
    Shape shape;
    for (const Dim& d : in.shape) shape.push_back(d.known() ? d.value : 4);
    if (in.dtype == DataType::kFloat32) {
      feeds[in.name] = RandomFloats(shape, seed++);
    } else if (in.dtype == DataType::kInt64) {
      feeds[in.name] = Tensor::Zeros(DataType::kInt64, shape);
    } else if (in.dtype == DataType::kBool) {
      feeds[in.name] = Tensor::FromVector<bool>({true}, shape);  // lazy_reset_grad
    }
  }
  Session fused(model);
  size_t fused_convs = 0;  // Conv -> Relu -> MaxPool whose Indices nothing reads
  for (const Node& n : fused.model().graph.nodes) fused_convs += n.op_type == "ConvReluMaxPool";
  EXPECT_EQ(fused_convs, 3u) << OpTypes(fused);
  ExpectFusion(model, feeds, OpTypes(fused));
}

AttributeMap Pool(int64_t kernel, int64_t stride, AttributeMap more = {}) {
  more["kernel_shape"] = Attribute::Ints({kernel, kernel});
  more["strides"] = Attribute::Ints({stride, stride});
  return more;
}

AttributeMap Perm(std::vector<int64_t> perm) { return {{"perm", Attribute::Ints(std::move(perm))}}; }

TEST_F(Fusion, MatMulReadsTransposedWeightsInPlace) {
  ModelBuilder b({2, 3, 4});  // a 3-D activation times a weight stored [out, in], as PyTorch exports Linear
  b.Initializer("w", {5, 4});
  b.Overridable("w");  // a trainable weight is fed, so its Transpose is not folded to a constant
  b.Add("Transpose", {"w"}, {"wt"}, Perm({1, 0}));
  b.Add("MatMul", {"x", "wt"}, {"y"});
  b.Output("y");
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 4}, 7)}, {"w", RandomFloats({5, 4}, 8)}}, "FusedMatMul");
  b.Add("MatMul", {"wt", "wt2"}, {"z"});  // transposed on the left too: w^T [4, 5] x wt2 [5, 2]
  b.Initializer("wt2", {5, 2});
  b.Overridable("wt2");
  b.Output("z");
  ExpectFusion(b.model,
               {{"x", RandomFloats({2, 3, 4}, 7)}, {"w", RandomFloats({5, 4}, 8)}, {"wt2", RandomFloats({5, 2}, 9)}},
               "FusedMatMul,FusedMatMul");
}

TEST_F(Fusion, TransposeOfTransposeIsReadPastAndGemmWritesTheTransposedProduct) {
  ModelBuilder b({6, 3});
  b.Initializer("w", {6, 4});
  b.Overridable("w");
  b.Add("Transpose", {"w"}, {"wt"}, Perm({1, 0}));
  b.Add("Transpose", {"wt"}, {"wtt"}, Perm({1, 0}));
  b.Add("Gemm", {"x", "wtt"}, {"p"}, {{"transA", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}});
  b.Add("Transpose", {"p"}, {"y"}, Perm({1, 0}));  // (0.5 x^T w)^T = 0.5 w^T x: one Gemm
  b.Output("y");
  ExpectFusion(b.model, {{"x", RandomFloats({6, 3}, 3)}, {"w", RandomFloats({6, 4}, 4)}}, "Gemm");
}

TEST_F(Fusion, GemmReadPastTwoTransposesKeepsItsOutput) {
  ModelBuilder b({6, 3});
  b.Initializer("w", {6, 4});
  b.Overridable("w");
  b.Add("Gemm", {"x", "w"}, {"p"}, {{"transA", Attribute::Int(1)}});
  b.Add("Transpose", {"p"}, {"pt"}, Perm({1, 0}));
  b.Add("Transpose", {"pt"}, {"ptt"}, Perm({1, 0}));  // the Relu reads p itself: the Gemm must keep writing p
  b.Output(b.Unary("Relu", "ptt"));
  ExpectFusion(b.model, {{"x", RandomFloats({6, 3}, 3)}, {"w", RandomFloats({6, 4}, 4)}}, "Gemm,Relu");
}

TEST_F(Fusion, TransposesOthersReadStay) {
  ModelBuilder b({2, 4});
  b.Initializer("w", {5, 4});
  b.Overridable("w");
  b.Add("Transpose", {"w"}, {"wt"}, Perm({1, 0}));
  b.Add("Transpose", {"wt"}, {"wtt"}, Perm({1, 0}));
  b.Add("MatMul", {"x", "wt"}, {"y"});
  b.Output("y");
  b.Output("wtt");  // a graph output keeps its Transpose
  b.Add("Gemm", {"x", "wt", "c"}, {"g"});
  b.Initializer("c", {2, 5});
  b.Add("Transpose", {"g"}, {"gt"}, Perm({1, 0}));  // a Gemm with C keeps its Transpose
  b.Output("gt");
  b.Add("Transpose", {"y"}, {"yt"}, Perm({1, 0}));
  b.Add("Transpose", {"yt"}, {"ytt"}, Perm({0, 1}));  // not a 2-D swap: stays
  b.Output("ytt");
  ExpectFusion(b.model, {{"x", RandomFloats({2, 4}, 5)}, {"w", RandomFloats({5, 4}, 6)}},
               "Transpose,Transpose,FusedMatMul,Gemm,Transpose,Transpose,Transpose");
}

TEST_F(Fusion, ConvReluMaxPoolAsLeNetHasIt) {
  ModelBuilder b({5, 1, 28, 28});  // LeNet's first layer, its BatchNorm folded first
  const std::string first =
      b.Unary("MaxPool", b.Unary("Relu", b.BatchNorm(b.Conv("x", 1, 6, 5, Pads(2)), 6)), Pool(2, 2));
  b.Output(b.Unary("MaxPool", b.Unary("Relu", b.Conv(first, 6, 16, 5, {})), Pool(2, 2)));
  for (int threads : {1, 2})
    ExpectFusion(b.model, {{"x", RandomFloats({5, 1, 28, 28}, 21)}}, "ConvReluMaxPool,ConvReluMaxPool", threads);
}

TEST_F(Fusion, ConvReluMaxPoolWithOverlappingPaddedAndCeilWindows) {
  const std::vector<AttributeMap> pools = {
      Pool(3, 1, {{"pads", Attribute::Ints({1, 1, 1, 1})}}),
      Pool(2, 2, {{"ceil_mode", Attribute::Int(1)}}),  // 11 rows: the last window half outside
      Pool(2, 2),                                      // 11 rows: the last row is left out
      Pool(2, 1, {{"dilations", Attribute::Ints({2, 2})}}),
  };
  for (const auto& pool : pools) {
    ModelBuilder b({2, 4, 11, 11});
    AttributeMap conv = Pads(1);
    conv["group"] = Attribute::Int(2);
    b.Output(b.Unary("MaxPool", b.Unary("Relu", b.Conv("x", 4, 8, 3, conv)), pool));
    ExpectFusion(b.model, {{"x", RandomFloats({2, 4, 11, 11}, 22)}}, "ConvReluMaxPool");
  }
}

TEST_F(Fusion, ConvReluMaxPoolNeedsUnreadIndicesAndReluOutput) {
  ModelBuilder b({2, 3, 8, 8});  // Indices read: the Relu still fuses into the Conv
  b.Add("MaxPool", {b.Unary("Relu", b.Conv("x", 3, 4, 3, Pads(1)))}, {"pooled", "indices"}, Pool(2, 2));
  b.Output("pooled");
  b.model.graph.outputs.push_back(ValueInfoOf("indices", DataType::kInt64, {}));
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 8, 8}, 23)}}, "FusedConv,MaxPool");

  ModelBuilder r({2, 3, 8, 8});  // the Relu's output read by another node
  const std::string relu = r.Unary("Relu", r.Conv("x", 3, 4, 3, Pads(1)));
  r.Output(r.Unary("MaxPool", relu, Pool(2, 2)));
  r.Output(r.Unary("Sigmoid", relu));
  ExpectFusion(r.model, {{"x", RandomFloats({2, 3, 8, 8}, 24)}}, "FusedConv,MaxPool,Sigmoid");
}

// SiLU as PyTorch exports it, Mul(x, Sigmoid(x)) in either order, runs as one ai.edgetrain.Silu pass.
TEST_F(Fusion, SigmoidTimesItsInputFusesIntoSilu) {
  ModelBuilder b({3, 5, 7, 3});
  b.Output(b.Add("Mul", {"x", b.Unary("Sigmoid", "x")}, {"silu"}).outputs[0]);
  const std::string conv = b.Conv("x", 5, 4, 1, {});
  b.Output(b.Add("Mul", {b.Unary("Sigmoid", conv), conv}, {"silu_conv"}).outputs[0]);
  ExpectFusion(b.model, {{"x", RandomFloats({3, 5, 7, 3}, 27, -12.0, 12.0)}}, "Silu,Conv,Silu");
}

// Not where another node (or the graph) reads the Sigmoid, nor where the Mul's other factor is not its input.
TEST_F(Fusion, SiluNeedsTheSigmoidReadOnlyByTheMulOfItsInput) {
  ModelBuilder b({2, 3, 5});
  const std::string s = b.Unary("Sigmoid", "x");
  b.Output(b.Add("Mul", {"x", s}, {"silu"}).outputs[0]);
  b.Output(s);
  const std::string t = b.Unary("Sigmoid", "x");
  b.Output(b.Add("Mul", {t, t}, {"square"}).outputs[0]);
  const std::string u = b.Unary("Sigmoid", b.Unary("Neg", "x"));
  b.Output(b.Add("Mul", {"x", u}, {"gate"}).outputs[0]);
  ExpectFusion(b.model, {{"x", RandomFloats({2, 3, 5}, 28, -4.0, 4.0)}}, "Sigmoid,Mul,Sigmoid,Mul,Neg,Sigmoid,Mul");
}

// The gradient of a tensor cut into slices along one axis and put back in another order (PyTorch's LSTM
// and GRU exports reorder their gates so): SliceGrads that tile the axis, summed, become one Concat.
struct SliceGradPiece {
  int64_t start, end, step = 1;
  const char* domain = kEdgetrainDomain;
};
// x [6, 4] split into rows [0, 2), [2, 5), [5, 6); each piece goes to its SliceGrad; their Sum is the output.
ModelBuilder SummedSliceGrads(const std::vector<SliceGradPiece>& pieces, int64_t axis = 0,
                              bool piece_also_output = false) {
  ModelBuilder b({6, 4});
  b.model.opsets = {{"", 17}, {kEdgetrainDomain, 1}, {kMicrosoftDomain, 1}};
  auto ints = [&](const std::string& name, std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    b.model.graph.initializers[name] = Tensor::FromVector<int64_t>(std::move(v), {n});
    return name;
  };
  b.Add("Split", {"x", ints("sizes", {2, 3, 1})}, {"p0", "p1", "p2"});
  std::vector<std::string> grads;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const std::string id = std::to_string(k);
    Node& grad = b.Add("SliceGrad",
                       {"p" + id, ints("shape", {6, 4}), ints("starts" + id, {pieces[k].start}),
                        ints("ends" + id, {pieces[k].end}), ints("axes" + id, {axis}),
                        ints("steps" + id, {pieces[k].step})},
                       {"g" + id});
    grad.domain = pieces[k].domain;
    grad.opset = 1;
    grads.push_back(grad.outputs[0]);
  }
  b.Output(b.Add("Sum", grads, {"sum"}).outputs[0]);
  if (piece_also_output) b.Output(grads[0]);
  return b;
}

TEST_F(Fusion, SummedSliceGradientsThatTileAnAxisBecomeOneConcat) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({6, 4}, 41)}};
  // p0 (2 rows) lands at rows 3-4, p1 (3 rows) at 0-2, p2 at the last row: written as -1 to "past the end".
  const int64_t past_end = std::numeric_limits<int64_t>::max();
  ExpectFusion(SummedSliceGrads({{3, 5}, {0, 3, 1, kMicrosoftDomain}, {-1, past_end}}).model, feeds, "Split,Concat");
  SessionOptions fuse;
  const Tensor sum = Session(SummedSliceGrads({{3, 5}, {0, 3}, {5, 6}}).model, fuse).Run(feeds).at(0);
  const std::vector<double> x = feeds.at("x").ToDoubleVector(), y = sum.ToDoubleVector();
  ASSERT_EQ(y.size(), x.size());
  for (size_t r = 0; r < 6; ++r)  // the rows of x in the order p1, p0, p2
    for (size_t c = 0; c < 4; ++c) {
      const size_t from = r < 3 ? r + 2 : r < 5 ? r - 3 : 5;
      EXPECT_EQ(y[r * 4 + c], x[from * 4 + c]) << "row " << r;
    }
}

TEST_F(Fusion, SliceGradientsStaySummedUnlessTheyTileTheAxisAlone) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({6, 4}, 42)}};
  const std::string unfused = "Split,SliceGrad,SliceGrad,SliceGrad,Sum";
  SCOPED_TRACE("a gap, an overlap, a step of 2, a piece read by the graph too");
  ExpectFusion(SummedSliceGrads({{4, 6}, {0, 3}, {5, 6}}).model, feeds, unfused);
  ExpectFusion(SummedSliceGrads({{2, 4}, {0, 3}, {5, 6}}).model, feeds, unfused);
  ExpectFusion(SummedSliceGrads({{3, 5}, {0, 3}, {5, 6, 2}}).model, feeds, unfused);
  ExpectFusion(SummedSliceGrads({{3, 5}, {0, 3}, {5, 6}}, 0, true).model, feeds, unfused);
  ModelBuilder fed = SummedSliceGrads({{3, 5}, {0, 3}, {5, 6}});
  fed.Overridable("starts1");  // a feed may change where a piece goes
  ExpectFusion(fed.model, feeds, unfused);
}

// `fused` written out and read back by an importer without ai.edgetrain kernels, which inlines those nodes'
// function bodies, in a session that fuses nothing: what any other runtime would run.
Session InlinedEdgetrainOps(Model fused) {
  fused.opsets[kEdgetrainDomain] = 1;
  const std::string bytes = SerializeModel(fused, ExecutionExportOptions());
  ImportOptions inline_edgetrain;
  inline_edgetrain.has_kernel = [](const std::string& domain, const std::string&, int64_t) {
    return domain != kEdgetrainDomain;
  };
  SessionOptions plain;
  plain.fuse_operators = false;
  return Session(LoadModelFromBuffer(bytes.data(), bytes.size(), "inlined", ".", inline_edgetrain), plain);
}

// Training-mode BatchNormalization (its running statistics read too) with ReLU or ReLU6-style Clip after it, an
// inference one with a Clip of only a max, and a training one with SiLU (Mul and Sigmoid, as PyTorch exports it): each
// runs as one node, with the same bits as unfused (SiLU within float rounding: the fused exp is the vectorised
// polynomial in plain code, the Sigmoid kernel's in intrinsics, which the compiler contracts differently).
ModelBuilder BatchNormActivations() {
  ModelBuilder b({2, 6, 5, 7});
  auto scalar = [&](const std::string& name, float v) {
    b.model.graph.initializers[name] = Tensor::Scalar<float>(v);
    return name;
  };
  auto bn = [&](const std::string& name, bool training, std::vector<std::string> outputs) {
    AttributeMap attrs;
    if (training) attrs["training_mode"] = Attribute::Int(1);
    b.Add("BatchNormalization",
          {"x", b.Initializer(name + ".scale", {6}, true), b.Initializer(name + ".bias", {6}),
           b.Initializer(name + ".mean", {6}), b.Initializer(name + ".var", {6}, true)},
          outputs, attrs);
    return outputs[0];
  };
  b.Output(b.Unary("Relu", bn("bn1", true, {"y1", "mean1", "var1"})));
  b.Output("mean1");
  b.Output("var1");
  b.Output(b.Add("Clip", {bn("bn2", true, {"y2"}), scalar("low", -0.25f), scalar("high", 0.5f)}, {"c2"}).outputs[0]);
  b.Output(b.Add("Clip", {bn("bn3", false, {"y3"}), "", scalar("top", 0.75f)}, {"c3"}).outputs[0]);
  const std::string y4 = bn("bn4", true, {"y4"});
  b.Output(b.Add("Mul", {y4, b.Unary("Sigmoid", y4)}, {"silu4"}).outputs[0]);
  return b;
}

TEST_F(Fusion, BatchNormFollowedByReluOrClipRunsAsOneNode) {
  const ModelBuilder b = BatchNormActivations();
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 51, -2.0, 2.0)}};
  ExpectFusion(b.model, feeds,
               "BatchNormalizationRelu,BatchNormalizationClip,BatchNormalizationClip,BatchNormalizationSilu");
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    SessionOptions plain;
    plain.fuse_operators = false;
    const std::vector<Tensor> expected = Session(b.model, plain).Run(feeds), actual = Session(b.model).Run(feeds);
    ASSERT_EQ(actual.size(), 6u);
    for (size_t k = 0; k < 5; ++k)
      EXPECT_EQ(actual[k].ToDoubleVector(), expected[k].ToDoubleVector()) << "output " << k;
    ExpectTensorNear(actual[5], expected[5], 1e-6, "SiLU output");
  }
}

// Not where the graph also reads the normalized values, nor where a Clip bound is made by a node (it would be
// read before it is made), nor for a BatchNormalization with saved statistics (opset 9's five outputs).
TEST_F(Fusion, BatchNormActivationNeedsItsOutputReadOnlyByTheActivation) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 52, -2.0, 2.0)}};
  ModelBuilder read_twice = BatchNormActivations();
  read_twice.Output("y1");
  read_twice.Output("y4");
  ExpectFusion(read_twice.model, feeds,
               "BatchNormalization,Relu,BatchNormalizationClip,BatchNormalizationClip,BatchNormalization,Silu");
  ModelBuilder computed_bound = BatchNormActivations();
  std::vector<Node>& nodes = computed_bound.model.graph.nodes;
  nodes[3].inputs[2] = "computed_high";  // bn2's Clip: max = Abs(high), a node between the two
  Node abs;
  abs.name = "abs";
  abs.op_type = "Abs";
  abs.inputs = {"high"};
  abs.outputs = {"computed_high"};
  nodes.insert(nodes.begin() + 3, abs);
  computed_bound.Overridable("high");  // not folded into a constant
  std::map<std::string, Tensor> with_high = feeds;
  with_high["high"] = Tensor::Scalar<float>(0.5f);
  ExpectFusion(computed_bound.model, with_high,
               "BatchNormalizationRelu,BatchNormalization,Abs,Clip,BatchNormalizationClip,BatchNormalizationSilu");

  ModelBuilder saved({2, 6, 5, 7}, 9);
  saved.Add("BatchNormalization",
            {"x", saved.Initializer("s", {6}, true), saved.Initializer("b", {6}), saved.Initializer("m", {6}),
             saved.Initializer("v", {6}, true)},
            {"y", "rm", "rv", "sm", "sv"});
  saved.Output(saved.Unary("Relu", "y"));
  saved.Output("sv");
  ExpectFusion(saved.model, feeds, "BatchNormalization,Relu");
}

// The fused nodes written out carry their definition in standard ops; a runtime that inlines them computes what
// the kernels do. Clip bounds that are not single values of X's type are an error naming the node and the bound.
TEST_F(Fusion, BatchNormActivationFunctionBodiesMatchKernelsAndCheckTheBounds) {
  const Model fused = Session(BatchNormActivations().model).model();
  ASSERT_EQ(OpTypes(Session(fused)),
            "BatchNormalizationRelu,BatchNormalizationClip,BatchNormalizationClip,BatchNormalizationSilu");
  Session inlined = InlinedEdgetrainOps(fused);
  EXPECT_EQ(OpTypes(inlined),
            "BatchNormalization,Relu,BatchNormalization,Clip,BatchNormalization,Clip,BatchNormalization,Sigmoid,Mul");
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 53, -2.0, 2.0)}};
  Model bad_bound = fused;
  bad_bound.graph.initializers["high"] = Tensor::FromVector<float>({0.5f, 0.6f}, {2});
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    const std::vector<Tensor> expected = inlined.Run(feeds), actual = Session(fused).Run(feeds);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k)
      ExpectTensorNear(actual[k], expected[k], 1e-5, "output " + std::to_string(k));
    Session bad(bad_bound);
    EXPECT_ERROR(bad.Run(feeds), ErrorCode::kInvalidArgument, "'max' must be a single float32 value, got float32 [2]");
    EXPECT_ERROR(bad.Run(feeds), ErrorCode::kInvalidArgument, "(ai.edgetrain.BatchNormalizationClip)");
  }
}

// Training-mode BatchNormalizations (plain, Relu, Clip) and the copies that generate-artifacts' recompute writes of
// them (the same X, scale, B and bounds; running statistics of their own, their updates unread).
ModelBuilder BatchNormRecomputations(float copy_epsilon = 1e-5f, bool copy_statistics_read = false) {
  ModelBuilder b({2, 6, 5, 7});
  b.model.graph.initializers["low"] = Tensor::Scalar<float>(-0.25f);
  b.model.graph.initializers["high"] = Tensor::Scalar<float>(0.5f);
  const std::vector<std::string> ops = {"", "Relu", "Clip"};
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string p = "bn" + std::to_string(k), scale = b.Initializer(p + ".scale", {6}, true),
                      bias = b.Initializer(p + ".bias", {6});
    auto bn = [&](const std::string& y, std::vector<std::string> statistics, float epsilon) {
      b.Add("BatchNormalization", {"x", scale, bias, statistics[0], statistics[1]},
            {y, y + ".running_mean", y + ".running_var"},
            {{"training_mode", Attribute::Int(1)}, {"epsilon", Attribute::Float(epsilon)}});
      if (ops[k].empty()) return y;
      if (ops[k] == "Relu") return b.Unary("Relu", y);
      return b.Add("Clip", {y, "low", "high"}, {y + ".clip"}).outputs[0];
    };
    b.Output(bn(p, {b.Initializer(p + ".mean", {6}), b.Initializer(p + ".var", {6}, true)}, 1e-5f));
    b.Output(p + ".running_mean");
    const std::string neg = b.Unary("Neg", scale), abs = b.Unary("Abs", scale);
    b.Output(b.Unary("Sigmoid", bn(p + "_recomputed", {neg, abs}, copy_epsilon)));
    if (copy_statistics_read) b.Output(p + "_recomputed.running_var");
  }
  return b;
}

// Each copy runs as ai.edgetrain.ChannelAffine of X and the map its original applied (the original's output 5):
// the same bits as the copy recomputing the statistics, on both kernel backends.
TEST_F(Fusion, RecomputedBatchNormAppliesTheOriginalsAffineMap) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 54, -2.0, 2.0)}};
  const ModelBuilder b = BatchNormRecomputations();
  const std::string fused_ops =
      "BatchNormalization,ChannelAffine,Sigmoid,BatchNormalizationRelu,ChannelAffine,Sigmoid,"
      "BatchNormalizationClip,ChannelAffine,Sigmoid";
  ExpectFusion(b.model, feeds, fused_ops);
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    SessionOptions plain;
    plain.fuse_operators = false;
    Session fused(b.model);
    const std::vector<Tensor> expected = Session(b.model, plain).Run(feeds), actual = fused.Run(feeds);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k)
      EXPECT_EQ(actual[k].ToDoubleVector(), expected[k].ToDoubleVector()) << "output " << k;
    const Node& relu_copy = fused.model().graph.nodes[4];
    EXPECT_EQ(relu_copy.GetString("activation", ""), "Relu");
    EXPECT_EQ(relu_copy.inputs.at(1), fused.model().graph.nodes[3].outputs.at(5));
  }
  // Not for a copy with another epsilon, nor one whose running statistics are read (the Neg and Abs of a
  // constant scale are folded).
  const std::string unshared =
      "BatchNormalization,BatchNormalization,Sigmoid,BatchNormalizationRelu,BatchNormalizationRelu,Sigmoid,"
      "BatchNormalizationClip,BatchNormalizationClip,Sigmoid";
  ExpectFusion(BatchNormRecomputations(1e-3f).model, feeds, unshared);
  ExpectFusion(BatchNormRecomputations(1e-5f, true).model, feeds, unshared);
}

// The backward of a recomputed Conv-BN-activation, as generate-artifacts writes it: the forward BatchNormalization
// with Relu (or Clip), its recomputed copy, the activation's gradient of dY at the copy's output and
// BatchNormalizationGrad of that. `copy_read_elsewhere` keeps the copy's output as a graph output too;
// `gradient_read_twice` makes the activation's gradient a graph output.
ModelBuilder BatchNormActivationBackward(bool clip, bool copy_read_elsewhere, bool gradient_read_twice = false) {
  ModelBuilder b({2, 6, 5, 7});
  b.model.opsets[kEdgetrainDomain] = 1;
  b.model.graph.inputs.push_back(ValueInfoOf("dy", DataType::kFloat32, {2, 6, 5, 7}));
  b.model.graph.initializers["low"] = Tensor::Scalar<float>(-0.25f);
  b.model.graph.initializers["high"] = Tensor::Scalar<float>(0.5f);
  const std::string scale = b.Initializer("scale", {6}, true), bias = b.Initializer("bias", {6});
  auto bn = [&](const std::string& y, const std::string& mean, const std::string& var) {
    b.Add("BatchNormalization", {"x", scale, bias, mean, var}, {y, y + ".running_mean", y + ".running_var"},
          {{"training_mode", Attribute::Int(1)}});
    return clip ? b.Add("Clip", {y, "low", "high"}, {y + ".act"}).outputs[0] : b.Unary("Relu", y);
  };
  b.Output(bn("y", b.Initializer("mean", {6}), b.Initializer("var", {6}, true)));
  const std::string copy = bn("y_recomputed", b.Unary("Neg", scale), b.Unary("Abs", scale));
  std::vector<std::string> grad_inputs = {"dy", copy};
  if (clip) grad_inputs.insert(grad_inputs.end(), {"low", "high"});
  b.Add(clip ? "ClipGrad" : "ReluGrad", grad_inputs, {"dact"}).domain = kEdgetrainDomain;
  b.Add("BatchNormalizationGrad", {"dact", "x", scale}, {"dx", "dscale", "dbias"},
        {{"epsilon", Attribute::Float(1e-5f)}})
      .domain = kEdgetrainDomain;
  for (const char* out : {"dx", "dscale", "dbias"}) b.Output(out);
  if (copy_read_elsewhere) b.Output(copy);
  if (gradient_read_twice) b.Output("dact");
  return b;
}

// The activation's gradient goes into BatchNormalizationGrad, its mask taken from X and the forward's map: the
// same bits as unfused, on both kernel backends; the recomputed copy goes too when nothing else reads it.
TEST_F(Fusion, ActivationGradientJoinsBatchNormGrad) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 56, -2.0, 2.0)},
                                               {"dy", RandomFloats({2, 6, 5, 7}, 57)}};
  for (bool clip : {false, true}) {
    const std::string forward = clip ? "BatchNormalizationClip" : "BatchNormalizationRelu";
    ExpectFusion(BatchNormActivationBackward(clip, false).model, feeds,
                 forward + ",BatchNormalizationActivationGrad");
    ExpectFusion(BatchNormActivationBackward(clip, true).model, feeds,
                 forward + ",ChannelAffine,BatchNormalizationActivationGrad");
    ExpectFusion(BatchNormActivationBackward(clip, false, true).model, feeds,
                 forward + ",ChannelAffine," + (clip ? "ClipGrad" : "ReluGrad") + ",BatchNormalizationGrad");
    const Model model = BatchNormActivationBackward(clip, true).model;
    for (KernelBackend backend : Backends()) {
      SetKernelBackend(backend);
      SessionOptions plain;
      plain.fuse_operators = false;
      Session fused(model);
      const std::vector<Tensor> expected = Session(model, plain).Run(feeds), actual = fused.Run(feeds);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t k = 0; k < expected.size(); ++k)
        EXPECT_EQ(actual[k].ToDoubleVector(), expected[k].ToDoubleVector()) << "output " << k << " clip " << clip;
    }
  }
}

// SiLU's backward as generate-artifacts writes it: the forward BatchNormalization and SiLU (Mul and Sigmoid), a
// plain recomputed copy, SiLU again on the copy (its output a graph output here, as the next layer's ConvGrad reads
// it), SiluGrad of dY at the copy's output and BatchNormalizationGrad of that. `gradient_read_twice` makes SiluGrad's
// output a graph output too.
ModelBuilder BatchNormSiluBackward(bool gradient_read_twice) {
  ModelBuilder b({2, 6, 5, 7});
  b.model.opsets[kEdgetrainDomain] = 1;
  b.model.graph.inputs.push_back(ValueInfoOf("dy", DataType::kFloat32, {2, 6, 5, 7}));
  const std::string scale = b.Initializer("scale", {6}, true), bias = b.Initializer("bias", {6});
  auto bn = [&](const std::string& y, const std::string& mean, const std::string& var) {
    b.Add("BatchNormalization", {"x", scale, bias, mean, var}, {y, y + ".running_mean", y + ".running_var"},
          {{"training_mode", Attribute::Int(1)}});
    return y;
  };
  auto silu = [&](const std::string& v) { return b.Add("Mul", {v, b.Unary("Sigmoid", v)}, {v + ".silu"}).outputs[0]; };
  b.Output(silu(bn("y", b.Initializer("mean", {6}), b.Initializer("var", {6}, true))));
  const std::string copy = bn("y_recomputed", b.Unary("Neg", scale), b.Unary("Abs", scale));
  b.Output(silu(copy));
  b.Add("SiluGrad", {"dy", copy}, {"dact"}).domain = kEdgetrainDomain;
  b.Add("BatchNormalizationGrad", {"dact", "x", scale}, {"dx", "dscale", "dbias"},
        {{"epsilon", Attribute::Float(1e-5f)}})
      .domain = kEdgetrainDomain;
  for (const char* out : {"dx", "dscale", "dbias"}) b.Output(out);
  if (gradient_read_twice) b.Output("dact");
  return b;
}

// The plain copy of a BatchNormalizationSilu shares its map; SiluGrad goes into BatchNormalizationGrad, its slope taken
// from X and the map, and the copy's SiLU into its ChannelAffine: the results within float rounding of unfused
// (ExpectFusion, both kernel backends).
TEST_F(Fusion, SiluGradientJoinsBatchNormGradAndTheRecomputedSiluItsMap) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 61, -3.0, 3.0)},
                                               {"dy", RandomFloats({2, 6, 5, 7}, 62)}};
  const Model model = BatchNormSiluBackward(false).model;
  ExpectFusion(model, feeds, "BatchNormalizationSilu,ChannelAffine,BatchNormalizationActivationGrad");
  ExpectFusion(BatchNormSiluBackward(true).model, feeds,
               "BatchNormalizationSilu,ChannelAffine,Silu,SiluGrad,BatchNormalizationGrad");
  const Session fused(model);
  const std::vector<Node>& nodes = fused.model().graph.nodes;
  EXPECT_EQ(nodes.at(1).GetString("activation", ""), "Silu");
  EXPECT_EQ(nodes.at(1).inputs.at(1), nodes.at(0).outputs.at(5));
  EXPECT_EQ(nodes.at(2).GetString("activation", ""), "Silu");
}

// A training BatchNormalization ("", "Relu", "Clip" or "Silu" after it) feeding a grouped 3x3 Conv, and the backward that
// generate-artifacts writes for it: the recomputed copy and ConvGrad of dZ at the copy's output. `y_read_elsewhere`
// makes the normalized Y a graph output too, `copy_read_elsewhere` the copy's.
ModelBuilder BatchNormGroupedConv(const std::string& activation, int64_t stride, int64_t group,
                                  bool y_read_elsewhere = false, bool copy_read_elsewhere = false,
                                  bool backward = true) {
  const Shape x_shape = {2, 6, 9, 11};
  ModelBuilder b(x_shape);
  b.model.opsets[kEdgetrainDomain] = 1;
  if (backward)
    b.model.graph.inputs.push_back(
        ValueInfoOf("dz", DataType::kFloat32, {2, 6, (9 - 1) / stride + 1, (11 - 1) / stride + 1}));
  b.model.graph.initializers["low"] = Tensor::Scalar<float>(-0.25f);
  b.model.graph.initializers["high"] = Tensor::Scalar<float>(0.5f);
  const std::string scale = b.Initializer("scale", {6}, true), bias = b.Initializer("bias", {6});
  auto bn = [&](const std::string& y, const std::string& mean, const std::string& var) {
    b.Add("BatchNormalization", {"x", scale, bias, mean, var}, {y, y + ".running_mean", y + ".running_var"},
          {{"training_mode", Attribute::Int(1)}});
    if (activation.empty()) return y;
    if (activation == "Relu") return b.Unary("Relu", y);
    if (activation == "Silu") return b.Add("Mul", {y, b.Unary("Sigmoid", y)}, {y + ".act"}).outputs[0];
    return b.Add("Clip", {y, "low", "high"}, {y + ".act"}).outputs[0];
  };
  const std::string y = bn("y", b.Initializer("mean", {6}), b.Initializer("var", {6}, true));
  const AttributeMap conv = {{"group", Attribute::Int(group)},
                             {"strides", Attribute::Ints({stride, stride})},
                             {"pads", Attribute::Ints({1, 1, 1, 1})}};
  const std::string w = b.Initializer("w", {6, 6 / group, 3, 3});
  b.Add("Conv", {y, w}, {"z"}, conv);
  b.Output("z");
  b.Output("y.running_mean");
  if (y_read_elsewhere) b.Output(y);
  if (!backward) return b;
  const std::string copy = bn("y_recomputed", b.Unary("Neg", scale), b.Unary("Abs", scale));
  b.Add("ConvGrad", {"dz", copy, w}, {"dy", "dw", ""}, conv).domain = kEdgetrainDomain;
  b.Output("dy");
  b.Output("dw");
  if (copy_read_elsewhere) b.Output(copy);
  return b;
}

// A depthwise Conv and its ConvGrad read the normalized X through the forward's map, which the direct kernels apply as
// they read each plane: Y and its recomputed copy are never stored, and the results are the same bits as unfused, on
// both kernel backends (SiLU within float rounding, as above). Not where something else reads Y or the copy, nor for
// an ungrouped Conv. A forward alone (a frozen backbone with training-mode BatchNorm) folds too: the BatchNormalization
// gains the map output.
TEST_F(Fusion, BatchNormMapFoldsIntoGroupedConv) {
  for (const std::string activation : {"", "Relu", "Clip", "Silu"})
    for (int64_t stride : {1, 2}) {
      const std::string label = "activation '" + activation + "' stride " + std::to_string(stride);
      const std::map<std::string, Tensor> feeds = {
          {"x", RandomFloats({2, 6, 9, 11}, 58, -2.0, 2.0)},
          {"dz", RandomFloats({2, 6, (9 - 1) / stride + 1, (11 - 1) / stride + 1}, 59)}};
      const std::string bn = activation.empty() ? "BatchNormalization" : "BatchNormalization" + activation;
      const Model model = BatchNormGroupedConv(activation, stride, 6).model;
      ExpectFusion(model, feeds, bn + ",ChannelAffineConv,ChannelAffineConvGrad");
      ExpectFusion(BatchNormGroupedConv(activation, stride, 3).model, feeds,
                   bn + ",ChannelAffineConv,ChannelAffineConvGrad");  // grouped, not depthwise: X mapped first
      ExpectFusion(BatchNormGroupedConv(activation, stride, 6, true).model, feeds,
                   bn + ",Conv,ChannelAffineConvGrad");
      ExpectFusion(BatchNormGroupedConv(activation, stride, 6, false, true).model, feeds,
                   bn + ",ChannelAffineConv,ChannelAffine,ConvGrad");
      ExpectFusion(BatchNormGroupedConv(activation, stride, 1).model, feeds, bn + ",Conv,ChannelAffine,ConvGrad");
      const Model forward = BatchNormGroupedConv(activation, stride, 6, false, false, false).model;
      const std::map<std::string, Tensor> forward_feeds = {{"x", feeds.at("x")}};
      ExpectFusion(forward, forward_feeds, bn + ",ChannelAffineConv");
      for (KernelBackend backend : Backends()) {
        SetKernelBackend(backend);
        SessionOptions plain;
        plain.fuse_operators = false;
        for (const auto& [m, f, what] :
             {std::tuple{&model, &feeds, ""}, std::tuple{&forward, &forward_feeds, " forward"}}) {
          const std::vector<Tensor> expected = Session(*m, plain).Run(*f), actual = Session(*m).Run(*f);
          ASSERT_EQ(actual.size(), expected.size());
          for (size_t k = 0; k < expected.size(); ++k) {
            const std::string at = label + what + " output " + std::to_string(k);
            if (activation == "Silu") ExpectTensorNear(actual[k], expected[k], 1e-5, at);
            else EXPECT_EQ(actual[k].ToDoubleVector(), expected[k].ToDoubleVector()) << at;
          }
        }
      }
    }
}

// The gradient at a squeeze-excitation block's input as generate-artifacts writes it: Sum(Mul(dY, S), Expand(G,
// Shape(X))), S and G per (image, channel). `mul_read`/`expand_read` make the Mul's/Expand's output a graph output too;
// `third` gives the Sum a third input.
ModelBuilder ScaledPlusPooled(bool mul_read = false, bool expand_read = false, bool third = false) {
  ModelBuilder b({2, 6, 5, 7});
  b.model.graph.inputs.push_back(ValueInfoOf("dy", DataType::kFloat32, {2, 6, 5, 7}));
  b.model.graph.inputs.push_back(ValueInfoOf("s", DataType::kFloat32, {2, 6, 1, 1}));
  b.model.graph.inputs.push_back(ValueInfoOf("g", DataType::kFloat32, {2, 6, 1, 1}));
  const std::string scaled = b.Add("Mul", {"dy", "s"}, {"scaled"}).outputs[0];
  const std::string pooled = b.Add("Expand", {"g", b.Unary("Shape", "x")}, {"pooled"}).outputs[0];
  std::vector<std::string> terms = {pooled, scaled};
  if (third) terms.push_back("dy");
  b.Output(b.Add("Sum", terms, {"dx"}).outputs[0]);
  if (mul_read) b.Output(scaled);
  if (expand_read) b.Output(pooled);
  return b;
}

// Sum(Mul(A, B), Expand(C, shape)) runs as one ai.edgetrain.MulAdd pass; not where something else reads the product
// or the expanded C, nor for a Sum of three. MulAdd broadcasts as the three ops do, `shape` included.
TEST_F(Fusion, ScaledPlusExpandedBecomesMulAdd) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 6, 5, 7}, 63)},
                                               {"dy", RandomFloats({2, 6, 5, 7}, 64)},
                                               {"s", RandomFloats({2, 6, 1, 1}, 65)},
                                               {"g", RandomFloats({2, 6, 1, 1}, 66)}};
  ExpectFusion(ScaledPlusPooled().model, feeds, "Shape,MulAdd");
  ExpectFusion(ScaledPlusPooled(true).model, feeds, "Mul,Shape,Expand,Sum");
  ExpectFusion(ScaledPlusPooled(false, true).model, feeds, "Mul,Shape,Expand,Sum");
  ExpectFusion(ScaledPlusPooled(false, false, true).model, feeds, "Mul,Shape,Expand,Sum");
  // Every operand broadcast: [6, 1] * [1, 5] + [1] expanded to [2, 1, 1], then to [2, 6, 5].
  ModelBuilder wide({6, 1});
  wide.model.graph.inputs.push_back(ValueInfoOf("row", DataType::kFloat32, {1, 5}));
  wide.model.graph.inputs.push_back(ValueInfoOf("c", DataType::kFloat32, {1}));
  wide.model.graph.inputs.push_back(ValueInfoOf("shape", DataType::kInt64, {3}));
  const std::string product = wide.Add("Mul", {"x", "row"}, {"product"}).outputs[0];
  wide.Output(wide.Add("Sum", {product, wide.Add("Expand", {"c", "shape"}, {"e"}).outputs[0]}, {"y"}).outputs[0]);
  ExpectFusion(wide.model, {{"x", RandomFloats({6, 1}, 67)}, {"row", RandomFloats({1, 5}, 68)},
                            {"c", RandomFloats({1}, 69)}, {"shape", Tensor::FromVector<int64_t>({2, 1, 1}, {3})}},
               "MulAdd");
}

// MulAdd's inputs: one float type, a 1-D int64 shape, shapes that broadcast; errors name the node.
TEST_F(Fusion, MulAddChecksItsInputs) {
  auto model = [](DataType c_type, DataType shape_type, const Shape& shape_dims, int64_t dim = 1) {
    ModelBuilder b({2, 3, 4});
    b.model.opsets[kEdgetrainDomain] = 1;
    b.model.graph.initializers["s"] = RandomFloats({2, 3, 1}, 70);
    b.model.graph.initializers["c"] = c_type == DataType::kFloat32 ? RandomFloats({2, 3, 1}, 71)
                                                                   : Tensor::FromVector<double>({1, 2, 3, 4, 5, 6}, {2, 3, 1});
    b.model.graph.initializers["shape"] = shape_type == DataType::kInt64
                                              ? Tensor::FromVector<int64_t>(Int64Vector(NumElements(shape_dims), dim), shape_dims)
                                              : Tensor::FromVector<float>(std::vector<float>(NumElements(shape_dims), 1.0f), shape_dims);
    b.Add("MulAdd", {"x", "s", "c", "shape"}, {"y"}).domain = kEdgetrainDomain;
    b.Output("y");
    return b.model;
  };
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 3, 4}, 72)}};
  const std::vector<Tensor> y = Session(model(DataType::kFloat32, DataType::kInt64, {1})).Run(feeds);
  EXPECT_EQ(y.at(0).shape(), (Shape{2, 3, 4}));
  const std::string node = "node 'MulAdd0' (ai.edgetrain.MulAdd)";
  EXPECT_ERROR(Session(model(DataType::kFloat64, DataType::kInt64, {1})).Run(feeds), ErrorCode::kInvalidArgument,
               node + ": A, B and C types float32, float32 and float64 differ");
  EXPECT_ERROR(Session(model(DataType::kFloat32, DataType::kFloat32, {1})).Run(feeds), ErrorCode::kInvalidArgument,
               node + ": input shape must be a 1-D int64 tensor, got float32 [1]");
  EXPECT_ERROR(Session(model(DataType::kFloat32, DataType::kInt64, {1, 1})).Run(feeds), ErrorCode::kInvalidArgument,
               node + ": input shape must be a 1-D int64 tensor, got int64 [1, 1]");
  EXPECT_ERROR(Session(model(DataType::kFloat32, DataType::kInt64, {3}, 2)).Run(feeds), ErrorCode::kInvalidArgument,
               node + ": input shapes [2, 3, 4], [2, 3, 1], [2, 3, 1], [2, 2, 2] cannot be broadcast together");
}

// Dropout(X, ratio, training_mode) and the DropoutGrad of its mask, as generate-artifacts writes them; `mask_read`
// makes the mask a graph output too. A negative ratio leaves the ratio input out, a missing mode the mode input.
ModelBuilder DropoutAndGrad(float ratio, std::optional<bool> training, bool mask_read = false) {
  ModelBuilder b({3, 5});
  b.model.opsets[kEdgetrainDomain] = 1;
  b.model.graph.inputs.push_back(ValueInfoOf("dy", DataType::kFloat32, {3, 5}));
  b.model.graph.initializers["ratio"] = Tensor::Scalar<float>(ratio < 0 ? 0.5f : ratio);
  b.model.graph.initializers["mode"] = Tensor::Scalar<bool>(training.value_or(false));
  const std::string r = ratio < 0 ? "" : "ratio", mode = training ? "mode" : "";
  std::vector<std::string> inputs = {"x", r, mode};
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  b.Add("Dropout", inputs, {"y", "mask"});
  b.Add("DropoutGrad", {"dy", "mask", "ratio", "mode"}, {"dx"}).domain = kEdgetrainDomain;
  b.Output("y");
  b.Output("dx");
  if (mask_read) b.Output("mask");
  return b;
}

// A Dropout that drops nothing (ratio 0, or not in training mode) and its gradient become Identity: the same bits, and
// no mask. Not for a Dropout that drops, nor where the mask is read elsewhere.
TEST_F(Fusion, DropoutThatDropsNothingBecomesIdentity) {
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({3, 5}, 61)}, {"dy", RandomFloats({3, 5}, 62)}};
  for (const auto& [ratio, training] :
       std::vector<std::pair<float, std::optional<bool>>>{{0.0f, true}, {0.5f, false}, {0.5f, std::nullopt}}) {
    const Model model = DropoutAndGrad(ratio, training).model;
    ExpectFusion(model, feeds, "Identity,Identity");
    SessionOptions plain;
    plain.fuse_operators = false;
    const std::vector<Tensor> expected = Session(model, plain).Run(feeds), actual = Session(model).Run(feeds);
    for (size_t k = 0; k < expected.size(); ++k)
      EXPECT_EQ(actual[k].ToDoubleVector(), expected[k].ToDoubleVector()) << "ratio " << ratio << " output " << k;
    EXPECT_EQ(actual[0].ToDoubleVector(), feeds.at("x").ToDoubleVector());
    EXPECT_EQ(actual[1].ToDoubleVector(), feeds.at("dy").ToDoubleVector());
  }
  ExpectFusion(DropoutAndGrad(0.25f, true).model, feeds, "Dropout,DropoutGrad");
  ExpectFusion(DropoutAndGrad(0.0f, true, true).model, feeds, "Dropout,DropoutGrad");
  // The gradient of a Dropout whose ratio is fed, not constant, stays too.
  Model fed = DropoutAndGrad(0.0f, true).model;
  fed.graph.inputs.push_back(ValueInfoOf("ratio", DataType::kFloat32, {}));
  std::map<std::string, Tensor> with_ratio = feeds;
  with_ratio["ratio"] = Tensor::Scalar<float>(0.0f);
  Session fed_session(fed);
  EXPECT_EQ(OpTypes(fed_session), "Dropout,DropoutGrad");
  EXPECT_EQ(fed_session.Run(with_ratio).at(1).ToDoubleVector(), feeds.at("dy").ToDoubleVector());
}

// ChannelAffineConv and ChannelAffineConvGrad check their map and activation as ChannelAffine does.
TEST_F(Fusion, ChannelAffineConvChecksItsMapAndActivation) {
  auto model = [](bool grad, const Shape& affine_shape, const std::string& activation) {
    ModelBuilder b({2, 3, 4, 4});
    b.model.opsets[kEdgetrainDomain] = 1;
    const std::string w = b.Initializer("w", {3, 1, 3, 3}), affine = b.Initializer("affine", affine_shape);
    const AttributeMap attributes = {{"group", Attribute::Int(3)}, {"pads", Attribute::Ints({1, 1, 1, 1})}};
    Node& n = grad ? b.Add("ChannelAffineConvGrad", {"x", "x", w, affine}, {"dx", "dw", ""}, attributes)
                   : b.Add("ChannelAffineConv", {"x", w, "", affine}, {"dx"}, attributes);
    n.domain = kEdgetrainDomain;
    if (!activation.empty()) n.attributes["activation"] = Attribute::String(activation);
    b.Output("dx");
    return b.model;
  };
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 3, 4, 4}, 60)}};
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    for (bool grad : {false, true}) {
      const std::string node = grad ? "node 'ChannelAffineConvGrad0' (ai.edgetrain.ChannelAffineConvGrad)"
                                    : "node 'ChannelAffineConv0' (ai.edgetrain.ChannelAffineConv)";
      EXPECT_EQ(Session(model(grad, {2, 3}, "Relu")).Run(feeds).at(0).shape(), (Shape{2, 3, 4, 4}));
      EXPECT_ERROR(Session(model(grad, {3}, "")).Run(feeds), ErrorCode::kInvalidArgument,
                   node + ": input affine must be float32 [2, 3], got float32 [3]");
      EXPECT_ERROR(Session(model(grad, {2, 3}, "Gelu")).Run(feeds), ErrorCode::kInvalidArgument,
                   node + ": attribute activation must be \"\", \"Relu\", \"Clip\" or \"Silu\", got \"Gelu\"");
    }
  }
}

// ChannelAffine's map must be X's type and [2, C], its activation none, Relu, Clip or Silu: errors naming the node.
TEST_F(Fusion, ChannelAffineChecksItsMapAndActivation) {
  auto model = [](const Shape& affine_shape, const std::string& activation) {
    ModelBuilder b({2, 3, 4, 4});
    b.model.opsets[kEdgetrainDomain] = 1;
    Node& n = b.Add("ChannelAffine", {"x", b.Initializer("affine", affine_shape)}, {"y"});
    n.domain = kEdgetrainDomain;
    if (!activation.empty()) n.attributes["activation"] = Attribute::String(activation);
    b.Output("y");
    return b.model;
  };
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 3, 4, 4}, 55)}};
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    const Model relu = model({2, 3}, "Relu");
    const std::vector<Tensor> y = Session(relu).Run(feeds);
    const std::vector<double> x = feeds.at("x").ToDoubleVector(),
                              a = relu.graph.initializers.at("affine").ToDoubleVector(), got = y.at(0).ToDoubleVector();
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = i / 16 % 3;
      EXPECT_NEAR(got[i], std::max(0.0, x[i] * a[c] + a[3 + c]), 1e-6) << i;
    }
    EXPECT_ERROR(Session(model({3}, "")).Run(feeds), ErrorCode::kInvalidArgument,
                 "node 'ChannelAffine0' (ai.edgetrain.ChannelAffine): input affine must be float32 [2, 3], got "
                 "float32 [3]");
    EXPECT_ERROR(Session(model({2, 4}, "")).Run(feeds), ErrorCode::kInvalidArgument, "got float32 [2, 4]");
    EXPECT_ERROR(Session(model({2, 3}, "Tanh")).Run(feeds), ErrorCode::kInvalidArgument,
                 "attribute activation must be \"\", \"Relu\", \"Clip\" or \"Silu\", got \"Tanh\"");
    ModelBuilder rank1({3});
    rank1.model.opsets[kEdgetrainDomain] = 1;
    rank1.Add("ChannelAffine", {"x", rank1.Initializer("affine", {2, 3})}, {"y"}).domain = kEdgetrainDomain;
    rank1.Output("y");
    EXPECT_ERROR(Session(rank1.model).Run({{"x", RandomFloats({3}, 65)}}), ErrorCode::kInvalidArgument,
                 "(ai.edgetrain.ChannelAffine): input X must have rank >= 2, got shape [3]");
  }
}

// BatchNormalizationActivationGrad checks its map the same way, and needs an activation to gate dY with.
TEST_F(Fusion, BatchNormalizationActivationGradChecksItsMapAndActivation) {
  auto model = [](const Shape& affine_shape, const std::string& activation) {
    ModelBuilder b({2, 3, 4, 4});
    b.model.opsets[kEdgetrainDomain] = 1;
    b.model.graph.inputs.push_back(ValueInfoOf("dy", DataType::kFloat32, {2, 3, 4, 4}));
    Node& n = b.Add("BatchNormalizationActivationGrad",
                    {"dy", "x", b.Initializer("scale", {3}, true), b.Initializer("affine", affine_shape)},
                    {"dx", "dscale", "dbias"});
    n.domain = kEdgetrainDomain;
    if (!activation.empty()) n.attributes["activation"] = Attribute::String(activation);
    b.Output("dx");
    return b.model;
  };
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 3, 4, 4}, 58)},
                                               {"dy", RandomFloats({2, 3, 4, 4}, 59)}};
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    EXPECT_EQ(Session(model({2, 3}, "Relu")).Run(feeds).at(0).shape(), (Shape{2, 3, 4, 4}));
    EXPECT_ERROR(Session(model({3, 2}, "Relu")).Run(feeds), ErrorCode::kInvalidArgument,
                 "(ai.edgetrain.BatchNormalizationActivationGrad): input affine must be float32 [2, 3], got float32 "
                 "[3, 2]");
    EXPECT_ERROR(Session(model({2, 3}, "")).Run(feeds), ErrorCode::kInvalidArgument,
                 "attribute activation must be \"Relu\", \"Clip\" or \"Silu\"");
  }
}

// A model that holds ai.edgetrain.ConvReluMaxPool written out carries its definition in standard ops;
// any runtime that inlines it computes what the kernel does.
TEST_F(Fusion, ConvReluMaxPoolFunctionBodyMatchesKernel) {
  ModelBuilder b({2, 4, 10, 10});
  b.Output(b.Unary("MaxPool", b.Unary("Relu", b.Conv("x", 4, 6, 3, Pads(1))),
                   Pool(3, 2, {{"ceil_mode", Attribute::Int(1)}})));
  const Model fused = Session(b.model).model();
  ASSERT_EQ(OpTypes(Session(fused)), "ConvReluMaxPool");
  Session inlined = InlinedEdgetrainOps(fused);
  EXPECT_EQ(OpTypes(inlined), "Conv,Relu,MaxPool");
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 4, 10, 10}, 25)}};
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    const Tensor expected = inlined.Run(feeds)[0], actual = Session(fused).Run(feeds)[0];
    ExpectTensorNear(actual, expected, 1e-5, "ConvReluMaxPool");
  }
}

// A model may hold ai.edgetrain.ConvReluMaxPool itself: a missing or impossible pooling attribute
// is an error that names the node and the attribute, on both backends.
TEST_F(Fusion, ConvReluMaxPoolWithBadPoolingAttributesIsAnError) {
  ModelBuilder b({2, 4, 10, 10});
  b.Output(b.Unary("MaxPool", b.Unary("Relu", b.Conv("x", 4, 6, 3, Pads(1))), Pool(2, 2)));
  const Model fused = Session(b.model).model();
  ASSERT_EQ(fused.graph.nodes.size(), 1u);
  const std::map<std::string, Tensor> feeds = {{"x", RandomFloats({2, 4, 10, 10}, 26)}};
  Model missing = fused, too_large = fused;
  missing.graph.nodes[0].attributes.erase("pool_kernel_shape");
  too_large.graph.nodes[0].attributes["pool_kernel_shape"] = Attribute::Ints({12, 12});
  for (KernelBackend backend : Backends()) {
    SetKernelBackend(backend);
    Session without_kernel(missing), oversized(too_large);
    EXPECT_ERROR(without_kernel.Run(feeds), ErrorCode::kInvalidModel, "attribute 'pool_kernel_shape' is required");
    EXPECT_ERROR(without_kernel.Run(feeds), ErrorCode::kInvalidModel, "(ai.edgetrain.ConvReluMaxPool)");
    EXPECT_ERROR(oversized.Run(feeds), ErrorCode::kInvalidArgument, "kernel extent 12 is larger than the padded input");
  }
}


// LSTM + LSTMGrad in float32 (the fast path: vector gate math; fused, the LSTM hands its gates to the
// LSTMGrad through a fourth output instead of the LSTMGrad running it again) against the same graph in
// float64, which the reference loops compute; sizes where the vector loops have a scalar tail.
struct LstmCase {
  std::string name;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, states = true, full_lengths = false, short_lengths = false, activations = false;
  bool only_parameter_gradients = false;  // dX, d_initial_h and d_initial_c unread: the fused LSTMGrad skips them
  int64_t batch = 3, hidden = 10;
};

Model LstmWithGradient(const LstmCase& k, DataType dtype, const std::map<std::string, Tensor>& feeds) {
  Model model;
  model.source = "lstm fast path test";
  model.opsets = {{"", 14}};
  for (const auto& [name, t] : feeds) model.graph.inputs.push_back(ValueInfoOf(name, t.dtype(), t.shape()));
  Node lstm;
  lstm.name = "lstm";
  lstm.op_type = "LSTM";
  lstm.inputs = {"x", "w", "r", k.bias ? "b" : "", k.full_lengths || k.short_lengths ? "lens" : "",
                 k.states ? "h0" : "", k.states ? "c0" : ""};
  lstm.outputs = {"y", "y_h", "y_c"};
  lstm.attributes = {{"hidden_size", Attribute::Int(k.hidden)}, {"direction", Attribute::String(k.direction)},
                     {"layout", Attribute::Int(k.layout)}};
  if (k.activations) {
    Attribute names;
    names.kind = Attribute::Kind::kStrings;
    names.strings = {"Sigmoid", "Tanh", "Tanh"};
    lstm.attributes["activations"] = names;
  }
  Node grad = lstm;
  grad.name = "lstm_grad";
  grad.op_type = "LSTMGrad";
  grad.domain = kEdgetrainDomain;
  grad.opset = 1;
  grad.inputs.resize(8);
  grad.inputs.insert(grad.inputs.end(), {"dy", "dy_h", "dy_c"});
  grad.outputs = {"dx", "dw", "dr", "db", "dh0", "dc0", "dp"};
  model.graph.nodes = {lstm, grad};
  for (const char* name : {"y", "y_h", "y_c", "dx", "dw", "dr", "db", "dh0", "dc0"})
    if (!k.only_parameter_gradients || (name[0] != 'd' || name[1] == 'w' || name[1] == 'r' || name[1] == 'b'))
      model.graph.outputs.push_back(ValueInfoOf(name, dtype, {}));
  return model;
}

TEST(RecurrentFastPath, LstmFloat32MatchesFloat64ReferenceWithAndWithoutKeptTrace) {
  const std::vector<LstmCase> cases = {
      {"forward", "forward", 0, true, true},
      {"defaults", "forward", 0, false, false},
      {"reverse_layout1", "reverse", 1, true, true, true},
      {"bidirectional", "bidirectional", 0, true, false, false, false, true},
      {"bidirectional_layout1", "bidirectional", 1, false, true},
      {"short_lengths_reference", "bidirectional", 0, true, true, false, true},
      {"parameter_gradients_only", "bidirectional", 1, true, true, false, false, false, true},
      // Batch 1, and 4H = 268 past the GEMM's depth block (two K panels of R packed for dh).
      {"batch1_hidden67", "bidirectional", 0, true, true, false, false, false, false, 1, 67},
      {"batch7_hidden17_layout1", "reverse", 1, true, false, false, false, false, false, 7, 17},
  };
  const int64_t seq = 5, input = 4;
  struct Restore {
    KernelBackend saved = ActiveKernelBackend();
    ~Restore() { SetKernelBackend(saved); }
  } restore;
  for (const auto& [k, backend] : [&] {
         std::vector<std::pair<LstmCase, KernelBackend>> runs;  // oneDNN's sgemm or our own on R packed once
         for (const LstmCase& k : cases)
           for (KernelBackend backend : Backends()) runs.emplace_back(k, backend);
         return runs;
       }()) {
    SCOPED_TRACE(k.name + (backend == KernelBackend::kDnnl ? " (oneDNN)" : " (own kernels)"));
    SetKernelBackend(backend);
    const int64_t batch = k.batch, hidden = k.hidden;
    const int64_t dirs = k.direction == "bidirectional" ? 2 : 1;
    const Shape x_shape = k.layout ? Shape{batch, seq, input} : Shape{seq, batch, input};
    const Shape y_shape = k.layout ? Shape{batch, seq, dirs, hidden} : Shape{seq, dirs, batch, hidden};
    const Shape state = k.layout ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
    std::map<std::string, Tensor> doubles = {
        {"x", RandomTensor(x_shape, 1, -2, 2)},       {"w", RandomTensor({dirs, 4 * hidden, input}, 2)},
        {"r", RandomTensor({dirs, 4 * hidden, hidden}, 3)}, {"dy", RandomTensor(y_shape, 4)},
        {"dy_h", RandomTensor(state, 5)},              {"dy_c", RandomTensor(state, 6)}};
    if (k.bias) doubles["b"] = RandomTensor({dirs, 8 * hidden}, 7);
    if (k.states) {
      doubles["h0"] = RandomTensor(state, 8);
      doubles["c0"] = RandomTensor(state, 9);
    }
    std::map<std::string, Tensor> floats;
    for (const auto& [name, t] : doubles) {
      const std::vector<double> values = t.ToDoubleVector();
      floats[name] = Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), t.shape());
    }
    if (k.full_lengths || k.short_lengths) {
      const Tensor lens = Tensor::FromVector<int32_t>(
          k.short_lengths ? std::vector<int32_t>{5, 2, 0} : std::vector<int32_t>{5, 5, 5}, {batch});
      doubles["lens"] = floats["lens"] = lens;
    }
    const Model model64 = LstmWithGradient(k, DataType::kFloat64, doubles);
    const Model model32 = LstmWithGradient(k, DataType::kFloat32, floats);
    SessionOptions plain;
    plain.fuse_operators = false;
    Session reference(model64), fused(model32), unfused(model32, plain);
    const Node& forward = fused.model().graph.nodes.at(0);
    ASSERT_EQ(forward.outputs.size(), 4u) << k.name << ": the LSTM keeps its trace for the LSTMGrad";
    if (k.only_parameter_gradients) {
      EXPECT_TRUE(fused.model().graph.nodes.at(1).outputs.at(0).empty()) << "dX is read by nothing: not computed";
    }
    Model traced = fused.model();  // the fused graph with the trace as an output too
    traced.graph.outputs.push_back(ValueInfoOf(forward.outputs[3], DataType::kFloat32, {}));
    const Tensor trace = Session(traced, plain).Run(floats, {forward.outputs[3]}).at(0);
    EXPECT_EQ(trace.numel(), k.short_lengths ? 0 : dirs * seq * batch * (7 * hidden + input + 1)) << k.name;
    const std::vector<Tensor> expected = reference.Run(doubles), kept = fused.Run(floats), again = unfused.Run(floats);
    ASSERT_EQ(kept.size(), expected.size());
    // The fused run writes the gate gradients over the trace, its last reader. With the trace also a graph
    // output, the LSTMGrad must leave it whole: the forward's own trace, and the same gradients.
    Model forward_only = traced;
    forward_only.graph.nodes.resize(1);
    forward_only.graph.outputs = {traced.graph.outputs.back()};
    const Tensor alone = Session(forward_only, plain).Run(floats).at(0);
    const std::vector<Tensor> with_trace = Session(traced, plain).Run(floats);
    ASSERT_EQ(with_trace.size(), kept.size() + 1);
    EXPECT_EQ(with_trace.back().ToDoubleVector(), alone.ToDoubleVector()) << k.name << ": the fetched trace";
    for (size_t i = 0; i < kept.size(); ++i)
      EXPECT_EQ(with_trace[i].ToDoubleVector(), kept[i].ToDoubleVector()) << k.name << " output " << i;
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string label = k.name + " output " + model32.graph.outputs[i].name;
      ExpectValuesNear(kept[i], expected[i].shape(), expected[i].ToDoubleVector(), 2e-5, label + " (trace kept)");
      ExpectValuesNear(again[i], expected[i].shape(), expected[i].ToDoubleVector(), 2e-5, label + " (recomputed)");
    }
  }
}

// PyTorch's batch_first exports feed the LSTM a Transpose of X, and autodiff's recompute pass gives the
// LSTMGrad its own copy of that Transpose: still one pair (the trace kept, the copy gone), with the same
// values as without fusion; a Transpose of another input is another value (no pair).
TEST(RecurrentFastPath, LstmGradReadingARecomputedTransposeOfXKeepsTheTrace) {
  const int64_t seq = 5, batch = 3, input = 4, hidden = 10;
  LstmCase k;
  std::map<std::string, Tensor> feeds = {
      {"x", RandomFloats({batch, seq, input}, 31)},       {"w", RandomFloats({1, 4 * hidden, input}, 32)},
      {"r", RandomFloats({1, 4 * hidden, hidden}, 33)},   {"b", RandomFloats({1, 8 * hidden}, 34)},
      {"h0", RandomFloats({1, batch, hidden}, 35)},       {"c0", RandomFloats({1, batch, hidden}, 36)},
      {"dy", RandomFloats({seq, 1, batch, hidden}, 37)},  {"dy_h", RandomFloats({1, batch, hidden}, 38)},
      {"dy_c", RandomFloats({1, batch, hidden}, 39)}};
  feeds["x2"] = RandomFloats({batch, seq, input}, 40);
  auto with_transposes = [&](const std::string& grad_x) {
    Model model = LstmWithGradient(k, DataType::kFloat32, feeds);
    Node t, copy;
    t.op_type = copy.op_type = "Transpose";
    t.inputs = {"x"};
    copy.inputs = {grad_x};
    t.outputs = {"xt"};
    copy.outputs = {"xt_recomputed"};
    t.attributes["perm"] = copy.attributes["perm"] = Attribute::Ints({1, 0, 2});
    model.graph.nodes[0].inputs[0] = "xt";
    model.graph.nodes[1].inputs[0] = "xt_recomputed";
    model.graph.nodes.insert(model.graph.nodes.begin(), {t, copy});
    return model;
  };
  SessionOptions plain;
  plain.fuse_operators = false;
  const Model model = with_transposes("x");
  Session fused(model), unfused(model, plain);
  const Graph& g = fused.model().graph;
  ASSERT_EQ(g.nodes.size(), 3u) << "the recomputed Transpose is read by nothing once the LSTMGrad reads xt";
  EXPECT_EQ(g.nodes.at(1).outputs.size(), 4u) << "the LSTM keeps its trace";
  EXPECT_EQ(g.nodes.at(2).inputs.at(0), "xt");
  const std::vector<Tensor> expected = unfused.Run(feeds), actual = fused.Run(feeds);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    ExpectTensorNear(actual[i], expected[i], 1e-5, model.graph.outputs[i].name);
  const Model other = with_transposes("x2");
  Session unpaired(other), unpaired_plain(other, plain);
  ASSERT_EQ(unpaired.model().graph.nodes.size(), 4u);
  EXPECT_EQ(unpaired.model().graph.nodes.at(2).outputs.size(), 3u) << "no pair: the LSTMGrad runs the forward";
  const std::vector<Tensor> expected2 = unpaired_plain.Run(feeds), actual2 = unpaired.Run(feeds);
  for (size_t i = 0; i < expected2.size(); ++i)
    ExpectTensorNear(actual2[i], expected2[i], 1e-5, other.graph.outputs[i].name + " (unpaired)");
}

// PyTorch's `rnn(x)[0][:, -1]`: the Gather of Y's last step through Squeeze and Transpose reads Y_h
// unsqueezed on the time axis instead (ReadLastRecurrentStepFromFinalState, run by generate-artifacts), with
// the same values; every graph where that would change a result, or where Y is read otherwise, stays.
struct LastStepCase {
  std::string name;
  std::string op = "LSTM", direction = "forward";
  int64_t layout = 0, index = -1, gather_axis = 1;
  bool squeeze_axes = true, lengths = false, y_is_output = false, y_h_output = true;
  bool rewritten = true;
};

Model LastStepModel(const LastStepCase& k, int64_t seq, int64_t batch, int64_t input, int64_t hidden) {
  const int64_t gates = k.op == "LSTM" ? 4 : k.op == "GRU" ? 3 : 1;
  ModelBuilder b(k.layout ? Shape{batch, seq, input} : Shape{seq, batch, input});
  Node& rnn = b.Add(k.op, {"x", b.Initializer("w", {1, gates * hidden, input}),
                           b.Initializer("r", {1, gates * hidden, hidden}),
                           b.Initializer("b", {1, 2 * gates * hidden}), k.lengths ? "lens" : ""},
                    {"y", k.y_h_output ? "y_h" : ""},
                    {{"hidden_size", Attribute::Int(hidden)}, {"direction", Attribute::String(k.direction)},
                     {"layout", Attribute::Int(k.layout)}});
  if (k.lengths) {
    b.model.graph.initializers["lens"] = Tensor::FromVector<int32_t>(std::vector<int32_t>(batch, seq), {batch});
  } else {
    rnn.inputs.resize(4);
  }
  // Y [seq, 1, batch, H] (layout 1: [batch, seq, 1, H]) -> Squeeze the direction axis -> batch first -> Gather.
  std::vector<std::string> squeeze_inputs = {"y"};
  if (k.squeeze_axes) squeeze_inputs.push_back(b.model.graph.initializers.emplace(
      "dir_axis", Tensor::FromVector<int64_t>({k.layout ? 2 : 1}, {1})).first->first);
  b.Add("Squeeze", squeeze_inputs, {"y_squeezed"});
  std::string seq_last = "y_squeezed";
  if (!k.layout) {
    b.Add("Transpose", {"y_squeezed"}, {"y_batch_first"}, {{"perm", Attribute::Ints({1, 0, 2})}});
    seq_last = "y_batch_first";
  }
  Node constant;
  constant.op_type = "Constant";
  constant.outputs = {"index"};
  constant.attributes["value"] = Attribute::TensorValue(Tensor::FromVector<int64_t>({k.index}, {}));
  b.model.graph.nodes.push_back(constant);
  b.Add("Gather", {seq_last, "index"}, {"last"}, {{"axis", Attribute::Int(k.gather_axis)}});
  b.Output(b.Linear("last", hidden, 3));
  if (k.y_is_output) b.Output("y");
  return b.model;
}

TEST(LastRecurrentStep, GatherOfTheLastStepReadsTheFinalState) {
  const int64_t seq = 6, batch = 3, input = 5, hidden = 4;
  const std::vector<LastStepCase> cases = {
      {"lstm"},
      {"gru_layout1", "GRU", "forward", 1},
      {"rnn_static_last_index", "RNN", "forward", 0, seq - 1},
      {"lstm_reverse_first_step", "LSTM", "reverse", 0, 0},
      {"lstm_without_y_h", "LSTM", "forward", 0, -1, 1, true, false, false, false},
      {"first_step_stays", "LSTM", "forward", 0, 0, 1, true, false, false, true, false},
      {"reverse_last_step_stays", "LSTM", "reverse", 0, -1, 1, true, false, false, true, false},
      {"batch_axis_stays", "LSTM", "forward", 0, -1, 0, true, false, false, true, false},
      {"squeeze_of_every_unit_axis_stays", "LSTM", "forward", 0, -1, 1, false, false, false, true, false},
      {"sequence_lens_stays", "LSTM", "forward", 0, -1, 1, true, true, false, true, false},
      {"y_read_elsewhere_stays", "LSTM", "forward", 0, -1, 1, true, false, true, true, false},
  };
  for (const LastStepCase& k : cases) {
    SCOPED_TRACE(k.name);
    const Model original = LastStepModel(k, seq, batch, input, hidden);
    Model rewritten = original;
    EXPECT_EQ(ReadLastRecurrentStepFromFinalState(rewritten.graph, 17), k.rewritten ? 1u : 0u);
    const Node* rnn = nullptr;
    for (const Node& n : rewritten.graph.nodes)
      if (n.op_type == k.op) rnn = &n;
    ASSERT_NE(rnn, nullptr);
    EXPECT_EQ(rnn->outputs.at(0).empty(), k.rewritten) << "Y is not written once the chain reads Y_h";
    if (k.rewritten) {
      ASSERT_GE(rnn->outputs.size(), 2u);
      EXPECT_FALSE(rnn->outputs[1].empty());
    }
    const Shape x_shape = k.layout ? Shape{batch, seq, input} : Shape{seq, batch, input};
    const std::map<std::string, Tensor> feeds = {{"x", RandomFloats(x_shape, 21)}};
    const std::vector<Tensor> expected = Session(original).Run(feeds), actual = Session(rewritten).Run(feeds);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) ExpectTensorNear(actual[i], expected[i], 0.0, "output " + std::to_string(i));
  }
  // A value of the chain that generate-artifacts was asked for (an additional output) keeps its meaning.
  for (const char* requested : {"y", "y_squeezed", "y_batch_first"}) {
    Model model = LastStepModel(cases.front(), seq, batch, input, hidden);
    EXPECT_EQ(ReadLastRecurrentStepFromFinalState(model.graph, 17, {requested}), 0u) << requested;
  }
}

}  // namespace
}  // namespace edgetrain::testing
