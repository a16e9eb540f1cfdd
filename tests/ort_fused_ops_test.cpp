// ONNX Runtime's fused and training operators (src/ops/ort_fused.cpp), one row per configuration,
// each against an independent float64 reference: the operator's formula written out here, or
// central differences of the forward ONNX operator run through edgetrain's own kernels. Error rows
// check that a bad input fails with an edgetrain::Error naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ort_op_test_util.hpp"

namespace edgetrain {
namespace {

using testing::CentralDifferenceVjp;
using testing::Doubles;
using testing::ErrorRow;
using testing::ExpectTensorNear;
using testing::ExpectValuesNear;
using testing::kOneNodeName;
using testing::OneNode;
using testing::OneNodeFunction;
using testing::OnnxNode;
using testing::RandomTensor;
using testing::RandomValues;
using testing::RowName;
using testing::RunOneNode;
using testing::RunOneNodeValues;
using testing::SequenceInput;

// ---------------------------------------------------------------------------------------------
// FusedMatMul / TransposeMatMul against numpy matmul of the explicitly transposed operands

struct MatMulCase {
  std::string name;
  Shape a, b;
  int trans_a = 0, trans_b = 0, trans_batch_a = 0, trans_batch_b = 0;
  double alpha = 1.0;
  std::string op = "FusedMatMul";
  DataType dtype = DataType::kFloat64;
};
void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

// values of `shape` permuted: out[i0..] = in[i_perm...]
std::vector<double> Permute(const std::vector<double>& in, const Shape& shape, const std::vector<size_t>& perm,
                            Shape& out_shape) {
  out_shape.clear();
  for (size_t p : perm) out_shape.push_back(shape[p]);
  const std::vector<int64_t> strides = RowMajorStrides(shape);
  std::vector<double> out(in.size());
  std::vector<int64_t> index(out_shape.size(), 0);
  for (size_t o = 0; o < out.size(); ++o) {
    int64_t offset = 0;
    for (size_t d = 0; d < perm.size(); ++d) offset += index[d] * strides[perm[d]];
    out[o] = in[static_cast<size_t>(offset)];
    for (size_t d = index.size(); d-- > 0;)
      if (++index[d] < out_shape[d])
        break;
      else
        index[d] = 0;
  }
  return out;
}

// The operand as FusedMatMul reads it: transBatch moves dim 0 in front of the last dim, trans swaps the last two.
std::vector<double> Logical(const std::vector<double>& raw, const Shape& shape, bool trans, bool trans_batch,
                            Shape& out_shape) {
  if (shape.size() < 2) {
    out_shape = shape;
    return raw;
  }
  std::vector<size_t> perm;
  const size_t r = shape.size();
  if (trans_batch) {
    for (size_t d = 1; d + 1 < r; ++d) perm.push_back(d);
    perm.push_back(0);
  } else {
    for (size_t d = 0; d + 1 < r; ++d) perm.push_back(d);
  }
  perm.push_back(r - 1);
  if (trans) std::swap(perm[r - 2], perm[r - 1]);
  return Permute(raw, shape, perm, out_shape);
}

// numpy.matmul in float64, written out.
std::vector<double> NumpyMatMul(const std::vector<double>& a, Shape as, const std::vector<double>& b, Shape bs,
                                Shape& out_shape) {
  const bool a_vector = as.size() == 1, b_vector = bs.size() == 1;
  if (a_vector) as.insert(as.begin(), 1);
  if (b_vector) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape batch = BroadcastShapes(a_batch, b_batch);
  const std::vector<int64_t> a_strides = BroadcastStrides(a_batch, batch), b_strides = BroadcastStrides(b_batch, batch);
  const int64_t count = NumElements(batch);
  std::vector<double> out(static_cast<size_t>(count * m * n));
  std::vector<int64_t> index(batch.size(), 0);
  for (int64_t bi = 0; bi < count; ++bi) {
    int64_t a_offset = 0, b_offset = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      a_offset += index[d] * a_strides[d];
      b_offset += index[d] * b_strides[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum +=
              a[static_cast<size_t>((a_offset * m + i) * k + p)] * b[static_cast<size_t>((b_offset * k + p) * n + j)];
        out[static_cast<size_t>((bi * m + i) * n + j)] = sum;
      }
    for (size_t d = index.size(); d-- > 0;)
      if (++index[d] < batch[d])
        break;
      else
        index[d] = 0;
  }
  out_shape = batch;
  if (!a_vector) out_shape.push_back(m);
  if (!b_vector) out_shape.push_back(n);
  return out;
}

class FusedMatMulTest : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(FusedMatMulTest, MatchesNumpyMatMulOfTransposedOperands) {
  const MatMulCase& c = GetParam();
  const std::vector<double> a = RandomValues(c.a, 1), b = RandomValues(c.b, 2);
  Shape la, lb, expected_shape;
  const std::vector<double> a_logical = Logical(a, c.a, c.trans_a, c.trans_batch_a, la);
  const std::vector<double> b_logical = Logical(b, c.b, c.trans_b, c.trans_batch_b, lb);
  std::vector<double> expected = NumpyMatMul(a_logical, la, b_logical, lb, expected_shape);
  for (double& v : expected) v *= c.alpha;

