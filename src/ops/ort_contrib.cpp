// ONNX Runtime's contrib operators that its graph optimizers put into training graphs (com.microsoft, with
// ORT's inputs, outputs, attributes and defaults): the Gelu family (Gelu, FastGelu, BiasGelu, QuickGelu and
// QuickGeluGrad), ConcatTraining and its gradient SplitTraining, SimplifiedLayerNormalization,
// SkipLayerNormalization, SkipSimplifiedLayerNormalization and BiasDropout. The other gradients of these
// ops (GeluGrad, FastGeluGrad, BiasGeluGrad_dX, SimplifiedLayerNormalizationGrad, DropoutGrad) are in
// ort_gradients.cpp.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise_util.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

const std::string& What(const KernelContext& ctx) { return ctx.node().Describe(); }

int64_t DimProduct(const Shape& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t d = begin; d < end; ++d) product *= dims[d];
  return product;
}

void CheckCounts(const KernelContext& ctx, size_t min_inputs, size_t max_inputs, size_t max_outputs) {
  ET_CHECK(ctx.NumInputs() >= min_inputs && ctx.NumInputs() <= max_inputs, ErrorCode::kInvalidModel, What(ctx),
           ": expects ", min_inputs, " to ", max_inputs, " inputs, got ", ctx.NumInputs());
  ET_CHECK(ctx.NumOutputs() >= 1 && ctx.NumOutputs() <= max_outputs, ErrorCode::kInvalidModel, What(ctx),
           ": expects 1 to ", max_outputs, " outputs, got ", ctx.NumOutputs());
  for (size_t i = 0; i < min_inputs; ++i)
    ET_CHECK(ctx.HasInput(i), ErrorCode::kInvalidModel, What(ctx), ": input ", i, " is required");
}

// Checks that `t` is a float tensor of x's element type.
void CheckSameType(const KernelContext& ctx, const Tensor& x, const Tensor& t, const char* name) {
  ET_CHECK(t.dtype() == x.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": input '", name, "' is ",
           DataTypeName(t.dtype()), " but the input is ", DataTypeName(x.dtype()));
}

// A 1-D input over x's last dim (a bias, gamma or beta), read as doubles.
std::vector<double> LastDimVector(const KernelContext& ctx, const Tensor& x, const Tensor& t, const char* name) {
  CheckSameType(ctx, x, t, name);
  ET_CHECK(x.rank() >= 1 && t.rank() == 1 && t.dim(0) == x.dim(x.rank() - 1), ErrorCode::kInvalidArgument, What(ctx),
           ": input '", name, "' ", ShapeToString(t.shape()), " must be 1-D over the last dim of ",
           ShapeToString(x.shape()));
  return t.ToDoubleVector();
}

// ---- the Gelu family: y = f(x [+ bias]) ----

double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }
double FastGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Y = f(X + bias), bias (input `bias_input`, if present) 1-D over X's last dim.
template <typename F>
void BiasActivation(KernelContext& ctx, size_t bias_input, F f) {
  const Tensor& x = ctx.Input(0);
  std::vector<double> bias;
  if (ctx.HasInput(bias_input)) bias = LastDimVector(ctx, x, ctx.Input(bias_input), "bias");
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t width = static_cast<int64_t>(bias.size());
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double v = static_cast<double>(in[i]) + (width > 0 ? bias[i % width] : 0.0);
        out[i] = static_cast<T>(f(v));
      }
    });
  });
}

void GeluKernel(KernelContext& ctx) {
  CheckCounts(ctx, 1, 1, 1);
  BiasActivation(ctx, 1, Gelu);
}
void FastGeluKernel(KernelContext& ctx) {
  CheckCounts(ctx, 1, 2, 1);
  BiasActivation(ctx, 1, FastGelu);
}
void BiasGeluKernel(KernelContext& ctx) {
  CheckCounts(ctx, 2, 2, 1);
  BiasActivation(ctx, 1, Gelu);
}

double QuickGeluAlpha(const KernelContext& ctx) { return ctx.node().GetFloat("alpha", 1.702f); }

// QuickGelu(X; alpha = 1.702) = X * sigmoid(alpha * X)
void QuickGeluKernel(KernelContext& ctx) {
  CheckCounts(ctx, 1, 1, 1);
  const double alpha = QuickGeluAlpha(ctx);
  BiasActivation(ctx, 1, [alpha](double x) { return x * Sigmoid(alpha * x); });
}

