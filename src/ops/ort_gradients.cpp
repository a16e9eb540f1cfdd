// ONNX Runtime's training operators, so that ORT's training artifacts run unchanged: gradient ops,
// InPlaceAccumulatorV2, the cross-entropy loss pair, dropout with a bit-packed mask, Scale and
// ReduceSumTraining. All are com.microsoft ops; the few that old ORT versions declared in the ONNX
// domain are registered there too. Where an ai.edgetrain fused op computes the same math the kernel
// is shared (ops/shared_kernels.hpp) and the wrappers here only adapt ORT's inputs and defaults.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/elementwise_util.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

using elementwise::BroadcastBinary;
using elementwise::ComputeType;
using elementwise::VisitFloatMath;

const std::string& What(const KernelContext& ctx) { return ctx.node().Describe(); }

// How many inputs and outputs a node of the op may have (ORT's schema arity).
struct Arity {
  size_t min_inputs, max_inputs, max_outputs;
};

// "2" or "2 to 4"
std::string CountRange(size_t low, size_t high) {
  return low == high ? std::to_string(low) : std::to_string(low) + " to " + std::to_string(high);
}

void CheckArity(const KernelContext& ctx, const Arity& arity) {
  ET_CHECK(ctx.NumInputs() >= arity.min_inputs && ctx.NumInputs() <= arity.max_inputs, ErrorCode::kInvalidModel,
           What(ctx), ": expects ", CountRange(arity.min_inputs, arity.max_inputs), " inputs, got ", ctx.NumInputs());
  ET_CHECK(ctx.NumOutputs() >= 1 && ctx.NumOutputs() <= arity.max_outputs, ErrorCode::kInvalidModel, What(ctx),
           ": expects ", CountRange(1, arity.max_outputs), " outputs, got ", ctx.NumOutputs());
}

// Registers `kernel` for com.microsoft `op` (and for the ONNX domain when `also_onnx`), checking
// the node's arity first.
// Returns the com.microsoft entry.
OpKernelEntry& Register(OpRegistry& r, const std::string& op, Arity arity, KernelFn kernel, bool also_onnx = false,
                        bool deterministic = true) {
  KernelFn checked = [arity, kernel](KernelContext& ctx) {
    CheckArity(ctx, arity);
    kernel(ctx);
  };
  if (also_onnx) RegisterOnnx(r, op, checked);
  return RegisterMicrosoft(r, op, checked, deterministic);
}

// A scalar (one element) input `t` read as a double.
double ScalarValue(const KernelContext& ctx, const Tensor& t, const char* name) {
  ET_CHECK(t.numel() == 1 && t.dtype() != DataType::kBool && t.dtype() != DataType::kString,
           ErrorCode::kInvalidArgument, What(ctx), ": input '", name, "' must be a numeric scalar, got ",
           DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.DoubleAt(0);
}

// An optional scalar input; `fallback` when it is absent.
double ScalarInput(const KernelContext& ctx, size_t index, const char* name, double fallback) {
  return ctx.HasInput(index) ? ScalarValue(ctx, ctx.Input(index), name) : fallback;
}

bool BoolInput(const KernelContext& ctx, size_t index, const char* name, bool fallback) {
  if (!ctx.HasInput(index)) return fallback;
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == 1 && t.dtype() == DataType::kBool, ErrorCode::kInvalidArgument, What(ctx), ": input '", name,
           "' must be a bool scalar, got ", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.data<bool>()[0];
}

// A 1-D int32/int64 input (a shape) as int64 values.
std::vector<int64_t> ShapeInput(const KernelContext& ctx, size_t index, const char* name) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.rank() == 1 && (t.dtype() == DataType::kInt64 || t.dtype() == DataType::kInt32),
           ErrorCode::kInvalidArgument, What(ctx), ": input '", name, "' must be a 1-D int32/int64 shape, got ",
           DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.ToInt64Vector();
}

// ORT's 'output_type' attribute may ask for another element type than the input's; only equal is run.
void CheckOutputType(const KernelContext& ctx, DataType input_type) {
  if (!ctx.node().HasAttr("output_type")) return;
  const int64_t requested = ctx.node().GetInt("output_type", 0);
  ET_CHECK(requested == static_cast<int64_t>(input_type), ErrorCode::kNotImplemented, What(ctx), ": output_type ",
           requested, " differs from the input element type ", DataTypeName(input_type),
           "; only the input's own type is supported");
}

// ---- InPlaceAccumulatorV2(accumulation_buffer, value, overwrite_flag?) -> (updated_flag, buffer_out?) ----

