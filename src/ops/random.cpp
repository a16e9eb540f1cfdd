// Random family: Dropout, RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli.
// All are registered as non-deterministic so that constant folding never evaluates them.
// Dropout's gradient rule and the fused ai.edgetrain DropoutGrad live here too.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

// Runs fn(generator): a generator seeded from the node's 'seed' attribute when it has one (so its
// draws repeat on every run), else the session's random source.
template <typename Fn>
void WithGenerator(KernelContext& ctx, Fn&& fn) {
  if (ctx.node().HasAttr("seed")) {
    std::mt19937_64 seeded(std::bit_cast<uint32_t>(ctx.node().GetFloat("seed", 0.0f)));
    fn(seeded);
  } else {
    fn(ctx.rng());
  }
}

template <typename T>
T FromDouble(double value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

// Fills a float16/bfloat16/float32/float64 tensor with draws of `sample(generator)` (a double).
template <typename Sample>
void FillFloat(KernelContext& ctx, Tensor& out, Sample&& sample) {
  auto fill = [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    WithGenerator(ctx, [&](std::mt19937_64& gen) {
      for (int64_t i = 0; i < out.numel(); ++i) dst[i] = FromDouble<T>(sample(gen));
    });
  };
  switch (out.dtype()) {
    case DataType::kFloat32: fill(TypeTag<float>{}); break;
    case DataType::kFloat64: fill(TypeTag<double>{}); break;
    case DataType::kFloat16: fill(TypeTag<Float16>{}); break;
    case DataType::kBFloat16: fill(TypeTag<BFloat16>{}); break;
    default:
      Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": output element type ", DataTypeName(out.dtype()),
           " is not supported (float16/bfloat16/float32/float64 only)");
  }
}

DataType DtypeAttr(const KernelContext& ctx, DataType fallback) {
  if (!ctx.node().HasAttr("dtype")) return fallback;
  const int64_t value = ctx.node().GetInt("dtype", 0);
  ET_CHECK(IsKnownDataType(static_cast<int32_t>(value)), ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": attribute 'dtype' = ", value, " is not a known element type");
  return static_cast<DataType>(value);
}

// Output shape: the 'shape' attribute (RandomNormal/RandomUniform) or input 0's shape (*Like).
Shape RandomShape(const KernelContext& ctx, bool like) {
  if (like) return ctx.Input(0).shape();
  ET_CHECK(ctx.node().HasAttr("shape"), ErrorCode::kInvalidModel, ctx.node().Describe(),
           ": attribute 'shape' is required");
  Shape shape = ctx.node().GetInts("shape");
  for (int64_t dim : shape) {
    ET_CHECK(dim >= 0, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": attribute 'shape' ",
             ShapeToString(shape), " has a negative dimension");
  }
  return shape;
}

void RandomNormal(KernelContext& ctx, bool like) {
  const Shape shape = RandomShape(ctx, like);
  const DataType dtype = DtypeAttr(ctx, like ? ctx.Input(0).dtype() : DataType::kFloat32);
  std::normal_distribution<double> normal(ctx.node().GetFloat("mean", 0.0f), ctx.node().GetFloat("scale", 1.0f));
  ET_CHECK(ctx.node().GetFloat("scale", 1.0f) >= 0, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": attribute 'scale' must be >= 0");
  Tensor& out = ctx.Output(0, shape, dtype);
  FillFloat(ctx, out, [&](std::mt19937_64& gen) { return normal(gen); });
}

void RandomUniform(KernelContext& ctx, bool like) {
  const Shape shape = RandomShape(ctx, like);
  const DataType dtype = DtypeAttr(ctx, like ? ctx.Input(0).dtype() : DataType::kFloat32);
  const double low = ctx.node().GetFloat("low", 0.0f), high = ctx.node().GetFloat("high", 1.0f);
  ET_CHECK(low <= high, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": attribute 'low' (", low,
           ") must not exceed 'high' (", high, ")");
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Tensor& out = ctx.Output(0, shape, dtype);
  FillFloat(ctx, out, [&](std::mt19937_64& gen) { return low + (high - low) * uniform(gen); });
}

void Bernoulli(KernelContext& ctx) {
  const Tensor& probabilities = ctx.Input(0);
  const DataType dtype = DtypeAttr(ctx, probabilities.dtype());
  const std::vector<double> p = probabilities.ToDoubleVector();
  for (double value : p) {
    ET_CHECK(value >= 0.0 && value <= 1.0, ErrorCode::kInvalidArgument, ctx.node().Describe(),
             ": probability ", value, " is outside [0, 1]");
  }
  Tensor& out = ctx.Output(0, probabilities.shape(), dtype);
  VisitAll(dtype, ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    WithGenerator(ctx, [&](std::mt19937_64& gen) {
      for (size_t i = 0; i < p.size(); ++i) dst[i] = FromDouble<T>(uniform(gen) < p[i] ? 1.0 : 0.0);
    });
  });
}

