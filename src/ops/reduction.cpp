// Reductions: Reduce* (one generic driver, one small reducer struct per op), ArgMax/ArgMin,
// CumSum and TopK.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "ops/elementwise_util.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

// Roughly how many element visits one parallel chunk should get.
constexpr int64_t kWorkPerChunk = 1 << 15;

int64_t GrainFor(int64_t work_per_item) {
  return std::max<int64_t>(1, kWorkPerChunk / std::max<int64_t>(1, work_per_item));
}

// Accumulator type wide enough for sums: double for floats, 64-bit for integers.
template <typename T>
using WideT =
    std::conditional_t<std::is_floating_point_v<T>, double, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// Each reducer: Acc, Init(), Update(acc, x), Finish(acc, count) -> T.
template <typename T>
struct SumReducer {
  static constexpr bool kPlainSum = true;  // Finish(sum of the values): float rows may take SumInDouble
  using Acc = WideT<T>;
  static Acc Init() { return Acc{0}; }
  static void Update(Acc& acc, T x) { acc += static_cast<Acc>(x); }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(acc); }
};

template <typename T>
struct MeanReducer {
  static constexpr bool kPlainSum = true;
  using Acc = WideT<T>;
  static Acc Init() { return Acc{0}; }
  static void Update(Acc& acc, T x) { acc += static_cast<Acc>(x); }
  static T Finish(Acc acc, int64_t count) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(acc / static_cast<double>(count));  // NaN for an empty reduction
    } else {
      return count == 0 ? T{0} : static_cast<T>(acc / static_cast<Acc>(count));
    }
  }
};

template <typename T>
struct ProdReducer {
  using Acc = WideT<T>;
  static Acc Init() { return Acc{1}; }
  static void Update(Acc& acc, T x) { acc *= static_cast<Acc>(x); }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(acc); }
};

template <typename T>
bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(x);
  else
    return false;
}

// Max/Min propagate NaN (as numpy does); an empty reduction gives -inf/+inf (lowest/max for ints).
template <typename T>
struct MaxReducer {
  using Acc = T;
  static Acc Init() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
  static void Update(Acc& acc, T x) {
    if (x > acc || IsNan(x)) acc = x;
  }
  static T Finish(Acc acc, int64_t) { return acc; }
};

template <typename T>
struct MinReducer {
  using Acc = T;
  static Acc Init() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
  static void Update(Acc& acc, T x) {
    if (x < acc || IsNan(x)) acc = x;
  }
  static T Finish(Acc acc, int64_t) { return acc; }
};

template <typename T>
struct L1Reducer {
  using Acc = WideT<T>;
  static Acc Init() { return Acc{0}; }
  static void Update(Acc& acc, T x) {
    if constexpr (std::is_signed_v<T>)
      acc += static_cast<Acc>(x < 0 ? -x : x);
    else
      acc += static_cast<Acc>(x);
  }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(acc); }
};

template <typename T>
struct SumSquareReducer {
  using Acc = WideT<T>;
  static Acc Init() { return Acc{0}; }
  static void Update(Acc& acc, T x) { acc += static_cast<Acc>(x) * static_cast<Acc>(x); }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(acc); }
};

template <typename T>
struct L2Reducer {
  using Acc = double;
  static Acc Init() { return 0.0; }
  static void Update(Acc& acc, T x) { acc += static_cast<double>(x) * static_cast<double>(x); }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(std::sqrt(acc)); }
};

template <typename T>
struct LogSumReducer {
  using Acc = double;
  static Acc Init() { return 0.0; }
  static void Update(Acc& acc, T x) { acc += static_cast<double>(x); }
  static T Finish(Acc acc, int64_t) { return static_cast<T>(std::log(acc)); }
};

// Streaming log-sum-exp: keeps the running max and the sum of exp(x - max).
struct LogSumExpAcc {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0.0;
};

