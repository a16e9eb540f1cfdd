// Graph-structural operators: Constant, Identity, and the control-flow ops If, Loop and Scan.
#include <algorithm>
#include <cstring>

#include "core/string_tensor.hpp"
#include "ir/scope.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"
#include "ops/subgraph_gradient.hpp"

namespace edgetrain {

namespace {

void CopyInto(KernelContext& ctx, size_t output, const Tensor& source) {
  Tensor& out = ctx.Output(output, source.shape(), source.dtype());
  CopyTensorData(source, out);
}

void Constant(KernelContext& ctx) {
  const Tensor* value = ctx.node().GetTensor("value");
  ET_CHECK(value, ErrorCode::kInvalidModel, ctx.node().Describe(), ": has no 'value' attribute");
  CopyInto(ctx, 0, *value);
}

void Identity(KernelContext& ctx) {
  if (ctx.InputValue(0).is_none()) ctx.SetOutputNone(0);
  else if (ctx.InputIsSequence(0)) ctx.SetOutputSequence(0, ctx.InputSequence(0));
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

// Slice `index` of `t` along `axis` (that axis removed).
Tensor SliceAt(const Tensor& t, size_t axis, int64_t index) {
  Shape shape = t.shape();
  const int64_t count = t.dim(axis);
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  Tensor out(t.dtype(), shape);
  const int64_t outer = NumElements({shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(axis)});
  const size_t inner = out.nbytes() / static_cast<size_t>(std::max<int64_t>(1, outer));
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * inner, src + (o * count + index) * static_cast<int64_t>(inner), inner);
  return out;
}

// `parts` (one shape) stacked along a new `axis`; `reverse` stacks them last first.
Tensor Stack(const KernelContext& ctx, const std::vector<Tensor>& parts, size_t axis, bool reverse) {
  const std::string& what = ctx.node().Describe();
  ET_CHECK(!parts.empty(), ErrorCode::kNotImplemented, what, ": a scan of zero iterations");
  Shape shape = parts[0].shape();
  ET_CHECK(axis <= shape.size(), ErrorCode::kInvalidArgument, what, ": scan axis ", axis, " is out of range for rank ",
           shape.size() + 1);
  const int64_t outer = NumElements({shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(axis)});
  const int64_t count = static_cast<int64_t>(parts.size());
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), count);
  Tensor out(parts[0].dtype(), shape);
  const size_t inner = parts[0].nbytes() / static_cast<size_t>(std::max<int64_t>(1, outer));
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t k = 0; k < count; ++k) {
    const Tensor& p = parts[static_cast<size_t>(reverse ? count - 1 - k : k)];
    ET_CHECK(p.shape() == parts[0].shape() && p.dtype() == parts[0].dtype(), ErrorCode::kInvalidArgument, what,
             ": a scan output changes shape across iterations");
    const auto* src = static_cast<const uint8_t*>(p.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * count + k) * static_cast<int64_t>(inner), src + o * static_cast<int64_t>(inner), inner);
  }
  return out;
}

