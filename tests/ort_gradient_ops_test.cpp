// ONNX Runtime's training operators (src/ops/ort_gradients.cpp): one row per operator
// configuration, run as a one-node model and compared with a float64 reference computed here — the
// forward operator's vector-Jacobian product by central differences through edgetrain's ONNX
// kernels where a forward op exists, else the formula written out. Error rows check that bad inputs
// fail with an edgetrain::Error naming the node.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ops/kernel.hpp"
#include "ops/registry.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain {
namespace {

using testing::CaseInput;
using testing::CentralDifferenceVjp;
using testing::Doubles;
using testing::ExpectRowError;
using testing::ExpectRowValues;
using testing::ExpectTensorNear;
using testing::kOneNodeName;
using testing::OneNode;
using testing::OneNodeFunction;
using testing::OnnxNode;
using testing::OpCase;
using testing::RandomTensor;
using testing::RowName;
using testing::RunOneNode;

constexpr const char* kMs = kMicrosoftDomain;

// ---- tensors ----

Tensor Int64s(std::vector<int64_t> values, Shape shape) { return Tensor::FromVector<int64_t>(values, shape); }
Tensor Int32s(std::vector<int32_t> values, Shape shape) { return Tensor::FromVector<int32_t>(values, shape); }
Tensor Ints(std::vector<int64_t> values) { return Int64s(values, {static_cast<int64_t>(values.size())}); }

Tensor ToFloat32(const Tensor& t) {
  std::vector<float> values;
  for (double v : t.ToDoubleVector()) values.push_back(static_cast<float>(v));
  return Tensor::FromVector<float>(values, t.shape());
}

Tensor ToFloat64(const Tensor& t) { return Doubles(t.ToDoubleVector(), t.shape()); }

// f applied to every element of a float64 tensor.
Tensor Map(const Tensor& x, const std::function<double(double, int64_t)>& f) {
  std::vector<double> values = x.ToDoubleVector();
  for (size_t i = 0; i < values.size(); ++i) values[i] = f(values[i], static_cast<int64_t>(i));
  return Doubles(values, x.shape());
}

// Random values with |v| >= margin (away from kinks such as Relu's at 0, or a divisor's pole).
Tensor AwayFromZero(const Shape& shape, uint64_t seed, double margin) {
  return Map(RandomTensor(shape, seed), [margin](double v, int64_t) { return v + (v < 0 ? -margin : margin); });
}

std::vector<bool> RandomFlags(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<bool> flags(static_cast<size_t>(count));
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = (rng() & 1) != 0;
  flags[0] = true;  // both values occur
  flags[1] = false;
  return flags;
}

Tensor BoolTensor(const std::vector<bool>& flags, Shape shape) {
  Tensor t(DataType::kBool, shape);
  for (size_t i = 0; i < flags.size(); ++i) t.data<bool>()[i] = flags[i];
  return t;
}

// ORT's bit-packed dropout mask: element i is bit i % 32 of word i / 32.
Tensor PackBits(const std::vector<bool>& flags) {
  std::vector<uint32_t> words((flags.size() + 31) / 32, 0u);
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) words[i / 32] |= uint32_t{1} << (i % 32);
  return Tensor::FromVector<uint32_t>(words, {static_cast<int64_t>(words.size())});
}

// ---- references ----

// The outputs of a forward ONNX node (all `num_outputs` requested).
std::vector<Tensor> Forward(const std::string& op, const std::vector<Tensor>& inputs,
                            AttributeMap attrs, size_t num_outputs = 1, int64_t opset = 17) {
  return RunOneNode(OnnxNode(op, inputs, std::move(attrs), num_outputs, opset));
}

// d/d input `wrt` of sum(dy * the first output of the forward ONNX node), by central differences.
Tensor Vjp(const std::string& op, const std::vector<Tensor>& inputs, AttributeMap attrs, size_t wrt,
           const Tensor& dy, size_t num_outputs = 1, int64_t opset = 17) {
  return CentralDifferenceVjp(OneNodeFunction(OnnxNode(op, inputs, std::move(attrs), num_outputs, opset), wrt),
                              inputs[wrt], dy);
}

double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double FastGelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Softmax cross-entropy over scores [N, C, D...] written out: (loss, log_prob).
std::vector<Tensor> SoftmaxCrossEntropy(const Tensor& scores, const Tensor& labels_tensor, const Tensor& weights,
                                        std::optional<int64_t> ignore, const std::string& reduction) {
  const int64_t n = scores.dim(0), c = scores.dim(1), d = scores.numel() / (n * c);
  const std::vector<double> x = scores.ToDoubleVector();
  const std::vector<int64_t> labels = labels_tensor.ToInt64Vector();
  std::vector<double> log_prob(x.size()), losses(static_cast<size_t>(n * d));
  double loss_sum = 0.0, weight_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < d; ++p) {
      double sum = 0.0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(x[(i * c + k) * d + p]);
      for (int64_t k = 0; k < c; ++k) log_prob[(i * c + k) * d + p] = x[(i * c + k) * d + p] - std::log(sum);
      const int64_t label = labels[i * d + p];
      if (ignore && label == *ignore) continue;
      const double w = weights.defined() ? weights.ToDoubleVector()[label] : 1.0;
      losses[i * d + p] = -w * log_prob[(i * c + label) * d + p];
      loss_sum += losses[i * d + p];
      weight_sum += w;
    }
  }
  Tensor loss = reduction == "none" ? Doubles(losses, labels_tensor.shape())
                                    : Doubles({reduction == "sum" ? loss_sum : loss_sum / weight_sum}, {});
  return {loss, Doubles(log_prob, scores.shape())};
}

