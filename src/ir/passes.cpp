#include "ir/passes.hpp"
#include "ir/rewriter.hpp"
#include "ir/scope.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

namespace edgetrain {

void EliminateDeadNodes(Graph& graph, const std::vector<std::string>& keep) {
  std::unordered_set<std::string> live(keep.begin(), keep.end());
  if (keep.empty())
    for (const auto& o : graph.outputs) live.insert(o.name);
  std::vector<size_t> order = TopologicalOrder(graph);
  std::vector<bool> needed(graph.nodes.size(), false);
  for (size_t k = order.size(); k-- > 0;) {
    const Node& n = graph.nodes[order[k]];
    bool used = false;
    for (const auto& o : n.outputs) used |= !o.empty() && live.count(o);
    if (!used) continue;
    needed[order[k]] = true;
    for (const auto& i : n.inputs)
      if (!i.empty()) live.insert(i);
    for (const Graph* sub : Subgraphs(n))  // subgraphs may read outer values
      for (const auto& sn : sub->nodes)
        for (const auto& i : sn.inputs) live.insert(i);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (needed[i]) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
}

void MaterializeInitializerCopies(Graph& graph) {
  std::unordered_set<std::string> outputs;
  for (const auto& o : graph.outputs) outputs.insert(o.name);
  std::vector<Node> kept;
  for (auto& n : graph.nodes) {
    bool copies_initializer = n.domain.empty() && n.op_type == "Identity" && n.inputs.size() == 1 &&
                              n.outputs.size() == 1 && graph.IsInitializer(n.inputs[0]) && !outputs.count(n.outputs[0]);
    if (copies_initializer) graph.initializers[n.outputs[0]] = graph.initializers.at(n.inputs[0]).Clone();
    else kept.push_back(std::move(n));
  }
  graph.nodes = std::move(kept);
}

size_t FoldConstants(Graph& graph, const NodeEvaluator& evaluate, const std::function<bool(const Node&)>& can_fold) {
  std::unordered_set<std::string> overridable;
  for (const auto& in : graph.inputs) overridable.insert(in.name);
  std::unordered_set<std::string> outputs;
  for (const auto& o : graph.outputs) outputs.insert(o.name);
  auto is_constant = [&](const std::string& v) {
    return v.empty() || (graph.initializers.count(v) && !overridable.count(v));
  };
  size_t folded = 0;
  std::vector<Node> kept;
  for (size_t index : TopologicalOrder(graph)) {
    Node& n = graph.nodes[index];
    bool constant = !n.attributes.count("then_branch") && can_fold(n);
    for (const auto& i : n.inputs) constant = constant && is_constant(i);
    for (const auto& o : n.outputs) constant = constant && !outputs.count(o);  // keep output producers
    if (constant) {
      std::vector<Tensor> inputs;
      for (const auto& i : n.inputs) inputs.push_back(i.empty() ? Tensor() : graph.initializers.at(i));
      std::optional<std::vector<Tensor>> results = evaluate(n, inputs);
      if (results) {
        for (size_t k = 0; k < n.outputs.size() && k < results->size(); ++k)
          if (!n.outputs[k].empty()) graph.initializers[n.outputs[k]] = (*results)[k];
        ++folded;
        continue;
      }
    }
    kept.push_back(std::move(n));
  }
  graph.nodes = std::move(kept);
  return folded;
}

namespace {

// True for a BatchNormalization that normalizes with its running statistics and writes only Y.
bool IsInferenceBatchNorm(const Node& bn) {
  if (!bn.domain.empty() || bn.op_type != "BatchNormalization" || bn.inputs.size() != 5) return false;
  if (bn.outputs.empty() || bn.outputs[0].empty()) return false;
  for (size_t k = 1; k < bn.outputs.size(); ++k)
    if (!bn.outputs[k].empty()) return false;
  return bn.GetInt("training_mode", 0) == 0 && bn.GetInt("spatial", 1) == 1;
}

// Float32 initializer `name` as doubles when it holds `count` values; nullopt otherwise.
std::optional<std::vector<double>> FloatValues(const Graph& graph, const std::string& name, int64_t count) {
  const Tensor& t = graph.initializers.at(name);
  if (t.dtype() != DataType::kFloat32 || t.numel() != count) return std::nullopt;
  return t.ToDoubleVector();
}

}  // namespace

size_t FoldBatchNormIntoConv(Graph& graph) {
  Rewriter rewriter(graph);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& bn = graph.nodes[k];
    if (!IsInferenceBatchNorm(bn)) continue;
    Node* conv = rewriter.SoleProducer(bn.inputs[0], "Conv");
    if (!conv || conv->inputs.size() < 2 || conv->inputs[1].empty()) continue;
    const bool has_bias = conv->inputs.size() > 2 && !conv->inputs[2].empty();
    bool constant = rewriter.IsConstant(conv->inputs[1]) && (!has_bias || rewriter.IsConstant(conv->inputs[2]));
    for (size_t i = 1; i < 5; ++i) constant = constant && rewriter.IsConstant(bn.inputs[i]);
    if (!constant) continue;
    const Tensor& w = graph.initializers.at(conv->inputs[1]);
    if (w.dtype() != DataType::kFloat32 || w.rank() < 3 || w.dim(0) <= 0) continue;
    const int64_t channels = w.dim(0);
    auto scale = FloatValues(graph, bn.inputs[1], channels), shift = FloatValues(graph, bn.inputs[2], channels);
    auto mean = FloatValues(graph, bn.inputs[3], channels), var = FloatValues(graph, bn.inputs[4], channels);
    auto bias = has_bias ? FloatValues(graph, conv->inputs[2], channels) : std::vector<double>(channels, 0.0);
    if (!scale || !shift || !mean || !var || !bias) continue;
    const double epsilon = bn.GetFloat("epsilon", 1e-5f);
    const int64_t per_channel = w.numel() / channels;
    const std::vector<double> weights = w.ToDoubleVector();
    Tensor folded_w(DataType::kFloat32, w.shape(), "folded Conv weight");
    Tensor folded_b(DataType::kFloat32, {channels}, "folded Conv bias");
    float* wp = folded_w.data<float>();
    float* bp = folded_b.data<float>();
    for (int64_t c = 0; c < channels; ++c) {
      const double s = (*scale)[c] / std::sqrt((*var)[c] + epsilon);
      for (int64_t j = c * per_channel; j < (c + 1) * per_channel; ++j) wp[j] = static_cast<float>(weights[j] * s);
      bp[c] = static_cast<float>(((*bias)[c] - (*mean)[c]) * s + (*shift)[c]);
    }
    const std::string w_name = rewriter.FreshName(conv->inputs[1] + "/bn_folded");
    const std::string b_name = rewriter.FreshName((has_bias ? conv->inputs[2] : conv->inputs[1]) + "/bn_folded_bias");
    graph.initializers[w_name] = std::move(folded_w);
    graph.initializers[b_name] = std::move(folded_b);
    for (size_t i = 1; i < 5; ++i) rewriter.DropRead(bn.inputs[i]);
    for (size_t i = 1; i < (has_bias ? 3 : 2); ++i) rewriter.DropRead(conv->inputs[i]);
    conv->inputs.resize(3);
    conv->inputs[1] = w_name;
    conv->inputs[2] = b_name;
    rewriter.Absorb(*conv, k);
  }
  return rewriter.Finish();
}

size_t FuseConvReluMaxPool(Graph& graph) {
  Rewriter rewriter(graph);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& pool = graph.nodes[k];
    if (!pool.domain.empty() || pool.op_type != "MaxPool" || pool.inputs.size() != 1 || pool.outputs.empty() ||
        pool.outputs[0].empty())
      continue;
    bool indices_unread = true;
    for (size_t i = 1; i < pool.outputs.size(); ++i)
      indices_unread = indices_unread && (pool.outputs[i].empty() || rewriter.Reads(pool.outputs[i]) == 0);
    Node* relu = indices_unread ? rewriter.SoleProducer(pool.inputs[0], "Relu") : nullptr;
    Node* conv = relu && relu->inputs.size() == 1 ? rewriter.SoleProducer(relu->inputs[0], "Conv") : nullptr;
    if (!conv) continue;
    conv->domain = kEdgetrainDomain;
    conv->op_type = "ConvReluMaxPool";
    conv->opset = 1;  // the model need not import ai.edgetrain
    for (const auto& [name, value] : pool.attributes)
      if (name != "storage_order") conv->attributes["pool_" + name] = value;
    rewriter.Absorb(*conv, k, {relu});
  }
  return rewriter.Finish();
}

