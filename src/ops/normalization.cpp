#include "ops/registry.hpp"

namespace edgetrain {

void RegisterNormalizationOps(OpRegistry&) {}

}  // namespace edgetrain
