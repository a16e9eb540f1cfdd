// What a steady-state training step allocates, for the bundled MLP and LeNet-BN on 1 and 2 threads,
// with each kernel backend: after warm-up, a step (TrainStep into the previous step's outputs +
// OptimizerStep + LazyResetGrad) allocates no tensor memory (intermediates live in the planned arena,
// the loss is written into the caller's tensor, gradients and optimizer updates in place) and makes
// no heap allocation of its own. The only allocations left are made inside oneDNN: each primitive
// execution builds its argument map there. They are told apart by the call stack and reported.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>
#include <utility>
#include <vector>

#include "autodiff/artifacts.hpp"
#include "core/kernel_backend.hpp"
#include "runtime/session.hpp"
#include "training/checkpoint_state.hpp"
#include "training/training_session.hpp"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_own_allocations{0}, g_dnnl_allocations{0};
std::vector<std::pair<uintptr_t, uintptr_t>> g_dnnl_code;  // libdnnl's executable segments
thread_local bool t_in_hook = false;

// Records the executable segments of the loaded libdnnl (none in a build without oneDNN).
void FindDnnlCode() {
  g_dnnl_code.clear();
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) {
        if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libdnnl")) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
            g_dnnl_code.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        return 0;
      },
      nullptr);
}

// True when one of the caller's frames lies in libdnnl.
bool CalledFromDnnl() {
  void* frames[16];
  const int n = backtrace(frames, 16);
  for (int i = 1; i < n; ++i) {
    const auto pc = reinterpret_cast<uintptr_t>(frames[i]);
    for (const auto& [begin, end] : g_dnnl_code)
      if (pc >= begin && pc < end) return true;
  }
  return false;
}
}  // namespace

void* operator new(size_t size) {
  if (g_counting.load(std::memory_order_relaxed) && !t_in_hook) {
    t_in_hook = true;
    (CalledFromDnnl() ? g_dnnl_allocations : g_own_allocations).fetch_add(1, std::memory_order_relaxed);
    t_in_hook = false;
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that these pair with the replaced operator new above.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace edgetrain;
namespace fs = std::filesystem;

namespace {

struct StepCost {
  uint64_t tensors = 0, tensor_bytes = 0, own_heap = 0, dnnl_heap = 0;
};

// What one call of `step` allocates (after three calls to warm up).
template <typename Step>
StepCost CostOf(Step&& step) {
  for (int i = 0; i < 3; ++i) step();
  FindDnnlCode();
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder before counting starts
  StepCost cost;
  const uint64_t tensors = Tensor::allocation_count(), bytes = Tensor::allocated_bytes();
  const uint64_t own = g_own_allocations.load(), dnnl = g_dnnl_allocations.load();
  g_counting = true;
  step();
  g_counting = false;
  cost.tensors = Tensor::allocation_count() - tensors;
  cost.tensor_bytes = Tensor::allocated_bytes() - bytes;
  cost.own_heap = g_own_allocations.load() - own;
  cost.dnnl_heap = g_dnnl_allocations.load() - dnnl;
  return cost;
}

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
  return CostOf([&] {
    session.TrainStep(inputs, outputs);
    session.OptimizerStep();
    session.LazyResetGrad();
  });
}

struct Case {
  const char* model;
  int threads;
  KernelBackend backend;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.threads << " thread(s) " << (c.backend == KernelBackend::kDnnl ? "oneDNN" : "reference");
}

class Allocation : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().backend == KernelBackend::kDnnl && !DnnlAvailable()) {
      GTEST_SKIP() << "built without oneDNN";
    }
    saved_ = ActiveKernelBackend();
    SetKernelBackend(GetParam().backend);
  }
  void TearDown() override { SetKernelBackend(saved_); }

 private:
  KernelBackend saved_ = KernelBackend::kReference;
};

