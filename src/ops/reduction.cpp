#include "ops/registry.hpp"

namespace edgetrain {

void RegisterReductionOps(OpRegistry&) {}

}  // namespace edgetrain
