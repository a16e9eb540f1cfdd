#include "training/frozen_prefix.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "ir/passes.hpp"
#include "ops/kernel.hpp"
#include "runtime/session.hpp"

namespace edgetrain {

namespace {

bool HasSubgraph(const Node& node) {
  for (const auto& [key, a] : node.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

// The value of a constant (an initializer or a Constant node's tensor) in `graph`, or nullptr.
const Tensor* ConstantIn(const Graph& graph, const std::string& name) {
  if (auto it = graph.initializers.find(name); it != graph.initializers.end()) return &it->second;
  for (const Node& n : graph.nodes)
    if (n.op_type == "Constant" && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == name)
      return n.GetTensor("value");
  return nullptr;
}

bool IsDropout(const Node& node) { return node.op_type == "Dropout" && node.domain.empty(); }

// A Dropout that drops nothing: ratio 0, or not in training mode (both constant).
bool DropsNothing(const Graph& graph, const Node& node) {
  auto constant = [&](size_t i) -> const Tensor* {
    return i < node.inputs.size() && !node.inputs[i].empty() ? ConstantIn(graph, node.inputs[i]) : nullptr;
  };
  const bool has_mode = node.inputs.size() > 2 && !node.inputs[2].empty();
  if (!has_mode) return true;
  if (const Tensor* mode = constant(2); mode && mode->numel() == 1 && mode->Int64At(0) == 0) return true;
  const bool has_ratio = node.inputs.size() > 1 && !node.inputs[1].empty();
  if (!has_ratio) return false;  // default ratio 0.5
  const Tensor* ratio = constant(1);
  return ratio && ratio->numel() == 1 && ratio->DoubleAt(0) == 0.0;
}

bool Deterministic(const Graph& graph, const Model& model, const Node& node) {
  if (IsDropout(node)) return DropsNothing(graph, node);
  const int64_t opset = node.opset ? node.opset : model.OpsetFor(node.domain);
  const OpKernelEntry* entry = OpRegistry::Global().Find(node.domain, node.op_type, opset);
  return entry != nullptr && entry->deterministic;
}

bool TrainingModeBatchNorm(const Node& node) {
  if (node.op_type != "BatchNormalization" || !node.domain.empty()) return false;
  size_t outputs = 0;
  for (const std::string& o : node.outputs) outputs += !o.empty();
  return node.GetInt("training_mode", 0) != 0 || outputs > 1;
}

struct Dependence {
  std::unordered_set<std::string> on_caller, on_variable;
};

// Which values depend on the caller's inputs and which on variable inputs (neither caller nor fixed).
Dependence Trace(const Graph& g, const std::vector<size_t>& order, const std::set<std::string>& caller,
                 const std::set<std::string>& fixed) {
  Dependence d;
  for (const ValueInfo& in : g.inputs) {
    if (caller.count(in.name)) d.on_caller.insert(in.name);
    else if (!fixed.count(in.name) && !g.IsInitializer(in.name)) d.on_variable.insert(in.name);
  }
  for (size_t k : order) {
    const Node& n = g.nodes[k];
    bool c = false, v = false;
    for (const std::string& i : n.inputs) c |= d.on_caller.count(i) != 0, v |= d.on_variable.count(i) != 0;
    if (HasSubgraph(n)) v = true;  // subgraphs may read anything: keep them out of the prefix
    for (const std::string& o : n.outputs) {
      if (o.empty()) continue;
      if (c) d.on_caller.insert(o);
      if (v) d.on_variable.insert(o);
    }
  }
  return d;
}

}  // namespace

std::optional<FrozenPrefixSplit> SplitFrozenPrefix(const Model& training, const std::set<std::string>& caller,
                                                   const std::set<std::string>& fixed) {
  const Graph& g = training.graph;
  const std::vector<size_t> order = TopologicalOrder(g);
  const Dependence dep = Trace(g, order, caller, fixed);
  std::unordered_set<std::string> graph_outputs;
  for (const ValueInfo& o : g.outputs) graph_outputs.insert(o.name);

  std::vector<bool> in_prefix(g.nodes.size(), false);
  std::unordered_map<std::string, size_t> producer;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const std::string& o : g.nodes[k].outputs)
      if (!o.empty()) producer[o] = k;
  std::unordered_set<std::string> shape_like;  // Shape/Size results and arithmetic on them only
  auto eligible = [&](size_t k) {
    const Node& n = g.nodes[k];
    bool reads_caller = false;
    for (const std::string& i : n.inputs) {
      if (i.empty() || !dep.on_caller.count(i)) continue;
      reads_caller = true;
      if (auto p = producer.find(i); p != producer.end() && !in_prefix[p->second]) return false;
      if (dep.on_variable.count(i)) return false;
    }
    for (const std::string& o : n.outputs)
      if (!o.empty() && (graph_outputs.count(o) || dep.on_variable.count(o))) return false;
    return reads_caller && Deterministic(g, training, n);
  };
  for (size_t k : order) in_prefix[k] = eligible(k);
  // Only what leads to a frozen layer (reading a frozen parameter or a constant weight): nodes on the labels
  // alone stay with the loss.
  std::unordered_set<std::string> on_fixed(fixed.begin(), fixed.end()), feeds_kept;
  for (const auto& [name, t] : g.initializers)
    if (IsFloatType(t.dtype()) && t.numel() > 1) on_fixed.insert(name);
  for (size_t k : order)
    for (const std::string& i : g.nodes[k].inputs)
      if (on_fixed.count(i))
        for (const std::string& o : g.nodes[k].outputs) on_fixed.insert(o);
  for (size_t r = order.size(); r-- > 0;) {
    const size_t k = order[r];
    if (!in_prefix[k]) continue;
    bool keep = false;
    for (const std::string& o : g.nodes[k].outputs) keep |= !o.empty() && (on_fixed.count(o) || feeds_kept.count(o));
    in_prefix[k] = keep;
    if (keep)
      for (const std::string& i : g.nodes[k].inputs) feeds_kept.insert(i);
  }

  // A shape vector is not a per-sample value: the node that makes one from the prefix's values runs in
  // the rest instead (then so does everything after it), until the boundary carries tensors only.
  for (bool changed = true; changed;) {
    changed = false;
    shape_like.clear();
    for (size_t k : order) {
      if (!in_prefix[k]) continue;
      const Node& n = g.nodes[k];
      bool shape = n.op_type == "Shape" || n.op_type == "Size";
      if (!shape) {
        shape = true;
        for (const std::string& i : n.inputs)
          if (!i.empty() && dep.on_caller.count(i) && !shape_like.count(i)) shape = false;
      }
      if (shape)
        for (const std::string& o : n.outputs) shape_like.insert(o);
    }
    std::unordered_set<std::string> read_outside;
    for (size_t r = 0; r < g.nodes.size(); ++r)
      if (!in_prefix[r])
        for (const std::string& i : g.nodes[r].inputs) read_outside.insert(i);
    for (size_t k : order) {
      if (!in_prefix[k]) continue;
      for (const std::string& i : g.nodes[k].inputs)
        if (auto p = producer.find(i); p != producer.end() && !in_prefix[p->second] && dep.on_caller.count(i))
          in_prefix[k] = false;
      for (const std::string& o : g.nodes[k].outputs)
        if (shape_like.count(o) && read_outside.count(o)) in_prefix[k] = false;
      changed |= !in_prefix[k];
    }
  }

  FrozenPrefixSplit split;
  std::unordered_set<std::string> prefix_values;
  bool has_layer = false;  // worth a session of its own
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!in_prefix[k]) continue;
    for (const std::string& o : g.nodes[k].outputs) prefix_values.insert(o);
    const std::string& op = g.nodes[k].op_type;
    has_layer |= g.nodes[k].domain.empty() && (op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul");
  }
  if (!has_layer) return std::nullopt;
  std::set<std::string> boundary;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (in_prefix[k]) continue;
    for (const std::string& i : g.nodes[k].inputs)
      if (prefix_values.count(i)) boundary.insert(i);
  }
  if (boundary.empty()) return std::nullopt;
  for (size_t k : order)  // in graph order, for a stable interface
    for (const std::string& o : g.nodes[k].outputs)
      if (boundary.count(o)) split.boundary.push_back(o);