// RMS normalization over the last dim: X * inv_std * scale, inv_std = 1 / sqrt(mean(X^2) + epsilon).
Tensor InvRms(const Tensor& x, double epsilon) {
  const int64_t cols = x.dim(x.rank() - 1), rows = x.numel() / cols;
  const std::vector<double> v = x.ToDoubleVector();
  std::vector<double> inv(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0.0;
    for (int64_t i = 0; i < cols; ++i) squares += v[r * cols + i] * v[r * cols + i];
    inv[r] = 1.0 / std::sqrt(squares / static_cast<double>(cols) + epsilon);
  }
  return Doubles(inv, {rows, 1});
}
Tensor RmsNorm(const Tensor& x, const Tensor& scale, double epsilon) {
  const std::vector<double> inv = InvRms(x, epsilon).ToDoubleVector(), s = scale.ToDoubleVector();
  const int64_t cols = scale.numel();
  return Map(x, [&](double v, int64_t i) { return v * inv[i / cols] * s[i % cols]; });
}

// ---- rows ----

std::vector<OpCase> ActivationRows() {
  std::vector<OpCase> rows;
  const Tensor x = AwayFromZero({3, 4}, 1, 0.05), dy = RandomTensor({3, 4}, 2);
  auto vjp_of = [x, dy](const std::string& op) { return [=] { return std::vector<Tensor>{Vjp(op, {x}, {}, 0, dy)}; }; };
  rows.push_back({"ReluGrad", {"ReluGrad", kMs, {dy, x}}, vjp_of("Relu")});
  rows.push_back({"ReluGrad_OnnxDomain", {"ReluGrad", "", {dy, x}}, vjp_of("Relu")});
  const Tensor x32 = ToFloat32(x), dy32 = ToFloat32(dy);
  rows.push_back({"ReluGrad_Float32", {"ReluGrad", kMs, {dy32, x32}}, [=] {
                    return std::vector<Tensor>{ToFloat32(Vjp("Relu", {ToFloat64(x32)}, {}, 0, ToFloat64(dy32)))};
                  }});
  // SigmoidGrad and TanhGrad take the forward output Y.
  for (const char* op : {"Sigmoid", "Tanh"}) {
    const Tensor y = Forward(op, {x}, {})[0];
    rows.push_back({std::string(op) + "Grad", {std::string(op) + "Grad", kMs, {dy, y}}, vjp_of(op)});
  }
  auto direct = [dy](const Tensor& x_in, std::function<double(double, int64_t)> f) {
    return
        [=] { return std::vector<Tensor>{CentralDifferenceVjp([f](const Tensor& v) { return Map(v, f); }, x_in, dy)}; };
  };
  const Tensor wide = RandomTensor({3, 4}, 3, -3.0, 3.0), bias = RandomTensor({4}, 4);
  const std::vector<double> b = bias.ToDoubleVector();
  rows.push_back({"GeluGrad", {"GeluGrad", kMs, {dy, wide}}, direct(wide, [](double v, int64_t) { return Gelu(v); })});
  rows.push_back(
      {"FastGeluGrad", {"FastGeluGrad", kMs, {dy, wide}}, direct(wide, [](double v, int64_t) { return FastGelu(v); })});
  rows.push_back({"BiasGeluGrad_dX", {"BiasGeluGrad_dX", kMs, {dy, wide, bias}}, direct(wide, [b](double v, int64_t i) {
                    return Gelu(v + b[i % 4]);
                  })});
  rows.push_back({"BiasFastGeluGrad_dX",
                  {"BiasFastGeluGrad_dX", kMs, {dy, wide, bias}},
                  direct(wide, [b](double v, int64_t i) { return FastGelu(v + b[i % 4]); })});
  return rows;
}

std::vector<OpCase> SoftmaxRows() {
  std::vector<OpCase> rows;
  const Tensor x = RandomTensor({2, 3, 4}, 10, -2.0, 2.0), dy = RandomTensor({2, 3, 4}, 11);
  struct Config {
    const char* name;
    const char* forward;
    const char* grad;
    std::string domain;
    std::optional<int64_t> axis;
    int64_t opset;  // of the forward op: 11 coerces to 2-D at axis, 13 normalises one axis
  };
  const std::vector<Config> configs = {
      {"SoftmaxGrad_13_Axis1", "Softmax", "SoftmaxGrad_13", kMs, 1, 13},
      {"SoftmaxGrad_13_DefaultAxis", "Softmax", "SoftmaxGrad_13", kMs, std::nullopt, 13},
      {"LogSoftmaxGrad_13_Axis0", "LogSoftmax", "LogSoftmaxGrad_13", kMs, 0, 13},
      {"LogSoftmaxGrad_13_NegativeAxis", "LogSoftmax", "LogSoftmaxGrad_13", kMs, -2, 13},
      {"SoftmaxGrad_Coerced_Axis1", "Softmax", "SoftmaxGrad", kMs, 1, 11},
      {"SoftmaxGrad_Coerced_DefaultAxis", "Softmax", "SoftmaxGrad", kMs, std::nullopt, 11},
      {"SoftmaxGrad_Coerced_Axis2", "Softmax", "SoftmaxGrad", kMs, 2, 11},
      {"LogSoftmaxGrad_Coerced_Axis1", "LogSoftmax", "LogSoftmaxGrad", kMs, 1, 11},
      {"SoftmaxGrad_OnnxDomain", "Softmax", "SoftmaxGrad", "", 1, 11},
  };
  for (const Config& c : configs) {
    AttributeMap attrs;
    if (c.axis) attrs["axis"] = Attribute::Int(*c.axis);
    const Tensor y = Forward(c.forward, {x}, attrs, 1, c.opset)[0];
    rows.push_back({c.name, {c.grad, c.domain, {dy, y}, attrs}, [=, forward = std::string(c.forward)] {
                      return std::vector<Tensor>{Vjp(forward, {x}, attrs, 0, dy, 1, c.opset)};
                    }});
  }
  return rows;
}

