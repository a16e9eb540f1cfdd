// MatMul, Gemm and Einsum. Float types run on the blocked GEMM of ops/gemm.hpp; integer types use
// plain loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/attributes.hpp"
#include "ops/gemm.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

template <typename T>
constexpr bool kUsesGemm = std::is_same_v<T, float> || std::is_same_v<T, double>;

// C[m x n] = A[m x k] * B[k x n] for contiguous row-major matrices of any numeric type.
template <typename T>
void MatMulOne(int64_t m, int64_t k, int64_t n, const T* a, const T* b, T* c, ThreadPool* pool) {
  if constexpr (kUsesGemm<T>) {
    Gemm<T>(false, false, m, n, k, T(1), a, k, b, n, T(0), c, n, pool);
  } else {
    std::fill(c, c + m * n, T(0));
    for (int64_t i = 0; i < m; ++i) {
      T* crow = c + i * n;
      for (int64_t p = 0; p < k; ++p) {
        const T aip = a[i * k + p];
        const T* brow = b + p * n;
        for (int64_t j = 0; j < n; ++j) crow[j] = static_cast<T>(crow[j] + aip * brow[j]);
      }
    }
  }
}

// `count` products C_i = A[a_offsets[i]] * B[b_offsets[i]] (offsets in elements), C contiguous.
template <typename T>
void MatMulBatch(ThreadPool& pool, int64_t m, int64_t k, int64_t n, const T* a, const std::vector<int64_t>& a_offsets,
                 const T* b, const std::vector<int64_t>& b_offsets, T* c) {
  ForEachProduct(pool, static_cast<int64_t>(a_offsets.size()), m * n * std::max<int64_t>(k, 1),
                 [&](int64_t i, ThreadPool* product_pool) {
                   MatMulOne<T>(m, k, n, a + a_offsets[i], b + b_offsets[i], c + i * m * n, product_pool);
                 });
}

}  // namespace

// Many small products run one per thread; few large ones split each product between threads.
void ForEachProduct(ThreadPool& pool, int64_t count, int64_t work_per_product,
                    FunctionRef<void(int64_t, ThreadPool*)> product) {
  if (count >= 2 * pool.num_threads() || work_per_product < (int64_t{1} << 18)) {
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(work_per_product, 1));
    pool.ParallelFor(count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) product(i, nullptr);
    });
  } else {
    for (int64_t i = 0; i < count; ++i) product(i, &pool);
  }
}

std::vector<int64_t> BatchOffsets(const Shape& shape, const Shape& out) {
  const Shape strides = BroadcastStrides(shape, out);
  const int64_t count = NumElements(out);
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  std::vector<int64_t> index(out.size(), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets[static_cast<size_t>(i)] = offset;
    for (size_t d = out.size(); d-- > 0;) {
      offset += strides[d];
      if (++index[d] < out[d]) break;
      offset -= strides[d] * out[d];
      index[d] = 0;
    }
  }
  return offsets;
}

namespace {

bool Broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MatMul (numpy matmul: 1-D operands are promoted, batch dimensions broadcast)

MatMulShapes PlanMatMul(const std::string& what, const Shape& a, const Shape& b) {
  ET_CHECK(!a.empty() && !b.empty(), ErrorCode::kInvalidArgument, what, ": MatMul needs inputs of rank >= 1, got ",
           ShapeToString(a), " and ", ShapeToString(b));
  Shape a_shape = a, b_shape = b;
  if (a_shape.size() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b_shape.size() == 1) b_shape.push_back(1);
  MatMulShapes p;
  p.m = a_shape[a_shape.size() - 2];
  p.k = a_shape.back();
  p.n = b_shape.back();
  ET_CHECK(p.k == b_shape[b_shape.size() - 2], ErrorCode::kInvalidArgument, what, ": inner dimensions do not match: ",
           ShapeToString(a), " x ", ShapeToString(b));
  p.a_batch.assign(a_shape.begin(), a_shape.end() - 2);
  p.b_batch.assign(b_shape.begin(), b_shape.end() - 2);
  ET_CHECK(Broadcastable(p.a_batch, p.b_batch), ErrorCode::kInvalidArgument, what, ": batch dimensions of ",
           ShapeToString(a), " and ", ShapeToString(b), " do not broadcast");
  p.batch = BroadcastShapes(p.a_batch, p.b_batch);
  p.out = p.batch;
  if (a.size() > 1) p.out.push_back(p.m);
  if (b.size() > 1) p.out.push_back(p.n);
  return p;
}

namespace {

// The batched product as one oneDNN matmul: batch dims padded with leading 1s to a common rank.
bool DnnlMatMul(ThreadPool& threads, const MatMulShapes& p, const float* a, const float* b, float* y) {
  auto dims = [&](const Shape& batch, int64_t rows, int64_t cols) {
    std::vector<int64_t> d(p.batch.size() - batch.size(), 1);
    d.insert(d.end(), batch.begin(), batch.end());
    d.push_back(rows);
    d.push_back(cols);
    return d;
  };
  return gemm_detail::DnnlBatchedMatMul(dims(p.a_batch, p.m, p.k), dims(p.b_batch, p.k, p.n),
                                        dims(p.batch, p.m, p.n), a, b, y, threads.num_threads());
}

template <typename T>
void RunMatMul(ThreadPool& threads, const MatMulShapes& p, const T* a, const T* b, T* y) {
  if (NumElements(p.b_batch) == 1) {
    // B is one matrix: fold A's batch into its rows.
    MatMulOne<T>(NumElements(p.a_batch) * p.m, p.k, p.n, a, b, y, &threads);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (UseDnnl() && DnnlMatMul(threads, p, a, b, y)) return;
  }
  std::vector<int64_t> a_offsets = BatchOffsets(p.a_batch, p.batch), b_offsets = BatchOffsets(p.b_batch, p.batch);
  for (auto& o : a_offsets) o *= p.m * p.k;
  for (auto& o : b_offsets) o *= p.k * p.n;
  MatMulBatch<T>(threads, p.m, p.k, p.n, a, a_offsets, b, b_offsets, y);
}

void MatMulKernel(KernelContext& ctx) {
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(a.dtype() == b.dtype(), ErrorCode::kInvalidArgument, what, ": input types differ (",
           DataTypeName(a.dtype()), " vs ", DataTypeName(b.dtype()), ")");
  const MatMulShapes p = PlanMatMul(what, a.shape(), b.shape());
  Tensor& y = ctx.Output(0, p.out, a.dtype());
  VisitNumeric(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RunMatMul<T>(ctx.threads(), p, a.data<T>(), b.data<T>(), y.data<T>());
  });
}

// Static rank of a value, or -1 when shape inference does not know it.
int64_t StaticRank(const GradientContext& g, const std::string& value) {
  const ValueInfo* info = g.Info(value);
  return info && info->has_shape ? static_cast<int64_t>(info->shape.size()) : -1;
}

// Swaps the last two axes of a value of rank `rank` (>= 2).
std::string TransposeLastTwo(GradientContext& g, const std::string& value, int64_t rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) perm[static_cast<size_t>(d)] = d;
  std::swap(perm[static_cast<size_t>(rank - 2)], perm[static_cast<size_t>(rank - 1)]);
  return g.Op("Transpose", {value}, {{"perm", Attribute::Ints(perm)}});
}

