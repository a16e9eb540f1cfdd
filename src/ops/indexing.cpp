// Indexing family: gathers, scatters, masks and resampling. Pure data movement works for every
// dtype by element size; arithmetic (scatter reductions, interpolation) dispatches on the dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

const std::string& What(const KernelContext& ctx) { return ctx.node().Describe(); }

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t a = begin; a < end; ++a) p *= shape[a];
  return p;
}

// Checks that `index` addresses an axis of size `size` and wraps negative values.
int64_t CheckIndex(const KernelContext& ctx, int64_t index, int64_t size, int64_t axis) {
  ET_CHECK(index >= -size && index < size, ErrorCode::kOutOfRange, What(ctx), ": index ", index,
           " is out of range for axis ", axis, " of size ", size);
  return index < 0 ? index + size : index;
}

void CopyBlock(void* dst, const void* src, int64_t count, size_t element) {
  std::memcpy(dst, src, static_cast<size_t>(count) * element);
}

// ---- Gather, GatherElements, GatherND ----

void Gather(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  const int64_t rank = static_cast<int64_t>(data.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": data must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx));
  const int64_t size = data.dim(axis);
  std::vector<int64_t> idx = indices.ToInt64Vector();
  for (int64_t& v : idx) v = CheckIndex(ctx, v, size, axis);

  Shape out_shape(data.shape().begin(), data.shape().begin() + axis);
  out_shape.insert(out_shape.end(), indices.shape().begin(), indices.shape().end());
  out_shape.insert(out_shape.end(), data.shape().begin() + axis + 1, data.shape().end());
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  const int64_t outer = Product(data.shape(), 0, axis), inner = Product(data.shape(), axis + 1, rank);
  const int64_t count = static_cast<int64_t>(idx.size());
  const size_t element = DataTypeSize(data.dtype());
  VisitElementSize(data.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(out.raw());
    ctx.threads().ParallelFor(outer * count, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                              [&](int64_t begin, int64_t end) {
                                for (int64_t job = begin; job < end; ++job) {
                                  const int64_t o = job / count, j = job % count;
                                  const U* s = src + (o * size + idx[j]) * inner;
                                  U* d = dst + job * inner;
                                  if (inner == 1) *d = *s;
                                  else CopyBlock(d, s, inner, element);
                                }
                              });
  });
}

// Offsets into `data` addressed by each element of `indices` along `axis` (GatherElements and
// ScatterElements): the indices' own coordinates everywhere except `axis`.
std::vector<int64_t> AxisElementOffsets(const KernelContext& ctx, const Shape& data_shape, const Tensor& indices,
                                        int64_t axis) {
  const size_t rank = data_shape.size();
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": data must have rank >= 1");
  ET_CHECK(indices.rank() == rank, ErrorCode::kInvalidArgument, What(ctx), ": indices have rank ", indices.rank(),
           ", data has rank ", rank);
  for (size_t a = 0; a < rank; ++a)
    ET_CHECK(static_cast<int64_t>(a) == axis || indices.dim(a) <= data_shape[a], ErrorCode::kInvalidArgument,
             What(ctx), ": indices shape ", ShapeToString(indices.shape()), " exceeds data shape ",
             ShapeToString(data_shape), " on axis ", a);
  const Shape strides = RowMajorStrides(data_shape);
  std::vector<int64_t> offsets = indices.ToInt64Vector();
  std::vector<int64_t> position(rank, 0);
  int64_t base = 0;
  for (int64_t& value : offsets) {
    value = base + CheckIndex(ctx, value, data_shape[axis], axis) * strides[axis];
    for (size_t a = rank; a-- > 0;) {
      const int64_t step = static_cast<int64_t>(a) == axis ? 0 : strides[a];
      base += step;
      if (++position[a] < indices.dim(a)) break;
      base -= step * indices.dim(a);
      position[a] = 0;
    }
  }
  return offsets;
}

void GatherElements(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), static_cast<int64_t>(data.rank()), What(ctx));
  const std::vector<int64_t> offsets = AxisElementOffsets(ctx, data.shape(), indices, axis);
  Tensor& out = ctx.Output(0, indices.shape(), data.dtype());
  VisitElementSize(data.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(out.raw());
    for (size_t k = 0; k < offsets.size(); ++k) dst[k] = src[offsets[k]];
  });
}

// Shared by GatherND and ScatterND: offsets (in elements) of each addressed slice of `data`.
struct NdAddressing {
  std::vector<int64_t> slice_offsets;  // one per index tuple
  int64_t slice_size = 1;              // elements per slice
};

NdAddressing ResolveNdIndices(const KernelContext& ctx, const Shape& data_shape, const Tensor& indices,
                              int64_t batch_dims) {
  const int64_t data_rank = static_cast<int64_t>(data_shape.size());
  const int64_t index_rank = static_cast<int64_t>(indices.rank());
  ET_CHECK(index_rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": indices must have rank >= 1");
  ET_CHECK(batch_dims >= 0 && batch_dims < std::min(data_rank, index_rank), ErrorCode::kInvalidArgument, What(ctx),
           ": batch_dims ", batch_dims, " is out of range");
  const int64_t k = indices.dim(index_rank - 1);
  ET_CHECK(batch_dims + k <= data_rank, ErrorCode::kInvalidArgument, What(ctx), ": index tuples of length ", k,
           " exceed data rank ", data_rank, " (batch_dims ", batch_dims, ")");
  for (int64_t a = 0; a < batch_dims; ++a)
    ET_CHECK(indices.dim(a) == data_shape[a], ErrorCode::kInvalidArgument, What(ctx), ": batch dim ", a,
             " differs between data ", ShapeToString(data_shape), " and indices ", ShapeToString(indices.shape()));
  const Shape strides = RowMajorStrides(data_shape);
  const std::vector<int64_t> values = indices.ToInt64Vector();
  NdAddressing result;
  result.slice_size = Product(data_shape, batch_dims + k, data_rank);
  const int64_t batch_size = batch_dims > 0 ? strides[batch_dims - 1] : 0;
  const int64_t tuples = k > 0 ? static_cast<int64_t>(values.size()) / k : Product(indices.shape(), 0, index_rank - 1);
  const int64_t tuples_per_batch = Product(indices.shape(), batch_dims, index_rank - 1);
  result.slice_offsets.resize(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = (tuples_per_batch > 0 ? t / tuples_per_batch : 0) * batch_size;
    for (int64_t m = 0; m < k; ++m) {
      const int64_t axis = batch_dims + m;
      offset += CheckIndex(ctx, values[t * k + m], data_shape[axis], axis) * strides[axis];
    }
    result.slice_offsets[t] = offset;
  }
  return result;
}

void GatherND(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  const int64_t batch_dims = ctx.node().GetInt("batch_dims", 0);
  const NdAddressing nd = ResolveNdIndices(ctx, data.shape(), indices, batch_dims);
  const int64_t k = indices.dim(indices.rank() - 1);
  Shape out_shape(indices.shape().begin(), indices.shape().end() - 1);
  out_shape.insert(out_shape.end(), data.shape().begin() + batch_dims + k, data.shape().end());
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  const size_t element = DataTypeSize(data.dtype());
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(out.raw());
  const int64_t slice_bytes = nd.slice_size * static_cast<int64_t>(element);
  for (size_t t = 0; t < nd.slice_offsets.size(); ++t)
    std::memcpy(dst + t * slice_bytes, src + nd.slice_offsets[t] * static_cast<int64_t>(element),
                static_cast<size_t>(slice_bytes));
}

// ---- ScatterElements, ScatterND, Scatter ----

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction ParseReduction(const KernelContext& ctx) {
  const std::string name = ctx.node().GetString("reduction", "none");
  if (name == "none") return Reduction::kNone;
  if (name == "add") return Reduction::kAdd;
  if (name == "mul") return Reduction::kMul;
  if (name == "max") return Reduction::kMax;
  if (name == "min") return Reduction::kMin;
  Fail(ErrorCode::kNotImplemented, What(ctx), ": reduction '", name, "' is not supported");
}

