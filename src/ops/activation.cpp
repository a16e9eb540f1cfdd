// Activation functions: Relu and its relatives, sigmoid-like curves, Mish and Gelu, Shrink and PRelu; their
// gradient rules and the fused backward ops ReluGrad, SigmoidGrad and TanhGrad; SiLU and its gradient fused.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define EDGETRAIN_SIGMOID_AVX2 1
#elif defined(__GNUC__)
#define EDGETRAIN_SIGMOID_VECTOR 1
#endif

#include "core/cpu_features.hpp"
#include "core/kernel_backend.hpp"
#include "ops/activation_util.hpp"
#include "ops/elementwise_util.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

using elementwise::BroadcastBinary;
using elementwise::ComputeType;
using elementwise::FloatUnary;
using elementwise::NumericUnary;
using elementwise::VisitFloatMath;
using elementwise::VisitNumericMath;

template <typename Tag>
using TagType = typename Tag::type;

double FloatAttr(const KernelContext& ctx, const char* name, double fallback) {
  return ctx.node().GetFloat(name, static_cast<float>(fallback));
}

// A float activation whose element function and attribute defaults activation_util.hpp holds.
void RegisterFloatActivation(OpRegistry& r, const std::string& op) {
  RegisterOnnx(r, op, [op](KernelContext& ctx) {
    const ActivationAttr attr = [&ctx](const char* name, double fallback) { return FloatAttr(ctx, name, fallback); };
    VisitActivation(op, attr, [&](auto element) { FloatUnary(ctx, element); });
  });
}

#if defined(EDGETRAIN_SIGMOID_AVX2)
// exp(t) for t in [-87.3, 0]: t = n ln2 + r, |r| <= ln2/2, exp(r) by Cephes' expf polynomial.
__attribute__((target("avx2,fma"))) inline __m256 ExpNonPositiveAvx2(__m256 t) {
  t = _mm256_max_ps(_mm256_set1_ps(-87.3f), t);  // NaN stays NaN (maxps returns its second operand)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// Sigmoid(v) split by sign as the reference does: e = exp(-|v|), 1 / (1 + e) or e / (1 + e).
__attribute__((target("avx2,fma"))) inline __m256 SigmoidAvx2(__m256 v) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = ExpNonPositiveAvx2(_mm256_or_ps(v, _mm256_set1_ps(-0.0f)));
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
  return _mm256_blendv_ps(s, _mm256_mul_ps(e, s), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
}

__attribute__((target("avx2,fma"))) void SigmoidRangeAvx2(const float* x, float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, SigmoidAvx2(_mm256_loadu_ps(x + i)));
  for (; i < end; ++i) y[i] = Sigmoid(x[i]);
}

// y = x * Sigmoid(x)
__attribute__((target("avx2,fma"))) void SiluRangeAvx2(const float* x, float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, SigmoidAvx2(v)));
  }
  for (; i < end; ++i) y[i] = x[i] * Sigmoid(x[i]);
}

// dx = dy * s * (1 + x * (1 - s)), s = Sigmoid(x)
__attribute__((target("avx2,fma"))) void SiluGradRangeAvx2(const float* dy, const float* x, float* dx, int64_t begin,
                                                           int64_t end) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 s = SigmoidAvx2(v);
    const __m256 slope = _mm256_mul_ps(s, _mm256_fmadd_ps(v, _mm256_sub_ps(one, s), one));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), slope));
  }
  for (; i < end; ++i) {
    const float s = Sigmoid(x[i]);
    dx[i] = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
  }
}
#elif defined(EDGETRAIN_SIGMOID_VECTOR)
// The same exp and split on 4-float vectors (NEON, WASM SIMD128): the AVX2 path's constants and steps.
typedef float SigmoidV __attribute__((vector_size(16)));
typedef int32_t SigmoidVI __attribute__((vector_size(16)));

