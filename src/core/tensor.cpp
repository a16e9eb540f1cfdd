#include "core/tensor.hpp"
#include "core/string_tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace edgetrain {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ET_CHECK(d >= 0, ErrorCode::kInvalidArgument, "negative dimension in shape ", ShapeToString(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      Fail(ErrorCode::kResourceExhausted, "shape ", ShapeToString(shape), " has too many elements");
    }
    n *= d;
  }
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
constexpr size_t kMappedTensorBytes = size_t{256} << 10;
std::atomic<uint64_t> g_allocation_count{0}, g_allocated_bytes{0};

#if defined(__unix__) && !defined(__EMSCRIPTEN__)
constexpr size_t kHugePageBytes = size_t{2} << 20;

bool HugePagesAllowed() {
  static const bool allowed = [] {
    const char* choice = std::getenv("EDGETRAIN_HUGE_PAGES");
    return !(choice && std::strcmp(choice, "0") == 0);
  }();
  return allowed;
}

// `bytes` (a multiple of the page size) from the kernel, or null. From 4 MiB up the mapping starts on a 2 MiB
// boundary and asks for transparent huge pages (MADV_HUGEPAGE; EDGETRAIN_HUGE_PAGES=0 does not). On 4 KiB pages a
// busy VM's TLB misses made oneDNN's reorders of ResNet-18's activations 2-3x as slow, its step 1.1 s, not 0.85 s.
void* MapPages(size_t bytes) {
  if (bytes < 2 * kHugePageBytes || !HugePagesAllowed()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  const size_t span = bytes + kHugePageBytes;
  void* base = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(base);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > begin) munmap(base, aligned - begin);
  if (begin + span > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), begin + span - aligned - bytes);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP the pages stay small
  return p;
}
#endif
}  // namespace

