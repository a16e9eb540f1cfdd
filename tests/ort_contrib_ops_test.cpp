// ONNX Runtime's contrib operators of optimized training graphs (src/ops/ort_contrib.cpp): one row per operator
// configuration, run as a one-node model and compared with a float64 reference written out here, or, for a
// gradient, with central differences through the forward node. Error rows check that bad inputs fail with an
// edgetrain::Error naming the node.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/kernel.hpp"
#include "ops/registry.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain {
namespace {

using testing::CentralDifferenceVjp;
using testing::Doubles;
using testing::ExpectRowError;
using testing::ExpectRowValues;
using testing::ExpectTensorNear;
using testing::kOneNodeName;
using testing::OneNode;
using testing::OneNodeFunction;
using testing::OpCase;
using testing::RandomTensor;
using testing::RowName;
using testing::RunOneNode;

constexpr const char* kMs = kMicrosoftDomain;

Tensor Ints(std::vector<int64_t> values) {
  return Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())});
}
Tensor Bool(bool value) { return Tensor::FromVector<bool>({value}, {}); }

Tensor ToFloat32(const Tensor& t) {
  std::vector<float> values;
  for (double v : t.ToDoubleVector()) values.push_back(static_cast<float>(v));
  return Tensor::FromVector<float>(values, t.shape());
}

Tensor Map(const Tensor& x, const std::function<double(double, int64_t)>& f) {
  std::vector<double> values = x.ToDoubleVector();
  for (size_t i = 0; i < values.size(); ++i) values[i] = f(values[i], static_cast<int64_t>(i));
  return Doubles(values, x.shape());
}

double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double FastGelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double QuickGelu(double x, double alpha) { return x / (1.0 + std::exp(-alpha * x)); }

// Rows of `cols` values normalised: (v - mean) / sqrt(var + eps) * gamma + beta (mean 0 when !centered);
// returns {y, mean, inv_std} with the statistics shaped `stat_shape`.
std::vector<Tensor> NormRows(const Tensor& x, int64_t cols, bool centered, double epsilon,
                             const std::vector<double>& gamma, const std::vector<double>& beta,
                             const Shape& stat_shape) {
  const std::vector<double> v = x.ToDoubleVector();
  const int64_t rows = x.numel() / cols;
  std::vector<double> y(v.size()), means(rows), inv(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (centered) {
      for (int64_t c = 0; c < cols; ++c) mean += v[r * cols + c];
      mean /= static_cast<double>(cols);
    }
    for (int64_t c = 0; c < cols; ++c) var += (v[r * cols + c] - mean) * (v[r * cols + c] - mean);
    means[r] = mean;
    inv[r] = 1.0 / std::sqrt(var / static_cast<double>(cols) + epsilon);
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = (v[r * cols + c] - mean) * inv[r] * gamma[c] + (beta.empty() ? 0.0 : beta[c]);
  }
  return {Doubles(y, x.shape()), Doubles(means, stat_shape), Doubles(inv, stat_shape)};
}

// d/d input `wrt` of sum(dy * output `output` of `node`), by central differences through edgetrain's kernel.
Tensor Vjp(const OneNode& node, size_t wrt, const Tensor& dy, size_t output = 0) {
  return CentralDifferenceVjp(OneNodeFunction(node, wrt, output), node.inputs[wrt].tensor, dy);
}

