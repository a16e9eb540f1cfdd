// The arena planner (runtime/arena_plan.hpp) as a unit: offsets on hand-checked orders, the
// invariant on random ones, views and in-place steps, and its typed errors.
#include "runtime/arena_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/tensor.hpp"
#include "runtime/memory_budget.hpp"
#include "test_util.hpp"

namespace edgetrain {
namespace {

using Offsets = std::vector<int64_t>;

// Bytes of the values alive at once, at the busiest step.
uint64_t MostAliveAtOnce(const std::vector<ArenaValue>& values) {
  int64_t steps = 0;
  for (const ArenaValue& v : values) steps = std::max(steps, v.last_use + 1);
  uint64_t most = 0;
  for (int64_t k = 0; k < steps; ++k) {
    uint64_t alive = 0;
    for (const ArenaValue& v : values)
      if (v.define >= 0 && v.define <= k && k <= v.last_use) alive += v.bytes;
    most = std::max(most, alive);
  }
  return most;
}

TEST(ArenaPlan, PlacesLargestFirstAtTheLowestFreeOffset) {
  // A [0,1] 256 B, B [1,2] 128 B, C [2,3] 192 B: C reuses A's bytes, B sits above both.
  const std::vector<ArenaValue> values = {{256, 0, 1}, {128, 1, 2}, {192, 2, 3}};
  const ArenaPlan plan = PlanArena(values);
  EXPECT_EQ(plan.offsets, (Offsets{0, 256, 0}));
  EXPECT_EQ(plan.bytes, 384u);  // A and B at step 1: the most alive at once
  EXPECT_EQ(plan.bytes, MostAliveAtOnce(values));
}

TEST(ArenaPlan, SizesRoundUpToTheTensorAlignment) {
  // 100 B takes 128 (two alignments), 200 B takes 256: offsets and the arena are multiples of 64.
  static_assert(kTensorAlignment == 64);
  const std::vector<ArenaValue> values = {{100, 0, 1}, {64, 1, 2}, {200, 2, 3}};
  const ArenaPlan plan = PlanArena(values);
  EXPECT_EQ(plan.offsets, (Offsets{0, 256, 0}));
  EXPECT_EQ(plan.bytes, 320u);
}

TEST(ArenaPlan, ValuesNotMadeOrEmptyGetNoPlace) {
  const std::vector<ArenaValue> values = {{512, -1, -1}, {0, 0, 3}, {64, 1, 1}};
  const ArenaPlan plan = PlanArena(values);
  EXPECT_EQ(plan.offsets, (Offsets{-1, -1, 0}));
  EXPECT_EQ(plan.bytes, 64u);
  EXPECT_EQ(PlanArena({}).bytes, 0u);
}

TEST(ArenaPlan, RandomOrdersNeverOverlapLiveValues) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<ArenaValue> values(1 + rng() % 40);
    for (ArenaValue& v : values) {
      v.define = static_cast<int64_t>(rng() % 30);
      v.last_use = v.define + static_cast<int64_t>(rng() % 8);
      v.bytes = rng() % 5 == 0 ? 0 : 1 + rng() % 5000;
    }
    const ArenaPlan plan = PlanArena(values);
    EXPECT_NO_THROW(CheckArenaPlan(values, plan));
    uint64_t end = 0;
    for (size_t a = 0; a < values.size(); ++a) {
      if (values[a].bytes == 0) continue;
      ASSERT_GE(plan.offsets[a], 0);
      EXPECT_EQ(plan.offsets[a] % static_cast<int64_t>(kTensorAlignment), 0);
      const uint64_t a_begin = static_cast<uint64_t>(plan.offsets[a]);
      end = std::max(end, a_begin + values[a].bytes);
      for (size_t b = a + 1; b < values.size(); ++b) {
        if (values[b].bytes == 0) continue;
        const bool together = values[a].define <= values[b].last_use && values[b].define <= values[a].last_use;
        const uint64_t b_begin = static_cast<uint64_t>(plan.offsets[b]);
        if (!together) continue;
        EXPECT_TRUE(a_begin + values[a].bytes <= b_begin || b_begin + values[b].bytes <= a_begin)
            << "trial " << trial << ": values " << a << " and " << b;
      }
    }
    EXPECT_LE(end, plan.bytes);
    EXPECT_GE(plan.bytes, MostAliveAtOnce(values));
    EXPECT_LT(plan.bytes, end + kTensorAlignment);
  }
}

