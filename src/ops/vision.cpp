// Sampling and detection operators: GridSample (opsets 16 and 20), RoiAlign (10, 16) and
// NonMaxSuppression (10, 11). Reference kernels in double precision; one section per operator.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

void CheckRank(const Node& node, const Tensor& t, size_t input, const char* what, size_t rank) {
  ET_CHECK(t.rank() == rank, ErrorCode::kInvalidArgument, node.Describe(), ": input ", input, " (", what,
           ") must have rank ", rank, ", got shape ", ShapeToString(t.shape()));
}

// =====================================================================================================
// GridSample: Y[n, c, out...] = X[n, c] sampled at grid[n, out..., :] (x, y[, z] in [-1, 1]).
// Coordinates, padding and the cubic kernel (A = -0.75) follow PyTorch's grid_sampler, which the
// ONNX test data reproduces.

enum class SampleMode { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

struct GridSampleAttrs {
  SampleMode mode = SampleMode::kLinear;
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

GridSampleAttrs ReadGridSampleAttrs(const KernelContext& ctx) {
  const Node& node = ctx.node();
  GridSampleAttrs a;
  // The backward node (ai.edgetrain) carries the forward node's attributes, of either opset.
  const bool backward = node.domain == kEdgetrainDomain, new_names = ctx.opset() >= 20;
  const std::string mode = node.GetString("mode", new_names ? "linear" : "bilinear");
  if (mode == "nearest") a.mode = SampleMode::kNearest;
  else if ((mode == "linear" && (new_names || backward)) || (mode == "bilinear" && (!new_names || backward)))
    a.mode = SampleMode::kLinear;
  else if ((mode == "cubic" && (new_names || backward)) || (mode == "bicubic" && (!new_names || backward)))
    a.mode = SampleMode::kCubic;
  else
    Fail(ErrorCode::kInvalidArgument, node.Describe(), ": attribute 'mode' is \"", mode, "\"; opset ", ctx.opset(),
         " accepts ",
         ctx.opset() >= 20 ? "\"linear\", \"nearest\" or \"cubic\"" : "\"bilinear\", \"nearest\" or \"bicubic\"");
  const std::string padding = node.GetString("padding_mode", "zeros");
  if (padding == "zeros") a.padding = Padding::kZeros;
  else if (padding == "border") a.padding = Padding::kBorder;
  else if (padding == "reflection") a.padding = Padding::kReflection;
  else
    Fail(ErrorCode::kInvalidArgument, node.Describe(), ": attribute 'padding_mode' is \"", padding,
         "\"; it must be \"zeros\", \"border\" or \"reflection\"");
  a.align_corners = node.GetInt("align_corners", 0) != 0;
  return a;
}

double Unnormalize(double coord, int64_t size, bool align_corners) {
  return align_corners ? (coord + 1) / 2 * static_cast<double>(size - 1)
                       : ((coord + 1) * static_cast<double>(size) - 1) / 2;
}

// Reflects `x` into [twice_low/2, twice_high/2] (PyTorch's reflect_coordinates); *slope gets dx'/dx.
double Reflect(double x, double twice_low, double twice_high, double* slope) {
  if (twice_low == twice_high) {
    *slope = 0;
    return 0;
  }
  const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  *slope = x < low ? -1 : 1;
  x = std::fabs(x - low);
  const double extra = std::fmod(x, span);
  const int64_t flips = static_cast<int64_t>(std::floor(x / span));
  if (flips % 2 != 0) *slope = -*slope;
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

// The padding rule applied to a source coordinate (zeros leaves it; out-of-range reads give 0);
// *slope gets its derivative (1, -1 or 0: clamped).
double PadCoordinate(double x, int64_t size, const GridSampleAttrs& a, double* slope = nullptr) {
  double local = 1;
  if (!slope) slope = &local;
  *slope = 1;
  if (a.padding == Padding::kZeros) return x;
  const double last = static_cast<double>(size - 1);
  if (a.padding == Padding::kReflection)
    x = a.align_corners ? Reflect(x, 0, 2 * last, slope) : Reflect(x, -1, 2 * static_cast<double>(size) - 1, slope);
  if (x <= 0 || x >= last) *slope = 0;
  return std::clamp(x, 0.0, last);
}

// Keys' cubic convolution weights of the four taps around fraction t, and their derivatives in t.
void CubicCoefficients(double t, double c[4], double dc[4]) {
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  auto d_near = [](double x) { return 3 * (A + 2) * x * x - 2 * (A + 3) * x; };
  auto d_far = [](double x) { return 3 * A * x * x - 10 * A * x + 8 * A; };
  c[0] = far(t + 1), dc[0] = d_far(t + 1);
  c[1] = near(t), dc[1] = d_near(t);
  c[2] = near(1 - t), dc[2] = -d_near(1 - t);
  c[3] = far(2 - t), dc[3] = -d_far(2 - t);
}

// One input element a sample reads: its offset in the (N, C) plane, its weight, and the weight's
// derivative with respect to each grid coordinate (x, y[, z]).
struct Tap {
  int64_t offset;
  double weight;
  double d_weight[3];
};

// The shape facts of one GridSample call, checked once.
struct GridSampleShape {
  size_t dims = 0;
  int64_t n = 0, channels = 0, in_plane = 1, out_plane = 1;
  Shape in_size, out_shape;
};

GridSampleShape CheckGridSample(const KernelContext& ctx, const Tensor& x, const Tensor& grid,
                                const GridSampleAttrs& a) {
  const Node& node = ctx.node();
  ET_CHECK(x.rank() >= 3, ErrorCode::kInvalidArgument, node.Describe(), ": input 0 (X) must be (N, C, D1, ...), got ",
           ShapeToString(x.shape()));
  GridSampleShape s;
  s.dims = x.rank() - 2;
  ET_CHECK(ctx.opset() >= 20 || s.dims == 2 || node.domain == kEdgetrainDomain, ErrorCode::kInvalidArgument,
           node.Describe(), ": opset ", ctx.opset(),
           " samples 4-D inputs only (N-D needs opset 20), got X ", ShapeToString(x.shape()));
  ET_CHECK(s.dims <= 3, ErrorCode::kNotImplemented, node.Describe(), ": sampling ", s.dims,
           "-D volumes is not supported (at most 3 spatial dimensions), got X ", ShapeToString(x.shape()));
  ET_CHECK(a.mode != SampleMode::kCubic || s.dims == 2, ErrorCode::kNotImplemented, node.Describe(),
           ": cubic sampling is defined for 4-D inputs only, got X ", ShapeToString(x.shape()));
  ET_CHECK(grid.rank() == x.rank() && grid.dim(0) == x.dim(0) &&
               grid.dim(grid.rank() - 1) == static_cast<int64_t>(s.dims),
           ErrorCode::kInvalidArgument, node.Describe(), ": input 1 (grid) must be (N, out..., ", s.dims, ") for X ",
           ShapeToString(x.shape()), ", got ", ShapeToString(grid.shape()));
  ET_CHECK(grid.dtype() == x.dtype(), ErrorCode::kInvalidArgument, node.Describe(), ": input 1 (grid) is ",
           DataTypeName(grid.dtype()), " but X is ", DataTypeName(x.dtype()));
  s.n = x.dim(0);
  s.channels = x.dim(1);
  s.out_shape = {s.n, s.channels};
  for (size_t d = 0; d < s.dims; ++d) {
    s.out_shape.push_back(grid.dim(1 + d));
    s.out_plane *= grid.dim(1 + d);
    s.in_size.push_back(x.dim(2 + d));
    s.in_plane *= x.dim(2 + d);
  }
  return s;
}

// The taps of the sample at normalized grid point g (grid coordinate d indexes input dim dims-1-d).
void GridSampleTaps(const GridSampleShape& s, const GridSampleAttrs& a, const double* g, std::vector<Tap>& taps) {
  taps.clear();
  const size_t dims = s.dims;
  double coord[3], d_coord[3];  // source coordinate and its derivative in the normalized one
  int64_t size[3];
  for (size_t d = 0; d < dims; ++d) {
    size[d] = s.in_size[dims - 1 - d];
    coord[d] = Unnormalize(g[d], size[d], a.align_corners);
    d_coord[d] = (a.align_corners ? static_cast<double>(size[d] - 1) : static_cast<double>(size[d])) / 2;
    if (a.mode != SampleMode::kCubic && a.padding != Padding::kZeros) {
      double slope = 1;
      coord[d] = PadCoordinate(coord[d], size[d], a, &slope);
      d_coord[d] *= slope;
    }
  }
  auto offset_of = [&](const int64_t* pos) -> int64_t {  // -1 outside the input
    int64_t offset = 0;
    for (size_t d = 0; d < dims; ++d)
      if (pos[d] < 0 || pos[d] >= size[d]) return -1;
    for (size_t k = 0; k < dims; ++k) offset = offset * s.in_size[k] + pos[dims - 1 - k];
    return offset;
  };
  int64_t pos[3] = {0, 0, 0};
  if (a.mode == SampleMode::kNearest) {
    for (size_t d = 0; d < dims; ++d) pos[d] = static_cast<int64_t>(std::nearbyint(coord[d]));
    const int64_t offset = offset_of(pos);
    if (offset >= 0) taps.push_back({offset, 1.0, {0, 0, 0}});
    return;
  }
  if (a.mode == SampleMode::kLinear) {
    for (int64_t corner = 0; corner < (int64_t{1} << dims); ++corner) {
      double w[3];
      for (size_t d = 0; d < dims; ++d) {
        const double lo = std::floor(coord[d]), t = coord[d] - lo;
        const bool high = (corner >> d) & 1;
        pos[d] = static_cast<int64_t>(lo) + (high ? 1 : 0);
        w[d] = high ? t : 1 - t;
      }
      const int64_t offset = offset_of(pos);
      if (offset < 0) continue;
      Tap tap{offset, 1.0, {0, 0, 0}};
      for (size_t d = 0; d < dims; ++d) tap.weight *= w[d];
      for (size_t d = 0; d < dims; ++d) {
        double dw = ((corner >> d) & 1) ? d_coord[d] : -d_coord[d];
        for (size_t e = 0; e < dims; ++e)
          if (e != d) dw *= w[e];
        tap.d_weight[d] = dw;
      }
      taps.push_back(tap);
    }
    return;
  }
  const double x0 = std::floor(coord[0]), y0 = std::floor(coord[1]);
  double cx[4], cy[4], dcx[4], dcy[4];
  CubicCoefficients(coord[0] - x0, cx, dcx);
  CubicCoefficients(coord[1] - y0, cy, dcy);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) {
      pos[0] = static_cast<int64_t>(PadCoordinate(x0 - 1 + i, size[0], a));
      pos[1] = static_cast<int64_t>(PadCoordinate(y0 - 1 + j, size[1], a));
      const int64_t offset = offset_of(pos);
      if (offset < 0) continue;
      taps.push_back({offset, cx[i] * cy[j], {dcx[i] * cy[j] * d_coord[0], cx[i] * dcy[j] * d_coord[1], 0}});
    }
}

void GridSampleKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& grid = ctx.Input(1);
  const GridSampleAttrs a = ReadGridSampleAttrs(ctx);
  const GridSampleShape s = CheckGridSample(ctx, x, grid, a);
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* gp = grid.data<T>();
    T* yp = ctx.Output(0, s.out_shape, x.dtype()).template data<T>();
    std::vector<Tap> taps;
    double g[3];
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t o = 0; o < s.out_plane; ++o) {
        const int64_t at = (b * s.out_plane + o) * static_cast<int64_t>(s.dims);
        for (size_t d = 0; d < s.dims; ++d) g[d] = static_cast<double>(gp[at + static_cast<int64_t>(d)]);
        GridSampleTaps(s, a, g, taps);
        for (int64_t c = 0; c < s.channels; ++c) {
          const T* plane = xp + (b * s.channels + c) * s.in_plane;
          double value = 0;
          for (const Tap& tap : taps) value += tap.weight * static_cast<double>(plane[tap.offset]);
          yp[(b * s.channels + c) * s.out_plane + o] = static_cast<T>(value);
        }
      }
  });
}

