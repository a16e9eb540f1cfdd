// The frozen prefix of head-only training (TrainingSessionOptions::frozen_prefix_as_inference and
// cache_frozen_prefix): a small eval-mode CNN backbone with a Gemm head, trained with and without the
// per-sample cache, mixed cached and uncached batches, the cache limit, and the refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "autodiff/artifacts.hpp"
#include "edgetrain/edgetrain_capi.hpp"
#include "onnx/exporter.hpp"
#include "test_util.hpp"
#include "training/training_session.hpp"

using namespace edgetrain;
using namespace edgetrain::testing;
namespace fs = std::filesystem;

namespace {

#define EXPECT_INVALID(statement, needle) EXPECT_ERROR(statement, ErrorCode::kInvalidArgument, needle)

constexpr int64_t kChannels = 8, kClasses = 4, kImage = 6;

fs::path TempDir(const std::string& name) {
  static const fs::path root = fs::temp_directory_path() / ("edgetrain_frozen_prefix_" + std::to_string(getpid()));
  static struct Cleanup {
    ~Cleanup() { fs::remove_all(root); }
  } cleanup;
  fs::path dir = root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Tensor Random(const Shape& shape, uint32_t seed, float low = -1, float high = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(low, high);
  Tensor t(DataType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

enum class Backbone {
  kEvalBatchNorm,
  kTrainingBatchNorm,
  kDropout,
  kAttention,               // a vision transformer's shapes, computed from the batch as PyTorch exports them
  kAttentionMixingSamples,  // the same, plus a Reshape and Softmax that mix the samples
  kAttentionUnknownImage,   // the same, its input declaring no image size
};

// A model being written: input x [N, 3, 6, 6], random initializers from a running seed, nodes named
// "<op>_<index>"; Save adds the output [N, classes] and writes model.onnx.
struct ModelWriter {
  Model m;
  Graph& g = m.graph;
  uint32_t seed;

  ModelWriter(const std::string& source, uint32_t first_seed) : seed(first_seed) {
    m.source = source;
    m.ir_version = 8;
    m.opsets = {{"", 17}};
    g.inputs.push_back(ValueInfoOf("x", DataType::kFloat32, {-1, 3, kImage, kImage}));
  }
  std::string Init(const std::string& name, const Shape& shape, float low = -0.5f, float high = 0.5f) {
    g.initializers[name] = Random(shape, seed++, low, high);
    return name;
  }
  std::string Ints(const std::string& name, const std::vector<int64_t>& values) {
    g.initializers[name] = Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())});
    return name;
  }
  void Add(const std::string& op, std::vector<std::string> in, std::vector<std::string> out, AttributeMap attrs = {}) {
    Node n;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attributes = std::move(attrs);
    g.nodes.push_back(std::move(n));
  }
  // A node whose one output is named as the node is; returns that name.
  std::string Op(const std::string& op, std::vector<std::string> in, AttributeMap attrs = {}) {
    const std::string name = op + "_" + std::to_string(g.nodes.size());
    Add(op, std::move(in), {name}, std::move(attrs));
    return name;
  }
  std::string Save(const fs::path& dir) {
    g.outputs.push_back(ValueInfoOf("output", DataType::kFloat32, {-1, kClasses}));
    const std::string path = (dir / "model.onnx").string();
    SaveModel(m, path);
    return path;
  }
};

std::string WriteAttentionModel(const fs::path& dir, Backbone backbone);

// x [N,3,6,6] -> Conv-BN-Relu -> Conv-BN-Clip (ReLU6) [-> Dropout] -> GlobalAveragePool -> Flatten -> Gemm head.
std::string WriteModel(const fs::path& dir, Backbone backbone) {
  if (backbone >= Backbone::kAttention) return WriteAttentionModel(dir, backbone);
  ModelWriter w("frozen prefix test", 1);
  auto bn = [&](const std::string& x, const std::string& y, const std::string& p) {
    std::vector<std::string> in = {x, w.Init(p + ".scale", {kChannels}, 0.5f, 1.5f), w.Init(p + ".bias", {kChannels}),
                                   w.Init(p + ".mean", {kChannels}), w.Init(p + ".var", {kChannels}, 0.5f, 1.5f)};
    if (backbone == Backbone::kTrainingBatchNorm) {
      w.Add("BatchNormalization", in, {y, p + ".running_mean", p + ".running_var"},
            {{"training_mode", Attribute::Int(1)}});
    } else {
      w.Add("BatchNormalization", in, {y});
    }
  };
  const AttributeMap pad1 = {{"pads", Attribute::Ints({1, 1, 1, 1})}};
  w.Add("Conv", {"x", w.Init("conv1.w", {kChannels, 3, 3, 3}), w.Init("conv1.b", {kChannels})}, {"c1"}, pad1);
  bn("c1", "b1", "bn1");
  w.Add("Relu", {"b1"}, {"r1"});
  w.Add("Conv", {"r1", w.Init("conv2.w", {kChannels, kChannels, 3, 3})}, {"c2"}, pad1);
  bn("c2", "b2", "bn2");
  w.g.initializers["clip.min"] = Tensor::Scalar<float>(0);
  w.g.initializers["clip.max"] = Tensor::Scalar<float>(6);
  w.Add("Clip", {"b2", "clip.min", "clip.max"}, {"r2"});
  std::string features = "r2";
  if (backbone == Backbone::kDropout) {
    w.Add("Constant", {}, {"ratio"}, {{"value", Attribute::TensorValue(Tensor::Scalar<float>(0.5f))}});
    w.Add("Constant", {}, {"mode"}, {{"value", Attribute::TensorValue(Tensor::Scalar<bool>(true))}});
    w.Add("Dropout", {"r2", "ratio", "mode"}, {"d2"});
    features = "d2";
  }
  w.Add("GlobalAveragePool", {features}, {"pool"});
  w.Add("Flatten", {"pool"}, {"flat"});
  w.Add("Gemm", {"flat", w.Init("head.w", {kClasses, kChannels}), w.Init("head.b", {kClasses})}, {"output"},
        {{"transB", Attribute::Int(1)}});
  return w.Save(dir);
}

// A one-block vision transformer whose Reshape and Expand shapes are computed from Shape(x) at run time:
// 3x3 patches -> [N,4,8] tokens, an expanded class token, LayerNorm, two-head self-attention in the
// [length, batch x heads, head] layout of PyTorch's MultiheadAttention export, residual, the class token's
// features -> Gemm head.
std::string WriteAttentionModel(const fs::path& dir, Backbone backbone) {
  constexpr int64_t kWidth = kChannels, kTokens = 5, kHeads = 2, kHead = kWidth / kHeads;
  ModelWriter w("frozen prefix attention test", 11);
  if (backbone == Backbone::kAttentionUnknownImage) w.g.inputs[0].shape[2] = w.g.inputs[0].shape[3] = Dim{-1, "side"};
  auto perm = [](std::vector<int64_t> p) { return AttributeMap{{"perm", Attribute::Ints(std::move(p))}}; };
  const AttributeMap axis0 = {{"axis", Attribute::Int(0)}};
  w.g.initializers["zero"] = Tensor::Scalar<int64_t>(0);
  const std::string n =
      w.Op("Unsqueeze", {w.Op("Gather", {w.Op("Shape", {"x"}), "zero"}, axis0), w.Ints("axes0", {0})});
  const std::string patches = w.Op("Conv", {"x", w.Init("patch.w", {kWidth, 3, 3, 3}), w.Init("patch.b", {kWidth})},
                                   {{"strides", Attribute::Ints({3, 3})}});
  const std::string grid =
      w.Op("Reshape", {patches, w.Op("Concat", {n, w.Ints("width", {kWidth}), w.Ints("minus1", {-1})}, axis0)});
  const std::string tokens = w.Op("Transpose", {grid}, perm({0, 2, 1}));
  const std::string cls =
      w.Op("Expand", {w.Init("cls", {1, 1, kWidth}), w.Op("Concat", {n, w.Ints("one", {1}), "one"}, axis0)});
  const std::string seq = w.Op("Add", {w.Op("Concat", {cls, tokens}, {{"axis", Attribute::Int(1)}}),
                                       w.Init("pos", {1, kTokens, kWidth})});
  const std::string norm =
      w.Op("LayerNormalization", {seq, w.Init("ln.g", {kWidth}, 0.5f, 1.5f), w.Init("ln.b", {kWidth})});
  const std::string by_length = w.Op("Transpose", {norm}, perm({1, 0, 2}));  // [5, N, 8]
  const std::string heads_shape = w.Op(
      "Concat", {w.Ints("tokens", {kTokens}), w.Op("Mul", {n, w.Ints("heads", {kHeads})}), w.Ints("head", {kHead})},
      axis0);
  auto project = [&](const std::string& name) {  // [N x heads, 5, 4]
    const std::string p = w.Op("MatMul", {by_length, w.Init(name, {kWidth, kWidth})});
    return w.Op("Transpose", {w.Op("Reshape", {p, heads_shape})}, perm({1, 0, 2}));
  };
  const std::string q = project("wq"), k = project("wk"), v = project("wv");
  const std::string scores = w.Op("MatMul", {q, w.Op("Transpose", {k}, perm({0, 2, 1}))});
  const std::string context = w.Op("MatMul", {w.Op("Softmax", {scores}, {{"axis", Attribute::Int(-1)}}), v});
  const std::string rows =
      w.Op("Reshape", {w.Op("Transpose", {context}, perm({1, 0, 2})),
                       w.Op("Concat", {w.Op("Mul", {w.Ints("tokens1", {kTokens}), n}), "width"}, axis0)});
  const std::string out = w.Op("Gemm", {rows, w.Init("wo", {kWidth, kWidth}), w.Init("bo", {kWidth})},
                               {{"transB", Attribute::Int(1)}});
  const std::string back = w.Op("Reshape", {out, w.Op("Concat", {"tokens1", n, "width"}, axis0)});
  std::string block = w.Op("Add", {seq, w.Op("Transpose", {back}, perm({1, 0, 2}))});
  if (backbone == Backbone::kAttentionMixingSamples) {  // [N, 5, 8] -> [5, 8N], a softmax over 8N, and back
    const std::string spread =
        w.Op("Reshape", {block, w.Op("Concat", {"tokens1", w.Op("Mul", {n, "width"})}, axis0)});
    block = w.Op("Reshape", {w.Op("Softmax", {spread}, {{"axis", Attribute::Int(1)}}),
                             w.Op("Concat", {n, "tokens1", "width"}, axis0)});
  }
  const std::string features = w.Op("Gather", {block, "zero"}, {{"axis", Attribute::Int(1)}});
  w.Add("Gemm", {features, w.Init("head.w", {kClasses, kWidth}), w.Init("head.b", {kClasses})}, {"output"},
        {{"transB", Attribute::Int(1)}});
  return w.Save(dir);
}

struct Artifacts {
  fs::path dir;
  TrainingSession Open(TrainingSessionOptions options = {}) const {
    return TrainingSession(CheckpointState::Load((dir / "checkpoint").string()), (dir / "training_model.onnx").string(),
                           (dir / "eval_model.onnx").string(), (dir / "optimizer_model.onnx").string(), options);
  }
};

Artifacts Generate(const std::string& name, Backbone backbone, bool head_only = true, bool as_exported = true) {
  fs::path dir = TempDir(name);
  ArtifactOptions options;
  if (head_only) options.requires_grad = {"head.w", "head.b"};
  options.frozen_backbone_as_exported = as_exported;
  GenerateArtifacts(WriteModel(dir, backbone), (dir / "artifacts").string(), options);
  return {dir / "artifacts"};
}

const Artifacts& EvalCnn() {
  static Artifacts a = Generate("eval_cnn", Backbone::kEvalBatchNorm);
  return a;
}

// Sample i of a fixed data set: an image and a label.
Tensor Image(int64_t i) { return Random({1, 3, kImage, kImage}, 100 + static_cast<uint32_t>(i), 0, 1); }

std::vector<Tensor> Batch(const std::vector<int64_t>& samples) {
  const int64_t n = static_cast<int64_t>(samples.size());
  Tensor x(DataType::kFloat32, {n, 3, kImage, kImage});
  Tensor y(DataType::kInt64, {n});
  for (int64_t k = 0; k < n; ++k) {
    Tensor img = Image(samples[static_cast<size_t>(k)]);
    std::memcpy(x.data<float>() + k * img.numel(), img.raw(), img.nbytes());
    y.data<int64_t>()[k] = samples[static_cast<size_t>(k)] % kClasses;
  }
  return {x, y};
}

// One step (train, optimizer, reset); returns the loss.
float Step(TrainingSession& s, const std::vector<int64_t>& samples) {
  std::vector<Tensor> out = s.TrainStep(Batch(samples));
  s.OptimizerStep();
  s.LazyResetGrad();
  return out[0].data<float>()[0];
}

std::vector<float> Parameters(TrainingSession& s) {
  Tensor flat(DataType::kFloat32, {static_cast<int64_t>(s.GetParametersSize())});
  s.CopyParametersToBuffer(flat);
  return flat.ToVector<float>();
}

TrainingSessionOptions Cached(int64_t limit = int64_t{1} << 30) {
  TrainingSessionOptions o;
  o.cache_frozen_prefix = true;
  o.frozen_prefix_cache_bytes = limit;
  return o;
}

const std::vector<std::vector<int64_t>> kEpoch = {{0, 1, 2}, {3, 4, 5}};

TEST(FrozenPrefix, SplitsAtTheHeadInput) {
  TrainingSession s = EvalCnn().Open();
  const FrozenPrefixStats stats = s.frozen_prefix_stats();
  EXPECT_TRUE(stats.active);
  EXPECT_FALSE(stats.cache_enabled);
  EXPECT_EQ(stats.boundary, std::vector<std::string>{"flat"});
  // Compiled: both BatchNormalizations folded into their Conv, the Relu fused into the first.
  EXPECT_EQ(stats.prefix_nodes, 5u);  // FusedConv, Conv, Clip, GlobalAveragePool, Flatten
  TrainingSessionOptions off;
  off.frozen_prefix_as_inference = false;
  EXPECT_FALSE(EvalCnn().Open(off).frozen_prefix_stats().active);
}

// The folded prefix rounds differently from the training graph's unfolded Conv-BatchNormalization.
TEST(FrozenPrefix, MatchesTheTrainingGraphAsGiven) {
  TrainingSession split = EvalCnn().Open();
  TrainingSessionOptions off;
  off.frozen_prefix_as_inference = false;
  TrainingSession whole = EvalCnn().Open(off);
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& batch : kEpoch) EXPECT_NEAR(Step(split, batch), Step(whole, batch), 1e-5);
  const std::vector<float> a = Parameters(split), b = Parameters(whole);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
  EXPECT_LT(split.training_arena_bytes(), whole.training_arena_bytes());
}

