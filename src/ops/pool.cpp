// MaxPool, AveragePool, LpPool and their Global* forms, over any number of spatial dimensions.
// The windows are computed once per call as lists of input offsets, then every (image, channel)
// plane is reduced over them in parallel. Gradients: fused ai.edgetrain.MaxPoolGrad and
// AveragePoolGrad (scatter over the same windows), plain-op rules for the Global* forms.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cpu_features.hpp"
#include "ops/elementwise_util.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/pool_windows.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// An attribute name with a prefix, built on the stack: attribute lookups take string_view, and
// "pool_kernel_shape" is past std::string's short-string buffer (a heap allocation per call).
class PrefixedName {
 public:
  PrefixedName(std::string_view prefix, std::string_view name) : size_(prefix.size() + name.size()) {
    ET_CHECK(size_ <= sizeof(text_), ErrorCode::kInternal, "attribute name '", prefix, name, "' is too long");
    std::copy(prefix.begin(), prefix.end(), text_);
    std::copy(name.begin(), name.end(), text_ + prefix.size());
  }
  operator std::string_view() const { return {text_, size_}; }

 private:
  char text_[32];
  size_t size_;
};

}  // namespace

PoolGeometry ReadPoolGeometry(const KernelContext& ctx, const Shape& x, bool allow_dilations,
                              std::string_view prefix) {
  const Node& node = ctx.node();
  auto key = [prefix](std::string_view name) { return PrefixedName(prefix, name); };
  const std::string& what = node.Describe();
  ET_CHECK(x.size() >= 3, ErrorCode::kInvalidArgument, what, ": pooling needs an input of rank >= 3, got ",
           ShapeToString(x));
  const size_t spatial = x.size() - 2;
  PoolGeometry g;
  g.planes = x[0] * x[1];
  g.input.assign(x.begin() + 2, x.end());
  ET_CHECK(node.HasAttr(key("kernel_shape")), ErrorCode::kInvalidModel, what, ": attribute '", prefix,
           "kernel_shape' is required");
  g.kernel = node.GetInts(key("kernel_shape"));
  g.strides = node.GetInts(key("strides"), Int64Vector(spatial, 1));
  g.dilations = allow_dilations ? node.GetInts(key("dilations"), Int64Vector(spatial, 1)) : Int64Vector(spatial, 1);
  Int64Vector pads = node.GetInts(key("pads"), Int64Vector(2 * spatial, 0));
  ET_CHECK(g.kernel.size() == spatial && g.strides.size() == spatial && g.dilations.size() == spatial &&
               pads.size() == 2 * spatial,
           ErrorCode::kInvalidArgument, what, ": kernel_shape/strides/dilations/pads do not match ", spatial,
           " spatial dimensions of input ", ShapeToString(x));
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(spatial));
  g.pad_end.assign(pads.begin() + static_cast<int64_t>(spatial), pads.end());
  const std::string auto_pad = node.GetString(key("auto_pad"), "NOTSET");
  ET_CHECK(auto_pad == "NOTSET" || auto_pad == "VALID" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER",
           ErrorCode::kNotImplemented, what, ": auto_pad '", auto_pad, "' is not supported");
  const bool ceil_mode = node.GetInt(key("ceil_mode"), 0) != 0;
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

namespace {

using pool_detail::PoolWindows;
using pool_detail::WindowMax;
using pool_detail::WindowMaxima4;

// Calls fn(std::integral_constant<size_t, Extent>{}): Extent is the tap count all windows share when it
// is 4 or 9 (2x2 and 3x3 windows inside the input), so the window loops unroll; else dynamic_extent.
template <typename Fn>
void WithTapExtent(const PoolWindows& windows, Fn&& fn) {
  switch (windows.uniform_taps) {
    case 4: return fn(std::integral_constant<size_t, 4>{});
    case 9: return fn(std::integral_constant<size_t, 9>{});
    default: return fn(std::integral_constant<size_t, std::dynamic_extent>{});
  }
}

PoolWindows BuildWindows(const PoolGeometry& g) {
  const size_t spatial = g.input.size();
  const int64_t out_size = g.OutputSize();
  PoolWindows w;
  w.begin.reserve(static_cast<size_t>(out_size) + 1);
  w.padded_counts.reserve(static_cast<size_t>(out_size));
  Int64Vector in_strides(spatial, 1);
  for (size_t d = spatial - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * g.input[d + 1];
  Int64Vector opos(spatial, 0), start(spatial), klo(spatial), khi(spatial), k(spatial);
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
  w.uniform_taps = out_size > 0 ? w.begin[1] - w.begin[0] : 0;
  for (int64_t o = 1; o < out_size && w.uniform_taps; ++o)
    if (w.begin[o + 1] - w.begin[o] != w.uniform_taps) w.uniform_taps = 0;
  return w;
}

// The windows of `g`, kept in the node's state and rebuilt only when the geometry changes, so that
// a warm run allocates nothing (built afresh where the context keeps no state).
std::shared_ptr<const PoolWindows> WindowsFor(KernelContext& ctx, const PoolGeometry& g) {
  struct Cached {
    PoolGeometry geometry;
    PoolWindows windows;
  };
  static constexpr char kUser = 0;
  std::shared_ptr<void>* state = ctx.NodeStateFor(&kUser);
  if (state && *state) {
    auto cached = std::static_pointer_cast<Cached>(*state);
    if (cached->geometry == g) return {cached, &cached->windows};
  }
  auto fresh = std::make_shared<Cached>(Cached{g, BuildWindows(g)});
  if (state) *state = fresh;
  return {fresh, &fresh->windows};
}

Shape PoolOutputShape(const Shape& x, const Int64Vector& spatial_out) {
  Shape shape = {x[0], x[1]};
  shape.insert(shape.end(), spatial_out.begin(), spatial_out.end());
  return shape;
}

// Runs fn(plane_begin, plane_end) over the (image, channel) planes in parallel.
template <typename Fn>
void ForEachPlane(KernelContext& ctx, int64_t planes, int64_t work_per_plane, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work_per_plane, 1));
  ctx.threads().ParallelFor(planes, grain, fn);
}

