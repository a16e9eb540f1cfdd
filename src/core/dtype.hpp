// Element types. Numbering follows ONNX TensorProto.DataType so that files and checkpoints map 1:1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.hpp"

namespace edgetrain {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBFloat16 = 16,
};

// IEEE half precision, storage only: convert to float to compute.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float value);
  explicit operator float() const;
};

// bfloat16, storage only.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value);
  explicit operator float() const;
};

size_t DataTypeSize(DataType type);      // 0 for kString / kUndefined
std::string DataTypeName(DataType type);  // "float32", "int64", ...
bool IsFloatType(DataType type);          // float16/bfloat16/float32/float64
bool IsIntegerType(DataType type);        // signed or unsigned integers (not bool)
bool IsKnownDataType(int32_t value);

template <typename T>
constexpr DataType DataTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DataType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return DataType::kFloat64;
  else if constexpr (std::is_same_v<T, int64_t>) return DataType::kInt64;
  else if constexpr (std::is_same_v<T, int32_t>) return DataType::kInt32;
  else if constexpr (std::is_same_v<T, int16_t>) return DataType::kInt16;
  else if constexpr (std::is_same_v<T, int8_t>) return DataType::kInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return DataType::kUint8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DataType::kUint16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DataType::kUint32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DataType::kUint64;
  else if constexpr (std::is_same_v<T, bool>) return DataType::kBool;
  else if constexpr (std::is_same_v<T, Float16>) return DataType::kFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>) return DataType::kBFloat16;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

template <typename T>
struct TypeTag {
  using type = T;
};

// An operator-reduced build compiles its kernels (src/ops, EDGETRAIN_OPS_REDUCED) for the element types its config
// lists, plus float32 (README, Reduced builds); an inline namespace keeps these visitors apart from the full ones.
#ifdef EDGETRAIN_OPS_REDUCED
inline namespace ops_reduced {
#include "ops/ops_config_types.inc"  // kTypesConfigPath and kConfiguredTypes[], generated from the config file
template <typename T>
constexpr bool TypeInBuild() {
  for (DataType configured : kConfiguredTypes)
    if (configured == DataTypeOf<T>()) return true;
  return DataTypeOf<T>() == DataType::kFloat32;
}
[[noreturn]] inline void FailTypeLeftOut(DataType type, const std::string& what) {
  Fail(ErrorCode::kNotImplemented, what, ": element type ", DataTypeName(type), " is left out of this operator-reduced ",
       "build (no operator of ", kTypesConfigPath, " lists it)");
}
#else
template <typename T>
constexpr bool TypeInBuild() { return true; }
[[noreturn]] inline void FailTypeLeftOut(DataType, const std::string&) { Fail(ErrorCode::kInternal, "unreachable"); }
#endif
#define ET_VISIT_CASE(kind, T) \
  case DataType::kind:         \
    if constexpr (TypeInBuild<T>()) return fn(TypeTag<T>{}); \
    else FailTypeLeftOut(type, what)

// Calls fn(TypeTag<T>{}) for the C++ type of `type`. Unsupported types throw kNotImplemented
// naming `what` (usually the operator). Families: all numeric, float, numeric without bool.
template <typename Fn>
decltype(auto) VisitFloat(DataType type, const std::string& what, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32: return fn(TypeTag<float>{});
    ET_VISIT_CASE(kFloat64, double);
    default: Fail(ErrorCode::kNotImplemented, what, ": element type ", DataTypeName(type), " is not supported (float32/float64 only)");
  }
}

template <typename Fn>
decltype(auto) VisitNumeric(DataType type, const std::string& what, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32: return fn(TypeTag<float>{});
    ET_VISIT_CASE(kFloat64, double);
    ET_VISIT_CASE(kInt64, int64_t);
    ET_VISIT_CASE(kInt32, int32_t);
    ET_VISIT_CASE(kInt16, int16_t);
    ET_VISIT_CASE(kInt8, int8_t);
    ET_VISIT_CASE(kUint8, uint8_t);
    ET_VISIT_CASE(kUint16, uint16_t);
    ET_VISIT_CASE(kUint32, uint32_t);
    ET_VISIT_CASE(kUint64, uint64_t);
    default: Fail(ErrorCode::kNotImplemented, what, ": element type ", DataTypeName(type), " is not supported");
  }
}

// Every fixed-size type including bool, float16 and bfloat16 (for data movement ops).
template <typename Fn>
decltype(auto) VisitAll(DataType type, const std::string& what, Fn&& fn) {
  switch (type) {
    ET_VISIT_CASE(kBool, bool);
    ET_VISIT_CASE(kFloat16, Float16);
    ET_VISIT_CASE(kBFloat16, BFloat16);
    default: return VisitNumeric(type, what, std::forward<Fn>(fn));
  }
}

#ifdef EDGETRAIN_OPS_REDUCED
}  // namespace ops_reduced
#endif

}  // namespace edgetrain