// GridSampleGrad (ai.edgetrain): (X, grid, dY) -> (dX, dgrid), the same attributes as the forward node.
void GridSampleGradKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& grid = ctx.Input(1);
  const Tensor& dy = ctx.Input(2);
  const GridSampleAttrs a = ReadGridSampleAttrs(ctx);
  const GridSampleShape s = CheckGridSample(ctx, x, grid, a);
  ET_CHECK(dy.shape() == s.out_shape && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": input 2 (dY) must be ", DataTypeName(x.dtype()), " ", ShapeToString(s.out_shape), ", got ",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()));
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* gp = grid.data<T>();
    const T* dyp = dy.data<T>();
    T* dx = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    T* dgrid = ctx.Output(1, grid.shape(), grid.dtype()).template data<T>();
    std::fill(dx, dx + x.numel(), T(0));
    std::vector<Tap> taps;
    double g[3];
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t o = 0; o < s.out_plane; ++o) {
        const int64_t at = (b * s.out_plane + o) * static_cast<int64_t>(s.dims);
        for (size_t d = 0; d < s.dims; ++d) g[d] = static_cast<double>(gp[at + d]);
        GridSampleTaps(s, a, g, taps);
        double dg[3] = {0, 0, 0};
        for (int64_t c = 0; c < s.channels; ++c) {
          const T* plane = xp + (b * s.channels + c) * s.in_plane;
          T* d_plane = dx + (b * s.channels + c) * s.in_plane;
          const double upstream = static_cast<double>(dyp[(b * s.channels + c) * s.out_plane + o]);
          for (const Tap& tap : taps) {
            d_plane[tap.offset] += static_cast<T>(upstream * tap.weight);
            const double value = static_cast<double>(plane[tap.offset]);
            for (size_t d = 0; d < s.dims; ++d) dg[d] += upstream * tap.d_weight[d] * value;
          }
        }
        for (size_t d = 0; d < s.dims; ++d) dgrid[at + d] = static_cast<T>(dg[d]);
      }
  });
}