size_t FuseReluIntoProducers(Graph& graph, bool into_conv, bool into_gemm) {
  Rewriter rewriter(graph);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& relu = graph.nodes[k];
    if (!relu.domain.empty() || relu.op_type != "Relu" || relu.inputs.size() != 1 || relu.outputs.size() != 1) continue;
    Node* producer = into_conv ? rewriter.SoleProducer(relu.inputs[0], "Conv") : nullptr;
    const char* fused = "FusedConv";
    if (!producer && into_gemm) {
      producer = rewriter.SoleProducer(relu.inputs[0], "Gemm");
      fused = "FusedGemm";
    }
    if (!producer) continue;
    producer->domain = kMicrosoftDomain;
    producer->op_type = fused;
    producer->opset = 1;  // the model need not import com.microsoft
    producer->attributes["activation"] = Attribute::String("Relu");
    rewriter.Absorb(*producer, k);
  }
  return rewriter.Finish();
}

size_t FuseSilu(Graph& graph) {
  Rewriter rewriter(graph);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& mul = graph.nodes[k];
    if (!mul.domain.empty() || mul.op_type != "Mul" || mul.inputs.size() != 2 || mul.outputs.size() != 1) continue;
    for (size_t side : {size_t{0}, size_t{1}}) {
      Node* sigmoid = mul.inputs[0] != mul.inputs[1] ? rewriter.SoleProducer(mul.inputs[side], "Sigmoid") : nullptr;
      if (!sigmoid || sigmoid->inputs.size() != 1 || sigmoid->inputs[0] != mul.inputs[1 - side]) continue;
      sigmoid->domain = kEdgetrainDomain;
      sigmoid->op_type = "Silu";
      sigmoid->opset = 1;
      rewriter.Absorb(*sigmoid, k);
      break;
    }
  }
  return rewriter.Finish();
}

