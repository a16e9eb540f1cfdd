// The oneDNN convolution kernels against the reference kernels on the same float32 data, both
// backends in one process (SetKernelBackend), skipped in a build without oneDNN but for the depthwise rows
// (the direct kernels); and the reference kernels' float32 fast paths against their float64 plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "backend_check.hpp"
#include "ops/conv_dnnl.hpp"

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

// The ConvGrad row of `conv`: dY of its output's shape from `make_dy`, dX, dW, dB as `grad_outputs` asks.
OpCase ConvGradCase(const std::string& name, const OneNode& conv, const AttributeMap& attributes,
                    std::vector<bool> grad_outputs, Tensor (*make_dy)(const Shape&), BackendCheck check) {
  return BackendCase(
      name,
      [conv, attributes, grad_outputs, make_dy] {
        const Shape y_shape = RunOnBackend(KernelBackend::kReference, conv)[0].shape();
        OneNode grad;
        grad.op = "ConvGrad";
        grad.inputs = {make_dy(y_shape), conv.inputs[0].tensor, conv.inputs[1].tensor};
        grad.attributes = attributes;
        grad.outputs = grad_outputs;
        return grad;
      },
      check);
}

// A Conv configuration: its forward row and its ConvGrad row (dX, dW, dB as `grad_outputs` asks).
void AddConv(std::vector<OpCase>& rows, const std::string& name, const Shape& x, const Shape& w,
             const AttributeMap& attributes, bool bias = true, std::vector<bool> grad_outputs = {true, true, true}) {
  const OneNode conv = ConvNode("Conv", x, w, attributes, bias, w[0]);
  rows.push_back(BackendCase("Conv_" + name, conv, BackendCheck::kDnnlVsReference));
  rows.push_back(ConvGradCase("ConvGrad_" + name, conv, attributes, grad_outputs,
                              [](const Shape& y) { return RandomFloats(y, 4); }, BackendCheck::kDnnlVsReference));
}

// The float32 kernels on the reference backend against the float64 ones (the plain im2col loops): Conv and
// ConvGrad with all three outputs, or `grad_outputs`.
void AddConvFloat32(std::vector<OpCase>& rows, const std::string& name, const Shape& x, const Shape& w,
                    const AttributeMap& attributes, bool bias = true,
                    std::vector<bool> grad_outputs = {true, true, true}) {
  std::vector<Tensor> inputs = {RandomTensor(x, 11), RandomTensor(w, 12)};
  if (bias) inputs.push_back(RandomTensor({w[0]}, 13));
  const OneNode conv = OnnxNode("Conv", inputs, attributes);
  rows.push_back(BackendCase("Float32Conv_" + name, conv, BackendCheck::kFloat32VsFloat64));
  rows.push_back(ConvGradCase("Float32ConvGrad_" + name, conv, attributes, grad_outputs,
                              [](const Shape& y) { return RandomTensor(y, 14); }, BackendCheck::kFloat32VsFloat64));
}

void AddConvTranspose(std::vector<OpCase>& rows, const std::string& name, const Shape& x, const Shape& w,
                      const AttributeMap& attributes, bool bias = true) {
  const int64_t groups = attributes.count("group") ? attributes.at("group").i : 1;
  rows.push_back(BackendCase("ConvTranspose_" + name, ConvNode("ConvTranspose", x, w, attributes, bias, w[1] * groups),
                             BackendCheck::kDnnlVsReference));
}

