// Gradient-check rows for src/ops/spectral.cpp: DFT (real and complex input, inverse, onesided,
// dft_length padding and truncation, axis as attribute and as input) and STFT (signal and window);
// the transform's accuracy on every path (radix-2, direct, Bluestein); bad inputs of DFT, STFT and
// MelWeightMatrix.
#include <cmath>
#include <numbers>
#include <optional>
#include <random>

#include "gradient_check.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "runtime/export_options.hpp"
#include "runtime/session.hpp"

namespace edgetrain::testing {

namespace {

Attribute I(int64_t v) { return Attribute::Int(v); }
CaseInput Scalar(int64_t v) { return Const(Tensor::Scalar<int64_t>(v)); }

OpCase Dft(std::string name, Shape x, AttributeMap attrs, std::vector<CaseInput> extra = {}, int64_t opset = 17) {
  std::vector<CaseInput> in = {In(std::move(x))};
  for (auto& e : extra) in.push_back(std::move(e));
  OpCase row{std::move(name), "DFT", std::move(in), std::move(attrs)};
  row.node.opset = opset;
  return row;
}

OpCase Stft(std::string name, Shape signal, int64_t step, std::optional<int64_t> window, std::optional<int64_t> frame,
            AttributeMap attrs = {}) {
  std::vector<CaseInput> in = {In(std::move(signal)), Scalar(step)};
  in.push_back(window ? In({*window}) : Omitted());
  if (frame) in.push_back(Scalar(*frame));
  return OpCase{std::move(name), "STFT", std::move(in), std::move(attrs)};
}

}  // namespace

std::vector<OpCase> SpectralGradCases() {
  return {
      Dft("DFT_real", {2, 6, 1}, {}),
      Dft("DFT_complex", {2, 5, 2}, {}),
      Dft("DFT_real_onesided_even", {2, 8, 1}, {{"onesided", I(1)}}),
      Dft("DFT_real_onesided_odd", {1, 7, 1}, {{"onesided", I(1)}}),
      Dft("DFT_inverse_complex_axis1", {1, 6, 3, 2}, {{"inverse", I(1)}}),
      Dft("DFT_inverse_onesided", {1, 3, 6, 1}, {{"inverse", I(1)}, {"onesided", I(1)}, {"axis", I(2)}}),
      Dft("DFT_axis2_inner", {2, 3, 4, 2}, {{"axis", I(2)}}),
      Dft("DFT_negative_axis", {2, 3, 4, 1}, {{"axis", I(-3)}}),
      Dft("DFT_dft_length_pads", {2, 5, 2}, {}, {Scalar(8)}),
      Dft("DFT_dft_length_truncates", {2, 6, 1}, {{"onesided", I(1)}}, {Scalar(4)}),
      Dft("DFT_bluestein_length_70", {1, 70, 1}, {{"onesided", I(1)}}),
      Dft("DFT_radix2_length_16_inverse", {1, 16, 2}, {{"inverse", I(1)}}),
      Dft("DFT20_default_axis", {2, 3, 5, 2}, {}, {}, 20),
      Dft("DFT20_axis_input_dft_length", {2, 5, 3, 1}, {{"onesided", I(1)}}, {Scalar(7), Scalar(1)}, 20),
      Dft("DFT20_inverse_axis_input", {2, 4, 3, 2}, {{"inverse", I(1)}}, {Omitted(), Scalar(-3)}, 20),
      Stft("STFT_real_window_onesided", {2, 16, 1}, 4, 8, std::nullopt),
      Stft("STFT_real_window_and_frame_length", {1, 13, 1}, 3, 6, 6),
      Stft("STFT_real_no_window", {2, 12, 1}, 2, std::nullopt, 5),
      Stft("STFT_complex_window_twosided", {2, 11, 2}, 3, 5, std::nullopt, {{"onesided", I(0)}}),
      Stft("STFT_real_window_twosided_odd", {1, 10, 1}, 5, 5, std::nullopt, {{"onesided", I(0)}}),
      OpCase{"MelWeightMatrix_edges_piecewise_constant", "MelWeightMatrix",
               {Const(Tensor::Scalar<int64_t>(6)), Const(Tensor::Scalar<int64_t>(32)),
                Const(Tensor::Scalar<int64_t>(4096)), In({}, 10, 90), In({}, 1500, 1900)},
               {{"output_datatype", I(11)}}},
  };
}

namespace {

// One node over named inputs; returns its first output or throws.
Tensor RunNode(const std::string& op, const std::vector<std::pair<std::string, Tensor>>& inputs, AttributeMap attrs,
               int64_t opset = 17) {
  Model m;
  m.source = "spectral.onnx";
  m.opsets[""] = opset;
  Node node{"spectral_node", op, "", {}, {"Y"}, std::move(attrs), 0};
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, value] : inputs) {
    node.inputs.push_back(name);
    if (name.empty()) continue;
    ValueInfo v;
    v.name = name;
    v.dtype = value.dtype();
    m.graph.inputs.push_back(v);
    feeds[name] = value;
  }
  m.graph.nodes.push_back(node);
  ValueInfo y;
  y.name = "Y";
  m.graph.outputs.push_back(y);
  return Session(m).Run(feeds)[0];
}

