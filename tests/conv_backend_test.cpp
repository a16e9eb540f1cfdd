// The oneDNN convolution kernels against the reference kernels on the same float32 data, both
// backends in one process (SetKernelBackend). Skipped in a build without oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/kernel_backend.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain::testing {
namespace {

Tensor RandomFloats(const Shape& shape, uint64_t seed) {
  const std::vector<double> values = RandomValues(shape, seed);
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), shape);
}

class KernelBackendTest {
 protected:
  static std::vector<Tensor> RunWith(KernelBackend backend, const OneNode& node) {
    SetKernelBackend(backend);
    return RunOneNode(node);
  }

  // Each output of oneDNN within 1e-4 of the largest magnitude of the reference's output.
  static void ExpectBackendsAgree(const OneNode& node, const std::string& label) {
    const std::vector<Tensor> dnnl = RunWith(KernelBackend::kDnnl, node);
    const std::vector<Tensor> reference = RunWith(KernelBackend::kReference, node);
    ASSERT_EQ(dnnl.size(), reference.size()) << label;
    for (size_t k = 0; k < reference.size(); ++k) {
      const std::vector<double> expected = reference[k].ToDoubleVector();
      double largest = 0.0;
      for (double v : expected) largest = std::max(largest, std::abs(v));
      ASSERT_GT(largest, 0.0) << label << " output " << k << " is all zeros";
      ExpectValuesNear(dnnl[k], reference[k].shape(), expected, 1e-4 * largest, label + " output " + std::to_string(k));
    }
  }
};

// A Conv (with its gradient) or ConvTranspose configuration.
struct ConvRow {
  std::string name;
  Shape x, w;
  AttributeMap attributes;
  bool bias = true;
  std::vector<bool> grad_outputs = {true, true, true};  // dX, dW, dB of ConvGrad
};
void PrintTo(const ConvRow& row, std::ostream* os) { *os << row.name; }

class ConvBackends : public KernelBackendTest, public ::testing::TestWithParam<ConvRow> {
 protected:
  void SetUp() override {
    if (!DnnlAvailable()) GTEST_SKIP() << "built without oneDNN";
    saved_ = ActiveKernelBackend();
  }
  void TearDown() override {
    if (DnnlAvailable()) SetKernelBackend(saved_);
  }

