// Shape family: operators that only move data (or compute shapes) and so work for every dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "core/string_tensor.hpp"
#include "ops/function_builder.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shape_util.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

const std::string& What(const KernelContext& ctx) { return ctx.node().Describe(); }

void CopyWhole(const Tensor& from, Tensor& to) { CopyTensorData(from, to); }

// Sorted, de-duplicated axes normalised against `rank`.
std::vector<int64_t> NormalizeAxes(const KernelContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t axis : axes) {
    ET_CHECK(axis >= -rank && axis < rank, ErrorCode::kInvalidArgument, What(ctx), ": axis ", axis,
             " is out of range for rank ", rank);
    out.push_back(axis < 0 ? axis + rank : axis);
  }
  std::sort(out.begin(), out.end());
  ET_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ErrorCode::kInvalidArgument, What(ctx),
           ": axes contain a duplicate");
  return out;
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze ----

void Reshape(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  auto requested = ctx.IntsFromInputOrAttr(1, "shape");
  ET_CHECK(requested.has_value(), ErrorCode::kInvalidModel, What(ctx), ": the target shape is missing");
  const bool allow_zero = ctx.node().GetInt("allowzero", 0) != 0;
  Shape out(requested->size());
  int64_t infer_axis = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v = (*requested)[i];
    if (v == -1) {
      ET_CHECK(infer_axis < 0, ErrorCode::kInvalidArgument, What(ctx), ": more than one -1 in the target shape");
      infer_axis = static_cast<int64_t>(i);
      continue;
    }
    if (v == 0 && !allow_zero) {
      ET_CHECK(i < data.rank(), ErrorCode::kInvalidArgument, What(ctx), ": target dim ", i,
               " is 0 (copy) but the input has rank ", data.rank());
      v = data.dim(i);
    }
    ET_CHECK(v >= 0, ErrorCode::kInvalidArgument, What(ctx), ": invalid target dim ", v);
    out[i] = v;
    known *= v;
  }
  if (infer_axis >= 0) {
    ET_CHECK(known != 0 && data.numel() % known == 0, ErrorCode::kInvalidArgument, What(ctx), ": cannot reshape ",
             ShapeToString(data.shape()), " to ", ShapeToString(*requested));
    out[infer_axis] = data.numel() / known;
  }
  ET_CHECK(NumElements(out) == data.numel(), ErrorCode::kInvalidArgument, What(ctx), ": cannot reshape ",
           ShapeToString(data.shape()), " to ", ShapeToString(out));
  CopyWhole(data, ctx.Output(0, out, data.dtype()));
}

void Flatten(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  int64_t axis = ctx.node().GetInt("axis", 1);
  ET_CHECK(axis >= -rank && axis <= rank, ErrorCode::kInvalidArgument, What(ctx), ": axis ", axis,
           " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  int64_t rows = 1, cols = 1;
  for (int64_t a = 0; a < rank; ++a) (a < axis ? rows : cols) *= data.dim(a);
  CopyWhole(data, ctx.Output(0, {rows, cols}, data.dtype()));
}

void Squeeze(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  auto axes_opt = ctx.IntsFromInputOrAttr(1, "axes");
  std::vector<bool> drop(rank, false);
  if (axes_opt && !axes_opt->empty()) {
    for (int64_t axis : NormalizeAxes(ctx, *axes_opt, rank)) {
      ET_CHECK(data.dim(axis) == 1, ErrorCode::kInvalidArgument, What(ctx), ": cannot squeeze axis ", axis,
               " of size ", data.dim(axis));
      drop[axis] = true;
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) drop[a] = data.dim(a) == 1;
  }
  Shape out;
  for (int64_t a = 0; a < rank; ++a)
    if (!drop[a]) out.push_back(data.dim(a));
  CopyWhole(data, ctx.Output(0, out, data.dtype()));
}

void Unsqueeze(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  auto axes_opt = ctx.IntsFromInputOrAttr(1, "axes");
  ET_CHECK(axes_opt.has_value(), ErrorCode::kInvalidModel, What(ctx), ": axes are missing");
  const int64_t out_rank = static_cast<int64_t>(data.rank() + axes_opt->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t axis : NormalizeAxes(ctx, *axes_opt, out_rank)) inserted[axis] = true;
  Shape out;
  size_t next = 0;
  for (int64_t a = 0; a < out_rank; ++a) out.push_back(inserted[a] ? 1 : data.dim(next++));
  CopyWhole(data, ctx.Output(0, out, data.dtype()));
}

// ---- Transpose, Concat, Split, Slice, Expand, Tile ----

void Transpose(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  std::vector<int64_t> perm = ctx.node().GetInts("perm");
  if (perm.empty())
    for (int64_t a = rank - 1; a >= 0; --a) perm.push_back(a);
  ET_CHECK(static_cast<int64_t>(perm.size()) == rank, ErrorCode::kInvalidArgument, What(ctx), ": perm has ",
           perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    ET_CHECK(p >= 0 && p < rank && !seen[p], ErrorCode::kInvalidArgument, What(ctx), ": perm is not a permutation");
    seen[p] = true;
  }
  const Shape in_strides = RowMajorStrides(data.shape());
  Shape out_shape(rank);
  std::vector<int64_t> src_strides(rank);
  for (int64_t a = 0; a < rank; ++a) {
    out_shape[a] = data.dim(perm[a]);
    src_strides[a] = in_strides[perm[a]];
  }
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), out_shape, src_strides, data.raw(),
              RowMajorStrides(out_shape), out.raw());
}

