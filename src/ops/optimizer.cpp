// Fused optimizer updates (domain ai.edgetrain): one pass over each parameter updates it and its
// states. Each op also carries its definition in standard ONNX ops (opset 17) for other runtimes.
//   AdamWUpdate(lr, step, param, grad, m1, m2) -> (param', m1', m2')
//   SGDUpdate(lr, step, param, grad) -> param'
//   SGDMomentumUpdate(lr, step, param, grad, momentum_buffer) -> (param', momentum_buffer')
// `step` is the number of updates already done (int64 scalar); this update is number step + 1.
#include <cmath>
#include <map>

#include "ops/function_builder.hpp"
#include "ops/optimizer_util.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

double ScalarInput(const KernelContext& ctx, size_t index, const char* what) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": ", what,
           " must hold one value, got shape ", ShapeToString(t.shape()));
  return t.DoubleAt(0);
}

int64_t StepInput(const KernelContext& ctx) {
  const Tensor& t = ctx.Input(1);
  ET_CHECK(t.numel() == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": step must hold one value, got shape ",
           ShapeToString(t.shape()));
  int64_t step = t.Int64At(0);
  ET_CHECK(step >= 0, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": step must be >= 0, got ", step);
  return step;
}

// Inputs from `first` on must match the parameter (input 2) in dtype and shape.
void CheckLikeParam(const KernelContext& ctx, size_t first, size_t last, std::initializer_list<const char*> names) {
  const Tensor& param = ctx.Input(2);
  for (size_t i = first; i <= last; ++i) {
    const Tensor& t = ctx.Input(i);
    ET_CHECK(t.dtype() == param.dtype() && t.shape() == param.shape(), ErrorCode::kInvalidArgument,
             ctx.node().Describe(), ": ", names.begin()[i - first], " is ", DataTypeName(t.dtype()), " ",
             ShapeToString(t.shape()), " but the parameter is ", DataTypeName(param.dtype()), " ",
             ShapeToString(param.shape()));
  }
}

AdamCoefficients AdamCoefficientsFor(const KernelContext& ctx) {
  const Node& node = ctx.node();
  AdamHyperparameters h;
  h.beta1 = node.GetFloat("beta1", 0.9f);
  h.beta2 = node.GetFloat("beta2", 0.999f);
  h.epsilon = node.GetFloat("epsilon", 1e-8f);
  h.weight_decay = node.GetFloat("weight_decay", 0.0f);
  h.correct_bias = node.GetInt("correct_bias", 1) != 0;
  h.mode = node.GetInt("adam_mode", 0);
  ET_CHECK(h.mode >= 0 && h.mode <= 2, ErrorCode::kInvalidArgument, node.Describe(), ": adam_mode must be 0 (AdamW), ",
           "1 (Hugging Face AdamW) or 2 (Adam with L2 weight decay), got ", h.mode);
  return MakeAdamCoefficients(h, ScalarInput(ctx, 0, "the learning rate"), static_cast<double>(StepInput(ctx) + 1));
}

void AdamWUpdateKernel(KernelContext& ctx) {
  CheckLikeParam(ctx, 3, 5, {"the gradient", "the first moment", "the second moment"});
  const AdamCoefficients c = AdamCoefficientsFor(ctx);
  const Tensor& param = ctx.Input(2);
  VisitFloat(param.dtype(), ctx.node().Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p_out = ctx.Output(0, param.shape(), param.dtype()).template data<T>();
    T* m1_out = ctx.Output(1, param.shape(), param.dtype()).template data<T>();
    T* m2_out = ctx.Output(2, param.shape(), param.dtype()).template data<T>();
    AdamUpdate<T>(ctx.threads(), c, param.numel(), param.data<T>(), ctx.Input(3).data<T>(), ctx.Input(4).data<T>(),
                  ctx.Input(5).data<T>(), p_out, m1_out, m2_out);
  });
}