size_t FuseBatchNormActivation(Graph& graph, bool silu_kernel) {
  Rewriter rewriter(graph);
  size_t fused = 0;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& act = graph.nodes[k];
    const bool relu = act.domain.empty() && act.op_type == "Relu", clip = act.domain.empty() && act.op_type == "Clip";
    const bool silu = silu_kernel && act.domain == kEdgetrainDomain && act.op_type == "Silu";
    if (!(relu || clip || silu) || act.inputs.empty() || act.outputs.size() != 1 ||
        (!clip && act.inputs.size() != 1) || act.inputs.size() > 3 || act.HasAttr("min") || act.HasAttr("max"))
      continue;
    bool bounds_ready = true;  // made before the BatchNormalization runs, which takes the Clip's place
    for (size_t i = 1; i < act.inputs.size(); ++i)
      bounds_ready = bounds_ready && (act.inputs[i].empty() || !rewriter.Producer(act.inputs[i]));
    Node* bn = rewriter.Producer(act.inputs[0]);
    if (!bounds_ready || !bn || !bn->domain.empty() || bn->op_type != "BatchNormalization" || bn->inputs.size() != 5 ||
        bn->outputs.empty() || bn->outputs.size() > 3 || bn->outputs[0] != act.inputs[0] ||
        rewriter.Reads(act.inputs[0]) != 1 || (bn->HasAttr("spatial") && bn->GetInt("spatial", 1) != 1) ||
        !(bn->HasAttr("training_mode") || bn->outputs.size() == 1))
      continue;
    bn->domain = kEdgetrainDomain;
    bn->op_type = relu ? "BatchNormalizationRelu" : clip ? "BatchNormalizationClip" : "BatchNormalizationSilu";
    bn->opset = 1;  // the model need not import ai.edgetrain
    bn->attributes["training_mode"] = Attribute::Int(bn->GetInt("training_mode", 0));
    bn->attributes.erase("spatial");
    bn->outputs[0] = act.outputs[0];
    for (size_t i = 1; i < act.inputs.size(); ++i) {
      bn->inputs.push_back(act.inputs[i]);
      if (!act.inputs[i].empty()) rewriter.AddRead(act.inputs[i]);
    }
    rewriter.Remove(act);
    ++fused;
  }
  rewriter.Finish();
  return fused;
}

namespace {

// The activation of BatchNormalization's fused forms as ChannelAffine's attribute names it ("" for the plain op).
std::string BatchNormActivation(const Node& n) {
  if (n.domain != kEdgetrainDomain) return "";
  if (n.op_type == "BatchNormalizationRelu") return "Relu";
  if (n.op_type == "BatchNormalizationClip") return "Clip";
  if (n.op_type == "BatchNormalizationSilu") return "Silu";
  return "";
}

// A training-mode BatchNormalization (or its Relu, Clip and Silu forms) over the channel axis that writes its Y.
bool IsTrainingBatchNorm(const Node& n) {
  const bool family = (n.domain.empty() && n.op_type == "BatchNormalization") || !BatchNormActivation(n).empty();
  return family && n.GetInt("training_mode", 0) == 1 && n.GetInt("spatial", 1) == 1 && n.inputs.size() >= 3 &&
         !n.outputs.empty() && !n.outputs[0].empty();
}

// Output 5 of a training-mode BatchNormalization, the affine map it applies before its activation, added (named
// after Y) where the node does not write it yet.
const std::string& AffineMapOutput(Rewriter& rewriter, Node& bn) {
  if (bn.outputs.size() < 6) bn.outputs.resize(6);
  if (bn.outputs[5].empty()) bn.outputs[5] = rewriter.FreshName(bn.outputs[0] + "/affine");
  return bn.outputs[5];
}

// The ai.edgetrain.ChannelAffine (X, map[, min, max] -> Y) that makes `value` while it is in the graph, else null.
Node* ChannelAffineProducer(Rewriter& rewriter, const std::string& value) {
  Node* n = rewriter.Producer(value);
  const bool affine = n && n->domain == kEdgetrainDomain && n->op_type == "ChannelAffine" && n->inputs.size() >= 2 &&
                      n->outputs.size() == 1;
  return affine ? n : nullptr;
}

}  // namespace