inline SigmoidV ExpNonPositiveVector(SigmoidV t) {
  const SigmoidV floor = SigmoidV{} - 87.3f;
  t = t < floor ? floor : t;  // NaN stays NaN
  // Round to nearest even by adding and taking away 1.5 * 2^23 (|t * log2(e)| < 2^22).
  const SigmoidV magic = SigmoidV{} + 12582912.0f;
  const SigmoidV n = (t * 1.44269504088896341f + magic) - magic;
  SigmoidV r = t - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  SigmoidV p = SigmoidV{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + (r + 1.0f);
  const SigmoidVI two_n = (__builtin_convertvector(n, SigmoidVI) + 127) << 23;
  return p * __builtin_bit_cast(SigmoidV, two_n);
}

void SigmoidRangeVector(const float* x, float* y, int64_t begin, int64_t end) {
  const SigmoidVI sign = SigmoidVI{} + static_cast<int32_t>(0x80000000u);
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    SigmoidV v;
    __builtin_memcpy(&v, x + i, sizeof v);
    const SigmoidVI negative_abs = __builtin_bit_cast(SigmoidVI, v) | sign;
    const SigmoidV e = ExpNonPositiveVector(__builtin_bit_cast(SigmoidV, negative_abs));
    const SigmoidV s = 1.0f / (1.0f + e);
    const SigmoidV out = v < 0.0f ? e * s : s;
    __builtin_memcpy(y + i, &out, sizeof out);
  }
  for (; i < end; ++i) y[i] = Sigmoid(x[i]);
}
#endif

// True where the AVX2 exp runs float32 (Silu, SiluGrad): with the direct kernels (kernel_backend.hpp).
bool UseSigmoidAvx2(const Tensor& x) {
#if defined(EDGETRAIN_SIGMOID_AVX2)
  return x.dtype() == DataType::kFloat32 && UseDirectKernels() && CpuHasAvx2Fma();
#else
  (void)x;
  return false;
#endif
}

// Sigmoid; float32 through the vector exp above (AVX2, or 4-float vectors off x86-64) with the direct kernels.
void SigmoidKernel(KernelContext& ctx) {
#if defined(EDGETRAIN_SIGMOID_AVX2) || defined(EDGETRAIN_SIGMOID_VECTOR)
  const Tensor& x = ctx.Input(0);
#if defined(EDGETRAIN_SIGMOID_AVX2)
  const bool direct = CpuHasAvx2Fma();
  auto range = SigmoidRangeAvx2;
#else
  const bool direct = true;
  auto range = SigmoidRangeVector;
#endif
  if (x.dtype() == DataType::kFloat32 && direct && UseDirectKernels()) {
    Tensor& y = ctx.Output(0, x.shape(), x.dtype());
    const float* in = x.data<float>();
    float* out = y.data<float>();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain,
                              [&](int64_t begin, int64_t end) { range(in, out, begin, end); });
    return;
  }
#endif
  FloatUnary(ctx, [](auto v) { return Sigmoid(v); });
}

// Y = X < 0 ? slope * X : X, slope broadcast to X's shape (unidirectionally).
void PReluKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0), slope = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(x.dtype() == slope.dtype(), ErrorCode::kInvalidArgument, what, ": X is ", DataTypeName(x.dtype()),
           " but slope is ", DataTypeName(slope.dtype()));
  // Before opset 7 a 1-D slope holds one value per channel (axis 1).
  if (ctx.opset() < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1) && slope.dim(0) != 1) {
    Shape per_channel(x.rank() - 1, 1);
    per_channel[0] = slope.dim(0);
    slope = slope.Reshaped(per_channel);
  }
  const Shape shape = elementwise::BroadcastAll(ctx.node(), {&x.shape(), &slope.shape()});
  ET_CHECK(shape == x.shape(), ErrorCode::kInvalidArgument, what, ": slope ", ShapeToString(slope.shape()),
           " cannot be broadcast to X ", ShapeToString(x.shape()));
  Tensor& y = ctx.Output(0, shape, x.dtype());
  VisitNumericMath(x.dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    BroadcastBinary<T, T, T>(ctx.threads(), x, slope, y, [](C v, C s) { return static_cast<C>(v < 0 ? s * v : v); });
  });
}

