// Gemm and MatMul in float32 on each kernel backend against the float64 reference kernels on the
// same values. The rows cover the oneDNN paths (a linear layer with its bias fused; batched MatMul
// with broadcast batch dims) and the shapes that fall back beside them (A transposed, alpha != 1,
// a bias that is not a row, a batch of fewer than 8 rows).
#include <gtest/gtest.h>

#include "core/kernel_backend.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain::testing {
namespace {

Tensor ToFloat32(const Tensor& t) {
  const std::vector<double> values = t.ToDoubleVector();
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), t.shape());
}

struct ProductRow {
  std::string name;
  OneNode node;  // float64 inputs
};
void PrintTo(const ProductRow& row, std::ostream* os) { *os << row.name; }

OneNode Gemm(Shape a, Shape b, Shape c, AttributeMap attributes) {
  std::vector<Tensor> inputs = {RandomTensor(a, 1), RandomTensor(b, 2)};
  if (!c.empty()) inputs.push_back(RandomTensor(c, 3));
  return OnnxNode("Gemm", inputs, std::move(attributes));
}

OneNode MatMul(Shape a, Shape b) { return OnnxNode("MatMul", {RandomTensor(a, 4), RandomTensor(b, 5)}, {}); }

class ProductBackends : public ::testing::TestWithParam<ProductRow> {
 protected:
  void TearDown() override { SetKernelBackend(DnnlAvailable() ? KernelBackend::kDnnl : KernelBackend::kReference); }
};

TEST_P(ProductBackends, Float32MatchesFloat64OnEachBackend) {
  const OneNode& node = GetParam().node;
  SetKernelBackend(KernelBackend::kReference);
  const Tensor expected = RunOneNodeValues(node)[0].tensor;
  OneNode float32 = node;
  for (NodeInput& input : float32.inputs) input.tensor = ToFloat32(input.tensor);
  for (KernelBackend backend : {KernelBackend::kReference, KernelBackend::kDnnl}) {
    if (backend == KernelBackend::kDnnl && !DnnlAvailable()) continue;
    SetKernelBackend(backend);
    const Tensor actual = RunOneNodeValues(float32)[0].tensor;
    ExpectValuesNear(actual, expected.shape(), expected.ToDoubleVector(), 1e-4,
                     backend == KernelBackend::kDnnl ? "oneDNN" : "reference");
  }
}

TEST(KernelBackend, AskingForOneDnnWithoutItIsAnError) {
  if (DnnlAvailable()) {
    SetKernelBackend(KernelBackend::kDnnl);
    EXPECT_TRUE(UseDnnl());
    return;
  }
  try {
    SetKernelBackend(KernelBackend::kDnnl);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("this build of edgetrain has no oneDNN kernels"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(UseDnnl());
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ProductBackends,
    ::testing::Values(
        ProductRow{"LinearWithBiasRow", Gemm({64, 33}, {17, 33}, {17}, {{"transB", Attribute::Int(1)}})},
        ProductRow{"LinearBTransposedNoBias", Gemm({16, 40}, {40, 9}, {}, {})},
        ProductRow{"LinearBiasAsOneRow", Gemm({12, 7}, {7, 5}, {1, 5}, {})},
        ProductRow{"FullBiasFallsBack", Gemm({12, 7}, {7, 5}, {12, 5}, {})},
        ProductRow{"ScalarBiasFallsBack", Gemm({12, 7}, {7, 5}, {1}, {})},
        ProductRow{"ATransposedFallsBack", Gemm({7, 12}, {7, 5}, {5}, {{"transA", Attribute::Int(1)}})},
        ProductRow{"AlphaBetaFallBack",
                   Gemm({12, 7}, {7, 5}, {5}, {{"alpha", Attribute::Float(2.0f)}, {"beta", Attribute::Float(0.5f)}})},
        ProductRow{"FewRowsFallBack", Gemm({4, 30}, {30, 6}, {6}, {})},
        ProductRow{"MatMulBatched", MatMul({3, 8, 16}, {3, 16, 5})},
        ProductRow{"MatMulBroadcastBatch", MatMul({2, 3, 8, 16}, {3, 16, 5})},
        ProductRow{"MatMulBroadcastOnes", MatMul({2, 1, 8, 16}, {1, 4, 16, 5})},
        ProductRow{"MatMulOneMatrixB", MatMul({4, 8, 16}, {16, 5})}),
    [](const ::testing::TestParamInfo<ProductRow>& info) { return info.param.name; });

// A linear layer Y = X W^T + b whose W is an initializer (a constant the oneDNN path packs once per
// node) or, with `overridable`, also a graph input a feed may replace on any run.
Model LinearModel(bool overridable) {
  Model m;
  m.source = "linear";
  m.opsets = {{"", 17}};
  m.graph.inputs.push_back(ValueInfoOf("x", DataType::kFloat32, {-1, 24}));
  m.graph.initializers["w"] = ToFloat32(RandomTensor({40, 24}, 6));
  m.graph.initializers["b"] = ToFloat32(RandomTensor({40}, 7));
  if (overridable) m.graph.inputs.push_back(ValueInfoOf("w", DataType::kFloat32, {40, 24}));
  Node gemm;
  gemm.name = "linear";
  gemm.op_type = "Gemm";
  gemm.inputs = {"x", "w", "b"};
  gemm.outputs = {"y"};
  gemm.attributes["transB"] = Attribute::Int(1);
  m.graph.nodes.push_back(gemm);
  m.graph.outputs.push_back(ValueInfoOf("y", DataType::kFloat32, {-1, 40}));
  return m;
}

// Y of `model` for `feeds` on the reference kernels (a session of its own).
Tensor ReferenceRun(const Model& model, const std::map<std::string, Tensor>& feeds) {
  SetKernelBackend(KernelBackend::kReference);
  Tensor y = Session(model).Run(feeds)[0];
  SetKernelBackend(KernelBackend::kDnnl);
  return y;
}

class ConstantWeights : public ProductBackends {
 protected:
  void SetUp() override {
    if (!DnnlAvailable()) GTEST_SKIP() << "built without oneDNN";
    SetKernelBackend(KernelBackend::kDnnl);
  }
};

TEST_F(ConstantWeights, PackedOnceAndKeptAcrossBatchSizes) {
  const Model model = LinearModel(false);
  Session session(model);
  for (int64_t batch : {16, 9, 16}) {  // a new batch size makes a new primitive on the packed weights
    const std::map<std::string, Tensor> feeds = {{"x", ToFloat32(RandomTensor({batch, 24}, 8 + batch))}};
    const Tensor expected = ReferenceRun(model, feeds);
    for (int run = 0; run < 2; ++run)
      ExpectTensorNear(session.Run(feeds)[0], expected, 1e-5, "batch " + std::to_string(batch));
  }
}

TEST_F(ConstantWeights, WeightsAFeedReplacesAreNotKept) {
  const Model model = LinearModel(true);
  Session session(model);
  for (uint64_t seed : {10, 11}) {
    const std::map<std::string, Tensor> feeds = {{"x", ToFloat32(RandomTensor({16, 24}, 9))},
                                                 {"w", ToFloat32(RandomTensor({40, 24}, seed))}};
    ExpectTensorNear(session.Run(feeds)[0], ReferenceRun(model, feeds), 1e-5, "seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace edgetrain::testing
