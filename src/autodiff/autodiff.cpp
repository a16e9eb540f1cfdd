#include "autodiff/autodiff.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/scope.hpp"
#include "ops/gradient.hpp"
#include "ops/quantize.hpp"
#include "ops/registry.hpp"
#include "ops/subgraph_gradient.hpp"
#include "training/artifact_contract.hpp"

namespace edgetrain {

namespace {

// Operators whose outputs are never differentiable (integer or boolean results).
bool HasIntegerOutputs(const Node& node) {
  static const std::set<std::string> ops = {"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "Equal", "Greater",
                                            "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not",
                                            "IsNaN", "IsInf", "ConstantOfShape", "EyeLike", "Range"};
  return node.domain.empty() && ops.count(node.op_type);
}

class Walk;

class WalkContext final : public SubgraphGradientContext {
 public:
  WalkContext(Walk& walk, const Node& node, int64_t opset) : walk_(walk), node_(node), opset_(opset) {}
  const Node& node() const override { return node_; }
  int64_t opset() const override { return opset_; }
  std::string dY(size_t i) const override;
  bool NeedsGrad(size_t i) const override;
  void SetGrad(size_t i, const std::string& value, bool maybe_broadcast) override;
  std::vector<std::string> Emit(const std::string& op_type, const std::vector<std::string>& inputs, size_t num_outputs,
                                AttributeMap attributes, const std::string& domain) override;
  std::string Constant(const Tensor& value) override;
  const ValueInfo* Info(const std::string& value) const override;
  const Node* ForwardProducer(const std::string& value) const override;
  size_t ForwardReads(const std::string& value) const override;
  bool NeedsGradOf(const std::string& outer_value) const override;
  void SetGradOf(const std::string& outer_value, const std::string& value) override;
  std::shared_ptr<Graph> DifferentiateSubgraph(const Graph& graph, const std::vector<std::string>& outer) override;

  std::map<size_t, std::string> output_grads;

 private:
  ValueInfo OuterInfo(const std::string& name) const;

  Walk& walk_;
  const Node& node_;
  int64_t opset_;
};

class Walk {
 public:
  // With `seeds` ((value, its incoming gradient) pairs) the walk starts there instead of at request.loss.
  Walk(Graph& graph, const GradientRequest& request, std::vector<std::pair<std::string, std::string>> seeds = {})
      : graph_(graph), request_(request), seeds_(std::move(seeds)) {}

  std::vector<std::string> Run() {
    std::vector<size_t> order = TopologicalOrder(graph_, OuterReads(graph_));  // a subgraph reads its outer scope
    forward_nodes_ = graph_.nodes;  // rules read forward nodes while we append to graph_.nodes
    for (size_t k = 0; k < forward_nodes_.size(); ++k) {
      reads_.push_back(NodeReads(forward_nodes_[k]));
      for (const auto& in : reads_.back()) ++read_counts_[in];
      for (const auto& out : forward_nodes_[k].outputs)
        if (!out.empty()) forward_producer_[out] = k;
    }
    for (const auto& out : graph_.outputs) ++read_counts_[out.name];
    MarkRequiresGrad(order);
    MarkReachesLoss(order);
    if (request_.loss.empty()) {
      for (const auto& [value, grad] : seeds_) AddContribution(value, grad);
    } else {
      ET_CHECK(relevant(request_.loss) || !reaches_loss_.empty(), ErrorCode::kInvalidArgument, "loss '",
               request_.loss, "' is not a value of the graph");
      AddContribution(request_.loss, FilledLike(request_.loss, 1.0f, "loss"));
    }
    for (size_t k = order.size(); k-- > 0;) {
      const Node& node = forward_nodes_[order[k]];
      bool any_input = false;
      for (const auto& in : reads_[order[k]]) any_input |= relevant(in);
      if (!any_input) continue;
      WalkContext ctx(*this, node, node.opset ? node.opset : OpsetFor(node.domain));
      bool any_output_grad = false;
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        std::string g = TakeGradient(node.outputs[i]);
        if (!g.empty()) {
          ctx.output_grads[i] = g;
          any_output_grad = true;
        }
      }
      if (!any_output_grad) continue;
      const OpKernelEntry* entry = OpRegistry::Global().Find(node.domain, node.op_type, ctx.opset());
      ET_CHECK(entry && entry->gradient, ErrorCode::kNotImplemented, node.Describe(), ": operator ", node.op_type,
               " has no gradient rule, and it lies on the path from the loss to a trainable parameter");
      current_ = &node;
      entry->gradient(ctx);
    }
    std::vector<std::string> finals;
    for (const auto& w : request_.wrt) {
      std::string g = TakeGradient(w);
      finals.push_back(g.empty() ? FilledLike(w, 0.0f, "zero") : g);  // zero: does not reach the loss
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < finals.size(); ++i) {
      std::string name = i < request_.grad_names.size() ? request_.grad_names[i] : GradientName(request_.wrt[i]);
      bool shared = std::count(finals.begin(), finals.end(), finals[i]) > 1;
      out.push_back(NameValue(finals[i], name, shared));
    }
    return out;
  }