TEST(FrozenPrefix, CachedStepsAreBitIdentical) {
  TrainingSession plain = EvalCnn().Open();
  TrainingSession cached = EvalCnn().Open(Cached());
  for (int epoch = 0; epoch < 3; ++epoch)
    for (const auto& batch : kEpoch) {
      const float expected = Step(plain, batch);
      EXPECT_EQ(Step(cached, batch), expected) << "epoch " << epoch;
    }
  EXPECT_EQ(Parameters(cached), Parameters(plain));
  EXPECT_EQ(cached.GetGradient("head.w").ToVector<float>(), plain.GetGradient("head.w").ToVector<float>());
  const FrozenPrefixStats stats = cached.frozen_prefix_stats();
  EXPECT_TRUE(stats.cache_enabled);
  EXPECT_EQ(stats.cached_samples, 6u);
  EXPECT_EQ(stats.misses, 6u);
  EXPECT_EQ(stats.hits, 12u);
  EXPECT_EQ(stats.cache_bytes, 6u * (kChannels * 4 + 64));
}

// Batches mixing cached and new samples, the same sample twice, and another batch size. The new samples
// run through the prefix as a smaller batch; its kernels give each sample the same bits at any batch size.
TEST(FrozenPrefix, MixedBatches) {
  TrainingSession plain = EvalCnn().Open();
  TrainingSession cached = EvalCnn().Open(Cached());
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2}, {3, 1, 4}, {5, 0, 6, 7}, {10, 10, 2}, {8, 9}, {1, 8}};
  for (const auto& batch : batches) EXPECT_EQ(Step(cached, batch), Step(plain, batch));
  EXPECT_EQ(Parameters(cached), Parameters(plain));
  const FrozenPrefixStats stats = cached.frozen_prefix_stats();
  EXPECT_EQ(stats.cached_samples, 11u);
  EXPECT_EQ(stats.hits, 5u);     // 1, 0, 2, 1, 8
  EXPECT_EQ(stats.misses, 12u);  // 0 1 2 3 4 5 6 7 10 10 8 9 (10 twice in one batch)
}