void GridSampleGradient(GradientContext& g) {
  if (g.dY(0).empty()) return;
  const std::vector<std::string> grads =
      g.Emit("GridSampleGrad", {g.X(0), g.X(1), g.dY(0)}, 2, g.node().attributes, kEdgetrainDomain);
  if (g.NeedsGrad(0)) g.SetGrad(0, grads[0]);
  if (g.NeedsGrad(1)) g.SetGrad(1, grads[1]);
}

// =====================================================================================================
// RoiAlign: Y[r, c] = average (or max) of bilinear samples of X[batch_indices[r], c] over each bin
// of roi r, as ONNX Runtime's reference kernel computes it.

struct RoiAlignAttrs {
  bool max_mode = false;
  bool half_pixel = true;
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  double spatial_scale = 1;
};

RoiAlignAttrs ReadRoiAlignAttrs(const KernelContext& ctx) {
  const Node& node = ctx.node();
  RoiAlignAttrs a;
  const std::string mode = node.GetString("mode", "avg");
  ET_CHECK(mode == "avg" || mode == "max", ErrorCode::kInvalidArgument, node.Describe(),
           ": attribute 'mode' must be \"avg\" or \"max\", got \"", mode, "\"");
  a.max_mode = mode == "max";
  const std::string transform =
      node.GetString("coordinate_transformation_mode", ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  ET_CHECK(transform == "half_pixel" || transform == "output_half_pixel", ErrorCode::kInvalidArgument, node.Describe(),
           ": attribute 'coordinate_transformation_mode' must be \"half_pixel\" or \"output_half_pixel\", got \"",
           transform, "\"");
  a.half_pixel = transform == "half_pixel";
  a.out_h = node.GetInt("output_height", 1);
  a.out_w = node.GetInt("output_width", 1);
  a.sampling_ratio = node.GetInt("sampling_ratio", 0);
  a.spatial_scale = node.GetFloat("spatial_scale", 1.0f);
  ET_CHECK(a.out_h > 0 && a.out_w > 0 && a.sampling_ratio >= 0, ErrorCode::kInvalidArgument, node.Describe(),
           ": output_height and output_width must be > 0 and sampling_ratio >= 0, got ", a.out_h, ", ", a.out_w,
           ", ", a.sampling_ratio);
  return a;
}

// The shapes of one RoiAlign call, checked once.
struct RoiAlignShape {
  int64_t num_rois = 0, batches = 0, channels = 0, height = 0, width = 0;
};

RoiAlignShape CheckRoiAlign(const KernelContext& ctx, const Tensor& x, const Tensor& rois, const Tensor& batch) {
  const Node& node = ctx.node();
  CheckRank(node, x, 0, "X", 4);
  CheckRank(node, rois, 1, "rois", 2);
  CheckRank(node, batch, 2, "batch_indices", 1);
  ET_CHECK(rois.dim(1) == 4 && batch.dim(0) == rois.dim(0), ErrorCode::kInvalidArgument, node.Describe(),
           ": input 1 (rois) must be (num_rois, 4) and input 2 (batch_indices) (num_rois), got ",
           ShapeToString(rois.shape()), " and ", ShapeToString(batch.shape()));
  ET_CHECK(rois.dtype() == x.dtype(), ErrorCode::kInvalidArgument, node.Describe(), ": input 1 (rois) is ",
           DataTypeName(rois.dtype()), " but X is ", DataTypeName(x.dtype()));
  for (int64_t r = 0; r < rois.dim(0); ++r) {
    const int64_t b = batch.Int64At(r);
    ET_CHECK(b >= 0 && b < x.dim(0), ErrorCode::kInvalidArgument, node.Describe(), ": input 2 (batch_indices) holds ",
             b, " for roi ", r, ", outside [0, ", x.dim(0), ")");
  }
  return {rois.dim(0), x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
}

// Calls fn(ph, pw, offsets[4], weights[4]) for every bilinear sample of roi `box` (x1, y1, x2, y2), bin
// (ph, pw); a sample outside the image has zero weights. Returns the samples per bin.
template <typename Fn>
double ForEachRoiSample(const RoiAlignAttrs& a, const RoiAlignShape& s, const double box[4], Fn fn) {
  const double offset = a.half_pixel ? 0.5 : 0.0;
  const double x1 = box[0] * a.spatial_scale - offset, y1 = box[1] * a.spatial_scale - offset;
  double roi_w = box[2] * a.spatial_scale - offset - x1, roi_h = box[3] * a.spatial_scale - offset - y1;
  if (!a.half_pixel) {
    roi_w = std::max(roi_w, 1.0);
    roi_h = std::max(roi_h, 1.0);
  }
  const double bin_h = roi_h / static_cast<double>(a.out_h), bin_w = roi_w / static_cast<double>(a.out_w);
  const int64_t grid_h = a.sampling_ratio > 0 ? a.sampling_ratio : static_cast<int64_t>(std::ceil(bin_h));
  const int64_t grid_w = a.sampling_ratio > 0 ? a.sampling_ratio : static_cast<int64_t>(std::ceil(bin_w));
  const int64_t height = s.height, width = s.width;
  for (int64_t ph = 0; ph < a.out_h; ++ph)
    for (int64_t pw = 0; pw < a.out_w; ++pw)
      for (int64_t iy = 0; iy < grid_h; ++iy)
        for (int64_t ix = 0; ix < grid_w; ++ix) {
          const double fy = (static_cast<double>(iy) + 0.5) / static_cast<double>(grid_h);
          const double fx = (static_cast<double>(ix) + 0.5) / static_cast<double>(grid_w);
          double yy = y1 + (static_cast<double>(ph) + fy) * bin_h, xx = x1 + (static_cast<double>(pw) + fx) * bin_w;
          int64_t offsets[4] = {0, 0, 0, 0};
          double weights[4] = {0, 0, 0, 0};
          if (!(yy < -1.0 || yy > static_cast<double>(height) || xx < -1.0 || xx > static_cast<double>(width))) {
            yy = std::max(yy, 0.0);
            xx = std::max(xx, 0.0);
            int64_t y_lo = static_cast<int64_t>(yy), x_lo = static_cast<int64_t>(xx), y_hi = y_lo + 1, x_hi = x_lo + 1;
            if (y_lo >= height - 1) y_hi = y_lo = height - 1, yy = static_cast<double>(y_lo);
            if (x_lo >= width - 1) x_hi = x_lo = width - 1, xx = static_cast<double>(x_lo);
            const double ly = yy - static_cast<double>(y_lo), lx = xx - static_cast<double>(x_lo);
            const double hy = 1 - ly, hx = 1 - lx;
            const int64_t o[4] = {y_lo * width + x_lo, y_lo * width + x_hi, y_hi * width + x_lo, y_hi * width + x_hi};
            const double w[4] = {hy * hx, hy * lx, ly * hx, ly * lx};
            std::copy(o, o + 4, offsets);
            std::copy(w, w + 4, weights);
          }
          fn(ph, pw, offsets, weights);
        }
  return static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
}

// Runs every (roi, channel): fn(plane offset of X[b, c], output offset of Y[r, c], the roi's box).
template <typename T, typename Fn>
void ForEachRoiChannel(const RoiAlignAttrs& a, const RoiAlignShape& s, const T* rp, const Tensor& batch, Fn fn) {
  for (int64_t r = 0; r < s.num_rois; ++r) {
    const double box[4] = {static_cast<double>(rp[r * 4]), static_cast<double>(rp[r * 4 + 1]),
                           static_cast<double>(rp[r * 4 + 2]), static_cast<double>(rp[r * 4 + 3])};
    const int64_t b = batch.Int64At(r);
    for (int64_t c = 0; c < s.channels; ++c)
      fn((b * s.channels + c) * s.height * s.width, (r * s.channels + c) * a.out_h * a.out_w, box);
  }
}

void RoiAlignKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& rois = ctx.Input(1);
  const Tensor& batch = ctx.Input(2);
  const RoiAlignAttrs a = ReadRoiAlignAttrs(ctx);
  const RoiAlignShape s = CheckRoiAlign(ctx, x, rois, batch);
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, {s.num_rois, s.channels, a.out_h, a.out_w}, x.dtype()).template data<T>();
    std::vector<double> acc(static_cast<size_t>(a.out_h * a.out_w));
    std::vector<char> seen(acc.size());
    ForEachRoiChannel(a, s, rois.data<T>(), batch, [&](int64_t in, int64_t out, const double box[4]) {
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(seen.begin(), seen.end(), 0);
      const T* plane = xp + in;
      // max mode: the largest weighted term of any sample (ONNX Runtime's definition).
      const double count = ForEachRoiSample(a, s, box, [&](int64_t ph, int64_t pw, const int64_t* o, const double* w) {
        const size_t bin = static_cast<size_t>(ph * a.out_w + pw);
        double sum = 0, largest = -INFINITY;
        for (int k = 0; k < 4; ++k) {
          const double term = w[k] * static_cast<double>(plane[o[k]]);
          sum += term;
          largest = std::max(largest, term);
        }
        acc[bin] = a.max_mode ? (seen[bin] ? std::max(acc[bin], largest) : largest) : acc[bin] + sum;
        seen[bin] = 1;
      });
      for (size_t bin = 0; bin < acc.size(); ++bin)
        yp[out + static_cast<int64_t>(bin)] = static_cast<T>(a.max_mode ? acc[bin] : acc[bin] / count);
    });
  });
}

