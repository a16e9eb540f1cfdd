#include "autodiff/recurrent_last_step.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/rewriter.hpp"

namespace edgetrain {

namespace {

// Squeeze's or Unsqueeze's axes (an attribute before opset 13, a constant input from 13 on), each brought into
// [0, rank) (rank: the input's for Squeeze, the output's for Unsqueeze); nullopt when not known or out of range.
std::optional<std::vector<int64_t>> ConstantAxes(Rewriter& rewriter, const Node& n) {
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    return rewriter.ConstantInts(n.inputs[1]);
  }
  const Attribute* a = n.Find("axes");
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints.begin(), a->ints.end());
}

// Where axis `axis` of a rank-`rank` value lands in the output of `n` (Transpose, Squeeze, Unsqueeze,
// Identity); false when `n` removes it or its attributes are not understood.
bool FollowAxis(Rewriter& rewriter, const Node& n, int64_t& axis, int64_t& rank) {
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Transpose") {
    std::vector<int64_t> perm;
    if (const Attribute* a = n.Find("perm")) perm.assign(a->ints.begin(), a->ints.end());
    if (perm.empty())
      for (int64_t k = rank - 1; k >= 0; --k) perm.push_back(k);
    if (static_cast<int64_t>(perm.size()) != rank) return false;
    auto it = std::find(perm.begin(), perm.end(), axis);
    if (it == perm.end()) return false;
    axis = it - perm.begin();
    return true;
  }
  const bool squeeze = n.op_type == "Squeeze";
  std::optional<std::vector<int64_t>> axes = ConstantAxes(rewriter, n);
  // Squeeze without axes drops every unit axis: the one-step Y would lose its time axis too.
  if ((!squeeze && n.op_type != "Unsqueeze") || !axes || axes->empty()) return false;
  const int64_t count = static_cast<int64_t>(axes->size());
  const int64_t out_rank = squeeze ? rank - count : rank + count;
  for (int64_t& a : *axes) {
    a = a < 0 ? a + (squeeze ? rank : out_rank) : a;
    if (a < 0 || a >= (squeeze ? rank : out_rank)) return false;
  }
  if (squeeze) {
    if (std::count(axes->begin(), axes->end(), axis)) return false;
    axis -= std::count_if(axes->begin(), axes->end(), [&](int64_t a) { return a < axis; });
  } else {
    for (int64_t out = 0, in = 0; out < out_rank; ++out) {
      if (std::count(axes->begin(), axes->end(), out)) continue;
      if (in++ == axis) {
        axis = out;
        break;
      }
    }
  }
  rank = out_rank;
  return true;
}

}  // namespace

