#include "ops/registry.hpp"

namespace edgetrain {

void RegisterSoftmaxOps(OpRegistry&) {}

}  // namespace edgetrain