size_t ShareBatchNormAffine(Graph& graph) {
  auto is_training_batch_norm = [](const Node& n) { return IsTrainingBatchNorm(n) && n.outputs.size() <= 3; };
  // What a copy must share with the original: X, scale, B and epsilon. The map is taken before the activation, so
  // the copy may apply another one (a plain copy of a BatchNormalizationSilu feeds SiluGrad).
  auto key = [](const Node& n) {
    const uint32_t epsilon = std::bit_cast<uint32_t>(n.GetFloat("epsilon", 1e-5f));
    std::string k = std::to_string(epsilon);
    for (size_t i = 0; i < 3; ++i) k += "\n" + n.inputs[i];
    return k;
  };
  Rewriter rewriter(graph);
  std::unordered_map<std::string, size_t> originals;
  size_t shared = 0;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    Node& node = graph.nodes[k];
    if (!is_training_batch_norm(node)) continue;
    auto [it, first] = originals.emplace(key(node), k);
    if (first) continue;
    bool statistics_unread = true;
    for (size_t i = 1; i < node.outputs.size(); ++i)
      statistics_unread = statistics_unread && (node.outputs[i].empty() || rewriter.Reads(node.outputs[i]) == 0);
    if (!statistics_unread) continue;
    Node& original = graph.nodes[it->second];
    const std::string map = AffineMapOutput(rewriter, original);
    for (size_t i = 1; i < 5 && i < node.inputs.size(); ++i)
      if (!node.inputs[i].empty()) rewriter.DropRead(node.inputs[i]);
    rewriter.AddRead(map);
    std::vector<std::string> inputs = {node.inputs[0], map};
    inputs.insert(inputs.end(), node.inputs.begin() + std::min<size_t>(5, node.inputs.size()), node.inputs.end());
    const std::string activation = BatchNormActivation(node);
    node.domain = kEdgetrainDomain;
    node.op_type = "ChannelAffine";
    node.opset = 1;
    node.attributes.clear();
    if (!activation.empty()) node.attributes["activation"] = Attribute::String(activation);
    node.inputs = std::move(inputs);
    node.outputs.resize(1);
    ++shared;
  }
  rewriter.Finish();
  return shared;
}

size_t FuseActivationGradIntoBatchNormGrad(Graph& graph) {
  Rewriter rewriter(graph);
  size_t fused = 0;
  for (Node& grad : graph.nodes) {
    if (grad.domain != kEdgetrainDomain || grad.op_type != "BatchNormalizationGrad" || grad.inputs.size() != 3 ||
        grad.inputs[0].empty() || rewriter.Reads(grad.inputs[0]) != 1)
      continue;
    Node* activation_grad = rewriter.Producer(grad.inputs[0]);
    if (!activation_grad || activation_grad->domain != kEdgetrainDomain || activation_grad->outputs.size() != 1)
      continue;
    const bool relu = activation_grad->op_type == "ReluGrad" && activation_grad->inputs.size() == 2;
    const bool clip = activation_grad->op_type == "ClipGrad" && activation_grad->inputs.size() == 4;
    const bool silu = activation_grad->op_type == "SiluGrad" && activation_grad->inputs.size() == 2;
    if (!relu && !clip && !silu) continue;
    // ReluGrad and ClipGrad read the activation's output, SiluGrad its input (a ChannelAffine without activation).
    const std::string activation = relu ? "Relu" : clip ? "Clip" : "Silu";
    const Node* affine = ChannelAffineProducer(rewriter, activation_grad->inputs[1]);
    if (!affine || affine->inputs[0] != grad.inputs[1] ||
        affine->GetString("activation", "") != (silu ? "" : activation))
      continue;
    std::vector<std::string> inputs = {activation_grad->inputs[0], grad.inputs[1], grad.inputs[2], affine->inputs[1]};
    if (clip) {
      const bool same_bounds = affine->inputs.size() == 4 && affine->inputs[2] == activation_grad->inputs[2] &&
                               affine->inputs[3] == activation_grad->inputs[3];
      if (!same_bounds) continue;
      inputs.insert(inputs.end(), {affine->inputs[2], affine->inputs[3]});
    }
    for (size_t i = 3; i < inputs.size(); ++i) rewriter.AddRead(inputs[i]);
    rewriter.AddRead(inputs[0]);
    rewriter.DropRead(grad.inputs[0]);
    rewriter.Remove(*activation_grad);
    grad.op_type = "BatchNormalizationActivationGrad";
    grad.opset = 1;
    grad.inputs = std::move(inputs);
    grad.attributes["activation"] = Attribute::String(activation);
    ++fused;
  }
  rewriter.Finish();
  return fused;
}

