// Measurements behind bench/run.py (issue 6): artifact generation, session creation, full training
// steps, inference latency and the oneDNN sgemm rate at the MLP's GEMM shapes; also re-saves a
// checkpoint as version 2 for ORT 1.18+. Each mode prints one JSON object on stdout ({"error": ...} and
// exit status 1 on failure).
//   train_step_bench generate MODEL.onnx OUT_DIR [--batch B]
//   train_step_bench train DIR [--threads T] [--batch B] [--input NAME=DTYPE:D0,D1:FILE]... [--create-repeats R]
//                          [--memory-budget BYTES] [--cache-frozen-prefix BYTES] [--frozen-prefix 0|1]
//   train_step_bench infer MODEL.onnx [--threads T] [--batch B]
//   train_step_bench sgemm [--batch B]
//   train_step_bench resave-checkpoint IN OUT
// Timed modes also take --warmup W --min-steps N --max-steps M --budget-s S: after W warm-up calls,
// as many timed calls as fit in S seconds, clamped to [N, M]. A device-only build (EDGETRAIN_BENCH_DEVICE_ONLY)
// has the train, infer and resave-checkpoint modes.
#if !EDGETRAIN_BENCH_DEVICE_ONLY
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if !EDGETRAIN_BENCH_DEVICE_ONLY
#include "autodiff/artifacts.hpp"
#endif
#include "core/error.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"
#include "training/checkpoint_state.hpp"
#include "training/training_session.hpp"

using namespace edgetrain;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A flat JSON object built field by field.
class JsonObject {
 public:
  JsonObject& Add(const std::string& key, double value) { return Raw(key, Number(value)); }
  JsonObject& Add(const std::string& key, const std::string& value) { return Raw(key, JsonString(value)); }
  JsonObject& Add(const std::string& key, const std::vector<double>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) list += (i ? ", " : "") + Number(values[i]);
    return Raw(key, list + "]");
  }
  JsonObject& Raw(const std::string& key, const std::string& json) {
    fields_ += (fields_.empty() ? "" : ", ") + JsonString(key) + ": " + json;
    return *this;
  }
  std::string str() const { return "{" + fields_ + "}"; }

 private:
  static std::string Number(double value) {
    std::ostringstream out;
    out.precision(10);
    out << value;
    return out.str();
  }
  std::string fields_;
};

struct Args {
  std::string mode;
  std::vector<std::string> positional;
  std::vector<std::string> inputs;  // NAME=DTYPE:D0,D1:FILE
  int threads = 1, batch = 64, create_repeats = 5;
  int warmup = 3, min_steps = 20, max_steps = 200;
  double budget_s = 4.0;
  int64_t memory_budget = 0;  // train: TrainingSessionOptions::memory_budget_bytes (0: none)
  int64_t prefix_cache = 0;   // train: cache_frozen_prefix with this many bytes (0: no cache)
  int frozen_prefix = 1;      // train: frozen_prefix_as_inference
};

double ParseNumber(const std::string& option, const std::string& text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  ET_CHECK(error == std::errc() && end == text.data() + text.size(), ErrorCode::kInvalidArgument, "option ", option,
           ": '", text, "' is not a number");
  return value;
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  ET_CHECK(argc >= 2, ErrorCode::kInvalidArgument,
           "usage: train_step_bench generate|train|infer|sgemm|resave-checkpoint ...");
  a.mode = argv[1];
  const std::map<std::string, int*> int_options = {
      {"--threads", &a.threads}, {"--batch", &a.batch},         {"--create-repeats", &a.create_repeats},
      {"--warmup", &a.warmup},   {"--min-steps", &a.min_steps}, {"--max-steps", &a.max_steps},
      {"--frozen-prefix", &a.frozen_prefix}};
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      a.positional.push_back(arg);
      continue;
    }
    ET_CHECK(i + 1 < argc, ErrorCode::kInvalidArgument, "option ", arg, " needs a value");
    std::string value = argv[++i];
    if (auto it = int_options.find(arg); it != int_options.end()) {
      *it->second = static_cast<int>(ParseNumber(arg, value));
    } else if (arg == "--memory-budget") {
      a.memory_budget = static_cast<int64_t>(ParseNumber(arg, value));
    } else if (arg == "--cache-frozen-prefix") {
      a.prefix_cache = static_cast<int64_t>(ParseNumber(arg, value));
    } else if (arg == "--budget-s") {
      a.budget_s = ParseNumber(arg, value);
    } else if (arg == "--input") {
      a.inputs.push_back(value);
    } else {
      Fail(ErrorCode::kInvalidArgument, "unknown option ", arg);
    }
  }
  ET_CHECK(a.threads >= 1 && a.batch >= 1 && a.warmup >= 0 && a.min_steps >= 1 && a.min_steps <= a.max_steps,
           ErrorCode::kInvalidArgument,
           "need --threads >= 1, --batch >= 1, --warmup >= 0 and 1 <= --min-steps <= --max-steps");
  return a;
}