// `value` viewed as a matrix [-1, last dimension].
std::string RowsOf(GradientContext& g, const std::string& value) {
  const ValueInfo* info = g.Info(value);
  if (info && info->has_shape && !info->shape.empty() && info->shape.back().known())
    return g.Op("Reshape", {value, g.Ints({-1, info->shape.back().value})});
  std::string last = g.Op("Slice", {g.ShapeOf(value), g.Ints({-1}), g.Ints({std::numeric_limits<int64_t>::max()})});
  return g.Op("Reshape", {value, g.Op("Concat", {g.Ints({-1}), last}, {{"axis", Attribute::Int(0)}})});
}

// Y = A @ B (numpy): 1-D operands are promoted to matrices (and dY with them), then
// dA = dY @ B^T and dB = A^T @ dY, summed over broadcast batch dimensions by the walk.
void MatMulGradient(GradientContext& g) {
  const int64_t rank_a = StaticRank(g, g.X(0)), rank_b = StaticRank(g, g.X(1));
  ET_CHECK(rank_a >= 1 && rank_b >= 1, ErrorCode::kNotImplemented, g.node().Describe(),
           ": the gradient of MatMul needs the ranks of both inputs, which shape inference does not know");
  std::string a = g.X(0), b = g.X(1), dy = g.dY(0);
  if (rank_a == 1) a = g.Op("Unsqueeze", {a, g.Ints({0})});
  if (rank_b == 1) b = g.Op("Unsqueeze", {b, g.Ints({1})});
  if (rank_a == 1 && rank_b == 1) {
    dy = g.Op("Reshape", {dy, g.Ints({1, 1})});
  } else if (rank_a == 1) {
    dy = g.Op("Unsqueeze", {dy, g.Ints({-2})});
  } else if (rank_b == 1) {
    dy = g.Op("Unsqueeze", {dy, g.Ints({-1})});
  }
  const int64_t matrix_rank_a = std::max<int64_t>(rank_a, 2), matrix_rank_b = std::max<int64_t>(rank_b, 2);
  const bool batched = std::max(matrix_rank_a, matrix_rank_b) > 2;
  if (g.NeedsGrad(0)) {
    std::string da = batched ? g.Op("MatMul", {dy, TransposeLastTwo(g, b, matrix_rank_b)})
                             : g.Op("Gemm", {dy, b}, {{"transB", Attribute::Int(1)}});
    if (rank_a == 1) da = g.Op("Squeeze", {da, g.Ints({-2})});
    g.SetGrad(0, da, /*maybe_broadcast=*/batched);
  }
  if (g.NeedsGrad(1)) {
    std::string db;
    if (!batched) {
      db = g.Op("Gemm", {a, dy}, {{"transA", Attribute::Int(1)}});
    } else if (matrix_rank_b == 2) {
      // One B for every batch: fold the batch into rows, one product instead of a broadcast sum.
      db = g.Op("Gemm", {RowsOf(g, a), RowsOf(g, dy)}, {{"transA", Attribute::Int(1)}});
    } else {
      db = g.Op("MatMul", {TransposeLastTwo(g, a, matrix_rank_a), dy});
    }
    if (rank_b == 1) db = g.Op("Squeeze", {db, g.Ints({-1})});
    g.SetGrad(1, db, batched && matrix_rank_b > 2);
  }
}

// Y's shape: numpy matmul, batch dimensions broadcast symbolically.
std::vector<ValueInfo> MatMulOutputTypes(const Node&, int64_t, const std::vector<const ValueInfo*>& inputs) {
  const std::vector<Dim>* a = inputs.size() > 0 ? KnownShape(inputs[0]) : nullptr;
  const std::vector<Dim>* b = inputs.size() > 1 ? KnownShape(inputs[1]) : nullptr;
  if (!a || !b || a->empty() || b->empty()) return {ValueInfo{}};
  const size_t a_batch = a->size() > 2 ? a->size() - 2 : 0, b_batch = b->size() > 2 ? b->size() - 2 : 0;
  std::vector<Dim> out(std::max(a_batch, b_batch));
  for (size_t i = 1; i <= out.size(); ++i) {
    const Dim one = FixedDim(1);
    const Dim& x = i <= a_batch ? (*a)[a_batch - i] : one;
    const Dim& y = i <= b_batch ? (*b)[b_batch - i] : one;
    out[out.size() - i] = BroadcastDim(x, y);
  }
  if (a->size() > 1) out.push_back((*a)[a->size() - 2]);
  if (b->size() > 1) out.push_back(b->back());
  return {TensorInfo(inputs[0]->dtype, std::move(out))};
}

void RegisterMatMul(OpRegistry& r) {
  ET_IF_BUILT("", "MatMul") {
    RegisterOnnx(r, "MatMul", MatMulKernel).shape_rule = MatMulOutputTypes;
    r.SetGradient("MatMul", MatMulGradient);
  }
}


// ---------------------------------------------------------------------------------------------
// MatMulInteger and QLinearMatMul: 8-bit operands minus zero points, multiplied in double (exact
// for 8-bit products), then narrowed.

