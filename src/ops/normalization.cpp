// Normalization family: BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization,
// LpNormalization, MeanVarianceNormalization, LRN; gradient rules for the first four and the fused
// ai.edgetrain BatchNormalizationGrad and LayerNormalizationGrad.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/kernel_backend.hpp"
#include "core/cpu_features.hpp"
#include "ops/activation_util.hpp"
#include "ops/attributes.hpp"
#include "ops/batchnorm_fast.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include "ops/dnnl_util.hpp"
#endif

namespace edgetrain {
namespace {

// Normalization over [N, C, ...]: `what` (X) needs the channel axis.
void CheckRankAtLeast2(const Node& node, const Tensor& x, const char* what) {
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, node.Describe(), ": ", what, " must have rank >= 2, got shape ",
           ShapeToString(x.shape()));
}

// Product of dims[begin, end).
int64_t DimProduct(const Shape& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= dims[i];
  return product;
}

// Grain for ParallelFor over `n` blocks of `block` elements each: aim for >= 16k elements a task.
int64_t GrainFor(int64_t block) { return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(block, 1)); }

// Writes `values` (double) into a float tensor of dtype float32/float64.
void StoreDoubles(Tensor& out, std::span<const double> values, const std::string& what) {
  VisitFloat(out.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = static_cast<T>(values[i]);
  });
}

// A per-channel parameter (scale, bias, mean, var) of `channels` values, read as doubles into `out`
// (returned).
std::span<double> ChannelParameter(const KernelContext& ctx, size_t index, const char* name, int64_t channels,
                                   std::span<double> out) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == channels, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input '", name,
           "' has shape ", ShapeToString(t.shape()), " but ", channels, " values are expected");
  ET_CHECK(IsFloatType(t.dtype()), ErrorCode::kNotImplemented, ctx.node().Describe(), ": input '", name,
           "' has unsupported element type ", DataTypeName(t.dtype()));
  VisitFloat(t.dtype(), ctx.node().Describe(), [&](auto tag) {
    const auto* values = t.data<typename decltype(tag)::type>();
    for (int64_t c = 0; c < channels; ++c) out[c] = static_cast<double>(values[c]);
  });
  return out;
}

// ChannelParameter into a vector of its own.
std::vector<double> ChannelParameter(const KernelContext& ctx, size_t index, const char* name, int64_t channels) {
  std::vector<double> values(static_cast<size_t>(channels));
  ChannelParameter(ctx, index, name, channels, values);
  return values;
}

// Y[n, c, s] = X[n, c, s] * multiplier[c] + offset[c] over blocks of `spatial` elements.
template <typename T>
void ApplyChannelAffine(KernelContext& ctx, const T* x, T* y, int64_t batch, int64_t channels, int64_t spatial,
                        std::span<const double> multiplier, std::span<const double> offset) {
  ctx.threads().ParallelFor(batch * channels, GrainFor(spatial), [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t c = block % channels;
      const T a = static_cast<T>(multiplier[c]);
      const T b = static_cast<T>(offset[c]);
      const T* src = x + block * spatial;
      T* dst = y + block * spatial;
      for (int64_t i = 0; i < spatial; ++i) dst[i] = src[i] * a + b;
    }
  });
}

// The sums below add up runs of at most kSimdRun elements in T across SIMD lanes and the runs'
// totals in double, so their rounding error stays that of a short sum.
constexpr int64_t kSimdRun = 4096;

// Sum of x[0, count).
template <typename T>
double Sum(const T* x, int64_t count) {
  double total = 0;
  for (int64_t run = 0; run < count; run += kSimdRun) {
    const int64_t end = std::min(count, run + kSimdRun);
    T partial = 0;
#pragma omp simd simdlen(16) reduction(+ : partial)
    for (int64_t i = run; i < end; ++i) partial += x[i];
    total += partial;
  }
  return total;
}

// Sum of (x[i] - center)^2 over [0, count).
template <typename T>
double SquaresAbout(const T* x, int64_t count, T center) {
  double total = 0;
  for (int64_t run = 0; run < count; run += kSimdRun) {
    const int64_t end = std::min(count, run + kSimdRun);
    T partial = 0;
#pragma omp simd simdlen(16) reduction(+ : partial)
    for (int64_t i = run; i < end; ++i) partial += (x[i] - center) * (x[i] - center);
    total += partial;
  }
  return total;
}

// Sums over a run of X and a gradient g about a center (the mean): (x - center)^2, g and g * (x - center).
struct CenteredSums {
  double squares = 0, g = 0, g_centered = 0;

  // `gradient(i)` is g at element i.
  template <typename T, typename Gradient>
  void Add(const T* x, Gradient&& gradient, int64_t count, T center) {
    for (int64_t run = 0; run < count; run += kSimdRun) {
      const int64_t end = std::min(count, run + kSimdRun);
      T partial_squares = 0, partial_g = 0, partial_g_centered = 0;
#pragma omp simd simdlen(16) reduction(+ : partial_squares, partial_g, partial_g_centered)
      for (int64_t i = run; i < end; ++i) {
        const T centered = x[i] - center;
        const T g_i = gradient(i);
        partial_squares += centered * centered;
        partial_g += g_i;
        partial_g_centered += g_i * centered;
      }
      squares += partial_squares;
      g += partial_g;
      g_centered += partial_g_centered;
    }
  }
};

Attribute Keepdims(bool keep) { return Attribute::Int(keep ? 1 : 0); }

// `value` cast to the element type of `like` when static types say they differ.
std::string AsTypeOf(GradientContext& g, const std::string& value, const std::string& like) {
  const ValueInfo* a = g.Info(value);
  const ValueInfo* b = g.Info(like);
  const bool differ = a && b && a->dtype != DataType::kUndefined && b->dtype != DataType::kUndefined &&
                      a->dtype != b->dtype;
  return differ ? g.Op("CastLike", {value, like}) : value;
}

// ---- BatchNormalization ----

// Calls fn(offset) with the start of each of channel c's `batch` runs of `spatial` elements in [N, C, spatial].
template <typename Fn>
void ForEachChannelRun(int64_t c, int64_t batch, int64_t channels, int64_t spatial, Fn&& fn) {
  for (int64_t n = 0; n < batch; ++n) fn((n * channels + c) * spatial);
}

struct BatchNormAttributes {
  float epsilon = 1e-5f, momentum = 0.9f;
  bool training = false;
  bool spatial = true;  // opsets 7-8: spatial=0 keeps statistics for every C x D1 x ... x Dn position

  static BatchNormAttributes Parse(const Node& node, int64_t opset) {
    const AttributeReader read(node);
    BatchNormAttributes a;
    a.epsilon = read.Float("epsilon", 1e-5f);
    read.Check(std::isfinite(a.epsilon) && a.epsilon >= 0, "epsilon", "must be finite and >= 0");
    a.momentum = read.Float("momentum", 0.9f);
    read.Check(std::isfinite(a.momentum), "momentum", "must be finite");
    // Before opset 14 training mode was implied by the node listing its statistics outputs.
    auto declares = [&](size_t k) { return k < node.outputs.size() && !node.outputs[k].empty(); };
    // The fused ai.edgetrain forms (opset 1) take opset 15's attributes.
    const bool current = opset >= 14 || node.domain == kEdgetrainDomain;
    a.training = current ? read.Flag("training_mode", false) : declares(1) || declares(2) || declares(3) || declares(4);
    a.spatial = current || opset >= 9 || read.Flag("spatial", true);
    return a;
  }

  // Y as X; the statistics outputs one value per channel (scale's shape).
  std::vector<ValueInfo> OutputTypes(const std::vector<const ValueInfo*>& inputs) const {
    const std::vector<Dim>* x = inputs.empty() ? nullptr : KnownShape(inputs[0]);
    if (!x) return {ValueInfo{}};
    std::vector<ValueInfo> out = {TensorInfo(inputs[0]->dtype, *x)};
    const ValueInfo* mean = inputs.size() > 3 ? inputs[3] : nullptr;
    const ValueInfo* source = KnownShape(mean) ? mean : inputs.size() > 1 && KnownShape(inputs[1]) ? inputs[1] : nullptr;
    const ValueInfo stat = source ? TensorInfo(source->dtype, source->shape) : ValueInfo{};
    for (size_t i = 1; i < 5; ++i) out.push_back(stat);
    const ValueInfo* scale = inputs.size() > 1 && KnownShape(inputs[1]) ? inputs[1] : nullptr;
    out.push_back(scale && scale->shape.size() == 1 ? TensorInfo(inputs[0]->dtype, {Dim{2, {}}, scale->shape[0]})
                                                    : ValueInfo{});  // output 5, a session's (ChannelAffine)
    return out;
  }
};

}  // namespace

namespace batchnorm {
namespace {

#define ET_BN_INLINE inline __attribute__((always_inline))

// Elements summed in float lanes before their total goes into a double: the rounding error stays that of a
// short sum, and a run of X (and dY) stays in L1 between the sweeps over it.
constexpr int64_t kRun = 1024;

// Mean of x[0, count) in float (the shift the channel's sums are taken about: close to its mean).
ET_BN_INLINE float RunMean(const float* x, int64_t count) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < count; ++i) sum += x[i];
  return sum / static_cast<float>(count);
}

// Images whose planes one run of float sums spans, so that maps of 7x7 to 28x28 do not pay a sum across the lanes
// per plane: 1 for planes of kRun elements or more, at most 8.
inline int64_t PlanesPerRun(int64_t spatial) { return std::clamp<int64_t>(kRun / std::max<int64_t>(spatial, 1), 1, 8); }

// Adds sum(x - shift) and sum((x - shift)^2) over x[p * stride + i] for p < kPlanes, i < count (kPlanes > 1 only
// where count * kPlanes <= kRun).
template <int kPlanes>
ET_BN_INLINE void AddMoments(const float* x, int64_t stride, int64_t count, float shift, double& shifted,
                             double& squares) {
  for (int64_t run = 0; run < count; run += kRun) {
    const int64_t end = std::min(count, run + kRun);
    float a = 0, b = 0;
#pragma omp simd simdlen(16) reduction(+ : a, b)
    for (int64_t i = run; i < end; ++i) {
#pragma GCC unroll 8
      for (int k = 0; k < kPlanes; ++k) {
        const float d = x[k * stride + i] - shift;
        a += d;
        b += d * d;
      }
    }
    shifted += a;
    squares += b;
  }
}

// AddMoments over `planes` (1 to 8) planes.
ET_BN_INLINE void AddMomentsOfPlanes(int64_t planes, const float* x, int64_t stride, int64_t count, float shift,
                                     double& shifted, double& squares) {
  switch (planes) {
    case 1: return AddMoments<1>(x, stride, count, shift, shifted, squares);
    case 2: return AddMoments<2>(x, stride, count, shift, shifted, squares);
    case 3: return AddMoments<3>(x, stride, count, shift, shifted, squares);
    case 4: return AddMoments<4>(x, stride, count, shift, shifted, squares);
    case 5: return AddMoments<5>(x, stride, count, shift, shifted, squares);
    case 6: return AddMoments<6>(x, stride, count, shift, shifted, squares);
    case 7: return AddMoments<7>(x, stride, count, shift, shifted, squares);
    default: return AddMoments<8>(x, stride, count, shift, shifted, squares);
  }
}

// dY through the activation that followed the normalization: dy where the activation passes v = x * a + b
// (computed as the forward computes it), else 0; for SiLU, dy times its slope s * (1 + v * (1 - s)), s = sigmoid(v).
// `gate` holds a, b and Clip's bounds.
struct Gate {
  float a = 0, b = 0, low = 0, high = 0;
};
template <Activation::Kind kKind>
ET_BN_INLINE float Gated(float dy, float x, const Gate& gate) {
  if constexpr (kKind == Activation::Kind::kNone) {
    return dy;
  } else {
    const float v = x * gate.a + gate.b;
    if constexpr (kKind == Activation::Kind::kRelu) return v > 0.0f ? dy : 0.0f;
    if constexpr (kKind == Activation::Kind::kSilu) {
      const float s = vector_math::SigmoidOne(v);
      return dy * (s * (1.0f + v * (1.0f - s)));
    }
    return v > gate.low && v < gate.high ? dy : 0.0f;
  }
}

// SiLU's gated dY costs an exp: the moments pass stores it (in dX) for the pass that writes dX.
template <Activation::Kind kKind>
constexpr bool kStoresGated = kKind == Activation::Kind::kSilu;