size_t FuseSiluIntoChannelAffine(Graph& graph) {
  Rewriter rewriter(graph);
  size_t fused = 0;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const Node& silu = graph.nodes[k];
    if (silu.domain != kEdgetrainDomain || silu.op_type != "Silu" || silu.inputs.size() != 1 ||
        silu.outputs.size() != 1 || rewriter.Reads(silu.inputs[0]) != 1)
      continue;
    Node* affine = ChannelAffineProducer(rewriter, silu.inputs[0]);
    if (!affine || !affine->GetString("activation", "").empty()) continue;
    affine->attributes["activation"] = Attribute::String("Silu");
    affine->outputs[0] = silu.outputs[0];
    rewriter.Remove(silu);
    ++fused;
  }
  rewriter.Finish();
  return fused;
}

size_t FuseMulAdd(Graph& graph) {
  Rewriter rewriter(graph);
  size_t fused = 0;
  for (Node& sum : graph.nodes) {
    if (!sum.domain.empty() || sum.op_type != "Sum" || sum.inputs.size() != 2 || sum.outputs.size() != 1 ||
        sum.inputs[0] == sum.inputs[1])
      continue;
    for (size_t side : {size_t{0}, size_t{1}}) {
      Node* mul = rewriter.SoleProducer(sum.inputs[side], "Mul");
      Node* expand = rewriter.SoleProducer(sum.inputs[1 - side], "Expand");
      if (!mul || !expand || mul->inputs.size() != 2 || expand->inputs.size() != 2) continue;
      std::vector<std::string> inputs = {mul->inputs[0], mul->inputs[1], expand->inputs[0], expand->inputs[1]};
      for (const std::string& input : inputs) rewriter.AddRead(input);
      rewriter.Remove(*mul);
      rewriter.Remove(*expand);
      for (const std::string& input : sum.inputs) rewriter.DropRead(input);
      sum.domain = kEdgetrainDomain;
      sum.op_type = "MulAdd";
      sum.opset = 1;
      sum.inputs = std::move(inputs);
      ++fused;
      break;
    }
  }
  rewriter.Finish();
  return fused;
}

size_t RemoveDropoutsThatDropNothing(Graph& graph) {
  Rewriter rewriter(graph);
  // Dropout's or DropoutGrad's ratio and training_mode inputs (opset 12+ and the gradient's order) drop nothing:
  // ratio constant 0 or training_mode absent or constant false.
  auto drops_nothing = [&](const Node& n, size_t ratio, size_t mode) {
    if (n.inputs.size() <= mode || n.inputs[mode].empty()) return true;
    const Tensor* training = rewriter.ConstantTensor(n.inputs[mode]);
    if (training && training->numel() == 1 && training->DoubleAt(0) == 0.0) return true;
    const Tensor* r =
        n.inputs.size() > ratio && !n.inputs[ratio].empty() ? rewriter.ConstantTensor(n.inputs[ratio]) : nullptr;
    return r && r->numel() == 1 && r->DoubleAt(0) == 0.0;
  };
  auto identity = [&](Node& n, const std::string& x, const std::string& y) {
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) rewriter.DropRead(n.inputs[i]);
    n.domain.clear();
    n.op_type = "Identity";
    n.opset = 0;
    n.inputs = {x};
    n.outputs = {y};
    n.attributes.clear();
  };
  size_t removed = 0;
  for (Node& dropout : graph.nodes) {
    if (!dropout.domain.empty() || dropout.op_type != "Dropout" || dropout.inputs.empty() || dropout.outputs.empty() ||
        dropout.outputs[0].empty() || !drops_nothing(dropout, 1, 2))
      continue;
    std::vector<Node*> grads;  // the mask's readers, each a DropoutGrad that drops nothing
    bool mask_free = true;
    if (dropout.outputs.size() > 1 && !dropout.outputs[1].empty()) {
      const std::string& mask = dropout.outputs[1];
      for (Node& n : graph.nodes)
        for (size_t i = 0; i < n.inputs.size(); ++i)
          if (n.inputs[i] == mask) {
            const bool grad = n.domain == kEdgetrainDomain && n.op_type == "DropoutGrad" && i == 1 &&
                              n.outputs.size() == 1 && drops_nothing(n, 2, 3);
            if (grad) grads.push_back(&n);
            mask_free = mask_free && grad;
          }
      mask_free = mask_free && rewriter.Reads(mask) == grads.size();
    }
    if (!mask_free) continue;
    for (Node* grad : grads) {
      identity(*grad, grad->inputs[0], grad->outputs[0]);
      ++removed;
    }
    identity(dropout, dropout.inputs[0], dropout.outputs[0]);
    ++removed;
  }
  rewriter.Finish();
  return removed;
}

