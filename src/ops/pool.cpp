// MaxPool, AveragePool, LpPool and their Global* forms, over any number of spatial dimensions.
// The windows are computed once per call as lists of input offsets, then every (image, channel)
// plane is reduced over them in parallel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/registry.hpp"

namespace edgetrain {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

struct PoolGeometry {
  int64_t planes = 0;  // batch * channels
  std::vector<int64_t> input, output, kernel, strides, dilations, pad_begin, pad_end;
  int64_t InputSize() const { return Product(input); }
  int64_t OutputSize() const { return Product(output); }
  static int64_t Product(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
  }
};

// Reads kernel_shape, strides, dilations, pads, auto_pad and ceil_mode and derives the output size.
PoolGeometry ReadPoolGeometry(const KernelContext& ctx, const Tensor& x, bool allow_dilations) {
  const Node& node = ctx.node();
  const std::string what = node.Describe();
  ET_CHECK(x.rank() >= 3, ErrorCode::kInvalidArgument, what, ": pooling needs an input of rank >= 3, got ",
           ShapeToString(x.shape()));
  const size_t spatial = x.rank() - 2;
  PoolGeometry g;
  g.planes = x.dim(0) * x.dim(1);
  g.input.assign(x.shape().begin() + 2, x.shape().end());
  ET_CHECK(node.HasAttr("kernel_shape"), ErrorCode::kInvalidModel, what, ": attribute 'kernel_shape' is required");
  g.kernel = node.GetInts("kernel_shape");
  g.strides = node.GetInts("strides", std::vector<int64_t>(spatial, 1));
  g.dilations = allow_dilations ? node.GetInts("dilations", std::vector<int64_t>(spatial, 1))
                                : std::vector<int64_t>(spatial, 1);
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
  ET_CHECK(g.kernel.size() == spatial && g.strides.size() == spatial && g.dilations.size() == spatial &&
               pads.size() == 2 * spatial,
           ErrorCode::kInvalidArgument, what, ": kernel_shape/strides/dilations/pads do not match ", spatial,
           " spatial dimensions of input ", ShapeToString(x.shape()));
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(spatial));
  g.pad_end.assign(pads.begin() + static_cast<int64_t>(spatial), pads.end());
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  ET_CHECK(auto_pad == "NOTSET" || auto_pad == "VALID" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER",
           ErrorCode::kNotImplemented, what, ": auto_pad '", auto_pad, "' is not supported");
  const bool ceil_mode = node.GetInt("ceil_mode", 0) != 0;
  g.output.resize(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    ET_CHECK(g.kernel[d] >= 1 && g.strides[d] >= 1 && g.dilations[d] >= 1 && g.pad_begin[d] >= 0 && g.pad_end[d] >= 0,
             ErrorCode::kInvalidArgument, what, ": kernel_shape, strides and dilations must be >= 1 and pads >= 0");
    const int64_t extent = (g.kernel[d] - 1) * g.dilations[d] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.output[d] = CeilDiv(g.input[d], g.strides[d]);
      const int64_t total = std::max<int64_t>(0, (g.output[d] - 1) * g.strides[d] + extent - g.input[d]);
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
      continue;
    }
    if (auto_pad == "VALID") g.pad_begin[d] = g.pad_end[d] = 0;
    const int64_t room = g.input[d] + g.pad_begin[d] + g.pad_end[d] - extent;
    ET_CHECK(room >= 0, ErrorCode::kInvalidArgument, what, ": kernel extent ", extent,
             " is larger than the padded input on spatial axis ", d);
    g.output[d] = (ceil_mode ? CeilDiv(room, g.strides[d]) : room / g.strides[d]) + 1;
    // A window may not start in the end padding (it would see no input).
    if (ceil_mode && (g.output[d] - 1) * g.strides[d] >= g.input[d] + g.pad_begin[d]) --g.output[d];
  }
  return g;
}

// For every output position, the row-major spatial offsets of the input taps its window covers
// (taps outside the input are skipped), and how many taps fall inside the padded input.
struct PoolWindows {
  std::vector<int64_t> begin;    // output o uses offsets[begin[o] .. begin[o+1])
  std::vector<int64_t> offsets;
  std::vector<int64_t> padded_counts;
};