// out[offsets[k] + i] (op)= updates[k * slice + i] for every k and i < slice, in order.
void ScatterInto(const KernelContext& ctx, Tensor& out, const Tensor& updates, const std::vector<int64_t>& offsets,
                 int64_t slice, Reduction reduction) {
  ET_CHECK(updates.dtype() == out.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": updates have type ",
           DataTypeName(updates.dtype()), ", data has type ", DataTypeName(out.dtype()));
  const int64_t count = static_cast<int64_t>(offsets.size());
  if (reduction == Reduction::kNone) {
    VisitElementSize(out.dtype(), What(ctx), [&](auto tag) {
      using U = typename decltype(tag)::type;
      const U* src = static_cast<const U*>(updates.raw());
      U* dst = static_cast<U*>(out.raw());
      for (int64_t k = 0; k < count; ++k)
        for (int64_t i = 0; i < slice; ++i) dst[offsets[k] + i] = src[k * slice + i];
    });
    return;
  }
  VisitNumeric(out.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = updates.data<T>();
    T* dst = out.data<T>();
    for (int64_t k = 0; k < count; ++k)
      for (int64_t i = 0; i < slice; ++i) {
        T& target = dst[offsets[k] + i];
        const T value = src[k * slice + i];
        switch (reduction) {
          case Reduction::kAdd: target = static_cast<T>(target + value); break;
          case Reduction::kMul: target = static_cast<T>(target * value); break;
          case Reduction::kMax: target = std::max(target, value); break;
          case Reduction::kMin: target = std::min(target, value); break;
          case Reduction::kNone: target = value; break;
        }
      }
  });
}

// out (op)= updates at the positions GatherElements along `axis` would read with `indices`.
void ScatterAlongAxis(const KernelContext& ctx, Tensor& out, const Tensor& indices, const Tensor& updates, int64_t axis,
                      Reduction reduction) {
  ET_CHECK(updates.shape() == indices.shape(), ErrorCode::kInvalidArgument, What(ctx), ": updates shape ",
           ShapeToString(updates.shape()), " differs from indices shape ", ShapeToString(indices.shape()));
  ScatterInto(ctx, out, updates, AxisElementOffsets(ctx, out.shape(), indices, axis), 1, reduction);
}

void ScatterElements(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), static_cast<int64_t>(data.rank()), What(ctx));
  const Reduction reduction = ParseReduction(ctx);
  Tensor& out = ctx.Output(0, data.shape(), data.dtype());
  if (data.nbytes() && out.raw() != data.raw()) std::memcpy(out.raw(), data.raw(), data.nbytes());
  ScatterAlongAxis(ctx, out, ctx.Input(1), ctx.Input(2), axis, reduction);
}

void ScatterND(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  const Tensor& updates = ctx.Input(2);
  const NdAddressing nd = ResolveNdIndices(ctx, data.shape(), indices, 0);
  const int64_t k = indices.dim(indices.rank() - 1);
  Shape expected(indices.shape().begin(), indices.shape().end() - 1);
  expected.insert(expected.end(), data.shape().begin() + k, data.shape().end());
  ET_CHECK(updates.shape() == expected, ErrorCode::kInvalidArgument, What(ctx), ": updates shape ",
           ShapeToString(updates.shape()), ", expected ", ShapeToString(expected));
  Tensor& out = ctx.Output(0, data.shape(), data.dtype());
  if (data.nbytes() && out.raw() != data.raw()) std::memcpy(out.raw(), data.raw(), data.nbytes());
  ScatterInto(ctx, out, updates, nd.slice_offsets, nd.slice_size, ParseReduction(ctx));
}

// ---- OneHot, NonZero, Trilu, Compress, ReverseSequence ----

void OneHot(KernelContext& ctx) {
  const Tensor& indices = ctx.Input(0);
  const Tensor& depth_t = ctx.Input(1);
  const Tensor& values = ctx.Input(2);
  ET_CHECK(depth_t.numel() == 1, ErrorCode::kInvalidArgument, What(ctx), ": depth must be a scalar");
  ET_CHECK(values.numel() == 2, ErrorCode::kInvalidArgument, What(ctx), ": values must hold [off, on]");
  const int64_t depth = static_cast<int64_t>(depth_t.DoubleAt(0));
  ET_CHECK(depth >= 1, ErrorCode::kInvalidArgument, What(ctx), ": depth ", depth, " must be positive");
  const int64_t out_rank = static_cast<int64_t>(indices.rank()) + 1;
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", -1), out_rank, What(ctx));
  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.begin() + axis, depth);
  Tensor& out = ctx.Output(0, out_shape, values.dtype());
  const size_t element = DataTypeSize(values.dtype());
  ET_CHECK(element > 0, ErrorCode::kNotImplemented, What(ctx), ": values of type ", DataTypeName(values.dtype()),
           " are not supported");
  uint64_t off = 0;
  std::memcpy(&off, values.raw(), element);
  FillElements(out.raw(), out.numel(), element, off);
  const std::vector<double> positions = indices.ToDoubleVector();
  const int64_t inner = Product(indices.shape(), axis, indices.rank());
  const char* on = static_cast<const char*>(values.raw()) + element;
  char* dst = static_cast<char*>(out.raw());
  for (size_t k = 0; k < positions.size(); ++k) {
    int64_t hot = static_cast<int64_t>(positions[k]);
    if (hot < 0) hot += depth;
    if (hot < 0 || hot >= depth) continue;
    const int64_t o = static_cast<int64_t>(k) / inner, i = static_cast<int64_t>(k) % inner;
    std::memcpy(dst + ((o * depth + hot) * inner + i) * static_cast<int64_t>(element), on, element);
  }
}

void NonZero(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  std::vector<int64_t> hits;
  VisitAll(data.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* values = static_cast<const T*>(data.raw());
    for (int64_t k = 0; k < data.numel(); ++k)
      if (ValueToDouble(values[k]) != 0) hits.push_back(k);
  });
  const Shape shape = data.rank() == 0 ? Shape{1} : data.shape();
  const int64_t rank = static_cast<int64_t>(shape.size()), count = static_cast<int64_t>(hits.size());
  int64_t* out = ctx.Output(0, {rank, count}, DataType::kInt64).data<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = hits[j];
    for (int64_t a = rank - 1; a >= 0; --a) {
      out[a * count + j] = rest % shape[a];
      rest /= shape[a];
    }
  }
}

void Trilu(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  ET_CHECK(data.rank() >= 2, ErrorCode::kInvalidArgument, What(ctx), ": input must have rank >= 2, got ",
           ShapeToString(data.shape()));
  int64_t k = 0;
  if (ctx.HasInput(1)) {
    const Tensor& k_t = ctx.Input(1);
    ET_CHECK(k_t.numel() == 1, ErrorCode::kInvalidArgument, What(ctx), ": k must be a scalar");
    k = k_t.Int64At(0);
  }
  const bool upper = ctx.node().GetInt("upper", 1) != 0;
  const int64_t rows = data.dim(data.rank() - 2), cols = data.dim(data.rank() - 1);
  const int64_t matrices = rows * cols == 0 ? 0 : data.numel() / (rows * cols);
  Tensor& out = ctx.Output(0, data.shape(), data.dtype());
  VisitElementSize(data.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(out.raw());
    for (int64_t m = 0; m < matrices; ++m)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = (m * rows + r) * cols;
        for (int64_t c = 0; c < cols; ++c) {
          const bool keep = upper ? c - r >= k : c - r <= k;
          dst[row + c] = keep ? src[row + c] : U(0);
        }
      }
  });
}