size_t FoldChannelAffineIntoDepthwiseConv(Graph& graph) {
  Rewriter rewriter(graph);
  size_t folded = 0;
  auto grouped = [](const Node& n) { return n.GetInt("group", 1) > 1; };
  for (Node& grad : graph.nodes) {
    if (grad.domain != kEdgetrainDomain || grad.op_type != "ConvGrad" || grad.inputs.size() != 3 || !grouped(grad) ||
        grad.inputs[1].empty() || rewriter.Reads(grad.inputs[1]) != 1)
      continue;
    const Node* affine = ChannelAffineProducer(rewriter, grad.inputs[1]);
    if (!affine) continue;
    std::vector<std::string> inputs = {grad.inputs[0], affine->inputs[0], grad.inputs[2]};
    inputs.insert(inputs.end(), affine->inputs.begin() + 1, affine->inputs.end());
    for (size_t i = 1; i < inputs.size(); ++i)
      if (i != 2 && !inputs[i].empty()) rewriter.AddRead(inputs[i]);
    const std::string activation = affine->GetString("activation", "");
    rewriter.DropRead(grad.inputs[1]);
    rewriter.Remove(*affine);
    grad.op_type = "ChannelAffineConvGrad";
    grad.opset = 1;
    grad.inputs = std::move(inputs);
    if (!activation.empty()) grad.attributes["activation"] = Attribute::String(activation);
    ++folded;
  }
  for (Node& conv : graph.nodes) {
    if (!conv.domain.empty() || conv.op_type != "Conv" || conv.inputs.size() < 2 || conv.inputs.size() > 3 ||
        conv.outputs.size() != 1 || !grouped(conv) || rewriter.Reads(conv.inputs[0]) != 1)
      continue;
    Node* bn = rewriter.Producer(conv.inputs[0]);
    if (!bn || !IsTrainingBatchNorm(*bn) || bn->outputs[0] != conv.inputs[0]) continue;
    const std::string activation = BatchNormActivation(*bn);
    const bool clip = activation == "Clip";
    std::vector<std::string> inputs = {bn->inputs[0], conv.inputs[1], conv.inputs.size() > 2 ? conv.inputs[2] : "",
                                       AffineMapOutput(rewriter, *bn)};
    if (clip)
      for (size_t i : {size_t{5}, size_t{6}}) inputs.push_back(i < bn->inputs.size() ? bn->inputs[i] : "");
    for (size_t i = 0; i < inputs.size(); ++i)
      if (i != 1 && i != 2 && !inputs[i].empty()) rewriter.AddRead(inputs[i]);
    rewriter.DropRead(conv.inputs[0]);
    bn->outputs[0].clear();  // the normalized tensor is never stored
    conv.domain = kEdgetrainDomain;
    conv.op_type = "ChannelAffineConv";
    conv.opset = 1;
    conv.inputs = std::move(inputs);
    if (!activation.empty()) conv.attributes["activation"] = Attribute::String(activation);
    ++folded;
  }
  rewriter.Finish();
  return folded;
}

namespace {

// The range [begin, end) of axis `axis` that a SliceGrad writes dY to, read from its constant inputs
// (shape, starts, ends, axes, steps); nullopt unless it is one step-1 slice of one axis.
struct SliceRange {
  std::vector<int64_t> shape;
  int64_t axis = 0, begin = 0, end = 0;
};
std::optional<SliceRange> ConstantSliceRange(Rewriter& rewriter, const Node& n) {
  if (n.inputs.size() < 4 || n.inputs.size() > 6 || n.outputs.size() != 1) return std::nullopt;
  auto shape = rewriter.ConstantInts(n.inputs[1]), starts = rewriter.ConstantInts(n.inputs[2]),
       ends = rewriter.ConstantInts(n.inputs[3]);
  if (!shape || !starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(shape->size());
  SliceRange r{*shape, 0, (*starts)[0], (*ends)[0]};
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) {
    auto axes = rewriter.ConstantInts(n.inputs[4]);
    if (!axes || axes->size() != 1) return std::nullopt;
    r.axis = (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
  }
  if (n.inputs.size() > 5 && !n.inputs[5].empty()) {
    auto steps = rewriter.ConstantInts(n.inputs[5]);
    if (!steps || *steps != std::vector<int64_t>{1}) return std::nullopt;
  }
  if (r.axis < 0 || r.axis >= rank) return std::nullopt;
  const int64_t dim = (*shape)[static_cast<size_t>(r.axis)];
  auto clamp = [dim](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim); };
  r.begin = clamp(r.begin);
  r.end = clamp(r.end);
  return r;
}

}  // namespace

