#include "runtime/memory_budget.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "core/error.hpp"

namespace edgetrain {

bool IsRecomputableOp(const std::string& op_type) {
  static const std::unordered_set<std::string> kRecomputable = {
      "Conv", "BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
      "Add", "Sub", "Mul", "Div", "Gelu", "Softplus", "Elu", "Erf", "MaxPool", "AveragePool", "GlobalAveragePool",
      "MatMul", "Gemm", "LayerNormalization", "Softmax", "Transpose", "Concat"};
  return kRecomputable.count(op_type) != 0;
}

size_t ForwardEnd(const std::vector<BudgetStep>& steps, size_t num_values, size_t loss) {
  std::vector<size_t> producer(num_values, kNoValue);
  for (size_t p = 0; p < steps.size(); ++p)
    for (size_t o : steps[p].outputs)
      if (o != kNoValue) producer[o] = p;
  std::vector<bool> seen(num_values, false);
  std::vector<size_t> stack{loss};
  size_t end = 0;
  while (!stack.empty()) {
    const size_t v = stack.back();
    stack.pop_back();
    if (v == kNoValue || seen[v] || producer[v] == kNoValue) continue;
    seen[v] = true;
    end = std::max(end, producer[v] + 1);
    for (size_t u : steps[producer[v]].inputs) stack.push_back(u);
  }
  return end;
}

BudgetPlanner::BudgetPlanner(BudgetGraph graph, std::vector<uint64_t> measured)
    : graph_(std::move(graph)), measured_(std::move(measured)) {}

// Forward values that a recomputable step makes; neither views nor viewed, pinned or (unless
// `any_size`) of unknown size.
std::vector<BudgetPlanner::Candidate> BudgetPlanner::Candidates(bool any_size) const {
  const size_t n = graph_.values();
  std::vector<size_t> first_late(n, kNoValue);
  for (size_t p = graph_.forward_end; p < graph_.steps.size(); ++p)
    for (size_t u : graph_.steps[p].inputs)
      if (u != kNoValue && first_late[u] == kNoValue) first_late[u] = p;
  std::vector<bool> aliased(n, false);
  for (const BudgetStep& b : graph_.steps)
    if (b.output_views_input && !b.inputs.empty() && !b.outputs.empty() && b.inputs[0] != kNoValue &&
        b.outputs[0] != kNoValue)
      aliased[b.inputs[0]] = aliased[b.outputs[0]] = true;
  std::vector<Candidate> found;
  for (size_t p = 0; p < graph_.forward_end; ++p) {
    const BudgetStep& b = graph_.steps[p];
    if (b.outputs.empty() || b.outputs[0] == kNoValue || !b.recomputable) continue;
    const size_t v = b.outputs[0];
    // Values that the backward pass does not read (first_late_use kNoValue) are recomputed only on the
    // way to one that it reads.
    if (graph_.pinned[v] || aliased[v] || (!any_size && measured_[v] == 0)) continue;
    bool overwritable_input = false;
    for (size_t u : b.inputs) overwritable_input = overwritable_input || (u != kNoValue && graph_.overwritable[u]);
    if (!overwritable_input) found.push_back({v, p, first_late[v]});
  }
  return found;
}

// Where each chosen value is recomputed: before its first backward reader, and before the
// recomputation of any chosen value that reads it.
std::vector<Recompute> BudgetPlanner::Insertions(const std::vector<Candidate>& chosen) const {
  std::vector<size_t> at(graph_.values(), kNoValue);
  std::vector<bool> in(graph_.values(), false);
  std::vector<const Candidate*> by_producer;
  for (const Candidate& c : chosen) {
    at[c.value] = c.first_late_use;
    in[c.value] = true;
    by_producer.push_back(&c);
  }
  std::sort(by_producer.begin(), by_producer.end(), [](auto* a, auto* b) { return a->producer > b->producer; });
  for (const Candidate* c : by_producer)
    for (size_t u : graph_.steps[c->producer].inputs)
      if (u != kNoValue && in[u]) at[u] = std::min(at[u], at[c->value]);
  std::vector<Recompute> list;
  for (const Candidate& c : chosen) list.push_back({c.value, c.producer, at[c.value]});
  std::sort(list.begin(), list.end(), [](const Recompute& a, const Recompute& b) {
    return std::tie(a.insert, a.producer) < std::tie(b.insert, b.producer);
  });
  return list;
}

BudgetPlanner::Profile BudgetPlanner::Simulate(const std::vector<Recompute>& list) const {
  const size_t base = graph_.values(), slots = base + list.size();
  std::vector<size_t> clone(base, kNoValue);
  std::vector<uint64_t> bytes(measured_.begin(), measured_.end());
  for (size_t i = 0; i < list.size(); ++i) {
    clone[list[i].value] = base + i;
    bytes.push_back(measured_[list[i].value]);
  }
  Profile profile;
  profile.define.assign(slots, -1);
  profile.last.assign(slots, -1);
  std::vector<size_t> root(slots);
  for (size_t s = 0; s < slots; ++s) root[s] = s;
  int64_t k = 0;
  auto visit = [&](const BudgetStep& b, bool late, size_t only_output) {
    for (size_t s : b.inputs) {
      if (s != kNoValue && late && clone[s] != kNoValue) s = clone[s];
      if (s != kNoValue) profile.last[s] = k;
    }
    std::vector<size_t> outputs = b.outputs;
    if (only_output != kNoValue) outputs.assign({only_output});
    for (size_t s : outputs)
      if (s != kNoValue) {
        if (profile.define[s] < 0) profile.define[s] = k;
        profile.last[s] = std::max(profile.last[s], k);
      }
    if (b.output_views_input && !b.inputs.empty() && b.inputs[0] != kNoValue && outputs[0] != kNoValue &&
        (outputs[0] >= base || !graph_.pinned[outputs[0]]))
      root[outputs[0]] = root[late && clone[b.inputs[0]] != kNoValue ? clone[b.inputs[0]] : b.inputs[0]];
    ++k;
  };
  size_t next = 0;
  for (size_t p = 0; p < graph_.steps.size(); ++p) {
    for (; next < list.size() && list[next].insert == p; ++next)
      visit(graph_.steps[list[next].producer], true, base + next);
    visit(graph_.steps[p], p >= graph_.forward_end, kNoValue);
  }
  std::vector<int64_t> delta(static_cast<size_t>(k) + 2, 0);
  for (size_t s = 0; s < slots; ++s) profile.last[root[s]] = std::max(profile.last[root[s]], profile.last[s]);
  for (size_t s = 0; s < slots; ++s)
    if (bytes[s] > 0 && profile.define[s] >= 0 && root[s] == s) {
      delta[static_cast<size_t>(profile.define[s])] += static_cast<int64_t>(bytes[s]);
      delta[static_cast<size_t>(profile.last[s]) + 1] -= static_cast<int64_t>(bytes[s]);
    }
  int64_t live = 0;
  for (int64_t i = 0; i < k; ++i) {
    live += delta[static_cast<size_t>(i)];
    if (static_cast<uint64_t>(live) > profile.peak) {
      profile.peak = static_cast<uint64_t>(live);
      profile.at = i;
    }
  }
  return profile;
}

std::vector<Recompute> BudgetPlanner::FreeRecomputation() const {
  const std::vector<Candidate> all = Candidates(true);
  std::vector<Candidate> picked;
  std::vector<bool> chosen(graph_.values(), false);
  std::vector<int64_t> last(graph_.values(), -1);
  for (size_t p = 0; p < graph_.steps.size(); ++p)
    for (size_t u : graph_.steps[p].inputs)
      if (u != kNoValue) last[u] = static_cast<int64_t>(p);
  auto stays_alive = [&](size_t u, const Candidate& c) {
    return graph_.is_initializer[u] || graph_.pinned[u] || last[u] >= static_cast<int64_t>(c.first_late_use);
  };
  for (const Candidate& c : all) {
    if (c.first_late_use == kNoValue) continue;
    bool free = true;
    for (size_t u : graph_.steps[c.producer].inputs)
      if (u != kNoValue && (chosen[u] || !stays_alive(u, c))) free = false;
    if (!free) continue;
    chosen[c.value] = true;
    picked.push_back(c);
  }
  return Insertions(picked);
}

// c with the candidates its recomputation would otherwise keep alive.
std::vector<const BudgetPlanner::Candidate*> BudgetPlanner::Segment(const Candidate& c,
                                                                    const std::vector<Candidate>& all,
                                                                    const std::vector<bool>& chosen,
                                                                    const std::vector<size_t>& index,
                                                                    const std::vector<size_t>& last) const {
  std::vector<const Candidate*> segment{&c};
  std::vector<bool> in_segment(graph_.values(), false);
  in_segment[c.value] = true;
  for (size_t i = 0; i < segment.size(); ++i)
    for (size_t u : graph_.steps[segment[i]->producer].inputs)
      if (u != kNoValue && index[u] != kNoValue && !chosen[u] && !in_segment[u] && last[u] < graph_.forward_end) {
        in_segment[u] = true;
        segment.push_back(&all[index[u]]);
      }
  return segment;
}

// The greedy order: each pick, among the largest values alive at the current peak, lowers the peak
// most; `peaks` gets the simulated peak after each pick (UINT64_MAX inside a segment: not a choice).
std::vector<BudgetPlanner::Candidate> BudgetPlanner::GreedyOrder(std::vector<uint64_t>& peaks) const {
  constexpr size_t kTriedPerPick = 16;
  const std::vector<Candidate> all = Candidates(false);
  std::vector<Candidate> picked;
  std::vector<bool> chosen(graph_.values(), false);
  std::vector<size_t> index(graph_.values(), kNoValue), last(graph_.values(), 0);
  for (size_t i = 0; i < all.size(); ++i) index[all[i].value] = i;
  for (size_t p = 0; p < graph_.steps.size(); ++p)
    for (size_t u : graph_.steps[p].inputs)
      if (u != kNoValue) last[u] = p;
  Profile now = Simulate({});
  while (true) {
    std::vector<const Candidate*> alive;
    for (const Candidate& c : all)
      if (!chosen[c.value] && c.first_late_use != kNoValue && now.define[c.value] <= now.at &&
          now.at <= now.last[c.value])
        alive.push_back(&c);
    std::sort(alive.begin(), alive.end(), [&](auto* a, auto* b) { return measured_[a->value] > measured_[b->value]; });
    if (alive.size() > kTriedPerPick) alive.resize(kTriedPerPick);
    std::vector<const Candidate*> best;
    Profile best_profile;
    for (const Candidate* c : alive) {
      std::vector<const Candidate*> segment = Segment(*c, all, chosen, index, last);
      for (const Candidate* part : segment) picked.push_back(*part);
      Profile p = Simulate(Insertions(picked));
      picked.resize(picked.size() - segment.size());
      if (best.empty() || p.peak < best_profile.peak) {
        best = std::move(segment);
        best_profile = std::move(p);
      }
    }
    if (best.empty() || best_profile.peak >= now.peak) return picked;
    for (const Candidate* part : best) {
      picked.push_back(*part);
      chosen[part->value] = true;
    }
    now = std::move(best_profile);
    peaks.resize(picked.size(), UINT64_MAX);
    peaks.back() = now.peak;
  }
}

uint64_t BudgetPlanner::PlanWithin(uint64_t budget, FunctionRef<uint64_t(const std::vector<Recompute>&)> place,
                                   const std::string& model) const {
  std::vector<uint64_t> peaks;
  const std::vector<Candidate> order = GreedyOrder(peaks);
  // Prefixes that end a segment, from the first whose simulated peak fits the budget.
  std::vector<size_t> choices;
  if (order.empty() || Simulate({}).peak <= budget) choices.push_back(0);
  for (size_t i = 0; i < peaks.size(); ++i)
    if (peaks[i] != UINT64_MAX && (peaks[i] <= budget || !choices.empty())) choices.push_back(i + 1);
  if (choices.empty()) choices.push_back(order.size());
  constexpr size_t kPlansTried = 24;
  if (choices.size() > kPlansTried) {  // the rest: straight to the most recomputation
    choices.resize(kPlansTried - 1);
    choices.push_back(order.size());
  }
  uint64_t smallest = UINT64_MAX;
  for (size_t picks : choices) {
    const uint64_t peak =
        place(Insertions(std::vector<Candidate>(order.begin(), order.begin() + static_cast<ptrdiff_t>(picks))));
    if (peak <= budget) return peak;
    smallest = std::min(smallest, peak);
  }
  Fail(ErrorCode::kResourceExhausted, "model '", model, "': the memory budget of ", budget,
       " bytes cannot be met at these input shapes: recomputing forward values in the backward pass, the "
       "smallest arena of intermediate tensors is ", smallest, " bytes; a budget of at least ", smallest,
       " bytes fits");
}

}  // namespace edgetrain