  OneNode run;
  run.op = c.op;
  run.attributes = {{"transA", Attribute::Int(c.trans_a)},
                    {"transB", Attribute::Int(c.trans_b)},
                    {"alpha", Attribute::Float(static_cast<float>(c.alpha))}};
  if (c.op == "FusedMatMul") {
    run.attributes["transBatchA"] = Attribute::Int(c.trans_batch_a);
    run.attributes["transBatchB"] = Attribute::Int(c.trans_batch_b);
  }
  const bool single = c.dtype == DataType::kFloat32;
  if (single) {
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    run.inputs = {Tensor::FromVector<float>(af, c.a), Tensor::FromVector<float>(bf, c.b)};
  } else {
    run.inputs = {Doubles(a, c.a), Doubles(b, c.b)};
  }
  const Tensor y = RunOneNode(run)[0];
  EXPECT_EQ(y.dtype(), c.dtype);
  ExpectValuesNear(y, expected_shape, expected, single ? 1e-5 : 1e-12, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Rows, FusedMatMulTest,
    ::testing::Values(MatMulCase{"Plain2D", {3, 4}, {4, 5}, 0, 0, 0, 0, 0.5},
                      MatMulCase{"TransAB", {4, 3}, {5, 4}, 1, 1, 0, 0, 2.0},
                      MatMulCase{"BatchTimesMatrix", {2, 3, 4}, {4, 5}, 0, 0, 0, 0, 1.5},
                      MatMulCase{"BatchTimesMatrixTransA", {2, 4, 3}, {4, 5}, 1, 0, 0, 0, 1.0},
                      MatMulCase{"BroadcastBatches", {2, 1, 3, 4}, {3, 4, 5}, 0, 0, 0, 0, 1.0},
                      MatMulCase{"TransBatchA", {3, 2, 4}, {2, 4, 5}, 0, 0, 1, 0, 0.25},
                      MatMulCase{"TransBatchAAndTransA", {4, 2, 3}, {2, 4, 5}, 1, 0, 1, 0, 1.0},
                      MatMulCase{"TransBatchB", {2, 3, 4}, {4, 2, 5}, 0, 0, 0, 1, 1.0},
                      MatMulCase{"TransBatchBAndTransB", {2, 3, 4}, {5, 2, 4}, 0, 1, 0, 1, -1.0},
                      MatMulCase{"TransBatchBoth4D", {2, 3, 4, 5}, {5, 3, 4, 6}, 0, 0, 1, 1, 1.0},
                      MatMulCase{"TransBatchRank2IsPlain", {3, 4}, {4, 5}, 0, 0, 1, 1, 1.0},
                      MatMulCase{"VectorLeftIgnoresTrans", {4}, {2, 4, 3}, 1, 0, 1, 0, 1.0},
                      MatMulCase{"VectorRight", {2, 3, 4}, {4}, 0, 1, 0, 0, 3.0},
                      MatMulCase{"ZeroInnerDim", {2, 0}, {0, 3}, 0, 0, 0, 0, 1.0},
                      MatMulCase{"Float32", {2, 5, 6}, {2, 7, 6}, 0, 1, 0, 0, 0.5, "FusedMatMul", DataType::kFloat32},
                      MatMulCase{"TransposeMatMulName", {4, 3}, {2, 4, 5}, 1, 0, 0, 0, 0.5, "TransposeMatMul"}),
    RowName());

// ---------------------------------------------------------------------------------------------
// FusedGemm: Gemm then the named activation, written out

struct GemmCase {
  std::string name;
  std::string activation;  // "" leaves the attribute out
  std::map<std::string, double> activation_attributes;
  std::function<double(double)> reference;
  int trans_a = 0, trans_b = 0;
  double alpha = 1.0, beta = 1.0;
  Shape c = {4};  // empty: no C
};
void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

class FusedGemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(FusedGemmTest, IsGemmThenActivation) {
  const GemmCase& c = GetParam();
  const int64_t m = 3, k = 5, n = 4;
  const Shape a_shape = c.trans_a ? Shape{k, m} : Shape{m, k}, b_shape = c.trans_b ? Shape{n, k} : Shape{k, n};
  const std::vector<double> a = RandomValues(a_shape, 3, -1.5, 1.5), b = RandomValues(b_shape, 4, -1.5, 1.5);
  const std::vector<double> bias = c.c.empty() ? std::vector<double>() : RandomValues(c.c, 5);
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += a[static_cast<size_t>(c.trans_a ? p * m + i : i * k + p)] *
               b[static_cast<size_t>(c.trans_b ? j * k + p : p * n + j)];
      double v = c.alpha * sum;
      if (!bias.empty()) v += c.beta * bias[static_cast<size_t>(bias.size() == 1 ? 0 : j)];
      expected[static_cast<size_t>(i * n + j)] = c.reference(v);
    }
  OneNode run;
  run.op = "FusedGemm";
  run.attributes = {{"transA", Attribute::Int(c.trans_a)},
                    {"transB", Attribute::Int(c.trans_b)},
                    {"alpha", Attribute::Float(static_cast<float>(c.alpha))},
                    {"beta", Attribute::Float(static_cast<float>(c.beta))}};
  if (!c.activation.empty()) run.attributes["activation"] = Attribute::String(c.activation);
  for (const auto& [name, value] : c.activation_attributes)
    run.attributes["activation_" + name] = Attribute::Float(static_cast<float>(value));
  run.inputs = {Doubles(a, a_shape), Doubles(b, b_shape)};
  if (!c.c.empty()) run.inputs.push_back(Doubles(bias, c.c));
  ExpectValuesNear(RunOneNode(run)[0], {m, n}, expected, 1e-12, c.name);
}

double Softplus(double x) { return std::log(1 + std::exp(x)); }

INSTANTIATE_TEST_SUITE_P(
    Rows, FusedGemmTest,
    ::testing::Values(
        GemmCase{"NoActivation", "", {}, [](double x) { return x; }, 0, 0, 0.5, 2.0},
        GemmCase{"Relu", "Relu", {}, [](double x) { return x > 0 ? x : 0; }, 0, 1},
        GemmCase{"LeakyRelu", "LeakyRelu", {{"alpha", 0.125}}, [](double x) { return x < 0 ? 0.125 * x : x; }, 1, 0},
        GemmCase{"LeakyReluDefaultAlpha", "LeakyRelu", {}, [](double x) { return x < 0 ? double{0.01f} * x : x; }},
        GemmCase{"Tanh", "Tanh", {}, [](double x) { return std::tanh(x); }, 1, 1, 0.75, 1.0, {1}},
        GemmCase{"Sigmoid", "Sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }, 0, 0, 1.0, 1.0, {}},
        GemmCase{"HardSigmoid",
                 "HardSigmoid",
                 {{"alpha", 0.25}, {"beta", 0.375}},
                 [](double x) { return std::min(1.0, std::max(0.0, 0.25 * x + 0.375)); }},
        GemmCase{"Elu", "Elu", {{"alpha", 0.5}}, [](double x) { return x < 0 ? 0.5 * (std::exp(x) - 1) : x; }},
        GemmCase{"Celu",
                 "Celu",
                 {{"alpha", 2.0}},
                 [](double x) { return std::max(0.0, x) + std::min(0.0, 2.0 * (std::exp(x / 2.0) - 1)); }},
        GemmCase{"Selu",
                 "Selu",
                 {{"alpha", 1.5}, {"gamma", 1.25}},
                 [](double x) { return 1.25 * (x > 0 ? x : 1.5 * (std::exp(x) - 1)); }},
        GemmCase{"Softplus", "Softplus", {}, Softplus},
        GemmCase{"Softsign", "Softsign", {}, [](double x) { return x / (1 + std::abs(x)); }},
        GemmCase{"ThresholdedRelu", "ThresholdedRelu", {{"alpha", 0.5}}, [](double x) { return x > 0.5 ? x : 0; }},
        GemmCase{"ParametricSoftplus",
                 "ParametricSoftplus",
                 {{"alpha", 2.0}, {"beta", 0.5}},
                 [](double x) { return 2.0 * Softplus(0.5 * x); }},
        GemmCase{"ScaledTanh",
                 "ScaledTanh",
                 {{"alpha", 1.5}, {"beta", 0.75}},
                 [](double x) { return 1.5 * std::tanh(0.75 * x); }}),
    RowName());

// ---------------------------------------------------------------------------------------------
// ConvGrad against central differences of Conv

struct ConvGradCase {
  std::string name;
  Shape x, w;
  AttributeMap attributes;
  std::vector<int> omitted_outputs = {};
};
void PrintTo(const ConvGradCase& c, std::ostream* os) { *os << c.name; }

class ConvGradTest : public ::testing::TestWithParam<ConvGradCase> {};

TEST_P(ConvGradTest, MatchesCentralDifferencesOfConv) {
  const ConvGradCase& c = GetParam();
  const Tensor x = RandomTensor(c.x, 6), w = RandomTensor(c.w, 7), b = RandomTensor({c.w[0]}, 8);
  const OneNode conv = OnnxNode("Conv", {x, w, b}, c.attributes);
  const Tensor dy = RandomTensor(RunOneNode(conv)[0].shape(), 9);
  OneNode run;
  run.op = "ConvGrad";
  run.attributes = c.attributes;
  run.inputs = {dy, x, w};
  run.outputs = std::vector<bool>(3, true);
  for (int k : c.omitted_outputs) run.outputs[k] = false;
  const std::vector<Tensor> grads = RunOneNode(run);
  size_t next = 0;
  for (int k = 0; k < 3; ++k) {
    if (std::count(c.omitted_outputs.begin(), c.omitted_outputs.end(), k)) continue;
    const Tensor& wrt = k == 0 ? x : k == 1 ? w : b;
    const Tensor expected = CentralDifferenceVjp(OneNodeFunction(conv, k), wrt, dy, 1e-5);
    ExpectTensorNear(grads[next++], expected, 1e-8, c.name + " output " + std::to_string(k));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ConvGradTest,
    ::testing::Values(
        ConvGradCase{"LeNetLike", {1, 3, 8, 8}, {4, 3, 5, 5}, {{"kernel_shape", Attribute::Ints({5, 5})}}},
        ConvGradCase{"FirstLayerNoDX", {2, 2, 6, 6}, {3, 2, 3, 3}, {}, {0}},
        ConvGradCase{"StridePadDilation",
                     {2, 2, 7, 6},
                     {3, 2, 3, 2},
                     {{"strides", Attribute::Ints({2, 1})},
                      {"pads", Attribute::Ints({1, 0, 2, 1})},
                      {"dilations", Attribute::Ints({1, 2})}}},
        ConvGradCase{"Grouped", {1, 4, 5, 5}, {6, 2, 3, 3}, {{"group", Attribute::Int(2)}}},
        ConvGradCase{"OneDimensional", {2, 3, 9}, {2, 3, 4}, {{"strides", Attribute::Ints({2})}}},
        ConvGradCase{"OnlyDX", {1, 2, 5, 5}, {2, 2, 3, 3}, {{"auto_pad", Attribute::String("SAME_UPPER")}}, {1, 2}}),
    RowName());

// ---------------------------------------------------------------------------------------------
// MaxPoolGrad (dY, Indices) and AveragePoolGrad (dY) against central differences of the forward pool

struct PoolGradCase {
  std::string name;
  Shape x;
  AttributeMap attributes;
};
void PrintTo(const PoolGradCase& c, std::ostream* os) { *os << c.name; }

// Distinct values (a shuffled ramp) so that every window has one clear maximum.
Tensor DistinctValues(const Shape& shape, uint64_t seed) {
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) / 8.0 - 3.0;
  std::shuffle(values.begin(), values.end(), std::mt19937_64(seed));
  return Doubles(values, shape);
}

class MaxPoolGradTest : public ::testing::TestWithParam<PoolGradCase> {};

TEST_P(MaxPoolGradTest, ScattersToTheIndicesMaxPoolReturns) {
  const PoolGradCase& c = GetParam();
  const Tensor x = DistinctValues(c.x, 10);
  const Tensor indices = RunOneNode(OnnxNode("MaxPool", {x}, c.attributes, 2))[1];
  const Tensor dy = RandomTensor(indices.shape(), 11);

  OneNode run;
  run.domain = "";
  run.op = "MaxPoolGrad";
  run.attributes = c.attributes;
  run.attributes["storage_order"] = Attribute::Int(0);
  run.inputs = {dy, indices};
  Shape declared = c.x;
  declared[0] = -1;  // symbolic batch, as in exported models
  run.declared_outputs[0] = declared;
  const Tensor expected = CentralDifferenceVjp(OneNodeFunction(OnnxNode("MaxPool", {x}, c.attributes), 0), x, dy, 1e-6);
  ExpectTensorNear(RunOneNode(run)[0], expected, 1e-8, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Rows, MaxPoolGradTest,
    ::testing::Values(
        PoolGradCase{"LeNet2x2",
                     {1, 2, 6, 6},
                     {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}},
        PoolGradCase{"OddInputFloors",
                     {2, 2, 7, 5},
                     {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}},
        PoolGradCase{"OverlappingWindowsAccumulate", {1, 1, 5, 5}, {{"kernel_shape", Attribute::Ints({3, 3})}}},
        PoolGradCase{"PaddedStride2",
                     {1, 2, 6, 5},
                     {{"kernel_shape", Attribute::Ints({3, 3})},
                      {"strides", Attribute::Ints({2, 2})},
                      {"pads", Attribute::Ints({1, 1, 1, 1})}}},
        PoolGradCase{
            "OneDimensional", {2, 3, 9}, {{"kernel_shape", Attribute::Ints({3})}, {"strides", Attribute::Ints({3})}}}),
    RowName());

class AveragePoolGradTest : public ::testing::TestWithParam<PoolGradCase> {};

TEST_P(AveragePoolGradTest, MatchesCentralDifferencesOfAveragePool) {
  const PoolGradCase& c = GetParam();
  const Tensor x = RandomTensor(c.x, 12);
  const OneNode pool = OnnxNode("AveragePool", {x}, c.attributes);
  const Tensor dy = RandomTensor(RunOneNode(pool)[0].shape(), 13);
  OneNode run;
  run.domain = "";
  run.op = "AveragePoolGrad";
  run.attributes = c.attributes;
  run.inputs = {dy};
  run.declared_outputs[0] = c.x;
  const Tensor expected = CentralDifferenceVjp(OneNodeFunction(pool, 0), x, dy, 1e-5);
  ExpectTensorNear(RunOneNode(run)[0], expected, 1e-8, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Rows, AveragePoolGradTest,
    ::testing::Values(PoolGradCase{"Plain2x2",
                                   {2, 2, 6, 6},
                                   {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}},
                      PoolGradCase{"OddInputFloors",
                                   {1, 2, 7, 7},
                                   {{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})}}},
                      PoolGradCase{"PadsExcluded",
                                   {1, 1, 5, 6},
                                   {{"kernel_shape", Attribute::Ints({3, 3})},
                                    {"strides", Attribute::Ints({2, 2})},
                                    {"pads", Attribute::Ints({1, 1, 1, 1})},
                                    {"count_include_pad", Attribute::Int(0)}}},
                      PoolGradCase{"PadsIncluded",
                                   {1, 1, 5, 6},
                                   {{"kernel_shape", Attribute::Ints({3, 3})},
                                    {"strides", Attribute::Ints({2, 2})},
                                    {"pads", Attribute::Ints({1, 1, 1, 1})},
                                    {"count_include_pad", Attribute::Int(1)}}},
                      PoolGradCase{"OneDimensional", {2, 2, 8}, {{"kernel_shape", Attribute::Ints({3})}}},
                      PoolGradCase{
                          "ThreeDimensional",
                          {1, 1, 4, 4, 5},
                          {{"kernel_shape", Attribute::Ints({2, 2, 2})}, {"strides", Attribute::Ints({2, 2, 2})}}}),
    RowName());

// ---------------------------------------------------------------------------------------------
// BatchNormInternal against the batch-statistics formula; BatchNormalizationGrad against central
// differences of training-mode BatchNormalization

struct BatchNormCase {
  std::string name;
  Shape x;
  double epsilon = 1e-5, momentum = 0.9;
  bool training = true;
};
void PrintTo(const BatchNormCase& c, std::ostream* os) { *os << c.name; }

// Per-channel mean and population variance of x [N, C, ...].
void ChannelMoments(const std::vector<double>& x, const Shape& shape, std::vector<double>& mean,
                    std::vector<double>& var) {
  const int64_t n = shape[0], c = shape[1], s = NumElements(shape) / (n * c);
  mean.assign(static_cast<size_t>(c), 0);
  var.assign(static_cast<size_t>(c), 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, squares = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < s; ++i) sum += x[static_cast<size_t>((b * c + ch) * s + i)];
    const double m = sum / static_cast<double>(n * s);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < s; ++i) squares += std::pow(x[static_cast<size_t>((b * c + ch) * s + i)] - m, 2);
    mean[static_cast<size_t>(ch)] = m;
    var[static_cast<size_t>(ch)] = squares / static_cast<double>(n * s);
  }
}

class BatchNormInternalTest : public ::testing::TestWithParam<BatchNormCase> {};

TEST_P(BatchNormInternalTest, MatchesBatchStatisticsFormula) {
  const BatchNormCase& c = GetParam();
  const int64_t channels = c.x[1], spatial = NumElements(c.x) / (c.x[0] * c.x[1]);
  const std::vector<double> x = RandomValues(c.x, 14, -2, 3), scale = RandomValues({channels}, 15),
                            bias = RandomValues({channels}, 16), running_mean = RandomValues({channels}, 17),
                            running_var = RandomValues({channels}, 18, 0.5, 2);
  std::vector<double> mean, var;
  ChannelMoments(x, c.x, mean, var);
  if (!c.training) {
    mean = running_mean;
    var = running_var;
  }
  // The attributes are stored as float32: the reference uses those values.
  const double epsilon = static_cast<float>(c.epsilon), momentum = static_cast<float>(c.momentum);
  std::vector<double> y(x.size()), new_mean, new_var, inv_std;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const size_t k = static_cast<size_t>(ch);
    inv_std.push_back(1 / std::sqrt(var[k] + epsilon));
    new_mean.push_back(momentum * running_mean[k] + (1 - momentum) * mean[k]);
    new_var.push_back(momentum * running_var[k] + (1 - momentum) * var[k]);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = static_cast<size_t>((static_cast<int64_t>(i) / spatial) % channels);
    y[i] = (x[i] - mean[ch]) * inv_std[ch] * scale[ch] + bias[ch];
  }
  OneNode run;
  run.op = "BatchNormInternal";
  run.attributes = {{"epsilon", Attribute::Float(static_cast<float>(c.epsilon))},
                    {"momentum", Attribute::Float(static_cast<float>(c.momentum))},
                    {"training_mode", Attribute::Int(c.training ? 1 : 0)}};
  run.inputs = {Doubles(x, c.x), Doubles(scale, {channels}), Doubles(bias, {channels}),
                Doubles(running_mean, {channels}), Doubles(running_var, {channels})};
  run.outputs = std::vector<bool>(c.training ? 5 : 1, true);
  const std::vector<Tensor> out = RunOneNode(run);
  ExpectValuesNear(out[0], c.x, y, 1e-12, c.name + " Y");
  if (!c.training) return;
  ExpectValuesNear(out[1], {channels}, new_mean, 1e-12, c.name + " running_mean");
  ExpectValuesNear(out[2], {channels}, new_var, 1e-12, c.name + " running_var");
  ExpectValuesNear(out[3], {channels}, mean, 1e-12, c.name + " saved_mean");
  ExpectValuesNear(out[4], {channels}, inv_std, 1e-12, c.name + " saved_inv_std");
}