size_t NormalizedAxis(KernelContext& ctx, int64_t axis, size_t rank, const char* attr) {
  const int64_t r = static_cast<int64_t>(rank);
  ET_CHECK(axis >= -r && axis < r, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": ", attr, " value ", axis,
           " is out of range for rank ", rank);
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

// Scan (opset 9+): inputs (states..., scan inputs...); body (states..., slices...) -> (states..., outputs...).
// Opset 8 has a leading sequence_lens input and a batch axis 0 in every input and output.
void Scan(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const Graph& body = SubgraphAttr(ctx, "body");
  const bool batched = ctx.opset() < 9;
  const size_t first = batched ? 1 : 0;
  const int64_t m = ctx.node().GetInt("num_scan_inputs", -1);
  ET_CHECK(m > 0 && first + static_cast<size_t>(m) <= ctx.NumInputs(), ErrorCode::kInvalidModel, what,
           ": attribute num_scan_inputs must be between 1 and the number of inputs, got ", m);
  const size_t num_scan = static_cast<size_t>(m), num_states = ctx.NumInputs() - first - num_scan;
  const size_t num_outputs = ctx.NumOutputs() - num_states;
  auto ints = [&](const char* name, size_t n) {
    Int64Vector v = ctx.node().GetInts(name, Int64Vector(n, 0));
    ET_CHECK(v.size() == n, ErrorCode::kInvalidModel, what, ": attribute ", name, " must have ", n, " values, got ",
             v.size());
    return v;
  };
  const Int64Vector in_dirs = ints(batched ? "directions" : "scan_input_directions", num_scan);
  const Int64Vector in_axes = batched ? Int64Vector(num_scan, 0) : ints("scan_input_axes", num_scan);
  const Int64Vector out_dirs = batched ? Int64Vector(num_outputs, 0) : ints("scan_output_directions", num_outputs);
  const Int64Vector out_axes = batched ? Int64Vector(num_outputs, 0) : ints("scan_output_axes", num_outputs);
  const int64_t batch = batched ? ctx.Input(first + num_states).dim(0) : 1;
  std::vector<std::vector<Tensor>> final_states(num_states), outputs(num_outputs);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<RuntimeValue> states;
    std::vector<Tensor> scans;
    for (size_t i = 0; i < num_states; ++i)
      states.push_back(RuntimeValue::Of(batched ? SliceAt(ctx.Input(first + i), 0, b) : ctx.Input(first + i)));
    std::vector<size_t> axes;
    int64_t steps = -1;
    for (size_t j = 0; j < num_scan; ++j) {
      scans.push_back(batched ? SliceAt(ctx.Input(first + num_states + j), 0, b) : ctx.Input(first + num_states + j));
      axes.push_back(NormalizedAxis(ctx, in_axes[j], scans[j].rank(), "scan_input_axes"));
      const int64_t n = scans[j].dim(axes[j]);
      ET_CHECK(steps < 0 || n == steps, ErrorCode::kInvalidArgument, what, ": scan inputs have ", steps, " and ", n,
               " iterations");
      steps = n;
    }
    if (batched && ctx.HasInput(0))
      ET_CHECK(ctx.Input(0).Int64At(b) == steps, ErrorCode::kNotImplemented, what, ": sequence_lens[", b, "] = ",
               ctx.Input(0).Int64At(b), " shorter than the ", steps, " scan steps is not supported");
    std::vector<std::vector<Tensor>> parts(num_outputs);
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<RuntimeValue> in = states;
      for (size_t j = 0; j < num_scan; ++j)
        in.push_back(RuntimeValue::Of(SliceAt(scans[j], axes[j], in_dirs[j] ? steps - 1 - s : s)));
      std::vector<RuntimeValue> out = ctx.RunSubgraph(body, in);
      ET_CHECK(out.size() == num_states + num_outputs, ErrorCode::kInvalidModel, what, ": body returns ", out.size(),
               " values, expected ", num_states + num_outputs);
      for (size_t i = 0; i < num_states; ++i) states[i] = out[i];
      for (size_t k = 0; k < num_outputs; ++k) parts[k].push_back(out[num_states + k].tensor);
    }
    for (size_t i = 0; i < num_states; ++i) final_states[i].push_back(states[i].tensor);
    for (size_t k = 0; k < num_outputs; ++k) {
      const size_t rank = parts[k].empty() ? 1 : parts[k][0].rank() + 1;
      outputs[k].push_back(Stack(ctx, parts[k], NormalizedAxis(ctx, out_axes[k], rank, "scan_output_axes"),
                                 out_dirs[k] != 0));
    }
  }
  // Opset 8 stacks the batch back on axis 0.
  for (size_t i = 0; i < num_states; ++i)
    ctx.SetOutputValue(i, RuntimeValue::Of(batched ? Stack(ctx, final_states[i], 0, false) : final_states[i][0]));
  for (size_t k = 0; k < num_outputs; ++k)
    ctx.SetOutputValue(num_states + k, RuntimeValue::Of(batched ? Stack(ctx, outputs[k], 0, false) : outputs[k][0]));
}

