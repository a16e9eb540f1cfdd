// GEMM for float and double: C = alpha * op(A) * op(B) + beta * C, row-major with leading
// dimensions, op(X) = X or X^T. Used by MatMul, Gemm, Einsum, Conv and gradient kernels.
// Float products go to oneDNN's sgemm when that backend is active (core/kernel_backend.hpp). Our own
// code packs panels of A and B for one register-blocked micro-kernel on vector extensions (NEON, WASM
// SIMD128, SSE2; AVX2+FMA and AVX-512 clones chosen at run time); Direct's loops are its test oracle.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/cpu_features.hpp"
#include "core/kernel_backend.hpp"
#include "core/threading.hpp"
#include "core/wasm_relaxed_simd.hpp"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__AVX2__)
#define EDGETRAIN_GEMM_AVX2_DISPATCH 1
#endif

#if defined(__GNUC__)
#define EDGETRAIN_GEMM_INLINE inline __attribute__((always_inline))
#define EDGETRAIN_GEMM_LAMBDA_INLINE __attribute__((always_inline))
#else
#define EDGETRAIN_GEMM_INLINE inline
#define EDGETRAIN_GEMM_LAMBDA_INLINE
#endif

namespace edgetrain {
namespace gemm_detail {

// Depth of one packed panel and rows of A per packed block (a multiple of every MR below).
constexpr int64_t kBlockK = 256;
constexpr int64_t kBlockM = 96;
constexpr int64_t kBlockN = 2048;
// Shallower products stay on the inline WebAssembly kernel. A call into the relaxed SIMD kernel's instance costs about
// 15 ns; made once per tile it cost more than it saved below 32 deep, once per strip of tiles it pays from 4 deep.
constexpr int64_t kWasmFmaMinDepth = 4;
// Below this many multiply-adds packing costs more than it saves.
constexpr int64_t kSmallProduct = 16 * 1024;
// Products this shallow (B not transposed) are sums of outer products: packing them doubled their cost.
constexpr int64_t kDirectDepth = 2;

template <typename T>
struct Operands {
  bool trans_a, trans_b;
  int64_t m, n, k;
  T alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;

  T A(int64_t i, int64_t p) const { return trans_a ? a[p * lda + i] : a[i * lda + p]; }
  T B(int64_t p, int64_t j) const { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; }
};

// Rows [i0, i0+mc) x depth [p0, p0+kc) of op(A) as strips of MR rows: strip s holds, for each p,
// MR consecutive values (zero past the last row).
template <typename T, int MR>
EDGETRAIN_GEMM_INLINE void PackA(const Operands<T>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T* out) {
  for (int64_t is = 0; is < mc; is += MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - is);
    if (g.trans_a) {
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = g.a + (p0 + p) * g.lda + i0 + is;
        T* dst = out + p * MR;
        for (int64_t r = 0; r < rows; ++r) dst[r] = src[r];
        for (int64_t r = rows; r < MR; ++r) dst[r] = T(0);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const T* src = g.a + (i0 + is + r) * g.lda + p0;
        for (int64_t p = 0; p < kc; ++p) out[p * MR + r] = src[p];
      }
      for (int64_t r = rows; r < MR; ++r)
        for (int64_t p = 0; p < kc; ++p) out[p * MR + r] = T(0);
    }
    out += kc * MR;
  }
}

// Depth [p0, p0+kc) x columns [j0, j0+nc) of op(B) as strips of NR columns: strip s holds, for
// each p, NR consecutive values (zero past the last column).
template <typename T, int NR>
EDGETRAIN_GEMM_INLINE void PackB(const Operands<T>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* out) {
  for (int64_t js = 0; js < nc; js += NR) {
    const int64_t cols = std::min<int64_t>(NR, nc - js);
    if (!g.trans_b) {
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = g.b + (p0 + p) * g.ldb + j0 + js;
        T* dst = out + p * NR;
        if (cols == NR) {
          for (int j = 0; j < NR; ++j) dst[j] = src[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
          for (int64_t j = cols; j < NR; ++j) dst[j] = T(0);
        }
      }
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const T* src = g.b + (j0 + js + j) * g.ldb + p0;
        for (int64_t p = 0; p < kc; ++p) out[p * NR + j] = src[p];
      }
      for (int64_t j = cols; j < NR; ++j)
        for (int64_t p = 0; p < kc; ++p) out[p * NR + j] = T(0);
    }
    out += kc * NR;
  }
}