// buffer_out = overwrite ? value : buffer + value (value broadcast to the buffer's shape). Element
// by element, so buffer_out may be the buffer's own memory (the session binds it there).
void InPlaceAccumulatorV2(KernelContext& ctx) {
  const Tensor& buffer = ctx.Input(0);
  const Tensor& value = ctx.Input(1);
  const bool overwrite = BoolInput(ctx, 2, "overwrite_flag", false);
  ET_CHECK(value.dtype() == buffer.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": value is ",
           DataTypeName(value.dtype()), " but the accumulation buffer is ", DataTypeName(buffer.dtype()));
  const Shape shape = elementwise::BroadcastAll(ctx.node(), {&buffer.shape(), &value.shape()});
  ET_CHECK(shape == buffer.shape(), ErrorCode::kInvalidArgument, What(ctx), ": value ", ShapeToString(value.shape()),
           " does not broadcast to the accumulation buffer ", ShapeToString(buffer.shape()));
  ctx.Output(0, Shape{1}, DataType::kBool).data<bool>()[0] = true;
  if (!ctx.HasOutput(1)) return;
  Tensor& out = ctx.Output(1, buffer.shape(), buffer.dtype());
  VisitFloatMath(buffer.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (overwrite)
      BroadcastBinary<T, T, T>(ctx.threads(), buffer, value, out, [](auto, auto v) { return v; });
    else
      BroadcastBinary<T, T, T>(ctx.threads(), buffer, value, out, [](auto b, auto v) { return b + v; });
  });
}

// ---- SoftmaxCrossEntropyLoss family ----

// The ignored label of ORT's *Internal ops: an optional int64 scalar input (the other loss ops have
// the 'ignore_index' attribute instead).
std::optional<int64_t> IgnoreIndexInput(const KernelContext& ctx, size_t index) {
  if (!ctx.HasInput(index)) return std::nullopt;
  return static_cast<int64_t>(ScalarInput(ctx, index, "ignore_index", 0));
}

// SoftmaxCrossEntropyLossInternal(scores, labels, weights?, ignore_index?) -> (loss, log_prob).
void SoftmaxCrossEntropyLossInternal(KernelContext& ctx) {
  CheckOutputType(ctx, ctx.Input(0).dtype());
  SoftmaxCrossEntropyLossForward(ctx, IgnoreIndexInput(ctx, 3));
}

// d loss / d logits = (softmax - onehot(label)) * d_loss, where d_loss per position is dY (its own
// element for reduction 'none') times the label's class weight, 0 for an ignored label, and divided
// by the total weight of the kept positions for 'mean'. Optional `bias` (same element count) is added.
void SoftmaxCrossEntropyLossGradFrom(KernelContext& ctx, std::optional<int64_t> ignore, const Tensor* bias) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& log_prob = ctx.Input(1);
  const Tensor& labels_tensor = ctx.Input(2);
  const Tensor* weights = ctx.HasInput(3) ? &ctx.Input(3) : nullptr;
  const LossGeometry g = CheckLossInputs(ctx, log_prob, labels_tensor, weights);
  const LossReduction reduction = ParseLossReduction(ctx.node());
  ET_CHECK(dy.dtype() == log_prob.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": dY is ", DataTypeName(dy.dtype()),
           " but log_prob is ", DataTypeName(log_prob.dtype()));
  if (reduction == LossReduction::kNone) {
    ET_CHECK(dy.shape() == g.per_position_shape, ErrorCode::kInvalidArgument, What(ctx), ": dY ",
             ShapeToString(dy.shape()), " must have the labels' shape ", ShapeToString(g.per_position_shape),
             " for reduction 'none'");
  } else {
    ET_CHECK(dy.numel() == 1, ErrorCode::kInvalidArgument, What(ctx), ": dY ", ShapeToString(dy.shape()),
             " must be a scalar for a reduced loss");
  }
  // An ignored position takes any class (0) with scale 0; the others their class weight, times dY,
  // over the total weight for 'mean'.
  auto ignored = [&](int64_t p) { return ignore && labels_tensor.Int64At(p) == *ignore; };
  auto weight_of = [&](int64_t label) { return weights != nullptr ? weights->DoubleAt(label) : 1.0; };
  double total_weight = 0.0;
  for (int64_t p = 0; p < labels_tensor.numel(); ++p) {
    if (ignored(p)) continue;
    const int64_t label = labels_tensor.Int64At(p);
    ET_CHECK(label >= 0 && label < g.classes, ErrorCode::kOutOfRange, What(ctx), ": label ", label,
             " is out of range for ", g.classes, " classes");
    total_weight += weight_of(label);
  }
  auto label_at = [&](int64_t p) { return ignored(p) ? int64_t{0} : labels_tensor.Int64At(p); };
  auto scale_at = [&](int64_t p) {
    if (ignored(p)) return 0.0;
    const double scale = weight_of(labels_tensor.Int64At(p)) * dy.DoubleAt(reduction == LossReduction::kNone ? p : 0);
    return reduction == LossReduction::kMean ? scale / total_weight : scale;
  };
  Tensor& dx = SoftmaxCrossEntropyLossBackward(ctx, g, log_prob, label_at, scale_at);
  if (bias == nullptr) return;
  ET_CHECK(bias->numel() == dx.numel() && bias->dtype() == dx.dtype(), ErrorCode::kInvalidArgument, What(ctx),
           ": bias (", DataTypeName(bias->dtype()), " ", ShapeToString(bias->shape()),
           ") must hold one value of the gradient's type per logit ", ShapeToString(dx.shape()));
  const Tensor bias_view = bias->Reshaped(dx.shape());
  VisitFloat(dx.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BroadcastBinary<T, T, T>(ctx.threads(), dx, bias_view, dx, [](auto d, auto b) { return d + b; });
  });
}

