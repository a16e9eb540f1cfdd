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
using testing::ExpectTensorNear;
using testing::ExpectValuesNear;
using testing::kOneNodeName;
using testing::OneNode;
using testing::OneNodeFunction;
using testing::OnnxNode;
using testing::OpCase;
using testing::RandomTensor;
using testing::RandomValues;
using testing::RowName;
using testing::RunOneNode;
using testing::RunOneNodeValues;
using testing::SequenceInput;

// ---------------------------------------------------------------------------------------------
// FusedMatMul / TransposeMatMul against numpy matmul of the explicitly transposed operands

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

// A FusedMatMul (or TransposeMatMul) row: numpy's matmul of the operands as the attributes transpose them, times alpha.
OpCase MatMulRow(std::string name, Shape a_shape, Shape b_shape, int trans_a, int trans_b, int trans_batch_a,
                 int trans_batch_b, double alpha, std::string op = "FusedMatMul", DataType dtype = DataType::kFloat64) {
  const std::vector<double> a = RandomValues(a_shape, 1), b = RandomValues(b_shape, 2);
  OneNode run;
  run.op = op;
  run.attributes = {{"transA", Attribute::Int(trans_a)},
                    {"transB", Attribute::Int(trans_b)},
                    {"alpha", Attribute::Float(static_cast<float>(alpha))}};
  if (op == "FusedMatMul") {
    run.attributes["transBatchA"] = Attribute::Int(trans_batch_a);
    run.attributes["transBatchB"] = Attribute::Int(trans_batch_b);
  }
  const bool single = dtype == DataType::kFloat32;
  if (single) {
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    run.inputs = {Tensor::FromVector<float>(af, a_shape), Tensor::FromVector<float>(bf, b_shape)};
  } else {
    run.inputs = {Doubles(a, a_shape), Doubles(b, b_shape)};
  }
  auto expected = [=] {
    Shape la, lb, expected_shape;
    const std::vector<double> a_logical = Logical(a, a_shape, trans_a, trans_batch_a, la);
    const std::vector<double> b_logical = Logical(b, b_shape, trans_b, trans_batch_b, lb);
    std::vector<double> values = NumpyMatMul(a_logical, la, b_logical, lb, expected_shape);
    for (double& v : values) v *= alpha;
    if (!single) return std::vector<Tensor>{Doubles(values, expected_shape)};
    return std::vector<Tensor>{
        Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), expected_shape)};
  };
  return OpCase{std::move(name), std::move(run), expected, single ? 1e-5 : 1e-12};
}

std::vector<OpCase> MatMulRows() {
  return {MatMulRow("Plain2D", {3, 4}, {4, 5}, 0, 0, 0, 0, 0.5),
          MatMulRow("TransAB", {4, 3}, {5, 4}, 1, 1, 0, 0, 2.0),
          MatMulRow("BatchTimesMatrix", {2, 3, 4}, {4, 5}, 0, 0, 0, 0, 1.5),
          MatMulRow("BatchTimesMatrixTransA", {2, 4, 3}, {4, 5}, 1, 0, 0, 0, 1.0),
          MatMulRow("BroadcastBatches", {2, 1, 3, 4}, {3, 4, 5}, 0, 0, 0, 0, 1.0),
          MatMulRow("TransBatchA", {3, 2, 4}, {2, 4, 5}, 0, 0, 1, 0, 0.25),
          MatMulRow("TransBatchAAndTransA", {4, 2, 3}, {2, 4, 5}, 1, 0, 1, 0, 1.0),
          MatMulRow("TransBatchB", {2, 3, 4}, {4, 2, 5}, 0, 0, 0, 1, 1.0),
          MatMulRow("TransBatchBAndTransB", {2, 3, 4}, {5, 2, 4}, 0, 1, 0, 1, -1.0),
          MatMulRow("TransBatchBoth4D", {2, 3, 4, 5}, {5, 3, 4, 6}, 0, 0, 1, 1, 1.0),
          MatMulRow("TransBatchRank2IsPlain", {3, 4}, {4, 5}, 0, 0, 1, 1, 1.0),
          MatMulRow("VectorLeftIgnoresTrans", {4}, {2, 4, 3}, 1, 0, 1, 0, 1.0),
          MatMulRow("VectorRight", {2, 3, 4}, {4}, 0, 1, 0, 0, 3.0),
          MatMulRow("ZeroInnerDim", {2, 0}, {0, 3}, 0, 0, 0, 0, 1.0),
          MatMulRow("Float32", {2, 5, 6}, {2, 7, 6}, 0, 1, 0, 0, 0.5, "FusedMatMul", DataType::kFloat32),
          MatMulRow("TransposeMatMulName", {4, 3}, {2, 4, 5}, 1, 0, 0, 0, 0.5, "TransposeMatMul")};
}

class FusedMatMulTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(FusedMatMulTest, MatchesNumpyMatMulOfTransposedOperands) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, FusedMatMulTest, ::testing::ValuesIn(MatMulRows()), RowName());

// ---------------------------------------------------------------------------------------------
// FusedGemm: Gemm then the named activation, written out

// A FusedGemm row: Gemm (m 3, k 5, n 4; C of shape `c`, none when empty) then `activation` (its attributes
// prefixed "activation_"), against `reference` applied to the float64 Gemm written out.
OpCase GemmRow(std::string name, std::string activation, std::map<std::string, double> activation_attributes,
               std::function<double(double)> reference, int trans_a = 0, int trans_b = 0, double alpha = 1.0,
               double beta = 1.0, Shape c = {4}) {
  const int64_t m = 3, k = 5, n = 4;
  const Shape a_shape = trans_a ? Shape{k, m} : Shape{m, k}, b_shape = trans_b ? Shape{n, k} : Shape{k, n};
  const std::vector<double> a = RandomValues(a_shape, 3, -1.5, 1.5), b = RandomValues(b_shape, 4, -1.5, 1.5);
  const std::vector<double> bias = c.empty() ? std::vector<double>() : RandomValues(c, 5);
  OneNode run;
  run.op = "FusedGemm";
  run.attributes = {{"transA", Attribute::Int(trans_a)},
                    {"transB", Attribute::Int(trans_b)},
                    {"alpha", Attribute::Float(static_cast<float>(alpha))},
                    {"beta", Attribute::Float(static_cast<float>(beta))}};
  if (!activation.empty()) run.attributes["activation"] = Attribute::String(activation);
  for (const auto& [key, value] : activation_attributes)
    run.attributes["activation_" + key] = Attribute::Float(static_cast<float>(value));
  run.inputs = {Doubles(a, a_shape), Doubles(b, b_shape)};
  if (!c.empty()) run.inputs.push_back(Doubles(bias, c));
  auto expected = [=] {
    std::vector<double> values(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += a[static_cast<size_t>(trans_a ? p * m + i : i * k + p)] *
                 b[static_cast<size_t>(trans_b ? j * k + p : p * n + j)];
        double v = alpha * sum;
        if (!bias.empty()) v += beta * bias[static_cast<size_t>(bias.size() == 1 ? 0 : j)];
        values[static_cast<size_t>(i * n + j)] = reference(v);
      }
    return std::vector<Tensor>{Doubles(values, {m, n})};
  };
  return OpCase{std::move(name), std::move(run), expected, 1e-12};
}

double Softplus(double x) { return std::log(1 + std::exp(x)); }

