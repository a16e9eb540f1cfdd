// Elementwise operators: unary math, broadcasting binary arithmetic/comparison/logic, the
// variadic Max/Min/Mean/Sum, Where, Clip, Cast and CastLike.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.hpp"
#include "core/kernel_backend.hpp"
#include "ops/elementwise_util.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"
#include "ops/string_ops.hpp"
#include "ops/vector_math.hpp"

namespace edgetrain {
namespace {

using elementwise::BroadcastAll;
using elementwise::FloatUnary;
using elementwise::NumericUnary;
using elementwise::BroadcastBinary;
using elementwise::ComputeType;
using elementwise::ForEachBroadcastRun;
using elementwise::kIsHalf;
using elementwise::kParallelGrain;
using elementwise::UnaryMap;
using elementwise::VisitFloatMath;
using elementwise::VisitNumericMath;

template <typename Tag>
using TagType = typename Tag::type;

// ---- integer arithmetic that wraps instead of overflowing (signed overflow is undefined) ----

template <typename T>
using WideUnsigned = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<WideUnsigned<T>>(a) + static_cast<WideUnsigned<T>>(b));
  else return a + b;
}

template <typename T>
T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<WideUnsigned<T>>(a) - static_cast<WideUnsigned<T>>(b));
  else return a - b;
}

template <typename T>
T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<WideUnsigned<T>>(a) * static_cast<WideUnsigned<T>>(b));
  else return a * b;
}

template <typename T>
T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>) return WrapSub(T{0}, a);
  else return -a;
}

// Truncating integer division; the divisor was checked for zero before the loop.
template <typename T>
T DivValue(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    if (b == -1) return WrapNeg(a);  // avoids the trap on INT_MIN / -1
  }
  return static_cast<T>(a / b);
}

template <typename T>
T ModValue(T a, T b, bool fmod) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
    T r = static_cast<T>(a % b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    return r;
  } else {
    return static_cast<T>(a % b);
  }
}

// Float to integer without undefined behaviour: NaN becomes 0, out-of-range values saturate.
template <typename To, typename From>
To SaturatingFloatToInt(From value) {
  const double v = static_cast<double>(value);
  if (std::isnan(v)) return To{0};
  if (v >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  if (v <= static_cast<double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
  return static_cast<To>(v);
}

template <typename T>
T IntPow(T base, T exponent) {
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  T result = 1;
  auto e = static_cast<std::make_unsigned_t<T>>(exponent);
  while (e != 0) {
    if (e & 1u) result = WrapMul(result, base);
    base = WrapMul(base, base);
    e >>= 1;
  }
  return result;
}

template <typename X, typename Y>
X PowValue(X base, Y exponent) {
  if constexpr (std::is_integral_v<X> && std::is_integral_v<Y>)
    return IntPow(base, static_cast<X>(exponent));
  else if constexpr (std::is_integral_v<X>)
    return SaturatingFloatToInt<X>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  else
    return static_cast<X>(std::pow(base, exponent));
}

// ---- conversions for Cast ----

template <typename To, typename From>
To ConvertValue(From value) {
  if constexpr (kIsHalf<From>) return ConvertValue<To>(static_cast<float>(value));
  else if constexpr (std::is_same_v<To, bool>) return value != From{0};
  else if constexpr (kIsHalf<To>) return To(static_cast<float>(value));
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) return SaturatingFloatToInt<To>(value);
  else return static_cast<To>(value);
}

void CastInto(KernelContext& ctx, const Tensor& in, Tensor& out) {
  const std::string& what = ctx.node().Describe();
  if (in.dtype() == DataType::kString || out.dtype() == DataType::kString) {
    CastStrings(in, out, what);
    return;
  }
  if (in.dtype() == out.dtype()) {
    CopyTensorData(in, out);
    return;
  }
  VisitAll(in.dtype(), what, [&](auto from_tag) {
    using From = TagType<decltype(from_tag)>;
    VisitAll(out.dtype(), what, [&](auto to_tag) {
      using To = TagType<decltype(to_tag)>;
      const From* src = in.data<From>();
      To* dst = out.data<To>();
      ctx.threads().ParallelFor(in.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = ConvertValue<To>(src[i]);
      });
    });
  });
}

// ---- kernel skeletons ----

void CheckSameType(KernelContext& ctx, const Tensor& a, const Tensor& b) {
  ET_CHECK(a.dtype() == b.dtype(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": inputs have different element types ",
           DataTypeName(a.dtype()), " and ", DataTypeName(b.dtype()));
}

template <typename T>
void CheckNoZeroDivisor(KernelContext& ctx, const Tensor& divisor) {
  if constexpr (std::is_integral_v<T>) {
    const T* d = divisor.data<T>();
    ET_CHECK(std::find(d, d + divisor.numel(), T{0}) == d + divisor.numel(), ErrorCode::kInvalidArgument,
             ctx.node().Describe(), ": integer division by zero");
  }
}

// Same-type inputs, same-type output, numpy broadcasting.
template <typename Fn>
void NumericBinary(KernelContext& ctx, Fn fn, bool is_division = false) {
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  CheckSameType(ctx, a, b);
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, a.dtype());
  VisitNumericMath(a.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    if (is_division) CheckNoZeroDivisor<T>(ctx, b);
    BroadcastBinary<T, T, T>(ctx.threads(), a, b, out, fn);
  });
}

// Same-type inputs of any type, bool output.
template <typename Fn>
void Comparison(KernelContext& ctx, Fn fn) {
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  CheckSameType(ctx, a, b);
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, DataType::kBool);
  if (a.dtype() == DataType::kString) {  // Equal only (OpKernelEntry::accepts_strings)
    BroadcastBinary<std::string, std::string, bool>(ctx.threads(), a, b, out, fn);
    return;
  }
  VisitAll(a.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    BroadcastBinary<T, T, bool>(ctx.threads(), a, b, out, fn);
  });
}

