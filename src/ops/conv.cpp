// Conv and ConvTranspose over any number of spatial dimensions, per group: im2col + GEMM for Conv,
// GEMM + col2im for ConvTranspose; their gradients, with the fused ai.edgetrain.ConvGrad; the fused
// ai.edgetrain.ConvReluMaxPool that sessions make (ir/passes.hpp). Float32 passes run on oneDNN
// (conv_dnnl.cpp) when that backend is active and takes the configuration.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.hpp"
#include "core/kernel_backend.hpp"
#include "ops/conv_dnnl.hpp"
#include "ops/function_builder.hpp"
#include "ops/gemm.hpp"
#include "ops/attributes.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// Conv's and ConvTranspose's attributes (ConvInteger, QLinearConv, ConvGrad, FusedConv and ConvReluMaxPool
// share them). A list left out is empty: its default depends on the rank, known when the kernel runs.
struct ConvAttributes {
  int64_t group = 1;
  Int64Vector kernel_shape, strides, dilations, pads;
  Int64Vector output_padding, output_shape;  // ConvTranspose
  std::string auto_pad = "NOTSET";

  static ConvAttributes Parse(const Node& node, int64_t /*opset*/) {
    const AttributeReader read(node);
    ConvAttributes a;
    a.group = read.Int("group", 1);
    read.Check(a.group >= 1, "group", "must be >= 1");
    a.kernel_shape = read.Ints("kernel_shape");
    a.strides = read.Ints("strides");
    a.dilations = read.Ints("dilations");
    a.pads = read.Ints("pads");
    a.output_padding = read.Ints("output_padding");
    a.output_shape = read.Ints("output_shape");
    a.auto_pad = read.String("auto_pad", "NOTSET", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"});
    auto all = [](const Int64Vector& v, int64_t least) {
      return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x >= least; });
    };
    read.Check(all(a.kernel_shape, 1), "kernel_shape", "must be >= 1");
    read.Check(all(a.strides, 1), "strides", "must be >= 1");
    read.Check(all(a.dilations, 1), "dilations", "must be >= 1");
    read.Check(all(a.pads, 0) && a.pads.size() % 2 == 0, "pads", "must be an even count of values >= 0");
    read.Check(all(a.output_padding, 0), "output_padding", "must be >= 0");
    // The lists given must agree on the number of spatial dimensions.
    const size_t spatial = !a.kernel_shape.empty() ? a.kernel_shape.size()
                           : !a.strides.empty()    ? a.strides.size()
                                                   : a.dilations.size();
    for (const char* name : {"strides", "dilations", "output_padding"}) {
      const Int64Vector& v = name[0] == 's' ? a.strides : name[0] == 'd' ? a.dilations : a.output_padding;
      read.Check(v.empty() || v.size() == spatial || spatial == 0, name, "has a length that differs from kernel_shape's");
    }
    read.Check(a.pads.empty() || spatial == 0 || a.pads.size() == 2 * spatial, "pads",
               "must hold two values per spatial dimension");
    return a;
  }

  Int64Vector Or(const Int64Vector& v, size_t count, int64_t fill) const {
    return v.empty() ? Int64Vector(count, fill) : v;
  }
  int64_t Extent(const std::vector<int64_t>& kernel, size_t d, size_t spatial) const {
    return (kernel[d] - 1) * Or(dilations, spatial, 1)[d] + 1;
  }

  // Conv: Y [N, M, out...] from X [N, C, in...] and W [M, C/group, k...]; a spatial size is known when X's is.
  std::vector<ValueInfo> OutputTypes(const std::vector<const ValueInfo*>& inputs) const {
    return SpatialOutput(inputs, false);
  }

  std::vector<ValueInfo> SpatialOutput(const std::vector<const ValueInfo*>& inputs, bool transpose) const {
    const std::vector<Dim>* x = inputs.size() > 0 ? KnownShape(inputs[0]) : nullptr;
    const std::vector<Dim>* w = inputs.size() > 1 ? KnownShape(inputs[1]) : nullptr;
    if (!x || !w || x->size() < 3 || w->size() != x->size()) return {ValueInfo{}};
    const size_t spatial = x->size() - 2;
    Int64Vector kernel = kernel_shape;
    for (size_t d = 0; kernel.empty() && d < spatial; ++d)
      if (!(*w)[d + 2].known()) return {ValueInfo{}};
    if (kernel.empty())
      for (size_t d = 0; d < spatial; ++d) kernel.push_back((*w)[d + 2].value);
    if (kernel.size() != spatial) return {ValueInfo{}};
    const Dim& m = transpose ? (*w)[1] : (*w)[0];
    std::vector<Dim> y = {(*x)[0], transpose ? (m.known() ? FixedDim(m.value * group) : Dim{}) : m};
    for (size_t d = 0; d < spatial; ++d)
      y.push_back((*x)[d + 2].known() ? FixedDim(transpose ? TransposedSize((*x)[d + 2].value, kernel, d, spatial)
                                                           : ForwardSize((*x)[d + 2].value, kernel, d, spatial))
                                      : Dim{});
    return {TensorInfo(inputs[0]->dtype, std::move(y))};
  }

  int64_t ForwardSize(int64_t in, const std::vector<int64_t>& kernel, size_t d, size_t spatial) const {
    const int64_t stride = Or(strides, spatial, 1)[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return (in + stride - 1) / stride;
    const Int64Vector p = auto_pad == "VALID" ? Int64Vector(2 * spatial, 0) : Or(pads, 2 * spatial, 0);
    return (in + p[d] + p[d + spatial] - Extent(kernel, d, spatial)) / stride + 1;
  }

  int64_t TransposedSize(int64_t in, const std::vector<int64_t>& kernel, size_t d, size_t spatial) const {
    Int64Vector shape = output_shape;
    if (shape.size() == spatial + 2) shape.erase(shape.begin(), shape.begin() + 2);
    if (shape.size() == spatial) return shape[d];
    const int64_t stride = Or(strides, spatial, 1)[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return in * stride;
    const Int64Vector p = auto_pad == "VALID" ? Int64Vector(2 * spatial, 0) : Or(pads, 2 * spatial, 0);
    return stride * (in - 1) + Or(output_padding, spatial, 0)[d] + Extent(kernel, d, spatial) - p[d] - p[d + spatial];
  }
};

// ConvTranspose: the same attributes, its own shape rule.
struct ConvTransposeAttributes : ConvAttributes {
  static ConvTransposeAttributes Parse(const Node& node, int64_t opset) { return {ConvAttributes::Parse(node, opset)}; }
  std::vector<ValueInfo> OutputTypes(const std::vector<const ValueInfo*>& inputs) const {
    return SpatialOutput(inputs, true);
  }
};

// Takes kernel_shape/strides/dilations/pads (not auto_pad) and validates them against `spatial` dims.
void ReadConvAttributes(const ConvAttributes& a, const std::string& what, const Tensor& w, size_t spatial,
                        ConvGeometry& g) {
  g.kernel = a.kernel_shape.empty() ? Shape(w.shape().begin() + 2, w.shape().end())
                                    : Shape(a.kernel_shape.begin(), a.kernel_shape.end());
  g.strides = a.Or(a.strides, spatial, 1);
  g.dilations = a.Or(a.dilations, spatial, 1);
  const Int64Vector pads = a.Or(a.pads, 2 * spatial, 0);
  ET_CHECK(g.kernel.size() == spatial && g.strides.size() == spatial && g.dilations.size() == spatial &&
               pads.size() == 2 * spatial,
           ErrorCode::kInvalidArgument, what, ": kernel_shape/strides/dilations/pads do not match ", spatial,
           " spatial dimensions");
  for (size_t d = 0; d < spatial; ++d) {
    ET_CHECK(g.kernel[d] == w.dim(d + 2), ErrorCode::kInvalidArgument, what, ": kernel_shape ",
             ShapeToString(g.kernel), " does not match weight shape ", ShapeToString(w.shape()));
    ET_CHECK(g.strides[d] >= 1 && g.dilations[d] >= 1 && pads[d] >= 0 && pads[d + spatial] >= 0,
             ErrorCode::kInvalidArgument, what, ": strides and dilations must be >= 1 and pads >= 0");
  }
  g.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(spatial));
  g.pad_end.assign(pads.begin() + static_cast<int64_t>(spatial), pads.end());
}

// 4 floats in one vector register (SSE, NEON, WASM SIMD128), loaded and stored at any alignment.
typedef float Float4 __attribute__((vector_size(16)));
inline Float4 LoadFloat4(const float* p) {
  Float4 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreFloat4(float* p, Float4 v) { __builtin_memcpy(p, &v, sizeof v); }

// Rows of im2col/col2im are short (a few to tens of values): copied and added in 4-float chunks that
// compile to one vector load/store each, without memmove calls or alias checks.
template <typename T>
EDGETRAIN_GEMM_INLINE void CopyRow(T* __restrict dst, const T* __restrict src, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= n; i += 4) StoreFloat4(dst + i, LoadFloat4(src + i));
  }
  for (; i < n; ++i) dst[i] = src[i];
}

template <typename T>
EDGETRAIN_GEMM_INLINE void AddRow(T* __restrict dst, const T* __restrict src, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= n; i += 4) StoreFloat4(dst + i, LoadFloat4(dst + i) + LoadFloat4(src + i));
  }
  for (; i < n; ++i) dst[i] += src[i];
}

// Rows of the unfolded input for one image and group: row (c, kernel offset), column = output
// position; entries outside the input are zero. `x` points at the group's first channel.
template <typename T>
void Im2Col(const ConvGeometry& g, int64_t channels, const T* x, T* col) {
  const size_t spatial = g.input.size();
  const int64_t kernel_size = g.KernelSize(), in_size = g.InputSize(), out_size = g.OutputSize();
  const size_t last = spatial - 1;
  const int64_t out_last = g.output[last], in_last = g.input[last];
  const int64_t stride_last = g.strides[last];
  const int64_t outer_positions = out_size / std::max<int64_t>(out_last, 1);
  Int64Vector koff(spatial), opos(spatial);
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * in_size;
    std::fill(koff.begin(), koff.end(), 0);
    for (int64_t kk = 0; kk < kernel_size; ++kk) {
      T* row = col + (c * kernel_size + kk) * out_size;
      // Output positions of the last dimension whose input lies inside [0, in_last).
      const int64_t base_last = koff[last] * g.dilations[last] - g.pad_begin[last];
      const int64_t lo = std::clamp<int64_t>(CeilDiv(-base_last, stride_last), 0, out_last);
      const int64_t hi = std::clamp<int64_t>(FloorDiv(in_last - 1 - base_last, stride_last) + 1, lo, out_last);
      std::fill(opos.begin(), opos.end(), 0);
      for (int64_t outer = 0; outer < outer_positions; ++outer) {
        T* dst = row + outer * out_last;
        bool inside = true;
        int64_t offset = 0;
        for (size_t d = 0; d < last; ++d) {
          const int64_t i = opos[d] * g.strides[d] - g.pad_begin[d] + koff[d] * g.dilations[d];
          inside = inside && i >= 0 && i < g.input[d];
          offset = offset * g.input[d] + i;
        }
        if (!inside) {
          std::fill(dst, dst + out_last, T(0));
        } else {
          const T* src = xc + offset * in_last;
          // Plain loops: rows are short (a few to tens of values), where memmove/memset calls dominate.
          for (int64_t o = 0; o < lo; ++o) dst[o] = T(0);
          if (stride_last == 1) {
            CopyRow(dst + lo, src + lo + base_last, hi - lo);
          } else {
            for (int64_t o = lo; o < hi; ++o) dst[o] = src[o * stride_last + base_last];
          }
          for (int64_t o = hi; o < out_last; ++o) dst[o] = T(0);
        }
        for (size_t d = last; d-- > 0;) {
          if (++opos[d] < g.output[d]) break;
          opos[d] = 0;
        }
      }
      for (size_t d = spatial; d-- > 0;) {
        if (++koff[d] < g.kernel[d]) break;
        koff[d] = 0;
      }
    }
  }
}

// Inverse of Im2Col: adds each column entry into the output position it came from. Here `g.input`
// is the unfolded side (ConvTranspose input) and `g.output` the image being accumulated into.
template <typename T>
void Col2ImAdd(const ConvGeometry& g, int64_t channels, const T* col, T* y) {
  const size_t spatial = g.input.size();
  const int64_t kernel_size = g.KernelSize(), in_size = g.InputSize(), out_size = g.OutputSize();
  const size_t last = spatial - 1;
  const int64_t in_last = g.input[last], out_last = g.output[last], stride_last = g.strides[last];
  const int64_t outer_positions = in_size / std::max<int64_t>(in_last, 1);
  Int64Vector koff(spatial), ipos(spatial);
  for (int64_t c = 0; c < channels; ++c) {
    T* yc = y + c * out_size;
    std::fill(koff.begin(), koff.end(), 0);
    for (int64_t kk = 0; kk < kernel_size; ++kk) {
      const T* row = col + (c * kernel_size + kk) * in_size;
      const int64_t base_last = koff[last] * g.dilations[last] - g.pad_begin[last];
      const int64_t lo = std::clamp<int64_t>(CeilDiv(-base_last, stride_last), 0, in_last);
      const int64_t hi = std::clamp<int64_t>(FloorDiv(out_last - 1 - base_last, stride_last) + 1, lo, in_last);
      std::fill(ipos.begin(), ipos.end(), 0);
      for (int64_t outer = 0; outer < outer_positions; ++outer) {
        const T* src = row + outer * in_last;
        bool inside = true;
        int64_t offset = 0;
        for (size_t d = 0; d < last; ++d) {
          const int64_t o = ipos[d] * g.strides[d] - g.pad_begin[d] + koff[d] * g.dilations[d];
          inside = inside && o >= 0 && o < g.output[d];
          offset = offset * g.output[d] + o;
        }
        if (inside) {
          T* dst = yc + offset * out_last;
          if (stride_last == 1) {
            AddRow(dst + base_last + lo, src + lo, hi - lo);
          } else {
            for (int64_t i = lo; i < hi; ++i) dst[i * stride_last + base_last] += src[i];
          }
        }
        for (size_t d = last; d-- > 0;) {
          if (++ipos[d] < g.input[d]) break;
          ipos[d] = 0;
        }
      }
      for (size_t d = spatial; d-- > 0;) {
        if (++koff[d] < g.kernel[d]) break;
        koff[d] = 0;
      }
    }
  }
}

// Runs fn(chunk, begin, end) for [0, n) cut into `chunks` nearly equal parts, in parallel.
template <typename Fn>
void ForEachChunk(ThreadPool& pool, int64_t n, int64_t chunks, Fn&& fn) {
  pool.ParallelFor(chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) fn(c, n * c / chunks, n * (c + 1) / chunks);
  });
}

// Runs fn(image, group, pool_for_gemm, slot) for every (image, group): in at most one chunk per
// thread when there are enough of them (GEMM then single-threaded; `slot` is the chunk, < the
// pool's thread count, for per-chunk scratch), else one after another with a threaded GEMM (slot 0).
template <typename Fn>
void ForEachImageGroup(ThreadPool& pool, int64_t batch, int64_t group, int64_t work_per_item, Fn&& fn) {
  const int64_t items = batch * group;
  const int64_t min_items = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(work_per_item, 1));
  const int64_t chunks = items >= pool.num_threads() ? std::min<int64_t>(pool.num_threads(), items / min_items) : 1;
  if (chunks > 1) {
    ForEachChunk(pool, items, chunks, [&](int64_t slot, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i / group, i % group, nullptr, slot);
    });
  } else {
    for (int64_t i = 0; i < items; ++i) fn(i / group, i % group, &pool, int64_t{0});
  }
}

// ---------------------------------------------------------------------------------------------
// Conv (and the integer/quantized forms, which run the same code in double precision: exact for
// 8-bit products summed over fewer than 2^37 terms)

// Validates X and W and derives the geometry from the attributes (X is [N, C, spatial...]).
ConvGeometry ConvForwardGeometry(KernelContext& ctx, const Tensor& x, const Tensor& w) {
  const ConvAttributes& attrs = ctx.Attributes<ConvAttributes>();
  const Node& node = ctx.node();
  const std::string& what = node.Describe();
  ET_CHECK(x.rank() >= 3 && w.rank() == x.rank(), ErrorCode::kInvalidArgument, what,
           ": Conv needs X of rank >= 3 and W of the same rank, got ", ShapeToString(x.shape()), " and ",
           ShapeToString(w.shape()));
  const size_t spatial = x.rank() - 2;
  ConvGeometry g;
  g.batch = x.dim(0);
  g.in_channels = x.dim(1);
  g.out_channels = w.dim(0);
  g.group = attrs.group;
  ET_CHECK(g.group >= 1 && g.in_channels % g.group == 0 && g.out_channels % g.group == 0 &&
               w.dim(1) * g.group == g.in_channels,
           ErrorCode::kInvalidArgument, what, ": channels do not match: X ", ShapeToString(x.shape()), ", W ",
           ShapeToString(w.shape()), ", group ", g.group);
  ReadConvAttributes(attrs, what, w, spatial, g);
  g.input.assign(x.shape().begin() + 2, x.shape().end());
  const std::string& auto_pad = attrs.auto_pad;
  g.output.resize(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t extent = (g.kernel[d] - 1) * g.dilations[d] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.output[d] = CeilDiv(g.input[d], g.strides[d]);
      const int64_t total = std::max<int64_t>(0, (g.output[d] - 1) * g.strides[d] + extent - g.input[d]);
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
    } else if (auto_pad == "VALID") {
      g.pad_begin[d] = g.pad_end[d] = 0;
    } else {
      ET_CHECK(auto_pad == "NOTSET", ErrorCode::kNotImplemented, what, ": auto_pad '", auto_pad, "' is not supported");
    }
    if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      const int64_t padded = g.input[d] + g.pad_begin[d] + g.pad_end[d];
      ET_CHECK(padded >= extent, ErrorCode::kInvalidArgument, what, ": kernel extent ", extent,
               " is larger than the padded input ", padded, " on spatial axis ", d);
      g.output[d] = (padded - extent) / g.strides[d] + 1;
    }
  }
  return g;
}