// ---- Dropout ----

}  // namespace

void DropoutForward(KernelContext& ctx, const Tensor& x, double ratio, bool training, bool* keep) {
  const Node& node = ctx.node();
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  if (!training || ratio == 0.0) {
    if (!y.SameData(x) && x.nbytes() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
    std::fill(keep, keep + x.numel(), true);
    return;
  }
  ET_CHECK(ratio >= 0.0 && ratio < 1.0, ErrorCode::kInvalidArgument, node.Describe(), ": ratio ", ratio,
           " is outside [0, 1)");
  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - ratio));
    std::bernoulli_distribution keep_draw(1.0 - ratio);
    WithGenerator(ctx, [&](std::mt19937_64& gen) {
      for (int64_t i = 0; i < x.numel(); ++i) keep[i] = keep_draw(gen);
    });
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = keep[i] ? src[i] * scale : T(0);
  });
}

void DropoutBackward(KernelContext& ctx, const Tensor& dy, const bool* keep, double ratio, bool training) {
  const Node& node = ctx.node();
  Tensor& dx = ctx.Output(0, dy.shape(), dy.dtype());
  if (!training) {
    if (!dx.SameData(dy) && dy.nbytes() > 0) std::memcpy(dx.raw(), dy.raw(), dy.nbytes());
    return;
  }
  ET_CHECK(ratio >= 0.0 && ratio < 1.0, ErrorCode::kInvalidArgument, node.Describe(), ": ratio ", ratio,
           " is outside [0, 1)");
  VisitFloat(dy.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T one = T(1);
    const T scale = one / (one - static_cast<T>(ratio));  // as the function body computes it
    const T* src = dy.data<T>();
    T* dst = dx.data<T>();
    for (int64_t i = 0; i < dy.numel(); ++i) dst[i] = keep[i] ? src[i] * scale : T(0);
  });
}

namespace {

void Dropout(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  double ratio = node.GetFloat("ratio", 0.5f);
  bool training = false;
  if (ctx.opset() >= 12) {
    if (ctx.HasInput(1)) {
      const Tensor& r = ctx.Input(1);
      ET_CHECK(r.numel() == 1 && IsFloatType(r.dtype()), ErrorCode::kInvalidArgument, node.Describe(),
               ": input 'ratio' must be a float scalar, got ", DataTypeName(r.dtype()), " ", ShapeToString(r.shape()));
      ratio = r.DoubleAt(0);
    }
    if (ctx.HasInput(2)) {
      const Tensor& t = ctx.Input(2);
      ET_CHECK(t.numel() == 1 && t.dtype() == DataType::kBool, ErrorCode::kInvalidArgument, node.Describe(),
               ": input 'training_mode' must be a bool scalar, got ", DataTypeName(t.dtype()), " ",
               ShapeToString(t.shape()));
      training = t.data<bool>()[0];
    }
  }
  // Mask is bool from opset 10; before it had the element type of the data (and is then all ones,
  // since only opset 12 can train).
  if (ctx.opset() >= 10 && ctx.HasOutput(1)) {
    DropoutForward(ctx, x, ratio, training, ctx.Output(1, x.shape(), DataType::kBool).data<bool>());
    return;
  }
  std::unique_ptr<bool[]> keep(new bool[static_cast<size_t>(x.numel())]);
  DropoutForward(ctx, x, ratio, training, keep.get());
  if (ctx.HasOutput(1)) {
    Tensor& mask = ctx.Output(1, x.shape(), x.dtype());
    VisitAll(mask.dtype(), node.Describe(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = mask.data<T>();
      const T one = FromDouble<T>(1.0);
      for (int64_t i = 0; i < mask.numel(); ++i) dst[i] = one;
    });
  }
}

// ai.edgetrain.DropoutGrad(dY, mask, ratio, training_mode) -> dX: dY * mask / (1 - ratio) in
// training mode, else dY (the forward pass was the identity).
void DropoutGradKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& dy = ctx.Input(0);
  const Tensor& mask = ctx.Input(1);
  const Tensor& ratio_tensor = ctx.Input(2);
  const Tensor& training_tensor = ctx.Input(3);
  ET_CHECK(ratio_tensor.numel() == 1 && training_tensor.numel() == 1, ErrorCode::kInvalidArgument, node.Describe(),
           ": ratio and training_mode must be scalars, got ", ShapeToString(ratio_tensor.shape()), " and ",
           ShapeToString(training_tensor.shape()));
  const bool training = training_tensor.DoubleAt(0) != 0.0;
  if (training) {
    ET_CHECK(mask.shape() == dy.shape(), ErrorCode::kInvalidArgument, node.Describe(), ": mask ",
             ShapeToString(mask.shape()), " does not match dY ", ShapeToString(dy.shape()));
  }
  std::unique_ptr<bool[]> converted;  // a mask of the data's type (opsets before 10)
  const bool* keep = nullptr;
  if (training && mask.dtype() == DataType::kBool) {
    keep = mask.data<bool>();
  } else if (training) {
    const std::vector<double> m = mask.ToDoubleVector();
    converted.reset(new bool[m.size()]);
    for (size_t i = 0; i < m.size(); ++i) converted[i] = m[i] != 0.0;
    keep = converted.get();
  }
  DropoutBackward(ctx, dy, keep, ratio_tensor.DoubleAt(0), training);
}