// C tile (rows x cols) = alpha * acc + beta * C (beta == 0 ignores the old C, so NaN/Inf there do not leak
// through), acc being MR rows of NV vectors of Bytes bytes.
template <typename T, int MR, int NV, int Bytes, typename V>
EDGETRAIN_GEMM_INLINE void StoreTile(const V (&acc)[MR][NV], T* __restrict c, int64_t ldc, int64_t rows, int64_t cols,
                                     T alpha, T beta) {
  constexpr int L = Bytes / static_cast<int>(sizeof(T));
  constexpr int NR = NV * L;
  auto store_row = [&](int64_t i) EDGETRAIN_GEMM_LAMBDA_INLINE {
    T* crow = c + i * ldc;
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      V out = alpha * acc[i][j];
      if (beta != T(0)) {
        V old;
        __builtin_memcpy(&old, crow + j * L, sizeof(V));
        out += beta == T(1) ? old : beta * old;
      }
      __builtin_memcpy(crow + j * L, &out, sizeof(V));
    }
  };
  if (rows == MR && cols == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) store_row(i);
  } else if (cols == NR) {  // the last rows of A: whole vectors still
    for (int64_t i = 0; i < rows; ++i) store_row(i);
  } else {
    T tile[MR][NR];
    __builtin_memcpy(tile, acc, sizeof(tile));
    for (int64_t i = 0; i < rows; ++i) {
      T* crow = c + i * ldc;
      for (int64_t j = 0; j < cols; ++j)
        crow[j] = beta == T(0) ? alpha * tile[i][j] : beta * crow[j] + alpha * tile[i][j];
    }
  }
}

// acc = packed A strip (kc x MR) times packed B strip (kc x NR, NR = NV vectors of Bytes bytes), stored
// by StoreTile. Written once with GCC/Clang vector extensions: SSE2, AVX2+FMA, AVX-512, NEON and WASM
// SIMD128 are the same source compiled for different vector widths.
// RowsUsed < MR: an edge tile whose strip (still MR wide) holds at most RowsUsed rows; only those are
// computed.
template <typename T, int MR, int NV, int Bytes, int RowsUsed = MR>
EDGETRAIN_GEMM_INLINE void MicroKernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                                       int64_t ldc, int64_t rows, int64_t cols, T alpha, T beta) {
  typedef T V __attribute__((vector_size(Bytes)));
  constexpr int L = Bytes / static_cast<int>(sizeof(T));
  constexpr int NR = NV * L;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) __builtin_memcpy(&bv[j], b + p * NR + j * L, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < RowsUsed; ++i) {
      const T av = a[p * MR + i];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  StoreTile<T, MR, NV, Bytes>(acc, c, ldc, rows, cols, alpha, beta);
}

// One register tile; a strip's last rows (M not a multiple of MR) run a kernel that computes a third or
// half of MR rows where that covers them, not the whole MR (M = 64 on MR = 12: 64 rows of work, not 72).
template <typename T, int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void RunTile(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int64_t rows,
                                   int64_t cols, T alpha, T beta) {
  if constexpr (MR % 3 == 0 && MR >= 6) {
    if (rows <= MR / 3) return MicroKernel<T, MR, NV, Bytes, MR / 3>(kc, a, b, c, ldc, rows, cols, alpha, beta);
  }
  if constexpr (MR % 2 == 0) {
    if (rows <= MR / 2) return MicroKernel<T, MR, NV, Bytes, MR / 2>(kc, a, b, c, ldc, rows, cols, alpha, beta);
  }
  MicroKernel<T, MR, NV, Bytes>(kc, a, b, c, ldc, rows, cols, alpha, beta);
}