std::vector<OpCase> GemmRows() {
  return {GemmRow(
              "NoActivation", "", {}, [](double x) { return x; }, 0, 0, 0.5, 2.0),
          GemmRow(
              "Relu", "Relu", {}, [](double x) { return x > 0 ? x : 0; }, 0, 1),
          GemmRow(
              "LeakyRelu", "LeakyRelu", {{"alpha", 0.125}}, [](double x) { return x < 0 ? 0.125 * x : x; }, 1, 0),
          GemmRow("LeakyReluDefaultAlpha", "LeakyRelu", {}, [](double x) { return x < 0 ? double{0.01f} * x : x; }),
          GemmRow("Tanh", "Tanh", {}, [](double x) { return std::tanh(x); }, 1, 1, 0.75, 1.0, {1}),
          GemmRow("Sigmoid", "Sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }, 0, 0, 1.0, 1.0, {}),
          GemmRow("HardSigmoid", "HardSigmoid", {{"alpha", 0.25}, {"beta", 0.375}},
                  [](double x) { return std::min(1.0, std::max(0.0, 0.25 * x + 0.375)); }),
          GemmRow("Elu", "Elu", {{"alpha", 0.5}}, [](double x) { return x < 0 ? 0.5 * (std::exp(x) - 1) : x; }),
          GemmRow("Celu", "Celu", {{"alpha", 2.0}},
                  [](double x) { return std::max(0.0, x) + std::min(0.0, 2.0 * (std::exp(x / 2.0) - 1)); }),
          GemmRow("Selu", "Selu", {{"alpha", 1.5}, {"gamma", 1.25}},
                  [](double x) { return 1.25 * (x > 0 ? x : 1.5 * (std::exp(x) - 1)); }),
          GemmRow("Softplus", "Softplus", {}, Softplus),
          GemmRow("Softsign", "Softsign", {}, [](double x) { return x / (1 + std::abs(x)); }),
          GemmRow("ThresholdedRelu", "ThresholdedRelu", {{"alpha", 0.5}}, [](double x) { return x > 0.5 ? x : 0; }),
          GemmRow("ParametricSoftplus", "ParametricSoftplus", {{"alpha", 2.0}, {"beta", 0.5}},
                  [](double x) { return 2.0 * Softplus(0.5 * x); }),
          GemmRow("ScaledTanh", "ScaledTanh", {{"alpha", 1.5}, {"beta", 0.75}},
                  [](double x) { return 1.5 * std::tanh(0.75 * x); })};
}

class FusedGemmTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(FusedGemmTest, IsGemmThenActivation) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, FusedGemmTest, ::testing::ValuesIn(GemmRows()), RowName());

// ---------------------------------------------------------------------------------------------
// ConvGrad against central differences of Conv

// A ConvGrad row (`omitted` outputs left out of the node): each requested gradient against central differences
// through Conv.
OpCase ConvGradRow(std::string name, Shape x_shape, Shape w_shape, AttributeMap attributes,
                   std::vector<int> omitted = {}) {
  const Tensor x = RandomTensor(x_shape, 6), w = RandomTensor(w_shape, 7), b = RandomTensor({w_shape[0]}, 8);
  const OneNode conv = OnnxNode("Conv", {x, w, b}, attributes);
  auto dy = [conv] { return RandomTensor(RunOneNode(conv)[0].shape(), 9); };
  auto present = [omitted](int k) { return !std::count(omitted.begin(), omitted.end(), k); };
  OpCase row{
      std::move(name), OneNode{},
      [=] {
        std::vector<Tensor> grads;
        for (int k = 0; k < 3; ++k)
          if (present(k))
            grads.push_back(CentralDifferenceVjp(OneNodeFunction(conv, k), k == 0 ? x : k == 1 ? w : b, dy(), 1e-5));
        return grads;
      },
      1e-8};
  row.make_node = [=] {
    OneNode run;
    run.op = "ConvGrad";
    run.attributes = attributes;
    run.inputs = {dy(), x, w};
    run.outputs = std::vector<bool>(3, true);
    for (int k : omitted) run.outputs[k] = false;
    return run;
  };
  return row;
}

std::vector<OpCase> ConvGradRows() {
  return {ConvGradRow("LeNetLike", {1, 3, 8, 8}, {4, 3, 5, 5}, {{"kernel_shape", Attribute::Ints({5, 5})}}),
          ConvGradRow("FirstLayerNoDX", {2, 2, 6, 6}, {3, 2, 3, 3}, {}, {0}),
          ConvGradRow("StridePadDilation", {2, 2, 7, 6}, {3, 2, 3, 2},
                      {{"strides", Attribute::Ints({2, 1})},
                       {"pads", Attribute::Ints({1, 0, 2, 1})},
                       {"dilations", Attribute::Ints({1, 2})}}),
          ConvGradRow("Grouped", {1, 4, 5, 5}, {6, 2, 3, 3}, {{"group", Attribute::Int(2)}}),
          ConvGradRow("OneDimensional", {2, 3, 9}, {2, 3, 4}, {{"strides", Attribute::Ints({2})}}),
          ConvGradRow("OnlyDX", {1, 2, 5, 5}, {2, 2, 3, 3}, {{"auto_pad", Attribute::String("SAME_UPPER")}}, {1, 2})};
}

class ConvGradTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(ConvGradTest, MatchesCentralDifferencesOfConv) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, ConvGradTest, ::testing::ValuesIn(ConvGradRows()), RowName());

// ---------------------------------------------------------------------------------------------
// MaxPoolGrad (dY, Indices) and AveragePoolGrad (dY) against central differences of the forward pool

// Distinct values (a shuffled ramp) so that every window has one clear maximum.
Tensor DistinctValues(const Shape& shape, uint64_t seed) {
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) / 8.0 - 3.0;
  std::shuffle(values.begin(), values.end(), std::mt19937_64(seed));
  return Doubles(values, shape);
}

// A MaxPoolGrad row (dY and the Indices MaxPool returns): against central differences through MaxPool.
OpCase MaxPoolGradRow(std::string name, Shape x_shape, AttributeMap attributes) {
  const Tensor x = DistinctValues(x_shape, 10);
  const OneNode pool = OnnxNode("MaxPool", {x}, attributes, 2);
  auto indices = [pool] { return RunOneNode(pool)[1]; };
  OpCase row{std::move(name), OneNode{},
             [=] {
               const Tensor dy = RandomTensor(indices().shape(), 11);
               return std::vector<Tensor>{
                   CentralDifferenceVjp(OneNodeFunction(OnnxNode("MaxPool", {x}, attributes), 0), x, dy, 1e-6)};
             },
             1e-8};
  row.make_node = [=] {
    const Tensor index = indices();
    OneNode run;
    run.domain = "";
    run.op = "MaxPoolGrad";
    run.attributes = attributes;
    run.attributes["storage_order"] = Attribute::Int(0);
    run.inputs = {RandomTensor(index.shape(), 11), index};
    Shape declared = x_shape;
    declared[0] = -1;  // symbolic batch, as in exported models
    run.declared_outputs[0] = declared;
    return run;
  };
  return row;
}

std::vector<OpCase> MaxPoolGradRows() {
  return {MaxPoolGradRow("LeNet2x2", {1, 2, 6, 6},
                         {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}),
          MaxPoolGradRow("OddInputFloors", {2, 2, 7, 5},
                         {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}),
          MaxPoolGradRow("OverlappingWindowsAccumulate", {1, 1, 5, 5}, {{"kernel_shape", Attribute::Ints({3, 3})}}),
          MaxPoolGradRow("PaddedStride2", {1, 2, 6, 5},
                         {{"kernel_shape", Attribute::Ints({3, 3})},
                          {"strides", Attribute::Ints({2, 2})},
                          {"pads", Attribute::Ints({1, 1, 1, 1})}}),
          MaxPoolGradRow("OneDimensional", {2, 3, 9},
                         {{"kernel_shape", Attribute::Ints({3})}, {"strides", Attribute::Ints({3})}})};
}

class MaxPoolGradTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(MaxPoolGradTest, ScattersToTheIndicesMaxPoolReturns) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, MaxPoolGradTest, ::testing::ValuesIn(MaxPoolGradRows()), RowName());

// An AveragePoolGrad row: against central differences through AveragePool.
OpCase AveragePoolGradRow(std::string name, Shape x_shape, AttributeMap attributes) {
  const Tensor x = RandomTensor(x_shape, 12);
  const OneNode pool = OnnxNode("AveragePool", {x}, attributes);
  auto dy = [pool] { return RandomTensor(RunOneNode(pool)[0].shape(), 13); };
  OpCase row{std::move(name), OneNode{},
             [=] { return std::vector<Tensor>{CentralDifferenceVjp(OneNodeFunction(pool, 0), x, dy(), 1e-5)}; }, 1e-8};
  row.make_node = [=] {
    OneNode run;
    run.domain = "";
    run.op = "AveragePoolGrad";
    run.attributes = attributes;
    run.inputs = {dy()};
    run.declared_outputs[0] = x_shape;
    return run;
  };
  return row;
}

