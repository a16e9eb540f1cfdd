#include "runtime/session.hpp"
#include "ops/build_types.hpp"
#include "ops/string_ops.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "core/text.hpp"
#include "ir/passes.hpp"
#include "ir/scope.hpp"
#include "onnx/importer.hpp"
#include "ops/attributes.hpp"
#include "onnx/schema_hooks.hpp"
#include "runtime/arena_plan.hpp"
#include "runtime/export_options.hpp"
#include "runtime/memory_budget.hpp"

namespace edgetrain {

namespace {

constexpr size_t kNoSlot = kNoValue;

// Empties a value but keeps its sequence's capacity, so that the next run refills it without allocating.
void Clear(RuntimeValue& value) {
  if (value.tensor.defined()) value.tensor = Tensor();
  if (!value.sequence.empty()) value.sequence.clear();
  value.is_sequence = false;
}

int64_t NodeOpset(const Node& node, const Model& model) {
  return node.opset ? node.opset : model.OpsetFor(node.domain);
}

// A tensor's bytes; UINT64_MAX when they overflow or a dimension is negative.
uint64_t CheckedBytes(const Shape& shape, DataType dtype) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d <= 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return d == 0 ? 0 : UINT64_MAX;
  return __builtin_mul_overflow(n, DataTypeSize(dtype), &n) ? UINT64_MAX : n;
}

// Memory for the outputs nothing reads: one buffer per output index, shared by every step of an executor (such an
// output is dead once its step returns), so that their sizes take the largest, not the sum (ViT-B/32's recomputed
// LayerNormalizations, run for their statistics, wrote 25 unread Y tensors).
class UnrequestedOutputs {
 public:
  // Output `i` of the running step; valid until the next step runs.
  Tensor& Get(const Node& node, size_t i, const Shape& shape, DataType dtype) {
    while (views_.size() <= i) {  // a deque: earlier outputs' references stay valid
      views_.emplace_back();
      buffers_.emplace_back();
    }
    const uint64_t bytes = std::max<uint64_t>(CheckedBytes(shape, dtype), 1);
    // A string tensor owns its strings; a size past int64 gets Tensor's own error.
    if (dtype == DataType::kString || bytes > static_cast<uint64_t>(INT64_MAX))
      return views_[i] = Tensor(dtype, shape, node.Describe() + " output " + std::to_string(i));
    if (buffers_[i].nbytes() < bytes)
      buffers_[i] = Tensor(DataType::kUint8, {static_cast<int64_t>(bytes)},
                           node.Describe() + " output " + std::to_string(i));
    return views_[i] = Tensor::Borrow(dtype, shape, buffers_[i].raw());
  }

 private:
  std::deque<Tensor> buffers_, views_;
};

// Where a node's requested outputs get their memory.
class OutputMemory {
 public:
  virtual ~OutputMemory() = default;
  virtual Tensor Allocate(size_t output, const Shape& shape, DataType dtype) = 0;
};

// The KernelContext of one node execution: inputs point at runtime values, requested outputs get
// memory from `memory`, unrequested ones from `unrequested`.
class StepContext final : public KernelContext {
 public:
  StepContext(const Node& node, int64_t opset, ThreadPool* threads, std::mt19937_64* rng,
              const std::vector<const RuntimeValue*>& inputs, const std::vector<RuntimeValue*>& outputs,
              UnrequestedOutputs& unrequested, OutputMemory& memory, GraphExecutor* executor, size_t step,
              const Graph* graph, KeptState* state = nullptr)
      : inputs_(inputs),
        outputs_(outputs),
        unrequested_outputs_(unrequested),
        memory_(memory),
        executor_(executor),
        step_(step),
        graph_(graph),
        state_(state) {
    node_ = &node;
    opset_ = opset;
    threads_ = threads;
    rng_ = rng;
    num_inputs_ = inputs_.size();
    num_outputs_ = outputs_.size();
  }

  bool HasInput(size_t i) const override { return i < inputs_.size() && inputs_[i] != nullptr; }

  const Tensor& Input(size_t i) const override {
    ET_CHECK(HasInput(i), ErrorCode::kInvalidModel, node_->Describe(), ": required input ", i, " is missing");
    ET_CHECK(!inputs_[i]->is_sequence, ErrorCode::kInvalidModel, node_->Describe(), ": input ", i, " ('",
             node_->inputs[i], "') is a sequence, expected a tensor");
    ET_CHECK(inputs_[i]->tensor.defined(), ErrorCode::kInvalidModel, node_->Describe(), ": input ", i, " ('",
             node_->inputs[i], "') was not computed");
    return inputs_[i]->tensor;
  }

  const TensorSequence& InputSequence(size_t i) const override {
    ET_CHECK(HasInput(i), ErrorCode::kInvalidModel, node_->Describe(), ": required input ", i, " is missing");
    ET_CHECK(inputs_[i]->is_sequence, ErrorCode::kInvalidModel, node_->Describe(), ": input ", i, " ('",
             node_->inputs[i], "') is a tensor, expected a sequence");
    return inputs_[i]->sequence;
  }

  bool InputIsSequence(size_t i) const override { return HasInput(i) && inputs_[i]->is_sequence; }

  const RuntimeValue& InputValue(size_t i) const override {
    ET_CHECK(HasInput(i), ErrorCode::kInvalidModel, node_->Describe(), ": required input ", i, " is missing");
    return *inputs_[i];
  }

  bool HasOutput(size_t i) const override { return i < outputs_.size() && outputs_[i] != nullptr; }

  Tensor& Output(size_t i, const Shape& shape, DataType dtype) override {
    if (i >= outputs_.size() || !outputs_[i]) return unrequested_outputs_.Get(*node_, i, shape, dtype);
    outputs_[i]->is_sequence = false;
    outputs_[i]->tensor = memory_.Allocate(i, shape, dtype);
    return outputs_[i]->tensor;
  }

  void SetOutputSequence(size_t i, TensorSequence sequence) override {
    ET_CHECK(i < outputs_.size(), ErrorCode::kInternal, node_->Describe(), ": output ", i, " does not exist");
    if (!outputs_[i]) return;
    outputs_[i]->is_sequence = true;
    outputs_[i]->tensor = Tensor();
    outputs_[i]->sequence = std::move(sequence);
  }

  void SetOutputNone(size_t i) override {
    ET_CHECK(i < outputs_.size(), ErrorCode::kInternal, node_->Describe(), ": output ", i, " does not exist");
    if (!outputs_[i]) return;
    Clear(*outputs_[i]);
  }

  TensorSequence& OutputSequence(size_t i) override {
    ET_CHECK(i < outputs_.size(), ErrorCode::kInternal, node_->Describe(), ": output ", i, " does not exist");
    RuntimeValue* value = outputs_[i] ? outputs_[i] : &unrequested_;
    value->is_sequence = true;
    value->tensor = Tensor();
    value->sequence.clear();
    return value->sequence;
  }

  std::vector<RuntimeValue> RunSubgraph(const Graph& graph, const std::vector<RuntimeValue>& inputs) override;
  bool InputMayBeOverwritten(size_t i) const override;
  bool InputMayBeClobbered(size_t i) const override;
  bool InputIsConstant(size_t i) const override;
  KeptState* NodeState() override { return state_; }

  const ValueInfo* DeclaredOutput(size_t i) const override {
    if (!graph_ || i >= node_->outputs.size() || node_->outputs[i].empty()) return nullptr;
    return graph_->FindValueInfo(node_->outputs[i]);
  }

