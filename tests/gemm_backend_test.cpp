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

OneNode Gemm(Shape a, Shape b, Shape c, std::map<std::string, Attribute> attributes) {
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

}  // namespace
}  // namespace edgetrain::testing
