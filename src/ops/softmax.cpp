// Softmax, LogSoftmax, Hardmax. Before opset 13 the input is coerced to 2-D at `axis` (default 1)
// and each row of the flattened trailing dims is normalised; from opset 13 only `axis`
// (default -1) is normalised.
#include <algorithm>
#include <cmath>

#include "ops/registry.hpp"
#include "ops/softmax_util.hpp"

namespace edgetrain {
namespace {

struct SoftmaxView {
  int64_t outer = 1, n = 1, inner = 1;
};

SoftmaxView ViewForSoftmax(const KernelContext& ctx, const Shape& shape) {
  const Node& node = ctx.node();
  const int64_t rank = static_cast<int64_t>(shape.size());
  SoftmaxView v;
  if (ctx.opset() < 13) {
    // Coercion to 2-D: axis may equal rank (then every row has one element).
    int64_t axis = node.GetInt("axis", 1);
    ET_CHECK(axis >= -rank && axis <= rank, ErrorCode::kInvalidArgument, node.Describe(), ": axis ", axis,
             " is out of range for an input of rank ", rank);
    if (axis < 0) axis += rank;
    for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
    for (int64_t d = axis; d < rank; ++d) v.n *= shape[d];
    return v;
  }
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), rank, node.Describe());
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.n = shape[axis];
  for (int64_t d = axis + 1; d < rank; ++d) v.inner *= shape[d];
  return v;
}

template <SoftmaxMode kMode>
void SoftmaxKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const SoftmaxView v = ViewForSoftmax(ctx, x.shape());
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    SoftmaxAlongAxis<T>(x.data<T>(), y.data<T>(), v.outer, v.n, v.inner, kMode, ctx.threads());
  });
}

// One-hot of the first maximum along the normalised dims.
void HardmaxKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const SoftmaxView v = ViewForSoftmax(ctx, x.shape());
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    if (v.n == 0) return;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / v.n);
    ctx.threads().ParallelFor(v.outer * v.inner, grain, [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t o = unit / v.inner, i = unit % v.inner;
        const int64_t base = o * v.n * v.inner + i;
        int64_t best = 0;
        for (int64_t j = 1; j < v.n; ++j) {
          if (in[base + j * v.inner] > in[base + best * v.inner]) best = j;
        }
        for (int64_t j = 0; j < v.n; ++j) out[base + j * v.inner] = j == best ? T{1} : T{0};
      }
    });
  });
}

}  // namespace

void RegisterSoftmaxOps(OpRegistry& r) {
  RegisterOnnx(r, "Softmax", SoftmaxKernel<SoftmaxMode::kSoftmax>);
  RegisterOnnx(r, "LogSoftmax", SoftmaxKernel<SoftmaxMode::kLogSoftmax>);
  RegisterOnnx(r, "Hardmax", HardmaxKernel);
}

}  // namespace edgetrain