// QuickGeluGrad(dY, X; alpha) = dY * (s + alpha * X * s * (1 - s)), s = sigmoid(alpha * X)
void QuickGeluGradKernel(KernelContext& ctx) {
  CheckCounts(ctx, 2, 2, 1);
  const Tensor& dy = ctx.Input(0);
  const Tensor& x = ctx.Input(1);
  ET_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": dY (",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()), ") must match X (", DataTypeName(x.dtype()), " ",
           ShapeToString(x.shape()), ")");
  const double alpha = QuickGeluAlpha(ctx);
  Tensor& dx = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = dy.data<T>();
    const T* v = x.data<T>();
    T* out = dx.data<T>();
    ctx.threads().ParallelFor(x.numel(), elementwise::kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double xi = static_cast<double>(v[i]), s = Sigmoid(alpha * xi);
        out[i] = static_cast<T>(static_cast<double>(g[i]) * (s + alpha * xi * s * (1.0 - s)));
      }
    });
  });
}

// ---- ConcatTraining and SplitTraining ----

// Moves `blocks` blocks between `piece` (block b at b * piece_width elements) and `whole` (block b at
// b * total_width + start): into `whole`, or out of it.
void MoveBlocks(const Tensor& piece, const Tensor& whole, int64_t blocks, int64_t piece_width, int64_t total_width,
                int64_t start, bool into_whole) {
  const size_t element = DataTypeSize(whole.dtype());
  auto* whole_bytes = static_cast<char*>(const_cast<void*>(whole.raw()));
  auto* piece_bytes = static_cast<char*>(const_cast<void*>(piece.raw()));
  for (int64_t b = 0; b < blocks; ++b) {
    char* w = whole_bytes + (b * total_width + start) * static_cast<int64_t>(element);
    char* p = piece_bytes + b * piece_width * static_cast<int64_t>(element);
    const size_t n = static_cast<size_t>(piece_width) * element;
    if (n == 0) continue;
    if (into_whole)
      std::memcpy(w, p, n);
    else
      std::memcpy(p, w, n);
  }
}

// ConcatTraining(inputs...; axis) -> (concat_result, per_input_length: int64 [inputs], each input's dim at axis)
void ConcatTrainingKernel(KernelContext& ctx) {
  ET_CHECK(ctx.NumInputs() >= 1 && ctx.NumOutputs() >= 1 && ctx.NumOutputs() <= 2, ErrorCode::kInvalidModel, What(ctx),
           ": expects 1 or more inputs and 1 to 2 outputs, got ", ctx.NumInputs(), " and ", ctx.NumOutputs());
  ET_CHECK(ctx.node().HasAttr("axis"), ErrorCode::kInvalidModel, What(ctx), ": attribute 'axis' is required");
  const Tensor& first = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(first.rank());
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx) + " attribute 'axis'");
  Shape out_shape = first.shape();
  out_shape[axis] = 0;
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    const Tensor& t = ctx.Input(i);
    bool compatible = t.dtype() == first.dtype() && static_cast<int64_t>(t.rank()) == rank;
    for (int64_t d = 0; compatible && d < rank; ++d) compatible = d == axis || t.dim(d) == first.dim(d);
    ET_CHECK(compatible, ErrorCode::kInvalidArgument, What(ctx), ": input ", i, " (", DataTypeName(t.dtype()), " ",
             ShapeToString(t.shape()), ") does not match input 0 (", DataTypeName(first.dtype()), " ",
             ShapeToString(first.shape()), ") outside axis ", axis);
    lengths.push_back(t.dim(axis));
    out_shape[axis] += t.dim(axis);
  }
  const int64_t blocks = DimProduct(first.shape(), 0, static_cast<size_t>(axis));
  const int64_t inner = DimProduct(first.shape(), static_cast<size_t>(axis) + 1, first.rank());
  Tensor& out = ctx.Output(0, out_shape, first.dtype());
  int64_t start = 0;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    MoveBlocks(ctx.Input(i), out, blocks, lengths[i] * inner, out_shape[axis] * inner, start, true);
    start += lengths[i] * inner;
  }
  if (ctx.HasOutput(1)) {
    Tensor& per_input = ctx.Output(1, Shape{static_cast<int64_t>(lengths.size())}, DataType::kInt64);
    std::copy(lengths.begin(), lengths.end(), per_input.data<int64_t>());
  }
}