std::vector<OpCase> LossRows() {
  std::vector<OpCase> rows;
  struct Config {
    const char* name;
    Shape scores;
    Tensor labels;
    bool weighted;
    std::optional<int64_t> ignore;
    const char* reduction;
  };
  const std::vector<Config> configs = {
      {"Mean_Int64", {4, 5}, Int64s({1, 0, 4, 1}, {4}), false, std::nullopt, "mean"},
      {"Sum_Weights_Int32", {4, 5}, Int32s({3, 2, 2, 0}, {4}), true, std::nullopt, "sum"},
      {"None_Ignore_3D", {2, 4, 3}, Int64s({0, 2, 3, 2, 1, 2}, {2, 3}), false, 2, "none"},
      {"Mean_Weights_NegativeIgnore_3D", {2, 4, 3}, Int32s({-1, 3, 1, 0, -1, 2}, {2, 3}), true, -1, "mean"},
  };
  uint64_t seed = 20;
  for (const Config& c : configs) {
    const Tensor scores = RandomTensor(c.scores, ++seed, -2.0, 2.0);
    const Tensor weights = c.weighted ? RandomTensor({c.scores[1]}, ++seed, 0.5, 1.5) : Tensor();
    const Tensor dy = std::string(c.reduction) == "none" ? RandomTensor(c.labels.shape(), ++seed) : Doubles({0.7}, {});
    AttributeMap attrs = {{"reduction", Attribute::String(c.reduction)}};
    AttributeMap forward_attrs = attrs;
    if (c.ignore) forward_attrs["ignore_index"] = Attribute::Int(*c.ignore);
    std::vector<Tensor> forward_inputs = {scores, c.labels};
    if (c.weighted) forward_inputs.push_back(weights);
    const Tensor log_prob = Forward("SoftmaxCrossEntropyLoss", forward_inputs, forward_attrs, 2)[1];
    auto expected = [=] {
      return std::vector<Tensor>{Vjp("SoftmaxCrossEntropyLoss", forward_inputs, forward_attrs, 0, dy, 2)};
    };
    std::vector<CaseInput> grad_inputs = {dy, log_prob, c.labels};
    if (c.weighted) grad_inputs.push_back(weights);
    rows.push_back({std::string("SoftmaxCrossEntropyLossGrad_") + c.name,
                    {"SoftmaxCrossEntropyLossGrad", kMs, grad_inputs, forward_attrs},
                    expected});
    // The Internal ops take ignore_index as an int64 input and add an optional bias to the gradient.
    std::vector<CaseInput> internal_inputs = {dy, log_prob, c.labels, weights,
                                              c.ignore ? Int64s({*c.ignore}, {}) : Tensor()};
    rows.push_back({std::string("SoftmaxCrossEntropyLossInternalGrad_") + c.name,
                    {"SoftmaxCrossEntropyLossInternalGrad", kMs, internal_inputs, attrs},
                    expected});
    const Tensor bias = RandomTensor(c.scores, ++seed);
    internal_inputs.push_back(bias);
    rows.push_back({std::string("SoftmaxCrossEntropyLossInternalGrad_Bias_") + c.name,
                    {"SoftmaxCrossEntropyLossInternalGrad", kMs, internal_inputs, attrs},
                    [=] {
                      Tensor grad = expected()[0];
                      const std::vector<double> b = bias.ToDoubleVector();
                      return std::vector<Tensor>{Map(grad, [&](double v, int64_t i) { return v + b[i]; })};
                    }});
    std::vector<CaseInput> forward_internal = {scores, c.labels, weights,
                                               c.ignore ? Int64s({*c.ignore}, {}) : Tensor()};
    rows.push_back({std::string("SoftmaxCrossEntropyLossInternal_") + c.name,
                    {"SoftmaxCrossEntropyLossInternal", kMs, forward_internal, attrs, {true, true}},
                    [=] { return SoftmaxCrossEntropy(scores, c.labels, weights, c.ignore, c.reduction); },
                    1e-12});
  }
  return rows;
}

