// Kernels and kernel math that more than one operator uses: edgetrain's fused ai.edgetrain ops and
// ONNX Runtime's com.microsoft ops (ort_gradients.cpp, ort_fused.cpp) compute the same things with
// different input orders, defaults and attributes. Each function lives in its family's file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/function_ref.hpp"
#include "ops/batchnorm_fast.hpp"
#include "ops/conv_dnnl.hpp"
#include "ops/kernel.hpp"
#include "ops/softmax_util.hpp"

namespace edgetrain {

// ---- activation.cpp: (dY, Y) -> dX ----
void ReluGradKernel(KernelContext& ctx);     // dY where Y > 0 (X > 0 gives the same), else 0
void SigmoidGradKernel(KernelContext& ctx);  // dY * Y * (1 - Y)
void TanhGradKernel(KernelContext& ctx);     // dY * (1 - Y^2)

// ---- elementwise.cpp ----
// Clip's bound at input `index` ("min" or "max"): null when the node leaves it out, else the tensor, which must be
// a single value of X's type (kInvalidArgument naming the node and the bound otherwise).
const Tensor* ClipBound(KernelContext& ctx, size_t index, const char* name, const Tensor& x);

// ---- softmax.cpp ----
// (dY, Y) -> dX for Softmax/LogSoftmax with output Y, attribute 'axis' (else `default_axis`). With
// `coerce_to_2d` (Softmax before opset 13) the dims from axis on are normalised together.
void SoftmaxBackwardKernel(KernelContext& ctx, SoftmaxMode mode, bool coerce_to_2d, int64_t default_axis);

// ---- loss.cpp ----
enum class LossReduction { kNone, kSum, kMean };
LossReduction ParseLossReduction(const Node& node);             // attribute 'reduction', default "mean"
std::optional<int64_t> IgnoreIndexAttribute(const Node& node);  // attribute 'ignore_index' if present

// N samples, C classes, D positions per sample (product of d1, ...) of scores [N, C, d1, ...].
struct LossGeometry {
  int64_t batch = 0, classes = 0, positions = 1;
  Shape per_position_shape;  // [N, d1, ...]: the labels' shape and the 'none' output shape
};
// Checks scores [N, C, ...], int32/int64 labels [N, ...] and optional class weights [C].
LossGeometry CheckLossInputs(const KernelContext& ctx, const Tensor& scores, const Tensor& labels,
                             const Tensor* weights);
// SoftmaxCrossEntropyLoss(scores, labels, weights?) -> (loss, log_prob?) with the ignored label given.
void SoftmaxCrossEntropyLossForward(KernelContext& ctx, std::optional<int64_t> ignore_index);
// Output 0 = (exp(log_prob) - onehot(label_at(position), axis 1)) * scale_at(position), one label in
// [0, C) and one scale per position of `g`. Returns output 0.
Tensor& SoftmaxCrossEntropyLossBackward(KernelContext& ctx, const LossGeometry& g, const Tensor& log_prob,
                                        FunctionRef<int64_t(int64_t)> label_at, FunctionRef<double(int64_t)> scale_at);

// ---- matmul.cpp ----
// Shapes of one numpy matmul: A [a_batch..., m, k] x B [b_batch..., k, n] -> [batch..., m, n]; 1-D
// operands are promoted (and their unit dims left out of `out`), batch dims broadcast.
struct MatMulShapes {
  int64_t m = 0, k = 0, n = 0;
  Shape a_batch, b_batch, batch, out;
};
MatMulShapes PlanMatMul(const std::string& what, const Shape& a, const Shape& b);
// Offsets (in matrices) into a batch of shape `shape` for every index of the broadcast `out`.
std::vector<int64_t> BatchOffsets(const Shape& shape, const Shape& out);
// Runs product(i, pool) for i in [0, count): one product per thread, or (few large products) one
// after another with the pool passed on to split each. `work_per_product` counts multiply-adds.
void ForEachProduct(ThreadPool& pool, int64_t count, int64_t work_per_product,
                    FunctionRef<void(int64_t, ThreadPool*)> product);
// Gemm (attributes transA, transB, alpha, beta; optional C) into output 0, which it returns; with
// `relu` the output is max(Gemm, 0) (fused into oneDNN's matmul where that runs it).
Tensor& GemmForward(KernelContext& ctx, bool relu = false);

// ---- conv.cpp ----
// Conv (X, W, B?) with Conv's attributes into output 0, which it returns; with `relu` the output is
// max(Conv, 0), applied inside the kernel (a oneDNN post-op, or per image on the reference path).
Tensor& ConvForwardKernel(KernelContext& ctx, bool relu);
// (dY, X, W) -> (dX, dW, dB) of Conv with Conv's attributes; only requested outputs are computed.
void ConvGradKernel(KernelContext& ctx);

// ---- pool.cpp ----
// The windows of MaxPool/AveragePool over an input of shape `x` from the node's attributes
// kernel_shape, strides, dilations (when allowed), pads, auto_pad and ceil_mode, each named with
// `prefix` first (ConvReluMaxPool's "pool_").
PoolGeometry ReadPoolGeometry(const KernelContext& ctx, const Shape& x, bool allow_dilations,
                              std::string_view prefix = "");
// Y = MaxPool(X) over the windows of `g`, and the flat index of each maximum when `indices` is not
// null (row-major within each plane, column-major with storage_order 1).
void MaxPoolCompute(KernelContext& ctx, const Tensor& x, const PoolGeometry& g, Tensor& y, int64_t* indices = nullptr,
                    int64_t storage_order = 0);
// dX of AveragePool (its attributes on the node) for an input of shape `x_shape`, as output 0.
void AveragePoolBackward(KernelContext& ctx, const Tensor& dy, const Shape& x_shape);

// ---- normalization.cpp ----
// Centered (LayerNormalization): (dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB). Not centered
// (RMS normalization, ORT's SimplifiedLayerNormalization): (dY, X, Scale, InvStdDev) -> (dX, dScale).
// Attribute 'axis' (default -1) is the first normalized dim.
void LayerNormalizationBackward(KernelContext& ctx, bool centered);
// BatchNormalization: training mode from attribute 'training_mode' at opset >= 14 (ctx.opset()), else
// from the node declaring any statistics output (so ORT's BatchNormInternal runs it as is); outputs
// Y, running mean, running var, batch mean, batch 1/sqrt(var + epsilon).
void BatchNormalizationKernel(KernelContext& ctx);
// Training-mode backward: (dY, X, scale) -> (dX, dScale, dBias). With `saved_statistics` the batch
// mean and 1/std are inputs 3 and 4 (ORT's BatchNormalizationGrad), else recomputed with 'epsilon'.
void BatchNormalizationBackward(KernelContext& ctx, bool saved_statistics);
// ai.edgetrain.ChannelAffine's y = activation(x * affine[0, c] + affine[1, c]) for the kernels that apply it to
// their input (ChannelAffineConv): the node's attribute `activation` ("", "Relu", "Clip"; Clip's bounds at inputs
// min_index and min_index + 1), X of rank >= 2, the map X's type and [2, C] (kInvalidArgument naming the node).
struct ChannelAffineMap {
  batchnorm::Activation::Kind kind = batchnorm::Activation::Kind::kNone;
  double low = 0, high = 0;
  // Applied by batchnorm::ApplyAffine on batchnorm::BestIsa(): a pass on that ISA that applies batchnorm::AffineRow
  // itself gives the same bits.
  bool fast = false;
  batchnorm::Activation ForFloat() const { return {kind, static_cast<float>(low), static_cast<float>(high)}; }
};
ChannelAffineMap ReadChannelAffineMap(KernelContext& ctx, const Tensor& x, const Tensor& affine, size_t min_index);
// y (X's shape and type) = the map applied to X, as ChannelAffine computes it.
void ApplyChannelAffineMap(KernelContext& ctx, const ChannelAffineMap& map, const Tensor& x, const Tensor& affine,
                           Tensor& y);

// ---- random.cpp ----
// Output 0 = keep ? X / (1 - ratio) : 0 with `keep` (numel of X flags) drawn with probability
// 1 - ratio from the node's 'seed' or the session's generator; when not training or ratio is 0 the
// output is X and every flag is true.
void DropoutForward(KernelContext& ctx, const Tensor& x, double ratio, bool training, bool* keep);
// Output 0 = keep ? dY / (1 - ratio) : 0 when training, else dY. `keep` holds numel(dY) flags.
void DropoutBackward(KernelContext& ctx, const Tensor& dy, const bool* keep, double ratio, bool training);

// ---- indexing.cpp ----
// Output 0 = zeros of data_shape with the slices of dY added where Gather (attribute 'axis', default
// 0) read them; repeated indices accumulate.
void GatherBackward(KernelContext& ctx, const Tensor& dy, const Tensor& indices, const Shape& data_shape);
// out[...] += updates[...] at the positions GatherElements along `axis` would read with `indices`.
void ScatterAddElements(const KernelContext& ctx, Tensor& out, const Tensor& indices, const Tensor& updates,
                        int64_t axis);

// ---- shape.cpp ----
// (dY, x_shape, starts, ends, axes?, steps?) -> zeros of x_shape with dY where Slice read X.
void SliceGradKernel(KernelContext& ctx);

// ---- reduction.cpp ----
// ReduceSum with axes from input 1 (or attribute 'axes'), keepdims and noop_with_empty_axes.
void ReduceSumKernel(KernelContext& ctx);
// Output `output` = g summed over the axes along which `target` broadcasts to g's shape.
void SumToShape(KernelContext& ctx, const Tensor& g, const Shape& target, size_t output);

}  // namespace edgetrain
