// Optimizer graphs: 10 steps of each optimizer against torch.optim (or the ORT reference formula),
// and the fused ai.edgetrain update ops against their definitions in standard ONNX ops.
#include <gtest/gtest.h>

#include "gradient_check.hpp"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "autodiff/optimizers.hpp"
#include "ops/kernel.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

namespace edgetrain {
namespace {

// Expected values come from this script, run offline with /usr/bin/python3 (torch 1.13, float32):
//
//   def init():
//       w = np.array([(i - 2.5) / 4 for i in range(6)], np.float32).reshape(2, 3)
//       b = np.array([0.5, -0.25, 0.125], np.float32)
//       return [w, b]
//   def grads(k):  # exactly representable in float32
//       gw = np.array([((k * 7 + i * 3) % 11 - 5) / 8 for i in range(6)], np.float32).reshape(2, 3)
//       gb = np.array([((k * 5 + i * 4 + 2) % 9 - 4) / 4 for i in range(3)], np.float32)
//       return [gw, gb]
//   def run_torch(make_opt, max_norm=0.0, l1=0.0, l2=0.0):
//       ps = [torch.nn.Parameter(torch.tensor(v)) for v in init()]
//       opt = make_opt(ps)
//       for k in range(10):
//           for p, g in zip(ps, grads(k)):
//               p.grad = torch.tensor(g) + l1 * torch.sign(p.detach()) + l2 * p.detach()
//           if max_norm > 0: torch.nn.utils.clip_grad_norm_(ps, max_norm)
//           opt.step()
//       return [p.detach().numpy() for p in ps]
//   def run_hf(lr, b1, b2, eps, wd, correct_bias):  # float64 numpy, ORT's adam_mode 1 formula
//       ps = [v.astype(np.float64) for v in init()]
//       m1 = [np.zeros_like(p) for p in ps]; m2 = [np.zeros_like(p) for p in ps]
//       for k in range(10):
//           t = k + 1
//           ac = 1 - b1 ** t if correct_bias else 1.0
//           bc = 1 - b2 ** t if correct_bias else 1.0
//           for i, g in enumerate(grads(k)):
//               m1[i] = b1 * m1[i] + (1 - b1) * g
//               m2[i] = b2 * m2[i] + (1 - b2) * g * g
//               ps[i] = ps[i] - (lr * np.sqrt(bc) / ac) * m1[i] / (np.sqrt(m2[i]) + eps)
//               ps[i] = ps[i] - lr * wd * ps[i]
//       return ps
//
// Each case below names the call that produced its values; they list w (row-major) then b.

std::vector<double> InitialW() {
  std::vector<double> w;
  for (int i = 0; i < 6; ++i) w.push_back((i - 2.5) / 4);
  return w;
}
std::vector<double> InitialB() { return {0.5, -0.25, 0.125}; }
std::vector<double> GradW(int k) {
  std::vector<double> g;
  for (int i = 0; i < 6; ++i) g.push_back(((k * 7 + i * 3) % 11 - 5) / 8.0);
  return g;
}
std::vector<double> GradB(int k) {
  std::vector<double> g;
  for (int i = 0; i < 3; ++i) g.push_back(((k * 5 + i * 4 + 2) % 9 - 4) / 4.0);
  return g;
}

struct OptimizerCase {
  std::string name;
  OptimizerSpec spec;
  float lr = 0.0f;
  std::vector<double> expected;  // w then b after 10 steps
};

OptimizerSpec AdamW(float wd, bool hugging_face = false) {
  OptimizerSpec s;
  s.type = OptimizerType::kAdamW;
  s.weight_decay = wd;
  s.hugging_face_mode = hugging_face;
  return s;
}

OptimizerSpec SGD(float momentum = 0, float dampening = 0, bool nesterov = false, float wd = 0) {
  OptimizerSpec s;
  s.type = OptimizerType::kSGD;
  s.momentum = momentum;
  s.dampening = dampening;
  s.nesterov = nesterov;
  s.weight_decay = wd;
  return s;
}

template <typename Fn>
OptimizerSpec With(OptimizerSpec spec, Fn change) {
  change(spec);
  return spec;
}

std::vector<OptimizerCase> Cases() {
  return {
      // torch.optim.AdamW(ps, lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
      {"AdamWTorch", AdamW(0.1f), 0.05f,
       {-0.53012478, -0.38487598, -0.12664358, 0.044500813, 0.47095227, 0.7169807, 0.49050471, -0.36152673,
        0.17752102}},
      // run_hf(0.05, 0.9, 0.999, 1e-6, 0.1, True)
      {"AdamWHuggingFace", With(AdamW(0.1f, true), [](auto& s) { s.epsilon = 1e-6f; }), 0.05f,
       {-0.53045008, -0.38473775, -0.12659469, 0.044877632, 0.47037532, 0.71635239, 0.49042787, -0.36090304,
        0.17722537}},
      // run_hf(0.05, 0.8, 0.99, 1e-6, 0.1, False)
      {"AdamWHuggingFaceNoBiasCorrection",
       With(AdamW(0.1f, true),
            [](auto& s) {
              s.beta1 = 0.8f;
              s.beta2 = 0.99f;
              s.epsilon = 1e-6f;
              s.correct_bias = false;
            }),
       0.05f,
       {-0.51550008, -0.44536653, -0.070640782, -0.0015575577, 0.58764063, 0.83386846, 0.49820451, -0.51137241,
        0.21224347}},
      // torch.optim.Adam(ps, lr=0.05, betas=(0.8, 0.99), eps=1e-8, weight_decay=0.1)
      {"AdamWeightDecay",
       With(AdamW(0.1f),
            [](auto& s) {
              s.type = OptimizerType::kAdam;
              s.beta1 = 0.8f;
              s.beta2 = 0.99f;
            }),
       0.05f,
       {-0.52211607, -0.35439393, -0.10465508, 0.054229222, 0.42726806, 0.66381592, 0.48849222, -0.33947888,
        0.16561466}},
      // torch.optim.SGD(ps, lr=0.1)
      {"SGDPlain", SGD(), 0.1f,
       {-0.63749999, -0.34999999, -0.0625, 0.087500006, 0.375, 0.66250002, 0.55000001, -0.29999998, 0.2}},
      // torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.3)
      {"SGDMomentumDampening", SGD(0.9f, 0.3f), 0.1f,
       {-0.46731991, -0.44745338, -0.055546522, -0.022744313, 0.6483106, 0.75564551, 0.57578212, -0.63890094,
        0.32882151}},
      // torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
      {"SGDNesterovWeightDecay", SGD(0.9f, 0, true, 0.05f), 0.1f,
       {-0.47460133, -0.4013941, 0.086019181, 0.012265894, 0.48194861, 0.63165689, 0.42506006, -0.56869352,
        0.22738382}},
      // torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1), max_norm=1.5 (clips 3 of the 10 steps)
      {"AdamWClipped", With(AdamW(0.1f), [](auto& s) { s.max_grad_norm = 1.5f; }), 0.05f,
       {-0.52645761, -0.38944212, -0.12396029, 0.043862212, 0.46350539, 0.71624434, 0.49104881, -0.36344942,
        0.18699257}},
      // torch.optim.SGD(ps, lr=0.1, momentum=0.9), max_norm=0.5
      {"SGDMomentumClipped", With(SGD(0.9f), [](auto& s) { s.max_grad_norm = 0.5f; }), 0.1f,
       {-0.58444798, -0.44285706, -0.096521333, 0.10789885, 0.45457974, 0.66463232, 0.49840084, -0.42496645,
        0.20010693}},
      // torch.optim.SGD(ps, lr=0.1, momentum=0.5), l1=0.01, l2=0.02
      {"SGDPenalties",
       With(SGD(0.5f),
            [](auto& s) {
              s.l1_penalty = 0.01f;
              s.l2_penalty = 0.02f;
            }),
       0.1f,
       {-0.5936141, -0.35651022, -0.0065737502, 0.065233998, 0.381675, 0.6182825, 0.52035254, -0.30994615,
        0.17086874}},
      // torch.optim.AdamW(ps, lr=0.05, weight_decay=0.01), max_norm=1.5, l1=0.01, l2=0.02
      {"AdamWPenaltiesClipped",
       With(AdamW(0.01f),
            [](auto& s) {
              s.max_grad_norm = 1.5f;
              s.l1_penalty = 0.01f;
              s.l2_penalty = 0.02f;
            }),
       0.05f,
       {-0.52923095, -0.38867113, -0.11528139, 0.035021916, 0.46369576, 0.72421336, 0.50030065, -0.36745089,
        0.18605575}},
  };
}

ValueInfo TensorInfo(DataType dtype, const Shape& shape) {
  ValueInfo info;
  info.dtype = dtype;
  info.has_shape = true;
  for (int64_t d : shape) info.shape.push_back(Dim{d, ""});
  return info;
}

Tensor Filled(const std::vector<double>& values, const Shape& shape, DataType dtype) {
  if (dtype == DataType::kFloat64) return Tensor::FromVector<double>(values, shape);
  return Tensor::FromVector<float>(std::vector<float>(values.begin(), values.end()), shape);
}

// Runs 10 steps with the fused kernels, checks each step against the inlined standard-op graph
// fed the same inputs, and returns w then b at the end.
std::vector<double> RunTenSteps(const OptimizerSpec& spec, float lr, DataType dtype) {
  const std::vector<std::string> params = {"w", "b"};
  const std::vector<Shape> shapes = {{2, 3}, {3}};
  Model model = BuildOptimizerModel(spec, params, {TensorInfo(dtype, shapes[0]), TensorInfo(dtype, shapes[1])});
  Model portable = testing::Reimport(model, /*inline_fused=*/true);
  for (const Node& node : portable.graph.nodes)
    EXPECT_NE(node.domain, kEdgetrainDomain) << node.Describe() << " was not inlined";
  Session fused(testing::Reimport(model, /*inline_fused=*/false));
  Session standard(std::move(portable));

  std::map<std::string, Tensor> values = {{"w", Filled(InitialW(), shapes[0], dtype)},
                                          {"b", Filled(InitialB(), shapes[1], dtype)}};
  for (size_t i = 0; i < params.size(); ++i)
    for (const auto& state : OptimizerStateNames(spec, params[i]))
      values[state] = Filled(std::vector<double>(static_cast<size_t>(NumElements(shapes[i])), 0.0), shapes[i], dtype);

  for (int step = 0; step < 10; ++step) {
    std::map<std::string, Tensor> feeds = values;
    feeds["learning_rate"] = Tensor::Scalar<float>(lr);
    feeds["step"] = Tensor::Scalar<int64_t>(step);
    feeds["w_grad"] = Filled(GradW(step), shapes[0], dtype);
    feeds["b_grad"] = Filled(GradB(step), shapes[1], dtype);
    std::vector<Tensor> outputs = fused.Run(feeds);
    std::vector<Tensor> expected = standard.Run(feeds);
    const std::vector<std::string> names = fused.OutputNames();
    EXPECT_EQ(names.size(), 2 * (1 + OptimizerStateNames(spec, "w").size()));
    for (size_t k = 0; k < outputs.size(); ++k) {
      std::vector<double> got = outputs[k].ToDoubleVector(), want = expected[k].ToDoubleVector();
      EXPECT_EQ(outputs[k].dtype(), dtype);
      EXPECT_EQ(got.size(), want.size());
      for (size_t e = 0; e < std::min(got.size(), want.size()); ++e)
        EXPECT_NEAR(got[e], want[e], 1e-6 * std::max(1.0, std::fabs(want[e])))
            << names[k] << "[" << e << "] at step " << step << ": fused op and its standard-op function differ";
      const std::string suffix = ".updated";
      EXPECT_TRUE(names[k].ends_with(suffix)) << names[k];
      values[names[k].substr(0, names[k].size() - suffix.size())] = outputs[k];
    }
  }
  std::vector<double> result = values["w"].ToDoubleVector();
  for (double v : values["b"].ToDoubleVector()) result.push_back(v);
  return result;
}

class OptimizerParity : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(OptimizerParity, TenStepsMatchReference) {
  const OptimizerCase& c = GetParam();
  std::vector<double> got = RunTenSteps(c.spec, c.lr, DataType::kFloat32);
  ASSERT_EQ(got.size(), c.expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], c.expected[i], 1e-5) << (i < 6 ? "w[" : "b[") << (i < 6 ? i : i - 6) << "]";
}

TEST_P(OptimizerParity, Float64MatchesReference) {
  const OptimizerCase& c = GetParam();
  std::vector<double> got = RunTenSteps(c.spec, c.lr, DataType::kFloat64);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], c.expected[i], 1e-5) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerParity, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<OptimizerCase>& info) { return info.param.name; });