std::string ErrorOf(const std::string& op, const std::vector<std::pair<std::string, Tensor>>& inputs,
                    AttributeMap attrs = {}, int64_t opset = 17) {
  try {
    RunNode(op, inputs, std::move(attrs), opset);
  } catch (const Error& e) {
    return std::string(ErrorCodeName(e.code())) + ": " + e.what();
  }
  return "";
}

void ExpectMentions(const std::string& error, std::vector<std::string> needles) {
  ASSERT_FALSE(error.empty()) << "expected an error";
  EXPECT_NE(error.find("spectral_node"), std::string::npos) << error;
  for (const auto& n : needles) EXPECT_NE(error.find(n), std::string::npos) << error << " lacks '" << n << "'";
}

Tensor Random(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t = Tensor::Zeros(DataType::kFloat64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng);
  return t;
}

Tensor I64(int64_t v) { return Tensor::Scalar<int64_t>(v); }

}  // namespace

// Every path of the transform (radix-2, the direct sum, Bluestein) against a long double O(n^2) sum.
TEST(SpectralForward, EveryLengthMatchesTheDefiningSum) {
  for (int64_t n : {1, 2, 3, 8, 12, 63, 64, 65, 100, 128, 257, 400}) {
    for (int inverse : {0, 1}) {
      const Tensor x = Random({1, n, 2}, static_cast<uint64_t>(n));
      const Tensor y = RunNode("DFT", {{"x", x}}, {{"inverse", I(inverse)}});
      const double* xv = x.data<double>();
      const double* yv = y.data<double>();
      double worst = 0;
      for (int64_t k = 0; k < n; ++k) {
        long double re = 0, im = 0;
        for (int64_t j = 0; j < n; ++j) {
          const long double angle = (inverse ? 2 : -2) * std::numbers::pi_v<long double> *
                                    static_cast<long double>((k * j) % n) / static_cast<long double>(n);
          re += xv[2 * j] * std::cos(angle) - xv[2 * j + 1] * std::sin(angle);
          im += xv[2 * j] * std::sin(angle) + xv[2 * j + 1] * std::cos(angle);
        }
        if (inverse) {
          re /= n;
          im /= n;
        }
        worst = std::max(worst, static_cast<double>(std::fabs(re - yv[2 * k]) + std::fabs(im - yv[2 * k + 1])));
      }
      EXPECT_LT(worst, 1e-12 * static_cast<double>(n)) << "n = " << n << ", inverse = " << inverse;
    }
  }
}

TEST(SpectralForward, StftFramesAreWindowedDfts) {
  const Tensor signal = Random({1, 20, 1}, 7), window = Random({8}, 8);
  const Tensor y = RunNode("STFT", {{"s", signal}, {"step", I64(5)}, {"w", window}}, {});
  ASSERT_EQ(y.shape(), (Shape{1, 3, 5, 2}));
  for (int64_t f = 0; f < 3; ++f) {
    std::vector<double> frame(8);
    for (int64_t n = 0; n < 8; ++n) frame[static_cast<size_t>(n)] = signal.data<double>()[f * 5 + n] * window.data<double>()[n];
    const Tensor dft = RunNode("DFT", {{"x", Tensor::FromVector<double>(frame, {1, 8, 1})}}, {{"onesided", I(1)}});
    for (int64_t e = 0; e < 10; ++e) EXPECT_NEAR(y.data<double>()[f * 10 + e], dft.data<double>()[e], 1e-12);
  }
}

