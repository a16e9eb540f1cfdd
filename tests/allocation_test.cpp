// What a steady-state training step allocates, for the bundled MLP and LeNet-BN: after warm-up, a
// step (TrainStep into the previous step's outputs + OptimizerStep + LazyResetGrad) allocates no
// tensor memory: intermediates live in the planned arena, the loss is written into the caller's
// tensor, gradients and optimizer updates in place. Small heap allocations (operator new) are
// counted and reported, not yet zero: attribute keys longer than the short-string buffer, pooling
// windows, oneDNN's own calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <random>

#include "autodiff/artifacts.hpp"
#include "training/checkpoint_state.hpp"
#include "training/training_session.hpp"

namespace {
std::atomic<uint64_t> g_heap_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace edgetrain;
namespace fs = std::filesystem;

namespace {

struct StepCost {
  uint64_t tensors = 0, tensor_bytes = 0, heap = 0;
};

// Generates artifacts for `model` (batch `batch`), warms a session up with three steps, then returns
// what one more step allocates.
StepCost SteadyStateStep(const std::string& model, int64_t batch, int threads) {
  const fs::path dir = fs::temp_directory_path() / ("edgetrain_allocation_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  GenerateArtifacts(model, dir.string(), ArtifactOptions{});
  TrainingSessionOptions options;
  options.num_threads = threads;
  TrainingSession session(CheckpointState::Load((dir / "checkpoint").string()), (dir / "training_model.onnx").string(),
                          (dir / "eval_model.onnx").string(), (dir / "optimizer_model.onnx").string(), options);
  fs::remove_all(dir);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> images(static_cast<size_t>(batch * 28 * 28));
  for (float& v : images) v = pixel(rng);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  const std::vector<Tensor> inputs = {Tensor::FromVector<float>(images, {batch, 1, 28, 28}),
                                      Tensor::FromVector<int64_t>(labels, {batch})};
  std::vector<Tensor> outputs;
  auto step = [&] {
    session.TrainStep(inputs, outputs);
    session.OptimizerStep();
    session.LazyResetGrad();
  };
  for (int i = 0; i < 3; ++i) step();
  StepCost cost;
  const uint64_t tensors = Tensor::allocation_count(), bytes = Tensor::allocated_bytes();
  const uint64_t heap = g_heap_allocations.load();
  step();
  cost.tensors = Tensor::allocation_count() - tensors;
  cost.tensor_bytes = Tensor::allocated_bytes() - bytes;
  cost.heap = g_heap_allocations.load() - heap;
  return cost;
}

void ExpectNoTensorAllocated(const char* model, int64_t batch, int threads) {
  const StepCost cost = SteadyStateStep(std::string(EDGETRAIN_MODELS_DIR) + "/" + model, batch, threads);
  EXPECT_EQ(cost.tensors, 0u) << model;
  EXPECT_EQ(cost.tensor_bytes, 0u) << model;
  ::testing::Test::RecordProperty(std::string(model) + "_heap_allocations_per_step", std::to_string(cost.heap));
  std::printf(
      "%s, %d thread(s): a steady-state step allocates %llu tensors (%llu bytes) and makes %llu small heap "
      "allocations\n",
      model, threads, static_cast<unsigned long long>(cost.tensors), static_cast<unsigned long long>(cost.tensor_bytes),
      static_cast<unsigned long long>(cost.heap));
}

TEST(Allocation, MlpStepAllocatesNoTensorMemory) { ExpectNoTensorAllocated("mlp.onnx", 64, 1); }
TEST(Allocation, MlpStepOnTwoThreadsAllocatesNoTensorMemory) { ExpectNoTensorAllocated("mlp.onnx", 64, 2); }
TEST(Allocation, LenetStepAllocatesNoTensorMemory) { ExpectNoTensorAllocated("lenet_bn.onnx", 64, 1); }

}  // namespace
