// Vectorised float32 erf and exp for the Erf and Exp kernels, and a sigmoid for fused loops. Each has an AVX2 path and a portable
// path written for the auto-vectoriser (NEON, WASM SIMD128) that evaluates the same polynomials;
// the reference kernels (libm) stay the oracle. erf is within 2 ulp of the exact value, exp within 2.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define EDGETRAIN_VECTOR_MATH_AVX2 1
#endif

namespace edgetrain::vector_math {
namespace detail {

// exp: x = n ln2 + r, |r| <= ln2/2, exp(r) by Cephes' expf polynomial, 2^n applied in two halves so
// that results down to the subnormal range round once. x is clamped to [kExpLow, kExpHigh] first.
inline constexpr float kExpLow = -104.0f, kExpHigh = 88.8f;
inline constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// erf(x) = x + x P(x^2) for |x| < kErfSmall; 1 - exp(-x^2) Q(|x| - c) up to kErfOne, then +-1.
// Least-squares fits (relative error) to erf(x)/x and erfc(x) exp(x^2) on Chebyshev nodes.
inline constexpr float kErfSmall = 0.8f, kErfSplit = 2.0f, kErfOne = 3.92f;
inline constexpr float kErfMidCenter = 1.4f, kErfTailCenter = 2.96f;
inline constexpr float kErfP[8] = {1.283791661e-01f,  -3.761263788e-01f, 1.128379107e-01f,  -2.686607651e-02f,
                                   5.223400425e-03f,  -8.528981125e-04f, 1.169169045e-04f,  -1.126931602e-05f};
inline constexpr float kErfMid[11] = {3.387435377e-01f, -1.798972487e-01f, 8.688738197e-02f, -3.883656859e-02f,
                                      1.625808328e-02f, -6.430720910e-03f, 2.418599790e-03f, -8.659432060e-04f,
                                      2.997827251e-04f, -1.102607639e-04f, 3.447798736e-05f};
inline constexpr float kErfTail[11] = {1.812017411e-01f, -5.566482991e-02f, 1.643385366e-02f, -4.680399317e-03f,
                                       1.289919135e-03f, -3.449798969e-04f, 8.967205940e-05f, -2.251878868e-05f,
                                       5.586210591e-06f, -1.558147460e-06f, 3.585280126e-07f};

// The portable code selects on integer bit patterns: GCC does not if-convert (and so does not
// vectorise) selects on float comparisons, which may trap.
inline uint32_t Bits(float v) { return std::bit_cast<uint32_t>(v); }
inline float Float(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t Select(bool c, uint32_t a, uint32_t b) { return c ? a : b; }
inline constexpr uint32_t kSignBit = 0x80000000u, kInfBits = 0x7f800000u;

inline float ExpOne(float x) {
  const uint32_t bits = Bits(x), mag = bits & ~kSignBit;
  const bool negative = (bits & kSignBit) != 0;
  float c = Float(Select(negative & (mag > Bits(-kExpLow)), Bits(kExpLow), bits));
  c = Float(Select(!negative & (mag > Bits(kExpHigh)), Bits(kExpHigh), Bits(c)));
  const float shifted = c * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  const int32_t ni = static_cast<int32_t>(Bits(shifted) - Bits(kRoundMagic));
  float r = c - n * kLn2High;
  r = r - n * kLn2Low;
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = p * r + kExpPoly[i];
  p = p * r * r + (r + 1.0f);
  const int32_t half = ni >> 1;
  const float s1 = Float(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = Float(static_cast<uint32_t>(ni - half + 127) << 23);
  return Float(Select(mag > kInfBits, bits, Bits(p * s1 * s2)));
}

inline float ErfOne(float x) {
  const uint32_t bits = Bits(x), mag = bits & ~kSignBit;
  const float a = Float(mag), t = a * a;
  float p = kErfP[7];
  for (int i = 6; i >= 0; --i) p = p * t + kErfP[i];
  const float small = x * p + x;
  const float u_mid = a - kErfMidCenter, u_tail = a - kErfTailCenter;
  float q_mid = kErfMid[10], q_tail = kErfTail[10];
  for (int i = 9; i >= 0; --i) {
    q_mid = q_mid * u_mid + kErfMid[i];
    q_tail = q_tail * u_tail + kErfTail[i];
  }
  const float q = Float(Select(mag >= Bits(kErfSplit), Bits(q_tail), Bits(q_mid)));
  const float big = 1.0f - ExpOne(-t) * q;
  const uint32_t big_bits = Select(mag >= Bits(kErfOne), Bits(1.0f), Bits(big)) | (bits & kSignBit);
  return Float(Select(mag > kInfBits, bits, Select(mag < Bits(kErfSmall), Bits(small), big_bits)));
}

}  // namespace detail

// Sigmoid(v) split by sign as the reference does: e = exp(-|v|) (Cephes' polynomial, -|v| clamped at -87.3 so that
// 2^n stays a normal float), then 1 / (1 + e), times e below 0. Written for the auto-vectoriser (omp simd loops).
inline float SigmoidOne(float v) {
  using namespace detail;
  const uint32_t bits = Bits(v), mag = bits & ~kSignBit;
  // The clamp as an integer min: a select there lets GCC thread the constant case into a branch.
  const float t = Float(std::min(mag, Bits(87.3f)) | kSignBit);
  const float shifted = t * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  const int32_t ni = static_cast<int32_t>(Bits(shifted) - Bits(kRoundMagic));
  float r = t - n * kLn2High;
  r = r - n * kLn2Low;
  float p = kExpPoly[0] * r + kExpPoly[1];  // unrolled by hand: a loop here keeps GCC -O2 from vectorising callers
  p = p * r + kExpPoly[2];
  p = p * r + kExpPoly[3];
  p = p * r + kExpPoly[4];
  p = p * r + kExpPoly[5];
  p = p * r * r + (r + 1.0f);
  const float e = p * Float(static_cast<uint32_t>(ni + 127) << 23);
  const float s = 1.0f / (1.0f + e);
  // Selects as bit masks: GCC sinks a multiply under a ternary into a branch, which keeps the loop scalar.
  const uint32_t negative = 0u - (bits >> 31), nan = 0u - static_cast<uint32_t>(mag > kInfBits);
  const uint32_t sigmoid = (Bits(e * s) & negative) | (Bits(s) & ~negative);
  return Float((bits & nan) | (sigmoid & ~nan));
}

// y[i] = erf(x[i]) / exp(x[i]) for i in [0, n), portable code.
inline void ErfRangePortable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = detail::ErfOne(x[i]);
}
inline void ExpRangePortable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = detail::ExpOne(x[i]);
}

#if defined(EDGETRAIN_VECTOR_MATH_AVX2)
namespace detail {

__attribute__((target("avx2,fma"))) inline __m256 ExpAvx2(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(kExpLow), x);  // maxps/minps return their second operand on NaN
  x = _mm256_min_ps(_mm256_set1_ps(kExpHigh), x);
  const __m256 shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRoundMagic));
  const __m256 n = _mm256_sub_ps(shifted, _mm256_set1_ps(kRoundMagic));
  const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_castps_si256(_mm256_set1_ps(kRoundMagic)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i half = _mm256_srai_epi32(ni, 1), bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

__attribute__((target("avx2,fma"))) inline __m256 ErfAvx2(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign, x), t = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(kErfP[7]);
  for (int i = 6; i >= 0; --i) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kErfP[i]));
  const __m256 small = _mm256_fmadd_ps(x, p, x);
  const __m256 tail = _mm256_cmp_ps(a, _mm256_set1_ps(kErfSplit), _CMP_GE_OQ);
  const __m256 u =
      _mm256_sub_ps(a, _mm256_blendv_ps(_mm256_set1_ps(kErfMidCenter), _mm256_set1_ps(kErfTailCenter), tail));
  __m256 q = _mm256_blendv_ps(_mm256_set1_ps(kErfMid[10]), _mm256_set1_ps(kErfTail[10]), tail);
  for (int i = 9; i >= 0; --i)
    q = _mm256_fmadd_ps(q, u, _mm256_blendv_ps(_mm256_set1_ps(kErfMid[i]), _mm256_set1_ps(kErfTail[i]), tail));
  __m256 big = _mm256_fnmadd_ps(ExpAvx2(_mm256_xor_ps(t, sign)), q, _mm256_set1_ps(1.0f));
  big = _mm256_blendv_ps(big, _mm256_set1_ps(1.0f), _mm256_cmp_ps(a, _mm256_set1_ps(kErfOne), _CMP_GE_OQ));
  big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(kErfSmall), _CMP_LT_OQ));
}

}  // namespace detail

// The same on AVX2 and FMA (the caller checks CpuHasAvx2Fma); the tail runs the portable code.
__attribute__((target("avx2,fma"))) inline void ErfRangeAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, detail::ErfAvx2(_mm256_loadu_ps(x + i)));
  ErfRangePortable(x + i, y + i, n - i);
}
__attribute__((target("avx2,fma"))) inline void ExpRangeAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, detail::ExpAvx2(_mm256_loadu_ps(x + i)));
  ExpRangePortable(x + i, y + i, n - i);
}
#endif

}  // namespace edgetrain::vector_math
