// Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (= LogSoftmax over the class axis,
// then NLL). Inputs are [N, C] or [N, C, d1, ...], labels [N] or [N, d1, ...].
#include <cmath>
#include <string>
#include <vector>

#include "ops/registry.hpp"
#include "ops/softmax_util.hpp"

namespace edgetrain {
namespace {

enum class Reduction { kNone, kSum, kMean };

Reduction ParseReduction(const Node& node) {
  const std::string value = node.GetString("reduction", "mean");
  if (value == "none") return Reduction::kNone;
  if (value == "sum") return Reduction::kSum;
  if (value == "mean") return Reduction::kMean;
  Fail(ErrorCode::kNotImplemented, node.Describe(), ": reduction '", value, "' is not supported (none/sum/mean)");
}

// Validated problem geometry: N samples, C classes, D positions per sample (product of d1, ...).
struct LossGeometry {
  int64_t batch = 0, classes = 0, positions = 1;
  Shape per_position_shape;  // [N, d1, ...]: the labels' shape and the 'none' output shape
};

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
           ShapeToString(labels.shape()), " does not match input shape ", ShapeToString(scores.shape()),
           " (expected ", ShapeToString(g.per_position_shape), ")");
  if (weights != nullptr) {
    ET_CHECK(weights->shape() == Shape{g.classes}, ErrorCode::kInvalidArgument, node.Describe(), ": weights shape ",
             ShapeToString(weights->shape()), " must be [", g.classes, "]");
    ET_CHECK(weights->dtype() == scores.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
             ": weights must have the input's element type ", DataTypeName(scores.dtype()));
  }
  return g;
}

// NLL over log-probabilities `log_prob` laid out [N, C, D]; writes output 0.
template <typename T>
void NllFromLogProb(KernelContext& ctx, const LossGeometry& g, const T* log_prob, const Tensor& labels_tensor,
                    const Tensor* weights_tensor) {
  const Node& node = ctx.node();
  const Reduction reduction = ParseReduction(node);
  const bool has_ignore = node.HasAttr("ignore_index");
  const int64_t ignore_index = node.GetInt("ignore_index", 0);
  const std::vector<int64_t> labels = labels_tensor.ToInt64Vector();
  for (int64_t label : labels) {
    if (has_ignore && label == ignore_index) continue;
    ET_CHECK(label >= 0 && label < g.classes, ErrorCode::kOutOfRange, node.Describe(), ": label ", label,
             " is out of range for ", g.classes, " classes");
  }
  const T* weights = weights_tensor != nullptr ? weights_tensor->data<T>() : nullptr;

  Tensor& out = ctx.Output(0, reduction == Reduction::kNone ? g.per_position_shape : Shape{}, DataTypeOf<T>());
  T* per_position = reduction == Reduction::kNone ? out.data<T>() : nullptr;
  double loss_sum = 0.0, weight_sum = 0.0;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t d = 0; d < g.positions; ++d) {
      const int64_t label = labels[n * g.positions + d];
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
  if (reduction == Reduction::kSum) out.data<T>()[0] = static_cast<T>(loss_sum);
  if (reduction == Reduction::kMean) out.data<T>()[0] = static_cast<T>(loss_sum / weight_sum);
}

void NegativeLogLikelihoodLossKernel(KernelContext& ctx) {
  const Tensor& input = ctx.Input(0);
  const Tensor& labels = ctx.Input(1);
  const Tensor* weights = ctx.HasInput(2) ? &ctx.Input(2) : nullptr;
  const LossGeometry g = CheckLossInputs(ctx, input, labels, weights);
  VisitFloat(input.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    NllFromLogProb<T>(ctx, g, input.data<T>(), labels, weights);
  });
}

void SoftmaxCrossEntropyLossKernel(KernelContext& ctx) {
  const Tensor& scores = ctx.Input(0);
  const Tensor& labels = ctx.Input(1);
  const Tensor* weights = ctx.HasInput(2) ? &ctx.Input(2) : nullptr;
  const LossGeometry g = CheckLossInputs(ctx, scores, labels, weights);
  ParseReduction(ctx.node());  // validate before computing anything
  Tensor log_prob_scratch;
  Tensor* log_prob = nullptr;
  if (ctx.HasOutput(1)) {
    log_prob = &ctx.Output(1, scores.shape(), scores.dtype());
  } else {
    log_prob_scratch = Tensor(scores.dtype(), scores.shape(), ctx.node().Describe() + " log_prob");
    log_prob = &log_prob_scratch;
  }
  VisitFloat(scores.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* lp = log_prob->template data<T>();
    SoftmaxAlongAxis<T>(scores.data<T>(), lp, g.batch, g.classes, g.positions, SoftmaxMode::kLogSoftmax,
                        ctx.threads());
    NllFromLogProb<T>(ctx, g, lp, labels, weights);
  });
}

}  // namespace

void RegisterLossOps(OpRegistry& r) {
  RegisterOnnx(r, "NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossKernel);
  RegisterOnnx(r, "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossKernel);
}

}  // namespace edgetrain