  OneNode Forward(const std::string& op, int64_t out_channels) const {
    const ConvRow& row = GetParam();
    std::vector<Tensor> inputs = {RandomFloats(row.x, 1), RandomFloats(row.w, 2)};
    if (row.bias) inputs.push_back(RandomFloats({out_channels}, 3));
    return OnnxNode(op, inputs, row.attributes);
  }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

using ConvTransposeBackends = ConvBackends;

TEST_P(ConvBackends, ConvForwardAgrees) { ExpectBackendsAgree(Forward("Conv", GetParam().w[0]), GetParam().name); }

TEST_P(ConvBackends, ConvGradAgrees) {
  const ConvRow& row = GetParam();
  const OneNode conv = Forward("Conv", row.w[0]);
  SetKernelBackend(KernelBackend::kReference);
  const Shape y_shape = RunOneNode(conv)[0].shape();
  OneNode grad;
  grad.op = "ConvGrad";
  grad.inputs = {RandomFloats(y_shape, 4), conv.inputs[0].tensor, conv.inputs[1].tensor};
  grad.attributes = row.attributes;
  grad.outputs = row.grad_outputs;
  ExpectBackendsAgree(grad, row.name);
}

Attribute Ints(std::vector<int64_t> values) { return Attribute::Ints(std::move(values)); }

INSTANTIATE_TEST_SUITE_P(
    Rows, ConvBackends,
    ::testing::Values(
        ConvRow{"LeNetFirst", {4, 1, 28, 28}, {6, 1, 5, 5}, {{"pads", Ints({2, 2, 2, 2})}}},
        ConvRow{"LeNetSecond", {4, 6, 14, 14}, {16, 6, 5, 5}, {}},
        ConvRow{
            "GroupedStrided", {2, 4, 7, 7}, {6, 2, 3, 3}, {{"group", Attribute::Int(2)}, {"strides", Ints({2, 2})}}},
        ConvRow{"Depthwise", {2, 8, 9, 9}, {8, 1, 3, 3}, {{"group", Attribute::Int(8)}, {"pads", Ints({1, 1, 1, 1})}}},
        ConvRow{"DilatedAsymmetricPads",
                {2, 3, 9, 8},
                {4, 3, 3, 2},
                {{"dilations", Ints({2, 1})}, {"pads", Ints({1, 0, 2, 3})}, {"strides", Ints({1, 2})}},
                false},
        ConvRow{"SameLowerStrided",
                {2, 3, 6, 7},
                {4, 3, 2, 3},
                {{"auto_pad", Attribute::String("SAME_LOWER")}, {"strides", Ints({2, 2})}}},
        ConvRow{"Pointwise", {2, 5, 6, 6}, {7, 5, 1, 1}, {}},
        ConvRow{"OneDimensional",
                {3, 2, 11},
                {4, 2, 3},
                {{"strides", Ints({2})}, {"pads", Ints({1, 2})}, {"dilations", Ints({2})}}},
        ConvRow{"ThreeDimensional", {2, 3, 5, 6, 4}, {4, 3, 3, 2, 3}, {{"pads", Ints({1, 0, 1, 0, 1, 1})}}},
        ConvRow{"ThreeDimensionalGrouped",
                {1, 4, 4, 5, 5},
                {6, 2, 2, 3, 3},
                {{"group", Attribute::Int(2)}, {"strides", Ints({1, 2, 1})}},
                false},
        // Enough channels that oneDNN picks its blocked layouts for dX as well.
        ConvRow{"WideDilatedAsymmetricPads",
                {2, 8, 9, 10},
                {8, 8, 3, 2},
                {{"dilations", Ints({2, 1})}, {"pads", Ints({1, 0, 2, 3})}, {"strides", Ints({1, 2})}}},
        ConvRow{
            "WideGrouped", {2, 16, 7, 7}, {12, 8, 3, 3}, {{"group", Attribute::Int(2)}, {"pads", Ints({0, 1, 1, 0})}}},
        ConvRow{"WideOneDimensional", {2, 8, 12}, {6, 8, 3}, {{"strides", Ints({2})}, {"pads", Ints({2, 1})}}},
        // Channels past a block of 16: the forward pass runs on channels-last activations.
        ConvRow{"OneDimensionalChannelsLast", {2, 18, 40}, {12, 18, 3}, {{"pads", Ints({1, 1})}}},
        ConvRow{"WideThreeDimensional",
                {1, 6, 4, 5, 5},
                {8, 6, 2, 3, 3},
                {{"dilations", Ints({1, 1, 2})}, {"pads", Ints({0, 1, 1, 1, 0, 2})}}},
        ConvRow{"GradWithoutDX", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {false, true, true}},
        ConvRow{"GradWithoutDW", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {true, false, true}},
        ConvRow{"GradWithoutDB", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {true, true, false}}),
    RowName());

TEST_P(ConvTransposeBackends, ConvTransposeForwardAgrees) {
  const ConvRow& row = GetParam();
  const int64_t groups = row.attributes.count("group") ? row.attributes.at("group").i : 1;
  ExpectBackendsAgree(Forward("ConvTranspose", row.w[1] * groups), row.name);
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ConvTransposeBackends,
    ::testing::Values(
        ConvRow{"Plain", {2, 3, 4, 4}, {3, 2, 3, 3}, {}},
        ConvRow{"StridesPadsOutputPadding",
                {2, 2, 3, 4},
                {2, 3, 3, 3},
                {{"strides", Ints({2, 2})}, {"pads", Ints({1, 0, 0, 1})}, {"output_padding", Ints({1, 1})}}},
        ConvRow{"GroupedDilated",
                {2, 4, 3, 3},
                {4, 3, 3, 3},
                {{"group", Attribute::Int(2)}, {"dilations", Ints({2, 2})}},
                false},
        ConvRow{"OneDimensional", {2, 2, 5}, {2, 3, 3}, {{"strides", Ints({2})}, {"dilations", Ints({2})}}},
        ConvRow{"ThreeDimensional", {1, 2, 3, 3, 3}, {2, 2, 2, 2, 2}, {{"strides", Ints({2, 2, 2})}}},
        ConvRow{"WideStridesPadsOutputPadding",
                {2, 6, 3, 4},
                {6, 8, 3, 3},
                {{"strides", Ints({2, 2})}, {"pads", Ints({1, 0, 0, 1})}, {"output_padding", Ints({1, 1})}}},
        ConvRow{"WideGroupedDilated",
                {2, 8, 4, 4},
                {8, 6, 3, 3},
                {{"group", Attribute::Int(2)}, {"dilations", Ints({2, 1})}},
                false},
        ConvRow{"WideThreeDimensional", {1, 4, 3, 3, 2}, {4, 6, 2, 2, 3}, {{"strides", Ints({2, 1, 2})}}},
        // Beyond the full extent: negative pads, which only the reference code takes.
        ConvRow{"OutputShapeBeyondExtent",
                {1, 2, 3, 3},
                {2, 2, 3, 3},
                {{"strides", Ints({2, 2})}, {"output_shape", Ints({9, 9})}}}),
    RowName());

}  // namespace
}  // namespace edgetrain::testing
