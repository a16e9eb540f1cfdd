// One float64 central-difference gradient check per row of every family's table.
#include "gradient_check.hpp"

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
INSTANTIATE_TEST_SUITE_P(Scan, Gradient, ::testing::ValuesIn(ScanGradCases()), RowName);

}  // namespace