// Per-tensor, per-row (of A) or per-column (of B) quantization parameter, broadcast to `shape`.
// A 1-D parameter of A has one value per row, so it is viewed as [m, 1].
std::vector<double> ExpandQuantParam(const std::string& what, const Tensor& param, const Shape& shape, bool rows_of_a,
                                     const char* name) {
  const std::vector<double> values = param.ToDoubleVector();
  const int64_t count = NumElements(shape);
  if (values.size() == 1) return std::vector<double>(static_cast<size_t>(count), values[0]);
  Shape param_shape = param.shape();
  if (rows_of_a && param_shape.size() == 1) param_shape.push_back(1);
  bool ok = param_shape.size() <= shape.size() && Broadcastable(param_shape, shape);
  for (size_t i = 1; ok && i <= param_shape.size(); ++i)
    ok = param_shape[param_shape.size() - i] == 1 || param_shape[param_shape.size() - i] == shape[shape.size() - i];
  ET_CHECK(ok, ErrorCode::kInvalidArgument, what, ": ", name, " of shape ", ShapeToString(param.shape()),
           " does not fit an operand of shape ", ShapeToString(shape));
  const std::vector<int64_t> offsets = BatchOffsets(param_shape, shape);
  std::vector<double> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) out[i] = values[static_cast<size_t>(offsets[i])];
  return out;
}

std::vector<double> CenteredOperand(const std::string& what, const Tensor& t, const Tensor* zero_point, bool is_a) {
  ET_CHECK(t.dtype() == DataType::kUint8 || t.dtype() == DataType::kInt8, ErrorCode::kNotImplemented, what,
           ": element type ", DataTypeName(t.dtype()), " is not supported (int8/uint8 only)");
  std::vector<double> values = t.ToDoubleVector();
  if (zero_point) {
    ET_CHECK(zero_point->dtype() == t.dtype(), ErrorCode::kInvalidArgument, what,
             ": a zero point must have the type of its operand");
    Shape shape = t.shape();
    if (shape.size() == 1) shape.insert(is_a ? shape.begin() : shape.end(), 1);
    const std::vector<double> zp = ExpandQuantParam(what, *zero_point, shape, is_a, "zero point");
    for (size_t i = 0; i < values.size(); ++i) values[i] -= zp[i];
  }
  return values;
}

void MatMulIntegerKernel(KernelContext& ctx) {
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  const MatMulShapes p = PlanMatMul(what, a.shape(), b.shape());
  const std::vector<double> ac = CenteredOperand(what, a, ctx.HasInput(2) ? &ctx.Input(2) : nullptr, true);
  const std::vector<double> bc = CenteredOperand(what, b, ctx.HasInput(3) ? &ctx.Input(3) : nullptr, false);
  Tensor& y = ctx.Output(0, p.out, DataType::kInt32);
  std::vector<double> acc(static_cast<size_t>(y.numel()));
  RunMatMul<double>(ctx.threads(), p, ac.data(), bc.data(), acc.data());
  int32_t* yp = y.data<int32_t>();
  for (size_t i = 0; i < acc.size(); ++i) yp[i] = static_cast<int32_t>(static_cast<int64_t>(acc[i]));
}

