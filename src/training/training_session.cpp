#include "training/training_session.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include "core/error.hpp"
#include "core/text.hpp"
#include "ir/passes.hpp"
#include "onnx/exporter.hpp"
#include "onnx/importer.hpp"
#include "runtime/export_options.hpp"
#include "training/artifact_contract.hpp"
#include "training/frozen_prefix.hpp"
#include "training/ort_layout.hpp"

namespace edgetrain {

ModelSource ModelSource::FromBuffer(const void* data, size_t size, std::string name) {
  ModelSource source;
  source.data = data;
  source.size = size;
  source.buffer_name = std::move(name);
  return source;
}

namespace {

constexpr float kDefaultLearningRate = 1e-3f;

Model LoadSource(const ModelSource& source) {
  if (!source.path.empty()) return LoadModel(source.path, RuntimeImportOptions());
  ET_CHECK(source.data != nullptr, ErrorCode::kInvalidArgument, "model buffer '", source.buffer_name, "' is null");
  return LoadModelFromBuffer(source.data, source.size, source.buffer_name, ".", RuntimeImportOptions());
}

// Checks a parameter tensor against the model input that receives it.
void CheckParameterFits(const Tensor& value, const ValueInfo& input, const std::string& model) {
  ET_CHECK(value.dtype() == input.dtype, ErrorCode::kInvalidArgument, "checkpoint parameter '", input.name, "' is ",
           DataTypeName(value.dtype()), " but the ", model, " model expects ", DataTypeName(input.dtype));
  if (!input.has_shape) return;
  bool fits = value.rank() == input.shape.size();
  for (size_t i = 0; fits && i < input.shape.size(); ++i)
    fits = !input.shape[i].known() || input.shape[i].value == value.dim(i);
  ET_CHECK(fits, ErrorCode::kInvalidArgument, "checkpoint parameter '", input.name, "' has shape ",
           ShapeToString(value.shape()), " but the ", model, " model expects a different shape");
}

Shape StaticShape(const ValueInfo& info) {
  ET_CHECK(info.has_shape, ErrorCode::kInvalidArgument, "parameter '", info.name,
           "' has no static shape in the training model (needed to allocate a nominal checkpoint's parameters)");
  Shape shape;
  for (const Dim& d : info.shape) {
    ET_CHECK(d.known(), ErrorCode::kInvalidArgument, "parameter '", info.name,
             "' has no static shape in the training model (needed to allocate a nominal checkpoint's parameters)");
    shape.push_back(d.value);
  }
  return shape;
}

void CopyInto(Tensor& target, const Tensor& source, const std::string& name) {
  ET_CHECK(target.dtype() == source.dtype() && target.numel() == source.numel(), ErrorCode::kInvalidModel, "'", name,
           "': the model produced ", DataTypeName(source.dtype()), " ", ShapeToString(source.shape()),
           " for a tensor that is ", DataTypeName(target.dtype()), " ", ShapeToString(target.shape()));
  std::memcpy(target.raw(), source.raw(), source.nbytes());
}

void AddInto(Tensor& target, const Tensor& source, const std::string& name) {
  ET_CHECK(target.dtype() == source.dtype() && target.numel() == source.numel(), ErrorCode::kInvalidModel, "'", name,
           "': gradient of shape ", ShapeToString(source.shape()), " does not fit its buffer ",
           ShapeToString(target.shape()));
  VisitFloat(target.dtype(), "gradient accumulation", [&]<typename T>(TypeTag<T>) {
    T* out = target.data<T>();
    const T* in = source.data<T>();
    for (int64_t i = 0; i < target.numel(); ++i) out[i] += in[i];
  });
}

// A one-value feed shaped as `input` declares it: [] or ORT's [1].
template <typename T>
Tensor ScalarFeed(T value, const ValueInfo& input) {
  Shape shape = input.has_shape && input.shape.size() == 1 ? Shape{1} : Shape{};
  return Tensor::FromVector<T>({value}, shape);
}

const ValueInfo& InputInfo(const Session& session, const std::string& name) {
  for (const ValueInfo* input : session.Inputs())
    if (input->name == name) return *input;
  Fail(ErrorCode::kInvalidModel, "model '", session.model().source, "' has no input '", name, "'");
}

// Puts a result into the caller's output slot. A result computed into the tensor already there
// (output binding) borrows its memory, so the caller's owning tensor stays, reshaped if need be.
void KeepResult(Tensor& slot, const Tensor& result) {
  if (!result.SameData(slot)) {
    slot = result;
  } else if (slot.shape() != result.shape()) {
    slot = slot.Reshaped(result.shape());
  }
}

void CheckInputCount(const char* step, const std::vector<std::string>& expected, const std::vector<Tensor>& inputs) {
  ET_CHECK(inputs.size() == expected.size(), ErrorCode::kInvalidArgument, step, ": expected ", expected.size(),
           " inputs (", JoinNames(expected), "), got ", inputs.size());
}

}  // namespace

// One model's run with its feeds and results kept between steps: a step refreshes the feeds in
// place and allocates nothing once warm.
struct Runner {
  Session::PreparedRun run;
  std::vector<RuntimeValue> feeds;                     // in run.feed_names order
  std::vector<std::pair<size_t, const Tensor*>> live;  // feeds[i] = *tensor before each run
  std::vector<size_t> caller_inputs;                   // feeds position of the caller's input j (kUnread: none)
  std::vector<RuntimeValue> results;                   // in run.fetch_names order
  static constexpr size_t kUnread = std::numeric_limits<size_t>::max();