void Compress(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Tensor& condition = ctx.Input(1);
  ET_CHECK(condition.rank() == 1, ErrorCode::kInvalidArgument, What(ctx), ": condition must be 1-D");
  const std::vector<int64_t> mask = condition.ToInt64Vector();
  const bool flat = !ctx.node().HasAttr("axis");
  const Shape shape = flat ? Shape{data.numel()} : data.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": input must have rank >= 1");
  const int64_t axis = flat ? 0 : NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx));
  const int64_t size = shape[axis];
  ET_CHECK(static_cast<int64_t>(mask.size()) <= size, ErrorCode::kInvalidArgument, What(ctx), ": condition has ",
           mask.size(), " entries but axis ", axis, " has size ", size);
  std::vector<int64_t> selected;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] != 0) selected.push_back(static_cast<int64_t>(i));
  Shape out_shape = shape;
  out_shape[axis] = static_cast<int64_t>(selected.size());
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  const int64_t outer = Product(shape, 0, axis), inner = Product(shape, axis + 1, rank);
  const int64_t element = static_cast<int64_t>(DataTypeSize(data.dtype()));
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < selected.size(); ++j)
      std::memcpy(dst + ((o * static_cast<int64_t>(selected.size()) + static_cast<int64_t>(j)) * inner) * element,
                  src + ((o * size + selected[j]) * inner) * element, static_cast<size_t>(inner * element));
}

void ReverseSequence(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const std::vector<int64_t> lengths = ctx.Input(1).ToInt64Vector();
  ET_CHECK(data.rank() >= 2, ErrorCode::kInvalidArgument, What(ctx), ": input must have rank >= 2");
  const int64_t batch_axis = ctx.node().GetInt("batch_axis", 1), time_axis = ctx.node().GetInt("time_axis", 0);
  ET_CHECK((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0), ErrorCode::kInvalidArgument,
           What(ctx), ": batch_axis and time_axis must be 0 and 1 in some order");
  const int64_t batch = data.dim(batch_axis), time = data.dim(time_axis);
  ET_CHECK(static_cast<int64_t>(lengths.size()) == batch, ErrorCode::kInvalidArgument, What(ctx), ": ",
           lengths.size(), " sequence lengths for batch size ", batch);
  for (int64_t len : lengths)
    ET_CHECK(len >= 0 && len <= time, ErrorCode::kOutOfRange, What(ctx), ": sequence length ", len,
             " is out of range for time axis of size ", time);
  Tensor& out = ctx.Output(0, data.shape(), data.dtype());
  const int64_t inner = Product(data.shape(), 2, data.rank());
  const int64_t element = static_cast<int64_t>(DataTypeSize(data.dtype()));
  const int64_t dim1 = data.dim(1);
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < time; ++t) {
      const int64_t from_t = t < lengths[b] ? lengths[b] - 1 - t : t;
      const int64_t to = batch_axis == 0 ? b * dim1 + t : t * dim1 + b;
      const int64_t from = batch_axis == 0 ? b * dim1 + from_t : from_t * dim1 + b;
      std::memcpy(dst + to * inner * element, src + from * inner * element, static_cast<size_t>(inner * element));
    }
}

// ---- Resize, Upsample ----

enum class Interpolation { kNearest, kLinear, kCubic };
enum class CoordinateMode {
  kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfHalfPixelForNn, kTfCropAndResize
};
enum class NearestMode { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kLegacy };

struct ResizeOptions {
  Interpolation interpolation = Interpolation::kNearest;
  CoordinateMode coordinate = CoordinateMode::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;  // opset 18: linear and cubic taps widen by 1/scale when downsampling
  double extrapolation_value = 0;
};

// The input taps (clamped coordinates and weights) that produce each output coordinate of one axis.
struct AxisTaps {
  int64_t taps = 1;
  std::vector<int64_t> index;    // [out_dim * taps]
  std::vector<double> weight;    // [out_dim * taps]
  std::vector<uint8_t> outside;  // [out_dim]: coordinate fell outside the input (tf_crop_and_resize)
};

double OriginalCoordinate(const ResizeOptions& o, int64_t x, int64_t in_dim, int64_t out_dim, double scale,
                          double resized_length, double roi_start, double roi_end) {
  const double xr = static_cast<double>(x);
  switch (o.coordinate) {
    case CoordinateMode::kHalfPixel: return (xr + 0.5) / scale - 0.5;
    case CoordinateMode::kHalfPixelSymmetric: {  // the centre of the input maps to the centre of the output
      const double offset = static_cast<double>(in_dim) / 2 * (1 - static_cast<double>(out_dim) / resized_length);
      return offset + (xr + 0.5) / scale - 0.5;
    }
    case CoordinateMode::kPytorchHalfPixel: return out_dim > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
    case CoordinateMode::kAlignCorners:
      return resized_length == 1 ? 0.0 : xr * static_cast<double>(in_dim - 1) / (resized_length - 1);
    case CoordinateMode::kAsymmetric: return xr / scale;
    case CoordinateMode::kTfHalfPixelForNn: return (xr + 0.5) / scale;
    case CoordinateMode::kTfCropAndResize: {
      const double span = static_cast<double>(in_dim - 1);
      const double start = roi_start * span;
      if (resized_length == 1) return start + (roi_end - roi_start) * span / 2;
      return start + xr * (roi_end - roi_start) * span / (resized_length - 1);
    }
  }
  return 0;
}

int64_t NearestIndex(NearestMode mode, double x, double scale) {
  const double f = std::floor(x), fraction = x - f;
  switch (mode) {
    case NearestMode::kRoundPreferFloor: return static_cast<int64_t>(fraction > 0.5 ? f + 1 : f);
    case NearestMode::kRoundPreferCeil: return static_cast<int64_t>(fraction >= 0.5 ? f + 1 : f);
    case NearestMode::kFloor: return static_cast<int64_t>(f);
    case NearestMode::kCeil: return static_cast<int64_t>(std::ceil(x));
    case NearestMode::kLegacy: return static_cast<int64_t>(scale < 1 ? std::ceil(x) : f);
  }
  return 0;
}

double CubicKernel(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  return x < 2 ? ((a * x - 5 * a) * x + 8 * a) * x - 4 * a : 0.0;
}