// The register tiles of `rows` rows of C (at most kBlockM: consecutive packed strips of A from `a`) against one
// packed strip of B. In the browser, on relaxed SIMD's fused multiply-add, one call into the kernel's instance for
// all of them (wasm_relaxed_simd.hpp).
template <typename T, int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void RunTiles(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int64_t rows,
                                    int64_t cols, T alpha, T beta) {
#if defined(__EMSCRIPTEN__) && defined(__wasm_simd128__)
  if constexpr (std::is_same_v<T, float> && MR == 2 && NV == 4 && Bytes == 16) {
    const WasmFmaTiles tiles = kc >= kWasmFmaMinDepth ? WasmFmaTilesKernel() : nullptr;
    if (tiles) {
      typedef float V __attribute__((vector_size(16)));
      V acc[kBlockM / MR][MR][NV];
      const int64_t count = (rows + MR - 1) / MR;
      tiles(static_cast<int32_t>(kc), a, b, reinterpret_cast<float*>(acc), static_cast<int32_t>(count));
      for (int64_t s = 0; s < count; ++s)
        StoreTile<T, MR, NV, Bytes>(acc[s], c + s * MR * ldc, ldc, std::min<int64_t>(MR, rows - s * MR), cols, alpha,
                                    beta);
      return;
    }
  }
#endif
  for (int64_t is = 0; is < rows; is += MR)
    RunTile<T, MR, NV, Bytes>(kc, a + is * kc, b, c + is * ldc, ldc, std::min<int64_t>(MR, rows - is), cols, alpha,
                              beta);
}

// The blocked algorithm on one thread: loops over N panels, K panels (packing B), M blocks
// (packing A), then register tiles.
template <typename T, int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void BlockedImpl(const Operands<T>& g) {
  constexpr int NR = NV * Bytes / static_cast<int>(sizeof(T));
  const int64_t kc_max = std::min(g.k, kBlockK);
  const int64_t nc_max = std::min((g.n + NR - 1) / NR * NR, kBlockN);
  const int64_t mc_max = std::min((g.m + MR - 1) / MR * MR, kBlockM);
  // Per-thread packing buffers that only grow: no allocation once the largest shape has run.
  thread_local std::vector<T> packed_b, packed_a;
  if (packed_b.size() < static_cast<size_t>(kc_max * nc_max)) packed_b.resize(static_cast<size_t>(kc_max * nc_max));
  if (packed_a.size() < static_cast<size_t>(kc_max * mc_max)) packed_a.resize(static_cast<size_t>(kc_max * mc_max));
  for (int64_t j0 = 0; j0 < g.n; j0 += kBlockN) {
    const int64_t nc = std::min(kBlockN, g.n - j0);
    for (int64_t p0 = 0; p0 < g.k; p0 += kBlockK) {
      const int64_t kc = std::min(kBlockK, g.k - p0);
      const T beta = p0 == 0 ? g.beta : T(1);
      PackB<T, NR>(g, p0, kc, j0, nc, packed_b.data());
      for (int64_t i0 = 0; i0 < g.m; i0 += kBlockM) {
        const int64_t mc = std::min(kBlockM, g.m - i0);
        PackA<T, MR>(g, i0, mc, p0, kc, packed_a.data());
        for (int64_t js = 0; js < nc; js += NR) {
          const T* b_strip = packed_b.data() + js * kc;
          RunTiles<T, MR, NV, Bytes>(kc, packed_a.data(), b_strip, g.c + i0 * g.ldc + j0 + js, g.ldc, mc,
                                     std::min<int64_t>(NR, nc - js), g.alpha, beta);
        }
      }
    }
  }
}

// C (g.m x g.n) from columns [j0, j0 + g.n) of a B packed whole by PackGemmB (all K panels, each `width`
// columns wide in strips of NR; j0 a multiple of NR): BlockedImpl without packing B.
template <typename T, int MR, int NV, int Bytes>
EDGETRAIN_GEMM_INLINE void PrePackedImpl(const Operands<T>& g, const T* packed, int64_t width, int64_t j0) {
  const int64_t kc_max = std::min(g.k, kBlockK);
  const int64_t mc_max = std::min((g.m + MR - 1) / MR * MR, kBlockM);
  constexpr int NR = NV * Bytes / static_cast<int>(sizeof(T));
  thread_local std::vector<T> packed_a;
  if (packed_a.size() < static_cast<size_t>(kc_max * mc_max)) packed_a.resize(static_cast<size_t>(kc_max * mc_max));
  for (int64_t p0 = 0; p0 < g.k; p0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, g.k - p0);
    const T beta = p0 == 0 ? g.beta : T(1);
    const T* panel = packed + p0 * width + j0 * kc;
    for (int64_t i0 = 0; i0 < g.m; i0 += kBlockM) {
      const int64_t mc = std::min(kBlockM, g.m - i0);
      PackA<T, MR>(g, i0, mc, p0, kc, packed_a.data());
      for (int64_t js = 0; js < g.n; js += NR)
        RunTiles<T, MR, NV, Bytes>(kc, packed_a.data(), panel + js * kc, g.c + i0 * g.ldc + js, g.ldc, mc,
                                   std::min<int64_t>(NR, g.n - js), g.alpha, beta);
    }
  }
}