template <typename T>
struct LogSumExpReducer {
  using Acc = LogSumExpAcc;
  static Acc Init() { return {}; }
  static void Update(Acc& acc, T x) {
    double v = static_cast<double>(x);
    if (v == -std::numeric_limits<double>::infinity()) return;
    if (v > acc.max) {
      acc.sum = acc.sum * std::exp(acc.max - v) + 1.0;
      acc.max = v;
    } else {
      acc.sum += std::exp(v - acc.max);
    }
  }
  static T Finish(Acc acc, int64_t) {
    if (acc.sum == 0.0) return static_cast<T>(-std::numeric_limits<double>::infinity());
    return static_cast<T>(acc.max + std::log(acc.sum));
  }
};

// How a reduction walks its input. Contiguous when the reduced axes form one block once size-1
// dims are dropped: input is then [outer, reduced, inner]. Otherwise a general offset walk.
struct ReducePlan {
  Shape out_shape;
  bool identity = false;  // noop_with_empty_axes with no axes: output is a copy
  bool contiguous = true;
  int64_t outer = 1, reduced = 1, inner = 1;
  // General walk: offsets of every reduced position, and the kept dims/strides in order.
  std::vector<int64_t> reduced_offsets;
  Int64Vector kept_dims, kept_strides;
  int64_t num_outputs = 1;
};

ReducePlan PlanReduction(const KernelContext& ctx, const Shape& in_shape, const Int64Vector& axes, bool keepdims,
                         bool noop_with_empty_axes) {
  ReducePlan plan;
  const int64_t rank = static_cast<int64_t>(in_shape.size());
  if (axes.empty() && noop_with_empty_axes) {
    plan.identity = true;
    plan.out_shape = in_shape;
    return plan;
  }
  Int64Vector is_reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t axis : axes) {
    ET_CHECK(axis >= -rank && axis < rank, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": axis ", axis,
             " is out of range for an input of rank ", rank);
    int64_t a = axis < 0 ? axis + rank : axis;
    ET_CHECK(!is_reduced[a], ErrorCode::kInvalidArgument, ctx.node().Describe(), ": axis ", axis,
             " is listed more than once");
    is_reduced[a] = true;
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (!is_reduced[d])
      plan.out_shape.push_back(in_shape[d]);
    else if (keepdims)
      plan.out_shape.push_back(1);
  }

  // Merge neighbouring dims of the same kind, skipping size-1 dims which change no offsets.
  Int64Vector group_size, group_reduced;
  for (int64_t d = 0; d < rank; ++d) {
    if (in_shape[d] == 1) continue;
    if (!group_size.empty() && group_reduced.back() == is_reduced[d]) {
      group_size.back() *= in_shape[d];
    } else {
      group_size.push_back(in_shape[d]);
      group_reduced.push_back(is_reduced[d]);
    }
  }
  const size_t groups = group_size.size();
  int reduced_groups = 0;
  for (size_t g = 0; g < groups; ++g) {
    reduced_groups += group_reduced[g] ? 1 : 0;
    if (!group_reduced[g]) plan.num_outputs *= group_size[g];
  }

  if (reduced_groups <= 1) {
    bool seen_reduced = false;
    for (size_t g = 0; g < groups; ++g) {
      if (group_reduced[g]) {
        plan.reduced = group_size[g];
        seen_reduced = true;
      } else if (seen_reduced) {
        plan.inner *= group_size[g];
      } else {
        plan.outer *= group_size[g];
      }
    }
    return plan;
  }

  plan.contiguous = false;
  Int64Vector group_strides(groups);
  int64_t stride = 1;
  for (size_t i = groups; i-- > 0;) {
    group_strides[i] = stride;
    stride *= group_size[i];
  }
  plan.reduced_offsets = {0};
  for (size_t i = 0; i < groups; ++i) {
    if (group_reduced[i]) {
      std::vector<int64_t> expanded;
      expanded.reserve(plan.reduced_offsets.size() * group_size[i]);
      for (int64_t base : plan.reduced_offsets) {
        for (int64_t k = 0; k < group_size[i]; ++k) expanded.push_back(base + k * group_strides[i]);
      }
      plan.reduced_offsets = std::move(expanded);
    } else {
      plan.kept_dims.push_back(group_size[i]);
      plan.kept_strides.push_back(group_strides[i]);
    }
  }
  // The offset walk above runs in row-major order; sort so reads go forward in memory.
  std::sort(plan.reduced_offsets.begin(), plan.reduced_offsets.end());
  plan.reduced = static_cast<int64_t>(plan.reduced_offsets.size());
  return plan;
}