AxisTaps BuildAxisTaps(const ResizeOptions& o, int64_t in_dim, int64_t out_dim, double scale, double resized_length,
                       double roi_start, double roi_end) {
  AxisTaps t;
  // Antialiased taps (ONNX Resize-18): offsets first..first+taps-1 from ceil(x)-1, kernel stretched by 1/scale.
  const bool antialias = o.antialias && o.interpolation != Interpolation::kNearest && scale < 1;
  const double radius = o.interpolation == Interpolation::kLinear ? 1 : 2;
  const int64_t first = antialias ? static_cast<int64_t>(std::floor(-radius / scale)) + 1 : 0;
  t.taps = o.interpolation == Interpolation::kNearest ? 1 : antialias ? 2 - 2 * first
           : o.interpolation == Interpolation::kLinear ? 2 : 4;
  t.index.resize(out_dim * t.taps);
  t.weight.resize(out_dim * t.taps);
  t.outside.assign(out_dim, 0);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in_dim - 1); };
  for (int64_t x = 0; x < out_dim; ++x) {
    const double xo = OriginalCoordinate(o, x, in_dim, out_dim, scale, resized_length, roi_start, roi_end);
    if (o.coordinate == CoordinateMode::kTfCropAndResize && (xo < 0 || xo > static_cast<double>(in_dim - 1)))
      t.outside[x] = 1;
    int64_t* index = &t.index[x * t.taps];
    double* weight = &t.weight[x * t.taps];
    const double f = std::floor(xo), r = xo - f;
    const int64_t base = static_cast<int64_t>(f);
    if (o.interpolation == Interpolation::kNearest) {
      index[0] = clamp(NearestIndex(o.nearest, xo, scale));
      weight[0] = 1;
    } else if (antialias) {
      const int64_t below = static_cast<int64_t>(std::ceil(xo)) - 1;
      const double ratio = xo - static_cast<double>(below);
      double total = 0;
      for (int64_t j = 0; j < t.taps; ++j) {
        const double d = scale * (static_cast<double>(first + j) - ratio);
        weight[j] = o.interpolation == Interpolation::kLinear ? std::max(0.0, 1 - std::fabs(d)) : CubicKernel(d, o.cubic_a);
        total += weight[j];
      }
      double kept = 0;
      for (int64_t j = 0; j < t.taps; ++j) {
        const int64_t i = below + first + j;
        weight[j] /= total;
        if (o.exclude_outside && (i < 0 || i >= in_dim)) weight[j] = 0;
        kept += weight[j];
        index[j] = clamp(i);
      }
      if (o.exclude_outside && kept != 0)
        for (int64_t j = 0; j < t.taps; ++j) weight[j] /= kept;
    } else if (o.interpolation == Interpolation::kLinear) {
      index[0] = clamp(base);
      index[1] = clamp(base + 1);
      weight[0] = 1 - r;
      weight[1] = r;
    } else {
      const double a = o.cubic_a;
      const double d0 = r + 1, d1 = r, d2 = 1 - r, d3 = 2 - r;
      weight[0] = ((a * d0 - 5 * a) * d0 + 8 * a) * d0 - 4 * a;
      weight[1] = ((a + 2) * d1 - (a + 3)) * d1 * d1 + 1;
      weight[2] = ((a + 2) * d2 - (a + 3)) * d2 * d2 + 1;
      weight[3] = ((a * d3 - 5 * a) * d3 + 8 * a) * d3 - 4 * a;
      double total = 0;
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t i = base - 1 + j;
        if (o.exclude_outside && (i < 0 || i >= in_dim)) weight[j] = 0;
        total += weight[j];
        index[j] = clamp(i);
      }
      if (o.exclude_outside && total != 0)
        for (int64_t j = 0; j < 4; ++j) weight[j] /= total;
    }
  }
  // An axis whose every output picks one input exactly (N and C, usually) needs one tap.
  if (t.taps > 1) {
    bool single = true;
    std::vector<int64_t> index(out_dim);
    for (int64_t x = 0; x < out_dim && single; ++x) {
      int64_t ones = 0, zeros = 0;
      for (int64_t j = 0; j < t.taps; ++j) {
        const double w = t.weight[x * t.taps + j];
        if (w == 1) {
          ++ones;
          index[x] = t.index[x * t.taps + j];
        } else if (w == 0) {
          ++zeros;
        }
      }
      single = ones == 1 && zeros == t.taps - 1;
    }
    if (single) {
      t.taps = 1;
      t.index = std::move(index);
      t.weight.assign(out_dim, 1.0);
    }
  }
  return t;
}

template <typename T>
void ResizeInterpolate(KernelContext& ctx, const Tensor& data, Tensor& out, const std::vector<AxisTaps>& axes,
                       double extrapolation_value) {
  const Shape& out_shape = out.shape();
  const size_t rank = out_shape.size();
  const Shape strides = RowMajorStrides(data.shape());
  const int64_t inner = out_shape[rank - 1];
  const int64_t rows = inner == 0 ? 0 : out.numel() / inner;
  const T* src = data.data<T>();
  T* dst = out.data<T>();
  const AxisTaps& last = axes[rank - 1];
  ctx.threads().ParallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> offsets, next_offsets;
    std::vector<double> weights, next_weights;
    for (int64_t row = r0; row < r1; ++row) {
      // Combine the taps of the outer axes into (offset, weight) pairs for this row.
      offsets.assign(1, 0);
      weights.assign(1, 1.0);
      bool outside = false;
      int64_t rest = row;
      for (size_t a = rank - 1; a-- > 0;) {
        const int64_t x = rest % out_shape[a];
        rest /= out_shape[a];
        const AxisTaps& t = axes[a];
        outside = outside || t.outside[x];
        next_offsets.clear();
        next_weights.clear();
        for (size_t e = 0; e < offsets.size(); ++e)
          for (int64_t j = 0; j < t.taps; ++j) {
            next_offsets.push_back(offsets[e] + t.index[x * t.taps + j] * strides[a]);
            next_weights.push_back(weights[e] * t.weight[x * t.taps + j]);
          }
        offsets.swap(next_offsets);
        weights.swap(next_weights);
      }
      T* d = dst + row * inner;
      for (int64_t x = 0; x < inner; ++x) {
        if (outside || last.outside[x]) {
          d[x] = static_cast<T>(extrapolation_value);
          continue;
        }
        double sum = 0;
        for (size_t e = 0; e < offsets.size(); ++e) {
          const T* s = src + offsets[e];
          double partial = 0;
          for (int64_t j = 0; j < last.taps; ++j)
            partial += last.weight[x * last.taps + j] * static_cast<double>(s[last.index[x * last.taps + j]]);
          sum += weights[e] * partial;
        }
        d[x] = static_cast<T>(sum);
      }
    }
  });
}

void ResizeNearest(KernelContext& ctx, const Tensor& data, Tensor& out, const std::vector<AxisTaps>& axes,
                   double extrapolation_value) {
  const Shape& out_shape = out.shape();
  const size_t rank = out_shape.size();
  const Shape strides = RowMajorStrides(data.shape());
  const int64_t inner = out_shape[rank - 1];
  const int64_t rows = inner == 0 ? 0 : out.numel() / inner;
  const uint64_t fill_bits = ElementBitsFromDouble(data.dtype(), extrapolation_value, What(ctx));
  VisitElementSize(data.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    U fill;
    std::memcpy(&fill, &fill_bits, sizeof(U));
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(out.raw());
    const AxisTaps& last = axes[rank - 1];
    ctx.threads().ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        int64_t rest = row, offset = 0;
        bool outside = false;
        for (size_t a = rank - 1; a-- > 0;) {
          const int64_t x = rest % out_shape[a];
          rest /= out_shape[a];
          offset += axes[a].index[x] * strides[a];
          outside = outside || axes[a].outside[x];
        }
        U* d = dst + row * inner;
        for (int64_t x = 0; x < inner; ++x) d[x] = outside || last.outside[x] ? fill : src[offset + last.index[x]];
      }
    });
  });
}

// With both sizes and scales (keep_aspect_ratio_policy), sizes give the output shape and scales the sampling.
void RunResize(KernelContext& ctx, const ResizeOptions& options, const std::vector<double>& scales_in,
               const std::vector<int64_t>& sizes, const std::vector<double>& roi) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": input must have rank >= 1");
  std::vector<double> scales(rank), resized_length(rank);
  Shape out_shape(rank);
  if (!sizes.empty()) {
    ET_CHECK(static_cast<int64_t>(sizes.size()) == rank, ErrorCode::kInvalidArgument, What(ctx), ": sizes has ",
             sizes.size(), " entries for an input of rank ", rank);
    for (int64_t a = 0; a < rank; ++a) {
      ET_CHECK(sizes[a] >= 0, ErrorCode::kInvalidArgument, What(ctx), ": negative output size ", sizes[a]);
      out_shape[a] = sizes[a];
      scales[a] = data.dim(a) == 0 ? 1.0 : static_cast<double>(sizes[a]) / static_cast<double>(data.dim(a));
      resized_length[a] = static_cast<double>(sizes[a]);
      if (!scales_in.empty()) {
        scales[a] = scales_in[a];
        resized_length[a] = scales_in[a] * static_cast<double>(data.dim(a));
      }
    }
  } else {
    ET_CHECK(static_cast<int64_t>(scales_in.size()) == rank, ErrorCode::kInvalidArgument, What(ctx), ": scales has ",
             scales_in.size(), " entries for an input of rank ", rank);
    for (int64_t a = 0; a < rank; ++a) {
      ET_CHECK(scales_in[a] > 0, ErrorCode::kInvalidArgument, What(ctx), ": scale ", scales_in[a],
               " must be positive");
      scales[a] = scales_in[a];
      resized_length[a] = scales_in[a] * static_cast<double>(data.dim(a));
      out_shape[a] = static_cast<int64_t>(std::floor(resized_length[a]));
    }
  }
  const bool crop = options.coordinate == CoordinateMode::kTfCropAndResize;
  ET_CHECK(!crop || static_cast<int64_t>(roi.size()) == 2 * rank, ErrorCode::kInvalidArgument, What(ctx),
           ": tf_crop_and_resize needs roi with ", 2 * rank, " entries, got ", roi.size());
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  if (out.numel() == 0) return;
  for (int64_t a = 0; a < rank; ++a)
    ET_CHECK(data.dim(a) > 0, ErrorCode::kInvalidArgument, What(ctx), ": cannot resize empty axis ", a);
  std::vector<AxisTaps> axes;
  for (int64_t a = 0; a < rank; ++a)
    axes.push_back(BuildAxisTaps(options, data.dim(a), out_shape[a], scales[a], resized_length[a],
                                 crop ? roi[a] : 0.0, crop ? roi[a + rank] : 1.0));
  if (options.interpolation == Interpolation::kNearest) {
    ResizeNearest(ctx, data, out, axes, options.extrapolation_value);
    return;
  }
  VisitFloat(data.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ResizeInterpolate<T>(ctx, data, out, axes, options.extrapolation_value);
  });
}