// Register tiles per vector width: MR rows by NV vectors, MR * NV accumulators plus NV B vectors and
// one broadcast A value within the register file (16 for SSE2/AVX2, 32 for NEON/AVX-512). WASM SIMD128 gets
// 2 x 4 vectors: V8 keeps 8 accumulators in registers, 6 x 2 ran a third slower in Node.js 20 and Chromium 156.
template <typename T>
void BlockedGeneric(const Operands<T>& g) {
#if defined(__AVX512F__)
  BlockedImpl<T, 12, 2, 64>(g);
#elif defined(__AVX2__)
  BlockedImpl<T, 6, 2, 32>(g);
#elif defined(__aarch64__)
  BlockedImpl<T, 8, 3, 16>(g);
#elif defined(__wasm_simd128__)
  BlockedImpl<T, 2, 4, 16>(g);
#else
  BlockedImpl<T, 6, 2, 16>(g);
#endif
}

#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
template <typename T>
__attribute__((target("avx2,fma"))) void BlockedAvx2(const Operands<T>& g) {
  BlockedImpl<T, 6, 2, 32>(g);
}
template <typename T>
__attribute__((target("avx512f,avx2,fma"))) void BlockedAvx512(const Operands<T>& g) {
  BlockedImpl<T, 12, 2, 64>(g);
}
#endif

template <typename T>
void PrePackedGeneric(const Operands<T>& g, const T* packed, int64_t width, int64_t j0) {
#if defined(__AVX512F__)
  PrePackedImpl<T, 12, 2, 64>(g, packed, width, j0);
#elif defined(__AVX2__)
  PrePackedImpl<T, 6, 2, 32>(g, packed, width, j0);
#elif defined(__aarch64__)
  PrePackedImpl<T, 8, 3, 16>(g, packed, width, j0);
#elif defined(__wasm_simd128__)
  PrePackedImpl<T, 2, 4, 16>(g, packed, width, j0);
#else
  PrePackedImpl<T, 6, 2, 16>(g, packed, width, j0);
#endif
}

#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
template <typename T>
__attribute__((target("avx2,fma"))) void PrePackedAvx2(const Operands<T>& g, const T* packed, int64_t width,
                                                       int64_t j0) {
  PrePackedImpl<T, 6, 2, 32>(g, packed, width, j0);
}
template <typename T>
__attribute__((target("avx512f,avx2,fma"))) void PrePackedAvx512(const Operands<T>& g, const T* packed,
                                                                 int64_t width, int64_t j0) {
  PrePackedImpl<T, 12, 2, 64>(g, packed, width, j0);
}
#endif

// NR of the micro-kernel PrePacked* runs on this CPU (the strip width of PackGemmB's layout).
template <typename T>
int PackedStrip() {
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
  if constexpr (std::is_same_v<T, float>) {
    if (CpuHasAvx512()) return 32;
  }
  if (CpuHasAvx2Fma()) return static_cast<int>(64 / sizeof(T));
#endif
#if defined(__AVX512F__)
  return static_cast<int>(128 / sizeof(T));
#elif defined(__AVX2__)
  return static_cast<int>(64 / sizeof(T));
#elif defined(__aarch64__)
  return static_cast<int>(48 / sizeof(T));
#elif defined(__wasm_simd128__)
  return static_cast<int>(64 / sizeof(T));
#else
  return static_cast<int>(32 / sizeof(T));
#endif
}

template <typename T>
void PrePacked(const Operands<T>& g, const T* packed, int64_t width, int64_t j0) {
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
  if constexpr (std::is_same_v<T, float>) {
    if (CpuHasAvx512()) return PrePackedAvx512(g, packed, width, j0);
  }
  if (CpuHasAvx2Fma()) return PrePackedAvx2(g, packed, width, j0);
#endif
  PrePackedGeneric(g, packed, width, j0);
}