// RoiAlignGrad (ai.edgetrain): (X, rois, batch_indices, dY) -> dX, the forward node's attributes.
void RoiAlignGradKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& rois = ctx.Input(1);
  const Tensor& batch = ctx.Input(2);
  const Tensor& dy = ctx.Input(3);
  const RoiAlignAttrs a = ReadRoiAlignAttrs(ctx);
  const RoiAlignShape s = CheckRoiAlign(ctx, x, rois, batch);
  const Shape y_shape = {s.num_rois, s.channels, a.out_h, a.out_w};
  ET_CHECK(dy.shape() == y_shape && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": input 3 (dY) must be ", DataTypeName(x.dtype()), " ", ShapeToString(y_shape), ", got ",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()));
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dx = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    std::fill(dx, dx + x.numel(), T(0));
    const size_t bins = static_cast<size_t>(a.out_h * a.out_w);
    std::vector<double> best(bins);
    std::vector<int64_t> best_at(bins);
    std::vector<double> best_w(bins);
    ForEachRoiChannel(a, s, rois.data<T>(), batch, [&](int64_t in, int64_t out, const double box[4]) {
      const T* plane = xp + in;
      T* d_plane = dx + in;
      if (!a.max_mode) {
        // The weights of a bin sum its samples, each divided by the samples per bin.
        std::vector<std::pair<int64_t, double>> contributions;
        auto add = [&](int64_t ph, int64_t pw, const int64_t* o, const double* w) {
          const double upstream = static_cast<double>(dyp[out + ph * a.out_w + pw]);
          for (int k = 0; k < 4; ++k) contributions.emplace_back(o[k], upstream * w[k]);
        };
        const double count = ForEachRoiSample(a, s, box, add);
        for (const auto& [at, value] : contributions) d_plane[at] += static_cast<T>(value / count);
        return;
      }
      std::fill(best.begin(), best.end(), -INFINITY);
      std::fill(best_at.begin(), best_at.end(), -1);
      ForEachRoiSample(a, s, box, [&](int64_t ph, int64_t pw, const int64_t* o, const double* w) {
        const size_t bin = static_cast<size_t>(ph * a.out_w + pw);
        for (int k = 0; k < 4; ++k) {
          const double term = w[k] * static_cast<double>(plane[o[k]]);
          if (term > best[bin]) best[bin] = term, best_at[bin] = o[k], best_w[bin] = w[k];
        }
      });
      for (size_t bin = 0; bin < bins; ++bin)
        if (best_at[bin] >= 0)
          d_plane[best_at[bin]] +=
              static_cast<T>(best_w[bin] * static_cast<double>(dyp[out + static_cast<int64_t>(bin)]));
    });
  });
}