// The above and sum(dy), sum(dy * (x - shift)), dy gated (and stored in `gated_out` where kStoresGated), over the
// same kPlanes planes.
template <Activation::Kind kKind, int kPlanes>
ET_BN_INLINE void AddMomentsWithGradient(const float* x, const float* dy, float* gated_out, int64_t stride,
                                         int64_t count, float shift, const Gate& gate, double* sums) {
  for (int64_t run = 0; run < count; run += kRun) {
    const int64_t end = std::min(count, run + kRun);
    float a = 0, b = 0, p = 0, q = 0;
#pragma omp simd simdlen(16) reduction(+ : a, b, p, q)
    for (int64_t i = run; i < end; ++i) {
#pragma GCC unroll 8
      for (int k = 0; k < kPlanes; ++k) {
        const int64_t at = k * stride + i;
        const float d = x[at] - shift;
        const float gated = Gated<kKind>(dy[at], x[at], gate);
        if constexpr (kStoresGated<kKind>) gated_out[at] = gated;
        a += d;
        b += d * d;
        p += gated;
        q += gated * d;
      }
    }
    sums[0] += a;
    sums[1] += b;
    sums[2] += p;
    sums[3] += q;
  }
}

// AddMomentsWithGradient over `planes` (1 to 8) planes; sums: shifted, squares, dy, dy * (x - shift).
template <Activation::Kind kKind>
ET_BN_INLINE void AddMomentsWithGradientOfPlanes(int64_t planes, const float* x, const float* dy, float* gated_out,
                                                 int64_t stride, int64_t count, float shift, const Gate& gate,
                                                 double* sums) {
  switch (planes) {
    case 1: return AddMomentsWithGradient<kKind, 1>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 2: return AddMomentsWithGradient<kKind, 2>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 3: return AddMomentsWithGradient<kKind, 3>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 4: return AddMomentsWithGradient<kKind, 4>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 5: return AddMomentsWithGradient<kKind, 5>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 6: return AddMomentsWithGradient<kKind, 6>(x, dy, gated_out, stride, count, shift, gate, sums);
    case 7: return AddMomentsWithGradient<kKind, 7>(x, dy, gated_out, stride, count, shift, gate, sums);
    default: return AddMomentsWithGradient<kKind, 8>(x, dy, gated_out, stride, count, shift, gate, sums);
  }
}

struct Geometry {
  int64_t batch, channels, spatial;
  int64_t Stride() const { return channels * spatial; }  // from one image's channel plane to the next's
  double Count() const { return static_cast<double>(batch * spatial); }
};

// y = activation(x * a + b) over channel c's planes.
ET_BN_INLINE void NormalizeChannel(const Geometry& g, int64_t c, const float* x, float* y, float a, float b,
                                   Activation activation) {
  for (int64_t n = 0; n < g.batch; ++n)
    AffineRow(x + c * g.spatial + n * g.Stride(), y + c * g.spatial + n * g.Stride(), g.spatial, a, b, activation);
}

ET_BN_INLINE void ForwardChannels(const Geometry& g, const float* x, float* y, const double* scale, const double* bias,
                                  double epsilon, double* mean, double* var, Activation activation, float* affine,
                                  int64_t begin, int64_t end) {
  const int64_t stride = g.Stride();
  const double count = g.Count();
  for (int64_t c = begin; c < end; ++c) {
    const float* xc = x + c * g.spatial;
    const float shift = RunMean(xc, std::min(g.spatial, kRun));
    double shifted = 0, squares = 0;
    for (int64_t n = 0, planes = PlanesPerRun(g.spatial); n < g.batch; n += planes)
      AddMomentsOfPlanes(std::min(planes, g.batch - n), xc + n * stride, stride, g.spatial, shift, shifted, squares);
    const double offset = shifted / count;
    mean[c] = shift + offset;
    var[c] = std::max(0.0, squares / count - offset * offset);
    const double multiplier = scale[c] / std::sqrt(var[c] + epsilon);
    const float a = static_cast<float>(multiplier), b = static_cast<float>(bias[c] - mean[c] * multiplier);
    if (affine) {
      affine[c] = a;
      affine[g.channels + c] = b;
    }
    if (y) NormalizeChannel(g, c, x, y, a, b, activation);
  }
}

ET_BN_INLINE void ApplyChannels(const Geometry& g, const float* x, float* y, const float* affine,
                                Activation activation, int64_t begin, int64_t end) {
  for (int64_t c = begin; c < end; ++c) NormalizeChannel(g, c, x, y, affine[c], affine[g.channels + c], activation);
}

// dX = scale * inv_std * (dY - mean(dY) - (X - mean) * mean(dY * xhat) * inv_std), dY gated by the activation
// (none, or `gated`'s with the map in `affine`).
template <Activation::Kind kKind>
ET_BN_INLINE void BackwardChannels(const Geometry& g, const float* dy, const float* x, float* dx, const double* scale,
                                   const double* saved_mean, const double* saved_inv_std, double epsilon,
                                   const float* affine, Activation gated, double* dscale, double* dbias,
                                   int64_t begin, int64_t end) {
  const int64_t stride = g.Stride();
  const double count = g.Count();
  for (int64_t c = begin; c < end; ++c) {
    const int64_t first = c * g.spatial;
    const float shift =
        saved_mean ? static_cast<float>(saved_mean[c]) : RunMean(x + first, std::min(g.spatial, kRun));
    Gate gate;
    if constexpr (kKind != Activation::Kind::kNone) gate = {affine[c], affine[g.channels + c], gated.low, gated.high};
    double sums[4] = {};  // shifted, squares, dy, dy * (x - shift)
    for (int64_t n = 0, planes = PlanesPerRun(g.spatial); n < g.batch; n += planes) {
      const int64_t at = first + n * stride;
      AddMomentsWithGradientOfPlanes<kKind>(std::min(planes, g.batch - n), x + at, dy + at, dx + at, stride,
                                            g.spatial, shift, gate, sums);
    }
    const double shifted = sums[0], squares = sums[1], sum_dy = sums[2], dy_shifted = sums[3];
    const double offset = shifted / count;
    const double mean = saved_mean ? saved_mean[c] : shift + offset;
    const double inv_std = saved_inv_std ? saved_inv_std[c]
                                         : 1.0 / std::sqrt(std::max(0.0, squares / count - offset * offset) + epsilon);
    const double dy_centered = dy_shifted - (mean - shift) * sum_dy;  // sum(dy * (x - mean))
    dbias[c] = sum_dy;
    dscale[c] = dy_centered * inv_std;
    const double multiplier = scale[c] * inv_std;
    const float a = static_cast<float>(multiplier);
    const float p = static_cast<float>(-multiplier * dy_centered * inv_std * inv_std / count);
    const float k = static_cast<float>(-multiplier * sum_dy / count);
    const float mean_f = static_cast<float>(mean);
    for (int64_t n = 0; n < g.batch; ++n) {
      const int64_t at = first + n * stride;
      const float* dy_run = dy + at;
      const float* x_run = x + at;
      float* dx_run = dx + at;
#pragma omp simd
      for (int64_t i = 0; i < g.spatial; ++i) {
        float gated;
        if constexpr (kStoresGated<kKind>) {
          gated = dx_run[i];
        } else {
          gated = Gated<kKind>(dy_run[i], x_run[i], gate);
        }
        dx_run[i] = gated * a + ((x_run[i] - mean_f) * p + k);
      }
    }
  }
}

void ForwardPortable(const Geometry& g, const float* x, float* y, const double* scale, const double* bias,
                     double epsilon, double* mean, double* var, Activation activation, float* affine, int64_t begin,
                     int64_t end) {
  ForwardChannels(g, x, y, scale, bias, epsilon, mean, var, activation, affine, begin, end);
}

void ApplyPortable(const Geometry& g, const float* x, float* y, const float* affine, Activation activation,
                   int64_t begin, int64_t end) {
  ApplyChannels(g, x, y, affine, activation, begin, end);
}

ET_BN_INLINE void BackwardGatedChannels(const Geometry& g, const float* dy, const float* x, float* dx,
                                        const double* scale, const double* saved_mean, const double* saved_inv_std,
                                        double epsilon, const float* affine, Activation gated, double* dscale,
                                        double* dbias, int64_t begin, int64_t end) {
  switch (gated.kind) {
    case Activation::Kind::kNone:
      return BackwardChannels<Activation::Kind::kNone>(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon,
                                                       affine, gated, dscale, dbias, begin, end);
    case Activation::Kind::kRelu:
      return BackwardChannels<Activation::Kind::kRelu>(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon,
                                                       affine, gated, dscale, dbias, begin, end);
    case Activation::Kind::kClip:
      return BackwardChannels<Activation::Kind::kClip>(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon,
                                                       affine, gated, dscale, dbias, begin, end);
    case Activation::Kind::kSilu:
      return BackwardChannels<Activation::Kind::kSilu>(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon,
                                                       affine, gated, dscale, dbias, begin, end);
  }
}

void BackwardPortable(const Geometry& g, const float* dy, const float* x, float* dx, const double* scale,
                      const double* saved_mean, const double* saved_inv_std, double epsilon, const float* affine,
                      Activation gated, double* dscale, double* dbias, int64_t begin, int64_t end) {
  BackwardGatedChannels(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon, affine, gated, dscale, dbias, begin,
                        end);
}

#if defined(__GNUC__) && defined(__x86_64__)
#define EDGETRAIN_BATCHNORM_AVX2 1
// The same source for each x86-64 ISA: AVX2/FMA, and AVX-512 (twice the lanes for SiLU's exp and the sums).
#define ET_BN_ISA_KERNELS(Suffix, Target)                                                                          \
  __attribute__((target(Target))) void Forward##Suffix(const Geometry& g, const float* x, float* y,                 \
                                                       const double* scale, const double* bias, double epsilon,     \
                                                       double* mean, double* var, Activation activation,            \
                                                       float* affine, int64_t begin, int64_t end) {                 \
    ForwardChannels(g, x, y, scale, bias, epsilon, mean, var, activation, affine, begin, end);                     \
  }                                                                                                                 \
  __attribute__((target(Target))) void Apply##Suffix(const Geometry& g, const float* x, float* y,                   \
                                                     const float* affine, Activation activation, int64_t begin,     \
                                                     int64_t end) {                                                 \
    ApplyChannels(g, x, y, affine, activation, begin, end);                                                        \
  }                                                                                                                 \
  __attribute__((target(Target))) void Backward##Suffix(                                                            \
      const Geometry& g, const float* dy, const float* x, float* dx, const double* scale, const double* saved_mean, \
      const double* saved_inv_std, double epsilon, const float* affine, Activation gated, double* dscale,           \
      double* dbias, int64_t begin, int64_t end) {                                                                  \
    BackwardGatedChannels(g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon, affine, gated, dscale, dbias,    \
                          begin, end);                                                                              \
  }                                                                                                                 \
  __attribute__((target(Target))) void MapRow##Suffix(const float* x, float* y, int64_t count, float a, float b,    \
                                                      Activation activation) {                                      \
    AffineRow(x, y, count, a, b, activation);                                                                      \
  }
ET_BN_ISA_KERNELS(Avx2, "avx2,fma")
ET_BN_ISA_KERNELS(Avx512, "avx512f,avx2,fma,prefer-vector-width=512")
#undef ET_BN_ISA_KERNELS
#endif

void MapRowPortable(const float* x, float* y, int64_t count, float a, float b, Activation activation) {
  AffineRow(x, y, count, a, b, activation);
}

#undef ET_BN_INLINE

}  // namespace

Isa BestIsa() {
  static const Isa best = CpuHasAvx512() ? Isa::kAvx512 : CpuHasAvx2Fma() ? Isa::kAvx2 : Isa::kPortable;
  return best;
}

// Runs the AVX-512 or AVX2 clone for `isa` where the CPU has it, else the portable one.
#if defined(EDGETRAIN_BATCHNORM_AVX2)
#define ET_BN_DISPATCH(Name, ...)                                                                 \
  do {                                                                                           \
    if (isa == Isa::kAvx512 && CpuHasAvx512()) return Name##Avx512(__VA_ARGS__);                 \
    if (isa != Isa::kPortable && CpuHasAvx2Fma()) return Name##Avx2(__VA_ARGS__);                \
    return Name##Portable(__VA_ARGS__);                                                          \
  } while (false)
#else
#define ET_BN_DISPATCH(Name, ...)   \
  do {                             \
    (void)isa;                     \
    return Name##Portable(__VA_ARGS__); \
  } while (false)
#endif