// Gelu-20: x * Phi(x), exactly ("none") or with Phi's tanh approximation ("tanh").
bool GeluIsTanh(const Node& node) {
  const std::string approximate = node.GetString("approximate", "none");
  ET_CHECK(approximate == "none" || approximate == "tanh", ErrorCode::kInvalidArgument, node.Describe(),
           ": approximate '", approximate, "' is not one of none, tanh");
  return approximate == "tanh";
}

constexpr double kSqrt2OverPi = 0.79788456080286535588, kGeluCubic = 0.044715;

void GeluKernel(KernelContext& ctx) {
  if (GeluIsTanh(ctx.node())) {
    FloatUnary(ctx, [](auto x) {
      const double v = static_cast<double>(x);
      return static_cast<decltype(x)>(0.5 * v * (1 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v))));
    });
  } else {
    FloatUnary(ctx, [](auto x) {
      const double v = static_cast<double>(x);
      return static_cast<decltype(x)>(0.5 * v * (1 + std::erf(v * 0.70710678118654752440)));
    });
  }
}

// ---- fused backward ops: dX = fn(dY, Y) ----

template <typename Fn>
void FusedBackward(KernelContext& ctx, Fn fn) {
  Tensor dy = ctx.Input(0), y = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(dy.dtype() == y.dtype(), ErrorCode::kInvalidArgument, what, ": dY is ", DataTypeName(dy.dtype()),
           " but Y is ", DataTypeName(y.dtype()));
  const Shape shape = elementwise::BroadcastAll(ctx.node(), {&dy.shape(), &y.shape()});
  Tensor& dx = ctx.Output(0, shape, dy.dtype());
  VisitFloatMath(dy.dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    BroadcastBinary<T, T, T>(ctx.threads(), dy, y, dx, fn);
  });
}

// A builder for a FunctionDef (dY, Y) -> dX whose body starts with `zero` and `one` of Y's type.
FunctionBuilder BackwardFunction(const std::string& name) {
  FunctionBuilder f(name, {"dY", "Y"}, {"dX"});
  f.Constant("zero_f32", Tensor::Scalar<float>(0));
  f.Op("CastLike", {"zero_f32", "Y"}, "zero");
  f.Constant("one_f32", Tensor::Scalar<float>(1));
  f.Op("CastLike", {"one_f32", "Y"}, "one");
  return f;
}

std::shared_ptr<const FunctionDef> ReluGradFunction() {
  FunctionBuilder f = BackwardFunction("ReluGrad");
  f.Op("Greater", {"Y", "zero"}, "positive");
  f.Op("Where", {"positive", "dY", "zero"}, "dX");
  return f.Build();
}

std::shared_ptr<const FunctionDef> SigmoidGradFunction() {
  FunctionBuilder f = BackwardFunction("SigmoidGrad");
  f.Op("Mul", {"dY", "Y"}, "dy_y");
  f.Op("Sub", {"one", "Y"}, "one_minus_y");
  f.Op("Mul", {"dy_y", "one_minus_y"}, "dX");
  return f.Build();
}

std::shared_ptr<const FunctionDef> TanhGradFunction() {
  FunctionBuilder f = BackwardFunction("TanhGrad");
  f.Op("Mul", {"Y", "Y"}, "y_squared");
  f.Op("Sub", {"one", "y_squared"}, "one_minus_y_squared");
  f.Op("Mul", {"dY", "one_minus_y_squared"}, "dX");
  return f.Build();
}

// ---- SiLU, x * Sigmoid(x): PyTorch exports it as Sigmoid and Mul; the session fuses those (ir/passes) ----

// ai.edgetrain.Silu(X) -> Y = X * Sigmoid(X)
void SiluKernel(KernelContext& ctx) {
#if defined(EDGETRAIN_SIGMOID_AVX2)
  const Tensor& x = ctx.Input(0);
  if (UseSigmoidAvx2(x)) {
    Tensor& y = ctx.Output(0, x.shape(), x.dtype());
    const float* in = x.data<float>();
    float* out = y.data<float>();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain,
                              [&](int64_t begin, int64_t end) { SiluRangeAvx2(in, out, begin, end); });
    return;
  }