void QLinearMatMulKernel(KernelContext& ctx) {
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(3);
  const std::string& what = ctx.node().Describe();
  const MatMulShapes p = PlanMatMul(what, a.shape(), b.shape());
  const std::vector<double> ac = CenteredOperand(what, a, &ctx.Input(2), true);
  const std::vector<double> bc = CenteredOperand(what, b, &ctx.Input(5), false);
  const Tensor& y_zp_tensor = ctx.Input(7);
  const DataType y_type = y_zp_tensor.dtype();
  ET_CHECK(y_type == DataType::kUint8 || y_type == DataType::kInt8, ErrorCode::kNotImplemented, what,
           ": output type ", DataTypeName(y_type), " is not supported (int8/uint8 only)");
  for (size_t i : {size_t{1}, size_t{4}, size_t{6}})
    ET_CHECK(ctx.Input(i).dtype() == DataType::kFloat32, ErrorCode::kNotImplemented, what, ": scale input ", i,
             " is ", DataTypeName(ctx.Input(i).dtype()), ", only float32 scales are supported");
  ET_CHECK(ctx.Input(6).numel() == 1 && y_zp_tensor.numel() == 1, ErrorCode::kNotImplemented, what,
           ": only a per-tensor output scale and zero point are supported");
  Tensor& y = ctx.Output(0, p.out, y_type);
  std::vector<double> acc(static_cast<size_t>(y.numel()));
  RunMatMul<double>(ctx.threads(), p, ac.data(), bc.data(), acc.data());
  // Scales: a per row, b per column; expanded over the output's [batch, m, n] layout.
  const int64_t batch_count = NumElements(p.batch);
  Shape a_shape = a.shape(), b_shape = b.shape();
  if (a_shape.size() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b_shape.size() == 1) b_shape.push_back(1);
  const std::vector<double> a_scale = ExpandQuantParam(what, ctx.Input(1), a_shape, true, "a_scale");
  const std::vector<double> b_scale = ExpandQuantParam(what, ctx.Input(4), b_shape, false, "b_scale");
  std::vector<int64_t> a_offsets = BatchOffsets(p.a_batch, p.batch), b_offsets = BatchOffsets(p.b_batch, p.batch);
  const float y_scale = ctx.Input(6).ToVector<float>()[0];
  const double y_zp = y_zp_tensor.DoubleAt(0);
  const double lo = y_type == DataType::kUint8 ? 0 : -128, hi = y_type == DataType::kUint8 ? 255 : 127;
  uint8_t* y_u8 = y_type == DataType::kUint8 ? y.data<uint8_t>() : nullptr;
  int8_t* y_s8 = y_type == DataType::kInt8 ? y.data<int8_t>() : nullptr;
  for (int64_t bi = 0; bi < batch_count; ++bi) {
    for (int64_t i = 0; i < p.m; ++i) {
      // A's scale is constant along k; B's along k too (per column), so take row/column 0 of k.
      const float sa = static_cast<float>(a_scale[static_cast<size_t>((a_offsets[bi] * p.m + i) * p.k)]);
      for (int64_t j = 0; j < p.n; ++j) {
        const float sb = static_cast<float>(b_scale[static_cast<size_t>(b_offsets[bi] * p.k * p.n + j)]);
        const size_t o = static_cast<size_t>((bi * p.m + i) * p.n + j);
        const double q = std::clamp(std::nearbyint(static_cast<float>(acc[o]) * (sa * sb / y_scale)) + y_zp, lo, hi);
        if (y_u8) {
          y_u8[o] = static_cast<uint8_t>(q);
        } else {
          y_s8[o] = static_cast<int8_t>(q);
        }
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Gemm: Y = alpha * op(A) * op(B) + beta * C, C broadcast unidirectionally to (M, N)

namespace {

struct GemmAttributes {
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 1.0f;

  static GemmAttributes Parse(const Node& node, int64_t /*opset*/) {
    const AttributeReader read(node);
    GemmAttributes a;
    a.trans_a = read.Flag("transA", false);
    a.trans_b = read.Flag("transB", false);
    a.alpha = read.Float("alpha", 1.0f);
    a.beta = read.Float("beta", 1.0f);
    read.Check(std::isfinite(a.alpha), "alpha", "must be finite");
    read.Check(std::isfinite(a.beta), "beta", "must be finite");
    return a;
  }

  // Y is [M, N] with M, N read off op(A) and op(B).
  std::vector<ValueInfo> OutputTypes(const std::vector<const ValueInfo*>& inputs) const {
    const std::vector<Dim>* a = inputs.size() > 0 ? KnownShape(inputs[0]) : nullptr;
    const std::vector<Dim>* b = inputs.size() > 1 ? KnownShape(inputs[1]) : nullptr;
    if (!a || !b || a->size() != 2 || b->size() != 2) return {ValueInfo{}};
    return {TensorInfo(inputs[0]->dtype, {(*a)[trans_a ? 1 : 0], (*b)[trans_b ? 0 : 1]})};
  }
};

struct GemmShapes {
  int64_t m = 0, k = 0, n = 0;
  int64_t lda = 0, ldb = 0;
  const Tensor* c = nullptr;  // null when C is absent
};

GemmShapes CheckGemm(const KernelContext& ctx, const GemmAttributes& attrs) {
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(1);
  const std::string& what = ctx.node().Describe();
  ET_CHECK(a.rank() == 2 && b.rank() == 2, ErrorCode::kInvalidArgument, what, ": Gemm needs 2-D A and B, got ",
           ShapeToString(a.shape()), " and ", ShapeToString(b.shape()));
  ET_CHECK(a.dtype() == b.dtype(), ErrorCode::kInvalidArgument, what, ": input types differ (",
           DataTypeName(a.dtype()), " vs ", DataTypeName(b.dtype()), ")");
  GemmShapes s;
  s.m = a.dim(attrs.trans_a ? 1 : 0);
  s.k = a.dim(attrs.trans_a ? 0 : 1);
  const int64_t kb = b.dim(attrs.trans_b ? 1 : 0);
  s.n = b.dim(attrs.trans_b ? 0 : 1);
  s.lda = a.dim(1);
  s.ldb = b.dim(1);
  ET_CHECK(s.k == kb, ErrorCode::kInvalidArgument, what, ": inner dimensions do not match: op(A) is ", s.m, "x",
           s.k, ", op(B) is ", kb, "x", s.n);
  if (!ctx.HasInput(2)) return s;
  s.c = &ctx.Input(2);
  const Tensor& c = *s.c;
  const bool fits = c.rank() <= 2 && c.dtype() == a.dtype() &&
                    (c.rank() < 1 || c.shape().back() == s.n || c.shape().back() == 1) &&
                    (c.rank() < 2 || c.dim(0) == s.m || c.dim(0) == 1);
  ET_CHECK(fits, ErrorCode::kInvalidArgument, what, ": C of shape ", ShapeToString(c.shape()), " and type ",
           DataTypeName(c.dtype()), " does not broadcast to the output [", s.m, ", ", s.n, "]");
  return s;
}

// A linear layer (no A transpose, unit scales, C absent or a row of n) as one oneDNN matmul with the bias
// fused, when the batch is large enough for it to beat the sgemm path. False: not taken.
bool TryDnnlLinear(KernelContext& ctx, const GemmAttributes& attrs, const GemmShapes& s, Tensor& y, bool relu) {
  static constexpr char kPackedWeights = 0;  // NodeStateFor's user: the weights DnnlLinear packed
  const Tensor& a = ctx.Input(0);
  const bool bias_row = !s.c || (s.c->numel() == s.n && s.c->dtype() == DataType::kFloat32);
  if (a.dtype() != DataType::kFloat32 || !UseDnnl() || attrs.trans_a || attrs.alpha != 1.0f || s.m < 8 ||
      !bias_row || (s.c && attrs.beta != 1.0f))
    return false;
  return gemm_detail::DnnlLinear(s.m, s.n, s.k, a.data<float>(), s.lda, ctx.Input(1).data<float>(), s.ldb,
                                 attrs.trans_b, s.c ? s.c->data<float>() : nullptr, y.data<float>(),
                                 ctx.threads().num_threads(), relu,
                                 ctx.InputIsConstant(1) ? ctx.NodeStateFor(&kPackedWeights) : nullptr);
}

// Y = C broadcast to [m, n].
template <typename T>
void BroadcastBias(const Tensor& c, int64_t m, int64_t n, T* y) {
  const T* cp = c.data<T>();
  const int64_t c_rows = c.rank() == 2 ? c.dim(0) : 1;
  const int64_t c_cols = c.rank() >= 1 ? c.shape().back() : 1;
  for (int64_t i = 0; i < m; ++i) {
    const T* crow = cp + (c_rows == 1 ? 0 : i) * c_cols;
    T* yrow = y + i * n;
    if (c_cols == 1) {
      std::fill(yrow, yrow + n, crow[0]);
    } else {
      std::copy(crow, crow + n, yrow);
    }
  }
}

// Y = alpha * op(A) op(B) + beta * Y in plain loops, for integer types.
template <typename T>
void ReferenceGemm(ThreadPool& threads, const GemmAttributes& attrs, const GemmShapes& s, const T* a, const T* b,
                   T beta, T* y) {
  const T alpha = static_cast<T>(attrs.alpha);
  auto at = [&](int64_t i, int64_t p) { return attrs.trans_a ? a[p * s.lda + i] : a[i * s.lda + p]; };
  auto bt = [&](int64_t p, int64_t j) { return attrs.trans_b ? b[j * s.ldb + p] : b[p * s.ldb + j]; };
  auto row = [&](int64_t i) {
    for (int64_t j = 0; j < s.n; ++j) {
      T sum = T(0);
      for (int64_t p = 0; p < s.k; ++p) sum = static_cast<T>(sum + at(i, p) * bt(p, j));
      const T scaled = static_cast<T>(alpha * sum);
      y[i * s.n + j] = beta == T(0) ? scaled : static_cast<T>(scaled + beta * y[i * s.n + j]);
    }
  };
  threads.ParallelFor(s.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.n * s.k)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t i = begin; i < end; ++i) row(i);
                      });
}

template <typename T>
void RunGemm(KernelContext& ctx, const GemmAttributes& attrs, const GemmShapes& s, T* y, bool relu) {
  const bool add_c = s.c && attrs.beta != 0.0f;
  if (add_c) BroadcastBias<T>(*s.c, s.m, s.n, y);
  const T beta = add_c ? static_cast<T>(attrs.beta) : T(0);
  const T* a = ctx.Input(0).data<T>();
  const T* b = ctx.Input(1).data<T>();
  if constexpr (kUsesGemm<T>) {
    Gemm<T>(attrs.trans_a, attrs.trans_b, s.m, s.n, s.k, static_cast<T>(attrs.alpha), a, s.lda, b, s.ldb, beta, y,
            s.n, &ctx.threads());
  } else {
    ReferenceGemm<T>(ctx.threads(), attrs, s, a, b, beta, y);
  }
  if (relu)
    for (int64_t i = 0; i < s.m * s.n; ++i) y[i] = y[i] > T(0) ? y[i] : T(0);
}

}  // namespace

Tensor& GemmForward(KernelContext& ctx, bool relu) {
  const GemmAttributes& attrs = ctx.Attributes<GemmAttributes>();
  const GemmShapes s = CheckGemm(ctx, attrs);
  const DataType dtype = ctx.Input(0).dtype();
  Tensor& y = ctx.Output(0, {s.m, s.n}, dtype);
  if (TryDnnlLinear(ctx, attrs, s, y, relu)) return y;
  VisitNumeric(dtype, ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    RunGemm<T>(ctx, attrs, s, y.data<T>(), relu);
  });
  return y;
}