// SoftmaxCrossEntropyLossGrad(dY, log_prob, label, weight?; reduction, ignore_index)
void SoftmaxCrossEntropyLossGrad(KernelContext& ctx) {
  SoftmaxCrossEntropyLossGradFrom(ctx, IgnoreIndexAttribute(ctx.node()), nullptr);
}

// SoftmaxCrossEntropyLossInternalGrad(dY, log_prob, label, weight?, ignore_index?, bias?; reduction)
void SoftmaxCrossEntropyLossInternalGrad(KernelContext& ctx) {
  CheckOutputType(ctx, ctx.Input(1).dtype());
  SoftmaxCrossEntropyLossGradFrom(ctx, IgnoreIndexInput(ctx, 4), ctx.HasInput(5) ? &ctx.Input(5) : nullptr);
}

// ---- Gelu family: dX = dY * gelu'(X [+ B]) ----

// d/dx x * Phi(x) = Phi(x) + x * phi(x)
template <typename C>
C GeluDerivative(C x) {
  constexpr double kInvSqrt2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;
  return C(0.5) * (C(1) + std::erf(x * C(kInvSqrt2))) + x * C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
}

// Derivative of the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename C>
C FastGeluDerivative(C x) {
  constexpr double kAlpha = 0.79788456080286535588, kGamma = 0.044715;
  const C t = std::tanh(C(kAlpha) * (x + C(kGamma) * x * x * x));
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * C(kAlpha) * (C(1) + C(3 * kGamma) * x * x);
}

// (dY, X, B?) -> dY * derivative(X + B); B, when `with_bias`, is 1-D over X's last dim.
template <typename Derivative>
void GeluBackward(KernelContext& ctx, bool with_bias, Derivative derivative) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  ET_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": dY (",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match X (", DataTypeName(x.dtype()), " ",
           ShapeToString(x.shape()), ")");
  Tensor& dx = ctx.Output(0, x.shape(), x.dtype());
  if (!with_bias) {
    VisitFloatMath(x.dtype(), What(ctx), [&](auto tag) {
      using T = typename decltype(tag)::type;
      BroadcastBinary<T, T, T>(ctx.threads(), dy, x, dx, [&](auto g, auto v) { return g * derivative(v); });
    });
    return;
  }
  const Tensor& bias = ctx.Input(2);
  ET_CHECK(x.rank() >= 1 && bias.shape() == Shape{x.dim(x.rank() - 1)} && bias.dtype() == x.dtype(),
           ErrorCode::kInvalidArgument, What(ctx), ": B (", DataTypeName(bias.dtype()), " ",
           ShapeToString(bias.shape()), ") must be 1-D over the last dim of X ", ShapeToString(x.shape()));
  VisitFloatMath(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = dy.data<T>();
    const T* v = x.data<T>();
    const T* b = bias.data<T>();
    T* out = dx.data<T>();
    const int64_t width = bias.numel();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const auto input = elementwise::Load(v[i]) + elementwise::Load(b[i % width]);
        out[i] = elementwise::Store<T>(elementwise::Load(g[i]) * derivative(input));
      }
    });
  });
}