std::vector<OpCase> AveragePoolGradRows() {
  return {AveragePoolGradRow("Plain2x2", {2, 2, 6, 6},
                             {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}),
          AveragePoolGradRow("OddInputFloors", {1, 2, 7, 7},
                             {{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})}}),
          AveragePoolGradRow("PadsExcluded", {1, 1, 5, 6},
                             {{"kernel_shape", Attribute::Ints({3, 3})},
                              {"strides", Attribute::Ints({2, 2})},
                              {"pads", Attribute::Ints({1, 1, 1, 1})},
                              {"count_include_pad", Attribute::Int(0)}}),
          AveragePoolGradRow("PadsIncluded", {1, 1, 5, 6},
                             {{"kernel_shape", Attribute::Ints({3, 3})},
                              {"strides", Attribute::Ints({2, 2})},
                              {"pads", Attribute::Ints({1, 1, 1, 1})},
                              {"count_include_pad", Attribute::Int(1)}}),
          AveragePoolGradRow("OneDimensional", {2, 2, 8}, {{"kernel_shape", Attribute::Ints({3})}}),
          AveragePoolGradRow("ThreeDimensional", {1, 1, 4, 4, 5},
                             {{"kernel_shape", Attribute::Ints({2, 2, 2})}, {"strides", Attribute::Ints({2, 2, 2})}})};
}

class AveragePoolGradTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(AveragePoolGradTest, MatchesCentralDifferencesOfAveragePool) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, AveragePoolGradTest, ::testing::ValuesIn(AveragePoolGradRows()), RowName());

// ---------------------------------------------------------------------------------------------
// BatchNormInternal against the batch-statistics formula; BatchNormalizationGrad against central
// differences of training-mode BatchNormalization

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

// A BatchNormInternal row over X of `x_shape`: Y and, in training, the running and saved statistics, written out.
OpCase BatchNormInternalRow(std::string name, Shape x_shape, double eps = 1e-5, double mom = 0.9,
                            bool training = true) {
  const int64_t channels = x_shape[1], spatial = NumElements(x_shape) / (x_shape[0] * x_shape[1]);
  const std::vector<double> x = RandomValues(x_shape, 14, -2, 3), scale = RandomValues({channels}, 15),
                            bias = RandomValues({channels}, 16), running_mean = RandomValues({channels}, 17),
                            running_var = RandomValues({channels}, 18, 0.5, 2);
  OneNode run;
  run.op = "BatchNormInternal";
  run.attributes = {{"epsilon", Attribute::Float(static_cast<float>(eps))},
                    {"momentum", Attribute::Float(static_cast<float>(mom))},
                    {"training_mode", Attribute::Int(training ? 1 : 0)}};
  run.inputs = {Doubles(x, x_shape), Doubles(scale, {channels}), Doubles(bias, {channels}),
                Doubles(running_mean, {channels}), Doubles(running_var, {channels})};
  run.outputs = std::vector<bool>(training ? 5 : 1, true);
  auto expected = [=] {
    std::vector<double> mean, var;
    ChannelMoments(x, x_shape, mean, var);
    if (!training) {
      mean = running_mean;
      var = running_var;
    }
    // The attributes are stored as float32: the reference uses those values.
    const double epsilon = static_cast<float>(eps), momentum = static_cast<float>(mom);
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
    if (!training) return std::vector<Tensor>{Doubles(y, x_shape)};
    return std::vector<Tensor>{Doubles(y, x_shape), Doubles(new_mean, {channels}), Doubles(new_var, {channels}),
                               Doubles(mean, {channels}), Doubles(inv_std, {channels})};
  };
  return OpCase{std::move(name), std::move(run), expected, 1e-12};
}

std::vector<OpCase> BatchNormInternalRows() {
  return {BatchNormInternalRow("Image", {2, 3, 4, 4}), BatchNormInternalRow("Rank2", {5, 4}, 1e-3, 0.8),
          BatchNormInternalRow("OneDimensional", {3, 2, 6}, 1e-5, 0.5),
          BatchNormInternalRow("InferenceUsesRunningStats", {2, 3, 3, 3}, 1e-5, 0.9, false)};
}

class BatchNormInternalTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(BatchNormInternalTest, MatchesBatchStatisticsFormula) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, BatchNormInternalTest, ::testing::ValuesIn(BatchNormInternalRows()), RowName());

