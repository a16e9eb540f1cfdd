// The operator case table: one row type, OpCase, for every per-operator check. A row is one node
// (operator, domain, opset, attributes, inputs) and the checks that apply to it: the float64 gradient
// against central differences (tests/gradient_check.cpp), expected outputs of a one-node run or the
// typed error of a bad node (tests/ort_op_test_util.hpp), and the fast kernels (oneDNN) against the
// reference kernels (tests/*_backend_test.cpp). op_case_coverage_test.cpp ties every registered
// operator to a row.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace edgetrain::testing {

// An input of a row's node: a fixed tensor (implicit from Tensor) or sequence, a random float64
// tensor (In), or left out (a default CaseInput). The gradient check bakes fixed tensors in as
// initializers; the other checks feed them.
struct CaseInput : RuntimeValue {
  CaseInput() = default;
  CaseInput(Tensor t) : RuntimeValue(RuntimeValue::Of(std::move(t))) {}  // implicit, so rows list plain tensors
  bool random = false;  // uniform float64 values in [low, high) of `shape`, drawn per check
  Shape shape;
  double low = -1.0, high = 1.0;  // keep away from kinks
  bool differentiable = false;    // a random input whose gradient the gradient check compares
  bool present() const { return random || is_sequence || tensor.defined(); }
};

inline CaseInput In(Shape shape, double low = -1.0, double high = 1.0) {
  CaseInput in;
  in.random = true;
  in.differentiable = true;
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}
inline CaseInput Const(Tensor value) { return CaseInput(std::move(value)); }
inline CaseInput Omitted() { return CaseInput(); }
inline CaseInput SequenceInput(TensorSequence tensors) {
  CaseInput input;
  input.is_sequence = true;
  input.sequence = std::move(tensors);
  return input;
}

// The node of a row: `op` of `domain` over `inputs`. outputs[k] false leaves output k out of the node.
struct OneNode {
  std::string op;
  std::string domain = kMicrosoftDomain;
  std::vector<CaseInput> inputs;
  AttributeMap attributes = {};
  std::vector<bool> outputs = {true};
  int64_t opset = 17;                             // of the ONNX domain
  std::map<size_t, Shape> declared_outputs = {};  // output shapes the model declares (-1: symbolic batch)
};

// A forward node of the ONNX domain with all its `num_outputs` outputs requested.
inline OneNode OnnxNode(const std::string& op, const std::vector<Tensor>& inputs, AttributeMap attributes,
                        size_t num_outputs = 1, int64_t opset = 17) {
  OneNode node{op, "", {inputs.begin(), inputs.end()}, std::move(attributes)};
  node.outputs.assign(num_outputs, true);
  node.opset = opset;
  return node;
}

// Which fast-kernel comparison a row asks for.
enum class BackendCheck {
  kNone,
  kDnnlVsReference,           // the same float32 inputs on oneDNN and on the reference kernels (skipped without oneDNN)
  kFloat32VsFloat64,          // float32 on each backend against the float64 inputs on the reference kernels
  kFloat32VsFloat64Absolute,  // the same, within tolerance * max(1, |expected|) of each element
};

using InputTransform = std::function<void(size_t input, std::vector<double>& values)>;

// One row of the table. The three constructors are the three row shapes the tables write positionally;
// set the other checks' fields after construction to let one row drive several checks.
struct OpCase {
  OpCase() = default;
  // A float64 gradient row: every random input's gradient against central differences within `tolerance`.
  OpCase(std::string row_name, std::string op, std::vector<CaseInput> inputs, AttributeMap attributes = {},
         int num_outputs = 1, std::string domain = "", double tolerance = 1e-5,
         InputTransform input_transform = nullptr)
      : name(std::move(row_name)),
        node{std::move(op), std::move(domain), std::move(inputs), std::move(attributes),
             std::vector<bool>(static_cast<size_t>(num_outputs), true)},
        gradient(true),
        gradient_tolerance(tolerance),
        transform(std::move(input_transform)) {}
  // An expected-values row: the node's requested outputs equal `values()` within tolerance * max(1, |expected|).
  OpCase(std::string row_name, OneNode one_node, std::function<std::vector<Tensor>()> values, double tolerance = 1e-6)
      : name(std::move(row_name)),
        node(std::move(one_node)),
        expected(std::move(values)),
        expected_tolerance(tolerance) {}
  // An error row: running the node fails with `code` and a message naming the node and containing `needle`.
  OpCase(std::string row_name, OneNode one_node, ErrorCode code, std::string needle)
      : name(std::move(row_name)),
        node(std::move(one_node)),
        error(true),
        error_code(code),
        error_needle(std::move(needle)) {}