// ai.edgetrain.ChannelAffineConv (`grad`: ChannelAffineConvGrad) of a depthwise k x k convolution over X [N, C, H, W]:
// a training BatchNormalization's map (a in [0.5, 1.5), b in [-1, 1)) and activation applied as X is read, Clip's
// bounds -0.5 and 1.
OneNode ChannelAffineConvNode(bool grad, const Shape& x, int64_t kernel, int64_t stride, const std::string& activation,
                              bool bias) {
  const int64_t c = x[1], pad = kernel / 2;
  std::vector<double> map = RandomValues({c}, 41, 0.5, 1.5), shift = RandomValues({c}, 42);
  map.insert(map.end(), shift.begin(), shift.end());
  const Tensor input = RandomTensor(x, 43, -2.0, 2.0), w = RandomTensor({c, 1, kernel, kernel}, 44);
  const AttributeMap attributes = {{"group", Attribute::Int(c)},
                                   {"strides", Ints({stride, stride})},
                                   {"pads", Ints({pad, pad, pad, pad})},
                                   {"activation", Attribute::String(activation)}};
  OneNode node;
  node.domain = kEdgetrainDomain;
  node.attributes = attributes;
  if (grad) {
    const Shape y = {x[0], c, (x[2] + 2 * pad - kernel) / stride + 1, (x[3] + 2 * pad - kernel) / stride + 1};
    node.op = "ChannelAffineConvGrad";
    node.inputs = {RandomTensor(y, 45), input, w};
    node.outputs = {true, true, true};
  } else {
    node.op = "ChannelAffineConv";
    node.inputs = {input, w, bias ? CaseInput(RandomTensor({c}, 46)) : CaseInput()};
    node.outputs = {true};
  }
  node.inputs.push_back(Tensor::FromVector<double>(map, {2, c}));
  if (activation == "Clip") {
    node.inputs.push_back(Tensor::Scalar<double>(-0.5));
    node.inputs.push_back(Tensor::Scalar<double>(1.0));
  }
  return node;
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
  // Output rows of whole vectors (40 columns: dY read in place, Y stored straight), and of 35 and 33 columns (a
  // partial last vector after whole ones), at strides 1 and 2.
  AddConv(rows, "DepthwiseWholeVectorRows", {2, 4, 5, 40}, {4, 1, 3, 3},
          {{"group", Attribute::Int(4)}, {"pads", Ints({1, 1, 1, 1})}});
  AddConv(rows, "DepthwisePartialLastVector", {1, 3, 4, 35}, {3, 1, 3, 3},
          {{"group", Attribute::Int(3)}, {"pads", Ints({1, 1, 1, 1})}});
  AddConv(rows, "DepthwiseStride2PartialLastVector", {2, 4, 6, 66}, {4, 1, 3, 3},
          {{"group", Attribute::Int(4)}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}});
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
  // ResNet-like 3x3 stride-1 shapes: oneDNN's Winograd on AVX-512 (asymmetric pads: its direct kernels).
  AddConv(rows, "Winograd3x3", {2, 16, 13, 10}, {24, 16, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}});
  AddConv(rows, "Winograd3x3AsymmetricPads", {2, 32, 9, 12}, {16, 32, 3, 3}, {{"pads", Ints({1, 0, 2, 1})}}, false);
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
  // Stride-1 convolutions run on the padded grid in float32 (conv.cpp's ShiftedGrid); float64 runs im2col.
  AddConvFloat32(rows, "LeNetSecond", {3, 6, 14, 14}, {16, 6, 5, 5}, {});
  AddConvFloat32(rows, "BatchOneOddPads", {1, 3, 7, 9}, {5, 3, 3, 4}, {{"pads", Ints({1, 2, 0, 3})}});
  AddConvFloat32(rows, "DilatedGrouped", {2, 4, 9, 8}, {6, 2, 3, 2},
                 {{"group", Attribute::Int(2)}, {"dilations", Ints({2, 3})}, {"pads", Ints({1, 0, 2, 1})}}, false);
  AddConvFloat32(rows, "DepthwiseSame", {2, 5, 6, 5}, {5, 1, 3, 3},
                 {{"group", Attribute::Int(5)}, {"auto_pad", Attribute::String("SAME_UPPER")}});
  AddConvFloat32(rows, "OneDimensional", {2, 3, 13}, {14, 3, 4}, {{"pads", Ints({2, 1})}, {"dilations", Ints({2})}});
  AddConvFloat32(rows, "ThreeDimensional", {1, 2, 4, 5, 6}, {3, 2, 2, 3, 2}, {{"pads", Ints({1, 0, 1, 0, 1, 1})}});
  AddConvFloat32(rows, "OneOutputRow", {2, 2, 3, 7}, {3, 2, 3, 3}, {{"pads", Ints({0, 1, 0, 1})}});
  // Margins larger than the outputs: im2col in float32 too.
  AddConvFloat32(rows, "WideKernelSmallImage", {2, 2, 2, 2}, {3, 2, 7, 7}, {{"pads", Ints({3, 3, 3, 3})}});
  // More weights than GridConvWeights keeps partial sums for (with 8 lanes): im2col for ConvGrad.
  AddConvFloat32(rows, "ManyWeights", {1, 128, 3, 3}, {128, 128, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}});
  // 1-D kernel-3 stride-1 convolutions with 32 or more input channels run Winograd F(4, 3) in float32 (conv.cpp):
  // whole and partial last tiles, asymmetric pads, images in more than one group of tiles, and the fused
  // ConvReluMaxPool of an EEG CNN; within 2e-6 of the largest output (measured: up to 5e-6 absolute on outputs of
  // magnitude ~3).
  for (const auto& [name, x, w, pads] : std::vector<std::tuple<std::string, Shape, Shape, std::vector<int64_t>>>{
           {"Winograd1D", {2, 32, 40}, {12, 32, 3}, {1, 1}},
           {"Winograd1DPartialTile", {1, 33, 23}, {8, 33, 3}, {0, 2}},
           {"Winograd1DWide", {2, 64, 64}, {32, 64, 3}, {2, 0}},
           {"Winograd1DImageGroups", {3, 32, 700}, {8, 32, 3}, {1, 1}}}) {
    std::vector<Tensor> inputs = {RandomTensor(x, 21), RandomTensor(w, 22), RandomTensor({w[0]}, 23)};
    rows.push_back(BackendCase("Float32Conv_" + name, OnnxNode("Conv", inputs, {{"pads", Ints(pads)}}),
                               BackendCheck::kFloat32VsFloat64, 2e-6));
  }
  OneNode eeg = OnnxNode("ConvReluMaxPool", {RandomTensor({2, 40, 64}, 24), RandomTensor({16, 40, 3}, 25)},
                         {{"pads", Ints({1, 1})}, {"pool_kernel_shape", Ints({4})}, {"pool_strides", Ints({4})}});
  eeg.domain = kEdgetrainDomain;
  rows.push_back(BackendCase("Float32ConvReluMaxPool1D", eeg, BackendCheck::kFloat32VsFloat64, 2e-6));
  OneNode fused = OnnxNode("ConvReluMaxPool", {RandomTensor({2, 3, 8, 9}, 15), RandomTensor({5, 3, 3, 3}, 16)},
                           {{"pads", Ints({1, 1, 1, 1})}, {"pool_kernel_shape", Ints({2, 2})},
                            {"pool_strides", Ints({2, 2})}});
  fused.domain = kEdgetrainDomain;
  rows.push_back(BackendCase("Float32ConvReluMaxPool", fused, BackendCheck::kFloat32VsFloat64));
  AddConvFloat32(rows, "GradWithoutDX", {2, 3, 6, 7}, {4, 3, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}, true,
                 {false, true, true});
  AddConvFloat32(rows, "GradWithoutDW", {2, 3, 6, 7}, {7, 3, 3, 3}, {{"pads", Ints({1, 1, 1, 1})}}, true,
                 {true, false, false});
  // The map applied by the direct depthwise kernels (fast backend) and to a copy of X first (reference backend).
  for (const auto& [name, x, kernel, stride, activation, bias] :
       std::vector<std::tuple<std::string, Shape, int64_t, int64_t, std::string, bool>>{
           {"ClipStride1", {2, 6, 9, 11}, 3, 1, "Clip", false},
           {"ReluStride2Bias", {2, 8, 13, 20}, 3, 2, "Relu", true},
           {"NoActivation5x5Stride2", {1, 5, 11, 9}, 5, 2, "", false},
           {"ClipStride2WholeVectorRows", {2, 3, 6, 32}, 3, 2, "Clip", false}}) {
    for (bool grad : {false, true})
      rows.push_back(BackendCase((grad ? "Float32ChannelAffineConvGrad_" : "Float32ChannelAffineConv_") + name,
                                 ChannelAffineConvNode(grad, x, kernel, stride, activation, bias),
                                 BackendCheck::kFloat32VsFloat64));
  }
  return rows;
}

