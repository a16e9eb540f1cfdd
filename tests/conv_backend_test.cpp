// The oneDNN convolution kernels against the reference kernels on the same float32 data, both
// backends in one process (SetKernelBackend). Skipped in a build without oneDNN.
#include <gtest/gtest.h>

#include "backend_check.hpp"

namespace edgetrain::testing {
namespace {

Tensor RandomFloats(const Shape& shape, uint64_t seed) {
  const std::vector<double> values = RandomValues(shape, seed);
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), shape);
}

Attribute Ints(std::vector<int64_t> values) { return Attribute::Ints(std::move(values)); }

// `op` over float32 X and W of the given shapes (and a bias of `out_channels` when `bias`).
OneNode ConvNode(const std::string& op, const Shape& x, const Shape& w, const AttributeMap& attributes, bool bias,
                 int64_t out_channels) {
  std::vector<Tensor> inputs = {RandomFloats(x, 1), RandomFloats(w, 2)};
  if (bias) inputs.push_back(RandomFloats({out_channels}, 3));
  return OnnxNode(op, inputs, attributes);
}

// A Conv configuration: its forward row and its ConvGrad row (dX, dW, dB as `grad_outputs` asks).
void AddConv(std::vector<OpCase>& rows, const std::string& name, const Shape& x, const Shape& w,
             const AttributeMap& attributes, bool bias = true, std::vector<bool> grad_outputs = {true, true, true}) {
  const OneNode conv = ConvNode("Conv", x, w, attributes, bias, w[0]);
  rows.push_back(BackendCase("Conv_" + name, conv, BackendCheck::kDnnlVsReference));
  rows.push_back(BackendCase(
      "ConvGrad_" + name,
      [conv, attributes, grad_outputs] {
        const Shape y_shape = RunOnBackend(KernelBackend::kReference, conv)[0].shape();
        OneNode grad;
        grad.op = "ConvGrad";
        grad.inputs = {RandomFloats(y_shape, 4), conv.inputs[0].tensor, conv.inputs[1].tensor};
        grad.attributes = attributes;
        grad.outputs = grad_outputs;
        return grad;
      },
      BackendCheck::kDnnlVsReference));
}

void AddConvTranspose(std::vector<OpCase>& rows, const std::string& name, const Shape& x, const Shape& w,
                      const AttributeMap& attributes, bool bias = true) {
  const int64_t groups = attributes.count("group") ? attributes.at("group").i : 1;
  rows.push_back(BackendCase("ConvTranspose_" + name, ConvNode("ConvTranspose", x, w, attributes, bias, w[1] * groups),
                             BackendCheck::kDnnlVsReference));
}

}  // namespace

