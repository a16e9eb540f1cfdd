// The gradient check of the case table: one float64 central-difference check per gradient row of every family.
#include "gradient_check.hpp"

using namespace edgetrain::testing;

namespace {

class Gradient : public ::testing::TestWithParam<OpCase> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Gradient);

TEST_P(Gradient, MatchesCentralDifferences) { CheckGradient(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Elementwise, Gradient, ::testing::ValuesIn(RowsWith({ElementwiseGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Activation, Gradient, ::testing::ValuesIn(RowsWith({ActivationGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Reduction, Gradient, ::testing::ValuesIn(RowsWith({ReductionGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Shape, Gradient, ::testing::ValuesIn(RowsWith({ShapeGradCases}, HasGradient)), RowName());
INSTANTIATE_TEST_SUITE_P(MatMulConv, Gradient, ::testing::ValuesIn(RowsWith({MatMulConvGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Normalization, Gradient, ::testing::ValuesIn(RowsWith({NormalizationGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Recurrent, Gradient, ::testing::ValuesIn(RowsWith({RecurrentGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Spectral, Gradient, ::testing::ValuesIn(RowsWith({SpectralGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(VisionLinalg, Gradient, ::testing::ValuesIn(RowsWith({VisionLinalgGradCases}, HasGradient)),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Scan, Gradient, ::testing::ValuesIn(RowsWith({ScanGradCases}, HasGradient)), RowName());

}  // namespace
