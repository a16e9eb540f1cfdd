// Gradient checkpointing under an arena budget (TrainingSessionOptions::memory_budget_bytes): which
// forward values to compute again in the backward pass instead of keeping them, and where.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/function_ref.hpp"
#include "runtime/arena_plan.hpp"

namespace edgetrain {

// One step of the original execution order as the budget planner sees it.
struct BudgetStep {
  std::vector<size_t> inputs, outputs;  // value ids, kNoValue where absent
  bool output_views_input = false;      // output 0 is a view of input 0's memory
  bool recomputable = false;            // running it again gives the same bits (see IsRecomputableOp)
  bool output_takes_input = false;      // element-wise in place where input 0 dies here (TakesInputMemory)
};

// A forward value computed again in the backward pass instead of kept: the copy is made just before the
// original step `insert`, and the backward steps from `insert` to `last_reader` (and the recomputations
// inserted among them) read it. A value may be recomputed more than once (one copy per window).
struct Recompute {
  size_t value;        // its id
  size_t producer;     // the original position of the step that makes it (as its output 0)
  size_t insert;       // the original position of the step that the recomputation runs before
  size_t last_reader;  // the last original step that reads this copy
};

// One step of the order that a recompute list makes: an original step (inputs mapped to the copies it
// reads) or the recomputation list[entry] (output 0 is that copy's id: values + entry, the rest absent).
struct ExpandedStep {
  size_t original;              // the original step, or for a recomputation the producer it runs again
  size_t entry = kNoValue;      // the index in the list of a recomputation
  std::vector<size_t> inputs, outputs;
};
// The order with `list`'s recomputations inserted (`values`: the original value count).
std::vector<ExpandedStep> ExpandRecomputation(const std::vector<BudgetStep>& steps, size_t forward_end, size_t values,
                                              const std::vector<Recompute>& list);

// The original steps and, per value id, what the plan must respect.
struct BudgetGraph {
  std::vector<BudgetStep> steps;
  size_t forward_end = 0;                                  // the steps before it are the forward pass
  std::vector<bool> pinned, overwritable, is_initializer;  // per value: kept all run, fed for overwrite, a constant
  size_t values() const { return pinned.size(); }
};

// A standard operator whose deterministic kernel may run twice (Conv, Relu, MatMul, ...).
bool IsRecomputableOp(const std::string& op_type);

// An element-wise kernel whose output 0 may share input 0's memory (it reads each element before writing it).
bool TakesInputMemory(const std::string& domain, const std::string& op_type);

// Where the forward pass ends: after the last step that value `loss` depends on (0 for kNoValue).
size_t ForwardEnd(const std::vector<BudgetStep>& steps, size_t num_values, size_t loss);

class BudgetPlanner {
 public:
  // `measured`: the bytes each value took in the measuring run (needed by PlanWithin only).
  explicit BudgetPlanner(BudgetGraph graph, std::vector<uint64_t> measured = {});

  // What the measuring run recomputes: the values whose recomputation reads only what stays alive anyway.
  std::vector<Recompute> FreeRecomputation() const;

  // Tries the fewest greedy picks first: `place(list)` compiles with the recomputations `list` and
  // returns its arena's bytes; the first arena within `budget` is returned. Throws kResourceExhausted
  // naming `model` and the smallest arena found when none fits.
  uint64_t PlanWithin(uint64_t budget, FunctionRef<uint64_t(const std::vector<Recompute>&)> place,
                      const std::string& model) const;

 private:
  struct Candidate {
    size_t value, producer, first_late_use;
    bool each_reader = false;  // a copy per backward reader instead of one for all
  };
  // The intermediate bytes alive at once after each step of the order a list makes (measured sizes).
  struct Profile {
    uint64_t peak = 0;
    int64_t at = 0;
    std::vector<int64_t> define, last;
    std::vector<size_t> copy_of;  // per copy (id - values()): the value it recomputes
  };
  std::vector<Candidate> Candidates(bool any_size) const;
  std::vector<Recompute> Insertions(const std::vector<Candidate>& chosen) const;
  Profile Simulate(const std::vector<Recompute>& list) const;
  // The greedy plans, from none recomputed on, each with its simulated peak in `peaks`.
  std::vector<std::vector<Candidate>> GreedyPlans(std::vector<uint64_t>& peaks) const;
  bool Recomputable(size_t value) const;

  std::vector<size_t> producer_;                  // per value: the forward step making it as output 0
  std::vector<int64_t> last_read_;                // per value: the last original step reading it
  std::vector<std::vector<size_t>> late_readers_; // per value: the backward steps reading it
  std::vector<bool> aliased_;

  BudgetGraph graph_;
  std::vector<uint64_t> measured_;
};

}  // namespace edgetrain