// Resize-18's 'axes' (scales, sizes and roi name only those axes) and keep_aspect_ratio_policy (one scale for all
// of them: the smallest or the largest of sizes/shape, sizes rounded half up).
void ApplyResizeAxesAndAspect(const KernelContext& ctx, std::vector<double>& scales, std::vector<int64_t>& sizes,
                              std::vector<double>& roi, CoordinateMode coordinate) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  std::vector<int64_t> axes;
  if (ctx.node().HasAttr("axes")) {
    std::vector<bool> seen(rank, false);
    for (int64_t a : ctx.node().GetInts("axes")) {
      a = NormalizeAxis(a, rank, What(ctx));
      ET_CHECK(!seen[a], ErrorCode::kInvalidArgument, What(ctx), ": axis ", a, " is listed twice in 'axes'");
      seen[a] = true;
      axes.push_back(a);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  const size_t n = axes.size();
  const std::vector<double>& given = sizes.empty() ? scales : std::vector<double>(sizes.begin(), sizes.end());
  ET_CHECK(given.size() == n, ErrorCode::kInvalidArgument, What(ctx), ": ", sizes.empty() ? "scales" : "sizes", " has ",
           given.size(), " entries for ", n, " resized axes");
  if (coordinate == CoordinateMode::kTfCropAndResize && !roi.empty()) {
    ET_CHECK(roi.size() == 2 * n, ErrorCode::kInvalidArgument, What(ctx), ": roi has ", roi.size(), " entries, expected ",
             2 * n);
    std::vector<double> full(2 * rank, 0.0);
    std::fill(full.begin() + rank, full.end(), 1.0);
    for (size_t i = 0; i < n; ++i) {
      full[axes[i]] = roi[i];
      full[rank + axes[i]] = roi[n + i];
    }
    roi = full;
  }
  if (sizes.empty()) {
    std::vector<double> full(rank, 1.0);
    for (size_t i = 0; i < n; ++i) full[axes[i]] = scales[i];
    scales = full;
    return;
  }
  std::vector<int64_t> full(data.shape().begin(), data.shape().end());
  for (size_t i = 0; i < n; ++i) full[axes[i]] = sizes[i];
  sizes = full;
  const std::string policy = ctx.node().GetString("keep_aspect_ratio_policy", "stretch");
  if (policy == "stretch") return;
  ET_CHECK(policy == "not_larger" || policy == "not_smaller", ErrorCode::kInvalidArgument, What(ctx),
           ": keep_aspect_ratio_policy '", policy, "' is not one of stretch, not_larger, not_smaller");
  double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
  for (int64_t a : axes) {
    ET_CHECK(data.dim(a) > 0, ErrorCode::kInvalidArgument, What(ctx), ": cannot resize empty axis ", a);
    const double s = static_cast<double>(sizes[a]) / static_cast<double>(data.dim(a));
    scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
  }
  scales.assign(rank, 1.0);
  for (int64_t a : axes) {
    scales[a] = scale;
    sizes[a] = static_cast<int64_t>(scale * static_cast<double>(data.dim(a)) + 0.5);
  }
}

Interpolation ParseInterpolation(const KernelContext& ctx) {
  const std::string mode = ctx.node().GetString("mode", "nearest");
  if (mode == "nearest") return Interpolation::kNearest;
  if (mode == "linear" || mode == "bilinear") return Interpolation::kLinear;
  if (mode == "cubic") return Interpolation::kCubic;
  Fail(ErrorCode::kNotImplemented, What(ctx), ": mode '", mode, "' is not supported");
}

void Resize(KernelContext& ctx) {
  ResizeOptions options;
  options.interpolation = ParseInterpolation(ctx);
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  if (ctx.opset() < 11) {
    // Resize-10 samples like Upsample: asymmetric coordinates, truncating nearest.
    options.coordinate = CoordinateMode::kAsymmetric;
    options.nearest = NearestMode::kLegacy;
    ET_CHECK(options.interpolation != Interpolation::kCubic, ErrorCode::kNotImplemented, What(ctx),
             ": mode 'cubic' needs opset 11");
    scales = ctx.Input(1).ToDoubleVector();
  } else {
    const std::string coordinate = ctx.node().GetString("coordinate_transformation_mode", "half_pixel");
    if (coordinate == "half_pixel") options.coordinate = CoordinateMode::kHalfPixel;
    else if (coordinate == "half_pixel_symmetric" && ctx.opset() >= 19) options.coordinate = CoordinateMode::kHalfPixelSymmetric;
    else if (coordinate == "pytorch_half_pixel") options.coordinate = CoordinateMode::kPytorchHalfPixel;
    else if (coordinate == "align_corners") options.coordinate = CoordinateMode::kAlignCorners;
    else if (coordinate == "asymmetric") options.coordinate = CoordinateMode::kAsymmetric;
    else if (coordinate == "tf_half_pixel_for_nn") options.coordinate = CoordinateMode::kTfHalfPixelForNn;
    else if (coordinate == "tf_crop_and_resize") options.coordinate = CoordinateMode::kTfCropAndResize;
    else Fail(ErrorCode::kNotImplemented, What(ctx), ": coordinate_transformation_mode '", coordinate, "' is not supported");
    const std::string nearest = ctx.node().GetString("nearest_mode", "round_prefer_floor");
    if (nearest == "round_prefer_floor") options.nearest = NearestMode::kRoundPreferFloor;
    else if (nearest == "round_prefer_ceil") options.nearest = NearestMode::kRoundPreferCeil;
    else if (nearest == "floor") options.nearest = NearestMode::kFloor;
    else if (nearest == "ceil") options.nearest = NearestMode::kCeil;
    else Fail(ErrorCode::kNotImplemented, What(ctx), ": nearest_mode '", nearest, "' is not supported");
    options.cubic_a = ctx.node().GetFloat("cubic_coeff_a", -0.75f);
    options.exclude_outside = ctx.node().GetInt("exclude_outside", 0) != 0;
    options.extrapolation_value = ctx.node().GetFloat("extrapolation_value", 0.0f);
    options.antialias = ctx.node().GetInt("antialias", 0) != 0;
    if (ctx.HasInput(1)) roi = ctx.Input(1).ToDoubleVector();
    if (ctx.HasInput(2)) scales = ctx.Input(2).ToDoubleVector();
    if (ctx.HasInput(3)) sizes = ctx.Input(3).ToInt64Vector();
    ET_CHECK(scales.empty() != sizes.empty(), ErrorCode::kInvalidArgument, What(ctx),
             ": exactly one of scales and sizes must be given");
    if (ctx.opset() >= 18) ApplyResizeAxesAndAspect(ctx, scales, sizes, roi, options.coordinate);
  }
  RunResize(ctx, options, scales, sizes, roi);
}

void Upsample(KernelContext& ctx) {
  ResizeOptions options;
  options.interpolation = ParseInterpolation(ctx);
  ET_CHECK(options.interpolation != Interpolation::kCubic, ErrorCode::kNotImplemented, What(ctx),
           ": mode 'cubic' is not supported by Upsample");
  options.coordinate = CoordinateMode::kAsymmetric;
  options.nearest = NearestMode::kLegacy;
  std::vector<double> scales;
  if (ctx.HasInput(1)) {
    scales = ctx.Input(1).ToDoubleVector();
  } else {
    for (float s : ctx.node().GetFloats("scales")) scales.push_back(s);
  }
  RunResize(ctx, options, scales, {}, {});
}

// ---- Col2Im (opset 18): input [N, C * prod(block), L] scattered (added) into [N, C, *image] ----

void Col2Im(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::vector<int64_t> image = ctx.Input(1).ToInt64Vector(), block = ctx.Input(2).ToInt64Vector();
  const size_t spatial = image.size();
  ET_CHECK(spatial >= 1 && block.size() == spatial, ErrorCode::kInvalidArgument, What(ctx), ": image_shape has ",
           spatial, " entries and block_shape ", block.size(), "; they must agree (and not be empty)");
  ET_CHECK(x.rank() == 3, ErrorCode::kInvalidArgument, What(ctx), ": input must be [N, C * prod(block_shape), L], got ",
           ShapeToString(x.shape()));
  const Int64Vector strides = ctx.node().GetInts("strides", Int64Vector(spatial, 1));
  const Int64Vector dilations = ctx.node().GetInts("dilations", Int64Vector(spatial, 1));
  const Int64Vector pads = ctx.node().GetInts("pads", Int64Vector(2 * spatial, 0));
  ET_CHECK(strides.size() == spatial && dilations.size() == spatial && pads.size() == 2 * spatial,
           ErrorCode::kInvalidArgument, What(ctx), ": strides/dilations/pads do not match ", spatial, " spatial axes");
  int64_t kernel = 1, blocks = 1;
  std::vector<int64_t> grid(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    ET_CHECK(image[d] >= 1 && block[d] >= 1 && strides[d] >= 1 && dilations[d] >= 1 && pads[d] >= 0 &&
                 pads[d + spatial] >= 0,
             ErrorCode::kInvalidArgument, What(ctx), ": image_shape, block_shape, strides and dilations must be >= 1 "
             "and pads >= 0");
    const int64_t room = image[d] + pads[d] + pads[d + spatial] - ((block[d] - 1) * dilations[d] + 1);
    ET_CHECK(room >= 0, ErrorCode::kInvalidArgument, What(ctx), ": block ", block[d], " does not fit axis ", d,
             " of the padded image");
    grid[d] = room / strides[d] + 1;
    kernel *= block[d];
    blocks *= grid[d];
  }
  ET_CHECK(x.dim(1) % kernel == 0 && x.dim(2) == blocks, ErrorCode::kInvalidArgument, What(ctx), ": input ",
           ShapeToString(x.shape()), " does not hold ", kernel, " values per channel for each of ", blocks, " blocks");
  const int64_t batch = x.dim(0), channels = x.dim(1) / kernel;
  Shape out_shape{batch, channels};
  out_shape.insert(out_shape.end(), image.begin(), image.end());
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  const int64_t plane = NumElements(Shape(image.begin(), image.end()));
  VisitFloat(x.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    ctx.threads().ParallelFor(batch * channels, 1, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> k(spatial), l(spatial);
      for (int64_t image_index = begin; image_index < end; ++image_index) {
        T* out = dst + image_index * plane;
        std::fill(out, out + plane, T{0});
        const T* in = src + image_index * kernel * blocks;  // [kernel, blocks] of this (n, c)
        std::fill(k.begin(), k.end(), 0);
        for (int64_t j = 0; j < kernel; ++j) {
          std::fill(l.begin(), l.end(), 0);
          for (int64_t b = 0; b < blocks; ++b) {
            int64_t offset = 0;
            bool inside = true;
            for (size_t d = 0; d < spatial && inside; ++d) {
              const int64_t p = l[d] * strides[d] - pads[d] + k[d] * dilations[d];
              inside = p >= 0 && p < image[d];
              offset = offset * image[d] + p;
            }
            if (inside) out[offset] += in[j * blocks + b];
            for (size_t d = spatial; d-- > 0;)
              if (++l[d] < grid[d]) break; else l[d] = 0;
          }
          for (size_t d = spatial; d-- > 0;)
            if (++k[d] < block[d]) break; else k[d] = 0;
        }
      }
    });
  });
}

