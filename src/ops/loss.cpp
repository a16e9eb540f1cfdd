// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (= LogSoftmax over the class axis,
// then NLL). Inputs are [N, C] or [N, C, d1, ...], labels [N] or [N, d1, ...]. Gradient rules flow
// to the scores/input only; SoftmaxCrossEntropyLoss uses the fused ai.edgetrain.SoftmaxCrossEntropyLossGrad.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"
#include "ops/softmax_util.hpp"

namespace edgetrain {

LossReduction ParseLossReduction(const Node& node) {
  const std::string value = node.GetString("reduction", "mean");
  if (value == "none") return LossReduction::kNone;
  if (value == "sum") return LossReduction::kSum;
  if (value == "mean") return LossReduction::kMean;
  Fail(ErrorCode::kNotImplemented, node.Describe(), ": reduction '", value, "' is not supported (none/sum/mean)");
}

LossGeometry CheckLossInputs(const KernelContext& ctx, const Tensor& scores, const Tensor& labels,
                             const Tensor* weights) {
  const Node& node = ctx.node();
  ET_CHECK(scores.rank() >= 2, ErrorCode::kInvalidArgument, node.Describe(), ": input must be [N, C, ...], got ",
           ShapeToString(scores.shape()));
  ET_CHECK(labels.dtype() == DataType::kInt32 || labels.dtype() == DataType::kInt64, ErrorCode::kInvalidArgument,
           node.Describe(), ": labels must be int32 or int64, got ", DataTypeName(labels.dtype()));
  LossGeometry g;
  g.batch = scores.dim(0);
  g.classes = scores.dim(1);
  g.per_position_shape.push_back(g.batch);
  for (size_t d = 2; d < scores.rank(); ++d) {
    g.positions *= scores.dim(d);
    g.per_position_shape.push_back(scores.dim(d));
  }
  ET_CHECK(labels.shape() == g.per_position_shape, ErrorCode::kInvalidArgument, node.Describe(), ": labels shape ",
           ShapeToString(labels.shape()), " does not match input shape ", ShapeToString(scores.shape()), " (expected ",
           ShapeToString(g.per_position_shape), ")");
  if (weights != nullptr) {
    ET_CHECK(weights->shape() == Shape{g.classes}, ErrorCode::kInvalidArgument, node.Describe(), ": weights shape ",
             ShapeToString(weights->shape()), " must be [", g.classes, "]");
    ET_CHECK(weights->dtype() == scores.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
             ": weights must have the input's element type ", DataTypeName(scores.dtype()));
  }
  return g;
}

std::optional<int64_t> IgnoreIndexAttribute(const Node& node) {
  if (!node.HasAttr("ignore_index")) return std::nullopt;
  return node.GetInt("ignore_index", 0);
}

namespace {

// NLL over log-probabilities `log_prob` laid out [N, C, D]; writes output 0.
template <typename T>
void NllFromLogProb(KernelContext& ctx, const LossGeometry& g, const T* log_prob, const Tensor& labels_tensor,
                    const Tensor* weights_tensor, std::optional<int64_t> ignore) {
  const Node& node = ctx.node();
  const LossReduction reduction = ParseLossReduction(node);
  const bool has_ignore = ignore.has_value();
  const int64_t ignore_index = ignore.value_or(0);
  for (int64_t p = 0; p < labels_tensor.numel(); ++p) {
    const int64_t label = labels_tensor.Int64At(p);
    if (has_ignore && label == ignore_index) continue;
    ET_CHECK(label >= 0 && label < g.classes, ErrorCode::kOutOfRange, node.Describe(), ": label ", label,
             " is out of range for ", g.classes, " classes");
  }
  const T* weights = weights_tensor != nullptr ? weights_tensor->data<T>() : nullptr;

  Tensor& out = ctx.Output(0, reduction == LossReduction::kNone ? g.per_position_shape : Shape{}, DataTypeOf<T>());
  T* per_position = reduction == LossReduction::kNone ? out.data<T>() : nullptr;
  double loss_sum = 0.0, weight_sum = 0.0;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t d = 0; d < g.positions; ++d) {
      const int64_t label = labels_tensor.Int64At(n * g.positions + d);
      double loss = 0.0, weight = 0.0;
      if (!(has_ignore && label == ignore_index)) {
        weight = weights != nullptr ? static_cast<double>(weights[label]) : 1.0;
        loss = -static_cast<double>(log_prob[(n * g.classes + label) * g.positions + d]) * weight;
      }
      if (per_position != nullptr) per_position[n * g.positions + d] = static_cast<T>(loss);
      loss_sum += loss;
      weight_sum += weight;
    }
  }
  if (reduction == LossReduction::kSum) out.data<T>()[0] = static_cast<T>(loss_sum);
  if (reduction == LossReduction::kMean) out.data<T>()[0] = static_cast<T>(loss_sum / weight_sum);
}

