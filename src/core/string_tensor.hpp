// String tensors: a Tensor of DataType::kString owns an array of std::string (never borrowed, never in a memory
// plan); nbytes() is 0, so its elements are copied with CopyTensorData, not as bytes.
#pragma once

#include <string>

#include "core/tensor.hpp"

namespace edgetrain {

template <>
constexpr DataType DataTypeOf<std::string>() {
  return DataType::kString;
}

// A string tensor with more elements than this is refused before allocating.
constexpr int64_t kMaxStringElements = int64_t{1} << 28;

// Copies src's elements into dst (same dtype and element count): bytes, or strings one by one.
void CopyTensorData(const Tensor& src, Tensor& dst);

}  // namespace edgetrain