namespace {

void GemmKernel(KernelContext& ctx) { GemmForward(ctx); }

// Y = alpha * op(A) op(B) + beta * C.
void GemmGradient(GradientContext& g) {
  const GemmAttributes attrs = GemmAttributes::Parse(g.node(), g.opset());
  const std::string& dy = g.dY(0);
  // alpha * op(X) op(Z) with the given transposes, as one Gemm.
  auto product = [&](const std::string& x, bool tx, const std::string& z, bool tz) {
    AttributeMap out;
    if (tx) out["transA"] = Attribute::Int(1);
    if (tz) out["transB"] = Attribute::Int(1);
    if (attrs.alpha != 1.0f) out["alpha"] = Attribute::Float(attrs.alpha);
    return g.Op("Gemm", {x, z}, std::move(out));
  };
  const bool trans_a = attrs.trans_a, trans_b = attrs.trans_b;
  if (g.NeedsGrad(0)) {
    // op(A) = A: dA = dY op(B)^T.  op(A) = A^T: dA = op(B) dY^T.
    g.SetGrad(0, trans_a ? product(g.X(1), trans_b, dy, true) : product(dy, false, g.X(1), !trans_b));
  }
  if (g.NeedsGrad(1)) {
    // op(B) = B: dB = op(A)^T dY.  op(B) = B^T: dB = dY^T op(A).
    g.SetGrad(1, trans_b ? product(dy, true, g.X(0), trans_a) : product(g.X(0), !trans_a, dy, false));
  }
  if (g.NumInputs() > 2 && !g.X(2).empty() && g.NeedsGrad(2)) {
    std::string dc = attrs.beta == 1.0f ? dy : g.Op("Mul", {dy, g.ScalarLike(attrs.beta, g.Y(0))});
    g.SetGrad(2, dc, /*maybe_broadcast=*/true);
  }
}

void RegisterGemm(OpRegistry& r) {
  ET_IF_BUILT("", "Gemm") {
    WithAttributes<GemmAttributes>(RegisterOnnx(r, "Gemm", GemmKernel));
    r.SetGradient("Gemm", GemmGradient);
  }
}

// ---------------------------------------------------------------------------------------------
// Einsum: each operand is reduced over the labels nobody else needs, then operands are contracted
// pairwise left to right as batched matrix products, then the result is permuted to the output.

constexpr int kEllipsisLabel = 1000;  // ellipsis dimension e is label kEllipsisLabel + e

struct EinsumEquation {
  std::vector<std::vector<int>> inputs;  // one label per dimension of each input
  std::vector<int> output;
};

// Parses one side's term into labels; ellipsis dims are numbered right-aligned to `ellipsis_rank`.
std::vector<int> ParseEinsumTerm(const std::string& term, int64_t rank, int64_t ellipsis_rank, bool is_output,
                                 const std::string& what, int64_t* ellipsis_dims_out) {
  std::vector<int> letters;
  int64_t ellipsis_at = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == ' ') continue;
    if (ch == '.') {
      ET_CHECK(term.compare(i, 3, "...") == 0 && ellipsis_at < 0, ErrorCode::kInvalidArgument, what,
               ": malformed ellipsis in Einsum term '", term, "'");
      ellipsis_at = static_cast<int64_t>(letters.size());
      i += 2;
      continue;
    }
    ET_CHECK((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'), ErrorCode::kInvalidArgument, what,
             ": invalid character '", ch, "' in Einsum equation");
    letters.push_back(ch);
  }
  int64_t ellipsis_dims = 0;
  if (is_output) {
    ellipsis_dims = ellipsis_at >= 0 ? ellipsis_rank : 0;
  } else {
    ET_CHECK(ellipsis_at >= 0 ? rank >= static_cast<int64_t>(letters.size())
                              : rank == static_cast<int64_t>(letters.size()),
             ErrorCode::kInvalidArgument, what, ": Einsum term '", term, "' does not match an input of rank ", rank);
    ellipsis_dims = rank - static_cast<int64_t>(letters.size());
  }
  *ellipsis_dims_out = ellipsis_dims;
  std::vector<int> labels;
  for (int64_t i = 0; i <= static_cast<int64_t>(letters.size()); ++i) {
    if (i == ellipsis_at)
      for (int64_t e = 0; e < ellipsis_dims; ++e)
        labels.push_back(kEllipsisLabel + static_cast<int>(ellipsis_rank - ellipsis_dims + e));
    if (i < static_cast<int64_t>(letters.size())) labels.push_back(letters[static_cast<size_t>(i)]);
  }
  return labels;
}