// ---- AffineGrid (opset 20): grid[n, ..., k] = theta[n, k, :] . (x, y[, z], 1) over normalized coordinates ----

void AffineGrid(KernelContext& ctx) {
  const Tensor& theta = ctx.Input(0);
  const std::vector<int64_t> size = ctx.Input(1).ToInt64Vector();
  ET_CHECK(size.size() == 4 || size.size() == 5, ErrorCode::kInvalidArgument, What(ctx),
           ": size must be (N, C, H, W) or (N, C, D, H, W), got ", size.size(), " entries");
  const int64_t r = static_cast<int64_t>(size.size()) - 2;
  ET_CHECK(theta.rank() == 3 && theta.dim(0) == size[0] && theta.dim(1) == r && theta.dim(2) == r + 1,
           ErrorCode::kInvalidArgument, What(ctx), ": theta ", ShapeToString(theta.shape()), " must be [", size[0], ", ",
           r, ", ", r + 1, "]");
  const bool align = ctx.node().GetInt("align_corners", 0) != 0;
  Shape out_shape{size[0]};
  for (int64_t d = 2; d < static_cast<int64_t>(size.size()); ++d) {
    ET_CHECK(size[d] >= 1, ErrorCode::kInvalidArgument, What(ctx), ": size[", d, "] is ", size[d]);
    out_shape.push_back(size[d]);
  }
  out_shape.push_back(r);
  auto coordinate = [&](int64_t i, int64_t length) {  // in [-1, 1]; x runs along the last axis
    if (align) return length > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(length - 1) : -1.0;
    return (2.0 * static_cast<double>(i) + 1) / static_cast<double>(length) - 1;
  };
  Tensor& y = ctx.Output(0, out_shape, theta.dtype());
  const int64_t points = y.numel() / std::max<int64_t>(1, size[0] * r);
  VisitFloat(theta.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* t = theta.data<T>();
    T* out = y.data<T>();
    std::vector<double> base(r + 1);
    for (int64_t p = 0; p < points; ++p) {
      int64_t rest = p;
      for (int64_t k = 0; k < r; ++k) {  // base[0] = x (last axis), base[1] = y, base[2] = z
        const int64_t length = size[size.size() - 1 - k];
        base[k] = coordinate(rest % length, length);
        rest /= length;
      }
      base[r] = 1;
      for (int64_t n = 0; n < size[0]; ++n)
        for (int64_t k = 0; k < r; ++k) {
          double v = 0;
          for (int64_t j = 0; j <= r; ++j) v += static_cast<double>(t[(n * r + k) * (r + 1) + j]) * base[j];
          out[(n * points + p) * r + k] = static_cast<T>(v);
        }
    }
  });
}

// ---- Gradient rules ----

