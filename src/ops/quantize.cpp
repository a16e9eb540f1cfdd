// Quantization: QuantizeLinear, DequantizeLinear (opsets 10-21: per-tensor, per-axis, blocked),
// DynamicQuantizeLinear, and ai.edgetrain FakeQuantize, the DQ(Q(x)) pair that quantization-aware
// training differentiates (FuseFakeQuantize makes it; the gradient follows PyTorch's fake quantization).
#include "ops/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

// ---------------------------------------------------------------------------------------------
// Shared: element types, the scale layout, and the checks every quantization operator makes.

struct QuantRange {
  int64_t min = 0, max = 255;
};

// The integer types a quantized tensor may have at `opset` (int16/uint16 from 21; int32 only to
// dequantize). Float8 and 4-bit types have no DataType in edgetrain: the importer rejects them.
QuantRange RangeOf(DataType type, int64_t opset, bool dequantize, const std::string& where) {
  switch (type) {
    case DataType::kUint8: return {0, 255};
    case DataType::kInt8: return {-128, 127};
    case DataType::kUint16:
    case DataType::kInt16:
      ET_CHECK(opset >= 21, ErrorCode::kNotImplemented, where, ": element type ", DataTypeName(type),
               " needs opset 21 (the model imports opset ", opset, ")");
      return type == DataType::kUint16 ? QuantRange{0, 65535} : QuantRange{-32768, 32767};
    case DataType::kInt32:
      if (dequantize) return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
      break;
    default: break;
  }
  Fail(ErrorCode::kNotImplemented, where, ": unsupported element type ", DataTypeName(type),
       dequantize ? " (uint8, int8, int32, and from opset 21 uint16, int16)"
                  : " (uint8, int8, and from opset 21 uint16, int16)");
}

// Where each element of x finds its scale, x viewed as [outer, D, inner] around `axis`:
// scale index = o * outer_stride + (d / block) * block_stride + i * inner_stride.
struct ScaleLayout {
  int64_t outer = 1, dim = 1, inner = 1, block = 1;
  int64_t outer_stride = 0, block_stride = 0, inner_stride = 0;
};

ScaleLayout LayoutFor(const Node& node, int64_t opset, const Shape& x, const Tensor& scale) {
  const std::string& where = node.Describe();
  ScaleLayout l;
  const int64_t numel = std::max<int64_t>(1, std::accumulate(x.begin(), x.end(), int64_t{1}, std::multiplies<>()));
  const int64_t block_size = opset >= 21 ? node.GetInt("block_size", 0) : 0;
  ET_CHECK(block_size >= 0, ErrorCode::kInvalidArgument, where, ": attribute block_size is ", block_size,
           ", must be >= 0");
  if (scale.numel() == 1 && scale.rank() <= 1 && block_size == 0) {  // per-tensor (a 1-element 1-D too)
    l.dim = numel;
    l.block = numel;
    return l;  // every stride 0: index 0
  }
  ET_CHECK(opset >= 13, ErrorCode::kInvalidModel, where, ": input 'scale' has shape ", ShapeToString(scale.shape()),
           ", opset ", opset, " needs a scalar");
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.GetInt("axis", 1);
  ET_CHECK(axis >= -rank && axis < rank, ErrorCode::kInvalidArgument, where, ": attribute axis ", axis,
           " is out of range for input 'x' of rank ", rank);
  if (axis < 0) axis += rank;
  for (int64_t k = 0; k < axis; ++k) l.outer *= x[static_cast<size_t>(k)];
  l.dim = x[static_cast<size_t>(axis)];
  for (int64_t k = axis + 1; k < rank; ++k) l.inner *= x[static_cast<size_t>(k)];
  if (block_size == 0) {
    ET_CHECK(scale.rank() == 1 && scale.dim(0) == l.dim, ErrorCode::kInvalidArgument, where, ": input 'scale' has shape ",
             ShapeToString(scale.shape()), ", per-axis quantization along axis ", axis, " needs [", l.dim, "]");
    l.block_stride = 1;
    return l;
  }
  // Blocked (opset 21): scale has x's shape with ceil(D / block_size) along axis.
  Shape expected = x;
  expected[static_cast<size_t>(axis)] = (l.dim + block_size - 1) / block_size;
  ET_CHECK(scale.shape() == expected, ErrorCode::kInvalidArgument, where, ": input 'scale' has shape ",
           ShapeToString(scale.shape()), ", blocked quantization with block_size ", block_size, " along axis ", axis,
           " of input 'x' ", ShapeToString(x), " needs ", ShapeToString(expected));
  l.block = block_size;
  l.outer_stride = expected[static_cast<size_t>(axis)] * l.inner;
  l.block_stride = l.inner;
  l.inner_stride = 1;
  return l;
}

