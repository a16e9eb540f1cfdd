// `edgetrain train`, `eval`, `export` and `predict`: the on-device phase over an artifact directory.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "commands.hpp"
#include "core/byte_size.hpp"
#include "core/npy.hpp"
#include "core/text.hpp"
#include "dataset.hpp"
#include "training/training_session.hpp"

namespace fs = std::filesystem;

namespace edgetrain::cli {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Where an artifact set's files are: DIR/PREFIX + the usual names (.onnx or ORT's .ort; ORT's
// checkpoint.ckpt too), unless an option names a file explicitly.
struct ArtifactLocation {
  std::string dir, prefix, training_model, eval_model, optimizer_model;

  void AddOptions(CLI::App* cmd, bool with_optimizer) {
    cmd->add_option("dir", dir, "artifact directory (training, eval, optimizer models and checkpoint)")->required();
    cmd->add_option("--prefix", prefix, "artifact file name prefix");
    cmd->add_option("--training-model", training_model, "training model (default: DIR/training_model.onnx or .ort)");
    cmd->add_option("--eval-model", eval_model, "eval model (default: DIR/eval_model.onnx or .ort)");
    if (with_optimizer)
      cmd->add_option("--optimizer-model", optimizer_model,
                      "optimizer model (default: DIR/optimizer_model.onnx or .ort)");
  }
};

struct ArtifactFiles {
  std::string training, eval, optimizer, checkpoint;  // empty when absent
};

ArtifactFiles FindArtifacts(const ArtifactLocation& where) {
  ET_CHECK(fs::is_directory(where.dir), ErrorCode::kIoError, "artifact directory '", where.dir, "' does not exist");
  auto find = [&](const std::string& given, std::vector<std::string> names) -> std::string {
    if (!given.empty()) {
      ET_CHECK(fs::exists(given), ErrorCode::kIoError, "cannot open '", given, "': no such file");
      return given;
    }
    for (const std::string& name : names)
      if (auto path = fs::path(where.dir) / (where.prefix + name); fs::exists(path)) return path.string();
    return "";
  };
  ArtifactFiles files{find(where.training_model, {"training_model.onnx", "training_model.ort"}),
                      find(where.eval_model, {"eval_model.onnx", "eval_model.ort"}),
                      find(where.optimizer_model, {"optimizer_model.onnx", "optimizer_model.ort"}),
                      find("", {"checkpoint", "checkpoint.ckpt"})};
  ET_CHECK(!files.training.empty(), ErrorCode::kIoError, "artifact directory '", where.dir, "' has no ", where.prefix,
           "training_model.onnx");
  return files;
}

// "NAME=FILE" maps a file to a model input; a bare "FILE" takes the next input, in `inputs` order,
// that no NAME=FILE names.
std::vector<std::pair<std::string, std::string>> ParseDataSpecs(const std::vector<std::string>& specs,
                                                                const std::vector<std::string>& inputs,
                                                                const std::string& option) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::set<std::string> named;
  for (const std::string& spec : specs)
    if (size_t eq = spec.find('='); eq != std::string::npos && eq > 0) named.insert(spec.substr(0, eq));
  auto next = inputs.begin();
  for (const std::string& spec : specs) {
    if (size_t eq = spec.find('='); eq != std::string::npos && eq > 0) {
      pairs.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
      continue;
    }
    while (next != inputs.end() && named.count(*next)) ++next;
    ET_CHECK(next != inputs.end(), ErrorCode::kInvalidArgument, option, " '", spec,
             "': more files than model inputs; write NAME=FILE (inputs: ", JoinNames(inputs), ")");
    pairs.emplace_back(*next++, spec);
  }
  return pairs;
}

// The dataset that feeds `inputs`; every input must have a column.
Dataset LoadFor(const std::vector<std::string>& specs, const std::vector<std::string>& inputs,
                const std::string& option) {
  Dataset data = LoadDataset(ParseDataSpecs(specs, inputs, option));
  for (const std::string& input : inputs) data.Column(input);
  return data;
}