INSTANTIATE_TEST_SUITE_P(Rows, BatchNormInternalTest,
                         ::testing::Values(BatchNormCase{"Image", {2, 3, 4, 4}},
                                           BatchNormCase{"Rank2", {5, 4}, 1e-3, 0.8},
                                           BatchNormCase{"OneDimensional", {3, 2, 6}, 1e-5, 0.5},
                                           BatchNormCase{"InferenceUsesRunningStats", {2, 3, 3, 3}, 1e-5, 0.9, false}),
                         RowName());

class BatchNormalizationGradTest : public ::testing::TestWithParam<BatchNormCase> {};

TEST_P(BatchNormalizationGradTest, MatchesCentralDifferencesOfTrainingBatchNorm) {
  const BatchNormCase& c = GetParam();
  const int64_t channels = c.x[1];
  const Tensor x = RandomTensor(c.x, 19, -2, 3), scale = RandomTensor({channels}, 20),
               bias = RandomTensor({channels}, 21);
  const Tensor running_mean = RandomTensor({channels}, 22), running_var = RandomTensor({channels}, 23, 0.5, 2);
  const Tensor dy = RandomTensor(c.x, 24);
  std::vector<double> mean, var, inv_std;
  ChannelMoments(x.ToDoubleVector(), c.x, mean, var);
  for (double v : var) inv_std.push_back(1 / std::sqrt(v + c.epsilon));

  OneNode run;
  run.op = "BatchNormalizationGrad";
  run.attributes = {{"epsilon", Attribute::Float(static_cast<float>(c.epsilon))}};
  run.inputs = {dy, x, scale, Doubles(mean, {channels}), Doubles(inv_std, {channels})};
  run.outputs = std::vector<bool>(3, true);
  const std::vector<Tensor> grads = RunOneNode(run);
  const AttributeMap training = {{"epsilon", Attribute::Float(static_cast<float>(c.epsilon))},
                                                     {"training_mode", Attribute::Int(1)}};
  const std::vector<Tensor> inputs = {x, scale, bias, running_mean, running_var};
  for (size_t k = 0; k < 3; ++k) {
    const Tensor expected = CentralDifferenceVjp(
        OneNodeFunction(OnnxNode("BatchNormalization", inputs, training, 3), k), inputs[k], dy, 1e-5);
    ExpectTensorNear(grads[k], expected, 1e-6, c.name + " output " + std::to_string(k));
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, BatchNormalizationGradTest,
                         ::testing::Values(BatchNormCase{"Image", {2, 3, 3, 4}}, BatchNormCase{"Rank2", {6, 3}, 1e-3},
                                           BatchNormCase{"OneDimensional", {3, 2, 5}}),
                         RowName());

// ---------------------------------------------------------------------------------------------
// AdamWOptimizer, SGDOptimizerV2, InplaceClipGradNorm against ORT's formulas written out

struct AdamCase {
  std::string name;
  int64_t adam_mode = 1;
  int64_t correct_bias = 1;
  double weight_decay = 0.0;
  int64_t step = 1;  // what ORT's runtime feeds: updates done so far + 1
  bool update = true;
  bool attributes_given = true;  // false: ORT's schema defaults
  DataType dtype = DataType::kFloat64;
};
void PrintTo(const AdamCase& c, std::ostream* os) { *os << c.name; }

TensorSequence SequenceOf(const std::vector<Shape>& shapes, uint64_t seed, DataType dtype, double low = -1,
                          double high = 1) {
  TensorSequence out;
  for (const Shape& shape : shapes) {
    const std::vector<double> v = RandomValues(shape, seed++, low, high);
    if (dtype == DataType::kFloat32)
      out.push_back(Tensor::FromVector<float>(std::vector<float>(v.begin(), v.end()), shape));
    else
      out.push_back(Doubles(v, shape));
  }
  return out;
}

class AdamWOptimizerTest : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamWOptimizerTest, MatchesOrtFormula) {
  const AdamCase& c = GetParam();
  const double lr = 0.01, alpha = c.attributes_given ? 0.8 : 0.9, beta = c.attributes_given ? 0.95 : 0.999;
  const double epsilon = c.attributes_given ? 1e-6 : 1e-8;
  const double weight_decay = c.attributes_given ? c.weight_decay : 0.01;  // ORT's schema default
  const std::vector<Shape> shapes = {{2, 3}, {4}, {}};
  const TensorSequence weights = SequenceOf(shapes, 30, c.dtype), gradients = SequenceOf(shapes, 40, c.dtype),
                       m1 = SequenceOf(shapes, 50, c.dtype), m2 = SequenceOf(shapes, 60, c.dtype, 0, 1);
  OneNode run;
  run.op = "AdamWOptimizer";
  if (c.attributes_given)
    run.attributes = {{"alpha", Attribute::Float(static_cast<float>(alpha))},
                      {"beta", Attribute::Float(static_cast<float>(beta))},
                      {"epsilon", Attribute::Float(static_cast<float>(epsilon))},
                      {"weight_decay", Attribute::Float(static_cast<float>(c.weight_decay))},
                      {"correct_bias", Attribute::Int(c.correct_bias)},
                      {"adam_mode", Attribute::Int(c.adam_mode)}};
  run.inputs = {Tensor::FromVector<float>({static_cast<float>(lr)}, {1}),
                Tensor::FromVector<int64_t>({c.step}, {1}),
                SequenceInput(weights),
                SequenceInput(gradients),
                SequenceInput(m1),
                SequenceInput(m2)};
  if (!c.update) run.inputs.push_back(Tensor::FromVector<bool>({false}, {1}));
  run.outputs = std::vector<bool>(4, true);
  const std::vector<RuntimeValue> out = RunOneNodeValues(run);
  ASSERT_EQ(out[0].tensor.dtype(), DataType::kBool);
  EXPECT_EQ(out[0].tensor.data<bool>()[0], c.update);