  void Run(Session& session, const std::vector<Tensor>& inputs) {
    for (const auto& [i, tensor] : live) feeds[i].tensor = *tensor;
    for (size_t j = 0; j < caller_inputs.size(); ++j)
      if (caller_inputs[j] != kUnread) feeds[caller_inputs[j]].tensor = inputs[j];
    session.RunPrepared(run, feeds, results);
  }
};

// What TrainStep does with each training-model output.
enum class OutputRole {
  kCaller,       // returned
  kStateUpdate,  // copied over a parameter (BatchNorm running statistics)
  kAccumulated,  // ORT's accumulated gradient, written into its buffer
  kFlag,         // ORT's "accumulated" flag, dropped
  kGradient,     // <param>_grad, written into or added to its buffer
};

// A sample's identity: a 128-bit hash of its rows in the prefix's inputs (bytes, dtype and row shape).
struct SampleKey {
  uint64_t a = 0, b = 0;
  bool operator==(const SampleKey&) const = default;
};
struct SampleKeyHash {
  size_t operator()(const SampleKey& k) const { return static_cast<size_t>(k.a); }
};

namespace {

uint64_t Fmix(uint64_t x) {  // MurmurHash3's 64-bit finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Two independent multiply-rotate lanes over 8-byte words.
void Absorb(SampleKey& k, const std::byte* p, size_t n) {
  auto word = [&](uint64_t w) {
    k.a = std::rotl(k.a ^ (w * 0x9e3779b97f4a7c15ULL), 27) * 0x87c37b91114253d5ULL;
    k.b = (std::rotl(k.b + w, 31) * 0x4cf5ad432745937fULL) ^ (k.b >> 29);
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    word(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  word(tail ^ (static_cast<uint64_t>(n) << 56));
  word(static_cast<uint64_t>(n));
}

}  // namespace

// The frozen prefix's outputs per sample (TrainingSessionOptions::cache_frozen_prefix).
struct PrefixCache {
  uint64_t limit = 0;
  std::vector<Shape> row_shapes;  // per boundary value: its shape without the batch axis
  std::vector<DataType> dtypes;
  std::vector<size_t> row_bytes;
  size_t sample_bytes = 0;
  std::unordered_map<SampleKey, std::unique_ptr<std::byte[]>, SampleKeyHash> rows;
  uint64_t bytes = 0, hits = 0, misses = 0;
  // Reused from step to step.
  std::vector<SampleKey> keys;
  std::vector<const std::byte*> found;
  std::vector<size_t> missing;
  std::vector<Tensor> gathered, assembled;

  static constexpr uint64_t kEntryOverhead = 64;  // the map node, the key, the allocation header
  void Clear() {
    rows.clear();
    bytes = 0;
    row_shapes.clear();
  }
};

struct TrainingSession::Impl {
  std::atomic<bool> in_use{false};  // a call is running: a second thread gets a typed error, not a race
  CheckpointState state;
  TrainingSessionOptions options;
  Model eval_model;  // as loaded, for InferenceModel
  std::optional<Session> training, eval, optimizer;

  std::vector<std::string> parameters;   // training-model inputs that come from the state, in order
  std::vector<std::string> trainable;    // the trainable ones, in the same order
  std::map<std::string, Tensor> values;  // the live parameter tensors (the checkpoint's own)
  std::map<std::string, Tensor> gradients;
  std::vector<std::string> train_inputs, train_outputs, eval_inputs, eval_outputs;
  bool reset_gradients = true;
  std::map<std::string, std::string> gradient_outputs;  // <param>_grad output -> param
  bool gradients_bound = false;  // the training model writes <param>_grad straight into the buffers

  // ORT's layout (ort_layout.hpp): the graph accumulates into buffers the session feeds.
  std::map<std::string, std::string> accumulation_buffers;  // buffer input -> parameter
  std::optional<OrtOptimizerLayout> ort_optimizer;
  struct TrainOutput {
    OutputRole role;
    Tensor* target;  // the parameter or gradient buffer it updates (null for kCaller, kFlag)
  };
  std::vector<TrainOutput> train_output_roles;  // per training-model output, in its order

  Runner train_runner, eval_runner, optimizer_runner;

  // The frozen prefix (frozen_prefix.hpp): `training` runs the rest of the graph.
  std::optional<FrozenPrefixSplit> split;
  std::set<std::string> boundary_names;
  std::optional<Session> prefix;
  SessionOptions prefix_options;
  bool prefix_stale = true;
  uint64_t prefix_revision = 0;
  Runner prefix_runner;
  std::vector<size_t> prefix_inputs;  // position in train_inputs of each split->inputs
  std::vector<Tensor> rest_feeds;     // train inputs, then the boundary values
  // Where the prefix writes its outputs run after run: fresh tensors would fault in new pages each step (12.8 MB of
  // MobileNetV2's stem, 8 ms).
  std::vector<Tensor> prefix_outputs;
  bool cache_enabled = false;
  PrefixCache cache;
  void BuildPrefix();
  const std::vector<Tensor>& RestFeeds(const std::vector<Tensor>& inputs);
  void RunPrefix(const std::vector<Tensor>& prefix_feeds);
  void RunPrefixCached(const std::vector<Tensor>& inputs);
  Tensor reset_flag, learning_rate_feed, step_feed;  // scalar feeds, rewritten in place each step
  bool updated_flag_bound = false, flags_bound = false;

  struct OptimizerInput {
    std::string name;
    Tensor* value = nullptr;  // a parameter, gradient or optimizer state tensor
  };
  std::vector<OptimizerInput> optimizer_inputs;                    // after learning_rate and step
  std::vector<std::pair<std::string, Tensor*>> optimizer_updates;  // output -> the tensor it overwrites
  float learning_rate = kDefaultLearningRate;
  std::optional<LRScheduler> scheduler;

  Checkpoint& checkpoint() { return state.checkpoint(); }
  void BindTrainingModel(const Model& model, const OrtAccumulators& accumulators);
  // The training model's inputs the caller feeds, and the frozen parameters that nothing updates.
  // `updated`: frozen parameters that the step updates (BatchNorm running statistics).
  void ClassifyInputs(const Model& model, const OrtAccumulators& accumulators, std::set<std::string>& caller,
                      std::set<std::string>& fixed, std::set<std::string>& updated);
  // What the training model's outputs and ORT's accumulators say about its inputs.
  struct TrainingRoles {
    std::set<std::string> with_gradient, with_state_update;  // parameters
    std::map<std::string, std::string> state_updates;        // training output -> parameter it overwrites
    std::map<std::string, std::string> accumulated_outputs;  // output -> parameter whose buffer it refills
  };
  TrainingRoles ClassifyTrainingModel(const Model& model, const OrtAccumulators& accumulators,
                                      const ParameterNames& by_checkpoint);
  void BindParameter(const ValueInfo& input, const Model& model, TrainingRoles& roles);
  void AssignTrainOutputRoles(const TrainingRoles& roles, const OrtAccumulators& accumulators,
                              const ParameterNames& by_checkpoint);
  void BindEvalModel();
  void BindOptimizerModel();
  void BindOrtOptimizerModel();
  std::vector<Tensor>& Moments(const std::string& param, size_t count);
  void InitLearningRate(bool resume);
  void RunOrtOptimizer();
  void CheckMaterialized(const char* what) const {
    ET_CHECK(!state.is_nominal(), ErrorCode::kInvalidArgument, what,
             ": the checkpoint is nominal; supply the parameters with CopyBufferToParameters(buffer, "
             "trainable_only=false) first");
  }
  // Bound while gradients are replaced; unbound while they accumulate (then added after the run).
  void BindGradientOutputs(bool bind) {
    if (bind == gradients_bound) return;
    for (const auto& [output, param] : gradient_outputs)
      training->BindOutput(output, bind ? gradients[param] : Tensor());
    gradients_bound = bind;
  }
  Runner PrepareRunner(const Session& session, const std::vector<std::string>& caller_inputs,
                       const std::vector<std::string>& fetches);
  void PrepareOptimizerRunner();
  // Results of the caller's outputs go into `outputs`' tensors where they fit (output binding).
  void BindCallerOutputs(Session& session, const std::vector<std::string>& names, const std::vector<Tensor>& outputs);
  std::vector<std::string> FlatParameters(bool trainable_only) const { return trainable_only ? trainable : parameters; }

  struct HeldMemory {
    uint64_t parameters = 0, gradients = 0, optimizer_state = 0, constants = 0, arenas = 0, cache = 0;
    uint64_t total() const { return parameters + gradients + optimizer_state + constants + arenas + cache; }
  };
  // What the session holds outside `running`'s arena (all of it when null).
  HeldMemory Held(const Session* running) const {
    HeldMemory held;
    const Checkpoint& c = state.checkpoint();
    for (const auto* tensors : {&c.trainable, &c.frozen})
      for (const auto& [name, tensor] : *tensors) held.parameters += tensor.nbytes();
    for (const auto& [name, tensor] : gradients) held.gradients += tensor.nbytes();
    if (c.optimizer)
      for (const auto& [name, moments] : c.optimizer->momentums)
        for (const Tensor& m : moments) held.optimizer_state += m.nbytes();
    held.cache = cache.bytes;
    for (const auto* session : {&training, &eval, &optimizer, &prefix})
      if (session->has_value()) {
        held.constants += (*session)->initializer_bytes();
        if (&**session != running) held.arenas += (*session)->planned_peak_bytes();
      }
    return held;
  }
  // Before a run of `session`: the memory limit, less what the rest of the session holds.
  void LimitMemory(Session& session) const {
    if (options.memory_limit_bytes == 0) return;
    session.SetMemoryLimit(options.memory_limit_bytes, Held(&session).total() - session.initializer_bytes());
  }
};

namespace {
ParameterNames NamesIn(const std::set<std::string>& set) {
  auto in = [&set](std::string_view name) { return set.count(std::string(name)) != 0; };
  return {in, in};
}
}  // namespace

TrainingSession::Impl::TrainingRoles TrainingSession::Impl::ClassifyTrainingModel(const Model& model,
                                                                                  const OrtAccumulators& accumulators,
                                                                                  const ParameterNames& by_checkpoint) {
  std::set<std::string> model_inputs;
  for (const ValueInfo& in : model.graph.inputs) model_inputs.insert(in.name);
  const ParameterNames model_parameters = NamesIn(model_inputs);
  TrainingRoles roles;
  for (const ValueInfo& out : model.graph.outputs) {
    ArtifactValue v = ClassifyOutput(ArtifactModel::kTraining, out.name, model_parameters);
    if (v.role == ArtifactRole::kGradient) roles.with_gradient.insert(v.parameter);
    if (v.role == ArtifactRole::kStateUpdate) roles.with_state_update.insert(v.parameter);
  }
  for (const auto& [buffer, output] : accumulators.accumulated_output) {
    ArtifactValue v = ClassifyInput(ArtifactModel::kTraining, buffer, by_checkpoint);
    ET_CHECK(v.role == ArtifactRole::kAccumulationBuffer, ErrorCode::kInvalidModel, "training model '", model.source,
             "': accumulation buffer '", buffer, "' is not named <parameter>", kOrtAccumulationBufferSuffix);
    accumulation_buffers[buffer] = v.parameter;
    roles.accumulated_outputs[output] = v.parameter;
    roles.with_gradient.insert(v.parameter);
  }
  return roles;
}

// A training-model input that the checkpoint holds: its tensor, its gradient buffer, its state update.
void TrainingSession::Impl::BindParameter(const ValueInfo& input, const Model& model, TrainingRoles& roles) {
  const std::string& name = input.name;
  const bool is_trainable = state.IsTrainable(name);
  parameters.push_back(name);
  if (state.is_nominal()) {
    DataType dtype = is_trainable ? checkpoint().nominal_trainable.at(name) : checkpoint().nominal_frozen.at(name);
    values[name] = Tensor::Zeros(dtype, StaticShape(input));
  } else {
    values[name] = is_trainable ? checkpoint().trainable.at(name) : checkpoint().frozen.at(name);
  }
  CheckParameterFits(values[name], input, "training");
  if (is_trainable) {
    ET_CHECK(roles.with_gradient.count(name), ErrorCode::kInvalidArgument, "trainable parameter '", name,
             "' has no gradient ('", GradientName(name), "' output or '", OrtAccumulationBufferName(name),
             "' input) in the training model '", model.source, "'");
    trainable.push_back(name);
    gradients[name] = Tensor::Zeros(values[name].dtype(), values[name].shape());
  }
  if (roles.with_state_update.count(name)) {
    // Written into a buffer of our own (the kernel reads the state it updates), then copied over.
    roles.state_updates[StateUpdateName(name)] = name;
    training->BindOutput(StateUpdateName(name), Tensor(values[name].dtype(), values[name].shape()));
  }
}

// What TrainStep does with each training-model output, in output order.
void TrainingSession::Impl::AssignTrainOutputRoles(const TrainingRoles& roles, const OrtAccumulators& accumulators,
                                                   const ParameterNames& by_checkpoint) {
  const std::vector<std::string>& flags = accumulators.flag_outputs;
  for (const std::string& name : training->OutputNames()) {
    if (auto it = roles.state_updates.find(name); it != roles.state_updates.end()) {
      train_output_roles.push_back({OutputRole::kStateUpdate, &values[it->second]});
    } else if (auto acc = roles.accumulated_outputs.find(name); acc != roles.accumulated_outputs.end()) {
      train_output_roles.push_back({OutputRole::kAccumulated, &gradients[acc->second]});
      training->BindOutput(name, gradients[acc->second]);  // the graph adds or overwrites in place
    } else if (std::count(flags.begin(), flags.end(), name)) {
      train_output_roles.push_back({OutputRole::kFlag, nullptr});
    } else if (ArtifactValue v = ClassifyOutput(ArtifactModel::kTraining, name, by_checkpoint);
               v.role == ArtifactRole::kGradient && gradients.count(v.parameter)) {
      gradient_outputs[name] = v.parameter;
      train_output_roles.push_back({OutputRole::kGradient, &gradients[v.parameter]});
    } else {
      train_output_roles.push_back({OutputRole::kCaller, nullptr});
      train_outputs.push_back(name);
    }
  }
}

void TrainingSession::Impl::BindTrainingModel(const Model& model, const OrtAccumulators& accumulators) {
  std::set<std::string> checkpoint_names;
  for (const std::string& name : state.ParameterNames()) checkpoint_names.insert(name);
  // The model says which of its inputs get a gradient or a state update; the checkpoint must hold them.
  const ParameterNames by_checkpoint = NamesIn(checkpoint_names);
  TrainingRoles roles = ClassifyTrainingModel(model, accumulators, by_checkpoint);
  for (const ValueInfo* input : training->Inputs()) {
    const std::string& name = input->name;
    ArtifactValue v = ClassifyInput(ArtifactModel::kTraining, name, by_checkpoint);
    if (v.role == ArtifactRole::kLazyResetGrad || accumulation_buffers.count(name) || boundary_names.count(name))
      continue;
    if (v.role == ArtifactRole::kParameter) {
      BindParameter(*input, model, roles);
      continue;
    }
    ET_CHECK(!roles.with_gradient.count(name) && !roles.with_state_update.count(name), ErrorCode::kInvalidArgument,
             "checkpoint has no parameter '", name, "', which the training model '", model.source, "' needs");
    train_inputs.push_back(name);
  }
  for (const std::string& name : checkpoint_names)
    ET_CHECK(values.count(name), ErrorCode::kInvalidArgument, "checkpoint parameter '", name,
             "' is not an input of the training model '", model.source, "'");
  for (const auto& [buffer, param] : accumulation_buffers)
    ET_CHECK(gradients.count(param), ErrorCode::kInvalidArgument, "training model '", model.source,
             "' accumulates the gradient of '", param, "', which is not a trainable parameter of the checkpoint");
  AssignTrainOutputRoles(roles, accumulators, by_checkpoint);
}

Runner TrainingSession::Impl::PrepareRunner(const Session& session, const std::vector<std::string>& caller_inputs,
                                            const std::vector<std::string>& fetches) {
  Runner r;
  r.run = session.Prepare(session.InputNames(), fetches);
  r.feeds.resize(r.run.feed_names.size());
  r.caller_inputs.assign(caller_inputs.size(), Runner::kUnread);
  for (size_t i = 0; i < r.run.feed_names.size(); ++i) {
    const std::string& name = r.run.feed_names[i];
    if (auto it = std::find(caller_inputs.begin(), caller_inputs.end(), name); it != caller_inputs.end()) {
      r.caller_inputs[static_cast<size_t>(it - caller_inputs.begin())] = i;
    } else if (auto value = values.find(name); value != values.end()) {
      r.live.emplace_back(i, &value->second);
    } else if (auto buffer = accumulation_buffers.find(name); buffer != accumulation_buffers.end()) {
      r.live.emplace_back(i, &gradients.at(buffer->second));
    } else if (name == kOrtLazyResetGradInput) {
      reset_flag = ScalarFeed<bool>(true, InputInfo(session, name));
      r.live.emplace_back(i, &reset_flag);
    } else {
      Fail(ErrorCode::kInvalidModel, "model '", session.model().source, "': input '", name,
           "' is neither a caller's input nor a checkpoint parameter");
    }
  }
  return r;
}

void TrainingSession::Impl::BindCallerOutputs(Session& session, const std::vector<std::string>& names,
                                              const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < names.size(); ++i) session.BindOutput(names[i], i < outputs.size() ? outputs[i] : Tensor());
}

void TrainingSession::Impl::BindEvalModel() {
  for (const ValueInfo* input : eval->Inputs()) {
    auto it = values.find(input->name);
    if (it == values.end()) {
      eval_inputs.push_back(input->name);
    } else {
      CheckParameterFits(it->second, *input, "eval");
    }
  }
  eval_outputs = eval->OutputNames();
}

std::vector<Tensor>& TrainingSession::Impl::Moments(const std::string& p, size_t count) {
  std::vector<Tensor>& moments = checkpoint().optimizer->momentums[p];
  if (moments.empty())
    for (size_t k = 0; k < count; ++k) moments.push_back(Tensor::Zeros(values[p].dtype(), values[p].shape()));
  ET_CHECK(moments.size() == count, ErrorCode::kInvalidArgument, "checkpoint optimizer state of parameter '", p,
           "' has ", moments.size(), " tensors, the optimizer model expects ", count);
  for (size_t k = 0; k < count; ++k)
    ET_CHECK(moments[k].dtype() == values[p].dtype() && moments[k].shape() == values[p].shape(),
             ErrorCode::kInvalidArgument, "checkpoint optimizer state ", k, " of parameter '", p, "' has shape ",
             ShapeToString(moments[k].shape()), ", the parameter has ", ShapeToString(values[p].shape()));
  return moments;
}

void TrainingSession::Impl::InitLearningRate(bool resume) {
  OptimizerState& opt = *checkpoint().optimizer;
  if (resume && opt.initial_learning_rate > 0) learning_rate = opt.initial_learning_rate;
  opt.initial_learning_rate = learning_rate;
}

void TrainingSession::Impl::BindOptimizerModel() {
  const std::string source = optimizer->model().source;
  std::vector<std::string> names = optimizer->InputNames();
  ET_CHECK(names.size() >= 2 && names[0] == kLearningRateInput && names[1] == kStepInput, ErrorCode::kInvalidModel,
           "optimizer model '", source, "' must start with the inputs learning_rate and step");
  const bool resume = checkpoint().optimizer.has_value();
  if (!resume) checkpoint().optimizer = OptimizerState{};

  std::set<std::string> trainable_names(trainable.begin(), trainable.end());
  auto is_trainable = [&](std::string_view n) { return trainable_names.count(std::string(n)) != 0; };
  const ParameterNames by_checkpoint{is_trainable, is_trainable};
  std::map<std::string, std::vector<std::string>> state_names;  // parameter -> its optimizer states, in order
  std::map<std::string, Tensor*> targets;
  for (size_t i = 2; i < names.size(); ++i) {
    const std::string& name = names[i];
    ArtifactValue v = ClassifyInput(ArtifactModel::kOptimizer, name, by_checkpoint);
    if (v.role == ArtifactRole::kParameter) {
      targets[name] = &values[name];
    } else if (v.role == ArtifactRole::kGradient) {
      targets[name] = &gradients[v.parameter];
    } else {
      ET_CHECK(v.role == ArtifactRole::kOptimizerState, ErrorCode::kInvalidModel, "optimizer model '", source,
               "': input '", name, "' is neither a trainable parameter of the checkpoint nor its gradient nor its "
               "optimizer state (<parameter>.<state>)");
      state_names[v.parameter].push_back(name);
    }
  }
  for (const std::string& p : trainable) {
    ET_CHECK(targets.count(p) && targets.count(GradientName(p)), ErrorCode::kInvalidArgument, "the optimizer model '",
             source, "' does not update trainable parameter '", p, "'");
    std::vector<Tensor>& moments = Moments(p, state_names[p].size());
    for (size_t k = 0; k < moments.size(); ++k) targets[state_names[p][k]] = &moments[k];
  }
  for (size_t i = 2; i < names.size(); ++i) optimizer_inputs.push_back({names[i], targets.at(names[i])});
  for (const std::string& out : optimizer->OutputNames()) {
    ArtifactValue v = ClassifyOutput(ArtifactModel::kOptimizer, out, by_checkpoint);
    const std::string updated = out.substr(0, out.size() - kStateUpdateSuffix.size());
    ET_CHECK(v.role == ArtifactRole::kParameterUpdate || v.role == ArtifactRole::kOptimizerStateUpdate,
             ErrorCode::kInvalidModel, "optimizer model '", source, "': output '", out,
             "' does not name an input it updates (<input>", kStateUpdateSuffix, ")");
    ET_CHECK(targets.count(updated), ErrorCode::kInvalidModel, "optimizer model '", source, "': output '", out,
             "' updates '", updated, "', which is not one of its inputs");
    optimizer_updates.emplace_back(out, targets.at(updated));
    optimizer->BindOutput(out, *optimizer_updates.back().second);  // updated in place where the kernel can
  }
  InitLearningRate(resume);
}

void TrainingSession::Impl::BindOrtOptimizerModel() {
  // The parameters and moments are updated in place (they are the checkpoint's own tensors).
  optimizer->AllowOverwrite(ort_optimizer->params);
  for (const std::string& state : ort_optimizer->states) optimizer->AllowOverwrite(state);
  const bool resume = checkpoint().optimizer.has_value();
  if (!resume) checkpoint().optimizer = OptimizerState{};
  for (const std::string& p : trainable) Moments(p, ort_optimizer->states.size());
  InitLearningRate(resume);
}

void TrainingSession::Impl::PrepareOptimizerRunner() {
  Runner& r = optimizer_runner;
  std::vector<std::string> feeds, fetches;
  if (ort_optimizer) {
    const OrtOptimizerLayout& layout = *ort_optimizer;
    feeds = {layout.learning_rate};
    if (!layout.step.empty()) feeds.push_back(layout.step);
    feeds.push_back(layout.params);
    feeds.push_back(layout.gradients);
    feeds.insert(feeds.end(), layout.states.begin(), layout.states.end());
    fetches = {layout.updated_flag, layout.updated_params};
    fetches.insert(fetches.end(), layout.updated_states.begin(), layout.updated_states.end());
  } else {
    feeds = optimizer->InputNames();
    for (const auto& update : optimizer_updates) fetches.push_back(update.first);
  }
  r.run = optimizer->Prepare(feeds, fetches);
  r.feeds.resize(feeds.size());
  learning_rate_feed = ScalarFeed<float>(0, InputInfo(*optimizer, feeds[0]));
  r.live.emplace_back(0, &learning_rate_feed);
  if (ort_optimizer && ort_optimizer->step.empty()) {
    for (size_t i = 1; i < feeds.size(); ++i) r.feeds[i].is_sequence = true;
    return;
  }
  step_feed = ScalarFeed<int64_t>(0, InputInfo(*optimizer, feeds[1]));
  r.live.emplace_back(1, &step_feed);
  for (size_t i = 2; i < feeds.size(); ++i) {
    if (ort_optimizer) {
      r.feeds[i].is_sequence = true;
    } else {
      r.live.emplace_back(i, optimizer_inputs[i - 2].value);
    }
  }
}

namespace {

// The first value of a flag or count tensor (bool or integer) as true/false.
bool FirstValueSet(const Tensor& t, const std::string& name) {
  ET_CHECK(t.numel() >= 1, ErrorCode::kInvalidModel, "optimizer output '", name, "' is empty");
  return t.Int64At(0) != 0;
}

}  // namespace

// One update through ORT's optimizer model: sequences in trainable-parameter order; the step count
// advances only when the model reports that the update ran.
void TrainingSession::Impl::RunOrtOptimizer() {
  const OrtOptimizerLayout& layout = *ort_optimizer;
  OptimizerState& opt = *checkpoint().optimizer;
  Runner& r = optimizer_runner;
  learning_rate_feed.data<float>()[0] = learning_rate;
  // ORT passes the number of the update about to run (bias correction counts from 1).
  if (!layout.step.empty()) step_feed.data<int64_t>()[0] = opt.step + 1;
  size_t next = layout.step.empty() ? 1 : 2;
  auto fill = [&](auto&& tensor_of) {
    TensorSequence& sequence = r.feeds[next++].sequence;
    sequence.resize(trainable.size());
    for (size_t i = 0; i < trainable.size(); ++i) sequence[i] = tensor_of(trainable[i]);
  };
  fill([&](const std::string& p) -> const Tensor& { return values.find(p)->second; });
  fill([&](const std::string& p) -> const Tensor& { return gradients.find(p)->second; });
  for (size_t k = 0; k < layout.states.size(); ++k)
    fill([&](const std::string& p) -> const Tensor& { return opt.momentums.find(p)->second[k]; });
  LimitMemory(*optimizer);
  r.Run(*optimizer, {});
  const std::vector<RuntimeValue>& results = r.results;
  if (!updated_flag_bound) {  // later updates write the flag where the first one did
    optimizer->BindOutput(layout.updated_flag, results[0].tensor);
    updated_flag_bound = true;
  }
  if (!FirstValueSet(results[0].tensor, layout.updated_flag)) return;
  // Validate every result before copying any (the kernels that update in place check their inputs
  // before writing), so that a malformed model leaves the state as it was.
  for (size_t k = 1; k < results.size(); ++k)
    ET_CHECK(results[k].is_sequence && results[k].sequence.size() == trainable.size(), ErrorCode::kInvalidModel,
             "optimizer model '", optimizer->model().source, "': output '", r.run.fetch_names[k], "' holds ",
             results[k].sequence.size(), " tensors for ", trainable.size(), " parameters");
  auto copy_back = [&](const RuntimeValue& updated, auto&& tensor_of) {
    for (size_t i = 0; i < trainable.size(); ++i) {
      Tensor& target = tensor_of(trainable[i]);
      if (!updated.sequence[i].SameData(target)) CopyInto(target, updated.sequence[i], trainable[i]);
    }
  };
  copy_back(results[1], [&](const std::string& p) -> Tensor& { return values.find(p)->second; });
  for (size_t k = 0; k < layout.states.size(); ++k)
    copy_back(results[2 + k], [&](const std::string& p) -> Tensor& { return opt.momentums.find(p)->second[k]; });
  ++opt.step;
}

void TrainingSession::Impl::ClassifyInputs(const Model& model, const OrtAccumulators& accumulators,
                                           std::set<std::string>& caller, std::set<std::string>& fixed,
                                           std::set<std::string>& updated) {
  std::set<std::string> checkpoint_names;
  for (const std::string& name : state.ParameterNames()) checkpoint_names.insert(name);
  const ParameterNames by_checkpoint = NamesIn(checkpoint_names);
  TrainingRoles roles = ClassifyTrainingModel(model, accumulators, by_checkpoint);
  for (const ValueInfo& input : model.graph.inputs) {
    const std::string& name = input.name;
    if (model.graph.IsInitializer(name)) continue;
    ArtifactValue v = ClassifyInput(ArtifactModel::kTraining, name, by_checkpoint);
    if (v.role == ArtifactRole::kLazyResetGrad || accumulation_buffers.count(name)) continue;
    if (v.role == ArtifactRole::kParameter) {
      if (!state.IsTrainable(name) && !roles.with_gradient.count(name))
        (roles.with_state_update.count(name) ? updated : fixed).insert(name);
      continue;
    }
    caller.insert(name);
  }
}

// The prefix as an inference model over the frozen parameters' current values.
void TrainingSession::Impl::BuildPrefix() {
  Model m = split->prefix;
  SessionOptions options = prefix_options;
  for (const std::string& name : split->fixed) {
    m.graph.initializers[name] = values.at(name);
    options.shared_initializers.insert(name);
  }
  std::erase_if(m.graph.inputs, [&](const ValueInfo& v) { return m.graph.initializers.count(v.name) != 0; });
  prefix.reset();
  prefix.emplace(std::move(m), options);
  Runner& r = prefix_runner;
  r = Runner{};
  r.run = prefix->Prepare(split->inputs, split->boundary);
  r.feeds.resize(r.run.feed_names.size());
  prefix_revision = checkpoint().frozen_revision;
  prefix_stale = false;
  cache.Clear();
}

const std::vector<Tensor>& TrainingSession::Impl::RestFeeds(const std::vector<Tensor>& inputs) {
  if (prefix_stale || prefix_revision != checkpoint().frozen_revision) BuildPrefix();
  rest_feeds.assign(inputs.begin(), inputs.end());
  if (cache_enabled) {
    RunPrefixCached(inputs);
  } else {
    for (size_t j = 0; j < prefix_inputs.size(); ++j) prefix_runner.feeds[j].tensor = inputs[prefix_inputs[j]];
    RunPrefix({});
    for (const RuntimeValue& v : prefix_runner.results) rest_feeds.push_back(v.tensor);
  }
  return rest_feeds;
}

// Runs the prefix on its feeds as set (or on `prefix_feeds` when given).
void TrainingSession::Impl::RunPrefix(const std::vector<Tensor>& prefix_feeds) {
  for (size_t j = 0; j < prefix_feeds.size(); ++j) prefix_runner.feeds[j].tensor = prefix_feeds[j];
  LimitMemory(*prefix);
  prefix_outputs.resize(split->boundary.size());
  for (size_t b = 0; b < prefix_outputs.size(); ++b) prefix->BindOutput(split->boundary[b], prefix_outputs[b]);
  prefix->RunPrepared(prefix_runner.run, prefix_runner.feeds, prefix_runner.results);
  for (size_t b = 0; b < prefix_outputs.size(); ++b) {  // memory of our own, for the next run
    const Tensor& result = prefix_runner.results[b].tensor;
    if (!result.SameData(prefix_outputs[b]) && result.dtype() != DataType::kString)
      prefix_outputs[b] = Tensor(result.dtype(), result.shape(), split->boundary[b]);
  }
}

void TrainingSession::Impl::RunPrefixCached(const std::vector<Tensor>& inputs) {
  PrefixCache& c = cache;
  const std::string& source = training->model().source;
  const Tensor& first = inputs[prefix_inputs[0]];
  ET_CHECK(first.rank() >= 1, ErrorCode::kInvalidArgument, "TrainStep: input '", split->inputs[0],
           "' has no batch axis (shape ", ShapeToString(first.shape()), "), which the frozen prefix cache needs");
  const int64_t n = first.dim(0);
  for (size_t j = 0; j < prefix_inputs.size(); ++j) {
    const Tensor& t = inputs[prefix_inputs[j]];
    ET_CHECK(t.rank() >= 1 && t.dim(0) == n && t.dtype() != DataType::kString, ErrorCode::kInvalidArgument,
             "TrainStep: input '", split->inputs[j], "' (", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()),
             ") does not hold ", n, " samples on axis 0 as '", split->inputs[0],
             "' does; the frozen prefix cache needs one row per sample in every input it reads");
  }
  c.keys.assign(static_cast<size_t>(n), SampleKey{});
  c.found.assign(static_cast<size_t>(n), nullptr);
  c.missing.clear();
  for (int64_t i = 0; i < n; ++i) {
    SampleKey key{0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL};
    for (size_t j = 0; j < prefix_inputs.size(); ++j) {
      const Tensor& t = inputs[prefix_inputs[j]];
      const size_t row = t.nbytes() / static_cast<size_t>(n);
      Absorb(key, static_cast<const std::byte*>(t.raw()) + row * static_cast<size_t>(i), row);
      std::vector<int64_t> meta(t.shape().begin() + 1, t.shape().end());
      meta.push_back(static_cast<int64_t>(t.dtype()));
      Absorb(key, reinterpret_cast<const std::byte*>(meta.data()), meta.size() * sizeof(int64_t));
    }
    key = {Fmix(key.a), Fmix(key.b ^ key.a)};
    c.keys[static_cast<size_t>(i)] = key;
    if (auto it = c.rows.find(key); it != c.rows.end()) {
      c.found[static_cast<size_t>(i)] = it->second.get();
    } else {
      c.missing.push_back(static_cast<size_t>(i));
    }
  }
  c.hits += static_cast<uint64_t>(n) - c.missing.size();
  c.misses += c.missing.size();
  const size_t m = c.missing.size();
  const bool all_missing = m == static_cast<size_t>(n);
  if (m > 0) {
    if (all_missing) {
      for (size_t j = 0; j < prefix_inputs.size(); ++j) prefix_runner.feeds[j].tensor = inputs[prefix_inputs[j]];
      RunPrefix({});
    } else {  // the samples not cached, as a smaller batch
      c.gathered.resize(prefix_inputs.size());
      for (size_t j = 0; j < prefix_inputs.size(); ++j) {
        const Tensor& t = inputs[prefix_inputs[j]];
        Shape shape = t.shape();
        shape[0] = static_cast<int64_t>(m);
        Tensor& g = c.gathered[j];
        if (!g.defined() || g.dtype() != t.dtype() || g.shape() != shape) g = Tensor(t.dtype(), shape);
        const size_t row = t.nbytes() / static_cast<size_t>(n);
        for (size_t k = 0; k < m; ++k)
          std::memcpy(static_cast<std::byte*>(g.raw()) + k * row,
                      static_cast<const std::byte*>(t.raw()) + c.missing[k] * row, row);
      }
      RunPrefix(c.gathered);
    }
    const std::vector<RuntimeValue>& fresh = prefix_runner.results;
    std::vector<Shape> row_shapes;
    for (size_t b = 0; b < fresh.size(); ++b) {
      const Tensor& t = fresh[b].tensor;
      ET_CHECK(t.rank() >= 1 && t.dim(0) == static_cast<int64_t>(m), ErrorCode::kInvalidModel, "training model '",
               source, "': the frozen prefix's output '", split->boundary[b], "' has shape ", ShapeToString(t.shape()),
               " for ", m, " samples; the cache needs one row per sample");
      row_shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
    }
    if (row_shapes != c.row_shapes) {  // other sample shapes: no cached row can be one of these samples
      c.Clear();
      c.row_shapes = row_shapes;
      c.dtypes.clear();
      c.row_bytes.clear();
      c.sample_bytes = 0;
      for (const RuntimeValue& v : fresh) {
        c.dtypes.push_back(v.tensor.dtype());
        c.row_bytes.push_back(v.tensor.nbytes() / m);
        c.sample_bytes += c.row_bytes.back();
      }
    }
    for (size_t k = 0; k < m; ++k) {
      const uint64_t entry = c.sample_bytes + PrefixCache::kEntryOverhead;
      if (c.bytes + entry > c.limit) break;  // full: keep what is cached
      if (options.memory_limit_bytes != 0 && Held(nullptr).total() + entry > options.memory_limit_bytes) break;
      auto [it, inserted] = c.rows.try_emplace(c.keys[c.missing[k]]);
      if (!inserted) continue;  // the same sample twice in one batch
      it->second = std::make_unique<std::byte[]>(c.sample_bytes);
      std::byte* out = it->second.get();
      for (size_t b = 0; b < fresh.size(); ++b) {
        std::memcpy(out, static_cast<const std::byte*>(fresh[b].tensor.raw()) + k * c.row_bytes[b], c.row_bytes[b]);
        out += c.row_bytes[b];
      }
      c.bytes += entry;
    }
  }
  if (all_missing) {  // the prefix's own results, as without the cache
    for (const RuntimeValue& v : prefix_runner.results) rest_feeds.push_back(v.tensor);
    return;
  }
  c.assembled.resize(c.row_shapes.size());
  size_t offset = 0;
  for (size_t b = 0; b < c.row_shapes.size(); ++b) {
    Shape shape{n};
    shape.insert(shape.end(), c.row_shapes[b].begin(), c.row_shapes[b].end());
    Tensor& t = c.assembled[b];
    if (!t.defined() || t.dtype() != c.dtypes[b] || t.shape() != shape) t = Tensor(c.dtypes[b], shape);
    auto* out = static_cast<std::byte*>(t.raw());
    const size_t row = c.row_bytes[b];
    size_t next_fresh = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::byte* cached = c.found[static_cast<size_t>(i)];
      const std::byte* src = cached ? cached + offset
                                    : static_cast<const std::byte*>(prefix_runner.results[b].tensor.raw()) + next_fresh++ * row;
      std::memcpy(out + static_cast<size_t>(i) * row, src, row);
    }
    offset += row;
    rest_feeds.push_back(t);
  }
}

TrainingSession::TrainingSession(CheckpointState state, const ModelSource& training_model,
                                 const ModelSource& eval_model, const ModelSource& optimizer_model,
                                 TrainingSessionOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.state = std::move(state);
  s.options = options;
  SessionOptions session_options{options.num_threads, options.seed, true};
  ET_CHECK(!training_model.empty(), ErrorCode::kInvalidArgument, "TrainingSession: no training model given");
  Model training = LoadSource(training_model);
  OrtAccumulators accumulators = ExposeAccumulatedGradients(training);
  ET_CHECK(options.frozen_prefix_cache_bytes > 0, ErrorCode::kInvalidArgument, "training model '", training.source,
           "': frozen_prefix_cache_bytes must be a positive number of bytes, got ", options.frozen_prefix_cache_bytes);
  std::set<std::string> caller, fixed, updated;
  if (options.frozen_prefix_as_inference || options.cache_frozen_prefix) {
    s.ClassifyInputs(training, accumulators, caller, fixed, updated);
    if (options.frozen_prefix_as_inference) s.split = SplitFrozenPrefix(training, caller, fixed);
  }
  ET_CHECK(!options.cache_frozen_prefix || options.frozen_prefix_as_inference, ErrorCode::kInvalidArgument,
           "training model '", training.source, "': cache_frozen_prefix needs frozen_prefix_as_inference");
  ET_CHECK(!options.cache_frozen_prefix || s.split, ErrorCode::kInvalidArgument, "cache_frozen_prefix: training model '",
           training.source, "' has no frozen prefix (no node that reads the inputs and a frozen parameter comes before "
           "every trainable parameter)");
  if (s.split) s.boundary_names.insert(s.split->boundary.begin(), s.split->boundary.end());
  s.training.emplace(s.split ? s.split->rest : training, session_options);
  s.BindTrainingModel(training, accumulators);
  if (s.split) {
    s.prefix_options = session_options;
    s.BuildPrefix();
    for (const std::string& name : s.split->inputs)
      s.prefix_inputs.push_back(
          static_cast<size_t>(std::find(s.train_inputs.begin(), s.train_inputs.end(), name) - s.train_inputs.begin()));
    if (options.cache_frozen_prefix) {
      std::set<std::string> not_trained = fixed;
      not_trained.insert(updated.begin(), updated.end());
      CheckPrefixPerSample(training, caller, not_trained, s.prefix->model(), s.split->inputs, s.split->boundary);
      s.cache_enabled = true;
      s.cache.limit = static_cast<uint64_t>(options.frozen_prefix_cache_bytes);
    }
  }
  if (options.memory_budget_bytes) {
    ET_CHECK(*options.memory_budget_bytes > 0, ErrorCode::kInvalidArgument, "training model '",
             s.training->model().source, "': memory_budget_bytes must be a positive number of bytes, got ",
             *options.memory_budget_bytes);
    s.training->SetArenaBudget(static_cast<uint64_t>(*options.memory_budget_bytes));
  }
  if (!eval_model.empty()) {
    s.eval_model = LoadSource(eval_model);
    s.eval.emplace(s.eval_model, session_options);
    s.BindEvalModel();
  }
  if (!optimizer_model.empty()) {
    Model optimizer = LoadSource(optimizer_model);
    s.ort_optimizer = PrepareOrtOptimizer(optimizer);
    s.optimizer.emplace(std::move(optimizer), session_options);
    if (s.ort_optimizer) {
      s.BindOrtOptimizerModel();
    } else {
      s.BindOptimizerModel();
    }
    s.PrepareOptimizerRunner();
  }
  std::vector<std::string> rest_inputs = s.train_inputs;
  if (s.split) rest_inputs.insert(rest_inputs.end(), s.split->boundary.begin(), s.split->boundary.end());
  s.train_runner = s.PrepareRunner(*s.training, rest_inputs, {});
  if (s.eval) s.eval_runner = s.PrepareRunner(*s.eval, s.eval_inputs, {});
  if (options.memory_limit_bytes != 0) {
    const Impl::HeldMemory held = s.Held(nullptr);
    ET_CHECK(held.total() <= options.memory_limit_bytes, ErrorCode::kResourceExhausted, "training model '",
             s.training->model().source, "': the session needs at least ", held.total(), " bytes before any step (",
             held.parameters, " of parameters, ", held.gradients, " of gradients, ", held.optimizer_state,
             " of optimizer state, ", held.constants, " of constants), more than the memory limit of ",
             options.memory_limit_bytes, " bytes");
  }
}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;

namespace {
// Holds a session for one call. The contract (README, "Concurrency"): one thread at a time per session.
class ExclusiveUse {
 public:
  ExclusiveUse(std::atomic<bool>& flag, const char* call) : flag_(flag) {
    ET_CHECK(!flag_.exchange(true, std::memory_order_acquire), ErrorCode::kInvalidArgument, call,
             ": the training session is in use by another thread (a session serves one thread at a time)");
  }
  ~ExclusiveUse() { flag_.store(false, std::memory_order_release); }
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