// torch.optim.SGD: g += wd*p; with momentum, buf = g on the first step, else
// momentum*buf + (1-dampening)*g; the direction is buf, or g + momentum*buf with nesterov.
void SGDUpdateKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const bool has_buffer = ctx.HasInput(4);
  const double momentum = node.GetFloat("momentum", 0.0f);
  const double dampening = node.GetFloat("dampening", 0.0f);
  const bool nesterov = node.GetInt("nesterov", 0) != 0;
  const double weight_decay = node.GetFloat("weight_decay", 0.0f);
  ET_CHECK(has_buffer || momentum == 0, ErrorCode::kInvalidModel, node.Describe(), ": momentum ", momentum,
           " needs a momentum buffer input");
  CheckLikeParam(ctx, 3, has_buffer ? 4 : 3, {"the gradient", "the momentum buffer"});
  const double lr = ScalarInput(ctx, 0, "the learning rate");
  const bool first_step = StepInput(ctx) == 0;
  const Tensor& param = ctx.Input(2);
  VisitFloat(param.dtype(), node.Describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = param.data<T>();
    const T* g = ctx.Input(3).data<T>();
    T* p_out = ctx.Output(0, param.shape(), param.dtype()).template data<T>();
    const T rate = static_cast<T>(lr), wd = static_cast<T>(weight_decay), mu = static_cast<T>(momentum);
    const T keep_grad = static_cast<T>(1 - dampening);
    if (!has_buffer) {
      SgdUpdate<T>(ctx.threads(), lr, weight_decay, param.numel(), p, g, p_out);
      return;
    }
    const T* buf = ctx.Input(4).data<T>();
    T* buf_out = ctx.Output(1, param.shape(), param.dtype()).template data<T>();
    ctx.threads().ParallelFor(param.numel(), kOptimizerGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T w = p[i];
        const T grad = g[i] + wd * w;
        const T b = first_step ? grad : mu * buf[i] + keep_grad * grad;
        const T direction = nesterov ? grad + mu * b : b;
        buf_out[i] = b;
        p_out[i] = w - rate * direction;
      }
    });
  });
}

// A float attribute of the call as a scalar of the parameter's dtype.
std::string FloatAttr(FunctionBuilder& f, const std::string& attr) {
  f.Op("Constant", {}, attr + "_f32", {{"value_float", Attribute::Ref(Attribute::Kind::kFloat, attr)}});
  return f.Op("CastLike", {attr + "_f32", "param"}, attr);
}
// An int attribute of the call as an int64 scalar.
std::string IntAttr(FunctionBuilder& f, const std::string& attr) {
  return f.Op("Constant", {}, attr, {{"value_int", Attribute::Ref(Attribute::Kind::kInt, attr)}});
}
std::string Int64(FunctionBuilder& f, const std::string& name, int64_t value) {
  return f.Op("Constant", {}, name, {{"value_int", Attribute::Int(value)}});
}
std::string ParamTyped(FunctionBuilder& f, const std::string& name, float value) {
  f.Op("Constant", {}, name + "_f32", {{"value_float", Attribute::Float(value)}});
  return f.Op("CastLike", {name + "_f32", "param"}, name);
}
// A nonzero int attribute as a bool scalar.
std::string FlagAttr(FunctionBuilder& f, const std::string& attr) {
  return f.Op("Cast", {IntAttr(f, attr)}, attr + "_flag",
              {{"to", Attribute::Int(static_cast<int64_t>(DataType::kBool))}});
}

std::shared_ptr<const FunctionDef> AdamWUpdateFunction() {
  FunctionBuilder f("AdamWUpdate", {"lr", "step", "param", "grad", "m1", "m2"}, {"param_out", "m1_out", "m2_out"},
                    {"beta1", "beta2", "epsilon", "weight_decay", "correct_bias", "adam_mode"});
  std::string b1 = FloatAttr(f, "beta1"), b2 = FloatAttr(f, "beta2");
  std::string eps = FloatAttr(f, "epsilon"), wd = FloatAttr(f, "weight_decay");
  std::string correct_bias = f.Op("CastLike", {FlagAttr(f, "correct_bias"), "param"}, "correct_bias_value");
  std::string mode = IntAttr(f, "adam_mode");
  std::string is_torch = f.Op("Equal", {mode, Int64(f, "mode_torch", 0)}, "is_torch");
  std::string is_hf = f.Op("Equal", {mode, Int64(f, "mode_hf", 1)}, "is_hf");
  std::string is_l2 = f.Op("Equal", {mode, Int64(f, "mode_l2", 2)}, "is_l2");
  std::string one = ParamTyped(f, "one", 1.0f), zero = ParamTyped(f, "zero", 0.0f);
  std::string lr = f.Op("CastLike", {"lr", "param"}, "lr_value");
  std::string t = f.Op("CastLike", {f.Op("Add", {"step", Int64(f, "step_one", 1)}, "t_int"), "param"}, "t");
  // ac = 1 - b1^t, bc = 1 - b2^t (both 1 without bias correction)
  std::string ac = f.Op("Sub", {one, f.Op("Mul", {f.Op("Pow", {b1, t}, "b1_pow"), correct_bias}, "b1_pow_c")}, "ac");
  std::string bc = f.Op("Sub", {one, f.Op("Mul", {f.Op("Pow", {b2, t}, "b2_pow"), correct_bias}, "b2_pow_c")}, "bc");
  std::string sqrt_bc = f.Op("Sqrt", {bc}, "sqrt_bc");
  std::string l2 = f.Op("Where", {is_l2, wd, zero}, "l2");
  std::string g = f.Op("Add", {"grad", f.Op("Mul", {l2, "param"}, "l2_term")}, "g");
  f.Op("Add", {f.Op("Mul", {b1, "m1"}, "m1_kept"), f.Op("Mul", {f.Op("Sub", {one, b1}, "one_minus_b1"), g}, "m1_new")},
       "m1_out");
  std::string g2 = f.Op("Mul", {g, g}, "g2");
  f.Op("Add", {f.Op("Mul", {b2, "m2"}, "m2_kept"), f.Op("Mul", {f.Op("Sub", {one, b2}, "one_minus_b2"), g2}, "m2_new")},
       "m2_out");
  std::string lr_wd = f.Op("Mul", {lr, wd}, "lr_wd");
  std::string keep_before = f.Op("Sub", {one, f.Op("Where", {is_torch, lr_wd, zero}, "decay_before")}, "keep_before");
  std::string keep_after = f.Op("Sub", {one, f.Op("Where", {is_hf, lr_wd, zero}, "decay_after")}, "keep_after");
  std::string eps_eff = f.Op("Where", {is_hf, f.Op("Div", {eps, sqrt_bc}, "eps_hf"), eps}, "eps_eff");
  std::string denom =
      f.Op("Add", {f.Op("Div", {f.Op("Sqrt", {"m2_out"}, "sqrt_m2"), sqrt_bc}, "sqrt_m2_hat"), eps_eff}, "denom");
  std::string step_size = f.Op("Div", {lr, ac}, "step_size");
  std::string delta = f.Op("Mul", {step_size, f.Op("Div", {"m1_out", denom}, "ratio")}, "delta");
  std::string decayed = f.Op("Mul", {"param", keep_before}, "decayed");
  f.Op("Mul", {f.Op("Sub", {decayed, delta}, "stepped"), keep_after}, "param_out");
  return f.Build();
}