// AffineGrid is linear in theta: dTheta[n] = dGrid[n]^T (r x P) . base (P x r+1), base the homogeneous coordinates
// (the grid of the identity theta, EyeLike of [r, r+1], for one image, and a column of ones).
void AffineGridGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const std::string theta = g.X(0);
  const std::string theta_shape = g.ShapeOf(theta);
  auto dim = [&](int64_t d) { return g.Op("Slice", {theta_shape, g.Ints({d}), g.Ints({d + 1})}); };
  auto concat = [&](std::vector<std::string> parts) { return g.Op("Concat", parts, {{"axis", Attribute::Int(0)}}); };
  const std::string identity = g.Op("Unsqueeze", {g.Op("EyeLike", {g.Op("ConstantOfShape", {concat({dim(1), dim(2)})})}),
                                                  g.Ints({0})});
  const std::string one_image = concat({g.Ints({1}), g.Op("Slice", {g.X(1), g.Ints({1}), g.Ints({INT64_MAX})})});
  const std::string grid = g.Op("AffineGrid", {g.Op("CastLike", {identity, theta}), one_image},
                                {{"align_corners", Attribute::Int(g.node().GetInt("align_corners", 0))}});
  const std::string points = g.Op("Reshape", {grid, concat({g.Ints({-1}), dim(1)})});
  const std::string count = g.Op("Slice", {g.ShapeOf(points), g.Ints({0}), g.Ints({1})});
  const std::string ones = g.Op("CastLike", {g.Op("ConstantOfShape", {concat({count, g.Ints({1})})},
                                                  {{"value", Attribute::TensorValue(Tensor::FromVector<float>({1}, {1}))}}),
                                             theta});
  const std::string base = g.Op("Concat", {points, ones}, {{"axis", Attribute::Int(1)}});
  const std::string dgrid = g.Op("Reshape", {g.dY(0), concat({dim(0), g.Ints({-1}), dim(1)})});
  g.SetGrad(0, g.Op("MatMul", {g.Op("Transpose", {dgrid}, {{"perm", Attribute::Ints({0, 2, 1})}}), base}));
}

// Col2Im's adjoint is im2col: each image as its own channel, convolved with the one-hot kernels of
// Eye(prod(block)) shaped [prod(block), 1, *block] (same strides, dilations, pads), then [N, C * prod(block), L].
void Col2ImGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const std::string block = g.X(2);
  const std::string count = g.Op("ReduceProd", {block}, {{"keepdims", Attribute::Int(1)}});
  const std::string eye = g.Op("EyeLike", {g.Op("ConstantOfShape", {g.Op("Concat", {count, count}, {{"axis", Attribute::Int(0)}})})});
  const std::string one_hot = g.Op("Reshape", {eye, g.Op("Concat", {count, g.Ints({1}), block}, {{"axis", Attribute::Int(0)}})});
  const std::string images = g.Op("Reshape", {g.dY(0), g.Op("Concat", {g.Ints({-1, 1}), g.X(1)}, {{"axis", Attribute::Int(0)}})});
  AttributeMap conv;
  for (const char* key : {"strides", "dilations", "pads"})
    if (const Attribute* a = g.node().Find(key)) conv[key] = *a;
  const std::string columns = g.Op("Conv", {images, g.Op("CastLike", {one_hot, images})}, std::move(conv));
  g.SetGrad(0, g.Op("Reshape", {columns, g.ShapeOf(g.X(0))}));
}

}  // namespace

void ScatterAddElements(const KernelContext& ctx, Tensor& out, const Tensor& indices, const Tensor& updates,
                        int64_t axis) {
  ScatterAlongAxis(ctx, out, indices, updates, axis, Reduction::kAdd);
}

// Zeros of data_shape with the rows of dY added at the gathered indices (repeated indices accumulate).
void GatherBackward(KernelContext& ctx, const Tensor& dy, const Tensor& indices, const Shape& data_shape) {
  const int64_t rank = static_cast<int64_t>(data_shape.size());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": data must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx));
  const int64_t size = data_shape[axis];
  std::vector<int64_t> idx = indices.ToInt64Vector();
  for (int64_t& v : idx) v = CheckIndex(ctx, v, size, axis);
  const int64_t outer = Product(data_shape, 0, axis), inner = Product(data_shape, axis + 1, rank);
  const int64_t count = static_cast<int64_t>(idx.size());
  ET_CHECK(dy.numel() == outer * count * inner, ErrorCode::kInvalidArgument, What(ctx), ": gradient shape ",
           ShapeToString(dy.shape()), " does not match data shape ", ShapeToString(data_shape), " and ", count,
           " indices");
  Tensor& dx = ctx.Output(0, data_shape, dy.dtype());
  if (dx.nbytes() != 0) std::memset(dx.raw(), 0, dx.nbytes());
  // Jobs own disjoint (outer, column block) pairs, so accumulation needs no locks and is ordered.
  constexpr int64_t kBlock = 512;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  VisitFloat(dy.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = dy.data<T>();
    T* dst = dx.data<T>();
    ctx.threads().ParallelFor(outer * blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t job = begin; job < end; ++job) {
        const int64_t o = job / blocks, c0 = (job % blocks) * kBlock, c1 = std::min(inner, c0 + kBlock);
        for (int64_t j = 0; j < count; ++j) {
          const T* s = src + (o * count + j) * inner;
          T* d = dst + (o * size + idx[j]) * inner;
          for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
        }
      }
    });
  });
}

namespace {

// ai.edgetrain.GatherGrad(dY, indices, data_shape; axis)
void GatherGradKernel(KernelContext& ctx) {
  GatherBackward(ctx, ctx.Input(0), ctx.Input(1), ctx.Input(2).ToInt64Vector());
}

// GatherGrad in standard ONNX ops: view data as [outer, size, inner] and dY as [outer, count, inner],
// then ScatterElements with reduction 'add' along the middle axis.
std::shared_ptr<const FunctionDef> GatherGradFunction() {
  FunctionBuilder b("GatherGrad", {"dY", "indices", "data_shape"}, {"dX"}, {"axis"});
  const AttributeMap keep = {{"keepdims", Attribute::Int(1)}};
  b.Node("Constant", {}, {"axis_scalar"}, {{"value_int", Attribute::Ref(Attribute::Kind::kInt, "axis")}});
  b.Ints("one", {1});
  b.Ints("zero", {0});
  b.Ints("flat", {-1});
  b.Ints("to_end", {std::numeric_limits<int64_t>::max()});
  b.Constant("zero_index", Tensor::Scalar<int64_t>(0));
  b.Constant("zero_value", Tensor::Scalar<float>(0));
  b.Node("Reshape", {"axis_scalar", "one"}, {"axis_raw"});
  b.Node("Shape", {"data_shape"}, {"rank"});
  b.Node("Add", {"axis_raw", "rank"}, {"axis_shifted"});
  b.Node("Mod", {"axis_shifted", "rank"}, {"axis"});
  b.Node("Add", {"axis", "one"}, {"after_axis"});
  b.Node("Slice", {"data_shape", "zero", "axis"}, {"outer_dims"});
  b.Node("Slice", {"data_shape", "after_axis", "to_end"}, {"inner_dims"});
  b.Node("ReduceProd", {"outer_dims"}, {"outer"}, keep);
  b.Node("ReduceProd", {"inner_dims"}, {"inner"}, keep);
  b.Node("Gather", {"data_shape", "axis"}, {"size"});
  b.Node("Cast", {"indices"}, {"indices_64"}, {{"to", Attribute::Int(static_cast<int64_t>(DataType::kInt64))}});
  b.Node("Reshape", {"indices_64", "flat"}, {"index_flat"});
  b.Node("Less", {"index_flat", "zero_index"}, {"negative"});
  b.Node("Add", {"index_flat", "size"}, {"index_wrapped"});
  b.Node("Where", {"negative", "index_wrapped", "index_flat"}, {"index"});
  b.Node("Shape", {"index"}, {"count"});
  b.Node("Concat", {"outer", "count", "inner"}, {"dy_view"}, {{"axis", Attribute::Int(0)}});
  b.Node("Concat", {"one", "count", "one"}, {"index_view"}, {{"axis", Attribute::Int(0)}});
  b.Node("Concat", {"outer", "size", "inner"}, {"dx_view"}, {{"axis", Attribute::Int(0)}});
  b.Node("Reshape", {"dY", "dy_view"}, {"dy_3d"});
  b.Node("Reshape", {"index", "index_view"}, {"index_column"});
  b.Node("Expand", {"index_column", "dy_view"}, {"index_3d"});
  b.Node("CastLike", {"zero_value", "dY"}, {"typed_zero"});
  b.Node("Expand", {"typed_zero", "dx_view"}, {"zeros"});
  b.Node("ScatterElements", {"zeros", "index_3d", "dy_3d"}, {"dx_3d"},
         {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("add")}});
  b.Node("Reshape", {"dx_3d", "data_shape"}, {"dX"}, {{"allowzero", Attribute::Int(1)}});
  return b.Build();
}