 private:
  std::atomic<bool>& flag_;
};
}  // namespace

void TrainingSession::TrainStep(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  Impl& s = *impl_;
  ExclusiveUse use(s.in_use, "TrainStep");
  s.CheckMaterialized("TrainStep");
  CheckInputCount("TrainStep", s.train_inputs, inputs);
  s.BindGradientOutputs(s.reset_gradients);
  s.BindCallerOutputs(*s.training, s.train_outputs, outputs);
  if (s.reset_flag.defined()) s.reset_flag.data<bool>()[0] = s.reset_gradients;
  const std::vector<Tensor>& feeds = s.split ? s.RestFeeds(inputs) : inputs;
  s.LimitMemory(*s.training);
  s.train_runner.Run(*s.training, feeds);

  const std::vector<RuntimeValue>& results = s.train_runner.results;
  const std::vector<std::string>& names = s.train_runner.run.fetch_names;
  outputs.resize(s.train_outputs.size());
  size_t next_output = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const Tensor& result = results[i].tensor;
    Tensor* target = s.train_output_roles[i].target;
    switch (s.train_output_roles[i].role) {
      case OutputRole::kCaller: KeepResult(outputs[next_output++], result); break;
      case OutputRole::kStateUpdate:
      case OutputRole::kAccumulated:  // the graph already added or overwrote
        if (!result.SameData(*target)) CopyInto(*target, result, names[i]);
        break;
      case OutputRole::kFlag: break;
      case OutputRole::kGradient:
        if (!s.reset_gradients) {
          AddInto(*target, result, names[i]);
        } else if (!result.SameData(*target)) {
          CopyInto(*target, result, names[i]);
        }
        break;
    }
  }
  if (!s.flags_bound) {  // later steps write the flags where this one did
    for (size_t i = 0; i < results.size(); ++i)
      if (s.train_output_roles[i].role == OutputRole::kFlag) s.training->BindOutput(names[i], results[i].tensor);
    s.flags_bound = true;
  }
  s.reset_gradients = false;
}