// SplitTraining(input, split?: int64; axis) -> outputs...: split along axis into the given lengths, or equally.
void SplitTrainingKernel(KernelContext& ctx) {
  ET_CHECK(ctx.NumInputs() >= 1 && ctx.NumInputs() <= 3 && ctx.NumOutputs() >= 1, ErrorCode::kInvalidModel, What(ctx),
           ": expects 1 to 3 inputs and 1 or more outputs");
  const Tensor& x = ctx.Input(0);
  const int64_t axis =
      NormalizeAxis(ctx.node().GetInt("axis", 0), static_cast<int64_t>(x.rank()), What(ctx) + " attribute 'axis'");
  const int64_t outputs = static_cast<int64_t>(ctx.NumOutputs());
  std::vector<int64_t> lengths;
  if (ctx.HasInput(1)) {
    lengths = ctx.Input(1).ToInt64Vector();
  } else {
    ET_CHECK(x.dim(axis) % outputs == 0, ErrorCode::kInvalidArgument, What(ctx), ": dim ", x.dim(axis), " of axis ",
             axis, " does not split equally into ", outputs, " outputs");
    lengths.assign(static_cast<size_t>(outputs), x.dim(axis) / outputs);
  }
  int64_t total = 0;
  for (int64_t length : lengths) total += length < 0 ? -1 : length;
  ET_CHECK(static_cast<int64_t>(lengths.size()) == outputs && total == x.dim(axis), ErrorCode::kInvalidArgument,
           What(ctx), ": split lengths (", lengths.size(), " of them, summing to ", total, ") must be ", outputs,
           " lengths >= 0 summing to dim ", x.dim(axis), " of axis ", axis);
  const int64_t blocks = DimProduct(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t inner = DimProduct(x.shape(), static_cast<size_t>(axis) + 1, x.rank());
  int64_t start = 0;
  for (int64_t i = 0; i < outputs; ++i) {
    Shape shape = x.shape();
    shape[axis] = lengths[i];
    if (ctx.HasOutput(i)) {
      Tensor& piece = ctx.Output(i, shape, x.dtype());
      MoveBlocks(piece, x, blocks, lengths[i] * inner, x.dim(axis) * inner, start, false);
    }
    start += lengths[i] * inner;
  }
}

// ---- layer normalizations over the last dims ----

struct RowStatistics {
  std::vector<double> mean, inv_std;
};

// Normalises rows of `cols` values: y = (v - mean) * inv_std * gamma + beta, with mean 0 when !centered.
template <typename T>
RowStatistics NormalizeRows(KernelContext& ctx, const double* values, int64_t rows, int64_t cols, bool centered,
                            double epsilon, const std::vector<double>& gamma, const std::vector<double>& beta, T* out) {
  RowStatistics stats{std::vector<double>(rows), std::vector<double>(rows)};
  ctx.threads().ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const double* v = values + r * cols;
      double mean = 0, squares = 0;
      if (centered) {
        for (int64_t c = 0; c < cols; ++c) mean += v[c];
        mean = cols > 0 ? mean / static_cast<double>(cols) : 0.0;
      }
      for (int64_t c = 0; c < cols; ++c) squares += (v[c] - mean) * (v[c] - mean);
      const double inv_std = 1.0 / std::sqrt((cols > 0 ? squares / static_cast<double>(cols) : 0.0) + epsilon);
      stats.mean[r] = mean;
      stats.inv_std[r] = inv_std;
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = static_cast<T>((v[c] - mean) * inv_std * gamma[c] + (beta.empty() ? 0.0 : beta[c]));
    }
  });
  return stats;
}

void StoreStatistic(KernelContext& ctx, size_t output, const Shape& shape, DataType dtype,
                    const std::vector<double>& values) {
  if (!ctx.HasOutput(output)) return;
  Tensor& t = ctx.Output(output, shape, dtype);
  VisitFloat(dtype, What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = static_cast<T>(values[i]);
  });
}

// SimplifiedLayerNormalization(X, scale; axis = -1, epsilon = 1e-5, stash_type = 1) -> (Y, inv_std_var?):
// RMS normalization of X's dims from axis on; inv_std_var has those dims set to 1.
void SimplifiedLayerNormalizationKernel(KernelContext& ctx) {
  CheckCounts(ctx, 2, 2, 2);
  const Tensor& x = ctx.Input(0);
  const Tensor& scale = ctx.Input(1);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": input X must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", -1), rank, What(ctx) + " attribute 'axis'");
  const int64_t stash_type = ctx.node().GetInt("stash_type", 1);
  ET_CHECK(stash_type == 1 || stash_type == 11, ErrorCode::kNotImplemented, What(ctx), ": stash_type ", stash_type,
           " is not supported (1 or 11 only)");
  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  CheckSameType(ctx, x, scale, "scale");
  ET_CHECK(scale.numel() == NumElements(normalized), ErrorCode::kInvalidArgument, What(ctx), ": input 'scale' ",
           ShapeToString(scale.shape()), " must hold the normalized dims ", ShapeToString(normalized));
  const int64_t rows = DimProduct(x.shape(), 0, static_cast<size_t>(axis)), cols = NumElements(normalized);
  const std::vector<double> values = x.ToDoubleVector(), gamma = scale.ToDoubleVector();
  Shape stat_shape = x.shape();
  for (int64_t d = axis; d < rank; ++d) stat_shape[d] = 1;
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowStatistics stats =
        NormalizeRows(ctx, values.data(), rows, cols, false, ctx.node().GetFloat("epsilon", 1e-5f), gamma, {},
                      y.data<T>());
    StoreStatistic(ctx, 1, stat_shape, static_cast<DataType>(stash_type), stats.inv_std);
  });
}