std::vector<const ValueInfo*> Pointers(const std::vector<ValueInfo>& infos) {
  std::vector<const ValueInfo*> out;
  for (const ValueInfo& info : infos) out.push_back(&info);
  return out;
}

// Index of `infos` entry that holds class labels (an integer vector), or -1.
int LabelInput(const std::vector<ValueInfo>& infos) {
  for (size_t i = 0; i < infos.size(); ++i)
    if (!IsFloatType(infos[i].dtype) && infos[i].has_shape && infos[i].shape.size() == 1) return static_cast<int>(i);
  return -1;
}

// The index of the largest score in each row of float32 `scores` [N, C].
std::vector<int64_t> ArgMaxRows(const Tensor& scores) {
  std::vector<int64_t> classes;
  const float* p = scores.data<float>();
  for (int64_t row = 0; row < scores.dim(0); ++row, p += scores.dim(1))
    classes.push_back(std::max_element(p, p + scores.dim(1)) - p);
  return classes;
}

// Correct predictions: argmax of each row of `logits` [N, C] against `labels` [N]; -1 when the
// shapes are not those of a classifier.
int64_t CountCorrect(const Tensor& logits, const Tensor& labels) {
  if (logits.dtype() != DataType::kFloat32 || logits.rank() != 2 || labels.rank() != 1 ||
      logits.dim(0) != labels.dim(0))
    return -1;
  std::vector<int64_t> truth = labels.ToInt64Vector(), predicted = ArgMaxRows(logits);
  int64_t correct = 0;
  for (size_t row = 0; row < truth.size(); ++row) correct += predicted[row] == truth[row];
  return correct;
}

struct EvalResult {
  double loss = 0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

EvalResult Evaluate(TrainingSession& session, const Dataset& data, int64_t batch_size) {
  std::vector<ValueInfo> infos = session.EvalInputInfos();
  const int label = LabelInput(infos);
  EvalResult result;
  int64_t correct = 0;
  bool has_accuracy = label >= 0;
  std::vector<int64_t> indices;
  for (int64_t start = 0; start < data.size; start += batch_size) {
    indices.clear();
    for (int64_t i = start; i < std::min(data.size, start + batch_size); ++i) indices.push_back(i);
    std::vector<Tensor> batch = data.Batch(Pointers(infos), indices);
    std::vector<Tensor> outputs = session.EvalStep(batch);
    result.loss += outputs[0].ToDoubleVector()[0] * static_cast<double>(indices.size());
    int64_t batch_correct = has_accuracy && outputs.size() > 1 ? CountCorrect(outputs[1], batch[label]) : -1;
    has_accuracy = batch_correct >= 0;
    correct += std::max<int64_t>(batch_correct, 0);
    result.samples += static_cast<int64_t>(indices.size());
  }
  if (result.samples > 0) result.loss /= static_cast<double>(result.samples);
  if (has_accuracy && result.samples > 0) result.accuracy = static_cast<double>(correct) / result.samples;
  return result;
}

std::string FormatEval(const EvalResult& r) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << "eval loss " << r.loss;
  if (r.accuracy) out << std::setprecision(2) << ", accuracy " << 100.0 * *r.accuracy << "%";
  out << " (" << r.samples << " samples)";
  return out.str();
}

// A progress bar redrawn in place on a terminal; plain lines every fifth of an epoch otherwise.
class Progress {
 public:
  Progress() : terminal_(isatty(fileno(stderr)) != 0) {}

  void Update(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss, double samples_per_s,
              double elapsed) {
    const double eta = step > 0 ? elapsed * static_cast<double>(steps - step) / static_cast<double>(step) : 0;
    std::ostringstream line;
    line << "epoch " << epoch << "/" << epochs << " ";
    if (terminal_) {
      const int width = 30, filled = static_cast<int>(width * step / std::max<int64_t>(1, steps));
      line << "[" << std::string(filled, '=') << std::string(width - filled, ' ') << "] ";
    }
    line << step << "/" << steps << std::fixed << std::setprecision(4) << " loss " << loss << std::setprecision(0)
         << " " << samples_per_s << " samples/s ETA " << std::setprecision(1) << eta << "s";
    if (terminal_) {
      std::cerr << "\r" << line.str() << "\033[K" << std::flush;
    } else if (step == steps || step * 5 / steps != (step - 1) * 5 / steps) {
      std::cerr << line.str() << "\n";
    }
  }
  void EndEpoch() {
    if (terminal_) std::cerr << "\n";
  }