// Scales as float, each checked positive and finite.
std::vector<float> Scales(const Node& node, const Tensor& scale) {
  std::vector<float> s(static_cast<size_t>(scale.numel()));
  VisitAll(scale.dtype(), node.Describe() + " input 'scale'", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      const T* p = scale.data<T>();
      for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(p[i]);
    } else {
      Fail(ErrorCode::kInvalidModel, node.Describe(), ": input 'scale' has element type ",
           DataTypeName(scale.dtype()), ", must be a float type");
    }
  });
  for (size_t i = 0; i < s.size(); ++i)
    ET_CHECK(s[i] > 0 && std::isfinite(s[i]), ErrorCode::kInvalidArgument, node.Describe(), ": input 'scale' element ",
             i, " is ", s[i], ", must be positive and finite");
  return s;
}

// Zero points as int64 (0 when absent), checked against the scale's shape and the quantized type.
std::vector<int64_t> ZeroPoints(const KernelContext& ctx, size_t index, const Tensor& scale, DataType quantized) {
  const std::string& where = ctx.node().Describe();
  if (!ctx.HasInput(index)) return std::vector<int64_t>(static_cast<size_t>(scale.numel()), 0);
  const Tensor& zp = ctx.Input(index);
  ET_CHECK(zp.dtype() == quantized, ErrorCode::kInvalidModel, where, ": input 'zero_point' has element type ",
           DataTypeName(zp.dtype()), ", the quantized type is ", DataTypeName(quantized));
  ET_CHECK(zp.numel() == scale.numel() && (zp.numel() == 1 || zp.shape() == scale.shape()), ErrorCode::kInvalidArgument,
           where, ": input 'zero_point' has shape ", ShapeToString(zp.shape()), ", input 'scale' has ",
           ShapeToString(scale.shape()));
  return zp.ToInt64Vector();
}

template <typename Fn>
void ForEachElement(const ScaleLayout& l, Fn&& fn) {
  int64_t i = 0;
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t d = 0; d < l.dim; ++d) {
      const int64_t row = o * l.outer_stride + (d / l.block) * l.block_stride;
      for (int64_t k = 0; k < l.inner; ++k, ++i) fn(i, row + k * l.inner_stride);
    }
}

// Reads x's elements as float (float types and int32, the types QuantizeLinear accepts).
std::vector<float> AsFloats(const Node& node, const Tensor& x) {
  std::vector<float> v(static_cast<size_t>(x.numel()));
  switch (x.dtype()) {
    case DataType::kFloat32: std::copy_n(x.data<float>(), v.size(), v.begin()); break;
    case DataType::kFloat16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(x.data<Float16>()[i]);
      break;
    case DataType::kBFloat16:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(x.data<BFloat16>()[i]);
      break;
    case DataType::kInt32:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(x.data<int32_t>()[i]);
      break;
    default:
      Fail(ErrorCode::kNotImplemented, node.Describe(), ": input 'x' has unsupported element type ",
           DataTypeName(x.dtype()), " (float32, float16, bfloat16, int32)");
  }
  return v;
}