template <template <typename> class Reducer, typename T>
void RunReduction(const ReducePlan& plan, const T* in, T* out, ThreadPool& pool) {
  using R = Reducer<T>;
  using Acc = typename R::Acc;
  const int64_t reduced = plan.reduced;
  if (!plan.contiguous) {
    const size_t kept_rank = plan.kept_dims.size();
    pool.ParallelFor(plan.num_outputs, GrainFor(reduced), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        int64_t rest = o, base = 0;
        for (size_t k = kept_rank; k-- > 0;) {
          base += (rest % plan.kept_dims[k]) * plan.kept_strides[k];
          rest /= plan.kept_dims[k];
        }
        Acc acc = R::Init();
        for (int64_t offset : plan.reduced_offsets) R::Update(acc, in[base + offset]);
        out[o] = R::Finish(acc, reduced);
      }
    });
    return;
  }
  const int64_t outer = plan.outer, inner = plan.inner;
  if (inner == 1) {
    pool.ParallelFor(outer, GrainFor(reduced), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* row = in + o * reduced;
        if constexpr (std::is_same_v<T, float> && requires { R::kPlainSum; }) {
          out[o] = R::Finish(elementwise::SumInDouble(row, reduced), reduced);
          continue;
        }
        Acc acc = R::Init();
        for (int64_t j = 0; j < reduced; ++j) R::Update(acc, row[j]);
        out[o] = R::Finish(acc, reduced);
      }
    });
    return;
  }
  // inner > 1: accumulate a block of contiguous inner positions at once, row by row.
  constexpr int64_t kBlock = 256;
  const int64_t blocks_per_outer = (inner + kBlock - 1) / kBlock;
  pool.ParallelFor(outer * blocks_per_outer, GrainFor(reduced * kBlock), [&](int64_t begin, int64_t end) {
    std::array<Acc, kBlock> acc;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t o = unit / blocks_per_outer;
      const int64_t i0 = (unit % blocks_per_outer) * kBlock;
      const int64_t width = std::min(kBlock, inner - i0);
      for (int64_t i = 0; i < width; ++i) acc[i] = R::Init();
      const T* base = in + o * reduced * inner + i0;
      for (int64_t j = 0; j < reduced; ++j) {
        const T* row = base + j * inner;
        for (int64_t i = 0; i < width; ++i) R::Update(acc[i], row[i]);
      }
      T* dst = out + o * inner + i0;
      for (int64_t i = 0; i < width; ++i) dst[i] = R::Finish(acc[i], reduced);
    }
  });
}

template <template <typename> class Reducer>
void ReduceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Node& node = ctx.node();
  // Axes come from input 1 (ReduceSum from opset 13, the others from 18) or the 'axes' attribute.
  Int64Vector axes = ctx.IntsFromInputOrAttr(1, "axes").value_or(Int64Vector{});
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  const bool noop = node.GetInt("noop_with_empty_axes", 0) != 0;
  ReducePlan plan = PlanReduction(ctx, x.shape(), axes, keepdims, noop);
  Tensor& y = ctx.Output(0, plan.out_shape, x.dtype());
  if (plan.identity) {
    if (x.nbytes() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return;
  }
  // ReduceMax/ReduceMin-20 on bool: any/all, as max/min of the bytes 0 and 1 (an empty min gives 255: true).
  constexpr bool kMaxOrMin = std::is_same_v<Reducer<uint8_t>, MaxReducer<uint8_t>> ||
                             std::is_same_v<Reducer<uint8_t>, MinReducer<uint8_t>>;
  if (kMaxOrMin && x.dtype() == DataType::kBool) {
    ET_CHECK(ctx.opset() >= 20, ErrorCode::kNotImplemented, node.Describe(), ": bool input needs opset 20, this is ",
             ctx.opset());
    uint8_t* out = static_cast<uint8_t*>(y.raw());
    RunReduction<Reducer, uint8_t>(plan, static_cast<const uint8_t*>(x.raw()), out, ctx.threads());
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = out[i] != 0;
    return;
  }
  VisitNumeric(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    RunReduction<Reducer, T>(plan, x.data<T>(), y.data<T>(), ctx.threads());
  });
}

}  // namespace