 private:
  bool terminal_;
};

struct TrainOptions {
  ArtifactLocation artifacts;
  std::string resume, checkpoint_out, metrics, scheduler = "none";
  std::vector<std::string> data, eval_data;
  int64_t epochs = 1, batch_size = 64, limit = 0, warmup = 0, total_steps = 0, step_size = 1;
  std::optional<float> lr;
  float gamma = 0.1f, min_lr = 0.0f;
  int threads = 1;
  uint64_t seed = 0;
  std::string memory_limit, memory_budget;  // byte sizes as given ("512M"); empty: none
  std::string cache_frozen_prefix;          // the cache's byte limit as given; empty: no cache
};

void RegisterScheduler(TrainingSession& session, const TrainOptions& o, int64_t total_steps) {
  const float lr = session.GetLearningRate();
  if (o.scheduler == "linear") session.RegisterLRScheduler(LRScheduler::Linear(o.warmup, total_steps, lr));
  if (o.scheduler == "cosine") session.RegisterLRScheduler(LRScheduler::Cosine(o.warmup, total_steps, lr, o.min_lr));
  if (o.scheduler == "step") session.RegisterLRScheduler(LRScheduler::Step(o.step_size, o.gamma, lr));
}

void Train(const TrainOptions& o) {
  const ArtifactLocation& where = o.artifacts;
  ArtifactFiles files = FindArtifacts(where);
  ET_CHECK(!files.optimizer.empty(), ErrorCode::kIoError, "artifact directory '", where.dir, "' has no ",
           where.prefix, "optimizer_model.onnx, which training needs");
  ET_CHECK(o.eval_data.empty() || !files.eval.empty(), ErrorCode::kIoError, "artifact directory '", where.dir,
           "' has no ", where.prefix, "eval_model.onnx, which --eval-data needs");
  ET_CHECK(!o.resume.empty() || !files.checkpoint.empty(), ErrorCode::kIoError, "artifact directory '", where.dir,
           "' has no ", where.prefix, "checkpoint");
  TrainingSessionOptions options{o.threads, o.seed};
  if (!o.memory_limit.empty()) options.memory_limit_bytes = ParseByteSize(o.memory_limit, "--memory-limit");
  if (!o.memory_budget.empty()) options.memory_budget_bytes = ParseByteSize(o.memory_budget, "--memory-budget");
  if (!o.cache_frozen_prefix.empty()) {
    options.cache_frozen_prefix = true;
    options.frozen_prefix_cache_bytes = ParseByteSize(o.cache_frozen_prefix, "--cache-frozen-prefix");
  }
  CheckpointState state = CheckpointState::Load(o.resume.empty() ? files.checkpoint : o.resume);
  TrainingSession session(state, files.training, files.eval, files.optimizer, options);

  Dataset train = LoadFor(o.data, session.TrainingInputNames(), "--data");
  if (o.limit > 0) train.KeepFirst(o.limit);
  std::optional<Dataset> eval;
  if (!o.eval_data.empty()) eval = LoadFor(o.eval_data, session.EvalInputNames(), "--eval-data");
  ET_CHECK(train.size > 0, ErrorCode::kInvalidArgument, "--data holds no samples");

  const int64_t first_epoch = state.HasProperty("epoch") ? std::get<int64_t>(state.GetProperty("epoch")) : 0;
  const int64_t steps_per_epoch = (train.size + o.batch_size - 1) / o.batch_size;
  if (o.lr) session.SetLearningRate(*o.lr);
  RegisterScheduler(session, o, o.total_steps > 0 ? o.total_steps
                                                  : session.optimizer_step() + o.epochs * steps_per_epoch);

  std::ofstream metrics;
  if (!o.metrics.empty()) {
    bool fresh = !fs::exists(o.metrics) || fs::file_size(o.metrics) == 0;
    metrics.open(o.metrics, std::ios::app);
    ET_CHECK(metrics.good(), ErrorCode::kIoError, "cannot write metrics file '", o.metrics, "'");
    if (fresh) metrics << "epoch,steps,train_loss,eval_loss,eval_accuracy,learning_rate,samples_per_second,seconds\n";
  }

  std::vector<ValueInfo> infos = session.TrainingInputInfos();
  Progress progress;
  const int64_t last_epoch = first_epoch + o.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch; ++epoch) {
    session.SetSeed(SplitMix64(o.seed ^ static_cast<uint64_t>(epoch + 1)).Next());  // Dropout masks per epoch
    std::vector<int64_t> order = ShuffledOrder(train.size, o.seed, epoch);
    const auto start = Clock::now();
    double loss_sum = 0;
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      const int64_t begin = step * o.batch_size, end = std::min(train.size, begin + o.batch_size);
      std::vector<Tensor> batch =
          train.Batch(Pointers(infos), std::span<const int64_t>(order.data() + begin, static_cast<size_t>(end - begin)));
      loss_sum += session.TrainStep(batch)[0].ToDoubleVector()[0];
      if (options.memory_budget_bytes && epoch == first_epoch && step == 0)
        std::cout << "memory plan: training arena " << session.training_arena_bytes() << " bytes (budget "
                  << *options.memory_budget_bytes << "), " << session.recomputed_values()
                  << " forward values recomputed" << std::endl;
      session.OptimizerStep();
      if (o.scheduler != "none") session.SchedulerStep();
      session.LazyResetGrad();
      const double elapsed = SecondsSince(start);
      progress.Update(epoch + 1, last_epoch, step + 1, steps_per_epoch, loss_sum / (step + 1),
                      static_cast<double>(end) / std::max(elapsed, 1e-9), elapsed);
    }
    progress.EndEpoch();
    if (options.cache_frozen_prefix) {
      const FrozenPrefixStats cache = session.frozen_prefix_stats();
      std::cout << "frozen prefix cache: " << cache.cached_samples << " samples, " << cache.cache_bytes << " bytes, "
                << cache.hits << " hits, " << cache.misses << " misses" << std::endl;
    }
    const double seconds = SecondsSince(start);
    const double train_loss = loss_sum / steps_per_epoch, samples_per_s = train.size / seconds;
    std::optional<EvalResult> result;
    if (eval) result = Evaluate(session, *eval, o.batch_size);
    state.AddProperty("epoch", epoch + 1);
    if (!o.checkpoint_out.empty()) CheckpointState::Save(state, o.checkpoint_out, /*include_optimizer_state=*/true);

    std::cout << "epoch " << epoch + 1 << ": train loss " << std::fixed << std::setprecision(4) << train_loss
              << std::setprecision(0) << ", " << samples_per_s << " samples/s, " << std::setprecision(1) << seconds
              << " s" << (result ? "; " + FormatEval(*result) : "") << std::endl;
    if (metrics.is_open()) {
      metrics << std::defaultfloat << epoch + 1 << "," << session.optimizer_step() << "," << std::setprecision(8)
              << train_loss << ",";
      if (result) metrics << result->loss;
      metrics << ",";
      if (result && result->accuracy) metrics << *result->accuracy;
      metrics << "," << session.GetLearningRate() << "," << std::fixed << std::setprecision(1) << samples_per_s << ","
              << std::setprecision(3) << seconds << "\n" << std::flush;
    }
  }
  if (!o.checkpoint_out.empty()) std::cout << "saved " << o.checkpoint_out << "\n";
}