const std::string& Positional(const Args& a, size_t index, const char* what) {
  ET_CHECK(a.positional.size() > index, ErrorCode::kInvalidArgument, a.mode, ": missing ", what);
  return a.positional[index];
}

// Warm-up calls, then timed calls (milliseconds each): as many as fit in the budget at the last warm-up
// call's pace, within [min, max].
std::vector<double> TimeCalls(const Args& a, const std::function<void()>& call) {
  double per_call_ms = 0;  // the last warm-up call's (the first ones pay one-time costs)
  for (int i = 0; i < a.warmup; ++i) {
    Clock::time_point start = Clock::now();
    call();
    per_call_ms = MillisecondsSince(start);
  }
  int steps = per_call_ms > 0 ? static_cast<int>(a.budget_s * 1e3 / per_call_ms) : a.max_steps;
  steps = std::clamp(steps, a.min_steps, a.max_steps);
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    Clock::time_point start = Clock::now();
    call();
    times.push_back(MillisecondsSince(start));
  }
  return times;
}

JsonObject& AddTimes(JsonObject& json, const std::vector<double>& times) {
  return json.Add("median_ms", Median(times))
      .Add("min_ms", *std::min_element(times.begin(), times.end()))
      .Add("steps", static_cast<double>(times.size()));
}

// Reads a raw little-endian tensor given as NAME=DTYPE:D0,D1,...:FILE.
std::pair<std::string, Tensor> ReadInputSpec(const std::string& spec) {
  size_t eq = spec.find('='), c1 = spec.find(':', eq), c2 = spec.find(':', c1 + 1);
  ET_CHECK(eq != std::string::npos && c1 != std::string::npos && c2 != std::string::npos, ErrorCode::kInvalidArgument,
           "--input '", spec, "' must be NAME=DTYPE:D0,D1:FILE");
  std::string dtype = spec.substr(eq + 1, c1 - eq - 1);
  Shape shape;
  std::stringstream dims(spec.substr(c1 + 1, c2 - c1 - 1));
  for (std::string d; std::getline(dims, d, ',');) shape.push_back(static_cast<int64_t>(ParseNumber("--input", d)));
  const std::map<std::string, DataType> types = {
      {"float32", DataType::kFloat32}, {"int64", DataType::kInt64}, {"int32", DataType::kInt32}};
  ET_CHECK(types.count(dtype), ErrorCode::kInvalidArgument, "--input '", spec, "': unsupported dtype ", dtype);
  Tensor tensor(types.at(dtype), shape);
  std::string file = spec.substr(c2 + 1);
  std::ifstream in(file, std::ios::binary);
  in.read(static_cast<char*>(tensor.raw()), static_cast<std::streamsize>(tensor.nbytes()));
  ET_CHECK(in.gcount() == static_cast<std::streamsize>(tensor.nbytes()), ErrorCode::kIoError, "--input '", spec,
           "': ", file, " holds fewer than ", tensor.nbytes(), " bytes");
  return {spec.substr(0, eq), tensor};
}