void ReduceSumKernel(KernelContext& ctx) { ReduceKernel<SumReducer>(ctx); }

void SumToShape(KernelContext& ctx, const Tensor& g, const Shape& target, size_t output) {
  const Shape& from = g.shape();
  ET_CHECK(target.size() <= from.size(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": cannot sum ",
           ShapeToString(from), " to the larger rank of ", ShapeToString(target));
  size_t lead = from.size() - target.size();
  Int64Vector axes;
  for (size_t d = 0; d < from.size(); ++d) {
    if (d < lead) {
      axes.push_back(static_cast<int64_t>(d));
      continue;
    }
    int64_t t = target[d - lead];
    ET_CHECK(t == from[d] || t == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": shape ",
             ShapeToString(target), " does not broadcast to ", ShapeToString(from));
    if (t == 1 && from[d] != 1) axes.push_back(static_cast<int64_t>(d));
  }
  ReducePlan plan = PlanReduction(ctx, from, axes, true, true);
  Tensor& out = ctx.Output(output, target, g.dtype());
  if (plan.identity || out.numel() == g.numel()) {  // nothing to add up (at most axes of size 1)
    if (g.nbytes() > 0 && !out.SameData(g)) std::memcpy(out.raw(), g.raw(), g.nbytes());
    return;
  }
  VisitNumeric(g.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    RunReduction<SumReducer, T>(plan, g.data<T>(), out.data<T>(), ctx.threads());
  });
}