Shape ConvOutputShape(const ConvGeometry& g) {
  Shape shape = {g.batch, g.out_channels};
  shape.insert(shape.end(), g.output.begin(), g.output.end());
  return shape;
}

// True when the kernel covers the whole unpadded input (group 1): one output position per image, so
// the convolution is a fully connected layer, Y[N, M] = X[N, C*K] * W[M, C*K]^T, one GEMM per pass.
bool IsFullyConnected(const ConvGeometry& g) {
  if (g.group != 1) return false;
  for (size_t d = 0; d < g.input.size(); ++d)
    if (g.kernel[d] != g.input[d] || g.pad_begin[d] != 0 || g.pad_end[d] != 0 || g.dilations[d] != 1) return false;
  return true;
}

// True for a 1x1 kernel at stride 1 without padding: the image is its own im2col matrix.
bool IsPointwise(const ConvGeometry& g) {
  for (size_t d = 0; d < g.input.size(); ++d)
    if (g.kernel[d] != 1 || g.strides[d] != 1 || g.pad_begin[d] != 0 || g.pad_end[d] != 0) return false;
  return true;
}

// Whether oneDNN's convolution primitives run the float32 passes. Not for a fully connected layer (one GEMM),
// nor a pointwise one: a GEMM per image on the NCHW tensors, where oneDNN's 1x1 kernels need its blocked layouts
// and a reorder of every input and output (MobileNetV2's and EfficientNet-B0's steps take 5-20% less time).
bool OnOneDnnConvolution(const ConvGeometry& g) { return UseDnnl() && !IsFullyConnected(g) && !IsPointwise(g); }

// ---------------------------------------------------------------------------------------------
// Stride-1 float convolutions without im2col's gathers. On the zero-padded input grid, output o and
// kernel tap t read grid[flat(o) + offset(t)], so when every grid position p up to the last output's
// is computed, im2col's row of tap t is the contiguous run grid[offset(t) + p]. Positions in the
// grid's margins (past an output row) are computed and dropped; backward passes feed them zero.

struct ShiftedGrid {
  bool padded = false;          // the image is copied into a zero-padded grid first
  bool output_layout = false;   // grid positions are the output's own (no margins): no compaction
  int64_t plane = 0;            // grid values per channel
  int64_t positions = 0;        // grid positions computed per image
  Int64Vector pitch, out_pitch;  // per spatial dimension, of the grid and of the output
  Int64Vector kernel, dilations;

  // Unset (positions 0) unless the convolution is float, stride 1, and computing the margins costs at
  // most as much as the outputs themselves.
  template <typename T>
  static ShiftedGrid Of(const ConvGeometry& g) {
    ShiftedGrid s;
    const size_t spatial = g.input.size();
    if (!std::is_same_v<T, float> || spatial == 0) return s;
    for (size_t d = 0; d < spatial; ++d) {
      if (g.strides[d] != 1) return s;
      s.padded = s.padded || g.pad_begin[d] != 0 || g.pad_end[d] != 0;
    }
    s.pitch.assign(spatial, 1);
    s.out_pitch.assign(spatial, 1);
    for (size_t d = spatial - 1; d > 0; --d) {
      s.pitch[d - 1] = s.pitch[d] * (g.input[d] + g.pad_begin[d] + g.pad_end[d]);
      s.out_pitch[d - 1] = s.out_pitch[d] * g.output[d];
    }
    s.plane = s.pitch[0] * (g.input[0] + g.pad_begin[0] + g.pad_end[0]);
    s.positions = 1;
    s.output_layout = true;
    for (size_t d = 0; d < spatial; ++d) {
      s.positions += (g.output[d] - 1) * s.pitch[d];
      s.output_layout = s.output_layout && (g.output[d] <= 1 || s.pitch[d] == s.out_pitch[d]);
    }
    if (g.OutputSize() == 0 || s.positions > 2 * g.OutputSize()) return ShiftedGrid{};
    s.kernel = g.kernel;
    s.dilations = g.dilations;
    return s;
  }
  bool active() const { return positions > 0; }

  // fn(t, offset) for each kernel tap t (row-major) and its offset on the grid.
  template <typename Fn>
  void ForEachTap(Fn&& fn) const {
    const size_t spatial = kernel.size();
    Int64Vector koff(spatial, 0);
    const int64_t taps = ConvGeometry::Product(kernel);
    for (int64_t t = 0; t < taps; ++t) {
      int64_t offset = 0;
      for (size_t d = 0; d < spatial; ++d) offset += koff[d] * dilations[d] * pitch[d];
      fn(t, offset);
      for (size_t d = spatial; d-- > 0;) {
        if (++koff[d] < kernel[d]) break;
        koff[d] = 0;
      }
    }
  }

  // fn(index, grid_offset) for each run of `sizes`' last dimension, at `origin` + its position on the grid.
  template <typename Fn>
  void ForEachRow(const Int64Vector& sizes, int64_t origin, Fn&& fn) const {
    const size_t spatial = sizes.size(), last = spatial - 1;
    int64_t rows = 1;
    for (size_t d = 0; d < last; ++d) rows *= sizes[d];
    Int64Vector pos(spatial, 0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t offset = origin;
      for (size_t d = 0; d < last; ++d) offset += pos[d] * pitch[d];
      fn(r * sizes[last], offset);
      for (size_t d = last; d-- > 0;) {
        if (++pos[d] < sizes[d]) break;
        pos[d] = 0;
      }
    }
  }
  int64_t InputOrigin(const ConvGeometry& g) const {
    int64_t origin = 0;
    for (size_t d = 0; d < g.input.size(); ++d) origin += g.pad_begin[d] * pitch[d];
    return origin;
  }
};

// The grids of `channels` planes of x (each `in_size` apart) with their zero padding.
template <typename T>
void FillGrids(const ConvGeometry& g, const ShiftedGrid& s, int64_t channels, const T* x, T* grids) {
  std::fill(grids, grids + channels * s.plane, T(0));
  const int64_t in_size = g.InputSize(), width = g.input.back();
  for (int64_t c = 0; c < channels; ++c)
    s.ForEachRow(g.input, s.InputOrigin(g), [&](int64_t index, int64_t offset) {
      std::copy(x + c * in_size + index, x + c * in_size + index + width, grids + c * s.plane + offset);
    });
}

// The inverse for dX: the interior of each grid.
template <typename T>
void CropGrids(const ConvGeometry& g, const ShiftedGrid& s, int64_t channels, const T* grids, T* x) {
  const int64_t in_size = g.InputSize(), width = g.input.back();
  for (int64_t c = 0; c < channels; ++c)
    s.ForEachRow(g.input, s.InputOrigin(g), [&](int64_t index, int64_t offset) {
      std::copy(grids + c * s.plane + offset, grids + c * s.plane + offset + width, x + c * in_size + index);
    });
}

// dX's unfolded rows added back: grid_c[offset(t) + p] += col[(c, t), p].
template <typename T>
void FoldGrid(const ShiftedGrid& s, int64_t channels, const T* col, int64_t ld, T* grids, int64_t grid_stride) {
  const int64_t taps = ConvGeometry::Product(s.kernel);
  s.ForEachTap([&](int64_t t, int64_t offset) {
    for (int64_t c = 0; c < channels; ++c) {
      const T* __restrict src = col + (c * taps + t) * ld;
      T* __restrict dst = grids + c * grid_stride + offset;
      for (int64_t p = 0; p < s.positions; ++p) dst[p] += src[p];
    }
  });
}

// The forward pass on the grid without unfolding: register tiles of MR output channels by NV vectors of
// grid positions sum every (input channel, tap) of the group, read from the grids at its offset. The
// weights are packed per strip of output channels ([channel, tap][strip rows]).
template <int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void GridForwardStrip(int64_t depth, const int64_t* offsets, const float* w, const float* grids,
                                            float* out, int64_t ld, int64_t begin, int64_t end) {
  typedef float V __attribute__((vector_size(Bytes)));
  constexpr int L = Bytes / static_cast<int>(sizeof(float));
  constexpr int NR = NV * L;
  for (int64_t p0 = begin; p0 < end; p0 += NR) {
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V{};
    for (int64_t k = 0; k < depth; ++k) {
      const float* src = grids + offsets[k] + p0;
      V bv[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) __builtin_memcpy(&bv[j], src + j * L, sizeof(V));
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const float av = w[k * MR + i];
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) __builtin_memcpy(out + i * ld + p0 + j * L, &acc[i][j], sizeof(V));
  }
}

// Strips of output channels: whole tiles of MR rows, a last one padded to MR when more than half full,
// else strips of 2 and 1 rows. fn(first_row, rows, tile_rows) for each.
template <typename Fn>
void ForEachStrip(int64_t channels, int64_t mr, Fn&& fn) {
  int64_t m = 0;
  for (; channels - m >= mr || 2 * (channels - m) > mr; m += mr) fn(m, std::min(mr, channels - m), mr);
  for (; m + 2 <= channels; m += 2) fn(m, int64_t{2}, int64_t{2});
  if (m < channels) fn(m, int64_t{1}, int64_t{1});
}

template <int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void GridForwardStrips(int64_t channels, int64_t depth, const int64_t* offsets,
                                             const float* packed, const float* grids, float* out, int64_t ld,
                                             int64_t begin, int64_t end) {
  ForEachStrip(channels, MR, [&](int64_t m, int64_t, int64_t tile_rows) {
    const float* w = packed + m * depth;
    if (tile_rows == MR) {
      GridForwardStrip<MR, NV, Bytes>(depth, offsets, w, grids, out + m * ld, ld, begin, end);
    } else if (tile_rows == 2) {
      GridForwardStrip<2, NV, Bytes>(depth, offsets, w, grids, out + m * ld, ld, begin, end);
    } else {
      GridForwardStrip<1, NV, Bytes>(depth, offsets, w, grids, out + m * ld, ld, begin, end);
    }
  });
}

// Tile rows (MR) and positions (NR) per vector width, as gemm.hpp's micro-kernel.
struct GridTile {
  int64_t rows, width, lanes;  // lanes: floats per vector
};

GridTile GridTileForCpu() {
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
  return CpuHasAvx2Fma() ? GridTile{6, 16, 8} : GridTile{6, 8, 4};
#elif defined(__AVX2__)
  return {6, 16, 8};
#elif defined(__aarch64__)
  return {8, 12, 4};
#elif defined(__wasm_simd128__)
  return {2, 16, 4};
#else
  return {6, 8, 4};
#endif
}

// Positions [begin, end) (whole tiles) of every strip.
void GridForwardBaseline(int64_t channels, int64_t depth, const int64_t* offsets, const float* packed,
                         const float* grids, float* out, int64_t ld, int64_t begin, int64_t end) {
#if defined(__AVX2__)
  GridForwardStrips<6, 2, 32>(channels, depth, offsets, packed, grids, out, ld, begin, end);
#elif defined(__aarch64__)
  GridForwardStrips<8, 3, 16>(channels, depth, offsets, packed, grids, out, ld, begin, end);
#elif defined(__wasm_simd128__)
  GridForwardStrips<2, 4, 16>(channels, depth, offsets, packed, grids, out, ld, begin, end);
#else
  GridForwardStrips<6, 2, 16>(channels, depth, offsets, packed, grids, out, ld, begin, end);
#endif
}

#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
__attribute__((target("avx2,fma"))) void GridForwardAvx2(int64_t channels, int64_t depth, const int64_t* offsets,
                                                         const float* packed, const float* grids, float* out,
                                                         int64_t ld, int64_t begin, int64_t end) {
  GridForwardStrips<6, 2, 32>(channels, depth, offsets, packed, grids, out, ld, begin, end);
}
#endif

// dW on the grid: tiles of MB output channels by KB (input channel, tap) pairs hold vectors of partial
// sums of dY_grid[m, p] * grid[offset(k) + p] over the image's positions, then add them to `sums`
// ([m][k][lane]); the lanes are summed once the batch is done.
template <int MB, int KB, int Bytes>
EDGETRAIN_GEMM_INLINE void GridWeightsTile(int64_t depth, const int64_t* offsets, const float* dy, int64_t ld,
                                           const float* grids, float* sums, int64_t m0, int64_t k0) {
  typedef float V __attribute__((vector_size(Bytes)));
  constexpr int L = Bytes / static_cast<int>(sizeof(float));
  V acc[MB][KB];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) acc[i][j] = V{};
  for (int64_t p = 0; p < ld; p += L) {
    V d[MB];
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) __builtin_memcpy(&d[i], dy + (m0 + i) * ld + p, sizeof(V));
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) {
      V xv;
      __builtin_memcpy(&xv, grids + offsets[k0 + j] + p, sizeof(V));
#pragma GCC unroll 8
      for (int i = 0; i < MB; ++i) acc[i][j] += d[i] * xv;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) {
      float* sum = sums + ((m0 + i) * depth + k0 + j) * L;
      V old;
      __builtin_memcpy(&old, sum, sizeof(V));
      old += acc[i][j];
      __builtin_memcpy(sum, &old, sizeof(V));
    }
}

template <int MB, int KB, int Bytes>
EDGETRAIN_GEMM_INLINE void GridWeightsRows(int64_t depth, const int64_t* offsets, const float* dy, int64_t ld,
                                           const float* grids, float* sums, int64_t m0) {
  int64_t k0 = 0;
  for (; k0 + KB <= depth; k0 += KB) GridWeightsTile<MB, KB, Bytes>(depth, offsets, dy, ld, grids, sums, m0, k0);
  for (; k0 < depth; ++k0) GridWeightsTile<MB, 1, Bytes>(depth, offsets, dy, ld, grids, sums, m0, k0);
}

// MB x KB tiles (12 accumulators; 8 on WASM, as gemm.hpp's tile), then single rows.
template <int Bytes, int MB = 4, int KB = 3>
EDGETRAIN_GEMM_INLINE void GridWeightsImage(int64_t channels, int64_t depth, const int64_t* offsets, const float* dy,
                                            int64_t ld, const float* grids, float* sums) {
  int64_t m0 = 0;
  for (; m0 + MB <= channels; m0 += MB) GridWeightsRows<MB, KB, Bytes>(depth, offsets, dy, ld, grids, sums, m0);
  for (; m0 < channels; ++m0) GridWeightsRows<1, 6, Bytes>(depth, offsets, dy, ld, grids, sums, m0);
}

void GridWeightsBaseline(int64_t channels, int64_t depth, const int64_t* offsets, const float* dy, int64_t ld,
                         const float* grids, float* sums) {
#if defined(__AVX2__)
  GridWeightsImage<32>(channels, depth, offsets, dy, ld, grids, sums);
#elif defined(__wasm_simd128__)
  GridWeightsImage<16, 2, 4>(channels, depth, offsets, dy, ld, grids, sums);
#else
  GridWeightsImage<16>(channels, depth, offsets, dy, ld, grids, sums);
#endif
}

#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
__attribute__((target("avx2,fma"))) void GridWeightsAvx2(int64_t channels, int64_t depth, const int64_t* offsets,
                                                         const float* dy, int64_t ld, const float* grids, float* sums) {
  GridWeightsImage<32>(channels, depth, offsets, dy, ld, grids, sums);
}
#endif

// offsets[(c, t)] = c * plane + the tap's offset, for the `channels` grids of one group.
void GridOffsets(const ShiftedGrid& grid, int64_t channels, int64_t* offsets) {
  const int64_t taps = ConvGeometry::Product(grid.kernel);
  grid.ForEachTap([&](int64_t t, int64_t offset) {
    for (int64_t c = 0; c < channels; ++c) offsets[c * taps + t] = c * grid.plane + offset;
  });
}

constexpr int64_t kGridWeightSums = int64_t{1} << 20;  // floats of lane sums per thread, at most

// dW of a stride-1 float convolution through GridWeightsImage: batch chunks in parallel, each with its own
// lane sums for every group, summed in double at the end.
void GridConvWeights(KernelContext& ctx, const ConvGeometry& g, const ShiftedGrid& grid, const float* dy,
                     const float* x, float* dw) {
  ThreadPool& threads = ctx.threads();
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  const int64_t depth = cg * g.KernelSize(), in_size = g.InputSize(), out_size = g.OutputSize();
  const GridTile tile = GridTileForCpu();
  const int64_t ld = (grid.positions + tile.width - 1) / tile.width * tile.width;
  const int64_t w_size = g.out_channels * depth;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads.num_threads(), g.batch));
  const size_t grids_size = static_cast<size_t>(cg * grid.plane + tile.width);
  const size_t slot_size = grids_size + static_cast<size_t>(mg * ld) + static_cast<size_t>(w_size * tile.lanes);
  NodeScratch<float> scratch(ctx, slot_size * static_cast<size_t>(chunks));
  const std::span<float> slots = scratch.Take(slot_size * static_cast<size_t>(chunks));
  NodeScratch<int64_t> offset_scratch(ctx, static_cast<size_t>(depth));
  int64_t* offsets = offset_scratch.Take(static_cast<size_t>(depth)).data();
  GridOffsets(grid, cg, offsets);
  const int64_t width = g.output.back();
  ForEachChunk(threads, g.batch, chunks, [&](int64_t c, int64_t first, int64_t last) {
    float* grids = slots.data() + static_cast<size_t>(c) * slot_size;
    float* dy_grid = grids + grids_size;
    float* sums = dy_grid + mg * ld;
    std::fill(sums, sums + w_size * tile.lanes, 0.0f);
    for (int64_t n = first; n < last; ++n)
      for (int64_t grp = 0; grp < g.group; ++grp) {
        FillGrids(g, grid, cg, x + (n * g.in_channels + grp * cg) * in_size, grids);
        std::fill(grids + cg * grid.plane, grids + grids_size, 0.0f);
        const float* dy_ng = dy + (n * g.out_channels + grp * mg) * out_size;
        std::fill(dy_grid, dy_grid + mg * ld, 0.0f);
        for (int64_t m = 0; m < mg; ++m)
          grid.ForEachRow(g.output, 0, [&](int64_t index, int64_t offset) {
            std::copy(dy_ng + m * out_size + index, dy_ng + m * out_size + index + width, dy_grid + m * ld + offset);
          });
        float* group_sums = sums + grp * mg * depth * tile.lanes;
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
        if (CpuHasAvx2Fma()) {
          GridWeightsAvx2(mg, depth, offsets, dy_grid, ld, grids, group_sums);
          continue;
        }
#endif
        GridWeightsBaseline(mg, depth, offsets, dy_grid, ld, grids, group_sums);
      }
  });
  threads.ParallelFor(w_size, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double sum = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        const float* lanes = slots.data() + static_cast<size_t>(c) * slot_size + grids_size + mg * ld + i * tile.lanes;
        for (int64_t l = 0; l < tile.lanes; ++l) sum += lanes[l];
      }
      dw[i] = static_cast<float>(sum);
    }
  });
}

