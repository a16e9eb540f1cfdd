// The float32 normalization and softmax kernels (BatchNormalization, LayerNormalization, Softmax,
// LogSoftmax and their fused gradients), on each kernel backend, against the float64 reference
// kernels on the same values. Shapes are odd on purpose: they exercise the oneDNN paths where those
// apply (float32 LayerNorm with Scale of the normalized shape, softmax rows of 4096+ elements in all)
// and the reference fallbacks beside them (broadcast Scale, float64 statistics, strided softmax axis).
// Also MaxPool and MaxPoolGrad on ties and NaNs, in unrolled (2x2) and general (clipped) windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <cmath>
#include <functional>
#include <limits>

#include "backend_check.hpp"
#include "core/threading.hpp"
#include "ops/batchnorm_fast.hpp"
#include "ops/pool_windows.hpp"

namespace edgetrain::testing {
namespace {

// A gradient node of `domain` with its three outputs (dX and the parameters' gradients) requested.
OneNode GradNode(const std::string& op, const std::string& domain, std::vector<CaseInput> inputs,
                 AttributeMap attributes, size_t outputs = 3) {
  OneNode node;
  node.op = op;
  node.domain = domain;
  node.inputs = std::move(inputs);
  node.attributes = std::move(attributes);
  node.outputs.assign(outputs, true);
  return node;
}

Attribute Int(int64_t v) { return Attribute::Int(v); }
Tensor AxesTensor(std::vector<int64_t> axes) {
  const int64_t n = static_cast<int64_t>(axes.size());
  return Tensor::FromVector<int64_t>(std::move(axes), {n});
}
Attribute Float(float v) { return Attribute::Float(v); }

// BatchNormalization over X of `shape` with per-channel parameters; positive running variance.
OneNode BatchNorm(const Shape& shape, bool training, int64_t opset = 15, size_t outputs = 3) {
  const Shape channels = {shape[1]};
  OneNode node = OnnxNode("BatchNormalization",
                          {RandomTensor(shape, 1, -2.0, 3.0), RandomTensor(channels, 2, 0.5, 1.5),
                           RandomTensor(channels, 3), RandomTensor(channels, 4), RandomTensor(channels, 5, 0.5, 2.0)},
                          {{"epsilon", Float(1e-3f)}, {"momentum", Float(0.7f)}}, training ? outputs : 1, opset);
  if (opset >= 14) node.attributes["training_mode"] = Int(training ? 1 : 0);
  return node;
}

// ai.edgetrain BatchNormalizationRelu / BatchNormalizationClip (Clip's bounds -0.5 and 1, both applied) /
// BatchNormalizationSilu over BatchNorm.
OneNode BatchNormActivation(const std::string& op, const Shape& shape, bool training) {
  OneNode node = BatchNorm(shape, training);
  node.op = op;
  node.domain = kEdgetrainDomain;
  if (op == "BatchNormalizationClip") {
    node.inputs.push_back(Tensor::Scalar<double>(-0.5));
    node.inputs.push_back(Tensor::Scalar<double>(1.0));
  }
  return node;
}

OneNode BatchNormGrad(const Shape& shape) {
  return GradNode("BatchNormalizationGrad", kEdgetrainDomain,
                  {RandomTensor(shape, 6), RandomTensor(shape, 7, -1.0, 4.0), RandomTensor({shape[1]}, 8, 0.5, 1.5)},
                  {{"epsilon", Float(1e-4f)}});
}

// A per-channel map [2, C] as a training BatchNormalization's output 5 holds it: a in [0.5, 1.5), b in [-1, 1).
Tensor AffineMap(int64_t channels, uint64_t seed) {
  std::vector<double> map = RandomValues({channels}, seed, 0.5, 1.5), shift = RandomValues({channels}, seed + 1);
  map.insert(map.end(), shift.begin(), shift.end());
  return Tensor::FromVector<double>(map, {2, channels});
}

// ai.edgetrain.ChannelAffine (the session's recomputed BatchNormalization), Clip's bounds -0.5 and 1.
OneNode ChannelAffine(const Shape& shape, const std::string& activation) {
  OneNode node = GradNode("ChannelAffine", kEdgetrainDomain,
                          {RandomTensor(shape, 31, -2.0, 2.0), AffineMap(shape[1], 32)},
                          {{"activation", Attribute::String(activation)}}, 1);
  if (activation == "Clip") {
    node.inputs.push_back(Tensor::Scalar<double>(-0.5));
    node.inputs.push_back(Tensor::Scalar<double>(1.0));
  }
  return node;
}

// ai.edgetrain.BatchNormalizationActivationGrad: BatchNormalizationGrad of dY masked by the activation of X's map.
OneNode BatchNormActivationGrad(const Shape& shape, const std::string& activation) {
  OneNode node = GradNode("BatchNormalizationActivationGrad", kEdgetrainDomain,
                          {RandomTensor(shape, 33), RandomTensor(shape, 34, -2.0, 2.0),
                           RandomTensor({shape[1]}, 35, 0.5, 1.5), AffineMap(shape[1], 36)},
                          {{"epsilon", Float(1e-4f)}, {"activation", Attribute::String(activation)}});
  if (activation == "Clip") {
    node.inputs.push_back(Tensor::Scalar<double>(-0.5));
    node.inputs.push_back(Tensor::Scalar<double>(1.0));
  }
  return node;
}

// ORT's BatchNormalizationGrad takes the forward's saved mean and inverse standard deviation.
OneNode OrtBatchNormGrad(const Shape& shape) {
  OneNode forward = BatchNorm(shape, true, 9, 5);
  const std::vector<Tensor> saved = RunNode(forward);
  return GradNode("BatchNormalizationGrad", kMicrosoftDomain,
                  {RandomTensor(shape, 9), forward.inputs[0].tensor, forward.inputs[1].tensor, saved[3], saved[4]}, {});
}

// LayerNormalization of X at `axis`; Scale (and B unless `bias` is empty) of the given shapes.
OneNode LayerNorm(const Shape& x, int64_t axis, const Shape& scale, const Shape& bias, size_t outputs = 3,
                  int64_t stash_type = 1) {
  std::vector<Tensor> inputs = {RandomTensor(x, 11, -1.0, 3.0), RandomTensor(scale, 12, 0.5, 1.5)};
  if (!bias.empty()) inputs.push_back(RandomTensor(bias, 13));
  return OnnxNode("LayerNormalization", inputs,
                  {{"axis", Int(axis)}, {"epsilon", Float(1e-3f)}, {"stash_type", Int(stash_type)}}, outputs);
}

// LayerNormalizationGrad with the statistics of the float64 forward (their float32 copies for the float32 run).
OneNode LayerNormGrad(const Shape& x, int64_t axis, const Shape& scale) {
  OneNode forward = LayerNorm(x, axis, scale, {}, 3, static_cast<int64_t>(DataType::kFloat64));
  const std::vector<Tensor> stats = RunNode(forward);
  return GradNode("LayerNormalizationGrad", kEdgetrainDomain,
                  {RandomTensor(x, 14), forward.inputs[0].tensor, forward.inputs[1].tensor, stats[1], stats[2]},
                  {{"axis", Int(axis)}});
}

OneNode Softmax(const std::string& op, const Shape& x, int64_t axis, int64_t opset = 13) {
  return OnnxNode(op, {RandomTensor(x, 21, -4.0, 4.0)}, {{"axis", Int(axis)}}, 1, opset);
}

// SoftmaxGrad / LogSoftmaxGrad of the float64 forward's output.
OneNode SoftmaxGrad(const std::string& forward_op, const Shape& x, int64_t axis) {
  const Tensor y = RunNode(Softmax(forward_op, x, axis))[0];
  return GradNode(forward_op + "Grad", kEdgetrainDomain, {RandomTensor(x, 22), y}, {{"axis", Int(axis)}}, 1);
}

}  // namespace

// Float32 on each backend against the float64 inputs on the reference kernels: every output within 1e-4 of
// the largest magnitude of the float64 output.
std::vector<OpCase> NormBackendCases() {
  auto row = [](std::string name, std::function<OneNode()> make) {
    return BackendCase(std::move(name), std::move(make), BackendCheck::kFloat32VsFloat64);
  };
  return {
      row("BatchNormTraining",
          [] {
            return BatchNorm({3, 5, 7, 3}, true);
          }),
      row("BatchNormTrainingRank2",
          [] {
            return BatchNorm({9, 4}, true);
          }),
      row("BatchNormTrainingLongPlanes",
          [] {
            return BatchNorm({2, 3, 9001}, true);
          }),
      row("BatchNormTrainingOpset9SavedStatistics",
          [] {
            return BatchNorm({4, 3, 2, 5}, true, 9, 5);
          }),
      row("BatchNormInference",
          [] {
            return BatchNorm({2, 3, 9, 5}, false);
          }),
      row("BatchNormGrad",
          [] {
            return BatchNormGrad({3, 5, 7, 3});
          }),
      row("BatchNormGradLongPlanes",
          [] {
            return BatchNormGrad({2, 2, 8195});
          }),
      row("OrtBatchNormGradSavedStatistics",
          [] {
            return OrtBatchNormGrad({4, 3, 5, 3});
          }),
      row("BatchNormReluTraining",
          [] {
            return BatchNormActivation("BatchNormalizationRelu", {3, 5, 7, 3}, true);
          }),
      row("BatchNormClipTraining",
          [] {
            return BatchNormActivation("BatchNormalizationClip", {2, 9, 33, 35}, true);
          }),
      row("BatchNormClipInference",
          [] {
            return BatchNormActivation("BatchNormalizationClip", {2, 3, 9, 5}, false);
          }),
      row("BatchNormSiluTrainingLongOddPlanes",
          [] {
            return BatchNormActivation("BatchNormalizationSilu", {2, 9, 33, 35}, true);
          }),
      row("BatchNormSiluInference",
          [] {
            return BatchNormActivation("BatchNormalizationSilu", {2, 3, 9, 5}, false);
          }),
      // The fast float32 kernels' edges: C not a multiple of 8, batch 1, 1x1 and 7x7 planes, planes longer than
      // their float runs (1024), a mean far from 0 (the sums are taken about a shift).
      row("BatchNormTrainingBatch1Odd",
          [] {
            return BatchNorm({1, 13, 7, 7}, true);
          }),
      row("BatchNormTrainingPlane1x1",
          [] {
            return BatchNorm({5, 11, 1, 1}, true);
          }),
      row("BatchNormTrainingLongOddPlanes",
          [] {
            return BatchNorm({2, 9, 33, 35}, true, 9, 5);
          }),
      row("BatchNormGradBatch1Odd",
          [] {
            return BatchNormGrad({1, 13, 7, 7});
          }),
      row("BatchNormGradPlane1x1",
          [] {
            return BatchNormGrad({5, 11, 1, 1});
          }),
      row("BatchNormGradLongOddPlanes",
          [] {
            return BatchNormGrad({2, 9, 33, 35});
          }),
      row("BatchNormGradFarMean",
          [] {
            OneNode node = BatchNormGrad({3, 10, 6, 6});
            node.inputs[1].tensor = RandomTensor({3, 10, 6, 6}, 7, 60.0, 61.0);
            return node;
          }),
      row("OrtBatchNormGradOdd",
          [] {
            return OrtBatchNormGrad({2, 13, 7, 7});
          }),
      row("ChannelAffineRelu",
          [] {
            return ChannelAffine({3, 5, 7, 3}, "Relu");
          }),
      row("ChannelAffineClipLongOddPlanes",
          [] {
            return ChannelAffine({2, 9, 33, 35}, "Clip");
          }),
      row("ChannelAffineNoActivation",
          [] {
            return ChannelAffine({1, 13, 7, 7}, "");
          }),
      row("ChannelAffineSilu",
          [] {
            return ChannelAffine({2, 9, 7, 7}, "Silu");
          }),
      row("BatchNormReluGrad",
          [] {
            return BatchNormActivationGrad({3, 5, 7, 3}, "Relu");
          }),
      row("BatchNormClipGradLongOddPlanes",
          [] {
            return BatchNormActivationGrad({2, 9, 33, 35}, "Clip");
          }),
      row("BatchNormSiluGradLongOddPlanes",
          [] {
            return BatchNormActivationGrad({2, 9, 33, 35}, "Silu");
          }),
      row("LayerNormLastAxis",
          [] {
            return LayerNorm({4, 6, 33}, -1, {33}, {33});
          }),
      row("LayerNormTwoAxes",
          [] {
            return LayerNorm({4, 6, 33}, 1, {6, 33}, {6, 33});
          }),
      row("LayerNormBroadcastScale",
          [] {
            return LayerNorm({4, 6, 33}, 1, {33}, {1, 33});
          }),
      row("LayerNormWithoutBias",
          [] {
            return LayerNorm({5, 17}, -1, {17}, {});
          }),
      row("LayerNormOnlyY",
          [] {
            return LayerNorm({7, 3, 20}, 2, {20}, {20}, 1);
          }),
      row("LayerNormOnlyStatistics",  // Y unread, as the gradient's copy of a PyTorch export runs it
          [] {
            OneNode node = LayerNorm({6, 50}, -1, {50}, {50});
            node.outputs = {false, true, true};
            return node;
          }),
      row("LayerNormFloat64Statistics",
          [] {
            return LayerNorm({4, 50}, 1, {50}, {50}, 3, static_cast<int64_t>(DataType::kFloat64));
          }),
      row("LayerNormGradLastAxis",
          [] {
            return LayerNormGrad({4, 6, 33}, -1, {33});
          }),
      row("LayerNormGradTwoAxes",
          [] {
            return LayerNormGrad({4, 6, 33}, 1, {6, 33});
          }),
      row("LayerNormGradBroadcastScale",
          [] {
            return LayerNormGrad({4, 6, 33}, 1, {1, 33});
          }),
      row("SoftmaxLastAxis",
          [] {
            return Softmax("Softmax", {70, 3, 67}, -1);
          }),
      row("LogSoftmaxLastAxis",
          [] {
            return Softmax("LogSoftmax", {70, 3, 67}, -1);
          }),
      row("SoftmaxOpset11Coerced",
          [] {
            return Softmax("Softmax", {40, 5, 30}, 1, 11);
          }),
      row("SoftmaxMiddleAxis",
          [] {
            return Softmax("Softmax", {40, 67, 3}, 1);
          }),
      row("SoftmaxSmallRows",
          [] {
            return Softmax("LogSoftmax", {6, 10}, -1);
          }),
      row("SoftmaxGradLastAxis",
          [] {
            return SoftmaxGrad("Softmax", {70, 3, 67}, -1);
          }),
      row("LogSoftmaxGradLastAxis",
          [] {
            return SoftmaxGrad("LogSoftmax", {70, 3, 67}, -1);
          }),
      row("LogSoftmaxGradMiddleAxis",
          [] {
            return SoftmaxGrad("LogSoftmax", {30, 67, 3}, 1);
          }),
      // The AVX2 sigmoid: a count that leaves a tail, and inputs past exp's float range on both sides.
      BackendCase("Sigmoid", [] { return OnnxNode("Sigmoid", {RandomTensor({3, 5, 7, 3}, 31, -12.0, 12.0)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      // ReLU6's gradient in one pass (AVX2 on float32): bounds 0 and 6, Y on both sides of each, a tail.
      BackendCase("ClipGrad",
                  [] {
                    return GradNode("ClipGrad", kEdgetrainDomain,
                                    {RandomTensor({3, 5, 7, 3}, 33), RandomTensor({3, 5, 7, 3}, 34, -1.0, 7.0),
                                     Doubles({0.0}, {}), Doubles({6.0}, {})},
                                    {}, 1);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-7),
      BackendCase("SigmoidBeyondExpRange",
                  [] { return OnnxNode("Sigmoid", {RandomTensor({2, 101}, 32, -150.0, 150.0)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      // Erf and Exp on vector_math.hpp (GELU as exporters write it): every piece of the fits, a tail.
      BackendCase("ErfVector", [] { return OnnxNode("Erf", {RandomTensor({3, 7, 43}, 38, -5.0, 5.0)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("ExpVector", [] { return OnnxNode("Exp", {RandomTensor({5, 61}, 39, -30.0, 30.0)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      // SiLU and its gradient in one pass each (AVX2 on float32): a tail, inputs past exp's float range.
      BackendCase("Silu",
                  [] { return GradNode("Silu", kEdgetrainDomain, {RandomTensor({3, 5, 7, 3}, 38, -12.0, 12.0)}, {}, 1); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("SiluBeyondExpRange",
                  [] { return GradNode("Silu", kEdgetrainDomain, {RandomTensor({2, 101}, 39, -150.0, 150.0)}, {}, 1); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("SiluGrad",
                  [] {
                    return GradNode("SiluGrad", kEdgetrainDomain,
                                    {RandomTensor({3, 5, 7, 3}, 40), RandomTensor({3, 5, 7, 3}, 41, -12.0, 12.0)}, {}, 1);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      // Plane sums of squeeze-excitation: float rows summed in double by 8 lanes; a tail, planes of one element,
      // and axes that are not trailing (the blocked path).
      BackendCase("GlobalAveragePoolOddPlanes",
                  [] { return OnnxNode("GlobalAveragePool", {RandomTensor({3, 5, 7, 3}, 48, -1.0, 3.0)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("GlobalAveragePoolPlanesOfOne",
                  [] { return OnnxNode("GlobalAveragePool", {RandomTensor({2, 3, 1, 1}, 49)}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-7),
      BackendCase("ReduceSumTrailingAxes",
                  [] { return OnnxNode("ReduceSum", {RandomTensor({3, 5, 7, 3}, 50), AxesTensor({2, 3})}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("ReduceSumTrailingAxesOfOne",
                  [] { return OnnxNode("ReduceSum", {RandomTensor({3, 5, 1, 1}, 51), AxesTensor({2, 3})}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-7),
      BackendCase("ReduceSumLeadingAxes",
                  [] { return OnnxNode("ReduceSum", {RandomTensor({3, 5, 7, 3}, 52), AxesTensor({0, 2})}, {}); },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("ReduceMeanLastAxisLongRows",
                  [] {
                    return OnnxNode("ReduceMean", {RandomTensor({4, 1003}, 53, -1.0, 3.0)}, {{"axes", Attribute::Ints({1})}},
                                    1, 17);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      // A squeeze-excitation input's gradient in one pass: dY * s + g per (image, channel), and every operand
      // broadcast (the expanded C adds the leading axis).
      BackendCase("MulAddPerChannel",
                  [] {
                    return GradNode("MulAdd", kEdgetrainDomain,
                                    {RandomTensor({2, 6, 5, 7}, 54), RandomTensor({2, 6, 1, 1}, 55),
                                     RandomTensor({2, 6, 1, 1}, 56), AxesTensor({2, 6, 5, 7})},
                                    {}, 1);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("MulAddEveryOperandBroadcast",
                  [] {
                    return GradNode("MulAdd", kEdgetrainDomain,
                                    {RandomTensor({6, 1}, 57), RandomTensor({1, 5}, 58), RandomTensor({1}, 59),
                                     AxesTensor({2, 1, 1})},
                                    {}, 1);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
      BackendCase("SiluGradBeyondExpRange",
                  [] {
                    return GradNode("SiluGrad", kEdgetrainDomain,
                                    {RandomTensor({2, 101}, 42), RandomTensor({2, 101}, 43, -150.0, 150.0)}, {}, 1);
                  },
                  BackendCheck::kFloat32VsFloat64, 1e-6),
  };
}

namespace {

class NormBackends : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override { saved_ = ActiveKernelBackend(); }
  void TearDown() override { SetKernelBackend(saved_); }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

TEST_P(NormBackends, ReferenceFloat32MatchesFloat64) {
  CheckBackends(GetParam(), KernelBackend::kReference, GetParam().name + " (reference)");
}

TEST_P(NormBackends, DnnlFloat32MatchesFloat64) {
  if (!DnnlAvailable()) GTEST_SKIP() << "built without oneDNN";
  CheckBackends(GetParam(), KernelBackend::kDnnl, GetParam().name + " (oneDNN)");
}

INSTANTIATE_TEST_SUITE_P(Rows, NormBackends, ::testing::ValuesIn(RowsWith({NormBackendCases}, HasBackendCheck)),
                         RowName());

// batchnorm_fast.hpp's portable loops and AVX2 clone (where the CPU has it), called directly at 1 and 2 threads,
// against the float64 reference kernels: Y and the batch statistics, then dX, dScale, dBias with the statistics
// recomputed and with the forward's saved ones.
std::vector<double> Values(const Tensor& t) { return t.ToDoubleVector(); }

void ExpectNearLargest(const std::vector<float>& actual, const std::vector<double>& expected, double tolerance,
                       const std::string& label) {
  ASSERT_EQ(actual.size(), expected.size()) << label;
  double largest = 0.0;
  for (double v : expected) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tolerance * largest) << label << " element " << i;
}

void ExpectNearLargest(const std::vector<double>& actual, const std::vector<double>& expected, double tolerance,
                       const std::string& label) {
  ExpectNearLargest(std::vector<float>(actual.begin(), actual.end()), expected, tolerance, label);
}

// The fast BatchNorm kernels' ISAs that this CPU runs: portable, then AVX2 and AVX-512 where it has them.
std::vector<batchnorm::Isa> IsasOfThisCpu() {
  std::vector<batchnorm::Isa> isas = {batchnorm::Isa::kPortable};
  if (batchnorm::BestIsa() != batchnorm::Isa::kPortable) isas.push_back(batchnorm::Isa::kAvx2);
  if (batchnorm::BestIsa() == batchnorm::Isa::kAvx512) isas.push_back(batchnorm::Isa::kAvx512);
  return isas;
}

std::string IsaName(batchnorm::Isa isa) {
  return isa == batchnorm::Isa::kAvx512 ? " AVX-512" : isa == batchnorm::Isa::kAvx2 ? " AVX2" : " portable";
}

TEST(BatchNormFastKernels, EveryIsaMatchesTheFloat64Reference) {
  const std::vector<batchnorm::Isa> isas = IsasOfThisCpu();
  const std::vector<std::pair<Shape, double>> rows = {
      {{1, 13, 7, 7}, 0.0}, {{5, 11, 1, 1}, 0.0}, {{2, 9, 33, 35}, 0.0}, {{3, 10, 1}, 0.0}, {{4, 3, 5, 5}, 50.0}};
  const double epsilon = static_cast<double>(1e-3f);
  for (const auto& [shape, mean_offset] : rows) {
    OneNode forward = BatchNorm(shape, true, 9, 5);
    forward.inputs[0].tensor = RandomTensor(shape, 1, mean_offset - 2.0, mean_offset + 3.0);
    const std::vector<Tensor> expected = RunOnBackend(KernelBackend::kReference, forward);
    const Tensor dy = RandomTensor(shape, 6);
    const std::vector<Tensor> expected_grad = RunOnBackend(
        KernelBackend::kReference,
        GradNode("BatchNormalizationGrad", kEdgetrainDomain, {dy, forward.inputs[0].tensor, forward.inputs[1].tensor},
                 {{"epsilon", Float(1e-3f)}}));
    const int64_t batch = shape[0], channels = shape[1], spatial = NumElements(shape) / (batch * channels);
    const std::vector<double> xd = Values(forward.inputs[0].tensor), dyd = Values(dy);
    const std::vector<float> x(xd.begin(), xd.end()), dy32(dyd.begin(), dyd.end());
    const std::vector<double> scale = Values(forward.inputs[1].tensor), bias = Values(forward.inputs[2].tensor);
    const std::vector<double> saved_mean = Values(expected[3]), saved_inv_std = Values(expected[4]);
    const size_t c = static_cast<size_t>(channels);
    for (batchnorm::Isa isa : isas) {
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const std::string label = ShapeToString(shape) + IsaName(isa) + " threads " + std::to_string(threads);
        std::vector<float> y(x.size()), dx(x.size());
        std::vector<double> mean(c), var(c), inv_std(c), dscale(c), dbias(c);
        batchnorm::TrainingForward(pool, isa, x.data(), y.data(), batch, channels, spatial, scale.data(), bias.data(),
                                   epsilon, mean.data(), var.data());
        for (size_t k = 0; k < c; ++k) inv_std[k] = 1.0 / std::sqrt(var[k] + epsilon);
        ExpectNearLargest(y, Values(expected[0]), 1e-5, label + " Y");
        ExpectNearLargest(mean, saved_mean, 1e-6, label + " mean");
        ExpectNearLargest(inv_std, saved_inv_std, 1e-5, label + " inv_std");
        for (bool saved : {false, true}) {
          const std::string grad_label = label + (saved ? " saved statistics" : " recomputed statistics");
          batchnorm::TrainingBackward(pool, isa, dy32.data(), x.data(), dx.data(), batch, channels, spatial,
                                      scale.data(), saved ? saved_mean.data() : nullptr,
                                      saved ? saved_inv_std.data() : nullptr, epsilon, dscale.data(), dbias.data());
          ExpectNearLargest(dx, Values(expected_grad[0]), 1e-5, grad_label + " dX");
          ExpectNearLargest(dscale, Values(expected_grad[1]), 1e-5, grad_label + " dScale");
          ExpectNearLargest(dbias, Values(expected_grad[2]), 1e-5, grad_label + " dBias");
        }
      }
    }
  }
}

// BatchNormalizationSilu's kernels on every ISA against the chain in float64: y = silu(xhat * scale + bias), and the
// backward with dY at SiLU's output (dv = dy * s * (1 + v * (1 - s)), then BatchNormalization's backward of dv).
// ApplyAffine of the forward's map gives its y again, bit for bit.
TEST(BatchNormFastKernels, SiluForwardAndGateMatchFloat64OnEveryIsa) {
  const std::vector<batchnorm::Isa> isas = IsasOfThisCpu();
  const double epsilon = 1e-5;
  for (const Shape& shape : {Shape{1, 13, 7, 7}, Shape{2, 9, 33, 35}, Shape{4, 3, 5, 5}, Shape{3, 10, 1}}) {
    const int64_t batch = shape[0], channels = shape[1], spatial = NumElements(shape) / (batch * channels);
    const std::vector<double> xd = Values(RandomTensor(shape, 11, -3.0, 4.0)), dyd = Values(RandomTensor(shape, 12));
    const std::vector<float> x(xd.begin(), xd.end()), dy(dyd.begin(), dyd.end());
    const std::vector<double> scale = Values(RandomTensor({channels}, 13, 0.5, 2.5)),
                              bias = Values(RandomTensor({channels}, 14, -1.0, 1.0));
    const double count = static_cast<double>(batch * spatial);
    std::vector<double> z(x.size()), dx(x.size()), dscale(channels), dbias(channels);
    for (int64_t c = 0; c < channels; ++c) {
      auto index = [&](int64_t n, int64_t i) { return static_cast<size_t>((n * channels + c) * spatial + i); };
      double mean = 0, var = 0;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < spatial; ++i) mean += x[index(n, i)] / count;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < spatial; ++i) var += (x[index(n, i)] - mean) * (x[index(n, i)] - mean) / count;
      const double inv_std = 1.0 / std::sqrt(var + epsilon);
      std::vector<double> dv(static_cast<size_t>(batch * spatial)), xhat(dv.size());
      double sum_dv = 0, sum_dv_xhat = 0;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < spatial; ++i) {
          const size_t k = static_cast<size_t>(n * spatial + i);
          xhat[k] = (x[index(n, i)] - mean) * inv_std;
          const double v = xhat[k] * scale[c] + bias[c], s = 1.0 / (1.0 + std::exp(-v));
          z[index(n, i)] = v * s;
          dv[k] = dy[index(n, i)] * s * (1.0 + v * (1.0 - s));
          sum_dv += dv[k];
          sum_dv_xhat += dv[k] * xhat[k];
        }
      dscale[c] = sum_dv_xhat;
      dbias[c] = sum_dv;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < spatial; ++i) {
          const size_t k = static_cast<size_t>(n * spatial + i);
          dx[index(n, i)] = scale[c] * inv_std * (dv[k] - sum_dv / count - xhat[k] * sum_dv_xhat / count);
        }
    }
    const batchnorm::Activation silu{batchnorm::Activation::Kind::kSilu};
    for (batchnorm::Isa isa : isas)
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const std::string label = ShapeToString(shape) + IsaName(isa) + " threads " + std::to_string(threads);
        const size_t c = static_cast<size_t>(channels);
        std::vector<float> y(x.size()), again(x.size()), affine(2 * c), dx32(x.size());
        std::vector<double> mean(c), var(c), got_dscale(c), got_dbias(c);
        batchnorm::TrainingForward(pool, isa, x.data(), y.data(), batch, channels, spatial, scale.data(), bias.data(),
                                   epsilon, mean.data(), var.data(), silu, affine.data());
        ExpectNearLargest(y, z, 1e-5, label + " Y");
        batchnorm::ApplyAffine(pool, isa, x.data(), again.data(), batch, channels, spatial, affine.data(), silu);
        EXPECT_EQ(again, y) << label;
        for (int64_t plane = 0; plane < batch * channels; ++plane) {  // as the depthwise kernels map their input
          const size_t k = static_cast<size_t>(plane % channels), at = static_cast<size_t>(plane * spatial);
          batchnorm::MapRow(isa, x.data() + at, again.data() + at, spatial, affine[k], affine[c + k], silu);
        }
        EXPECT_EQ(again, y) << label << " MapRow";
        for (bool saved : {false, true}) {
          std::vector<double> inv_std(c);
          for (size_t k = 0; k < c; ++k) inv_std[k] = 1.0 / std::sqrt(var[k] + epsilon);
          batchnorm::TrainingBackward(pool, isa, dy.data(), x.data(), dx32.data(), batch, channels, spatial,
                                      scale.data(), saved ? mean.data() : nullptr, saved ? inv_std.data() : nullptr,
                                      epsilon, got_dscale.data(), got_dbias.data(), affine.data(), silu);
          const std::string grad_label = label + (saved ? " saved statistics" : " recomputed statistics");
          ExpectNearLargest(dx32, dx, 2e-5, grad_label + " dX");
          ExpectNearLargest(got_dscale, dscale, 2e-5, grad_label + " dScale");
          ExpectNearLargest(got_dbias, dbias, 2e-5, grad_label + " dBias");
        }
      }
  }
}

// Bad inputs reach the fast float32 kernels' nodes as typed errors naming the node and the input.
TEST(NormBackendErrors, BatchNormBadInputs) {
  const KernelBackend saved = ActiveKernelBackend();
  std::vector<KernelBackend> backends = {KernelBackend::kReference};
  if (DnnlAvailable()) backends.push_back(KernelBackend::kDnnl);
  for (KernelBackend backend : backends) {
    SetKernelBackend(backend);
    OneNode wrong_scale = WithFloat32Inputs(BatchNorm({2, 5, 3, 3}, true));
    wrong_scale.inputs[1].tensor = Float32Of(RandomTensor({6}, 2));
    EXPECT_ERROR(RunNode(wrong_scale), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (BatchNormalization): input 'scale' has shape [6] but 5 values are expected");
    OneNode wrong_bias = WithFloat32Inputs(BatchNorm({2, 5, 3, 3}, true));
    wrong_bias.inputs[2].tensor = Float32Of(RandomTensor({4}, 3));
    EXPECT_ERROR(RunNode(wrong_bias), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (BatchNormalization): input 'B' has shape [4] but 5 values are expected");
    OneNode rank1 = WithFloat32Inputs(BatchNorm({4, 5}, true));
    rank1.inputs[0].tensor = Float32Of(RandomTensor({4}, 1));
    EXPECT_ERROR(RunNode(rank1), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (BatchNormalization): input X must have rank >= 2, got shape [4]");

    OneNode grad_scale = WithFloat32Inputs(BatchNormGrad({2, 5, 3, 3}));
    grad_scale.inputs[2].tensor = Float32Of(RandomTensor({4}, 8));
    EXPECT_ERROR(RunNode(grad_scale), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (ai.edgetrain.BatchNormalizationGrad): input 'scale' has shape [4] but 5 values are "
                 "expected");
    OneNode grad_rank1 = WithFloat32Inputs(BatchNormGrad({2, 5}));
    grad_rank1.inputs[0].tensor = Float32Of(RandomTensor({10}, 6));
    grad_rank1.inputs[1].tensor = Float32Of(RandomTensor({10}, 7));
    EXPECT_ERROR(RunNode(grad_rank1), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (ai.edgetrain.BatchNormalizationGrad): input X must have rank >= 2, got shape [10]");
    OneNode grad_dy = WithFloat32Inputs(BatchNormGrad({2, 5, 3, 3}));
    grad_dy.inputs[0].tensor = Float32Of(RandomTensor({2, 5, 3, 2}, 6));
    EXPECT_ERROR(RunNode(grad_dy), ErrorCode::kInvalidArgument,
                 "dY (float32 [2, 5, 3, 2]) must match X (float32 [2, 5, 3, 3])");
    OneNode ort_saved = WithFloat32Inputs(OrtBatchNormGrad({2, 5, 3, 3}));
    ort_saved.inputs[4].tensor = Float32Of(RandomTensor({3}, 9, 0.5, 1.0));
    EXPECT_ERROR(RunNode(ort_saved), ErrorCode::kInvalidArgument,
                 "node 'ort_op' (com.microsoft.BatchNormalizationGrad): input 'saved_inv_std' has shape [3] but 5 "
                 "values are expected");
  }
  SetKernelBackend(saved);
}

// Scale must broadcast to the normalized dims on either backend, also where it has their element count.
TEST(NormBackendErrors, LayerNormScaleThatDoesNotBroadcast) {
  const KernelBackend saved = ActiveKernelBackend();
  std::vector<KernelBackend> backends = {KernelBackend::kReference};
  if (DnnlAvailable()) backends.push_back(KernelBackend::kDnnl);
  for (KernelBackend backend : backends) {
    SetKernelBackend(backend);
    const OneNode node = WithFloat32Inputs(LayerNorm({4, 6, 33}, -1, {33, 1}, {33}));
    EXPECT_ERROR(RunNode(node), ErrorCode::kInvalidArgument, "does not broadcast to the normalized shape [33]");
  }
  SetKernelBackend(saved);
}

TEST(NormBackendErrors, ClipGradBadInputs) {
  const Tensor dy = RandomTensor({3, 4}, 35), y = RandomTensor({3, 4}, 36), zero = Doubles({0.0}, {});
  EXPECT_ERROR(RunNode(GradNode("ClipGrad", kEdgetrainDomain, {dy, RandomTensor({4, 3}, 37), zero, zero}, {}, 1)),
               ErrorCode::kInvalidArgument, "dY (float64 [3, 4]) must match Y (float64 [4, 3])");
  EXPECT_ERROR(RunNode(GradNode("ClipGrad", kEdgetrainDomain, {dy, y, Doubles({0.0, 1.0}, {2}), zero}, {}, 1)),
               ErrorCode::kInvalidArgument, "'min' must be a single float64 value, got float64 [2]");
  EXPECT_ERROR(RunNode(GradNode("ClipGrad", kEdgetrainDomain, {dy, y, zero, Tensor::Scalar<float>(6)}, {}, 1)),
               ErrorCode::kInvalidArgument, "'max' must be a single float64 value, got float32 []");
}

TEST(NormBackendErrors, ErfAndExpRefuseIntegers) {
  for (const char* op : {"Erf", "Exp"}) {
    OneNode node = OnnxNode(op, {Tensor::FromVector<int32_t>({1, 2, 3}, {3})}, {});
    EXPECT_ERROR(RunNode(node), ErrorCode::kNotImplemented, "(" + std::string(op) + ")");
    EXPECT_ERROR(RunNode(node), ErrorCode::kNotImplemented, "element type int32 is not supported");
  }
}

TEST(NormBackendErrors, SiluGradBadInputs) {
  EXPECT_ERROR(RunNode(GradNode("SiluGrad", kEdgetrainDomain, {RandomTensor({3, 4}, 44), RandomTensor({4, 3}, 45)}, {}, 1)),
               ErrorCode::kInvalidArgument, "dY (float64 [3, 4]) must match X (float64 [4, 3])");
  EXPECT_ERROR(RunNode(GradNode("SiluGrad", kEdgetrainDomain, {RandomTensor({3, 1}, 46), RandomTensor({3, 4}, 47)}, {}, 1)),
               ErrorCode::kInvalidArgument, "(ai.edgetrain.SiluGrad)");
  EXPECT_ERROR(RunNode(GradNode("Silu", kEdgetrainDomain, {Tensor::FromVector<int64_t>({1, 2}, {2})}, {}, 1)),
               ErrorCode::kNotImplemented, "Silu");
}

// Each window's value and gradient go to its first maximum in row-major order; NaNs never win and
// a window of NaNs yields -inf with its gradient on its first tap. X is [1, 1, 2, 8]:
//   0 5 0 0 NaN   1 NaN NaN
//   5 0 0 0   2 NaN NaN NaN
struct MaxPoolRow {
  std::string name;
  AttributeMap attributes;
  std::vector<double> y;                       // MaxPool
  std::vector<std::pair<int64_t, double>> dx;  // MaxPoolGrad for dY = 1, 2, 3, ...: the nonzero entries
};
void PrintTo(const MaxPoolRow& row, std::ostream* os) { *os << row.name; }

class MaxPoolTies : public ::testing::TestWithParam<MaxPoolRow> {};

void ExpectExactly(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                   const std::string& label) {
  ASSERT_EQ(ShapeToString(actual.shape()), ShapeToString(shape)) << label;
  const std::vector<double> values = actual.ToDoubleVector();
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(values[i], expected[i]) << label << " element " << i;
}

TEST_P(MaxPoolTies, FirstMaximumWins) {
  const MaxPoolRow& row = GetParam();
  const double nan = std::nan("");
  const Tensor x = Doubles({0, 5, 0, 0, nan, 1, nan, nan, 5, 0, 0, 0, 2, nan, nan, nan}, {1, 1, 2, 8});
  const Shape y_shape = {1, 1, 1, static_cast<int64_t>(row.y.size())};
  std::vector<double> dy(row.y.size()), dx(16, 0.0);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>(i + 1);
  for (const auto& [offset, value] : row.dx) dx[static_cast<size_t>(offset)] = value;
  for (bool float32 : {false, true}) {
    const std::string label = row.name + (float32 ? " float32" : " float64");
    const Tensor xt = float32 ? Float32Of(x) : x;
    const Tensor dyt = float32 ? Float32Of(Doubles(dy, y_shape)) : Doubles(dy, y_shape);
    const std::vector<Tensor> y = RunNode(OnnxNode("MaxPool", {xt}, row.attributes));
    ExpectExactly(y[0], y_shape, row.y, label + " MaxPool");
    const std::vector<Tensor> grad = RunNode(GradNode("MaxPoolGrad", kEdgetrainDomain, {dyt, xt}, row.attributes, 1));
    ExpectExactly(grad[0], x.shape(), dx, label + " MaxPoolGrad");
  }
}

const double kMinusInfinity = -std::numeric_limits<double>::infinity();

INSTANTIATE_TEST_SUITE_P(Rows, MaxPoolTies,
                         ::testing::Values(MaxPoolRow{"Unrolled2x2",
                                                      {{"kernel_shape", Attribute::Ints({2, 2})},
                                                       {"strides", Attribute::Ints({2, 2})}},
                                                      {5, 0, 2, kMinusInfinity},
                                                      {{1, 1}, {2, 2}, {12, 3}, {6, 4}}},
                                           MaxPoolRow{"ClippedWindows",
                                                      {{"kernel_shape", Attribute::Ints({2, 2})},
                                                       {"strides", Attribute::Ints({2, 2})},
                                                       {"pads", Attribute::Ints({0, 1, 0, 1})}},
                                                      {5, 5, 2, 1, kMinusInfinity},
                                                      {{8, 1}, {1, 2}, {12, 3}, {5, 4}, {7, 5}}}),
                         RowName());

// 2x2 windows at stride 2 on planes of odd height and width, whose last row and column no window covers: Y, Indices
// and dX equal a loop over the windows.
TEST(MaxPool2x2Stride2, OddPlanesMatchTheWindowsDefinition) {
  const Shape shape = {2, 3, 5, 7};
  const int64_t h = 5, w = 7, oh = 2, ow = 3, planes = 6;
  const Tensor x = RandomTensor(shape, 61);
  const Tensor dy = RandomTensor({2, 3, oh, ow}, 62);
  const std::vector<double> xs = x.ToDoubleVector(), dys = dy.ToDoubleVector();
  std::vector<double> y, dx(xs.size(), 0.0);
  std::vector<int64_t> indices;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t c = 0; c < ow; ++c) {
        int64_t best = p * h * w + 2 * r * w + 2 * c;
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t at = p * h * w + (2 * r + i) * w + 2 * c + j;
            if (xs[static_cast<size_t>(at)] > xs[static_cast<size_t>(best)]) best = at;
          }
        y.push_back(xs[static_cast<size_t>(best)]);
        indices.push_back(best);
        dx[static_cast<size_t>(best)] += dys[static_cast<size_t>((p * oh + r) * ow + c)];
      }
  const AttributeMap pool = {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  for (bool float32 : {false, true}) {
    const std::string label = float32 ? "float32" : "float64";
    const Tensor xt = float32 ? Float32Of(x) : x;
    const std::vector<Tensor> forward = RunNode(OnnxNode("MaxPool", {xt}, pool, 2));
    const std::vector<double> expected_y = float32 ? Float32Of(Doubles(y, {2, 3, oh, ow})).ToDoubleVector() : y;
    ExpectExactly(forward[0], {2, 3, oh, ow}, expected_y, label + " Y");
    ASSERT_EQ(forward[1].dtype(), DataType::kInt64) << label;
    EXPECT_EQ(forward[1].ToVector<int64_t>(), indices) << label << " Indices";
    const Tensor dyt = float32 ? Float32Of(dy) : dy;
    const std::vector<Tensor> grad = RunNode(GradNode("MaxPoolGrad", kEdgetrainDomain, {dyt, xt}, pool, 1));
    const std::vector<double> expected_dx = float32 ? Float32Of(Doubles(dx, shape)).ToDoubleVector() : dx;
    ExpectExactly(grad[0], shape, expected_dx, label + " dX");
  }
}

// MaxPool's four-lane window maximum (the WebAssembly build's path) picks what WindowMax picks, bit for bit, on
// windows of 4 and 9 taps drawn from values with ties, NaNs and -inf, including windows of NaNs only.
template <size_t Extent>
void ExpectFourLanesMatchWindowMax(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {1.0f, 2.0f, -1.0f, nan, -inf, 2.0f};
  std::vector<float> plane(32);
  int64_t checked = 0;
  for (int trial = 0; trial < 500; ++trial) {
    for (float& v : plane) v = values[rng() % values.size()];
    if (trial == 0) std::fill(plane.begin(), plane.end(), nan);
    pool_detail::PoolWindows windows;
    for (size_t i = 0; i < 8 * Extent; ++i) windows.offsets.push_back(static_cast<int64_t>(rng() % plane.size()));
    for (int64_t first = 0; first < 8; first += 4) {
      float best[4];
      int64_t offset[4];
      pool_detail::WindowMaxima4<Extent>(plane.data(), windows, first, best, offset);
      for (int64_t i = 0; i < 4; ++i) {
        const auto [want, want_offset] = pool_detail::WindowMax(plane.data(), windows.Taps<Extent>(first + i));
        ASSERT_EQ(std::bit_cast<uint32_t>(best[i]), std::bit_cast<uint32_t>(want)) << "trial " << trial;
        ASSERT_EQ(offset[i], want_offset) << "trial " << trial;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4000);
}

TEST(MaxPoolWindows, FourLanesMatchWindowMax) {
  ExpectFourLanesMatchWindowMax<4>(71);
  ExpectFourLanesMatchWindowMax<9>(72);
}

}  // namespace
}  // namespace edgetrain::testing