template <bool kFast, bool kWithBias>
void GeluGrad(KernelContext& ctx) {
  GeluBackward(ctx, kWithBias, [](auto x) { return kFast ? FastGeluDerivative(x) : GeluDerivative(x); });
}

// ---- softmax and layer normalization (kernels shared with the ai.edgetrain fused ops) ----

// (dY, Y) -> dX. Before opset 13 (ops without the _13 suffix) the dims from 'axis' (default 1) on
// are normalised together; the _13 ops normalise the single 'axis' (default -1).
template <SoftmaxMode kMode, bool kSinceOpset13>
void SoftmaxGrad(KernelContext& ctx) {
  SoftmaxBackwardKernel(ctx, kMode, /*coerce_to_2d=*/!kSinceOpset13, /*default_axis=*/kSinceOpset13 ? -1 : 1);
}

template <bool kCentered>
void LayerNormalizationGrad(KernelContext& ctx) {
  LayerNormalizationBackward(ctx, kCentered);
}

// ---- dropout ----

double RatioInput(const KernelContext& ctx, size_t index) {
  const double ratio = ScalarInput(ctx, index, "ratio", 0.5);
  ET_CHECK(ratio >= 0.0 && ratio < 1.0, ErrorCode::kInvalidArgument, What(ctx), ": ratio ", ratio,
           " is outside [0, 1)");
  return ratio;
}

// DropoutGrad(dy, mask, ratio?, training_mode?) -> mask ? dy / (1 - ratio) : 0. As in ORT the
// training_mode input is not read: the gradient only exists in training.
void DropoutGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& mask = ctx.Input(1);
  ET_CHECK(mask.dtype() == DataType::kBool && mask.numel() == dy.numel(), ErrorCode::kInvalidArgument, What(ctx),
           ": mask (", DataTypeName(mask.dtype()), " ", ShapeToString(mask.shape()),
           ") must be bool with one flag per element of dy ", ShapeToString(dy.shape()));
  const bool* flags = mask.data<bool>();
  DropoutBackward(ctx, dy, flags, RatioInput(ctx, 2), true);
}

// ORT's bit-packed mask: element i is bit (i % 32) of word i / 32.
constexpr int64_t kMaskBits = 32;

int64_t MaskWords(int64_t elements) { return (elements + kMaskBits - 1) / kMaskBits; }

// BitmaskDropout(data, ratio?, training_mode?; seed) -> (output, mask?: uint32[ceil(n / 32)]). Not
// training (or ratio 0): the output is the data and every mask bit is set, padding included.
void BitmaskDropout(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const double ratio = RatioInput(ctx, 1);
  const bool training = BoolInput(ctx, 2, "training_mode", false);
  std::unique_ptr<bool[]> keep(new bool[static_cast<size_t>(x.numel())]);
  DropoutForward(ctx, x, ratio, training, keep.get());
  if (!ctx.HasOutput(1)) return;
  Tensor& mask = ctx.Output(1, Shape{MaskWords(x.numel())}, DataType::kUint32);
  uint32_t* words = mask.data<uint32_t>();
  const bool dropped_any = training && ratio != 0.0;
  for (int64_t w = 0; w < mask.numel(); ++w) words[w] = dropped_any ? 0u : ~0u;
  if (!dropped_any) return;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (keep[i]) words[i / kMaskBits] |= uint32_t{1} << (i % kMaskBits);
}

// BitmaskDropoutGrad(dy, mask: uint32 bits, ratio?, training_mode?) -> bit ? dy / (1 - ratio) : 0.
void BitmaskDropoutGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& mask = ctx.Input(1);
  ET_CHECK(mask.dtype() == DataType::kUint32 && mask.numel() == MaskWords(dy.numel()), ErrorCode::kInvalidArgument,
           What(ctx), ": mask (", DataTypeName(mask.dtype()), " ", ShapeToString(mask.shape()), ") must be ",
           MaskWords(dy.numel()), " uint32 words, one bit per element of dy ", ShapeToString(dy.shape()));
  const uint32_t* words = mask.data<uint32_t>();
  std::unique_ptr<bool[]> keep(new bool[static_cast<size_t>(dy.numel())]);
  for (int64_t i = 0; i < dy.numel(); ++i) keep[i] = (words[i / kMaskBits] >> (i % kMaskBits)) & 1u;
  DropoutBackward(ctx, dy, keep.get(), RatioInput(ctx, 2), true);
}

// ---- indexing ----

