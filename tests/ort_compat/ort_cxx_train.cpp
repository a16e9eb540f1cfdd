// Fashion-MNIST training written against ONNX Runtime's C++ training API (onnxruntime_training_cxx_api.h) and
// nothing else: it compiles unchanged against ORT's headers and against edgetrain's include/ort_compat.
//
// Usage: ort_cxx_train ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N]
// The recipe of examples/c/fashion_mnist.c (batches of 64 in its sample order, AdamW, lr 1e-3 decaying linearly
// to 0), so the accuracy it prints must equal the native example's. It also checks the checkpoint's properties
// and parameters, the parameter buffer, a saved and reloaded checkpoint, and the exported model run by
// Ort::Session, whose accuracy must equal the eval model's.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "onnxruntime_training_cxx_api.h"

namespace {

void Expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("check failed: " + what);
}

size_t IndexOf(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  throw std::runtime_error("the model has no output '" + name + "'");
}

struct Batch {
  std::vector<float> pixels = std::vector<float>(kBatch * kPixels);
  std::vector<int64_t> labels = std::vector<int64_t>(kBatch);
  int64_t size = 0;

  // The model's inputs over this batch's memory: images [size, 1, 28, 28] and, with labels, their classes.
  std::vector<Ort::Value> Values(const Ort::MemoryInfo& memory, bool with_labels) {
    const int64_t image_shape[] = {size, 1, kRows, kColumns};
    const int64_t label_shape[] = {size};
    std::vector<Ort::Value> values;
    values.push_back(Ort::Value::CreateTensor<float>(memory, pixels.data(), size * kPixels, image_shape, 4));
    if (with_labels) values.push_back(Ort::Value::CreateTensor<int64_t>(memory, labels.data(), size, label_shape, 1));
    return values;
  }
};

// Eval-model accuracy on `test` (correct count).
int64_t Evaluate(Ort::TrainingSession& session, const fm_dataset& test, const Ort::MemoryInfo& memory, Batch& batch,
                 double* mean_loss) {
  const std::vector<std::string> outputs = session.OutputNames(false);
  const size_t loss_index = IndexOf(outputs, "loss"), logits_index = IndexOf(outputs, "output");
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t first = 0; first < test.count; first += kBatch) {
    batch.size = fm_batch_size(&test, first);
    fm_fill(&test, nullptr, first, batch.size, batch.pixels.data(), batch.labels.data());
    std::vector<Ort::Value> results = session.EvalStep(batch.Values(memory, true));
    Ort::TensorTypeAndShapeInfo info = results[logits_index].GetTensorTypeAndShapeInfo();
    Expect(info.GetElementType() == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT &&
               info.GetShape() == std::vector<int64_t>{batch.size, kClasses},
           "the eval model's logits are float [batch, 10]");
    loss_sum += *results[loss_index].GetTensorMutableData<float>() * static_cast<double>(batch.size);
    correct += fm_count_correct(results[logits_index].GetTensorMutableData<float>(), batch.labels.data(), batch.size);
  }
  *mean_loss = loss_sum / static_cast<double>(test.count);
  return correct;
}