 private:
  const std::vector<const RuntimeValue*>& inputs_;
  const std::vector<RuntimeValue*>& outputs_;
  UnrequestedOutputs& unrequested_outputs_;
  OutputMemory& memory_;
  GraphExecutor* executor_;       // runs subgraphs; null where they cannot run
  size_t step_;                   // the node's place in executor_'s order
  const Graph* graph_;            // the graph the node belongs to, for DeclaredOutput
  KeptState* state_;  // the node's kernel state, kept across runs
  RuntimeValue unrequested_;      // an unrequested output sequence, filled and dropped
};

// EDGETRAIN_PROFILE=1 (any value): wall time of every operator type over the process, printed to stderr
// at exit, longest first. Nested runs (subgraphs) count in their node and on their own. EDGETRAIN_PROFILE=nodes:
// every node's fastest call, then those summed per operator type (on a noisy machine, steadier than the totals).
class OperatorProfile {
 public:
  static OperatorProfile* Active() {
    static OperatorProfile* profile = std::getenv("EDGETRAIN_PROFILE") ? new OperatorProfile : nullptr;
    return profile;
  }
  void Add(const Node& node, double ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string op = OperatorType(node);
    Entry& e = by_key_[by_node_ ? node.Describe() : op];
    if (e.calls == 0) e.op = std::move(op);
    e.ms += ms;
    e.fastest = e.calls == 0 ? ms : std::min(e.fastest, ms);
    ++e.calls;
  }

 private:
  struct Entry {
    double ms = 0, fastest = 0;
    uint64_t calls = 0;
    std::string op;
  };
  static std::string OperatorType(const Node& node) {
    return node.domain.empty() ? node.op_type : node.domain + "." + node.op_type;
  }
  OperatorProfile() : by_node_(std::string(std::getenv("EDGETRAIN_PROFILE")) == "nodes") {
    std::atexit([] { Active()->Print(); });
  }
  static void PrintRows(const char* title, std::vector<std::pair<std::string, Entry>> rows, bool fastest) {
    auto time = [&](const Entry& e) { return fastest ? e.fastest : e.ms; };
    std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return time(a.second) > time(b.second); });
    double total = 0;
    for (const auto& [key, e] : rows) total += time(e);
    std::fprintf(stderr, "edgetrain profile: %.1f ms %s\n", total, title);
    for (const auto& [key, e] : rows)
      std::fprintf(stderr, "  %10.2f ms %5.1f%% %8llu calls  %s\n", time(e), total > 0 ? 100 * time(e) / total : 0.0,
                   static_cast<unsigned long long>(e.calls), key.c_str());
  }
  void Print() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<std::string, Entry>> rows(by_key_.begin(), by_key_.end());
    if (!by_node_) return PrintRows("in operators", std::move(rows), false);
    PrintRows("in each node's fastest call", rows, true);
    std::map<std::string, Entry> by_op;
    for (const auto& [key, e] : rows) {
      Entry& sum = by_op[e.op];
      sum.fastest += e.fastest;
      sum.calls += e.calls;
    }
    PrintRows("in the nodes' fastest calls, per operator type", {by_op.begin(), by_op.end()}, true);
  }
  const bool by_node_;
  std::mutex mutex_;
  std::map<std::string, Entry> by_key_;
};

// Runs `fn` and rewrites any failure as an edgetrain::Error that names the node.
template <typename Fn>
void RunNamingNode(const Node& node, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::string message = e.what();
    if (message.rfind("node '", 0) != 0) message = node.Describe() + ": " + message;
    throw Error(e.code(), message);
  } catch (const std::bad_alloc&) {
    Fail(ErrorCode::kResourceExhausted, node.Describe(), ": out of memory");
  } catch (const std::exception& e) {
    Fail(ErrorCode::kInternal, node.Describe(), ": ", e.what());
  }
}

std::optional<std::vector<Tensor>> EvaluateNode(const Node& node, int64_t opset, const std::vector<Tensor>& inputs,
                                                ThreadPool* threads, std::mt19937_64* rng, const Graph& graph) {
  const OpKernelEntry* entry = OpRegistry::Global().Find(node.domain, node.op_type, opset);
  ET_CHECK(entry, ErrorCode::kNotImplemented, node.Describe(), ": operator is not supported at opset ", opset);
  std::vector<RuntimeValue> in_values(inputs.size()), out_values(node.outputs.size());
  std::vector<const RuntimeValue*> in_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_values[i].tensor = inputs[i];
    in_ptrs.push_back(inputs[i].defined() ? &in_values[i] : nullptr);
  }
  std::vector<RuntimeValue*> out_ptrs;
  for (size_t i = 0; i < node.outputs.size(); ++i)
    out_ptrs.push_back(node.outputs[i].empty() ? nullptr : &out_values[i]);
  struct FreshMemory final : OutputMemory {
    const Node& node;
    explicit FreshMemory(const Node& n) : node(n) {}
    Tensor Allocate(size_t i, const Shape& shape, DataType dtype) override {
      return Tensor(dtype, shape, node.Describe() + " output '" + node.outputs[i] + "'");
    }
  } memory(node);
  UnrequestedOutputs unrequested;
  StepContext ctx(node, opset, threads, rng, in_ptrs, out_ptrs, unrequested, memory, nullptr, 0, &graph);
  RejectStringInputs(*entry, node, in_ptrs);
  RunNamingNode(node, [&] { entry->kernel(ctx); });
  std::vector<Tensor> out;
  for (size_t i = 0; i < out_values.size(); ++i) {  // sequences and None are not constants
    if (out_ptrs[i] && (out_values[i].is_sequence || out_values[i].is_none())) return std::nullopt;
    out.push_back(out_values[i].tensor);
  }
  return out;
}

// Checks what the executor relies on before it compiles a graph (and, recursively, its subgraphs):
// names unique among graph inputs, initializers and node outputs, every node reading only values
// defined before it (TopologicalOrder), every graph output computed, subgraphs at most kMaxGraphNesting deep.
constexpr int kMaxGraphNesting = 16;
void ValidateGraph(const Graph& graph, const std::string& source, const std::vector<std::string>& outer, int depth) {
  const std::string where = depth == 0 ? source : source + ": subgraph '" + graph.name + "'";
  ET_CHECK(depth <= kMaxGraphNesting, ErrorCode::kInvalidModel, where, ": subgraphs nest more than ",
           kMaxGraphNesting, " deep");
  std::unordered_set<std::string> defined;
  for (const auto& in : graph.inputs) {
    ET_CHECK(!in.name.empty(), ErrorCode::kInvalidModel, where, ": a graph input has no name");
    ET_CHECK(defined.insert(in.name).second || graph.IsInitializer(in.name), ErrorCode::kInvalidModel, where,
             ": graph input '", in.name, "' is declared twice");
  }
  for (const auto& [name, tensor] : graph.initializers) defined.insert(name);
  for (const auto& node : graph.nodes)
    for (const auto& out : node.outputs)
      ET_CHECK(out.empty() || !defined.count(out), ErrorCode::kInvalidModel, where, ": ", node.Describe(),
               ": output '", out, "' redefines a graph input or initializer");
  TopologicalOrder(graph, outer);  // each value produced once, read only where defined, no cycle
  std::vector<std::string> visible = outer;
  visible.insert(visible.end(), defined.begin(), defined.end());
  for (const auto& node : graph.nodes)
    for (const auto& out : node.outputs)
      if (!out.empty()) {
        visible.push_back(out);
        defined.insert(out);
      }
  std::unordered_set<std::string> outer_set(outer.begin(), outer.end());
  for (const auto& out : graph.outputs)
    ET_CHECK(defined.count(out.name) || outer_set.count(out.name), ErrorCode::kInvalidModel, where,
             ": graph output '", out.name, "' is not computed by any node, nor a graph input or initializer");
  for (const auto& node : graph.nodes)
    for (const Graph* sub : Subgraphs(node)) ValidateGraph(*sub, source, visible, depth + 1);
}

}  // namespace