// v0 = f(); v1 = g(v0) (in place: v0 dies where v1 is made); v2 = h(v1).
TEST(ArenaPlan, AStepsInputAndOutputNeverShareButTheNextStepReusesTheInput) {
  const std::vector<PlanStep> steps = {{{}, {0}}, {{0}, {1}}, {{1}, {2}}};
  const Liveness live = ComputeLiveness(steps, {false, false, false});
  EXPECT_EQ(live.last_use, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(live.view_root, (std::vector<size_t>{0, 1, 2}));
  const std::vector<ArenaValue> values = {
      {128, 0, live.last_use[0]}, {192, 1, live.last_use[1]}, {64, 2, live.last_use[2]}};
  const ArenaPlan plan = PlanArena(values);
  EXPECT_EQ(plan.offsets, (Offsets{192, 0, 192}));  // v2 takes v0's bytes, never v1's
  EXPECT_EQ(plan.bytes, 320u);
}

// v0 = f(); v1 = view of v0 (Reshape); v2 = g(v1); v3 = h(v2). The view keeps v0's bytes alive.
TEST(ArenaPlan, AViewKeepsItsRootAliveUntilTheViewsLastUse) {
  std::vector<PlanStep> steps = {{{}, {0}}, {{0}, {1}, true}, {{1}, {2}}, {{2}, {3}}};
  const Liveness live = ComputeLiveness(steps, {false, false, false, false});
  EXPECT_EQ(live.view_root, (std::vector<size_t>{0, 0, 2, 3}));
  EXPECT_EQ(live.last_use, (std::vector<int64_t>{2, 2, 3, 3}));
  // The view gets no place of its own (the executor hands out its root's memory).
  const std::vector<ArenaValue> values = {{256, 0, live.last_use[0]}, {}, {128, 2, live.last_use[2]},
                                          {64, 3, live.last_use[3]}};
  const ArenaPlan plan = PlanArena(values);
  EXPECT_EQ(plan.offsets, (Offsets{0, -1, 256, 0}));
  EXPECT_EQ(plan.bytes, 384u);

  // Without the view v2 could take v0's bytes.
  steps[1].output_views_input = false;
  const Liveness plain = ComputeLiveness(steps, {false, false, false, false});
  EXPECT_EQ(plain.last_use[0], 1);
  EXPECT_EQ(PlanArena({{256, 0, plain.last_use[0]}, {}, {128, 2, 3}, {64, 3, 3}}).offsets, (Offsets{0, -1, 0, 128}));
}

TEST(ArenaPlan, APinnedOutputIsNeverAView) {
  const std::vector<PlanStep> steps = {{{}, {0}}, {{0}, {1}, true}, {{1}, {}}};
  const Liveness live = ComputeLiveness(steps, {false, true});
  EXPECT_EQ(live.view_root, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(live.last_use, (std::vector<int64_t>{1, 2}));
}

TEST(ArenaPlan, AValueReadBeforeAnyStepWritesItIsATypedError) {
  const std::vector<PlanStep> steps = {{{1}, {0}}, {{0}, {1}}};
  EXPECT_ERROR(ComputeLiveness(steps, {false, false}), ErrorCode::kInvalidArgument,
               "memory plan: step 0 reads value 1 before any step writes it");
  // A pinned value (a graph input, an initializer) is there from the start.
  EXPECT_EQ(ComputeLiveness(steps, {false, true}).last_use, (std::vector<int64_t>{1, 1}));
}

TEST(ArenaPlan, AValueIdPastTheValuesIsATypedError) {
  EXPECT_ERROR(ComputeLiveness({{{}, {0}}, {{0}, {7}}}, {false, false}), ErrorCode::kInvalidArgument,
               "memory plan: step 1 names value 7 of 2");
  EXPECT_NO_THROW(ComputeLiveness({{{kNoValue}, {0, kNoValue}}}, {false}));  // absent inputs and outputs
}

TEST(ArenaPlan, ALifetimeThatEndsBeforeItBeginsIsATypedError) {
  EXPECT_ERROR(PlanArena({{64, 0, 2}, {64, 3, 1}}), ErrorCode::kInvalidArgument,
               "memory plan: value 1 is last used at step 1, before step 3 defines it");
}

TEST(ArenaPlan, TheCheckRefusesOverlappingOrOutOfArenaPlans) {
  const std::vector<ArenaValue> values = {{128, 0, 1}, {64, 1, 2}};
  EXPECT_ERROR(CheckArenaPlan(values, {{0, 64}, 192}), ErrorCode::kInternal,
               "memory plan overlaps values 0 and 1, which are alive together");
  EXPECT_ERROR(CheckArenaPlan(values, {{0, 128}, 128}), ErrorCode::kInternal,
               "memory plan places value 1 outside the arena");
  EXPECT_ERROR(CheckArenaPlan(values, {{0}, 128}), ErrorCode::kInternal, "memory plan: 1 offsets for 2 values");
  EXPECT_NO_THROW(CheckArenaPlan(values, {{0, 128}, 192}));
  // Values alive at different steps may share bytes.
  EXPECT_NO_THROW(CheckArenaPlan({{128, 0, 0}, {64, 1, 2}}, {{0, 0}, 128}));
}

// The budget planner's view of the forward pass: it ends after the last step the loss depends on.
TEST(MemoryBudgetPlan, TheForwardPassEndsAtTheLossesLastProducer) {
  // v0 -> s0 -> v1 -> s1 -> v2 (loss); s2 reads v1 and v2 (backward), s3 reads v0 only.
  const std::vector<BudgetStep> steps = {{{0}, {1}}, {{1}, {2}}, {{1, 2}, {3}}, {{0}, {4}}};
  EXPECT_EQ(ForwardEnd(steps, 5, 2), 2u);
  EXPECT_EQ(ForwardEnd(steps, 5, 1), 1u);
  EXPECT_EQ(ForwardEnd(steps, 5, 0), 0u);  // a graph input: no step makes it
  EXPECT_EQ(ForwardEnd(steps, 5, kNoValue), 0u);
}

// x -> Relu (s0) -> a -> Relu (s1) -> loss; backward s2 reads a and loss, s3 reads a. `a` is recomputed
// for free: its input x stays alive anyway (a graph input).
TEST(MemoryBudgetPlan, FreeRecomputationTakesValuesWhoseInputsStayAlive) {
  BudgetGraph g;
  g.steps = {{{0}, {1}, false, true}, {{1}, {2}, false, true}, {{1, 2}, {3}}, {{1, 3}, {4}}};
  g.forward_end = ForwardEnd(g.steps, 5, 2);
  g.pinned = {true, false, true, false, false};
  g.overwritable = std::vector<bool>(5, false);
  g.is_initializer = std::vector<bool>(5, false);
  const std::vector<Recompute> list = BudgetPlanner(g).FreeRecomputation();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].value, 1u);
  EXPECT_EQ(list[0].producer, 0u);
  EXPECT_EQ(list[0].insert, 2u);  // before its first backward reader
  // Not recomputable (a random or in-place kernel), or fed for overwriting: kept.
  g.steps[0].recomputable = false;
  EXPECT_TRUE(BudgetPlanner(g).FreeRecomputation().empty());
  g.steps[0].recomputable = true;
  g.overwritable[0] = true;
  EXPECT_TRUE(BudgetPlanner(g).FreeRecomputation().empty());
}