  // Each side: its own nodes plus the constant nodes (reading neither caller nor variable inputs) it needs.
  auto build = [&](bool prefix_side) {
    Model m = training;
    Graph& mg = m.graph;
    mg.nodes.clear();
    for (size_t k : order) {
      const Node& n = g.nodes[k];
      bool constant = true;
      for (const std::string& o : n.outputs)
        if (!o.empty() && (dep.on_caller.count(o) || dep.on_variable.count(o))) constant = false;
      if (constant || in_prefix[k] == prefix_side) mg.nodes.push_back(n);
    }
    if (prefix_side) {
      mg.outputs.clear();
      for (const std::string& b : split.boundary) {
        const ValueInfo* info = g.FindValueInfo(b);
        ValueInfo out;
        out.name = b;
        mg.outputs.push_back(info ? *info : out);
      }
    } else {
      for (const std::string& b : split.boundary) {
        const ValueInfo* info = g.FindValueInfo(b);
        ValueInfo in;
        in.name = b;
        if (info) in.dtype = info->dtype;  // the batch size of a cached batch may differ from the declared
        mg.inputs.push_back(in);
      }
    }
    EliminateDeadNodes(mg);
    std::unordered_set<std::string> read;
    for (const Node& n : mg.nodes)
      for (const std::string& i : n.inputs) read.insert(i);
    for (const ValueInfo& o : mg.outputs) read.insert(o.name);
    if (prefix_side) std::erase_if(mg.inputs, [&](const ValueInfo& v) { return !read.count(v.name); });
    if (prefix_side) std::erase_if(mg.initializers, [&](const auto& kv) { return !read.count(kv.first); });
    return m;
  };
  split.prefix = build(true);
  split.rest = build(false);
  for (const ValueInfo& in : split.prefix.graph.inputs) {
    if (caller.count(in.name)) split.inputs.push_back(in.name);
    else if (fixed.count(in.name)) split.fixed.push_back(in.name);
  }
  return split;
}

