// Sequence family: SequenceConstruct, SequenceEmpty, SequenceAt, SequenceInsert, SequenceErase,
// SequenceLength, SplitToSequence, ConcatFromSequence. Sequences share tensor memory; tensors are
// never written after they are produced, so sharing is safe.
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/string_tensor.hpp"
#include "ops/registry.hpp"

namespace edgetrain {
namespace {

int64_t DimProduct(const Shape& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= dims[i];
  return product;
}

// Reads the scalar position input `index` (int32/int64).
int64_t PositionInput(const KernelContext& ctx, size_t index) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == 1 && (t.dtype() == DataType::kInt64 || t.dtype() == DataType::kInt32),
           ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input 'position' must be an int32/int64 scalar, got ",
           DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.Int64At(0);
}

// Normalises `position` into [0, size + extra), where extra is 1 for insertion points.
int64_t NormalizePosition(const KernelContext& ctx, int64_t position, int64_t size, int64_t extra) {
  ET_CHECK(position >= -size && position < size + extra, ErrorCode::kOutOfRange, ctx.node().Describe(),
           ": position ", position, " is out of range for a sequence of ", size, " tensors");
  return position < 0 ? position + size : position;
}

void CheckElementType(const KernelContext& ctx, const TensorSequence& sequence, DataType dtype) {
  if (sequence.empty()) return;
  ET_CHECK(sequence.front().dtype() == dtype, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": tensor of type ", DataTypeName(dtype), " does not match the sequence element type ",
           DataTypeName(sequence.front().dtype()));
}

void SequenceConstruct(KernelContext& ctx) {
  TensorSequence sequence;
  sequence.reserve(ctx.NumInputs());
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    const Tensor& t = ctx.Input(i);
    CheckElementType(ctx, sequence, t.dtype());
    sequence.push_back(t);
  }
  ctx.SetOutputSequence(0, std::move(sequence));
}

void SequenceEmpty(KernelContext& ctx) {
  const int64_t dtype = ctx.node().GetInt("dtype", static_cast<int64_t>(DataType::kFloat32));
  ET_CHECK(IsKnownDataType(static_cast<int32_t>(dtype)), ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": attribute 'dtype' = ", dtype, " is not a known element type");
  ctx.SetOutputSequence(0, TensorSequence{});
}

void SequenceAt(KernelContext& ctx) {
  const TensorSequence& sequence = ctx.InputSequence(0);
  const int64_t size = static_cast<int64_t>(sequence.size());
  const int64_t position = NormalizePosition(ctx, PositionInput(ctx, 1), size, 0);
  const Tensor& element = sequence[static_cast<size_t>(position)];
  Tensor& out = ctx.Output(0, element.shape(), element.dtype());
  CopyTensorData(element, out);
}

void SequenceInsert(KernelContext& ctx) {
  TensorSequence sequence = ctx.InputSequence(0);
  const Tensor& tensor = ctx.Input(1);
  CheckElementType(ctx, sequence, tensor.dtype());
  const int64_t size = static_cast<int64_t>(sequence.size());
  const int64_t position = ctx.HasInput(2) ? NormalizePosition(ctx, PositionInput(ctx, 2), size, 1) : size;
  sequence.insert(sequence.begin() + position, tensor);
  ctx.SetOutputSequence(0, std::move(sequence));
}

void SequenceErase(KernelContext& ctx) {
  TensorSequence sequence = ctx.InputSequence(0);
  const int64_t size = static_cast<int64_t>(sequence.size());
  const int64_t position = NormalizePosition(ctx, ctx.HasInput(1) ? PositionInput(ctx, 1) : -1, size, 0);
  sequence.erase(sequence.begin() + position);
  ctx.SetOutputSequence(0, std::move(sequence));
}

void SequenceLength(KernelContext& ctx) {
  const int64_t size = static_cast<int64_t>(ctx.InputSequence(0).size());
  ctx.Output(0, {}, DataType::kInt64).data<int64_t>()[0] = size;
}

void SplitToSequence(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& input = ctx.Input(0);
  const int64_t rank = static_cast<int64_t>(input.rank());
  ET_CHECK(rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": input must have rank >= 1");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), rank, node.Describe() + " attribute 'axis'");
  const int64_t length = input.dim(static_cast<size_t>(axis));
  ET_CHECK(DataTypeSize(input.dtype()) > 0, ErrorCode::kNotImplemented, node.Describe(), ": element type ",
           DataTypeName(input.dtype()), " is not supported");

  std::vector<int64_t> sizes;
  bool keep_axis = true;
  if (ctx.HasInput(1)) {
    const Tensor& split = ctx.Input(1);
    ET_CHECK(split.rank() <= 1, ErrorCode::kInvalidArgument, node.Describe(),
             ": input 'split' must be a scalar or 1-D, got shape ", ShapeToString(split.shape()));
    const std::vector<int64_t> values = split.ToInt64Vector();
    if (split.rank() == 0) {
      const int64_t chunk = values[0];
      ET_CHECK(chunk > 0, ErrorCode::kInvalidArgument, node.Describe(), ": split size ", chunk, " must be positive");
      for (int64_t start = 0; start < length; start += chunk) sizes.push_back(std::min(chunk, length - start));
    } else {
      int64_t total = 0;
      for (int64_t v : values) {
        ET_CHECK(v >= 0, ErrorCode::kInvalidArgument, node.Describe(), ": split size ", v, " must be >= 0");
        total += v;
      }
      ET_CHECK(total == length, ErrorCode::kInvalidArgument, node.Describe(), ": split sizes sum to ", total,
               " but axis ", axis, " has size ", length);
      sizes = values;
    }
  } else {
    sizes.assign(static_cast<size_t>(length), 1);
    keep_axis = node.GetInt("keepdims", 1) != 0;
  }

  const int64_t outer = DimProduct(input.shape(), 0, static_cast<size_t>(axis));
  const size_t inner_bytes =
      static_cast<size_t>(DimProduct(input.shape(), static_cast<size_t>(axis) + 1, input.rank())) *
      DataTypeSize(input.dtype());
  const auto* src = static_cast<const uint8_t*>(input.raw());
  TensorSequence sequence;
  sequence.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    Shape shape = input.shape();
    shape[static_cast<size_t>(axis)] = size;
    Tensor part(input.dtype(), shape, node.Describe() + " output");
    auto* dst = static_cast<uint8_t*>(part.raw());
    const size_t chunk_bytes = static_cast<size_t>(size) * inner_bytes;
    for (int64_t o = 0; o < outer && chunk_bytes > 0; ++o) {
      std::memcpy(dst + o * chunk_bytes, src + (o * length + start) * inner_bytes, chunk_bytes);
    }
    if (!keep_axis) shape.erase(shape.begin() + axis);
    sequence.push_back(keep_axis ? part : part.Reshaped(shape));
    start += size;
  }
  ctx.SetOutputSequence(0, std::move(sequence));
}