std::vector<OpCase> NormalizationRows() {
  std::vector<OpCase> rows;
  struct Config {
    const char* name;
    Shape x, scale;
    int64_t axis;
    int64_t stash_type;  // element type of mean / inv_std_dev
    std::string domain;
    double tolerance;
  };
  const std::vector<Config> configs = {
      {"LastAxis", {3, 4}, {4}, -1, 11, kMs, 1e-6},
      {"Axis1_3D", {2, 3, 4}, {3, 4}, 1, 11, kMs, 1e-6},
      {"Float32Statistics", {3, 4}, {4}, -1, 1, kMs, 1e-5},
      {"OnnxDomain", {3, 4}, {4}, -1, 11, "", 1e-6},
  };
  uint64_t seed = 40;
  for (const Config& c : configs) {
    const Tensor x = RandomTensor(c.x, ++seed, -2.0, 2.0), scale = RandomTensor(c.scale, ++seed, 0.5, 1.5),
                 bias = RandomTensor(c.scale, ++seed), dy = RandomTensor(c.x, ++seed);
    const AttributeMap attrs = {{"axis", Attribute::Int(c.axis)},
                                                    {"stash_type", Attribute::Int(c.stash_type)}};
    const std::vector<Tensor> stats = Forward("LayerNormalization", {x, scale, bias}, attrs, 3);
    rows.push_back({std::string("LayerNormalizationGrad_") + c.name,
                    {"LayerNormalizationGrad",
                     c.domain,
                     {dy, x, scale, stats[1], stats[2]},
                     {{"axis", Attribute::Int(c.axis)}},
                     {true, true, true}},
                    [=] {
                      std::vector<Tensor> grads;
                      for (size_t wrt = 0; wrt < 3; ++wrt)
                        grads.push_back(Vjp("LayerNormalization", {x, scale, bias}, attrs, wrt, dy, 3));
                      return grads;
                    },
                    c.tolerance});
  }
  const double epsilon = 1e-5;
  const Tensor x = RandomTensor({3, 4}, 50, -2.0, 2.0), scale = RandomTensor({4}, 51, 0.5, 1.5),
               dy = RandomTensor({3, 4}, 52);
  rows.push_back({"SimplifiedLayerNormalizationGrad",
                  {"SimplifiedLayerNormalizationGrad", kMs, {dy, x, scale, InvRms(x, epsilon)}, {}, {true, true}},
                  [=] {
                    return std::vector<Tensor>{
                        CentralDifferenceVjp([&](const Tensor& v) { return RmsNorm(v, scale, epsilon); }, x, dy),
                        CentralDifferenceVjp([&](const Tensor& s) { return RmsNorm(x, s, epsilon); }, scale, dy)};
                  }});
  return rows;
}

std::vector<OpCase> DropoutRows() {
  std::vector<OpCase> rows;
  const Shape shape = {5, 7};  // 35 elements: the bitmask has a partly used second word
  const Tensor dy = RandomTensor(shape, 60);
  const std::vector<bool> keep = RandomFlags(35, 61);
  auto masked = [dy, keep](double ratio) {
    return [=] {
      return std::vector<Tensor>{Map(dy, [&](double v, int64_t i) { return keep[i] ? v / (1.0 - ratio) : 0.0; })};
    };
  };
  const Tensor mask = BoolTensor(keep, shape), bits = PackBits(keep), training = BoolTensor({true}, {});
  rows.push_back(
      {"DropoutGrad_Ratio", {"DropoutGrad", kMs, {dy, mask, Tensor::Scalar<float>(0.25f), training}}, masked(0.25)});
  rows.push_back({"DropoutGrad_DefaultRatio", {"DropoutGrad", kMs, {dy, mask}}, masked(0.5)});
  rows.push_back(
      {"BitmaskDropoutGrad_Ratio", {"BitmaskDropoutGrad", kMs, {dy, bits, Doubles({0.3}, {}), training}}, masked(0.3)});
  rows.push_back({"BitmaskDropoutGrad_DefaultRatio", {"BitmaskDropoutGrad", kMs, {dy, bits}}, masked(0.5)});
  // Not training: the data passes through and every mask bit is set.
  rows.push_back({"BitmaskDropout_Inference",
                  {"BitmaskDropout", kMs, {dy, Doubles({0.5}, {}), BoolTensor({false}, {})}, {}, {true, true}},
                  [dy] {
                    return std::vector<Tensor>{dy, Tensor::FromVector<uint32_t>({~0u, ~0u}, {2})};
                  }});
  return rows;
}

