// Helpers for the tests of ONNX Runtime's operators: run one node in a model of its own, turn a
// forward node into a function of one input, and take float64 central differences through it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_case.hpp"
#include "ops/kernel.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

namespace edgetrain::testing {

// The name of the node every one-node model runs; errors must name it.
inline constexpr const char* kOneNodeName = "ort_op";

inline std::string OneNodeInput(size_t i) { return "in" + std::to_string(i); }

inline Model OneNodeModel(const OneNode& spec) {
  Model m;
  m.source = spec.op + " test";
  m.opsets = {{"", spec.opset}, {kMicrosoftDomain, 1}};
  m.opsets.emplace(spec.domain, 1);  // a node of another domain (ai.onnx.preview.training, ...) imports it
  Node node;
  node.name = kOneNodeName;
  node.op_type = spec.op;
  node.domain = spec.domain;
  node.attributes = spec.attributes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const CaseInput& input = spec.inputs[i];
    if (!input.present()) {
      node.inputs.push_back("");
      continue;
    }
    EXPECT_FALSE(input.random) << spec.op << " input " << i << ": a one-node run takes fixed values";
    ValueInfo info;
    if (input.is_sequence) {
      info.name = OneNodeInput(i);
      info.is_sequence = true;
      info.dtype = input.sequence.empty() ? DataType::kFloat64 : input.sequence[0].dtype();
    } else {
      info = ValueInfoOf(OneNodeInput(i), input.tensor.dtype(), input.tensor.shape());
    }
    node.inputs.push_back(info.name);
    m.graph.inputs.push_back(info);
  }
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    node.outputs.push_back(spec.outputs[k] ? "out" + std::to_string(k) : "");
    if (!spec.outputs[k]) continue;
    ValueInfo info;
    info.name = node.outputs.back();
    if (spec.declared_outputs.count(k))
      info = ValueInfoOf(info.name, DataType::kUndefined, spec.declared_outputs.at(k));
    m.graph.outputs.push_back(info);
  }
  m.graph.nodes.push_back(node);
  return m;
}

inline std::map<std::string, RuntimeValue> OneNodeFeeds(const std::vector<CaseInput>& inputs) {
  std::map<std::string, RuntimeValue> feeds;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].present()) feeds[OneNodeInput(i)] = inputs[i];
  return feeds;
}

// The node's requested outputs, in order, tensors or sequences.
inline std::vector<RuntimeValue> RunOneNodeValues(const OneNode& spec) {
  return Session(OneNodeModel(spec)).RunValues(OneNodeFeeds(spec.inputs));
}

// The node's requested outputs, in order, all tensors.
inline std::vector<Tensor> RunOneNode(const OneNode& spec) {
  std::vector<Tensor> tensors;
  for (const RuntimeValue& value : RunOneNodeValues(spec)) {
    EXPECT_FALSE(value.is_sequence) << spec.op << ": an output is a sequence; use RunOneNodeValues";
    tensors.push_back(value.tensor);
  }
  return tensors;
}

// The node as a function of input `which` (the others fixed) giving its requested output `output`.
inline std::function<Tensor(const Tensor&)> OneNodeFunction(const OneNode& spec, size_t which, size_t output = 0) {
  auto session = std::make_shared<Session>(OneNodeModel(spec));
  return [session, inputs = spec.inputs, which, output](const Tensor& x) {
    std::vector<CaseInput> fed = inputs;
    fed[which] = x;
    return session->RunValues(OneNodeFeeds(fed))[output].tensor;
  };
}

inline Tensor Doubles(const std::vector<double>& values, const Shape& shape) {
  return Tensor::FromVector<double>(values, shape);
}

// Uniform float64 values in [low, high), seeded.
inline std::vector<double> RandomValues(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(static_cast<size_t>(NumElements(shape)));
  for (double& v : values) v = dist(rng);
  return values;
}
inline Tensor RandomTensor(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  return Doubles(RandomValues(shape, seed, low, high), shape);
}

// d/dx sum(dy * f(x)) for a float64 x, by central differences element by element.
inline Tensor CentralDifferenceVjp(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& dy,
                                   double h = 1e-6) {
  const std::vector<double> weights = dy.ToDoubleVector();
  auto weighted_sum = [&](const std::vector<double>& point) {
    const std::vector<double> y = f(Doubles(point, x.shape())).ToDoubleVector();
    EXPECT_EQ(y.size(), weights.size()) << "dY does not match the forward output";
    double sum = 0.0;
    for (size_t i = 0; i < y.size() && i < weights.size(); ++i) sum += weights[i] * y[i];
    return sum;
  };
  const std::vector<double> base = x.ToDoubleVector();
  std::vector<double> grad(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<double> plus = base, minus = base;
    plus[i] += h;
    minus[i] -= h;
    grad[i] = (weighted_sum(plus) - weighted_sum(minus)) / (2 * h);
  }
  return Doubles(grad, x.shape());
}

// Shape `shape`; values within tolerance * max(1, |expected|).
inline void ExpectValuesNear(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                             double tolerance, const std::string& label) {
  ASSERT_EQ(ShapeToString(actual.shape()), ShapeToString(shape)) << label;
  const std::vector<double> values = actual.ToDoubleVector();
  ASSERT_EQ(values.size(), expected.size()) << label;
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_NEAR(values[i], expected[i], tolerance * std::max(1.0, std::abs(expected[i]))) << label << " element " << i;
}

// Same element type and shape; values within tolerance * max(1, |expected|).
inline void ExpectTensorNear(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& label) {
  ASSERT_EQ(DataTypeName(actual.dtype()), DataTypeName(expected.dtype())) << label;
  ExpectValuesNear(actual, expected.shape(), expected.ToDoubleVector(), tolerance, label);
}

// The expected-values check of a row: its node's requested outputs equal `expected()` within tolerance.
inline void ExpectRowValues(const OpCase& row) {
  ASSERT_TRUE(row.expected) << row.name << ": not an expected-values row";
  const std::vector<Tensor> actual = RunOneNode(row.Node());
  const std::vector<Tensor> expected = row.expected();
  ASSERT_EQ(actual.size(), expected.size()) << row.name;
  for (size_t k = 0; k < actual.size(); ++k)
    ExpectTensorNear(actual[k], expected[k], row.expected_tolerance, row.name + " output " + std::to_string(k));
}

// The typed-error check of a row: its node fails with the row's code and a message naming the node and the needle.
inline void ExpectRowError(const OpCase& row) {
  ASSERT_TRUE(row.error) << row.name << ": not an error row";
  try {
    RunOneNodeValues(row.Node());
    ADD_FAILURE() << row.name << ": expected an error containing: " << row.error_needle;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(ErrorCodeName(e.code()), ErrorCodeName(row.error_code)) << message;
    EXPECT_NE(message.find("node '" + std::string(kOneNodeName) + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(row.error_needle), std::string::npos) << message;
  }
}

}  // namespace edgetrain::testing
