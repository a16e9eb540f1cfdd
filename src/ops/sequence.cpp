#include "ops/registry.hpp"

namespace edgetrain {

void RegisterSequenceOps(OpRegistry&) {}

}  // namespace edgetrain