namespace {

// What a value of the compiled prefix is with respect to the samples of the batch.
struct Role {
  enum Kind { kStatic, kBatched, kShape } kind = kStatic;
  int64_t axis = 0;   // kBatched: the axis that indexes the samples
  int64_t rank = -1;  // kBatched: -1 when unknown
  // kBatched: the axis holds outer x batch x inner entries (attention's batch x heads, a sequence's
  // length x batch); sample n owns entries [n * inner, (n + 1) * inner) of each outer block.
  int64_t inner = 1, outer = 1;
  bool SameSamples(const Role& o) const { return axis == o.axis && inner == o.inner && outer == o.outer; }
  Role Moved(int64_t new_axis, int64_t new_rank) const {
    Role r = *this;
    r.axis = new_axis, r.rank = new_rank;
    return r;
  }
};

// The shape of every value of the compiled prefix at one batch size, and the values computed from shapes
// alone (Shape -> Gather -> Concat ...), from a run on zeros.
struct ShapeProbe {
  int64_t batch = 0;
  std::unordered_map<std::string, Shape> shapes;
  std::unordered_map<std::string, Tensor> shape_values;
};

ShapeProbe ProbeShapes(const Model& prefix, const std::vector<std::string>& inputs, int64_t batch) {
  Model m = prefix;
  Graph& g = m.graph;
  g.outputs.clear();
  std::vector<std::string> values, shape_values;
  std::unordered_set<std::string> from_shapes;
  for (size_t k : TopologicalOrder(g)) {
    const Node& n = g.nodes[k];
    bool shape = n.op_type == "Shape" || n.op_type == "Size";
    if (!shape) {
      for (const std::string& i : n.inputs) shape |= from_shapes.count(i) != 0;
      for (const std::string& i : n.inputs)
        if (!i.empty() && !from_shapes.count(i) && !g.IsInitializer(i)) shape = false;
    }
    for (const std::string& o : n.outputs) {
      if (o.empty()) continue;
      values.push_back(o);
      if (shape) from_shapes.insert(o), shape_values.push_back(o);
    }
  }
  for (const std::string& v : values) {
    Node shape;
    shape.name = v + "/probed_shape";
    shape.op_type = "Shape";
    shape.inputs = {v};
    shape.outputs = {shape.name};
    g.nodes.push_back(std::move(shape));
    ValueInfo out;
    out.name = v + "/probed_shape";
    g.outputs.push_back(out);
  }
  for (const std::string& v : shape_values) {
    ValueInfo out;
    out.name = v;
    g.outputs.push_back(out);
  }
  std::map<std::string, Tensor> feeds;
  for (const std::string& name : inputs) {
    const ValueInfo* info = g.FindValueInfo(name);
    bool known = info && info->has_shape && !info->shape.empty() && !info->is_sequence;
    Shape shape;
    for (size_t k = 0; known && k < info->shape.size(); ++k) {
      known = k == 0 || info->shape[k].known();
      shape.push_back(k == 0 ? batch : info->shape[k].value);
    }
    ET_CHECK(known, ErrorCode::kInvalidArgument, "cache_frozen_prefix: the frozen prefix computes shapes from the ",
             "batch, and edgetrain follows them by running it at two batch sizes, but its input '", name,
             "' declares no fixed shape beyond the batch axis (", info ? DimsToString(*info) : "no type", ")");
    feeds[name] = Tensor::Zeros(info->dtype, shape);
  }
  Session session(std::move(m));
  std::vector<Tensor> shapes = session.Run(feeds);
  ShapeProbe probe{batch, {}, {}};
  for (size_t k = 0; k < values.size(); ++k) probe.shapes[values[k]] = shapes[k].ToInt64Vector();
  for (size_t k = 0; k < shape_values.size(); ++k) probe.shape_values[shape_values[k]] = shapes[values.size() + k];
  return probe;
}

// A batch reshaped from `s` to `t` (row-major, the same elements): the samples stay apart when each
// one's elements fall in one index range of a single axis of `t`.
std::optional<Role> Reshaped(const Role& in, const Shape& s, const Shape& t, int64_t batch) {
  const auto a = static_cast<size_t>(in.axis);
  if (a >= s.size() || s[a] != in.outer * batch * in.inner) return std::nullopt;
  int64_t stride = in.inner;  // elements from one sample to the next
  for (size_t k = a + 1; k < s.size(); ++k) stride *= s[k];
  int64_t below = 1;  // elements per step of axis k
  for (size_t k = t.size(); k-- > 0; below *= t[k]) {
    if (below > stride || stride >= below * t[k]) continue;
    const int64_t inner = stride / below;
    if (stride % below != 0 || t[k] % (inner * batch) != 0) return std::nullopt;
    return Role{Role::kBatched, static_cast<int64_t>(k), static_cast<int64_t>(t.size()), inner,
                t[k] / (inner * batch)};
  }
  return std::nullopt;
}

const std::set<std::string, std::less<>> kUnary = {
    "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal",
    "Neg", "Abs", "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Gelu", "Mish", "Sin", "Cos", "Floor",
    "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "Cast", "CastLike", "Identity", "ThresholdedRelu", "Dropout",
    "Silu"};
const std::set<std::string, std::less<>> kElementwise = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum",
                                                         "Mean", "Where", "Equal", "Less", "Greater", "LessOrEqual",
                                                         "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "Mod"};
// Spatial operators over [N, C, ...] with per-channel constants.
const std::set<std::string, std::less<>> kSpatial = {
    "Conv", "FusedConv", "ConvTranspose", "ConvReluMaxPool", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
    "GlobalMaxPool", "GlobalLpPool", "LRN", "InstanceNormalization", "BatchNormalization", "SpaceToDepth",
    "DepthToSpace"};
const std::set<std::string, std::less<>> kReductions = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"};

class PerSampleCheck {
 public:
  PerSampleCheck(const Graph& g, std::vector<ShapeProbe> probes) : g_(g), probes_(std::move(probes)) {}