void MapRow(Isa isa, const float* x, float* y, int64_t count, float a, float b, Activation activation) {
  ET_BN_DISPATCH(MapRow, x, y, count, a, b, activation);
}

void TrainingForward(ThreadPool& threads, Isa isa, const float* x, float* y, int64_t batch, int64_t channels,
                     int64_t spatial, const double* scale, const double* bias, double epsilon, double* mean,
                     double* var, Activation activation, float* affine) {
  const Geometry g{batch, channels, spatial};
  threads.ParallelFor(channels, GrainFor(batch * spatial), [&](int64_t begin, int64_t end) {
    ET_BN_DISPATCH(Forward, g, x, y, scale, bias, epsilon, mean, var, activation, affine, begin, end);
  });
}

void ApplyAffine(ThreadPool& threads, Isa isa, const float* x, float* y, int64_t batch, int64_t channels,
                 int64_t spatial, const float* affine, Activation activation) {
  const Geometry g{batch, channels, spatial};
  threads.ParallelFor(channels, GrainFor(batch * spatial), [&](int64_t begin, int64_t end) {
    ET_BN_DISPATCH(Apply, g, x, y, affine, activation, begin, end);
  });
}

void TrainingBackward(ThreadPool& threads, Isa isa, const float* dy, const float* x, float* dx, int64_t batch,
                      int64_t channels, int64_t spatial, const double* scale, const double* saved_mean,
                      const double* saved_inv_std, double epsilon, double* dscale, double* dbias,
                      const float* affine, Activation gated) {
  const Geometry g{batch, channels, spatial};
  threads.ParallelFor(channels, GrainFor(batch * spatial), [&](int64_t begin, int64_t end) {
    ET_BN_DISPATCH(Backward, g, dy, x, dx, scale, saved_mean, saved_inv_std, epsilon, affine, gated, dscale, dbias,
                   begin, end);
  });
}

#undef ET_BN_DISPATCH

}  // namespace batchnorm

namespace {

// The fast float32 kernels of batchnorm_fast.hpp run unless EDGETRAIN_KERNELS=reference picks the reference
// kernels below in a build with oneDNN (builds without it, the device builds, run the fast ones).
bool UseFastBatchNorm(const Tensor& x, int64_t count) {
  return x.dtype() == DataType::kFloat32 && count > 0 && (UseDnnl() || !DnnlAvailable());
}

// The activation that ai.edgetrain BatchNormalizationRelu and BatchNormalizationClip apply to Y (none for
// BatchNormalization); Clip's bounds are the node's optional inputs `min_index` (5; 2 for ChannelAffine) and the
// one after it, single values of X's type.
struct OutputActivation {
  batchnorm::Activation::Kind kind = batchnorm::Activation::Kind::kNone;
  double low = -std::numeric_limits<double>::infinity(), high = std::numeric_limits<double>::infinity();

  static OutputActivation Read(KernelContext& ctx, batchnorm::Activation::Kind kind, const Tensor& x,
                               size_t min_index = 5) {
    OutputActivation a;
    a.kind = kind;
    if (kind != batchnorm::Activation::Kind::kClip) return a;
    auto bound = [&](size_t index, const char* name, double& value) {
      if (const Tensor* t = ClipBound(ctx, index, name, x)) value = t->ToDoubleVector()[0];
    };
    bound(min_index, "min", a.low);
    bound(min_index + 1, "max", a.high);
    return a;
  }

  batchnorm::Activation ForFloat() const {
    return {kind, static_cast<float>(low), static_cast<float>(high)};
  }

  // y = activation(y) over n values, as the Relu, Clip and (reference) Silu kernels compute it.
  template <typename T>
  void Apply(ThreadPool& threads, T* y, int64_t n) const {
    if (kind == batchnorm::Activation::Kind::kNone) return;
    const T lo = static_cast<T>(low), hi = static_cast<T>(high);
    threads.ParallelFor(n, 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = Of(y[i], lo, hi);
    });
  }

  template <typename T>
  T Of(T v, T lo, T hi) const {
    switch (kind) {
      case batchnorm::Activation::Kind::kRelu: return v > T(0) ? v : T(0);
      case batchnorm::Activation::Kind::kClip: return std::min(std::max(v, lo), hi);
      case batchnorm::Activation::Kind::kSilu: return v * Sigmoid(v);
      case batchnorm::Activation::Kind::kNone: break;
    }
    return v;
  }

  // dY at the activation's input v from dY at its output.
  template <typename T>
  T Gradient(T dy, T v, T lo, T hi) const {
    switch (kind) {
      case batchnorm::Activation::Kind::kRelu: return v > T(0) ? dy : T(0);
      case batchnorm::Activation::Kind::kClip: return v > lo && v < hi ? dy : T(0);
      case batchnorm::Activation::Kind::kSilu: {
        const T s = Sigmoid(v);
        return dy * (s * (T(1) + v * (T(1) - s)));
      }
      case batchnorm::Activation::Kind::kNone: break;
    }
    return dy;
  }
};

// The per-channel map [2, C] (a, then b) of ChannelAffine and BatchNormalizationActivationGrad: X's type, C X's
// dim 1.
void CheckAffineMap(const Node& node, const Tensor& affine, const Tensor& x) {
  const bool fits = affine.dtype() == x.dtype() && affine.shape() == Shape{2, x.dim(1)};
  ET_CHECK(fits, ErrorCode::kInvalidArgument, node.Describe(), ": input affine must be ", DataTypeName(x.dtype()),
           " [2, ", x.dim(1), "], got ", DataTypeName(affine.dtype()), " ", ShapeToString(affine.shape()));
}

// Their attribute `activation`: "" (none, the default), "Relu", "Clip" or "Silu".
batchnorm::Activation::Kind ActivationAttribute(const Node& node) {
  using Kind = batchnorm::Activation::Kind;
  const std::string name = node.GetString("activation", "");
  if (name.empty()) return Kind::kNone;
  if (name == "Relu") return Kind::kRelu;
  if (name == "Clip") return Kind::kClip;
  ET_CHECK(name == "Silu", ErrorCode::kInvalidArgument, node.Describe(),
           ": attribute activation must be \"\", \"Relu\", \"Clip\" or \"Silu\", got \"", name, "\"");
  return Kind::kSilu;
}

void BatchNormalizationCompute(KernelContext& ctx, batchnorm::Activation::Kind activation_kind) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  CheckRankAtLeast2(node, x, "input X");
  const OutputActivation activation = OutputActivation::Read(ctx, activation_kind, x);
  const BatchNormAttributes& attrs = ctx.Attributes<BatchNormAttributes>();
  const double epsilon = attrs.epsilon, momentum = attrs.momentum;
  const bool training = attrs.training, spatial = attrs.spatial;

  const int64_t batch = x.dim(0);
  const int64_t channels = spatial ? x.dim(1) : DimProduct(x.shape(), 1, x.rank());
  const int64_t spatial_size = spatial ? DimProduct(x.shape(), 2, x.rank()) : 1;

  const size_t n = static_cast<size_t>(channels);
  NodeScratch<double> scratch(ctx, 11 * n);
  const std::span<const double> scale = ChannelParameter(ctx, 1, "scale", channels, scratch.Take(n));
  const std::span<const double> bias = ChannelParameter(ctx, 2, "B", channels, scratch.Take(n));
  std::span<double> mean = ChannelParameter(ctx, 3, "input_mean", channels, scratch.Take(n));
  std::span<double> var = ChannelParameter(ctx, 4, "input_var", channels, scratch.Take(n));
  const DataType stat_dtype = ctx.Input(3).dtype();

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    // Y is left out (unrequested) where a session applies the map in the consumer (ChannelAffineConv).
    T* yp = ctx.HasOutput(0) ? ctx.Output(0, x.shape(), x.dtype()).template data<T>() : nullptr;

    // Output 5, which only sessions add (ShareBatchNormAffine), is the map y = activation(x * a + b) applied:
    // a and b per channel as [2, C] of X's type, for ai.edgetrain.ChannelAffine to apply again.
    T* affine = ctx.HasOutput(5) ? ctx.Output(5, {2, channels}, x.dtype()).template data<T>() : nullptr;
    bool normalized = false;
    if (training) {
      const std::span<double> batch_mean = scratch.Take(n), batch_var = scratch.Take(n);
      const double count = static_cast<double>(batch * spatial_size);
      if constexpr (std::is_same_v<T, float>) {
        if (spatial && UseFastBatchNorm(x, batch * spatial_size)) {
          batchnorm::TrainingForward(ctx.threads(), batchnorm::BestIsa(), xp, yp, batch, channels, spatial_size,
                                     scale.data(), bias.data(), epsilon, batch_mean.data(), batch_var.data(),
                                     activation.ForFloat(), affine);
          normalized = true;
        }
      }
      if (!normalized) ctx.threads().ParallelFor(channels, GrainFor(batch * spatial_size), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          double sum = 0;
          ForEachChannelRun(c, batch, channels, spatial_size, [&](int64_t run) { sum += Sum(xp + run, spatial_size); });
          const double m = count > 0 ? sum / count : 0.0;
          double squares = 0;
          ForEachChannelRun(c, batch, channels, spatial_size,
                            [&](int64_t run) { squares += SquaresAbout(xp + run, spatial_size, static_cast<T>(m)); });
          batch_mean[c] = m;
          batch_var[c] = count > 0 ? squares / count : 0.0;  // population variance, as the spec says
        }
      });
      const std::span<double> running_mean = scratch.Take(n), running_var = scratch.Take(n);
      const std::span<double> saved_inv_std = scratch.Take(n);
      for (int64_t c = 0; c < channels; ++c) {
        running_mean[c] = mean[c] * momentum + batch_mean[c] * (1 - momentum);
        running_var[c] = var[c] * momentum + batch_var[c] * (1 - momentum);
        saved_inv_std[c] = 1.0 / std::sqrt(batch_var[c] + epsilon);
      }
      const Shape stat_shape = ctx.Input(3).shape();
      if (ctx.HasOutput(1)) StoreDoubles(ctx.Output(1, stat_shape, stat_dtype), running_mean, node.Describe());
      if (ctx.HasOutput(2)) StoreDoubles(ctx.Output(2, stat_shape, stat_dtype), running_var, node.Describe());
      if (ctx.HasOutput(3)) StoreDoubles(ctx.Output(3, stat_shape, stat_dtype), batch_mean, node.Describe());
      if (ctx.HasOutput(4)) StoreDoubles(ctx.Output(4, stat_shape, stat_dtype), saved_inv_std, node.Describe());
      mean = batch_mean;
      var = batch_var;
    }

    if (normalized || (!yp && !affine)) return;
    const std::span<double> multiplier = scratch.Take(n), offset = scratch.Take(n);
    for (int64_t c = 0; c < channels; ++c) {
      multiplier[c] = scale[c] / std::sqrt(var[c] + epsilon);
      offset[c] = bias[c] - mean[c] * multiplier[c];
      if (affine) {
        affine[c] = static_cast<T>(multiplier[c]);
        affine[channels + c] = static_cast<T>(offset[c]);
      }
    }
    if (!yp) return;
    ApplyChannelAffine<T>(ctx, xp, yp, batch, channels, spatial_size, multiplier, offset);
    activation.Apply(ctx.threads(), yp, x.numel());
  });
}

// ai.edgetrain.ChannelAffine(X, affine[, min, max]; activation) -> Y = activation(X * affine[0, c] + affine[1, c]):
// a training-mode BatchNormalization's output again from the map it applied (its output 5), on the same kernels
// as it, so the same bits, without a pass for the statistics. activation: "" (none), "Relu" or "Clip".
void ChannelAffineKernel(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const Tensor& affine = ctx.Input(1);
  const ChannelAffineMap map = ReadChannelAffineMap(ctx, x, affine, 2);
  ApplyChannelAffineMap(ctx, map, x, affine, ctx.Output(0, x.shape(), x.dtype()));
}

}  // namespace

ChannelAffineMap ReadChannelAffineMap(KernelContext& ctx, const Tensor& x, const Tensor& affine, size_t min_index) {
  const Node& node = ctx.node();
  CheckRankAtLeast2(node, x, "input X");
  CheckAffineMap(node, affine, x);
  const OutputActivation activation = OutputActivation::Read(ctx, ActivationAttribute(node), x, min_index);
  return {activation.kind, activation.low, activation.high,
          UseFastBatchNorm(x, x.dim(0) * DimProduct(x.shape(), 2, x.rank()))};
}

