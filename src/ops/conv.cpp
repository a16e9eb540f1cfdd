#include "ops/registry.hpp"

namespace edgetrain {

void RegisterConvOps(OpRegistry&) {}

}  // namespace edgetrain