void Concat(KernelContext& ctx) {
  ET_CHECK(ctx.NumInputs() >= 1, ErrorCode::kInvalidModel, What(ctx), ": needs at least one input");
  const Tensor& first = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(first.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": inputs must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx));
  Shape out_shape = first.shape();
  out_shape[axis] = 0;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    const Tensor& in = ctx.Input(i);
    ET_CHECK(in.dtype() == first.dtype(), ErrorCode::kInvalidArgument, What(ctx), ": input ", i, " has type ",
             DataTypeName(in.dtype()), ", expected ", DataTypeName(first.dtype()));
    bool compatible = static_cast<int64_t>(in.rank()) == rank;
    for (int64_t a = 0; compatible && a < rank; ++a) compatible = a == axis || in.dim(a) == first.dim(a);
    ET_CHECK(compatible, ErrorCode::kInvalidArgument, What(ctx), ": input ", i, " has shape ",
             ShapeToString(in.shape()), ", incompatible with ", ShapeToString(first.shape()), " on axis ", axis);
    out_shape[axis] += in.dim(axis);
  }
  Tensor& out = ctx.Output(0, out_shape, first.dtype());
  const Shape out_strides = RowMajorStrides(out_shape);
  const size_t element = DataTypeSize(first.dtype());
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    const Tensor& in = ctx.Input(i);
    char* dst = static_cast<char*>(out.raw()) + offset * out_strides[axis] * element;
    StridedCopy(ctx.threads(), in.dtype(), What(ctx), in.shape(), RowMajorStrides(in.shape()), in.raw(),
                out_strides, dst);
    offset += in.dim(axis);
  }
}

void Split(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(ctx.node().GetInt("axis", 0), rank, What(ctx));
  const int64_t dim = data.dim(axis);
  const int64_t outputs = static_cast<int64_t>(ctx.NumOutputs());
  std::vector<int64_t> sizes;
  if (auto split = ctx.IntsFromInputOrAttr(1, "split"); split && !split->empty()) {
    sizes = *split;
  } else {
    const int64_t parts = ctx.node().GetInt("num_outputs", outputs);
    ET_CHECK(parts > 0, ErrorCode::kInvalidArgument, What(ctx), ": cannot split into ", parts, " parts");
    const int64_t chunk = (dim + parts - 1) / parts;
    sizes.assign(parts, chunk);
    sizes.back() = dim - chunk * (parts - 1);
  }
  ET_CHECK(static_cast<int64_t>(sizes.size()) == outputs, ErrorCode::kInvalidArgument, What(ctx), ": ",
           sizes.size(), " split sizes for ", outputs, " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    ET_CHECK(s >= 0, ErrorCode::kInvalidArgument, What(ctx), ": negative split size ", s);
    total += s;
  }
  ET_CHECK(total == dim, ErrorCode::kInvalidArgument, What(ctx), ": split sizes sum to ", total, " but axis ", axis,
           " has size ", dim);
  const Shape in_strides = RowMajorStrides(data.shape());
  const size_t element = DataTypeSize(data.dtype());
  int64_t offset = 0;
  for (int64_t i = 0; i < outputs; ++i) {
    Shape part = data.shape();
    part[axis] = sizes[i];
    Tensor& out = ctx.Output(i, part, data.dtype());
    const char* src = static_cast<const char*>(data.raw()) + offset * in_strides[axis] * element;
    if (ctx.HasOutput(i))
      StridedCopy(ctx.threads(), data.dtype(), What(ctx), part, in_strides, src, RowMajorStrides(part), out.raw());
    offset += sizes[i];
  }
}

// Where a slice reads its input: output shape, first element and per-axis strides (in elements).
struct SliceView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t base = 0;
};

SliceView ResolveSlice(const KernelContext& ctx, const Shape& data_shape, const std::vector<int64_t>& starts,
                       const std::vector<int64_t>& ends, std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int64_t rank = static_cast<int64_t>(data_shape.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  ET_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
           ErrorCode::kInvalidArgument, What(ctx), ": starts, ends, axes and steps differ in length");
  ET_CHECK(rank >= 1 || starts.empty(), ErrorCode::kInvalidArgument, What(ctx), ": cannot slice a scalar");

  SliceView view;
  const Shape in_strides = RowMajorStrides(data_shape);
  view.shape = data_shape;
  view.strides = in_strides;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = NormalizeAxis(axes[i], rank, What(ctx));
    ET_CHECK(!seen[axis], ErrorCode::kInvalidArgument, What(ctx), ": axis ", axis, " is sliced twice");
    seen[axis] = true;
    const int64_t dim = data_shape[axis], step = steps[i];
    ET_CHECK(step != 0, ErrorCode::kInvalidArgument, What(ctx), ": step must not be 0");
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t count;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    view.shape[axis] = count;
    if (count > 0) view.base += start * in_strides[axis];
    view.strides[axis] = in_strides[axis] * step;
  }
  return view;
}

// Slice parameters read from inputs first..first+3 (starts, ends, axes, steps).
SliceView ResolveSliceInputs(const KernelContext& ctx, const Shape& data_shape, size_t first) {
  std::vector<int64_t> axes, steps;
  if (ctx.HasInput(first + 2)) axes = ctx.Input(first + 2).ToInt64Vector();
  if (ctx.HasInput(first + 3)) steps = ctx.Input(first + 3).ToInt64Vector();
  return ResolveSlice(ctx, data_shape, ctx.Input(first).ToInt64Vector(), ctx.Input(first + 1).ToInt64Vector(), axes,
                      steps);
}

