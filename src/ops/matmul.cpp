#include "ops/registry.hpp"

namespace edgetrain {

void RegisterMatMulOps(OpRegistry&) {}

}  // namespace edgetrain
