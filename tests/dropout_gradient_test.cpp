// Dropout in training mode draws a new mask on every run, so finite differences cannot check it.
// Instead one run of the training graph must give dX == dY * mask / (1 - ratio) exactly, with the
// fused DropoutGrad kernel and with its function body inlined.
#include <gtest/gtest.h>

#include "gradient_check.hpp"

#include <random>
#include <string>
#include <vector>

#include "autodiff/autodiff.hpp"
#include "core/error.hpp"
#include "ops/kernel.hpp"
#include "runtime/session.hpp"

namespace edgetrain {
namespace {

constexpr int64_t kRows = 8, kCols = 32;

Node MakeNode(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
              AttributeMap attributes = {}) {
  Node n;
  n.name = op + "_" + outputs[0];
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attributes = std::move(attributes);
  return n;
}

// loss = sum(Dropout(x, ratio, training_mode=true) * w); `with_mask` requests Dropout's mask output.
template <typename T>
Model DropoutModel(double ratio, bool with_mask, const std::vector<T>& weights) {
  Model m;
  m.source = "dropout_gradient";
  m.opsets[""] = 17;
  ValueInfo x;
  x.name = "x";
  x.dtype = DataTypeOf<T>();
  x.has_shape = true;
  x.shape = {Dim{kRows, ""}, Dim{kCols, ""}};
  m.graph.inputs.push_back(x);
  m.graph.initializers["ratio"] = Tensor::Scalar<T>(static_cast<T>(ratio));
  m.graph.initializers["training"] = Tensor::Scalar<bool>(true);
  m.graph.initializers["w"] = Tensor::FromVector<T>(weights, {kRows, kCols});
  Node dropout = MakeNode("Dropout", {"x", "ratio", "training"}, {"y"});
  dropout.name = "dropout";
  if (with_mask) dropout.outputs.push_back("mask");
  m.graph.nodes.push_back(dropout);
  m.graph.nodes.push_back(MakeNode("Mul", {"y", "w"}, {"weighted"}));
  m.graph.nodes.push_back(MakeNode("ReduceSum", {"weighted"}, {"loss"}, {{"keepdims", Attribute::Int(0)}}));
  for (const char* name : {"loss", "y", "mask"}) {
    if (!with_mask && std::string(name) == "mask") continue;
    ValueInfo out;
    out.name = name;
    m.graph.outputs.push_back(out);
  }
  return m;
}

// Appends d loss / d x as the output "x_grad".
void AppendInputGradient(Model& m) {
  GradientRequest request;
  request.loss = "loss";
  request.wrt = {"x"};
  request.opsets = m.opsets;
  std::vector<std::string> grads = AppendGradients(m.graph, request);
  ValueInfo out;
  out.name = grads[0];
  m.graph.outputs.push_back(out);
}

template <typename T>
void CheckTrainingGradient(double ratio, bool inline_fused) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<T> xs(kRows * kCols), weights(kRows * kCols);
  for (T& v : xs) v = static_cast<T>(dist(rng));
  for (T& v : weights) v = static_cast<T>(dist(rng));

  Model m = DropoutModel<T>(ratio, /*with_mask=*/true, weights);
  AppendInputGradient(m);
  Session session(testing::Reimport(m, inline_fused));
  std::vector<Tensor> out = session.Run({{"x", Tensor::FromVector<T>(xs, {kRows, kCols})}});
  ASSERT_EQ(out.size(), 4u);
  const Tensor& y = out[1];
  const Tensor& mask = out[2];
  const Tensor& dx = out[3];
  ASSERT_EQ(mask.dtype(), DataType::kBool);
  ASSERT_EQ(dx.shape(), (Shape{kRows, kCols}));
  const bool* keep = mask.data<bool>();
  const T scale = T(1) / (T(1) - static_cast<T>(ratio));
  int64_t kept = 0;
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    kept += keep[i] ? 1 : 0;
    EXPECT_EQ(y.data<T>()[i], keep[i] ? xs[i] * scale : T(0)) << "y element " << i;
    EXPECT_EQ(dx.data<T>()[i], keep[i] ? weights[i] * scale : T(0)) << "dx element " << i;
  }
  // With 256 draws both outcomes occur (else the check above would be vacuous).
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, kRows * kCols);
}

TEST(DropoutGradient, TrainingMatchesMaskFloat64) { CheckTrainingGradient<double>(0.5, false); }
TEST(DropoutGradient, TrainingMatchesMaskFloat64Inlined) { CheckTrainingGradient<double>(0.5, true); }
TEST(DropoutGradient, TrainingMatchesMaskFloat32) { CheckTrainingGradient<float>(0.25, false); }
TEST(DropoutGradient, TrainingMatchesMaskFloat32Inlined) { CheckTrainingGradient<float>(0.25, true); }

TEST(DropoutGradient, MissingMaskOutputIsReported) {
  Model m = DropoutModel<double>(0.5, /*with_mask=*/false, std::vector<double>(kRows * kCols, 1.0));
  try {
    AppendInputGradient(m);
    FAIL() << "expected an error for a training-mode Dropout without a mask output";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotImplemented);
    EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mask output"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace edgetrain
