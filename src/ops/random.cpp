#include "ops/registry.hpp"

namespace edgetrain {

void RegisterRandomOps(OpRegistry&) {}

}  // namespace edgetrain
