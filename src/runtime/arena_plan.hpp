// The arena planner: where each intermediate tensor of one execution order lives in one block of
// memory, so that values alive at the same time never share bytes. Pure functions of the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace edgetrain {

constexpr size_t kNoValue = static_cast<size_t>(-1);

// One step of the execution order: the values it reads and writes (kNoValue where absent).
struct PlanStep {
  std::vector<size_t> inputs, outputs;
  bool output_views_input = false;  // output 0 is a view of input 0's memory (Reshape, Squeeze, ...)
  // Element-wise in place: output 0 takes input 0's memory where no later step reads that memory.
  bool output_takes_input = false;
};

// When each value is alive, per value id.
struct Liveness {
  std::vector<int64_t> last_use;  // the last step that reads or writes it or a view of it; -1: none
  std::vector<size_t> view_root;  // the value whose memory it views (itself if none)
};

// `pinned` (one flag per value) marks values that live for the whole run (graph inputs and outputs,
// initializers, values subgraphs read): they are never views. Throws kInvalidArgument when a step
// names a value past pinned.size(), or reads an unpinned value that no earlier step writes.
Liveness ComputeLiveness(const std::vector<PlanStep>& steps, const std::vector<bool>& pinned);

// One value to place: its bytes and its lifetime [define, last_use] in steps, both ends included
// (a step's inputs and outputs never share bytes). define < 0 or 0 bytes: not placed.
struct ArenaValue {
  uint64_t bytes = 0;
  int64_t define = -1;
  int64_t last_use = -1;
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  // per value, a multiple of kTensorAlignment; -1 where not placed
  uint64_t bytes = 0;            // the arena's size: the end of the furthest placed value, aligned
};

// Greedy by size: each value, largest first, gets the lowest aligned offset that overlaps no placed
// value whose lifetime meets its own. Throws kInvalidArgument for a placed value whose last use
// precedes its definition.
ArenaPlan PlanArena(const std::vector<ArenaValue>& values);

// The plan's invariant: every placed value inside the arena, values alive together apart
// (kInternal otherwise).
void CheckArenaPlan(const std::vector<ArenaValue>& values, const ArenaPlan& plan);

}  // namespace edgetrain
