// Elementwise building blocks shared by operator families: numpy broadcasting over N inputs,
// parallel unary/binary maps, and type dispatch that lets float16/bfloat16 compute in float.
#pragma once

#include <algorithm>
#include <array>
#include <initializer_list>
#include <span>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/kernel.hpp"

namespace edgetrain::elementwise {

// Elements per parallel chunk: below this, threading costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 14;

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type arithmetic is done in: half types compute in float, everything else in itself.
template <typename T>
using ComputeType = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
inline ComputeType<T> Load(T value) {
  if constexpr (kIsHalf<T>) return static_cast<float>(value);
  else return value;
}

template <typename T, typename V>
inline T Store(V value) {
  if constexpr (kIsHalf<T>) return T(static_cast<float>(value));
  else return static_cast<T>(value);
}

// float32/float64 plus the half types (computed in float).
template <typename Fn>
decltype(auto) VisitFloatMath(DataType type, const std::string& what, Fn&& fn) {
  switch (type) {
    ET_VISIT_CASE(kFloat16, Float16);
    ET_VISIT_CASE(kBFloat16, BFloat16);
    default: return VisitFloat(type, what, std::forward<Fn>(fn));
  }
}

// Every numeric type (no bool) plus the half types.
template <typename Fn>
decltype(auto) VisitNumericMath(DataType type, const std::string& what, Fn&& fn) {
  switch (type) {
    ET_VISIT_CASE(kFloat16, Float16);
    ET_VISIT_CASE(kBFloat16, BFloat16);
    default: return VisitNumeric(type, what, std::forward<Fn>(fn));
  }
}

// Broadcast shape of all `shapes`; the error names the node and every shape.
inline Shape BroadcastAll(const Node& node, std::span<const Shape* const> shapes) {
  Shape out;
  for (const Shape* shape : shapes) {
    size_t rank = std::max(out.size(), shape->size());
    Shape merged(rank);
    for (size_t i = 0; i < rank; ++i) {
      int64_t a = i < rank - out.size() ? 1 : out[i - (rank - out.size())];
      int64_t b = i < rank - shape->size() ? 1 : (*shape)[i - (rank - shape->size())];
      if (a != b && a != 1 && b != 1) {
        std::string all;
        for (const Shape* s : shapes) all += (all.empty() ? "" : ", ") + ShapeToString(*s);
        Fail(ErrorCode::kInvalidArgument, node.Describe(), ": input shapes ", all, " cannot be broadcast together");
      }
      merged[i] = a == 1 ? b : a;
    }
    out = std::move(merged);
  }
  return out;
}
inline Shape BroadcastAll(const Node& node, std::initializer_list<const Shape*> shapes) {
  return BroadcastAll(node, std::span<const Shape* const>(shapes.begin(), shapes.size()));
}

// Output dimensions with size-1 dims dropped and neighbouring dims merged where every input walks
// them contiguously; equal shapes collapse to one dim, so do scalars.
template <size_t N>
struct BroadcastLayout {
  Shape dims;
  std::array<Shape, N> strides;  // element strides per dim, 0 where broadcast
};

template <size_t N>
BroadcastLayout<N> MakeBroadcastLayout(const Shape& out_shape, const std::array<const Shape*, N>& in_shapes) {
  std::array<Shape, N> full;
  for (size_t k = 0; k < N; ++k) full[k] = BroadcastStrides(*in_shapes[k], out_shape);
  BroadcastLayout<N> layout;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    bool mergeable = !layout.dims.empty();
    for (size_t k = 0; k < N && mergeable; ++k)
      mergeable = layout.strides[k].back() == full[k][d] * out_shape[d];
    if (mergeable) {
      layout.dims.back() *= out_shape[d];
      for (size_t k = 0; k < N; ++k) layout.strides[k].back() = full[k][d];
      continue;
    }
    layout.dims.push_back(out_shape[d]);
    for (size_t k = 0; k < N; ++k) layout.strides[k].push_back(full[k][d]);
  }
  if (layout.dims.empty()) {
    layout.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) layout.strides[k].push_back(0);
  }
  return layout;
}