TEST_P(Allocation, SteadyStateStepAllocatesNothingOfItsOwn) {
  const Case& c = GetParam();
  const StepCost cost = SteadyStateStep(std::string(EDGETRAIN_MODELS_DIR) + "/" + c.model, 64, c.threads);
  EXPECT_EQ(cost.tensors, 0u);
  EXPECT_EQ(cost.tensor_bytes, 0u);
  EXPECT_EQ(cost.own_heap, 0u);
  if (c.backend == KernelBackend::kReference) {
    EXPECT_EQ(cost.dnnl_heap, 0u);
  }
  ::testing::Test::RecordProperty("dnnl_heap_allocations_per_step", std::to_string(cost.dnnl_heap));
  std::printf("%s, %d thread(s), %s kernels: a steady-state step allocates %llu tensors (%llu bytes), makes %llu heap "
              "allocations of its own and %llu inside oneDNN\n",
              c.model, c.threads, c.backend == KernelBackend::kDnnl ? "oneDNN" : "reference",
              static_cast<unsigned long long>(cost.tensors), static_cast<unsigned long long>(cost.tensor_bytes),
              static_cast<unsigned long long>(cost.own_heap), static_cast<unsigned long long>(cost.dnnl_heap));
}

INSTANTIATE_TEST_SUITE_P(Models, Allocation,
                         ::testing::Values(Case{"mlp.onnx", 1, KernelBackend::kDnnl},
                                           Case{"mlp.onnx", 2, KernelBackend::kDnnl},
                                           Case{"lenet_bn.onnx", 1, KernelBackend::kDnnl},
                                           Case{"lenet_bn.onnx", 2, KernelBackend::kDnnl},
                                           Case{"mlp.onnx", 1, KernelBackend::kReference},
                                           Case{"mlp.onnx", 2, KernelBackend::kReference},
                                           Case{"lenet_bn.onnx", 1, KernelBackend::kReference},
                                           Case{"lenet_bn.onnx", 2, KernelBackend::kReference}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.model;
                           name = name.substr(0, name.find('.'));
                           return name + "_" + std::to_string(info.param.threads) + "threads_" +
                                  (info.param.backend == KernelBackend::kDnnl ? "onednn" : "reference");
                         });

// The exported LeNet-BN loads fused: its Conv-Relu-MaxPool nodes keep two kinds of state on the
// reference kernels (conv scratch and pooling windows). A warm run keeps both and allocates nothing.
TEST(Allocation, FusedInferenceRunOnReferenceKernelsAllocatesNothing) {
  const KernelBackend saved = ActiveKernelBackend();
  SetKernelBackend(KernelBackend::kReference);
  const fs::path dir = fs::temp_directory_path() / ("edgetrain_allocation_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  ArtifactOptions options;
  options.additional_outputs = {"output"};  // what the inference export keeps
  GenerateArtifacts(std::string(EDGETRAIN_MODELS_DIR) + "/lenet_bn.onnx", dir.string(), options);
  TrainingSession training(CheckpointState::Load((dir / "checkpoint").string()),
                           (dir / "training_model.onnx").string(), (dir / "eval_model.onnx").string(),
                           (dir / "optimizer_model.onnx").string(), TrainingSessionOptions{});
  training.ExportModelForInference((dir / "inference.onnx").string(), {"output"});
  Session session = Session::FromFile((dir / "inference.onnx").string());
  fs::remove_all(dir);
  session.BindOutput("output", Tensor::Zeros(DataType::kFloat32, {8, 10}));  // the result lands there each run
  const Session::PreparedRun run = session.Prepare({session.InputNames()[0]});
  const std::vector<RuntimeValue> feeds = {RuntimeValue::Of(Tensor::Zeros(DataType::kFloat32, {8, 1, 28, 28}))};
  std::vector<RuntimeValue> outputs;
  const StepCost cost = CostOf([&] { session.RunPrepared(run, feeds, outputs); });
  SetKernelBackend(saved);
  EXPECT_EQ(cost.tensors, 0u);
  EXPECT_EQ(cost.own_heap, 0u);
  EXPECT_EQ(cost.dnnl_heap, 0u);
}

}  // namespace
