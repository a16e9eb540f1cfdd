#include "ops/registry.hpp"

namespace edgetrain {

void RegisterPoolOps(OpRegistry&) {}

}  // namespace edgetrain
