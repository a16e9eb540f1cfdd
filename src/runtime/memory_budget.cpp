#include "runtime/memory_budget.hpp"

#include <algorithm>
#include <functional>
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

bool TakesInputMemory(const std::string& domain, const std::string& op_type) {
  if (domain.empty()) return op_type == "Relu" || op_type == "Clip";
  return domain == "ai.edgetrain" &&
         (op_type == "ReluGrad" || op_type == "ClipGrad" || op_type == "BatchNormalizationGrad" ||
          op_type == "BatchNormalizationActivationGrad");
}

std::vector<ExpandedStep> ExpandRecomputation(const std::vector<BudgetStep>& steps, size_t forward_end, size_t values,
                                              const std::vector<Recompute>& list) {
  std::vector<size_t> active(values, kNoValue);
  std::vector<std::vector<size_t>> ending(steps.size());
  for (size_t i = 0; i < list.size(); ++i) ending[list[i].last_reader].push_back(i);
  auto mapped = [&](std::vector<size_t> ids) {
    for (size_t& v : ids)
      if (v != kNoValue && v < values && active[v] != kNoValue) v = active[v];
    return ids;
  };
  std::vector<ExpandedStep> order;
  size_t next = 0;
  for (size_t p = 0; p < steps.size(); ++p) {
    for (; next < list.size() && list[next].insert == p; ++next) {
      const BudgetStep& producer = steps[list[next].producer];
      ExpandedStep again{list[next].producer, next, mapped(producer.inputs), {}};
      again.outputs.assign(producer.outputs.size(), kNoValue);
      again.outputs[0] = values + next;
      order.push_back(std::move(again));
      active[list[next].value] = values + next;
    }
    order.push_back({p, kNoValue, p >= forward_end ? mapped(steps[p].inputs) : steps[p].inputs, steps[p].outputs});
    for (size_t i : ending[p])
      if (active[list[i].value] == values + i) active[list[i].value] = kNoValue;
  }
  return order;
}

BudgetPlanner::BudgetPlanner(BudgetGraph graph, std::vector<uint64_t> measured)
    : graph_(std::move(graph)), measured_(std::move(measured)) {
  const size_t n = graph_.values();
  producer_.assign(n, kNoValue);
  last_read_.assign(n, -1);
  late_readers_.assign(n, {});
  aliased_.assign(n, false);
  for (size_t p = 0; p < graph_.steps.size(); ++p) {
    const BudgetStep& b = graph_.steps[p];
    for (size_t u : b.inputs)
      if (u != kNoValue) {
        last_read_[u] = static_cast<int64_t>(p);
        if (p >= graph_.forward_end && (late_readers_[u].empty() || late_readers_[u].back() != p))
          late_readers_[u].push_back(p);
      }
    if (p < graph_.forward_end && !b.outputs.empty() && b.outputs[0] != kNoValue) producer_[b.outputs[0]] = p;
    if (b.output_views_input && !b.inputs.empty() && !b.outputs.empty() && b.inputs[0] != kNoValue &&
        b.outputs[0] != kNoValue)
      aliased_[b.inputs[0]] = aliased_[b.outputs[0]] = true;
  }
}

// Made (as output 0) by a recomputable forward step from inputs no caller may overwrite; neither a view
// nor viewed, nor pinned.
bool BudgetPlanner::Recomputable(size_t v) const {
  if (v == kNoValue || producer_[v] == kNoValue || graph_.pinned[v] || aliased_[v]) return false;
  const BudgetStep& b = graph_.steps[producer_[v]];
  if (!b.recomputable) return false;
  for (size_t u : b.inputs)
    if (u != kNoValue && graph_.overwritable[u]) return false;
  return true;
}

// Forward values the backward pass reads that could be recomputed instead of kept (of measured size
// unless `any_size`).
std::vector<BudgetPlanner::Candidate> BudgetPlanner::Candidates(bool any_size) const {
  std::vector<Candidate> found;
  for (size_t p = 0; p < graph_.forward_end; ++p) {
    const BudgetStep& b = graph_.steps[p];
    if (b.outputs.empty() || b.outputs[0] == kNoValue) continue;
    const size_t v = b.outputs[0];
    if (!Recomputable(v) || late_readers_[v].empty() || (!any_size && measured_[v] == 0)) continue;
    found.push_back({v, p, late_readers_[v].front()});
  }
  return found;
}