// Direct loops for small products and for matrix-vector shapes, where packing does not pay.
template <typename T>
void Direct(const Operands<T>& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    T* crow = g.c + i * g.ldc;
    // With beta == 0, rows of B (not B^T) write their first product instead of adding it to zeros.
    const bool first_writes = g.beta == T(0) && !g.trans_b && g.k > 0;
    if (g.beta == T(0)) {
      if (!first_writes) std::fill(crow, crow + g.n, T(0));
    } else if (g.beta != T(1)) {
      for (int64_t j = 0; j < g.n; ++j) crow[j] *= g.beta;
    }
    if (!g.trans_b) {
      for (int64_t p = 0; p < g.k; ++p) {
        const T aip = g.alpha * g.A(i, p);
        const T* brow = g.b + p * g.ldb;
        if (p == 0 && first_writes) {
          for (int64_t j = 0; j < g.n; ++j) crow[j] = aip * brow[j];
        } else {
          for (int64_t j = 0; j < g.n; ++j) crow[j] += aip * brow[j];
        }
      }
    } else {
      for (int64_t j = 0; j < g.n; ++j) {
        const T* bcol = g.b + j * g.ldb;
        T sum = T(0);
        if (!g.trans_a) {
          const T* arow = g.a + i * g.lda;
          // 16 partial sums: the dot product vectorises (a linear layer at batch 1 ran it scalar)
#pragma omp simd simdlen(16) reduction(+ : sum)
          for (int64_t p = 0; p < g.k; ++p) sum += arow[p] * bcol[p];
        } else {
          for (int64_t p = 0; p < g.k; ++p) sum += g.a[p * g.lda + i] * bcol[p];
        }
        crow[j] += g.alpha * sum;
      }
    }
  }
}

template <typename T>
void Serial(const Operands<T>& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0 || g.alpha == T(0)) {
    for (int64_t i = 0; i < g.m; ++i) {
      T* crow = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) crow[j] = g.beta == T(0) ? T(0) : g.beta * crow[j];
    }
    return;
  }
  // Shallow products: a linear layer's dW at batch 1 or 2.
  if (g.m == 1 || g.m * g.n * g.k <= kSmallProduct || (g.k <= kDirectDepth && !g.trans_b)) {
    Direct(g);
    return;
  }
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
  if constexpr (std::is_same_v<T, float>) {  // float only: double products are rare and cost code size
    if (CpuHasAvx512()) {
      BlockedAvx512(g);
      return;
    }
  }
  if (CpuHasAvx2Fma()) {
    BlockedAvx2(g);
    return;
  }
#endif
  BlockedGeneric(g);
}

// oneDNN's row-major sgemm with `threads` threads; false when this build has no oneDNN or it
// refused the call (then the reference code runs). Defined in gemm_dnnl.cpp.
bool DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads);
// Y[m x n] = A[m x k] * op(B) + bias[n] (bias may be null; Y contiguous), then max(Y, 0) when `relu`
// (a post-op), as one cached oneDNN matmul primitive: the Gemm operator's usual case (a linear
// layer). With `constant_weights` (a node's NodeState, for a B that never changes) the primitive and
// B reordered into the layout it prefers are kept there, made again only when the configuration or
// B's address changes. False as DnnlSgemm.
bool DnnlLinear(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, bool trans_b,
                const float* bias, float* y, int threads, bool relu = false,
                std::shared_ptr<void>* constant_weights = nullptr);
// C = A * B for stacks of matrices on oneDNN's matmul primitive, in one call: contiguous tensors of
// equal rank ([batch..., m, k], [batch..., k, n], [batch..., m, n]) whose batch dims are equal or 1
// (broadcast). False as DnnlSgemm.
bool DnnlBatchedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       const std::vector<int64_t>& c_dims, const float* a, const float* b, float* c, int threads);

}  // namespace gemm_detail