void Slice(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const SliceView view = ctx.opset() < 10 ? ResolveSlice(ctx, data.shape(), ctx.node().GetInts("starts"),
                                                         ctx.node().GetInts("ends"), ctx.node().GetInts("axes"), {})
                                          : ResolveSliceInputs(ctx, data.shape(), 1);
  Tensor& out = ctx.Output(0, view.shape, data.dtype());
  const char* src =
      static_cast<const char*>(data.raw()) + view.base * static_cast<int64_t>(DataTypeSize(data.dtype()));
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), view.shape, view.strides, src, RowMajorStrides(view.shape),
              out.raw());
}

void Expand(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const Shape requested = ctx.Input(1).ToInt64Vector();
  Shape out_shape;
  try {
    out_shape = BroadcastShapes(data.shape(), requested);
  } catch (const Error&) {
    Fail(ErrorCode::kInvalidArgument, What(ctx), ": cannot expand ", ShapeToString(data.shape()), " to ",
         ShapeToString(requested));
  }
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), out_shape, BroadcastStrides(data.shape(), out_shape),
              data.raw(), RowMajorStrides(out_shape), out.raw());
}

void Tile(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const std::vector<int64_t> repeats = ctx.Input(1).ToInt64Vector();
  const size_t rank = data.rank();
  ET_CHECK(repeats.size() == rank, ErrorCode::kInvalidArgument, What(ctx), ": ", repeats.size(),
           " repeats for an input of rank ", rank);
  // Output viewed as [r0, d0, r1, d1, ...]: the repeat axes read the input with stride 0.
  const Shape in_strides = RowMajorStrides(data.shape());
  Shape out_shape(rank), view_shape;
  std::vector<int64_t> view_src_strides;
  for (size_t a = 0; a < rank; ++a) {
    ET_CHECK(repeats[a] >= 0, ErrorCode::kInvalidArgument, What(ctx), ": negative repeat ", repeats[a]);
    out_shape[a] = data.dim(a) * repeats[a];
    view_shape.insert(view_shape.end(), {repeats[a], data.dim(a)});
    view_src_strides.insert(view_src_strides.end(), {0, in_strides[a]});
  }
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), view_shape, view_src_strides, data.raw(),
              RowMajorStrides(view_shape), out.raw());
}

// ---- Pad ----

int64_t MapPaddedIndex(int64_t i, int64_t dim, const std::string& mode) {
  if (i >= 0 && i < dim) return i;
  if (mode == "edge") return i < 0 ? 0 : dim - 1;
  if (mode == "wrap") return ((i % dim) + dim) % dim;
  if (dim == 1) return 0;  // reflect
  const int64_t period = 2 * (dim - 1);
  int64_t m = ((i % period) + period) % period;
  return m < dim ? m : period - m;
}

void Pad(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  const std::string mode = ctx.node().GetString("mode", "constant");
  ET_CHECK(mode == "constant" || mode == "reflect" || mode == "edge" || mode == "wrap", ErrorCode::kNotImplemented,
           What(ctx), ": mode '", mode, "' is not supported");
  auto pads_opt = ctx.IntsFromInputOrAttr(1, "pads");
  ET_CHECK(pads_opt.has_value(), ErrorCode::kInvalidModel, What(ctx), ": pads are missing");
  const std::vector<int64_t>& given = *pads_opt;
  std::vector<int64_t> axes;
  if (ctx.HasInput(3)) {
    ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, What(ctx), ": cannot pad a scalar along axes");
    for (int64_t axis : ctx.Input(3).ToInt64Vector()) axes.push_back(NormalizeAxis(axis, rank, What(ctx)));
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  const size_t n = axes.size();
  ET_CHECK(given.size() == 2 * n, ErrorCode::kInvalidArgument, What(ctx), ": pads has ", given.size(),
           " entries, expected ", 2 * n);
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  for (size_t i = 0; i < n; ++i) {
    begin[axes[i]] = given[i];
    end[axes[i]] = given[i + n];
  }
  Shape out_shape(rank);
  for (int64_t a = 0; a < rank; ++a) {
    out_shape[a] = data.dim(a) + begin[a] + end[a];
    ET_CHECK(out_shape[a] >= 0, ErrorCode::kInvalidArgument, What(ctx), ": pads crop axis ", a, " of size ",
             data.dim(a), " below zero");
    ET_CHECK(mode == "constant" || out_shape[a] == 0 || data.dim(a) > 0, ErrorCode::kInvalidArgument, What(ctx),
             ": cannot pad empty axis ", a, " in mode '", mode, "'");
  }
  Tensor& out = ctx.Output(0, out_shape, data.dtype());
  if (out.numel() == 0) return;
  const size_t element = DataTypeSize(data.dtype());
  const Shape in_strides = RowMajorStrides(data.shape());
  const Shape out_strides = RowMajorStrides(out_shape);

  if (mode == "constant") {
    uint64_t bits = 0;
    if (ctx.HasInput(2) && ctx.Input(2).numel() > 0) {
      const Tensor& value = ctx.Input(2);
      if (value.dtype() == data.dtype()) std::memcpy(&bits, value.raw(), element);
      else bits = ElementBitsFromDouble(data.dtype(), value.DoubleAt(0), What(ctx));
    } else {
      bits = ElementBitsFromDouble(data.dtype(), ctx.node().GetFloat("value", 0.0f), What(ctx));
    }
    FillElements(out.raw(), out.numel(), element, bits);
    Shape region(rank);
    int64_t src_offset = 0, dst_offset = 0;
    for (int64_t a = 0; a < rank; ++a) {
      region[a] = std::max<int64_t>(0, data.dim(a) + std::min<int64_t>(begin[a], 0) + std::min<int64_t>(end[a], 0));
      src_offset += std::max<int64_t>(0, -begin[a]) * in_strides[a];
      dst_offset += std::max<int64_t>(0, begin[a]) * out_strides[a];
    }
    StridedCopy(ctx.threads(), data.dtype(), What(ctx), region, in_strides,
                static_cast<const char*>(data.raw()) + src_offset * static_cast<int64_t>(element), out_strides,
                static_cast<char*>(out.raw()) + dst_offset * static_cast<int64_t>(element));
    return;
  }

  // reflect / edge / wrap: each output coordinate maps to one input coordinate per axis.
  std::vector<std::vector<int64_t>> source(rank);
  for (int64_t a = 0; a < rank; ++a) {
    source[a].resize(out_shape[a]);
    for (int64_t i = 0; i < out_shape[a]; ++i)
      source[a][i] = MapPaddedIndex(i - begin[a], data.dim(a), mode) * in_strides[a];
  }
  if (rank == 0) {
    CopyWhole(data, out);
    return;
  }
  const int64_t inner = out_shape[rank - 1];
  const int64_t rows = out.numel() / inner;
  VisitElementSize(data.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(out.raw());
    const std::vector<int64_t>& last = source[rank - 1];
    ctx.threads().ParallelFor(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
      for (int64_t row = r0; row < r1; ++row) {
        int64_t rest = row, offset = 0;
        for (int64_t a = rank - 2; a >= 0; --a) {
          offset += source[a][rest % out_shape[a]];
          rest /= out_shape[a];
        }
        U* d = dst + row * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] = src[offset + last[i]];
      }
    });
  });
}