  // A tensor shaped like `like`, of its element type, filled with `value`.
  std::string FilledLike(const std::string& like, float value, const std::string& scope) {
    std::string scalar = Op("CastLike", {Constant(Tensor::Scalar<float>(value)), like}, {}, "", scope);
    return Op("Expand", {scalar, Op("Shape", {like}, {}, "", scope)}, {}, "", scope);
  }

  bool relevant(const std::string& v) const { return requires_grad_.count(v) && reaches_loss_.count(v); }
  const GradientRequest& request() const { return request_; }
  const Graph& graph() const { return graph_; }

  const ValueInfo* Info(const std::string& value) const { return graph_.FindValueInfo(value); }
  const Node* ForwardProducer(const std::string& value) const {
    auto it = forward_producer_.find(value);
    return it == forward_producer_.end() ? nullptr : &forward_nodes_[it->second];
  }
  size_t ForwardReads(const std::string& value) const {
    auto it = read_counts_.find(value);
    return it == read_counts_.end() ? 0 : it->second;
  }

  int64_t OpsetFor(const std::string& domain) const {
    auto it = request_.opsets.find(domain);
    return it == request_.opsets.end() ? 17 : it->second;
  }

  std::vector<std::string> Emit(const std::string& op_type, const std::vector<std::string>& inputs, size_t num_outputs,
                                AttributeMap attributes, const std::string& domain,
                                const std::string& scope) {
    Node node;
    std::string base = (scope.empty() ? (current_ ? current_->name : std::string("grad")) : scope) + "_grad/" + op_type;
    node.name = base + "_" + std::to_string(counter_++);
    node.op_type = op_type;
    node.domain = domain;
    node.inputs = inputs;
    node.attributes = std::move(attributes);
    for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back(node.name + ":" + std::to_string(i));
    std::vector<std::string> outputs = node.outputs;
    emitted_producer_[outputs.empty() ? "" : outputs[0]] = graph_.nodes.size();
    for (size_t i = 1; i < outputs.size(); ++i) emitted_producer_[outputs[i]] = graph_.nodes.size();
    graph_.nodes.push_back(std::move(node));
    return outputs;
  }

  std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                 AttributeMap attributes = {}, const std::string& domain = "",
                 const std::string& scope = "") {
    return Emit(op_type, inputs, 1, std::move(attributes), domain, scope)[0];
  }

  std::string Constant(const Tensor& value) {
    return Op("Constant", {}, {{"value", Attribute::TensorValue(value)}});
  }

  void AddContribution(const std::string& value, const std::string& grad) { contributions_[value].push_back(grad); }

  // The summed gradient of `value` ("" when none); consumers are all processed by now.
  std::string TakeGradient(const std::string& value) {
    auto it = contributions_.find(value);
    if (it == contributions_.end() || it->second.empty()) return "";
    std::vector<std::string> parts = std::move(it->second);
    contributions_.erase(it);
    if (parts.size() == 1) return parts[0];
    return Op("Sum", parts);
  }

