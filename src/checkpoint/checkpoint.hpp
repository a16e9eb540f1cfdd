// In-memory form of an ONNX Runtime on-device training checkpoint (ODTC flatbuffer, see
// odtc.fbs): parameters, optional optimizer state and a property bag. Reads format versions 1
// and 2, writes version 2, so ORT loads our checkpoints and we load ORT's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.hpp"

namespace edgetrain {

// One optimizer parameter group (ORT uses a single group, "group0").
struct OptimizerState {
  std::string group_name = "group0";
  int64_t step = 0;
  float initial_learning_rate = 0.0f;
  // Parameter name -> its momentum tensors: [first, second] moment for AdamW, [first] for SGD.
  std::map<std::string, std::vector<Tensor>> momentums;
};

using PropertyValue = std::variant<int64_t, float, std::string>;

struct Checkpoint {
  int32_t version = 2;  // as read; a saved checkpoint is always version 2
  std::map<std::string, Tensor> trainable;
  std::map<std::string, Tensor> frozen;
  // A nominal checkpoint names its parameters and their element types but holds no data. Loaded,
  // it lists them here and leaves `trainable`/`frozen` empty; saved with is_nominal, the tensors in
  // `trainable`/`frozen` contribute their names and element types too.
  bool is_nominal = false;
  std::map<std::string, DataType> nominal_trainable;
  std::map<std::string, DataType> nominal_frozen;
  std::optional<OptimizerState> optimizer;
  std::map<std::string, PropertyValue> properties;
  // Counts writes of frozen parameters from outside a training step (not saved): a session that keeps
  // something computed from them (a folded frozen prefix, its cache) recomputes it when this changes.
  uint64_t frozen_revision = 0;
};

// Total bytes above which SaveCheckpoint moves tensor data to `<path>.data` (FlatBuffers cap at 2 GiB).
constexpr uint64_t kCheckpointExternalDataThreshold = 1'800'000'000;

// Reads a checkpoint file; tensor data kept in `<path>.data` is read too. Throws kIoError when the
// file cannot be read, kInvalidModel when it is corrupt, truncated or of an unknown version.
Checkpoint LoadCheckpoint(const std::string& path);
// Reads a checkpoint from memory; `source` names it in errors. External data is not supported here.
Checkpoint LoadCheckpointFromBuffer(const void* data, size_t size, const std::string& source = "<memory>");

// Writes `checkpoint` as a version-2 ODTC file atomically (temporary file, fsync, rename). With
// `external_data`, or when the tensors exceed kCheckpointExternalDataThreshold, tensor bytes go to
// `<path>.data`, written the same way. Throws kIoError naming the path on failure.
void SaveCheckpoint(const Checkpoint& checkpoint, const std::string& path, bool include_optimizer_state = true,
                    bool external_data = false);
// The ODTC bytes of `checkpoint` with all tensor data embedded (at most 2 GiB).
std::vector<uint8_t> SerializeCheckpoint(const Checkpoint& checkpoint, bool include_optimizer_state = true);

}  // namespace edgetrain