  // The float attributes are stored as float32: the reference uses those values.
  const double a = static_cast<float>(alpha), b = static_cast<float>(beta), eps = static_cast<float>(epsilon);
  const double wd = static_cast<float>(weight_decay), rate = static_cast<float>(lr);
  const double t = static_cast<double>(c.step);
  const bool correct = c.attributes_given ? c.correct_bias == 1 : true;
  const int64_t mode = c.attributes_given ? c.adam_mode : 0;
  const double ac = correct ? 1 - std::pow(a, t) : 1, bc = correct ? 1 - std::pow(b, t) : 1;
  const double tolerance = c.dtype == DataType::kFloat32 ? 1e-6 : 1e-12;
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<double> w = weights[k].ToDoubleVector(), g = gradients[k].ToDoubleVector();
    std::vector<double> first = m1[k].ToDoubleVector(), second = m2[k].ToDoubleVector();
    if (c.update) {
      for (size_t i = 0; i < w.size(); ++i) {
        first[i] = a * first[i] + (1 - a) * g[i];
        second[i] = b * second[i] + (1 - b) * g[i] * g[i];
        if (mode == 0) {
          w[i] -= rate * wd * w[i];
          w[i] -= rate * first[i] / (ac * (std::sqrt(second[i] / bc) + eps));
        } else {
          w[i] -= (rate * std::sqrt(bc) / ac) * first[i] / (std::sqrt(second[i]) + eps);
          w[i] -= rate * wd * w[i];
        }
      }
    }
    const std::string label = c.name + " tensor " + std::to_string(k);
    ExpectValuesNear(out[1].sequence[k], shapes[k], w, tolerance, label + " weight");
    ExpectValuesNear(out[2].sequence[k], shapes[k], first, tolerance, label + " m1");
    ExpectValuesNear(out[3].sequence[k], shapes[k], second, tolerance, label + " m2");
    EXPECT_FALSE(out[1].sequence[k].SameData(weights[k])) << label << ": the output must be a fresh tensor";
  }
  // The inputs are left as they were.
  EXPECT_EQ(weights[0].ToDoubleVector(), SequenceOf(shapes, 30, c.dtype)[0].ToDoubleVector());
  EXPECT_EQ(m1[0].ToDoubleVector(), SequenceOf(shapes, 50, c.dtype)[0].ToDoubleVector());
}