TEST(FrozenPrefix, CacheLimitKeepsTheFirstSamples) {
  const uint64_t entry = kChannels * 4 + 64;
  TrainingSession plain = EvalCnn().Open();
  TrainingSession cached = EvalCnn().Open(Cached(static_cast<int64_t>(2 * entry + 10)));
  for (int epoch = 0; epoch < 3; ++epoch)
    for (const auto& batch : kEpoch) EXPECT_EQ(Step(cached, batch), Step(plain, batch));
  EXPECT_EQ(Parameters(cached), Parameters(plain));
  const FrozenPrefixStats stats = cached.frozen_prefix_stats();
  EXPECT_EQ(stats.cached_samples, 2u);
  EXPECT_EQ(stats.cache_bytes, 2 * entry);
  EXPECT_EQ(stats.hits, 4u);  // samples 0 and 1 in epochs 2 and 3
  EXPECT_EQ(stats.misses, 14u);
}

// A frozen parameter written from outside (UpdateParameter) rebuilds the prefix and empties the cache.
TEST(FrozenPrefix, FrozenParameterUpdateInvalidatesTheCache) {
  TrainingSession plain = EvalCnn().Open();
  TrainingSession cached = EvalCnn().Open(Cached());
  for (const auto& batch : kEpoch) EXPECT_EQ(Step(cached, batch), Step(plain, batch));
  const Tensor w = Random({kChannels, 3, 3, 3}, 77);
  plain.state().UpdateParameter("conv1.w", w);
  cached.state().UpdateParameter("conv1.w", w);
  for (const auto& batch : kEpoch) EXPECT_EQ(Step(cached, batch), Step(plain, batch));
  EXPECT_EQ(cached.frozen_prefix_stats().hits, 0u);
  EXPECT_EQ(Parameters(cached), Parameters(plain));
}

