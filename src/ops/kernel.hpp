// The contract between the runtime and an operator's kernel. A kernel reads its inputs and
// attributes from a KernelContext, allocates each output through it, and throws edgetrain::Error
// (naming ctx.node().Describe()) on bad input. Kernels must not keep pointers across calls.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "core/threading.hpp"
#include "ir/graph.hpp"

namespace edgetrain {

// A value flowing through a graph: a tensor or a sequence of tensors. An optional value that holds
// nothing (None) is neither: no sequence and an undefined tensor.
struct RuntimeValue {
  Tensor tensor;
  TensorSequence sequence;
  bool is_sequence = false;
  bool is_none() const { return !is_sequence && !tensor.defined(); }
  static RuntimeValue Of(Tensor t) {
    RuntimeValue v;
    v.tensor = std::move(t);
    return v;
  }
};

// What a kernel keeps for its node from one run to the next: one object per user (NodeStateFor),
// in a list so that a user's object stays where it is when another user adds one.
struct KeptState {
  std::list<std::pair<const void*, std::shared_ptr<void>>> objects;
};

class KernelContext {
 public:
  virtual ~KernelContext() = default;

  const Node& node() const { return *node_; }
  // Opset version the model imports for this node's domain (e.g. 13 for Split-with-input).
  int64_t opset() const { return opset_; }
  ThreadPool& threads() const { return *threads_; }
  // Random source for RandomNormal/RandomUniform/Dropout, seeded by the session.
  std::mt19937_64& rng() const { return *rng_; }

  size_t NumInputs() const { return num_inputs_; }
  // True when input i is present (not omitted and not past the end).
  virtual bool HasInput(size_t i) const = 0;
  // Throws kInvalidModel naming the node when input i is absent or is a sequence.
  virtual const Tensor& Input(size_t i) const = 0;
  virtual const TensorSequence& InputSequence(size_t i) const = 0;
  virtual bool InputIsSequence(size_t i) const = 0;
  virtual const RuntimeValue& InputValue(size_t i) const = 0;

  size_t NumOutputs() const { return num_outputs_; }
  // True when output i is requested by the graph (not omitted, not past the end).
  virtual bool HasOutput(size_t i) const = 0;
  // Allocates output i. Its contents are uninitialised. If the output is not requested (or the node
  // has no output i) the tensor is still valid scratch memory, kept for the node's next run, so
  // kernels need not branch on HasOutput.
  virtual Tensor& Output(size_t i, const Shape& shape, DataType dtype) = 0;
  virtual void SetOutputSequence(size_t i, TensorSequence sequence) = 0;
  // Output i as an empty sequence for the kernel to fill; it keeps its capacity from run to run.
  virtual TensorSequence& OutputSequence(size_t i) = 0;
  // Sets output i to a tensor (copied into the output's memory), a sequence or None.
  void SetOutputValue(size_t i, const RuntimeValue& value);
  // Output i becomes an optional value holding nothing.
  virtual void SetOutputNone(size_t i) {
    Fail(ErrorCode::kNotImplemented, node_->Describe(), ": output ", i, " cannot be None in this context");
  }

  // Runs a subgraph attribute (If/Loop/Scan bodies) with the given inputs; outer-scope values are
  // visible to it. Returns its outputs in order.
  virtual std::vector<RuntimeValue> RunSubgraph(const Graph& graph, const std::vector<RuntimeValue>& inputs) = 0;

  // What the graph declares (or shape inference found) for output i; nullptr when nothing is known.
  // For ops whose inputs do not determine an output's shape (ORT's MaxPoolGrad).
  virtual const ValueInfo* DeclaredOutput(size_t i) const {
    (void)i;
    return nullptr;
  }

  // True when input i was fed by a caller that lets the session overwrite it (Session::AllowOverwrite)
  // and no later node reads it: a kernel may then write its result into the input's memory.
  virtual bool InputMayBeOverwritten(size_t i) const {
    (void)i;
    return false;
  }

  // True when the kernel may use input i's memory as scratch while it runs: a value no later step, caller
  // or other input of this node reads (a fed value as for InputMayBeOverwritten, or an intermediate at its
  // last read). Unlike InputMayBeOverwritten, no output may be left in that memory.
  virtual bool InputMayBeClobbered(size_t i) const {
    (void)i;
    return false;
  }

  // True when input i is a constant of the session (an initializer no feed can override): the same
  // values on every run, so a kernel may keep a transformed copy in its NodeState.
  virtual bool InputIsConstant(size_t i) const {
    (void)i;
    return false;
  }