void ApplyChannelAffineMap(KernelContext& ctx, const ChannelAffineMap& map, const Tensor& x, const Tensor& affine,
                           Tensor& y) {
  const OutputActivation activation{map.kind, map.low, map.high};
  const int64_t batch = x.dim(0), channels = x.dim(1), spatial = DimProduct(x.shape(), 2, x.rank());
  VisitFloat(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* ap = affine.data<T>();
    T* yp = y.template data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (map.fast) {
        batchnorm::ApplyAffine(ctx.threads(), batchnorm::BestIsa(), xp, yp, batch, channels, spatial, ap,
                               activation.ForFloat());
        return;
      }
    }
    const size_t n = static_cast<size_t>(channels);
    NodeScratch<double> scratch(ctx, 2 * n);
    const std::span<double> multiplier = scratch.Take(n), offset = scratch.Take(n);
    for (int64_t c = 0; c < channels; ++c) {
      multiplier[c] = static_cast<double>(ap[c]);
      offset[c] = static_cast<double>(ap[channels + c]);
    }
    ApplyChannelAffine<T>(ctx, xp, yp, batch, channels, spatial, multiplier, offset);
    activation.Apply(ctx.threads(), yp, x.numel());
  });
}

void BatchNormalizationKernel(KernelContext& ctx) {
  BatchNormalizationCompute(ctx, batchnorm::Activation::Kind::kNone);
}

namespace {

// The backward of training-mode BatchNormalization, statistics per channel over [N, spatial]:
//   dX = scale * inv_std * (dY - mean(dY) - xhat * mean(dY * xhat)), xhat = (X - mean) * inv_std
// `gated` (BatchNormalizationActivationGrad): dY is the gradient of a Relu or Clip after the normalization, the
// map it applied is input 3 and Clip's bounds inputs 4 and 5; dY passes where the activation passes X * a + b.
void BatchNormalizationBackwardGated(KernelContext& ctx, bool saved_statistics, batchnorm::Activation::Kind gated) {
  const Node& node = ctx.node();
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  CheckRankAtLeast2(node, x, "input X");
  ET_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
           ": dY (", DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match X (",
           DataTypeName(x.dtype()), " ", ShapeToString(x.shape()), ")");
  const double epsilon = ctx.Attributes<BatchNormAttributes>().epsilon;
  const int64_t batch = x.dim(0), channels = x.dim(1);
  const int64_t spatial = DimProduct(x.shape(), 2, x.rank());
  const size_t n = static_cast<size_t>(channels);
  NodeScratch<double> scratch(ctx, 5 * n);
  const std::span<const double> scale = ChannelParameter(ctx, 2, "scale", channels, scratch.Take(n));
  const Tensor& scale_tensor = ctx.Input(2);
  const double count = static_cast<double>(batch * spatial);
  std::span<const double> saved_mean, saved_inv_std;
  if (saved_statistics) {
    saved_mean = ChannelParameter(ctx, 3, "saved_mean", channels, scratch.Take(n));
    saved_inv_std = ChannelParameter(ctx, 4, "saved_inv_std", channels, scratch.Take(n));
  }
  const bool gate = gated != batchnorm::Activation::Kind::kNone;
  if (gate) CheckAffineMap(node, ctx.Input(3), x);
  const OutputActivation activation = OutputActivation::Read(ctx, gated, x, 4);

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dxp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    const T* affine = gate ? ctx.Input(3).template data<T>() : nullptr;
    const std::span<double> dscale = scratch.Take(n), dbias = scratch.Take(n);
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (UseFastBatchNorm(x, batch * spatial)) {
        batchnorm::TrainingBackward(ctx.threads(), batchnorm::BestIsa(), dyp, xp, dxp, batch, channels, spatial,
                                    scale.data(), saved_statistics ? saved_mean.data() : nullptr,
                                    saved_statistics ? saved_inv_std.data() : nullptr, epsilon, dscale.data(),
                                    dbias.data(), affine, activation.ForFloat());
        done = true;
      }
    }
    const T low = static_cast<T>(activation.low), high = static_cast<T>(activation.high);
    if (!done) ctx.threads().ParallelFor(channels, GrainFor(batch * spatial), [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double mean = 0;
        if (saved_statistics) {
          mean = saved_mean[c];
        } else {
          double sum = 0;
          ForEachChannelRun(c, batch, channels, spatial, [&](int64_t run) { sum += Sum(xp + run, spatial); });
          mean = count > 0 ? sum / count : 0.0;
        }
        const T mean_t = static_cast<T>(mean);
        // dY gated as ApplyChannelAffine and OutputActivation::Apply compute the activation's input and output.
        const T a = gate ? affine[c] : T(0), b = gate ? affine[channels + c] : T(0);
        const auto gated_dy = [&](T d, T v) { return gate ? activation.Gradient(d, v * a + b, low, high) : d; };
        CenteredSums sums;
        ForEachChannelRun(c, batch, channels, spatial, [&](int64_t run) {
          const T* dy_run = dyp + run;
          const T* x_run = xp + run;
          const auto dy_at = [&](int64_t i) { return gated_dy(dy_run[i], x_run[i]); };
          sums.Add(x_run, dy_at, spatial, mean_t);
        });
        const double inv_std =
            saved_statistics ? saved_inv_std[c] : 1.0 / std::sqrt((count > 0 ? sums.squares / count : 0.0) + epsilon);
        dbias[c] = sums.g;
        dscale[c] = sums.g_centered * inv_std;
        // dX = multiplier * (dY - mean(dY) - (X - mean) * projection), projection = mean(dY * xhat) * inv_std.
        const T mean_dy = static_cast<T>(count > 0 ? sums.g / count : 0.0);
        const T projection = static_cast<T>(count > 0 ? sums.g_centered * inv_std * inv_std / count : 0.0);
        const T multiplier = static_cast<T>(scale[c] * inv_std);
        ForEachChannelRun(c, batch, channels, spatial, [&](int64_t run) {
          const T* x_run = xp + run;
          const T* dy_run = dyp + run;
          T* dx_run = dxp + run;
#pragma omp simd
          for (int64_t i = 0; i < spatial; ++i) {
            dx_run[i] = multiplier * (gated_dy(dy_run[i], x_run[i]) - mean_dy - (x_run[i] - mean_t) * projection);
          }
        });
      }
    });
    StoreDoubles(ctx.Output(1, scale_tensor.shape(), scale_tensor.dtype()), dscale, node.Describe());
    StoreDoubles(ctx.Output(2, scale_tensor.shape(), scale_tensor.dtype()), dbias, node.Describe());
  });
}

}  // namespace

void BatchNormalizationBackward(KernelContext& ctx, bool saved_statistics) {
  BatchNormalizationBackwardGated(ctx, saved_statistics, batchnorm::Activation::Kind::kNone);
}