std::vector<OpCase> IndexingRows() {
  std::vector<OpCase> rows;
  {
    const Tensor data = RandomTensor({5, 3}, 70), indices = Int64s({1, 4, 1, -1}, {4}), dy = RandomTensor({4, 3}, 71);
    auto expected = [=] { return std::vector<Tensor>{Vjp("Gather", {data, indices}, {}, 0, dy)}; };
    rows.push_back({"GatherGrad_RepeatedNegative", {"GatherGrad", kMs, {Ints({5, 3}), indices, dy}}, expected});
    rows.push_back({"GatherGrad_OnnxDomain", {"GatherGrad", "", {Ints({5, 3}), indices, dy}}, expected});
  }
  {
    const Tensor data = RandomTensor({2, 5, 3}, 72), indices = Int32s({0, 4, 4, 2}, {2, 2}),
                 dy = RandomTensor({2, 2, 2, 3}, 73);
    const AttributeMap axis = {{"axis", Attribute::Int(1)}};
    rows.push_back({"GatherGrad_Axis1_Int32Indices2D", {"GatherGrad", kMs, {Ints({2, 5, 3}), indices, dy}, axis}, [=] {
                      return std::vector<Tensor>{Vjp("Gather", {data, indices}, axis, 0, dy)};
                    }});
  }
  {
    const Tensor data = RandomTensor({3, 4}, 74),
                 indices = Int64s({0, 3, 3, -1, 1, 2, 2, 2, 0, 1, 3, 0, 0, 0, 2}, {3, 5}),
                 dy = RandomTensor({3, 5}, 75);
    const AttributeMap axis = {{"axis", Attribute::Int(1)}};
    rows.push_back(
        {"GatherElementsGrad_Axis1_Repeated", {"GatherElementsGrad", kMs, {dy, Ints({3, 4}), indices}, axis}, [=] {
           return std::vector<Tensor>{Vjp("GatherElements", {data, indices}, axis, 0, dy)};
         }});
    const Tensor rows_indices = Int32s({2, 0, 1, 2}, {1, 4}), dy_rows = RandomTensor({1, 4}, 76);
    rows.push_back(
        {"GatherElementsGrad_Axis0_Int32", {"GatherElementsGrad", kMs, {dy_rows, Ints({3, 4}), rows_indices}}, [=] {
           return std::vector<Tensor>{Vjp("GatherElements", {data, rows_indices}, {}, 0, dy_rows)};
         }});
  }
  {
    const Tensor x = RandomTensor({4, 6}, 77);
    const Tensor starts = Ints({3, 1}), ends = Ints({0, 100}), axes = Ints({0, 1}), steps = Ints({-1, 2});
    const Tensor dy = RandomTensor({3, 3}, 78);
    rows.push_back({"SliceGrad_NegativeStep", {"SliceGrad", kMs, {dy, Ints({4, 6}), starts, ends, axes, steps}}, [=] {
                      return std::vector<Tensor>{Vjp("Slice", {x, starts, ends, axes, steps}, {}, 0, dy)};
                    }});
    const Tensor dy_front = RandomTensor({2, 6}, 79);
    rows.push_back({"SliceGrad_NoAxes", {"SliceGrad", kMs, {dy_front, Ints({4, 6}), Ints({1}), Ints({-1})}}, [=] {
                      return std::vector<Tensor>{Vjp("Slice", {x, Ints({1}), Ints({-1})}, {}, 0, dy_front)};
                    }});
  }
  return rows;
}

std::vector<OpCase> ElementwiseRows() {
  std::vector<OpCase> rows;
  const Tensor a = RandomTensor({2, 3}, 80), b = AwayFromZero({3}, 81, 0.5), dy = RandomTensor({2, 3}, 82);
  auto grad = [=](size_t wrt) { return Vjp("Div", {a, b}, {}, wrt, dy); };
  rows.push_back({"DivGrad_Broadcast", {"DivGrad", kMs, {dy, a, b}, {}, {true, true}}, [=] {
                    return std::vector<Tensor>{grad(0), grad(1)};
                  }});
  rows.push_back(
      {"DivGrad_OnlyB", {"DivGrad", kMs, {dy, a, b}, {}, {false, true}}, [=] { return std::vector<Tensor>{grad(1)}; }});
  const Tensor column = AwayFromZero({2, 1}, 83, 0.5);
  rows.push_back({"DivGrad_OnnxDomain_BroadcastColumn", {"DivGrad", "", {dy, a, column}, {}, {true, true}}, [=] {
                    return std::vector<Tensor>{Vjp("Div", {a, column}, {}, 0, dy), Vjp("Div", {a, column}, {}, 1, dy)};
                  }});

  const Tensor x = RandomTensor({2, 3}, 84);
  rows.push_back({"Scale_Multiply", {"Scale", kMs, {x, Doubles({2.5}, {})}}, [=] {
                    return std::vector<Tensor>{Map(x, [](double v, int64_t) { return v * 2.5; })};
                  }});
  rows.push_back({"Scale_Down_Int64", {"Scale", kMs, {x, Int64s({4}, {1})}, {{"scale_down", Attribute::Int(1)}}}, [=] {
                    return std::vector<Tensor>{Map(x, [](double v, int64_t) { return v / 4.0; })};
                  }});
  const Tensor x32 = ToFloat32(x);
  rows.push_back({"Scale_Float32_Float64Scale", {"Scale", kMs, {x32, Doubles({-3.0}, {})}}, [=] {
                    return std::vector<Tensor>{
                        ToFloat32(Map(ToFloat64(x32), [](double v, int64_t) { return -3 * v; }))};
                  }});

  // ReduceSumTraining: ReduceSum with axes as an input.
  const Tensor cube = RandomTensor({2, 3, 4}, 85);
  const std::vector<double> c = cube.ToDoubleVector();
  rows.push_back({"ReduceSumTraining_Axes02_KeepDims", {"ReduceSumTraining", kMs, {cube, Ints({0, -1})}}, [=] {
                    std::vector<double> sums(3, 0.0);
                    for (size_t i = 0; i < c.size(); ++i) sums[(i / 4) % 3] += c[i];
                    return std::vector<Tensor>{Doubles(sums, {1, 3, 1})};
                  }});
  rows.push_back({"ReduceSumTraining_Axis1_NoKeepDims",
                  {"ReduceSumTraining", kMs, {cube, Ints({1})}, {{"keepdims", Attribute::Int(0)}}},
                  [=] {
                    std::vector<double> sums(8, 0.0);
                    for (size_t i = 0; i < c.size(); ++i) sums[(i / 12) * 4 + i % 4] += c[i];
                    return std::vector<Tensor>{Doubles(sums, {2, 4})};
                  }});
  rows.push_back({"ReduceSumTraining_EmptyAxes_Noop",
                  {"ReduceSumTraining", kMs, {cube, Ints({})}, {{"noop_with_empty_axes", Attribute::Int(1)}}},
                  [=] { return std::vector<Tensor>{cube}; }});
  rows.push_back({"ReduceSumTraining_EmptyAxes_All",
                  {"ReduceSumTraining", kMs, {cube, Ints({})}, {{"keepdims", Attribute::Int(0)}}},
                  [=] {
                    double total = 0.0;
                    for (double v : c) total += v;
                    return std::vector<Tensor>{Doubles({total}, {})};
                  }});
  return rows;
}

