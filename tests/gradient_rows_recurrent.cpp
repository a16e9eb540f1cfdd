// Gradient-check rows for src/ops/recurrent.cpp: RNN, GRU and LSTM through time, for every input
// that takes a gradient (X, W, R, B, initial_h, initial_c, P) and every attribute that changes it.
#include <optional>

#include "gradient_check.hpp"
#include "runtime/session.hpp"

namespace edgetrain::testing {

namespace {

Attribute I(int64_t v) { return Attribute::Int(v); }
Attribute S(std::string v) { return Attribute::String(std::move(v)); }
Attribute Names(std::vector<std::string> names) {
  Attribute a;
  a.kind = Attribute::Kind::kStrings;
  a.strings = std::move(names);
  return a;
}
CaseInput Lengths(std::vector<int32_t> values) {
  return Const(Tensor::FromVector<int32_t>(values, {static_cast<int64_t>(values.size())}));
}

// seq 3, batch 2, input 3, hidden 2; `dirs` directions, `gates` per cell; layout 1 swaps seq and batch.
struct Sizes {
  int64_t dirs = 1, gates = 1, layout = 0;
  Shape X() const { return layout ? Shape{2, 3, 3} : Shape{3, 2, 3}; }
  Shape W() const { return {dirs, gates * 2, 3}; }
  Shape R() const { return {dirs, gates * 2, 2}; }
  Shape B() const { return {dirs, 4 * gates}; }
  Shape State() const { return layout ? Shape{2, dirs, 2} : Shape{dirs, 2, 2}; }
  Shape P() const { return {dirs, 6}; }
};

OpCase Row(std::string name, const std::string& op, Sizes z, bool bias, bool lengths, bool states,
           AttributeMap attrs = {}) {
  const int outputs = op == "LSTM" ? 3 : 2;
  std::vector<CaseInput> in = {In(z.X()), In(z.W()), In(z.R())};
  in.push_back(bias ? In(z.B()) : Omitted());
  in.push_back(lengths ? Lengths({3, 2}) : Omitted());
  in.push_back(states ? In(z.State()) : Omitted());
  if (op == "LSTM") {
    in.push_back(states ? In(z.State()) : Omitted());
    in.push_back(states ? In(z.P()) : Omitted());
  }
  while (!in.empty() && !in.back().present()) in.pop_back();
  if (z.layout) attrs["layout"] = I(1);
  if (z.dirs == 2) attrs["direction"] = S("bidirectional");
  attrs["hidden_size"] = I(2);
  return OpCase{std::move(name), op, std::move(in), std::move(attrs), outputs};
}

Sizes Of(int64_t gates, int64_t dirs = 1, int64_t layout = 0) {
  Sizes z;
  z.gates = gates;
  z.dirs = dirs;
  z.layout = layout;
  return z;
}

}  // namespace

std::vector<OpCase> RecurrentGradCases() {
  return {
      Row("RNN_defaults", "RNN", Of(1), false, false, false),
      Row("RNN_bias_initial_h_lengths", "RNN", Of(1), true, true, true),
      Row("RNN_bidirectional", "RNN", Of(1, 2), true, true, true),
      Row("RNN_reverse_layout1", "RNN", Of(1, 1, 1), true, true, true, {{"direction", S("reverse")}}),
      Row("RNN_scaled_tanh", "RNN", Of(1), true, false, true,
          {{"activations", Names({"ScaledTanh"})},
           {"activation_alpha", Attribute::Floats({0.8f})},
           {"activation_beta", Attribute::Floats({1.2f})}}),
      Row("GRU_defaults", "GRU", Of(3), false, false, false),
      Row("GRU_bias_initial_h_lengths", "GRU", Of(3), true, true, true),
      Row("GRU_linear_before_reset", "GRU", Of(3), true, true, true, {{"linear_before_reset", I(1)}}),
      Row("GRU_bidirectional_layout1", "GRU", Of(3, 2, 1), true, true, true),
      Row("GRU_reverse_linear_before_reset", "GRU", Of(3), true, true, true,
          {{"direction", S("reverse")}, {"linear_before_reset", I(1)}}),
      Row("GRU_activations", "GRU", Of(3, 2), true, false, true,
          {{"activations", Names({"HardSigmoid", "Softsign", "Sigmoid", "Elu"})},
           {"activation_alpha", Attribute::Floats({0.3f, 0.7f})},
           {"activation_beta", Attribute::Floats({0.4f})}}),
      Row("GRU_clip", "GRU", Of(3), true, false, true, {{"clip", Attribute::Float(0.75f)}}),
      Row("LSTM_defaults", "LSTM", Of(4), false, false, false),
      Row("LSTM_bias_states_peepholes_lengths", "LSTM", Of(4), true, true, true),
      Row("LSTM_bidirectional", "LSTM", Of(4, 2), true, true, true),
      Row("LSTM_reverse_layout1", "LSTM", Of(4, 1, 1), true, true, true, {{"direction", S("reverse")}}),
      Row("LSTM_bidirectional_layout1", "LSTM", Of(4, 2, 1), true, false, true),
      Row("LSTM_input_forget", "LSTM", Of(4), true, true, true, {{"input_forget", I(1)}}),
      Row("LSTM_clip", "LSTM", Of(4), true, false, true, {{"clip", Attribute::Float(0.75f)}}),
      Row("LSTM_activations", "LSTM", Of(4), true, false, true,
          {{"activations", Names({"Softplus", "Affine", "Softsign"})},
           {"activation_alpha", Attribute::Floats({0.5f})},
           {"activation_beta", Attribute::Floats({0.25f})}}),
  };
}

namespace {

// Runs one node on float32 ones of the given shapes; returns the error it raises ("" when none).
std::string RecurrentError(const std::string& op, const std::vector<Shape>& shapes, AttributeMap attrs,
                           std::optional<Tensor> lengths = std::nullopt, DataType dtype = DataType::kFloat32) {
  Model m;
  m.source = "recurrent_error.onnx";
  m.opsets[""] = 17;
  Node node{"rnn_node", op, "", {}, {"Y"}, std::move(attrs), 0};
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    Tensor t = Tensor::Zeros(dtype, shapes[i]);
    node.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = dtype;
    m.graph.inputs.push_back(v);
    feeds[name] = t;
  }
  if (lengths) {
    node.inputs.resize(4);
    node.inputs.push_back("lens");
    ValueInfo v;
    v.name = "lens";
    v.dtype = lengths->dtype();
    m.graph.inputs.push_back(v);
    feeds["lens"] = *lengths;
  }
  m.graph.nodes.push_back(node);
  ValueInfo y;
  y.name = "Y";
  m.graph.outputs.push_back(y);
  try {
    Session(m).Run(feeds);
  } catch (const Error& e) {
    return std::string(ErrorCodeName(e.code())) + ": " + e.what();
  }
  return "";
}

void ExpectMentions(const std::string& error, std::vector<std::string> needles) {
  ASSERT_FALSE(error.empty()) << "expected an error";
  EXPECT_NE(error.find("rnn_node"), std::string::npos) << error;
  for (const auto& n : needles) EXPECT_NE(error.find(n), std::string::npos) << error << " lacks '" << n << "'";
}

const std::vector<Shape> kLstm = {{3, 2, 3}, {1, 8, 3}, {1, 8, 2}};

TEST(RecurrentErrors, NameTheNodeAndTheProblem) {
  EXPECT_EQ(RecurrentError("LSTM", kLstm, {}), "");
  ExpectMentions(RecurrentError("LSTM", kLstm, {{"direction", Attribute::String("sideways")}}), {"direction"});
  ExpectMentions(RecurrentError("LSTM", {{3, 2, 3}, {1, 6, 3}, {1, 8, 2}}, {}), {"input W", "[1, 8, 3]"});
  ExpectMentions(RecurrentError("GRU", kLstm, {}), {"input W", "[1, 6, 3]"});
  ExpectMentions(RecurrentError("LSTM", {{3, 2, 3}, {1, 8, 3}, {2, 8, 2}}, {}), {"input R", "[1, 8, 2]"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {{"activations", Names({"Sigmoid", "Tanh", "Swish"})}}),
                 {"NotImplemented", "Swish"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {{"activations", Names({"Sigmoid"})}}), {"activations", "3"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {{"layout", I(2)}}), {"layout"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {{"clip", Attribute::Float(-1.0f)}}), {"clip"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {}, Tensor::FromVector<int32_t>({3, 4}, {2})),
                 {"OutOfRange", "sequence_lens[1] = 4"});
  ExpectMentions(RecurrentError("LSTM", kLstm, {}, Tensor::FromVector<int64_t>({3, 3}, {2})),
                 {"sequence_lens", "int32"});
  ExpectMentions(RecurrentError("RNN", {{3, 2, 3}, {1, 2, 3}, {1, 2, 2}}, {}, std::nullopt, DataType::kInt32),
                 {"NotImplemented", "int32"});
}

// Scan (opset 17) with body (s, x) -> (s + x, s + x): a running sum over axis `axis` of each scan input.
std::vector<Tensor> RunScan(AttributeMap attrs, std::vector<Tensor> scans) {
  auto body = std::make_shared<Graph>();
  body->name = "body";
  for (const char* name : {"s", "x"}) {
    ValueInfo v;
    v.name = name;
    v.dtype = DataType::kFloat32;
    body->inputs.push_back(v);
  }
  body->nodes.push_back(Node{"add", "Add", "", {"s", "x"}, {"s_next"}, {}, 0});
  body->nodes.push_back(Node{"copy", "Identity", "", {"s_next"}, {"y"}, {}, 0});
  for (const char* name : {"s_next", "y"}) {
    ValueInfo v;
    v.name = name;
    body->outputs.push_back(v);
  }
  Attribute b;
  b.kind = Attribute::Kind::kGraph;
  b.g = body;
  attrs["body"] = b;
  Model m;
  m.source = "scan.onnx";
  m.opsets[""] = 17;
  Node node{"scan_node", "Scan", "", {"s0"}, {"s_final", "ys"}, std::move(attrs), 0};
  std::map<std::string, Tensor> feeds = {{"s0", Tensor::FromVector<float>({0, 0}, {2})}};
  std::vector<std::string> names = {"s0"};
  for (size_t i = 0; i < scans.size(); ++i) {
    names.push_back("x" + std::to_string(i));
    node.inputs.push_back(names.back());
    feeds[names.back()] = scans[i];
  }
  for (const auto& name : names) {
    ValueInfo v;
    v.name = name;
    v.dtype = DataType::kFloat32;
    m.graph.inputs.push_back(v);
  }
  m.graph.nodes.push_back(node);
  for (const char* name : {"s_final", "ys"}) {
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  }
  return Session(m).Run(feeds);
}

TEST(Scan, RunningSumAlongAnAxisInReverse) {
  // x [2, 3] scanned along axis 1 in reverse: slices (3, 6), (2, 5), (1, 4).
  const Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const std::vector<Tensor> out = RunScan({{"num_scan_inputs", I(1)},
                                           {"scan_input_axes", Attribute::Ints({1})},
                                           {"scan_input_directions", Attribute::Ints({1})},
                                           {"scan_output_axes", Attribute::Ints({1})}},
                                          {x});
  EXPECT_EQ(out[0].ToDoubleVector(), (std::vector<double>{6, 15}));
  EXPECT_EQ(out[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(out[1].ToDoubleVector(), (std::vector<double>{3, 5, 6, 6, 11, 15}));
}

TEST(Scan, BadAttributesNameTheNode) {
  const Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto error = [&](AttributeMap attrs, std::vector<Tensor> scans) -> std::string {
    try {
      RunScan(std::move(attrs), std::move(scans));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto expect = [](const std::string& message, const char* needle) {
    EXPECT_NE(message.find("scan_node"), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message << " lacks '" << needle << "'";
  };
  expect(error({}, {x}), "num_scan_inputs");
  expect(error({{"num_scan_inputs", I(1)}, {"scan_input_axes", Attribute::Ints({2})}}, {x}), "scan_input_axes");
  expect(error({{"num_scan_inputs", I(1)}, {"scan_input_axes", Attribute::Ints({0, 1})}}, {x}), "must have 1 values");
  const Tensor shorter = Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2});
  expect(error({{"num_scan_inputs", I(2)}}, {x, shorter}), "iterations");
}

}  // namespace

}  // namespace edgetrain::testing