Tensor::Tensor(DataType dtype, Shape shape, std::string_view what)
    : dtype_(dtype), shape_(std::move(shape)), numel_(NumElements(shape_)) {
  if (dtype == DataType::kString) {
    ET_CHECK(numel_ <= kMaxStringElements, ErrorCode::kResourceExhausted, what, ": string tensor of shape ",
             ShapeToString(shape_), " has more than the limit of ", kMaxStringElements, " elements");
    auto* strings = new std::string[static_cast<size_t>(std::max<int64_t>(numel_, 1))];
    storage_ = std::shared_ptr<void>(strings, [](void* q) { delete[] static_cast<std::string*>(q); });
    data_ = strings;
    g_allocation_count.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  size_t element = DataTypeSize(dtype);
  ET_CHECK(element > 0, ErrorCode::kNotImplemented, what, ": element type ", DataTypeName(dtype),
           " cannot be stored in a tensor");
  uint64_t bytes = static_cast<uint64_t>(numel_) * element;
  ET_CHECK(numel_ == 0 || bytes / element == static_cast<uint64_t>(numel_), ErrorCode::kResourceExhausted, what,
           ": shape ", ShapeToString(shape_), " overflows");
  ET_CHECK(bytes <= kMaxTensorBytes, ErrorCode::kResourceExhausted, what, ": ", DataTypeName(dtype),
           " tensor of shape ", ShapeToString(shape_), " needs ", bytes, " bytes, more than the limit of ",
           kMaxTensorBytes, " bytes");
  size_t padded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (padded == 0) padded = kTensorAlignment;
  void* p = nullptr;
#if defined(__unix__) && !defined(__EMSCRIPTEN__)
  if (padded >= kMappedTensorBytes) {
    // Straight from the kernel and back to it when freed: glibc's heap keeps freed large blocks (a
    // session's first, unplanned run frees hundreds of MiB that then stay in the peak RSS).
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t mapped = (padded + page - 1) / page * page;
    p = MapPages(mapped);
    if (!p) Fail(ErrorCode::kResourceExhausted, what, ": out of memory allocating ", bytes, " bytes");
    storage_ = std::shared_ptr<void>(p, [mapped](void* q) { munmap(q, mapped); });
  }
#endif
  if (!p) {
    p = std::aligned_alloc(kTensorAlignment, padded);
    if (!p) Fail(ErrorCode::kResourceExhausted, what, ": out of memory allocating ", bytes, " bytes");
    storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  data_ = p;
  g_allocation_count.fetch_add(1, std::memory_order_relaxed);
  g_allocated_bytes.fetch_add(padded, std::memory_order_relaxed);
}

uint64_t Tensor::allocation_count() { return g_allocation_count.load(std::memory_order_relaxed); }
uint64_t Tensor::allocated_bytes() { return g_allocated_bytes.load(std::memory_order_relaxed); }

Tensor Tensor::Zeros(DataType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));  // strings start empty
  if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::Borrow(DataType dtype, Shape shape, void* data) {
  ET_CHECK(dtype != DataType::kString, ErrorCode::kInternal, "a string tensor cannot borrow memory");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = NumElements(t.shape_);
  t.data_ = data;
  return t;
}

void Tensor::CheckType(DataType requested) const {
  ET_CHECK(requested == dtype_, ErrorCode::kInternal, "tensor of type ", DataTypeName(dtype_), " accessed as ",
           DataTypeName(requested));
}

void Tensor::CheckIndex(int64_t i) const {
  ET_CHECK(i >= 0 && i < numel_, ErrorCode::kInvalidArgument, "element ", i, " of a ", DataTypeName(dtype_),
           " tensor of shape ", ShapeToString(shape_), " does not exist");
}

int64_t Tensor::Int64At(int64_t i) const {
  CheckIndex(i);
  switch (dtype_) {
    case DataType::kInt64: return static_cast<const int64_t*>(data_)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(data_)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(data_)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(data_)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(data_)[i];
    case DataType::kUint16: return static_cast<const uint16_t*>(data_)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(data_)[i];
    case DataType::kUint64: return static_cast<int64_t>(static_cast<const uint64_t*>(data_)[i]);
    case DataType::kBool: return static_cast<const bool*>(data_)[i];
    default: Fail(ErrorCode::kInvalidArgument, "expected an integer tensor, got ", DataTypeName(dtype_));
  }
}

double Tensor::DoubleAt(int64_t i) const {
  CheckIndex(i);
  switch (dtype_) {
    case DataType::kFloat32: return static_cast<const float*>(data_)[i];
    case DataType::kFloat64: return static_cast<const double*>(data_)[i];
    case DataType::kFloat16: return static_cast<float>(static_cast<const Float16*>(data_)[i]);
    case DataType::kBFloat16: return static_cast<float>(static_cast<const BFloat16*>(data_)[i]);
    default: return static_cast<double>(Int64At(i));
  }
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  if (dtype_ == DataType::kInt64) return ToVector<int64_t>();
  std::vector<int64_t> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = Int64At(i);
  return out;
}

std::vector<double> Tensor::ToDoubleVector() const {
  std::vector<double> out(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) out[static_cast<size_t>(i)] = DoubleAt(i);
  return out;
}

Tensor Tensor::Clone() const {
  if (!defined()) return Tensor();
  Tensor t(dtype_, shape_);
  CopyTensorData(*this, t);
  return t;
}

void CopyTensorData(const Tensor& src, Tensor& dst) {
  ET_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), ErrorCode::kInternal, "cannot copy a ",
           DataTypeName(src.dtype()), " tensor of shape ", ShapeToString(src.shape()), " into a ",
           DataTypeName(dst.dtype()), " tensor of shape ", ShapeToString(dst.shape()));
  if (src.SameData(dst)) return;
  if (src.dtype() == DataType::kString) {
    std::copy_n(src.data<std::string>(), src.numel(), dst.data<std::string>());
    return;
  }
  if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

Tensor Tensor::Reshaped(Shape shape) const {
  Tensor t = *this;
  int64_t n = NumElements(shape);
  ET_CHECK(n == numel_, ErrorCode::kInvalidArgument, "cannot reshape ", ShapeToString(shape_), " to ",
           ShapeToString(shape));
  t.shape_ = std::move(shape);
  return t;
}

Shape BroadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    ET_CHECK(da == db || da == 1 || db == 1, ErrorCode::kInvalidArgument, "shapes ", ShapeToString(a), " and ",
             ShapeToString(b), " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape BroadcastStrides(const Shape& shape, const Shape& out_shape) {
  Shape own = RowMajorStrides(shape);
  Shape out(out_shape.size(), 0);
  size_t offset = out_shape.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) out[i + offset] = shape[i] == 1 ? 0 : own[i];
  return out;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank, const std::string& what) {
  ET_CHECK(axis >= -rank && axis < std::max<int64_t>(rank, 1), ErrorCode::kInvalidArgument, what, ": axis ", axis,
           " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace edgetrain
