// Gradient-check rows for the matmul and conv operator family.
#include "gradient_check.hpp"

namespace edgetrain::testing {

std::vector<GradCase> MatMulConvGradCases() {
  return {};
}

}  // namespace edgetrain::testing