// The copies the chosen values need: one per backward reader (each_reader) or one for all, each made
// just before its window from the values its producer reads; an input that is chosen too, or that the
// backward pass does not keep, is itself recomputed there (recursively). Empty when some value on the way
// cannot be recomputed.
std::vector<Recompute> BudgetPlanner::Insertions(const std::vector<Candidate>& chosen) const {
  std::vector<bool> dropped(graph_.values(), false);
  for (const Candidate& c : chosen) dropped[c.value] = true;
  std::vector<Recompute> list;
  std::vector<std::vector<size_t>> windows(graph_.values());  // per value: its entries in `list`
  auto needs_copy = [&](size_t u) {
    return u != kNoValue && !graph_.pinned[u] && !graph_.is_initializer[u] &&
           (dropped[u] || last_read_[u] < static_cast<int64_t>(graph_.forward_end));
  };
  bool feasible = true;
  std::function<void(size_t, size_t, size_t, int)> copy = [&](size_t v, size_t insert, size_t last, int depth) {
    for (size_t i : windows[v]) {
      Recompute& w = list[i];
      if (w.insert <= insert && last <= w.last_reader) return;
      if (w.insert == insert) {
        w.last_reader = std::max(w.last_reader, last);
        return;
      }
    }
    if (!Recomputable(v) || depth > 256) {
      feasible = false;
      return;
    }
    for (size_t u : graph_.steps[producer_[v]].inputs)
      if (needs_copy(u)) copy(u, insert, insert, depth + 1);
    windows[v].push_back(list.size());
    list.push_back({v, producer_[v], insert, last});
  };
  for (const Candidate& c : chosen) {
    const std::vector<size_t>& readers = late_readers_[c.value];
    if (c.each_reader)
      for (size_t r : readers) copy(c.value, r, r, 0);
    else
      copy(c.value, readers.front(), readers.back(), 0);
  }
  if (!feasible) return {};
  std::stable_sort(list.begin(), list.end(), [](const Recompute& a, const Recompute& b) { return a.insert < b.insert; });
  return list;
}

BudgetPlanner::Profile BudgetPlanner::Simulate(const std::vector<Recompute>& list) const {
  const size_t base = graph_.values(), slots = base + list.size();
  std::vector<uint64_t> bytes(measured_.begin(), measured_.end());
  bytes.resize(base, 0);
  for (const Recompute& r : list) bytes.push_back(measured_.empty() ? 0 : measured_[r.value]);
  std::vector<PlanStep> order;
  for (const ExpandedStep& e : ExpandRecomputation(graph_.steps, graph_.forward_end, base, list)) {
    const BudgetStep& b = graph_.steps[e.original];
    order.push_back({e.inputs, e.outputs, b.output_views_input, b.output_takes_input});
  }
  std::vector<bool> pinned(graph_.pinned);
  pinned.resize(slots, false);
  const Liveness live = ComputeLiveness(order, pinned);
  Profile profile;
  profile.define.assign(slots, -1);
  profile.last = live.last_use;
  for (size_t k = 0; k < order.size(); ++k)
    for (size_t s : order[k].outputs)
      if (s != kNoValue && profile.define[s] < 0) profile.define[s] = static_cast<int64_t>(k);
  std::vector<int64_t> delta(order.size() + 2, 0);
  for (size_t s = 0; s < slots; ++s)
    if (bytes[s] > 0 && profile.define[s] >= 0 && !pinned[s] && live.view_root[s] == s) {
      delta[static_cast<size_t>(profile.define[s])] += static_cast<int64_t>(bytes[s]);
      delta[static_cast<size_t>(profile.last[s]) + 1] -= static_cast<int64_t>(bytes[s]);
    }
  int64_t now = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    now += delta[i];
    if (static_cast<uint64_t>(now) > profile.peak) {
      profile.peak = static_cast<uint64_t>(now);
      profile.at = static_cast<int64_t>(i);
    }
  }
  profile.copy_of.clear();
  for (const Recompute& r : list) profile.copy_of.push_back(r.value);
  return profile;
}

std::vector<Recompute> BudgetPlanner::FreeRecomputation() const {
  std::vector<Candidate> picked;
  auto stays_alive = [&](size_t u, const Candidate& c) {
    return graph_.is_initializer[u] || graph_.pinned[u] || last_read_[u] >= static_cast<int64_t>(c.first_late_use);
  };
  std::vector<bool> chosen(graph_.values(), false);
  for (const Candidate& c : Candidates(true)) {
    bool free = true;
    for (size_t u : graph_.steps[c.producer].inputs)
      if (u != kNoValue && (chosen[u] || !stays_alive(u, c))) free = false;
    if (!free) continue;
    chosen[c.value] = true;
    picked.push_back(c);
  }
  return Insertions(picked);
}