// y = conv(x, w) + b, then max(y, 0) when `relu`, through GridForwardStrips: per (image, group), the
// image's grids (with `tile.width` values of slack for the last tile), the output on the grid, then its
// outputs copied out.
void GridConvForward(KernelContext& ctx, const ConvGeometry& g, const ShiftedGrid& grid, const float* xp,
                     const float* wp, const float* bp, float* yp, bool relu) {
  ThreadPool& threads = ctx.threads();
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  const int64_t taps = g.KernelSize(), depth = cg * taps, in_size = g.InputSize(), out_size = g.OutputSize();
  const GridTile tile = GridTileForCpu();
  int64_t rows = 0;  // output channels of a group, rounded up to whole strips
  ForEachStrip(mg, tile.rows, [&](int64_t, int64_t, int64_t tile_rows) { rows += tile_rows; });
  const int64_t ld = (grid.positions + tile.width - 1) / tile.width * tile.width;
  const size_t grids_size = static_cast<size_t>(cg * grid.plane + tile.width);
  const size_t slot_size = grids_size + static_cast<size_t>(rows * ld);
  const size_t packed_size = static_cast<size_t>(g.group * rows * depth);
  const size_t slots = static_cast<size_t>(threads.num_threads());
  NodeScratch<float> scratch(ctx, packed_size + slot_size * slots);
  const std::span<float> packed = scratch.Take(packed_size);
  const std::span<float> per_slot = scratch.Take(slot_size * slots);
  NodeScratch<int64_t> offset_scratch(ctx, static_cast<size_t>(depth));
  int64_t* offsets = offset_scratch.Take(static_cast<size_t>(depth)).data();
  GridOffsets(grid, cg, offsets);
  for (int64_t grp = 0; grp < g.group; ++grp)
    ForEachStrip(mg, tile.rows, [&](int64_t m0, int64_t strip_rows, int64_t tile_rows) {
      float* dst = packed.data() + (grp * rows + m0) * depth;
      for (int64_t k = 0; k < depth; ++k)
        for (int64_t i = 0; i < tile_rows; ++i)
          dst[k * tile_rows + i] = i < strip_rows ? wp[(grp * mg + m0 + i) * depth + k] : 0.0f;
    });
  const int64_t width = g.output.back();
  const int64_t grid_work = rows * ld * depth;
  ForEachImageGroup(threads, g.batch, g.group, grid_work, [&](int64_t n, int64_t grp, ThreadPool* pool, int64_t slot) {
    float* grids = per_slot.data() + static_cast<size_t>(slot) * slot_size;
    float* out = grids + grids_size;
    FillGrids(g, grid, cg, xp + (n * g.in_channels + grp * cg) * in_size, grids);
    std::fill(grids + cg * grid.plane, grids + grids_size, 0.0f);
    const float* w = packed.data() + grp * rows * depth;
    // Too few (image, group) items for the threads: they share the image's positions.
    const int64_t tiles = ld / tile.width;
    auto run = [&](int64_t first, int64_t last) {
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
      if (CpuHasAvx2Fma()) return GridForwardAvx2(mg, depth, offsets, w, grids, out, ld, first * tile.width,
                                                  last * tile.width);
#endif
      GridForwardBaseline(mg, depth, offsets, w, grids, out, ld, first * tile.width, last * tile.width);
    };
    if (pool && pool->num_threads() > 1) {
      pool->ParallelFor(tiles, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, rows * tile.width * depth)),
                        run);
    } else {
      run(0, tiles);
    }
    float* y_ng = yp + (n * g.out_channels + grp * mg) * out_size;
    for (int64_t m = 0; m < mg; ++m) {
      const float bias = bp ? bp[grp * mg + m] : 0.0f;
      grid.ForEachRow(g.output, 0, [&](int64_t index, int64_t offset) {
        const float* src = out + m * ld + offset;
        float* dst = y_ng + m * out_size + index;
        if (relu) {
          for (int64_t i = 0; i < width; ++i) dst[i] = std::max(src[i] + bias, 0.0f);
        } else {
          for (int64_t i = 0; i < width; ++i) dst[i] = src[i] + bias;
        }
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------
// 1-D Winograd F(4, 3) (Lavin and Gray's transforms): a float kernel-3 convolution at stride 1 computes each 4
// outputs from a tile of 6 inputs with 6 products per (output, input) channel pair instead of 12. Every channel's
// tiles are transformed (B^T d), 6 GEMMs multiply the transformed weights (G g) by them, and A^T folds each tile's
// 6 sums into its 4 outputs. Where oneDNN does not run (WebAssembly, the device runtime), EEG-style 1-D CNNs do
// half the multiplies.
constexpr int64_t kWinogradOutputs = 4, kWinogradTile = 6;

// The GEMMs' depth is the input channels: below 32 the grid convolution's (3 x channels) runs faster. Rows longer
// than kWinogradMaxOutputs stay on the grid too: the 6 sums per output of a row are held at once.
constexpr int64_t kWinogradMaxOutputs = 16384;
bool IsWinograd1D(const ConvGeometry& g) {
  return g.input.size() == 1 && g.kernel[0] == 3 && g.strides[0] == 1 && g.dilations[0] == 1 && g.group == 1 &&
         g.output[0] >= 4 * kWinogradOutputs && g.output[0] <= kWinogradMaxOutputs && g.in_channels >= 32 &&
         g.out_channels >= 8;
}

// U[u][m][c] = (G w[m][c])[u], in double.
void WinogradWeights(const ConvGeometry& g, const float* w, float* u) {
  const int64_t mc = g.out_channels * g.in_channels;
  for (int64_t i = 0; i < mc; ++i) {
    const double g0 = w[3 * i], g1 = w[3 * i + 1], g2 = w[3 * i + 2];
    const double t[kWinogradTile] = {g0 / 4,
                                     -(g0 + g1 + g2) / 6,
                                     -(g0 - g1 + g2) / 6,
                                     g0 / 24 + g1 / 12 + g2 / 6,
                                     g0 / 24 - g1 / 12 + g2 / 6,
                                     g2};
    for (int64_t k = 0; k < kWinogradTile; ++k) u[k * mc + i] = static_cast<float>(t[k]);
  }
}

// Four tiles at a time in Float4 vectors: lane j of a transform is tile t + j.
typedef int32_t WinogradMask __attribute__((vector_size(16)));

// Rows r0..r3 of a 4x4 block become its columns.
inline void Transpose4(Float4& r0, Float4& r1, Float4& r2, Float4& r3) {
  const Float4 t0 = __builtin_shufflevector(r0, r1, 0, 4, 1, 5), t1 = __builtin_shufflevector(r2, r3, 0, 4, 1, 5);
  const Float4 t2 = __builtin_shufflevector(r0, r1, 2, 6, 3, 7), t3 = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);
  r0 = __builtin_shufflevector(t0, t1, 0, 1, 4, 5);
  r1 = __builtin_shufflevector(t0, t1, 2, 3, 6, 7);
  r2 = __builtin_shufflevector(t2, t3, 0, 1, 4, 5);
  r3 = __builtin_shufflevector(t2, t3, 2, 3, 6, 7);
}

// out[k * plane] = (B^T d)[k] for tile inputs d0..d5 (scalars or vectors of tiles).
template <typename V>
inline void WinogradInputTransform(V d0, V d1, V d2, V d3, V d4, V d5, V* out[kWinogradTile]) {
  *out[0] = 4 * d0 - 5 * d2 + d4;
  *out[1] = -4 * d1 - 4 * d2 + d3 + d4;
  *out[2] = 4 * d1 - 4 * d2 - d3 + d4;
  *out[3] = -2 * d1 - d2 + 2 * d3 + d4;
  *out[4] = 2 * d1 - d2 - 2 * d3 + d4;
  *out[5] = 4 * d1 - 5 * d3 + d5;
}

// V[u][c][column + t] = (B^T d)[u] for the tiles d = row[4t .. 4t + 5] of each channel's zero-padded row; V's rows
// are `ld` long (the tiles of several images side by side).
void WinogradInputs(const ConvGeometry& g, int64_t tiles, const float* x, float* row, float* v, int64_t ld) {
  const int64_t channels = g.in_channels, length = g.input[0], plane = channels * ld;
  const int64_t row_size = tiles * kWinogradOutputs + 2;
  for (int64_t c = 0; c < channels; ++c) {
    std::fill(row, row + row_size, 0.0f);
    std::copy(x + c * length, x + (c + 1) * length, row + g.pad_begin[0]);
    float* out = v + c * ld;
    int64_t t = 0;
    for (; t + 4 <= tiles; t += 4) {
      const float* d = row + t * kWinogradOutputs;
      Float4 d0 = LoadFloat4(d), d1 = LoadFloat4(d + 4), d2 = LoadFloat4(d + 8), d3 = LoadFloat4(d + 12);
      Transpose4(d0, d1, d2, d3);
      const Float4 next = {d[16], d[17], 0.0f, 0.0f};  // d4 and d5 of tile t + 3
      Float4 u[kWinogradTile];
      Float4* dst[kWinogradTile] = {&u[0], &u[1], &u[2], &u[3], &u[4], &u[5]};
      WinogradInputTransform(d0, d1, d2, d3, __builtin_shufflevector(d0, next, 1, 2, 3, 4),
                             __builtin_shufflevector(d1, next, 1, 2, 3, 5), dst);
      for (int64_t k = 0; k < kWinogradTile; ++k) __builtin_memcpy(out + k * plane + t, &u[k], sizeof(Float4));
    }
    for (; t < tiles; ++t) {
      const float* d = row + t * kWinogradOutputs;
      float* dst[kWinogradTile];
      for (int64_t k = 0; k < kWinogradTile; ++k) dst[k] = out + k * plane + t;
      WinogradInputTransform(d[0], d[1], d[2], d[3], d[4], d[5], dst);
    }
  }
}

// y[4t .. 4t + 3] = A^T s (+ bias, then max(., 0) when `relu`) for each tile t of one output row; s[k * plane + t]
// is the k-th sum of tile t.
void WinogradOutputs(const float* s, int64_t plane, int64_t tiles, int64_t out_len, float bias, bool relu, float* y) {
  auto fold = [&](auto s0, auto s1, auto s2, auto s3, auto s4, auto s5, auto* out) {
    out[0] = s0 + s1 + s2 + s3 + s4 + bias;
    out[1] = s1 - s2 + 2 * s3 - 2 * s4 + bias;
    out[2] = s1 + s2 + 4 * s3 + 4 * s4 + bias;
    out[3] = s1 - s2 + 8 * s3 - 8 * s4 + s5 + bias;
  };
  int64_t t = 0;
  for (; (t + 4) * kWinogradOutputs <= out_len; t += 4) {
    Float4 o[kWinogradOutputs];
    fold(LoadFloat4(s + t), LoadFloat4(s + plane + t), LoadFloat4(s + 2 * plane + t),
         LoadFloat4(s + 3 * plane + t), LoadFloat4(s + 4 * plane + t), LoadFloat4(s + 5 * plane + t), o);
    Transpose4(o[0], o[1], o[2], o[3]);  // o[j]: the 4 outputs of tile t + j
    for (int64_t j = 0; j < 4; ++j) {
      if (relu) {  // v < 0 ? 0 : v, lane by lane (a NaN stays)
        const WinogradMask negative = o[j] < 0.0f;
        o[j] = reinterpret_cast<Float4>(reinterpret_cast<WinogradMask>(o[j]) & ~negative);
      }
      __builtin_memcpy(y + (t + j) * kWinogradOutputs, &o[j], sizeof(Float4));
    }
  }
  for (; t < tiles; ++t) {
    float o[kWinogradOutputs];
    fold(s[t], s[plane + t], s[2 * plane + t], s[3 * plane + t], s[4 * plane + t], s[5 * plane + t], o);
    const int64_t valid = std::min(kWinogradOutputs, out_len - t * kWinogradOutputs);
    for (int64_t i = 0; i < valid; ++i) y[t * kWinogradOutputs + i] = relu && o[i] < 0.0f ? 0.0f : o[i];
  }
}

// Images are taken in groups of about kWinogradColumns tiles, so that each of the 6 GEMMs is wide enough.
constexpr int64_t kWinogradColumns = 512;

void Winograd1DForward(KernelContext& ctx, const ConvGeometry& g, const float* xp, const float* wp, const float* bp,
                       float* yp, bool relu) {
  ThreadPool& threads = ctx.threads();
  const int64_t m_count = g.out_channels, c_count = g.in_channels, out_len = g.output[0];
  const int64_t tiles = (out_len + kWinogradOutputs - 1) / kWinogradOutputs;
  const int64_t per_group = std::clamp<int64_t>(kWinogradColumns / tiles, 1, g.batch);
  const int64_t ld = per_group * tiles, row_size = tiles * kWinogradOutputs + 2;
  const size_t u_size = static_cast<size_t>(kWinogradTile * m_count * c_count);
  const size_t v_size = static_cast<size_t>(kWinogradTile * c_count * ld);
  const size_t sums_size = static_cast<size_t>(kWinogradTile * m_count * ld);
  NodeScratch<float> scratch(ctx, u_size + v_size + sums_size + static_cast<size_t>(row_size));
  float* u = scratch.Take(u_size).data();
  float* v = scratch.Take(v_size).data();
  float* sums = scratch.Take(sums_size).data();
  float* row = scratch.Take(static_cast<size_t>(row_size)).data();
  WinogradWeights(g, wp, u);
  for (int64_t first = 0; first < g.batch; first += per_group) {
    const int64_t images = std::min(per_group, g.batch - first);
    for (int64_t i = 0; i < images; ++i)
      WinogradInputs(g, tiles, xp + (first + i) * c_count * g.input[0], row, v + i * tiles, ld);
    for (int64_t k = 0; k < kWinogradTile; ++k)
      Gemm<float>(false, false, m_count, images * tiles, c_count, 1.0f, u + k * m_count * c_count, c_count,
                  v + k * c_count * ld, ld, 0.0f, sums + k * m_count * ld, ld, &threads);
    threads.ParallelFor(images * m_count, 16, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t i = item / m_count, m = item % m_count;
        WinogradOutputs(sums + m * ld + i * tiles, m_count * ld, tiles, out_len, bp ? bp[m] : 0.0f, relu,
                        yp + ((first + i) * m_count + m) * out_len);
      }
    });
  }
}

// Pointwise convolutions on planes of at most this many positions (7x7, 8x8) run as one GEMM over the whole batch:
// a GEMM per image there is too narrow (EfficientNet-B0's 7x7 dX and forward shapes: 10-30% less time, in cache).
constexpr int64_t kBatchedPointwisePositions = 64;

bool BatchesPointwise(const ConvGeometry& g) {
  return IsPointwise(g) && g.group == 1 && g.batch > 1 && g.OutputSize() <= kBatchedPointwisePositions;
}

// out[n, o, p] = sum over i of op(W)[o, i] * in[n, i, p] (+ bias[o], then max(., 0) when `relu`) as one GEMM on the
// batch gathered channel-major, [channels, batch * positions]. op(W) is W [out, in] or, `transposed`, W^T of a W
// stored [in, out]; `pitch` is W's row pitch.
template <typename T>
void PointwiseOverBatch(KernelContext& ctx, int64_t batch, int64_t positions, int64_t in_channels,
                        int64_t out_channels, const T* w, int64_t pitch, bool transposed, const T* in, T* out,
                        const T* bias = nullptr, bool relu = false) {
  ThreadPool& threads = ctx.threads();
  const int64_t columns = batch * positions;
  NodeScratch<T> scratch(ctx, static_cast<size_t>((in_channels + out_channels) * columns));
  T* gathered = scratch.Take(static_cast<size_t>(in_channels * columns)).data();
  T* product = scratch.Take(static_cast<size_t>(out_channels * columns)).data();
  const int64_t grain = std::max<int64_t>(1, 4096 / columns);
  threads.ParallelFor(in_channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c)
      for (int64_t n = 0; n < batch; ++n)
        std::copy_n(in + (n * in_channels + c) * positions, positions, gathered + c * columns + n * positions);
  });
  Gemm<T>(transposed, false, out_channels, columns, in_channels, T(1), w, pitch, gathered, columns, T(0), product,
          columns, &threads);
  threads.ParallelFor(out_channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      for (int64_t n = 0; n < batch; ++n) {
        const T* from = product + o * columns + n * positions;
        T* to = out + (n * out_channels + o) * positions;
        const T shift = bias ? bias[o] : T(0);
        for (int64_t p = 0; p < positions; ++p) {
          const T v = from[p] + shift;
          to[p] = relu && !(v > T(0)) ? T(0) : v;
        }
      }
  });
}

