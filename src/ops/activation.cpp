#include "ops/registry.hpp"

namespace edgetrain {

void RegisterActivationOps(OpRegistry&) {}

}  // namespace edgetrain