std::vector<OpCase> GeluRows() {
  std::vector<OpCase> rows;
  const Tensor x = RandomTensor({3, 4}, 1, -3.0, 3.0), bias = RandomTensor({4}, 2), dy = RandomTensor({3, 4}, 3);
  const std::vector<double> b = bias.ToDoubleVector();
  rows.push_back({"Gelu", {"Gelu", kMs, {x}}, [=] { return std::vector<Tensor>{Map(x, [](double v, int64_t) {
                                                      return Gelu(v);
                                                    })}; }});
  rows.push_back({"Gelu_Float32", {"Gelu", kMs, {ToFloat32(x)}}, [=] {
                    return std::vector<Tensor>{ToFloat32(Map(x, [](double v, int64_t) { return Gelu(v); }))};
                  }});
  rows.push_back({"FastGelu", {"FastGelu", kMs, {x}}, [=] {
                    return std::vector<Tensor>{Map(x, [](double v, int64_t) { return FastGelu(v); })};
                  }});
  rows.push_back({"FastGelu_Bias", {"FastGelu", kMs, {x, bias}}, [=] {
                    return std::vector<Tensor>{Map(x, [b](double v, int64_t i) { return FastGelu(v + b[i % 4]); })};
                  }});
  rows.push_back({"BiasGelu", {"BiasGelu", kMs, {x, bias}}, [=] {
                    return std::vector<Tensor>{Map(x, [b](double v, int64_t i) { return Gelu(v + b[i % 4]); })};
                  }});
  rows.push_back({"QuickGelu_DefaultAlpha", {"QuickGelu", kMs, {x}}, [=] {
                    return std::vector<Tensor>{Map(x, [](double v, int64_t) { return QuickGelu(v, 1.702); })};
                  }});
  rows.push_back({"QuickGelu_Alpha1", {"QuickGelu", kMs, {x}, {{"alpha", Attribute::Float(1.0f)}}}, [=] {
                    return std::vector<Tensor>{Map(x, [](double v, int64_t) { return QuickGelu(v, 1.0); })};
                  }});
  // Gradients against central differences through the forward nodes above.
  const OneNode quick{"QuickGelu", kMs, {x}}, quick2{"QuickGelu", kMs, {x}, {{"alpha", Attribute::Float(2.0f)}}};
  rows.push_back({"QuickGeluGrad_DefaultAlpha", {"QuickGeluGrad", kMs, {dy, x}},
                  [=] { return std::vector<Tensor>{Vjp(quick, 0, dy)}; }});
  rows.push_back({"QuickGeluGrad_Alpha2", {"QuickGeluGrad", kMs, {dy, x}, {{"alpha", Attribute::Float(2.0f)}}},
                  [=] { return std::vector<Tensor>{Vjp(quick2, 0, dy)}; }});
  rows.push_back({"GeluGrad_OfGelu", {"GeluGrad", kMs, {dy, x}},
                  [=] { return std::vector<Tensor>{Vjp(OneNode{"Gelu", kMs, {x}}, 0, dy)}; }});
  rows.push_back({"FastGeluGrad_OfFastGelu", {"FastGeluGrad", kMs, {dy, x}},
                  [=] { return std::vector<Tensor>{Vjp(OneNode{"FastGelu", kMs, {x}}, 0, dy)}; }});
  rows.push_back({"BiasGeluGrad_dX_OfBiasGelu", {"BiasGeluGrad_dX", kMs, {dy, x, bias}},
                  [=] { return std::vector<Tensor>{Vjp(OneNode{"BiasGelu", kMs, {x, bias}}, 0, dy)}; }});
  rows.push_back({"BiasFastGeluGrad_dX_OfFastGelu", {"BiasFastGeluGrad_dX", kMs, {dy, x, bias}},
                  [=] { return std::vector<Tensor>{Vjp(OneNode{"FastGelu", kMs, {x, bias}}, 0, dy)}; }});
  return rows;
}

std::vector<OpCase> ConcatSplitRows() {
  std::vector<OpCase> rows;
  const Tensor a = RandomTensor({2, 3}, 10), b = RandomTensor({2, 1}, 11), c = RandomTensor({2, 2}, 12);
  const std::vector<double> av = a.ToDoubleVector(), bv = b.ToDoubleVector(), cv = c.ToDoubleVector();
  std::vector<double> joined;
  for (int64_t r = 0; r < 2; ++r) {
    joined.insert(joined.end(), av.begin() + r * 3, av.begin() + r * 3 + 3);
    joined.push_back(bv[r]);
    joined.insert(joined.end(), cv.begin() + r * 2, cv.begin() + r * 2 + 2);
  }
  const Tensor whole = Doubles(joined, {2, 6});
  OneNode concat{"ConcatTraining", kMs, {a, b, c}, {{"axis", Attribute::Int(1)}}, {true, true}};
  rows.push_back({"ConcatTraining_Axis1_Lengths", concat, [=] { return std::vector<Tensor>{whole, Ints({3, 1, 2})}; }});
  OneNode concat_last{"ConcatTraining", kMs, {a, b, c}, {{"axis", Attribute::Int(-1)}}};
  rows.push_back({"ConcatTraining_NegativeAxis", concat_last, [=] { return std::vector<Tensor>{whole}; }});
  const Tensor top = RandomTensor({1, 3}, 13);
  std::vector<double> stacked = top.ToDoubleVector();
  stacked.insert(stacked.end(), av.begin(), av.end());
  rows.push_back({"ConcatTraining_Axis0",
                  {"ConcatTraining", kMs, {top, a}, {{"axis", Attribute::Int(0)}}, {true, true}},
                  [=] { return std::vector<Tensor>{Doubles(stacked, {3, 3}), Ints({1, 2})}; }});
  // SplitTraining is ConcatTraining's gradient: it cuts dY back into the inputs' lengths.
  rows.push_back({"SplitTraining_Lengths",
                  {"SplitTraining", kMs, {whole, Ints({3, 1, 2})}, {{"axis", Attribute::Int(1)}}, {true, true, true}},
                  [=] { return std::vector<Tensor>{a, b, c}; }});
  rows.push_back({"SplitTraining_Equal", {"SplitTraining", kMs, {whole}, {{"axis", Attribute::Int(1)}}, {true, true}},
                  [=] {
                    std::vector<double> left, right;
                    for (int64_t r = 0; r < 2; ++r)
                      for (int64_t k = 0; k < 6; ++k) (k < 3 ? left : right).push_back(joined[r * 6 + k]);
                    return std::vector<Tensor>{Doubles(left, {2, 3}), Doubles(right, {2, 3})};
                  }});
  const Tensor dy = RandomTensor({2, 6}, 14);
  rows.push_back({"SplitTraining_IsConcatTrainingGradient",
                  {"SplitTraining", kMs, {dy, Ints({3, 1, 2})}, {{"axis", Attribute::Int(1)}}, {true, true, true}},
                  [=] {
                    return std::vector<Tensor>{Vjp(concat_last, 0, dy), Vjp(concat_last, 1, dy),
                                               Vjp(concat_last, 2, dy)};
                  }});
  return rows;
}

