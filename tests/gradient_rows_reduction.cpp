// Gradient-check rows for the reduction operator family.
#include "gradient_check.hpp"

namespace edgetrain::testing {

std::vector<GradCase> ReductionGradCases() {
  return {};
}

}  // namespace edgetrain::testing
