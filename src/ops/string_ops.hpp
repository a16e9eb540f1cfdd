// Conversions between string elements and numbers (Cast/CastLike to and from string; ONNX Cast's rules).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/string_tensor.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {

// Shortest decimal text that reads back to the same value ("0.9767611", "1e-05"); NaN, INF and -INF for the
// special values; integers in decimal; bool as "1" or "0".
template <typename T>
std::string NumberToString(T value);

// Reads `text` as a T: decimal or scientific notation, "INF"/"+INF"/"-INF"/"NaN" in any case; a fractional
// value cast to an integer type is truncated toward zero and saturates at the type's range. Throws
// kInvalidArgument naming `what` when `text` is not a number.
template <typename T>
T StringToNumber(std::string_view text, const std::string& what);

// Registers StringNormalizer, TfIdfVectorizer, StringConcat, StringSplit and RegexFullMatch (ops/registry.cpp).
void RegisterStringOps(OpRegistry& r);

// Throws kNotImplemented naming the node and input when a tensor input holds strings and the operator's kernel does
// not handle string elements (the string operators, Cast/CastLike/Equal and the data-movement ops listed in
// string_ops.cpp do).
void RejectStringInputs(const OpKernelEntry& entry, const Node& node, std::span<const RuntimeValue* const> inputs);

// dst = src converted elementwise, where exactly one of the two holds strings (same element count).
void CastStrings(const Tensor& src, Tensor& dst, const std::string& what);

}  // namespace edgetrain