// x (pinned) -> s0 -> a; s1 in place a -> b; s2 in place b -> c, but s3 reads b again; s3 reads b, c.
TEST(ArenaPlan, InPlaceOutputTakesItsInputsMemoryOnlyWhereTheInputDies) {
  const std::vector<PlanStep> steps = {
      {{0}, {1}}, {{1}, {2}, false, true}, {{2}, {3}, false, true}, {{2, 3}, {4}}};
  const Liveness live = ComputeLiveness(steps, {true, false, false, false, false});
  EXPECT_EQ(live.view_root[2], 1u);  // a dies at s1: b takes its memory
  EXPECT_EQ(live.view_root[3], 3u);  // b is read after s2: c gets memory of its own
  EXPECT_EQ(live.last_use[1], 3);    // a's memory lives as long as b
  const Liveness over_pinned = ComputeLiveness({{{0}, {1}, false, true}}, {true, false});
  EXPECT_EQ(over_pinned.view_root[1], 1u);  // never over a pinned input
}

// x -> s0 -> a -> s1 -> b -> s2 -> loss; backward s3 reads a, s4 reads b, s5 reads a. Two copies of `a`,
// one per reader: each reader reads its own, the recomputation reads x.
TEST(MemoryBudgetPlan, ACopyPerWindowIsReadOnlyInsideItsWindow) {
  const std::vector<BudgetStep> steps = {{{0}, {1}, false, true}, {{1}, {2}, false, true}, {{2}, {3}},
                                         {{1, 3}, {4}},           {{2, 4}, {5}},           {{1, 5}, {6}}};
  const std::vector<Recompute> list = {{1, 0, 3, 3}, {1, 0, 5, 5}};
  const std::vector<ExpandedStep> order = ExpandRecomputation(steps, 3, 7, list);
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(order[3].entry, 0u);
  EXPECT_EQ(order[3].inputs, (std::vector<size_t>{0}));
  EXPECT_EQ(order[3].outputs, (std::vector<size_t>{7}));
  EXPECT_EQ(order[4].inputs, (std::vector<size_t>{7, 3}));
  EXPECT_EQ(order[5].inputs, (std::vector<size_t>{2, 4}));  // b is not recomputed
  EXPECT_EQ(order[6].entry, 1u);
  EXPECT_EQ(order[6].outputs, (std::vector<size_t>{8}));
  EXPECT_EQ(order[7].inputs, (std::vector<size_t>{8, 5}));
  EXPECT_EQ(order[1].inputs, (std::vector<size_t>{1}));  // the forward pass reads the original
}

}  // namespace
}  // namespace edgetrain
