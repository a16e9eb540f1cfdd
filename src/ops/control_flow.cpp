// Graph-structural operators: Constant, Identity, and the control-flow ops If and Loop.
#include <cstring>

#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

void CopyInto(KernelContext& ctx, size_t output, const Tensor& source) {
  Tensor& out = ctx.Output(output, source.shape(), source.dtype());
  if (source.nbytes() && !out.SameData(source)) std::memcpy(out.raw(), source.raw(), source.nbytes());
}

void Constant(KernelContext& ctx) {
  const Tensor* value = ctx.node().GetTensor("value");
  ET_CHECK(value, ErrorCode::kInvalidModel, ctx.node().Describe(), ": has no 'value' attribute");
  CopyInto(ctx, 0, *value);
}

void Identity(KernelContext& ctx) {
  if (ctx.InputIsSequence(0)) ctx.SetOutputSequence(0, ctx.InputSequence(0));
  else CopyInto(ctx, 0, ctx.Input(0));
}

bool ScalarCondition(KernelContext& ctx, const Tensor& cond) {
  ET_CHECK(cond.numel() == 1, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": condition must hold exactly one element, got shape ", ShapeToString(cond.shape()));
  return cond.Int64At(0) != 0;
}

const Graph& SubgraphAttr(KernelContext& ctx, const std::string& key) {
  const Attribute* a = ctx.node().Find(key);
  ET_CHECK(a && a->g, ErrorCode::kInvalidModel, ctx.node().Describe(), ": missing graph attribute '", key, "'");
  return *a->g;
}

void If(KernelContext& ctx) {
  bool cond = ScalarCondition(ctx, ctx.Input(0));
  const Graph& branch = SubgraphAttr(ctx, cond ? "then_branch" : "else_branch");
  std::vector<RuntimeValue> results = ctx.RunSubgraph(branch, {});
  ET_CHECK(results.size() >= ctx.NumOutputs(), ErrorCode::kInvalidModel, ctx.node().Describe(), ": branch returns ",
           results.size(), " values for ", ctx.NumOutputs(), " outputs");
  for (size_t i = 0; i < ctx.NumOutputs(); ++i) ctx.SetOutputValue(i, results[i]);
}

// Loop: inputs (M, cond, v_initial...); body (iter, cond, v...) -> (cond, v..., scan...).
void Loop(KernelContext& ctx) {
  const Graph& body = SubgraphAttr(ctx, "body");
  int64_t max_trips = ctx.HasInput(0) ? ctx.Input(0).Int64At(0) : INT64_MAX;
  bool cond = ctx.HasInput(1) ? ScalarCondition(ctx, ctx.Input(1)) : true;
  size_t num_carried = ctx.NumInputs() - 2;
  std::vector<RuntimeValue> carried;
  for (size_t i = 0; i < num_carried; ++i) carried.push_back(ctx.InputValue(2 + i));
  size_t num_scan = ctx.NumOutputs() - num_carried;
  std::vector<std::vector<Tensor>> scans(num_scan);
  for (int64_t trip = 0; trip < max_trips && cond; ++trip) {
    std::vector<RuntimeValue> in = {RuntimeValue::Of(Tensor::Scalar<int64_t>(trip)),
                                    RuntimeValue::Of(Tensor::Scalar<bool>(cond))};
    in.insert(in.end(), carried.begin(), carried.end());
    std::vector<RuntimeValue> out = ctx.RunSubgraph(body, in);
    ET_CHECK(out.size() == 1 + num_carried + num_scan, ErrorCode::kInvalidModel, ctx.node().Describe(),
             ": body returns ", out.size(), " values, expected ", 1 + num_carried + num_scan);
    cond = ScalarCondition(ctx, out[0].tensor);
    for (size_t i = 0; i < num_carried; ++i) carried[i] = out[1 + i];
    for (size_t i = 0; i < num_scan; ++i) scans[i].push_back(out[1 + num_carried + i].tensor);
  }
  for (size_t i = 0; i < num_carried; ++i) ctx.SetOutputValue(i, carried[i]);
  for (size_t i = 0; i < num_scan; ++i) {
    const auto& parts = scans[i];
    Shape shape = {static_cast<int64_t>(parts.size())};
    DataType dtype = DataType::kFloat32;
    if (!parts.empty()) {
      shape.insert(shape.end(), parts[0].shape().begin(), parts[0].shape().end());
      dtype = parts[0].dtype();
    }
    Tensor& out = ctx.Output(num_carried + i, shape, dtype);
    size_t offset = 0;
    for (const auto& p : parts) {
      ET_CHECK(p.shape() == parts[0].shape(), ErrorCode::kInvalidArgument, ctx.node().Describe(),
               ": scan output ", i, " changes shape across iterations");
      std::memcpy(static_cast<uint8_t*>(out.raw()) + offset, p.raw(), p.nbytes());
      offset += p.nbytes();
    }
  }
}

void IdentityGradient(GradientContext& g) { g.SetGrad(0, g.dY(0)); }

}  // namespace

void RegisterControlFlowOps(OpRegistry& r) {
  RegisterOnnx(r, "Constant", Constant);
  RegisterOnnx(r, "Identity", Identity).output_views_input = true;
  r.SetGradient("Identity", IdentityGradient);
  RegisterOnnx(r, "If", If);
  RegisterOnnx(r, "Loop", Loop);
}

}  // namespace edgetrain
