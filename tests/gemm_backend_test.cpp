// Gemm and MatMul in float32 on each kernel backend against the float64 reference kernels on the
// same values. The rows cover the oneDNN paths (a linear layer with its bias fused; batched MatMul
// with broadcast batch dims) and the shapes that fall back beside them (A transposed, alpha != 1,
// a bias that is not a row, a batch of fewer than 8 rows).
#include <gtest/gtest.h>

#include "backend_check.hpp"

namespace edgetrain::testing {
namespace {

OneNode Gemm(Shape a, Shape b, Shape c, AttributeMap attributes) {
  std::vector<Tensor> inputs = {RandomTensor(a, 1), RandomTensor(b, 2)};
  if (!c.empty()) inputs.push_back(RandomTensor(c, 3));
  return OnnxNode("Gemm", inputs, std::move(attributes));
}

OneNode MatMul(Shape a, Shape b) { return OnnxNode("MatMul", {RandomTensor(a, 4), RandomTensor(b, 5)}, {}); }

class ProductBackends : public ::testing::TestWithParam<OpCase> {
 protected:
  void TearDown() override { SetKernelBackend(DnnlAvailable() ? KernelBackend::kDnnl : KernelBackend::kReference); }
};

TEST_P(ProductBackends, Float32MatchesFloat64OnEachBackend) {
  for (KernelBackend backend : {KernelBackend::kReference, KernelBackend::kDnnl}) {
    if (backend == KernelBackend::kDnnl && !DnnlAvailable()) continue;
    CheckBackends(GetParam(), backend, backend == KernelBackend::kDnnl ? "oneDNN" : "reference");
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

OpCase Product(std::string name, OneNode node) {
  return BackendCase(std::move(name), std::move(node), BackendCheck::kFloat32VsFloat64Absolute, 1e-4);
}

}  // namespace

std::vector<OpCase> ProductBackendCases() {
  return {
      Product("LinearWithBiasRow", Gemm({64, 33}, {17, 33}, {17}, {{"transB", Attribute::Int(1)}})),
      Product("LinearBTransposedNoBias", Gemm({16, 40}, {40, 9}, {}, {})),
      Product("LinearBiasAsOneRow", Gemm({12, 7}, {7, 5}, {1, 5}, {})),
      Product("FullBiasFallsBack", Gemm({12, 7}, {7, 5}, {12, 5}, {})),
      Product("ScalarBiasFallsBack", Gemm({12, 7}, {7, 5}, {1}, {})),
      Product("ATransposedFallsBack", Gemm({7, 12}, {7, 5}, {5}, {{"transA", Attribute::Int(1)}})),
      Product("AlphaBetaFallBack",
              Gemm({12, 7}, {7, 5}, {5}, {{"alpha", Attribute::Float(2.0f)}, {"beta", Attribute::Float(0.5f)}})),
      Product("FewRowsFallBack", Gemm({4, 30}, {30, 6}, {6}, {})),
      Product("MatMulBatched", MatMul({3, 8, 16}, {3, 16, 5})),
      Product("MatMulBroadcastBatch", MatMul({2, 3, 8, 16}, {3, 16, 5})),
      Product("MatMulBroadcastOnes", MatMul({2, 1, 8, 16}, {1, 4, 16, 5})),
      Product("MatMulOneMatrixB", MatMul({4, 8, 16}, {16, 5})),
  };
}

namespace {

INSTANTIATE_TEST_SUITE_P(Rows, ProductBackends, ::testing::ValuesIn(RowsWith({ProductBackendCases}, HasBackendCheck)),
                         RowName());

// A linear layer Y = X W^T + b whose W is an initializer (a constant the oneDNN path packs once per
// node) or, with `overridable`, also a graph input a feed may replace on any run.
Model LinearModel(bool overridable) {
  Model m;
  m.source = "linear";
  m.opsets = {{"", 17}};
  m.graph.inputs.push_back(ValueInfoOf("x", DataType::kFloat32, {-1, 24}));
  m.graph.initializers["w"] = Float32Of(RandomTensor({40, 24}, 6));
  m.graph.initializers["b"] = Float32Of(RandomTensor({40}, 7));
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
    const std::map<std::string, Tensor> feeds = {{"x", Float32Of(RandomTensor({batch, 24}, 8 + batch))}};
    const Tensor expected = ReferenceRun(model, feeds);
    for (int run = 0; run < 2; ++run)
      ExpectTensorNear(session.Run(feeds)[0], expected, 1e-5, "batch " + std::to_string(batch));
  }
}

TEST_F(ConstantWeights, WeightsAFeedReplacesAreNotKept) {
  const Model model = LinearModel(true);
  Session session(model);
  for (uint64_t seed : {10, 11}) {
    const std::map<std::string, Tensor> feeds = {{"x", Float32Of(RandomTensor({16, 24}, 9))},
                                                 {"w", Float32Of(RandomTensor({40, 24}, seed))}};
    ExpectTensorNear(session.Run(feeds)[0], ReferenceRun(model, feeds), 1e-5, "seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace edgetrain::testing