// A BatchNormalizationGrad row (the batch's mean and inverse standard deviation as saved statistics): dX, dScale
// and dB against central differences through training-mode BatchNormalization.
OpCase BatchNormGradRow(std::string name, Shape x_shape, double epsilon = 1e-5) {
  const int64_t channels = x_shape[1];
  const Tensor x = RandomTensor(x_shape, 19, -2, 3), scale = RandomTensor({channels}, 20),
               bias = RandomTensor({channels}, 21);
  const Tensor running_mean = RandomTensor({channels}, 22), running_var = RandomTensor({channels}, 23, 0.5, 2);
  const Tensor dy = RandomTensor(x_shape, 24);
  std::vector<double> mean, var, inv_std;
  ChannelMoments(x.ToDoubleVector(), x_shape, mean, var);
  for (double v : var) inv_std.push_back(1 / std::sqrt(v + epsilon));
  OneNode run;
  run.op = "BatchNormalizationGrad";
  run.attributes = {{"epsilon", Attribute::Float(static_cast<float>(epsilon))}};
  run.inputs = {dy, x, scale, Doubles(mean, {channels}), Doubles(inv_std, {channels})};
  run.outputs = std::vector<bool>(3, true);
  auto expected = [=] {
    const AttributeMap training = {{"epsilon", Attribute::Float(static_cast<float>(epsilon))},
                                   {"training_mode", Attribute::Int(1)}};
    const std::vector<Tensor> inputs = {x, scale, bias, running_mean, running_var};
    std::vector<Tensor> grads;
    for (size_t k = 0; k < 3; ++k)
      grads.push_back(CentralDifferenceVjp(OneNodeFunction(OnnxNode("BatchNormalization", inputs, training, 3), k),
                                           inputs[k], dy, 1e-5));
    return grads;
  };
  return OpCase{std::move(name), std::move(run), expected, 1e-6};
}

std::vector<OpCase> BatchNormGradRows() {
  return {BatchNormGradRow("Image", {2, 3, 3, 4}), BatchNormGradRow("Rank2", {6, 3}, 1e-3),
          BatchNormGradRow("OneDimensional", {3, 2, 5})};
}

class BatchNormalizationGradTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(BatchNormalizationGradTest, MatchesCentralDifferencesOfTrainingBatchNorm) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, BatchNormalizationGradTest, ::testing::ValuesIn(BatchNormGradRows()), RowName());

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

class OrtFusedErrorTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OrtFusedErrorTest, FailsNamingTheNode) {
  const OpCase& c = GetParam();
  const OneNode& run = c.node;
  const std::string node =
      "node '" + std::string(kOneNodeName) + "' (" + (run.domain.empty() ? "" : run.domain + ".") + run.op + ")";
  try {
    RunOneNodeValues(run);
    ADD_FAILURE() << "expected an error containing: " << c.error_needle;
  } catch (const Error& e) {
    EXPECT_EQ(ErrorCodeName(e.code()), ErrorCodeName(c.error_code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(node + ": " + c.error_needle), std::string::npos) << e.what();
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

std::vector<OpCase> ErrorRows() {
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
       ErrorCode::kInvalidModel, "attribute 'adam_mode' = 2: must be 0 (PyTorch AdamW) or 1"},
      {"AdamWTorchModeWithoutBiasCorrection",
       Adam({Seq({{2}}), Seq({{2}}), Seq({{2}}), Seq({{2}})},
            {{"adam_mode", Attribute::Int(0)}, {"correct_bias", Attribute::Int(0)}}),
       ErrorCode::kInvalidModel, "attribute 'correct_bias' = 0: must be 1 with adam_mode 0 (PyTorch AdamW)"},
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

INSTANTIATE_TEST_SUITE_P(Rows, OrtFusedErrorTest,
                         ::testing::ValuesIn(testing::RowsWith({testing::OrtFusedCases}, testing::HasError)),
                         RowName());

}  // namespace

std::vector<testing::OpCase> testing::OrtFusedCases() {
  std::vector<testing::OpCase> rows = ErrorRows();
  for (auto* table : {MatMulRows, GemmRows, ConvGradRows, MaxPoolGradRows, AveragePoolGradRows, BatchNormInternalRows,
                      BatchNormGradRows})
    rows = Concat(table(), rows);
  return rows;
}

}  // namespace edgetrain