struct EvalOptions {
  ArtifactLocation artifacts;
  std::string checkpoint, out;
  std::vector<std::string> data, outputs;
  int64_t batch_size = 256;
  int threads = 1;
};

TrainingSession OpenForEval(const EvalOptions& o) {
  ArtifactFiles files = FindArtifacts(o.artifacts);
  ET_CHECK(!files.eval.empty(), ErrorCode::kIoError, "artifact directory '", o.artifacts.dir, "' has no ",
           o.artifacts.prefix, "eval_model.onnx");
  ET_CHECK(!o.checkpoint.empty() || !files.checkpoint.empty(), ErrorCode::kIoError, "artifact directory '",
           o.artifacts.dir, "' has no ", o.artifacts.prefix, "checkpoint");
  CheckpointState state = CheckpointState::Load(o.checkpoint.empty() ? files.checkpoint : o.checkpoint);
  return TrainingSession(state, files.training, files.eval, {}, {o.threads, 0});
}

void Eval(const EvalOptions& o) {
  TrainingSession session = OpenForEval(o);
  Dataset data = LoadFor(o.data, session.EvalInputNames(), "--data");
  std::cout << FormatEval(Evaluate(session, data, o.batch_size)) << std::endl;
}

void Export(const EvalOptions& o) {
  OpenForEval(o).ExportModelForInference(o.out, o.outputs);
  std::cout << "wrote " << o.out << "\n";
}