  // Sums `grad` (shaped like `output`) back to the shape of `input`, statically where shapes are known.
  std::string Unbroadcast(const std::string& grad, const std::string& input, const std::string& output) {
    const ValueInfo* in = Info(input);
    const ValueInfo* out = Info(output);
    if (in && out && in->has_shape && out->has_shape && out->shape.size() >= in->shape.size()) {
      size_t lead = out->shape.size() - in->shape.size();
      std::vector<int64_t> axes;
      bool static_ok = true;
      for (size_t d = 0; d < lead; ++d) axes.push_back(static_cast<int64_t>(d));
      for (size_t k = 0; k < in->shape.size() && static_ok; ++k) {
        const Dim& a = in->shape[k];
        const Dim& b = out->shape[lead + k];
        bool same = (a.known() && b.known() && a.value == b.value) || (!a.symbol.empty() && a.symbol == b.symbol);
        if (same) continue;
        if (a.known() && a.value == 1) axes.push_back(static_cast<int64_t>(lead + k));
        else static_ok = false;
      }
      if (static_ok) {
        if (axes.empty()) return grad;
        std::string reduced = Op("ReduceSum", {grad, Ints(axes)}, {{"keepdims", Attribute::Int(1)}});
        return lead == 0 ? reduced : Op("Reshape", {reduced, Op("Shape", {input})});
      }
    }
    return Op("SumToShape", {grad, Op("Shape", {input})}, {}, kEdgetrainDomain);
  }

  std::string Ints(const std::vector<int64_t>& v) {
    return Constant(Tensor::FromVector<int64_t>(v, {static_cast<int64_t>(v.size())}));
  }

 private:
  void MarkRequiresGrad(const std::vector<size_t>& order) {
    requires_grad_.insert(request_.wrt.begin(), request_.wrt.end());
    for (size_t index : order) {
      const Node& n = forward_nodes_[index];
      bool any = false;
      for (const auto& in : reads_[index]) any |= requires_grad_.count(in) != 0;
      if (!any || HasIntegerOutputs(n)) continue;
      for (const auto& out : n.outputs) {
        const ValueInfo* info = Info(out);
        bool is_float = !info || info->dtype == DataType::kUndefined || IsFloatType(info->dtype);
        if (!out.empty() && is_float) requires_grad_.insert(out);
      }
    }
  }

  void MarkReachesLoss(const std::vector<size_t>& order) {
    if (!request_.loss.empty()) reaches_loss_.insert(request_.loss);
    for (const auto& seed : seeds_) reaches_loss_.insert(seed.first);
    for (size_t k = order.size(); k-- > 0;) {
      const Node& n = forward_nodes_[order[k]];
      bool any = false;
      for (const auto& out : n.outputs) any |= !out.empty() && reaches_loss_.count(out);
      if (!any) continue;
      reaches_loss_.insert(reads_[order[k]].begin(), reads_[order[k]].end());
    }
  }

  // Gives gradient value `g` the final name `name`, renaming our own node's output when possible.
  std::string NameValue(const std::string& g, const std::string& name, bool shared) {
    auto it = emitted_producer_.find(g);
    if (it != emitted_producer_.end() && !shared) {
      Node& producer = graph_.nodes[it->second];
      bool used_elsewhere = false;
      for (const auto& n : graph_.nodes)
        for (const auto& in : n.inputs) used_elsewhere |= in == g;
      if (!used_elsewhere) {
        for (auto& o : producer.outputs)
          if (o == g) o = name;
        emitted_producer_.erase(it);
        return name;
      }
    }
    Node identity;
    identity.name = name + "/Identity";
    identity.op_type = "Identity";
    identity.inputs = {g};
    identity.outputs = {name};
    graph_.nodes.push_back(identity);
    return name;
  }

  Graph& graph_;
  const GradientRequest& request_;
  std::vector<std::pair<std::string, std::string>> seeds_;
  std::vector<Node> forward_nodes_;
  std::vector<std::vector<std::string>> reads_;  // NodeReads of each forward node
  std::unordered_map<std::string, size_t> forward_producer_, read_counts_;  // over forward_nodes_ and outputs
  std::unordered_set<std::string> requires_grad_, reaches_loss_;
  std::unordered_map<std::string, std::vector<std::string>> contributions_;
  std::unordered_map<std::string, size_t> emitted_producer_;
  const Node* current_ = nullptr;
  size_t counter_ = 0;
};

std::string WalkContext::dY(size_t i) const {
  auto it = output_grads.find(i);
  return it == output_grads.end() ? "" : it->second;
}

bool WalkContext::NeedsGrad(size_t i) const { return i < node_.inputs.size() && walk_.relevant(node_.inputs[i]); }

