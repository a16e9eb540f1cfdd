// Gradient-check rows for Scan (src/ops/control_flow.cpp): the body's gradient run backward over the
// iterations, to the initial states, the scan inputs and the outer-scope values the body reads.
#include "autodiff/autodiff.hpp"
#include "gradient_check.hpp"
#include "test_util.hpp"

namespace edgetrain::testing {

namespace {

Attribute AttrInts(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

// A float64 body graph: `inputs` (typed, shape unknown), `nodes` as (op, inputs, output), `outputs`.
Attribute Body(std::vector<std::string> inputs, std::vector<std::tuple<std::string, std::vector<std::string>,
                                                                        std::string>> nodes,
               std::vector<std::string> outputs) {
  auto g = std::make_shared<Graph>();
  g->name = "body";
  for (auto& name : inputs) {
    ValueInfo v;
    v.name = name;
    v.dtype = DataType::kFloat64;
    g->inputs.push_back(v);
  }
  for (auto& [op, in, out] : nodes) g->nodes.push_back(Node{"body_" + out, op, "", in, {out}, {}, 0});
  for (auto& name : outputs) {
    ValueInfo v;
    v.name = name;
    g->outputs.push_back(v);
  }
  Attribute a;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::move(g);
  return a;
}

// Two states (h, c) and one scan input x: h' = tanh(h x + c), c' = c sigmoid(x), y = h' sigmoid(x).
Attribute TwoStateBody() {
  return Body({"h", "c", "x"},
              {{"Mul", {"h", "x"}, "hx"},
               {"Add", {"hx", "c"}, "a"},
               {"Tanh", {"a"}, "h2"},
               {"Sigmoid", {"x"}, "sx"},
               {"Mul", {"c", "sx"}, "c2"},
               {"Mul", {"h2", "sx"}, "y"}},
              {"h2", "c2", "y"});
}

// One state s and two scan inputs a, b: s' = tanh(s a + b), y = s' a, z = s' + b.
Attribute TwoInputBody() {
  return Body({"s", "a", "b"},
              {{"Mul", {"s", "a"}, "sa"},
               {"Add", {"sa", "b"}, "pre"},
               {"Tanh", {"pre"}, "s2"},
               {"Mul", {"s2", "a"}, "y"},
               {"Add", {"s2", "b"}, "z"}},
              {"s2", "y", "z"});
}

}  // namespace

std::vector<OpCase> ScanGradCases() {
  return {
      OpCase{"Scan_two_states", "Scan", {In({2}), In({2}), In({3, 2})}, {{"body", TwoStateBody()},
                                                                          {"num_scan_inputs", Attribute::Int(1)}},
               3},
      OpCase{"Scan_reverse_axis1", "Scan", {In({2}), In({2}), In({2, 3})},
               {{"body", TwoStateBody()},
                {"num_scan_inputs", Attribute::Int(1)},
                {"scan_input_axes", AttrInts({1})},
                {"scan_input_directions", AttrInts({1})},
                {"scan_output_axes", AttrInts({1})},
                {"scan_output_directions", AttrInts({1})}},
               3},
      AtOpset(9, OpCase{"Scan9_two_inputs_mixed_axes", "Scan", {In({2}), In({4, 2}), In({2, 4})},
                          {{"body", TwoInputBody()},
                           {"num_scan_inputs", Attribute::Int(2)},
                           {"scan_input_axes", AttrInts({0, -1})},
                           {"scan_input_directions", AttrInts({1, 0})},
                           {"scan_output_axes", AttrInts({1, 0})},
                           {"scan_output_directions", AttrInts({0, 1})}},
                          3}),
  };
}

namespace {

// Scan whose body reads `w` (a trainable initializer) and `scale` (a frozen one) from the outer graph:
// h' = tanh(h w + x scale), y = h' w.
Model OuterScopeScan(const std::string& extra_op = "") {
  std::vector<std::tuple<std::string, std::vector<std::string>, std::string>> nodes = {
      {"Mul", {"h", "w"}, "hw"}, {"Mul", {"x", "scale"}, "xs"}, {"Add", {"hw", "xs"}, "pre"}};
  if (!extra_op.empty()) nodes.push_back({extra_op, {"pre"}, "pre2"});
  nodes.push_back({"Tanh", {extra_op.empty() ? "pre" : "pre2"}, "h2"});
  nodes.push_back({"Mul", {"h2", "w"}, "y"});
  Model m;
  m.source = "scan_outer_scope";
  m.opsets[""] = 17;
  m.graph.inputs = {ValueInfoOf("h0", DataType::kFloat64, {2}), ValueInfoOf("xs", DataType::kFloat64, {3, 2}),
                    ValueInfoOf("w", DataType::kFloat64, {2})};
  m.graph.initializers["w"] = Tensor::FromVector<double>({0.7, -0.4}, {2});
  m.graph.initializers["scale"] = Tensor::FromVector<double>({1.3, 0.6}, {2});
  m.graph.nodes.push_back(Node{"scan_node", "Scan", "", {"h0", "xs"}, {"h_final", "ys"},
                               {{"body", Body({"h", "x"}, nodes, {"h2", "y"})}, {"num_scan_inputs", Attribute::Int(1)}},
                               0});
  for (const char* name : {"h_final", "ys"}) {
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  }
  return m;
}

TEST(ScanGradient, ReachesOuterScopeInitializers) {
  std::map<std::string, Tensor> feeds = {{"h0", Tensor::FromVector<double>({0.2, -0.5}, {2})},
                                         {"xs", Tensor::FromVector<double>({0.1, 0.9, -0.3, 0.4, 0.8, -0.6}, {3, 2})},
                                         {"w", Tensor::FromVector<double>({0.7, -0.4}, {2})}};
  CheckGraphGradient(OuterScopeScan(), feeds, {"h0", "xs", "w"}, 1e-5);
}

std::string GradientError(const Model& m, std::vector<std::string> wrt) {
  Model copy = m;
  GradientRequest request;
  request.loss = "h_final";
  request.opsets = copy.opsets;
  request.wrt = std::move(wrt);
  try {
    AppendGradients(copy.graph, request);
  } catch (const Error& e) {
    return std::string(ErrorCodeName(e.code())) + ": " + e.what();
  }
  return "";
}

TEST(ScanGradient, UnsupportedCasesAreTypedErrors) {
  EXPECT_EQ(GradientError(OuterScopeScan(), {"w"}), "");
  const std::string body = GradientError(OuterScopeScan("Hardmax"), {"w"});
  for (const char* needle : {"NotImplemented", "scan_node", "Hardmax", "no gradient rule"})
    EXPECT_NE(body.find(needle), std::string::npos) << body << " lacks '" << needle << "'";
  Model scan8 = OuterScopeScan();
  scan8.opsets[""] = 8;
  scan8.graph.nodes[0].inputs.insert(scan8.graph.nodes[0].inputs.begin(), "");
  const std::string old = GradientError(scan8, {"w"});
  for (const char* needle : {"NotImplemented", "scan_node", "Scan-8", "opset 9"})
    EXPECT_NE(old.find(needle), std::string::npos) << old << " lacks '" << needle << "'";
}

}  // namespace

}  // namespace edgetrain::testing
