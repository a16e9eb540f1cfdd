#include "ops/registry.hpp"

namespace edgetrain {

void RegisterControlFlowOps(OpRegistry&) {}

}  // namespace edgetrain