// SkipLayerNormalization(input, skip, gamma, beta?, bias?; epsilon = 1e-12)
//   -> (output, mean?, inv_std_var?, input_skip_bias_sum?), normalised over the last dim.
// SkipSimplifiedLayerNormalization(input, skip, gamma, bias?; epsilon) is the same without centering and beta.
template <bool kSimplified>
void SkipLayerNormalizationKernel(KernelContext& ctx) {
  CheckCounts(ctx, 3, kSimplified ? 4 : 5, 4);
  const Tensor& x = ctx.Input(0);
  const Tensor& skip = ctx.Input(1);
  ET_CHECK(x.rank() >= 2, ErrorCode::kInvalidArgument, What(ctx), ": input ", ShapeToString(x.shape()),
           " must have rank >= 2");
  CheckSameType(ctx, x, skip, "skip");
  const int64_t cols = x.dim(x.rank() - 1), rows = x.numel() / std::max<int64_t>(cols, 1);
  // skip is the input's shape, or its trailing dims (broadcast over the leading ones).
  bool skip_fits = skip.rank() >= 1 && skip.rank() <= x.rank() && skip.numel() > 0 && x.numel() % skip.numel() == 0;
  for (size_t d = 0; skip_fits && d < skip.rank(); ++d)
    skip_fits = skip.dim(skip.rank() - 1 - d) == x.dim(x.rank() - 1 - d);
  ET_CHECK(skip_fits, ErrorCode::kInvalidArgument, What(ctx), ": input 'skip' ", ShapeToString(skip.shape()),
           " must match the input ", ShapeToString(x.shape()), " or its trailing dims");
  const std::vector<double> gamma = LastDimVector(ctx, x, ctx.Input(2), "gamma");
  std::vector<double> beta, bias;
  const size_t bias_input = kSimplified ? 3 : 4;
  if (!kSimplified && ctx.HasInput(3)) beta = LastDimVector(ctx, x, ctx.Input(3), "beta");
  if (ctx.HasInput(bias_input)) bias = LastDimVector(ctx, x, ctx.Input(bias_input), "bias");

  std::vector<double> sum = x.ToDoubleVector();
  const std::vector<double> s = skip.ToDoubleVector();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += s[i % s.size()] + (bias.empty() ? 0.0 : bias[i % bias.size()]);
  Shape stat_shape = x.shape();
  stat_shape.back() = 1;
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowStatistics stats =
        NormalizeRows(ctx, sum.data(), rows, cols, !kSimplified, ctx.node().GetFloat("epsilon", 1e-12f), gamma, beta,
                      y.data<T>());
    StoreStatistic(ctx, 1, stat_shape, DataType::kFloat32, stats.mean);
    StoreStatistic(ctx, 2, stat_shape, DataType::kFloat32, stats.inv_std);
    if (ctx.HasOutput(3)) {
      T* out = ctx.Output(3, x.shape(), x.dtype()).template data<T>();
      for (size_t i = 0; i < sum.size(); ++i) out[i] = static_cast<T>(sum[i]);
    }
  });
}

// ---- BiasDropout(data, bias, residual?, ratio?, training_mode?; seed) -> (dropout(data + bias) + residual, mask?)