std::vector<Tensor> TrainingSession::TrainStep(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  TrainStep(inputs, outputs);
  return outputs;
}

void TrainingSession::EvalStep(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  ExclusiveUse use(impl_->in_use, "EvalStep");
  Impl& s = *impl_;
  ET_CHECK(s.eval.has_value(), ErrorCode::kInvalidArgument, "EvalStep: this session has no eval model");
  s.CheckMaterialized("EvalStep");
  CheckInputCount("EvalStep", s.eval_inputs, inputs);
  s.BindCallerOutputs(*s.eval, s.eval_outputs, outputs);
  s.LimitMemory(*s.eval);
  s.eval_runner.Run(*s.eval, inputs);
  outputs.resize(s.eval_runner.results.size());
  for (size_t i = 0; i < outputs.size(); ++i) KeepResult(outputs[i], s.eval_runner.results[i].tensor);
}

std::vector<Tensor> TrainingSession::EvalStep(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  EvalStep(inputs, outputs);
  return outputs;
}

void TrainingSession::LazyResetGrad() {
  ExclusiveUse use(impl_->in_use, "LazyResetGrad");
  impl_->reset_gradients = true;
}

void TrainingSession::OptimizerStep() {
  ExclusiveUse use(impl_->in_use, "OptimizerStep");
  Impl& s = *impl_;
  ET_CHECK(s.optimizer.has_value(), ErrorCode::kInvalidArgument, "OptimizerStep: this session has no optimizer model");
  s.CheckMaterialized("OptimizerStep");
  if (s.ort_optimizer) return s.RunOrtOptimizer();
  OptimizerState& opt = *s.checkpoint().optimizer;
  s.learning_rate_feed.data<float>()[0] = s.learning_rate;
  s.step_feed.data<int64_t>()[0] = opt.step;
  s.LimitMemory(*s.optimizer);
  s.optimizer_runner.Run(*s.optimizer, {});
  const std::vector<RuntimeValue>& results = s.optimizer_runner.results;
  for (size_t i = 0; i < results.size(); ++i) {
    Tensor& target = *s.optimizer_updates[i].second;
    if (!results[i].tensor.SameData(target)) CopyInto(target, results[i].tensor, s.optimizer_updates[i].first);
  }
  ++opt.step;
}