int64_t QuantizeOne(float x, float scale, int64_t zero_point, QuantRange r) {
  if (std::isnan(x)) return std::clamp(zero_point, r.min, r.max);  // the spec leaves NaN open; no UB cast
  const double q = static_cast<double>(std::nearbyint(x / scale)) + static_cast<double>(zero_point);
  return static_cast<int64_t>(std::clamp(q, static_cast<double>(r.min), static_cast<double>(r.max)));
}

template <typename Fn>
void VisitQuantized(DataType type, const std::string& where, Fn&& fn) {
  switch (type) {
    case DataType::kUint8: return fn(TypeTag<uint8_t>{});
    case DataType::kInt8: return fn(TypeTag<int8_t>{});
    case DataType::kUint16: return fn(TypeTag<uint16_t>{});
    case DataType::kInt16: return fn(TypeTag<int16_t>{});
    case DataType::kInt32: return fn(TypeTag<int32_t>{});
    default: Fail(ErrorCode::kNotImplemented, where, ": unsupported element type ", DataTypeName(type));
  }
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point).

DataType QuantizedTypeOf(const KernelContext& ctx) {
  const Node& node = ctx.node();
  const int64_t output_dtype = ctx.opset() >= 21 ? node.GetInt("output_dtype", 0) : 0;
  if (output_dtype != 0) {
    ET_CHECK(IsKnownDataType(static_cast<int32_t>(output_dtype)), ErrorCode::kNotImplemented, node.Describe(),
             ": attribute output_dtype ", output_dtype, " is an unsupported element type");
    const auto type = static_cast<DataType>(output_dtype);
    if (ctx.HasInput(2))
      ET_CHECK(ctx.Input(2).dtype() == type, ErrorCode::kInvalidModel, node.Describe(),
               ": input 'zero_point' has element type ", DataTypeName(ctx.Input(2).dtype()),
               ", attribute output_dtype says ", DataTypeName(type));
    return type;
  }
  return ctx.HasInput(2) ? ctx.Input(2).dtype() : DataType::kUint8;
}

void QuantizeLinearKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const Tensor& scale = ctx.Input(1);
  const DataType type = QuantizedTypeOf(ctx);
  const QuantRange range = RangeOf(type, ctx.opset(), /*dequantize=*/false, node.Describe());
  const ScaleLayout layout = LayoutFor(node, ctx.opset(), x.shape(), scale);
  const std::vector<float> s = Scales(node, scale);
  const std::vector<int64_t> zp = ZeroPoints(ctx, 2, scale, type);
  const std::vector<float> xs = AsFloats(node, x);
  Tensor& y = ctx.Output(0, x.shape(), type);
  VisitQuantized(type, node.Describe(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    Q* out = y.data<Q>();
    ForEachElement(layout, [&](int64_t i, int64_t j) {
      out[i] = static_cast<Q>(QuantizeOne(xs[static_cast<size_t>(i)], s[static_cast<size_t>(j)],
                                          zp[static_cast<size_t>(j)], range));
    });
  });
}

void RegisterQuantizeLinear(OpRegistry& r) { ET_REGISTER_ONNX(r, "QuantizeLinear", QuantizeLinearKernel, 10); }

// ---------------------------------------------------------------------------------------------
// DequantizeLinear: y = (x - zero_point) * scale, in the scale's float type.

void DequantizeLinearKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const Tensor& scale = ctx.Input(1);
  RangeOf(x.dtype(), ctx.opset(), /*dequantize=*/true, node.Describe() + " input 'x'");
  const ScaleLayout layout = LayoutFor(node, ctx.opset(), x.shape(), scale);
  const std::vector<float> s = Scales(node, scale);
  const std::vector<int64_t> zp = ZeroPoints(ctx, 2, scale, x.dtype());
  if (x.dtype() == DataType::kInt32)
    for (int64_t z : zp)
      ET_CHECK(z == 0, ErrorCode::kInvalidArgument, node.Describe(),
               ": input 'zero_point' must be 0 for int32 input 'x', it is ", z);
  const std::vector<int64_t> q = x.ToInt64Vector();
  const DataType out_type = ctx.opset() >= 19 ? scale.dtype() : DataType::kFloat32;
  Tensor& y = ctx.Output(0, x.shape(), out_type);
  VisitAll(out_type, node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      T* out = y.data<T>();
      ForEachElement(layout, [&](int64_t i, int64_t j) {
        const auto k = static_cast<size_t>(j);
        out[i] = static_cast<T>(static_cast<float>(q[static_cast<size_t>(i)] - zp[k]) * s[k]);
      });
    } else {
      Fail(ErrorCode::kInternal, node.Describe(), ": non-float scale type");
    }
  });
}

void RegisterDequantizeLinear(OpRegistry& r) { ET_REGISTER_ONNX(r, "DequantizeLinear", DequantizeLinearKernel, 10); }

// ---------------------------------------------------------------------------------------------
// DynamicQuantizeLinear: uint8 with scale and zero point from the range of x (which includes 0).

void DynamicQuantizeLinearKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  ET_CHECK(x.dtype() == DataType::kFloat32, ErrorCode::kNotImplemented, node.Describe(),
           ": input 'x' has unsupported element type ", DataTypeName(x.dtype()), " (float32 only)");
  const float* p = x.data<float>();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    ET_CHECK(std::isfinite(p[i]), ErrorCode::kInvalidArgument, node.Describe(), ": input 'x' element ", i, " is ",
             p[i], ", must be finite");
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const float scale = (hi - lo) / 255.0f;
  const QuantRange range{0, 255};
  const int64_t zp = scale > 0 ? static_cast<int64_t>(std::clamp(std::nearbyint(-lo / scale), 0.0f, 255.0f)) : 0;
  Tensor& y = ctx.Output(0, x.shape(), DataType::kUint8);
  uint8_t* out = y.data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = scale > 0 ? static_cast<uint8_t>(QuantizeOne(p[i], scale, zp, range)) : 0;
  ctx.Output(1, {}, DataType::kFloat32).data<float>()[0] = scale;
  ctx.Output(2, {}, DataType::kUint8).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
}

void RegisterDynamicQuantizeLinear(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "DynamicQuantizeLinear", DynamicQuantizeLinearKernel, 11);
}

// ---------------------------------------------------------------------------------------------
// ai.edgetrain FakeQuantize(x, scale, zero_point?; axis, quant_min, quant_max) = DQ(Q(x)): the
// QuantizeLinear -> DequantizeLinear pair with one scale and zero point, per-tensor or per-axis.
// zero_point is the pair's integer one or, as in LSQ, a float one (rounded and clamped to the range,
// as PyTorch's _fake_quantize_learnable_* do).

QuantRange FakeQuantRange(const Node& node) {
  QuantRange r{node.GetInt("quant_min", 0), node.GetInt("quant_max", 255)};
  ET_CHECK(r.min < r.max, ErrorCode::kInvalidArgument, node.Describe(), ": quant_min ", r.min,
           " is not below quant_max ", r.max);
  return r;
}

