// The element types an operator-reduced build compiles its kernels for (README, Reduced builds).
#pragma once

#include "core/dtype.hpp"

namespace edgetrain {

// True in a full build; in a reduced build, for float32 and the types some line of its config lists.
bool ElementTypeInBuild(DataType type);

}  // namespace edgetrain