// A node's operator as an operator config line names it: "(ai.onnx, Gemm, 13)".
static std::string ConfigLineOf(const Node& node, const Model& model) {
  return "(" + (node.domain.empty() ? std::string("ai.onnx") : node.domain) + ", " + node.op_type + ", " +
         std::to_string(NodeOpset(node, model)) + ")";
}

std::vector<std::string> UnsupportedOperators(const Graph& graph, const Model& model) {
  std::vector<std::string> missing;
  for (const auto& node : graph.nodes) {
    if (!OpRegistry::Global().Find(node.domain, node.op_type, NodeOpset(node, model))) {
      if (OpRegistry::ReducedConfig())
        missing.push_back(ConfigLineOf(node, model) + " of node '" + node.name + "'");
      else
        missing.push_back((node.domain.empty() ? "" : node.domain + ".") + node.op_type + "-" +
                          std::to_string(NodeOpset(node, model)) + " (node '" + node.name + "')");
    }
    for (const Graph* sub : Subgraphs(node)) {
      auto inner = UnsupportedOperators(*sub, model);
      missing.insert(missing.end(), inner.begin(), inner.end());
    }
  }
  return missing;
}

// The first value of a node (in `graph` or its subgraphs) whose known element type a reduced build left out:
// "float64 of node 'n' (ai.onnx, Gemm, 13)"; empty when there is none.
static std::string LeftOutElementType(const Graph& graph, const Model& model, std::vector<const Graph*>& scopes) {
  scopes.push_back(&graph);
  auto type_of = [&](const std::string& value) {
    for (auto g = scopes.rbegin(); g != scopes.rend(); ++g) {
      if (auto it = (*g)->initializers.find(value); it != (*g)->initializers.end()) return it->second.dtype();
      if (const ValueInfo* info = (*g)->FindValueInfo(value)) return info->dtype;
    }
    return DataType::kUndefined;
  };
  std::string found;
  for (const auto& node : graph.nodes) {
    for (const auto* values : {&node.inputs, &node.outputs})
      for (const std::string& value : *values)
        if (DataType t = value.empty() ? DataType::kUndefined : type_of(value);
            found.empty() && t != DataType::kUndefined && !ElementTypeInBuild(t))
          found = std::string(DataTypeName(t)) + " of node '" + node.name + "' " + ConfigLineOf(node, model);
    for (const Graph* sub : Subgraphs(node))
      if (std::string inner = LeftOutElementType(*sub, model, scopes); found.empty()) found = inner;
    if (!found.empty()) break;
  }
  scopes.pop_back();
  return found;
}

// Executes one graph. A subgraph executor resolves names it does not define through its parent.
class GraphExecutor {
 public:
  GraphExecutor(const Graph& graph, const Model& model, ThreadPool* threads, std::mt19937_64* rng,
                const GraphExecutor* parent, bool plan_memory)
      : graph_(graph), model_(model), threads_(threads), rng_(rng), parent_(parent), plan_memory_(plan_memory) {
    Compile();
  }

  // Runs the graph on `feeds` (feeds[i] for value slot feed_slots[i]) and writes the values of
  // `fetch_slots` into `out`. Values are emptied, not freed, so a warm run refills them in place.
  void Run(const std::vector<size_t>& feed_slots, const std::vector<RuntimeValue>& feeds,
           const std::vector<size_t>& fetch_slots, std::vector<RuntimeValue>& out) {
    ET_CHECK(!in_use_.exchange(true, std::memory_order_acquire), ErrorCode::kInvalidArgument, model_.source,
             ": the session is running on another thread (a session serves one thread at a time)");
    struct Release {
      std::atomic<bool>& flag;
      ~Release() { flag.store(false, std::memory_order_release); }
    } release{in_use_};
    for (size_t s = 0; s < values_.size(); ++s)
      if (!is_initializer_[s]) Clear(values_[s]);
    for (const auto& [slot, name] : outer_slots_) values_[slot] = parent_->Lookup(name);
    for (size_t i = 0; i < feed_slots.size(); ++i) values_[feed_slots[i]] = feeds[i];

    signature_.clear();
    for (size_t i = 0; i < feed_slots.size(); ++i) {
      signature_.push_back(static_cast<int64_t>(feed_slots[i]));
      signature_.push_back(static_cast<int64_t>(feeds[i].tensor.rank()));
      signature_.insert(signature_.end(), feeds[i].tensor.shape().begin(), feeds[i].tensor.shape().end());
    }
    run_planned_ = plan_memory_ && plan_valid_ && signature_ == plan_signature_;
    if (!run_planned_) {
      std::fill(planned_bytes_.begin(), planned_bytes_.end(), 0);
      std::fill(define_step_.begin(), define_step_.end(), -1);
    }
    plan_broken_ = false;
    live_bytes_ = 0;
    if (limit_ != 0) std::fill(live_by_slot_.begin(), live_by_slot_.end(), 0);

    for (size_t k = 0; k < steps_.size(); ++k) {
      Step& step = steps_[k];
      StepContext ctx(*step.node, step.opset, threads_, rng_, step.input_values, step.output_values, unrequested_,
                      step.memory, this, k, &graph_, &step.state);
      RejectStringInputs(*step.kernel, *step.node, step.input_values);
      if (OperatorProfile* profile = OperatorProfile::Active()) {
        const auto start = std::chrono::steady_clock::now();
        RunNamingNode(*step.node, [&] { step.kernel->kernel(ctx); });
        const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
        profile->Add(*step.node, took.count());
      } else {
        RunNamingNode(*step.node, [&] { step.kernel->kernel(ctx); });
      }
      for (size_t s : step.release) {
        Clear(values_[s]);
        if (limit_ != 0) live_bytes_ -= std::exchange(live_by_slot_[s], 0);
      }
    }

    out.resize(fetch_slots.size());
    for (size_t i = 0; i < fetch_slots.size(); ++i) {
      ET_CHECK(fetch_slots[i] < values_.size(), ErrorCode::kInvalidModel, model_.source, ": output ", i,
               " of graph '", graph_.name, "' is never computed");
      out[i] = values_[fetch_slots[i]];
    }
    for (size_t s = 0; s < values_.size(); ++s)
      if (!pinned_[s]) Clear(values_[s]);
    if (plan_memory_ && !run_planned_) BuildPlan();
    if (plan_broken_) plan_valid_ = false;
  }

