#include "ops/registry.hpp"

namespace edgetrain {

void RegisterLossOps(OpRegistry&) {}

}  // namespace edgetrain