// ---- Shape, Size, ConstantOfShape, EyeLike, Range ----

void ShapeOp(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(data.rank());
  auto clamp_index = [&](int64_t i) {
    if (i < 0) i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  const int64_t start = clamp_index(ctx.node().GetInt("start", 0));
  const int64_t end = ctx.node().HasAttr("end") ? clamp_index(ctx.node().GetInt("end", rank)) : rank;
  const int64_t count = std::max<int64_t>(0, end - start);
  Tensor& out = ctx.Output(0, {count}, DataType::kInt64);
  int64_t* values = out.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) values[i] = data.dim(start + i);
}

void Size(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  ctx.Output(0, {}, DataType::kInt64).data<int64_t>()[0] = data.numel();
}

void ConstantOfShape(KernelContext& ctx) {
  const Shape shape = ctx.Input(0).ToInt64Vector();
  for (int64_t d : shape)
    ET_CHECK(d >= 0, ErrorCode::kInvalidArgument, What(ctx), ": negative dim in shape ", ShapeToString(shape));
  const Tensor* value = ctx.node().GetTensor("value");
  DataType dtype = DataType::kFloat32;
  uint64_t bits = 0;
  if (value != nullptr) {
    ET_CHECK(value->numel() == 1, ErrorCode::kInvalidModel, What(ctx), ": 'value' must hold one element, it holds ",
             value->numel());
    dtype = value->dtype();
    ET_CHECK(DataTypeSize(dtype) >= 1 && DataTypeSize(dtype) <= 8, ErrorCode::kNotImplemented, What(ctx),
             ": element type ", DataTypeName(dtype), " is not supported");
    std::memcpy(&bits, value->raw(), DataTypeSize(dtype));
  }
  Tensor& out = ctx.Output(0, shape, dtype);
  FillElements(out.raw(), out.numel(), DataTypeSize(dtype), bits);
}

void EyeLike(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  ET_CHECK(data.rank() == 2, ErrorCode::kInvalidArgument, What(ctx), ": input must be 2-D, got shape ",
           ShapeToString(data.shape()));
  DataType dtype = data.dtype();
  if (ctx.node().HasAttr("dtype")) {
    const int64_t code = ctx.node().GetInt("dtype", 0);
    ET_CHECK(IsKnownDataType(static_cast<int32_t>(code)), ErrorCode::kInvalidArgument, What(ctx), ": unknown dtype ",
             code);
    dtype = static_cast<DataType>(code);
  }
  const int64_t rows = data.dim(0), cols = data.dim(1), k = ctx.node().GetInt("k", 0);
  Tensor& out = ctx.Output(0, data.shape(), dtype);
  const size_t element = DataTypeSize(dtype);
  ET_CHECK(element > 0, ErrorCode::kNotImplemented, What(ctx), ": element type ", DataTypeName(dtype),
           " is not supported");
  if (out.nbytes()) std::memset(out.raw(), 0, out.nbytes());
  const uint64_t one = ElementBitsFromDouble(dtype, 1.0, What(ctx));
  char* base = static_cast<char*>(out.raw());
  for (int64_t r = std::max<int64_t>(0, -k); r < rows && r + k < cols; ++r)
    std::memcpy(base + (r * cols + r + k) * static_cast<int64_t>(element), &one, element);
}