uint64_t TrainingSession::training_arena_bytes() const { return impl_->training->planned_peak_bytes(); }

size_t TrainingSession::recomputed_values() const { return impl_->training->recomputed_values(); }

FrozenPrefixStats TrainingSession::frozen_prefix_stats() const {
  const Impl& s = *impl_;
  FrozenPrefixStats stats;
  if (!s.split) return stats;
  stats.active = true;
  stats.prefix_nodes = s.prefix ? s.prefix->model().graph.nodes.size() : 0;
  stats.boundary = s.split->boundary;
  stats.cache_enabled = s.cache_enabled;
  stats.cached_samples = s.cache.rows.size();
  stats.cache_bytes = s.cache.bytes;
  stats.hits = s.cache.hits;
  stats.misses = s.cache.misses;
  return stats;
}

float TrainingSession::GetLearningRate() const { return impl_->learning_rate; }

void TrainingSession::SetLearningRate(float learning_rate) {
  ExclusiveUse use(impl_->in_use, "SetLearningRate");
  ET_CHECK(learning_rate >= 0, ErrorCode::kInvalidArgument, "SetLearningRate: the learning rate must be >= 0, got ",
           learning_rate);
  impl_->learning_rate = learning_rate;
  if (!impl_->scheduler && impl_->checkpoint().optimizer)
    impl_->checkpoint().optimizer->initial_learning_rate = learning_rate;
}

