// Gradient-check rows for src/ops/recurrent.cpp: RNN, GRU and LSTM through time, for every input
// that takes a gradient (X, W, R, B, initial_h, initial_c, P) and every attribute that changes it.
#include "gradient_check.hpp"

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
GradInput Lengths(std::vector<int32_t> values) {
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

GradCase Row(std::string name, const std::string& op, Sizes z, bool bias, bool lengths, bool states,
             AttributeMap attrs = {}) {
  const int outputs = op == "LSTM" ? 3 : 2;
  std::vector<GradInput> in = {In(z.X()), In(z.W()), In(z.R())};
  in.push_back(bias ? In(z.B()) : Omitted());
  in.push_back(lengths ? Lengths({3, 2}) : Omitted());
  in.push_back(states ? In(z.State()) : Omitted());
  if (op == "LSTM") {
    in.push_back(states ? In(z.State()) : Omitted());
    in.push_back(states ? In(z.P()) : Omitted());
  }
  while (!in.empty() && in.back().omitted) in.pop_back();
  if (z.layout) attrs["layout"] = I(1);
  if (z.dirs == 2) attrs["direction"] = S("bidirectional");
  attrs["hidden_size"] = I(2);
  return GradCase{std::move(name), op, std::move(in), std::move(attrs), outputs};
}

Sizes Of(int64_t gates, int64_t dirs = 1, int64_t layout = 0) {
  Sizes z;
  z.gates = gates;
  z.dirs = dirs;
  z.layout = layout;
  return z;
}

}  // namespace

std::vector<GradCase> RecurrentGradCases() {
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

}  // namespace edgetrain::testing