// Runs fn(plane, extent) for every (image, channel) plane in parallel; `extent` is WithTapExtent's.
template <typename Fn>
void ForEachPlaneWithTaps(KernelContext& ctx, const PoolGeometry& g, const PoolWindows& windows, Fn&& fn) {
  WithTapExtent(windows, [&](auto extent) {
    ForEachPlane(ctx, g.planes, static_cast<int64_t>(windows.offsets.size()), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) fn(plane, extent);
    });
  });
}

// fn(o, best, offset) for every output position o of a plane, in order: WindowMax of its window.
template <typename T, typename Extent, typename Fn>
void ForEachWindowMax(const PoolGeometry& g, const PoolWindows& windows, Extent, const T* plane, Fn&& fn) {
  const int64_t count = g.OutputSize();
  int64_t o = 0;
#if defined(__wasm_simd128__)
  if constexpr (std::is_same_v<T, float> && Extent::value != std::dynamic_extent) {
    for (; o + 4 <= count; o += 4) {
      float best[4];
      int64_t offset[4];
      WindowMaxima4<Extent::value>(plane, windows, o, best, offset);
      for (int64_t i = 0; i < 4; ++i) fn(o + i, best[i], offset[i]);
    }
  }
#endif
  for (; o < count; ++o) {
    const auto [best, offset] = WindowMax(plane, windows.Taps<Extent::value>(o));
    fn(o, best, offset);
  }
}

// 2-D float windows without dilation whose every window holds an input tap. Their taps are computed rather than read
// from the table, whose int64 offsets (9 per window of a 3x3 pool) were most of the memory traffic (ResNet-18's
// stride-2 pool over 112x112 planes). Not on WebAssembly, which takes four table windows at a time in vectors.
bool DirectWindows2D(const PoolGeometry& g) {
#if defined(__wasm_simd128__)
  (void)g;
  return false;
#else
  if (g.input.size() != 2) return false;
  for (size_t d = 0; d < 2; ++d)
    if (g.dilations[d] != 1 || g.pad_begin[d] >= g.kernel[d] ||
        (g.output[d] - 1) * g.strides[d] >= g.input[d] + g.pad_begin[d])
      return false;
  return true;
#endif
}

#if defined(__GNUC__) && defined(__x86_64__)
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

// Eight taps S columns apart from p: the stride-2 load reads one float past the last of them.
template <int64_t S>
__attribute__((target("avx2"), always_inline)) inline F8 LoadStrided8(const float* p) {
  F8 lo;
  __builtin_memcpy(&lo, p, sizeof lo);
  if constexpr (S == 1) {
    return lo;
  } else {
    F8 hi;
    __builtin_memcpy(&hi, p + 8, sizeof hi);
    return __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
  }
}