std::shared_ptr<const FunctionDef> SGDUpdateFunction() {
  FunctionBuilder f("SGDUpdate", {"lr", "step", "param", "grad"}, {"param_out"}, {"weight_decay"});
  std::string wd = FloatAttr(f, "weight_decay");
  std::string lr = f.Op("CastLike", {"lr", "param"}, "lr_value");
  std::string g = f.Op("Add", {"grad", f.Op("Mul", {wd, "param"}, "wd_term")}, "g");
  f.Op("Sub", {"param", f.Op("Mul", {lr, g}, "delta")}, "param_out");
  return f.Build();
}

std::shared_ptr<const FunctionDef> SGDMomentumUpdateFunction() {
  FunctionBuilder f("SGDMomentumUpdate", {"lr", "step", "param", "grad", "momentum_buffer"},
                    {"param_out", "momentum_buffer_out"}, {"momentum", "dampening", "nesterov", "weight_decay"});
  std::string mu = FloatAttr(f, "momentum"), dampening = FloatAttr(f, "dampening"), wd = FloatAttr(f, "weight_decay");
  std::string nesterov = FlagAttr(f, "nesterov");
  std::string one = ParamTyped(f, "one", 1.0f);
  std::string lr = f.Op("CastLike", {"lr", "param"}, "lr_value");
  std::string first_step = f.Op("Equal", {"step", Int64(f, "step_zero", 0)}, "first_step");
  std::string g = f.Op("Add", {"grad", f.Op("Mul", {wd, "param"}, "wd_term")}, "g");
  std::string blended = f.Op("Add",
                             {f.Op("Mul", {mu, "momentum_buffer"}, "buf_kept"),
                              f.Op("Mul", {f.Op("Sub", {one, dampening}, "keep_grad"), g}, "grad_part")},
                             "blended");
  std::string buf = f.Op("Where", {first_step, g, blended}, "momentum_buffer_out");
  std::string look_ahead = f.Op("Add", {g, f.Op("Mul", {mu, buf}, "buf_scaled")}, "look_ahead");
  std::string direction = f.Op("Where", {nesterov, look_ahead, buf}, "direction");
  f.Op("Sub", {"param", f.Op("Mul", {lr, direction}, "delta")}, "param_out");
  return f.Build();
}

}  // namespace

void RegisterOptimizerOps(OpRegistry& r) {
  // The updates may overwrite the parameters and states they read (the training session binds them so).
  ET_IF_BUILT("ai.edgetrain", "AdamWUpdate")
    RegisterFused(r, "AdamWUpdate", AdamWUpdateKernel, ET_TRAINING_BODY(AdamWUpdateFunction())).in_place = true;
  ET_IF_BUILT("ai.edgetrain", "SGDUpdate")
    RegisterFused(r, "SGDUpdate", SGDUpdateKernel, ET_TRAINING_BODY(SGDUpdateFunction())).in_place = true;
  ET_IF_BUILT("ai.edgetrain", "SGDMomentumUpdate")
    RegisterFused(r, "SGDMomentumUpdate", SGDUpdateKernel, ET_TRAINING_BODY(SGDMomentumUpdateFunction())).in_place = true;
}

}  // namespace edgetrain
