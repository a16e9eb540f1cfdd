#include "gradient_check.hpp"

#include <cmath>
#include <random>
#include <set>

#include "autodiff/autodiff.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "ops/kernel.hpp"
#include "runtime/export_options.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

namespace edgetrain::testing {

namespace {

std::string InputName(size_t i) { return std::string("x").append(std::to_string(i)); }

// The one-node forward model; its fixed inputs are initializers.
Model ForwardModel(const OpCase& row) {
  const OneNode& spec = row.node;
  Model m;
  m.source = row.name;
  m.opsets[""] = spec.opset;
  if (!spec.domain.empty()) m.opsets[spec.domain] = 1;
  Node node;
  node.name = "op";
  node.op_type = spec.op;
  node.domain = spec.domain;
  node.attributes = spec.attributes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const CaseInput& in = spec.inputs[i];
    if (!in.present()) {
      node.inputs.push_back("");
      continue;
    }
    EXPECT_FALSE(in.is_sequence) << row.name << ": the gradient check takes no sequence input";
    node.inputs.push_back(InputName(i));
    if (in.random) {
      m.graph.inputs.push_back(ValueInfoOf(InputName(i), DataType::kFloat64, in.shape));
    } else {
      m.graph.initializers[InputName(i)] = in.tensor;
    }
  }
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    node.outputs.push_back(std::string("y").append(std::to_string(k)));
    ValueInfo v;
    v.name = node.outputs.back();
    m.graph.outputs.push_back(v);
  }
  m.graph.nodes.push_back(node);
  return m;
}

}  // namespace

// Through ONNX serialization and shape inference, as artifact generation does. With
// `inline_fused`, ai.edgetrain operators are replaced by their standard-ONNX function bodies.
Model Reimport(const Model& m, bool inline_fused) {
  std::string bytes = SerializeModel(m, ExecutionExportOptions());
  ImportOptions options;
  options.has_kernel = [inline_fused](const std::string& domain, const std::string& op, int64_t) {
    // Fused ops without a standard-op body (the recurrent backward ops) stay fused.
    const OpKernelEntry* fused = OpRegistry::Global().Find(kEdgetrainDomain, op, 1);
    return !(inline_fused && domain == kEdgetrainDomain && fused && fused->function);
  };
  return LoadModelFromBuffer(bytes.data(), bytes.size(), m.source, ".", options);
}

namespace {

// The row's random inputs drawn (seeded by its name) and the differentiable ones among them.
void DrawFeeds(const OpCase& row, std::map<std::string, Tensor>& feeds, std::vector<std::string>& wrt) {
  std::mt19937_64 rng(std::hash<std::string>{}(row.name));
  for (size_t i = 0; i < row.node.inputs.size(); ++i) {
    const CaseInput& in = row.node.inputs[i];
    if (!in.random) continue;
    std::uniform_real_distribution<double> dist(in.low, in.high);
    std::vector<double> values(static_cast<size_t>(NumElements(in.shape)));
    for (double& v : values) v = dist(rng);
    if (row.transform) row.transform(i, values);
    feeds[InputName(i)] = Tensor::FromVector<double>(values, in.shape);
    if (in.differentiable) wrt.push_back(InputName(i));
  }
}

// The forward model with the loss sum_k(sum(y_k * w_k)), its training graph after a round trip through ONNX,
// and the same with fused ops inlined.
struct GradientModels {
  Model with_loss, training, portable;
};

void BuildGradientModels(const Model& forward, const std::map<std::string, Tensor>& feeds,
                         const std::vector<std::string>& wrt, GradientModels& models) {
  const std::string& label = forward.source;
  std::mt19937_64 rng(std::hash<std::string>{}(label + "/loss weights"));

  // Output shapes from one forward run, then fixed random weights for the loss.
  std::vector<Tensor> outputs = Session(forward).Run(feeds);
  Model with_loss = forward;
  Graph& g = with_loss.graph;
  std::vector<std::string> terms;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].dtype() != DataType::kFloat64) continue;  // indices, masks
    std::string y = g.outputs[k].name, w = "w" + y;
    std::uniform_real_distribution<double> dist(0.5, 1.5);
    std::vector<double> weights(static_cast<size_t>(outputs[k].numel()));
    for (double& v : weights) v = dist(rng);
    g.initializers[w] = Tensor::FromVector<double>(weights, outputs[k].shape());
    Node mul{"loss_mul" + y, "Mul", "", {y, w}, {"weighted" + y}, {}, 0};
    Node sum{"loss_sum" + y, "ReduceSum", "", {"weighted" + y}, {"term" + y}, {{"keepdims", Attribute::Int(0)}}, 0};
    g.nodes.push_back(mul);
    g.nodes.push_back(sum);
    terms.push_back("term" + y);
  }
  ASSERT_FALSE(terms.empty()) << label << ": no float output to differentiate";
  g.nodes.push_back(Node{"loss", "Sum", "", terms, {"loss"}, {}, 0});
  ValueInfo loss_info;
  loss_info.name = "loss";
  g.outputs = {loss_info};
  models.with_loss = Reimport(with_loss);

  Model training = models.with_loss;
  GradientRequest request;
  request.loss = "loss";
  request.opsets = training.opsets;
  request.wrt = wrt;
  std::vector<std::string> grads = AppendGradients(training.graph, request);
  for (const auto& name : grads) {
    ValueInfo v;
    v.name = name;
    training.graph.outputs.push_back(v);
  }
  models.portable = Reimport(training, /*inline_fused=*/true);
  models.training = Reimport(training);  // the training graph must survive a round trip through ONNX
}

}  // namespace