template <typename Fn>
void Logical(KernelContext& ctx, Fn fn) {
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  ET_CHECK(a.dtype() == DataType::kBool && b.dtype() == DataType::kBool, ErrorCode::kNotImplemented,
           ctx.node().Describe(), ": inputs must be bool, got ", DataTypeName(a.dtype()), " and ", DataTypeName(b.dtype()));
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, DataType::kBool);
  BroadcastBinary<bool, bool, bool>(ctx.threads(), a, b, out, fn);
}

// Max/Min/Sum/Mean: fold the inputs pairwise into the output; Mean divides at the end.
template <typename Fn>
void Variadic(KernelContext& ctx, Fn fn, bool mean = false) {
  const std::string& what = ctx.node().Describe();
  std::vector<Tensor> inputs;
  std::vector<const Shape*> shapes;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    ET_CHECK(ctx.HasInput(i), ErrorCode::kInvalidModel, what, ": input ", i, " is missing");
    inputs.push_back(ctx.Input(i));
  }
  ET_CHECK(!inputs.empty(), ErrorCode::kInvalidModel, what, ": needs at least one input");
  for (const Tensor& t : inputs) {
    CheckSameType(ctx, inputs[0], t);
    shapes.push_back(&t.shape());
  }
  Shape shape = BroadcastAll(ctx.node(), shapes);
  Tensor& out = ctx.Output(0, shape, inputs[0].dtype());
  // Accumulate in scratch if the output shares memory with an input that is read after step one.
  const bool needs_scratch = std::any_of(inputs.begin() + std::min<size_t>(2, inputs.size()), inputs.end(),
                                         [&](const Tensor& t) { return t.SameData(out) && t.numel() > 0; });
  Tensor acc = needs_scratch ? Tensor(out.dtype(), shape) : out;
  VisitNumericMath(inputs[0].dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    if (inputs.size() == 1) {
      BroadcastBinary<T, T, T>(ctx.threads(), inputs[0], inputs[0], acc, [](C x, C) { return x; });
    } else {
      BroadcastBinary<T, T, T>(ctx.threads(), inputs[0], inputs[1], acc, fn);
      for (size_t i = 2; i < inputs.size(); ++i) BroadcastBinary<T, T, T>(ctx.threads(), acc, inputs[i], acc, fn);
    }
    if (mean) {
      const C count = static_cast<C>(inputs.size());
      UnaryMap<T, T>(ctx.threads(), acc, acc, [count](C x) { return static_cast<C>(x / count); });
    }
  });
  if (needs_scratch) std::memcpy(out.raw(), acc.raw(), out.nbytes());
}

template <typename C>
C MaxValue(C a, C b) {
  return (a >= b || a != a) ? a : b;  // NaN in either input propagates
}

template <typename C>
C MinValue(C a, C b) {
  return (a <= b || a != a) ? a : b;
}

// ---- kernels with their own shape or attribute handling ----

void PowKernel(KernelContext& ctx) {
  Tensor base = ctx.Input(0), exponent = ctx.Input(1);
  Shape shape = BroadcastAll(ctx.node(), {&base.shape(), &exponent.shape()});
  Tensor& out = ctx.Output(0, shape, base.dtype());
  VisitNumericMath(base.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    if (exponent.dtype() == base.dtype()) {
      // x^2 and x^1 (LayerNorm's variance, Pow's own gradient): exact products instead of a pow call per element.
      if constexpr (std::is_floating_point_v<C>) {
        const C e = exponent.numel() == 1 ? elementwise::Load(exponent.data<T>()[0]) : C(0);
        if (exponent.numel() == 1 && (e == C(2) || e == C(1)) && base.shape() == shape) {
          if (e == C(2)) UnaryMap<T, T>(ctx.threads(), base, out, [](C x) { return x * x; });
          else UnaryMap<T, T>(ctx.threads(), base, out, [](C x) { return x; });
          return;
        }
      }
      BroadcastBinary<T, T, T>(ctx.threads(), base, exponent, out, [](C x, C y) { return PowValue(x, y); });
      return;
    }
    // Mixed types (allowed since opset 12): the exponent is widened to float64 once.
    Tensor wide(DataType::kFloat64, exponent.shape());
    CastInto(ctx, exponent, wide);
    BroadcastBinary<T, double, T>(ctx.threads(), base, wide, out, [](C x, double y) { return PowValue(x, y); });
  });
}

void ModKernel(KernelContext& ctx) {
  const bool fmod = ctx.node().GetInt("fmod", 0) != 0;
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  CheckSameType(ctx, a, b);
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, a.dtype());
  VisitNumericMath(a.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    CheckNoZeroDivisor<T>(ctx, b);
    BroadcastBinary<T, T, T>(ctx.threads(), a, b, out, [fmod](C x, C y) { return ModValue(x, y, fmod); });
  });
}

void BitShiftKernel(KernelContext& ctx) {
  const std::string direction = ctx.node().GetString("direction", "");
  ET_CHECK(direction == "LEFT" || direction == "RIGHT", ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": direction '", direction, "' must be LEFT or RIGHT");
  const bool left = direction == "LEFT";
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  CheckSameType(ctx, a, b);
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, a.dtype());
  VisitNumeric(a.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      BroadcastBinary<T, T, T>(ctx.threads(), a, b, out, [left](T x, T shift) -> T {
        if (shift >= sizeof(T) * 8) return 0;
        return left ? static_cast<T>(x << shift) : static_cast<T>(x >> shift);
      });
    } else {
      Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": element type ", DataTypeName(a.dtype()),
           " is not supported (unsigned integers only)");
    }
  });
}

