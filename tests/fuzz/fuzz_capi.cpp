// The C ABI's buffer entry points: a checkpoint and a training model from memory (uint32
// little-endian model size, model, checkpoint), a train step on zero inputs, errors freed.
#include <cstring>
#include <vector>

#include "edgetrain/edgetrain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t model_size;
  std::memcpy(&model_size, data, 4);
  if (model_size > size - 4) return 0;
  const uint8_t* model = data + 4;
  et_checkpoint_state* state = nullptr;
  et_error* error = et_checkpoint_load_from_buffer(model + model_size, size - 4 - model_size, &state);
  if (error) {
    if (et_error_get_code(error) == ET_OK || !*et_error_get_message(error)) __builtin_trap();
    et_error_free(error);
    return 0;
  }
  et_training_session* session = nullptr;
  error = et_training_session_create_from_buffers(state, model, model_size, nullptr, 0, nullptr, 0, nullptr, &session);
  et_checkpoint_free(state);
  if (error) {
    if (et_error_get_code(error) == ET_OK || !*et_error_get_message(error)) __builtin_trap();
    et_error_free(error);
    return 0;
  }
  size_t count = 0;
  size_t parameters = 0;
  et_error_free(et_training_session_input_count(session, ET_MODEL_TRAINING, &count));
  et_error_free(et_training_session_get_parameters_size(session, true, &parameters));
  if (parameters > 0 && parameters < (1u << 22)) {
    std::vector<float> flat(parameters);
    et_error_free(et_training_session_copy_parameters_to_buffer(session, flat.data(), flat.size(), true));
    et_error_free(et_training_session_copy_buffer_to_parameters(session, flat.data(), flat.size(), true));
  }
  et_values* outputs = nullptr;
  error = et_training_session_train_step(session, nullptr, 0, &outputs);  // no inputs: a typed error or a run
  et_error_free(error);
  et_values_free(outputs);
  et_training_session_free(session);
  return 0;
}
