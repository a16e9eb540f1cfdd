// The packed, register-blocked GEMM of ops/gemm.hpp (each compiled vector width this CPU runs, and the
// dispatching entry points) against the reference loops (gemm_detail::Direct) in float64, on odd
// shapes, every transpose, padded leading dimensions, alpha/beta accumulation and across block edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm.hpp"

namespace edgetrain::testing {
namespace {

template <typename T>
struct Variant {
  std::string name;
  void (*run)(const gemm_detail::Operands<T>&);
};

template <typename T, int MR, int NV, int Bytes>
void Tile(const gemm_detail::Operands<T>& g) {
  gemm_detail::BlockedImpl<T, MR, NV, Bytes>(g);
}

// GemmPackedB on B packed once by PackGemmB, on one thread and split between three.
template <typename T, int Threads>
void PrePacked(const gemm_detail::Operands<T>& g) {
  std::vector<T> packed(static_cast<size_t>(PackedGemmBSize<T>(g.k, g.n)), std::numeric_limits<T>::quiet_NaN());
  PackGemmB(g.trans_b, g.k, g.n, g.b, g.ldb, packed.data());
  ThreadPool pool(Threads);
  GemmPackedB(g.trans_a, g.m, g.n, g.k, g.alpha, g.a, g.lda, packed.data(), g.beta, g.c, g.ldc,
              Threads > 1 ? &pool : nullptr);
}

template <typename T>
std::vector<Variant<T>> Variants() {
  std::vector<Variant<T>> v = {{"generic", &gemm_detail::BlockedGeneric<T>}, {"serial", &gemm_detail::Serial<T>},
                               {"packed B", &PrePacked<T, 1>}, {"packed B, 3 threads", &PrePacked<T, 3>}};
  if constexpr (std::is_same_v<T, float>) {
    // The other ISAs' tile shapes (same source, emulated at this CPU's width): NEON's, AVX-512's, SSE2/WASM's.
    v.push_back({"tile 8x3 vectors of 16 B", &Tile<T, 8, 3, 16>});
    v.push_back({"tile 12x2 vectors of 64 B", &Tile<T, 12, 2, 64>});
    v.push_back({"tile 6x2 vectors of 16 B", &Tile<T, 6, 2, 16>});
  }
#if defined(EDGETRAIN_GEMM_AVX2_DISPATCH)
  if (CpuHasAvx2Fma()) v.push_back({"avx2", &gemm_detail::BlockedAvx2<T>});
  if (std::is_same_v<T, float> && CpuHasAvx512()) v.push_back({"avx512", &gemm_detail::BlockedAvx512<T>});
#endif
  return v;
}

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  double alpha, beta;
  int64_t pad;  // extra elements per row of A, B and C
};

std::string Describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.trans_a ? " A^T" : "") +
         (c.trans_b ? " B^T" : "") + " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta) +
         " pad " + std::to_string(c.pad);
}

// Runs `run` on float copies of random operands and checks C against the float64 reference; C
// starts as NaN when beta == 0 (it must not leak through) and random otherwise.
template <typename T>
void ExpectMatchesReference(const Case& c, const Variant<T>& variant) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 7919 + c.n * 131 + c.k));
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const int64_t lda = (c.trans_a ? c.m : c.k) + c.pad, ldb = (c.trans_b ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
  std::vector<double> a((c.trans_a ? c.k : c.m) * lda), b((c.trans_b ? c.n : c.k) * ldb), out(c.m * ldc);
  for (double& x : a) x = uniform(rng);
  for (double& x : b) x = uniform(rng);
  for (double& x : out) x = c.beta == 0 ? std::numeric_limits<double>::quiet_NaN() : uniform(rng);
  std::vector<double> expected = out;
  gemm_detail::Direct(gemm_detail::Operands<double>{c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda,
                                                    b.data(), ldb, c.beta, expected.data(), ldc});
  const std::vector<T> at(a.begin(), a.end()), bt(b.begin(), b.end());
  std::vector<T> actual(out.begin(), out.end());
  variant.run(gemm_detail::Operands<T>{c.trans_a, c.trans_b, c.m, c.n, c.k, static_cast<T>(c.alpha), at.data(), lda,
                                       bt.data(), ldb, static_cast<T>(c.beta), actual.data(), ldc});
  const double tol = (std::is_same_v<T, float> ? 2e-6 : 1e-13) * static_cast<double>(c.k + 4);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const double want = expected[i * ldc + j], got = actual[i * ldc + j];
      if (j >= c.n) {  // padding past the row's end is never written
        ASSERT_TRUE(std::isnan(got) ? std::isnan(want) : got == static_cast<T>(want))
            << variant.name << " wrote C[" << i << "][" << j << "] past n, " << Describe(c);
      } else {
        ASSERT_NEAR(got, want, tol) << variant.name << " C[" << i << "][" << j << "], " << Describe(c);
      }
    }
  }
}