namespace {

// ai.edgetrain.BatchNormalizationActivationGrad(dY, X, scale, affine[, min, max]; epsilon, activation) ->
// (dX, dScale, dBias): BatchNormalizationGrad of ReluGrad, ClipGrad or SiluGrad of dY, the activation's input taken
// from X and the map its BatchNormalization applied (output 5) instead of from its output or a copy. Made only inside
// sessions (FuseActivationGradIntoBatchNormGrad).
void BatchNormalizationActivationGradKernel(KernelContext& ctx) {
  const batchnorm::Activation::Kind kind = ActivationAttribute(ctx.node());
  ET_CHECK(kind != batchnorm::Activation::Kind::kNone, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": attribute activation must be \"Relu\", \"Clip\" or \"Silu\"");
  BatchNormalizationBackwardGated(ctx, false, kind);
}

// ai.edgetrain.BatchNormalizationGrad(dY, X, scale; epsilon) -> (dX, dScale, dBias), recomputing the
// batch statistics.
void BatchNormalizationGradKernel(KernelContext& ctx) { BatchNormalizationBackward(ctx, false); }

// BatchNormalizationGrad in standard ops: X and dY viewed as [N, C, spatial], statistics over axes 0, 2.
std::shared_ptr<const FunctionDef> BatchNormalizationGradFunction() {
  FunctionBuilder f("BatchNormalizationGrad", {"dY", "X", "scale"}, {"dX", "dScale", "dBias"}, {"epsilon"});
  const Attribute axes = Attribute::Ints({0, 2});
  f.Ints("shape3", {0, 0, -1});
  f.Ints("channel_shape", {1, -1, 1});
  f.Ints("axes", {0, 2});
  f.Op("Constant", {}, "epsilon_float", {{"value_float", Attribute::Ref(Attribute::Kind::kFloat, "epsilon")}});
  f.Op("CastLike", {"epsilon_float", "X"}, "epsilon");
  f.Op("Reshape", {"X", "shape3"}, "x3");
  f.Op("Reshape", {"dY", "shape3"}, "dy3");
  f.Op("ReduceMean", {"x3"}, "mean", {{"axes", axes}, {"keepdims", Keepdims(true)}});
  f.Op("Sub", {"x3", "mean"}, "centered");
  f.Op("Mul", {"centered", "centered"}, "squares");
  f.Op("ReduceMean", {"squares"}, "var", {{"axes", axes}, {"keepdims", Keepdims(true)}});
  f.Op("Add", {"var", "epsilon"}, "var_eps");
  f.Op("Sqrt", {"var_eps"}, "std");
  f.Op("Reciprocal", {"std"}, "inv_std");
  f.Op("Mul", {"centered", "inv_std"}, "xhat");
  f.Op("Mul", {"dy3", "xhat"}, "dy_xhat");
  f.Op("ReduceSum", {"dy3", "axes"}, "sum_dy", {{"keepdims", Keepdims(false)}});
  f.Op("ReduceSum", {"dy_xhat", "axes"}, "sum_dy_xhat", {{"keepdims", Keepdims(false)}});
  f.Op("Shape", {"scale"}, "scale_shape");
  f.Op("Reshape", {"sum_dy", "scale_shape"}, "dbias_x");
  f.Op("CastLike", {"dbias_x", "scale"}, "dBias");
  f.Op("Reshape", {"sum_dy_xhat", "scale_shape"}, "dscale_x");
  f.Op("CastLike", {"dscale_x", "scale"}, "dScale");
  f.Op("ReduceMean", {"dy3"}, "mean_dy", {{"axes", axes}, {"keepdims", Keepdims(true)}});
  f.Op("ReduceMean", {"dy_xhat"}, "mean_dy_xhat", {{"axes", axes}, {"keepdims", Keepdims(true)}});
  f.Op("CastLike", {"scale", "X"}, "scale_x");
  f.Op("Reshape", {"scale_x", "channel_shape"}, "scale3");
  f.Op("Mul", {"scale3", "inv_std"}, "multiplier");
  f.Op("Sub", {"dy3", "mean_dy"}, "dy_centered");
  f.Op("Mul", {"xhat", "mean_dy_xhat"}, "projection");
  f.Op("Sub", {"dy_centered", "projection"}, "residual");
  f.Op("Mul", {"multiplier", "residual"}, "dx3");
  f.Op("Shape", {"X"}, "x_shape");
  f.Op("Reshape", {"dx3", "x_shape"}, "dX");
  return f.Build();
}

// BatchNormalization. Training mode: the fused BatchNormalizationGrad (batch statistics). Inference:
// y = (x - mean) * a + B with a = scale / sqrt(var + eps), an affine map per channel. The running
// statistics outputs (and the saved ones of old opsets) are not differentiable.
void BatchNormalizationGradient(GradientContext& g) {
  const Node& node = g.node();
  const std::string dy = g.dY(0);
  if (dy.empty()) return;
  const BatchNormAttributes attrs = BatchNormAttributes::Parse(node, g.opset());
  ET_CHECK(attrs.spatial, ErrorCode::kNotImplemented, node.Describe(),
           ": the gradient of BatchNormalization with spatial=0 is not supported");
  const float epsilon = attrs.epsilon;
  const std::string& x = g.X(0);
  const std::string& scale = g.X(1);

  if (attrs.training) {
    if (!g.NeedsGrad(0) && !g.NeedsGrad(1) && !g.NeedsGrad(2)) return;
    const std::vector<std::string> grads =
        g.Emit("BatchNormalizationGrad", {dy, x, scale}, 3, {{"epsilon", Attribute::Float(epsilon)}}, kEdgetrainDomain);
    for (size_t i = 0; i < 3; ++i) g.SetGrad(i, grads[i]);
    return;
  }

  // Inference: X and dY viewed as [N, C, spatial]; per-channel vectors as [1, C, 1].
  const std::string shape3 = g.Ints({0, 0, -1});
  const std::string channel_shape = g.Ints({1, -1, 1});
  const std::string axes = g.Ints({0, 2});
  const std::string dy3 = g.Op("Reshape", {dy, shape3});
  auto channel_sum = [&](const std::string& value) {
    return g.Op("ReduceSum", {value, axes}, {{"keepdims", Attribute::Int(0)}});
  };
  const std::string scale_x = AsTypeOf(g, scale, x);
  const std::string mean_x = AsTypeOf(g, g.X(3), x);
  const std::string var_x = AsTypeOf(g, g.X(4), x);
  const std::string inv_std =
      g.Op("Reciprocal", {g.Op("Sqrt", {g.Op("Add", {var_x, g.ScalarLike(epsilon, x)})})});
  const std::string multiplier = g.Op("Mul", {scale_x, inv_std});
  if (g.NeedsGrad(0)) {
    const std::string dx3 = g.Op("Mul", {dy3, g.Op("Reshape", {multiplier, channel_shape})});
    g.SetGrad(0, g.Op("Reshape", {dx3, g.ShapeOf(x)}));
  }
  const bool needs_sum_dy = g.NeedsGrad(2) || g.NeedsGrad(3);
  const std::string sum_dy = needs_sum_dy ? channel_sum(dy3) : "";
  if (g.NeedsGrad(2)) g.SetGrad(2, AsTypeOf(g, sum_dy, g.X(2)));
  if (g.NeedsGrad(3)) g.SetGrad(3, AsTypeOf(g, g.Op("Neg", {g.Op("Mul", {sum_dy, multiplier})}), g.X(3)));
  if (g.NeedsGrad(1) || g.NeedsGrad(4)) {
    const std::string x3 = g.Op("Reshape", {x, shape3});
    const std::string centered = g.Op("Sub", {x3, g.Op("Reshape", {mean_x, channel_shape})});
    const std::string sum_dy_centered = channel_sum(g.Op("Mul", {dy3, centered}));
    // dscale = sum(dY * (x - mean)) * inv_std; dvar = -0.5 * sum(dY * (x - mean)) * scale * inv_std^3.
    if (g.NeedsGrad(1)) g.SetGrad(1, AsTypeOf(g, g.Op("Mul", {sum_dy_centered, inv_std}), scale));
    if (g.NeedsGrad(4)) {
      const std::string minus_half_inv_var = g.Op("Mul", {g.ScalarLike(-0.5, x), g.Op("Mul", {inv_std, inv_std})});
      const std::string dvar = g.Op("Mul", {g.Op("Mul", {sum_dy_centered, multiplier}), minus_half_inv_var});
      g.SetGrad(4, AsTypeOf(g, dvar, g.X(4)));
    }
  }
}

// ai.edgetrain BatchNormalizationRelu / BatchNormalizationClip / BatchNormalizationSilu in standard ops:
// BatchNormalization, then Relu, Clip(Y, min, max) or Y * Sigmoid(Y) on its Y. Sessions fuse the pairs
// (ir/passes.hpp FuseBatchNormActivation).
std::shared_ptr<const FunctionDef> BatchNormalizationActivationFunction(const std::string& name,
                                                                         batchnorm::Activation::Kind kind) {
  const bool clip = kind == batchnorm::Activation::Kind::kClip;
  std::vector<std::string> inputs = {"X", "scale", "B", "input_mean", "input_var"};
  if (clip) inputs.insert(inputs.end(), {"min", "max"});
  FunctionBuilder f(name, inputs, {"Y", "running_mean", "running_var"}, {"epsilon", "momentum", "training_mode"});
  const std::string normalized =
      f.Node("BatchNormalization", {"X", "scale", "B", "input_mean", "input_var"},
             {"normalized", "running_mean", "running_var"},
             {{"epsilon", Attribute::Ref(Attribute::Kind::kFloat, "epsilon")},
              {"momentum", Attribute::Ref(Attribute::Kind::kFloat, "momentum")},
              {"training_mode", Attribute::Ref(Attribute::Kind::kInt, "training_mode")}});
  if (clip) {
    f.Op("Clip", {normalized, "min", "max"}, "Y");
  } else if (kind == batchnorm::Activation::Kind::kSilu) {
    f.Op("Mul", {normalized, f.Op("Sigmoid", {normalized}, "sigmoid")}, "Y");
  } else {
    f.Op("Relu", {normalized}, "Y");
  }
  return f.Build();
}

void RegisterBatchNormalization(OpRegistry& r) {
  ET_IF_BUILT("", "BatchNormalization") {
    WithAttributes<BatchNormAttributes>(RegisterOnnx(r, "BatchNormalization", BatchNormalizationKernel));
    r.SetGradient("BatchNormalization", BatchNormalizationGradient);
  }
  ET_IF_BUILT("ai.edgetrain", "BatchNormalizationRelu")
  WithAttributes<BatchNormAttributes>(RegisterFused(
      r, "BatchNormalizationRelu",
      [](KernelContext& ctx) { BatchNormalizationCompute(ctx, batchnorm::Activation::Kind::kRelu); },
      BatchNormalizationActivationFunction("BatchNormalizationRelu", batchnorm::Activation::Kind::kRelu)));
  ET_IF_BUILT("ai.edgetrain", "BatchNormalizationClip")
  WithAttributes<BatchNormAttributes>(RegisterFused(
      r, "BatchNormalizationClip",
      [](KernelContext& ctx) { BatchNormalizationCompute(ctx, batchnorm::Activation::Kind::kClip); },
      BatchNormalizationActivationFunction("BatchNormalizationClip", batchnorm::Activation::Kind::kClip)));
  ET_IF_BUILT("ai.edgetrain", "BatchNormalizationSilu")
  WithAttributes<BatchNormAttributes>(RegisterFused(
      r, "BatchNormalizationSilu",
      [](KernelContext& ctx) { BatchNormalizationCompute(ctx, batchnorm::Activation::Kind::kSilu); },
      BatchNormalizationActivationFunction("BatchNormalizationSilu", batchnorm::Activation::Kind::kSilu)));
  ET_IF_BUILT("ai.edgetrain", "BatchNormalizationGrad")
  RegisterFused(r, "BatchNormalizationGrad", BatchNormalizationGradKernel,
                ET_TRAINING_BODY(BatchNormalizationGradFunction()));
  // Made only inside sessions (ShareBatchNormAffine, FuseActivationGradIntoBatchNormGrad) from an output they add:
  // no standard-ops body to export.
  ET_IF_BUILT("ai.edgetrain", "ChannelAffine")
  RegisterFused(r, "ChannelAffine", ChannelAffineKernel, nullptr);
  ET_IF_BUILT("ai.edgetrain", "BatchNormalizationActivationGrad")
  WithAttributes<BatchNormAttributes>(
      RegisterFused(r, "BatchNormalizationActivationGrad", BatchNormalizationActivationGradKernel, nullptr));
}


// ---- InstanceNormalization ----

void InstanceNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  CheckRankAtLeast2(node, x, "input");
  const double epsilon = node.GetFloat("epsilon", 1e-5f);
  const int64_t batch = x.dim(0), channels = x.dim(1);
  const int64_t spatial = DimProduct(x.shape(), 2, x.rank());
  const std::vector<double> scale = ChannelParameter(ctx, 1, "scale", channels);
  const std::vector<double> bias = ChannelParameter(ctx, 2, "B", channels);

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    ctx.threads().ParallelFor(batch * channels, GrainFor(spatial), [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const T* src = xp + block * spatial;
        T* dst = yp + block * spatial;
        double sum = 0;
        for (int64_t i = 0; i < spatial; ++i) sum += static_cast<double>(src[i]);
        const double m = spatial > 0 ? sum / static_cast<double>(spatial) : 0.0;
        double squares = 0;
        for (int64_t i = 0; i < spatial; ++i) {
          const double d = static_cast<double>(src[i]) - m;
          squares += d * d;
        }
        const double v = spatial > 0 ? squares / static_cast<double>(spatial) : 0.0;
        const int64_t c = block % channels;
        const double a = scale[c] / std::sqrt(v + epsilon);
        const T multiplier = static_cast<T>(a);
        const T offset = static_cast<T>(bias[c] - m * a);
        for (int64_t i = 0; i < spatial; ++i) dst[i] = src[i] * multiplier + offset;
      }
    });
  });
}

// ---- GroupNormalization (opset 18: scale and bias per group; 21: per channel) ----

void GroupNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  CheckRankAtLeast2(node, x, "input");
  ET_CHECK(node.HasAttr("num_groups"), ErrorCode::kInvalidModel, node.Describe(), ": attribute 'num_groups' is missing");
  const int64_t groups = node.GetInt("num_groups", 1);
  const int64_t batch = x.dim(0), channels = x.dim(1);
  ET_CHECK(groups >= 1 && channels % groups == 0, ErrorCode::kInvalidArgument, node.Describe(), ": num_groups ", groups,
           " does not divide the ", channels, " channels");
  const double epsilon = node.GetFloat("epsilon", 1e-5f);
  const bool per_channel = ctx.opset() >= 21;
  const int64_t params = per_channel ? channels : groups;
  const std::vector<double> scale = ChannelParameter(ctx, 1, "scale", params);
  const std::vector<double> bias = ChannelParameter(ctx, 2, "bias", params);
  const int64_t group_channels = channels / groups, spatial = DimProduct(x.shape(), 2, x.rank());
  const int64_t block = group_channels * spatial;

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    ctx.threads().ParallelFor(batch * groups, GrainFor(block), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const T* src = xp + b * block;
        T* dst = yp + b * block;
        double sum = 0;
        for (int64_t i = 0; i < block; ++i) sum += static_cast<double>(src[i]);
        const double m = block > 0 ? sum / static_cast<double>(block) : 0.0;
        double squares = 0;
        for (int64_t i = 0; i < block; ++i) {
          const double d = static_cast<double>(src[i]) - m;
          squares += d * d;
        }
        const double inv_std = 1 / std::sqrt((block > 0 ? squares / static_cast<double>(block) : 0.0) + epsilon);
        const int64_t group = b % groups;
        for (int64_t c = 0; c < group_channels; ++c) {
          const int64_t p = per_channel ? group * group_channels + c : group;
          const double a = scale[p] * inv_std;
          const T multiplier = static_cast<T>(a), offset = static_cast<T>(bias[p] - m * a);
          for (int64_t i = c * spatial; i < (c + 1) * spatial; ++i) dst[i] = src[i] * multiplier + offset;
        }
      }
    });
  });
}

// InstanceNormalization: statistics per (n, c) over the spatial axes, in plain ops on [N, C, spatial].
void InstanceNormalizationGradient(GradientContext& g) {
  const std::string dy = g.dY(0);
  if (dy.empty()) return;
  const std::string& x = g.X(0);
  const std::string shape3 = g.Ints({0, 0, -1});
  const std::string batch_and_spatial = g.Ints({0, 2});
  const std::string dy3 = g.Op("Reshape", {dy, shape3});
  auto channel_sum = [&](const std::string& value) {
    return g.Op("ReduceSum", {value, batch_and_spatial}, {{"keepdims", Attribute::Int(0)}});
  };
  auto spatial_mean = [&](const std::string& value) {
    return g.Op("ReduceMean", {value}, {{"axes", Attribute::Ints({2})}, {"keepdims", Attribute::Int(1)}});
  };
  if (g.NeedsGrad(2)) g.SetGrad(2, AsTypeOf(g, channel_sum(dy3), g.X(2)));
  if (!g.NeedsGrad(0) && !g.NeedsGrad(1)) return;

  const float epsilon = g.node().GetFloat("epsilon", 1e-5f);
  const std::string x3 = g.Op("Reshape", {x, shape3});
  const std::string centered = g.Op("Sub", {x3, spatial_mean(x3)});
  const std::string var = spatial_mean(g.Op("Mul", {centered, centered}));
  const std::string inv_std = g.Op("Reciprocal", {g.Op("Sqrt", {g.Op("Add", {var, g.ScalarLike(epsilon, x)})})});
  const std::string xhat = g.Op("Mul", {centered, inv_std});
  const std::string dy_xhat = g.Op("Mul", {dy3, xhat});
  if (g.NeedsGrad(1)) g.SetGrad(1, AsTypeOf(g, channel_sum(dy_xhat), g.X(1)));
  if (g.NeedsGrad(0)) {
    const std::string scale3 = g.Op("Reshape", {AsTypeOf(g, g.X(1), x), g.Ints({1, -1, 1})});
    const std::string residual = g.Op(
        "Sub", {g.Op("Sub", {dy3, spatial_mean(dy3)}), g.Op("Mul", {xhat, spatial_mean(dy_xhat)})});
    const std::string dx3 = g.Op("Mul", {g.Op("Mul", {scale3, inv_std}), residual});
    g.SetGrad(0, g.Op("Reshape", {dx3, g.ShapeOf(x)}));
  }
}