// C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, all row-major; op(A) is A^T when
// trans_a (then A is stored k x m). lda/ldb/ldc are row pitches in elements. When beta == 0 the
// old contents of C are ignored. With a pool of several threads, large products split the rows
// or columns of C between threads; pass nullptr when already inside a ParallelFor.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc, ThreadPool* pool = nullptr) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "Gemm supports float and double");
  gemm_detail::Operands<T> g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  const int threads = pool ? pool->num_threads() : 1;
  if constexpr (std::is_same_v<T, float>) {
    if (m > 0 && n > 0 && k > 0 && m * n * k > gemm_detail::kSmallProduct && UseDnnl() &&
        gemm_detail::DnnlSgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads))
      return;
  }
  constexpr int64_t kMinWorkPerThread = 1 << 18;  // multiply-adds
  if (threads <= 1 || m <= 0 || n <= 0 || m * n * std::max<int64_t>(k, 1) < 2 * kMinWorkPerThread) {
    gemm_detail::Serial(g);
    return;
  }
  // Split the longer side of C into units that keep register tiles whole.
  const bool split_columns = n >= m;
  const int64_t unit = split_columns ? 32 : 24;
  const int64_t extent = split_columns ? n : m;
  const int64_t units = (extent + unit - 1) / unit;
  const int64_t work_per_unit = std::max<int64_t>(1, (m * n * std::max<int64_t>(k, 1)) / units);
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerThread / work_per_unit);
  pool->ParallelFor(units, grain, [&](int64_t begin, int64_t end) {
    gemm_detail::Operands<T> part = g;
    const int64_t lo = begin * unit, hi = std::min(extent, end * unit);
    if (split_columns) {
      part.n = hi - lo;
      part.b = trans_b ? b + lo * ldb : b + lo;
      part.c = c + lo;
    } else {
      part.m = hi - lo;
      part.a = trans_a ? a + lo : a + lo * lda;
      part.c = c + lo * ldc;
    }
    gemm_detail::Serial(part);
  });
}

// A B that many products share (a recurrent weight applied at every time step) packed once into the
// micro-kernel's layout: PackedGemmBSize(k, n) values for op(B) [k x n], then GemmPackedB per product.
template <typename T>
int64_t PackedGemmBSize(int64_t k, int64_t n) {
  const int64_t nr = gemm_detail::PackedStrip<T>();
  return std::max<int64_t>(k, 1) * ((n + nr - 1) / nr * nr);
}
template <typename T>
void PackGemmB(bool trans_b, int64_t k, int64_t n, const T* b, int64_t ldb, T* packed) {
  const gemm_detail::Operands<T> g{false, trans_b, 0, n, k, T(1), nullptr, 0, b, ldb, T(0), nullptr, 0};
  const int64_t nr = gemm_detail::PackedStrip<T>(), width = (n + nr - 1) / nr * nr;
  for (int64_t p0 = 0; p0 < k; p0 += gemm_detail::kBlockK) {
    const int64_t kc = std::min(gemm_detail::kBlockK, k - p0);
    T* out = packed + p0 * width;
    switch (nr) {  // every NR of PackedStrip: 4/6 (double on SSE2/WASM and NEON), 8 to 32
      case 4: gemm_detail::PackB<T, 4>(g, p0, kc, 0, n, out); break;
      case 6: gemm_detail::PackB<T, 6>(g, p0, kc, 0, n, out); break;
      case 8: gemm_detail::PackB<T, 8>(g, p0, kc, 0, n, out); break;
      case 12: gemm_detail::PackB<T, 12>(g, p0, kc, 0, n, out); break;
      case 16: gemm_detail::PackB<T, 16>(g, p0, kc, 0, n, out); break;
      case 24: gemm_detail::PackB<T, 24>(g, p0, kc, 0, n, out); break;
      default: gemm_detail::PackB<T, 32>(g, p0, kc, 0, n, out); break;
    }
  }
}

// C[m x n] = alpha * op(A) * B + beta * C as Gemm, B from PackGemmB with the same k and n; always our own
// micro-kernel (no oneDNN). With a pool of several threads, large products split C's columns.
template <typename T>
void GemmPackedB(bool trans_a, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* packed,
                 T beta, T* c, int64_t ldc, ThreadPool* pool = nullptr) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "GemmPackedB supports float and double");
  gemm_detail::Operands<T> g{trans_a, false, m, n, k, alpha, a, lda, nullptr, 0, beta, c, ldc};
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == T(0)) return gemm_detail::Serial(g);  // scales C only
  const int64_t nr = gemm_detail::PackedStrip<T>(), width = (n + nr - 1) / nr * nr, strips = width / nr;
  constexpr int64_t kMinWorkPerThread = 1 << 18;  // multiply-adds
  if (!pool || pool->num_threads() <= 1 || m * n * k < 2 * kMinWorkPerThread) {
    gemm_detail::PrePacked(g, packed, width, 0);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerThread / std::max<int64_t>(1, m * nr * k));
  pool->ParallelFor(strips, grain, [&](int64_t begin, int64_t end) {
    gemm_detail::Operands<T> part = g;
    part.n = std::min(n, end * nr) - begin * nr;
    part.c = c + begin * nr;
    gemm_detail::PrePacked(part, packed, width, begin * nr);
  });
}

}  // namespace edgetrain