void TrainingSession::RegisterLRScheduler(const LRScheduler& scheduler) {
  ET_CHECK(impl_->optimizer.has_value(), ErrorCode::kInvalidArgument,
           "RegisterLRScheduler: this session has no optimizer model");
  impl_->scheduler = scheduler;
  impl_->checkpoint().optimizer->initial_learning_rate = scheduler.initial_lr;
  SchedulerStep();
}

void TrainingSession::RegisterLinearLRScheduler(int64_t warmup_steps, int64_t total_steps, float initial_lr) {
  RegisterLRScheduler(LRScheduler::Linear(warmup_steps, total_steps, initial_lr));
}

void TrainingSession::SchedulerStep() {
  Impl& s = *impl_;
  ExclusiveUse use(s.in_use, "SchedulerStep");
  ET_CHECK(s.scheduler.has_value(), ErrorCode::kInvalidArgument,
           "SchedulerStep: no learning-rate scheduler registered");
  s.learning_rate = s.scheduler->LearningRate(optimizer_step());
}

int64_t TrainingSession::optimizer_step() const {
  const auto& opt = impl_->state.checkpoint().optimizer;
  return opt ? opt->step : 0;
}

size_t TrainingSession::GetParametersSize(bool trainable_only) const {
  size_t total = 0;
  for (const std::string& name : impl_->FlatParameters(trainable_only)) total += impl_->values.at(name).numel();
  return total;
}

