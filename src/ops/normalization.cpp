// Normalization family: BatchNormalization, InstanceNormalization, LayerNormalization,
// LpNormalization, MeanVarianceNormalization, LRN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/registry.hpp"

namespace edgetrain {
namespace {

// Product of dims[begin, end).
int64_t DimProduct(const Shape& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= dims[i];
  return product;
}

// Grain for ParallelFor over `n` blocks of `block` elements each: aim for >= 16k elements a task.
int64_t GrainFor(int64_t block) { return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(block, 1)); }

// Writes `values` (double) into a float tensor of dtype float32/float64.
void StoreDoubles(Tensor& out, const std::vector<double>& values, const std::string& what) {
  VisitFloat(out.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = static_cast<T>(values[i]);
  });
}

// A per-channel parameter (scale, bias, mean, var) of `channels` values, read as doubles.
std::vector<double> ChannelParameter(const KernelContext& ctx, size_t index, const char* name, int64_t channels) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == channels, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input '", name,
           "' has shape ", ShapeToString(t.shape()), " but ", channels, " values are expected");
  ET_CHECK(IsFloatType(t.dtype()), ErrorCode::kNotImplemented, ctx.node().Describe(), ": input '", name,
           "' has unsupported element type ", DataTypeName(t.dtype()));
  return t.ToDoubleVector();
}

// Y[n, c, s] = X[n, c, s] * multiplier[c] + offset[c] over blocks of `spatial` elements.
template <typename T>
void ApplyChannelAffine(KernelContext& ctx, const T* x, T* y, int64_t batch, int64_t channels, int64_t spatial,
                        const std::vector<double>& multiplier, const std::vector<double>& offset) {
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

// ---- BatchNormalization ----

void BatchNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, node.Describe(), ": input X must have rank >= 2, got shape ",
           ShapeToString(x.shape()));
  const double epsilon = node.GetFloat("epsilon", 1e-5f);
  const double momentum = node.GetFloat("momentum", 0.9f);
  // Before opset 14 training mode was implied by requesting the statistics outputs.
  const bool training = ctx.opset() >= 14
                            ? node.GetInt("training_mode", 0) != 0
                            : (ctx.HasOutput(1) || ctx.HasOutput(2) || ctx.HasOutput(3) || ctx.HasOutput(4));
  // Opsets 7-8: spatial=0 keeps separate statistics for every C x D1 x ... x Dn position.
  const bool spatial = ctx.opset() >= 9 || node.GetInt("spatial", 1) != 0;

  const int64_t batch = x.dim(0);
  const int64_t channels = spatial ? x.dim(1) : DimProduct(x.shape(), 1, x.rank());
  const int64_t spatial_size = spatial ? DimProduct(x.shape(), 2, x.rank()) : 1;

  const std::vector<double> scale = ChannelParameter(ctx, 1, "scale", channels);
  const std::vector<double> bias = ChannelParameter(ctx, 2, "B", channels);
  std::vector<double> mean = ChannelParameter(ctx, 3, "input_mean", channels);
  std::vector<double> var = ChannelParameter(ctx, 4, "input_var", channels);
  const DataType stat_dtype = ctx.Input(3).dtype();

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    Tensor& y = ctx.Output(0, x.shape(), x.dtype());
    T* yp = y.data<T>();

    if (training) {
      std::vector<double> batch_mean(channels), batch_var(channels);
      const double count = static_cast<double>(batch * spatial_size);
      ctx.threads().ParallelFor(channels, GrainFor(batch * spatial_size), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          double sum = 0;
          for (int64_t n = 0; n < batch; ++n) {
            const T* src = xp + (n * channels + c) * spatial_size;
            for (int64_t i = 0; i < spatial_size; ++i) sum += static_cast<double>(src[i]);
          }
          const double m = count > 0 ? sum / count : 0.0;
          double squares = 0;
          for (int64_t n = 0; n < batch; ++n) {
            const T* src = xp + (n * channels + c) * spatial_size;
            for (int64_t i = 0; i < spatial_size; ++i) {
              const double d = static_cast<double>(src[i]) - m;
              squares += d * d;
            }
          }
          batch_mean[c] = m;
          batch_var[c] = count > 0 ? squares / count : 0.0;  // population variance, as the spec says
        }
      });
      std::vector<double> running_mean(channels), running_var(channels), saved_inv_std(channels);
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
      mean = std::move(batch_mean);
      var = std::move(batch_var);
    }

    std::vector<double> multiplier(channels), offset(channels);
    for (int64_t c = 0; c < channels; ++c) {
      multiplier[c] = scale[c] / std::sqrt(var[c] + epsilon);
      offset[c] = bias[c] - mean[c] * multiplier[c];
    }
    ApplyChannelAffine<T>(ctx, xp, yp, batch, channels, spatial_size, multiplier, offset);
  });
}