  // Memory for output i of step k: the bound tensor, a planned place in the arena, or fresh memory.
  Tensor AllocateOutput(size_t k, size_t i, const Shape& shape, DataType dtype) {
    const Step& step = steps_[k];
    const size_t slot = step.outputs[i];
    if (dtype == DataType::kString) return Tensor(dtype, shape, step.node->outputs[i]);  // owns its strings: never planned
    if (CanWriteBound(k, slot, shape, dtype)) return Tensor::Borrow(dtype, shape, bound_[slot].raw());
    if (i == 0 && view_root_[slot] != slot) {  // a view of input 0's memory (the kernel's copy is skipped)
      const RuntimeValue& source = values_[step.inputs[0]];
      if (!source.is_sequence && source.tensor.dtype() == dtype && source.tensor.numel() == NumElements(shape))
        return source.tensor.Reshaped(shape);
    }
    auto fresh = [&] { return Tensor(dtype, shape, step.node->outputs[i]); };  // errors get the node's name
    if (!plan_memory_ || pinned_[slot]) return fresh();
    if (run_planned_) {
      uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * DataTypeSize(dtype);
      if (bytes == 0) return Tensor::Borrow(dtype, shape, arena_.raw());  // empty: needs no place
      if (bytes <= planned_bytes_[slot] && planned_offset_[slot] >= 0)
        return Tensor::Borrow(dtype, shape, static_cast<uint8_t*>(arena_.raw()) + planned_offset_[slot]);
      plan_broken_ = true;  // data-dependent size grew: fall back, replan next run
      return fresh();
    }
    if (limit_ != 0) {  // the measuring run: what is alive at once, before the plan is known
      const uint64_t bytes = CheckedBytes(shape, dtype);
      CheckMemoryLimit(live_bytes_ + bytes, "the intermediate tensors alive at this node");
      live_bytes_ += bytes;
      live_by_slot_[slot] += bytes;
    }
    Tensor t = fresh();
    planned_bytes_[slot] = std::max<uint64_t>(planned_bytes_[slot], t.nbytes());
    define_step_[slot] = static_cast<int64_t>(k);
    return t;
  }

  void BindOutput(size_t slot, const Tensor& target) { bound_[slot] = target; }
  void AllowOverwrite(size_t slot) { overwritable_[slot] = true; }
  bool IsConstant(size_t k, size_t input) const {
    const size_t slot = steps_[k].inputs[input];
    return slot != kNoSlot && is_initializer_[slot] && !overridable_[slot];
  }
  bool MayOverwrite(size_t k, size_t input) const {
    const size_t slot = steps_[k].inputs[input];
    return slot != kNoSlot && overwritable_[slot] && last_use_[slot] == static_cast<int64_t>(k);
  }

  bool MayClobber(size_t k, size_t input) const {
    const std::vector<size_t>& inputs = steps_[k].inputs;
    const size_t slot = inputs[input];
    if (slot == kNoSlot) return false;
    const size_t root = view_root_[slot];
    const bool dead_after = overwritable_[slot] ? MayOverwrite(k, input)
                                                : !pinned_[root] && !bound_[root].defined() &&
                                                      last_use_[root] == static_cast<int64_t>(k);
    if (!dead_after) return false;
    for (size_t j = 0; j < inputs.size(); ++j)
      if (j != input && inputs[j] != kNoSlot && view_root_[inputs[j]] == root) return false;
    return true;
  }

  std::vector<RuntimeValue> RunSubgraph(const Graph& graph, const std::vector<RuntimeValue>& inputs) {
    auto it = children_.find(&graph);
    if (it == children_.end())
      it = children_.emplace(&graph, std::make_unique<GraphExecutor>(graph, model_, threads_, rng_, this, false)).first;
    GraphExecutor& child = *it->second;
    ET_CHECK(inputs.size() <= graph.inputs.size(), ErrorCode::kInvalidModel, "subgraph '", graph.name, "' takes ",
             graph.inputs.size(), " inputs, got ", inputs.size());
    std::vector<size_t> feed_slots;
    for (size_t i = 0; i < inputs.size(); ++i) feed_slots.push_back(child.SlotOf(graph.inputs[i].name));
    std::vector<size_t> fetch;
    for (const auto& o : graph.outputs) {
      size_t s = child.SlotOf(o.name);
      ET_CHECK(s != kNoSlot, ErrorCode::kInvalidModel, "subgraph '", graph.name, "' output '", o.name,
               "' is never computed");
      fetch.push_back(s);
    }
    std::vector<RuntimeValue> out;
    child.Run(feed_slots, inputs, fetch, out);
    return out;
  }

  size_t SlotOf(const std::string& name) const {
    auto it = slot_of_.find(name);
    return it == slot_of_.end() ? kNoSlot : it->second;
  }

  size_t arena_bytes() const { return plan_valid_ ? planned_peak_ : 0; }

  // The arena of the next plans must fit `budget` bytes (0: no budget). The measuring run recomputes
  // the forward values whose recomputation keeps nothing else alive.
  void SetArenaBudget(uint64_t budget) {
    budget_ = budget;
    plan_valid_ = false;
    Compile(budget == 0 || !plan_memory_ ? std::vector<Recompute>{} : BudgetPlanner(BudgetView()).FreeRecomputation());
  }
  size_t recomputed_values() const { return recompute_.size(); }

  void SetMemoryLimit(uint64_t limit, uint64_t held) {
    limit_ = limit;
    held_bytes_ = held;
    live_by_slot_.assign(values_.size(), 0);
  }

  // A value visible to subgraphs: our own slot, or our parent's.
  RuntimeValue Lookup(const std::string& name) const {
    size_t s = SlotOf(name);
    if (s != kNoSlot) return values_[s];
    ET_CHECK(parent_, ErrorCode::kInvalidModel, "value '", name, "' is not defined in any enclosing graph");
    return parent_->Lookup(name);
  }

 private:
  // Gives step k's outputs memory through AllocateOutput.
  struct StepMemory final : OutputMemory {
    GraphExecutor* executor = nullptr;
    size_t step = 0;
    Tensor Allocate(size_t output, const Shape& shape, DataType dtype) override {
      return executor->AllocateOutput(step, output, shape, dtype);
    }
  };

  struct Step {
    const Node* node = nullptr;
    const OpKernelEntry* kernel = nullptr;
    int64_t opset = 0;
    std::vector<size_t> inputs, outputs, release;
    // Pointers into values_ (fixed once compiled), so that a run builds no per-step lists.
    std::vector<const RuntimeValue*> input_values;
    std::vector<RuntimeValue*> output_values;
    StepMemory memory;
    KeptState state;  // the kernel's NodeState
  };

  // True when output `slot` (made by step k) is bound and may be written there: same dtype and
  // element count, and no fed value that a later step reads lives in that memory (the step itself
  // may read it only if its kernel works in place).
  bool CanWriteBound(size_t k, size_t slot, const Shape& shape, DataType dtype) const {
    const Tensor& target = bound_[slot];
    if (!target.defined() || target.dtype() != dtype || target.numel() != NumElements(shape)) return false;
    for (size_t s : input_slots_) {
      const RuntimeValue& v = values_[s];
      if (v.is_sequence || v.tensor.raw() != target.raw()) continue;
      if (last_use_[s] > static_cast<int64_t>(k)) return false;
      if (last_use_[s] == static_cast<int64_t>(k) && !steps_[k].kernel->in_place) return false;
    }
    return true;
  }

  size_t AddSlot(const std::string& name) {
    auto [it, inserted] = slot_of_.emplace(name, values_.size());
    if (inserted) values_.emplace_back();
    return it->second;
  }

  // Builds the steps in topological order (with `recompute`'s steps inserted), the values' slots and
  // lifetimes. Bound outputs and overwritable inputs carry over.
  void Compile(const std::vector<Recompute>& recompute = {}) {
    const std::vector<std::string> outer = OuterScope();
    std::vector<Tensor> bound = std::move(bound_);
    std::vector<bool> overwritable = std::move(overwritable_);
    ClearSlots();
    BuildSteps(TopologicalOrder(graph_, outer));
    base_slots_ = values_.size();
    if (base_.empty()) IndexOriginalSteps();
    if (!recompute.empty()) InsertRecomputation(recompute);
    recompute_ = recompute;
    PinValues();
    PlanLifetimes();
    ResetSlotState(std::move(bound), std::move(overwritable));
    WireSteps();
  }

