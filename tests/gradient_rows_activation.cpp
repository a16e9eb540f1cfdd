// Gradient-check rows for the activation operator family.
#include "gradient_check.hpp"

namespace edgetrain::testing {

std::vector<GradCase> ActivationGradCases() {
  return {};
}

}  // namespace edgetrain::testing