std::string ZerosLike(GradientContext& g, const std::string& like) {
  return g.Op("Expand", {g.ScalarLike(0.0, like), g.ShapeOf(like)});
}

void GatherGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  g.SetGrad(0, g.Op("GatherGrad", {g.dY(0), g.X(1), g.ShapeOf(g.X(0))},
                    {{"axis", Attribute::Int(g.node().GetInt("axis", 0))}}, kEdgetrainDomain));
}

void GatherElementsGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  g.SetGrad(0, g.Op("ScatterElements", {ZerosLike(g, g.X(0)), g.X(1), g.dY(0)},
                    {{"axis", Attribute::Int(g.node().GetInt("axis", 0))}, {"reduction", Attribute::String("add")}}));
}

void GatherNDGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const int64_t batch_dims = g.node().GetInt("batch_dims", 0);
  ET_CHECK(batch_dims == 0, ErrorCode::kNotImplemented, g.node().Describe(),
           ": the gradient of GatherND with batch_dims ", batch_dims, " is not implemented (only 0)");
  g.SetGrad(0, g.Op("ScatterND", {ZerosLike(g, g.X(0)), g.X(1), g.dY(0)}, {{"reduction", Attribute::String("add")}}));
}

void CheckPlainScatter(GradientContext& g) {
  const std::string reduction = g.node().GetString("reduction", "none");
  ET_CHECK(reduction == "none", ErrorCode::kNotImplemented, g.node().Describe(), ": the gradient of ",
           g.node().op_type, " with reduction '", reduction, "' is not implemented (only 'none')");
}

// data gets dY where nothing was written; updates get dY where they were written.
void ScatterElementsGradient(GradientContext& g) {
  if (!g.NeedsGrad(0) && !g.NeedsGrad(2)) return;
  CheckPlainScatter(g);
  const AttributeMap axis = {{"axis", Attribute::Int(g.node().GetInt("axis", 0))}};
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("ScatterElements", {g.dY(0), g.X(1), ZerosLike(g, g.X(2))}, axis));
  if (g.NeedsGrad(2)) g.SetGrad(2, g.Op("GatherElements", {g.dY(0), g.X(1)}, axis));
}

void ScatterNDGradient(GradientContext& g) {
  if (!g.NeedsGrad(0) && !g.NeedsGrad(2)) return;
  CheckPlainScatter(g);
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("ScatterND", {g.dY(0), g.X(1), ZerosLike(g, g.X(2))}));
  if (g.NeedsGrad(2)) g.SetGrad(2, g.Op("GatherND", {g.dY(0), g.X(1)}));
}

void TriluGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  std::vector<std::string> inputs = {g.dY(0)};
  if (!g.X(1).empty()) inputs.push_back(g.X(1));
  g.SetGrad(0, g.Op("Trilu", inputs, {{"upper", Attribute::Int(g.node().GetInt("upper", 1))}}));
}

// Resize (nearest): resizing a tensor of X's element positions the same way tells which element
// every output copied; dY is scatter-added back there.
void ResizeGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const Node& node = g.node();
  ET_CHECK(g.opset() >= 11, ErrorCode::kNotImplemented, node.Describe(), ": the gradient of Resize-", g.opset(),
           " is not implemented (opset 11 and later only)");
  const std::string mode = node.GetString("mode", "nearest");
  ET_CHECK(mode == "nearest", ErrorCode::kNotImplemented, node.Describe(), ": the gradient of Resize mode '", mode,
           "' is not implemented (only 'nearest')");
  const std::string x = g.X(0);
  const std::string count = g.Op("Size", {x});
  const std::string positions = g.Op(
      "Reshape", {g.Op("Range", {g.Constant(Tensor::Scalar<int64_t>(0)), count, g.Constant(Tensor::Scalar<int64_t>(1))}),
                  g.ShapeOf(x)});
  std::vector<std::string> inputs = node.inputs;
  inputs[0] = positions;
  AttributeMap attrs = node.attributes;
  attrs["extrapolation_value"] = Attribute::Float(-1);  // outside the crop: no source element
  std::string sources = g.Op("Resize", inputs, attrs);
  std::string dy = g.dY(0);
  if (node.GetString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize") {
    const std::string zero = g.Constant(Tensor::Scalar<int64_t>(0));
    const std::string inside = g.Op("GreaterOrEqual", {sources, zero});
    dy = g.Op("Where", {inside, dy, g.ScalarLike(0.0, x)});
    sources = g.Op("Max", {sources, zero});
  }
  const std::string flat = g.Ints({-1});
  const std::string zeros = g.Op("Expand", {g.ScalarLike(0.0, x), g.Op("Reshape", {count, flat})});
  const std::string summed =
      g.Op("ScatterElements", {zeros, g.Op("Reshape", {sources, flat}), g.Op("Reshape", {dy, flat})},
           {{"axis", Attribute::Int(0)}, {"reduction", Attribute::String("add")}});
  g.SetGrad(0, g.Op("Reshape", {summed, g.ShapeOf(x)}));
}

}  // namespace

void RegisterIndexingOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Gather", Gather);
  ET_REGISTER_ONNX(r, "GatherElements", GatherElements);
  ET_REGISTER_ONNX(r, "GatherND", GatherND);
  ET_REGISTER_ONNX(r, "ScatterElements", ScatterElements);
  ET_REGISTER_ONNX(r, "ScatterND", ScatterND);
  ET_REGISTER_ONNX(r, "Scatter", ScatterElements, 1, 10);
  ET_REGISTER_ONNX(r, "OneHot", OneHot);
  ET_REGISTER_ONNX(r, "NonZero", NonZero);
  ET_REGISTER_ONNX(r, "Trilu", Trilu);
  ET_REGISTER_ONNX(r, "Compress", Compress);
  ET_REGISTER_ONNX(r, "ReverseSequence", ReverseSequence);
  ET_REGISTER_ONNX(r, "Resize", Resize);
  ET_REGISTER_ONNX(r, "Upsample", Upsample);
  ET_REGISTER_ONNX(r, "Col2Im", Col2Im, 18);
  ET_REGISTER_ONNX(r, "AffineGrid", AffineGrid, 20);
  ET_IF_BUILT("ai.edgetrain", "GatherGrad") RegisterFused(r, "GatherGrad", GatherGradKernel, ET_TRAINING_BODY(GatherGradFunction()));

  ET_IF_BUILT("", "Gather") r.SetGradient("Gather", GatherGradient);
  ET_IF_BUILT("", "GatherElements") r.SetGradient("GatherElements", GatherElementsGradient);
  ET_IF_BUILT("", "GatherND") r.SetGradient("GatherND", GatherNDGradient);
  ET_IF_BUILT("", "ScatterElements") r.SetGradient("ScatterElements", ScatterElementsGradient);
  ET_IF_BUILT("", "Scatter") r.SetGradient("Scatter", ScatterElementsGradient);
  ET_IF_BUILT("", "ScatterND") r.SetGradient("ScatterND", ScatterNDGradient);
  ET_IF_BUILT("", "Trilu") r.SetGradient("Trilu", TriluGradient);
  ET_IF_BUILT("", "Resize") r.SetGradient("Resize", ResizeGradient);
  ET_IF_BUILT("", "Col2Im") r.SetGradient("Col2Im", Col2ImGradient);
  ET_IF_BUILT("", "AffineGrid") r.SetGradient("AffineGrid", AffineGridGradient);
}

}  // namespace edgetrain