// A seeded input for a declared model input: symbolic dims become `batch`; floats uniform in [0, 1),
// integers (class labels) i % 10.
Tensor SyntheticInput(const ValueInfo& info, int64_t batch, std::mt19937& rng) {
  ET_CHECK(info.has_shape, ErrorCode::kInvalidArgument, "input '", info.name, "' has no declared shape; pass --input");
  Shape shape;
  for (const Dim& d : info.shape) shape.push_back(d.known() ? d.value : batch);
  Tensor t(info.dtype, shape);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (info.dtype) {
      case DataType::kFloat32: t.data<float>()[i] = uniform(rng); break;
      case DataType::kInt64: t.data<int64_t>()[i] = i % 10; break;
      case DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(i % 10); break;
      default:
        Fail(ErrorCode::kNotImplemented, "input '", info.name, "': cannot synthesize ", DataTypeName(info.dtype));
    }
  }
  return t;
}

std::vector<Tensor> Inputs(const std::vector<ValueInfo>& infos, const Args& a) {
  std::map<std::string, Tensor> given;
  for (const std::string& spec : a.inputs) given.insert(ReadInputSpec(spec));
  std::mt19937 rng(42);
  std::vector<Tensor> inputs;
  for (const ValueInfo& info : infos) {
    auto it = given.find(info.name);
    inputs.push_back(it != given.end() ? it->second : SyntheticInput(info, a.batch, rng));
  }
  return inputs;
}

// Feeds for every input of `session`, as Inputs makes them.
std::map<std::string, Tensor> Feeds(const Session& session, const Args& a) {
  std::vector<ValueInfo> infos;
  for (const ValueInfo* input : session.Inputs()) infos.push_back(*input);
  std::vector<Tensor> inputs = Inputs(infos, a);
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < infos.size(); ++i) feeds[infos[i].name] = inputs[i];
  return feeds;
}