void Range(KernelContext& ctx) {
  const Tensor& start_t = ctx.Input(0);
  const Tensor& limit_t = ctx.Input(1);
  const Tensor& delta_t = ctx.Input(2);
  ET_CHECK(start_t.numel() == 1 && limit_t.numel() == 1 && delta_t.numel() == 1, ErrorCode::kInvalidArgument,
           What(ctx), ": start, limit and delta must be scalars");
  ET_CHECK(limit_t.dtype() == start_t.dtype() && delta_t.dtype() == start_t.dtype(), ErrorCode::kInvalidArgument,
           What(ctx), ": start, limit and delta must share one type");
  VisitNumeric(start_t.dtype(), What(ctx), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T start = *static_cast<const T*>(start_t.raw());
    const T limit = *static_cast<const T*>(limit_t.raw());
    const T delta = *static_cast<const T*>(delta_t.raw());
    ET_CHECK(delta != T(0), ErrorCode::kInvalidArgument, What(ctx), ": delta must not be 0");
    int64_t count;
    if constexpr (std::is_floating_point_v<T>) {
      count = static_cast<int64_t>(std::max<T>(T(0), std::ceil((limit - start) / delta)));
    } else {
      const double span = static_cast<double>(limit) - static_cast<double>(start);
      count = static_cast<int64_t>(std::max(0.0, std::ceil(span / static_cast<double>(delta))));
    }
    T* out = ctx.Output(0, {count}, start_t.dtype()).template data<T>();
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
}

// ---- DepthToSpace, SpaceToDepth ----

void DepthToSpace(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  ET_CHECK(data.rank() == 4, ErrorCode::kInvalidArgument, What(ctx), ": input must be 4-D, got shape ",
           ShapeToString(data.shape()));
  const int64_t b = ctx.node().GetInt("blocksize", 0);
  const std::string mode = ctx.node().GetString("mode", "DCR");
  ET_CHECK(mode == "DCR" || mode == "CRD", ErrorCode::kNotImplemented, What(ctx), ": mode '", mode,
           "' is not supported");
  const int64_t n = data.dim(0), c = data.dim(1), h = data.dim(2), w = data.dim(3);
  ET_CHECK(b > 0 && c % (b * b) == 0, ErrorCode::kInvalidArgument, What(ctx), ": channels ", c,
           " are not divisible by blocksize^2 (blocksize ", b, ")");
  const int64_t oc = c / (b * b), hw = h * w;
  Tensor& out = ctx.Output(0, {n, oc, h * b, w * b}, data.dtype());
  // Output viewed as [n, oc, h, b1, w, b2].
  const Shape view = {n, oc, h, b, w, b};
  std::vector<int64_t> src_strides;
  if (mode == "DCR") src_strides = {c * hw, hw, w, b * oc * hw, 1, oc * hw};
  else src_strides = {c * hw, b * b * hw, w, b * hw, 1, hw};
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), view, src_strides, data.raw(), RowMajorStrides(view),
              out.raw());
}

void SpaceToDepth(KernelContext& ctx) {
  const Tensor& data = ctx.Input(0);
  ET_CHECK(data.rank() == 4, ErrorCode::kInvalidArgument, What(ctx), ": input must be 4-D, got shape ",
           ShapeToString(data.shape()));
  const int64_t b = ctx.node().GetInt("blocksize", 0);
  const int64_t n = data.dim(0), c = data.dim(1), h = data.dim(2), w = data.dim(3);
  ET_CHECK(b > 0 && h % b == 0 && w % b == 0, ErrorCode::kInvalidArgument, What(ctx), ": spatial dims ", h, "x", w,
           " are not divisible by blocksize ", b);
  const int64_t oh = h / b, ow = w / b;
  Tensor& out = ctx.Output(0, {n, c * b * b, oh, ow}, data.dtype());
  // Output viewed as [n, b1, b2, c, oh, ow].
  const Shape view = {n, b, b, c, oh, ow};
  const std::vector<int64_t> src_strides = {c * h * w, w, 1, h * w, b * w, b};
  StridedCopy(ctx.threads(), data.dtype(), What(ctx), view, src_strides, data.raw(), RowMajorStrides(view),
              out.raw());
}

// ---- Gradient rules ----


std::optional<int64_t> StaticRank(GradientContext& g, const std::string& value) {
  const ValueInfo* info = g.Info(value);
  if (info == nullptr || !info->has_shape) return std::nullopt;
  return static_cast<int64_t>(info->shape.size());
}

std::string ZerosShaped(GradientContext& g, const std::string& like, const std::string& shape) {
  return g.Op("Expand", {g.ScalarLike(0.0, like), shape});
}

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient is dY with X's shape.
void ReshapeLikeInputGradient(GradientContext& g) {
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Reshape", {g.dY(0), g.ShapeOf(g.X(0))}));
}

void TransposeGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const std::vector<int64_t> perm = g.node().GetInts("perm");
  if (perm.empty()) {  // reversed axes are their own inverse
    g.SetGrad(0, g.Op("Transpose", {g.dY(0)}));
    return;
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t a = 0; a < perm.size(); ++a) {
    ET_CHECK(perm[a] >= 0 && perm[a] < static_cast<int64_t>(perm.size()), ErrorCode::kInvalidModel,
             g.node().Describe(), ": perm is not a permutation");
    inverse[perm[a]] = static_cast<int64_t>(a);
  }
  g.SetGrad(0, g.Op("Transpose", {g.dY(0)}, {{"perm", Attribute::Ints(inverse)}}));
}