// The window maxima of `count` (a multiple of 8) consecutive outputs of one output row, eight in the lanes of a
// vector, with ForEachDirectWindowMax's comparisons lane by lane: windows of rows [r_lo, r_hi) from plane row r0 and
// all KW columns from column c0 + S * k for output k, every tap (and, for S = 2, the float after it) inside the row.
template <int64_t S, int64_t KW>
__attribute__((target("avx2"))) void RowWindowMaximaAvx2(const float* plane, int64_t w, int64_t r0, int64_t r_lo,
                                                         int64_t r_hi, int64_t kw_runtime, int64_t c0, int64_t count,
                                                         float* best, int32_t* at) {
  const int64_t kw = KW ? KW : kw_runtime;
  const I8 lanes = {0, S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S};
  for (int64_t k = 0; k < count; k += 8) {
    const int64_t column = c0 + S * k;
    F8 top = F8{} - std::numeric_limits<float>::infinity();
    I8 where = lanes + static_cast<int32_t>((r0 + r_lo) * w + column);
    for (int64_t r = r_lo; r < r_hi; ++r) {
      const int64_t row = (r0 + r) * w + column;
      for (int64_t c = 0; c < kw; ++c) {
        const F8 v = LoadStrided8<S>(plane + row + c);
        const I8 better = v > top;
        top = better ? v : top;
        where = better ? lanes + static_cast<int32_t>(row + c) : where;
      }
    }
    __builtin_memcpy(best + k, &top, sizeof top);
    __builtin_memcpy(at + k, &where, sizeof where);
  }
}

template <int64_t KW>
void RowWindowMaxima(int64_t s, const float* plane, int64_t w, int64_t r0, int64_t r_lo, int64_t r_hi, int64_t kw,
                     int64_t c0, int64_t count, float* best, int32_t* at) {
  if (s == 1) return RowWindowMaximaAvx2<1, KW>(plane, w, r0, r_lo, r_hi, kw, c0, count, best, at);
  RowWindowMaximaAvx2<2, KW>(plane, w, r0, r_lo, r_hi, kw, c0, count, best, at);
}

// Whether a plane's rows take RowWindowMaxima: column strides 1 and 2, offsets within int32.
bool VectorWindowRows(const PoolGeometry& g) {
  return CpuHasAvx2() && (g.strides[1] == 1 || g.strides[1] == 2) && g.InputSize() < (int64_t{1} << 31);
}
#endif

// fn(o, best, offset) for every output position o of a plane, in order: the same taps in the same order as the
// table's windows (the valid taps of each window, row-major), so the same maxima and first-maximum offsets.
// KH and KW are the kernel's extents when fixed at compile time (the tap loops unroll), else 0. Where the CPU has
// AVX2, the outputs whose windows lie inside the row's columns go eight at a time (RowWindowMaxima).
template <int64_t KH, int64_t KW, typename Fn>
void ForEachDirectWindowMax(const PoolGeometry& g, const float* plane, Fn&& fn) {
  const int64_t h = g.input[0], w = g.input[1], kh = KH ? KH : g.kernel[0], kw = KW ? KW : g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], out_w = g.output[1];
  // The outputs [vector_begin, vector_end) of each row go through RowWindowMaxima, the rest one by one.
  int64_t vector_begin = 0, vector_end = 0;
#if defined(__GNUC__) && defined(__x86_64__)
  constexpr int64_t kChunk = 256;
  float best_run[kChunk];
  int32_t at_run[kChunk];
  if (VectorWindowRows(g)) {
    // Outputs [vector_begin, inside_end) have every tap (and, at stride 2, the float after the last) inside the row.
    vector_begin = std::min(out_w, CeilDiv(g.pad_begin[1], sw));
    const int64_t inside_end = std::min(out_w, FloorDiv(w - kw - (sw - 1) + g.pad_begin[1], sw) + 1);
    vector_end = vector_begin + std::max<int64_t>(0, inside_end - vector_begin) / 8 * 8;
  }
#endif
  for (int64_t i = 0, o = 0; i < g.output[0]; ++i) {
    const int64_t r0 = i * sh - g.pad_begin[0];
    const int64_t r_lo = std::max<int64_t>(0, -r0), r_hi = std::min(kh, h - r0);
    auto one_output = [&](int64_t j) {
      const int64_t c0 = j * sw - g.pad_begin[1];
      const int64_t c_lo = std::max<int64_t>(0, -c0), c_hi = std::min(kw, w - c0);
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = (r0 + r_lo) * w + c0 + c_lo;
      for (int64_t r = r_lo; r < r_hi; ++r) {
        const int64_t row = (r0 + r) * w + c0;
        for (int64_t c = c_lo; c < c_hi; ++c) {
          const float v = plane[row + c];
          const bool better = v > best;  // selects, not branches: random data mispredicts
          at = better ? row + c : at;
          best = better ? v : best;
        }
      }
      fn(o + j, best, at);
    };
    for (int64_t j = 0; j < vector_begin; ++j) one_output(j);
#if defined(__GNUC__) && defined(__x86_64__)
    for (int64_t j = vector_begin; j < vector_end; j += kChunk) {
      const int64_t count = std::min(kChunk, vector_end - j);
      RowWindowMaxima<KW>(sw, plane, w, r0, r_lo, r_hi, kw, j * sw - g.pad_begin[1], count, best_run, at_run);
      for (int64_t k = 0; k < count; ++k) fn(o + j + k, best_run[k], int64_t{at_run[k]});
    }
#endif
    for (int64_t j = vector_end; j < out_w; ++j) one_output(j);
    o += out_w;
  }
}