struct PredictOptions {
  std::string model, labels, out;
  std::vector<std::string> data;
  int64_t batch_size = 256;
  int threads = 1;
};

// Runs an inference model over a dataset in batches; reports accuracy against --labels.
void Predict(const PredictOptions& o) {
  Session session = Session::FromFile(o.model, SessionOptions{o.threads, 0, true});
  std::vector<ValueInfo> infos;
  for (const ValueInfo* input : session.Inputs()) infos.push_back(*input);
  Dataset data = LoadFor(o.data, session.InputNames(), "--data");
  std::optional<Tensor> labels;
  if (!o.labels.empty()) {
    labels = ReadDataArray(o.labels);
    ET_CHECK(labels->rank() == 1 && labels->dim(0) >= data.size, ErrorCode::kInvalidArgument, "--labels '", o.labels,
             "' must hold one label per sample (", data.size, "), got shape ", ShapeToString(labels->shape()));
  }
  std::vector<int64_t> truth = labels ? labels->ToInt64Vector() : std::vector<int64_t>{};
  std::vector<int64_t> predictions, indices;
  for (int64_t start = 0; start < data.size; start += o.batch_size) {
    indices.clear();
    for (int64_t i = start; i < std::min(data.size, start + o.batch_size); ++i) indices.push_back(i);
    Tensor scores = session.Run([&] {
      std::map<std::string, Tensor> feeds;
      std::vector<Tensor> batch = data.Batch(Pointers(infos), indices);
      for (size_t i = 0; i < infos.size(); ++i) feeds[infos[i].name] = batch[i];
      return feeds;
    }())[0];
    ET_CHECK(scores.dtype() == DataType::kFloat32 && scores.rank() == 2, ErrorCode::kInvalidArgument,
             "predict: the first output of '", o.model, "' must be float32 scores [batch, classes], got ",
             DataTypeName(scores.dtype()), " ", ShapeToString(scores.shape()));
    std::vector<int64_t> batch_predictions = ArgMaxRows(scores);
    predictions.insert(predictions.end(), batch_predictions.begin(), batch_predictions.end());
  }
  if (!o.out.empty()) {
    WriteNpy(o.out, Tensor::FromVector<int64_t>(predictions, {static_cast<int64_t>(predictions.size())}));
    std::cout << "wrote " << o.out << "\n";
  }
  if (labels) {
    int64_t correct = 0;
    for (size_t i = 0; i < predictions.size(); ++i) correct += predictions[i] == truth[i];
    std::cout << "accuracy " << std::fixed << std::setprecision(2) << 100.0 * correct / predictions.size() << "% ("
              << correct << "/" << predictions.size() << ")" << std::endl;
  }
}

}  // namespace

