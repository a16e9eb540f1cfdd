#include "ops/registry.hpp"

namespace edgetrain {

void RegisterElementwiseOps(OpRegistry&) {}

}  // namespace edgetrain