std::string FindFile(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (fs::exists(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  return "";
}

struct ArtifactFiles {
  std::string training, eval, optimizer, checkpoint;
};

// The file names edgetrain and ORT's generate_artifacts use.
ArtifactFiles FindArtifacts(const std::string& dir) {
  ArtifactFiles f{FindFile(dir, {"training_model.onnx", "training_model.ort"}),
                  FindFile(dir, {"eval_model.onnx", "eval_model.ort"}),
                  FindFile(dir, {"optimizer_model.onnx", "optimizer_model.ort", "adamw.onnx"}),
                  FindFile(dir, {"checkpoint", "checkpoint.ckpt"})};
  ET_CHECK(!f.training.empty() && !f.checkpoint.empty(), ErrorCode::kIoError, "'", dir,
           "' holds no training model or checkpoint");
  return f;
}

TrainingSession CreateSession(const ArtifactFiles& f, int threads, int64_t memory_budget = 0, int64_t prefix_cache = 0,
                              bool frozen_prefix = true) {
  TrainingSessionOptions options{.num_threads = threads};
  if (memory_budget > 0) options.memory_budget_bytes = memory_budget;
  options.frozen_prefix_as_inference = frozen_prefix;
  if (prefix_cache > 0) {
    options.cache_frozen_prefix = true;
    options.frozen_prefix_cache_bytes = prefix_cache;
  }
  return TrainingSession(CheckpointState::Load(f.checkpoint), f.training, f.eval, f.optimizer, options);
}

#if !EDGETRAIN_BENCH_DEVICE_ONLY
// Bytes of the training graph's planned intermediate arena: the training model run once on its own.
double TrainingArenaBytes(const ArtifactFiles& f, TrainingSession& training, const Args& a) {
  Session session = Session::FromFile(f.training);
  std::map<std::string, Tensor> feeds = Feeds(session, a);
  for (const std::string& name : training.state().ParameterNames()) feeds[name] = training.state().GetParameter(name);
  session.Run(feeds);
  return static_cast<double>(session.planned_peak_bytes());
}

// Artifacts (CrossEntropy, AdamW) plus an inference export of the initial weights.
std::string Generate(const Args& a) {
  const std::string& model = Positional(a, 0, "MODEL.onnx");
  const std::string& dir = Positional(a, 1, "OUT_DIR");
  fs::create_directories(dir);
  ArtifactOptions options;
  options.additional_outputs = {LoadModel(model).graph.outputs.at(0).name};  // what the inference export keeps
  options.loss.type = LossType::kCrossEntropy;
  options.optimizer.type = OptimizerType::kAdamW;
  Clock::time_point start = Clock::now();
  GenerateArtifacts(model, dir, options);
  double generate_ms = MillisecondsSince(start);

  ArtifactFiles files = FindArtifacts(dir);
  TrainingSession training = CreateSession(files, 1);
  std::string inference = (fs::path(dir) / "inference.onnx").string();
  training.ExportModelForInference(inference);
  Session infer = Session::FromFile(inference);
  infer.Run(Feeds(infer, a));

  JsonObject json;
  json.Add("generate_ms", generate_ms)
      .Add("inference_model", inference)
      .Add("batch", a.batch)
      .Add("training_arena_bytes", TrainingArenaBytes(files, training, a))
      .Add("inference_arena_bytes", static_cast<double>(infer.planned_peak_bytes()));
  return json.str();
}

#endif

// Session creation (checkpoint load + TrainingSession) then train step + optimizer step + lazy reset
// over one fixed batch (with --cache-frozen-prefix, the warm-up steps fill the cache: the timed steps are
// those of a later epoch).
std::string Train(const Args& a) {
  ArtifactFiles files = FindArtifacts(Positional(a, 0, "DIR"));
  std::vector<double> create_ms;
  std::optional<TrainingSession> session;
  for (int i = 0; i < std::max(1, a.create_repeats); ++i) {
    session.reset();
    Clock::time_point start = Clock::now();
    session.emplace(CreateSession(files, a.threads, a.memory_budget, a.prefix_cache, a.frozen_prefix != 0));
    create_ms.push_back(MillisecondsSince(start));
  }
  std::vector<Tensor> inputs = Inputs(session->TrainingInputInfos(), a);
  std::vector<double> losses;
  std::vector<Tensor> outputs;  // kept: later steps write the loss into the same tensor
  auto step = [&] {
    session->TrainStep(inputs, outputs);
    if (session->has_optimizer_model()) session->OptimizerStep();
    session->LazyResetGrad();
    losses.push_back(outputs.at(0).dtype() == DataType::kFloat32 ? outputs[0].data<float>()[0] : 0.0);
  };
  std::vector<double> times = TimeCalls(a, step);
  JsonObject json;
  AddTimes(json, times)
      .Add("threads", a.threads)
      .Add("create_first_ms", create_ms.front())
      .Add("create_median_ms", Median(create_ms))
      .Add("first_loss", losses.front())
      .Add("last_loss", losses.back())
      .Add("optimizer_steps", static_cast<double>(session->optimizer_step()))
      .Add("training_arena_bytes", static_cast<double>(session->training_arena_bytes()))
      .Add("recomputed_values", static_cast<double>(session->recomputed_values()));
  const FrozenPrefixStats prefix = session->frozen_prefix_stats();
  json.Add("frozen_prefix_nodes", static_cast<double>(prefix.prefix_nodes))
      .Add("prefix_cache_hits", static_cast<double>(prefix.hits))
      .Add("prefix_cache_misses", static_cast<double>(prefix.misses))
      .Add("prefix_cache_bytes", static_cast<double>(prefix.cache_bytes));
  return json.str();
}

std::string Infer(const Args& a) {
  Clock::time_point start = Clock::now();
  Session session = Session::FromFile(Positional(a, 0, "MODEL.onnx"), SessionOptions{a.threads});
  double load_ms = MillisecondsSince(start);
  std::map<std::string, Tensor> feeds = Feeds(session, a);
  std::vector<double> times = TimeCalls(a, [&] { session.Run(feeds); });
  JsonObject json;
  AddTimes(json, times)
      .Add("threads", a.threads)
      .Add("batch", a.batch)
      .Add("load_ms", load_ms)
      .Add("arena_bytes", static_cast<double>(session.planned_peak_bytes()));
  return json.str();
}

#if !EDGETRAIN_BENCH_DEVICE_ONLY
// oneDNN sgemm over the GEMMs of one MLP (784-512-256-10) training step at batch B, row-major as the
// ONNX Gemm nodes (weights [out, in]): forward Y = X W^T, backward dX = dY W and dW = dY^T X.
std::string Sgemm(const Args& a) {
  struct Gemm {
    char transa, transb;
    int64_t m, n, k;
  };
  const int64_t b = a.batch;
  const std::vector<std::pair<int64_t, int64_t>> layers = {{784, 512}, {512, 256}, {256, 10}};
  std::vector<Gemm> gemms;
  for (auto [in, out] : layers) {
    gemms.push_back({'N', 'T', b, out, in});  // Y[b, out] = X[b, in] W[out, in]^T
    gemms.push_back({'N', 'N', b, in, out});  // dX[b, in] = dY[b, out] W[out, in]
    gemms.push_back({'T', 'N', out, in, b});  // dW[out, in] = dY[b, out]^T X[b, in]
  }
  const int64_t largest = 784 * 512;
  std::vector<float> A(largest, 0.5f), B(largest, 0.25f), C(largest, 0.0f);
  double flops = 0;
  for (const Gemm& g : gemms) flops += 2.0 * g.m * g.n * g.k;
  auto step = [&] {
    for (const Gemm& g : gemms) {
      int64_t lda = g.transa == 'N' ? g.k : g.m, ldb = g.transb == 'N' ? g.n : g.k;
      dnnl_status_t status =
          dnnl_sgemm(g.transa, g.transb, g.m, g.n, g.k, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), g.n);
      ET_CHECK(status == dnnl_success, ErrorCode::kInternal, "dnnl_sgemm failed with status ", status);
    }
  };
  std::vector<double> times = TimeCalls(a, step);
  double median_ms = Median(times);
  JsonObject json;
  AddTimes(json, times).Add("batch", a.batch).Add("gemm_flops", flops).Add("gflops_per_s", flops / (median_ms * 1e6));
  return json.str();
}

#endif

// Loads a checkpoint of any version edgetrain reads and writes it as version 2, optimizer state included
// when it has one.
std::string ResaveCheckpoint(const Args& a) {
  const std::string& in = Positional(a, 0, "IN checkpoint");
  const std::string& out = Positional(a, 1, "OUT checkpoint");
  CheckpointState state = CheckpointState::Load(in);
  CheckpointState::Save(state, out, state.has_optimizer_state());
  JsonObject json;
  json.Add("checkpoint", out)
      .Add("version_read", state.checkpoint().version)
      .Add("version_written", 2)
      .Add("parameters", static_cast<double>(state.ParameterNames().size()))
      .Raw("optimizer_state", state.has_optimizer_state() ? "true" : "false");
  return json.str();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a = ParseArgs(argc, argv);
    const std::map<std::string, std::function<std::string(const Args&)>> modes = {
#if !EDGETRAIN_BENCH_DEVICE_ONLY
        {"generate", Generate},
        {"sgemm", Sgemm},
#endif
        {"train", Train},
        {"infer", Infer},
        {"resave-checkpoint", ResaveCheckpoint}};
    auto mode = modes.find(a.mode);
    ET_CHECK(mode != modes.end(), ErrorCode::kInvalidArgument, "unknown mode '", a.mode,
             "' (generate, train, infer, sgemm, resave-checkpoint)");
    std::cout << mode->second(a) << std::endl;
    return 0;
  } catch (const Error& e) {
    std::cout << JsonObject().Add("error", std::string(ErrorCodeName(e.code())) + ": " + e.what()).str() << std::endl;
  } catch (const std::exception& e) {
    std::cout << JsonObject().Add("error", e.what()).str() << std::endl;
  }
  return 1;
}