// oneDNN's convolutions against the reference kernels on the same float32 data: each output within 1e-4
// of the largest magnitude of the reference's output.
std::vector<OpCase> ConvBackendCases() {
  std::vector<OpCase> rows;
  AddConv(rows, "LeNetFirst", {4, 1, 28, 28}, {6, 1, 5, 5}, {{"pads", Ints({2, 2, 2, 2})}});
  AddConv(rows, "LeNetSecond", {4, 6, 14, 14}, {16, 6, 5, 5}, {});
  AddConv(rows, "GroupedStrided", {2, 4, 7, 7}, {6, 2, 3, 3},
          {{"group", Attribute::Int(2)}, {"strides", Ints({2, 2})}});
  AddConv(rows, "Depthwise", {2, 8, 9, 9}, {8, 1, 3, 3}, {{"group", Attribute::Int(8)}, {"pads", Ints({1, 1, 1, 1})}});
  // MobileNet/EfficientNet depthwise shapes: 3x3 and 5x5, strides 1 and 2, odd sizes, batch 1.
  AddConv(rows, "Depthwise5x5Stride2", {2, 12, 11, 9}, {12, 1, 5, 5},
          {{"group", Attribute::Int(12)}, {"strides", Ints({2, 2})}, {"pads", Ints({2, 2, 2, 2})}}, false);
  AddConv(rows, "Depthwise3x3Stride2Batch1", {1, 16, 13, 13}, {16, 1, 3, 3},
          {{"group", Attribute::Int(16)}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}}, false);
  // Input rows and columns no window reaches (no padding, stride 2), and planes narrower than the stride.
  AddConv(rows, "DepthwiseStride2Uncovered", {2, 8, 8, 10}, {8, 1, 3, 3},
          {{"group", Attribute::Int(8)}, {"strides", Ints({2, 2})}});
  AddConv(rows, "DepthwiseTinyPlanes", {2, 8, 1, 3}, {8, 1, 3, 3},
          {{"group", Attribute::Int(8)}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}});
  AddConv(rows, "Depthwise5x5AsymmetricPads", {3, 9, 7, 10}, {9, 1, 5, 5},
          {{"group", Attribute::Int(9)}, {"pads", Ints({2, 1, 2, 3})}});
  AddConv(rows, "DilatedAsymmetricPads", {2, 3, 9, 8}, {4, 3, 3, 2},
          {{"dilations", Ints({2, 1})}, {"pads", Ints({1, 0, 2, 3})}, {"strides", Ints({1, 2})}}, false);
  AddConv(rows, "SameLowerStrided", {2, 3, 6, 7}, {4, 3, 2, 3},
          {{"auto_pad", Attribute::String("SAME_LOWER")}, {"strides", Ints({2, 2})}});
  AddConv(rows, "Pointwise", {2, 5, 6, 6}, {7, 5, 1, 1}, {});
  AddConv(rows, "OneDimensional", {3, 2, 11}, {4, 2, 3},
          {{"strides", Ints({2})}, {"pads", Ints({1, 2})}, {"dilations", Ints({2})}});
  AddConv(rows, "ThreeDimensional", {2, 3, 5, 6, 4}, {4, 3, 3, 2, 3}, {{"pads", Ints({1, 0, 1, 0, 1, 1})}});
  AddConv(rows, "ThreeDimensionalGrouped", {1, 4, 4, 5, 5}, {6, 2, 2, 3, 3},
          {{"group", Attribute::Int(2)}, {"strides", Ints({1, 2, 1})}}, false);
  // Enough channels that oneDNN picks its blocked layouts for dX as well.
  AddConv(rows, "WideDilatedAsymmetricPads", {2, 8, 9, 10}, {8, 8, 3, 2},
          {{"dilations", Ints({2, 1})}, {"pads", Ints({1, 0, 2, 3})}, {"strides", Ints({1, 2})}});
  AddConv(rows, "WideGrouped", {2, 16, 7, 7}, {12, 8, 3, 3},
          {{"group", Attribute::Int(2)}, {"pads", Ints({0, 1, 1, 0})}});
  AddConv(rows, "WideOneDimensional", {2, 8, 12}, {6, 8, 3}, {{"strides", Ints({2})}, {"pads", Ints({2, 1})}});
  // Channels past a block of 16: the forward pass runs on channels-last activations.
  AddConv(rows, "OneDimensionalChannelsLast", {2, 18, 40}, {12, 18, 3}, {{"pads", Ints({1, 1})}});
  AddConv(rows, "WideThreeDimensional", {1, 6, 4, 5, 5}, {8, 6, 2, 3, 3},
          {{"dilations", Ints({1, 1, 2})}, {"pads", Ints({0, 1, 1, 1, 0, 2})}});
  AddConv(rows, "GradWithoutDX", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {false, true, true});
  AddConv(rows, "GradWithoutDW", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {true, false, true});
  AddConv(rows, "GradWithoutDB", {2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, {true, true, false});
  AddConvTranspose(rows, "Plain", {2, 3, 4, 4}, {3, 2, 3, 3}, {});
  AddConvTranspose(rows, "StridesPadsOutputPadding", {2, 2, 3, 4}, {2, 3, 3, 3},
                   {{"strides", Ints({2, 2})}, {"pads", Ints({1, 0, 0, 1})}, {"output_padding", Ints({1, 1})}});
  AddConvTranspose(rows, "GroupedDilated", {2, 4, 3, 3}, {4, 3, 3, 3},
                   {{"group", Attribute::Int(2)}, {"dilations", Ints({2, 2})}}, false);
  AddConvTranspose(rows, "OneDimensional", {2, 2, 5}, {2, 3, 3}, {{"strides", Ints({2})}, {"dilations", Ints({2})}});
  AddConvTranspose(rows, "ThreeDimensional", {1, 2, 3, 3, 3}, {2, 2, 2, 2, 2}, {{"strides", Ints({2, 2, 2})}});
  AddConvTranspose(rows, "WideStridesPadsOutputPadding", {2, 6, 3, 4}, {6, 8, 3, 3},
                   {{"strides", Ints({2, 2})}, {"pads", Ints({1, 0, 0, 1})}, {"output_padding", Ints({1, 1})}});
  AddConvTranspose(rows, "WideGroupedDilated", {2, 8, 4, 4}, {8, 6, 3, 3},
                   {{"group", Attribute::Int(2)}, {"dilations", Ints({2, 1})}}, false);
  AddConvTranspose(rows, "WideThreeDimensional", {1, 4, 3, 3, 2}, {4, 6, 2, 2, 3}, {{"strides", Ints({2, 1, 2})}});
  // Beyond the full extent: negative pads, which only the reference code takes.
  AddConvTranspose(rows, "OutputShapeBeyondExtent", {1, 2, 3, 3}, {2, 2, 3, 3},
                   {{"strides", Ints({2, 2})}, {"output_shape", Ints({9, 9})}});
  return rows;
}

namespace {

class ConvBackends : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override {
    if (!DnnlAvailable()) GTEST_SKIP() << "built without oneDNN";
    saved_ = ActiveKernelBackend();
  }
  void TearDown() override {
    if (DnnlAvailable()) SetKernelBackend(saved_);
  }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

TEST_P(ConvBackends, OneDnnMatchesReference) { CheckBackends(GetParam(), KernelBackend::kDnnl, GetParam().name); }

INSTANTIATE_TEST_SUITE_P(Rows, ConvBackends, ::testing::ValuesIn(RowsWith({ConvBackendCases}, HasBackendCheck)),
                         RowName());

}  // namespace
}  // namespace edgetrain::testing