  void Input(const std::string& name, int64_t rank) { roles_[name] = {Role::kBatched, 0, rank}; }

  void Visit(const Node& n) {
    bool batched = false, shape = false;
    for (const std::string& i : n.inputs) {
      const Role r = Of(i);
      batched |= r.kind == Role::kBatched;
      shape |= r.kind == Role::kShape;
    }
    Role out;
    if (n.op_type == "Shape" || n.op_type == "Size") {
      out.kind = batched || shape ? Role::kShape : Role::kStatic;
    } else if (n.op_type == "Expand" && !batched && shape && Static(n.inputs[0])) {
      out = ExpandedConstant(n);
    } else if (!batched) {
      out.kind = shape ? Role::kShape : Role::kStatic;
    } else {
      out = Batched(n);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) roles_[n.outputs[k]] = out;
  }

  Role Of(const std::string& name) const {
    auto it = roles_.find(name);
    return it == roles_.end() ? Role{} : it->second;
  }

 private:
  [[noreturn]] void Refuse(const Node& n, const std::string& why) const {
    Fail(ErrorCode::kInvalidArgument, "cache_frozen_prefix: ", n.Describe(), " in the frozen prefix ", why,
         ", so its results for a sample depend on the other samples of the batch; the prefix's outputs cannot be "
         "cached per sample");
  }
  [[noreturn]] void CannotTell(const Node& n, const std::string& why) const {
    Fail(ErrorCode::kInvalidArgument, "cache_frozen_prefix: edgetrain cannot tell whether ", n.Describe(),
         " in the frozen prefix keeps the samples of the batch apart (", why,
         "); the prefix's outputs cannot be cached per sample");
  }
  // A constant: an initializer, or a value computed from shapes that is the same at every probed batch size
  // (a feature dimension's size, not the batch's).
  const Tensor* Static(const std::string& name) const {
    if (auto it = g_.initializers.find(name); it != g_.initializers.end()) return &it->second;
    if (probes_.empty() || Of(name).kind != Role::kShape) return nullptr;
    const Tensor* first = nullptr;
    for (const ShapeProbe& p : probes_) {
      auto it = p.shape_values.find(name);
      if (it == p.shape_values.end()) return nullptr;
      const Tensor& t = it->second;
      if (first && (t.dtype() != first->dtype() || t.shape() != first->shape() ||
                    std::memcmp(t.raw(), first->raw(), t.nbytes()) != 0))
        return nullptr;
      first = &t;
    }
    return first;
  }
  std::vector<int64_t> StaticInts(const Node& n, size_t input, const char* what) const {
    const Tensor* t = input < n.inputs.size() ? Static(n.inputs[input]) : nullptr;
    if (!t) CannotTell(n, std::string("its ") + what + " is not a constant");
    return t->ToInt64Vector();
  }
  int64_t Norm(const Node& n, int64_t axis, int64_t rank) const {
    if (axis >= 0) return axis;
    if (rank < 0) CannotTell(n, "a negative axis on a tensor of unknown rank");
    return axis + rank;
  }
  // The batched input 0 (or the first batched one), every other input static or batched on the same axis.
  Role First(const Node& n) const {
    for (const std::string& i : n.inputs)
      if (Of(i).kind == Role::kBatched) return Of(i);
    return {};
  }
  void OthersStatic(const Node& n, size_t from) const {
    for (size_t k = from; k < n.inputs.size(); ++k)
      if (!n.inputs[k].empty() && Of(n.inputs[k]).kind != Role::kStatic && !Static(n.inputs[k]))
        CannotTell(n, "input " + std::to_string(k) + " is computed from the batch");
  }