void BiasDropoutKernel(KernelContext& ctx) {
  CheckCounts(ctx, 2, 5, 2);
  const Tensor& x = ctx.Input(0);
  const std::vector<double> bias = LastDimVector(ctx, x, ctx.Input(1), "bias");
  std::vector<double> residual;
  if (ctx.HasInput(2)) {
    const Tensor& r = ctx.Input(2);
    CheckSameType(ctx, x, r, "residual");
    ET_CHECK(r.shape() == x.shape(), ErrorCode::kInvalidArgument, What(ctx), ": input 'residual' ",
             ShapeToString(r.shape()), " must have the shape of data ", ShapeToString(x.shape()));
    residual = r.ToDoubleVector();
  }
  double ratio = 0.5;
  if (ctx.HasInput(3)) {
    const Tensor& r = ctx.Input(3);
    ET_CHECK(r.numel() == 1 && IsFloatType(r.dtype()), ErrorCode::kInvalidArgument, What(ctx),
             ": input 'ratio' must be a float scalar, got ", DataTypeName(r.dtype()), " ", ShapeToString(r.shape()));
    ratio = r.DoubleAt(0);
  }
  bool training = false;
  if (ctx.HasInput(4)) {
    const Tensor& t = ctx.Input(4);
    ET_CHECK(t.numel() == 1 && t.dtype() == DataType::kBool, ErrorCode::kInvalidArgument, What(ctx),
             ": input 'training_mode' must be a bool scalar, got ", DataTypeName(t.dtype()), " ",
             ShapeToString(t.shape()));
    training = t.data<bool>()[0];
  }
  ET_CHECK(!training || (ratio >= 0.0 && ratio < 1.0), ErrorCode::kInvalidArgument, What(ctx), ": ratio ", ratio,
           " is outside [0, 1)");
  // The mask: Bernoulli(1 - ratio) draws from the node's integer 'seed' when it has one, else the session's.
  std::vector<bool> keep(static_cast<size_t>(x.numel()), true);
  if (training && ratio > 0.0) {
    std::mt19937_64 seeded(static_cast<uint64_t>(ctx.node().GetInt("seed", 0)));
    std::mt19937_64& generator = ctx.node().HasAttr("seed") ? seeded : ctx.rng();
    std::bernoulli_distribution draw(1.0 - ratio);
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = draw(generator);
  }
  const double scale = training ? 1.0 / (1.0 - ratio) : 1.0;
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double biased = static_cast<double>(in[i]) + bias[static_cast<size_t>(i) % bias.size()];
      out[i] = static_cast<T>((keep[i] ? biased * scale : 0.0) + (residual.empty() ? 0.0 : residual[i]));
    }
  });
  if (ctx.HasOutput(1)) {
    bool* mask = ctx.Output(1, x.shape(), DataType::kBool).data<bool>();
    for (size_t i = 0; i < keep.size(); ++i) mask[i] = keep[i];
  }
}

}  // namespace

void RegisterOrtContribOps(OpRegistry& r) {
  ET_IF_BUILT("com.microsoft", "Gelu") RegisterMicrosoft(r, "Gelu", GeluKernel);
  ET_IF_BUILT("com.microsoft", "FastGelu") RegisterMicrosoft(r, "FastGelu", FastGeluKernel);
  ET_IF_BUILT("com.microsoft", "BiasGelu") RegisterMicrosoft(r, "BiasGelu", BiasGeluKernel);
  ET_IF_BUILT("com.microsoft", "QuickGelu") RegisterMicrosoft(r, "QuickGelu", QuickGeluKernel);
  ET_IF_BUILT("com.microsoft", "QuickGeluGrad") RegisterMicrosoft(r, "QuickGeluGrad", QuickGeluGradKernel);
  ET_IF_BUILT("com.microsoft", "ConcatTraining") RegisterMicrosoft(r, "ConcatTraining", ConcatTrainingKernel);
  ET_IF_BUILT("com.microsoft", "SplitTraining") RegisterMicrosoft(r, "SplitTraining", SplitTrainingKernel);
  // ORT declares SimplifiedLayerNormalization in the ONNX domain (its own opset 1).
  ET_REGISTER_ONNX(r, "SimplifiedLayerNormalization", SimplifiedLayerNormalizationKernel);
  ET_IF_BUILT("com.microsoft", "SimplifiedLayerNormalization")
    RegisterMicrosoft(r, "SimplifiedLayerNormalization", SimplifiedLayerNormalizationKernel);
  ET_IF_BUILT("com.microsoft", "SkipLayerNormalization")
    RegisterMicrosoft(r, "SkipLayerNormalization", SkipLayerNormalizationKernel<false>);
  ET_IF_BUILT("com.microsoft", "SkipSimplifiedLayerNormalization")
    RegisterMicrosoft(r, "SkipSimplifiedLayerNormalization", SkipLayerNormalizationKernel<true>);
  ET_IF_BUILT("com.microsoft", "BiasDropout")
    RegisterMicrosoft(r, "BiasDropout", BiasDropoutKernel, /*deterministic=*/false);
}

}  // namespace edgetrain