// y = conv(x, w) + b (b may be null), then max(y, 0) when `relu`; all contiguous, layouts as in ONNX.
template <typename T>
void ConvCompute(KernelContext& ctx, const ConvGeometry& g, const T* xp, const T* wp, const T* bp, T* yp,
                 bool relu = false) {
  ThreadPool& threads = ctx.threads();
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  const int64_t kernel_size = g.KernelSize(), in_size = g.InputSize(), out_size = g.OutputSize();
  const int64_t rows = cg * kernel_size;
  if (IsFullyConnected(g)) {
    T beta = T(0);
    if (bp) {
      for (int64_t n = 0; n < g.batch; ++n) std::copy(bp, bp + g.out_channels, yp + n * g.out_channels);
      beta = T(1);
    }
    Gemm<T>(false, true, g.batch, g.out_channels, rows, T(1), xp, rows, wp, rows, beta, yp, g.out_channels, &threads);
    if (relu)
      for (int64_t i = 0; i < g.batch * g.out_channels; ++i) yp[i] = yp[i] > T(0) ? yp[i] : T(0);
    return;
  }
  const bool pointwise = IsPointwise(g);
  if (BatchesPointwise(g))
    return PointwiseOverBatch(ctx, g.batch, out_size, g.in_channels, g.out_channels, wp, rows, false, xp, yp, bp,
                              relu);
  if constexpr (std::is_same_v<T, float>) {
    if (IsWinograd1D(g)) return Winograd1DForward(ctx, g, xp, wp, bp, yp, relu);
    const ShiftedGrid grid = pointwise ? ShiftedGrid{} : ShiftedGrid::Of<T>(g);
    if (grid.active()) return GridConvForward(ctx, g, grid, xp, wp, bp, yp, relu);
  }
  const size_t col_size = pointwise ? 0 : static_cast<size_t>(rows * out_size);
  NodeScratch<T> scratch(ctx, col_size * static_cast<size_t>(threads.num_threads()));
  const std::span<T> cols = scratch.Take(col_size * static_cast<size_t>(threads.num_threads()));
  ForEachImageGroup(threads, g.batch, g.group, mg * rows * out_size, [&](int64_t n, int64_t grp, ThreadPool* pool,
                                                                        int64_t slot) {
    const T* x_ng = xp + (n * g.in_channels + grp * cg) * in_size;
    T* y_ng = yp + (n * g.out_channels + grp * mg) * out_size;
    T beta = T(0);
    if (bp) {
      for (int64_t m = 0; m < mg; ++m) std::fill(y_ng + m * out_size, y_ng + (m + 1) * out_size, bp[grp * mg + m]);
      beta = T(1);
    }
    const T* columns = x_ng;
    if (!pointwise) {
      T* col = cols.data() + static_cast<size_t>(slot) * col_size;
      Im2Col(g, cg, x_ng, col);
      columns = col;
    }
    Gemm<T>(false, false, mg, out_size, rows, T(1), wp + grp * mg * rows, rows, columns, out_size, beta, y_ng, out_size,
            pool);
    if (relu)  // while the image is still in cache
      for (int64_t i = 0; i < mg * out_size; ++i) y_ng[i] = y_ng[i] > T(0) ? y_ng[i] : T(0);
  });
}

// ---------------------------------------------------------------------------------------------
// Single-channel planes: the first layer of a grayscale-image CNN (one input channel, group 1, 2-D,
// stride 1, no dilation, kernel width 3, 5 or 7) runs directly on the plain layout. im2col would
// write the image once per kernel tap, and oneDNN pads the few output channels to 16 and reorders
// around its primitive. Each image is first copied into a zero-padded plane wide enough that every
// column block (kPlaneBlock) of every output row reads inside it; the blocks then run on register tiles.

// Output columns per register tile: 8 on WASM SIMD128, the two 4-float vectors of SingleChannelForwardVectors
// (V8 spilled the auto-vectorised 16-column tiles).
#if defined(__wasm_simd128__)
constexpr int64_t kPlaneBlock = 8;
#else
constexpr int64_t kPlaneBlock = 16;
#endif

bool IsSingleChannelPlane(const ConvGeometry& g) {
  if (g.input.size() != 2 || g.group != 1 || g.in_channels != 1) return false;
  if (g.kernel[1] != 3 && g.kernel[1] != 5 && g.kernel[1] != 7) return false;
  return g.strides[0] == 1 && g.strides[1] == 1 && g.dilations[0] == 1 && g.dilations[1] == 1;
}

// The padded plane of one image: rows of the padded input, `width` >= the output width rounded up to
// whole blocks plus the kernel width - 1.
struct PaddedPlane {
  int64_t rows, width, out_width;  // out_width: the output width rounded up to whole blocks
  static PaddedPlane Of(const ConvGeometry& g) {
    const int64_t out_width = (g.output[1] + kPlaneBlock - 1) / kPlaneBlock * kPlaneBlock;
    return {g.input[0] + g.pad_begin[0] + g.pad_end[0],
            std::max(g.input[1] + g.pad_begin[1] + g.pad_end[1], out_width + g.kernel[1] - 1), out_width};
  }
  int64_t size() const { return rows * width; }
};

template <typename T>
void FillPaddedPlane(const ConvGeometry& g, const PaddedPlane& p, const T* x, T* plane) {
  std::fill(plane, plane + p.size(), T(0));
  for (int64_t r = 0; r < g.input[0]; ++r)
    std::copy(x + r * g.input[1], x + (r + 1) * g.input[1], plane + (r + g.pad_begin[0]) * p.width + g.pad_begin[1]);
}

#if defined(__wasm_simd128__)
// WebAssembly: clang leaves the auto-vectorised tiles below in linear memory; these keep them in 4-float vectors
// (the forward 1.7x, dW 1.9x faster in Node.js 20). Same sums per output as below; dW's partial sums per lane differ.

template <int MB, int KW>
void SingleChannelForwardVectors(const ConvGeometry& g, const PaddedPlane& p, const float* plane, const float* w,
                                 const float* b, float* y, int64_t m, bool relu) {
  static_assert(kPlaneBlock == 8, "two vectors per block");
  const int64_t kh = g.kernel[0], oh = g.output[0], ow = g.output[1];
  for (int64_t r = 0; r < oh; ++r) {
    for (int64_t col = 0; col < p.out_width; col += kPlaneBlock) {
      Float4 acc[MB][2];
#pragma GCC unroll 8
      for (int mm = 0; mm < MB; ++mm) acc[mm][0] = acc[mm][1] = Float4{} + (b ? b[m + mm] : 0.0f);
      for (int64_t i = 0; i < kh; ++i) {
        const float* src = plane + (r + i) * p.width + col;
        const float* taps = w + (m * kh + i) * KW;
#pragma GCC unroll 8
        for (int j = 0; j < KW; ++j) {
          const Float4 low = LoadFloat4(src + j), high = LoadFloat4(src + j + 4);
#pragma GCC unroll 8
          for (int mm = 0; mm < MB; ++mm) {
            const float tap = taps[mm * kh * KW + j];
            acc[mm][0] += tap * low;
            acc[mm][1] += tap * high;
          }
        }
      }
      const int64_t valid = std::min<int64_t>(kPlaneBlock, ow - col);
      for (int mm = 0; mm < MB; ++mm) {
        float row[kPlaneBlock];
        __builtin_memcpy(row, acc[mm], sizeof row);
        float* out = y + ((m + mm) * oh + r) * ow + col;
        for (int64_t v = 0; v < valid; ++v) out[v] = relu && row[v] < 0.0f ? 0.0f : row[v];
      }
    }
  }
}

template <int KW>
void SingleChannelWeightsVectors(const ConvGeometry& g, const PaddedPlane& p, const float* plane, const float* dy,
                                 double* dw) {
  const int64_t kh = g.kernel[0], oh = g.output[0];
  for (int64_t m = 0; m < g.out_channels; ++m) {
    for (int64_t i = 0; i < kh; ++i) {
      Float4 acc[KW] = {};
      for (int64_t r = 0; r < oh; ++r) {
        const float* src = plane + (r + i) * p.width;
        const float* d = dy + (m * oh + r) * p.out_width;
        for (int64_t col = 0; col < p.out_width; col += 4) {
          const Float4 dv = LoadFloat4(d + col);
#pragma GCC unroll 8
          for (int j = 0; j < KW; ++j) acc[j] += dv * LoadFloat4(src + col + j);
        }
      }
      for (int j = 0; j < KW; ++j)
        dw[(m * kh + i) * KW + j] += (double(acc[j][0]) + double(acc[j][1])) + (double(acc[j][2]) + double(acc[j][3]));
    }
  }
}
#endif

// Output rows of channels [m, m + MB) of one image: each 16-column block of a row accumulates all
// kernel taps in registers, then is stored (clipped to the row) with the bias and ReLU applied.
template <typename T, int MB, int KW>
EDGETRAIN_GEMM_INLINE void SingleChannelForwardChannels(const ConvGeometry& g, const PaddedPlane& p, const T* plane,
                                                        const T* w, const T* b, T* y, int64_t m, bool relu) {
#if defined(__wasm_simd128__)
  if constexpr (std::is_same_v<T, float>) return SingleChannelForwardVectors<MB, KW>(g, p, plane, w, b, y, m, relu);
#endif
  const int64_t kh = g.kernel[0], oh = g.output[0], ow = g.output[1];
  for (int64_t r = 0; r < oh; ++r) {
    for (int64_t col = 0; col < p.out_width; col += kPlaneBlock) {
      T acc[MB][kPlaneBlock];
      for (int mm = 0; mm < MB; ++mm)
        for (int v = 0; v < kPlaneBlock; ++v) acc[mm][v] = b ? b[m + mm] : T(0);
      for (int64_t i = 0; i < kh; ++i) {
        const T* src = plane + (r + i) * p.width + col;
        for (int j = 0; j < KW; ++j) {
          for (int mm = 0; mm < MB; ++mm) {
            const T tap = w[((m + mm) * kh + i) * KW + j];
#pragma omp simd
            for (int v = 0; v < kPlaneBlock; ++v) acc[mm][v] += tap * src[j + v];
          }
        }
      }
      const int64_t valid = std::min<int64_t>(kPlaneBlock, ow - col);
      for (int mm = 0; mm < MB; ++mm) {
        T* out = y + ((m + mm) * oh + r) * ow + col;
        for (int64_t v = 0; v < valid; ++v) out[v] = relu && acc[mm][v] < T(0) ? T(0) : acc[mm][v];
      }
    }
  }
}

template <typename T, int KW>
EDGETRAIN_GEMM_INLINE void SingleChannelForwardImage(const ConvGeometry& g, const PaddedPlane& p, const T* plane,
                                                     const T* w, const T* b, T* y, bool relu) {
  int64_t m = 0;
  for (; m + 4 <= g.out_channels; m += 4) SingleChannelForwardChannels<T, 4, KW>(g, p, plane, w, b, y, m, relu);
  for (; m + 2 <= g.out_channels; m += 2) SingleChannelForwardChannels<T, 2, KW>(g, p, plane, w, b, y, m, relu);
  for (; m < g.out_channels; ++m) SingleChannelForwardChannels<T, 1, KW>(g, p, plane, w, b, y, m, relu);
}

// dW[m, i, :] += sum over the image's output positions of dY[m] * (the padded plane shifted by the
// tap), one kernel row of taps held in registers while the rows and blocks stream by. `dy` is the
// image's dY with each row zero-padded to p.out_width.
template <typename T, int KW>
EDGETRAIN_GEMM_INLINE void SingleChannelWeightsImage(const ConvGeometry& g, const PaddedPlane& p, const T* plane,
                                                     const T* dy, double* dw) {
#if defined(__wasm_simd128__)
  if constexpr (std::is_same_v<T, float>) return SingleChannelWeightsVectors<KW>(g, p, plane, dy, dw);
#endif
  const int64_t kh = g.kernel[0], oh = g.output[0];
  for (int64_t m = 0; m < g.out_channels; ++m) {
    for (int64_t i = 0; i < kh; ++i) {
      T acc[KW][kPlaneBlock] = {};
      for (int64_t r = 0; r < oh; ++r) {
        const T* src = plane + (r + i) * p.width;
        const T* d = dy + (m * oh + r) * p.out_width;
        for (int64_t col = 0; col < p.out_width; col += kPlaneBlock) {
          for (int j = 0; j < KW; ++j) {
#pragma omp simd
            for (int v = 0; v < kPlaneBlock; ++v) acc[j][v] += d[col + v] * src[col + j + v];
          }
        }
      }
      for (int j = 0; j < KW; ++j) {
        double sum = 0;
        for (int v = 0; v < kPlaneBlock; ++v) sum += acc[j][v];
        dw[(m * kh + i) * KW + j] += sum;
      }
    }
  }
}

// The per-image work of both passes over images [first, last); `scratch` holds one padded plane
// (and, for dW, one padded dY).
template <typename T, int KW>
EDGETRAIN_GEMM_INLINE void SingleChannelImages(const ConvGeometry& g, int64_t first, int64_t last, const T* x,
                                               const T* w, const T* b, T* y, bool relu, const T* dy, double* dw,
                                               T* scratch) {
  const PaddedPlane p = PaddedPlane::Of(g);
  const int64_t in_size = g.InputSize(), out_size = g.out_channels * g.OutputSize();
  T* plane = scratch;
  T* padded_dy = scratch + p.size();
  for (int64_t n = first; n < last; ++n) {
    FillPaddedPlane(g, p, x + n * in_size, plane);
    if (!dw) {
      SingleChannelForwardImage<T, KW>(g, p, plane, w, b, y + n * out_size, relu);
      continue;
    }
    const int64_t rows = g.out_channels * g.output[0];
    for (int64_t r = 0; r < rows; ++r) {
      const T* from = dy + n * out_size + r * g.output[1];
      std::copy(from, from + g.output[1], padded_dy + r * p.out_width);
      std::fill(padded_dy + r * p.out_width + g.output[1], padded_dy + (r + 1) * p.out_width, T(0));
    }
    SingleChannelWeightsImage<T, KW>(g, p, plane, padded_dy, dw);
  }
}

// SingleChannelImages for the node's kernel width (3, 5 or 7).
template <typename T>
EDGETRAIN_GEMM_INLINE void SingleChannelImagesOfWidth(const ConvGeometry& g, int64_t first, int64_t last, const T* x,
                                                      const T* w, const T* b, T* y, bool relu, const T* dy,
                                                      double* dw, T* scratch) {
  switch (g.kernel[1]) {
    case 3: return SingleChannelImages<T, 3>(g, first, last, x, w, b, y, relu, dy, dw, scratch);
    case 5: return SingleChannelImages<T, 5>(g, first, last, x, w, b, y, relu, dy, dw, scratch);
    default: return SingleChannelImages<T, 7>(g, first, last, x, w, b, y, relu, dy, dw, scratch);
  }
}

template <typename T>
void SingleChannelImagesBaseline(const ConvGeometry& g, int64_t first, int64_t last, const T* x, const T* w,
                                 const T* b, T* y, bool relu, const T* dy, double* dw, T* scratch) {
  SingleChannelImagesOfWidth(g, first, last, x, w, b, y, relu, dy, dw, scratch);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__AVX2__)
// The same loops compiled for AVX2/FMA, chosen at run time when the CPU has them.
template <typename T>
__attribute__((target("avx2,fma"))) void SingleChannelImagesAvx2(const ConvGeometry& g, int64_t first, int64_t last,
                                                                 const T* x, const T* w, const T* b, T* y, bool relu,
                                                                 const T* dy, double* dw, T* scratch) {
  SingleChannelImagesOfWidth(g, first, last, x, w, b, y, relu, dy, dw, scratch);
}
#else
template <typename T>
void SingleChannelImagesAvx2(const ConvGeometry& g, int64_t first, int64_t last, const T* x, const T* w, const T* b,
                             T* y, bool relu, const T* dy, double* dw, T* scratch) {
  SingleChannelImagesBaseline(g, first, last, x, w, b, y, relu, dy, dw, scratch);
}
#endif

// Y = Conv(X, W) + B (then max(Y, 0) when `relu`) when dy is null, else dW from dY; batch chunks in
// parallel, dW summed in double per chunk and then over the chunks.
template <typename T>
void SingleChannelConv(KernelContext& ctx, const ConvGeometry& g, const T* x, const T* w, const T* b, T* y, bool relu,
                       const T* dy, T* dw) {
  const PaddedPlane p = PaddedPlane::Of(g);
  const int64_t w_size = g.out_channels * g.KernelSize();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(ctx.threads().num_threads(), g.batch));
  const size_t slot = static_cast<size_t>(p.size() + (dy ? g.out_channels * g.output[0] * p.out_width : 0));
  struct Buffers {
    std::vector<T> planes;
    std::vector<double> partial;
  };
  static constexpr char kUser = 0;
  std::shared_ptr<void>* state = ctx.NodeStateFor(&kUser);
  if (state && !*state) *state = std::make_shared<Buffers>();
  Buffers local;
  Buffers& kept = state ? *std::static_pointer_cast<Buffers>(*state) : local;
  if (kept.planes.size() < slot * static_cast<size_t>(chunks)) kept.planes.resize(slot * static_cast<size_t>(chunks));
  if (dy && kept.partial.size() < static_cast<size_t>(chunks * w_size))
    kept.partial.resize(static_cast<size_t>(chunks * w_size));
  T* const slots = kept.planes.data();
  double* const partial = kept.partial.data();
  if (dy) std::fill(partial, partial + chunks * w_size, 0.0);
  ForEachChunk(ctx.threads(), g.batch, chunks, [&](int64_t c, int64_t first, int64_t last) {
    double* part = dy ? partial + c * w_size : nullptr;
    T* own = slots + static_cast<size_t>(c) * slot;
    if (CpuHasAvx2Fma()) {
      SingleChannelImagesAvx2(g, first, last, x, w, b, y, relu, dy, part, own);
    } else {
      SingleChannelImagesBaseline(g, first, last, x, w, b, y, relu, dy, part, own);
    }
  });
  if (!dy) return;
  for (int64_t t = 0; t < w_size; ++t) {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[static_cast<size_t>(c * w_size + t)];
    dw[t] = static_cast<T>(sum);
  }
}