TEST(OptimizerModel, InputsOutputsAndStates) {
  OptimizerSpec spec;
  Model model = BuildOptimizerModel(spec, {"fc.weight"}, {TensorInfo(DataType::kFloat32, {4, 2})});
  std::vector<std::string> inputs, outputs;
  for (const auto& v : model.graph.inputs) inputs.push_back(v.name);
  for (const auto& v : model.graph.outputs) outputs.push_back(v.name);
  EXPECT_EQ(inputs, (std::vector<std::string>{"learning_rate", "step", "fc.weight", "fc.weight_grad",
                                               "fc.weight.exp_avg", "fc.weight.exp_avg_sq"}));
  EXPECT_EQ(outputs, (std::vector<std::string>{"fc.weight.updated", "fc.weight.exp_avg.updated",
                                                "fc.weight.exp_avg_sq.updated"}));
  EXPECT_TRUE(OptimizerStateNames(SGD(), "w").empty());
  EXPECT_EQ(OptimizerStateNames(SGD(0.9f), "w"), std::vector<std::string>{"w.momentum_buffer"});
}

TEST(OptimizerModel, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(ParseOptimizerType("adamw"), OptimizerType::kAdamW);
  EXPECT_EQ(ParseOptimizerType("AdamW"), OptimizerType::kAdamW);
  EXPECT_EQ(ParseOptimizerType("adam"), OptimizerType::kAdam);
  EXPECT_EQ(ParseOptimizerType("SGD"), OptimizerType::kSGD);
  for (OptimizerType type : {OptimizerType::kAdamW, OptimizerType::kAdam, OptimizerType::kSGD})
    EXPECT_EQ(ParseOptimizerType(OptimizerTypeName(type)), type);
  EXPECT_ERROR(ParseOptimizerType("adagrad"), ErrorCode::kInvalidArgument, "'adagrad'");
  EXPECT_ERROR(ParseOptimizerType("adagrad"), ErrorCode::kInvalidArgument, "adamw, adam, sgd");
}

