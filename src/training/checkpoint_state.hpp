// CheckpointState: the trainable state an app holds on device (parameters, optimizer state,
// properties). Copies share one underlying checkpoint, so a TrainingSession created from a state
// trains the very tensors that a later Save writes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace edgetrain {

class CheckpointState {
 public:
  CheckpointState();
  explicit CheckpointState(Checkpoint checkpoint);

  // Reads an ODTC file (versions 1 and 2; external data in `<path>.data`). Throws kIoError or
  // kInvalidModel naming the path.
  static CheckpointState Load(const std::string& path);
  static CheckpointState LoadFromBuffer(const void* data, size_t size, const std::string& source = "<memory>");
  // Atomic version-2 write (temporary file, fsync, rename). A nominal state saves names and types.
  static void Save(const CheckpointState& state, const std::string& path, bool include_optimizer_state = false,
                   bool external_data = false);

  // Properties: user metadata such as the epoch or the best score.
  void AddProperty(const std::string& name, PropertyValue value);
  PropertyValue GetProperty(const std::string& name) const;  // kInvalidArgument naming an unknown one
  bool HasProperty(const std::string& name) const;
  std::vector<std::string> PropertyNames() const;

  // Parameters (trainable, then frozen, each sorted by name). A nominal state lists names only.
  std::vector<std::string> ParameterNames() const;
  bool IsTrainable(const std::string& name) const;
  Tensor GetParameter(const std::string& name) const;  // a copy; kInvalidArgument naming an unknown one
  // Overwrites a parameter in place; its dtype and shape must match (kInvalidArgument naming it).
  void UpdateParameter(const std::string& name, const Tensor& value);

  bool is_nominal() const;
  bool has_optimizer_state() const;

  // The underlying checkpoint (shared by every copy of this state).
  Checkpoint& checkpoint() { return *checkpoint_; }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

 private:
  std::shared_ptr<Checkpoint> checkpoint_;
};

}  // namespace edgetrain
