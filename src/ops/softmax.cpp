// Softmax, LogSoftmax, Hardmax. Before opset 13 the input is coerced to 2-D at `axis` (default 1)
// and each row of the flattened trailing dims is normalised; from opset 13 only `axis`
// (default -1) is normalised. Their gradients use the fused ai.edgetrain SoftmaxGrad and
// LogSoftmaxGrad, defined here with their standard-ONNX function bodies.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string_view>

#include "core/kernel_backend.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"
#include "ops/softmax_util.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include "ops/dnnl_util.hpp"
#endif

namespace edgetrain {
namespace {

struct SoftmaxView {
  int64_t outer = 1, n = 1, inner = 1;
};

// The normalised dims of `shape`: with `coerce_to_2d` (before opset 13) every dim from 'axis' on,
// else the single dim 'axis'.
SoftmaxView ViewForSoftmax(const Node& node, const Shape& shape, bool coerce_to_2d, int64_t default_axis) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  SoftmaxView v;
  if (coerce_to_2d) {
    // Coercion to 2-D: axis may equal rank (then every row has one element).
    int64_t axis = node.GetInt("axis", default_axis);
    ET_CHECK(axis >= -rank && axis <= rank, ErrorCode::kInvalidArgument, node.Describe(), ": axis ", axis,
             " is out of range for an input of rank ", rank);
    if (axis < 0) axis += rank;
    for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
    for (int64_t d = axis; d < rank; ++d) v.n *= shape[d];
    return v;
  }
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", default_axis), rank, node.Describe());
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.n = shape[axis];
  for (int64_t d = axis + 1; d < rank; ++d) v.inner *= shape[d];
  return v;
}

SoftmaxView ViewForSoftmax(const KernelContext& ctx, const Shape& shape) {
  const bool coerce_to_2d = ctx.opset() < 13;
  return ViewForSoftmax(ctx.node(), shape, coerce_to_2d, coerce_to_2d ? 1 : -1);
}

// ---- oneDNN path: float32 rows (the normalised dims contiguous) of at least kDnnlMinElements in all ----

[[maybe_unused]] constexpr int64_t kDnnlMinElements = 4096;  // read only when oneDNN is built in

enum class SoftmaxPass : int64_t { kForward, kBackward };

// Softmax or LogSoftmax over axis 1 of [rows, n].
struct DnnlSoftmaxConfig {
  SoftmaxPass pass;
  SoftmaxMode mode;
  int64_t rows, n;
};

#if defined(EDGETRAIN_WITH_DNNL)

// Forward: SRC -> DST; backward from the output: DST, DIFF_DST -> DIFF_SRC.
template <typename Forward, typename Backward>
dnnl_util::BoundPrimitive MakeSoftmax(const DnnlSoftmaxConfig& config) {
  using dnnl::memory;
  const memory::desc data({config.rows, config.n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::engine& engine = dnnl_util::CpuEngine();
  const typename Forward::desc forward(dnnl::prop_kind::forward_training, data, 1);
  if (config.pass == SoftmaxPass::kForward) {
    return dnnl_util::Bind<Forward>({forward, attr, engine}, {{DNNL_ARG_SRC, data}, {DNNL_ARG_DST, data}});
  }
  const typename Forward::primitive_desc hint(forward, engine);
  const typename Backward::desc backward(data, data, 1);
  const typename Backward::primitive_desc pd(backward, attr, engine, hint);
  if (std::string_view(pd.impl_info_str()).starts_with("ref")) {
    dnnl_util::BoundPrimitive refused;  // oneDNN's scalar fallback is slower than our reference kernel
    refused.refused = true;
    return refused;
  }
  return dnnl_util::Bind<Backward>(pd, {{DNNL_ARG_DST, data}, {DNNL_ARG_DIFF_DST, data}, {DNNL_ARG_DIFF_SRC, data}});
}

dnnl_util::BoundPrimitive MakeSoftmaxOrRefuse(const DnnlSoftmaxConfig& config) {
  try {
    return config.mode == SoftmaxMode::kSoftmax
               ? MakeSoftmax<dnnl::softmax_forward, dnnl::softmax_backward>(config)
               : MakeSoftmax<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward>(config);
  } catch (const dnnl::error&) {
    dnnl_util::BoundPrimitive refused;
    refused.refused = true;
    return refused;
  }
}

#endif

// Runs the pass on oneDNN when it applies: forward x -> out (y unused), backward (dy = x, y) -> out.
// False when the reference kernel must run.
bool DnnlSoftmax(KernelContext& ctx, SoftmaxPass pass, SoftmaxMode mode, const SoftmaxView& v, DataType dtype,
                 const void* x, const void* y, void* out) {
#if defined(EDGETRAIN_WITH_DNNL)
  if (!UseDnnl() || dtype != DataType::kFloat32 || v.inner != 1 || v.n <= 0 || v.outer <= 0 ||
      v.outer * v.n < kDnnlMinElements)
    return false;
  const DnnlSoftmaxConfig config{pass, mode, v.outer, v.n};
  thread_local dnnl_util::Key key;
  key.Clear();
  key.Add({static_cast<int64_t>(pass), static_cast<int64_t>(mode), v.outer, v.n});
  // Capturing one reference keeps the std::function in its small buffer (no allocation on a hit).
  dnnl_util::BoundPrimitive& bound =
      dnnl_util::Cached<dnnl_util::BoundPrimitive>(key, [&config] { return MakeSoftmaxOrRefuse(config); });
  if (bound.refused) return false;
  const int threads = ctx.threads().num_threads();
  if (pass == SoftmaxPass::kForward)
    return dnnl_util::Execute(bound, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, out}}, threads);
  return dnnl_util::Execute(bound, {{DNNL_ARG_DIFF_DST, x}, {DNNL_ARG_DST, y}, {DNNL_ARG_DIFF_SRC, out}}, threads);
#else
  (void)ctx, (void)pass, (void)mode, (void)v, (void)dtype, (void)x, (void)y, (void)out;
  return false;
#endif
}

template <SoftmaxMode kMode>
void SoftmaxKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const SoftmaxView v = ViewForSoftmax(ctx, x.shape());
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  if (DnnlSoftmax(ctx, SoftmaxPass::kForward, kMode, v, x.dtype(), x.raw(), nullptr, y.raw())) return;
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

// ai.edgetrain.SoftmaxGrad(dY, Y) -> Y * (dY - sum(dY * Y, axis)) and
// ai.edgetrain.LogSoftmaxGrad(dY, Y) -> dY - exp(Y) * sum(dY, axis): the input gradient of
// Softmax / LogSoftmax given their output Y (the fused ops: single axis, default -1).
void SoftmaxBackwardKernel(KernelContext& ctx, SoftmaxMode mode, bool coerce_to_2d, int64_t default_axis) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& y = ctx.Input(1);
  const Node& node = ctx.node();
  ET_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
           ": dY ", ShapeToString(dy.shape()), " and Y ", ShapeToString(y.shape()),
           " must have the same shape and element type");
  const SoftmaxView v = ViewForSoftmax(node, y.shape(), coerce_to_2d, default_axis);
  Tensor& dx = ctx.Output(0, y.shape(), y.dtype());
  if (DnnlSoftmax(ctx, SoftmaxPass::kBackward, mode, v, y.dtype(), dy.raw(), y.raw(), dx.raw())) return;
  VisitFloat(y.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy_data = dy.data<T>();
    const T* y_data = y.data<T>();
    T* dx_data = dx.data<T>();
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, v.n));
    ctx.threads().ParallelFor(v.outer * v.inner, grain, [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t base = (unit / v.inner) * v.n * v.inner + unit % v.inner;
        double total = 0.0;
        for (int64_t j = 0; j < v.n; ++j) {
          const int64_t k = base + j * v.inner;
          total += mode == SoftmaxMode::kSoftmax ? static_cast<double>(dy_data[k]) * y_data[k] : dy_data[k];
        }
        const T sum = static_cast<T>(total);
        for (int64_t j = 0; j < v.n; ++j) {
          const int64_t k = base + j * v.inner;
          if (mode == SoftmaxMode::kSoftmax) dx_data[k] = y_data[k] * (dy_data[k] - sum);
          else dx_data[k] = dy_data[k] - std::exp(y_data[k]) * sum;
        }
      }
    });
  });
}