TEST(OptimizerModel, RejectsBadOptions) {
  const std::vector<ValueInfo> infos = {TensorInfo(DataType::kFloat32, {3})};
  EXPECT_ERROR(BuildOptimizerModel(With(AdamW(0), [](auto& s) { s.beta1 = 1.0f; }), {"w"}, infos),
               ErrorCode::kInvalidArgument, "beta1");
  EXPECT_ERROR(BuildOptimizerModel(SGD(0.9f, 0.1f, true), {"w"}, infos), ErrorCode::kInvalidArgument, "nesterov");
  EXPECT_ERROR(BuildOptimizerModel(With(SGD(), [](auto& s) { s.max_grad_norm = -1; }), {"w"}, infos),
               ErrorCode::kInvalidArgument, "max_grad_norm");
  EXPECT_ERROR(BuildOptimizerModel(SGD(), {"steps"}, {TensorInfo(DataType::kInt64, {3})}),
               ErrorCode::kNotImplemented, "'steps'");
  EXPECT_ERROR(BuildOptimizerModel(SGD(), {"w", "w"}, {infos[0], infos[0]}), ErrorCode::kInvalidArgument,
               "listed twice");
}

TEST(OptimizerModel, FusedKernelRejectsMismatchedGradient) {
  Model model = BuildOptimizerModel(AdamW(0.01f), {"w"}, {TensorInfo(DataType::kFloat32, {3})});
  model.graph.inputs[3].has_shape = false;  // let the wrong shape reach the kernel
  Session session(model);
  std::map<std::string, Tensor> feeds = {{"learning_rate", Tensor::Scalar<float>(0.1f)},
                                         {"step", Tensor::Scalar<int64_t>(0)},
                                         {"w", Filled({1, 2, 3}, {3}, DataType::kFloat32)},
                                         {"w_grad", Filled({1, 2}, {2}, DataType::kFloat32)},
                                         {"w.exp_avg", Filled({0, 0, 0}, {3}, DataType::kFloat32)},
                                         {"w.exp_avg_sq", Filled({0, 0, 0}, {3}, DataType::kFloat32)}};
  EXPECT_ERROR(session.Run(feeds), ErrorCode::kInvalidArgument, "the gradient is float32 [2]");
}

}  // namespace
}  // namespace edgetrain