namespace {

void CheckFlatBuffer(const Tensor& buffer, size_t expected, const char* what) {
  ET_CHECK(buffer.dtype() == DataType::kFloat32 && static_cast<size_t>(buffer.numel()) == expected,
           ErrorCode::kInvalidArgument, what, ": the buffer must be float32 with ", expected, " elements, got ",
           DataTypeName(buffer.dtype()), " ", ShapeToString(buffer.shape()));
}

}  // namespace

void TrainingSession::CopyParametersToBuffer(Tensor& buffer, bool trainable_only) const {
  const Impl& s = *impl_;
  s.CheckMaterialized("CopyParametersToBuffer");
  CheckFlatBuffer(buffer, GetParametersSize(trainable_only), "CopyParametersToBuffer");
  float* out = buffer.data<float>();
  for (const std::string& name : s.FlatParameters(trainable_only)) {
    const Tensor& value = s.values.at(name);
    ET_CHECK(value.dtype() == DataType::kFloat32, ErrorCode::kInvalidArgument, "CopyParametersToBuffer: parameter '",
             name, "' is ", DataTypeName(value.dtype()), ", not float32");
    std::memcpy(out, value.raw(), value.nbytes());
    out += value.numel();
  }
}

void TrainingSession::CopyBufferToParameters(const Tensor& buffer, bool trainable_only) {
  ExclusiveUse use(impl_->in_use, "CopyBufferToParameters");
  Impl& s = *impl_;
  CheckFlatBuffer(buffer, GetParametersSize(trainable_only), "CopyBufferToParameters");
  for (const std::string& name : s.FlatParameters(trainable_only))
    ET_CHECK(s.values.at(name).dtype() == DataType::kFloat32, ErrorCode::kInvalidArgument,
             "CopyBufferToParameters: parameter '", name, "' is ", DataTypeName(s.values.at(name).dtype()),
             ", not float32");
  const float* in = buffer.data<float>();
  for (const std::string& name : s.FlatParameters(trainable_only)) {
    Tensor& value = s.values.at(name);
    std::memcpy(value.raw(), in, value.nbytes());
    in += value.numel();
  }
  Checkpoint& c = s.checkpoint();
  if (!trainable_only) s.prefix_stale = true;
  if (c.is_nominal && !trainable_only) {  // every parameter now has a value: the state is complete
    for (const std::string& name : s.parameters)
      (c.nominal_trainable.count(name) ? c.trainable : c.frozen)[name] = s.values.at(name);
    c.nominal_trainable.clear();
    c.nominal_frozen.clear();
    c.is_nominal = false;
  }
}