// Concat: split dY back by the inputs' sizes along the axis.
void ConcatGradient(GradientContext& g) {
  const size_t n = g.NumInputs();
  bool any = false;
  for (size_t i = 0; i < n; ++i) any = any || g.NeedsGrad(i);
  if (!any) return;
  if (n == 1) {
    g.SetGrad(0, g.dY(0));
    return;
  }
  const int64_t axis = g.node().GetInt("axis", 0);
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < n; ++i) {
    const ValueInfo* info = g.Info(g.X(i));
    if (info == nullptr || !info->has_shape) break;
    const int64_t rank = static_cast<int64_t>(info->shape.size());
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank || !info->shape[a].known()) break;
    sizes.push_back(info->shape[a].value);
  }
  std::string split;
  if (sizes.size() == n) {
    split = g.Ints(sizes);
  } else {
    std::vector<std::string> parts;
    const std::string axis_index = g.Ints({axis});
    for (size_t i = 0; i < n; ++i) parts.push_back(g.Op("Gather", {g.ShapeOf(g.X(i)), axis_index}));
    split = g.Op("Concat", parts, {{"axis", Attribute::Int(0)}});
  }
  const std::vector<std::string> pieces = g.Emit("Split", {g.dY(0), split}, n, {{"axis", Attribute::Int(axis)}});
  for (size_t i = 0; i < n; ++i) g.SetGrad(i, pieces[i]);
}

// Split: concatenate the outputs' gradients, zeros for outputs no gradient reached.
void SplitGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const int64_t axis = g.node().GetInt("axis", 0);
  std::vector<std::string> recomputed;  // the forward outputs, when some of them were not kept
  std::vector<std::string> parts;
  for (size_t k = 0; k < g.NumOutputs(); ++k) {
    if (!g.dY(k).empty()) {
      parts.push_back(g.dY(k));
      continue;
    }
    std::string output = g.Y(k);
    if (output.empty()) {
      if (recomputed.empty())
        recomputed = g.Emit("Split", g.node().inputs, g.NumOutputs(), g.node().attributes);
      output = recomputed[k];
    }
    parts.push_back(ZerosShaped(g, g.X(0), g.ShapeOf(output)));
  }
  g.SetGrad(0, parts.size() == 1 ? parts[0] : g.Op("Concat", parts, {{"axis", Attribute::Int(axis)}}));
}

void SliceGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  std::vector<std::string> inputs = {g.dY(0), g.ShapeOf(g.X(0))};
  if (g.opset() < 10) {
    inputs.push_back(g.Ints(g.node().GetInts("starts")));
    inputs.push_back(g.Ints(g.node().GetInts("ends")));
    if (g.node().HasAttr("axes")) inputs.push_back(g.Ints(g.node().GetInts("axes")));
  } else {
    for (size_t i = 1; i <= 4; ++i) inputs.push_back(g.X(i));
  }
  // SliceGrad's function body reads every input, so omitted axes and steps are spelled out.
  inputs.resize(6);
  const std::string& starts = inputs[2];
  auto like_starts = [&](int64_t v) { return g.Op("CastLike", {g.Constant(Tensor::Scalar<int64_t>(v)), starts}); };
  if (inputs[4].empty())
    inputs[4] = g.Op("Range", {like_starts(0), g.Op("CastLike", {g.Op("Size", {starts}), starts}), like_starts(1)});
  if (inputs[5].empty()) inputs[5] = g.Op("Expand", {like_starts(1), g.Op("Shape", {starts})});
  g.SetGrad(0, g.Op("SliceGrad", inputs, {}, kEdgetrainDomain));
}

// Int64 tensor shaped like x holding each element's row-major position: gathered or padded like x,
// it tells where every output element came from.
std::string FlatPositions(GradientContext& g, const std::string& x) {
  const std::string count = g.Op("Size", {x});
  const std::string range = g.Op("Range", {g.Constant(Tensor::Scalar<int64_t>(0)), count,
                                            g.Constant(Tensor::Scalar<int64_t>(1))});
  return g.Op("Reshape", {range, g.ShapeOf(x)});
}

// Zeros shaped like x plus dY added at the positions `sources` (shaped like dY) names.
std::string ScatterAddToPositions(GradientContext& g, const std::string& x, const std::string& sources,
                                  const std::string& dy) {
  const std::string flat = g.Ints({-1});
  const std::string zeros = ZerosShaped(g, x, g.Op("Reshape", {g.Op("Size", {x}), flat}));
  const std::string summed = g.Op("ScatterElements", {zeros, g.Op("Reshape", {sources, flat}), g.Op("Reshape", {dy, flat})},
                                  {{"axis", Attribute::Int(0)}, {"reduction", Attribute::String("add")}});
  return g.Op("Reshape", {summed, g.ShapeOf(x)});
}