// `part` written as slice `index` of `t` along `axis` (SliceAt's inverse).
void PutSliceAt(const std::string& what, Tensor& t, size_t axis, int64_t index, const Tensor& part) {
  const int64_t count = t.dim(axis);
  ET_CHECK(part.dtype() == t.dtype() && part.numel() * count == t.numel(), ErrorCode::kInvalidArgument, what,
           ": the body's gradient of a scan input slice has shape ", ShapeToString(part.shape()), ", expected a slice of ",
           ShapeToString(t.shape()));
  const int64_t outer = NumElements({t.shape().begin(), t.shape().begin() + static_cast<std::ptrdiff_t>(axis)});
  const size_t inner = part.nbytes() / static_cast<size_t>(std::max<int64_t>(1, outer));
  const auto* src = static_cast<const uint8_t*>(part.raw());
  auto* dst = static_cast<uint8_t*>(t.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * count + index) * static_cast<int64_t>(inner), src + o * static_cast<int64_t>(inner), inner);
}

template <typename T>
void AddTyped(Tensor& sum, const Tensor& term) {
  T* s = sum.data<T>();
  const T* t = term.data<T>();
  for (int64_t i = 0; i < sum.numel(); ++i) s[i] += t[i];
}

void AddInto(const std::string& what, Tensor& sum, const Tensor& term) {
  ET_CHECK(term.shape() == sum.shape() && term.dtype() == sum.dtype(), ErrorCode::kInvalidArgument, what,
           ": the body's gradient of an outer-scope value has shape ", ShapeToString(term.shape()), ", expected ",
           ShapeToString(sum.shape()));
  if (sum.dtype() == DataType::kFloat64) AddTyped<double>(sum, term);
  else if (sum.dtype() == DataType::kFloat32) AddTyped<float>(sum, term);
  else Fail(ErrorCode::kNotImplemented, what, ": gradient of element type ", DataTypeName(sum.dtype()));
}