// ForEachDirectWindowMax with the common kernels unrolled.
template <typename Fn>
void ForEachDirectWindowMaxOfKernel(const PoolGeometry& g, const float* plane, Fn&& fn) {
  if (g.kernel[0] == 3 && g.kernel[1] == 3) return ForEachDirectWindowMax<3, 3>(g, plane, fn);
  if (g.kernel[0] == 2 && g.kernel[1] == 2) return ForEachDirectWindowMax<2, 2>(g, plane, fn);
  ForEachDirectWindowMax<0, 0>(g, plane, fn);
}

// Row-major spatial offset -> column-major spatial offset (MaxPool storage_order = 1).
int64_t ColumnMajorOffset(int64_t offset, const Int64Vector& dims) {
  int64_t result = 0, stride = 1;
  Int64Vector index(dims.size());
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// MaxPool (optional Indices output: flat index into the input, honouring storage_order)

void MaxPoolCompute(KernelContext& ctx, const Tensor& x, const PoolGeometry& g, Tensor& y, int64_t* indices,
                    int64_t storage_order) {
  const std::string& what = ctx.node().Describe();
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  if (x.dtype() == DataType::kFloat32 && DirectWindows2D(g)) {
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    ForEachPlane(ctx, g.planes, out_size * g.kernel[0] * g.kernel[1], [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        float* yout = yp + plane * out_size;
        ForEachDirectWindowMaxOfKernel(g, xp + plane * in_size, [&](int64_t o, float best, int64_t best_offset) {
          yout[o] = best;
          if (indices) {
            const int64_t local = storage_order == 0 ? best_offset : ColumnMajorOffset(best_offset, g.input);
            indices[plane * out_size + o] = plane * in_size + local;
          }
        });
      }
    });
    return;
  }
  const auto cached_windows = WindowsFor(ctx, g);
  const PoolWindows& windows = *cached_windows;
  VisitNumeric(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlaneWithTaps(ctx, g, windows, [&](int64_t plane, auto extent) {
      const T* xin = xp + plane * in_size;
      T* yout = yp + plane * out_size;
      ForEachWindowMax(g, windows, extent, xin, [&](int64_t o, T best, int64_t best_offset) {
        yout[o] = best;
        if (indices) {
          const int64_t local = storage_order == 0 ? best_offset : ColumnMajorOffset(best_offset, g.input);
          indices[plane * out_size + o] = plane * in_size + local;
        }
      });
    });
  });
}

namespace {

void MaxPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const PoolGeometry g = ReadPoolGeometry(ctx, x.shape(), true);
  const int64_t storage_order = ctx.node().GetInt("storage_order", 0);
  ET_CHECK(storage_order == 0 || storage_order == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": storage_order ", storage_order, " must be 0 or 1");
  const Shape out_shape = PoolOutputShape(x.shape(), g.output);
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  int64_t* indices = ctx.HasOutput(1) ? ctx.Output(1, out_shape, DataType::kInt64).data<int64_t>() : nullptr;
  MaxPoolCompute(ctx, x, g, y, indices, storage_order);
}

// ---------------------------------------------------------------------------------------------
// AveragePool and LpPool

void AveragePoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::string& what = ctx.node().Describe();
  const PoolGeometry g = ReadPoolGeometry(ctx, x.shape(), true);
  const bool count_include_pad = ctx.node().GetInt("count_include_pad", 0) != 0;
  const auto cached_windows = WindowsFor(ctx, g);
  const PoolWindows& windows = *cached_windows;
  Tensor& y = ctx.Output(0, PoolOutputShape(x.shape(), g.output), x.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlaneWithTaps(ctx, g, windows, [&](int64_t plane, auto extent) {
      const T* xin = xp + plane * in_size;
      T* yout = yp + plane * out_size;
      for (int64_t o = 0; o < out_size; ++o) {
        const auto taps = windows.Taps<extent()>(o);
        T sum = T(0);
        for (int64_t tap : taps) sum += xin[tap];
        const int64_t count = static_cast<int64_t>(taps.size());
        const int64_t divisor = count_include_pad ? windows.padded_counts[o] : count;
        yout[o] = divisor > 0 ? sum / static_cast<T>(divisor) : T(0);
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
T LpCombine(const T* x, std::span<const int64_t> taps, double p) {
  T sum = T(0);
  if (p == 2.0) {
    for (int64_t tap : taps) sum += x[tap] * x[tap];
    return std::sqrt(sum);
  }
  if (p == 1.0) {
    for (int64_t tap : taps) sum += std::abs(x[tap]);
    return sum;
  }
  for (int64_t tap : taps) sum += static_cast<T>(std::pow(std::abs(x[tap]), static_cast<T>(p)));
  return static_cast<T>(std::pow(sum, static_cast<T>(1.0 / p)));
}

void LpPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::string& what = ctx.node().Describe();
  const PoolGeometry g = ReadPoolGeometry(ctx, x.shape(), true);
  const double p = LpNormOrder(ctx);
  const auto cached_windows = WindowsFor(ctx, g);
  const PoolWindows& windows = *cached_windows;
  Tensor& y = ctx.Output(0, PoolOutputShape(x.shape(), g.output), x.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ForEachPlane(ctx, g.planes, static_cast<int64_t>(windows.offsets.size()), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane)
        for (int64_t o = 0; o < out_size; ++o)
          yp[plane * out_size + o] = LpCombine(xp + plane * in_size, windows.Taps(o), p);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: one value per (image, channel) plane

enum class GlobalKind { kAverage, kMax, kLp };

void GlobalPool(KernelContext& ctx, GlobalKind kind) {
  const Tensor& x = ctx.Input(0);
  const std::string& what = ctx.node().Describe();
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
            if constexpr (std::is_same_v<T, float>) {
              yp[plane] = size > 0 ? static_cast<T>(elementwise::SumInDouble(v, size) / static_cast<double>(size)) : T(0);
              continue;
            }
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
  const std::string& what = node.Describe();
  ET_CHECK(x.rank() >= 3 && indices.shape() == x.shape() && indices.dtype() == DataType::kInt64,
           ErrorCode::kInvalidArgument, what, ": I must be int64 with the shape of X ", ShapeToString(x.shape()));
  const size_t spatial = x.rank() - 2;
  ET_CHECK(node.HasAttr("kernel_shape"), ErrorCode::kInvalidModel, what, ": attribute 'kernel_shape' is required");
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  const std::vector<int64_t> strides = node.GetInts("strides", Int64Vector(spatial, 1));
  const std::vector<int64_t> pads = node.GetInts("pads", Int64Vector(2 * spatial, 0));
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

// ---------------------------------------------------------------------------------------------
// MaxPoolGrad and AveragePoolGrad: (dY, X) -> dX, with the forward op's attributes

void CheckPoolGradient(const KernelContext& ctx, const Tensor& dy, const Shape& x_shape, const PoolGeometry& g) {
  ET_CHECK(dy.shape() == PoolOutputShape(x_shape, g.output), ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": dY of shape ", ShapeToString(dy.shape()), " does not match the pooled shape ",
           ShapeToString(PoolOutputShape(x_shape, g.output)), " of X ", ShapeToString(x_shape));
}

void CheckSameType(const KernelContext& ctx, const Tensor& dy, const Tensor& x) {
  ET_CHECK(dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": dY is ",
           DataTypeName(dy.dtype()), " but X is ", DataTypeName(x.dtype()));
}

// Each output's gradient goes to the first maximum of its window (the tap MaxPool's Indices name).
void MaxPoolGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  CheckSameType(ctx, dy, x);
  const PoolGeometry g = ReadPoolGeometry(ctx, x.shape(), true);
  CheckPoolGradient(ctx, dy, x.shape(), g);
  Tensor& dx = ctx.Output(0, x.shape(), x.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  if (x.dtype() == DataType::kFloat32 && DirectWindows2D(g)) {
    const float* xp = x.data<float>();
    const float* dyp = dy.data<float>();
    float* dxp = dx.data<float>();
    ForEachPlane(ctx, g.planes, out_size * g.kernel[0] * g.kernel[1], [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* dyout = dyp + plane * out_size;
        float* dxin = dxp + plane * in_size;
        std::fill(dxin, dxin + in_size, 0.0f);
        ForEachDirectWindowMaxOfKernel(g, xp + plane * in_size,
                                       [&](int64_t o, float, int64_t best) { dxin[best] += dyout[o]; });
      }
    });
    return;
  }
  const auto cached_windows = WindowsFor(ctx, g);
  const PoolWindows& windows = *cached_windows;
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dxp = dx.data<T>();
    ForEachPlaneWithTaps(ctx, g, windows, [&](int64_t plane, auto extent) {
      const T* xin = xp + plane * in_size;
      const T* dyout = dyp + plane * out_size;
      T* dxin = dxp + plane * in_size;
      std::fill(dxin, dxin + in_size, T(0));
      ForEachWindowMax(g, windows, extent, xin, [&](int64_t o, T, int64_t best) { dxin[best] += dyout[o]; });
    });
  });
}

}  // namespace

// Each output's gradient is spread evenly (by AveragePool's divisor) over its window's taps.
void AveragePoolBackward(KernelContext& ctx, const Tensor& dy, const Shape& x_shape) {
  const PoolGeometry g = ReadPoolGeometry(ctx, x_shape, true);
  CheckPoolGradient(ctx, dy, x_shape, g);
  const bool count_include_pad = ctx.node().GetInt("count_include_pad", 0) != 0;
  const auto cached_windows = WindowsFor(ctx, g);
  const PoolWindows& windows = *cached_windows;
  Tensor& dx = ctx.Output(0, x_shape, dy.dtype());
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  VisitFloat(dy.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dyp = dy.data<T>();
    T* dxp = dx.data<T>();
    ForEachPlaneWithTaps(ctx, g, windows, [&](int64_t plane, auto extent) {
      const T* dyout = dyp + plane * out_size;
      T* dxin = dxp + plane * in_size;
      std::fill(dxin, dxin + in_size, T(0));
      for (int64_t o = 0; o < out_size; ++o) {
        const auto taps = windows.Taps<extent()>(o);
        const int64_t divisor = count_include_pad ? windows.padded_counts[o] : static_cast<int64_t>(taps.size());
        if (divisor <= 0) continue;
        const T share = dyout[o] / static_cast<T>(divisor);
        for (int64_t tap : taps) dxin[tap] += share;
      }
    });
  });
}

namespace {

void AveragePoolGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  CheckSameType(ctx, dy, x);
  AveragePoolBackward(ctx, dy, x.shape());
}

Attribute RefInts(const std::string& name) { return Attribute::Ref(Attribute::Kind::kInts, name); }
Attribute FloatOne() { return Attribute::TensorValue(Tensor::FromVector<float>({1.0f}, {1})); }

// MaxPoolGrad in standard ops: MaxPool's Indices (flat, row-major) say where each dY goes;
// ScatterElements with reduction 'add' on the flattened input.
std::shared_ptr<const FunctionDef> MaxPoolGradFunction() {
  FunctionBuilder b("MaxPoolGrad", {"dY", "X"}, {"dX"},
                    {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"});
  b.Node("MaxPool", {"X"}, {"pooled", "indices"},
         {{"kernel_shape", RefInts("kernel_shape")},
          {"strides", RefInts("strides")},
          {"pads", RefInts("pads")},
          {"auto_pad", Attribute::Ref(Attribute::Kind::kString, "auto_pad")},
          {"ceil_mode", Attribute::Ref(Attribute::Kind::kInt, "ceil_mode")},
          {"dilations", RefInts("dilations")}});
  b.Ints("flat", {-1});
  b.Node("Reshape", {"indices", "flat"}, {"flat_indices"});
  b.Node("Reshape", {"dY", "flat"}, {"flat_dy"});
  b.Node("Reshape", {"X", "flat"}, {"flat_x"});
  b.Node("Shape", {"flat_x"}, {"count"});
  b.Node("ConstantOfShape", {"count"}, {"zeros_float"});
  b.Node("CastLike", {"zeros_float", "X"}, {"zeros"});
  b.Node("ScatterElements", {"zeros", "flat_indices", "flat_dy"}, {"flat_dx"},
         {{"axis", Attribute::Int(0)}, {"reduction", Attribute::String("add")}});
  b.Node("Shape", {"X"}, {"x_shape"});
  b.Node("Reshape", {"flat_dx", "x_shape"}, {"dX"});
  return b.Build();
}

// AveragePoolGrad in standard ops (needs explicit strides, pads and count_include_pad):
// divisors = Conv of a ones plane, padded with count_include_pad and then zeros, by a ones window;
// dX = ConvTranspose(dY / divisors, ones window) per plane, cropped by the pads.
std::shared_ptr<const FunctionDef> AveragePoolGradFunction() {
  FunctionBuilder b("AveragePoolGrad", {"dY", "X"}, {"dX"},
                    {"kernel_shape", "strides", "pads", "count_include_pad", "dilations"});
  const Attribute axis0 = Attribute::Int(0);
  const AttributeMap window_attrs = {{"strides", RefInts("strides")},
                                                         {"dilations", RefInts("dilations")}};
  b.Ints("zero", {0});
  b.Ints("two", {2});
  b.Ints("to_end", {std::numeric_limits<int64_t>::max()});
  b.Ints("zeros_2", {0, 0});
  b.Ints("ones_2", {1, 1});
  b.Ints("planes_1", {-1, 1});
  b.Node("Shape", {"X"}, {"x_shape"});
  b.Node("Shape", {"dY"}, {"dy_shape"});
  b.Node("Slice", {"x_shape", "two", "to_end"}, {"x_spatial"});
  b.Node("Slice", {"dy_shape", "two", "to_end"}, {"dy_spatial"});
  b.Node("Concat", {"ones_2", "x_spatial"}, {"plane_shape"}, {{"axis", axis0}});
  b.Node("ConstantOfShape", {"plane_shape"}, {"plane_float"}, {{"value", FloatOne()}});
  b.Node("CastLike", {"plane_float", "X"}, {"plane"});
  b.Node("Constant", {}, {"kernel"}, {{"value_ints", RefInts("kernel_shape")}});
  b.Node("Concat", {"ones_2", "kernel"}, {"window_shape"}, {{"axis", axis0}});
  b.Node("ConstantOfShape", {"window_shape"}, {"window_float"}, {{"value", FloatOne()}});
  b.Node("CastLike", {"window_float", "X"}, {"window"});
  b.Node("Constant", {}, {"pads"}, {{"value_ints", RefInts("pads")}});
  b.Node("Constant", {}, {"strides"}, {{"value_ints", RefInts("strides")}});
  b.Node("Shape", {"pads"}, {"pads_count"});
  b.Node("Div", {"pads_count", "two"}, {"spatial_rank"});
  b.Node("Slice", {"pads", "zero", "spatial_rank"}, {"pad_begin"});
  b.Node("Slice", {"pads", "spatial_rank", "to_end"}, {"pad_end"});
  // Divisors: padding counts as 1 with count_include_pad, beyond it (ceil_mode) nothing counts.
  b.Node("Constant", {}, {"include_pad"}, {{"value_int", Attribute::Ref(Attribute::Kind::kInt, "count_include_pad")}});
  b.Node("CastLike", {"include_pad", "X"}, {"pad_value"});
  b.Node("Concat", {"zeros_2", "pad_begin", "zeros_2", "pad_end"}, {"padding"}, {{"axis", axis0}});
  b.Node("Pad", {"plane", "padding", "pad_value"}, {"padded"});
  b.Node("Sub", {"strides", "strides"}, {"spatial_zeros"});
  b.Node("Concat", {"zeros_2", "spatial_zeros", "zeros_2", "strides"}, {"margin"}, {{"axis", axis0}});
  b.Node("Pad", {"padded", "margin"}, {"counted"});
  b.Node("Conv", {"counted", "window"}, {"counts_wide"}, window_attrs);
  b.Node("Sub", {"dy_spatial", "dy_spatial"}, {"out_zeros"});
  b.Node("Concat", {"zeros_2", "out_zeros"}, {"count_starts"}, {{"axis", axis0}});
  b.Node("Concat", {"ones_2", "dy_spatial"}, {"count_ends"}, {{"axis", axis0}});
  b.Node("Slice", {"counts_wide", "count_starts", "count_ends"}, {"counts"});
  b.Node("Div", {"dY", "counts"}, {"scaled"});
  // Spread each plane back over its windows, then crop the padding.
  b.Node("Concat", {"planes_1", "dy_spatial"}, {"planes_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"scaled", "planes_shape"}, {"scaled_planes"});
  b.Node("ConvTranspose", {"scaled_planes", "window"}, {"spread"}, window_attrs);
  b.Node("Shape", {"spread"}, {"spread_shape"});
  b.Node("Slice", {"spread_shape", "two", "to_end"}, {"spread_spatial"});
  b.Node("Add", {"x_spatial", "pad_begin"}, {"x_end"});
  b.Node("Sub", {"x_end", "spread_spatial"}, {"crop_end"});
  b.Node("Neg", {"pad_begin"}, {"crop_begin"});
  b.Node("Concat", {"zeros_2", "crop_begin", "zeros_2", "crop_end"}, {"crop"}, {{"axis", axis0}});
  b.Node("Pad", {"spread", "crop"}, {"dx_planes"});
  b.Node("Reshape", {"dx_planes", "x_shape"}, {"dX"});
  return b.Build();
}

// ---------------------------------------------------------------------------------------------
// Gradient rules

// Copies the listed attributes of the forward node that are present.
AttributeMap CopyAttributes(const Node& node, const std::vector<std::string>& names) {
  AttributeMap attrs;
  for (const auto& name : names)
    if (const Attribute* a = node.Find(name)) attrs[name] = *a;
  return attrs;
}

void MaxPoolGradient(GradientContext& g) {
  if (g.dY(0).empty()) return;  // only Indices received a gradient (none flows through integers)
  auto attrs = CopyAttributes(g.node(), {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"});
  g.SetGrad(0, g.Op("MaxPoolGrad", {g.dY(0), g.X(0)}, std::move(attrs), kEdgetrainDomain));
}

// AveragePoolGrad takes explicit strides, pads and count_include_pad; auto_pad is resolved here.
void AveragePoolGradient(GradientContext& g) {
  const Node& node = g.node();
  const std::string& what = node.Describe();
  ET_CHECK(node.HasAttr("kernel_shape"), ErrorCode::kInvalidModel, what, ": attribute 'kernel_shape' is required");
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  const size_t spatial = kernel.size();
  const std::vector<int64_t> strides = node.GetInts("strides", Int64Vector(spatial, 1));
  const Int64Vector dilations = node.GetInts("dilations", Int64Vector(spatial, 1));
  Int64Vector pads = node.GetInts("pads", Int64Vector(2 * spatial, 0));
  ET_CHECK(strides.size() == spatial && dilations.size() == spatial && pads.size() == 2 * spatial,
           ErrorCode::kInvalidModel, what, ": strides/dilations/pads do not match kernel_shape");
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const ValueInfo* info = g.Info(g.X(0));
    bool known = info && info->has_shape && info->shape.size() == spatial + 2;
    for (size_t d = 0; known && d < spatial; ++d) known = info->shape[d + 2].known();
    ET_CHECK(known, ErrorCode::kNotImplemented, what,
             ": the gradient with auto_pad SAME needs static spatial sizes of X");
    for (size_t d = 0; d < spatial; ++d) {
      const int64_t input = info->shape[d + 2].value;
      const int64_t out = CeilDiv(input, strides[d]);
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - input);
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + spatial] = total - pads[d];
    }
  }
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  AttributeMap attrs = {{"kernel_shape", Attribute::Ints(kernel)},
                                            {"strides", Attribute::Ints(strides)},
                                            {"pads", Attribute::Ints(pads)},
                                            {"dilations", Attribute::Ints(dilations)},
                                            {"ceil_mode", Attribute::Int(same ? 0 : node.GetInt("ceil_mode", 0))},
                                            {"count_include_pad", Attribute::Int(node.GetInt("count_include_pad", 0))}};
  g.SetGrad(0, g.Op("AveragePoolGrad", {g.dY(0), g.X(0)}, std::move(attrs), kEdgetrainDomain));
}

// Number of elements per (image, channel) plane, as a scalar of dY's type.
std::string PlaneSize(GradientContext& g) {
  std::string count = g.Op("Div", {g.Op("Size", {g.X(0)}), g.Op("Size", {g.Y(0)})});
  return g.Op("CastLike", {count, g.dY(0)});
}

// Divided before it is spread: one pass over X's shape, not two.
void GlobalAveragePoolGradient(GradientContext& g) {
  g.SetGrad(0, g.Op("Expand", {g.Op("Div", {g.dY(0), PlaneSize(g)}), g.ShapeOf(g.X(0))}));
}

// The gradient goes to the maxima of each plane, split evenly between tied maxima.
void GlobalMaxPoolGradient(GradientContext& g) {
  std::string mask = g.Op("CastLike", {g.Op("Equal", {g.X(0), g.Y(0)}), g.dY(0)});
  std::string planes = g.Op("Reshape", {mask, g.Ints({0, 0, -1})});
  std::string ties = g.Op("ReduceSum", {planes, g.Ints({2})}, {{"keepdims", Attribute::Int(1)}});
  std::string share = g.Op("Div", {g.dY(0), g.Op("Reshape", {ties, g.ShapeOf(g.Y(0))})});
  g.SetGrad(0, g.Op("Mul", {mask, share}));
}

}  // namespace

void RegisterPoolOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "MaxPool", MaxPoolKernel);
  ET_REGISTER_ONNX(r, "AveragePool", AveragePoolKernel);
  ET_REGISTER_ONNX(r, "LpPool", LpPoolKernel);
  ET_REGISTER_ONNX(r, "GlobalAveragePool", GlobalAveragePoolKernel);
  ET_REGISTER_ONNX(r, "GlobalMaxPool", GlobalMaxPoolKernel);
  ET_REGISTER_ONNX(r, "GlobalLpPool", GlobalLpPoolKernel);
  ET_REGISTER_ONNX(r, "MaxUnpool", MaxUnpoolKernel);
  ET_IF_BUILT("", "MaxPool") r.SetGradient("MaxPool", MaxPoolGradient);
  ET_IF_BUILT("", "AveragePool") r.SetGradient("AveragePool", AveragePoolGradient);
  ET_IF_BUILT("", "GlobalAveragePool") r.SetGradient("GlobalAveragePool", GlobalAveragePoolGradient);
  ET_IF_BUILT("", "GlobalMaxPool") r.SetGradient("GlobalMaxPool", GlobalMaxPoolGradient);
  ET_IF_BUILT("ai.edgetrain", "MaxPoolGrad") RegisterFused(r, "MaxPoolGrad", MaxPoolGradKernel, ET_TRAINING_BODY(MaxPoolGradFunction()));
  ET_IF_BUILT("ai.edgetrain", "AveragePoolGrad")
    RegisterFused(r, "AveragePoolGrad", AveragePoolGradKernel, ET_TRAINING_BODY(AveragePoolGradFunction()));
}

}  // namespace edgetrain