#endif
  FloatUnary(ctx, [](auto v) { return v * Sigmoid(v); });
}

// ai.edgetrain.SiluGrad(dY, X) -> dX = dY * s * (1 + X * (1 - s)), s = Sigmoid(X): SiLU's gradient in one pass.
void SiluGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, what, ": dY (",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match X (", DataTypeName(x.dtype()), " ",
           ShapeToString(x.shape()), ")");
  Tensor& dx = ctx.Output(0, x.shape(), x.dtype());
#if defined(EDGETRAIN_SIGMOID_AVX2)
  if (UseSigmoidAvx2(x)) {
    const float* d = dy.data<float>();
    const float* v = x.data<float>();
    float* out = dx.data<float>();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain,
                              [&](int64_t begin, int64_t end) { SiluGradRangeAvx2(d, v, out, begin, end); });
    return;
  }
#endif
  VisitFloatMath(x.dtype(), what, [&](auto tag) {
    using T = TagType<decltype(tag)>;
    using C = ComputeType<T>;
    const T* d = dy.data<T>();
    const T* v = x.data<T>();
    T* out = dx.data<T>();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const C xi = elementwise::Load(v[i]), s = Sigmoid(xi);
        out[i] = elementwise::Store<T>(elementwise::Load(d[i]) * (s * (C{1} + xi * (C{1} - s))));
      }
    });
  });
}

std::shared_ptr<const FunctionDef> SiluFunction() {
  FunctionBuilder f("Silu", {"X"}, {"Y"});
  f.Op("Sigmoid", {"X"}, "s");
  f.Op("Mul", {"X", "s"}, "Y");
  return f.Build();
}

std::shared_ptr<const FunctionDef> SiluGradFunction() {
  FunctionBuilder f("SiluGrad", {"dY", "X"}, {"dX"});
  f.Constant("one_f32", Tensor::Scalar<float>(1));
  f.Op("CastLike", {"one_f32", "X"}, "one");
  f.Op("Sigmoid", {"X"}, "s");
  f.Op("Sub", {"one", "s"}, "one_minus_s");
  f.Op("Mul", {"X", "one_minus_s"}, "x_one_minus_s");
  f.Op("Add", {"one", "x_one_minus_s"}, "factor");
  f.Op("Mul", {"s", "factor"}, "slope");
  f.Op("Mul", {"dY", "slope"}, "dX");
  return f.Build();
}

// ---- gradient rules ----

double AttrOf(const GradientContext& g, const char* name, double fallback) {
  return g.node().GetFloat(name, static_cast<float>(fallback));
}

void ReluGradient(GradientContext& g) { g.SetGrad(0, g.Op("ReluGrad", {g.dY(0), g.Y(0)}, {}, kEdgetrainDomain)); }

void SigmoidGradient(GradientContext& g) {
  g.SetGrad(0, g.Op("SigmoidGrad", {g.dY(0), g.Y(0)}, {}, kEdgetrainDomain));
}

void SiluGradient(GradientContext& g) { g.SetGrad(0, g.Op("SiluGrad", {g.dY(0), g.X(0)}, {}, kEdgetrainDomain)); }

// x < 0: dx = alpha * dy, else dy.
void LeakyReluGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  std::string negative = g.Op("Less", {x, g.ScalarLike(0, x)});
  std::string scaled = g.Op("Mul", {g.dY(0), g.ScalarLike(AttrOf(g, "alpha", 0.01), x)});
  g.SetGrad(0, g.Op("Where", {negative, scaled, g.dY(0)}));
}