size_t JoinSliceGradients(Graph& graph) {
  Rewriter rewriter(graph);
  size_t count = 0;
  for (Node& sum : graph.nodes) {
    if (!sum.domain.empty() || sum.op_type != "Sum" || sum.inputs.size() < 2 || sum.outputs.size() != 1) continue;
    std::vector<std::pair<SliceRange, const Node*>> pieces;
    for (const std::string& input : sum.inputs) {
      const Node* grad = rewriter.Producer(input);
      if (!grad || grad->op_type != "SliceGrad" ||
          (grad->domain != kEdgetrainDomain && grad->domain != kMicrosoftDomain) || rewriter.Reads(input) != 1)
        break;
      auto range = ConstantSliceRange(rewriter, *grad);
      if (!range || (!pieces.empty() && (range->shape != pieces[0].first.shape || range->axis != pieces[0].first.axis)))
        break;
      pieces.emplace_back(*range, grad);
    }
    if (pieces.size() != sum.inputs.size()) continue;
    std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first.begin < b.first.begin; });
    int64_t covered = 0;
    for (const auto& [range, grad] : pieces)
      if (range.begin == covered && range.end > range.begin) covered = range.end;
    if (covered != pieces[0].first.shape[static_cast<size_t>(pieces[0].first.axis)]) continue;
    std::vector<std::string> joined;
    for (const auto& [range, grad] : pieces) {
      joined.push_back(grad->inputs[0]);
      rewriter.AddRead(grad->inputs[0]);  // now read by the Concat
      rewriter.Remove(*grad);
    }
    sum.op_type = "Concat";
    sum.inputs = joined;
    sum.attributes = {{"axis", Attribute::Int(pieces[0].first.axis)}};
    ++count;
  }
  rewriter.Finish();
  return count;
}

namespace {

bool SameAttributes(const AttributeMap& a, const AttributeMap& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    const Attribute &x = ia->second, &y = ib->second;
    if (ia->first != ib->first || x.kind != y.kind || x.f != y.f || x.i != y.i || x.s != y.s || x.floats != y.floats ||
        x.ints != y.ints || x.strings != y.strings || x.t.defined() || y.t.defined() || x.g || y.g || !x.ref.empty() ||
        !y.ref.empty())
      return false;
  }
  return true;
}

}  // namespace

namespace {

bool IsTranspose2D(const Node& n) {
  if (!n.domain.empty() || n.op_type != "Transpose" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const Attribute* perm = n.Find("perm");
  return perm && perm->ints == std::vector<int64_t>{1, 0};
}

// The element type of `value` where the graph declares it.
DataType DeclaredType(const Graph& graph, const std::string& value) {
  if (auto it = graph.initializers.find(value); it != graph.initializers.end()) return it->second.dtype();
  const ValueInfo* info = graph.FindValueInfo(value);
  return info ? info->dtype : DataType::kUndefined;
}

}  // namespace

size_t FoldTransposesIntoProducts(Graph& graph, bool fused_matmul) {
  size_t count = 0;
  {  // Transpose(Transpose(x)) = x: its readers (all in this graph, none a graph output) read x.
    Rewriter before(graph);
    std::unordered_map<std::string, size_t> top_level_reads;
    for (const Node& n : graph.nodes)
      for (const auto& i : n.inputs) ++top_level_reads[i];
    std::unordered_map<std::string, std::string> restored;
    for (const Node& n : graph.nodes)
      if (const Node* inner = IsTranspose2D(n) ? before.Producer(n.inputs[0]) : nullptr;
          inner && IsTranspose2D(*inner) && before.Reads(n.outputs[0]) == top_level_reads[n.outputs[0]])
        restored[n.outputs[0]] = inner->inputs[0];
    for (Node& n : graph.nodes)  // the Transposes nobody reads now are left to EliminateDeadNodes
      for (auto& i : n.inputs)
        if (auto it = restored.find(i); it != restored.end()) i = it->second;
    count += restored.size();
  }
  Rewriter rewriter(graph);  // reads counted again: the restored values have new readers
  auto transpose_of = [&](const std::string& value) -> const Node* {
    const Node* p = rewriter.Producer(value);
    return p && IsTranspose2D(*p) ? p : nullptr;
  };
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    Node& n = graph.nodes[k];
    if (!n.domain.empty()) continue;
    if (fused_matmul && n.op_type == "MatMul" && n.inputs.size() == 2 && n.outputs.size() == 1) {
      const Node* ta = transpose_of(n.inputs[0]);
      const Node* tb = transpose_of(n.inputs[1]);
      const DataType t = DeclaredType(graph, (ta ? ta : tb) ? (ta ? ta : tb)->inputs[0] : n.inputs[0]);
      if ((!ta && !tb) || (t != DataType::kFloat32 && t != DataType::kFloat64)) continue;
      n.domain = kMicrosoftDomain;
      n.op_type = "FusedMatMul";
      n.opset = 1;  // the model need not import com.microsoft
      n.attributes["transA"] = Attribute::Int(ta ? 1 : 0);
      n.attributes["transB"] = Attribute::Int(tb ? 1 : 0);
      if (ta) n.inputs[0] = ta->inputs[0];
      if (tb) n.inputs[1] = tb->inputs[0];
      ++count;
    } else if (IsTranspose2D(n)) {
      Node* gemm = rewriter.SoleProducer(n.inputs[0], "Gemm");
      if (!gemm || (gemm->inputs.size() > 2 && !gemm->inputs[2].empty())) continue;
      const int64_t trans_a = gemm->GetInt("transA", 0), trans_b = gemm->GetInt("transB", 0);
      gemm->inputs.resize(2);
      std::swap(gemm->inputs[0], gemm->inputs[1]);  // (op(A) op(B))^T = op(B)^T op(A)^T
      gemm->attributes["transA"] = Attribute::Int(trans_b == 0 ? 1 : 0);
      gemm->attributes["transB"] = Attribute::Int(trans_a == 0 ? 1 : 0);
      rewriter.Absorb(*gemm, k);
    }
  }
  return count + rewriter.Finish();
}