// BitwiseAnd/Or/Xor (opset 18) on integer tensors of one type, with broadcasting.
template <typename Fn>
void BitwiseBinary(KernelContext& ctx, Fn fn) {
  Tensor a = ctx.Input(0), b = ctx.Input(1);
  CheckSameType(ctx, a, b);
  Shape shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  Tensor& out = ctx.Output(0, shape, a.dtype());
  VisitNumeric(a.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      BroadcastBinary<T, T, T>(ctx.threads(), a, b, out, [fn](T x, T y) { return static_cast<T>(fn(x, y)); });
    } else {
      Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": element type ", DataTypeName(a.dtype()),
           " is not supported (integers only)");
    }
  });
}

void BitwiseNotKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitNumeric(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      UnaryMap<T, T>(ctx.threads(), x, y, [](T v) { return static_cast<T>(~v); });
    } else {
      Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": element type ", DataTypeName(x.dtype()),
           " is not supported (integers only)");
    }
  });
}

// z[i] = c[i] ? a[i] : b0 (float32), eight at a time.
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) void WhereElseScalarAvx2(const bool* c, const float* a, float b0, float* z, int64_t n) {
  const __m256 other = _mm256_set1_ps(b0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int64_t bytes;
    std::memcpy(&bytes, c + i, sizeof bytes);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes)), _mm256_setzero_si256());
    _mm256_storeu_ps(z + i, _mm256_blendv_ps(other, _mm256_loadu_ps(a + i), _mm256_castsi256_ps(mask)));
  }
  for (; i < n; ++i) z[i] = c[i] ? a[i] : b0;
}
#endif

// The same as a loop that GCC and Clang vectorise (NEON, WASM SIMD128, SSE2): both sides read, the mask as bytes.
void WhereElseScalarVector(const bool* c, const float* a, float b0, float* z, int64_t n) {
  const auto* mask = reinterpret_cast<const uint8_t*>(c);
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i];
    z[i] = mask[i] != 0 ? v : b0;
  }
}

void WhereElseScalar(const bool* c, const float* a, float b0, float* z, int64_t n) {
#if defined(__GNUC__) && defined(__x86_64__)
  if (CpuHasAvx2()) return WhereElseScalarAvx2(c, a, b0, z, n);
#endif
  WhereElseScalarVector(c, a, b0, z, n);
}

void WhereKernel(KernelContext& ctx) {
  Tensor condition = ctx.Input(0), x = ctx.Input(1), y = ctx.Input(2);
  ET_CHECK(condition.dtype() == DataType::kBool, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": condition must be bool, got ", DataTypeName(condition.dtype()));
  CheckSameType(ctx, x, y);
  Shape shape = BroadcastAll(ctx.node(), {&condition.shape(), &x.shape(), &y.shape()});
  Tensor& out = ctx.Output(0, shape, x.dtype());
  VisitAll(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    const bool* c = condition.data<bool>();
    const T* xs = x.data<T>();
    const T* ys = y.data<T>();
    T* zs = out.data<T>();
    ForEachBroadcastRun<3>(ctx.threads(), shape, {&condition.shape(), &x.shape(), &y.shape()},
                           [&](int64_t o, const std::array<int64_t, 3>& offs, const std::array<int64_t, 3>& strides,
                               int64_t n) {
                             const bool* cs = c + offs[0];
                             const T* a = xs + offs[1];
                             const T* b = ys + offs[2];
                             T* z = zs + o;
                             if constexpr (std::is_arithmetic_v<T>) {
                               // Both sides read unconditionally: a select without branches, vectorised
                               // where one side is a scalar (Clip's and Relu's gradients: Where(mask, dY, 0)).
                               if (strides[0] == 1 && strides[1] == 1 && strides[2] == 0) {
                                 if constexpr (std::is_same_v<T, float>) return WhereElseScalar(cs, a, b[0], z, n);
                                 for (int64_t i = 0; i < n; ++i) {
                                   const T pair[2] = {b[0], a[i]};
                                   z[i] = pair[cs[i] ? 1 : 0];
                                 }
                                 return;
                               }
                               for (int64_t i = 0; i < n; ++i) {
                                 const T pair[2] = {b[i * strides[2]], a[i * strides[1]]};
                                 z[i] = pair[cs[i * strides[0]] ? 1 : 0];
                               }
                             } else {
                               for (int64_t i = 0; i < n; ++i)
                                 z[i] = cs[i * strides[0]] ? a[i * strides[1]] : b[i * strides[2]];
                             }
                           });
  });
}

}  // namespace

const Tensor* ClipBound(KernelContext& ctx, size_t index, const char* name, const Tensor& x) {
  if (!ctx.HasInput(index)) return nullptr;
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.dtype() == x.dtype() && t.numel() == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": '", name,
           "' must be a single ", DataTypeName(x.dtype()), " value, got ", DataTypeName(t.dtype()), " ",
           ShapeToString(t.shape()));
  return &t;
}

namespace {

void ClipKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitNumericMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    C low = std::numeric_limits<C>::lowest(), high = std::numeric_limits<C>::max();
    if (ctx.opset() < 11) {
      if (ctx.node().HasAttr("min")) low = static_cast<C>(ctx.node().GetFloat("min", 0));
      if (ctx.node().HasAttr("max")) high = static_cast<C>(ctx.node().GetFloat("max", 0));
    } else {
      auto bound = [&](size_t index, const char* name, C& value) {
        if (const Tensor* t = ClipBound(ctx, index, name, x)) value = elementwise::Load(t->data<T>()[0]);
      };
      bound(1, "min", low);
      bound(2, "max", high);
    }
    // max first, then min: when low > high every value becomes high, as ONNX specifies.
    UnaryMap<T, T>(ctx.threads(), x, y, [low, high](C v) { return std::min(std::max(v, low), high); });
  });
}

void CastKernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  ET_CHECK(ctx.node().HasAttr("to"), ErrorCode::kInvalidModel, what, ": attribute 'to' is missing");
  const int64_t to = ctx.node().GetInt("to", 0);
  ET_CHECK(to >= 0 && to <= std::numeric_limits<int32_t>::max() && IsKnownDataType(static_cast<int32_t>(to)),
           ErrorCode::kNotImplemented, what, ": target type ", to, " is not supported");
  Tensor x = ctx.Input(0);
  CastInto(ctx, x, ctx.Output(0, x.shape(), static_cast<DataType>(to)));
}

void CastLikeKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0);
  const DataType target = ctx.Input(1).dtype();
  CastInto(ctx, x, ctx.Output(0, x.shape(), target));
}

void IsInfKernel(KernelContext& ctx) {
  const bool positive = ctx.node().GetInt("detect_positive", 1) != 0;
  const bool negative = ctx.node().GetInt("detect_negative", 1) != 0;
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), DataType::kBool);
  VisitFloatMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    UnaryMap<T, bool>(ctx.threads(), x, y, [positive, negative](auto v) {
      return std::isinf(v) && (v > 0 ? positive : negative);
    });
  });
}

void IsNaNKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), DataType::kBool);
  VisitFloatMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    UnaryMap<T, bool>(ctx.threads(), x, y, [](auto v) { return std::isnan(v); });
  });
}

void NotKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0);
  ET_CHECK(x.dtype() == DataType::kBool, ErrorCode::kNotImplemented, ctx.node().Describe(), ": input must be bool, got ",
           DataTypeName(x.dtype()));
  Tensor& y = ctx.Output(0, x.shape(), DataType::kBool);
  UnaryMap<bool, bool>(ctx.threads(), x, y, [](bool v) { return !v; });
}

// Registers a float-only unary op from a generic lambda over the compute type.
template <typename Fn>
void RegisterFloatUnary(OpRegistry& r, const std::string& op, Fn fn) {
  RegisterOnnx(r, op, [fn](KernelContext& ctx) { FloatUnary(ctx, fn); });
}

// Erf and Exp: float32 runs vector_math.hpp's polynomials (AVX2 or portable) unless the reference
// kernels are asked for; other types and the reference backend run libm through `reference`.
template <typename Fn>
void RegisterVectorMathUnary(OpRegistry& r, const std::string& op, bool erf, Fn reference) {
  RegisterOnnx(r, op, [erf, reference](KernelContext& ctx) {
    const Tensor& x = ctx.Input(0);
    if (x.dtype() != DataType::kFloat32 || ActiveKernelBackend() == KernelBackend::kReference)
      return FloatUnary(ctx, reference);
    Tensor& y = ctx.Output(0, x.shape(), x.dtype());
    const float* in = x.data<float>();
    float* out = y.data<float>();
    ctx.threads().ParallelFor(x.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
#if defined(EDGETRAIN_VECTOR_MATH_AVX2)
      if (CpuHasAvx2Fma())
        return erf ? vector_math::ErfRangeAvx2(in + begin, out + begin, end - begin)
                   : vector_math::ExpRangeAvx2(in + begin, out + begin, end - begin);
#endif
      erf ? vector_math::ErfRangePortable(in + begin, out + begin, end - begin)
          : vector_math::ExpRangePortable(in + begin, out + begin, end - begin);
    });
  });
}

// ---- gradient rules ----

void AddGradient(GradientContext& g) {
  g.SetGrad(0, g.dY(0), /*maybe_broadcast=*/true);
  g.SetGrad(1, g.dY(0), true);
}

void SubGradient(GradientContext& g) {
  g.SetGrad(0, g.dY(0), true);
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("Neg", {g.dY(0)}), true);
}

// SiLU exported as Mul(x, Sigmoid(x)): x's gradient in one fused pass when nothing else reads the Sigmoid.
bool SiluGradient(GradientContext& g) {
  for (size_t side : {size_t{0}, size_t{1}}) {
    const std::string &s = g.X(side), &x = g.X(1 - side);
    const Node* sigmoid = g.ForwardProducer(s);
    if (!sigmoid || !sigmoid->domain.empty() || sigmoid->op_type != "Sigmoid" || sigmoid->inputs.size() != 1 ||
        sigmoid->inputs[0] != x || x == s || g.ForwardReads(s) != 1)
      continue;
    g.SetGrad(1 - side, g.Op("SiluGrad", {g.dY(0), x}, {}, kEdgetrainDomain));
    return true;
  }
  return false;
}

void MulGradient(GradientContext& g) {
  if (SiluGradient(g)) return;
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Mul", {g.dY(0), g.X(1)}), true);
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("Mul", {g.dY(0), g.X(0)}), true);
}

// y = a / b: da = dy / b, db = -dy * y / b.
void DivGradient(GradientContext& g) {
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Div", {g.dY(0), g.X(1)}), true);
  if (g.NeedsGrad(1)) {
    std::string dy_y = g.Op("Mul", {g.dY(0), g.Y(0)});
    g.SetGrad(1, g.Op("Neg", {g.Op("Div", {dy_y, g.X(1)})}), true);
  }
}

void NegGradient(GradientContext& g) { g.SetGrad(0, g.Op("Neg", {g.dY(0)})); }

void SumGradient(GradientContext& g) {
  for (size_t i = 0; i < g.NumInputs(); ++i) g.SetGrad(i, g.dY(0), true);
}

// True when static type information says `a` and `b` have the same element type.
bool SameKnownType(const GradientContext& g, const std::string& a, const std::string& b) {
  const ValueInfo* ia = g.Info(a);
  const ValueInfo* ib = g.Info(b);
  return ia && ib && ia->dtype != DataType::kUndefined && ia->dtype == ib->dtype;
}

void AbsGradient(GradientContext& g) { g.SetGrad(0, g.Op("Mul", {g.dY(0), g.Op("Sign", {g.X(0)})})); }

// d atan(x) = dy / (1 + x^2)
void AtanGradient(GradientContext& g) {
  std::string one_plus_square = g.Op("Add", {g.ScalarLike(1, g.X(0)), g.Op("Mul", {g.X(0), g.X(0)})});
  g.SetGrad(0, g.Op("Div", {g.dY(0), one_plus_square}));
}