// ---- InstanceNormalization ----

void InstanceNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 2, got shape ",
           ShapeToString(x.shape()));
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

// ---- LayerNormalization ----

// `param` (Scale or B) broadcast to `normalized` (X's dims from `axis` on), as `count` values of T.
template <typename T>
std::vector<T> ExpandToNormalizedShape(const KernelContext& ctx, const Tensor& param, const char* name,
                                       const Shape& normalized) {
  Shape dims = param.shape();
  // Leading 1s may extend past the normalized dims (e.g. Scale [1, 1, C] for axis=-1).
  while (dims.size() > normalized.size() && dims.front() == 1) dims.erase(dims.begin());
  bool compatible = dims.size() <= normalized.size();
  for (size_t i = 0; compatible && i < dims.size(); ++i) {
    const int64_t target = normalized[normalized.size() - dims.size() + i];
    compatible = dims[i] == target || dims[i] == 1;
  }
  ET_CHECK(compatible, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input '", name, "' of shape ",
           ShapeToString(param.shape()), " does not broadcast to the normalized shape ", ShapeToString(normalized));
  ET_CHECK(param.dtype() == DataTypeOf<T>(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input '", name,
           "' has element type ", DataTypeName(param.dtype()), " but X has ", DataTypeName(DataTypeOf<T>()));
  const T* src = param.data<T>();
  const int64_t count = NumElements(normalized);
  std::vector<T> expanded(static_cast<size_t>(count));
  if (param.numel() == count) {
    std::copy(src, src + count, expanded.begin());
    return expanded;
  }
  const std::vector<int64_t> strides = BroadcastStrides(dims, normalized);
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

void LayerNormalization(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input X must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", -1), rank, node.Describe() + " attribute 'axis'");
  const double epsilon = node.GetFloat("epsilon", 1e-5f);
  const int64_t stash_type = node.GetInt("stash_type", 1);
  ET_CHECK(stash_type == static_cast<int64_t>(DataType::kFloat32) || stash_type == static_cast<int64_t>(DataType::kFloat64),
           ErrorCode::kNotImplemented, node.Describe(), ": stash_type ", stash_type, " is not supported (1 or 11 only)");
  const DataType stat_dtype = static_cast<DataType>(stash_type);

  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  const int64_t rows = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t cols = NumElements(normalized);
  Shape stat_shape = x.shape();
  for (int64_t d = axis; d < rank; ++d) stat_shape[d] = 1;

  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale = ExpandToNormalizedShape<T>(ctx, ctx.Input(1), "Scale", normalized);
    std::vector<T> bias;
    if (ctx.HasInput(2)) bias = ExpandToNormalizedShape<T>(ctx, ctx.Input(2), "B", normalized);
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    std::vector<double> means(rows), inv_stds(rows);
    ctx.threads().ParallelFor(rows, GrainFor(cols), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* src = xp + row * cols;
        T* dst = yp + row * cols;
        double sum = 0;
        for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(src[i]);
        const double m = cols > 0 ? sum / static_cast<double>(cols) : 0.0;
        double squares = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const double d = static_cast<double>(src[i]) - m;
          squares += d * d;
        }
        const double inv_std = 1.0 / std::sqrt((cols > 0 ? squares / static_cast<double>(cols) : 0.0) + epsilon);
        means[row] = m;
        inv_stds[row] = inv_std;
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
  const std::vector<int64_t> strides = BroadcastStrides(stat_shape, x.shape());
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
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 2, got shape ",
           ShapeToString(x.shape()));
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
  RegisterOnnx(r, "BatchNormalization", BatchNormalization);
  RegisterOnnx(r, "InstanceNormalization", InstanceNormalization);
  RegisterOnnx(r, "LayerNormalization", LayerNormalization);
  RegisterOnnx(r, "LpNormalization", LpNormalization);
  RegisterOnnx(r, "MeanVarianceNormalization", MeanVarianceNormalization);
  RegisterOnnx(r, "LRN", LocalResponseNormalization);
}

}  // namespace edgetrain