std::vector<OpCase> NormalizationRows() {
  std::vector<OpCase> rows;
  const Tensor x = RandomTensor({2, 3, 4}, 20), skip = RandomTensor({2, 3, 4}, 21), skip2d = RandomTensor({3, 4}, 22);
  const Tensor gamma = RandomTensor({4}, 23, 0.5, 1.5), beta = RandomTensor({4}, 24), bias = RandomTensor({4}, 25);
  const Tensor scale12 = RandomTensor({3, 4}, 26, 0.5, 1.5), dy = RandomTensor({2, 3, 4}, 27);
  const std::vector<double> g = gamma.ToDoubleVector(), bt = beta.ToDoubleVector(), bs = bias.ToDoubleVector();
  const Shape stats{2, 3, 1};

  for (const std::string domain : {"", kMs}) {
    const std::string suffix = domain.empty() ? "_OnnxDomain" : "_Microsoft";
    rows.push_back({"SimplifiedLayerNormalization" + suffix,
                    {"SimplifiedLayerNormalization", domain, {x, gamma}, {}, {true, true}}, [=] {
                      std::vector<Tensor> r = NormRows(x, 4, false, 1e-5, g, {}, stats);
                      return std::vector<Tensor>{r[0], ToFloat32(r[2])};
                    }});
  }
  rows.push_back({"SimplifiedLayerNormalization_Axis1_Stash64",
                  {"SimplifiedLayerNormalization",
                   "",
                   {x, scale12},
                   {{"axis", Attribute::Int(1)},
                    {"epsilon", Attribute::Float(0.01f)},
                    {"stash_type", Attribute::Int(11)}},
                   {true, true}},
                  [=] {
                    std::vector<Tensor> r =
                        NormRows(x, 12, false, static_cast<double>(0.01f), scale12.ToDoubleVector(), {}, {2, 1, 1});
                    return std::vector<Tensor>{r[0], r[2]};
                  }});
  // The existing gradient, fed by this forward op's statistic, against central differences through it.
  const Tensor inv_std = NormRows(x, 4, false, 1e-5, g, {}, stats)[2];
  const OneNode simplified{"SimplifiedLayerNormalization", "", {x, gamma}};
  rows.push_back({"SimplifiedLayerNormalizationGrad_OfForward",
                  {"SimplifiedLayerNormalizationGrad", kMs, {dy, x, gamma, inv_std}, {}, {true, true}},
                  [=] { return std::vector<Tensor>{Vjp(simplified, 0, dy), Vjp(simplified, 1, dy)}; },
                  1e-5});

  std::vector<double> sum = x.ToDoubleVector();
  const std::vector<double> s = skip.ToDoubleVector(), s2 = skip2d.ToDoubleVector();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += s[i] + bs[i % 4];
  const Tensor summed = Doubles(sum, x.shape());
  rows.push_back({"SkipLayerNormalization_AllOutputs",
                  {"SkipLayerNormalization",
                   kMs,
                   {x, skip, gamma, beta, bias},
                   {{"epsilon", Attribute::Float(1e-5f)}},
                   {true, true, true, true}},
                  [=] {
                    std::vector<Tensor> r = NormRows(summed, 4, true, static_cast<double>(1e-5f), g, bt, stats);
                    return std::vector<Tensor>{r[0], ToFloat32(r[1]), ToFloat32(r[2]), summed};
                  }});
  rows.push_back({"SkipLayerNormalization_BroadcastSkip_DefaultEpsilon",
                  {"SkipLayerNormalization", kMs, {x, skip2d, gamma}},
                  [=] {
                    const Tensor plain = Map(x, [&](double v, int64_t i) { return v + s2[i % 12]; });
                    return std::vector<Tensor>{NormRows(plain, 4, true, static_cast<double>(1e-12f), g, {}, stats)[0]};
                  }});
  rows.push_back({"SkipSimplifiedLayerNormalization_Bias",
                  {"SkipSimplifiedLayerNormalization",
                   kMs,
                   {x, skip, gamma, bias},
                   {{"epsilon", Attribute::Float(1e-5f)}},
                   {true, false, true, true}},
                  [=] {
                    std::vector<Tensor> r = NormRows(summed, 4, false, static_cast<double>(1e-5f), g, {}, stats);
                    return std::vector<Tensor>{r[0], ToFloat32(r[2]), summed};
                  }});
  return rows;
}

