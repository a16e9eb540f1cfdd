// Tensor: element type, shape, and 64-byte-aligned memory that is either owned (shared, reference
// counted) or borrowed from the caller. Copying a Tensor shares its memory; Clone() copies data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/int64_vector.hpp"

namespace edgetrain {

constexpr size_t kTensorAlignment = 64;

// Largest single tensor edgetrain allocates; larger requests are refused before allocating.
constexpr uint64_t kMaxTensorBytes = uint64_t{16} << 30;

int64_t NumElements(const Shape& shape);  // throws on negative dims or overflow
std::string ShapeToString(const Shape& shape);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;
  // Owned, uninitialised memory. `what` names the tensor in the error if it is too large.
  Tensor(DataType dtype, Shape shape, std::string_view what = "tensor");
  static Tensor Zeros(DataType dtype, Shape shape);
  static Tensor Borrow(DataType dtype, Shape shape, void* data);
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, Shape shape);
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector<T>({value}, {});
  }

  bool defined() const { return dtype_ != DataType::kUndefined; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t dim(size_t axis) const { return shape_[axis]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DataTypeSize(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    CheckType(DataTypeOf<T>());
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    CheckType(DataTypeOf<T>());
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::vector<T> ToVector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel_);
  }
  // Integer tensor (any width) as int64 values; used for shapes, axes, indices.
  std::vector<int64_t> ToInt64Vector() const;
  // Float tensor (float16/32/64) or integer tensor as double values.
  std::vector<double> ToDoubleVector() const;
  // Element i of the same, without copying the tensor (i must be < numel()).
  int64_t Int64At(int64_t i) const;
  double DoubleAt(int64_t i) const;

  Tensor Clone() const;

  // Owned tensor allocations since the process started (count and bytes): what a step allocates
  // is the difference around it.
  static uint64_t allocation_count();
  static uint64_t allocated_bytes();
  // Same memory, new shape with the same element count.
  Tensor Reshaped(Shape shape) const;
  bool SameData(const Tensor& other) const { return data_ == other.data_; }

 private:
  void CheckType(DataType requested) const;
  void CheckIndex(int64_t i) const;

  DataType dtype_ = DataType::kUndefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> storage_;  // null when borrowed
  void* data_ = nullptr;
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, Shape shape) {
  Tensor t(DataTypeOf<T>(), std::move(shape));
  ET_CHECK(static_cast<int64_t>(values.size()) == t.numel(), ErrorCode::kInternal,
           "FromVector: ", values.size(), " values for shape ", ShapeToString(t.shape()));
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

// A list of tensors (ONNX sequence type).
using TensorSequence = std::vector<Tensor>;

// ---- broadcasting (numpy rules) ----
Shape BroadcastShapes(const Shape& a, const Shape& b);  // throws kInvalidArgument if incompatible
// Strides of `shape` (row-major), aligned right to `out_shape`, 0 where broadcast.
Shape BroadcastStrides(const Shape& shape, const Shape& out_shape);
Shape RowMajorStrides(const Shape& shape);
// Normalises a possibly negative axis against `rank`; `what` names the op/attribute on error.
int64_t NormalizeAxis(int64_t axis, int64_t rank, const std::string& what);

}  // namespace edgetrain