std::vector<int64_t> FakeZeroPoints(const KernelContext& ctx, const Tensor& scale, QuantRange r) {
  const std::string& where = ctx.node().Describe();
  if (!ctx.HasInput(2)) return std::vector<int64_t>(static_cast<size_t>(scale.numel()), 0);
  const Tensor& zp = ctx.Input(2);
  ET_CHECK(zp.numel() == scale.numel(), ErrorCode::kInvalidArgument, where, ": input 'zero_point' has shape ",
           ShapeToString(zp.shape()), ", input 'scale' has ", ShapeToString(scale.shape()));
  if (!IsFloatType(zp.dtype())) return zp.ToInt64Vector();
  std::vector<int64_t> out(static_cast<size_t>(zp.numel()));
  for (int64_t i = 0; i < zp.numel(); ++i) {
    const double v = zp.DoubleAt(i);
    ET_CHECK(std::isfinite(v), ErrorCode::kInvalidArgument, where, ": input 'zero_point' element ", i, " is ", v,
             ", must be finite");
    out[static_cast<size_t>(i)] =
        static_cast<int64_t>(std::clamp(std::nearbyint(v), static_cast<double>(r.min), static_cast<double>(r.max)));
  }
  return out;
}

void FakeQuantizeKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const Tensor& scale = ctx.Input(1);
  const QuantRange range = FakeQuantRange(node);
  const ScaleLayout layout = LayoutFor(node, 13, x.shape(), scale);
  const std::vector<float> s = Scales(node, scale);
  const std::vector<int64_t> zp = FakeZeroPoints(ctx, scale, range);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    ForEachElement(layout, [&](int64_t i, int64_t j) {
      const auto k = static_cast<size_t>(j);
      const int64_t q = QuantizeOne(static_cast<float>(in[i]), s[k], zp[k], range);
      out[i] = static_cast<T>(static_cast<float>(q - zp[k]) * s[k]);
    });
  });
}

// Q -> Clip(quant_min, quant_max) -> DQ; standard ONNX needs an integer zero point here.
std::shared_ptr<const FunctionDef> FakeQuantizeFunction() {
  FunctionBuilder f("FakeQuantize", {"x", "scale", "zero_point"}, {"y"}, {"axis", "quant_min", "quant_max"});
  const AttributeMap axis = {{"axis", Attribute::Ref(Attribute::Kind::kInt, "axis")}};
  f.Op("QuantizeLinear", {"x", "scale", "zero_point"}, "q", axis);
  f.Op("Constant", {}, "qmin", {{"value_int", Attribute::Ref(Attribute::Kind::kInt, "quant_min")}});
  f.Op("Constant", {}, "qmax", {{"value_int", Attribute::Ref(Attribute::Kind::kInt, "quant_max")}});
  f.Op("Clip", {"q", f.Op("CastLike", {"qmin", "q"}, "qmin_q"), f.Op("CastLike", {"qmax", "q"}, "qmax_q")}, "clipped");
  f.Op("DequantizeLinear", {"clipped", "scale", "zero_point"}, "y", axis);
  return f.Build();
}