void CheckGradient(const OpCase& row) {
  ASSERT_TRUE(row.gradient) << row.name << ": not a gradient row";
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> wrt;
  DrawFeeds(row, feeds, wrt);
  CheckGraphGradient(ForwardModel(row), std::move(feeds), std::move(wrt), row.gradient_tolerance);
}

std::set<std::string> GradientGraphOps(const OpCase& row) {
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> wrt;
  DrawFeeds(row, feeds, wrt);
  GradientModels models;
  BuildGradientModels(ForwardModel(row), feeds, wrt, models);
  std::set<std::string> ops;
  for (const Model* model : {&models.training, &models.portable})
    for (const Node& node : model->graph.nodes)
      ops.insert(node.domain.empty() ? node.op_type : node.domain + ":" + node.op_type);
  return ops;
}

void CheckGraphGradient(Model forward, std::map<std::string, Tensor> feeds, std::vector<std::string> wrt,
                        double tolerance) {
  const std::string& label = forward.source;
  GradientModels models;
  BuildGradientModels(forward, feeds, wrt, models);
  if (::testing::Test::HasFatalFailure()) return;
  const Model& with_loss = models.with_loss;
  const Model& training = models.training;
  const Model& portable = models.portable;
  Session train_session(training);
  std::vector<Tensor> results = train_session.Run(feeds);
  // Fused kernels and their function bodies in standard ops must agree.
  std::vector<Tensor> portable_results = Session(portable).Run(feeds);
  for (size_t k = 0; k < results.size(); ++k) {
    std::vector<double> a = results[k].ToDoubleVector(), b = portable_results[k].ToDoubleVector();
    ASSERT_EQ(a.size(), b.size()) << label << ": output " << k << " differs in size with fused ops inlined";
    for (size_t e = 0; e < a.size(); ++e)
      ASSERT_NEAR(a[e], b[e], 1e-9 * std::max(1.0, std::fabs(a[e])))
          << label << ": output " << k << " element " << e << " differs with fused ops inlined";
  }
  Session loss_session(with_loss);

  const double eps = 1e-6;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const std::string& name = wrt[k];
    const Tensor& analytic = results[1 + k];
    ASSERT_EQ(analytic.shape(), feeds[name].shape()) << label << ": gradient of " << name << " has the wrong shape";
    std::vector<double> a = analytic.ToDoubleVector();
    double worst = 0;
    int64_t worst_index = -1;
    double worst_numeric = 0;
    for (int64_t e = 0; e < feeds[name].numel(); ++e) {
      std::map<std::string, Tensor> plus = feeds, minus = feeds;
      plus[name] = feeds[name].Clone();
      minus[name] = feeds[name].Clone();
      plus[name].data<double>()[e] += eps;
      minus[name].data<double>()[e] -= eps;
      double lp = loss_session.Run(plus)[0].ToDoubleVector()[0];
      double lm = loss_session.Run(minus)[0].ToDoubleVector()[0];
      double numeric = (lp - lm) / (2 * eps);
      double error = std::fabs(a[e] - numeric) / std::max(1.0, std::fabs(numeric));
      if (error > worst) {
        worst = error;
        worst_index = e;
        worst_numeric = numeric;
      }
    }
    EXPECT_LE(worst, tolerance) << label << ": d loss / d " << name << " element " << worst_index << " is "
                                << (worst_index >= 0 ? a[worst_index] : 0) << ", finite differences give "
                                << worst_numeric;
  }
}

}  // namespace edgetrain::testing