// CenterCropPad (opset 18): each listed axis cropped or zero-padded to its target length around the centre
// (the smaller half of the difference before it).
void CenterCropPad(KernelContext& ctx) {
  const Tensor& x = ctx.Input(0);
  const std::vector<int64_t> target = ctx.Input(1).ToInt64Vector();
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes;
  if (ctx.node().HasAttr("axes")) {
    std::vector<bool> seen(rank, false);
    for (int64_t a : ctx.node().GetInts("axes")) {
      ET_CHECK(a >= -rank && a < rank, ErrorCode::kInvalidArgument, What(ctx), ": axis ", a, " is out of range for rank ",
               rank);
      a = a < 0 ? a + rank : a;
      ET_CHECK(!seen[a], ErrorCode::kInvalidArgument, What(ctx), ": axis ", a, " is listed twice in 'axes'");
      seen[a] = true;
      axes.push_back(a);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  ET_CHECK(target.size() == axes.size(), ErrorCode::kInvalidArgument, What(ctx), ": shape has ", target.size(),
           " entries for ", axes.size(), " axes");
  Shape out_shape = x.shape();
  std::vector<int64_t> shift(rank, 0);  // source index = output index + shift
  for (size_t i = 0; i < axes.size(); ++i) {
    ET_CHECK(target[i] >= 0, ErrorCode::kInvalidArgument, What(ctx), ": negative target length ", target[i]);
    const int64_t a = axes[i], difference = x.dim(a) - target[i];
    out_shape[a] = target[i];
    shift[a] = difference >= 0 ? difference / 2 : -((-difference) / 2);
  }
  Tensor& y = ctx.Output(0, out_shape, x.dtype());
  if (y.numel() == 0) return;
  const Shape in_strides = RowMajorStrides(x.shape());
  VisitElementSize(x.dtype(), What(ctx), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.raw());
    std::vector<int64_t> index(rank, 0);
    for (int64_t o = 0; o < y.numel(); ++o) {
      int64_t offset = 0;
      bool inside = true;
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t s = index[d] + shift[d];
        inside = inside && s >= 0 && s < x.dim(d);
        offset += s * in_strides[d];
      }
      dst[o] = inside ? src[offset] : U{};
      for (int64_t d = rank; d-- > 0;)
        if (++index[d] < out_shape[d]) break; else index[d] = 0;
    }
  });
}

// Cropping and padding around the centre are each other's adjoints: dX = CenterCropPad(dY, shape(X)).
void CenterCropPadGradient(GradientContext& g) {
  if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("CenterCropPad", {g.dY(0), g.ShapeOf(g.X(0))}));
}

void PadGradient(GradientContext& g) {
  const std::string mode = g.node().GetString("mode", "constant");
  const bool pads_in_attr = g.opset() < 11;
  const std::string axes = g.X(3);
  auto pad = [&](const std::string& data, const std::string& pads, AttributeMap attrs) {
    std::vector<std::string> inputs = {data, pads};
    if (!axes.empty()) inputs.insert(inputs.end(), {"", axes});
    return g.Op("Pad", inputs, std::move(attrs));
  };
  if (mode == "constant") {
    // Padding with the negated pads crops what was added and restores zeros where X was cropped.
    std::string dx;
    if (g.NeedsGrad(0) || g.NeedsGrad(2)) {
      std::string negated;
      if (pads_in_attr) {
        std::vector<int64_t> pads = g.node().GetInts("pads", g.node().GetInts("paddings"));
        for (int64_t& p : pads) p = -p;
        negated = g.Ints(pads);
      } else {
        negated = g.Op("Neg", {g.X(1)});
      }
      dx = pad(g.dY(0), negated, {});
      g.SetGrad(0, dx);
    }
    if (g.NeedsGrad(2)) {  // the fill value reaches every padded element
      const AttributeMap all = {{"keepdims", Attribute::Int(0)}};
      const std::string filled = g.Op("Sub", {g.Op("ReduceSum", {g.dY(0)}, all), g.Op("ReduceSum", {dx}, all)});
      g.SetGrad(2, g.Op("Reshape", {filled, g.ShapeOf(g.X(2))}));
    }
    return;
  }
  if (!g.NeedsGrad(0)) return;
  const std::string pads = pads_in_attr ? g.Ints(g.node().GetInts("pads", g.node().GetInts("paddings"))) : g.X(1);
  const std::string sources = pad(FlatPositions(g, g.X(0)), pads, {{"mode", Attribute::String(mode)}});
  g.SetGrad(0, ScatterAddToPositions(g, g.X(0), sources, g.dY(0)));
}

void ExpandGradient(GradientContext& g) { g.SetGrad(0, g.dY(0), /*maybe_broadcast=*/true); }

// Tile: view dY as [r0, d0, r1, d1, ...] and sum over the repeat axes.
void TileGradient(GradientContext& g) {
  if (!g.NeedsGrad(0)) return;
  const std::string shape = g.ShapeOf(g.X(0));
  const std::string column = g.Ints({1});
  const std::string pairs = g.Op("Concat", {g.Op("Unsqueeze", {g.X(1), column}), g.Op("Unsqueeze", {shape, column})},
                                 {{"axis", Attribute::Int(1)}});
  const std::string grouped = g.Op("Reshape", {g.dY(0), g.Op("Reshape", {pairs, g.Ints({-1})})});
  std::string repeat_axes;
  if (std::optional<int64_t> rank = StaticRank(g, g.X(0))) {
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < *rank; ++a) axes.push_back(2 * a);
    repeat_axes = g.Ints(axes);
  } else {
    const std::string twice_rank = g.Op("Mul", {g.Op("Size", {shape}), g.Constant(Tensor::Scalar<int64_t>(2))});
    repeat_axes = g.Op("Range", {g.Constant(Tensor::Scalar<int64_t>(0)), twice_rank,
                                 g.Constant(Tensor::Scalar<int64_t>(2))});
  }
  g.SetGrad(0, g.Op("ReduceSum", {grouped, repeat_axes},
                    {{"keepdims", Attribute::Int(0)}, {"noop_with_empty_axes", Attribute::Int(1)}}));
}