void AddTrainCommands(CLI::App& app) {
  auto t = std::make_shared<TrainOptions>();
  auto* train = app.add_subcommand("train", "Train an artifact set on data files (IDX or .npy)");
  t->artifacts.AddOptions(train, true);
  train->add_option("--data", t->data, "NAME=FILE (or FILE, in input order) per training input")->required();
  train->add_option("--eval-data", t->eval_data, "NAME=FILE per eval input; evaluated after each epoch");
  train->add_option("--epochs", t->epochs, "epochs to train in this run")->check(CLI::PositiveNumber);
  train->add_option("--batch-size", t->batch_size, "samples per step")->check(CLI::PositiveNumber);
  train->add_option_function<float>("--lr", [t](const float& v) { t->lr = v; }, "learning rate (default 1e-3)");
  train->add_option("--scheduler", t->scheduler, "none, linear, cosine or step")
      ->check(CLI::IsMember({"none", "linear", "cosine", "step"}));
  train->add_option("--warmup", t->warmup, "linear/cosine: warmup steps")->check(CLI::NonNegativeNumber);
  train->add_option("--total-steps", t->total_steps, "linear/cosine: schedule length (default: the end of this run)");
  train->add_option("--min-lr", t->min_lr, "cosine: final learning rate");
  train->add_option("--step-size", t->step_size, "step: steps between decays")->check(CLI::PositiveNumber);
  train->add_option("--gamma", t->gamma, "step: decay factor");
  train->add_option("--threads", t->threads, "intra-op threads")->check(CLI::Range(1, 256));
  train->add_option("--seed", t->seed, "data order and Dropout seed");
  train->add_option("--memory-limit", t->memory_limit,
                    "bytes the session may hold, such as 512M or 2G; refused beyond (default: none)");
  train->add_option("--memory-budget", t->memory_budget,
                    "bytes for the training step's intermediate tensors, such as 512M or 2G: forward values are "
                    "recomputed in the backward pass to fit (default: none)");
  train->add_option("--cache-frozen-prefix", t->cache_frozen_prefix,
                    "cache the frozen prefix's outputs per sample, up to this many bytes (such as 1G), so that later "
                    "epochs of head-only training skip the frozen backbone (default: no cache)");
  train->add_option("--limit", t->limit, "use only the first N training samples")->check(CLI::NonNegativeNumber);
  train->add_option("--checkpoint-out", t->checkpoint_out, "checkpoint written after each epoch (with optimizer state)");
  train->add_option("--resume", t->resume, "continue from this checkpoint (its epoch count and optimizer state)");
  train->add_option("--metrics", t->metrics, "append one CSV row per epoch to this file");
  train->callback([t] { Train(*t); });

  auto e = std::make_shared<EvalOptions>();
  auto* eval = app.add_subcommand("eval", "Evaluate an artifact set's eval model on data files");
  e->artifacts.AddOptions(eval, false);
  eval->add_option("--data", e->data, "NAME=FILE (or FILE, in input order) per eval input")->required();
  eval->add_option("--checkpoint", e->checkpoint, "checkpoint (default: the directory's)");
  eval->add_option("--batch-size", e->batch_size, "samples per step")->check(CLI::PositiveNumber);
  eval->add_option("--threads", e->threads, "intra-op threads")->check(CLI::Range(1, 256));
  eval->callback([e] { Eval(*e); });

  auto x = std::make_shared<EvalOptions>();
  auto* exp = app.add_subcommand("export", "Write an inference ONNX model with a checkpoint's weights");
  x->artifacts.AddOptions(exp, false);
  exp->add_option("--checkpoint", x->checkpoint, "checkpoint (default: the directory's)");
  exp->add_option("--out,-o", x->out, "inference model to write")->required();
  exp->add_option("--output", x->outputs, "model outputs to keep (default: the eval outputs after the loss)");
  exp->callback([x] { Export(*x); });

  auto p = std::make_shared<PredictOptions>();
  auto* predict = app.add_subcommand("predict", "Classify data files with an inference model; accuracy with --labels");
  predict->add_option("model", p->model, "ONNX inference model")->required();
  predict->add_option("--data", p->data, "NAME=FILE (or FILE, in input order) per model input")->required();
  predict->add_option("--labels", p->labels, "true class per sample (IDX or .npy)");
  predict->add_option("--out", p->out, "write the predicted classes as .npy");
  predict->add_option("--batch-size", p->batch_size, "samples per run")->check(CLI::PositiveNumber);
  predict->add_option("--threads", p->threads, "intra-op threads")->check(CLI::Range(1, 256));
  predict->callback([p] { Predict(*p); });
}

}  // namespace edgetrain::cli