// x < 0: y = alpha (e^x - 1), so dx = dy * (y + alpha); else dy.
void EluGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  std::string negative = g.Op("Less", {x, g.ScalarLike(0, x)});
  std::string slope = g.Op("Add", {g.Y(0), g.ScalarLike(AttrOf(g, "alpha", 1.0), x)});
  g.SetGrad(0, g.Op("Where", {negative, g.Op("Mul", {g.dY(0), slope}), g.dY(0)}));
}

// x > 0: dx = gamma * dy; else y = gamma alpha (e^x - 1), so dx = dy * (y + gamma alpha).
void SeluGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  const double alpha = AttrOf(g, "alpha", 1.67326319217681884765625);
  const double gamma = AttrOf(g, "gamma", 1.05070102214813232421875);
  std::string positive = g.Op("Greater", {x, g.ScalarLike(0, x)});
  std::string linear = g.Op("Mul", {g.dY(0), g.ScalarLike(gamma, x)});
  std::string curve = g.Op("Mul", {g.dY(0), g.Op("Add", {g.Y(0), g.ScalarLike(gamma * alpha, x)})});
  g.SetGrad(0, g.Op("Where", {positive, linear, curve}));
}

// dx = alpha * dy where the output is not clamped (0 < y < 1).
void HardSigmoidGradient(GradientContext& g) {
  const std::string& y = g.Y(0);
  std::string inside = g.Op("And", {g.Op("Greater", {y, g.ScalarLike(0, y)}), g.Op("Less", {y, g.ScalarLike(1, y)})});
  std::string scaled = g.Op("Mul", {g.dY(0), g.ScalarLike(AttrOf(g, "alpha", 0.2), y)});
  g.SetGrad(0, g.Op("Where", {inside, scaled, g.ScalarLike(0, y)}));
}

// y = x * clamp(x/6 + 1/2, 0, 1): dy/dx is 0 below -3, 1 above 3, x/3 + 1/2 between.
void HardSwishGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  std::string middle = g.Op("Add", {g.Op("Mul", {x, g.ScalarLike(1.0 / 3.0, x)}), g.ScalarLike(0.5, x)});
  std::string upper = g.Op("Where", {g.Op("Greater", {x, g.ScalarLike(3, x)}), g.ScalarLike(1, x), middle});
  std::string slope = g.Op("Where", {g.Op("Less", {x, g.ScalarLike(-3, x)}), g.ScalarLike(0, x), upper});
  g.SetGrad(0, g.Op("Mul", {g.dY(0), slope}));
}

// d softplus(x) = sigmoid(x)
void SoftplusGradient(GradientContext& g) { g.SetGrad(0, g.Op("Mul", {g.dY(0), g.Op("Sigmoid", {g.X(0)})})); }

// y = x tanh(softplus(x)): dy/dx = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)).
void MishGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  const std::string t = g.Op("Tanh", {g.Op("Softplus", {x})});
  const std::string one_minus_t2 = g.Op("Sub", {g.ScalarLike(1, x), g.Op("Mul", {t, t})});
  const std::string slope = g.Op("Add", {t, g.Op("Mul", {g.Op("Mul", {x, g.Op("Sigmoid", {x})}), one_minus_t2})});
  g.SetGrad(0, g.Op("Mul", {g.dY(0), slope}));
}

// Exact: dy/dx = Phi(x) + x phi(x). Tanh form, u = c (x + 0.044715 x^3), t = tanh(u):
// dy/dx = (1 + t) / 2 + x (1 - t^2) c (1 + 3 * 0.044715 x^2) / 2.
void GeluGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  auto s = [&](double v) { return g.ScalarLike(v, x); };
  const std::string x2 = g.Op("Mul", {x, x});
  std::string slope;
  if (GeluIsTanh(g.node())) {
    const std::string u = g.Op("Mul", {s(kSqrt2OverPi), g.Op("Add", {x, g.Op("Mul", {s(kGeluCubic), g.Op("Mul", {x2, x})})})});
    const std::string t = g.Op("Tanh", {u});
    const std::string du = g.Op("Mul", {s(kSqrt2OverPi), g.Op("Add", {s(1), g.Op("Mul", {s(3 * kGeluCubic), x2})})});
    const std::string dt = g.Op("Mul", {g.Op("Sub", {s(1), g.Op("Mul", {t, t})}), du});
    slope = g.Op("Mul", {s(0.5), g.Op("Add", {g.Op("Add", {s(1), t}), g.Op("Mul", {x, dt})})});
  } else {
    const std::string cdf = g.Op("Mul", {s(0.5), g.Op("Add", {s(1), g.Op("Erf", {g.Op("Mul", {x, s(0.70710678118654752440)})})})});
    const std::string pdf = g.Op("Mul", {s(0.39894228040143267794), g.Op("Exp", {g.Op("Mul", {x2, s(-0.5)})})});
    slope = g.Op("Add", {cdf, g.Op("Mul", {x, pdf})});
  }
  g.SetGrad(0, g.Op("Mul", {g.dY(0), slope}));
}

