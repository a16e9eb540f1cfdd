// Gradient-check rows for the shape operator family.
#include "gradient_check.hpp"

namespace edgetrain::testing {

std::vector<GradCase> ShapeGradCases() {
  return {};
}

}  // namespace edgetrain::testing
