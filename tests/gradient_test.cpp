// One float64 central-difference gradient check per row of every family's table.
#include "gradient_check.hpp"

using namespace edgetrain::testing;

namespace {

std::string RowName(const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; }

class Gradient : public ::testing::TestWithParam<GradCase> {};

TEST_P(Gradient, MatchesCentralDifferences) { CheckGradient(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Elementwise, Gradient, ::testing::ValuesIn(ElementwiseGradCases()), RowName);

}  // namespace