size_t ReadLastRecurrentStepFromFinalState(Graph& graph, int64_t opset, const std::vector<std::string>& keep) {
  Rewriter rewriter(graph);
  const std::unordered_set<std::string> kept(keep.begin(), keep.end());
  std::vector<std::pair<size_t, Node>> unsqueezes;  // new nodes, each to go after the recurrent node at index first
  size_t count = 0;
  for (Node& gather : graph.nodes) {
    if (!gather.domain.empty() || gather.op_type != "Gather" || gather.inputs.size() != 2) continue;
    std::vector<Node*> chain;  // from the Gather's data back towards Y
    std::string value = gather.inputs[0];
    Node* rnn = nullptr;
    for (int depth = 0; depth < 8 && rewriter.Reads(value) == 1 && !kept.count(value); ++depth) {
      Node* p = rewriter.Producer(value);
      if (!p || !p->domain.empty()) break;
      if ((p->op_type == "LSTM" || p->op_type == "GRU" || p->op_type == "RNN") && !p->outputs.empty() &&
          p->outputs[0] == value) {
        rnn = p;
        break;
      }
      static const std::unordered_set<std::string> kMoves = {"Transpose", "Squeeze", "Unsqueeze", "Identity"};
      if (!kMoves.count(p->op_type) || p->outputs.size() != 1 || p->inputs.empty()) break;
      chain.push_back(p);
      value = p->inputs[0];
    }
    const std::string direction = rnn ? rnn->GetString("direction", "forward") : "";
    if (!rnn || (direction != "forward" && direction != "reverse") ||
        (rnn->inputs.size() > 4 && !rnn->inputs[4].empty()))
      continue;
    const int64_t seq_axis = rnn->GetInt("layout", 0) == 0 ? 0 : 1;
    int64_t axis = seq_axis, rank = 4;  // Y: [seq, dirs, batch, hidden], or [batch, seq, dirs, hidden]
    bool followed = true;
    std::vector<int64_t> time_axes;  // the time axis of each chain value, from Y's reader on
    for (auto it = chain.rbegin(); followed && it != chain.rend(); ++it) {
      followed = FollowAxis(rewriter, **it, axis, rank);
      time_axes.push_back(axis);
    }
    int64_t gather_axis = gather.GetInt("axis", 0);
    gather_axis = gather_axis < 0 ? gather_axis + rank : gather_axis;
    const Tensor* index = rewriter.ConstantTensor(gather.inputs[1]);
    if (!followed || gather_axis != axis || !index || index->numel() != 1 || index->rank() > 1 ||
        (index->dtype() != DataType::kInt64 && index->dtype() != DataType::kInt32))
      continue;
    int64_t seq = -1;  // the static sequence length, where X's shape declares it
    if (const ValueInfo* x = graph.FindValueInfo(rnn->inputs[0]); x && x->has_shape && x->shape.size() == 3)
      seq = x->shape[seq_axis].value;
    const int64_t i = index->ToInt64Vector()[0];
    const bool last = direction == "forward" ? i == -1 || (seq > 0 && i == seq - 1) : i == 0 || (seq > 0 && i == -seq);
    if (!last) continue;
    // Y_h is Y's last step without the time axis: unsqueezed there, it stands for Y in the chain.
    if (rnn->outputs.size() < 2) rnn->outputs.resize(2);
    if (rnn->outputs[1].empty()) rnn->outputs[1] = rewriter.FreshName(value + "_h");
    Node unsqueeze;
    unsqueeze.name = rewriter.FreshName(rnn->name + "/last_step");
    unsqueeze.op_type = "Unsqueeze";
    unsqueeze.inputs = {rnn->outputs[1]};
    if (opset >= 13) {
      unsqueeze.inputs.push_back(rewriter.FreshName(value + "_time_axis"));
      graph.initializers[unsqueeze.inputs[1]] = Tensor::FromVector<int64_t>({seq_axis}, {1});
    } else {
      unsqueeze.attributes["axes"] = Attribute::Ints({seq_axis});
    }
    unsqueeze.outputs = {rewriter.FreshName(value + "_last_step")};
    (chain.empty() ? gather : *chain.back()).inputs[0] = unsqueeze.outputs[0];
    auto one_step = [&](const std::string& from, const std::string& to, int64_t time_axis) {
      auto it = graph.value_info.find(from);
      if (it == graph.value_info.end()) return;
      ValueInfo info = it->second;  // the chain's values now hold one time step
      graph.value_info.erase(it);
      info.name = to;
      if (info.has_shape && time_axis < static_cast<int64_t>(info.shape.size())) info.shape[time_axis] = Dim{1, ""};
      graph.value_info[to] = std::move(info);
    };
    one_step(rnn->outputs[0], unsqueeze.outputs[0], seq_axis);
    for (size_t j = 0; j < chain.size(); ++j)
      one_step(chain[chain.size() - 1 - j]->outputs[0], chain[chain.size() - 1 - j]->outputs[0], time_axes[j]);
    rnn->outputs[0].clear();  // Y: written by nothing, read by nothing
    const std::string zero = rewriter.FreshName(gather.inputs[1] + "_first");
    graph.initializers[zero] = index->dtype() == DataType::kInt64
                                   ? Tensor::FromVector<int64_t>({0}, index->shape())
                                   : Tensor::FromVector<int32_t>({0}, index->shape());
    rewriter.DropRead(gather.inputs[1]);
    gather.inputs[1] = zero;
    unsqueezes.emplace_back(static_cast<size_t>(rnn - graph.nodes.data()), std::move(unsqueeze));
    ++count;
  }
  if (unsqueezes.empty()) return 0;
  std::vector<Node> nodes;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    nodes.push_back(std::move(graph.nodes[k]));
    for (auto& [after, node] : unsqueezes)
      if (after == k) nodes.push_back(std::move(node));
  }
  graph.nodes = std::move(nodes);
  return count;
}

}  // namespace edgetrain