  // The names visible from enclosing graphs; the top graph is validated before its first compile.
  std::vector<std::string> OuterScope() const {
    if (parent_) return parent_->VisibleNames();
    if (steps_.empty()) ValidateGraph(graph_, model_.source, {}, 0);
    return {};
  }

  void ClearSlots() {
    slot_of_.clear();
    values_.clear();
    initializer_values_.clear();
    outer_slots_.clear();
    steps_.clear();
    input_slots_.clear();
  }

  void BuildSteps(const std::vector<size_t>& order) {
    std::unordered_set<std::string> read;  // values some node (or subgraph node) or graph output reads
    for (const auto& o : graph_.outputs) read.insert(o.name);
    CollectReads(graph_, read);
    for (const auto& [name, tensor] : graph_.initializers) initializer_values_.emplace_back(AddSlot(name), tensor);
    for (const auto& in : graph_.inputs) AddSlot(in.name);
    for (size_t index : order) steps_.push_back(MakeStep(graph_.nodes[index], read));
  }

  // A node's kernel and value slots; an output nothing reads is not requested (HasOutput false).
  Step MakeStep(const Node& node, const std::unordered_set<std::string>& read) {
    Step step;
    step.node = &node;
    step.opset = NodeOpset(node, model_);
    step.kernel = OpRegistry::Global().Find(node.domain, node.op_type, step.opset);
    node.FreezeDescription();  // the executor keeps the node as it is: its kernels' messages cost nothing per run
    ET_CHECK(step.kernel, ErrorCode::kNotImplemented, model_.source, ": ", node.Describe(), ": operator ",
             node.op_type, " (opset ", step.opset, ") is not supported by edgetrain");
    KeepAttributes(step);
    for (const auto& in : node.inputs) step.inputs.push_back(InputSlot(in));
    for (const auto& out : node.outputs)
      step.outputs.push_back(out.empty() || !read.count(out) ? kNoSlot : AddSlot(out));
    return step;
  }

  // The node's typed attributes, parsed and checked once and kept for every run.
  static void KeepAttributes(Step& step) {
    if (step.kernel->parse_attributes) step.state.objects.push_back(step.kernel->parse_attributes(*step.node, step.opset));
  }

  // The slot a node reads: kNoSlot for an omitted input, a new outer slot for a name of an enclosing graph.
  size_t InputSlot(const std::string& name) {
    if (name.empty()) return kNoSlot;
    if (auto it = slot_of_.find(name); it != slot_of_.end()) return it->second;
    const size_t s = AddSlot(name);
    outer_slots_.emplace_back(s, name);
    return s;
  }

  // Values never released or placed in the arena: initializers, graph inputs and outputs, outer-scope
  // names (nested subgraphs see them through Lookup), and every value when a subgraph may read it by name.
  void PinValues() {
    pinned_.assign(values_.size(), false);
    for (const auto& [slot, t] : initializer_values_) pinned_[slot] = true;
    for (const auto& in : graph_.inputs) pinned_[slot_of_[in.name]] = true;
    for (const auto& [slot, name] : outer_slots_) pinned_[slot] = true;
    for (const auto& o : graph_.outputs)
      if (auto it = slot_of_.find(o.name); it != slot_of_.end()) pinned_[it->second] = true;
    if (std::any_of(steps_.begin(), steps_.end(), [](const Step& step) { return HasSubgraph(*step.node); }))
      pinned_.assign(values_.size(), true);
  }

  // Last uses and views (arena_plan.hpp); each unpinned value is released after its last use.
  void PlanLifetimes() {
    std::vector<PlanStep> order;
    order.reserve(steps_.size());
    for (const Step& step : steps_)
      order.push_back({step.inputs, step.outputs, step.kernel->output_views_input,
                       TakesInputMemory(step.kernel->domain, step.kernel->op_type)});
    Liveness live = ComputeLiveness(order, pinned_);
    last_use_ = std::move(live.last_use);
    view_root_ = std::move(live.view_root);
    for (size_t s = 0; s < values_.size(); ++s)
      if (!pinned_[s] && last_use_[s] >= 0) steps_[static_cast<size_t>(last_use_[s])].release.push_back(s);
  }

  void ResetSlotState(std::vector<Tensor> bound, std::vector<bool> overwritable) {
    const size_t n = values_.size();
    planned_bytes_.assign(n, 0);
    planned_offset_.assign(n, -1);
    define_step_.assign(n, -1);
    bound_ = std::move(bound);
    bound_.resize(n);
    overwritable_ = std::move(overwritable);
    overwritable_.resize(n, false);
    live_by_slot_.assign(n, 0);
    is_initializer_.assign(n, false);
    for (const auto& [slot, tensor] : initializer_values_) {
      is_initializer_[slot] = true;
      values_[slot].tensor = tensor;
    }
    overridable_.assign(n, false);
    for (const auto& in : graph_.inputs) {
      input_slots_.push_back(slot_of_[in.name]);
      overridable_[slot_of_[in.name]] = true;
    }
  }

  // Points each step at its values (fixed from here on), so that a run builds no per-step lists.
  void WireSteps() {
    for (size_t k = 0; k < steps_.size(); ++k) {
      Step& step = steps_[k];
      for (size_t s : step.inputs) step.input_values.push_back(s == kNoSlot ? nullptr : &values_[s]);
      for (size_t s : step.outputs) step.output_values.push_back(s == kNoSlot ? nullptr : &values_[s]);
      step.memory.executor = this;
      step.memory.step = k;
    }
  }

  static void CollectReads(const Graph& graph, std::unordered_set<std::string>& read) {
    for (const auto& n : graph.nodes) {
      read.insert(n.inputs.begin(), n.inputs.end());
      for (const Graph* sub : Subgraphs(n)) CollectReads(*sub, read);
    }
  }

  std::vector<std::string> VisibleNames() const {
    std::vector<std::string> names;
    for (const auto& [name, slot] : slot_of_) names.push_back(name);
    if (parent_) {
      auto more = parent_->VisibleNames();
      names.insert(names.end(), more.begin(), more.end());
    }
    return names;
  }

  // Places the values of the measuring run (arena_plan.hpp) and sizes the arena.
  void BuildPlan() {
    uint64_t peak = budget_ != 0 ? PlanWithinBudget() : Place();
    CheckMemoryLimit(peak, "the memory plan's arena");
    arena_ = Tensor();
#if defined(__GLIBC__)
    // The first run's tensors, freed by now, go back to the system before the arena replaces them.
    malloc_trim(0);
#endif
    arena_ = Tensor(DataType::kUint8, {static_cast<int64_t>(std::max<uint64_t>(peak, 1))}, "memory arena");
    planned_peak_ = peak;
    plan_signature_ = signature_;
    plan_valid_ = true;
  }

  // Places every planned value (planned_offset_) and returns the arena's size.
  uint64_t Place() {
    std::vector<ArenaValue> values(values_.size());
    for (size_t s = 0; s < values_.size(); ++s) values[s] = {planned_bytes_[s], define_step_[s], last_use_[s]};
    ArenaPlan plan = PlanArena(values);
    CheckArenaPlan(values, plan);
    planned_offset_ = std::move(plan.offsets);
    return plan.bytes;
  }

