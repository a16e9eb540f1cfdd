// One float64 central-difference gradient check per row of every family's table.
#include <map>
#include <set>
#include <string>

#include "gradient_check.hpp"
#include "ops/kernel.hpp"

using namespace edgetrain::testing;

namespace {

std::string RowName(const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; }

class Gradient : public ::testing::TestWithParam<GradCase> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Gradient);

TEST_P(Gradient, MatchesCentralDifferences) { CheckGradient(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Elementwise, Gradient, ::testing::ValuesIn(ElementwiseGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Activation, Gradient, ::testing::ValuesIn(ActivationGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Reduction, Gradient, ::testing::ValuesIn(ReductionGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Shape, Gradient, ::testing::ValuesIn(ShapeGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(MatMulConv, Gradient, ::testing::ValuesIn(MatMulConvGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Normalization, Gradient, ::testing::ValuesIn(NormalizationGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Recurrent, Gradient, ::testing::ValuesIn(RecurrentGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(Spectral, Gradient, ::testing::ValuesIn(SpectralGradCases()), RowName);
INSTANTIATE_TEST_SUITE_P(VisionLinalg, Gradient, ::testing::ValuesIn(VisionLinalgGradCases()), RowName);

}  // namespace

namespace {

std::string OpKey(const std::string& domain, const std::string& op) { return domain.empty() ? op : domain + ":" + op; }

TEST(GradientCoverage, EveryGradientRuleHasARow) {
  std::set<std::string> rowed;
  for (auto* table : {ElementwiseGradCases, ActivationGradCases, ReductionGradCases, ShapeGradCases, MatMulConvGradCases,
                      NormalizationGradCases, RecurrentGradCases, SpectralGradCases, VisionLinalgGradCases})
    for (const GradCase& row : table()) rowed.insert(OpKey(row.domain, row.op));
  // Rules whose gradient is by definition not the finite difference, and the test that checks each.
  const std::map<std::string, std::string> checked_elsewhere = {
      {"ai.edgetrain:FakeQuantize", "straight-through estimator: quantize_tests FakeQuantize.*, qat_torch_parity"},
  };
  std::set<std::string> missing, ruled;
  for (const auto& entry : edgetrain::OpRegistry::Global().Entries()) {
    if (!entry.gradient) continue;
    const std::string key = OpKey(entry.domain, entry.op_type);
    ruled.insert(key);
    if (!rowed.count(key) && !checked_elsewhere.count(key)) missing.insert(key);
  }
  std::string list;
  for (const auto& op : missing) list += op + " ";
  EXPECT_TRUE(missing.empty()) << "gradient rules without a float64 row: " << list;
  for (const auto& [op, where] : checked_elsewhere) EXPECT_TRUE(ruled.count(op) && !rowed.count(op)) << op << " (" << where << ")";
}

}  // namespace