// ai.edgetrain.ScanGrad: inputs (initial states..., scan inputs..., outer values..., d final states...,
// d scan outputs...), attributes Scan's plus body_grad (DifferentiateSubgraph of the body); outputs
// (d initial states..., d scan inputs..., d outer values...). Runs the body again, keeping the states each
// iteration starts from, then body_grad from the last iteration to the first.
void ScanGrad(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const Graph& body = SubgraphAttr(ctx, "body");
  const Graph& grad = SubgraphAttr(ctx, "body_grad");
  const int64_t m = ctx.node().GetInt("num_scan_inputs", -1);
  ET_CHECK(m > 0 && static_cast<size_t>(m) <= body.inputs.size() && body.outputs.size() + m >= body.inputs.size() &&
               grad.inputs.size() >= body.inputs.size() + body.outputs.size(),
           ErrorCode::kInvalidModel, what, ": num_scan_inputs ", m, " does not fit a body of ", body.inputs.size(),
           " inputs and ", body.outputs.size(), " outputs");
  const size_t num_scan = static_cast<size_t>(m), num_states = body.inputs.size() - num_scan;
  const size_t num_outputs = body.outputs.size() - num_states;
  const size_t num_outer = grad.inputs.size() - body.inputs.size() - body.outputs.size();
  ET_CHECK(grad.outputs.size() == num_states + num_scan + num_outer && ctx.NumOutputs() >= grad.outputs.size(),
           ErrorCode::kInvalidModel, what, ": body_grad returns ", grad.outputs.size(), " values, expected ",
           num_states + num_scan + num_outer);
  auto ints = [&](const char* name, size_t n) {
    Int64Vector v = ctx.node().GetInts(name, Int64Vector(n, 0));
    ET_CHECK(v.size() == n, ErrorCode::kInvalidModel, what, ": attribute ", name, " must have ", n, " values, got ",
             v.size());
    return v;
  };
  const Int64Vector in_dirs = ints("scan_input_directions", num_scan), in_axes = ints("scan_input_axes", num_scan);
  const Int64Vector out_dirs = ints("scan_output_directions", num_outputs);
  const Int64Vector out_axes = ints("scan_output_axes", num_outputs);
  std::vector<RuntimeValue> states;
  for (size_t i = 0; i < num_states; ++i) states.push_back(RuntimeValue::Of(ctx.Input(i)));
  std::vector<Tensor> scans;
  std::vector<size_t> axes;
  int64_t steps = -1;
  for (size_t j = 0; j < num_scan; ++j) {
    scans.push_back(ctx.Input(num_states + j));
    axes.push_back(NormalizedAxis(ctx, in_axes[j], scans[j].rank(), "scan_input_axes"));
    const int64_t n = scans[j].dim(axes[j]);
    ET_CHECK(steps < 0 || n == steps, ErrorCode::kInvalidArgument, what, ": scan inputs have ", steps, " and ", n,
             " iterations");
    steps = n;
  }
  ET_CHECK(steps > 0, ErrorCode::kNotImplemented, what, ": the gradient of a scan of zero iterations");
  auto slice = [&](size_t j, int64_t s) {
    return RuntimeValue::Of(SliceAt(scans[j], axes[j], in_dirs[j] ? steps - 1 - s : s));
  };
  const size_t first_outer = num_states + num_scan, first_dy = first_outer + num_outer;
  std::vector<RuntimeValue> outer;
  for (size_t o = 0; o < num_outer; ++o) outer.push_back(RuntimeValue::Of(ctx.Input(first_outer + o)));

  std::vector<std::vector<RuntimeValue>> history;
  std::vector<Tensor> one_output(num_outputs);  // one iteration's scan outputs, for their shapes
  for (int64_t s = 0; s < steps; ++s) {
    history.push_back(states);
    std::vector<RuntimeValue> in = states;
    for (size_t j = 0; j < num_scan; ++j) in.push_back(slice(j, s));
    std::vector<RuntimeValue> out = ctx.RunSubgraph(body, in);
    ET_CHECK(out.size() == num_states + num_outputs, ErrorCode::kInvalidModel, what, ": body returns ", out.size(),
             " values, expected ", num_states + num_outputs);
    for (size_t i = 0; i < num_states; ++i) states[i] = out[i];
    for (size_t k = 0; k < num_outputs; ++k) one_output[k] = out[num_states + k].tensor;
  }

  std::vector<RuntimeValue> dstates;
  for (size_t i = 0; i < num_states; ++i)
    dstates.push_back(ctx.HasInput(first_dy + i)
                          ? RuntimeValue::Of(ctx.Input(first_dy + i))
                          : RuntimeValue::Of(Tensor::Zeros(states[i].tensor.dtype(), states[i].tensor.shape())));
  std::vector<size_t> output_axes;
  std::vector<RuntimeValue> zero_outputs;
  for (size_t k = 0; k < num_outputs; ++k) {
    output_axes.push_back(NormalizedAxis(ctx, out_axes[k], one_output[k].rank() + 1, "scan_output_axes"));
    zero_outputs.push_back(RuntimeValue::Of(Tensor::Zeros(one_output[k].dtype(), one_output[k].shape())));
  }
  std::vector<Tensor> dscans, douter;
  for (const Tensor& x : scans) dscans.push_back(Tensor::Zeros(x.dtype(), x.shape()));
  for (const RuntimeValue& v : outer) douter.push_back(Tensor::Zeros(v.tensor.dtype(), v.tensor.shape()));
  for (int64_t s = steps - 1; s >= 0; --s) {
    std::vector<RuntimeValue> in = history[static_cast<size_t>(s)];
    for (size_t j = 0; j < num_scan; ++j) in.push_back(slice(j, s));
    in.insert(in.end(), outer.begin(), outer.end());
    in.insert(in.end(), dstates.begin(), dstates.end());
    for (size_t k = 0; k < num_outputs; ++k) {
      const size_t input = first_dy + num_states + k;
      in.push_back(ctx.HasInput(input) ? RuntimeValue::Of(SliceAt(ctx.Input(input), output_axes[k],
                                                                  out_dirs[k] ? steps - 1 - s : s))
                                       : zero_outputs[k]);
    }
    std::vector<RuntimeValue> out = ctx.RunSubgraph(grad, in);
    for (size_t i = 0; i < num_states; ++i) dstates[i] = out[i];
    for (size_t j = 0; j < num_scan; ++j)
      PutSliceAt(what, dscans[j], axes[j], in_dirs[j] ? steps - 1 - s : s, out[num_states + j].tensor);
    for (size_t o = 0; o < num_outer; ++o) AddInto(what, douter[o], out[first_outer + o].tensor);
  }
  for (size_t i = 0; i < num_states; ++i) ctx.SetOutputValue(i, dstates[i]);
  for (size_t j = 0; j < num_scan; ++j) ctx.SetOutputValue(num_states + j, RuntimeValue::Of(dscans[j]));
  for (size_t o = 0; o < num_outer; ++o) ctx.SetOutputValue(first_outer + o, RuntimeValue::Of(douter[o]));
}

