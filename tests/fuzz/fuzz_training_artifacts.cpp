// The training-artifact set as a device receives it: a training model bound to a checkpoint, then
// one train step on zero inputs. Input: uint32 little-endian model size, model bytes, checkpoint bytes.
#include <cstdint>
#include <cstring>

#include "fuzz_util.hpp"
#include "training/training_session.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgetrain;
  if (size < 4) return 0;
  uint32_t model_size;
  std::memcpy(&model_size, data, 4);
  if (model_size > size - 4) return 0;
  const uint8_t* model = data + 4;
  const uint8_t* checkpoint = model + model_size;
  const size_t checkpoint_size = size - 4 - model_size;
  try {
    CheckpointState state = CheckpointState::LoadFromBuffer(checkpoint, checkpoint_size, "<fuzz checkpoint>");
    TrainingSession session(std::move(state), ModelSource::FromBuffer(model, model_size, "<fuzz model>"));
    std::vector<Tensor> inputs;
    if (!fuzz::SynthesiseInputs(session.TrainingInputInfos(), inputs)) return 0;
    session.TrainStep(inputs);
    session.TrainStep(inputs);  // the second run uses the memory plan the first one built
  } catch (const Error&) {
  }
  return 0;
}