// float16 and bfloat16 signals compute in double: the result is the float64 one rounded once.
TEST(SpectralForward, HalfPrecisionSignals) {
  const Tensor x = Random({2, 12, 2}, 9), window = Random({6}, 10);
  const Tensor dft = RunNode("DFT", {{"x", x}}, {}), stft = RunNode("STFT", {{"s", x}, {"step", I64(3)}, {"w", window}},
                                                                    {{"onesided", I(0)}});
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    auto cast = [&](const Tensor& v) {
      Tensor out(t, v.shape());
      for (int64_t i = 0; i < v.numel(); ++i) {
        if (t == DataType::kFloat16) out.data<Float16>()[i] = Float16(static_cast<float>(v.data<double>()[i]));
        else out.data<BFloat16>()[i] = BFloat16(static_cast<float>(v.data<double>()[i]));
      }
      return out;
    };
    const double tolerance = t == DataType::kFloat16 ? 2e-2 : 1.5e-1;
    const Tensor dft_half = RunNode("DFT", {{"x", cast(x)}}, {});
    const Tensor stft_half = RunNode("STFT", {{"s", cast(x)}, {"step", I64(3)}, {"w", cast(window)}}, {{"onesided", I(0)}});
    ASSERT_EQ(dft_half.dtype(), t);
    const std::vector<double> a = dft_half.ToDoubleVector(), b = stft_half.ToDoubleVector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], dft.data<double>()[i], tolerance) << DataTypeName(t);
    for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(b[i], stft.data<double>()[i], tolerance) << DataTypeName(t);
  }
}

TEST(SpectralForward, MelWeightMatrixEveryOutputType) {
  const std::vector<std::pair<std::string, Tensor>> in = {{"bins", Tensor::Scalar<int32_t>(8)},
                                                          {"dft", Tensor::Scalar<int32_t>(16)},
                                                          {"rate", Tensor::Scalar<int32_t>(8192)},
                                                          {"low", Tensor::Scalar<float>(0)},
                                                          {"high", Tensor::Scalar<float>(4096)}};
  const Tensor reference = RunNode("MelWeightMatrix", in, {{"output_datatype", I(11)}});
  ASSERT_EQ(reference.shape(), (Shape{9, 8}));
  for (DataType t : {DataType::kUint8, DataType::kUint16, DataType::kUint32, DataType::kUint64, DataType::kInt8,
                     DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kFloat16, DataType::kFloat32,
                     DataType::kBFloat16}) {
    const Tensor out = RunNode("MelWeightMatrix", in, {{"output_datatype", I(static_cast<int64_t>(t))}});
    ASSERT_EQ(out.dtype(), t);
    const std::vector<double> a = out.ToDoubleVector(), e = reference.ToDoubleVector();
    for (size_t i = 0; i < e.size(); ++i)
      EXPECT_NEAR(a[i], IsFloatType(t) ? e[i] : std::trunc(e[i]), 1e-2) << DataTypeName(t) << " element " << i;
  }
}