// SliceGrad in standard ONNX ops: slice a tensor of element positions like X, then scatter dY to them.
std::shared_ptr<const FunctionDef> SliceGradFunction() {
  FunctionBuilder b("SliceGrad", {"dY", "x_shape", "starts", "ends", "axes", "steps"}, {"dX"});
  const AttributeMap allow_zero = {{"allowzero", Attribute::Int(1)}};
  b.Constant("zero", Tensor::Scalar<int64_t>(0));
  b.Constant("one", Tensor::Scalar<int64_t>(1));
  b.Constant("flat", Tensor::FromVector<int64_t>({-1}, {1}));
  b.Constant("zero_value", Tensor::Scalar<float>(0));
  b.Node("ReduceProd", {"x_shape"}, {"count_1d"}, {{"keepdims", Attribute::Int(1)}});
  b.Node("Squeeze", {"count_1d"}, {"count"});
  b.Node("Range", {"zero", "count", "one"}, {"positions_flat"});
  b.Node("Reshape", {"positions_flat", "x_shape"}, {"positions"}, allow_zero);
  b.Node("Slice", {"positions", "starts", "ends", "axes", "steps"}, {"picked"});
  b.Node("Reshape", {"picked", "flat"}, {"picked_flat"});
  b.Node("Reshape", {"dY", "flat"}, {"dy_flat"});
  b.Node("CastLike", {"zero_value", "dY"}, {"typed_zero"});
  b.Node("Expand", {"typed_zero", "count_1d"}, {"zeros"});
  b.Node("ScatterElements", {"zeros", "picked_flat", "dy_flat"}, {"dx_flat"}, {{"axis", Attribute::Int(0)}});
  b.Node("Reshape", {"dx_flat", "x_shape"}, {"dX"}, allow_zero);
  return b.Build();
}

}  // namespace

// ai.edgetrain.SliceGrad(dY, x_shape, starts, ends, axes?, steps?): zeros of x_shape with dY written
// where Slice(X, starts, ends, axes, steps) read its elements.
void SliceGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  const Shape x_shape = ctx.Input(1).ToInt64Vector();
  const SliceView view = ResolveSliceInputs(ctx, x_shape, 2);
  ET_CHECK(dy.shape() == view.shape, ErrorCode::kInvalidArgument, What(ctx), ": gradient shape ",
           ShapeToString(dy.shape()), " differs from the slice shape ", ShapeToString(view.shape));
  Tensor& dx = ctx.Output(0, x_shape, dy.dtype());
  if (dx.nbytes() != 0) std::memset(dx.raw(), 0, dx.nbytes());
  char* dst = static_cast<char*>(dx.raw()) + view.base * static_cast<int64_t>(DataTypeSize(dy.dtype()));
  StridedCopy(ctx.threads(), dy.dtype(), What(ctx), view.shape, RowMajorStrides(view.shape), dy.raw(), view.strides,
              dst);
}

void RegisterShapeOps(OpRegistry& r) {
  // Output 0 is input 0's elements in order: the executor may hand on a view (output_views_input).
  ET_REGISTER_ONNX(r, "Reshape", Reshape).output_views_input = true;
  ET_REGISTER_ONNX(r, "Flatten", Flatten).output_views_input = true;
  ET_REGISTER_ONNX(r, "Squeeze", Squeeze).output_views_input = true;
  ET_REGISTER_ONNX(r, "Unsqueeze", Unsqueeze).output_views_input = true;
  ET_REGISTER_ONNX(r, "Transpose", Transpose);
  ET_REGISTER_ONNX(r, "Concat", Concat);
  ET_REGISTER_ONNX(r, "Split", Split);
  ET_REGISTER_ONNX(r, "Slice", Slice);
  ET_REGISTER_ONNX(r, "Expand", Expand);
  ET_REGISTER_ONNX(r, "Tile", Tile);
  ET_REGISTER_ONNX(r, "Pad", Pad);
  ET_REGISTER_ONNX(r, "CenterCropPad", CenterCropPad, 18);
  ET_REGISTER_ONNX(r, "Shape", ShapeOp);
  ET_REGISTER_ONNX(r, "Size", Size);
  ET_REGISTER_ONNX(r, "ConstantOfShape", ConstantOfShape);
  ET_REGISTER_ONNX(r, "EyeLike", EyeLike);
  ET_REGISTER_ONNX(r, "Range", Range);
  ET_REGISTER_ONNX(r, "DepthToSpace", DepthToSpace);
  ET_REGISTER_ONNX(r, "SpaceToDepth", SpaceToDepth);
  ET_IF_BUILT("ai.edgetrain", "SliceGrad") RegisterFused(r, "SliceGrad", SliceGradKernel, ET_TRAINING_BODY(SliceGradFunction()));

  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) r.SetGradient(op, ReshapeLikeInputGradient);
  ET_IF_BUILT("", "Transpose") r.SetGradient("Transpose", TransposeGradient);
  ET_IF_BUILT("", "Concat") r.SetGradient("Concat", ConcatGradient);
  ET_IF_BUILT("", "Split") r.SetGradient("Split", SplitGradient);
  ET_IF_BUILT("", "Slice") r.SetGradient("Slice", SliceGradient);
  ET_IF_BUILT("", "Pad") r.SetGradient("Pad", PadGradient);
  ET_IF_BUILT("", "CenterCropPad") r.SetGradient("CenterCropPad", CenterCropPadGradient);
  ET_IF_BUILT("", "Expand") r.SetGradient("Expand", ExpandGradient);
  ET_IF_BUILT("", "Tile") r.SetGradient("Tile", TileGradient);
}

}  // namespace edgetrain