TEST(FrozenPrefix, RefusesTrainingModeBatchNorm) {
  const Artifacts a = Generate("training_bn", Backbone::kTrainingBatchNorm);
  EXPECT_INVALID(a.Open(Cached()), "BatchNormalization_1");
  EXPECT_INVALID(a.Open(Cached()), "batch's statistics");
  TrainingSession plain = a.Open();  // without the cache it trains
  EXPECT_TRUE(std::isfinite(Step(plain, {0, 1, 2})));
  // An eval-mode backbone trains in training mode unless generate-artifacts keeps it as exported.
  const Artifacts converted = Generate("converted_bn", Backbone::kEvalBatchNorm, true, /*as_exported=*/false);
  EXPECT_INVALID(converted.Open(Cached()), "BatchNormalization_1");
}

TEST(FrozenPrefix, RefusesDropout) {
  const Artifacts a = Generate("dropout", Backbone::kDropout);
  EXPECT_INVALID(a.Open(Cached()), "Dropout_");
  EXPECT_INVALID(a.Open(Cached()), "random numbers");
  TrainingSession plain = a.Open();
  EXPECT_TRUE(std::isfinite(Step(plain, {0, 1, 2})));
}

TEST(FrozenPrefix, BadOptions) {
  for (int64_t bytes : {int64_t{0}, int64_t{-5}}) {
    TrainingSessionOptions o = Cached(bytes);
    EXPECT_INVALID(EvalCnn().Open(o), "frozen_prefix_cache_bytes must be a positive number of bytes");
  }
  TrainingSessionOptions no_prefix = Cached();
  no_prefix.frozen_prefix_as_inference = false;
  EXPECT_INVALID(EvalCnn().Open(no_prefix), "cache_frozen_prefix needs frozen_prefix_as_inference");
  const Artifacts full = Generate("full", Backbone::kEvalBatchNorm, /*head_only=*/false);
  EXPECT_INVALID(full.Open(Cached()), "has no frozen prefix");
  TrainingSession cached = EvalCnn().Open(Cached());
  std::vector<Tensor> batch = Batch({0, 1});
  batch[0] = Tensor::Scalar<float>(1);  // no batch axis
  EXPECT_INVALID(cached.TrainStep(batch), "batch axis");
}