PoolWindows BuildWindows(const PoolGeometry& g) {
  const size_t spatial = g.input.size();
  const int64_t out_size = g.OutputSize();
  PoolWindows w;
  w.begin.reserve(static_cast<size_t>(out_size) + 1);
  w.padded_counts.reserve(static_cast<size_t>(out_size));
  std::vector<int64_t> in_strides(spatial, 1);
  for (size_t d = spatial - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * g.input[d + 1];
  std::vector<int64_t> opos(spatial, 0), start(spatial), klo(spatial), khi(spatial), k(spatial);
  for (int64_t o = 0; o < out_size; ++o) {
    w.begin.push_back(static_cast<int64_t>(w.offsets.size()));
    int64_t taps = 1, padded = 1;
    for (size_t d = 0; d < spatial; ++d) {
      start[d] = opos[d] * g.strides[d] - g.pad_begin[d];
      klo[d] = std::clamp<int64_t>(CeilDiv(-start[d], g.dilations[d]), 0, g.kernel[d]);
      khi[d] = std::clamp<int64_t>(FloorDiv(g.input[d] - 1 - start[d], g.dilations[d]) + 1, klo[d], g.kernel[d]);
      taps *= khi[d] - klo[d];
      const int64_t padded_end = g.input[d] + g.pad_end[d];
      padded *= std::clamp<int64_t>(FloorDiv(padded_end - 1 - start[d], g.dilations[d]) + 1, 0, g.kernel[d]);
      k[d] = klo[d];
    }
    w.padded_counts.push_back(padded);
    for (int64_t t = 0; t < taps; ++t) {
      int64_t offset = 0;
      for (size_t d = 0; d < spatial; ++d) offset += (start[d] + k[d] * g.dilations[d]) * in_strides[d];
      w.offsets.push_back(offset);
      for (size_t d = spatial; d-- > 0;) {
        if (++k[d] < khi[d]) break;
        k[d] = klo[d];
      }
    }
    for (size_t d = spatial; d-- > 0;) {
      if (++opos[d] < g.output[d]) break;
      opos[d] = 0;
    }
  }
  w.begin.push_back(static_cast<int64_t>(w.offsets.size()));
  return w;
}

Shape PoolOutputShape(const Tensor& x, const std::vector<int64_t>& spatial_out) {
  Shape shape = {x.dim(0), x.dim(1)};
  shape.insert(shape.end(), spatial_out.begin(), spatial_out.end());
  return shape;
}

// Runs fn(plane_begin, plane_end) over the (image, channel) planes in parallel.
template <typename Fn>
void ForEachPlane(KernelContext& ctx, int64_t planes, int64_t work_per_plane, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work_per_plane, 1));
  ctx.threads().ParallelFor(planes, grain, fn);
}

// Row-major spatial offset -> column-major spatial offset (MaxPool storage_order = 1).
int64_t ColumnMajorOffset(int64_t offset, const std::vector<int64_t>& dims) {
  int64_t result = 0, stride = 1;
  std::vector<int64_t> index(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    index[d] = offset % dims[d];
    offset /= dims[d];
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    result += index[d] * stride;
    stride *= dims[d];
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// MaxPool (optional Indices output: flat index into the input, honouring storage_order)

void MaxPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::string what = ctx.node().Describe();
  const PoolGeometry g = ReadPoolGeometry(ctx, x, true);
  const int64_t storage_order = ctx.node().GetInt("storage_order", 0);
  ET_CHECK(storage_order == 0 || storage_order == 1, ErrorCode::kInvalidArgument, what, ": storage_order ",
           storage_order, " must be 0 or 1");
  const PoolWindows windows = BuildWindows(g);
  const Shape out_shape = PoolOutputShape(x, g.output);
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  const bool want_indices = ctx.HasOutput(1);
  int64_t* indices = want_indices ? ctx.Output(1, out_shape, DataType::kInt64).data<int64_t>() : nullptr;
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitNumeric(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlane(ctx, g.planes, static_cast<int64_t>(windows.offsets.size()), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* xin = xp + plane * in_size;
        T* yout = yp + plane * out_size;
        for (int64_t o = 0; o < out_size; ++o) {
          const int64_t* taps = windows.offsets.data() + windows.begin[o];
          const int64_t count = windows.begin[o + 1] - windows.begin[o];
          T best = std::numeric_limits<T>::lowest();
          int64_t best_offset = count > 0 ? taps[0] : 0;
          if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
          for (int64_t t = 0; t < count; ++t) {
            const T v = xin[taps[t]];
            if (v > best) {
              best = v;
              best_offset = taps[t];
            }
          }
          yout[o] = best;
          if (indices) {
            const int64_t local = storage_order == 0 ? best_offset : ColumnMajorOffset(best_offset, g.input);
            indices[plane * out_size + o] = plane * in_size + local;
          }
        }
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// AveragePool and LpPool

void AveragePoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::string what = ctx.node().Describe();
  const PoolGeometry g = ReadPoolGeometry(ctx, x, true);
  const bool count_include_pad = ctx.node().GetInt("count_include_pad", 0) != 0;
  const PoolWindows windows = BuildWindows(g);
  Tensor& y = ctx.Output(0, PoolOutputShape(x, g.output), x.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlane(ctx, g.planes, static_cast<int64_t>(windows.offsets.size()), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* xin = xp + plane * in_size;
        T* yout = yp + plane * out_size;
        for (int64_t o = 0; o < out_size; ++o) {
          const int64_t* taps = windows.offsets.data() + windows.begin[o];
          const int64_t count = windows.begin[o + 1] - windows.begin[o];
          T sum = T(0);
          for (int64_t t = 0; t < count; ++t) sum += xin[taps[t]];
          const int64_t divisor = count_include_pad ? windows.padded_counts[o] : count;
          yout[o] = divisor > 0 ? sum / static_cast<T>(divisor) : T(0);
        }
      }
    });
  });
}

