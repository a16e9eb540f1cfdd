// Activation functions: Relu and its relatives, sigmoid-like curves, Shrink and PRelu.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/elementwise_util.hpp"
#include "ops/registry.hpp"

namespace edgetrain {
namespace {

using elementwise::BroadcastBinary;
using elementwise::ComputeType;
using elementwise::UnaryMap;
using elementwise::VisitFloatMath;
using elementwise::VisitNumericMath;

template <typename Tag>
using TagType = typename Tag::type;

// y = fn(x, attrs) for float types; make_fn(ctx) reads attributes once and returns the element
// function over the compute type (a generic lambda).
template <typename MakeFn>
void FloatActivation(KernelContext& ctx, MakeFn make_fn) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  auto fn = make_fn(ctx);
  VisitFloatMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    UnaryMap<T, T>(ctx.threads(), x, y, fn);
  });
}

template <typename MakeFn>
void NumericActivation(KernelContext& ctx, MakeFn make_fn) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  auto fn = make_fn(ctx);
  VisitNumericMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = TagType<decltype(tag)>;
    UnaryMap<T, T>(ctx.threads(), x, y, fn);
  });
}

template <typename MakeFn>
void RegisterFloatActivation(OpRegistry& r, const std::string& op, MakeFn make_fn) {
  RegisterOnnx(r, op, [make_fn](KernelContext& ctx) { FloatActivation(ctx, make_fn); });
}

double FloatAttr(const KernelContext& ctx, const char* name, double fallback) {
  return ctx.node().GetFloat(name, static_cast<float>(fallback));
}

template <typename C>
C Sigmoid(C x) {
  // Split by sign so exp never overflows.
  if (x >= 0) return C{1} / (C{1} + std::exp(-x));
  C e = std::exp(x);
  return e / (C{1} + e);
}

template <typename C>
C Softplus(C x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Y = X < 0 ? slope * X : X, slope broadcast to X's shape (unidirectionally).
void PReluKernel(KernelContext& ctx) {
  Tensor x = ctx.Input(0), slope = ctx.Input(1);
  const std::string what = ctx.node().Describe();
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

}  // namespace

void RegisterActivationOps(OpRegistry& r) {
  RegisterOnnx(r, "Relu", [](KernelContext& ctx) {
    NumericActivation(ctx, [](const KernelContext&) {
      return [](auto x) { return x > decltype(x){0} ? x : decltype(x){0}; };
    });
  });
  RegisterFloatActivation(r, "LeakyRelu", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 0.01)](auto x) {
      return x < 0 ? static_cast<decltype(x)>(alpha) * x : x;
    };
  });
  RegisterFloatActivation(r, "Elu", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 1.0)](auto x) {
      using C = decltype(x);
      return x < 0 ? static_cast<C>(alpha) * (std::exp(x) - C{1}) : x;
    };
  });
  RegisterFloatActivation(r, "Celu", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 1.0)](auto x) {
      using C = decltype(x);
      const C a = static_cast<C>(alpha);
      return std::max(C{0}, x) + std::min(C{0}, a * (std::exp(x / a) - C{1}));
    };
  });
  RegisterFloatActivation(r, "Selu", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 1.67326319217681884765625),
            gamma = FloatAttr(ctx, "gamma", 1.05070102214813232421875)](auto x) {
      using C = decltype(x);
      return static_cast<C>(gamma) * (x > 0 ? x : static_cast<C>(alpha) * (std::exp(x) - C{1}));
    };
  });
  RegisterFloatActivation(r, "Sigmoid", [](const KernelContext&) { return [](auto x) { return Sigmoid(x); }; });
  RegisterFloatActivation(r, "HardSigmoid", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 0.2), beta = FloatAttr(ctx, "beta", 0.5)](auto x) {
      using C = decltype(x);
      return std::clamp(static_cast<C>(alpha) * x + static_cast<C>(beta), C{0}, C{1});
    };
  });
  RegisterFloatActivation(r, "HardSwish", [](const KernelContext&) {
    return [](auto x) {
      using C = decltype(x);
      return x * std::clamp(x / C{6} + C{0.5}, C{0}, C{1});
    };
  });
  RegisterFloatActivation(r, "Softplus", [](const KernelContext&) { return [](auto x) { return Softplus(x); }; });
  RegisterFloatActivation(r, "Softsign", [](const KernelContext&) {
    return [](auto x) { return x / (decltype(x){1} + std::abs(x)); };
  });
  RegisterFloatActivation(r, "ThresholdedRelu", [](const KernelContext& ctx) {
    return [alpha = FloatAttr(ctx, "alpha", 1.0)](auto x) {
      return x > static_cast<decltype(x)>(alpha) ? x : decltype(x){0};
    };
  });
  RegisterOnnx(r, "Shrink", [](KernelContext& ctx) {
    NumericActivation(ctx, [](const KernelContext& c) {
      return [bias = FloatAttr(c, "bias", 0.0), lambd = FloatAttr(c, "lambd", 0.5)](auto x) {
        using C = decltype(x);
        const double v = static_cast<double>(x);
        if (v < -lambd) return static_cast<C>(v + bias);
        if (v > lambd) return static_cast<C>(v - bias);
        return C{0};
      };
    });
  });
  RegisterOnnx(r, "PRelu", PReluKernel);
}

}  // namespace edgetrain