std::vector<OpCase> AccumulatorRows() {
  std::vector<OpCase> rows;
  const Tensor buffer = RandomTensor({3, 4}, 90), value = RandomTensor({3, 4}, 91), row_value = RandomTensor({4}, 92);
  const Tensor updated = BoolTensor({true}, {1});
  const std::vector<double> v = value.ToDoubleVector(), r = row_value.ToDoubleVector();
  const Tensor sum = Map(buffer, [&](double x, int64_t i) { return x + v[i]; });
  const std::vector<bool> both = {true, true};
  rows.push_back({"InPlaceAccumulatorV2_Accumulate",
                  {"InPlaceAccumulatorV2", kMs, {buffer, value, BoolTensor({false}, {1})}, {}, both},
                  [=] {
                    return std::vector<Tensor>{updated, sum};
                  }});
  rows.push_back({"InPlaceAccumulatorV2_Overwrite",
                  {"InPlaceAccumulatorV2", kMs, {buffer, value, BoolTensor({true}, {1})}, {}, both},
                  [=] {
                    return std::vector<Tensor>{updated, value};
                  }});
  rows.push_back({"InPlaceAccumulatorV2_NoFlag", {"InPlaceAccumulatorV2", kMs, {buffer, value}, {}, both}, [=] {
                    return std::vector<Tensor>{updated, sum};
                  }});
  rows.push_back({"InPlaceAccumulatorV2_BroadcastValue",
                  {"InPlaceAccumulatorV2", kMs, {buffer, row_value, BoolTensor({false}, {})}, {}, both},
                  [=] {
                    return std::vector<Tensor>{updated, Map(buffer, [&](double x, int64_t i) { return x + r[i % 4]; })};
                  }});
  rows.push_back({"InPlaceAccumulatorV2_Float32",
                  {"InPlaceAccumulatorV2", kMs, {ToFloat32(buffer), ToFloat32(value)}, {}, both},
                  [=] {
                    const std::vector<double> b32 = ToFloat32(buffer).ToDoubleVector(),
                                              v32 = ToFloat32(value).ToDoubleVector();
                    return std::vector<Tensor>{
                        updated, ToFloat32(Map(buffer, [&](double, int64_t i) {
                          return static_cast<double>(static_cast<float>(b32[i]) + static_cast<float>(v32[i]));
                        }))};
                  }});
  rows.push_back({"InPlaceAccumulatorV2_FlagOnly",
                  {"InPlaceAccumulatorV2", kMs, {buffer, value}, {}, {true, false}},
                  [=] { return std::vector<Tensor>{updated}; }});
  // Never written in place: the buffer input keeps its values.
  rows.push_back(
      {"InPlaceAccumulatorV2_LeavesBufferInput", {"InPlaceAccumulatorV2", kMs, {buffer, value}, {}, both}, [=] {
         EXPECT_EQ(buffer.ToDoubleVector(), RandomTensor({3, 4}, 90).ToDoubleVector());
         return std::vector<Tensor>{updated, sum};
       }});
  return rows;
}

std::vector<OpCase> AllRows() {
  std::vector<OpCase> rows;
  for (auto family : {ActivationRows, SoftmaxRows, LossRows, NormalizationRows, DropoutRows, IndexingRows,
                      ElementwiseRows, AccumulatorRows}) {
    for (OpCase& row : family()) rows.push_back(std::move(row));
  }
  return rows;
}

class OrtGradientOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(OrtGradientOp, MatchesFloat64Reference) { ExpectRowValues(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, OrtGradientOp,
                         ::testing::ValuesIn(testing::RowsWith({testing::OrtGradientCases},
                                                               testing::HasExpectedValues)),
                         RowName());

// ---- error rows: every failure is an edgetrain::Error naming the node ----

std::vector<OpCase> ErrorRows() {
  const Tensor m34 = RandomTensor({3, 4}, 100), m43 = RandomTensor({4, 3}, 101), v4 = RandomTensor({4}, 102);
  const Tensor scalar = Doubles({1.0}, {});
  return {
      {"ReluGrad_OneInput", {"ReluGrad", kMs, {m34}}, ErrorCode::kInvalidModel, "expects 2 inputs, got 1"},
      {"DivGrad_FourInputs",
       {"DivGrad", kMs, {m34, m34, m34, m34}},
       ErrorCode::kInvalidModel,
       "expects 3 inputs, got 4"},
      {"DivGrad_ThreeOutputs",
       {"DivGrad", kMs, {m34, m34, m34}, {}, {true, true, true}},
       ErrorCode::kInvalidModel,
       "expects 1 to 2 outputs, got 3"},
      {"SigmoidGrad_ShapeMismatch",
       {"SigmoidGrad", kMs, {m34, m43}},
       ErrorCode::kInvalidArgument,
       "cannot be broadcast"},
      {"GeluGrad_ShapeMismatch", {"GeluGrad", kMs, {m34, m43}}, ErrorCode::kInvalidArgument, "must match X"},
      {"BiasGeluGrad_dX_BadBias",
       {"BiasGeluGrad_dX", kMs, {m34, m34, RandomTensor({3}, 103)}},
       ErrorCode::kInvalidArgument,
       "last dim of X"},
      {"SoftmaxGrad_13_ShapeMismatch",
       {"SoftmaxGrad_13", kMs, {m34, m43}},
       ErrorCode::kInvalidArgument,
       "must have the same shape"},
      {"SoftmaxCrossEntropyLossGrad_LabelsShape",
       {"SoftmaxCrossEntropyLossGrad", kMs, {scalar, m34, Ints({0, 1})}},
       ErrorCode::kInvalidArgument,
       "labels shape"},
      {"SoftmaxCrossEntropyLossGrad_LabelOutOfRange",
       {"SoftmaxCrossEntropyLossGrad", kMs, {scalar, m34, Ints({0, 1, 4})}},
       ErrorCode::kOutOfRange,
       "label 4 is out of range for 4 classes"},
      {"SoftmaxCrossEntropyLossGrad_NoneNeedsPerPositionDY",
       {"SoftmaxCrossEntropyLossGrad", kMs, {scalar, m34, Ints({0, 1, 2})}, {{"reduction", Attribute::String("none")}}},
       ErrorCode::kInvalidArgument,
       "must have the labels' shape"},
      {"SoftmaxCrossEntropyLossInternalGrad_BadBias",
       {"SoftmaxCrossEntropyLossInternalGrad", kMs, {scalar, m34, Ints({0, 1, 2}), Tensor(), Tensor(), v4}},
       ErrorCode::kInvalidArgument,
       "bias"},
      {"SoftmaxCrossEntropyLossInternal_OutputType",
       {"SoftmaxCrossEntropyLossInternal",
        kMs,
        {m34, Ints({0, 1, 2})},
        {{"output_type", Attribute::Int(1)}},
        {true, true}},
       ErrorCode::kNotImplemented,
       "output_type"},
      {"LayerNormalizationGrad_StatisticsCount",
       {"LayerNormalizationGrad",
        kMs,
        {m34, m34, v4, Doubles({0, 0}, {2}), Doubles({1, 1}, {2})},
        {},
        {true, true, true}},
       ErrorCode::kInvalidArgument,
       "one value per row (3)"},
      {"DropoutGrad_FloatMask", {"DropoutGrad", kMs, {m34, m34}}, ErrorCode::kInvalidArgument, "must be bool"},
      {"DropoutGrad_RatioOne",
       {"DropoutGrad", kMs, {m34, BoolTensor(std::vector<bool>(12, true), {3, 4}), Doubles({1.0}, {})}},
       ErrorCode::kInvalidArgument,
       "outside [0, 1)"},
      {"BitmaskDropoutGrad_ShortMask",
       {"BitmaskDropoutGrad", kMs, {RandomTensor({40}, 104), Tensor::FromVector<uint32_t>({1u}, {1})}},
       ErrorCode::kInvalidArgument,
       "must be 2 uint32 words"},
      {"GatherGrad_GradientShape",
       {"GatherGrad", kMs, {Ints({5, 3}), Ints({1, 2}), m34}},
       ErrorCode::kInvalidArgument,
       "does not match data shape"},
      {"GatherGrad_FloatShape",
       {"GatherGrad", kMs, {v4, Ints({1}), RandomTensor({1}, 105)}},
       ErrorCode::kInvalidArgument,
       "1-D int32/int64 shape"},
      {"GatherGrad_IndexOutOfRange",
       {"GatherGrad", kMs, {Ints({4}), Ints({4}), RandomTensor({1}, 106)}},
       ErrorCode::kOutOfRange,
       "index 4 is out of range"},
      {"GatherElementsGrad_RankMismatch",
       {"GatherElementsGrad", kMs, {v4, Ints({3, 4}), Ints({0, 1, 2, 3})}},
       ErrorCode::kInvalidArgument,
       "rank"},
      {"SliceGrad_GradientShape",
       {"SliceGrad", kMs, {m34, Ints({4, 6}), Ints({0}), Ints({2})}},
       ErrorCode::kInvalidArgument,
       "differs from the slice shape"},
      {"DivGrad_GradientShape",
       {"DivGrad", kMs, {m43, m34, v4}},
       ErrorCode::kInvalidArgument,
       "is not the broadcast shape"},
      {"Scale_VectorScale", {"Scale", kMs, {m34, v4}}, ErrorCode::kInvalidArgument, "must be a numeric scalar"},
      {"ReduceSumTraining_AxisOutOfRange",
       {"ReduceSumTraining", kMs, {m34, Ints({2})}},
       ErrorCode::kInvalidArgument,
       "out of range"},
      {"InPlaceAccumulatorV2_ValueShape",
       {"InPlaceAccumulatorV2", kMs, {m34, RandomTensor({5}, 107)}},
       ErrorCode::kInvalidArgument,
       "cannot be broadcast"},
      {"InPlaceAccumulatorV2_ValueLargerThanBuffer",
       {"InPlaceAccumulatorV2", kMs, {v4, m34}},
       ErrorCode::kInvalidArgument,
       "does not broadcast to the accumulation buffer"},
      {"InPlaceAccumulatorV2_FloatFlag",
       {"InPlaceAccumulatorV2", kMs, {m34, m34, scalar}},
       ErrorCode::kInvalidArgument,
       "must be a bool scalar"},
  };
}

class OrtGradientOpError : public ::testing::TestWithParam<OpCase> {};

TEST_P(OrtGradientOpError, NamesTheNode) { ExpectRowError(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rows, OrtGradientOpError,
                         ::testing::ValuesIn(testing::RowsWith({testing::OrtGradientCases}, testing::HasError)),
                         RowName());

// ---- BitmaskDropout in training mode draws its mask: check the layout and its gradient instead ----

TEST(OrtBitmaskDropout, TrainingMaskLayoutMatchesOutputAndGradient) {
  const OpKernelEntry* entry = OpRegistry::Global().Find(kMs, "BitmaskDropout", 1);
  ASSERT_NE(entry, nullptr);
  EXPECT_FALSE(entry->deterministic) << "a random op must never be constant-folded";

  const int64_t n = 63;  // the last bit of the second word is padding
  const double ratio = 0.4;
  const Tensor x = RandomTensor({7, 9}, 110, 0.5, 1.5), dy = RandomTensor({7, 9}, 111);
  const std::vector<Tensor> forward =
      RunOneNode({"BitmaskDropout", kMs, {x, Doubles({ratio}, {}), BoolTensor({true}, {})}, {}, {true, true}});
  ASSERT_EQ(forward.size(), 2u);
  const Tensor& mask = forward[1];
  ASSERT_EQ(mask.dtype(), DataType::kUint32);
  ASSERT_EQ(mask.shape(), (Shape{2}));
  const uint32_t* words = mask.data<uint32_t>();
  EXPECT_EQ(words[1] >> 31, 0u) << "padding bits stay clear";
  const std::vector<double> xs = x.ToDoubleVector(), ys = forward[0].ToDoubleVector();
  std::vector<bool> keep(n);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    keep[i] = (words[i / 32] >> (i % 32)) & 1u;
    kept += keep[i] ? 1 : 0;
    EXPECT_NEAR(ys[i], keep[i] ? xs[i] / (1 - ratio) : 0.0, 1e-15) << "element " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);

  const std::vector<Tensor> grad = RunOneNode({"BitmaskDropoutGrad", kMs, {dy, mask, Doubles({ratio}, {})}});
  const std::vector<double> dys = dy.ToDoubleVector(), dxs = grad[0].ToDoubleVector();
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(dxs[i], keep[i] ? dys[i] / (1 - ratio) : 0.0, 1e-15) << "element " << i;
}

// Every op named in ORT's training_op_defs.cc that this file implements is registered under each
// domain ORT has declared it in.
TEST(OrtGradientOpRegistry, RegistersEveryDomainOrtUses) {
  const OpRegistry& registry = OpRegistry::Global();
  for (const char* op : {"InPlaceAccumulatorV2",
                         "SoftmaxCrossEntropyLossInternal",
                         "SoftmaxCrossEntropyLossInternalGrad",
                         "SoftmaxCrossEntropyLossGrad",
                         "ReluGrad",
                         "SigmoidGrad",
                         "TanhGrad",
                         "GeluGrad",
                         "FastGeluGrad",
                         "BiasGeluGrad_dX",
                         "BiasFastGeluGrad_dX",
                         "SoftmaxGrad",
                         "LogSoftmaxGrad",
                         "SoftmaxGrad_13",
                         "LogSoftmaxGrad_13",
                         "LayerNormalizationGrad",
                         "SimplifiedLayerNormalizationGrad",
                         "DropoutGrad",
                         "BitmaskDropout",
                         "BitmaskDropoutGrad",
                         "GatherGrad",
                         "GatherElementsGrad",
                         "SliceGrad",
                         "DivGrad",
                         "Scale",
                         "ReduceSumTraining"})
    EXPECT_TRUE(registry.Knows(kMs, op)) << op;
  for (const char* op : {"ReluGrad", "SoftmaxGrad", "GatherGrad", "DivGrad", "LayerNormalizationGrad"})
    EXPECT_TRUE(registry.Knows("", op)) << op;
}

}  // namespace

std::vector<testing::OpCase> testing::OrtGradientCases() { return Concat(AllRows(), ErrorRows()); }

}  // namespace edgetrain