void NegativeLogLikelihoodLossKernel(KernelContext& ctx) {
  const Tensor& input = ctx.Input(0);
  const Tensor& labels = ctx.Input(1);
  const Tensor* weights = ctx.HasInput(2) ? &ctx.Input(2) : nullptr;
  const LossGeometry g = CheckLossInputs(ctx, input, labels, weights);
  VisitFloat(input.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    NllFromLogProb<T>(ctx, g, input.data<T>(), labels, weights, IgnoreIndexAttribute(ctx.node()));
  });
}

}  // namespace

void SoftmaxCrossEntropyLossForward(KernelContext& ctx, std::optional<int64_t> ignore_index) {
  const Tensor& scores = ctx.Input(0);
  const Tensor& labels = ctx.Input(1);
  const Tensor* weights = ctx.HasInput(2) ? &ctx.Input(2) : nullptr;
  const LossGeometry g = CheckLossInputs(ctx, scores, labels, weights);
  ParseLossReduction(ctx.node());                                     // validate before computing anything
  Tensor* log_prob = &ctx.Output(1, scores.shape(), scores.dtype());  // scratch when not requested
  VisitFloat(scores.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* lp = log_prob->template data<T>();
    SoftmaxAlongAxis<T>(scores.data<T>(), lp, g.batch, g.classes, g.positions, SoftmaxMode::kLogSoftmax, ctx.threads());
    NllFromLogProb<T>(ctx, g, lp, labels, weights, ignore_index);
  });
}

// Output 0 = (exp(log_prob) - onehot(labels)) * scale[position], computed in log_prob's type.
Tensor& SoftmaxCrossEntropyLossBackward(KernelContext& ctx, const LossGeometry& g, const Tensor& log_prob,
                                        FunctionRef<int64_t(int64_t)> label_at, FunctionRef<double(int64_t)> scale_at) {
  const Node& node = ctx.node();
  for (int64_t p = 0; p < g.batch * g.positions; ++p) {
    const int64_t label = label_at(p);
    ET_CHECK(label >= 0 && label < g.classes, ErrorCode::kOutOfRange, node.Describe(), ": label ", label,
             " is out of range for ", g.classes, " classes");
  }
  Tensor& dx = ctx.Output(0, log_prob.shape(), log_prob.dtype());
  VisitFloat(log_prob.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* lp = log_prob.data<T>();
    T* out = dx.data<T>();
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, g.classes * g.positions));
    ctx.threads().ParallelFor(g.batch, grain, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        for (int64_t c = 0; c < g.classes; ++c) {
          const int64_t row = (n * g.classes + c) * g.positions;
          for (int64_t d = 0; d < g.positions; ++d) {
            const int64_t position = n * g.positions + d;
            const T hot = label_at(position) == c ? T{1} : T{0};
            out[row + d] = (std::exp(lp[row + d]) - hot) * static_cast<T>(scale_at(position));
          }
        }
      }
    });
  });
  return dx;
}