  std::string name;  // row label (unique within its table)
  OneNode node;
  std::function<OneNode()> make_node = nullptr;  // when set: builds the node at check time (it needs a run)

  bool gradient = false;  // float64 gradient check
  double gradient_tolerance = 1e-5;
  InputTransform transform = nullptr;  // of the random input values (e.g. keep |x| away from 0 for Abs)

  std::function<std::vector<Tensor>()> expected = nullptr;  // expected-values check
  double expected_tolerance = 1e-6;

  bool error = false;  // typed-error check
  ErrorCode error_code = ErrorCode::kInvalidArgument;
  std::string error_needle;

  BackendCheck backends = BackendCheck::kNone;  // fast kernels against the reference kernels
  double backend_tolerance = 1e-4;              // times the largest magnitude of each reference output

  OneNode Node() const { return make_node ? make_node() : node; }
};

inline void PrintTo(const OpCase& row, std::ostream* os) { *os << row.name; }

// `row` built at a default-domain opset other than 17.
inline OpCase AtOpset(int64_t opset, OpCase row) {
  row.node.opset = opset;
  return row;
}

// A fast-kernel comparison row over `node` (or a node `make` builds at check time).
inline OpCase BackendCase(std::string name, OneNode node, BackendCheck check, double tolerance = 1e-4) {
  OpCase row;
  row.name = std::move(name);
  row.node = std::move(node);
  row.backends = check;
  row.backend_tolerance = tolerance;
  return row;
}
inline OpCase BackendCase(std::string name, std::function<OneNode()> make, BackendCheck check,
                          double tolerance = 1e-4) {
  OpCase row = BackendCase(std::move(name), OneNode{}, check, tolerance);
  row.make_node = std::move(make);
  return row;
}

// Parameterized rows are named by their `name`.
struct RowName {
  template <typename Row>
  std::string operator()(const ::testing::TestParamInfo<Row>& info) const {
    return info.param.name;
  }
};

// The tables. Gradient rows, one function per operator family (tests/gradient_rows_*.cpp).
std::vector<OpCase> ElementwiseGradCases();
std::vector<OpCase> ActivationGradCases();
std::vector<OpCase> ReductionGradCases();
std::vector<OpCase> ShapeGradCases();
std::vector<OpCase> MatMulConvGradCases();
std::vector<OpCase> NormalizationGradCases();
std::vector<OpCase> RecurrentGradCases();
std::vector<OpCase> SpectralGradCases();
std::vector<OpCase> VisionLinalgGradCases();
std::vector<OpCase> ScanGradCases();

// Expected-values and error rows of ONNX Runtime's operators and of ONNX operators beyond the node tests
// (tests/ort_*_ops_test.cpp, onnx_ops_test.cpp, string_ops_test.cpp).
std::vector<OpCase> OrtContribCases();
std::vector<OpCase> OrtGradientCases();
std::vector<OpCase> OrtFusedCases();
std::vector<OpCase> OnnxOpsCases();
std::vector<OpCase> StringOpsCases();

// Fast-kernel rows (tests/conv_backend_test.cpp, norm_backend_test.cpp, gemm_backend_test.cpp).
std::vector<OpCase> ConvBackendCases();
std::vector<OpCase> NormBackendCases();
std::vector<OpCase> ProductBackendCases();

inline bool HasGradient(const OpCase& row) { return row.gradient; }
inline bool HasExpectedValues(const OpCase& row) { return static_cast<bool>(row.expected); }
inline bool HasError(const OpCase& row) { return row.error; }
inline bool HasBackendCheck(const OpCase& row) { return row.backends != BackendCheck::kNone; }

inline std::vector<OpCase> Concat(std::vector<OpCase> a, std::vector<OpCase> b) {
  a.insert(a.end(), std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()));
  return a;
}

// The rows of `tables` that have a check `has` asks for.
inline std::vector<OpCase> RowsWith(std::initializer_list<std::vector<OpCase> (*)()> tables,
                                    const std::function<bool(const OpCase&)>& has) {
  std::vector<OpCase> rows;
  for (auto* table : tables)
    for (OpCase& row : table())
      if (has(row)) rows.push_back(std::move(row));
  return rows;
}

// A named table of rows and the function that builds it.
struct CaseTable {
  const char* name;
  std::vector<OpCase> (*rows)();
};

}  // namespace edgetrain::testing