// The p of LpPool/GlobalLpPool: an int since opset 2, a float before.
double LpNormOrder(const KernelContext& ctx) {
  const Attribute* p = ctx.node().Find("p");
  if (!p) return 2.0;
  const double value = p->kind == Attribute::Kind::kFloat ? static_cast<double>(p->f) : static_cast<double>(p->i);
  ET_CHECK(value > 0, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": p must be positive, got ", value);
  return value;
}

template <typename T>
T LpCombine(const T* x, const int64_t* taps, int64_t count, double p) {
  if (p == 2.0) {
    T sum = T(0);
    for (int64_t t = 0; t < count; ++t) sum += x[taps[t]] * x[taps[t]];
    return std::sqrt(sum);
  }
  if (p == 1.0) {
    T sum = T(0);
    for (int64_t t = 0; t < count; ++t) sum += std::abs(x[taps[t]]);
    return sum;
  }
  T sum = T(0);
  for (int64_t t = 0; t < count; ++t) sum += static_cast<T>(std::pow(std::abs(x[taps[t]]), static_cast<T>(p)));
  return static_cast<T>(std::pow(sum, static_cast<T>(1.0 / p)));
}

void LpPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::string what = ctx.node().Describe();
  const PoolGeometry g = ReadPoolGeometry(ctx, x, true);
  const double p = LpNormOrder(ctx);
  const PoolWindows windows = BuildWindows(g);
  Tensor& y = ctx.Output(0, PoolOutputShape(x, g.output), x.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlane(ctx, g.planes, static_cast<int64_t>(windows.offsets.size()), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        for (int64_t o = 0; o < out_size; ++o)
          yp[plane * out_size + o] = LpCombine(xp + plane * in_size, windows.offsets.data() + windows.begin[o],
                                               windows.begin[o + 1] - windows.begin[o], p);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: one value per (image, channel) plane

enum class GlobalKind { kAverage, kMax, kLp };

void GlobalPool(KernelContext& ctx, GlobalKind kind) {
  const Tensor& x = ctx.Input(0);
  const std::string what = ctx.node().Describe();
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, what, ": global pooling needs an input of rank >= 2, got ",
           ShapeToString(x.shape()));
  Shape out_shape = {x.dim(0), x.dim(1)};
  out_shape.resize(x.rank(), 1);
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t size = planes > 0 ? x.numel() / planes : 0;
  const double p = kind == GlobalKind::kLp ? LpNormOrder(ctx) : 2.0;
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlane(ctx, planes, size, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* v = xp + plane * size;
        if (kind == GlobalKind::kMax) {
          T best = std::numeric_limits<T>::lowest();
          if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
          for (int64_t i = 0; i < size; ++i) best = v[i] > best ? v[i] : best;
          yp[plane] = best;
        } else if constexpr (std::is_floating_point_v<T>) {
          if (kind == GlobalKind::kAverage) {
            T sum = T(0);
            for (int64_t i = 0; i < size; ++i) sum += v[i];
            yp[plane] = size > 0 ? sum / static_cast<T>(size) : T(0);
          } else {
            T sum = T(0);
            for (int64_t i = 0; i < size; ++i) sum += static_cast<T>(std::pow(std::abs(v[i]), static_cast<T>(p)));
            yp[plane] = static_cast<T>(std::pow(sum, static_cast<T>(1.0 / p)));
          }
        }
      }
    });
  };
  if (kind == GlobalKind::kMax) {
    VisitNumeric(x.dtype(), what, run);
  } else {
    VisitFloat(x.dtype(), what, run);
  }
}