namespace {

template <SoftmaxMode kMode>
void FusedSoftmaxBackwardKernel(KernelContext& ctx) {
  SoftmaxBackwardKernel(ctx, kMode, /*coerce_to_2d=*/false, /*default_axis=*/-1);
}

// The same in standard ONNX ops; the call's `axis` becomes the ReduceSum axes input.
std::shared_ptr<const FunctionDef> SoftmaxBackwardFunction(SoftmaxMode mode) {
  FunctionBuilder f(mode == SoftmaxMode::kSoftmax ? "SoftmaxGrad" : "LogSoftmaxGrad", {"dY", "Y"}, {"dX"}, {"axis"});
  f.Op("Constant", {}, "axis", {{"value_int", Attribute::Ref(Attribute::Kind::kInt, "axis")}});
  f.Ints("zero", {0});
  f.Op("Unsqueeze", {"axis", "zero"}, "axes");
  const AttributeMap keep = {{"keepdims", Attribute::Int(1)}};
  if (mode == SoftmaxMode::kSoftmax) {
    f.Op("Mul", {"dY", "Y"}, "product");
    f.Op("ReduceSum", {"product", "axes"}, "sum", keep);
    f.Op("Sub", {"dY", "sum"}, "centered");
    f.Op("Mul", {"Y", "centered"}, "dX");
  } else {
    f.Op("ReduceSum", {"dY", "axes"}, "sum", keep);
    f.Op("Exp", {"Y"}, "prob");
    f.Op("Mul", {"prob", "sum"}, "spread");
    f.Op("Sub", {"dY", "spread"}, "dX");
  }
  return f.Build();
}

// Softmax/LogSoftmax: the fused backward from the output. Before opset 13 the rows are the
// trailing dims flattened from `axis` (default 1), so the same 2-D view is taken here.
template <SoftmaxMode kMode>
void SoftmaxGradient(GradientContext& g) {
  const char* fused = kMode == SoftmaxMode::kSoftmax ? "SoftmaxGrad" : "LogSoftmaxGrad";
  const Node& node = g.node();
  if (g.opset() >= 13) {
    g.SetGrad(0, g.Op(fused, {g.dY(0), g.Y(0)}, {{"axis", Attribute::Int(node.GetInt("axis", -1))}},
                      kEdgetrainDomain));
    return;
  }
  const AttributeMap flatten = {{"axis", Attribute::Int(node.GetInt("axis", 1))}};
  std::string dy_rows = g.Op("Flatten", {g.dY(0)}, flatten);
  std::string y_rows = g.Op("Flatten", {g.Y(0)}, flatten);
  std::string dx_rows = g.Op(fused, {dy_rows, y_rows}, {{"axis", Attribute::Int(1)}}, kEdgetrainDomain);
  g.SetGrad(0, g.Op("Reshape", {dx_rows, g.ShapeOf(g.X(0))}));
}

}  // namespace

void RegisterSoftmaxOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Softmax", SoftmaxKernel<SoftmaxMode::kSoftmax>);
  ET_IF_BUILT("", "Softmax") r.SetGradient("Softmax", SoftmaxGradient<SoftmaxMode::kSoftmax>);
  ET_REGISTER_ONNX(r, "LogSoftmax", SoftmaxKernel<SoftmaxMode::kLogSoftmax>);
  ET_IF_BUILT("", "LogSoftmax") r.SetGradient("LogSoftmax", SoftmaxGradient<SoftmaxMode::kLogSoftmax>);
  ET_REGISTER_ONNX(r, "Hardmax", HardmaxKernel);
  ET_IF_BUILT("ai.edgetrain", "SoftmaxGrad")
    RegisterFused(r, "SoftmaxGrad", FusedSoftmaxBackwardKernel<SoftmaxMode::kSoftmax>,
                  ET_TRAINING_BODY(SoftmaxBackwardFunction(SoftmaxMode::kSoftmax)));
  ET_IF_BUILT("ai.edgetrain", "LogSoftmaxGrad")
    RegisterFused(r, "LogSoftmaxGrad", FusedSoftmaxBackwardKernel<SoftmaxMode::kLogSoftmax>,
                  ET_TRAINING_BODY(SoftmaxBackwardFunction(SoftmaxMode::kLogSoftmax)));
}

}  // namespace edgetrain