  // ---- gradient checkpointing under an arena budget (memory_budget.hpp) ----

  // The steps in their original order and where the forward pass ends: after the last node that the
  // first graph output (the loss) depends on.
  void IndexOriginalSteps() {
    base_.clear();
    for (const Step& step : steps_) base_.push_back({step.node, step.kernel, step.opset, step.inputs, step.outputs});
    forward_end_ = 0;
    for (const Step& step : steps_)
      if (HasSubgraph(*step.node)) return;  // subgraphs read values by name: nothing is recomputed
    if (graph_.outputs.empty() || !slot_of_.count(graph_.outputs[0].name)) return;
    forward_end_ = ForwardEnd(BudgetSteps(), values_.size(), slot_of_.at(graph_.outputs[0].name));
  }

  std::vector<BudgetStep> BudgetSteps() const {
    std::vector<BudgetStep> steps;
    for (const BaseStep& b : base_) {
      const OpKernelEntry& k = *b.kernel;
      const bool recomputable = k.domain.empty() && k.deterministic && !k.in_place && IsRecomputableOp(k.op_type);
      steps.push_back({b.inputs, b.outputs, k.output_views_input, recomputable, TakesInputMemory(k.domain, k.op_type)});
    }
    return steps;
  }

  // The original steps and the per-value facts of the original slots, as the budget planner reads them.
  BudgetGraph BudgetView() const {
    BudgetGraph view;
    view.steps = BudgetSteps();
    view.forward_end = forward_end_;
    auto base = [&](const std::vector<bool>& per_slot) {
      return std::vector<bool>(per_slot.begin(), per_slot.begin() + static_cast<ptrdiff_t>(base_slots_));
    };
    view.pinned = base(pinned_);
    view.overwritable = base(overwritable_);
    view.is_initializer = base(is_initializer_);
    return view;
  }

  // Steps in original order, with each recomputation before the original step at its `insert`; the
  // backward steps of its window (and the recomputations among them) read the copy.
  void InsertRecomputation(const std::vector<Recompute>& list) {
    for (size_t i = 0; i < list.size(); ++i)
      AddSlot(base_[list[i].producer].node->outputs[0] + "\x1frecomputed" + std::to_string(i));
    std::vector<Step> steps;
    for (ExpandedStep& e : ExpandRecomputation(BudgetSteps(), forward_end_, base_slots_, list)) {
      if (e.entry == kNoValue) {
        steps_[e.original].inputs = std::move(e.inputs);
        steps.push_back(std::move(steps_[e.original]));
        continue;
      }
      const BaseStep& original = base_[e.original];
      Step again;
      again.node = original.node;
      again.kernel = original.kernel;
      again.opset = original.opset;
      again.inputs = std::move(e.inputs);
      again.outputs = std::move(e.outputs);  // only the copy; the other outputs go to scratch
      KeepAttributes(again);
      steps.push_back(std::move(again));
    }
    steps_ = std::move(steps);
  }

  // Recompiles with the fewest greedy picks whose plan fits the budget; the sizes are this measuring
  // run's. Throws kResourceExhausted naming the smallest arena found when none fits.
  uint64_t PlanWithinBudget() {
    std::vector<uint64_t> measured(base_slots_, 0);
    for (size_t s = 0; s < values_.size(); ++s) {
      if (define_step_[s] < 0) continue;
      const size_t original = s < base_slots_ ? s : recompute_[s - base_slots_].value;
      measured[original] = std::max(measured[original], planned_bytes_[s]);
    }
    auto place = [&](const std::vector<Recompute>& list) {
      Compile(list);
      for (size_t k = 0; k < steps_.size(); ++k)
        for (size_t s : steps_[k].outputs) {
          if (s == kNoSlot || define_step_[s] >= 0 || pinned_[s] || view_root_[s] != s) continue;
          const uint64_t bytes = measured[s < base_slots_ ? s : recompute_[s - base_slots_].value];
          if (bytes == 0) continue;
          define_step_[s] = static_cast<int64_t>(k);
          planned_bytes_[s] = bytes;
        }
      return Place();
    };
    return BudgetPlanner(BudgetView(), measured).PlanWithin(budget_, place, model_.source);
  }

  template <typename... What>
  void CheckMemoryLimit(uint64_t bytes, const What&... what) const {
    if (limit_ == 0) return;
    const uint64_t needed = bytes > UINT64_MAX - held_bytes_ ? UINT64_MAX : held_bytes_ + bytes;
    ET_CHECK(needed <= limit_, ErrorCode::kResourceExhausted, "model '", model_.source, "' needs at least ", needed,
             " bytes (", held_bytes_, " held by the session and ", bytes, " for ", what...,
             "), more than the memory limit of ", limit_, " bytes");
  }

  const Graph& graph_;
  const Model& model_;
  ThreadPool* threads_;
  std::mt19937_64* rng_;
  const GraphExecutor* parent_;
  bool plan_memory_;

  std::unordered_map<std::string, size_t> slot_of_;
  std::vector<RuntimeValue> values_;
  std::vector<std::pair<size_t, Tensor>> initializer_values_;
  std::vector<std::pair<size_t, std::string>> outer_slots_;
  std::vector<Step> steps_;
  UnrequestedOutputs unrequested_;
  std::vector<bool> pinned_;  // never released or placed in the arena during a run
  std::vector<bool> is_initializer_;
  std::vector<bool> overridable_;    // per slot: a graph input (an initializer a feed may replace)
  std::vector<size_t> input_slots_;  // the graph inputs'
  std::vector<Tensor> bound_;        // per slot: where a bound output is written (BindOutput)
  std::vector<bool> overwritable_;   // per slot: fed values a kernel may overwrite (AllowOverwrite)
  std::vector<size_t> view_root_;    // per slot: the value whose memory it views (itself if none)
  std::vector<int64_t> last_use_, define_step_, planned_offset_;
  std::vector<uint64_t> planned_bytes_;
  Tensor arena_;
  uint64_t planned_peak_ = 0;
  std::vector<int64_t> signature_, plan_signature_;  // feed slots and shapes of this run / of the plan
  bool plan_valid_ = false;
  uint64_t limit_ = 0, held_bytes_ = 0;  // the memory limit (0: none) and the bytes held outside the arena
  uint64_t live_bytes_ = 0;              // a measuring run's intermediate tensors alive now
  std::vector<uint64_t> live_by_slot_;
  bool run_planned_ = false, plan_broken_ = false;  // state of the run in progress
  std::atomic<bool> in_use_{false};  // a run is in progress (a concurrent one is refused)
  // Gradient checkpointing (SetArenaBudget): the original steps, where the forward pass ends and what is
  // recomputed now.
  struct BaseStep {
    const Node* node;
    const OpKernelEntry* kernel;
    int64_t opset;
    std::vector<size_t> inputs, outputs;
  };
  std::vector<BaseStep> base_;
  size_t base_slots_ = 0, forward_end_ = 0;
  std::vector<Recompute> recompute_;
  uint64_t budget_ = 0;
  std::unordered_map<const Graph*, std::unique_ptr<GraphExecutor>> children_;
};

std::vector<RuntimeValue> StepContext::RunSubgraph(const Graph& graph, const std::vector<RuntimeValue>& inputs) {
  ET_CHECK(executor_ != nullptr, ErrorCode::kNotImplemented, node_->Describe(),
           ": subgraphs cannot run in this context");
  return executor_->RunSubgraph(graph, inputs);
}