size_t KeepRecurrentTraces(Graph& graph) {
  constexpr size_t kForwardInputs = 8, kForwardOutputs = 3, kTraceInput = 11;
  auto padded = [](std::vector<std::string> v, size_t n) {
    v.resize(std::max(v.size(), n));
    return v;
  };
  Rewriter rewriter(graph);
  // The same value, or the same output of two nodes that only move data, with the same attributes and
  // inputs (an input recomputed for the backward, a Transpose of X in PyTorch's batch_first exports).
  std::function<bool(const std::string&, const std::string&, int)> same_depth = [&](const std::string& a,
                                                                                     const std::string& b, int depth) {
    if (a == b) return true;
    const Node* pa = rewriter.Producer(a);
    const Node* pb = rewriter.Producer(b);
    static const std::unordered_set<std::string> kDataMovement = {"Transpose", "Reshape",   "Squeeze", "Unsqueeze",
                                                                   "Identity",  "Flatten",   "Cast"};
    if (depth == 0 || !pa || !pb || !pa->domain.empty() || !pb->domain.empty() || pa->op_type != pb->op_type ||
        !kDataMovement.count(pa->op_type) || pa->inputs.size() != pb->inputs.size() ||
        pa->outputs.size() != pb->outputs.size() || !SameAttributes(pa->attributes, pb->attributes))
      return false;
    for (size_t i = 0; i < pa->outputs.size(); ++i)
      if ((pa->outputs[i] == a) != (pb->outputs[i] == b)) return false;
    for (size_t i = 0; i < pa->inputs.size(); ++i)
      if (!same_depth(pa->inputs[i], pb->inputs[i], depth - 1)) return false;
    return true;
  };
  auto same_value = [&](const std::string& a, const std::string& b) { return same_depth(a, b, 8); };
  size_t count = 0;
  for (Node& forward : graph.nodes) {
    if (!forward.domain.empty() || forward.op_type != "LSTM" || forward.outputs.size() > kForwardOutputs ||
        forward.inputs.size() > kForwardInputs || forward.inputs.empty())
      continue;
    const std::vector<std::string> inputs = padded(forward.inputs, kForwardInputs);
    for (Node& grad : graph.nodes) {
      if (grad.domain != kEdgetrainDomain || grad.op_type != "LSTMGrad" || grad.inputs.size() > kTraceInput ||
          !SameAttributes(forward.attributes, grad.attributes))
        continue;
      const std::vector<std::string> grad_inputs = padded(grad.inputs, kForwardInputs);
      if (!std::equal(inputs.begin(), inputs.end(), grad_inputs.begin(), same_value)) continue;
      // A recomputed copy of an input (autodiff's recompute pass) gives way to the original: the copy dies.
      for (size_t i = 0; i < std::min(forward.inputs.size(), grad.inputs.size()); ++i) grad.inputs[i] = inputs[i];
      const std::string base = !forward.outputs.empty() && !forward.outputs[0].empty() ? forward.outputs[0]
                                                                                       : forward.inputs[0];
      forward.outputs = padded(forward.outputs, kForwardOutputs);
      forward.outputs.push_back(rewriter.FreshName(base + "_lstm_trace"));
      grad.inputs = padded(grad.inputs, kTraceInput);
      grad.inputs.push_back(forward.outputs.back());
      for (std::string& output : grad.outputs)  // gradients nothing reads (X's, say) are not computed
        if (!output.empty() && rewriter.Reads(output) == 0) output.clear();
      ++count;
      break;
    }
  }
  return count;
}

}  // namespace edgetrain
