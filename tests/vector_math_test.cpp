// The float32 erf and exp of ops/vector_math.hpp, AVX2 and portable paths, against float64 libm:
// within 2 ulp over the whole range (both polynomial pieces, their seams, subnormal results),
// exact on the special values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu_features.hpp"
#include "ops/vector_math.hpp"

namespace edgetrain::vector_math {
namespace {

using Range = std::function<void(const float*, float*, int64_t)>;

struct Path {
  std::string name;
  Range erf, exp;
};

std::vector<Path> Paths() {
  std::vector<Path> paths = {{"portable", ErfRangePortable, ExpRangePortable}};
#if defined(EDGETRAIN_VECTOR_MATH_AVX2)
  if (CpuHasAvx2Fma()) paths.push_back({"avx2", ErfRangeAvx2, ExpRangeAvx2});
#endif
  return paths;
}

// Error in units of the float spacing at the exact value (the smallest subnormal below that).
double UlpError(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double spacing = std::nextafter(std::fabs(rounded), std::numeric_limits<float>::infinity()) - std::fabs(rounded);
  return std::fabs(static_cast<double>(got) - exact) / std::max<double>(spacing, std::numeric_limits<float>::denorm_min());
}

// Evenly spaced points, the seams of the piecewise fits and their float neighbours; an odd count so
// that the vector loops leave a tail.
std::vector<float> Sweep(double low, double high, double step, std::vector<float> seams) {
  std::vector<float> x;
  for (double v = low; v <= high; v += step) x.push_back(static_cast<float>(v));
  for (float s : seams)
    for (float v : {s, -s})
      for (float n = v, k = 0; k < 4; ++k, n = std::nextafter(n, 0.0f)) x.push_back(n);
  if (x.size() % 2 == 0) x.push_back(static_cast<float>(high));
  return x;
}

void ExpectWithinUlp(const Range& range, const std::vector<float>& x, double (*exact)(double), double limit,
                     const std::string& what) {
  std::vector<float> y(x.size());
  range(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = exact(x[i]);
    if (std::fabs(e) > std::numeric_limits<float>::max()) {
      EXPECT_TRUE(std::isinf(y[i]) && y[i] > 0) << what << " at " << x[i] << ": " << y[i];
      continue;
    }
    const double err = UlpError(y[i], e);
    if (err > worst) worst = err, worst_x = x[i];
  }
  EXPECT_LE(worst, limit) << what << ": worst at x = " << worst_x;
  EXPECT_GT(worst, 0.0) << what << ": no rounding error at all means the sweep tested nothing";
}

TEST(VectorMath, ErfWithinTwoUlp) {
  const std::vector<float> x = Sweep(-6.0, 6.0, 3.7e-5, {detail::kErfSmall, detail::kErfSplit, detail::kErfOne});
  for (const Path& p : Paths()) ExpectWithinUlp(p.erf, x, [](double v) { return std::erf(v); }, 2.0, "erf " + p.name);
}

TEST(VectorMath, ErfOfTinyArgumentsKeepsRelativeAccuracy) {
  std::vector<float> x;
  for (float v = 1e-40f; v < 1e-2f; v *= 1.37f) x.push_back(v), x.push_back(-v);
  x.push_back(0.5f);
  for (const Path& p : Paths()) ExpectWithinUlp(p.erf, x, [](double v) { return std::erf(v); }, 2.0, "erf " + p.name);
}

TEST(VectorMath, ExpWithinTwoUlpDownToSubnormals) {
  const std::vector<float> x = Sweep(-110.0, 90.0, 1.3e-3, {88.72f, 88.73f, 87.3f, 103.9f});
  for (const Path& p : Paths()) ExpectWithinUlp(p.exp, x, [](double v) { return std::exp(v); }, 2.0, "exp " + p.name);
}

TEST(VectorMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {inf, -inf, nan, -nan, 0.0f, -0.0f, 1e-45f, 200.0f, -200.0f};
  for (const Path& p : Paths()) {
    std::vector<float> e(x.size()), x_exp(x.size());
    p.erf(x.data(), e.data(), static_cast<int64_t>(x.size()));
    p.exp(x.data(), x_exp.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want_erf = std::erf(x[i]), want_exp = std::exp(x[i]);
      if (std::isnan(want_erf)) {
        EXPECT_TRUE(std::isnan(e[i]) && std::isnan(x_exp[i])) << p.name << " at " << x[i];
        continue;
      }
      EXPECT_EQ(e[i], want_erf) << p.name << " erf at " << x[i];
      EXPECT_EQ(std::signbit(e[i]), std::signbit(want_erf)) << p.name << " erf sign at " << x[i];
      EXPECT_EQ(x_exp[i], want_exp) << p.name << " exp at " << x[i];
    }
  }
}

// Both paths evaluate the same polynomials: they differ only by FMA contraction.
TEST(VectorMath, PathsAgree) {
  const std::vector<float> x = Sweep(-5.0, 5.0, 1.1e-3, {});
  std::vector<std::vector<float>> outs;
  for (const Path& p : Paths()) {
    outs.emplace_back(x.size());
    p.erf(x.data(), outs.back().data(), static_cast<int64_t>(x.size()));
  }
  for (size_t k = 1; k < outs.size(); ++k)
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_LE(UlpError(outs[k][i], outs[0][i]), 2.0) << Paths()[k].name << " at " << x[i];
}

// SigmoidOne, the sigmoid that fused loops (BatchNormalizationSilu) inline: within 3 ulp of float64 where exp(-|v|)
// is above the clamp at -87.3, and below it (the result there is under 1.3e-38) off by no more than that.
TEST(VectorMath, SigmoidWithinThreeUlp) {
  const std::vector<float> x = Sweep(-95.0, 95.0, 7.3e-4, {87.3f, 87.29f, 0.5f});
  std::vector<float> y(x.size());
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) y[i] = SigmoidOne(x[i]);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    if (x[i] < -87.25f) {
      EXPECT_LE(std::fabs(y[i] - exact), 1.3e-38) << "at " << x[i];
      continue;
    }
    worst = std::max(worst, UlpError(y[i], exact));
    ASSERT_LE(UlpError(y[i], exact), 3.0) << "at " << x[i] << ": " << y[i] << " against " << exact;
  }
  EXPECT_GT(worst, 0.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(SigmoidOne(nan)));
  EXPECT_TRUE(std::isnan(SigmoidOne(-nan)));
  EXPECT_EQ(SigmoidOne(inf), 1.0f);
  EXPECT_LE(SigmoidOne(-inf), 1.3e-38f);
  EXPECT_GE(SigmoidOne(-inf), 0.0f);
  EXPECT_EQ(SigmoidOne(0.0f), 0.5f);
  EXPECT_EQ(SigmoidOne(-0.0f), 0.5f);
}

}  // namespace
}  // namespace edgetrain::vector_math