// GatherGrad(shape, indices, dY; axis)
void GatherGrad(KernelContext& ctx) { GatherBackward(ctx, ctx.Input(2), ctx.Input(1), ShapeInput(ctx, 0, "shape")); }

// GatherElementsGrad(dY, shape, indices; axis) -> zeros of shape with dY added where GatherElements read.
void GatherElementsGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Shape shape = ShapeInput(ctx, 1, "shape");
  const int64_t axis =
      NormalizeAxis(ctx.node().GetInt("axis", 0), static_cast<int64_t>(shape.size()), What(ctx) + " attribute 'axis'");
  Tensor& dx = ctx.Output(0, shape, dy.dtype());
  if (dx.nbytes() != 0) std::memset(dx.raw(), 0, dx.nbytes());
  ScatterAddElements(ctx, dx, ctx.Input(2), dy, axis);
}

// ---- elementwise ----

// DivGrad(dY, A, B) -> (dA = dY / B, dB = -dY * A / B^2), each summed back to its input's shape.
void DivGrad(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& a = ctx.Input(1);
  const Tensor& b = ctx.Input(2);
  ET_CHECK(a.dtype() == dy.dtype() && b.dtype() == dy.dtype(), ErrorCode::kInvalidArgument, What(ctx),
           ": dY, A and B must share one element type, got ", DataTypeName(dy.dtype()), ", ", DataTypeName(a.dtype()),
           " and ", DataTypeName(b.dtype()));
  const Shape shape = elementwise::BroadcastAll(ctx.node(), {&a.shape(), &b.shape()});
  ET_CHECK(shape == dy.shape(), ErrorCode::kInvalidArgument, What(ctx), ": dY ", ShapeToString(dy.shape()),
           " is not the broadcast shape ", ShapeToString(shape), " of A and B");
  VisitFloat(dy.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor full(dy.dtype(), dy.shape(), What(ctx) + " gradient");
    if (ctx.HasOutput(0)) {
      BroadcastBinary<T, T, T>(ctx.threads(), dy, b, full, [](T g, T d) { return g / d; });
      SumToShape(ctx, full, a.shape(), 0);
    }
    if (ctx.HasOutput(1)) {
      BroadcastBinary<T, T, T>(ctx.threads(), dy, a, full, [](T g, T n) { return g * n; });
      BroadcastBinary<T, T, T>(ctx.threads(), full, b, full, [](T ga, T d) { return -ga / (d * d); });
      SumToShape(ctx, full, b.shape(), 1);
    }
  });
}

// Scale(input, scale; scale_down) -> input * scale, or input / scale with scale_down.
void Scale(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const double scale = ScalarValue(ctx, ctx.Input(1), "scale");
  const bool scale_down = ctx.node().GetInt("scale_down", 0) != 0;
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloatMath(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    const C factor = scale_down ? C(1) / static_cast<C>(scale) : static_cast<C>(scale);
    elementwise::UnaryMap<T, T>(ctx.threads(), x, y, [factor](C v) { return v * factor; });
  });
}

}  // namespace

// ORT 1.x training registered a few of its gradient ops in the ONNX domain too.
constexpr bool InEitherDomain(std::string_view op) {
  return ops_config::InBuild(kMicrosoftDomain, op) || ops_config::InBuild("", op);
}