bool StepContext::InputMayBeOverwritten(size_t i) const {
  return executor_ != nullptr && i < inputs_.size() && executor_->MayOverwrite(step_, i);
}

bool StepContext::InputMayBeClobbered(size_t i) const {
  return executor_ != nullptr && i < inputs_.size() && executor_->MayClobber(step_, i);
}

bool StepContext::InputIsConstant(size_t i) const {
  return executor_ != nullptr && i < inputs_.size() && executor_->IsConstant(step_, i);
}

Session::Session(Model model, SessionOptions options)
    : model_(std::move(model)),
      options_(options),
      threads_(std::make_unique<ThreadPool>(options.num_threads)),
      rng_(options.seed) {
  std::vector<std::string> missing = UnsupportedOperators(model_.graph, model_);
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 20; ++i) list += (i ? ", " : "") + missing[i];
    if (missing.size() > 20) list += ", ... (" + std::to_string(missing.size()) + " in all)";
    if (const char* config = OpRegistry::ReducedConfig())
      Fail(ErrorCode::kNotImplemented, model_.source, ": operators left out of this operator-reduced build (", config,
           " does not list them; `edgetrain reduce-ops MODEL...` lists what models need): ", list);
    Fail(ErrorCode::kNotImplemented, model_.source, ": unsupported operators: ", list,
         GetOnnxSchemaHooks() ? "" : " (a device-only build has no ONNX schemas: an ONNX function op there must be "
                                     "expanded offline, as edgetrain generate-artifacts does)");
  }
  if (const char* config = OpRegistry::ReducedConfig()) {
    std::vector<const Graph*> scopes;
    if (std::string left_out = LeftOutElementType(model_.graph, model_, scopes); !left_out.empty())
      Fail(ErrorCode::kNotImplemented, model_.source, ": element type ", left_out, " is left out of this ",
           "operator-reduced build (", config, " lists it for no operator; `edgetrain reduce-ops MODEL...` lists ",
           "what models need)");
  }
  if (options_.constant_folding) {
    auto can_fold = [&](const Node& n) {
      constexpr size_t kSmallConstantBytes = size_t{64} << 10;
      for (const std::string& input : n.inputs) {
        auto it = model_.graph.initializers.find(input);
        if (it != model_.graph.initializers.end() && it->second.nbytes() >= kSmallConstantBytes &&
            options_.shared_initializers.count(input))
          return false;
      }
      const OpKernelEntry* e = OpRegistry::Global().Find(n.domain, n.op_type, NodeOpset(n, model_));
      return e && e->deterministic;
    };
    auto evaluate = [&](const Node& n, const std::vector<Tensor>& inputs) {
      return EvaluateNode(n, NodeOpset(n, model_), inputs, threads_.get(), &rng_, model_.graph);
    };
    FoldConstants(model_.graph, evaluate, can_fold);
  }
  if (options_.fuse_operators) {
    const OpRegistry& ops = OpRegistry::Global();  // an operator-reduced build may lack a fused kernel
    if (ops.Find("", "Identity", model_.OpsetFor(""))) RemoveDropoutsThatDropNothing(model_.graph);
    FoldBatchNormIntoConv(model_.graph);
    if (ops.Find(kEdgetrainDomain, "ConvReluMaxPool", 1)) FuseConvReluMaxPool(model_.graph);
    if (ops.Find("", "LSTM", 14) && ops.Find(kEdgetrainDomain, "LSTMGrad", 1)) KeepRecurrentTraces(model_.graph);
    if (ops.Find("", "Concat", 13)) JoinSliceGradients(model_.graph);
    FoldTransposesIntoProducts(model_.graph, ops.Find(kMicrosoftDomain, "FusedMatMul", 1) != nullptr);
    FuseReluIntoProducers(model_.graph, ops.Find(kMicrosoftDomain, "FusedConv", 1) != nullptr,
                          ops.Find(kMicrosoftDomain, "FusedGemm", 1) != nullptr);
    if (ops.Find(kEdgetrainDomain, "Silu", 1)) FuseSilu(model_.graph);
    if (ops.Find(kEdgetrainDomain, "BatchNormalizationRelu", 1) &&
        ops.Find(kEdgetrainDomain, "BatchNormalizationClip", 1))
      FuseBatchNormActivation(model_.graph, ops.Find(kEdgetrainDomain, "BatchNormalizationSilu", 1) != nullptr);
    if (ops.Find(kEdgetrainDomain, "ChannelAffine", 1)) ShareBatchNormAffine(model_.graph);
    if (ops.Find(kEdgetrainDomain, "BatchNormalizationActivationGrad", 1))
      FuseActivationGradIntoBatchNormGrad(model_.graph);
    if (ops.Find(kEdgetrainDomain, "ChannelAffine", 1)) FuseSiluIntoChannelAffine(model_.graph);
    if (ops.Find(kEdgetrainDomain, "MulAdd", 1)) FuseMulAdd(model_.graph);
    if (ops.Find(kEdgetrainDomain, "ChannelAffineConv", 1) && ops.Find(kEdgetrainDomain, "ChannelAffineConvGrad", 1))
      FoldChannelAffineIntoDepthwiseConv(model_.graph);
  }
  EliminateDeadNodes(model_.graph);
  executor_ = std::make_unique<GraphExecutor>(model_.graph, model_, threads_.get(), &rng_, nullptr, true);
  for (const auto& in : model_.graph.inputs) {
    const bool required = !model_.graph.IsInitializer(in.name);
    input_slots_[in.name] = {&in, executor_->SlotOf(in.name), required};
    if (!required) continue;
    inputs_.push_back(&in);
    input_names_.push_back(in.name);
  }
  for (const auto& out : model_.graph.outputs) {
    output_names_.push_back(out.name);
    output_slots_[out.name] = executor_->SlotOf(out.name);
  }
  for (const auto& [name, tensor] : model_.graph.initializers) initializer_bytes_ += tensor.nbytes();
  if (options_.memory_limit_bytes != 0) SetMemoryLimit(options_.memory_limit_bytes);
}

ImportOptions ExecutionImportOptions() {
  ImportOptions options;
  options.has_kernel = [](const std::string& domain, const std::string& op, int64_t opset) {
    return OpRegistry::Global().Find(domain, op, opset) != nullptr;
  };
  options.complete_types = InferTypesByRules;
  return options;
}

ImportOptions RuntimeImportOptions() {
  ImportOptions options = ExecutionImportOptions();
  options.infer_shapes = false;
  options.needs_shapes = [](const std::string& domain, const std::string& op, int64_t opset) {
    const OpKernelEntry* entry = OpRegistry::Global().Find(domain, op, opset);
    return !entry || entry->reads_declared_outputs;
  };
  return options;
}

ExportOptions ExecutionExportOptions() {
  ExportOptions options;
  options.function_of = [](const std::string& domain, const std::string& op) -> const FunctionDef* {
    const OpKernelEntry* entry = OpRegistry::Global().Find(domain, op, 1);
    return entry != nullptr ? entry->function.get() : nullptr;
  };
  options.exported_without_body = [](const std::string& domain, const std::string& op) {
    const OpKernelEntry* entry = OpRegistry::Global().Find(domain, op, 1);
    return entry != nullptr && !entry->function;
  };
  return options;
}