EinsumEquation ParseEinsum(const std::string& equation, const std::vector<const Tensor*>& inputs, const std::string& what) {
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  ET_CHECK(terms.size() == inputs.size(), ErrorCode::kInvalidArgument, what, ": Einsum equation '", equation, "' has ",
           terms.size(), " terms for ", inputs.size(), " inputs");
  // Ellipsis rank: the largest number of dimensions any input's ellipsis covers.
  int64_t ellipsis_rank = 0;
  std::vector<int64_t> dims_per_term(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    ParseEinsumTerm(terms[t], static_cast<int64_t>(inputs[t]->rank()), 0, false, what, &dims_per_term[t]);
    ellipsis_rank = std::max(ellipsis_rank, dims_per_term[t]);
  }
  EinsumEquation eq;
  int64_t unused = 0;
  for (size_t t = 0; t < terms.size(); ++t)
    eq.inputs.push_back(ParseEinsumTerm(terms[t], static_cast<int64_t>(inputs[t]->rank()), ellipsis_rank, false, what, &unused));
  if (arrow != std::string::npos) {
    eq.output = ParseEinsumTerm(equation.substr(arrow + 2), 0, ellipsis_rank, true, what, &unused);
  } else {
    std::map<int, int> counts;
    for (const auto& labels : eq.inputs)
      for (int label : labels) ++counts[label];
    for (int64_t e = 0; e < ellipsis_rank; ++e) eq.output.push_back(kEllipsisLabel + static_cast<int>(e));
    for (const auto& [label, count] : counts)
      if (label < kEllipsisLabel && count == 1) eq.output.push_back(label);
  }
  std::set<int> seen;
  for (int label : eq.output) {
    ET_CHECK(seen.insert(label).second, ErrorCode::kInvalidArgument, what, ": Einsum output repeats a label in '",
             equation, "'");
    bool found = false;
    for (const auto& labels : eq.inputs) found = found || std::find(labels.begin(), labels.end(), label) != labels.end();
    ET_CHECK(found, ErrorCode::kInvalidArgument, what, ": Einsum output label of '", equation,
             "' does not appear in any input");
  }
  return eq;
}

// A strided view with distinct labels, or an owned contiguous buffer viewed the same way.
template <typename T>
struct EinsumOperand {
  std::vector<int> labels;
  std::vector<int64_t> dims, strides;
  const T* data = nullptr;
  std::vector<T> storage;

  bool Has(int label) const { return std::find(labels.begin(), labels.end(), label) != labels.end(); }
  size_t IndexOf(int label) const {
    return static_cast<size_t>(std::find(labels.begin(), labels.end(), label) - labels.begin());
  }
};

// dst (contiguous, shape `dims`) = src read through `strides`.
template <typename T>
void StridedCopy(const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, T* dst) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  if (dims.empty()) {
    dst[0] = src[0];
    return;
  }
  const size_t last = dims.size() - 1;
  const int64_t inner = dims[last], inner_stride = strides[last];
  std::vector<int64_t> index(dims.size(), 0);
  int64_t offset = 0;
  for (int64_t row = 0; row < total / inner; ++row) {
    const T* s = src + offset;
    for (int64_t j = 0; j < inner; ++j) dst[j] = s[j * inner_stride];
    dst += inner;
    for (size_t d = last; d-- > 0;) {
      offset += strides[d];
      if (++index[d] < dims[d]) break;
      offset -= strides[d] * dims[d];
      index[d] = 0;
    }
  }
}

// Contiguous copy of `op` with dimensions in `order` (sizes from `sizes`, broadcast where op has 1).
template <typename T>
std::vector<T> Arrange(const EinsumOperand<T>& op, const std::vector<int>& order, const std::map<int, int64_t>& sizes) {
  std::vector<int64_t> dims, strides;
  int64_t total = 1;
  for (int label : order) {
    const size_t i = op.IndexOf(label);
    const int64_t size = sizes.at(label);
    dims.push_back(size);
    strides.push_back(op.dims[i] == size ? op.strides[i] : 0);
    total *= size;
  }
  std::vector<T> out(static_cast<size_t>(total));
  StridedCopy(op.data, dims, strides, out.data());
  return out;
}

template <typename T>
EinsumOperand<T> OwnedOperand(std::vector<int> labels, std::vector<int64_t> dims, std::vector<T> storage) {
  EinsumOperand<T> op;
  op.labels = std::move(labels);
  op.dims = std::move(dims);
  op.strides = RowMajorStrides(op.dims);
  op.storage = std::move(storage);
  op.data = op.storage.data();
  return op;
}

// Sums `op` over every label not in `keep`.
template <typename T>
EinsumOperand<T> ReduceOperand(EinsumOperand<T> op, const std::set<int>& keep) {
  std::vector<int> kept, reduced;
  for (int label : op.labels) (keep.count(label) ? kept : reduced).push_back(label);
  if (reduced.empty()) return op;
  std::map<int, int64_t> sizes;
  std::vector<int64_t> kept_dims;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < op.labels.size(); ++i) sizes[op.labels[i]] = op.dims[i];
  for (int label : kept) {
    kept_dims.push_back(sizes[label]);
    outer *= sizes[label];
  }
  for (int label : reduced) inner *= sizes[label];
  std::vector<int> order = kept;
  order.insert(order.end(), reduced.begin(), reduced.end());
  const std::vector<T> arranged = Arrange(op, order, sizes);
  std::vector<T> sums(static_cast<size_t>(outer), T(0));
  for (int64_t o = 0; o < outer; ++o) {
    T sum = T(0);
    for (int64_t i = 0; i < inner; ++i) sum = static_cast<T>(sum + arranged[static_cast<size_t>(o * inner + i)]);
    sums[static_cast<size_t>(o)] = sum;
  }
  return OwnedOperand<T>(kept, kept_dims, std::move(sums));
}