// y = x < 0 ? slope * x : x. dx = dy * (slope or 1); dslope = dy * x where x < 0 (summed by the walk).
void PReluGradient(GradientContext& g) {
  const std::string& x = g.X(0);
  std::string slope = g.X(1);
  // Before opset 7 a 1-D slope of length C (when C != 1) holds one value per channel (axis 1).
  std::vector<int64_t> reduce_to_channels;
  const ValueInfo* x_info = g.Info(x);
  const ValueInfo* slope_info = g.Info(slope);
  if (g.opset() < 7 && x_info && slope_info && x_info->has_shape && slope_info->has_shape &&
      slope_info->shape.size() == 1 && x_info->shape.size() >= 2 && slope_info->shape[0].known() &&
      x_info->shape[1].known() && slope_info->shape[0].value == x_info->shape[1].value &&
      slope_info->shape[0].value != 1) {
    std::vector<int64_t> per_channel(x_info->shape.size() - 1, 1);
    per_channel[0] = slope_info->shape[0].value;
    slope = g.Op("Reshape", {slope, g.Ints(per_channel)});
    for (size_t d = 0; d < x_info->shape.size(); ++d)
      if (d != 1) reduce_to_channels.push_back(static_cast<int64_t>(d));
  }
  std::string zero = g.ScalarLike(0, x);
  std::string negative = g.Op("Less", {x, zero});
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Where", {negative, g.Op("Mul", {g.dY(0), slope}), g.dY(0)}));
  if (g.NeedsGrad(1)) {
    std::string grad = g.Op("Where", {negative, g.Op("Mul", {g.dY(0), x}), zero});
    if (reduce_to_channels.empty()) {
      g.SetGrad(1, grad, /*maybe_broadcast=*/true);
    } else {
      g.SetGrad(1, g.Op("ReduceSum", {grad, g.Ints(reduce_to_channels)}, {{"keepdims", Attribute::Int(0)}}));
    }
  }
}

}  // namespace

// ReluGrad: dX = Y > 0 ? dY : 0
void ReluGradKernel(KernelContext& ctx) {
  FusedBackward(ctx, [](auto dy, auto y) { return y > decltype(y){0} ? dy : decltype(y){0}; });
}

// SigmoidGrad: dX = dY * Y * (1 - Y)
void SigmoidGradKernel(KernelContext& ctx) {
  FusedBackward(ctx, [](auto dy, auto y) { return dy * y * (decltype(y){1} - y); });
}

// TanhGrad: dX = dY * (1 - Y^2)
void TanhGradKernel(KernelContext& ctx) {
  FusedBackward(ctx, [](auto dy, auto y) { return dy * (decltype(y){1} - y * y); });
}

void RegisterActivationOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Relu", [](KernelContext& ctx) {
    NumericUnary(ctx, [](auto x) { return x > decltype(x){0} ? x : decltype(x){0}; });
  });
  ET_IF_BUILT("", "Relu") r.SetGradient("Relu", ReluGradient);
  ET_IF_BUILT("", "LeakyRelu") RegisterFloatActivation(r, "LeakyRelu");
  ET_IF_BUILT("", "LeakyRelu") r.SetGradient("LeakyRelu", LeakyReluGradient);
  ET_IF_BUILT("", "Elu") RegisterFloatActivation(r, "Elu");
  ET_IF_BUILT("", "Elu") r.SetGradient("Elu", EluGradient);
  ET_IF_BUILT("", "Celu") RegisterFloatActivation(r, "Celu");
  ET_IF_BUILT("", "Selu") RegisterFloatActivation(r, "Selu");
  ET_IF_BUILT("", "Selu") r.SetGradient("Selu", SeluGradient);
  ET_REGISTER_ONNX(r, "Sigmoid", SigmoidKernel);
  ET_IF_BUILT("", "Sigmoid") r.SetGradient("Sigmoid", SigmoidGradient);
  ET_IF_BUILT("", "HardSigmoid") RegisterFloatActivation(r, "HardSigmoid");
  ET_IF_BUILT("", "HardSigmoid") r.SetGradient("HardSigmoid", HardSigmoidGradient);
  ET_IF_BUILT("", "HardSwish") RegisterFloatActivation(r, "HardSwish");
  ET_IF_BUILT("", "HardSwish") r.SetGradient("HardSwish", HardSwishGradient);
  ET_IF_BUILT("", "Softplus") RegisterFloatActivation(r, "Softplus");
  ET_IF_BUILT("", "Softplus") r.SetGradient("Softplus", SoftplusGradient);
  ET_IF_BUILT("", "Softsign") RegisterFloatActivation(r, "Softsign");
  ET_IF_BUILT("", "ThresholdedRelu") RegisterFloatActivation(r, "ThresholdedRelu");
  ET_REGISTER_ONNX(r, "Shrink", [](KernelContext& ctx) {
    NumericUnary(ctx, [bias = FloatAttr(ctx, "bias", 0.0), lambd = FloatAttr(ctx, "lambd", 0.5)](auto x) {
      using C = decltype(x);
      const double v = static_cast<double>(x);
      if (v < -lambd) return static_cast<C>(v + bias);
      if (v > lambd) return static_cast<C>(v - bias);
      return C{0};
    });
  });
  ET_REGISTER_ONNX(r, "PRelu", PReluKernel);
  ET_IF_BUILT("", "PRelu") r.SetGradient("PRelu", PReluGradient);
  ET_REGISTER_ONNX(r, "Mish", [](KernelContext& ctx) {
    FloatUnary(ctx, [](auto x) {
      const double v = static_cast<double>(x);
      return static_cast<decltype(x)>(v * std::tanh(v > 20 ? v : std::log1p(std::exp(v))));
    });
  }, 18);
  ET_IF_BUILT("", "Mish") r.SetGradient("Mish", MishGradient);
  ET_REGISTER_ONNX(r, "Gelu", GeluKernel, 20);
  ET_IF_BUILT("", "Gelu") r.SetGradient("Gelu", GeluGradient);

  ET_IF_BUILT("ai.edgetrain", "ReluGrad") RegisterFused(r, "ReluGrad", ReluGradKernel, ET_TRAINING_BODY(ReluGradFunction()));
  ET_IF_BUILT("ai.edgetrain", "SigmoidGrad") RegisterFused(r, "SigmoidGrad", SigmoidGradKernel, ET_TRAINING_BODY(SigmoidGradFunction()));
  ET_IF_BUILT("ai.edgetrain", "TanhGrad") RegisterFused(r, "TanhGrad", TanhGradKernel, ET_TRAINING_BODY(TanhGradFunction()));
  ET_IF_BUILT("ai.edgetrain", "Silu") RegisterFused(r, "Silu", SiluKernel, SiluFunction());
  ET_IF_BUILT("ai.edgetrain", "Silu") r.SetGradient(kEdgetrainDomain, "Silu", SiluGradient);
  ET_IF_BUILT("ai.edgetrain", "SiluGrad") RegisterFused(r, "SiluGrad", SiluGradKernel, ET_TRAINING_BODY(SiluGradFunction()));
}

}  // namespace edgetrain