std::vector<OpCase> BiasDropoutRows() {
  std::vector<OpCase> rows;
  const Tensor x = RandomTensor({3, 4}, 30), bias = RandomTensor({4}, 31), residual = RandomTensor({3, 4}, 32);
  const std::vector<double> b = bias.ToDoubleVector(), r = residual.ToDoubleVector();
  const Tensor all_kept = Tensor::FromVector<bool>(std::vector<bool>(12, true), {3, 4});
  rows.push_back({"BiasDropout_Eval_Residual",
                  {"BiasDropout", kMs, {x, bias, residual}, {}, {true, true}},
                  [=] {
                    return std::vector<Tensor>{Map(x, [&](double v, int64_t i) { return v + b[i % 4] + r[i]; }),
                                               all_kept};
                  }});
  rows.push_back({"BiasDropout_TrainingRatio0",
                  {"BiasDropout", kMs, {x, bias, Tensor(), Doubles({0.0}, {}), Bool(true)}},
                  [=] { return std::vector<Tensor>{Map(x, [&](double v, int64_t i) { return v + b[i % 4]; })}; }});
  return rows;
}

std::vector<OpCase> AllRows() {
  std::vector<OpCase> rows;
  for (auto make : {GeluRows, ConcatSplitRows, NormalizationRows, BiasDropoutRows})
    for (OpCase& row : make()) rows.push_back(std::move(row));
  return rows;
}

class OrtContribOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(OrtContribOp, MatchesFloat64Reference) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, OrtContribOp,
                         ::testing::ValuesIn(testing::RowsWith({testing::OrtContribCases}, testing::HasExpectedValues)),
                         RowName());

// ---- BiasDropout in training mode: the mask drives the output and DropoutGrad, and a seed repeats it ----

TEST(OrtBiasDropout, TrainingMaskDrivesOutputAndGradient) {
  ASSERT_FALSE(OpRegistry::Global().Find(kMs, "BiasDropout", 1)->deterministic);
  const double ratio = 0.4;
  const Tensor x = RandomTensor({8, 16}, 40), bias = RandomTensor({16}, 41), residual = RandomTensor({8, 16}, 42);
  const OneNode node{"BiasDropout", kMs, {x, bias, residual, Doubles({ratio}, {}), Bool(true)},
                     {{"seed", Attribute::Int(7)}}, {true, true}};
  const std::vector<Tensor> out = RunOneNode(node), again = RunOneNode(node);
  ASSERT_EQ(out[1].dtype(), DataType::kBool);
  const std::vector<double> xs = x.ToDoubleVector(), bs = bias.ToDoubleVector(), rs = residual.ToDoubleVector(),
                            ys = out[0].ToDoubleVector();
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = out[1].data<bool>()[i];
    kept += keep;
    EXPECT_EQ(keep, again[1].data<bool>()[i]) << "the seed repeats the mask, element " << i;
    EXPECT_NEAR(ys[i], (keep ? (xs[i] + bs[i % 16]) / (1 - ratio) : 0.0) + rs[i], 1e-12) << "element " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.numel());
  const Tensor dy = RandomTensor({8, 16}, 43);
  const Tensor dx = RunOneNode({"DropoutGrad", kMs, {dy, out[1], Doubles({ratio}, {}), Bool(true)}})[0];
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(dx.ToDoubleVector()[i], out[1].data<bool>()[i] ? dy.ToDoubleVector()[i] / (1 - ratio) : 0.0, 1e-12);
}

