// GELU as exporters write it, in its two decomposed forms, must differentiate through all of its
// nodes: 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Also other checks that need a hand-built model (an old opset) rather than a one-node row.
#include <cmath>
#include <random>
#include <set>

#include "autodiff/autodiff.hpp"
#include "gradient_check.hpp"

namespace edgetrain::testing {
namespace {

// A float64 model z = gelu(x + bias), x [3, 5], bias [5]; `body` appends the nodes from "h" to "z".
class GeluModel {
 public:
  explicit GeluModel(const std::string& name) {
    model_.source = name;
    model_.opsets[""] = 17;
    Input("x", {3, 5});
    Input("bias", {5});
    Add("Add", {"x", "bias"}, "h");
  }
  GeluModel& Constant(const std::string& name, double value) {
    model_.graph.initializers[name] = Tensor::Scalar<double>(value);
    return *this;
  }
  GeluModel& Add(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
    Node n;
    n.name = output;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = {output};
    model_.graph.nodes.push_back(std::move(n));
    return *this;
  }
  // The op types of the nodes the gradient walk appends for loss = ReduceSum(z), d loss / d x.
  std::multiset<std::string> GradientOps() const {
    Model m = model_;
    m.graph.nodes.push_back(Node{"loss", "ReduceSum", "", {"z"}, {"loss"}, {{"keepdims", Attribute::Int(0)}}, 0});
    GradientRequest request;
    request.loss = "loss";
    request.opsets = m.opsets;
    request.wrt = {"x"};
    const size_t forward = m.graph.nodes.size();
    AppendGradients(m.graph, request);
    std::multiset<std::string> ops;
    for (size_t k = forward; k < m.graph.nodes.size(); ++k) ops.insert(m.graph.nodes[k].op_type);
    return ops;
  }
  void Check() {
    ValueInfo out;
    out.name = "z";
    model_.graph.outputs.push_back(out);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> dist(-3.0, 3.0);
    std::map<std::string, Tensor> feeds;
    for (const ValueInfo& in : model_.graph.inputs) {
      Shape shape;
      for (const Dim& d : in.shape) shape.push_back(d.value);
      std::vector<double> values(static_cast<size_t>(NumElements(shape)));
      for (double& v : values) v = dist(rng);
      feeds[in.name] = Tensor::FromVector<double>(values, shape);
    }
    CheckGraphGradient(model_, feeds, {"x", "bias"}, 1e-5);
  }

 private:
  void Input(const std::string& name, const Shape& shape) {
    ValueInfo v;
    v.name = name;
    v.dtype = DataType::kFloat64;
    v.has_shape = true;
    for (int64_t d : shape) v.shape.push_back(Dim{d, ""});
    model_.graph.inputs.push_back(v);
  }

  Model model_;
};

TEST(GeluGradient, ErfForm) {
  GeluModel("gelu_erf")
      .Constant("sqrt2", std::sqrt(2.0))
      .Constant("one", 1.0)
      .Constant("half", 0.5)
      .Add("Div", {"h", "sqrt2"}, "scaled")
      .Add("Erf", {"scaled"}, "erf")
      .Add("Add", {"erf", "one"}, "one_plus_erf")
      .Add("Mul", {"h", "one_plus_erf"}, "h_times")
      .Add("Mul", {"h_times", "half"}, "z")
      .Check();
}

TEST(GeluGradient, TanhForm) {
  GeluModel("gelu_tanh")
      .Constant("three", 3.0)
      .Constant("cubic", 0.044715)
      .Constant("sqrt_2_over_pi", std::sqrt(2.0 / M_PI))
      .Constant("one", 1.0)
      .Constant("half", 0.5)
      .Add("Pow", {"h", "three"}, "h_cubed")
      .Add("Mul", {"h_cubed", "cubic"}, "cubic_term")
      .Add("Add", {"h", "cubic_term"}, "inner")
      .Add("Mul", {"inner", "sqrt_2_over_pi"}, "scaled")
      .Add("Tanh", {"scaled"}, "tanh")
      .Add("Add", {"tanh", "one"}, "one_plus_tanh")
      .Add("Mul", {"h", "one_plus_tanh"}, "h_times")
      .Add("Mul", {"h_times", "half"}, "z")
      .Check();
}

// SiLU as PyTorch exports it, Mul(h, Sigmoid(h)) in either order: h's gradient is one ai.edgetrain.SiluGrad.
TEST(SiluGradient, ExportedFormDifferentiatesInOneFusedNode) {
  for (bool sigmoid_first : {false, true}) {
    GeluModel silu(sigmoid_first ? "silu_sigmoid_first" : "silu");
    silu.Add("Sigmoid", {"h"}, "s").Add("Mul", sigmoid_first ? std::vector<std::string>{"s", "h"}
                                                              : std::vector<std::string>{"h", "s"}, "z");
    const std::multiset<std::string> ops = silu.GradientOps();
    EXPECT_EQ(ops.count("SiluGrad"), 1u) << sigmoid_first;
    EXPECT_EQ(ops.count("SigmoidGrad") + ops.count("Mul"), 0u) << sigmoid_first;
    silu.Check();
  }
}

// Where another node reads the Sigmoid too, or the Mul's other input is not the Sigmoid's, the rules stay apart.
TEST(SiluGradient, SigmoidReadElsewhereOrOtherFactorIsNotFused) {
  GeluModel shared("silu_sigmoid_read_twice");
  shared.Add("Sigmoid", {"h"}, "s").Add("Mul", {"h", "s"}, "hs").Add("Add", {"hs", "s"}, "z");
  EXPECT_EQ(shared.GradientOps().count("SiluGrad"), 0u);
  shared.Check();
  GeluModel other("sigmoid_gate");
  other.Add("Sigmoid", {"h"}, "s").Add("Mul", {"x", "s"}, "z");
  EXPECT_EQ(other.GradientOps().count("SiluGrad"), 0u);
  other.Check();
}

}  // namespace
}  // namespace edgetrain::testing

namespace edgetrain::testing {
namespace {

// Before opset 7, PRelu's 1-D slope of length C is per channel (axis 1), not numpy-broadcast.
TEST(PReluGradient, Opset6PerChannelSlope) {
  Model m;
  m.source = "prelu_opset6";
  m.opsets[""] = 6;
  for (auto [name, shape] : {std::pair<std::string, Shape>{"x", {2, 3, 4}}, {"slope", {3}}}) {
    ValueInfo v;
    v.name = name;
    v.dtype = DataType::kFloat64;
    v.has_shape = true;
    for (int64_t d : shape) v.shape.push_back(Dim{d, ""});
    m.graph.inputs.push_back(v);
  }
  m.graph.nodes.push_back(Node{"prelu", "PRelu", "", {"x", "slope"}, {"y"}, {}, 0});
  ValueInfo out;
  out.name = "y";
  m.graph.outputs.push_back(out);
  std::vector<double> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0 : 1.0) * (0.3 + 0.1 * static_cast<double>(i % 7));
  CheckGraphGradient(m, {{"x", Tensor::FromVector<double>(x, {2, 3, 4})},
                         {"slope", Tensor::FromVector<double>({0.1, 0.2, 0.3}, {3})}},
                     {"x", "slope"}, 1e-5);
}

}  // namespace
}  // namespace edgetrain::testing