// The exported model's accuracy, run by an inference session.
int64_t EvaluateExported(const Ort::Env& env, const std::string& path, const fm_dataset& test,
                         const Ort::MemoryInfo& memory, Batch& batch) {
  Ort::SessionOptions options;
  options.SetIntraOpNumThreads(1).SetGraphOptimizationLevel(ORT_ENABLE_ALL);
  Ort::Session session(env, path.c_str(), options);
  Ort::AllocatorWithDefaultOptions allocator;
  Expect(session.GetInputCount() == 1 && session.GetOutputCount() == 1, "the exported model has 1 input, 1 output");
  Ort::AllocatedStringPtr input_name = session.GetInputNameAllocated(0, allocator);
  Ort::AllocatedStringPtr output_name = session.GetOutputNameAllocated(0, allocator);
  Expect(std::string(input_name.get()) == "input" && std::string(output_name.get()) == "output",
         "the exported model's input is 'input' and its output 'output'");
  Ort::TypeInfo input_type = session.GetInputTypeInfo(0);
  std::vector<int64_t> input_shape = input_type.GetTensorTypeAndShapeInfo().GetShape();
  Expect(input_shape.size() == 4 && input_shape[1] == 1 && input_shape[2] == kRows && input_shape[3] == kColumns,
         "the exported model's input is [batch, 1, 28, 28]");
  const char* input_names[] = {input_name.get()};
  const char* output_names[] = {output_name.get()};
  int64_t correct = 0;
  for (int64_t first = 0; first < test.count; first += kBatch) {
    batch.size = fm_batch_size(&test, first);
    fm_fill(&test, nullptr, first, batch.size, batch.pixels.data(), batch.labels.data());
    std::vector<Ort::Value> inputs = batch.Values(memory, false);
    std::vector<Ort::Value> outputs =
        session.Run(Ort::RunOptions{nullptr}, input_names, inputs.data(), 1, output_names, 1);
    correct += fm_count_correct(outputs[0].GetTensorMutableData<float>(), batch.labels.data(), batch.size);
  }
  return correct;
}

std::vector<float> ToVector(Ort::Value& value) {
  const float* data = value.GetTensorMutableData<float>();
  return std::vector<float>(data, data + value.GetTensorTypeAndShapeInfo().GetElementCount());
}