// Checks Conv's inputs X, W and B (optional) and derives the geometry.
ConvGeometry CheckedConvGeometry(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& w = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(x.dtype() == w.dtype(), ErrorCode::kInvalidArgument, what, ": X and W types differ");
  const ConvGeometry g = ConvForwardGeometry(ctx, x, w);
  if (ctx.HasInput(2)) {
    const Tensor& b = ctx.Input(2);
    ET_CHECK(b.numel() == g.out_channels && b.dtype() == x.dtype(), ErrorCode::kInvalidArgument, what, ": bias of shape ",
             ShapeToString(b.shape()), " does not match ", g.out_channels, " output channels");
  }
  return g;
}

// ChannelAffineConv's map of the input planes as the direct depthwise kernels read them: a and b per channel and the
// activation (ai.edgetrain.ChannelAffine's), or none.
struct PlaneMap {
  const float* affine = nullptr;  // [2, C], null for the plain convolution
  batchnorm::Activation activation;
  bool Applies() const { return affine != nullptr; }
};

#if defined(__GNUC__)
#define EDGETRAIN_DEPTHWISE_DIRECT 1
// One input and one output channel per group, 2-D, no dilation.
bool IsPlainDepthwise2D(const ConvGeometry& g) {
  return g.input.size() == 2 && g.group > 1 && g.in_channels == g.group && g.out_channels == g.group &&
         g.dilations[0] == 1 && g.dilations[1] == 1 && g.kernel[0] <= 7 && g.kernel[1] <= 7 && g.batch > 0 &&
         g.OutputSize() > 0 && g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0;
}

// Depthwise passes straight from the NCHW tensors, AVX2 on x86-64, 4-float vectors elsewhere (oneDNN 2.6 needs its
// blocked layouts and reorders around them, and takes 5x5 dW to im2col and GEMM). The padded plane of X (or of dX) is
// kept split into `stride` column phases, phase q holding padded columns q, q + stride, ...: each
// kernel tap then reads or writes one contiguous run per output row. dY rows are padded to whole vectors.
struct DepthwisePlanes {
  int64_t ow8, rows, phase_w, stride;
  explicit DepthwisePlanes(const ConvGeometry& g)
      : ow8((g.output[1] + 7) / 8 * 8),
        rows((g.output[0] - 1) * g.strides[0] + g.kernel[0]),
        phase_w(ow8 + (g.kernel[1] - 1) / g.strides[1]),
        stride(g.strides[1]) {}
  int64_t PhaseFloats() const { return stride * rows * phase_w; }
  // Output rows whose products dW sums in float (about 16 per lane) before the sum goes into double.
  int64_t RowsPerRun() const { return std::max<int64_t>(1, 16 / (ow8 / 8)); }
  // Where each tap (i, j) of output row 0, column 0 lies in the phases, row-major:
  // (j % stride) * rows * phase_w + j / stride + i * phase_w, without a division per tap (every plane takes them).
  void Taps(int64_t kh, int64_t kw, int64_t* offsets) const {
    for (int64_t j = 0, phase = 0, column = 0; j < kw; ++j) {
      for (int64_t i = 0; i < kh; ++i) offsets[i * kw + j] = phase * rows * phase_w + column + i * phase_w;
      if (++phase == stride) {
        phase = 0;
        ++column;
      }
    }
  }
};

// Per thread: dY's padded rows (or the forward's output row), the phases, and the mapped input plane (MappedPlane).
int64_t DepthwiseScratch(const ConvGeometry& g) {
  const DepthwisePlanes p(g);
  return g.output[0] * p.ow8 + p.PhaseFloats() + p.ow8 + g.InputSize();
}

// Where FillPhases maps a plane: after the regions the passes use for dY rows and the phases.
float* MappedPlane(const ConvGeometry& g, const DepthwisePlanes& p, float* scratch) {
  return scratch + g.output[0] * p.ow8 + p.PhaseFloats() + p.ow8;
}

// Phase q's columns k in [first, last) hold input columns k * stride + q - left in [0, width).
struct PhaseColumns {
  int64_t first, last;
  PhaseColumns(const DepthwisePlanes& p, int64_t q, int64_t left, int64_t width) {
    first = std::min(p.phase_w, std::max<int64_t>(0, (left - q + p.stride - 1) / p.stride));
    const int64_t span = width - 1 + left - q;  // of the last input column, in padded columns after q
    last = span < 0 ? first : std::max(first, std::min(p.phase_w, span / p.stride + 1));
  }
};

// Zeroes the few floats of a phase row's margins with plain stores: GCC turns a zeroing loop into a memset call, and
// those calls (two per row) took 4% of MobileNetV2's step. The volatile stores keep it from doing so.
inline __attribute__((always_inline)) void ZeroMargin(float* to, int64_t count) {
  volatile float* margin = to;
  for (int64_t k = 0; k < count; ++k) margin[k] = 0.0f;
}

// The map goes over the whole plane into `mapped` first, as ChannelAffine computes it (batchnorm::MapRow on the best
// ISA): rows of 7 or 14 columns would leave SiLU's exp mostly scalar.
inline __attribute__((always_inline)) void FillPhases(const ConvGeometry& g, const DepthwisePlanes& p,
                                                      const float* plane, float* phases, int64_t c = 0,
                                                      const PlaneMap& map = {}, float* mapped = nullptr) {
  const int64_t h = g.input[0], w = g.input[1], top = g.pad_begin[0], left = g.pad_begin[1];
  if (map.Applies()) {
    batchnorm::MapRow(batchnorm::BestIsa(), plane, mapped, h * w, map.affine[c], map.affine[g.in_channels + c],
                      map.activation);
    plane = mapped;
  }
  for (int64_t q = 0; q < p.stride; ++q) {
    const PhaseColumns cols(p, q, left, w);
    for (int64_t r = 0; r < p.rows; ++r) {
      float* to = phases + (q * p.rows + r) * p.phase_w;
      const int64_t iy = r - top;
      if (iy < 0 || iy >= h) {
        std::fill(to, to + p.phase_w, 0.0f);
        continue;
      }
      const float* from = plane + iy * w + q - left;
      ZeroMargin(to, cols.first);
      if (p.stride == 1) {
        std::copy(from + cols.first, from + cols.last, to + cols.first);
      } else if (p.stride == 2) {  // a constant stride, which the compiler vectorizes (shuffles)
        for (int64_t k = cols.first; k < cols.last; ++k) to[k] = from[k * 2];
      } else {
        for (int64_t k = cols.first; k < cols.last; ++k) to[k] = from[k * p.stride];
      }
      ZeroMargin(to + cols.last, p.phase_w - cols.last);
    }
  }
}

// The dY plane with rows of p.ow8 floats: the plane itself where its rows are whole vectors, else padded into `padded`.
const float* PaddedRows(const ConvGeometry& g, const DepthwisePlanes& p, const float* plane, float* padded) {
  const int64_t oh = g.output[0], ow = g.output[1];
  if (ow == p.ow8) return plane;
  for (int64_t r = 0; r < oh; ++r) {
    std::copy(plane + r * ow, plane + (r + 1) * ow, padded + r * p.ow8);
    ZeroMargin(padded + r * p.ow8 + ow, p.ow8 - ow);
  }
  return padded;
}

// A dX row from its two phase rows at stride 2: column i from phase (i + left) % 2, phase column (i + left) / 2, or 0
// past the phases (no window reaches it). Four columns of each phase interleave into eight of the row at a time.
void InterleaveTwoPhases(const DepthwisePlanes& p, const float* phase0, const float* phase1, int64_t left, int64_t wd,
                         float* row) {
  const float* from[2] = {phase0, phase1};
  const float* first = from[left & 1];
  const float* second = from[(left + 1) & 1];
  int64_t i = 0;
  for (; i + 8 <= wd && ((i + left + 1) >> 1) + 4 <= p.phase_w; i += 8) {
    const Float4 a = LoadFloat4(first + ((i + left) >> 1)), b = LoadFloat4(second + ((i + left + 1) >> 1));
    StoreFloat4(row + i, __builtin_shufflevector(a, b, 0, 4, 1, 5));
    StoreFloat4(row + i + 4, __builtin_shufflevector(a, b, 2, 6, 3, 7));
  }
  for (; i < wd; ++i) {
    const int64_t k = (i + left) >> 1;
    row[i] = k < p.phase_w ? from[(i + left) & 1][k] : 0.0f;
  }
}

// The dX plane from the phases of the padded dX plane.
void ReadPhases(const ConvGeometry& g, const DepthwisePlanes& p, const float* phases, float* out) {
  const int64_t h = g.input[0], wd = g.input[1], top = g.pad_begin[0], left = g.pad_begin[1];
  for (int64_t iy = 0; iy < h; ++iy) {
    const int64_t r = iy + top;
    float* row = out + iy * wd;
    if (r >= p.rows) {  // below every window
      std::fill(row, row + wd, 0.0f);
      continue;
    }
    if (p.stride == 2) {
      InterleaveTwoPhases(p, phases + r * p.phase_w, phases + (p.rows + r) * p.phase_w, left, wd, row);
      continue;
    }
    for (int64_t q = 0; q < p.stride; ++q) {
      const PhaseColumns cols(p, q, left, wd);
      const float* from = phases + (q * p.rows + r) * p.phase_w;
      float* to = row + q - left;
      for (int64_t k = cols.first; k < cols.last; ++k) to[k * p.stride] = from[k];
      // Columns past the last window (the phases end there) get no gradient.
      for (int64_t k = std::max(cols.last, (left - q + p.stride - 1) / p.stride); k * p.stride + q - left < wd; ++k)
        to[k * p.stride] = 0.0f;
    }
  }
}

#if defined(__x86_64__)
// Brings a plane into cache over `steps` calls of Step, a few lines each: the depthwise passes fetch the next plane
// while they compute on this one (MobileNetV2's depthwise nodes -6%), else DRAM idles while they compute.
class Prefetch {
 public:
  // Plane `index` of `planes` planes of `size` floats at `data`; none past the last.
  Prefetch(const float* data, int64_t index, int64_t planes, int64_t size, int64_t steps) {
    if (index >= planes) return;
    at_ = reinterpret_cast<const char*>(data + index * size);
    end_ = at_ + size * static_cast<int64_t>(sizeof(float));
    const int64_t lines = (end_ - at_ + kLine - 1) / kLine;
    per_step_ = steps > 0 ? (lines + steps - 1) / steps : lines;
  }
  void Step() {
    for (int64_t k = 0; k < per_step_ && at_ < end_; ++k, at_ += kLine) __builtin_prefetch(at_, 0, 3);
  }

 private:
  static constexpr int64_t kLine = 64;
  const char* at_ = nullptr;
  const char* end_ = nullptr;
  int64_t per_step_ = 0;
};

// Y plane of image n, channel c (then max(y, 0) when `relu`). The plane's output vectors (8 columns of a row, rows
// padded to whole vectors) go eight at a time with independent sums, across rows: rows of one or two vectors (7x7
// and 14x14 outputs) would leave each sum a chain of dependent FMAs.
__attribute__((target("avx2,fma"))) void DepthwiseForwardPlane(const ConvGeometry& g, int64_t n, int64_t c,
                                                               const float* x, const float* w, const float* b,
                                                               float* y, bool relu, float* scratch,
                                                               const PlaneMap& map) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], ow = g.output[1], kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0];
  float* phases = scratch;
  FillPhases(g, p, x + (n * g.in_channels + c) * g.InputSize(), phases, c, map, MappedPlane(g, p, scratch));
  const float* taps = w + c * kh * kw;
  const int64_t count = kh * kw;
  int64_t offsets[49];  // of each tap in the phases, from the output row's first column
  p.Taps(kh, kw, offsets);
  const __m256 bias = _mm256_set1_ps(b ? b[c] : 0.0f), zero = _mm256_setzero_ps();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  float* plane = y + (n * g.out_channels + c) * oh * ow;
  const int64_t per_row = p.ow8 / 8, units = oh * per_row;
  constexpr int kUnits = 8;
  // The next plane in memory (the next task's) comes into cache while this one computes.
  Prefetch next(x, n * g.in_channels + c + 1, g.batch * g.in_channels, g.InputSize(), (units + kUnits - 1) / kUnits);
  int64_t r = 0, col = 0;  // of the next unit
  for (int64_t u = 0; u < units; u += kUnits) {
    next.Step();
    const float* from[kUnits];
    float* out[kUnits];
    int64_t valid[kUnits];
    for (int q = 0; q < kUnits; ++q) {  // past the last unit, repeat it (computed, not stored)
      from[q] = phases + r * sh * p.phase_w + col;
      out[q] = plane + r * ow + col;
      valid[q] = u + q < units ? std::min<int64_t>(8, ow - col) : 0;
      if (u + q + 1 < units && (col += 8) == p.ow8) {
        col = 0;
        ++r;
      }
    }
    __m256 sums[kUnits];
#pragma GCC unroll 8
    for (int q = 0; q < kUnits; ++q) sums[q] = bias;
    for (int64_t t = 0; t < count; ++t) {
      const __m256 tap = _mm256_set1_ps(taps[t]);
      const int64_t o = offsets[t];
#pragma GCC unroll 8
      for (int q = 0; q < kUnits; ++q) sums[q] = _mm256_fmadd_ps(tap, _mm256_loadu_ps(from[q] + o), sums[q]);
    }
    for (int q = 0; q < kUnits; ++q) {
      const __m256 v = relu ? _mm256_max_ps(sums[q], zero) : sums[q];
      if (valid[q] == 8) {
        _mm256_storeu_ps(out[q], v);
      } else if (valid[q] > 0) {  // a row's last, partial vector
        _mm256_maskstore_ps(out[q], _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid[q])), lane), v);
      }
    }
  }
}

// dX plane of image n, channel c: every tap scatters w * dY into the phases of the padded dX plane.
__attribute__((target("avx2,fma"))) void DepthwiseDataPlane(const ConvGeometry& g, int64_t n, int64_t c,
                                                            const float* dy, const float* w, float* dx,
                                                            float* scratch) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0];
  const float* dy_rows = PaddedRows(g, p, dy + (n * g.out_channels + c) * g.OutputSize(), scratch);
  float* phases = scratch + oh * p.ow8;
  std::fill(phases, phases + p.PhaseFloats(), 0.0f);
  const float* taps = w + c * kh * kw;
  int64_t offsets[49];
  p.Taps(kh, kw, offsets);
  Prefetch next(dy, n * g.out_channels + c + 1, g.batch * g.out_channels, g.OutputSize(), kh * kw);
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      next.Step();
      const __m256 tap = _mm256_set1_ps(taps[i * kw + j]);
      float* base = phases + offsets[i * kw + j];
      for (int64_t r = 0; r < oh; ++r) {
        float* to = base + r * sh * p.phase_w;
        const float* d = dy_rows + r * p.ow8;
        for (int64_t col = 0; col < p.ow8; col += 8)
          _mm256_storeu_ps(to + col, _mm256_fmadd_ps(tap, _mm256_loadu_ps(d + col), _mm256_loadu_ps(to + col)));
      }
    }
  ReadPhases(g, p, phases, dx + (n * g.in_channels + c) * g.InputSize());
}

// Taps j0 .. j0 + M - 1 of kernel row i, over one image: each with its own sums, sharing the loads of dY.
template <int M>
__attribute__((target("avx2,fma"), always_inline)) inline void DepthwiseWeightsTaps(
    const ConvGeometry& g, const DepthwisePlanes& p, const float* phases, const float* dy_rows, const int64_t* offsets,
    double* sums) {
  const int64_t oh = g.output[0], sh = g.strides[0];
  const float* base[M];
  for (int q = 0; q < M; ++q) base[q] = phases + offsets[q];
  __m256d low[M], high[M];
  for (int q = 0; q < M; ++q) low[q] = high[q] = _mm256_setzero_pd();
  const int64_t run_rows = p.RowsPerRun();
  for (int64_t run = 0; run < oh; run += run_rows) {
    __m256 acc[M];
    for (int q = 0; q < M; ++q) acc[q] = _mm256_setzero_ps();
    for (int64_t r = run; r < std::min(oh, run + run_rows); ++r) {
      const int64_t at = r * sh * p.phase_w;
      const float* d = dy_rows + r * p.ow8;
      for (int64_t col = 0; col < p.ow8; col += 8) {
        const __m256 dv = _mm256_loadu_ps(d + col);
        for (int q = 0; q < M; ++q) acc[q] = _mm256_fmadd_ps(dv, _mm256_loadu_ps(base[q] + at + col), acc[q]);
      }
    }
    for (int q = 0; q < M; ++q) {
      low[q] = _mm256_add_pd(low[q], _mm256_cvtps_pd(_mm256_castps256_ps128(acc[q])));
      high[q] = _mm256_add_pd(high[q], _mm256_cvtps_pd(_mm256_extractf128_ps(acc[q], 1)));
    }
  }
  for (int q = 0; q < M; ++q) {
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(low[q], high[q]));
    sums[q] += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
}