void GlobalAveragePoolKernel(KernelContext& ctx) { GlobalPool(ctx, GlobalKind::kAverage); }
void GlobalMaxPoolKernel(KernelContext& ctx) { GlobalPool(ctx, GlobalKind::kMax); }
void GlobalLpPoolKernel(KernelContext& ctx) { GlobalPool(ctx, GlobalKind::kLp); }

// ---------------------------------------------------------------------------------------------
// MaxUnpool: scatters X into a zero tensor at the flat indices I (as produced by MaxPool)

void MaxUnpoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  const Node& node = ctx.node();
  const std::string what = node.Describe();
  ET_CHECK(x.rank() >= 3 && indices.shape() == x.shape() && indices.dtype() == DataType::kInt64,
           ErrorCode::kInvalidArgument, what, ": I must be int64 with the shape of X ", ShapeToString(x.shape()));
  const size_t spatial = x.rank() - 2;
  ET_CHECK(node.HasAttr("kernel_shape"), ErrorCode::kInvalidModel, what, ": attribute 'kernel_shape' is required");
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  const std::vector<int64_t> strides = node.GetInts("strides", std::vector<int64_t>(spatial, 1));
  const std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
  ET_CHECK(kernel.size() == spatial && strides.size() == spatial && pads.size() == 2 * spatial,
           ErrorCode::kInvalidArgument, what, ": kernel_shape/strides/pads do not match ", spatial,
           " spatial dimensions");
  // The indices address the unpooled shape implied by the attributes; an explicit output_shape
  // keeps each element's spatial coordinates and only changes the extent.
  Shape implied = {x.dim(0), x.dim(1)};
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t size = (x.dim(d + 2) - 1) * strides[d] - pads[d] - pads[d + spatial] + kernel[d];
    ET_CHECK(size >= 0, ErrorCode::kInvalidArgument, what, ": negative output size on spatial axis ", d);
    implied.push_back(size);
  }
  Shape out_shape = implied;
  if (ctx.HasInput(2)) {
    out_shape = ctx.Input(2).ToInt64Vector();
    ET_CHECK(out_shape.size() == x.rank() && out_shape[0] == x.dim(0) && out_shape[1] == x.dim(1),
             ErrorCode::kInvalidArgument, what, ": output_shape ", ShapeToString(out_shape), " does not fit X ",
             ShapeToString(x.shape()));
  }
  std::vector<int64_t> where = indices.ToInt64Vector();
  const int64_t implied_count = NumElements(implied);
  for (int64_t& index : where) {
    ET_CHECK(index >= 0 && index < implied_count, ErrorCode::kOutOfRange, what, ": index ", index,
             " is out of range for an unpooled tensor of shape ", ShapeToString(implied));
    if (out_shape == implied) continue;
    int64_t rest = index, mapped = 0, scale = 1;
    for (size_t d = implied.size(); d-- > 0;) {
      const int64_t coordinate = rest % implied[d];
      rest /= implied[d];
      ET_CHECK(coordinate < out_shape[d], ErrorCode::kOutOfRange, what, ": index ", index,
               " falls outside output_shape ", ShapeToString(out_shape));
      mapped += coordinate * scale;
      scale *= out_shape[d];
    }
    index = mapped;
  }
  const int64_t out_count = NumElements(out_shape);
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  VisitAll(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    std::fill(yp, yp + out_count, T());
    for (size_t i = 0; i < where.size(); ++i) yp[where[i]] = xp[i];
  });
}

}  // namespace

void RegisterPoolOps(OpRegistry& r) {
  RegisterOnnx(r, "MaxPool", MaxPoolKernel);
  RegisterOnnx(r, "AveragePool", AveragePoolKernel);
  RegisterOnnx(r, "LpPool", LpPoolKernel);
  RegisterOnnx(r, "GlobalAveragePool", GlobalAveragePoolKernel);
  RegisterOnnx(r, "GlobalMaxPool", GlobalMaxPoolKernel);
  RegisterOnnx(r, "GlobalLpPool", GlobalLpPoolKernel);
  RegisterOnnx(r, "MaxUnpool", MaxUnpoolKernel);
}

}  // namespace edgetrain