Session Session::FromFile(const std::string& path, SessionOptions options) {
  return Session(LoadModel(path, ExecutionImportOptions()), options);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;

void Session::BindOutput(const std::string& name, const Tensor& target) {
  auto it = output_slots_.find(name);
  ET_CHECK(it != output_slots_.end(), ErrorCode::kInvalidArgument, model_.source, ": cannot bind '", name,
           "': it is not an output of the model");
  if (it->second != kNoSlot) executor_->BindOutput(it->second, target);
}

void Session::AllowOverwrite(const std::string& name) {
  auto it = input_slots_.find(name);
  ET_CHECK(it != input_slots_.end() && it->second.required, ErrorCode::kInvalidArgument, model_.source,
           ": cannot let input '", name, "' be overwritten: it is not an input of the model");
  executor_->AllowOverwrite(it->second.slot);
}

size_t Session::planned_peak_bytes() const { return executor_->arena_bytes(); }

void Session::SetArenaBudget(uint64_t bytes) { executor_->SetArenaBudget(bytes); }

size_t Session::recomputed_values() const { return executor_->recomputed_values(); }

void Session::SetMemoryLimit(uint64_t limit, uint64_t held_elsewhere) {
  const uint64_t held = held_elsewhere > UINT64_MAX - initializer_bytes_ ? UINT64_MAX : held_elsewhere + initializer_bytes_;
  ET_CHECK(limit == 0 || held <= limit, ErrorCode::kResourceExhausted, "model '", model_.source, "' needs at least ",
           held, " bytes (", initializer_bytes_, " of initializers, ", held_elsewhere,
           " held elsewhere by the session) before it runs, more than the memory limit of ", limit, " bytes");
  executor_->SetMemoryLimit(limit, held);
}

void Session::SetSeed(uint64_t seed) { rng_.seed(seed); }

Session::PreparedRun Session::Prepare(const std::vector<std::string>& feed_names,
                                      const std::vector<std::string>& fetch_names) const {
  PreparedRun run;
  run.feed_names = feed_names;
  run.fetch_names = fetch_names.empty() ? output_names_ : fetch_names;
  size_t required_fed = 0;
  for (const std::string& name : feed_names) {
    auto found = input_slots_.find(name);
    if (found == input_slots_.end())
      Fail(ErrorCode::kInvalidArgument, model_.source, ": '", name,
           "' is not an input of the model (inputs: ", JoinNames(input_names_), ")");
    ET_CHECK(std::find(run.feed_slots.begin(), run.feed_slots.end(), found->second.slot) == run.feed_slots.end(),
             ErrorCode::kInvalidArgument, model_.source, ": input '", name, "' is fed twice");
    required_fed += found->second.required;
    run.feed_infos.push_back(found->second.info);
    run.feed_slots.push_back(found->second.slot);
  }
  if (required_fed < inputs_.size())
    for (const auto* in : inputs_)
      ET_CHECK(std::count(feed_names.begin(), feed_names.end(), in->name), ErrorCode::kInvalidArgument, model_.source,
               ": missing input '", in->name, "' (", TypeToString(*in), ")");
  for (const std::string& name : run.fetch_names) {
    auto it = output_slots_.find(name);
    ET_CHECK(it != output_slots_.end(), ErrorCode::kInvalidArgument, model_.source, ": '", name,
             "' is not an output of the model");
    run.fetch_slots.push_back(it->second);
  }
  return run;
}

// Checks one fed value against its declaration. The messages name the input as "<model>: input
// '<name>'" and are built only when a check fails.
void Session::CheckFeed(const std::string& name, const ValueInfo& declared, const RuntimeValue& value) {
  const std::string& source = model_.source;
  if (declared.is_optional && value.is_none()) return;
  if (declared.is_sequence || value.is_sequence) {
    ET_CHECK(declared.is_sequence == value.is_sequence, ErrorCode::kInvalidArgument, source, ": input '", name,
             "' expects ", TypeToString(declared));
    return;
  }
  const Tensor& t = value.tensor;
  ET_CHECK(t.defined(), ErrorCode::kInvalidArgument, source, ": input '", name, "' was fed an empty tensor",
           declared.is_optional ? "" : " (None is only for optional inputs)");
  if (declared.dtype != DataType::kUndefined)
    ET_CHECK(t.dtype() == declared.dtype, ErrorCode::kInvalidArgument, source, ": input '", name, "' expects ",
             TypeToString(declared), " but was fed ", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  if (!declared.has_shape) return;
  ET_CHECK(t.rank() == declared.shape.size(), ErrorCode::kInvalidArgument, source, ": input '", name, "' expects rank ",
           declared.shape.size(), " (", TypeToString(declared), ") but was fed shape ", ShapeToString(t.shape()));
  for (size_t d = 0; d < t.rank(); ++d) {
    const Dim& dim = declared.shape[d];
    if (dim.known()) {
      ET_CHECK(t.dim(d) == dim.value, ErrorCode::kInvalidArgument, source, ": input '", name, "' expects ",
               TypeToString(declared), " but was fed shape ", ShapeToString(t.shape()), " (dimension ", d, ")");
    } else if (!dim.symbol.empty()) {
      auto same = [&](const auto& entry) { return *entry.first == dim.symbol; };
      auto it = std::find_if(symbol_values_.begin(), symbol_values_.end(), same);
      if (it == symbol_values_.end()) {
        symbol_values_.emplace_back(&dim.symbol, t.dim(d));
        continue;
      }
      ET_CHECK(it->second == t.dim(d), ErrorCode::kInvalidArgument, source, ": input '", name, "': dimension ", d,
               " ('", dim.symbol, "') is ", t.dim(d), " but another input has '", dim.symbol, "' = ", it->second);
    }
  }
}

void Session::RunPrepared(const PreparedRun& run, const std::vector<RuntimeValue>& feeds,
                          std::vector<RuntimeValue>& outputs) {
  ET_CHECK(feeds.size() == run.feed_names.size(), ErrorCode::kInvalidArgument, model_.source, ": ", feeds.size(),
           " values fed for ", run.feed_names.size(), " prepared inputs (", JoinNames(run.feed_names), ")");
  symbol_values_.clear();
  for (size_t i = 0; i < feeds.size(); ++i) CheckFeed(run.feed_names[i], *run.feed_infos[i], feeds[i]);
  executor_->Run(run.feed_slots, feeds, run.fetch_slots, outputs);
}

std::vector<RuntimeValue> Session::RunValues(const std::map<std::string, RuntimeValue>& feeds,
                                             const std::vector<std::string>& fetches) {
  std::vector<std::string> names;
  std::vector<RuntimeValue> values;
  for (const auto& [name, value] : feeds) {
    names.push_back(name);
    values.push_back(value);
  }
  std::vector<RuntimeValue> outputs;
  RunPrepared(Prepare(names, fetches), values, outputs);
  return outputs;
}

std::vector<Tensor> Session::Run(const std::map<std::string, Tensor>& feeds, const std::vector<std::string>& fetches) {
  std::map<std::string, RuntimeValue> values;
  for (const auto& [name, t] : feeds) values[name].tensor = t;
  std::vector<Tensor> out;
  for (auto& v : RunValues(values, fetches)) {
    ET_CHECK(!v.is_sequence, ErrorCode::kInvalidArgument, model_.source, ": an output is a sequence; use RunValues");
    ET_CHECK(!v.is_none(), ErrorCode::kInvalidArgument, model_.source,
             ": an output is an empty optional (None); use RunValues");
    out.push_back(v.tensor);
  }
  return out;
}

}  // namespace edgetrain