// Contracts a and b over their shared labels not in `keep`, as a batched matrix product.
template <typename T>
EinsumOperand<T> ContractPair(const EinsumOperand<T>& a, const EinsumOperand<T>& b, const std::set<int>& keep,
                              ThreadPool& pool) {
  std::vector<int> batch, a_only, b_only, contracted;
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < a.labels.size(); ++i) {
    const int label = a.labels[i];
    if (b.Has(label)) {
      sizes[label] = std::max(a.dims[i], b.dims[b.IndexOf(label)]);
      (keep.count(label) ? batch : contracted).push_back(label);
    } else {
      sizes[label] = a.dims[i];
      a_only.push_back(label);
    }
  }
  for (size_t i = 0; i < b.labels.size(); ++i) {
    if (!a.Has(b.labels[i])) {
      sizes[b.labels[i]] = b.dims[i];
      b_only.push_back(b.labels[i]);
    }
  }
  auto product = [&](const std::vector<int>& labels) {
    int64_t p = 1;
    for (int label : labels) p *= sizes[label];
    return p;
  };
  const int64_t count = product(batch), m = product(a_only), k = product(contracted), n = product(b_only);
  std::vector<int> a_order = batch, b_order = batch;
  a_order.insert(a_order.end(), a_only.begin(), a_only.end());
  a_order.insert(a_order.end(), contracted.begin(), contracted.end());
  b_order.insert(b_order.end(), contracted.begin(), contracted.end());
  b_order.insert(b_order.end(), b_only.begin(), b_only.end());
  const std::vector<T> a_arranged = Arrange(a, a_order, sizes), b_arranged = Arrange(b, b_order, sizes);
  std::vector<T> result(static_cast<size_t>(count * m * n));
  std::vector<int64_t> a_offsets(static_cast<size_t>(count)), b_offsets(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    a_offsets[static_cast<size_t>(i)] = i * m * k;
    b_offsets[static_cast<size_t>(i)] = i * k * n;
  }
  if (count * m * n > 0) MatMulBatch<T>(pool, m, k, n, a_arranged.data(), a_offsets, b_arranged.data(), b_offsets, result.data());
  std::vector<int> labels = batch;
  labels.insert(labels.end(), a_only.begin(), a_only.end());
  labels.insert(labels.end(), b_only.begin(), b_only.end());
  std::vector<int64_t> dims;
  for (int label : labels) dims.push_back(sizes[label]);
  return OwnedOperand<T>(labels, dims, std::move(result));
}

void EinsumKernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const std::string equation = ctx.node().GetString("equation", "");
  ET_CHECK(ctx.NumInputs() >= 1, ErrorCode::kInvalidArgument, what, ": Einsum needs at least one input");
  std::vector<const Tensor*> inputs;
  for (size_t i = 0; i < ctx.NumInputs(); ++i) {
    inputs.push_back(&ctx.Input(i));
    ET_CHECK(inputs.back()->dtype() == inputs[0]->dtype(), ErrorCode::kInvalidArgument, what,
             ": Einsum inputs have different types");
  }
  const EinsumEquation eq = ParseEinsum(equation, inputs, what);

  // Size of every label; ellipsis dimensions broadcast, letters must agree.
  std::map<int, int64_t> sizes;
  for (size_t t = 0; t < inputs.size(); ++t) {
    for (size_t d = 0; d < eq.inputs[t].size(); ++d) {
      const int label = eq.inputs[t][d];
      const int64_t size = inputs[t]->dim(d);
      auto [it, fresh] = sizes.emplace(label, size);
      if (fresh || it->second == size) continue;
      const bool broadcast = label >= kEllipsisLabel && (it->second == 1 || size == 1);
      ET_CHECK(broadcast, ErrorCode::kInvalidArgument, what, ": Einsum dimension sizes ", it->second, " and ", size,
               " disagree for the same label in '", equation, "'");
      it->second = std::max(it->second, size);
    }
  }
  Shape out_shape;
  for (int label : eq.output) out_shape.push_back(sizes[label]);
  Tensor& y = ctx.Output(0, out_shape, inputs[0]->dtype());

  VisitNumeric(inputs[0]->dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Views of the inputs with repeated labels folded into diagonals.
    std::vector<EinsumOperand<T>> operands;
    for (size_t t = 0; t < inputs.size(); ++t) {
      EinsumOperand<T> op;
      op.data = inputs[t]->template data<T>();
      const Shape strides = RowMajorStrides(inputs[t]->shape());
      for (size_t d = 0; d < eq.inputs[t].size(); ++d) {
        const int label = eq.inputs[t][d];
        if (op.Has(label)) {
          const size_t i = op.IndexOf(label);
          ET_CHECK(op.dims[i] == inputs[t]->dim(d), ErrorCode::kInvalidArgument, what,
                   ": Einsum diagonal over dimensions of different sizes in '", equation, "'");
          op.strides[i] += strides[d];
        } else {
          op.labels.push_back(label);
          op.dims.push_back(inputs[t]->dim(d));
          op.strides.push_back(strides[d]);
        }
      }
      operands.push_back(std::move(op));
    }
    auto needed_besides = [&](size_t first_other) {
      std::set<int> keep(eq.output.begin(), eq.output.end());
      for (size_t j = first_other; j < operands.size(); ++j) keep.insert(operands[j].labels.begin(), operands[j].labels.end());
      return keep;
    };
    std::set<int> keep_first = needed_besides(1);
    EinsumOperand<T> current = ReduceOperand(std::move(operands[0]), keep_first);
    for (size_t t = 1; t < operands.size(); ++t) {
      std::set<int> keep_b = needed_besides(t + 1);
      keep_b.insert(current.labels.begin(), current.labels.end());
      EinsumOperand<T> b = ReduceOperand(std::move(operands[t]), keep_b);
      current = ContractPair(current, b, needed_besides(t + 1), ctx.threads());
    }
    current = ReduceOperand(std::move(current), std::set<int>(eq.output.begin(), eq.output.end()));
    const std::vector<T> arranged = Arrange(current, eq.output, sizes);
    std::copy(arranged.begin(), arranged.end(), y.data<T>());
  });
}

// An Einsum equation as terms (spaces removed); an implicit output is made explicit.
struct EinsumTerms {
  std::vector<std::string> inputs;
  std::string output;
};

std::string EinsumLetters(const std::string& term) {
  std::string letters;
  for (char c : term)
    if (c != '.') letters += c;
  return letters;
}

EinsumTerms SplitEinsum(const std::string& equation) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  EinsumTerms terms;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    terms.output = eq.substr(arrow + 2);
    return terms;
  }
  std::map<char, int> counts;
  bool ellipsis = false;
  for (const auto& term : terms.inputs) {
    ellipsis = ellipsis || term.find("...") != std::string::npos;
    for (char c : EinsumLetters(term)) ++counts[c];
  }
  if (ellipsis) terms.output = "...";
  for (const auto& [c, count] : counts)
    if (count == 1) terms.output += c;
  return terms;
}

// Whether input `i`'s ellipsis dimensions are statically the output's (no broadcast to undo).
bool EllipsisMatchesOutput(const GradientContext& g, size_t i, const EinsumTerms& terms) {
  const ValueInfo* in = g.Info(g.X(i));
  const ValueInfo* out = g.Info(g.Y(0));
  if (!in || !out || !in->has_shape || !out->has_shape) return false;
  const std::string& term = terms.inputs[i];
  const int64_t in_dims = static_cast<int64_t>(in->shape.size()) - static_cast<int64_t>(EinsumLetters(term).size());
  const int64_t out_dims =
      static_cast<int64_t>(out->shape.size()) - static_cast<int64_t>(EinsumLetters(terms.output).size());
  if (in_dims != out_dims) return false;
  const size_t in_at = term.find("..."), out_at = terms.output.find("...");
  for (int64_t e = 0; e < in_dims; ++e) {
    const Dim& a = in->shape[in_at + static_cast<size_t>(e)];
    const Dim& b = out->shape[out_at + static_cast<size_t>(e)];
    if (!a.known() || !b.known() || a.value != b.value) return false;
  }
  return true;
}