void ConcatFromSequence(KernelContext& ctx) {
  const Node& node = ctx.node();
  const TensorSequence& sequence = ctx.InputSequence(0);
  ET_CHECK(!sequence.empty(), ErrorCode::kInvalidArgument, node.Describe(), ": input sequence is empty");
  ET_CHECK(node.HasAttr("axis"), ErrorCode::kInvalidModel, node.Describe(), ": attribute 'axis' is required");
  const bool new_axis = node.GetInt("new_axis", 0) != 0;
  const Tensor& first = sequence.front();
  const int64_t rank = static_cast<int64_t>(first.rank());
  const int64_t out_rank = rank + (new_axis ? 1 : 0);
  ET_CHECK(out_rank >= 1, ErrorCode::kInvalidArgument, node.Describe(), ": cannot concatenate scalars without new_axis");
  const int64_t axis = NormalizeAxis(node.GetInt("axis", 0), out_rank, node.Describe() + " attribute 'axis'");
  ET_CHECK(DataTypeSize(first.dtype()) > 0, ErrorCode::kNotImplemented, node.Describe(), ": element type ",
           DataTypeName(first.dtype()), " is not supported");

  // View every element with the concatenation axis present (size 1 when stacking).
  std::vector<Shape> shapes;
  shapes.reserve(sequence.size());
  int64_t total = 0;
  for (size_t k = 0; k < sequence.size(); ++k) {
    const Tensor& t = sequence[k];
    Shape shape = t.shape();
    if (new_axis) shape.insert(shape.begin() + axis, 1);
    bool compatible = t.dtype() == first.dtype() && static_cast<int64_t>(shape.size()) == out_rank;
    for (int64_t d = 0; compatible && d < out_rank; ++d) {
      compatible = d == axis || shapes.empty() || shape[d] == shapes.front()[d];
    }
    ET_CHECK(compatible, ErrorCode::kInvalidArgument, node.Describe(), ": sequence element ", k, " (",
             DataTypeName(t.dtype()), " ", ShapeToString(t.shape()), ") does not match element 0 (",
             DataTypeName(first.dtype()), " ", ShapeToString(first.shape()), ") outside axis ", axis);
    total += shape[static_cast<size_t>(axis)];
    shapes.push_back(std::move(shape));
  }

  Shape out_shape = shapes.front();
  out_shape[static_cast<size_t>(axis)] = total;
  Tensor& out = ctx.Output(0, out_shape, first.dtype());
  const int64_t outer = DimProduct(out_shape, 0, static_cast<size_t>(axis));
  const size_t inner_bytes =
      static_cast<size_t>(DimProduct(out_shape, static_cast<size_t>(axis) + 1, out_shape.size())) *
      DataTypeSize(first.dtype());
  const size_t out_row_bytes = static_cast<size_t>(total) * inner_bytes;
  auto* dst = static_cast<uint8_t*>(out.raw());
  size_t offset = 0;
  for (size_t k = 0; k < sequence.size(); ++k) {
    const size_t chunk_bytes = static_cast<size_t>(shapes[k][static_cast<size_t>(axis)]) * inner_bytes;
    const auto* src = static_cast<const uint8_t*>(sequence[k].raw());
    for (int64_t o = 0; o < outer && chunk_bytes > 0; ++o) {
      std::memcpy(dst + o * out_row_bytes + offset, src + o * chunk_bytes, chunk_bytes);
    }
    offset += chunk_bytes;
  }
}

}  // namespace

void RegisterSequenceOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "SequenceConstruct", SequenceConstruct);
  ET_REGISTER_ONNX(r, "SequenceEmpty", SequenceEmpty);
  ET_REGISTER_ONNX(r, "SequenceInsert", SequenceInsert);
  ET_REGISTER_ONNX(r, "SequenceErase", SequenceErase);
  ET_REGISTER_ONNX(r, "SplitToSequence", SplitToSequence);
  ET_REGISTER_ONNX(r, "SequenceAt", SequenceAt);
  ET_REGISTER_ONNX(r, "SequenceLength", SequenceLength);
  ET_REGISTER_ONNX(r, "ConcatFromSequence", ConcatFromSequence);
}

}  // namespace edgetrain