// Gradient for X only: rois are boxes from a detector (not trained through), batch_indices integers.
void RoiAlignGradient(GradientContext& g) {
  if (g.dY(0).empty() || !g.NeedsGrad(0)) return;
  AttributeMap attrs = g.node().attributes;  // the forward opset's default, spelled out for the backward node
  if (!attrs.count("coordinate_transformation_mode"))
    attrs["coordinate_transformation_mode"] = Attribute::String(g.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  g.SetGrad(0, g.Op("RoiAlignGrad", {g.X(0), g.X(1), g.X(2), g.dY(0)}, std::move(attrs), kEdgetrainDomain));
}

// =====================================================================================================
// NonMaxSuppression: per batch and class, greedy selection by descending score of boxes whose IoU
// with every kept box is at most iou_threshold; selected_indices rows are [batch, class, box].

double IntersectionOverUnion(const double* a, const double* b, bool center_format) {
  auto corners = [&](const double* box, double out[4]) {  // y1, x1, y2, x2 with y1 <= y2, x1 <= x2
    if (center_format) {
      out[0] = box[1] - box[3] / 2, out[1] = box[0] - box[2] / 2;
      out[2] = box[1] + box[3] / 2, out[3] = box[0] + box[2] / 2;
    } else {
      out[0] = std::min(box[0], box[2]), out[1] = std::min(box[1], box[3]);
      out[2] = std::max(box[0], box[2]), out[3] = std::max(box[1], box[3]);
    }
  };
  double p[4], q[4];
  corners(a, p);
  corners(b, q);
  const double area_p = (p[2] - p[0]) * (p[3] - p[1]), area_q = (q[2] - q[0]) * (q[3] - q[1]);
  if (area_p <= 0 || area_q <= 0) return 0;
  const double ih = std::min(p[2], q[2]) - std::max(p[0], q[0]), iw = std::min(p[3], q[3]) - std::max(p[1], q[1]);
  if (ih <= 0 || iw <= 0) return 0;
  const double inter = ih * iw;
  return inter / (area_p + area_q - inter);
}

void NonMaxSuppressionKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& boxes = ctx.Input(0);
  const Tensor& scores = ctx.Input(1);
  CheckRank(node, boxes, 0, "boxes", 3);
  CheckRank(node, scores, 1, "scores", 3);
  ET_CHECK(boxes.dim(2) == 4 && scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
           ErrorCode::kInvalidArgument, node.Describe(), ": input 0 (boxes) must be (batches, boxes, 4) and input 1 ",
           "(scores) (batches, classes, boxes), got ", ShapeToString(boxes.shape()), " and ",
           ShapeToString(scores.shape()));
  auto scalar = [&](size_t i, const char* what) -> std::optional<double> {
    if (!ctx.HasInput(i)) return std::nullopt;
    const Tensor& t = ctx.Input(i);
    ET_CHECK(t.numel() == 1, ErrorCode::kInvalidArgument, node.Describe(), ": input ", i, " (", what,
             ") must hold one value, got shape ", ShapeToString(t.shape()));
    return t.DoubleAt(0);
  };
  const int64_t max_per_class = static_cast<int64_t>(scalar(2, "max_output_boxes_per_class").value_or(0));
  const double iou_threshold = scalar(3, "iou_threshold").value_or(0);
  const std::optional<double> score_threshold = scalar(4, "score_threshold");
  const int64_t center = node.GetInt("center_point_box", 0);
  ET_CHECK(center == 0 || center == 1, ErrorCode::kInvalidArgument, node.Describe(),
           ": attribute 'center_point_box' must be 0 or 1, got ", center);
  const std::vector<double> box = boxes.ToDoubleVector(), score = scores.ToDoubleVector();
  const int64_t batches = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
  std::vector<int64_t> selected;
  std::vector<int64_t> order, kept;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t c = 0; c < classes; ++c) {
      if (max_per_class <= 0) continue;
      const double* s = score.data() + (b * classes + c) * count;
      order.clear();
      for (int64_t i = 0; i < count; ++i)
        if (!score_threshold || s[i] > *score_threshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return s[p] > s[q]; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        const double* candidate = box.data() + (b * count + i) * 4;
        bool suppressed = false;
        for (int64_t k : kept)
          suppressed |= IntersectionOverUnion(candidate, box.data() + (b * count + k) * 4, center == 1) > iou_threshold;
        if (suppressed) continue;
        kept.push_back(i);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  Tensor& out = ctx.Output(0, {static_cast<int64_t>(selected.size() / 3), 3}, DataType::kInt64);
  std::copy(selected.begin(), selected.end(), out.data<int64_t>());
}

}  // namespace

void RegisterVisionOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "GridSample", GridSampleKernel, 16);
  ET_IF_BUILT("", "GridSample") r.SetGradient("GridSample", GridSampleGradient);
  // No definition in standard ops: the scatter of dX and the per-tap weight derivatives have none.
  ET_IF_BUILT("ai.edgetrain", "GridSampleGrad") RegisterFused(r, "GridSampleGrad", GridSampleGradKernel, nullptr);
  ET_REGISTER_ONNX(r, "RoiAlign", RoiAlignKernel, 10);
  ET_IF_BUILT("", "RoiAlign") r.SetGradient("RoiAlign", RoiAlignGradient);
  ET_IF_BUILT("ai.edgetrain", "RoiAlignGrad") RegisterFused(r, "RoiAlignGrad", RoiAlignGradKernel, nullptr);
  ET_REGISTER_ONNX(r, "NonMaxSuppression", NonMaxSuppressionKernel, 10);
}

}  // namespace edgetrain