namespace {

bool IsFloat32VsFloat64(const OpCase& row) { return row.backends == BackendCheck::kFloat32VsFloat64; }

// The float32 rows on the reference kernels, in every build (the device-only build has no oneDNN).
class ConvFloat32 : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override { saved_ = ActiveKernelBackend(); }
  void TearDown() override { SetKernelBackend(saved_); }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

TEST_P(ConvFloat32, ReferenceFloat32MatchesFloat64) {
  CheckBackends(GetParam(), KernelBackend::kReference, GetParam().name + " (reference)");
}

INSTANTIATE_TEST_SUITE_P(Rows, ConvFloat32, ::testing::ValuesIn(RowsWith({ConvBackendCases}, IsFloat32VsFloat64)),
                         RowName());

// The threaded splits of the float32 grid path (positions of one image between the threads, dW per batch
// chunk) against one thread, on the reference kernels.
TEST(ConvFloat32Threads, TwoThreadsMatchOne) {
  const KernelBackend saved = ActiveKernelBackend();
  SetKernelBackend(KernelBackend::kReference);
  const AttributeMap attributes = {{"pads", Ints({1, 2, 1, 0})}};
  const OneNode conv = OnnxNode("Conv", {RandomFloats({1, 5, 21, 23}, 31), RandomFloats({13, 5, 3, 3}, 32)}, attributes);
  OneNode grad;
  grad.op = "ConvGrad";
  grad.inputs = {RandomFloats({3, 13, 21, 23}, 33), RandomFloats({3, 5, 21, 23}, 34), RandomFloats({13, 5, 3, 3}, 35)};
  grad.attributes = attributes;
  grad.outputs = {true, true, true};
  for (const OneNode& node : {conv, grad}) {
    auto run = [&](int threads) {
      Model model = OneNodeModel(node);
      model.opsets[kEdgetrainDomain] = 1;
      SessionOptions options;
      options.num_threads = threads;
      std::vector<Tensor> tensors;
      for (const RuntimeValue& value : Session(std::move(model), options).RunValues(OneNodeFeeds(node.inputs)))
        tensors.push_back(value.tensor);
      return tensors;
    };
    ExpectNearLargest(run(2), run(1), 1e-5, node.op + " on 2 threads");
  }
  SetKernelBackend(saved);
}

// Pointwise convolutions on planes of up to 64 positions run as one GEMM over the batch (channel-major): against each
// image on its own (batch 1 keeps the GEMM per image): Y with bias, dX, and dW against the images' sum, within rounding
// (the GEMMs block their sums differently).
TEST(ConvPointwise, OneGemmOverTheBatchMatchesEachImageAlone) {
  const int64_t batch = 3, in_channels = 6, out_channels = 7;
  for (const Shape& plane : {Shape{5, 5}, Shape{8, 8}, Shape{1, 9}}) {
    const int64_t positions = plane[0] * plane[1];
    Shape x_shape = {batch, in_channels}, y_shape = {batch, out_channels};
    x_shape.insert(x_shape.end(), plane.begin(), plane.end());
    y_shape.insert(y_shape.end(), plane.begin(), plane.end());
    const Tensor x = RandomFloats(x_shape, 41), w = RandomFloats({out_channels, in_channels, 1, 1}, 42);
    const Tensor b = RandomFloats({out_channels}, 43), dy = RandomFloats(y_shape, 44);
    auto image = [&](const Tensor& t, int64_t n) {
      Shape shape = t.shape();
      shape[0] = 1;
      Tensor one(DataType::kFloat32, shape);
      const int64_t size = one.numel();
      std::copy_n(t.data<float>() + n * size, size, one.data<float>());
      return one;
    };
    auto conv = [&](const Tensor& xs) { return RunNode(OnnxNode("Conv", {xs, w, b}, {})); };
    auto grad = [&](const Tensor& dys, const Tensor& xs) {
      OneNode node;
      node.op = "ConvGrad";
      node.inputs = {dys, xs, w};
      node.outputs = {true, true, true};
      return RunNode(node);
    };
    const std::vector<Tensor> y = conv(x), g = grad(dy, x);
    std::vector<double> dw_sum(static_cast<size_t>(out_channels * in_channels), 0.0);
    const std::string label = ShapeToString(x_shape);
    for (int64_t n = 0; n < batch; ++n) {
      const std::vector<Tensor> y1 = conv(image(x, n)), g1 = grad(image(dy, n), image(x, n));
      const int64_t y_size = out_channels * positions, x_size = in_channels * positions;
      for (int64_t i = 0; i < y_size; ++i)
        ASSERT_NEAR(y[0].data<float>()[n * y_size + i], y1[0].data<float>()[i], 1e-6) << label << " Y image " << n;
      for (int64_t i = 0; i < x_size; ++i)
        ASSERT_NEAR(g[0].data<float>()[n * x_size + i], g1[0].data<float>()[i], 1e-6) << label << " dX image " << n;
      for (size_t i = 0; i < dw_sum.size(); ++i) dw_sum[i] += g1[1].data<float>()[i];
    }
    for (size_t i = 0; i < dw_sum.size(); ++i) EXPECT_NEAR(g[1].data<float>()[i], dw_sum[i], 1e-5) << label << " dW";
  }
}

// 3x3 stride-1 convolutions of 16 or more channels (ResNet's) run oneDNN's Winograd where it has one (AVX-512):
// there the switch changes the bits; elsewhere, and in builds without oneDNN, it changes nothing (the refused
// algorithm falls back to the direct kernels).
// Float32 2-D max pools compute their windows' taps (pool.cpp, DirectWindows2D) where float64 reads them from the
// window table: the same taps in the same order, so the same maxima, the same first-maximum Indices, and MaxPoolGrad's
// same sums. Integer values make ties common; NaN and -inf sit in some windows; small integer dY add exactly.
TEST(MaxPoolDirect, SameMaximaIndicesAndGradientsAsTheWindowTable) {
  struct Pool {
    Shape x;
    std::vector<int64_t> kernel, strides, pads;
    int64_t ceil_mode;
  };
  const std::vector<Pool> pools = {
      {{2, 3, 11, 12}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},  // ResNet's stem pool
      {{1, 2, 9, 9}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0},    {{1, 2, 8, 10}, {2, 2}, {2, 2}, {0, 0, 0, 0}, 0},
      {{1, 2, 9, 10}, {3, 3}, {2, 2}, {0, 0, 0, 0}, 1},   {{1, 2, 10, 9}, {5, 3}, {2, 3}, {2, 1, 1, 0}, 0},
      {{1, 1, 7, 8}, {3, 2}, {3, 3}, {1, 0, 0, 1}, 1},    {{1, 2, 4, 5}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0},
      // Rows wide enough for windows eight at a time (AVX2) between the padded edges, and a remainder after them.
      {{1, 3, 7, 45}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},   {{1, 2, 5, 42}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0},
      {{1, 2, 6, 40}, {2, 2}, {2, 2}, {0, 0, 0, 0}, 1},   {{1, 2, 6, 37}, {4, 5}, {1, 2}, {1, 2, 2, 1}, 0},
      {{2, 1, 5, 600}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0},
  };
  for (const Pool& p : pools) {
    const std::string label = "input " + ShapeToString(p.x) + " kernel " + std::to_string(p.kernel[0]) + "x" +
                              std::to_string(p.kernel[1]) + " stride " + std::to_string(p.strides[0]);
    const int64_t n = NumElements(p.x);
    std::vector<double> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<double>((i * 7 + i / 5) % 5) - 2.0;
    x[3] = std::nan("");
    x[static_cast<size_t>(n / 2)] = -std::numeric_limits<double>::infinity();
    AttributeMap attributes = {{"kernel_shape", Attribute::Ints(p.kernel)}, {"strides", Attribute::Ints(p.strides)},
                               {"pads", Attribute::Ints(p.pads)}, {"ceil_mode", Attribute::Int(p.ceil_mode)}};
    const Tensor x64 = Tensor::FromVector<double>(x, p.x);
    const std::vector<Tensor> table = RunReference(OnnxNode("MaxPool", {x64}, attributes, 2));
    const std::vector<Tensor> direct = RunReference(OnnxNode("MaxPool", {Float32Of(x64)}, attributes, 2));
    const std::vector<double> expected = table[0].ToDoubleVector(), actual = direct[0].ToDoubleVector();
    ASSERT_EQ(actual.size(), expected.size()) << label;
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_TRUE(actual[i] == expected[i] || (std::isnan(actual[i]) && std::isnan(expected[i])))
          << label << " output " << i << ": " << actual[i] << " against " << expected[i];
    EXPECT_EQ(direct[1].ToVector<int64_t>(), table[1].ToVector<int64_t>()) << label;

    std::vector<double> dy(static_cast<size_t>(table[0].numel()));
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>(i % 7) - 3.0;
    const Tensor dy64 = Tensor::FromVector<double>(dy, table[0].shape());
    OneNode grad = OnnxNode("MaxPoolGrad", {dy64, x64}, attributes);
    grad.domain = kEdgetrainDomain;
    const std::vector<double> dx_table = RunReference(grad)[0].ToDoubleVector();
    grad.inputs = {Float32Of(dy64), Float32Of(x64)};
    EXPECT_EQ(RunReference(grad)[0].ToDoubleVector(), dx_table) << label;
  }
}

TEST(ConvWinograd, RunsWhereOneDnnHasItAndMatchesReference) {
  const KernelBackend saved_backend = ActiveKernelBackend();
  const AttributeMap attributes = {{"pads", Ints({1, 1, 1, 1})}};
  const OneNode conv = ConvNode("Conv", {2, 16, 13, 10}, {24, 16, 3, 3}, attributes, true, 24);
  const OneNode grad =
      ConvGradCase("", conv, attributes, {true, true, true}, [](const Shape& y) { return RandomFloats(y, 4); },
                   BackendCheck::kDnnlVsReference)
          .Node();
  for (const OneNode& node : {conv, grad}) {
    const std::vector<Tensor> reference = RunReference(node);
    const bool saved = SetWinogradConvolutions(true);
    const std::vector<Tensor> winograd = RunFast(node);
    SetWinogradConvolutions(false);
    const std::vector<Tensor> direct = RunFast(node);
    SetWinogradConvolutions(saved);
    ExpectNearLargest(winograd, reference, 1e-5, node.op + " with Winograd");
    ExpectNearLargest(direct, reference, 1e-5, node.op + " without Winograd");
    bool same_bits = true;
    for (size_t k = 0; k < direct.size(); ++k)
      same_bits = same_bits && direct[k].ToDoubleVector() == winograd[k].ToDoubleVector();
    EXPECT_EQ(same_bits, !conv_dnnl::WinogradAvailable()) << node.op;
  }
  SetKernelBackend(saved_backend);
}

// The depthwise rows, which edgetrain's direct kernels take on the fast path (AVX2, NEON, WASM SIMD128): run in
// builds without oneDNN too, against the reference kernels (Direct/ConvBackends.*, also under qemu-aarch64).
bool IsDirectKernelRow(const OpCase& row) {
  return row.backends == BackendCheck::kDnnlVsReference &&
         (row.name.rfind("Conv_Depthwise", 0) == 0 || row.name.rfind("ConvGrad_Depthwise", 0) == 0);
}

class ConvBackends : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override {
    if (!DnnlAvailable() && !IsDirectKernelRow(GetParam())) GTEST_SKIP() << "built without oneDNN";
    saved_ = ActiveKernelBackend();
  }
  void TearDown() override { SetKernelBackend(saved_); }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

TEST_P(ConvBackends, OneDnnMatchesReference) { CheckBackends(GetParam(), KernelBackend::kDnnl, GetParam().name); }

INSTANTIATE_TEST_SUITE_P(Rows, ConvBackends, ::testing::ValuesIn(RowsWith({ConvBackendCases}, [](const OpCase& row) {
                           return HasBackendCheck(row) && !IsDirectKernelRow(row);
                         })),
                         RowName());
INSTANTIATE_TEST_SUITE_P(Direct, ConvBackends, ::testing::ValuesIn(RowsWith({ConvBackendCases}, IsDirectKernelRow)),
                         RowName());

}  // namespace
}  // namespace edgetrain::testing