// GroupNormalization: statistics per (n, group) in plain ops on the [N, G, C/G * spatial] view; scale and bias
// act per group (opset 18) on that view, or per channel (21) on the [N, C, spatial] view.
void GroupNormalizationGradient(GradientContext& g) {
  const std::string dy = g.dY(0);
  if (dy.empty() || (!g.NeedsGrad(0) && !g.NeedsGrad(1) && !g.NeedsGrad(2))) return;
  const std::string& x = g.X(0);
  const bool per_channel = g.opset() >= 21;
  const std::string grouped = g.Ints({0, g.node().GetInt("num_groups", 1), -1});
  const std::string param_view = per_channel ? g.Ints({0, 0, -1}) : grouped;
  const std::string dy_view = g.Op("Reshape", {dy, param_view});
  auto param_sum = [&](const std::string& value) {
    return g.Op("ReduceSum", {value, g.Ints({0, 2})}, {{"keepdims", Attribute::Int(0)}});
  };
  auto group_mean = [&](const std::string& value) {
    return g.Op("ReduceMean", {value}, {{"axes", Attribute::Ints({2})}, {"keepdims", Attribute::Int(1)}});
  };
  if (g.NeedsGrad(2)) g.SetGrad(2, AsTypeOf(g, param_sum(dy_view), g.X(2)));
  if (!g.NeedsGrad(0) && !g.NeedsGrad(1)) return;

  const float epsilon = g.node().GetFloat("epsilon", 1e-5f);
  const std::string xg = g.Op("Reshape", {x, grouped});
  const std::string centered = g.Op("Sub", {xg, group_mean(xg)});
  const std::string var = group_mean(g.Op("Mul", {centered, centered}));
  const std::string inv_std = g.Op("Reciprocal", {g.Op("Sqrt", {g.Op("Add", {var, g.ScalarLike(epsilon, x)})})});
  const std::string xhat = g.Op("Mul", {centered, inv_std});
  const std::string xhat_view = per_channel ? g.Op("Reshape", {xhat, g.ShapeOf(dy_view)}) : xhat;
  if (g.NeedsGrad(1)) g.SetGrad(1, AsTypeOf(g, param_sum(g.Op("Mul", {dy_view, xhat_view})), g.X(1)));
  if (g.NeedsGrad(0)) {
    const std::string scale = g.Op("Reshape", {AsTypeOf(g, g.X(1), x), g.Ints({-1, 1})});
    const std::string dxhat = g.Op("Reshape", {g.Op("Mul", {dy_view, scale}), grouped});
    const std::string residual = g.Op(
        "Sub", {g.Op("Sub", {dxhat, group_mean(dxhat)}), g.Op("Mul", {xhat, group_mean(g.Op("Mul", {dxhat, xhat}))})});
    g.SetGrad(0, g.Op("Reshape", {g.Op("Mul", {inv_std, residual}), g.ShapeOf(x)}));
  }
}

// ---- LayerNormalization ----

struct LayerNormAttributes {
  int64_t axis = -1;  // normalized against X's rank when the kernel runs
  float epsilon = 1e-5f;
  DataType stash = DataType::kFloat32;

  static LayerNormAttributes Parse(const Node& node, int64_t /*opset*/) {
    const AttributeReader read(node);
    LayerNormAttributes a;
    a.axis = read.Int("axis", -1);
    a.epsilon = read.Float("epsilon", 1e-5f);
    read.Check(std::isfinite(a.epsilon) && a.epsilon >= 0, "epsilon", "must be finite and >= 0");
    const int64_t stash_type = read.Int("stash_type", 1);
    read.Check(stash_type == static_cast<int64_t>(DataType::kFloat32) ||
                   stash_type == static_cast<int64_t>(DataType::kFloat64),
               "stash_type", "must be 1 (float32) or 11 (float64)");
    a.stash = static_cast<DataType>(stash_type);
    return a;
  }

  int64_t Axis(const Node& node, int64_t rank) const {
    return NormalizeAxis(axis, rank, node.Describe() + " attribute 'axis'");
  }

  // Y as X; Mean and InvStdDev of X's shape with the normalized axes 1, in the stash type.
  std::vector<ValueInfo> OutputTypes(const std::vector<const ValueInfo*>& inputs) const {
    const std::vector<Dim>* x = inputs.empty() ? nullptr : KnownShape(inputs[0]);
    const int64_t rank = x ? static_cast<int64_t>(x->size()) : 0;
    if (!x || axis < -rank || axis >= rank) return {ValueInfo{}};
    std::vector<Dim> stat = *x;
    for (size_t d = static_cast<size_t>(axis < 0 ? axis + rank : axis); d < stat.size(); ++d) stat[d] = FixedDim(1);
    return {TensorInfo(inputs[0]->dtype, *x), TensorInfo(stash, stat), TensorInfo(stash, std::move(stat))};
  }
};

// Whether `param` (Scale or B) broadcasts to `normalized` (X's dims from `axis` on). Leading 1s may
// extend past the normalized dims (e.g. Scale [1, 1, C] for axis=-1); `skipped` gets their count.
bool BroadcastsToNormalized(const Shape& param, const Shape& normalized, size_t* skipped = nullptr) {
  size_t skip = 0;
  while (param.size() - skip > normalized.size() && param[skip] == 1) ++skip;
  const size_t rank = param.size() - skip;
  if (rank > normalized.size()) return false;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t dim = param[skip + i], target = normalized[normalized.size() - rank + i];
    if (dim != target && dim != 1) return false;
  }
  if (skipped) *skipped = skip;
  return true;
}

// `param` (Scale or B) broadcast to `normalized`, as `count` values of T.
template <typename T>
std::vector<T> ExpandToNormalizedShape(const KernelContext& ctx, const Tensor& param, const char* name,
                                       const Shape& normalized) {
  size_t skipped = 0;
  ET_CHECK(BroadcastsToNormalized(param.shape(), normalized, &skipped), ErrorCode::kInvalidArgument,
           ctx.node().Describe(), ": input '", name, "' of shape ", ShapeToString(param.shape()),
           " does not broadcast to the normalized shape ", ShapeToString(normalized));
  const Shape dims(param.shape().begin() + static_cast<int64_t>(skipped), param.shape().end());
  ET_CHECK(param.dtype() == DataTypeOf<T>(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input '", name,
           "' has element type ", DataTypeName(param.dtype()), " but X has ", DataTypeName(DataTypeOf<T>()));
  const T* src = param.data<T>();
  const int64_t count = NumElements(normalized);
  std::vector<T> expanded(static_cast<size_t>(count));
  if (param.numel() == count) {
    std::copy(src, src + count, expanded.begin());
    return expanded;
  }
  const Shape strides = BroadcastStrides(dims, normalized);
  std::vector<int64_t> index(normalized.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    expanded[i] = src[offset];
    for (size_t d = normalized.size(); d-- > 0;) {  // odometer increment
      offset += strides[d];
      if (++index[d] < normalized[d]) break;
      offset -= strides[d] * normalized[d];
      index[d] = 0;
    }
  }
  return expanded;
}

// oneDNN runs LayerNormalization and its gradient on float32 X viewed as [rows, cols], with float32
// statistics and Scale (and B) of exactly `cols` values; otherwise the reference kernels run.
struct DnnlLayerNormConfig {
  bool backward;
  bool with_bias;
  int64_t rows, cols;
  float epsilon;
};

#if defined(EDGETRAIN_WITH_DNNL)

// Forward: SRC, SCALE (, SHIFT) -> DST, MEAN, VARIANCE. Backward: SRC, DIFF_DST, MEAN, VARIANCE, SCALE
// -> DIFF_SRC, DIFF_SCALE, DIFF_SHIFT (oneDNN 2.6 also wants SHIFT bound when it computes DIFF_SHIFT).
dnnl_util::BoundPrimitive MakeLayerNorm(const DnnlLayerNormConfig& config) {
  using dnnl::memory;
  const memory::desc data({config.rows, config.cols}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc stats({config.rows}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc params({config.cols}, memory::data_type::f32, memory::format_tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::engine& engine = dnnl_util::CpuEngine();
  const dnnl::normalization_flags flags =
      config.with_bias ? dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift
                       : dnnl::normalization_flags::use_scale;
  std::vector<std::pair<int, memory::desc>> args = {
      {DNNL_ARG_SRC, data}, {DNNL_ARG_MEAN, stats}, {DNNL_ARG_VARIANCE, stats}, {DNNL_ARG_SCALE, params}};
  if (config.with_bias) args.emplace_back(DNNL_ARG_SHIFT, params);
  try {
    const dnnl::layer_normalization_forward::desc forward(dnnl::prop_kind::forward_training, data, stats,
                                                          config.epsilon, flags);
    if (!config.backward) {
      args.emplace_back(DNNL_ARG_DST, data);
      return dnnl_util::Bind<dnnl::layer_normalization_forward>({forward, attr, engine}, args);
    }
    const dnnl::layer_normalization_forward::primitive_desc hint(forward, engine);
    const dnnl::layer_normalization_backward::desc backward(dnnl::prop_kind::backward, data, data, stats,
                                                            config.epsilon, flags);
    args.insert(args.end(), {{DNNL_ARG_DIFF_DST, data}, {DNNL_ARG_DIFF_SRC, data}, {DNNL_ARG_DIFF_SCALE, params}});
    if (config.with_bias) args.emplace_back(DNNL_ARG_DIFF_SHIFT, params);
    return dnnl_util::Bind<dnnl::layer_normalization_backward>({backward, attr, engine, hint}, args);
  } catch (const dnnl::error&) {
    dnnl_util::BoundPrimitive refused;
    refused.refused = true;
    return refused;
  }
}

// This thread's primitive for `config`, or null when oneDNN cannot run it.
dnnl_util::BoundPrimitive* CachedLayerNorm(const DnnlLayerNormConfig& config) {
  thread_local dnnl_util::Key key;
  key.Clear();
  key.Add({config.backward ? 1 : 0, config.with_bias ? 1 : 0, config.rows, config.cols,
           static_cast<int64_t>(std::bit_cast<uint32_t>(config.epsilon))});
  // Capturing one reference keeps the std::function in its small buffer (no allocation on a hit).
  dnnl_util::BoundPrimitive& bound =
      dnnl_util::Cached<dnnl_util::BoundPrimitive>(key, [&config] { return MakeLayerNorm(config); });
  return bound.refused ? nullptr : &bound;
}

#endif

// Whether `param` (Scale or B) holds one float32 value per normalized element.
bool DnnlTakesParam(const Tensor& param, const Shape& normalized, int64_t cols) {
  return param.dtype() == DataType::kFloat32 && param.numel() == cols &&
         BroadcastsToNormalized(param.shape(), normalized);
}

// Whether the oneDNN path takes a LayerNormalization (or its gradient) with this X, Scale and statistics type.
bool DnnlTakesLayerNorm(const Tensor& x, const Tensor& scale, DataType stat_dtype, const Shape& normalized,
                        int64_t rows, int64_t cols) {
#if defined(EDGETRAIN_WITH_DNNL)
  return UseDnnl() && x.dtype() == DataType::kFloat32 && stat_dtype == DataType::kFloat32 && rows > 0 && cols > 0 &&
         DnnlTakesParam(scale, normalized, cols);
#else
  (void)x, (void)scale, (void)stat_dtype, (void)normalized, (void)rows, (void)cols;
  return false;
#endif
}

// LayerNormalization on oneDNN; false when the reference kernel must run.
bool DnnlLayerNormalization(KernelContext& ctx, const Shape& normalized, int64_t rows, int64_t cols, double epsilon,
                            DataType stat_dtype, const Shape& stat_shape) {
  const Tensor& x = ctx.Input(0);
  const Tensor& scale = ctx.Input(1);
  const bool with_bias = ctx.HasInput(2);
  if (!DnnlTakesLayerNorm(x, scale, stat_dtype, normalized, rows, cols)) return false;
  if (with_bias && !DnnlTakesParam(ctx.Input(2), normalized, cols)) return false;
#if defined(EDGETRAIN_WITH_DNNL)
  const DnnlLayerNormConfig config{false, with_bias, rows, cols, static_cast<float>(epsilon)};
  dnnl_util::BoundPrimitive* bound = CachedLayerNorm(config);
  if (!bound) return false;
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  // Statistics the node does not output go to this thread's scratch.
  thread_local std::vector<float> unrequested;
  if (unrequested.size() < 2 * static_cast<size_t>(rows)) unrequested.resize(2 * static_cast<size_t>(rows));
  float* mean = ctx.HasOutput(1) ? ctx.Output(1, stat_shape, DataType::kFloat32).data<float>() : unrequested.data();
  float* inv_std =
      ctx.HasOutput(2) ? ctx.Output(2, stat_shape, DataType::kFloat32).data<float>() : unrequested.data() + rows;
  const void* bias = with_bias ? ctx.Input(2).raw() : nullptr;
  if (!dnnl_util::Execute(*bound,
                          {{DNNL_ARG_SRC, x.raw()},
                           {DNNL_ARG_SCALE, scale.raw()},
                           {DNNL_ARG_SHIFT, bias},
                           {DNNL_ARG_DST, y.raw()},
                           {DNNL_ARG_MEAN, mean},
                           {DNNL_ARG_VARIANCE, inv_std}},
                          ctx.threads().num_threads()))
    return false;
  for (int64_t row = 0; row < rows; ++row)
    inv_std[row] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(inv_std[row]) + epsilon));
  return true;
#else
  (void)epsilon, (void)stat_shape;
  return false;
#endif
}

// LayerNormalizationGrad (dY, X, Scale, Mean, InvStdDev) on oneDNN; false when the reference kernel must run.
// oneDNN takes the variance: it gets 1 / InvStdDev^2 with epsilon 0, which gives back InvStdDev.
bool DnnlLayerNormalizationGrad(KernelContext& ctx, int64_t rows, int64_t cols, const Shape& normalized) {
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  const Tensor& scale = ctx.Input(2);
  const Tensor& mean = ctx.Input(3);
  const Tensor& inv_std = ctx.Input(4);
  if (!DnnlTakesLayerNorm(x, scale, mean.dtype(), normalized, rows, cols) || inv_std.dtype() != DataType::kFloat32 ||
      mean.numel() != rows || inv_std.numel() != rows || ctx.NumOutputs() < 3)
    return false;
#if defined(EDGETRAIN_WITH_DNNL)
  const DnnlLayerNormConfig config{true, true, rows, cols, 0.0f};
  dnnl_util::BoundPrimitive* bound = CachedLayerNorm(config);
  if (!bound) return false;
  thread_local std::vector<float> variance;
  if (variance.size() < static_cast<size_t>(rows)) variance.resize(static_cast<size_t>(rows));
  const float* inv_std_values = inv_std.data<float>();
  for (int64_t row = 0; row < rows; ++row) {
    const double s = inv_std_values[row];
    variance[row] = static_cast<float>(1.0 / (s * s));
  }
  Tensor& dx = ctx.Output(0, x.shape(), x.dtype());
  Tensor& dscale = ctx.Output(1, normalized, x.dtype());
  Tensor& dbias = ctx.Output(2, normalized, x.dtype());
  return dnnl_util::Execute(*bound,
                            {{DNNL_ARG_SRC, x.raw()},
                             {DNNL_ARG_DIFF_DST, dy.raw()},
                             {DNNL_ARG_MEAN, mean.raw()},
                             {DNNL_ARG_VARIANCE, variance.data()},
                             {DNNL_ARG_SCALE, scale.raw()},
                             {DNNL_ARG_SHIFT, scale.raw()},
                             {DNNL_ARG_DIFF_SRC, dx.raw()},
                             {DNNL_ARG_DIFF_SCALE, dscale.raw()},
                             {DNNL_ARG_DIFF_SHIFT, dbias.raw()}},
                            ctx.threads().num_threads());
#else
  (void)dy;
  return false;
#endif
}

void LayerNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input X must have rank >= 1");
  const LayerNormAttributes& attrs = ctx.Attributes<LayerNormAttributes>();
  const int64_t axis = attrs.Axis(node, rank);
  const double epsilon = attrs.epsilon;
  const DataType stat_dtype = attrs.stash;

  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  const int64_t rows = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t cols = NumElements(normalized);
  Shape stat_shape = x.shape();
  for (int64_t d = axis; d < rank; ++d) stat_shape[d] = 1;
  // Y unread: a gradient's copy run for its statistics alone (PyTorch exports LayerNormalization without them).
  const bool writes_y = ctx.HasOutput(0);
  if (writes_y && DnnlLayerNormalization(ctx, normalized, rows, cols, epsilon, stat_dtype, stat_shape)) return;

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale = ExpandToNormalizedShape<T>(ctx, ctx.Input(1), "Scale", normalized);
    std::vector<T> bias;
    if (ctx.HasInput(2)) bias = ExpandToNormalizedShape<T>(ctx, ctx.Input(2), "B", normalized);
    const T* xp = x.data<T>();
    T* yp = writes_y ? ctx.Output(0, x.shape(), x.dtype()).template data<T>() : nullptr;
    std::vector<double> means(rows), inv_stds(rows);
    ctx.threads().ParallelFor(rows, GrainFor(cols), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* src = xp + row * cols;
        const double m = cols > 0 ? Sum(src, cols) / static_cast<double>(cols) : 0.0;
        const double squares = SquaresAbout(src, cols, static_cast<T>(m));
        const double inv_std = 1.0 / std::sqrt((cols > 0 ? squares / static_cast<double>(cols) : 0.0) + epsilon);
        means[row] = m;
        inv_stds[row] = inv_std;
        if (!yp) continue;
        T* dst = yp + row * cols;
        const T mean_t = static_cast<T>(m), inv_std_t = static_cast<T>(inv_std);
        if (bias.empty()) {
          for (int64_t i = 0; i < cols; ++i) dst[i] = (src[i] - mean_t) * inv_std_t * scale[i];
        } else {
          for (int64_t i = 0; i < cols; ++i) dst[i] = (src[i] - mean_t) * inv_std_t * scale[i] + bias[i];
        }
      }
    });
    if (ctx.HasOutput(1)) StoreDoubles(ctx.Output(1, stat_shape, stat_dtype), means, node.Describe());
    if (ctx.HasOutput(2)) StoreDoubles(ctx.Output(2, stat_shape, stat_dtype), inv_stds, node.Describe());
  });
}

}  // namespace

