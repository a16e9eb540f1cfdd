// NumPy .npy files (format versions 1-3, little-endian, C order) <-> Tensor.
#pragma once

#include <string>

#include "core/tensor.hpp"

namespace edgetrain {

Tensor ReadNpy(const std::string& path);
// Written to a temporary file and renamed into place.
void WriteNpy(const std::string& path, const Tensor& tensor);

}  // namespace edgetrain