namespace {

// ai.edgetrain.SumToShape(G, shape): sums G over the axes along which `shape` was broadcast to G's
// shape (numpy rules), giving a tensor of `shape`. The autodiff walk's dynamic un-broadcast.
void SumToShapeKernel(KernelContext& ctx) {
  const Tensor& shape = ctx.Input(1);
  Shape target(static_cast<size_t>(shape.numel()));
  for (int64_t i = 0; i < shape.numel(); ++i) target[static_cast<size_t>(i)] = shape.Int64At(i);
  SumToShape(ctx, ctx.Input(0), target, 0);
}

// SumToShape in standard ONNX ops: axes = where the right-aligned target is 1 but G is not, plus
// the leading axes; ReduceSum keeping dims, then Reshape to the target.
std::shared_ptr<const FunctionDef> SumToShapeFunction() {
  FunctionBuilder f("SumToShape", {"G", "target"}, {"Y"});
  f.Ints("one", {1});
  f.Ints("minus_one", {-1});
  f.Node("Shape", {"G"}, {"g_shape"});
  f.Node("Shape", {"g_shape"}, {"g_rank"});
  f.Node("Shape", {"target"}, {"t_rank"});
  f.Node("Sub", {"g_rank", "t_rank"}, {"lead"});
  f.Node("ConstantOfShape", {"lead"}, {"ones"},
         {{"value", Attribute::TensorValue(Tensor::FromVector<int64_t>({1}, {1}))}});
  f.Node("Concat", {"ones", "target"}, {"padded"}, {{"axis", Attribute::Int(0)}});
  f.Node("Equal", {"padded", "one"}, {"target_is_one"});
  f.Node("Equal", {"g_shape", "one"}, {"g_is_one"});
  f.Node("Not", {"g_is_one"}, {"g_not_one"});
  f.Node("And", {"target_is_one", "g_not_one"}, {"reduce_mask"});
  f.Node("NonZero", {"reduce_mask"}, {"axes_2d"});
  f.Node("Reshape", {"axes_2d", "minus_one"}, {"axes"});
  f.Node("ReduceSum", {"G", "axes"}, {"reduced"},
         {{"keepdims", Attribute::Int(1)}, {"noop_with_empty_axes", Attribute::Int(1)}});
  f.Node("Reshape", {"reduced", "target"}, {"Y"});
  return f.Build();
}

// ReduceSum: dX = dY (with the reduced axes restored when keepdims=0) expanded to X's shape.
void ReduceSumGradient(GradientContext& g) {
  std::string dy = g.dY(0);
  bool keepdims = g.node().GetInt("keepdims", 1) != 0;
  bool has_axes = !g.X(1).empty() || g.node().HasAttr("axes");
  if (!has_axes && g.node().GetInt("noop_with_empty_axes", 0) != 0) {
    g.SetGrad(0, dy);
    return;
  }
  if (!keepdims && has_axes) {
    std::string axes = !g.X(1).empty() ? g.X(1) : g.Ints(g.node().GetInts("axes"));
    dy = g.Op("Unsqueeze", {dy, axes});
  }
  g.SetGrad(0, g.Op("Expand", {dy, g.ShapeOf(g.X(0))}));
}

// How a Reduce* node names its reduced axes, read the way the kernel reads them.
struct ReduceAxes {
  std::string axes;  // int64 1-D value (input 1 or the 'axes' attribute); "" when none is given
  bool keepdims = true;
  bool identity = false;  // noop_with_empty_axes with no axes: the node copies its input
};

ReduceAxes ReadReduceAxes(GradientContext& g) {
  const Node& node = g.node();
  ReduceAxes r;
  r.keepdims = node.GetInt("keepdims", 1) != 0;
  if (!g.X(1).empty())
    r.axes = g.X(1);
  else if (!node.GetInts("axes").empty())
    r.axes = g.Ints(node.GetInts("axes"));
  r.identity = r.axes.empty() && node.GetInt("noop_with_empty_axes", 0) != 0;
  return r;
}

// A value of the node's output shape with the reduced axes put back as size 1 (so that it
// broadcasts against the input). A full reduction without keepdims is a scalar and already does.
std::string RestoreReducedDims(GradientContext& g, const ReduceAxes& r, const std::string& value) {
  if (r.keepdims || r.axes.empty()) return value;
  return g.Op("Unsqueeze", {value, r.axes});
}

// Element count of a static shape, or -1 when some dim is unknown.
int64_t StaticNumel(const ValueInfo* info) {
  if (info == nullptr || !info->has_shape) return -1;
  int64_t count = 1;
  for (const Dim& d : info->shape) {
    if (!d.known()) return -1;
    count *= d.value;
  }
  return count;
}

// ReduceMean: dX = dY / (elements per output), expanded to X's shape.
void ReduceMeanGradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string count;
  const int64_t in_count = StaticNumel(g.Info(g.X(0))), out_count = StaticNumel(g.Info(g.Y(0)));
  if (in_count >= 0 && out_count > 0) {
    count = g.ScalarLike(static_cast<double>(in_count / out_count), g.X(0));
  } else {
    std::string out_size = g.Op("Max", {g.Op("Size", {g.Y(0)}), g.Constant(Tensor::Scalar<int64_t>(1))});
    count = g.Op("CastLike", {g.Op("Div", {g.Op("Size", {g.X(0)}), out_size}), g.X(0)});
  }
  std::string dy = RestoreReducedDims(g, r, g.Op("Div", {g.dY(0), count}));
  g.SetGrad(0, g.Op("Expand", {dy, g.ShapeOf(g.X(0))}));
}

// ReduceSumSquare: dX = 2 X dY.
void ReduceSumSquareGradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string twice = g.Op("Mul", {g.dY(0), g.ScalarLike(2.0, g.X(0))});
  g.SetGrad(0, g.Op("Mul", {g.X(0), RestoreReducedDims(g, r, twice)}));
}

// ReduceL2: dX = X dY / Y, and 0 where the norm is 0 (as PyTorch's norm backward gives).
void ReduceL2Gradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string zero = g.ScalarLike(0.0, g.X(0));
  std::string ratio = g.Op("Div", {g.dY(0), g.Y(0)});
  ratio = g.Op("Where", {g.Op("Equal", {g.Y(0), zero}), zero, ratio});
  g.SetGrad(0, g.Op("Mul", {g.X(0), RestoreReducedDims(g, r, ratio)}));
}

// ReduceL1: dX = sign(X) dY.
void ReduceL1Gradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  g.SetGrad(0, g.Op("Mul", {g.Op("Sign", {g.X(0)}), RestoreReducedDims(g, r, g.dY(0))}));
}