// dW of channel c over the batch; the products of a few output rows (RowsPerRun) are summed in float, those sums in
// double. The taps of a kernel row go in groups of up to four (3, 2 + 3, 3 + 4), so that their sums do not wait on
// each other.
__attribute__((target("avx2,fma"))) void DepthwiseWeightsChannel(const ConvGeometry& g, int64_t c, const float* x,
                                                                 const float* dy, float* dw, float* scratch,
                                                                 const PlaneMap& map) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], kh = g.kernel[0], kw = g.kernel[1];
  float* phases = scratch + oh * p.ow8;
  double sums[49] = {};
  int64_t offsets[49];
  p.Taps(kh, kw, offsets);
  const int64_t groups = (kw + 3) / 4;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* dy_rows = PaddedRows(g, p, dy + (n * g.out_channels + c) * g.OutputSize(), scratch);
    FillPhases(g, p, x + (n * g.in_channels + c) * g.InputSize(), phases, c, map, MappedPlane(g, p, scratch));
    // The planes of the next image, or of the next channel's first (this thread's next task).
    const int64_t next_plane = n + 1 < g.batch ? (n + 1) * g.in_channels + c : c + 1, planes = g.batch * g.in_channels;
    Prefetch next_x(x, next_plane, planes, g.InputSize(), kh * groups);
    Prefetch next_dy(dy, next_plane, planes, g.OutputSize(), kh * groups);
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t k = 0, j0 = 0; k < groups; ++k) {
        next_x.Step();
        next_dy.Step();
        const int64_t m = (kw - j0) / (groups - k);  // the taps left, spread evenly over the groups left
        double* at = sums + i * kw + j0;
        switch (m) {
          case 1: DepthwiseWeightsTaps<1>(g, p, phases, dy_rows, offsets + i * kw + j0, at); break;
          case 2: DepthwiseWeightsTaps<2>(g, p, phases, dy_rows, offsets + i * kw + j0, at); break;
          case 3: DepthwiseWeightsTaps<3>(g, p, phases, dy_rows, offsets + i * kw + j0, at); break;
          default: DepthwiseWeightsTaps<4>(g, p, phases, dy_rows, offsets + i * kw + j0, at); break;
        }
        j0 += m;
      }
  }
  for (int64_t t = 0; t < kh * kw; ++t) dw[c * kh * kw + t] = static_cast<float>(sums[t]);
}
#else
// The same passes on 4-float vectors (NEON, WASM SIMD128), two per 8 columns: the AVX2 kernels' lanes and sums.
typedef double DepthwiseVD __attribute__((vector_size(32)));

void DepthwiseForwardPlane(const ConvGeometry& g, int64_t n, int64_t c, const float* x, const float* w, const float* b,
                           float* y, bool relu, float* scratch, const PlaneMap& map) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], ow = g.output[1], kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0];
  float* phases = scratch;
  float* row = scratch + p.PhaseFloats();
  FillPhases(g, p, x + (n * g.in_channels + c) * g.InputSize(), phases, c, map, MappedPlane(g, p, scratch));
  const float* taps = w + c * kh * kw;
  const int64_t count = kh * kw;
  int64_t offsets[49];  // of each tap in the phases, from the output row's first column
  p.Taps(kh, kw, offsets);
  const Float4 bias = Float4{} + (b ? b[c] : 0.0f), zero = {};
  for (int64_t r = 0; r < oh; ++r) {
    const float* from = phases + r * sh * p.phase_w;
    float* out = y + ((n * g.out_channels + c) * oh + r) * ow;
    for (int64_t col = 0; col < p.ow8; col += 8) {
      Float4 lo = bias, hi = bias;
      for (int64_t t = 0; t < count; ++t) {
        const float* at = from + offsets[t] + col;
        lo += taps[t] * LoadFloat4(at);
        hi += taps[t] * LoadFloat4(at + 4);
      }
      if (relu) {
        lo = lo > zero ? lo : zero;
        hi = hi > zero ? hi : zero;
      }
      if (col + 8 <= ow) {
        StoreFloat4(out + col, lo);
        StoreFloat4(out + col + 4, hi);
      } else {  // the row's last, partial 8 columns
        StoreFloat4(row, lo);
        StoreFloat4(row + 4, hi);
        std::copy(row, row + (ow - col), out + col);
      }
    }
  }
}

void DepthwiseDataPlane(const ConvGeometry& g, int64_t n, int64_t c, const float* dy, const float* w, float* dx,
                        float* scratch) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0];
  const float* dy_rows = PaddedRows(g, p, dy + (n * g.out_channels + c) * g.OutputSize(), scratch);
  float* phases = scratch + oh * p.ow8;
  std::fill(phases, phases + p.PhaseFloats(), 0.0f);
  const float* taps = w + c * kh * kw;
  int64_t offsets[49];
  p.Taps(kh, kw, offsets);
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) {
      const float tap = taps[i * kw + j];
      float* base = phases + offsets[i * kw + j];
      for (int64_t r = 0; r < oh; ++r) {
        float* to = base + r * sh * p.phase_w;
        const float* d = dy_rows + r * p.ow8;
        for (int64_t col = 0; col < p.ow8; col += 4) StoreFloat4(to + col, LoadFloat4(to + col) + tap * LoadFloat4(d + col));
      }
    }
  ReadPhases(g, p, phases, dx + (n * g.in_channels + c) * g.InputSize());
}

void DepthwiseWeightsChannel(const ConvGeometry& g, int64_t c, const float* x, const float* dy, float* dw,
                             float* scratch, const PlaneMap& map) {
  const DepthwisePlanes p(g);
  const int64_t oh = g.output[0], kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0], run_rows = p.RowsPerRun();
  float* phases = scratch + oh * p.ow8;
  double sums[49] = {};
  int64_t offsets[49];
  p.Taps(kh, kw, offsets);
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* dy_rows = PaddedRows(g, p, dy + (n * g.out_channels + c) * g.OutputSize(), scratch);
    FillPhases(g, p, x + (n * g.in_channels + c) * g.InputSize(), phases, c, map, MappedPlane(g, p, scratch));
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        const float* base = phases + offsets[i * kw + j];
        DepthwiseVD low = {}, high = {};
        for (int64_t run = 0; run < oh; run += run_rows) {
          Float4 lo = {}, hi = {};
          for (int64_t r = run; r < std::min(oh, run + run_rows); ++r) {
            const float* from = base + r * sh * p.phase_w;
            const float* d = dy_rows + r * p.ow8;
            for (int64_t col = 0; col < p.ow8; col += 8) {
              lo += LoadFloat4(d + col) * LoadFloat4(from + col);
              hi += LoadFloat4(d + col + 4) * LoadFloat4(from + col + 4);
            }
          }
          low += __builtin_convertvector(lo, DepthwiseVD);
          high += __builtin_convertvector(hi, DepthwiseVD);
        }
        const DepthwiseVD lanes = low + high;
        sums[i * kw + j] += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
      }
  }
  for (int64_t t = 0; t < kh * kw; ++t) dw[c * kh * kw + t] = static_cast<float>(sums[t]);
}
#endif

// Runs fn(task, scratch) for tasks [0, count) on the pool, each thread on scratch of its own.
template <typename Fn>
void DepthwiseTasks(ThreadPool& threads, const ConvGeometry& g, int64_t count, Fn&& fn) {
  const size_t floats = static_cast<size_t>(DepthwiseScratch(g));
  threads.ParallelFor(count, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> buffer;
    if (buffer.size() < floats) buffer.resize(floats);
    for (int64_t t = begin; t < end; ++t) fn(t, buffer.data());
  });
}

// Whether the direct depthwise passes run: float32 with the direct kernels (on x86-64, with an AVX2/FMA CPU).
bool UseDepthwiseDirect(const ConvGeometry& g) {
#if defined(__x86_64__)
  if (!CpuHasAvx2Fma()) return false;
#endif
  return UseDirectKernels() && IsPlainDepthwise2D(g);
}

void DepthwiseForward(ThreadPool& threads, const ConvGeometry& g, const float* x, const float* w, const float* b,
                      float* y, bool relu, const PlaneMap& map = {}) {
  DepthwiseTasks(threads, g, g.batch * g.in_channels, [&](int64_t t, float* scratch) {
    DepthwiseForwardPlane(g, t / g.in_channels, t % g.in_channels, x, w, b, y, relu, scratch, map);
  });
}

void DepthwiseData(ThreadPool& threads, const ConvGeometry& g, const float* dy, const float* w, float* dx) {
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  if (g.strides[0] == 1 && g.strides[1] == 1 && g.pad_begin[0] < kh && g.pad_begin[1] < kw && g.pad_end[0] >= 0 &&
      g.pad_end[1] >= 0 && g.pad_end[0] < kh && g.pad_end[1] < kw) {
    // At stride 1, dX is the forward pass over dY padded by k - 1 - pad on each side, with each channel's taps
    // turned by 180 degrees: a gather per output instead of a scatter per tap.
    ConvGeometry back = g;
    back.input = g.output;
    back.output = g.input;
    back.pad_begin = {kh - 1 - g.pad_begin[0], kw - 1 - g.pad_begin[1]};
    back.pad_end = {kh - 1 - g.pad_end[0], kw - 1 - g.pad_end[1]};
    const int64_t taps = kh * kw;
    std::vector<float> turned(static_cast<size_t>(g.in_channels * taps));
    for (int64_t c = 0; c < g.in_channels; ++c)
      for (int64_t t = 0; t < taps; ++t) turned[c * taps + t] = w[c * taps + taps - 1 - t];
    DepthwiseTasks(threads, back, g.batch * g.in_channels, [&](int64_t t, float* scratch) {
      DepthwiseForwardPlane(back, t / g.in_channels, t % g.in_channels, dy, turned.data(), nullptr, dx, false, scratch,
                            {});
    });
    return;
  }
  DepthwiseTasks(threads, g, g.batch * g.in_channels, [&](int64_t t, float* scratch) {
    DepthwiseDataPlane(g, t / g.in_channels, t % g.in_channels, dy, w, dx, scratch);
  });
}

void DepthwiseWeights(ThreadPool& threads, const ConvGeometry& g, const float* x, const float* dy, float* dw,
                      const PlaneMap& map = {}) {
  DepthwiseTasks(threads, g, g.in_channels,
                 [&](int64_t c, float* scratch) { DepthwiseWeightsChannel(g, c, x, dy, dw, scratch, map); });
}
#endif

// y = Conv(x, W, B) of the node's inputs W and B, then max(y, 0) when `relu`.
void ConvInto(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, Tensor& y, bool relu) {
  const Tensor& w = ctx.Input(1);
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* bp = ctx.HasInput(2) ? ctx.Input(2).data<T>() : nullptr;
    if (IsSingleChannelPlane(g)) {
      SingleChannelConv<T>(ctx, g, x.data<T>(), w.data<T>(), bp, y.data<T>(), relu, nullptr, nullptr);
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
#if defined(EDGETRAIN_DEPTHWISE_DIRECT)
      if (UseDepthwiseDirect(g)) {
        DepthwiseForward(ctx.threads(), g, x.data<T>(), w.data<T>(), bp, y.data<T>(), relu);
        return;
      }
#endif
      if (OnOneDnnConvolution(g) &&
          conv_dnnl::ConvForward(g, x.data<T>(), w.data<T>(), bp, y.data<T>(), ctx.threads().num_threads(), relu))
        return;
    }
    ConvCompute<T>(ctx, g, x.data<T>(), w.data<T>(), bp, y.data<T>(), relu);
  });
}

}  // namespace

Tensor& ConvForwardKernel(KernelContext& ctx, bool relu) {
  const ConvGeometry g = CheckedConvGeometry(ctx);
  Tensor& y = ctx.Output(0, ConvOutputShape(g), ctx.Input(0).dtype());
  ConvInto(ctx, g, ctx.Input(0), y, relu);
  return y;
}

namespace {

void ConvKernel(KernelContext& ctx) { ConvForwardKernel(ctx, false); }

// ---------------------------------------------------------------------------------------------
// ConvGrad: the gradients of Y = Conv(X, W, B)

// The geometry seen from the output side: im2col columns of the forward pass are the "input" that
// Col2ImAdd scatters into the image of the forward input.
ConvGeometry ColumnsToImage(const ConvGeometry& g) {
  ConvGeometry back = g;
  back.input = g.output;
  back.output = g.input;
  return back;
}

// dX (when dx is not null) and dW (when dw is not null) of one convolution, per (image, group):
// dW_group += dY_ng * im2col(X_ng)^T and dX_ng = col2im(W_group^T * dY_ng). dW is accumulated
// per group (many groups) or per batch chunk with one partial sum per chunk, then reduced.
template <typename T>
void ConvBackwardCompute(KernelContext& ctx, const ConvGeometry& g, const T* dy, const T* x, const T* w, T* dx, T* dw) {
  ThreadPool& threads = ctx.threads();
  const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
  const int64_t in_size = g.InputSize(), out_size = g.OutputSize();
  const int64_t rows = cg * g.KernelSize();
  const int64_t w_size = g.out_channels * rows;
  const bool pointwise = IsPointwise(g);
  const ConvGeometry back = ColumnsToImage(g);
  const bool needs_columns = !pointwise;
  ShiftedGrid grid = pointwise ? ShiftedGrid{} : ShiftedGrid::Of<T>(g);
  // GridConvWeights keeps a vector of partial sums per weight and thread: larger layers run im2col.
  if (dw && grid.active() && w_size * GridTileForCpu().lanes > kGridWeightSums) grid = ShiftedGrid{};
  const int64_t positions = grid.active() ? grid.positions : out_size;
  const size_t grids_size = grid.padded ? static_cast<size_t>(cg * grid.plane) : 0;
  const size_t dy_grid_size = grid.active() && !grid.output_layout ? static_cast<size_t>(mg * positions) : 0;
  // dX on the grid path (GridConvWeights takes dW): dX = crop(fold(W^T * dY_grid)); `col` is followed by the
  // padded grids and dY on the grid (zero in the margins).
  auto grid_step = [&](int64_t n, int64_t grp, T* col, ThreadPool* pool) {
    const T* dy_ng = dy + (n * g.out_channels + grp * mg) * out_size;
    T* grids = col + rows * positions;
    const T* dy_grid = dy_ng;
    if (!grid.output_layout) {
      T* spread = grids + grids_size;
      std::fill(spread, spread + mg * positions, T(0));
      const int64_t width = g.output.back();
      for (int64_t m = 0; m < mg; ++m)
        grid.ForEachRow(g.output, 0, [&](int64_t index, int64_t offset) {
          std::copy(dy_ng + m * out_size + index, dy_ng + m * out_size + index + width, spread + m * positions + offset);
        });
      dy_grid = spread;
    }
    const int64_t plane_stride = grid.padded ? grid.plane : in_size;
    T* dx_ng = dx + (n * g.in_channels + grp * cg) * in_size;
    Gemm<T>(true, false, rows, positions, mg, T(1), w + grp * mg * rows, rows, dy_grid, positions, T(0), col, positions,
            pool);
    T* target = grid.padded ? grids : dx_ng;
    std::fill(target, target + cg * plane_stride, T(0));
    FoldGrid(grid, cg, col, positions, target, plane_stride);
    if (grid.padded) CropGrids(g, grid, cg, grids, dx_ng);
  };
  // One (image, group): dW rows of the group get the product (overwritten when `first`).
  auto step = [&](int64_t n, int64_t grp, T* dw_group, bool first, T* col, ThreadPool* pool) {
    if (grid.active()) return grid_step(n, grp, col, pool);
    const T* x_ng = x + (n * g.in_channels + grp * cg) * in_size;
    const T* dy_ng = dy + (n * g.out_channels + grp * mg) * out_size;
    if (dw_group) {
      const T* columns = x_ng;
      if (needs_columns) {
        Im2Col(g, cg, x_ng, col);
        columns = col;
      }
      Gemm<T>(false, true, mg, rows, out_size, T(1), dy_ng, out_size, columns, out_size, first ? T(0) : T(1), dw_group,
              rows, pool);
    }
    if (dx) {
      T* dx_ng = dx + (n * g.in_channels + grp * cg) * in_size;
      const T* w_group = w + grp * mg * rows;
      if (pointwise) {
        Gemm<T>(true, false, cg, out_size, mg, T(1), w_group, rows, dy_ng, out_size, T(0), dx_ng, in_size, pool);
      } else {
        Gemm<T>(true, false, rows, out_size, mg, T(1), w_group, rows, dy_ng, out_size, T(0), col, out_size, pool);
        std::fill(dx_ng, dx_ng + cg * in_size, T(0));
        Col2ImAdd(back, cg, col, dx_ng);
      }
    }
  };
  if (dw && g.batch == 0) std::fill(dw, dw + w_size, T(0));
  if (IsFullyConnected(g) && g.batch > 0) {  // dW[M, R] = dY[N, M]^T * X[N, R], dX[N, R] = dY * W[M, R]
    if (dw)
      Gemm<T>(true, false, g.out_channels, rows, g.batch, T(1), dy, g.out_channels, x, rows, T(0), dw, rows, &threads);
    if (dx)
      Gemm<T>(false, false, g.batch, rows, g.out_channels, T(1), dy, g.out_channels, w, rows, T(0), dx, rows, &threads);
    return;
  }
  if (dx && BatchesPointwise(g)) {  // dX = W^T dY, one GEMM over the batch; dW stays a product per image
    PointwiseOverBatch(ctx, g.batch, out_size, g.out_channels, g.in_channels, w, rows, true, dy, dx);
    dx = nullptr;
    if (!dw) return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (grid.active() && dw && g.batch > 0) {
      GridConvWeights(ctx, g, grid, dy, x, dw);
      dw = nullptr;
      if (!dx) return;
    }
  }
  const int64_t num_threads = threads.num_threads();
  const int64_t work_per_item = mg * rows * out_size;
  // One im2col buffer per chunk and, for dW summed over batch chunks, a partial dW per chunk but the first.
  const size_t col_size = needs_columns ? static_cast<size_t>(rows * positions) + grids_size + dy_grid_size : 0;
  const size_t slots = static_cast<size_t>(num_threads);
  NodeScratch<T> scratch(ctx, (col_size + static_cast<size_t>(w_size)) * slots);
  const std::span<T> cols = scratch.Take(col_size * slots);
  auto col_of = [&](int64_t slot) { return cols.data() + static_cast<size_t>(slot) * col_size; };
  if (!dw) {
    ForEachImageGroup(threads, g.batch, g.group, work_per_item, [&](int64_t n, int64_t grp, ThreadPool* pool,
                                                                    int64_t slot) {
      step(n, grp, nullptr, true, col_of(slot), pool);
    });
  } else if (g.group >= num_threads && num_threads > 1) {
    // Each chunk owns the dW rows of its groups.
    ForEachChunk(threads, g.group, num_threads, [&](int64_t slot, int64_t begin, int64_t end) {
      for (int64_t grp = begin; grp < end; ++grp)
        for (int64_t n = 0; n < g.batch; ++n) step(n, grp, dw + grp * mg * rows, n == 0, col_of(slot), nullptr);
    });
  } else {
    const int64_t chunks = std::min<int64_t>(num_threads, g.batch);
    if (chunks <= 1) {
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t grp = 0; grp < g.group; ++grp) step(n, grp, dw + grp * mg * rows, n == 0, col_of(0), &threads);
      return;
    }
    // Chunk 0 accumulates into dw itself, chunk c > 0 into partial c - 1.
    const std::span<T> partial = scratch.Take(static_cast<size_t>((chunks - 1) * w_size));
    ForEachChunk(threads, g.batch, chunks, [&](int64_t c, int64_t first, int64_t last) {
      T* target = c == 0 ? dw : partial.data() + (c - 1) * w_size;
      for (int64_t n = first; n < last; ++n)
        for (int64_t grp = 0; grp < g.group; ++grp) step(n, grp, target + grp * mg * rows, n == first, col_of(c), nullptr);
    });
    threads.ParallelFor(w_size, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t c = 1; c < chunks; ++c) {
        const T* part = partial.data() + (c - 1) * w_size;
        for (int64_t i = begin; i < end; ++i) dw[i] += part[i];
      }
    });
  }
}