void RegisterOrtGradientOps(OpRegistry& r) {
  // Activations: (dY, X or Y) -> dX. ReluGrad was an ONNX-domain op in ORT 1.x training.
  if constexpr (InEitherDomain("ReluGrad")) Register(r, "ReluGrad", {2, 2, 1}, ReluGradKernel, /*also_onnx=*/true);
  ET_IF_BUILT("com.microsoft", "SigmoidGrad") Register(r, "SigmoidGrad", {2, 2, 1}, SigmoidGradKernel);
  ET_IF_BUILT("com.microsoft", "TanhGrad") Register(r, "TanhGrad", {2, 2, 1}, TanhGradKernel);
  ET_IF_BUILT("com.microsoft", "GeluGrad")
    Register(r, "GeluGrad", {2, 2, 1}, GeluGrad</*kFast=*/false, /*kWithBias=*/false>);
  ET_IF_BUILT("com.microsoft", "FastGeluGrad") Register(r, "FastGeluGrad", {2, 2, 1}, GeluGrad<true, false>);
  ET_IF_BUILT("com.microsoft", "BiasGeluGrad_dX") Register(r, "BiasGeluGrad_dX", {3, 3, 1}, GeluGrad<false, true>);
  ET_IF_BUILT("com.microsoft", "BiasFastGeluGrad_dX")
    Register(r, "BiasFastGeluGrad_dX", {3, 3, 1}, GeluGrad<true, true>);

  // Softmax (SoftmaxGrad was an ONNX-domain op in ORT 1.x training).
  if constexpr (InEitherDomain("SoftmaxGrad"))
    Register(r, "SoftmaxGrad", {2, 2, 1}, SoftmaxGrad<SoftmaxMode::kSoftmax, false>, /*also_onnx=*/true);
  ET_IF_BUILT("com.microsoft", "LogSoftmaxGrad")
    Register(r, "LogSoftmaxGrad", {2, 2, 1}, SoftmaxGrad<SoftmaxMode::kLogSoftmax, false>);
  ET_IF_BUILT("com.microsoft", "SoftmaxGrad_13")
    Register(r, "SoftmaxGrad_13", {2, 2, 1}, SoftmaxGrad<SoftmaxMode::kSoftmax, true>);
  ET_IF_BUILT("com.microsoft", "LogSoftmaxGrad_13")
    Register(r, "LogSoftmaxGrad_13", {2, 2, 1}, SoftmaxGrad<SoftmaxMode::kLogSoftmax, true>);

  // Losses.
  ET_IF_BUILT("com.microsoft", "SoftmaxCrossEntropyLossGrad")
    Register(r, "SoftmaxCrossEntropyLossGrad", {3, 4, 1}, SoftmaxCrossEntropyLossGrad);
  ET_IF_BUILT("com.microsoft", "SoftmaxCrossEntropyLossInternal")
    Register(r, "SoftmaxCrossEntropyLossInternal", {2, 4, 2}, SoftmaxCrossEntropyLossInternal);
  ET_IF_BUILT("com.microsoft", "SoftmaxCrossEntropyLossInternalGrad")
    Register(r, "SoftmaxCrossEntropyLossInternalGrad", {3, 6, 1}, SoftmaxCrossEntropyLossInternalGrad);

  // Normalization (LayerNormalizationGrad was an ONNX-domain op in ORT 1.x training).
  if constexpr (InEitherDomain("LayerNormalizationGrad"))
    Register(r, "LayerNormalizationGrad", {5, 5, 3}, LayerNormalizationGrad<true>, /*also_onnx=*/true);
  ET_IF_BUILT("com.microsoft", "SimplifiedLayerNormalizationGrad")
    Register(r, "SimplifiedLayerNormalizationGrad", {4, 4, 2}, LayerNormalizationGrad<false>);

  // Dropout.
  ET_IF_BUILT("com.microsoft", "DropoutGrad") Register(r, "DropoutGrad", {2, 4, 1}, DropoutGrad);
  ET_IF_BUILT("com.microsoft", "BitmaskDropout")
    Register(r, "BitmaskDropout", {1, 3, 2}, BitmaskDropout, /*also_onnx=*/false, /*deterministic=*/false);
  ET_IF_BUILT("com.microsoft", "BitmaskDropoutGrad") Register(r, "BitmaskDropoutGrad", {2, 4, 1}, BitmaskDropoutGrad);

  // Indexing and shapes (GatherGrad was an ONNX-domain op in ORT 1.x training).
  if constexpr (InEitherDomain("GatherGrad")) Register(r, "GatherGrad", {3, 3, 1}, GatherGrad, /*also_onnx=*/true);
  ET_IF_BUILT("com.microsoft", "GatherElementsGrad") Register(r, "GatherElementsGrad", {3, 3, 1}, GatherElementsGrad);
  ET_IF_BUILT("com.microsoft", "SliceGrad") Register(r, "SliceGrad", {4, 6, 1}, SliceGradKernel);

  // Elementwise and reductions (DivGrad was an ONNX-domain op in ORT 1.x training).
  if constexpr (InEitherDomain("DivGrad")) Register(r, "DivGrad", {3, 3, 2}, DivGrad, /*also_onnx=*/true);
  ET_IF_BUILT("com.microsoft", "Scale") Register(r, "Scale", {2, 2, 1}, Scale);
  ET_IF_BUILT("com.microsoft", "ReduceSumTraining") Register(r, "ReduceSumTraining", {2, 2, 1}, ReduceSumKernel);

  ET_IF_BUILT("com.microsoft", "InPlaceAccumulatorV2")
    Register(r, "InPlaceAccumulatorV2", {2, 3, 2}, InPlaceAccumulatorV2).in_place = true;
}

}  // namespace edgetrain