// A vision transformer's shapes computed from the batch (Shape -> Gather -> Concat -> Reshape, an
// expanded class token, attention's batch x heads axis): the check follows them by running the prefix at
// two batch sizes, and cached steps give the bits of uncached ones, at batch sizes other than the probes'.
TEST(FrozenPrefix, AttentionWithShapesComputedFromTheBatch) {
  const Artifacts a = Generate("attention", Backbone::kAttention);
  TrainingSession plain = a.Open();
  TrainingSession cached = a.Open(Cached());
  const std::vector<std::vector<int64_t>> batches = {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 2, 3}, {4, 5, 6, 7},
                                                     {8, 0, 5}, {9}, {9, 8, 1, 0, 7}};
  for (const auto& batch : batches) EXPECT_EQ(Step(cached, batch), Step(plain, batch));
  EXPECT_EQ(Parameters(cached), Parameters(plain));
  const FrozenPrefixStats stats = cached.frozen_prefix_stats();
  EXPECT_TRUE(stats.cache_enabled);
  EXPECT_EQ(stats.boundary.size(), 1u);
  EXPECT_EQ(stats.cached_samples, 10u);
  EXPECT_EQ(stats.hits, 15u);  // 0-7 again, 0 and 5, then 9 8 1 0 7
  EXPECT_EQ(stats.misses, 10u);
}