  // What a kernel keeps for its node from one run to the next (weights packed from a constant input,
  // scratch memory), owned by the session and freed with it; null where nothing is kept (constant
  // folding). Use NodeStateFor.
  virtual KeptState* NodeState() { return nullptr; }
  // The node's kept object for `user` (the address of a variable that names one kind of state): empty
  // until that user stores one. Each user has its own, so two users of one node (a fused kernel's
  // conv scratch and pooling windows) never see each other's type.
  std::shared_ptr<void>* NodeStateFor(const void* user) {
    KeptState* state = NodeState();
    if (!state) return nullptr;
    for (auto& [owner, object] : state->objects)
      if (owner == user) return &object;
    return &state->objects.emplace_back(user, nullptr).second;
  }

  // The node's attributes as the operator's typed struct A (ops/attributes.hpp), parsed and checked
  // once when the session compiles and kept in the node's state; parsed here where nothing is kept.
  template <typename A>
  const A& Attributes();

  // Helpers for the common "attribute in old opsets, input in new ones" pattern:
  // returns input `index` as int64 values if present, else attribute `attr` if present, else nullopt.
  std::optional<Int64Vector> IntsFromInputOrAttr(size_t index, std::string_view attr) const;

 protected:
  const Node* node_ = nullptr;
  int64_t opset_ = 0;
  ThreadPool* threads_ = nullptr;
  std::mt19937_64* rng_ = nullptr;
  size_t num_inputs_ = 0, num_outputs_ = 0;
  std::vector<std::shared_ptr<void>> parsed_here_;  // Attributes() without a NodeState (constant folding)
};

// The key of attribute struct A among a node's kept objects.
template <typename A>
inline constexpr char kAttributesKey = 0;

template <typename A>
const A& KernelContext::Attributes() {
  std::shared_ptr<void>* kept = NodeStateFor(&kAttributesKey<A>);
  if (kept && *kept) return *static_cast<const A*>(kept->get());
  auto parsed = std::make_shared<A>(A::Parse(*node_, opset_));
  const A& result = *parsed;
  if (kept) *kept = std::move(parsed);
  else parsed_here_.push_back(std::move(parsed));
  return result;
}

// Memory for a kernel's per-call temporaries, kept in the node's state between runs so that a warm
// run allocates nothing; a buffer of its own where the context keeps no state.
template <typename T>
class NodeScratch {
 public:
  NodeScratch(KernelContext& ctx, size_t count) {
    static constexpr char kUser = 0;
    std::shared_ptr<void>* state = ctx.NodeStateFor(&kUser);
    if (state && *state) {
      buffer_ = std::static_pointer_cast<std::vector<T>>(*state);
    } else {
      buffer_ = std::make_shared<std::vector<T>>();
      if (state) *state = buffer_;
    }
    if (buffer_->size() < count) buffer_->resize(count);
  }
  // The next `n` values (contents unspecified); at most `count` in all.
  std::span<T> Take(size_t n) {
    ET_CHECK(used_ + n <= buffer_->size(), ErrorCode::kInternal, "NodeScratch: ", used_ + n, " values taken, ",
             buffer_->size(), " reserved");
    const std::span<T> part(buffer_->data() + used_, n);
    used_ += n;
    return part;
  }

