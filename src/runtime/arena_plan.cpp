#include "runtime/arena_plan.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace edgetrain {

namespace {

uint64_t Aligned(uint64_t bytes) { return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

bool AliveTogether(const ArenaValue& a, const ArenaValue& b) {
  return a.define <= b.last_use && b.define <= a.last_use;
}

bool Placed(const ArenaValue& v) { return v.define >= 0 && v.bytes > 0; }

void CheckIds(const std::vector<size_t>& ids, size_t values, size_t step) {
  for (size_t v : ids)
    ET_CHECK(v == kNoValue || v < values, ErrorCode::kInvalidArgument, "memory plan: step ", step, " names value ", v,
             " of ", values);
}

}  // namespace

Liveness ComputeLiveness(const std::vector<PlanStep>& steps, const std::vector<bool>& pinned) {
  const size_t n = pinned.size();
  Liveness live;
  live.last_use.assign(n, -1);
  std::vector<bool> written(n, false);
  for (size_t k = 0; k < steps.size(); ++k) {
    CheckIds(steps[k].inputs, n, k);
    CheckIds(steps[k].outputs, n, k);
    for (size_t v : steps[k].inputs) {
      if (v == kNoValue) continue;
      ET_CHECK(pinned[v] || written[v], ErrorCode::kInvalidArgument, "memory plan: step ", k, " reads value ", v,
               " before any step writes it");
      live.last_use[v] = static_cast<int64_t>(k);
    }
    for (size_t v : steps[k].outputs) {
      if (v == kNoValue) continue;
      written[v] = true;
      live.last_use[v] = std::max<int64_t>(live.last_use[v], static_cast<int64_t>(k));
    }
  }
  // A view's memory is its root's: the root lives until its last view dies. An in-place output joins its
  // input's root only where the root's memory is read by no later step (nor is pinned).
  live.view_root.resize(n);
  for (size_t v = 0; v < n; ++v) live.view_root[v] = v;
  std::vector<int64_t> group_last = live.last_use;
  for (size_t k = 0; k < steps.size(); ++k) {
    const PlanStep& step = steps[k];
    if (!(step.output_views_input || step.output_takes_input) || step.inputs.empty() || step.outputs.empty()) continue;
    const size_t in = step.inputs[0], out = step.outputs[0];
    if (in == kNoValue || out == kNoValue || pinned[out]) continue;
    const size_t root = live.view_root[in];
    if (!step.output_views_input && (pinned[root] || group_last[root] != static_cast<int64_t>(k))) continue;
    live.view_root[out] = root;
    group_last[root] = std::max(group_last[root], group_last[out]);
  }
  for (size_t v = 0; v < n; ++v)
    if (live.view_root[v] == v) live.last_use[v] = group_last[v];
  return live;
}

ArenaPlan PlanArena(const std::vector<ArenaValue>& values) {
  std::vector<size_t> order;
  for (size_t v = 0; v < values.size(); ++v) {
    if (!Placed(values[v])) continue;
    ET_CHECK(values[v].last_use >= values[v].define, ErrorCode::kInvalidArgument, "memory plan: value ", v,
             " is last used at step ", values[v].last_use, ", before step ", values[v].define, " defines it");
    order.push_back(v);
  }
  // Largest first; among equal sizes by definition, which places same-sized lifetimes in as few slots as
  // are ever alive together.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return values[a].bytes != values[b].bytes ? values[a].bytes > values[b].bytes : values[a].define < values[b].define;
  });
  ArenaPlan plan;
  plan.offsets.assign(values.size(), -1);
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (size_t v : order) {
    const uint64_t size = Aligned(values[v].bytes);
    busy.clear();
    for (size_t p : placed)
      if (AliveTogether(values[p], values[v]))
        busy.emplace_back(plan.offsets[p], static_cast<uint64_t>(plan.offsets[p]) + values[p].bytes);
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, Aligned(end));
    }
    plan.offsets[v] = static_cast<int64_t>(offset);
    plan.bytes = std::max(plan.bytes, offset + size);
    placed.push_back(v);
  }
  return plan;
}

void CheckArenaPlan(const std::vector<ArenaValue>& values, const ArenaPlan& plan) {
  ET_CHECK(plan.offsets.size() == values.size(), ErrorCode::kInternal, "memory plan: ", plan.offsets.size(),
           " offsets for ", values.size(), " values");
  std::vector<size_t> placed;
  for (size_t v = 0; v < values.size(); ++v) {
    if (!Placed(values[v])) continue;
    ET_CHECK(plan.offsets[v] >= 0 && static_cast<uint64_t>(plan.offsets[v]) + values[v].bytes <= plan.bytes,
             ErrorCode::kInternal, "memory plan places value ", v, " outside the arena");
    placed.push_back(v);
  }
  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const size_t a = placed[i], b = placed[j];
      const uint64_t a_begin = static_cast<uint64_t>(plan.offsets[a]), b_begin = static_cast<uint64_t>(plan.offsets[b]);
      const bool apart = a_begin + values[a].bytes <= b_begin || b_begin + values[b].bytes <= a_begin;
      ET_CHECK(!AliveTogether(values[a], values[b]) || apart, ErrorCode::kInternal, "memory plan overlaps values ", a,
               " and ", b, ", which are alive together");
    }
}

}  // namespace edgetrain