std::vector<Case> Cases() {
  struct Shape {
    int64_t m, n, k;
  };
  // 1 and 3 (below every tile), 17 and 255 (partial tiles), 100 past kBlockM, 300 past kBlockK, 2100 past kBlockN;
  // depths 1 and 2 of a large product (Serial's outer-product path).
  const Shape shapes[] = {{1, 1, 1},     {3, 17, 1},    {17, 3, 255}, {255, 17, 3}, {17, 255, 17},
                          {1, 255, 17},  {100, 33, 17}, {64, 2100, 3}, {13, 40, 300}, {120, 400, 1},
                          {84, 255, 2}};
  std::vector<Case> cases;
  for (const Shape& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (double beta : {0.0, 1.0, 0.5})
        if (beta != 1.0 || t == 0)
          cases.push_back({(t & 1) != 0, (t & 2) != 0, s.m, s.n, s.k, beta == 1.0 ? 1.0 : -1.5, beta, t == 3 ? 0 : 5});
  cases.push_back({false, true, 130, 100, 300, 1.0, 0.0, 3});  // several blocks of every kind at once
  return cases;
}

TEST(FastGemm, FloatVariantsMatchReference) {
  for (const Variant<float>& v : Variants<float>())
    for (const Case& c : Cases()) ExpectMatchesReference<float>(c, v);
}

TEST(FastGemm, DoubleVariantsMatchReference) {
  for (const Variant<double>& v : Variants<double>())
    for (const Case& c : Cases()) ExpectMatchesReference<double>(c, v);
}

// The threaded entry point splits the rows (m > n) or the columns (n >= m) of C between threads; each
// part must equal the single-threaded product (up to rounding where tile edges move).
TEST(FastGemm, ThreadedSplitsMatchSerial) {
  ThreadPool pool(3);
  for (const Case& c : {Case{false, false, 300, 40, 100, 1.0, 0.0, 0}, Case{true, true, 40, 333, 100, 0.5, 1.0, 2}}) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const int64_t lda = (c.trans_a ? c.m : c.k) + c.pad, ldb = (c.trans_b ? c.k : c.n) + c.pad, ldc = c.n + c.pad;
    std::vector<float> a((c.trans_a ? c.k : c.m) * lda), b((c.trans_b ? c.n : c.k) * ldb), serial(c.m * ldc);
    for (float& x : a) x = uniform(rng);
    for (float& x : b) x = uniform(rng);
    for (float& x : serial) x = uniform(rng);
    std::vector<float> threaded = serial;
    gemm_detail::Serial(gemm_detail::Operands<float>{c.trans_a, c.trans_b, c.m, c.n, c.k, float(c.alpha), a.data(), lda,
                                                     b.data(), ldb, float(c.beta), serial.data(), ldc});
    const KernelBackend backend = ActiveKernelBackend();
    SetKernelBackend(KernelBackend::kReference);
    Gemm<float>(c.trans_a, c.trans_b, c.m, c.n, c.k, float(c.alpha), a.data(), lda, b.data(), ldb, float(c.beta),
                threaded.data(), ldc, &pool);
    SetKernelBackend(backend);
    for (size_t i = 0; i < serial.size(); ++i) ASSERT_NEAR(threaded[i], serial[i], 1e-5) << i << ", " << Describe(c);
  }
}

}  // namespace
}  // namespace edgetrain::testing
