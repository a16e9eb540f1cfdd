// Det (opset 11) and Unique (opset 11): reference kernels, one section per operator.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

// =====================================================================================================
// Det: Y[...] = det(X[..., :, :]) by LU decomposition with partial pivoting, in double.
// Gradient: dX = dY * cofactor(X) (= dY * det(X) * inverse(X)^T where X is invertible).

double Determinant(std::vector<double> a, int64_t m) {
  double det = 1;
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r)
      if (std::fabs(a[r * m + col]) > std::fabs(a[pivot * m + col])) pivot = r;
    if (a[pivot * m + col] == 0) return 0;
    if (pivot != col) {
      for (int64_t k = 0; k < m; ++k) std::swap(a[col * m + k], a[pivot * m + k]);
      det = -det;
    }
    const double d = a[col * m + col];
    det *= d;
    for (int64_t r = col + 1; r < m; ++r) {
      const double f = a[r * m + col] / d;
      for (int64_t k = col; k < m; ++k) a[r * m + k] -= f * a[col * m + k];
    }
  }
  return det;
}

// det(X) * inverse(X)^T by Gauss-Jordan elimination with partial pivoting; empty when X is singular.
std::vector<double> ScaledInverseTransposed(std::vector<double> a, int64_t m) {
  std::vector<double> inv(a.size(), 0.0);
  for (int64_t i = 0; i < m; ++i) inv[i * m + i] = 1;
  double det = 1;
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r)
      if (std::fabs(a[r * m + col]) > std::fabs(a[pivot * m + col])) pivot = r;
    if (a[pivot * m + col] == 0) return {};
    if (pivot != col) {
      for (int64_t k = 0; k < m; ++k) {
        std::swap(a[col * m + k], a[pivot * m + k]);
        std::swap(inv[col * m + k], inv[pivot * m + k]);
      }
      det = -det;
    }
    const double d = a[col * m + col];
    det *= d;
    for (int64_t k = 0; k < m; ++k) a[col * m + k] /= d, inv[col * m + k] /= d;
    for (int64_t r = 0; r < m; ++r) {
      if (r == col || a[r * m + col] == 0) continue;
      const double f = a[r * m + col];
      for (int64_t k = 0; k < m; ++k) a[r * m + k] -= f * a[col * m + k], inv[r * m + k] -= f * inv[col * m + k];
    }
  }
  std::vector<double> c(a.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) c[i * m + j] = det * inv[j * m + i];
  return c;
}

// The cofactor matrix: from the inverse where X is invertible, else each entry the signed
// determinant of its minor (O(M^5), exact for singular X).
std::vector<double> Cofactors(const std::vector<double>& a, int64_t m) {
  if (m == 1) return {1.0};
  if (std::vector<double> c = ScaledInverseTransposed(a, m); !c.empty()) return c;
  std::vector<double> c(a.size()), minor(static_cast<size_t>((m - 1) * (m - 1)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) {
      size_t k = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t q = 0; q < m; ++q)
          if (r != i && q != j) minor[k++] = a[r * m + q];
      c[i * m + j] = ((i + j) % 2 ? -1.0 : 1.0) * Determinant(minor, m - 1);
    }
  return c;
}

void DetGradKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const Tensor& dy = ctx.Input(1);
  ET_CHECK(x.rank() >= 2 && x.dim(x.rank() - 1) == x.dim(x.rank() - 2), ErrorCode::kInvalidArgument,
           node.Describe(), ": input 0 (X) must be (..., M, M), got ", ShapeToString(x.shape()));
  const Shape batch_shape(x.shape().begin(), x.shape().end() - 2);
  ET_CHECK(dy.shape() == batch_shape && dy.dtype() == x.dtype(), ErrorCode::kInvalidArgument, node.Describe(),
           ": input 1 (dY) must be ", DataTypeName(x.dtype()), " ", ShapeToString(batch_shape), ", got ",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()));
  const int64_t m = x.dim(x.rank() - 1), batches = NumElements(batch_shape);
  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* dx = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
    std::vector<double> a(static_cast<size_t>(m * m));
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = static_cast<double>(xp[b * m * m + i]);
      const std::vector<double> c = Cofactors(a, m);
      const double upstream = static_cast<double>(dy.data<T>()[b]);
      for (int64_t i = 0; i < m * m; ++i) dx[b * m * m + i] = static_cast<T>(upstream * c[static_cast<size_t>(i)]);
    }
  });
}

void DetGradient(GradientContext& g) {
  if (g.dY(0).empty() || !g.NeedsGrad(0)) return;
  g.SetGrad(0, g.Op("DetGrad", {g.X(0), g.dY(0)}, {}, kEdgetrainDomain));
}

void DetKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  ET_CHECK(x.rank() >= 2 && x.dim(x.rank() - 1) == x.dim(x.rank() - 2), ErrorCode::kInvalidArgument,
           node.Describe(), ": input 0 (X) must be (..., M, M), got ", ShapeToString(x.shape()));
  const int64_t m = x.dim(x.rank() - 1);
  const Shape batch_shape(x.shape().begin(), x.shape().end() - 2);
  const int64_t batches = NumElements(batch_shape);
  VisitFloat(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* yp = ctx.Output(0, batch_shape, x.dtype()).template data<T>();
    std::vector<double> a(static_cast<size_t>(m * m));
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = static_cast<double>(xp[b * m * m + i]);
      yp[b] = static_cast<T>(Determinant(a, m));
    }
  });
}

// =====================================================================================================
// Unique: the distinct elements (or slices along `axis`) of X, sorted or in order of first
// occurrence, with their first indices, the inverse map and the counts (as numpy.unique).

void UniqueKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.Input(0);
  const bool sorted = node.GetInt("sorted", 1) != 0;
  int64_t outer = 1, length = x.numel(), inner = 1;
  std::optional<int64_t> axis;
  if (node.HasAttr("axis")) {
    ET_CHECK(x.rank() > 0, ErrorCode::kInvalidArgument, node.Describe(), ": attribute 'axis' needs X of rank >= 1");
    axis = NormalizeAxis(node.GetInt("axis", 0), static_cast<int64_t>(x.rank()), node.Describe() + " attribute 'axis'");
    length = x.dim(static_cast<size_t>(*axis));
    outer = 1;
    for (int64_t d = 0; d < *axis; ++d) outer *= x.dim(static_cast<size_t>(d));
    inner = length == 0 ? 0 : x.numel() / (outer * length);
  }
  VisitNumeric(x.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    // Slice i's k-th element, k running over (outer, inner) in row-major order.
    auto at = [&](int64_t i, int64_t k) { return xp[((k / inner) * length + i) * inner + k % inner]; };
    const int64_t slice = outer * inner;
    auto less = [&](int64_t p, int64_t q) {
      for (int64_t k = 0; k < slice; ++k)
        if (at(p, k) != at(q, k)) return at(p, k) < at(q, k);
      return false;
    };
    std::vector<int64_t> order(static_cast<size_t>(length));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);  // equal slices keep index order: first one first
    std::vector<int64_t> firsts, group_of(static_cast<size_t>(length)), counts;
    for (size_t k = 0; k < order.size(); ++k) {
      if (k == 0 || less(order[k - 1], order[k])) {
        firsts.push_back(order[k]);
        counts.push_back(0);
      }
      group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(firsts.size()) - 1;
      ++counts.back();
    }
    // Output position of each group: sorted order, or order of first occurrence.
    const size_t groups = firsts.size();
    std::vector<size_t> position(groups);
    std::iota(position.begin(), position.end(), 0);
    if (!sorted) {
      std::vector<size_t> by_first(groups);
      std::iota(by_first.begin(), by_first.end(), 0);
      std::sort(by_first.begin(), by_first.end(), [&](size_t p, size_t q) { return firsts[p] < firsts[q]; });
      for (size_t k = 0; k < groups; ++k) position[by_first[k]] = k;
    }
    Shape y_shape = axis ? x.shape() : Shape{static_cast<int64_t>(groups)};
    if (axis) y_shape[static_cast<size_t>(*axis)] = static_cast<int64_t>(groups);
    T* yp = ctx.Output(0, y_shape, x.dtype()).template data<T>();
    const int64_t n = static_cast<int64_t>(groups);
    int64_t* indices = ctx.Output(1, {n}, DataType::kInt64).data<int64_t>();
    int64_t* inverse = ctx.Output(2, {length}, DataType::kInt64).data<int64_t>();
    int64_t* count_out = ctx.Output(3, {n}, DataType::kInt64).data<int64_t>();
    for (size_t g = 0; g < groups; ++g) {
      const int64_t p = static_cast<int64_t>(position[g]);
      indices[p] = firsts[g];
      count_out[p] = counts[g];
      for (int64_t k = 0; k < slice; ++k) yp[((k / inner) * n + p) * inner + k % inner] = at(firsts[g], k);
    }
    for (int64_t i = 0; i < length; ++i)
      inverse[i] = static_cast<int64_t>(position[static_cast<size_t>(group_of[static_cast<size_t>(i)])]);
  });
}

}  // namespace

void RegisterLinalgSetOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Det", DetKernel, 11);
  ET_IF_BUILT("", "Det") r.SetGradient("Det", DetGradient);
  // No definition in standard ops: ONNX has no matrix inverse to write the cofactors with.
  ET_IF_BUILT("ai.edgetrain", "DetGrad") RegisterFused(r, "DetGrad", DetGradKernel, nullptr);
  ET_REGISTER_ONNX(r, "Unique", UniqueKernel, 11);
}

}  // namespace edgetrain