  Role Batched(const Node& n) const {
    const std::string& op = n.op_type;
    Role in = First(n);
    const int64_t a = in.axis, rank = in.rank;
    if (TrainingModeBatchNorm(n)) Refuse(n, "normalizes with the batch's statistics (training mode)");
    if (IsDropout(n)) {
      if (!DropsNothing(g_, n)) Refuse(n, "draws random numbers (Dropout with a nonzero ratio)");
      return in;
    }
    if (kReductions.count(op)) {
      std::vector<int64_t> axes;
      if (n.HasAttr("axes")) {
        for (int64_t x : n.GetInts("axes")) axes.push_back(x);
      } else if (op == "ArgMax" || op == "ArgMin") {
        axes = {n.GetInt("axis", 0)};
      } else if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        axes = StaticInts(n, 1, "axes input");
      }
      if (axes.empty() && n.GetInt("noop_with_empty_axes", 0) == 0)
        Refuse(n, "reduces over every axis, the batch axis included");
      int64_t new_axis = a;
      for (int64_t x : axes) {
        const int64_t k = Norm(n, x, rank);
        if (k == a) Refuse(n, "reduces over the batch axis");
        if (k < a && n.GetInt("keepdims", 1) == 0) --new_axis;
      }
      return in.Moved(new_axis, n.GetInt("keepdims", 1) ? rank : (rank < 0 ? -1 : rank - int64_t(axes.size())));
    }
    if (kUnary.count(op)) {
      if (Of(n.inputs[0]).kind != Role::kBatched) CannotTell(n, "a per-element parameter is computed from the batch");
      OthersStatic(n, op == "CastLike" ? 2 : 1);
      return in;
    }
    if (kElementwise.count(op)) {
      int64_t out_rank = rank;
      for (const std::string& i : n.inputs) {
        const Role r = Of(i);
        if (r.kind == Role::kBatched) {
          if (!r.SameSamples(in) || (r.rank >= 0 && rank >= 0 && r.rank != rank))
            CannotTell(n, "its inputs hold the samples on different axes");
          continue;
        }
        const Tensor* t = Static(i);
        if (r.kind == Role::kShape && !t) CannotTell(n, "an input is computed from the batch's shape");
        if (!t) CannotTell(n, "an input is neither constant nor a batch");
        if (t->numel() == 1) continue;
        const int64_t r_static = static_cast<int64_t>(t->rank());
        if (rank < 0) CannotTell(n, "a constant input meets a tensor of unknown rank");
        if (r_static > rank) CannotTell(n, "a constant input of higher rank broadcasts over the batch");
        const int64_t aligned = a - (rank - r_static);  // the constant's dim against the batch axis
        if (aligned >= 0 && t->dim(static_cast<size_t>(aligned)) != 1)
          Refuse(n, "pairs each sample with a different slice of a constant (broadcast along the batch axis)");
        out_rank = std::max(out_rank, r_static);
      }
      return in.Moved(a, out_rank);
    }
    if (kSpatial.count(op)) {
      if (Of(n.inputs[0]).kind != Role::kBatched || a != 0) CannotTell(n, "the samples are not on axis 0 of its input");
      OthersStatic(n, 1);
      return in;
    }
    if (op == "Gemm" || op == "FusedGemm") {
      if (Of(n.inputs[0]).kind != Role::kBatched || a != 0 || n.GetInt("transA", 0) != 0)
        Refuse(n, "multiplies across the batch axis (the samples are not the rows of A)");
      OthersStatic(n, 1);
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        const Tensor* c = Static(n.inputs[2]);
        if (!c) CannotTell(n, "C is not a constant");
        if (c->rank() == 2 && c->dim(0) != 1) Refuse(n, "adds a different row of C to each sample");
      }
      return in.Moved(0, 2);
    }
    if (op == "MatMul") {
      const Role ra = Of(n.inputs[0]), rb = Of(n.inputs[1]);
      if (ra.kind == Role::kBatched && rb.kind == Role::kStatic) {
        const Tensor* b = Static(n.inputs[1]);
        if (!b || ra.rank < 0) CannotTell(n, "B is not a constant or A's rank is unknown");
        if (ra.axis >= ra.rank - 1) Refuse(n, "contracts over the batch axis");
        if (static_cast<int64_t>(b->rank()) > ra.rank) CannotTell(n, "B has a higher rank than A");
        if (b->rank() > 2) {
          const int64_t aligned = ra.axis - (ra.rank - static_cast<int64_t>(b->rank()));
          if (aligned >= 0 && b->dim(static_cast<size_t>(aligned)) != 1)
            Refuse(n, "pairs each sample with a different matrix of B");
        }
        return ra;
      }
      if (ra.kind == Role::kBatched && rb.kind == Role::kBatched && ra.SameSamples(rb) && ra.rank == rb.rank &&
          ra.rank >= 3 && ra.axis < ra.rank - 2)
        return ra;
      CannotTell(n, "a batched matrix product whose batch axis edgetrain does not follow");
    }
    if (op == "Flatten") {
      const int64_t k = Norm(n, n.GetInt("axis", 1), rank);
      if (a != 0) CannotTell(n, "the samples are not on axis 0");
      if (k == 0) Refuse(n, "flattens the batch axis into the features");
      return in.Moved(0, 2);
    }
    if (op == "Reshape") {
      if (Of(n.inputs[0]).kind != Role::kBatched) CannotTell(n, "its shape is computed from the batch");
      if (const Tensor* shape = Static(n.inputs[1]); shape && a == 0) {
        const std::vector<int64_t> dims = shape->ToInt64Vector();
        if (!dims.empty() && dims[0] == 0 && n.GetInt("allowzero", 0) == 0)
          return in.Moved(0, static_cast<int64_t>(dims.size()));  // keeps dimension 0
      }
      const std::vector<Shape> from = Probed(n, n.inputs[0], "its shape is not a constant that keeps dimension 0");
      const std::vector<Shape> to = Probed(n, n.outputs[0], "");
      return Agreed(n, [&](size_t p) { return Reshaped(in, from[p], to[p], probes_[p].batch); });
    }
    if (op == "Expand") {
      if (Of(n.inputs[0]).kind != Role::kBatched) CannotTell(n, "its shape is computed from the batch");
      const std::vector<Shape> from = Probed(n, n.inputs[0], "its shape is not known at every batch size");
      const std::vector<Shape> to = Probed(n, n.outputs[0], "");
      return Agreed(n, [&](size_t p) -> std::optional<Role> {
        const int64_t axis = a + static_cast<int64_t>(to[p].size() - from[p].size());
        if (axis < 0 || to[p][static_cast<size_t>(axis)] != from[p][static_cast<size_t>(a)]) return std::nullopt;
        return in.Moved(axis, static_cast<int64_t>(to[p].size()));
      });
    }
    if (op == "Transpose") {
      std::vector<int64_t> perm;
      for (int64_t x : n.GetInts("perm")) perm.push_back(x);
      if (perm.empty()) {
        if (rank < 0) CannotTell(n, "no perm and an unknown rank");
        return in.Moved(rank - 1 - a, rank);
      }
      for (size_t j = 0; j < perm.size(); ++j)
        if (perm[j] == a) return in.Moved(static_cast<int64_t>(j), static_cast<int64_t>(perm.size()));
      CannotTell(n, "its perm does not name the batch axis");
    }
    if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
      const int64_t opset_default = -1;
      const int64_t k = Norm(n, n.GetInt("axis", opset_default), rank);
      if (k == a || (n.opset != 0 && n.opset < 13 && k <= a)) Refuse(n, "normalizes over the batch axis");
      return in;
    }
    if (op == "LayerNormalization") {
      const int64_t k = Norm(n, n.GetInt("axis", -1), rank);
      if (k <= a) Refuse(n, "normalizes over the batch axis");
      OthersStatic(n, 1);
      return in;
    }
    if (op == "Concat") {
      const int64_t k = Norm(n, n.GetInt("axis", 0), rank);
      if (k == a) Refuse(n, "concatenates along the batch axis");
      for (const std::string& i : n.inputs)
        if (Of(i).kind != Role::kBatched || !Of(i).SameSamples(in))
          CannotTell(n, "an input is not a batch on the same axis");
      return in;
    }
    if (op == "Split") {
      if (Norm(n, n.GetInt("axis", 0), rank) == a) Refuse(n, "splits the batch axis");
      OthersStatic(n, 1);
      return in;
    }
    if (op == "Slice") {
      OthersStatic(n, 1);
      std::vector<int64_t> starts = StaticInts(n, 1, "starts");
      std::vector<int64_t> axes;
      if (n.inputs.size() > 3 && !n.inputs[3].empty()) {
        axes = StaticInts(n, 3, "axes");
      } else {
        for (size_t j = 0; j < starts.size(); ++j) axes.push_back(static_cast<int64_t>(j));
      }
      for (int64_t x : axes)
        if (Norm(n, x, rank) == a) CannotTell(n, "it slices the batch axis");
      return in;
    }
    if (op == "Gather") {
      const Role data = Of(n.inputs[0]), idx = Of(n.inputs[1]);
      const int64_t k = n.GetInt("axis", 0);
      const Tensor* indices = Static(n.inputs[1]);
      if (data.kind == Role::kBatched && idx.kind != Role::kBatched && indices) {
        const int64_t kk = Norm(n, k, rank);
        if (kk == a) Refuse(n, "selects along the batch axis");
        const int64_t r_idx = static_cast<int64_t>(indices->rank());
        return data.Moved(kk > a ? a : a + r_idx - 1, rank < 0 ? -1 : rank + r_idx - 1);
      }
      if (data.kind == Role::kStatic && idx.kind == Role::kBatched && Static(n.inputs[0])) {
        const int64_t kk = Norm(n, k, static_cast<int64_t>(Static(n.inputs[0])->rank()));
        return idx.Moved(kk + idx.axis, -1);
      }
      CannotTell(n, "a gather whose batch axis edgetrain does not follow");
    }
    if (op == "Squeeze" || op == "Unsqueeze") {
      std::vector<int64_t> axes;
      if (n.HasAttr("axes")) {
        for (int64_t x : n.GetInts("axes")) axes.push_back(x);
      } else if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
        axes = StaticInts(n, 1, "axes");
      }
      if (axes.empty()) CannotTell(n, "no axes (it may squeeze the batch axis of a batch of one)");
      if (rank < 0) CannotTell(n, "the rank of its input is unknown");
      const bool squeeze = op == "Squeeze";
      const int64_t out_rank = squeeze ? rank - int64_t(axes.size()) : rank + int64_t(axes.size());
      int64_t new_axis = a;
      if (squeeze) {
        for (int64_t x : axes) {
          const int64_t k = Norm(n, x, rank);
          if (k == a) Refuse(n, "squeezes the batch axis");
          if (k < a) --new_axis;
        }
      } else {
        std::vector<int64_t> norm;
        for (int64_t x : axes) norm.push_back(Norm(n, x, out_rank));
        std::sort(norm.begin(), norm.end());
        for (int64_t k : norm)
          if (k <= new_axis) ++new_axis;
      }
      return in.Moved(new_axis, out_rank);
    }
    if (op == "Pad") {
      std::vector<int64_t> pads = StaticInts(n, 1, "pads");
      OthersStatic(n, 1);
      if (rank < 0 || n.inputs.size() > 3) CannotTell(n, "pads of unknown rank or with axes");
      if (pads[static_cast<size_t>(a)] != 0 || pads[static_cast<size_t>(a + rank)] != 0) Refuse(n, "pads the batch axis");
      return in;
    }
    if (op == "Tile") {
      std::vector<int64_t> repeats = StaticInts(n, 1, "repeats");
      if (static_cast<size_t>(a) >= repeats.size() || repeats[static_cast<size_t>(a)] != 1)
        Refuse(n, "repeats along the batch axis");
      return in;
    }
    CannotTell(n, "no per-sample rule for " + op);
  }

  // Probed shapes of `value` at each probe's batch size (fails without probes).
  std::vector<Shape> Probed(const Node& n, const std::string& value, const char* why) const {
    if (probes_.empty()) CannotTell(n, why);
    std::vector<Shape> shapes;
    for (const ShapeProbe& p : probes_) {
      auto it = p.shapes.find(value);
      ET_CHECK(it != p.shapes.end(), ErrorCode::kInternal, "cache_frozen_prefix: no probed shape for '", value, "'");
      shapes.push_back(it->second);
    }
    return shapes;
  }
  // The role every probe agrees on, or CannotTell.
  Role Agreed(const Node& n, const std::function<std::optional<Role>(size_t)>& at) const {
    std::optional<Role> role;
    for (size_t p = 0; p < probes_.size(); ++p) {
      const std::optional<Role> r = at(p);
      if (!r || (role && (!role->SameSamples(*r) || role->rank != r->rank)))
        CannotTell(n, "its output shape does not keep each sample's elements on one axis at every batch size");
      role = r;
    }
    return *role;
  }
  // Expand of a constant to a shape computed from the batch: one copy per sample along the axis that grows
  // with the batch.
  Role ExpandedConstant(const Node& n) const {
    const std::vector<Shape> shapes =
        Probed(n, n.outputs[0], "it expands a constant to a shape computed from the batch");
    bool grows = false;
    for (size_t k = 0; k < shapes[0].size(); ++k) grows |= shapes[0][k] != shapes[1][k];
    if (!grows) return {Role::kShape};
    return Agreed(n, [&](size_t p) -> std::optional<Role> {
      const Shape& t = shapes[p];
      const int64_t b = probes_[p].batch;
      std::optional<Role> r;
      for (size_t k = 0; k < t.size(); ++k) {
        if (shapes[0][k] == shapes[1][k]) continue;
        if (r || t[k] % b != 0) return std::nullopt;
        r = Role{Role::kBatched, static_cast<int64_t>(k), static_cast<int64_t>(t.size()), t[k] / b, 1};
      }
      return r;
    });
  }

  const Graph& g_;
  std::vector<ShapeProbe> probes_;  // empty when the prefix computes no shape from the batch
  std::unordered_map<std::string, Role> roles_;
};

}  // namespace

