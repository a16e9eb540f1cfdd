#include "core/dtype.hpp"

#include <bit>
#include <cmath>

namespace edgetrain {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kInvalidModel: return "InvalidModel";
    case ErrorCode::kNotImplemented: return "NotImplemented";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kIoError: return "IoError";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Float16::Float16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    return;
  }
  int32_t e = static_cast<int32_t>(exponent) - 127 + 15;
  if (e >= 31) {
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (e <= 0) {  // subnormal or zero, round to nearest even
    if (e < -10) {
      bits = static_cast<uint16_t>(sign);
      return;
    }
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    bits = static_cast<uint16_t>(sign | half);
    return;
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  bits = static_cast<uint16_t>(half);
}

Float16::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int32_t e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else {
    out = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(out);
}

BFloat16::BFloat16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    bits = static_cast<uint16_t>((x >> 16) | 0x40u);
    return;
  }
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  bits = static_cast<uint16_t>((x + rounding) >> 16);
}

BFloat16::operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: case DataType::kInt32: case DataType::kUint32: return 4;
    case DataType::kFloat64: case DataType::kInt64: case DataType::kUint64: return 8;
    case DataType::kInt16: case DataType::kUint16: case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt8: case DataType::kUint8: case DataType::kBool: return 1;
    default: return 0;
  }
}

std::string DataTypeName(DataType type) {
  switch (type) {
    case DataType::kUndefined: return "undefined";
    case DataType::kFloat32: return "float32";
    case DataType::kUint8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUint16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kString: return "string";
    case DataType::kBool: return "bool";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat64: return "float64";
    case DataType::kUint32: return "uint32";
    case DataType::kUint64: return "uint64";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "type#" + std::to_string(static_cast<int32_t>(type));
}

bool IsFloatType(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
         type == DataType::kBFloat16;
}

bool IsIntegerType(DataType type) {
  switch (type) {
    case DataType::kInt8: case DataType::kInt16: case DataType::kInt32: case DataType::kInt64:
    case DataType::kUint8: case DataType::kUint16: case DataType::kUint32: case DataType::kUint64:
      return true;
    default: return false;
  }
}

bool IsKnownDataType(int32_t value) {
  return (value >= 1 && value <= 13) || value == 16;
}

}  // namespace edgetrain