// ReduceLogSumExp: dX = exp(X - Y) dY (the softmax over the reduced axes).
void ReduceLogSumExpGradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string weights = g.Op("Exp", {g.Op("Sub", {g.X(0), RestoreReducedDims(g, r, g.Y(0))})});
  g.SetGrad(0, g.Op("Mul", {weights, RestoreReducedDims(g, r, g.dY(0))}));
}

// ReduceLogSum: Y = log(sum X), dX = dY / exp(Y), expanded to X's shape.
void ReduceLogSumGradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string per_sum = g.Op("Div", {g.dY(0), g.Op("Exp", {g.Y(0)})});
  g.SetGrad(0, g.Op("Expand", {RestoreReducedDims(g, r, per_sum), g.ShapeOf(g.X(0))}));
}

// ReduceMax/ReduceMin: dY goes to the positions equal to the result; ties share it evenly, as
// PyTorch's amax/amin do (a two-way tie gets 1/2 each, matching central differences).
void ReduceExtremeGradient(GradientContext& g) {
  ReduceAxes r = ReadReduceAxes(g);
  if (r.identity) return g.SetGrad(0, g.dY(0));
  std::string hits = g.Op("CastLike", {g.Op("Equal", {g.X(0), RestoreReducedDims(g, r, g.Y(0))}), g.X(0)});
  std::vector<std::string> count_inputs = {hits};
  if (!r.axes.empty()) count_inputs.push_back(r.axes);
  std::string count = g.Op("ReduceSum", count_inputs,
                           {{"keepdims", Attribute::Int(1)},
                            {"noop_with_empty_axes", Attribute::Int(g.node().GetInt("noop_with_empty_axes", 0))}});
  std::string share = g.Op("Div", {RestoreReducedDims(g, r, g.dY(0)), count});
  g.SetGrad(0, g.Op("Mul", {hits, share}));
}

// CumSum: the gradient is the cumulative sum of dY in the opposite direction (same exclusivity).
void CumSumGradient(GradientContext& g) {
  AttributeMap attrs = {{"exclusive", Attribute::Int(g.node().GetInt("exclusive", 0))},
                                            {"reverse", Attribute::Int(g.node().GetInt("reverse", 0) != 0 ? 0 : 1)}};
  g.SetGrad(0, g.Op("CumSum", {g.dY(0), g.X(1)}, std::move(attrs)));
}

// TopK: the values' gradient goes back to the selected positions (indices are distinct per line).
void TopKGradient(GradientContext& g) {
  if (g.dY(0).empty()) return;
  ET_CHECK(!g.Y(1).empty(), ErrorCode::kNotImplemented, g.node().Describe(),
           ": the gradient of TopK needs its indices output");
  std::string zeros =
      g.Op("Expand", {g.Op("CastLike", {g.Constant(Tensor::Scalar<float>(0.0f)), g.X(0)}), g.ShapeOf(g.X(0))});
  g.SetGrad(0,
            g.Op("ScatterElements", {zeros, g.Y(1), g.dY(0)}, {{"axis", Attribute::Int(g.node().GetInt("axis", -1))}}));
}

// Input viewed as [outer, n, inner] around one axis.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView ViewAroundAxis(const Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < axis; ++d) v.outer *= shape[d];
  v.n = shape[axis];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) v.inner *= shape[d];
  return v;
}