 private:
  std::shared_ptr<std::vector<T>> buffer_;
  size_t used_ = 0;
};

using KernelFn = std::function<void(KernelContext&)>;

// An operator's attributes parsed and checked for one node (throws a typed error naming the node, the
// attribute and its value), as the kept object KernelContext::Attributes finds.
using AttributeParser = std::pair<const void*, std::shared_ptr<void>> (*)(const Node& node, int64_t opset);
// An operator's output types from its inputs' (nullptr: unknown or absent) and its attributes; an output it
// cannot tell has dtype kUndefined. Fills in what libonnx's shape inference leaves unknown.
using ShapeRule = std::vector<ValueInfo> (*)(const Node& node, int64_t opset,
                                             const std::vector<const ValueInfo*>& inputs);

class GradientContext;  // ops/gradient.hpp
using GradientFn = std::function<void(GradientContext&)>;

struct OpKernelEntry {
  std::string domain;  // "" for ONNX
  std::string op_type;
  int64_t since_version = 1;   // first opset this kernel implements
  int64_t until_version = 1 << 30;  // last opset (inclusive)
  KernelFn kernel;
  bool deterministic = true;  // false for random ops: never constant-folded
  bool in_place = false;      // element-wise: an output may share memory with the input it replaces
  bool reads_declared_outputs = false;  // calls KernelContext::DeclaredOutput (needs shape inference)
  // Output 0 holds input 0's elements in order (Reshape, Identity...): the executor may hand the
  // kernel a view of the input as its output, and the kernel then copies nothing (same address).
  bool output_views_input = false;
  GradientFn gradient;        // emits the backward nodes (ops/gradient.hpp); null: not differentiable
  std::shared_ptr<const FunctionDef> function;  // ai.edgetrain ops: the same op in standard ONNX ops
  AttributeParser parse_attributes = nullptr;  // run once per node when a session compiles
  ShapeRule shape_rule = nullptr;
};

class OpRegistry {
 public:
  // The registered entry, for setting its remaining fields (valid until the next Register).
  OpKernelEntry& Register(OpKernelEntry entry);
  // Attaches a gradient rule to every registered opset range of (domain, op_type).
  // A device-only build (EDGETRAIN_DEVICE_ONLY) has no autodiff: the rules are dropped here, so never linked.
  template <typename Rule>
  void SetGradient(const std::string& domain, const std::string& op_type, Rule&& rule) {
#ifdef EDGETRAIN_DEVICE_ONLY
    (void)domain, (void)op_type, (void)rule;
#else
    SetGradientRule(domain, op_type, GradientFn(std::forward<Rule>(rule)));
#endif
  }
  template <typename Rule>
  void SetGradient(const std::string& op_type, Rule&& rule) { SetGradient("", op_type, std::forward<Rule>(rule)); }
  // The kernel for op at `opset`, or nullptr.
  const OpKernelEntry* Find(const std::string& domain, const std::string& op_type, int64_t opset) const;
  bool Knows(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> OpNames() const;  // "domain:op" (or "op") of every registered kernel
  const std::vector<OpKernelEntry>& Entries() const { return entries_; }

  // The registry holding every operator of edgetrain (built once, see ops/registry.cpp).
  static const OpRegistry& Global();
  // The -DEDGETRAIN_OPS_CONFIG file of an operator-reduced build (README, Reduced builds); nullptr in a full build.
  static const char* ReducedConfig();

 private:
  void SetGradientRule(const std::string& domain, const std::string& op_type, GradientFn rule);
  void KeepConfigured();  // drops what a reduced build's config does not name
  std::vector<OpKernelEntry> entries_;
};

// Shorthand for registering a kernel that covers every opset of a default-domain op.
inline OpKernelEntry& RegisterOnnx(OpRegistry& r, const std::string& op_type, KernelFn fn, int64_t since = 1,
                                   int64_t until = 1 << 30) {
  OpKernelEntry entry;
  entry.op_type = op_type;
  entry.since_version = since;
  entry.until_version = until;
  entry.kernel = std::move(fn);
  return r.Register(std::move(entry));
}

// A kernel that draws random numbers: never constant-folded.
inline void RegisterRandomOnnx(OpRegistry& r, const std::string& op_type, KernelFn fn) {
  OpKernelEntry entry;
  entry.op_type = op_type;
  entry.kernel = std::move(fn);
  entry.deterministic = false;
  r.Register(std::move(entry));
}

// A com.microsoft operator (any opset; ORT's contrib ops are all version 1). `deterministic` false
// for random ops.
inline OpKernelEntry& RegisterMicrosoft(OpRegistry& r, const std::string& op_type, KernelFn fn,
                                        bool deterministic = true) {
  OpKernelEntry entry;
  entry.domain = kMicrosoftDomain;
  entry.op_type = op_type;
  entry.kernel = std::move(fn);
  entry.deterministic = deterministic;
  return r.Register(std::move(entry));
}

// The standard-ONNX body of a backward or optimizer op, which only artifact generation (offline) writes: a
// device-only build, which exports only inference models, leaves it out.
#ifdef EDGETRAIN_DEVICE_ONLY
#define ET_TRAINING_BODY(body) (false ? (body) : std::shared_ptr<const FunctionDef>())  // named, never built
#else
#define ET_TRAINING_BODY(body) (body)
#endif

// An ai.edgetrain operator: its kernel and its definition in standard ONNX ops.
inline OpKernelEntry& RegisterFused(OpRegistry& r, const std::string& op_type, KernelFn fn,
                                    std::shared_ptr<const FunctionDef> function) {
  OpKernelEntry entry;
  entry.domain = kEdgetrainDomain;
  entry.op_type = op_type;
  entry.kernel = std::move(fn);
  entry.function = std::move(function);
  return r.Register(std::move(entry));
}

}  // namespace edgetrain
