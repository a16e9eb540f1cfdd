#include "ops/registry.hpp"

namespace edgetrain {

void RegisterShapeOps(OpRegistry&) {}

}  // namespace edgetrain