template <bool kIsMax>
void ArgExtremeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Node& node = ctx.node();
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), rank, node.Describe());
  const bool keepdims = node.GetInt("keepdims", 1) != 0;
  const bool select_last = node.GetInt("select_last_index", 0) != 0;
  const AxisView v = ViewAroundAxis(x.shape(), axis);
  Shape out_shape = x.shape();
  if (keepdims)
    out_shape[axis] = 1;
  else
    out_shape.erase(out_shape.begin() + axis);
  ET_CHECK(v.n > 0 || v.outer * v.inner == 0, ErrorCode::kInvalidArgument, node.Describe(),
           ": cannot take the arg-extreme over the empty axis ", axis);
  Tensor& y = ctx.Output(0, out_shape, DataType::kInt64);
  int64_t* out = y.data<int64_t>();
  VisitNumeric(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    // True when `candidate` should replace `best` (ties go to the first or last index).
    auto better = [select_last](T candidate, T best) {
      if constexpr (kIsMax)
        return select_last ? candidate >= best : candidate > best;
      else
        return select_last ? candidate <= best : candidate < best;
    };
    ctx.threads().ParallelFor(v.outer * v.inner, GrainFor(v.n), [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t o = unit / v.inner, i = unit % v.inner;
        const T* line = in + o * v.n * v.inner + i;
        int64_t best_index = 0;
        T best = line[0];
        for (int64_t j = 1; j < v.n; ++j) {
          if (IsNan(best) && !select_last) break;
          T value = line[j * v.inner];
          if (better(value, best) || IsNan(value)) {
            best = value;
            best_index = j;
          }
        }
        out[unit] = best_index;
      }
    });
  });
}

void CumSumKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Node& node = ctx.node();
  const Tensor& axis_tensor = ctx.Input(1);
  ET_CHECK(axis_tensor.numel() == 1, ErrorCode::kInvalidArgument, node.Describe(),
           ": 'axis' input must hold exactly one value, got ", axis_tensor.numel());
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(axis_tensor.Int64At(0), rank, node.Describe());
  const bool exclusive = node.GetInt("exclusive", 0) != 0;
  const bool reverse = node.GetInt("reverse", 0) != 0;
  const AxisView v = ViewAroundAxis(x.shape(), axis);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitNumeric(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    // Walks each [n, inner] slab along n, forwards or backwards, using the output as the running sum.
    ctx.threads().ParallelFor(v.outer, GrainFor(v.n * v.inner), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* src = in + o * v.n * v.inner;
        T* dst = out + o * v.n * v.inner;
        for (int64_t step = 0; step < v.n; ++step) {
          const int64_t j = reverse ? v.n - 1 - step : step;
          const int64_t prev = reverse ? j + 1 : j - 1;
          T* row = dst + j * v.inner;
          if (step == 0) {
            for (int64_t i = 0; i < v.inner; ++i) row[i] = exclusive ? T{0} : src[j * v.inner + i];
          } else {
            const T* prev_out = dst + prev * v.inner;
            const T* addend = src + (exclusive ? prev : j) * v.inner;
            for (int64_t i = 0; i < v.inner; ++i) row[i] = static_cast<T>(prev_out[i] + addend[i]);
          }
        }
      }
    });
  });
}

void TopKKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Node& node = ctx.node();
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), rank, node.Describe());
  int64_t k = 0;
  if (ctx.HasInput(1)) {
    const Tensor& k_tensor = ctx.Input(1);
    ET_CHECK(k_tensor.numel() == 1, ErrorCode::kInvalidArgument, node.Describe(),
             ": 'K' input must hold exactly one value, got ", k_tensor.numel());
    k = k_tensor.Int64At(0);
  } else {
    ET_CHECK(node.HasAttr("k"), ErrorCode::kInvalidModel, node.Describe(), ": neither a 'K' input nor a 'k' attribute");
    k = node.GetInt("k", 0);
  }
  const bool largest = node.GetInt("largest", 1) != 0;
  const AxisView v = ViewAroundAxis(x.shape(), axis);
  ET_CHECK(k >= 0 && k <= v.n, ErrorCode::kOutOfRange, node.Describe(), ": k=", k, " is out of range for axis ", axis,
           " of size ", v.n);
  Shape out_shape = x.shape();
  out_shape[axis] = k;
  Tensor& values = ctx.Output(0, out_shape, x.dtype());
  Tensor& indices = ctx.Output(1, out_shape, DataType::kInt64);
  int64_t* out_indices = indices.data<int64_t>();
  VisitNumeric(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out_values = values.data<T>();
    // Strict ordering: first by value (NaN counts as the largest), then by lower index.
    auto less_value = [](T a, T b) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a)) return false;
        if (std::isnan(b)) return true;
      }
      return a < b;
    };
    ctx.threads().ParallelFor(v.outer * v.inner, GrainFor(v.n * 4), [&](int64_t begin, int64_t end) {
      std::vector<int64_t> order(static_cast<size_t>(v.n));
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t o = unit / v.inner, i = unit % v.inner;
        const T* line = in + o * v.n * v.inner + i;
        std::iota(order.begin(), order.end(), int64_t{0});
        auto comes_first = [&](int64_t a, int64_t b) {
          T va = line[a * v.inner], vb = line[b * v.inner];
          if (largest ? less_value(vb, va) : less_value(va, vb)) return true;
          if (largest ? less_value(va, vb) : less_value(vb, va)) return false;
          return a < b;
        };
        if (k < v.n) std::nth_element(order.begin(), order.begin() + k, order.end(), comes_first);
        std::sort(order.begin(), order.begin() + k, comes_first);
        const int64_t out_base = o * k * v.inner + i;
        for (int64_t j = 0; j < k; ++j) {
          out_values[out_base + j * v.inner] = line[order[j] * v.inner];
          out_indices[out_base + j * v.inner] = order[j];
        }
      }
    });
  });
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "ReduceSum", ReduceKernel<SumReducer>);
  ET_IF_BUILT("", "ReduceSum") r.SetGradient("ReduceSum", ReduceSumGradient);
  ET_REGISTER_ONNX(r, "ReduceMean", ReduceKernel<MeanReducer>);
  ET_IF_BUILT("", "ReduceMean") r.SetGradient("ReduceMean", ReduceMeanGradient);
  ET_REGISTER_ONNX(r, "ReduceMax", ReduceKernel<MaxReducer>);
  ET_IF_BUILT("", "ReduceMax") r.SetGradient("ReduceMax", ReduceExtremeGradient);
  ET_REGISTER_ONNX(r, "ReduceMin", ReduceKernel<MinReducer>);
  ET_IF_BUILT("", "ReduceMin") r.SetGradient("ReduceMin", ReduceExtremeGradient);
  ET_REGISTER_ONNX(r, "ReduceProd", ReduceKernel<ProdReducer>);
  ET_REGISTER_ONNX(r, "ReduceL1", ReduceKernel<L1Reducer>);
  ET_IF_BUILT("", "ReduceL1") r.SetGradient("ReduceL1", ReduceL1Gradient);
  ET_REGISTER_ONNX(r, "ReduceL2", ReduceKernel<L2Reducer>);
  ET_IF_BUILT("", "ReduceL2") r.SetGradient("ReduceL2", ReduceL2Gradient);
  ET_REGISTER_ONNX(r, "ReduceLogSum", ReduceKernel<LogSumReducer>);
  ET_IF_BUILT("", "ReduceLogSum") r.SetGradient("ReduceLogSum", ReduceLogSumGradient);
  ET_REGISTER_ONNX(r, "ReduceLogSumExp", ReduceKernel<LogSumExpReducer>);
  ET_IF_BUILT("", "ReduceLogSumExp") r.SetGradient("ReduceLogSumExp", ReduceLogSumExpGradient);
  ET_REGISTER_ONNX(r, "ReduceSumSquare", ReduceKernel<SumSquareReducer>);
  ET_IF_BUILT("", "ReduceSumSquare") r.SetGradient("ReduceSumSquare", ReduceSumSquareGradient);
  ET_REGISTER_ONNX(r, "ArgMax", ArgExtremeKernel<true>);
  ET_REGISTER_ONNX(r, "ArgMin", ArgExtremeKernel<false>);
  ET_REGISTER_ONNX(r, "CumSum", CumSumKernel);
  ET_IF_BUILT("", "CumSum") r.SetGradient("CumSum", CumSumGradient);
  ET_REGISTER_ONNX(r, "TopK", TopKKernel);
  ET_IF_BUILT("", "TopK") r.SetGradient("TopK", TopKGradient);
  // A view when nothing is summed.
  ET_IF_BUILT("ai.edgetrain", "SumToShape")
    RegisterFused(r, "SumToShape", SumToShapeKernel, ET_TRAINING_BODY(SumToShapeFunction())).output_views_input = true;
}

}  // namespace edgetrain