void CosGradient(GradientContext& g) {
  g.SetGrad(0, g.Op("Neg", {g.Op("Mul", {g.dY(0), g.Op("Sin", {g.X(0)})})}));
}

void SinGradient(GradientContext& g) { g.SetGrad(0, g.Op("Mul", {g.dY(0), g.Op("Cos", {g.X(0)})})); }

// d erf(x) = dy * 2/sqrt(pi) * exp(-x^2)
void ErfGradient(GradientContext& g) {
  const double two_over_sqrt_pi = 1.12837916709551257390;
  std::string bell = g.Op("Exp", {g.Op("Neg", {g.Op("Mul", {g.X(0), g.X(0)})})});
  g.SetGrad(0, g.Op("Mul", {g.dY(0), g.Op("Mul", {bell, g.ScalarLike(two_over_sqrt_pi, g.X(0))})}));
}

void ExpGradient(GradientContext& g) { g.SetGrad(0, g.Op("Mul", {g.dY(0), g.Y(0)})); }

void LogGradient(GradientContext& g) { g.SetGrad(0, g.Op("Div", {g.dY(0), g.X(0)})); }

// y = 1/x: dx = -dy * y^2
void ReciprocalGradient(GradientContext& g) {
  g.SetGrad(0, g.Op("Neg", {g.Op("Mul", {g.dY(0), g.Op("Mul", {g.Y(0), g.Y(0)})})}));
}

// y = sqrt(x): dx = dy * 0.5 / y
void SqrtGradient(GradientContext& g) {
  g.SetGrad(0, g.Op("Div", {g.Op("Mul", {g.dY(0), g.ScalarLike(0.5, g.Y(0))}), g.Y(0)}));
}

void TanhGradient(GradientContext& g) { g.SetGrad(0, g.Op("TanhGrad", {g.dY(0), g.Y(0)}, {}, kEdgetrainDomain)); }

// y = a^b: da = dy * b * a^(b-1); db = dy * y * ln(a) where a > 0, 0 elsewhere.
void PowGradient(GradientContext& g) {
  const std::string &base = g.X(0), &exponent = g.X(1), &dy = g.dY(0);
  const bool same_type = SameKnownType(g, base, exponent);
  if (g.NeedsGrad(0)) {
    std::string b = same_type ? exponent : g.Op("CastLike", {exponent, base});
    std::string power = g.Op("Pow", {base, g.Op("Sub", {b, g.ScalarLike(1, base)})});
    g.SetGrad(0, g.Op("Mul", {dy, g.Op("Mul", {b, power})}), true);
  }
  if (g.NeedsGrad(1)) {
    std::string zero = g.ScalarLike(0, base);
    std::string log_base = g.Op("Where", {g.Op("Greater", {base, zero}), g.Op("Log", {base}), zero});
    std::string grad = g.Op("Mul", {dy, g.Op("Mul", {g.Y(0), log_base})});
    g.SetGrad(1, same_type ? grad : g.Op("CastLike", {grad, exponent}), true);
  }
}

// Max/Min: each output element's gradient goes to the input that holds the selected value; on ties
// the first such input takes it.
void SelectionGradient(GradientContext& g) {
  size_t last_needed = 0;
  for (size_t i = 0; i < g.NumInputs(); ++i)
    if (g.NeedsGrad(i)) last_needed = i;
  std::string zero = g.ScalarLike(0, g.Y(0));
  std::string claimed;  // elements already taken by an earlier input
  for (size_t i = 0; i <= last_needed; ++i) {
    std::string holds = g.Op("Equal", {g.X(i), g.Y(0)});
    std::string takes = claimed.empty() ? holds : g.Op("And", {holds, g.Op("Not", {claimed})});
    if (g.NeedsGrad(i)) g.SetGrad(i, g.Op("Where", {takes, g.dY(0), zero}), true);
    if (i < last_needed) claimed = claimed.empty() ? holds : g.Op("Or", {claimed, holds});
  }
}

// The condition is not differentiable; each branch gets dY where it was selected.
void WhereGradient(GradientContext& g) {
  std::string zero = g.ScalarLike(0, g.Y(0));
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("Where", {g.X(0), g.dY(0), zero}), true);
  if (g.NeedsGrad(2)) g.SetGrad(2, g.Op("Where", {g.X(0), zero, g.dY(0)}), true);
}

// dX = dY where min < x < max, 0 elsewhere; the bounds get no gradient. Read from y (min < y < max
// exactly where min < x < max), which the next layer keeps anyway, so that x need not be kept.
void ClipGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  const std::string& y = g.Y(0);
  std::string low, high;
  if (g.opset() < 11) {
    if (g.node().HasAttr("min")) low = g.ScalarLike(g.node().GetFloat("min", 0), x);
    if (g.node().HasAttr("max")) high = g.ScalarLike(g.node().GetFloat("max", 0), x);
  } else {
    low = g.X(1);
    high = g.X(2);
  }
  std::string inside;
  auto require = [&](const std::string& condition) {
    inside = inside.empty() ? condition : g.Op("And", {inside, condition});
  };
  if (!low.empty() && !high.empty()) {  // one pass instead of Greater, Less, And and Where
    g.SetGrad(0, g.Op("ClipGrad", {g.dY(0), y, low, high}, {}, kEdgetrainDomain));
    return;
  }
  if (!low.empty()) require(g.Op("Greater", {y, low}));
  if (!high.empty()) require(g.Op("Less", {y, high}));
  if (inside.empty()) {
    g.SetGrad(0, g.dY(0));
    return;
  }
  g.SetGrad(0, g.Op("Where", {inside, g.dY(0), g.ScalarLike(0, x)}));
}