void CheckPrefixPerSample(const Model& training, const std::set<std::string>& caller,
                          const std::set<std::string>& not_trained, const Model& compiled_prefix,
                          const std::vector<std::string>& prefix_inputs, const std::vector<std::string>& boundary) {
  // The whole frozen part first (what the compiled prefix may have left out of itself: random nodes,
  // BatchNormalization updating its statistics).
  const Graph& g = training.graph;
  const std::vector<size_t> order = TopologicalOrder(g);
  const Dependence dep = Trace(g, order, caller, not_trained);
  for (size_t k : order) {
    const Node& n = g.nodes[k];
    bool frozen = true, reads_batch = false;
    for (const std::string& o : n.outputs) frozen &= o.empty() || !dep.on_variable.count(o);
    for (const std::string& i : n.inputs) reads_batch |= dep.on_caller.count(i) != 0;
    if (!frozen || !reads_batch) continue;
    if (TrainingModeBatchNorm(n))
      Fail(ErrorCode::kInvalidArgument, "cache_frozen_prefix: ", n.Describe(),
           " in the frozen part of the network normalizes with the batch's statistics (BatchNormalization in training "
           "mode), so its results for a sample depend on the other samples of the batch; export the frozen backbone "
           "in eval mode (model.eval(), training=TrainingMode.PRESERVE) and generate the artifacts with "
           "--frozen-backbone-as-exported (ArtifactOptions::frozen_backbone_as_exported) to cache it");
    if (!Deterministic(g, training, n))
      Fail(ErrorCode::kInvalidArgument, "cache_frozen_prefix: ", n.Describe(),
           " in the frozen part of the network draws random numbers (", n.op_type,
           IsDropout(n) ? " with a nonzero ratio in training mode" : "",
           "), so each step gives a sample a different result; its outputs cannot be cached");
  }
  // Shapes computed from the batch (Shape -> Gather -> Concat -> Reshape, as PyTorch exports a dynamic batch):
  // followed by running the prefix at two batch sizes.
  const Graph& prefix = compiled_prefix.graph;
  bool computed_shapes = false;
  for (const Node& n : prefix.nodes)
    computed_shapes |= (n.op_type == "Reshape" || n.op_type == "Expand") && n.inputs.size() > 1 &&
                       !prefix.IsInitializer(n.inputs[1]);
  std::vector<ShapeProbe> probes;
  if (computed_shapes)
    for (int64_t batch : {2, 3}) probes.push_back(ProbeShapes(compiled_prefix, prefix_inputs, batch));
  PerSampleCheck check(prefix, std::move(probes));
  for (const std::string& name : prefix_inputs) {
    int64_t rank = -1;
    for (const ValueInfo& in : prefix.inputs)
      if (in.name == name && in.has_shape) rank = static_cast<int64_t>(in.shape.size());
    check.Input(name, rank);
  }
  for (size_t k : TopologicalOrder(prefix)) check.Visit(prefix.nodes[k]);
  for (const std::string& b : boundary) {
    const Role r = check.Of(b);
    ET_CHECK(r.kind == Role::kBatched && r.axis == 0 && r.inner == 1 && r.outer == 1, ErrorCode::kInvalidArgument,
             "cache_frozen_prefix: the frozen prefix's output '", b,
             "' does not hold one row per sample on axis 0; its outputs cannot be cached per sample");
  }
}

}  // namespace edgetrain