void WalkContext::SetGrad(size_t i, const std::string& value, bool maybe_broadcast) {
  if (!NeedsGrad(i) || value.empty()) return;
  std::string g = maybe_broadcast ? walk_.Unbroadcast(value, node_.inputs[i], node_.outputs[0]) : value;
  walk_.AddContribution(node_.inputs[i], g);
}

std::vector<std::string> WalkContext::Emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                           size_t num_outputs, AttributeMap attributes,
                                           const std::string& domain) {
  return walk_.Emit(op_type, inputs, num_outputs, std::move(attributes), domain, "");
}

std::string WalkContext::Constant(const Tensor& value) { return walk_.Constant(value); }

const ValueInfo* WalkContext::Info(const std::string& value) const { return walk_.Info(value); }

const Node* WalkContext::ForwardProducer(const std::string& value) const { return walk_.ForwardProducer(value); }

size_t WalkContext::ForwardReads(const std::string& value) const { return walk_.ForwardReads(value); }

bool WalkContext::NeedsGradOf(const std::string& outer_value) const { return walk_.relevant(outer_value); }

void WalkContext::SetGradOf(const std::string& outer_value, const std::string& value) {
  if (walk_.relevant(outer_value) && !value.empty()) walk_.AddContribution(outer_value, value);
}

// What the enclosing graph knows of `name`: its value info, else the initializer's type and shape.
ValueInfo WalkContext::OuterInfo(const std::string& name) const {
  const ValueInfo* known = walk_.Info(name);
  ValueInfo v = known ? *known : ValueInfo{};
  auto initializer = walk_.graph().initializers.find(name);
  if (!v.has_shape && initializer != walk_.graph().initializers.end()) {
    v.dtype = initializer->second.dtype();
    v.has_shape = true;
    for (int64_t d : initializer->second.shape()) v.shape.push_back(Dim{d, ""});
  }
  v.name = name;
  return v;
}

std::shared_ptr<Graph> WalkContext::DifferentiateSubgraph(const Graph& graph, const std::vector<std::string>& outer) {
  auto grad = std::make_shared<Graph>(graph);
  grad->name = graph.name + "_grad";
  const std::string scope = node_.name + "/";  // keeps the names the walk emits apart from the outer graph's
  for (Node& n : grad->nodes) n.name = scope + n.name;
  GradientRequest request;
  std::vector<std::pair<std::string, std::string>> seeds;
  request.opsets = walk_.request().opsets;
  for (const auto& v : graph.inputs) request.wrt.push_back(v.name);
  for (const auto& name : outer) {
    ValueInfo v = OuterInfo(name);
    grad->inputs.push_back(v);
    request.wrt.push_back(name);
  }
  for (const auto& name : OuterReads(graph))  // rules read the ranks of the rest too (MatMul)
    if (!grad->value_info.count(name) && std::find(outer.begin(), outer.end(), name) == outer.end())
      grad->value_info[name] = OuterInfo(name);
  for (const auto& out : graph.outputs) {
    ValueInfo seed = out;
    seed.name = scope + "d_" + out.name;
    grad->inputs.push_back(seed);
    seeds.emplace_back(out.name, seed.name);
  }
  for (const auto& w : request.wrt) request.grad_names.push_back(scope + "grad_" + w);
  std::vector<std::string> grads;
  try {
    grads = Walk(*grad, request, std::move(seeds)).Run();
  } catch (const Error& e) {
    Fail(e.code(), node_.Describe(), ": subgraph '", graph.name, "': ", e.what());
  }
  grad->outputs.clear();
  for (const auto& name : grads) {
    ValueInfo v;
    v.name = name;
    grad->outputs.push_back(v);
  }
  return grad;
}

}  // namespace

std::vector<std::string> AppendGradients(Graph& graph, const GradientRequest& request) {
  for (const auto& w : request.wrt) {
    bool known = graph.IsInitializer(w);
    for (const auto& in : graph.inputs) known |= in.name == w;
    ET_CHECK(known, ErrorCode::kInvalidArgument, "cannot differentiate with respect to '", w,
             "': it is not a graph input or initializer");
  }
  FuseFakeQuantize(graph);  // QDQ pairs train as one FakeQuantize (straight-through estimator)
  CheckQuantizationIsDifferentiable(graph, request.wrt);
  return Walk(graph, request).Run();
}

}  // namespace edgetrain