// ai.edgetrain.LayerNormalizationGrad(dY, X, Scale, Mean, InvStdDev; axis) -> (dX, dScale, dB),
// with dScale and dB of the normalized shape X.shape[axis:] (summed over the leading axes):
//   dX = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dY * Scale, means over normalized axes
// Not centered (RMS normalization: xhat = X * inv_std) the mean(g) term and dB drop out.
void LayerNormalizationBackward(KernelContext& ctx, bool centered) {
  const Node& node = ctx.node();
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input X must have rank >= 1");
  ET_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
           ": dY (", DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match X (",
           DataTypeName(x.dtype()), " ", ShapeToString(x.shape()), ")");
  const int64_t axis = ctx.Attributes<LayerNormAttributes>().Axis(node, rank);
  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  const int64_t rows = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t cols = NumElements(normalized);
  if (centered && DnnlLayerNormalizationGrad(ctx, rows, cols, normalized)) return;
  const size_t inv_std_input = centered ? 4 : 3;
  const std::vector<double> inv_stds = ctx.Input(inv_std_input).ToDoubleVector();
  const std::vector<double> means = centered ? ctx.Input(3).ToDoubleVector() : std::vector<double>(rows, 0.0);
  ET_CHECK(static_cast<int64_t>(means.size()) == rows && static_cast<int64_t>(inv_stds.size()) == rows,
           ErrorCode::kInvalidArgument, node.Describe(), centered ? ": Mean " : ": ",
           centered ? ShapeToString(ctx.Input(3).shape()) + " and " : std::string(), "InvStdDev ",
           ShapeToString(ctx.Input(inv_std_input).shape()), " must hold one value per row (", rows, ")");

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale = ExpandToNormalizedShape<T>(ctx, ctx.Input(2), "Scale", normalized);
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    T* dxp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    ctx.threads().ParallelFor(rows, GrainFor(cols), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = xp + row * cols;
        const T* dyr = dyp + row * cols;
        const T* scale_p = scale.data();
        const T mean_t = static_cast<T>(means[row]);
        const double inv_std = inv_stds[row];
        CenteredSums sums;
        const auto g_at = [dyr, scale_p](int64_t i) { return dyr[i] * scale_p[i]; };
        sums.Add(xr, g_at, cols, mean_t);
        // dX = inv_std * (g - mean(g) - (X - mean) * projection), projection = mean(g * xhat) * inv_std.
        const T mean_g = static_cast<T>(cols > 0 && centered ? sums.g / static_cast<double>(cols) : 0.0);
        const T projection =
            static_cast<T>(cols > 0 ? sums.g_centered * inv_std * inv_std / static_cast<double>(cols) : 0.0);
        const T inv_std_t = static_cast<T>(inv_std);
        T* dxr = dxp + row * cols;
#pragma omp simd
        for (int64_t i = 0; i < cols; ++i) {
          dxr[i] = inv_std_t * (dyr[i] * scale_p[i] - mean_g - (xr[i] - mean_t) * projection);
        }
      }
    });
    // Column sums; each task owns a contiguous range of columns and walks the rows in order.
    std::vector<double> dscale(static_cast<size_t>(cols), 0.0), dbias(static_cast<size_t>(cols), 0.0);
    ctx.threads().ParallelFor(cols, GrainFor(rows), [&](int64_t begin, int64_t end) {
      for (int64_t row = 0; row < rows; ++row) {
        const T* xr = xp + row * cols;
        const T* dyr = dyp + row * cols;
        const T mean_t = static_cast<T>(means[row]), inv_std_t = static_cast<T>(inv_stds[row]);
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) {
          dbias[i] += static_cast<double>(dyr[i]);
          dscale[i] += static_cast<double>(dyr[i] * (xr[i] - mean_t) * inv_std_t);
        }
      }
    });
    StoreDoubles(ctx.Output(1, normalized, x.dtype()), dscale, node.Describe());
    if (centered) StoreDoubles(ctx.Output(2, normalized, x.dtype()), dbias, node.Describe());
  });
}