INSTANTIATE_TEST_SUITE_P(Rows, AdamWOptimizerTest,
                         ::testing::Values(AdamCase{"HuggingFaceFirstStep", 1, 1, 0.0, 1},
                                           AdamCase{"HuggingFaceWeightDecayStep5", 1, 1, 0.1, 5},
                                           AdamCase{"HuggingFaceNoBiasCorrection", 1, 0, 0.05, 3},
                                           AdamCase{"TorchWeightDecayStep7", 0, 1, 0.1, 7},
                                           AdamCase{"SkippedByUpdateSignal", 1, 1, 0.1, 4, false},
                                           AdamCase{"SchemaDefaults", 0, 1, 0.0, 2, true, false},
                                           AdamCase{"Float32", 1, 1, 0.1, 3, true, true, DataType::kFloat32}),
                         RowName());

struct SgdCase {
  std::string name;
  bool update = true;
};
void PrintTo(const SgdCase& c, std::ostream* os) { *os << c.name; }

class SGDOptimizerV2Test : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SGDOptimizerV2Test, MatchesFormula) {
  const SgdCase& c = GetParam();
  const std::vector<Shape> shapes = {{3, 2}, {5}};
  const TensorSequence weights = SequenceOf(shapes, 70, DataType::kFloat64),
                       gradients = SequenceOf(shapes, 80, DataType::kFloat64);
  OneNode run;
  run.op = "SGDOptimizerV2";
  run.inputs = {Tensor::FromVector<float>({0.25f}, {1}), SequenceInput(weights), SequenceInput(gradients)};
  if (!c.update) run.inputs.push_back(Tensor::FromVector<bool>({false}, {1}));
  run.outputs = std::vector<bool>(2, true);
  const std::vector<RuntimeValue> out = RunOneNodeValues(run);
  EXPECT_EQ(out[0].tensor.data<bool>()[0], c.update);
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<double> w = weights[k].ToDoubleVector();
    const std::vector<double> g = gradients[k].ToDoubleVector();
    if (c.update)
      for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.25 * g[i];
    ExpectValuesNear(out[1].sequence[k], shapes[k], w, 1e-15, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, SGDOptimizerV2Test, ::testing::Values(SgdCase{"Update"}, SgdCase{"Skipped", false}),
                         RowName());

struct ClipCase {
  std::string name;
  std::vector<Shape> shapes;
  double max_norm = -1;  // < 0: ORT's default 1.0
  double scale = 1.0;    // of the random gradients
};
void PrintTo(const ClipCase& c, std::ostream* os) { *os << c.name; }

class InplaceClipGradNormTest : public ::testing::TestWithParam<ClipCase> {};

TEST_P(InplaceClipGradNormTest, ScalesToTheMaximumNorm) {
  const ClipCase& c = GetParam();
  TensorSequence gradients;
  double squares = 0;
  uint64_t seed = 90;
  for (const Shape& shape : c.shapes) {
    std::vector<double> v = RandomValues(shape, seed++);
    for (double& x : v) {
      x *= c.scale;
      squares += x * x;
    }
    gradients.push_back(Doubles(v, shape));
  }
  const double max_norm = c.max_norm < 0 ? 1.0 : c.max_norm;
  const double coefficient = std::min(1.0, max_norm / (std::sqrt(squares) + 1e-6));
  OneNode run;
  run.op = "InplaceClipGradNorm";
  if (c.max_norm >= 0) run.attributes = {{"max_norm", Attribute::Float(static_cast<float>(c.max_norm))}};
  run.inputs = {SequenceInput(gradients)};
  const std::vector<RuntimeValue> out = RunOneNodeValues(run);
  ASSERT_EQ(out[0].sequence.size(), gradients.size());
  for (size_t k = 0; k < gradients.size(); ++k) {
    std::vector<double> expected = gradients[k].ToDoubleVector();
    for (double& x : expected) x *= coefficient;
    ExpectValuesNear(out[0].sequence[k], c.shapes[k], expected, 1e-15, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, InplaceClipGradNormTest,
                         ::testing::Values(ClipCase{"Clipped", {{3, 4}, {5}, {}}, 0.5, 2.0},
                                           ClipCase{"BelowTheMaximum", {{2, 2}, {3}}, 100.0},
                                           ClipCase{"DefaultMaxNorm", {{4, 4}}, -1, 3.0},
                                           ClipCase{"EmptySequence", {}, 1.0}),
                         RowName());

// ---------------------------------------------------------------------------------------------
// Bad inputs

class OrtFusedErrorTest : public ::testing::TestWithParam<ErrorRow> {};

TEST_P(OrtFusedErrorTest, FailsNamingTheNode) {
  const ErrorRow& c = GetParam();
  const OneNode& run = c.node;
  const std::string node =
      "node '" + std::string(kOneNodeName) + "' (" + (run.domain.empty() ? "" : run.domain + ".") + run.op + ")";
  try {
    RunOneNodeValues(run);
    ADD_FAILURE() << "expected an error containing: " << c.needle;
  } catch (const Error& e) {
    EXPECT_EQ(ErrorCodeName(e.code()), ErrorCodeName(c.code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(node + ": " + c.needle), std::string::npos) << e.what();
  }
}

OneNode Adam(std::vector<TensorSequence> sequences, AttributeMap attributes = {},
             int64_t step = 1) {
  OneNode run;
  run.op = "AdamWOptimizer";
  run.attributes = std::move(attributes);
  run.inputs = {Tensor::FromVector<float>({0.1f}, {1}), Tensor::FromVector<int64_t>({step}, {1})};
  for (auto& s : sequences) run.inputs.push_back(SequenceInput(s));
  run.outputs = std::vector<bool>(4, true);
  return run;
}
TensorSequence Seq(std::vector<Shape> shapes) { return SequenceOf(shapes, 1, DataType::kFloat64); }

OneNode MaxPoolGradRun(Shape dy, Shape indices, std::vector<int64_t> index_values, std::map<size_t, Shape> declared) {
  OneNode run;
  run.domain = "";
  run.op = "MaxPoolGrad";
  run.attributes = {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  run.inputs = {RandomTensor(dy, 1), Tensor::FromVector<int64_t>(index_values, indices)};
  run.declared_outputs = std::move(declared);
  return run;
}

std::vector<ErrorRow> ErrorRows() {
  const AttributeMap pool2x2 = {{"kernel_shape", Attribute::Ints({2, 2})},
                                                    {"strides", Attribute::Ints({2, 2})}};
  const std::vector<bool> three_outputs(3, true);
  return {
      {"FusedMatMulInnerDims",
       {"FusedMatMul",
        kMicrosoftDomain,
        {RandomTensor({3, 4}, 1), RandomTensor({4, 5}, 2)},
        {{"transA", Attribute::Int(1)}}},
       ErrorCode::kInvalidArgument,
       "inner dimensions do not match"},
      {"FusedGemmUnknownActivation",
       {"FusedGemm",
        kMicrosoftDomain,
        {RandomTensor({2, 3}, 1), RandomTensor({3, 2}, 2)},
        {{"activation", Attribute::String("Swish")}}},
       ErrorCode::kNotImplemented,
       "activation 'Swish' is not supported"},
      {"FusedConvUnknownActivation",
       {"FusedConv",
        kMicrosoftDomain,
        {RandomTensor({1, 2, 5, 5}, 1), RandomTensor({3, 2, 3, 3}, 2)},
        {{"activation", Attribute::String("Swish")}}},
       ErrorCode::kNotImplemented,
       "activation 'Swish' is not supported"},
      {"ConvGradWrongDY",
       {"ConvGrad",
        kMicrosoftDomain,
        {RandomTensor({1, 2, 4, 4}, 1), RandomTensor({1, 3, 5, 5}, 2), RandomTensor({2, 3, 3, 3}, 3)},
        {},
        three_outputs},
       ErrorCode::kInvalidArgument,
       "dY of shape [1, 2, 4, 4] does not match"},
      {"MaxPoolGradUndeclaredShape", MaxPoolGradRun({1, 1, 2, 2}, {1, 1, 2, 2}, {0, 2, 8, 10}, {}),
       ErrorCode::kInvalidModel, "the model must declare the shape of output 'out0'"},
      {"MaxPoolGradIndicesShape", MaxPoolGradRun({1, 1, 2, 2}, {4}, {0, 2, 8, 10}, {{0, {1, 1, 4, 4}}}),
       ErrorCode::kInvalidArgument, "Indices must be int64 of dY's shape [1, 1, 2, 2]"},
      {"MaxPoolGradIndexOutOfRange", MaxPoolGradRun({1, 1, 2, 2}, {1, 1, 2, 2}, {0, 2, 8, 16}, {{0, {1, 1, 4, 4}}}),
       ErrorCode::kOutOfRange, "index 16 is out of range for dX of shape [1, 1, 4, 4]"},
      {"AveragePoolGradDeclaredShapeDoesNotPool",
       {"AveragePoolGrad", "", {RandomTensor({1, 1, 2, 2}, 1)}, pool2x2, {true}, 17, {{0, {1, 1, 6, 6}}}},
       ErrorCode::kInvalidArgument,
       "dY of shape [1, 1, 2, 2] does not match the pooled shape [1, 1, 3, 3]"},
      {"BatchNormalizationGradSavedMeanSize",
       {"BatchNormalizationGrad",
        kMicrosoftDomain,
        {RandomTensor({2, 3, 2}, 1), RandomTensor({2, 3, 2}, 2), RandomTensor({3}, 3), RandomTensor({2}, 4),
         RandomTensor({3}, 5)},
        {},
        three_outputs},
       ErrorCode::kInvalidArgument,
       "input 'saved_mean' has shape [2] but 3 values are expected"},
      {"AdamWSequencesOfDifferentLengths", Adam({Seq({{2}, {3}}), Seq({{2}}), Seq({{2}, {3}}), Seq({{2}, {3}})}),
       ErrorCode::kInvalidArgument, "gradients holds 1 tensors but weights holds 2"},
      {"AdamWMomentShape", Adam({Seq({{2}, {3}}), Seq({{2}, {3}}), Seq({{2}, {3}}), Seq({{2}, {4}})}),
       ErrorCode::kInvalidArgument, "momentums_2[1] is float64 [4] but weights[1] is float64 [3]"},
      {"AdamWEmpty", Adam({Seq({}), Seq({}), Seq({}), Seq({})}), ErrorCode::kInvalidArgument,
       "weights is an empty sequence"},
      {"AdamWMode2", Adam({Seq({{2}}), Seq({{2}}), Seq({{2}}), Seq({{2}})}, {{"adam_mode", Attribute::Int(2)}}),
       ErrorCode::kInvalidArgument, "adam_mode must be 0 (PyTorch AdamW) or 1"},
      {"AdamWTorchModeWithoutBiasCorrection",
       Adam({Seq({{2}}), Seq({{2}}), Seq({{2}}), Seq({{2}})},
            {{"adam_mode", Attribute::Int(0)}, {"correct_bias", Attribute::Int(0)}}),
       ErrorCode::kInvalidArgument, "adam_mode 0 (PyTorch AdamW) needs correct_bias 1"},
      {"AdamWStepZero", Adam({Seq({{2}}), Seq({{2}}), Seq({{2}}), Seq({{2}})}, {}, 0), ErrorCode::kInvalidArgument,
       "step must be >= 1"},
      {"SGDSequencesOfDifferentLengths",
       {"SGDOptimizerV2",
        kMicrosoftDomain,
        {Tensor::FromVector<float>({0.1f}, {1}), SequenceInput(Seq({{2}, {2}})), SequenceInput(Seq({{2}, {2}, {2}}))},
        {},
        {true, true}},
       ErrorCode::kInvalidArgument,
       "gradients holds 3 tensors but weights holds 2"},
      {"ClipNormType",
       {"InplaceClipGradNorm",
        kMicrosoftDomain,
        {SequenceInput(Seq({{2}}))},
        {{"norm_type", Attribute::String("inf")}}},
       ErrorCode::kNotImplemented,
       "norm_type 'inf' is not supported"},
  };
}

INSTANTIATE_TEST_SUITE_P(Rows, OrtFusedErrorTest, ::testing::ValuesIn(ErrorRows()), RowName());

}  // namespace
}  // namespace edgetrain