// The greedy order: each pick, among the largest values alive at the current peak (kept, or a single
// copy that could become one per reader), lowers the peak most; `peaks` gets the simulated peak after each.
std::vector<std::vector<BudgetPlanner::Candidate>> BudgetPlanner::GreedyPlans(std::vector<uint64_t>& peaks) const {
  constexpr size_t kTriedPerPick = 16;
  const std::vector<Candidate> all = Candidates(false);
  std::vector<size_t> index(graph_.values(), kNoValue);
  for (size_t i = 0; i < all.size(); ++i) index[all[i].value] = i;
  std::vector<Candidate> picked;
  std::vector<size_t> picked_at(graph_.values(), kNoValue);
  Profile now = Simulate({});
  std::vector<std::vector<Candidate>> plans{picked};
  peaks.assign(1, now.peak);
  const size_t base = graph_.values();
  while (true) {
    std::vector<size_t> alive;  // values
    std::vector<bool> seen(base, false);
    auto consider = [&](size_t v) {
      if (v == kNoValue || seen[v] || index[v] == kNoValue) return;
      if (picked_at[v] != kNoValue && picked[picked_at[v]].each_reader) return;
      seen[v] = true;
      alive.push_back(v);
    };
    for (size_t s = 0; s < now.define.size(); ++s)
      if (now.define[s] >= 0 && now.define[s] <= now.at && now.at <= now.last[s])
        consider(s < base ? s : now.copy_of[s - base]);
    std::sort(alive.begin(), alive.end(), [&](size_t a, size_t b) { return measured_[a] > measured_[b]; });
    if (alive.size() > kTriedPerPick) alive.resize(kTriedPerPick);
    Candidate best{};
    bool found = false;
    Profile best_profile;
    for (size_t v : alive)
      for (bool each : {false, true}) {
        if (picked_at[v] != kNoValue && !each) continue;
        std::vector<Candidate> trial = picked;
        Candidate c = all[index[v]];
        c.each_reader = each;
        if (picked_at[v] != kNoValue)
          trial[picked_at[v]] = c;
        else
          trial.push_back(c);
        std::vector<Recompute> l = Insertions(trial);
        if (l.empty()) continue;
        Profile p = Simulate(l);
        if (!found || p.peak < best_profile.peak) {
          found = true;
          best = c;
          best_profile = std::move(p);
        }
      }
    if (!found || best_profile.peak >= now.peak) return plans;
    if (picked_at[best.value] != kNoValue) {
      picked[picked_at[best.value]] = best;
    } else {
      picked_at[best.value] = picked.size();
      picked.push_back(best);
    }
    now = std::move(best_profile);
    plans.push_back(picked);
    peaks.push_back(now.peak);
  }
}

uint64_t BudgetPlanner::PlanWithin(uint64_t budget, FunctionRef<uint64_t(const std::vector<Recompute>&)> place,
                                   const std::string& model) const {
  std::vector<uint64_t> peaks;
  const std::vector<std::vector<Candidate>> plans = GreedyPlans(peaks);
  // The plans from the first whose simulated peak fits the budget (the last, the most recomputation, if none).
  std::vector<size_t> choices;
  for (size_t i = 0; i < plans.size(); ++i)
    if (peaks[i] <= budget || !choices.empty()) choices.push_back(i);
  if (choices.empty()) choices.push_back(plans.size() - 1);
  constexpr size_t kPlansTried = 24;
  if (choices.size() > kPlansTried) {  // the rest: straight to the most recomputation
    choices.resize(kPlansTried - 1);
    choices.push_back(plans.size() - 1);
  }
  uint64_t smallest = UINT64_MAX;
  for (size_t i : choices) {
    const uint64_t peak = place(Insertions(plans[i]));
    if (peak <= budget) return peak;
    smallest = std::min(smallest, peak);
  }
  Fail(ErrorCode::kResourceExhausted, "model '", model, "': the memory budget of ", budget,
       " bytes cannot be met at these input shapes: recomputing forward values in the backward pass, the "
       "smallest arena of intermediate tensors is ", smallest, " bytes; a budget of at least ", smallest,
       " bytes fits");
}

}  // namespace edgetrain