// `grad` has the output's (broadcast) ellipsis dimensions followed by input i's letters, and input
// i's term starts with the ellipsis: sums it to input i's shape, statically when shapes are known.
std::string SumEllipsisBack(GradientContext& g, const std::string& grad, size_t i, const EinsumTerms& terms) {
  const ValueInfo* in = g.Info(g.X(i));
  const ValueInfo* out = g.Info(g.Y(0));
  const int64_t letters = static_cast<int64_t>(EinsumLetters(terms.inputs[i]).size());
  const size_t out_at = terms.output.find("...");
  bool known = in && out && in->has_shape && out->has_shape;
  int64_t in_dims = 0, out_dims = 0;
  if (known) {
    in_dims = static_cast<int64_t>(in->shape.size()) - letters;
    out_dims = static_cast<int64_t>(out->shape.size()) - static_cast<int64_t>(EinsumLetters(terms.output).size());
    known = in_dims >= 0 && out_dims >= in_dims;
  }
  std::vector<int64_t> axes;
  const int64_t lead = out_dims - in_dims;
  for (int64_t d = 0; known && d < out_dims; ++d) {
    const Dim& o = out->shape[out_at + static_cast<size_t>(d)];
    if (d < lead) {
      axes.push_back(d);
      continue;
    }
    const Dim& a = in->shape[static_cast<size_t>(d - lead)];
    known = a.known() && o.known();
    if (known && a.value == 1 && o.value != 1) axes.push_back(d);
  }
  if (!known) return g.Op("SumToShape", {grad, g.ShapeOf(g.X(i))}, {}, kEdgetrainDomain);
  if (axes.empty()) return grad;
  std::string reduced = g.Op("ReduceSum", {grad, g.Ints(axes)}, {{"keepdims", Attribute::Int(1)}});
  return g.Op("Reshape", {reduced, g.ShapeOf(g.X(i))});
}

// dX_i = einsum(dY, the other operands -> term_i); labels that only X_i had (summed inside it) are
// restored by Expand, broadcast ellipsis dimensions summed back by SumToShape.
void EinsumGradient(GradientContext& g) {
  const std::string what = g.node().Describe();
  const std::string equation = g.node().GetString("equation", "");
  const EinsumTerms terms = SplitEinsum(equation);
  ET_CHECK(terms.inputs.size() == g.NumInputs(), ErrorCode::kInvalidModel, what, ": Einsum equation '", equation,
           "' does not match its ", g.NumInputs(), " inputs");
  for (size_t i = 0; i < g.NumInputs(); ++i) {
    if (!g.NeedsGrad(i)) continue;
    const std::string& term = terms.inputs[i];
    const std::string letters = EinsumLetters(term);
    const size_t ellipsis_at = term.find("...");
    const bool has_ellipsis = ellipsis_at != std::string::npos;
    ET_CHECK(std::set<char>(letters.begin(), letters.end()).size() == letters.size(), ErrorCode::kNotImplemented,
             what, ": the gradient of Einsum '", equation, "' is not implemented (repeated label in '", term, "')");
    ET_CHECK(!has_ellipsis || terms.output.find("...") != std::string::npos, ErrorCode::kNotImplemented, what,
             ": the gradient of Einsum '", equation, "' is not implemented (ellipsis summed away)");
    std::string visible = EinsumLetters(terms.output);
    std::string grad_equation = terms.output;
    std::vector<std::string> inputs = {g.dY(0)};
    for (size_t j = 0; j < terms.inputs.size(); ++j) {
      if (j == i) continue;
      visible += EinsumLetters(terms.inputs[j]);
      grad_equation += "," + terms.inputs[j];
      inputs.push_back(g.X(j));
    }
    // The target term keeps visible labels; a dropped label's axis counts from the front before the
    // ellipsis and from the back after it.
    std::string target;
    std::vector<int64_t> dropped_axes;
    const size_t letters_before = has_ellipsis ? ellipsis_at : letters.size();
    for (size_t p = 0; p < letters.size(); ++p) {
      if (has_ellipsis && p == letters_before) target += "...";
      if (visible.find(letters[p]) != std::string::npos) {
        target += letters[p];
      } else {
        dropped_axes.push_back(p < letters_before ? static_cast<int64_t>(p)
                                                  : static_cast<int64_t>(p) - static_cast<int64_t>(letters.size()));
      }
    }
    if (has_ellipsis && letters_before == letters.size()) target += "...";
    grad_equation += "->" + target;
    std::string grad = g.Op("Einsum", inputs, {{"equation", Attribute::String(grad_equation)}});
    const bool ellipsis_broadcast = has_ellipsis && !EllipsisMatchesOutput(g, i, terms);
    if (ellipsis_broadcast) {
      ET_CHECK(ellipsis_at == 0 && dropped_axes.empty(), ErrorCode::kNotImplemented, what,
               ": the gradient of Einsum '", equation, "' is not implemented (broadcast ellipsis in '", term, "')");
      grad = SumEllipsisBack(g, grad, i, terms);
    }
    if (!dropped_axes.empty()) {
      grad = g.Op("Unsqueeze", {grad, g.Ints(dropped_axes)});
      grad = g.Op("Expand", {grad, g.ShapeOf(g.X(i))});
    }
    g.SetGrad(i, grad);
  }
}

void RegisterEinsum(OpRegistry& r) {
  ET_IF_BUILT("", "Einsum") {
    RegisterOnnx(r, "Einsum", EinsumKernel);
    r.SetGradient("Einsum", EinsumGradient);
  }
}

}  // namespace

void RegisterMatMulOps(OpRegistry& r) {
  RegisterMatMul(r);
  RegisterGemm(r);
  ET_REGISTER_ONNX(r, "MatMulInteger", MatMulIntegerKernel);
  ET_REGISTER_ONNX(r, "QLinearMatMul", QLinearMatMulKernel);
  RegisterEinsum(r);
}

}  // namespace edgetrain