// DropoutGrad in standard ops: Where(training_mode, dY * mask * (1 / (1 - ratio)), dY).
std::shared_ptr<const FunctionDef> DropoutGradFunction() {
  FunctionBuilder f("DropoutGrad", {"dY", "mask", "ratio", "training_mode"}, {"dX"});
  f.Constant("one_float", Tensor::Scalar<float>(1.0f));
  f.Op("CastLike", {"one_float", "dY"}, "one");
  f.Op("CastLike", {"ratio", "dY"}, "ratio_t");
  f.Op("Sub", {"one", "ratio_t"}, "keep_probability");
  f.Op("Div", {"one", "keep_probability"}, "scale");
  f.Op("CastLike", {"mask", "dY"}, "mask_t");
  f.Op("Mul", {"dY", "mask_t"}, "masked");
  f.Op("Mul", {"masked", "scale"}, "scaled");
  f.Op("Cast", {"training_mode"}, "training", {{"to", Attribute::Int(static_cast<int64_t>(DataType::kBool))}});
  f.Op("Where", {"training", "scaled", "dY"}, "dX");
  return f.Build();
}

// Dropout: the identity unless the node can run in training mode (opset 12+ with a training_mode
// input); then dX = dY * mask / (1 - ratio), which needs the forward node's mask output.
void DropoutGradient(GradientContext& g) {
  const Node& node = g.node();
  const std::string dy = g.dY(0);
  if (dy.empty()) return;  // the mask is not differentiable
  const bool may_train = g.opset() >= 12 && !g.X(2).empty();
  if (!may_train) {
    g.SetGrad(0, dy);
    return;
  }
  ET_CHECK(g.NumOutputs() >= 2 && !g.Y(1).empty(), ErrorCode::kNotImplemented, node.Describe(),
           ": the gradient of a Dropout with a training_mode input needs the node's mask output (output 1), "
           "which the model does not request; the artifact generator must add a mask output to Dropout "
           "nodes before building the gradient graph");
  const std::string ratio =
      !g.X(1).empty() ? g.X(1) : g.Constant(Tensor::Scalar<float>(node.GetFloat("ratio", 0.5f)));
  g.SetGrad(0, g.Op("DropoutGrad", {dy, g.Y(1), ratio, g.X(2)}, {}, kEdgetrainDomain));
}

void RegisterRandom(OpRegistry& r, const std::string& op_type, KernelFn fn) {
  RegisterRandomOnnx(r, op_type, std::move(fn));
}

}  // namespace

void RegisterRandomOps(OpRegistry& r) {
  ET_IF_BUILT("", "Dropout") RegisterRandom(r, "Dropout", Dropout);
  ET_IF_BUILT("", "Dropout") r.SetGradient("Dropout", DropoutGradient);
  ET_IF_BUILT("ai.edgetrain", "DropoutGrad") RegisterFused(r, "DropoutGrad", DropoutGradKernel, ET_TRAINING_BODY(DropoutGradFunction()));
  ET_IF_BUILT("", "RandomNormal")
    RegisterRandom(r, "RandomNormal", [](KernelContext& ctx) { RandomNormal(ctx, false); });
  ET_IF_BUILT("", "RandomNormalLike")
    RegisterRandom(r, "RandomNormalLike", [](KernelContext& ctx) { RandomNormal(ctx, true); });
  ET_IF_BUILT("", "RandomUniform")
    RegisterRandom(r, "RandomUniform", [](KernelContext& ctx) { RandomUniform(ctx, false); });
  ET_IF_BUILT("", "RandomUniformLike")
    RegisterRandom(r, "RandomUniformLike", [](KernelContext& ctx) { RandomUniform(ctx, true); });
  ET_IF_BUILT("", "Bernoulli") RegisterRandom(r, "Bernoulli", Bernoulli);
}

}  // namespace edgetrain