// dB[m] = sum of dY over the batch and spatial positions of channel m.
template <typename T>
void ConvBiasGradient(ThreadPool& threads, int64_t batch, int64_t channels, int64_t size, const T* dy, T* db) {
  threads.ParallelFor(channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, batch * size)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t m = begin; m < end; ++m) {
                          double sum = 0;
                          for (int64_t n = 0; n < batch; ++n) {
                            const T* plane = dy + (n * channels + m) * size;
                            T part = T(0);
#pragma omp simd reduction(+ : part)
                            for (int64_t i = 0; i < size; ++i) part += plane[i];
                            sum += part;
                          }
                          db[m] = static_cast<T>(sum);
                        }
                      });
}

// Checks ConvGrad's dY, X and W (inputs 0, 1, 2) and derives the geometry.
ConvGeometry CheckedConvGradGeometry(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  const Tensor& w = ctx.Input(2);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(x.dtype() == w.dtype() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, what,
           ": dY, X and W types differ");
  const ConvGeometry g = ConvForwardGeometry(ctx, x, w);
  const Shape y_shape = ConvOutputShape(g);
  ET_CHECK(dy.shape() == y_shape, ErrorCode::kInvalidArgument, what, ": dY of shape ", ShapeToString(dy.shape()),
           " does not match the convolution's output shape ", ShapeToString(y_shape));
  return g;
}

// Whether ChannelAffineConv(Grad) applies its map in the direct depthwise kernels (else it maps X first).
bool MapsDirectly(const ConvGeometry& g, const Tensor& x, const ChannelAffineMap& map) {
#if defined(EDGETRAIN_DEPTHWISE_DIRECT)
  return x.dtype() == DataType::kFloat32 && map.fast && UseDepthwiseDirect(g);
#else
  (void)g, (void)x, (void)map;
  return false;
#endif
}

// ConvGrad's requested outputs (dX, dW, dB) for dY, X = `x` and W = input 2. With a `map`, `x` is the input before
// it, which only the direct depthwise kernels apply (MapsDirectly).
void ConvGradInto(KernelContext& ctx, const ConvGeometry& g, const Tensor& x, const PlaneMap& map = {}) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& w = ctx.Input(2);
  const std::string& what = ctx.node().Describe();
  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dx = ctx.HasOutput(0) ? ctx.Output(0, x.shape(), x.dtype()).template data<T>() : nullptr;
    T* dw = ctx.HasOutput(1) ? ctx.Output(1, w.shape(), w.dtype()).template data<T>() : nullptr;
    T* db = ctx.HasOutput(2) ? ctx.Output(2, {g.out_channels}, x.dtype()).template data<T>() : nullptr;
    // What oneDNN or the single-channel path computes is struck off (set to null) before the
    // reference code runs the rest.
    if (dw && IsSingleChannelPlane(g)) {
      SingleChannelConv<T>(ctx, g, x.data<T>(), w.data<T>(), nullptr, nullptr, false, dy.data<T>(), dw);
      dw = nullptr;
    }
    if constexpr (std::is_same_v<T, float>) {
#if defined(EDGETRAIN_DEPTHWISE_DIRECT)
      if (UseDepthwiseDirect(g)) {
        if (dx) DepthwiseData(ctx.threads(), g, dy.data<T>(), w.data<T>(), dx);
        if (dw) DepthwiseWeights(ctx.threads(), g, x.data<T>(), dy.data<T>(), dw, map);
        dx = dw = nullptr;
      }
#endif
      ET_CHECK(!map.Applies() || (!dx && !dw), ErrorCode::kInternal, what,
               ": a mapped input off the depthwise kernels");
      if (OnOneDnnConvolution(g)) {
        const int threads = ctx.threads().num_threads();
        if (dx && conv_dnnl::ConvBackwardData(g, dy.data<T>(), w.data<T>(), dx, threads)) dx = nullptr;
        if (dw && conv_dnnl::ConvBackwardWeights(g, dy.data<T>(), x.data<T>(), dw, db, threads)) dw = db = nullptr;
      }
    }
    if (dx || dw) ConvBackwardCompute<T>(ctx, g, dy.data<T>(), x.data<T>(), w.data<T>(), dx, dw);
    if (db) ConvBiasGradient<T>(ctx.threads(), g.batch, g.out_channels, g.OutputSize(), dy.data<T>(), db);
  });
}

// X with the map applied, for the kernels off the direct depthwise path.
Tensor MappedInput(KernelContext& ctx, const ChannelAffineMap& map, const Tensor& x, const Tensor& affine) {
  Tensor mapped(x.dtype(), x.shape(), ctx.node().Describe());
  ApplyChannelAffineMap(ctx, map, x, affine, mapped);
  return mapped;
}

// ai.edgetrain.ChannelAffineConv(X, W, B, affine[, min, max]; activation and Conv's attributes; B may be "") =
// Conv(ChannelAffine(X, affine, min, max), W, B): a training BatchNormalization's output consumed by a depthwise
// convolution without being stored (the session's FoldChannelAffineIntoDepthwiseConv). The direct depthwise kernels
// apply the map as they read each plane; elsewhere X is mapped first. The same bits either way.
void ChannelAffineConvKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& affine = ctx.Input(3);
  const ChannelAffineMap map = ReadChannelAffineMap(ctx, x, affine, 4);
  const ConvGeometry g = CheckedConvGeometry(ctx);
  Tensor& y = ctx.Output(0, ConvOutputShape(g), x.dtype());
#if defined(EDGETRAIN_DEPTHWISE_DIRECT)
  if (MapsDirectly(g, x, map)) {
    const float* b = ctx.HasInput(2) ? ctx.Input(2).data<float>() : nullptr;
    DepthwiseForward(ctx.threads(), g, x.data<float>(), ctx.Input(1).data<float>(), b, y.data<float>(), false,
                     PlaneMap{affine.data<float>(), map.ForFloat()});
    return;
  }
#endif
  ConvInto(ctx, g, MappedInput(ctx, map, x, affine), y, false);
}

// ai.edgetrain.ChannelAffineConvGrad(dY, X, W, affine[, min, max]) = ConvGrad(dY, ChannelAffine(X, affine, min, max),
// W) -> (dX, dW, dB): dX is the gradient at the mapped input.
void ChannelAffineConvGradKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(1);
  const Tensor& affine = ctx.Input(3);
  const ChannelAffineMap map = ReadChannelAffineMap(ctx, x, affine, 4);
  const ConvGeometry g = CheckedConvGradGeometry(ctx);
  if (MapsDirectly(g, x, map)) return ConvGradInto(ctx, g, x, PlaneMap{affine.data<float>(), map.ForFloat()});
  ConvGradInto(ctx, g, MappedInput(ctx, map, x, affine));
}

}  // namespace

// ai.edgetrain.ConvGrad(dY, X, W) -> (dX, dW, dB), attributes as Conv's. Outputs that are not
// requested are not computed.
void ConvGradKernel(KernelContext& ctx) { ConvGradInto(ctx, CheckedConvGradGeometry(ctx), ctx.Input(1)); }

