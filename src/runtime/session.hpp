// Compiles a graph once (constant folding, dead-code removal, order, kernels, liveness) and runs it
// many times. Memory: intermediate tensors live in one arena whose offsets are planned from the
// liveness of each value the first time a set of input shapes is seen, then reused.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.hpp"
#include "core/threading.hpp"
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {

struct SessionOptions {
  int num_threads = 1;
  uint64_t seed = 0x5eed;
  bool constant_folding = true;
  // Graph fusions (ir/passes.hpp): BatchNormalization folded into Conv, Conv-Relu-MaxPool into one
  // node, Relu into Conv and Gemm.
  bool fuse_operators = true;
  // Bytes the session may hold (initializers plus the planned intermediate tensors); 0: no limit.
  // Beyond it, creation or the allocation that would cross it fails with kResourceExhausted.
  uint64_t memory_limit_bytes = 0;
  // Initializers whose memory the caller keeps as well (a TrainingSession's frozen prefix reads the checkpoint's
  // parameters): constant folding leaves the nodes that read one of 64 KiB or more, since a folded copy would double
  // its memory (ViT-B/32's transposed weights: 312 MB). Fusions still take them (MatMul of a Transpose).
  std::set<std::string> shared_initializers = {};
};

class GraphExecutor;

class Session {
 public:
  explicit Session(Model model, SessionOptions options = {});
  static Session FromFile(const std::string& path, SessionOptions options = {});
  ~Session();
  Session(Session&&) noexcept;

  // A run whose feeds and fetches are named once: RunPrepared takes the feeds by position, looks
  // nothing up by name and, once the session is warm, allocates no tensor memory of its own.
  struct PreparedRun {
    std::vector<std::string> feed_names, fetch_names;
    std::vector<const ValueInfo*> feed_infos;
    std::vector<size_t> feed_slots, fetch_slots;
  };
  // Checks that `feed_names` are inputs (every required one included) and `fetch_names` (default:
  // every graph output) are outputs.
  PreparedRun Prepare(const std::vector<std::string>& feed_names, const std::vector<std::string>& fetch_names = {}) const;
  // feeds[i] for run.feed_names[i]; `outputs` receives run.fetch_names' values in order.
  void RunPrepared(const PreparedRun& run, const std::vector<RuntimeValue>& feeds, std::vector<RuntimeValue>& outputs);

  // Feeds by graph input name; returns `fetches` (default: every graph output) in order.
  std::vector<RuntimeValue> RunValues(const std::map<std::string, RuntimeValue>& feeds,
                                      const std::vector<std::string>& fetches = {});
  std::vector<Tensor> Run(const std::map<std::string, Tensor>& feeds, const std::vector<std::string>& fetches = {});

  const Model& model() const { return model_; }
  // Graph inputs a caller must feed (initializers excluded).
  const std::vector<const ValueInfo*>& Inputs() const { return inputs_; }
  const std::vector<std::string>& InputNames() const { return input_names_; }
  const std::vector<std::string>& OutputNames() const { return output_names_; }
  // Output binding: later runs write graph output `name` straight into `target`'s memory when its
  // kernel makes the same dtype and element count and no fed value still to be read lives there
  // (an in-place kernel may overwrite the very input it reads). Otherwise the output gets fresh
  // memory: compare the fetched tensor with target.SameData(). An undefined tensor unbinds.
  void BindOutput(const std::string& name, const Tensor& target);
  // Lets kernels that can work in place write their results into the memory fed for input `name`
  // (or into the tensors of a fed sequence) once no other node reads it. The caller's tensors change.
  void AllowOverwrite(const std::string& name);
  // Bytes of the intermediate-tensor arena planned for the last input shapes (0 before a run).
  size_t planned_peak_bytes() const;
  // Plans the intermediate-tensor arena within `bytes` (0: no budget) by recomputing forward values in
  // the backward pass instead of keeping them (gradient checkpointing; the results are the same bits).
  // The plan is made after the first run at new input shapes, which fails with kResourceExhausted
  // naming the smallest arena that can be planned when `bytes` is less.
  void SetArenaBudget(uint64_t bytes);
  // How many recomputations of forward values the current plan makes (one per copy: a value recomputed
  // for each of two backward readers counts twice).
  size_t recomputed_values() const;
  // Bytes of the model's initializers (constants after folding), held for the session's lifetime.
  uint64_t initializer_bytes() const { return initializer_bytes_; }
  // Sets SessionOptions::memory_limit_bytes; `held_elsewhere` bytes (a training session's parameters,
  // gradients, optimizer state, other arenas) count toward it besides this session's own.
  void SetMemoryLimit(uint64_t limit, uint64_t held_elsewhere = 0);
  void SetSeed(uint64_t seed);

 private:
  Model model_;
  SessionOptions options_;
  std::unique_ptr<ThreadPool> threads_;
  std::mt19937_64 rng_;
  std::unique_ptr<GraphExecutor> executor_;
  uint64_t initializer_bytes_ = 0;
  // The graph's interface, indexed once: what a run looks names up in.
  struct InputSlot {
    const ValueInfo* info;
    size_t slot;
    bool required;  // not an initializer
  };
  std::vector<const ValueInfo*> inputs_;
  std::vector<std::string> input_names_, output_names_;
  std::unordered_map<std::string, InputSlot> input_slots_;
  std::unordered_map<std::string, size_t> output_slots_;
  std::vector<std::pair<const std::string*, int64_t>> symbol_values_;  // a run's symbolic dims, reused
  void CheckFeed(const std::string& name, const ValueInfo& declared, const RuntimeValue& value);
};

// Import options for models edgetrain will run: ONNX function ops without a kernel are inlined.
ImportOptions ExecutionImportOptions();
// The same for models that are only run (training artifacts): ONNX shape inference, which costs
// about 10 ms the first time in a process, runs only when a node lacks a kernel or a kernel reads
// the shapes the model declares.
ImportOptions RuntimeImportOptions();

// Every operator node in `graph` (recursively) that has no kernel at its opset, as "op (node)".
std::vector<std::string> UnsupportedOperators(const Graph& graph, const Model& model);

}  // namespace edgetrain