// Straight-through estimator with PyTorch's clipping mask, and LSQ's scale and zero-point gradients
// (torch._fake_quantize_learnable_per_{tensor,channel}_affine with grad_factor 1), with t the
// unclamped round(x / s) + zp:
//   dx = dy * [qmin <= t <= qmax]
//   ds = dy * ((y - x) / s inside, qmin - zp below, qmax - zp above), summed per scale
//   dzp = dy * (0 inside, -s outside), summed per zero point
void FakeQuantizeGradient(GradientContext& g) {
  const Node& node = g.node();
  const QuantRange range = FakeQuantRange(node);
  const ValueInfo* x_info = g.Info(g.X(0));
  const ValueInfo* s_info = g.Info(g.X(1));
  ET_CHECK(s_info && s_info->has_shape, ErrorCode::kNotImplemented, node.Describe(),
           ": the gradient needs the static shape of input 'scale'");
  int64_t scale_numel = 1;
  for (const Dim& d : s_info->shape) {
    ET_CHECK(d.known(), ErrorCode::kNotImplemented, node.Describe(),
             ": the gradient needs the static shape of input 'scale'");
    scale_numel *= d.value;
  }
  const bool per_axis = !(scale_numel == 1 && s_info->shape.size() <= 1);
  int64_t rank = 0, axis = 0;
  if (per_axis) {
    ET_CHECK(x_info && x_info->has_shape, ErrorCode::kNotImplemented, node.Describe(),
             ": the per-axis gradient needs the rank of input 'x'");
    rank = static_cast<int64_t>(x_info->shape.size());
    axis = node.GetInt("axis", 1);
    ET_CHECK(axis >= -rank && axis < rank, ErrorCode::kInvalidArgument, node.Describe(), ": attribute axis ", axis,
             " is out of range for input 'x' of rank ", rank);
    if (axis < 0) axis += rank;
  }
  // Per-axis: scale and zero point reshaped to [C, 1, ...] so that they broadcast along axis.
  auto along_axis = [&](const std::string& v) {
    if (!per_axis) return v;
    std::vector<int64_t> shape(static_cast<size_t>(rank - axis), 1);
    shape[0] = -1;
    return g.Op("Reshape", {v, g.Ints(shape)});
  };
  const std::string& x = g.X(0);
  const std::string dy = g.dY(0);
  const std::string s = along_axis(g.X(1));
  const bool has_zp = g.NumInputs() > 2 && !g.X(2).empty();
  std::string zp = has_zp ? g.X(2) : g.ScalarLike(0.0, x);
  if (has_zp) {
    const bool learnable = IsFloatType(g.TypeOf(zp));
    zp = g.Op("Cast", {zp}, {{"to", Attribute::Int(static_cast<int64_t>(g.TypeOf(x)))}});
    if (learnable)  // the forward rounds and clamps a float zero point, as PyTorch's learnable ops do
      zp = g.Op("Clip", {g.Op("Round", {zp}), g.ScalarLike(static_cast<double>(range.min), x),
                         g.ScalarLike(static_cast<double>(range.max), x)});
    zp = along_axis(zp);
  }
  const std::string qmin = g.ScalarLike(static_cast<double>(range.min), x);
  const std::string qmax = g.ScalarLike(static_cast<double>(range.max), x);
  const std::string t = g.Op("Add", {g.Op("Round", {g.Op("Div", {x, s})}), zp});
  const std::string below = g.Op("Less", {t, qmin});
  const std::string above = g.Op("Greater", {t, qmax});
  const std::string outside = g.Op("Or", {below, above});
  const std::string zero = g.ScalarLike(0.0, x);
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Where", {outside, zero, dy}), /*maybe_broadcast=*/false);
  // Sums an x-shaped value to the scale's shape.
  auto per_scale = [&](const std::string& v) {
    if (!per_axis) return v;
    std::vector<int64_t> axes;
    for (int64_t k = 0; k < rank; ++k)
      if (k != axis) axes.push_back(k);
    return g.Op("ReduceSum", {v, g.Ints(axes)}, {{"keepdims", Attribute::Int(0)}});
  };
  if (g.NeedsGrad(1)) {
    const std::string inside = g.Op("Div", {g.Op("Sub", {g.Y(0), x}), s});
    const std::string clipped = g.Op("Where", {below, g.Op("Sub", {qmin, zp}), g.Op("Sub", {qmax, zp})});
    const std::string ds = g.Op("Mul", {dy, g.Op("Where", {outside, clipped, inside})});
    g.SetGrad(1, per_scale(ds), /*maybe_broadcast=*/!per_axis);
  }
  if (has_zp && g.NeedsGrad(2)) {
    const std::string dzp = g.Op("Mul", {dy, g.Op("Where", {outside, g.Op("Neg", {s}), zero})});
    g.SetGrad(2, per_scale(dzp), /*maybe_broadcast=*/!per_axis);
  }
}