namespace {

void LayerNormalizationGradKernel(KernelContext& ctx) { LayerNormalizationBackward(ctx, /*centered=*/true); }

// LayerNormalizationGrad in standard ops: X, dY, Mean and InvStdDev flattened to [rows, cols] at `axis`.
std::shared_ptr<const FunctionDef> LayerNormalizationGradFunction() {
  FunctionBuilder f("LayerNormalizationGrad", {"dY", "X", "Scale", "Mean", "InvStdDev"}, {"dX", "dScale", "dB"},
                    {"axis"});
  const Attribute axis = Attribute::Ref(Attribute::Kind::kInt, "axis");
  const Attribute last_axis = Attribute::Ints({1});
  f.Ints("row_shape", {1, -1});
  f.Ints("first_axis", {0});
  f.Op("Flatten", {"X"}, "x2", {{"axis", axis}});
  f.Op("Flatten", {"dY"}, "dy2", {{"axis", axis}});
  f.Op("Flatten", {"Mean"}, "mean_any", {{"axis", axis}});
  f.Op("Flatten", {"InvStdDev"}, "inv_std_any", {{"axis", axis}});
  f.Op("CastLike", {"mean_any", "X"}, "mean2");
  f.Op("CastLike", {"inv_std_any", "X"}, "inv_std2");
  f.Op("Shape", {"X"}, "normalized_shape", {{"start", axis}});
  f.Op("Expand", {"Scale", "normalized_shape"}, "scale_full");
  f.Op("Reshape", {"scale_full", "row_shape"}, "scale2");
  f.Op("Sub", {"x2", "mean2"}, "centered");
  f.Op("Mul", {"centered", "inv_std2"}, "xhat");
  f.Op("Mul", {"dy2", "scale2"}, "g");
  f.Op("Mul", {"g", "xhat"}, "g_xhat");
  f.Op("ReduceMean", {"g"}, "mean_g", {{"axes", last_axis}, {"keepdims", Keepdims(true)}});
  f.Op("ReduceMean", {"g_xhat"}, "mean_g_xhat", {{"axes", last_axis}, {"keepdims", Keepdims(true)}});
  f.Op("Sub", {"g", "mean_g"}, "g_centered");
  f.Op("Mul", {"xhat", "mean_g_xhat"}, "projection");
  f.Op("Sub", {"g_centered", "projection"}, "residual");
  f.Op("Mul", {"inv_std2", "residual"}, "dx2");
  f.Op("Shape", {"X"}, "x_shape");
  f.Op("Reshape", {"dx2", "x_shape"}, "dX");
  f.Op("Mul", {"dy2", "xhat"}, "dy_xhat");
  f.Op("ReduceSum", {"dy_xhat", "first_axis"}, "dscale_flat", {{"keepdims", Keepdims(false)}});
  f.Op("Reshape", {"dscale_flat", "normalized_shape"}, "dScale");
  f.Op("ReduceSum", {"dy2", "first_axis"}, "dbias_flat", {{"keepdims", Keepdims(false)}});
  f.Op("Reshape", {"dbias_flat", "normalized_shape"}, "dB");
  return f.Build();
}

// Whether static shapes show that `param` has exactly X's dims from `axis` on.
bool HasNormalizedShape(const GradientContext& g, const std::string& x, const std::string& param, int64_t axis) {
  const ValueInfo* xi = g.Info(x);
  const ValueInfo* pi = g.Info(param);
  if (!xi || !pi || !xi->has_shape || !pi->has_shape) return false;
  const int64_t rank = static_cast<int64_t>(xi->shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank || static_cast<int64_t>(pi->shape.size()) != rank - axis) return false;
  for (int64_t d = axis; d < rank; ++d) {
    const Dim& a = xi->shape[d];
    const Dim& b = pi->shape[d - axis];
    const bool same = (a.known() && b.known() && a.value == b.value) || (!a.symbol.empty() && a.symbol == b.symbol);
    if (!same) return false;
  }
  return true;
}

// LayerNormalization: the fused LayerNormalizationGrad for dY; plain ops for gradients arriving at
// the Mean / InvStdDev outputs. Statistics come from the forward node when it saved them in X's
// precision, else from a second LayerNormalization that outputs them.
void LayerNormalizationGradient(GradientContext& g) {
  const Node& node = g.node();
  const std::string dy = g.dY(0), dmean = g.dY(1), dinv_std = g.dY(2);
  const std::string& x = g.X(0);
  const std::string& scale = g.X(1);
  const std::string& bias = g.X(2);
  const LayerNormAttributes attrs = LayerNormAttributes::Parse(node, g.opset());
  const int64_t axis = attrs.axis;
  const float epsilon = attrs.epsilon;
  const int64_t stash_type = static_cast<int64_t>(attrs.stash);
  const bool needs_x = g.NeedsGrad(0), needs_scale = g.NeedsGrad(1), needs_bias = !bias.empty() && g.NeedsGrad(2);

  if (!dy.empty() && needs_bias && !needs_x && !needs_scale) {
    g.SetGrad(2, dy, /*maybe_broadcast=*/true);
    return;
  }
  const bool dy_flows = !dy.empty() && (needs_x || needs_scale || needs_bias);
  const bool stats_flow = needs_x && (!dmean.empty() || !dinv_std.empty());
  if (!dy_flows && !stats_flow) return;

  const DataType x_type = g.TypeOf(x);
  const bool saved = g.NumOutputs() >= 3 && !g.Y(1).empty() && !g.Y(2).empty() &&
                     stash_type == static_cast<int64_t>(x_type);
  std::string mean = g.Y(1), inv_std = g.Y(2);
  if (!saved) {
    const std::vector<std::string> recomputed =
        g.Emit("LayerNormalization", {x, scale}, 3,
               {{"axis", Attribute::Int(axis)},
                {"epsilon", Attribute::Float(epsilon)},
                {"stash_type", Attribute::Int(static_cast<int64_t>(x_type))}});
    mean = recomputed[1];
    inv_std = recomputed[2];
  }

  if (dy_flows) {
    const std::vector<std::string> grads = g.Emit("LayerNormalizationGrad", {dy, x, scale, mean, inv_std}, 3,
                                                  {{"axis", Attribute::Int(axis)}}, kEdgetrainDomain);
    g.SetGrad(0, grads[0]);
    // dScale and dB have the normalized shape; a parameter that broadcasts to it is summed down.
    auto to_param = [&](const std::string& value, const std::string& param) {
      if (HasNormalizedShape(g, x, param, axis)) return value;
      return g.Op("SumToShape", {value, g.ShapeOf(param)}, {}, kEdgetrainDomain);
    };
    if (needs_scale) g.SetGrad(1, to_param(grads[1], scale));
    if (needs_bias) g.SetGrad(2, to_param(grads[2], bias));
  }

  if (stats_flow) {
    // mean = sum(x) / K, inv_std = (var + eps)^-1/2: d inv_std / dx = -inv_std^2 * xhat / K.
    const std::string count = g.Op(
        "CastLike", {g.Op("ReduceProd", {g.Op("Shape", {x}, {{"start", Attribute::Int(axis)}})},
                          {{"keepdims", Attribute::Int(0)}}),
                     x});
    std::string dx;
    if (!dmean.empty()) {
      dx = g.Op("Div", {g.Op("CastLike", {dmean, x}), count});
    }
    if (!dinv_std.empty()) {
      const std::string xhat = g.Op("Mul", {g.Op("Sub", {x, mean}), inv_std});
      const std::string coefficient =
          g.Op("Div", {g.Op("Mul", {g.Op("Mul", {inv_std, inv_std}), g.Op("CastLike", {dinv_std, x})}), count});
      const std::string term = g.Op("Mul", {coefficient, xhat});
      dx = dx.empty() ? g.Op("Neg", {term}) : g.Op("Sub", {dx, term});
    } else {
      dx = g.Op("Expand", {dx, g.ShapeOf(x)});
    }
    g.SetGrad(0, dx);
  }
}

void RegisterLayerNormalization(OpRegistry& r) {
  ET_IF_BUILT("", "LayerNormalization") {
    WithAttributes<LayerNormAttributes>(RegisterOnnx(r, "LayerNormalization", LayerNormalization));
    r.SetGradient("LayerNormalization", LayerNormalizationGradient);
  }
  ET_IF_BUILT("ai.edgetrain", "LayerNormalizationGrad")
  RegisterFused(r, "LayerNormalizationGrad", LayerNormalizationGradKernel,
                ET_TRAINING_BODY(LayerNormalizationGradFunction()));
}

// ---- LpNormalization ----

void LpNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), rank, node.Describe() + " attribute 'axis'");
  const int64_t p = node.GetInt("p", 2);
  ET_CHECK(p == 1 || p == 2, ErrorCode::kNotImplemented, node.Describe(), ": p = ", p,
           " is not supported (1 or 2 only)");
  const int64_t outer = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t length = x.dim(static_cast<size_t>(axis));
  const int64_t inner = DimProduct(x.shape(), static_cast<size_t>(axis) + 1, x.rank());

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    ctx.threads().ParallelFor(outer, GrainFor(length * inner), [&](int64_t begin, int64_t end) {
      std::vector<double> norms(static_cast<size_t>(inner));
      for (int64_t o = begin; o < end; ++o) {
        const T* src = xp + o * length * inner;
        T* dst = yp + o * length * inner;
        std::fill(norms.begin(), norms.end(), 0.0);
        for (int64_t k = 0; k < length; ++k) {
          const T* row = src + k * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const double v = static_cast<double>(row[i]);
            norms[i] += p == 1 ? std::abs(v) : v * v;
          }
        }
        // A zero vector stays zero instead of becoming NaN.
        for (int64_t i = 0; i < inner; ++i) {
          const double norm = p == 1 ? norms[i] : std::sqrt(norms[i]);
          norms[i] = norm > 0 ? 1.0 / norm : 0.0;
        }
        for (int64_t k = 0; k < length; ++k) {
          for (int64_t i = 0; i < inner; ++i) dst[k * inner + i] = src[k * inner + i] * static_cast<T>(norms[i]);
        }
      }
    });
  });
}

// ---- MeanVarianceNormalization ----

void MeanVarianceNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t axis : node.GetInts("axes", {0, 2, 3})) {
    reduced[NormalizeAxis(axis, rank, node.Describe() + " attribute 'axes'")] = true;
  }
  Shape stat_shape = x.shape();
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) stat_shape[d] = 1;
  }
  const int64_t stat_count = NumElements(stat_shape);
  const double group_size = stat_count > 0 ? static_cast<double>(x.numel()) / static_cast<double>(stat_count) : 0.0;
  const Shape strides = BroadcastStrides(stat_shape, x.shape());
  const Shape& dims = x.shape();

  // Calls fn(element, stat_index) for every element in row-major order.
  auto for_each = [&](auto&& fn) {
    std::vector<int64_t> index(dims.size(), 0);
    int64_t stat = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      fn(e, stat);
      for (size_t d = dims.size(); d-- > 0;) {
        stat += strides[d];
        if (++index[d] < dims[d]) break;
        stat -= strides[d] * dims[d];
        index[d] = 0;
      }
    }
  };

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    std::vector<double> mean(static_cast<size_t>(stat_count), 0.0), squares(static_cast<size_t>(stat_count), 0.0);
    for_each([&](int64_t e, int64_t s) { mean[s] += static_cast<double>(xp[e]); });
    for (double& m : mean) m /= group_size;
    for_each([&](int64_t e, int64_t s) {
      const double d = static_cast<double>(xp[e]) - mean[s];
      squares[s] += d * d;
    });
    std::vector<double> inv_std(static_cast<size_t>(stat_count));
    for (int64_t s = 0; s < stat_count; ++s) inv_std[s] = 1.0 / (std::sqrt(squares[s] / group_size) + 1e-9);
    for_each([&](int64_t e, int64_t s) {
      yp[e] = static_cast<T>((static_cast<double>(xp[e]) - mean[s]) * inv_std[s]);
    });
  });
}

// ---- LRN ----

void LocalResponseNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  CheckRankAtLeast2(node, x, "input");
  ET_CHECK(node.HasAttr("size"), ErrorCode::kInvalidModel, node.Describe(), ": attribute 'size' is required");
  const int64_t size = node.GetInt("size", 1);
  ET_CHECK(size >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": attribute 'size' must be >= 1, got ", size);
  const double alpha = node.GetFloat("alpha", 1e-4f);
  const double beta = node.GetFloat("beta", 0.75f);
  const double bias = node.GetFloat("bias", 1.0f);
  const int64_t batch = x.dim(0), channels = x.dim(1);
  const int64_t spatial = DimProduct(x.shape(), 2, x.rank());
  const int64_t before = (size - 1) / 2, after = size - 1 - before;

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    ctx.threads().ParallelFor(batch * channels, GrainFor(spatial * size), [&](int64_t begin, int64_t end) {
      std::vector<double> square_sum(static_cast<size_t>(spatial));
      for (int64_t block = begin; block < end; ++block) {
        const int64_t n = block / channels, c = block % channels;
        std::fill(square_sum.begin(), square_sum.end(), 0.0);
        const int64_t first = std::max<int64_t>(0, c - before), last = std::min<int64_t>(channels - 1, c + after);
        for (int64_t k = first; k <= last; ++k) {
          const T* src = xp + (n * channels + k) * spatial;
          for (int64_t i = 0; i < spatial; ++i) {
            const double v = static_cast<double>(src[i]);
            square_sum[i] += v * v;
          }
        }
        const T* src = xp + block * spatial;
        T* dst = yp + block * spatial;
        for (int64_t i = 0; i < spatial; ++i) {
          dst[i] = static_cast<T>(static_cast<double>(src[i]) *
                                  std::pow(bias + alpha / static_cast<double>(size) * square_sum[i], -beta));
        }
      }
    });
  });
}

}  // namespace

void RegisterNormalizationOps(OpRegistry& r) {
  RegisterBatchNormalization(r);
  ET_REGISTER_ONNX(r, "InstanceNormalization", InstanceNormalization);
  ET_IF_BUILT("", "InstanceNormalization") r.SetGradient("InstanceNormalization", InstanceNormalizationGradient);
  ET_REGISTER_ONNX(r, "GroupNormalization", GroupNormalization, 18);
  ET_IF_BUILT("", "GroupNormalization") r.SetGradient("GroupNormalization", GroupNormalizationGradient);
  RegisterLayerNormalization(r);
  ET_REGISTER_ONNX(r, "LpNormalization", LpNormalization);
  ET_REGISTER_ONNX(r, "MeanVarianceNormalization", MeanVarianceNormalization);
  ET_REGISTER_ONNX(r, "LRN", LocalResponseNormalization);
}

}  // namespace edgetrain
