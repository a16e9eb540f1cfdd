#include "ops/registry.hpp"

namespace edgetrain {

void RegisterIndexingOps(OpRegistry&) {}

}  // namespace edgetrain
