#include "autodiff/gradient_check.hpp"

#include <cmath>
#include <filesystem>
#include <random>

#include "checkpoint/checkpoint.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

Tensor ToFloat64(const Tensor& t) {
  if (t.dtype() != DataType::kFloat32) return t;
  Tensor out(DataType::kFloat64, t.shape());
  const float* src = t.data<float>();
  double* dst = out.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = src[i];
  return out;
}

void PromoteInfo(ValueInfo& v) {
  if (v.dtype == DataType::kFloat32) v.dtype = DataType::kFloat64;
}

}  // namespace

void PromoteToFloat64(Graph& graph) {
  for (auto& [name, t] : graph.initializers) t = ToFloat64(t);
  for (auto* list : {&graph.inputs, &graph.outputs})
    for (auto& v : *list) PromoteInfo(v);
  graph.value_info.clear();  // stale types; kernels compute shapes at run time
  for (auto& n : graph.nodes) {
    for (auto& [key, a] : n.attributes) {
      if (a.kind == Attribute::Kind::kTensor) a.t = ToFloat64(a.t);
      if (a.kind == Attribute::Kind::kInt && (key == "to" || key == "dtype") && a.i == 1) a.i = 11;
      if (a.g) PromoteToFloat64(*a.g);
      for (auto& g : a.graphs) PromoteToFloat64(*g);
    }
  }
}

std::vector<ParameterGradientError> CheckTrainingGradients(const std::string& artifact_dir, const std::string& prefix,
                                                           const GradientCheckOptions& options) {
  std::string base = (std::filesystem::path(artifact_dir) / prefix).string();
  Model model = LoadModel(base + "training_model.onnx", ExecutionImportOptions());
  Checkpoint checkpoint = LoadCheckpoint(base + "checkpoint");
  ET_CHECK(!checkpoint.is_nominal, ErrorCode::kInvalidArgument, base,
           "checkpoint is nominal: it holds no parameter values to check gradients at");
  PromoteToFloat64(model.graph);

  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> params;
  for (const auto& in : model.graph.inputs) {
    const Tensor* param = nullptr;
    if (auto it = checkpoint.trainable.find(in.name); it != checkpoint.trainable.end()) param = &it->second;
    if (auto it = checkpoint.frozen.find(in.name); it != checkpoint.frozen.end()) param = &it->second;
    if (param) {
      feeds[in.name] = ToFloat64(*param);
      if (checkpoint.trainable.count(in.name)) params.push_back(in.name);
      continue;
    }
    Shape shape;
    for (const auto& d : in.shape) shape.push_back(d.known() ? d.value : options.batch_size);
    Tensor t(in.dtype == DataType::kUndefined ? DataType::kFloat64 : in.dtype, shape, "input '" + in.name + "'");
    // Integer inputs (labels, indices) are 0 or 1, valid for any class count >= 2.
    VisitAll(t.dtype(), "input '" + in.name + "'", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, double>) p[i] = normal(rng);
        else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) p[i] = T(0.0f);
        else p[i] = static_cast<T>(rng() % 2);
      }
    });
    feeds[in.name] = t;
  }

  Session session(model);
  auto loss_at = [&](const std::map<std::string, Tensor>& f) {
    session.SetSeed(options.seed);  // the same Dropout masks on every run
    return session.Run(f)[0].ToDoubleVector().at(0);
  };
  session.SetSeed(options.seed);
  std::vector<Tensor> analytic = session.Run(feeds);
  std::vector<std::string> output_names = session.OutputNames();

  std::vector<ParameterGradientError> errors;
  for (const auto& p : params) {
    auto it = std::find(output_names.begin(), output_names.end(), GradientName(p));
    ET_CHECK(it != output_names.end(), ErrorCode::kInvalidModel, base, "training_model.onnx has no output '",
             GradientName(p), "'");
    std::vector<double> grad = analytic[static_cast<size_t>(it - output_names.begin())].ToDoubleVector();
    Tensor& w = feeds[p];
    int64_t n = w.numel();
    std::vector<int64_t> picks;
    if (n <= options.samples_per_parameter) {
      for (int64_t i = 0; i < n; ++i) picks.push_back(i);
    } else {
      for (int s = 0; s < options.samples_per_parameter; ++s) picks.push_back(static_cast<int64_t>(rng() % n));
    }
    ParameterGradientError e{p, 0};
    for (int64_t i : picks) {
      double original = w.data<double>()[i];
      double eps = 1e-6 * std::max(1.0, std::fabs(original));
      w.data<double>()[i] = original + eps;
      double plus = loss_at(feeds);
      w.data<double>()[i] = original - eps;
      double minus = loss_at(feeds);
      w.data<double>()[i] = original;
      double numeric = (plus - minus) / (2 * eps);
      double scale = std::max({std::fabs(numeric), std::fabs(grad[i]), 1e-4});
      e.worst_relative_error = std::max(e.worst_relative_error, std::fabs(grad[i] - numeric) / scale);
    }
    errors.push_back(e);
  }
  return errors;
}

}  // namespace edgetrain