// Differentiates the body with our autodiff; ScanGrad runs it backward over the iterations.
void ScanGradient(GradientContext& context) {
  const Node& node = context.node();
  auto* walk = dynamic_cast<SubgraphGradientContext*>(&context);
  ET_CHECK(walk, ErrorCode::kNotImplemented, node.Describe(), ": Scan's gradient needs the autodiff walk");
  SubgraphGradientContext& g = *walk;
  ET_CHECK(g.opset() >= 9, ErrorCode::kNotImplemented, node.Describe(),
           ": Scan-8 (batch axis and sequence_lens) has no gradient; export at opset 9 or later");
  const Attribute* body = node.Find("body");
  ET_CHECK(body && body->g, ErrorCode::kInvalidModel, node.Describe(), ": missing graph attribute 'body'");
  std::vector<std::string> outer;
  for (const auto& name : OuterReads(*body->g))
    if (g.NeedsGradOf(name)) outer.push_back(name);
  Attribute body_grad;
  body_grad.kind = Attribute::Kind::kGraph;
  body_grad.g = g.DifferentiateSubgraph(*body->g, outer);
  AttributeMap attributes = node.attributes;
  attributes["body_grad"] = body_grad;
  std::vector<std::string> inputs = node.inputs;
  inputs.insert(inputs.end(), outer.begin(), outer.end());
  for (size_t k = 0; k < g.NumOutputs(); ++k) inputs.push_back(g.dY(k));
  const std::vector<std::string> grads =
      g.Emit("ScanGrad", inputs, node.inputs.size() + outer.size(), std::move(attributes), kEdgetrainDomain);
  for (size_t i = 0; i < node.inputs.size(); ++i) g.SetGrad(i, grads[i]);
  for (size_t o = 0; o < outer.size(); ++o) g.SetGradOf(outer[o], grads[node.inputs.size() + o]);
}

void IdentityGradient(GradientContext& g) { g.SetGrad(0, g.dY(0)); }

}  // namespace

void RegisterControlFlowOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Constant", Constant);
  ET_REGISTER_ONNX(r, "Identity", Identity).output_views_input = true;
  ET_IF_BUILT("", "Identity") r.SetGradient("Identity", IdentityGradient);
  ET_REGISTER_ONNX(r, "If", If);
  ET_REGISTER_ONNX(r, "Loop", Loop);
  ET_REGISTER_ONNX(r, "Scan", Scan);
  ET_IF_BUILT("", "Scan") r.SetGradient("Scan", ScanGradient);
  // No definition in standard ops: the backward iteration would need a Loop over the kept states.
  ET_IF_BUILT(kEdgetrainDomain, "ScanGrad") RegisterFused(r, "ScanGrad", ScanGrad, nullptr);
}

}  // namespace edgetrain