TEST(SpectralErrors, NameTheNodeAndTheInput) {
  const Tensor x = Random({2, 6, 1}, 1);
  EXPECT_EQ(ErrorOf("DFT", {{"x", x}}), "");
  ExpectMentions(ErrorOf("DFT", {{"x", Random({6}, 1)}}), {"input 'input'", "rank 2"});
  ExpectMentions(ErrorOf("DFT", {{"x", Random({2, 6, 3}, 1)}}), {"input 'input'", "[2, 6, 3]"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}, {"n", I64(0)}}), {"dft_length", "at least 1"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}, {"n", Tensor::FromVector<int64_t>({4, 4}, {2})}}), {"dft_length", "scalar"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}, {"n", Tensor::Scalar<float>(4)}}), {"dft_length", "int32 or int64"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}}, {{"axis", I(2)}}), {"axis 2"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}, {"", Tensor()}, {"axis", I64(-1)}}, {}, 20), {"axis -1"});
  ExpectMentions(ErrorOf("DFT", {{"x", Random({2, 6, 2}, 1)}}, {{"onesided", I(1)}}), {"onesided", "complex"});
  ExpectMentions(ErrorOf("DFT", {{"x", x}}, {{"inverse", I(2)}}), {"inverse"});
  ExpectMentions(ErrorOf("DFT", {{"x", Tensor::Zeros(DataType::kInt32, {2, 6, 1})}}), {"NotImplemented", "int32"});

  const Tensor s = Random({1, 16, 1}, 2), w = Random({4}, 3);
  EXPECT_EQ(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"w", w}}), "");
  ExpectMentions(ErrorOf("STFT", {{"s", Random({16, 1}, 2)}, {"step", I64(2)}, {"w", w}}), {"input signal", "[16, 1]"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(0)}, {"w", w}}), {"frame_step", "positive"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"", Tensor()}, {"n", I64(-3)}}),
                 {"frame_length", "positive"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"w", w}, {"n", I64(5)}}),
                 {"window has 4", "frame_length is 5"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"w", Random({2, 2}, 3)}}), {"window", "1-D"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}}), {"window or input frame_length"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"", Tensor()}, {"n", I64(17)}}), {"longer"});
  ExpectMentions(ErrorOf("STFT", {{"s", s}, {"step", I64(2)}, {"w", Tensor::Zeros(DataType::kFloat32, {4})}}),
                 {"window is float32", "signal is float64"});
  ExpectMentions(ErrorOf("STFT", {{"s", Random({1, 16, 2}, 2)}, {"step", I64(2)}, {"w", w}}), {"onesided", "complex"});

  auto mel = [](int32_t bins, int32_t dft, int32_t rate, float low, float high, AttributeMap attrs = {}) {
    return ErrorOf("MelWeightMatrix", {{"a", Tensor::Scalar<int32_t>(bins)}, {"b", Tensor::Scalar<int32_t>(dft)},
                                       {"c", Tensor::Scalar<int32_t>(rate)}, {"d", Tensor::Scalar<float>(low)},
                                       {"e", Tensor::Scalar<float>(high)}},
                   std::move(attrs));
  };
  EXPECT_EQ(mel(8, 16, 8192, 0, 4096), "");
  ExpectMentions(mel(0, 16, 8192, 0, 4096), {"num_mel_bins"});
  ExpectMentions(mel(8, 0, 8192, 0, 4096), {"dft_length"});
  ExpectMentions(mel(8, 16, 8192, 500, 400), {"lower_edge_hertz"});
  ExpectMentions(mel(8, 16, 8192, 0, 9000), {"upper_edge_hertz"});
  ExpectMentions(mel(8, 16, 8192, 0, 4096, {{"output_datatype", I(8)}}), {"output_datatype"});
}

}  // namespace edgetrain::testing

namespace edgetrain::testing {

// ONNX 1.12 would type this output float64 [0, 12, 257, 2] (onesided read as 0, the symbolic batch as 0).
TEST(SpectralShapes, StftOutputTypedByOurRule) {
  Model m;
  m.source = "stft_shape.onnx";
  m.opsets[""] = 17;
  ValueInfo signal;
  signal.name = "signal";
  signal.dtype = DataType::kFloat64;
  signal.has_shape = true;
  signal.shape = {Dim{-1, "batch"}, Dim{400, ""}, Dim{1, ""}};
  m.graph.inputs.push_back(signal);
  m.graph.initializers["step"] = Tensor::Scalar<int64_t>(32);
  m.graph.initializers["window"] = Tensor::Zeros(DataType::kFloat64, {64});
  m.graph.nodes.push_back(Node{"stft", "STFT", "", {"signal", "step", "window"}, {"spec"}, {}, 0});
  m.graph.nodes.push_back(Node{"square", "Mul", "", {"spec", "spec"}, {"power"}, {}, 0});
  ValueInfo out;
  out.name = "power";
  m.graph.outputs.push_back(out);
  const std::string bytes = SerializeModel(m, ExecutionExportOptions());
  ImportOptions options;
  options.infer_shapes = true;
  const Model imported = LoadModelFromBuffer(bytes.data(), bytes.size(), m.source, ".", options);
  for (const char* name : {"spec", "power"}) {
    const ValueInfo* info = imported.graph.FindValueInfo(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(TypeToString(*info), "float64 [batch, 11, 33, 2]") << name;
  }
}

}  // namespace edgetrain::testing