namespace {

void SoftmaxCrossEntropyLossKernel(KernelContext& ctx) {
  SoftmaxCrossEntropyLossForward(ctx, IgnoreIndexAttribute(ctx.node()));
}

// ai.edgetrain.SoftmaxCrossEntropyLossGrad(scale, log_prob, labels) ->
// (exp(log_prob) - onehot(labels, axis 1)) * scale[:, None, ...]. log_prob is [N, C, d1, ...];
// scale and labels (int32/int64, each in [0, C)) are [N, d1, ...]. `scale` is d loss / d (-log_prob
// at the label): the rule folds reduction, class weights and ignore_index into it.
void SoftmaxCrossEntropyLossGradKernel(KernelContext& ctx) {
  const Tensor& scale = ctx.Input(0);
  const Tensor& log_prob = ctx.Input(1);
  const Tensor& labels = ctx.Input(2);
  const LossGeometry g = CheckLossInputs(ctx, log_prob, labels, nullptr);
  ET_CHECK(scale.shape() == g.per_position_shape && scale.dtype() == log_prob.dtype(), ErrorCode::kInvalidArgument,
           ctx.node().Describe(), ": scale ", ShapeToString(scale.shape()), " must be ",
           ShapeToString(g.per_position_shape), " of the log_prob's element type");
  SoftmaxCrossEntropyLossBackward(
      ctx, g, log_prob, [&](int64_t p) { return labels.Int64At(p); }, [&](int64_t p) { return scale.DoubleAt(p); });
}

std::shared_ptr<const FunctionDef> SoftmaxCrossEntropyLossGradFunction() {
  FunctionBuilder f("SoftmaxCrossEntropyLossGrad", {"scale", "log_prob", "labels"}, {"dX"});
  f.Ints("one", {1});
  f.Constant("off_on", Tensor::FromVector<float>({0.0f, 1.0f}, {2}));
  f.Op("Shape", {"log_prob"}, "classes", {{"start", Attribute::Int(1)}, {"end", Attribute::Int(2)}});
  f.Op("CastLike", {"off_on", "log_prob"}, "values");
  f.Op("OneHot", {"labels", "classes", "values"}, "onehot", {{"axis", Attribute::Int(1)}});
  f.Op("Exp", {"log_prob"}, "prob");
  f.Op("Sub", {"prob", "onehot"}, "residual");
  f.Op("Unsqueeze", {"scale", "one"}, "scale_column");
  f.Op("Mul", {"residual", "scale_column"}, "dX");
  return f.Build();
}

// What the rules of both losses share: labels with ignored ones replaced by class 0, and the
// per-position scale d loss / d (-input at the label) = dloss * weight(label) [/ total weight for
// 'mean'], 0 where the label is ignored. `like` is the float input, for element types.
struct LossBackward {
  std::string labels, scale;
};

LossBackward LossBackwardScale(GradientContext& g, const std::string& like) {
  const Node& node = g.node();
  const std::string reduction = node.GetString("reduction", "mean");
  ET_CHECK(reduction == "none" || reduction == "sum" || reduction == "mean", ErrorCode::kNotImplemented,
           node.Describe(), ": reduction '", reduction, "' is not supported (none/sum/mean)");
  LossBackward out;
  out.labels = g.X(1);
  std::string weight;  // [N, d1, ...] weight of each position; "" when all are 1
  if (node.HasAttr("ignore_index")) {
    auto label_constant = [&](int64_t v) { return g.Op("CastLike", {g.Constant(Tensor::Scalar<int64_t>(v)), g.X(1)}); };
    std::string kept = g.Op("Not", {g.Op("Equal", {g.X(1), label_constant(node.GetInt("ignore_index", 0))})});
    out.labels = g.Op("Where", {kept, g.X(1), label_constant(0)});
    weight = g.Op("CastLike", {kept, like});
  }
  if (g.NumInputs() > 2 && !g.X(2).empty()) {
    std::string class_weight = g.Op("Gather", {g.X(2), out.labels});
    weight = weight.empty() ? class_weight : g.Op("Mul", {weight, class_weight});
  }
  std::string dloss = g.dY(0);
  if (reduction == "mean") {
    std::string total = weight.empty() ? g.Op("CastLike", {g.Op("Size", {g.X(1)}), like})
                                       : g.Op("ReduceSum", {weight}, {{"keepdims", Attribute::Int(0)}});
    dloss = g.Op("Div", {dloss, total});
  }
  out.scale = weight.empty() ? g.Op("Expand", {dloss, g.ShapeOf(g.X(1))}) : g.Op("Mul", {dloss, weight});
  return out;
}

// NegativeLogLikelihoodLoss: d input = -onehot(label) * scale, along the class axis.
void NegativeLogLikelihoodLossGradient(GradientContext& g) {
  if (g.dY(0).empty()) return;
  LossBackward b = LossBackwardScale(g, g.X(0));
  std::string classes = g.Op("Shape", {g.X(0)}, {{"start", Attribute::Int(1)}, {"end", Attribute::Int(2)}});
  std::string values = g.Op("CastLike", {g.Constant(Tensor::FromVector<float>({0.0f, -1.0f}, {2})), g.X(0)});
  std::string onehot = g.Op("OneHot", {b.labels, classes, values}, {{"axis", Attribute::Int(1)}});
  g.SetGrad(0, g.Op("Mul", {onehot, g.Op("Unsqueeze", {b.scale, g.Ints({1})})}));
}

// SoftmaxCrossEntropyLoss: the fused (softmax - onehot) * scale for the loss, plus the LogSoftmax
// backward of the gradient reaching the optional log_prob output.
void SoftmaxCrossEntropyLossGradient(GradientContext& g) {
  std::string log_prob = g.Y(1);
  if (log_prob.empty()) log_prob = g.Op("LogSoftmax", {g.X(0)}, {{"axis", Attribute::Int(1)}});
  if (!g.dY(0).empty()) {
    LossBackward b = LossBackwardScale(g, g.X(0));
    g.SetGrad(0, g.Op("SoftmaxCrossEntropyLossGrad", {b.scale, log_prob, b.labels}, {}, kEdgetrainDomain));
  }
  if (!g.dY(1).empty()) {
    g.SetGrad(0, g.Op("LogSoftmaxGrad", {g.dY(1), log_prob}, {{"axis", Attribute::Int(1)}}, kEdgetrainDomain));
  }
}

}  // namespace

void RegisterLossOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossKernel);
  ET_IF_BUILT("", "NegativeLogLikelihoodLoss")
    r.SetGradient("NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossGradient);
  ET_REGISTER_ONNX(r, "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossKernel);
  ET_IF_BUILT("", "SoftmaxCrossEntropyLoss") r.SetGradient("SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossGradient);
  ET_IF_BUILT("ai.edgetrain", "SoftmaxCrossEntropyLossGrad")
    RegisterFused(r, "SoftmaxCrossEntropyLossGrad", SoftmaxCrossEntropyLossGradKernel,
                  ET_TRAINING_BODY(SoftmaxCrossEntropyLossGradFunction()));
}

}  // namespace edgetrain