// ---- error rows ----

std::vector<OpCase> ErrorRows() {
  const Tensor m34 = RandomTensor({3, 4}, 100), m43 = RandomTensor({4, 3}, 101), v3 = RandomTensor({3}, 102);
  const Tensor v4 = RandomTensor({4}, 103), cube = RandomTensor({2, 3, 4}, 104);
  return {
      {"QuickGeluGrad_ShapeMismatch", {"QuickGeluGrad", kMs, {m34, m43}}, ErrorCode::kInvalidArgument, "must match X"},
      {"FastGelu_BadBias", {"FastGelu", kMs, {m34, v3}}, ErrorCode::kInvalidArgument, "1-D over the last dim"},
      {"BiasGelu_MissingBias", {"BiasGelu", kMs, {m34}}, ErrorCode::kInvalidModel, "expects 2 to 2 inputs"},
      {"ConcatTraining_NoAxis", {"ConcatTraining", kMs, {m34, m34}}, ErrorCode::kInvalidModel,
       "attribute 'axis' is required"},
      {"ConcatTraining_Mismatch", {"ConcatTraining", kMs, {m34, m43}, {{"axis", Attribute::Int(0)}}},
       ErrorCode::kInvalidArgument, "does not match input 0"},
      {"ConcatTraining_AxisOutOfRange", {"ConcatTraining", kMs, {m34, m34}, {{"axis", Attribute::Int(2)}}},
       ErrorCode::kInvalidArgument, "axis"},
      {"SplitTraining_BadLengths",
       {"SplitTraining", kMs, {m34, Ints({1, 2})}, {{"axis", Attribute::Int(1)}}, {true, true}},
       ErrorCode::kInvalidArgument, "summing to dim 4"},
      {"SplitTraining_Unequal", {"SplitTraining", kMs, {m34}, {{"axis", Attribute::Int(0)}}, {true, true}},
       ErrorCode::kInvalidArgument, "does not split equally"},
      {"SimplifiedLayerNormalization_BadScale", {"SimplifiedLayerNormalization", "", {m34, v3}},
       ErrorCode::kInvalidArgument, "must hold the normalized dims"},
      {"SimplifiedLayerNormalization_StashType",
       {"SimplifiedLayerNormalization", "", {m34, v4}, {{"stash_type", Attribute::Int(10)}}},
       ErrorCode::kNotImplemented, "stash_type 10"},
      {"SkipLayerNormalization_BadSkip", {"SkipLayerNormalization", kMs, {cube, m43, v4}}, ErrorCode::kInvalidArgument,
       "input 'skip'"},
      {"SkipLayerNormalization_Rank1", {"SkipLayerNormalization", kMs, {v4, v4, v4}}, ErrorCode::kInvalidArgument,
       "rank >= 2"},
      {"SkipLayerNormalization_BadGamma", {"SkipLayerNormalization", kMs, {cube, cube, v3}},
       ErrorCode::kInvalidArgument, "input 'gamma'"},
      {"BiasDropout_Ratio1",
       {"BiasDropout", kMs, {m34, v4, Tensor(), Doubles({1.0}, {}), Bool(true)}},
       ErrorCode::kInvalidArgument, "outside [0, 1)"},
      {"BiasDropout_ResidualShape", {"BiasDropout", kMs, {m34, v4, m43}}, ErrorCode::kInvalidArgument,
       "input 'residual'"},
  };
}

class OrtContribOpError : public ::testing::TestWithParam<OpCase> {};

TEST_P(OrtContribOpError, NamesTheNode) { ExpectRowError(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, OrtContribOpError,
                         ::testing::ValuesIn(testing::RowsWith({testing::OrtContribCases}, testing::HasError)),
                         RowName());

}  // namespace

std::vector<testing::OpCase> testing::OrtContribCases() { return Concat(AllRows(), ErrorRows()); }

}  // namespace edgetrain