std::vector<std::string> TrainingSession::TrainingInputNames() const { return impl_->train_inputs; }
std::vector<std::string> TrainingSession::TrainingOutputNames() const { return impl_->train_outputs; }
std::vector<std::string> TrainingSession::EvalInputNames() const { return impl_->eval_inputs; }
std::vector<std::string> TrainingSession::EvalOutputNames() const { return impl_->eval_outputs; }

Tensor TrainingSession::GetGradient(const std::string& parameter) const {
  auto it = impl_->gradients.find(parameter);
  ET_CHECK(it != impl_->gradients.end(), ErrorCode::kInvalidArgument, "GetGradient: '", parameter,
           "' is not a trainable parameter of the training model");
  return it->second.Clone();
}
namespace {

std::vector<ValueInfo> InfosOf(const Session& session, const std::vector<std::string>& names) {
  std::vector<ValueInfo> infos;
  for (const std::string& name : names) infos.push_back(InputInfo(session, name));
  return infos;
}

}  // namespace

std::vector<ValueInfo> TrainingSession::TrainingInputInfos() const {
  return InfosOf(*impl_->training, impl_->train_inputs);
}
std::vector<ValueInfo> TrainingSession::EvalInputInfos() const {
  return impl_->eval ? InfosOf(*impl_->eval, impl_->eval_inputs) : std::vector<ValueInfo>{};
}
bool TrainingSession::has_eval_model() const { return impl_->eval.has_value(); }
bool TrainingSession::has_optimizer_model() const { return impl_->optimizer.has_value(); }

void TrainingSession::SetSeed(uint64_t seed) {
  ExclusiveUse use(impl_->in_use, "SetSeed");
  impl_->training->SetSeed(seed);
  if (impl_->eval) impl_->eval->SetSeed(seed);
}

Model TrainingSession::InferenceModel(const std::vector<std::string>& output_names) const {
  const Impl& s = *impl_;
  ET_CHECK(s.eval.has_value(), ErrorCode::kInvalidArgument,
           "ExportModelForInference: this session has no eval model to export from");
  s.CheckMaterialized("ExportModelForInference");
  std::vector<std::string> names = output_names;
  if (names.empty()) names.assign(s.eval_outputs.begin() + 1, s.eval_outputs.end());
  ET_CHECK(!names.empty(), ErrorCode::kInvalidArgument,
           "ExportModelForInference: the eval model has no output besides the loss; name the outputs to export");

  Model model = s.eval_model;
  Graph& g = model.graph;
  std::set<std::string> produced;
  for (const Node& node : g.nodes)
    for (const std::string& out : node.outputs) produced.insert(out);
  std::vector<ValueInfo> outputs;
  for (const std::string& name : names) {
    ET_CHECK(produced.count(name) || g.IsInitializer(name), ErrorCode::kInvalidArgument,
             "ExportModelForInference: the eval model '", model.source, "' has no output or value '", name, "'");
    const ValueInfo* info = g.FindValueInfo(name);
    ValueInfo untyped;  // the exporter infers its type
    untyped.name = name;
    outputs.push_back(info ? *info : untyped);
  }
  g.outputs = outputs;
  std::vector<ValueInfo> inputs;
  for (const ValueInfo& input : g.inputs) {
    if (auto it = s.values.find(input.name); it != s.values.end()) {
      g.initializers[input.name] = it->second.Clone();
    } else {
      inputs.push_back(input);
    }
  }
  g.inputs = inputs;
  EliminateDeadNodes(g);
  std::set<std::string> used;
  for (const Node& node : g.nodes)
    for (const std::string& in : node.inputs) used.insert(in);
  for (const ValueInfo& out : g.outputs) used.insert(out.name);
  std::erase_if(g.inputs, [&](const ValueInfo& v) { return !used.count(v.name); });
  std::erase_if(g.initializers, [&](const auto& kv) { return !used.count(kv.first); });
  model.producer = "edgetrain";
  return model;
}

void TrainingSession::ExportModelForInference(const std::string& path,
                                              const std::vector<std::string>& output_names) const {
  SaveModel(InferenceModel(output_names), path, ExecutionExportOptions());
}

CheckpointState& TrainingSession::state() { return impl_->state; }

}  // namespace edgetrain