// Properties, parameters and the flat parameter buffer; leaves the trained parameters as they were.
void CheckStateApi(Ort::CheckpointState& state, Ort::TrainingSession& session, int64_t epochs) {
  Expect(std::get<int64_t>(state.GetProperty("epoch")) == epochs, "property 'epoch' reads back");
  state.AddProperty("best_accuracy", 0.875f);
  state.AddProperty("note", std::string("ort-style C++ app"));
  Expect(std::get<float>(state.GetProperty("best_accuracy")) == 0.875f, "a float property reads back");
  Expect(std::get<std::string>(state.GetProperty("note")) == "ort-style C++ app", "a string property reads back");

  Ort::Value trainable = session.ToBuffer(true);
  Ort::Value all = session.ToBuffer(false);
  const size_t parameter_count = trainable.GetTensorTypeAndShapeInfo().GetElementCount();
  Expect(parameter_count == all.GetTensorTypeAndShapeInfo().GetElementCount() && parameter_count > 0,
         "every MLP parameter trains");

  Ort::Value bias = state.GetParameter("net.5.bias");
  std::vector<int64_t> shape = bias.GetTensorTypeAndShapeInfo().GetShape();
  Expect(shape == std::vector<int64_t>{kClasses}, "net.5.bias is [10]");
  std::vector<float> trained = ToVector(bias);
  std::vector<float> changed(trained.size());
  for (size_t i = 0; i < trained.size(); ++i) changed[i] = trained[i] + 1.0f;
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeCPU);
  state.UpdateParameter("net.5.bias",
                        Ort::Value::CreateTensor<float>(memory, changed.data(), changed.size(), shape.data(), 1));
  Ort::Value updated = state.GetParameter("net.5.bias");
  Expect(ToVector(updated) == changed, "UpdateParameter changes the parameter");
  Ort::Value buffer_after_update = session.ToBuffer(true);
  Expect(ToVector(buffer_after_update) != ToVector(trainable), "the session trains the state's parameters");

  session.FromBuffer(trainable);
  Ort::Value restored = state.GetParameter("net.5.bias");
  Expect(ToVector(restored) == trained, "FromBuffer restores the parameters");
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  Expect(file.good(), "cannot open " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// `body` must throw an Ort::Exception with `code` whose message contains `needle`.
template <typename Body>
void ExpectThrows(Body&& body, OrtErrorCode code, const std::string& needle, const std::string& what) {
  try {
    body();
  } catch (const Ort::Exception& e) {
    Expect(e.GetOrtErrorCode() == code && std::string(e.what()).find(needle) != std::string::npos,
           what + ": got code " + std::to_string(e.GetOrtErrorCode()) + ", '" + e.what() + "'");
    return;
  }
  throw std::runtime_error("check failed: " + what + ": no Ort::Exception");
}

// Failures surface as Ort::Exception naming the file, input, property or value; sessions also load from buffers.
void CheckErrors(const Ort::Env& env, const Ort::SessionOptions& options, const std::string& artifacts,
                 const std::string& out) {
  ExpectThrows([&] { Ort::CheckpointState::LoadCheckpoint(out + "/no_checkpoint"); }, ORT_NO_SUCHFILE,
               out + "/no_checkpoint", "LoadCheckpoint of a missing file");
  ExpectThrows([&] { Ort::Session(env, (out + "/no_model.onnx").c_str(), options); }, ORT_NO_SUCHFILE,
               out + "/no_model.onnx", "an inference session of a missing model");
  Ort::CheckpointState state = Ort::CheckpointState::LoadCheckpointFromBuffer(ReadFile(artifacts + "/checkpoint"));
  Ort::TrainingSession session(env, options, state, ReadFile(artifacts + "/training_model.onnx"),
                               ReadFile(artifacts + "/eval_model.onnx"));
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  std::vector<float> pixels(2 * kPixels, 0.5f);
  std::vector<int64_t> labels = {3, 7};
  const int64_t wrong_shape[] = {2, 1, kColumns, kRows - 1}, image_shape[] = {2, 1, kRows, kColumns};
  const int64_t label_shape[] = {2};
  std::vector<Ort::Value> wrong;
  wrong.push_back(Ort::Value::CreateTensor<float>(memory, pixels.data(), 2 * kColumns * (kRows - 1), wrong_shape, 4));
  wrong.push_back(Ort::Value::CreateTensor<int64_t>(memory, labels.data(), 2, label_shape, 1));
  ExpectThrows([&] { session.TrainStep(wrong); }, ORT_INVALID_ARGUMENT, "'input'", "TrainStep with a wrong shape");
  std::vector<Ort::Value> right;
  right.push_back(Ort::Value::CreateTensor<float>(memory, pixels.data(), pixels.size(), image_shape, 4));
  right.push_back(Ort::Value::CreateTensor<int64_t>(memory, labels.data(), 2, label_shape, 1));
  std::vector<Ort::Value> outputs = session.EvalStep(right);
  Expect(std::isfinite(*outputs[0].GetTensorMutableData<float>()), "a session made from buffers evaluates");
  ExpectThrows([&] { session.OptimizerStep(); }, ORT_INVALID_ARGUMENT, "optimizer", "OptimizerStep without one");
  ExpectThrows([&] { state.GetProperty("no_such_property"); }, ORT_INVALID_ARGUMENT, "no_such_property",
               "GetProperty of an unknown name");
  ExpectThrows([&] { session.ExportModelForInferencing(out + "/never.onnx", {"no_such_value"}); },
               ORT_INVALID_ARGUMENT, "no_such_value", "exporting an unknown value");
  Ort::AllocatorWithDefaultOptions allocator;
  const int64_t small_shape[] = {3};
  Ort::Value small = Ort::Value::CreateTensor<float>(allocator, small_shape, 1);
  ExpectThrows([&] { session.FromBuffer(small); }, ORT_INVALID_ARGUMENT, "3 elements", "FromBuffer of a wrong size");
  std::printf("error paths: ok\n");
}

int Run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s ARTIFACT_DIR DATA_DIR OUT_DIR [--epochs N] [--limit N]\n", argv[0]);
    return 2;
  }
  const std::string artifacts = argv[1], data = argv[2], out = argv[3];
  int64_t epochs = 1, limit = 0;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--epochs") epochs = std::atoll(argv[i + 1]);
    if (std::string(argv[i]) == "--limit") limit = std::atoll(argv[i + 1]);
  }

  Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "fashion_mnist");
  Ort::SessionOptions session_options;
  session_options.SetIntraOpNumThreads(1);
  CheckErrors(env, session_options, artifacts, out);
  Ort::CheckpointState state = Ort::CheckpointState::LoadCheckpoint(artifacts + "/checkpoint");
  Ort::TrainingSession session(env, session_options, state, artifacts + "/training_model.onnx",
                               artifacts + "/eval_model.onnx", artifacts + "/optimizer_model.onnx");
  Expect(session.InputNames(true) == std::vector<std::string>{"input", "labels"}, "training inputs: input, labels");
  Expect(session.InputNames(false) == std::vector<std::string>{"input", "labels"}, "eval inputs: input, labels");
  const std::vector<std::string> training_outputs = session.OutputNames(true);
  Expect(!training_outputs.empty() && training_outputs[0] == "loss", "the training model's first output is the loss");

  fm_dataset train{}, test{};
  if (!fm_load(data.c_str(), "train", limit, &train) || !fm_load(data.c_str(), "t10k", limit, &test)) return 1;
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  Batch batch;
  std::vector<int64_t> order(train.count);
  const int64_t steps_per_epoch = (train.count + kBatch - 1) / kBatch;
  session.RegisterLinearLRScheduler(0, epochs * steps_per_epoch, 1e-3f);
  Expect(std::fabs(session.GetLearningRate() - 1e-3f) < 1e-9f, "the schedule without warmup starts at the initial lr");

  int64_t correct = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    Ort::SetSeed(fm_epoch_seed(epoch));
    fm_shuffled_order(order.data(), train.count, epoch);
    double loss_sum = 0;
    for (int64_t first = 0; first < train.count; first += kBatch) {
      batch.size = fm_batch_size(&train, first);
      fm_fill(&train, order.data(), first, batch.size, batch.pixels.data(), batch.labels.data());
      std::vector<Ort::Value> outputs = session.TrainStep(batch.Values(memory, true));
      loss_sum += *outputs[0].GetTensorMutableData<float>();
      session.OptimizerStep();
      session.SchedulerStep();
      session.LazyResetGrad();
    }
    double test_loss = 0;
    correct = Evaluate(session, test, memory, batch, &test_loss);
    state.AddProperty("epoch", epoch + 1);
    Ort::CheckpointState::SaveCheckpoint(state, out + "/checkpoint", true);
    std::printf("epoch %lld: train loss %.4f, lr %.3g; test loss %.4f, test accuracy %.2f%% (%lld/%lld)\n",
                static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(steps_per_epoch),
                session.GetLearningRate(), test_loss,
                100.0 * static_cast<double>(correct) / static_cast<double>(test.count),
                static_cast<long long>(correct), static_cast<long long>(test.count));
  }

  CheckStateApi(state, session, epochs);
  double loss_after_restore = 0;
  Expect(Evaluate(session, test, memory, batch, &loss_after_restore) == correct,
         "the restored parameters classify as before");

  Ort::CheckpointState saved = Ort::CheckpointState::LoadCheckpoint(out + "/checkpoint");
  Expect(std::get<int64_t>(saved.GetProperty("epoch")) == epochs, "the saved checkpoint holds the epoch");
  Ort::Value saved_weight = saved.GetParameter("net.1.weight");
  Ort::Value trained_weight = state.GetParameter("net.1.weight");
  Expect(ToVector(saved_weight) == ToVector(trained_weight), "the saved checkpoint holds the trained weights");

  const std::string exported = out + "/model.onnx";
  session.ExportModelForInferencing(exported, {"output"});
  const int64_t exported_correct = EvaluateExported(env, exported, test, memory, batch);
  std::printf("exported %s: test accuracy %.2f%% (%lld/%lld)\n", exported.c_str(),
              100.0 * static_cast<double>(exported_correct) / static_cast<double>(test.count),
              static_cast<long long>(exported_correct), static_cast<long long>(test.count));
  Expect(exported_correct == correct, "the exported model classifies as the eval model");
  fm_free(&train);
  fm_free(&test);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const Ort::Exception& e) {
    std::fprintf(stderr, "error: Ort::Exception (code %d): %s\n", static_cast<int>(e.GetOrtErrorCode()), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