// Calls row_fn(out_offset, in_offsets, inner_strides, length) over runs of consecutive output
// elements, split across the pool. row_fn must not throw.
template <size_t N, typename RowFn>
void ForEachBroadcastRun(ThreadPool& pool, const Shape& out_shape, const std::array<const Shape*, N>& in_shapes,
                         RowFn&& row_fn) {
  const int64_t total = NumElements(out_shape);
  if (total == 0) return;
  const BroadcastLayout<N> layout = MakeBroadcastLayout<N>(out_shape, in_shapes);
  const int64_t inner = layout.dims.back();
  const size_t outer_rank = layout.dims.size() - 1;
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = layout.strides[k].back();
  pool.ParallelFor(total, kParallelGrain, [&](int64_t begin, int64_t end) {
    int64_t pos = begin;
    while (pos < end) {
      int64_t rest = pos / inner, column = pos % inner;
      std::array<int64_t, N> offsets{};
      for (size_t d = outer_rank; d-- > 0;) {
        int64_t index = rest % layout.dims[d];
        rest /= layout.dims[d];
        for (size_t k = 0; k < N; ++k) offsets[k] += index * layout.strides[k][d];
      }
      for (size_t k = 0; k < N; ++k) offsets[k] += column * inner_strides[k];
      int64_t length = std::min(inner - column, end - pos);
      row_fn(pos, offsets, inner_strides, length);
      pos += length;
    }
  });
}

// z = fn(z, y) over n elements, z not overlapping y: BroadcastBinary's in-place case as a loop of its own. clang's
// vectorizer (WebAssembly) checks that input and output do not overlap and runs the scalar loop when they are the
// same buffer; there a branch per ReluGrad element cost 7 ns on random signs.
template <typename O, typename B, typename Fn>
void InPlaceBinaryRun(O* __restrict z, const B* __restrict y, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i) z[i] = Store<O>(fn(Load(z[i]), Load(y[i])));
}

// out = fn(a, b) elementwise with broadcasting; out must already have the broadcast shape.
// fn receives ComputeType values; its result is stored as O. out may alias a when shapes match.
template <typename A, typename B, typename O, typename Fn>
void BroadcastBinary(ThreadPool& pool, const Tensor& a, const Tensor& b, Tensor& out, Fn fn) {
  const A* a_data = a.data<A>();
  const B* b_data = b.data<B>();
  O* out_data = out.data<O>();
  ForEachBroadcastRun<2>(pool, out.shape(), {&a.shape(), &b.shape()},
                         [&](int64_t o, const std::array<int64_t, 2>& offs, const std::array<int64_t, 2>& strides,
                             int64_t n) {
                           const A* x = a_data + offs[0];
                           const B* y = b_data + offs[1];
                           O* z = out_data + o;
                           if (strides[0] == 1 && strides[1] == 1) {
                             if constexpr (std::is_same_v<A, O>) {
                               if (z == x && static_cast<const void*>(y) != x) return InPlaceBinaryRun(z, y, n, fn);
                             }
                             for (int64_t i = 0; i < n; ++i) z[i] = Store<O>(fn(Load(x[i]), Load(y[i])));
                           } else if (strides[0] == 1 && strides[1] == 0) {
                             const auto y0 = Load(y[0]);
                             for (int64_t i = 0; i < n; ++i) z[i] = Store<O>(fn(Load(x[i]), y0));
                           } else if (strides[0] == 0 && strides[1] == 1) {
                             const auto x0 = Load(x[0]);
                             for (int64_t i = 0; i < n; ++i) z[i] = Store<O>(fn(x0, Load(y[i])));
                           } else {
                             for (int64_t i = 0; i < n; ++i)
                               z[i] = Store<O>(fn(Load(x[i * strides[0]]), Load(y[i * strides[1]])));
                           }
                         });
}

// The sum of v[0..n) in double, as 8 interleaved partial sums (independent lanes the compiler vectorises)
// added pairwise at the end.
inline double SumInDouble(const float* v, int64_t n) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(v[i + k]);
  for (int k = 0; i < n; ++i, ++k) part[k] += static_cast<double>(v[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// out = fn(in) elementwise; shapes must match (out may alias in).
template <typename I, typename O, typename Fn>
void UnaryMap(ThreadPool& pool, const Tensor& in, Tensor& out, Fn fn) {
  const I* x = in.data<I>();
  O* y = out.data<O>();
  pool.ParallelFor(in.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<I, O>) {
      if (x == y) {  // in place: one pointer, so nothing for the vectorizer to check (see InPlaceBinaryRun)
        for (int64_t i = begin; i < end; ++i) y[i] = Store<O>(fn(Load(y[i])));
        return;
      }
    }
    for (int64_t i = begin; i < end; ++i) y[i] = Store<O>(fn(Load(x[i])));
  });
}

// y = fn(x) for float types (half types compute in float).
template <typename Fn>
void FloatUnary(KernelContext& ctx, Fn fn) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitFloatMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, T>(ctx.threads(), x, y, fn);
  });
}

// y = fn(x) for every numeric type.
template <typename Fn>
void NumericUnary(KernelContext& ctx, Fn fn) {
  Tensor x = ctx.Input(0);
  Tensor& y = ctx.Output(0, x.shape(), x.dtype());
  VisitNumericMath(x.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, T>(ctx.threads(), x, y, fn);
  });
}

}  // namespace edgetrain::elementwise