// ai.edgetrain.ClipGrad(dY, Y, min, max) -> dX = dY where min < Y < max, else 0 (min and max single values).
std::shared_ptr<const FunctionDef> ClipGradFunction() {
  FunctionBuilder f("ClipGrad", {"dY", "Y", "min", "max"}, {"dX"});
  f.Op("Greater", {"Y", "min"}, "above");
  f.Op("Less", {"Y", "max"}, "below");
  f.Op("And", {"above", "below"}, "inside");
  f.Constant("zero_f32", Tensor::Scalar<float>(0));
  f.Op("CastLike", {"zero_f32", "dY"}, "zero");
  f.Op("Where", {"inside", "dY", "zero"}, "dX");
  return f.Build();
}

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2"))) void ClipGradRangeAvx2(const float* dy, const float* y, float low, float high,
                                                       float* dx, int64_t begin, int64_t end) {
  const __m256 lo = _mm256_set1_ps(low), hi = _mm256_set1_ps(high);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_loadu_ps(y + i);
    const __m256 inside = _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GT_OQ), _mm256_cmp_ps(v, hi, _CMP_LT_OQ));
    _mm256_storeu_ps(dx + i, _mm256_and_ps(inside, _mm256_loadu_ps(dy + i)));
  }
  for (; i < end; ++i) dx[i] = y[i] > low && y[i] < high ? dy[i] : 0.0f;
}
#endif

// The same as a loop that GCC and Clang vectorise (NEON, WASM SIMD128, SSE2): dY read unconditionally.
void ClipGradRangeVector(const float* dy, const float* y, float low, float high, float* dx, int64_t begin,
                         int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float d = dy[i], v = y[i];
    dx[i] = v > low && v < high ? d : 0.0f;
  }
}

void ClipGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& y = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), ErrorCode::kInvalidArgument, what, ": dY (",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match Y (", DataTypeName(y.dtype()), " ",
           ShapeToString(y.shape()), ")");
  for (size_t index : {size_t{2}, size_t{3}}) {
    const Tensor& bound = ctx.Input(index);
    ET_CHECK(bound.numel() == 1 && bound.dtype() == y.dtype(), ErrorCode::kInvalidArgument, what, ": '",
             index == 2 ? "min" : "max", "' must be a single ", DataTypeName(y.dtype()), " value, got ",
             DataTypeName(bound.dtype()), " ", ShapeToString(bound.shape()));
  }
  Tensor& dx = ctx.Output(0, y.shape(), y.dtype());
  VisitFloatMath(y.dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    const C low = elementwise::Load(ctx.Input(2).data<T>()[0]), high = elementwise::Load(ctx.Input(3).data<T>()[0]);
    const T* d = dy.data<T>();
    const T* v = y.data<T>();
    T* out = dx.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      auto range = ClipGradRangeVector;
#if defined(__GNUC__) && defined(__x86_64__)
      if (CpuHasAvx2()) range = ClipGradRangeAvx2;
#endif
      ctx.threads().ParallelFor(y.numel(), elementwise::kParallelGrain,
                                [&](int64_t begin, int64_t end) { range(d, v, low, high, out, begin, end); });
      return;
    }
    ctx.threads().ParallelFor(y.numel(), elementwise::kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const C value = elementwise::Load(v[i]);
        out[i] = value > low && value < high ? d[i] : elementwise::Store<T>(C{0});
      }
    });
  });
}

// ai.edgetrain.MulAdd(A, B, C[, shape]) -> Y = A * B + C with numpy broadcasting among A, B, C and `shape` (1-D int64,
// as Expand takes it): Sum(Mul(A, B), Expand(C, shape)) in one pass (the session's FuseMulAdd), e.g. the gradient of a
// squeeze-excitation input, scaled per channel and pooled.
void MulAddKernel(KernelContext& ctx) {
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(1);
  const Tensor& c = ctx.Input(2);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), ErrorCode::kInvalidArgument, what, ": A, B and C types ",
           DataTypeName(a.dtype()), ", ", DataTypeName(b.dtype()), " and ", DataTypeName(c.dtype()), " differ");
  Shape requested;
  if (ctx.HasInput(3)) {
    const Tensor& shape = ctx.Input(3);
    ET_CHECK(shape.dtype() == DataType::kInt64 && shape.rank() == 1, ErrorCode::kInvalidArgument, what,
             ": input shape must be a 1-D int64 tensor, got ", DataTypeName(shape.dtype()), " ",
             ShapeToString(shape.shape()));
    requested = shape.ToInt64Vector();
  }
  const Shape out_shape = BroadcastAll(ctx.node(), {&a.shape(), &b.shape(), &c.shape(), &requested});
  Tensor& y = ctx.Output(0, out_shape, a.dtype());
  VisitFloatMath(a.dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using elementwise::Load, elementwise::Store;
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    const T* cp = c.data<T>();
    T* yp = y.data<T>();
    ForEachBroadcastRun<3>(ctx.threads(), out_shape, {&a.shape(), &b.shape(), &c.shape()},
                           [&](int64_t o, const std::array<int64_t, 3>& offsets,
                               const std::array<int64_t, 3>& strides, int64_t n) {
                             const T* x = ap + offsets[0];
                             const T* p = bp + offsets[1];
                             const T* q = cp + offsets[2];
                             T* z = yp + o;
                             if (strides[1] == 0 && strides[2] == 0 && strides[0] <= 1) {  // a run times a value
                               const auto p0 = Load(p[0]), q0 = Load(q[0]);
                               for (int64_t i = 0; i < n; ++i) z[i] = Store<T>(Load(x[i * strides[0]]) * p0 + q0);
                             } else if (strides[0] == 0 && strides[2] == 0 && strides[1] == 1) {
                               const auto x0 = Load(x[0]), q0 = Load(q[0]);
                               for (int64_t i = 0; i < n; ++i) z[i] = Store<T>(x0 * Load(p[i]) + q0);
                             } else {
                               for (int64_t i = 0; i < n; ++i)
                                 z[i] = Store<T>(Load(x[i * strides[0]]) * Load(p[i * strides[1]]) +
                                                 Load(q[i * strides[2]]));
                             }
                           });
  });
}