namespace {

Attribute RefInts(const std::string& name) { return Attribute::Ref(Attribute::Kind::kInts, name); }

// ConvGrad in standard ops (any spatial rank; shapes read at run time):
//  dX = ConvTranspose(dY, W) without padding, then cropped by the pads (Pad with negative amounts);
//  dW = Conv of X with channels and batch swapped (per group) by dY used as the kernel, strides and
//       dilations exchanged, cut to the kernel size;
//  dB = ReduceSum(dY) over the batch and spatial axes.
std::shared_ptr<const FunctionDef> ConvGradFunction() {
  FunctionBuilder b("ConvGrad", {"dY", "X", "W"}, {"dX", "dW", "dB"}, {"strides", "pads", "dilations", "group"});
  const Attribute group = Attribute::Ref(Attribute::Kind::kInt, "group");
  const Attribute axis0 = Attribute::Int(0);
  b.Ints("zero", {0});
  b.Ints("one", {1});
  b.Ints("two", {2});
  b.Ints("to_end", {std::numeric_limits<int64_t>::max()});
  b.Ints("flat", {-1});
  b.Ints("zeros_2", {0, 0});
  b.Node("Shape", {"X"}, {"x_shape"});
  b.Node("Shape", {"W"}, {"w_shape"});
  b.Node("Shape", {"dY"}, {"dy_shape"});
  b.Node("Slice", {"x_shape", "two", "to_end"}, {"x_spatial"});
  b.Node("Slice", {"dy_shape", "two", "to_end"}, {"dy_spatial"});
  b.Node("Slice", {"w_shape", "two", "to_end"}, {"kernel_spatial"});
  b.Node("Slice", {"x_shape", "zero", "one"}, {"batch"});
  b.Node("Slice", {"x_shape", "one", "two"}, {"channels"});
  b.Node("Slice", {"w_shape", "zero", "one"}, {"out_channels"});
  b.Node("Slice", {"w_shape", "one", "two"}, {"group_channels"});
  b.Node("Div", {"channels", "group_channels"}, {"groups"});
  b.Node("Div", {"out_channels", "groups"}, {"group_out_channels"});
  // dX
  b.Node("ConvTranspose", {"dY", "W"}, {"dx_full"},
         {{"strides", RefInts("strides")}, {"dilations", RefInts("dilations")}, {"group", group}});
  b.Node("Constant", {}, {"pads"}, {{"value_ints", RefInts("pads")}});
  b.Node("Shape", {"pads"}, {"pads_count"});
  b.Node("Div", {"pads_count", "two"}, {"spatial_rank"});
  b.Node("Slice", {"pads", "zero", "spatial_rank"}, {"pad_begin"});
  b.Node("Shape", {"dx_full"}, {"full_shape"});
  b.Node("Slice", {"full_shape", "two", "to_end"}, {"full_spatial"});
  b.Node("Add", {"x_spatial", "pad_begin"}, {"x_end"});
  b.Node("Sub", {"x_end", "full_spatial"}, {"crop_end"});
  b.Node("Neg", {"pad_begin"}, {"crop_begin"});
  b.Node("Concat", {"zeros_2", "crop_begin", "zeros_2", "crop_end"}, {"crop"}, {{"axis", axis0}});
  b.Node("Pad", {"dx_full", "crop"}, {"dX"});
  // dW
  b.Node("Concat", {"batch", "groups", "group_channels", "flat"}, {"x_grouped_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"X", "x_grouped_shape"}, {"x_grouped"});
  b.Node("Transpose", {"x_grouped"}, {"x_swapped"}, {{"perm", Attribute::Ints({2, 1, 0, 3})}});
  b.Node("Mul", {"groups", "batch"}, {"groups_batch"});
  b.Node("Concat", {"group_channels", "groups_batch", "x_spatial"}, {"x_as_batch_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"x_swapped", "x_as_batch_shape"}, {"x_as_batch"});
  b.Node("Concat", {"batch", "groups", "group_out_channels", "flat"}, {"dy_grouped_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"dY", "dy_grouped_shape"}, {"dy_grouped"});
  b.Node("Transpose", {"dy_grouped"}, {"dy_swapped"}, {{"perm", Attribute::Ints({1, 2, 0, 3})}});
  b.Node("Concat", {"out_channels", "batch", "dy_spatial"}, {"dy_as_kernel_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"dy_swapped", "dy_as_kernel_shape"}, {"dy_as_kernel"});
  b.Node("Conv", {"x_as_batch", "dy_as_kernel"}, {"dw_wide"},
         {{"strides", RefInts("dilations")},
          {"dilations", RefInts("strides")},
          {"pads", RefInts("pads")},
          {"group", group}});
  b.Node("Sub", {"kernel_spatial", "kernel_spatial"}, {"kernel_zeros"});
  b.Node("Concat", {"zeros_2", "kernel_zeros"}, {"dw_starts"}, {{"axis", axis0}});
  b.Node("Concat", {"group_channels", "out_channels", "kernel_spatial"}, {"dw_ends"}, {{"axis", axis0}});
  b.Node("Slice", {"dw_wide", "dw_starts", "dw_ends"}, {"dw_swapped"});
  b.Node("Concat", {"group_channels", "out_channels", "flat"}, {"dw_flat_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"dw_swapped", "dw_flat_shape"}, {"dw_flat"});
  b.Node("Transpose", {"dw_flat"}, {"dw_transposed"}, {{"perm", Attribute::Ints({1, 0, 2})}});
  b.Node("Reshape", {"dw_transposed", "w_shape"}, {"dW"});
  // dB
  b.Node("Concat", {"batch", "out_channels", "flat"}, {"dy_flat_shape"}, {{"axis", axis0}});
  b.Node("Reshape", {"dY", "dy_flat_shape"}, {"dy_flat"});
  b.Ints("bias_axes", {0, 2});
  b.Node("ReduceSum", {"dy_flat", "bias_axes"}, {"dB"}, {{"keepdims", Attribute::Int(0)}});
  return b.Build();
}

// ---------------------------------------------------------------------------------------------
// Gradient rules

int64_t StaticRank(const GradientContext& g, const std::string& value) {
  const ValueInfo* info = g.Info(value);
  return info && info->has_shape ? static_cast<int64_t>(info->shape.size()) : -1;
}

// Static spatial sizes of a value [N, C, spatial...]; empty unless all are known.
std::vector<int64_t> StaticSpatial(const GradientContext& g, const std::string& value) {
  const ValueInfo* info = g.Info(value);
  std::vector<int64_t> sizes;
  if (!info || !info->has_shape || info->shape.size() < 3) return sizes;
  for (size_t d = 2; d < info->shape.size(); ++d) {
    if (!info->shape[d].known()) return {};
    sizes.push_back(info->shape[d].value);
  }
  return sizes;
}

// Conv/ConvTranspose attributes with auto_pad (and ConvTranspose's output_shape) resolved to
// explicit pads, as the backward ops take them.
AttributeMap ResolvedConvAttributes(const GradientContext& g, bool transpose) {
  const Node& node = g.node();
  const std::string& what = node.Describe();
  const ConvAttributes a = ConvAttributes::Parse(node, g.opset());
  int64_t rank = StaticRank(g, g.X(1));
  if (rank < 3) rank = StaticRank(g, g.X(0));
  if (rank < 3 && !a.kernel_shape.empty()) rank = static_cast<int64_t>(a.kernel_shape.size()) + 2;
  ET_CHECK(rank >= 3, ErrorCode::kNotImplemented, what,
           ": the gradient needs the rank of X or W, which shape inference does not know");
  const size_t spatial = static_cast<size_t>(rank - 2);
  const std::vector<int64_t> strides = a.Or(a.strides, spatial, 1);
  const Int64Vector dilations = a.Or(a.dilations, spatial, 1);
  Int64Vector pads = a.Or(a.pads, 2 * spatial, 0);
  const std::string& auto_pad = a.auto_pad;
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  Int64Vector output_shape = transpose ? a.output_shape : Int64Vector{};
  if (output_shape.size() == spatial + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  ET_CHECK(strides.size() == spatial && dilations.size() == spatial && pads.size() == 2 * spatial,
           ErrorCode::kInvalidModel, what, ": strides/dilations/pads do not match ", spatial, " spatial dimensions");
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  if (same || !output_shape.empty()) {
    const std::vector<int64_t> input = StaticSpatial(g, g.X(0));
    const std::vector<int64_t> kernel =
        a.kernel_shape.empty() ? StaticSpatial(g, g.X(1)) : std::vector<int64_t>(a.kernel_shape.begin(), a.kernel_shape.end());
    ET_CHECK(input.size() == spatial && kernel.size() == spatial, ErrorCode::kNotImplemented, what,
             ": the gradient with auto_pad or output_shape needs static spatial sizes of X and W");
    const std::vector<int64_t> output_padding = a.Or(a.output_padding, spatial, 0);
    for (size_t d = 0; d < spatial; ++d) {
      const int64_t extent = (kernel[d] - 1) * dilations[d] + 1;
      int64_t total = 0, begin = 0;
      if (!transpose) {
        const int64_t out = CeilDiv(input[d], strides[d]);
        total = std::max<int64_t>(0, (out - 1) * strides[d] + extent - input[d]);
        begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      } else {
        const int64_t full = strides[d] * (input[d] - 1) + output_padding.at(d) + extent;
        total = full - (!output_shape.empty() ? output_shape[d] : input[d] * strides[d]);
        begin = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
      }
      ET_CHECK(total >= 0, ErrorCode::kNotImplemented, what, ": the gradient with an output larger than the ",
               "convolution's extent is not implemented");
      pads[d] = begin;
      pads[d + spatial] = total - begin;
    }
  }
  return {{"strides", Attribute::Ints(strides)},
          {"pads", Attribute::Ints(pads)},
          {"dilations", Attribute::Ints(dilations)},
          {"group", Attribute::Int(a.group)}};
}

// dB of Conv/ConvTranspose: dY summed over the batch and spatial axes.
std::string BiasGradient(GradientContext& g, const std::string& dy) {
  std::string flat = g.Op("Reshape", {dy, g.Ints({0, 0, -1})});
  return g.Op("ReduceSum", {flat, g.Ints({0, 2})}, {{"keepdims", Attribute::Int(0)}});
}

void ConvGradient(GradientContext& g) {
  const bool has_bias = g.NumInputs() > 2 && !g.X(2).empty();
  const bool bias_grad = has_bias && g.NeedsGrad(2);
  if (!g.NeedsGrad(0) && !g.NeedsGrad(1)) {
    if (bias_grad) g.SetGrad(2, BiasGradient(g, g.dY(0)));
    return;
  }
  // Always all three outputs: the function body defines three (ORT rejects fewer); one nothing reads is not computed.
  std::vector<std::string> grads =
      g.Emit("ConvGrad", {g.dY(0), g.X(0), g.X(1)}, 3, ResolvedConvAttributes(g, false), kEdgetrainDomain);
  g.SetGrad(0, grads[0]);
  g.SetGrad(1, grads[1]);
  if (bias_grad) g.SetGrad(2, grads[2]);
}

void RegisterConv(OpRegistry& r) {
  ET_IF_BUILT("", "Conv") {
    WithAttributes<ConvAttributes>(RegisterOnnx(r, "Conv", ConvKernel));
    r.SetGradient("Conv", ConvGradient);
  }
  ET_IF_BUILT("ai.edgetrain", "ConvGrad")
  WithAttributeParser<ConvAttributes>(
      RegisterFused(r, "ConvGrad", ConvGradKernel, ET_TRAINING_BODY(ConvGradFunction())));
  ET_IF_BUILT("ai.edgetrain", "ChannelAffineConv")
  WithAttributeParser<ConvAttributes>(RegisterFused(r, "ChannelAffineConv", ChannelAffineConvKernel, nullptr));
  ET_IF_BUILT("ai.edgetrain", "ChannelAffineConvGrad")
  WithAttributeParser<ConvAttributes>(RegisterFused(r, "ChannelAffineConvGrad", ChannelAffineConvGradKernel, nullptr));
}

// ---------------------------------------------------------------------------------------------
// ConvTranspose

void ConvTransposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& w = ctx.Input(1);
  const Node& node = ctx.node();
  const std::string& what = node.Describe();
  ET_CHECK(x.rank() >= 3 && w.rank() == x.rank(), ErrorCode::kInvalidArgument, what,
           ": ConvTranspose needs X of rank >= 3 and W of the same rank, got ", ShapeToString(x.shape()), " and ",
           ShapeToString(w.shape()));
  ET_CHECK(x.dtype() == w.dtype(), ErrorCode::kInvalidArgument, what, ": X and W types differ");
  const size_t spatial = x.rank() - 2;
  const ConvTransposeAttributes& attrs = ctx.Attributes<ConvTransposeAttributes>();
  ConvGeometry g;
  g.batch = x.dim(0);
  g.in_channels = x.dim(1);
  g.group = attrs.group;
  ET_CHECK(g.group >= 1 && w.dim(0) == g.in_channels && g.in_channels % g.group == 0, ErrorCode::kInvalidArgument,
           what, ": channels do not match: X ", ShapeToString(x.shape()), ", W ", ShapeToString(w.shape()), ", group ",
           g.group);
  g.out_channels = w.dim(1) * g.group;
  ReadConvAttributes(attrs, what, w, spatial, g);
  g.input.assign(x.shape().begin() + 2, x.shape().end());
  const std::vector<int64_t> output_padding = attrs.Or(attrs.output_padding, spatial, 0);
  std::vector<int64_t> output_shape = attrs.output_shape;
  if (output_shape.size() == spatial + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  ET_CHECK(output_padding.size() == spatial && (output_shape.empty() || output_shape.size() == spatial),
           ErrorCode::kInvalidArgument, what, ": output_padding/output_shape do not match ", spatial,
           " spatial dimensions");
  const std::string& auto_pad = attrs.auto_pad;
  g.output.resize(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t full = g.strides[d] * (g.input[d] - 1) + output_padding[d] + (g.kernel[d] - 1) * g.dilations[d] + 1;
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (!output_shape.empty() || same) {
      g.output[d] = !output_shape.empty() ? output_shape[d] : g.input[d] * g.strides[d];
      const int64_t total = full - g.output[d];
      // Odd padding goes first only for SAME_LOWER (the backend data for output_shape relies on this).
      g.pad_begin[d] = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
    } else {
      if (auto_pad == "VALID") g.pad_begin[d] = g.pad_end[d] = 0;
      g.output[d] = full - g.pad_begin[d] - g.pad_end[d];
    }
    ET_CHECK(g.output[d] >= 0, ErrorCode::kInvalidArgument, what, ": negative output size on spatial axis ", d);
  }
  const bool has_bias = ctx.HasInput(2);
  if (has_bias) {
    const Tensor& b = ctx.Input(2);
    ET_CHECK(b.numel() == g.out_channels && b.dtype() == x.dtype(), ErrorCode::kInvalidArgument, what, ": bias of shape ",
             ShapeToString(b.shape()), " does not match ", g.out_channels, " output channels");
  }
  Shape y_shape = {g.batch, g.out_channels};
  y_shape.insert(y_shape.end(), g.output.begin(), g.output.end());
  Tensor& y = ctx.Output(0, y_shape, x.dtype());

  VisitFloat(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    const T* bp = has_bias ? ctx.Input(2).data<T>() : nullptr;
    T* yp = y.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (UseDnnl() && conv_dnnl::ConvTransposeForward(g, xp, wp, bp, yp, ctx.threads().num_threads())) return;
    }
    const int64_t cg = g.in_channels / g.group, mg = g.out_channels / g.group;
    const int64_t kernel_size = g.KernelSize(), in_size = g.InputSize(), out_size = g.OutputSize();
    const int64_t rows = mg * kernel_size;
    const size_t col_size = static_cast<size_t>(rows * in_size);
    const size_t slots = static_cast<size_t>(ctx.threads().num_threads());
    NodeScratch<T> scratch(ctx, col_size * slots);
    const std::span<T> cols = scratch.Take(col_size * slots);
    ForEachImageGroup(ctx.threads(), g.batch, g.group, rows * cg * in_size,
                      [&](int64_t n, int64_t grp, ThreadPool* pool, int64_t slot) {
                        const T* x_ng = xp + (n * g.in_channels + grp * cg) * in_size;
                        T* y_ng = yp + (n * g.out_channels + grp * mg) * out_size;
                        for (int64_t m = 0; m < mg; ++m)
                          std::fill(y_ng + m * out_size, y_ng + (m + 1) * out_size, bp ? bp[grp * mg + m] : T(0));
                        T* col = cols.data() + static_cast<size_t>(slot) * col_size;
                        // col[(m, k), i] = sum_c W[c, (m, k)] * X[c, i]
                        Gemm<T>(true, false, rows, in_size, cg, T(1), wp + grp * cg * rows, rows, x_ng, in_size, T(0),
                                col, in_size, pool);
                        Col2ImAdd(g, mg, col, y_ng);
                      });
  });
}

// Y = ConvTranspose(X, W) is the input-gradient of a Conv with weights W, so dX = Conv(dY, W)
// and dW is that Conv's weight gradient with X in the role of its output gradient.
void ConvTransposeGradient(GradientContext& g) {
  const std::string& dy = g.dY(0);
  const bool needs_x_or_w = g.NeedsGrad(0) || g.NeedsGrad(1);
  AttributeMap attrs;
  if (needs_x_or_w) attrs = ResolvedConvAttributes(g, true);
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Conv", {dy, g.X(1)}, attrs));
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Emit("ConvGrad", {g.X(0), dy, g.X(1)}, 3, attrs, kEdgetrainDomain)[1]);
  if (g.NumInputs() > 2 && !g.X(2).empty() && g.NeedsGrad(2)) g.SetGrad(2, BiasGradient(g, dy));
}

void RegisterConvTranspose(OpRegistry& r) {
  ET_IF_BUILT("", "ConvTranspose") {
    WithAttributes<ConvTransposeAttributes>(RegisterOnnx(r, "ConvTranspose", ConvTransposeKernel));
    r.SetGradient("ConvTranspose", ConvTransposeGradient);
  }
}

// ---------------------------------------------------------------------------------------------
// ConvReluMaxPool (ai.edgetrain): Conv, Relu and MaxPool fused

// ai.edgetrain.ConvReluMaxPool(X, W, B?) = MaxPool(Relu(Conv(X, W, B))), with Conv's attributes and
// MaxPool's named "pool_<attribute>". On oneDNN the Conv's output stays in oneDNN's blocked layout
// for the pooling; the reference path pools a plain Conv output kept as scratch.
void ConvReluMaxPoolKernel(KernelContext& ctx) {
  const ConvGeometry g = CheckedConvGeometry(ctx);
  const Tensor& x = ctx.Input(0);
  const Shape conv_shape = ConvOutputShape(g);
  const PoolGeometry pool = ReadPoolGeometry(ctx, conv_shape, true, "pool_");
  Shape pooled_shape = {g.batch, g.out_channels};
  pooled_shape.insert(pooled_shape.end(), pool.output.begin(), pool.output.end());
  Tensor& y = ctx.Output(0, pooled_shape, x.dtype());
  if (x.dtype() == DataType::kFloat32 && UseDnnl() &&
      conv_dnnl::ConvReluMaxPoolForward(g, pool, x.data<float>(), ctx.Input(1).data<float>(),
                                        ctx.HasInput(2) ? ctx.Input(2).data<float>() : nullptr, y.data<float>(),
                                        ctx.threads().num_threads()))
    return;
  Tensor& conv = ctx.Output(1, conv_shape, x.dtype());  // the node has one output: scratch kept between runs
  ConvInto(ctx, g, ctx.Input(0), conv, true);
  MaxPoolCompute(ctx, conv, pool, y);
}

// ConvReluMaxPool in standard ops: Conv, Relu, MaxPool.
std::shared_ptr<const FunctionDef> ConvReluMaxPoolFunction() {
  FunctionBuilder b("ConvReluMaxPool", {"X", "W", "B"}, {"Y"},
                    {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "pool_auto_pad",
                     "pool_ceil_mode", "pool_dilations", "pool_kernel_shape", "pool_pads", "pool_strides"});
  auto attributes = [](const std::string& prefix) {
    AttributeMap a = {{"auto_pad", Attribute::Ref(Attribute::Kind::kString, prefix + "auto_pad")}};
    for (const char* name : {"dilations", "kernel_shape", "pads", "strides"}) a[name] = RefInts(prefix + name);
    return a;
  };
  AttributeMap conv = attributes(""), pool = attributes("pool_");
  conv["group"] = Attribute::Ref(Attribute::Kind::kInt, "group");
  pool["ceil_mode"] = Attribute::Ref(Attribute::Kind::kInt, "pool_ceil_mode");
  b.Op("MaxPool", {b.Op("Relu", {b.Op("Conv", {"X", "W", "B"}, "conv", conv)}, "relu")}, "Y", pool);
  return b.Build();
}

// ---------------------------------------------------------------------------------------------
// ConvInteger and QLinearConv

// Values of an int8/uint8 tensor minus a zero point that is a scalar or one value per block of
// `block` consecutive elements (per output channel of W), as doubles.
std::vector<double> CenteredInt8(const KernelContext& ctx, const Tensor& t, const Tensor* zero_point, int64_t blocks,
                                 const char* name) {
  const std::string& what = ctx.node().Describe();
  ET_CHECK(t.dtype() == DataType::kUint8 || t.dtype() == DataType::kInt8, ErrorCode::kNotImplemented, what, ": ", name,
           " of type ", DataTypeName(t.dtype()), " is not supported (int8/uint8 only)");
  std::vector<double> zp = {0.0};
  if (zero_point) {
    ET_CHECK(zero_point->dtype() == t.dtype(), ErrorCode::kInvalidArgument, what, ": zero point of ", name,
             " must have its type");
    zp = zero_point->ToDoubleVector();
    ET_CHECK(zp.size() == 1 || static_cast<int64_t>(zp.size()) == blocks, ErrorCode::kInvalidArgument, what,
             ": zero point of ", name, " has ", zp.size(), " values, expected 1 or ", blocks);
  }
  const std::vector<double> values = t.ToDoubleVector();
  std::vector<double> out(values.size());
  const int64_t block = blocks > 0 ? t.numel() / blocks : 1;
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = values[i] - zp[zp.size() == 1 ? 0 : static_cast<size_t>(static_cast<int64_t>(i) / block)];
  return out;
}

void ConvIntegerKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& w = ctx.Input(1);
  const ConvGeometry g = ConvForwardGeometry(ctx, x, w);
  const std::vector<double> xc = CenteredInt8(ctx, x, ctx.HasInput(2) ? &ctx.Input(2) : nullptr, 1, "x");
  const std::vector<double> wc = CenteredInt8(ctx, w, ctx.HasInput(3) ? &ctx.Input(3) : nullptr, g.out_channels, "w");
  Tensor& y = ctx.Output(0, ConvOutputShape(g), DataType::kInt32);
  std::vector<double> acc(static_cast<size_t>(y.numel()));
  ConvCompute<double>(ctx, g, xc.data(), wc.data(), nullptr, acc.data());
  int32_t* yp = y.data<int32_t>();
  for (size_t i = 0; i < acc.size(); ++i) yp[i] = static_cast<int32_t>(static_cast<int64_t>(acc[i]));
}

// Scalar or per-channel float parameter of the quantized ops.
std::vector<float> QuantScale(const KernelContext& ctx, size_t index, int64_t channels) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.dtype() == DataType::kFloat32 && (t.numel() == 1 || t.numel() == channels), ErrorCode::kInvalidArgument,
           ctx.node().Describe(), ": scale input ", index, " must be float32 with 1 or ", channels, " values");
  return t.ToVector<float>();
}

void QLinearConvKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& w = ctx.Input(3);
  const std::string& what = ctx.node().Describe();
  const ConvGeometry g = ConvForwardGeometry(ctx, x, w);
  const std::vector<float> x_scale = QuantScale(ctx, 1, 1), w_scale = QuantScale(ctx, 4, g.out_channels);
  const std::vector<float> y_scale = QuantScale(ctx, 6, 1);
  const Tensor& y_zp_tensor = ctx.Input(7);
  const DataType y_type = y_zp_tensor.dtype();
  ET_CHECK(y_type == DataType::kUint8 || y_type == DataType::kInt8, ErrorCode::kNotImplemented, what,
           ": output type ", DataTypeName(y_type), " is not supported (int8/uint8 only)");
  const double y_zp = y_zp_tensor.DoubleAt(0);
  const std::vector<double> xc = CenteredInt8(ctx, x, &ctx.Input(2), 1, "x");
  const std::vector<double> wc = CenteredInt8(ctx, w, &ctx.Input(5), g.out_channels, "w");
  std::vector<double> bias;
  if (ctx.HasInput(8)) {
    const Tensor& b = ctx.Input(8);
    ET_CHECK(b.dtype() == DataType::kInt32 && b.numel() == g.out_channels, ErrorCode::kInvalidArgument, what,
             ": bias must be int32 with ", g.out_channels, " values");
    bias = b.ToDoubleVector();
  }
  Tensor& y = ctx.Output(0, ConvOutputShape(g), y_type);
  std::vector<double> acc(static_cast<size_t>(y.numel()));
  ConvCompute<double>(ctx, g, xc.data(), wc.data(), bias.empty() ? nullptr : bias.data(), acc.data());
  const int64_t out_size = g.OutputSize();
  const double lo = y_type == DataType::kUint8 ? 0 : -128, hi = y_type == DataType::kUint8 ? 255 : 127;
  uint8_t* y_u8 = y_type == DataType::kUint8 ? y.data<uint8_t>() : nullptr;
  int8_t* y_s8 = y_type == DataType::kInt8 ? y.data<int8_t>() : nullptr;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t channel = (static_cast<int64_t>(i) / out_size) % g.out_channels;
    const float multiplier = x_scale[0] * w_scale[w_scale.size() == 1 ? 0 : static_cast<size_t>(channel)] / y_scale[0];
    const double q = std::clamp(std::nearbyint(static_cast<float>(acc[i]) * multiplier) + y_zp, lo, hi);
    if (y_u8) {
      y_u8[i] = static_cast<uint8_t>(q);
    } else {
      y_s8[i] = static_cast<int8_t>(q);
    }
  }
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  RegisterConv(r);
  RegisterConvTranspose(r);
  ET_IF_BUILT("ai.edgetrain", "ConvReluMaxPool")
  WithAttributeParser<ConvAttributes>(RegisterFused(r, "ConvReluMaxPool", ConvReluMaxPoolKernel, ConvReluMaxPoolFunction()));
  ET_IF_BUILT("", "ConvInteger") WithAttributeParser<ConvAttributes>(RegisterOnnx(r, "ConvInteger", ConvIntegerKernel));
  ET_IF_BUILT("", "QLinearConv") WithAttributeParser<ConvAttributes>(RegisterOnnx(r, "QLinearConv", QLinearConvKernel));
}

}  // namespace edgetrain