void RegisterFakeQuantize(OpRegistry& r) {
  ET_IF_BUILT("ai.edgetrain", "FakeQuantize") {
    RegisterFused(r, "FakeQuantize", FakeQuantizeKernel, FakeQuantizeFunction());
    r.SetGradient(kEdgetrainDomain, "FakeQuantize", FakeQuantizeGradient);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The pass that makes FakeQuantize out of DequantizeLinear(QuantizeLinear(x, s, zp), s, zp).

namespace {

// The element type of value `name`: an initializer, a graph input, a Cast's output or inferred info.
DataType TypeOfValue(const Graph& graph, const std::string& name) {
  if (graph.IsInitializer(name)) return graph.initializers.at(name).dtype();
  for (const auto& in : graph.inputs)
    if (in.name == name) return in.dtype;
  for (const auto& n : graph.nodes)
    if (n.op_type == "Cast" && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == name)
      return static_cast<DataType>(n.GetInt("to", 0));
  auto it = graph.value_info.find(name);
  return it == graph.value_info.end() ? DataType::kUndefined : it->second.dtype;
}

// The node producing `value` and how many inputs read it (graph outputs count as readers).
struct Producer {
  size_t index;
  size_t readers;
};

Producer FindProducer(const Graph& graph, const std::string& value) {
  Producer p{graph.nodes.size(), 0};
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& n = graph.nodes[k];
    if (std::count(n.outputs.begin(), n.outputs.end(), value)) p.index = k;
    p.readers += static_cast<size_t>(std::count(n.inputs.begin(), n.inputs.end(), value));
  }
  for (const auto& o : graph.outputs) p.readers += o.name == value ? 1 : 0;
  return p;
}

// A constant scalar's value (an initializer or a Constant node's), or nullopt.
std::optional<double> ConstantScalar(const Graph& graph, const std::string& value) {
  const Tensor* t = graph.IsInitializer(value) ? &graph.initializers.at(value) : nullptr;
  if (!t)
    for (const auto& n : graph.nodes)
      if (n.domain.empty() && n.op_type == "Constant" && !n.outputs.empty() && n.outputs[0] == value)
        t = n.GetTensor("value");
  if (!t || t->numel() != 1) return std::nullopt;
  return t->DoubleAt(0);
}

// Narrows `r` by a Clip of the quantized values (PyTorch exports quant ranges such as [0, 127] so);
// false when its bounds are not constants.
bool NarrowByClip(const Graph& graph, const Node& clip, QuantRange& r) {
  for (size_t k = 1; k < 3 && k < clip.inputs.size(); ++k) {
    if (clip.inputs[k].empty()) continue;
    const std::optional<double> bound = ConstantScalar(graph, clip.inputs[k]);
    if (!bound) return false;
    if (k == 1) r.min = std::max(r.min, static_cast<int64_t>(std::ceil(*bound)));
    else r.max = std::min(r.max, static_cast<int64_t>(std::floor(*bound)));
  }
  return r.min < r.max;
}

void RecordStaticInfo(Graph& graph, const std::vector<std::string>& values) {
  for (const auto& in : values)  // the gradient rule reads the static shapes of x and scale
    if (graph.IsInitializer(in) && !graph.FindValueInfo(in)) {
      const Tensor& value = graph.initializers.at(in);
      ValueInfo& info = graph.value_info[in];
      info.name = in;
      info.dtype = value.dtype();
      info.has_shape = true;
      for (int64_t d : value.shape()) info.shape.push_back(Dim{d, ""});
    }
}

}  // namespace

size_t FuseFakeQuantize(Graph& graph) {
  size_t fused = 0;
  std::vector<bool> drop(graph.nodes.size(), false);
  for (auto& dq : graph.nodes) {
    if (!dq.domain.empty() || dq.op_type != "DequantizeLinear" || dq.inputs.size() < 2 || dq.HasAttr("block_size"))
      continue;
    Producer from = FindProducer(graph, dq.inputs[0]);
    if (from.index == graph.nodes.size() || from.readers != 1) continue;
    size_t clip_index = graph.nodes.size();
    if (graph.nodes[from.index].domain.empty() && graph.nodes[from.index].op_type == "Clip") {
      clip_index = from.index;
      from = FindProducer(graph, graph.nodes[clip_index].inputs[0]);
      if (from.index == graph.nodes.size() || from.readers != 1) continue;
    }
    const Node& q = graph.nodes[from.index];
    if (!q.domain.empty() || q.op_type != "QuantizeLinear" || q.inputs.size() < 2 || q.HasAttr("block_size") ||
        q.HasAttr("output_dtype"))
      continue;
    const std::string q_zp = q.inputs.size() > 2 ? q.inputs[2] : "";
    const std::string dq_zp = dq.inputs.size() > 2 ? dq.inputs[2] : "";
    if (q.inputs[1] != dq.inputs[1] || q_zp != dq_zp || q.GetInt("axis", 1) != dq.GetInt("axis", 1)) continue;
    const DataType type = q_zp.empty() ? DataType::kUint8 : TypeOfValue(graph, q_zp);
    if (type != DataType::kUint8 && type != DataType::kInt8) continue;
    QuantRange r = type == DataType::kUint8 ? QuantRange{0, 255} : QuantRange{-128, 127};
    if (clip_index != graph.nodes.size() && !NarrowByClip(graph, graph.nodes[clip_index], r)) continue;
    Node fake;
    fake.name = dq.name;
    fake.op_type = "FakeQuantize";
    fake.domain = kEdgetrainDomain;
    fake.opset = 1;
    fake.inputs = {q.inputs[0], q.inputs[1]};
    if (!q_zp.empty()) fake.inputs.push_back(q_zp);
    fake.outputs = dq.outputs;
    fake.attributes = {{"axis", Attribute::Int(q.GetInt("axis", 1))},
                       {"quant_min", Attribute::Int(r.min)},
                       {"quant_max", Attribute::Int(r.max)}};
    RecordStaticInfo(graph, fake.inputs);
    if (!q_zp.empty() && !graph.FindValueInfo(q_zp)) {  // tells the rule that the zero point is an integer
      graph.value_info[q_zp].name = q_zp;
      graph.value_info[q_zp].dtype = type;
    }
    dq = std::move(fake);
    drop[from.index] = true;
    if (clip_index != graph.nodes.size()) drop[clip_index] = true;
    ++fused;
  }
  size_t kept = 0;
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    if (!drop[k]) {
      if (kept != k) graph.nodes[kept] = std::move(graph.nodes[k]);
      ++kept;
    }
  graph.nodes.resize(kept);
  return fused;
}

void CheckQuantizationIsDifferentiable(const Graph& graph, const std::vector<std::string>& wrt) {
  if (std::none_of(graph.nodes.begin(), graph.nodes.end(),
                   [](const Node& n) { return n.domain.empty() && n.op_type == "QuantizeLinear"; }))
    return;
  std::set<std::string> depends(wrt.begin(), wrt.end());
  for (bool grew = true; grew;) {  // values computed from a parameter that trains
    grew = false;
    for (const auto& n : graph.nodes)
      if (std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) { return depends.count(in); }))
        for (const auto& out : n.outputs) grew |= !out.empty() && depends.insert(out).second;
  }
  for (const auto& n : graph.nodes)
    ET_CHECK(!(n.domain.empty() && n.op_type == "QuantizeLinear" && depends.count(n.inputs[0])),
             ErrorCode::kNotImplemented, n.Describe(),
             ": a QuantizeLinear on the path to a trainable parameter has a gradient only as a fake quantization (one "
             "DequantizeLinear, optionally through a constant Clip, with the same scale, zero point and axis, "
             "per-tensor or per-axis, int8 or uint8)");
}

void RegisterQuantizeOps(OpRegistry& r) {
  RegisterQuantizeLinear(r);
  RegisterDequantizeLinear(r);
  RegisterDynamicQuantizeLinear(r);
  RegisterFakeQuantize(r);
}

}  // namespace edgetrain