// Float-to-float casts pass the gradient back in the input's type; casts from or to other types
// are not differentiable.
void CastGradient(GradientContext& g) {
  const ValueInfo* in = g.Info(g.X(0));
  const bool from_float = !in || in->dtype == DataType::kUndefined || IsFloatType(in->dtype);
  DataType to = g.node().op_type == "CastLike" ? g.TypeOf(g.X(1)) : static_cast<DataType>(g.node().GetInt("to", 0));
  ET_CHECK(to != DataType::kString && (!in || in->dtype != DataType::kString), ErrorCode::kInvalidModel,
           g.node().Describe(), ": casts to or from a string tensor on the path from the loss to a trainable ",
           "parameter; string tensors are not differentiable");
  if (from_float && IsFloatType(to)) g.SetGrad(0, g.Op("CastLike", {g.dY(0), g.X(0)}));
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& r) {
  // Unary math over float types.
  ET_IF_BUILT("", "Acos") RegisterFloatUnary(r, "Acos", [](auto x) { return std::acos(x); });
  ET_IF_BUILT("", "Acosh") RegisterFloatUnary(r, "Acosh", [](auto x) { return std::acosh(x); });
  ET_IF_BUILT("", "Asin") RegisterFloatUnary(r, "Asin", [](auto x) { return std::asin(x); });
  ET_IF_BUILT("", "Asinh") RegisterFloatUnary(r, "Asinh", [](auto x) { return std::asinh(x); });
  ET_IF_BUILT("", "Atan") RegisterFloatUnary(r, "Atan", [](auto x) { return std::atan(x); });
  ET_IF_BUILT("", "Atanh") RegisterFloatUnary(r, "Atanh", [](auto x) { return std::atanh(x); });
  ET_IF_BUILT("", "Ceil") RegisterFloatUnary(r, "Ceil", [](auto x) { return std::ceil(x); });
  ET_IF_BUILT("", "Cos") RegisterFloatUnary(r, "Cos", [](auto x) { return std::cos(x); });
  ET_IF_BUILT("", "Cosh") RegisterFloatUnary(r, "Cosh", [](auto x) { return std::cosh(x); });
  ET_IF_BUILT("", "Erf") RegisterVectorMathUnary(r, "Erf", true, [](auto x) { return std::erf(x); });
  ET_IF_BUILT("", "Exp") RegisterVectorMathUnary(r, "Exp", false, [](auto x) { return std::exp(x); });
  ET_IF_BUILT("", "Floor") RegisterFloatUnary(r, "Floor", [](auto x) { return std::floor(x); });
  ET_IF_BUILT("", "Log") RegisterFloatUnary(r, "Log", [](auto x) { return std::log(x); });
  ET_IF_BUILT("", "Reciprocal") RegisterFloatUnary(r, "Reciprocal", [](auto x) { return decltype(x){1} / x; });
  ET_IF_BUILT("", "Round")
    RegisterFloatUnary(r, "Round", [](auto x) { return std::nearbyint(x); });  // default mode: half to even
  ET_IF_BUILT("", "Sin") RegisterFloatUnary(r, "Sin", [](auto x) { return std::sin(x); });
  ET_IF_BUILT("", "Sinh") RegisterFloatUnary(r, "Sinh", [](auto x) { return std::sinh(x); });
  ET_IF_BUILT("", "Sqrt") RegisterFloatUnary(r, "Sqrt", [](auto x) { return std::sqrt(x); });
  ET_IF_BUILT("", "Tan") RegisterFloatUnary(r, "Tan", [](auto x) { return std::tan(x); });
  ET_IF_BUILT("", "Tanh") RegisterFloatUnary(r, "Tanh", [](auto x) { return std::tanh(x); });
  ET_REGISTER_ONNX(r, "IsInf", IsInfKernel);
  ET_REGISTER_ONNX(r, "IsNaN", IsNaNKernel);
  ET_REGISTER_ONNX(r, "Not", NotKernel);
  ET_IF_BUILT("", "Atan") r.SetGradient("Atan", AtanGradient);
  ET_IF_BUILT("", "Cos") r.SetGradient("Cos", CosGradient);
  ET_IF_BUILT("", "Erf") r.SetGradient("Erf", ErfGradient);
  ET_IF_BUILT("", "Exp") r.SetGradient("Exp", ExpGradient);
  ET_IF_BUILT("", "Log") r.SetGradient("Log", LogGradient);
  ET_IF_BUILT("", "Reciprocal") r.SetGradient("Reciprocal", ReciprocalGradient);
  ET_IF_BUILT("", "Sin") r.SetGradient("Sin", SinGradient);
  ET_IF_BUILT("", "Sqrt") r.SetGradient("Sqrt", SqrtGradient);
  ET_IF_BUILT("", "Tanh") r.SetGradient("Tanh", TanhGradient);  // TanhGrad is registered with the activations

  // Unary math over every numeric type.
  ET_REGISTER_ONNX(r, "Abs", [](KernelContext& ctx) {
    NumericUnary(ctx, [](auto x) -> decltype(x) {
      using C = decltype(x);
      if constexpr (std::is_floating_point_v<C>) return std::abs(x);
      else if constexpr (std::is_signed_v<C>) return x < 0 ? WrapNeg(x) : x;
      else return x;
    });
  });
  ET_IF_BUILT("", "Abs") r.SetGradient("Abs", AbsGradient);
  ET_REGISTER_ONNX(r, "Neg", [](KernelContext& ctx) { NumericUnary(ctx, [](auto x) { return WrapNeg(x); }); });
  ET_REGISTER_ONNX(r, "Sign", [](KernelContext& ctx) {
    NumericUnary(ctx, [](auto x) -> decltype(x) {
      using C = decltype(x);
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(x)) return x;
      }
      return static_cast<C>((C{0} < x) - (x < C{0}));
    });
  });

  // Binary arithmetic with broadcasting.
  ET_REGISTER_ONNX(r, "Add", [](KernelContext& ctx) {
      NumericBinary(ctx, [](auto x, auto y) { return WrapAdd(x, y); });
    });
  ET_REGISTER_ONNX(r, "Sub", [](KernelContext& ctx) {
      NumericBinary(ctx, [](auto x, auto y) { return WrapSub(x, y); });
    });
  ET_REGISTER_ONNX(r, "Mul", [](KernelContext& ctx) {
      NumericBinary(ctx, [](auto x, auto y) { return WrapMul(x, y); });
    });
  ET_REGISTER_ONNX(r, "Div", [](KernelContext& ctx) {
    NumericBinary(ctx, [](auto x, auto y) { return DivValue(x, y); }, /*is_division=*/true);
  });
  ET_IF_BUILT("", "Add") r.SetGradient("Add", AddGradient);
  ET_IF_BUILT("", "Sub") r.SetGradient("Sub", SubGradient);
  ET_IF_BUILT("", "Mul") r.SetGradient("Mul", MulGradient);
  ET_IF_BUILT("", "Div") r.SetGradient("Div", DivGradient);
  ET_IF_BUILT("", "Neg") r.SetGradient("Neg", NegGradient);
  ET_REGISTER_ONNX(r, "Pow", PowKernel);
  ET_IF_BUILT("", "Pow") r.SetGradient("Pow", PowGradient);
  ET_REGISTER_ONNX(r, "Mod", ModKernel);
  ET_REGISTER_ONNX(r, "BitShift", BitShiftKernel);
  ET_REGISTER_ONNX(r, "BitwiseAnd", [](KernelContext& ctx) { BitwiseBinary(ctx, [](auto x, auto y) { return x & y; }); }, 18);
  ET_REGISTER_ONNX(r, "BitwiseOr", [](KernelContext& ctx) { BitwiseBinary(ctx, [](auto x, auto y) { return x | y; }); }, 18);
  ET_REGISTER_ONNX(r, "BitwiseXor", [](KernelContext& ctx) { BitwiseBinary(ctx, [](auto x, auto y) { return x ^ y; }); }, 18);
  ET_REGISTER_ONNX(r, "BitwiseNot", BitwiseNotKernel, 18);

  // Logic and comparison, bool output.
  ET_REGISTER_ONNX(r, "And", [](KernelContext& ctx) { Logical(ctx, [](bool x, bool y) { return x && y; }); });
  ET_REGISTER_ONNX(r, "Or", [](KernelContext& ctx) { Logical(ctx, [](bool x, bool y) { return x || y; }); });
  ET_REGISTER_ONNX(r, "Xor", [](KernelContext& ctx) { Logical(ctx, [](bool x, bool y) { return x != y; }); });
  ET_REGISTER_ONNX(r, "Equal", [](KernelContext& ctx) { Comparison(ctx, [](auto x, auto y) { return x == y; }); });
  ET_REGISTER_ONNX(r, "Greater", [](KernelContext& ctx) { Comparison(ctx, [](auto x, auto y) { return x > y; }); });
  ET_REGISTER_ONNX(r, "GreaterOrEqual", [](KernelContext& ctx) {
      Comparison(ctx, [](auto x, auto y) { return x >= y; });
    });
  ET_REGISTER_ONNX(r, "Less", [](KernelContext& ctx) { Comparison(ctx, [](auto x, auto y) { return x < y; }); });
  ET_REGISTER_ONNX(r, "LessOrEqual", [](KernelContext& ctx) { Comparison(ctx, [](auto x, auto y) { return x <= y; }); });

  // Variadic with broadcasting.
  ET_REGISTER_ONNX(r, "Max", [](KernelContext& ctx) { Variadic(ctx, [](auto x, auto y) { return MaxValue(x, y); }); });
  ET_REGISTER_ONNX(r, "Min", [](KernelContext& ctx) { Variadic(ctx, [](auto x, auto y) { return MinValue(x, y); }); });
  ET_REGISTER_ONNX(r, "Sum", [](KernelContext& ctx) { Variadic(ctx, [](auto x, auto y) { return WrapAdd(x, y); }); });
  ET_IF_BUILT("", "Max") r.SetGradient("Max", SelectionGradient);
  ET_IF_BUILT("", "Min") r.SetGradient("Min", SelectionGradient);
  ET_IF_BUILT("", "Sum") r.SetGradient("Sum", SumGradient);
  ET_REGISTER_ONNX(r, "Mean", [](KernelContext& ctx) {
    Variadic(ctx, [](auto x, auto y) { return WrapAdd(x, y); }, /*mean=*/true);
  });

  ET_REGISTER_ONNX(r, "Where", WhereKernel);
  ET_REGISTER_ONNX(r, "Clip", ClipKernel);
  ET_REGISTER_ONNX(r, "Cast", CastKernel);
  ET_REGISTER_ONNX(r, "CastLike", CastLikeKernel);
  ET_IF_BUILT("", "Where") r.SetGradient("Where", WhereGradient);
  ET_IF_BUILT("", "Clip") r.SetGradient("Clip", ClipGradient);
  ET_IF_BUILT("ai.edgetrain", "ClipGrad") RegisterFused(r, "ClipGrad", ClipGradKernel, ET_TRAINING_BODY(ClipGradFunction()));
  // Made only inside sessions (FuseMulAdd): no standard-ops body to export.
  ET_IF_BUILT("ai.edgetrain", "MulAdd") RegisterFused(r, "MulAdd", MulAddKernel, nullptr);
  ET_IF_BUILT("", "Cast") r.SetGradient("Cast", CastGradient);
  ET_IF_BUILT("", "CastLike") r.SetGradient("CastLike", CastGradient);
}

}  // namespace edgetrain