TEST(FrozenPrefix, RefusesAReshapeThatMixesTheSamples) {
  const Artifacts a = Generate("attention_mixing", Backbone::kAttentionMixingSamples);
  EXPECT_INVALID(a.Open(Cached()), "Reshape_");
  EXPECT_INVALID(a.Open(Cached()), "does not keep each sample's elements on one axis");
  TrainingSession plain = a.Open();
  EXPECT_TRUE(std::isfinite(Step(plain, {0, 1, 2})));
}

TEST(FrozenPrefix, ShapesFromTheBatchNeedTheInputsOtherDims) {
  const Artifacts a = Generate("attention_unknown_image", Backbone::kAttentionUnknownImage);
  EXPECT_INVALID(a.Open(Cached()), "input 'x' declares no fixed shape beyond the batch axis");
  TrainingSession plain = a.Open();
  EXPECT_TRUE(std::isfinite(Step(plain, {0, 1, 2})));
}

// The C ABI: the option, its setter's bad values, the refusal, and the cache's counters.
TEST(FrozenPrefix, CApi) {
  et_session_options options;
  et_session_options_init(&options);
  EXPECT_EQ(options.frozen_prefix_cache_bytes, 0);
  for (int64_t bytes : {int64_t{0}, int64_t{-1}}) {
    et_error* error = et_session_options_set_frozen_prefix_cache(&options, bytes);
    EXPECT_EQ(et_error_get_code(error), ET_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(et_error_get_message(error)).find("frozen prefix cache"), std::string::npos);
    et_error_free(error);
  }
  const Artifacts& a = EvalCnn();
  const std::string training = (a.dir / "training_model.onnx").string(), eval = (a.dir / "eval_model.onnx").string(),
                    optimizer = (a.dir / "optimizer_model.onnx").string();
  et::CheckpointState state = et::CheckpointState::Load((a.dir / "checkpoint").string());
  et::SessionOptions bad;
  bad.options.frozen_prefix_cache_bytes = -3;
  EXPECT_THROW(et::TrainingSession(state, training, eval, optimizer, bad), et::Error);

  et::TrainingSession plain(et::CheckpointState::Load((a.dir / "checkpoint").string()), training, eval, optimizer);
  et::TrainingSession cached(state, training, eval, optimizer, et::SessionOptions().frozen_prefix_cache(1 << 20));
  for (int epoch = 0; epoch < 2; ++epoch)
    for (const auto& samples : kEpoch) {
      std::vector<Tensor> batch = Batch(samples);
      std::vector<float> x = batch[0].ToVector<float>();
      std::vector<int64_t> y = batch[1].ToVector<int64_t>();
      const std::vector<int64_t> x_shape(batch[0].shape().begin(), batch[0].shape().end());
      const std::vector<et::TensorRef> feeds = {et::TensorRef(x, x_shape), et::TensorRef(y, {batch[1].dim(0)})};
      const float expected = *static_cast<const float*>(et_values_data(plain.TrainStep(feeds).get(), 0));
      et::Values out = cached.TrainStep(feeds);
      EXPECT_EQ(*static_cast<const float*>(et_values_data(out.get(), 0)), expected);
    }
  const auto stats = cached.GetFrozenPrefixCache();
  EXPECT_EQ(stats.samples, 6u);
  EXPECT_EQ(stats.hits, 6u);
  EXPECT_EQ(stats.misses, 6u);
  EXPECT_EQ(stats.bytes, 6u * (kChannels * 4 + 64));

  const Artifacts bn = Generate("capi_training_bn", Backbone::kTrainingBatchNorm);
  try {
    et::TrainingSession refused(et::CheckpointState::Load((bn.dir / "checkpoint").string()),
                                (bn.dir / "training_model.onnx").string(), {}, {},
                                et::SessionOptions().frozen_prefix_cache(1 << 20));
    ADD_FAILURE() << "a training-mode BatchNormalization prefix was cached";
  } catch (const et::Error& e) {
    EXPECT_NE(std::string(e.what()).find("BatchNormalization_1"), std::string::npos) << e.what();
  }
}

// A steady-state step writes the prefix's outputs where the step before did: fresh tensors each step faulted
// in new pages (12.8 MB a step in MobileNetV2's head-only training).
TEST(FrozenPrefix, WritesItsOutputsWhereTheStepBeforeDid) {
  TrainingSession s = EvalCnn().Open();
  for (int warm = 0; warm < 2; ++warm) Step(s, kEpoch[0]);
  const std::vector<Tensor> batch = Batch(kEpoch[1]);
  const uint64_t before = Tensor::allocation_count();
  std::vector<Tensor> out = s.TrainStep(batch);
  const uint64_t during = Tensor::allocation_count() - before;
  TrainingSessionOptions off;
  off.frozen_prefix_as_inference = false;
  TrainingSession whole = EvalCnn().Open(off);
  for (int warm = 0; warm < 2; ++warm) Step(whole, kEpoch[0]);
  const uint64_t whole_before = Tensor::allocation_count();
  std::vector<Tensor> whole_out = whole.TrainStep(batch);
  EXPECT_EQ(during, Tensor::allocation_count() - whole_before);
  EXPECT_NEAR(out[0].data<float>()[0], whole_out[0].data<float>()[0], 1e-5);
}

}  // namespace
